/* autotune.c : the generic autotune. Every backend that could plan a problem offers its
 * variants worth timing (fm_backend.tune_candidates: the operation's tunable fields set); they
 * are timed against the default plan on the caller's operands and the winner answers for the
 * problem's key from then on (cache and wisdom). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_MONOTONIC under -std=c11 (clang needs it said) */
#include "context.h"
#include "operation.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FM_TUNE_MAX_CANDIDATES 160
enum { ROUNDS = 3, SUSTAIN_ROUNDS = 4, NPLANS = FM_TUNE_MAX_CANDIDATES + 1 };

typedef struct tuning {
    fm_context *ctx;
    fm_problem p; /* the default */
    void *const *ptrs;
    int on_gpu, repeats;
    fm_status (*sync)(int);
    fm_problem cand[FM_TUNE_MAX_CANDIDATES];
    int group[FM_TUNE_MAX_CANDIDATES], ncand;
    /* plans[0] is the default; then the candidates that planned */
    fm_plan *plans[NPLANS];
    double fastest[NPLANS], score[NPLANS], ratio[NPLANS][ROUNDS], drift[NPLANS * ROUNDS];
    int calls[NPLANS], nratio[NPLANS], alive[NPLANS], n, ndrift;
} tuning;

double fm_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* *seconds = per call of plan: the fastest of `samples` timings of `calls` calls each (each
 * timing ends with a wait for the device). A failed call or wait is returned: a plan that
 * fails fast must not look fast. */
static fm_status time_plan(const fm_plan *plan, void *const *ptrs, int samples, int calls, fm_status (*sync)(int),
                           int device, double *seconds)
{
    fm_status s;
    double best = 1e300;
    for (int r = 0; r < samples; r++) {
        double t0 = fm_now_seconds();
        for (int q = 0; q < calls; q++)
            if ((s = fm_plan_execute(plan, ptrs, plan->problem.nslots, NULL)) != FM_OK)
                return s;
        if (sync && (s = sync(device)) != FM_OK)
            return s;
        double t = (fm_now_seconds() - t0) / calls;
        if (t < best)
            best = t;
    }
    *seconds = best;
    return FM_OK;
}

/* Calls that fill window_s seconds at `est` seconds a call, within [at_least, at_most]. */
static int window_calls(double est, double window_s, int at_least, int at_most)
{
    double c = est > 0 ? window_s / est : at_least;
    return c > at_most ? at_most : c > at_least ? (int)c + 1 : at_least;
}

/* GPU timing size for a plan taking `est` seconds a call: at least `repeats` calls and 1 ms (a
 * shorter window is mostly the closing synchronization). No untimed warm-up: it changed no choice. */
int fm_autotune_gpu_calls(double est, int repeats) { return window_calls(est, 1e-3, repeats, 1000); }

/* Calls per window of the sustained check: 100 ms (at least 1 call, at most 2000). Short timings
 * rank kernels at the clock of the moment; at a power cap long loops can reverse the order
 * (docs/design.md, Lessons from measurement). */
int fm_autotune_sustained_calls(double est) { return window_calls(est, 0.1, 1, 2000); }

/* The gain a candidate must show: 3% on the CPU; on a GPU 1%, or twice the default's own typical
 * drift between the two timings around a candidate (drift[0..n), reordered) when larger. */
double fm_autotune_required_gain(int on_gpu, double *drift, int n)
{
    if (!on_gpu)
        return 0.03;
    double noise = n > 0 ? fm_median(drift, n) : 0.0;
    return 2.0 * noise > 0.01 ? 2.0 * noise : 0.01;
}


/* Every candidate of every available backend that could plan t->p (FUSEMATH_BACKEND honoured). */
static void collect_candidates(tuning *t)
{
    fm_context *ctx = t->ctx;
    for (int i = 0; i < ctx->nbackends && t->ncand < FM_TUNE_MAX_CANDIDATES; i++) {
        const fm_backend_slot *slot = &ctx->backends[i];
        const fm_backend *b = slot->backend;
        if (!slot->available || !b->tune_candidates || (int)b->device != t->p.exec_device.type ||
            !(b->ops & (1u << t->p.op)) || (ctx->settings.backend[0] && strcmp(ctx->settings.backend, b->name)))
            continue;
        const int base = t->ncand;
        int got = b->tune_candidates(ctx, slot->state, &t->p, t->cand + base, t->group + base,
                                     FM_TUNE_MAX_CANDIDATES - base);
        for (int j = 0; j < got; j++) /* groups are per backend */
            t->group[base + j] = t->group[base + j] < 0 ? -1 : t->group[base + j] + 1000 * i;
        t->ncand += got > 0 ? got : 0;
    }
}

/* The default (through the cache: it may be an earlier winner) and every candidate (outside it,
 * so that tuning leaves one entry, the winner's, instead of one per candidate), each executed
 * once as a warm-up. A candidate that does not plan is dropped, and with it the rest of its
 * group (a library's list of unknown length). */
