/* test_fft_many_axes.c : FFT over more than 3 axes, which core plans as successive transforms
 * of at most 3 axes (core/src/fft_axis_split.c, fm_fft_plan_steps), on the cpu: c2c, r2c and
 * c2r over 4 to 8 axes against a naive DFT in double precision, with batch axes, unsorted and
 * negative axes, in place, a strided out, the chains (prolog on the first step, epilog and the
 * norm on the last), the result equal to a 3 + 1 axis composition of library calls, and the
 * checks (naxes up to ndim, output specs). */
#include "check.h"
#include "fft_ref.h"

#include <float.h>
#include <math.h>
#include <stdio.h>


static fm_context *g_ctx;
static test_rng g_rng = {0x243F6A8885A308D3ULL};

static double max_rel_err(const double complex *got, const double complex *ref, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = cabs(got[i] - ref[i]);
        e = d > e || isnan(d) ? d : e;
        m = cabs(ref[i]) > m ? cabs(ref[i]) : m;
    }
    return e / (m > 0 ? m : 1);
}

typedef struct {
    void *mem;
    fm_tensor t;
} buf;

/* C order, or with order[] giving the axes from outermost to innermost in memory */
static void buf_make(buf *b, fm_dtype dt, int nd, const int64_t *shape, const int *order)
{
    int64_t strides[FM_MAX_NDIM], s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int a = order ? order[i] : i;
        strides[a] = s;
        s *= shape[a];
    }
    b->mem = calloc((size_t)s + 1, fm_dtype_size(dt));
    fm_tensor_init(&b->t, b->mem, fm_test_cpu, dt, nd, shape, strides);
}

typedef struct {
    int dbl, kind, inverse, norm, nd, naxes;
    int64_t shape[FM_MAX_NDIM]; /* logical lengths (n on the halved axis) */
    int axes[FM_MAX_NDIM];      /* as passed */
    int inplace;
    const int *out_order;       /* NULL: C order */
    int pro, epi;               /* chains: prolog scale * array (broadcast over the last axis), epilog array + conj */
    int steps;                  /* the describe() names this many steps */
} mcase;

