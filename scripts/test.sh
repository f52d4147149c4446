#!/usr/bin/env bash
# Runs the whole test suite as CI does: system packages, formatting, then the workspace compiled
# once with clippy's lints (-D warnings) and tested in release mode (the model is far too slow
# unoptimised), then the step scripts: narrower ISAs, CUDA build, MSRV, ARM64, Debian 13, ROS 2,
# fuzz, docs, Python, C ABI. Ends with each step's seconds and one summary line.
#
# What keeps a cold run short (2 cores; CI's limit is 90 min):
# * one compile per configuration: clippy-driver compiles the workspace's crates while linting
#   them (scripts/ci-lib.sh), for the host build, the CUDA build and the ARM64 build alike, so no
#   dependency is compiled a second time in check mode;
# * caches outside the clone (scripts/ci-lib.sh: the target folder, the CUDA toolkit, the Debian
#   13 root, the ARM64 target, venvs, mdbook, cargo-fuzz);
# * steps whose inputs did not change since they last passed are skipped (`ci_passed`, keyed on
#   the files each step reads; EDGETAM_CI_FULL=1 runs them all);
# * no core idles for long: the C ABI step (its memcheck runs are single-threaded) runs beside
#   the fuzz, docs and Python steps, and the fuzz targets run two at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
run_start=$SECONDS
t=$SECONDS
bash scripts/install-deps.sh
ci_step_time "system packages" $((SECONDS - t))
# Features tested in CI. Not `--all-features`: some features need what a Debian 12 machine
# without a GPU lacks (CUDA, GStreamer >= 1.24); those get their own build steps below.
FEATURES="edgetam/tokio,edgetam/opencv,edgetam-pipeline/tokio,edgetam-pipeline/opencv"
export FEATURES
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
ci_link_target
# CI's binaries carry no debug info (the release profile keeps line tables for profiling by
# hand): test binaries a third the size, faster links, a cache that grows three times slower.
if [ "${CI:-}" = true ]; then export CARGO_PROFILE_RELEASE_DEBUG=${CARGO_PROFILE_RELEASE_DEBUG:-0}; fi

# What later steps download (the CUDA toolkit's wheels, the Debian 13 root and its packages, the
# MSRV toolchain, the ARM64 target and cross compiler) is fetched in the background while the
# workspace compiles: on a cold machine that is several minutes of network-bound work taken off
# the critical path. Each step still runs its own (idempotent) installer, which then finds it
# done; a failure here shows up there, with its message.
prefetch_log=$(mktemp)
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
(
  set +e
  ci_no_lint
  bash scripts/install-cuda-toolkit.sh
  rustup toolchain list | grep -q "^$msrv-" || rustup toolchain install "$msrv" --profile minimal
  AARCH64_TESTS=prepare bash scripts/test-aarch64.sh
  if [ "${SKIP_DEBIAN13:-0}" != 1 ]; then bash scripts/test-debian13.sh --prepare; fi
  true
) > "$prefetch_log" 2>&1 &
prefetch_pid=$!
prefetch_wait() {
  if [ -n "${prefetch_pid:-}" ]; then
    wait "$prefetch_pid" || true
    prefetch_pid=""
    echo "prefetch (in the background): $(grep -c . "$prefetch_log") lines of output, the tail:"
    tail -n 5 "$prefetch_log"
  fi
}

# From here every cargo command of the workspace (the step scripts' too) lints while it
# compiles; the MSRV check, the fuzz build and the Debian 13 root set their own.
ci_lint_while_building

log=$(mktemp)
log13=$(mktemp)
logcapi=$(mktemp)
logpy=$(mktemp)
logros=$(mktemp)
logdocs=$(mktemp)
logfuzz=$(mktemp)
trap 'if [ -n "${capi_pid:-}" ]; then kill "$capi_pid" 2> /dev/null; fi
  rm -f "$log" "$log13" "$logcapi" "$logcapi.rc" "$logpy" "$logros" "$logdocs" "$logfuzz" "$prefetch_log"' EXIT
status=0
keep() { if [ "$status" -eq 0 ] && [ "$1" -ne 0 ]; then status=$1; fi; }

# The workspace: every target compiled once with the lints (benches and examples included, as
# `cargo clippy --all-targets` would), then the tests (doc tests too).
t=$SECONDS
set +e
cargo test --release --locked --workspace --all-targets --features "$FEATURES" --no-run
lint=$?
set -e
if [ "$lint" -ne 0 ]; then
  echo "clippy (-D warnings) or the build failed above"
  exit "$lint"
fi
ci_step_time "workspace build + clippy" $((SECONDS - t))
t=$SECONDS
set +e
cargo test --release --locked --workspace --features "$FEATURES" 2>&1 | tee "$log"
keep "${PIPESTATUS[0]}"
set -e
ci_step_time "workspace tests" $((SECONDS - t))

