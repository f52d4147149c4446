#!/usr/bin/env bash
# The Python package (python/): builds its abi3 wheels with maturin as PyPI takes them
# (manylinux_2_28: x86_64, and aarch64 cross-built), checks both with auditwheel, installs the
# x86_64 one into a clean venv where an example runs, type-checks the stubs with mypy --strict
# over the examples and tests, then runs the pytest suite, which compares the package with the
# Rust library (the `edgetam` CLI, built here too) on the committed fixtures. Exits non-zero
# when any of these fails (pytest's status otherwise).
#
# The wheels are compiled as usual (the workspace's target/ for x86_64; aarch64 with Debian's
# cross gcc into AARCH64_TARGET_DIR, the cache scripts/test-aarch64.sh fills) and only their
# final link goes through zig (PyPI's `ziglang`) against glibc 2.28's symbols, so the manylinux
# tag costs no extra build of the dependencies. PYTHON_AARCH64_WHEEL=0 skips the aarch64 wheel;
# PYTHON_AARCH64_RUN=0 builds and audits it without running it under qemu (run_aarch64_wheel).
#
# The venv (python/requirements-dev.txt, from PyPI) lives outside the clone, under
# /var/cache/edgetam-ci when writable, else ~/.cache/edgetam-ci, and is remade when the
# requirements change. EDGETAM_CLI_FEATURES: cargo features of the CLI build (scripts/test.sh
# passes its own, so the CLI it already built is reused).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
cache=$(ci_cache_dir)
venv=$cache/python-venv
req=python/requirements-dev.txt
if ! cmp -s "$req" "$venv/requirements-dev.txt"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$venv/requirements-dev.txt"
fi
echo "python venv ($venv): $((SECONDS - start)) s"
# `--prepare`: only the venv (network-bound; CI makes it in the background early on).
if [ "${1:-}" = --prepare ]; then exit 0; fi
failures=0
# `python -m ziglang cc` for TRIPLE against glibc 2.28, as a linker: rustc's gcc-style
# arguments, except libgcc_s (zig links its own unwinder) and a flag zig's lld lacks.
zig_linker() {
  local f=$cache/zig-cc-$1-2.28.sh
  {
    echo '#!/usr/bin/env bash'
    echo 'args=()'
    echo 'for a in "$@"; do'
    echo '  case $a in -lgcc_s) args+=(-lunwind) ;; -Wl,-znostart-stop-gc) ;; *) args+=("$a") ;; esac'
    echo 'done'
    echo "exec '$venv/bin/python' -m ziglang cc -target $1-linux-gnu.2.28 \"\${args[@]}\""
  } > "$f.tmp"
  chmod +x "$f.tmp" && mv "$f.tmp" "$f"
  echo "$f"
}
# `audit WHEEL ARCH`: auditwheel's verdict, which must be manylinux_2_28 (or lower) for ARCH.
audit() {
  local out
  out=$("$venv/bin/auditwheel" show "$1" 2>&1)
  echo "$out"
  if grep -qE "manylinux_2_(1[0-9]|2[0-8])_$2" <<< "$out"; then
    echo "python ok: auditwheel: $(basename "$1") is manylinux_2_28 or lower"
  else
    echo "python FAIL: auditwheel show $(basename "$1")"
    failures=$((failures + 1))
  fi
}
# The Rust results the parity tests compare with: the CLI of scripts/test.sh's build (its
# selection, found fresh) or, run by hand, built here.
profile=$(ci_cargo_profile)
if [ -n "${EDGETAM_CLI_FEATURES:-}" ]; then
  FEATURES=$EDGETAM_CLI_FEATURES ci_build_workspace
else
  cargo build --profile "$profile" --bin edgetam
fi
EDGETAM_CLI=${EDGETAM_CLI:-$(realpath "$(ci_profile_dir)")/edgetam}
export EDGETAM_CLI
# The wheel (manylinux_2_28: maturin refuses a library needing newer glibc symbols), then a
# clean install of it (what `pip install edgetam-*.whl` installs). After scripts/test.sh's
# workspace build only the wheel's own crates compile (the tracker and the pipeline have fewer
# features here: no OpenCV in a wheel); python/Cargo.toml's feature pins keep every dependency
# as that build compiled it, and a dependency compiled again here says the pins are out of date.
rm -rf target/wheels/edgetam-*.whl
wheel_log=$(mktemp)
"$venv/bin/maturin" build --profile "$profile" --manifest-path python/Cargo.toml --out target/wheels \
  --interpreter "$venv/bin/python" --compatibility manylinux_2_28 \
  -- -C linker="$(zig_linker x86_64)" 2>&1 | tee "$wheel_log"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  echo "python FAIL: maturin build"
  exit 1
fi
if [ -n "${EDGETAM_CLI_FEATURES:-}" ]; then
  # pyo3, pyo3-ffi and numpy always compile again: their build scripts read the interpreter
  # maturin names (PYO3_PYTHON and the like), which the workspace build does not set.
  again=$(ci_recompiled "$wheel_log" | tr ' ' '\n' | { grep -vxE 'pyo3|pyo3-ffi|numpy|' || true; } | tr '\n' ' ')
  if [ -n "$again" ]; then
    echo "python: the wheel compiled $(wc -w <<< "$again") dependencies again after the workspace build: $again(the feature pins in python/Cargo.toml are out of date)"
  else
    echo "python: the wheel compiled no dependency again after the workspace build (pyo3 and numpy aside)"
  fi
fi
rm -f "$wheel_log"
wheel=$(ls target/wheels/edgetam-*.whl)
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
echo "wheel $(basename "$wheel"): $(stat -c %s "$wheel") bytes; build: $((SECONDS - start)) s"
audit "$wheel" x86_64

