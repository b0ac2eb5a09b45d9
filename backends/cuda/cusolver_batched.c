/* cusolver_batched.c : the dense solvers' batched routines for many small matrices (at least two
 * entries; n <= 128 for LU and Cholesky (512 for batches of 32 or more); eigh by the table below):
 * cuBLAS getrfBatched / getrsBatched (gesv, getrf, getrs, inv, det, slogdet), cuSOLVER potrfBatched /
 * potrsBatched (potrf; potrs with one right-hand side, potrsBatched's limit), and for eigh
 * syevjBatched / heevjBatched (Jacobi, n <= 32: its eigenvectors are checked by their residual in the
 * tests, not trusted) or the 64-bit XsyevBatched. One call per chunk of at most 32768 entries:
 * cuSOLVER's batched eigensolvers are reported to fail past about 32k; XsyevBatched's chunks also keep
 * n * n * chunk <= INT32_MAX, its documented limit. The operands are the per-entry path's gathered
 * scratch (cusolver_dense.c), the pointer arrays are made on the device by one kernel, the 32-bit
 * pivots of cuBLAS widened into the int64 pivots every other part reads. */
#include "cusolver_dense.h"

#define SMALL_N 128 /* LU, Cholesky: any batch */
#define MID_N 512   /* ... and up to here for batches of MID_BATCH or more: on the H200, 100 x 512 x 512 f32
                     * took 9.5 ms in getrfBatched against 34 ms in Xgetrf on 16 streams (cusolver_lanes.c),
                     * potrfBatched 0.84 ms against 2.9 */
#define MID_BATCH 32
#define SMALL_EIG 32 /* syevjBatched's limit */
#define CHUNK 32768

/* XsyevBatched is in cuSOLVER since CUDA 12.6 update 2 (cuSOLVER 11.7.1); referenced weakly, so the
 * module still loads against an older libcusolver of the same soname, where these are NULL at run time
 * and eigh of a batch takes the per-entry Xsyevd loop (cusolver_lanes.c) as before. */
#if CUSOLVER_VERSION < 11701 /* an older toolkit's header: declared here (the signatures of 11.7.1's), so the
                               * module still builds there and takes the per-entry loop at run time */
cusolverStatus_t cusolverDnXsyevBatched_bufferSize(cusolverDnHandle_t handle, cusolverDnParams_t params,
                                                   cusolverEigMode_t jobz, cublasFillMode_t uplo, int64_t n,
                                                   cudaDataType dataTypeA, const void *A, int64_t lda,
                                                   cudaDataType dataTypeW, const void *W, cudaDataType computeType,
                                                   size_t *workspaceInBytesOnDevice, size_t *workspaceInBytesOnHost,
                                                   int64_t batchSize);
cusolverStatus_t cusolverDnXsyevBatched(cusolverDnHandle_t handle, cusolverDnParams_t params, cusolverEigMode_t jobz,
                                        cublasFillMode_t uplo, int64_t n, cudaDataType dataTypeA, void *A, int64_t lda,
                                        cudaDataType dataTypeW, void *W, cudaDataType computeType, void *bufferOnDevice,
                                        size_t workspaceInBytesOnDevice, void *bufferOnHost,
                                        size_t workspaceInBytesOnHost, int *info, int64_t batchSize);
#endif
#pragma weak cusolverDnXsyevBatched
#pragma weak cusolverDnXsyevBatched_bufferSize

static int have_xsyev(void) { return cusolverDnXsyevBatched != NULL && cusolverDnXsyevBatched_bufferSize != NULL; }

/* eigh of a batch (2+ entries) by n: the one table the planner reads, first row whose max_n >= n.
 * Past the last row: the per-entry Xsyevd (on lanes up to n = 1024). */
static const struct {
    int64_t max_n;
    int routine; /* FM_CS_EIG_* */
} eig_table[] = {
    /* H200 2026-12-03, f32 10000 x 32^2: syevjBatched 3.02 ms, torch 5.63; XsyevBatched there: to be
     * measured (FUSEMATH_SOLVE_EIG_BATCHED=xsyev, benchmarks/solve_gpu.py --routines batched_eigh) */
    {SMALL_EIG, FM_CS_EIG_SYEVJ},
    /* the per-entry Xsyevd on 16 lanes took 1306 ms at 1000 x 128^2 and 295 ms at 100 x 512^2 (torch 1852 /
     * 1336): XsyevBatched runs the whole batch in one call; past 512 not yet measured against the lanes */
    {MID_N, FM_CS_EIG_XSYEV},
};

