/* calibrate.c : fm_context_calibrate. Every operation with a calibration_problem hook is planned and
 * timed at its few sizes on the cpu and on the first GPU through the public planning entry points,
 * on operands filled with small pseudo-random values (a solver needs a regular matrix); the copy
 * rates between host and GPU are timed with fm_memory_copy on pageable memory, as staging copies a
 * caller's arrays. The new profile is installed only when everything was measured. */
#define _POSIX_C_SOURCE 200809L /* gmtime_r, clock_gettime under -std=c11 */
/* ... and split execution's concurrency: one operation's cpu call run alone, the host <-> GPU copies
 * alone, then both at once on two threads (profile.h: concurrency). */
#include "context.h"
#include "operation.h"
#include "profile.h"
#include "split.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static fm_status device_wait(fm_device dev)
{
    const fm_device_ops *ops = fm_device_ops_for(dev.type);
    return ops && ops->sync ? ops->sync(dev.id) : FM_OK;
}

/* Values in [-1, 1) for float and complex dtypes (zero bytes for others): never singular in practice. */
static void fill_pattern(void *buf, fm_dtype dt, size_t bytes, uint64_t seed)
{
    const int complex_ = fm_dtype_is_complex(dt);
    const fm_dtype real = dt == FM_C64 ? FM_F32 : dt == FM_C128 ? FM_F64 : dt;
    const size_t n = bytes / fm_dtype_size(dt) * (complex_ ? 2 : 1);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    memset(buf, 0, bytes);
    for (size_t i = 0; i < n && (real == FM_F32 || real == FM_F64); i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const double v = (double)(x >> 11) * 0x1p-52 - 1.0;
        if (real == FM_F32)
            ((float *)buf)[i] = (float)v;
        else
            ((double *)buf)[i] = v;
    }
}

typedef struct point {
    fm_tensor t[FM_MAX_SLOTS];
    const fm_tensor *tp[FM_MAX_SLOTS];
    void *ptrs[FM_MAX_SLOTS];
    fm_device dev;
} point;

static fm_status point_operands(const fm_operation *op, uint32_t slots, point *pt)
{
    for (int i = 0; i < op->nslots; i++) {
        if (!(slots & (1u << i)))
            continue;
        const size_t bytes = (size_t)fm_tensor_numel(&pt->t[i]) * fm_dtype_size(pt->t[i].dtype);
        fm_status s = fm_memory_alloc(pt->dev, bytes, &pt->ptrs[i]);
        if (s != FM_OK)
            return s;
        if (op->slot_roles[i] != FM_SLOT_OUTPUT) {
            void *host = malloc(bytes ? bytes : 1);
            if (!host)
                return fm_fail(FM_ERR_OUT_OF_MEMORY, "calibrate: out of host memory");
            fill_pattern(host, pt->t[i].dtype, bytes, (uint64_t)i);
            s = fm_memory_copy(pt->ptrs[i], pt->dev, host, (fm_device){FM_DEVICE_CPU, 0}, bytes);
            free(host);
            if (s != FM_OK)
                return s;
        }
        pt->t[i].data = pt->ptrs[i];
        pt->tp[i] = &pt->t[i];
    }
    return FM_OK;
}

