/* test_rng_cpu.c : the CPU RNG (backends/cpu/philox_rng.c, fusion/philox_portable.h).
 *  - curand mode against libcurand's host generator (CURAND_RNG_PSEUDO_PHILOX4_32_10; needs no GPU),
 *    byte for byte: every kind, float and double, odd offsets and lengths, calls in a row (the
 *    shift f64 calls leave included), positions past 2^32 groups;
 *  - Philox4x32-10 against Random123's known-answer vectors;
 *  - the portable stream's documented mapping, its log / exp / sincos against glibc (ulps);
 *  - every ISA path (scalar, AVX2, AVX-512; each forced, fm_rng_simd_set_isa) gives the scalar
 *    functions' bits for every portable kind, odd offsets and lengths, the 32-bit counter carry, and
 *    curand mode's bytes (its Philox runs in the vector path too);
 *  - thread counts 1, 2, 7 give identical bytes; offset o then n values = values [o, o + n) of one call;
 *  - every bad input's status and message; output specs; the plan cache.
 * Statistics are tests/python/test_random.py's. */
#define _GNU_SOURCE
#include "rng_test_util.h"
#include "internal.h"
#include "cpu/philox_simd.h"
#include "philox_portable.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static fm_context *ctx;

#define NKINDS RNG_NCURAND /* the kinds both modes make (exponential: extra[] below) */
static const char *const isa_names[] = {"scalar", "AVX2", "AVX-512"}; /* FM_RNG_ISA_* */

/* The state a caller keeps between calls: the position and curand mode's run of f64 calls. */
typedef struct stream_state {
    int64_t pos, run_a, run_b;
} stream_state;

/* The caller's bookkeeping after a call of n values (fusemath.random does the same). Returns 0
 * when a curand state after it is not one run (the tests never go there). */
static __attribute__((unused)) int advance_state(stream_state *st, int mode, fm_dtype dt, int64_t n)
{
    if (mode == FM_RNG_CURAND && dt == FM_F64 && n > 0) {
        if (st->run_a == st->run_b)
            st->run_a = st->pos, st->run_b = st->pos + n;
        else if (st->run_b / 4 == st->pos / 4)
            st->run_b = st->pos + n;
        else
            return 0;
    }
    st->pos += n;
    return 1;
}

static void opts_for(fm_rng_options *o, const kind *k, int mode, uint64_t seed, int threads)
{
    fm_rng_options_init(o);
    o->distribution = k->dist;
    o->mode = mode;
    (void)seed; /* per call: fill() passes it */
    o->num_threads = threads;
    if (k->dist == FM_RNG_NORMAL || k->dist == FM_RNG_LOGNORMAL)
        o->mean = 0.25, o->stddev = 1.5;
}

/* n values of kind k into buf through a plan, from state st. */
static fm_status fill(const kind *k, int mode, uint64_t seed, int threads, const stream_state *st, int64_t n,
                      void *buf)
{
    fm_rng_options o;
    opts_for(&o, k, mode, seed, threads);
    return rng_fill_at(ctx, &o, (fm_device){FM_DEVICE_CPU, 0}, k->dt, buf, n, seed, st->pos, st->run_a, st->run_b,
                       NULL);
}

/* ---- Philox against Random123's kat_vectors (philox4x32 10 rounds) ---- */
static void test_philox_known_answers(void)
{
    static const uint32_t in[3][6] = {
        {0, 0, 0, 0, 0, 0},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0}};
    static const uint32_t want[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        fm_philox4x32_10(in[i], in[i][4], in[i][5], out);
        CHECK_MSG(!memcmp(out, want[i], sizeof out), "vector %d: %08x %08x %08x %08x", i, out[0], out[1],
                  out[2], out[3]);
    }
}

/* ---- the portable stream's mapping and arithmetic ---- */
static void test_portable_mapping(void)
{
    const uint64_t seed = 0x123456789abcdefull;
    const int64_t pos = 4097, n = 1031;
    uint32_t raw[1031];
    float uf[1031];
    double ud[1031];
    stream_state st = {pos, 0, 0};
    CHECK_OK(fill(&kinds[0], FM_RNG_PORTABLE, seed, 1, &st, n, raw));
    CHECK_OK(fill(&kinds[1], FM_RNG_PORTABLE, seed, 1, &st, n, uf));
    CHECK_OK(fill(&kinds[2], FM_RNG_PORTABLE, seed, 1, &st, n, ud));
    int bad_raw = 0, bad_f = 0, bad_d = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t m = (uint64_t)(pos + i);
        uint32_t w[4];
        fm_px_block(seed, m / 4, w);
        bad_raw += raw[i] != w[m % 4];
        bad_f += uf[i] != (float)(w[m % 4] >> 8) / 16777216.0f; /* [0, 1) on the 2^-24 grid */
        fm_px_block(seed, m / 2, w);
        const uint64_t word = (uint64_t)w[2 * (m % 2)] | (uint64_t)w[2 * (m % 2) + 1] << 32;
        bad_d += ud[i] != (double)(word >> 11) / 9007199254740992.0;
    }
    CHECK_MSG(!bad_raw && !bad_f && !bad_d, "mismatches: raw %d, uniform f32 %d, f64 %d", bad_raw, bad_f,
              bad_d);
}

