/* split.c : split execution. FM_EXECUTION_BEST may run a problem whose operands live on the host
 * partly on the cpu and partly on a GPU at once: indices [0, k) of its operation's chunk axis
 * (fm_operation.chunk: matmul's batch slabs or row panels, FFT batch slabs, RNG output blocks) on the
 * cpu, [k, extent) on the GPU, k chosen by the machine profile so that both are predicted to finish
 * together (fm_split_decide, called by core/src/dispatch.c when the problem is built), planned only
 * when that beats the better single device by FM_SPLIT_MIN_GAIN. The plan holds the two parts' plans,
 * each made through the planner from the chunk hook's sub-problems (the GPU part is staged or pipelined
 * as any host operands on a GPU); an execute runs the cpu part on the context's worker thread and the
 * GPU part on the calling thread, then joins. The parts write disjoint ranges of the caller's outputs
 * (checked when deciding and when planning); an RNG part is its stream range, so a split fill is
 * bit-identical to a single-device one. core/ knows no operation: everything goes through the table. */
#define _POSIX_C_SOURCE 200809L /* pthread_sigmask, sigfillset, getpid under -std=c11 */
#include "context.h"
#include "operation.h"
#include "profile.h"
#include "split.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the decision ---- */
static double later(const fm_split_model *m, int64_t k) { return fmax(m->cpu(m->user, k), m->gpu(m->user, k)); }

int64_t fm_split_choose(int64_t extent, double t_single, const fm_split_model *m, double *t)
{
    *t = INFINITY;
    if (extent < 2)
        return 0;
    /* k on a grid of `step` indices (at most FM_SPLIT_GRID steps: the predictions are not finer than that,
     * and each step costs a GPU-part prediction), the last grid point extent - 1. cpu(k) grows with k and
     * gpu(k) shrinks: find grid points lo < hi adjacent with cpu(lo) < gpu(lo), cpu(hi) >= gpu(hi). */
    const int64_t step = (extent - 1 + FM_SPLIT_GRID - 1) / FM_SPLIT_GRID;
    const int64_t last = (extent - 2) / step; /* grid index of the largest k: 1 + last * step <= extent - 1 */
#define AT(j) ((j) == last ? extent - 1 : 1 + (j) * step)
    int64_t lo = 0, hi = last;
    if (m->cpu(m->user, AT(lo)) >= m->gpu(m->user, AT(lo)))
        hi = lo; /* one index on the cpu already takes as long as the rest on the GPU */
    else if (m->cpu(m->user, AT(hi)) < m->gpu(m->user, AT(hi)))
        lo = hi; /* the GPU's one index still takes longer than the rest on the cpu */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (m->cpu(m->user, AT(mid)) >= m->gpu(m->user, AT(mid)))
            hi = mid;
        else
            lo = mid;
    }
    const double t_lo = later(m, AT(lo)), t_hi = hi != lo ? later(m, AT(hi)) : t_lo;
    const int64_t k = t_hi < t_lo ? AT(hi) : AT(lo);
#undef AT
    *t = fmin(t_lo, t_hi);
    return *t * FM_SPLIT_MIN_GAIN <= t_single ? k : 0;
}

int fm_split_cpu_threads(int threads, int copy_threads, int gpu_pipelined)
{
    /* the pipeline's host copies run on the context's staging threads (copy_pool.c: copy_threads,
     * FUSEMATH_PIPELINE_THREADS, unset min(8, cores / 2)) the whole time the GPU part runs: reserve
     * them all, so the two parts never oversubscribe the cores and the model's cpu time is the one the
     * part runs at; a staged part's copy is one thread. (A fixed 8 left an 8-core host's cpu part one
     * thread beside 4 staging threads.) */
    const int copies = copy_threads < 1 ? 1 : copy_threads;
    const int reserve = gpu_pipelined ? (threads < copies ? threads : copies) : 1;
    return threads - reserve >= 1 ? threads - reserve : 1;
}