/* The fastest of a few calls (each waited for) of calibration problem `index`: *work < 0 past the last. */
static fm_status measure_point(fm_context *ctx, const fm_operation *op, int execution, int index, int quick,
                               double *work, double *seconds, fm_dtype *dt, int *curve)
{
    point pt;
    memset(&pt, 0, sizeof pt);
    fm_options_room opts;
    uint32_t slots = 0;
    *work = -1;
    if (!op->calibration_problem(index, quick, execution, pt.t, opts.bytes, &slots))
        return FM_OK;
    for (int i = 0; i < op->nslots; i++)
        if (slots & (1u << i))
            pt.dev = pt.t[i].device;
    fm_plan *plan = NULL;
    fm_status s = point_operands(op, slots, &pt);
    if (s == FM_OK)
        s = fm_plan_create(ctx, op->op, pt.tp, op->nslots, opts.bytes, &plan);
    const double budget = quick ? 0.05 : 0.2;
    double best = 1e30, spent = 0;
    for (int r = 0; s == FM_OK && r < 200 && (r < 6 || spent < budget); r++) { /* a warm-up, then >= 5 */
        const double t0 = fm_now_seconds();
        if ((s = fm_plan_execute(plan, pt.ptrs, op->nslots, NULL)) == FM_OK && (s = device_wait(pt.dev)) == FM_OK) {
            const double t = fm_now_seconds() - t0;
            if (r > 0 && t < best) /* the first call warms up (JIT, first touch) */
                best = t;
            spent += t;
        }
    }
    fm_plan_release(plan);
    unsigned devices = ~0u;
    int threads = 0;
    if (s == FM_OK) {
        *work = op->work(pt.tp, opts.bytes, dt, &devices, &threads);
        *seconds = best;
        *curve = FM_PROFILE_CURVE(op->op, op->curve ? op->curve(pt.tp, opts.bytes) : 0);
    }
    for (int i = 0; i < op->nslots; i++)
        fm_memory_free(pt.dev, pt.ptrs[i]);
    return s;
}

/* The curve of (op, dtype, device) in pf, added when new; NULL when pf is full. */
static fm_rate_curve *curve_for(fm_profile *pf, int op, fm_dtype dt, int device)
{
    for (int i = 0; i < pf->ncurves; i++)
        if (pf->curves[i].op == (int32_t)op && pf->curves[i].dtype == (int32_t)dt && pf->curves[i].device == device)
            return &pf->curves[i];
    if (pf->ncurves == FM_PROFILE_MAX_CURVES)
        return NULL;
    fm_rate_curve *c = &pf->curves[pf->ncurves++];
    memset(c, 0, sizeof *c);
    c->op = (int32_t)op, c->dtype = (int32_t)dt, c->device = device;
    return c;
}

/* Host <-> cuda:0 copy latency (4 KiB) and rate (64 MiB) on pageable memory as staging meets it:
 * inputs from memory the caller wrote, results into memory freshly allocated for them (a NumPy
 * result): the device->host copy then pays the first touch of every page, which made it 10x
 * slower than into a reused buffer on the H200 (3 against 39 GB/s). */
static void *(*volatile touch_pages_fn)(void *, int, size_t) = memset; /* not elided before free() */
static void touch_pages(char *p, size_t n) { touch_pages_fn(p, 0, n); }

static fm_status measure_copies(fm_profile *pf, int threads)
{
    const size_t big = (size_t)64 << 20, small = 4096;
    const fm_device host = {FM_DEVICE_CPU, 0}, gpu = {FM_DEVICE_CUDA, 0};
    char *h = malloc(big);
    void *d = NULL;
    fm_status s = h ? fm_memory_alloc(gpu, big, &d) : fm_fail(FM_ERR_OUT_OF_MEMORY, "calibrate: out of host memory");
    if (h)
        memset(h, 1, big); /* first touch outside the timing */
    for (int dir = 0; dir < 2 && s == FM_OK; dir++) {
        double t[2] = {1e30, 1e30};
        for (int size = 0; size < 2 && s == FM_OK; size++)
            for (int r = 0; r < 4 && s == FM_OK; r++) {
                const size_t n = size ? big : small;
                char *fresh = dir ? malloc(n) : NULL; /* (a large malloc: fresh pages from the kernel) */
                if (dir && !fresh) {
                    s = fm_fail(FM_ERR_OUT_OF_MEMORY, "calibrate: out of host memory");
                    break;
                }
                const double t0 = fm_now_seconds();
                s = dir ? fm_memory_copy(fresh, host, d, gpu, n) : fm_memory_copy(d, gpu, h, host, n);
                const double dt = fm_now_seconds() - t0;
                free(fresh);
                t[size] = dt < t[size] ? dt : t[size];
            }
        pf->copy_latency[dir] = t[0];
        pf->copy_rate[dir] = (double)(big - small) / (t[1] > t[0] ? t[1] - t[0] : t[1]);
    }
    /* a cpu result's first touch (which the device->host rate above includes), by the call's threads
     * as a cpu backend's threads fault in their own parts of a fresh result */
    double touch = 1e30;
    for (int r = 0; r < 3 && s == FM_OK; r++) {
        char *fresh = malloc(big);
        if (!fresh) {
            s = fm_fail(FM_ERR_OUT_OF_MEMORY, "calibrate: out of host memory");
            break;
        }
        const double t0 = fm_now_seconds();
        const size_t part = big / (size_t)threads;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int t = 0; t < threads; t++)
            touch_pages(fresh + (size_t)t * part, t == threads - 1 ? big - (size_t)t * part : part);
        const double dt = fm_now_seconds() - t0;
        free(fresh);
        touch = dt < touch ? dt : touch;
    }
    pf->touch_rate = (double)big / touch;
    fm_memory_free(gpu, d);
    free(h);
    return s;
}

