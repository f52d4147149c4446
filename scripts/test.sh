#!/usr/bin/env bash
# Runs the whole test suite as CI does: system packages, formatting, then the workspace compiled
# once with clippy's lints (-D warnings) and tested in its optimised profile (the model is far
# too slow unoptimised), then the step scripts: narrower ISAs, CUDA build, MSRV, ARM64, Debian
# 13, ROS 2, C ABI, fuzz, docs, Python. Ends with each step's seconds and the total against the
# budget (60 minutes cold on the slowest 2-core host; CI's own limit is 90).
#
# What keeps a cold run short (2 cores):
# * one compile per configuration: the `ci` profile (Cargo.toml: release without debug info)
#   for every host compile, one selection for every host step (scripts/ci-lib.sh
#   ci_build_workspace: the workspace build, the CLI of the ISA, ROS 2 and Python steps,
#   libedgetam of the C ABI step are one build), feature pins where a crate must be built alone
#   (the Python wheel), and clippy-driver compiling the workspace's crates while linting them,
#   so no dependency is compiled a second time in check mode;
# * each step compiles only what it proves: the CUDA step links an unoptimised build (profile
#   `ci-link`, device code without optimisation), the MSRV step only checks;
# * a background lane (scripts/ci-lib.sh ci_lane_start): the compiles no early step needs (the
#   CUDA link check, the MSRV check, the ARM64 and Debian 13 builds, the fuzz targets, mdbook)
#   run at idle priority from the start, on whatever core the foreground steps leave idle, and
#   each step waits for its own; downloads (toolkits, the Debian 13 root, venvs) run beside
#   them from the first minute;
# * memcheck where it pays: the C ABI's bad-input program on the portable kernels, which
#   valgrind runs some 15x faster than the AVX2 ones (scripts/test-capi.sh);
# * caches outside the clone (scripts/ci-lib.sh: target folders, the CUDA toolkit, the Debian
#   13 root, venvs, mdbook, cargo-fuzz);
# * steps whose inputs did not change since they last passed are skipped (`ci_passed`, keyed on
#   the files each step reads; EDGETAM_CI_FULL=1 runs them all).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
run_start=$SECONDS
t=$SECONDS
bash scripts/install-deps.sh
ci_step_time "system packages" $((SECONDS - t))
FEATURES=$CI_FEATURES
export FEATURES
# Every step script builds with this profile (`ci` in CI).
EDGETAM_CARGO_PROFILE=$(ci_cargo_profile)
export EDGETAM_CARGO_PROFILE
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
ci_link_target
# The tools CI installs with `cargo install` (cargo-fuzz, mdbook) build with their own release
# profiles: no debug info for them either.
if [ "${CI:-}" = true ]; then export CARGO_PROFILE_RELEASE_DEBUG=${CARGO_PROFILE_RELEASE_DEBUG:-0}; fi
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
cache=$(ci_cache_dir)

# The inputs each gated step reads (ci_gated, ci_passed): a step that passed with the same
# inputs is skipped, in the foreground and in the lane alike.
ISAS_INPUTS=(tracker memory-bank pipeline fixtures Cargo.lock Cargo.toml scripts/test-isas.sh)
CUDA_INPUTS=(tracker memory-bank pipeline src Cargo.lock Cargo.toml scripts/build-gpu-bundle.sh
  scripts/install-cuda-toolkit.sh scripts/cuda-env.sh)
MSRV_INPUTS=(tracker memory-bank pipeline src Cargo.lock Cargo.toml)
AARCH64_INPUTS=(tracker memory-bank pipeline src ros2 fixtures Cargo.lock Cargo.toml
  scripts/test-aarch64.sh scripts/ci-lib.sh)
DEBIAN13_INPUTS=(tracker memory-bank pipeline plugins fixtures Cargo.lock Cargo.toml
  scripts/test-debian13.sh)

# Downloads (network-bound, at normal priority from the first minute): the CUDA toolkit's
# wheels, the MSRV toolchain, the ARM64 target and cross compiler, the Debian 13 root and its
# packages, the ROS 2 and Python venvs. Each step still runs its own (idempotent) installer,
# which then finds it done; a failure here shows up there, with its message.
prefetch_log=$(mktemp)
prefetch_done=$prefetch_log.done
(
  set +e
  ci_no_lint
  bash scripts/install-cuda-toolkit.sh
  rustup toolchain list | grep -q "^$msrv-" || rustup toolchain install "$msrv" --profile minimal
  AARCH64_TESTS=prepare bash scripts/test-aarch64.sh
  if [ "${SKIP_DEBIAN13:-0}" != 1 ]; then bash scripts/test-debian13.sh --prepare; fi
  bash scripts/test-ros2.sh --prepare
  bash scripts/test-python.sh --prepare
  touch "$prefetch_done"
) > "$prefetch_log" 2>&1 &
prefetch_pid=$!