typedef struct split_eval {
    const fm_split_query *s;
    int64_t extent;
    int cpu_threads;
    double cpu_speed, copy_speed; /* the profile's concurrency: each side's speed while the other runs */
    double touch;                 /* the whole problem's results' first touch on the host */
} split_eval;

static int curve_of(const fm_split_query *s) { return s->curve ? s->curve : (int)s->op->op; }

static double cpu_part(void *user, int64_t k)
{
    const split_eval *e = user;
    const fm_split_query *s = e->s;
    const double share = (double)k / (double)e->extent; /* of the work and of the results' fresh pages */
    return (fm_profile_predict(s->pf, e->cpu_threads, curve_of(s), s->dtype, 0, s->work * share) +
            e->touch * share) /
           e->cpu_speed;
}

/* The work of the split axis' indices [k, extent): the chunk axis is a batch axis, so work is linear in it. */
static double gpu_part(void *user, int64_t k)
{
    const split_eval *e = user;
    const fm_split_query *s = e->s;
    fm_problem sub;
    fm_chunk c;
    const char *why = "";
    if (s->op->chunk(s->q, k, e->extent, &sub, &c, &why) <= 0)
        return INFINITY;
    const double w = s->work * (double)(e->extent - k) / (double)e->extent;
    int pipelined = 0;
    /* all of it at the copies' slowed speed: the host part of a host-data GPU run is its copies, and
     * erring long only splits less */
    return fm_dispatch_gpu_time(s->pf, s->pipeline_mode, s->pipeline_threads, &sub, s->gpu,
                                fm_profile_predict(s->pf, s->threads, curve_of(s), s->dtype, 1, w), &pipelined) /
           e->copy_speed;
}

/* The parts [0, k) and [k, extent) of p, with their chunks; 0 (and *why) when p does not cut there or
 * their outputs would overlap in memory (a column-major d split by rows: the GPU part's copy back writes
 * its whole span), or an output is written whole by both. */
static int cut_parts(const fm_operation *op, const fm_problem *p, int64_t k, int64_t extent, fm_problem *qc,
                     fm_chunk *cc, fm_problem *qg, fm_chunk *cg, const char **why)
{
    if (op->chunk(p, 0, k, qc, cc, why) <= 0 || op->chunk(p, k, extent, qg, cg, why) <= 0)
        return 0;
    for (int i = 0; i < p->nslots; i++) {
        if (!(p->present & (1u << i)) || !((p->output_mask >> i) & 1))
            continue;
        if (((cc->whole | cg->whole) >> i) & 1)
            return *why = "an output is written whole by both parts", 0;
        const int64_t es = (int64_t)fm_dtype_size(p->t[i].dtype);
        int64_t clo, chi, glo, ghi;
        fm_tensor_byte_span(&qc->t[i], &clo, &chi);
        fm_tensor_byte_span(&qg->t[i], &glo, &ghi);
        clo += cc->offset[i] * es, chi += cc->offset[i] * es, glo += cg->offset[i] * es, ghi += cg->offset[i] * es;
        if (clo < ghi && glo < chi && chi > clo && ghi > glo)
            return *why = "the parts' outputs would overlap in memory (the split axis is not their outermost)", 0;
    }
    return 1;
}

