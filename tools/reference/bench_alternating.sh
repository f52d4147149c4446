#!/usr/bin/env bash
# Ours vs the reference tracker, per frame and per stage, run alternately on one machine: the
# reference's stages in PyTorch and, with -g, in the engines CPU users deploy.
#
#   tools/reference/bench_alternating.sh [-r ROUNDS] [-n FRAMES] [-k WARMUP] [-t THREADS]
#                                        [-o OBJECTS] [-s SIZE] [-p DTYPES] [-e on|off|both]
#                                        [-i ISA] [-g ENGINES] [-d OUTDIR]
#
# ENGINES: the reference's engines in the rotation, comma-separated, default `torch`; `all` is
# torch,openvino-f32,openvino,onnxruntime (tools/reference/engines.py: transformers' streaming
# loop with each per-frame stage converted once and swapped in; `openvino` is its default
# precision, bf16 on CPUs with AVX512-BF16 or AMX).
# DTYPES: our precisions, `f32` (default), `bf16` or `f32,bf16`; -e: our encoder-ahead modes
# (default off). The reference always runs serial fp32. -i ISA (avx512, avx2, neon, portable) holds
# both sides to one instruction set on a CPU that has a wider one: ours through EDGETAM_ISA, PyTorch
# through ATEN_CPU_CAPABILITY (its own kernels), ONEDNN_MAX_CPU_ISA (oneDNN's convolutions and
# matmuls) and MKL_ENABLE_INSTRUCTIONS (MKL's sgemm); for avx2 that is what a Zen 3 or an Intel
# client CPU runs. OpenVINO follows ONEDNN_MAX_CPU_ISA too (its JSON's `engine_report` lists the
# kernels it ran); ONNX Runtime has no such switch and is left out of a held run. Without -i
# each side uses the widest it has.
#
# Measures the float32 matmul peak once, then runs `edgetam bench` and `time_reference.py`
# alternately ROUNDS times (ours, then each engine, then ours again...: machine noise and drift hit
# all alike), then prints `compare_bench.py` on the medians across rounds, once per engine (and, with several
# engines, `engine_table.py`: one Markdown table of every stage and engine). Same synthetic stream, box
# prompts, random weights, size and thread count on both sides. FRAMES counts frame 0 (the prompted
# frame); statistics cover frames >= max(1, WARMUP). Each tracked frame costs ~1.3 s (1 object)
# or ~2.7 s (3 objects) at 1024 on 2 cores, so the defaults take about two minutes.
#
# Needs: cargo build --release --bin edgetam; a Python with tools/reference/requirements.txt
# (PYTHON=/path/to/python, default python3). EDGETAM=/path/to/edgetam overrides the binary.
set -euo pipefail

ROUNDS=2 FRAMES=6 WARMUP=2 THREADS=2 OBJECTS=1 SIZE=1024 OUT="" DTYPES=f32 AHEAD=off ISA=""
ENGINES=torch
while getopts "r:n:k:t:o:s:d:p:e:i:g:h" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;; n) FRAMES=$OPTARG ;; k) WARMUP=$OPTARG ;; t) THREADS=$OPTARG ;;
    o) OBJECTS=$OPTARG ;; s) SIZE=$OPTARG ;; d) OUT=$OPTARG ;; p) DTYPES=$OPTARG ;;
    e) AHEAD=$OPTARG ;; i) ISA=$OPTARG ;; g) ENGINES=$OPTARG ;;
    h) sed -n '2,31p' "$0"; exit 0 ;;
    *) sed -n '2,32p' "$0" >&2; exit 2 ;;
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

