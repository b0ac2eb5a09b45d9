/* test_leak_loop.c : 10^4 plan/execute/release cycles must not grow the resident set;
 * one plan executed by 8 threads at once gives 8 correct results. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "mmref.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* AddressSanitizer keeps freed memory in quarantine, so RSS grows without a leak: under
 * ASan the RSS limits are not checked (LeakSanitizer reports real leaks at exit instead). */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

enum { WARMUP = 1000, CYCLES = 10000 };
static const double MAX_GROWTH_KIB = 4096.0; /* "a few MiB" */

static long vmrss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kib = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kib;
}

typedef struct {
    test_operand a, b, c, d, bias, aux;
    fm_matmul_options o;
    int use_aux;
} leak_problem;

static void leak_problem_make(leak_problem *p, fm_dtype dt, unsigned epilogue, int with_c)
{
    memset(p, 0, sizeof *p);
    test_rng rng = {1234};
    int64_t m = 24, n = 40, k = 16;
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n}, sm[2] = {m, fm_relu_mask_row_bytes(n)};
    operand_contig(&p->a, dt, 2, sa, &rng);
    operand_contig(&p->b, dt, 2, sb, &rng);
    operand_contig(&p->d, dt, 2, sd, NULL);
    if (with_c) operand_contig(&p->c, dt, 2, sd, &rng);
    if (epilogue & FM_EPILOGUE_BIAS) operand_contig(&p->bias, dt, 1, &n, &rng);
    if (epilogue & FM_EPILOGUE_AUX) {
        p->use_aux = 1;
        if (epilogue & FM_EPILOGUE_RELU)
            operand_contig(&p->aux, FM_U8, 2, sm, NULL);
        else
            operand_contig(&p->aux, dt, 2, sd, NULL);
    }
    fm_matmul_options_init(&p->o);
    p->o.epilogue = epilogue;
    p->o.beta[0] = with_c ? 0.5 : 0.0;
}

static void leak_problem_free(leak_problem *p)
{
    operand_free(&p->a);
    operand_free(&p->b);
    operand_free(&p->c);
    operand_free(&p->d);
    operand_free(&p->bias);
    operand_free(&p->aux);
}

#define OPT(x) ((x).buf ? &(x).t : NULL)

/* One cycle; mode 0: clear cache, plan, execute, release; 1: fm_matmul after clearing;
 * 2: fm_matmul with the cache kept. Returns the status. */
static fm_status cycle(fm_context *ctx, leak_problem *p, int mode)
{
    if (mode != 2) fm_context_clear_cache(ctx);
    if (mode != 0)
        return fm_matmul(ctx, &p->a.t, &p->b.t, OPT(p->c), OPT(p->bias), &p->d.t, OPT(p->aux), &p->o, NULL);
    fm_plan *plan = NULL;
    fm_status s = fm_matmul_plan(ctx, &p->a.t, &p->b.t, OPT(p->c), OPT(p->bias), &p->d.t, OPT(p->aux), &p->o, &plan);
    if (s != FM_OK) return s;
    void *ptrs[FM_MATMUL_NSLOTS] = {p->a.buf, p->b.buf, p->c.buf, p->bias.buf, p->d.buf, p->aux.buf};
    s = fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL);
    fm_plan_release(plan);
    return s;
}

static void leak_run(fm_dtype dt, unsigned epilogue, int with_c, int mode)
{
    static const char *const modes[] = {"plan/execute/release", "fm_matmul, cache cleared", "fm_matmul, cached"};
    char ep[64] = "?";
    fm_epilogue_format(epilogue, ep, sizeof ep);
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    leak_problem p;
    leak_problem_make(&p, dt, epilogue, with_c);
    int failures = 0;
    fm_status first_bad = FM_OK;
    for (int i = 0; i < WARMUP; ++i) {
        fm_status s = cycle(ctx, &p, mode);
        if (s != FM_OK && failures++ == 0) first_bad = s;
    }
    long rss0 = vmrss_kib();
    for (int i = 0; i < CYCLES; ++i) {
        fm_status s = cycle(ctx, &p, mode);
        if (s != FM_OK && failures++ == 0) first_bad = s;
    }
    long rss1 = vmrss_kib();
    CHECK_MSG(failures == 0, "%s %s %s: %d cycles failed, first with %s", fm_dtype_name(dt), ep, modes[mode], failures,
              fm_status_name(first_bad));
    CHECK_MSG(rss0 > 0 && rss1 > 0, "cannot read VmRSS from /proc/self/status");
    double growth = (double)(rss1 - rss0);
    printf("    %s %s%s, %s: VmRSS %ld -> %ld KiB (%+.0f KiB over %d cycles)\n", fm_dtype_name(dt), ep,
           with_c ? " +C" : "", modes[mode], rss0, rss1, growth, CYCLES);
    if (UNDER_ASAN)
        SKIP("RSS growth not checked under AddressSanitizer (quarantine); LeakSanitizer checks at exit");
    else
        CHECK_MSG(growth <= MAX_GROWTH_KIB, "%s %s %s: VmRSS grew by %.0f KiB over %d cycles (%.0f bytes per cycle)",
                  fm_dtype_name(dt), ep, modes[mode], growth, CYCLES, growth * 1024.0 / CYCLES);
    if (mode == 2) CHECK(fm_context_cache_size(ctx) == 1);

    /* and the last result is still right */
    mm_ref r;
    mm_reference(&r, &p.a.t, &p.b.t, OPT(p.c), OPT(p.bias), &p.d.t, 1.0, p.o.beta[0], epilogue);
    int64_t first;
    double complex g, w;
    int64_t bad = mm_compare(&p.d.t, &r, r.post, &first, &g, &w);
    CHECK_MSG(bad == 0, "%s %s: %lld wrong after the loop", fm_dtype_name(dt), ep, (long long)bad);
    mm_ref_free(&r);
    leak_problem_free(&p);
    fm_context_destroy(ctx);
}