int64_t fm_split_decide(const fm_split_query *s, double t_single, double *t_split, int *cpu_threads,
                        const char **why)
{
    *t_split = INFINITY;
    *cpu_threads = 0;
    const int64_t extent = s->op->chunk ? s->op->chunk(s->q, 0, 0, NULL, NULL, why) : 0;
    if (extent < 2) {
        if (extent == 1)
            *why = "the split axis has one index";
        return 0;
    }
    for (int i = 0; i < s->q->nslots; i++)
        if ((s->q->present & (1u << i)) && s->q->t[i].device.type != FM_DEVICE_CPU)
            return *why = "an operand is not on the host", 0;
    const double *speed = s->pf->concurrency[s->op->op];
    if (!(speed[0] > 0 && speed[1] > 0))
        return *why = "the profile has no concurrent run of this operation (fusemath.calibrate() measures one)", 0;
    split_eval e = {s, extent, fm_split_cpu_threads(s->threads, s->pipeline_threads, s->gpu_pipelined), speed[0], speed[1],
                    fm_dispatch_touch_time(s->pf, s->q)};
    const fm_split_model m = {cpu_part, gpu_part, (void *)&e};
    fm_problem qc, qg;
    fm_chunk cc, cg;
    /* The GPU part pipelines by pipeline.c's own rule on its sub-problem, whatever best predicted for
     * the whole: its host copy threads are reserved when it will (the cpu part's threads overlapping
     * them ran 1.6x slower than the GPU alone on the H200 host), which moves k, so choose again. */
    for (int pass = 0;; pass++) {
        const int64_t k = fm_split_choose(extent, t_single, &m, t_split);
        if (k == 0)
            return *why = "predicted under 10% faster than the better device", 0;
        if (!cut_parts(s->op, s->q, k, extent, &qc, &cc, &qg, &cg, why))
            return 0;
        int pipelines = fm_dispatch_would_pipeline(s->pipeline_mode, &qg, s->gpu);
        if (pipelines && s->pipeline_mode == FM_PIPELINE_AUTO) { /* auto cuts only where the model gains */
            const double w = s->work * (double)(extent - k) / (double)extent;
            (void)fm_dispatch_gpu_time(s->pf, s->pipeline_mode, s->pipeline_threads, &qg, s->gpu,
                                       fm_profile_predict(s->pf, s->threads, curve_of(s), s->dtype, 1, w), &pipelines);
        }
        const int threads = fm_split_cpu_threads(s->threads, s->pipeline_threads, pipelines);
        if (threads == e.cpu_threads) {
            *cpu_threads = threads;
            return k;
        }
        if (pass == 1)
            return *why = "the split moved when its GPU part pipelines", 0;
        e.cpu_threads = threads;
    }
}

/* ---- the worker: one thread per context running cpu parts, made on first use ---- */
typedef struct split_job {
    const fm_plan *inner;
    void *ptrs[FM_MAX_SLOTS];
    fm_exec_args args;
    atomic_int *failures; /* counts the parts that failed: the first to fail gets 0 */
    fm_status status;
    int rank;
    char msg[512];
} split_job;

typedef struct fm_split_worker {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    pid_t pid;       /* the process that made it: a forked child has no such thread */
    int busy;        /* a call holds the worker (from posting its job until it has joined) */
    int quit;
    split_job *job;  /* posted, not yet done */
} fm_split_worker;

static void run_job(split_job *j)
{
    fm_clear_error(); /* the message read below is this part's, never an earlier one's */
    j->status = j->inner->execute(j->inner, j->ptrs, &j->args, NULL);
    if (j->status != FM_OK) {
        j->rank = atomic_fetch_add(j->failures, 1);
        snprintf(j->msg, sizeof j->msg, "%s", fm_last_error());
    }
}

static void *worker_main(void *arg)
{
    fm_split_worker *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->job && !w->quit)
            pthread_cond_wait(&w->cond, &w->lock);
        if (!w->job)
            break;
        split_job *j = w->job;
        pthread_mutex_unlock(&w->lock);
        run_job(j);
        pthread_mutex_lock(&w->lock);
        w->job = NULL;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void *oneoff_main(void *arg)
{
    run_job(arg);
    return NULL;
}

/* A thread with every signal blocked (SIGINT goes to the caller's threads, as Python expects). */
static int start_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    const int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* The context's worker, made if need be, held for this call; NULL when another call holds it (or it
 * cannot be made, or this is a forked child): the caller then starts a thread of its own. */
static fm_split_worker *worker_acquire(fm_context *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    fm_split_worker *w = ctx->split_worker;
    if (!w && (w = calloc(1, sizeof *w)) != NULL) {
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        w->pid = getpid();
        if (start_thread(&w->thread, worker_main, w) != 0) {
            pthread_cond_destroy(&w->cond);
            pthread_mutex_destroy(&w->lock);
            free(w);
            w = NULL;
        }
        ctx->split_worker = w;
    }
    pthread_mutex_unlock(&ctx->lock);
    if (!w || w->pid != getpid())
        return NULL;
    pthread_mutex_lock(&w->lock);
    const int free_now = !w->busy;
    w->busy = 1;
    pthread_mutex_unlock(&w->lock);
    return free_now ? w : NULL;
}

