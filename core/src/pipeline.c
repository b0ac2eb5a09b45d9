/* pipeline.c : pipelined host<->GPU transfers. A problem whose host operands run on a GPU is cut
 * along its operation's split axis (fm_operation.chunk: matmul row panels, FFT batch slabs, RNG
 * output blocks); chunk c's inputs are copied host->device on one stream while chunk c-1 is
 * computed on a second and an earlier chunk's results come back on a third, through pinned buffers
 * (a ring of three, the context's, reused across calls), so a call costs about the largest of the
 * copy and compute times instead of their sum. The device buffers are whole operands (the
 * stream-ordered pool, as staging.c's), the chunks' sub-plans (a full chunk, a remainder) are
 * planned once at plan time, and the plan stays immutable: a call's state is on its stack, the
 * context's pool is held by one call at a time (per GPU). Operations without the hook, and problems
 * the rule does not cut, are staged whole (staging.c). core/ knows no CUDA: streams, events and
 * pinned memory are fm_device_ops rows (backends/cuda/cuda_device.c). */
#include "context.h"
#include "copy_pool.h"
#include "operation.h"
#include "profile.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 3 /* pinned buffers per slot: host fill, DMA and drain in flight together */
#define LAG (RING - 1) /* chunks queued ahead of the one drained (a ring entry is refilled after its drain) */
#define AREA_ALIGN ((size_t)4096)
#define MAX_POOLS 16
enum { S_H2D, S_COMP, S_D2H, NSTREAMS };

/* ---- the chunk rule (pure) ---- */
/* FM_ERR_NOT_APPLICABLE with the reason in why (no fm_fail message: declining is no error) */
static fm_status __attribute__((format(printf, 3, 4))) decline(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return FM_ERR_NOT_APPLICABLE;
}

static int is_moved(const fm_problem *p, int i)
{
    const fm_device d = p->t[i].device;
    return (p->present & (1u << i)) && (d.type != p->exec_device.type || d.id != p->exec_device.id);
}

/* A split slot's byte step between consecutive indices of the split axis and a chunk's span:
 * FM_OK when chunks start at their span's lowest byte, do not overlap, and (outputs) have no gaps
 * the copy back would overwrite with stale bytes. */
static fm_status slot_layout(const fm_problem *p, const fm_problem *sub, int i, int64_t step_elems, int64_t chunk,
                             int64_t *step, int64_t *span, char *why, size_t n)
{
    const int64_t es = (int64_t)fm_dtype_size(p->t[i].dtype);
    int64_t lo, hi;
    fm_tensor_byte_span(&sub->t[i], &lo, &hi);
    *step = step_elems * es;
    *span = hi;
    if (step_elems <= 0 || lo < 0) {
        snprintf(why, n, "%s has a negative or zero stride along the split axis", p->slot_names[i]);
        return FM_ERR_NOT_APPLICABLE;
    }
    if (hi > *step * chunk) {
        snprintf(why, n, "%s's chunks would overlap in memory (its split axis is not its outermost)",
                 p->slot_names[i]);
        return FM_ERR_NOT_APPLICABLE;
    }
    if (((p->output_mask >> i) & 1) && hi - lo != fm_tensor_numel(&sub->t[i]) * es) {
        snprintf(why, n, "%s is not dense (the copy back would write its gaps)", p->slot_names[i]);
        return FM_ERR_NOT_APPLICABLE;
    }
    return FM_OK;
}

/* How many chunks: about FM_PIPELINE_CHUNKS of at least FM_PIPELINE_MIN_CHUNK moved bytes (auto; any
 * size under on), more where a chunk would pass FM_PIPELINE_MAX_CHUNK; at most one per index. */
static int64_t chunk_count(double total, int64_t extent, int mode)
{
    int64_t n = mode == FM_PIPELINE_ON ? FM_PIPELINE_CHUNKS : (int64_t)(total / (double)FM_PIPELINE_MIN_CHUNK);
    if (n > FM_PIPELINE_CHUNKS)
        n = FM_PIPELINE_CHUNKS;
    const int64_t big = (int64_t)((total + (double)FM_PIPELINE_MAX_CHUNK - 1) / (double)FM_PIPELINE_MAX_CHUNK);
    if (big > n)
        n = big;
    if (n > FM_PIPELINE_MAX_NCHUNKS)
        n = FM_PIPELINE_MAX_NCHUNKS;
    return n < extent ? n : extent;
}

