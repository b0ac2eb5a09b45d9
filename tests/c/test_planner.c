/* test_planner.c : backend choice, fake backends, the plan cache, FUSEMATH_BACKEND. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "internal.h"
#include "mmref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- a fake CPU backend: plans only m == 7 (m == 13: a hard error) ---- */
static atomic_int fake_probes, fake_releases, fake_plans, fake_executes, fake_destroys;
static const float FAKE_MARKER = 777.0f;

static fm_status fake_probe(const fm_settings *settings, void **state, const char **why)
{
    (void)why;
    atomic_fetch_add(&fake_probes, 1);
    *state = malloc(16);
    return *state ? FM_OK : FM_ERR_OUT_OF_MEMORY;
}

static void fake_release(void *state)
{
    atomic_fetch_add(&fake_releases, 1);
    free(state);
}

static fm_status fake_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)p;
    (void)stream;
    atomic_fetch_add(&fake_executes, 1);
    *(float *)ptrs[FM_MATMUL_D] = FAKE_MARKER;
    return FM_OK;
}

static void fake_destroy(void *impl)
{
    atomic_fetch_add(&fake_destroys, 1);
    free(impl);
}

static fm_status fake_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *plan)
{
    (void)ctx;
    if (!state) return fm_fail(FM_ERR_INTERNAL, "fake: no state");
    if (p->op != FM_OP_MATMUL) return fm_fail(FM_ERR_NOT_APPLICABLE, "fake: only matmul");
    const fm_tensor *a = &p->t[FM_MATMUL_A];
    int64_t m = a->shape[a->ndim - 2];
    if (m == 13) return fm_fail(FM_ERR_BACKEND, "fake: m == 13 is a hard error");
    if (m != 7 || a->dtype != FM_F32) return fm_fail(FM_ERR_NOT_APPLICABLE, "fake: only m == 7, f32");
    plan->impl = malloc(32);
    plan->execute = fake_execute;
    plan->destroy_impl = fake_destroy;
    for (int i = 0; i < FM_MAX_SLOTS; ++i) plan->required_align[i] = 1;
    snprintf(plan->describe, sizeof plan->describe, "matmul cpu/fake f32 m=7");
    atomic_fetch_add(&fake_plans, 1);
    return FM_OK;
}

static const fm_backend fake_backend = {
    .name = "fake",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_MATMUL,
    .priority = 1000000,
    .probe = fake_probe,
    .release = fake_release,
    .plan = fake_plan,
};

/* ---- a small f32 problem with its buffers ---- */
typedef struct {
    test_operand a, b, d;
    fm_tensor bias_t;
    float bias[64];
} small_mm;

static void small_make(small_mm *s, fm_dtype dt, int64_t m, int64_t n, int64_t k, test_rng *rng)
{
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n};
    operand_contig(&s->a, dt, 2, sa, rng);
    operand_contig(&s->b, dt, 2, sb, rng);
    operand_contig(&s->d, dt, 2, sd, NULL);
    for (int i = 0; i < 64; ++i) s->bias[i] = (float)i;
    int64_t sbias[1] = {n};
    fm_tensor_init(&s->bias_t, s->bias, fm_test_cpu, FM_F32, 1, sbias, NULL);
}

static void small_free(small_mm *s)
{
    operand_free(&s->a);
    operand_free(&s->b);
    operand_free(&s->d);
}

/* Plan a plain matmul; returns the status. */
static fm_status small_plan(fm_context *ctx, small_mm *s, unsigned epilogue, fm_plan **plan)
{
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = epilogue;
    return fm_matmul_plan(ctx, &s->a.t, &s->b.t, NULL, (epilogue & FM_EPILOGUE_BIAS) ? &s->bias_t : NULL, &s->d.t,
                          NULL, &o, plan);
}

static fm_status small_exec(const fm_plan *plan, small_mm *s, unsigned epilogue)
{
    void *ptrs[FM_MATMUL_NSLOTS] = {0};
    ptrs[FM_MATMUL_A] = s->a.t.data;
    ptrs[FM_MATMUL_B] = s->b.t.data;
    ptrs[FM_MATMUL_D] = s->d.t.data;
    if (epilogue & FM_EPILOGUE_BIAS) ptrs[FM_MATMUL_BIAS] = s->bias_t.data;
    return fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL);
}

