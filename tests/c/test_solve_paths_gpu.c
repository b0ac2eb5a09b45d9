/* test_solve_paths_gpu.c : which cuSOLVER path a plan takes, and that each path's answer is right.
 *  - eigh of a batch: syevjBatched for n <= 32, XsyevBatched above (describe() names it), each checked by
 *    ||A V - V diag(w)|| / (n ||A|| eps) and ||V^T V - I|| / (n eps) below 30 on the host in double;
 *  - getrs of a trusted factor (fm_solve_options.trusted_factor, Solver's): the factor read in place
 *    (row-major as its transpose, column-major as it is) with no synchronisation, and its answer the
 *    fresh gesv's (within 1e-10 relative) and a residual ratio below 30, for each transpose;
 *  - refine = auto is the plain solve; the refinement solver named in describe() (GMRES only for one right-hand side);
 *  - a trusted pivot outside 1..n never faults the device (per-entry, blocked, batched), and a call that
 *    synchronises anyway refuses it. */
#define _GNU_SOURCE
#include "check.h"
#define SOLVE_TEST_SEED 4242
#include "solve_test_util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include <cuda_runtime.h>

static fm_context *ctx;
static const fm_device dev = {FM_DEVICE_CUDA, 0};


static void *dcopy(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}

/* eigh of `batch` random symmetric f32 n x n: the describe word and the residuals */
static void check_eigh_batch(int64_t n, int64_t batch, const char *word)
{
    const int64_t nn = n * n;
    float *a = malloc(sizeof(float) * (size_t)(batch * nn)), *v = malloc(sizeof(float) * (size_t)(batch * nn));
    float *w = malloc(sizeof(float) * (size_t)(batch * n));
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j <= i; j++)
                a[b * nn + i * n + j] = a[b * nn + j * n + i] = (float)urand();
    void *da = dcopy(a, sizeof(float) * (size_t)(batch * nn)), *dv = dcopy(v, sizeof(float) * (size_t)(batch * nn));
    void *dw = dcopy(w, sizeof(float) * (size_t)(batch * n));
    const int64_t sa[3] = {batch, n, n}, sw[2] = {batch, n};
    fm_tensor ta, tv, tw;
    fm_tensor_init(&ta, da, dev, FM_F32, 3, sa, NULL);
    fm_tensor_init(&tv, dv, dev, FM_F32, 3, sa, NULL);
    fm_tensor_init(&tw, dw, dev, FM_F32, 2, sw, NULL);
    fm_solve_options o;
    fm_solve_options_init(&o);
    o.routine = FM_SOLVE_SYEVD;
    const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, &tv, NULL, NULL, NULL, &tw};
    fm_plan *p = NULL;
    CHECK_OK(fm_solve_plan(ctx, t, &o, &p));
    const char *text = p ? fm_plan_describe(p) : NULL;
    CHECK_MSG(text && fm_test_contains(text, word), "eigh %lld x %lld^2: describe %s, expected %s", (long long)batch,
              (long long)n, text ? text : "(none)", word);
    void *ptrs[FM_SOLVE_NSLOTS] = {da, NULL, NULL, dv, NULL, NULL, NULL, dw};
    CHECK_OK(fm_plan_execute(p, ptrs, FM_SOLVE_NSLOTS, NULL));
    cudaMemcpy(v, dv, sizeof(float) * (size_t)(batch * nn), cudaMemcpyDeviceToHost);
    cudaMemcpy(w, dw, sizeof(float) * (size_t)(batch * n), cudaMemcpyDeviceToHost);
    double worst_r = 0, worst_o = 0;
    for (int64_t b = 0; b < batch; b++) {
        const float *A = a + b * nn, *V = v + b * nn, *W = w + b * n;
        double anorm = 0, rnorm = 0, onorm = 0; /* 1-norms: max column sums */
        for (int64_t j = 0; j < n; j++) {
            double ca = 0, cr = 0, co = 0;
            for (int64_t i = 0; i < n; i++) {
                double av = 0, vv = 0;
                for (int64_t l = 0; l < n; l++) {
                    av += (double)A[i * n + l] * V[l * n + j];
                    vv += (double)V[l * n + i] * V[l * n + j];
                }
                ca += fabs(A[i * n + j]), cr += fabs(av - (double)V[i * n + j] * W[j]), co += fabs(vv - (i == j));
            }
            anorm = fmax(anorm, ca), rnorm = fmax(rnorm, cr), onorm = fmax(onorm, co);
        }
        worst_r = fmax(worst_r, rnorm / ((double)n * anorm * FLT_EPSILON));
        worst_o = fmax(worst_o, onorm / ((double)n * FLT_EPSILON));
        for (int64_t i = 1; i < n; i++)
            CHECK_MSG(W[i - 1] <= W[i], "eigh %lld^2 entry %lld: eigenvalues not ascending", (long long)n, (long long)b);
    }
    CHECK_MSG(worst_r < 30 && worst_o < 30, "eigh %lld x %lld^2 (%s): residual ratio %g, orthogonality ratio %g",
              (long long)batch, (long long)n, word, worst_r, worst_o);
    fm_plan_release(p);
    cudaFree(da), cudaFree(dv), cudaFree(dw);
    free(a), free(v), free(w);
}

