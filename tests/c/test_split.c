/* test_split.c : split execution (core/src/split.c) without a GPU.
 * - The decision, pure: fm_split_choose's k against a brute-force search over every k of linear and
 *   latency-bound models, the 10% rule on both sides of it, one index never split; fm_split_decide with a
 *   fake machine profile against the prediction written out here (cpu part at the lowered threads, GPU
 *   part with its operands' copies), a GPU too fast to share with, and outputs that would overlap.
 * - The driver on the CPU through the stand-in GPU seam (fm_pipeline_test_device): memory operations on
 *   host memory and a fake "cuda" backend that runs the CPU backends' plan of its sub-problem, so that a
 *   split result must equal the unsplit one: matmul with c and bias (batch slabs and row panels), a batched
 *   FFT (also against a float64 DFT), RNG bits (exact, at their stream positions). A failure in either part
 *   is reported with its message (the one that failed first when both do) after the other part is joined
 *   (its rows are written); a part no backend plans leaves the problem unsplit on best's single device; two
 *   threads execute one split plan at once; the stand-in's memory is all freed.
 * describe() says the split. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "pipeline_test_util.h"
#include "internal.h"
#include "operation.h"
#include "profile.h"
#include "split.h"
#include "stand_in_gpu.h" /* memory on the host, streams and events that complete at once */

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the decision ---- */
typedef struct linear {
    double cpu_lat, cpu_per, gpu_lat, gpu_per;
    int64_t extent;
} linear;
static double lin_cpu(void *u, int64_t k)
{
    const linear *l = u;
    return l->cpu_lat + l->cpu_per * (double)k;
}
static double lin_gpu(void *u, int64_t k)
{
    const linear *l = u;
    return l->gpu_lat + l->gpu_per * (double)(l->extent - k);
}

static double brute(const linear *l, int64_t *kbest)
{
    double t = INFINITY;
    for (int64_t k = 1; k < l->extent; k++) {
        const double tk = fmax(lin_cpu((void *)l, k), lin_gpu((void *)l, k));
        if (tk < t)
            t = tk, *kbest = k;
    }
    return t;
}

