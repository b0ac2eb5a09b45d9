/* test_matmul_half.c : float16 and bfloat16 matmul on the CPU (the halfgemm backend: through
 * float32, rounded once). The rounding is checked on every bit pattern: d = a @ [[s]] with k = 1 is
 * an exact product in float32, so d must be the nearest half / bfloat16 to the exact product (ties
 * to even), found here by a search over the format's values, independent of the backend's bit
 * tricks. General products against a float64 reference within one ulp of the format plus the
 * float32 sum's error; epilogues, broadcast, strided operands, c, and the refusals. */
#include "check.h"
#include "mmref.h"

#include <math.h>
#include <stdlib.h>

static fm_context *g_ctx;

/* The value of a 16-bit pattern (dt FM_F16 or FM_BF16), by the formats' definitions. */
static double value_of(fm_dtype dt, uint16_t h)
{
    const int f16 = dt == FM_F16, mbits = f16 ? 10 : 7, ebits = f16 ? 5 : 8, bias = f16 ? 15 : 127;
    const int sign = h >> 15, e = h >> mbits & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
    double v;
    if (e == (1 << ebits) - 1)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, 1 - bias - mbits);
    else
        v = ldexp(m + (1 << mbits), e - bias - mbits);
    return sign ? -v : v;
}

/* The nearest pattern to x (finite or not), ties to the even pattern, overflow past the largest
 * value's half-ulp to inf: a binary search over the positive patterns (ordered like their values). */
