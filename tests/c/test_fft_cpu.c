/* test_fft_cpu.c : the FFTW backend through the shared FFT checks (fft_harness.h), plus what is
 * FFTW's own: misaligned pointers and chunking, concurrent planning (FFTW's planner is not
 * thread-safe), planning effort, the timed choice between FFTW's batch plan and chunks through
 * the scratch and between a prolog through the scratch or into out (FUSEMATH_FFT_CPU_PATH), those
 * choices in the context's wisdom, bad inputs through fm_fft_plan, empty transforms. */
#define _DEFAULT_SOURCE
#include "fft_harness.h"
#include "cpu/fftw_impl.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* pointers whose SIMD alignment differs from planning (direct and out-direct plans fall
 * back to the scratch path), and many chunks with a remainder on both paths */
static void test_misaligned_and_chunks(void)
{
    for (int dbl = 0; dbl < 2; dbl++)
        for (int kind = 0; kind < 3; kind++)
            for (int chain = 0; chain < 2; chain++)
                for (int sh = 0; sh < 3; sh++) {
                    int64_t shape[2] = {6, 40};
                    int ax[1] = {1};
                    fcase c = fc_base(dbl, kind, 2, shape, 1, ax);
                    int64_t q = dbl ? 8 : 4;
                    c.shift_in = sh & 1 ? q : 0, c.shift_out = sh & 2 ? q : 0;
                    if (sh == 0)
                        c.shift_in = c.shift_out = q; /* both shifted alike */
                    if (chain)
                        c.epi_ops = FM_FFT_OP_SCALE | (kind == FM_FFT_C2R ? 0u : FM_FFT_OP_CONJ), c.epi_scale = 0.5;
                    run_case(&c);
                }
    for (int dbl = 0; dbl < 2; dbl++)
        for (int kind = 0; kind < 3; kind++) {
            int64_t shape[3] = {30, 10, 256};
            int ax[1] = {2};
            fcase c = fc_base(dbl, kind, 3, shape, 1, ax); /* two batch axes: scratch path */
            c.epi_ops = FM_FFT_OP_SCALE, c.epi_scale = 2.0;
            c.threads = 2;
            run_case(&c);
            int64_t shape2[2] = {300, 256};
            c = fc_base(dbl, kind, 2, shape2, 1, ax); /* one batch axis: out-direct path */
            c.axes[0] = 1;
            c.pro_ops = FM_FFT_OP_MULTIPLY, c.pa_nd = 1, c.pa_shape[0] = kind == FM_FFT_C2R ? 129 : 256;
            c.threads = 2;
            run_case(&c);
        }
}

/* several threads planning (FFTW's planner is serialised inside the backend) and executing */
static void *plan_thr_main(void *v)
{
    int t = (int)(intptr_t)v, bad = 0;
    for (int r = 0; r < 6; r++) {
        int64_t n = 60 + 7 * t + r, sh[2] = {3, n};
        tbuf bi, bo;
        tb_make(&bi, FM_C128, 2, sh, NULL, 0, 1, -1);
        tb_make(&bo, FM_C128, 2, sh, NULL, 0, 1, -1);
        double *in = bi.t.data, *out = bo.t.data;
        memset(in, 0, sizeof(double) * 2 * (size_t)(3 * n));
        for (int b = 0; b < 3; b++)
            in[2 * (b * n + b + 1)] = 1.0; /* impulse at b + 1 */
        fm_fft_options o;
        test_opts_init(&o);
        o.naxes = 1, o.axes[0] = 1, o.effort = r & 1 ? FM_FFT_EFFORT_MEASURE : FM_FFT_EFFORT_ESTIMATE;
        if (fm_fft(g_ctx, &bi.t, &bo.t, NULL, NULL, &o, NULL) != FM_OK)
            bad++;
        for (int b = 0; b < 3; b++)
            for (int64_t k = 0; k < n; k++) {
                double complex w = cexp(-2 * TEST_PI * I * (double)(((b + 1) * k) % n) / (double)n);
                if (cabs(CMPLX(out[2 * (b * n + k)], out[2 * (b * n + k) + 1]) - w) > 1e-12)
                    bad++;
            }
        tb_free(&bi), tb_free(&bo);
    }
    return (void *)(intptr_t)bad;
}
static void test_concurrent_planning(void)
{
    enum { T = 4 };
    pthread_t th[T];
    for (int t = 0; t < T; t++)
        pthread_create(&th[t], NULL, plan_thr_main, (void *)(intptr_t)t);
    for (int t = 0; t < T; t++) {
        void *r = NULL;
        pthread_join(th[t], &r);
        CHECK_MSG(r == NULL, "thread %d: %d bad values or failures", t, (int)(intptr_t)r);
    }
}

/* effort = measure plans on scratch and gives the same answer */
static void test_effort(void)
{
    int64_t sh[2] = {4, 64};
    int ax[1] = {1};
    for (int kind = 0; kind < 3; kind++) {
        fcase c = fc_base(0, kind, 2, sh, 1, ax);
        c.effort = FM_FFT_EFFORT_MEASURE;
        run_case(&c);
    }
}

/* A fresh context with FUSEMATH_FFT_CPU_PATH set to mode, or unset (NULL): the context reads it
 * at its creation (and plans are cached by problem). 0 when no context could be made. */
static int fresh_context_with_path(const char *mode)
{
    if (mode)
        setenv("FUSEMATH_FFT_CPU_PATH", mode, 1);
    else
        unsetenv("FUSEMATH_FFT_CPU_PATH");
    if (fm_context_create(&g_ctx) != FM_OK) {
        CHECK(0);
        return 0;
    }
    return 1;
}

