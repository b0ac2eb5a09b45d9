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
#include "philox_discrete.h"
#include "philox_portable.h"
#include "philox_simd.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RNG_BATCH 64    /* units per batch: the Philox and value loops run over this many (vectorised) */
#define RNG_CHUNK 16384 /* stream positions per work item (a multiple of every unit) */

/* Word j of block b: w[j][b] (curand's f64 kinds: unit i has blocks 2i and 2i + 1). */
typedef struct rng_words {
    uint32_t w[4][2 * RNG_BATCH];
} rng_words;

typedef struct rng_impl rng_impl;
/* The values of a batch's units [0, n) from its words into v (n * unit values of the dtype). */
typedef void (*emit_fn)(const rng_impl *x, const rng_words *w, int n, void *v);

struct rng_impl {
    fm_rng_params rp;
    size_t es;
    int64_t n;
    int threads;
    int unit;   /* values per unit */
    int blocks; /* Philox blocks per unit: 2 for curand's f64 kinds, else 1 */
    emit_fn emit;
    fm_px_simd_args simd; /* portable mode's vector fill (philox_simd.h), kind NONE: none */
};

typedef struct rng_call {
    const rng_impl *x;
    char *out;
    uint64_t seed; /* the Philox key (args.ints[3]) */
    uint64_t pos;
    uint64_t g0, span_a, span_b; /* curand: the call's first group; the run of f64 calls, in groups */
    int stream;                  /* streaming stores (fill_part) */
} rng_call;

/* ---- counters: the portable stream's, and curand's subsequence layout ---- */
/* groups g < x with g mod 65536 == s */
static inline uint64_t groups_before(uint64_t x, uint32_t s) { return (x >> 16) + ((x & 0xFFFFu) > s); }

static void batch_counters(const rng_call *c, uint64_t u0, int n, rng_words *ctr)
{
    const rng_impl *x = c->x;
    for (int i = 0; i < n; i++) {
        const uint64_t u = u0 + (uint64_t)i;
        if (x->rp.mode == FM_RNG_PORTABLE) {
            ctr->w[0][i] = (uint32_t)u, ctr->w[1][i] = (uint32_t)(u >> 32), ctr->w[2][i] = ctr->w[3][i] = 0;
            continue;
        }
        const uint32_t s = (uint32_t)(u & 0xFFFFu); /* unit u is group u, of subsequence s */
        uint64_t k = (u >> 16) + groups_before(c->span_b, s) - groups_before(c->span_a, s);
        if (x->blocks == 1) {
            ctr->w[0][i] = (uint32_t)k, ctr->w[1][i] = (uint32_t)(k >> 32);
            ctr->w[2][i] = s, ctr->w[3][i] = 0;
            continue;
        }
        k += (u >> 16) - groups_before(c->g0, s); /* ctr[s] + 2t, t = (u >> 16) - c0(s) */
        for (int h = 0; h < 2; h++) {
            const uint64_t kb = k + (uint64_t)h;
            ctr->w[0][2 * i + h] = (uint32_t)kb, ctr->w[1][2 * i + h] = (uint32_t)(kb >> 32);
            ctr->w[2][2 * i + h] = s, ctr->w[3][2 * i + h] = 0;
        }
    }
}

FM_SIMD_CLONES static void philox_tail(int b, int nb, uint64_t seed, const rng_words *restrict ctr,
                                       rng_words *restrict out)
{
    for (; b < nb; b++) {
        const uint32_t in[4] = {ctr->w[0][b], ctr->w[1][b], ctr->w[2][b], ctr->w[3][b]};
        uint32_t w[4];
        fm_philox4x32_10(in, (uint32_t)seed, (uint32_t)(seed >> 32), w);
        out->w[0][b] = w[0], out->w[1][b] = w[1], out->w[2][b] = w[2], out->w[3][b] = w[3];
    }
}

/* whole vectors in the vector path (philox_simd.h), the rest one block at a time */
static void philox_batch(int nb, uint64_t seed, const rng_words *ctr, rng_words *out)
{
    const uint32_t *const ci[4] = {ctr->w[0], ctr->w[1], ctr->w[2], ctr->w[3]};
    uint32_t *const co[4] = {out->w[0], out->w[1], out->w[2], out->w[3]};
    philox_tail(fm_philox_simd_blocks(nb, seed, ci, co), nb, seed, ctr, out);
}

