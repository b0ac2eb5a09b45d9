/* test_split_gpu.c : split execution on a real GPU (label gpu; "skipped: no GPU" without one). The context
 * gets a made-up machine profile in which the cpu's time of each problem equals its GPU copies' time (the
 * GPU's compute nearly free), so that best splits every problem here near its middle; each split result
 * (host operands, execution best) is compared with the unsplit cpu one: a batched f32 matmul with bias and
 * relu, a row-panel one, a batched c64 FFT (close), RNG fills (bit for bit: portable mode draws the same
 * values on both devices, each part at its stream position); FUSEMATH_SPLIT=off plans the same problem on
 * one device. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "pipeline_test_util.h"
#include "internal.h"
#include "operation.h"
#include "profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Linear curves (one point at work 1) for op in dtype: the cpu at rc units/s with the context's threads,
 * the GPU at 1e16; copies at 1e10 bytes/s. */
static void add_curves(fm_profile *pf, fm_op op, fm_dtype dt, double rc)
{
    for (int dev = 0; dev < 2; dev++) {
        fm_rate_curve *c = &pf->curves[pf->ncurves++];
        *c = (fm_rate_curve){.op = op, .dtype = dt, .device = dev ? FM_DEVICE_CUDA : FM_DEVICE_CPU, .n = 1};
        c->work[0] = 1, c->seconds[0] = 1 / (dev ? 1e16 : rc);
    }
}

static fm_context *context_with(const char *split, double mm_rate, double fft_rate, double rng_rate)
{
    if (split)
        setenv("FUSEMATH_SPLIT", split, 1);
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    unsetenv("FUSEMATH_SPLIT");
    fm_profile *pf = calloc(1, sizeof *pf);
    if (!ctx || !pf) {
        free(pf);
        return ctx;
    }
    pf->threads = fm_context_get_num_threads(ctx);
    snprintf(pf->source, sizeof pf->source, "test_split_gpu");
    pf->copy_rate[0] = pf->copy_rate[1] = 1e10;
    add_curves(pf, FM_OP_MATMUL, FM_F32, mm_rate);
    add_curves(pf, FM_OP_FFT, FM_C64, fft_rate);
    add_curves(pf, FM_OP_RNG, FM_F32, rng_rate);
    add_curves(pf, FM_OP_RNG, FM_F64, rng_rate);
    for (int op = 0; op < FM_OP_COUNT_; op++)
        pf->concurrency[op][0] = pf->concurrency[op][1] = 1; /* neither side slows the other */
    fm_context_profile_install(ctx, pf);
    return ctx;
}



/* d = relu(a b + bias), a (batch, m, k) or (m, k): split (best) against the cpu */
static void matmul_case(int batch, int64_t m, int64_t k, int64_t n)
{
    const int64_t rows = (batch ? batch : 1) * m;
    float *a = malloc((size_t)(rows * k) * 4), *b = malloc((size_t)(k * n) * 4), *bias = malloc((size_t)n * 4);
    float *d0 = malloc((size_t)(rows * n) * 4), *d1 = malloc((size_t)(rows * n) * 4);
    const double bytes = 4.0 * (double)(rows * k + k * n + rows * n), flops = 2.0 * (double)(rows * n * k);
    fm_context *ctx = context_with(NULL, flops / (bytes / 1e10), 1e9, 1e9), *off = context_with("off", flops / (bytes / 1e10), 1e9, 1e9);
    if (!a || !b || !bias || !d0 || !d1 || !ctx || !off) {
        CHECK(0);
        goto done;
    }
    fill(a, (size_t)(rows * k), 1), fill(b, (size_t)(k * n), 2), fill(bias, (size_t)n, 3);
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    fm_tensor ta, tb, tbias, td;
    int64_t sa[3] = {batch, m, k}, sd[3] = {batch, m, n}, sb[2] = {k, n};
    const int nd = batch ? 3 : 2;
    fm_tensor_init(&ta, a, cpu, FM_F32, nd, batch ? sa : sa + 1, NULL);
    fm_tensor_init(&tb, b, cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&tbias, bias, cpu, FM_F32, 1, &n, NULL);
    fm_tensor_init(&td, d0, cpu, FM_F32, nd, batch ? sd : sd + 1, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU;
    o.execution = FM_EXECUTION_CPU;
    CHECK_OK(fm_matmul(ctx, &ta, &tb, NULL, &tbias, &td, NULL, &o, NULL));
    o.execution = FM_EXECUTION_BEST;
    td.data = d1;
    fm_plan *p = NULL, *q = NULL;
    CHECK_OK(fm_matmul_plan(ctx, &ta, &tb, NULL, &tbias, &td, NULL, &o, &p));
    CHECK_OK(fm_matmul_plan(off, &ta, &tb, NULL, &tbias, &td, NULL, &o, &q));
    if (p && q) {
        printf("    %s\n    off: %s\n", fm_plan_describe(p), fm_plan_describe(q));
        CHECK_MSG(strstr(fm_plan_describe(p), "best=split cpu "), "%s", fm_plan_describe(p));
        CHECK_MSG(!strstr(fm_plan_describe(q), "best=split") && strstr(fm_plan_describe(q), " best="), "%s",
                  fm_plan_describe(q));
        for (int round = 0; round < 2; round++) {
            memset(d1, 0xff, (size_t)(rows * n) * 4);
            void *ptrs[FM_MATMUL_NSLOTS] = {a, b, NULL, bias, d1};
            CHECK_OK(fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL));
            CHECK_MSG(max_rel(d1, d0, (size_t)(rows * n)) < 1e-4, "round %d: %g", round,
                      max_rel(d1, d0, (size_t)(rows * n)));
        }
    }
    fm_plan_release(p);
    fm_plan_release(q);
done:
    fm_context_destroy(ctx);
    fm_context_destroy(off);
    free(a), free(b), free(bias), free(d0), free(d1);
}

