/* cusolver_dense.c : the dense solvers on CUDA devices, cuSOLVER's 64-bit generic API (Xgetrf /
 * Xgetrs, Xpotrf / Xpotrs, Xgeqrf + <t>orgqr / ungqr, Xsyevd, Xgesvd) and cuBLAS's trsm (trtrs);
 * lstsq is Xgesvd and cuBLAS gemms (cusolver_lstsq.c).
 *
 * Layout: one gather kernel (NVRTC, below) copies every batch entry of an operand, whatever its
 * strides and broadcast, into column-major scratch in the workspace (cuSOLVER overwrites its
 * inputs, so a copy is needed anyway; the kernel reads rows or columns at the same cost, so no
 * a^T trick is needed to avoid a transpose); the routine runs per entry; one scatter kernel writes
 * the C-ordered outputs (a factor with its other triangle zeroed, R's padding, Q / U / Vt).
 * Info: one int per entry in the workspace, widened into the int64 info slot (check = 0: nothing
 * synchronises, unless check_finite or given pivots need their flags read); check = 1 copies it to
 * the host (one synchronisation) and fails for the lowest failing entry with the CPU backend's
 * words. Handles: one cuSOLVER and one cuBLAS handle per device in the backend state, used under its
 * lock on the caller's stream. */
#include "cuda/nvrtc_cache.h"
#include "cuda_workspace.h"
#include "cusolver_dense.h"
#include "cusolver_dense_kernels.h"
#include "internal.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static fm_status cs_probe(const fm_settings *settings, void **state, const char **why)
{
    (void)settings;
    cs_state *st = calloc(1, sizeof *st);
    if (!st) {
        *why = "out of host memory";
        return FM_ERR_UNAVAILABLE;
    }
    fm_status s = fm_cuda_ws_probe("cusolver", &st->ws, why);
    if (s != FM_OK) {
        free(st);
        return s;
    }
    pthread_mutex_init(&st->lock, NULL);
    *state = st;
    return FM_OK;
}

/* Destroy what of d's handles and kernels exists (a partial device_state too), leaving it unmade. */
static void dev_state_clear(dev_state *d)
{
    if (d->prm)
        cusolverDnDestroyParams(d->prm);
    if (d->sj)
        cusolverDnDestroySyevjInfo(d->sj);
    if (d->sv)
        cusolverDnDestroy(d->sv);
    if (d->bl)
        cublasDestroy(d->bl);
    fm_nvrtc_module_unload(&d->mod);
    fm_cs_lanes_clear(d);
    d->prm = NULL, d->sj = NULL, d->sv = NULL, d->bl = NULL, d->made = 0;
}

static void cs_release(void *state)
{
    cs_state *st = state;
    if (!st)
        return;
    for (int d = 0; d < MAX_DEV; d++)
        if (st->dev[d].made && fm_cuda_use_device(d) == FM_OK)
            dev_state_clear(&st->dev[d]);
    fm_cuda_ws_table_destroy(st->ws);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* The device's handles and kernels, made on first use; call with st->lock held. */
static fm_status device_state(cs_state *st, const fm_settings *set, int device, dev_state **out)
{
    dev_state *d = &st->dev[device];
    if (d->made) {
        *out = d;
        return FM_OK;
    }
    static const char *const names[] = {
#define ROW(t) "fm_sv_copy_" t, "fm_sv_finite_" t, "fm_sv_diag_" t, "fm_sv_det_" t, "fm_sv_pivots", "fm_sv_info", \
               "fm_sv_ptrs", "fm_sv_narrow", "fm_sv_perm", "fm_sv_rows_" t, "fm_sv_trsv_" t, "fm_sv_lsqfin_" t, \
               "fm_sv_lsq_" t, "fm_sv_lsqres_" t, "fm_sv_tcopy_" t, "fm_sv_flaginfo", "fm_sv_chol32_" t, \
               "fm_sv_lu32_" t
        ROW("s"), ROW("d"), ROW("c"), ROW("z")};
#undef ROW
    _Static_assert(sizeof names / sizeof names[0] == 4 * K_COUNT, "a name per kernel and dtype");
    fm_status s = fm_cuda_use_device(device);
    if (s != FM_OK)
        return s;
    if ((s = fm_nvrtc_module_build(&d->mod, set, kernel_source, "the dense-solver kernels", device, 0, WHO,
                                   names, &d->k[0][0], 4 * K_COUNT)) != FM_OK)
        return s;
    /* each handle kept only when its create succeeded, so a failure part way destroys exactly those */
    const char *failed = NULL;
    cusolverDnHandle_t sv = NULL;
    cusolverDnParams_t prm = NULL;
    cublasHandle_t bl = NULL;
    syevjInfo_t sj = NULL;
    if (cusolverDnCreate(&sv) == CUSOLVER_STATUS_SUCCESS)
        d->sv = sv;
    else
        failed = "cusolverDnCreate";
    if (!failed && cusolverDnCreateParams(&prm) == CUSOLVER_STATUS_SUCCESS)
        d->prm = prm;
    else if (!failed)
        failed = "cusolverDnCreateParams";
    if (!failed && cublasCreate(&bl) == CUBLAS_STATUS_SUCCESS)
        d->bl = bl;
    else if (!failed)
        failed = "cublasCreate";
    if (!failed && cusolverDnCreateSyevjInfo(&sj) == CUSOLVER_STATUS_SUCCESS)
        d->sj = sj;
    else if (!failed)
        failed = "cusolverDnCreateSyevjInfo";
    if (failed) {
        dev_state_clear(d);
        return fm_fail(FM_ERR_BACKEND, WHO ": %s failed on device %d", failed, device);
    }
    d->made = 1;
    *out = d;
    return FM_OK;
}

/* ---- the plan ---- */

static size_t up256(size_t v) { return (v + 255) & ~(size_t)255; }

fm_status fm_cs_sv_status(cusolverStatus_t e, const char *what)
{
    if (e == CUSOLVER_STATUS_SUCCESS)
        return FM_OK;
    if (e == CUSOLVER_STATUS_ALLOC_FAILED)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, WHO ": %s: out of GPU memory (CUSOLVER_STATUS_ALLOC_FAILED)", what);
    return fm_fail(FM_ERR_BACKEND, WHO ": %s failed (cusolverStatus %d)", what, (int)e);
}

