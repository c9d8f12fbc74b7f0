#!/usr/bin/env bash
# One GPU-machine session of the Sanitizer API probe (docs/design/sanitizer-api-notes.md §6).
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; W=$(mktemp -d)
CUDA=${CUDA_HOME:-/usr/local/cuda}
SAN_INC=$(dirname "$(find "$CUDA"/ "$CUDA"/../ -name sanitizer_patching.h 2>/dev/null | head -1)")
SAN_LIB=$(dirname "$(find "$CUDA"/ "$CUDA"/../ -name 'libsanitizer-public.so' 2>/dev/null | head -1)")
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "SAN_INC=$SAN_INC SAN_LIB=$SAN_LIB pwd=$PWD"; ls "$SAN_LIB" | head; "$CUDA/bin/nvcc" --version | tail -2
tests/run_gpu/build-patches.sh "$OUT/sanitizer_patches.fatbin" 2>&1 | tail -5
gcc -I"$SAN_INC" -I"$CUDA/include" tests/run_gpu/probe/offsets.c -o $W/offsets && $W/offsets
gcc -shared -fPIC -I"$SAN_INC" -I"$CUDA/include" tests/run_gpu/probe/probe_tool.c -L"$SAN_LIB" -lsanitizer-public -Wl,-rpath,"$SAN_LIB" -o $W/probe_tool.so || echo "probe tool build failed"
"$CUDA/bin/nvcc" -arch=sm_90 tests/run_gpu/probe/probe_app.cu -o $W/probe_app -lpthread || echo "app build failed"
echo "==== A: CUDA_INJECTION64_PATH only"
CUDA_INJECTION64_PATH=$W/probe_tool.so timeout 60 $W/probe_app
echo "==== B: LD_PRELOAD constructor"
LD_PRELOAD=$W/probe_tool.so PROBE_CTOR=1 timeout 60 $W/probe_app 2>&1 | head -30
echo "==== C: injection, API domains, patches"
CUDA_INJECTION64_PATH=$W/probe_tool.so PROBE_API=1 PROBE_PATCHES=$OUT/sanitizer_patches.fatbin timeout 120 $W/probe_app
echo "==== D: injection + patches, eager loading"
CUDA_MODULE_LOADING=EAGER CUDA_INJECTION64_PATH=$W/probe_tool.so PROBE_PATCHES=$OUT/sanitizer_patches.fatbin timeout 120 $W/probe_app | grep -v "^PROBE domain=[0-9]* cbid=[0-9]* tid=[0-9]*$" | head -80
echo "==== E: python torch import under injection"
CUDA_INJECTION64_PATH=$W/probe_tool.so timeout 120 /opt/torch/.venv/bin/python3 -c "import torch; x=torch.ones(4,device='cuda'); print('sum', x.sum().item())" 2>&1 | grep -v "PROBE domain=3 cbid=9 " | head -40
} > "$OUT/probe.log" 2>&1
tail -c 3000 "$OUT/probe.log"