static void test_choose(void)
{
    linear l = {0, 1.0, 0, 0.6, 8}; /* cpu 8, GPU 4.8 whole: 3 indices on the cpu, 5 on the GPU, 3 each */
    fm_split_model m = {lin_cpu, lin_gpu, &l};
    double t;
    CHECK(fm_split_choose(8, 4.8, &m, &t) == 3 && fabs(t - 3.0) < 1e-12);
    /* the 10% rule: GPU 10x faster: best split 9.1 against 10 (1.099x): none; 8x: 11.125 against 12.5 */
    l = (linear){0, 1.0, 0, 0.1, 100};
    CHECK(fm_split_choose(100, 10.0, &m, &t) == 0 && fabs(t - 9.1) < 1e-9);
    l.gpu_per = 0.125;
    CHECK(fm_split_choose(100, 12.5, &m, &t) == 11 && fabs(t - 11.125) < 1e-9);
    CHECK(fm_split_choose(100, 11.125 * 1.10, &m, &t) == 11); /* exactly 10%: split */
    CHECK(fm_split_choose(100, 11.125 * 1.0999, &m, &t) == 0);
    /* one index, none: nothing to split */
    CHECK(fm_split_choose(1, 1.0, &m, &t) == 0 && isinf(t));
    CHECK(fm_split_choose(0, 1.0, &m, &t) == 0);
    /* against every k: latencies, either side much faster, crossings at either end */
    const linear cases[] = {{0, 1, 0, 1, 2},      {0.5, 1, 0, 1, 2},  {0, 1, 3, 0.2, 17}, {2, 0.01, 0, 1, 1000},
                            {0, 1, 0, 0.01, 1000}, {1e-3, 2e-4, 5e-3, 1e-4, 4096}, {0, 3, 0, 1, 7},
                            {0.2, 0.1, 0.2, 0.1, 64},   {0, 1, 0, 1, 1025},  {0, 1e-6, 1e-4, 2e-6, 1 << 20},
                            {0, 1, 0, 1, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        l = cases[i];
        int64_t kb = 0;
        const double tb = brute(&l, &kb);
        const double single = fmin(lin_cpu(&l, l.extent), l.gpu_lat + l.gpu_per * (double)l.extent);
        const int64_t k = fm_split_choose(l.extent, single, &m, &t);
        /* over FM_SPLIT_GRID indices, k is found on a grid: within a grid step of either part's slope */
        const double step = (double)((l.extent - 1 + FM_SPLIT_GRID - 1) / FM_SPLIT_GRID);
        const double tol = l.extent <= FM_SPLIT_GRID + 1 ? 1e-12 * tb : step * fmax(l.cpu_per, l.gpu_per);
        CHECK_MSG(t >= tb - 1e-12 * tb && t <= tb + tol, "case %zu: bisection %g, brute force %g (k %lld)", i, t, tb,
                  (long long)kb);
        CHECK_MSG(k == 0 ? tb * FM_SPLIT_MIN_GAIN > single : tb * FM_SPLIT_MIN_GAIN <= single && k >= 1 &&
                                                                 k < l.extent,
                  "case %zu: k %lld, split %g, single %g", i, (long long)k, tb, single);
    }
    CHECK(fm_split_cpu_threads(16, 8, 1) == 8 && fm_split_cpu_threads(4, 8, 1) == 1 &&
          fm_split_cpu_threads(16, 8, 0) == 15 && fm_split_cpu_threads(2, 8, 1) == 1 && fm_split_cpu_threads(1, 8, 0) == 1);
    /* the reserve is the context's staging threads, not a fixed 8 */
    CHECK(fm_split_cpu_threads(8, 4, 1) == 4 && fm_split_cpu_threads(16, 2, 1) == 14 &&
          fm_split_cpu_threads(16, 12, 1) == 4 && fm_split_cpu_threads(8, 4, 0) == 7);
}

/* A profile whose curves are linear (one point at work 1): cpu matmul f32 rc flop/s at 4 threads, GPU rg,
 * copies at rate bytes/s each way without latency. */
static void linear_profile(fm_profile *pf, fm_op op, fm_dtype dt, double rc, double rg, double rate)
{
    memset(pf, 0, sizeof *pf);
    pf->threads = 4;
    pf->ncurves = 2;
    pf->curves[0] = (fm_rate_curve){.op = op, .dtype = dt, .device = FM_DEVICE_CPU, .n = 1};
    pf->curves[0].work[0] = 1, pf->curves[0].seconds[0] = 1 / rc;
    pf->curves[1] = (fm_rate_curve){.op = op, .dtype = dt, .device = FM_DEVICE_CUDA, .n = 1};
    pf->curves[1].work[0] = 1, pf->curves[1].seconds[0] = 1 / rg;
    pf->copy_rate[0] = pf->copy_rate[1] = rate;
    pf->concurrency[op][0] = pf->concurrency[op][1] = 1; /* neither side slows the other */
}

static void test_decide(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx)
        return;
    enum { B = 8, N = 64 };
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    fm_tensor ta, tb, td;
    int64_t s3[3] = {B, N, N}, s2[2] = {N, N};
    fm_tensor_init(&ta, NULL, cpu, FM_F32, 3, s3, NULL);
    fm_tensor_init(&tb, NULL, cpu, FM_F32, 2, s2, NULL);
    fm_tensor_init(&td, NULL, cpu, FM_F32, 3, s3, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.execution = FM_EXECUTION_CPU;
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&ta, &tb, NULL, NULL, &td};
    const fm_operation *op = fm_operation_for(FM_OP_MATMUL);
    fm_problem q;
    fm_attachments att;
    CHECK_OK(fm_operation_build(ctx, op, ts, &o, &q, &att));
    fm_profile pf;
    const double rc = 1e11, rg = 4e11, rate = 1e10, W = 2.0 * N * N * N * B;
    linear_profile(&pf, FM_OP_MATMUL, FM_F32, rc, rg, rate);
    fm_split_query sq = {&pf, op, &q, W, FM_F32, 4, {FM_DEVICE_CUDA, 0}, FM_PIPELINE_AUTO, 0, 8, 0};
    /* written out: the cpu part at 3 of the 4 threads the curve was measured with; the GPU part's a and d
     * indices there and back, b whole */
    const double cpu_k = W / B / rc * 4.0 / 3.0, gpu_k = W / B / rg + 2.0 * N * N * 4 / rate, b_in = N * N * 4 / rate;
    const double single = fmin(W / rc, B * gpu_k + b_in);
    double tbest = INFINITY;
    int64_t kb = 0;
    for (int64_t k = 1; k < B; k++)
        if (fmax(k * cpu_k, b_in + (B - k) * gpu_k) < tbest) {
            tbest = fmax(k * cpu_k, b_in + (B - k) * gpu_k);
            kb = k;
        }
    double t = 0;
    int threads = 0;
    const char *why = "";
    const int64_t k = fm_split_decide(&sq, single, &t, &threads, &why);
    CHECK_MSG(k == kb && kb == 3 && fabs(t - tbest) < 1e-9 * tbest && threads == 3, "k %lld (%lld), t %g (%g): %s",
              (long long)k, (long long)kb, t, tbest, why);
    /* the sides slow each other: the cpu part to 0.6 of its speed, the copies to 0.95 of theirs (the whole
     * GPU part counts at that speed): k moves to where the slowed parts meet */
    pf.concurrency[FM_OP_MATMUL][0] = 0.6, pf.concurrency[FM_OP_MATMUL][1] = 0.95;
    double tslow = INFINITY;
    int64_t ks = 0;
    for (int64_t j = 1; j < B; j++)
        if (fmax(j * cpu_k / 0.6, (b_in + (B - j) * gpu_k) / 0.95) < tslow) {
            tslow = fmax(j * cpu_k / 0.6, (b_in + (B - j) * gpu_k) / 0.95);
            ks = j;
        }
    const int64_t k_slow = fm_split_decide(&sq, single, &t, &threads, &why);
    CHECK_MSG(ks == 2 && k_slow == ks && fabs(t - tslow) < 1e-9 * tslow, "k %lld (%lld), t %g (%g): %s",
              (long long)k_slow, (long long)ks, t, tslow, why);
    /* ... and so much that no split gains 10% */
    pf.concurrency[FM_OP_MATMUL][0] = pf.concurrency[FM_OP_MATMUL][1] = 0.3;
    CHECK_MSG(fm_split_decide(&sq, single, &t, &threads, &why) == 0 && strstr(why, "under 10%"), "%s", why);
    /* a profile without the concurrent run never splits */
    pf.concurrency[FM_OP_MATMUL][0] = pf.concurrency[FM_OP_MATMUL][1] = 0;
    CHECK_MSG(fm_split_decide(&sq, single, &t, &threads, &why) == 0 && strstr(why, "no concurrent run"), "%s", why);
    /* a GPU part that pipeline.c cuts (32 MiB of a moved): its copy threads are reserved, a call of 16
     * threads leaves the cpu part 8; with FUSEMATH_PIPELINE=off only the staged copy's one (15) */
    {
        int64_t l3[3] = {B, 1024, 1024}, l2[2] = {1024, 1024};
        fm_tensor la, lb, ld;
        fm_tensor_init(&la, NULL, cpu, FM_F32, 3, l3, NULL);
        fm_tensor_init(&lb, NULL, cpu, FM_F32, 2, l2, NULL);
        fm_tensor_init(&ld, NULL, cpu, FM_F32, 3, l3, NULL);
        const fm_tensor *lts[FM_MATMUL_NSLOTS] = {&la, &lb, NULL, NULL, &ld};
        fm_problem lq;
        CHECK_OK(fm_operation_build(ctx, op, lts, &o, &lq, &att));
        fm_profile lpf;
        linear_profile(&lpf, FM_OP_MATMUL, FM_F32, 1e12, 1e13, 5e10);
        const double LW = 2.0 * 1024 * 1024 * 1024 * B;
        fm_split_query lsq = {&lpf, op, &lq, LW, FM_F32, 16, {FM_DEVICE_CUDA, 0}, FM_PIPELINE_AUTO, 0, 8, 0};
        const double lsingle = fmin(LW / 1e12 / 4, LW / 1e13 + (2.0 * B + 1) * 1024 * 1024 * 4 / 5e10);
        CHECK_MSG(fm_split_decide(&lsq, lsingle, &t, &threads, &why) > 0 && threads == 8, "threads %d: %s", threads,
                  why);
        lsq.pipeline_mode = FM_PIPELINE_OFF;
        CHECK_MSG(fm_split_decide(&lsq, lsingle, &t, &threads, &why) > 0 && threads == 15, "threads %d: %s", threads,
                  why);
    }
    /* a GPU 20x faster (and its copies): an ideal split gains 5%: none */
    linear_profile(&pf, FM_OP_MATMUL, FM_F32, rc, 20 * rg, 20 * rate);
    CHECK(fm_split_decide(&sq, fmin(W / rc, W / (20 * rg) + 3.0 * B * N * N * 4 / (20 * rate)), &t, &threads, &why) == 0 &&
          strstr(why, "under 10%"));
    /* column-major d split by rows: the parts' outputs interleave in memory */
    linear_profile(&pf, FM_OP_MATMUL, FM_F32, rc, rg, rate);
    int64_t cm[2] = {1, N};
    fm_tensor_init(&ta, NULL, cpu, FM_F32, 2, s2, NULL);
    fm_tensor_init(&td, NULL, cpu, FM_F32, 2, s2, cm);
    CHECK_OK(fm_operation_build(ctx, op, ts, &o, &q, &att));
    CHECK_MSG(fm_split_decide(&sq, 1.0, &t, &threads, &why) == 0 && strstr(why, "overlap"), "%s", why);
    /* one index: an RNG fill of shape (1, 1) (a (1, 4096) fill cuts along its second axis) */
    const fm_operation *rop = fm_operation_for(FM_OP_RNG);
    int64_t sr[2] = {1, 1};
    fm_tensor tr;
    fm_tensor_init(&tr, NULL, cpu, FM_F32, 2, sr, NULL);
    fm_rng_options ro;
    fm_rng_options_init(&ro);
    ro.execution = FM_EXECUTION_CPU;
    const fm_tensor *rts[FM_RNG_NSLOTS] = {&tr};
    CHECK_OK(fm_operation_build(ctx, rop, rts, &ro, &q, &att));
    linear_profile(&pf, FM_OP_RNG, FM_F32, 1e9, 1e9, 1e12);
    sq.op = rop, sq.work = 1;
    why = "";
    CHECK_MSG(fm_split_decide(&sq, 1.0, &t, &threads, &why) == 0 && strstr(why, "one index"), "%s", why);
    fm_context_destroy(ctx);
}

