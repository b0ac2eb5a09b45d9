/* test_pipeline_threads.c : the pipelined execute with its host copies on the context's staging threads
 * (core/src/copy_pool.c), through the stand-in GPU (tests/c/stand_in_gpu.h) whose "GPU" plans are the
 * cpu's own plans of each chunk's sub-problem: the pipelined result must equal the unpipelined one, the
 * cpu's plan of the whole problem (matmul + bias + relu within rounding, the batched FFT within rounding,
 * the RNG's values bit for bit) with 1 to 7 staging threads, chunk counts 3, 5, 7 and 8, remainders;
 * a failure at any GPU step of a call is reported and leaves nothing allocated or running (the next
 * call works); and 2 to 4 threads executing pipelined plans on one context at once get their own
 * results. Large enough that the chunks' copies are cut into several parts (FM_COPY_MIN_PART). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "pipeline_test_util.h"
#include "copy_pool.h"
#include "internal.h"
#include "operation.h"
#include "stand_in_gpu.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const fm_device cpu = {FM_DEVICE_CPU, 0};

/* ---- the stand-in GPU's backend: a cuda problem planned as the same problem on the cpu ---- */
static fm_status on_cpu_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const fm_plan *inner = plan->impl;
    return inner->execute(inner, ptrs, args, NULL);
}

static void on_cpu_destroy(void *impl) { fm_plan_release(impl); }

static fm_status fake_probe(const fm_settings *s, void **state, const char **why) { return FM_OK; }

static fm_status fake_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *plan)
{
    fm_problem q = *p;
    for (int i = 0; i < p->nslots; i++) {
        if (!(p->present & (1u << i)))
            continue;
        if (p->t[i].device.type != FM_DEVICE_CUDA)
            return fm_fail(FM_ERR_NOT_APPLICABLE, "stand-in: %s is not on the device", p->slot_names[i]);
        q.t[i].device = cpu;
    }
    q.exec_device = cpu;
    fm_problem_key_alignment(&q);
    fm_plan *inner = NULL;
    fm_status s = fm_plan_problem_with(ctx, &q, NULL, &inner);
    if (s != FM_OK)
        return s;
    plan->impl = inner;
    plan->execute = on_cpu_execute;
    plan->destroy_impl = on_cpu_destroy;
    fm_plan_set_describe(plan, "%s cuda/stand-in", fm_op_name(p->op));
    return FM_OK;
}

static const fm_backend fake_backend = {.name = "stand-in", .device = FM_DEVICE_CUDA,
                                        .ops = 1u << FM_OP_MATMUL | 1u << FM_OP_RNG | 1u << FM_OP_FFT,
                                        .priority = 1000000, .probe = fake_probe, .plan = fake_plan};

static fm_context *make_context(int threads)
{
    char t[16];
    snprintf(t, sizeof t, "%d", threads);
    setenv("FUSEMATH_PIPELINE", "on", 1);
    setenv("FUSEMATH_PIPELINE_THREADS", t, 1);
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    unsetenv("FUSEMATH_PIPELINE");
    unsetenv("FUSEMATH_PIPELINE_THREADS");
    if (ctx)
        CHECK_OK(fm_context_register_backend(ctx, &fake_backend));
    return ctx;
}



/* ---- matmul: d = relu(a b + bias), a (m, K) ---- */
enum { K = 256, N = 288 }; /* a chunk of 126 rows of d: 145 KiB, two parts */
typedef struct mm_case {
    int64_t m;
    float *a, *b, *bias, *d, *ref;
    fm_tensor ta, tb, tbias, td;
} mm_case;