static void test_leak_plan_cycles(void)
{
    leak_run(FM_F32, 0, 0, 0);
    leak_run(FM_F64, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU | FM_EPILOGUE_AUX, 1, 0);
    leak_run(FM_F32, FM_EPILOGUE_BIAS | FM_EPILOGUE_GELU | FM_EPILOGUE_AUX, 0, 0);
    leak_run(FM_C64, FM_EPILOGUE_BIAS, 1, 0);
}

static void test_leak_stateless(void)
{
    leak_run(FM_F32, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, 0, 1);
    leak_run(FM_F64, FM_EPILOGUE_GELU, 1, 2);
}

/* Contexts themselves: create/destroy must not leak either. */
static void test_leak_contexts(void)
{
    leak_problem p;
    leak_problem_make(&p, FM_F32, FM_EPILOGUE_BIAS, 0);
    long rss0 = 0;
    int failures = 0;
    const int n = 2000, warm = 200;
    for (int i = 0; i < n; ++i) {
        if (i == warm) rss0 = vmrss_kib();
        fm_context *ctx = NULL;
        if (fm_context_create(&ctx) != FM_OK) {
            ++failures;
            continue;
        }
        if (cycle(ctx, &p, 2) != FM_OK) ++failures;
        fm_context_destroy(ctx);
    }
    long rss1 = vmrss_kib();
    printf("    %d contexts: VmRSS %ld -> %ld KiB\n", n - warm, rss0, rss1);
    CHECK_MSG(failures == 0, "%d context cycles failed", failures);
    if (UNDER_ASAN)
        SKIP("RSS growth not checked under AddressSanitizer (quarantine); LeakSanitizer checks at exit");
    else
        CHECK_MSG(rss1 - rss0 <= MAX_GROWTH_KIB, "VmRSS grew by %ld KiB over %d context cycles", rss1 - rss0,
                  n - warm);
    leak_problem_free(&p);
}

/* ---- 8 threads, one plan ---- */
enum { NTHREADS = 8, ITERS = 40, TM = 67, TN = 45, TK = 33 };

typedef struct {
    const fm_plan *plan;
    int id;
    int64_t wrong;
    int failures;
    fm_status first_bad;
    char first_error[256];
} thread_arg;

static void *worker(void *varg)
{
    thread_arg *t = varg;
    test_rng rng = {1000u + (uint64_t)t->id};
    int64_t sa[2] = {TM, TK}, sb[2] = {TK, TN}, sd[2] = {TM, TN}, sn[1] = {TN};
    for (int it = 0; it < ITERS; ++it) {
        test_operand a, b, d, bias;
        operand_contig(&a, FM_F32, 2, sa, &rng);
        operand_contig(&b, FM_F32, 2, sb, &rng);
        operand_contig(&d, FM_F32, 2, sd, NULL);
        operand_contig(&bias, FM_F32, 1, sn, &rng);
        void *ptrs[FM_MATMUL_NSLOTS] = {a.buf, b.buf, NULL, bias.buf, d.buf, NULL};
        fm_status s = fm_plan_execute(t->plan, ptrs, FM_MATMUL_NSLOTS, NULL);
        if (s != FM_OK) {
            if (t->failures++ == 0) {
                t->first_bad = s;
                snprintf(t->first_error, sizeof t->first_error, "%s", fm_last_error());
            }
        } else {
            mm_ref r;
            mm_reference(&r, &a.t, &b.t, NULL, &bias.t, &d.t, 1.0, 0.0, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU);
            int64_t first;
            double complex g, w;
            t->wrong += mm_compare(&d.t, &r, r.post, &first, &g, &w);
            mm_ref_free(&r);
        }
        operand_free(&a);
        operand_free(&b);
        operand_free(&d);
        operand_free(&bias);
    }
    return NULL;
}

