#!/usr/bin/env bash
# Tests the C ABI (capi/) as C and C++ users get it: builds the library, installs it into a
# temporary prefix, compiles the C and C++ test programs with gcc / g++ through
# `pkg-config --cflags --libs edgetam`, runs them on the committed fixture model and sequence
# (fixtures/model, fixtures/sequence_256 at input 256), compares every mask and score with the
# Rust library's byte for byte, checks the bad-input cases, and runs the programs under
# valgrind's memcheck (no error, no definite leak). Ends with `capi: N passed, M failed`.
#
# The same programs then run under ASan + UBSan + LSan (every output) and valgrind's memcheck
# (the replays stop after VALGRIND_OUTPUTS outputs, default 2; CAPI_SKIP_VALGRIND=1 skips
# memcheck for a quick local run).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
passed=0
failed=0
pass() { echo "capi ok: $1"; passed=$((passed + 1)); }
fail() { echo "capi FAIL: $1"; failed=$((failed + 1)); }
# `check NAME COMMAND...`: one test, its output shown.
check() {
  local name=$1
  shift
  if "$@"; then pass "$name"; else fail "$name"; fi
}
finish() {
  echo "capi time: $((SECONDS - start)) s"
  echo "capi: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit $?
}

# Debian packages the checks below need, installed once per machine (as root, e.g. CI):
# cmake (the CMake package test), abigail-tools (abidiff, the ABI check).
missing=()
command -v cmake > /dev/null || missing+=(cmake)
command -v abidiff > /dev/null || missing+=(abigail-tools)
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ]; then
  t0=$SECONDS
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" > /dev/null
  echo "capi: installed ${missing[*]} in $((SECONDS - t0)) s"
fi

work=$(mktemp -d)
# (An early exit also stops the memcheck runs started in the background below.)
vg_pids=()
cleanup() {
  local pid
  for pid in "${vg_pids[@]}"; do
    pkill -P "$pid"
    kill "$pid"
  done 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
prefix=$work/prefix
model=fixtures/model
export RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-2}

# The cargo profile (scripts/ci-lib.sh: `ci` in CI, else release) and its folder.
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
profile=$(ci_cargo_profile)
bin_dir=$(ci_profile_dir)
export EDGETAM_CARGO_PROFILE=$profile # install-capi.sh and abi-check.sh: that folder

# Rust side: the unit tests (the committed header must be what cbindgen generates, the guard,
# the ABI overhead test is #[ignore]d), then the library and the reference writer in one build
# (one feature set, so the two run the same tracker code; CAPI_BUILD_ARGS replaces the cargo
# selection). scripts/test.sh, whose workspace `cargo test` has already run these unit tests,
# sets CAPI_SKIP_CARGO_TEST=1.
if [ "${CAPI_SKIP_CARGO_TEST:-0}" != 1 ]; then
  log=$work/cargo-test.log
  cargo test --profile "$profile" -p edgetam-capi 2>&1 | tee "$log"
  if [ "${PIPESTATUS[0]}" -ne 0 ]; then fail "cargo test -p edgetam-capi"; fi
  read -r rust_passed rust_failed < <(awk '/^test result:/ { for (i = 1; i <= NF; i++) {
    if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } } END { print p + 0, f + 0 }' "$log")
  passed=$((passed + rust_passed))
  failed=$((failed + rust_failed))
fi
read -r -a build_args <<< "${CAPI_BUILD_ARGS:--p edgetam-capi --lib --example reference}"
# The ABI check's baseline library (capi/abi-check.sh), built before the library under test
# (both land in the profile's folder) and cached by commit: after the first run, nothing to build.
abi_base_ok=0
if command -v abidiff > /dev/null; then
  t0=$SECONDS
  bash capi/abi-check.sh --base-only && abi_base_ok=1
  echo "capi: ABI baseline ready in $((SECONDS - t0)) s"
fi
# Full debug info for the capi crate only (its exported functions and structs: what abidiff
# compares); every other crate keeps its profile's (the `ci` profile says so itself, so there the
# flag changes nothing and scripts/test.sh's compiled dependencies are reused).
abi_config=(--config "profile.$profile.package.edgetam-capi.debug=2")
build_log=$work/cargo-build.log
cargo build --profile "$profile" "${build_args[@]}" "${abi_config[@]}" 2>&1 | tee "$build_log"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  fail "build libedgetam and the reference writer"
  finish
fi
# After scripts/test.sh's workspace build only the tracker (other features) and this crate
# should compile; anything else means capi/Cargo.toml's feature pins are out of date.
again=$(ci_recompiled "$build_log")
if [ -n "$again" ] && [ "${CAPI_SKIP_CARGO_TEST:-0}" = 1 ]; then
  echo "capi: the library compiled $(wc -w <<< "$again") dependencies again after the workspace build: $again(the feature pins in capi/Cargo.toml are out of date)"