/* The batched eigensolver for x (FM_CS_EIG_*, FM_CS_EIG_NONE: the per-entry loop). */
static int eig_pick(const cs_impl *x, int forced)
{
    const int64_t n = x->n;
    const int xs_ok = have_xsyev() && n * n <= INT32_MAX;
    switch (forced) {
    case FM_EIG_BATCHED_SYEVJ: return n <= SMALL_EIG ? FM_CS_EIG_SYEVJ : FM_CS_EIG_NONE;
    case FM_EIG_BATCHED_XSYEV: return xs_ok ? FM_CS_EIG_XSYEV : FM_CS_EIG_NONE;
    case FM_EIG_BATCHED_LOOP: return FM_CS_EIG_NONE;
    default: break;
    }
    for (size_t i = 0; i < sizeof eig_table / sizeof eig_table[0]; i++)
        if (n <= eig_table[i].max_n)
            return eig_table[i].routine == FM_CS_EIG_XSYEV && !xs_ok ? FM_CS_EIG_NONE : eig_table[i].routine;
    return FM_CS_EIG_NONE;
}

/* entries per XsyevBatched call: at most CHUNK and n * n * chunk <= INT32_MAX */
static int64_t xsyev_chunk(const cs_impl *x)
{
    const int64_t nn = x->n * x->n > 0 ? x->n * x->n : 1, lim = INT32_MAX / nn;
    const int64_t c = lim < CHUNK ? lim : CHUNK;
    return c < x->sp->batch_count ? c : x->sp->batch_count;
}

void fm_cs_batched_pick(cs_impl *x, const fm_settings *set)
{
    const fm_solve_params *sp = x->sp;
    x->batched = 0, x->eig = FM_CS_EIG_NONE;
    if (sp->routine == FM_SOLVE_SYEVD && sp->batch_count >= 2 && x->n >= 1) {
        x->eig = eig_pick(x, set ? set->solve_eig_batched : FM_EIG_BATCHED_AUTO);
        x->batched = x->eig != FM_CS_EIG_NONE;
        return;
    }
    if (sp->batch_count < 2 || x->n < 1 || x->n > MID_N || (x->n > SMALL_N && sp->batch_count < MID_BATCH))
        return;
    switch (sp->routine) {
    case FM_SOLVE_GESV: case FM_SOLVE_GETRF: case FM_SOLVE_GETRS: case FM_SOLVE_INV: case FM_SOLVE_DET:
    case FM_SOLVE_SLOGDET: case FM_SOLVE_POTRF: x->batched = 1; break;
    case FM_SOLVE_POTRS: x->batched = sp->nrhs == 1; break;
    default: break;
    }
}

static cusolverEigMode_t jobz_of(const fm_solve_params *sp)
{
    return sp->values_only ? CUSOLVER_EIG_MODE_NOVECTOR : CUSOLVER_EIG_MODE_VECTOR;
}

static cublasFillMode_t fill_of(const fm_solve_params *sp)
{
    return sp->uplo ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
}

fm_status fm_cs_batched_sizes(cs_impl *x, const dev_state *d)
{
    const fm_solve_params *sp = x->sp;
    if (!x->batched || sp->routine != FM_SOLVE_SYEVD)
        return FM_OK;
    if (x->eig == FM_CS_EIG_XSYEV) {
        size_t dw = 0, hw = 0;
        cusolverStatus_t e = cusolverDnXsyevBatched_bufferSize(d->sv, d->prm, jobz_of(sp), fill_of(sp), x->n, x->dt,
                                                               NULL, x->n, x->rt, NULL, x->dt, &dw, &hw,
                                                               xsyev_chunk(x));
        x->dwork = dw, x->hwork = hw;
        return fm_cs_sv_status(e, "cusolverDnXsyevBatched_bufferSize");
    }
    const int n = (int)x->n, nb = (int)(sp->batch_count < CHUNK ? sp->batch_count : CHUNK);
    int lw = 0;
    cusolverStatus_t e;
    switch (x->ti) {
    case 0: e = cusolverDnSsyevjBatched_bufferSize(d->sv, jobz_of(sp), fill_of(sp), n, NULL, n, NULL, &lw, d->sj, nb); break;
    case 1: e = cusolverDnDsyevjBatched_bufferSize(d->sv, jobz_of(sp), fill_of(sp), n, NULL, n, NULL, &lw, d->sj, nb); break;
    case 2: e = cusolverDnCheevjBatched_bufferSize(d->sv, jobz_of(sp), fill_of(sp), n, NULL, n, NULL, &lw, d->sj, nb); break;
    default: e = cusolverDnZheevjBatched_bufferSize(d->sv, jobz_of(sp), fill_of(sp), n, NULL, n, NULL, &lw, d->sj, nb);
    }
    x->dwork = (size_t)lw * x->es;
    return fm_cs_sv_status(e, "cusolverDn<t>syevjBatched_bufferSize");
}

