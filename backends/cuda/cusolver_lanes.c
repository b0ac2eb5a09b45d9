/* cusolver_lanes.c : a batch of mid-sized matrices (n <= 1024) on several streams at once. The
 * per-entry routines (getrf, potrf, syevd, geqrf, gesvd, lstsq's gesvd) each keep only a few of the
 * GPU's SMs busy at these sizes: on the H200 one Sgetrf of 512 x 512 took 0.78 ms, so 100 of them one after
 * another took 97 ms against torch's 7.6 ms. Entry b runs on lane b % lanes, with that lane's
 * cuSOLVER handle and device / host workspace; the lanes are forked from and joined into the
 * caller's stream by events, so the call stays ordered on that stream alone. */
#include "cuda/nvrtc_cache.h"
#include "cuda_workspace.h"
#include "cusolver_dense.h"

#define MAX_N 1024 /* larger matrices fill the GPU one at a time */

void fm_cs_lanes_pick(cs_impl *x)
{
    const fm_solve_params *sp = x->sp;
    x->lanes = 1;
    if (x->batched || x->lowest || x->blocked || sp->batch_count < 2 || x->n > MAX_N || x->m > MAX_N)
        return;
    switch (sp->routine) {
    case FM_SOLVE_GESV: case FM_SOLVE_GETRF: case FM_SOLVE_GETRS: case FM_SOLVE_INV: case FM_SOLVE_DET:
    case FM_SOLVE_SLOGDET: case FM_SOLVE_POTRF: case FM_SOLVE_POTRS: case FM_SOLVE_SYEVD: case FM_SOLVE_GEQRF:
    case FM_SOLVE_GESDD: case FM_SOLVE_GELSD:
        x->lanes = sp->batch_count < FM_CS_LANES ? (int)sp->batch_count : FM_CS_LANES;
        break;
    default: break;
    }
}

void fm_cs_lanes_clear(dev_state *d)
{
    for (int i = 0; i < FM_CS_LANES; i++) {
        if (d->lane_sv[i])
            cusolverDnDestroy(d->lane_sv[i]);
        if (d->lane_ev[i])
            cudaEventDestroy(d->lane_ev[i]);
        if (d->lane[i])
            cudaStreamDestroy(d->lane[i]);
        d->lane_sv[i] = NULL, d->lane_ev[i] = NULL, d->lane[i] = NULL;
    }
    if (d->fork_ev)
        cudaEventDestroy(d->fork_ev);
    d->fork_ev = NULL, d->lanes_made = 0;
}

fm_status fm_cs_lanes_make(dev_state *d, int device)
{
    if (d->lanes_made)
        return FM_OK;
    const char *failed = NULL;
    if (cudaEventCreateWithFlags(&d->fork_ev, cudaEventDisableTiming) != cudaSuccess)
        d->fork_ev = NULL, failed = "cudaEventCreateWithFlags";
    for (int i = 0; i < FM_CS_LANES && !failed; i++) {
        if (cudaStreamCreateWithFlags(&d->lane[i], cudaStreamNonBlocking) != cudaSuccess)
            d->lane[i] = NULL, failed = "cudaStreamCreateWithFlags";
        else if (cudaEventCreateWithFlags(&d->lane_ev[i], cudaEventDisableTiming) != cudaSuccess)
            d->lane_ev[i] = NULL, failed = "cudaEventCreateWithFlags";
        else if (cusolverDnCreate(&d->lane_sv[i]) != CUSOLVER_STATUS_SUCCESS)
            d->lane_sv[i] = NULL, failed = "cusolverDnCreate";
        else if (cusolverDnSetStream(d->lane_sv[i], d->lane[i]) != CUSOLVER_STATUS_SUCCESS)
            failed = "cusolverDnSetStream";
    }
    if (failed) {
        cudaGetLastError(); /* a failed create leaves its error behind: not this call's to report later */
        fm_cs_lanes_clear(d);
        return fm_fail(FM_ERR_BACKEND, WHO ": %s failed on device %d (the batch's streams)", failed, device);
    }
    d->lanes_made = 1;
    return FM_OK;
}

fm_status fm_cs_lanes_fork(const run_ctx *r)
{
    if (r->x->lanes < 2)
        return FM_OK;
    if (cudaEventRecord(r->d->fork_ev, r->stream) != cudaSuccess)
        return fm_fail(FM_ERR_BACKEND, WHO ": cudaEventRecord failed (forking the batch's streams)");
    for (int i = 0; i < r->x->lanes; i++)
        if (cudaStreamWaitEvent(r->d->lane[i], r->d->fork_ev, 0) != cudaSuccess)
            return fm_fail(FM_ERR_BACKEND, WHO ": cudaStreamWaitEvent failed (forking the batch's streams)");
    return FM_OK;
}

fm_status fm_cs_lanes_join(const run_ctx *r, fm_status s)
{
    if (r->x->lanes < 2)
        return s;
    /* every lane joined even after a failure: the workspace goes back to the caller's stream after this */
    fm_status j = FM_OK;
    for (int i = 0; i < r->x->lanes; i++)
        if ((cudaEventRecord(r->d->lane_ev[i], r->d->lane[i]) != cudaSuccess ||
             cudaStreamWaitEvent(r->stream, r->d->lane_ev[i], 0) != cudaSuccess) && j == FM_OK)
            j = fm_fail(FM_ERR_BACKEND, WHO ": cudaEventRecord / cudaStreamWaitEvent failed (joining the batch's "
                        "streams)");
    return s != FM_OK ? s : j;
}
