#!/usr/bin/env bash
# Builds kernels/sanitizer_patches.fatbin where nvcc and the Sanitizer API headers are (the GPU
# machine): SASS for every architecture CUDA 13 targets, plus PTX of the newest for later GPUs.
# Usage: tests/run_gpu/build-patches.sh OUT_FILE
set -euo pipefail
cd "$(dirname "$0")/../.."
CUDA=${CUDA_HOME:-/usr/local/cuda}
SAN_INC=$(dirname "$(find "$CUDA"/ "$CUDA"/../ -name sanitizer_patching.h 2>/dev/null | head -1)")
gencode=""
for sm in 75 80 86 89 90 100 120; do gencode="$gencode -gencode arch=compute_$sm,code=sm_$sm"; done
gencode="$gencode -gencode arch=compute_120,code=compute_120"
"$CUDA/bin/nvcc" --fatbin --compile-as-tools-patch -I"$SAN_INC" $gencode -o "$1" kernels/sanitizer_patches.cu
ls -l "$1"
