/* cpu_dropout.c : the dropout step of the CPU matmul epilogue (FM_EPILOGUE_DROPOUT) and its
 * backward (FM_EPILOGUE_DDROPOUT), on one row of a panel while it is in cache.
 *
 * Element e of D (row-major over batch, M, N) is kept iff 32-bit word position + e of the
 * portable Philox4x32-10 stream (fusion/philox_portable.h: word w is word w % 4 of block w / 4)
 * is >= the threshold round(p * 2^32): integers only, so the mask is the same on every device and
 * for every tiling. A row's words are made a chunk at a time into a stack buffer: the block loop
 * vectorises (as backends/cpu/philox_rng.c's does), then the select loop reads the words in order. */
#include "cpu_epilogue.h"
#include "epilogue.h"
#include "philox_portable.h"

#include <string.h>

#define DROP_CHUNK 256                   /* elements per chunk of a row */
#define DROP_BLOCKS (DROP_CHUNK / 4 + 1) /* blocks that 256 words starting anywhere touch */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FM_DROPOUT_AVX512 1
/* Blocks b0 .. b0 + 16 V of the portable stream, V vectors of 16 lanes, written in stream order
 * (64 V words) to out: the AVX-512 form of fm_philox4x32_10 (the same integer operations; the
 * compiler's vectorisation of the scalar loop ran at half this rate). mulhi / mullo of 32-bit
 * lanes come from the even and odd 64-bit products; V independent vectors per round hide the
 * multiplies' latency (one chain per round was latency-bound). */
#define FM_PHILOX_AVX512(NAME, V)                                                                             \
    __attribute__((target("avx512f"))) static void NAME(uint64_t b0, uint32_t k0, uint32_t k1, uint32_t *out)   \
    {                                                                                                         \
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);           \
        const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);       \
        const __m512i w0 = _mm512_set1_epi32((int)0x9E3779B9u), w1 = _mm512_set1_epi32((int)0xBB67AE85u);       \
        /* 32-bit halves of the even (e) and odd (o) lanes' 64-bit products, back in lane order */             \
        const __m512i ihi = _mm512_setr_epi32(1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);        \
        const __m512i ilo = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);        \
        __m512i c0[V], c1[V], c2[V], c3[V];                                                                   \
        for (int v = 0; v < V; v++) {                                                                         \
            const uint64_t b = b0 + 16u * (uint64_t)v;                                                        \
            const __m512i lo = _mm512_set1_epi32((int)(uint32_t)b), hi = _mm512_set1_epi32((int)(uint32_t)(b >> 32)); \
            c0[v] = _mm512_add_epi32(lo, lane);                                                               \
            /* the low half wrapped: carry into c1 */                                                         \
            c1[v] = _mm512_mask_add_epi32(hi, _mm512_cmplt_epu32_mask(c0[v], lo), hi, _mm512_set1_epi32(1));   \
            c2[v] = c3[v] = _mm512_setzero_si512();                                                           \
        }                                                                                                     \
        __m512i key0 = _mm512_set1_epi32((int)k0), key1 = _mm512_set1_epi32((int)k1);                         \
        for (int r = 0; r < 10; r++) {                                                                        \
            for (int v = 0; v < V; v++) {                                                                     \
                const __m512i e0 = _mm512_mul_epu32(c0[v], m0), o0 = _mm512_mul_epu32(_mm512_srli_epi64(c0[v], 32), m0); \
                const __m512i e1 = _mm512_mul_epu32(c2[v], m1), o1 = _mm512_mul_epu32(_mm512_srli_epi64(c2[v], 32), m1); \
                const __m512i hi0 = _mm512_permutex2var_epi32(e0, ihi, o0);                                   \
                const __m512i lo0 = _mm512_permutex2var_epi32(e0, ilo, o0);                                   \
                const __m512i hi1 = _mm512_permutex2var_epi32(e1, ihi, o1);                                   \
                const __m512i lo1 = _mm512_permutex2var_epi32(e1, ilo, o1);                                   \
                c0[v] = _mm512_ternarylogic_epi32(hi1, c1[v], key0, 0x96); /* a ^ b ^ c */                    \
                c2[v] = _mm512_ternarylogic_epi32(hi0, c3[v], key1, 0x96);                                    \
                c1[v] = lo1, c3[v] = lo0;                                                                     \
            }                                                                                                 \
            key0 = _mm512_add_epi32(key0, w0), key1 = _mm512_add_epi32(key1, w1);                             \
        }                                                                                                     \
        for (int v = 0; v < V; v++) { /* 4 x 16 words to stream order: u_k's 128-bit lane L is block 4L + k */ \
            const __m512i t0 = _mm512_unpacklo_epi32(c0[v], c1[v]), t1 = _mm512_unpackhi_epi32(c0[v], c1[v]);   \
            const __m512i t2 = _mm512_unpacklo_epi32(c2[v], c3[v]), t3 = _mm512_unpackhi_epi32(c2[v], c3[v]);   \
            const __m512i u[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),               \
                                  _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};              \
            uint32_t *o = out + 64 * v;                                                                       \
            for (int k = 0; k < 4; k++) {                                                                     \
                _mm_storeu_si128((__m128i *)(o + 4 * k), _mm512_extracti32x4_epi32(u[k], 0));                 \
                _mm_storeu_si128((__m128i *)(o + 16 + 4 * k), _mm512_extracti32x4_epi32(u[k], 1));            \
                _mm_storeu_si128((__m128i *)(o + 32 + 4 * k), _mm512_extracti32x4_epi32(u[k], 2));            \
                _mm_storeu_si128((__m128i *)(o + 48 + 4 * k), _mm512_extracti32x4_epi32(u[k], 3));            \
            }                                                                                                 \
        }                                                                                                     \
    }
