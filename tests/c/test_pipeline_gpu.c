/* test_pipeline_gpu.c : pipelined host<->GPU transfers on a GPU (core/src/pipeline.c). Host (pageable)
 * operands with execution = cuda, under FUSEMATH_PIPELINE=on (every problem that splits is cut, so
 * small odd sizes run with a remainder chunk), off and auto (one context each: the setting is read at
 * context creation):
 *  - matmul f32 with c, bias and gelu, m = 1037 (8 chunks of 130, the last 127), against a float64
 *    reference on the host; the same with d == c in place; relu + dropout: the same elements kept as
 *    the unpipelined plan (position per chunk); a column-major a is staged whole (describe says why)
 *    and still right; 6 products sharing b in batch slabs;
 *  - FFT c64 13 x 4096 over the last axis against the CPU (FFTW) transform of the same data; over the
 *    first axis (columns: not cut) staged whole;
 *  - RNG portable fills (normal f32 1037 x 3, uniform f64 100003, raw u32) bit-identical to the CPU
 *    fill of the same seed and position;
 *  - auto: n = 256 says why not (under two chunks); 2048 x 2048 with k = 16 (copies, next to no
 *    compute) is staged whole, the model says why; f32 8192^3 (compute as long as the copies) is
 *    pipelined in 8 chunks (planned only); one pipelined plan executed from 4 threads at once, each
 *    result right; execution = best predicts the GPU pipelined for 8192^3.
 * Without a GPU (or CUDA) it says so and passes. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "pipeline_test_util.h"
#include "internal.h"

#include <complex.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
static fm_context *ctx_on, *ctx_off, *ctx_auto, *ctx_cpu;
static const fm_device cpu = {FM_DEVICE_CPU, 0};

static fm_context *context_with(const char *pipeline)
{
    fm_context *c = NULL;
    if (pipeline)
        setenv("FUSEMATH_PIPELINE", pipeline, 1);
    else
        unsetenv("FUSEMATH_PIPELINE");
    CHECK_OK(fm_context_create(&c));
    unsetenv("FUSEMATH_PIPELINE");
    return c;
}


static double gelu(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

typedef struct mm {
    int64_t m, n, k;
    float *a, *b, *c, *bias, *d;
    double *ref, *mag; /* reference and sum |a||b| + |c| + |bias| per element */
    int col_major_a;
} mm;

static void mm_make(mm *t, int64_t m, int64_t n, int64_t k, int col_major_a)
{
    t->m = m, t->n = n, t->k = k, t->col_major_a = col_major_a;
    t->a = malloc(sizeof(float) * (size_t)(m * k));
    t->b = malloc(sizeof(float) * (size_t)(k * n));
    t->c = malloc(sizeof(float) * (size_t)(m * n));
    t->bias = malloc(sizeof(float) * (size_t)n);
    t->d = malloc(sizeof(float) * (size_t)(m * n));
    t->ref = malloc(sizeof(double) * (size_t)(m * n));
    t->mag = malloc(sizeof(double) * (size_t)(m * n));
    fill(t->a, (size_t)(m * k), 1), fill(t->b, (size_t)(k * n), 2), fill(t->c, (size_t)(m * n), 3);
    fill(t->bias, (size_t)n, 4);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, g = 0;
            for (int64_t q = 0; q < k; q++) {
                const double av = col_major_a ? t->a[q * m + i] : t->a[i * k + q];
                s += av * t->b[q * n + j];
                g += fabs(av * t->b[q * n + j]);
            }
            s += 0.5 * t->c[i * n + j] + t->bias[j];
            t->ref[i * n + j] = gelu(s);
            t->mag[i * n + j] = g + fabs(t->c[i * n + j]) + fabs(t->bias[j]);
        }
}

static void mm_free(mm *t)
{
    free(t->a), free(t->b), free(t->c), free(t->bias), free(t->d), free(t->ref), free(t->mag);
}

