/* curand_rng.c : the "curand" backend, curand-mode RNG fills on CUDA devices through libcurand's
 * generator API (CURAND_RNG_PSEUDO_PHILOX4_32_10): the device generator's own output, on the
 * caller's stream, with the seed and offset set per call (the plan holds neither).
 *
 * Generators: a generator object is mutable (stream, seed, offset), a plan is not. The context's
 * backend state keeps a pool of generators per device; a call leases one from its
 * curandSetStream to its last curandGenerate* (so no two threads ever set and use one generator
 * at once), preferring the one last used on the same stream; one last used on another stream is
 * ordered after that work (cudaStreamWaitEvent on the event recorded at its release), in case
 * libcurand keeps device-side state between launches. Creating a generator per call was not
 * chosen: curandCreateGenerator allocates device memory and initialises the generator (a device
 * synchronisation), where a fill is asynchronous and can take microseconds.
 *
 * The run of f64 calls (args.ints[1..2], ../shared/RNG-PHILOX.md): cuRAND's double calls advance
 * each subsequence's counter by two blocks per group, a shift the later calls inherit, which no
 * offset reproduces. It is replayed: offset a', one double call of length b'' - a' into a scratch,
 * one 32-bit call of p'' - b'' into it, then this call at p''. Shifting the run's start, its end and
 * this call by whole rounds of 65536 groups (R = 262144 positions; every subsequence's counter
 * moves by one block per round) leaves every value the same (derivation in docs/design.md), so
 * the replay is at most R - 1 doubles and R - 1 words (3 MB of writes, two extra launches) however
 * long the run and the gap were. Normals of odd length (libcurand refuses them): n - 1 values into
 * out, then a call of 2 into the scratch and its first value copied: the values the CPU backend
 * gives (calls compose). */
#include "curand_rng.h"
#include "cuda_nvtx.h"
#include "cuda_workspace.h"
#include "internal.h"

#include <cuda_runtime.h>
#include <curand.h>
#include <pthread.h>
#include <stdlib.h>

#define POOL_SLOTS 32
#define ROUND FM_CURAND_ROUND

typedef struct gen_slot {
    int used, busy, device;
    cudaStream_t stream; /* the stream of its last use */
    curandGenerator_t g;
    cudaEvent_t done; /* recorded on that stream at release */
} gen_slot;

typedef struct gen_pool {
    pthread_mutex_t lock;
    gen_slot slots[POOL_SLOTS];
} gen_pool;

static const char *curand_name(curandStatus_t s)
{
    switch (s) {
    case CURAND_STATUS_SUCCESS: return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_VERSION_MISMATCH: return "CURAND_STATUS_VERSION_MISMATCH";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE: return "CURAND_STATUS_LENGTH_NOT_MULTIPLE";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED: return "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "CURAND_STATUS_PREEXISTING_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH";
    case CURAND_STATUS_INTERNAL_ERROR: return "CURAND_STATUS_INTERNAL_ERROR";
    default: return "an unknown curandStatus_t";
    }
}

/* libcurand's status as fusemath's, the curand name in the message */
static fm_status curand_fail(curandStatus_t s, const char *what)
{
    (void)cudaGetLastError();
    fm_status f = FM_ERR_BACKEND;
    if (s == CURAND_STATUS_ALLOCATION_FAILED)
        f = FM_ERR_OUT_OF_MEMORY;
    else if (s == CURAND_STATUS_INITIALIZATION_FAILED || s == CURAND_STATUS_VERSION_MISMATCH ||
             s == CURAND_STATUS_ARCH_MISMATCH)
        f = FM_ERR_UNAVAILABLE;
    else if (s == CURAND_STATUS_LENGTH_NOT_MULTIPLE || s == CURAND_STATUS_OUT_OF_RANGE)
        f = FM_ERR_INVALID_ARGUMENT;
    return fm_fail(f, "rng cuda/curand: %s: %s (%d)", what, curand_name(s), (int)s);
}
#define CURAND_DO(call, what)                                                                                     \
    do {                                                                                                          \
        curandStatus_t cs_ = (call);                                                                              \
        if (cs_ != CURAND_STATUS_SUCCESS)                                                                         \
            return curand_fail(cs_, what);                                                                        \
    } while (0)

