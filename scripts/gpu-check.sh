#!/usr/bin/env bash
# The GPU check, run ON a lent GPU machine from the repository root (no network there):
#
#   OUT=/some/dir bash scripts/gpu-check.sh     # < 8 minutes with carried binaries
#
# Time limits: parity 150 s, each bench 90 s, each reference run 45 s (worst case ~7.5 min); a
# build on the machine (only when cargo and nvcc are there) adds up to 500 s.
#
# 1. environment: GPU, driver, PyTorch and its CUDA, whether cargo is there;
# 2. binaries: the prebuilt gpu-bundle/ carried in (scripts/build-gpu-bundle.sh on a build
#    machine, GPU_CUDA_MAJOR = PyTorch's CUDA major there), else built here when cargo and nvcc
#    exist (GPU_CHECK_BUILD=0 forbids that);
# 3. parity on CUDA: the cuda_parity tests (device preprocessing vs CPU, the sequence fixtures
#    vs the goldens), or `edgetam check` on the fixtures when no test binary came;
# 4. `edgetam bench` at 1024, 1 and 3 objects, serial and encoder-ahead, f32 then bf16;
# 5. the PyTorch eager reference (transformers' session) on the same GPU, f32 (no TF32) and bf16
#    (tools/reference/time_tracking.py), then per stage (time_reference.py) if time is left;
# 6. a short table last; everything as JSON under $OUT.
#
# Each step has its own time limit, so one that hangs (a PTX JIT, a driver mismatch) costs its
# slot only and the script still prints what it has.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu-check}"
mkdir -p "$OUT"
START=$SECONDS
FRAMES="${FRAMES:-30}"
WARMUP="${WARMUP:-8}"
log() { echo "[gpu-check +$((SECONDS - START))s] $*" | tee -a "$OUT/log.txt"; }
# run NAME SECONDS CMD...: output to $OUT/NAME.txt, status to $OUT/status.txt.
run() {
  local name=$1 limit=$2
  shift 2
  log "$name: $*"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name $rc" >> "$OUT/status.txt"
  tail -n 5 "$OUT/$name.txt" | sed 's/^/    /'
  log "$name: exit $rc"
  return $rc
}
: > "$OUT/status.txt"

# --- 1. environment -------------------------------------------------------------------------
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv 2>&1
  nvidia-smi 2>&1 | grep -m1 "CUDA Version"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
  python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1
  command -v cargo && cargo --version
  command -v nvcc && nvcc --version | tail -n 1
  [ -f gpu-bundle/BUILD_INFO ] && cat gpu-bundle/BUILD_INFO
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# The CUDA libraries the binaries load (cuBLAS, cuRAND, NVRTC, the runtime): PyTorch's wheels.
nvlibs=$(python3 - <<'EOF' 2>/dev/null
import glob, os
dirs = []
try:
    import nvidia
    for base in nvidia.__path__:
        dirs += [d for d in glob.glob(os.path.join(base, "*", "lib")) if os.path.isdir(d)]
        dirs += [d for d in glob.glob(os.path.join(base, "cu*", "lib")) if os.path.isdir(d)]
except ImportError:
    pass
try:
    import torch
    dirs.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
except ImportError:
    pass
print(":".join(dict.fromkeys(dirs)))
EOF
)
export LD_LIBRARY_PATH="${nvlibs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EDGETAM_FIXTURES="$PWD/fixtures"

