/* fftw_fft.c : CPU FFT through FFTW3's guru64 interface (c2c, r2c, c2r; single and
 * double precision; 1-3 axes anywhere, batched over all other axes, any strides).
 *
 * Plans are always made on fftw_malloc'd scratch arrays of the same layout (never on the
 * caller's data), without FFTW_UNALIGNED; at execute, a plan that touches the caller's
 * memory is used only if fftw_alignment_of() of the pointers matches the scratch's, else
 * the chunk falls back to the scratch path. Paths (describe's path=):
 *  - direct: no chain, not c2r, out of place, non-negative strides: one plan over the
 *    whole layout, run on the caller's arrays (new-array execute).
 *  - in>out: an epilog on strided rows, or fewer big transforms than threads, at most one
 *    batch axis: per chunk FFTW in -> out, then the epilog in place on the chunk of out
 *    while it is in cache ("(in place when in == out)": FFTW in place on the caller's data).
 *  - scratch>out: a prolog, c2r (whose input FFTW destroys) or an epilog on dense rows, at
 *    most one batch axis: the chunk is gathered into a scratch with the prolog applied, FFTW
 *    writes out, epilog in place.
 *  - prolog>out: a prolog on c2c transforms each contiguous in out: the chunk is gathered
 *    straight into its place in out with the prolog applied and FFTW runs in place there;
 *    at measure/patient timed against scratch>out (choose_prolog_into_out).
 *  - columns: transforms side by side along a unit-stride batch axis with strided points
 *    (a chain, c2r, or more than COLS_DIRECT_MAX_POINTS points): the chunk moves in tiles
 *    through the scratch (fusion/cpu_fft_chain.c).
 *  - scratch: everything else (several batch axes, negative out strides, in-place with
 *    no chain, misaligned pointers): gather with the prolog, FFTW scratch -> scratch,
 *    scatter with the epilog.
 * Chunks hold about CHUNK_BYTES of data; a plan for the chunk's count and one for the
 * remainder. Chunks run on the library's threads (OpenMP, shared with FFTW's OpenMP build),
 * each with its own scratch and single-threaded plans; fewer big transforms than threads run
 * one at a time on all threads, and a single transform (batch 1) is one chunk planned with
 * FFTW's threads, its chain one threaded pass before and/or after the FFT (",single").
 * The chain loops themselves are in fusion/cpu_fft_chain.c.
 * FFTW's planner is not thread-safe: planning and plan destruction hold one process-wide
 * mutex; execution is concurrent. This file plans; fftw_exec.c runs a plan, fftw_timed.c
 * times a plan's alternatives (fftw_impl.h is what they share). */
#include "fft_axis_split.h"
#include "fftw_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Scratch per chunk (input + output): 256 KiB, not 1 MiB (docs/design.md, Lessons from
 * measurement: fused/plain 1.04-1.12 against 1.14-1.43). Column chunks keep their own size. */
#define CHUNK_BYTES ((int64_t)256 << 10)
/* Column chunks: long point rows (FM_FFT_COL_BLOCK transforms); a column transform takes them
 * when a quarter of this holds 4 (the rule the tiles were tuned with on 1 MiB chunks). */
#define COL_CHUNK_BYTES ((int64_t)4 << 20)
#define EPILOG_SCRATCH_MAX ((int64_t)2 << 20) /* epilog-only chunks this small go through the scratch */
#define THREAD_MIN_ELEMS 32768         /* below this, one thread */
#define FFTW_THREAD_MIN_ELEMS 65536    /* a single transform this large uses FFTW's threads */

pthread_mutex_t fm_fftw_planner_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int threads_ok;

static void init_threads(void) { threads_ok = fftw_init_threads() != 0 && fftwf_init_threads() != 0; }

int fm_fftw_planner_enter(void)
{
    pthread_once(&threads_once, init_threads);
    pthread_mutex_lock(&fm_fftw_planner_lock);
    return threads_ok;
}

void fm_fftw_planner_leave(void) { pthread_mutex_unlock(&fm_fftw_planner_lock); }

static fm_status fm_fftw_probe(const fm_settings *settings, void **state, const char **why)
{
    pthread_once(&threads_once, init_threads);
    return FM_OK;
}

static void fm_fftw_destroy(void *v)
{
    fftw_impl *x = v;
    void *const plans[] = {x->direct,  x->direct_ip, x->chunk_plan, x->rem_plan,
                           x->od_plan, x->od_rem,    x->ip_plan,    x->ip_rem};
    pthread_mutex_lock(&fm_fftw_planner_lock);
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++)
        fm_fftw_destroy_plan(x->dbl, plans[i]);
    pthread_mutex_unlock(&fm_fftw_planner_lock);
    free(x);
}