static void test_eigh_batched_paths(void)
{
    check_eigh_batch(16, 5, "syevjBatched");
    check_eigh_batch(64, 5, "XsyevBatched");
    check_eigh_batch(128, 3, "XsyevBatched");
    check_eigh_batch(512, 2, "XsyevBatched");
}

/* the factor of a (C order) by getrf on the device, then getrs of it trusted, in both layouts */
static void test_trusted_getrs(void)
{
    const int64_t n = 1100, k = 16, nn = n * n; /* n >= 1024, k <= 128: the blocked triangular solves */
    double *a = malloc(sizeof(double) * (size_t)nn), *b = malloc(sizeof(double) * (size_t)(n * k));
    double *x = malloc(sizeof(double) * (size_t)(n * k)), *x0 = malloc(sizeof(double) * (size_t)(n * k));
    double *fc = malloc(sizeof(double) * (size_t)nn);
    for (int64_t i = 0; i < nn; i++)
        a[i] = urand() + (i % (n + 1) == 0 ? 3 * sqrt((double)n) : 0);
    for (int64_t i = 0; i < n * k; i++)
        b[i] = urand();
    double *da = dcopy(a, sizeof(double) * (size_t)nn), *df = dcopy(a, sizeof(double) * (size_t)nn);
    double *dfc = dcopy(a, sizeof(double) * (size_t)nn), *db = dcopy(b, sizeof(double) * (size_t)(n * k));
    double *dx = dcopy(b, sizeof(double) * (size_t)(n * k));
    int64_t *dp = dcopy(b, sizeof(int64_t) * (size_t)n);
    const int64_t sa[2] = {n, n}, sb[2] = {n, k}, sp[1] = {n}, scol[2] = {1, n};
    fm_tensor ta, tf, tfc, tb, tx, tp;
    fm_tensor_init(&ta, da, dev, FM_F64, 2, sa, NULL);
    fm_tensor_init(&tf, df, dev, FM_F64, 2, sa, NULL);
    fm_tensor_init(&tfc, dfc, dev, FM_F64, 2, sa, scol);
    fm_tensor_init(&tb, db, dev, FM_F64, 2, sb, NULL);
    fm_tensor_init(&tx, dx, dev, FM_F64, 2, sb, NULL);
    fm_tensor_init(&tp, dp, dev, FM_I64, 1, sp, NULL);
    fm_solve_options o;
    fm_solve_options_init(&o);
    o.routine = FM_SOLVE_GETRF;
    const fm_tensor *tr[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, NULL, &tf, &tp};
    CHECK_OK(fm_solve(ctx, tr, &o, NULL));
    cudaMemcpy(fc, df, sizeof(double) * (size_t)nn, cudaMemcpyDeviceToHost); /* the same factor column-major */
    double *fcol = malloc(sizeof(double) * (size_t)nn);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            fcol[i + j * n] = fc[i * n + j];
    cudaMemcpy(dfc, fcol, sizeof(double) * (size_t)nn, cudaMemcpyHostToDevice);
    for (int trans = 0; trans < 2; trans++) {
        /* the reference: gesv of a (trans: of a^T, from a column-major view of a, which is a^T) */
        fm_tensor tat;
        fm_tensor_init(&tat, da, dev, FM_F64, 2, sa, scol);
        fm_solve_options og;
        fm_solve_options_init(&og);
        og.refine = FM_SOLVE_REFINE_OFF;
        const fm_tensor *tg[FM_SOLVE_NSLOTS] = {trans ? &tat : &ta, &tb, NULL, &tx};
        CHECK_OK(fm_solve(ctx, tg, &og, NULL));
        cudaMemcpy(x0, dx, sizeof(double) * (size_t)(n * k), cudaMemcpyDeviceToHost);
        for (int layout = 0; layout < 2; layout++) {
            fm_solve_options os;
            fm_solve_options_init(&os);
            os.routine = FM_SOLVE_GETRS, os.transpose = trans, os.trusted_factor = 1;
            const fm_tensor *ts[FM_SOLVE_NSLOTS] = {layout ? &tfc : &tf, &tb, &tp, &tx};
            fm_plan *p = NULL;
            CHECK_OK(fm_solve_plan(ctx, ts, &os, &p));
            const char *text = p ? fm_plan_describe(p) : "(none)";
            const int as_t = fm_test_contains(text, "read in place as its transpose");
            CHECK_MSG(fm_test_contains(text, "the factor read in place") && as_t == !layout &&
                      fm_test_contains(text, "no synchronisation"), "trusted getrs describe: %s", text);
            cudaMemset(dx, 0, sizeof(double) * (size_t)(n * k));
            void *ptrs[FM_SOLVE_NSLOTS] = {layout ? (void *)dfc : (void *)df, db, dp, dx};
            CHECK_OK(fm_plan_execute(p, ptrs, FM_SOLVE_NSLOTS, NULL));
            cudaDeviceSynchronize();
            cudaMemcpy(x, dx, sizeof(double) * (size_t)(n * k), cudaMemcpyDeviceToHost);
            double diff = 0, scale = 0, res = 0, an = 0, xn = 0;
            for (int64_t i = 0; i < n * k; i++)
                diff = fmax(diff, fabs(x[i] - x0[i])), scale = fmax(scale, fabs(x0[i]));
            for (int64_t c = 0; c < k; c++) { /* inf-norm residual of op(a) x - b */
                for (int64_t i = 0; i < n; i++) {
                    double r = -b[i * k + c], ra = 0;
                    for (int64_t j = 0; j < n; j++) {
                        const double aij = trans ? a[j * n + i] : a[i * n + j];
                        r += aij * x[j * k + c], ra += fabs(aij);
                    }
                    res = fmax(res, fabs(r)), an = fmax(an, ra);
                }
            }
            for (int64_t i = 0; i < n * k; i++)
                xn = fmax(xn, fabs(x[i]));
            const double ratio = res / ((double)n * an * xn * DBL_EPSILON);
            CHECK_MSG(diff <= 1e-10 * scale && ratio < 30, "trusted getrs trans=%d layout=%s: max diff %g (scale %g), "
                      "residual ratio %g", trans, layout ? "column-major" : "row-major", diff, scale, ratio);
            fm_plan_release(p);
        }
    }
    cudaFree(da), cudaFree(df), cudaFree(dfc), cudaFree(db), cudaFree(dx), cudaFree(dp);
    free(a), free(b), free(x), free(x0), free(fc), free(fcol);
}

