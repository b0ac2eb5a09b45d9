/* planner.c : offer a problem to the backends of its device, cache the plan. */
#include "context.h"
#include "operation.h"
#include "split.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* The plan cache's hash: multiply-xorshift over 8-byte words in four independent lanes
 * (one chain of dependent multiplies cost ~0.45 us per stateless call, byte-wise FNV ~1.5 us). */
typedef struct hash_lanes {
    uint64_t h[4];
    unsigned next;
} hash_lanes;

static inline void hash_words(hash_lanes *hl, const void *data, size_t words)
{
    const unsigned char *b = (const unsigned char *)data;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, b + 8 * i, 8);
        uint64_t *h = &hl->h[hl->next++ & 3u];
        *h = (*h ^ w) * 0xff51afd7ed558ccdull;
        *h ^= *h >> 32;
    }
}

uint64_t fm_problem_hash(const fm_problem *p)
{
    /* Only the words that tell problems apart: the header, each present slot's descriptor
     * up to its ndim, and what follows the descriptors (absent slots and extents past ndim
     * are zero). Equal problems (fm_problem_equal: memcmp) hash equal whatever the skipped
     * bytes hold. A 2-D matmul hashes ~60 words instead of the struct's ~230. */
    _Static_assert(offsetof(fm_problem, t) % 8 == 0 && sizeof(fm_problem) % 8 == 0 &&
                       offsetof(fm_tensor, shape) % 8 == 0 && sizeof(fm_tensor) % 8 == 0,
                   "the hash reads whole words");
    hash_lanes hl = {{0x9E3779B97F4A7C15ull ^ sizeof *p, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull,
                      0x27D4EB2F165667C5ull},
                     0};
    hash_words(&hl, p, offsetof(fm_problem, t) / 8);
    for (int i = 0; i < FM_MAX_SLOTS; i++) {
        if (!((p->present >> i) & 1u))
            continue;
        const fm_tensor *t = &p->t[i];
        size_t nd = t->ndim > 0 && t->ndim <= FM_MAX_NDIM ? (size_t)t->ndim : 0;
        hash_words(&hl, t, offsetof(fm_tensor, shape) / 8);
        hash_words(&hl, t->shape, nd);
        hash_words(&hl, t->strides, nd);
    }
    size_t tail = offsetof(fm_problem, t) + sizeof p->t;
    hash_words(&hl, (const unsigned char *)p + tail, (sizeof *p - tail) / 8);
    uint64_t r = hl.h[0];
    for (int l = 1; l < 4; l++) {
        r = (r ^ hl.h[l]) * 0xff51afd7ed558ccdull;
        r ^= r >> 32;
    }
    return r ^ (r >> 29);
}

void fm_problem_key_tails(fm_problem *p)
{
    /* slots past nslots stay as fm_problem_begin zeroed them; memset, not an element loop, which
     * was 2/3 of an FFT's build */
    const int nslots = p->nslots > 0 && p->nslots <= FM_MAX_SLOTS ? p->nslots : FM_MAX_SLOTS;
    for (int i = 0; i < nslots; i++) {
        fm_tensor *t = &p->t[i];
        t->data = NULL;
        const size_t nd = t->ndim <= 0 ? 0 : t->ndim >= FM_MAX_NDIM ? FM_MAX_NDIM : (size_t)t->ndim;
        memset(t->shape + nd, 0, (FM_MAX_NDIM - nd) * sizeof t->shape[0]);
        memset(t->strides + nd, 0, (FM_MAX_NDIM - nd) * sizeof t->strides[0]);
    }
}

bool fm_problem_equal(const fm_problem *a, const fm_problem *b) { return memcmp(a, b, sizeof *a) == 0; }

void fm_log_plan(const fm_context *ctx, const char *fmt, ...)
{
    if (!ctx || !ctx->settings.log_plan)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (ctx->log_sink)
        ctx->log_sink(line, ctx->log_user);
    else
        fprintf(stderr, "fusemath[plan] %s\n", line);
}