/* One guru64 plan; call with fm_fftw_planner_lock held. */
static void *make_plan(const fftw_impl *x, int rank, const fftw_iodim64 *dims, int hrank, const fftw_iodim64 *hdims,
                       void *in, void *out, unsigned flags, int nthreads)
{
    int sign = x->inverse ? FFTW_BACKWARD : FFTW_FORWARD;
    if (threads_ok)
        (x->dbl ? fftw_plan_with_nthreads : fftwf_plan_with_nthreads)(nthreads);
/* the guru64 planner of x's kind in precision PRE (fftw: double, fftwf: single) */
#define GURU64(PRE)                                                                                  \
    (x->kind == FM_FFT_C2C ? (void *)PRE##_plan_guru64_dft(rank, dims, hrank, hdims, in, out, sign, flags) \
     : x->kind == FM_FFT_R2C ? (void *)PRE##_plan_guru64_dft_r2c(rank, dims, hrank, hdims, in, out, flags) \
                             : (void *)PRE##_plan_guru64_dft_c2r(rank, dims, hrank, hdims, in, out, flags))
    return x->dbl ? GURU64(fftw) : GURU64(fftwf);
#undef GURU64
}

/* Up to this many points per transform, FFTW's own strided plan over the whole batch beats the
 * tiles through the scratch for a plain out-of-place call; above, it thrashes on the power-of-two
 * strides (measured, docs/design.md, FFT). */
#define COLS_DIRECT_MAX_POINTS 256
/* In place (the column step of a split 2-D/3-D transform), FFTW on the caller's columns per
 * chunk, the epilog across them, costs no copies: kept up to here (1024^2 with an epilog: the
 * same within noise either way). */
#define COLS_INPLACE_MAX_POINTS 1024

/* ---- planning ---- */
static const char *const kind_names[3] = {"c2c", "r2c", "c2r"};
static const char *const effort_names[3] = {"estimate", "measure", "patient"};

/* Whether t steps forward along every axis it has more than one element on. */
static int nonneg_strides(const fm_tensor *t)
{
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] > 1 && t->strides[i] <= 0)
            return 0;
    return 1;
}

/* in and out share one layout (c2c in place is then possible) */
static int same_layout(const fm_tensor *ti, const fm_tensor *to)
{
    int same = ti->ndim == to->ndim;
    for (int d = 0; same && d < ti->ndim; d++)
        same = ti->shape[d] <= 1 || ti->strides[d] == to->strides[d];
    return same;
}

/* *plan: x's transform over dims (batch hdims), planned on scratch arrays of in_bytes and
 * out_bytes (0: in place); `what` names the plan in the message when FFTW returns none. */
static fm_status plan_on_scratch(const fftw_impl *x, int rank, const fftw_iodim64 *dims, int hrank,
                                 const fftw_iodim64 *hdims, size_t in_bytes, size_t out_bytes, unsigned flags,
                                 int nthreads, const char *what, void **plan)
{
    void *in, *out;
    if (!fm_fftw_scratch_get(in_bytes, out_bytes, &in, &out))
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory for the planner's scratch arrays");
    pthread_mutex_lock(&fm_fftw_planner_lock);
    *plan = make_plan(x, rank, dims, hrank, hdims, in, out, flags, nthreads);
    pthread_mutex_unlock(&fm_fftw_planner_lock);
    fm_fftw_scratch_put(in, out);
    if (*plan)
        return FM_OK;
    return fm_fail(FM_ERR_BACKEND, "fft: FFTW could not plan the %s %s %s transform (%s (%s) returned NULL)",
                   x->dbl ? "double" : "single", kind_names[x->kind], x->inverse ? "inverse" : "forward",
                   x->dbl ? "fftw_plan_guru64" : "fftwf_plan_guru64", what);
}

/* FFTW's plan over the caller's whole layout (x->direct); inplace: the same in place on out's
 * layout (x->direct_ip), so a chain-free c2c called with in == out (the second step of a split
 * multi-axis transform) runs as one FFTW call. x's byte spans are set. */
static fm_status make_direct(fftw_impl *x, unsigned flags, int nthreads, int inplace)
{
    fftw_iodim64 dims[3], hd[FM_MAX_NDIM];
    int rank = 0;
    for (int k = 3 - x->naxes; k < 3; k++)
        dims[rank++] = (fftw_iodim64){x->n[k], inplace ? x->c.s_out[k] : x->c.s_in[k], x->c.s_out[k]};
    for (int i = 0; i < x->nb; i++)
        hd[i] = (fftw_iodim64){x->bext[i], inplace ? x->b_out[i] : x->b_in[i], x->b_out[i]};
    if (inplace)
        return plan_on_scratch(x, rank, dims, x->nb, hd, (size_t)x->out_hi, 0, flags, nthreads, "in place",
                               &x->direct_ip);
    return plan_on_scratch(x, rank, dims, x->nb, hd, (size_t)x->in_hi, (size_t)x->out_hi, flags, nthreads,
                           "direct", &x->direct);
}

/* Plan for `count` transforms on contiguous scratch. */
static fm_status make_chunk_plan(fftw_impl *x, int64_t count, unsigned flags, int nthreads, void **out_plan)
{
    fftw_iodim64 dims[3], hd[1];
    int rank = 0;
    int64_t sti = 1, sto = 1;
    int64_t si[3], so[3];
    for (int k = 2; k >= 0; k--) {
        si[k] = sti, so[k] = sto;
        sti *= x->c.ext_in[k], sto *= x->c.ext_out[k];
    }
    for (int k = 3 - x->naxes; k < 3; k++)
        dims[rank++] = (fftw_iodim64){x->n[k], si[k], so[k]};
    hd[0] = (fftw_iodim64){count, x->c.sd_in, x->c.sd_out};
    return plan_on_scratch(x, rank, dims, 1, hd, scratch_in_bytes(x, count), scratch_out_bytes(x, count),
                           flags, nthreads, "chunk", out_plan);
}