/* planted faults: a part fails (after a delay, so that the order of two failures is known) */
static atomic_int gpu_fails, gpu_delay_ms, cpu_fake_plans, cpu_delay_ms, cpu_refuse_once;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static fm_status fake_probe(const fm_settings *s, void **state, const char **why) { return FM_OK; }

/* "cuda": the CPU backends' plan of the same problem on the stand-in's (host) memory */
static fm_status gpu_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    sleep_ms(atomic_load(&gpu_delay_ms));
    if (atomic_load(&gpu_fails))
        return fm_fail(FM_ERR_INTERNAL, "fake gpu: planted gpu failure");
    const fm_plan *inner = plan->impl;
    return inner->execute(inner, ptrs, args, NULL);
}
static void gpu_destroy(void *impl) { fm_plan_release(impl); }
static fm_status gpu_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *plan)
{
    fm_problem q = *p;
    for (int i = 0; i < p->nslots; i++) {
        if ((p->present & (1u << i)) && p->t[i].device.type != FM_DEVICE_CUDA)
            return fm_fail(FM_ERR_NOT_APPLICABLE, "fake gpu: %s is not on the device", p->slot_names[i]);
        q.t[i].device = (fm_device){FM_DEVICE_CPU, 0};
    }
    q.exec_device = (fm_device){FM_DEVICE_CPU, 0};
    fm_problem_key_alignment(&q);
    fm_plan *inner = NULL;
    fm_status s = fm_plan_problem_with(ctx, &q, plan->attach, &inner);
    if (s != FM_OK)
        return s;
    plan->impl = inner;
    plan->execute = gpu_execute;
    plan->destroy_impl = gpu_destroy;
    memcpy(plan->required_align, inner->required_align, sizeof plan->required_align);
    fm_plan_set_describe(plan, "fakegpu(%.200s)", inner->describe);
    return FM_OK;
}
static const fm_backend fake_gpu_backend = {.name = "fakegpu", .device = FM_DEVICE_CUDA,
                                            .ops = 1u << FM_OP_MATMUL | 1u << FM_OP_FFT | 1u << FM_OP_RNG,
                                            .priority = 1000000, .probe = fake_probe, .plan = gpu_plan};