/* The backend's batched, vectorised fill (AVX-512 / AVX2 / baseline clones) against the header's
 * functions called one value at a time here: the same bits for every portable kind. */
static double portable_ref(int dist, int f64, uint64_t seed, uint64_t m)
{
    uint32_t w[4];
    const double mean = 0.25, sd = 1.5; /* opts_for's */
    if (!f64) {
        fm_px_block(seed, m / 4, w);
        const uint32_t x = w[m % 4];
        float z0, z1;
        fm_px_normal_pair_f32(w[m % 4 & 2], w[(m % 4 & 2) + 1], &z0, &z1);
        const float z = (m % 2 ? z1 : z0) * (float)sd + (float)mean;
        switch (dist) {
        case FM_RNG_UNIFORM: return 0.0f + 1.0f * fm_px_u01_f32(x);
        case FM_RNG_NORMAL: return z;
        case FM_RNG_LOGNORMAL: return fm_px_expf(z);
        default: return (0.0f - fm_px_logf(fm_px_u01_open_f32(x))) * 1.0f;
        }
    }
    fm_px_block(seed, m / 2, w);
    const uint64_t W0 = (uint64_t)w[0] | (uint64_t)w[1] << 32, W1 = (uint64_t)w[2] | (uint64_t)w[3] << 32;
    double z0, z1;
    fm_px_normal_pair_f64(W0, W1, &z0, &z1);
    const double z = (m % 2 ? z1 : z0) * sd + mean;
    switch (dist) {
    case FM_RNG_UNIFORM: return 0.0 + 1.0 * fm_px_u01_f64(m % 2 ? W1 : W0);
    case FM_RNG_NORMAL: return z;
    case FM_RNG_LOGNORMAL: return fm_px_exp(z);
    default: return (0.0 - fm_px_log(fm_px_u01_open_f64(m % 2 ? W1 : W0))) * 1.0;
    }
}

static void test_portable_fill_matches_scalar(void)
{
    const int64_t pos = 13, n = 10007;
    double *got = malloc((size_t)n * sizeof *got);
    const kind extra[2] = {{FM_RNG_EXPONENTIAL, FM_F32, "exponential f32"},
                           {FM_RNG_EXPONENTIAL, FM_F64, "exponential f64"}};
    for (int k = 1; k < NKINDS + 2; k++) {
        const kind *kd = k < NKINDS ? &kinds[k] : &extra[k - NKINDS];
        const stream_state st = {pos, 0, 0};
        CHECK_OK(fill(kd, FM_RNG_PORTABLE, 31, 2, &st, n, got));
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            const double want = portable_ref(kd->dist, kd->dt == FM_F64, 31, (uint64_t)(pos + i));
            const int same = kd->dt == FM_F64 ? !memcmp(&((double *)got)[i], &want, 8)
                                              : ((float *)got)[i] == (float)want &&
                                                    !signbit(((float *)got)[i]) == !signbit(want);
            if (!same)
                bad = i;
        }
        CHECK_MSG(bad < 0, "%s: value %lld differs from the scalar functions (%.17g, expected %.17g)", kd->name,
                  (long long)bad, bad < 0 ? 0.0 : kd->dt == FM_F64 ? got[bad] : ((float *)got)[bad],
                  bad < 0 ? 0.0 : portable_ref(kd->dist, kd->dt == FM_F64, 31, (uint64_t)(pos + bad)));
    }
    free(got);
}

static double ulps_f(float got, double exact)
{
    const float e = (float)exact;
    const float ulp = nextafterf(fabsf(e), INFINITY) - fabsf(e);
    return fabs((double)got - exact) / ulp;
}
static double ulps_d(double got, long double exact)
{
    const double e = (double)exact;
    const double ulp = nextafter(fabs(e), INFINITY) - fabs(e);
    return (double)(fabsl((long double)got - exact) / ulp);
}