/* A plain batch of dense rows runs FFTW over the whole batch (direct) or in chunks through the
 * scratch, a plain 2-D/3-D transform FFTW's own N-D plan or the split: both forced (a fresh
 * context each, plans are cached), each checked against the naive DFT (a chunk remainder, c2c
 * and r2c, single and double); measure times the two ("timed"); a bad FUSEMATH_FFT_CPU_PATH
 * is an error naming it. */
/* Plan a transform of a 2-D array over its last axis (naxes 1) or both, with (prolog 1) or
 * without a prolog x * 0.5 * w (w complex, over the last axis), execute it once on zeroed
 * arrays; describe() (or the error) in buf, the path the execute took in *ran. */
static const char *plan_describe_chain(int dbl, int kind, const int64_t sh[2], int naxes, int effort, int prolog,
                                       fm_status *st, int *ran, char *buf, size_t size)
{
    int64_t osh[2] = {sh[0], kind == FM_FFT_R2C ? sh[1] / 2 + 1 : sh[1]};
    const size_t rs = dbl ? sizeof(double) : sizeof(float);
    void *in = calloc((size_t)(sh[0] * sh[1]) * 2, rs), *out = calloc((size_t)(osh[0] * osh[1]) * 2, rs);
    void *w = calloc((size_t)sh[1] * 2, rs);
    fm_tensor a, b, pa;
    fm_tensor_init(&a, in, fm_test_cpu, kind == FM_FFT_R2C ? (dbl ? FM_F64 : FM_F32) : (dbl ? FM_C128 : FM_C64), 2,
                   sh, NULL);
    fm_tensor_init(&b, out, fm_test_cpu, dbl ? FM_C128 : FM_C64, 2, osh, NULL);
    fm_tensor_init(&pa, w, fm_test_cpu, dbl ? FM_C128 : FM_C64, 1, sh + 1, NULL);
    fm_fft_options o;
    test_opts_init(&o);
    o.kind = kind, o.naxes = naxes, o.axes[0] = naxes == 1 ? 1 : 0, o.axes[1] = 1, o.effort = effort, o.num_threads = 2;
    if (prolog)
        o.prolog.ops = FM_FFT_OP_SCALE | FM_FFT_OP_MULTIPLY, o.prolog.scale[0] = 0.5;
    fm_plan *p = NULL;
    *st = in && out && w ? fm_fft_plan(g_ctx, &a, &b, prolog ? &pa : NULL, NULL, &o, &p) : FM_ERR_OUT_OF_MEMORY;
    snprintf(buf, size, "%s", p ? fm_plan_describe(p) : fm_last_error());
    *ran = -1;
    void *ptrs[4] = {in, out, prolog ? w : NULL, NULL};
    if (p && fm_plan_execute(p, ptrs, 4, NULL) == FM_OK)
        *ran = fm_fftw_last_path();
    fm_plan_release(p);
    free(in), free(out), free(w);
    return buf;
}

static const char *plan_describe_2d(int dbl, int kind, const int64_t sh[2], int naxes, int effort, fm_status *st,
                                    int *ran, char *buf, size_t size)
{
    return plan_describe_chain(dbl, kind, sh, naxes, effort, 0, st, ran, buf, size);
}

static void test_direct_or_chunks(void)
{
    fm_context *saved = g_ctx;
    const char *modes[3] = {"chunks", "direct", NULL};
    const char *want[3] = {"path=scratch>out", "path=direct", ",timed"};
    const char *want_nd[3] = {"fft split into", "path=direct", "timed"};
    char buf[512];
    for (int m = 0; m < 3; m++) {
        if (!fresh_context_with_path(modes[m]))
            break;
        const int effort = modes[m] ? FM_FFT_EFFORT_ESTIMATE : FM_FFT_EFFORT_MEASURE;
        for (int dbl = 0; dbl < 2; dbl++)
            for (int kind = 0; kind < 2; kind++) { /* c2c, r2c */
                int64_t shape[2] = {150, 512};     /* c64: chunks of 32, a remainder of 22 */
                int ax[1] = {1};
                fm_status st;
                int ran;
                const char *d = plan_describe_2d(dbl, kind, shape, 1, effort, &st, &ran, buf, sizeof buf);
                CHECK_MSG(st == FM_OK && fm_test_contains(d, want[m]), "mode %s: %s", modes[m] ? modes[m] : "timed", d);
                /* the execute took the path describe() names */
                const int chunks = fm_test_contains(d, "path=scratch>out");
                CHECK_MSG(ran == (chunks ? FM_FFTW_RAN_CHUNKS : FM_FFTW_RAN_DIRECT), "ran path %d: %s", ran, d);
                fcase c = fc_base(dbl, kind, 2, shape, 1, ax);
                c.threads = 2, c.effort = effort;
                run_case(&c);
                int64_t s2[2] = {96, 160}, s3[3] = {12, 20, 24};
                int a2[2] = {0, 1}, a3[3] = {0, 1, 2};
                for (int nd = 2; nd <= 3; nd++) {
                    fcase e = fc_base(dbl, kind, nd, nd == 2 ? s2 : s3, nd, nd == 2 ? a2 : a3);
                    e.threads = 2, e.effort = effort;
                    run_case(&e);
                }
                const char *dn = plan_describe_2d(dbl, kind, s2, 2, effort, &st, &ran, buf, sizeof buf);
                CHECK_MSG(st == FM_OK && fm_test_contains(dn, want_nd[m]), "2-D, mode %s: %s",
                          modes[m] ? modes[m] : "timed", dn);
                /* FFTW's 2-D plan, or the split ending in the column step */
                const int split = fm_test_contains(dn, "split");
                CHECK_MSG(split ? ran != FM_FFTW_RAN_DIRECT && ran > 0 : ran == FM_FFTW_RAN_DIRECT, "ran path %d: %s",
                          ran, dn);
            }
        fm_context_destroy(g_ctx);
    }
    /* a bad value: the context is made, planning an FFT on the cpu fails naming the variable */
    if (fresh_context_with_path("sideways")) {
        int64_t shape[2] = {150, 520};
        fm_status st;
        int ran;
        const char *d = plan_describe_2d(0, FM_FFT_C2C, shape, 1, FM_FFT_EFFORT_ESTIMATE, &st, &ran, buf, sizeof buf);
        CHECK_MSG(st == FM_ERR_INVALID_ARGUMENT && fm_test_contains(d, "FUSEMATH_FFT_CPU_PATH") &&
                      fm_test_contains(d, "'direct', 'chunks' or 'inplace'"),
                  "bad FUSEMATH_FFT_CPU_PATH: status %d, %s", (int)st, d);
        fm_context_destroy(g_ctx);
    }
    g_ctx = saved;
    unsetenv("FUSEMATH_FFT_CPU_PATH");
}