/* ---- split execution's concurrency (profile.h: fm_profile.concurrency) ---- */
typedef struct cpu_side {
    const fm_plan *plan;
    void *const *ptrs;
    int nslots;
    double until; /* calls until then (fm_now_seconds), at least two */
    double per_call;
    fm_status status;
    atomic_int done;
} cpu_side;

static void *run_cpu_side(void *arg)
{
    cpu_side *c = arg;
    int n = 0;
    const double t0 = fm_now_seconds();
    double t = t0;
    while (c->status == FM_OK && (n < 2 || t < c->until)) {
        c->status = fm_plan_execute(c->plan, c->ptrs, c->nslots, NULL);
        t = fm_now_seconds();
        n++;
    }
    c->per_call = (t - t0) / n;
    atomic_store(&c->done, 1);
    return NULL;
}

/* host -> cuda:0 and back, pageable as staging meets a caller's arrays, until `until` and *stop (when
 * given) say so; the bytes moved per second into *rate. */
static fm_status copy_side(void *d, char *h, size_t bytes, double until, atomic_int *stop, double *rate)
{
    const fm_device host = {FM_DEVICE_CPU, 0}, gpu = {FM_DEVICE_CUDA, 0};
    fm_status s = FM_OK;
    double moved = 0, t;
    const double t0 = fm_now_seconds();
    do {
        if ((s = fm_memory_copy(d, gpu, h, host, bytes)) == FM_OK)
            s = fm_memory_copy(h, host, d, gpu, bytes);
        moved += 2.0 * (double)bytes;
        t = fm_now_seconds();
    } while (s == FM_OK && (t < until || (stop && !atomic_load(stop))));
    *rate = moved / (t - t0);
    return s;
}

/* The last (largest) cpu calibration point of op, planned at the threads a split's cpu part gets beside
 * a pipelined GPU part, timed alone and while copies run on another thread; the copies likewise. */