static fm_status blas_status(cublasStatus_t e, const char *what)
{
    return e == CUBLAS_STATUS_SUCCESS ? FM_OK : fm_fail(FM_ERR_BACKEND, WHO ": %s failed (cublasStatus %d)", what,
                                                        (int)e);
}

/* out[b] = base + b * step bytes, b < count */
static fm_status pointers(const run_ctx *r, size_t off, void *base, long long step)
{
    void *out = r->ws + off;
    long long count = r->x->sp->batch_count;
    void *args[4] = {&out, &base, &step, &count};
    return fm_cs_launch(r->d->k[0][K_PTRS], "cudaLaunchKernel(fm_sv_ptrs)", count, args, r->stream);
}

static fm_status convert(const run_ctx *r, int kernel, const void *in, void *out, long long count)
{
    void *args[3] = {&in, &out, &count};
    return fm_cs_launch(r->d->k[0][kernel], "cudaLaunchKernel(fm_sv_info / fm_sv_narrow)", count, args, r->stream);
}

static cublasStatus_t getrf(const run_ctx *r, int n, void **a, int *p, int *info, int nb)
{
    switch (r->x->ti) {
    case 0: return cublasSgetrfBatched(r->d->bl, n, (float *const *)a, n, p, info, nb);
    case 1: return cublasDgetrfBatched(r->d->bl, n, (double *const *)a, n, p, info, nb);
    case 2: return cublasCgetrfBatched(r->d->bl, n, (cuComplex *const *)a, n, p, info, nb);
    default: return cublasZgetrfBatched(r->d->bl, n, (cuDoubleComplex *const *)a, n, p, info, nb);
    }
}

static cublasStatus_t getrs(const run_ctx *r, cublasOperation_t op, int n, int k, void **a, const int *p, void **b,
                            int *hinfo, int nb)
{
    switch (r->x->ti) {
    case 0: return cublasSgetrsBatched(r->d->bl, op, n, k, (const float *const *)a, n, p, (float *const *)b, n, hinfo, nb);
    case 1:
        return cublasDgetrsBatched(r->d->bl, op, n, k, (const double *const *)a, n, p, (double *const *)b, n, hinfo,
                                   nb);
    case 2:
        return cublasCgetrsBatched(r->d->bl, op, n, k, (const cuComplex *const *)a, n, p, (cuComplex *const *)b, n,
                                   hinfo, nb);
    default:
        return cublasZgetrsBatched(r->d->bl, op, n, k, (const cuDoubleComplex *const *)a, n, p,
                                   (cuDoubleComplex *const *)b, n, hinfo, nb);
    }
}

/* getrf and potrf of a batch by the library's warp-per-entry kernels (fm_sv_lu32, fm_sv_chol32) up to this n
 * (16 for c128, whose rows would spill past): getrfBatched and potrfBatched were slower than torch there */
static int64_t warp_max(const cs_impl *x) { return x->ti == 3 ? 16 : 32; }

