#!/usr/bin/env bash
# Builds and tests the GStreamer plugin against a real GStreamer 1.26 (Debian 13 "trixie"), with
# the analytics features `v1_24` and `v1_26`, in a Debian 13 root made with debootstrap. Debian 12
# (the host, GStreamer 1.22) cannot link those features; this runs them for real.
#
#   scripts/test-debian13.sh            make the root if needed, build, test (CI: scripts/test.sh)
#   scripts/test-debian13.sh --prepare  only make / update the root
#   scripts/test-debian13.sh --build    make the root if needed and compile the tests (v1_26),
#                                       run nothing (CI: its background lane, before the tests)
#   scripts/test-debian13.sh --shell    an interactive shell in the root (repo at /src)
#   scripts/test-debian13.sh --run CMD  one command in the root (in /src), e.g.
#       --run 'cargo test --release -p gst-plugin-edgetam --features v1_26 --test analytics'
#
# Cached between runs, outside the clone (EDGETAM_CI_CACHE, default /var/cache/edgetam-ci):
#   debian13/root/    the Debian 13 root (~5 min to make once, ~3 GB)
#   debian13/target/  its cargo target folder (the build against 1.26 differs from the host's;
#                     ~2.5 GB)
# A run that finds both up to date only rebuilds what changed in the repo. Delete the folder
# (`rm -rf --one-file-system`, never while this script runs) to start over.
#
# Runs as root (mounts and chroot; CI runs as root); as another user it re-runs itself with
# sudo. The host's rustup toolchain and cargo registry are bind-mounted into the root (read-only
# toolchain; the registry is filled on the host by `cargo fetch`, so cargo runs offline inside).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

MODE=test
case "${1:-}" in
  "") ;;
  --prepare) MODE=prepare ;;
  --build) MODE=build ;;
  --shell) MODE=shell ;;
  --run)
    MODE=run
    RUN_CMD=${2:?--run needs a command}
    ;;
  -h | --help)
    sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "error: unknown argument $1 (try --help)" >&2
    exit 2
    ;;
esac

# The host's toolchain, found before any sudo (which changes HOME).
RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}
# The cargo profile of the build: scripts/ci-lib.sh's (`ci` in CI, else `release`).
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
EDGETAM_CARGO_PROFILE=$(ci_cargo_profile)
export EDGETAM_CARGO_PROFILE
if [ "$(id -u)" -ne 0 ]; then
  echo "debian13: needs root (mount, chroot): re-running with sudo"
  exec sudo --preserve-env=EDGETAM_CI_CACHE,DEBIAN13_MIRROR,EDGETAM_CARGO_PROFILE \
    RUSTUP_HOME="$RUSTUP_HOME" CARGO_HOME="$CARGO_HOME" "$0" "$@"
fi
export RUSTUP_HOME CARGO_HOME
if [ ! -x "$CARGO_HOME/bin/cargo" ] || [ ! -d "$RUSTUP_HOME/toolchains" ]; then
  echo "error: no rustup toolchain at RUSTUP_HOME=$RUSTUP_HOME / CARGO_HOME=$CARGO_HOME" >&2
  exit 1
fi
TOOLCHAIN=$(cd "$REPO" && "$CARGO_HOME/bin/rustup" show active-toolchain | awk '{print $1}')

CACHE=${EDGETAM_CI_CACHE:-/var/cache/edgetam-ci}/debian13
ROOT=$CACHE/root
TARGET=$CACHE/target
mkdir -p "$CACHE" "$TARGET"
started=$SECONDS
say() { printf 'debian13 [%4d s] %s\n' "$((SECONDS - started))" "$*"; }

# One run at a time per cache (a second waits).
exec 9>"$CACHE/lock"
if ! flock -n 9; then
  say "another run holds $CACHE/lock: waiting"
  flock 9
fi

# What the root needs: GStreamer 1.26 with the bad plugins (objectdetectionoverlay, the
# gstreamer-analytics library and its headers/pkg-config), a C toolchain for the linker and the
# crates that compile C (gcc, libc6-dev), the tools the tests run (gst-launch-1.0) and
# PyGObject with the GStreamer typelibs (GstAnalytics) for the Python client test, and the
# stock facedetect detector (gstreamer1.0-opencv, its cascades in opencv-data, the sample
# photo in opencv-doc) as in scripts/install-deps.sh.
PACKAGES=(gcc libc6-dev pkg-config
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstreamer-plugins-bad1.0-dev
  python3 python3-gi python3-gst-1.0 gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0
  gir1.2-gst-plugins-bad-1.0 gstreamer1.0-opencv opencv-data opencv-doc)
WANT=$(printf '%s\n' "${PACKAGES[@]}" | sort | sha256sum | cut -c1-16)