/* d = gelu(a b + 0.5 c + bias) on cuda from host data; out: d's pointer (t->d, or t->c in place) */
static fm_status mm_run(fm_context *ctx, mm *t, float *out, char *describe, size_t n)
{
    fm_tensor ta, tb, tc, tbias, td;
    int64_t sa[2] = {t->m, t->k}, sb[2] = {t->k, t->n}, sd[2] = {t->m, t->n}, sbias[1] = {t->n};
    int64_t cm[2] = {1, t->m};
    fm_tensor_init(&ta, t->a, cpu, FM_F32, 2, sa, t->col_major_a ? cm : NULL);
    fm_tensor_init(&tb, t->b, cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&tc, t->c, cpu, FM_F32, 2, sd, NULL);
    fm_tensor_init(&tbias, t->bias, cpu, FM_F32, 1, sbias, NULL);
    fm_tensor_init(&td, out, cpu, FM_F32, 2, sd, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.beta[0] = 0.5;
    o.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_GELU;
    o.execution = FM_EXECUTION_CUDA;
    fm_plan *p = NULL;
    fm_status s = fm_matmul_plan(ctx, &ta, &tb, &tc, &tbias, &td, NULL, &o, &p);
    if (s != FM_OK)
        return s;
    snprintf(describe, n, "%s", fm_plan_describe(p));
    void *ptrs[FM_MATMUL_NSLOTS] = {t->a, t->b, t->c, t->bias, out};
    s = fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL);
    fm_plan_release(p);
    return s;
}

static int mm_close(const mm *t, const float *d)
{
    for (int64_t e = 0; e < t->m * t->n; e++)
        if (!(fabs(d[e] - t->ref[e]) <= 2e-3 * t->mag[e] + 1e-5)) {
            fprintf(stderr, "  d[%lld, %lld] = %.9g, reference %.9g\n", (long long)(e / t->n), (long long)(e % t->n),
                    d[e], t->ref[e]);
            return 0;
        }
    return 1;
}

static void test_matmul(void)
{
    mm t;
    char desc[FM_DESCRIBE_LEN];
    mm_make(&t, 1037, 301, 257, 0);
    memset(t.d, 0xff, sizeof(float) * (size_t)(t.m * t.n)); /* NaNs: every element must be written */
    CHECK_OK(mm_run(ctx_on, &t, t.d, desc, sizeof desc));
    CHECK_MSG(strstr(desc, "pipelined chunks=8 (130 of 1037, last 127)") != NULL, "%s", desc);
    CHECK(mm_close(&t, t.d));
    memset(t.d, 0xff, sizeof(float) * (size_t)(t.m * t.n));
    CHECK_OK(mm_run(ctx_off, &t, t.d, desc, sizeof desc));
    CHECK_MSG(strstr(desc, "not pipelined: FUSEMATH_PIPELINE=off") != NULL, "%s", desc);
    CHECK(mm_close(&t, t.d));
    /* d == c: each chunk reads its rows of c before its results land there */
    float *keep = malloc(sizeof(float) * (size_t)(t.m * t.n));
    memcpy(keep, t.c, sizeof(float) * (size_t)(t.m * t.n));
    CHECK_OK(mm_run(ctx_on, &t, t.c, desc, sizeof desc));
    CHECK_MSG(strstr(desc, "pipelined") != NULL, "%s", desc);
    CHECK(mm_close(&t, t.c));
    memcpy(t.c, keep, sizeof(float) * (size_t)(t.m * t.n));
    free(keep);
    mm_free(&t);
    /* a column-major: its row panels interleave, so it is staged whole */
    mm_make(&t, 203, 64, 33, 1);
    CHECK_OK(mm_run(ctx_on, &t, t.d, desc, sizeof desc));
    CHECK_MSG(strstr(desc, "not pipelined: a's chunks would overlap") != NULL, "%s", desc);
    CHECK(mm_close(&t, t.d));
    mm_free(&t);
}

