#!/usr/bin/env bash
# ARM64 (aarch64-unknown-linux-gnu): cross-builds the tracker, the pipeline and the CLI with
# rustup's target and Debian's gcc-aarch64-linux-gnu, lints them for that target while compiling
# (clippy -D warnings), then runs under Debian's qemu-user-static the kernel tests (NEON and
# portable paths against their reference forms) and parity tests small enough for emulation
# (a segment at 256, the memory stages at 256, a tracked sequence at 256) against the committed
# fixtures, with the same tolerances as on x86. Emulation is ~50x slower than a real core: the
# speed of ARM CPUs cannot be measured here.
#
#   scripts/test-aarch64.sh            # what CI runs
#   AARCH64_TESTS=build scripts/test-aarch64.sh    # cross-build and lint only
#   AARCH64_TESTS=prepare scripts/test-aarch64.sh  # only install the target and cross compiler
#
# Idempotent. In CI (scripts/test.sh) the build runs first in the background lane
# (AARCH64_TESTS=build at idle priority), the tests later, when this script finds the build
# fresh. The build goes to AARCH64_TARGET_DIR (default /var/cache/edgetam-ci/aarch64-target
# when that can be written, else target/), so a machine that keeps it rebuilds only what
# changed. Cold: ~10 min on 2 cores (every dependency built for ARM64).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
start=$SECONDS
if ! rustup target list --installed | grep -qx "$TARGET"; then
  rustup target add "$TARGET"
fi
missing=()
for p in gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${AARCH64_TESTS:-all}" = prepare ]; then
  echo "aarch64: target and cross compiler installed"
  exit 0
fi

if [ -z "${AARCH64_TARGET_DIR:-}" ]; then
  cache=${EDGETAM_CI_CACHE:-/var/cache/edgetam-ci}
  if mkdir -p "$cache/aarch64-target" 2>/dev/null && [ -w "$cache/aarch64-target" ]; then
    AARCH64_TARGET_DIR="$cache/aarch64-target"
  else
    AARCH64_TARGET_DIR="$PWD/target"
  fi
fi
export CARGO_TARGET_DIR="$AARCH64_TARGET_DIR"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
# The test binaries run under user-mode emulation with Debian's ARM64 C library.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64-static -L /usr/aarch64-linux-gnu"
# Two emulated threads, as the x86 tests run on two cores.
export RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-2}

# The tests below select the same packages and features as this build: cargo resolves features
# per selection, and `-p edgetam-tracker` alone compiled most dependencies again (2 min cold).
PACKAGES=(-p edgetam-tracker -p edgetam-pipeline -p edgetam -p edgetam-ros2)
# The CLI without its default `video` feature: GStreamer's ARM64 libraries are not installed for
# the cross-build (`--input` then takes folders of frames only). The ROS 2 node (pure Rust,
# RustDDS) is cross-built and linted with the library.
FEATURES=(--no-default-features --features edgetam/hub)
# What the ARM64 tests need, compiled once with clippy's lints (-D warnings) as it
# compiles (clippy-driver as the workspace's compiler, scripts/ci-lib.sh): the lint, the CLI
# and the test binaries below from one build, no separate check-mode pass over the dependencies.
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
ci_lint_while_building
# CI's profile (no debug info) or release.
PROFILE=(--profile "$(ci_cargo_profile)")
BIN_DIR="$CARGO_TARGET_DIR/$TARGET/$(ci_cargo_profile)"
# The libraries, the CLI and the node, and the test binaries run below, in one build: with test
# targets selected cargo resolves the dev-dependencies' features as `cargo test` does, so the
# tests compile nothing again but their own harnesses (a separate `cargo build --bin` would
# resolve other features and compile again). The examples, benches and other tests are the same
# Rust on every architecture: the host build lints them; the NEON code is in the libraries.
ARM_TESTS=(--test vision_parity --test decoder_parity --test memory_parity
  --test memory_attention_parity --test sequence_parity)
cargo build "${PROFILE[@]}" --locked --target "$TARGET" "${PACKAGES[@]}" "${FEATURES[@]}" \
  --lib --bins "${ARM_TESTS[@]}"
# The libraries' own test harnesses (the kernel tests below), which `cargo build --lib` does
# not make: here, so CI's lane compiles them too and the test step compiles nothing.
cargo test "${PROFILE[@]}" --locked --target "$TARGET" "${PACKAGES[@]}" "${FEATURES[@]}" \
  --lib --no-run
file "$BIN_DIR/edgetam" 2>/dev/null || true
echo "aarch64 build + clippy: $((SECONDS - start)) s"
if [ "${AARCH64_TESTS:-all}" = build ]; then
  exit 0
fi

# The CLI runs: it prints the path it takes (NEON).
qemu-aarch64-static -L /usr/aarch64-linux-gnu "$BIN_DIR/edgetam" cpu
qemu-aarch64-static -L /usr/aarch64-linux-gnu "$BIN_DIR/edgetam-ros2" --help >/dev/null

test_start=$SECONDS
status=0
# Kernel tests at every ISA an ARM64 CPU has (NEON, portable): each test walks them itself.
# The memory-attention-sized attention check (4096 x 4096) took 252 s of the 283 emulated; the
# NEON products and softmax are checked on the small and odd shapes.
cargo test "${PROFILE[@]}" --locked --target "$TARGET" "${PACKAGES[@]}" "${FEATURES[@]}" --lib kernels:: \
  -- --skip fused_matches_unfused_memory_attention_shapes || status=$?
# Parity against the committed reference fixtures at 256, the tolerances of the x86 tests.
cargo test "${PROFILE[@]}" --locked --target "$TARGET" "${PACKAGES[@]}" "${FEATURES[@]}" \
  --test vision_parity --test decoder_parity --test memory_parity --test memory_attention_parity \
  -- --skip 1024 || status=$?
# The first 6 frames of the 256 sequence (two objects prompted on frame 0, a third added on
# frame 5, the memory bank filling): the whole 20 took ~6 min emulated.
EDGETAM_SEQUENCE_FRAMES=${EDGETAM_SEQUENCE_FRAMES:-6} \
  cargo test "${PROFILE[@]}" --locked --target "$TARGET" "${PACKAGES[@]}" "${FEATURES[@]}" \
    --test sequence_parity \
  -- --exact sequence_256_free_running || status=$?
echo "aarch64 tests under qemu: $((SECONDS - test_start)) s"
exit "$status"