/* ---- the pool ---- */
static fm_status curand_probe(const fm_settings *settings, void **state, const char **why)
{
    (void)settings;
    if (fm_cuda_probe_device_count() < 1) {
        *why = "no CUDA device (no GPU or no driver)";
        return FM_ERR_UNAVAILABLE;
    }
    gen_pool *pool = calloc(1, sizeof *pool);
    if (!pool) {
        *why = "out of host memory";
        return FM_ERR_UNAVAILABLE;
    }
    pthread_mutex_init(&pool->lock, NULL);
    *state = pool;
    return FM_OK;
}

static void slot_free(gen_slot *sl)
{
    if (sl->g)
        curandDestroyGenerator(sl->g);
    if (sl->done)
        cudaEventDestroy(sl->done);
    sl->g = NULL, sl->done = NULL, sl->used = 0;
}

static void curand_release(void *state)
{
    gen_pool *pool = state;
    if (!pool)
        return;
    for (int i = 0; i < POOL_SLOTS; i++)
        if (pool->slots[i].used) {
            fm_cuda_use_device(pool->slots[i].device);
            slot_free(&pool->slots[i]);
        }
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

static fm_status slot_create(gen_slot *sl, int device)
{
    sl->device = device;
    curandStatus_t cs = curandCreateGenerator(&sl->g, CURAND_RNG_PSEUDO_PHILOX4_32_10);
    if (cs != CURAND_STATUS_SUCCESS) {
        sl->g = NULL; /* not a generator slot_free may destroy, whatever the failed call left there */
        return curand_fail(cs, "curandCreateGenerator(PHILOX4_32_10)");
    }
    cudaError_t e = cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        sl->done = NULL;
        return fm_cuda_status(e, "rng cuda/curand: cudaEventCreateWithFlags");
    }
    return FM_OK;
}

/* A generator of `device` for `stream`, leased to the caller (gen_release gives it back). A
 * temporary one (not in the pool) when every slot is taken: *sl then points to `spare`. */
static fm_status gen_acquire(gen_pool *pool, int device, cudaStream_t stream, gen_slot *spare, gen_slot **out)
{
    gen_slot *pick = NULL, *empty = NULL;
    pthread_mutex_lock(&pool->lock);
    for (int i = 0; i < POOL_SLOTS; i++) {
        gen_slot *sl = &pool->slots[i];
        if (!sl->used) {
            empty = empty ? empty : sl;
        } else if (!sl->busy && sl->device == device && (!pick || sl->stream == stream)) {
            pick = sl;
            if (sl->stream == stream)
                break;
        }
    }
    gen_slot *sl = pick ? pick : empty;
    if (sl) {
        sl->busy = 1;
        sl->used = 1;
    }
    pthread_mutex_unlock(&pool->lock);
    if (!sl) {
        *spare = (gen_slot){.used = 1, .busy = 1};
        sl = spare;
    }
    fm_status s = FM_OK;
    if (!sl->g)
        s = slot_create(sl, device);
    else if (sl->stream != stream)
        s = fm_cuda_status(cudaStreamWaitEvent(stream, sl->done, 0), "rng cuda/curand: cudaStreamWaitEvent");
    if (s != FM_OK) {
        pthread_mutex_lock(&pool->lock);
        slot_free(sl);
        sl->busy = 0;
        pthread_mutex_unlock(&pool->lock);
        return s;
    }
    sl->stream = stream;
    *out = sl;
    return FM_OK;
}