void fm_context_split_free(fm_context *ctx)
{
    fm_split_worker *w = ctx->split_worker;
    ctx->split_worker = NULL;
    if (!w || w->pid != getpid()) /* a forked child: its parent's thread is not here to join */
        return;
    pthread_mutex_lock(&w->lock);
    w->quit = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* ---- the plan ---- */
typedef struct split_impl {
    fm_plan *cpu, *gpu;  /* the parts' plans: indices [0, k) on the cpu, [k, extent) on the GPU */
    fm_chunk cc, cg;     /* their element offsets and position shifts */
    int64_t k, extent;
} split_impl;

static void split_destroy(void *impl)
{
    split_impl *si = impl;
    fm_plan_release(si->cpu);
    fm_plan_release(si->gpu);
    free(si);
}

static void part_args(const fm_problem *p, const fm_chunk *c, void *const *ptrs, const fm_exec_args *args,
                      void **out, fm_exec_args *a)
{
    for (int i = 0; i < p->nslots; i++)
        out[i] = ptrs[i] ? (char *)ptrs[i] + c->offset[i] * (int64_t)fm_dtype_size(p->t[i].dtype) : NULL;
    *a = *args;
    a->ints[0] += c->position;
}

static fm_status split_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const split_impl *si = plan->impl;
    const fm_problem *p = &plan->problem;
    atomic_int failures = 0;
    split_job cpu = {.inner = si->cpu, .failures = &failures}, gpu = {.inner = si->gpu, .failures = &failures};
    part_args(p, &si->cc, ptrs, args, cpu.ptrs, &cpu.args);
    part_args(p, &si->cg, ptrs, args, gpu.ptrs, &gpu.args);
    fm_split_worker *w = worker_acquire(plan->ctx);
    pthread_t oneoff;
    int threaded = 1;
    if (w) {
        pthread_mutex_lock(&w->lock);
        w->job = &cpu;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
    } else {
        threaded = start_thread(&oneoff, oneoff_main, &cpu) == 0;
    }
    /* the GPU part here, on the caller's stream: a host caller's results are home when it returns */
    fm_clear_error();
    gpu.status = si->gpu->execute(si->gpu, gpu.ptrs, &gpu.args, stream);
    if (gpu.status != FM_OK) {
        gpu.rank = atomic_fetch_add(&failures, 1);
        snprintf(gpu.msg, sizeof gpu.msg, "%s", fm_last_error());
    }
    if (w) {
        pthread_mutex_lock(&w->lock);
        while (w->job)
            pthread_cond_wait(&w->cond, &w->lock);
        w->busy = 0;
        pthread_mutex_unlock(&w->lock);
    } else if (threaded) {
        pthread_join(oneoff, NULL);
    } else {
        run_job(&cpu); /* no thread to be had: one part after the other, still correct */
    }
    if (cpu.status == FM_OK && gpu.status == FM_OK)
        return FM_OK;
    const split_job *first = gpu.status != FM_OK && (cpu.status == FM_OK || gpu.rank < cpu.rank) ? &gpu : &cpu;
    return fm_fail(first->status, "%.400s (split: the %s part, indices [%lld, %lld) of %lld)", first->msg,
                   first == &gpu ? "cuda" : "cpu", (long long)(first == &gpu ? si->k : 0),
                   (long long)(first == &gpu ? si->extent : si->k), (long long)si->extent);
}

/* A part's problem: placed on dev, best's fields cleared (the outer describe() says how it chose), the
 * cpu part's threads lowered, each slot's alignment what its offset leaves. */