static int mm_make(mm_case *c, int64_t m, unsigned seed)
{
    memset(c, 0, sizeof *c);
    c->m = m;
    c->a = malloc(sizeof(float) * (size_t)(m * K));
    c->b = malloc(sizeof(float) * K * N);
    c->bias = malloc(sizeof(float) * N);
    c->d = malloc(sizeof(float) * (size_t)(m * N));
    c->ref = malloc(sizeof(float) * (size_t)(m * N));
    if (!c->a || !c->b || !c->bias || !c->d || !c->ref)
        return 0;
    fill(c->a, (size_t)(m * K), seed), fill(c->b, K * N, seed + 1), fill(c->bias, N, seed + 2);
    int64_t sa[2] = {m, K}, sb[2] = {K, N}, sd[2] = {m, N}, sbias[1] = {N};
    fm_tensor_init(&c->ta, c->a, cpu, FM_F32, 2, sa, NULL);
    fm_tensor_init(&c->tb, c->b, cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&c->tbias, c->bias, cpu, FM_F32, 1, sbias, NULL);
    fm_tensor_init(&c->td, c->ref, cpu, FM_F32, 2, sd, NULL);
    return 1;
}

static fm_status mm_plan(fm_context *ctx, mm_case *c, int execution, fm_plan **p)
{
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU;
    o.execution = execution;
    return fm_matmul_plan(ctx, &c->ta, &c->tb, NULL, &c->tbias, &c->td, NULL, &o, p);
}

static fm_status mm_run(const fm_plan *p, mm_case *c, float *d)
{
    void *ptrs[FM_MATMUL_NSLOTS] = {c->a, c->b, NULL, c->bias, d};
    return fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL);
}

static void mm_free(mm_case *c) { free(c->a), free(c->b), free(c->bias), free(c->d), free(c->ref); }

/* The cpu's plan of the whole problem: the reference (computed once per case). */
static void mm_reference(mm_case *c)
{
    fm_context *ref = NULL;
    CHECK_OK(fm_context_create(&ref));
    fm_plan *p = NULL;
    CHECK_OK(mm_plan(ref, c, FM_EXECUTION_CPU, &p));
    if (p)
        CHECK_OK(mm_run(p, c, c->ref));
    fm_plan_release(p);
    fm_context_destroy(ref);
}

static void check_describe(const fm_plan *p, int nchunks, int threads)
{
    char want[64], th[24];
    snprintf(want, sizeof want, "pipelined chunks=%d ", nchunks);
    snprintf(th, sizeof th, " threads=%d ", threads);
    CHECK_MSG(p && strstr(fm_plan_describe(p), want) && strstr(fm_plan_describe(p), th), "want '%s', '%s': %s", want,
              th, p ? fm_plan_describe(p) : "(no plan)");
}

static void test_matmul_threads(void)
{
    /* 1003 rows: 8 chunks of 126, the last 121; 9: 5 of 2, last 1; 7: 7 of 1; 3: 3 of 1 */
    static const int64_t rows[] = {1003, 9, 7, 3};
    static const int chunks[] = {8, 5, 7, 3};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        mm_case c;
        if (!mm_make(&c, rows[r], 11 + (unsigned)r)) {
            CHECK(0);
            mm_free(&c);
            continue;
        }
        mm_reference(&c);
        for (int threads = 1; threads <= 7; threads += threads < 4 ? 1 : 3) {
            fm_context *ctx = make_context(threads);
            fm_plan *p = NULL;
            CHECK_OK(mm_plan(ctx, &c, FM_EXECUTION_CUDA, &p));
            check_describe(p, chunks[r], threads);
            for (int round = 0; p && round < 2; round++) { /* the second call reuses the ring and the threads */
                memset(c.d, 0xff, sizeof(float) * (size_t)(c.m * N)); /* NaN where nothing lands */
                CHECK_OK(mm_run(p, &c, c.d));
                CHECK(fm_copy_pool_busy(fm_context_copy_pool(ctx)) == 0); /* no copy outlives the call */
                const double e = max_rel(c.d, c.ref, (size_t)(c.m * N));
                CHECK_MSG(e < 1e-5, "%lld rows, %d threads, round %d: max relative error %g", (long long)c.m,
                          threads, round, e);
                CHECK(atomic_load(&live_device) == 0);
            }
            fm_plan_release(p);
            fm_context_destroy(ctx);
            CHECK(atomic_load(&live_pinned) == 0 && atomic_load(&streams) == 0 && atomic_load(&events) == 0);
        }
        mm_free(&c);
    }
}