case "$ISA" in
  "") ;;
  # PyTorch's names: ATEN_CPU_CAPABILITY default|avx2|avx512; ONEDNN_MAX_CPU_ISA and
  # MKL_ENABLE_INSTRUCTIONS take AVX2 / AVX512_CORE / AVX512 (SSE4_2 for the narrowest x86 form).
  avx512) export EDGETAM_ISA=avx512 ATEN_CPU_CAPABILITY=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE \
            MKL_ENABLE_INSTRUCTIONS=AVX512 ;;
  avx2) export EDGETAM_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \
          MKL_ENABLE_INSTRUCTIONS=AVX2 ;;
  portable) export EDGETAM_ISA=portable ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 \
              MKL_ENABLE_INSTRUCTIONS=SSE4_2 ;;
  neon) export EDGETAM_ISA=neon ;;
  *) echo "-i: unknown ISA '$ISA' (avx512, avx2, neon or portable)" >&2; exit 2 ;;
esac
[ "$ENGINES" = all ] && ENGINES=torch,openvino-f32,openvino,onnxruntime
engines=()
for engine in ${ENGINES//,/ }; do
  case "$engine" in
    torch | openvino-f32) ;;
    openvino)
      # Held below AVX-512, OpenVINO still picks bf16 from the CPU's flags (AMX, AVX512-BF16) and
      # its convolutions then fail to initialise ("object is not initialized"); on a CPU that
      # really stops at AVX2 its default precision is f32, which openvino-f32 measures.
      if [ -n "$ISA" ] && [ "$ISA" != avx512 ]; then
        echo "== openvino left out: its default precision under -i $ISA is f32 (openvino-f32)" >&2
        continue
      fi ;;
    onnxruntime)
      if [ -n "$ISA" ]; then
        echo "== onnxruntime left out: it cannot be held to $ISA" >&2
        continue
      fi ;;
    *) echo "-g: unknown engine '$engine' (torch, openvino-f32, openvino, onnxruntime, all)" >&2; exit 2 ;;
  esac
  if [ "$engine" != torch ] && [ -n "$ISA" ] && [ "$ISA" != avx2 ] && [ "$ISA" != avx512 ]; then
    echo "== $engine left out: it is held to avx2 or avx512 only" >&2
    continue
  fi
  engines+=("$engine")
done
[ "${#engines[@]}" -gt 0 ] || { echo "-g: no engine left to run" >&2; exit 2; }
max_isa=()
case "$ISA" in avx2 | avx512) max_isa=(--max-isa "$ISA") ;; esac
[ -z "$ISA" ] || echo "== both sides held to $ISA (EDGETAM_ISA=$EDGETAM_ISA${ATEN_CPU_CAPABILITY:+, ATEN_CPU_CAPABILITY=$ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS=$MKL_ENABLE_INSTRUCTIONS})"

echo "== fp32 matmul peak, $THREADS threads"
"$PY" "$REF/time_reference.py" --peak --frames 0 --threads "$THREADS" --json "$OUT/peak.json"

for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS: ours"
  # `edgetam bench --frames` counts measured frames only (after the warm-up).
  "$BIN" bench --random-weights --input-size "$SIZE" --objects "$OBJECTS" --frames "$((FRAMES - WARMUP))" \
    --warmup "$WARMUP" --threads "$THREADS" --dtype "$DTYPES" --encoder-ahead "$AHEAD" \
    --json "$OUT/ours_$r.json"
  for engine in "${engines[@]}"; do
    echo "== round $r/$ROUNDS: reference, $engine"
    "$PY" "$REF/time_reference.py" --size "$SIZE" --objects "$OBJECTS" --frames "$FRAMES" \
      --warmup "$WARMUP" --threads "$THREADS" --quiet --engine "$engine" "${max_isa[@]}" \
      --json "$OUT/ref_${engine}_$r.json"
  done
done

for engine in "${engines[@]}"; do
  echo "== medians across $ROUNDS round(s), ours against the reference in $engine (files in $OUT)"
  "$PY" "$REF/compare_bench.py" --ours "$OUT"/ours_*.json --ref "$OUT"/ref_"${engine}"_*.json \
    --peak "$OUT/peak.json"
done
if [ "${#engines[@]}" -gt 1 ]; then
  echo "== every engine side by side (Markdown; tools/reference/engine_table.py $OUT)"
  "$PY" "$REF/engine_table.py" "$OUT"
fi
