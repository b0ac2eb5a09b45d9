/* fft_harness.h : the FFT checks both backends run (tests/c/test_fft_cpu.c on FFTW,
 * tests/c/test_fft_cufft_gpu.c on cuFFT): every case against a naive O(n^2) DFT in double
 * precision, FFT identities on larger sizes (linearity, impulse, shift), layouts (axes
 * anywhere, strided, transposed, negative strides, in place), fused prolog/epilog chains
 * against the chain applied by hand, concurrent execution of one plan.
 *
 * The data lives in host memory; with g_exec = FM_EXECUTION_CUDA the library stages it to
 * the GPU with the same strides (core/src/staging.c), so the cuFFT backend sees exactly the
 * layouts the CPU one does. g_describe is the prefix the plans' describe() must have.
 *
 * Tolerance: max|got - ref| <= C * eps * (log2(N) + 2) * max|ref|, C = 16. */
#ifndef FM_TEST_FFT_HARNESS_H
#define FM_TEST_FFT_HARNESS_H
#include "check.h"
#include "fft_ref.h"

#include <pthread.h>
#include <stdio.h>

/* the harness's tests: a file built without their device (test_fft_cufft_gpu.c without CUDA) runs none */
#define FM_HARNESS_TEST static __attribute__((unused))

static fm_context *g_ctx;
static test_rng g_rng = {0x9E3779B97F4A7C15ULL};
static int g_exec = FM_EXECUTION_AUTO; /* FM_EXECUTION_CUDA: staged to the GPU */
static const char *g_describe = "fft cpu/fftw";

/* fm_fft_options_init + the execution space under test */
static void test_opts_init(fm_fft_options *o)
{
    fm_fft_options_init(o);
    o->execution = g_exec;
}

/* ---- strided buffers ---- */
typedef struct {
    unsigned char *mem;
    size_t bytes;
    fm_tensor t;
} tbuf;

/* order: axes from outermost to innermost in memory (NULL: C order); pad: extra elements
 * after each innermost row; step: stride of the innermost axis; neg: axis with a negative
 * stride (-1: none). */
/* shift: bytes the view starts after an aligned address (misaligned for FFTW's SIMD) */
static void tb_make_s(tbuf *b, fm_dtype dt, int nd, const int64_t *shape, const int *order, int64_t pad,
                      int64_t step, int neg, int64_t shift)
{
    int ord[FM_MAX_NDIM];
    for (int i = 0; i < nd; i++)
        ord[i] = order ? order[i] : i;
    int64_t strides[FM_MAX_NDIM], s = step > 0 ? step : 1, span = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int a = ord[i];
        strides[a] = s;
        s = s * (shape[a] > 0 ? shape[a] : 1) + (i == nd - 1 ? pad : 0);
    }
    int64_t base = 0;
    for (int a = 0; a < nd; a++)
        span += (shape[a] > 0 ? shape[a] - 1 : 0) * strides[a];
    if (neg >= 0) {
        base = (shape[neg] - 1) * strides[neg];
        strides[neg] = -strides[neg];
    }
    size_t es = fm_dtype_size(dt);
    b->bytes = (size_t)span * es + (size_t)shift;
    b->mem = aligned_alloc(64, (b->bytes + 64) / 64 * 64);
    memset(b->mem, 0x5A, b->bytes);
    fm_tensor_init(&b->t, b->mem + shift + base * (int64_t)es, fm_test_cpu, dt, nd, shape, strides);
}
#define tb_make(b, dt, nd, shape, order, pad, step, neg) tb_make_s(b, dt, nd, shape, order, pad, step, neg, 0)
static void tb_free(tbuf *b) { free(b->mem); }

/* broadcast read of `arr` (right-aligned) at logical index lin of shape (nd, sh) */
static double complex bcast_get(const fm_tensor *arr, int nd, const int64_t *sh, int64_t lin)
{
    int64_t off = 0;
    for (int d = nd - 1, j = arr->ndim - 1; d >= 0; d--, j--) {
        int64_t i = lin % sh[d];
        lin /= sh[d];
        if (j >= 0 && arr->shape[j] != 1)
            off += i * arr->strides[j];
    }
    return elem_get(arr->data, arr->dtype, off);
}

