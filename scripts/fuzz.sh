#!/usr/bin/env bash
# Runs every fuzz target (fuzz/, cargo-fuzz + libFuzzer) on its committed seeds for a while and
# prints one line per target: executions, coverage, corpus and whether it found anything.
#
#   scripts/fuzz.sh                          # what CI runs: 15 s per target
#   FUZZ_SECONDS=1800 FUZZ_TIMEOUT=600 nice -n 19 scripts/fuzz.sh   # the 30-minute runs
#   FUZZ_TARGETS="frame mask_png" FUZZ_SECONDS=60 scripts/fuzz.sh
#   FUZZ_BUILD_ONLY=1 scripts/fuzz.sh        # install cargo-fuzz and build the targets, run none
#                                            # (CI: its background lane, long before the runs)
#
# Idempotent. cargo-fuzz is installed once with `cargo install` (into ~/.cargo/bin; ~1 min),
# and the instrumented build goes to FUZZ_TARGET_DIR (default: /var/cache/edgetam-ci/fuzz-target
# when that folder can be written, else fuzz/target) so a machine that keeps it rebuilds only
# what changed. Corpora grow in FUZZ_CORPUS_DIR (default: a temporary folder, seeds copied in),
# never in the clone. A finding is written to fuzz/artifacts/<target>/ and fails the script.
#
# The toolchain is stable: RUSTC_BOOTSTRAP=1 lets it take the nightly-only flags cargo-fuzz
# passes (-Zsanitizer=address, sanitizer coverage). Targets build in release mode with debug
# assertions and overflow checks (-O -a).
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
SECONDS_PER_TARGET="${FUZZ_SECONDS:-15}"
# Per-input time limit. Under `nice -n 19` on a busy shared machine a process can be starved
# for minutes; long background runs raise it (a real hang still shows up, later).
INPUT_TIMEOUT="${FUZZ_TIMEOUT:-30}"
TARGETS="${FUZZ_TARGETS:-prompt_spec config_json safetensors pt_checkpoint frame mask_png element_prompts}"
export RUSTC_BOOTSTRAP=1
export LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

start=$SECONDS
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  # A driver that runs for seconds: unoptimised, it compiles in about half the time.
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi
echo "cargo-fuzz: $((SECONDS - start)) s"

if [ -z "${FUZZ_TARGET_DIR:-}" ]; then
  # shellcheck source=scripts/ci-lib.sh
  source scripts/ci-lib.sh
  cache=$(ci_cache_dir)
  if mkdir -p "$cache/fuzz-target" 2>/dev/null && [ -w "$cache/fuzz-target" ]; then
    FUZZ_TARGET_DIR="$cache/fuzz-target"
  else
    FUZZ_TARGET_DIR="$PWD/fuzz/target"
  fi
fi
build_start=$SECONDS
(cd fuzz && cargo fuzz build -O -a --target-dir "$FUZZ_TARGET_DIR")
echo "fuzz build: $((SECONDS - build_start)) s (target dir $FUZZ_TARGET_DIR)"
if [ "${FUZZ_BUILD_ONLY:-0}" = 1 ]; then exit 0; fi

corpora="${FUZZ_CORPUS_DIR:-}"
if [ -z "$corpora" ]; then
  corpora=$(mktemp -d)
  trap 'rm -rf "$corpora"' EXIT
fi
# libFuzzer runs one process on one core: the targets run FUZZ_JOBS at a time (default: the
# cores), each for its full SECONDS_PER_TARGET, then their lines are printed in order.
JOBS="${FUZZ_JOBS:-$(nproc)}"
fuzz_one() { # fuzz_one TARGET: writes $corpora/TARGET.log and TARGET.status
  local t=$1 unwind="" status
  mkdir -p "$corpora/$t"
  cp -n fuzz/seeds/"$t"/* "$corpora/$t"/ 2>/dev/null || true
  # element_prompts builds GStreamer structures with fuzzed names: each new name interns a
  # GQuark, and GLib leaks its old quark array on purpose every 2,048 quarks (lock-free
  # lookups). Its stacks end in g_malloc with the fast unwinder (GLib has no frame pointers),
  # so this target records full stacks for the suppression in fuzz/lsan.supp to match.
  if [ "$t" = element_prompts ]; then unwind=":fast_unwind_on_malloc=0"; fi
  set +e
  (cd fuzz && ASAN_OPTIONS="${ASAN_OPTIONS:-}$unwind" \
    cargo fuzz run -O -a --target-dir "$FUZZ_TARGET_DIR" "$t" "$corpora/$t" -- \
    -max_total_time="$SECONDS_PER_TARGET" -timeout="$INPUT_TIMEOUT" -rss_limit_mb=2048 \
    -print_final_stats=1) >"$corpora/$t.log" 2>&1
  status=$?
  set -e
  echo "$status" > "$corpora/$t.status"
}
for t in $TARGETS; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
  fuzz_one "$t" &
done
wait
failed=0
summary=""
for t in $TARGETS; do
  log="$corpora/$t.log"
  status=$(cat "$corpora/$t.status" 2>/dev/null || echo 1)
  runs=$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log" | tail -n 1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | awk '{print $2}')
  corp=$(grep -oE 'corp: [0-9]+/[0-9]+[bKM]b?' "$log" | tail -n 1 | awk '{print $2}')
  if [ "$status" -ne 0 ]; then
    failed=1
    echo "FUZZ FINDING in $t (exit $status); the log's tail:"
    tail -n 40 "$log"
  fi
  line="fuzz $t: ${runs:-?} executions in ${SECONDS_PER_TARGET} s, cov ${cov:-?}, corpus ${corp:-?}, $([ "$status" -eq 0 ] && echo "no finding" || echo "FINDING (fuzz/artifacts/$t/)")"
  echo "$line"
  summary+="$line"$'\n'
done
printf '%s' "$summary"
echo "fuzz: $((SECONDS - start)) s in all"
exit "$failed"