# Debian's mirror: the host's own (its apt sources), unless DEBIAN13_MIRROR says otherwise.
mirror() {
  if [ -n "${DEBIAN13_MIRROR:-}" ]; then
    echo "$DEBIAN13_MIRROR"
    return
  fi
  local m
  m=$(grep -rhoE '^(URIs:|deb)[[:space:]]+(\[[^]]*\][[:space:]]+)?https?://[^[:space:]]+/debian/?([[:space:]]|$)' \
    /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    grep -oE 'https?://[^[:space:]]+' | head -n1 || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# Mounts inside the root, undone in reverse order on exit (also on failure or Ctrl-C).
MOUNTED=()
unmount_all() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[i]}" 2>/dev/null || umount -l "${MOUNTED[i]}" 2>/dev/null || true
  done
  MOUNTED=()
}
trap unmount_all EXIT
trap 'exit 130' INT TERM
bind() { # bind SRC DEST [ro]
  mkdir -p "$2"
  mount --bind "$1" "$2"
  MOUNTED+=("$2")
  if [ "${3:-}" = ro ]; then mount -o remount,bind,ro "$2"; fi
}
mount_system() {
  mkdir -p "$ROOT/proc" "$ROOT/sys" "$ROOT/dev"
  mount -t proc proc "$ROOT/proc"
  MOUNTED+=("$ROOT/proc")
  bind /sys "$ROOT/sys" ro
  bind /dev "$ROOT/dev"
  if mountpoint -q /dev/pts; then bind /dev/pts "$ROOT/dev/pts"; fi
  # Shared memory (Python's multiprocessing, some GStreamer allocators).
  if mountpoint -q /dev/shm; then bind /dev/shm "$ROOT/dev/shm"; fi
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
}
# Refuse to delete a folder anything is mounted under (it would reach into the host).
assert_unmounted() {
  if findmnt -rn -o TARGET | grep -q "^$1\(/\|$\)"; then
    echo "error: something is still mounted under $1; unmount it first" >&2
    exit 1
  fi
}

make_root() {
  command -v debootstrap >/dev/null || {
    say "installing debootstrap on the host"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
  }
  local m tmp=$CACHE/root.partial
  m=$(mirror)
  assert_unmounted "$tmp"
  rm -rf --one-file-system "$tmp"
  say "debootstrap --variant=minbase trixie from $m (a few minutes)"
  debootstrap --variant=minbase trixie "$tmp" "$m" >"$CACHE/debootstrap.log" 2>&1 || {
    tail -n 30 "$CACHE/debootstrap.log" >&2
    echo "error: debootstrap failed (log: $CACHE/debootstrap.log)" >&2
    exit 1
  }
  mv "$tmp" "$ROOT"
  echo "deb $m trixie main" >"$ROOT/etc/apt/sources.list"
  say "root made"
}

install_packages() {
  if [ "$(cat "$ROOT/.edgetam-packages" 2>/dev/null)" = "$WANT" ]; then
    say "root's packages up to date ($(chroot "$ROOT" dpkg-query -W -f='${Version}' libgstreamer1.0-0) GStreamer)"
    return
  fi
  say "apt-get install in the root: ${PACKAGES[*]}"
  chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 \
    sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $(printf '%s ' "${PACKAGES[@]}") && apt-get clean" \
    >"$CACHE/apt.log" 2>&1 || {
    tail -n 30 "$CACHE/apt.log" >&2
    echo "error: apt-get in the root failed (log: $CACHE/apt.log)" >&2
    exit 1
  }
  echo "$WANT" >"$ROOT/.edgetam-packages"
  say "installed GStreamer $(chroot "$ROOT" dpkg-query -W -f='${Version}' libgstreamer1.0-0)"
}

# Mounts a killed run left behind (deepest first).
for m in $(findmnt -rn -o TARGET | grep "^$CACHE/" | sort -r || true); do
  umount -l "$m" || true
done
if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
  make_root
fi
mount_system
install_packages
if [ "$MODE" = prepare ]; then
  say "root ready: $ROOT"
  exit 0
fi

# The crates, fetched on the host (network) so cargo runs offline in the root.
say "cargo fetch (host)"
"$CARGO_HOME/bin/cargo" fetch --locked -q

bind "$RUSTUP_HOME" "$ROOT/opt/rustup" ro
bind "$CARGO_HOME" "$ROOT/opt/cargo"
bind "$REPO" "$ROOT/src"
bind "$TARGET" "$ROOT/target"
mkdir -p "$ROOT/tmp" && chmod 1777 "$ROOT/tmp"
# The tests' scratch folders (a copy of the plugin each, ~110 MB) from earlier runs.
rm -rf --one-file-system "$ROOT"/tmp/edgetam-gst-*