/* y (out_shape) = unnormalised transform of x (in_shape); axes[naxes-1] is the halved one. */
static void ref_transform(int kind, int inverse, int nd, const int64_t *in_sh, const int64_t *out_sh, int naxes,
                          const int *axes, const double complex *x, double complex *y)
{
    int64_t nin = numel(nd, in_sh), nout = numel(nd, out_sh);
    double complex *w = malloc(sizeof *w * (size_t)(nin > nout ? nin : nout) * 2 + 16);
    memcpy(w, x, sizeof *w * (size_t)nin);
    int sign = inverse ? 1 : -1;
    if (kind == FM_FFT_C2C) {
        for (int i = 0; i < naxes; i++)
            dft_axis(w, nd, in_sh, axes[i], sign);
        memcpy(y, w, sizeof *w * (size_t)nout);
    } else if (kind == FM_FFT_R2C) {
        for (int i = 0; i < naxes; i++)
            dft_axis(w, nd, in_sh, axes[i], sign);
        crop(nd, in_sh, out_sh, w, y);
    } else {
        for (int i = 0; i < naxes - 1; i++)
            dft_axis(w, nd, in_sh, axes[i], sign);
        int a = axes[naxes - 1];
        int64_t n = out_sh[a], m = in_sh[a], inner = 1, outer = 1;
        for (int d = a + 1; d < nd; d++)
            inner *= in_sh[d];
        for (int d = 0; d < a; d++)
            outer *= in_sh[d];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++)
                for (int64_t j = 0; j < n; j++) {
                    long double acc = 0;
                    for (int64_t k = 0; k < n; k++) {
                        double complex X = k < m ? w[(o * m + k) * inner + i] : conj(w[(o * m + (n - k)) * inner + i]);
                        acc += creal(X * cexp(2.0 * TEST_PI * I * (double)((j * k) % n) / (double)n));
                    }
                    y[(o * n + j) * inner + i] = (double)acc;
                }
    }
    free(w);
}

/* ---- one case ---- */
typedef struct {
    int dbl, kind, inverse, norm, nd;
    int64_t shape[FM_MAX_NDIM]; /* logical lengths (n on the halved axis) */
    int naxes, axes[3];         /* as passed; 0 naxes = library default */
    const int *order_in, *order_out;
    int64_t pad_in, pad_out, step_in, step_out;
    int neg_in, neg_out;
    int inplace;
    int64_t shift_in, shift_out; /* bytes */
    unsigned pro_ops, epi_ops;
    double complex pro_scale, epi_scale;
    int pa_nd, ea_nd;           /* 0: no array */
    int64_t pa_shape[FM_MAX_NDIM], ea_shape[FM_MAX_NDIM];
    int pa_cplx, ea_cplx;
    int threads, effort;
    double tol_mult;
} fcase;

static fcase fc_base(int dbl, int kind, int nd, const int64_t *shape, int naxes, const int *axes)
{
    fcase c;
    memset(&c, 0, sizeof c);
    c.dbl = dbl, c.kind = kind, c.inverse = kind == FM_FFT_C2R, c.nd = nd, c.naxes = naxes;
    memcpy(c.shape, shape, sizeof(int64_t) * (size_t)nd);
    for (int i = 0; i < naxes; i++)
        c.axes[i] = axes[i];
    c.neg_in = c.neg_out = -1;
    c.pro_scale = c.epi_scale = 1.0;
    c.tol_mult = 1;
    return c;
}

static void fc_label(const fcase *c, char *buf, size_t size)
{
    static const char *const kn[3] = {"c2c", "r2c", "c2r"};
    int o = snprintf(buf, size, "%s %s %s norm=%d shape=", c->dbl ? "f64" : "f32", kn[c->kind],
                     c->inverse ? "inv" : "fwd", c->norm);
    for (int i = 0; i < c->nd; i++)
        o += snprintf(buf + o, size - (size_t)o, "%s%lld", i ? "x" : "", (long long)c->shape[i]);
    o += snprintf(buf + o, size - (size_t)o, " axes=");
    for (int i = 0; i < c->naxes; i++)
        o += snprintf(buf + o, size - (size_t)o, "%d,", c->axes[i]);
    snprintf(buf + o, size - (size_t)o, " inplace=%d pro=%u epi=%u pa_nd=%d ea_nd=%d neg=%d/%d threads=%d",
             c->inplace, c->pro_ops, c->epi_ops, c->pa_nd, c->ea_nd, c->neg_in, c->neg_out, c->threads);
}

static double rel_err(const double complex *got, const double complex *ref, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = cabs(got[i] - ref[i]);
        if (!(d <= e) && !isnan(e)) /* a NaN sticks */
            e = d;
        if (cabs(ref[i]) > m)
            m = cabs(ref[i]);
    }
    return e / (m > 0 ? m : 1);
}

static double tol_for(int dbl, double total) { return 16.0 * (dbl ? DBL_EPSILON : FLT_EPSILON) * (log2(total + 1) + 2); }