fm_status fm_context_set_log_sink(fm_context *ctx, fm_log_sink sink, void *user)
{
    if (!ctx)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_context_set_log_sink: ctx is NULL");
    ctx->log_sink = sink;
    ctx->log_user = sink ? user : NULL;
    return FM_OK;
}

/* ---- cache (caller holds ctx->lock) ---- */
static fm_plan *cache_find(fm_context *ctx, uint64_t h, const fm_problem *p)
{
    if (!ctx->cache.buckets)
        return NULL;
    for (fm_cache_entry *e = ctx->cache.buckets[h % ctx->cache.nbuckets]; e; e = e->next)
        if (e->hash == h && fm_problem_equal(&e->plan->problem, p))
            return e->plan;
    return NULL;
}

/* Unlink e from its bucket and the insertion order onto *dead, whose plans the caller releases
 * after unlocking (release_dropped): destroying a plan can wait on a backend's own lock (FFTW's
 * planner lock, held for a whole measured planning), which must not stall every cache lookup. */
static void cache_drop(fm_context *ctx, fm_cache_entry *e, fm_cache_entry **dead)
{
    fm_cache_entry **pp = &ctx->cache.buckets[e->hash % ctx->cache.nbuckets];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    if (e->older)
        e->older->newer = e->newer;
    else
        ctx->cache.oldest = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else
        ctx->cache.newest = e->older;
    ctx->cache.count--;
    ctx->cache.bytes -= (int64_t)e->plan->footprint;
    e->next = *dead;
    *dead = e;
}

static void release_dropped(fm_cache_entry *dead)
{
    while (dead) {
        fm_cache_entry *next = dead->next;
        fm_plan_release(dead->plan);
        free(dead);
        dead = next;
    }
}

/* Drop the oldest plans until `extra` more bytes fit under the caps; `keep` plans stay whatever
 * their size (the newest: a plan larger than the cap would otherwise be re-planned at every call). */
static void cache_make_room(fm_context *ctx, int64_t extra, int keep, fm_cache_entry **dead)
{
    while (ctx->cache.oldest && ctx->cache.count > keep &&
           (ctx->cache.count >= FM_CACHE_MAX_PLANS || ctx->cache.bytes + extra > ctx->settings.cache_max_bytes))
        cache_drop(ctx, ctx->cache.oldest, dead);
}

static void cache_insert(fm_context *ctx, uint64_t h, fm_plan *plan, fm_cache_entry **dead)
{
    if (!ctx->cache.buckets) {
        ctx->cache.nbuckets = 257;
        ctx->cache.buckets = calloc(ctx->cache.nbuckets, sizeof *ctx->cache.buckets);
        if (!ctx->cache.buckets)
            return; /* no cache: planning still works */
    }
    fm_cache_entry *old = NULL;
    for (fm_cache_entry *e = ctx->cache.buckets[h % ctx->cache.nbuckets]; e; e = e->next)
        if (e->hash == h && fm_problem_equal(&e->plan->problem, &plan->problem))
            old = e;
    if (old) /* replace (autotune) */
        cache_drop(ctx, old, dead);
    /* A plan larger than the cap still stays, alone: not caching it would re-plan a large transform
     * at every stateless call. */
    cache_make_room(ctx, (int64_t)plan->footprint, 0, dead);
    fm_cache_entry *e = calloc(1, sizeof *e);
    if (!e)
        return;
    e->hash = h;
    e->plan = plan;
    fm_plan_retain(plan);
    e->next = ctx->cache.buckets[h % ctx->cache.nbuckets];
    ctx->cache.buckets[h % ctx->cache.nbuckets] = e;
    e->older = ctx->cache.newest;
    if (ctx->cache.newest)
        ctx->cache.newest->newer = e;
    else
        ctx->cache.oldest = e;
    ctx->cache.newest = e;
    ctx->cache.count++;
    ctx->cache.bytes += (int64_t)plan->footprint;
}

