/* fftw_timed.c : the FFTW backend's timed choices between FFTW's plans and the library's own
 * paths (effort measure / patient; the faster kept by 3%), recorded in the context's wisdom as
 * the problem's cpu_path; FUSEMATH_FFT_CPU_PATH forces one. docs/design.md, FFT, has the why. */
#include "fft_axis_split.h"
#include "fftw_impl.h"

#include <stdlib.h>
#include <string.h>

fm_status fm_fftw_choice_begin(fm_context *ctx, const fm_problem *p, fftw_impl *x)
{
    /* FUSEMATH_FFT_CPU_PATH (read into the context's settings at its creation): empty = timed
     * (measure/patient); "direct" and "chunks" force a plain transform's path, "inplace" a
     * prolog's (into out, FFTW in place there); any forced value turns the timing off, and a
     * prolog then takes the scratch unless "inplace". */
    const char *v = fm_context_settings(ctx)->fft_cpu_path;
    x->path = !*v                      ? PATH_TIMED
              : !strcmp(v, "direct")  ? PATH_DIRECT
              : !strcmp(v, "chunks")  ? PATH_CHUNKS
              : !strcmp(v, "inplace") ? PATH_INPLACE
                                      : -1;
    if (x->path < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "fft: FUSEMATH_FFT_CPU_PATH is '%s', expected 'direct', 'chunks' or 'inplace'", v);
    fm_problem tuned = *p; /* p's own choice, else what the context's wisdom remembers */
    if (x->path == PATH_TIMED && !p->u.fft.cpu_path && p->u.fft.effort != FM_FFT_EFFORT_ESTIMATE)
        fm_wisdom_lookup(ctx, p, &tuned);
    x->remembered = x->path == PATH_TIMED && tuned.u.fft.cpu_path;
    if (x->remembered)
        x->path = tuned.u.fft.cpu_path;
    return FM_OK;
}

void fm_fftw_choice_record(fm_context *ctx, const fm_problem *p, int chosen, const char *describe)
{
    if (!chosen)
        return;
    fm_problem tuned = *p;
    tuned.u.fft.cpu_path = chosen;
    fm_wisdom_record(ctx, p, &tuned, describe);
}

/* Seconds of one run of x, or of plan pl when x is NULL (1e30 when it fails). */
static double time_one_run(const fftw_impl *x, const fm_plan *pl, void *const *ptrs)
{
    const double t0 = fm_now_seconds();
    const fm_status s = x ? fm_fftw_run(x, ptrs) : pl->execute(pl, ptrs, &fm_no_exec_args, NULL);
    return s == FM_OK ? fm_now_seconds() - t0 : 1e30;
}

#define TIMED_MAX_ROUNDS 12 /* timed rounds at most, after one warm-up round */
#define TIMED_BUDGET_S 0.25  /* rounds stop where this much time would be spent (one round at least) */

double fm_fftw_timed_ratio(const double *a, const double *b, int n)
{
    double r[TIMED_MAX_ROUNDS];
    int m = 0;
    for (int i = 0; i < n && m < TIMED_MAX_ROUNDS; i++)
        r[m++] = a[i] > 0 ? b[i] / a[i] : b[i] > 0 ? 1e30 : 1.0;
    return m == 0 ? 1.0 : fm_median(r, m);
}

#define TIMED_MAX_BYTES ((int64_t)512 << 20) /* larger problems keep FFTW's plan untimed */

/* Whether a choice goes untimed: effort estimate, or timing arrays over TIMED_MAX_BYTES in all
 * (every array's span, the chain's included: what time_pair would allocate). */
static int too_costly_to_time(const fm_problem *p, unsigned flags)
{
    if (flags == FFTW_ESTIMATE)
        return 1;
    double total = 0;
    for (int i = 0; i < FM_FFT_NSLOTS; i++)
        if ((p->present >> i) & 1) {
            int64_t lo, hi;
            fm_tensor_byte_span(&p->t[i], &lo, &hi);
            total += (double)(hi - lo);
        }
    return total > (double)TIMED_MAX_BYTES;
}

/* Two candidates timed by turns on zeroed arrays of the call's layout (in, out, and the prolog /
 * epilog arrays when present; the caller checked too_costly_to_time): x as planned, then plan alt
 * or, without one, x with its direct plan (its chunks run) or its prolog-into-out (scratch>out
 * runs) set aside. One warm-up round, then as many rounds as TIMED_BUDGET_S allows (1 to
 * TIMED_MAX_ROUNDS), the order within a round alternating; rel[0] = 1 and rel[1] = the median
 * over rounds of (second / first) - see fm_fftw_timed_ratio. Returns 0 when the arrays could not
 * be had or a run failed. */