fm_status fm_cs_launch(cudaKernel_t k, const char *name, int64_t work, void **args, cudaStream_t stream)
{
    const int64_t blocks = work <= 0 ? 1 : work / 256 + 1 > 8192 ? 8192 : work / 256 + 1;
    dim3 grid = {(unsigned)blocks, 1, 1}, block = {256, 1, 1};
    cudaError_t e = cudaLaunchKernel((const void *)k, grid, block, args, 0, stream);
    return e == cudaSuccess ? FM_OK : fm_cuda_runtime_fail(e, WHO, name);
}

/* A view of slot s's batch entries (its strides, broadcast batch axes at stride 0) as a copy
 * source of rows x cols; transposed: rows and columns swapped (a^T), conj as well (a^H). */
static fm_copy_args slot_view(const cs_impl *x, int s, const void *base, int64_t rows, int64_t cols, int transposed)
{
    const fm_tensor *t = &x->p->t[s];
    const fm_solve_params *sp = x->sp;
    fm_copy_args a;
    memset(&a, 0, sizeof a);
    a.src = base;
    a.rows = rows, a.cols = cols, a.srows = rows, a.scols = cols, a.count = sp->batch_count;
    const int core = sp->core_ndim[s], nb = t->ndim - core;
    const int64_t rs = core == 2 ? t->strides[t->ndim - 2] : t->strides[t->ndim - 1];
    const int64_t cs = core == 2 ? t->strides[t->ndim - 1] : 0;
    a.srs = transposed ? cs : rs, a.scs = transposed ? rs : cs;
    a.nb = sp->batch_ndim > 0 ? sp->batch_ndim : 1;
    a.bshape[0] = 1;
    for (int i = 0; i < sp->batch_ndim; i++) {
        const int ti = i - (sp->batch_ndim - nb);
        a.bshape[i] = sp->batch_shape[i] ? sp->batch_shape[i] : 1;
        a.bstride[i] = ti >= 0 && t->shape[ti] != 1 ? t->strides[ti] : 0;
    }
    return a;
}

/* A view of contiguous per-entry scratch: column-major rows x cols with leading dimension ld. */
fm_copy_args fm_cs_scratch_view(const cs_impl *x, const void *base, int64_t rows, int64_t cols, int64_t ld,
                                 int64_t per)
{
    fm_copy_args a;
    memset(&a, 0, sizeof a);
    a.src = base;
    a.rows = rows, a.cols = cols, a.srows = rows, a.scols = cols, a.count = x->sp->batch_count;
    a.srs = 1, a.scs = ld, a.nb = 1, a.bshape[0] = a.count > 0 ? a.count : 1, a.bstride[0] = per;
    return a;
}

/* Copy view a into dst: column-major scratch (ld, per entry) or, out_slot >= 0, that output slot
 * (its strides: C order, or a factor column-major within each matrix). */
fm_status fm_cs_copy_to(const cs_impl *x, const dev_state *d, fm_copy_args a, void *dst, int out_slot, int64_t ld,
                         cudaStream_t stream)
{
    a.dst = dst;
    if (out_slot >= 0) {
        const fm_tensor *t = &x->p->t[out_slot];
        a.drs = t->strides[t->ndim - 2], a.dcs = t->strides[t->ndim - 1], a.dbs = a.rows * a.cols;
    } else {
        a.drs = 1, a.dcs = ld, a.dbs = ld * a.cols;
    }
    if (a.count * a.rows * a.cols == 0)
        return FM_OK;
    void *args[1] = {&a};
    /* a copy whose contiguous axis changes (row-major operand <-> column-major scratch) goes through
     * tiles; the element loop for the rest (same layout, vectors, small matrices) */
    const int src_j = llabs(a.scs) < llabs(a.srs), dst_i = llabs(a.drs) <= llabs(a.dcs);
    if (a.rows >= 16 && a.cols >= 16 && src_j == dst_i) {
        const int64_t tiles = a.count * ((a.rows + 31) / 32) * ((a.cols + 31) / 32);
        return fm_cs_launch(d->k[x->ti][K_TCOPY], "cudaLaunchKernel(fm_sv_tcopy)", tiles * 256 - 1, args, stream);
    }
    return fm_cs_launch(d->k[x->ti][K_COPY], "cudaLaunchKernel(fm_sv_copy)", a.count * a.rows * a.cols, args, stream);
}

char *fm_cs_entry(const cs_impl *x, const char *ws, size_t off, int64_t b, int64_t elems, size_t es)
{
    (void)x;
    return (char *)ws + off + (size_t)(b * elems) * es;
}

/* ---- one execution ---- */

static fm_status kernel_diag(const run_ctx *r, const void *a, int mode)
{
    long long n = r->x->n, count = r->x->sp->batch_count;
    int *info = r->info;
    void *args[5] = {&a, &n, &count, &info, &mode};
    const int ti = mode == 1 ? r->x->ti & 1 : r->x->ti; /* mode 1 reads a real vector */
    return fm_cs_launch(r->d->k[ti][K_DIAG], "cudaLaunchKernel(fm_sv_diag)", count * 256, args, r->stream); /* a block per entry */
}

