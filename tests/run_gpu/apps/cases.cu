// Racy/fixed pairs for `streamsan run`, one per ordering rule of DESIGN.md, as plain CUDA C
// programs (no streamsan code in them). `cases NAME racy|fixed` runs one; it prints the
// numbers it got and exits 0 either way (the verdict is streamsan's, the numbers are the
// proof that the racy variant really races: a spin kernel ahead of the producer makes the
// consumer run first every time when nothing orders them).
//
// Where each expectation comes from (CUDA Runtime API documentation, 13.0):
//  - cudaStreamWaitEvent: "Make a compute stream wait on an event ... all future work
//    submitted to stream will wait until event reports completion"; streams otherwise run
//    concurrently (Programming Guide, "Streams").
//  - cudaEventSynchronize / cudaStreamQuery returning cudaSuccess: the host knows the work
//    completed ("Stream synchronization behavior", "cudaStreamQuery").
//  - the legacy default stream synchronizes with blocking streams, not with streams created
//    with cudaStreamNonBlocking ("Stream synchronization behavior").
//  - cudaMallocAsync: "the allocation ... can be used on another stream only after ... an
//    event" (Stream Ordered Memory Allocator: "Physical page caching behavior" / usage rules).
//  - cudaGraphLaunch: the graph's work is ordered in its stream like any other work.
//  - cudaEventRecord "captures the contents of stream at the time of this call"; a wait
//    orders only that work.
//  - the per-thread default stream (cudaStreamPerThread) is not synchronized with other
//    threads' per-thread streams, but it is a blocking stream: the legacy default stream
//    waits for it ("Stream synchronization behavior", per-thread default stream).
//  - cudaStreamDestroy: "In case the device is still doing work in the stream ... when
//    cudaStreamDestroy() is called, the function will return immediately": destroying the
//    producer's stream orders nothing; the consumer still needs an event or a host wait.
//  - two atomics never form a data race ("not morally strong" is part of the PTX ISA's
//    definition, Memory Consistency Model: "Data races"); an atomic and a plain access to the
//    same bytes on unordered streams do.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
#include <pthread.h>

#define CK(x) do { cudaError_t err_ = (x); if (err_) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, __LINE__); return 1; } } while (0)

__global__ void spin(long long cycles) { long long t0 = clock64(); while (clock64() - t0 < cycles) {} }
__global__ void fill(float* x, int n, float v) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
__global__ void sum(const float* x, int n, float* out) {
    __shared__ float s[256];
    float acc = 0; for (int i = threadIdx.x; i < n; i += 256) acc += x[i];
    s[threadIdx.x] = acc; __syncthreads();
    if (threadIdx.x == 0) { float t = 0; for (int i = 0; i < 256; i++) t += s[i]; *out = t; }
}

// Counts the ones of x into *c with atomicAdd.
__global__ void count_ones(const float* x, int n, unsigned* c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n && x[i] == 1.f) atomicAdd(c, 1u);
}
// Adds v to *c after `cycles`: with atomicAdd, or as a plain read early and a store late (the
// window in which another stream's atomics are lost).
__global__ void add_late(unsigned* c, unsigned v, long long cycles, bool atomic) {
    unsigned old = atomic ? 0u : *c;
    long long t0 = clock64(); while (clock64() - t0 < cycles) {}
    if (atomic) atomicAdd(c, v); else *c = old + v;
}

static const int N = 1 << 16;
static const long long SPIN = 200000000;  // ~0.1 s at 2 GHz

static int report(const char* what, float got, float want) {
    printf("%s: got %.0f, expected %.0f: %s\n", what, got, want, got == want ? "right" : "WRONG");
    return 0;
}