/* ---- curand mode's arithmetic (RNG-PHILOX.md; glibc's libm, as libcurand's host generator) ---- */
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

static inline void curand_normal_pair_d(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, double *z0,
                                        double *z1)
{
    const double u = curand_u01d(w0, w1);
    const double v = (double)(w2 ^ ((uint64_t)w3 << 21)) * 0x1p-52 + 0x1p-53;
    const double r = sqrt(-2.0 * log(u));
    double s, co;
    sincos(v * 3.1415926535897932, &s, &co);
    *z0 = s * r;
    *z1 = co * r;
}

/* ---- the emit functions: one per (mode, distribution, dtype) ---- */
#define EMIT(name)                                                                                    \
    FM_SIMD_CLONES static void name(const rng_impl *x, const rng_words *restrict wd, int n, void *vv)
#define W(j, b) (wd->w[j][b])
#define W64(j, b) ((uint64_t)W(j, b) | (uint64_t)W((j) + 1, b) << 32)

EMIT(emit_raw)
{
    uint32_t *restrict v = vv;
    for (int i = 0; i < n; i++) {
        v[4 * i] = W(0, i), v[4 * i + 1] = W(1, i);
        v[4 * i + 2] = W(2, i), v[4 * i + 3] = W(3, i);
    }
}




/* The f32 kinds of both modes share their shapes: only the uniform, the Box-Muller pair and exp differ. */
#define EMIT_UNIFORM_F(name, u01)                                                                     \
    EMIT(name)                                                                                        \
    {                                                                                                 \
        float *restrict v = vv;                                                                       \
        const float lo = (float)x->rp.a, width = (float)(x->rp.b - x->rp.a);                          \
        for (int i = 0; i < n; i++) {                                                                 \
            v[4 * i] = lo + width * u01(W(0, i));                                                     \
            v[4 * i + 1] = lo + width * u01(W(1, i));                                                 \
            v[4 * i + 2] = lo + width * u01(W(2, i));                                                 \
            v[4 * i + 3] = lo + width * u01(W(3, i));                                                 \
        }                                                                                             \
    }
#define EMIT_NORMAL_F(name, pair)                                                                     \
    EMIT(name)                                                                                        \
    {                                                                                                 \
        float *restrict v = vv;                                                                       \
        const float mean = (float)x->rp.a, sd = (float)x->rp.b;                                       \
        for (int i = 0; i < n; i++) {                                                                 \
            float z0, z1, z2, z3;                                                                     \
            pair(W(0, i), W(1, i), &z0, &z1);                                                         \
            pair(W(2, i), W(3, i), &z2, &z3);                                                         \
            v[4 * i] = z0 * sd + mean, v[4 * i + 1] = z1 * sd + mean;                                 \
            v[4 * i + 2] = z2 * sd + mean, v[4 * i + 3] = z3 * sd + mean;                             \
        }                                                                                             \
    }
/* exp of the normal fill: lognormal, for T values per unit */
#define EMIT_LOGNORMAL(name, normal, T, per_unit, expfn)                                              \
    EMIT(name)                                                                                        \
    {                                                                                                 \
        T *restrict v = vv;                                                                           \
        normal(x, wd, n, vv);                                                                         \
        for (int i = 0; i < (per_unit) * n; i++)                                                      \
            v[i] = expfn(v[i]);                                                                       \
    }

EMIT_UNIFORM_F(curand_uniform_f, curand_u01f)
EMIT_NORMAL_F(curand_normal_f, curand_normal_pair_f)
EMIT_LOGNORMAL(curand_lognormal_f, curand_normal_f, float, 4, expf)
EMIT_UNIFORM_F(portable_uniform_f, fm_px_u01_f32)
EMIT_NORMAL_F(portable_normal_f, fm_px_normal_pair_f32)
EMIT_LOGNORMAL(portable_lognormal_f, portable_normal_f, float, 4, fm_px_expf)

/* f64: value 4i + 2h + q from block 2i + h, words (2q, 2q + 1) */
EMIT(curand_uniform_d)
{
    double *restrict v = vv;
    const double lo = x->rp.a, width = x->rp.b - x->rp.a;
    for (int b = 0; b < 2 * n; b++) {
        v[2 * b] = lo + width * curand_u01d(W(0, b), W(1, b));
        v[2 * b + 1] = lo + width * curand_u01d(W(2, b), W(3, b));
    }
}

