/* philox_discrete.c : the CPU RNG backend's discrete distributions: integers (portable) and poisson
 * (portable and curand), planned through philox_rng.c's rng_plan (philox_discrete.h).
 *
 * Value m of a call (m its stream position) depends only on (seed, m, distribution, dtype, mode,
 * parameters), and each value takes exactly one position, so a thread's part of the output is any
 * range and the bytes never depend on the thread count.
 * portable (fusion/philox_portable.h, the arithmetic the GPU compiles too):
 *   integers, range of r <= 2^32 values: word m % 4 of block m / 4 (as raw), Lemire's
 *     multiply-shift; r > 2^32: the 64-bit word of value m as the f64 kinds (block m / 2); a
 *     rejected word is replaced by value m's own sub-stream's (fm_px_integer32 / 64);
 *   poisson: every draw from value m's sub-stream (fm_px_poisson).
 * curand (../shared/RNG-PHILOX.md): libcurand's host curandGeneratePoisson: the 32-bit word of
 *   element m in cuRAND's subsequence layout (the shift of the f64 run included, as philox_rng.c);
 *   lam < 2000 through its alias table built here as libcurand builds it (glibc's log and exp),
 *   lam >= 2000 by (unsigned)(sqrt(lam) z + lam + 0.5), z the element's float normal.
 * Compiled with -ffp-contract=off (CMakeLists.txt), as philox_rng.c. */
#define _GNU_SOURCE /* sincosf */
#include "philox_discrete.h"

#include "cpu_matmul.h" /* fm_pool_run */
#include "philox_portable.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DISC_CHUNK 16384 /* stream positions per work item */

typedef struct disc_impl {
    fm_rng_params rp;
    fm_dtype dt;
    size_t es;
    int64_t n;
    int threads;
    int wide;         /* integers: more than 2^32 values in the range */
    uint64_t r, t;    /* integers: the range's size (0: 2^32 narrow, 2^64 wide) and Lemire's threshold */
    fm_px_poisson_consts pc;
    int64_t L;        /* curand poisson, lam < 2000: the alias table's length (0: lam >= 2000) */
    uint32_t shift;   /* its first k */
    uint32_t *K;
    double *V;
} disc_impl;

typedef struct disc_call {
    const disc_impl *x;
    char *out;
    uint64_t seed, pos, span_a, span_b; /* curand: the run of f64 calls, in groups */
} disc_call;

static void disc_destroy(void *impl)
{
    disc_impl *x = impl;
    if (x) {
        free(x->K);
        free(x->V);
    }
    free(x);
}

/* value v (two's complement, the low bytes) into element i of out */
static inline void store(char *out, size_t es, int64_t i, uint64_t v)
{
    switch (es) {
    case 1: ((uint8_t *)out)[i] = (uint8_t)v; break;
    case 2: ((uint16_t *)out)[i] = (uint16_t)v; break;
    case 4: ((uint32_t *)out)[i] = (uint32_t)v; break;
    default: ((uint64_t *)out)[i] = v; break;
    }
}

/* ---- portable ---- */
#define INT_BATCH 64 /* blocks per batch of the narrow integers' loops (vectorised) */

/* words [4 b0, 4 (b0 + nb)) of the portable stream, in value order */
FM_SIMD_CLONES static void philox_words(uint64_t seed, uint64_t b0, int nb, uint32_t *restrict v)
{
    for (int b = 0; b < nb; b++) {
        uint32_t o[4];
        fm_px_block(seed, b0 + (uint64_t)b, o);
        v[4 * b] = o[0], v[4 * b + 1] = o[1], v[4 * b + 2] = o[2], v[4 * b + 3] = o[3];
    }
}

/* Lemire's fast path over n words in place (the offsets); returns whether one was rejected */
FM_SIMD_CLONES static int lemire32_batch(uint32_t *restrict v, int n, uint32_t r, uint32_t t)
{
    int rej = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t p = (uint64_t)v[i] * r;
        rej |= (uint32_t)p < t;
        v[i] = (uint32_t)(p >> 32);
    }
    return rej;
}

/* lo + offsets into n elements of es bytes (two's complement, the low bytes) */
FM_SIMD_CLONES static void store_offsets(char *restrict out, size_t es, const uint32_t *restrict off, int n,
                                         uint64_t lo)
{
    switch (es) {
    case 1: for (int i = 0; i < n; i++) ((uint8_t *)out)[i] = (uint8_t)(lo + off[i]); break;
    case 2: for (int i = 0; i < n; i++) ((uint16_t *)out)[i] = (uint16_t)(lo + off[i]); break;
    case 4: for (int i = 0; i < n; i++) ((uint32_t *)out)[i] = (uint32_t)(lo + off[i]); break;
    default: for (int i = 0; i < n; i++) ((uint64_t *)out)[i] = lo + off[i]; break;
    }
}