/* The library's own log, exp and sincos against glibc's long double functions. */
static void test_portable_math_accuracy(void)
{
    double worst[6] = {0};
    uint32_t w[4];
    for (uint64_t i = 0; i < 200000; i++) {
        fm_px_block(7, i, w);
        const uint64_t W = (uint64_t)w[0] | (uint64_t)w[1] << 32;
        const float uf = fm_px_u01_open_f32(w[2]);
        const double ud = fm_px_u01_open_f64(W);
        worst[0] = fmax(worst[0], ulps_f(fm_px_logf(uf), (double)logl(uf)));
        worst[1] = fmax(worst[1], ulps_d(fm_px_log(ud), logl(ud)));
        const float xf = uf * 175.0f - 87.0f; /* [-87, 88]: normal results */
        const double xd = ud * 1417.0 - 708.0;
        worst[2] = fmax(worst[2], ulps_f(fm_px_expf(xf), (double)expl(xf)));
        worst[3] = fmax(worst[3], ulps_d(fm_px_exp(xd), expl(xd)));
        float sf, cf;
        double sd, cd;
        fm_px_sincos_turns_f32(w[3], &sf, &cf);
        fm_px_sincos_turns_f64(W, &sd, &cd);
        const long double tf = 2 * 3.14159265358979323846264338327950288L * w[3] / 4294967296.0L;
        const long double td =
            2 * 3.14159265358979323846264338327950288L * (long double)W / 18446744073709551616.0L;
        /* absolute error in ulps of 1 (sin near 0 has no relative accuracy to give: the angle's) */
        worst[4] = fmax(worst[4], fmax(fabsl(sf - sinl(tf)), fabsl(cf - cosl(tf))) / 0x1p-24);
        worst[5] = fmax(worst[5], (double)(fmaxl(fabsl(sd - sinl(td)), fabsl(cd - cosl(td))) / 0x1p-53L));
    }
    printf("    worst: logf %.2f ulp, log %.2f, expf %.2f, exp %.2f, sincos f32 %.2f ulp(1), f64 %.2f\n",
           worst[0], worst[1], worst[2], worst[3], worst[4], worst[5]);
    CHECK_MSG(worst[0] <= 2 && worst[1] <= 2 && worst[2] <= 2 && worst[3] <= 2, "log/exp ulps %g %g %g %g",
              worst[0], worst[1], worst[2], worst[3]);
    CHECK_MSG(worst[4] <= 2 && worst[5] <= 2, "sincos %g %g", worst[4], worst[5]);
}

/* lognormal where exp overflows, underflows and hits its clamps (the vector exp's selects): every
 * ISA against the scalar exp of the scalar normal */
static void test_isa_lognormal_extremes(void)
{
    static const double params[4][3] = {{0, 80, 30}, {0, -95, 6}, {1, 700, 40}, {1, -735, 12}}; /* f64?, mean, sd */
    const int64_t pos = 3, n = 4099;
    void *buf = malloc((size_t)n * 8);
    const int before = fm_rng_simd_isa();
    for (int isa = FM_RNG_ISA_SCALAR; isa <= FM_RNG_ISA_AVX512; isa++) {
        if (fm_rng_simd_set_isa(isa) < 0)
            continue;
        for (int c = 0; c < 4; c++) {
            const int f64 = params[c][0] != 0;
            const double mean = params[c][1], sd = params[c][2];
            fm_rng_options o;
            fm_rng_options_init(&o);
            o.distribution = FM_RNG_LOGNORMAL, o.mode = FM_RNG_PORTABLE, o.mean = mean, o.stddev = sd;
            fm_tensor t;
            fm_tensor_init(&t, buf, (fm_device){FM_DEVICE_CPU, 0}, f64 ? FM_F64 : FM_F32, 1, &n, NULL);
            fm_plan *plan = NULL;
            CHECK_OK(fm_rng_plan(ctx, &t, &o, &plan));
            fm_exec_args a;
            fm_exec_args_init(&a);
            a.ints[0] = pos, a.ints[3] = 5;
            void *ptrs[1] = {buf};
            CHECK_OK(fm_plan_execute_args(plan, ptrs, 1, &a, NULL));
            fm_plan_release(plan);
            int64_t bad = -1, inf = 0, zero = 0;
            for (int64_t i = 0; i < n && bad < 0; i++) {
                const uint64_t m = (uint64_t)(pos + i);
                uint32_t w[4];
                if (!f64) {
                    fm_px_block(5, m / 4, w);
                    float z0, z1;
                    fm_px_normal_pair_f32(w[m % 4 & 2], w[(m % 4 & 2) + 1], &z0, &z1);
                    const float want = fm_px_expf((m % 2 ? z1 : z0) * (float)sd + (float)mean);
                    const float got = ((float *)buf)[i];
                    bad = memcmp(&got, &want, 4) ? i : -1;
                    inf += isinf(got), zero += got == 0;
                } else {
                    fm_px_block(5, m / 2, w);
                    double z0, z1;
                    fm_px_normal_pair_f64((uint64_t)w[0] | (uint64_t)w[1] << 32, (uint64_t)w[2] | (uint64_t)w[3] << 32,
                                          &z0, &z1);
                    const double want = fm_px_exp((m % 2 ? z1 : z0) * sd + mean), got = ((double *)buf)[i];
                    bad = memcmp(&got, &want, 8) ? i : -1;
                    inf += isinf(got), zero += got == 0;
                }
            }
            CHECK_MSG(bad < 0, "%s path, lognormal f%d mean %g sd %g: value %lld differs from the scalar functions",
                      isa_names[isa], f64 ? 64 : 32, mean, sd, (long long)bad);
            CHECK_MSG(inf > 0 || zero > 0, "case %d reached neither overflow nor underflow", c);
        }
    }
    free(buf);
    CHECK(fm_rng_simd_set_isa(before) >= 0);
}

