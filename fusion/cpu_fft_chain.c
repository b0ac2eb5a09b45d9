/* cpu_fft_chain.c : the FFT prolog / epilog on host memory, applied while a chunk of
 * transforms moves between the caller's arrays and a CPU backend's scratch (or in place on the
 * output right after the transform), so the chain costs no pass of its own over the array.
 * Used by backends/cpu/fftw_fft.c; the element loops are built with the dynamic vectorizer
 * model and as AVX-512 / AVX2 / baseline clones (FM_SIMD_CLONES, CMakeLists.txt). */
#include "cpu_fft_chain.h"

#include <stdint.h>
#include <string.h>

/* ---- gather (prolog) and scatter (epilog), one transform at a time ---- */
/* The rows of one transform of extents EXT, PIECE(args..., row, k, S) doing piece k of S of a row;
 * with nthr > 1 the rows, or pieces of them when there are fewer rows than threads, are shared out
 * (a single huge transform). The one-thread path has no OpenMP construct at all: it runs once per
 * transform, and even a serialised parallel region cost ~1 us there (128-point transforms ran 9x
 * slower). */
#define FM_FFT_ROWS(EXT, PIECE, ...)                                                                   \
    const int64_t R = (EXT)[0] * (EXT)[1];                                                           \
    if (nthr <= 1) {                                                                                 \
        for (int64_t r = 0; r < R; r++)                                                              \
            PIECE(__VA_ARGS__, r, 0, 1);                                                             \
        return;                                                                                      \
    }                                                                                                \
    const int64_t S = R < nthr ? (nthr + R - 1) / R : 1;                                             \
    _Pragma("omp parallel for num_threads(nthr) schedule(static)")                                   \
    for (int64_t w = 0; w < R * S; w++)                                                              \
        PIECE(__VA_ARGS__, w / S, w % S, S);
/* One row of n elements: dst = conj?(src * scale * array); src and dst have the same
 * kind (real or complex); strides in scalars; src == dst (same strides) is allowed. */