/* getrf, gesv, getrs, inv, det, slogdet */
static fm_status run_lu(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const fm_solve_params *sp = x->sp;
    const int64_t n = x->n, B = sp->batch_count;
    const int rt = sp->routine;
    const int factored = (x->p->present & 1u << FM_SOLVE_IPIV) != 0;
    const int64_t nr = rt == FM_SOLVE_INV ? n : sp->nrhs;
    fm_status s = FM_OK;
    if (x->lowest) /* refined: cusolver_refine.c */
        return fm_cs_refine_run(r);
    if (factored) { /* the caller's pivots, contiguous, checked; a bad one made the identity's (info -7) */
        fm_copy_args v = slot_view(x, FM_SOLVE_IPIV, r->ptrs[FM_SOLVE_IPIV], n, 1, 0);
        cs_impl xd = *x;
        xd.ti = 1; /* int64 moved as 8-byte words */
        if ((s = fm_cs_copy_to(&xd, r->d, v, r->ws + x->off_piv, -1, n, r->stream)) != FM_OK)
            return s;
        long long nn = n, count = B;
        void *piv = r->ws + x->off_piv, *bad = r->ws + x->off_flag + 16;
        int *info = r->info;
        /* checked, then the bad entries' pivots made the identity; also for trusted pivots (two small
         * kernels, no synchronisation: nothing reads the flag back unless the call synchronises anyway),
         * since Xgetrs and getrsBatched index b by the pivots: a wrong trusted one must not fault */
        for (int phase = 0; phase < 2; phase++) {
            void *args[6] = {&piv, &nn, &count, &info, &bad, &phase};
            if ((s = fm_cs_launch(r->d->k[0][K_PIVOTS], "cudaLaunchKernel(fm_sv_pivots)", B * n, args, r->stream)) !=
                FM_OK)
                return s;
        }
    }
    if (rt == FM_SOLVE_INV) { /* b = identities */
        fm_copy_args v = fm_cs_scratch_view(x, NULL, n, n, n, 0);
        v.ident = 1;
        if ((s = fm_cs_copy_to(x, r->d, v, r->ws + x->off_b, -1, n, r->stream)) != FM_OK)
            return s;
    }
    const cublasOperation_t op = rt != FM_SOLVE_GETRS ? CUBLAS_OP_N : sp->transpose == 0 ? CUBLAS_OP_N
                                 : sp->transpose == 1 ? CUBLAS_OP_T : CUBLAS_OP_C;
    if (x->batched && (s = fm_cs_batched_run(r)) != FM_OK)
        return s;
    if (!x->batched && (s = fm_cs_lanes_fork(r)) != FM_OK)
        return s;
    for (int64_t b = 0; b < B && n > 0 && !x->batched && s == FM_OK; b++) {
        char *a = fm_cs_factor(r, b), *bb = WS(r, off_b, b, n * nr, x->es);
        int64_t *piv = rt == FM_SOLVE_GETRF ? (int64_t *)r->ptrs[FM_SOLVE_PIVOTS] + b * n
                                            : (int64_t *)(void *)WS(r, off_piv, b, n, 8);
        if (!factored)
            s = fm_cs_sv_status(cusolverDnXgetrf(SV(r, b), r->d->prm, n, n, x->dt, a, n, piv, x->dt, WORK(r, b),
                                                 x->dwork, HWORK(r, b), x->hwork, r->info + b), "cusolverDnXgetrf");
        if (s != FM_OK || !(rt == FM_SOLVE_GESV || rt == FM_SOLVE_GETRS || rt == FM_SOLVE_INV) || nr == 0)
            continue;
        s = x->blocked ? fm_cs_getrs(r, op, a, piv, bb, b)
                       : fm_cs_sv_status(cusolverDnXgetrs(SV(r, b), r->d->prm, op, n, nr, x->dt, a, n, piv, x->dt, bb,
                                                          n, r->junk), "cusolverDnXgetrs");
    }
    if ((s = x->batched ? s : fm_cs_lanes_join(r, s)) != FM_OK)
        return s;
    if (rt == FM_SOLVE_GETRF)
        return fm_cs_copy_to(x, r->d, fm_cs_scratch_view(x, r->ws + x->off_a, n, n, n, n * n), r->ptrs[FM_SOLVE_FACTOR],
                       FM_SOLVE_FACTOR, 0, r->stream);
    if (rt == FM_SOLVE_DET || rt == FM_SOLVE_SLOGDET) {
        void *lu = r->ws + x->off_a, *piv = r->ws + x->off_piv, *det = NULL, *sign = NULL, *logabs = NULL;
        if (rt == FM_SOLVE_DET)
            det = r->ptrs[FM_SOLVE_W];
        else
            sign = r->ptrs[FM_SOLVE_AUX], logabs = r->ptrs[FM_SOLVE_W];
        long long nn = n, count = B;
        int *info = r->info;
        void *args[8] = {&lu, &piv, &nn, &count, &info, &det, &sign, &logabs};
        return fm_cs_launch(r->d->k[x->ti][K_DET], "cudaLaunchKernel(fm_sv_det)", B * 256, args, r->stream); /* a block per entry */
    }
    return fm_cs_copy_to(x, r->d, fm_cs_scratch_view(x, r->ws + x->off_b, n, nr, n, n * nr), r->ptrs[FM_SOLVE_X], FM_SOLVE_X, 0,
                   r->stream);
}

/* potrf, potrs, trtrs */
static fm_status run_triangular(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const fm_solve_params *sp = x->sp;
    const int64_t n = x->n, nr = sp->nrhs, B = sp->batch_count;
    const cublasFillMode_t fill = sp->uplo ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    fm_status s = FM_OK;
    if (sp->routine == FM_SOLVE_TRTRS && !sp->unit_diagonal && (s = kernel_diag(r, r->ws + x->off_a, 0)) != FM_OK)
        return s;
    const cublasOperation_t op = sp->transpose == 0 ? CUBLAS_OP_N : sp->transpose == 1 ? CUBLAS_OP_T : CUBLAS_OP_C;
    if (x->batched && (s = fm_cs_batched_run(r)) != FM_OK)
        return s;
    if (!x->batched && (s = fm_cs_lanes_fork(r)) != FM_OK)
        return s;
    for (int64_t b = 0; b < B && n > 0 && !x->batched && s == FM_OK; b++) {
        char *a = fm_cs_factor(r, b), *bb = WS(r, off_b, b, n * nr, x->es);
        if (sp->routine == FM_SOLVE_POTRF)
            s = fm_cs_sv_status(cusolverDnXpotrf(SV(r, b), r->d->prm, fill, n, x->dt, a, n, x->dt, WORK(r, b),
                                                 x->dwork, HWORK(r, b), x->hwork, r->info + b), "cusolverDnXpotrf");
        else if (sp->routine == FM_SOLVE_POTRS && nr > 0)
            s = x->blocked ? fm_cs_potrs(r, fill, a, bb)
                           : fm_cs_sv_status(cusolverDnXpotrs(SV(r, b), r->d->prm, fill, n, nr, x->dt, a, n, x->dt, bb,
                                                              n, r->junk), "cusolverDnXpotrs");
        else if (sp->routine == FM_SOLVE_TRTRS && nr > 0)
            s = fm_cs_trsm(r, fill, op, sp->unit_diagonal ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT, a, bb);
    }
    if ((s = x->batched ? s : fm_cs_lanes_join(r, s)) != FM_OK)
        return s;
    if (sp->routine != FM_SOLVE_POTRF)
        return fm_cs_copy_to(x, r->d, fm_cs_scratch_view(x, r->ws + x->off_b, n, nr, n, n * nr), r->ptrs[FM_SOLVE_X],
                       FM_SOLVE_X, 0, r->stream);
    /* a NaN on the factor's diagonal is the failing minor where the library passed it (info 0), as
     * reference LAPACK and the CPU backend report it (the H200 run: batched potrf passed one) */
    if (n > 0 && (s = kernel_diag(r, r->ws + x->off_a, 2)) != FM_OK)
        return s;
    fm_copy_args v = fm_cs_scratch_view(x, r->ws + x->off_a, n, n, n, n * n);
    v.tri = sp->uplo ? 1 : 2; /* the other triangle zeroed */
    return fm_cs_copy_to(x, r->d, v, r->ptrs[FM_SOLVE_FACTOR], FM_SOLVE_FACTOR, 0, r->stream);
}

