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
/* The counter and the clock when loaded: ticks become nanoseconds by their rates since. */
static uint64_t tsc0;
static struct timespec t0;

__attribute__((constructor)) static void load(void) {
  const char *path = getenv("DRIVER_TIMING_REAL");
  void *real = dlopen(path ? path : "/usr/local/nvidia/lib64/libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!real) {
    fprintf(stderr, "driver-timing: cannot load the real driver (set DRIVER_TIMING_REAL): %s\n", dlerror());
    exit(3);
  }
  for (int i = 0; i < shim_count; i++) shim_ptrs[i] = dlsym(real, shim_names[i]);
  real_launch = (launch_t)dlsym(real, "cuLaunchKernel");
  real_record = (record_t)dlsym(real, "cuEventRecord");
  real_wait = (wait_t)dlsym(real, "cuStreamWaitEvent");
  clock_gettime(CLOCK_MONOTONIC, &t0);
  tsc0 = __rdtsc();
}

/* Nanoseconds per tick, measured over the time since loading (a second or more by the time a
   benchmark asks). */
static double ns_per_tick(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  uint64_t tsc = __rdtsc();
  double ns = (t.tv_sec - t0.tv_sec) * 1e9 + (t.tv_nsec - t0.tv_nsec);
  return tsc > tsc0 ? ns / (double)(tsc - tsc0) : 0.0;
}

/* The totals so far: calls and nanoseconds inside cuLaunchKernel, cuEventRecord and
   cuStreamWaitEvent, in that order. */
void streamsan_driver_time(uint64_t out_calls[3], double out_ns[3]) {
  double scale = ns_per_tick();
  for (int i = 0; i < 3; i++) {
    out_calls[i] = calls[i];
    out_ns[i] = ticks[i] * scale;
  }
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  uint64_t t = __rdtsc();
  int r = real_launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
  ticks[0] += __rdtsc() - t;
  calls[0]++;
  return r;
}

int cuEventRecord(void *event, void *stream) {
  uint64_t t = __rdtsc();
  int r = real_record(event, stream);
  ticks[1] += __rdtsc() - t;
  calls[1]++;
  return r;
}

int cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
  uint64_t t = __rdtsc();
  int r = real_wait(stream, event, flags);
  ticks[2] += __rdtsc() - t;
  calls[2]++;
  return r;
}