/* 6 products (6, 37, 29) @ (29, 45): batch slabs, b read whole */
static void test_batched(void)
{
    enum { B = 6, M = 37, K = 29, N = 45 };
    static float a[B * M * K], b[K * N], d[B * M * N];
    fill(a, B * M * K, 7), fill(b, K * N, 8);
    fm_tensor ta, tb, td;
    fm_matmul_options o;
    batched_matmul_host(a, b, d, B, M, K, N, &ta, &tb, &td, &o);
    fm_plan *p = NULL;
    CHECK_OK(fm_matmul_plan(ctx_on, &ta, &tb, NULL, NULL, &td, NULL, &o, &p));
    if (!p)
        return;
    CHECK_MSG(strstr(fm_plan_describe(p), "pipelined chunks=6 (1 of 6, last 1) staged=a,b,d") != NULL, "%s",
              fm_plan_describe(p));
    memset(d, 0xff, sizeof d);
    void *ptrs[FM_MATMUL_NSLOTS] = {a, b, NULL, NULL, d};
    CHECK_OK(fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL));
    fm_plan_release(p);
    int bad = 0;
    for (int e = 0; e < B * M * N; e++) {
        const int bi = e / (M * N), i = e / N % M, j = e % N;
        double s = 0, g = 0;
        for (int q = 0; q < K; q++) {
            s += (double)a[(bi * M + i) * K + q] * b[q * N + j];
            g += fabs((double)a[(bi * M + i) * K + q] * b[q * N + j]);
        }
        bad += !(fabs(d[e] - s) <= 2e-3 * g + 1e-5);
    }
    CHECK_MSG(bad == 0, "%d of %d elements off", bad, B * M * N);
}

