/* fftw_impl.h : what the FFTW backend's three files share: fftw_fft.c plans (and is the
 * backend's table row), fftw_exec.c runs a plan, fftw_timed.c times a plan's alternatives at
 * planning. Private to backends/cpu/. */
#ifndef FM_FFTW_IMPL_H
#define FM_FFTW_IMPL_H

#include "cpu_fft_chain.h"
#include "internal.h"

#include <fftw3.h>
#include <pthread.h>
#include <stdint.h>

/* FFTW's planner is not thread-safe: planning and plan destruction hold this lock */
extern pthread_mutex_t fm_fftw_planner_lock;

typedef struct fftw_impl {
    int dbl, kind, inverse, naxes;
    int64_t n[3];              /* logical lengths, padded in front with 1 */
    fm_fft_chain_layout c;     /* extents, strides and the chain, as the movers see them */
    int nb;                    /* batch axes with extent > 1 */
    int64_t bext[FM_MAX_NDIM], b_in[FM_MAX_NDIM], b_out[FM_MAX_NDIM], b_pa[FM_MAX_NDIM], b_ea[FM_MAX_NDIM];
    int64_t batch;             /* product of batch extents (0: nothing to do) */
    size_t rs;                 /* real scalar size */
    void *direct;              /* fftw(f)_plan over the caller's layout, or NULL */
    void *direct_ip;           /* the same in place (c2c, in == out with one layout), or NULL */
    void *chunk_plan, *rem_plan;
    /* chunks that FFTW writes straight into out (epilog then applied in place), reading
     * the gathered scratch or, with no prolog, the caller's in: needs at most one batch axis */
    void *od_plan, *od_rem;
    int od_in_direct;
    /* the same, transformed in place when the call passes in == out (c2c, one layout): the
     * column step of a split 2-D/3-D transform runs here with no gather/scatter */
    void *ip_plan, *ip_rem;
    /* c2c with a prolog on dense transforms: the prolog gathered straight into out's place and
     * FFTW in place there (ip_plan), no scratch between; the faster of this and scratch>out
     * is timed at planning (choose_prolog_into_out) */
    int pro_out;
    int same_io; /* in and out share one layout (a call with in == out may then run in place) */
    int64_t chunk, nchunks;    /* transforms per chunk (the last may have fewer), chunks */
    int scratch_inplace;       /* c2c: the chunk is transformed in place in one scratch */
    int threads;               /* OpenMP threads over chunks */
    int pass_threads;          /* threads of the chain passes of a single transform (1 inside chunks) */
    int cols;                  /* column chunks (fm_fft_gather_cols / fm_fft_scatter_cols) */
    int fftw_threads;          /* threads of the chunk plans */
    int64_t in_lo, in_hi, out_lo, out_hi; /* byte spans around the data pointers */
    /* the way where FFTW's plan and the library's paths compete (fftw_timed.c): path is PATH_TIMED
     * (time them, or at estimate the heuristic) or the forced / remembered PATH_*; remembered: path
     * is the problem's cpu_path (the context's wisdom); chosen: what a timing here decided (0: none) */
    int path, remembered, chosen;
    int timed; /* the plan is the faster of FFTW's and the library's path, timed at planning (1) or
                  remembered in the context's wisdom (TIMED_FROM_WISDOM) */
    int prefault; /* columns into a dense out: fault a fresh out in from all threads first */
} fftw_impl;

static inline void fm_fftw_destroy_plan(int dbl, void *p)
{
    if (!p)
        return;
    if (dbl)
        fftw_destroy_plan((fftw_plan)p);
    else
        fftwf_destroy_plan((fftwf_plan)p);
}

/* Scratch of in_bytes and out_bytes (out_bytes 0: one buffer, *out = *in), reused between executes
 * (fresh pages per call cost chains 15-40%, host_scratch.c); 64-byte aligned, so fftw_alignment_of()
 * is 0 as for fftw_malloc'd arrays. 0 when out of memory, holding nothing. */
static inline void fm_fftw_scratch_put(void *in, void *out)
{
    fm_host_scratch_free(in);
    if (out != in)
        fm_host_scratch_free(out);
}
static inline int fm_fftw_scratch_get(size_t in_bytes, size_t out_bytes, void **in, void **out)
{
    *in = fm_host_scratch_alloc(in_bytes);
    *out = out_bytes ? fm_host_scratch_alloc(out_bytes) : *in;
    if (*in && *out)
        return 1;
    fm_fftw_scratch_put(*in, *out);
    *in = *out = NULL;
    return 0;
}
/* Whether p is aligned as x's plans were planned for: all are made on that scratch, so a plan
 * that touches the caller's memory runs there only where fftw_alignment_of() is 0 too. */