// Producer on s1 (behind a spin), consumer on s2: cudaStreamWaitEvent orders them.
static int cross_stream(bool fixed) {
    float *x, *out, h; cudaStream_t s1, s2; cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&out, 4));
    fill<<<N / 256, 256>>>(x, N, 0.f); CK(cudaDeviceSynchronize());
    spin<<<1, 1, 0, s1>>>(SPIN);
    fill<<<N / 256, 256, 0, s1>>>(x, N, 1.f);
    if (fixed) { CK(cudaEventRecord(e, s1)); CK(cudaStreamWaitEvent(s2, e, 0)); }
    sum<<<1, 256, 0, s2>>>(x, N, out);
    CK(cudaMemcpyAsync(&h, out, 4, cudaMemcpyDeviceToHost, s2)); CK(cudaStreamSynchronize(s2));
    CK(cudaDeviceSynchronize());
    return report("sum after fill on another stream", h, N);
}

// The host waits for the producer (event synchronize, or a stream query that says done)
// before it enqueues the consumer.
static int host_wait(bool fixed, bool by_query) {
    float *x, *out, h; cudaStream_t s1, s2; cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&out, 4));
    fill<<<N / 256, 256>>>(x, N, 0.f); CK(cudaDeviceSynchronize());
    spin<<<1, 1, 0, s1>>>(SPIN);
    fill<<<N / 256, 256, 0, s1>>>(x, N, 1.f);
    CK(cudaEventRecord(e, s1));
    if (fixed) {
        if (by_query) { while (cudaStreamQuery(s1) == cudaErrorNotReady) {} }
        else CK(cudaEventSynchronize(e));
    }
    sum<<<1, 256, 0, s2>>>(x, N, out);
    // On s2: the legacy stream does not wait for a non-blocking stream (streamsan caught this
    // program's first version reading `out` with a plain cudaMemcpy).
    CK(cudaMemcpyAsync(&h, out, 4, cudaMemcpyDeviceToHost, s2)); CK(cudaStreamSynchronize(s2));
    CK(cudaDeviceSynchronize());
    return report(by_query ? "sum after a stream query" : "sum after an event sync", h, N);
}

// Legacy default stream: the consumer on the legacy stream waits for a blocking producer
// stream, not for a non-blocking one.
static int legacy(bool fixed) {
    float *x, *out, h; cudaStream_t s1;
    CK(cudaStreamCreateWithFlags(&s1, fixed ? cudaStreamDefault : cudaStreamNonBlocking));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&out, 4));
    fill<<<N / 256, 256>>>(x, N, 0.f); CK(cudaDeviceSynchronize());
    spin<<<1, 1, 0, s1>>>(SPIN);
    fill<<<N / 256, 256, 0, s1>>>(x, N, 1.f);
    sum<<<1, 256>>>(x, N, out);  // legacy default stream
    CK(cudaMemcpy(&h, out, 4, cudaMemcpyDeviceToHost));
    CK(cudaDeviceSynchronize());
    return report("sum on the legacy stream", h, N);
}

// An async copy (device to device) on s2 of what a kernel on s1 writes.
static int copy_after_kernel(bool fixed) {
    float *x, *y, *h; cudaStream_t s1, s2; cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&y, N * 4)); CK(cudaMallocHost(&h, N * 4));
    fill<<<N / 256, 256>>>(x, N, 0.f); CK(cudaDeviceSynchronize());
    spin<<<1, 1, 0, s1>>>(SPIN);
    fill<<<N / 256, 256, 0, s1>>>(x, N, 2.f);
    if (fixed) { CK(cudaEventRecord(e, s1)); CK(cudaStreamWaitEvent(s2, e, 0)); }
    CK(cudaMemcpyAsync(y, x, N * 4, cudaMemcpyDeviceToDevice, s2));
    CK(cudaMemcpyAsync(h, y, N * 4, cudaMemcpyDeviceToHost, s2));
    CK(cudaDeviceSynchronize());
    return report("copied element", h[N - 1], 2.f);
}