FM_PHILOX_AVX512(philox16_avx512, 1)
FM_PHILOX_AVX512(philox64_avx512, 4)
#endif

/* words [w0, w0 + n) of the portable stream of seed in flat (4 * (DROP_BLOCKS + 15) words),
 * n <= DROP_CHUNK; returns where word w0 is in it */
static inline __attribute__((always_inline)) const uint32_t *dropout_words(uint64_t seed, uint64_t w0, int n,
                                                                           uint32_t *restrict flat)
{
    uint32_t w[4][DROP_BLOCKS];
    const uint64_t b0 = w0 >> 2;
    const int off = (int)(w0 & 3), nb = (off + n + 3) / 4;
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#ifdef FM_DROPOUT_AVX512
    if (__builtin_cpu_supports("avx512f")) {
        int i = 0;
        for (; i + 64 <= nb; i += 64)
            philox64_avx512(b0 + (uint64_t)i, k0, k1, flat + 4 * i);
        for (; i < nb; i += 16)
            philox16_avx512(b0 + (uint64_t)i, k0, k1, flat + 4 * i);
        return flat + off;
    }
#endif
    for (int i = 0; i < nb; i++) { /* blocks across vector lanes (structure of arrays) */
        const uint64_t b = b0 + (uint64_t)i;
        const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0u, 0u};
        uint32_t r[4];
        fm_philox4x32_10(ctr, k0, k1, r);
        w[0][i] = r[0], w[1][i] = r[1], w[2][i] = r[2], w[3][i] = r[3];
    }
    for (int i = 0; i < nb; i++) /* back to stream order */
        flat[4 * i] = w[0][i], flat[4 * i + 1] = w[1][i], flat[4 * i + 2] = w[2][i], flat[4 * i + 3] = w[3][i];
    return flat + off;
}

/* keep bits of n words (bit j % 8 of byte j / 8), from byte 0 of mask; a last partial byte's
 * high bits are zero */
static inline __attribute__((always_inline)) void keep_bits(unsigned char *restrict mask, const uint32_t *restrict w,
                                                            int n, uint32_t t)
{
    for (int j0 = 0; j0 < n; j0 += 8) {
        unsigned byte = 0;
        const int jn = n - j0 < 8 ? n - j0 : 8;
        for (int b = 0; b < jn; b++)
            byte |= (unsigned)(w[j0 + b] >= t) << b;
        mask[j0 / 8] = (unsigned char)byte;
    }
}

/* d[j] = keep ? d[j] * s : 0 for one row of n elements whose first uses word w0; with mask, the
 * keep bits from the row's first byte (the caller's columns start on a byte). */
