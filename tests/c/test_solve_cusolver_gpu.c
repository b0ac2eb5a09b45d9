/* test_solve_cusolver_gpu.c : the dense solvers on the GPU (backends/cuda/cusolver_dense.c).
 *  - LAPACK's residual ratios (each below 30), computed on the host in complex double from the GPU's
 *    results: ||A X - B|| / (n ||A|| ||X|| eps) (solve, lu_solve with each transpose, cho_solve,
 *    solve_triangular), ||A A^-1 - I|| / (n ||A|| ||A^-1|| eps), ||L L^H - A|| / (n ||A|| eps),
 *    ||A V - V diag(w)|| / (n ||A|| eps) and ||V^H V - I|| / (n eps), ||Q R - A|| and ||Q^H Q - I||,
 *    ||U S Vt - A||; random, positive definite, graded (cond 1e6, f64 1e12) matrices, n in
 *    {0, 1, 2, 3, 5, 10, 50, 257, 1000}, 2-D and batched, every dtype;
 *  - the CPU backend on the same inputs: det / slogdet / eigenvalues / singular values agree, a
 *    singular matrix fails with the very same message, check = 0 gives the same info array (read
 *    from the device), a NaN input gives the same outcome;
 *  - a batch of 40000 2x2 (solve, cholesky, eigh), check_finite, bad pivots, out of GPU memory
 *    (the context still usable). Every failure prints what differed. */
#define _GNU_SOURCE
#include "check.h"
#define SOLVE_TEST_SEED 777
#include "solve_test_util.h"

#include <complex.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include <cuda_runtime.h>

static fm_context *ctx;
static const fm_dtype dtypes[] = {FM_F32, FM_F64, FM_C64, FM_C128};
enum { RANDOM, SPD, GRADED, SINGULAR, NTYPES };
static const char *const type_names[] = {"random", "spd", "graded", "singular"};


/* ---- operands: host copies, uploaded per call ---- */
typedef struct {
    fm_dtype dt;
    int nd;
    int64_t shape[4];
    void *h;
} arr;

static int64_t numel(const arr *a)
{
    int64_t n = 1;
    for (int i = 0; i < a->nd; i++)
        n *= a->shape[i];
    return n;
}
static arr mk_arr(fm_dtype dt, int nd, int64_t d0, int64_t d1, int64_t d2)
{
    arr a = {dt, nd, {d0, d1, d2, 0}, NULL};
    a.h = calloc((size_t)(numel(&a) > 0 ? numel(&a) : 1), fm_dtype_size(dt));
    return a;
}
/* a batch (0: none) of matrices: rows x cols */
static arr mat_arr(fm_dtype dt, int64_t batch, int64_t rows, int64_t cols)
{
    return batch ? mk_arr(dt, 3, batch, rows, cols) : mk_arr(dt, 2, rows, cols, 0);
}
static arr copy_arr(const arr *a)
{
    arr c = *a;
    c.h = malloc((size_t)(numel(a) > 0 ? numel(a) : 1) * fm_dtype_size(a->dt));
    memcpy(c.h, a->h, (size_t)numel(a) * fm_dtype_size(a->dt));
    return c;
}

/* fm_solve on the device (gpu = 1: inputs uploaded, outputs read back) or on the host. */
static fm_status run(int gpu, const fm_solve_options *o, arr *s[FM_SOLVE_NSLOTS])
{
    fm_tensor t[FM_SOLVE_NSLOTS];
    const fm_tensor *tp[FM_SOLVE_NSLOTS] = {0};
    void *d[FM_SOLVE_NSLOTS] = {0};
    const fm_device dev = {gpu ? FM_DEVICE_CUDA : FM_DEVICE_CPU, 0};
    for (int i = 0; i < FM_SOLVE_NSLOTS; i++) {
        if (!s[i])
            continue;
        const size_t bytes = (size_t)numel(s[i]) * fm_dtype_size(s[i]->dt);
        d[i] = s[i]->h;
        if (gpu) {
            if (cudaMalloc(&d[i], bytes + 256) != cudaSuccess) {
                fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
                abort();
            }
            cudaMemcpy(d[i], s[i]->h, bytes, cudaMemcpyHostToDevice);
        }
        fm_tensor_init(&t[i], d[i], dev, s[i]->dt, s[i]->nd, s[i]->shape, NULL);
        tp[i] = &t[i];
    }
    fm_status st = fm_solve(ctx, tp, o, NULL);
    for (int i = 0; gpu && i < FM_SOLVE_NSLOTS; i++)
        if (s[i]) {
            if (i >= FM_SOLVE_X)
                cudaMemcpy(s[i]->h, d[i], (size_t)numel(s[i]) * fm_dtype_size(s[i]->dt), cudaMemcpyDeviceToHost);
            cudaFree(d[i]);
        }
    if (gpu && cudaDeviceSynchronize() != cudaSuccess) {
        fprintf(stderr, "the device failed after %s\n", fm_op_name(FM_OP_SOLVE));
        abort();
    }
    return st;
}

/* ---- host linear algebra in complex double (entry e of an array of row-major matrices) ---- */
static cplx *cmat(const arr *a, int64_t e, int64_t rows, int64_t cols)
{
    cplx *c = malloc(sizeof(cplx) * (size_t)(rows * cols + 1));
    for (int64_t i = 0; i < rows * cols; i++)
        c[i] = get(a->dt, a->h, e * rows * cols + i);
    return c;
}
static cplx *mul(const cplx *a, const cplx *b, int64_t m, int64_t k, int64_t n, int ha)
{ /* a (m x k; ha: a is k x m and a^H is taken) times b (k x n) */
    cplx *c = calloc((size_t)(m * n + 1), sizeof(cplx));
    for (int64_t i = 0; i < m; i++)
        for (int64_t l = 0; l < k; l++) {
            const cplx v = ha ? conj(a[l * m + i]) : a[i * k + l];
            for (int64_t j = 0; j < n; j++)
                c[i * n + j] += v * b[l * n + j];
        }
    return c;
}
static double norm1(const cplx *a, int64_t rows, int64_t cols)
{
    double best = 0;
    for (int64_t j = 0; j < cols; j++) {
        double s = 0;
        for (int64_t i = 0; i < rows; i++)
            s += cabs(a[i * cols + j]);
        best = fmax(best, s);
    }
    return best;
}
/* ||a - b|| (b NULL: the identity) */
static double dnorm(const cplx *a, const cplx *b, int64_t rows, int64_t cols)
{
    cplx *d = malloc(sizeof(cplx) * (size_t)(rows * cols + 1));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            d[i * cols + j] = a[i * cols + j] - (b ? b[i * cols + j] : i == j ? 1.0 : 0.0);
    const double r = norm1(d, rows, cols);
    free(d);
    return r;
}
static double ratio(double num, double den) { return den > 0 ? num / den : num; }

