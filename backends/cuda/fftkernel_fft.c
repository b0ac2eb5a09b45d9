/* fftkernel_fft.c : the "fftkernel" backend, fused FFTs on CUDA devices as generated kernels (fusion/cuda/fft_kernel.c).
 *
 * Takes the c2c transforms with a prolog or epilog chain of power-of-two lengths: 1-D up to
 * 4096 complex64 / 2048 complex128 as one kernel (any batch layout with positive strides),
 * longer 1-D lengths up to 2^24 on contiguous rows as the multi-step (two or three kernels),
 * several axes as one kernel per axis. Each kernel reads its input once through the prolog and
 * writes once through the epilog, where cuFFT needs a separate pass or a load callback that
 * slows its own transform 2-4x. Everything else (no chains, other lengths, r2c / c2r,
 * gpu_prolog "pass" / "callback", half precision) is left to the cuFFT backend: this one is
 * offered first and answers FM_ERR_NOT_APPLICABLE. In AUTO mode it takes only the layouts that
 * read and write whole sectors, and splits a single 2-D c2c transform with a prolog whose first
 * axis it does not take into [last axis: this kernel] + [first axis: cuFFT] (split_axes).
 *
 * The plan is the loaded kernels and nothing mutable: execute-time pointers are kernel
 * arguments, so a plan runs concurrently on any number of streams and threads (the multi-step's
 * scratch is per stream, taken under a lock). */
#include "cuda/fft_kernel.h"
#include "cuda_nvtx.h"
#include "cuda_workspace.h"
#include "fft_axis_split.h"
#include "internal.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The backend's state in a context (a workspace table): the multi-step's scratch, one per
 * (device, stream), held between calls like cuFFT's work area (a fresh cudaMallocAsync of
 * hundreds of MB per call costs more than the transform where the pool returns memory at each
 * synchronization). The scratch is leased (fm_cuda_ws_acquire) until the steps are queued: two
 * executions on one stream from two threads cannot interleave their steps on the one buffer. */
typedef struct kernel_plan {
    int device;
    fm_cuda_ws_table *ws;
    /* run in order: one kernel; several axes: k[0] from in to out, the others in place on out;
     * the multi-step (scratch_bytes > 0): k[0] from in into the scratch, the last one out of it */
    fm_fft_kernel *k[3];
    int nk;
    size_t scratch_bytes;
} kernel_plan;

static fm_status fftkernel_probe(const fm_settings *settings, void **state, const char **why)
{
    (void)settings;
    return fm_cuda_ws_probe("fft kernel scratch", state, why);
}

static void fftkernel_release(void *state) { fm_cuda_ws_table_destroy(state); }

static void fftkernel_destroy(void *impl)
{
    kernel_plan *pl = impl;
    if (!pl)
        return;
    for (int i = 0; i < 3; i++)
        fm_fft_kernel_destroy(pl->k[i]);
    free(pl);
}

static fm_status fftkernel_run(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)args; /* pointer-only: nothing per call */
    const kernel_plan *pl = plan->impl;
    fm_status s = fm_cuda_use_device(pl->device);
    if (s != FM_OK)
        return s;
    void *mid = NULL, *in = ptrs[FM_FFT_IN], *out = ptrs[FM_FFT_OUT];
    fm_cuda_ws_lease lease = NULL;
    if (pl->scratch_bytes)
        s = fm_cuda_ws_acquire(pl->ws, pl->device, (cudaStream_t)stream, pl->scratch_bytes, &mid, &lease);
    /* the prolog with the first kernel, the epilog with the last */
    for (int i = 0; i < pl->nk && s == FM_OK; i++)
        s = fm_fft_kernel_launch(pl->k[i], i == 0 ? in : mid ? mid : out, mid && i < pl->nk - 1 ? mid : out,
                                 i ? NULL : ptrs[FM_FFT_PROLOG], i == pl->nk - 1 ? ptrs[FM_FFT_EPILOG] : NULL, stream);
    fm_cuda_ws_release(lease);
    return s;
}
FM_NVTX_EXECUTE(fftkernel_execute, fftkernel_run)