#define FM_DEFINE_DROPOUT_ROW(fname, T)                                                                      \
    FM_SIMD_CLONES static void fname(T *restrict d, int64_t n, uint64_t seed, uint64_t w0, uint64_t thr, T s,  \
                                     unsigned char *restrict mask)                                            \
    {                                                                                                        \
        if (thr > UINT32_MAX) { /* p rounds to 1 in 2^32: nothing is kept */                                 \
            memset(d, 0, sizeof(T) * (size_t)n);                                                             \
            if (mask)                                                                                        \
                memset(mask, 0, (size_t)((n + 7) / 8));                                                      \
            return;                                                                                          \
        }                                                                                                    \
        const uint32_t t = (uint32_t)thr;                                                                    \
        uint32_t flat[4 * (DROP_BLOCKS + 15)];                                                               \
        for (int64_t j0 = 0, len; j0 < n; j0 += len) {                                                       \
            /* chunks end on whole blocks (64 each; the first may start inside one), but whole mask    \
             * bytes with a mask */                                                                          \
            len = mask ? DROP_CHUNK : DROP_CHUNK - (int64_t)((w0 + (uint64_t)j0) & 3);                       \
            len = n - j0 < len ? n - j0 : len;                                                               \
            const uint32_t *restrict w = dropout_words(seed, w0 + (uint64_t)j0, (int)len, flat);             \
            T *restrict x = d + j0;                                                                          \
            _Pragma("omp simd") for (int j = 0; j < (int)len; j++) x[j] = w[j] >= t ? x[j] * s : (T)0;      \
            if (mask)                                                                                        \
                keep_bits(mask + j0 / 8, w, (int)len, t);                                                    \
        }                                                                                                    \
    }
FM_DEFINE_DROPOUT_ROW(dropout_row_f32, float)
FM_DEFINE_DROPOUT_ROW(dropout_row_f64, double)

void fm_cpu_dropout_row(fm_dtype t, const fm_cpu_panel *p, int64_t i, unsigned char *mask)
{
    const uint64_t w0 = p->drop_word0 + (uint64_t)i * (uint64_t)p->drop_ld;
    if (t == FM_F32)
        dropout_row_f32((float *)p->d + i * p->ldd, p->cols, p->drop_seed, w0, p->drop_threshold,
                        (float)p->drop_scale, mask);
    else if (t == FM_F64)
        dropout_row_f64((double *)p->d + i * p->ldd, p->cols, p->drop_seed, w0, p->drop_threshold, p->drop_scale,
                        mask);
}

/* ddropout: d = keep bit ? d * s : 0, the bits from byte 0 of mask (a select, as the GPU's:
 * a dropped inf or NaN gradient gives 0) */
#define FM_DEFINE_DDROPOUT_ROW(fname, T)                                                                     \
    FM_SIMD_CLONES static void fname(T *restrict d, const unsigned char *restrict mask, int64_t n, T s)       \
    {                                                                                                        \
        int64_t j0 = 0;                                                                                      \
        for (; j0 + 8 <= n; j0 += 8) {                                                                       \
            const unsigned m = mask[j0 >> 3];                                                                \
            _Pragma("omp simd") for (int b = 0; b < 8; b++) d[j0 + b] = (m >> b) & 1u ? d[j0 + b] * s : (T)0; \
        }                                                                                                    \
        for (int64_t j = j0; j < n; j++)                                                                     \
            d[j] = (mask[j >> 3] >> (j & 7)) & 1 ? d[j] * s : (T)0;                                          \
    }
FM_DEFINE_DDROPOUT_ROW(ddropout_row_f32, float)
FM_DEFINE_DDROPOUT_ROW(ddropout_row_f64, double)

void fm_cpu_ddropout_row(fm_dtype t, const fm_cpu_panel *p, int64_t i, const unsigned char *mask)
{
    if (t == FM_F32)
        ddropout_row_f32((float *)p->d + i * p->ldd, mask, p->cols, (float)p->drop_scale);
    else if (t == FM_F64)
        ddropout_row_f64((double *)p->d + i * p->ldd, mask, p->cols, p->drop_scale);
}
