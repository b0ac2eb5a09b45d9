/* philox_rng.c : the CPU RNG backend ("philox"): Philox4x32-10 fills in the two modes.
 *
 * Every value is a function of its stream position e (and the seed, distribution, dtype, mode):
 * the fill walks "units", the values that share Philox blocks (4 values of a 32-bit kind or of
 * curand's f64 kinds, 2 of portable f64), and a thread's part of the output is a range of whole
 * units, so neither the thread count nor the chunking changes a bit.
 *
 * portable (fusion/philox_portable.h): unit u is block u of the plain counter stream; f32 / u32
 * value 4u + i is made from word i, f64 value 2u + i from words 2i, 2i + 1; normals pair words
 * (0, 1) and (2, 3) (f32) / the two 64-bit halves (f64), sin to the even value, cos to the odd.
 * curand (../shared/RNG-PHILOX.md): group G = e / 4 belongs to subsequence s = G mod 65536, whose
 * counter cuRAND keeps per thread. With only 32-bit calls since the offset was set, the block of G
 * is (G >> 16) + extra(s); an f64 call starting at group G0 uses the two blocks
 * 2 (G >> 16) - c0(s) + extra(s) (+ 1), c0(s) = the groups of s before G0; extra(s) counts the
 * groups of s inside the run of f64 calls made before this call ([ints[1], ints[2]) in positions),
 * the shift cuRAND's double calls leave behind (each advances its threads two blocks per group).
 * The transcendentals are glibc's, as libcurand's host generator calls them: this file is compiled
 * with -ffp-contract=off (CMakeLists.txt), which bit-exactness needs. */
#define _GNU_SOURCE /* sincosf, sincos */
#include "cpu_matmul.h" /* fm_pool_run */
#include "internal.h"
#include "philox_portable.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rng_call rng_call;
/* The values of unit u (stream positions [u U, u U + U)) into vals (float, double or uint32). */
typedef void (*unit_fn)(const rng_call *c, uint64_t u, void *vals);

typedef struct rng_impl {
    fm_rng_params rp;
    fm_dtype dtype;
    size_t es;
    int64_t n;
    int threads;
    int unit; /* values per unit */
    unit_fn fn;
} rng_impl;

struct rng_call {
    const rng_impl *x;
    char *out;
    uint64_t pos;
    uint64_t g0, span_a, span_b; /* curand: the call's first group; the run of f64 calls, in groups */
    int64_t chunk;               /* values per work item (a multiple of the unit) */
};

#define RNG_CHUNK 16384

/* ---- curand mode's blocks ---- */
static inline void seed_key(const rng_call *c, uint32_t *k0, uint32_t *k1)
{
    *k0 = (uint32_t)c->x->rp.seed;
    *k1 = (uint32_t)(c->x->rp.seed >> 32);
}

/* groups g < x with g mod 65536 == s */
static inline uint64_t groups_before(uint64_t x, uint32_t s) { return (x >> 16) + ((x & 0xFFFFu) > s); }

static inline void curand_block(const rng_call *c, uint64_t k, uint32_t s, uint32_t w[4])
{
    uint32_t k0, k1;
    seed_key(c, &k0, &k1);
    const uint32_t ctr[4] = {(uint32_t)k, (uint32_t)(k >> 32), s, 0};
    fm_philox4x32_10(ctr, k0, k1, w);
}

static inline uint64_t curand_shift(const rng_call *c, uint32_t s)
{
    return groups_before(c->span_b, s) - groups_before(c->span_a, s);
}

/* The block of group g for a 32-bit kind. */
static inline void curand_block32(const rng_call *c, uint64_t g, uint32_t w[4])
{
    const uint32_t s = (uint32_t)(g & 0xFFFFu);
    curand_block(c, (g >> 16) + curand_shift(c, s), s, w);
}

/* The two blocks of group g for an f64 kind. */
static inline void curand_block64(const rng_call *c, uint64_t g, uint32_t w[8])
{
    const uint32_t s = (uint32_t)(g & 0xFFFFu);
    const uint64_t k = 2 * (g >> 16) - groups_before(c->g0, s) + curand_shift(c, s);
    curand_block(c, k, s, w);
    curand_block(c, k + 1, s, w + 4);
}