static void run_case(const fcase *c)
{
    char label[320];
    fc_label(c, label, sizeof label);
    fm_dtype cdt = c->dbl ? FM_C128 : FM_C64, rdt = c->dbl ? FM_F64 : FM_F32;
    fm_dtype idt = c->kind == FM_FFT_R2C ? rdt : cdt, odt = c->kind == FM_FFT_C2R ? rdt : cdt;
    int axes[3], naxes = c->naxes ? c->naxes : (c->nd < 3 ? c->nd : 3);
    for (int i = 0; i < naxes; i++)
        axes[i] = c->naxes ? (c->axes[i] < 0 ? c->axes[i] + c->nd : c->axes[i]) : c->nd - naxes + i;
    int half = axes[naxes - 1];
    int64_t in_sh[FM_MAX_NDIM], out_sh[FM_MAX_NDIM];
    memcpy(in_sh, c->shape, sizeof in_sh);
    memcpy(out_sh, c->shape, sizeof out_sh);
    if (c->kind == FM_FFT_R2C)
        out_sh[half] = c->shape[half] / 2 + 1;
    if (c->kind == FM_FFT_C2R)
        in_sh[half] = c->shape[half] / 2 + 1;
    int64_t nin = numel(c->nd, in_sh), nout = numel(c->nd, out_sh);
    double total = 1;
    for (int i = 0; i < naxes; i++)
        total *= (double)c->shape[axes[i]];

    tbuf bi, bo, bpa, bea;
    tb_make_s(&bi, idt, c->nd, in_sh, c->order_in, c->pad_in, c->step_in, c->neg_in, c->shift_in);
    if (!c->inplace)
        tb_make_s(&bo, odt, c->nd, out_sh, c->order_out, c->pad_out, c->step_out, c->neg_out, c->shift_out);
    else
        bo = bi;
    double complex *x = malloc(sizeof *x * (size_t)(nin + 1)), *y = malloc(sizeof *y * (size_t)(nout + 1));
    double complex *got = malloc(sizeof *got * (size_t)(nout + 1));
    /* input: random; c2r over several axes gets a Hermitian input (r2c of a real array) */
    if (c->kind == FM_FFT_C2R && naxes > 1) {
        double complex *r = malloc(sizeof *r * (size_t)(nout + 1));
        for (int64_t i = 0; i < nout; i++)
            r[i] = rng_uniform(&g_rng);
        ref_transform(FM_FFT_R2C, 0, c->nd, out_sh, in_sh, naxes, axes, r, x);
        free(r);
    } else {
        for (int64_t i = 0; i < nin; i++)
            x[i] = CMPLX(rng_uniform(&g_rng), idt == cdt ? rng_uniform(&g_rng) : 0.0);
    }
    t_store(&bi.t, x);
    t_load(&bi.t, x); /* the rounded values */
    unsigned char *saved = malloc(bi.bytes + 1);
    memcpy(saved, bi.mem, bi.bytes);

    const fm_tensor *pa = NULL, *ea = NULL;
    if (c->pa_nd) {
        tb_make(&bpa, c->pa_cplx ? cdt : rdt, c->pa_nd, c->pa_shape, NULL, 0, 1, -1);
        int64_t n = numel(c->pa_nd, c->pa_shape);
        for (int64_t i = 0; i < n; i++)
            elem_set(bpa.t.data, bpa.t.dtype, i, CMPLX(rng_uniform(&g_rng), c->pa_cplx ? rng_uniform(&g_rng) : 0.0));
        pa = &bpa.t;
    }
    if (c->ea_nd) {
        tb_make(&bea, c->ea_cplx ? cdt : rdt, c->ea_nd, c->ea_shape, NULL, 0, 1, -1);
        int64_t n = numel(c->ea_nd, c->ea_shape);
        for (int64_t i = 0; i < n; i++)
            elem_set(bea.t.data, bea.t.dtype, i, CMPLX(rng_uniform(&g_rng), c->ea_cplx ? rng_uniform(&g_rng) : 0.0));
        ea = &bea.t;
    }

    /* reference: chain by hand around the naive transform */
    double complex *xp = malloc(sizeof *xp * (size_t)(nin + 1));
    for (int64_t i = 0; i < nin; i++) {
        double complex v = x[i];
        if (c->pro_ops & FM_FFT_OP_SCALE)
            v *= c->pro_scale;
        if (c->pro_ops & FM_FFT_OP_MULTIPLY)
            v *= bcast_get(pa, c->nd, in_sh, i);
        if ((c->pro_ops & FM_FFT_OP_CONJ) && c->kind != FM_FFT_R2C)
            v = conj(v);
        xp[i] = v;
    }
    ref_transform(c->kind, c->inverse, c->nd, in_sh, out_sh, naxes, axes, xp, y);
    double nf = norm_factor(c->norm, c->inverse, total);
    for (int64_t i = 0; i < nout; i++) {
        double complex v = y[i] * nf;
        if (c->epi_ops & FM_FFT_OP_SCALE)
            v *= c->epi_scale;
        if (c->epi_ops & FM_FFT_OP_MULTIPLY)
            v *= bcast_get(ea, c->nd, out_sh, i);
        if ((c->epi_ops & FM_FFT_OP_CONJ) && c->kind != FM_FFT_C2R)
            v = conj(v);
        y[i] = v;
    }

    fm_fft_options o;
    test_opts_init(&o);
    o.kind = c->kind, o.inverse = c->inverse, o.norm = c->norm, o.naxes = c->naxes, o.effort = c->effort;
    o.num_threads = c->threads;
    for (int i = 0; i < 3; i++)
        o.axes[i] = c->axes[i];
    o.prolog.ops = c->pro_ops, o.epilog.ops = c->epi_ops;
    o.prolog.scale[0] = creal(c->pro_scale), o.prolog.scale[1] = cimag(c->pro_scale);
    o.epilog.scale[0] = creal(c->epi_scale), o.epilog.scale[1] = cimag(c->epi_scale);
    fm_plan *plan = NULL;
    fm_status s = fm_fft_plan(g_ctx, &bi.t, &bo.t, pa, ea, &o, &plan);
    /* (negative strides on the GPU: cuFFT takes positive ones only, the backend a staged copy) */
    CHECK_MSG(s == FM_OK, "%s: plan -> %s (%s)", label, fm_status_name(s), fm_last_error());
    if (s == FM_OK) {
        void *ptrs[4] = {bi.t.data, bo.t.data, pa ? pa->data : NULL, ea ? ea->data : NULL};
        s = fm_plan_execute(plan, ptrs, 4, NULL);
        CHECK_MSG(s == FM_OK, "%s: execute -> %s", label, fm_status_name(s));
        CHECK_MSG(strstr(fm_plan_describe(plan), g_describe) != NULL, "%s: describe '%s'", label,
                  fm_plan_describe(plan));
        t_load(&bo.t, got);
        double e = rel_err(got, y, nout), tol = tol_for(c->dbl, total) * c->tol_mult;
        CHECK_MSG(e <= tol, "%s: rel err %.3g > %.3g (%s)", label, e, tol, fm_plan_describe(plan));
        if (!c->inplace)
            CHECK_MSG(memcmp(saved, bi.mem, bi.bytes) == 0, "%s: the input was modified", label);
        fm_plan_release(plan);
    }
    free(x), free(y), free(got), free(xp), free(saved);
    tb_free(&bi);
    if (!c->inplace)
        tb_free(&bo);
    if (pa)
        tb_free(&bpa);
    if (ea)
        tb_free(&bea);
}

