/* test_rng_discrete.c : the CPU RNG's discrete distributions (backends/cpu/philox_discrete.c,
 * fusion/philox_portable.h's integers and poisson).
 *  - curand mode's poisson against libcurand's host curandGeneratePoisson (needs no GPU), byte for
 *    byte: both methods (lam < 2000: the alias table; >= 2000: the normal), odd offsets and
 *    lengths, calls in a row, after a double call (the shift), positions past 2^32 groups;
 *  - portable integers against an independent Lemire (128-bit products, the sub-stream's words
 *    read by hand), every integer dtype, ranges of 1, 2^32 and 2^64 values, near 2^40 and 2^62;
 *  - portable poisson against the scalar fm_px_poisson at large positions;
 *  - thread counts 1, 2, 7 identical; offset o then m values = values [o, o + m) of one call;
 *  - every bad input's status and message, nothing written to out.
 * Statistics (chi-square, planted bugs) are tests/python/test_random_stats.py's. */
#define _GNU_SOURCE
#include "rng_test_util.h"
#include "internal.h"
#include "philox_portable.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static fm_context *ctx;

static void int_opts(fm_rng_options *o, int64_t lo, int64_t hi, int endpoint, int threads)
{
    fm_rng_options_init(o);
    o->distribution = FM_RNG_INTEGERS;
    o->int_low = lo, o->int_high = hi, o->endpoint = endpoint;
    o->num_threads = threads;
}

static void poisson_opts(fm_rng_options *o, int mode, double lam, int threads)
{
    fm_rng_options_init(o);
    o->distribution = FM_RNG_POISSON;
    o->mode = mode;
    o->lam = lam;
    o->num_threads = threads;
}

/* n values into buf (dtype dt) with options o from position pos (curand: the f64 run [ra, rb)) */
static fm_status fill(const fm_rng_options *o, fm_dtype dt, uint64_t seed, int64_t pos, int64_t ra, int64_t rb,
                      int64_t n, void *buf)
{
    return rng_fill_at(ctx, o, (fm_device){FM_DEVICE_CPU, 0}, dt, buf, n, seed, pos, ra, rb, NULL);
}

/* ---- an independent integers reference: Lemire with 128-bit products, the words by hand ---- */
static uint64_t ref_word(uint64_t seed, uint64_t m, int wide, uint32_t attempt)
{
    uint32_t b[4];
    if (attempt == 0) { /* the main stream */
        const uint32_t ctr[4] = {(uint32_t)(m / (wide ? 2 : 4)), (uint32_t)((m / (wide ? 2 : 4)) >> 32), 0, 0};
        fm_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32), b);
        return wide ? (uint64_t)b[2 * (m % 2)] | (uint64_t)b[2 * (m % 2) + 1] << 32 : b[m % 4];
    }
    const uint32_t i = attempt - 1, per = wide ? 2 : 4;
    const uint32_t ctr[4] = {(uint32_t)m, (uint32_t)(m >> 32), i / per, FM_PX_TAG_INTEGERS};
    fm_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32), b);
    return wide ? (uint64_t)b[2 * (i % 2)] | (uint64_t)b[2 * (i % 2) + 1] << 32 : b[i % 4];
}

/* value m of integers in [lo, hi] (both included), as int64 */
static int64_t ref_integer(uint64_t seed, uint64_t m, int64_t lo, int64_t hi, int *rejected)
{
    const uint64_t span = (uint64_t)hi - (uint64_t)lo;
    const int wide = span > 0xFFFFFFFFu;
    if (span == UINT64_MAX || span == 0xFFFFFFFFu)
        return (int64_t)((uint64_t)lo + ref_word(seed, m, wide, 0));
    const unsigned __int128 r = (unsigned __int128)span + 1, two = (unsigned __int128)1 << (wide ? 64 : 32);
    const unsigned __int128 t = (two - r) % r; /* the words past the last whole multiple of r */
    for (uint32_t a = 0;; a++) {
        const unsigned __int128 p = (unsigned __int128)ref_word(seed, m, wide, a) * r;
        if (p % two >= t)
            return (int64_t)((uint64_t)lo + (uint64_t)(p / two));
        ++*rejected;
    }
}