static void fill_matrix(arr *a, int type, int64_t batch, int64_t n)
{
    const int cx = is_complex(a->dt);
    const double cond = a->dt == FM_F64 || a->dt == FM_C128 ? 1e12 : 1e6;
    for (int64_t e = 0; e < (batch ? batch : 1); e++) {
        cplx *c = malloc(sizeof(cplx) * (size_t)(n * n + 1));
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                c[i * n + j] = urand() + (cx ? I * urand() : 0);
                if (type == GRADED)
                    c[i * n + j] *= pow(cond, -(double)j / (double)(n > 1 ? n - 1 : 1));
                if (type == SINGULAR && i == n / 2)
                    c[i * n + j] = 0;
            }
        if (type == SPD) {
            cplx *s = mul(c, c, n, n, n, 0);
            cplx *h = malloc(sizeof(cplx) * (size_t)(n * n + 1));
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++)
                    h[i * n + j] = conj(c[j * n + i]);
            free(s);
            s = mul(c, h, n, n, n, 0); /* c c^H + n I */
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++)
                    c[i * n + j] = i == j ? creal(s[i * n + j]) + (double)n : s[i * n + j];
            free(s), free(h);
        }
        for (int64_t i = 0; i < n * n; i++)
            set(a->dt, a->h, e * n * n + i, c[i]);
        free(c);
    }
}
static void fill_random(arr *a)
{
    for (int64_t i = 0; i < numel(a); i++)
        set(a->dt, a->h, i, urand() + (is_complex(a->dt) ? I * urand() : 0));
}
static void free_arr(arr *a) { free(a->h); }

static fm_solve_options opts(int routine)
{
    fm_solve_options o;
    fm_solve_options_init(&o);
    o.routine = routine;
    return o;
}

/* ---- solve, lu_factor / lu_solve, inv: residuals, CPU and GPU outcome equal ---- */
static void check_lu(fm_dtype dt, int type, int64_t n, int64_t batch)
{
    const int64_t k = 3, nb = batch ? batch : 1;
    const double eps = eps_of(dt);
    arr a = mat_arr(dt, batch, n, n), b = mat_arr(dt, batch, n, k), x = mat_arr(dt, batch, n, k);
    fill_matrix(&a, type, batch, n);
    fill_random(&b);
    fm_solve_options o = opts(FM_SOLVE_GESV);
    arr *s[FM_SOLVE_NSLOTS] = {&a, &b, NULL, &x};
    const fm_status gs = run(1, &o, s);
    char gmsg[512];
    snprintf(gmsg, sizeof gmsg, "%s", fm_last_error());
    arr xc = copy_arr(&x);
    arr *sc[FM_SOLVE_NSLOTS] = {&a, &b, NULL, &xc};
    const fm_status cs = run(0, &o, sc);
    /* A singular matrix fails on both; which zero pivot each names depends on its pivoting order
     * (measured on the H200: cuSOLVER's getrf meets a zero row's pivot last, OpenBLAS's recursive
     * getrf earlier), so the messages agree up to the pivot named. */
    const int both_singular = gs == FM_ERR_LINALG && cs == FM_ERR_LINALG && strstr(gmsg, "is singular: U[") &&
                              strstr(fm_last_error(), "is singular: U[");
    CHECK_MSG(gs == cs && (gs == FM_OK || !strcmp(gmsg, fm_last_error()) || both_singular),
              "solve %s %s n=%lld batch %lld: gpu %s \"%s\", cpu %s \"%s\"", fm_dtype_name(dt), type_names[type],
              (long long)n, (long long)batch, fm_status_name(gs), gmsg, fm_status_name(cs), fm_last_error());
    if (type == SINGULAR && n > 0) { /* check = 0: the info arrays, read from the device */
        CHECK_MSG(gs == FM_ERR_LINALG, "solve of a singular %s n=%lld: %s", fm_dtype_name(dt), (long long)n,
                  fm_status_name(gs));
        o.check = 0;
        arr info = batch ? mk_arr(FM_I64, 1, batch, 0, 0) : mk_arr(FM_I64, 0, 0, 0, 0), ic = copy_arr(&info);
        arr *s0[FM_SOLVE_NSLOTS] = {&a, &b, NULL, &x, NULL, NULL, &info}, *s1[FM_SOLVE_NSLOTS] = {&a, &b, NULL, &xc,
                                                                                                   NULL, NULL, &ic};
        CHECK_OK(run(1, &o, s0));
        CHECK_OK(run(0, &o, s1));
        for (int64_t e = 0; e < nb; e++)
            CHECK_MSG(((int64_t *)info.h)[e] > 0 && ((int64_t *)info.h)[e] <= n && ((int64_t *)ic.h)[e] > 0,
                      "singular %s n=%lld entry %lld: gpu info %lld, cpu info %lld", fm_dtype_name(dt), (long long)n,
                      (long long)e, (long long)((int64_t *)info.h)[e], (long long)((int64_t *)ic.h)[e]);
        free_arr(&info), free_arr(&ic), free_arr(&a), free_arr(&b), free_arr(&x), free_arr(&xc);
        return;
    }
    for (int64_t e = 0; e < nb && gs == FM_OK; e++) {
        cplx *A = cmat(&a, e, n, n), *X = cmat(&x, e, n, k), *B = cmat(&b, e, n, k), *AX = mul(A, X, n, n, k, 0);
        const double r = ratio(dnorm(AX, B, n, k), (double)n * norm1(A, n, n) * norm1(X, n, k) * eps);
        CHECK_MSG(r < 30, "solve %s %s n=%lld batch %lld entry %lld: ratio %g", fm_dtype_name(dt), type_names[type],
                  (long long)n, (long long)batch, (long long)e, r);
        cplx *XC = cmat(&xc, e, n, k);
        const double rc = ratio(dnorm(X, XC, n, k), norm1(XC, n, k));
        CHECK_MSG(type == GRADED || rc <= 1e3 * (double)(n > 1 ? n : 1) * eps, "solve %s %s n=%lld: gpu and cpu differ by %g (relative)",
                  fm_dtype_name(dt), type_names[type], (long long)n, rc);
        free(A), free(X), free(B), free(AX), free(XC);
    }
    free_arr(&a), free_arr(&b), free_arr(&x), free_arr(&xc);
}

static void test_solve(void)
{
    static const int64_t sizes[] = {0, 1, 2, 3, 5, 10, 50, 257, 1000};
    for (int d = 0; d < 4; d++)
        for (int type = 0; type < NTYPES; type++)
            for (int s = 0; s < 9; s++) {
                if (sizes[s] == 1000 && (type != RANDOM || d != 1))
                    continue;
                check_lu(dtypes[d], type, sizes[s], 0);
                if (sizes[s] <= 50)
                    check_lu(dtypes[d], type, sizes[s], 3);
            }
}