/* ---- threads and chunks ---- */
static void test_thread_invariance(void)
{
    const int64_t n = 200003;
    char *ref = malloc((size_t)n * 8), *got = malloc((size_t)n * 8);
    for (int mode = 0; mode < 2; mode++)
        for (int k = 0; k < NKINDS; k++) {
            const stream_state st = {12345, mode ? 101 : 0, mode ? 1003 : 0};
            const size_t bytes = (size_t)n * fm_dtype_size(kinds[k].dt);
            CHECK_OK(fill(&kinds[k], mode, 99, 1, &st, n, ref));
            for (int t = 2; t <= 7; t += 5) {
                memset(got, 0, bytes);
                CHECK_OK(fill(&kinds[k], mode, 99, t, &st, n, got));
                CHECK_MSG(!memcmp(ref, got, bytes), "mode %d %s: %d threads differ from 1", mode,
                          kinds[k].name, t);
            }
        }
    free(ref);
    free(got);
}

/* Values [o, o + m) of one call from P equal a call of m from P + o (portable: every kind; curand:
 * the 32-bit kinds, whose blocks do not depend on where a call starts). */
static void test_offsets_compose(void)
{
    const int64_t P = 65536 * 4 - 5, N = 70001;
    char *whole = malloc((size_t)N * 8), *part = malloc((size_t)N * 8);
    const int64_t cuts[][2] = {{0, 1}, {1, 2}, {3, 5}, {7, 4097}, {262139, 7}, {50001, 20000}};
    for (int mode = 0; mode < 2; mode++)
        for (int k = 0; k < NKINDS; k++) {
            if (mode == FM_RNG_CURAND && kinds[k].dt == FM_F64)
                continue;
            const size_t es = fm_dtype_size(kinds[k].dt);
            stream_state st = {P, 0, 0};
            CHECK_OK(fill(&kinds[k], mode, 5, 2, &st, N, whole));
            for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
                const int64_t o = cuts[c][0] % N, m = fm_min_i64(cuts[c][1], N - o);
                stream_state sp = {P + o, 0, 0};
                CHECK_OK(fill(&kinds[k], mode, 5, 2, &sp, m, part));
                CHECK_MSG(!memcmp(part, whole + o * es, (size_t)m * es), "mode %d %s: [%lld, +%lld)", mode,
                          kinds[k].name, (long long)o, (long long)m);
            }
        }
    free(whole);
    free(part);
}

#ifdef FM_HAVE_CUDA
/* n values of kind k from libcurand's generator g; 0 on success, 1 when curand refuses the length
 * (normals: n must be even), -1 on another failure. */
static int curand_fill(curandGenerator_t g, const kind *k, int64_t n, void *buf)
{
    const curandStatus_t s = rng_curand_generate(g, k, n, buf);
    return s == CURAND_STATUS_SUCCESS ? 0 : s == CURAND_STATUS_LENGTH_NOT_MULTIPLE ? 1 : -1;
}

/* One call sequence on a libcurand generator and on fusemath, compared call by call. */
static void compare_sequence(uint64_t seed, int64_t offset, const int *kind_ids, const int64_t *lens,
                             int ncalls)
{
    curandGenerator_t g = rng_curand_generator(1, seed, (uint64_t)offset);
    CHECK_MSG(g != NULL, "libcurand's host generator could not be created");
    if (!g)
        return;
    stream_state st = {offset, 0, 0};
    for (int c = 0; c < ncalls; c++) {
        const kind *k = &kinds[kind_ids[c]];
        const size_t bytes = (size_t)lens[c] * fm_dtype_size(k->dt);
        char *want = malloc(bytes + 8), *got = malloc(bytes + 8);
        const int r = curand_fill(g, k, lens[c], want);
        if (r == 1) { /* curand refused the length: the generator did not move */
            free(want);
            free(got);
            continue;
        }
        CHECK_MSG(r == 0, "curand %s of %lld failed", k->name, (long long)lens[c]);
        CHECK_OK(fill(k, FM_RNG_CURAND, seed, 3, &st, lens[c], got));
        int64_t first = -1;
        for (size_t b = 0; b < bytes && first < 0; b++)
            if (want[b] != got[b])
                first = (int64_t)(b / fm_dtype_size(k->dt));
        CHECK_MSG(first < 0,
                  "seed %llx offset %lld, call %d (%s of %lld at %lld): first mismatch at value %lld",
                  (unsigned long long)seed, (long long)offset, c, k->name, (long long)lens[c],
                  (long long)st.pos, (long long)first);
        CHECK(advance_state(&st, FM_RNG_CURAND, k->dt, lens[c]));
        free(want);
        free(got);
    }
    curandDestroyGenerator(g);
}

static void test_curand_each_kind(void)
{
    static const int64_t offsets[] = {0, 1, 2, 3, 5, 262141, (int64_t)1 << 40 | 3, ((int64_t)1 << 52) + 7};
    static const int64_t lens[] = {1, 2, 7, 1000, 1001, 262150, 262153};
    for (int k = 0; k < NKINDS; k++)
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++)
            for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
                const int id[1] = {k};
                compare_sequence(0x9E3779B97F4A7C15ull + o, offsets[o], id, &lens[l], 1);
            }
}