/* (1) small 1-D sizes, batched, every kind / direction / norm / precision */
FM_HARNESS_TEST void test_small_vs_naive(void)
{
    static const int64_t sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 30, 64, 97};
    for (int dbl = 0; dbl < 2; dbl++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int v = 0; v < 4; v++)
                for (int norm = 0; norm < 3; norm++) {
                    int kind = v < 2 ? FM_FFT_C2C : v == 2 ? FM_FFT_R2C : FM_FFT_C2R;
                    int64_t sh[2] = {3, sizes[si]};
                    int ax[1] = {1};
                    fcase c = fc_base(dbl, kind, 2, sh, 1, ax);
                    c.inverse = v == 1 || v == 3;
                    c.norm = norm;
                    run_case(&c);
                }
}

/* ---- (2) identities on larger sizes through the library ---- */
static void fft1(int dbl, int inverse, int64_t n, const double complex *x, double complex *y)
{
    fm_dtype dt = dbl ? FM_C128 : FM_C64;
    tbuf bi, bo;
    tb_make(&bi, dt, 1, &n, NULL, 0, 1, -1);
    tb_make(&bo, dt, 1, &n, NULL, 0, 1, -1);
    t_store(&bi.t, x);
    fm_fft_options o;
    test_opts_init(&o);
    o.inverse = inverse;
    CHECK_OK(fm_fft(g_ctx, &bi.t, &bo.t, NULL, NULL, &o, NULL));
    t_load(&bo.t, y);
    tb_free(&bi), tb_free(&bo);
}