/* ranges of r <= 2^32 values: batches of blocks, the rare rejected words fixed after */
static void integers_narrow(const disc_call *c, uint64_t e0, uint64_t e1)
{
    const disc_impl *x = c->x;
    const uint32_t r = (uint32_t)x->r, t = (uint32_t)x->t;
    uint32_t w[4 * INT_BATCH], off[4 * INT_BATCH];
    for (uint64_t u = e0 / 4; u * 4 < e1; u += INT_BATCH) {
        const int nb = (int)fm_min_i64(INT_BATCH, (int64_t)((e1 + 3) / 4 - u));
        const uint64_t m0 = 4 * u;
        philox_words(c->seed, u, nb, w);
        memcpy(off, w, sizeof(uint32_t) * 4 * (size_t)nb);
        if (r != 0 && lemire32_batch(off, 4 * nb, r, t))
            for (int k = 0; k < 4 * nb; k++)
                if ((uint32_t)((uint64_t)w[k] * r) < t)
                    off[k] = fm_px_integer32(c->seed, m0 + (uint64_t)k, w[k], r, t);
        const uint64_t a = m0 > e0 ? m0 : e0, b = m0 + 4 * (uint64_t)nb < e1 ? m0 + 4 * (uint64_t)nb : e1;
        store_offsets(c->out + (a - c->pos) * x->es, x->es, off + (a - m0), (int)(b - a), (uint64_t)x->rp.ia);
    }
}

/* Lemire's fast path over n 64-bit words (the pairs of v) into off; returns whether one was rejected */
FM_SIMD_CLONES static int lemire64_batch(const uint32_t *restrict v, int n, uint64_t r, uint64_t t,
                                         uint64_t *restrict off)
{
    int rej = 0;
    for (int i = 0; i < n; i++) {
        uint64_t lo;
        off[i] = fm_px_mul64((uint64_t)v[2 * i] | (uint64_t)v[2 * i + 1] << 32, r, &lo);
        rej |= lo < t;
    }
    return rej;
}

/* ranges above 2^32 values (int64 only): value m from the 64-bit word of block m / 2 */
static void integers_wide(const disc_call *c, uint64_t e0, uint64_t e1)
{
    const disc_impl *x = c->x;
    uint32_t w[4 * INT_BATCH];
    uint64_t off[2 * INT_BATCH];
    for (uint64_t u = e0 / 2; u * 2 < e1; u += INT_BATCH) {
        const int nb = (int)fm_min_i64(INT_BATCH, (int64_t)((e1 + 1) / 2 - u));
        const uint64_t m0 = 2 * u;
        philox_words(c->seed, u, nb, w);
        if (x->r == 0) /* 2^64 values: the words themselves */
            for (int k = 0; k < 2 * nb; k++)
                off[k] = (uint64_t)w[2 * k] | (uint64_t)w[2 * k + 1] << 32;
        else if (lemire64_batch(w, 2 * nb, x->r, x->t, off))
            for (int k = 0; k < 2 * nb; k++) {
                const uint64_t wk = (uint64_t)w[2 * k] | (uint64_t)w[2 * k + 1] << 32;
                uint64_t lo;
                fm_px_mul64(wk, x->r, &lo);
                if (lo < x->t)
                    off[k] = fm_px_integer64(c->seed, m0 + (uint64_t)k, wk, x->r, x->t);
            }
        const uint64_t a = m0 > e0 ? m0 : e0, b = m0 + 2 * (uint64_t)nb < e1 ? m0 + 2 * (uint64_t)nb : e1;
        uint64_t *out = (uint64_t *)c->out + (a - c->pos);
        for (uint64_t i = a; i < b; i++)
            out[i - a] = (uint64_t)x->rp.ia + off[i - m0];
    }
}

static void poisson_portable_range(const disc_call *c, uint64_t e0, uint64_t e1)
{
    int64_t *out = (int64_t *)c->out;
    for (uint64_t m = e0; m < e1; m++)
        out[m - c->pos] = fm_px_poisson(c->seed, m, &c->x->pc);
}

/* ---- curand ---- */
static inline uint64_t groups_before(uint64_t x, uint32_t s) { return (x >> 16) + ((x & 0xFFFFu) > s); }

