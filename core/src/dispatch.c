/* dispatch.c : FM_EXECUTION_BEST. The operation's work hook says how much work a problem is and
 * which devices can run it; the context's machine profile (core/src/profile.c) turns that into a
 * predicted time on the cpu and on the GPU, each with the copies of the operands that live on the
 * other side; the problem runs where its result is predicted soonest. The decision is made when a
 * problem is built, so a planned call pays nothing for it at execute. */
#include "context.h"
#include "operation.h"
#include "profile.h"
#include "split.h"

#include <math.h>
#include <stdio.h>

/* p->best: bits below, the GPU candidate's id from bit 8 (the fallback's device) */
enum { BEST_MEASURED = 1, BEST_BUILTIN = 2, BEST_CPU_COPIES = 4, BEST_CUDA_COPIES = 8, BEST_FALLBACK = 16,
       BEST_PIPELINED = 32, BEST_SPLIT = 64 /* a split was chosen (p->split; 0 again after its fallback) */ };

/* Seconds of copying p's operands that are not on `to` there and back, one copy per operand and
 * direction as staging makes them (core/src/staging.c): inputs in, outputs back, an output that
 * may be its input's memory (inplace_partner) both ways. */
static double copies_time(const fm_profile *pf, const fm_problem *p, fm_device to, int *any)
{
    const int to_cuda = to.type == FM_DEVICE_CUDA;
    double t = 0;
    *any = 0;
    for (int i = 0; i < p->nslots; i++) {
        const fm_device d = p->t[i].device;
        if (!(p->present & (1u << i)) || (d.type == to.type && d.id == to.id))
            continue;
        int64_t lo, hi;
        fm_tensor_byte_span(&p->t[i], &lo, &hi);
        const int partner = p->inplace_partner[i];
        /* (an output whose partner is absent is only copied back: staging copies it in when it is the
         * partner's memory) */
        const int out = (p->output_mask >> i) & 1, in = !out || (partner >= 0 && ((p->present >> partner) & 1));
        /* to the GPU: inputs go host->device (0), results device->host (1); to the cpu, the reverse */
        if (in)
            t += fm_profile_copy_time(pf, to_cuda ? 0 : 1, (double)(hi - lo));
        if (out)
            t += fm_profile_copy_time(pf, to_cuda ? 1 : 0, (double)(hi - lo));
        *any |= hi > lo;
    }
    return t;
}

/* The rule's first test before any geometry: auto cuts from 2 x 4 MiB moved. */
static int may_pipeline(int mode, const fm_problem *p)
{
    double moved = 0;
    for (int i = 0; i < p->nslots; i++)
        if ((p->present & (1u << i)) && p->t[i].device.type == FM_DEVICE_CPU) {
            int64_t lo, hi;
            fm_tensor_byte_span(&p->t[i], &lo, &hi);
            moved += (double)(hi - lo);
        }
    return mode != FM_PIPELINE_OFF && (mode != FM_PIPELINE_AUTO || moved >= 2.0 * (double)FM_PIPELINE_MIN_CHUNK);
}

/* The GPU's time with its copies when the pipeline cuts q (built: every parameter the chunk hooks read
 * set) there: the pipeline's own model (fm_pipeline_predict, core/src/pipeline.c), with `threads`
 * staging threads. < 0 when q would be staged whole. */
static double pipelined_built(const fm_profile *pf, int mode, int threads, const fm_problem *q0, fm_device gpu,
                              double compute)
{
    if (!may_pipeline(mode, q0))
        return -1;
    fm_problem q = *q0;
    q.exec_device = gpu;
    fm_pipeline_geom g;
    char why[8];
    if (fm_pipeline_geometry(&q, mode, &g, why, sizeof why) != FM_OK)
        return -1;
    return fm_pipeline_predict(pf, &g, compute, threads, NULL);
}

/* p is not built yet when best places it (its parameters follow its placement): the problem as
 * output_specs builds it, without a context (placed where the operands live, every parameter the chunk
 * hooks read set). 0 when it does not build. */
static int build_unplaced(const fm_operation *op, const fm_tensor *const *ts, const void *opts, fm_problem *q)
{
    fm_attachments att;
    fm_problem_begin(NULL, op, q);
    return op->build(NULL, ts, opts, q, &att) == FM_OK;
}

static double pipelined_time(const fm_context *ctx, const fm_profile *pf, const fm_operation *op,
                             const fm_tensor *const *ts, const void *opts, const fm_problem *p, fm_device gpu,
                             double compute)
{
    const int mode = fm_context_settings(ctx)->pipeline;
    if (!may_pipeline(mode, p)) /* p's descriptors are set: the size test without building */
        return -1;
    fm_problem q;
    return build_unplaced(op, ts, opts, &q)
               ? pipelined_built(pf, mode, fm_context_settings(ctx)->pipeline_threads, &q, gpu, compute)
               : -1;
}