FM_HARNESS_TEST void test_identities(void)
{
    static const int64_t sizes[] = {4096, 3 * 5 * 7 * 11, 1009};
    for (int dbl = 0; dbl < 2; dbl++)
        for (size_t si = 0; si < 3; si++) {
            int64_t n = sizes[si];
            double tol = tol_for(dbl, (double)n);
            double complex *x1 = malloc(sizeof(double complex) * (size_t)n), *x2 = malloc(sizeof(double complex) * (size_t)n);
            double complex *x3 = malloc(sizeof(double complex) * (size_t)n), *y1 = malloc(sizeof(double complex) * (size_t)n);
            double complex *y2 = malloc(sizeof(double complex) * (size_t)n), *y3 = malloc(sizeof(double complex) * (size_t)n);
            double complex *r = malloc(sizeof(double complex) * (size_t)n);
            /* values representable in f32 so the comparisons see only transform error */
            for (int64_t i = 0; i < n; i++) {
                x1[i] = CMPLX((float)rng_uniform(&g_rng), (float)rng_uniform(&g_rng));
                x2[i] = CMPLX((float)rng_uniform(&g_rng), (float)rng_uniform(&g_rng));
            }
            double complex a = CMPLX(0.75, -0.25), b = CMPLX(-0.5, 0.125); /* exact in f32 */
            for (int64_t i = 0; i < n; i++)
                x3[i] = a * x1[i] + b * x2[i];
            for (int inv = 0; inv < 2; inv++) {
                fft1(dbl, inv, n, x1, y1);
                fft1(dbl, inv, n, x2, y2);
                fft1(dbl, inv, n, x3, y3);
                for (int64_t i = 0; i < n; i++)
                    r[i] = a * y1[i] + b * y2[i];
                double e = rel_err(y3, r, n);
                CHECK_MSG(e <= tol * 4, "linearity n=%lld dbl=%d inv=%d: %.3g > %.3g", (long long)n, dbl, inv, e,
                          tol * 4);
                /* time shift by s <-> phase ramp */
                int64_t sft = n / 3 + 1;
                for (int64_t i = 0; i < n; i++)
                    x3[i] = x1[(i - sft + n) % n];
                fft1(dbl, inv, n, x3, y3);
                double sg = inv ? 1 : -1;
                for (int64_t k = 0; k < n; k++)
                    r[k] = y1[k] * cexp(sg * 2 * TEST_PI * I * (double)((sft * k) % n) / (double)n);
                e = rel_err(y3, r, n);
                CHECK_MSG(e <= tol * 4, "shift n=%lld dbl=%d inv=%d: %.3g > %.3g", (long long)n, dbl, inv, e, tol * 4);
                for (int64_t i = 0; i < n; i++)
                    x3[i] = a * x1[i] + b * x2[i];
            }
            /* impulse at p -> exp(-2 pi i p k / n) */
            int64_t p = n / 2 - 1;
            for (int64_t i = 0; i < n; i++)
                x1[i] = i == p ? 1.0 : 0.0;
            fft1(dbl, 0, n, x1, y1);
            for (int64_t k = 0; k < n; k++)
                r[k] = cexp(-2 * TEST_PI * I * (double)((p * k) % n) / (double)n);
            double e = rel_err(y1, r, n);
            CHECK_MSG(e <= tol, "impulse n=%lld dbl=%d: %.3g > %.3g", (long long)n, dbl, e, tol);
            free(x1), free(x2), free(x3), free(y1), free(y2), free(y3), free(r);
        }
}

/* a single large transform planned with FFTW's threads: forward then inverse (backward
 * norm: the inverse takes 1/n as its epilog) gives the input back */
FM_HARNESS_TEST void test_large_roundtrip(void)
{
    int64_t n = 1 << 17;
    tbuf a, b, c;
    tb_make(&a, FM_C128, 1, &n, NULL, 0, 1, -1);
    tb_make(&b, FM_C128, 1, &n, NULL, 0, 1, -1);
    tb_make(&c, FM_C128, 1, &n, NULL, 0, 1, -1);
    double *x = a.t.data, *z = c.t.data;
    for (int64_t i = 0; i < 2 * n; i++)
        x[i] = rng_uniform(&g_rng);
    fm_fft_options o;
    test_opts_init(&o);
    o.num_threads = 2;
    CHECK_OK(fm_fft(g_ctx, &a.t, &b.t, NULL, NULL, &o, NULL));
    o.inverse = 1;
    fm_plan *p = NULL;
    CHECK_OK(fm_fft_plan(g_ctx, &b.t, &c.t, NULL, NULL, &o, &p));
    if (p) {
        printf("    %s\n", fm_plan_describe(p));
        void *ptrs[4] = {b.t.data, c.t.data, NULL, NULL};
        CHECK_OK(fm_plan_execute(p, ptrs, 4, NULL));
        fm_plan_release(p);
    }
    double e = 0;
    for (int64_t i = 0; i < 2 * n; i++)
        e = fabs(z[i] - x[i]) > e ? fabs(z[i] - x[i]) : e;
    CHECK_MSG(e < 1e-13, "roundtrip error %.3g", e);
    tb_free(&a), tb_free(&b), tb_free(&c);
}

