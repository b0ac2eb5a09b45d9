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

#define DROP_CHUNK 1024                  /* elements per chunk of a row too long for a batch */
#define DROP_BLOCKS (DROP_CHUNK / 4 + 1) /* blocks that DROP_CHUNK words starting anywhere touch */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FM_DROPOUT_AVX512 1
/* Philox of the blocks lo[e] | hi[e] << 32 (e < 16 V, counter {lo, hi, 0, 0}: the portable stream),
 * V vectors of 16 lanes, their words written in list order (word j of block e at out[4 e + j]):
 * the AVX-512 form of fm_philox4x32_10 (the same integer operations). mulhi / mullo of 32-bit
 * lanes come from the even and odd 64-bit products; V independent vectors per round hide the
 * multiplies' latency (one chain per round was latency-bound), the loops unrolled so that every state
 * stays in a register (a loop over V kept them on the stack). Lane 4k + j holds entry 4j + k,
 * so the 4 x 4 transposes inside each 128-bit lane put the words in list order. */
#define FM_PHILOX_AVX512(NAME, V)                                                                              \
    __attribute__((target("avx512f"))) static void NAME(const uint32_t *lo, const uint32_t *hi, uint32_t k0,   \
                                                        uint32_t k1, uint32_t *out)                            \
    {                                                                                                          \
        const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);          \
        const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);      \
        const __m512i w0 = _mm512_set1_epi32((int)0x9E3779B9u), w1 = _mm512_set1_epi32((int)0xBB67AE85u);      \
        /* 32-bit halves of the even (e) and odd (o) lanes' 64-bit products, back in lane order */             \
        const __m512i ihi = _mm512_setr_epi32(1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);      \
        const __m512i ilo = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);      \
        __m512i c0[V], c1[V], c2[V], c3[V];                                                                    \
        _Pragma("GCC unroll 4") for (int v = 0; v < V; v++) {                                                  \
            c0[v] = _mm512_permutexvar_epi32(perm, _mm512_loadu_si512((const void *)(lo + 16 * v)));           \
            c1[v] = _mm512_permutexvar_epi32(perm, _mm512_loadu_si512((const void *)(hi + 16 * v)));           \
            c2[v] = c3[v] = _mm512_setzero_si512();                                                            \
        }                                                                                                      \
        __m512i key0 = _mm512_set1_epi32((int)k0), key1 = _mm512_set1_epi32((int)k1);                          \
        _Pragma("GCC unroll 10") for (int r = 0; r < 10; r++) {                                                \
            _Pragma("GCC unroll 4") for (int v = 0; v < V; v++) {                                              \
                const __m512i e0 = _mm512_mul_epu32(c0[v], m0), o0 = _mm512_mul_epu32(_mm512_srli_epi64(c0[v], 32), m0); \
                const __m512i e1 = _mm512_mul_epu32(c2[v], m1), o1 = _mm512_mul_epu32(_mm512_srli_epi64(c2[v], 32), m1); \
                const __m512i hi0 = _mm512_permutex2var_epi32(e0, ihi, o0);                                    \
                const __m512i lo0 = _mm512_permutex2var_epi32(e0, ilo, o0);                                    \
                const __m512i hi1 = _mm512_permutex2var_epi32(e1, ihi, o1);                                    \
                const __m512i lo1 = _mm512_permutex2var_epi32(e1, ilo, o1);                                    \
                c0[v] = _mm512_ternarylogic_epi32(hi1, c1[v], key0, 0x96); /* a ^ b ^ c */                     \
                c2[v] = _mm512_ternarylogic_epi32(hi0, c3[v], key1, 0x96);                                     \
                c1[v] = lo1, c3[v] = lo0;                                                                      \
            }                                                                                                  \
            key0 = _mm512_add_epi32(key0, w0), key1 = _mm512_add_epi32(key1, w1);                              \
        }                                                                                                      \
        _Pragma("GCC unroll 4") for (int v = 0; v < V; v++) {                                                  \
            const __m512i t0 = _mm512_unpacklo_epi32(c0[v], c1[v]), t1 = _mm512_unpacklo_epi32(c2[v], c3[v]);  \
            const __m512i t2 = _mm512_unpackhi_epi32(c0[v], c1[v]), t3 = _mm512_unpackhi_epi32(c2[v], c3[v]);  \
            uint32_t *o = out + 64 * v;                                                                        \
            _mm512_storeu_si512((void *)o, _mm512_unpacklo_epi64(t0, t1));                                     \
            _mm512_storeu_si512((void *)(o + 16), _mm512_unpackhi_epi64(t0, t1));                              \
            _mm512_storeu_si512((void *)(o + 32), _mm512_unpacklo_epi64(t2, t3));                              \
            _mm512_storeu_si512((void *)(o + 48), _mm512_unpackhi_epi64(t2, t3));                              \
        }                                                                                                      \
    }