static fm_status run_lu(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const fm_solve_params *sp = x->sp;
    const int n = (int)x->n, rt = sp->routine;
    const int64_t B = sp->batch_count, nr = rt == FM_SOLVE_INV ? x->n : sp->nrhs;
    const int factored = (x->p->present & 1u << FM_SOLVE_IPIV) != 0;
    int *p32 = (int *)(void *)(r->ws + x->off_p32);
    void **pa = (void **)(void *)(r->ws + x->off_pa), **pb = (void **)(void *)(r->ws + x->off_pb);
    void *piv64 = rt == FM_SOLVE_GETRF ? r->ptrs[FM_SOLVE_PIVOTS] : r->ws + x->off_piv;
    fm_status s = blas_status(cublasSetStream(r->d->bl, r->stream), "cublasSetStream");
    if (s == FM_OK)
        s = pointers(r, x->off_pa, r->ws + x->off_a, (long long)((size_t)(x->n * x->n) * x->es));
    if (s == FM_OK && nr > 0)
        s = pointers(r, x->off_pb, r->ws + x->off_b, (long long)((size_t)(x->n * nr) * x->es));
    if (s == FM_OK && factored) /* the given pivots, checked into off_piv by the caller */
        s = convert(r, K_NARROW, r->ws + x->off_piv, p32, B * n);
    if (s == FM_OK && !factored && x->n <= warp_max(x)) {
        void *a = r->ws + x->off_a;
        long long nn = x->n, count = B;
        int *info = r->info;
        void *args[5] = {&a, &nn, &count, &p32, &info};
        s = fm_cs_launch(r->d->k[x->ti][K_LU32], "cudaLaunchKernel(fm_sv_lu32)", B * 32, args, r->stream);
    }
    for (int64_t c0 = 0; s == FM_OK && !factored && x->n > warp_max(x) && c0 < B; c0 += CHUNK)
        s = blas_status(getrf(r, n, pa + c0, p32 + c0 * n, r->info + c0, (int)(B - c0 < CHUNK ? B - c0 : CHUNK)),
                        "cublas<t>getrfBatched");
    if (s == FM_OK && !factored)
        s = convert(r, K_INFO, p32, piv64, B * n);
    const cublasOperation_t op = rt != FM_SOLVE_GETRS ? CUBLAS_OP_N : sp->transpose == 0 ? CUBLAS_OP_N
                                 : sp->transpose == 1 ? CUBLAS_OP_T : CUBLAS_OP_C;
    const int solves = (rt == FM_SOLVE_GESV || rt == FM_SOLVE_GETRS || rt == FM_SOLVE_INV) && nr > 0;
    for (int64_t c0 = 0; s == FM_OK && solves && c0 < B; c0 += CHUNK) {
        int hinfo = 0;
        s = blas_status(getrs(r, op, n, (int)nr, pa + c0, p32 + c0 * n, pb + c0, &hinfo,
                              (int)(B - c0 < CHUNK ? B - c0 : CHUNK)), "cublas<t>getrsBatched");
        if (s == FM_OK && hinfo < 0)
            s = fm_fail(FM_ERR_BACKEND, WHO ": cublas<t>getrsBatched refused argument %d", -hinfo);
    }
    return s;
}


static fm_status run_chol(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const fm_solve_params *sp = x->sp;
    const int n = (int)x->n;
    const int64_t B = sp->batch_count;
    if (sp->routine == FM_SOLVE_POTRF && x->n <= warp_max(x)) {
        void *a = r->ws + x->off_a;
        long long nn = x->n, count = B;
        int upper = sp->uplo != 0;
        int *info = r->info;
        void *args[5] = {&a, &nn, &count, &upper, &info};
        return fm_cs_launch(r->d->k[x->ti][K_CHOL32], "cudaLaunchKernel(fm_sv_chol32)", B * 32, args, r->stream);
    }
    void **pa = (void **)(void *)(r->ws + x->off_pa), **pb = (void **)(void *)(r->ws + x->off_pb);
    fm_status s = pointers(r, x->off_pa, r->ws + x->off_a, (long long)((size_t)(x->n * x->n) * x->es));
    const int potrs = sp->routine == FM_SOLVE_POTRS;
    if (s == FM_OK && potrs)
        s = pointers(r, x->off_pb, r->ws + x->off_b, (long long)((size_t)x->n * x->es));
    const cublasFillMode_t f = fill_of(sp);
    for (int64_t c0 = 0; s == FM_OK && c0 < B; c0 += CHUNK) {
        const int nb = (int)(B - c0 < CHUNK ? B - c0 : CHUNK);
        int *in = r->info + c0;
        void **a = pa + c0, **b = pb + c0;
        cusolverStatus_t e;
        switch (x->ti + 4 * potrs) {
        case 0: e = cusolverDnSpotrfBatched(r->d->sv, f, n, (float **)a, n, in, nb); break;
        case 1: e = cusolverDnDpotrfBatched(r->d->sv, f, n, (double **)a, n, in, nb); break;
        case 2: e = cusolverDnCpotrfBatched(r->d->sv, f, n, (cuComplex **)a, n, in, nb); break;
        case 3: e = cusolverDnZpotrfBatched(r->d->sv, f, n, (cuDoubleComplex **)a, n, in, nb); break;
        case 4: e = cusolverDnSpotrsBatched(r->d->sv, f, n, 1, (float **)a, n, (float **)b, n, r->junk, nb); break;
        case 5: e = cusolverDnDpotrsBatched(r->d->sv, f, n, 1, (double **)a, n, (double **)b, n, r->junk, nb); break;
        case 6:
            e = cusolverDnCpotrsBatched(r->d->sv, f, n, 1, (cuComplex **)a, n, (cuComplex **)b, n, r->junk, nb);
            break;
        default:
            e = cusolverDnZpotrsBatched(r->d->sv, f, n, 1, (cuDoubleComplex **)a, n, (cuDoubleComplex **)b, n,
                                        r->junk, nb);
        }
        s = fm_cs_sv_status(e, potrs ? "cusolverDn<t>potrsBatched" : "cusolverDn<t>potrfBatched");
    }
    return s;
}