EMIT(curand_normal_d)
{
    double *restrict v = vv;
    const double mean = x->rp.a, sd = x->rp.b;
    for (int b = 0; b < 2 * n; b++) {
        double z0, z1;
        curand_normal_pair_d(W(0, b), W(1, b), W(2, b), W(3, b), &z0, &z1);
        v[2 * b] = z0 * sd + mean;
        v[2 * b + 1] = z1 * sd + mean;
    }
}

EMIT_LOGNORMAL(curand_lognormal_d, curand_normal_d, double, 4, exp)




EMIT(portable_exponential_f)
{
    float *restrict v = vv;
    const float scale = (float)x->rp.a;
    for (int i = 0; i < n; i++) { /* 0 - log: +0, not -0, for u = 1 */
        v[4 * i] = (0.0f - fm_px_logf(fm_px_u01_open_f32(W(0, i)))) * scale;
        v[4 * i + 1] = (0.0f - fm_px_logf(fm_px_u01_open_f32(W(1, i)))) * scale;
        v[4 * i + 2] = (0.0f - fm_px_logf(fm_px_u01_open_f32(W(2, i)))) * scale;
        v[4 * i + 3] = (0.0f - fm_px_logf(fm_px_u01_open_f32(W(3, i)))) * scale;
    }
}

/* portable f64: value 2i + h from the words (2h, 2h + 1) of block i */
EMIT(portable_uniform_d)
{
    double *restrict v = vv;
    const double lo = x->rp.a, width = x->rp.b - x->rp.a;
    for (int i = 0; i < n; i++) {
        v[2 * i] = lo + width * fm_px_u01_f64(W64(0, i));
        v[2 * i + 1] = lo + width * fm_px_u01_f64(W64(2, i));
    }
}

EMIT(portable_normal_d)
{
    double *restrict v = vv;
    const double mean = x->rp.a, sd = x->rp.b;
    for (int i = 0; i < n; i++) {
        double z0, z1;
        fm_px_normal_pair_f64(W64(0, i), W64(2, i), &z0, &z1);
        v[2 * i] = z0 * sd + mean;
        v[2 * i + 1] = z1 * sd + mean;
    }
}

EMIT_LOGNORMAL(portable_lognormal_d, portable_normal_d, double, 2, fm_px_exp)

EMIT(portable_exponential_d)
{
    double *restrict v = vv;
    const double scale = x->rp.a;
    for (int i = 0; i < n; i++) {
        v[2 * i] = (0.0 - fm_px_log(fm_px_u01_open_f64(W64(0, i)))) * scale;
        v[2 * i + 1] = (0.0 - fm_px_log(fm_px_u01_open_f64(W64(2, i)))) * scale;
    }
}
#undef EMIT_LOGNORMAL
#undef EMIT_NORMAL_F
#undef EMIT_UNIFORM_F
#undef W64
#undef W
#undef EMIT

/* [mode][distribution][0: 32-bit, 1: f64] */
static const emit_fn emit_fns[2][5][2] = {
    [FM_RNG_PORTABLE] = {{portable_uniform_f, portable_uniform_d},
                         {portable_normal_f, portable_normal_d},
                         {portable_lognormal_f, portable_lognormal_d},
                         {portable_exponential_f, portable_exponential_d},
                         {emit_raw, NULL}},
    [FM_RNG_CURAND] = {{curand_uniform_f, curand_uniform_d},
                       {curand_normal_f, curand_normal_d},
                       {curand_lognormal_f, curand_lognormal_d},
                       {NULL, NULL},
                       {emit_raw, NULL}},
};

/* ---- the fill ---- */
/* Units [u, u + n) into dst: the vector fill for whole vectors of them where there is one (nt: its
 * stores streaming, dst 64-byte aligned), the Philox batch and the emit function for the rest. */
static void fill_units(const rng_call *c, uint64_t u, int n, char *dst, int nt)
{
    const rng_impl *x = c->x;
    int done = 0;
    if (x->simd.kind != FM_PX_SIMD_NONE)
        done = (int)fm_px_simd_fill(&x->simd, c->seed, u, n, dst, nt);
    if (done == n)
        return;
    rng_words ctr, wd;
    batch_counters(c, u + (uint64_t)done, n - done, &ctr);
    philox_batch((n - done) * x->blocks, c->seed, &ctr, &wd);
    x->emit(x, &wd, n - done, dst + (size_t)done * (size_t)x->unit * x->es);
}