static inline float curand_u01f(uint32_t x) { return (float)x * 0x1p-32f + 0x1p-33f; }
static inline double curand_u01d(uint32_t a, uint32_t b)
{
    return (double)(a ^ ((uint64_t)b << 21)) * 0x1p-53 + 0x1p-54;
}

static inline void curand_normal_pair_f(uint32_t x, uint32_t y, float *z0, float *z1)
{
    const float cc = 2.3283064e-10f * 6.2831855f; /* as libcurand: the float product */
    const float u = curand_u01f(x), v = (float)y * cc + cc / 2.0f;
    const float r = sqrtf(-2.0f * logf(u));
    float s, co;
    sincosf(v, &s, &co);
    *z0 = s * r;
    *z1 = co * r;
}

static inline void curand_normal_pair_d(const uint32_t w[4], double *z0, double *z1)
{
    const double u = curand_u01d(w[0], w[1]);
    const double v = (double)(w[2] ^ ((uint64_t)w[3] << 21)) * 0x1p-52 + 0x1p-53;
    const double r = sqrt(-2.0 * log(u));
    double s, co;
    sincos(v * 3.1415926535897932, &s, &co);
    *z0 = s * r;
    *z1 = co * r;
}

/* ---- the unit functions: one per (mode, distribution, dtype) ---- */
#define RP (&c->x->rp)
static void curand_raw(const rng_call *c, uint64_t g, void *v) { curand_block32(c, g, v); }

static void curand_uniform_f(const rng_call *c, uint64_t g, void *v)
{
    uint32_t w[4];
    float *o = v;
    const float lo = (float)RP->a, width = (float)(RP->b - RP->a);
    curand_block32(c, g, w);
    for (int i = 0; i < 4; i++)
        o[i] = lo + width * curand_u01f(w[i]);
}

static void curand_uniform_d(const rng_call *c, uint64_t g, void *v)
{
    uint32_t w[8];
    double *o = v;
    curand_block64(c, g, w);
    for (int i = 0; i < 4; i++)
        o[i] = RP->a + (RP->b - RP->a) * curand_u01d(w[2 * i], w[2 * i + 1]);
}

static void curand_normal_f(const rng_call *c, uint64_t g, void *v)
{
    uint32_t w[4];
    float *o = v;
    const float mean = (float)RP->a, sd = (float)RP->b;
    curand_block32(c, g, w);
    curand_normal_pair_f(w[0], w[1], &o[0], &o[1]);
    curand_normal_pair_f(w[2], w[3], &o[2], &o[3]);
    for (int i = 0; i < 4; i++)
        o[i] = o[i] * sd + mean;
}

static void curand_lognormal_f(const rng_call *c, uint64_t g, void *v)
{
    float *o = v;
    curand_normal_f(c, g, v);
    for (int i = 0; i < 4; i++)
        o[i] = expf(o[i]);
}

static void curand_normal_d(const rng_call *c, uint64_t g, void *v)
{
    uint32_t w[8];
    double *o = v;
    curand_block64(c, g, w);
    curand_normal_pair_d(w, &o[0], &o[1]);
    curand_normal_pair_d(w + 4, &o[2], &o[3]);
    for (int i = 0; i < 4; i++)
        o[i] = o[i] * RP->b + RP->a;
}

static void curand_lognormal_d(const rng_call *c, uint64_t g, void *v)
{
    double *o = v;
    curand_normal_d(c, g, v);
    for (int i = 0; i < 4; i++)
        o[i] = exp(o[i]);
}

static inline void portable_block(const rng_call *c, uint64_t u, uint32_t w[4])
{
    fm_px_block(RP->seed, u, w);
}
static inline uint64_t word64(const uint32_t *w) { return (uint64_t)w[0] | (uint64_t)w[1] << 32; }

static void portable_raw(const rng_call *c, uint64_t u, void *v) { portable_block(c, u, v); }

