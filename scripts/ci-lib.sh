# Helpers for scripts/test.sh and the step scripts it runs (source it; bash only).
#
# * A cache outside the clone (EDGETAM_CI_CACHE, default /var/cache/edgetam-ci when it can be
#   written, else ~/.cache/edgetam-ci): CI runs on a fresh clone every time, so whatever is kept
#   inside the clone (target/, .cuda-toolkit/) is lost between runs.
# * Input keys: a hash of the committed files a step reads (and of any uncommitted change to
#   them), the toolchain and the step's own script. A step that passed with the same key is
#   skipped (`ci_passed`), so a change to the GStreamer element does not re-run the ARM64
#   emulation, while any change to what a step reads runs it again. EDGETAM_CI_FULL=1 runs every
#   step whatever its key.
# * Timings: `ci_step_time NAME SECONDS` records a step's wall time and the machine's idle core
#   time during it; `ci_step_summary` prints them at the end, and the total against CI's budget.
# * One compile per configuration: `ci_cargo_profile` (the `ci` profile in CI), `CI_FEATURES` and
#   `ci_build_workspace`, the one selection every host step builds with, so that no step
#   compiles a dependency the workspace build already compiled with other features.
# * A background lane (`ci_lane_start`, `ci_lane_wait`): the compiles that no earlier step
#   needs, at idle priority, so they use the cores only while the steps in front leave one idle.

ci_cache_dir() {
  local dir=${EDGETAM_CI_CACHE:-/var/cache/edgetam-ci}
  if mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ]; then
    echo "$dir"
  else
    dir=${XDG_CACHE_HOME:-$HOME/.cache}/edgetam-ci
    mkdir -p "$dir"
    echo "$dir"
  fi
}

# ci_inputs_key PATH...: a 16-hex-digit key of what PATHs hold (tracked files by their blob
# hashes, uncommitted changes and untracked files by content), of the Rust toolchain and of the
# CPU model (a step that passed on one kind of machine runs again on another).
ci_inputs_key() {
  {
    rustc --version 2>/dev/null || true
    grep -m1 '^model name' /proc/cpuinfo || true
    git ls-files -s -- "$@"
    git diff HEAD -- "$@" 2>/dev/null || true
    git ls-files --others --exclude-standard -z -- "$@" | xargs -0 -r sha256sum
  } | sha256sum | cut -c1-16
}

# ci_passed NAME KEY: true when step NAME passed before with inputs KEY (and EDGETAM_CI_FULL is
# not 1).
ci_passed() {
  [ "${EDGETAM_CI_FULL:-0}" != 1 ] && [ -f "$(ci_cache_dir)/passed/$1-$2" ]
}

# ci_mark_passed NAME KEY: records that step NAME passed with inputs KEY (older keys of the step
# are forgotten).
ci_mark_passed() {
  local dir
  dir="$(ci_cache_dir)/passed"
  mkdir -p "$dir"
  rm -f "$dir/$1"-*
  date -u +%FT%TZ > "$dir/$1-$2"
}

# ci_link_into_cache NAME: in CI (or with EDGETAM_CI_TARGET=1), a clone without ./NAME gets it as
# a link to the cache's NAME, so what it holds outlives the clone. A clone with its own ./NAME
# keeps it.
ci_link_into_cache() {
  if [ -e "$1" ] || [ -L "$1" ]; then return 0; fi
  if [ "${CI:-}" != true ] && [ "${EDGETAM_CI_TARGET:-0}" != 1 ]; then return 0; fi
  local dir
  dir="$(ci_cache_dir)/$1"
  mkdir -p "$dir"
  ln -s "$dir" "$1"
  echo "ci: $1 -> $dir"
}

# ci_gated NAME LOG PATH... -- COMMAND...: runs COMMAND (its output also appended to LOG) unless
# step NAME passed before with the same inputs (ci_inputs_key PATH...); records a pass. Returns
# COMMAND's status (0 when skipped).
ci_gated() {
  local name=$1 log=$2 key rc
  shift 2
  local paths=()
  while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
    paths+=("$1")
    shift
  done
  shift
  key=$(ci_inputs_key "${paths[@]}")
  if ci_passed "$name" "$key"; then
    echo "$name: skipped, inputs unchanged since it passed (key $key)" | tee -a "$log"
    return 0
  fi
  set +e
  "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -eq 0 ]; then ci_mark_passed "$name" "$key"; fi
  return "$rc"
}

# The workspace's target folder kept in the cache (ci_link_into_cache), so dependencies are not
# compiled again on every run.
ci_link_target() {
  if [ -e target ] || [ -L target ]; then return 0; fi
  ci_bound_build_caches
  ci_link_into_cache target
}