/* Transforms of 2^17 points gathered into out (one transform: FFTW's threads and threaded
 * chain passes; three: one per thread) against the shift theorem: a prolog phase ramp
 * exp(2 pi i j s / n) shifts the spectrum by s, fft(x * ramp)[k] = fft(x)[k - s]. */
static void prolog_into_out_large(void)
{
    fm_context *saved = g_ctx;
    const int64_t n = (int64_t)1 << 17, shift = 5;
    for (int64_t batch = 1; batch <= 3; batch += 2) {
        if (!fresh_context_with_path("inplace"))
            break;
        int64_t sh[2] = {batch, n};
        double complex *x = malloc(sizeof *x * (size_t)(batch * n)), *y = malloc(sizeof *y * (size_t)(batch * n));
        double complex *z = malloc(sizeof *z * (size_t)(batch * n)), *w = malloc(sizeof *w * (size_t)n);
        CHECK(x && y && z && w);
        if (!x || !y || !z || !w) {
            free(x), free(y), free(z), free(w);
            fm_context_destroy(g_ctx);
            break;
        }
        for (int64_t i = 0; i < batch * n; i++)
            x[i] = CMPLX(rng_uniform(&g_rng), rng_uniform(&g_rng));
        for (int64_t j = 0; j < n; j++)
            w[j] = cexp(2 * TEST_PI * I * (double)((j * shift) % n) / (double)n);
        fm_tensor a, b, c, pa;
        fm_tensor_init(&a, x, fm_test_cpu, FM_C128, 2, sh, NULL);
        fm_tensor_init(&b, y, fm_test_cpu, FM_C128, 2, sh, NULL);
        fm_tensor_init(&c, z, fm_test_cpu, FM_C128, 2, sh, NULL);
        fm_tensor_init(&pa, w, fm_test_cpu, FM_C128, 1, &n, NULL);
        fm_fft_options o;
        test_opts_init(&o);
        o.naxes = 1, o.axes[0] = 1, o.num_threads = 2;
        CHECK_OK(fm_fft(g_ctx, &a, &c, NULL, NULL, &o, NULL)); /* plain: fft(x) */
        o.prolog.ops = FM_FFT_OP_MULTIPLY;
        fm_plan *p = NULL;
        CHECK_OK(fm_fft_plan(g_ctx, &a, &b, &pa, NULL, &o, &p));
        if (p) {
            CHECK_MSG(fm_test_contains(fm_plan_describe(p), "path=prolog>out"), "%s", fm_plan_describe(p));
            void *ptrs[4] = {x, y, w, NULL};
            CHECK_OK(fm_plan_execute(p, ptrs, 4, NULL));
            double err = 0, ref = 0;
            for (int64_t bb = 0; bb < batch; bb++)
                for (int64_t k = 0; k < n; k++) {
                    err = fmax(err, cabs(y[bb * n + k] - z[bb * n + (k - shift + n) % n]));
                    ref = fmax(ref, cabs(z[bb * n + k]));
                }
            CHECK_MSG(err <= 1e-12 * ref, "batch %lld of 2^17: shift theorem off by %g (max |X| %g)", (long long)batch,
                      err, ref);
            fm_plan_release(p);
        }
        free(x), free(y), free(z), free(w);
        fm_context_destroy(g_ctx);
    }
    g_ctx = saved;
    unsetenv("FUSEMATH_FFT_CPU_PATH");
}

/* A timed choice goes by the median of per-round ratios: one lucky round of the slower path
 * (which the best time of each used to let win) does not decide it. */
static void test_timed_ratio(void)
{
    /* path b takes 1.25x path a in every round but one, where it ran 0.5x */
    const double a[7] = {2.0, 2.1, 1.9, 2.0, 2.2, 2.0, 2.0}, b[7] = {2.5, 2.6, 2.4, 1.0, 2.75, 2.5, 2.5};
    const double r = fm_fftw_timed_ratio(a, b, 7);
    CHECK_MSG(r > 1.2 && r < 1.3, "median ratio %.3f, expected 1.25", r);
    CHECK_MSG(fm_fftw_timed_ratio(b, a, 7) < 0.85, "the reverse: %.3f", fm_fftw_timed_ratio(b, a, 7));
    const double e2[2] = {1.0, 3.0}, f2[2] = {2.0, 3.0}; /* even count: the mean of the middle two */
    CHECK(fabs(fm_fftw_timed_ratio(e2, f2, 2) - 1.5) < 1e-12);
    CHECK(fm_fftw_timed_ratio(a, b, 0) == 1.0);
    const double z[1] = {0.0}, one[1] = {1.0}; /* a zero time: b counts as far slower, no division by 0 */
    CHECK(fm_fftw_timed_ratio(z, one, 1) > 1e20);
    CHECK(fm_fftw_timed_ratio(z, z, 1) == 1.0); /* both nothing: a tie */
}

