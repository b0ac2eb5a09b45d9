/* cusolver_refine.c : gesv with iterative refinement (fm_solve_options.refine): cusolverDnIRSXgesv
 * factors in a lower precision (fp32, tf32, bf16, fp16) and refines to the working precision, falling
 * back to the plain solve in the working precision when refinement does not converge (fallback
 * enabled: niters < 0, the answer then the plain solve's), so the answer is always as accurate as the
 * plain solve's. A lowest precision that is not lower than the working one (fp32 on float32) is the
 * plain solve. refine = off runs the plain 64-bit Xgetrf / Xgetrs; refine = auto refines by the rule
 * below. IRSXgesv returns its iteration count on the host, so a refined solve synchronises whatever
 * check says (auto therefore refines only under check = 1, which synchronises anyway).
 *
 * The refinement solver is FUSEMATH_SOLVE_IRS's (fm_settings.solve_irs) for one right-hand side, classical
 * for several (cuSOLVER's GMRES variants refuse them): GMRES by default, which
 * cuSOLVER's documentation calls the best option in most of its experiments (GMRES preconditioned by
 * the low-precision LU converges for worse-conditioned matrices than classical refinement, Haidar et
 * al., SC'18); classical, classical-gmres and gmres-gmres are there for benchmarks/solve_gpu.py
 * --irs to measure. */
#include "cusolver_dense.h"

#include <string.h>

/* refine = auto: a double-precision gesv (f64, c128) of at least AUTO_MIN_N, checked (check = 1), is
 * refined from AUTO_REFINE; anything else runs the plain solve. TF32 keeps fp32's exponent range (no
 * overflow for entries past fp16's 65504) with fp16's 10-bit mantissa, on the tensor cores. To be set
 * from the measured refine rows of benchmarks/solve_gpu.py (the fastest precision whose residual
 * stays within 10x of the fp64 LU's on the H200): one row here. */
#define AUTO_REFINE FM_SOLVE_REFINE_TF32
#define AUTO_MIN_N 4096 /* below, the factorization is too small a part of the solve for refinement to pay */

/* The refine choice x runs (auto resolved), FM_SOLVE_REFINE_OFF for the plain solve. */
static int refine_of(const cs_impl *x)
{
    const fm_solve_params *sp = x->sp;
    if (sp->refine != FM_SOLVE_REFINE_AUTO)
        return sp->refine;
    /* one right-hand side only: cuSOLVER's IRSXgesv takes nrhs = 1 alone with the GMRES refinement solvers
     * (the default, FUSEMATH_SOLVE_IRS), and classical refinement from tf32 does not converge past a condition
     * number of about 1 / u_tf32 = 2048 (then the fallback pays a tf32 and an fp64 factorization); and n * n
     * within int32: IRSXgesv is a 32-bit interface, the plain solve the 64-bit one */
    return (x->ti & 1) && sp->check && x->n >= AUTO_MIN_N && sp->nrhs == 1 && x->n * x->n <= INT32_MAX
               ? AUTO_REFINE
               : FM_SOLVE_REFINE_OFF;
}

