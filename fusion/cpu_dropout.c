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

/* words [w0, w0 + n) of the portable stream of seed into out[0..n), n <= DROP_CHUNK */
static inline __attribute__((always_inline)) void dropout_words(uint64_t seed, uint64_t w0, int n,
                                                                uint32_t *restrict out)
{
    uint32_t flat[4 * DROP_BLOCKS];
    const uint64_t b0 = w0 >> 2;
    const int off = (int)(w0 & 3), nb = (off + n + 3) / 4;
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int i = 0; i < nb; i++) {
        const uint64_t b = b0 + (uint64_t)i;
        const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0u, 0u};
        uint32_t r[4];
        fm_philox4x32_10(ctr, k0, k1, r);
        flat[4 * i] = r[0], flat[4 * i + 1] = r[1], flat[4 * i + 2] = r[2], flat[4 * i + 3] = r[3];
    }
    memcpy(out, flat + off, sizeof(uint32_t) * (size_t)n);
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
        uint32_t w[DROP_CHUNK];                                                                              \
        for (int64_t j0 = 0; j0 < n; j0 += DROP_CHUNK) {                                                     \
            const int len = n - j0 < DROP_CHUNK ? (int)(n - j0) : DROP_CHUNK;                                \
            dropout_words(seed, w0 + (uint64_t)j0, len, w);                                                  \
            T *restrict x = d + j0;                                                                          \
            _Pragma("omp simd") for (int j = 0; j < len; j++) x[j] = w[j] >= t ? x[j] * s : (T)0;           \
            if (mask)                                                                                        \
                keep_bits(mask + j0 / 8, w, len, t);                                                         \
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
