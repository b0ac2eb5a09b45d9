/* philox_simd_avx2.c : philox_simd_body.h in 8 lanes of AVX2, compiled with -mavx2
 * -ffp-contract=off (CMakeLists.txt); called only where cpuid has AVX2 (philox_simd.c). What AVX2
 * lacks is built exactly: the unsigned compare through the sign flip, u32 -> float as two exact
 * 16-bit halves added once (the correctly rounded conversion, as vcvtudq2ps). */
#include "philox_simd.h"

#if defined(__AVX2__)
#include <immintrin.h>

#define L 8
#ifndef NV
#define NV 4 /* vectors per Philox call (philox_simd_body.h): 4 beat 2 and 3 on the dev CPU despite spills */
#endif
#define SFX(name) name##_avx2
typedef __m256i VI;
typedef __m256 VF;
typedef __m256d VD;

#define PRIM static inline __attribute__((always_inline))
PRIM VI iset(uint32_t a) { return _mm256_set1_epi32((int)a); }
PRIM VI iset64(uint64_t a) { return _mm256_set1_epi64x((long long)a); }
PRIM VI iadd(VI a, VI b) { return _mm256_add_epi32(a, b); }
PRIM VI isub(VI a, VI b) { return _mm256_sub_epi32(a, b); }
PRIM VI iadd64(VI a, VI b) { return _mm256_add_epi64(a, b); }
PRIM VI isub64(VI a, VI b) { return _mm256_sub_epi64(a, b); }
PRIM VI ixor(VI a, VI b) { return _mm256_xor_si256(a, b); }
PRIM VI iand(VI a, VI b) { return _mm256_and_si256(a, b); }
PRIM VI ior(VI a, VI b) { return _mm256_or_si256(a, b); }
PRIM VI ixor3(VI a, VI b, VI c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
#define isrl(a, n) _mm256_srli_epi32(a, n)
#define isll(a, n) _mm256_slli_epi32(a, n)
#define isrl64(a, n) _mm256_srli_epi64(a, n)
#define isll64(a, n) _mm256_slli_epi64(a, n)
PRIM VI igt32(VI a, VI b) { return _mm256_cmpgt_epi32(a, b); }
PRIM VI igt64(VI a, VI b) { return _mm256_cmpgt_epi64(a, b); }
PRIM VI iltu32(VI a, VI b)
{
    const VI s = _mm256_set1_epi32((int)0x80000000u);
    return _mm256_cmpgt_epi32(_mm256_xor_si256(b, s), _mm256_xor_si256(a, s));
}
PRIM VI iload(const uint32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
PRIM void istore(uint32_t *p, VI a) { _mm256_storeu_si256((__m256i *)p, a); }
/* streaming (non-temporal) stores: p 32-byte aligned */
PRIM void istream(uint32_t *p, VI a) { _mm256_stream_si256((__m256i *)p, a); }
PRIM VI unlo32(VI a, VI b) { return _mm256_unpacklo_epi32(a, b); }
PRIM VI unhi32(VI a, VI b) { return _mm256_unpackhi_epi32(a, b); }
PRIM VI unlo64(VI a, VI b) { return _mm256_unpacklo_epi64(a, b); }
PRIM VI unhi64(VI a, VI b) { return _mm256_unpackhi_epi64(a, b); }
/* hi and lo words of a m (m the same in both halves of a 64-bit lane): vpmuludq of the even lanes
 * and of the odd ones swapped down, the halves blended back */
PRIM void mulhilo(VI a, VI m, VI *hi, VI *lo)
{
    const VI pe = _mm256_mul_epu32(a, m), po = _mm256_mul_epu32(_mm256_shuffle_epi32(a, 0xB1), m);
    *hi = _mm256_blend_epi32(_mm256_shuffle_epi32(pe, 0xB1), po, 0xAA);
    *lo = _mm256_blend_epi32(pe, _mm256_shuffle_epi32(po, 0xB1), 0xAA);
}
PRIM VI lane_perm(void) { return _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7); }

PRIM VF fset(float a) { return _mm256_set1_ps(a); }
PRIM VF fadd(VF a, VF b) { return _mm256_add_ps(a, b); }
PRIM VF fsub(VF a, VF b) { return _mm256_sub_ps(a, b); }
PRIM VF fmul(VF a, VF b) { return _mm256_mul_ps(a, b); }
PRIM VF fdiv(VF a, VF b) { return _mm256_div_ps(a, b); }
PRIM VF fsqrt(VF a) { return _mm256_sqrt_ps(a); }
PRIM VF fcvt_i32(VI a) { return _mm256_cvtepi32_ps(a); }
PRIM VF fcvt_u32(VI a)
{
    const VF hi = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(a, 16)), _mm256_set1_ps(65536.0f));
    return _mm256_add_ps(hi, _mm256_cvtepi32_ps(_mm256_and_si256(a, _mm256_set1_epi32(0xFFFF))));
}
PRIM VF f_of(VI a) { return _mm256_castsi256_ps(a); }
PRIM VI i_of_f(VF a) { return _mm256_castps_si256(a); }
PRIM VF fsel_bit(VI bit, VF t, VF f)
{
    return _mm256_blendv_ps(t, f, _mm256_castsi256_ps(_mm256_cmpeq_epi32(bit, _mm256_setzero_si256())));
}

