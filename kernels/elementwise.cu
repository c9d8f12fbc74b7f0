// Element-wise kernels over n floats, grid-stride loops (any launch shape covers any n).
// Parameter names are the ones src/ops/gpu.rs gives the sanitizer, so reports say `arg "x"`.

// y = a * x + y
extern "C" __global__ void axpy(float a, const float *x, float *y, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = a * x[i] + y[i];
    }
}

// out = x + y
extern "C" __global__ void add(const float *x, const float *y, float *out, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = x[i] + y[i];
    }
}

// out = value
extern "C" __global__ void fill(float *out, float value, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = value;
    }
}

// dst = src
extern "C" __global__ void copy(const float *src, float *dst, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        dst[i] = src[i];
    }
}