/* Stream positions [e0, e1) of the call into dst0 (position e0's place), in batches of whole units;
 * a batch that is not wholly inside goes through a buffer. nt: whole batches' vector stores
 * streaming (dst0 64-byte aligned, e0 a unit's first value). */
static void fill_range(const rng_call *c, uint64_t e0, uint64_t e1, char *dst0, int nt)
{
    const rng_impl *x = c->x;
    const uint64_t U = (uint64_t)x->unit;
    _Alignas(64) unsigned char tmp[RNG_BATCH * 4 * sizeof(double)];
    for (uint64_t u = e0 / U; e0 < e1 && u * U < e1; u += RNG_BATCH) {
        const uint64_t ub = fm_min_i64((int64_t)(u + RNG_BATCH), (int64_t)((e1 + U - 1) / U));
        const int n = (int)(ub - u);
        const uint64_t a = u * U < e0 ? e0 : u * U, b = ub * U > e1 ? e1 : ub * U;
        char *dst = dst0 + (a - e0) * x->es;
        if (a == u * U && b == ub * U) {
            fill_units(c, u, n, dst, nt);
        } else {
            fill_units(c, u, n, (char *)tmp, 0);
            memcpy(dst, tmp + (a - u * U) * x->es, (b - a) * x->es);
        }
    }
}

/* ---- streaming stores ---- */
/* An output too large for the caches is written by the vector fills with streaming stores
 * (vmovntdq / vmovntpd): a plain store first reads its line (read for ownership), so a fill that
 * is bound by memory moved twice its bytes (dev EPYC, 2^25 f64 uniform on 1 thread: 0.56 -> 0.49
 * ns per value). They need aligned addresses: the part of the range from the first 64-byte line
 * of out that starts a unit to the last whole line streams, the ends are stored plainly; a unit
 * that never starts a line (a 16-byte unit at an address 8 mod 16) leaves it all plain. Portable
 * mode's vector fills only (curand mode's are scalar). Bits never change. */
#define RNG_STREAM_BYTES ((int64_t)16 << 20) /* outputs from this size on (per call) stream */
static atomic_int stream_forced = -1;        /* tests: 0 / 1 force it off / on; -1: by size */

int fm_rng_set_stream_stores(int mode)
{
    const int before = atomic_load_explicit(&stream_forced, memory_order_relaxed);
    atomic_store_explicit(&stream_forced, mode < 0 ? -1 : mode > 0, memory_order_relaxed);
    return before;
}

/* Positions [e0, e1) of the call to out, streamed where c says so. */
static void fill_part(const rng_call *c, uint64_t e0, uint64_t e1)
{
    const size_t es = c->x->es;
    char *d0 = c->out + (e0 - c->pos) * es;
    if (c->stream) { /* out is es-aligned (required_align) and es divides 64 */
        const uint64_t line = 64 / es, U = (uint64_t)c->x->unit;
        /* lines start every 64 / es positions, units every U, which divides it: either every
         * line starts a unit or none does */
        const uint64_t ea = e0 + (uint64_t)((-(uintptr_t)d0 & 63) / es);
        const uint64_t eb = ea % U == 0 && ea < e1 ? ea + (e1 - ea) / line * line : ea;
        if (ea < eb) {
            fill_range(c, e0, ea, d0, 0);
            fill_range(c, ea, eb, c->out + (ea - c->pos) * es, 1);
            fill_range(c, eb, e1, c->out + (eb - c->pos) * es, 0);
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_sfence(); /* the streamed lines ordered before the pool's completion */
#endif
            return;
        }
    }
    fill_range(c, e0, e1, d0, 0);
}

/* Work item k: the stream positions of the call in [(first + k) RNG_CHUNK, (first + k + 1) RNG_CHUNK). */
static void fill_item(void *arg, int64_t item)
{
    const rng_call *c = arg;
    const uint64_t e1 = c->pos + (uint64_t)c->x->n, lo = (c->pos / RNG_CHUNK + (uint64_t)item) * RNG_CHUNK;
    fill_part(c, lo > c->pos ? lo : c->pos, lo + RNG_CHUNK < e1 ? lo + RNG_CHUNK : e1);
}

