/* test_rng_curand_replay.c : the curand backend's call (backends/cuda/curand_rng.c, fm_curand_call)
 * on libcurand's host generator, which needs no GPU and follows the same stream as the device
 * generator (../shared/RNG-PHILOX.md): each call made on a freshly positioned generator from the
 * per-call arguments alone (position, the run of f64 calls, seed) must give the bytes one
 * generator gives when the same calls are made on it in a row, the shift of the f64 calls included
 * (runs and gaps longer than the replay's round of 65536 groups, odd offsets and lengths). Odd-
 * length normals, which libcurand refuses, against the CPU backend's curand mode. */
#include "rng_test_util.h"

#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include "cuda/curand_rng.h"

static fm_status host_copy(void *dst, const void *src, size_t bytes, void *ctx)
{
    (void)ctx;
    memcpy(dst, src, bytes);
    return FM_OK;
}

static fm_curand_kind kind_of(const kind *k)
{
    return (fm_curand_kind){.distribution = k->dist, .dtype = k->dt, .mean = 0.25, .stddev = 1.5};
}

/* The CPU backend's curand mode for the call into out (an independent derivation of the state: the
 * subsequence counters in uint64, backends/cpu/philox_rng.c) */
static void cpu_fill(fm_context *ctx, const kind *k, int64_t n, const fm_exec_args *a, void *out)
{
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = k->dist, o.mode = FM_RNG_CURAND, o.mean = 0.25, o.stddev = 1.5;
    o.execution = FM_EXECUTION_CPU;
    fm_tensor t;
    fm_tensor_init(&t, out, (fm_device){FM_DEVICE_CPU, 0}, k->dt, 1, &n, NULL);
    fm_plan *p = NULL;
    CHECK_OK(fm_rng_plan(ctx, &t, &o, &p));
    void *ptrs[1] = {out};
    CHECK_OK(fm_plan_execute_args(p, ptrs, 1, a, NULL));
    fm_plan_release(p);
}

static int64_t first_mismatch(const char *x, const char *y, int64_t n, size_t es)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(x + i * es, y + i * es, es))
            return i;
    return -1;
}

/* One generator making the calls in a row from offset `truth_offset` (the state the calls' arguments
 * describe: position pos, the run of f64 calls [run_a, run_b)) against a fresh one per call,
 * positioned by fm_curand_call, and against the CPU backend's curand mode. */
static void compare_from(uint64_t seed, uint64_t truth_offset, int64_t pos, int64_t run_a, int64_t run_b,
                         const int *ids, const int64_t *lens, int ncalls)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    curandGenerator_t truth = rng_curand_generator(1, seed, truth_offset), fresh = rng_curand_generator(1, 1, 0);
    CHECK_MSG(truth && fresh, "libcurand's host generator could not be created");
    for (int c = 0; ctx && truth && fresh && c < ncalls; c++) {
        const kind *k = &kinds[ids[c]];
        const fm_curand_kind ck = kind_of(k);
        const size_t es = fm_dtype_size(k->dt), bytes = (size_t)lens[c] * es;
        fm_exec_args a;
        fm_exec_args_init(&a);
        a.ints[0] = pos, a.ints[1] = run_a, a.ints[2] = run_b, a.ints[3] = (int64_t)seed;
        char *want = malloc(bytes), *got = malloc(bytes), *cpu = malloc(bytes);
        void *scratch = malloc(fm_curand_scratch_bytes(&ck, lens[c], &a) + 16);
        CHECK_MSG(rng_curand_generate(truth, k, lens[c], want) == CURAND_STATUS_SUCCESS, "curand %s of %lld failed",
                  k->name, (long long)lens[c]);
        CHECK_OK(fm_curand_call(fresh, &ck, lens[c], &a, got, scratch, host_copy, NULL));
        cpu_fill(ctx, k, lens[c], &a, cpu);
        const int64_t first = first_mismatch(want, got, lens[c], es), first_cpu = first_mismatch(want, cpu, lens[c], es);
        CHECK_MSG(first < 0 && first_cpu < 0, "seed %llx offset %llu, call %d (%s of %lld at %lld, f64 run [%lld, "
                  "%lld)): first mismatch at value %lld (fm_curand_call), %lld (cpu; -1: none)",
                  (unsigned long long)seed, (unsigned long long)truth_offset, c, k->name, (long long)lens[c],
                  (long long)pos, (long long)run_a, (long long)run_b, (long long)first, (long long)first_cpu);
        if (k->dt == FM_F64) { /* the caller's bookkeeping, as fusemath.random's */
            if (run_a == run_b)
                run_a = pos, run_b = pos + lens[c];
            else
                run_b = pos + lens[c]; /* the sequences below only continue a run or end there */
        }
        pos += lens[c];
        free(want);
        free(got);
        free(cpu);
        free(scratch);
    }
    if (truth)
        curandDestroyGenerator(truth);
    if (fresh)
        curandDestroyGenerator(fresh);
    fm_context_destroy(ctx);
}