static fm_status plan_candidates(tuning *t, const fm_attachments *att)
{
    fm_status s;
    int dead_group = -1;
    for (int qi = 0; qi <= t->ncand; qi++) {
        if (qi > 0 && t->group[qi - 1] >= 0 && t->group[qi - 1] == dead_group)
            continue;
        s = qi == 0 ? fm_plan_problem_with(t->ctx, &t->p, att, &t->plans[t->n])
                    : fm_plan_problem_uncached(t->ctx, &t->cand[qi - 1], att, &t->plans[t->n]);
        if (s != FM_OK) {
            if (qi == 0)
                return s; /* the default refused: the planner's message says why */
            fm_clear_error(); /* e.g. no fused algorithm, or no more candidates */
            dead_group = t->group[qi - 1];
            continue;
        }
        double est = 0.0;
        fm_plan *pl = t->plans[t->n++]; /* released with the others */
        s = fm_plan_execute(pl, t->ptrs, t->p.nslots, NULL);
        if (s == FM_OK && t->sync)
            s = t->sync(t->p.exec_device.id);
        if (s == FM_OK && t->on_gpu)
            s = time_plan(pl, t->ptrs, 1, 1, t->sync, t->p.exec_device.id, &est);
        if (s != FM_OK)
            return s;
        t->calls[t->n - 1] = t->on_gpu ? fm_autotune_gpu_calls(est, t->repeats) : 1;
        t->fastest[t->n - 1] = 1e300;
    }
    return FM_OK;
}

/* Timing, in rounds of alternating order. GPU: every candidate still running is timed between
 * two timings of the default and scored by its time over their mean, the score being the median
 * over its rounds: the clock drifts (fp64 on the H200 by up to 25% within a process), so raw
 * times taken at different moments, or a candidate's fastest call across rounds, were decided by
 * the drift. CPU: host noise comes as spikes, which the fastest of all a candidate's calls
 * filters best; the score is its fastest call over the default's. After the first round,
 * candidates scoring over 10% behind the best stop. */
static fm_status time_rounds(tuning *t)
{
    const int samples = t->on_gpu ? 1 : t->repeats, dev = t->p.exec_device.id, n = t->n;
    fm_status s;
    for (int i = 0; i < n; i++)
        t->alive[i] = 1;
    for (int round = 0; round < ROUNDS; round++) {
        double before, tm, after;
        if ((s = time_plan(t->plans[0], t->ptrs, samples, t->calls[0], t->sync, dev, &before)) != FM_OK)
            return s; /* the default itself fails: that is the caller's error */
        if (before < t->fastest[0])
            t->fastest[0] = before;
        for (int j = 1; j < n; j++) {
            int i = round % 2 ? n - j : j;
            if (!t->alive[i])
                continue;
            if (time_plan(t->plans[i], t->ptrs, samples, t->calls[i], t->sync, dev, &tm) != FM_OK) {
                fm_clear_error(); /* a candidate that fails drops out */
                t->alive[i] = 0;
                t->fastest[i] = 1e300;
                t->nratio[i] = 0;
                continue;
            }
            if (tm < t->fastest[i])
                t->fastest[i] = tm;
            if (t->on_gpu) {
                if ((s = time_plan(t->plans[0], t->ptrs, samples, t->calls[0], t->sync, dev, &after)) != FM_OK)
                    return s;
                t->ratio[i][t->nratio[i]++] = tm / (0.5 * (before + after));
                if (before > 0.0)
                    t->drift[t->ndrift++] = fabs(after / before - 1.0);
                before = after;
            }
        }
        /* the scores so far: GPU the median ratio, CPU the fastest call over the default's */
        double best = 1.0;
        for (int i = 1; i < n; i++) {
            t->score[i] = !t->on_gpu       ? t->fastest[i] / t->fastest[0]
                          : t->nratio[i] > 0 ? fm_median(t->ratio[i], t->nratio[i])
                                             : 1e300;
            if (t->alive[i] && t->score[i] < best)
                best = t->score[i];
        }
        for (int i = 1; round == 0 && i < n; i++)
            t->alive[i] = t->score[i] <= 1.10 * best;
    }
    return FM_OK;
}

/* Sustained check (GPU): the winner against the default in 100 ms windows, alternating (default
 * first and last); it stays only if it still wins by the same margin (see
 * fm_autotune_sustained_calls). Costs about 0.9 s, or nine calls where one takes longer than
 * 100 ms. A winner that fails here is dropped. */
