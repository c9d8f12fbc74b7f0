/* A CUDA driver + NVRTC that does nothing, so the online layer's host path can run under
   callgrind on a machine without a GPU. Every call succeeds; handles are distinct fake
   pointers; memory is a bump allocator of fake device addresses. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
typedef int R;
static uintptr_t next_handle = 0x10000;
static void *h(void) { next_handle += 64; return (void *)next_handle; }
static unsigned long long next_addr = 0x7f0000000000ULL;
#define OK return 0
R cuInit(unsigned f) { OK; }
R cuDriverGetVersion(int *v) { *v = 13000; OK; }
R cuDeviceGet(int *d, int o) { *d = o; OK; }
R cuDeviceGetCount(int *n) { *n = 1; OK; }
R cuDeviceGetName(char *n, int len, int d) { strncpy(n, "stub", len); OK; }
R cuDeviceGetAttribute(int *v, int a, int d) { *v = 1; OK; }
R cuDeviceTotalMem_v2(size_t *b, int d) { *b = 1ULL << 36; OK; }
R cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)0x1000; OK; }
R cuDevicePrimaryCtxRelease(int d) { OK; }
R cuDevicePrimaryCtxRelease_v2(int d) { OK; }
static void *cur = 0;
R cuCtxSetCurrent(void *c) { cur = c; OK; }
R cuCtxGetCurrent(void **c) { *c = cur; OK; }
R cuCtxPushCurrent_v2(void *c) { cur = c; OK; }
R cuCtxPopCurrent_v2(void **c) { if (c) *c = cur; OK; }
R cuCtxGetDevice(int *d) { *d = 0; OK; }
R cuCtxSynchronize(void) { OK; }
R cuStreamCreate(void **s, unsigned f) { *s = h(); OK; }
R cuStreamCreateWithPriority(void **s, unsigned f, int p) { *s = h(); OK; }
R cuStreamDestroy_v2(void *s) { OK; }
R cuStreamDestroy(void *s) { OK; }
R cuStreamSynchronize(void *s) { OK; }
R cuStreamQuery(void *s) { OK; }
R cuStreamWaitEvent(void *s, void *e, unsigned f) { OK; }
R cuEventCreate(void **e, unsigned f) { *e = h(); OK; }
R cuEventRecord(void *e, void *s) { OK; }
R cuEventRecordWithFlags(void *e, void *s, unsigned f) { OK; }
R cuEventDestroy_v2(void *e) { OK; }
R cuEventDestroy(void *e) { OK; }
R cuEventSynchronize(void *e) { OK; }
R cuEventQuery(void *e) { OK; }
R cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 0; OK; }
R cuEventElapsedTime_v2(float *ms, void *a, void *b) { *ms = 0; OK; }
static unsigned long long bump(size_t n) { unsigned long long a = next_addr; next_addr += (n + 511) & ~511ULL; return a; }
R cuMemAllocAsync(unsigned long long *p, size_t n, void *s) { *p = bump(n); OK; }
R cuMemAlloc_v2(unsigned long long *p, size_t n) { *p = bump(n); OK; }
R cuMemFreeAsync(unsigned long long p, void *s) { OK; }
R cuMemFree_v2(unsigned long long p) { OK; }
R cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, void *s) { OK; }
R cuMemsetD8_v2(unsigned long long p, unsigned char v, size_t n) { OK; }
R cuMemsetD32Async(unsigned long long p, unsigned v, size_t n, void *s) { OK; }
R cuMemcpyHtoDAsync_v2(unsigned long long d, const void *h, size_t n, void *s) { OK; }
R cuMemcpyDtoHAsync_v2(void *h, unsigned long long d, size_t n, void *s) { OK; }
R cuMemcpyDtoDAsync_v2(unsigned long long a, unsigned long long b, size_t n, void *s) { OK; }
R cuMemcpyHtoD_v2(unsigned long long d, const void *h, size_t n) { OK; }
R cuMemcpyDtoH_v2(void *h, unsigned long long d, size_t n) { OK; }
R cuModuleLoadData(void **m, const void *img) { *m = h(); OK; }
R cuModuleLoadDataEx(void **m, const void *img, unsigned n, void *o, void **v) { *m = h(); OK; }
R cuModuleGetFunction(void **f, void *m, const char *n) { *f = h(); OK; }
R cuModuleUnload(void *m) { OK; }
R cuFuncGetAttribute(int *v, int a, void *f) { *v = 0; OK; }
R cuFuncSetAttribute(void *f, int a, int v) { OK; }
#include <stdlib.h>
#include <time.h>
static long spin_ns = -1;
static void spin(void) {
  if (spin_ns < 0) { const char *e = getenv("STUB_LAUNCH_NS"); spin_ns = e ? atol(e) : 0; }
  if (!spin_ns) return;
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  do { clock_gettime(CLOCK_MONOTONIC, &b); } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < spin_ns);
}
/* STUB_TOUCH_KB: bytes of memory each launch writes, standing in for the driver's own work
   evicting the caller's data from the caches between launches. */
static long touch_kb = -1;
static unsigned char *touched;
static void touch(void) {
  if (touch_kb < 0) {
    const char *e = getenv("STUB_TOUCH_KB");
    touch_kb = e ? atol(e) : 0;
    if (touch_kb) touched = calloc(touch_kb, 1024);
  }
  for (long i = 0; i < touch_kb * 1024; i += 64) touched[i]++;
}
R cuLaunchKernel(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                 unsigned sm, void *s, void **p, void **x) { touch(); spin(); OK; }
R cuGetErrorString(R e, const char **s) { *s = "stub error"; OK; }
R cuGetErrorName(R e, const char **s) { *s = "STUB_ERROR"; OK; }
R cuPointerGetAttribute(void *d, int a, unsigned long long p) { OK; }
R cuMemGetInfo_v2(size_t *f, size_t *t) { *f = *t = 1ULL << 36; OK; }
/* NVRTC */
R nvrtcCreateProgram(void **p, const char *src, const char *n, int k, const char *const *hs,
                     const char *const *ns) { *p = h(); OK; }
R nvrtcCompileProgram(void *p, int n, const char *const *o) { OK; }
R nvrtcGetPTXSize(void *p, size_t *n) { *n = 5; OK; }
R nvrtcGetPTX(void *p, char *out) { memcpy(out, "stub", 5); OK; }
R nvrtcDestroyProgram(void **p) { OK; }
R nvrtcGetProgramLogSize(void *p, size_t *n) { *n = 1; OK; }
R nvrtcGetProgramLog(void *p, char *out) { out[0] = 0; OK; }
const char *nvrtcGetErrorString(R e) { return "stub"; }
R nvrtcVersion(int *a, int *b) { *a = 13; *b = 0; OK; }