/* gesv with iterative refinement (every refine choice, every dtype): as accurate as the plain solve */
static void test_refine(void)
{
    static const int64_t sizes[] = {1, 10, 257, 1000};
    for (int d = 0; d < 4; d++)
        for (int si = 0; si < 4; si++)
            for (int rf = FM_SOLVE_REFINE_AUTO; rf <= FM_SOLVE_REFINE_FP16; rf++) {
                const fm_dtype dt = dtypes[d];
                const int64_t n = sizes[si], k = 2;
                if (n == 1000 && dt != FM_F64)
                    continue;
                arr a = mat_arr(dt, 0, n, n), b = mat_arr(dt, 0, n, k), x = mat_arr(dt, 0, n, k);
                fill_matrix(&a, SPD, 0, n);
                fill_random(&b);
                fm_solve_options o = opts(FM_SOLVE_GESV);
                o.refine = rf;
                arr *s[FM_SOLVE_NSLOTS] = {&a, &b, NULL, &x};
                CHECK_OK(run(1, &o, s));
                cplx *A = cmat(&a, 0, n, n), *X = cmat(&x, 0, n, k), *B = cmat(&b, 0, n, k), *AX = mul(A, X, n, n, k, 0);
                const double r = ratio(dnorm(AX, B, n, k), (double)n * norm1(A, n, n) * norm1(X, n, k) * eps_of(dt));
                CHECK_MSG(r < 30, "solve refine=%d %s n=%lld: ratio %g", rf, fm_dtype_name(dt), (long long)n, r);
                free(A), free(X), free(B), free(AX);
                free_arr(&a), free_arr(&b), free_arr(&x);
            }
}

/* lu_factor then lu_solve (each transpose) and det / slogdet of the factor; inv */
static void test_lu_factor_inv_det(void)
{
    static const int64_t sizes[] = {1, 2, 5, 10, 50, 257};
    for (int d = 0; d < 4; d++)
        for (int si = 0; si < 6; si++) {
            const fm_dtype dt = dtypes[d];
            const int64_t n = sizes[si], k = 2, B = 2;
            const double eps = eps_of(dt);
            arr a = mat_arr(dt, B, n, n), f = mat_arr(dt, B, n, n), piv = mk_arr(FM_I64, 2, B, n, 0);
            fill_matrix(&a, RANDOM, B, n);
            fm_solve_options o = opts(FM_SOLVE_GETRF);
            arr *s[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, NULL, &f, &piv};
            CHECK_OK(run(1, &o, s));
            for (int tr = 0; tr < 3; tr++) {
                arr b = mat_arr(dt, B, n, k), x = mat_arr(dt, B, n, k);
                fill_random(&b);
                o = opts(FM_SOLVE_GETRS);
                o.transpose = tr;
                arr *s2[FM_SOLVE_NSLOTS] = {&f, &b, &piv, &x};
                CHECK_OK(run(1, &o, s2));
                for (int64_t e = 0; e < B; e++) {
                    cplx *A = cmat(&a, e, n, n), *X = cmat(&x, e, n, k), *Bm = cmat(&b, e, n, k);
                    cplx *At = malloc(sizeof(cplx) * (size_t)(n * n));
                    for (int64_t i = 0; i < n; i++)
                        for (int64_t j = 0; j < n; j++)
                            At[i * n + j] = tr == 0 ? A[i * n + j] : tr == 1 ? A[j * n + i] : conj(A[j * n + i]);
                    cplx *AX = mul(At, X, n, n, k, 0);
                    const double r = ratio(dnorm(AX, Bm, n, k), (double)n * norm1(A, n, n) * norm1(X, n, k) * eps);
                    CHECK_MSG(r < 30, "lu_solve %s n=%lld transpose %d entry %lld: ratio %g", fm_dtype_name(dt),
                              (long long)n, tr, (long long)e, r);
                    free(A), free(X), free(Bm), free(At), free(AX);
                }
                free_arr(&b), free_arr(&x);
            }
            /* inv */
            arr inv = mat_arr(dt, B, n, n);
            o = opts(FM_SOLVE_INV);
            arr *s3[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, &inv};
            CHECK_OK(run(1, &o, s3));
            for (int64_t e = 0; e < B; e++) {
                cplx *A = cmat(&a, e, n, n), *V = cmat(&inv, e, n, n), *AV = mul(A, V, n, n, n, 0);
                const double r = ratio(dnorm(AV, NULL, n, n), (double)n * norm1(A, n, n) * norm1(V, n, n) * eps);
                CHECK_MSG(r < 30, "inv %s n=%lld entry %lld: ratio %g", fm_dtype_name(dt), (long long)n, (long long)e,
                          r);
                free(A), free(V), free(AV);
            }
            /* det / slogdet: of a (fresh) and of the factor (ipiv given), gpu against cpu */
            for (int given = 0; given < 2; given++) {
                arr w = mk_arr(dt, 1, B, 0, 0), wc = copy_arr(&w), sg = mk_arr(dt, 1, B, 0, 0), sgc = copy_arr(&sg);
                arr lg = mk_arr(real_of(dt), 1, B, 0, 0), lgc = copy_arr(&lg);
                o = opts(FM_SOLVE_SLOGDET);
                arr *g[FM_SOLVE_NSLOTS] = {given ? &f : &a, NULL, given ? &piv : NULL, NULL, NULL, NULL, NULL, &lg, &sg};
                arr *c[FM_SOLVE_NSLOTS] = {given ? &f : &a, NULL, given ? &piv : NULL, NULL, NULL, NULL, NULL, &lgc,
                                           &sgc};
                CHECK_OK(run(1, &o, g));
                CHECK_OK(run(0, &o, c));
                o = opts(FM_SOLVE_DET);
                arr *g2[FM_SOLVE_NSLOTS] = {given ? &f : &a, NULL, given ? &piv : NULL, NULL, NULL, NULL, NULL, &w};
                arr *c2[FM_SOLVE_NSLOTS] = {given ? &f : &a, NULL, given ? &piv : NULL, NULL, NULL, NULL, NULL, &wc};
                CHECK_OK(run(1, &o, g2));
                CHECK_OK(run(0, &o, c2));
                for (int64_t e = 0; e < B; e++) {
                    const double l1 = creal(get(real_of(dt), lg.h, e)), l2 = creal(get(real_of(dt), lgc.h, e));
                    const cplx s1 = get(dt, sg.h, e), s2 = get(dt, sgc.h, e);
                    const cplx d1 = get(dt, w.h, e), d2 = get(dt, wc.h, e);
                    CHECK_MSG(fabs(l1 - l2) <= 1e3 * n * eps * fmax(1, fabs(l2)) && cabs(s1 - s2) < 1e3 * n * eps,
                              "slogdet %s n=%lld entry %lld (factor given %d): gpu (%g%+gi, %g), cpu (%g%+gi, %g)",
                              fm_dtype_name(dt), (long long)n, (long long)e, given, creal(s1), cimag(s1), l1,
                              creal(s2), cimag(s2), l2);
                    CHECK_MSG(cabs(d1 - d2) <= 1e3 * n * eps * cabs(d2) || (isinf(cabs(d2)) && isinf(cabs(d1))),
                              "det %s n=%lld entry %lld: gpu %g%+gi, cpu %g%+gi", fm_dtype_name(dt), (long long)n,
                              (long long)e, creal(d1), cimag(d1), creal(d2), cimag(d2));
                }
                free_arr(&w), free_arr(&wc), free_arr(&sg), free_arr(&sgc), free_arr(&lg), free_arr(&lgc);
            }
            free_arr(&a), free_arr(&f), free_arr(&piv), free_arr(&inv);
        }
}

