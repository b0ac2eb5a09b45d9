/* dist_chain.c : the fused chains of libfusemath_mpi's FFTs, x -> conj?(x * scale * array),
 * applied in the one copy of each side between the caller's block and FFTW's buffer (the norm
 * folded into the epilog's scale), and the checks of the multiply arrays (each rank's block of
 * the side it multiplies: docs/design.md, Distributed). */
#include "dist_impl.h"

#include <stdio.h>
#include <string.h>

/* rows x len scalars from src (row stride srow) to dst (row stride drow), through chain c. cplx:
 * the data are complex (re, im pairs; len even); c->arr, when set, is C-contiguous in the
 * caller's block layout (rows x len / (cplx ? 2 : 1) elements), complex when c->arr_cplx. Each
 * row runs one branch-free inner loop so that the compiler vectorizes it (the dynamic cost model and
 * AVX2 / AVX-512 clones, as fusion/'s chain passes: cmake/FusemathMPI.cmake). */
#define FM_DIST_COPY(NAME, T)                                                                             \
    FM_SIMD_CLONES static void NAME(T *restrict dst, int64_t drow, const T *restrict src, int64_t srow, int64_t rows,    \
                     int64_t len, int cplx, const fm_dist_chain_run *c)                                   \
    {                                                                                                     \
        const T ar = (T)c->scale[0], ai = (T)c->scale[1], sg = c->conj ? (T)-1 : (T)1;                    \
        const int64_t melems = cplx ? len / 2 : len, mrow = melems * (c->arr_cplx ? 2 : 1);              \
        for (int64_t r = 0; r < rows; r++) {                                                              \
            T *restrict d = dst + r * drow;                                                               \
            const T *restrict x = src + r * srow;                                                         \
            const T *restrict m = c->arr ? (const T *)c->arr + r * mrow : NULL;                           \
            if (!m && !c->scaled && !(c->conj && cplx)) {                                                 \
                memcpy(d, x, (size_t)len * sizeof(T));                                                    \
            } else if (!cplx) { /* real data: the scale and array are real */                            \
                if (m)                                                                                    \
                    for (int64_t i = 0; i < len; i++)                                                     \
                        d[i] = x[i] * ar * m[i];                                                          \
                else                                                                                      \
                    for (int64_t i = 0; i < len; i++)                                                     \
                        d[i] = x[i] * ar;                                                                 \
            } else if (!m) {                                                                              \
                for (int64_t i = 0; i < melems; i++) {                                                    \
                    T xr = x[2 * i], xi = x[2 * i + 1];                                                   \
                    d[2 * i] = xr * ar - xi * ai;                                                         \
                    d[2 * i + 1] = sg * (xr * ai + xi * ar);                                              \
                }                                                                                         \
            } else if (!c->arr_cplx) { /* complex data, real array: (x * s) * m */                       \
                for (int64_t i = 0; i < melems; i++) {                                                    \
                    T xr = x[2 * i], xi = x[2 * i + 1];                                                   \
                    d[2 * i] = (xr * ar - xi * ai) * m[i];                                                \
                    d[2 * i + 1] = sg * ((xr * ai + xi * ar) * m[i]);                                     \
                }                                                                                         \
            } else { /* complex data, complex array: (x * s) * m */                                      \
                for (int64_t i = 0; i < melems; i++) {                                                    \
                    T xr = x[2 * i], xi = x[2 * i + 1], mr = m[2 * i], mi = m[2 * i + 1];                 \
                    T yr = xr * ar - xi * ai, yi = xr * ai + xi * ar;                                     \
                    d[2 * i] = yr * mr - yi * mi;                                                         \
                    d[2 * i + 1] = sg * (yr * mi + yi * mr);                                              \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
    }
FM_DIST_COPY(copy_f64, double)
FM_DIST_COPY(copy_f32, float)
#undef FM_DIST_COPY

void fm_dist_copy(int dbl, void *dst, int64_t drow, const void *src, int64_t srow, int64_t rows, int64_t len,
                  int cplx, const fm_dist_chain_run *c)
{
    if (dbl)
        copy_f64(dst, drow, src, srow, rows, len, cplx, c);
    else
        copy_f32(dst, drow, src, srow, rows, len, cplx, c);
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *v)
{
    int k = snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && k > 0 && (size_t)k < cap; i++)
        k += snprintf(buf + k, cap - (size_t)k, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (k > 0 && (size_t)k < cap)
        snprintf(buf + k, cap - (size_t)k, ")");
}

/* Shape, layout and memory of a multiply array (its dtype checked by the caller). */
static fm_status check_array_layout(const char *where, const char *name, const fm_tensor *t, int ndim,
                                    const int64_t *local, const char *side, int gpu)
{
    char got[128], want[128];
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == local[i];
    if (!same) {
        shape_text(got, sizeof got, t->ndim >= 0 && t->ndim <= FM_MAX_NDIM ? t->ndim : 0, t->shape);
        shape_text(want, sizeof want, ndim, local);
        return fm_fail(FM_ERR_SHAPE, "%s: %s_array has shape %s; expected this rank's %s block %s "
                       "(fm_dist_local_shape; distributed chains do not broadcast)", where, name, got, side, want);
    }
    int64_t expect = 1, numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= t->shape[i];
    for (int i = ndim - 1; i >= 0 && numel; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expect)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s_array's strides are not C-contiguous (axis %d has "
                           "stride %lld, expected %lld); pass a contiguous copy", where, name, i,
                           (long long)t->strides[i], (long long)expect);
        expect *= t->shape[i];
    }
    fm_device dev; /* auto resolved from the pointer as the core does; managed memory counts as the GPU's */
    char what[48];
    snprintf(what, sizeof what, "%s_array", name);
    fm_status ds = fm_tensor_resolve_device(where, what, t, &dev);
    if (ds != FM_OK)
        return ds;
    if (gpu < 0 && dev.type != FM_DEVICE_CPU)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s_array is on a CUDA device; CPU ranks take host memory", where,
                       name);
    if (gpu >= 0 && ((dev.type != FM_DEVICE_CUDA && dev.type != FM_DEVICE_CUDA_MANAGED) || dev.id != gpu))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s_array is %s; this rank's GPU-rank plan runs on cuda:%d and "
                       "takes the array there", where, name, dev.type == FM_DEVICE_CPU ? "host memory" : "on another GPU",
                       gpu);
    if (!t->data && numel)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s_array->data is NULL but this rank's block has %lld "
                       "elements", where, name, (long long)numel);
    return FM_OK;
}

