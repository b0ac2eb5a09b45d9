/* cusolver_refine.c : gesv with iterative refinement (fm_solve_options.refine): cusolverDnIRSXgesv
 * factors in a lower precision (fp32, tf32, bf16, fp16) and refines to the working precision, falling
 * back to the plain solve in the working precision when refinement does not converge (fallback
 * enabled), so the answer is always as accurate as the plain solve's. refine = auto and off run the
 * plain 64-bit Xgetrf / Xgetrs (auto is not measured yet); a lowest precision that is not lower than
 * the working one (fp32 on float32) is the plain solve too. IRSXgesv returns its iteration count on
 * the host, so a refined solve synchronises whatever check says. */
#include "cusolver_dense.h"

#include <string.h>

/* The lowest precision for x's dtype and refine choice, or 0: the plain solve. */
static int lowest_of(const cs_impl *x)
{
    const int cx = x->ti >= 2, dbl = x->ti & 1;
    switch (x->sp->refine) {
    case FM_SOLVE_REFINE_FP32: return dbl ? (cx ? CUSOLVER_C_32F : CUSOLVER_R_32F) : 0;
    case FM_SOLVE_REFINE_TF32: return cx ? CUSOLVER_C_TF32 : CUSOLVER_R_TF32;
    case FM_SOLVE_REFINE_BF16: return cx ? CUSOLVER_C_16BF : CUSOLVER_R_16BF;
    case FM_SOLVE_REFINE_FP16: return cx ? CUSOLVER_C_16F : CUSOLVER_R_16F;
    default: return 0;
    }
}

void fm_cs_refine_pick(cs_impl *x)
{
    const fm_solve_params *sp = x->sp;
    x->lowest = 0;
    if (sp->routine != FM_SOLVE_GESV || x->n < 1 || sp->nrhs < 1 || x->n > INT32_MAX || sp->nrhs > INT32_MAX)
        return;
    x->lowest = lowest_of(x);
    if (x->lowest)
        x->batched = 0;
}

const char *fm_cs_refine_name(const cs_impl *x)
{
    static const char *const names[] = {"", "", "fp32", "tf32", "bf16", "fp16"};
    return x->lowest ? names[x->sp->refine] : "";
}

fm_status fm_cs_refine_plan(cs_impl *x, const dev_state *d)
{
    if (!x->lowest)
        return FM_OK;
    static const cusolverPrecType_t main_prec[4] = {CUSOLVER_R_32F, CUSOLVER_R_64F, CUSOLVER_C_32F, CUSOLVER_C_64F};
    cusolverStatus_t e = cusolverDnIRSParamsCreate(&x->irs);
    if (e == CUSOLVER_STATUS_SUCCESS)
        e = cusolverDnIRSParamsSetSolverPrecisions(x->irs, main_prec[x->ti], (cusolverPrecType_t)x->lowest);
    if (e == CUSOLVER_STATUS_SUCCESS)
        e = cusolverDnIRSParamsSetRefinementSolver(x->irs, CUSOLVER_IRS_REFINE_CLASSICAL);
    if (e == CUSOLVER_STATUS_SUCCESS)
        e = cusolverDnIRSParamsEnableFallback(x->irs);
    if (e == CUSOLVER_STATUS_SUCCESS)
        e = cusolverDnIRSInfosCreate(&x->irs_infos);
    size_t bytes = 0;
    if (e == CUSOLVER_STATUS_SUCCESS)
        e = cusolverDnIRSXgesv_bufferSize(d->sv, x->irs, (int)x->n, (int)x->sp->nrhs, &bytes);
    if (bytes > x->dwork)
        x->dwork = bytes;
    return fm_cs_sv_status(e, "cusolverDnIRSXgesv's parameters / bufferSize");
}

void fm_cs_refine_destroy(cs_impl *x)
{
    if (x->irs_infos)
        cusolverDnIRSInfosDestroy(x->irs_infos);
    if (x->irs)
        cusolverDnIRSParamsDestroy(x->irs);
}

/* a x = b per entry: gathered a (off_a), b (off_b) into x's scratch (off_q), then x scattered */
fm_status fm_cs_refine_run(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const int n = (int)x->n, k = (int)x->sp->nrhs;
    for (int64_t b = 0; b < x->sp->batch_count; b++) {
        int iters = 0;
        fm_status s = fm_cs_sv_status(cusolverDnIRSXgesv(r->d->sv, x->irs, x->irs_infos, n, k,
                                                         WS(r, off_a, b, x->n * x->n, x->es), n,
                                                         WS(r, off_b, b, x->n * k, x->es), n,
                                                         WS(r, off_q, b, x->n * k, x->es), n, r->ws + x->off_work,
                                                         x->dwork, &iters, r->info + b), "cusolverDnIRSXgesv");
        if (s != FM_OK)
            return s;
    }
    return fm_cs_copy_to(x, r->d, fm_cs_scratch_view(x, r->ws + x->off_q, x->n, k, x->n, x->n * k),
                         r->ptrs[FM_SOLVE_X], FM_SOLVE_X, 0, r->stream);
}
