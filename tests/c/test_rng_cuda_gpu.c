/* test_rng_cuda_gpu.c : the GPU RNG backends on a GPU (one batch run on the GPU machine).
 *  - portable mode ("rngkernel"): GPU vs the CPU backend bit for bit, every kind and dtype, odd
 *    positions and lengths, out at every element offset from a 16-byte boundary, 2^31 + 3 uint32
 *    values, one kernel launch per fill (a captured graph has one node);
 *  - curand mode ("curand"): vs libcurand's device generator (same seed and offset, the calls made
 *    on it in a row) bit for bit for every kind, f64 runs and the 32-bit calls after them included;
 *    device normals vs the host generator (curandCreateGeneratorHost): the max ulp difference
 *    reported ("MEASURED") and bounded;
 *  - one plan executed from 8 host threads on their own streams at once; a host out staged.
 * Failures say what differed: the first mismatching index, both values and their ulp distance. */
#include "rng_test_util.h"
#include "internal.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include <cuda_runtime.h>

static fm_context *ctx;

#define NKINDS RNG_NKINDS
#define NCURAND RNG_NCURAND

static void opts_for(fm_rng_options *o, const kind *k, int mode, int execution)
{
    fm_rng_options_init(o);
    o->distribution = k->dist, o->mode = mode, o->execution = execution;
    if (k->dist == FM_RNG_UNIFORM && mode == FM_RNG_PORTABLE)
        o->low = -2.5, o->high = 3.25;
    if (k->dist == FM_RNG_NORMAL || k->dist == FM_RNG_LOGNORMAL)
        o->mean = 0.25, o->stddev = 1.5;
    if (k->dist == FM_RNG_EXPONENTIAL)
        o->scale = 2.0;
}

/* ulp distance of two values of dtype dt (0 for equal bits) */
static double ulps(fm_dtype dt, const void *a, const void *b)
{
    if (dt == FM_F64) {
        int64_t x, y;
        memcpy(&x, a, 8), memcpy(&y, b, 8);
        x = x < 0 ? INT64_MIN - x : x, y = y < 0 ? INT64_MIN - y : y;
        return fabs((double)x - (double)y);
    }
    int32_t x, y;
    memcpy(&x, a, 4), memcpy(&y, b, 4);
    if (dt == FM_U32)
        return x == y ? 0 : 1;
    x = x < 0 ? INT32_MIN - x : x, y = y < 0 ? INT32_MIN - y : y;
    return fabs((double)x - (double)y);
}

static double value(fm_dtype dt, const void *p)
{
    if (dt == FM_F64)
        return *(const double *)p;
    if (dt == FM_F32)
        return *(const float *)p;
    return *(const uint32_t *)p;
}

/* The first index where want and got differ (-1: none); prints it with both values and ulps. */
static int64_t first_mismatch(const char *what, fm_dtype dt, const void *want, const void *got, int64_t n)
{
    const size_t es = fm_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        const char *w = (const char *)want + i * es, *g = (const char *)got + i * es;
        if (memcmp(w, g, es) == 0)
            continue;
        fprintf(stderr, "%s: first mismatch at index %lld of %lld: want %.17g got %.17g (%.0f ulp)\n", what,
                (long long)i, (long long)n, value(dt, w), value(dt, g), ulps(dt, w, g));
        return i;
    }
    return -1;
}

static fm_status fill(const kind *k, int mode, int execution, fm_device dev, void *buf, int64_t n, uint64_t seed,
                      int64_t pos, int64_t run_a, int64_t run_b, void *stream)
{
    fm_rng_options o;
    opts_for(&o, k, mode, execution);
    return rng_fill_at(ctx, &o, dev, k->dt, buf, n, seed, pos, run_a, run_b, stream);
}

static const fm_device CPU = {FM_DEVICE_CPU, 0}, GPU = {FM_DEVICE_CUDA, 0};