/* a cpu backend that plans the one problem offered while cpu_fake_plans is set (the split's cpu part,
 * planned before the GPU part's), and fails */
static fm_status cpu_fail_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    sleep_ms(atomic_load(&cpu_delay_ms));
    return fm_fail(FM_ERR_INTERNAL, "fake cpu: planted cpu failure");
}
static fm_status cpu_fail_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *plan)
{
    int left = atomic_load(&cpu_refuse_once); /* a part no backend plans: that many refusals */
    while (left > 0 && !atomic_compare_exchange_weak(&cpu_refuse_once, &left, left - 1))
        ;
    if (left > 0)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fake cpu: planted refusal");
    if (!atomic_exchange(&cpu_fake_plans, 0))
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fake cpu: off");
    plan->execute = cpu_fail_execute;
    fm_plan_set_describe(plan, "fakecpu");
    return FM_OK;
}
static const fm_backend fake_cpu_backend = {.name = "fakecpu", .device = FM_DEVICE_CPU,
                                            .ops = 1u << FM_OP_MATMUL | 1u << FM_OP_FFT | 1u << FM_OP_RNG,
                                            .priority = 1000000, .probe = fake_probe, .plan = cpu_fail_plan};

static fm_context *make_context(void)
{
    setenv("FUSEMATH_PIPELINE", "on", 1); /* whole staging knows no stand-in: the GPU part is pipelined */
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    unsetenv("FUSEMATH_PIPELINE");
    if (ctx) {
        CHECK_OK(fm_context_register_backend(ctx, &fake_gpu_backend));
        CHECK_OK(fm_context_register_backend(ctx, &fake_cpu_backend));
    }
    return ctx;
}