/* cholesky (each triangle), cho_solve with it, solve_triangular with it (each transpose) */
static void test_cholesky_triangular(void)
{
    static const int64_t sizes[] = {0, 1, 2, 3, 5, 10, 50, 257, 1000};
    for (int d = 0; d < 4; d++)
        for (int si = 0; si < 9; si++)
            for (int up = 0; up < 2; up++) {
                const fm_dtype dt = dtypes[d];
                const int64_t n = sizes[si], B = n <= 50 ? 3 : 0, nb = B ? B : 1, k = 2;
                if (n == 1000 && (d != 1 || up))
                    continue;
                const double eps = eps_of(dt);
                arr a = mat_arr(dt, B, n, n), l = mat_arr(dt, B, n, n), b = mat_arr(dt, B, n, k);
                arr x = mat_arr(dt, B, n, k);
                fill_matrix(&a, SPD, B, n);
                fill_random(&b);
                fm_solve_options o = opts(FM_SOLVE_POTRF);
                o.uplo = up;
                arr *s[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, NULL, &l};
                CHECK_OK(run(1, &o, s));
                o.routine = FM_SOLVE_POTRS;
                arr *s2[FM_SOLVE_NSLOTS] = {&l, &b, NULL, &x};
                CHECK_OK(run(1, &o, s2));
                for (int64_t e = 0; e < nb; e++) {
                    cplx *A = cmat(&a, e, n, n), *L = cmat(&l, e, n, n), *X = cmat(&x, e, n, k),
                         *Bm = cmat(&b, e, n, k);
                    int zeros = 1;
                    for (int64_t i = 0; i < n; i++)
                        for (int64_t j = 0; j < n; j++)
                            zeros &= (up ? i > j : j > i) ? L[i * n + j] == 0 : 1;
                    CHECK_MSG(zeros, "cholesky %s n=%lld upper %d: the other triangle is not zero", fm_dtype_name(dt),
                              (long long)n, up);
                    /* lower: L L^H; upper: U^H U */
                    cplx *LL;
                    if (up) {
                        LL = mul(L, L, n, n, n, 1);
                    } else {
                        cplx *H = malloc(sizeof(cplx) * (size_t)(n * n + 1));
                        for (int64_t i = 0; i < n; i++)
                            for (int64_t j = 0; j < n; j++)
                                H[i * n + j] = conj(L[j * n + i]);
                        LL = mul(L, H, n, n, n, 0);
                        free(H);
                    }
                    const double r = ratio(dnorm(LL, A, n, n), (double)n * norm1(A, n, n) * eps);
                    CHECK_MSG(r < 30, "cholesky %s n=%lld upper %d entry %lld: ratio %g", fm_dtype_name(dt),
                              (long long)n, up, (long long)e, r);
                    cplx *AX = mul(A, X, n, n, k, 0);
                    const double r2 = ratio(dnorm(AX, Bm, n, k), (double)n * norm1(A, n, n) * norm1(X, n, k) * eps);
                    CHECK_MSG(r2 < 30, "cho_solve %s n=%lld upper %d entry %lld: ratio %g", fm_dtype_name(dt),
                              (long long)n, up, (long long)e, r2);
                    free(A), free(L), free(X), free(Bm), free(LL), free(AX);
                }
                for (int tr = 0; tr < 3 && n <= 257; tr++) {
                    o = opts(FM_SOLVE_TRTRS);
                    o.uplo = up, o.transpose = tr;
                    CHECK_OK(run(1, &o, s2));
                    for (int64_t e = 0; e < nb; e++) {
                        cplx *L = cmat(&l, e, n, n), *X = cmat(&x, e, n, k), *Bm = cmat(&b, e, n, k);
                        cplx *T = malloc(sizeof(cplx) * (size_t)(n * n + 1));
                        for (int64_t i = 0; i < n; i++)
                            for (int64_t j = 0; j < n; j++)
                                T[i * n + j] = tr == 0 ? L[i * n + j] : tr == 1 ? L[j * n + i] : conj(L[j * n + i]);
                        cplx *TX = mul(T, X, n, n, k, 0);
                        const double r = ratio(dnorm(TX, Bm, n, k), (double)n * norm1(L, n, n) * norm1(X, n, k) * eps);
                        CHECK_MSG(r < 30, "solve_triangular %s n=%lld upper %d transpose %d entry %lld: ratio %g",
                                  fm_dtype_name(dt), (long long)n, up, tr, (long long)e, r);
                        free(L), free(X), free(Bm), free(T), free(TX);
                    }
                }
                free_arr(&a), free_arr(&l), free_arr(&b), free_arr(&x);
            }
}

