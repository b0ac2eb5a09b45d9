/* cusolver_trsm.c : the dense solvers' triangular solves (getrs, potrs, trtrs) for large matrices
 * and few right-hand sides, blocked: one launch of fm_sv_trsv per 64-row tile in solve order, each
 * subtracting the tile solved by the launch before from every tile still to solve and then solving its
 * own diagonal block by substitution (a warp per right-hand side, its rows in registers). cuBLAS's trsm
 * (and so cuSOLVER's getrs / potrs) spends about 0.8 us per row on such a solve, on few SMs: on the
 * H200, n = 4096 with 16 right-hand sides took 7.9 ms in two trsm, near a third of the whole LU solve,
 * and blocking with cuBLAS's trsm on the diagonal blocks still left 6 ms; a substitution kernel plus a
 * cuBLAS gemm per block (two launches per block, 256 per getrs at n = 4096) bound a repeated
 * Solver.solve (5.07 ms against 18.6 for a fresh solve); one launch per tile, 9 us each, makes it 1.26 ms
 * (design.md). The numerics are those of a blocked BLAS trsm (substitution by the diagonal's reciprocals,
 * no inverted blocks; the off-diagonal updates summed in column order). getrs's row
 * interchanges are one permutation (fm_sv_perm, composed on the device) applied by a gather kernel,
 * instead of laswp. */
#include "cuda/nvrtc_cache.h"
#include "cuda_workspace.h"
#include "cusolver_dense.h"

#define BLOCK 64         /* rows per tile: fm_sv_trsv's compile-time tile (33792 bytes of shared memory; 32 for c128) */
#define MIN_N 1024       /* below: one trsm is as fast */
#define MAX_K 128        /* more right-hand sides: trsm spreads over them itself */
#define PERM_MAX 12288   /* fm_sv_perm's shared array */

void fm_cs_trsm_pick(cs_impl *x)
{
    const fm_solve_params *sp = x->sp;
    const int rt = sp->routine;
    x->blocked = 0;
    if (x->batched || x->lowest || x->n < MIN_N || sp->nrhs < 1 || sp->nrhs > MAX_K)
        return;
    if (rt == FM_SOLVE_POTRS || rt == FM_SOLVE_TRTRS)
        x->blocked = 1;
    else if (rt == FM_SOLVE_GESV || rt == FM_SOLVE_GETRS)
        x->blocked = x->n <= PERM_MAX;
}

static fm_status blas_fail(cublasStatus_t e, const char *what)
{
    return e == CUBLAS_STATUS_SUCCESS ? FM_OK : fm_fail(FM_ERR_BACKEND, WHO ": %s failed (cublasStatus %d)", what,
                                                        (int)e);
}

/* op(a) x = b, a m x m (lda), b m x k (ldb), in place */
static fm_status trsm_part(const run_ctx *r, cublasFillMode_t fill, cublasOperation_t op, cublasDiagType_t diag,
                           int64_t m, int64_t k, const void *a, int64_t lda, void *b, int64_t ldb)
{
    static const float s1 = 1.0f;
    static const double d1 = 1.0;
    static const cuComplex c1 = {1.0f, 0.0f};
    static const cuDoubleComplex z1 = {1.0, 0.0};
    const cublasSideMode_t L = CUBLAS_SIDE_LEFT;
    cublasHandle_t h = r->d->bl;
    cublasStatus_t e;
    switch (r->x->ti) {
    case 0: e = cublasStrsm_v2_64(h, L, fill, op, diag, m, k, &s1, a, lda, b, ldb); break;
    case 1: e = cublasDtrsm_v2_64(h, L, fill, op, diag, m, k, &d1, a, lda, b, ldb); break;
    case 2: e = cublasCtrsm_v2_64(h, L, fill, op, diag, m, k, &c1, a, lda, b, ldb); break;
    default: e = cublasZtrsm_v2_64(h, L, fill, op, diag, m, k, &z1, a, lda, b, ldb); break;
    }
    return blas_fail(e, "cublas<t>trsm_v2_64");
}