static fm_status sustained_check(tuning *t, double need, int *win)
{
    const int sc = fm_autotune_sustained_calls(t->fastest[0]), dev = t->p.exec_device.id;
    double r[SUSTAIN_ROUNDS], before, tm, after;
    fm_status s;
    if ((s = time_plan(t->plans[0], t->ptrs, 1, sc, t->sync, dev, &before)) != FM_OK)
        return s;
    for (int k = 0; k < SUSTAIN_ROUNDS; k++) {
        if (time_plan(t->plans[*win], t->ptrs, 1, sc, t->sync, dev, &tm) != FM_OK) {
            fm_clear_error();
            tm = 1e300;
        }
        if ((s = time_plan(t->plans[0], t->ptrs, 1, sc, t->sync, dev, &after)) != FM_OK)
            return s;
        r[k] = before + after > 0.0 ? tm / (0.5 * (before + after)) : 1.0;
        before = after;
    }
    const double sustained = fm_median(r, SUSTAIN_ROUNDS);
    fm_log_plan(t->ctx, "autotune: sustained check, %d windows of %d calls each: %s at %.3f x the default: %s",
                SUSTAIN_ROUNDS, sc, t->plans[*win]->describe, sustained,
                sustained < 1.0 - need ? "kept" : "the default instead");
    if (sustained >= 1.0 - need)
        *win = 0;
    return FM_OK;
}

/* The index of the winner: the best score that beats the default by the required gain. */
static fm_status pick_winner(tuning *t, int *win)
{
    const double need = fm_autotune_required_gain(t->on_gpu, t->drift, t->ndrift);
    if (t->on_gpu)
        fm_log_plan(t->ctx, "autotune: the default's drift between two timings %.2f%% (median of %d): a candidate "
                    "must be %.1f%% faster", t->ndrift > 0 ? 100.0 * fm_median(t->drift, t->ndrift) : 0.0, t->ndrift,
                    100.0 * need);
    *win = 0;
    t->score[0] = 1.0;
    for (int i = 1; i < t->n; i++)
        if (t->score[i] < t->score[*win] && t->score[i] < 1.0 - need)
            *win = i;
    fm_status s = t->on_gpu && *win > 0 ? sustained_check(t, need, win) : FM_OK;
    if (s != FM_OK)
        return s;
    for (int i = 0; i < t->n; i++)
        if (t->fastest[i] >= 1e300)
            fm_log_plan(t->ctx, "autotune: %s: failed, dropped", t->plans[i]->describe);
        else
            fm_log_plan(t->ctx, "autotune: %s: %.3f ms, %.3f x the default%s", t->plans[i]->describe,
                        t->fastest[i] * 1e3, t->score[i], i == *win ? " (chosen)" : "");
    return FM_OK;
}

/* The winner answers for the default key, so later stateless calls get it; wisdom remembers it.
 * Made as a fresh plan object: cached candidates must keep their own keys. Takes over best. */
static fm_status install_winner(fm_context *ctx, const fm_problem *key, fm_plan *best, int is_default,
                                const fm_attachments *att, fm_plan **plan)
{
    fm_problem tuned = fm_plan_alias_target(best)->problem; /* the default may be an earlier winner's alias */
    if (!is_default)
        fm_context_cache_put(ctx, best); /* planned outside the cache: its own key gets it now */
    fm_plan_release(best);
    fm_plan *winner = NULL;
    fm_status s = fm_plan_problem_with(ctx, &tuned, att, &winner);
    if (s != FM_OK)
        return s;
    if ((s = fm_plan_alias_for(ctx, key, winner, plan)) != FM_OK)
        return s;
    if (!fm_problem_untuned(&tuned)) /* the default's own choice is no tuning: keep what wisdom holds */
        fm_wisdom_record(ctx, key, &tuned, (*plan)->describe);
    return FM_OK;
}

fm_status fm_autotune_problem(fm_context *ctx, const fm_problem *p, const fm_attachments *att, void *const *ptrs,
                              int repeats, fm_plan **plan)
{
    if (!fm_problem_untuned(p)) /* the caller fixed the choice: nothing to tune */
        return fm_plan_problem_with(ctx, p, att, plan);
    tuning *t = calloc(1, sizeof *t);
    if (!t)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s autotune: out of host memory", fm_op_name(p->op));
    t->ctx = ctx;
    t->p = *p;
    t->ptrs = ptrs;
    t->repeats = repeats;
    t->on_gpu = p->exec_device.type == FM_DEVICE_CUDA;
    const fm_device_ops *dops = fm_device_ops_for(p->exec_device.type);
    t->sync = dops ? dops->sync : NULL;
    collect_candidates(t);
    if (t->ncand == 0) { /* no backend offers a choice: the plan any call gets (wisdom included) */
        free(t);
        return fm_plan_built(ctx, p, att, plan);
    }
    fm_status s = t->sync ? t->sync(p->exec_device.id) : FM_OK; /* the operands may still be in flight */
    if (s == FM_OK)
        s = plan_candidates(t, att);
    if (s == FM_OK)
        s = time_rounds(t);
    int win = 0;
    if (s == FM_OK)
        s = pick_winner(t, &win);
    for (int i = 0; i < t->n; i++)
        if (s != FM_OK || i != win)
            fm_plan_release(t->plans[i]);
    if (s == FM_OK)
        s = install_winner(ctx, p, t->plans[win], win == 0, att, plan);
    free(t);
    return s;
}
