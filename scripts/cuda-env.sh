# Source this (bash) after scripts/install-cuda-toolkit.sh to build with `--features cuda`:
#   source scripts/cuda-env.sh
# It points nvcc discovery (PATH, CUDA_HOME/CUDA_PATH/CUDA_ROOT) at .cuda-toolkit/cuda and sets
# the GPU architecture candle's kernels are compiled for. There is no nvidia-smi to ask on a
# machine without a GPU, so CUDA_COMPUTE_CAP must be given: 80 (Ampere) unless already set; use 90
# for Hopper (H100/H200) binaries. PTX built for 80 also runs on newer GPUs (the driver JITs it).
_edgetam_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The real path: in CI .cuda-toolkit is a link into the cache outside the clone, and build
# scripts rerun (nvcc recompiles candle's kernels) when CUDA_HOME changes, so it must not carry
# the clone's own path.
_edgetam_cuda="$(realpath -m "$_edgetam_root/.cuda-toolkit")/cuda"
if [ ! -x "$_edgetam_cuda/bin/nvcc" ]; then
  echo "cuda-env.sh: no toolkit in $_edgetam_cuda; run scripts/install-cuda-toolkit.sh first" >&2
  return 1 2>/dev/null || exit 1
fi
export CUDA_HOME="$_edgetam_cuda"
export CUDA_PATH="$_edgetam_cuda"
export CUDA_ROOT="$_edgetam_cuda"
export NVCC="$_edgetam_cuda/bin/nvcc"
export PATH="$_edgetam_cuda/bin:$PATH"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-80}"
# cudaforge (candle-kernels' build script) compiles kernels on a rayon pool; keep it to the
# machine's cores like cargo's -j.
export CUDAFORGE_THREADS="${CUDAFORGE_THREADS:-$(nproc)}"
unset _edgetam_root _edgetam_cuda