# Every narrower instruction set this CPU runs (EDGETAM_ISA=avx2, =portable on an AVX-512
# machine): the kernel and parity tests again on each path, the test binaries above reused.
t=$SECONDS
ci_gated isas "$log" tracker memory-bank pipeline fixtures Cargo.lock Cargo.toml scripts/test-isas.sh \
  -- bash scripts/test-isas.sh || keep $?
ci_step_time "narrower ISAs" $((SECONDS - t))

# The `cuda` feature must keep building although CI has no GPU, no driver and no CUDA from
# Debian: nvcc and the CUDA headers come from NVIDIA's PyPI wheels (scripts/install-cuda-toolkit.sh,
# cached outside the clone), and the build links against stub CUDA libraries
# (scripts/build-gpu-bundle.sh: the bundle scripts/gpu-check.sh runs on a GPU machine). One
# compile: the lints (-D warnings) run while it builds; every `cfg(feature = "cuda")` line is in
# the tracker's library and its cuda_parity test, both in the bundle. SKIP_CUDA_BUILD=1 skips it.
prefetch_wait
t=$SECONDS
if [ "${SKIP_CUDA_BUILD:-0}" != 1 ]; then
  ci_gated cuda /dev/null tracker memory-bank pipeline src Cargo.lock Cargo.toml \
    scripts/build-gpu-bundle.sh scripts/install-cuda-toolkit.sh scripts/cuda-env.sh \
    -- env GPU_CUDA_MAJOR=12 bash scripts/build-gpu-bundle.sh || keep $?
fi
ci_step_time "cuda build (lint + link)" $((SECONDS - t))

# The minimum Rust the workspace declares (rust-version) must really build the library crates:
# a dependency that raises its own minimum shows up here, not on a user's machine.
t=$SECONDS
msrv_check() {
  ci_no_lint
  rustup toolchain list | grep -q "^$msrv-" || rustup toolchain install "$msrv" --profile minimal
  CARGO_TARGET_DIR="$(ci_cache_dir)/msrv-target" cargo "+$msrv" check --release --locked \
    -p edgetam-tracker -p edgetam-pipeline -p edgetam --lib
}
ci_gated msrv /dev/null tracker memory-bank pipeline src Cargo.lock Cargo.toml \
  -- msrv_check || keep $?
ci_step_time "msrv (Rust $msrv) check" $((SECONDS - t))

# ARM64: cross-built and linted, kernel and small parity tests under qemu (scripts/test-aarch64.sh).
t=$SECONDS
ci_gated aarch64 "$log" tracker memory-bank pipeline src ros2 fixtures Cargo.lock Cargo.toml \
  scripts/test-aarch64.sh scripts/ci-lib.sh -- bash scripts/test-aarch64.sh || keep $?
ci_step_time "aarch64 (cross build + qemu tests)" $((SECONDS - t))

# The plugin against GStreamer 1.26 (features v1_24 and v1_26: analytics metas, the stock
# objectdetectionoverlay, a PyGObject client) in a Debian 13 root, cached under
# /var/cache/edgetam-ci, compiled with the same lints: this is where the analytics code is
# linted (Debian 12's GStreamer 1.22 cannot link it). Cold: the root ~5 min (debootstrap +
# packages, network-bound) and the dependencies built once (~8 min on 2 cores); warm: the
# workspace crates and the plugin's test binaries rebuild, then 45 tests. SKIP_DEBIAN13=1 skips
# it.
t=$SECONDS
if [ "${SKIP_DEBIAN13:-0}" != 1 ]; then
  ci_gated debian13 "$log13" tracker memory-bank pipeline plugins fixtures Cargo.lock Cargo.toml \
    scripts/test-debian13.sh -- bash scripts/test-debian13.sh || keep $?
fi
ci_step_time "debian 13 (GStreamer 1.26)" $((SECONDS - t))

# The ROS 2 node against a real rclpy peer (Kilted and Jazzy wheels from PyPI) in a private
# network namespace (scripts/test-ros2.sh; the binaries built above are reused).
t=$SECONDS
ros_summary=""
if [ -f scripts/test-ros2.sh ]; then
  set +e
  EDGETAM_CLI_FEATURES="$FEATURES" bash scripts/test-ros2.sh 2>&1 | tee "$logros"
  keep "${PIPESTATUS[0]}"
  set -e
  ros_summary=$(grep -E '^ros2: [0-9]+ passed' "$logros" | tail -n 1 || true)
fi
ci_step_time "ros2" $((SECONDS - t))