/* ---- batched FFT: (batch, 16384) c64 over the last axis, one transform (128 KiB) per chunk ---- */
static void test_fft_threads(void)
{
    enum { L = 16384 };
    static const int64_t batches[] = {7, 9};
    static const int chunks[] = {7, 5}; /* 9 transforms: 5 slabs of 2, the last 1 */
    for (size_t r = 0; r < 2; r++) {
        const int64_t B = batches[r];
        const size_t nf = (size_t)(2 * B * L);
        float *in = malloc(sizeof(float) * nf), *out = malloc(sizeof(float) * nf), *ref = malloc(sizeof(float) * nf);
        CHECK(in && out && ref);
        if (!in || !out || !ref) {
            free(in), free(out), free(ref);
            return;
        }
        fill(in, nf, 21 + (unsigned)r);
        int64_t s[2] = {B, L};
        fm_tensor ti, to;
        fm_tensor_init(&ti, in, cpu, FM_C64, 2, s, NULL);
        fm_tensor_init(&to, ref, cpu, FM_C64, 2, s, NULL);
        fm_fft_options o;
        fm_fft_options_init(&o);
        o.naxes = 1;
        o.axes[0] = 1;
        fm_context *rc = NULL;
        CHECK_OK(fm_context_create(&rc));
        o.execution = FM_EXECUTION_CPU;
        fm_plan *p = NULL;
        CHECK_OK(fm_fft_plan(rc, &ti, &to, NULL, NULL, &o, &p));
        void *ptrs[FM_FFT_NSLOTS] = {in, ref};
        if (p)
            CHECK_OK(fm_plan_execute(p, ptrs, FM_FFT_NSLOTS, NULL));
        fm_plan_release(p);
        fm_context_destroy(rc);
        for (int threads = 1; threads <= 4; threads++) {
            fm_context *ctx = make_context(threads);
            o.execution = FM_EXECUTION_CUDA;
            p = NULL;
            CHECK_OK(fm_fft_plan(ctx, &ti, &to, NULL, NULL, &o, &p));
            check_describe(p, chunks[r], threads);
            memset(out, 0xff, sizeof(float) * nf);
            ptrs[1] = out;
            if (p)
                CHECK_OK(fm_plan_execute(p, ptrs, FM_FFT_NSLOTS, NULL));
            CHECK(fm_copy_pool_busy(fm_context_copy_pool(ctx)) == 0);
            const double e = max_rel(out, ref, nf);
            CHECK_MSG(e < 1e-6, "fft batch %lld, %d threads: max relative error %g", (long long)B, threads, e);
            fm_plan_release(p);
            fm_context_destroy(ctx);
        }
        free(in), free(out), free(ref);
    }
}

/* ---- RNG: normal f32 (1001, 257), from position 12345 of seed 7: bit for bit ---- */
static fm_status rng_run(fm_context *ctx, int execution, float *out)
{
    int64_t s[2] = {1001, 257};
    fm_tensor t;
    fm_tensor_init(&t, out, cpu, FM_F32, 2, s, NULL);
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = FM_RNG_NORMAL;
    o.execution = execution;
    fm_plan *p = NULL;
    fm_status st = fm_rng_plan(ctx, &t, &o, &p);
    if (st != FM_OK)
        return st;
    if (execution == FM_EXECUTION_CUDA)
        check_describe(p, 8, fm_context_settings(ctx)->pipeline_threads);
    fm_exec_args args;
    fm_exec_args_init(&args);
    args.ints[0] = 12345;
    args.ints[3] = 7;
    void *ptrs[1] = {out};
    st = fm_plan_execute_args(p, ptrs, 1, &args, NULL);
    fm_plan_release(p);
    return st;
}