static fm_status run_syevj(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const fm_solve_params *sp = x->sp;
    const int n = (int)x->n, lw = (int)(x->dwork / x->es);
    const int64_t B = sp->batch_count;
    fm_status s = FM_OK;
    for (int64_t c0 = 0; s == FM_OK && c0 < B; c0 += CHUNK) {
        const int nb = (int)(B - c0 < CHUNK ? B - c0 : CHUNK);
        void *a = r->ws + x->off_a + (size_t)(c0 * n * n) * x->es, *w = (char *)r->ptrs[FM_SOLVE_W] +
                  (size_t)(c0 * n) * x->rs, *work = r->ws + x->off_work;
        int *in = r->info + c0;
        const cusolverEigMode_t j = jobz_of(sp);
        const cublasFillMode_t f = fill_of(sp);
        cusolverStatus_t e;
        switch (x->ti) {
        case 0: e = cusolverDnSsyevjBatched(r->d->sv, j, f, n, a, n, w, work, lw, in, r->d->sj, nb); break;
        case 1: e = cusolverDnDsyevjBatched(r->d->sv, j, f, n, a, n, w, work, lw, in, r->d->sj, nb); break;
        case 2: e = cusolverDnCheevjBatched(r->d->sv, j, f, n, a, n, w, work, lw, in, r->d->sj, nb); break;
        default: e = cusolverDnZheevjBatched(r->d->sv, j, f, n, a, n, w, work, lw, in, r->d->sj, nb); break;
        }
        s = fm_cs_sv_status(e, "cusolverDn<t>syevjBatched");
    }
    return s;
}

/* XsyevBatched over chunks of xsyev_chunk entries, the eigenvectors in place of the gathered a */
static fm_status run_xsyev(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const fm_solve_params *sp = x->sp;
    const int64_t n = x->n, B = sp->batch_count, chunk = xsyev_chunk(x);
    fm_status s = FM_OK;
    for (int64_t c0 = 0; s == FM_OK && c0 < B; c0 += chunk) {
        const int64_t nb = B - c0 < chunk ? B - c0 : chunk;
        void *a = r->ws + x->off_a + (size_t)(c0 * n * n) * x->es;
        void *w = (char *)r->ptrs[FM_SOLVE_W] + (size_t)(c0 * n) * x->rs;
        s = fm_cs_sv_status(cusolverDnXsyevBatched(r->d->sv, r->d->prm, jobz_of(sp), fill_of(sp), n, x->dt, a, n, x->rt,
                                                   w, x->dt, r->ws + x->off_work, x->dwork, r->hwork, x->hwork,
                                                   r->info + c0, nb), "cusolverDnXsyevBatched");
    }
    return s;
}

const char *fm_cs_batched_name(const cs_impl *x)
{
    switch (x->sp->routine) {
    case FM_SOLVE_SYEVD: return x->eig == FM_CS_EIG_XSYEV ? "batched: XsyevBatched" : "batched: syevjBatched";
    case FM_SOLVE_POTRF:
        return x->n <= warp_max(x) ? "batched: a warp per entry (fm_sv_chol32)" : "batched: potrfBatched";
    case FM_SOLVE_POTRS: return "batched: potrsBatched";
    case FM_SOLVE_GETRS: return "batched: cublas getrsBatched";
    default:
        return x->n <= warp_max(x) ? "batched: getrf a warp per entry (fm_sv_lu32), cublas getrsBatched"
                                   : "batched: cublas getrfBatched / getrsBatched";
    }
}

fm_status fm_cs_batched_run(const run_ctx *r)
{
    switch (r->x->sp->routine) {
    case FM_SOLVE_POTRF: case FM_SOLVE_POTRS: return run_chol(r);
    case FM_SOLVE_SYEVD: return r->x->eig == FM_CS_EIG_XSYEV ? run_xsyev(r) : run_syevj(r);
    default: return run_lu(r);
    }
}