/* calls from offset, no run before them: the generator in a row is the truth */
static void compare_sequence(uint64_t seed, int64_t offset, const int *ids, const int64_t *lens, int ncalls)
{
    compare_from(seed, (uint64_t)offset, offset, 0, 0, ids, lens, ncalls);
}

static void test_sequences(void)
{
    /* a run longer than two rounds, continued, then 32-bit calls past a gap of several rounds */
    const int ids1[7] = {2, 4, 1, 0, 3, 5, 0};
    const int64_t lens1[7] = {600001, 262146, 1000, 1000003, 1002, 78, 5};
    compare_sequence(7, 3, ids1, lens1, 7);
    /* 32-bit calls, a run of three kinds, 32-bit again */
    const int ids2[7] = {0, 1, 2, 6, 4, 1, 3};
    const int64_t lens2[7] = {101, 6, 262149 * 3, 1000, 14, 262144 * 2 + 5, 262144};
    compare_sequence(11, 65536 * 4 * 3 + 1, ids2, lens2, 7);
    /* one round exactly, from a position past 2^40 */
    const int ids3[4] = {2, 1, 0, 5};
    const int64_t lens3[4] = {262144, 262144, 3, 4};
    compare_sequence(0x9E3779B97F4A7C15ull, ((int64_t)1 << 40) + 2, ids3, lens3, 4);
    /* a short run ending inside a group, then 32-bit calls (gap < one round) */
    const int ids4[5] = {4, 2, 0, 1, 3};
    const int64_t lens4[5] = {2, 7, 9, 262141, 10};
    compare_sequence(5, 1, ids4, lens4, 5);
}

/* Positions near and past 2^62, where the replay's shifts (up to twice the position) pass 2^63: the
 * truth is libcurand's host generator itself. A run of f64 calls [a, b) with a and b multiples of
 * R = 262144 (whole rounds of 65536 groups) moves every subsequence's counter by the same (b - a) / R,
 * which is the state of a generator whose offset is set (b - a) further (../shared/RNG-PHILOX.md:
 * the offset sets counter[s] to the groups of s below it; a double call adds 2 per group, a 32-bit
 * call 1): that generator, making the same calls in a row, gives the values of runs and gaps of
 * 2^62 positions that no test could generate. */
static void test_large_positions(void)
{
    const int64_t R = FM_CURAND_ROUND, P62 = (int64_t)1 << 62;
    /* in a row from just past 2^62: a short run, continued, then 32-bit calls */
    const int ids1[6] = {4, 2, 0, 1, 3, 5};
    const int64_t lens1[6] = {1002, 262147, 9, 1001, 78, 6};
    compare_sequence(0xD1B54A32D192ED03ull, P62 + 3, ids1, lens1, 6);
    /* a run [0, 2^62) (2^44 rounds; the replay's first shift is 2^63), continued by this call, then
     * 32-bit calls past it */
    const int ids2[5] = {2, 6, 0, 1, 5};
    const int64_t lens2[5] = {1001, 2, 262147, 5, 10};
    compare_from(77, (uint64_t)P62 * 2, P62, 0, P62, ids2, lens2, 5);
    /* a run of 2^62 - 4R positions from R, then a gap of 2^61 + 7777 32-bit values (pos past 2^62 +
     * 2^61, the shifts past 2^63 + 2^61), then 32-bit calls and one f64 call after the gap */
    const int64_t a3 = R, b3 = R + P62 - 4 * R, pos3 = b3 + ((int64_t)1 << 61) + 7777;
    const int ids3[5] = {0, 3, 1, 5, 4};
    const int64_t lens3[5] = {5, 1002, 262149, 8, 1000};
    compare_from(0x9E3779B97F4A7C15ull, (uint64_t)pos3 + (uint64_t)(b3 - a3), pos3, a3, b3, ids3, lens3, 5);
    /* the largest positions: a call ending at 2^63 - 1 after a run of all but the last rounds */
    const int64_t b4 = (INT64_MAX / R - 1) * R, pos4 = INT64_MAX - 1000;
    const int ids4[1] = {1};
    const int64_t lens4[1] = {1000};
    compare_from(3, (uint64_t)pos4 + (uint64_t)b4, pos4, 0, b4, ids4, lens4, 1);
}