static fm_status run_eigh(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const fm_solve_params *sp = x->sp;
    const int64_t n = x->n;
    const cusolverEigMode_t jobz = sp->values_only ? CUSOLVER_EIG_MODE_NOVECTOR : CUSOLVER_EIG_MODE_VECTOR;
    const cublasFillMode_t fill = sp->uplo ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    /* an entry with an inf or NaN: flagged (off_piv, unused by eigh) and zeroed, so that no eigensolver
     * iterates on it (the batched ones share one call), then info 1 (not converged), the CPU's outcome */
    long long per = n * n, count = sp->batch_count;
    void *a0 = r->ws + x->off_a, *flag = r->ws + x->off_piv;
    fm_status s = per > 0 ? fm_cuda_status(cudaMemsetAsync(flag, 0, (size_t)count * 8, r->stream), "cudaMemsetAsync")
                          : FM_OK;
    for (int phase = 0; phase < 2 && per > 0 && s == FM_OK; phase++) {
        void *args[5] = {&a0, &per, &count, &flag, &phase};
        s = fm_cs_launch(r->d->k[x->ti][K_LSQFIN], "cudaLaunchKernel(fm_sv_lsqfin)", per * count, args, r->stream);
    }
    if (s == FM_OK && x->batched)
        s = fm_cs_batched_run(r);
    if (s == FM_OK && !x->batched)
        s = fm_cs_lanes_fork(r);
    if (s != FM_OK)
        return s;
    for (int64_t b = 0; b < sp->batch_count && n > 0 && !x->batched && s == FM_OK; b++)
        s = fm_cs_sv_status(cusolverDnXsyevd(SV(r, b), r->d->prm, jobz, fill, n, x->dt, WS(r, off_a, b, n * n, x->es),
                                             n, x->rt, (char *)r->ptrs[FM_SOLVE_W] + (size_t)(b * n) * x->rs, x->dt,
                                             WORK(r, b), x->dwork, HWORK(r, b), x->hwork, r->info + b),
                            "cusolverDnXsyevd");
    if ((s = x->batched ? s : fm_cs_lanes_join(r, s)) == FM_OK && n > 0) {
        int *info = r->info;
        void *args[3] = {&flag, &info, &count};
        s = fm_cs_launch(r->d->k[0][K_FLAGINFO], "cudaLaunchKernel(fm_sv_flaginfo)", count, args, r->stream);
    }
    if (s == FM_OK && n > 0)
        s = kernel_diag(r, r->ptrs[FM_SOLVE_W], 1); /* NaN eigenvalues: not converged */
    if (s != FM_OK || sp->values_only)
        return s;
    return fm_cs_copy_to(x, r->d, fm_cs_scratch_view(x, r->ws + x->off_a, n, n, n, n * n), r->ptrs[FM_SOLVE_X], FM_SOLVE_X, 0,
                   r->stream);
}

static cusolverStatus_t orgqr(const run_ctx *r, int64_t b, int m, int n, int k, void *a, const void *tau)
{
    const cs_impl *x = r->x;
    const size_t lwe = x->dwork / x->es; /* dwork may be Xgeqrf's, past int's range for orgqr's lwork */
    const int lw = lwe > (size_t)INT32_MAX ? INT32_MAX : (int)lwe;
    void *w = WORK(r, b);
    cusolverDnHandle_t h = SV(r, b);
    switch (x->ti) {
    case 0: return cusolverDnSorgqr(h, m, n, k, a, m, tau, w, lw, r->junk);
    case 1: return cusolverDnDorgqr(h, m, n, k, a, m, tau, w, lw, r->junk);
    case 2: return cusolverDnCungqr(h, m, n, k, a, m, tau, w, lw, r->junk);
    default: return cusolverDnZungqr(h, m, n, k, a, m, tau, w, lw, r->junk);
    }
}