/* eigh: residual, orthogonality, eigenvalues against the cpu's */
static void check_eigh(fm_dtype dt, int64_t n, int64_t B, int up)
{
    const int64_t nb = B ? B : 1;
    const double eps = eps_of(dt);
    arr a = mat_arr(dt, B, n, n), v = mat_arr(dt, B, n, n), w = B ? mk_arr(real_of(dt), 2, B, n, 0)
                                                                  : mk_arr(real_of(dt), 1, n, 0, 0);
    arr wc = copy_arr(&w), vc = copy_arr(&v);
    fill_matrix(&a, SPD, B, n);
    for (int64_t e = 0; e < nb; e++) /* indefinite: shift by n */
        for (int64_t i = 0; i < n; i++)
            set(dt, a.h, e * n * n + i * n + i, get(dt, a.h, e * n * n + i * n + i) - 1.5 * (double)n);
    fm_solve_options o = opts(FM_SOLVE_SYEVD);
    o.uplo = up;
    arr *s[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, &v, NULL, NULL, NULL, &w};
    arr *sc[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, &vc, NULL, NULL, NULL, &wc};
    CHECK_OK(run(1, &o, s));
    CHECK_OK(run(0, &o, sc));
    for (int64_t e = 0; e < nb; e++) {
        cplx *A = cmat(&a, e, n, n), *V = cmat(&v, e, n, n), *AV = mul(A, V, n, n, n, 0), *VV = mul(V, V, n, n, n, 1);
        double wmax = 0, wdiff = 0;
        for (int64_t i = 0; i < n; i++) {
            const double wi = creal(get(real_of(dt), w.h, e * n + i)), wci = creal(get(real_of(dt), wc.h, e * n + i));
            for (int64_t j = 0; j < n; j++)
                AV[j * n + i] -= V[j * n + i] * wi;
            wmax = fmax(wmax, fabs(wci)), wdiff = fmax(wdiff, fabs(wi - wci));
        }
        const double na = norm1(A, n, n);
        const double r1 = ratio(norm1(AV, n, n), (double)n * na * eps), r2 = ratio(dnorm(VV, NULL, n, n), n * eps);
        CHECK_MSG(r1 < 30 && r2 < 30, "eigh %s n=%lld batch %lld upper %d entry %lld: ||AV - VW|| ratio %g, ||V^H V - I|| "
                  "ratio %g", fm_dtype_name(dt), (long long)n, (long long)B, up, (long long)e, r1, r2);
        CHECK_MSG(wdiff <= 30 * n * eps * fmax(wmax, 1e-300), "eigh %s n=%lld: eigenvalues differ from the cpu's by "
                  "%g (largest %g)", fm_dtype_name(dt), (long long)n, wdiff, wmax);
        free(A), free(V), free(AV), free(VV);
    }
    free_arr(&a), free_arr(&v), free_arr(&w), free_arr(&wc), free_arr(&vc);
}

static void test_eigh(void)
{
    static const int64_t sizes[] = {0, 1, 2, 3, 5, 10, 50, 257};
    for (int d = 0; d < 4; d++)
        for (int si = 0; si < 8; si++) {
            check_eigh(dtypes[d], sizes[si], 0, 0);
            if (sizes[si] <= 50)
                check_eigh(dtypes[d], sizes[si], 3, 1);
        }
}

/* qr (reduced, complete, r) and svd (reduced, full, values) of m x n, tall and wide */
static void check_qr_svd(fm_dtype dt, int64_t m, int64_t n, int64_t B)
{
    const int64_t k = m < n ? m : n, nb = B ? B : 1, big = m > n ? m : n;
    const double eps = eps_of(dt);
    arr a = mat_arr(dt, B, m, n);
    fill_random(&a);
    for (int mode = 0; mode < 3; mode++) {
        const int64_t qc = mode == 1 ? m : k;
        arr q = mat_arr(dt, B, m, qc), r = mat_arr(dt, B, qc, n);
        fm_solve_options o = opts(FM_SOLVE_GEQRF);
        o.qr_mode = mode;
        arr *s[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, mode == 2 ? NULL : &q, &r};
        CHECK_OK(run(1, &o, s));
        arr rc = copy_arr(&r), qq = copy_arr(&q);
        arr *sc[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, mode == 2 ? NULL : &qq, &rc};
        CHECK_OK(run(0, &o, sc));
        for (int64_t e = 0; e < nb; e++) {
            cplx *A = cmat(&a, e, m, n), *R = cmat(&r, e, qc, n), *RC = cmat(&rc, e, qc, n);
            int tri = 1;
            for (int64_t i = 0; i < qc; i++)
                for (int64_t j = 0; j < i && j < n; j++)
                    tri &= R[i * n + j] == 0;
            CHECK_MSG(tri, "qr %s %lldx%lld mode %d: R is not upper triangular", fm_dtype_name(dt), (long long)m,
                      (long long)n, mode);
            if (mode != 2) {
                cplx *Q = cmat(&q, e, m, qc), *QR = mul(Q, R, m, qc, n, 0), *QQ = mul(Q, Q, qc, m, qc, 1);
                const double r1 = ratio(dnorm(QR, A, m, n), (double)big * norm1(A, m, n) * eps);
                const double r2 = ratio(dnorm(QQ, NULL, qc, qc), (double)(m ? m : 1) * eps);
                CHECK_MSG(r1 < 30 && r2 < 30, "qr %s %lldx%lld batch %lld mode %d entry %lld: ||QR - A|| ratio %g, "
                          "||Q^H Q - I|| ratio %g", fm_dtype_name(dt), (long long)m, (long long)n, (long long)B, mode,
                          (long long)e, r1, r2);
                free(Q), free(QR), free(QQ);
            } else { /* R alone: |R| row by row equals the cpu's up to the reflectors' signs: R^H R = A^H A */
                cplx *RR = mul(R, R, n, qc, n, 1), *RRc = mul(RC, RC, n, qc, n, 1);
                const double r = ratio(dnorm(RR, RRc, n, n), (double)big * norm1(RRc, n, n) * eps);
                CHECK_MSG(r < 30, "qr r %s %lldx%lld: R^H R differs from the cpu's, ratio %g", fm_dtype_name(dt),
                          (long long)m, (long long)n, r);
                free(RR), free(RRc);
            }
            free(A), free(R), free(RC);
        }
        free_arr(&q), free_arr(&r), free_arr(&rc), free_arr(&qq);
    }
    for (int full = 0; full < 3; full++) { /* 0 reduced, 1 full, 2 values only */
        const int64_t uc = full == 1 ? m : k, vr = full == 1 ? n : k;
        arr u = mat_arr(dt, B, m, uc), vt = mat_arr(dt, B, vr, n);
        arr w = B ? mk_arr(real_of(dt), 2, B, k, 0) : mk_arr(real_of(dt), 1, k, 0, 0), wc = copy_arr(&w);
        fm_solve_options o = opts(FM_SOLVE_GESDD);
        o.full_matrices = full == 1, o.values_only = full == 2;
        arr *s[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, full == 2 ? NULL : &u, full == 2 ? NULL : &vt, NULL, NULL, &w};
        CHECK_OK(run(1, &o, s));
        o.full_matrices = 0, o.values_only = 1;
        arr *sc[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, NULL, NULL, NULL, NULL, &wc};
        CHECK_OK(run(0, &o, sc));
        for (int64_t e = 0; e < nb; e++) {
            double wd = 0, w0 = 0;
            for (int64_t i = 0; i < k; i++) {
                const double g = creal(get(real_of(dt), w.h, e * k + i)), c = creal(get(real_of(dt), wc.h, e * k + i));
                wd = fmax(wd, fabs(g - c)), w0 = fmax(w0, fabs(c));
                CHECK_MSG(i == 0 || g <= creal(get(real_of(dt), w.h, e * k + i - 1)), "svd %s: singular values not "
                          "descending", fm_dtype_name(dt));
            }
            CHECK_MSG(wd <= 30 * big * eps * fmax(w0, 1e-300), "svd %s %lldx%lld: singular values differ from the "
                      "cpu's by %g (largest %g)", fm_dtype_name(dt), (long long)m, (long long)n, wd, w0);
            if (full == 2)
                continue;
            cplx *A = cmat(&a, e, m, n), *U = cmat(&u, e, m, uc), *V = cmat(&vt, e, vr, n);
            cplx *US = malloc(sizeof(cplx) * (size_t)(m * vr + 1));
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < vr; j++)
                    US[i * vr + j] = j < uc && j < k ? U[i * uc + j] * creal(get(real_of(dt), w.h, e * k + j)) : 0;
            cplx *USV = mul(US, V, m, vr, n, 0), *UU = mul(U, U, uc, m, uc, 1);
            cplx *VH = malloc(sizeof(cplx) * (size_t)(n * vr + 1));
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < vr; j++)
                    VH[i * vr + j] = conj(V[j * n + i]);
            cplx *VV = mul(VH, VH, vr, n, vr, 1);
            const double r1 = ratio(dnorm(USV, A, m, n), (double)big * norm1(A, m, n) * eps);
            const double r2 = ratio(dnorm(UU, NULL, uc, uc), big * eps), r3 = ratio(dnorm(VV, NULL, vr, vr), big * eps);
            CHECK_MSG(r1 < 30 && r2 < 30 && r3 < 30, "svd %s %lldx%lld batch %lld full %d entry %lld: ||U S Vt - A|| "
                      "ratio %g, ||U^H U - I|| %g, ||Vt Vt^H - I|| %g", fm_dtype_name(dt), (long long)m, (long long)n,
                      (long long)B, full, (long long)e, r1, r2, r3);
            free(A), free(U), free(V), free(US), free(USV), free(UU), free(VH), free(VV);
        }
        free_arr(&u), free_arr(&vt), free_arr(&w), free_arr(&wc);
    }
    free_arr(&a);
}

