/* test_rng_alloc_fail.c : every host allocation of the RNG backends' planning fails in turn, and
 * each failure must come back as FM_ERR_OUT_OF_MEMORY with a message, with nothing leaked and
 * nothing left in the plan (impl NULL); the same plan without a failure then succeeds.
 *
 * Linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free (tests/CMakeLists.txt):
 * the library's objects are linked into this executable, so their calls come here. The n-th
 * allocation made while armed returns NULL; every block allocated while armed is tracked until
 * freed, so a block an error path forgets is seen. Covered: the CPU backend (continuous fills,
 * integers, poisson in both modes, the alias table of curand mode's poisson), the public planning
 * path of a poisson plan, and with the CUDA toolkit the curand backend's plan, the rngkernel
 * backend's first allocation and the generated kernel's source (none of which needs a GPU). */
#include "check.h"
#include "internal.h"
#include "operation.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include "cuda/rng_kernel.h"
#endif

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

#define MAX_LIVE 1024
static int g_armed, g_fail_at, g_count;
static void *g_live[MAX_LIVE];
static int g_nlive, g_overflow;

static void track(void *p)
{
    if (!p || !g_armed)
        return;
    if (g_nlive < MAX_LIVE)
        g_live[g_nlive++] = p;
    else
        g_overflow = 1;
}

static void untrack(void *p)
{
    for (int i = 0; p && i < g_nlive; i++)
        if (g_live[i] == p) {
            g_live[i] = g_live[--g_nlive];
            return;
        }
}

/* 1: this allocation is the one that fails */
static int fail_now(void) { return g_armed && g_count++ == g_fail_at; }

void *__wrap_malloc(size_t n)
{
    if (fail_now())
        return NULL;
    void *p = __real_malloc(n);
    track(p);
    return p;
}

void *__wrap_calloc(size_t n, size_t m)
{
    if (fail_now())
        return NULL;
    void *p = __real_calloc(n, m);
    track(p);
    return p;
}

void *__wrap_realloc(void *old, size_t n)
{
    if (fail_now())
        return NULL; /* old stays the caller's */
    void *p = __real_realloc(old, n);
    if (p) {
        untrack(old);
        track(p);
    }
    return p;
}

void __wrap_free(void *p)
{
    untrack(p);
    __real_free(p);
}

/* arm: allocation fail_at (0-based; -1: none) fails; disarm returns how many were asked for */
static void arm(int fail_at)
{
    g_fail_at = fail_at, g_count = 0, g_nlive = 0, g_overflow = 0, g_armed = 1;
}

static int disarm(void)
{
    g_armed = 0, g_nlive = 0; /* frees from here on are the unarmed code's */
    return g_count;
}

static fm_context *g_ctx;
static const fm_device cpu0 = {FM_DEVICE_CPU, 0};

/* One plan call of backend `be` for p, the fail_at-th allocation failing; the plan is released
 * (destroy_impl included) before the blocks still live are counted. */
static fm_status plan_once(const fm_backend *be, const fm_problem *p, int fail_at, int *asked, int *leaked,
                           int *impl_left)
{
    fm_plan *pl = fm_plan_alloc(p); /* core's, before arming */
    fm_attachments att;
    memset(&att, 0, sizeof att);
    pl->attach = &att;
    arm(fail_at);
    fm_status s = be->plan(g_ctx, NULL, p, pl);
    *asked = g_count;
    g_armed = 0; /* frees are still tracked: the plan's own blocks go with it */
    *impl_left = s != FM_OK && pl->impl != NULL;
    if (s != FM_OK)
        pl->impl = NULL, pl->destroy_impl = NULL;
    pl->attach = NULL;
    fm_plan_release(pl);
    *leaked = g_nlive + g_overflow;
    disarm();
    return s;
}