/* Bytes a layout of `count` transforms (extents ext, strides st, batch stride bs) spans. */
static size_t layout_bytes(const int64_t *ext, const int64_t *st, int64_t count, int64_t bs, size_t es)
{
    int64_t hi = (count - 1) * bs;
    for (int k = 0; k < 3; k++)
        hi += (ext[k] - 1) * st[k];
    return (size_t)(hi + 1) * es;
}

/* In-place plan for `count` transforms on out's layout (see fftw_impl.ip_plan). */
fm_status fm_fftw_make_ip_plan(fftw_impl *x, int64_t count, unsigned flags, int nthreads, void **out_plan)
{
    fftw_iodim64 dims[3], hd[1];
    int rank = 0;
    for (int k = 3 - x->naxes; k < 3; k++)
        dims[rank++] = (fftw_iodim64){x->n[k], x->c.s_out[k], x->c.s_out[k]};
    int64_t bout = x->nb ? x->b_out[0] : 0;
    hd[0] = (fftw_iodim64){count, bout, bout};
    const size_t bytes = layout_bytes(x->c.ext_out, x->c.s_out, count, bout, x->rs * 2);
    return plan_on_scratch(x, rank, dims, 1, hd, bytes, 0, flags, nthreads, "in place", out_plan);
}

/* Out-direct plan for `count` transforms (see fftw_impl.od_plan). */
fm_status fm_fftw_make_od_plan(fftw_impl *x, int64_t count, unsigned flags, int nthreads, void **out_plan)
{
    fftw_iodim64 dims[3], hd[1];
    int64_t si[3], sti = 1;
    for (int k = 2; k >= 0; k--)
        si[k] = sti, sti *= x->c.ext_in[k];
    int rank = 0;
    for (int k = 3 - x->naxes; k < 3; k++)
        dims[rank++] = (fftw_iodim64){x->n[k], x->od_in_direct ? x->c.s_in[k] : si[k], x->c.s_out[k]};
    int64_t bin = x->nb ? x->b_in[0] : 0, bout = x->nb ? x->b_out[0] : 0;
    hd[0] = (fftw_iodim64){count, x->od_in_direct ? bin : x->c.sd_in, bout};
    size_t ein = x->rs * (x->c.in_cplx ? 2 : 1), eout = x->rs * (x->c.out_cplx ? 2 : 1);
    size_t in_bytes = x->od_in_direct ? layout_bytes(x->c.ext_in, x->c.s_in, count, bin, ein)
                                      : (size_t)(count * x->c.sd_in) * ein;
    size_t out_bytes = layout_bytes(x->c.ext_out, x->c.s_out, count, bout, eout);
    return plan_on_scratch(x, rank, dims, 1, hd, in_bytes, out_bytes, flags, nthreads, "out direct",
                           out_plan);
}

/* Each transform of out contiguous, as the gather writes it (extents of 1 aside). */
static int dense_transforms(const fm_fft_chain_layout *c)
{
    int64_t want = 1;
    for (int k = 2; k >= 0; k--) {
        if (c->ext_out[k] > 1 && c->s_out[k] != want)
            return 0;
        want *= c->ext_out[k];
    }
    return 1;
}

/* Transforms per chunk: about `bytes` of scratch each, but at least one chunk per thread. */
static int64_t chunk_count(int64_t bytes, int64_t entry_bytes, int64_t batch, int want_threads)
{
    int64_t c = fm_max_i64(1, bytes / fm_max_i64(entry_bytes, 1));
    if (want_threads > 1 && (batch + c - 1) / c < want_threads)
        c = fm_max_i64(1, (batch + want_threads - 1) / want_threads);
    return fm_min_i64(c, batch);
}