/* op(a) x = b by tiles of BLOCK rows (BLOCK / 2 for c128: fm_sv_trsv's shared memory), one launch per
 * tile in solve order: forward (op(a) lower: a lower and op N, or a upper and op T / C) from the first
 * tile, backward from the last; launch jb runs a thread block per (tile still to solve, 4 right-hand
 * sides). */
static fm_status blocked(const run_ctx *r, cublasFillMode_t fill, cublasOperation_t op, cublasDiagType_t diag,
                         const char *a, char *b)
{
    const int64_t n = r->x->n, k = r->x->sp->nrhs, es = (int64_t)r->x->es;
    int bs = es == 16 ? BLOCK / 2 : BLOCK, mode = (fill == CUBLAS_FILL_MODE_LOWER ? 1 : 0) |
                                                 (op == CUBLAS_OP_T ? 2 : 0) | (op == CUBLAS_OP_C ? 4 : 0) |
                                                 (diag == CUBLAS_DIAG_UNIT ? 8 : 0);
    int nb = (int)((n + bs - 1) / bs);
    long long nn = n, kk = k;
    const long long kq = (k + 3) / 4;
    const dim3 threads = {128, 1, 1}; /* 4 warps, a right-hand side each */
    for (int jb = 0; jb < nb; jb++) {
        void *args[8] = {&a, &b, &nn, &kk, &jb, &nb, &bs, &mode};
        const dim3 grid = {(unsigned)((long long)(nb - jb) * kq), 1, 1};
        cudaError_t e = cudaLaunchKernel((const void *)r->d->k[r->x->ti][K_TRSV], grid, threads, args, 0, r->stream);
        if (e != cudaSuccess)
            return fm_cuda_runtime_fail(e, WHO, "cudaLaunchKernel(fm_sv_trsv)");
    }
    return FM_OK;
}

fm_status fm_cs_trsm(const run_ctx *r, cublasFillMode_t fill, cublasOperation_t op, cublasDiagType_t diag,
                     const void *a, void *b)
{
    if (cublasSetStream(r->d->bl, r->stream) != CUBLAS_STATUS_SUCCESS)
        return fm_fail(FM_ERR_BACKEND, WHO ": cublasSetStream failed");
    if (r->x->direct == FM_CS_DIRECT_ROWS) {
        /* a row-major factor f is f^T column-major: op(f) = op'(f^T) with op' = T for N and N for T (no
         * conjugation: cusolver_dense.c's direct_pick never takes this with op C on complex data), its lower
         * triangle f^T's upper */
        fill = fill == CUBLAS_FILL_MODE_LOWER ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
        op = op == CUBLAS_OP_N ? CUBLAS_OP_T : CUBLAS_OP_N;
    }
    if (r->x->blocked)
        return blocked(r, fill, op, diag, a, b);
    return trsm_part(r, fill, op, diag, r->x->n, r->x->sp->nrhs, a, r->x->n, b, r->x->n);
}