# The background lane's jobs, in the order the steps need them (scripts/ci-lib.sh). The first
# waits for the downloads. The workspace's crates are linted as they compile, as in the
# foreground.
lane_downloads() {
  while [ ! -f "$prefetch_done" ] && kill -0 "$prefetch_pid" 2> /dev/null; do sleep 2; done
  echo "downloads (beside the first steps): $(grep -c . "$prefetch_log") lines of output, the tail:"
  tail -n 8 "$prefetch_log"
}
# The `cuda` feature must keep building although CI has no GPU, no driver and no CUDA from
# Debian: nvcc and the CUDA headers come from NVIDIA's PyPI wheels (scripts/install-cuda-toolkit.sh,
# cached outside the clone), and the binaries link against stub CUDA libraries
# (scripts/build-gpu-bundle.sh --link-check: the same build as the bundle scripts/gpu-check.sh
# runs on a GPU machine, unoptimised). Every `cfg(feature = "cuda")` line is in the tracker's
# library and its cuda_parity test, both linted while they compile. Its own target folder: two
# cargo processes cannot share one.
lane_cuda() {
  [ "${SKIP_CUDA_BUILD:-0}" != 1 ] || { echo "cuda: skipped (SKIP_CUDA_BUILD=1)"; return 0; }
  ci_lint_while_building
  ci_gated cuda /dev/null "${CUDA_INPUTS[@]}" \
    -- env GPU_CUDA_MAJOR=12 CARGO_TARGET_DIR="$cache/cuda-target" \
    bash scripts/build-gpu-bundle.sh --link-check
}
# The minimum Rust the workspace declares (rust-version) must really build the library crates:
# a dependency that raises its own minimum shows up here, not on a user's machine.
msrv_check() {
  ci_no_lint
  rustup toolchain list | grep -q "^$msrv-" || rustup toolchain install "$msrv" --profile minimal
  CARGO_TARGET_DIR="$cache/msrv-target" cargo "+$msrv" check --release --locked \
    -p edgetam-tracker -p edgetam-pipeline -p edgetam --lib
}
lane_msrv() { ci_gated msrv /dev/null "${MSRV_INPUTS[@]}" -- msrv_check; }
# ARM64: cross-built and linted here, tested under qemu in the foreground step.
lane_aarch64_build() {
  if ci_passed aarch64 "$(ci_inputs_key "${AARCH64_INPUTS[@]}")"; then
    echo "aarch64: inputs unchanged since it passed, not built"
    return 0
  fi
  ci_lint_while_building
  AARCH64_TESTS=build bash scripts/test-aarch64.sh
}
# Debian 13: the plugin's tests compiled in the root (made by the downloads), run in the step.
lane_debian13_build() {
  if [ "${SKIP_DEBIAN13:-0}" = 1 ] ||
    ci_passed debian13 "$(ci_inputs_key "${DEBIAN13_INPUTS[@]}")"; then
    echo "debian13: skipped or unchanged since it passed, not built"
    return 0
  fi
  ci_lint_while_building
  bash scripts/test-debian13.sh --build
}
# The fuzz targets, instrumented (cargo-fuzz installed first).
lane_fuzz_build() {
  ci_no_lint
  FUZZ_BUILD_ONLY=1 bash scripts/fuzz.sh
}
lane_mdbook() { bash scripts/build-docs.sh --install-only; }
ci_lane_start lane_downloads lane_cuda lane_msrv lane_aarch64_build lane_debian13_build \
  lane_mdbook lane_fuzz_build

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
trap 'if [ -n "${capi_pid:-}" ]; then ci_kill_tree "$capi_pid"; fi
  ci_lane_stop
  ci_kill_tree "$prefetch_pid"
  rm -f "$log" "$log13" "$logcapi" "$logcapi.rc" "$logpy" "$logros" "$logdocs" "$logfuzz" \
    "$prefetch_log" "$prefetch_done"' EXIT
status=0
keep() { if [ "$status" -eq 0 ] && [ "$1" -ne 0 ]; then status=$1; fi; }

# The workspace: every target compiled once with the lints (benches and examples included, as
# `cargo clippy --all-targets` would), then the tests (doc tests too): nothing left to compile
# but the doc tests.
t=$SECONDS
set +e
ci_build_workspace
lint=$?
set -e
if [ "$lint" -ne 0 ]; then
  echo "clippy (-D warnings) or the build failed above"
  exit "$lint"
fi
ci_step_time "workspace build + clippy" $((SECONDS - t))
t=$SECONDS
set +e
cargo test --profile "$EDGETAM_CARGO_PROFILE" --locked --workspace --features "$FEATURES" 2>&1 |
  tee "$log"
keep "${PIPESTATUS[0]}"
set -e
ci_step_time "workspace tests" $((SECONDS - t))

# Every narrower instruction set this CPU runs (EDGETAM_ISA=avx2, =portable on an AVX-512
# machine): the kernel and parity tests again on each path, the test binaries above reused.
t=$SECONDS
ci_gated isas "$log" "${ISAS_INPUTS[@]}" -- bash scripts/test-isas.sh || keep $?
ci_step_time "narrower ISAs" $((SECONDS - t))

