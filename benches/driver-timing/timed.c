/* A libcuda.so in front of the real driver: every symbol jumps to the real one, and the three
   calls a tracked launch makes (cuLaunchKernel, cuEventRecord, cuStreamWaitEvent) are timed
   with the time-stamp counter around the real call. `online_overhead` reads the totals through
   `streamsan_driver_time` and splits each variant's time per launch into the driver's and the
   caller's: whether a change of cost is the sanitizer's or the driver's. See README.md. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

/* From the trampolines build.sh writes: every other symbol of the real driver. */
extern const char *shim_names[] __attribute__((visibility("hidden")));
extern void *shim_ptrs[] __attribute__((visibility("hidden")));
extern int shim_count __attribute__((visibility("hidden")));

typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);
typedef int (*record_t)(void *, void *);
typedef int (*wait_t)(void *, void *, unsigned);
static launch_t real_launch;
static record_t real_record;
static wait_t real_wait;

/* Calls and time-stamp ticks inside each timed call: launch, record, wait. */
static uint64_t calls[3], ticks[3];
/* Nanoseconds per tick of the time-stamp counter, measured when loaded. */
static double ns_per_tick;

/* What a function the real driver lacks does instead of jumping to address 0: it fails, as a
   driver without it would. CUDA_ERROR_NOT_FOUND. */
static int missing(void) { return 500; }

__attribute__((constructor)) static void load(void) {
  const char *path = getenv("DRIVER_TIMING_REAL");
  if (!path) path = "/usr/local/nvidia/lib64/libcuda.so.1";
  void *real = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!real)
    fprintf(stderr, "driver-timing: cannot load the real driver %s (set DRIVER_TIMING_REAL): %s; every call fails\n",
            path, dlerror());
  int lacking = 0;
  for (int i = 0; i < shim_count; i++) {
    shim_ptrs[i] = real ? dlsym(real, shim_names[i]) : NULL;
    if (!shim_ptrs[i]) {
      if (real && lacking++ == 0)
        fprintf(stderr, "driver-timing: %s lacks %s (built against another driver?); such calls fail\n", path,
                shim_names[i]);
      shim_ptrs[i] = (void *)missing;
    }
  }
  real_launch = real ? (launch_t)dlsym(real, "cuLaunchKernel") : NULL;
  real_record = real ? (record_t)dlsym(real, "cuEventRecord") : NULL;
  real_wait = real ? (wait_t)dlsym(real, "cuStreamWaitEvent") : NULL;
  /* The counter's rate, against the clock over 20 ms, once: every total is scaled alike. */
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t tsc0 = __rdtsc(), tsc;
  double ns;
  do {
    clock_gettime(CLOCK_MONOTONIC, &t);
    tsc = __rdtsc();
    ns = (t.tv_sec - t0.tv_sec) * 1e9 + (t.tv_nsec - t0.tv_nsec);
  } while (ns < 20e6);
  ns_per_tick = ns / (double)(tsc - tsc0);
}

/* The totals so far: calls and nanoseconds inside cuLaunchKernel, cuEventRecord and
   cuStreamWaitEvent, in that order. */
void streamsan_driver_time(uint64_t out_calls[3], double out_ns[3]) {
  for (int i = 0; i < 3; i++) {
    out_calls[i] = calls[i];
    out_ns[i] = ticks[i] * ns_per_tick;
  }
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  if (!real_launch) return missing();
  uint64_t t = __rdtsc();
  int r = real_launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
  ticks[0] += __rdtsc() - t;
  calls[0]++;
  return r;
}

int cuEventRecord(void *event, void *stream) {
  if (!real_record) return missing();
  uint64_t t = __rdtsc();
  int r = real_record(event, stream);
  ticks[1] += __rdtsc() - t;
  calls[1]++;
  return r;
}

int cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
  if (!real_wait) return missing();
  uint64_t t = __rdtsc();
  int r = real_wait(stream, event, flags);
  ticks[2] += __rdtsc() - t;
  calls[2]++;
  return r;
}