static fm_status run_qr(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const fm_solve_params *sp = x->sp;
    const int64_t m = x->m, n = x->n, k = x->k, rr = sp->qr_mode == 1 ? m : k, qc = rr;
    fm_status s = fm_cs_lanes_fork(r);
    for (int64_t b = 0; b < sp->batch_count && k > 0 && s == FM_OK; b++)
        s = fm_cs_sv_status(cusolverDnXgeqrf(SV(r, b), r->d->prm, m, n, x->dt, WS(r, off_a, b, m * n, x->es), m, x->dt,
                                             WS(r, off_tau, b, k, x->es), x->dt, WORK(r, b), x->dwork, HWORK(r, b),
                                             x->hwork, r->info + b), "cusolverDnXgeqrf");
    if ((s = fm_cs_lanes_join(r, s)) != FM_OK)
        return s;
    fm_copy_args v = fm_cs_scratch_view(x, r->ws + x->off_a, rr, n, m, m * n);
    v.srows = k, v.tri = 1; /* R: the upper triangle of the first k rows */
    if ((s = fm_cs_copy_to(x, r->d, v, r->ptrs[FM_SOLVE_FACTOR], FM_SOLVE_FACTOR, 0, r->stream)) != FM_OK ||
        sp->qr_mode == 2)
        return s;
    if (k == 0) { /* Q of an empty matrix: the identity's first columns */
        v = fm_cs_scratch_view(x, NULL, m, qc, m, 0);
        v.ident = 1;
        return fm_cs_copy_to(x, r->d, v, r->ptrs[FM_SOLVE_X], FM_SOLVE_X, 0, r->stream);
    }
    v = fm_cs_scratch_view(x, r->ws + x->off_a, m, qc, m, m * n); /* the reflectors, then orgqr builds Q */
    v.scols = k;
    if ((s = fm_cs_copy_to(x, r->d, v, r->ws + x->off_q, -1, m, r->stream)) != FM_OK)
        return s;
    if ((s = fm_cs_lanes_fork(r)) != FM_OK)
        return s;
    for (int64_t b = 0; b < sp->batch_count && s == FM_OK; b++)
        s = fm_cs_sv_status(orgqr(r, b, (int)m, (int)qc, (int)k, WS(r, off_q, b, m * qc, x->es),
                                  WS(r, off_tau, b, k, x->es)), "cusolverDn<t>orgqr");
    if ((s = fm_cs_lanes_join(r, s)) != FM_OK)
        return s;
    return fm_cs_copy_to(x, r->d, fm_cs_scratch_view(x, r->ws + x->off_q, m, qc, m, m * qc), r->ptrs[FM_SOLVE_X], FM_SOLVE_X, 0,
                   r->stream);
}

/* U's columns as gesvd computes them (uc below) */
static int64_t svd_ucols(const cs_impl *x) { return x->sp->full_matrices ? x->mm : x->k; }

/* gesvd of mm x nn (a, or a^H when m < n: cuSOLVER's gesvd wants m >= n), then U = U', Vt = Vt'
 * or, for a^H = U' S Vt', U = Vt'^H and Vt = U'^H. U' is mm x uc per entry: jobu 'S' writes only
 * the first min(mm, nn) = k columns (LAPACK's gesvd semantics, which cuSOLVER's follows), 'A' all mm. */
static fm_status run_svd(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const fm_solve_params *sp = x->sp;
    const int64_t mm = x->mm, nn = x->nn, k = x->k, m = x->m, n = x->n;
    const int64_t uc = svd_ucols(x), vr = sp->full_matrices ? nn : k; /* of U', Vt' */
    const signed char job = sp->values_only ? 'N' : sp->full_matrices ? 'A' : 'S';
    fm_status s = fm_cs_lanes_fork(r);
    for (int64_t b = 0; b < sp->batch_count && k > 0 && s == FM_OK; b++)
        s = fm_cs_sv_status(cusolverDnXgesvd(SV(r, b), r->d->prm, job, job, mm, nn, x->dt,
                                             WS(r, off_a, b, mm * nn, x->es), mm, x->rt,
                                             (char *)r->ptrs[FM_SOLVE_W] + (size_t)(b * k) * x->rs, x->dt,
                                             WS(r, off_q, b, mm * uc, x->es), mm, x->dt,
                                             WS(r, off_vt, b, nn * nn, x->es), max64(1, vr), x->dt, WORK(r, b),
                                             x->dwork, HWORK(r, b), x->hwork, r->info + b), "cusolverDnXgesvd");
    if ((s = fm_cs_lanes_join(r, s)) != FM_OK)
        return s;
    if (sp->values_only)
        return FM_OK;
    const int64_t ucols = sp->full_matrices ? m : k, vrows = sp->full_matrices ? n : k;
    fm_copy_args u, vt;
    if (k == 0) {
        u = fm_cs_scratch_view(x, NULL, m, ucols, m, 0), vt = fm_cs_scratch_view(x, NULL, vrows, n, vrows, 0);
        u.ident = vt.ident = 1;
    } else if (m >= n) {
        u = fm_cs_scratch_view(x, r->ws + x->off_q, m, uc, mm, mm * uc);
        vt = fm_cs_scratch_view(x, r->ws + x->off_vt, vr, n, max64(1, vr), nn * nn);
    } else {
        u = fm_cs_scratch_view(x, r->ws + x->off_vt, m, vr, max64(1, vr), nn * nn);   /* U = Vt'^H */
        u.srs = max64(1, vr), u.scs = 1, u.conj = x->ti >= 2;
        vt = fm_cs_scratch_view(x, r->ws + x->off_q, uc, n, mm, mm * uc);           /* Vt = U'^H */
        vt.srs = mm, vt.scs = 1, vt.conj = x->ti >= 2;
    }
    if ((s = fm_cs_copy_to(x, r->d, u, r->ptrs[FM_SOLVE_X], FM_SOLVE_X, 0, r->stream)) != FM_OK)
        return s;
    return fm_cs_copy_to(x, r->d, vt, r->ptrs[FM_SOLVE_FACTOR], FM_SOLVE_FACTOR, 0, r->stream);
}