static fm_status cut(const fm_operation *op, const fm_problem *p, int64_t lo, int64_t hi, fm_problem *sub,
                     fm_chunk *c, char *why, size_t n)
{
    const char *w = "";
    memset(c, 0, sizeof *c);
    if (op->chunk(p, lo, hi, sub, c, &w) <= 0) {
        snprintf(why, n, "%s", w);
        return FM_ERR_NOT_APPLICABLE;
    }
    return FM_OK;
}

fm_status fm_pipeline_geometry(const fm_problem *p, int mode, fm_pipeline_geom *g, char *why, size_t n)
{
    memset(g, 0, sizeof *g);
    const fm_operation *op = fm_operation_for(p->op);
    if (mode == FM_PIPELINE_OFF)
        return decline(why, n, "FUSEMATH_PIPELINE=off");
    if (!op || !op->chunk)
        return decline(why, n, "%s has no chunk hook", fm_op_name(p->op));
    if (p->exec_device.type != FM_DEVICE_CUDA)
        return decline(why, n, "the execution device is no GPU");
    uint32_t moved = 0;
    for (int i = 0; i < p->nslots; i++)
        if (is_moved(p, i)) {
            if (p->t[i].device.type != FM_DEVICE_CPU)
                return decline(why, n, "%s is on another GPU", p->slot_names[i]);
            moved |= 1u << i;
        }
    const char *w = "";
    const int64_t extent = op->chunk(p, 0, 0, NULL, NULL, &w);
    if (extent < 2)
        return decline(why, n, "%s", extent == 1 ? "the split axis has one index" : w);
    fm_problem sub;
    fm_chunk c0, c1;
    fm_status s;
    if ((s = cut(op, p, 1, 2, &sub, &c1, why, n)) != FM_OK || (s = cut(op, p, 0, 1, &sub, &c0, why, n)) != FM_OK)
        return s;
    g->whole = moved & c0.whole;
    g->split = moved & ~c0.whole;
    if (!g->split)
        return decline(why, n, "no moved operand splits");
    double per_index = 0;
    for (int i = 0; i < p->nslots; i++) {
        if ((g->whole >> i) & 1) {
            if ((p->output_mask >> i) & 1)
                return decline(why, n, "%s is written whole by every chunk", p->slot_names[i]);
            int64_t lo, hi;
            fm_tensor_byte_span(&p->t[i], &lo, &hi);
            g->whole_bytes += (double)(hi - lo);
        } else if ((g->split >> i) & 1) {
            per_index += (double)((c1.offset[i] - c0.offset[i]) * (int64_t)fm_dtype_size(p->t[i].dtype));
        }
    }
    const int64_t want = chunk_count(per_index * (double)extent, extent, mode);
    if (want < 2)
        return decline(why, n, "%.2f MiB moved: under two chunks of %lld MiB", per_index * (double)extent / 1048576.0,
                        (long long)(FM_PIPELINE_MIN_CHUNK >> 20));
    g->extent = extent;
    g->chunk = (extent + want - 1) / want;
    g->nchunks = (int)((extent + g->chunk - 1) / g->chunk);
    g->last = extent - (int64_t)(g->nchunks - 1) * g->chunk;
    if ((s = cut(op, p, 0, g->chunk, &sub, &c0, why, n)) != FM_OK)
        return s;
    double entry = 0; /* one ring entry of pinned memory: three are held */
    for (int i = 0; i < p->nslots; i++) {
        if (!((g->split >> i) & 1))
            continue;
        int64_t step, lo, hi;
        if ((s = slot_layout(p, &sub, i, c1.offset[i] - c0.offset[i], g->chunk, &step, &g->span[i], why, n)) != FM_OK)
            return s;
        fm_tensor_byte_span(&p->t[i], &lo, &hi);
        const int out = (p->output_mask >> i) & 1;
        *(out ? &g->out_bytes : &g->in_bytes) += (double)(hi - lo); /* (an in-place call also copies d in) */
        entry += (double)g->span[i];
    }
    if (entry > (double)FM_PIPELINE_MAX_RING_ENTRY)
        return decline(why, n, "a chunk spans %.0f MiB, over the pinned ring's %lld MiB per entry", entry / 1048576.0,
                       (long long)(FM_PIPELINE_MAX_RING_ENTRY >> 20));
    return FM_OK;
}