/* GPU values of k at (seed, pos) into host memory; out at byte offset `mis` into a device buffer */
static fm_status gpu_values(const kind *k, int mode, int64_t n, uint64_t seed, int64_t pos, int64_t run_a,
                            int64_t run_b, size_t mis, void *host)
{
    const size_t bytes = (size_t)n * fm_dtype_size(k->dt);
    char *d = NULL;
    if (cudaMalloc((void **)&d, bytes + 64) != cudaSuccess)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "cudaMalloc of %zu bytes", bytes + 64);
    cudaMemset(d, 0xA5, bytes + 64);
    fm_status s = fill(k, mode, FM_EXECUTION_AUTO, GPU, d + mis, n, seed, pos, run_a, run_b, NULL);
    if (s == FM_OK && cudaMemcpy(host, d + mis, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        s = fm_fail(FM_ERR_BACKEND, "cudaMemcpy back");
    unsigned char tail[16];
    if (s == FM_OK && cudaMemcpy(tail, d + mis + bytes, 16, cudaMemcpyDeviceToHost) == cudaSuccess)
        for (int i = 0; i < 16; i++)
            if (tail[i] != 0xA5)
                s = fm_fail(FM_ERR_INTERNAL, "the fill wrote past out's end (byte %d after it)", i);
    cudaFree(d);
    return s;
}

/* ---- portable mode: the GPU kernel against the CPU backend ---- */
static void test_portable_vs_cpu(void)
{
    static const int64_t positions[] = {0, 1, 2, 3, 5, 4097, ((int64_t)1 << 40) + 3};
    static const int64_t lens[] = {1, 2, 3, 7, 1000, 65537, (1 << 20) + 5, 10000019};
    for (int ki = 0; ki < NKINDS; ki++)
        for (size_t pi = 0; pi < sizeof positions / sizeof positions[0]; pi++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const kind *k = &kinds[ki];
                const int64_t n = lens[li], pos = positions[pi];
                const size_t es = fm_dtype_size(k->dt);
                const uint64_t seed = 0x0123456789ABCDEFull ^ (pi << 20 | li);
                char *want = malloc((size_t)n * es), *got = malloc((size_t)n * es);
                CHECK_OK(fill(k, FM_RNG_PORTABLE, FM_EXECUTION_CPU, CPU, want, n, seed, pos, 0, 0, NULL));
                for (size_t mis = 0; mis < 16; mis += es) {
                    if (n > 100000 && mis != es) /* the large ones at one misalignment */
                        continue;
                    CHECK_OK(gpu_values(k, FM_RNG_PORTABLE, n, seed, pos, 0, 0, mis, got));
                    char what[128];
                    snprintf(what, sizeof what, "portable %s pos %lld n %lld out+%zu", k->name, (long long)pos,
                             (long long)n, mis);
                    CHECK_MSG(first_mismatch(what, k->dt, want, got, n) < 0, "%s: GPU differs from the CPU", what);
                }
                free(want);
                free(got);
            }
}

/* 2^31 + 3 uint32 values (8 GiB): 64-bit indices all the way */
static void test_portable_large(void)
{
    const int64_t n = ((int64_t)1 << 31) + 3;
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    if (free_b < (size_t)n * 4 + ((size_t)1 << 30)) {
        SKIP("%zu bytes of device memory free: not enough for 2^31 + 3 uint32", free_b);
        CHECK(1);
        return;
    }
    uint32_t *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    if (!want || !got) {
        SKIP("not enough host memory for 2 x 8 GiB");
        CHECK(1);
        free(want), free(got);
        return;
    }
    const kind *k = &kinds[0];
    CHECK_OK(fill(k, FM_RNG_PORTABLE, FM_EXECUTION_CPU, CPU, want, n, 77, 5, 0, 0, NULL));
    CHECK_OK(gpu_values(k, FM_RNG_PORTABLE, n, 77, 5, 0, 0, 0, got));
    CHECK_MSG(first_mismatch("portable raw 2^31 + 3 at 5", FM_U32, want, got, n) < 0, "large fill differs");
    free(want);
    free(got);
}

/* A fill is one kernel: captured into a graph, it is one node. */
static void test_one_launch(void)
{
    for (int ki = 0; ki < NKINDS; ki++) {
        const kind *k = &kinds[ki];
        const int64_t n = 1000003;
        void *d = NULL;
        CHECK(cudaMalloc(&d, (size_t)n * 8) == cudaSuccess);
        fm_rng_options o;
        opts_for(&o, k, FM_RNG_PORTABLE, FM_EXECUTION_AUTO);
        fm_tensor t;
        fm_tensor_init(&t, d, GPU, k->dt, 1, &n, NULL);
        fm_plan *p = NULL;
        CHECK_OK(fm_rng_plan(ctx, &t, &o, &p));
        CHECK_MSG(p && strstr(fm_plan_describe(p), "rngkernel"), "%s: %s", k->name, p ? fm_plan_describe(p) : "");
        cudaStream_t st;
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        fm_exec_args a;
        fm_exec_args_init(&a);
        a.ints[0] = 3, a.ints[3] = 9;
        void *ptrs[1] = {d};
        cudaGraph_t g = NULL;
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        fm_status s = fm_plan_execute_args(p, ptrs, 1, &a, st);
        CHECK(cudaStreamEndCapture(st, &g) == cudaSuccess);
        CHECK_OK(s);
        size_t nodes = 0;
        if (g)
            cudaGraphGetNodes(g, NULL, &nodes);
        CHECK_MSG(nodes == 1, "%s: the fill is %zu graph nodes, expected one kernel launch", k->name, nodes);
        if (g)
            cudaGraphDestroy(g);
        cudaStreamDestroy(st);
        fm_plan_release(p);
        cudaFree(d);
    }
}

/* ---- curand mode: against libcurand's device generator ---- */
/* The device generator used in a row vs fusemath's curand mode call by call (its own per-call
 * arguments), bit for bit; lengths even where curand needs them (normals). */
static void curand_sequence(uint64_t seed, int64_t offset, const int *ids, const int64_t *lens, int ncalls)
{
    curandGenerator_t g = rng_curand_generator(0, seed, (uint64_t)offset);
    CHECK_MSG(g != NULL, "libcurand's device generator could not be created");
    int64_t pos = offset, ra = 0, rb = 0;
    for (int c = 0; g && c < ncalls; c++) {
        const kind *k = &kinds[ids[c]];
        const int64_t n = lens[c];
        const size_t bytes = (size_t)n * fm_dtype_size(k->dt);
        void *d = NULL;
        char *want = malloc(bytes), *got = malloc(bytes);
        CHECK(cudaMalloc(&d, bytes) == cudaSuccess);
        CHECK_MSG(rng_curand_generate(g, k, n, d) == CURAND_STATUS_SUCCESS, "device curand %s of %lld failed", k->name,
                  (long long)n);
        cudaMemcpy(want, d, bytes, cudaMemcpyDeviceToHost);
        CHECK_OK(gpu_values(k, FM_RNG_CURAND, n, seed, pos, ra, rb, 0, got));
        char what[160];
        snprintf(what, sizeof what, "curand %s n %lld at %lld (f64 run [%lld, %lld)) vs the device generator",
                 k->name, (long long)n, (long long)pos, (long long)ra, (long long)rb);
        CHECK_MSG(first_mismatch(what, k->dt, want, got, n) < 0, "%s", what);
        if (k->dt == FM_F64)
            ra == rb ? (ra = pos, rb = pos + n) : (rb = pos + n);
        pos += n;
        free(want), free(got);
        cudaFree(d);
    }
    if (g)
        curandDestroyGenerator(g);
}

static void test_curand_vs_device(void)
{
    static const int64_t offsets[] = {0, 1, 3, 262141, ((int64_t)1 << 40) + 3};
    static const int64_t lens[] = {2, 1000, 262150, 4000002};
    for (int ki = 0; ki < NCURAND; ki++)
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++)
            for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
                const int id[1] = {ki};
                curand_sequence(0x9E3779B97F4A7C15ull + o, offsets[o], id, &lens[l], 1);
            }
    /* calls in a row: f64 runs longer than a round of 65536 groups, then 32-bit calls */
    const int ids1[7] = {2, 4, 6, 1, 0, 3, 5};
    const int64_t lens1[7] = {600001, 262146, 14, 1000, 1000003, 1002, 262144};
    curand_sequence(7, 3, ids1, lens1, 7);
    const int ids2[6] = {1, 0, 2, 4, 1, 5};
    const int64_t lens2[6] = {101, 6, 262149, 1000, 77, 262144};
    curand_sequence(11, 65536 * 4 * 3 + 1, ids2, lens2, 6);
}

