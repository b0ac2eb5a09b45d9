/* cusolver_report.c : the cuSOLVER backend's failures after its one synchronisation, in core's words
 * (solve_problem.c) and the CPU backend's: a non-finite input, a bad given pivot, a failing info. */
#include "cuda_workspace.h"
#include "cusolver_dense.h"

#include <cuda_runtime.h>
#include <stdint.h>

/* After the one synchronisation: the lowest failing entry (a non-finite input before its info). */
fm_status fm_cs_report(const cs_impl *x, const int *info, const uint64_t *flags, int64_t bad_pivot)
{
    const fm_solve_params *sp = x->sp;
    const char *rn = fm_solve_routine_name(sp->routine);
    char e[128];
    const uint64_t fin = flags[0] < flags[1] ? flags[0] : flags[1];
    const int64_t piv_b = flags[2] == UINT64_MAX ? INT64_MAX : (int64_t)(flags[2] / (uint64_t)max64(1, x->n));
    int64_t bi = INT64_MAX;
    for (int64_t b = 0; sp->check && b < sp->batch_count; b++)
        if (info[b] > 0) {
            bi = b;
            break;
        }
    if (fin != UINT64_MAX && (int64_t)fin <= bi && (int64_t)fin <= piv_b) {
        fm_solve_entry_name(sp, flags[0] <= flags[1] ? "a" : "b", (int64_t)fin, e, sizeof e);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: %s contains infs or NaNs, expected finite values "
                       "(check_finite; %s)", e, rn);
    }
    if (piv_b != INT64_MAX && piv_b <= bi) {
        fm_solve_entry_name(sp, "ipiv", piv_b, e, sizeof e);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: %s has pivot %lld at position %lld, expected 1..%lld "
                       "(lu_factor's 1-based pivots; %s)", e, (long long)bad_pivot,
                       (long long)(flags[2] % (uint64_t)max64(1, x->n)), (long long)x->n, rn);
    }
    return bi == INT64_MAX ? FM_OK : fm_solve_fail_info(sp, bi, info[bi]);
}

/* The caller's pivot that fm_sv_pivots found bad (at flat index at = b * n + i): read back after the
 * synchronisation, so the message names its value as the CPU backend's does. */
fm_status fm_cs_read_bad_pivot(const cs_impl *x, void *const *ptrs, uint64_t at, int64_t *v)
{
    const fm_tensor *t = &x->p->t[FM_SOLVE_IPIV];
    const int64_t n = max64(1, x->n), b = (int64_t)(at / (uint64_t)n), i = (int64_t)(at % (uint64_t)n);
    const int64_t el = fm_solve_batch_offset(x->p, FM_SOLVE_IPIV, b) + i * t->strides[t->ndim - 1];
    return fm_cuda_status(cudaMemcpy(v, (const int64_t *)ptrs[FM_SOLVE_IPIV] + el, sizeof *v, cudaMemcpyDefault),
                          "cudaMemcpy(ipiv)");
}