static void run_case(const mcase *c)
{
    char label[200];
    int o = snprintf(label, sizeof label, "%s kind=%d inv=%d norm=%d nd=%d axes=", c->dbl ? "f64" : "f32", c->kind,
                     c->inverse, c->norm, c->nd);
    for (int i = 0; i < c->naxes; i++)
        o += snprintf(label + o, sizeof label - (size_t)o, "%d,", c->axes[i]);
    snprintf(label + o, sizeof label - (size_t)o, " inplace=%d pro=%d epi=%d", c->inplace, c->pro, c->epi);
    const fm_dtype cdt = c->dbl ? FM_C128 : FM_C64, rdt = c->dbl ? FM_F64 : FM_F32;
    const fm_dtype idt = c->kind == FM_FFT_R2C ? rdt : cdt, odt = c->kind == FM_FFT_C2R ? rdt : cdt;
    int axes[FM_MAX_NDIM] = {0};
    for (int i = 0; i < c->naxes; i++)
        axes[i] = c->axes[i] < 0 ? c->axes[i] + c->nd : c->axes[i];
    const int half = axes[c->naxes - 1];
    int64_t full[FM_MAX_NDIM], in_sh[FM_MAX_NDIM], out_sh[FM_MAX_NDIM];
    memcpy(full, c->shape, sizeof full);
    memcpy(in_sh, c->shape, sizeof in_sh);
    memcpy(out_sh, c->shape, sizeof out_sh);
    if (c->kind == FM_FFT_R2C)
        out_sh[half] = c->shape[half] / 2 + 1;
    if (c->kind == FM_FFT_C2R)
        in_sh[half] = c->shape[half] / 2 + 1;
    const int64_t nfull = numel(c->nd, full), nin = numel(c->nd, in_sh), nout = numel(c->nd, out_sh);
    double total = 1;
    for (int i = 0; i < c->naxes; i++)
        total *= (double)c->shape[axes[i]];
    const int sign = c->inverse ? 1 : -1;

    /* x: the input; ref: the expected output, both in C order */
    double complex *x = calloc((size_t)nfull, sizeof *x), *ref = calloc((size_t)nfull, sizeof *ref);
    double complex *w = calloc((size_t)nfull, sizeof *w), *got = calloc((size_t)nfull, sizeof *got);
    if (c->kind == FM_FFT_C2R) { /* a Hermitian input: the r2c of a real array r, whose transform back is n * r */
        for (int64_t i = 0; i < nfull; i++)
            w[i] = rng_uniform(&g_rng);
        memcpy(ref, w, sizeof *w * (size_t)nfull);
        for (int i = 0; i < c->naxes; i++)
            dft_axis(w, c->nd, full, axes[i], -1);
        crop(c->nd, full, in_sh, w, x);
        for (int64_t i = 0; i < nfull; i++)
            ref[i] *= total;
    } else {
        for (int64_t i = 0; i < nin; i++)
            x[i] = CMPLX(rng_uniform(&g_rng), idt == cdt ? rng_uniform(&g_rng) : 0.0);
    }
    /* the prolog: x * 0.5 * pa[last axis] (c2r: x * 0.5); the epilog: conj(y * ea[last axis]),
     * ea real for c2r (real output) */
    const int64_t pa_n = in_sh[c->nd - 1], ea_n = out_sh[c->nd - 1];
    const int real_out = c->kind == FM_FFT_C2R;
    buf pa, ea;
    buf_make(&pa, rdt, 1, &pa_n, NULL);
    buf_make(&ea, real_out ? rdt : cdt, 1, &ea_n, NULL);
    for (int64_t i = 0; i < pa_n; i++)
        elem_set(pa.mem, rdt, i, 1.0 + 0.25 * (double)i);
    for (int64_t i = 0; i < ea_n; i++)
        elem_set(ea.mem, ea.t.dtype, i, CMPLX(0.5 + (real_out ? 0.125 * (double)i : 0), real_out ? 0 : 0.125 * (double)i));

    buf bi, bo;
    buf_make(&bi, idt, c->nd, in_sh, NULL);
    t_store(&bi.t, x);
    t_load(&bi.t, x); /* the rounded values */
    if (c->inplace)
        bo = bi;
    else
        buf_make(&bo, odt, c->nd, out_sh, c->out_order);
    if (c->kind != FM_FFT_C2R) {
        for (int64_t i = 0; i < nin; i++)
            w[i] = c->pro ? x[i] * 0.5 * (1.0 + 0.25 * (double)(i % pa_n)) : x[i];
        for (int i = 0; i < c->naxes; i++)
            dft_axis(w, c->nd, in_sh, axes[i], sign);
        crop(c->nd, in_sh, out_sh, w, ref);
    } else if (c->pro) { /* the prolog scales the Hermitian input: only a real scale keeps it one */
        for (int64_t i = 0; i < nout; i++)
            ref[i] *= 0.5;
    }
    const double nf = norm_factor(c->norm, c->inverse, total);
    for (int64_t i = 0; i < nout; i++) {
        double complex v = ref[i] * nf;
        if (c->epi && real_out)
            v = v * (0.5 + 0.125 * (double)(i % ea_n));
        else if (c->epi)
            v = conj(v * CMPLX(0.5, 0.125 * (double)(i % ea_n)));
        ref[i] = real_out ? creal(v) : v;
    }

    fm_fft_options opts;
    fm_fft_options_init(&opts);
    opts.kind = c->kind, opts.inverse = c->inverse, opts.norm = c->norm, opts.naxes = c->naxes;
    for (int i = 0; i < c->naxes; i++)
        opts.axes[i] = c->axes[i];
    if (c->pro && c->kind == FM_FFT_C2R)
        opts.prolog.ops = FM_FFT_OP_SCALE, opts.prolog.scale[0] = 0.5;
    else if (c->pro)
        opts.prolog.ops = FM_FFT_OP_SCALE | FM_FFT_OP_MULTIPLY, opts.prolog.scale[0] = 0.5;
    if (c->epi)
        opts.epilog.ops = FM_FFT_OP_MULTIPLY | (real_out ? 0u : (unsigned)FM_FFT_OP_CONJ);
    const fm_tensor *pat = (opts.prolog.ops & FM_FFT_OP_MULTIPLY) ? &pa.t : NULL;
    const fm_tensor *eat = (opts.epilog.ops & FM_FFT_OP_MULTIPLY) ? &ea.t : NULL;
    fm_plan *plan = NULL;
    fm_status s = fm_fft_plan(g_ctx, &bi.t, &bo.t, pat, eat, &opts, &plan);
    CHECK_MSG(s == FM_OK, "%s: plan -> %s (%s)", label, fm_status_name(s), fm_last_error());
    if (s == FM_OK) {
        char want[48];
        snprintf(want, sizeof want, "fft over %d axes in %d steps", c->naxes, c->steps);
        CHECK_MSG(fm_test_contains(fm_plan_describe(plan), want), "%s: describe '%s', expected '%s'", label,
                  fm_plan_describe(plan), want);
        CHECK_MSG(strcmp(fm_plan_backend(plan), "fftw") == 0, "%s: backend '%s'", label, fm_plan_backend(plan));
        void *ptrs[FM_FFT_NSLOTS] = {bi.t.data, bo.t.data, pat ? pat->data : NULL, eat ? eat->data : NULL};
        s = fm_plan_execute(plan, ptrs, FM_FFT_NSLOTS, NULL);
        CHECK_MSG(s == FM_OK, "%s: execute -> %s (%s)", label, fm_status_name(s), fm_last_error());
        t_load(&bo.t, got);
        if (c->kind == FM_FFT_C2R && !c->inplace) { /* the input is left as it was */
            double complex *back = calloc((size_t)nin, sizeof *back);
            t_load(&bi.t, back);
            CHECK_MSG(max_rel_err(back, x, nin) == 0, "%s: c2r changed its input", label);
            free(back);
        }
        double err = max_rel_err(got, ref, nout);
        double tol = 16.0 * (c->dbl ? DBL_EPSILON : FLT_EPSILON) * (log2(total + 1) + 2);
        CHECK_MSG(err <= tol, "%s: rel err %.3g > %.3g", label, err, tol);
        fm_plan_release(plan);
    }
    free(bi.mem);
    if (!c->inplace)
        free(bo.mem);
    free(pa.mem), free(ea.mem);
    free(x), free(ref), free(w), free(got);
}