/* Odd-length normals (libcurand refuses them) against the CPU backend's curand mode. */
static void test_odd_normals(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    curandGenerator_t g = rng_curand_generator(1, 1, 0);
    CHECK(g != NULL);
    static const int64_t states[][3] = {{0, 0, 0}, {5, 0, 0}, {700001, 3, 600003}, {1000000, 1, 2}};
    static const int64_t lens[] = {1, 3, 1001};
    for (int kk = 3; g && ctx && kk < 7; kk++)
        for (size_t si = 0; si < sizeof states / sizeof states[0]; si++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const kind *k = &kinds[kk];
                const fm_curand_kind ck = kind_of(k);
                const int64_t n = lens[li];
                const size_t es = fm_dtype_size(k->dt);
                fm_exec_args a;
                fm_exec_args_init(&a);
                a.ints[0] = states[si][0], a.ints[1] = states[si][1], a.ints[2] = states[si][2], a.ints[3] = 99;
                char *want = malloc((size_t)n * es), *got = malloc((size_t)n * es);
                void *scratch = malloc(fm_curand_scratch_bytes(&ck, n, &a) + 16);
                CHECK_OK(fm_curand_call(g, &ck, n, &a, got, scratch, host_copy, NULL));
                cpu_fill(ctx, k, n, &a, want);
                int64_t first = -1;
                for (int64_t i = 0; i < n && first < 0; i++)
                    if (memcmp(want + i * es, got + i * es, es))
                        first = i;
                CHECK_MSG(first < 0, "%s n %lld at %lld run [%lld, %lld): first mismatch at %lld", k->name,
                          (long long)n, (long long)a.ints[0], (long long)a.ints[1], (long long)a.ints[2],
                          (long long)first);
                free(want);
                free(got);
                free(scratch);
            }
    if (g)
        curandDestroyGenerator(g);
    fm_context_destroy(ctx);
}
/* libcurand's bad status comes back as a fusemath status naming the curand status and the call */
static void test_curand_status(void)
{
    const fm_curand_kind ck = kind_of(&kinds[1]);
    fm_exec_args a;
    fm_exec_args_init(&a);
    float buf[4];
    CHECK(fm_curand_call(NULL, &ck, 4, &a, buf, NULL, host_copy, NULL) == FM_ERR_BACKEND);
    CHECK_ERROR_MENTIONS("CURAND_STATUS_NOT_INITIALIZED");
    CHECK_ERROR_MENTIONS("curandSetPseudoRandomGeneratorSeed");
}
#endif

int main(void)
{
#ifdef FM_HAVE_CUDA
    curandGenerator_t g = NULL;
    if (curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10) != CURAND_STATUS_SUCCESS) {
        SKIP("libcurand's host generator could not be created");
        CHECK(1);
        TEST_MAIN_RETURN();
    }
    curandDestroyGenerator(g);
    RUN_TEST(test_sequences);
    RUN_TEST(test_large_positions);
    RUN_TEST(test_odd_normals);
    RUN_TEST(test_curand_status);
#else
    SKIP("built without the CUDA toolkit: no libcurand");
    CHECK(1);
#endif
    TEST_MAIN_RETURN();
}