fi
export EDGETAM_CAPI_PREBUILT=1 # install-capi.sh: install what was just built
check "install into a temporary prefix" bash scripts/install-capi.sh "$prefix"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export LD_LIBRARY_PATH=$prefix/lib
check "pkg-config knows edgetam" pkg-config --exists edgetam
flags=$(pkg-config --cflags --libs edgetam)
echo "pkg-config --cflags --libs edgetam: $flags"

# The programs, against the installed library only.
cc_flags=(-O2 -g -Wall -Wextra -Werror)
# shellcheck disable=SC2086 # $flags is a list of compiler flags
check "gcc track.c" gcc -std=c11 "${cc_flags[@]}" capi/tests/c/track.c -o "$work/track_c" $flags
# shellcheck disable=SC2086
check "gcc errors.c" gcc -std=c11 "${cc_flags[@]}" -pthread capi/tests/c/errors.c -o "$work/errors_c" $flags
# shellcheck disable=SC2086
check "g++ track.cpp" g++ -std=c++17 "${cc_flags[@]}" capi/tests/cpp/track.cpp -o "$work/track_cpp" $flags
# shellcheck disable=SC2086
check "gcc errors.c, static libedgetam.a" gcc -std=c11 "${cc_flags[@]}" -pthread \
  capi/tests/c/errors.c -o "$work/errors_static" $(pkg-config --cflags edgetam) \
  "$prefix/lib/libedgetam.a" $(pkg-config --static --libs-only-l edgetam | sed 's/-ledgetam//')
# Memcheck (below): `memcheck NAME ISA COMMAND...` runs COMMAND under valgrind's memcheck on
# kernel path ISA (EDGETAM_ISA; "" for the path this CPU takes under valgrind, which reports no
# AVX-512: AVX2), one thread, and writes NAME.vg, NAME.out and NAME.rc. Each run starts as soon
# as what it needs exists, beside the native, CMake and ASan runs, so that no core idles at the
# end (valgrind_start, valgrind_wait).
memcheck() {
  local name=$1 isa=$2
  shift 2
  local t0=$SECONDS
  RAYON_NUM_THREADS=1 EDGETAM_ISA=${isa:-${EDGETAM_ISA:-}} valgrind --error-exitcode=99 \
    --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --suppressions=capi/tests/valgrind.supp --log-file="$work/$name.vg" "$@" \
    > "$work/$name.out" 2>&1
  echo $? > "$work/$name.rc"
  echo "valgrind $name (kernels: ${isa:-as detected}): $((SECONDS - t0)) s"
}
vg_start=$SECONDS
vg_names=()
valgrind_on=0
if [ "${CAPI_SKIP_VALGRIND:-0}" != 1 ] && command -v valgrind > /dev/null; then valgrind_on=1; fi
# valgrind_start NAME ISA COMMAND...: memcheck in the background (when valgrind runs at all).
valgrind_start() {
  [ "$valgrind_on" = 1 ] || return 0
  memcheck "$@" &
  vg_pids+=($!)
  vg_names+=("$1")
}
# The bad-input program, whole: every error path of the ABI, four tracked frames (RGB8, NV12,
# I420, GRAY8) and a second tracker's frame. On the portable kernels: valgrind 3.19 runs the
# AVX2 + FMA kernels some 15x slower than the same program on the portable ones (nulgrind, no
# checking at all: 549 s against 37 s here), and what this program is for, the ABI's argument
# checks, frame conversions and error returns, runs the same code on every kernel path. The
# AVX2 kernels are checked by the C replay below.
if [ -x "$work/errors_c" ]; then
  valgrind_start errors_c portable "$work/errors_c" "$model"
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
case $version in
  0.*) soname=libedgetam.so.${version%.*} ;; # cargo-c's 0.x convention: 0.MINOR
  *) soname=libedgetam.so.${version%%.*} ;;
esac
check "the shared library's soname is $soname" \
  bash -c "readelf -d '$prefix/lib/libedgetam.so' | grep -q 'Library soname: \[$soname\]'"
check "installed as libedgetam.so.$version, $soname and libedgetam.so links" \
  test -f "$prefix/lib/libedgetam.so.$version" -a "$(readlink "$prefix/lib/$soname")" = \
  "libedgetam.so.$version" -a "$(readlink "$prefix/lib/libedgetam.so")" = "$soname"
