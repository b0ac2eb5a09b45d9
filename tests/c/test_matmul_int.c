/* test_matmul_int.c : integer and bool matmul (the intgemm backend) against an exact reference:
 * each element summed in 128-bit arithmetic from the sign- or zero-extended values and reduced
 * modulo 2^bits (NumPy's wrapping result), bool as an OR of ANDs; and the refusals (c, epilogues,
 * alpha != 1, mixed dtypes) with their status and message. */
#include "check.h"
#include "mmref.h"

#include <stdlib.h>

static fm_context *g_ctx;

static const fm_dtype int_dtypes[] = {FM_I8, FM_U8, FM_I16, FM_U16, FM_I32, FM_U32, FM_I64, FM_U64, FM_BOOL};

static int is_signed(fm_dtype dt) { return dt == FM_I8 || dt == FM_I16 || dt == FM_I32 || dt == FM_I64; }

/* Element i of an integer buffer, extended to 128 bits as its dtype says. */
static unsigned __int128 load(fm_dtype dt, const void *p, int64_t i)
{
    typedef unsigned __int128 u128;
    const int sg = is_signed(dt);
    switch (fm_dtype_size(dt)) {
    case 1: return sg ? (u128)(__int128)((const int8_t *)p)[i] : ((const uint8_t *)p)[i];
    case 2: return sg ? (u128)(__int128)((const int16_t *)p)[i] : ((const uint16_t *)p)[i];
    case 4: return sg ? (u128)(__int128)((const int32_t *)p)[i] : ((const uint32_t *)p)[i];
    default: return sg ? (u128)(__int128)((const int64_t *)p)[i] : ((const uint64_t *)p)[i];
    }
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill(fm_dtype dt, void *p, int64_t n, uint64_t *seed)
{
    const size_t es = fm_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        uint64_t v = splitmix(seed);
        if (dt == FM_BOOL)
            v = (v & 7) == 0 ? 0 : (v & 3) + 1; /* bytes 0..4: any nonzero byte is true */
        memcpy((char *)p + i * (int64_t)es, &v, es); /* little-endian: the low bytes */
    }
}

/* d (batch x m x n) from a (batch_a x m x k, row-major) and b, row-major or (b_t) given as its
 * transpose (n x k row-major: a column-major b, read through strides); batch_a 0 broadcasts a. */
static void run_case(fm_dtype dt, int64_t batch, int batch_a, int64_t m, int64_t n, int64_t k, int b_t,
                     int threads)
{
    const size_t es = fm_dtype_size(dt);
    uint64_t seed = 1234u + (uint64_t)dt * 77u + (uint64_t)(m * n * k);
    const int64_t na = (batch_a ? batch : 1) * m * k, nb = batch * n * k, nd = batch * m * n;
    char *a = malloc((size_t)(na ? na : 1) * es), *b = malloc((size_t)(nb ? nb : 1) * es);
    char *d = malloc((size_t)(nd ? nd : 1) * es);
    CHECK(a && b && d);
    if (!a || !b || !d) {
        free(a), free(b), free(d);
        return;
    }
    fill(dt, a, na, &seed);
    fill(dt, b, nb, &seed);
    memset(d, 0x5a, (size_t)nd * es); /* garbage: every element must be written */
    const int64_t sa[3] = {batch, m, k}, sta[3] = {batch_a ? m * k : 0, k, 1};
    const int64_t sb[3] = {batch, k, n}, stb[3] = {n * k, b_t ? 1 : n, b_t ? k : 1};
    const int64_t sd[3] = {batch, m, n};
    fm_tensor A, B, D;
    CHECK_OK(fm_tensor_init(&A, a, fm_test_cpu, dt, 3, sa, sta));
    CHECK_OK(fm_tensor_init(&B, b, fm_test_cpu, dt, 3, sb, stb));
    CHECK_OK(fm_tensor_init(&D, d, fm_test_cpu, dt, 3, sd, NULL));
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.num_threads = threads;
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_plan(g_ctx, &A, &B, NULL, NULL, &D, NULL, &o, &plan));
    if (plan) {
        CHECK_MSG(strstr(fm_plan_describe(plan), "cpu/intgemm") != NULL, "%s", fm_plan_describe(plan));
        void *ptrs[FM_MATMUL_NSLOTS] = {a, b, NULL, NULL, d};
        CHECK_OK(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL));
        fm_plan_release(plan);
    }
    const unsigned bits = (unsigned)es * 8u;
    const unsigned __int128 mask = bits == 64 ? ~(uint64_t)0 : (((unsigned __int128)1 << bits) - 1);
    int64_t bad = 0;
    for (int64_t q = 0; q < batch; q++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                unsigned __int128 sum = 0;
                for (int64_t p = 0; p < k; p++) {
                    const unsigned __int128 x = load(dt, a, (batch_a ? q * m * k : 0) + i * k + p);
                    const unsigned __int128 y = load(dt, b, q * n * k + (b_t ? j * k + p : p * n + j));
                    if (dt == FM_BOOL)
                        sum |= (x != 0) && (y != 0);
                    else
                        sum += x * y; /* modulo 2^128, hence modulo 2^bits */
                }
                bad += (load(dt, d, (q * m + i) * n + j) & mask) != (sum & mask);
            }
    CHECK_MSG(bad == 0, "%s %lldx(%lldx%lldx%lld) threads=%d: %lld elements differ", fm_dtype_name(dt),
              (long long)batch, (long long)m, (long long)n, (long long)k, threads, (long long)bad);
    free(a), free(b), free(d);
}

