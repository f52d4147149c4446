#!/usr/bin/env bash
# Builds, on a machine without a GPU, what scripts/gpu-check.sh runs on a GPU machine that has no
# Rust toolchain and no network: the `edgetam` CLI and the `cuda_parity` test binary, with
# `--features cuda`, stripped and xz-compressed, in gpu-bundle/ (git-ignored; carry that folder).
# Each binary is ~50 MB stripped (mostly candle's PTX and static kernels), ~7 MB compressed: the
# carry limit is 64 MiB in all. gpu-check.sh decompresses them (Python's lzma, no xz needed).
#
#   GPU_CUDA_MAJOR=12 bash scripts/build-gpu-bundle.sh     # then carry gpu-bundle/
#   bash scripts/build-gpu-bundle.sh --link-check           # CI: compile, lint and link only
#
# --link-check (CI, which has no GPU and runs none of it): the same two binaries compiled and
# linked against the stubs with the `ci-link` profile (unoptimised, no debug info) and candle's
# device kernels compiled by nvcc without device optimisation (NVCC_APPEND_FLAGS), into
# CARGO_TARGET_DIR (default target/); no bundle is written. It proves what CI can: the `cuda`
# code compiles, passes the lints and links, with the sonames listed. Never carry its output.
#
# GPU_CUDA_MAJOR: the CUDA major version of the libraries on the GPU machine (PyTorch's:
# `python3 -c 'import torch; print(torch.version.cuda)'`), 12 (default) or 13.
# WITH_WHEELS=1 (PY_VERSION=3.x): also the reference's Python wheels (see below).
# CUDA_COMPUTE_CAP: the architecture candle's kernels are compiled for (default 80: PTX the
# driver JITs for any newer GPU, H100/H200 included, and the same build as CI's check so nvcc
# does not run again; 90 gives sm_90a PTX, for Hopper only).
# PTX_VERSION (optional, e.g. 8.5): rewrite the `.version` of candle's PTX. The toolkit here is
# CUDA 13.0 (the first whose wheels carry nvcc), whose PTX needs a driver >= 580; a GPU machine
# with an older driver rejects it (CUDA_ERROR_UNSUPPORTED_PTX_VERSION). candle's kernels use no
# PTX 9 feature, so declaring the older ISA lets such a driver JIT them. Untested; opt-in.
#
# Linking: candle 0.11 turns on cudarc's `dynamic-linking`, so an executable links against
# libcuda, libcublas, libcublasLt, libcurand, libnvrtc and (candle-kernels) libcudart. None of
# them is here (no driver; the library wheels are hundreds of MB), and the binary must load the
# GPU machine's own copies anyway. So it links against *stub* libraries that only carry the
# sonames of the target CUDA major version and the symbol names cudarc binds (from its sources);
# at run time the dynamic loader finds the real libraries (the driver's libcuda.so.1, PyTorch's
# nvidia-* wheels: gpu-check.sh puts those on LD_LIBRARY_PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
LINK_CHECK=0
case "${1:-}" in
  "") ;;
  --link-check) LINK_CHECK=1 ;;
  *)
    echo "usage: $0 [--link-check]" >&2
    exit 2
    ;;
esac
MAJOR="${GPU_CUDA_MAJOR:-12}"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-80}"
JOBS="${JOBS:-2}"
bash scripts/install-cuda-toolkit.sh
# shellcheck source=scripts/cuda-env.sh
source scripts/cuda-env.sh

case "$MAJOR" in
  12) export CUDARC_CUDA_VERSION=12040 ;;  # bindings of 12.4: symbols every 12.x library has
  13) export CUDARC_CUDA_VERSION=13000 ;;
  *) echo "GPU_CUDA_MAJOR must be 12 or 13, got $MAJOR" >&2; exit 1 ;;
esac
declare -A SONAME=(
  [cuda]=libcuda.so.1
  [nvrtc]="libnvrtc.so.$MAJOR"
  [curand]=libcurand.so.10
  [cublas]="libcublas.so.$MAJOR"
  [cublasLt]="libcublasLt.so.$MAJOR"
  [cudart]="libcudart.so.$MAJOR"
)
# cudarc's sources (the version in Cargo.lock) list the symbols each library must provide.
cudarc_version=$(awk '/^name = "cudarc"$/ { getline; gsub(/"/, "", $3); print $3 }' Cargo.lock)
cargo fetch >/dev/null
CUDARC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"cudarc-$cudarc_version" | head -n 1)

TARGET_DIR=${CARGO_TARGET_DIR:-target}
STUBS="$TARGET_DIR/cuda-stubs-$MAJOR"
mkdir -p "$STUBS"
stub() { # name, symbol list file
  local lib=$1 syms=$2
  sed 's/.*/void &(void) {}/' "$syms" > "$STUBS/$lib.c"
  cc -shared -fPIC -o "$STUBS/lib$lib.so" "$STUBS/$lib.c" "-Wl,-soname,${SONAME[$lib]}"
}
syms_of() { grep -ohE 'pub unsafe fn [A-Za-z0-9_]+' "$@" | awk '{print $4}' | sort -u; }
syms_of "$CUDARC/src/driver/sys/mod.rs" > "$STUBS/cuda.syms"
syms_of "$CUDARC/src/nvrtc/sys/mod.rs" > "$STUBS/nvrtc.syms"
syms_of "$CUDARC/src/curand/sys/mod.rs" > "$STUBS/curand.syms"
syms_of "$CUDARC/src/cublas/sys/mod.rs" > "$STUBS/cublas.syms"
syms_of "$CUDARC/src/cublaslt/sys/mod.rs" > "$STUBS/cublasLt.syms"
# candle-kernels' static kernels call the CUDA runtime: every name the runtime library exports.
nm -D --defined-only "$CUDA_HOME/lib/libcudart.so.13" | awk '$2 ~ /[TW]/ {print $3}' \
  | sed 's/@.*//' | sort -u > "$STUBS/cudart.syms"
