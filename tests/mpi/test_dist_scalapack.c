/* test_dist_scalapack.c : libfusemath_mpi's ScaLAPACK functions, run by ctest under mpirun -np 1..4.
 * Every rank fills its block-cyclic blocks from the same global matrices (a formula of the global
 * indices); the blocks are summed into the global result (MPI_Allreduce) and compared with a
 * serial reference in double: the product and its epilogue computed here element by element
 * (relative max error <= 1e-12 f64 / 1e-5 f32), solves by their residual ratio
 * ||A X - B|| / (n ||A|| ||X|| eps) < 30, factors by ||L L^T - A|| / (n ||A|| eps) < 30. Then the bad
 * inputs: each must fail on every rank with the same status. Exits 77 (ctest: skipped) where
 * libfusemath_mpi was built without ScaLAPACK. */
#define _POSIX_C_SOURCE 200809L /* M_PI */
#define _DEFAULT_SOURCE
#include <fusemath/fusemath_mpi.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"

/* global entry (i, j) of the test matrix `seed`: the same on every rank */
typedef double (*entry_fn)(int seed, int64_t i, int64_t j);

static double wavy(int seed, int64_t i, int64_t j)
{
    return sin(0.37 * (double)(i * 131 + j * 17 + seed * 7) + 0.1 * seed) + 0.1 * cos((double)(i - j));
}

/* SPD: M M^T / n + I-ish with M = wavy, made here as a diagonally dominant symmetric matrix */
static double spd(int seed, int64_t i, int64_t j)
{
    double s = 0.5 * (wavy(seed, i, j) + wavy(seed, j, i));
    return i == j ? s + 64.0 : s;
}

typedef struct {
    fm_dist_matrix x;
    int dbl;
} dmat;

/* the matrix m x n in mb x nb blocks on g, its local block filled from f (NULL: zeros) */
static dmat make(const fm_dist_grid *g, int dbl, int64_t m, int64_t n, int64_t mb, int64_t nb, entry_fn f, int seed)
{
    dmat d = {{0}, dbl};
    fm_status st = fm_dist_matrix_init(g, m, n, mb, nb, &d.x);
    CHECK(st == FM_OK, "matrix_init: %s", fm_last_error());
    size_t es = dbl ? sizeof(double) : sizeof(float);
    d.x.data = calloc((size_t)(d.x.ld * d.x.local_cols + 1), es);
    for (int64_t jl = 0; f && jl < d.x.local_cols; jl++)
        for (int64_t il = 0; il < d.x.local_rows; il++) {
            int64_t gi, gj;
            fm_dist_matrix_global_index(g, &d.x, 0, il, &gi);
            fm_dist_matrix_global_index(g, &d.x, 1, jl, &gj);
            double v = f(seed, gi, gj);
            if (dbl)
                ((double *)d.x.data)[jl * d.x.ld + il] = v;
            else
                ((float *)d.x.data)[jl * d.x.ld + il] = (float)v;
        }
    return d;
}

