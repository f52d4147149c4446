#!/usr/bin/env bash
# Ours vs the PyTorch reference, per frame and per stage, run alternately on one machine.
#
#   tools/reference/bench_alternating.sh [-r ROUNDS] [-n FRAMES] [-k WARMUP] [-t THREADS]
#                                        [-o OBJECTS] [-s SIZE] [-p DTYPES] [-e on|off|both]
#                                        [-d OUTDIR]
#
# DTYPES: our precisions, `f32` (default), `bf16` or `f32,bf16`; -e: our encoder-ahead modes
# (default off). The reference always runs serial fp32.
#
# Measures the float32 matmul peak once, then runs `edgetam bench` and `time_reference.py`
# alternately ROUNDS times (ours, reference, ours, reference, ...: machine noise and drift hit both
# alike), then prints `compare_bench.py` on the medians across rounds. Same synthetic stream, box
# prompts, random weights, size and thread count on both sides. FRAMES counts frame 0 (the prompted
# frame); statistics cover frames >= max(1, WARMUP). Each tracked frame costs ~1.3 s (1 object)
# or ~2.7 s (3 objects) at 1024 on 2 cores, so the defaults take about two minutes.
#
# Needs: cargo build --release --bin edgetam; a Python with tools/reference/requirements.txt
# (PYTHON=/path/to/python, default python3). EDGETAM=/path/to/edgetam overrides the binary.
set -euo pipefail

ROUNDS=2 FRAMES=6 WARMUP=2 THREADS=2 OBJECTS=1 SIZE=1024 OUT="" DTYPES=f32 AHEAD=off
while getopts "r:n:k:t:o:s:d:p:e:h" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;; n) FRAMES=$OPTARG ;; k) WARMUP=$OPTARG ;; t) THREADS=$OPTARG ;;
    o) OBJECTS=$OPTARG ;; s) SIZE=$OPTARG ;; d) OUT=$OPTARG ;; p) DTYPES=$OPTARG ;;
    e) AHEAD=$OPTARG ;;
    h) sed -n '2,19p' "$0"; exit 0 ;;
    *) sed -n '2,19p' "$0" >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
BIN=${EDGETAM:-$ROOT/target/release/edgetam}
REF=$ROOT/tools/reference
OUT=${OUT:-$(mktemp -d /tmp/edgetam-bench.XXXXXX)}
mkdir -p "$OUT"
[ "$FRAMES" -gt "$WARMUP" ] || { echo "-n FRAMES ($FRAMES) must exceed -k WARMUP ($WARMUP)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "build first: cargo build --release --bin edgetam" >&2; exit 1; }

echo "== fp32 matmul peak, $THREADS threads"
"$PY" "$REF/time_reference.py" --peak --frames 0 --threads "$THREADS" --json "$OUT/peak.json"

for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS: ours"
  # `edgetam bench --frames` counts measured frames only (after the warm-up).
  "$BIN" bench --random-weights --input-size "$SIZE" --objects "$OBJECTS" --frames "$((FRAMES - WARMUP))" \
    --warmup "$WARMUP" --threads "$THREADS" --dtype "$DTYPES" --encoder-ahead "$AHEAD" \
    --json "$OUT/ours_$r.json"
  echo "== round $r/$ROUNDS: reference"
  "$PY" "$REF/time_reference.py" --size "$SIZE" --objects "$OBJECTS" --frames "$FRAMES" \
    --warmup "$WARMUP" --threads "$THREADS" --quiet --json "$OUT/ref_$r.json"
done

echo "== medians across $ROUNDS round(s) (files in $OUT)"
"$PY" "$REF/compare_bench.py" --ours "$OUT"/ours_*.json --ref "$OUT"/ref_*.json --peak "$OUT/peak.json"