/* Check s->d against the reference (f32/f64, identity or bias). */
static void small_verify(small_mm *s, unsigned epilogue, const char *what)
{
    mm_ref r;
    mm_reference(&r, &s->a.t, &s->b.t, NULL, (epilogue & FM_EPILOGUE_BIAS) ? &s->bias_t : NULL, &s->d.t, 1.0, 0.0,
                 epilogue);
    int64_t first;
    double complex g = 0, w = 0;
    int64_t bad = mm_compare(&s->d.t, &r, r.post, &first, &g, &w);
    CHECK_MSG(bad == 0, "%s: %lld mismatches, first at %lld: got %g want %g", what, (long long)bad, (long long)first,
              creal(g), creal(w));
    mm_ref_free(&r);
}

static void reset_counters(void)
{
    atomic_store(&fake_probes, 0);
    atomic_store(&fake_releases, 0);
    atomic_store(&fake_plans, 0);
    atomic_store(&fake_executes, 0);
    atomic_store(&fake_destroys, 0);
}

static void test_fake_backend_choice(void)
{
    reset_counters();
    unsetenv("FUSEMATH_BACKEND");
    test_rng rng = {42};
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    int n0 = fm_context_backend_count(ctx);
    CHECK_OK(fm_context_register_backend(ctx, &fake_backend));
    CHECK(fm_context_backend_count(ctx) == n0 + 1);
    int seen = 0;
    for (int i = 0; i < fm_context_backend_count(ctx); ++i) {
        const char *name = NULL, *why = NULL;
        fm_device_type dev;
        int avail = 0;
        if (fm_context_backend_info(ctx, i, &name, &dev, &avail, &why) == FM_OK && name && strcmp(name, "fake") == 0)
            seen = (dev == FM_DEVICE_CPU && avail == 1);
    }
    CHECK_MSG(seen, "registered fake backend is not listed as an available cpu backend");

    /* m == 7: the fake backend (higher priority) takes it. */
    small_mm s7;
    small_make(&s7, FM_F32, 7, 5, 3, &rng);
    fm_plan *p7 = NULL;
    CHECK_OK(small_plan(ctx, &s7, 0, &p7));
    if (p7) {
        CHECK_MSG(strcmp(fm_plan_backend(p7), "fake") == 0, "m == 7 planned by \"%s\"", fm_plan_backend(p7));
        CHECK(fm_plan_op(p7) == FM_OP_MATMUL);
        CHECK(fm_test_contains(fm_plan_describe(p7), "fake"));
        CHECK_OK(small_exec(p7, &s7, 0));
        CHECK(((float *)s7.d.t.data)[0] == FAKE_MARKER);
        CHECK(atomic_load(&fake_executes) == 1);
    }

    /* m == 8: not applicable for the fake one, so openblas, with the right answer. */
    small_mm s8;
    small_make(&s8, FM_F32, 8, 5, 3, &rng);
    fm_plan *p8 = NULL;
    CHECK_OK(small_plan(ctx, &s8, FM_EPILOGUE_BIAS, &p8));
    if (p8) {
        CHECK_MSG(strcmp(fm_plan_backend(p8), "openblas") == 0, "m == 8 planned by \"%s\"", fm_plan_backend(p8));
        CHECK(fm_test_contains(fm_plan_describe(p8), "openblas"));
        CHECK(fm_test_contains(fm_plan_describe(p8), "matmul"));
        CHECK_OK(small_exec(p8, &s8, FM_EPILOGUE_BIAS));
        small_verify(&s8, FM_EPILOGUE_BIAS, "m == 8 via openblas");
        CHECK(atomic_load(&fake_executes) == 1);
    }

    /* m == 7 but f64: not applicable either. */
    small_mm s7d;
    small_make(&s7d, FM_F64, 7, 4, 2, &rng);
    fm_plan *p7d = NULL;
    CHECK_OK(small_plan(ctx, &s7d, 0, &p7d));
    if (p7d) CHECK(strcmp(fm_plan_backend(p7d), "openblas") == 0);

    /* m == 13: any error other than NOT_APPLICABLE stops planning. */
    small_mm s13;
    small_make(&s13, FM_F32, 13, 4, 2, &rng);
    fm_plan *p13 = NULL;
    CHECK_STATUS(small_plan(ctx, &s13, 0, &p13), FM_ERR_BACKEND);
    CHECK(p13 == NULL);
    CHECK_ERROR_MENTIONS("m == 13");

    fm_plan_release(p7);
    fm_plan_release(p8);
    fm_plan_release(p7d);
    fm_context_destroy(ctx);
    CHECK_MSG(atomic_load(&fake_destroys) == atomic_load(&fake_plans), "fake plans made %d, destroyed %d",
              atomic_load(&fake_plans), atomic_load(&fake_destroys));
    CHECK_MSG(atomic_load(&fake_probes) >= 1 && atomic_load(&fake_probes) == atomic_load(&fake_releases),
              "fake state probed %d times, released %d times", atomic_load(&fake_probes),
              atomic_load(&fake_releases));
    small_free(&s7);
    small_free(&s8);
    small_free(&s7d);
    small_free(&s13);
}

