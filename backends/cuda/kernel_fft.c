/* kernel_fft.c : fused FFTs on CUDA devices as one generated kernel (fusion/cuda/fft_kernel.c).
 *
 * Takes the 1-D c2c transforms with a prolog or epilog chain that fit in one thread block
 * (power-of-two lengths up to 4096 complex64 / 2048 complex128), any batch layout with
 * positive strides: the input is read once through the prolog and the output written once
 * through the epilog, where cuFFT needs a separate pass or a load callback that slows its own
 * transform 2-3x. Everything else (no chains, other lengths, r2c / c2r, several axes,
 * gpu_prolog "pass" / "callback", half precision) is left to the cuFFT backend: this one is
 * offered first and answers FM_ERR_NOT_APPLICABLE. In AUTO mode it also leaves strided transform
 * axes to cuFFT, and splits a single 2-D c2c transform with a prolog into [last axis: this
 * kernel] + [first axis: cuFFT] (split_axes).
 *
 * The plan is the loaded kernel and nothing mutable: execute-time pointers are kernel
 * arguments, so a plan runs concurrently on any number of streams and threads. */
#include "cuda/fft_kernel.h"
#include "cuda_status.h"
#include "fft_axis_split.h"
#include "cuda_workspace.h"
#include "internal.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kernel_plan {
    int device;
    fm_fft_kernel *k;
} kernel_plan;

static fm_status probe(void **state, const char **why)
{
    if (fm_cuda_probe_device_count() == 0) {
        *why = "no CUDA device (no GPU or no driver)";
        return FM_ERR_UNAVAILABLE;
    }
    *state = NULL;
    return FM_OK;
}

static void release(void *state) { (void)state; }

static void destroy_plan(void *impl)
{
    kernel_plan *pl = impl;
    if (!pl)
        return;
    fm_fft_kernel_destroy(pl->k);
    free(pl);
}

static fm_status execute(const fm_plan *plan, void *const *ptrs, void *stream)
{
    const kernel_plan *pl = plan->impl;
    fm_status s = fm_cuda_use_device(pl->device);
    if (s != FM_OK)
        return s;
    return fm_fft_kernel_launch(pl->k, ptrs[FM_FFT_IN], ptrs[FM_FFT_OUT], ptrs[FM_FFT_PROLOG], ptrs[FM_FFT_EPILOG],
                                stream);
}

static fm_status not_here(const char *why)
{
    return fm_fail(FM_ERR_NOT_APPLICABLE, "fused kernel: %s", why);
}

/* The problem as a kernel spec; FM_ERR_NOT_APPLICABLE where it does not fit. */
static fm_status spec_of(const fm_problem *p, fm_fft_kernel_spec *ks, fm_cufft_cb_spec chain[2])
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    if (fp->kind != FM_FFT_C2C || fp->naxes != 1)
        return not_here("one-axis c2c transforms only");
    if (!fp->prolog_ops && !fp->epilog_ops)
        return not_here("no chain to fuse (cuFFT runs plain transforms)");
    if (ti->dtype != to->dtype || (ti->dtype != FM_C64 && ti->dtype != FM_C128))
        return not_here("complex64 / complex128 only");
    if (fm_tensor_numel(ti) == 0 || fm_tensor_numel(to) == 0 || ti->ndim != to->ndim)
        return not_here("empty or reshaped operands");
    const int ax = fp->axes[0];
    memset(ks, 0, sizeof *ks);
    ks->dtype = ti->dtype;
    ks->n = fp->n[0];
    ks->inverse = fp->inverse;
    if (ti->shape[ax] != ks->n || to->shape[ax] != ks->n)
        return not_here("the transformed axis is padded or cropped");
    ks->in_stride = ti->strides[ax], ks->out_stride = to->strides[ax];
    for (int d = 0; d < ti->ndim; d++) {
        if (ti->shape[d] != to->shape[d])
            return not_here("in and out shapes differ");
        if (d == ax || ti->shape[d] == 1)
            continue;
        if (ti->strides[d] < 0 || to->strides[d] <= 0)
            return not_here("negative or zero batch strides");
        ks->batch_ext[ks->nbatch] = ti->shape[d];
        ks->batch_in[ks->nbatch] = ti->strides[d];
        ks->batch_out[ks->nbatch] = to->strides[d];
        ks->nbatch++;
    }
    if (fp->prolog_ops) {
        fm_cufft_cb_spec_from_problem(p, 0, 0, &chain[0]);
        ks->prolog = &chain[0];
    }
    if (fp->epilog_ops) {
        fm_cufft_cb_spec_from_problem(p, 1, 0, &chain[1]);
        ks->epilog = &chain[1];
    }
    for (int i = 0; i < 2; i++)
        if ((i ? ks->epilog : ks->prolog) && (chain[i].ops & FM_FFT_OP_CALLBACK) && !chain[i].user_source)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft on cuda: the %s callback's source is only available while "
                           "fm_fft_plan runs", i ? "epilog" : "prolog");
    return fm_fft_kernel_check(ks);
}

/* One 2-D transform with a prolog: separable, so [the last axis with the prolog] as this kernel,
 * then [the other axis, in place on out, with the epilog] through cuFFT (fft_axis_split.c). The
 * prolog then costs nothing beyond the first axis's own read, where cuFFT needs a pass or a
 * load callback. Only when the last axis is contiguous in and out and the kernel takes its
 * length. */