double fm_dispatch_touch_time(const fm_profile *pf, const fm_problem *p)
{
    double bytes = 0;
    for (int i = 0; i < p->nslots; i++) {
        const int partner = p->inplace_partner[i];
        if (!(p->present & (1u << i)) || !((p->output_mask >> i) & 1) || p->t[i].device.type != FM_DEVICE_CPU ||
            (partner >= 0 && ((p->present >> partner) & 1)))
            continue; /* in place: the input's pages, touched already */
        int64_t lo, hi;
        fm_tensor_byte_span(&p->t[i], &lo, &hi);
        bytes += (double)(hi - lo);
    }
    return fm_profile_touch_time(pf, bytes);
}

int fm_dispatch_would_pipeline(int mode, const fm_problem *q0, fm_device gpu)
{
    if (!may_pipeline(mode, q0))
        return 0;
    fm_problem q = *q0;
    q.exec_device = gpu;
    fm_pipeline_geom g;
    char why[8];
    return fm_pipeline_geometry(&q, mode, &g, why, sizeof why) == FM_OK;
}

double fm_dispatch_gpu_time(const fm_profile *pf, int mode, int copy_threads, const fm_problem *q, fm_device gpu,
                            double compute, int *pipelined)
{
    int any = 0;
    double t = compute + copies_time(pf, q, gpu, &any);
    *pipelined = 0;
    const double tp = any ? pipelined_built(pf, mode, copy_threads, q, gpu, compute) : -1;
    if (tp >= 0 && tp < t) {
        t = tp;
        *pipelined = 1;
    }
    return t;
}

/* The GPU a best problem may run on: the one an operand lives on, else cuda:device_id; -1 none. */
static fm_status cuda_candidate(const fm_operation *op, const fm_problem *p, int device_id, int *id)
{
    const int ncuda = fm_cuda_device_count();
    *id = -1;
    if (device_id > 0 && device_id >= ncuda) /* asked for by number: a GPU that is not there is an error */
        return fm_fail(FM_ERR_UNAVAILABLE, "%s: execution='best' with device_id = %d, but %s", op->name, device_id,
                       fm_cuda_missing_device_text());
    for (int i = 0; i < op->nslots; i++)
        if ((p->present & (1u << i)) && p->t[i].device.type == FM_DEVICE_CUDA) {
            *id = p->t[i].device.id;
            return FM_OK;
        }
    *id = ncuda > 0 ? device_id : -1;
    return FM_OK;
}

fm_status fm_dispatch_best(fm_context *ctx, const fm_operation *op, const fm_tensor *const *ts, const void *opts,
                           int device_id, fm_problem *p)
{
    int first = 0, mixed = 0;
    while (first < op->nslots && !(p->present & (1u << first)))
        first++;
    const fm_device home = p->t[first].device;
    for (int i = first + 1; i < op->nslots; i++)
        mixed |= (p->present & (1u << i)) && (p->t[i].device.type != home.type || p->t[i].device.id != home.id);
    int cuda_id;
    fm_status s = cuda_candidate(op, p, device_id, &cuda_id);
    if (s != FM_OK)
        return s;
    p->exec_device = home;
    if (!ctx) /* output specs only: results live where the operands do, wherever they are computed */
        return FM_OK;
    fm_dtype dt = FM_DTYPE_INVALID;
    unsigned devices = 1u << FM_DEVICE_CPU | 1u << FM_DEVICE_CUDA;
    int asked = 0;
    const double work = op->work ? op->work(ts, opts, &dt, &devices, &asked) : -1;
    if (!(work >= 0))
        return FM_OK; /* nothing to predict from: where the operands live */
    const fm_profile *pf = fm_context_profile(ctx);
    const int threads = fm_context_threads_for(ctx, asked); /* the call's own num_threads, else the context's */
    const fm_device cpu = {FM_DEVICE_CPU, 0}, gpu = {FM_DEVICE_CUDA, cuda_id};
    int cpu_copies = 0, cuda_copies = 0;
    double t_cpu = INFINITY, t_cuda = INFINITY;
    const int curve = FM_PROFILE_CURVE(op->op, op->curve ? op->curve(ts, opts) : 0);
    if (devices & (1u << FM_DEVICE_CPU))
        t_cpu = fm_profile_predict(pf, threads, curve, dt, 0, work) + copies_time(pf, p, cpu, &cpu_copies) +
                fm_dispatch_touch_time(pf, p);
    int pipelined = 0;
    if (cuda_id >= 0 && (devices & (1u << FM_DEVICE_CUDA))) {
        const double compute = fm_profile_predict(pf, threads, curve, dt, 1, work);
        t_cuda = compute + copies_time(pf, p, gpu, &cuda_copies);
        const double t_pipe = cuda_copies && op->chunk ? pipelined_time(ctx, pf, op, ts, opts, p, gpu, compute) : -1;
        if (t_pipe >= 0 && t_pipe < t_cuda) {
            t_cuda = t_pipe;
            pipelined = 1;
        }
    }
    if (isinf(t_cpu) && isinf(t_cuda))
        return FM_OK; /* neither can: the builder's own checks say why */
    int on_cuda = t_cuda < t_cpu;
    /* the built-in model is a guess: leave the operands' own device only for a gain of 2x */
    if (!pf && !mixed)
        on_cuda = home.type == FM_DEVICE_CUDA ? !(t_cpu * 2 < t_cuda) : t_cuda * 2 < t_cpu;
    p->exec_device = on_cuda ? gpu : cpu;
    p->best = (pf ? BEST_MEASURED : BEST_BUILTIN) | (cpu_copies ? BEST_CPU_COPIES : 0) |
              (cuda_copies ? BEST_CUDA_COPIES : 0) | (pipelined ? BEST_PIPELINED : 0) | (cuda_id > 0 ? cuda_id << 8 : 0);
    p->best_ms[0] = isinf(t_cpu) ? -1.0f : (float)(t_cpu * 1e3);
    p->best_ms[1] = isinf(t_cuda) ? -1.0f : (float)(t_cuda * 1e3);
    /* split execution (core/src/split.c): host operands only, both devices candidates, a measured profile
     * (the built-in model's guesses would split on noise) */
    if (!pf || !ctx->settings.split || !op->chunk || mixed || home.type != FM_DEVICE_CPU || isinf(t_cpu) ||
        isinf(t_cuda) || fmin(t_cpu, t_cuda) < FM_SPLIT_MIN_SECONDS ||
        fmin(t_cpu, t_cuda) * 10 < fmax(t_cpu, t_cuda)) /* an ideal split's gain, 1 + min / max, < 10% */
        return FM_OK;
    fm_problem q;
    if (!build_unplaced(op, ts, opts, &q))
        return FM_OK;
    const fm_split_query sq = {pf, op, &q, work, dt, threads, gpu, ctx->settings.pipeline, pipelined,
                              ctx->settings.pipeline_threads, curve};
    double t_split = 0;
    int cpu_threads = 0;
    const char *why = "";
    const int64_t k = fm_split_decide(&sq, fmin(t_cpu, t_cuda), &t_split, &cpu_threads, &why);
    if (k > 0) {
        p->split = k;
        p->split_ms = (float)(t_split * 1e3);
        p->split_cpu_threads = cpu_threads;
        p->best |= BEST_SPLIT;
    } else { /* why not (an old profile without the concurrent run, no gain...): describe() has no room */
        fm_log_plan(ctx, "best: %s not split over cpu + cuda:%d: %s", op->name, gpu.id, why);
    }
    return FM_OK;
}