static void test_rng_threads(void)
{
    const size_t n = 1001 * 257;
    float *out = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
    CHECK(out && ref);
    fm_context *rc = NULL;
    CHECK_OK(fm_context_create(&rc));
    if (out && ref && rc)
        CHECK_OK(rng_run(rc, FM_EXECUTION_CPU, ref));
    fm_context_destroy(rc);
    for (int threads = 1; out && ref && threads <= 4; threads++) {
        fm_context *ctx = make_context(threads);
        memset(out, 0xff, sizeof(float) * n);
        CHECK_OK(rng_run(ctx, FM_EXECUTION_CUDA, out));
        CHECK_MSG(memcmp(out, ref, sizeof(float) * n) == 0, "%d threads: the values differ from the cpu's", threads);
        fm_context_destroy(ctx);
    }
    free(out), free(ref);
}

/* ---- a failure at the k-th GPU step (a chunk's DMA queued, an event waited for before a fill or a
 * drain), for every k the call reaches: reported, nothing left allocated, no copy left running ---- */
static void test_failures(void)
{
    mm_case c;
    if (!mm_make(&c, 1003, 31)) {
        CHECK(0);
        mm_free(&c);
        return;
    }
    mm_reference(&c);
    fm_context *ctx = make_context(3);
    fm_plan *p = NULL;
    CHECK_OK(mm_plan(ctx, &c, FM_EXECUTION_CUDA, &p));
    int failed = 0;
    for (int k = 1; p && k < 200; k++) {
        atomic_store(&fail_countdown, k);
        const fm_status s = mm_run(p, &c, c.d);
        const int left = atomic_load(&fail_countdown);
        atomic_store(&fail_countdown, 0);
        CHECK(atomic_load(&live_device) == 0 && fm_copy_pool_busy(fm_context_copy_pool(ctx)) == 0);
        if (left > 0) { /* the call made fewer than k steps: it ran whole, and must have succeeded */
            CHECK_OK(s);
            break;
        }
        failed++;
        CHECK_MSG(s == FM_ERR_INTERNAL && strstr(fm_last_error(), "injected"), "step %d: status %d, '%s'", k, (int)s,
                  fm_last_error());
        memset(c.d, 0xff, sizeof(float) * (size_t)(c.m * N)); /* the next call still works */
        CHECK_OK(mm_run(p, &c, c.d));
        CHECK(max_rel(c.d, c.ref, (size_t)(c.m * N)) < 1e-5);
    }
    CHECK_MSG(failed >= 8 * 2, "only %d steps failed", failed); /* a DMA in and out, two waits, per chunk */
    fm_plan_release(p);
    fm_context_destroy(ctx);
    CHECK(atomic_load(&live_pinned) == 0 && atomic_load(&streams) == 0 && atomic_load(&events) == 0);
    mm_free(&c);
}

/* ---- 2-4 threads executing pipelined plans on one context at once ---- */
typedef struct worker_arg {
    const fm_plan *plan;
    mm_case *c;
    float *d;
    int bad, errors;
} worker_arg;

static void *worker(void *v)
{
    worker_arg *w = v;
    for (int i = 0; i < 6; i++) {
        memset(w->d, 0xff, sizeof(float) * (size_t)(w->c->m * N));
        if (mm_run(w->plan, w->c, w->d) != FM_OK)
            w->errors++;
        else if (!(max_rel(w->d, w->c->ref, (size_t)(w->c->m * N)) < 1e-5))
            w->bad++;
    }
    return NULL;
}