// Copies only (what --api-only still checks): an async upload on s1, a copy of it on s2.
static int copy_copy(bool fixed) {
    float *x, *y, *h; cudaStream_t s1, s2; cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&y, N * 4)); CK(cudaMallocHost(&h, N * 4));
    // cudaMemset is asynchronous to the host for device memory: without this sync it races
    // with the upload on s1 (streamsan caught this program's first version doing that).
    CK(cudaMemset(x, 0, N * 4)); CK(cudaDeviceSynchronize());
    for (int i = 0; i < N; i++) h[i] = 3.f;
    spin<<<1, 1, 0, s1>>>(SPIN);
    CK(cudaMemcpyAsync(x, h, N * 4, cudaMemcpyHostToDevice, s1));
    if (fixed) { CK(cudaEventRecord(e, s1)); CK(cudaStreamWaitEvent(s2, e, 0)); }
    CK(cudaMemcpyAsync(y, x, N * 4, cudaMemcpyDeviceToDevice, s2));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, y, N * 4, cudaMemcpyDeviceToHost));
    return report("copied element", h[0], 3.f);
}

// A memset on s2 of a buffer a kernel on s1 still reads (write after read).
static int memset_after_read(bool fixed) {
    float *x, *out, h; cudaStream_t s1, s2; cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&out, 4));
    fill<<<N / 256, 256>>>(x, N, 1.f); CK(cudaDeviceSynchronize());
    spin<<<1, 1, 0, s1>>>(SPIN);
    sum<<<1, 256, 0, s1>>>(x, N, out);
    if (fixed) { CK(cudaEventRecord(e, s1)); CK(cudaStreamWaitEvent(s2, e, 0)); }
    CK(cudaMemsetAsync(x, 0, N * 4, s2));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(&h, out, 4, cudaMemcpyDeviceToHost));
    return report("sum read before the memset", h, N);
}

// A stream-ordered allocation on s1 used by a kernel on s2.
static int async_alloc(bool fixed) {
    float *x, *out, h; cudaStream_t s1, s2; cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaMalloc(&out, 4));
    spin<<<1, 1, 0, s1>>>(SPIN);
    CK(cudaMallocAsync(&x, N * 4, s1));
    fill<<<N / 256, 256, 0, s1>>>(x, N, 1.f);
    CK(cudaEventRecord(e, s1));
    if (fixed) CK(cudaStreamWaitEvent(s2, e, 0));
    sum<<<1, 256, 0, s2>>>(x, N, out);
    CK(cudaMemcpyAsync(&h, out, 4, cudaMemcpyDeviceToHost, s2)); CK(cudaStreamSynchronize(s2));
    CK(cudaDeviceSynchronize());
    CK(cudaFreeAsync(x, s1)); CK(cudaDeviceSynchronize());
    return report("sum of a stream-ordered allocation", h, N);
}

// A graph (captured fill) launched on s1; the consumer on s2.
static int graph(bool fixed) {
    float *x, *out, h; cudaStream_t s1, s2; cudaEvent_t e; cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&out, 4));
    fill<<<N / 256, 256>>>(x, N, 0.f); CK(cudaDeviceSynchronize());
    CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    spin<<<1, 1, 0, s1>>>(SPIN);
    fill<<<N / 256, 256, 0, s1>>>(x, N, 1.f);
    CK(cudaStreamEndCapture(s1, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s1));
    if (fixed) { CK(cudaEventRecord(e, s1)); CK(cudaStreamWaitEvent(s2, e, 0)); }
    sum<<<1, 256, 0, s2>>>(x, N, out);
    CK(cudaMemcpyAsync(&h, out, 4, cudaMemcpyDeviceToHost, s2)); CK(cudaStreamSynchronize(s2));
    CK(cudaDeviceSynchronize());
    return report("sum after a graph on another stream", h, N);
}