static void test_plan_cache(void)
{
    reset_counters();
    unsetenv("FUSEMATH_BACKEND");
    test_rng rng = {7};
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    CHECK_OK(fm_context_register_backend(ctx, &fake_backend));

    small_mm s, s2, sd;
    small_make(&s, FM_F32, 9, 6, 4, &rng);
    small_make(&s2, FM_F32, 9, 6, 5, &rng);  /* other k */
    small_make(&sd, FM_F64, 9, 6, 4, &rng);  /* other dtype */
    fm_plan *p1 = NULL, *p2 = NULL, *p3 = NULL, *p4 = NULL, *p5 = NULL;
    CHECK(fm_context_cache_size(ctx) == 0);
    CHECK_OK(small_plan(ctx, &s, 0, &p1));
    CHECK(fm_context_cache_size(ctx) == 1);
    CHECK_OK(small_plan(ctx, &s, 0, &p2));
    CHECK_MSG(p1 != NULL && p1 == p2, "identical problems gave plans %p and %p", (void *)p1, (void *)p2);
    CHECK(fm_context_cache_size(ctx) == 1);
    CHECK_OK(small_plan(ctx, &s2, 0, &p3));
    CHECK(p3 && p3 != p1 && fm_context_cache_size(ctx) == 2);
    CHECK_OK(small_plan(ctx, &sd, 0, &p4));
    CHECK(p4 && p4 != p1 && p4 != p3 && fm_context_cache_size(ctx) == 3);
    CHECK_OK(small_plan(ctx, &s, FM_EPILOGUE_BIAS, &p5));
    CHECK(p5 && p5 != p1 && fm_context_cache_size(ctx) == 4);

    /* fm_matmul uses the same cache. */
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    CHECK_OK(fm_matmul(ctx, &s.a.t, &s.b.t, NULL, NULL, &s.d.t, NULL, &o, NULL));
    CHECK(fm_context_cache_size(ctx) == 4);
    small_verify(&s, 0, "fm_matmul through the cache");

    /* Other options are other problems. */
    fm_plan *p6 = NULL;
    o.alpha[0] = 2.0;
    CHECK_OK(fm_matmul_plan(ctx, &s.a.t, &s.b.t, NULL, NULL, &s.d.t, NULL, &o, &p6));
    CHECK(p6 && p6 != p1 && fm_context_cache_size(ctx) == 5);

    /* Clearing drops the cache, not the caller's plans. */
    fm_context_clear_cache(ctx);
    CHECK(fm_context_cache_size(ctx) == 0);
    memset(s.d.buf, 0, (size_t)s.d.nbuf * sizeof(float));
    if (p1) CHECK_OK(small_exec(p1, &s, 0));
    small_verify(&s, 0, "plan held across fm_context_clear_cache");
    fm_plan *p7 = NULL;
    CHECK_OK(small_plan(ctx, &s, 0, &p7));
    CHECK(p7 != NULL && fm_context_cache_size(ctx) == 1);

    /* Retain / release balance: a retained plan survives one release. */
    if (p7) {
        fm_plan_retain(p7);
        fm_plan_release(p7);
        CHECK_OK(small_exec(p7, &s, 0));
    }
    fm_plan_release(p1);
    fm_plan_release(p2);
    fm_plan_release(p3);
    fm_plan_release(p4);
    fm_plan_release(p5);
    fm_plan_release(p6);
    fm_plan_release(p7);
    fm_context_destroy(ctx);
    small_free(&s);
    small_free(&s2);
    small_free(&sd);
}

/* A descriptor filled by hand may hold anything past its ndim; the problem (the cache and
 * wisdom key) must not: the same problem with other junk there is one cached plan (before: one
 * plan per junk pattern, and wisdom missed). */
