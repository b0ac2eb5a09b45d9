/* philox_simd.h : the vector paths of the CPU RNG (philox_rng.c): Philox4x32-10 in 16 (AVX-512) or
 * 8 (AVX2) lanes, and the portable mode's fills computed in vector registers with exactly the
 * operations of fusion/philox_portable.h's scalar functions, in the same order (no FMA: the files
 * are compiled with -ffp-contract=off and use no FMA intrinsics), so the bits are the scalar ones.
 * The ISA is picked at run time (cpuid); tests force each one (fm_rng_simd_set_isa). */
#ifndef FM_PHILOX_SIMD_H
#define FM_PHILOX_SIMD_H

#include <stdint.h>

enum { FM_RNG_ISA_SCALAR = 0, FM_RNG_ISA_AVX2 = 1, FM_RNG_ISA_AVX512 = 2 };

/* The portable fills with a vector path (lognormal: the normal one with exp_after). */
enum {
    FM_PX_SIMD_RAW,
    FM_PX_SIMD_UNIFORM_F32,
    FM_PX_SIMD_UNIFORM_F64,
    FM_PX_SIMD_NORMAL_F32,
    FM_PX_SIMD_NORMAL_F64,
    FM_PX_SIMD_EXPONENTIAL_F32,
    FM_PX_SIMD_EXPONENTIAL_F64,
    FM_PX_SIMD_NONE
};

/* The fill's constants, as the scalar emitters compute them from the plan's parameters:
 * uniform lo + width u, normal z sd + mean, exponential e scale (f32: the float roundings). */
typedef struct fm_px_simd_args {
    int kind;      /* FM_PX_SIMD_* */
    int exp_after; /* normal kinds: exp of the values (lognormal) */
    float f0, f1;
    double d0, d1;
} fm_px_simd_args;

/* Units (Philox blocks) [u0, u0 + n) of the portable stream into dst, as many as whole vectors
 * hold (n rounded down to 16 or 8): returns the units written, 0 when the ISA is scalar. nt:
 * streaming (non-temporal) stores, dst 64-byte aligned. */
int64_t fm_px_simd_fill(const fm_px_simd_args *a, uint64_t seed, uint64_t u0, int64_t n, void *dst, int nt);

/* Philox of nb counters given word-major (ctr[j] + i: word j of counter i) into out the same way,
 * as many as whole vectors hold: returns the counters done (curand mode's counters). */
int fm_philox_simd_blocks(int nb, uint64_t seed, const uint32_t *const ctr[4], uint32_t *const out[4]);

/* The ISA in use: the best this CPU has, unless a test set another. */
int fm_rng_simd_isa(void);
/* Tests: use isa from now on (every thread). Returns the ISA used before, or -1 (nothing changed)
 * when the CPU lacks it or it was not compiled in. */
int fm_rng_simd_set_isa(int isa);
/* Tests: streaming stores (philox_rng.c) forced off (0), on (1, any size), or by size (-1, the
 * default); returns the setting before. */
int fm_rng_set_stream_stores(int mode);

/* per ISA (philox_simd_avx512.c, philox_simd_avx2.c); a build without the ISA returns 0 */
int64_t fm_px_simd_fill_avx512(const fm_px_simd_args *a, uint64_t seed, uint64_t u0, int64_t n, void *dst, int nt);
int64_t fm_px_simd_fill_avx2(const fm_px_simd_args *a, uint64_t seed, uint64_t u0, int64_t n, void *dst, int nt);
int fm_philox_simd_blocks_avx512(int nb, uint64_t seed, const uint32_t *const ctr[4], uint32_t *const out[4]);
int fm_philox_simd_blocks_avx2(int nb, uint64_t seed, const uint32_t *const ctr[4], uint32_t *const out[4]);
int fm_rng_simd_compiled_avx512(void);
int fm_rng_simd_compiled_avx2(void);

#endif