/* ---- the cost model (auto's decline, FM_EXECUTION_BEST's prediction) ---- */
/* Bytes per second of the staging threads' copies between pageable and pinned memory, filling (dir 0)
 * or draining (dir 1): whole staging's own copies (cuda_device.c: pinned bounce buffers filled by up
 * to 8 threads while the DMA runs) are bounded by the same host copies, so its measured rate that way
 * (the profile's, else the built-in 5 GB/s; a drain into fresh pages pays their first touch in both)
 * at min(threads, 8) / 8 of it. */
static double host_rate(const fm_profile *pf, int dir, int threads)
{
    const double gib = 1073741824.0;
    return gib / fm_profile_copy_time(pf, dir, gib) * (threads < 8 ? (threads < 1 ? 1 : threads) : 8) / 8.0;
}

double fm_pipeline_predict(const fm_profile *pf, const fm_pipeline_geom *g, double compute, int threads,
                           double *staged)
{
    /* the pinned DMA at twice the staged host->device rate, each way (two copy engines) */
    const double fill = g->in_bytes / host_rate(pf, 0, threads) + g->out_bytes / host_rate(pf, 1, threads);
    const double dma_in = 0.5 * fm_profile_copy_time(pf, 0, g->in_bytes);
    const double dma_out = 0.5 * fm_profile_copy_time(pf, 0, g->out_bytes);
    if (staged) /* every moved byte through whole staging, then the compute, then the copy back */
        *staged = fm_profile_copy_time(pf, 0, g->in_bytes + g->whole_bytes) + compute +
                  fm_profile_copy_time(pf, 1, g->out_bytes);
    /* the whole operands first, then the slowest of the compute, the host copies (fills and drains on
     * one pool, one after the other) and each DMA direction; plus the ramp: chunk 0's fill and DMA in
     * before any compute, the last chunk's DMA out and drain after it */
    const double steady = fmax(fmax(compute, fill), fmax(dma_in, dma_out));
    const double ramp = (fill + dma_in + dma_out) / (g->nchunks > 0 ? g->nchunks : 1);
    return fm_profile_copy_time(pf, 0, g->whole_bytes) + steady + ramp;
}

/* ---- the context's pool: streams, events, pinned ring (one call at a time per GPU) ---- */
typedef struct fm_pipeline_pool {
    pthread_mutex_t lock;
    const fm_device_ops *ops;
    void *stream[NSTREAMS];
    void *start, *end[NSTREAMS];
    void *h2d_done[RING], *comp_done[RING], *d2h_done[RING];
    void *pinned;
    size_t pinned_bytes;
} fm_pipeline_pool;

static void pool_free(fm_pipeline_pool *pl)
{
    const fm_device_ops *o = pl->ops;
    void **events[] = {&pl->start, &pl->end[0], &pl->end[1], &pl->end[2]};
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
        if (*events[i])
            o->event_destroy(*events[i]);
    for (int b = 0; b < RING; b++) {
        void *ev[] = {pl->h2d_done[b], pl->comp_done[b], pl->d2h_done[b]};
        for (int e = 0; e < 3; e++)
            if (ev[e])
                o->event_destroy(ev[e]);
    }
    for (int i = 0; i < NSTREAMS; i++)
        if (pl->stream[i])
            o->stream_destroy(pl->stream[i]);
    if (pl->pinned)
        o->host_free_pinned(pl->pinned);
    pthread_mutex_destroy(&pl->lock);
    free(pl);
}

static fm_status pool_make(const fm_device_ops *o, int dev, fm_pipeline_pool **out)
{
    fm_pipeline_pool *pl = calloc(1, sizeof *pl);
    if (!pl)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "pipeline: out of host memory");
    pthread_mutex_init(&pl->lock, NULL);
    pl->ops = o;
    fm_status s = FM_OK;
    for (int i = 0; i < NSTREAMS && s == FM_OK; i++)
        s = o->stream_create(dev, &pl->stream[i]);
    void **events[] = {&pl->start, &pl->end[0], &pl->end[1], &pl->end[2]};
    for (size_t i = 0; i < sizeof events / sizeof events[0] && s == FM_OK; i++)
        s = o->event_create(dev, events[i]);
    for (int b = 0; b < RING && s == FM_OK; b++) {
        s = o->event_create(dev, &pl->h2d_done[b]);
        if (s == FM_OK)
            s = o->event_create(dev, &pl->comp_done[b]);
        if (s == FM_OK)
            s = o->event_create(dev, &pl->d2h_done[b]);
    }
    if (s != FM_OK) {
        pool_free(pl);
        return s;
    }
    *out = pl;
    return FM_OK;
}

