/* cusolver_lstsq.c : lstsq (FM_SOLVE_GELSD) on CUDA devices, with the results the CPU backend's
 * LAPACK gelsd gives (numpy.linalg.lstsq's). cuSOLVER has no gelsd, so: per entry Xgesvd of the
 * gathered a (of a^H when m < n, as svd does) for U, s and V^H; then over the whole batch at once
 * (strided-batched cuBLAS gemms: the workspace holds the entries contiguously) c = U^H b, for the
 * residuals b - U c where m > n, c's rows divided by s_i or zeroed where s_i <= tol (gelsd's rule;
 * the rank is the count of the others), and x = V c.
 *
 * Residuals: where rank == n < m, a x = U U^H b, so the column sums of squares of b - U (U^H b)
 * are numpy's; elsewhere 0 in the slot (Python trims one system's as NumPy does).
 * Workspace (cusolver_dense.c's layout): a (mm x nn), b (max(m, n) x nrhs per entry: b, then the
 * residuals in place, then x), U' (off_q, mm x k), V'^H (off_vt, k x nn), c (off_c, k x nrhs). */
#include "cuda_workspace.h"
#include "cusolver_dense.h"

static fm_status blas_status(cublasStatus_t e, const char *what)
{
    if (e == CUBLAS_STATUS_SUCCESS)
        return FM_OK;
    if (e == CUBLAS_STATUS_ALLOC_FAILED)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, WHO ": %s: out of GPU memory (CUBLAS_STATUS_ALLOC_FAILED)", what);
    return fm_fail(FM_ERR_BACKEND, WHO ": %s failed (cublasStatus %d)", what, (int)e);
}

/* One operand of a batched gemm: its data, leading dimension and the elements between entries. */
typedef struct {
    void *p;
    int64_t ld, stride;
} operand;

/* Every entry: c = op(a) b (minus: c -= op(a) b), c rows x cols, op(a) rows x inner. */
static fm_status gemm(const run_ctx *r, cublasOperation_t op, int64_t rows, int64_t cols, int64_t inner, operand a,
                      operand b, operand c, int minus)
{
    static const float s[2][2] = {{1.0f, 0.0f}, {-1.0f, 1.0f}}; /* alpha, beta */
    static const double d[2][2] = {{1.0, 0.0}, {-1.0, 1.0}};
    static const cuComplex cc[2][2] = {{{1.0f, 0.0f}, {0.0f, 0.0f}}, {{-1.0f, 0.0f}, {1.0f, 0.0f}}};
    static const cuDoubleComplex z[2][2] = {{{1.0, 0.0}, {0.0, 0.0}}, {{-1.0, 0.0}, {1.0, 0.0}}};
    const cublasOperation_t N = CUBLAS_OP_N;
    const int64_t B = r->x->sp->batch_count;
    const int i = minus ? 1 : 0;
    cublasHandle_t h = r->d->bl;
    void *out = c.p;
    cublasStatus_t e;
    switch (r->x->ti) {
    case 0:
        e = cublasSgemmStridedBatched_64(h, op, N, rows, cols, inner, &s[i][0], a.p, a.ld, a.stride, b.p, b.ld,
                                         b.stride, &s[i][1], out, c.ld, c.stride, B);
        break;
    case 1:
        e = cublasDgemmStridedBatched_64(h, op, N, rows, cols, inner, &d[i][0], a.p, a.ld, a.stride, b.p, b.ld,
                                         b.stride, &d[i][1], out, c.ld, c.stride, B);
        break;
    case 2:
        e = cublasCgemmStridedBatched_64(h, op, N, rows, cols, inner, &cc[i][0], a.p, a.ld, a.stride, b.p, b.ld,
                                         b.stride, &cc[i][1], out, c.ld, c.stride, B);
        break;
    default:
        e = cublasZgemmStridedBatched_64(h, op, N, rows, cols, inner, &z[i][0], a.p, a.ld, a.stride, b.p, b.ld,
                                         b.stride, &z[i][1], out, c.ld, c.stride, B);
        break;
    }
    return blas_status(e, "cublas<t>gemmStridedBatched_64");
}

/* Entries of a with an inf or NaN: flagged (rank -1) and zeroed, so that gesvd sees finite input. */
static fm_status zero_nonfinite(const run_ctx *r, void *a)
{
    const cs_impl *x = r->x;
    long long per = x->mm * x->nn, count = x->sp->batch_count;
    void *rank = r->ptrs[FM_SOLVE_RANK];
    fm_status s = FM_OK;
    for (int phase = 0; phase < 2 && s == FM_OK; phase++) {
        void *args[5] = {&a, &per, &count, &rank, &phase};
        s = fm_cs_launch(r->d->k[x->ti][K_LSQFIN], "cudaLaunchKernel(fm_sv_lsqfin)", per * count, args, r->stream);
    }
    return s;
}

