/* fftwl_fft.c : CPU FFT in long double (ld / cld: NumPy's longdouble / clongdouble) through
 * FFTW's long-double library libfftw3l (guru64 interface: any axes, batch and strides). Kept
 * lean, as the precision is for accuracy, not speed: each execute plans with FFTW_ESTIMATE on
 * the caller's arrays (ESTIMATE never touches them; FFTW remembers what it planned), reading the
 * input where it lies unless FFTW cannot (c2r destroys its input, a prolog, zero or negative
 * strides: then a dense copy), writing through a dense scratch where out's strides are negative.
 * The norm is computed in long double (as NumPy's pocketfft does), scale and conj chains are
 * applied in long double; multiply arrays and callbacks are refused. Built only with libfftw3l
 * (cmake/FusemathDeps.cmake); without it the FFTW backend says a long-double FFT needs it. */
#ifdef FM_HAVE_FFTW3L
#include "fftw_impl.h"

#include <math.h>
#include <stdlib.h>

/* A tensor's layout: ndim, extents, strides in elements (negative and zero allowed). */
typedef struct layout {
    int nd;
    int64_t shape[FM_MAX_NDIM], st[FM_MAX_NDIM];
} layout;

static layout layout_of(const fm_tensor *t)
{
    layout l = {.nd = t->ndim};
    for (int d = 0; d < t->ndim; d++)
        l.shape[d] = t->shape[d], l.st[d] = t->strides[d];
    return l;
}

/* The same extents in C order. */
static layout dense(layout l)
{
    int64_t step = 1;
    for (int d = l.nd - 1; d >= 0; d--)
        l.st[d] = step, step *= l.shape[d];
    return l;
}

static int positive_strides(const layout *l)
{
    for (int d = 0; d < l->nd; d++)
        if (l->shape[d] > 1 && l->st[d] <= 0)
            return 0;
    return 1;
}

/* dst = conj?(src * sc) elementwise over src's extents (w: 2 for complex, 1 for real). */
static void move(const long double *src, const layout *ls, long double *dst, const layout *ld, int w,
                 const long double sc[2], int conj)
{
    int64_t idx[FM_MAX_NDIM] = {0}, total = 1, so = 0, dof = 0;
    for (int d = 0; d < ls->nd; d++)
        total *= ls->shape[d];
    for (int64_t e = 0; e < total; e++) {
        const long double *a = src + so * w;
        long double *b = dst + dof * w;
        if (w == 2 && sc[1] == 0.0L) { /* a real factor: inf in one part must not make NaN in the other */
            const long double re = a[0] * sc[0], im = a[1] * sc[0];
            b[0] = re, b[1] = conj ? -im : im;
        } else if (w == 2) {
            const long double re = a[0] * sc[0] - a[1] * sc[1], im = a[0] * sc[1] + a[1] * sc[0];
            b[0] = re, b[1] = conj ? -im : im;
        } else {
            b[0] = a[0] * sc[0];
        }
        for (int d = ls->nd - 1; d >= 0; d--) { /* the next index, C order */
            so += ls->st[d], dof += ld->st[d];
            if (++idx[d] < ls->shape[d])
                break;
            so -= ls->st[d] * ls->shape[d], dof -= ld->st[d] * ls->shape[d], idx[d] = 0;
        }
    }
}

/* The epilog scale with the norm in long double: the problem holds norm * user scale in double
 * (fft_problem.c set_params), the user's part is recovered exactly when it is 1. */