static void gen_release(gen_pool *pool, gen_slot *sl, gen_slot *spare)
{
    if (sl == spare) { /* ordered after its work: destroying may free what the launches use */
        cudaStreamSynchronize(sl->stream);
        slot_free(sl);
        return;
    }
    if (cudaEventRecord(sl->done, sl->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaStreamSynchronize(sl->stream); /* then any later stream may use it */
    }
    pthread_mutex_lock(&pool->lock);
    sl->busy = 0;
    pthread_mutex_unlock(&pool->lock);
}

/* ---- the fill ---- */
typedef struct curand_plan {
    int device;
    fm_curand_kind kind;
    int64_t n;
    gen_pool *pool;
} curand_plan;

static fm_status generate(const fm_curand_kind *k, curandGenerator_t g, void *out, size_t m)
{
    const float mf = (float)k->mean, sf = (float)k->stddev;
    curandStatus_t s;
    const int f64 = k->dtype == FM_F64;
    switch (k->distribution) {
    case FM_RNG_RAW: s = curandGenerate(g, out, m); break;
    case FM_RNG_UNIFORM: s = f64 ? curandGenerateUniformDouble(g, out, m) : curandGenerateUniform(g, out, m); break;
    case FM_RNG_NORMAL:
        s = f64 ? curandGenerateNormalDouble(g, out, m, k->mean, k->stddev) : curandGenerateNormal(g, out, m, mf, sf);
        break;
    default:
        s = f64 ? curandGenerateLogNormalDouble(g, out, m, k->mean, k->stddev)
                : curandGenerateLogNormal(g, out, m, mf, sf);
        break;
    }
    return s == CURAND_STATUS_SUCCESS ? FM_OK : curand_fail(s, "curandGenerate*");
}

/* The generator at the state this call's values need (see the top of the file). */
static fm_status position_generator(curandGenerator_t g, const fm_exec_args *args, void *scratch)
{
    const int64_t pos = args->ints[0], a = args->ints[1], b = args->ints[2];
    CURAND_DO(curandSetPseudoRandomGeneratorSeed(g, (unsigned long long)args->ints[3]),
              "curandSetPseudoRandomGeneratorSeed");
    if (a == b) {
        CURAND_DO(curandSetGeneratorOffset(g, (unsigned long long)pos), "curandSetGeneratorOffset");
        return FM_OK;
    }
    /* unsigned: ROUND * j1 reaches 2 pos, past 2^63 for positions past 2^62 (0 <= a <= b <= pos < 2^63,
     * rng_problem.c, so a2, b2, p2 < 2^64: no wrap, and libcurand's offset is unsigned too) */
    const uint64_t R = (uint64_t)ROUND, k = ((uint64_t)b - (uint64_t)a) / R, q = ((uint64_t)pos - (uint64_t)b) / R;
    const uint64_t j2 = k + q, j1 = k + j2; /* run start + j1 rounds, run end + j2, this call + k */
    const uint64_t a2 = (uint64_t)a + R * j1, b2 = (uint64_t)b + R * j2, p2 = (uint64_t)pos + R * k;
    CURAND_DO(curandSetGeneratorOffset(g, a2), "curandSetGeneratorOffset");
    if (b2 > a2)
        CURAND_DO(curandGenerateUniformDouble(g, scratch, (size_t)(b2 - a2)), "curandGenerateUniformDouble (replay)");
    if (p2 > b2)
        CURAND_DO(curandGenerate(g, scratch, (size_t)(p2 - b2)), "curandGenerate (replay)");
    return FM_OK;
}

size_t fm_curand_scratch_bytes(const fm_curand_kind *k, int64_t n, const fm_exec_args *args)
{
    const int odd = (k->distribution == FM_RNG_NORMAL || k->distribution == FM_RNG_LOGNORMAL) && (n & 1);
    return args->ints[1] != args->ints[2] ? (size_t)ROUND * 8 : odd ? 2 * fm_dtype_size(k->dtype) : 0;
}

fm_status fm_curand_call(curandGenerator_t g, const fm_curand_kind *k, int64_t n, const fm_exec_args *args, void *out,
                         void *scratch, fm_curand_copy_fn copy, void *copy_ctx)
{
    const int odd = (k->distribution == FM_RNG_NORMAL || k->distribution == FM_RNG_LOGNORMAL) && (n & 1);
    const size_t es = fm_dtype_size(k->dtype), body = (size_t)(odd ? n - 1 : n);
    fm_status s = position_generator(g, args, scratch);
    if (s == FM_OK && body)
        s = generate(k, g, out, body);
    if (s == FM_OK && odd && (s = generate(k, g, scratch, 2)) == FM_OK) /* a call of 2 after the body: calls compose */
        s = copy((char *)out + body * es, scratch, es, copy_ctx);
    return s;
}

static fm_status device_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    return fm_cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream),
                          "rng cuda/curand: cudaMemcpyAsync");
}

