#!/usr/bin/env bash
# Runs the whole test suite as CI does: system packages, formatting, lints, then the tests in
# release mode (the model is far too slow unoptimised). Ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# Features tested in CI. Not `--all-features`: some features need what a Debian 12 machine
# without a GPU lacks (CUDA, GStreamer >= 1.24); those get their own build checks below.
FEATURES="edgetam/tokio,edgetam/opencv,edgetam-pipeline/tokio,edgetam-pipeline/opencv"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
cargo clippy --release --workspace --all-targets --features "$FEATURES" -- -D warnings
# The guide (docs/, mdBook) built, and every relative link and #anchor in it and in README.md,
# BENCHMARKS.md and ARCHITECTURE.md checked (scripts/build-docs.sh). mdbook is installed once
# into /var/cache/edgetam-ci/mdbook (~4.5 min cold on 2 busy cores), then ~1 s. A broken link
# fails the run at the end, with the other steps' results.
docs_start=$SECONDS
logdocs=$(mktemp)
set +e
bash scripts/build-docs.sh 2>&1 | tee "$logdocs"
docs_status=${PIPESTATUS[0]}
set -e
docs_summary=$(grep -E '^docs: [0-9]+ pages' "$logdocs" | tail -n 1 | sed 's/^docs: //' || true)
rm -f "$logdocs"
echo "docs (mdbook build + link check): $((SECONDS - docs_start)) s"
# The element's analytics code (features v1_24 / v1_26: GStreamer >= 1.24 / 1.26, not in
# Debian 12) is linted here without linking, by skipping pkg-config for the GStreamer
# libraries; scripts/test-debian13.sh below builds and tests it against a real GStreamer 1.26.
for feature in v1_24 v1_26; do
  SYSTEM_DEPS_GSTREAMER_1_0_NO_PKG_CONFIG=1 SYSTEM_DEPS_GSTREAMER_1_0_LIB=gstreamer-1.0 \
  SYSTEM_DEPS_GSTREAMER_BASE_1_0_NO_PKG_CONFIG=1 SYSTEM_DEPS_GSTREAMER_BASE_1_0_LIB=gstbase-1.0 \
  SYSTEM_DEPS_GSTREAMER_VIDEO_1_0_NO_PKG_CONFIG=1 SYSTEM_DEPS_GSTREAMER_VIDEO_1_0_LIB=gstvideo-1.0 \
  SYSTEM_DEPS_GSTREAMER_ANALYTICS_1_0_NO_PKG_CONFIG=1 SYSTEM_DEPS_GSTREAMER_ANALYTICS_1_0_LIB=gstanalytics-1.0 \
    cargo clippy --release -p gst-plugin-edgetam --all-targets --features "$feature" -- -D warnings
done
# The `cuda` feature must keep compiling although CI has no GPU, no driver and no CUDA from
# Debian: nvcc and the CUDA headers come from NVIDIA's PyPI wheels (into .cuda-toolkit/), and
# clippy type-checks without linking (candle links the CUDA libraries dynamically, which a
# GPU-less machine lacks). Not in FEATURES: the tests stay CPU-only. Cold, this adds ~13 min on
# 2 cores (nvcc compiling candle's kernels is most of it), ~10 s when nothing changed.
cuda_start=$SECONDS
bash scripts/install-cuda-toolkit.sh
(
  # shellcheck source=scripts/cuda-env.sh
  source scripts/cuda-env.sh
  cargo clippy --release --workspace --all-targets --features "$FEATURES,edgetam/cuda" -- -D warnings
)
echo "cuda build check: $((SECONDS - cuda_start)) s"
if [ "${SKIP_CUDA_BUILD:-0}" != 1 ]; then
  # `cargo build --features cuda` as well, linked: against stub CUDA libraries (sonames and
  # symbol names only; the real libraries load at run time on a GPU machine). This is the
  # bundle scripts/gpu-check.sh runs on a lent GPU, so CI proves it builds. ~10 min on 2 cores;
  # SKIP_CUDA_BUILD=1 skips it locally.
  bundle_start=$SECONDS
  GPU_CUDA_MAJOR=12 bash scripts/build-gpu-bundle.sh
  echo "cuda linked build (gpu-bundle): $((SECONDS - bundle_start)) s"
fi
# The minimum Rust the workspace declares (rust-version) must really build the library crates:
# a dependency that raises its own minimum shows up here, not on a user's machine.
msrv_start=$SECONDS
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
rustup toolchain list | grep -q "^$msrv-" || rustup toolchain install "$msrv" --profile minimal
msrv_target=/var/cache/edgetam-ci/msrv-target
mkdir -p "$msrv_target" 2>/dev/null && [ -w "$msrv_target" ] || msrv_target=target/msrv
CARGO_TARGET_DIR=$msrv_target cargo "+$msrv" check --release --locked \
  -p edgetam-tracker -p edgetam-pipeline -p edgetam --lib