static void test_exact_results(void)
{
    for (size_t i = 0; i < sizeof int_dtypes / sizeof int_dtypes[0]; i++) {
        for (int b_t = 0; b_t < 2; b_t++) {
            run_case(int_dtypes[i], 2, 1, 5, 7, 300, b_t, 0);
            run_case(int_dtypes[i], 3, 0, 1, 1, 1, b_t, 0);
            run_case(int_dtypes[i], 1, 1, 4, 3, 0, b_t, 0); /* k = 0: zeros */
        }
    }
    run_case(FM_I32, 1, 1, 200, 300, 250, 0, 2); /* two threads share the rows */
    run_case(FM_U64, 2, 0, 90, 80, 300, 1, 2);
}

static void test_refusals(void)
{
    int32_t a[12] = {0}, b[12] = {0}, c[9] = {0}, d[9];
    const int64_t s33[2] = {3, 3}, s34[2] = {3, 4}, s43[2] = {4, 3};
    fm_tensor A, B, C, D, D64, B64;
    fm_tensor_init(&A, a, fm_test_cpu, FM_I32, 2, s34, NULL);
    fm_tensor_init(&B, b, fm_test_cpu, FM_I32, 2, s43, NULL);
    fm_tensor_init(&C, c, fm_test_cpu, FM_I32, 2, s33, NULL);
    fm_tensor_init(&D, d, fm_test_cpu, FM_I32, 2, s33, NULL);
    fm_tensor_init(&D64, d, fm_test_cpu, FM_I64, 2, s33, NULL);
    fm_tensor_init(&B64, b, fm_test_cpu, FM_I64, 2, s43, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.beta[0] = 1.0;
    CHECK_STATUS(fm_matmul(g_ctx, &A, &B, &C, NULL, &D, NULL, &o, NULL), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("c (beta * c) is not supported for dtype int32");
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_RELU;
    CHECK_STATUS(fm_matmul(g_ctx, &A, &B, NULL, NULL, &D, NULL, &o, NULL), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("relu is not supported for dtype int32");
    fm_matmul_options_init(&o);
    o.alpha[0] = 2.0;
    CHECK_STATUS(fm_matmul(g_ctx, &A, &B, NULL, NULL, &D, NULL, &o, NULL), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("alpha = 2");
    CHECK_STATUS(fm_matmul(g_ctx, &A, &B64, NULL, NULL, &D, NULL, NULL, NULL), FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("mixed dtypes");
    CHECK_STATUS(fm_matmul(g_ctx, &A, &B, NULL, NULL, &D64, NULL, NULL, NULL), FM_ERR_DTYPE);
    /* d overlapping a: the generic aliasing check names both slots */
    fm_tensor Da;
    fm_tensor_init(&Da, a, fm_test_cpu, FM_I32, 2, s33, NULL);
    CHECK_STATUS(fm_matmul(g_ctx, &A, &B, NULL, NULL, &Da, NULL, NULL, NULL), FM_ERR_ALIAS);
    CHECK_ERROR_MENTIONS("output d overlaps input a");
    CHECK_OK(fm_matmul(g_ctx, &A, &B, NULL, NULL, &D, NULL, NULL, NULL));
}

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "fm_context_create failed: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_exact_results);
    RUN_TEST(test_refusals);
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