# The cached build folders (the host's, ARM64's, fuzz's, the MSRV check's, Debian 13's) only
# grow: cargo keeps every superseded artifact beside the new one, ~5 GB per changed workspace.
# Before a run they are emptied (the next build is cold) when the host's target folder is over
# EDGETAM_CI_TARGET_MAX_GB (default 20) or the cache's filesystem has less than
# EDGETAM_CI_MIN_FREE_GB (default 30) free, so a long-lived CI machine never runs out of disk
# mid-run. Toolkits, the Debian 13 root and venvs are kept.
CI_BUILD_CACHES=(target aarch64-target fuzz-target msrv-target cuda-target debian13/target)
ci_bound_build_caches() {
  local cache target_kb free_kb reason=""
  cache=$(ci_cache_dir)
  local max_kb=$((${EDGETAM_CI_TARGET_MAX_GB:-20} * 1024 * 1024))
  local min_free_kb=$((${EDGETAM_CI_MIN_FREE_GB:-30} * 1024 * 1024))
  target_kb=$(du -sk "$cache/target" 2>/dev/null | cut -f1 || true)
  free_kb=$(df -Pk "$cache" | awk 'NR == 2 { print $4 }')
  if [ "${target_kb:-0}" -gt "$max_kb" ]; then
    reason="$cache/target is $((target_kb / 1048576)) GB (over ${EDGETAM_CI_TARGET_MAX_GB:-20} GB)"
  elif [ "${free_kb:-0}" -lt "$min_free_kb" ]; then
    reason="$((free_kb / 1048576)) GB free on $cache's disk (under ${EDGETAM_CI_MIN_FREE_GB:-30} GB)"
  fi
  if [ -n "$reason" ]; then
    local d
    for d in "${CI_BUILD_CACHES[@]}"; do
      [ -d "$cache/$d" ] && rm -rf --one-file-system "${cache:?}/$d"
    done
    free_kb=$(df -Pk "$cache" | awk 'NR == 2 { print $4 }')
    echo "ci: $reason: the cached build folders emptied ($((free_kb / 1048576)) GB free now)"
  fi
}

# ci_disk_free: "N GB free" on the cache's filesystem, for the summary.
ci_disk_free() {
  df -Pk "$(ci_cache_dir)" | awk 'NR == 2 { printf "%d GB free", $4 / 1048576 }'
}

# Lints while compiling: clippy-driver as the workspace crates' compiler (what `cargo clippy`
# does, but producing the real artifacts), `-D warnings` as `cargo clippy -- -D warnings`. One
# compile of the workspace gives the lint and the test binaries; a separate `cargo clippy` pass
# would compile every dependency once more in check mode. Only the workspace's own crates go
# through it; cargo keeps their artifacts apart from a plain build's.
ci_lint_while_building() {
  local driver
  driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)
  if [ -z "$driver" ]; then
    echo "ci: clippy-driver not found (rustup component add clippy)" >&2
    return 1
  fi
  export RUSTC_WORKSPACE_WRAPPER="$driver"
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
}

ci_no_lint() {
  unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
}

# The cargo profile of CI's compiles: `ci` (Cargo.toml: release without debug info) when
# CI=true, else `release`, so a script run by hand builds what a developer builds;
# EDGETAM_CARGO_PROFILE overrides either.
ci_cargo_profile() {
  if [ -n "${EDGETAM_CARGO_PROFILE:-}" ]; then
    echo "$EDGETAM_CARGO_PROFILE"
  elif [ "${CI:-}" = true ]; then
    echo ci
  else
    echo release
  fi
}

# ci_profile_dir: where that profile's binaries land (target/ci, target/release).
ci_profile_dir() {
  echo "${CARGO_TARGET_DIR:-target}/$(ci_cargo_profile)"
}

# The features CI builds and tests the workspace with. Not `--all-features`: some features need
# what a Debian 12 machine without a GPU lacks (CUDA, GStreamer >= 1.24); those have their own
# steps.
CI_FEATURES="edgetam/tokio,edgetam/opencv,edgetam-pipeline/tokio,edgetam-pipeline/opencv"

# ci_build_workspace [CARGO ARGS...]: every target of the workspace (benches and examples too, as
# `cargo clippy --all-targets` lints them) with $FEATURES (default CI_FEATURES), in the CI
# profile. scripts/test.sh builds with it first; every later host step that needs a binary
# (the CLI, the ROS 2 node, libedgetam, the reference writer) calls it again and finds it fresh:
# cargo resolves features per selection, and any narrower selection (`--bin edgetam`,
# `-p edgetam-capi`) would compile some dependencies again with other features. `cargo test`
# over the workspace afterwards compiles nothing but its doc tests.
ci_build_workspace() {
  cargo build --profile "$(ci_cargo_profile)" --locked --workspace --all-targets \
    --features "${FEATURES:-$CI_FEATURES}" "$@"
}