/* refine = auto's rule and the refinement solver in describe(), then the call itself: auto never refines
 * (cusolver_refine.c: the plain solve), an explicit tf32 with one right-hand side refines with GMRES, with
 * 16 classically (cuSOLVER's GMRES solvers take nrhs = 1 alone) */
static void test_refine_rule(void)
{
    const int64_t n = 4096;
    double *a = malloc(sizeof(double) * (size_t)(n * n)), *b = malloc(sizeof(double) * (size_t)(n * 16));
    for (int64_t i = 0; i < n * n; i++)
        a[i] = urand() + (i % (n + 1) == 0 ? 3 * sqrt((double)n) : 0);
    for (int64_t i = 0; i < n * 16; i++)
        b[i] = urand();
    void *da = dcopy(a, sizeof(double) * (size_t)(n * n)), *db = dcopy(b, sizeof(double) * (size_t)(n * 16));
    void *dx = dcopy(b, sizeof(double) * (size_t)(n * 16));
    const struct {
        int64_t k;
        int refine;
        const char *want, *absent;
    } rows[] = {{1, FM_SOLVE_REFINE_AUTO, NULL, "refined"},
                {16, FM_SOLVE_REFINE_AUTO, NULL, "refined"},
                {1, FM_SOLVE_REFINE_TF32, "refined from tf32 (gmres refinement)", NULL},
                {16, FM_SOLVE_REFINE_TF32, "refined from tf32 (classical refinement)", NULL}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const int64_t sa[2] = {n, n}, sb[2] = {n, rows[i].k};
        fm_tensor ta, tb, tx;
        fm_tensor_init(&ta, da, dev, FM_F64, 2, sa, NULL);
        fm_tensor_init(&tb, db, dev, FM_F64, 2, sb, NULL);
        fm_tensor_init(&tx, dx, dev, FM_F64, 2, sb, NULL);
        fm_solve_options o;
        fm_solve_options_init(&o);
        o.refine = rows[i].refine;
        const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, &tb, NULL, &tx};
        fm_plan *p = NULL;
        CHECK_OK(fm_solve_plan(ctx, t, &o, &p));
        const char *text = p ? fm_plan_describe(p) : "(none)";
        CHECK_MSG((!rows[i].want || fm_test_contains(text, rows[i].want)) &&
                      (!rows[i].absent || !fm_test_contains(text, rows[i].absent)),
                  "refine %d nrhs %lld: describe %s", rows[i].refine, (long long)rows[i].k, text);
        void *ptrs[FM_SOLVE_NSLOTS] = {da, db, NULL, dx};
        CHECK_OK(p ? fm_plan_execute(p, ptrs, FM_SOLVE_NSLOTS, NULL) : FM_ERR_INVALID_ARGUMENT);
        fm_plan_release(p);
    }
    cudaFree(da), cudaFree(db), cudaFree(dx);
    free(a), free(b);
}