/* Every allocation of be's plan for p fails in turn. */
static void sweep_backend(const char *label, const fm_backend *be, const fm_problem *p, int max_fails)
{
    int asked = 0, leaked = 0, impl_left = 0;
    const fm_status s0 = plan_once(be, p, -1, &asked, &leaked, &impl_left);
    CHECK_MSG(s0 == FM_OK && leaked == 0, "%s: plan without failures: status %d, %d blocks left", label, (int)s0,
              leaked);
    CHECK_MSG(asked >= 1, "%s: the plan allocated nothing (the sweep checks nothing)", label);
    const int n = asked < max_fails ? asked : max_fails;
    for (int i = 0; i < n; i++) {
        int a = 0;
        fm_status s = plan_once(be, p, i, &a, &leaked, &impl_left);
        CHECK_MSG(s == FM_ERR_OUT_OF_MEMORY, "%s: allocation %d of %d failing gave status %d, expected "
                  "FM_ERR_OUT_OF_MEMORY", label, i, asked, (int)s);
        CHECK_MSG(fm_test_contains(fm_last_error(), "out of host memory"), "%s: allocation %d: message '%s'",
                  label, i, fm_last_error());
        CHECK_MSG(leaked == 0, "%s: allocation %d failing leaked %d blocks", label, i, leaked);
        CHECK_MSG(!impl_left, "%s: allocation %d failing left an impl in the plan", label, i);
    }
}

static void rng_problem(fm_rng_distribution dist, fm_rng_mode mode, double lam, fm_dtype dt, int64_t n,
                        fm_problem *p)
{
    static char buf[64];
    fm_tensor t;
    fm_tensor_init(&t, buf, cpu0, dt, 1, &n, NULL);
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = dist, o.mode = mode, o.lam = lam, o.int_low = 0, o.int_high = 1000;
    o.execution = FM_EXECUTION_CPU;
    const fm_tensor *ts[FM_RNG_NSLOTS] = {&t};
    fm_attachments att;
    memset(&att, 0, sizeof att);
    CHECK_OK(fm_operation_build(g_ctx, &fm_operation_rng, ts, &o, p, &att));
}

extern const fm_backend fm_backend_philox_rng;

