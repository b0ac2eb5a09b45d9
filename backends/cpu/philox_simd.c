/* philox_simd.c : which vector path the CPU RNG runs (philox_simd.h): the best this CPU has
 * (cpuid, once), or the one a test set. The ISA changes the speed, never a bit. */
#include "philox_simd.h"

#include <stdatomic.h>

static atomic_int isa_now = -1; /* -1: not chosen yet */

static int cpu_has(int isa)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* cpuid first: the per-ISA files' functions are compiled for their ISA, even the trivial ones */
    if (isa == FM_RNG_ISA_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               fm_rng_simd_compiled_avx512();
    if (isa == FM_RNG_ISA_AVX2)
        return __builtin_cpu_supports("avx2") && fm_rng_simd_compiled_avx2();
#endif
    return isa == FM_RNG_ISA_SCALAR;
}

int fm_rng_simd_isa(void)
{
    int isa = atomic_load_explicit(&isa_now, memory_order_relaxed);
    if (isa < 0) { /* two threads may both look: they choose the same */
        isa = cpu_has(FM_RNG_ISA_AVX512) ? FM_RNG_ISA_AVX512 : cpu_has(FM_RNG_ISA_AVX2) ? FM_RNG_ISA_AVX2
                                                                                          : FM_RNG_ISA_SCALAR;
        atomic_store_explicit(&isa_now, isa, memory_order_relaxed);
    }
    return isa;
}

int fm_rng_simd_set_isa(int isa)
{
    if (isa < FM_RNG_ISA_SCALAR || isa > FM_RNG_ISA_AVX512 || !cpu_has(isa))
        return -1;
    const int before = fm_rng_simd_isa();
    atomic_store_explicit(&isa_now, isa, memory_order_relaxed);
    return before;
}

int64_t fm_px_simd_fill(const fm_px_simd_args *a, uint64_t seed, uint64_t u0, int64_t n, void *dst, int nt)
{
    switch (fm_rng_simd_isa()) {
    case FM_RNG_ISA_AVX512: return fm_px_simd_fill_avx512(a, seed, u0, n, dst, nt);
    case FM_RNG_ISA_AVX2: return fm_px_simd_fill_avx2(a, seed, u0, n, dst, nt);
    default: return 0;
    }
}

int fm_philox_simd_blocks(int nb, uint64_t seed, const uint32_t *const ctr[4], uint32_t *const out[4])
{
    switch (fm_rng_simd_isa()) {
    case FM_RNG_ISA_AVX512: return fm_philox_simd_blocks_avx512(nb, seed, ctr, out);
    case FM_RNG_ISA_AVX2: return fm_philox_simd_blocks_avx2(nb, seed, ctr, out);
    default: return 0;
    }
}
