/* test_pipeline_driver.c : the pipelined execute (core/src/pipeline.c) on the CPU, with a stand-in GPU:
 * memory operations on host memory (streams and events that complete at once) through the test seam
 * fm_pipeline_test_device, and fake "cuda" backends computing from the sub-problems' descriptors. What
 * it checks is the driver's data movement: every chunk's rows reach the right place through the pinned
 * ring (8 chunks: the ring of 3 reused, the drain two chunks behind), the remainder chunk has its own
 * plan, whole operands are copied once, an in-place d == c reads its rows before they are written, a
 * batched product goes in batch slabs, the per-call position moves with each chunk, and the resources
 * are freed with the context (the allocation counters return to zero). The ordering between real
 * streams is the GPU test's part (test_pipeline_gpu.c). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "pipeline_test_util.h"
#include "internal.h"
#include "operation.h"
#include "stand_in_gpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t planned_rows[16];
static atomic_int nplanned;

/* ---- fake cuda backends: d = a b + beta c + bias (f32), and out[e] = position + e (f64) ---- */
static fm_status fake_probe(const fm_settings *s, void **state, const char **why) { return FM_OK; }

static fm_status mm_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const fm_problem *p = &plan->problem;
    fm_matmul_geom g;
    fm_matmul_geom_from_problem(p, &g);
    const float *a = ptrs[FM_MATMUL_A], *b = ptrs[FM_MATMUL_B], *c = ptrs[FM_MATMUL_C], *bias = ptrs[FM_MATMUL_BIAS];
    float *d = ptrs[FM_MATMUL_D];
    for (int64_t i = 0; i < g.m; i++)
        for (int64_t j = 0; j < g.n; j++) {
            double s = 0;
            for (int64_t q = 0; q < g.k; q++)
                s += (double)a[i * g.row_stride[FM_MATMUL_A] + q * g.col_stride[FM_MATMUL_A]] *
                     b[q * g.row_stride[FM_MATMUL_B] + j * g.col_stride[FM_MATMUL_B]];
            if (c)
                s += p->u.matmul.beta[0] * c[i * g.row_stride[FM_MATMUL_C] + j * g.col_stride[FM_MATMUL_C]];
            if (bias)
                s += bias[j * g.col_stride[FM_MATMUL_BIAS]];
            d[i * g.row_stride[FM_MATMUL_D] + j * g.col_stride[FM_MATMUL_D]] = (float)s;
        }
    return FM_OK;
}

static fm_status rng_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const int64_t n = fm_tensor_numel(&plan->problem.t[FM_RNG_OUT]);
    double *out = ptrs[FM_RNG_OUT];
    for (int64_t e = 0; e < n; e++)
        out[e] = (double)(args->ints[0] + e);
    return FM_OK;
}

static fm_status fake_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *plan)
{
    for (int i = 0; i < p->nslots; i++)
        if ((p->present & (1u << i)) && p->t[i].device.type != FM_DEVICE_CUDA)
            return fm_fail(FM_ERR_NOT_APPLICABLE, "fake gpu: %s is not on the device", p->slot_names[i]);
    if (p->op == FM_OP_MATMUL) {
        const int n = atomic_fetch_add(&nplanned, 1);
        if (n < 16)
            planned_rows[n] = p->t[FM_MATMUL_D].shape[p->t[FM_MATMUL_D].ndim - 2];
        plan->execute = mm_execute;
    } else {
        plan->execute = rng_execute;
    }
    fm_plan_set_describe(plan, "%s cuda/fakegpu", fm_op_name(p->op));
    return FM_OK;
}

static const fm_backend fake_backend = {.name = "fakegpu", .device = FM_DEVICE_CUDA,
                                        .ops = 1u << FM_OP_MATMUL | 1u << FM_OP_RNG, .priority = 1000000,
                                        .probe = fake_probe, .plan = fake_plan};


static fm_context *make_context(const char *pipeline)
{
    setenv("FUSEMATH_PIPELINE", pipeline, 1);
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    unsetenv("FUSEMATH_PIPELINE");
    if (ctx)
        CHECK_OK(fm_context_register_backend(ctx, &fake_backend));
    return ctx;
}