typedef struct int_case {
    int64_t lo, hi; /* both included */
    fm_dtype dt;
} int_case;

static int64_t load_int(const void *buf, fm_dtype dt, int64_t i)
{
    switch (dt) {
    case FM_I8: return ((const int8_t *)buf)[i];
    case FM_I16: return ((const int16_t *)buf)[i];
    case FM_I32: return ((const int32_t *)buf)[i];
    case FM_U8: return ((const uint8_t *)buf)[i];
    case FM_U16: return ((const uint16_t *)buf)[i];
    case FM_U32: return ((const uint32_t *)buf)[i];
    default: return ((const int64_t *)buf)[i];
    }
}

static void test_integers_match_reference(void)
{
    static const int_case cases[] = {
        {0, 9, FM_I64},          {-5, 5, FM_I32},           {0, 0, FM_I64}, /* one value */
        {0, 2147483648, FM_I64}, /* 2^31 + 1 values: about half of the words rejected */
        {-128, 127, FM_I8},      {0, 255, FM_U8},           {-1000, 1000, FM_I16},
        {0, 65535, FM_U16},      {0, 4294967295, FM_U32},   /* 2^32 values: every word */
        {INT32_MIN, INT32_MAX, FM_I32},
        {0, 4294967296, FM_I64}, /* 2^32 + 1 values: 64-bit words, half rejected */
        {-3, INT64_MAX, FM_I64}, {INT64_MIN, INT64_MAX, FM_I64}, /* 2^64 values: every word */
        {-999999999999999999, 999999999999999999, FM_I64},
    };
    const uint64_t positions[] = {0, 7, 1ull << 40, (1ull << 40) + 3, (1ull << 62) - 5, (1ull << 62) + 1};
    const int64_t n = 1001;
    int64_t *buf = malloc((size_t)n * 8);
    int rejected = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t q = 0; q < sizeof positions / sizeof positions[0]; q++) {
            fm_rng_options o;
            int_opts(&o, cases[c].lo, cases[c].hi, 1, 0);
            const uint64_t seed = 0x0123456789ABCDEFull + c;
            CHECK_OK(fill(&o, cases[c].dt, seed, (int64_t)positions[q], 0, 0, n, buf));
            int bad = -1;
            for (int64_t i = 0; i < n && bad < 0; i++)
                if (load_int(buf, cases[c].dt, i) != ref_integer(seed, positions[q] + (uint64_t)i, cases[c].lo,
                                                                 cases[c].hi, &rejected))
                    bad = (int)i;
            CHECK_MSG(bad < 0, "integers [%lld, %lld] %s at %llu: value %d differs from the reference",
                      (long long)cases[c].lo, (long long)cases[c].hi, fm_dtype_name(cases[c].dt),
                      (unsigned long long)positions[q], bad);
        }
    CHECK_MSG(rejected > 1000, "only %d rejections: the sub-stream path was not exercised", rejected);
    /* the same range in another dtype: the same values (they depend on the range, not the dtype) */
    fm_rng_options o;
    int_opts(&o, -7, 100, 0, 0);
    int8_t b8[333];
    CHECK_OK(fill(&o, FM_I8, 5, 11, 0, 0, 333, b8));
    CHECK_OK(fill(&o, FM_I64, 5, 11, 0, 0, 333, buf));
    int same = 1;
    for (int i = 0; i < 333; i++)
        same &= b8[i] == buf[i] && buf[i] >= -7 && buf[i] < 100;
    CHECK_MSG(same, "integers: int8 and int64 of one range differ");
    free(buf);
}