fm_status fm_cs_getrs(const run_ctx *r, cublasOperation_t op, const void *lu, const int64_t *piv, void *b, int64_t e)
{
    const cs_impl *x = r->x;
    long long n = x->n, k = x->sp->nrhs;
    int *perm = (int *)(void *)WS(r, off_perm, e, n, 4);
    char *b2 = WS(r, off_b2, e, n * k, x->es);
    void *pargs[3] = {&piv, &n, &perm};
    const dim3 one = {1, 1, 1}, threads = {256, 1, 1};
    cudaError_t ce = cudaLaunchKernel((const void *)r->d->k[0][K_PERM], one, threads, pargs, 0, r->stream);
    if (ce != cudaSuccess)
        return fm_cuda_runtime_fail(ce, WHO, "cudaLaunchKernel(fm_sv_perm)");
    const cublasFillMode_t lo = CUBLAS_FILL_MODE_LOWER, up = CUBLAS_FILL_MODE_UPPER;
    const cublasDiagType_t unit = CUBLAS_DIAG_UNIT, nonunit = CUBLAS_DIAG_NON_UNIT;
    fm_status s = FM_OK;
    int scatter = op != CUBLAS_OP_N;
    const void *src = b;
    void *rargs[6] = {&src, &b2, &perm, &n, &k, &scatter};
    if (op == CUBLAS_OP_N) { /* a = P^T L U: x = U^-1 L^-1 (P b) */
        s = fm_cs_launch(r->d->k[x->ti][K_ROWS], "cudaLaunchKernel(fm_sv_rows)", n * k, rargs, r->stream);
        if (s == FM_OK)
            s = fm_cs_trsm(r, lo, op, unit, lu, b2);
        if (s == FM_OK)
            s = fm_cs_trsm(r, up, op, nonunit, lu, b2);
    } else { /* op(a) = op(U) op(L) P: x = P^T op(L)^-1 op(U)^-1 b */
        s = fm_cs_trsm(r, up, op, nonunit, lu, b);
        if (s == FM_OK)
            s = fm_cs_trsm(r, lo, op, unit, lu, b);
        if (s == FM_OK)
            s = fm_cs_launch(r->d->k[x->ti][K_ROWS], "cudaLaunchKernel(fm_sv_rows)", n * k, rargs, r->stream);
    }
    if (s == FM_OK)
        s = fm_cuda_status(cudaMemcpyAsync(b, b2, (size_t)(n * k) * x->es, cudaMemcpyDeviceToDevice, r->stream),
                           "cudaMemcpyAsync(getrs)");
    return s;
}

fm_status fm_cs_potrs(const run_ctx *r, cublasFillMode_t fill, const void *l, void *b)
{
    const cublasOperation_t h = r->x->ti >= 2 ? CUBLAS_OP_C : CUBLAS_OP_T, N = CUBLAS_OP_N;
    const cublasDiagType_t nonunit = CUBLAS_DIAG_NON_UNIT;
    /* lower: a = L L^H, x = L^-H L^-1 b; upper: a = U^H U, x = U^-1 U^-H b */
    const int lower = fill == CUBLAS_FILL_MODE_LOWER;
    fm_status s = fm_cs_trsm(r, fill, lower ? N : h, nonunit, l, b);
    return s == FM_OK ? fm_cs_trsm(r, fill, lower ? h : N, nonunit, l, b) : s;
}

char *fm_cs_factor(const run_ctx *r, int64_t b)
{
    const cs_impl *x = r->x;
    if (!x->direct)
        return WS(r, off_a, b, x->n * x->n, x->es);
    return (char *)r->ptrs[FM_SOLVE_A] + (size_t)fm_solve_batch_offset(x->p, FM_SOLVE_A, b) * x->es;
}

/* Whether getrs / potrs read the caller's factor in place (x->direct): contiguous matrices (leading
 * dimension n) column-major, which every path reads (Xgetrs / Xpotrs and the blocked solves), or
 * row-major, which the blocked solves read as the transpose (fm_cs_trsm above; not for potrs or op C of
 * complex data: those would need a conjugated, untransposed op). Else the factor is gathered: an n x n
 * copy (a transpose for a row-major factor) per call, which a repeated Solver.solve paid. */
void fm_cs_direct_pick(cs_impl *x)
{
    const fm_solve_params *sp = x->sp;
    const fm_tensor *t = &x->p->t[FM_SOLVE_A];
    const int rt = sp->routine;
    x->direct = FM_CS_DIRECT_NONE;
    if ((rt != FM_SOLVE_GETRS && rt != FM_SOLVE_POTRS) || x->batched || x->n < 2 || sp->nrhs < 1 || t->ndim < 2)
        return;
    const int64_t rs = t->strides[t->ndim - 2], cs = t->strides[t->ndim - 1], n = x->n;
    if (rs == 1 && cs == n)
        x->direct = FM_CS_DIRECT_COLS;
    else if (rs == n && cs == 1 && x->blocked && !(x->ti >= 2 && (rt == FM_SOLVE_POTRS || sp->transpose == 2)))
        x->direct = FM_CS_DIRECT_ROWS;
}