// The event is recorded before the producer: the wait orders nothing of it.
static int record_before(bool fixed) {
    float *x, *out, h; cudaStream_t s1, s2; cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&out, 4));
    fill<<<N / 256, 256>>>(x, N, 0.f); CK(cudaDeviceSynchronize());
    if (!fixed) CK(cudaEventRecord(e, s1));
    spin<<<1, 1, 0, s1>>>(SPIN);
    fill<<<N / 256, 256, 0, s1>>>(x, N, 1.f);
    if (fixed) CK(cudaEventRecord(e, s1));
    CK(cudaStreamWaitEvent(s2, e, 0));
    sum<<<1, 256, 0, s2>>>(x, N, out);
    CK(cudaMemcpyAsync(&h, out, 4, cudaMemcpyDeviceToHost, s2)); CK(cudaStreamSynchronize(s2));
    CK(cudaDeviceSynchronize());
    return report("sum after a wait on an event", h, N);
}

// Per-thread default streams: another thread fills x on its own per-thread stream; this
// thread sums it on its per-thread stream (racy) or on the legacy stream (fixed).
// The producer thread stays alive until the consumer is enqueued (a thread that exits
// before may have its per-thread stream's work waited for).
static float* ptds_x;
static pthread_barrier_t ptds_enqueued, ptds_consumed;
static void* ptds_producer(void*) {
    spin<<<1, 1, 0, cudaStreamPerThread>>>(SPIN);
    fill<<<N / 256, 256, 0, cudaStreamPerThread>>>(ptds_x, N, 1.f);
    pthread_barrier_wait(&ptds_enqueued);
    pthread_barrier_wait(&ptds_consumed);
    return 0;
}
static int per_thread(bool fixed) {
    float *out, h; pthread_t t;
    CK(cudaMalloc(&ptds_x, N * 4)); CK(cudaMalloc(&out, 4));
    fill<<<N / 256, 256>>>(ptds_x, N, 0.f); CK(cudaDeviceSynchronize());
    // Warm this thread's per-thread stream (its first use creates it).
    CK(cudaStreamSynchronize(cudaStreamPerThread));
    pthread_barrier_init(&ptds_enqueued, 0, 2); pthread_barrier_init(&ptds_consumed, 0, 2);
    pthread_create(&t, 0, ptds_producer, 0);
    pthread_barrier_wait(&ptds_enqueued);
    cudaStream_t s = fixed ? cudaStreamLegacy : cudaStreamPerThread;
    sum<<<1, 256, 0, s>>>(ptds_x, N, out);
    CK(cudaMemcpyAsync(&h, out, 4, cudaMemcpyDeviceToHost, s)); CK(cudaStreamSynchronize(s));
    pthread_barrier_wait(&ptds_consumed); pthread_join(t, 0);
    CK(cudaDeviceSynchronize());
    return report("sum after another thread's fill", h, N);
}

// Disjoint halves written on two streams, then read after both: never a race. The fixed
// variant is the same program; the racy one has both streams write the same half.
static int halves(bool fixed) {
    float *x, *out, h; cudaStream_t s1, s2; cudaEvent_t e1, e2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&out, 4));
    fill<<<N / 2 / 256, 256, 0, s1>>>(x, N / 2, 1.f);
    fill<<<N / 2 / 256, 256, 0, s2>>>(fixed ? x + N / 2 : x, N / 2, 1.f);
    if (!fixed) fill<<<N / 2 / 256, 256, 0, s2>>>(x + N / 2, N / 2, 1.f);
    CK(cudaEventRecord(e1, s1)); CK(cudaEventRecord(e2, s2));
    CK(cudaStreamWaitEvent(0, e1, 0)); CK(cudaStreamWaitEvent(0, e2, 0));
    sum<<<1, 256>>>(x, N, out);
    CK(cudaMemcpy(&h, out, 4, cudaMemcpyDeviceToHost));
    return report("sum of two halves", h, N);
}