static void test_concurrent(void)
{
    enum { T = 4 };
    static const int64_t rows[T] = {1003, 517, 1003, 9};
    mm_case c[T];
    int ok = 1;
    for (int i = 0; i < T; i++)
        if ((ok &= mm_make(&c[i], rows[i], 41 + (unsigned)i)))
            mm_reference(&c[i]);
    fm_context *ctx = make_context(2);
    fm_plan *plan[T] = {0};
    for (int i = 0; ok && i < T; i++)
        CHECK_OK(mm_plan(ctx, &c[i], FM_EXECUTION_CUDA, &plan[i]));
    for (int nthreads = 2; ok && nthreads <= T; nthreads++) {
        /* threads 0 and 2 share one plan (the same problem, cached), each its own output */
        worker_arg w[T];
        pthread_t th[T];
        for (int i = 0; i < nthreads; i++) {
            w[i] = (worker_arg){plan[i], &c[i], malloc(sizeof(float) * (size_t)(c[i].m * N)), 0, 0};
            CHECK(w[i].d && pthread_create(&th[i], NULL, worker, &w[i]) == 0);
        }
        for (int i = 0; i < nthreads; i++) {
            pthread_join(th[i], NULL);
            CHECK_MSG(w[i].errors == 0 && w[i].bad == 0, "%d threads, thread %d: %d errors, %d wrong results",
                      nthreads, i, w[i].errors, w[i].bad);
            free(w[i].d);
        }
    }
    CHECK(!ok || plan[0] == plan[2]);
    for (int i = 0; i < T; i++)
        fm_plan_release(plan[i]);
    fm_context_destroy(ctx);
    CHECK(atomic_load(&live_pinned) == 0 && atomic_load(&streams) == 0 && atomic_load(&events) == 0 &&
          atomic_load(&live_device) == 0);
    for (int i = 0; i < T; i++)
        mm_free(&c[i]);
}

/* FUSEMATH_PIPELINE_THREADS: a count from 1 to FM_MAX_PIPELINE_THREADS, else an error naming it */
static void test_setting(void)
{
    fm_settings s;
    unsetenv("FUSEMATH_PIPELINE_THREADS");
    CHECK_OK(fm_settings_read(&s));
    CHECK(s.pipeline_threads >= 1 && s.pipeline_threads <= 8);
    const uint64_t key = s.plan_key;
    setenv("FUSEMATH_PIPELINE_THREADS", "5", 1);
    CHECK_OK(fm_settings_read(&s));
    CHECK(s.pipeline_threads == 5 && s.plan_key == key); /* plans do not change with it */
    static const char *bad[] = {"0", "-2", "65", "four", "3x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("FUSEMATH_PIPELINE_THREADS", bad[i], 1);
        CHECK(fm_settings_read(&s) == FM_ERR_INVALID_ARGUMENT);
        CHECK_MSG(strstr(fm_last_error(), "FUSEMATH_PIPELINE_THREADS") != NULL, "%s", fm_last_error());
    }
    unsetenv("FUSEMATH_PIPELINE_THREADS");
}

/* The pool alone: parts from several submitters, each waiting only for its own */
static void test_pool(void)
{
    fm_context *ctx = make_context(3);
    fm_copy_pool *pool = ctx ? fm_context_copy_pool(ctx) : NULL;
    CHECK(fm_copy_pool_threads(pool) == 3);
    const size_t n = ((size_t)3 << 20) + 77;
    unsigned char *src = malloc(n), *dst = malloc(n);
    CHECK(src && dst);
    for (size_t i = 0; src && i < n; i++)
        src[i] = (unsigned char)(i * 131 + 7);
    if (src && dst) {
        fm_copy_job job;
        fm_copy_job_init(&job);
        memset(dst, 0, n);
        fm_copy_submit(pool, &job, dst, src, n / 2);
        fm_copy_submit(pool, &job, dst + n / 2, src + n / 2, n - n / 2);
        CHECK(job.used >= 2); /* cut into parts */
        fm_copy_wait(pool, &job);
        CHECK(memcmp(dst, src, n) == 0);
        fm_copy_wait(pool, &job); /* waiting again returns */
    }
    free(src), free(dst);
    fm_context_destroy(ctx);
}

/* Several submitters at once on one pool (pipelined calls on one GPU are serialised by its lock, so
 * only calls on different GPUs share the queue: exercised here directly): each job waits for its own
 * parts only, interleaved with the others' in the FIFO, and gets exactly its own bytes */
typedef struct submitter {
    fm_copy_pool *pool;
    unsigned char *src, *dst;
    size_t n;
    int bad;
} submitter;