static uint16_t nearest(fm_dtype dt, double x)
{
    const uint16_t inf = dt == FM_F16 ? 0x7C00 : 0x7F80, sign = signbit(x) ? 0x8000 : 0;
    const double a = fabs(x);
    uint16_t lo = 0, hi = inf; /* value_of(lo) <= a < value_of(hi) unless a is inf */
    if (a >= value_of(dt, inf))
        return sign | inf;
    while (hi - lo > 1) {
        const uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (value_of(dt, mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    /* past the largest value, inf stands where the next value would be (its ulp further) */
    const double vlo = value_of(dt, lo);
    const double vnext = lo + 1 == inf ? 2 * vlo - value_of(dt, (uint16_t)(lo - 1)) : value_of(dt, (uint16_t)(lo + 1));
    const double dlo = a - vlo, dhi = vnext - a;
    return sign | (dlo < dhi ? lo : dhi < dlo ? (uint16_t)(lo + 1) : (lo & 1) ? (uint16_t)(lo + 1) : lo);
}

/* d = a @ [[s]] over every bit pattern a: one exact float32 product each, rounded once. */
static void test_rounding_every_pattern(fm_dtype dt, uint16_t s_bits)
{
    const int64_t m = 65536, one = 1;
    uint16_t *a = malloc(sizeof(uint16_t) * 65536), *d = malloc(sizeof(uint16_t) * 65536);
    CHECK(a && d);
    if (!a || !d) {
        free(a), free(d);
        return;
    }
    for (int i = 0; i < 65536; i++)
        a[i] = (uint16_t)i;
    const int64_t sa[2] = {m, one}, sb[2] = {one, one};
    fm_tensor A, B, D;
    fm_tensor_init(&A, a, fm_test_cpu, dt, 2, sa, NULL);
    fm_tensor_init(&B, &s_bits, fm_test_cpu, dt, 2, sb, NULL);
    fm_tensor_init(&D, d, fm_test_cpu, dt, 2, sa, NULL);
    CHECK_OK(fm_matmul(g_ctx, &A, &B, NULL, NULL, &D, NULL, NULL, NULL));
    const double s = value_of(dt, s_bits);
    int64_t bad = 0, first = -1;
    for (int i = 0; i < 65536; i++) {
        /* exact in double and float32; a sum that starts at +0, as BLAS and NumPy's (-0 gives +0) */
        const double want = 0.0 + value_of(dt, a[i]) * s;
        const int ok = isnan(want) ? isnan(value_of(dt, d[i])) : d[i] == nearest(dt, want);
        if (!ok && bad++ == 0)
            first = i;
    }
    CHECK_MSG(bad == 0, "%s a @ [[%g]]: %lld of 65536 patterns rounded wrong, first a = 0x%04llx: got 0x%04x, "
              "want 0x%04x", fm_dtype_name(dt), s, (long long)bad, (long long)first,
              first >= 0 ? d[first] : 0, first >= 0 ? nearest(dt, 0.0 + value_of(dt, a[first]) * s) : 0);
    free(a), free(d);
}

static void test_rounding(void)
{
    /* f16: 1, 1/3 (inexact products), 3 (overflow to inf), 2^-10 (subnormal results) */
    const uint16_t f16_s[] = {0x3C00, 0x3555, 0x4200, 0x1400};
    for (size_t i = 0; i < sizeof f16_s / sizeof f16_s[0]; i++)
        test_rounding_every_pattern(FM_F16, f16_s[i]);
    /* bf16: 1, 1/3, 2^100 (overflow), 2^-10 (subnormal results; a smaller s would make float32
     * products inexact below 2^-149, rounded twice) */
    const uint16_t bf16_s[] = {0x3F80, 0x3EAB, 0x7180, 0x3A80};
    for (size_t i = 0; i < sizeof bf16_s / sizeof bf16_s[0]; i++)
        test_rounding_every_pattern(FM_BF16, bf16_s[i]);
}

static uint64_t lcg(uint64_t *s) { return *s = *s * 6364136223846793005ull + 1442695040888963407ull; }

/* A pattern for a value in [-2, 2) of the format (round to nearest of a uniform double). */
static uint16_t random_pattern(fm_dtype dt, uint64_t *s)
{
    return nearest(dt, (double)(lcg(s) >> 11) * 0x1p-53 * 4.0 - 2.0);
}

/* d = relu(alpha a @ b + beta c + bias) with a batch of 3 (a broadcast over it), b read through
 * its transpose, bias (N,), in-place d = c when inplace; against float64 with the format's ulp. */
static void run_general(fm_dtype dt, int64_t m, int64_t n, int64_t k, int inplace)
{
    const int64_t batch = 3, na = m * k, nb = batch * k * n, nd = batch * m * n;
    uint16_t *a = malloc(2 * (size_t)na), *b = malloc(2 * (size_t)nb), *c = malloc(2 * (size_t)nd);
    uint16_t *d = malloc(2 * (size_t)nd), *bias = malloc(2 * (size_t)n);
    double *want = malloc(sizeof(double) * (size_t)nd), *bound = malloc(sizeof(double) * (size_t)nd);
    CHECK(a && b && c && d && bias && want && bound);
    if (!a || !b || !c || !d || !bias || !want || !bound)
        goto done;
    uint64_t s = 99u + (uint64_t)(m * n * k) + (uint64_t)dt;
    for (int64_t i = 0; i < na; i++)
        a[i] = random_pattern(dt, &s);
    for (int64_t i = 0; i < nb; i++)
        b[i] = random_pattern(dt, &s);
    for (int64_t i = 0; i < nd; i++)
        c[i] = random_pattern(dt, &s);
    for (int64_t i = 0; i < n; i++)
        bias[i] = random_pattern(dt, &s);
    const double alpha = 0.75, beta = -0.5;
    const double eps_out = dt == FM_F16 ? 0x1p-11 : 0x1p-8; /* half an ulp, relative */
    for (int64_t q = 0; q < batch; q++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double sum = 0, mag = 0;
                for (int64_t p = 0; p < k; p++) { /* b stored as (batch, n, k): b[q, p, j] = stored[q, j, p] */
                    const double x = value_of(dt, a[i * k + p]) * value_of(dt, b[(q * n + j) * k + p]);
                    sum += x, mag += fabs(x);
                }
                const int64_t e = (q * m + i) * n + j;
                const double pre = alpha * sum + beta * value_of(dt, c[e]) + value_of(dt, bias[j]);
                want[e] = pre > 0 ? pre : 0;
                /* the float32 sum's error (k terms), then one rounding to the format */
                bound[e] = (double)(k + 4) * 0x1p-24 * (fabs(alpha) * mag + fabs(beta * value_of(dt, c[e])) +
                                                         fabs(value_of(dt, bias[j]))) +
                           2 * eps_out * fabs(want[e]) + ldexp(1.0, dt == FM_F16 ? -24 : -133);
            }
    uint16_t *dd = inplace ? c : d;
    if (!inplace)
        for (int64_t i = 0; i < nd; i++)
            d[i] = 0x7E00; /* NaN: every element must be written */
    const int64_t sa[3] = {batch, m, k}, sta[3] = {0, k, 1}, sb[3] = {batch, k, n}, stb[3] = {n * k, 1, k};
    const int64_t sd[3] = {batch, m, n}, sbias[1] = {n};
    fm_tensor A, B, C, BIAS, D;
    fm_tensor_init(&A, a, fm_test_cpu, dt, 3, sa, sta);
    fm_tensor_init(&B, b, fm_test_cpu, dt, 3, sb, stb);
    fm_tensor_init(&C, c, fm_test_cpu, dt, 3, sd, NULL);
    fm_tensor_init(&BIAS, bias, fm_test_cpu, dt, 1, sbias, NULL);
    fm_tensor_init(&D, dd, fm_test_cpu, dt, 3, sd, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.alpha[0] = alpha, o.beta[0] = beta;
    o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_BIAS;
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_plan(g_ctx, &A, &B, &C, &BIAS, &D, NULL, &o, &plan));
    if (plan) {
        CHECK_MSG(strstr(fm_plan_describe(plan), "cpu/halfgemm") != NULL, "%s", fm_plan_describe(plan));
        void *ptrs[FM_MATMUL_NSLOTS] = {a, b, c, bias, dd};
        CHECK_OK(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL));
        fm_plan_release(plan);
    }
    int64_t bad = 0;
    for (int64_t e = 0; e < nd; e++)
        bad += !(fabs(value_of(dt, dd[e]) - want[e]) <= bound[e]);
    CHECK_MSG(bad == 0, "%s %lldx%lldx%lld%s: %lld of %lld elements off the float64 reference", fm_dtype_name(dt),
              (long long)m, (long long)n, (long long)k, inplace ? " in place" : "", (long long)bad, (long long)nd);
done:
    free(a), free(b), free(c), free(d), free(bias), free(want), free(bound);
}

static void test_general(void)
{
    const fm_dtype dts[] = {FM_F16, FM_BF16};
    for (int i = 0; i < 2; i++) {
        run_general(dts[i], 37, 29, 300, 0);
        run_general(dts[i], 130, 70, 64, 1);
        run_general(dts[i], 1, 1, 1, 0);
        run_general(dts[i], 4, 5, 0, 0); /* k = 0: beta c + bias */
    }
}

/* Dropout on the 16-bit dtypes (docs/epilogues.md): relu+bias+dropout forward and ddropout with a
 * random keep mask, against float64 with the keep bits recomputed from the RNG's raw words (word
 * position + e >= round(p 2^32)) and s = 1 / (1 - p) rounded to float32 (the epilogue's arithmetic);
 * a dropped element is exactly +0. Bounds as run_general's, times s. */
static void run_dropout(fm_dtype dt, int backward)
{
    const int64_t m = 29, n = 131, k = 40, nd = m * n, rb = fm_relu_mask_row_bytes(n);
    const double p = 0.3, s = (double)(float)(1.0 / (1.0 - p)), alpha = 1.25, beta = -0.5;
    const uint64_t seed = 0x243F6A8885A308D3ull, thr = (uint64_t)floor(p * 4294967296.0 + 0.5);
    const int64_t pos = 1000003;
    uint16_t *a = malloc(2 * (size_t)(m * k)), *b = malloc(2 * (size_t)(k * n)), *c = malloc(2 * (size_t)nd);
    uint16_t *d = malloc(2 * (size_t)nd), *bias = malloc(2 * (size_t)n);
    uint32_t *w = malloc(4 * (size_t)nd);
    unsigned char *mask = calloc((size_t)(m * rb), 1);
    CHECK(a && b && c && d && bias && w && mask);
    if (!a || !b || !c || !d || !bias || !w || !mask)
        goto done;
    uint64_t st = 7u + (uint64_t)dt + (uint64_t)backward;
    for (int64_t i = 0; i < m * k; i++)
        a[i] = random_pattern(dt, &st);
    for (int64_t i = 0; i < k * n; i++)
        b[i] = random_pattern(dt, &st);
    for (int64_t i = 0; i < nd; i++)
        c[i] = random_pattern(dt, &st), d[i] = 0x7E00; /* NaN: every element must be written */
    for (int64_t i = 0; i < n; i++)
        bias[i] = random_pattern(dt, &st);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            if (lcg(&st) >> 40 & 1)
                mask[i * rb + j / 8] |= (unsigned char)(1u << (j % 8));
    fm_tensor W;
    fm_tensor_init(&W, w, fm_test_cpu, FM_U32, 1, &nd, NULL);
    fm_rng_options ro;
    fm_rng_options_init(&ro);
    ro.distribution = FM_RNG_RAW;
    CHECK_OK(fm_rng(g_ctx, &W, &ro, seed, pos, NULL));
    const int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n}, sv[1] = {n}, sx[2] = {m, rb};
    fm_tensor A, B, C, BIAS, D, X;
    fm_tensor_init(&A, a, fm_test_cpu, dt, 2, sa, NULL);
    fm_tensor_init(&B, b, fm_test_cpu, dt, 2, sb, NULL);
    fm_tensor_init(&C, c, fm_test_cpu, dt, 2, sd, NULL);
    fm_tensor_init(&BIAS, bias, fm_test_cpu, dt, 1, sv, NULL);
    fm_tensor_init(&D, d, fm_test_cpu, dt, 2, sd, NULL);
    fm_tensor_init(&X, mask, fm_test_cpu, FM_U8, 2, sx, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.alpha[0] = alpha, o.beta[0] = beta, o.dropout = p, o.execution = FM_EXECUTION_CPU;
    o.epilogue = backward ? FM_EPILOGUE_DDROPOUT : FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT;
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&A, &B, &C, backward ? NULL : &BIAS, &D, backward ? &X : NULL};
    fm_exec_args args;
    fm_exec_args_init(&args);
    args.ints[0] = pos, args.ints[3] = (int64_t)seed;
    fm_plan *plan = NULL;
    CHECK_OK(fm_plan_create(g_ctx, FM_OP_MATMUL, ts, FM_MATMUL_NSLOTS, &o, &plan));
    if (plan) {
        CHECK_MSG(strstr(fm_plan_describe(plan), "cpu/halfgemm") != NULL, "%s", fm_plan_describe(plan));
        void *ptrs[FM_MATMUL_NSLOTS] = {a, b, c, backward ? NULL : bias, d, backward ? mask : NULL};
        CHECK_OK(fm_plan_execute_args(plan, ptrs, FM_MATMUL_NSLOTS, &args, NULL));
        fm_plan_release(plan);
    }
    const double eps_out = dt == FM_F16 ? 0x1p-11 : 0x1p-8;
    int64_t bad = 0, bad_zero = 0, kept = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = 0, mag = 0;
            for (int64_t q = 0; q < k; q++) {
                const double x = value_of(dt, a[i * k + q]) * value_of(dt, b[q * n + j]);
                sum += x, mag += fabs(x);
            }
            const int64_t e = i * n + j;
            double x = alpha * sum + beta * value_of(dt, c[e]) + (backward ? 0 : value_of(dt, bias[j]));
            const double scale_in = fabs(alpha) * mag + fabs(beta * value_of(dt, c[e])) +
                                    (backward ? 0 : fabs(value_of(dt, bias[j])));
            if (!backward)
                x = x > 0 ? x : 0;
            const int keep = backward ? (mask[i * rb + j / 8] >> (j % 8) & 1) : (uint64_t)w[e] >= thr;
            const double want = keep ? x * s : 0.0, got = value_of(dt, d[e]);
            const double bound = s * (double)(k + 4) * 0x1p-24 * scale_in + 2 * eps_out * fabs(want) +
                                 ldexp(1.0, dt == FM_F16 ? -24 : -133);
            kept += keep;
            bad += !(fabs(got - want) <= bound);
            bad_zero += !keep && d[e] != 0; /* +0 exactly */
        }
    CHECK_MSG(bad == 0 && bad_zero == 0, "%s %s: %lld of %lld elements off the float64 reference, %lld dropped ones "
              "not +0", fm_dtype_name(dt), backward ? "ddropout" : "bias+relu+dropout", (long long)bad,
              (long long)nd, (long long)bad_zero);
    CHECK_MSG(kept > nd / 4 && kept < nd - nd / 4, "%lld of %lld kept", (long long)kept, (long long)nd);
done:
    free(a), free(b), free(c), free(d), free(bias), free(w), free(mask);
}