enum { WITHOUT_DIRECT, WITHOUT_PRO_OUT }; /* what the second candidate of time_pair sets aside */
static double run_second(fftw_impl *x, const fm_plan *alt, int without, void *const *ptrs)
{
    if (alt)
        return time_one_run(NULL, alt, ptrs);
    void *const direct = x->direct;
    const int pro_out = x->pro_out;
    if (without == WITHOUT_DIRECT)
        x->direct = NULL;
    if (without == WITHOUT_PRO_OUT)
        x->pro_out = 0;
    const double t = time_one_run(x, NULL, ptrs);
    x->direct = direct;
    x->pro_out = pro_out;
    return t;
}

static int time_pair(fftw_impl *x, const fm_plan *alt, int without, const fm_problem *p, double rel[2])
{
    void *buf[FM_FFT_NSLOTS] = {0}, *ptrs[FM_FFT_NSLOTS] = {0};
    rel[0] = rel[1] = 1.0;
    int ok = 1;
    for (int i = 0; i < FM_FFT_NSLOTS && ok; i++) {
        if (!((p->present >> i) & 1))
            continue;
        int64_t lo, hi;
        fm_tensor_byte_span(&p->t[i], &lo, &hi);
        /* malloc, not the scratch cache: these arrays go back to the system after planning */
        const size_t bytes = ((size_t)(hi - lo) + 63) & ~(size_t)63;
        ok = (buf[i] = aligned_alloc(64, bytes ? bytes : 64)) != NULL;
        if (ok) {
            memset(buf[i], 0, bytes);
            ptrs[i] = (char *)buf[i] - lo;
        }
    }
    double ta[TIMED_MAX_ROUNDS], tb[TIMED_MAX_ROUNDS];
    int n = 0;
    for (int round = 0, rounds = 1 + TIMED_MAX_ROUNDS; ok && round < rounds; round++) {
        double a, b;
        if (round % 2) {
            b = run_second(x, alt, without, ptrs);
            a = time_one_run(x, NULL, ptrs);
        } else {
            a = time_one_run(x, NULL, ptrs);
            b = run_second(x, alt, without, ptrs);
        }
        ok = a < 1e30 && b < 1e30;
        if (round == 0) {
            const double fit = TIMED_BUDGET_S / (a + b > 1e-9 ? a + b : 1e-9);
            rounds = 1 + (fit < 1 ? 1 : fit > TIMED_MAX_ROUNDS ? TIMED_MAX_ROUNDS : (int)fit);
        } else {
            ta[n] = a, tb[n] = b, n++;
        }
    }
    for (int i = 0; i < FM_FFT_NSLOTS; i++)
        free(buf[i]);
    if (!ok || n == 0)
        return 0;
    rel[1] = fm_fftw_timed_ratio(ta, tb, n);
    return 1;
}

/* A chunk plan and its remainder's, destroyed (pointers cleared). */
static void drop_pair(fftw_impl *x, void **plan, void **rem)
{
    pthread_mutex_lock(&fm_fftw_planner_lock);
    fm_fftw_destroy_plan(x->dbl, *plan);
    fm_fftw_destroy_plan(x->dbl, *rem);
    pthread_mutex_unlock(&fm_fftw_planner_lock);
    *plan = *rem = NULL;
}

/* The plans of an alternative path for a chunk and the remainder, made by `make`; or neither,
 * and no error: the path the alternative competes with works without it. */
static int make_pair(fftw_impl *x, chunk_plan_fn make, unsigned flags, void **plan, void **rem)
{
    if (fm_fftw_make_pair(x, flags, make, plan, rem) == FM_OK)
        return 1;
    drop_pair(x, plan, rem);
    fm_clear_error();
    return 0;
}

/* A prolog on dense c2c transforms: gathered into the scratch, FFTW from there into out
 * (scratch>out), or gathered into out, FFTW in place there (prolog>out: one buffer, not two).
 * Timed (prolog>out must win by 3%; chosen: inplace or chunks); at estimate the scratch stays;
 * inplace (forced or remembered) takes prolog>out, direct and chunks the scratch. */
void fm_fftw_choose_prolog_into_out(fftw_impl *x, const fm_problem *p, unsigned flags)
{
    const int path = x->path;
    if (x->remembered)
        x->timed = TIMED_FROM_WISDOM;
    if (path == PATH_DIRECT || path == PATH_CHUNKS || (path == PATH_TIMED && too_costly_to_time(p, flags)))
        return;
    if (!make_pair(x, fm_fftw_make_ip_plan, flags, &x->ip_plan, &x->ip_rem))
        return;
    x->pro_out = 1;
    if (path == PATH_INPLACE)
        return;
    double t[2] = {0, 0};
    x->timed = time_pair(x, NULL, WITHOUT_PRO_OUT, p, t);
    fm_clear_error();
    const int taken = x->timed && t[0] < 0.97 * t[1];
    x->chosen = !x->timed ? 0 : taken ? PATH_INPLACE : PATH_CHUNKS;
    if (!taken) {
        x->pro_out = 0;
        drop_pair(x, &x->ip_plan, &x->ip_rem);
    }
}

