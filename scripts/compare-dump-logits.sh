#!/usr/bin/env bash
# Byte-for-byte comparison of two `edgetam` binaries' `track --dump-logits` output on the
# sequence fixtures, f32 and bf16 (bf16 only where the CPU has AVX512-BF16): for a change that
# must not move a single bit (a restructure, a speed change meant to be exact).
#
#   scripts/compare-dump-logits.sh OLD_BIN NEW_BIN [FIXTURE ...]
#
# Default fixtures: fixtures/sequence_256 fixtures/sequence_1024. Needs python3 with numpy,
# pillow and safetensors (tools/dev/sequence_to_track_args.py). Exit status 1 on any difference.
# Two instruction-set paths of one binary compare through wrappers that set EDGETAM_ISA
# (DTYPES=f32 where one side lacks AVX512-BF16).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 OLD_BIN NEW_BIN [FIXTURE ...]" >&2; exit 2; }
old=$1 new=$2
shift 2
fixtures=("$@")
[ ${#fixtures[@]} -gt 0 ] || fixtures=(fixtures/sequence_256 fixtures/sequence_1024)
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dtypes=(f32)
grep -qw avx512_bf16 /proc/cpuinfo && dtypes+=(bf16)
# DTYPES="f32" for a binary (or EDGETAM_ISA cap) without the bf16 mode.
if [ -n "${DTYPES:-}" ]; then read -r -a dtypes <<< "$DTYPES"; fi
status=0
for fx in "${fixtures[@]}"; do
  name=$(basename "$fx")
  "$PYTHON" tools/dev/sequence_to_track_args.py "$fx" "$work/$name"
  args=()
  while IFS= read -r spec; do args+=(--prompt "$spec"); done < "$work/$name/prompts.txt"
  for dt in "${dtypes[@]}"; do
    for which in old new; do
      bin=$old; [ $which = new ] && bin=$new
      "$bin" track --model fixtures/model --frames "$work/$name/frames" "${args[@]}" \
        --dtype "$dt" --out "$work/$name/$dt-$which" \
        --dump-logits "$work/$name/$dt-$which.safetensors" > "$work/$name/$dt-$which.log" 2>&1 \
        || { echo "$which binary failed on $name $dt:"; cat "$work/$name/$dt-$which.log"; exit 1; }
    done
    a="$work/$name/$dt-old.safetensors" b="$work/$name/$dt-new.safetensors"
    if cmp -s "$a" "$b" && cmp -s "$work/$name/$dt-old/results.jsonl" "$work/$name/$dt-new/results.jsonl"; then
      echo "$name $dt: identical ($(stat -c %s "$a") bytes, sha256 $(sha256sum "$a" | cut -c1-16))"
    else
      echo "$name $dt: DIFFERENT"
      status=1
    fi
  done
done
exit $status