static fm_status measure_concurrency(fm_context *ctx, const fm_operation *op, int quick, fm_profile *pf)
{
    point pt;
    memset(&pt, 0, sizeof pt);
    fm_options_room opts;
    uint32_t slots = 0;
    int last = -1;
    while (op->calibration_problem(last + 1, quick, FM_EXECUTION_CPU, pt.t, opts.bytes, &slots))
        last++;
    if (last < 0 || !op->calibration_problem(last, quick, FM_EXECUTION_CPU, pt.t, opts.bytes, &slots))
        return FM_OK;
    pt.dev = (fm_device){FM_DEVICE_CPU, 0};
    const size_t bytes = (size_t)64 << 20;
    char *h = malloc(bytes);
    void *d = NULL;
    fm_plan *plan = NULL;
    fm_problem q;
    fm_attachments att;
    fm_status s = h ? fm_memory_alloc((fm_device){FM_DEVICE_CUDA, 0}, bytes, &d)
                    : fm_fail(FM_ERR_OUT_OF_MEMORY, "calibrate: out of host memory");
    if (s == FM_OK)
        s = point_operands(op, slots, &pt);
    if (s == FM_OK)
        s = fm_operation_build(ctx, op, pt.tp, opts.bytes, &q, &att);
    if (s == FM_OK && op->cpu_threads) {
        const int32_t t = fm_split_cpu_threads(atomic_load(&ctx->num_threads), ctx->settings.pipeline_threads, 1);
        memcpy(q.u.raw + op->cpu_threads, &t, sizeof t);
    }
    if (s == FM_OK)
        s = fm_plan_built(ctx, &q, &att, &plan);
    const double span = quick ? 0.15 : 0.4;
    double copies_alone = 0, copies_both = 0;
    cpu_side alone = {plan, pt.ptrs, op->nslots, 0, 0, FM_OK, 0}, both = {plan, pt.ptrs, op->nslots, 0, 0, FM_OK, 0};
    pthread_t worker;
    if (s == FM_OK) {
        memset(h, 1, bytes); /* first touch outside the timing */
        alone.until = fm_now_seconds() + span;
        run_cpu_side(&alone);
        if ((s = alone.status) == FM_OK)
            s = copy_side(d, h, bytes, fm_now_seconds() + span, NULL, &copies_alone);
    }
    if (s == FM_OK) {
        both.until = fm_now_seconds() + span;
        if (pthread_create(&worker, NULL, run_cpu_side, &both) != 0) {
            s = fm_fail(FM_ERR_UNAVAILABLE, "calibrate: cannot start a thread for the concurrent run");
        } else {
            s = copy_side(d, h, bytes, 0, &both.done, &copies_both);
            pthread_join(worker, NULL);
            if (s == FM_OK)
                s = both.status;
        }
    }
    if (s == FM_OK) { /* fractions of the speed alone, in (0.02, 1]: noise may make either look faster */
        const double cpu = alone.per_call / both.per_call, copy = copies_both / copies_alone;
        pf->concurrency[op->op][0] = cpu > 1 ? 1 : cpu < 0.02 ? 0.02 : cpu;
        pf->concurrency[op->op][1] = copy > 1 ? 1 : copy < 0.02 ? 0.02 : copy;
    }
    fm_plan_release(plan);
    for (int i = 0; i < op->nslots; i++)
        fm_memory_free(pt.dev, pt.ptrs[i]);
    fm_memory_free((fm_device){FM_DEVICE_CUDA, 0}, d);
    free(h);
    return s;
}

static fm_status stopped(void)
{
    return fm_fail(FM_ERR_CANCELLED, "calibrate: stopped by the progress callback; the profile is as it was");
}

static int count_points(int quick, int ndev)
{
    int total = ndev > 1 ? 1 : 0; /* the copies */
    for (int op = 0; op < FM_OP_COUNT_; op++) {
        const fm_operation *o = fm_operation_for((fm_op)op);
        fm_options_room opts;
        fm_tensor t[FM_MAX_SLOTS];
        uint32_t slots;
        for (int i = 0; o && o->calibration_problem && o->calibration_problem(i, quick, FM_EXECUTION_CPU, t,
                                                                              opts.bytes, &slots); i++)
            total += ndev;
        total += ndev > 1 && o && o->calibration_problem && o->chunk; /* the concurrent run */
    }
    return total;
}