/* The problem of op (execution cpu, host operands) as best would have split it at k: cpu [0, k), cuda:0
 * the rest; best's bits as dispatch.c sets them (1 measured profile, 64 split) and made-up predictions. */
static fm_status plan_split(fm_context *ctx, fm_op op, const fm_tensor *const *ts, const void *opts, int64_t k,
                            fm_plan **plan)
{
    fm_problem p;
    fm_attachments att;
    fm_status s = fm_operation_build(ctx, fm_operation_for(op), ts, opts, &p, &att);
    if (s != FM_OK)
        return s;
    p.split = k;
    p.split_ms = 1.5f;
    p.split_cpu_threads = 1;
    p.best = 1 | 64;
    p.best_ms[0] = 3.0f, p.best_ms[1] = 2.0f;
    return fm_plan_built(ctx, &p, &att, plan);
}


static double max_diff(const float *x, const float *y, size_t n)
{
    double e = 0; /* a NaN (an element never written: 0xff bytes) counts as infinitely off, not skipped */
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)x[i] - y[i]);
        e = d != d ? INFINITY : fmax(e, d);
    }
    return e;
}

enum { B = 8, M = 16, K = 12, N = 10 };
static float a[B * M * K], b[K * N], c[B * M * N], bias[N], ref[B * M * N];

/* d = a b + 0.5 c + bias over a batch of B: the split plan at k, the unsplit cpu plan, float64 */
static void batched_operands(fm_tensor *t, float *d)
{
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    int64_t sa[3] = {B, M, K}, sb[2] = {K, N}, sd[3] = {B, M, N}, sbias[1] = {N};
    fm_tensor_init(&t[FM_MATMUL_A], a, cpu, FM_F32, 3, sa, NULL);
    fm_tensor_init(&t[FM_MATMUL_B], b, cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&t[FM_MATMUL_C], c, cpu, FM_F32, 3, sd, NULL);
    fm_tensor_init(&t[FM_MATMUL_BIAS], bias, cpu, FM_F32, 1, sbias, NULL);
    fm_tensor_init(&t[FM_MATMUL_D], d, cpu, FM_F32, 3, sd, NULL);
}

static void mm_options(fm_matmul_options *o)
{
    fm_matmul_options_init(o);
    o->beta[0] = 0.5;
    o->epilogue = FM_EPILOGUE_BIAS;
    o->execution = FM_EXECUTION_CPU;
}

static fm_plan *batched_split(fm_context *ctx, int64_t k, float *d)
{
    fm_tensor t[FM_MATMUL_NSLOTS];
    batched_operands(t, d);
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&t[0], &t[1], &t[2], &t[3], &t[4], NULL, NULL, NULL};
    fm_matmul_options o;
    mm_options(&o);
    fm_plan *p = NULL;
    CHECK_OK(plan_split(ctx, FM_OP_MATMUL, ts, &o, k, &p));
    return p;
}

static fm_status run_batched(const fm_plan *p, float *d)
{
    void *ptrs[FM_MATMUL_NSLOTS] = {a, b, c, bias, d};
    return fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL);
}

static void test_matmul_batched(void)
{
    static float d[B * M * N];
    fill(a, sizeof a / 4, 1), fill(b, sizeof b / 4, 2), fill(c, sizeof c / 4, 3), fill(bias, N, 4);
    fm_context *ctx = make_context();
    if (!ctx)
        return;
    fm_tensor t[FM_MATMUL_NSLOTS];
    batched_operands(t, ref);
    fm_matmul_options o;
    mm_options(&o);
    CHECK_OK(fm_matmul(ctx, &t[0], &t[1], &t[2], &t[3], &t[4], NULL, &o, NULL)); /* unsplit, on the cpu */
    double e64 = 0;
    for (int bi = 0; bi < B; bi++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0.5 * c[(bi * M + i) * N + j] + bias[j];
                for (int q = 0; q < K; q++)
                    s += (double)a[(bi * M + i) * K + q] * b[q * N + j];
                e64 = fmax(e64, fabs(s - ref[(bi * M + i) * N + j]));
            }
    CHECK_MSG(e64 < 1e-4, "the unsplit reference is off float64's by %g", e64);
    fm_plan *p = batched_split(ctx, 3, d);
    if (p) {
        const char *desc = fm_plan_describe(p);
        CHECK_MSG(strncmp(desc, "split [0, 3) ", 13) == 0 && strstr(desc, "| [3, 8) ") && strstr(desc, "pipelined") &&
                      strstr(desc, "fakegpu(") &&
                      strstr(desc, " best=split cpu 3/8 cuda 5/8 predicted cpu 3 ms cuda 2 ms split 1.5 ms"),
                  "%s", desc);
        for (int round = 0; round < 3; round++) { /* the worker is reused */
            memset(d, 0xff, sizeof d);
            CHECK_OK(run_batched(p, d));
            CHECK_MSG(max_diff(d, ref, B * M * N) < 1e-5, "round %d: %g", round, max_diff(d, ref, B * M * N));
        }
        /* in place: d == c, each part reads its own rows of c */
        static float keep[B * M * N];
        memcpy(keep, c, sizeof c);
        void *ptrs[FM_MATMUL_NSLOTS] = {a, b, c, bias, c};
        CHECK_OK(fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL));
        CHECK_MSG(max_diff(c, ref, B * M * N) < 1e-5, "in place: %g", max_diff(c, ref, B * M * N));
        memcpy(c, keep, sizeof c);
        fm_plan_release(p);
    }
    fm_context_destroy(ctx);
    CHECK(atomic_load(&live_device) == 0 && atomic_load(&live_pinned) == 0 && atomic_load(&streams) == 0);
}