void fm_context_cache_put(fm_context *ctx, fm_plan *plan)
{
    fm_cache_entry *dead = NULL;
    pthread_mutex_lock(&ctx->lock);
    cache_insert(ctx, fm_problem_hash(&plan->problem), plan, &dead);
    pthread_mutex_unlock(&ctx->lock);
    release_dropped(dead);
}

void fm_context_clear_cache(fm_context *ctx)
{
    if (!ctx)
        return;
    pthread_mutex_lock(&ctx->lock);
    fm_cache_entry *dead = NULL;
    for (fm_cache_entry *e = ctx->cache.oldest, *next; e; e = next) { /* released after unlocking */
        next = e->newer;
        e->next = dead;
        dead = e;
    }
    if (ctx->cache.buckets)
        memset(ctx->cache.buckets, 0, ctx->cache.nbuckets * sizeof *ctx->cache.buckets);
    ctx->cache.count = 0;
    ctx->cache.bytes = 0;
    ctx->cache.oldest = ctx->cache.newest = NULL;
    pthread_mutex_unlock(&ctx->lock);
    release_dropped(dead);
#if defined(__GLIBC__)
    malloc_trim(0); /* freed plans' memory back to the system, not only to malloc's free lists */
#endif
}

int fm_context_cache_size(const fm_context *ctx)
{
    return ctx ? atomic_load(&((fm_context *)ctx)->cache.count) : 0;
}

int64_t fm_context_cache_bytes(const fm_context *ctx)
{
    return ctx ? atomic_load(&((fm_context *)ctx)->cache.bytes) : 0;
}

int64_t fm_context_cache_max_bytes(const fm_context *ctx) { return ctx ? ctx->settings.cache_max_bytes : 0; }

fm_status fm_context_set_cache_max_bytes(fm_context *ctx, int64_t max_bytes)
{
    if (!ctx)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_context_set_cache_max_bytes: ctx is NULL");
    if (max_bytes < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_context_set_cache_max_bytes: max_bytes = %lld, expected >= 0",
                       (long long)max_bytes);
    fm_cache_entry *dead = NULL;
    pthread_mutex_lock(&ctx->lock);
    ctx->settings.cache_max_bytes = max_bytes;
    cache_make_room(ctx, 0, 1, &dead); /* the newest stays, as at insertion */
    pthread_mutex_unlock(&ctx->lock);
    release_dropped(dead);
    return FM_OK;
}

/* ---- backend selection ---- */
static fm_status try_backends(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **out)
{
    char reasons[512] = "";
    size_t used = 0;
    int offered = 0, forced_seen = 0;
    for (int oi = 0; oi < ctx->nbackends; oi++) { /* by descending priority */
        fm_backend_slot *slot = &ctx->backends[ctx->order[oi]];
        const fm_backend *b = slot->backend;
        if (ctx->settings.backend[0]) {
            if (strcmp(ctx->settings.backend, b->name) != 0)
                continue;
            forced_seen = 1;
        }
        if ((int)b->device != p->exec_device.type || !(b->ops & (1u << p->op)))
            continue;
        if (!slot->available) {
            fm_log_plan(ctx, "%s/%s: unavailable: %s", fm_op_name(p->op), b->name, slot->why);
            used += (size_t)snprintf(reasons + used, used < sizeof reasons ? sizeof reasons - used : 0,
                                     "%s%s: unavailable (%s)", offered++ ? "; " : "", b->name, slot->why);
            continue;
        }
        fm_plan *plan = fm_plan_alloc(p);
        if (!plan)
            return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory while planning", fm_op_name(p->op));
        plan->backend = b;
        plan->attach = att;
        fm_clear_error();
        fm_status s = b->plan(ctx, slot->state, p, plan);
        plan->attach = NULL;
        if (s == FM_OK) {
            plan->ctx = ctx;
            fm_context_retain_(ctx);
            fm_log_plan(ctx, "%s (chosen)", plan->describe);
            *out = plan;
            return FM_OK;
        }
        free(plan); /* nothing else owned yet: a failing backend frees what it made */
        if (s != FM_ERR_NOT_APPLICABLE)
            return s;
        fm_log_plan(ctx, "%s/%s: not applicable: %s", fm_op_name(p->op), b->name, fm_last_error());
        used += (size_t)snprintf(reasons + used, used < sizeof reasons ? sizeof reasons - used : 0, "%s%s: %s",
                                 offered++ ? "; " : "", b->name, fm_last_error());
    }
    if (ctx->settings.backend[0] && !forced_seen)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: FUSEMATH_BACKEND=%s names no registered backend",
                       fm_op_name(p->op), ctx->settings.backend);
    if (!offered)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "%s: no backend for %s on %s%s%s", fm_op_name(p->op),
                       fm_op_name(p->op), p->exec_device.type == FM_DEVICE_CUDA ? "cuda" : "cpu",
                       ctx->settings.backend[0] ? " with FUSEMATH_BACKEND=" : "", ctx->settings.backend);
    return fm_fail(FM_ERR_NOT_SUPPORTED, "%s: %s", fm_op_name(p->op), reasons);
}