/* x's transform, chain and batch as the movers see them, from problem p. */
static void layout_from_problem(fftw_impl *x, const fm_problem *p)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    const int has_pa = (p->present >> FM_FFT_PROLOG) & 1, has_ea = (p->present >> FM_FFT_EPILOG) & 1;
    fm_dtype rdt = fm_dtype_is_complex(ti->dtype) ? ti->dtype : to->dtype;
    x->dbl = rdt == FM_C128;
    x->rs = x->dbl ? sizeof(double) : sizeof(float);
    x->kind = fp->kind;
    x->inverse = fp->inverse;
    x->naxes = fp->naxes;
    x->c.in_cplx = fm_dtype_is_complex(ti->dtype);
    x->c.out_cplx = fm_dtype_is_complex(to->dtype);
    x->c.pa_cplx = has_pa && fm_dtype_is_complex(p->t[FM_FFT_PROLOG].dtype);
    x->c.ea_cplx = has_ea && fm_dtype_is_complex(p->t[FM_FFT_EPILOG].dtype);
    x->same_io = same_layout(ti, to);
    x->c.pro_ops = fp->prolog_ops;
    x->c.epi_ops = fp->epilog_ops;
    memcpy(x->c.pro_scale, fp->prolog_scale, sizeof x->c.pro_scale);
    memcpy(x->c.epi_scale, fp->epilog_scale, sizeof x->c.epi_scale);
    /* An epilog that is only a scale (the norm of an inverse transform, say) rides the input's
     * gather as a prolog scale instead of costing a pass over out: c2r copies its input before
     * FFTW runs anyway (FFTW's c2r plans overwrite their input), and the chunked paths gather
     * theirs into a scratch. FFT(x) * s = FFT(x * s), and with the prolog's conj FFT(conj(x)) * s =
     * FFT(conj(x * conj(s))); a real input (r2c) takes a real s. */
    if (x->c.epi_ops == FM_FFT_OP_SCALE && (x->kind == FM_FFT_C2C || x->c.epi_scale[1] == 0)) {
        const double a = x->c.pro_scale[0], b = x->c.pro_scale[1], c = x->c.epi_scale[0];
        const double d = (x->c.pro_ops & FM_FFT_OP_CONJ) ? -x->c.epi_scale[1] : x->c.epi_scale[1];
        x->c.pro_scale[0] = a * c - b * d, x->c.pro_scale[1] = a * d + b * c;
        x->c.pro_ops |= FM_FFT_OP_SCALE;
        x->c.epi_ops = 0, x->c.epi_scale[0] = 1, x->c.epi_scale[1] = 0;
    }
    for (int k = 0; k < 3; k++) /* x is zeroed: the strides of absent axes are 0 */
        x->n[k] = x->c.ext_in[k] = x->c.ext_out[k] = 1;
    for (int i = 0; i < x->naxes; i++) {
        int k = 3 - x->naxes + i, a = fp->axes[i];
        x->n[k] = fp->n[i];
        x->c.ext_in[k] = ti->shape[a];
        x->c.ext_out[k] = to->shape[a];
        x->c.s_in[k] = ti->strides[a];
        x->c.s_out[k] = to->strides[a];
        x->c.s_pa[k] = has_pa ? p->t[FM_FFT_PROLOG].strides[a] : 0;
        x->c.s_ea[k] = has_ea ? p->t[FM_FFT_EPILOG].strides[a] : 0;
    }
    x->batch = 1;
    for (int d = 0; d < ti->ndim; d++) {
        int transformed = 0;
        for (int i = 0; i < x->naxes; i++)
            transformed |= fp->axes[i] == d;
        if (transformed)
            continue;
        x->batch *= ti->shape[d];
        if (ti->shape[d] <= 1)
            continue;
        x->bext[x->nb] = ti->shape[d];
        x->b_in[x->nb] = ti->strides[d];
        x->b_out[x->nb] = to->strides[d];
        x->b_pa[x->nb] = has_pa ? p->t[FM_FFT_PROLOG].strides[d] : 0;
        x->b_ea[x->nb] = has_ea ? p->t[FM_FFT_EPILOG].strides[d] : 0;
        /* a batch axis nested exactly inside the previous one in every operand merges with it
         * (the batch of a contiguous 3-D array's last-axis step is one axis, not two): one
         * batch axis is what the out-direct paths take */
        if (x->nb > 0) {
            const int j = x->nb - 1;
            const int64_t e = x->bext[x->nb];
            if (x->b_in[j] == x->b_in[x->nb] * e && x->b_out[j] == x->b_out[x->nb] * e &&
                x->b_pa[j] == x->b_pa[x->nb] * e && x->b_ea[j] == x->b_ea[x->nb] * e) {
                x->bext[j] *= e;
                x->b_in[j] = x->b_in[x->nb], x->b_out[j] = x->b_out[x->nb];
                x->b_pa[j] = x->b_pa[x->nb], x->b_ea[j] = x->b_ea[x->nb];
                continue;
            }
        }
        x->nb++;
    }
    x->c.b_pa0 = x->nb ? x->b_pa[0] : 0;
    x->c.b_ea0 = x->nb ? x->b_ea[0] : 0;
    x->c.per_in = x->c.ext_in[0] * x->c.ext_in[1] * x->c.ext_in[2];
    x->c.per_out = x->c.ext_out[0] * x->c.ext_out[1] * x->c.ext_out[2];
    x->c.sd_in = x->c.per_in, x->c.sd_out = x->c.per_out;
}

/* What the steps of planning a non-empty batch share. */
typedef struct sizing {
    unsigned flags;      /* FFTW's planner flags for the effort */
    int req_threads;     /* the threads asked for (the problem's, resolved) */
    double total;        /* elements in and out over the batch */
    int64_t entry_bytes; /* scratch per transform, as the row chunks count it */
} sizing;

/* Chunks, threads and the column path (x->chunk, nchunks, rem, threads, fftw_threads,
 * pass_threads, cols; the columns' scratch padding). */