/* (3) several axes, layouts, in place; (4) input preserved is checked in every run_case */
FM_HARNESS_TEST void test_multi_axes_layouts(void)
{
    static const int rev3[3] = {2, 1, 0}, perm3[3] = {1, 2, 0}, rev2[2] = {1, 0}, rev4[4] = {3, 1, 0, 2};
    for (int dbl = 0; dbl < 2; dbl++)
        for (int kind = 0; kind < 3; kind++) {
            int64_t s3[3] = {6, 5, 8};
            int a02[2] = {0, 2}, a20[2] = {2, 0}, all3[3] = {0, 1, 2}, a1[1] = {1};
            fcase c = fc_base(dbl, kind, 3, s3, 2, a02);
            run_case(&c); /* axes (0,2) batched over 1 */
            c = fc_base(dbl, kind, 3, s3, 2, a20);
            run_case(&c); /* halved axis first in memory */
            c = fc_base(dbl, kind, 3, s3, 3, all3);
            c.norm = FM_FFT_NORM_ORTHO;
            run_case(&c);
            c = fc_base(dbl, kind, 3, s3, 0, NULL); /* default: all three */
            c.order_in = rev3, c.order_out = perm3; /* transposed views */
            run_case(&c);
            c = fc_base(dbl, kind, 3, s3, 1, a1);
            c.pad_in = 3, c.step_out = 2, c.neg_in = 0, c.neg_out = 2;
            run_case(&c);
            int64_t s2[2] = {9, 7};
            int b0[1] = {0};
            c = fc_base(dbl, kind, 2, s2, 1, b0); /* transform over the outer axis */
            c.order_in = rev2;
            run_case(&c);
            int64_t s4[4] = {3, 4, 5, 6};
            int a31[2] = {3, -3};
            c = fc_base(dbl, kind, 4, s4, 2, a31); /* axes (3, 1): the halved axis is 1 */
            c.order_out = rev4;
            c.norm = FM_FFT_NORM_FORWARD;
            run_case(&c);
            if (kind == FM_FFT_C2C) {
                c = fc_base(dbl, kind, 3, s3, 2, a02);
                c.inplace = 1;
                run_case(&c);
                c.order_in = rev3;
                c.inverse = 1;
                run_case(&c);
            }
        }
}