static fm_status rng_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)stream;
    const rng_impl *x = p->impl;
    const int64_t pos = args->ints[0], a = args->ints[1], b = args->ints[2];
    /* checked by the operation (rng_problem.c, check_exec_args) */
    rng_call c = {.x = x, .out = ptrs[FM_RNG_OUT], .seed = (uint64_t)args->ints[3], .pos = (uint64_t)pos,
                  .g0 = (uint64_t)pos / 4,
                  .span_a = (uint64_t)a / 4, .span_b = (uint64_t)b / 4};
    const int forced = atomic_load_explicit(&stream_forced, memory_order_relaxed);
    c.stream = forced > 0 || (forced < 0 && x->simd.kind != FM_PX_SIMD_NONE &&
                              x->n * (int64_t)x->es >= RNG_STREAM_BYTES);
    if (x->n == 0)
        return FM_OK;
    const uint64_t e1 = (uint64_t)(pos + x->n);
    const int64_t items = (int64_t)((e1 - 1) / RNG_CHUNK - (uint64_t)pos / RNG_CHUNK + 1);
    if (items == 1 || x->threads == 1)
        fill_part(&c, (uint64_t)pos, e1);
    else
        fm_pool_run(x->threads, items, fill_item, &c); /* -1: the caller ran every item itself */
    return FM_OK;
}

/* The vector fill of a portable kind, with the scalar emitters' constants (the f32 roundings too). */
static void simd_args(const fm_rng_params *rp, int f64, rng_impl *x)
{
    static const int kinds[5][2] = {{FM_PX_SIMD_UNIFORM_F32, FM_PX_SIMD_UNIFORM_F64},
                                    {FM_PX_SIMD_NORMAL_F32, FM_PX_SIMD_NORMAL_F64},
                                    {FM_PX_SIMD_NORMAL_F32, FM_PX_SIMD_NORMAL_F64}, /* exp_after */
                                    {FM_PX_SIMD_EXPONENTIAL_F32, FM_PX_SIMD_EXPONENTIAL_F64},
                                    {FM_PX_SIMD_RAW, FM_PX_SIMD_NONE}};
    x->simd.kind = FM_PX_SIMD_NONE;
    if (rp->mode != FM_RNG_PORTABLE || rp->distribution < 0 || rp->distribution > 4)
        return;
    x->simd.kind = kinds[rp->distribution][f64];
    x->simd.exp_after = rp->distribution == FM_RNG_LOGNORMAL;
    const int uniform = rp->distribution == FM_RNG_UNIFORM;
    x->simd.d0 = rp->a;
    x->simd.d1 = uniform ? rp->b - rp->a : rp->b; /* lo, width / mean, sd / scale */
    x->simd.f0 = (float)x->simd.d0;
    x->simd.f1 = uniform ? (float)(rp->b - rp->a) : (float)rp->b;
}

static fm_status rng_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    (void)ctx, (void)state;
    const fm_rng_params *rp = &p->u.rng;
    if (fm_philox_is_discrete(rp->distribution)) /* integers, poisson: philox_discrete.c */
        return fm_philox_discrete_plan(p, out);
    const fm_tensor *t = &p->t[FM_RNG_OUT];
    const int f64 = t->dtype == FM_F64;
    const emit_fn fn = emit_fns[rp->mode][rp->distribution][f64];
    if (!fn) /* core refuses these; a row added there first must not reach a NULL here */
        return fm_fail(FM_ERR_NOT_APPLICABLE, "rng cpu/philox: no %s fill in this mode",
                       fm_dtype_name(t->dtype));
    rng_impl *x = calloc(1, sizeof *x);
    if (!x)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "rng: out of host memory");
    x->rp = *rp;
    x->es = fm_dtype_size(t->dtype);
    x->n = fm_tensor_numel(t);
    x->unit = f64 && rp->mode == FM_RNG_PORTABLE ? 2 : 4;
    x->blocks = f64 && rp->mode == FM_RNG_CURAND ? 2 : 1;
    x->emit = fn;
    simd_args(rp, f64, x);
    const int64_t items = (x->n + RNG_CHUNK - 1) / RNG_CHUNK + 1;
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