# The background lane: `ci_lane_start JOB...` runs the shell functions JOB... one after the
# other in a background subshell at idle priority (nice 19, and SCHED_IDLE where `chrt` can set
# it): they take a core only when the steps in the foreground leave it idle (the tests' serial
# stretches, live tests waiting on their clocks, the ROS 2 step), so the foreground runs at its
# own speed. A step that needs JOB's result calls `ci_lane_wait JOB`, which waits for it
# (the lane then has the cores to itself), prints its output and returns its status. Each job
# writes nothing to the console itself.
CI_LANE_DIR=""
CI_LANE_PID=""
ci_lane_start() {
  CI_LANE_DIR=$(mktemp -d)
  (
    set +e
    renice -n 19 -p "$BASHPID" > /dev/null 2>&1
    chrt --idle -p 0 "$BASHPID" > /dev/null 2>&1
    for job in "$@"; do
      local t0=$SECONDS
      ("$job") > "$CI_LANE_DIR/$job.log" 2>&1
      local rc=$?
      echo "$((SECONDS - t0))" > "$CI_LANE_DIR/$job.seconds"
      echo "$rc" > "$CI_LANE_DIR/$job.rc"
    done
  ) &
  CI_LANE_PID=$!
}

# ci_lane_wait JOB: waits for JOB, prints its output (and how long it ran in the background and
# how long the caller waited for it), returns its status (1 when the lane ended without it).
ci_lane_wait() {
  local job=$1 t0=$SECONDS
  while [ ! -f "$CI_LANE_DIR/$job.rc" ]; do
    if ! kill -0 "$CI_LANE_PID" 2> /dev/null; then
      [ -f "$CI_LANE_DIR/$job.rc" ] && break
      echo "ci: the background lane ended before $job finished" >&2
      cat "$CI_LANE_DIR/$job.log" 2> /dev/null || true
      return 1
    fi
    sleep 1
  done
  cat "$CI_LANE_DIR/$job.log"
  echo "ci: $job ran in the background for $(cat "$CI_LANE_DIR/$job.seconds") s; waited $((SECONDS - t0)) s for it"
  return "$(cat "$CI_LANE_DIR/$job.rc")"
}

# ci_lane_summary: one line, how long each job of the lane ran (in the background).
ci_lane_summary() {
  [ -n "$CI_LANE_DIR" ] || return 0
  local f line=""
  for f in "$CI_LANE_DIR"/*.seconds; do
    [ -f "$f" ] || continue
    line+="${line:+; }$(basename "$f" .seconds) $(cat "$f") s"
  done
  echo "background lane (idle priority, beside the steps): ${line:-nothing ran}"
}

# ci_kill_tree PID: PID and every process below it.
ci_kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2> /dev/null); do ci_kill_tree "$child"; done
  kill "$1" 2> /dev/null || true
}

# ci_lane_stop: ends the lane and whatever it runs (on exit).
ci_lane_stop() {
  if [ -n "$CI_LANE_PID" ]; then ci_kill_tree "$CI_LANE_PID"; fi
  if [ -n "$CI_LANE_DIR" ]; then rm -rf "$CI_LANE_DIR"; fi
}

# ci_recompiled LOG: the dependencies (not the workspace's crates) a cargo log compiled, one
# line; a build that should reuse the workspace build's outputs prints nothing.
ci_recompiled() {
  awk '/^ *Compiling / && $2 !~ /^edgetam/ { print $2 }' "$1" | sort -u | tr '\n' ' '
}

CI_STEP_TIMES=()
CI_STEP_IDLE=()
# Idle core time of the whole machine so far, in seconds (/proc/stat's idle + iowait, summed over
# the cores): a cold run is CPU-bound on 2 cores, so a step that leaves cores idle is where
# reordering pays, and one that leaves none can only get shorter by doing less.
ci_idle_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%d\n", ($5 + $6) / hz; exit }' /proc/stat \
    2> /dev/null || echo 0
}
CI_IDLE_MARK=$(ci_idle_seconds)
ci_step_time() {
  local now
  now=$(ci_idle_seconds)
  CI_STEP_TIMES+=("$1 $2 s")
  if [ "$1" != total ]; then CI_STEP_IDLE+=("$1 $((now - CI_IDLE_MARK)) s"); fi
  CI_IDLE_MARK=$now
}
# CI's own limit is 90 minutes; the project keeps a cold run under 60 on its slowest 2-core
# host, so the closing line says how far the run is from that.
CI_BUDGET_SECONDS=${EDGETAM_CI_BUDGET_SECONDS:-3600}
ci_step_summary() {
  local IFS=';'
  echo "step times: ${CI_STEP_TIMES[*]}" | sed 's/;/; /g'
  echo "idle core time (all cores, during each step): ${CI_STEP_IDLE[*]}" | sed 's/;/; /g'
}
# ci_budget_line TOTAL_SECONDS: the one-line verdict against the budget.
ci_budget_line() {
  local total=$1 budget=$CI_BUDGET_SECONDS
  local verdict="within"
  if [ "$total" -gt "$budget" ]; then verdict="OVER"; fi
  printf 'ci budget: %d s (%d min %02d s) of %d s (%d min): %d %% of the budget, %s it\n' \
    "$total" "$((total / 60))" "$((total % 60))" "$budget" "$((budget / 60))" \
    "$((100 * total / budget))" "$verdict"
}