/* The pool of GPU dev, made on first use, returned locked. */
static fm_status pool_acquire(fm_context *ctx, const fm_device_ops *o, int dev, fm_pipeline_pool **out)
{
    if (dev < 0 || dev >= MAX_POOLS)
        return fm_fail(FM_ERR_UNAVAILABLE, "pipeline: cuda:%d is past the %d GPUs pipelining serves", dev, MAX_POOLS);
    pthread_mutex_lock(&ctx->lock);
    fm_status s = FM_OK;
    if (!ctx->pipeline_pools[dev])
        s = pool_make(o, dev, &ctx->pipeline_pools[dev]);
    fm_pipeline_pool *pl = ctx->pipeline_pools[dev];
    pthread_mutex_unlock(&ctx->lock);
    if (s != FM_OK)
        return s;
    pthread_mutex_lock(&pl->lock);
    *out = pl;
    return FM_OK;
}

void fm_context_pipeline_free(fm_context *ctx)
{
    for (int i = 0; i < MAX_POOLS; i++)
        if (ctx->pipeline_pools[i]) {
            pool_free(ctx->pipeline_pools[i]);
            ctx->pipeline_pools[i] = NULL;
        }
}

/* ---- the plan ---- */
typedef struct pipe_impl {
    fm_plan *inner, *inner_last; /* a full chunk's plan; the remainder's (NULL: none) */
    const fm_operation *op;
    const fm_device_ops *ops;    /* the GPU's */
    fm_pipeline_geom g;
    size_t area[FM_MAX_SLOTS];   /* split slot i's place in one ring entry of pinned memory */
    size_t ring_bytes;           /* one ring entry */
} pipe_impl;

/* Per-call state, on the caller's stack. */
typedef struct pipe_call {
    const pipe_impl *pi;
    const fm_problem *pr;
    fm_pipeline_pool *pl;
    void *const *ptrs;
    void *dev[FM_MAX_SLOTS];     /* moved slots: the device copy, addressed as ptrs[i] is (span start - lo) */
    int needs_in[FM_MAX_SLOTS];
    int64_t off[RING][FM_MAX_SLOTS]; /* byte offset of chunk c's first element in slot i, by c % RING */
    int64_t bytes[RING][FM_MAX_SLOTS];
    fm_copy_pool *cp;            /* the context's staging threads (NULL: this thread copies) */
    fm_copy_job fill;            /* the chunk being filled */
    fm_copy_job drain[RING];     /* chunk c's drain, by c % RING */
} pipe_call;

static char *ring_area(const pipe_call *k, int b, int i)
{
    return (char *)k->pl->pinned + (size_t)b * k->pi->ring_bytes + k->pi->area[i];
}

/* Chunk c's place: its sub-problem and cut. */
static fm_status chunk_cut(const pipe_call *k, int64_t c, fm_problem *sub, fm_chunk *ch)
{
    const pipe_impl *pi = k->pi;
    const int64_t lo = c * pi->g.chunk, hi = lo + pi->g.chunk < pi->g.extent ? lo + pi->g.chunk : pi->g.extent;
    char why[128];
    if (cut(pi->op, k->pr, lo, hi, sub, ch, why, sizeof why) != FM_OK)
        return fm_fail(FM_ERR_INTERNAL, "%s: pipeline chunk %lld: %s", pi->op->name, (long long)c, why);
    return FM_OK;
}

/* Chunk c's host fill handed to the staging threads, once its ring entry is free (chunk c - RING's
 * drain moved out and its DMA in done); k->fill is waited for before the chunk's DMA is queued. */
