// Cost of `streamsan run` against compute-sanitizer on one program: ITERS rounds of a
// memory-bound kernel pair on two streams joined by events (a correct program), timed inside
// the program (wall clock of the loop, after a warm-up) and printed as microseconds per
// launch. `bench N ITERS`: N floats per buffer.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void scale(const float* x, float* y, int n, float a) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i]; }

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1 << 20, iters = argc > 2 ? atoi(argv[2]) : 200;
    float *x, *y, *z; cudaStream_t s1, s2; cudaEvent_t e1, e2;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&e1, cudaEventDisableTiming); cudaEventCreateWithFlags(&e2, cudaEventDisableTiming);
    cudaMalloc(&x, n * 4); cudaMalloc(&y, n * 4); cudaMalloc(&z, n * 4);
    cudaMemset(x, 0, n * 4); cudaDeviceSynchronize();
    auto round = [&]() {
        scale<<<(n + 255) / 256, 256, 0, s1>>>(x, y, n, 2.f);
        cudaEventRecord(e1, s1); cudaStreamWaitEvent(s2, e1, 0);
        scale<<<(n + 255) / 256, 256, 0, s2>>>(y, z, n, 0.5f);
        cudaEventRecord(e2, s2); cudaStreamWaitEvent(s1, e2, 0);
    };
    for (int i = 0; i < 5; i++) round();
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; i++) round();
    cudaDeviceSynchronize();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    printf("BENCH n=%d iters=%d us_per_launch=%.2f\n", n, iters, us / (2.0 * iters));
    return 0;
}
