/* cufft_restage.c : an FFT on operands that cuFFT cannot take as they lie (negative or zero
 * strides, strides that do not nest as its advanced layout needs, a real operand that its batches
 * would leave misaligned to two elements: rfftn of a contiguous (8, 128, 2) float32 array over
 * axis 1). NumPy takes any layout, so this one is copied: the input on the device into a dense
 * scratch with the batch axes outermost and the transformed axes innermost (the halved one last,
 * where cuFFT wants it), the transform planned on that layout (cuFFT's, cached by the planner as
 * any plan) into a dense scratch of the same order, which is then copied into out's layout. The
 * copies are generated kernels (fm_cufft_copy_create), the scratches stream-ordered device memory;
 * the chains ride the inner plan (their arrays are indexed per axis, whatever the layout). */
#include "cufft_restage.h"
#include "cuda/cufft_callback.h"
#include "cuda_workspace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct restage_impl {
    fm_plan *inner;
    fm_cufft_pass *copy_in, *copy_out;
    size_t in_bytes, out_bytes;
    int device;
} restage_impl;

/* t's extents, dense: the axes not transformed outermost (in their order), then axes[0..naxes). */
static fm_tensor dense_transformed_inner(const fm_tensor *t, const fm_fft_params *fp)
{
    fm_tensor c = *t;
    int order[FM_MAX_NDIM], n = 0;
    for (int d = 0; d < t->ndim; d++) {
        int transformed = 0;
        for (int i = 0; i < fp->naxes; i++)
            transformed |= fp->axes[i] == d;
        if (!transformed)
            order[n++] = d;
    }
    for (int i = 0; i < fp->naxes; i++)
        order[n++] = fp->axes[i];
    int64_t step = 1;
    for (int i = n - 1; i >= 0; i--) {
        c.strides[order[i]] = step;
        step *= t->shape[order[i]] > 0 ? t->shape[order[i]] : 1;
    }
    return c;
}

static int same_strides(const fm_tensor *a, const fm_tensor *b)
{
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] > 1 && a->strides[d] != b->strides[d])
            return 0;
    return 1;
}

int fm_cufft_restage_helps(const fm_problem *p)
{
    const fm_fft_params *fp = &p->u.fft;
    if (fp->naxes > 3)
        return 0;
    const fm_tensor in = dense_transformed_inner(&p->t[FM_FFT_IN], fp);
    const fm_tensor out = dense_transformed_inner(&p->t[FM_FFT_OUT], fp);
    return !same_strides(&in, &p->t[FM_FFT_IN]) || !same_strides(&out, &p->t[FM_FFT_OUT]) ||
           p->align_log2[FM_FFT_IN] < 4 || p->align_log2[FM_FFT_OUT] < 4;
}

static fm_status restage_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args,
                                 void *stream)
{
    const restage_impl *x = plan->impl;
    const fm_device_ops *ops = fm_device_ops_for(FM_DEVICE_CUDA);
    void *sin = NULL, *sout = NULL;
    if (x->in_bytes == 0 || x->out_bytes == 0)
        return FM_OK; /* an empty transform writes nothing (no zero-byte allocations) */
    fm_status s = ops ? fm_cuda_use_device(x->device)
                      : fm_fail(FM_ERR_INTERNAL, "fft: no cuda memory operations");
    if (s == FM_OK)
        s = ops->alloc(x->device, x->in_bytes, stream, &sin);
    if (s == FM_OK)
        s = ops->alloc(x->device, x->out_bytes, stream, &sout);
    if (s == FM_OK)
        s = fm_cufft_pass_launch(x->copy_in, ptrs[FM_FFT_IN], sin, NULL, stream);
    if (s == FM_OK) {
        void *q[FM_FFT_NSLOTS] = {sin, sout, ptrs[FM_FFT_PROLOG], ptrs[FM_FFT_EPILOG]};
        s = x->inner->execute(x->inner, q, args, stream);
    }
    if (s == FM_OK)
        s = fm_cufft_pass_launch(x->copy_out, sout, ptrs[FM_FFT_OUT], NULL, stream);
    if (sin)
        ops->free(x->device, sin, stream); /* stream-ordered: after the work queued above */
    if (sout)
        ops->free(x->device, sout, stream);
    return s;
}

static void restage_destroy(void *v)
{
    restage_impl *x = v;
    fm_plan_release(x->inner);
    fm_cufft_pass_destroy(x->copy_in);
    fm_cufft_pass_destroy(x->copy_out);
    free(x);
}

fm_status fm_cufft_plan_restaged(fm_context *ctx, const fm_problem *p, fm_plan *out)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    fm_problem q = *p;
    q.t[FM_FFT_IN] = dense_transformed_inner(ti, fp);
    q.t[FM_FFT_OUT] = dense_transformed_inner(to, fp);
    q.align_log2[FM_FFT_IN] = q.align_log2[FM_FFT_OUT] = 4; /* fresh device memory */
    q.inplace_partner[FM_FFT_OUT] = -1;
    restage_impl *x = calloc(1, sizeof *x);
    if (!x)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory while planning");
    x->device = p->exec_device.id;
    x->in_bytes = (size_t)fm_tensor_numel(ti) * fm_dtype_size(ti->dtype);
    x->out_bytes = (size_t)fm_tensor_numel(to) * fm_dtype_size(to->dtype);
    const fm_settings *set = fm_context_settings(ctx);
    fm_status s = fm_plan_problem_with(ctx, &q, out->attach, &x->inner);
    if (s == FM_OK)
        s = fm_cufft_copy_create(set, ti->dtype, ti->ndim, ti->shape, ti->strides, q.t[FM_FFT_IN].strides,
                                 x->device, &x->copy_in);
    if (s == FM_OK)
        s = fm_cufft_copy_create(set, to->dtype, to->ndim, to->shape, q.t[FM_FFT_OUT].strides, to->strides,
                                 x->device, &x->copy_out);
    if (s != FM_OK) {
        restage_destroy(x);
        return s;
    }
    out->impl = x;
    out->execute = restage_execute;
    out->destroy_impl = restage_destroy;
    for (int i = 0; i < FM_FFT_NSLOTS; i++) /* the copies read and write single elements */
        out->required_align[i] = (p->present >> i & 1) ? fm_dtype_size(p->t[i].dtype) : 1;
    fm_plan_set_describe(out, "fft staged copy (cuFFT cannot take the operands' layout) into [%s]",
                         x->inner->describe);
    return FM_OK;
}