static fm_status fill_chunk(pipe_call *k, int64_t c)
{
    const pipe_impl *pi = k->pi;
    const fm_problem *pr = k->pr;
    const int b = (int)(c % RING);
    fm_problem sub;
    fm_chunk ch;
    fm_status s = chunk_cut(k, c, &sub, &ch);
    if (s != FM_OK)
        return s;
    if (c >= RING) {
        fm_copy_wait(k->cp, &k->drain[b]);
        if ((s = pi->ops->event_sync(k->pl->h2d_done[b])) != FM_OK)
            return s;
    }
    fm_copy_job_init(&k->fill);
    for (int i = 0; i < pr->nslots; i++) {
        if (!k->ptrs[i])
            continue;
        const int64_t off = ch.offset[i] * (int64_t)fm_dtype_size(pr->t[i].dtype);
        int64_t slo, shi;
        fm_tensor_byte_span(&sub.t[i], &slo, &shi);
        k->off[b][i] = off;
        k->bytes[b][i] = shi;
        if (((pi->g.split >> i) & 1) && k->needs_in[i] && shi > 0)
            fm_copy_submit(k->cp, &k->fill, ring_area(k, b, i), (const char *)k->ptrs[i] + off, (size_t)shi);
    }
    return FM_OK;
}

/* Chunk c's copies in (its fill done), compute and copies back queued on the pool's streams. */
static fm_status queue_chunk(pipe_call *k, int64_t c, const fm_exec_args *args)
{
    const pipe_impl *pi = k->pi;
    const fm_problem *pr = k->pr;
    const fm_device_ops *o = pi->ops;
    fm_pipeline_pool *pl = k->pl;
    const int b = (int)(c % RING);
    fm_problem sub;
    fm_chunk ch;
    fm_status s = chunk_cut(k, c, &sub, &ch);
    void *inner_ptrs[FM_MAX_SLOTS] = {0};
    for (int i = 0; i < pr->nslots && s == FM_OK; i++) {
        if (!k->ptrs[i])
            continue;
        inner_ptrs[i] = (char *)(k->dev[i] ? k->dev[i] : k->ptrs[i]) + k->off[b][i];
        if (((pi->g.split >> i) & 1) && k->needs_in[i] && k->bytes[b][i] > 0)
            s = o->copy_async((char *)k->dev[i] + k->off[b][i], ring_area(k, b, i), (size_t)k->bytes[b][i],
                              pl->stream[S_H2D]);
    }
    if (s != FM_OK || (s = o->event_record(pl->h2d_done[b], pl->stream[S_H2D])) != FM_OK ||
        (s = o->stream_wait_event(pl->stream[S_COMP], pl->h2d_done[b])) != FM_OK)
        return s;
    fm_exec_args a = *args;
    a.ints[0] += ch.position;
    const fm_plan *inner = c < pi->g.nchunks - 1 || pi->g.last == pi->g.chunk ? pi->inner : pi->inner_last;
    if ((s = inner->execute(inner, inner_ptrs, &a, pl->stream[S_COMP])) != FM_OK ||
        (s = o->event_record(pl->comp_done[b], pl->stream[S_COMP])) != FM_OK ||
        (s = o->stream_wait_event(pl->stream[S_D2H], pl->comp_done[b])) != FM_OK)
        return s;
    for (int i = 0; i < pr->nslots && s == FM_OK; i++)
        if (((pi->g.split >> i) & 1) && ((pr->output_mask >> i) & 1) && k->ptrs[i] && k->bytes[b][i])
            s = o->copy_async(ring_area(k, b, i), (char *)k->dev[i] + k->off[b][i], (size_t)k->bytes[b][i],
                              pl->stream[S_D2H]);
    return s != FM_OK ? s : o->event_record(pl->d2h_done[b], pl->stream[S_D2H]);
}

/* Chunk c's results, once back in the pinned ring, handed to the staging threads for the caller's
 * memory (k->drain[c % RING], waited for before the entry is refilled and before the call returns). */
static fm_status drain_chunk(pipe_call *k, int64_t c)
{
    const int b = (int)(c % RING);
    fm_copy_wait(k->cp, &k->drain[b]); /* chunk c - RING's, waited for by chunk c's fill already */
    fm_copy_job_init(&k->drain[b]);
    fm_status s = k->pi->ops->event_sync(k->pl->d2h_done[b]);
    for (int i = 0; i < k->pr->nslots && s == FM_OK; i++)
        if (((k->pi->g.split >> i) & 1) && ((k->pr->output_mask >> i) & 1) && k->ptrs[i] && k->bytes[b][i])
            fm_copy_submit(k->cp, &k->drain[b], (char *)k->ptrs[i] + k->off[b][i], ring_area(k, b, i),
                           (size_t)k->bytes[b][i]);
    return s;
}