/* The lowest precision for x's dtype and refine choice, or 0: the plain solve. */
static int lowest_of(const cs_impl *x, int refine)
{
    const int cx = x->ti >= 2, dbl = x->ti & 1;
    switch (refine) {
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
    x->lowest = 0, x->refine = FM_SOLVE_REFINE_OFF;
    if (sp->routine != FM_SOLVE_GESV || x->n < 1 || sp->nrhs < 1 || x->n > INT32_MAX || sp->nrhs > INT32_MAX)
        return;
    x->refine = refine_of(x);
    x->lowest = lowest_of(x, x->refine);
    if (x->lowest)
        x->batched = 0;
}

const char *fm_cs_refine_name(const cs_impl *x)
{
    static const char *const names[] = {"", "", "fp32", "tf32", "bf16", "fp16"};
    return x->lowest ? names[x->refine] : "";
}

static cusolverIRSRefinement_t solver_of(int setting)
{
    switch (setting) {
    case FM_IRS_CLASSICAL: return CUSOLVER_IRS_REFINE_CLASSICAL;
    case FM_IRS_CLASSICAL_GMRES: return CUSOLVER_IRS_REFINE_CLASSICAL_GMRES;
    case FM_IRS_GMRES_GMRES: return CUSOLVER_IRS_REFINE_GMRES_GMRES;
    default: return CUSOLVER_IRS_REFINE_GMRES;
    }
}

const char *fm_cs_refine_solver_name(const cs_impl *x)
{
    static const char *const names[] = {"gmres", "classical", "classical-gmres", "gmres-gmres"};
    return x->irs_solver >= 0 && x->irs_solver < 4 ? names[x->irs_solver] : "gmres";
}

fm_status fm_cs_refine_plan(cs_impl *x, const dev_state *d, const fm_settings *set)
{
    if (!x->lowest)
        return FM_OK;
    x->irs_solver = set ? set->solve_irs : FM_IRS_GMRES;
    /* cuSOLVER's GMRES refinements take one right-hand side (more: CUSOLVER_STATUS_IRS_NRHS_NOT_SUPPORTED_
     * FOR_REFINE_GMRES, seen on the H200 with 16): several are refined classically */
    if (x->sp->nrhs > 1)
        x->irs_solver = FM_IRS_CLASSICAL;
    static const cusolverPrecType_t main_prec[4] = {CUSOLVER_R_32F, CUSOLVER_R_64F, CUSOLVER_C_32F, CUSOLVER_C_64F};
    cusolverStatus_t e = cusolverDnIRSParamsCreate(&x->irs);
    if (e != CUSOLVER_STATUS_SUCCESS)
        x->irs = NULL;
    if (e == CUSOLVER_STATUS_SUCCESS)
        e = cusolverDnIRSParamsSetSolverPrecisions(x->irs, main_prec[x->ti], (cusolverPrecType_t)x->lowest);
    if (e == CUSOLVER_STATUS_SUCCESS)
        e = cusolverDnIRSParamsSetRefinementSolver(x->irs, solver_of(x->irs_solver));
    if (e == CUSOLVER_STATUS_SUCCESS)
        e = cusolverDnIRSParamsEnableFallback(x->irs);
    size_t bytes = 0;
    if (e == CUSOLVER_STATUS_SUCCESS)
        e = cusolverDnIRSXgesv_bufferSize(d->sv, x->irs, (int)x->n, (int)x->sp->nrhs, &bytes);
    if (bytes > x->dwork)
        x->dwork = bytes;
    return fm_cs_sv_status(e, "cusolverDnIRSXgesv's parameters / bufferSize");
}

void fm_cs_refine_destroy(cs_impl *x)
{
    if (x->irs)
        cusolverDnIRSParamsDestroy(x->irs);
}

/* a x = b per entry: gathered a (off_a), b (off_b) into x's scratch (off_q), then x scattered. An
 * infos structure per call: cuSOLVER documents one as valid for a single IRS call. */
fm_status fm_cs_refine_run(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const int n = (int)x->n, k = (int)x->sp->nrhs;
    for (int64_t b = 0; b < x->sp->batch_count; b++) {
        int iters = 0;
        cusolverDnIRSInfos_t infos = NULL;
        fm_status s = fm_cs_sv_status(cusolverDnIRSInfosCreate(&infos), "cusolverDnIRSInfosCreate");
        if (s != FM_OK)
            return s;
        s = fm_cs_sv_status(cusolverDnIRSXgesv(r->d->sv, x->irs, infos, n, k, WS(r, off_a, b, x->n * x->n, x->es), n,
                                               WS(r, off_b, b, x->n * k, x->es), n, WS(r, off_q, b, x->n * k, x->es),
                                               n, r->ws + x->off_work, x->dwork, &iters, r->info + b),
                            "cusolverDnIRSXgesv");
        cusolverDnIRSInfosDestroy(infos);
        if (s != FM_OK)
            return s;
    }
    return fm_cs_copy_to(x, r->d, fm_cs_scratch_view(x, r->ws + x->off_q, x->n, k, x->n, x->n * k),
                         r->ptrs[FM_SOLVE_X], FM_SOLVE_X, 0, r->stream);
}