static void test_matmul(void)
{
    enum { M = 37, N = 23, K = 19 };
    static float a[M * K], b[K * N], c[M * N], bias[N], d[M * N], keep[M * N];
    static double ref[M * N];
    fill(a, M * K, 1), fill(b, K * N, 2), fill(c, M * N, 3), fill(bias, N, 4);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.5 * c[i * N + j] + bias[j];
            for (int q = 0; q < K; q++)
                s += (double)a[i * K + q] * b[q * N + j];
            ref[i * N + j] = s;
        }
    fm_context *ctx = make_context("on");
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    fm_tensor ta, tb, tc, tbias, td;
    int64_t sa[2] = {M, K}, sb[2] = {K, N}, sd[2] = {M, N}, sbias[1] = {N};
    fm_tensor_init(&ta, a, cpu, FM_F32, 2, sa, NULL);
    fm_tensor_init(&tb, b, cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&tc, c, cpu, FM_F32, 2, sd, NULL);
    fm_tensor_init(&tbias, bias, cpu, FM_F32, 1, sbias, NULL);
    fm_tensor_init(&td, d, cpu, FM_F32, 2, sd, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.beta[0] = 0.5;
    o.epilogue = FM_EPILOGUE_BIAS;
    o.execution = FM_EXECUTION_CUDA;
    fm_plan *p = NULL;
    atomic_store(&nplanned, 0);
    CHECK_OK(fm_matmul_plan(ctx, &ta, &tb, &tc, &tbias, &td, NULL, &o, &p));
    if (!p) {
        fm_context_destroy(ctx);
        return;
    }
    CHECK_MSG(strstr(fm_plan_describe(p), "matmul cuda/fakegpu pipelined chunks=8 (5 of 37, last 2) "
                                          "staged=a,b,c,bias,d") != NULL, "%s", fm_plan_describe(p));
    CHECK(atomic_load(&nplanned) == 2 && planned_rows[0] == 5 && planned_rows[1] == 2);
    for (int round = 0; round < 2; round++) { /* the second call reuses the pool and its ring */
        memset(d, 0xff, sizeof d);
        atomic_store(&copies_async, 0);
        void *ptrs[FM_MATMUL_NSLOTS] = {a, b, c, bias, d};
        CHECK_OK(fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL));
        double err = 0;
        for (int e = 0; e < M * N; e++)
            err = fmax(err, fabs(d[e] - ref[e]));
        CHECK_MSG(err < 1e-5, "round %d: max error %g", round, err);
        CHECK(atomic_load(&copies_async) == 8 * 3); /* a and c in, d back, per chunk; b and bias whole */
        CHECK(atomic_load(&live_device) == 0);      /* the device copies freed at the end of each call */
    }
    /* d == c: each chunk reads its rows of c (copied in for d too) before its results land there */
    memcpy(keep, c, sizeof c);
    void *inplace[FM_MATMUL_NSLOTS] = {a, b, c, bias, c};
    CHECK_OK(fm_plan_execute(p, inplace, FM_MATMUL_NSLOTS, NULL));
    double err = 0;
    for (int e = 0; e < M * N; e++)
        err = fmax(err, fabs(c[e] - ref[e]));
    CHECK_MSG(err < 1e-5, "in place: max error %g", err);
    memcpy(c, keep, sizeof c);
    fm_plan_release(p);
    CHECK(atomic_load(&live_pinned) == 1 && atomic_load(&streams) == 3); /* the context's, until it goes */
    fm_context_destroy(ctx);
    CHECK(atomic_load(&live_pinned) == 0 && atomic_load(&streams) == 0 && atomic_load(&events) == 0);
    /* off: the same problem goes to whole staging, which knows no stand-in: without a GPU it says none is
     * there; with one it stages onto it (planned only here) */
    ctx = make_context("off");
    p = NULL;
    const fm_status s = fm_matmul_plan(ctx, &ta, &tb, &tc, &tbias, &td, NULL, &o, &p);
    if (fm_cuda_device_count() == 0)
        CHECK(s == FM_ERR_UNAVAILABLE);
    else
        CHECK_MSG(s == FM_OK && strstr(fm_plan_describe(p), "(not pipelined: FUSEMATH_PIPELINE=off)"), "%s",
                  p ? fm_plan_describe(p) : "");
    fm_plan_release(p);
    fm_context_destroy(ctx);
}