/* 2-D: row panels, d rows [0, 11) on the cpu */
static void test_matmul_rows(void)
{
    enum { R = 37, Q = 19, C = 23 };
    static float x[R * Q], y[Q * C], z[C], d0[R * C], d1[R * C];
    fill(x, R * Q, 7), fill(y, Q * C, 8), fill(z, C, 9);
    fm_context *ctx = make_context();
    if (!ctx)
        return;
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    fm_tensor ta, tb, tz, td;
    int64_t sa[2] = {R, Q}, sb[2] = {Q, C}, sd[2] = {R, C}, sz[1] = {C};
    fm_tensor_init(&ta, x, cpu, FM_F32, 2, sa, NULL);
    fm_tensor_init(&tb, y, cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&tz, z, cpu, FM_F32, 1, sz, NULL);
    fm_tensor_init(&td, d0, cpu, FM_F32, 2, sd, NULL);
    fm_matmul_options o;
    mm_options(&o);
    o.beta[0] = 0;
    CHECK_OK(fm_matmul(ctx, &ta, &tb, NULL, &tz, &td, NULL, &o, NULL));
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&ta, &tb, NULL, &tz, &td};
    fm_plan *p = NULL;
    CHECK_OK(plan_split(ctx, FM_OP_MATMUL, ts, &o, 11, &p));
    if (p) {
        CHECK_MSG(strstr(fm_plan_describe(p), "best=split cpu 11/37 cuda 26/37"), "%s", fm_plan_describe(p));
        memset(d1, 0xff, sizeof d1);
        void *ptrs[FM_MATMUL_NSLOTS] = {x, y, NULL, z, d1};
        CHECK_OK(fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL));
        CHECK_MSG(max_diff(d0, d1, R * C) < 1e-5, "%g", max_diff(d0, d1, R * C));
        fm_plan_release(p);
    }
    fm_context_destroy(ctx);
}

/* 6 transforms of 32 points (c64, the last axis), 2 on the cpu */
static void test_fft(void)
{
    enum { T = 6, L = 32 };
    static float in[2 * T * L], o0[2 * T * L], o1[2 * T * L];
    fill(in, 2 * T * L, 11);
    fm_context *ctx = make_context();
    if (!ctx)
        return;
    fm_tensor ti, to;
    fm_fft_options o;
    CHECK_OK(fft_rows_on_cpu(ctx, in, o0, T, L, &ti, &to, &o));
    double e64 = 0; /* the reference against a float64 DFT */
    for (int t = 0; t < T; t++)
        for (int f = 0; f < L; f++) {
            double re = 0, im = 0;
            for (int x = 0; x < L; x++) {
                const double w = -2 * 3.14159265358979323846 * f * x / L, xr = in[2 * (t * L + x)], xi = in[2 * (t * L + x) + 1];
                re += xr * cos(w) - xi * sin(w), im += xr * sin(w) + xi * cos(w);
            }
            e64 = fmax(e64, fmax(fabs(re - o0[2 * (t * L + f)]), fabs(im - o0[2 * (t * L + f) + 1])));
        }
    CHECK_MSG(e64 < 1e-4, "the unsplit FFT is off the DFT by %g", e64);
    const fm_tensor *ts[FM_FFT_NSLOTS] = {&ti, &to};
    fm_plan *p = NULL;
    CHECK_OK(plan_split(ctx, FM_OP_FFT, ts, &o, 2, &p));
    if (p) {
        CHECK_MSG(strstr(fm_plan_describe(p), "best=split cpu 2/6 cuda 4/6"), "%s", fm_plan_describe(p));
        memset(o1, 0xff, sizeof o1);
        void *ptrs[FM_FFT_NSLOTS] = {in, o1};
        CHECK_OK(fm_plan_execute(p, ptrs, FM_FFT_NSLOTS, NULL));
        CHECK_MSG(max_diff(o0, o1, 2 * T * L) < 1e-5, "%g", max_diff(o0, o1, 2 * T * L));
        fm_plan_release(p);
    }
    fm_context_destroy(ctx);
}