static fm_status enqueue(const cs_impl *x, const dev_state *d, char *ws, void *const *ptrs, cudaStream_t stream,
                         void *hwork)
{
    const fm_solve_params *sp = x->sp;
    run_ctx r = {.x = x, .d = d, .ws = ws, .ptrs = ptrs, .stream = stream, .hwork = hwork,
                 .info = (int *)(void *)(ws + x->off_info), .junk = (int *)(void *)(ws + x->off_flag + 24)};
    const int64_t B = sp->batch_count;
    fm_status s = fm_cs_sv_status(cusolverDnSetStream(d->sv, stream), "cusolverDnSetStream");
    if (s == FM_OK)
        s = fm_cuda_status(cudaMemsetAsync(ws + x->off_info, 0, (size_t)B * sizeof(int), stream), "cudaMemsetAsync");
    if (s == FM_OK)
        s = fm_cuda_status(cudaMemsetAsync(ws + x->off_flag, 0xff, 24, stream), "cudaMemsetAsync");
    const int in_b = (x->p->present & 1u << FM_SOLVE_B) != 0;
    const int a_h = x->mm != x->m; /* gesvd of a^H (svd, lstsq) */
    fm_copy_args va = slot_view(x, FM_SOLVE_A, ptrs[FM_SOLVE_A], x->mm, x->nn, a_h);
    va.conj = a_h && x->ti >= 2;
    fm_copy_args vb;
    memset(&vb, 0, sizeof vb);
    if (in_b)
        vb = slot_view(x, FM_SOLVE_B, ptrs[FM_SOLVE_B], x->m, sp->nrhs, 0);
    if (s == FM_OK && sp->check_finite) {
        for (int i = sp->trusted_factor ? 1 : 0; i < 1 + in_b && s == FM_OK; i++) { /* a trusted factor: b only */
            fm_copy_args *v = i ? &vb : &va;
            void *first = ws + x->off_flag + 8 * i;
            void *args[2] = {v, &first};
            if (v->count * v->rows * v->cols > 0)
                s = fm_cs_launch(d->k[x->ti][K_FINITE], "cudaLaunchKernel(fm_sv_finite)", v->count * v->rows * v->cols,
                           args, stream);
        }
    }
    if (s == FM_OK && !x->direct)
        s = fm_cs_copy_to(x, d, va, ws + x->off_a, -1, x->mm, stream);
    if (s == FM_OK && in_b)
        s = fm_cs_copy_to(x, d, vb, ws + x->off_b, -1, x->m, stream);
    if (s != FM_OK)
        return s;
    switch (sp->routine) {
    case FM_SOLVE_POTRF: case FM_SOLVE_POTRS: case FM_SOLVE_TRTRS: s = run_triangular(&r); break;
    case FM_SOLVE_SYEVD: s = run_eigh(&r); break;
    case FM_SOLVE_GEQRF: s = run_qr(&r); break;
    case FM_SOLVE_GESDD: s = run_svd(&r); break;
    case FM_SOLVE_GELSD: s = fm_cs_lstsq_run(&r); break;
    default: s = run_lu(&r); break;
    }
    if (s == FM_OK && (x->p->present & 1u << FM_SOLVE_INFO) && B > 0) {
        long long count = B;
        void *in = r.info, *out = ptrs[FM_SOLVE_INFO];
        void *args[3] = {&in, &out, &count};
        s = fm_cs_launch(d->k[0][K_INFO], "cudaLaunchKernel(fm_sv_info)", B, args, stream);
    }
    return s;
}

static fm_status cs_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)args;
    const cs_impl *x = p->impl;
    const fm_solve_params *sp = x->sp;
    const int64_t B = sp->batch_count;
    if (B == 0)
        return FM_OK;
    /* routines that cannot fail past their checked inputs do not wait for the device (check = 1);
     * given pivots are read back whatever check says: a bad one is refused, as on the CPU, since the
     * entry's result (solved or det with the identity's pivots in its place) would be silently wrong */
    /* trusted pivots (the library's own getrf's, fm_solve_options.trusted_factor) are not read back (a bad
     * one is still made the identity's on the device, run_lu): getrs and det of such a factor then cannot
     * fail, and check = 1 costs no synchronisation */
    const int rt = sp->routine, given = (x->p->present & 1u << FM_SOLVE_IPIV) && !sp->trusted_factor;
    const int can_fail = !(rt == FM_SOLVE_POTRS || rt == FM_SOLVE_GEQRF ||
                           ((rt == FM_SOLVE_DET || rt == FM_SOLVE_SLOGDET || rt == FM_SOLVE_GETRS) && !given));
    const int sync = (sp->check && can_fail) || sp->check_finite || given;
    int *info = sync ? malloc((size_t)B * sizeof(int)) : NULL;
    void *hwork = x->hwork ? malloc(x->hwork * (size_t)x->lanes) : NULL; /* a part per lane */
    uint64_t flags[3];
    if ((sync && !info) || (x->hwork && !hwork)) {
        free(info), free(hwork);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, WHO ": out of host memory for %s's info / host workspace",
                       fm_solve_routine_name(sp->routine));
    }
    fm_status s = fm_cuda_use_device(x->device);
    cudaStream_t st = (cudaStream_t)stream;
    void *ws = NULL;
    fm_cuda_ws_lease lease = NULL;
    pthread_mutex_lock(&x->st->lock); /* the device's handles: one caller at a time */
    const dev_state *d = &x->st->dev[x->device];
    if (s == FM_OK && (s = fm_cuda_ws_acquire(x->st->ws, x->device, st, x->total, &ws, &lease)) != FM_OK &&
        s == FM_ERR_OUT_OF_MEMORY) {
        char why[256];
        snprintf(why, sizeof why, "%s", fm_last_error());
        s = fm_fail(FM_ERR_OUT_OF_MEMORY, WHO ": out of GPU memory for the %zu-byte workspace of %s (%lld x %lld, "
                    "batch %lld): %s", x->total, fm_solve_routine_name(sp->routine), (long long)x->m,
                    (long long)x->n, (long long)B, why);
    }
    if (s == FM_OK)
        s = enqueue(x, d, ws, ptrs, st, hwork);
    if (s == FM_OK && sync) {
        s = fm_cuda_status(cudaMemcpyAsync(info, ws + x->off_info, (size_t)B * sizeof(int), cudaMemcpyDeviceToHost,
                                           st), "cudaMemcpyAsync(info)");
        if (s == FM_OK)
            s = fm_cuda_status(cudaMemcpyAsync(flags, ws + x->off_flag, sizeof flags, cudaMemcpyDeviceToHost, st),
                               "cudaMemcpyAsync(flags)");
    }
    fm_cuda_ws_release(lease);
    pthread_mutex_unlock(&x->st->lock);
    if (s == FM_OK && sync)
        s = fm_cuda_status(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    int64_t bad = 0;
    if (s == FM_OK && sync && flags[2] != UINT64_MAX)
        s = fm_cs_read_bad_pivot(x, ptrs, flags[2], &bad);
    if (s == FM_OK && sync)
        s = fm_cs_report(x, info, flags, bad);
    free(info), free(hwork);
    return s;
}