/* relu + dropout, pipelined and not: the same elements dropped (the chunk's dropout position) */
static void test_dropout(void)
{
    enum { M = 517, N = 96, K = 40 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *d1 = malloc(sizeof(float) * M * N), *d2 = malloc(sizeof(float) * M * N);
    fill(a, M * K, 5), fill(b, K * N, 6);
    fm_context *ctxs[2] = {ctx_on, ctx_off};
    float *outs[2] = {d1, d2};
    for (int w = 0; w < 2; w++) {
        fm_tensor ta, tb, td;
        int64_t sa[2] = {M, K}, sb[2] = {K, N}, sd[2] = {M, N};
        fm_tensor_init(&ta, a, cpu, FM_F32, 2, sa, NULL);
        fm_tensor_init(&tb, b, cpu, FM_F32, 2, sb, NULL);
        fm_tensor_init(&td, outs[w], cpu, FM_F32, 2, sd, NULL);
        fm_matmul_options o;
        fm_matmul_options_init(&o);
        o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT;
        o.dropout = 0.3;
        o.execution = FM_EXECUTION_CUDA;
        fm_plan *p = NULL;
        CHECK_OK(fm_matmul_plan(ctxs[w], &ta, &tb, NULL, NULL, &td, NULL, &o, &p));
        if (!p)
            continue;
        CHECK_MSG((strstr(fm_plan_describe(p), "pipelined chunks=") != NULL) == (w == 0), "%s", fm_plan_describe(p));
        fm_exec_args args;
        fm_exec_args_init(&args);
        args.ints[0] = 1001; /* position */
        args.ints[3] = 42;   /* seed */
        void *ptrs[FM_MATMUL_NSLOTS] = {a, b, NULL, NULL, outs[w]};
        CHECK_OK(fm_plan_execute_args(p, ptrs, FM_MATMUL_NSLOTS, &args, NULL));
        fm_plan_release(p);
    }
    int differ = 0, kept = 0;
    for (int e = 0; e < M * N; e++) {
        differ += (d1[e] == 0) != (d2[e] == 0) || fabsf(d1[e] - d2[e]) > 1e-3f * (1 + fabsf(d2[e]));
        kept += d1[e] != 0;
    }
    CHECK_MSG(differ == 0, "%d of %d elements differ between the pipelined and the whole call", differ, M * N);
    CHECK(kept > M * N / 5 && kept < M * N * 3 / 5); /* relu halves, dropout keeps 0.7 */
    free(a), free(b), free(d1), free(d2);
}

/* out = FFT over `axis` of a rows x cols c64 array on cuda from host data, against the CPU's */
static void fft_case(int64_t rows, int64_t cols, int axis, const char *want)
{
    const size_t n = (size_t)(rows * cols);
    float complex *in = malloc(sizeof *in * n), *out = malloc(sizeof *out * n), *ref = malloc(sizeof *ref * n);
    float *raw = (float *)in;
    fill(raw, 2 * n, 9);
    fm_tensor ti, to, tr;
    int64_t s[2] = {rows, cols};
    fm_tensor_init(&ti, in, cpu, FM_C64, 2, s, NULL);
    fm_tensor_init(&to, out, cpu, FM_C64, 2, s, NULL);
    fm_tensor_init(&tr, ref, cpu, FM_C64, 2, s, NULL);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 1, o.axes[0] = axis;
    o.execution = FM_EXECUTION_CPU;
    CHECK_OK(fm_fft(ctx_cpu, &ti, &tr, NULL, NULL, &o, NULL));
    o.execution = FM_EXECUTION_CUDA;
    fm_plan *p = NULL;
    CHECK_OK(fm_fft_plan(ctx_on, &ti, &to, NULL, NULL, &o, &p));
    if (p) {
        CHECK_MSG(strstr(fm_plan_describe(p), want) != NULL, "%s", fm_plan_describe(p));
        void *ptrs[FM_FFT_NSLOTS] = {in, out};
        memset(out, 0xff, sizeof *out * n);
        CHECK_OK(fm_plan_execute(p, ptrs, FM_FFT_NSLOTS, NULL));
        fm_plan_release(p);
    }
    double err = 0, norm = 0;
    for (size_t e = 0; e < n; e++) {
        err = fmax(err, cabs(out[e] - ref[e]));
        norm = fmax(norm, cabs(ref[e]));
    }
    CHECK_MSG(err <= 1e-5 * norm, "max error %g against max |ref| %g", err, norm);
    free(in), free(out), free(ref);
}

static void test_fft(void)
{
    fft_case(13, 4096, 1, "pipelined chunks=7 (2 of 13, last 1)");
    fft_case(4096, 13, 0, "not pipelined: in's chunks would overlap");
}

/* A portable fill on cuda from host memory (pipelined) against the CPU's, bit for bit. */
static void rng_case(int dist, fm_dtype dt, int ndim, const int64_t *shape, const char *want)
{
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    const size_t bytes = (size_t)numel * fm_dtype_size(dt);
    void *gpu = malloc(bytes), *host = malloc(bytes);
    memset(gpu, 0xab, bytes);
    fm_tensor t;
    fm_tensor_init(&t, gpu, cpu, dt, ndim, shape, NULL);
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = dist;
    o.execution = FM_EXECUTION_CUDA;
    fm_plan *p = NULL;
    CHECK_OK(fm_rng_plan(ctx_on, &t, &o, &p));
    if (p) {
        CHECK_MSG(strstr(fm_plan_describe(p), want) != NULL, "%s", fm_plan_describe(p));
        fm_exec_args a;
        fm_exec_args_init(&a);
        a.ints[0] = 12345, a.ints[3] = 77;
        void *ptrs[1] = {gpu};
        CHECK_OK(fm_plan_execute_args(p, ptrs, 1, &a, NULL));
        fm_plan_release(p);
    }
    fm_tensor_init(&t, host, cpu, dt, ndim, shape, NULL);
    o.execution = FM_EXECUTION_CPU;
    CHECK_OK(fm_rng(ctx_cpu, &t, &o, 77, 12345, NULL));
    size_t first = bytes;
    for (size_t i = 0; i < bytes && first == bytes; i++)
        if (((unsigned char *)gpu)[i] != ((unsigned char *)host)[i])
            first = i;
    CHECK_MSG(first == bytes, "byte %zu (value %zu) differs from the CPU fill", first, first / fm_dtype_size(dt));
    free(gpu), free(host);
}

static void test_rng(void)
{
    const int64_t s2[2] = {1037, 3}, s1[1] = {100003}, s3[1] = {4099};
    rng_case(FM_RNG_NORMAL, FM_F32, 2, s2, "pipelined chunks=8 (130 of 1037, last 127)");
    rng_case(FM_RNG_UNIFORM, FM_F64, 1, s1, "pipelined chunks=8");
    rng_case(FM_RNG_RAW, FM_U32, 1, s3, "pipelined chunks=8");
}

typedef struct job {
    const fm_plan *plan;
    mm *t;
    float *d;
    int ok;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    void *ptrs[FM_MATMUL_NSLOTS] = {j->t->a, j->t->b, j->t->c, j->t->bias, j->d};
    j->ok = 1;
    for (int r = 0; r < 3; r++)
        j->ok &= fm_plan_execute(j->plan, ptrs, FM_MATMUL_NSLOTS, NULL) == FM_OK && mm_close(j->t, j->d);
    return NULL;
}

static void test_auto_and_threads(void)
{
    mm t;
    char desc[FM_DESCRIBE_LEN];
    mm_make(&t, 256, 256, 64, 0);
    CHECK_OK(mm_run(ctx_auto, &t, t.d, desc, sizeof desc));
    CHECK_MSG(strstr(desc, "not pipelined:") != NULL && strstr(desc, "under two chunks") != NULL, "%s", desc);
    CHECK(mm_close(&t, t.d));
    mm_free(&t);
    mm_make(&t, 2048, 2048, 16, 0); /* a small k keeps the host reference quick */
    CHECK_OK(mm_run(ctx_auto, &t, t.d, desc, sizeof desc));
    CHECK_MSG(strstr(desc, "not pipelined: auto: predicted") != NULL, "%s", desc);
    CHECK(mm_close(&t, t.d));
    /* 8192^3 f32 (768 MiB of host memory, never touched: planned only) */
    const int64_t big = 8192, sbig[2] = {big, big};
    float *ba = malloc(sizeof(float) * (size_t)(big * big)), *bb = malloc(sizeof(float) * (size_t)(big * big)),
          *bd = malloc(sizeof(float) * (size_t)(big * big));
    fm_tensor bta, btb, btd;
    fm_tensor_init(&bta, ba, cpu, FM_F32, 2, sbig, NULL);
    fm_tensor_init(&btb, bb, cpu, FM_F32, 2, sbig, NULL);
    fm_tensor_init(&btd, bd, cpu, FM_F32, 2, sbig, NULL);
    fm_matmul_options bo;
    fm_matmul_options_init(&bo);
    fm_plan *bp = NULL;
    for (int e = 0; e < 2 && ba && bb && bd; e++) {
        bo.execution = e ? FM_EXECUTION_BEST : FM_EXECUTION_CUDA;
        CHECK_OK(fm_matmul_plan(ctx_auto, &bta, &btb, NULL, NULL, &btd, NULL, &bo, &bp));
        const char *want = e ? "cuda+xfer(pipelined) " : "pipelined chunks=8 (1024 of 8192, last 1024)";
        CHECK_MSG(bp && strstr(fm_plan_describe(bp), want) != NULL, "%s", bp ? fm_plan_describe(bp) : "");
        fm_plan_release(bp);
        bp = NULL;
    }
    free(ba), free(bb), free(bd);
    /* one plan, four threads: the context's pool serves one call at a time, each result right */
    fm_tensor ta, tb, tc, tbias, td;
    int64_t sa[2] = {t.m, t.k}, sb[2] = {t.k, t.n}, sd[2] = {t.m, t.n}, sbias[1] = {t.n};
    fm_tensor_init(&ta, t.a, cpu, FM_F32, 2, sa, NULL);
    fm_tensor_init(&tb, t.b, cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&tc, t.c, cpu, FM_F32, 2, sd, NULL);
    fm_tensor_init(&tbias, t.bias, cpu, FM_F32, 1, sbias, NULL);
    fm_tensor_init(&td, t.d, cpu, FM_F32, 2, sd, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.beta[0] = 0.5;
    o.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_GELU;
    o.execution = FM_EXECUTION_CUDA;
    fm_plan *p = NULL;
    CHECK_OK(fm_matmul_plan(ctx_on, &ta, &tb, &tc, &tbias, &td, NULL, &o, &p));
    if (p) {
        job jobs[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            jobs[i] = (job){p, &t, malloc(sizeof(float) * (size_t)(t.m * t.n)), 0};
            pthread_create(&th[i], NULL, run_job, &jobs[i]);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            CHECK_MSG(jobs[i].ok, "thread %d", i);
            free(jobs[i].d);
        }
        fm_plan_release(p);
    }
    mm_free(&t);
}

int main(void)
{
    SKIP_WITHOUT_GPU();
    ctx_on = context_with("on");
    ctx_off = context_with("off");
    ctx_auto = context_with(NULL);
    ctx_cpu = context_with(NULL);
    RUN_TESTS(test_matmul, test_batched, test_dropout, test_fft, test_rng, test_auto_and_threads);
    fm_context_destroy(ctx_on);
    fm_context_destroy(ctx_off);
    fm_context_destroy(ctx_auto);
    fm_context_destroy(ctx_cpu);
    TEST_MAIN_RETURN();
}
#else
TEST_MAIN_SKIPPED("built without CUDA")
#endif