/* 6 products (6, 7, 5) @ (5, 4): batch slabs of one product each (the fake computes one product a call) */
static void test_batched(void)
{
    enum { B = 6, M = 7, K = 5, N = 4 };
    static float a[B * M * K], b[K * N], d[B * M * N];
    fill(a, B * M * K, 5), fill(b, K * N, 6);
    fm_context *ctx = make_context("on");
    fm_tensor ta, tb, td;
    fm_matmul_options o;
    batched_matmul_host(a, b, d, B, M, K, N, &ta, &tb, &td, &o);
    fm_plan *p = NULL;
    CHECK_OK(fm_matmul_plan(ctx, &ta, &tb, NULL, NULL, &td, NULL, &o, &p));
    if (p) {
        CHECK_MSG(strstr(fm_plan_describe(p), "pipelined chunks=6 (1 of 6, last 1) staged=a,b,d") != NULL, "%s",
                  fm_plan_describe(p));
        memset(d, 0xff, sizeof d);
        void *ptrs[FM_MATMUL_NSLOTS] = {a, b, NULL, NULL, d};
        CHECK_OK(fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL));
        double err = 0;
        for (int e = 0; e < B * M * N; e++) {
            const int bi = e / (M * N), i = e / N % M, j = e % N;
            double s = 0;
            for (int q = 0; q < K; q++)
                s += (double)a[(bi * M + i) * K + q] * b[q * N + j];
            err = fmax(err, fabs(d[e] - s));
        }
        CHECK_MSG(err < 1e-5, "max error %g", err);
        fm_plan_release(p);
    }
    fm_context_destroy(ctx);
}

static void test_rng_positions(void)
{
    enum { R = 29, C = 3 };
    static double out[R * C];
    fm_context *ctx = make_context("on");
    fm_tensor t;
    int64_t s[2] = {R, C};
    fm_tensor_init(&t, out, (fm_device){FM_DEVICE_CPU, 0}, FM_F64, 2, s, NULL);
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.execution = FM_EXECUTION_CUDA;
    fm_plan *p = NULL;
    CHECK_OK(fm_rng_plan(ctx, &t, &o, &p));
    if (p) {
        CHECK_MSG(strstr(fm_plan_describe(p), "pipelined chunks=8 (4 of 29, last 1)") != NULL, "%s",
                  fm_plan_describe(p));
        fm_exec_args args;
        fm_exec_args_init(&args);
        args.ints[0] = 12345;
        void *ptrs[1] = {out};
        CHECK_OK(fm_plan_execute_args(p, ptrs, 1, &args, NULL));
        int bad = 0;
        for (int e = 0; e < R * C; e++)
            bad += out[e] != 12345.0 + e;
        CHECK_MSG(bad == 0, "%d values not at their stream position", bad);
        fm_plan_release(p);
    }
    fm_context_destroy(ctx);
}

/* 4097 x 4097 f32 from an outer product, 8 copy threads: each chunk's 8,407,044 bytes are not a
 * multiple of 8 * 64, the case whose last bytes the parallel host copy once dropped */
static void test_copy_tail(void)
{
    enum { M = 4097, N = 4097 };
    float *a = malloc(sizeof(float) * M), *b = malloc(sizeof(float) * N), *d = malloc(sizeof(float) * M * N);
    CHECK(a && b && d);
    fill(a, M, 1), fill(b, N, 2);
    setenv("FUSEMATH_PIPELINE_THREADS", "8", 1);
    fm_context *ctx = make_context("on");
    unsetenv("FUSEMATH_PIPELINE_THREADS");
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    fm_tensor ta, tb, td;
    int64_t sa[2] = {M, 1}, sb[2] = {1, N}, sd[2] = {M, N};
    fm_tensor_init(&ta, a, cpu, FM_F32, 2, sa, NULL);
    fm_tensor_init(&tb, b, cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&td, d, cpu, FM_F32, 2, sd, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.execution = FM_EXECUTION_CUDA;
    fm_plan *p = NULL;
    CHECK_OK(fm_matmul_plan(ctx, &ta, &tb, NULL, NULL, &td, NULL, &o, &p));
    CHECK_MSG(strstr(fm_plan_describe(p), "pipelined") != NULL, "%s", fm_plan_describe(p));
    memset(d, 0xff, sizeof(float) * M * N); /* NaN wherever nothing is written */
    void *ptrs[FM_MATMUL_NSLOTS] = {a, b, NULL, NULL, d};
    CHECK_OK(fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL));
    int64_t bad = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            bad += !(fabs(d[i * N + j] - (double)a[i] * b[j]) <= 1e-5 * (1.0 + fabs((double)a[i] * b[j])));
    CHECK_MSG(bad == 0, "%lld elements of d wrong", (long long)bad);
    fm_plan_release(p);
    fm_context_destroy(ctx);
    free(a), free(b), free(d);
}

int main(void)
{
    fm_pipeline_test_device(&stand_in_gpu);
    RUN_TEST(test_copy_tail);
    RUN_TEST(test_matmul);
    RUN_TEST(test_batched);
    RUN_TEST(test_rng_positions);
    fm_pipeline_test_device(NULL);
    TEST_MAIN_RETURN();
}