static mcase mc(int kind, int nd, const int64_t *shape, int naxes, const int *axes, int steps)
{
    mcase c;
    memset(&c, 0, sizeof c);
    c.kind = kind, c.inverse = kind == FM_FFT_C2R, c.nd = nd, c.naxes = naxes, c.steps = steps, c.dbl = 1;
    memcpy(c.shape, shape, sizeof(int64_t) * (size_t)nd);
    memcpy(c.axes, axes, sizeof(int) * (size_t)naxes);
    return c;
}

static void test_vs_naive(void)
{
    const int64_t s4[4] = {3, 4, 2, 5}, s5[5] = {2, 3, 2, 4, 3}, s8[8] = {2, 3, 2, 2, 3, 2, 2, 4};
    const int a4[4] = {0, 1, 2, 3}, a4u[4] = {3, -4, 2, 1}, a5b[4] = {4, 0, 1, 3}, a8[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const int a7[7] = {0, 2, 3, 4, 5, 6, 1};
    for (int kind = 0; kind < 3; kind++)
        for (int dbl = 0; dbl < 2; dbl++)
            for (int norm = 0; norm < 3; norm++) {
                mcase c = mc(kind, 4, s4, 4, a4, 2);
                c.dbl = dbl, c.norm = norm;
                run_case(&c);
                c = mc(kind, 4, s4, 4, a4u, 2); /* unsorted, negative: the halved axis is 1 */
                c.dbl = dbl, c.norm = norm;
                run_case(&c);
            }
    for (int kind = 0; kind < 3; kind++) {
        mcase c = mc(kind, 5, s5, 4, a5b, 2); /* axis 2 is a batch axis */
        run_case(&c);
        c = mc(kind, 8, s8, 8, a8, 3);
        c.norm = FM_FFT_NORM_ORTHO;
        run_case(&c);
        c = mc(kind, 8, s8, 7, a7, 3); /* axis 7 a batch axis, axis 1 halved */
        c.inverse = kind == FM_FFT_C2R || kind == FM_FFT_C2C;
        run_case(&c);
    }
}

static void test_layouts_and_chains(void)
{
    const int64_t s4[4] = {4, 3, 2, 6}, s6[6] = {2, 3, 2, 2, 2, 4};
    const int a4[4] = {0, 1, 2, 3}, a6[6] = {5, 4, 3, 2, 1, 0};
    const int rev4[4] = {3, 2, 1, 0}, rev6[6] = {5, 4, 3, 2, 1, 0};
    for (int kind = 0; kind < 3; kind++)
        for (int chains = 1; chains < 4; chains++) {
            mcase c = mc(kind, 4, s4, 4, a4, 2);
            c.pro = chains & 1, c.epi = (chains >> 1) & 1, c.norm = FM_FFT_NORM_FORWARD;
            run_case(&c);
            c.out_order = rev4; /* out transposed */
            run_case(&c);
            c = mc(kind, 6, s6, 6, a6, 2);
            c.pro = chains & 1, c.epi = (chains >> 1) & 1, c.inverse = kind != FM_FFT_R2C;
            c.out_order = rev6;
            run_case(&c);
        }
    mcase c = mc(FM_FFT_C2C, 4, s4, 4, a4, 2);
    c.inplace = 1, c.pro = c.epi = 1;
    run_case(&c);
    c = mc(FM_FFT_C2C, 6, s6, 6, a6, 2);
    c.inplace = 1, c.inverse = 1, c.norm = FM_FFT_NORM_ORTHO;
    run_case(&c);
}

/* A 4-axis transform equals the 3-axis one over the last three axes followed by the 1-axis
 * one over the first (two library calls), to rounding. */
static void test_vs_composition(void)
{
    const int64_t sh[5] = {6, 5, 4, 8, 2};
    buf x, y4, y3, y1;
    buf_make(&x, FM_C64, 5, sh, NULL);
    buf_make(&y4, FM_C64, 5, sh, NULL);
    buf_make(&y3, FM_C64, 5, sh, NULL);
    buf_make(&y1, FM_C64, 5, sh, NULL);
    const int64_t n = numel(5, sh);
    for (int64_t i = 0; i < n; i++)
        elem_set(x.mem, FM_C64, i, CMPLX(rng_uniform(&g_rng), rng_uniform(&g_rng)));
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 4, o.axes[0] = 0, o.axes[1] = 1, o.axes[2] = 2, o.axes[3] = 3;
    CHECK_OK(fm_fft(g_ctx, &x.t, &y4.t, NULL, NULL, &o, NULL));
    o.naxes = 3, o.axes[0] = 1, o.axes[1] = 2, o.axes[2] = 3;
    CHECK_OK(fm_fft(g_ctx, &x.t, &y3.t, NULL, NULL, &o, NULL));
    o.naxes = 1, o.axes[0] = 0;
    CHECK_OK(fm_fft(g_ctx, &y3.t, &y1.t, NULL, NULL, &o, NULL));
    double complex *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    t_load(&y4.t, a);
    t_load(&y1.t, b);
    double err = max_rel_err(a, b, n);
    CHECK_MSG(err < 1e-5, "4 axes vs 3 + 1: rel err %.3g", err);
    free(a), free(b);
    free(x.mem), free(y4.mem), free(y3.mem), free(y1.mem);
}

static void test_checks_and_specs(void)
{
    const int64_t sh[4] = {2, 3, 4, 6};
    buf x, y;
    buf_make(&x, FM_F32, 4, sh, NULL);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.kind = FM_FFT_R2C, o.naxes = 4, o.axes[0] = 3, o.axes[1] = 0, o.axes[2] = 1, o.axes[3] = 2;
    /* the output specs halve the last axis given */
    const fm_tensor *ts[FM_FFT_NSLOTS] = {&x.t, NULL, NULL, NULL};
    fm_tensor specs[FM_FFT_NSLOTS];
    uint32_t written = 0;
    CHECK_OK(fm_output_specs(FM_OP_FFT, ts, FM_FFT_NSLOTS, &o, specs, &written));
    CHECK(written == 1u << FM_FFT_OUT && specs[FM_FFT_OUT].dtype == FM_C64 && specs[FM_FFT_OUT].shape[2] == 3 &&
          specs[FM_FFT_OUT].shape[3] == 6 && specs[FM_FFT_OUT].shape[0] == 2);
    const int64_t osh[4] = {2, 3, 3, 6};
    buf_make(&y, FM_C64, 4, osh, NULL);
    fm_plan *p = NULL;
    CHECK_OK(fm_fft_plan(g_ctx, &x.t, &y.t, NULL, NULL, &o, &p));
    fm_plan_release(p), p = NULL;
    o.naxes = 5; /* more axes than dimensions */
    CHECK_STATUS(fm_fft_plan(g_ctx, &x.t, &y.t, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("naxes");
    o.naxes = 4, o.axes[3] = 3; /* repeated */
    CHECK_STATUS(fm_fft_plan(g_ctx, &x.t, &y.t, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("repeated");
    o.axes[3] = 2, o.prolog.ops = FM_FFT_OP_CALLBACK, o.prolog.source = "__device__ float f(float x, unsigned "
                                                                        "long long o, const void *d) { return x; }";
    o.prolog.symbol = "f"; /* a callback on the cpu */
    CHECK_STATUS(fm_fft_plan(g_ctx, &x.t, &y.t, NULL, NULL, &o, &p), FM_ERR_NOT_SUPPORTED);
    CHECK(p == NULL);
    free(x.mem), free(y.mem);
}

/* The same 4-axis problem planned twice is one cached plan; its steps are cached as well. */
static void test_cached(void)
{
    const int64_t sh[4] = {2, 2, 4, 4};
    buf x;
    buf_make(&x, FM_C128, 4, sh, NULL);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 4, o.axes[0] = 0, o.axes[1] = 1, o.axes[2] = 2, o.axes[3] = 3;
    fm_context_clear_cache(g_ctx);
    fm_plan *a = NULL, *b = NULL;
    CHECK_OK(fm_fft_plan(g_ctx, &x.t, &x.t, NULL, NULL, &o, &a));
    int n = fm_context_cache_size(g_ctx);
    CHECK_MSG(n == 3, "cache holds %d plans after one 4-axis plan, expected 3 (it and its two steps)", n);
    CHECK_OK(fm_fft_plan(g_ctx, &x.t, &x.t, NULL, NULL, &o, &b));
    CHECK(a == b && fm_context_cache_size(g_ctx) == n);
    fm_plan_release(a), fm_plan_release(b);
    free(x.mem);
}

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "no context: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_vs_naive);
    RUN_TEST(test_layouts_and_chains);
    RUN_TEST(test_vs_composition);
    RUN_TEST(test_checks_and_specs);
    RUN_TEST(test_cached);
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