static void test_qr_svd(void)
{
    static const int64_t shapes[][2] = {{0, 0}, {1, 1}, {3, 0}, {2, 2}, {5, 3}, {3, 5}, {10, 10}, {50, 20},
                                        {20, 50}, {257, 257}};
    for (int d = 0; d < 4; d++)
        for (int i = 0; i < 10; i++) {
            check_qr_svd(dtypes[d], shapes[i][0], shapes[i][1], 0);
            if (shapes[i][0] <= 50)
                check_qr_svd(dtypes[d], shapes[i][0], shapes[i][1], 2);
        }
}

/* Reduced SVD of 200000 x 3 and 3 x 200000: U's scratch is m x 3 (it was m x m: 320 GB, out of
 * memory); ||U S Vt - A|| and the orthogonality of U / Vt as in check_qr_svd. */
static void test_svd_tall_reduced(void)
{
    const fm_dtype dt = FM_F64;
    const double eps = eps_of(dt);
    for (int wide = 0; wide < 2; wide++) {
        const int64_t m = wide ? 3 : 200000, n = wide ? 200000 : 3, k = 3, big = 200000;
        arr a = mat_arr(dt, 0, m, n), u = mat_arr(dt, 0, m, k), vt = mat_arr(dt, 0, k, n), w = mk_arr(dt, 1, k, 0, 0);
        fill_random(&a);
        fm_solve_options o = opts(FM_SOLVE_GESDD);
        arr *s[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, &u, &vt, NULL, NULL, &w};
        CHECK_OK(run(1, &o, s));
        cplx *A = cmat(&a, 0, m, n), *U = cmat(&u, 0, m, k), *V = cmat(&vt, 0, k, n);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < k; j++)
                U[i * k + j] *= creal(get(dt, w.h, j)); /* U S */
        cplx *USV = mul(U, V, m, k, n, 0), *VV = malloc(sizeof(cplx) * (size_t)(k * k));
        for (int64_t i = 0; i < k; i++) /* Vt Vt^H */
            for (int64_t j = 0; j < k; j++) {
                cplx acc = 0;
                for (int64_t l = 0; l < n; l++)
                    acc += V[i * n + l] * conj(V[j * n + l]);
                VV[i * k + j] = acc;
            }
        free(U);
        U = cmat(&u, 0, m, k);
        cplx *UU = mul(U, U, k, m, k, 1);
        const double r1 = ratio(dnorm(USV, A, m, n), (double)big * norm1(A, m, n) * eps);
        const double r2 = ratio(dnorm(UU, NULL, k, k), big * eps), r3 = ratio(dnorm(VV, NULL, k, k), big * eps);
        CHECK_MSG(r1 < 30 && r2 < 30 && r3 < 30, "reduced svd %lldx%lld: ||U S Vt - A|| ratio %g, ||U^H U - I|| %g, "
                  "||Vt Vt^H - I|| %g", (long long)m, (long long)n, r1, r2, r3);
        free(A), free(U), free(V), free(USV), free(VV), free(UU);
        free_arr(&a), free_arr(&u), free_arr(&vt), free_arr(&w);
    }
}

/* 40000 2x2 (past cuSOLVER's reported ~32k batch limit of its batched eigensolvers) */
static void test_big_batch(void)
{
    const int64_t B = 40000, n = 2;
    for (int d = 0; d < 4; d += 1) {
        const fm_dtype dt = dtypes[d];
        const double eps = eps_of(dt);
        arr a = mat_arr(dt, B, n, n), b = mat_arr(dt, B, n, 1), x = mat_arr(dt, B, n, 1), l = mat_arr(dt, B, n, n);
        fill_matrix(&a, SPD, B, n);
        fill_random(&b);
        fm_solve_options o = opts(FM_SOLVE_GESV);
        arr *s[FM_SOLVE_NSLOTS] = {&a, &b, NULL, &x};
        CHECK_OK(run(1, &o, s));
        o.routine = FM_SOLVE_POTRF;
        arr *s2[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, NULL, &l};
        CHECK_OK(run(1, &o, s2));
        arr x2 = mat_arr(dt, B, n, 1); /* cho_solve with one right-hand side: potrsBatched */
        o.routine = FM_SOLVE_POTRS;
        arr *s3[FM_SOLVE_NSLOTS] = {&l, &b, NULL, &x2};
        CHECK_OK(run(1, &o, s3));
        int bad = 0;
        for (int64_t e = 0; e < B && bad < 3; e++) {
            cplx *A = cmat(&a, e, n, n), *X = cmat(&x2, e, n, 1), *Bm = cmat(&b, e, n, 1), *AX = mul(A, X, n, n, 1, 0);
            const double r = ratio(dnorm(AX, Bm, n, 1), n * norm1(A, n, n) * norm1(X, n, 1) * eps);
            if (r >= 30) {
                bad++;
                CHECK_MSG(0, "cho_solve of 40000 %s entry %lld: ratio %g", fm_dtype_name(dt), (long long)e, r);
            }
            free(A), free(X), free(Bm), free(AX);
        }
        free_arr(&x2);
        for (int64_t e = 0; e < B && bad < 3; e++) {
            cplx *A = cmat(&a, e, n, n), *X = cmat(&x, e, n, 1), *Bm = cmat(&b, e, n, 1), *AX = mul(A, X, n, n, 1, 0);
            cplx *L = cmat(&l, e, n, n), *LL = mul(L, L, n, n, n, 0);
            const double r = ratio(dnorm(AX, Bm, n, 1), n * norm1(A, n, n) * norm1(X, n, 1) * eps);
            const double rl = fabs(creal(LL[0]) - creal(A[0])) / (n * norm1(A, n, n) * eps);
            if (r >= 30 || rl >= 30 || L[1] != 0) {
                bad++;
                CHECK_MSG(0, "batch of 40000 %s entry %lld: solve ratio %g, cholesky L[0,0]^2 ratio %g, L[0,1] %g",
                          fm_dtype_name(dt), (long long)e, r, rl, cabs(L[1]));
            }
            free(A), free(X), free(Bm), free(AX), free(L), free(LL);
        }
        CHECK(bad == 0);
        free_arr(&a), free_arr(&b), free_arr(&x), free_arr(&l);
        if (d == 1)
            check_eigh(dt, n, B, 0);
    }
}