/* Device normals vs the host generator: how far CUDA's __sincosf / sincospi / logf take them. */
static void test_curand_device_vs_host(void)
{
    const int64_t n = 1 << 22;
    for (int ki = 3; ki < NCURAND; ki++) {
        const kind *k = &kinds[ki];
        const size_t es = fm_dtype_size(k->dt), bytes = (size_t)n * es;
        curandGenerator_t h = rng_curand_generator(1, 1234, 5);
        char *want = malloc(bytes), *got = malloc(bytes);
        CHECK(h && rng_curand_generate(h, k, n, want) == CURAND_STATUS_SUCCESS);
        CHECK_OK(gpu_values(k, FM_RNG_CURAND, n, 1234, 5, 0, 0, 0, got));
        double max_ulp = 0, max_rel = 0;
        int64_t differ = 0, at = -1;
        for (int64_t i = 0; i < n; i++) {
            const double u = ulps(k->dt, want + i * es, got + i * es);
            const double w = value(k->dt, want + i * es), g = value(k->dt, got + i * es);
            const double rel = fabs(w - g) / fmax(1.0, fabs(w));
            differ += u != 0;
            if (u > max_ulp)
                max_ulp = u, at = i;
            max_rel = fmax(max_rel, rel);
        }
        printf("MEASURED curand %s device vs host generator: %lld of %lld differ, max %.0f ulp (at %lld), max "
               "|diff| / max(1, |host|) %.3g\n", k->name, (long long)differ, (long long)n, max_ulp, (long long)at,
               max_rel);
        /* __sincosf's absolute error is ~2^-21.4 on [-pi, pi] (more up to 2 pi) times r <= 6.7: ~7e-6 of z,
         * and lognormal's exp(z * 1.5 + mean) multiplies that relative error by 1.5: f32 within 4e-5
         * relative to max(1, |host|); sincospi against sin(v * pi) in double within 1e-13 */
        const double bound = k->dt == FM_F64 ? 1e-13 : 4e-5;
        CHECK_MSG(max_rel <= bound, "%s: device normals differ from the host's by %.3g relative, bound %.3g",
                  k->name, max_rel, bound);
        if (h)
            curandDestroyGenerator(h);
        free(want), free(got);
    }
}