/* Calls in a row: one kind only, then f64 runs followed by 32-bit calls (the shift they leave). */
static void test_curand_calls_in_a_row(void)
{
    for (int k = 0; k < NKINDS; k++) { /* one kind from an odd offset */
        const int ids[4] = {k, k, k, k};
        const int64_t lens[4] = {7, 1002, 14, 262150};
        compare_sequence(42, 5, ids, lens, 4);
    }
    /* f64 calls, then 32-bit ones: uniform f64, normal f64, lognormal f64, then f32, raw, normal f32 */
    const int ids1[7] = {2, 4, 6, 2, 1, 0, 3};
    const int64_t lens1[7] = {1001, 262146, 14, 3, 1000, 300001, 1002};
    compare_sequence(7, 3, ids1, lens1, 7);
    /* 32-bit calls, then one run of f64 calls, then 32-bit again */
    const int ids2[6] = {1, 0, 2, 4, 1, 5};
    const int64_t lens2[6] = {101, 6, 262149, 1000, 77, 262144};
    compare_sequence(11, 65536 * 4 * 3 + 1, ids2, lens2, 6);
}
#endif

static void test_curand(void)
{
#ifdef FM_HAVE_CUDA
    curandGenerator_t g = rng_curand_generator(1, 1, 0);
    if (!g) {
        SKIP("libcurand's host generator could not be created: no comparison with cuRAND");
        CHECK(1);
        return;
    }
    curandDestroyGenerator(g);
    test_curand_each_kind();
    test_curand_calls_in_a_row();
#else
    SKIP("built without the CUDA toolkit: no libcurand to compare curand mode with");
    CHECK(1);
#endif
}

/* ---- every ISA path against the scalar functions ---- */

/* n values of kind kd from pos against portable_ref (raw: the words), one value at a time. */
static void check_portable_kind(const kind *kd, int isa, int threads, int64_t pos, int64_t n, void *buf)
{
    const stream_state st = {pos, 0, 0};
    memset(buf, 0xA5, (size_t)(n + 1) * 8);
    CHECK_OK(fill(kd, FM_RNG_PORTABLE, 31, threads, &st, n, buf));
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        const uint64_t m = (uint64_t)(pos + i);
        if (kd->dist == FM_RNG_RAW) {
            uint32_t w[4];
            fm_px_block(31, m / 4, w);
            bad = ((uint32_t *)buf)[i] != w[m % 4] ? i : -1;
            continue;
        }
        const double want = portable_ref(kd->dist, kd->dt == FM_F64, 31, m);
        const int same = kd->dt == FM_F64 ? !memcmp(&((double *)buf)[i], &want, 8)
                                          : ((float *)buf)[i] == (float)want &&
                                                !signbit(((float *)buf)[i]) == !signbit(want);
        bad = same ? -1 : i;
    }
    /* nothing past the n values was written */
    const size_t es = fm_dtype_size(kd->dt);
    const unsigned char *after = (const unsigned char *)buf + (size_t)n * es;
    int spill = 0;
    for (size_t b = 0; b < es; b++)
        spill |= after[b] != 0xA5;
    CHECK_MSG(bad < 0 && !spill, "%s, %s path, %d threads, %lld values from %lld: value %lld differs from the "
              "scalar functions%s", kd->name, isa_names[isa], threads, (long long)n, (long long)pos,
              (long long)bad, spill ? "; wrote past the end" : "");
}

static void test_isa_paths_match_scalar(void)
{
    static const kind pk[] = {
        {FM_RNG_RAW, FM_U32, "raw"},
        {FM_RNG_UNIFORM, FM_F32, "uniform f32"},
        {FM_RNG_UNIFORM, FM_F64, "uniform f64"},
        {FM_RNG_NORMAL, FM_F32, "normal f32"},
        {FM_RNG_NORMAL, FM_F64, "normal f64"},
        {FM_RNG_LOGNORMAL, FM_F32, "lognormal f32"},
        {FM_RNG_LOGNORMAL, FM_F64, "lognormal f64"},
        {FM_RNG_EXPONENTIAL, FM_F32, "exponential f32"},
        {FM_RNG_EXPONENTIAL, FM_F64, "exponential f64"},
    };
    /* (pos, n): short calls inside one vector, odd heads and tails, many batches, and calls across
     * block 2^32 (the counter's low word carries into the high one inside a vector) */
    static const int64_t cases[][2] = {{0, 1},     {5, 3},       {3, 17},  {13, 10007}, {1, 4 * 64 * 3 + 5},
                                       {64, 4096}, {7, 70001},   {((int64_t)1 << 34) - 37, 301},
                                       {((int64_t)1 << 33) - 21, 203}};
    const int before = fm_rng_simd_isa();
    void *buf = malloc((70001 + 8) * 8);
    for (int isa = FM_RNG_ISA_SCALAR; isa <= FM_RNG_ISA_AVX512; isa++) {
        if (fm_rng_simd_set_isa(isa) < 0) {
            printf("    %s: not on this CPU, not tested here\n", isa_names[isa]);
            continue;
        }
        CHECK(fm_rng_simd_isa() == isa);
        for (size_t k = 0; k < sizeof pk / sizeof pk[0]; k++)
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
                check_portable_kind(&pk[k], isa, c % 2 ? 2 : 1, cases[c][0], cases[c][1], buf);
#ifdef FM_HAVE_CUDA
        curandGenerator_t g = rng_curand_generator(1, 1, 0);
        if (g) { /* curand mode's Philox through this path (test_curand says when there is no libcurand) */
            curandDestroyGenerator(g);
            test_curand_each_kind();
        }
#endif
    }
    free(buf);
    CHECK(fm_rng_simd_set_isa(before) >= 0);
    CHECK(fm_rng_simd_set_isa(7) == -1 && fm_rng_simd_isa() == before);
}

