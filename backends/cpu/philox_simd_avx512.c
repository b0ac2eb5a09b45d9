/* philox_simd_avx512.c : philox_simd_body.h in 16 lanes of AVX-512 (F and DQ), compiled with
 * -mavx512f -mavx512dq -ffp-contract=off (CMakeLists.txt); called only where cpuid has both
 * (philox_simd.c). Integer masks are vectors of -1 / 0, as the AVX2 file's, so one body serves. */
#include "philox_simd.h"

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>

#define L 16
#ifndef NV
#define NV 4 /* vectors per Philox call (philox_simd_body.h) */
#endif
#define SFX(name) name##_avx512
typedef __m512i VI;
typedef __m512 VF;
typedef __m512d VD;

#define PRIM static inline __attribute__((always_inline))
PRIM VI iset(uint32_t a) { return _mm512_set1_epi32((int)a); }
PRIM VI iset64(uint64_t a) { return _mm512_set1_epi64((long long)a); }
PRIM VI iadd(VI a, VI b) { return _mm512_add_epi32(a, b); }
PRIM VI isub(VI a, VI b) { return _mm512_sub_epi32(a, b); }
PRIM VI iadd64(VI a, VI b) { return _mm512_add_epi64(a, b); }
PRIM VI isub64(VI a, VI b) { return _mm512_sub_epi64(a, b); }
PRIM VI ixor(VI a, VI b) { return _mm512_xor_si512(a, b); }
PRIM VI iand(VI a, VI b) { return _mm512_and_si512(a, b); }
PRIM VI ior(VI a, VI b) { return _mm512_or_si512(a, b); }
PRIM VI ixor3(VI a, VI b, VI c) { return _mm512_ternarylogic_epi32(a, b, c, 0x96); } /* a ^ b ^ c */
#define isrl(a, n) _mm512_srli_epi32(a, n)
#define isll(a, n) _mm512_slli_epi32(a, n)
#define isrl64(a, n) _mm512_srli_epi64(a, n)
#define isll64(a, n) _mm512_slli_epi64(a, n)
PRIM VI igt32(VI a, VI b) { return _mm512_movm_epi32(_mm512_cmpgt_epi32_mask(a, b)); }
PRIM VI igt64(VI a, VI b) { return _mm512_movm_epi64(_mm512_cmpgt_epi64_mask(a, b)); }
PRIM VI iltu32(VI a, VI b) { return _mm512_movm_epi32(_mm512_cmplt_epu32_mask(a, b)); }
PRIM VI iload(const uint32_t *p) { return _mm512_loadu_si512((const void *)p); }
PRIM void istore(uint32_t *p, VI a) { _mm512_storeu_si512((void *)p, a); }
/* streaming (non-temporal) stores: p 64-byte aligned */
PRIM void istream(uint32_t *p, VI a) { _mm512_stream_si512((void *)p, a); }
PRIM VI unlo32(VI a, VI b) { return _mm512_unpacklo_epi32(a, b); }
PRIM VI unhi32(VI a, VI b) { return _mm512_unpackhi_epi32(a, b); }
PRIM VI unlo64(VI a, VI b) { return _mm512_unpacklo_epi64(a, b); }
PRIM VI unhi64(VI a, VI b) { return _mm512_unpackhi_epi64(a, b); }
/* hi and lo words of a m (m the same in both halves of a 64-bit lane): vpmuludq of the even lanes
 * and of the odd ones swapped down, the halves put back by masked pair swaps (no shifts: port 5) */
PRIM void mulhilo(VI a, VI m, VI *hi, VI *lo)
{
    const VI pe = _mm512_mul_epu32(a, m), po = _mm512_mul_epu32(_mm512_shuffle_epi32(a, _MM_PERM_CDAB), m);
    *hi = _mm512_mask_shuffle_epi32(po, 0x5555, pe, _MM_PERM_CDAB);
    *lo = _mm512_mask_shuffle_epi32(pe, 0xAAAA, po, _MM_PERM_CDAB);
}
PRIM VI lane_perm(void) { return _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); }

