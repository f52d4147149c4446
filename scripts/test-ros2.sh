#!/usr/bin/env bash
# The ROS 2 node (ros2/, binary edgetam-ros2) against a real ROS 2 peer: rclpy from PyPI wheels
# (Kilted, then Jazzy), Fast DDS underneath, talking to the node's RustDDS over loopback. The
# peer (tools/ros2/peer_checks.py) publishes a generated clip as sensor_msgs/Image, prompts on
# ~/prompt and checks the masks' headers, their bytes against `edgetam track`'s, the live drop
# mode at 30 Hz, bad frames and load errors; its PASS / FAIL lines are counted here.
#
# Every DDS process runs inside one private network and mount namespace (`unshare -n -m`): `lo`
# is the only interface, every packet goes to 127.0.0.1 (unicast discovery: the node with
# ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, the peer with tools/ros2/fastdds-loopback.xml), and
# Fast DDS's shared-memory files go to a private /dev/shm that vanishes with the namespace.
# Needs root (or unprivileged user namespaces) for unshare.
#
# The venvs (tools/ros2/requirements*.txt, every wheel pinned) live outside the clone, under
# /var/cache/edgetam-ci when writable, else ~/.cache/edgetam-ci, one per requirements hash.
# Measured on a busy 2-core machine: venvs 45-52 s each when cold (network), peer checks ~55 s
# (Kilted) + ~35 s (Jazzy) warm; plus the release build of edgetam-ros2 when it is not built yet.
#
# EDGETAM_ROS2_DISTROS: the distros to run (default "kilted jazzy"). EDGETAM_CLI_FEATURES: cargo
# features of scripts/test.sh's build (then its binaries are reused, as test-python.sh does).
# Closing line: `ros2: N passed, M failed`; exit status 1 when anything failed.
# `--prepare` only makes the venvs (network-bound; CI makes them in the background early on).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$SECONDS
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
finish() {
  echo "ros2: $passed passed, $failed failed ($((SECONDS - start)) s)"
  [ "$failed" -eq 0 ] && exit 0 || exit 1
}

# --- system tools --------------------------------------------------------------------------
if ! command -v ip >/dev/null 2>&1; then
  step=$SECONDS
  if timeout 300 apt-get install -y -qq iproute2 >/dev/null 2>&1 ||
    { timeout 300 apt-get update -qq >/dev/null 2>&1 && timeout 300 apt-get install -y -qq iproute2 >/dev/null 2>&1; }; then
    echo "apt iproute2: $((SECONDS - step)) s"
  else
    fail "setup: iproute2 (ip) is missing and could not be installed"
    finish
  fi
fi
if ! timeout 10 unshare -n -m true 2>/dev/null; then
  fail "setup: unshare -n -m does not work here (needs root or user namespaces)"
  finish
fi

# --- venvs ---------------------------------------------------------------------------------
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
cache=$(ci_cache_dir)
# venv_for REQ NAME: prints the venv's path, made when it has no completion mark (a run cut
# short leaves none, so the next one starts it again).
venv_for() {
  local req=$1 name=$2 hash venv
  hash=$(sha256sum "$req" | cut -c1-16)
  venv=$cache/$name-$hash
  if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2 &&
      timeout 900 "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2 ||
      { rm -rf "$venv"; return 1; }
    touch "$venv/.complete"
  fi
  echo "$venv"
}

# venv_of DISTRO: that distro's requirements file.
venv_of() {
  case $1 in
    kilted) echo tools/ros2/requirements.txt ;;
    jazzy) echo tools/ros2/requirements-jazzy.txt ;;
    *) return 1 ;;
  esac
}
if [ "${1:-}" = --prepare ]; then
  for distro in ${EDGETAM_ROS2_DISTROS:-kilted jazzy}; do
    req=$(venv_of "$distro") || { echo "ros2: unknown distro $distro"; exit 1; }
    step=$SECONDS
    venv_for "$req" "ros2-venv-$distro" > /dev/null || { echo "ros2: venv from $req failed"; exit 1; }
    echo "ros2: $distro venv ready ($((SECONDS - step)) s)"
  done
  exit 0