/* ---- planning ---- */
/* The routine's device / host workspace per call (the *_bufferSize queries, 64-bit). */
static fm_status buffer_sizes(cs_impl *x, const dev_state *d)
{
    const fm_solve_params *sp = x->sp;
    const int64_t n = x->n, m = x->m, k = x->k;
    size_t dw = 0, hw = 0;
    cusolverStatus_t e = CUSOLVER_STATUS_SUCCESS;
    const cublasFillMode_t fill = sp->uplo ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    const int lu = sp->routine == FM_SOLVE_GESV || sp->routine == FM_SOLVE_GETRF || sp->routine == FM_SOLVE_INV ||
                   ((sp->routine == FM_SOLVE_DET || sp->routine == FM_SOLVE_SLOGDET) &&
                    !(x->p->present & 1u << FM_SOLVE_IPIV));
    if (k == 0)
        return FM_OK;
    if (lu)
        e = cusolverDnXgetrf_bufferSize(d->sv, d->prm, n, n, x->dt, NULL, n, x->dt, &dw, &hw);
    else if (sp->routine == FM_SOLVE_POTRF)
        e = cusolverDnXpotrf_bufferSize(d->sv, d->prm, fill, n, x->dt, NULL, n, x->dt, &dw, &hw);
    else if (sp->routine == FM_SOLVE_SYEVD)
        e = cusolverDnXsyevd_bufferSize(d->sv, d->prm, sp->values_only ? CUSOLVER_EIG_MODE_NOVECTOR
                                        : CUSOLVER_EIG_MODE_VECTOR, fill, n, x->dt, NULL, n, x->rt, NULL, x->dt,
                                        &dw, &hw);
    else if (sp->routine == FM_SOLVE_GESDD || sp->routine == FM_SOLVE_GELSD) {
        const signed char job = sp->routine == FM_SOLVE_GELSD ? 'S' : sp->values_only ? 'N' : sp->full_matrices ? 'A'
                                                                                                               : 'S';
        e = cusolverDnXgesvd_bufferSize(d->sv, d->prm, job, job, x->mm, x->nn, x->dt, NULL, x->mm, x->rt, NULL,
                                        x->dt, NULL, x->mm, x->dt, NULL, max64(1, sp->full_matrices ? x->nn : k),
                                        x->dt, &dw, &hw);
    } else if (sp->routine == FM_SOLVE_GEQRF) {
        e = cusolverDnXgeqrf_bufferSize(d->sv, d->prm, m, n, x->dt, NULL, m, x->dt, NULL, x->dt, &dw, &hw);
        int lw = 0;
        const int qc = (int)(sp->qr_mode == 1 ? m : k);
        if (e == CUSOLVER_STATUS_SUCCESS && sp->qr_mode != 2) {
            switch (x->ti) {
            case 0: e = cusolverDnSorgqr_bufferSize(d->sv, (int)m, qc, (int)k, NULL, (int)m, NULL, &lw); break;
            case 1: e = cusolverDnDorgqr_bufferSize(d->sv, (int)m, qc, (int)k, NULL, (int)m, NULL, &lw); break;
            case 2: e = cusolverDnCungqr_bufferSize(d->sv, (int)m, qc, (int)k, NULL, (int)m, NULL, &lw); break;
            default: e = cusolverDnZungqr_bufferSize(d->sv, (int)m, qc, (int)k, NULL, (int)m, NULL, &lw); break;
            }
            if ((size_t)lw * x->es > dw)
                dw = (size_t)lw * x->es;
        }
    }
    x->dwork = dw, x->hwork = hw;
    fm_status s = fm_cs_sv_status(e, "the routine's *_bufferSize");
    return s == FM_OK ? fm_cs_batched_sizes(x, d) : s;
}

/* The workspace's parts for the whole batch; FM_ERR_TOO_LARGE past size_t. */
static fm_status layout(cs_impl *x)
{
    const fm_solve_params *sp = x->sp;
    const int rt = sp->routine;
    const double B = (double)sp->batch_count, es = (double)x->es;
    const int64_t nr = rt == FM_SOLVE_INV ? x->n : (x->p->present & 1u << FM_SOLVE_B) ? sp->nrhs : 0;
    const int vec_svd = (rt == FM_SOLVE_GESDD && !sp->values_only) || rt == FM_SOLVE_GELSD, ls = rt == FM_SOLVE_GELSD;
    const int q_qr = rt == FM_SOLVE_GEQRF && sp->qr_mode != 2;
    const int nb = x->batched, lu_blocked = x->blocked && (rt == FM_SOLVE_GESV || rt == FM_SOLVE_GETRS);
    const double parts[14] = {
        x->direct ? 0 : B * (double)(x->mm * x->nn) * es,
        B * (double)((ls ? max64(x->m, x->n) : x->m) * nr) * es, /* lstsq: b, then x */
        x->lowest  ? B * (double)(x->n * sp->nrhs) * es
        : vec_svd  ? B * (double)(x->mm * svd_ucols(x)) * es
        : q_qr     ? B * (double)(x->m * (sp->qr_mode == 1 ? x->m : x->k)) * es
                   : 0,
        vec_svd ? B * (double)(x->nn * x->nn) * es : 0,
        rt == FM_SOLVE_GEQRF ? B * (double)x->k * es : 0,
        B * (double)x->n * 8,
        B * 4,
        32,
        nb ? B * 8 : 0,
        nb ? B * 8 : 0,
        nb ? B * (double)x->n * 4 : 0,
        lu_blocked ? B * (double)x->n * 4 : 0,
        lu_blocked ? B * (double)(x->n * nr) * es : 0,
        ls ? B * (double)(x->k * nr) * es : 0};
    size_t *offs[14] = {&x->off_a, &x->off_b, &x->off_q, &x->off_vt, &x->off_tau, &x->off_piv, &x->off_info,
                        &x->off_flag, &x->off_pa, &x->off_pb, &x->off_p32, &x->off_perm, &x->off_b2, &x->off_c};
    double total = 0;
    for (int i = 0; i < 14; i++)
        total += parts[i] + 256;
    if (total + (double)x->dwork > 0.5 * (double)SIZE_MAX)
        return fm_fail(FM_ERR_TOO_LARGE, WHO ": %s of a batch of %lld %lld x %lld matrices needs a workspace past "
                       "the address space", fm_solve_routine_name(rt), (long long)sp->batch_count, (long long)x->m,
                       (long long)x->n);
    size_t off = 0;
    for (int i = 0; i < 14; i++) {
        *offs[i] = off;
        off += up256((size_t)parts[i]);
    }
    x->off_work = off;
    x->dwork_step = up256(x->dwork ? x->dwork : 1);
    if ((double)x->dwork_step * x->lanes + (double)off > 0.5 * (double)SIZE_MAX)
        return fm_fail(FM_ERR_TOO_LARGE, WHO ": the workspaces of %d streams past the address space", x->lanes);
    x->total = off + x->dwork_step * (size_t)x->lanes;
    return FM_OK;
}

