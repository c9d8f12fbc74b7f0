// Device-side patches for `streamsan run` (crates/streamsan-tool): called by the Sanitizer API
// before every global-memory load, store and atomic (and cp.async read) of a patched kernel.
//
// Each launch gets a log (userdata, set per launch with sanitizerSetLaunchCallbackData): a
// counter, a capacity and an array of (address, length, kind) entries. A warp whose active
// lanes of one kind and size touch one contiguous ascending run of bytes (the coalesced case),
// or all the same address, writes one entry for the warp; other lanes write one entry each. The
// host folds the entries into exact byte ranges per allocation, so nothing here widens an
// access: an entry covers exactly the bytes the lanes touched. Entries past the capacity are
// counted, not written; the host reports the launch as partly unchecked.
//
// Built on a machine with nvcc (tests/run_gpu/build-patches.sh) into
// kernels/sanitizer_patches.fatbin, which the tool embeds.

#include <sanitizer_patching.h>
#include <stdint.h>

struct StreamsanLog {
    unsigned long long count;    // entries claimed, possibly more than cap
    unsigned long long cap;      // entries that fit
    unsigned long long entries;  // device address of StreamsanEntry[cap]
};

struct StreamsanEntry {
    unsigned long long addr;
    unsigned int len;
    unsigned int kind;  // 1 read, 2 write, 3 atomic (read and write)
};

static __device__ __forceinline__ unsigned int streamsan_lane()
{
    unsigned int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

static __device__ __forceinline__ void streamsan_push(StreamsanLog* log, unsigned long long addr,
                                                      unsigned int len, unsigned int kind)
{
    unsigned long long i = atomicAdd(&log->count, 1ULL);
    if (i < log->cap) {
        StreamsanEntry* e = (StreamsanEntry*)log->entries + i;
        e->addr = addr;
        e->len = len;
        e->kind = kind;
    }
}

// Folds the active lanes that share (kind, size) into one entry where their bytes form one
// contiguous ascending run or one address; else each lane logs its own access.
static __device__ __forceinline__ void streamsan_log(StreamsanLog* log, unsigned long long a,
                                                     unsigned int size, unsigned int kind)
{
    unsigned int active = __activemask();
    unsigned int peers = __match_any_sync(active, (kind << 8) | size);
    unsigned int lane = streamsan_lane();
    unsigned int leader = __ffs(peers) - 1;
    unsigned int rank = __popc(peers & ((1u << lane) - 1u));
    unsigned long long base = __shfl_sync(peers, a, leader);
    int contiguous = __all_sync(peers, a == base + (unsigned long long)rank * size);
    int same = __all_sync(peers, a == base);
    if (contiguous) {
        if (lane == leader) streamsan_push(log, base, __popc(peers) * size, kind);
    } else if (same) {
        if (lane == leader) streamsan_push(log, base, size, kind);
    } else {
        streamsan_push(log, a, size, kind);
    }
}

extern "C" __device__ __noinline__ SanitizerPatchResult streamsan_global_access(
    void* userdata, uint64_t pc, void* ptr, uint32_t accessSize, uint32_t flags, const void* pData)
{
    StreamsanLog* log = (StreamsanLog*)userdata;
    if (log == 0 || (flags & SANITIZER_MEMORY_DEVICE_FLAG_PREFETCH)) return SANITIZER_PATCH_SUCCESS;
    unsigned int kind = flags & (SANITIZER_MEMORY_DEVICE_FLAG_READ | SANITIZER_MEMORY_DEVICE_FLAG_WRITE);
    if (kind == 0) return SANITIZER_PATCH_SUCCESS;
    streamsan_log(log, (unsigned long long)ptr, accessSize, kind);
    return SANITIZER_PATCH_SUCCESS;
}

// cp.async: reads accessSize bytes of global memory at src (NULL when it reads nothing).
extern "C" __device__ __noinline__ SanitizerPatchResult streamsan_memcpy_async(
    void* userdata, uint64_t pc, void* src, uint32_t dst, uint32_t accessSize)
{
    StreamsanLog* log = (StreamsanLog*)userdata;
    if (log == 0 || src == 0 || accessSize == 0) return SANITIZER_PATCH_SUCCESS;
    streamsan_log(log, (unsigned long long)src, accessSize, 1);
    return SANITIZER_PATCH_SUCCESS;
}