static void plan_chunking(fftw_impl *x, const sizing *z)
{
    int want_threads = z->total < THREAD_MIN_ELEMS ? 1 : z->req_threads;
    x->chunk = chunk_count(CHUNK_BYTES, z->entry_bytes, x->batch, want_threads);
    x->nchunks = (x->batch + x->chunk - 1) / x->chunk;
    x->threads = (int)fm_min_i64(want_threads, x->nchunks);
    /* fewer big transforms than threads (4 x 2^20 on 16 cores): one at a time on all the
     * threads, not one thread each with the others idle (that ran 4.0x the plain transform) */
    if (x->threads > 1 && x->threads < want_threads && (double)x->c.per_in >= FFTW_THREAD_MIN_ELEMS)
        x->threads = 1;
    x->fftw_threads = (x->threads <= 1 && (double)x->c.per_in >= FFTW_THREAD_MIN_ELEMS) ? z->req_threads : 1;
    /* chunks run one after the other: their chain passes get the threads FFTW gets */
    x->pass_threads = x->threads <= 1 ? x->fftw_threads : 1;
    /* column chunks: transforms side by side along a unit-stride batch axis, their points
     * strided, at least 4 per chunk (a point's row across them is what the loops vectorise) */
    int pos_strides = 1;
    for (int k = 3 - x->naxes; k < 3; k++)
        pos_strides = pos_strides && x->c.s_in[k] > 0 && x->c.s_out[k] > 0;
    x->cols = x->nb == 1 && x->b_in[0] == 1 && x->b_out[0] == 1 && x->c.s_in[2] != 1 && pos_strides &&
              chunk_count(COL_CHUNK_BYTES / 4, z->entry_bytes, x->batch, want_threads) >= 4 && x->pass_threads <= 1 &&
              (x->c.pro_ops || x->c.epi_ops || x->kind == FM_FFT_C2R || x->c.per_in > COLS_DIRECT_MAX_POINTS);
    if (x->cols) {
        /* long rows per point (FM_FFT_COL_BLOCK transforms) amortise the per-row work; c2c
         * transforms the chunk in place in one scratch, which keeps it near L2's size */
        x->scratch_inplace = x->kind == FM_FFT_C2C;
        /* one cache line more between the scratch's transforms: the tile transposes step
         * across them, and at a power-of-two distance all 64 fell into one cache set (2048
         * columns of 2048 c64, one thread, dev machine: 20.7 -> 13.0 ms; rows take 11.5) */
        x->c.sd_in += 64 / ((int64_t)x->rs * (x->c.in_cplx ? 2 : 1));
        x->c.sd_out += 64 / ((int64_t)x->rs * (x->c.out_cplx ? 2 : 1));
        const int64_t per_thread = (x->batch + x->threads - 1) / x->threads;
        const int64_t by_bytes = fm_max_i64(1, COL_CHUNK_BYTES / fm_max_i64(z->entry_bytes, 1));
        x->chunk = fm_max_i64(x->chunk, fm_min_i64(fm_min_i64(FM_FFT_COL_BLOCK, per_thread), by_bytes));
        x->nchunks = (x->batch + x->chunk - 1) / x->chunk;
    }
    /* The chunks are shared out statically: a count that is not a multiple of the threads
     * leaves some threads a round more (the 1025 columns of a 2048^2 r2c's split on 16
     * threads: 17 chunks of 64, two rounds for one thread while 15 idle). Spread the batch
     * over the next multiple of the threads instead (columns keep at least 4 per chunk). */
    if (x->threads > 1 && x->nchunks % x->threads) {
        const int64_t c = fm_part_for_threads(x->batch, x->nchunks, x->threads);
        if (c >= (x->cols ? 4 : 1)) {
            x->chunk = c;
            x->nchunks = (x->batch + c - 1) / c;
        }
    }
}

fm_status fm_fftw_make_pair(fftw_impl *x, unsigned flags, chunk_plan_fn make, void **plan, void **rem)
{
    const int64_t last = x->batch % x->chunk; /* the last chunk's count, when it is short */
    fm_status s = make(x, x->chunk, flags, x->fftw_threads, plan);
    if (s == FM_OK && last)
        s = make(x, last, flags, x->fftw_threads, rem);
    return s;
}

/* The chunks' own plans: through the scratch (always: the fallback of every path), straight
 * into out (chains, c2r, one transform at a time on all threads) and in place on out when a
 * call passes in == out. Sets *one_at_a_time. */