/* A prolog on dense c2c rows is gathered into the scratch (scratch>out) or straight into out
 * and transformed in place there (prolog>out): forced each way and timed at measure, each
 * against the naive DFT with an epilog too, in place (in == out), a remainder chunk, rows of
 * out padded apart, an out pointer off FFTW's alignment by 8 bytes (the chunks fall back to
 * the scratch), and outs whose transforms are not contiguous (transposed; every other
 * element), where the gather into out would be wrong and the scratch must be taken. */
static void test_prolog_into_out(void)
{
    fm_context *saved = g_ctx;
    const char *modes[3] = {"inplace", "chunks", NULL};
    const char *want[3] = {"path=prolog>out", "path=scratch>out", ",timed"};
    char buf[512];
    for (int m = 0; m < 3; m++) {
        if (!fresh_context_with_path(modes[m]))
            break;
        const int effort = modes[m] ? FM_FFT_EFFORT_ESTIMATE : FM_FFT_EFFORT_MEASURE;
        for (int dbl = 0; dbl < 2; dbl++) {
            int64_t shape[2] = {150, 512}; /* 2 threads: c64 chunks of 32, c128 of 16; remainders */
            int ax[1] = {1};
            static const int rev2[2] = {1, 0};
            fm_status st;
            int ran;
            const char *d = plan_describe_chain(dbl, FM_FFT_C2C, shape, 1, effort, 1, &st, &ran, buf, sizeof buf);
            CHECK_MSG(st == FM_OK && fm_test_contains(d, want[m]), "mode %s: %s", modes[m] ? modes[m] : "timed", d);
            if (m == 0) { /* "inplace": plain c2c rows copied into out, untimed; 2-D stays FFTW's */
                int64_t s2[2] = {96, 160};
                d = plan_describe_2d(dbl, FM_FFT_C2C, shape, 1, effort, &st, &ran, buf, sizeof buf);
                CHECK_MSG(st == FM_OK && fm_test_contains(d, "path=copy>out") && !fm_test_contains(d, "timed"),
                          "inplace, plain rows: %s", d);
                d = plan_describe_2d(dbl, FM_FFT_C2C, s2, 2, effort, &st, &ran, buf, sizeof buf);
                CHECK_MSG(st == FM_OK && fm_test_contains(d, "path=direct") && !fm_test_contains(d, "split") &&
                              !fm_test_contains(d, "timed"),
                          "inplace, plain 2-D: %s", d);
            }
            for (int v = 0; v < 7; v++) {
                fcase c = fc_base(dbl, FM_FFT_C2C, 2, shape, 1, ax);
                c.pro_ops = FM_FFT_OP_SCALE | FM_FFT_OP_MULTIPLY, c.pro_scale = 0.5;
                c.pa_nd = 1, c.pa_shape[0] = shape[1], c.pa_cplx = 1;
                c.threads = 2, c.effort = effort;
                if (v == 1)
                    c.epi_ops = FM_FFT_OP_SCALE | FM_FFT_OP_CONJ, c.epi_scale = 2.0;
                if (v == 2)
                    c.inplace = 1;
                if (v == 3)
                    c.shift_out = 8; /* fftw_alignment_of works mod 16: +16 would be aligned */
                if (v == 4)
                    c.pad_out = 3;
                if (v == 5)
                    c.order_out = rev2;
                if (v == 6)
                    c.step_out = 2;
                run_case(&c);
            }
        }
        fm_context_destroy(g_ctx);
    }
    g_ctx = saved;
    unsetenv("FUSEMATH_FFT_CPU_PATH");
    prolog_into_out_large();
}

/* Which way a describe() line went: the library's path (1) or FFTW's plan (0). */
static int took_library_path(const char *d)
{
    return fm_test_contains(d, "split into") || fm_test_contains(d, "path=scratch>out") ||
           fm_test_contains(d, "path=prolog>out");
}

/* The whole of file (NULL when it cannot be read). */
static char *read_text(const char *file)
{
    FILE *f = fopen(file, "r");
    char *text = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        rewind(f);
        text = size >= 0 ? calloc((size_t)size + 1, 1) : NULL;
        if (text && fread(text, 1, (size_t)size, f) != (size_t)size)
            text[0] = '\0';
    }
    if (f)
        fclose(f);
    return text;
}

/* Load text as a wisdom file into g_ctx: the load's status. */
static fm_status load_text(const char *file, const char *text)
{
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (!f)
        return FM_ERR_INTERNAL;
    fputs(text, f);
    fclose(f);
    return fm_context_wisdom_load(g_ctx, file);
}

/* A timed choice is recorded in the context's wisdom (an "fft" entry): the same problem planned
 * again after the plan cache was cleared takes it without timing ("wisdom"), the same way;
 * forgotten (fm_context_wisdom_forget), it is timed again, and so it is in another fresh context
 * (nothing is kept process-wide); saved with the wisdom file and loaded into a fresh context, it
 * is taken from there. The three kinds: plain rows (direct or chunks), a prolog (scratch or into
 * out), a plain 2-D transform (FFTW's or the split). */