/* (5) fused chains against the chain applied by hand around the naive transform */
FM_HARNESS_TEST void test_chains(void)
{
    for (int dbl = 0; dbl < 2; dbl++)
        for (int kind = 0; kind < 3; kind++) {
            int64_t sh[3] = {5, 4, 24};
            int ax1[1] = {2}, ax2[2] = {1, 2};
            /* prolog window over the transform axis (real), epilog scale */
            fcase c = fc_base(dbl, kind, 3, sh, 1, ax1);
            c.pro_ops = FM_FFT_OP_MULTIPLY, c.pa_nd = 1, c.pa_shape[0] = kind == FM_FFT_C2R ? 13 : 24;
            c.epi_ops = FM_FFT_OP_SCALE, c.epi_scale = 0.5;
            run_case(&c);
            /* complex prolog array of full shape with complex scale and conj (c2c, c2r) */
            c = fc_base(dbl, kind, 3, sh, 1, ax1);
            c.pro_ops = FM_FFT_OP_MULTIPLY | (kind != FM_FFT_R2C ? FM_FFT_OP_SCALE | FM_FFT_OP_CONJ : FM_FFT_OP_SCALE);
            c.pro_scale = kind == FM_FFT_R2C ? 2.0 : CMPLX(0.5, -1.5);
            c.pa_nd = 3, memcpy(c.pa_shape, sh, sizeof sh), c.pa_cplx = kind != FM_FFT_R2C;
            if (kind == FM_FFT_C2R)
                c.pa_shape[2] = 13;
            c.threads = 2;
            run_case(&c);
            /* epilog: broadcast array over the batch axis (shape (5,1,1)), complex for complex output, + conj */
            c = fc_base(dbl, kind, 3, sh, 2, ax2);
            c.epi_ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ | FM_FFT_OP_SCALE;
            c.epi_scale = kind == FM_FFT_C2R ? -3.0 : CMPLX(0.25, 2.0);
            c.ea_nd = 3, c.ea_shape[0] = 5, c.ea_shape[1] = 1, c.ea_shape[2] = 1, c.ea_cplx = kind != FM_FFT_C2R;
            c.norm = FM_FFT_NORM_ORTHO;
            if (kind == FM_FFT_C2R)
                c.inverse = 1;
            run_case(&c);
            /* prolog and epilog together, strided views, scale alone in the prolog */
            static const int rev3[3] = {2, 1, 0};
            c = fc_base(dbl, kind, 3, sh, 1, ax1);
            c.pro_ops = FM_FFT_OP_SCALE | FM_FFT_OP_MULTIPLY, c.pro_scale = 3.0;
            c.pa_nd = 2, c.pa_shape[0] = 4, c.pa_shape[1] = kind == FM_FFT_C2R ? 13 : 24;
            c.epi_ops = FM_FFT_OP_MULTIPLY, c.ea_nd = 1, c.ea_shape[0] = kind == FM_FFT_R2C ? 13 : 24;
            c.ea_cplx = kind != FM_FFT_C2R;
            c.order_in = rev3, c.step_out = 3, c.neg_out = 1;
            run_case(&c);
            c = fc_base(dbl, kind, 3, sh, 1, ax1);
            c.pro_ops = FM_FFT_OP_SCALE, c.pro_scale = kind == FM_FFT_R2C ? -2.0 : CMPLX(0.0, 1.0);
            c.epi_ops = FM_FFT_OP_CONJ;
            run_case(&c);
            if (kind == FM_FFT_C2C) { /* in place with both chains */
                c = fc_base(dbl, kind, 3, sh, 2, ax2);
                c.inplace = 1;
                c.pro_ops = FM_FFT_OP_CONJ | FM_FFT_OP_MULTIPLY, c.pa_nd = 1, c.pa_shape[0] = 24;
                c.epi_ops = FM_FFT_OP_MULTIPLY, c.ea_nd = 2, c.ea_shape[0] = 4, c.ea_shape[1] = 24, c.ea_cplx = 1;
                run_case(&c);
            }
        }
    /* column transforms (the transform axis strided, the batch axis unit-stride): the chunk
     * moves through the scratch in tiles; arrays varying along the batch and broadcast over it */
    for (int dbl = 0; dbl < 2; dbl++)
        for (int kind = 0; kind < 3; kind++) {
            int64_t sh[2] = {24, 70};
            int ax0[1] = {0};
            fcase c = fc_base(dbl, kind, 2, sh, 1, ax0);
            c.pro_ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_SCALE, c.pro_scale = kind == FM_FFT_R2C ? 1.5 : CMPLX(0.5, 1.0);
            c.pa_nd = 2, c.pa_shape[0] = kind == FM_FFT_C2R ? 13 : 24, c.pa_shape[1] = 70;
            c.pa_cplx = kind != FM_FFT_R2C;
            c.epi_ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ, c.ea_nd = 2;
            c.ea_shape[0] = kind == FM_FFT_R2C ? 13 : 24, c.ea_shape[1] = 1, c.ea_cplx = kind != FM_FFT_C2R;
            c.threads = 2;
            run_case(&c);
            if (kind == FM_FFT_C2C) { /* in place, epilog only: FFTW on the columns, epilog across */
                c = fc_base(dbl, kind, 2, sh, 1, ax0);
                c.inplace = 1;
                c.epi_ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_SCALE, c.epi_scale = 0.75;
                c.ea_nd = 2, c.ea_shape[0] = 24, c.ea_shape[1] = 70, c.ea_cplx = 1;
                run_case(&c);
                int64_t longc[2] = {2048, 6}; /* plain columns above 1024 points */
                c = fc_base(dbl, kind, 2, longc, 1, ax0);
                run_case(&c);
            }
        }
    /* a batched chain large enough for several chunks and threads: against the unfused
     * library computation is implied by the naive reference; keep sizes modest */
    int64_t big[2] = {40, 256};
    int ax[1] = {1};
    fcase c = fc_base(1, FM_FFT_C2C, 2, big, 1, ax);
    c.pro_ops = FM_FFT_OP_MULTIPLY, c.pa_nd = 1, c.pa_shape[0] = 256;
    c.epi_ops = FM_FFT_OP_SCALE | FM_FFT_OP_CONJ, c.epi_scale = 0.125;
    c.threads = 4;
    run_case(&c);
}

/* chunked (fused) vs. direct on a larger batched problem: the library's own unfused
 * transform with the chain applied by hand */