static void test_cache_ignores_bytes_past_ndim(void)
{
    reset_counters();
    unsetenv("FUSEMATH_BACKEND");
    test_rng rng = {11};
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    CHECK_OK(fm_context_register_backend(ctx, &fake_backend));
    small_mm s;
    small_make(&s, FM_F32, 9, 6, 4, &rng);
    fm_plan *first = NULL;
    CHECK_OK(small_plan(ctx, &s, FM_EPILOGUE_BIAS, &first));
    for (int junk = 1; junk <= 3; junk++) {
        fm_tensor *ts[4] = {&s.a.t, &s.b.t, &s.d.t, &s.bias_t};
        for (int i = 0; i < 4; i++)
            for (int j = ts[i]->ndim; j < FM_MAX_NDIM; j++)
                ts[i]->shape[j] = 1000 * junk + j, ts[i]->strides[j] = -junk;
        fm_plan *again = NULL;
        CHECK_OK(small_plan(ctx, &s, FM_EPILOGUE_BIAS, &again));
        CHECK_MSG(again == first, "junk %d past ndim gave another plan (%p, not the cached %p)", junk, (void *)again,
                  (void *)first);
        fm_plan_release(again);
    }
    CHECK(fm_context_cache_size(ctx) == 1);
    fm_plan_release(first);
    fm_context_destroy(ctx);
    small_free(&s);
}

/* Autotuning one problem again and again replaces the cached plan with an alias of the winner;
 * an alias of an alias would grow a chain one link per call (memory, and every later execute
 * walking it). The alias's target is never itself an alias. */
static void test_repeated_autotune_builds_no_chain(void)
{
    unsetenv("FUSEMATH_BACKEND");
    test_rng rng = {13};
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    small_mm s;
    small_make(&s, FM_F32, 8, 8, 8, &rng);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    for (int i = 0; i < 20; i++) {
        fm_plan *plan = NULL;
        CHECK_OK(fm_matmul_autotune(ctx, &s.a.t, &s.b.t, NULL, NULL, &s.d.t, NULL, &o, 1, &plan));
        const fm_plan *t = fm_plan_alias_target(plan);
        CHECK_MSG(fm_plan_alias_target(t) == t, "autotune %d: the alias's target is an alias too", i);
        fm_plan_release(plan);
    }
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_plan(ctx, &s.a.t, &s.b.t, NULL, NULL, &s.d.t, NULL, &o, &plan));
    if (plan) {
        const fm_plan *t = fm_plan_alias_target(plan);
        CHECK(fm_plan_alias_target(t) == t);
        memset(s.d.buf, 0, (size_t)s.d.nbuf * sizeof(float));
        CHECK_OK(small_exec(plan, &s, 0));
        small_verify(&s, 0, "the plan after 20 autotunes");
    }
    fm_plan_release(plan);
    fm_context_destroy(ctx);
    small_free(&s);
}

/* Plans still held by the caller stay valid after fm_context_destroy. */
static void test_plan_outlives_context(void)
{
    reset_counters();
    unsetenv("FUSEMATH_BACKEND");
    test_rng rng = {99};
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    CHECK_OK(fm_context_register_backend(ctx, &fake_backend));
    small_mm s, s7;
    small_make(&s, FM_F32, 33, 17, 9, &rng);
    small_make(&s7, FM_F32, 7, 3, 2, &rng);
    fm_plan *p = NULL, *pf = NULL;
    CHECK_OK(small_plan(ctx, &s, FM_EPILOGUE_BIAS, &p));
    CHECK_OK(small_plan(ctx, &s7, 0, &pf));
    fm_context_destroy(ctx);
    CHECK(atomic_load(&fake_destroys) == 0);
    if (p) {
        CHECK(fm_test_contains(fm_plan_describe(p), "matmul"));
        CHECK_OK(small_exec(p, &s, FM_EPILOGUE_BIAS));
        small_verify(&s, FM_EPILOGUE_BIAS, "plan executed after its context was destroyed");
    }
    if (pf) {
        CHECK_OK(small_exec(pf, &s7, 0));
        CHECK(((float *)s7.d.t.data)[0] == FAKE_MARKER);
    }
    fm_plan_release(p);
    fm_plan_release(pf);
    CHECK_MSG(atomic_load(&fake_destroys) == 1, "fake impl destroyed %d times", atomic_load(&fake_destroys));
    CHECK_MSG(atomic_load(&fake_probes) == atomic_load(&fake_releases), "fake state probed %d, released %d",
              atomic_load(&fake_probes), atomic_load(&fake_releases));
    small_free(&s);
    small_free(&s7);
}