fm_plan *fm_context_cache_get(fm_context *ctx, const fm_problem *p)
{
    uint64_t h = fm_problem_hash(p);
    pthread_mutex_lock(&ctx->lock);
    fm_plan *hit = cache_find(ctx, h, p);
    if (hit)
        fm_plan_retain(hit);
    pthread_mutex_unlock(&ctx->lock);
    return hit;
}

fm_status fm_plan_problem_with(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **out)
{
    fm_plan *hit = fm_context_cache_get(ctx, p);
    if (hit) {
        *out = hit;
        return FM_OK;
    }
    /* Plan outside the lock: planning may be slow (autotuning, JIT). Two threads
     * planning the same problem both succeed; the later insert replaces the first. */
    fm_plan *plan = NULL;
    fm_status s = fm_plan_problem_uncached(ctx, p, att, &plan);
    if (s != FM_OK)
        return s;
    fm_context_cache_put(ctx, plan);
    *out = plan;
    return FM_OK;
}

static fm_status plan_uncached(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **out);

fm_status fm_plan_problem_uncached(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **out)
{
    fm_status s = plan_uncached(ctx, p, att, out);
    if (s == FM_OK && p->best) { /* how FM_EXECUTION_BEST chose, before anyone else sees the plan */
        char why[192];
        fm_dispatch_describe(p, why, sizeof why);
        const size_t used = strlen((*out)->describe);
        snprintf((*out)->describe + used, sizeof (*out)->describe - used, "%s", why);
    }
    return s;
}

static fm_status plan_uncached(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **out)
{
    static const fm_attachments none;
    if (!att)
        att = &none;
    if (p->split) /* best split it over the cpu and a GPU (core/src/split.c) */
        return fm_plan_build_split(ctx, p, att, out);
    int staged = 0;
    for (int i = 0; i < p->nslots; i++)
        staged |= (p->present & (1u << i)) && (p->t[i].device.type != p->exec_device.type ||
                                                p->t[i].device.id != p->exec_device.id);
    if (staged) { /* host operands of a GPU call in overlapped chunks where the rule cuts them, else whole */
        char why[160] = "";
        fm_status s = fm_plan_build_pipelined(ctx, p, att, out, why, sizeof why);
        if (s != FM_ERR_NOT_APPLICABLE)
            return s;
        return fm_plan_build_staged(ctx, p, att, out, p->exec_device.type == FM_DEVICE_CUDA ? why : "");
    }
    const fm_operation *o = fm_operation_for(p->op);
    if (o && o->plan_steps) {
        fm_status s = o->plan_steps(ctx, p, att, out);
        if (s != FM_ERR_NOT_APPLICABLE)
            return s;
    }
    return try_backends(ctx, p, att, out);
}