static void epilog_scale(const fm_problem *p, long double sc[2])
{
    const fm_fft_params *fp = &p->u.fft;
    double total_d = 1;
    long double total = 1;
    for (int i = 0; i < fp->naxes; i++) {
        const fm_tensor *from = &p->t[fp->kind == FM_FFT_C2R ? FM_FFT_OUT : FM_FFT_IN];
        int64_t n = i < 3 ? fp->n[i] : from->shape[fp->axes_more[i - 3]];
        total_d *= (double)n, total *= (long double)n;
    }
    const int by_n = (fp->norm == FM_FFT_NORM_FORWARD) != !!fp->inverse;
    const double norm_d = fp->norm == FM_FFT_NORM_ORTHO ? 1.0 / sqrt(total_d) : by_n ? 1.0 / total_d : 1.0;
    const long double norm = fp->norm == FM_FFT_NORM_ORTHO ? 1.0L / sqrtl(total) : by_n ? 1.0L / total : 1.0L;
    const int has = fp->epilog_ops & FM_FFT_OP_SCALE;
    sc[0] = has ? (long double)fp->epilog_scale[0] / norm_d * norm : 1.0L;
    sc[1] = has ? (long double)fp->epilog_scale[1] / norm_d * norm : 0.0L;
}

/* FFTW's dims: the transform axes (n: the logical length), then the batch axes. */
static void guru_dims(const fm_problem *p, const layout *li, const layout *lo, fftwl_iodim64 *dims,
                      fftwl_iodim64 *hd, int *nh)
{
    const fm_fft_params *fp = &p->u.fft;
    unsigned used = 0;
    for (int i = 0; i < fp->naxes; i++) {
        const int a = i < 3 ? fp->axes[i] : fp->axes_more[i - 3];
        const int64_t n = fp->kind == FM_FFT_C2R ? lo->shape[a] : li->shape[a];
        dims[i] = (fftwl_iodim64){n, li->st[a], lo->st[a]};
        used |= 1u << a;
    }
    *nh = 0;
    for (int d = 0; d < li->nd; d++)
        if (!(used >> d & 1u))
            hd[(*nh)++] = (fftwl_iodim64){li->shape[d], li->st[d], lo->st[d]};
}

static fm_status transform(const fm_problem *p, void *in, const layout *li, void *out, const layout *lo)
{
    const fm_fft_params *fp = &p->u.fft;
    fftwl_iodim64 dims[FM_MAX_NDIM], hd[FM_MAX_NDIM];
    int nh = 0;
    guru_dims(p, li, lo, dims, hd, &nh);
    const unsigned flags = FFTW_ESTIMATE | (fp->kind == FM_FFT_C2R ? FFTW_DESTROY_INPUT : 0);
    pthread_mutex_lock(&fm_fftw_planner_lock);
    const int r = fp->naxes, dir = fp->inverse ? FFTW_BACKWARD : FFTW_FORWARD;
    fftwl_plan plan = fp->kind == FM_FFT_C2C   ? fftwl_plan_guru64_dft(r, dims, nh, hd, in, out, dir, flags)
                      : fp->kind == FM_FFT_R2C ? fftwl_plan_guru64_dft_r2c(r, dims, nh, hd, in, out, flags)
                                               : fftwl_plan_guru64_dft_c2r(r, dims, nh, hd, in, out, flags);
    pthread_mutex_unlock(&fm_fftw_planner_lock);
    if (!plan)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fft: fftwl_plan_guru64 could not plan this long-double layout");
    fftwl_execute(plan);
    pthread_mutex_lock(&fm_fftw_planner_lock);
    fftwl_destroy_plan(plan);
    pthread_mutex_unlock(&fm_fftw_planner_lock);
    return FM_OK;
}