PRIM VF fset(float a) { return _mm512_set1_ps(a); }
PRIM VF fadd(VF a, VF b) { return _mm512_add_ps(a, b); }
PRIM VF fsub(VF a, VF b) { return _mm512_sub_ps(a, b); }
PRIM VF fmul(VF a, VF b) { return _mm512_mul_ps(a, b); }
PRIM VF fdiv(VF a, VF b) { return _mm512_div_ps(a, b); }
PRIM VF fsqrt(VF a) { return _mm512_sqrt_ps(a); }
PRIM VF fcvt_i32(VI a) { return _mm512_cvtepi32_ps(a); }
PRIM VF fcvt_u32(VI a) { return _mm512_cvtepu32_ps(a); }
PRIM VF f_of(VI a) { return _mm512_castsi512_ps(a); }
PRIM VI i_of_f(VF a) { return _mm512_castps_si512(a); }
PRIM VF fsel_bit(VI bit, VF t, VF f) { return _mm512_mask_blend_ps(_mm512_test_epi32_mask(bit, bit), f, t); }

PRIM VD dset(double a) { return _mm512_set1_pd(a); }
PRIM VD dadd(VD a, VD b) { return _mm512_add_pd(a, b); }
PRIM VD dsub(VD a, VD b) { return _mm512_sub_pd(a, b); }
PRIM VD dmul(VD a, VD b) { return _mm512_mul_pd(a, b); }
PRIM VD ddiv(VD a, VD b) { return _mm512_div_pd(a, b); }
PRIM VD dsqrt(VD a) { return _mm512_sqrt_pd(a); }
PRIM VD d_of(VI a) { return _mm512_castsi512_pd(a); }
PRIM VI i_of_d(VD a) { return _mm512_castpd_si512(a); }
/* a 64-bit lane below 2^53 as a double: exact (vcvtuqq2pd, DQ) */
#define FM_SIMD_HAVE_CVT_U64 1
PRIM VD d_of_u53(VI a) { return _mm512_cvtepu64_pd(a); }
PRIM VD d_of_s64(VI a) { return _mm512_cvtepi64_pd(a); } /* correctly rounded */
PRIM VD dsel_bit(VI bit, VD t, VD f) { return _mm512_mask_blend_pd(_mm512_test_epi64_mask(bit, bit), f, t); }
PRIM VD dunlo(VD a, VD b) { return _mm512_unpacklo_pd(a, b); }
PRIM VD dunhi(VD a, VD b) { return _mm512_unpackhi_pd(a, b); }
PRIM void dstore(double *p, VD a) { _mm512_storeu_pd(p, a); }
PRIM void dstream(double *p, VD a) { _mm512_stream_pd(p, a); }
/* float compares as masks of -1 / 0 (ordered, quiet: as C's < and >=), selects on them */
PRIM VI flt(VF a, VF b) { return _mm512_movm_epi32(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)); }
PRIM VI fge(VF a, VF b) { return _mm512_movm_epi32(_mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)); }
PRIM VI funord(VF a) { return _mm512_movm_epi32(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)); }
PRIM VF fsel(VI m, VF t, VF f) { return _mm512_mask_blend_ps(_mm512_movepi32_mask(m), f, t); }
PRIM VI fcvtt_i32(VF a) { return _mm512_cvttps_epi32(a); }
#define isra(a, n) _mm512_srai_epi32(a, n)
PRIM VI dlt(VD a, VD b) { return _mm512_movm_epi64(_mm512_cmp_pd_mask(a, b, _CMP_LT_OQ)); }
PRIM VI dge(VD a, VD b) { return _mm512_movm_epi64(_mm512_cmp_pd_mask(a, b, _CMP_GE_OQ)); }
PRIM VI dunord(VD a) { return _mm512_movm_epi64(_mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q)); }
PRIM VD dsel(VI m, VD t, VD f) { return _mm512_mask_blend_pd(_mm512_movepi64_mask(m), f, t); }
PRIM VD dtrunc(VD a) { return _mm512_roundscale_pd(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }

#include "philox_simd_body.h"

int fm_rng_simd_compiled_avx512(void) { return 1; }
#else
int64_t fm_px_simd_fill_avx512(const fm_px_simd_args *a, uint64_t seed, uint64_t u0, int64_t n, void *dst, int nt)
{
    (void)a, (void)seed, (void)u0, (void)n, (void)dst, (void)nt;
    return 0;
}
int fm_philox_simd_blocks_avx512(int nb, uint64_t seed, const uint32_t *const ctr[4], uint32_t *const out[4])
{
    (void)nb, (void)seed, (void)ctr, (void)out;
    return 0;
}
int fm_rng_simd_compiled_avx512(void) { return 0; }
#endif