static void test_forced_backend(void)
{
    reset_counters();
    test_rng rng = {5};
    setenv("FUSEMATH_BACKEND", "openblas", 1);
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    unsetenv("FUSEMATH_BACKEND");
    if (!ctx) return;
    CHECK_OK(fm_context_register_backend(ctx, &fake_backend));
    small_mm s7;
    small_make(&s7, FM_F32, 7, 5, 3, &rng);
    fm_plan *p = NULL;
    CHECK_OK(small_plan(ctx, &s7, 0, &p));
    if (p) {
        CHECK_MSG(strcmp(fm_plan_backend(p), "openblas") == 0, "forced openblas, got \"%s\"", fm_plan_backend(p));
        CHECK_OK(small_exec(p, &s7, 0));
        small_verify(&s7, 0, "forced openblas");
    }
    CHECK(atomic_load(&fake_plans) == 0 && atomic_load(&fake_executes) == 0);
    fm_plan_release(p);
    fm_context_destroy(ctx);

    /* An unknown name: refused where it is read, at context creation, naming it and what exists. */
    setenv("FUSEMATH_BACKEND", "nosuchbackend", 1);
    ctx = NULL;
    CHECK_STATUS(fm_context_create(&ctx), FM_ERR_INVALID_ARGUMENT);
    unsetenv("FUSEMATH_BACKEND");
    CHECK(ctx == NULL);
    CHECK_ERROR_MENTIONS("nosuchbackend");
    CHECK_ERROR_MENTIONS("openblas");
    small_free(&s7);
}

/* A backend whose device is absent: listed as unavailable with its reason, never offered. */
static fm_status absent_probe(const fm_settings *settings, void **state, const char **why)
{
    *state = NULL;
    *why = "fake accelerator not present";
    return FM_ERR_UNAVAILABLE;
}

static atomic_int absent_plans;
static fm_status absent_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *plan)
{
    (void)ctx, (void)state, (void)p, (void)plan;
    atomic_fetch_add(&absent_plans, 1);
    return fm_fail(FM_ERR_INTERNAL, "absent backend must never be asked to plan");
}

static const fm_backend absent_backend = {
    .name = "absentfake",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_MATMUL,
    .priority = 2000000,
    .probe = absent_probe,
    .plan = absent_plan,
};

