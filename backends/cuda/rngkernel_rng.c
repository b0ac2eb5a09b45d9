/* rngkernel_rng.c : the "rngkernel" backend, portable-mode RNG fills on CUDA devices as one generated
 * kernel launch each (fusion/cuda/rng_kernel.c: philox_portable.h compiled by NVRTC with
 * --fmad=false, so the values are the CPU backend's bit for bit). Curand mode is the "curand"
 * backend's (curand_rng.c). The plan is the loaded kernel and its parameters, nothing mutable: the
 * seed, the position and the pointer are launch arguments, so one plan runs on any number of
 * threads and streams at once. */
#include "cuda/rng_kernel.h"
#include "cuda_nvtx.h"
#include "cuda_workspace.h"
#include "internal.h"

#include <stdlib.h>

typedef struct kernel_plan {
    int device;
    int64_t n;
    fm_rng_kernel *k;
} kernel_plan;

static void rngkernel_destroy(void *impl)
{
    kernel_plan *pl = impl;
    if (!pl)
        return;
    fm_rng_kernel_destroy(pl->k);
    free(pl);
}

static fm_status rngkernel_run(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const kernel_plan *pl = plan->impl;
    fm_status s = FM_OK; /* the arguments: checked by the operation (rng_problem.c) */
    if (pl->n == 0 || (s = fm_cuda_use_device(pl->device)) != FM_OK)
        return s;
    return fm_rng_kernel_launch(pl->k, ptrs[FM_RNG_OUT], pl->n, (uint64_t)args->ints[3], args->ints[0], stream);
}
FM_NVTX_EXECUTE(rngkernel_execute, rngkernel_run)

static fm_status rngkernel_probe(const fm_settings *settings, void **state, const char **why)
{
    (void)settings, (void)state;
    if (fm_cuda_probe_device_count() < 1) {
        *why = "no CUDA device";
        return FM_ERR_UNAVAILABLE;
    }
    return FM_OK;
}

static fm_status rngkernel_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    (void)state;
    const fm_rng_params *rp = &p->u.rng;
    const fm_tensor *t = &p->t[FM_RNG_OUT];
    if (rp->mode != FM_RNG_PORTABLE)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "rng cuda/rngkernel: portable mode only (curand mode is the "
                       "curand backend's)");
    fm_status s = fm_rng_kernel_check(rp->distribution, t->dtype);
    if (s != FM_OK)
        return s;
    kernel_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "rng: out of host memory while planning");
    pl->device = p->exec_device.id;
    pl->n = fm_tensor_numel(t);
    if ((s = fm_cuda_use_device(pl->device)) == FM_OK)
        s = fm_rng_kernel_create(fm_context_settings(ctx), rp->distribution, t->dtype, rp->a, rp->b, pl->device,
                                 &pl->k);
    if (s != FM_OK) {
        rngkernel_destroy(pl);
        return s;
    }
    static const char *const dists[] = {"uniform", "normal", "lognormal", "exponential", "raw"};
    out->impl = pl;
    out->execute = rngkernel_execute;
    out->destroy_impl = rngkernel_destroy;
    out->required_align[FM_RNG_OUT] = fm_dtype_size(t->dtype);
    fm_plan_set_describe(out, "rng cuda/rngkernel %s %s mode=portable n=%lld %s device=%d", dists[rp->distribution],
                         fm_dtype_name(t->dtype), (long long)pl->n, fm_rng_kernel_text(pl->k), pl->device);
    return FM_OK;
}

const fm_backend fm_backend_rngkernel_rng = {
    .name = "rngkernel",
    .device = FM_DEVICE_CUDA,
    .ops = 1u << FM_OP_RNG,
    .priority = 1,
    .probe = rngkernel_probe,
    .plan = rngkernel_plan,
};