static void test_curand_refusals(void)
{
    void *d = NULL;
    int64_t n = 16;
    CHECK(cudaMalloc(&d, 256) == cudaSuccess);
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.mode = FM_RNG_CURAND, o.low = 1, o.high = 2;
    fm_tensor t;
    fm_tensor_init(&t, d, GPU, FM_F32, 1, &n, NULL);
    fm_plan *p = NULL;
    CHECK(fm_rng_plan(ctx, &t, &o, &p) == FM_ERR_NOT_SUPPORTED && !p);
    CHECK_ERROR_MENTIONS("(0, 1] only");
    o.low = 0, o.high = 1, o.distribution = FM_RNG_EXPONENTIAL;
    CHECK(fm_rng_plan(ctx, &t, &o, &p) == FM_ERR_NOT_SUPPORTED && !p);
    CHECK_ERROR_MENTIONS("no exponential");
    /* curand normals come in pairs: an out one float off a pair is refused at execute, nothing written */
    o.distribution = FM_RNG_NORMAL;
    fm_tensor_init(&t, (char *)d + 4, GPU, FM_F32, 1, &n, NULL);
    CHECK_OK(fm_rng_plan(ctx, &t, &o, &p));
    fm_exec_args a;
    fm_exec_args_init(&a);
    void *ptrs[1] = {(char *)d + 4};
    CHECK(p && fm_plan_execute_args(p, ptrs, 1, &a, NULL) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("not aligned to 8 bytes");
    fm_plan_release(p);
    cudaFree(d);
}

/* ---- one plan from several host threads, each on its own stream ---- */
typedef struct thread_job {
    fm_plan *plan;
    const kind *k;
    int mode;
    int64_t n, pos;
    const char *want; /* the CPU's values at pos */
    int ok;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    const size_t bytes = (size_t)j->n * fm_dtype_size(j->k->dt);
    void *d = NULL;
    char *got = malloc(bytes);
    j->ok = cudaMalloc(&d, bytes) == cudaSuccess && got;
    for (int rep = 0; rep < 20 && j->ok; rep++) {
        fm_exec_args a;
        fm_exec_args_init(&a);
        a.ints[0] = j->pos, a.ints[3] = 4242;
        void *ptrs[1] = {d};
        j->ok = fm_plan_execute_args(j->plan, ptrs, 1, &a, st) == FM_OK &&
                cudaMemcpyAsync(got, d, bytes, cudaMemcpyDeviceToHost, st) == cudaSuccess &&
                cudaStreamSynchronize(st) == cudaSuccess &&
                first_mismatch("threads", j->k->dt, j->want, got, j->n) < 0;
    }
    cudaFree(d);
    free(got);
    cudaStreamDestroy(st);
    return NULL;
}

static void test_threads(void)
{
    const int64_t n = 300007;
    for (int mode = 0; mode < 2; mode++) {
        const kind *k = &kinds[mode == 0 ? 3 : 2]; /* normal f32 portable, uniform f64 curand */
        const size_t bytes = (size_t)n * fm_dtype_size(k->dt);
        void *d = NULL;
        CHECK(cudaMalloc(&d, bytes) == cudaSuccess);
        fm_rng_options o;
        opts_for(&o, k, mode, FM_EXECUTION_AUTO);
        fm_tensor t;
        fm_tensor_init(&t, d, GPU, k->dt, 1, &n, NULL);
        fm_plan *p = NULL;
        CHECK_OK(fm_rng_plan(ctx, &t, &o, &p));
        thread_job jobs[8];
        pthread_t th[8];
        char *want[8];
        for (int i = 0; i < 8; i++) {
            want[i] = malloc(bytes);
            CHECK_OK(fill(k, mode, FM_EXECUTION_CPU, CPU, want[i], n, 4242, 1000003 * i + i, 0, 0, NULL));
            jobs[i] = (thread_job){.plan = p, .k = k, .mode = mode, .n = n, .pos = 1000003 * i + i, .want = want[i]};
        }
        for (int i = 0; i < 8; i++)
            pthread_create(&th[i], NULL, thread_main, &jobs[i]);
        for (int i = 0; i < 8; i++) {
            pthread_join(th[i], NULL);
            CHECK_MSG(jobs[i].ok, "mode %d thread %d: a wrong or failed fill", mode, i);
            free(want[i]);
        }
        fm_plan_release(p);
        cudaFree(d);
    }
}

/* execution = cuda with a host out: staged (computed on the GPU, copied back), the CPU's values */
static void test_staged_host_out(void)
{
    const int64_t n = 100003;
    for (int ki = 0; ki < NKINDS; ki++) {
        const kind *k = &kinds[ki];
        const size_t bytes = (size_t)n * fm_dtype_size(k->dt);
        char *want = malloc(bytes), *got = malloc(bytes);
        CHECK_OK(fill(k, FM_RNG_PORTABLE, FM_EXECUTION_CPU, CPU, want, n, 3, 17, 0, 0, NULL));
        CHECK_OK(fill(k, FM_RNG_PORTABLE, FM_EXECUTION_CUDA, CPU, got, n, 3, 17, 0, 0, NULL));
        char what[96];
        snprintf(what, sizeof what, "staged %s", k->name);
        CHECK_MSG(first_mismatch(what, k->dt, want, got, n) < 0, "%s", what);
        free(want), free(got);
    }
}

GPU_TEST_MAIN(&ctx, test_portable_vs_cpu, test_one_launch, test_curand_vs_device, test_curand_device_vs_host,
              test_curand_refusals, test_threads, test_staged_host_out, test_portable_large)
#else
TEST_MAIN_SKIPPED("built without CUDA")
#endif
