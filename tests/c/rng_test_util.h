/* rng_test_util.h : what the RNG tests (test_rng_*.c) share: the table of continuous kinds, one
 * planned fill at a stream position, and libcurand's Philox4x32-10 generators and fills (the
 * reference for curand mode). One copy, so that the tests cannot drift apart on what a kind is. */
#ifndef FM_TEST_RNG_UTIL_H
#define FM_TEST_RNG_UTIL_H

#include "check.h"

#ifdef FM_HAVE_CUDA
#include <curand.h>
#endif

typedef struct kind {
    int dist;
    fm_dtype dt;
    const char *name;
} kind;
/* Every continuous distribution and dtype; the first RNG_NCURAND are what curand mode makes. */
static const kind kinds[] = {
    {FM_RNG_RAW, FM_U32, "raw u32"},             {FM_RNG_UNIFORM, FM_F32, "uniform f32"},
    {FM_RNG_UNIFORM, FM_F64, "uniform f64"},     {FM_RNG_NORMAL, FM_F32, "normal f32"},
    {FM_RNG_NORMAL, FM_F64, "normal f64"},       {FM_RNG_LOGNORMAL, FM_F32, "lognormal f32"},
    {FM_RNG_LOGNORMAL, FM_F64, "lognormal f64"}, {FM_RNG_EXPONENTIAL, FM_F32, "exponential f32"},
    {FM_RNG_EXPONENTIAL, FM_F64, "exponential f64"},
};
#define RNG_NKINDS ((int)(sizeof kinds / sizeof kinds[0]))
#define RNG_NCURAND 7

/* n values of dt into buf on dev, options o, from stream position pos of seed (curand mode: after
 * the f64 run [run_a, run_b)) through fm_plan_execute_args; the plan's or the execution's status. */
static inline fm_status rng_fill_at(fm_context *ctx, const fm_rng_options *o, fm_device dev, fm_dtype dt, void *buf,
                                    int64_t n, uint64_t seed, int64_t pos, int64_t run_a, int64_t run_b,
                                    void *stream)
{
    fm_tensor t;
    fm_tensor_init(&t, buf, dev, dt, 1, &n, NULL);
    fm_plan *plan = NULL;
    fm_status s = fm_rng_plan(ctx, &t, o, &plan);
    if (s != FM_OK)
        return s;
    fm_exec_args a;
    fm_exec_args_init(&a);
    a.ints[0] = pos, a.ints[1] = run_a, a.ints[2] = run_b, a.ints[3] = (int64_t)seed;
    void *ptrs[1] = {buf};
    s = fm_plan_execute_args(plan, ptrs, 1, &a, stream);
    fm_plan_release(plan);
    return s;
}

#ifdef FM_HAVE_CUDA
/* n values of kind k (one of the first RNG_NCURAND) from libcurand's generator g; the normals with
 * mean 0.25 and stddev 1.5, as the tests' options. */
static inline curandStatus_t rng_curand_generate(curandGenerator_t g, const kind *k, int64_t n, void *buf)
{
    const size_t m = (size_t)n;
    switch (k->dist * 2 + (k->dt == FM_F64)) {
    case FM_RNG_RAW * 2: return curandGenerate(g, buf, m);
    case FM_RNG_UNIFORM * 2: return curandGenerateUniform(g, buf, m);
    case FM_RNG_UNIFORM * 2 + 1: return curandGenerateUniformDouble(g, buf, m);
    case FM_RNG_NORMAL * 2: return curandGenerateNormal(g, buf, m, 0.25f, 1.5f);
    case FM_RNG_NORMAL * 2 + 1: return curandGenerateNormalDouble(g, buf, m, 0.25, 1.5);
    case FM_RNG_LOGNORMAL * 2: return curandGenerateLogNormal(g, buf, m, 0.25f, 1.5f);
    default: return curandGenerateLogNormalDouble(g, buf, m, 0.25, 1.5);
    }
}

/* libcurand's Philox4x32-10 generator on the host (host != 0: needs no GPU) or the device, at seed
 * and offset; NULL when it cannot be made. */
static inline curandGenerator_t rng_curand_generator(int host, uint64_t seed, uint64_t offset)
{
    curandGenerator_t g = NULL;
    curandStatus_t s = host ? curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10)
                            : curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10);
    if (s != CURAND_STATUS_SUCCESS)
        return NULL;
    if (curandSetPseudoRandomGeneratorSeed(g, seed) != CURAND_STATUS_SUCCESS ||
        curandSetGeneratorOffset(g, offset) != CURAND_STATUS_SUCCESS) {
        curandDestroyGenerator(g);
        return NULL;
    }
    return g;
}
#endif

#endif
