/* fft_axis_split.c : a single multi-axis transform with a fused chain, run as two batched
 * transforms so the chain rides inside them instead of costing whole extra passes.
 *
 * FFTW offers no load/store callbacks. A multi-dimensional DFT is separable, so
 *   forward c2c / r2c over axes (a..., last): [last axis, prolog] then [the other axes, in
 *   place on out, epilog and the norm]
 *   inverse c2r: [the other axes, c2c, prolog, into a scratch] then [c2r over the last axis,
 *   epilog and the norm]
 * (on the cpu a 3-D forward transform splits as [the two inner axes] then [the outer one]).
 * Each step is an ordinary batched plan of the FFTW backend (cached by the planner like any
 * other), whose chunked paths apply the chain while each chunk is in cache. The whole-array
 * passes of the "single" path are what this removes (c2c: measured 2.0-3.2x the plain transform
 * on 2-D/3-D before). For r2c / c2r the FFTW backend times the split against FFTW's N-D plan with
 * the chain as passes and takes the N-D plan at estimate: there the split's column step cost more
 * than the passes (dev machine, 1024^2: 1.21-1.57x plain against 1.05-1.18x).
 *
 * The cuFFT backend uses the same split when one plan cannot express the layout (an r2c whose
 * halved axis is not the innermost of the transformed ones, in and out nested differently):
 * the steps are then cuFFT plans and the c2r intermediate is stream-ordered device memory.
 *
 * A transform over more than 3 axes (which no backend takes) runs the same way as successive
 * transforms of at most 3 axes each (fm_fft_plan_steps): the last 3 axes given first (r2c: the
 * real-to-complex step, with the halved axis), then the others in threes in place on out; c2r the
 * reverse, the complex steps in place on a scratch and the complex-to-real one last. The prolog
 * rides the first step, the epilog and the norm the last. */
#include "fft_axis_split.h"
#include "context.h"
#include "operation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Steps run one after another: the first reads in, every later one reads what the one before
 * wrote (out, or for c2r the scratch); the last writes out. */
typedef struct steps_impl {
    int nsteps;
    fm_plan *step[FM_MAX_NDIM];
    int c2r;              /* the steps but the last write a scratch that the next reads */
    size_t scratch_bytes; /* c2r: the complex intermediate */
    fm_device dev;        /* where the scratch lives (the execution device) */
} steps_impl;

static int64_t batch_count(const fm_problem *p)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *t = &p->t[FM_FFT_IN];
    int64_t b = 1;
    for (int d = 0; d < t->ndim; d++) {
        int transformed = 0;
        for (int i = 0; i < fp->naxes; i++)
            transformed |= fp->axes[i] == d;
        if (!transformed)
            b *= t->shape[d];
    }
    return b;
}

int fm_fft_should_split_axes(const fm_problem *p)
{
    const fm_fft_params *fp = &p->u.fft;
    return fp->naxes > 1 && (fp->prolog_ops || fp->epilog_ops) && batch_count(p) == 1;
}

/* A dense layout of t's shape with axis `inner` innermost (stride 1), the others in C order:
 * the c2r step then reads its halved axis with unit stride, the layout every backend takes
 * best (cuFFT rejected an interleaved c2r input at exec). */
static fm_tensor dense_with_inner(const fm_tensor *t, int inner)
{
    fm_tensor c = *t;
    int64_t st = t->shape[inner] > 0 ? t->shape[inner] : 1;
    c.strides[inner] = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (d == inner)
            continue;
        c.strides[d] = st;
        st *= t->shape[d] > 0 ? t->shape[d] : 1;
    }
    return c;
}

static void drop_chain(fm_problem *q, int epilog)
{
    fm_fft_params *f = &q->u.fft;
    int slot = epilog ? FM_FFT_EPILOG : FM_FFT_PROLOG;
    if (epilog) {
        f->epilog_ops = 0, f->epilog_scale[0] = 1, f->epilog_scale[1] = 0;
    } else {
        f->prolog_ops = 0, f->prolog_scale[0] = 1, f->prolog_scale[1] = 0;
    }
    q->present &= ~(1u << slot);
    memset(&q->t[slot], 0, sizeof q->t[slot]);
    q->align_log2[slot] = 0;
}

static fm_status run_steps(const steps_impl *x, void *const *ptrs, void *scratch, const fm_exec_args *args,
                           void *stream)
{
    fm_status s = FM_OK;
    for (int i = 0; i < x->nsteps && s == FM_OK; i++) {
        const int last = i == x->nsteps - 1;
        void *src = i == 0 ? ptrs[FM_FFT_IN] : x->c2r ? scratch : ptrs[FM_FFT_OUT];
        void *dst = x->c2r && !last ? scratch : ptrs[FM_FFT_OUT];
        void *p[FM_FFT_NSLOTS] = {src, dst, i == 0 ? ptrs[FM_FFT_PROLOG] : NULL, last ? ptrs[FM_FFT_EPILOG] : NULL};
        s = x->step[i]->execute(x->step[i], p, args, stream);
    }
    return s;
}