FM_PHILOX_AVX512(philox16_avx512, 1)
FM_PHILOX_AVX512(philox64_avx512, 4)
#endif

/* Philox of the nb blocks lo[e] | hi[e] << 32 of the portable stream of seed, word j of block e to
 * out[4 e + j]; lo, hi hold nb rounded up to 16 entries (those past nb any value) and out as many
 * blocks' words. */
static inline __attribute__((always_inline)) void philox_list(int nb, const uint32_t *restrict lo,
                                                              const uint32_t *restrict hi, uint64_t seed,
                                                              uint32_t *restrict out)
{
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#ifdef FM_DROPOUT_AVX512
    if (__builtin_cpu_supports("avx512f")) {
        int i = 0;
        for (; i + 64 <= nb; i += 64)
            philox64_avx512(lo + i, hi + i, k0, k1, out + 4 * i);
        for (; i < nb; i += 16)
            philox16_avx512(lo + i, hi + i, k0, k1, out + 4 * i);
        return;
    }
#endif
    enum { STRIP = 64 };
    for (int i0 = 0; i0 < nb; i0 += STRIP) {
        uint32_t w[4][STRIP];
        const int m = nb - i0 < STRIP ? nb - i0 : STRIP;
        for (int i = 0; i < m; i++) { /* blocks across vector lanes (structure of arrays) */
            const uint32_t ctr[4] = {lo[i0 + i], hi[i0 + i], 0u, 0u};
            uint32_t r[4];
            fm_philox4x32_10(ctr, k0, k1, r);
            w[0][i] = r[0], w[1][i] = r[1], w[2][i] = r[2], w[3][i] = r[3];
        }
        uint32_t *o = out + 4 * i0;
        for (int i = 0; i < m; i++) /* to list order */
            o[4 * i] = w[0][i], o[4 * i + 1] = w[1][i], o[4 * i + 2] = w[2][i], o[4 * i + 3] = w[3][i];
    }
}

/* blocks b0 .. b0 + nb - 1 into the list from entry e (lo, hi) */
static inline __attribute__((always_inline)) void list_blocks(uint32_t *restrict lo, uint32_t *restrict hi, int e,
                                                              uint64_t b0, int nb)
{
    for (int k = 0; k < nb; k++)
        lo[e + k] = (uint32_t)(b0 + (uint64_t)k), hi[e + k] = (uint32_t)((b0 + (uint64_t)k) >> 32);
}

/* words [w0, w0 + n) of the portable stream of seed in flat (4 * (DROP_BLOCKS + 15) words),
 * n <= DROP_CHUNK; returns where word w0 is in it */
static inline __attribute__((always_inline)) const uint32_t *dropout_words(uint64_t seed, uint64_t w0, int n,
                                                                           uint32_t *restrict flat)
{
    uint32_t lo[DROP_BLOCKS + 15], hi[DROP_BLOCKS + 15];
    const int off = (int)(w0 & 3), nb = (off + n + 3) / 4;
    list_blocks(lo, hi, 0, w0 >> 2, nb);
    philox_list(nb, lo, hi, seed, flat);
    return flat + off;
}

