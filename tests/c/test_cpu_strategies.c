/* test_cpu_strategies.c : the CPU matmul strategies (cblas tiles, blas-threads, and
 * tiles through fusemath's own kernel) give the float64 reference for every epilogue,
 * with C and beta, f32 and f64, in each of the
 * kernel's instruction-set variants this CPU runs; and the planner takes the strategy
 * option (with threads > 1, or it falls back to tiles). The kernel is the "gemmkernel"
 * backend, the others "openblas": which plans what, FUSEMATH_BACKEND forcing either, and the
 * autotune candidates and wisdom salts of each. */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include "check.h"
#include "internal.h"

#include <fusemath/fusemath.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static double urand(void) { return (double)rand() / RAND_MAX - 0.5; }

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

/* D = act(alpha A B + beta C + bias) in double; pre = the activation's input. */
static void reference(int m, int n, int k, const double *a, const double *b, const double *c, const double *bias,
                      double alpha, double beta, unsigned epi, double *d, double *pre)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int q = 0; q < k; q++)
                s += a[i * k + q] * b[q * n + j];
            double v = alpha * s + (c ? beta * c[i * n + j] : 0) + ((epi & FM_EPILOGUE_BIAS) ? bias[j] : 0);
            pre[i * n + j] = v;
            d[i * n + j] = (epi & FM_EPILOGUE_RELU) ? (v > 0 ? v : 0) : (epi & FM_EPILOGUE_GELU) ? gelu_ref(v) : v;
        }
}

static const char *want_isa; /* test_kernel_variants: the variant describe() must name */
static char last_describe[640]; /* the describe() line of run_case's last plan */