static fm_status split_axes(fm_context *ctx, const fm_problem *p, fm_plan *out)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    if (fp->kind != FM_FFT_C2C || !fp->prolog_ops)
        return not_here("several axes: only a c2c prolog is worth splitting off the last axis");
    /* Measured on the H200 (docs/performance.md): 2-D 4096^2 1.41x -> 1.15x plain cuFFT; but a
     * 3-D 512^3 split leaves cuFFT a 2-D step with a 512-element inner stride that ran 13.7 ms
     * against 1.8 ms plain, and with batch axes cuFFT's step would loop on the host. */
    if (fp->naxes != 2 || !fm_fft_should_split_axes(p))
        return not_here("several axes: the split pays only for one 2-D transform (no batch)");
    const int ax = fp->axes[fp->naxes - 1];
    const int64_t n = fp->n[fp->naxes - 1];
    if (ti->dtype != to->dtype || n > fm_fft_kernel_max_n(ti->dtype) || n < 2 || (n & (n - 1)) != 0 ||
        ti->shape[ax] != n || to->shape[ax] != n || ti->strides[ax] != 1 || to->strides[ax] != 1)
        return not_here("several axes: the last one is not a contiguous power-of-two length the kernel takes");
    fm_status s = fm_fft_plan_axis_split(ctx, p, out);
    if (s != FM_OK && s != FM_ERR_OUT_OF_MEMORY) { /* a step nobody takes: cuFFT may take the whole */
        char why[512];
        snprintf(why, sizeof why, "the 2-D split: %s", fm_last_error());
        return not_here(why);
    }
    return s;
}

static fm_status plan_fn(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    (void)state;
    if (p->op != FM_OP_FFT)
        return not_here("only fft");
    if (p->exec_device.type != FM_DEVICE_CUDA)
        return not_here("operands are not on a CUDA device");
    for (int i = 0; i < p->nslots; i++)
        if ((p->present & (1u << i)) && p->t[i].device.type != FM_DEVICE_CUDA)
            return not_here("an operand is not in CUDA device memory");
    const fm_fft_params *fp = &p->u.fft;
    const int mode = fm_fft_gpu_prolog_mode(fp);
    if (mode == FM_FFT_PROLOG_PASS || mode == FM_FFT_PROLOG_CALLBACK)
        return not_here("gpu_prolog asks for cuFFT ('pass' or 'callback')");
    if (fp->naxes > 1)
        return split_axes(ctx, p, out);
    fm_fft_kernel_spec ks;
    fm_cufft_cb_spec chain[2];
    fm_status s = spec_of(p, &ks, chain);
    if (s != FM_OK)
        return s;
    /* a strided transform axis reads and writes one element per 32-byte sector: cuFFT does
     * better there unless the kernel is asked for */
    if (mode == FM_FFT_PROLOG_AUTO && (ks.in_stride != 1 || ks.out_stride != 1))
        return not_here("the transformed axis is strided (gpu_prolog='kernel' takes it anyway)");
    kernel_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory while planning");
    pl->device = p->exec_device.id;
    if ((s = fm_cuda_use_device(pl->device)) != FM_OK || (s = fm_fft_kernel_create(&ks, pl->device, &pl->k)) != FM_OK) {
        destroy_plan(pl);
        if (s == FM_ERR_INVALID_ARGUMENT && mode == FM_FFT_PROLOG_AUTO) {
            /* the user's function did not compile inside the kernel (a name clash with its own
             * code, say): cuFFT compiles it as a callback on its own and reports what is wrong */
            char why[768];
            snprintf(why, sizeof why, "the chain's user function did not compile in the kernel: %s", fm_last_error());
            return not_here(why);
        }
        return s;
    }
    out->impl = pl;
    out->execute = execute;
    out->destroy_impl = destroy_plan;
    for (int i = 0; i < FM_FFT_NSLOTS; i++)
        out->required_align[i] = (p->present >> i & 1) ? fm_dtype_size(p->t[i].dtype) : 1;
    int64_t rows = 1;
    for (int i = 0; i < ks.nbatch; i++)
        rows *= ks.batch_ext[i];
    char pro[40], epi[40];
    fm_fft_ops_text(pro, sizeof pro, fp->prolog_ops);
    fm_fft_ops_text(epi, sizeof epi, fp->epilog_ops);
    fm_plan_set_describe(out, "fft cuda/fused-kernel %s c2c %lldx[%lld] %s prolog=%s epilog=%s radices=%s passes=1 "
                         "device=%d",
                         fm_dtype_name(ks.dtype), (long long)rows, (long long)ks.n, fp->inverse ? "inverse" : "forward",
                         pro, epi, fm_fft_kernel_radices(pl->k), pl->device);
    return FM_OK;
}

const fm_backend fm_backend_kernel_fft = {
    .name = "fftkernel",
    .device = FM_DEVICE_CUDA,
    .ops = 1u << FM_OP_FFT,
    .priority = 1, /* before cuFFT: it declines what it does not fuse */
    .probe = probe,
    .release = release,
    .plan = plan_fn,
};