static void test_poisson_portable_scalar(void)
{
    const double lams[] = {0.0, 0.3, 4.5, 9.99, 10.0, 37.5, 1e4, 1e12};
    const uint64_t positions[] = {0, 1ull << 40, (1ull << 62) + 3};
    int64_t buf[257];
    for (size_t l = 0; l < sizeof lams / sizeof lams[0]; l++)
        for (size_t q = 0; q < 3; q++) {
            fm_rng_options o;
            poisson_opts(&o, FM_RNG_PORTABLE, lams[l], 0);
            CHECK_OK(fill(&o, FM_I64, 77, (int64_t)positions[q], 0, 0, 257, buf));
            const fm_px_poisson_consts pc = fm_px_poisson_setup(lams[l]);
            int bad = -1;
            for (int i = 0; i < 257 && bad < 0; i++)
                if (buf[i] != fm_px_poisson(77, positions[q] + (uint64_t)i, &pc) || buf[i] < 0 ||
                    (lams[l] == 0 && buf[i] != 0))
                    bad = i;
            CHECK_MSG(bad < 0, "poisson lam %g at %llu: value %d", lams[l], (unsigned long long)positions[q], bad);
        }
}

/* thread counts and chunkings: identical bytes; one call = two calls split at any point */
static void test_threads_and_offsets(void)
{
    const int64_t n = 100003;
    int64_t *ref = malloc((size_t)n * 8), *got = malloc((size_t)n * 8);
    fm_rng_options opts[4];
    int_opts(&opts[0], -3, 1000000007, 0, 1);
    int_opts(&opts[1], INT64_MIN / 3, INT64_MAX / 3, 0, 1);
    poisson_opts(&opts[2], FM_RNG_PORTABLE, 25.0, 1);
    poisson_opts(&opts[3], FM_RNG_CURAND, 7.0, 1);
    for (int k = 0; k < 4; k++) {
        const fm_dtype dt = k == 3 ? FM_U32 : FM_I64;
        const size_t es = fm_dtype_size(dt);
        const int64_t ra = k == 3 ? 8 : 0, rb = k == 3 ? 1000 : 0;
        CHECK_OK(fill(&opts[k], dt, 31, 4099, ra, rb, n, ref));
        for (int t = 2; t <= 7; t += 5) {
            opts[k].num_threads = t;
            memset(got, 0, (size_t)n * es);
            CHECK_OK(fill(&opts[k], dt, 31, 4099, ra, rb, n, got));
            CHECK_MSG(!memcmp(ref, got, (size_t)n * es), "case %d: %d threads differ from 1", k, t);
        }
        const int64_t split = 40001;
        memset(got, 0, (size_t)n * es);
        CHECK_OK(fill(&opts[k], dt, 31, 4099, ra, rb, split, got));
        CHECK_OK(fill(&opts[k], dt, 31, 4099 + split, ra, rb, n - split, (char *)got + split * es));
        CHECK_MSG(!memcmp(ref, got, (size_t)n * es), "case %d: two calls differ from one", k);
    }
    free(ref);
    free(got);
}

#ifdef FM_HAVE_CUDA
/* calls of poisson (lam each) in a row from offset, optionally after nd doubles; libcurand vs us */
static void compare_poisson(uint64_t seed, int64_t offset, int64_t nd, const double *lams, const int64_t *lens,
                            int ncalls)
{
    curandGenerator_t g = rng_curand_generator(1, seed, (uint64_t)offset);
    CHECK_MSG(g != NULL, "libcurand's host generator could not be created");
    if (!g)
        return;
    int64_t pos = offset, ra = 0, rb = 0;
    if (nd > 0) {
        double *d = malloc((size_t)nd * sizeof *d);
        CHECK(curandGenerateUniformDouble(g, d, (size_t)nd) == CURAND_STATUS_SUCCESS);
        free(d);
        ra = pos, rb = pos + nd, pos += nd;
    }
    for (int c = 0; c < ncalls; c++) {
        uint32_t *want = calloc((size_t)lens[c] + 1, 4), *got = calloc((size_t)lens[c] + 1, 4);
        CHECK_MSG(curandGeneratePoisson(g, want, (size_t)lens[c], lams[c]) == CURAND_STATUS_SUCCESS,
                  "curandGeneratePoisson lam %g", lams[c]);
        fm_rng_options o;
        poisson_opts(&o, FM_RNG_CURAND, lams[c], 0);
        CHECK_OK(fill(&o, FM_U32, seed, pos, ra, rb, lens[c], got));
        int64_t bad = -1;
        for (int64_t i = 0; i < lens[c] && bad < 0; i++)
            if (want[i] != got[i])
                bad = i;
        CHECK_MSG(bad < 0, "seed %llu offset %lld (after %lld doubles) call %d lam %g: element %lld is %u, "
                  "libcurand's %u", (unsigned long long)seed, (long long)offset, (long long)nd, c, lams[c],
                  (long long)bad, bad < 0 ? 0 : got[bad], bad < 0 ? 0 : want[bad]);
        pos += lens[c];
        free(want);
        free(got);
    }
    curandDestroyGenerator(g);
}