echo "msrv (Rust $msrv) check: $((SECONDS - msrv_start)) s"
log=$(mktemp)
log13=$(mktemp)
logcapi=$(mktemp)
logpy=$(mktemp)
trap 'rm -f "$log" "$log13" "$logcapi" "$logpy"' EXIT
set +e
cargo test --release --workspace --features "$FEATURES" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# Every narrower instruction set this CPU runs (EDGETAM_ISA=avx2, =portable on an AVX-512
# machine): the kernel and parity tests again on each path, the test binaries above reused.
isas_start=$SECONDS
FEATURES="$FEATURES" bash scripts/test-isas.sh 2>&1 | tee -a "$log"
isas=${PIPESTATUS[0]}
echo "narrower ISAs (kernel + parity tests): $((SECONDS - isas_start)) s"
if [ "$status" -eq 0 ]; then status=$isas; fi
# ARM64: cross-built, linted, kernel and small parity tests under qemu (scripts/test-aarch64.sh).
aarch64_start=$SECONDS
bash scripts/test-aarch64.sh 2>&1 | tee -a "$log"
aarch64=${PIPESTATUS[0]}
echo "aarch64 (cross build + qemu tests): $((SECONDS - aarch64_start)) s"
if [ "$status" -eq 0 ]; then status=$aarch64; fi
set -e
# The plugin against GStreamer 1.26 (features v1_24 and v1_26: analytics metas, the stock
# objectdetectionoverlay, a PyGObject client) in a Debian 13 root, cached under
# /var/cache/edgetam-ci. Cold: the root ~5 min (debootstrap + packages, network-bound) and the
# dependencies built once (~13 CPU-minutes, ~8 min on 2 cores); warm, on a fresh clone: the
# workspace crates and the plugin's test binaries rebuild, then 45 tests (~3-4 min on a quiet
# 2-core machine; 11.7 min measured on a loaded shared one). SKIP_DEBIAN13=1 skips it.
if [ "${SKIP_DEBIAN13:-0}" != 1 ]; then
  debian13_start=$SECONDS
  set +e
  bash scripts/test-debian13.sh 2>&1 | tee "$log13"
  debian13=${PIPESTATUS[0]}
  set -e
  echo "debian 13 (GStreamer 1.26) build + tests: $((SECONDS - debian13_start)) s"
  if [ "$status" -eq 0 ]; then status=$debian13; fi
fi
# The fuzz targets (fuzz/, cargo-fuzz + libFuzzer), each on its committed seeds for FUZZ_SECONDS
# (15 s by default). The first run installs cargo-fuzz (~1 min) and builds the instrumented
# targets (~9 min on 2 cores); the build is kept in /var/cache/edgetam-ci/fuzz-target where that
# can be written, so later runs rebuild only what changed.
fuzz_start=$SECONDS
set +e
bash scripts/fuzz.sh
fuzz_status=$?
set -e
echo "fuzz: $((SECONDS - fuzz_start)) s"
# The Python package (python/): its abi3 wheel built with maturin and installed into a venv
# cached under /var/cache/edgetam-ci, then its pytest suite (parity with the CLI built above, bad
# inputs, threads, memory). Warm: ~1-2 min; cold adds the venv (~1 min) and the module's build.
python_start=$SECONDS
set +e
EDGETAM_CLI_FEATURES="$FEATURES" bash scripts/test-python.sh 2>&1 | tee "$logpy"
python_status=${PIPESTATUS[0]}
set -e
# pytest -q's closing line, e.g. "43 passed in 61.20s".
python_summary=$(grep -E '^[0-9]+ (passed|failed|error)|[0-9]+ (passed|failed|errors?) in ' "$logpy" | tail -n 1 || true)
echo "python: ${python_summary:-no pytest summary}; $((SECONDS - python_start)) s"
if [ "$status" -eq 0 ] && [ "$python_status" -ne 0 ]; then status=$python_status; fi
# The C ABI (capi/) as C and C++ programs use it (scripts/test-capi.sh): installed into a
# temporary prefix, programs built with gcc / g++ through pkg-config, results byte-equal to the
# Rust library's, bad inputs, ASan and valgrind. Its unit tests (the header check among them)
# ran in the workspace tests above; the library is built with its own features, not the
# workspace's (which put OpenCV into the tracker, so into libedgetam.a): the tracker and the
# C ABI crate compile once more (~2-3 min on 2 cores cold), then ~1 min of programs plus
# valgrind (~7 min on the shared 2-core machine, the bad-input program's four tracked frames
# the longest; one output per replay).
capi_start=$SECONDS
set +e
CAPI_SKIP_CARGO_TEST=1 bash scripts/test-capi.sh 2>&1 | tee "$logcapi"
capi_status=${PIPESTATUS[0]}
set -e
echo "capi (C and C++ programs): $((SECONDS - capi_start)) s"
if [ "$status" -eq 0 ] && [ "$capi_status" -ne 0 ]; then status=$capi_status; fi
# cargo prints one "test result" line per test binary (the last ones are often empty doc-tests):
# add them up so the closing line says how many tests ran in all.
count='/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
       END { printf "%d passed, %d failed", p, f }'
echo "tests: $(awk "$count" "$log") (Debian 12), $(awk "$count" "$log13") (Debian 13, GStreamer 1.26), python: ${python_summary:-none}, docs: ${docs_summary:-no summary (scripts/build-docs.sh failed to run)}"
grep -E '^capi: [0-9]+ passed' "$logcapi" | tail -n 1 || echo "capi: no summary (scripts/test-capi.sh failed to run)"
if [ "$status" -eq 0 ] && [ "$docs_status" -ne 0 ]; then
  echo "docs: the guide failed to build or has a broken link (above)"
  status=$docs_status
fi
if [ "$status" -eq 0 ] && [ "$fuzz_status" -ne 0 ]; then
  echo "fuzz: a target found something (fuzz/artifacts/)"
  status=$fuzz_status
fi
exit "$status"