static fm_status make_chunk_plans(fftw_impl *x, const fm_problem *p, const sizing *z, int *one_at_a_time)
{
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    fm_status s = fm_fftw_make_pair(x, z->flags, make_chunk_plan, &x->chunk_plan, &x->rem_plan);
    if (s != FM_OK)
        return s;
    /* several transforms, each on all the threads: FFTW's OpenMP build planned 4 x 2^20 as
     * one plan over the batch at 19 ms, against 7 ms one transform at a time (16 cores) */
    *one_at_a_time = x->threads <= 1 && x->nchunks > 1 && x->fftw_threads > 1;
    /* with a chain, c2r or one_at_a_time: FFTW writes out directly, the epilog runs in place */
    if ((x->c.pro_ops || x->c.epi_ops || x->kind == FM_FFT_C2R || *one_at_a_time) && x->nb <= 1 && !x->cols &&
        nonneg_strides(to)) {
        /* An epilog alone on dense cache-sized chunks still copies the chunk into the scratch
         * first: FFTW from an L2-resident scratch to out beat FFTW straight from memory. Strided
         * rows (a split's column step) keep FFTW on the caller's memory. */
        const int chunk_fits = z->entry_bytes * x->chunk <= EPILOG_SCRATCH_MAX;
        x->od_in_direct = !x->c.pro_ops && x->kind != FM_FFT_C2R && nonneg_strides(ti) &&
                          !(x->c.epi_ops && x->c.s_in[2] == 1 && chunk_fits);
        if ((s = fm_fftw_make_pair(x, z->flags, fm_fftw_make_od_plan, &x->od_plan, &x->od_rem)) != FM_OK)
            return s;
        if (x->kind == FM_FFT_C2C && x->od_in_direct && x->same_io &&
            (s = fm_fftw_make_pair(x, z->flags, fm_fftw_make_ip_plan, &x->ip_plan, &x->ip_rem)) != FM_OK)
            return s;
    }
    /* columns: FFTW in place on the caller's columns when a call passes in == out and the
     * transforms are short (the chain then runs on them across the columns) */
    if (x->cols && x->kind == FM_FFT_C2C && !x->c.pro_ops && x->c.per_in <= COLS_INPLACE_MAX_POINTS && x->same_io)
        return fm_fftw_make_pair(x, z->flags, fm_fftw_make_ip_plan, &x->ip_plan, &x->ip_rem);
    return FM_OK;
}

/* FFTW's plan over the caller's whole arrays where it applies (no chain, input preserved, a
 * layout FFTW takes, a planning scratch of reasonable size), and the timed choices against it
 * (fftw_timed.c). *split: the choice took the split, which `out` now holds. */
static fm_status make_direct_and_choose(fm_context *ctx, const fm_problem *p, fftw_impl *x, const sizing *z,
                                        int one_at_a_time, fm_plan *out, int *split)
{
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    fm_status s;
    fm_tensor_byte_span(ti, &x->in_lo, &x->in_hi);
    fm_tensor_byte_span(to, &x->out_lo, &x->out_hi);
    /* only a dense out: a strided view's span holds other data, and populating it could
     * map gigabytes the call never writes */
    x->prefault = x->cols && (double)(x->out_hi - x->out_lo) <=
                                 (double)fm_tensor_numel(to) * (double)fm_dtype_size(to->dtype) + 4096.0;
    const double numel_bytes = z->total * (double)x->rs * 2;
    /* dense c2c transforms may also run gathered (or, plain, copied) into out, in place there */
    const int into_out = x->kind == FM_FFT_C2C && !x->ip_plan && dense_transforms(&x->c);
    if (!x->c.pro_ops && !x->c.epi_ops && x->kind != FM_FFT_C2R && !one_at_a_time && !x->cols && nonneg_strides(ti) &&
        nonneg_strides(to) && (double)(x->in_hi + x->out_hi) <= 2.0 * numel_bytes + 4096) {
        const int dthreads = z->total >= FFTW_THREAD_MIN_ELEMS ? z->req_threads : 1;
        if ((s = make_direct(x, z->flags, dthreads, 0)) != FM_OK)
            return s;
        if (x->kind == FM_FFT_C2C && x->same_io && (s = make_direct(x, z->flags, dthreads, 1)) != FM_OK)
            return s;
        const int rows = x->nb == 1 && x->batch >= 2 && x->c.s_in[2] == 1 && x->c.s_out[2] == 1 &&
                         z->entry_bytes * x->chunk <= EPILOG_SCRATCH_MAX;
        if (x->direct && rows)
            fm_fftw_choose_direct_or_chunks(x, p, z->flags, into_out);
        if (x->direct && x->naxes > 1 && x->batch == 1 && (*split = fm_fftw_choose_nd_or_split(ctx, p, x, z->flags, out)))
            return FM_OK;
    }
    if (x->od_plan && x->c.pro_ops && into_out)
        fm_fftw_choose_prolog_into_out(x, p, z->flags);
    return FM_OK;
}