static void test_curand_poisson(void)
{
    curandGenerator_t g = rng_curand_generator(1, 1, 0);
    if (!g) {
        SKIP("libcurand's host generator could not be created: no comparison with cuRAND");
        return;
    }
    curandDestroyGenerator(g);
    const double lams[] = {1e-3, 0.5, 1.0, 3.7, 10.0, 64.0, 100.5, 745.5, 1000.0, 1999.9, 2000.0, 5000.0, 123456.7,
                           400000.0};
    for (size_t l = 0; l < sizeof lams / sizeof lams[0]; l++) {
        const int64_t len[1] = {300007};
        compare_poisson(42 + l, l % 2 ? 3 : 0, 0, &lams[l], len, 1);
    }
    const double row[] = {3.0, 2500.0, 0.25, 17.0};
    const int64_t lens[] = {5, 1, 262147, 77};
    compare_poisson(7, 262141, 0, row, lens, 4);
    compare_poisson(9, 11, 1001, row, lens, 4);               /* after a double call: cuRAND's shift */
    compare_poisson(0xFEEDFACECAFEBEEFull, (int64_t)1 << 35, 0, row, lens, 4); /* past 2^32 groups */
    /* seed 454088803: word 1 of counter {0, 0, 0, 0} is 2^32 - 1, so element 1's u is exactly 1 and
     * its slot index is L, one past libcurand's table: libcurand reads past its end there (0 for lam
     * 3.7, 549 for lam 1999 here: whatever lies in memory), fusemath takes slot L - 1. The other
     * elements agree; element 1 is a value of the distribution's support. (Probability 2^-32 a value.) */
    uint32_t w[4];
    fm_philox4x32_10((const uint32_t[4]){0, 0, 0, 0}, 454088803u, 0, w);
    CHECK(w[1] == 0xFFFFFFFFu);
    const double edge[] = {3.7, 0.01, 1999.0};
    for (int e = 0; e < 3; e++) {
        curandGenerator_t h = rng_curand_generator(1, 454088803u, 0);
        uint32_t want[4], got[4];
        CHECK(h && curandGeneratePoisson(h, want, 4, edge[e]) == CURAND_STATUS_SUCCESS);
        fm_rng_options o;
        poisson_opts(&o, FM_RNG_CURAND, edge[e], 0);
        CHECK_OK(fill(&o, FM_U32, 454088803u, 0, 0, 0, 4, got));
        CHECK_MSG(want[0] == got[0] && want[2] == got[2] && want[3] == got[3], "lam %g: the edge's neighbours",
                  edge[e]);
        CHECK_MSG(got[1] <= edge[e] + 60 * sqrt(edge[e]) + 10, "lam %g: u = 1 gave %u", edge[e], got[1]);
        if (h)
            curandDestroyGenerator(h);
    }
}
#endif

static void test_curand(void)
{
#ifdef FM_HAVE_CUDA
    test_curand_poisson();
#else
    SKIP("built without the CUDA toolkit: no libcurand to compare curand mode's poisson with");
    CHECK(1);
#endif
}