static inline int fftw_aligned(const fftw_impl *x, const void *p)
{
    return (x->dbl ? fftw_alignment_of((double *)(uintptr_t)p) : fftwf_alignment_of((float *)(uintptr_t)p))
           == 0;
}

static inline size_t scratch_in_bytes(const fftw_impl *x, int64_t count)
{
    size_t in = (size_t)(count * x->c.sd_in) * x->rs * (x->c.in_cplx ? 2 : 1);
    size_t out = (size_t)(count * x->c.sd_out) * x->rs * (x->c.out_cplx ? 2 : 1);
    return (x->scratch_inplace ? (in > out ? in : out) : in);
}
static inline size_t scratch_out_bytes(const fftw_impl *x, int64_t count)
{
    return x->scratch_inplace ? 0 : (size_t)(count * x->c.sd_out) * x->rs * (x->c.out_cplx ? 2 : 1);
}

/* fftw_exec.c: run x on the slots' pointers (FM_FFT_IN, OUT, PROLOG, EPILOG); the plan's execute */
fm_status fm_fftw_run(const fftw_impl *x, void *const *ptrs);
/* The path the calling thread's last execute of an FFTW plan took (for tests/c/test_fft_cpu.c):
 * FFTW's plan on the caller's arrays (out of place, or in place), or the library's chunks / columns. */
enum { FM_FFTW_RAN_NOTHING, FM_FFTW_RAN_DIRECT, FM_FFTW_RAN_DIRECT_INPLACE, FM_FFTW_RAN_CHUNKS };
int fm_fftw_last_path(void);
fm_status fm_fftw_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream);

/* fftw_fft.c: plans for `count` transforms in place on out's layout / from the gathered
 * scratch or the caller's in straight into out (see fftw_impl.ip_plan, od_plan) */
typedef fm_status (*chunk_plan_fn)(fftw_impl *x, int64_t count, unsigned flags, int nthreads, void **out_plan);
fm_status fm_fftw_make_ip_plan(fftw_impl *x, int64_t count, unsigned flags, int nthreads, void **out_plan);
fm_status fm_fftw_make_od_plan(fftw_impl *x, int64_t count, unsigned flags, int nthreads, void **out_plan);
/* A plan of make's kind for a chunk's count and one for the last, shorter chunk's (none if all are full). */
fm_status fm_fftw_make_pair(fftw_impl *x, unsigned flags, chunk_plan_fn make, void **plan, void **rem);

/* fftw_timed.c: the timed choices between FFTW's plans and the library's own paths */
#define TIMED_FROM_WISDOM 2 /* fftw_impl.timed: the choice was remembered, not timed */
enum { PATH_TIMED = FM_FFT_CPU_PATH_TIMED, PATH_DIRECT = FM_FFT_CPU_PATH_DIRECT, PATH_CHUNKS = FM_FFT_CPU_PATH_CHUNKS,
       PATH_INPLACE = FM_FFT_CPU_PATH_INPLACE };
/* x->path and x->remembered for planning p: FUSEMATH_FFT_CPU_PATH (the context's settings; a
 * malformed value is an error naming it), else p's cpu_path, else what the context's wisdom
 * remembers for p (a step of a split is planned without the generic wisdom lookup), else timed. */
fm_status fm_fftw_choice_begin(fm_context *ctx, const fm_problem *p, fftw_impl *x);
/* After planning p: the way a timing decided (x->chosen) recorded in the context's wisdom. */
void fm_fftw_choice_record(fm_context *ctx, const fm_problem *p, int chosen, const char *describe);
/* What a timed choice compares: the median over rounds of b[i] / a[i] (n rounds, at most 12
 * used; 1 for none). Each round runs both candidates back to back, so each ratio sees one state
 * of the machine. The best time of each, used before, let one lucky round decide: on the H200
 * host's 16 cores prolog>out won the timing for 64 x 65536 c64 in some processes and then ran
 * 1.42-1.52x the plain transform, where scratch>out ran 1.11-1.19x. */
double fm_fftw_timed_ratio(const double *a, const double *b, int n);
/* The choices, each going x->path's way */
void fm_fftw_choose_prolog_into_out(fftw_impl *x, const fm_problem *p, unsigned flags);
/* into_out: the chunks may also run copied into out, FFTW in place there (dense c2c rows) */
void fm_fftw_choose_direct_or_chunks(fftw_impl *x, const fm_problem *p, unsigned flags, int into_out);
/* 1 with `out` holding the split (x is then the caller's to destroy), else 0 */
int fm_fftw_choose_nd_or_split(fm_context *ctx, const fm_problem *p, fftw_impl *x, unsigned flags, fm_plan *out);

#endif