/* The words of panel rows i, i + 1, ... into dw, as many whole rows as it holds (none where row i
 * alone is longer: that row makes its own words). */
FM_SIMD_CLONES static void drop_batch(const fm_cpu_panel *p, int64_t i, fm_cpu_drop_words *dw)
{
    uint32_t lo[FM_CPU_DROP_BLOCKS + 15], hi[FM_CPU_DROP_BLOCKS + 15];
    int nb = 0, r = 0;
    for (; r < FM_CPU_DROP_ROWS && i + r < p->rows; r++) {
        const uint64_t w0 = p->drop_word0 + (uint64_t)(i + r) * (uint64_t)p->drop_ld;
        const int64_t n = ((int64_t)(w0 & 3) + p->cols + 3) / 4;
        if (n > FM_CPU_DROP_BLOCKS - nb)
            break;
        dw->at[r] = 4 * nb + (int)(w0 & 3);
        list_blocks(lo, hi, nb, w0 >> 2, (int)n);
        nb += (int)n;
    }
    dw->i0 = i, dw->i1 = i + r;
    philox_list(nb, lo, hi, p->drop_seed, dw->w);
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

/* d[j] = keep ? d[j] * s : 0 for one row of n elements whose first uses word w0, its words from
 * rw (the batch's) or, where rw is NULL, made a chunk at a time; with mask, the keep bits from the
 * row's first byte (the caller's columns start on a byte). */
#define FM_DEFINE_DROPOUT_ROW(fname, T)                                                                      \
    FM_SIMD_CLONES static void fname(T *restrict d, int64_t n, uint64_t seed, uint64_t w0, uint64_t thr, T s,  \
                                     unsigned char *restrict mask, const uint32_t *restrict rw)               \
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
            /* chunks end on whole blocks (the first may start inside one), but whole mask bytes with a  \
             * mask */                                                                                       \
            len = rw ? n : mask ? DROP_CHUNK : DROP_CHUNK - (int64_t)((w0 + (uint64_t)j0) & 3);              \
            len = n - j0 < len ? n - j0 : len;                                                               \
            const uint32_t *restrict w = rw ? rw : dropout_words(seed, w0 + (uint64_t)j0, (int)len, flat);   \
            T *restrict x = d + j0;                                                                          \
            _Pragma("omp simd") for (int64_t j = 0; j < len; j++) x[j] = w[j] >= t ? x[j] * s : (T)0;       \
            if (mask)                                                                                        \
                keep_bits(mask + j0 / 8, w, (int)len, t);                                                    \
        }                                                                                                    \
    }
FM_DEFINE_DROPOUT_ROW(dropout_row_f32, float)
FM_DEFINE_DROPOUT_ROW(dropout_row_f64, double)

void fm_cpu_dropout_row(fm_dtype t, const fm_cpu_panel *p, int64_t i, unsigned char *mask, fm_cpu_drop_words *dw)
{
    const uint64_t w0 = p->drop_word0 + (uint64_t)i * (uint64_t)p->drop_ld;
    if (p->drop_threshold <= UINT32_MAX && (i < dw->i0 || i >= dw->i1))
        drop_batch(p, i, dw);
    const uint32_t *rw = i >= dw->i0 && i < dw->i1 ? dw->w + dw->at[i - dw->i0] : NULL;
    if (t == FM_F32)
        dropout_row_f32((float *)p->d + i * p->ldd, p->cols, p->drop_seed, w0, p->drop_threshold,
                        (float)p->drop_scale, mask, rw);
    else if (t == FM_F64)
        dropout_row_f64((double *)p->d + i * p->ldd, p->cols, p->drop_seed, w0, p->drop_threshold, p->drop_scale,
                        mask, rw);
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