for lib in cuda nvrtc curand cublas cublasLt cudart; do stub "$lib" "$STUBS/$lib.syms"; done

# The linker finds the stubs through LIBRARY_PATH (cc turns it into -L): unlike RUSTFLAGS it
# does not change any crate's fingerprint, so the release build is shared with a normal one.
# cudarc's own search paths (CUDA_HOME/lib*) hold no unversioned libcuda/libcublas/... names.
export LIBRARY_PATH="$(realpath "$STUBS")${LIBRARY_PATH:+:$LIBRARY_PATH}"
PROFILE=release
if [ "$LINK_CHECK" = 1 ]; then
  PROFILE=ci-link
  # Front end (cicc) and assembler (ptxas) without optimisation: the kernels are compiled and
  # archived as for a GPU, in well under half the time; CI never loads them.
  export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:+$NVCC_APPEND_FLAGS }-Xcicc -O0 -Xptxas -O0"
fi
OUT="$TARGET_DIR/$PROFILE"
# Debug info stays as the release profile has it; the copies in gpu-bundle/ are stripped. Without
# the default `video` feature: the GPU machine need not have GStreamer's libraries. One cargo
# invocation for both binaries: the test's dev-dependencies (the tracker's `checks`) and the CLI's
# features unify into one build, so candle and the tracker compile once, not once per binary.
build_bundle() {
  cargo build --profile "$PROFILE" -j "$JOBS" --no-default-features \
    -p edgetam -p edgetam-tracker --features edgetam/cuda,edgetam/hub,edgetam-tracker/cuda \
    --bin edgetam --test cuda_parity --message-format=json-render-diagnostics \
    | python3 -c 'import json,sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "cuda_parity":
        print(m["executable"])' | tail -n 1
}
test_exe=$(build_bundle)
if [ -n "${PTX_VERSION:-}" ]; then
  changed=0
  for f in "$OUT"/build/candle-kernels-*/out/*.ptx; do
    if grep -q '^\.version 9\.' "$f"; then
      sed -i "s/^\.version 9\..*/.version $PTX_VERSION/" "$f"
      changed=1
    fi
  done
  if [ "$changed" = 1 ]; then
    echo "PTX declared as ISA $PTX_VERSION; rebuilding"
    test_exe=$(build_bundle)
  fi
fi
if [ -z "$test_exe" ] || [ ! -x "$OUT/edgetam" ]; then
  echo "error: the edgetam CLI or the cuda_parity test binary was not built (above)" >&2
  exit 1
fi
if [ "$LINK_CHECK" = 1 ]; then
  for f in "$OUT/edgetam" "$test_exe"; do
    echo "$(basename "$f") links; it needs:"
    readelf -d "$f" | awk '/NEEDED/ {print "  " $5}'
  done
  echo "cuda link check: compiled, linted and linked (profile $PROFILE, no bundle written)"
  exit 0
fi
rm -rf gpu-bundle
mkdir -p gpu-bundle
cp "$OUT/edgetam" gpu-bundle/
if [ -n "$test_exe" ]; then cp "$test_exe" gpu-bundle/cuda_parity; fi
strip gpu-bundle/edgetam gpu-bundle/cuda_parity 2>/dev/null || true
ls -l gpu-bundle
for f in gpu-bundle/edgetam gpu-bundle/cuda_parity; do
  [ -f "$f" ] || continue
  echo "$f needs:"
  readelf -d "$f" | awk '/NEEDED/ {print "  " $5}'
  xz -T "$JOBS" -6 -f "$f"
done
# Optional: wheels of the PyTorch reference's Python packages (not torch) for a GPU machine whose
# Python lacks transformers: WITH_WHEELS=1 PY_VERSION=3.12 (the GPU machine's Python); ~45 MB
# with numpy, so ~58 MB with the binaries (carry limit 64 MiB: tight).
if [ "${WITH_WHEELS:-0}" = 1 ]; then
  pin() { awk -F'==' -v p="$1" '$1 == p {print $2}' tools/reference/requirements.txt; }
  dl() {
    .cuda-toolkit/venv/bin/python -m pip download --quiet --only-binary=:all: \
      --python-version "${PY_VERSION:-3.11}" --platform manylinux2014_x86_64 \
      --dest gpu-bundle/wheels "$@"
  }
  dl "transformers==$(pin transformers)"
  # transformers builds EdgeTAM's RepViT through timm; timm's torch/torchvision must be the
  # machine's own (a torchvision matching its torch), so no dependencies from here.
  dl --no-deps "timm==$(pin timm)"
  rm -f gpu-bundle/wheels/torch-* gpu-bundle/wheels/torchvision-*
fi
cat > gpu-bundle/BUILD_INFO <<EOF
commit $(git rev-parse HEAD 2>/dev/null || echo unknown)
cuda_major $MAJOR
cudarc_cuda_version $CUDARC_CUDA_VERSION
compute_cap $CUDA_COMPUTE_CAP
ptx_version ${PTX_VERSION:-native}
nvcc $(nvcc --version | tail -n 1)
EOF
echo "gpu-bundle/ (carry it; 64 MiB at most in all):"
ls -l gpu-bundle
du -sh gpu-bundle