/* Measure every operation's points on each device into pf; FM_ERR_CANCELLED when progress says stop. */
static fm_status measure_all(fm_context *ctx, int quick, int ndev, fm_progress_fn progress, void *user,
                             fm_profile *pf)
{
    const int total = count_points(quick, ndev);
    int done = 0;
    char what[96];
    for (int op = 0; op < FM_OP_COUNT_; op++) {
        const fm_operation *o = fm_operation_for((fm_op)op);
        for (int dev = 0; o && o->calibration_problem && o->work && dev < ndev; dev++) {
            const int execution = dev ? FM_EXECUTION_CUDA : FM_EXECUTION_CPU;
            for (int i = 0;; i++) {
                double work = -1, seconds = 0;
                fm_dtype dt = FM_DTYPE_INVALID;
                int curve = 0;
                fm_status s = measure_point(ctx, o, execution, i, quick, &work, &seconds, &dt, &curve);
                if (s == FM_OK && work < 0)
                    break;
                if (s != FM_OK) { /* a point that cannot run here (memory, no backend) is left out */
                    fm_log_plan(ctx, "calibrate: %s point %d on %s skipped: %s", o->name, i, dev ? "cuda" : "cpu",
                                fm_last_error());
                    fm_clear_error();
                } else {
                    fm_rate_curve *c = curve_for(pf, curve, dt, dev ? FM_DEVICE_CUDA : FM_DEVICE_CPU);
                    if (c && c->n < FM_PROFILE_MAX_POINTS && (c->n == 0 || work > c->work[c->n - 1]))
                        c->work[c->n] = work, c->seconds[c->n++] = seconds;
                }
                snprintf(what, sizeof what, "%s %s point %d on %s", o->name, fm_dtype_name(dt), i + 1,
                         dev ? "cuda" : "cpu");
                if (progress && progress(user, (double)++done / (total + 1), what))
                    return stopped();
            }
        }
    }
    fm_status s = FM_OK;
    if (ndev > 1 && (s = measure_copies(pf, pf->threads > 0 ? pf->threads : 1)) == FM_OK && progress &&
        progress(user, (double)++done / (total + 1), "host <-> cuda copies"))
        return stopped();
    for (int op = 0; s == FM_OK && ndev > 1 && op < FM_OP_COUNT_; op++) {
        const fm_operation *o = fm_operation_for((fm_op)op);
        if (!o || !o->calibration_problem || !o->chunk)
            continue;
        if (measure_concurrency(ctx, o, quick, pf) != FM_OK) { /* then best does not split it */
            fm_log_plan(ctx, "calibrate: %s concurrent run skipped: %s", o->name, fm_last_error());
            fm_clear_error();
        }
        snprintf(what, sizeof what, "%s cpu and copies at once", o->name);
        if (progress && progress(user, (double)++done / (total + 1), what))
            return stopped();
    }
    return s;
}

fm_status fm_context_calibrate(fm_context *ctx, int quick, fm_progress_fn progress, void *user)
{
    if (!ctx)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "calibrate: ctx is NULL");
    fm_profile *pf = calloc(1, sizeof *pf);
    if (!pf)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "calibrate: out of host memory");
    fm_profile_fingerprint(pf->fingerprint, sizeof pf->fingerprint);
    pf->threads = atomic_load(&ctx->num_threads);
    pf->copy_latency[0] = pf->copy_latency[1] = 1e-5; /* no GPU: never used, kept valid */
    pf->copy_rate[0] = pf->copy_rate[1] = 5e9;
    const time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    char when[40];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    snprintf(pf->source, sizeof pf->source, "calibrated %s (%s)", when, quick ? "quick" : "full");
    const int ndev = fm_cuda_device_count() > 0 ? 2 : 1;
    fm_status s = measure_all(ctx, quick, ndev, progress, user, pf);
    if (s != FM_OK) {
        free(pf);
        return s;
    }
    /* the last word of the callback comes before anything changes: stopped there, nothing did */
    if (progress && progress(user, 1.0, "done")) {
        free(pf);
        return stopped();
    }
    char why[256] = "";
    if (fm_profile_save_file(ctx, pf) != FM_OK) { /* saved first: the install may free an identical pf */
        snprintf(why, sizeof why, "%s", fm_last_error());
        fm_clear_error();
    }
    fm_context_profile_install(ctx, pf); /* the context owns it now */
    if (why[0])
        fm_context_profile_note(ctx, "calibrated, but not saved: %s", why);
    return FM_OK;
}
