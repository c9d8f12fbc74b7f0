// sum: n floats to one. Each thread accumulates a grid-stride share, each warp reduces with
// shuffles, each block's first warp reduces the warp sums and adds the block's total to *out
// with one atomicAdd. *out must hold 0 first (src/ops/gpu.rs fills it on the same stream), so
// the kernel reads and writes `out`: the op declares it written.
//
// Float addition is not associative and the atomics land in any order: the result differs
// from the CPU reference (a sum in f64) by rounding only, a few ulp of sum |x_i|.

extern "C" __global__ void sum(const float *x, float *out, size_t n) {
    __shared__ float warp_sums[32];
    size_t stride = (size_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        acc += x[i];
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    }
    unsigned int lane = threadIdx.x & 31u;
    unsigned int warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        unsigned int warps = (blockDim.x + 31u) >> 5;
        acc = lane < warps ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) {
            acc += __shfl_down_sync(0xffffffffu, acc, offset);
        }
        if (lane == 0) atomicAdd(out, acc);
    }
}
