// Exercises the CUDA calls `streamsan run` must see, for the Sanitizer API probe (one of each).
#include <cstdio>
#include <cuda_runtime.h>
#include <pthread.h>

__global__ void fill(float* x, int n, float v) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
__global__ void every_other(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (2 * i < n) y[i] = x[2 * i]; }
__global__ void count(const float* x, int n, unsigned* c) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n && x[i] > 0) atomicAdd(c, 1u); }
static void CUDART_CB host_fn(void*) { printf("APP host fn ran\n"); }
static void* other_thread(void* p) { fill<<<1, 32, 0, cudaStreamPerThread>>>((float*)p, 32, 3.f); cudaStreamSynchronize(cudaStreamPerThread); return 0; }
#define CK(x) do { cudaError_t err_ = (x); if (err_) { printf("APP %s failed: %s\n", #x, cudaGetErrorString(err_)); } } while (0)

int main() {
    const int n = 1 << 12;
    float *a, *b, *h_pinned, *m; unsigned* c; float h_page[64];
    cudaStream_t s1, s2; cudaEvent_t e;
    printf("APP ---- setup\n"); fflush(stdout);
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreate(&s2)); CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaMalloc(&a, n * 4)); CK(cudaMalloc(&b, n * 4)); CK(cudaMalloc(&c, 4)); CK(cudaMallocHost(&h_pinned, n * 4)); CK(cudaMallocManaged(&m, 256));
    printf("APP ---- copies and sets\n"); fflush(stdout);
    CK(cudaMemcpy(a, h_page, sizeof h_page, cudaMemcpyHostToDevice));
    CK(cudaMemset(b, 0, n * 4)); CK(cudaMemsetAsync(c, 0, 4, s1)); CK(cudaMemcpyAsync(h_pinned, a, n * 4, cudaMemcpyDeviceToHost, s1));
    CK(cudaMemset2DAsync(b, 256, 1, 64, 4, s2));
    printf("APP ---- kernels, event\n"); fflush(stdout);
    fill<<<n / 256, 256, 0, s1>>>(a, n, 1.f);
    CK(cudaEventRecord(e, s1)); CK(cudaStreamWaitEvent(s2, e, 0));
    every_other<<<n / 512, 256, 0, s2>>>(a, b, n);
    count<<<n / 256, 256, 0, s2>>>(a, n, c);
    printf("APP query %d\n", (int)cudaEventQuery(e)); CK(cudaEventSynchronize(e)); printf("APP squery %d\n", (int)cudaStreamQuery(s2)); CK(cudaStreamSynchronize(s2));
    fill<<<1, 64>>>(m, 64, 2.f);  // legacy default stream
    CK(cudaLaunchHostFunc(s1, host_fn, 0));
    printf("APP ---- async alloc\n"); fflush(stdout);
    float* p; CK(cudaMallocAsync(&p, 1024, s1)); fill<<<1, 256, 0, s1>>>(p, 256, 1.f); CK(cudaFreeAsync(p, s1));
    printf("APP ---- capture\n"); fflush(stdout);
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    fill<<<n / 256, 256, 0, s1>>>(a, n, 5.f); CK(cudaMemsetAsync(b, 0, 64, s1)); CK(cudaMemcpyAsync(b, a, 64, cudaMemcpyDeviceToDevice, s1)); CK(cudaLaunchHostFunc(s1, host_fn, 0));
    CK(cudaStreamEndCapture(s1, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    printf("APP ---- graph launches\n"); fflush(stdout);
    CK(cudaGraphLaunch(ge, s1)); CK(cudaGraphLaunch(ge, s1));
    CK(cudaDeviceSynchronize());
    printf("APP ---- thread\n"); fflush(stdout);
    pthread_t t; pthread_create(&t, 0, other_thread, b); pthread_join(t, 0);
    printf("APP ---- teardown\n"); fflush(stdout);
    CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
    CK(cudaFree(a)); CK(cudaFree(b)); CK(cudaFreeHost(h_pinned)); CK(cudaFree(m)); CK(cudaFree(c));
    CK(cudaEventDestroy(e)); CK(cudaStreamDestroy(s1)); CK(cudaStreamDestroy(s2));
    printf("APP done\n");
    return 0;
}
