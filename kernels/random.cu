// randn: standard normal floats from a counter-based generator, as GPU frameworks' randn does.
//
// Output i depends only on (seed, i): group g = i / 4 is the Philox4x32-10 counter
// (g low word, g high word, 0, 0) under the key (seed low word, seed high word); its four 32-bit
// outputs become two Box-Muller pairs, outputs 4g .. 4g+3. No state, no launch-shape
// dependence, so the CPU reference (src/ops/cpu.rs) computes the same numbers, and any thread
// count gives the same tensor.
//
// Philox: Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC'11),
// the Random123 constants; the CPU side checks the Random123 known-answer vectors.

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

struct u32x4 {
    unsigned int x, y, z, w;
};

__device__ __forceinline__ u32x4 philox_round(u32x4 c, unsigned int k0, unsigned int k1) {
    unsigned int hi0 = __umulhi(PHILOX_M0, c.x);
    unsigned int lo0 = PHILOX_M0 * c.x;
    unsigned int hi1 = __umulhi(PHILOX_M1, c.z);
    unsigned int lo1 = PHILOX_M1 * c.z;
    u32x4 r = {hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    return r;
}

// Ten rounds, the key bumped between rounds (Random123's philox4x32_R with R = 10).
__device__ __forceinline__ u32x4 philox4x32_10(u32x4 c, unsigned int k0, unsigned int k1) {
#pragma unroll
    for (int i = 0; i < 9; ++i) {
        c = philox_round(c, k0, k1);
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    return philox_round(c, k0, k1);
}

// The top 24 bits as a float in (0, 1]: exact in f32, never 0 (log stays finite).
__device__ __forceinline__ float open_unit(unsigned int x) {
    return (float)((x >> 8) + 1u) * (1.0f / 16777216.0f);
}

// The top 24 bits as a float in [0, 1): exact in f32.
__device__ __forceinline__ float closed_unit(unsigned int x) {
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}

// Box-Muller: two uniforms to two independent standard normals. Plain (not fast-math)
// logf / sqrtf / cosf / sinf, so the CPU reference agrees to a few ulp.
__device__ __forceinline__ void box_muller(unsigned int a, unsigned int b, float *z0, float *z1) {
    float r = sqrtf(-2.0f * logf(open_unit(a)));
    float t = 6.28318530717958647692f * closed_unit(b);
    *z0 = r * cosf(t);
    *z1 = r * sinf(t);
}

extern "C" __global__ void randn(float *out, unsigned long long seed, size_t n) {
    size_t groups = (n + 3) / 4;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned int k0 = (unsigned int)seed;
    unsigned int k1 = (unsigned int)(seed >> 32);
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += stride) {
        u32x4 c = {(unsigned int)g, (unsigned int)(g >> 32), 0u, 0u};
        u32x4 r = philox4x32_10(c, k0, k1);
        float z[4];
        box_muller(r.x, r.y, &z[0], &z[1]);
        box_muller(r.z, r.w, &z[2], &z[3]);
        size_t base = 4 * g;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (base + j < n) out[base + j] = z[j];
        }
    }
}