static fm_status execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const steps_impl *x = plan->impl;
    fm_status s;
    if (!x->c2r)
        return run_steps(x, ptrs, NULL, args, stream);
    /* stream-ordered on a device with streams: freed after the last step's queued work; on
     * the host, reused between executes (host_scratch.c) */
    const int host = x->dev.type == FM_DEVICE_CPU;
    const fm_device_ops *ops = fm_device_ops_for(x->dev.type);
    void *scratch = NULL;
    const size_t bytes = x->scratch_bytes ? x->scratch_bytes : 1;
    if (!ops)
        return fm_fail(FM_ERR_INTERNAL, "fft: no memory operations for device type %d", x->dev.type);
    if (host && !(scratch = fm_host_scratch_alloc(bytes)))
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory for %zu bytes of scratch", x->scratch_bytes);
    if (!host && (s = ops->alloc(x->dev.id, bytes, stream, &scratch)) != FM_OK)
        return s;
    s = run_steps(x, ptrs, scratch, args, stream);
    if (host)
        fm_host_scratch_free(scratch);
    else
        ops->free(x->dev.id, scratch, stream);
    return s;
}

static void destroy(void *v)
{
    steps_impl *x = v;
    for (int i = 0; i < x->nsteps; i++)
        fm_plan_release(x->step[i]);
    free(x);
}

/* The axes of p in order and their lengths (past the third: from the shapes, c2r from out's). */
static int all_axes(const fm_problem *p, int axes[FM_MAX_NDIM], int64_t n[FM_MAX_NDIM])
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *from = &p->t[fp->kind == FM_FFT_C2R ? FM_FFT_OUT : FM_FFT_IN];
    for (int i = 0; i < fp->naxes; i++) {
        axes[i] = i < 3 ? fp->axes[i] : fp->axes_more[i - 3];
        n[i] = i < 3 ? fp->n[i] : from->shape[axes[i]];
    }
    return fp->naxes;
}

/* q: a step over the axes [lo, hi) of the list, of this kind, reading `in` and writing `out`,
 * with the prolog (first step) and the epilog (last) or without. */
static void make_step(const fm_problem *p, const int *axes, const int64_t *n, int lo, int hi, int kind,
                      const fm_tensor *in, int in_align, const fm_tensor *out, int out_align, int first, int last,
                      fm_problem *q)
{
    *q = *p;
    static const int32_t untuned[FM_MAX_TUNABLES];
    fm_problem_set_tunables(q, untuned); /* a parent's tuned choice is not its steps' */
    q->best = 0; /* the parent's describe() says how best chose */
    q->best_ms[0] = q->best_ms[1] = 0;
    fm_fft_params *f = &q->u.fft;
    f->kind = kind;
    f->naxes = hi - lo;
    memset(f->axes, 0, sizeof f->axes);
    memset(f->n, 0, sizeof f->n);
    memset(f->axes_more, 0, sizeof f->axes_more);
    for (int i = lo; i < hi; i++)
        f->axes[i - lo] = axes[i], f->n[i - lo] = n[i];
    q->t[FM_FFT_IN] = *in, q->align_log2[FM_FFT_IN] = (uint8_t)in_align;
    q->t[FM_FFT_OUT] = *out, q->align_log2[FM_FFT_OUT] = (uint8_t)out_align;
    q->inplace_partner[FM_FFT_OUT] = kind == FM_FFT_C2C ? FM_FFT_IN : -1;
    if (!first)
        drop_chain(q, 0);
    if (!last)
        drop_chain(q, 1);
    if (!f->prolog_ops && !f->epilog_ops) /* no chain mode to honour (a forced one would refuse it) */
        f->gpu_prolog = FM_FFT_PROLOG_AUTO;
}

/* Plan p as steps over the groups of axes [lo[i], hi[i]) of all_axes, in running order (the first
 * group holds the halved axis of an r2c, the last that of a c2r), each step planned through the
 * planner (a step that fails frees the whole impl); then make out run them: execute, destroy, and
 * what the steps ask of the caller's pointers (out is every step's memory unless c2r). */