/* curand's block of group G (32-bit kinds after the run of f64 calls [span_a, span_b) in groups) */
static void curand_block(const disc_call *c, uint64_t G, uint32_t w[4])
{
    const uint32_t s = (uint32_t)(G & 0xFFFFu);
    const uint64_t k = (G >> 16) + groups_before(c->span_b, s) - groups_before(c->span_a, s);
    const uint32_t ctr[4] = {(uint32_t)k, (uint32_t)(k >> 32), s, 0u};
    fm_philox4x32_10(ctr, (uint32_t)c->seed, (uint32_t)(c->seed >> 32), w);
}

static inline float curand_normal_f(const uint32_t w[4], uint64_t m)
{
    const float cc = 2.3283064e-10f * 6.2831855f; /* as libcurand: the float product */
    const uint32_t h = (uint32_t)(m & 2u);
    const float u = (float)w[h] * 0x1p-32f + 0x1p-33f, v = (float)w[h + 1] * cc + cc / 2.0f;
    const float r = sqrtf(-2.0f * logf(u));
    float s, co;
    sincosf(v, &s, &co);
    return (m & 1u) ? co * r : s * r;
}

static void poisson_curand_range(const disc_call *c, uint64_t e0, uint64_t e1)
{
    const disc_impl *x = c->x;
    const double lam = x->rp.a, slam = sqrt(lam);
    for (uint64_t G = e0 / 4; G * 4 < e1; G++) {
        uint32_t w[4];
        curand_block(c, G, w);
        for (uint64_t m = G * 4 > e0 ? G * 4 : e0; m < G * 4 + 4 && m < e1; m++) {
            uint32_t v;
            if (x->L == 0) {
                v = (uint32_t)(slam * (double)curand_normal_f(w, m) + lam + 0.5);
            } else {
                const double u = (double)w[m & 3u] * 0x1p-32 + 0x1p-32;
                int64_t j = (int64_t)((double)x->L * u);
                j = j < x->L ? j : x->L - 1; /* u = 1 (w = 2^32 - 1) */
                v = x->shift + (u < x->V[j] ? (uint32_t)j : x->K[j]);
            }
            store(c->out, x->es, (int64_t)(m - c->pos), v);
        }
    }
}

/* The run of k where libcurand's p_k = exp(k log(lam) - lam - S_k) is nonzero in double (S_k = the
 * sum of log(i), term by term): its first k in *first, its length returned; p (when not NULL) gets
 * the values. Twice the same arithmetic: the length first, so that the table is allocated once. */
static int64_t poisson_run(double lam, double *p, uint32_t *first)
{
    const double ll = log(lam);
    double S = 0.0;
    int64_t L = 0;
    for (int64_t k = 0; k < 1000000; k++) {
        if (k > 0)
            S += log((double)k);
        const double pk = exp((double)k * ll - lam - S);
        if (pk == 0.0) {
            if (L > 0)
                break;
            continue;
        }
        if (L == 0)
            *first = (uint32_t)k;
        if (p)
            p[L] = pk;
        L++;
    }
    return L;
}

/* libcurand's square histogram for lam < 2000 (RNG-PHILOX.md): p_k over poisson_run's k, not
 * renormalised; passes while one changes something. On failure x's table stays empty (K, V NULL). */
static fm_status curand_alias_table(disc_impl *x)
{
    const double lam = x->rp.a;
    const int64_t L = poisson_run(lam, NULL, &x->shift); /* 0 < L < 4000 for 0 < lam < 2000 */
    if (L <= 0)
        return fm_fail(FM_ERR_INTERNAL, "rng cpu/philox: poisson lam = %g has no nonzero probability in double",
                       lam);
    double *p = malloc((size_t)L * sizeof *p);
    unsigned char *done = calloc((size_t)L, 1);
    x->K = malloc((size_t)L * sizeof *x->K);
    x->V = malloc((size_t)L * sizeof *x->V);
    if (!p || !done || !x->K || !x->V) {
        free(p), free(done), free(x->K), free(x->V);
        x->K = NULL, x->V = NULL;
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "rng cpu/philox: out of host memory for poisson's alias table (lam = "
                       "%g, %lld entries)", lam, (long long)L);
    }
    poisson_run(lam, p, &x->shift);
    const double a = 1.0 / (double)L;
    int64_t g = L - 1;
    for (int64_t i = 0; i < L; i++)
        x->K[i] = (uint32_t)i;
    while (g >= 0 && p[g] < a)
        g--;
    for (int changed = 1; changed && g >= 0;) {
        changed = 0;
        for (int64_t j = 0; j < L && g >= 0; j++) {
            if (done[j] || !(p[j] < a))
                continue;
            x->K[j] = (uint32_t)g;
            x->V[j] = (double)j * a + p[j];
            p[g] -= a - p[j];
            p[j] = a;
            done[j] = 1;
            changed = 1;
            while (g >= 0 && (done[g] || p[g] < a))
                g--;
        }
    }
    for (int64_t j = 0; j < L; j++)
        if (!done[j])
            x->V[j] = (double)j * a + p[j];
    x->L = L;
    free(p), free(done);
    return FM_OK;
}