/* A trusted pivot outside 1..n (undefined result, documented) never faults the device, on the per-entry
 * Xgetrs (n = 64), the blocked solves (n = 1100) and getrsBatched (4 x 16); a call that synchronises anyway
 * (check_finite) refuses it with the untrusted call's message. */
static void test_trusted_bad_pivot(void)
{
    const int64_t shapes[3][2] = {{1, 64}, {1, 1100}, {4, 16}};
    for (int i = 0; i < 3; i++) {
        const int64_t B = shapes[i][0], n = shapes[i][1], k = 2;
        double *lu = malloc(sizeof(double) * (size_t)(B * n * n)), *b = malloc(sizeof(double) * (size_t)(B * n * k));
        int64_t *piv = malloc(sizeof(int64_t) * (size_t)(B * n));
        for (int64_t e = 0; e < B * n * n; e++)
            lu[e] = urand() + ((e % (n * n)) % (n + 1) == 0 ? 4.0 : 0);
        for (int64_t e = 0; e < B * n * k; e++)
            b[e] = urand();
        for (int64_t e = 0; e < B * n; e++)
            piv[e] = e % n + 1;
        piv[(B - 1) * n + 3] = 1000000; /* far past n */
        void *dl = dcopy(lu, sizeof(double) * (size_t)(B * n * n)), *db = dcopy(b, sizeof(double) * (size_t)(B * n * k));
        void *dx = dcopy(b, sizeof(double) * (size_t)(B * n * k)), *dp = dcopy(piv, sizeof(int64_t) * (size_t)(B * n));
        const int64_t sa[3] = {B, n, n}, sb[3] = {B, n, k}, sp[2] = {B, n};
        fm_tensor ta, tb, tx, tp;
        fm_tensor_init(&ta, dl, dev, FM_F64, 3, sa, NULL);
        fm_tensor_init(&tb, db, dev, FM_F64, 3, sb, NULL);
        fm_tensor_init(&tx, dx, dev, FM_F64, 3, sb, NULL);
        fm_tensor_init(&tp, dp, dev, FM_I64, 2, sp, NULL);
        fm_solve_options o;
        fm_solve_options_init(&o);
        o.routine = FM_SOLVE_GETRS, o.trusted_factor = 1;
        const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, &tb, &tp, &tx};
        CHECK_OK(fm_solve(ctx, t, &o, NULL));
        const cudaError_t e = cudaDeviceSynchronize();
        CHECK_MSG(e == cudaSuccess, "trusted bad pivot, batch %lld n %lld: %s", (long long)B, (long long)n,
                  cudaGetErrorString(e));
        o.check_finite = 1;
        CHECK_STATUS(fm_solve(ctx, t, &o, NULL), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("has pivot 1000000 at position 3");
        cudaFree(dl), cudaFree(db), cudaFree(dx), cudaFree(dp);
        free(lu), free(b), free(piv);
    }
}

GPU_TEST_MAIN(&ctx, test_eigh_batched_paths, test_trusted_getrs, test_refine_rule, test_trusted_bad_pivot)
#else
TEST_MAIN_SKIPPED("built without CUDA")
#endif