static void cs_destroy(void *impl)
{
    if (impl)
        fm_cs_refine_destroy(impl);
    free(impl);
}

/* describe()'s words for the routine calls a plan makes */
static const char *how_it_runs(const cs_impl *x, int a_h)
{
    const int rt = x->sp->routine;
    if (x->lowest)
        return "cusolverDnIRSXgesv per entry, falling back to the plain solve";
    if (x->batched)
        return fm_cs_batched_name(x);
    if (rt == FM_SOLVE_TRTRS)
        return x->blocked ? "blocked triangular solve per entry: a substitution launch per 64-row tile (32: c128)"
                          : "cublas trsm per entry";
    if (rt == FM_SOLVE_GESDD)
        return a_h ? "Xgesvd of a^H per entry" : "Xgesvd per entry";
    if (rt == FM_SOLVE_GELSD)
        return a_h ? "Xgesvd of a^H per entry, strided-batched gemms for U^H b and V c, gelsd's rank rule"
                   : "Xgesvd per entry, strided-batched gemms for U^H b, the residuals and V c, gelsd's rank rule";
    return x->blocked ? "64-bit cusolverDnX per entry, the triangular solves blocked: a substitution launch per "
                        "64-row tile (32: c128)"
                      : "64-bit cusolverDnX per entry";
}

static fm_status cs_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    cs_state *st = state;
    const fm_solve_params *sp = &p->u.solve;
    const fm_dtype dt = p->t[FM_SOLVE_A].dtype;
    const int device = p->exec_device.id;
    if (device < 0 || device >= MAX_DEV)
        return fm_fail(FM_ERR_NOT_APPLICABLE, WHO ": device %d is past the %d devices it keeps handles for", device,
                       MAX_DEV);
    if (sp->routine == FM_SOLVE_GEQRF && (sp->m > INT32_MAX || sp->n > INT32_MAX))
        return fm_fail(FM_ERR_TOO_LARGE, WHO ": qr of %lld x %lld: cuSOLVER's orgqr takes 32-bit sizes",
                       (long long)sp->m, (long long)sp->n);
    cs_impl *x = calloc(1, sizeof *x);
    if (!x)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, WHO ": out of host memory");
    x->st = st;
    x->p = &out->problem;
    x->sp = &out->problem.u.solve;
    x->device = device;
    x->ti = dt == FM_F32 ? 0 : dt == FM_F64 ? 1 : dt == FM_C64 ? 2 : 3;
    x->es = fm_dtype_size(dt);
    x->rs = x->ti == 0 || x->ti == 2 ? 4 : 8;
    static const cudaDataType dts[4] = {CUDA_R_32F, CUDA_R_64F, CUDA_C_32F, CUDA_C_64F};
    static const cudaDataType rts[4] = {CUDA_R_32F, CUDA_R_64F, CUDA_R_32F, CUDA_R_64F};
    x->dt = dts[x->ti], x->rt = rts[x->ti];
    x->m = sp->m, x->n = sp->n, x->k = sp->m < sp->n ? sp->m : sp->n;
    const int a_h = (sp->routine == FM_SOLVE_GESDD || sp->routine == FM_SOLVE_GELSD) && sp->m < sp->n;
    x->mm = a_h ? sp->n : sp->m, x->nn = a_h ? sp->m : sp->n;
    fm_cs_batched_pick(x, fm_context_settings(ctx));
    fm_cs_refine_pick(x);
    fm_cs_trsm_pick(x);
    fm_cs_lanes_pick(x);
    fm_cs_direct_pick(x);
    dev_state *d = NULL;
    pthread_mutex_lock(&st->lock);
    fm_status s = device_state(st, fm_context_settings(ctx), device, &d);
    if (s == FM_OK && x->lanes > 1)
        s = fm_cs_lanes_make(d, device);
    if (s == FM_OK)
        s = buffer_sizes(x, d);
    if (s == FM_OK)
        s = fm_cs_refine_plan(x, d, fm_context_settings(ctx));
    pthread_mutex_unlock(&st->lock);
    if (s == FM_OK)
        s = layout(x);
    if (s != FM_OK) {
        cs_destroy(x);
        return s;
    }
    out->impl = x;
    out->execute = cs_execute;
    out->destroy_impl = cs_destroy;
    for (int i = 0; i < FM_SOLVE_NSLOTS; i++)
        out->required_align[i] = fm_dtype_size(p->t[i].dtype ? p->t[i].dtype : FM_U8);
    char refined[96] = "";
    if (x->lowest)
        snprintf(refined, sizeof refined, "; refined from %s (%s refinement)", fm_cs_refine_name(x),
                 fm_cs_refine_solver_name(x)); /* (auto never refines: cusolver_refine.c) */
    const int no_sync = sp->check && sp->trusted_factor && sp->routine == FM_SOLVE_GETRS && !sp->check_finite;
    fm_plan_set_describe(out, "solve cuda/cusolver %s %s %lldx%lld nrhs=%lld batch=%lld device=%d (%s%s, "
                         "workspace %zu bytes%s%s)", fm_solve_routine_name(sp->routine), fm_dtype_name(dt),
                         (long long)sp->m, (long long)sp->n, (long long)sp->nrhs, (long long)sp->batch_count, device,
                         how_it_runs(x, a_h), x->direct == FM_CS_DIRECT_ROWS ? "; the factor read in place as its "
                         "transpose" : x->direct ? "; the factor read in place" : "", x->total,
                         no_sync ? "; trusted factor: no synchronisation"
                         : sp->check ? "; check: one synchronisation" : "; info on the device", refined);
    return FM_OK;
}

const fm_backend fm_backend_cusolver_dense = {
    .name = "cusolver",
    .device = FM_DEVICE_CUDA,
    .ops = 1u << FM_OP_SOLVE,
    .priority = 0,
    .probe = cs_probe,
    .release = cs_release,
    .plan = cs_plan,
};