fm_status fm_dist_check_array(const char *where, const char *name, const fm_tensor *t, unsigned ops, int ndim,
                              const int64_t *local, int dbl, int real_side, int gpu, fm_dist_chain_run *run)
{
    run->arr = NULL, run->arr_cplx = 0;
    const char *side = strcmp(name, "prolog") ? "output" : "input";
    if (!(ops & FM_FFT_OP_MULTIPLY)) {
        if (t)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s_array is given but opts->%s.ops lacks "
                           "FM_FFT_OP_MULTIPLY (0x%x)", where, name, name, FM_FFT_OP_MULTIPLY);
        return FM_OK;
    }
    if (!t)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->%s.ops has FM_FFT_OP_MULTIPLY but %s_array is NULL; "
                       "pass this rank's %s block (fm_dist_fft_plan_chains)", where, name, name, side);
    fm_dtype re = dbl ? FM_F64 : FM_F32, cx = dbl ? FM_C128 : FM_C64;
    if (t->dtype != re && (real_side || t->dtype != cx))
        return fm_fail(FM_ERR_DTYPE, "%s: %s_array has dtype %s; the %s data is %s %s, so expected %s%s%s", where,
                       name, fm_dtype_name(t->dtype), side, real_side ? "real" : "complex", dbl ? "double" : "single",
                       fm_dtype_name(re), real_side ? "" : " or ", real_side ? "" : fm_dtype_name(cx));
    fm_status st = check_array_layout(where, name, t, ndim, local, side, gpu);
    if (st != FM_OK)
        return st;
    run->arr = t->data, run->arr_cplx = t->dtype == cx;
    return FM_OK;
}