static void portable_uniform_f(const rng_call *c, uint64_t u, void *v)
{
    uint32_t w[4];
    float *o = v;
    const float lo = (float)RP->a, width = (float)(RP->b - RP->a);
    portable_block(c, u, w);
    for (int i = 0; i < 4; i++)
        o[i] = lo + width * fm_px_u01_f32(w[i]);
}

static void portable_normal_f(const rng_call *c, uint64_t u, void *v)
{
    uint32_t w[4];
    float *o = v;
    const float mean = (float)RP->a, sd = (float)RP->b;
    portable_block(c, u, w);
    fm_px_normal_pair_f32(w[0], w[1], &o[0], &o[1]);
    fm_px_normal_pair_f32(w[2], w[3], &o[2], &o[3]);
    for (int i = 0; i < 4; i++)
        o[i] = o[i] * sd + mean;
}

static void portable_lognormal_f(const rng_call *c, uint64_t u, void *v)
{
    float *o = v;
    portable_normal_f(c, u, v);
    for (int i = 0; i < 4; i++)
        o[i] = fm_px_expf(o[i]);
}

static void portable_exponential_f(const rng_call *c, uint64_t u, void *v)
{
    uint32_t w[4];
    float *o = v;
    const float scale = (float)RP->a;
    portable_block(c, u, w);
    for (int i = 0; i < 4; i++) /* 0 - log: +0, not -0, for u = 1 */
        o[i] = (0.0f - fm_px_logf(fm_px_u01_open_f32(w[i]))) * scale;
}

static void portable_uniform_d(const rng_call *c, uint64_t u, void *v)
{
    uint32_t w[4];
    double *o = v;
    portable_block(c, u, w);
    for (int i = 0; i < 2; i++)
        o[i] = RP->a + (RP->b - RP->a) * fm_px_u01_f64(word64(w + 2 * i));
}

static void portable_normal_d(const rng_call *c, uint64_t u, void *v)
{
    uint32_t w[4];
    double *o = v;
    portable_block(c, u, w);
    fm_px_normal_pair_f64(word64(w), word64(w + 2), &o[0], &o[1]);
    for (int i = 0; i < 2; i++)
        o[i] = o[i] * RP->b + RP->a;
}

static void portable_lognormal_d(const rng_call *c, uint64_t u, void *v)
{
    double *o = v;
    portable_normal_d(c, u, v);
    for (int i = 0; i < 2; i++)
        o[i] = fm_px_exp(o[i]);
}

static void portable_exponential_d(const rng_call *c, uint64_t u, void *v)
{
    uint32_t w[4];
    double *o = v;
    portable_block(c, u, w);
    for (int i = 0; i < 2; i++)
        o[i] = (0.0 - fm_px_log(fm_px_u01_open_f64(word64(w + 2 * i)))) * RP->a;
}
#undef RP

/* [mode][distribution][0: 32-bit, 1: f64] */
static const unit_fn unit_fns[2][5][2] = {
    [FM_RNG_PORTABLE] = {{portable_uniform_f, portable_uniform_d},
                         {portable_normal_f, portable_normal_d},
                         {portable_lognormal_f, portable_lognormal_d},
                         {portable_exponential_f, portable_exponential_d},
                         {portable_raw, NULL}},
    [FM_RNG_CURAND] = {{curand_uniform_f, curand_uniform_d},
                       {curand_normal_f, curand_normal_d},
                       {curand_lognormal_f, curand_lognormal_d},
                       {NULL, NULL},
                       {curand_raw, NULL}},
};

/* ---- the fill ---- */
/* Output values [i0, i1) of the call: whole units straight into out, the partial first and last
 * through a unit-sized buffer. */
static void fill_range(const rng_call *c, int64_t i0, int64_t i1)
{
    const rng_impl *x = c->x;
    const uint64_t U = (uint64_t)x->unit, e0 = c->pos + (uint64_t)i0, e1 = c->pos + (uint64_t)i1;
    _Alignas(16) unsigned char tmp[4 * sizeof(double)];
    for (uint64_t u = e0 / U; u * U < e1; u++) {
        const uint64_t a = u * U < e0 ? e0 : u * U, b = (u + 1) * U > e1 ? e1 : (u + 1) * U;
        char *dst = c->out + (a - c->pos) * x->es;
        if (b - a == U) {
            x->fn(c, u, dst);
        } else {
            x->fn(c, u, tmp);
            memcpy(dst, tmp + (a - u * U) * x->es, (b - a) * x->es);
        }
    }
}