# The C ABI (capi/) as C and C++ programs use it (scripts/test-capi.sh): installed into a
# temporary prefix, programs built with gcc / g++, results byte-equal to the Rust library's, bad
# inputs, ASan and valgrind. Its unit tests ran in the workspace tests above. It runs in the
# background from here, beside the fuzz, docs and Python steps: its memcheck runs are
# single-threaded and, run last, left one of the two cores idle for minutes (its step time
# overlaps theirs). Its output is printed when it ends.
t_capi=$SECONDS
(
  set +e
  CAPI_SKIP_CARGO_TEST=1 bash scripts/test-capi.sh > "$logcapi" 2>&1
  echo $? > "$logcapi.rc"
) &
capi_pid=$!

# The fuzz targets (fuzz/, cargo-fuzz + libFuzzer), each on its committed seeds for FUZZ_SECONDS
# (15 s by default); the instrumented build is kept in the cache.
t=$SECONDS
set +e
(ci_no_lint && bash scripts/fuzz.sh) 2>&1 | tee "$logfuzz"
fuzz_status=${PIPESTATUS[0]}
set -e
ci_step_time "fuzz" $((SECONDS - t))

# The guide built (mdBook) and every relative link and #anchor in it and in README.md,
# BENCHMARKS.md and ARCHITECTURE.md checked (scripts/build-docs.sh).
t=$SECONDS
set +e
bash scripts/build-docs.sh 2>&1 | tee "$logdocs"
docs_status=${PIPESTATUS[0]}
set -e
docs_summary=$(grep -E '^docs: [0-9]+ pages' "$logdocs" | tail -n 1 | sed 's/^docs: //' || true)
ci_step_time "docs" $((SECONDS - t))

# The Python package (python/): its abi3 wheel built with maturin and installed into a cached
# venv, then its pytest suite (parity with the CLI built above, bad inputs, threads, memory).
t=$SECONDS
set +e
# The aarch64 wheel (cross-built, linked by zig for glibc 2.28, checked by auditwheel) is left
# to `scripts/test-python.sh` run by hand: its build of the Python crate's dependencies for ARM64
# does not fit CI's time next to everything else. PYTHON_AARCH64_WHEEL=1 turns it on here.
EDGETAM_CLI_FEATURES="$FEATURES" PYTHON_AARCH64_WHEEL=${PYTHON_AARCH64_WHEEL:-0} \
  bash scripts/test-python.sh 2>&1 | tee "$logpy"
keep "${PIPESTATUS[0]}"
set -e
# pytest -q's closing line, e.g. "43 passed in 61.20s".
python_summary=$(grep -E '^[0-9]+ (passed|failed|error)|[0-9]+ (passed|failed|errors?) in ' "$logpy" | tail -n 1 || true)
ci_step_time "python" $((SECONDS - t))

# The C ABI step started above.
set +e
wait "$capi_pid"
set -e
capi_pid=""
cat "$logcapi"
keep "$(cat "$logcapi.rc" 2> /dev/null || echo 1)"
ci_step_time "capi (C and C++ programs, beside fuzz, docs and python)" $((SECONDS - t_capi))

ci_step_time "total" $((SECONDS - run_start))
ci_step_summary
echo "disk: $(ci_disk_free) after the run"
# cargo prints one "test result" line per test binary (the last ones are often empty doc-tests):
# add them up so the closing line says how many tests ran in all.
count='/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
       END { printf "%d passed, %d failed", p, f }'
if grep -q '^debian13: skipped' "$log13"; then
  d13="Debian 13: unchanged since it passed"
else
  d13="$(awk "$count" "$log13") (Debian 13, GStreamer 1.26)"
fi
echo "tests: $(awk "$count" "$log") (Debian 12), $d13, python: ${python_summary:-none}, ${ros_summary:-ros2: not run}, docs: ${docs_summary:-no summary (scripts/build-docs.sh failed to run)}"
grep -E '^capi: [0-9]+ passed' "$logcapi" | tail -n 1 || echo "capi: no summary (scripts/test-capi.sh failed to run)"
if [ "$status" -eq 0 ] && [ "$docs_status" -ne 0 ]; then
  echo "docs: the guide failed to build or has a broken link (above)"
  status=$docs_status
fi
if [ "$status" -eq 0 ] && [ "$fuzz_status" -ne 0 ]; then
  # Which target and its input, here at the end where a truncated CI log still shows them.
  grep -E '^fuzz [a-z_0-9]+: .*FINDING|panicked at|^==[0-9]+==ERROR|artifacts/[a-z_0-9]+/(crash|leak|timeout|oom)-' \
    "$logfuzz" | sort -u || true
  echo "fuzz: a target found something (fuzz/artifacts/)"
  status=$fuzz_status
fi
exit "$status"