static void run_case(fm_context *ctx, int f64, int strategy, unsigned epi, int with_c, int m, int n, int k)
{
    size_t es = f64 ? 8 : 4;
    fm_dtype dt = f64 ? FM_F64 : FM_F32;
    double *ad = malloc(sizeof(double) * m * k), *bd = malloc(sizeof(double) * k * n);
    double *cd = malloc(sizeof(double) * m * n), *biasd = malloc(sizeof(double) * n);
    double *ref = malloc(sizeof(double) * m * n), *pre = malloc(sizeof(double) * m * n);
    void *A = malloc(es * m * k), *B = malloc(es * k * n), *C = malloc(es * m * n), *BIAS = malloc(es * n);
    void *D = malloc(es * m * n);
    int64_t row_bytes = fm_relu_mask_row_bytes(n);
    void *AUX = malloc((epi & FM_EPILOGUE_RELU) ? (size_t)(m * row_bytes) : es * m * n);
    for (int i = 0; i < m * k; i++) ad[i] = urand();
    for (int i = 0; i < k * n; i++) bd[i] = urand();
    for (int i = 0; i < m * n; i++) cd[i] = urand();
    for (int i = 0; i < n; i++) biasd[i] = urand();
#define STORE(dst, src, cnt) for (int i = 0; i < (cnt); i++) { if (f64) ((double *)(dst))[i] = (src)[i]; else { ((float *)(dst))[i] = (float)(src)[i]; (src)[i] = ((float *)(dst))[i]; } }
    STORE(A, ad, m * k);
    STORE(B, bd, k * n);
    STORE(C, cd, m * n);
    STORE(BIAS, biasd, n);
#undef STORE
    const double alpha = 0.75, beta = with_c ? -1.25 : 0.0;
    reference(m, n, k, ad, bd, with_c ? cd : NULL, biasd, alpha, beta, epi, ref, pre);

    fm_device cpu = {FM_DEVICE_CPU, 0};
    fm_tensor ta, tb, tc, tbias, td, taux;
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n}, sbias[1] = {n}, saux[2] = {m, row_bytes};
    fm_tensor_init(&ta, A, cpu, dt, 2, sa, NULL);
    fm_tensor_init(&tb, B, cpu, dt, 2, sb, NULL);
    fm_tensor_init(&tc, C, cpu, dt, 2, sd, NULL);
    fm_tensor_init(&tbias, BIAS, cpu, dt, 1, sbias, NULL);
    fm_tensor_init(&td, D, cpu, dt, 2, sd, NULL);
    if (epi & FM_EPILOGUE_RELU)
        fm_tensor_init(&taux, AUX, cpu, FM_U8, 2, saux, NULL);
    else
        fm_tensor_init(&taux, AUX, cpu, dt, 2, sd, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.alpha[0] = alpha;
    o.beta[0] = beta;
    o.epilogue = epi;
    o.cpu_strategy = strategy;
    o.num_threads = 2;
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_plan(ctx, &ta, &tb, with_c ? &tc : NULL, (epi & FM_EPILOGUE_BIAS) ? &tbias : NULL, &td,
                            (epi & FM_EPILOGUE_AUX) ? &taux : NULL, &o, &plan));
    if (!plan)
        goto out;
    const char *want = strategy == FM_CPU_STRATEGY_BLAS_THREADS ? "blas_threads="
                       : strategy == FM_CPU_STRATEGY_KERNEL     ? " kernel="
                                                                : "panel=";
    CHECK_MSG(fm_test_contains(fm_plan_describe(plan), want), "describe \"%s\" lacks \"%s\"", fm_plan_describe(plan),
              want);
    snprintf(last_describe, sizeof last_describe, "%s", fm_plan_describe(plan));
    if (strategy == FM_CPU_STRATEGY_KERNEL && want_isa)
        CHECK_MSG(fm_test_contains(fm_plan_describe(plan), want_isa), "describe \"%s\" lacks \"%s\"",
                  fm_plan_describe(plan), want_isa);
    void *ptrs[FM_MATMUL_NSLOTS] = {A, B, with_c ? C : NULL, (epi & FM_EPILOGUE_BIAS) ? BIAS : NULL, D,
                                    (epi & FM_EPILOGUE_AUX) ? AUX : NULL};
    for (int rep = 0; rep < 2; rep++) { /* a second execute must give the same answer */
        CHECK_OK(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL));
        double eps = f64 ? 1e-15 : 6e-8, worst = 0;
        int mask_bad = 0;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double got = f64 ? ((double *)D)[i * n + j] : ((float *)D)[i * n + j];
                double err = fabs(got - ref[i * n + j]) / (4.0 * k * eps * (1.0 + fabs(ref[i * n + j])));
                if (err > worst) worst = err;
                if ((epi & FM_EPILOGUE_AUX) && (epi & FM_EPILOGUE_RELU) && fabs(pre[i * n + j]) > 1e-3) {
                    int bit = (((unsigned char *)AUX)[i * row_bytes + j / 8] >> (j % 8)) & 1;
                    mask_bad += bit != (pre[i * n + j] > 0);
                }
            }
        CHECK_MSG(worst <= 1.0, "%s strategy %d epilogue 0x%x c=%d: error %.3g x the bound", f64 ? "f64" : "f32",
                  strategy, epi, with_c, worst);
        CHECK_MSG(mask_bad == 0, "strategy %d: %d relu mask bits disagree with the pre-activation", strategy, mask_bad);
    }
    fm_plan_release(plan);
out:
    free(ad), free(bd), free(cd), free(biasd), free(ref), free(pre);
    free(A), free(B), free(C), free(BIAS), free(D), free(AUX);
}

static void test_strategies_match_reference(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx)
        return;
    const unsigned epis[] = {0, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, FM_EPILOGUE_GELU,
                             FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU | FM_EPILOGUE_AUX, FM_EPILOGUE_GELU | FM_EPILOGUE_AUX};
    for (int f64 = 0; f64 < 2; f64++)
        for (int strategy = FM_CPU_STRATEGY_TILES; strategy <= FM_CPU_STRATEGY_KERNEL; strategy++)
            for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++)
                for (int with_c = 0; with_c < 2; with_c++)
                    run_case(ctx, f64, strategy, epis[e], with_c, 67, 301, 45);
    fm_context_destroy(ctx);
}

/* Each variant of the own kernel (FUSEMATH_CPU_KERNEL caps it; read when a context is created,
 * so a fresh context per variant, planning after the variable is gone again): remainders of the register block in both directions
 * (m = 67, n = 301 and 5 x 7), k from 1 up to 700 (in k blocks, beta*C in the first). */