static fm_status not_here(const char *why)
{
    return fm_fail(FM_ERR_NOT_APPLICABLE, "fused kernel: %s", why);
}

/* A plan of the kernels spec[0..nk) (run in that order, see execute), made and handed to out.
 * describe() names the shape, `extra` ("" or "name=value ") and the kernels' radices ('+'
 * between kernels). */
static fm_status make_plan(const fm_settings *set, const fm_problem *p, fm_cuda_ws_table *ws,
                           const fm_fft_kernel_spec *spec, int nk, size_t scratch_bytes, const char *shape,
                           const char *extra, fm_plan *out)
{
    kernel_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory while planning");
    pl->device = p->exec_device.id;
    pl->ws = ws;
    pl->scratch_bytes = scratch_bytes;
    pl->nk = nk;
    fm_status s = fm_cuda_use_device(pl->device);
    for (int i = 0; i < nk && s == FM_OK; i++)
        s = fm_fft_kernel_create(set, &spec[i], pl->device, &pl->k[i]);
    if (s != FM_OK) {
        fftkernel_destroy(pl);
        return s;
    }
    out->impl = pl;
    out->execute = fftkernel_execute;
    out->destroy_impl = fftkernel_destroy;
    for (int i = 0; i < FM_FFT_NSLOTS; i++)
        out->required_align[i] = (p->present >> i & 1) ? fm_dtype_size(p->t[i].dtype) : 1;
    char pro[40], epi[40], rad[96] = "";
    fm_fft_ops_text(pro, sizeof pro, p->u.fft.prolog_ops);
    fm_fft_ops_text(epi, sizeof epi, p->u.fft.epilog_ops);
    size_t v = 0;
    for (int i = 0; i < nk; i++)
        v += (size_t)snprintf(rad + v, v < sizeof rad ? sizeof rad - v : 0, "%s%s", i ? "+" : "",
                              fm_fft_kernel_radices(pl->k[i]));
    fm_plan_set_describe(out, "fft cuda/fftkernel %s c2c %s %s prolog=%s epilog=%s %sradices=%s passes=%d "
                         "device=%d", fm_dtype_name(spec[0].dtype), shape,
                         p->u.fft.inverse ? "inverse" : "forward", pro, epi, extra, rad, nk, pl->device);
    return FM_OK;
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

/* A length beyond one block (powers of two up to 2^24), contiguous rows: the multi-step
 * (fm_fft_kernel_steps): two or three kernels, each reading and writing whole sectors, the
 * prolog in the first one's loads and the epilog in the last one's stores, where cuFFT takes
 * two or three passes of its own and a prolog pass adds one (or a load callback slows it down
 * 2-4x). Measured on the H200 with a window (fft_gpu.py): 2^24 x 4 1.08x plain cuFFT against
 * 1.37x for cuFFT plus a pass; 2^20 x 64 1.10x against 1.46x. */
static fm_status plan_steps(const fm_settings *set, const fm_problem *p, fm_cuda_ws_table *ws, fm_plan *out)
{
    const fm_fft_params *fp = &p->u.fft;
    fm_cufft_cb_spec chain[2];
    fm_fft_kernel_spec spec[3];
    int ns = 0;
    int64_t scratch = 0;
    fm_status s = fm_fft_kernel_steps(p, out->attach, chain, spec, &ns, &scratch);
    if (s != FM_OK)
        return s;
    char shape[48], steps[80] = "steps=";
    snprintf(shape, sizeof shape, "%lldx[%lld]", (long long)spec[0].batch_ext[0], (long long)fp->n[0]);
    size_t u = strlen(steps);
    for (int i = 0; i < ns; i++)
        u += (size_t)snprintf(steps + u, u < sizeof steps ? sizeof steps - u : 0, "%s%lld%s", i ? "x" : "",
                              (long long)spec[i].n, i == ns - 1 ? " " : "");
    const size_t scratch_bytes = (size_t)scratch * fm_dtype_size(spec[0].dtype);
    return make_plan(set, p, ws, spec, ns, scratch_bytes, shape, steps, out);
}

/* Several axes: one kernel pass per axis, the first (the input's most contiguous axis, rows
 * mode) from in to out with the prolog, the others in place on out (lanes mode where the rows
 * are neighbours), the epilog with the last. As many reads and writes as axes, like cuFFT's own
 * multi-axis plans, with the chains free ("auto": see auto_axis_passes). */
static fm_status plan_axis_passes(const fm_settings *set, const fm_problem *p, fm_plan *out)
{
    const fm_fft_params *fp = &p->u.fft;
    fm_cufft_cb_spec chain[2];
    fm_fft_kernel_spec spec[3];
    int order[3], np = 0;
    fm_status s = fm_fft_kernel_axis_passes(p, out->attach, chain, spec, order, &np);
    if (s != FM_OK)
        return s;
    char shape[96] = "[", passes[32];
    size_t u = 1;
    for (int i = 0; i < np; i++) /* in pass order, as the radices */
        u += (size_t)snprintf(shape + u, u < sizeof shape ? sizeof shape - u : 0, "%saxis %d: %lld%s",
                              i ? ", " : "", fp->axes[order[i]], (long long)fp->n[order[i]],
                              i == np - 1 ? "]" : "");
    snprintf(passes, sizeof passes, "axis-passes=%d ", np);
    return make_plan(set, p, NULL, spec, np, 0, shape, passes, out);
}

/* gpu_prolog="auto" with several axes: one kernel pass per axis where that was measured to win
 * (benchmarks/results/fft_gpu-2026-11-30-h200-*.json, complex64 with a window): 3-D 512^3
 * 1.08x plain cuFFT against 1.37x for cuFFT plus a prolog pass; 2-D 4096^2 1.08x against 1.10x
 * for the split (last axis in the kernel, first axis cuFFT) and 1.41x for cuFFT plus a pass.
 * Two or more transformed axes, each a power of two the kernel takes. */
static int auto_axis_passes(const fm_problem *p)
{
    const fm_fft_params *fp = &p->u.fft;
    const int64_t max = fm_fft_kernel_max_n(p->t[FM_FFT_IN].dtype);
    if (!fp->prolog_ops && !fp->epilog_ops)
        return 0; /* plain transforms are cuFFT's */
    int long_axes = 0;
    for (int i = 0; i < fp->naxes; i++) {
        const int64_t n = fp->n[i];
        if (n > max || (n & (n - 1)) != 0)
            return 0;
        long_axes += n > 1;
    }
    return long_axes >= 2;
}

/* gpu_prolog="auto", complex128 rows along a contiguous last axis: where cuFFT does the length
 * in one pass, its LTO load callback costs little in double precision (0.6 ps per element,
 * against 9-11 in single), and beats this kernel: the c128 sweep of fft_gpu.py (2^24 elements,
 * benchmarks/results/fft_gpu-2026-11-30-h200-c128-sweep.json) measured fused / plain cuFFT
 * 1.00-1.10 with the callback against 1.03-1.20 for the one-block kernel at 256-2048 points,
 * and 1.26 against 1.99 for the two-step kernel at 4096 (one pass of cuFFT's against two).
 * From 8192 points on, where cuFFT takes several passes too, the multi-step wins (0.90-1.07);
 * up to 128 points, and on small arrays where launches dominate, the kernel does. */
static int c128_rows_for_cufft(const fm_problem *p, int64_t n, int64_t rows, int contiguous)
{
    return p->t[FM_FFT_IN].dtype == FM_C128 && fm_fft_gpu_prolog_mode(p) == FM_FFT_PROLOG_AUTO && contiguous &&
           n >= 256 && n <= 4096 && (double)rows * (double)n > (double)(1 << 16);
}

static fm_status fftkernel_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    const fm_fft_params *fp = &p->u.fft;
    const int mode = fm_fft_gpu_prolog_mode(p);
    if (mode == FM_FFT_PROLOG_PASS || mode == FM_FFT_PROLOG_CALLBACK)
        return not_here("gpu_prolog asks for cuFFT ('pass' or 'callback')");
    if (fp->naxes > 1) {
        if (mode == FM_FFT_PROLOG_KERNEL || auto_axis_passes(p)) {
            fm_status s = plan_axis_passes(fm_context_settings(ctx), p, out);
            if (s != FM_ERR_NOT_APPLICABLE || mode == FM_FFT_PROLOG_KERNEL)
                return s;
        }
        return split_axes(ctx, p, out);
    }
    fm_fft_kernel_spec ks;
    fm_cufft_cb_spec chain[2];
    fm_status s = fm_fft_kernel_one(p, out->attach, chain, &ks);
    if (s == FM_ERR_NOT_APPLICABLE && fp->n[0] > fm_fft_kernel_max_n(p->t[FM_FFT_IN].dtype)) {
        const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
        const int ax = fp->axes[0], pow2 = (fp->n[0] & (fp->n[0] - 1)) == 0;
        if (pow2 && c128_rows_for_cufft(p, fp->n[0], fm_tensor_numel(ti) / fp->n[0],
                                        ti->strides[ax] == 1 && to->strides[ax] == 1))
            return not_here("complex128 rows of 4096 points: cuFFT's one pass with a load callback beats two steps");
        char why[512];
        snprintf(why, sizeof why, "%s", fm_last_error());
        s = plan_steps(fm_context_settings(ctx), p, state, out);
        if (s == FM_ERR_NOT_APPLICABLE) /* the one-block reason is the clearer one */
            return fm_fail(FM_ERR_NOT_APPLICABLE, "%s", why);
        return s;
    }
    if (s != FM_OK)
        return s;
    int64_t rows = 1;
    for (int i = 0; i < ks.nbatch; i++)
        rows *= ks.batch_ext[i];
    if (c128_rows_for_cufft(p, ks.n, rows, ks.in_stride == 1 && ks.out_stride == 1))
        return not_here("complex128 rows of 256-4096 points: cuFFT with a load callback measured faster");
    /* a strided transform axis whose rows are not neighbours reads and writes one element per
     * 32-byte sector: cuFFT does better there unless the kernel is asked for. Where they are
     * neighbours (lanes mode): 1024 x 16384 along axis 0 measured 1.21x plain cuFFT, against
     * 1.78x for cuFFT with a prolog pass. */
    if (mode == FM_FFT_PROLOG_AUTO && !fm_fft_kernel_coalesced(&ks))
        return not_here("the transformed axis is strided and the rows are not neighbours in memory "
                        "(gpu_prolog='kernel' takes it anyway)");
    char shape[48];
    snprintf(shape, sizeof shape, "%lldx[%lld]", (long long)rows, (long long)ks.n);
    if ((s = make_plan(fm_context_settings(ctx), p, NULL, &ks, 1, 0, shape, "", out)) != FM_OK) {
        if (s == FM_ERR_INVALID_ARGUMENT && mode == FM_FFT_PROLOG_AUTO) {
            /* the user's function did not compile inside the kernel (a name clash with its own
             * code, say): cuFFT compiles it as a callback on its own and reports what is wrong */
            char why[768];
            snprintf(why, sizeof why, "the chain's user function did not compile in the kernel: %s", fm_last_error());
            return not_here(why);
        }
    }
    return s;
}

const fm_backend fm_backend_fftkernel_fft = {
    .name = "fftkernel",
    .device = FM_DEVICE_CUDA,
    .ops = 1u << FM_OP_FFT,
    .priority = 1, /* before cuFFT: it declines what it does not fuse */
    .probe = fftkernel_probe,
    .release = fftkernel_release,
    .plan = fftkernel_plan,
};