// Two streams add into one counter, unordered. Fixed: both with atomics (not a race, the sum
// is right whatever the order). Racy: s2 adds with a plain load and a late store, which loses
// s1's atomic updates made in between.
static int atomics(bool fixed) {
    float* x; unsigned *c, h; cudaStream_t s1, s2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&c, 4));
    fill<<<N / 256, 256>>>(x, N, 1.f); CK(cudaMemset(c, 0, 4)); CK(cudaDeviceSynchronize());
    spin<<<1, 1, 0, s1>>>(SPIN);
    count_ones<<<N / 256, 256, 0, s1>>>(x, N, c);
    add_late<<<1, 1, 0, s2>>>(c, N, 2 * SPIN, fixed);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(&h, c, 4, cudaMemcpyDeviceToHost));
    return report("count from two streams", h, 2.f * N);
}

// The producer's stream is destroyed right after its kernel (the destroy returns at once),
// then the consumer reads on another stream, and a new stream (which may reuse the handle)
// runs after it; fixed: the host synchronizes the producer before destroying it.
static int destroyed(bool fixed) {
    float *x, *out, h; cudaStream_t s1, s2, s3;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&out, 4));
    fill<<<N / 256, 256>>>(x, N, 0.f); CK(cudaDeviceSynchronize());
    spin<<<1, 1, 0, s1>>>(SPIN);
    fill<<<N / 256, 256, 0, s1>>>(x, N, 1.f);
    if (fixed) CK(cudaStreamSynchronize(s1));
    CK(cudaStreamDestroy(s1));
    sum<<<1, 256, 0, s2>>>(x, N, out);
    CK(cudaMemcpyAsync(&h, out, 4, cudaMemcpyDeviceToHost, s2)); CK(cudaStreamSynchronize(s2));
    CK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
    fill<<<1, 1, 0, s3>>>(out, 1, 0.f); CK(cudaStreamSynchronize(s3)); CK(cudaStreamDestroy(s3));
    CK(cudaDeviceSynchronize());
    return report("sum after fill on a destroyed stream", h, N);
}

int main(int argc, char** argv) {
    if (argc != 3) { fprintf(stderr, "usage: cases NAME racy|fixed\n"); return 2; }
    bool fixed = strcmp(argv[2], "fixed") == 0;
    const char* n = argv[1];
    // Load every kernel once first: CUDA loads modules lazily and the first launch syncs.
    float* warm; CK(cudaMalloc(&warm, 4)); spin<<<1, 1>>>(1); fill<<<1, 1>>>(warm, 1, 0.f); sum<<<1, 256>>>(warm, 1, warm);
    count_ones<<<1, 1>>>(warm, 1, (unsigned*)warm); add_late<<<1, 1>>>((unsigned*)warm, 0, 1, true);
    CK(cudaDeviceSynchronize()); CK(cudaFree(warm));
    if (!strcmp(n, "cross_stream")) return cross_stream(fixed);
    if (!strcmp(n, "event_sync")) return host_wait(fixed, false);
    if (!strcmp(n, "stream_query")) return host_wait(fixed, true);
    if (!strcmp(n, "legacy")) return legacy(fixed);
    if (!strcmp(n, "copy_after_kernel")) return copy_after_kernel(fixed);
    if (!strcmp(n, "copy_copy")) return copy_copy(fixed);
    if (!strcmp(n, "memset_after_read")) return memset_after_read(fixed);
    if (!strcmp(n, "async_alloc")) return async_alloc(fixed);
    if (!strcmp(n, "graph")) return graph(fixed);
    if (!strcmp(n, "record_before")) return record_before(fixed);
    if (!strcmp(n, "per_thread")) return per_thread(fixed);
    if (!strcmp(n, "halves")) return halves(fixed);
    if (!strcmp(n, "atomics")) return atomics(fixed);
    if (!strcmp(n, "destroyed")) return destroyed(fixed);
    fprintf(stderr, "unknown case %s\n", n);
    return 2;
}