/* ---- the fill ---- */
static void fill_range(const disc_call *c, uint64_t e0, uint64_t e1)
{
    const disc_impl *x = c->x;
    if (x->rp.distribution == FM_RNG_INTEGERS)
        (x->wide ? integers_wide : integers_narrow)(c, e0, e1);
    else if (x->rp.mode == FM_RNG_PORTABLE)
        poisson_portable_range(c, e0, e1);
    else
        poisson_curand_range(c, e0, e1);
}

static void fill_item(void *arg, int64_t item)
{
    const disc_call *c = arg;
    const uint64_t e1 = c->pos + (uint64_t)c->x->n, lo = (c->pos / DISC_CHUNK + (uint64_t)item) * DISC_CHUNK;
    fill_range(c, lo > c->pos ? lo : c->pos, lo + DISC_CHUNK < e1 ? lo + DISC_CHUNK : e1);
}

static fm_status disc_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)stream;
    const disc_impl *x = p->impl;
    const int64_t pos = args->ints[0], a = args->ints[1], b = args->ints[2];
    /* checked by the operation (rng_problem.c, check_exec_args) */
    disc_call c = {.x = x, .out = ptrs[FM_RNG_OUT], .seed = (uint64_t)args->ints[3], .pos = (uint64_t)pos,
                   .span_a = (uint64_t)a / 4, .span_b = (uint64_t)b / 4};
    if (x->n == 0)
        return FM_OK;
    const uint64_t e1 = (uint64_t)(pos + x->n);
    const int64_t items = (int64_t)((e1 - 1) / DISC_CHUNK - (uint64_t)pos / DISC_CHUNK + 1);
    if (items == 1 || x->threads == 1)
        fill_range(&c, (uint64_t)pos, e1);
    else
        fm_pool_run(x->threads, items, fill_item, &c);
    return FM_OK;
}

fm_status fm_philox_discrete_plan(const fm_problem *p, fm_plan *out)
{
    const fm_rng_params *rp = &p->u.rng;
    const fm_tensor *t = &p->t[FM_RNG_OUT];
    disc_impl *x = calloc(1, sizeof *x);
    if (!x)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "rng: out of host memory");
    x->rp = *rp;
    x->dt = t->dtype;
    x->es = fm_dtype_size(t->dtype);
    x->n = fm_tensor_numel(t);
    if (rp->distribution == FM_RNG_INTEGERS) {
        const uint64_t span = (uint64_t)rp->ib - (uint64_t)rp->ia; /* values - 1 */
        x->wide = span > 0xFFFFFFFFu;
        x->r = span + 1; /* 0 when the range is 2^64 (wide) or 2^32 (narrow, truncated below) */
        if (x->wide)
            x->t = fm_px_lemire_t64(x->r);
        else
            x->r = (uint32_t)x->r, x->t = fm_px_lemire_t32((uint32_t)x->r);
    } else if (rp->mode == FM_RNG_PORTABLE) {
        x->pc = fm_px_poisson_setup(rp->a);
    } else if (rp->a < 2000.0) {
        fm_status s = curand_alias_table(x);
        if (s != FM_OK) {
            disc_destroy(x);
            return s;
        }
    }
    const int64_t items = (x->n + DISC_CHUNK - 1) / DISC_CHUNK + 1;
    x->threads = (int)fm_max_i64(1, fm_min_i64(rp->num_threads, items));
    out->impl = x;
    out->execute = disc_execute;
    out->destroy_impl = disc_destroy;
    out->required_align[FM_RNG_OUT] = x->es;
    if (rp->distribution == FM_RNG_INTEGERS)
        fm_plan_set_describe(out, "rng cpu/philox integers %s [%lld, %lld] words=%d n=%lld threads=%d",
                             fm_dtype_name(t->dtype), (long long)rp->ia, (long long)rp->ib, x->wide ? 64 : 32,
                             (long long)x->n, x->threads);
    else
        fm_plan_set_describe(out, "rng cpu/philox poisson %s mode=%s lam=%g method=%s n=%lld threads=%d",
                             fm_dtype_name(t->dtype), rp->mode == FM_RNG_CURAND ? "curand" : "portable", rp->a,
                             rp->mode == FM_RNG_CURAND ? (x->L ? "alias" : "normal")
                                                       : (rp->a < 10 ? "inversion" : "ptrs"),
                             (long long)x->n, x->threads);
    return FM_OK;
}