/* ---- bad input: each a status, a message naming it, nothing written ---- */
static void test_bad_input(void)
{
    int64_t buf[16];
    const int64_t n = 16;
    fm_rng_options o;
#define BAD(setup, dt, status, text)                                                                       \
    do {                                                                                                   \
        fm_rng_options_init(&o);                                                                           \
        setup;                                                                                             \
        memset(buf, 0x5A, sizeof buf);                                                                     \
        fm_tensor t;                                                                                       \
        fm_tensor_init(&t, buf, (fm_device){FM_DEVICE_CPU, 0}, dt, 1, &n, NULL);                           \
        CHECK_STATUS(fm_rng(ctx, &t, &o, 1, 0, NULL), status);                                             \
        CHECK_ERROR_MENTIONS(text);                                                                        \
        int untouched = 1;                                                                                 \
        for (size_t i = 0; i < sizeof buf; i++)                                                            \
            untouched &= ((unsigned char *)buf)[i] == 0x5A;                                                \
        CHECK_MSG(untouched, "out written on the error \"%s\"", text);                                     \
    } while (0)
#define INTS(lo, hi, ep) (o.distribution = FM_RNG_INTEGERS, o.int_low = (lo), o.int_high = (hi), o.endpoint = (ep))
    BAD(INTS(5, 5, 0), FM_I64, FM_ERR_INVALID_ARGUMENT, "integers low = 5, high = 5; expected low < high");
    BAD(INTS(5, 4, 1), FM_I64, FM_ERR_INVALID_ARGUMENT, "integers low = 5, high = 4; expected low <= high");
    BAD(INTS(0, 0, 0), FM_I64, FM_ERR_INVALID_ARGUMENT, "expected low < high"); /* the unset default */
    BAD(INTS(0, 10, 2), FM_I64, FM_ERR_INVALID_ARGUMENT, "integers endpoint = 2, expected 0 or 1");
    BAD(INTS(0, 10, 0), FM_F64, FM_ERR_DTYPE, "dtype float64 (out's), expected int8, int16, int32, int64");
    BAD(INTS(0, 10, 0), FM_U64, FM_ERR_DTYPE, "dtype uint64 (out's), expected int8");
    BAD(INTS(0, 257, 0), FM_U8, FM_ERR_INVALID_ARGUMENT,
        "integers low = 0, high = 257 are out of bounds for uint8, expected 0 <= low <= high - 1 <= 255");
    BAD(INTS(-1, 10, 0), FM_U32, FM_ERR_INVALID_ARGUMENT, "out of bounds for uint32");
    BAD(INTS(0, 2147483648, 1), FM_I32, FM_ERR_INVALID_ARGUMENT, "out of bounds for int32");
    BAD((INTS(0, 10, 0), o.mode = FM_RNG_CURAND), FM_I64, FM_ERR_NOT_SUPPORTED,
        "mode curand has no integers (cuRAND generates none), expected mode portable");
#undef INTS
    BAD((o.distribution = FM_RNG_POISSON, o.lam = -1), FM_I64, FM_ERR_INVALID_ARGUMENT,
        "poisson lam = -1, expected a finite value with 0 <= lam <= 9.223372006484771e+18 (NumPy's bound)");
    BAD((o.distribution = FM_RNG_POISSON, o.lam = NAN), FM_I64, FM_ERR_INVALID_ARGUMENT, "poisson lam = nan");
    BAD((o.distribution = FM_RNG_POISSON, o.lam = 1e19), FM_I64, FM_ERR_INVALID_ARGUMENT, "lam too large");
    BAD((o.distribution = FM_RNG_POISSON, o.lam = INFINITY), FM_I64, FM_ERR_INVALID_ARGUMENT, "lam too large");
    BAD((o.distribution = FM_RNG_POISSON, o.mode = FM_RNG_CURAND, o.lam = 0), FM_U32, FM_ERR_INVALID_ARGUMENT,
        "poisson lam = 0, expected 0 < lam <= 400000 in mode curand");
    BAD((o.distribution = FM_RNG_POISSON, o.mode = FM_RNG_CURAND, o.lam = 400001), FM_U32,
        FM_ERR_INVALID_ARGUMENT, "poisson lam = 400001, expected 0 < lam <= 400000");
    BAD((o.distribution = FM_RNG_POISSON), FM_F64, FM_ERR_DTYPE,
        "dtype float64 (out's), expected int64 (uint32 in mode curand) for poisson");
    BAD((o.distribution = FM_RNG_POISSON), FM_U32, FM_ERR_DTYPE, "expected int64 (uint32 in mode curand)");
    BAD((o.distribution = FM_RNG_POISSON, o.mode = FM_RNG_CURAND), FM_I32, FM_ERR_DTYPE,
        "dtype int32 (out's), expected int64 or uint32 for poisson");
    BAD((o.distribution = FM_RNG_NORMAL), FM_I64, FM_ERR_DTYPE, "expected float32 or float64 for normal");
    BAD(o.distribution = 7, FM_I64, FM_ERR_INVALID_ARGUMENT, "distribution = 7, expected 0 (uniform)");
    BAD((o.distribution = FM_RNG_INTEGERS, o.int_high = 9, o.out_ndim = 1, o.out_shape[0] = 3), FM_I64,
        FM_ERR_SHAPE, "differs from options.out_shape");
#undef BAD
    /* bad per-call arguments through a plan: nothing written either */
    fm_rng_options_init(&o);
    o.distribution = FM_RNG_INTEGERS, o.int_high = 100;
    memset(buf, 0x5A, sizeof buf);
    CHECK_STATUS(fill(&o, FM_I64, 1, -1, 0, 0, n, buf), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("position args.ints[0] = -1, expected >= 0");
    CHECK_STATUS(fill(&o, FM_I64, 1, INT64_MAX - 3, 0, 0, n, buf), FM_ERR_TOO_LARGE);
    CHECK_ERROR_MENTIONS("passes 2^63 - 1");
    CHECK_STATUS(fill(&o, FM_I64, 1, 100, 4, 8, n, buf), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("expected 0, 0 (the run of f64 calls is curand mode's state)");
    poisson_opts(&o, FM_RNG_CURAND, 5, 0);
    CHECK_STATUS(fill(&o, FM_U32, 1, 10, 8, 20, n, buf), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("expected 0 <= ints[1] <= ints[2] <= the position 10");
    int untouched = 1;
    for (size_t i = 0; i < sizeof buf; i++)
        untouched &= ((unsigned char *)buf)[i] == 0x5A;
    CHECK_MSG(untouched, "out written on a bad per-call argument");
}

/* fm_output_specs: int64 by default for both */
static void test_specs(void)
{
    fm_rng_options o;
    int_opts(&o, 0, 10, 0, 0);
    o.out_ndim = 2, o.out_shape[0] = 3, o.out_shape[1] = 5;
    const fm_tensor *ts[1] = {NULL};
    fm_tensor spec;
    uint32_t written = 0;
    CHECK_OK(fm_output_specs(FM_OP_RNG, ts, 1, &o, &spec, &written));
    CHECK(spec.dtype == FM_I64 && spec.ndim == 2 && spec.shape[1] == 5 && written == 1);
    poisson_opts(&o, FM_RNG_CURAND, 3, 0);
    o.out_ndim = 1, o.out_shape[0] = 4;
    CHECK_OK(fm_output_specs(FM_OP_RNG, ts, 1, &o, &spec, &written));
    CHECK(spec.dtype == FM_I64);
}

int main(void)
{
    if (fm_context_create(&ctx) != FM_OK) {
        fprintf(stderr, "context: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_integers_match_reference);
    RUN_TEST(test_poisson_portable_scalar);
    RUN_TEST(test_threads_and_offsets);
    RUN_TEST(test_curand);
    RUN_TEST(test_bad_input);
    RUN_TEST(test_specs);
    fm_context_destroy(ctx);
    TEST_MAIN_RETURN();
}