/* Streaming stores (forced on: any size) give the bytes of plain ones, at every alignment of out
 * within a cache line, odd positions and lengths, 1 and 2 threads, in both modes; nothing past
 * the values is written. */
static void test_streaming_stores(void)
{
    static const int64_t cases[][2] = {{0, 1}, {5, 37}, {3, 4099}, {0, 20011}, {7, 40000}};
    unsigned char *plain = malloc(40000 * 8 + 128), *streamed = malloc(40000 * 8 + 128);
    const int before = fm_rng_set_stream_stores(-1);
    for (int mode = FM_RNG_PORTABLE; mode <= FM_RNG_CURAND; mode++)
        for (int k = 0; k < NKINDS; k++) {
            const size_t es = fm_dtype_size(kinds[k].dt);
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
                for (size_t shift = 0; shift < 64; shift += 3 * es) {
                    const stream_state st = {cases[c][0], 0, 0};
                    const int64_t n = cases[c][1];
                    const int threads = 1 + (int)(c % 2);
                    memset(plain, 0xA5, 40000 * 8 + 128), memset(streamed, 0xA5, 40000 * 8 + 128);
                    /* malloc's 16-byte alignment plus shift: every start within a line over the cases */
                    fm_rng_set_stream_stores(0);
                    CHECK_OK(fill(&kinds[k], mode, 77, threads, &st, n, plain + shift));
                    fm_rng_set_stream_stores(1);
                    CHECK_OK(fill(&kinds[k], mode, 77, threads, &st, n, streamed + shift));
                    CHECK_MSG(!memcmp(plain, streamed, 40000 * 8 + 128),
                              "%s mode %d, %lld values from %lld at byte %zu: streamed bytes differ", kinds[k].name,
                              mode, (long long)n, (long long)st.pos, shift);
                }
        }
    fm_rng_set_stream_stores(before);
    free(plain);
    free(streamed);
}

/* ---- bad input ---- */
static fm_status plan_with(const fm_rng_options *o, fm_dtype dt, int ndim, const int64_t *shape,
                           const int64_t *strides)
{
    fm_tensor t;
    fm_tensor_init(&t, NULL, (fm_device){FM_DEVICE_CPU, 0}, dt, ndim, shape, strides);
    fm_plan *plan = NULL;
    fm_status s = fm_rng_plan(ctx, &t, o, &plan);
    fm_plan_release(plan);
    return s;
}

