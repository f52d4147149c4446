#!/usr/bin/env bash
# Installs the part of the CUDA toolkit that `cargo build --features cuda` needs at build time
# (nvcc, its front end cicc, ptxas, the CUDA runtime headers and CCCL) from NVIDIA's PyPI wheels
# into .cuda-toolkit/ (git-ignored), without a GPU, a driver or a system CUDA install.
# Idempotent: a second run with the same pins does nothing.
#
#   bash scripts/install-cuda-toolkit.sh          # build-time toolkit only (what CI needs)
#   source scripts/cuda-env.sh                    # then: cargo clippy/build --features cuda
#
# Why CUDA 13.0: it is the first release whose `nvidia-cuda-nvcc` wheel ships the `nvcc` driver
# program itself (the CUDA 12 wheels carry only ptxas and nvvm). candle-kernels' build script
# (cudaforge) compiles its .cu files with nvcc to PTX and to a static library, and cudarc's build
# script reads the toolkit version from `nvcc --version`.
#
# What this does not install: libcuda (the driver), cuBLAS, cuRAND and NVRTC. candle 0.11 turns on
# cudarc's `dynamic-linking`, so *linking* an executable needs those libraries (or stubs of them:
# scripts/build-gpu-bundle.sh); `cargo check` / `cargo clippy` never link, so CI needs none.
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned wheel versions (one CUDA release; bump together).
NVCC_VERSION=13.0.88      # nvidia-cuda-nvcc: nvcc, ptxas, fatbinary, nvlink, cudafe++
CRT_VERSION=13.0.88       # nvidia-cuda-crt: the crt/ headers nvcc includes
NVVM_VERSION=13.0.88      # nvidia-nvvm: cicc and libdevice
RUNTIME_VERSION=13.0.96   # nvidia-cuda-runtime: cuda_runtime.h, cuda_fp16.h, cuda_bf16.h, libcudart
CCCL_VERSION=13.0.85      # nvidia-cuda-cccl: thrust, cub, libcu++ (candle's sort/moe kernels)

# In CI the toolkit (~1 GB of wheels) is kept in the cache outside the clone (scripts/ci-lib.sh);
# the paths below are the real ones, so the venv and the links inside it outlive the clone.
# shellcheck source=scripts/ci-lib.sh
source scripts/ci-lib.sh
ci_link_into_cache .cuda-toolkit
mkdir -p .cuda-toolkit
DIR=$(realpath .cuda-toolkit)
VENV=$DIR/venv
STAMP=$DIR/installed-$NVCC_VERSION-$CRT_VERSION-$NVVM_VERSION-$RUNTIME_VERSION-$CCCL_VERSION

if [ -f "$STAMP" ] && [ -x "$DIR/cuda/bin/nvcc" ]; then
  echo "CUDA toolkit $NVCC_VERSION already in $DIR"
  exit 0
fi

# A venv keeps the wheels out of the system Python. Debian splits venv support out.
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv
fi
rm -rf "${DIR:?}"/*
mkdir -p "$DIR"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
  "nvidia-cuda-nvcc==$NVCC_VERSION" \
  "nvidia-cuda-crt==$CRT_VERSION" \
  "nvidia-nvvm==$NVVM_VERSION" \
  "nvidia-cuda-runtime==$RUNTIME_VERSION" \
  "nvidia-cuda-cccl==$CCCL_VERSION"

# The wheels merge into site-packages/nvidia/cu13 with the usual toolkit layout
# (bin/ include/ lib/ nvvm/); give it a stable path.
root=$("$VENV/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
for f in bin/nvcc bin/ptxas nvvm/bin/cicc include/cuda_runtime.h include/cuda_fp16.h \
  include/cuda_bf16.h include/cccl/cub/cub.cuh; do
  if [ ! -e "$root/$f" ]; then
    echo "error: the CUDA wheels did not provide $f (under $root)" >&2
    exit 1
  fi
done
ln -sfn "$root" "$DIR/cuda"
# Tools that look for lib64 (cudarc's link search, CMake).
[ -e "$DIR/cuda/lib64" ] || ln -s lib "$DIR/cuda/lib64"
"$DIR/cuda/bin/nvcc" --version | tail -n 2
touch "$STAMP"
echo "CUDA toolkit installed in $DIR; run: source scripts/cuda-env.sh"