/* normal f32 (29, 7) at position 1000 split at 10 rows, and 1000 uniform f64 split at 333: the same bits */
static void rng_case(fm_context *ctx, fm_dtype dt, int ndim, const int64_t *shape, int distribution, int64_t k)
{
    static double v0[2048], v1[2048];
    fm_tensor t;
    fm_tensor_init(&t, v0, (fm_device){FM_DEVICE_CPU, 0}, dt, ndim, shape, NULL);
    const size_t bytes = (size_t)fm_tensor_numel(&t) * fm_dtype_size(dt);
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = distribution;
    o.execution = FM_EXECUTION_CPU;
    fm_exec_args args;
    fm_exec_args_init(&args);
    args.ints[0] = 1000;
    args.ints[3] = 42;
    fm_plan *whole = NULL, *p = NULL;
    CHECK_OK(fm_rng_plan(ctx, &t, &o, &whole));
    const fm_tensor *ts[FM_RNG_NSLOTS] = {&t};
    CHECK_OK(plan_split(ctx, FM_OP_RNG, ts, &o, k, &p));
    if (whole && p) {
        void *p0[1] = {v0}, *p1[1] = {v1};
        memset(v1, 0xff, bytes);
        CHECK_OK(fm_plan_execute_args(whole, p0, 1, &args, NULL));
        CHECK_OK(fm_plan_execute_args(p, p1, 1, &args, NULL));
        CHECK_MSG(memcmp(v0, v1, bytes) == 0, "split at %lld: the bits differ from one fill's", (long long)k);
        CHECK(v0[0] != v0[1]);
    }
    fm_plan_release(whole);
    fm_plan_release(p);
}

static void test_rng(void)
{
    fm_context *ctx = make_context();
    if (!ctx)
        return;
    const int64_t s2[2] = {29, 7}, s1[1] = {1000};
    rng_case(ctx, FM_F32, 2, s2, FM_RNG_NORMAL, 10);
    rng_case(ctx, FM_F64, 1, s1, FM_RNG_UNIFORM, 333);
    fm_context_destroy(ctx);
}

/* A part's failure: its status and message after the other part is joined; of two, the first. */
static void test_errors(void)
{
    static float d[B * M * N];
    fm_context *ctx = make_context();
    if (!ctx)
        return;
    fm_plan *p = batched_split(ctx, 3, d);
    if (p) {
        memset(d, 0xff, sizeof d);
        atomic_store(&gpu_fails, 1);
        const fm_status s = run_batched(p, d);
        CHECK_MSG(s == FM_ERR_INTERNAL && strstr(fm_last_error(), "planted gpu failure") &&
                      strstr(fm_last_error(), "(split: the cuda part, indices [3, 8) of 8)"),
                  "%d: %s", (int)s, fm_last_error());
        CHECK(max_diff(d, ref, 3 * M * N) < 1e-5); /* the cpu part's rows: it ran to its end */
        atomic_store(&gpu_fails, 0);
        CHECK_OK(run_batched(p, d)); /* and the plan still works */
        CHECK(max_diff(d, ref, B * M * N) < 1e-5);
        fm_plan_release(p);
    }
    fm_context_destroy(ctx);
    /* the cpu part fails (on the worker thread: its message comes across) */
    ctx = make_context();
    if (!ctx)
        return;
    atomic_store(&cpu_fake_plans, 1);
    p = batched_split(ctx, 3, d);
    CHECK(atomic_load(&cpu_fake_plans) == 0);
    if (p) {
        CHECK_MSG(strncmp(fm_plan_describe(p), "split [0, 3) fakecpu | [3, 8) ", 30) == 0, "%s", fm_plan_describe(p));
        memset(d, 0xff, sizeof d);
        atomic_store(&cpu_delay_ms, 30); /* the GPU part finishes first */
        fm_status s = run_batched(p, d);
        CHECK_MSG(s == FM_ERR_INTERNAL && strstr(fm_last_error(), "planted cpu failure") &&
                      strstr(fm_last_error(), "(split: the cpu part, indices [0, 3) of 8)"),
                  "%d: %s", (int)s, fm_last_error());
        CHECK(max_diff(d + 3 * M * N, ref + 3 * M * N, 5 * M * N) < 1e-5); /* the GPU part's rows */
        /* both fail: the one that failed first is reported */
        atomic_store(&gpu_fails, 1);
        s = run_batched(p, d);
        CHECK_MSG(s == FM_ERR_INTERNAL && strstr(fm_last_error(), "planted gpu failure"), "%s", fm_last_error());
        atomic_store(&cpu_delay_ms, 0);
        atomic_store(&gpu_delay_ms, 30);
        s = run_batched(p, d);
        CHECK_MSG(s == FM_ERR_INTERNAL && strstr(fm_last_error(), "planted cpu failure"), "%s", fm_last_error());
        atomic_store(&gpu_delay_ms, 0);
        atomic_store(&gpu_fails, 0);
        fm_plan_release(p);
    }
    fm_context_destroy(ctx);
    CHECK(atomic_load(&live_device) == 0 && atomic_load(&live_pinned) == 0 && atomic_load(&streams) == 0);
}