int fm_dispatch_fallback(const fm_problem *p, fm_problem *q)
{
    const int on_cuda = p->exec_device.type == FM_DEVICE_CUDA;
    if (p->split) { /* a part planned none: the better single device, as best chose it before the split */
        *q = *p;
        q->split = 0;
        q->split_ms = 0;
        q->split_cpu_threads = 0; /* not marked a fallback: the unsplit problem may fall back in turn */
        return 1;
    }
    if (!p->best || (p->best & BEST_FALLBACK) || p->best_ms[on_cuda ? 0 : 1] < 0)
        return 0;
    *q = *p;
    q->exec_device = on_cuda ? (fm_device){FM_DEVICE_CPU, 0} : (fm_device){FM_DEVICE_CUDA, p->best >> 8};
    q->best |= BEST_FALLBACK;
    fm_problem_key_alignment(q);
    return 1;
}

void fm_dispatch_describe(const fm_problem *p, char *buf, size_t size)
{
    if (!p->best) {
        snprintf(buf, size, "%s", "");
        return;
    }
    char cpu[48] = "", gpu[48] = "";
    if (p->best_ms[0] >= 0)
        snprintf(cpu, sizeof cpu, " cpu%s %.3g ms", p->best & BEST_CPU_COPIES ? "+xfer" : "", p->best_ms[0]);
    if (p->best_ms[1] >= 0)
        snprintf(gpu, sizeof gpu, " cuda%s %.3g ms",
                 p->best & BEST_PIPELINED ? "+xfer(pipelined)" : p->best & BEST_CUDA_COPIES ? "+xfer" : "",
                 p->best_ms[1]);
    const int on_cuda = p->exec_device.type == FM_DEVICE_CUDA;
    char where[64];
    const fm_operation *op = fm_operation_for(p->op);
    const char *w = "";
    const int64_t extent = p->split && op && op->chunk ? op->chunk(p, 0, 0, NULL, NULL, &w) : 0;
    if (p->split) /* "split cpu 3/8 cuda 5/8": the chunk axis' indices each side */
        snprintf(where, sizeof where, "split cpu %lld/%lld cuda %lld/%lld", (long long)p->split, (long long)extent,
                 (long long)(extent - p->split), (long long)extent);
    else
        snprintf(where, sizeof where, "%s%s%s", on_cuda ? "cuda" : "cpu",
                 p->best & BEST_SPLIT ? " (the split planned none)" : "", /* BEST_SPLIT with split 0 */
                 !(p->best & BEST_FALLBACK) ? "" : on_cuda ? " (the cpu planned none)" : " (cuda planned none)");
    char split[40] = "";
    if (p->split)
        snprintf(split, sizeof split, " split %.3g ms", p->split_ms);
    snprintf(buf, size, " best=%s predicted%s%s%s%s", where, cpu, gpu[0] ? gpu : " cuda n/a", split,
             p->best & BEST_BUILTIN ? " model=builtin" : "");
}