/* The same outcome (status, message, info) on both devices. */
static void same_outcome_(const char *what, fm_solve_options o, arr *s[FM_SOLVE_NSLOTS], int exact)
{
    arr copies[FM_SOLVE_NSLOTS];
    arr *sc[FM_SOLVE_NSLOTS] = {0};
    for (int i = 0; i < FM_SOLVE_NSLOTS; i++)
        if (s[i]) {
            copies[i] = copy_arr(s[i]);
            sc[i] = &copies[i];
        }
    const fm_status g = run(1, &o, s);
    char gm[512];
    snprintf(gm, sizeof gm, "%s", fm_last_error());
    const fm_status c = run(0, &o, sc);
    CHECK_MSG(g == c && (g == FM_OK || !exact || !strcmp(gm, fm_last_error())), "%s: gpu %s \"%s\", cpu %s \"%s\"", what,
              fm_status_name(g), gm, fm_status_name(c), fm_last_error());
    if (s[FM_SOLVE_INFO] && g == FM_OK)
        for (int64_t e = 0; e < numel(s[FM_SOLVE_INFO]); e++)
            CHECK_MSG(((int64_t *)s[FM_SOLVE_INFO]->h)[e] == ((int64_t *)sc[FM_SOLVE_INFO]->h)[e],
                      "%s entry %lld: gpu info %lld, cpu info %lld", what, (long long)e,
                      (long long)((int64_t *)s[FM_SOLVE_INFO]->h)[e], (long long)((int64_t *)sc[FM_SOLVE_INFO]->h)[e]);
    for (int i = 0; i < FM_SOLVE_NSLOTS; i++)
        if (sc[i])
            free_arr(sc[i]);
}

/* exactly the same message; eigh's LAPACK info number is the solver's own, so only the status there */
static void same_outcome(const char *what, fm_solve_options o, arr *s[FM_SOLVE_NSLOTS])
{
    same_outcome_(what, o, s, 1);
}

static void test_failures_match_cpu(void)
{
    for (int d = 0; d < 4; d++) {
        const fm_dtype dt = dtypes[d];
        const int64_t n = 5, B = 4;
        arr a = mat_arr(dt, B, n, n), b = mat_arr(dt, B, n, 2), x = mat_arr(dt, B, n, 2), l = mat_arr(dt, B, n, n);
        arr info = mk_arr(FM_I64, 1, B, 0, 0), w = mk_arr(real_of(dt), 2, B, n, 0);
        fill_matrix(&a, SPD, B, n);
        fill_random(&b);
        set(dt, a.h, 2 * n * n + 3 * n + 3, -100.0); /* entry 2: indefinite at minor 4 */
        fm_solve_options o = opts(FM_SOLVE_POTRF);
        arr *sp[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, NULL, &l};
        same_outcome("cholesky of an indefinite entry", o, sp);
        CHECK_ERROR_MENTIONS("a[2]");
        o.check = 0;
        arr *sp0[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, NULL, &l, NULL, &info};
        same_outcome("cholesky check = 0", o, sp0);
        CHECK(((int64_t *)info.h)[2] > 0 && ((int64_t *)info.h)[1] == 0);
        /* a NaN: cholesky, solve, eigh agree with LAPACK (torch's CUDA cholesky returns NaN, info 0) */
        set(dt, a.h, 1 * n * n + 1 * n + 1, NAN);
        o = opts(FM_SOLVE_POTRF);
        same_outcome("cholesky with a NaN", o, sp);
        o.check = 0;
        same_outcome("cholesky with a NaN, check = 0", o, sp0);
        o = opts(FM_SOLVE_GESV);
        arr *sg0[FM_SOLVE_NSLOTS] = {&a, &b, NULL, &x};
        same_outcome("solve with a NaN", o, sg0);
        o = opts(FM_SOLVE_SYEVD);
        arr v0 = mat_arr(dt, B, n, n);
        arr *se0[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, &v0, NULL, NULL, NULL, &w};
        same_outcome_("eigh with a NaN", o, se0, 0);
        free_arr(&v0);
        o = opts(FM_SOLVE_POTRF);
        o.check_finite = 1;
        same_outcome("cholesky check_finite", o, sp);
        CHECK_ERROR_MENTIONS("infs or NaNs");
        o = opts(FM_SOLVE_GESV);
        o.check_finite = 1;
        arr *sg[FM_SOLVE_NSLOTS] = {&a, &b, NULL, &x};
        same_outcome("solve check_finite", o, sg);
        CHECK_ERROR_MENTIONS("a[1]");
        /* a singular triangular matrix: the same message */
        fill_matrix(&a, SPD, B, n);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = i + 1; j < n; j++)
                set(dt, a.h, 3 * n * n + i * n + j, 0.0);
        set(dt, a.h, 3 * n * n + 2 * n + 2, 0.0);
        o = opts(FM_SOLVE_TRTRS);
        same_outcome("solve_triangular, singular entry 3", o, sg);
        CHECK_ERROR_MENTIONS("a[3]");
        o = opts(FM_SOLVE_SYEVD);
        arr v = mat_arr(dt, B, n, n);
        arr *se[FM_SOLVE_NSLOTS] = {&a, NULL, NULL, &v, NULL, NULL, NULL, &w};
        same_outcome("eigh", o, se);
        free_arr(&a), free_arr(&b), free_arr(&x), free_arr(&l), free_arr(&info), free_arr(&w), free_arr(&v);
    }
}