/* The device copies of the moved slots (whole spans, on the caller's stream), the whole inputs queued. */
static fm_status call_begin(pipe_call *k, void *stream)
{
    const pipe_impl *pi = k->pi;
    const fm_problem *pr = k->pr;
    const fm_device_ops *o = pi->ops;
    fm_status s = FM_OK;
    for (int i = 0; i < pr->nslots && s == FM_OK; i++) {
        if (!(((pi->g.split | pi->g.whole) >> i) & 1) || !k->ptrs[i])
            continue;
        int64_t lo, hi;
        fm_tensor_byte_span(&pr->t[i], &lo, &hi);
        void *base = NULL;
        if ((s = o->alloc(pr->exec_device.id, (size_t)(hi - lo), stream, &base)) != FM_OK)
            break;
        k->dev[i] = (char *)base - lo;
        const int partner = pr->inplace_partner[i];
        k->needs_in[i] = !((pr->output_mask >> i) & 1) || (partner >= 0 && k->ptrs[partner] == k->ptrs[i]);
    }
    if (s != FM_OK || (s = o->event_record(k->pl->start, stream)) != FM_OK)
        return s;
    for (int j = 0; j < NSTREAMS && s == FM_OK; j++)
        s = o->stream_wait_event(k->pl->stream[j], k->pl->start);
    for (int i = 0; i < pr->nslots && s == FM_OK; i++) {
        if (!((pi->g.whole >> i) & 1) || !k->ptrs[i])
            continue;
        int64_t lo, hi;
        fm_tensor_byte_span(&pr->t[i], &lo, &hi);
        s = o->copy((char *)k->dev[i] + lo, pr->exec_device, (const char *)k->ptrs[i] + lo, pr->t[i].device,
                    (size_t)(hi - lo), k->pl->stream[S_H2D], 0);
    }
    return s;
}

/* The caller's stream after the pool's streams; the device copies freed on it. */
static fm_status call_end(pipe_call *k, void *stream, fm_status s)
{
    const fm_device_ops *o = k->pi->ops;
    fm_pipeline_pool *pl = k->pl;
    if (s != FM_OK) /* nothing queued may still touch the ring or the device copies */
        for (int j = 0; j < NSTREAMS; j++)
            o->stream_sync(pl->stream[j]);
    for (int j = 0; j < NSTREAMS && s == FM_OK; j++)
        if ((s = o->event_record(pl->end[j], pl->stream[j])) == FM_OK)
            s = o->stream_wait_event(stream, pl->end[j]);
    if (s != FM_OK)
        for (int j = 0; j < NSTREAMS; j++)
            o->stream_sync(pl->stream[j]);
    for (int i = 0; i < k->pr->nslots; i++)
        if (k->dev[i]) {
            int64_t lo, hi;
            fm_tensor_byte_span(&k->pr->t[i], &lo, &hi);
            o->free(k->pr->exec_device.id, (char *)k->dev[i] + lo, stream);
        }
    return s;
}

static fm_status pipelined_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const pipe_impl *pi = plan->impl;
    pipe_call k = {.pi = pi, .pr = &plan->problem, .ptrs = ptrs};
    fm_status s = pool_acquire(plan->ctx, pi->ops, plan->problem.exec_device.id, &k.pl);
    if (s != FM_OK)
        return s;
    fm_pipeline_pool *pl = k.pl;
    const size_t need = RING * pi->ring_bytes;
    if (pl->pinned_bytes < need) { /* no call is in flight: the previous one drained everything */
        if (pl->pinned)
            pi->ops->host_free_pinned(pl->pinned);
        pl->pinned = NULL;
        pl->pinned_bytes = 0;
        if ((s = pi->ops->host_alloc_pinned(need, &pl->pinned)) != FM_OK) {
            pthread_mutex_unlock(&pl->lock);
            return s;
        }
        pl->pinned_bytes = need;
    }
    /* Chunk c's fill goes to the staging threads, then (once the GPU has it back) chunk c - LAG's drain;
     * this thread waits for the fill and queues chunk c's DMA, compute and copy back. The threads take
     * the fill first (it is what the next DMA waits for), the drain behind it, while the GPU works on
     * chunk c - 1: the host copies run back to back, overlapped with the GPU's. */
    k.cp = fm_context_copy_pool(plan->ctx);
    fm_copy_job_init(&k.fill);
    for (int b = 0; b < RING; b++)
        fm_copy_job_init(&k.drain[b]);
    s = call_begin(&k, stream);
    int64_t drained = 0;
    for (int64_t c = 0; c < pi->g.nchunks && s == FM_OK; c++) {
        if ((s = fill_chunk(&k, c)) == FM_OK && c >= LAG)
            s = drain_chunk(&k, drained++);
        fm_copy_wait(k.cp, &k.fill);
        if (s == FM_OK)
            s = queue_chunk(&k, c, args);
    }
    while (s == FM_OK && drained < pi->g.nchunks)
        s = drain_chunk(&k, drained++);
    for (int b = 0; b < RING; b++) /* also after an error: no part may still touch the ring */
        fm_copy_wait(k.cp, &k.drain[b]);
    s = call_end(&k, stream, s);
    pthread_mutex_unlock(&pl->lock);
    return s;
}