static fm_status plan_groups(fm_context *ctx, const fm_problem *p, const fm_attachments *att, const int *lo,
                             const int *hi, int ng, fm_plan *out)
{
    const fm_fft_params *fp = &p->u.fft;
    int axes[FM_MAX_NDIM];
    int64_t n[FM_MAX_NDIM];
    const int k = all_axes(p, axes, n);
    steps_impl *x = calloc(1, sizeof *x);
    if (!x)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory while planning");
    x->nsteps = ng;
    x->dev = p->exec_device;
    x->c2r = fp->kind == FM_FFT_C2R;
    const fm_tensor *in = &p->t[FM_FFT_IN], *dst = &p->t[FM_FFT_OUT];
    const int ain = p->align_log2[FM_FFT_IN], aout = p->align_log2[FM_FFT_OUT];
    const fm_tensor mid = dense_with_inner(in, axes[k - 1]); /* c2r: the complex intermediate */
    if (x->c2r)
        x->scratch_bytes = (size_t)fm_tensor_numel(&mid) * fm_dtype_size(mid.dtype);
    fm_problem q[FM_MAX_NDIM];
    for (int i = 0; i < ng; i++) {
        const int last = i == ng - 1;
        if (!x->c2r) /* in -> out (r2c: the halved axis), then c2c in place on out */
            make_step(p, axes, n, lo[i], hi[i], i ? FM_FFT_C2C : fp->kind, i ? dst : in, i ? aout : ain, dst, aout,
                      i == 0, last, &q[i]);
        else /* c2c in -> a dense scratch with the halved axis innermost, in place on it, then c2r into out */
            make_step(p, axes, n, lo[i], hi[i], last ? FM_FFT_C2R : FM_FFT_C2C, i ? &mid : in, i ? 6 : ain,
                      last ? dst : &mid, last ? aout : 6, i == 0, last, &q[i]);
    }
    for (int i = 0; i < x->nsteps; i++) {
        fm_status s = fm_plan_problem_with(ctx, &q[i], att, &x->step[i]);
        if (s != FM_OK) {
            x->nsteps = i;
            destroy(x);
            return s;
        }
    }
    out->impl = x;
    out->execute = execute;
    out->destroy_impl = destroy;
    const size_t *a1 = x->step[0]->required_align, *an = x->step[x->nsteps - 1]->required_align;
    out->required_align[FM_FFT_IN] = a1[FM_FFT_IN];
    out->required_align[FM_FFT_PROLOG] = a1[FM_FFT_PROLOG];
    out->required_align[FM_FFT_EPILOG] = an[FM_FFT_EPILOG];
    out->required_align[FM_FFT_OUT] = an[FM_FFT_OUT];
    for (int i = 0; i < x->nsteps && !x->c2r; i++) {
        const size_t *a = x->step[i]->required_align;
        size_t m = i > 0 && a[FM_FFT_IN] > a[FM_FFT_OUT] ? a[FM_FFT_IN] : a[FM_FFT_OUT];
        if (m > out->required_align[FM_FFT_OUT])
            out->required_align[FM_FFT_OUT] = m;
    }
    return FM_OK;
}

fm_status fm_fft_plan_axis_split(fm_context *ctx, const fm_problem *p, fm_plan *out)
{
    const fm_fft_params *fp = &p->u.fft;
    const int last = fp->naxes - 1, c2r = fp->kind == FM_FFT_C2R;
    /* c2c / r2c: 1: the inner axes (r2c halves the last), prolog; 2: the others in place on out,
     * c2c, epilog. On the cpu a 3-D transform goes as 2-D slabs then the outer axis, as FFTW's own
     * 3-D plans do (each slab's prolog while it is in cache); cuFFT splits off the last axis.
     * c2r: 1: the other axes, c2c inverse, prolog, into a dense scratch with the halved axis
     * innermost; 2: c2r over that axis from the scratch, epilog. */
    const int k = !c2r && p->exec_device.type == FM_DEVICE_CPU && fp->naxes == 3 ? 1 : last;
    const int lo[2] = {c2r ? 0 : k, c2r ? last : 0}, hi[2] = {c2r ? last : fp->naxes, c2r ? fp->naxes : k};
    fm_status s = plan_groups(ctx, p, out->attach, lo, hi, 2, out);
    if (s != FM_OK)
        return s;
    const steps_impl *x = out->impl;
    fm_plan_set_describe(out, "fft split into [%s] then [%s]", x->step[0]->describe, x->step[1]->describe);
    return FM_OK;
}

fm_status fm_fft_plan_steps(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **plan)
{
    const fm_fft_params *fp = &p->u.fft;
    if (fp->naxes <= 3)
        return FM_ERR_NOT_APPLICABLE; /* the backends' */
    /* the groups of axes in running order: the last three (with the halved axis), then the
     * others in threes from the front; c2r runs them the other way round */
    const int k = fp->naxes, c2r = fp->kind == FM_FFT_C2R;
    int lo[FM_MAX_NDIM], hi[FM_MAX_NDIM], ng = 0;
    if (!c2r)
        lo[ng] = k - 3, hi[ng++] = k;
    for (int a = 0; a < k - 3; a += 3)
        lo[ng] = a, hi[ng++] = a + 3 < k - 3 ? a + 3 : k - 3;
    if (c2r)
        lo[ng] = k - 3, hi[ng++] = k;
    fm_plan *out = fm_plan_alloc(p);
    if (!out)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory while planning");
    fm_status s = plan_groups(ctx, p, att, lo, hi, ng, out);
    if (s != FM_OK) {
        free(out);
        return s;
    }
    const steps_impl *x = out->impl;
    char text[FM_DESCRIBE_LEN];
    size_t used = 0;
    for (int i = 0; i < ng && used < sizeof text; i++) {
        int w = snprintf(text + used, sizeof text - used, "%s[%s]", i ? " then " : "", x->step[i]->describe);
        used += w > 0 ? (size_t)w : 0;
    }
    fm_plan_set_describe(out, "fft over %d axes in %d steps: %s", k, ng, text);
    out->backend = x->step[0]->backend;
    out->ctx = ctx;
    fm_context_retain_(ctx);
    fm_log_plan(ctx, "%s (chosen)", out->describe);
    *plan = out;
    return FM_OK;
}