/* gesvd 'S' of every entry's mm x nn a: s into w, U' (mm x k) and V'^H (k x nn) into the workspace. */
static fm_status factor(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const int64_t mm = x->mm, nn = x->nn, k = x->k;
    fm_status s = fm_cs_lanes_fork(r);
    for (int64_t b = 0; b < x->sp->batch_count && s == FM_OK; b++)
        s = fm_cs_sv_status(cusolverDnXgesvd(SV(r, b), r->d->prm, 'S', 'S', mm, nn, x->dt,
                                             WS(r, off_a, b, mm * nn, x->es), mm, x->rt,
                                             (char *)r->ptrs[FM_SOLVE_W] + (size_t)(b * k) * x->rs, x->dt,
                                             WS(r, off_q, b, mm * k, x->es), mm, x->dt,
                                             WS(r, off_vt, b, nn * nn, x->es), k, x->dt, WORK(r, b), x->dwork,
                                             HWORK(r, b), x->hwork, r->info + b), "cusolverDnXgesvd");
    return fm_cs_lanes_join(r, s);
}

/* c's rows scaled by 1/s_i or zeroed, the rank per entry, info 1 for a non-finite entry */
static fm_status scale(const run_ctx *r, void *c)
{
    const cs_impl *x = r->x;
    long long k = x->k, nr = x->sp->nrhs, count = x->sp->batch_count;
    double rcond = x->sp->rcond;
    void *s = r->ptrs[FM_SOLVE_W], *info = r->info, *rank = r->ptrs[FM_SOLVE_RANK];
    void *args[8] = {&c, &s, &k, &nr, &count, &rcond, &info, &rank};
    const int64_t total = count * k * nr;
    return fm_cs_launch(r->d->k[x->ti][K_LSQ], "cudaLaunchKernel(fm_sv_lsq)", total > count ? total : count, args,
                        r->stream);
}

/* the residuals' slot from rb = b - U U^H b (m x nrhs per entry) and the rank */
static fm_status residuals(const run_ctx *r, const void *rb)
{
    const cs_impl *x = r->x;
    long long m = x->m, n = x->n, nr = x->sp->nrhs, count = x->sp->batch_count;
    void *rank = r->ptrs[FM_SOLVE_RANK], *out = r->ptrs[FM_SOLVE_AUX];
    void *args[7] = {&rb, &m, &n, &nr, &count, &rank, &out};
    if (count * nr == 0)
        return FM_OK;
    return fm_cs_launch(r->d->k[x->ti][K_LSQRES], "cudaLaunchKernel(fm_sv_lsqres)", count * nr * 256, args,
                        r->stream);
}

fm_status fm_cs_lstsq_run(const run_ctx *r)
{
    const cs_impl *x = r->x;
    const int64_t m = x->m, n = x->n, k = x->k, mm = x->mm, nn = x->nn, nr = x->sp->nrhs;
    const size_t B = (size_t)x->sp->batch_count;
    char *a = r->ws + x->off_a, *bw = r->ws + x->off_b, *u = r->ws + x->off_q, *vt = r->ws + x->off_vt;
    char *c = r->ws + x->off_c;
    const cublasOperation_t N = CUBLAS_OP_N, H = x->ti >= 2 ? CUBLAS_OP_C : CUBLAS_OP_T;
    const int tall = m >= n; /* a = U' S V'^H; else a^H = U' S V'^H: U = V', V = U' */
    fm_status s = fm_cuda_status(cudaMemsetAsync(r->ptrs[FM_SOLVE_RANK], 0, B * sizeof(int64_t), r->stream),
                                 "cudaMemsetAsync(rank)");
    if (s == FM_OK && k > 0 && (s = zero_nonfinite(r, a)) == FM_OK)
        s = factor(r);
    if (s == FM_OK && cublasSetStream(r->d->bl, r->stream) != CUBLAS_STATUS_SUCCESS)
        s = fm_fail(FM_ERR_BACKEND, WHO ": cublasSetStream failed");
    const operand ou = {u, mm, mm * k}, ov = {vt, k, nn * nn}, oc = {c, k, k * nr}, ob = {bw, m, m * nr};
    const int solve = k > 0 && nr > 0;
    if (s == FM_OK && solve) /* c = U^H b */
        s = tall ? gemm(r, H, k, nr, m, ou, ob, oc, 0) : gemm(r, N, k, nr, m, ov, ob, oc, 0);
    if (s == FM_OK && solve && m > n) /* b - U c (here U = U') */
        s = gemm(r, N, m, nr, k, ou, oc, ob, 1);
    if (s == FM_OK)
        s = scale(r, c);
    if (s == FM_OK)
        s = residuals(r, bw);
    const operand ox = {bw, n, n * nr}; /* x over b's part, the residuals read */
    if (s == FM_OK && solve) /* x = V c */
        s = tall ? gemm(r, H, n, nr, k, ov, oc, ox, 0) : gemm(r, N, n, nr, k, ou, oc, ox, 0);
    if (s != FM_OK)
        return s;
    fm_copy_args v = fm_cs_scratch_view(x, bw, n, nr, n, n * nr);
    if (!solve)
        v.srows = 0; /* an empty a: x = 0 */
    return fm_cs_copy_to(x, r->d, v, r->ptrs[FM_SOLVE_X], FM_SOLVE_X, 0, r->stream);
}