#define DEFINE_MOVERS(T, SUF)                                                                                    \
    static inline __attribute__((always_inline)) void row_body_##SUF(                                            \
        int64_t n, const T *src, int64_t ss, T *dst, int64_t ds, int cplx, const T *a, int64_t as, int acplx,    \
        unsigned ops, T sr, T si)                                                                                \
    {                                                                                                            \
        const T cs = (ops & FM_FFT_OP_CONJ) ? (T)-1 : (T)1;                                                      \
        if (!cplx) {                                                                                             \
            if (!ops)                                                                                            \
                for (int64_t i = 0; i < n; i++)                                                                  \
                    dst[i * ds] = src[i * ss];                                                                   \
            else if (!(ops & FM_FFT_OP_MULTIPLY))                                                                \
                for (int64_t i = 0; i < n; i++)                                                                  \
                    dst[i * ds] = src[i * ss] * sr;                                                              \
            else                                                                                                 \
                for (int64_t i = 0; i < n; i++)                                                                  \
                    dst[i * ds] = src[i * ss] * (sr * a[i * as]);                                                \
            return;                                                                                              \
        }                                                                                                        \
        if (!ops) {                                                                                              \
            for (int64_t i = 0; i < n; i++) {                                                                    \
                T re = src[i * ss], im = src[i * ss + 1];                                                        \
                dst[i * ds] = re, dst[i * ds + 1] = im;                                                          \
            }                                                                                                    \
        } else if (!(ops & FM_FFT_OP_MULTIPLY)) {                                                                \
            for (int64_t i = 0; i < n; i++) {                                                                    \
                T re = src[i * ss], im = src[i * ss + 1];                                                        \
                dst[i * ds] = re * sr - im * si, dst[i * ds + 1] = cs * (re * si + im * sr);                     \
            }                                                                                                    \
        } else if (!acplx) {                                                                                     \
            for (int64_t i = 0; i < n; i++) {                                                                    \
                T re = src[i * ss], im = src[i * ss + 1], fr = sr * a[i * as], fi = si * a[i * as];             \
                dst[i * ds] = re * fr - im * fi, dst[i * ds + 1] = cs * (re * fi + im * fr);                     \
            }                                                                                                    \
        } else {                                                                                                 \
            for (int64_t i = 0; i < n; i++) {                                                                    \
                T ar = a[i * as], ai = a[i * as + 1], re = src[i * ss], im = src[i * ss + 1];                    \
                T fr = sr * ar - si * ai, fi = sr * ai + si * ar;                                                \
                dst[i * ds] = re * fr - im * fi, dst[i * ds + 1] = cs * (re * fi + im * fr);                     \
            }                                                                                                    \
        }                                                                                                        \
    }                                                                                                            \
    /* Dense rows out of place: src, dst and the array never overlap, and saying so (restrict)    \
     * is what lets the loops vectorise without run-time overlap checks. */                        \
    static inline __attribute__((always_inline)) void dense_apart_##SUF(int64_t n, const T *restrict src,       \
        T *restrict dst, int cplx, const T *restrict a, int acplx, unsigned ops, T sr, T si)                    \
    {                                                                                                            \
        if (cplx && acplx)                                                                                       \
            row_body_##SUF(n, src, 2, dst, 2, 1, a, 2, 1, ops, sr, si);                                          \
        else if (cplx)                                                                                           \
            row_body_##SUF(n, src, 2, dst, 2, 1, a, 1, 0, ops, sr, si);                                          \
        else                                                                                                     \
            row_body_##SUF(n, src, 1, dst, 1, 0, a, 1, 0, ops, sr, si);                                          \
    }                                                                                                            \
    /* In place: one pointer for both, so each element is read then written (no overlap checks;  \
     * with two pointers that are equal the compiler's check failed and the scalar loop ran: an  \
     * in-place epilog scale took ~1 ns per element). */                                           \
    static inline __attribute__((always_inline)) void dense_inplace_##SUF(int64_t n, T *d, int cplx,            \
        const T *restrict a, int acplx, unsigned ops, T sr, T si)                                                \
    {                                                                                                            \
        if (cplx && acplx)                                                                                       \
            row_body_##SUF(n, d, 2, d, 2, 1, a, 2, 1, ops, sr, si);                                              \
        else if (cplx)                                                                                           \
            row_body_##SUF(n, d, 2, d, 2, 1, a, 1, 0, ops, sr, si);                                              \
        else                                                                                                     \
            row_body_##SUF(n, d, 1, d, 1, 0, a, 1, 0, ops, sr, si);                                              \
    }                                                                                                            \
    /* Dense rows (the usual case) get the loops with constant strides, which the compiler          \
     * vectorises: the strided form ran a window multiply at ~2.4 GB/s (128^3 c64, dev machine). */     \
    FM_SIMD_CLONES static void row_##SUF(int64_t n, const T *src, int64_t ss, T *dst, int64_t ds, int cplx, const T *a,        \
                          int64_t as, int acplx, unsigned ops, T sr, T si)                                      \
    {                                                                                                            \
        const int64_t u = cplx ? 2 : 1, ua = acplx ? 2 : 1;                                                       \
        if (ss == u && ds == u && (!(ops & FM_FFT_OP_MULTIPLY) || as == ua)) {                                  \
            if (src == dst)                                                                                      \
                dense_inplace_##SUF(n, dst, cplx, a, acplx, ops, sr, si);                                        \
            else                                                                                                 \
                dense_apart_##SUF(n, src, dst, cplx, a, acplx, ops, sr, si);                                     \
            return;                                                                                              \
        }                                                                                                        \
        row_body_##SUF(n, src, ss, dst, ds, cplx, a, as, acplx, ops, sr, si);                                    \
    }                                                                                                            \
    /* Piece k of S of row r (rows (i0, i1) of n2 points): the one piece both loops below run. */                         \
    static inline __attribute__((always_inline)) void gather_piece_##SUF(const fm_fft_chain_layout *x, const T *in, const T *pa,    \
        int64_t oin, int64_t opa, T *dst, int64_t r, int64_t k, int64_t S)                                                \
    {                                                                                                                     \
        const int ic = x->in_cplx, ci = ic ? 2 : 1, ca = x->pa_cplx ? 2 : 1;                                              \
        const int64_t n2 = x->ext_in[2], i0 = r / x->ext_in[1], i1 = r % x->ext_in[1];                                    \
        const int64_t lo = k * n2 / S, hi = (k + 1) * n2 / S;                                                             \
        const T *s = in + (oin + i0 * x->s_in[0] + i1 * x->s_in[1] + lo * x->s_in[2]) * ci;                               \
        const T *a = pa ? pa + (opa + i0 * x->s_pa[0] + i1 * x->s_pa[1] + lo * x->s_pa[2]) * ca : NULL;                   \
        row_##SUF(hi - lo, s, x->s_in[2] * ci, dst + (r * n2 + lo) * ci, ci, ic, a, x->s_pa[2] * ca, x->pa_cplx,          \
                  x->pro_ops, (T)x->pro_scale[0], (T)x->pro_scale[1]);                                                    \
    }                                                                                                                     \
    static void gather_##SUF(const fm_fft_chain_layout *x, const T *in, const T *pa, int64_t oin, int64_t opa, T *dst, int nthr)    \
    {                                                                                                                     \
        FM_FFT_ROWS(x->ext_in, gather_piece_##SUF, x, in, pa, oin, opa, dst)                                              \
    }                                                                                                                     \
    /* src == NULL: apply the epilog in place on out */                                                                   \
    static inline __attribute__((always_inline)) void scatter_piece_##SUF(const fm_fft_chain_layout *x, const T *src, T *out,       \
        const T *ea, int64_t oout, int64_t oea, int64_t r, int64_t k, int64_t S)                                          \
    {                                                                                                                     \
        const int oc = x->out_cplx, co = oc ? 2 : 1, ca = x->ea_cplx ? 2 : 1;                                             \
        const int64_t n2 = x->ext_out[2], i0 = r / x->ext_out[1], i1 = r % x->ext_out[1];                                 \
        const int64_t lo = k * n2 / S, hi = (k + 1) * n2 / S;                                                             \
        T *d = out + (oout + i0 * x->s_out[0] + i1 * x->s_out[1] + lo * x->s_out[2]) * co;                                \
        const T *a = ea ? ea + (oea + i0 * x->s_ea[0] + i1 * x->s_ea[1] + lo * x->s_ea[2]) * ca : NULL;                   \
        const T *sp = src ? src + (r * n2 + lo) * co : d;                                                                 \
        row_##SUF(hi - lo, sp, src ? co : x->s_out[2] * co, d, x->s_out[2] * co, oc, a, x->s_ea[2] * ca, x->ea_cplx,      \
                  x->epi_ops, (T)x->epi_scale[0], (T)x->epi_scale[1]);                                                    \
    }                                                                                                                     \
    static void scatter_##SUF(const fm_fft_chain_layout *x, const T *src, T *out, const T *ea, int64_t oout, int64_t oea, int nthr) \
    {                                                                                                                     \
        FM_FFT_ROWS(x->ext_out, scatter_piece_##SUF, x, src, out, ea, oout, oea)                                          \
    }
DEFINE_MOVERS(float, f)
DEFINE_MOVERS(double, d)

/* Column chunks. When the batch axis has unit stride and the transform's points are strided
 * (fft(x, axis=0) of a C-ordered array, the outer step of a split 2-D/3-D transform), a chunk of
 * cnt transforms moves point by point: point p of all cnt transforms is cnt contiguous elements
 * of the caller's array. Each point is one dense row through row_ (an array broadcast over the
 * batch folded into the scale, one that varies along it read along the row), in tiles of
 * FM_FFT_COL_TILE points x FM_FFT_COL_BLOCK transforms transposed to and from the scratch's transform-major
 * layout (FFTW on a point-major scratch ran 4x slower); or, with no scratch, the epilog is
 * applied in place on out's columns. Transform by transform, every element was a new cache line. */
/* Point pt of a transform (C order over its extents ext) -> its element offset (strides st) */
static inline int64_t point_off(const int64_t ext[3], const int64_t st[3], int64_t pt)
{
    const int64_t k = pt % ext[2], r = pt / ext[2];
    return (r / ext[1]) * st[0] + (r % ext[1]) * st[1] + k * st[2];
}
static inline void prefetch_row(const void *p, size_t bytes, int write)
{
    for (size_t o = 0; o < bytes; o += 64)
        if (write)
            __builtin_prefetch((const char *)p + o, 1, 3);
        else
            __builtin_prefetch((const char *)p + o, 0, 3);
}
/* The tile transposes, on whole elements (es bytes: a real or complex float or double). A
 * constant-size memcpy is one move, where a run-time-sized scalar loop was most of the time. */
#define DEFINE_TRANSPOSE(ES)                                                                                      \
    /* rows[p][e] -> dst[e * dstride + p]: point rows in, each transform's np points out */                       \
    static void transpose_in_##ES(int64_t np, int64_t ne, const char *const *rows, char *dst, int64_t dstride)   \
    {                                                                                                             \
        for (int64_t e = 0; e < ne; e++) {                                                                        \
            char *d = dst + e * dstride;                                                                          \
            for (int64_t p = 0; p < np; p++)                                                                      \
                memcpy(d + p * ES, rows[p] + e * ES, ES);                                                         \
        }                                                                                                         \
    }                                                                                                             \
    /* src[e * sstride + p] -> rows[p][e] */                                                                      \
    static void transpose_out_##ES(int64_t np, int64_t ne, const char *src, int64_t sstride, char *const *rows)  \
    {                                                                                                             \
        for (int64_t p = 0; p < np; p++) {                                                                        \
            char *d = rows[p];                                                                                    \
            const char *q = src + p * ES;                                                                         \
            for (int64_t e = 0; e < ne; e++)                                                                      \
                memcpy(d + e * ES, q + e * sstride, ES);                                                          \
        }                                                                                                         \
    }
DEFINE_TRANSPOSE(4)
DEFINE_TRANSPOSE(8)
DEFINE_TRANSPOSE(16)
/* by element size 4, 8, 16 bytes (strides in bytes) */
static void (*const transpose_in[3])(int64_t, int64_t, const char *const *, char *, int64_t) = {
    transpose_in_4, transpose_in_8, transpose_in_16};
static void (*const transpose_out[3])(int64_t, int64_t, const char *, int64_t, char *const *) = {
    transpose_out_4, transpose_out_8, transpose_out_16};
static inline int es_index(int es) { return es == 4 ? 0 : es == 8 ? 1 : 2; }
#define DEFINE_COLS(T, SUF)                                                                                        \
    static inline __attribute__((always_inline)) void point_row_##SUF(int64_t cnt, const T *src, T *dst, int cplx, \
        const T *a, int64_t as, int acplx, unsigned ops, const double scale[2])                                    \
    {                                                                                                             \
        const int u = cplx ? 2 : 1;                                                                               \
        if (!(ops & FM_FFT_OP_MULTIPLY) || !a || as != 0) {                                                       \
            row_##SUF(cnt, src, u, dst, u, cplx, a, as, acplx, ops, (T)scale[0], (T)scale[1]);                   \
            return;                                                                                               \
        }                                                                                                         \
        const double ar = a[0], ai = acplx ? a[1] : 0.0;                                                         \
        const double fr = scale[0] * ar - scale[1] * ai, fi = scale[0] * ai + scale[1] * ar;                    \
        row_##SUF(cnt, src, u, dst, u, cplx, NULL, 0, 0, (ops & ~(unsigned)FM_FFT_OP_MULTIPLY) | FM_FFT_OP_SCALE, \
                  (T)fr, (T)fi);                                                                                  \
    }                                                                                                             \
    /* in -> the chunk's scratch (transform e at e * sd_in, as the chunk plans read it), prolog    \
     * applied: tiles of FM_FFT_COL_TILE points x FM_FFT_COL_BLOCK transforms transposed so each   \
     * transform gets FM_FFT_COL_TILE consecutive points (FFTW itself ran 4x slower on a           \
     * point-major scratch); with a prolog each point's dense row goes through it into a small     \
     * tile first, without one the transpose reads the caller's rows. */                          \
    static void gather_cols_##SUF(const fm_fft_chain_layout *x, const T *in, const T *pa, int64_t oin, int64_t opa,        \
                                  int64_t cnt, T *dst)                                                            \
    {                                                                                                             \
        const int ic = x->in_cplx, ci = ic ? 2 : 1, ca = x->pa_cplx ? 2 : 1, es = ci * (int)sizeof(T);          \
        const int mul = (x->pro_ops & FM_FFT_OP_MULTIPLY) && pa;                                                  \
        T tile[FM_FFT_COL_TILE * FM_FFT_COL_BLOCK * 2];                                                           \
        const char *rows[FM_FFT_COL_TILE];                                                                        \
        for (int64_t p0 = 0; p0 < x->per_in; p0 += FM_FFT_COL_TILE)                                               \
            for (int64_t e0 = 0; e0 < cnt; e0 += FM_FFT_COL_BLOCK) {                                              \
                const int64_t np = fm_min_i64(FM_FFT_COL_TILE, x->per_in - p0), ne = fm_min_i64(FM_FFT_COL_BLOCK, cnt - e0);   \
                for (int64_t p = 0; p < np; p++) {                                                                \
                    if (p0 + FM_FFT_COL_TILE + p < x->per_in) /* the next tile's rows: strided, not prefetched by HW */  \
                        prefetch_row(in + (oin + point_off(x->ext_in, x->s_in, p0 + FM_FFT_COL_TILE + p) + e0) * ci, \
                                     (size_t)ne * (size_t)ci * sizeof(T), 0);                                     \
                    const T *s = in + (oin + point_off(x->ext_in, x->s_in, p0 + p) + e0) * ci;                    \
                    rows[p] = (const char *)s;                                                                    \
                    if (!x->pro_ops)                                                                              \
                        continue;                                                                                 \
                    const T *a = mul ? pa + (opa + point_off(x->ext_in, x->s_pa, p0 + p) + e0 * x->b_pa0) * ca \
                                     : NULL;                                                                      \
                    point_row_##SUF(ne, s, tile + p * FM_FFT_COL_BLOCK * ci, ic, a, x->b_pa0 * ca, x->pa_cplx,    \
                                    x->pro_ops, x->pro_scale);                                                    \
                    rows[p] = (const char *)(tile + p * FM_FFT_COL_BLOCK * ci);                                   \
                }                                                                                                 \
                transpose_in[es_index(es)](np, ne, rows, (char *)(dst + (e0 * x->sd_in + p0) * ci), x->sd_in * es);        \
            }                                                                                                     \
    }                                                                                                             \
    /* The chunk's scratch src -> out with the epilog (the transpose of gather_cols: into the      \
     * caller's rows directly without an epilog, through the tile with one); src == NULL: the     \
     * epilog in place on out, point by point. */                                                 \
    static void scatter_cols_##SUF(const fm_fft_chain_layout *x, const T *src, T *out, const T *ea, int64_t oout,          \
                                   int64_t oea, int64_t cnt)                                                      \
    {                                                                                                             \
        const int oc = x->out_cplx, co = oc ? 2 : 1, ca = x->ea_cplx ? 2 : 1, es = co * (int)sizeof(T);         \
        const int mul = (x->epi_ops & FM_FFT_OP_MULTIPLY) && ea;                                                  \
        T tile[FM_FFT_COL_TILE * FM_FFT_COL_BLOCK * 2];                                                           \
        char *rows[FM_FFT_COL_TILE];                                                                              \
        for (int64_t p0 = 0; p0 < x->per_out; p0 += FM_FFT_COL_TILE)                                              \
            for (int64_t e0 = 0; e0 < cnt; e0 += FM_FFT_COL_BLOCK) {                                              \
                const int64_t np = fm_min_i64(FM_FFT_COL_TILE, x->per_out - p0), ne = fm_min_i64(FM_FFT_COL_BLOCK, cnt - e0);  \
                for (int64_t p = 0; p < np; p++) {                                                                \
                    if (p0 + FM_FFT_COL_TILE + p < x->per_out)                                                    \
                        prefetch_row(out + (oout + point_off(x->ext_out, x->s_out, p0 + FM_FFT_COL_TILE + p) + e0) * co, \
                                     (size_t)ne * (size_t)co * sizeof(T), 1);                                     \
                    rows[p] = x->epi_ops ? (char *)(tile + p * FM_FFT_COL_BLOCK * co)                             \
                                         : (char *)(out + (oout + point_off(x->ext_out, x->s_out, p0 + p) + e0) * co); \
                }                                                                                                 \
                if (src)                                                                                          \
                    transpose_out[es_index(es)](np, ne, (const char *)(src + (e0 * x->sd_out + p0) * co), x->sd_out * es, rows); \
                for (int64_t p = 0; x->epi_ops && p < np; p++) {                                                  \
                    T *d = out + (oout + point_off(x->ext_out, x->s_out, p0 + p) + e0) * co;                      \
                    const T *a = mul ? ea + (oea + point_off(x->ext_out, x->s_ea, p0 + p) + e0 * x->b_ea0) * ca \
                                     : NULL;                                                                      \
                    point_row_##SUF(ne, src ? tile + p * FM_FFT_COL_BLOCK * co : d, d, oc, a, x->b_ea0 * ca,       \
                                    x->ea_cplx, x->epi_ops, x->epi_scale);                                        \
                }                                                                                                 \
            }                                                                                                     \
    }