static void test_kernel_variants(void)
{
    const char *caps[] = {"generic", "avx2", "avx512"};
    const unsigned epis[] = {0, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, FM_EPILOGUE_BIAS | FM_EPILOGUE_GELU | FM_EPILOGUE_AUX,
                             FM_EPILOGUE_RELU | FM_EPILOGUE_AUX};
    int vector_isa = 0; /* the CPU runs a vector variant (AVX2 + FMA) */
#if defined(__x86_64__) && defined(__GNUC__)
    vector_isa = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    for (int v = 0; v < 3; v++) {
        setenv("FUSEMATH_CPU_KERNEL", caps[v], 1);
        want_isa = v == 0 ? "kernel=generic" : NULL;
#if defined(__x86_64__) && defined(__GNUC__)
        if (v == 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            want_isa = "kernel=avx2";
        if (v == 2 && __builtin_cpu_supports("avx512f"))
            want_isa = "kernel=avx512";
#endif
        fm_context *ctx = NULL;
        CHECK_OK(fm_context_create(&ctx));
        unsetenv("FUSEMATH_CPU_KERNEL"); /* the context has read it */
        if (!ctx)
            break;
        /* auto takes the vector variants for this product, never the plain-C one (4-6x OpenBLAS) */
        run_case(ctx, 0, FM_CPU_STRATEGY_AUTO, FM_EPILOGUE_RELU, 0, 130, 257, 64);
        if (last_describe[0])
            CHECK_MSG(fm_test_contains(last_describe, " kernel=") == (v > 0 && vector_isa),
                      "cap %s: auto plan \"%s\"", caps[v], last_describe);
        for (int f64 = 0; f64 < 2; f64++)
            for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++) {
                run_case(ctx, f64, FM_CPU_STRATEGY_KERNEL, epis[e], 0, 67, 301, 45);
                run_case(ctx, f64, FM_CPU_STRATEGY_KERNEL, epis[e], 1, 67, 301, 45);
                run_case(ctx, f64, FM_CPU_STRATEGY_KERNEL, epis[e], 1, 5, 7, 1);
                run_case(ctx, f64, FM_CPU_STRATEGY_KERNEL, epis[e], 0, 9, 33, 300);
                run_case(ctx, f64, FM_CPU_STRATEGY_KERNEL, epis[e], 1, 37, 70, 700); /* k blocks 256, 256, 188 */
            }
        fm_context_destroy(ctx);
    }
    want_isa = NULL;
}

/* FUSEMATH_CPU_KERNEL_KC sets the k block (read at context creation): a number, 0 for one block;
 * anything else leaves the default (256 for k > 384). Results stay right with any block. */
static void test_kernel_kc_setting(void)
{
    const struct { const char *value, *want; } rows[] = {
        {"7", " kc=7"}, {"0", NULL}, {"junk", " kc=256"}, {"-3", " kc=256"}, {"", " kc=256"}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        setenv("FUSEMATH_CPU_KERNEL_KC", rows[r].value, 1);
        fm_context *ctx = NULL;
        CHECK_OK(fm_context_create(&ctx));
        unsetenv("FUSEMATH_CPU_KERNEL_KC"); /* the context has read it */
        if (!ctx)
            break;
        run_case(ctx, 1, FM_CPU_STRATEGY_KERNEL, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, 1, 21, 40, 400);
        if (rows[r].want)
            CHECK_MSG(fm_test_contains(last_describe, rows[r].want), "KC=%s: \"%s\"", rows[r].value, last_describe);
        else
            CHECK_MSG(!fm_test_contains(last_describe, " kc="), "KC=%s: \"%s\"", rows[r].value, last_describe);
        fm_context_destroy(ctx);
    }
}

/* cpu_strategy = kernel on a product the kernel does not compute: a clear error naming
 * what it lacks (from the gemmkernel backend, which stops planning there), never a silent
 * fallback to cblas. */