FM_HARNESS_TEST void test_chain_vs_unfused(void)
{
    const int64_t B = 300, N = 1024; /* 300 x 16 KiB: many chunks */
    int64_t sh[2] = {B, N};
    tbuf bi, bo, bo2, bw;
    tb_make(&bi, FM_C64, 2, sh, NULL, 0, 1, -1);
    tb_make(&bo, FM_C64, 2, sh, NULL, 0, 1, -1);
    tb_make(&bo2, FM_C64, 2, sh, NULL, 0, 1, -1);
    tb_make(&bw, FM_F32, 1, &N, NULL, 0, 1, -1);
    float *in = bi.t.data, *w = bw.t.data;
    for (int64_t i = 0; i < 2 * B * N; i++)
        in[i] = (float)rng_uniform(&g_rng);
    for (int64_t i = 0; i < N; i++)
        w[i] = (float)(0.5 - 0.5 * cos(2 * TEST_PI * (double)i / (double)N));
    fm_fft_options o;
    test_opts_init(&o);
    o.prolog.ops = FM_FFT_OP_MULTIPLY;
    o.epilog.ops = FM_FFT_OP_SCALE | FM_FFT_OP_CONJ;
    o.epilog.scale[0] = 2.0, o.epilog.scale[1] = -1.0;
    o.num_threads = 2;
    o.naxes = 1, o.axes[0] = 1;
    fm_plan *plan = NULL;
    CHECK_OK(fm_fft_plan(g_ctx, &bi.t, &bo.t, &bw.t, NULL, &o, &plan));
    if (plan) {
        printf("    %s\n", fm_plan_describe(plan));
        void *ptrs[4] = {bi.t.data, bo.t.data, bw.t.data, NULL};
        CHECK_OK(fm_plan_execute(plan, ptrs, 4, NULL));
        fm_plan_release(plan);
    }
    /* unfused: window by hand, plain transform, scale + conj by hand */
    float *tmp = malloc(sizeof(float) * 2 * (size_t)(B * N));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < N; i++)
            for (int k = 0; k < 2; k++)
                tmp[2 * (b * N + i) + k] = in[2 * (b * N + i) + k] * w[i];
    tbuf bt = bi;
    bt.t.data = tmp;
    test_opts_init(&o);
    o.naxes = 1, o.axes[0] = 1;
    CHECK_OK(fm_fft(g_ctx, &bt.t, &bo2.t, NULL, NULL, &o, NULL));
    const float *f = bo.t.data, *u = bo2.t.data;
    double e = 0, m = 0;
    for (int64_t i = 0; i < B * N; i++) {
        double complex ref = conj(CMPLX(u[2 * i], u[2 * i + 1]) * CMPLX(2.0, -1.0));
        double d = cabs(CMPLX(f[2 * i], f[2 * i + 1]) - ref);
        e = d > e ? d : e;
        m = cabs(ref) > m ? cabs(ref) : m;
    }
    CHECK_MSG(e / m < 1e-6, "fused vs unfused: %.3g", e / m);
    free(tmp);
    tb_free(&bi), tb_free(&bo), tb_free(&bo2), tb_free(&bw);
}

/* (6) one plan, several threads, different arrays */
typedef struct {
    const fm_plan *plan;
    const fm_tensor *in, *out;
    const fm_tensor *win;
    int rc;
} thr_arg;
static void *thr_main(void *v)
{
    thr_arg *a = v;
    void *ptrs[4] = {a->in->data, a->out->data, a->win ? a->win->data : NULL, NULL};
    for (int r = 0; r < 20 && a->rc == 0; r++)
        if (fm_plan_execute(a->plan, ptrs, 4, NULL) != FM_OK)
            a->rc = 1;
    return NULL;
}
FM_HARNESS_TEST void test_concurrent(void)
{
    enum { T = 4 };
    for (int chained = 0; chained < 2; chained++) {
        int64_t sh[2] = {16, 500};
        int64_t n = 500;
        tbuf bi[T], bo[T], bw;
        tb_make(&bw, FM_F64, 1, &n, NULL, 0, 1, -1);
        for (int64_t i = 0; i < n; i++)
            ((double *)bw.t.data)[i] = 1.0 + 0.001 * (double)i;
        for (int t = 0; t < T; t++) {
            tb_make(&bi[t], FM_C128, 2, sh, NULL, 0, 1, -1);
            tb_make(&bo[t], FM_C128, 2, sh, NULL, 0, 1, -1);
            for (int64_t i = 0; i < 2 * 16 * 500; i++)
                ((double *)bi[t].t.data)[i] = rng_uniform(&g_rng);
        }
        fm_fft_options o;
        test_opts_init(&o);
        o.inverse = 1;
        if (chained)
            o.prolog.ops = FM_FFT_OP_MULTIPLY;
        fm_plan *plan = NULL;
        CHECK_OK(fm_fft_plan(g_ctx, &bi[0].t, &bo[0].t, chained ? &bw.t : NULL, NULL, &o, &plan));
        if (!plan)
            return;
        pthread_t th[T];
        thr_arg args[T];
        for (int t = 0; t < T; t++) {
            args[t] = (thr_arg){plan, &bi[t].t, &bo[t].t, chained ? &bw.t : NULL, 0};
            pthread_create(&th[t], NULL, thr_main, &args[t]);
        }
        for (int t = 0; t < T; t++) {
            pthread_join(th[t], NULL);
            CHECK_MSG(args[t].rc == 0, "thread %d failed", t);
        }
        /* each against a single-threaded execution of the same plan */
        for (int t = 0; t < T; t++) {
            tbuf chk;
            tb_make(&chk, FM_C128, 2, sh, NULL, 0, 1, -1);
            void *ptrs[4] = {bi[t].t.data, chk.t.data, chained ? bw.t.data : NULL, NULL};
            CHECK_OK(fm_plan_execute(plan, ptrs, 4, NULL));
            CHECK_MSG(memcmp(chk.t.data, bo[t].t.data, sizeof(double) * 2 * 16 * 500) == 0,
                      "thread %d result differs", t);
            tb_free(&chk);
        }
        fm_plan_release(plan);
        for (int t = 0; t < T; t++)
            tb_free(&bi[t]), tb_free(&bo[t]);
        tb_free(&bw);
    }
}

#endif