PRIM VD dset(double a) { return _mm256_set1_pd(a); }
PRIM VD dadd(VD a, VD b) { return _mm256_add_pd(a, b); }
PRIM VD dsub(VD a, VD b) { return _mm256_sub_pd(a, b); }
PRIM VD dmul(VD a, VD b) { return _mm256_mul_pd(a, b); }
PRIM VD ddiv(VD a, VD b) { return _mm256_div_pd(a, b); }
PRIM VD dsqrt(VD a) { return _mm256_sqrt_pd(a); }
PRIM VD d_of(VI a) { return _mm256_castsi256_pd(a); }
PRIM VI i_of_d(VD a) { return _mm256_castpd_si256(a); }
PRIM VD dsel_bit(VI bit, VD t, VD f)
{
    return _mm256_blendv_pd(t, f, _mm256_castsi256_pd(_mm256_cmpeq_epi64(bit, _mm256_setzero_si256())));
}
PRIM VD dunlo(VD a, VD b) { return _mm256_unpacklo_pd(a, b); }
PRIM VD dunhi(VD a, VD b) { return _mm256_unpackhi_pd(a, b); }
PRIM void dstore(double *p, VD a) { _mm256_storeu_pd(p, a); }
PRIM void dstream(double *p, VD a) { _mm256_stream_pd(p, a); }
/* float compares as masks of -1 / 0 (ordered, quiet: as C's < and >=), selects on them */
PRIM VI flt(VF a, VF b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
PRIM VI fge(VF a, VF b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GE_OQ)); }
PRIM VI funord(VF a) { return _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
PRIM VF fsel(VI m, VF t, VF f) { return _mm256_blendv_ps(f, t, _mm256_castsi256_ps(m)); }
PRIM VI fcvtt_i32(VF a) { return _mm256_cvttps_epi32(a); }
#define isra(a, n) _mm256_srai_epi32(a, n)
PRIM VI dlt(VD a, VD b) { return _mm256_castpd_si256(_mm256_cmp_pd(a, b, _CMP_LT_OQ)); }
PRIM VI dge(VD a, VD b) { return _mm256_castpd_si256(_mm256_cmp_pd(a, b, _CMP_GE_OQ)); }
PRIM VI dunord(VD a) { return _mm256_castpd_si256(_mm256_cmp_pd(a, a, _CMP_UNORD_Q)); }
PRIM VD dsel(VI m, VD t, VD f) { return _mm256_blendv_pd(f, t, _mm256_castsi256_pd(m)); }
PRIM VD dtrunc(VD a) { return _mm256_round_pd(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }

#include "philox_simd_body.h"

int fm_rng_simd_compiled_avx2(void) { return 1; }
#else
int64_t fm_px_simd_fill_avx2(const fm_px_simd_args *a, uint64_t seed, uint64_t u0, int64_t n, void *dst, int nt)
{
    (void)a, (void)seed, (void)u0, (void)n, (void)dst, (void)nt;
    return 0;
}
int fm_philox_simd_blocks_avx2(int nb, uint64_t seed, const uint32_t *const ctr[4], uint32_t *const out[4])
{
    (void)nb, (void)seed, (void)ctr, (void)out;
    return 0;
}
int fm_rng_simd_compiled_avx2(void) { return 0; }
#endif