# Lints while compiling, as on the host (scripts/ci-lib.sh, which scripts/test.sh turns on): the
# same clippy-driver, seen from inside the root. The analytics code (v1_24, v1_26) is linted
# here, the only place it links.
LINT_ENV=()
if [ -n "${RUSTC_WORKSPACE_WRAPPER:-}" ] && [ "${RUSTC_WORKSPACE_WRAPPER#"$RUSTUP_HOME"/}" != "$RUSTC_WORKSPACE_WRAPPER" ]; then
  LINT_ENV=(RUSTC_WORKSPACE_WRAPPER="/opt/rustup/${RUSTC_WORKSPACE_WRAPPER#"$RUSTUP_HOME"/}"
    CLIPPY_ARGS="${CLIPPY_ARGS:-}")
fi
in_root() {
  chroot "$ROOT" /usr/bin/env -i HOME=/root LC_ALL=C.UTF-8 TERM="${TERM:-dumb}" \
    PATH=/opt/cargo/bin:/usr/local/bin:/usr/bin:/bin \
    RUSTUP_HOME=/opt/rustup CARGO_HOME=/opt/cargo RUSTUP_TOOLCHAIN="$TOOLCHAIN" \
    CARGO_TARGET_DIR=/target CARGO_NET_OFFLINE=true CARGO_TERM_COLOR=never "${LINT_ENV[@]}" \
    sh -c "cd /src && $1"
}

if [ "$MODE" = shell ]; then
  say "shell in the root (repo at /src, target at /target); exit to unmount"
  in_root 'exec bash -i' || true
  exit 0
fi
if [ "$MODE" = run ]; then
  say "in the root: $RUN_CMD"
  set +e
  in_root "$RUN_CMD"
  rc=$?
  set -e
  say "exit $rc"
  exit "$rc"
fi

say "GStreamer in the root: $(in_root 'pkg-config --modversion gstreamer-analytics-1.0') (gstreamer-analytics-1.0)"
log=$CACHE/test.log
if [ "$MODE" = build ]; then log=$CACHE/build.log; fi
: >"$log"
status=0
# v1_26 (every Mtd, segmentation too) runs the plugin's whole test suite; v1_24 (what an
# Ubuntu 24.04 build gets) runs the analytics tests, whose expectations follow the feature.
declare -A TESTS=(
  [v1_26]=""
  [v1_24]="--test analytics --test analytics_launch"
)
# The plugin's library is a cdylib: cargo names it (and its rlib) without a hash, so a build
# with one feature overwrites the other's while cargo still deems that one fresh. The plugin
# is cleaned when the feature changes, and the run starts with the feature built last.
# --build compiles the first feature's tests only (what the run then finds fresh).
PROFILE=$EDGETAM_CARGO_PROFILE
marker=$TARGET/.edgetam-plugin-feature
order=(v1_26 v1_24)
if [ "$(cat "$marker" 2>/dev/null)" = v1_24 ]; then order=(v1_24 v1_26); fi
if [ "$MODE" = build ]; then order=("${order[0]}"); fi
for feature in "${order[@]}"; do
  tests=${TESTS[$feature]}
  no_run="" what="build + test"
  if [ "$MODE" = build ]; then no_run="--no-run" what="build (the tests compiled, not run)"; fi
  say "$what gst-plugin-edgetam --features $feature (profile $PROFILE; ${tests:-every test})"
  t=$SECONDS
  if [ "$(cat "$marker" 2>/dev/null)" != "$feature" ]; then
    in_root "cargo clean --profile $PROFILE -q -p gst-plugin-edgetam"
  fi
  echo "$feature" >"$marker"
  set +e
  # --no-fail-fast: every test binary runs even when one fails. The console gets the test
  # results and failures, the workspace crates' compile lines and a count of the others.
  in_root "cargo test --profile $PROFILE --locked --no-fail-fast $no_run -p gst-plugin-edgetam --features $feature $tests" 2>&1 |
    tee -a "$log" | awk '
      /^ *Compiling / { n++; if ($2 ~ /^(edgetam|gst-plugin)/ || n % 50 == 0) { printf "  compiling: %d crates (%s)\n", n, $2; fflush() } next }
      /^ *(Finished|Running) |^test result:|^test .* FAILED|^error(\[|:)|^---- |^thread .* panicked/ { print; fflush() }'
  rc=${PIPESTATUS[0]}
  set -e
  say "$feature: exit $rc in $((SECONDS - t)) s"
  if [ "$rc" -ne 0 ]; then status=$rc; fi
done
rm -rf --one-file-system "$ROOT"/tmp/edgetam-gst-*
if [ "$MODE" = build ]; then
  say "built in $((SECONDS - started)) s (full log: $log)"
  exit "$status"
fi
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "debian13 tests: %d passed, %d failed\n", p, f }' "$log"
say "done in $((SECONDS - started)) s (full log: $log)"
exit "$status"