static void test_matmul(void)
{
    matmul_case(24, 256, 256, 256); /* batch slabs: 24 MiB moved, the GPU part pipelined */
    matmul_case(0, 3001, 512, 384);  /* row panels */
}

/* 48 transforms of 2^16 points (c64, the last axis) */
static void test_fft(void)
{
    enum { T = 48, L = 1 << 16 };
    const size_t n = 2 * (size_t)T * L;
    float *in = malloc(n * 4), *o0 = malloc(n * 4), *o1 = malloc(n * 4);
    const double work = 5.0 * T * L * 16, bytes = 16.0 * T * L;
    fm_context *ctx = context_with(NULL, 1e9, work / (bytes / 1e10), 1e9);
    if (!in || !o0 || !o1 || !ctx) {
        CHECK(0);
        goto done;
    }
    fill(in, n, 5);
    fm_tensor ti, to;
    fm_fft_options o;
    CHECK_OK(fft_rows_on_cpu(ctx, in, o0, T, L, &ti, &to, &o));
    o.execution = FM_EXECUTION_BEST;
    to.data = o1;
    fm_plan *p = NULL;
    CHECK_OK(fm_fft_plan(ctx, &ti, &to, NULL, NULL, &o, &p));
    if (p) {
        printf("    %s\n", fm_plan_describe(p));
        CHECK_MSG(strstr(fm_plan_describe(p), "best=split cpu "), "%s", fm_plan_describe(p));
        memset(o1, 0xff, n * 4);
        void *ptrs[FM_FFT_NSLOTS] = {in, o1};
        CHECK_OK(fm_plan_execute(p, ptrs, FM_FFT_NSLOTS, NULL));
        CHECK_MSG(max_rel(o1, o0, n) < 1e-5, "%g", max_rel(o1, o0, n));
    }
    fm_plan_release(p);
done:
    fm_context_destroy(ctx);
    free(in), free(o0), free(o1);
}

/* normal f32 (4097, 1001) and uniform f64 (2^23 + 3): the split fill's bits are the cpu fill's */
static void rng_case(fm_dtype dt, int ndim, const int64_t *shape, int distribution)
{
    fm_tensor t;
    fm_tensor_init(&t, NULL, (fm_device){FM_DEVICE_CPU, 0}, dt, ndim, shape, NULL);
    const size_t n = (size_t)fm_tensor_numel(&t), bytes = n * fm_dtype_size(dt);
    void *v0 = malloc(bytes), *v1 = malloc(bytes);
    fm_context *ctx = context_with(NULL, 1e9, 1e9, (double)n / ((double)bytes / 1e10));
    if (!v0 || !v1 || !ctx) {
        CHECK(0);
        goto done;
    }
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = distribution;
    o.execution = FM_EXECUTION_CPU;
    fm_exec_args args;
    fm_exec_args_init(&args);
    args.ints[0] = 12345;
    args.ints[3] = 7;
    fm_plan *whole = NULL, *p = NULL;
    CHECK_OK(fm_rng_plan(ctx, &t, &o, &whole));
    o.execution = FM_EXECUTION_BEST;
    CHECK_OK(fm_rng_plan(ctx, &t, &o, &p));
    if (whole && p) {
        printf("    %s\n", fm_plan_describe(p));
        CHECK_MSG(strstr(fm_plan_describe(p), "best=split cpu "), "%s", fm_plan_describe(p));
        memset(v1, 0xff, bytes);
        void *p0[1] = {v0}, *p1[1] = {v1};
        CHECK_OK(fm_plan_execute_args(whole, p0, 1, &args, NULL));
        CHECK_OK(fm_plan_execute_args(p, p1, 1, &args, NULL));
        CHECK_MSG(memcmp(v0, v1, bytes) == 0, "the split fill's bits differ from the cpu fill's");
    }
    fm_plan_release(whole);
    fm_plan_release(p);
done:
    fm_context_destroy(ctx);
    free(v0), free(v1);
}

static void test_rng(void)
{
    const int64_t s2[2] = {4097, 1001}, s1[1] = {(1 << 23) + 3};
    rng_case(FM_F32, 2, s2, FM_RNG_NORMAL);
    rng_case(FM_F64, 1, s1, FM_RNG_UNIFORM);
}

GPU_TEST_MAIN(NULL, test_matmul, test_fft, test_rng)