static void pipe_destroy(void *impl)
{
    pipe_impl *pi = impl;
    fm_plan_release(pi->inner);
    fm_plan_release(pi->inner_last);
    free(pi);
}

/* The chunk [lo, hi)'s problem on the GPU: moved slots there, every slot's alignment what the chunks'
 * offsets (multiples of step * chunk bytes from a pool allocation) leave. */
static fm_status sub_problem(const pipe_impl *pi, const fm_problem *p, int64_t lo, int64_t hi, fm_problem *q,
                             char *why, size_t n)
{
    fm_chunk c1, c0;
    fm_problem unused;
    fm_status s;
    if ((s = cut(pi->op, p, pi->g.chunk, 2 * pi->g.chunk < pi->g.extent ? 2 * pi->g.chunk : pi->g.extent, &unused,
                 &c1, why, n)) != FM_OK ||
        (s = cut(pi->op, p, lo, hi, q, &c0, why, n)) != FM_OK)
        return s;
    q->best = 0; /* the inner plan runs where it was told; the outer describe() says why */
    q->best_ms[0] = q->best_ms[1] = 0;
    for (int i = 0; i < p->nslots; i++) {
        if (!(p->present & (1u << i)))
            continue;
        unsigned al = is_moved(p, i) ? 8 : p->align_log2[i];
        const uint64_t step = (uint64_t)(c1.offset[i] * (int64_t)fm_dtype_size(p->t[i].dtype));
        if (step) {
            const unsigned tz = (unsigned)__builtin_ctzll(step);
            al = tz < al ? tz : al;
        }
        if (is_moved(p, i))
            q->t[i].device = p->exec_device;
        q->align_log2[i] = (uint8_t)al;
    }
    fm_problem_key_alignment(q);
    return FM_OK;
}

static fm_status plan_inner(fm_context *ctx, pipe_impl *pi, const fm_problem *p, const fm_attachments *att,
                            char *why, size_t n)
{
    fm_problem q;
    fm_status s = sub_problem(pi, p, 0, pi->g.chunk, &q, why, n);
    if (s == FM_OK && (s = fm_plan_problem_with(ctx, &q, att, &pi->inner)) != FM_OK)
        return s;
    if (s == FM_OK && pi->g.last != pi->g.chunk && (s = sub_problem(pi, p, pi->g.extent - pi->g.last, pi->g.extent,
                                                                    &q, why, n)) == FM_OK)
        s = fm_plan_problem_with(ctx, &q, att, &pi->inner_last);
    return s;
}

/* FUSEMATH_PIPELINE=auto: pipeline only where the model predicts it beats staging the whole (the
 * compute from the operation's problem_work on the context's profile, none when it has no hook) */
static fm_status auto_rule(fm_context *ctx, const fm_problem *p, const fm_pipeline_geom *g, double *t_pipe,
                           double *t_staged, char *why, size_t n)
{
    const fm_operation *op = fm_operation_for(p->op);
    const fm_profile *pf = fm_context_profile(ctx);
    fm_dtype dt = FM_DTYPE_INVALID;
    int variant = 0; /* the curve best and the split read for this problem (a batch of 1-D FFTs: fft.1) */
    const double work = op->problem_work ? op->problem_work(p, &dt, &variant) : -1;
    const double compute = work >= 0 ? fm_profile_predict(pf, 1, FM_PROFILE_CURVE(p->op, variant), dt, 1, work) : 0;
    const int threads = ctx->settings.pipeline_threads;
    *t_pipe = fm_pipeline_predict(pf, g, compute, threads, t_staged);
    if (ctx->settings.pipeline != FM_PIPELINE_AUTO || *t_pipe < *t_staged)
        return FM_OK;
    return decline(why, n, "auto: predicted %.3g ms pipelined >= %.3g ms staged whole (compute %.3g ms, host "
                   "copies %.3g GB/s on %d threads, %s)", *t_pipe * 1e3, *t_staged * 1e3, compute * 1e3,
                   host_rate(pf, 0, threads) / 1e9, threads, pf ? "measured profile" : "built-in rates");
}