static void test_threads_share_plan(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    int64_t sa[2] = {TM, TK}, sb[2] = {TK, TN}, sd[2] = {TM, TN}, sn[1] = {TN};
    fm_tensor a, b, d, bias;
    fm_tensor_init(&a, NULL, fm_test_cpu, FM_F32, 2, sa, NULL);
    fm_tensor_init(&b, NULL, fm_test_cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&d, NULL, fm_test_cpu, FM_F32, 2, sd, NULL);
    fm_tensor_init(&bias, NULL, fm_test_cpu, FM_F32, 1, sn, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU;
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_plan(ctx, &a, &b, NULL, &bias, &d, NULL, &o, &plan));
    if (plan) {
        pthread_t th[NTHREADS];
        thread_arg args[NTHREADS];
        memset(args, 0, sizeof args);
        for (int i = 0; i < NTHREADS; ++i) {
            args[i].plan = plan;
            args[i].id = i;
            CHECK(pthread_create(&th[i], NULL, worker, &args[i]) == 0);
        }
        for (int i = 0; i < NTHREADS; ++i) pthread_join(th[i], NULL);
        for (int i = 0; i < NTHREADS; ++i) {
            CHECK_MSG(args[i].failures == 0, "thread %d: %d executes failed, first %s: %s", i, args[i].failures,
                      fm_status_name(args[i].first_bad), args[i].first_error);
            CHECK_MSG(args[i].wrong == 0, "thread %d: %lld wrong elements", i, (long long)args[i].wrong);
        }
        fm_plan_release(plan);
    }
    fm_context_destroy(ctx);
}

/* Threads planning on one shared context at once (the cache is shared state). */
typedef struct {
    fm_context *ctx;
    int id;
    int failures;
    int64_t wrong;
} plan_thread_arg;

static void *plan_worker(void *varg)
{
    plan_thread_arg *t = varg;
    test_rng rng = {77u + (uint64_t)t->id};
    for (int it = 0; it < 200; ++it) {
        int64_t m = 5 + (it % 4), n = 6, k = 3 + (t->id % 3);
        int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n};
        test_operand a, b, d;
        operand_contig(&a, FM_F64, 2, sa, &rng);
        operand_contig(&b, FM_F64, 2, sb, &rng);
        operand_contig(&d, FM_F64, 2, sd, NULL);
        fm_matmul_options o;
        fm_matmul_options_init(&o);
        if (it % 50 == 0 && t->id == 0) fm_context_clear_cache(t->ctx);
        if (fm_matmul(t->ctx, &a.t, &b.t, NULL, NULL, &d.t, NULL, &o, NULL) != FM_OK) {
            ++t->failures;
        } else {
            mm_ref r;
            mm_reference(&r, &a.t, &b.t, NULL, NULL, &d.t, 1.0, 0.0, 0);
            int64_t first;
            double complex g, w;
            t->wrong += mm_compare(&d.t, &r, r.post, &first, &g, &w);
            mm_ref_free(&r);
        }
        operand_free(&a);
        operand_free(&b);
        operand_free(&d);
    }
    return NULL;
}

static void test_threads_share_context(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    pthread_t th[NTHREADS];
    plan_thread_arg args[NTHREADS];
    memset(args, 0, sizeof args);
    for (int i = 0; i < NTHREADS; ++i) {
        args[i].ctx = ctx;
        args[i].id = i;
        CHECK(pthread_create(&th[i], NULL, plan_worker, &args[i]) == 0);
    }
    for (int i = 0; i < NTHREADS; ++i) pthread_join(th[i], NULL);
    for (int i = 0; i < NTHREADS; ++i) {
        CHECK_MSG(args[i].failures == 0, "thread %d: %d fm_matmul calls failed", i, args[i].failures);
        CHECK_MSG(args[i].wrong == 0, "thread %d: %lld wrong elements", i, (long long)args[i].wrong);
    }
    /* 12 shapes; the key also holds each pointer's alignment class (at most 9 of them) */
    int cached = fm_context_cache_size(ctx);
    printf("    %d plans cached after %d fm_matmul calls\n", cached, NTHREADS * 200);
    CHECK_MSG(cached >= 1 && cached <= 12 * 9, "%d plans cached", cached);
    fm_context_destroy(ctx);
}

int main(void)
{
    RUN_TEST(test_leak_plan_cycles);
    RUN_TEST(test_leak_stateless);
    RUN_TEST(test_leak_contexts);
    RUN_TEST(test_threads_share_plan);
    RUN_TEST(test_threads_share_context);
    TEST_MAIN_RETURN();
}