static void test_unavailable_backend(void)
{
    unsetenv("FUSEMATH_BACKEND");
    test_rng rng = {8};
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    CHECK_OK(fm_context_register_backend(ctx, &absent_backend));
    int found = 0;
    for (int i = 0; i < fm_context_backend_count(ctx); ++i) {
        const char *name = NULL, *why = NULL;
        fm_device_type dev;
        int avail = 1;
        CHECK_OK(fm_context_backend_info(ctx, i, &name, &dev, &avail, &why));
        if (name && strcmp(name, "absentfake") == 0) {
            found = 1;
            CHECK(avail == 0);
            CHECK_MSG(why && strstr(why, "fake accelerator not present"), "why = \"%s\"", why ? why : "(null)");
        }
    }
    CHECK(found);
    small_mm s;
    small_make(&s, FM_F32, 7, 4, 3, &rng);
    fm_plan *p = NULL;
    CHECK_OK(small_plan(ctx, &s, 0, &p));
    if (p) CHECK(strcmp(fm_plan_backend(p), "openblas") == 0);
    CHECK(atomic_load(&absent_plans) == 0);
    fm_plan_release(p);
    fm_context_destroy(ctx);

    /* FUSEMATH_BACKEND names built-in backends only: a registered one is not there yet when the
     * context reads it, and creation refuses the name */
    setenv("FUSEMATH_BACKEND", "absentfake", 1);
    ctx = NULL;
    CHECK_STATUS(fm_context_create(&ctx), FM_ERR_INVALID_ARGUMENT);
    unsetenv("FUSEMATH_BACKEND");
    CHECK(ctx == NULL);
    CHECK_ERROR_MENTIONS("absentfake");

    /* a problem no available backend plans: the refusal lists the unavailable one with its reason
     * (fp8 inputs: the CPU backends decline them) */
    CHECK_OK(fm_context_create(&ctx));
    if (ctx) {
        CHECK_OK(fm_context_register_backend(ctx, &absent_backend));
        const int64_t sq[2] = {4, 4};
        static uint8_t a8[16], b8[16];
        static uint16_t d16[16];
        fm_tensor ta, tb, td;
        CHECK_OK(fm_tensor_init(&ta, a8, (fm_device){FM_DEVICE_CPU, 0}, FM_F8E4M3, 2, sq, NULL));
        CHECK_OK(fm_tensor_init(&tb, b8, (fm_device){FM_DEVICE_CPU, 0}, FM_F8E4M3, 2, sq, NULL));
        CHECK_OK(fm_tensor_init(&td, d16, (fm_device){FM_DEVICE_CPU, 0}, FM_BF16, 2, sq, NULL));
        p = NULL;
        fm_status st = fm_matmul_plan(ctx, &ta, &tb, NULL, NULL, &td, NULL, NULL, &p);
        CHECK_MSG(st != FM_OK && p == NULL, "fp8 on the cpu -> %s", fm_status_name(st));
        CHECK_ERROR_MENTIONS("absentfake: unavailable (fake accelerator not present)");
        CHECK(atomic_load(&absent_plans) == 0);
        fm_plan_release(p);
        fm_context_destroy(ctx);
    }

    /* forcing a built-in backend that is unavailable here (a CUDA one without a GPU): creation
     * accepts it, planning fails naming it */
    CHECK_OK(fm_context_create(&ctx));
    const char *absent = NULL;
    for (int i = 0; ctx && i < fm_context_backend_count(ctx); ++i) {
        const char *name = NULL, *why = NULL;
        fm_device_type dev;
        int avail = 1;
        CHECK_OK(fm_context_backend_info(ctx, i, &name, &dev, &avail, &why));
        if (!avail && !absent) absent = name; /* a name from the static table: outlives ctx */
    }
    fm_context_destroy(ctx);
    if (absent) {
        setenv("FUSEMATH_BACKEND", absent, 1);
        ctx = NULL;
        CHECK_OK(fm_context_create(&ctx));
        unsetenv("FUSEMATH_BACKEND");
        p = NULL;
        fm_status st = ctx ? small_plan(ctx, &s, 0, &p) : FM_ERR_INTERNAL;
        CHECK_MSG(st != FM_OK && p == NULL, "forced unavailable backend %s -> %s", absent, fm_status_name(st));
        CHECK_ERROR_MENTIONS(absent);
        fm_plan_release(p);
        fm_context_destroy(ctx);
    }
    small_free(&s);
}

static void test_register_bad(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    CHECK_STATUS(fm_context_register_backend(ctx, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_context_register_backend(NULL, &fake_backend), FM_ERR_INVALID_ARGUMENT);
    fm_context_destroy(ctx);
}

/* ---- wisdom salt: a backend's salt (its build, device, settings) keys the entries ---- */
static const char *g_salt = "";
static void salt_fn(const fm_context *ctx, void *state, const fm_problem *p, char *buf, size_t n)
{
    (void)ctx, (void)state, (void)p;
    snprintf(buf, n, "%s", g_salt);
}
/* Its one candidate (panel_rows = SALT_PANEL) is a plan that does nothing, so it always wins
 * autotune's timing and every autotune records an entry: the keys are compared, not timings. */
enum { SALT_PANEL = 96 };
static fm_status salt_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)plan, (void)ptrs, (void)args, (void)stream;
    return FM_OK;
}
static fm_status salt_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *plan)
{
    (void)ctx, (void)state;
    if (p->u.matmul.panel_rows != SALT_PANEL)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "salt: plans only its own candidate");
    plan->execute = salt_execute;
    for (int i = 0; i < FM_MAX_SLOTS; ++i)
        plan->required_align[i] = 1;
    snprintf(plan->describe, sizeof plan->describe, "matmul cpu/salt no-op");
    return FM_OK;
}
static int salt_candidates(const fm_context *ctx, void *state, const fm_problem *p, fm_problem *cand, int *group,
                           int max)
{
    (void)ctx, (void)state;
    if (max < 1)
        return 0;
    cand[0] = *p;
    cand[0].u.matmul.panel_rows = SALT_PANEL;
    group[0] = -1;
    return 1;
}
static const fm_backend salt_backend = {
    .name = "salt",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_MATMUL,
    .priority = 1000000,
    .plan = salt_plan,
    .wisdom_salt = salt_fn,
    .tune_candidates = salt_candidates,
};

/* Autotune one CPU matmul in a fresh context with the salt backend giving `salt` ("": none),
 * save the wisdom, and return the entry's key as written in the file. */