static _Atomic(const fm_device_ops *) test_ops;

void fm_pipeline_test_device(const fm_device_ops *ops) { atomic_store(&test_ops, ops); }

fm_status fm_plan_build_pipelined(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **out,
                                  char *why, size_t n)
{
    const fm_device_ops *o = atomic_load(&test_ops);
    const int gpus = o ? 1 : fm_cuda_device_count();
    if (!o)
        o = fm_device_ops_for(FM_DEVICE_CUDA);
    if (p->exec_device.type != FM_DEVICE_CUDA || gpus <= p->exec_device.id || !o || !o->copy_async ||
        !o->stream_create)
        return decline(why, n, "no GPU"); /* staging says what is missing */
    if (p->exec_device.id >= MAX_POOLS) /* the context keeps streams and rings for the first MAX_POOLS */
        return decline(why, n, "the device's index is past the GPUs pipelining serves");
    pipe_impl *pi = calloc(1, sizeof *pi);
    if (!pi)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory while planning", fm_op_name(p->op));
    pi->op = fm_operation_for(p->op);
    pi->ops = o;
    fm_status s = fm_pipeline_geometry(p, ctx->settings.pipeline, &pi->g, why, n);
    double t_pipe = -1, t_staged = -1;
    if (s == FM_OK)
        s = auto_rule(ctx, p, &pi->g, &t_pipe, &t_staged, why, n);
    if (s == FM_OK && (s = plan_inner(ctx, pi, p, att, why, n)) != FM_OK && s != FM_ERR_NOT_APPLICABLE &&
        s != FM_ERR_OUT_OF_MEMORY) { /* no backend for a chunk's shape: the whole problem may still plan */
        snprintf(why, n, "a chunk's plan: %.120s", fm_last_error());
        s = FM_ERR_NOT_APPLICABLE;
    }
    if (s != FM_OK) {
        pipe_destroy(pi);
        return s;
    }
    char moved[64] = "";
    size_t used = 0;
    for (int i = 0; i < p->nslots; i++) {
        if (!(((pi->g.split | pi->g.whole) >> i) & 1))
            continue;
        if ((pi->g.split >> i) & 1) {
            pi->area[i] = pi->ring_bytes;
            pi->ring_bytes += ((size_t)pi->g.span[i] + AREA_ALIGN - 1) & ~(AREA_ALIGN - 1);
        }
        used += (size_t)snprintf(moved + used, used < sizeof moved ? sizeof moved - used : 0, "%s%s",
                                 used ? "," : "", p->slot_names[i]);
    }
    fm_plan *plan = fm_plan_alloc(p);
    if (!plan) {
        pipe_destroy(pi);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory while planning", fm_op_name(p->op));
    }
    for (int i = 0; i < p->nslots; i++) /* operands already on the GPU: as the chunks' plans need them */
        if ((p->present & (1u << i)) && !is_moved(p, i)) { /* the remainder's plan may want more */
            const size_t a = pi->inner->required_align[i];
            const size_t b = pi->inner_last ? pi->inner_last->required_align[i] : 0;
            plan->required_align[i] = a > b ? a : b;
        }
    plan->impl = pi;
    plan->execute = pipelined_execute;
    plan->destroy_impl = pipe_destroy;
    plan->backend = pi->inner->backend;
    plan->ctx = ctx;
    fm_context_retain_(ctx);
    snprintf(plan->describe, sizeof plan->describe,
             "%.400s pipelined chunks=%d (%lld of %lld, last %lld) staged=%.40s threads=%d predicted %.3g ms "
             "(staged whole %.3g)", pi->inner->describe, pi->g.nchunks, (long long)pi->g.chunk,
             (long long)pi->g.extent, (long long)pi->g.last, moved, ctx->settings.pipeline_threads, t_pipe * 1e3,
             t_staged * 1e3);
    *out = plan;
    return FM_OK;
}
