#!/usr/bin/env bash
# ABI check of libedgetam with libabigail's abidiff (Debian's abigail-tools): the library just
# built (NEW, default target/release/libedgetam.so, or the folder of EDGETAM_CARGO_PROFILE)
# against the one built from the baseline commit (capi/abi-baseline, or ABI_BASE=<commit>), and
# a verdict naming what changed:
#
#   abi: compatible (no change)                      abidiff found nothing
#   abi: compatible (additions: ...)                 only new functions, or fields appended
#                                                    to a versioned struct (its `size` says
#                                                    which fields a caller has)
#   abi: INCOMPATIBLE, soname unchanged: ...         exit 1: programs built against the
#                                                    baseline would load this library and break
#   abi: incompatible, new soname A (was B): ...     allowed: the loader refuses the old
#                                                    programs, as 0.x minor bumps intend
#
#   capi/abi-check.sh                   # after `cargo build --release -p edgetam-capi --lib`
#   capi/abi-check.sh --base-only       # build (or find cached) the baseline library and stop
#   capi/abi-check.sh --write-baseline  # remake capi/abi-baseline.xml from the baseline commit
#
# The baseline's ABI is committed as abidw wrote it from that commit's library
# (capi/abi-baseline.xml, naming its commit on its last line): a fresh machine compares against
# it without compiling the baseline commit (~100 s cold on 2 cores); abidiff's report is the
# same as against the library itself. When the file names another commit than
# capi/abi-baseline, or ABI_BASE=<commit> asks for another one, or --write-baseline remakes it,
# the baseline library is built once per commit (a `git worktree` of that commit under /tmp,
# compiled in a temporary copy of this checkout's target/release, whose dependencies it reuses:
# only the workspace's own crates compile again, ~2-3 min on 2 cores plus the copy) and cached
# by commit hash in ABI_CACHE (default /var/cache/edgetam-ci/abi/<hash>/, else
# ~/.cache/edgetam-ci/abi/<hash>/). Both libraries are built with full debug info for the capi
# crate (CAPI_ABI_CONFIG), which is what abidiff reads the structs and signatures from.
set -uo pipefail
cd "$(dirname "$0")/.."

base=${ABI_BASE:-$(sed -n 's/^\([0-9a-f]\{40\}\).*/\1/p' capi/abi-baseline | head -n 1)}
if [ -z "$base" ]; then
  echo "abi: no baseline commit (capi/abi-baseline)" >&2
  exit 1
fi
if ! command -v abidiff > /dev/null; then
  echo "abi: abidiff is not installed (Debian's abigail-tools)" >&2
  exit 1
fi
cache_root=${ABI_CACHE:-${EDGETAM_CI_CACHE:-/var/cache/edgetam-ci}/abi}
if ! mkdir -p "$cache_root" 2> /dev/null || [ ! -w "$cache_root" ]; then
  cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/edgetam-ci/abi
  mkdir -p "$cache_root"
fi
config=(--config "${CAPI_ABI_CONFIG:-profile.release.package.edgetam-capi.debug=2}")
dump=capi/abi-baseline.xml
mode=${1:-}
cached=$cache_root/$base/libedgetam.so
if [ "$mode" != --write-baseline ] && [ -s "$dump" ] && tail -n 1 "$dump" | grep -q "$base"; then
  cached=$dump
  [ "$mode" = --base-only ] && { echo "abi: baseline $base from $dump"; exit 0; }
elif [ ! -s "$cached" ]; then
  if ! git cat-file -e "$base^{commit}" 2> /dev/null; then
    echo "abi: the baseline commit $base is not in this clone (fetch it, or set ABI_BASE)" >&2
    exit 1
  fi
  t0=$SECONDS
  worktree=$(mktemp -d /tmp/edgetam-abi-base.XXXXXX)
  git worktree add --quiet --detach "$worktree" "$base" || exit 1
  # The base's own lock file and sources, built in a copy of this checkout's release folder:
  # its compiled dependencies are reused, and the workspace's crates, whose artifact names do
  # not depend on where the workspace lies, compile anew there instead of overwriting this
  # checkout's (its build-script outputs included).
  own_target=${CARGO_TARGET_DIR:-$PWD/target}
  base_target=$worktree/target
  mkdir -p "$base_target"
  [ -d "$own_target/release" ] && cp -a "$own_target/release" "$base_target/"
  CARGO_TARGET_DIR=$base_target cargo build --release --locked \
    --manifest-path "$worktree/Cargo.toml" -p edgetam-capi --lib "${config[@]}"
  status=$?
  if [ "$status" -eq 0 ]; then
    mkdir -p "$cache_root/$base"
    cp "$base_target/release/libedgetam.so" "$cached.tmp" && mv "$cached.tmp" "$cached"
  fi
  git worktree remove --force "$worktree"
  [ "$status" -eq 0 ] || { echo "abi: building the baseline $base failed" >&2; exit 1; }
  echo "abi: baseline $base built in $((SECONDS - t0)) s, cached in $cache_root/$base"
fi
[ "$mode" = --base-only ] && exit 0
if [ "$mode" = --write-baseline ]; then
  # The commit goes last: abidiff tells the file's kind from its first element.
  {
    abidw --no-show-locs --no-corpus-path "$cached"
    echo "<!-- libedgetam ABI at $base (abidw of that commit's library) -->"
  } > "$dump.tmp" && mv "$dump.tmp" "$dump"
  echo "abi: wrote $dump ($(wc -c < "$dump") bytes)"
  exit 0
fi

new=${NEW:-${CARGO_TARGET_DIR:-target}/${EDGETAM_CARGO_PROFILE:-release}/libedgetam.so}
soname() {
  case $1 in
    *.xml) sed -n "s/.*<abi-corpus [^>]*soname='\([^']*\)'.*/\1/p" "$1" | head -n 1 ;;
    *) readelf -d "$1" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p' ;;
  esac
}
old_soname=$(soname "$cached")
new_soname=$(soname "$new")
report=$(mktemp)
trap 'rm -f "$report"' EXIT
# Fields appended at the end of a versioned struct (its first field is `size`) are compatible
# by construction: callers say which version of the struct they hold.
abidiff --suppressions capi/abi.suppr --no-show-locs "$cached" "$new" > "$report" 2>&1
code=$?
# libxml2's complaints (a damaged baseline file) do not always make abidiff fail.
if grep -q 'parser error' "$report"; then
  cat "$report"
  echo "abi: abidiff could not read $cached"
  exit 1
fi
summary() { grep -E 'Functions changes summary|Variables changes summary' "$report" | sed 's/^ *//' | paste -sd ';' -; }
if [ $((code & 3)) -ne 0 ]; then
  cat "$report"
  echo "abi: abidiff failed (exit $code)"
  exit 1
fi
removed=$(sed -n 's/.*Functions changes summary: \([0-9]*\) Removed.*/\1/p' "$report")
changed=$(sed -n 's/.*Removed, \([0-9]*\) Changed.*/\1/p' "$report")
if [ "$code" -eq 0 ]; then
  echo "abi: compatible (no change against $base)"
  exit 0
fi
if [ $((code & 8)) -eq 0 ] && [ "${removed:-0}" = 0 ] && [ "${changed:-0}" = 0 ]; then
  cat "$report"
  echo "abi: compatible (additions only against $base: $(summary))"
  exit 0
fi
cat "$report"
if [ "$old_soname" != "$new_soname" ]; then
  echo "abi: incompatible, new soname $new_soname (was $old_soname): $(summary)"
  exit 0
fi
echo "abi: INCOMPATIBLE, soname unchanged ($new_soname) against $base: $(summary)"
exit 1