static void key_after_autotune(const char *salt, char key[32])
{
    key[0] = 0;
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx)
        return;
    g_salt = salt;
    CHECK_OK(fm_context_register_backend(ctx, &salt_backend));
    test_rng rng = {5};
    small_mm s;
    small_make(&s, FM_F32, 64, 48, 32, &rng);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_autotune(ctx, &s.a.t, &s.b.t, NULL, NULL, &s.d.t, NULL, &o, 1, &plan));
    fm_plan_release(plan);
    char file[64];
    snprintf(file, sizeof file, "/tmp/fm_test_salt_%ld", (long)getpid());
    CHECK_OK(fm_context_wisdom_save(ctx, file));
    FILE *f = fopen(file, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "matmul ", 7) == 0)
            sscanf(line + 7, "%31s", key);
    if (f)
        fclose(f);
    remove(file);
    small_free(&s);
    fm_context_destroy(ctx);
}

static void test_wisdom_salt(void)
{
    char none[32], a1[32], a2[32], b[32];
    key_after_autotune("", none);
    key_after_autotune("build A", a1);
    key_after_autotune("build A", a2);
    key_after_autotune("build B", b);
    CHECK_MSG(none[0] && a1[0] && b[0], "no matmul entry in the wisdom file ('%s', '%s', '%s')", none, a1, b);
    CHECK_MSG(strcmp(a1, a2) == 0, "the same salt gave two keys: %s, %s", a1, a2);
    CHECK_MSG(strcmp(none, a1) != 0 && strcmp(a1, b) != 0, "a salt does not change the key: %s / %s / %s", none, a1,
              b);
}

/* ---- a flaky CPU backend for autotune's failure paths: plans m == 24 f32; a plan's first call
 * (autotune's warm-up) succeeds, later calls fail at once when flaky_mode says so; calls that
 * work take 0.2 ms ---- */
enum { FLAKY_NONE, FLAKY_DEFAULT, FLAKY_CANDIDATES };
static int flaky_mode;
static atomic_int flaky_plans, flaky_destroys;
typedef struct {
    int32_t panel_rows; /* 0: the default plan */
    int calls;
} flaky_impl;

static fm_status flaky_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)ptrs;
    (void)stream;
    flaky_impl *f = p->impl; /* single-threaded test: the count needs no atomics */
    int fails = flaky_mode == (f->panel_rows == 0 ? FLAKY_DEFAULT : FLAKY_CANDIDATES);
    if (f->calls++ > 0 && fails)
        return fm_fail(FM_ERR_BACKEND, "flaky: call %d of plan with panel_rows %d fails", f->calls,
                       (int)f->panel_rows);
    struct timespec work = {0, 200000}; /* a call that works takes time: one that fails at once must not win */
    nanosleep(&work, NULL);
    return FM_OK;
}

static void flaky_destroy(void *impl)
{
    atomic_fetch_add(&flaky_destroys, 1);
    free(impl);
}

static fm_status flaky_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *plan)
{
    (void)ctx;
    (void)state;
    const fm_tensor *a = &p->t[FM_MATMUL_A];
    if (p->op != FM_OP_MATMUL || a->shape[a->ndim - 2] != 24 || a->dtype != FM_F32)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "flaky: only m == 24, f32");
    flaky_impl *f = calloc(1, sizeof *f);
    if (!f)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "flaky: out of memory");
    f->panel_rows = p->u.matmul.panel_rows;
    plan->impl = f;
    plan->execute = flaky_execute;
    plan->destroy_impl = flaky_destroy;
    for (int i = 0; i < FM_MAX_SLOTS; ++i) plan->required_align[i] = 1;
    snprintf(plan->describe, sizeof plan->describe, "matmul cpu/flaky f32 panel_rows=%d", (int)f->panel_rows);
    atomic_fetch_add(&flaky_plans, 1);
    return FM_OK;
}

static const fm_backend flaky_backend = {
    .name = "flaky", .device = FM_DEVICE_CPU, .ops = 1u << FM_OP_MATMUL, .priority = 1000000, .plan = flaky_plan,
};

/* A candidate whose timing fails drops out (the default wins); a default whose timing fails
 * fails autotune with the backend's status and message; no plan leaks either way. */