static void place_part(const fm_operation *op, const fm_problem *p, const fm_chunk *c, fm_device dev, int threads,
                       fm_problem *q)
{
    q->exec_device = dev;
    q->best = 0;
    q->best_ms[0] = q->best_ms[1] = 0;
    q->split = 0;
    q->split_ms = 0;
    q->split_cpu_threads = 0;
    if (dev.type == FM_DEVICE_CPU && op->cpu_threads && threads > 0) {
        const int32_t t = threads;
        memcpy(q->u.raw + op->cpu_threads, &t, sizeof t);
    }
    for (int i = 0; i < p->nslots; i++) {
        const uint64_t off = (uint64_t)(c->offset[i] * (int64_t)fm_dtype_size(p->t[i].dtype));
        const unsigned tz = off ? (unsigned)__builtin_ctzll(off) : 8;
        q->align_log2[i] = (uint8_t)(tz < p->align_log2[i] ? tz : p->align_log2[i]);
    }
    fm_problem_key_alignment(q);
}

/* Each slot's pointer alignment the parts' plans need at their offsets, asked of the caller's pointer:
 * FM_ERR_NOT_APPLICABLE when an offset itself breaks it. */
static fm_status required_align(const fm_problem *p, const split_impl *si, fm_plan *plan)
{
    for (int i = 0; i < p->nslots; i++) {
        const int64_t es = (int64_t)fm_dtype_size(p->t[i].dtype);
        const size_t rc = si->cpu->required_align[i], rg = si->gpu->required_align[i];
        const size_t r = rc > rg ? rc : rg;
        if (r > 1 && (((uint64_t)(si->cc.offset[i] * es) % r) || ((uint64_t)(si->cg.offset[i] * es) % r)))
            return fm_fail(FM_ERR_NOT_APPLICABLE, "%s: split: %s's part offsets break its %zu-byte alignment",
                           fm_op_name(p->op), p->slot_names[i], r);
        plan->required_align[i] = r;
    }
    return FM_OK;
}

static fm_status plan_parts(fm_context *ctx, const fm_problem *p, const fm_attachments *att, split_impl *si)
{
    const fm_operation *op = fm_operation_for(p->op);
    const char *why = "";
    si->extent = op && op->chunk ? op->chunk(p, 0, 0, NULL, NULL, &why) : 0;
    si->k = p->split;
    if (si->k <= 0 || si->k >= si->extent)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "%s: split at %lld of an axis of %lld: %s", fm_op_name(p->op),
                       (long long)si->k, (long long)si->extent, why);
    fm_problem qc, qg;
    if (!cut_parts(op, p, si->k, si->extent, &qc, &si->cc, &qg, &si->cg, &why))
        return fm_fail(FM_ERR_NOT_APPLICABLE, "%s: split: %s", fm_op_name(p->op), why);
    place_part(op, p, &si->cc, (fm_device){FM_DEVICE_CPU, 0}, p->split_cpu_threads, &qc);
    place_part(op, p, &si->cg, (fm_device){FM_DEVICE_CUDA, p->best >> 8}, 0, &qg);
    fm_status s = fm_plan_problem_with(ctx, &qc, att, &si->cpu);
    if (s == FM_OK)
        s = fm_plan_problem_with(ctx, &qg, att, &si->gpu);
    return s;
}

fm_status fm_plan_build_split(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **out)
{
    split_impl *si = calloc(1, sizeof *si);
    if (!si)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory while planning", fm_op_name(p->op));
    fm_status s = plan_parts(ctx, p, att, si);
    fm_plan *plan = s == FM_OK ? fm_plan_alloc(p) : NULL;
    if (s == FM_OK && !plan)
        s = fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory while planning", fm_op_name(p->op));
    if (s == FM_OK)
        s = required_align(p, si, plan);
    if (s != FM_OK) {
        free(plan);
        split_destroy(si);
        return s;
    }
    plan->impl = si;
    plan->execute = split_execute;
    plan->destroy_impl = split_destroy;
    plan->backend = si->gpu->backend;
    plan->ctx = ctx;
    fm_context_retain_(ctx);
    snprintf(plan->describe, sizeof plan->describe, "split [0, %lld) %.150s | [%lld, %lld) %.300s",
             (long long)si->k, si->cpu->describe, (long long)si->k, (long long)si->extent, si->gpu->describe);
    *out = plan;
    return FM_OK;
}
