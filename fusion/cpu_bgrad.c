/* cpu_bgrad.c : the sums behind the bias-gradient epilogues on the CPU: row sums of
 * A (bgrada), column sums of B (bgradb), and the fixed-order reduction of per-panel
 * column sums of D (drelu/dgelu + bgrad). Accumulation is in double for every
 * dtype (complex: real and imaginary parts each), so f32 sums carry no rounding
 * of their own beyond the final store. */
#include "cpu_epilogue.h"

#include <string.h>

#define SUMS_CHUNK 256 /* outputs accumulated at once on the stack (2 KiB) */

/* acc[i * as] = sum_{r < nred} x[i * os + r * rs], i < nout (real T). Either the
 * outputs are adjacent (os == 1, or the smaller stride): r outer, a vector of
 * outputs inner; or the reduced elements are (rs == 1): one vector reduction per
 * output. Each output's value depends only on its own elements and this choice,
 * never on how a caller split the outputs. */
#define FM_DEFINE_SUMS(fname, T)                                                                   \
    static void fname(int64_t nout, int64_t nred, const T *x, int64_t os, int64_t rs, double *acc, \
                      int64_t as)                                                                  \
    {                                                                                              \
        int64_t aos = os < 0 ? -os : os, ars = rs < 0 ? -rs : rs;                                  \
        if (os == 1 || (rs != 1 && aos <= ars)) {                                                  \
            for (int64_t i = 0; i < nout; i++)                                                     \
                acc[i * as] = 0.0;                                                                 \
            for (int64_t r = 0; r < nred; r++) {                                                   \
                const T *xr = x + r * rs;                                                          \
                if (os == 1 && as == 1) {                                                          \
                    _Pragma("omp simd") for (int64_t i = 0; i < nout; i++) acc[i] += (double)xr[i]; \
                } else {                                                                           \
                    for (int64_t i = 0; i < nout; i++)                                             \
                        acc[i * as] += (double)xr[i * os];                                         \
                }                                                                                  \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < nout; i++) {                                                   \
                const T *xi = x + i * os;                                                          \
                double s = 0.0;                                                                    \
                if (rs == 1) {                                                                     \
                    _Pragma("omp simd reduction(+ : s)") for (int64_t r = 0; r < nred; r++) s +=   \
                        (double)xi[r];                                                             \
                } else {                                                                           \
                    for (int64_t r = 0; r < nred; r++)                                             \
                        s += (double)xi[r * rs];                                                   \
                }                                                                                  \
                acc[i * as] = s;                                                                   \
            }                                                                                      \
        }                                                                                          \
    }

FM_DEFINE_SUMS(sums_f32, float)
FM_DEFINE_SUMS(sums_f64, double)

static void sums_real(int is_f64, int64_t nout, int64_t nred, const void *x, int64_t os, int64_t rs, double *acc,
                      int64_t as)
{
    if (is_f64)
        sums_f64(nout, nred, x, os, rs, acc, as);
    else
        sums_f32(nout, nred, x, os, rs, acc, as);
}

void fm_cpu_sums_store(fm_dtype t, int64_t nout, int64_t nred, const void *x, int64_t os, int64_t rs, void *out,
                       int64_t out_stride)
{
    const int cplx = fm_dtype_is_complex(t), is_f64 = (t == FM_F64 || t == FM_C128);
    const size_t rsize = is_f64 ? sizeof(double) : sizeof(float); /* one real component */
    double acc[2 * SUMS_CHUNK];
    for (int64_t i0 = 0; i0 < nout; i0 += SUMS_CHUNK) {
        const int64_t cnt = nout - i0 < SUMS_CHUNK ? nout - i0 : SUMS_CHUNK;
        const char *xc = nred > 0 ? (const char *)x + i0 * os * (int64_t)rsize * (cplx ? 2 : 1) : NULL;
        if (nred == 0) { /* an empty sum; x may be NULL */
            memset(acc, 0, sizeof acc);
        } else if (!cplx) {
            sums_real(is_f64, cnt, nred, xc, os, rs, acc, 1);
        } else if (os == 1) {
            /* adjacent complex outputs: 2*cnt adjacent real outputs (re, im interleaved) */
            sums_real(is_f64, 2 * cnt, nred, xc, 1, 2 * rs, acc, 1);
        } else {
            sums_real(is_f64, cnt, nred, xc, 2 * os, 2 * rs, acc, 2);
            sums_real(is_f64, cnt, nred, xc + rsize, 2 * os, 2 * rs, acc + 1, 2);
        }
        const int parts = cplx ? 2 : 1; /* real components per output */
        for (int64_t i = 0; i < cnt; i++)
            for (int c = 0; c < parts; c++) {
                const int64_t o = (i0 + i) * out_stride * parts + c;
                if (is_f64)
                    ((double *)out)[o] = acc[parts * i + c];
                else
                    ((float *)out)[o] = (float)acc[parts * i + c];
            }
    }
}

void fm_cpu_reduce_partials(fm_dtype t, int64_t nparts, int64_t n, const double *partial, void *out,
                            int64_t out_stride)
{
    double acc[SUMS_CHUNK];
    for (int64_t j0 = 0; j0 < n; j0 += SUMS_CHUNK) {
        const int64_t cnt = n - j0 < SUMS_CHUNK ? n - j0 : SUMS_CHUNK;
        memset(acc, 0, sizeof(double) * (size_t)cnt);
        for (int64_t q = 0; q < nparts; q++) {
            const double *pq = partial + q * n + j0;
#pragma omp simd
            for (int64_t j = 0; j < cnt; j++)
                acc[j] += pq[j];
        }
        for (int64_t j = 0; j < cnt; j++) {
            if (t == FM_F64)
                ((double *)out)[(j0 + j) * out_stride] = acc[j];
            else
                ((float *)out)[(j0 + j) * out_stride] = (float)acc[j];
        }
    }
}