static void test_bad_options(void)
{
    const int64_t n = 16;
    fm_rng_options o;
#define BAD(setup, dt, status, text)                                                                       \
    do {                                                                                                   \
        fm_rng_options_init(&o);                                                                           \
        setup;                                                                                             \
        CHECK_STATUS(plan_with(&o, dt, 1, &n, NULL), status);                                              \
        CHECK_ERROR_MENTIONS(text);                                                                        \
    } while (0)
    BAD(o.distribution = 9, FM_F32, FM_ERR_INVALID_ARGUMENT, "distribution = 9, expected 0 (uniform)");
    BAD(o.distribution = -1, FM_F32, FM_ERR_INVALID_ARGUMENT, "distribution = -1");
    BAD(o.mode = 2, FM_F32, FM_ERR_INVALID_ARGUMENT, "mode = 2, expected 0 (portable) or 1 (curand)");
    BAD((o.mode = FM_RNG_CURAND, o.distribution = FM_RNG_EXPONENTIAL), FM_F32, FM_ERR_NOT_SUPPORTED,
        "mode curand has no exponential");
    BAD(o.reserved[2] = 1, FM_F32, FM_ERR_INVALID_ARGUMENT, "reserved[2] = 1, expected 0");
    BAD(o.low = 1.0, FM_F32, FM_ERR_INVALID_ARGUMENT, "low = 1, high = 1; expected finite low < high");
    BAD(o.high = INFINITY, FM_F64, FM_ERR_INVALID_ARGUMENT, "expected finite low < high");
    BAD(o.low = NAN, FM_F64, FM_ERR_INVALID_ARGUMENT, "expected finite low < high");
    /* a width or parameter that overflows where the fill computes: inf / nan values, not an error, before */
    BAD((o.low = -1e308, o.high = 1e308), FM_F64, FM_ERR_INVALID_ARGUMENT,
        "uniform low = -1e+308, high = 1e+308; expected high - low finite");
    BAD((o.mode = FM_RNG_CURAND, o.low = -1e308, o.high = 1e308), FM_F64, FM_ERR_INVALID_ARGUMENT,
        "expected high - low finite");
    BAD((o.low = 0, o.high = 1e39), FM_F32, FM_ERR_INVALID_ARGUMENT,
        "uniform low = 0, high = 1e+39 for a float32 out; expected low and high - low within float32's range");
    BAD((o.low = -3e38, o.high = 3e38), FM_F32, FM_ERR_INVALID_ARGUMENT, "within float32's range");
    BAD((o.low = 1e39, o.high = 2e39), FM_F32, FM_ERR_INVALID_ARGUMENT, "within float32's range");
    BAD((o.distribution = FM_RNG_NORMAL, o.stddev = 1e39), FM_F32, FM_ERR_INVALID_ARGUMENT,
        "normal mean = 0, stddev = 1e+39 for a float32 out; expected both within float32's range");
    BAD((o.distribution = FM_RNG_LOGNORMAL, o.mean = -1e40), FM_F32, FM_ERR_INVALID_ARGUMENT,
        "lognormal mean = -1e+40");
    BAD((o.distribution = FM_RNG_EXPONENTIAL, o.scale = 1e39), FM_F32, FM_ERR_INVALID_ARGUMENT,
        "exponential scale = 1e+39 for a float32 out");
    BAD((o.distribution = FM_RNG_NORMAL, o.stddev = -1), FM_F32, FM_ERR_INVALID_ARGUMENT,
        "normal stddev (scale) = -1, expected a finite value >= 0");
    BAD((o.distribution = FM_RNG_LOGNORMAL, o.stddev = NAN), FM_F32, FM_ERR_INVALID_ARGUMENT,
        "lognormal stddev (sigma) = nan");
    BAD((o.distribution = FM_RNG_NORMAL, o.mean = INFINITY), FM_F64, FM_ERR_INVALID_ARGUMENT,
        "normal mean (loc) = inf, expected a finite value");
    BAD((o.distribution = FM_RNG_EXPONENTIAL, o.scale = -0.5), FM_F64, FM_ERR_INVALID_ARGUMENT,
        "exponential scale = -0.5, expected a finite value >= 0");
    BAD((o.distribution = FM_RNG_EXPONENTIAL, o.scale = INFINITY), FM_F64, FM_ERR_INVALID_ARGUMENT,
        "exponential scale = inf");
    BAD(o.num_threads = -1, FM_F32, FM_ERR_INVALID_ARGUMENT, "num_threads = -1");
    BAD(o.execution = 5, FM_F32, FM_ERR_INVALID_ARGUMENT, "execution = 5");
    BAD(o.out_ndim = 9, FM_F32, FM_ERR_INVALID_ARGUMENT, "out_ndim = 9, expected -1");
    BAD((o.out_ndim = 1, o.out_shape[0] = 3), FM_F32, FM_ERR_SHAPE, "differs from options.out_shape");
    BAD(o.out_dtype = FM_F64, FM_F32, FM_ERR_DTYPE, "out has dtype float32 but options.out_dtype is float64");
    /* dtypes a distribution does not make */
    BAD(, FM_I32, FM_ERR_DTYPE, "dtype int32 (out's), expected float32 or float64 for uniform");
    BAD(o.distribution = FM_RNG_NORMAL, FM_F16, FM_ERR_DTYPE, "expected float32 or float64 for normal");
    BAD(o.distribution = FM_RNG_RAW, FM_F32, FM_ERR_DTYPE, "dtype float32 (out's), expected uint32 for raw");
    BAD(, FM_U32, FM_ERR_DTYPE, "expected float32 or float64 for uniform");
#undef BAD
    /* a strided out */
    fm_rng_options_init(&o);
    const int64_t shape[2] = {4, 4}, strides[2] = {1, 4};
    CHECK_STATUS(plan_with(&o, FM_F32, 2, shape, strides), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("out has stride 4 on axis 1, expected 1 (a C-contiguous out");
    CHECK_STATUS(fm_rng_plan(ctx, NULL, &o, &(fm_plan *){NULL}), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("out is NULL, expected a tensor descriptor");
}

static void test_bad_exec_args(void)
{
    float buf[8];
    int64_t n = 8;
    fm_tensor t;
    fm_tensor_init(&t, buf, (fm_device){FM_DEVICE_CPU, 0}, FM_F32, 1, &n, NULL);
    for (int mode = 0; mode < 2; mode++) {
        fm_rng_options o;
        fm_rng_options_init(&o);
        o.mode = mode;
        fm_plan *plan = NULL;
        CHECK_OK(fm_rng_plan(ctx, &t, &o, &plan));
        void *ptrs[1] = {buf};
        fm_exec_args a;
        fm_exec_args_init(&a);
        a.ints[0] = -3;
        CHECK_STATUS(fm_plan_execute_args(plan, ptrs, 1, &a, NULL), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("position args.ints[0] = -3, expected >= 0");
        a.ints[0] = INT64_MAX - 3;
        CHECK_STATUS(fm_plan_execute_args(plan, ptrs, 1, &a, NULL), FM_ERR_TOO_LARGE);
        CHECK_ERROR_MENTIONS("passes 2^63 - 1");
        a.ints[0] = 10, a.ints[1] = 4, a.ints[2] = 2;
        CHECK_STATUS(fm_plan_execute_args(plan, ptrs, 1, &a, NULL), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS(mode ? "expected 0 <= ints[1] <= ints[2] <= the position 10" : "expected 0, 0");
        a.ints[1] = 0, a.ints[2] = 0, a.ints[4] = 1;
        CHECK_STATUS(fm_plan_execute_args(plan, ptrs, 1, &a, NULL), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("args.ints[4] = 1, expected 0");
        if (mode) {
            a.ints[4] = 0, a.ints[1] = 4, a.ints[2] = 12;
            CHECK_STATUS(fm_plan_execute_args(plan, ptrs, 1, &a, NULL), FM_ERR_INVALID_ARGUMENT);
            CHECK_ERROR_MENTIONS("[4, 12)");
        }
        fm_plan_release(plan);
    }
}

/* Output specs from the options, the plan cache, a size past 2^31 values (planned, not filled),
 * and the stateless call. */
static void test_specs_cache_stateless(void)
{
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.out_ndim = 3;
    o.out_shape[0] = 1 << 16, o.out_shape[1] = 1 << 16, o.out_shape[2] = 3; /* 3 * 2^32 values */
    const fm_tensor *none[1] = {NULL};
    fm_tensor spec;
    uint32_t written = 0;
    CHECK_OK(fm_output_specs(FM_OP_RNG, none, 1, &o, &spec, &written));
    CHECK(written == 1u && spec.dtype == FM_F64 && spec.ndim == 3 &&
          fm_tensor_numel(&spec) == 3 * (1ll << 32) && spec.strides[0] == 3 << 16 &&
          spec.device.type == FM_DEVICE_CPU);
    o.distribution = FM_RNG_RAW;
    CHECK_OK(fm_output_specs(FM_OP_RNG, none, 1, &o, &spec, &written));
    CHECK(spec.dtype == FM_U32);
    fm_plan *big = NULL;
    spec.data = NULL;
    CHECK_OK(fm_rng_plan(ctx, &spec, &o, &big));
    CHECK(big &&
          fm_test_contains(fm_plan_describe(big), "rng cpu/philox raw u32 mode=portable n=12884901888"));
    fm_plan_release(big);
    fm_rng_options_init(&o);
    CHECK_STATUS(fm_output_specs(FM_OP_RNG, none, 1, &o, &spec, &written), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("out is NULL and options.out_ndim = -1");
    o.out_ndim = 1, o.out_shape[0] = -2;
    CHECK_STATUS(fm_output_specs(FM_OP_RNG, none, 1, &o, &spec, &written), FM_ERR_INVALID_ARGUMENT);

    /* one plan per shape and options, whatever the seed and the position */
    double a[64], b[64];
    int64_t n = 64;
    fm_tensor t;
    fm_tensor_init(&t, a, (fm_device){FM_DEVICE_CPU, 0}, FM_F64, 1, &n, NULL);
    fm_rng_options_init(&o);
    fm_plan *p1 = NULL, *p2 = NULL, *p3 = NULL;
    CHECK_OK(fm_rng_plan(ctx, &t, &o, &p1));
    CHECK_OK(fm_rng_plan(ctx, &t, &o, &p2));
    o.mode = FM_RNG_CURAND;
    CHECK_OK(fm_rng_plan(ctx, &t, &o, &p3));
    CHECK(p1 == p2 && p1 != p3);
    o.mode = FM_RNG_PORTABLE;
    fm_plan_release(p1);
    fm_plan_release(p2);
    fm_plan_release(p3);
    /* fm_rng at a position = the plan executed there */
    CHECK_OK(fm_rng(ctx, &t, &o, 3, 77, NULL));
    stream_state st = {77, 0, 0};
    const kind uni = {FM_RNG_UNIFORM, FM_F64, "uniform f64"};
    CHECK_OK(fill(&uni, FM_RNG_PORTABLE, 3, 0, &st, n, b));
    CHECK(!memcmp(a, b, sizeof a));
    int in_range = 1;
    for (int i = 0; i < 64; i++)
        in_range &= a[i] >= 0 && a[i] < 1;
    CHECK(in_range);
}

int main(void)
{
    if (fm_context_create(&ctx) != FM_OK) {
        fprintf(stderr, "context: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_philox_known_answers);
    RUN_TEST(test_portable_mapping);
    RUN_TEST(test_portable_math_accuracy);
    RUN_TEST(test_portable_fill_matches_scalar);
    RUN_TEST(test_isa_paths_match_scalar);
    RUN_TEST(test_isa_lognormal_extremes);
    RUN_TEST(test_thread_invariance);
    RUN_TEST(test_streaming_stores);
    RUN_TEST(test_offsets_compose);
    RUN_TEST(test_curand);
    RUN_TEST(test_bad_options);
    RUN_TEST(test_bad_exec_args);
    RUN_TEST(test_specs_cache_stateless);
    fm_context_destroy(ctx);
    TEST_MAIN_RETURN();
}