DEFINE_COLS(float, f)
DEFINE_COLS(double, d)

void fm_fft_gather(const fm_fft_chain_layout *x, int dbl, const void *in, const void *pa, int64_t oin, int64_t opa,
                   void *dst, int nthr)
{
    if (dbl)
        gather_d(x, in, pa, oin, opa, dst, nthr);
    else
        gather_f(x, in, pa, oin, opa, dst, nthr);
}

void fm_fft_scatter(const fm_fft_chain_layout *x, int dbl, const void *src, void *out, const void *ea, int64_t oout,
                    int64_t oea, int nthr)
{
    if (dbl)
        scatter_d(x, src, out, ea, oout, oea, nthr);
    else
        scatter_f(x, src, out, ea, oout, oea, nthr);
}

void fm_fft_gather_cols(const fm_fft_chain_layout *x, int dbl, const void *in, const void *pa, int64_t oin,
                        int64_t opa, int64_t cnt, void *dst)
{
    if (dbl)
        gather_cols_d(x, in, pa, oin, opa, cnt, dst);
    else
        gather_cols_f(x, in, pa, oin, opa, cnt, dst);
}

void fm_fft_scatter_cols(const fm_fft_chain_layout *x, int dbl, const void *src, void *out, const void *ea,
                         int64_t oout, int64_t oea, int64_t cnt)
{
    if (dbl)
        scatter_cols_d(x, src, out, ea, oout, oea, cnt);
    else
        scatter_cols_f(x, src, out, ea, oout, oea, cnt);
}