# The CUDA link check and the MSRV check, from the lane.
t=$SECONDS
ci_lane_wait lane_downloads || true
ci_lane_wait lane_cuda || keep $?
ci_step_time "cuda (compile + lint + link)" $((SECONDS - t))
t=$SECONDS
ci_lane_wait lane_msrv || keep $?
ci_step_time "msrv (Rust $msrv) check" $((SECONDS - t))

# ARM64: the cross build from the lane, then the kernel and small parity tests under qemu
# (scripts/test-aarch64.sh finds its build fresh).
t=$SECONDS
if ci_lane_wait lane_aarch64_build; then
  ci_gated aarch64 "$log" "${AARCH64_INPUTS[@]}" -- bash scripts/test-aarch64.sh || keep $?
else
  keep 1
fi
ci_step_time "aarch64 (cross build + qemu tests)" $((SECONDS - t))

# The plugin against GStreamer 1.26 (features v1_24 and v1_26: analytics metas, the stock
# objectdetectionoverlay, a PyGObject client) in a Debian 13 root, cached under
# /var/cache/edgetam-ci, compiled with the same lints: this is where the analytics code is
# linted (Debian 12's GStreamer 1.22 cannot link it). The root comes from the downloads, the
# v1_26 build from the lane; here its 45 tests run (v1_24 rebuilds the plugin's GStreamer
# crates). SKIP_DEBIAN13=1 skips it.
t=$SECONDS
if [ "${SKIP_DEBIAN13:-0}" != 1 ]; then
  ci_lane_wait lane_debian13_build || keep $?
  ci_gated debian13 "$log13" "${DEBIAN13_INPUTS[@]}" -- bash scripts/test-debian13.sh || keep $?
fi
ci_step_time "debian 13 (GStreamer 1.26)" $((SECONDS - t))

# The C ABI (capi/) as C and C++ programs use it (scripts/test-capi.sh): installed into a
# temporary prefix, programs built with gcc / g++, results byte-equal to the Rust library's, bad
# inputs, ASan and valgrind. Its unit tests ran in the workspace tests above. Its library is
# built as users build it (`-p edgetam-capi`: the workspace's feature set would link OpenCV into
# libedgetam); capi/Cargo.toml's feature pins leave only the tracker and the capi crate to compile.
# It runs in the background from here, beside the ROS 2, Python, docs and fuzz steps: its memcheck
# runs are single-threaded, and its longest (the C replay on AVX2, ~5 min) ended alone on one
# core while the other idled when it started after the ROS 2 step, whose live tests leave a
# core idle part of the time. Its output is printed when it ends.
t_capi=$SECONDS
(
  set +e
  CAPI_SKIP_CARGO_TEST=1 CAPI_BUILD_ARGS="--locked -p edgetam-capi --lib --example reference" \
    bash scripts/test-capi.sh > "$logcapi" 2>&1
  echo $? > "$logcapi.rc"
) &
capi_pid=$!

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

# The guide built (mdBook, installed in the lane) and every relative link and #anchor in it and
# in README.md, BENCHMARKS.md and ARCHITECTURE.md checked (scripts/build-docs.sh).
t=$SECONDS
set +e
{
  ci_lane_wait lane_mdbook
  bash scripts/build-docs.sh
} 2>&1 | tee "$logdocs"
docs_status=${PIPESTATUS[0]}
set -e
docs_summary=$(grep -E '^docs: [0-9]+ pages' "$logdocs" | tail -n 1 | sed 's/^docs: //' || true)
ci_step_time "docs" $((SECONDS - t))

# The fuzz targets (fuzz/, cargo-fuzz + libFuzzer), built in the lane, each run on its
# committed seeds for FUZZ_SECONDS (15 s by default), two at a time. Last: the lane's last job
# (its instrumented build, the longest) gets the cores the Python and docs steps leave idle.
t=$SECONDS
set +e
{
  ci_lane_wait lane_fuzz_build
  build_status=$?
  (ci_no_lint && bash scripts/fuzz.sh)
  run_status=$?
  [ "$build_status" -eq 0 ] && [ "$run_status" -eq 0 ]
} 2>&1 | tee "$logfuzz"
fuzz_status=${PIPESTATUS[0]}
set -e
ci_step_time "fuzz" $((SECONDS - t))

# The C ABI step started above.
set +e
wait "$capi_pid"
set -e
capi_pid=""
cat "$logcapi"
keep "$(cat "$logcapi.rc" 2> /dev/null || echo 1)"
ci_step_time "capi (C and C++ programs, beside ros2, python, docs and fuzz)" $((SECONDS - t_capi))

total=$((SECONDS - run_start))
ci_step_time "total" "$total"
ci_step_summary
ci_lane_summary
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
  echo "fuzz: a target found something, or its build failed (above)"
  status=$fuzz_status
fi
ci_budget_line "$total"
exit "$status"