# ABI against the baseline commit (capi/abi-baseline): fails on an incompatible change that
# keeps the soname, names every change.
if [ "$abi_base_ok" = 1 ]; then
  t0=$SECONDS
  check "ABI check against the baseline (abidiff)" bash capi/abi-check.sh
  echo "capi: abidiff $((SECONDS - t0)) s"
else
  fail "ABI check: no baseline library (abigail-tools missing or the base build failed)"
fi

# CMake users: a C++ program configured against the install prefix only
# (find_package(edgetam 0.MINOR CONFIG REQUIRED), edgetam::edgetam and edgetam::edgetam_static),
# built and run; a request for the next minor version must be refused (0.x minors break the ABI).
if command -v cmake > /dev/null; then
  want=${version%.*}
  next=${version%%.*}.$((${want#*.} + 1))
  cm=(cmake -S capi/tests/cmake -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release)
  if check "cmake: find_package(edgetam $want CONFIG REQUIRED) configures" \
    bash -c "${cm[*]} -B '$work/cmake' -DEDGETAM_REQUEST=$want > '$work/cmake.log' 2>&1" &&
    check "cmake: the program builds (shared and static)" \
      bash -c "cmake --build '$work/cmake' -j 2 > '$work/cmake-build.log' 2>&1"; then
    check "cmake: the program runs (shared)" "$work/cmake/app" "$model"
    check "cmake: the program runs (static)" "$work/cmake/app_static" "$model"
  else
    cat "$work/cmake.log" "$work/cmake-build.log" 2> /dev/null
  fi
  check "cmake: find_package(edgetam $next) is refused by edgetam $version" \
    bash -c "! ${cm[*]} -B '$work/cmake-next' -DEDGETAM_REQUEST=$next > '$work/cmake-next.log' 2>&1"
else
  fail "cmake is not installed (scripts/install-deps.sh)"
fi

# The Rust library's results on the case, then the C and C++ programs', byte for byte.
case_dir=$work/case
check "reference (Rust) results" "$bin_dir/examples/reference" "$model" fixtures/sequence_256 "$case_dir"
# The C replay under memcheck on the kernels this CPU runs (AVX2; valgrind hides AVX-512): the
# first VALGRIND_OUTPUTS outputs, default 2: frame 0 with its box and points prompts (two
# objects, masks copied out), then frame 1, the first to attend to a memory (memory attention
# over the memory bank, object pointers). The longest run (~6 min here): it starts now.
vg_outputs=${VALGRIND_OUTPUTS:-2}
if [ -x "$work/track_c" ]; then
  valgrind_start track_c "" "$work/track_c" "$model" "$case_dir" "$work/vg_c" 256 "$vg_outputs"
fi
compare() { # compare NAME PREFIX: the program's text and masks equal the reference's
  check "$1: results equal Rust's ($(grep -c '^out' "$case_dir/expected.txt") outputs, \
$(grep -c '^  obj' "$case_dir/expected.txt") object results: scores, IoUs, boxes, areas)" \
    cmp "$2.txt" "$case_dir/expected.txt"
  check "$1: masks equal Rust's ($(stat -c %s "$case_dir/expected.masks") bytes)" \
    cmp "$2.masks" "$case_dir/expected.masks"
}
if [ -x "$work/track_c" ] && check "C program runs" "$work/track_c" "$model" "$case_dir" "$work/c" 256; then
  compare C "$work/c"
fi
if [ -x "$work/track_cpp" ] && check "C++ program runs" "$work/track_cpp" "$model" "$case_dir" "$work/cpp" 256; then
  compare C++ "$work/cpp"
fi
# `cases LABEL LOG PROGRAM ARGS...`: runs a bad-input program; each of its cases counts as a test.
cases() {
  local label=$1 log=$2
  shift 2
  "$@" > "$log" 2>&1
  local code=$?
  grep -E '^(ok|FAIL|#) ' "$log" | sed "s/^/$label: /"
  passed=$((passed + $(grep -c '^ok - ' "$log")))
  failed=$((failed + $(grep -c '^FAIL - ' "$log")))
  if [ "$code" -ne 0 ] && ! grep -q '^FAIL - ' "$log"; then
    cat "$log"
    fail "$label exited with $code"
  fi
}
for program in errors_c errors_static; do
  [ -x "$work/$program" ] || continue
  cases "$program" "$work/$program.log" "$work/$program" "$model"
done
# bf16 where it cannot run: refused with EDGETAM_STATUS_PRECISION_UNAVAILABLE and a message,
# never f32 in its place. The instruction set is read once per process, so the program runs
# again with the kernels capped below the bf16 kernels' avx512 (avx2 where the CPU has it, else
# portable).
if [ -x "$work/errors_c" ]; then
  cap=portable
  grep -qw avx2 /proc/cpuinfo 2> /dev/null && cap=avx2
  cases "errors_c EDGETAM_ISA=$cap" "$work/bf16.log" \
    env EDGETAM_ISA=$cap "$work/errors_c" "$model" --bf16-refused
fi

# AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer: the C and C++ programs built
# with -fsanitize=address,undefined replay the whole case (every output, compared again byte for
# byte) and the bad-input cases at near-native speed. ASan intercepts malloc/free and memcpy for
# the library too (Rust's allocations and copies go through libc), so leaks anywhere and
# overruns of the caller's buffers are caught; the Rust code itself is not instrumented
# (valgrind below covers every instruction, on fewer frames).
san=(-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
# shellcheck disable=SC2086
if gcc -std=c11 "${san[@]}" capi/tests/c/track.c -o "$work/track_c_asan" $flags &&
  g++ -std=c++17 "${san[@]}" capi/tests/cpp/track.cpp -o "$work/track_cpp_asan" $flags &&
  gcc -std=c11 "${san[@]}" -pthread capi/tests/c/errors.c -o "$work/errors_c_asan" $flags &&
  g++ -std=c++17 "${san[@]}" -Wall -Wextra -Werror capi/tests/cpp/temporaries.cpp \
    -o "$work/temporaries_asan" $flags; then
  check "ASan+UBSan+LSan: C program, every output" \
    "$work/track_c_asan" "$model" "$case_dir" "$work/asan_c" 256
  compare "C (ASan)" "$work/asan_c"
  check "ASan+UBSan+LSan: C++ program, every output" \
    "$work/track_cpp_asan" "$model" "$case_dir" "$work/asan_cpp" 256
  compare "C++ (ASan)" "$work/asan_cpp"
  # The C++ loops on a temporary Result (`for (auto &o : tracker.track(frame).objects())`,
  # `.at(0)`, `.find(id)`), three real frames: each mask read after its Result is gone.
  check "ASan+UBSan+LSan: C++ objects of temporary results own their masks" \
    "$work/temporaries_asan" "$model" "$case_dir" 256
  check "ASan+UBSan+LSan: bad-input cases" bash -c "'$work/errors_c_asan' '$model' > '$work/errors_asan.log' 2>&1 || { cat '$work/errors_asan.log'; exit 1; }"
else
  fail "build the programs with -fsanitize=address,undefined"
fi

# Memcheck: no error, no definite leak, on every instruction (the library's too). Valgrind runs
# the model some 100x slower than natively (AVX2: far more), so each program runs on one thread
# (RAYON_NUM_THREADS=1: valgrind serialises threads, and idle workers spinning cost time), the
# replays stop after VALGRIND_OUTPUTS outputs and the three runs go side by side: the bad-input
# program (portable kernels, started first), the C replay (this CPU's kernels) and the C++ replay
# (portable kernels, the first output only, VALGRIND_CPP_OUTPUTS: what it adds to the C one is
# the header's inline C++, which frame 0 runs whole: prompts, Tracker::track, Result, Object,
# masks; the library's memory attention on the portable kernels is the bad-input program's).
# The suppressions file lists only what is shown to be global state of Rust's std /
# rayon (see its comments).
if [ "${CAPI_SKIP_VALGRIND:-0}" = 1 ]; then
  echo "capi: valgrind skipped (CAPI_SKIP_VALGRIND=1; not for CI)"
elif [ "$valgrind_on" = 1 ]; then
  if [ -x "$work/track_cpp" ]; then
    valgrind_start track_cpp portable "$work/track_cpp" "$model" "$case_dir" "$work/vg_cpp" 256 \
      "${VALGRIND_CPP_OUTPUTS:-1}"
  fi
  wait "${vg_pids[@]}"
  for name in "${vg_names[@]}"; do
    if [ "$(cat "$work/$name.rc")" = 0 ]; then
      pass "valgrind $name: $(grep -E 'ERROR SUMMARY' "$work/$name.vg" | sed 's/^==[0-9]*== //')"
    else
      cat "$work/$name.out" "$work/$name.vg"
      fail "valgrind $name (exit $(cat "$work/$name.rc"))"
    fi
    grep -E 'definitely lost|indirectly lost|ERROR SUMMARY' "$work/$name.vg" |
      sed "s/^==[0-9]*==/valgrind $name:/"
  done
  echo "valgrind: $((SECONDS - vg_start)) s ($vg_outputs output(s) of the C replay, ${VALGRIND_CPP_OUTPUTS:-1} of the C++ one)"
else
  fail "valgrind is not installed (scripts/install-deps.sh)"
fi
finish