static void test_cpu_backend(void)
{
    static const struct {
        const char *label;
        fm_rng_distribution dist;
        fm_rng_mode mode;
        double lam;
        fm_dtype dt;
    } cases[] = {
        {"normal f64 portable", FM_RNG_NORMAL, FM_RNG_PORTABLE, 1, FM_F64},
        {"uniform f32 curand", FM_RNG_UNIFORM, FM_RNG_CURAND, 1, FM_F32},
        {"integers i64", FM_RNG_INTEGERS, FM_RNG_PORTABLE, 1, FM_I64},
        {"poisson portable", FM_RNG_POISSON, FM_RNG_PORTABLE, 30, FM_I64},
        {"poisson curand lam 0.5 (alias table)", FM_RNG_POISSON, FM_RNG_CURAND, 0.5, FM_I64},
        {"poisson curand lam 1999 (alias table)", FM_RNG_POISSON, FM_RNG_CURAND, 1999, FM_U32},
        {"poisson curand lam 2000 (normal)", FM_RNG_POISSON, FM_RNG_CURAND, 2000, FM_U32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fm_problem p;
        rng_problem(cases[i].dist, cases[i].mode, cases[i].lam, cases[i].dt, 8, &p);
        sweep_backend(cases[i].label, &fm_backend_philox_rng, &p, 64);
    }
}

/* The alias table planned after a failure is the one planned without: the values of a poisson fill
 * are the same as a fresh context's (no state left behind by the failed plans). */
static void test_values_after_failures(void)
{
    fm_problem p;
    rng_problem(FM_RNG_POISSON, FM_RNG_CURAND, 7.5, FM_I64, 8, &p);
    sweep_backend("poisson curand lam 7.5", &fm_backend_philox_rng, &p, 64);
    int64_t n = 4096, a[4096], b[4096];
    fm_tensor ta, tb;
    fm_tensor_init(&ta, a, cpu0, FM_I64, 1, &n, NULL);
    fm_tensor_init(&tb, b, cpu0, FM_I64, 1, &n, NULL);
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = FM_RNG_POISSON, o.mode = FM_RNG_CURAND, o.lam = 7.5, o.execution = FM_EXECUTION_CPU;
    CHECK_OK(fm_rng(g_ctx, &ta, &o, 11, 5, NULL));
    fm_context *fresh = NULL;
    CHECK_OK(fm_context_create(&fresh));
    CHECK_OK(fm_rng(fresh, &tb, &o, 11, 5, NULL));
    fm_context_destroy(fresh);
    CHECK(memcmp(a, b, sizeof a) == 0);
    double mean = 0; /* and they are poisson(7.5)'s: the mean within 6 standard errors */
    for (int64_t i = 0; i < n; i++)
        mean += (double)a[i] / (double)n;
    CHECK_MSG(mean > 7.5 - 6 * sqrt(7.5 / 4096.0) && mean < 7.5 + 6 * sqrt(7.5 / 4096.0), "mean %g", mean);
}

/* The public path (core's plan object and cache too): a failure anywhere is an error with a
 * message and no plan, or (an allocation core can do without, as a cache entry) a plan that makes
 * the values a plan without failures makes; never a crash, and the next call plans normally. */
static void test_public_path(void)
{
    int64_t n = 16, want[16], got[16];
    fm_tensor t;
    fm_tensor_init(&t, got, cpu0, FM_I64, 1, &n, NULL);
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = FM_RNG_POISSON, o.mode = FM_RNG_CURAND, o.lam = 3.25, o.execution = FM_EXECUTION_CPU;
    CHECK_OK(fm_rng(g_ctx, &t, &o, 5, 0, NULL));
    memcpy(want, got, sizeof want);
    for (int i = 0; i < 200; i++) {
        fm_context *ctx = NULL;
        CHECK_OK(fm_context_create(&ctx));
        fm_plan *plan = NULL;
        arm(i);
        fm_status s = fm_rng_plan(ctx, &t, &o, &plan);
        const int asked = disarm();
        if (s == FM_OK) {
            void *ptrs[1] = {got};
            fm_exec_args args;
            fm_exec_args_init(&args);
            args.ints[3] = 5;
            memset(got, 0, sizeof got);
            CHECK(plan != NULL && fm_plan_execute_args(plan, ptrs, 1, &args, NULL) == FM_OK);
            CHECK_MSG(memcmp(got, want, sizeof got) == 0, "allocation %d failing: other values", i);
        } else {
            CHECK_MSG(plan == NULL, "allocation %d failing: status %d and a plan", i, (int)s);
            CHECK_MSG(fm_last_error() && fm_last_error()[0], "allocation %d failing: status %d, no message", i,
                      (int)s);
        }
        fm_plan_release(plan);
        plan = NULL;
        CHECK_OK(fm_rng_plan(ctx, &t, &o, &plan)); /* the next call plans */
        fm_plan_release(plan);
        fm_context_destroy(ctx);
        if (asked <= i) { /* no allocation failed: every one has been tried */
            CHECK_MSG(i > 0, "the public path allocated nothing");
            break;
        }
    }
}

#ifdef FM_HAVE_CUDA
extern const fm_backend fm_backend_curand_rng, fm_backend_rngkernel_rng;

static void test_cuda_backends(void)
{
    fm_problem p;
    rng_problem(FM_RNG_NORMAL, FM_RNG_CURAND, 1, FM_F32, 8, &p);
    p.exec_device = (fm_device){FM_DEVICE_CUDA, 0}; /* the curand plan reads its id only */
    sweep_backend("curand normal f32", &fm_backend_curand_rng, &p, 8);
    /* rngkernel: its first allocation (before any device call) */
    rng_problem(FM_RNG_UNIFORM, FM_RNG_PORTABLE, 1, FM_F32, 8, &p);
    p.exec_device = (fm_device){FM_DEVICE_CUDA, 0};
    int asked = 0, leaked = 0, impl_left = 0;
    CHECK_STATUS(plan_once(&fm_backend_rngkernel_rng, &p, 0, &asked, &leaked, &impl_left), FM_ERR_OUT_OF_MEMORY);
    CHECK_ERROR_MENTIONS("out of host memory");
    CHECK(leaked == 0 && !impl_left);
    /* the generated kernel's source text */
    char *src = (char *)&src;
    arm(0);
    CHECK_STATUS(fm_rng_kernel_source(FM_RNG_NORMAL, FM_F64, &src), FM_ERR_OUT_OF_MEMORY);
    disarm();
    CHECK_ERROR_MENTIONS("out of host memory");
    CHECK(src == NULL);
    CHECK_OK(fm_rng_kernel_source(FM_RNG_NORMAL, FM_F64, &src));
    CHECK(src && strstr(src, "fm_rng_r0"));
    free(src);
}
#endif

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "fm_context_create failed: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_cpu_backend);
    RUN_TEST(test_values_after_failures);
    RUN_TEST(test_public_path);
#ifdef FM_HAVE_CUDA
    RUN_TEST(test_cuda_backends);
#endif
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