static void fill_item(void *arg, int64_t item)
{
    const rng_call *c = arg;
    const int64_t i0 = item * c->chunk, i1 = fm_min_i64(c->x->n, i0 + c->chunk);
    fill_range(c, i0, i1);
}

static fm_status rng_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)stream;
    const rng_impl *x = p->impl;
    const int64_t pos = args->ints[0], a = args->ints[1], b = args->ints[2];
    if (pos < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng execute: position args.ints[0] = %lld, expected >= 0",
                       (long long)pos);
    if (pos > INT64_MAX - x->n)
        return fm_fail(FM_ERR_TOO_LARGE, "rng execute: position %lld + %lld values passes 2^63 - 1",
                       (long long)pos, (long long)x->n);
    if (x->rp.mode == FM_RNG_PORTABLE && (a || b))
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "rng execute: args.ints[1..2] = %lld, %lld; expected 0, 0 (the run "
                       "of f64 calls is curand mode's state)",
                       (long long)a, (long long)b);
    if (a < 0 || a > b || b > pos)
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "rng execute: the run of f64 calls args.ints[1..2] = [%lld, %lld), "
                       "expected 0 <= ints[1] <= ints[2] <= the position %lld",
                       (long long)a, (long long)b, (long long)pos);
    rng_call c = {.x = x, .out = ptrs[FM_RNG_OUT], .pos = (uint64_t)pos, .g0 = (uint64_t)pos / 4,
                  .span_a = (uint64_t)a / 4, .span_b = (uint64_t)b / 4, .chunk = RNG_CHUNK};
    if (x->n == 0)
        return FM_OK;
    const int64_t items = (x->n + c.chunk - 1) / c.chunk;
    if (items == 1 || x->threads == 1)
        fill_range(&c, 0, x->n);
    else
        fm_pool_run(x->threads, items, fill_item, &c); /* -1: the caller ran every item itself */
    return FM_OK;
}

static fm_status rng_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    (void)ctx, (void)state;
    const fm_rng_params *rp = &p->u.rng;
    const fm_tensor *t = &p->t[FM_RNG_OUT];
    const int f64 = t->dtype == FM_F64;
    const unit_fn fn = unit_fns[rp->mode][rp->distribution][f64];
    if (!fn) /* core refuses these; a row added there first must not reach a NULL here */
        return fm_fail(FM_ERR_NOT_APPLICABLE, "rng cpu/philox: no %s fill in this mode",
                       fm_dtype_name(t->dtype));
    rng_impl *x = calloc(1, sizeof *x);
    if (!x)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "rng: out of host memory");
    x->rp = *rp;
    x->dtype = t->dtype;
    x->es = fm_dtype_size(t->dtype);
    x->n = fm_tensor_numel(t);
    x->unit = f64 && rp->mode == FM_RNG_PORTABLE ? 2 : 4;
    x->fn = fn;
    const int64_t items = (x->n + RNG_CHUNK - 1) / RNG_CHUNK;
    x->threads = (int)fm_max_i64(1, fm_min_i64(rp->num_threads, items));
    static const char *const dists[] = {"uniform", "normal", "lognormal", "exponential", "raw"};
    out->impl = x;
    out->execute = rng_execute;
    out->destroy_impl = free;
    out->required_align[FM_RNG_OUT] = x->es;
    fm_plan_set_describe(out, "rng cpu/philox %s %s mode=%s n=%lld threads=%d", dists[rp->distribution],
                         fm_dtype_name(t->dtype), rp->mode == FM_RNG_CURAND ? "curand" : "portable",
                         (long long)x->n, x->threads);
    return FM_OK;
}

const fm_backend fm_backend_philox_rng = {
    .name = "philox",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_RNG,
    .priority = 0,
    .plan = rng_plan,
};