/* A pivot outside 1..n is refused whatever check says (check = 0 once returned a solve / det made
 * with the identity's pivots), with the CPU's very message; batch 1 (per entry) and 40 (batched). */
static void test_bad_pivots(void)
{
    const fm_dtype dt = FM_F64;
    const int64_t n = 4;
    for (int64_t B = 1; B <= 40; B += 39) {
        arr f = mat_arr(dt, B, n, n), b = mat_arr(dt, B, n, 1), x = mat_arr(dt, B, n, 1);
        arr piv = mk_arr(FM_I64, 2, B, n, 0);
        arr info = mk_arr(FM_I64, 1, B, 0, 0), w = mk_arr(dt, 1, B, 0, 0), sg = mk_arr(dt, 1, B, 0, 0);
        fill_matrix(&f, SPD, B, n);
        fill_random(&b);
        for (int64_t i = 0; i < B * n; i++)
            ((int64_t *)piv.h)[i] = i % n + 1;
        ((int64_t *)piv.h)[(B - 1) * n + 2] = 99; /* the last entry's */
        char want[64];
        snprintf(want, sizeof want, "ipiv[%lld] has pivot 99 at position 2", (long long)(B - 1));
        for (int check = 1; check >= 0; check--) {
            fm_solve_options o = opts(FM_SOLVE_GETRS);
            o.check = check;
            arr *s[FM_SOLVE_NSLOTS] = {&f, &b, &piv, &x, NULL, NULL, check ? NULL : &info};
            same_outcome("lu_solve with a bad pivot", o, s);
            CHECK_ERROR_MENTIONS(want);
            o.routine = FM_SOLVE_DET;
            arr *sd[FM_SOLVE_NSLOTS] = {&f, NULL, &piv, NULL, NULL, NULL, check ? NULL : &info, &w};
            same_outcome("det of a factor with a bad pivot", o, sd);
            CHECK_ERROR_MENTIONS(want);
            o.routine = FM_SOLVE_SLOGDET;
            arr *sl[FM_SOLVE_NSLOTS] = {&f, NULL, &piv, NULL, NULL, NULL, check ? NULL : &info, &w, &sg};
            same_outcome("slogdet of a factor with a bad pivot", o, sl);
            CHECK_ERROR_MENTIONS(want);
        }
        free_arr(&f), free_arr(&b), free_arr(&x), free_arr(&piv), free_arr(&info), free_arr(&w), free_arr(&sg);
    }
}

/* A broadcast a against a large batch of b: the workspace (a gathered per entry) exceeds the GPU;
 * FM_ERR_OUT_OF_MEMORY naming it, and the context still solves. */
static void test_out_of_memory(void)
{
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    const int64_t n = 4096, B = (int64_t)(total / (size_t)(n * n * 8)) * 2 + 16;
    void *da = NULL, *db = NULL, *dx = NULL;
    CHECK(cudaMalloc(&da, (size_t)(n * n * 8)) == cudaSuccess);
    CHECK(cudaMalloc(&db, (size_t)(B * n * 8)) == cudaSuccess);
    CHECK(cudaMalloc(&dx, (size_t)(B * n * 8)) == cudaSuccess);
    const fm_device dev = {FM_DEVICE_CUDA, 0};
    const int64_t sa[3] = {1, n, n}, sb[3] = {B, n, 1};
    fm_tensor ta, tb, tx;
    fm_tensor_init(&ta, da, dev, FM_F64, 3, sa, NULL);
    fm_tensor_init(&tb, db, dev, FM_F64, 3, sb, NULL);
    fm_tensor_init(&tx, dx, dev, FM_F64, 3, sb, NULL);
    const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, &tb, NULL, &tx};
    fm_solve_options o = opts(FM_SOLVE_GESV);
    CHECK_STATUS(fm_solve(ctx, t, &o, NULL), FM_ERR_OUT_OF_MEMORY);
    CHECK_ERROR_MENTIONS("workspace");
    cudaFree(da), cudaFree(db), cudaFree(dx);
    (void)cudaGetLastError();
    check_lu(FM_F64, RANDOM, 10, 2); /* still usable */
}

static void test_describe(void)
{
    const int64_t s2[2] = {8, 8};
    void *d = NULL;
    CHECK(cudaMalloc(&d, 4096) == cudaSuccess);
    fm_tensor ta, tf;
    const fm_device dev = {FM_DEVICE_CUDA, 0};
    fm_tensor_init(&ta, d, dev, FM_F64, 2, s2, NULL);
    fm_tensor_init(&tf, (char *)d + 512, dev, FM_F64, 2, s2, NULL);
    const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, NULL, &tf};
    fm_solve_options o = opts(FM_SOLVE_POTRF);
    fm_plan *p = NULL;
    CHECK_OK(fm_solve_plan(ctx, t, &o, &p));
    const char *text = p ? fm_plan_describe(p) : NULL;
    CHECK_MSG(text && fm_test_contains(text, "cuda/cusolver"), "describe: %s", text ? text : "(none)");
    fm_plan_release(p);
    { /* refine = fp32 on float64: cusolverDnIRSXgesv, said by describe() */
        const int64_t sr[2] = {8, 2};
        fm_tensor tr, tq;
        fm_tensor_init(&tr, (char *)d + 2048, dev, FM_F64, 2, sr, NULL);
        fm_tensor_init(&tq, (char *)d + 2048 + 256, dev, FM_F64, 2, sr, NULL);
        const fm_tensor *tg[FM_SOLVE_NSLOTS] = {&ta, &tr, NULL, &tq};
        fm_solve_options og = opts(FM_SOLVE_GESV);
        og.refine = FM_SOLVE_REFINE_FP32;
        fm_plan *pg = NULL;
        CHECK_OK(fm_solve_plan(ctx, tg, &og, &pg));
        const char *tx2 = pg ? fm_plan_describe(pg) : NULL;
        CHECK_MSG(tx2 && fm_test_contains(tx2, "IRSXgesv") && fm_test_contains(tx2, "refined from fp32"),
                  "describe of a refined solve: %s", tx2 ? tx2 : "(none)");
        fm_plan_release(pg);
    }
    /* lstsq on the GPU: test_solve_lstsq_gpu.c */
    cudaFree(d);
}

GPU_TEST_MAIN(&ctx, test_describe, test_solve, test_refine, test_lu_factor_inv_det, test_cholesky_triangular,
              test_eigh, test_qr_svd, test_svd_tall_reduced, test_failures_match_cpu, test_bad_pivots,
              test_big_batch, test_out_of_memory)
#else
TEST_MAIN_SKIPPED("built without CUDA")
#endif