# A user's clean venv: `pip install edgetam-*.whl[examples]` (numpy and OpenCV from PyPI), then
# the examples from outside the source tree: a clip made, then tracked to an overlay video.
t0=$SECONDS
clean=$(mktemp -d)
repo=$PWD
python3 -m venv "$clean/venv"
if "$clean/venv/bin/pip" install --quiet --disable-pip-version-check "$wheel[examples]" &&
  (cd "$clean" && "$clean/venv/bin/python" "$repo/python/examples/make_clip.py" clip.mp4 8 &&
    "$clean/venv/bin/python" "$repo/python/examples/track_video.py" \
      "$repo/fixtures/model" clip.mp4 out.mp4 --box 30,90,90,150 --input-size 256 &&
    test -s out.mp4); then
  echo "python ok: clean venv: pip install $(basename "$wheel"), examples ran ($((SECONDS - t0)) s)"
else
  echo "python FAIL: clean venv install + examples"
  failures=$((failures + 1))
fi
rm -rf "$clean"

# `run_aarch64_wheel WHEEL`: the aarch64 wheel imported and run by an arm64 CPython under
# qemu-user (scripts/arm64-python.sh), with numpy, OpenCV and pytest's aarch64 wheels from PyPI:
# the parity tests on the fixtures (PYTHON_AARCH64_TESTS: pytest's test ids) against the
# aarch64 `edgetam` CLI, also under qemu. Emulation is ~50x slower, hence a few cases.
run_aarch64_wheel() {
  local t0=$SECONDS root site cli wrap
  root=$(bash scripts/arm64-python.sh)
  site=$(mktemp -d)
  export CARGO_TARGET_DIR=${AARCH64_TARGET_DIR:-$cache/aarch64-target}
  cli=$CARGO_TARGET_DIR/aarch64-unknown-linux-gnu/$profile/edgetam
  if ! (CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
    cargo build --profile "$profile" --locked --target aarch64-unknown-linux-gnu -p edgetam \
      --no-default-features --features edgetam/hub --bin edgetam) ||
    ! "$venv/bin/pip" install --quiet --disable-pip-version-check --target "$site" \
      --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 --python-version 3.11 \
      --implementation cp --only-binary=:all: "numpy<2.3" opencv-python-headless pytest "$1"; then
    echo "python FAIL: aarch64: the CLI or the wheels to run the tests under qemu"
    failures=$((failures + 1))
    rm -rf "$site"
    unset CARGO_TARGET_DIR
    return
  fi
  unset CARGO_TARGET_DIR
  wrap=$site/edgetam-cli
  printf '#!/bin/sh\nexec qemu-aarch64-static -L %s %s "$@"\n' "$root" "$cli" > "$wrap"
  chmod +x "$wrap"
  if (cd python/tests && EDGETAM_CLI=$wrap PYTHONPATH=$site PYTHONDONTWRITEBYTECODE=1 \
    qemu-aarch64-static -L "$root" "$root/usr/bin/python3.11" -c \
      'import platform, sys, edgetam, pytest; print("arm64 python", platform.machine(), edgetam.__version__); sys.exit(pytest.main(sys.argv[1:]))' \
      -p no:cacheprovider -q -rs ${PYTHON_AARCH64_TESTS:-"test_parity.py::test_tracker_matches_rust[rgb]" test_parity.py::test_pipeline_matches_rust}); then
    echo "python ok: aarch64 wheel under qemu: parity with the aarch64 CLI ($((SECONDS - t0)) s)"
  else
    echo "python FAIL: aarch64 wheel under qemu"
    failures=$((failures + 1))
  fi
  rm -rf "$site"
}

# aarch64: the same wheel cross-built (Debian's gcc-aarch64-linux-gnu and rustup's target, as
# scripts/test-aarch64.sh installs them), linked by zig for glibc 2.28, checked by auditwheel.
if [ "${PYTHON_AARCH64_WHEEL:-1}" = 1 ]; then
  t0=$SECONDS
  rm -rf target/wheels-aarch64
  if (
    export CARGO_TARGET_DIR=${AARCH64_TARGET_DIR:-$cache/aarch64-target}
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
    export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
    "$venv/bin/maturin" build --profile "$profile" --target aarch64-unknown-linux-gnu \
      --manifest-path python/Cargo.toml --out target/wheels-aarch64 \
      --compatibility manylinux_2_28 -- -C linker="$(zig_linker aarch64)"
  ); then
    arm_wheel=$(ls target/wheels-aarch64/edgetam-*.whl)
    echo "aarch64 wheel $(basename "$arm_wheel"): $(stat -c %s "$arm_wheel") bytes ($((SECONDS - t0)) s)"
    audit "$arm_wheel" aarch64
    if [ "${PYTHON_AARCH64_RUN:-1}" = 1 ]; then run_aarch64_wheel "$arm_wheel"; fi
  else
    echo "python FAIL: aarch64 wheel build"
    failures=$((failures + 1))
  fi
fi

# The stubs against their users: mypy --strict over the examples and tests.
t0=$SECONDS
if (cd python && MYPYPATH=. "$venv/bin/mypy" --strict --no-incremental examples tests edgetam); then
  echo "python ok: mypy --strict ($((SECONDS - t0)) s)"
else
  echo "python FAIL: mypy --strict"
  failures=$((failures + 1))
fi
set +e
# Run from outside python/ so `import edgetam` is the installed wheel, not the source folder.
(cd python/tests && "$venv/bin/python" -m pytest -p no:cacheprovider -q -rs .)
status=$?
set -e
echo "python tests: $((SECONDS - start)) s"
if [ "$status" -eq 0 ] && [ "$failures" -gt 0 ]; then status=1; fi
exit "$status"