static fm_status fm_fftwl_run(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)args, (void)stream;
    const fm_problem *p = &plan->problem;
    const fm_fft_params *fp = &p->u.fft;
    if (fm_tensor_numel(&p->t[FM_FFT_IN]) == 0 || fm_tensor_numel(&p->t[FM_FFT_OUT]) == 0)
        return FM_OK;
    const int wi = fp->kind == FM_FFT_R2C ? 1 : 2, wo = fp->kind == FM_FFT_C2R ? 1 : 2;
    layout li = layout_of(&p->t[FM_FFT_IN]), lo = layout_of(&p->t[FM_FFT_OUT]);
    const layout di = dense(li), dout = dense(lo);
    const long double one[2] = {1.0L, 0.0L};
    long double pro[2] = {(long double)fp->prolog_scale[0], (long double)fp->prolog_scale[1]}, epi[2];
    epilog_scale(p, epi);
    const int copy_in = fp->kind == FM_FFT_C2R || fp->prolog_ops || !positive_strides(&li);
    const int via_scratch = !positive_strides(&lo);
    const size_t in_count = (size_t)fm_tensor_numel(&p->t[FM_FFT_IN]) * wi;
    const size_t out_count = (size_t)fm_tensor_numel(&p->t[FM_FFT_OUT]) * wo;
    long double *sin = copy_in ? malloc(in_count * sizeof *sin) : NULL;
    long double *sout = via_scratch ? malloc(out_count * sizeof *sout) : NULL;
    fm_status s = FM_OK;
    if ((copy_in && !sin) || (via_scratch && !sout))
        s = fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory for the long-double transform's copies");
    if (s == FM_OK && copy_in)
        move(ptrs[FM_FFT_IN], &li, sin, &di, wi, fp->prolog_ops & FM_FFT_OP_SCALE ? pro : one,
             (fp->prolog_ops & FM_FFT_OP_CONJ) != 0);
    if (s == FM_OK)
        s = transform(p, copy_in ? (void *)sin : ptrs[FM_FFT_IN], copy_in ? &di : &li,
                      via_scratch ? (void *)sout : ptrs[FM_FFT_OUT], via_scratch ? &dout : &lo);
    const int conj = (fp->epilog_ops & FM_FFT_OP_CONJ) != 0;
    if (s == FM_OK && (via_scratch || conj || epi[0] != 1 || epi[1] != 0)) /* on out, or the copy back */
        move(via_scratch ? sout : ptrs[FM_FFT_OUT], via_scratch ? &dout : &lo, ptrs[FM_FFT_OUT], &lo, wo, epi,
             conj);
    free(sin);
    free(sout);
    return s;
}

static fm_status fm_fftwl_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    (void)ctx, (void)state;
    const fm_fft_params *fp = &p->u.fft;
    const fm_dtype it = p->t[FM_FFT_IN].dtype;
    if (it != FM_LD && it != FM_CLD)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fft: fftw-ld transforms long double only");
    const unsigned arrays = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CALLBACK;
    if ((fp->prolog_ops | fp->epilog_ops) & arrays)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fft: a long-double transform (libfftw3l) takes scale and conj "
                       "chains only; multiply the data by the array before or after the transform");
    out->execute = fm_fftwl_run;
    out->required_align[FM_FFT_IN] = out->required_align[FM_FFT_OUT] = _Alignof(long double);
    char ax[40] = "", pro[32], epi[32];
    for (int i = 0, u = 0; i < fp->naxes && i < 3 && u < (int)sizeof ax; i++)
        u += snprintf(ax + u, sizeof ax - (size_t)u, "%s%d", i ? "," : "", fp->axes[i]);
    fm_fft_ops_text(pro, sizeof pro, fp->prolog_ops);
    fm_fft_ops_text(epi, sizeof epi, fp->epilog_ops);
    static const char *const kinds[3] = {"c2c", "r2c", "c2r"};
    fm_plan_set_describe(out, "fft cpu/fftw-ld %s %s axes=(%s) %s prolog=%s epilog=%s (libfftw3l %s, "
                         "estimate)",
                         fm_dtype_name(fp->kind == FM_FFT_R2C ? p->t[FM_FFT_OUT].dtype : it), kinds[fp->kind],
                         ax, fp->inverse ? "inverse" : "forward", pro, epi, fftwl_version);
    return FM_OK;
}

const fm_backend fm_backend_fftwl_fft = {
    .name = "fftw-ld",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_FFT,
    .priority = 0,
    .plan = fm_fftwl_plan,
};
#endif