/* describe() of x's plan for p. */
static void describe_plan(const fftw_impl *x, const fm_problem *p, fm_plan *out)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    char shape[96] = "", tr[64] = "", pro[32], epi[32], ax[24] = "";
    size_t u = 0;
    for (int d = 0; d < ti->ndim; d++) {
        int transformed = 0;
        for (int i = 0; i < x->naxes; i++)
            transformed |= fp->axes[i] == d;
        if (!transformed && u < sizeof shape)
            u += (size_t)snprintf(shape + u, sizeof shape - u, "%s%lld", u ? "x" : "", (long long)ti->shape[d]);
    }
    if (!u)
        snprintf(shape, sizeof shape, "1");
    u = 0;
    for (int i = 0; i < x->naxes && u < sizeof tr; i++)
        u += (size_t)snprintf(tr + u, sizeof tr - u, "%s%lld", i ? "x" : "", (long long)fp->n[i]);
    u = 0;
    for (int i = 0; i < x->naxes && u < sizeof ax; i++)
        u += (size_t)snprintf(ax + u, sizeof ax - u, "%s%d", i ? "," : "", fp->axes[i]);
    fm_fft_ops_text(pro, sizeof pro, x->c.pro_ops);
    fm_fft_ops_text(epi, sizeof epi, x->c.epi_ops);
    /* path: the paths of this file's head comment (copy>out: prolog>out without a prolog) */
    const char *mode = x->batch == 0  ? "empty"
                       : x->cols      ? "columns"
                       : x->direct    ? "direct"
                       : !x->od_plan  ? "scratch"
                       : x->pro_out   ? (x->c.pro_ops ? "prolog>out" : "copy>out")
                       : x->od_in_direct ? "in>out" : "scratch>out";
    char modebuf[80];
    snprintf(modebuf, sizeof modebuf, "%s%s%s%s", mode, x->ip_plan && !x->pro_out ? "(in place when in == out)" : "",
             x->batch == 1 && (x->c.pro_ops || x->c.epi_ops) ? ",single" : "",
             x->timed == TIMED_FROM_WISDOM ? ",wisdom" : x->timed ? ",timed" : "");
    fm_plan_set_describe(out,
             "fft cpu/fftw %s %s %sx[%s] axes=(%s) %s prolog=%s epilog=%s path=%s chunks=%lld chunk=%lld threads=%d "
             "fftw_threads=%d effort=%s",
             fm_dtype_name(x->c.in_cplx ? ti->dtype : to->dtype), kind_names[x->kind], shape, tr, ax,
             x->inverse ? "inverse" : "forward", pro, epi, modebuf, (long long)x->nchunks, (long long)x->chunk,
             x->threads, x->fftw_threads, effort_names[fp->effort]);
}

/* The largest prime factor of n > 13, else 0 (FFTW's codelets take the factors up to 13). */
static int64_t rough_factor(int64_t n)
{
    for (int64_t f = 2; f <= 13; f++)
        while (n % f == 0)
            n /= f;
    int64_t p = 0;
    for (int64_t f = 17; f * f <= n; f += 2)
        for (; n % f == 0; n /= f)
            p = f;
    return n > 1 ? n : p; /* what is left is a prime above every f tried */
}

/* The plan's footprint for the plan cache's byte cap: FFTW's plans hold about one transform's
 * worth of twiddles per axis, and for a prime factor p > 13 (Rader / Bluestein) buffers of about
 * 10 p elements (host heap growth while planning, glibc's mallinfo2: 0.3-1.5x one transform for
 * lengths of small factors, 10-12x for primes). Measuring it at every planning cost 5-15 ms once
 * hundreds of plans fragmented the heap (mallinfo2 walks every free block). */
static size_t fftw_footprint(const fftw_impl *x)
{
    int64_t elements = 0;
    for (int d = 0; d < 3; d++)
        elements += x->n[d] > 1 ? x->n[d] + 10 * rough_factor(x->n[d]) : 0;
    return sizeof *x + (size_t)elements * 2 * x->rs;
}

/* The backend's plan: FFTW's plans for x and the paths around them (the file's header), then
 * describe(); a choice timed here is recorded in the context's wisdom. */
static fm_status fm_fftw_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    if (p->t[FM_FFT_IN].dtype == FM_LD || p->t[FM_FFT_IN].dtype == FM_CLD) {
#ifdef FM_HAVE_FFTW3L
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fft: long double is the fftw-ld backend's (libfftw3l)");
#else
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fft: a long-double (ld / cld) transform needs FFTW's "
                       "long-double library libfftw3l, which was not found when fusemath was built (Debian: "
                       "libfftw3-dev has it); convert to float64 / complex128 for double precision");