static fm_status fill(const curand_plan *pl, curandGenerator_t g, cudaStream_t stream, void *out,
                      const fm_exec_args *args)
{
    const size_t need = fm_curand_scratch_bytes(&pl->kind, pl->n, args);
    void *scratch = NULL;
    fm_status s = FM_OK;
    if (need && (s = fm_cuda_status(cudaMallocAsync(&scratch, need, stream), "rng cuda/curand: cudaMallocAsync("
                                    "scratch)")) != FM_OK)
        scratch = NULL; /* nothing to free */
    curandStatus_t cs = s == FM_OK ? curandSetStream(g, stream) : CURAND_STATUS_SUCCESS;
    if (cs != CURAND_STATUS_SUCCESS)
        s = curand_fail(cs, "curandSetStream");
    if (s == FM_OK)
        s = fm_curand_call(g, &pl->kind, pl->n, args, out, scratch, device_copy, stream);
    if (scratch)
        cudaFreeAsync(scratch, stream);
    return s;
}

static fm_status curand_run(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const curand_plan *pl = plan->impl;
    fm_status s = FM_OK; /* the arguments: checked by the operation (rng_problem.c) */
    if (pl->n == 0 || (s = fm_cuda_use_device(pl->device)) != FM_OK)
        return s;
    gen_slot spare, *sl = NULL;
    if ((s = gen_acquire(pl->pool, pl->device, (cudaStream_t)stream, &spare, &sl)) != FM_OK)
        return s;
    s = fill(pl, sl->g, (cudaStream_t)stream, ptrs[FM_RNG_OUT], args);
    gen_release(pl->pool, sl, &spare);
    return s;
}
FM_NVTX_EXECUTE(curand_execute, curand_run)

static void curand_destroy(void *impl) { free(impl); }

static fm_status curand_plan_fn(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    (void)ctx;
    const fm_rng_params *rp = &p->u.rng;
    const fm_tensor *t = &p->t[FM_RNG_OUT];
    if (rp->mode != FM_RNG_CURAND)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "rng cuda/curand: curand mode only (portable mode is the rngkernel "
                       "backend's)");
    if (rp->distribution != FM_RNG_RAW && rp->distribution != FM_RNG_UNIFORM && rp->distribution != FM_RNG_NORMAL &&
        rp->distribution != FM_RNG_LOGNORMAL)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "rng cuda/curand: distribution %d is not one libcurand's generator "
                       "makes", (int)rp->distribution);
    if (rp->distribution == FM_RNG_UNIFORM && (rp->a != 0.0 || rp->b != 1.0))
        return fm_fail(FM_ERR_NOT_SUPPORTED, "rng cuda/curand: uniform low = %g, high = %g: libcurand's device "
                       "generator makes (0, 1] only; expected low 0, high 1 on the GPU in curand mode (or "
                       "mode portable, or execution cpu, or scale the result)", rp->a, rp->b);
    curand_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "rng: out of host memory while planning");
    pl->device = p->exec_device.id;
    pl->kind = (fm_curand_kind){.distribution = rp->distribution, .dtype = t->dtype, .mean = rp->a, .stddev = rp->b};
    pl->n = fm_tensor_numel(t);
    pl->pool = state;
    static const char *const dists[] = {"uniform", "normal", "lognormal", "exponential", "raw"};
    out->impl = pl;
    out->execute = curand_execute;
    out->destroy_impl = curand_destroy;
    /* normals come in pairs (float2 / double2 stores): a pair's alignment, so that a sliced out is a
     * clear error at execute rather than a misaligned access inside libcurand (undocumented there) */
    const int pairs = rp->distribution == FM_RNG_NORMAL || rp->distribution == FM_RNG_LOGNORMAL;
    out->required_align[FM_RNG_OUT] = fm_dtype_size(t->dtype) * (pairs ? 2 : 1);
    fm_plan_set_describe(out, "rng cuda/curand %s %s mode=curand n=%lld generator=PHILOX4_32_10 device=%d",
                         dists[rp->distribution], fm_dtype_name(t->dtype), (long long)pl->n, pl->device);
    return FM_OK;
}

const fm_backend fm_backend_curand_rng = {
    .name = "curand",
    .device = FM_DEVICE_CUDA,
    .ops = 1u << FM_OP_RNG,
    .priority = 1,
    .probe = curand_probe,
    .release = curand_release,
    .plan = curand_plan_fn,
};