static void test_dropout(void)
{
    const fm_dtype dts[] = {FM_F16, FM_BF16};
    for (int i = 0; i < 2; i++) {
        run_dropout(dts[i], 0);
        run_dropout(dts[i], 1);
    }
}

static void test_refusals(void)
{
    uint16_t a[12] = {0}, b[12] = {0}, d[9], aux[9];
    const int64_t s33[2] = {3, 3}, s34[2] = {3, 4}, s43[2] = {4, 3};
    fm_tensor A, B, D, AUX, D32;
    float d32[9];
    fm_tensor_init(&A, a, fm_test_cpu, FM_F16, 2, s34, NULL);
    fm_tensor_init(&B, b, fm_test_cpu, FM_F16, 2, s43, NULL);
    fm_tensor_init(&D, d, fm_test_cpu, FM_F16, 2, s33, NULL);
    fm_tensor_init(&AUX, aux, fm_test_cpu, FM_F16, 2, s33, NULL);
    fm_tensor_init(&D32, d32, fm_test_cpu, FM_F32, 2, s33, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_GELU | FM_EPILOGUE_AUX;
    CHECK_STATUS(fm_matmul(g_ctx, &A, &B, NULL, NULL, &D, &AUX, &o, NULL), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("float16 with epilogue 'gelu+aux' is not supported on the cpu");
    /* the dropout chains with a second output: the keep mask (dropout+aux), the bias gradient */
    unsigned char mask[3 * 16] = {0};
    uint16_t bg[3];
    const int64_t s3[1] = {3}, sm[2] = {3, 16};
    fm_tensor MASK, BG;
    fm_tensor_init(&MASK, mask, fm_test_cpu, FM_U8, 2, sm, NULL);
    fm_tensor_init(&BG, bg, fm_test_cpu, FM_BF16, 1, s3, NULL);
    o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT | FM_EPILOGUE_AUX;
    o.dropout = 0.5;
    CHECK_STATUS(fm_matmul(g_ctx, &A, &B, NULL, NULL, &D, &MASK, &o, NULL), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("float16 with epilogue 'relu+dropout+aux' is not supported on the cpu");
    fm_tensor A16 = A, B16 = B, D16 = D;
    A16.dtype = B16.dtype = D16.dtype = FM_BF16;
    o.epilogue = FM_EPILOGUE_DDROPOUT | FM_EPILOGUE_BGRAD;
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&A16, &B16, NULL, NULL, &D16, &MASK, &BG};
    CHECK_STATUS(fm_matmul_v(g_ctx, ts, &o, NULL), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("bfloat16 with epilogue 'ddropout+bgrad' is not supported on the cpu");
    fm_matmul_options_init(&o);
    CHECK_STATUS(fm_matmul(g_ctx, &A, &B, NULL, NULL, &D32, NULL, NULL, NULL), FM_ERR_DTYPE);
    CHECK_OK(fm_matmul(g_ctx, &A, &B, NULL, NULL, &D, NULL, NULL, NULL));
}

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "fm_context_create failed: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_rounding);
    RUN_TEST(test_general);
    RUN_TEST(test_dropout);
    RUN_TEST(test_refusals);
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