/* A plain batch of dense rows: FFTW's plan over the whole batch (direct), or chunks through an
 * L2-sized scratch into out (the path a chain takes); which wins depends on the machine. Timed
 * (chosen: direct, chunks, or inplace: the chunks copied into out); a forced or remembered path
 * is taken at any effort. */
void fm_fftw_choose_direct_or_chunks(fftw_impl *x, const fm_problem *p, unsigned flags, int into_out)
{
    const int path = x->path;
    if (x->remembered)
        x->timed = TIMED_FROM_WISDOM;
    if (path == PATH_DIRECT || (path == PATH_INPLACE && !into_out) ||
        (path == PATH_TIMED && too_costly_to_time(p, flags)))
        return;
    x->od_in_direct = 0;
    if (!make_pair(x, fm_fftw_make_od_plan, flags, &x->od_plan, &x->od_rem))
        return;
    /* The chunks through the scratch against the chunks copied into out (FFTW in place there),
     * the direct plan set aside; the faster then against the direct plan. */
    if (into_out && (path == PATH_TIMED || path == PATH_INPLACE)) { /* inplace: untimed */
        void *const direct = x->direct;
        x->direct = NULL;
        fm_fftw_choose_prolog_into_out(x, p, flags);
        x->direct = direct;
    }
    int taken = 1;
    if (path == PATH_TIMED) {
        double t[2] = {0, 0};
        x->timed = time_pair(x, NULL, WITHOUT_DIRECT, p, t);
        fm_clear_error(); /* a failed timing run leaves its message; planning itself succeeded */
        taken = x->timed && t[1] < 0.97 * t[0];
        x->chosen = !x->timed ? 0 : !taken ? PATH_DIRECT : x->pro_out ? PATH_INPLACE : PATH_CHUNKS;
    }
    if (!taken) {
        drop_pair(x, &x->od_plan, &x->od_rem);
        if (x->pro_out) {
            x->pro_out = 0;
            drop_pair(x, &x->ip_plan, &x->ip_rem);
        }
        return;
    }
    pthread_mutex_lock(&fm_fftw_planner_lock); /* the chunks won: without a direct plan, execute takes them */
    fm_fftw_destroy_plan(x->dbl, x->direct);
    pthread_mutex_unlock(&fm_fftw_planner_lock);
    x->direct = NULL;
}

/* A single transform over 2-3 axes, plain or (r2c / c2r) with a chain: FFTW's own N-D plan, or
 * the split (rows or slabs, then the columns in tiles); which wins depends on the machine. Timed
 * (chosen: chunks for the split, else direct); forced or remembered direct|inplace keeps FFTW's
 * plan, chunks takes the split. */
int fm_fftw_choose_nd_or_split(fm_context *ctx, const fm_problem *p, fftw_impl *x, unsigned flags, fm_plan *out)
{
    const int path = x->path;
    if (x->remembered)
        x->timed = TIMED_FROM_WISDOM;
    if (path == PATH_DIRECT || path == PATH_INPLACE || (path == PATH_TIMED && too_costly_to_time(p, flags)))
        return 0;
    fm_plan *alt = fm_plan_alloc(p); /* the split's steps make their own choices */
    if (!alt || fm_fft_plan_axis_split(ctx, p, alt) != FM_OK) {
        fm_plan_release(alt);
        fm_clear_error(); /* FFTW's own plan stands: the split was optional */
        return 0;
    }
    int take = path == PATH_CHUNKS;
    if (path == PATH_TIMED) {
        double t[2];
        x->timed = time_pair(x, alt, WITHOUT_DIRECT, p, t);
        take = x->timed && t[1] < 0.97 * t[0];
        fm_clear_error();
        x->chosen = !x->timed ? 0 : take ? PATH_CHUNKS : PATH_DIRECT;
    }
    if (take) {
        out->impl = alt->impl;
        out->execute = alt->execute;
        out->destroy_impl = alt->destroy_impl;
        memcpy(out->required_align, alt->required_align, sizeof out->required_align);
        fm_plan_set_describe(out, "%s%s", alt->describe,
                             x->remembered ? " (wisdom)" : path == PATH_TIMED ? " (timed)" : "");
        alt->impl = NULL;
    }
    fm_plan_release(alt);
    return take;
}