static void *submit_many(void *v)
{
    submitter *sb = v;
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < sb->n; i++)
            sb->src[i] = (unsigned char)(i * 131 + (size_t)round * 7 + (size_t)(uintptr_t)sb % 251);
        memset(sb->dst, 0, sb->n);
        fm_copy_job job;
        fm_copy_job_init(&job);
        const size_t third = sb->n / 3; /* three copies of one job, cut into parts, queued among the others' */
        fm_copy_submit(sb->pool, &job, sb->dst, sb->src, third);
        fm_copy_submit(sb->pool, &job, sb->dst + third, sb->src + third, third);
        fm_copy_submit(sb->pool, &job, sb->dst + 2 * third, sb->src + 2 * third, sb->n - 2 * third);
        fm_copy_wait(sb->pool, &job);
        sb->bad += memcmp(sb->dst, sb->src, sb->n) != 0 || job.pending != 0;
    }
    return NULL;
}

static void test_pool_submitters(void)
{
    enum { T = 4 };
    fm_context *ctx = make_context(3);
    fm_copy_pool *pool = ctx ? fm_context_copy_pool(ctx) : NULL;
    CHECK(pool != NULL);
    submitter sb[T];
    pthread_t th[T];
    int started[T] = {0};
    for (int i = 0; i < T; i++) {
        sb[i] = (submitter){pool, NULL, NULL, ((size_t)1 << 20) + 4099 * (size_t)i, 0};
        sb[i].src = malloc(sb[i].n), sb[i].dst = malloc(sb[i].n);
        CHECK(sb[i].src && sb[i].dst);
        started[i] = pool && sb[i].src && sb[i].dst && pthread_create(&th[i], NULL, submit_many, &sb[i]) == 0;
    }
    for (int i = 0; i < T; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        CHECK_MSG(started[i] && sb[i].bad == 0, "submitter %d: %d wrong rounds", i, sb[i].bad);
        free(sb[i].src), free(sb[i].dst);
    }
    CHECK(fm_copy_pool_busy(pool) == 0);
    fm_context_destroy(ctx);
}

/* A forked child has the context's pool but none of its threads: it copies on its own thread, and
 * destroying the context there returns (joining the parent's threads waited forever) */
static void test_fork(void)
{
    fm_context *ctx = make_context(3);
    CHECK(fm_copy_pool_threads(ctx ? fm_context_copy_pool(ctx) : NULL) == 3);
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        unsigned char src[4096], dst[4096];
        memset(src, 7, sizeof src), memset(dst, 0, sizeof dst);
        fm_copy_pool *pool = fm_context_copy_pool(ctx);
        fm_copy_job job;
        fm_copy_job_init(&job);
        fm_copy_submit(pool, &job, dst, src, sizeof src);
        fm_copy_wait(pool, &job);
        fm_context_destroy(ctx);
        _exit(pool == NULL && memcmp(dst, src, sizeof src) == 0 ? 0 : 1);
    }
    CHECK(pid > 0);
    int status = -1;
    pid_t got = 0;
    for (int i = 0; pid > 0 && i < 300 && (got = waitpid(pid, &status, WNOHANG)) == 0; i++)
        nanosleep(&(struct timespec){0, 100000000}, NULL);
    if (pid > 0 && got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    CHECK_MSG(got == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the forked child %s (status %d)", got == 0 ? "hung for 30 s" : "failed", status);
    fm_context_destroy(ctx);
}

int main(void)
{
    fm_pipeline_test_device(&stand_in_gpu);
    RUN_TEST(test_setting);
    RUN_TEST(test_pool);
    RUN_TEST(test_pool_submitters);
    RUN_TEST(test_matmul_threads);
    RUN_TEST(test_fft_threads);
    RUN_TEST(test_rng_threads);
    RUN_TEST(test_failures);
    RUN_TEST(test_concurrent);
    RUN_TEST(test_fork);
    fm_pipeline_test_device(NULL);
    TEST_MAIN_RETURN();
}