/* A part that no backend plans: the problem is planned unsplit on the device best chose for it alone. */
static void test_fallback(void)
{
    static float d[B * M * N];
    fm_context *ctx = make_context();
    if (!ctx)
        return;
    atomic_store(&cpu_refuse_once, 1);
    fm_plan *p = batched_split(ctx, 3, d);
    CHECK(atomic_load(&cpu_refuse_once) == 0);
    if (p) {
        CHECK_MSG(strstr(fm_plan_describe(p), " best=cpu (the split planned none) predicted cpu 3 ms cuda 2 ms") &&
                      !strstr(fm_plan_describe(p), "split ["),
                  "%s", fm_plan_describe(p));
        memset(d, 0xff, sizeof d);
        CHECK_OK(run_batched(p, d));
        CHECK(max_diff(d, ref, B * M * N) < 1e-5);
        fm_plan_release(p);
    }
    fm_context_destroy(ctx);
}

/* The cpu refuses the split's part and then the unsplit problem: best's other device plans it
 * (the fallback chain: split -> best's device -> the other one). */
static void test_fallback_chain(void)
{
    static float d[B * M * N];
    fm_context *ctx = make_context();
    if (!ctx)
        return;
    atomic_store(&cpu_refuse_once, 2);
    fm_plan *p = batched_split(ctx, 3, d);
    CHECK(atomic_load(&cpu_refuse_once) == 0);
    if (p) {
        CHECK_MSG(strstr(fm_plan_describe(p), "best=cuda (the split planned none) (the cpu planned none)"), "%s",
                  fm_plan_describe(p));
        memset(d, 0xff, sizeof d);
        CHECK_OK(run_batched(p, d));
        CHECK(max_diff(d, ref, B * M * N) < 1e-5);
        fm_plan_release(p);
    }
    atomic_store(&cpu_refuse_once, 0);
    fm_context_destroy(ctx);
}

/* Two threads execute one split plan at once (one holds the worker, the other starts its own thread). */
typedef struct racer {
    const fm_plan *p;
    float d[B * M * N];
    int bad;
} racer;
static void *race(void *arg)
{
    racer *r = arg;
    for (int i = 0; i < 20; i++) {
        memset(r->d, 0xff, sizeof r->d);
        r->bad += run_batched(r->p, r->d) != FM_OK || max_diff(r->d, ref, B * M * N) > 1e-5;
    }
    return NULL;
}
static void test_concurrent(void)
{
    static racer r[2];
    fm_context *ctx = make_context();
    if (!ctx)
        return;
    fm_plan *p = batched_split(ctx, 5, r[0].d);
    if (p) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++) {
            r[i].p = p, r[i].bad = 0;
            CHECK(pthread_create(&t[i], NULL, race, &r[i]) == 0);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        CHECK_MSG(r[0].bad == 0 && r[1].bad == 0, "%d, %d bad calls", r[0].bad, r[1].bad);
        fm_plan_release(p);
    }
    fm_context_destroy(ctx);
}

int main(void)
{
    RUN_TEST(test_choose);
    RUN_TEST(test_decide);
    fm_pipeline_test_device(&stand_in_gpu);
    RUN_TEST(test_matmul_batched);
    RUN_TEST(test_matmul_rows);
    RUN_TEST(test_fft);
    RUN_TEST(test_rng);
    RUN_TEST(test_errors);
    RUN_TEST(test_fallback);
    RUN_TEST(test_fallback_chain);
    RUN_TEST(test_concurrent);
    fm_pipeline_test_device(NULL);
    TEST_MAIN_RETURN();
}