static void test_timed_choices_remembered(void)
{
    fm_context *saved = g_ctx;
    char buf[512], first[3][512], file[96];
    const int64_t rows[2] = {150, 520}, two_d[2] = {96, 176};
    fm_status st;
    int ran;
    snprintf(file, sizeof file, "/tmp/fm_test_wisdom_%ld", (long)getpid());
    g_ctx = NULL;
    for (int round = 0; round < 5; round++) {
        if (round == 0 || round >= 3) { /* 0, 3, 4: a fresh context */
            if (g_ctx)
                fm_context_destroy(g_ctx);
            g_ctx = NULL;
            if (!fresh_context_with_path(NULL))
                break;
        } else {
            fm_context_clear_cache(g_ctx);
        }
        if (round == 2) /* the public way: the context's wisdom and every backend's */
            CHECK_OK(fm_context_wisdom_forget(g_ctx));
        if (round == 4)
            CHECK_OK(fm_context_wisdom_load(g_ctx, file));
        const char *want = round == 1 || round == 4 ? "wisdom" : "timed";
        for (int k = 0; k < 3; k++) {
            const char *d = k == 2 ? plan_describe_2d(0, FM_FFT_C2C, two_d, 2, FM_FFT_EFFORT_MEASURE, &st, &ran, buf,
                                                      sizeof buf)
                                   : plan_describe_chain(0, FM_FFT_C2C, rows, 1, FM_FFT_EFFORT_MEASURE, k, &st, &ran,
                                                         buf, sizeof buf);
            CHECK_MSG(st == FM_OK && fm_test_contains(d, want), "round %d, kind %d: expected '%s' in %s", round, k,
                      want, d);
            if (round == 0)
                snprintf(first[k], sizeof first[k], "%s", d);
            else if (round == 1 || round == 4)
                CHECK_MSG(took_library_path(d) == took_library_path(first[k]), "round %d took another way: %s vs %s",
                          round, d, first[k]);
        }
        if (round == 0) {
            CHECK_OK(fm_context_wisdom_save(g_ctx, file));
            char *text = read_text(file); /* the choices are the file's own entries now */
            CHECK_MSG(text && fm_test_contains(text, "\nfft ") && !fm_test_contains(text, "timed choices"), "%s",
                      text ? text : "(unreadable)");
            free(text);
        }
    }
    if (g_ctx)
        fm_context_destroy(g_ctx);
    g_ctx = saved;
    remove(file);
}

/* FFT entries as the load checks them: a cpu_path no caller could ask for and a malformed line
 * fail the load naming the line, and nothing of the file is merged (a valid entry and FFTW blob
 * before a bad line neither); an operation this build lacks is skipped; a version 1 file (keys
 * from before problems carried their settings, the timed choices inside the fftw blob) loads
 * without error and applies none of its entries. */