/* the whole matrix, row-major, on every rank */
static double *assemble(const fm_dist_grid *g, const dmat *d)
{
    const fm_dist_matrix *x = &d->x;
    double *out = calloc((size_t)(x->m * x->n), sizeof(double));
    for (int64_t jl = 0; jl < x->local_cols; jl++)
        for (int64_t il = 0; il < x->local_rows; il++) {
            int64_t gi, gj;
            fm_dist_matrix_global_index(g, x, 0, il, &gi);
            fm_dist_matrix_global_index(g, x, 1, jl, &gj);
            out[gi * x->n + gj] = d->dbl ? ((double *)x->data)[jl * x->ld + il] : ((float *)x->data)[jl * x->ld + il];
        }
    MPI_Allreduce(MPI_IN_PLACE, out, (int)(x->m * x->n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return out;
}

static double *global(entry_fn f, int seed, int64_t m, int64_t n)
{
    double *g = malloc(sizeof(double) * (size_t)(m * n));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            g[i * n + j] = f(seed, i, j);
    return g;
}

static double inf_norm(const double *a, int64_t m, int64_t n)
{
    double best = 0;
    for (int64_t i = 0; i < m; i++) {
        double s = 0;
        for (int64_t j = 0; j < n; j++)
            s += fabs(a[i * n + j]);
        best = fmax(best, s);
    }
    return best;
}

/* the reference activation, written from its definition (docs/epilogues.md) */
static double act_ref(unsigned e, double x, const double *clamp)
{
    if (e & FM_EPILOGUE_RELU)
        return x > 0 ? x : 0;
    if (e & FM_EPILOGUE_GELU)
        return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    if (e & FM_EPILOGUE_SIGMOID)
        return 1 / (1 + exp(-x));
    if (e & FM_EPILOGUE_TANH)
        return tanh(x);
    if (e & FM_EPILOGUE_SILU)
        return x / (1 + exp(-x));
    if (e & FM_EPILOGUE_CLAMP)
        return fmin(fmax(x, clamp[0]), clamp[1]);
    return x;
}

typedef struct {
    int dbl;
    int64_t m, k, n, mb, kb, nb; /* A m x k in mb x kb blocks, B in kb x nb, D in mb x nb */
    double alpha, beta;
    unsigned epi;
    int in_place; /* c is d itself */
} mmcase;

static void run_matmul(const fm_dist_grid *g, const mmcase *c)
{
    dmat a = make(g, c->dbl, c->m, c->k, c->mb, c->kb, wavy, 1), b = make(g, c->dbl, c->k, c->n, c->kb, c->nb, wavy, 2);
    dmat cm = make(g, c->dbl, c->m, c->n, c->mb, c->nb, wavy, 3);
    dmat d = c->in_place ? cm : make(g, c->dbl, c->m, c->n, c->mb, c->nb, NULL, 0);
    double *bias64 = malloc(sizeof(double) * (size_t)c->n);
    float *bias32 = malloc(sizeof(float) * (size_t)c->n);
    for (int64_t j = 0; j < c->n; j++)
        bias32[j] = (float)(bias64[j] = 0.25 * cos(0.3 * (double)j));
    fm_dist_matmul_options o;
    fm_dist_matmul_options_init(&o);
    o.alpha = c->alpha, o.beta = c->beta, o.epilogue = c->epi;
    o.clamp[0] = -0.5, o.clamp[1] = 0.75;
    const void *bias = (c->epi & FM_EPILOGUE_BIAS) ? (c->dbl ? (void *)bias64 : (void *)bias32) : NULL;
    fm_status st = fm_dist_matmul(g, c->dbl ? FM_F64 : FM_F32, &a.x, &b.x, c->beta != 0 ? &cm.x : NULL, bias, &o, &d.x);
    CHECK(st == FM_OK, "matmul: %s", fm_last_error());
    double *ga = global(wavy, 1, c->m, c->k), *gb = global(wavy, 2, c->k, c->n), *gc = global(wavy, 3, c->m, c->n);
    double *got = assemble(g, &d), err = 0, top = 0;
    for (int64_t i = 0; i < c->m; i++)
        for (int64_t j = 0; j < c->n; j++) {
            double s = 0;
            for (int64_t l = 0; l < c->k; l++)
                s += ga[i * c->k + l] * gb[l * c->n + j];
            double x = c->alpha * s + c->beta * gc[i * c->n + j] + (bias ? bias64[j] : 0);
            double want = act_ref(c->epi, x, o.clamp);
            err = fmax(err, fabs(got[i * c->n + j] - want));
            top = fmax(top, fabs(want));
        }
    double tol = c->dbl ? 1e-12 : 1e-5;
    CHECK(err <= tol * fmax(top, 1), "matmul %lldx%lldx%lld %s epilogue 0x%x: max error %.3g (max |D| %.3g)",
          (long long)c->m, (long long)c->k, (long long)c->n, c->dbl ? "f64" : "f32", c->epi, err, top);
    free(got), free(ga), free(gb), free(gc), free(bias64), free(bias32);
    free(a.x.data), free(b.x.data), free(cm.x.data);
    if (!c->in_place)
        free(d.x.data);
}

static void test_matmul(const fm_dist_grid *g)
{
    static const mmcase cases[] = {
        {1, 37, 23, 29, 8, 8, 8, 0.7, 0.3, FM_EPILOGUE_BIAS | FM_EPILOGUE_GELU, 0},
        {0, 37, 23, 29, 8, 8, 8, 1.0, 0.0, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, 0},
        {1, 20, 30, 10, 5, 7, 4, -1.5, 0.0, 0, 0},                    /* rectangular blocks */
        {1, 16, 9, 24, 3, 4, 5, 1.0, 1.0, FM_EPILOGUE_CLAMP, 1},     /* c is d */
        {0, 12, 12, 12, 64, 64, 64, 2.0, -1.0, FM_EPILOGUE_SIGMOID, 0}, /* one block: one rank holds it */
        {1, 33, 17, 41, 6, 6, 6, 1.0, 0.0, FM_EPILOGUE_BIAS | FM_EPILOGUE_SILU, 0},
        {0, 25, 19, 27, 4, 4, 4, 0.5, 0.5, FM_EPILOGUE_TANH, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_matmul(g, &cases[i]);
}

/* ||A X - B||_inf / (n ||A||_inf ||X||_inf eps) of the gathered X */
static double residual_ratio(const double *ga, const double *x, const double *gb, int64_t n, int64_t nrhs, int dbl)
{
    double *r = malloc(sizeof(double) * (size_t)(n * nrhs));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < nrhs; j++) {
            double s = -gb[i * nrhs + j];
            for (int64_t l = 0; l < n; l++)
                s += ga[i * n + l] * x[l * nrhs + j];
            r[i * nrhs + j] = s;
        }
    double eps = dbl ? DBL_EPSILON : FLT_EPSILON;
    double q = inf_norm(r, n, nrhs) / ((double)n * inf_norm(ga, n, n) * inf_norm(x, n, nrhs) * eps);
    free(r);
    return q;
}

static void run_solve(const fm_dist_grid *g, int dbl, int64_t n, int64_t nrhs, int64_t nb)
{
    dmat a = make(g, dbl, n, n, nb, nb, wavy, 4), b = make(g, dbl, n, nrhs, nb, nb, wavy, 5);
    fm_status st = fm_dist_solve(g, dbl ? FM_F64 : FM_F32, &a.x, &b.x);
    CHECK(st == FM_OK, "solve: %s", fm_last_error());
    double *ga = global(wavy, 4, n, n), *gb = global(wavy, 5, n, nrhs), *x = assemble(g, &b);
    double q = residual_ratio(ga, x, gb, n, nrhs, dbl);
    CHECK(q < 30, "solve n=%lld nrhs=%lld nb=%lld %s: residual ratio %.3g >= 30", (long long)n, (long long)nrhs,
          (long long)nb, dbl ? "f64" : "f32", q);
    free(ga), free(gb), free(x), free(a.x.data), free(b.x.data);
}

static void run_cholesky(const fm_dist_grid *g, int dbl, int64_t n, int64_t nrhs, int64_t nb, int upper)
{
    dmat a = make(g, dbl, n, n, nb, nb, spd, 6), b = make(g, dbl, n, nrhs, nb, nb, wavy, 7);
    fm_dtype t = dbl ? FM_F64 : FM_F32;
    fm_status st = fm_dist_cholesky(g, t, upper, &a.x);
    CHECK(st == FM_OK, "cholesky: %s", fm_last_error());
    double *ga = global(spd, 6, n, n), *f = assemble(g, &a), *r = calloc((size_t)(n * n), sizeof(double));
    /* A - L L^T (lower) or A - U^T U (upper), from the named triangle only */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = ga[i * n + j];
            for (int64_t l = 0; l <= (i < j ? i : j); l++)
                s -= upper ? f[l * n + i] * f[l * n + j] : f[i * n + l] * f[j * n + l];
            r[i * n + j] = s;
        }
    double eps = dbl ? DBL_EPSILON : FLT_EPSILON, q = inf_norm(r, n, n) / ((double)n * inf_norm(ga, n, n) * eps);
    CHECK(q < 30, "cholesky n=%lld nb=%lld %s upper=%d: ratio %.3g >= 30", (long long)n, (long long)nb,
          dbl ? "f64" : "f32", upper, q);
    /* the other triangle is left as it was */
    double moved = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            if (upper ? i > j : i < j)
                moved = fmax(moved, fabs(f[i * n + j] - ga[i * n + j]));
    CHECK(moved <= (dbl ? 0 : 1e-6), "cholesky upper=%d changed the other triangle by %.3g", upper, moved);
    st = fm_dist_cho_solve(g, t, upper, &a.x, &b.x);
    CHECK(st == FM_OK, "cho_solve: %s", fm_last_error());
    double *gb = global(wavy, 7, n, nrhs), *x = assemble(g, &b);
    q = residual_ratio(ga, x, gb, n, nrhs, dbl);
    CHECK(q < 30, "cho_solve n=%lld %s upper=%d: residual ratio %.3g >= 30", (long long)n, dbl ? "f64" : "f32",
          upper, q);
    free(ga), free(f), free(r), free(gb), free(x), free(a.x.data), free(b.x.data);
}

static void test_solvers(const fm_dist_grid *g)
{
    run_solve(g, 1, 50, 3, 8);
    run_solve(g, 0, 31, 2, 4);
    run_solve(g, 1, 120, 5, 16);
    run_solve(g, 1, 7, 1, 64); /* one block */
    run_cholesky(g, 1, 45, 3, 8, 0);
    run_cholesky(g, 1, 45, 3, 8, 1);
    run_cholesky(g, 0, 30, 2, 5, 0);
    run_cholesky(g, 1, 100, 4, 12, 1);
}


static double diag_zero(int seed, int64_t i, int64_t j) { return i == j ? (i == seed ? 0.0 : 2.0) : 0.0; }
static double diag_negative(int seed, int64_t i, int64_t j) { return i == j ? (i == seed ? -1.0 : 3.0) : 0.0; }

static void bad_matmul(const fm_dist_grid *g)
{
    int last = g_rank == g_size - 1;
    dmat a = make(g, 1, 20, 12, 4, 4, wavy, 1), b = make(g, 1, 12, 16, 4, 4, wavy, 2);
    dmat d = make(g, 1, 20, 16, 4, 4, NULL, 0), d5 = make(g, 1, 20, 16, 5, 4, NULL, 0);
    fm_dist_matmul_options o;
    fm_dist_matmul_options_init(&o);
    expect_all(fm_dist_matmul(g, FM_F64, &a.x, &b.x, NULL, NULL, &o, &d.x), FM_OK, NULL, "good matmul");
    /* the last rank's local shape is not its block of the layout */
    fm_dist_matrix wrong = a.x;
    if (last)
        wrong.local_rows += 1, wrong.ld += 1;
    expect_all(fm_dist_matmul(g, FM_F64, &wrong, &b.x, NULL, NULL, &o, &d.x), FM_ERR_SHAPE, "local block",
               "wrong local shape");
    expect_all(fm_dist_matmul(g, FM_F64, &a.x, &b.x, NULL, NULL, &o, &d5.x), FM_ERR_INVALID_ARGUMENT,
               "mismatched layouts", "a's and d's row blocks differ");
    expect_all(fm_dist_matmul(g, FM_F64, &b.x, &a.x, NULL, NULL, &o, &d.x), FM_ERR_SHAPE, "expected a m x k",
               "inner dimensions differ");
    fm_dist_matrix zero_block = a.x;
    zero_block.nb = 0;
    expect_all(fm_dist_matmul(g, FM_F64, &zero_block, &b.x, NULL, NULL, &o, &d.x), FM_ERR_INVALID_ARGUMENT,
               "block sizes", "a block size of 0");
    fm_dist_matrix no_data = a.x; /* rank 0 holds block (0, 0): its data must be there */
    if (g_rank == 0)
        no_data.data = NULL;
    expect_all(fm_dist_matmul(g, FM_F64, &no_data, &b.x, NULL, NULL, &o, &d.x), FM_ERR_INVALID_ARGUMENT,
               "data is NULL", "NULL data on one rank");
    expect_all(fm_dist_matmul(g, FM_F64, NULL, &b.x, NULL, NULL, &o, &d.x), FM_ERR_INVALID_ARGUMENT, "a is NULL",
               "a NULL");
    expect_all(fm_dist_matmul(NULL, FM_F64, &a.x, &b.x, NULL, NULL, &o, &d.x), FM_ERR_INVALID_ARGUMENT,
               "grid is NULL", "grid NULL");
    expect_all(fm_dist_matmul(g, FM_C128, &a.x, &b.x, NULL, NULL, &o, &d.x), FM_ERR_DTYPE, "f32 or f64", "c128");
    expect_all(fm_dist_matmul(g, last ? FM_F32 : FM_F64, &a.x, &b.x, NULL, NULL, &o, &d.x),
               g_size > 1 ? FM_ERR_INVALID_ARGUMENT : FM_OK, "disagree on dtype", "dtype on one rank");
    expect_all(fm_dist_matmul(g, FM_F64, &a.x, &b.x, NULL, NULL, &o, &a.x), FM_ERR_SHAPE, NULL, "d is a (shape)");
    dmat sq = make(g, 1, 12, 12, 4, 4, wavy, 1);
    expect_all(fm_dist_matmul(g, FM_F64, &sq.x, &sq.x, NULL, NULL, &o, &sq.x), FM_ERR_ALIAS, "overlaps", "d is a");
    fm_dist_matmul_options ob = o;
    ob.beta = 1.0;
    expect_all(fm_dist_matmul(g, FM_F64, &a.x, &b.x, NULL, NULL, &ob, &d.x), FM_ERR_INVALID_ARGUMENT, "c is NULL",
               "beta without c");
    ob = o;
    ob.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT;
    expect_all(fm_dist_matmul(g, FM_F64, &a.x, &b.x, NULL, NULL, &ob, &d.x), FM_ERR_NOT_SUPPORTED, "not implemented",
               "dropout");
    double bias[16] = {0};
    expect_all(fm_dist_matmul(g, FM_F64, &a.x, &b.x, NULL, bias, &o, &d.x), FM_ERR_INVALID_ARGUMENT,
               "no FM_EPILOGUE_BIAS", "bias without the bit");
    ob = o;
    ob.epilogue = FM_EPILOGUE_BIAS;
    expect_all(fm_dist_matmul(g, FM_F64, &a.x, &b.x, NULL, NULL, &ob, &d.x), FM_ERR_INVALID_ARGUMENT, "bias is NULL",
               "bias bit without bias");
    ob = o;
    ob.epilogue = last ? FM_EPILOGUE_GELU : FM_EPILOGUE_RELU;
    expect_all(fm_dist_matmul(g, FM_F64, &a.x, &b.x, NULL, NULL, &ob, &d.x),
               g_size > 1 ? FM_ERR_INVALID_ARGUMENT : FM_OK, "disagree on opts->epilogue", "epilogue on one rank");
    ob = o;
    ob.epilogue = FM_EPILOGUE_CLAMP, ob.clamp[0] = 1, ob.clamp[1] = -1;
    expect_all(fm_dist_matmul(g, FM_F64, &a.x, &b.x, NULL, NULL, &ob, &d.x), FM_ERR_INVALID_ARGUMENT, "lo <= hi",
               "clamp");
    free(a.x.data), free(b.x.data), free(d.x.data), free(d5.x.data), free(sq.x.data);
}

static void bad_solvers(const fm_dist_grid *g)
{
    int last = g_rank == g_size - 1;
    dmat a = make(g, 1, 24, 24, 4, 4, diag_zero, 5), b = make(g, 1, 24, 2, 4, 4, wavy, 1);
    expect_all(fm_dist_solve(g, FM_F64, &a.x, &b.x), FM_ERR_LINALG, "U[5, 5]", "singular");
    dmat n = make(g, 0, 24, 24, 4, 4, diag_negative, 3);
    expect_all(fm_dist_cholesky(g, FM_F32, 0, &n.x), FM_ERR_LINALG, "leading minor of order 4", "not SPD");
    dmat r = make(g, 1, 24, 24, 4, 6, wavy, 1);
    expect_all(fm_dist_solve(g, FM_F64, &r.x, &b.x), FM_ERR_INVALID_ARGUMENT, "square blocks", "mb != nb");
    dmat b5 = make(g, 1, 24, 2, 6, 4, wavy, 1);
    expect_all(fm_dist_solve(g, FM_F64, &a.x, &b5.x), FM_ERR_INVALID_ARGUMENT, "mismatched layouts",
               "b's row blocks differ");
    dmat rect = make(g, 1, 24, 20, 4, 4, wavy, 1);
    expect_all(fm_dist_cholesky(g, FM_F64, 0, &rect.x), FM_ERR_SHAPE, "square", "rectangular cholesky");
    expect_all(fm_dist_cholesky(g, FM_F64, 2, &a.x), FM_ERR_INVALID_ARGUMENT, "upper = 2", "upper = 2");
    expect_all(fm_dist_solve(g, FM_F64, &a.x, NULL), FM_ERR_INVALID_ARGUMENT, "b is NULL", "b NULL");
    dmat sq = make(g, 1, 24, 24, 4, 4, wavy, 1);
    expect_all(fm_dist_cho_solve(g, FM_F64, 0, &sq.x, &sq.x), FM_ERR_ALIAS, "overlaps", "b is the factor");
    /* the ranks disagree on the global shape: each rank's block is right for what it passes */
    dmat other = make(g, 1, 24, last ? 3 : 2, 4, 4, wavy, 1);
    expect_all(fm_dist_solve(g, FM_F64, &a.x, &other.x), g_size > 1 ? FM_ERR_INVALID_ARGUMENT : FM_ERR_LINALG,
               g_size > 1 ? "disagree on b.n" : NULL, "b's shape on one rank");
    fm_dist_matrix tmp;
    expect_all(fm_dist_matrix_init(g, 10, 10, -1, 4, &tmp), FM_ERR_INVALID_ARGUMENT, "block sizes", "init mb = -1");
    expect_all(fm_dist_matrix_init(g, 0, 10, 4, 4, &tmp), FM_ERR_INVALID_ARGUMENT, "at least 1 x 1", "init m = 0");
    expect_all(fm_dist_matrix_init(NULL, 10, 10, 4, 4, &tmp), FM_ERR_INVALID_ARGUMENT, "grid is NULL", "init grid");
    int64_t gi = -1;
    expect_all(fm_dist_matrix_global_index(g, &a.x, 0, a.x.local_rows, &gi), FM_ERR_INVALID_ARGUMENT,
               "this rank holds", "a local index past the block");
    free(a.x.data), free(b.x.data), free(n.x.data), free(r.x.data), free(b5.x.data), free(rect.x.data);
    free(sq.x.data), free(other.x.data);
}

static void bad_grids(void)
{
    fm_dist_grid *h = NULL;
    expect_all(fm_dist_grid_create(MPI_COMM_WORLD, 3, g_size + 1, &h), FM_ERR_INVALID_ARGUMENT, "exactly",
               "a grid of the wrong size");
    CHECK(h == NULL, "a failed grid is NULL");
    expect_all(fm_dist_grid_create(MPI_COMM_WORLD, 1, g_rank == g_size - 1 ? g_size : -1, &h),
               g_size > 1 ? FM_ERR_INVALID_ARGUMENT : FM_OK, "nprow x npcol", "a bad grid on all but one rank");
    fm_dist_grid_destroy(h), h = NULL;
    expect_all(fm_dist_grid_create(MPI_COMM_NULL, 0, 0, &h), FM_ERR_INVALID_ARGUMENT, "MPI_COMM_NULL", "null comm");
    expect_all(fm_dist_grid_create(MPI_COMM_WORLD, 0, 0, NULL), FM_ERR_INVALID_ARGUMENT, "grid is NULL", "NULL out");
    if (g_size >= 2) {
        MPI_Comm half, inter;
        int color = g_rank % 2;
        MPI_Comm_split(MPI_COMM_WORLD, color, g_rank, &half);
        MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, color ? 0 : 1, 7, &inter);
        expect_all(fm_dist_grid_create(inter, 0, 0, &h), FM_ERR_INVALID_ARGUMENT, "inter-communicator", "intercomm");
        MPI_Comm_free(&inter);
        MPI_Comm_free(&half);
        /* a 1 x size grid, given */
        expect_all(fm_dist_grid_create(MPI_COMM_WORLD, 1, g_size, &h), FM_OK, NULL, "1 x size grid");
        if (h)
            run_solve(h, 1, 30, 2, 4);
        fm_dist_grid_destroy(h), h = NULL;
    }
    /* a grid of one rank on each rank: every rank its own solve */
    expect_all(fm_dist_grid_create(MPI_COMM_SELF, 0, 0, &h), FM_OK, NULL, "self grid");
    fm_dist_matrix a, b;
    if (h && fm_dist_matrix_init(h, 9, 9, 4, 4, &a) == FM_OK && fm_dist_matrix_init(h, 9, 1, 4, 4, &b) == FM_OK) {
        double *da = calloc(81, sizeof(double)), *db = calloc(9, sizeof(double));
        for (int i = 0; i < 9; i++)
            da[i * 9 + i] = 2.0 + i, db[i] = 1.0 + g_rank;
        a.data = da, b.data = db;
        CHECK(fm_dist_solve(h, FM_F64, &a, &b) == FM_OK, "self solve: %s", fm_last_error());
        for (int i = 0; i < 9; i++)
            CHECK(fabs(db[i] - (1.0 + g_rank) / (2.0 + i)) < 1e-14, "self solve x[%d] = %g", i, db[i]);
        free(da), free(db);
    }
    fm_dist_grid_destroy(h);
    fm_dist_grid_destroy(NULL);
}

static void test_bad_input(const fm_dist_grid *g)
{
    bad_matmul(g);
    bad_solvers(g);
    bad_grids();
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv);
    fm_dist_grid *g = NULL;
    fm_status st = fm_dist_grid_create(MPI_COMM_WORLD, 0, 0, &g);
    if (st == FM_ERR_UNAVAILABLE) {
        if (g_rank == 0)
            printf("test_dist_scalapack: skipped: %s\n", fm_last_error());
        MPI_Finalize();
        return 77;
    }
    CHECK(st == FM_OK, "grid: %s", fm_last_error());
    if (st == FM_OK) {
        int pr, pc, r, c;
        fm_dist_grid_shape(g, &pr, &pc, &r, &c);
        CHECK(pr * pc == g_size && pr <= pc && r == g_rank / pc && c == g_rank % pc,
              "grid %d x %d, this rank at (%d, %d)", pr, pc, r, c);
        test_matmul(g);
        test_solvers(g);
        test_bad_input(g);
    }
    fm_dist_grid_destroy(g);
    return mpi_test_finish("test_dist_scalapack");
}