static void test_kernel_refusals(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx)
        return;
    double buf[64] = {0};
    fm_device cpu = {FM_DEVICE_CPU, 0};
    int64_t s2[2] = {2, 2}, s3[3] = {2, 2, 2}, sv[1] = {2};
    fm_tensor ta, tb, tc, td, tz, tb3, ta3, td3, tbias;
    fm_tensor_init(&ta, buf, cpu, FM_F64, 2, s2, NULL);
    fm_tensor_init(&tb, buf + 8, cpu, FM_F64, 2, s2, NULL);
    fm_tensor_init(&tc, buf + 16, cpu, FM_F64, 2, s2, NULL);
    fm_tensor_init(&td, buf + 24, cpu, FM_F64, 2, s2, NULL);
    fm_tensor_init(&tz, buf, cpu, FM_C128, 2, s2, NULL);
    fm_tensor_init(&ta3, buf, cpu, FM_F64, 3, s3, NULL);
    fm_tensor_init(&tb3, buf + 8, cpu, FM_F64, 3, s3, NULL);
    fm_tensor_init(&td3, buf + 32, cpu, FM_F64, 3, s3, NULL);
    fm_tensor_init(&tbias, buf + 60, cpu, FM_F64, 1, sv, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.cpu_strategy = FM_CPU_STRATEGY_KERNEL;
    fm_plan *plan = NULL;
    /* complex */
    fm_tensor zd = tz;
    zd.data = buf + 40;
    CHECK_STATUS(fm_matmul_plan(ctx, &tz, &tz, NULL, NULL, &zd, NULL, &o, &plan), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("f32 and f64 only");
    CHECK_ERROR_MENTIONS("matmul: gemmkernel: cpu_strategy 'kernel'");
    CHECK_MSG(!fm_test_contains(fm_last_error(), "openblas"), "fell through to openblas: %s", fm_last_error());
    /* a backward activation (aux: gelu's input) */
    o.epilogue = FM_EPILOGUE_DGELU;
    CHECK_STATUS(fm_matmul_plan(ctx, &ta, &tb, NULL, NULL, &td, &tc, &o, &plan), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("backward activation");
    o.epilogue = 0;
    /* alpha = 0 */
    o.alpha[0] = 0.0;
    CHECK_STATUS(fm_matmul_plan(ctx, &ta, &tb, NULL, NULL, &td, NULL, &o, &plan), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("alpha != 0");
    o.alpha[0] = 1.0;
    CHECK_ERROR_MENTIONS("cpu_strategy 'kernel'");
    /* taken: b broadcast over the batch, b per batch, beta * C */
    o.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU;
    for (int i = 0; i < 3; i++) {
        o.beta[0] = i == 2 ? 1.0 : 0.0;
        CHECK_OK(fm_matmul_plan(ctx, &ta3, i ? &tb3 : &tb, i == 2 ? &td3 : NULL, &tbias, &td3, NULL, &o, &plan));
        if (plan)
            CHECK_MSG(fm_test_contains(fm_plan_describe(plan), " kernel="), "describe: %s", fm_plan_describe(plan));
        fm_plan_release(plan);
        plan = NULL;
    }
    fm_context_destroy(ctx);
}

static void test_bad_strategy(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    float a[4] = {0}, b[4] = {0}, d[4] = {0};
    fm_device cpu = {FM_DEVICE_CPU, 0};
    fm_tensor ta, tb, td;
    int64_t s[2] = {2, 2};
    fm_tensor_init(&ta, a, cpu, FM_F32, 2, s, NULL);
    fm_tensor_init(&tb, b, cpu, FM_F32, 2, s, NULL);
    fm_tensor_init(&td, d, cpu, FM_F32, 2, s, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.cpu_strategy = 7;
    fm_plan *plan = NULL;
    CHECK_STATUS(fm_matmul_plan(ctx, &ta, &tb, NULL, NULL, &td, NULL, &o, &plan), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("cpu_strategy");
    fm_context_destroy(ctx);
}

/* Tile plans (OpenBLAS at one thread, shared lock) and blas-threads plans
 * (exclusive lock, pool) executed from several threads at once: no deadlock, no
 * oversubscription-induced error, every result right. */
typedef struct concurrent_arg {
    fm_context *ctx;
    int strategy;
} concurrent_arg;

static void *concurrent_worker(void *p)
{
    concurrent_arg *ca = p;
    for (int i = 0; i < 6; i++)
        run_case(ca->ctx, i & 1, ca->strategy, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, i % 3 == 0, 130, 257, 64);
    return NULL;
}

static void test_strategies_concurrently(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx)
        return;
    pthread_t th[4];
    concurrent_arg args[4];
    for (int t = 0; t < 4; t++) {
        args[t].ctx = ctx;
        args[t].strategy = (t & 1) ? FM_CPU_STRATEGY_BLAS_THREADS : t ? FM_CPU_STRATEGY_KERNEL : FM_CPU_STRATEGY_TILES;
        CHECK(pthread_create(&th[t], NULL, concurrent_worker, &args[t]) == 0);
    }
    for (int t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    fm_context_destroy(ctx);
}

/* ---- the two CPU backends: "gemmkernel" (the own kernel) before "openblas" (cblas) ---- */
typedef struct product {
    void *buf;
    fm_tensor ta, tb, td;
} product;

/* Contiguous m x k @ k x n -> m x n operands of dtype dt (planning reads no data). */
static void product_init(product *p, fm_dtype dt, int64_t m, int64_t n, int64_t k)
{
    const size_t es = fm_dtype_size(dt);
    fm_device cpu = {FM_DEVICE_CPU, 0};
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n};
    char *buf = calloc((size_t)(m * k + k * n + m * n), es);
    p->buf = buf;
    fm_tensor_init(&p->ta, buf, cpu, dt, 2, sa, NULL);
    fm_tensor_init(&p->tb, buf + (size_t)(m * k) * es, cpu, dt, 2, sb, NULL);
    fm_tensor_init(&p->td, buf + (size_t)(m * k + k * n) * es, cpu, dt, 2, sd, NULL);
}

static fm_status product_plan(fm_context *ctx, const product *p, int strategy, fm_plan **plan)
{
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = fm_dtype_is_complex(p->td.dtype) ? 0 : FM_EPILOGUE_RELU; /* relu: real only */
    o.cpu_strategy = strategy;
    o.num_threads = 2;
    *plan = NULL;
    return fm_matmul_plan(ctx, &p->ta, &p->tb, NULL, NULL, &p->td, NULL, &o, plan);
}

/* The backend and the start of describe() of a plan, or the refusal: want NULL means the
 * planner must refuse with FM_ERR_NOT_SUPPORTED, the error mentioning why_part. */
static void expect_plan(fm_context *ctx, fm_dtype dt, int64_t m, int64_t n, int64_t k, int strategy,
                        const char *want, const char *why_part)
{
    product p;
    product_init(&p, dt, m, n, k);
    fm_plan *plan = NULL;
    fm_status s = product_plan(ctx, &p, strategy, &plan);
    if (!want) {
        CHECK_MSG(s == FM_ERR_NOT_SUPPORTED, "%lldx%lldx%lld strategy %d: %s, expected a refusal", (long long)m,
                  (long long)n, (long long)k, strategy, fm_status_name(s));
        CHECK_MSG(fm_test_contains(fm_last_error(), why_part), "%lldx%lldx%lld strategy %d: \"%s\" lacks \"%s\"",
                  (long long)m, (long long)n, (long long)k, strategy, fm_last_error(), why_part);
    } else if (s != FM_OK || !plan) {
        CHECK_MSG(0, "%lldx%lldx%lld strategy %d: %s, expected a %s plan", (long long)m, (long long)n, (long long)k,
                  strategy, fm_status_name(s), want);
    } else {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "matmul cpu/%s %s ", want, fm_dtype_name(dt));
        CHECK_MSG(strcmp(fm_plan_backend(plan), want) == 0, "planned by %s, expected %s: %s", fm_plan_backend(plan),
                  want, fm_plan_describe(plan));
        CHECK_MSG(strncmp(fm_plan_describe(plan), prefix, strlen(prefix)) == 0, "describe \"%s\", expected \"%s...\"",
                  fm_plan_describe(plan), prefix);
        /* the kernel's own fields only where it computes */
        CHECK_MSG(fm_test_contains(fm_plan_describe(plan), " kernel=") == !strcmp(want, "gemmkernel"), "describe: %s",
                  fm_plan_describe(plan));
    }
    fm_plan_release(plan);
    free(p.buf);
}

static int cpu_has_vector_kernel(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* Which backend plans what: auto gives the kernel the products its rules give it (a vector
 * variant; 64+ rows when B is packed), openblas the rest; 'kernel' is gemmkernel's, 'tiles' and
 * 'blas_threads' openblas's. */
static void test_backend_per_strategy(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx)
        return;
    const char *auto_kernel = cpu_has_vector_kernel() ? "gemmkernel" : "openblas";
    expect_plan(ctx, FM_F32, 130, 257, 64, FM_CPU_STRATEGY_AUTO, auto_kernel, NULL);
    expect_plan(ctx, FM_F64, 130, 257, 64, FM_CPU_STRATEGY_AUTO, auto_kernel, NULL);
    expect_plan(ctx, FM_F32, 32, 512, 64, FM_CPU_STRATEGY_AUTO, "openblas", NULL); /* B packed for 32 rows */
    expect_plan(ctx, FM_C64, 130, 257, 64, FM_CPU_STRATEGY_AUTO, "openblas", NULL);
    expect_plan(ctx, FM_F32, 130, 257, 64, FM_CPU_STRATEGY_TILES, "openblas", NULL);
    expect_plan(ctx, FM_F32, 130, 257, 64, FM_CPU_STRATEGY_BLAS_THREADS, "openblas", NULL);
    expect_plan(ctx, FM_F32, 130, 257, 64, FM_CPU_STRATEGY_KERNEL, "gemmkernel", NULL);
    expect_plan(ctx, FM_F32, 32, 512, 64, FM_CPU_STRATEGY_KERNEL, "gemmkernel", NULL);
    fm_context_destroy(ctx);
}

/* FUSEMATH_BACKEND=openblas: OpenBLAS only, never the kernel (auto computes cblas tiles, right;
 * 'kernel' is refused). FUSEMATH_BACKEND=gemmkernel: the kernel only, by the same rules (what
 * auto leaves to cblas is refused, with the kernel's reason). */
static void test_forced_backend_setting(void)
{
    setenv("FUSEMATH_BACKEND", "openblas", 1);
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    unsetenv("FUSEMATH_BACKEND");
    if (!ctx)
        return;
    expect_plan(ctx, FM_F32, 130, 257, 64, FM_CPU_STRATEGY_AUTO, "openblas", NULL);
    run_case(ctx, 0, FM_CPU_STRATEGY_AUTO, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, 1, 130, 257, 64);
    CHECK_MSG(fm_test_contains(last_describe, "cpu/openblas") && !fm_test_contains(last_describe, " kernel="),
              "FUSEMATH_BACKEND=openblas: %s", last_describe);
    expect_plan(ctx, FM_F32, 130, 257, 64, FM_CPU_STRATEGY_KERNEL, NULL, "openblas: cpu_strategy 'kernel'");
    fm_context_destroy(ctx);

    setenv("FUSEMATH_BACKEND", "gemmkernel", 1);
    ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    unsetenv("FUSEMATH_BACKEND");
    if (!ctx)
        return;
    if (cpu_has_vector_kernel())
        expect_plan(ctx, FM_F32, 130, 257, 64, FM_CPU_STRATEGY_AUTO, "gemmkernel", NULL);
    else
        expect_plan(ctx, FM_F32, 130, 257, 64, FM_CPU_STRATEGY_AUTO, NULL, "gemmkernel: auto never picks");
    expect_plan(ctx, FM_F32, 32, 512, 64, FM_CPU_STRATEGY_AUTO, NULL, "gemmkernel: auto leaves 32 rows to cblas");
    expect_plan(ctx, FM_F32, 32, 512, 64, FM_CPU_STRATEGY_KERNEL, "gemmkernel", NULL);
    expect_plan(ctx, FM_C64, 130, 257, 64, FM_CPU_STRATEGY_AUTO, NULL, "gemmkernel: it computes f32 and f64 only");
    expect_plan(ctx, FM_F32, 130, 257, 64, FM_CPU_STRATEGY_TILES, NULL, "gemmkernel: cpu_strategy 'tiles'");
    fm_context_destroy(ctx);
}

extern const fm_backend fm_backend_openblas_matmul, fm_backend_gemmkernel_matmul;

/* The candidates a backend offers for p's problem: their count, every one with `strategy`,
 * panel heights up to m, each in a group of its own. */
static int candidates_of(const fm_backend *be, const fm_context *ctx, const fm_plan *plan, int strategy)
{
    static fm_problem cand[32];
    int group[32];
    const int n = be->tune_candidates(ctx, NULL, &plan->problem, cand, group, 32);
    const int64_t m = plan->problem.t[FM_MATMUL_D].shape[0];
    for (int i = 0; i < n; i++) {
        CHECK_MSG(cand[i].u.matmul.cpu_strategy == strategy, "%s candidate %d: strategy %d", be->name, i,
                  cand[i].u.matmul.cpu_strategy);
        CHECK_MSG(cand[i].u.matmul.panel_rows <= m && group[i] == -1, "%s candidate %d: height %d, group %d", be->name,
                  i, cand[i].u.matmul.panel_rows, group[i]);
    }
    return n;
}

/* Autotune's candidates per backend: openblas the cblas tiles at each height, gemmkernel the
 * kernel at each height where it computes the product at all. Wisdom salts: openblas its build,
 * gemmkernel its variant and k block (from the context's settings). */
static void test_tune_candidates_and_salts(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx)
        return;
    const fm_dtype dts[2] = {FM_F32, FM_C64};
    for (int i = 0; i < 2; i++) {
        product p;
        product_init(&p, dts[i], 130, 257, 64);
        fm_plan *plan = NULL;
        CHECK_OK(product_plan(ctx, &p, FM_CPU_STRATEGY_AUTO, &plan));
        if (plan) {
            /* heights 0 (the heuristic's), 16, 32, 64, 128: those up to m = 130 */
            CHECK(candidates_of(&fm_backend_openblas_matmul, ctx, plan, FM_CPU_STRATEGY_TILES) == 5);
            const int nk = candidates_of(&fm_backend_gemmkernel_matmul, ctx, plan, FM_CPU_STRATEGY_KERNEL);
            CHECK_MSG(nk == (dts[i] == FM_F32 ? 5 : 0), "%s: %d kernel candidates", fm_dtype_name(dts[i]), nk);
        }
        fm_plan_release(plan);
        free(p.buf);
    }
    const struct { const char *cap, *kc; int64_t k; const char *want; } salts[] = {
        {"", "", 64, " kc=0"}, {"", "", 700, " kc=256"}, {"", "7", 700, " kc=7"},
        {"generic", "", 64, "kernel=generic"}};
    for (size_t r = 0; r < sizeof salts / sizeof salts[0]; r++) {
        setenv("FUSEMATH_CPU_KERNEL", salts[r].cap, 1);
        setenv("FUSEMATH_CPU_KERNEL_KC", salts[r].kc, 1);
        fm_context *c2 = NULL;
        CHECK_OK(fm_context_create(&c2));
        unsetenv("FUSEMATH_CPU_KERNEL");
        unsetenv("FUSEMATH_CPU_KERNEL_KC");
        if (!c2)
            break;
        product p;
        product_init(&p, FM_F32, 40, 64, salts[r].k);
        fm_plan *plan = NULL;
        CHECK_OK(product_plan(c2, &p, FM_CPU_STRATEGY_TILES, &plan));
        if (plan) {
            char kernel_salt[256] = "", blas_salt[256] = "";
            fm_backend_gemmkernel_matmul.wisdom_salt(c2, NULL, &plan->problem, kernel_salt, sizeof kernel_salt);
            fm_backend_openblas_matmul.wisdom_salt(c2, NULL, &plan->problem, blas_salt, sizeof blas_salt);
            CHECK_MSG(fm_test_contains(kernel_salt, salts[r].want) && fm_test_contains(kernel_salt, "kernel="),
                      "cap '%s' kc '%s' k %lld: gemmkernel salt \"%s\" lacks \"%s\"", salts[r].cap, salts[r].kc,
                      (long long)salts[r].k, kernel_salt, salts[r].want);
            CHECK_MSG(!fm_test_contains(blas_salt, "kernel="), "openblas salt \"%s\"", blas_salt);
        }
        fm_plan_release(plan);
        free(p.buf);
        fm_context_destroy(c2);
    }
    fm_context_destroy(ctx);
}

int main(void)
{
    RUN_TEST(test_strategies_match_reference);
    RUN_TEST(test_kernel_variants);
    RUN_TEST(test_kernel_kc_setting);
    RUN_TEST(test_kernel_refusals);
    RUN_TEST(test_backend_per_strategy);
    RUN_TEST(test_forced_backend_setting);
    RUN_TEST(test_tune_candidates_and_salts);
    RUN_TEST(test_strategies_concurrently);
    RUN_TEST(test_bad_strategy);
    TEST_MAIN_RETURN();
}