#endif
    }
    if (p->t[FM_FFT_IN].dtype == FM_F16 || p->t[FM_FFT_IN].dtype == FM_C32 || p->t[FM_FFT_OUT].dtype == FM_F16 ||
        p->t[FM_FFT_OUT].dtype == FM_C32)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fft: %s -> %s: f16/c32 transforms run on cuda only (FFTW has no half "
                       "precision); pass GPU arrays, or convert to f32/c64 on the cpu",
                       fm_dtype_name(p->t[FM_FFT_IN].dtype), fm_dtype_name(p->t[FM_FFT_OUT].dtype));
    /* Several axes with a chain: c2c splits into batched steps that carry the chain inside
     * their own passes (fft_axis_split.c). r2c / c2r take FFTW's own N-D plan with the chain as
     * passes ("single") unless the split times faster (fftw_timed.c). */
    const int split_candidate = fm_fft_should_split_axes(p);
    if (split_candidate && p->u.fft.kind == FM_FFT_C2C)
        return fm_fft_plan_axis_split(ctx, p, out); /* the steps make their own choices */
    fftw_impl *x = calloc(1, sizeof *x);
    if (!x)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory while planning");
    fm_status s = fm_fftw_choice_begin(ctx, p, x);
    if (s != FM_OK) {
        free(x);
        return s;
    }
    layout_from_problem(x, p);
    const int effort = p->u.fft.effort;
    sizing z = {
        .flags = effort == FM_FFT_EFFORT_PATIENT ? FFTW_PATIENT : effort == FM_FFT_EFFORT_MEASURE ? FFTW_MEASURE
                                                                                               : FFTW_ESTIMATE,
        .req_threads = p->u.fft.num_threads > 0 ? p->u.fft.num_threads : 1,
        .total = (double)x->batch * (double)(x->c.per_in + x->c.per_out),
        .entry_bytes = (int64_t)(scratch_in_bytes(x, 1) + scratch_out_bytes(x, 1)),
    };
    int split = 0, one_at_a_time = 0;
    if (x->batch > 0) {
        plan_chunking(x, &z);
        if ((s = make_chunk_plans(x, p, &z, &one_at_a_time)) == FM_OK)
            s = make_direct_and_choose(ctx, p, x, &z, one_at_a_time, out, &split);
    }
    if (s == FM_OK && !split && split_candidate)
        split = fm_fftw_choose_nd_or_split(ctx, p, x, z.flags, out);
    const int chosen = x->chosen;
    if (s == FM_OK && !split) {
        out->impl = x;
        out->execute = fm_fftw_execute;
        out->destroy_impl = fm_fftw_destroy;
        for (int i = 0; i < FM_FFT_NSLOTS; i++)
            out->required_align[i] = x->rs;
        out->footprint += fftw_footprint(x);
        describe_plan(x, p, out);
    } else {
        fm_fftw_destroy(x); /* failed, or the split took the plan */
    }
    if (s == FM_OK)
        fm_fftw_choice_record(ctx, p, chosen, out->describe);
    return s;
}

/* FFTW's wisdom (its measured plans), double then single precision, for the context's wisdom
 * file (the timed choices are entries of the file itself, op "fft"). A blob of a version 1 file
 * also holds the timed choices of that time after CHOICES_MARK: keyed before problems carried
 * their settings, they match nothing now and are skipped. */
#define FFTWF_MARK "\n#fusemath fftwf\n"
#define CHOICES_MARK "\n#fusemath timed choices\n"

static fm_status fm_fftw_wisdom_export(char **text)
{
    pthread_mutex_lock(&fm_fftw_planner_lock);
    char *d = fftw_export_wisdom_to_string(), *f = fftwf_export_wisdom_to_string();
    pthread_mutex_unlock(&fm_fftw_planner_lock);
    fm_status s = FM_OK;
    size_t nd = d ? strlen(d) : 0, nf = f ? strlen(f) : 0;
    size_t size = nd + nf + sizeof FFTWF_MARK;
    *text = malloc(size);
    if (!*text)
        s = fm_fail(FM_ERR_OUT_OF_MEMORY, "wisdom: out of host memory for FFTW's wisdom");
    else
        snprintf(*text, size, "%s%s%s", d ? d : "", FFTWF_MARK, f ? f : "");
    fftw_free(d);
    fftwf_free(f);
    return s;
}

static fm_status fm_fftw_wisdom_import(const char *text)
{
    const char *mark = strstr(text, FFTWF_MARK);
    if (!mark)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: the fftw blob has no single-precision part");
    /* one copy, cut into the double and the single precision part (and before CHOICES_MARK) */
    const size_t nd = (size_t)(mark - text), size = strlen(text) + 1;
    char *d = malloc(size);
    if (!d)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "wisdom load: out of host memory");
    memcpy(d, text, size);
    char *f = d + nd + strlen(FFTWF_MARK), *cm = strstr(f, CHOICES_MARK);
    d[nd] = '\0';
    if (cm)
        *cm = '\0';
    pthread_mutex_lock(&fm_fftw_planner_lock);
    int ok = (nd == 0 || fftw_import_wisdom_from_string(d)) && (!*f || fftwf_import_wisdom_from_string(f));
    pthread_mutex_unlock(&fm_fftw_planner_lock);
    free(d);
    if (!ok)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: FFTW rejected the fftw blob (corrupt, or from another "
                       "FFTW version)");
    return FM_OK;
}

/* FFTW's wisdom is the process's (FFTW keeps one): every context's forget drops it. */
static void fm_fftw_wisdom_forget(void)
{
    pthread_mutex_lock(&fm_fftw_planner_lock);
    fftw_forget_wisdom();
    fftwf_forget_wisdom();
    pthread_mutex_unlock(&fm_fftw_planner_lock);
}

/* A timed choice was timed against this FFTW's plans: another build's does not apply. */
static void fm_fftw_wisdom_salt(const fm_context *ctx, void *state, const fm_problem *p, char *buf, size_t n)
{
    snprintf(buf, n, "%s", fftw_version);
}

/* Names: fm_fftw_*, as FFTW's own fftw_plan (a type) and fftw_execute would clash. */
const fm_backend fm_backend_fftw_fft = {
    .name = "fftw",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_FFT,
    .priority = 0,
    .probe = fm_fftw_probe,
    .plan = fm_fftw_plan,
    .wisdom_export = fm_fftw_wisdom_export,
    .wisdom_import = fm_fftw_wisdom_import,
    .wisdom_forget = fm_fftw_wisdom_forget,
    .wisdom_salt = fm_fftw_wisdom_salt,
};