# --- 2. binaries ----------------------------------------------------------------------------
# The carried bundle first (no build time); else a build here when cargo and nvcc exist.
EDGETAM=""
PARITY=""
if [ -f gpu-bundle/edgetam.xz ]; then
  # Carried compressed (scripts/build-gpu-bundle.sh); Python's lzma needs no xz binary.
  BIN="${TMPDIR:-/tmp}/edgetam-gpu-bin"
  mkdir -p "$BIN"
  for f in gpu-bundle/*.xz; do
    python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as i, open(sys.argv[2], "wb") as o: shutil.copyfileobj(i, o)' \
      "$f" "$BIN/$(basename "$f" .xz)" && chmod +x "$BIN/$(basename "$f" .xz)"
  done
  [ -x "$BIN/edgetam" ] && EDGETAM="$BIN/edgetam"
  [ -x "$BIN/cuda_parity" ] && PARITY="$BIN/cuda_parity"
fi
if [ -z "$EDGETAM" ] && [ "${GPU_CHECK_BUILD:-1}" != 0 ] && command -v cargo >/dev/null 2>&1 \
  && { command -v nvcc >/dev/null 2>&1 || [ -x .cuda-toolkit/cuda/bin/nvcc ]; }; then
  if [ -x .cuda-toolkit/cuda/bin/nvcc ]; then
    # shellcheck source=scripts/cuda-env.sh
    source scripts/cuda-env.sh
  fi
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d .)
  export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-${cap:-90}}"
  # Without the default `video` feature: GStreamer's libraries need not be installed here.
  if run build 300 cargo build --release --no-default-features --features cuda,hub --bin edgetam; then
    EDGETAM=target/release/edgetam
    run build-tests 200 cargo test --release --features cuda -p edgetam-tracker --test cuda_parity --no-run
    PARITY=$(find target/release/deps -maxdepth 1 -type f -executable -name 'cuda_parity-*' -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -n1 | cut -d' ' -f2)
  fi
fi
if [ -z "$EDGETAM" ]; then
  log "no edgetam binary: no cargo + nvcc here and no gpu-bundle/ carried (scripts/build-gpu-bundle.sh)"
fi
if [ -n "$EDGETAM" ]; then
  log "binary: $EDGETAM"
  ldd "$EDGETAM" | grep -E "cuda|cublas|curand|nvrtc|not found" | tee -a "$OUT/log.txt"
fi

# --- 3. parity ------------------------------------------------------------------------------
if [ -n "$PARITY" ]; then
  run parity 150 "$PARITY" --test-threads 1 --nocapture
elif [ -n "$EDGETAM" ]; then
  run parity-256 60 "$EDGETAM" check --fixtures fixtures/sequence_256 --device cuda:0
  run parity-1024 90 "$EDGETAM" check --fixtures fixtures/sequence_1024 --device cuda:0
fi

# --- 4. benchmark ---------------------------------------------------------------------------
if [ -n "$EDGETAM" ]; then
  # bf16: the half-precision mode (on CUDA `edgetam bench` refuses it until a GPU half mode
  # exists; the failure is recorded and costs no time).
  for dtype in f32 bf16; do
    run "bench-$dtype" 90 "$EDGETAM" bench --random-weights --input-size 1024 --objects 1,3 \
      --frames "$FRAMES" --warmup "$WARMUP" --encoder-ahead both --device cuda:0 \
      --dtype "$dtype" --json "$OUT/bench-$dtype.json"
  done
fi

# --- 5. PyTorch reference -------------------------------------------------------------------
if ! python3 -c 'import transformers' >/dev/null 2>&1 && [ -d gpu-bundle/wheels ]; then
  run pip-install 60 python3 -m pip install --no-index --find-links gpu-bundle/wheels \
    --target "$OUT/pylib" transformers
  # timm without its torch/torchvision: the machine's own (scripts/build-gpu-bundle.sh).
  run pip-install-timm 30 python3 -m pip install --no-index --find-links gpu-bundle/wheels \
    --no-deps --target "$OUT/pylib" timm
  export PYTHONPATH="$OUT/pylib${PYTHONPATH:+:$PYTHONPATH}"
fi
if python3 -c 'import transformers, torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  for cfg in float32:1 float32:3 bfloat16:1; do
    dtype=${cfg%:*} n=${cfg#*:}
    {
      run "reference-$dtype-$n" 45 python3 tools/reference/time_tracking.py --device cuda \
        --dtype "$dtype" --objects "$n" --frames $((FRAMES + WARMUP)) --warmup "$WARMUP" \
        --json "$OUT/reference-$dtype-$n.json"
    }
  done
  # The per-stage twin of `edgetam bench` (same 640x360 frames; hooks synchronise per stage),
  # for the stage breakdown, while time is left. TF32 off as above.
  if [ $((SECONDS - START)) -lt 380 ]; then
    run reference-stages 60 python3 -c 'import runpy, sys, torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
sys.argv = ["time_reference.py"] + sys.argv[1:]
runpy.run_path("tools/reference/time_reference.py", run_name="__main__")' \
      --device cuda --input-size 1024 --objects 1,3 --frames $((FRAMES + WARMUP)) --warmup "$WARMUP" \
      --quiet --json "$OUT/reference-stages.json"
  fi
else
  log "no PyTorch reference: transformers or a CUDA torch is missing"
fi

# --- 6. summary -----------------------------------------------------------------------------
python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
rows = []
ref = {}
for dt, short in (("float32", "f32"), ("bfloat16", "bf16")):
    for n in (1, 3):
        r = load(f"reference-{dt}-{n}.json")
        if r:
            ref[(short, n)] = r["median_ms"]
for dt in ("f32", "bf16"):
    b = load(f"bench-{dt}.json")
    for c in (b or {}).get("configs", []):
        ms = c["median"]["end_to_end_ms"]
        n = c["objects"]
        r = ref.get((dt, n))
        rows.append({"dtype": dt, "objects": n,
                     "mode": "encoder-ahead" if c["encoder_ahead"] else "serial",
                     "median_ms": ms, "fps": c.get("fps"),
                     "reference_ms": r, "speedup": (r / ms) if (r and ms) else None})
status = {}
try:
    for line in open(os.path.join(out, "status.txt")):
        k, v = line.split()
        status[k] = int(v)
except OSError:
    pass
summary = {"rows": rows, "reference_ms": {f"{k[0]}-{k[1]}": v for k, v in ref.items()},
           "steps": status}
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
print("steps: " + ", ".join(f"{k}={'ok' if v == 0 else 'exit ' + str(v)}" for k, v in status.items()))
print(f"{'dtype':5} {'obj':>3} {'mode':13} {'ms/frame':>9} {'FPS':>7} {'torch ms':>9} {'x torch':>8}")
for r in rows:
    f = lambda v, fmt: format(v, fmt) if isinstance(v, (int, float)) else "-"
    print(f"{r['dtype']:5} {r['objects']:>3} {r['mode']:13} {f(r['median_ms'], '9.2f')} "
          f"{f(r['fps'], '7.1f')} {f(r['reference_ms'], '9.2f')} {f(r['speedup'], '8.2f')}")
if not rows:
    print("no benchmark results (see log.txt and the step outputs)")
EOF
log "done in $((SECONDS - START)) s; results in $OUT"