static void test_autotune_failures(void)
{
    static const int modes[] = {FLAKY_NONE, FLAKY_CANDIDATES, FLAKY_DEFAULT};
    for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
        flaky_mode = modes[mi];
        atomic_store(&flaky_plans, 0);
        atomic_store(&flaky_destroys, 0);
        fm_context *ctx = NULL;
        CHECK_OK(fm_context_create(&ctx));
        if (!ctx)
            return;
        CHECK_OK(fm_context_register_backend(ctx, &flaky_backend));
        test_rng rng = {9};
        small_mm s;
        small_make(&s, FM_F32, 24, 8, 8, &rng);
        fm_matmul_options o;
        fm_matmul_options_init(&o);
        fm_plan *plan = NULL;
        fm_status st = fm_matmul_autotune(ctx, &s.a.t, &s.b.t, NULL, NULL, &s.d.t, NULL, &o, 2, &plan);
        if (flaky_mode == FLAKY_DEFAULT) {
            CHECK_STATUS(st, FM_ERR_BACKEND);
            CHECK_MSG(plan == NULL && strstr(fm_last_error(), "flaky: call 2 of plan with panel_rows 0 fails"),
                      "autotune with a failing default: plan %p, message '%s'", (void *)plan, fm_last_error());
        } else {
            CHECK_OK(st);
            CHECK_MSG(plan && strstr(fm_plan_describe(plan), "panel_rows=") != NULL, "describe '%s'",
                      plan ? fm_plan_describe(plan) : "(no plan)");
            if (flaky_mode == FLAKY_CANDIDATES) /* every candidate (panel 16) failed: the default stays */
                CHECK_MSG(strstr(fm_plan_describe(plan), "panel_rows=0") != NULL, "chose '%s'",
                          fm_plan_describe(plan));
        }
        fm_plan_release(plan);
        small_free(&s);
        fm_context_destroy(ctx);
        CHECK_MSG(atomic_load(&flaky_plans) >= 1 + (flaky_mode != FLAKY_DEFAULT) &&
                      atomic_load(&flaky_plans) == atomic_load(&flaky_destroys),
                  "mode %d: flaky plans made %d, destroyed %d", flaky_mode, atomic_load(&flaky_plans),
                  atomic_load(&flaky_destroys));
    }
}

/* Autotune's timing rules: a GPU timing lasts 1 ms (at least `repeats` calls, at most 1000), a
 * window of the sustained check 100 ms (1 to 2000 calls);
 * a candidate must win by 3% on the CPU, on a GPU by 1% or twice the median drift. */
static void test_autotune_rules(void)
{
    CHECK(fm_autotune_gpu_calls(10e-6, 3) == 101);  /* 100 calls make 1 ms */
    CHECK(fm_autotune_gpu_calls(2e-3, 3) == 3);     /* long calls: the repeats */
    CHECK(fm_autotune_gpu_calls(1e-9, 3) == 1000);  /* capped */
    CHECK(fm_autotune_gpu_calls(0.0, 5) == 5);      /* a zero estimate: the repeats */
    CHECK(fm_autotune_sustained_calls(1.6e-3) == 63);  /* 100 ms windows: 8192^3 bf16 on the H200 */
    CHECK(fm_autotune_sustained_calls(20e-3) == 6);
    CHECK(fm_autotune_sustained_calls(1.0) == 1);       /* one call of 100 ms or more is a window */
    CHECK(fm_autotune_sustained_calls(10e-6) == 2000);  /* at most 2000 */
    CHECK(fm_autotune_sustained_calls(0.0) == 1);
    double quiet[] = {0.003, 0.001, 0.002};
    CHECK(fm_autotune_required_gain(1, quiet, 3) == 0.01);
    double capped[] = {0.05, 0.04, 0.045, 0.001, 0.06};
    CHECK(fabs(fm_autotune_required_gain(1, capped, 5) - 0.09) < 1e-12); /* median 0.045 */
    CHECK(fm_autotune_required_gain(1, NULL, 0) == 0.01);
    CHECK(fm_autotune_required_gain(0, capped, 5) == 0.03);
}

int main(void)
{
    unsetenv("FUSEMATH_NUM_THREADS");
    RUN_TEST(test_fake_backend_choice);
    RUN_TEST(test_plan_cache);
    RUN_TEST(test_cache_ignores_bytes_past_ndim);
    RUN_TEST(test_repeated_autotune_builds_no_chain);
    RUN_TEST(test_autotune_failures);
    RUN_TEST(test_plan_outlives_context);
    RUN_TEST(test_forced_backend);
    RUN_TEST(test_unavailable_backend);
    RUN_TEST(test_register_bad);
    RUN_TEST(test_wisdom_salt);
    RUN_TEST(test_autotune_rules);
    TEST_MAIN_RETURN();
}