static void test_fft_wisdom_entries(void)
{
    char file[96], text[512];
    snprintf(file, sizeof file, "/tmp/fm_test_fft_wisdom_%ld", (long)getpid());
    const int before = fm_context_wisdom_size(g_ctx);
    static const struct {
        const char *line, *why;
    } bad[] = {
        {"fft 00000000000000ab 9 # x", "line 2: cpu_path 9; expected 1 (direct), 2 (chunks) or 3 (inplace)"},
        {"fft 00000000000000ab 0", "line 2: cpu_path 0"},
        {"fft 00000000000000ab -1", "line 2: cpu_path -1"},
        {"fft 00000000000000ab 1junk", "line 2 is malformed"},
        {"fft 00000000000000ab", "line 2 is malformed"},
        {"fft 00000000000000ab 1 2", "line 2 is malformed"},
        {"fft 00000000000000ab 4294967298", "line 2 is malformed"},
        {"fft zz 1", "line 2 is malformed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "fusemath-wisdom 3\n%s\nfft 00000000000000ac 2 # fine\n", bad[i].line);
        const fm_status st = load_text(file, text);
        CHECK_MSG(st == FM_ERR_INVALID_ARGUMENT && fm_test_contains(fm_last_error(), bad[i].why),
                  "'%s': status %d: %s", bad[i].line, (int)st, fm_last_error());
        CHECK(fm_context_wisdom_size(g_ctx) == before);
    }
    /* a valid entry and blob, then a malformed line: the load fails and imports nothing */
    const char good[] = "\n#fusemath fftwf\n";
    snprintf(text, sizeof text, "fusemath-wisdom 3\nfft 00000000000000ab 2 # x\nblob fftw %zu\n%s\nmatmul zz\n",
             sizeof good - 1, good);
    fm_status st = load_text(file, text);
    CHECK_MSG(st == FM_ERR_INVALID_ARGUMENT && fm_test_contains(fm_last_error(), "line 7 is malformed"),
              "status %d: %s", (int)st, fm_last_error());
    CHECK(fm_context_wisdom_size(g_ctx) == before);
    /* the same, well formed: the entry comes in and is saved as it was read */
    snprintf(text, sizeof text, "fusemath-wisdom 3\nfft 00000000000000ab 2 # x\nblob fftw %zu\n%s\n", sizeof good - 1,
             good);
    CHECK_OK(load_text(file, text));
    CHECK(fm_context_wisdom_size(g_ctx) == before + 1);
    CHECK_OK(fm_context_wisdom_save(g_ctx, file));
    char *saved = read_text(file);
    CHECK_MSG(saved && fm_test_contains(saved, "fusemath-wisdom 3\n") &&
                  fm_test_contains(saved, "\nfft 00000000000000ab 2 # x\n"),
              "%s", saved ? saved : "(unreadable)");
    free(saved);
    /* a later build's operation: skipped */
    CHECK_OK(load_text(file, "fusemath-wisdom 3\nsparse 00000000000000ab 1 2 3 4 5 # later\n"));
    CHECK(fm_context_wisdom_size(g_ctx) == before + 1);
    /* version 1: loads, its entries never apply (the old fftw blob's timed choices neither) */
    const char old_blob[] = "\n#fusemath fftwf\n\n#fusemath timed choices\nchoice 1 00000000000000ab 1\n";
    snprintf(text, sizeof text, "fusemath-wisdom 1\nmatmul 0123456789abcdef 16 1 0 0 # old\nblob fftw %zu\n%s\n",
             sizeof old_blob - 1, old_blob);
    CHECK_OK(load_text(file, text));
    CHECK(fm_context_wisdom_size(g_ctx) == before + 1);
    CHECK_STATUS(load_text(file, "fusemath-wisdom 4\n"), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("expected a first line 'fusemath-wisdom 3'");
    CHECK_OK(fm_context_wisdom_forget(g_ctx));
    CHECK(fm_context_wisdom_size(g_ctx) == 0);
    remove(file);
    CHECK_STATUS(fm_context_wisdom_forget(NULL), FM_ERR_INVALID_ARGUMENT);
}

/* Long columns (8192 c64 points, more than a 256 KiB row chunk holds 4 of) still move in tiles;
 * a column transform into a strided view of a large array is right and populates only the
 * pages its elements lie on (the prefault is for dense outputs only). */
static void test_long_columns_and_strided_out(void)
{
    const int64_t n = 8192, cols = 64, ld = 8192; /* out: 64 columns of a 8192 x 8192 c64 array */
    int64_t sh[2] = {n, cols}, ost[2] = {ld, 1};
    float *in = calloc((size_t)(n * cols) * 2, sizeof(float));
    const size_t big = (size_t)(n * ld) * 2 * sizeof(float), page = (size_t)sysconf(_SC_PAGESIZE);
    float *wide = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(in && wide != MAP_FAILED);
    if (!in || wide == MAP_FAILED) {
        free(in);
        return;
    }
    (void)madvise(wide, big, MADV_NOHUGEPAGE); /* page-exact residency below */
    for (int64_t c = 0; c < cols; c++)
        in[2 * (3 * cols + c)] = 1.0f; /* an impulse at point 3 in every column */
    fm_tensor a, b;
    fm_tensor_init(&a, in, fm_test_cpu, FM_C64, 2, sh, NULL);
    fm_tensor_init(&b, wide, fm_test_cpu, FM_C64, 2, sh, ost);
    fm_fft_options o;
    test_opts_init(&o);
    o.naxes = 1, o.axes[0] = 0, o.num_threads = 2;
    o.epilog.ops = FM_FFT_OP_SCALE, o.epilog.scale[0] = 2.0;
    fm_plan *p = NULL;
    CHECK_OK(fm_fft_plan(g_ctx, &a, &b, NULL, NULL, &o, &p));
    if (p) {
        CHECK_MSG(fm_test_contains(fm_plan_describe(p), "path=columns"), "%s", fm_plan_describe(p));
        void *ptrs[4] = {in, wide, NULL, NULL};
        CHECK_OK(fm_plan_execute(p, ptrs, 4, NULL));
        double err = 0;
        for (int64_t k = 0; k < n; k += 97)
            for (int64_t c = 0; c < cols; c += 13) {
                double complex w = 2.0 * cexp(-2 * TEST_PI * I * (double)((3 * k) % n) / (double)n);
                const float *v = wide + 2 * (k * ld + c);
                err = fmax(err, cabs(CMPLX(v[0], v[1]) - w));
            }
        CHECK_MSG(err < 1e-4, "columns into a strided view: max error %g", err);
        unsigned char *vec = malloc(big / page + 1);
        size_t resident = 0;
        if (vec && mincore(wide, big, vec) == 0)
            for (size_t i = 0; i < big / page; i++)
                resident += vec[i] & 1;
        /* each row's 64 elements (512 bytes) lie on one page of the row's 16 */
        CHECK_MSG(resident <= big / page / 8, "%zu of %zu pages of the wide array resident after writing 1/16 of it",
                  resident, big / page);
        free(vec);
        fm_plan_release(p);
    }
    munmap(wide, big);
    free(in);
}

/* (7) bad inputs */
static void test_bad_inputs(void)
{
    int64_t s8[2] = {4, 8}, s5[2] = {4, 5}, s9[2] = {4, 9}, s3[3] = {2, 4, 8}, s4[1] = {8};
    fm_tensor c8, z8, r8, c5, r9, d8, c3, r4;
    fm_tensor_init(&c8, NULL, fm_test_cpu, FM_C64, 2, s8, NULL);
    fm_tensor_init(&z8, NULL, fm_test_cpu, FM_C128, 2, s8, NULL);
    fm_tensor_init(&r8, NULL, fm_test_cpu, FM_F32, 2, s8, NULL);
    fm_tensor_init(&d8, NULL, fm_test_cpu, FM_F64, 2, s8, NULL);
    fm_tensor_init(&c5, NULL, fm_test_cpu, FM_C64, 2, s5, NULL);
    fm_tensor_init(&r9, NULL, fm_test_cpu, FM_F32, 2, s9, NULL);
    fm_tensor_init(&c3, NULL, fm_test_cpu, FM_C64, 3, s3, NULL);
    fm_tensor_init(&r4, NULL, fm_test_cpu, FM_F32, 1, s4, NULL);
    fm_plan *p = NULL;
    fm_fft_options o;
#define OPTS(k, inv) (fm_fft_options_init(&o), o.kind = (k), o.inverse = (inv), &o)
    /* dtypes per kind */
    CHECK_STATUS(fm_fft_plan(g_ctx, &r8, &c8, NULL, NULL, OPTS(FM_FFT_C2C, 0), &p), FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("r2c");
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &z8, NULL, NULL, OPTS(FM_FFT_C2C, 0), &p), FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("c128");
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c5, NULL, NULL, OPTS(FM_FFT_R2C, 0), &p), FM_ERR_DTYPE);
    CHECK_STATUS(fm_fft_plan(g_ctx, &d8, &c5, NULL, NULL, OPTS(FM_FFT_R2C, 0), &p), FM_ERR_DTYPE);
    CHECK_STATUS(fm_fft_plan(g_ctx, &c5, &c8, NULL, NULL, OPTS(FM_FFT_C2R, 1), &p), FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("c2r");
    /* direction */
    CHECK_STATUS(fm_fft_plan(g_ctx, &r8, &c5, NULL, NULL, OPTS(FM_FFT_R2C, 1), &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_fft_plan(g_ctx, &c5, &r8, NULL, NULL, OPTS(FM_FFT_C2R, 0), &p), FM_ERR_INVALID_ARGUMENT);
    /* shapes: r2c out = n/2+1, c2r in = n/2+1 */
    CHECK_OK(fm_fft_plan(g_ctx, &r8, &c5, NULL, NULL, OPTS(FM_FFT_R2C, 0), &p));
    fm_plan_release(p), p = NULL;
    CHECK_OK(fm_fft_plan(g_ctx, &c5, &r9, NULL, NULL, OPTS(FM_FFT_C2R, 1), &p)); /* n = 9 -> 5 */
    fm_plan_release(p), p = NULL;
    CHECK_STATUS(fm_fft_plan(g_ctx, &r8, &c8, NULL, NULL, OPTS(FM_FFT_R2C, 0), &p), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("r2c");
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &r8, NULL, NULL, OPTS(FM_FFT_C2R, 1), &p), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("c2r");
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c5, NULL, NULL, OPTS(FM_FFT_C2C, 0), &p), FM_ERR_SHAPE);
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c3, NULL, NULL, OPTS(FM_FFT_C2C, 0), &p), FM_ERR_SHAPE);
    /* axes */
    (void)OPTS(FM_FFT_C2C, 0);
    o.naxes = 1, o.axes[0] = 2;
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("axes");
    o.naxes = 2, o.axes[0] = 1, o.axes[1] = -1;
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("repeated");
    o.naxes = 4;
    CHECK_STATUS(fm_fft_plan(g_ctx, &c3, &c3, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("naxes");
    o.naxes = 3, o.axes[0] = 0, o.axes[1] = 1, o.axes[2] = 2;
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    (void)OPTS(FM_FFT_C2C, 0);
    o.gpu_prolog = 4;
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("gpu_prolog");
    CHECK_ERROR_MENTIONS("3 (kernel)");
    o.gpu_prolog = -1;
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    /* chains */
    (void)OPTS(FM_FFT_C2C, 0);
    o.prolog.ops = FM_FFT_OP_MULTIPLY;
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("prolog_array");
    (void)OPTS(FM_FFT_C2C, 0);
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, &r4, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("epilog_array");
    o.epilog.ops = FM_FFT_OP_MULTIPLY;
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, &c5, &o, &p), FM_ERR_SHAPE); /* (4,5) vs (4,8) */
    CHECK_ERROR_MENTIONS("epilog_array");
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, &d8, &o, &p), FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("epilog_array");
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, &c3, &o, &p), FM_ERR_SHAPE); /* more dims */
    CHECK_ERROR_MENTIONS("epilog_array");
    CHECK_OK(fm_fft_plan(g_ctx, &c8, &c8, NULL, &r4, &o, &p)); /* real window broadcast: fine */
    fm_plan_release(p), p = NULL;
    (void)OPTS(FM_FFT_R2C, 0);
    o.prolog.ops = FM_FFT_OP_MULTIPLY;
    CHECK_STATUS(fm_fft_plan(g_ctx, &r8, &c5, &c8, NULL, &o, &p), FM_ERR_DTYPE); /* complex array on real data */
    CHECK_ERROR_MENTIONS("prolog_array");
    (void)OPTS(FM_FFT_R2C, 0);
    o.prolog.ops = FM_FFT_OP_SCALE, o.prolog.scale[1] = 1.0;
    CHECK_STATUS(fm_fft_plan(g_ctx, &r8, &c5, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("prolog scale");
    (void)OPTS(FM_FFT_C2R, 1);
    o.epilog.ops = FM_FFT_OP_SCALE, o.epilog.scale[1] = 1.0;
    CHECK_STATUS(fm_fft_plan(g_ctx, &c5, &r8, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("epilog scale");
    (void)OPTS(FM_FFT_C2C, 0);
    o.prolog.ops = FM_FFT_OP_SCALE, o.prolog.scale[0] = NAN;
    CHECK_STATUS(fm_fft_plan(g_ctx, &c8, &c8, NULL, NULL, &o, &p), FM_ERR_INVALID_ARGUMENT);
    CHECK(p == NULL);
    /* in-place c2r / aliasing at execute */
    int64_t sh[1] = {16};
    tbuf b;
    tb_make(&b, FM_C64, 1, sh, NULL, 0, 1, -1);
    fm_tensor o2 = b.t;
    o2.data = (char *)b.t.data + 8;
    (void)OPTS(FM_FFT_C2C, 0);
    CHECK_STATUS(fm_fft(g_ctx, &b.t, &o2, NULL, NULL, &o, NULL), FM_ERR_ALIAS);
    int other = -1;
    CHECK(fm_last_error_slots(&other) == FM_FFT_OUT && other == FM_FFT_IN); /* the slots that overlap */
    CHECK_ERROR_MENTIONS("output out overlaps input in");
    /* an r2c into its own input's memory (a front end computes it through a temporary) */
    fm_tensor ri, ro;
    fm_tensor_init(&ri, b.t.data, fm_test_cpu, FM_F32, 1, (int64_t[]){16}, NULL);
    fm_tensor_init(&ro, b.t.data, fm_test_cpu, FM_C64, 1, (int64_t[]){9}, NULL);
    (void)OPTS(FM_FFT_R2C, 0);
    CHECK_STATUS(fm_fft(g_ctx, &ri, &ro, NULL, NULL, &o, NULL), FM_ERR_ALIAS);
    CHECK(fm_last_error_slots(&other) == FM_FFT_OUT && other == FM_FFT_IN);
    tb_free(&b);
#undef OPTS
}

static void test_empty_and_describe(void)
{
    int64_t sh[2] = {0, 8};
    fm_tensor a, b;
    fm_tensor_init(&a, NULL, fm_test_cpu, FM_C64, 2, sh, NULL);
    fm_tensor_init(&b, NULL, fm_test_cpu, FM_C64, 2, sh, NULL);
    fm_plan *p = NULL;
    fm_fft_options o;
    test_opts_init(&o);
    o.naxes = 1, o.axes[0] = 1;
    CHECK_OK(fm_fft_plan(g_ctx, &a, &b, NULL, NULL, &o, &p));
    if (p) {
        void *ptrs[4] = {NULL, NULL, NULL, NULL};
        CHECK_OK(fm_plan_execute(p, ptrs, 4, NULL));
        fm_plan_release(p);
    }
    int64_t s2[2] = {64, 4096};
    fm_tensor_init(&a, NULL, fm_test_cpu, FM_C64, 2, s2, NULL);
    fm_tensor_init(&b, NULL, fm_test_cpu, FM_C64, 2, s2, NULL);
    o.epilog.ops = FM_FFT_OP_SCALE, o.epilog.scale[0] = 2;
    CHECK_OK(fm_fft_plan(g_ctx, &a, &b, NULL, NULL, &o, &p));
    if (p) {
        const char *d = fm_plan_describe(p);
        printf("    %s\n", d);
        CHECK(fm_test_contains(d, "c64 c2c 64x[4096] axes=(1) forward"));
        CHECK(fm_test_contains(d, "prolog=scale epilog=none")); /* a scale alone rides the gather */
        CHECK(fm_test_contains(d, "effort=estimate"));
        fm_plan_release(p);
    }
}

/* cld c2c and ld r2c of a strided input against the DFT summed in long double: long-double
 * accuracy (double would be ~2^11 eps_ld off), or, in a build without libfftw3l, an error that
 * names it. */
static void test_long_double(void)
{
    enum { N = 12 };
    long double x[2 * N * 2], y[2 * N], want[2 * N];
    for (int i = 0; i < 4 * N; i++)
        x[i] = (long double)((i * 37) % 11) / 7.0L - 0.7L + 1e-17L * i;
    fm_tensor ti, to;
    fm_tensor_init(&ti, x, fm_test_cpu, FM_CLD, 1, (int64_t[]){N}, (int64_t[]){2}); /* every other element */
    fm_tensor_init(&to, y, fm_test_cpu, FM_CLD, 1, (int64_t[]){N}, NULL);
    fm_fft_options o;
    test_opts_init(&o);
    o.norm = FM_FFT_NORM_ORTHO;
    fm_status s = fm_fft(g_ctx, &ti, &to, NULL, NULL, &o, NULL);
    if (s == FM_ERR_NOT_SUPPORTED) {
        CHECK_ERROR_MENTIONS("libfftw3l");
        return;
    }
    CHECK_OK(s);
    const long double pi = 3.14159265358979323846264338327950288L;
    long double err = 0;
    for (int k = 0; k < N; k++) {
        long double re = 0, im = 0;
        for (int j = 0; j < N; j++) {
            const long double a = -2 * pi * (long double)(j * k % N) / N, *v = x + 4 * j;
            re += v[0] * cosl(a) - v[1] * sinl(a), im += v[0] * sinl(a) + v[1] * cosl(a);
        }
        want[2 * k] = re / sqrtl(N), want[2 * k + 1] = im / sqrtl(N);
        err = fmaxl(err, fmaxl(fabsl(y[2 * k] - want[2 * k]), fabsl(y[2 * k + 1] - want[2 * k + 1])));
    }
    CHECK_MSG(err < 64 * LDBL_EPSILON, "cld fft error %Lg (eps %Lg)", err, LDBL_EPSILON);
    fm_tensor_init(&ti, x, fm_test_cpu, FM_LD, 1, (int64_t[]){N}, (int64_t[]){4}); /* the real parts */
    fm_tensor_init(&to, y, fm_test_cpu, FM_CLD, 1, (int64_t[]){N / 2 + 1}, NULL);
    test_opts_init(&o);
    o.kind = FM_FFT_R2C;
    CHECK_OK(fm_fft(g_ctx, &ti, &to, NULL, NULL, &o, NULL));
    err = 0;
    for (int k = 0; k <= N / 2; k++) {
        long double re = 0, im = 0;
        for (int j = 0; j < N; j++) {
            const long double a = -2 * pi * (long double)(j * k % N) / N;
            re += x[4 * j] * cosl(a), im += x[4 * j] * sinl(a);
        }
        err = fmaxl(err, fmaxl(fabsl(y[2 * k] - re), fabsl(y[2 * k + 1] - im)));
    }
    CHECK_MSG(err < 64 * LDBL_EPSILON, "ld rfft error %Lg", err);
    o.prolog.ops = FM_FFT_OP_MULTIPLY; /* arrays are refused in long double, with the reason */
    CHECK_STATUS(fm_fft(g_ctx, &ti, &to, &ti, NULL, &o, NULL), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("scale and conj");
}

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "no context: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_small_vs_naive);
    RUN_TEST(test_identities);
    RUN_TEST(test_large_roundtrip);
    RUN_TEST(test_multi_axes_layouts);
    RUN_TEST(test_chains);
    RUN_TEST(test_chain_vs_unfused);
    RUN_TEST(test_concurrent);
    RUN_TEST(test_concurrent_planning);
    RUN_TEST(test_misaligned_and_chunks);
    RUN_TEST(test_effort);
    RUN_TEST(test_direct_or_chunks);
    RUN_TEST(test_timed_ratio);
    RUN_TEST(test_prolog_into_out);
    RUN_TEST(test_timed_choices_remembered);
    RUN_TEST(test_fft_wisdom_entries);
    RUN_TEST(test_long_columns_and_strided_out);
    RUN_TEST(test_bad_inputs);
    RUN_TEST(test_empty_and_describe);
    RUN_TEST(test_long_double);
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