fi

# --- builds --------------------------------------------------------------------------------
step=$SECONDS
profile=$(ci_cargo_profile)
if [ -n "${EDGETAM_CLI_FEATURES:-}" ]; then
  # scripts/test.sh's selection (ci_build_workspace): its build, found fresh.
  FEATURES=$EDGETAM_CLI_FEATURES ci_build_workspace ||
    { fail "setup: the workspace build (scripts/ci-lib.sh ci_build_workspace)"; finish; }
else
  timeout 3600 cargo build --profile "$profile" -p edgetam-ros2 || { fail "setup: cargo build -p edgetam-ros2"; finish; }
  timeout 3600 cargo build --profile "$profile" -p edgetam --bin edgetam || { fail "setup: cargo build -p edgetam --bin edgetam"; finish; }
fi
target=$(realpath "$(ci_profile_dir)")
node=$target/edgetam-ros2
cli=$target/edgetam
for b in "$node" "$cli"; do
  [ -x "$b" ] || { fail "setup: $b was not built"; finish; }
done
echo "build (edgetam-ros2, edgetam): $((SECONDS - step)) s"

model=$root/fixtures/model
work=$(mktemp -d /tmp/edgetam-ros2-test.XXXXXX)
trap 'rm -rf "$work"' EXIT

# --- one distro ----------------------------------------------------------------------------
# run_distro NAME REQUIREMENTS [PEER ARGS...]
run_distro() {
  local distro=$1 req=$2 venv dir domain log rc
  shift 2
  local step=$SECONDS
  if ! venv=$(venv_for "$req" "ros2-venv-$distro"); then
    fail "$distro: venv from $req (pip install failed)"
    return
  fi
  echo "$distro venv ($venv): $((SECONDS - step)) s"
  dir=$work/$distro
  mkdir -p "$dir/roslog"
  domain=$((RANDOM % 100 + 1))
  log=$dir/peer.log
  ls /dev/shm >"$dir/shm.before" 2>/dev/null
  # One private network + mount namespace for the node, the peer and the CLI (only `lo`, a
  # private /dev/shm): tools/ros2/netns.sh.
  ROS_DOMAIN_ID=$domain ROS_LOG_DIR=$dir/roslog ROS_HOME=$dir timeout --kill-after=10 900 \
    tools/ros2/netns.sh "$venv/bin/python" tools/ros2/peer_checks.py \
    --node "$node" --cli "$cli" --model "$model" --work "$dir" "$@" 2>&1 |
    sed -u "s/^/[$distro] /" | tee "$log"
  rc=${PIPESTATUS[0]}
  # Fast DDS files this run left in the shared /dev/shm (only when the private mount failed).
  ls /dev/shm 2>/dev/null | grep '^fastdds_' | grep -vxF -f "$dir/shm.before" |
    while read -r f; do rm -f "/dev/shm/$f"; done
  local p f
  p=$(grep -c "^\[$distro\] PASS " "$log")
  f=$(grep -c "^\[$distro\] FAIL " "$log")
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    fail "$distro: the peer program ended with status $rc (timeout 124) before reporting a failure"
  fi
  echo "$distro: $p passed, $f failed; $((SECONDS - step)) s"
}

for distro in ${EDGETAM_ROS2_DISTROS:-kilted jazzy}; do
  case $distro in
    kilted) run_distro kilted "$(venv_of kilted)" ;;
    # The second distro runs the checks that exercise the wire (masks, stamps, drops), not the
    # CLI comparison of other encodings or the load errors a second time.
    jazzy) run_distro jazzy "$(venv_of jazzy)" --only identity,drop --frames 12 ;;
    *) fail "unknown distro $distro in EDGETAM_ROS2_DISTROS" ;;
  esac
done
finish
