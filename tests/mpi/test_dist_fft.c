/* test_dist_fft.c : libfusemath_mpi's slab FFTs, run by ctest under mpirun -np 1..4. Every rank
 * makes the same global input, transforms its block, and the blocks are summed into the global
 * result (MPI_Allreduce), which is compared with a naive separable DFT in double (relative max
 * error <= 1e-5 f32 / 1e-12 f64); the inverse must give the input back. Then the bad inputs:
 * each must fail on every rank with the same status. */
#define _POSIX_C_SOURCE 200809L /* M_PI */
#define _DEFAULT_SOURCE
#include <fusemath/fusemath_mpi.h>

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_fft_util.h"

typedef struct {
    int nd;
    int64_t n[3];
    int kind, dbl, out_layout;
    int norm;
    double epi_scale;
    int threads; /* FFTW threads per rank (0: one) */
} tcase;

/* block of side w of the plan as scalars (complex: re, im), from the global complex array gx */
static void *make_block(const fm_dist_plan *p, int w, int real, int dbl, const int64_t *glob, int t, const cd *gx,
                        int64_t *count)
{
    int nd = fm_dist_fft_ndim(p);
    int64_t loc[3], off[3];
    fm_dist_fft_local(p, w, loc, off);
    *count = prod(loc, nd);
    return block_at(nd, loc, off, gx, glob, t, real, dbl, NULL);
}

/* forward transform of case c vs the naive DFT, then the inverse back to the input */
static void run_case(MPI_Comm comm, const tcase *c)
{
    int nd = c->nd;
    const int64_t *n = c->n;
    int64_t total = prod(n, nd), nc[3] = {n[0], n[1], n[2]};
    if (c->kind != FM_FFT_C2C)
        nc[nd - 1] = n[nd - 1] / 2 + 1;
    cd *gx = malloc(sizeof(cd) * (size_t)total);
    for (int64_t i = 0; i < total; i++) /* the same on every rank */
        gx[i] = sin(0.37 * (double)i + 0.1) + (c->kind == FM_FFT_C2C ? I * cos(0.91 * (double)i) : 0);
    fm_dist_fft_options o;
    fm_dist_fft_options_init(&o);
    o.kind = c->kind == FM_FFT_C2C ? FM_FFT_C2C : FM_FFT_R2C;
    o.out_layout = c->out_layout;
    o.norm = c->norm;
    o.num_threads = c->threads;
    if (c->epi_scale != 1)
        o.epilog.ops = FM_FFT_OP_SCALE, o.epilog.scale[0] = c->epi_scale;
    fm_dtype in_dt = o.kind == FM_FFT_C2C ? (c->dbl ? FM_C128 : FM_C64) : (c->dbl ? FM_F64 : FM_F32);
    int64_t loc[3];
    fm_status st = fm_dist_local_shape(comm, nd, n, &o, FM_DIST_IN, loc, NULL);
    CHECK(st == FM_OK, "local_shape: %s", fm_last_error());
    fm_dist_plan *p = NULL, *q = NULL;
    st = fm_dist_fft_plan(comm, nd, n, in_dt, loc, &o, &p);
    CHECK(st == FM_OK, "plan: %s", fm_last_error());
    if (st != FM_OK) {
        free(gx);
        return;
    }
    int real_in = o.kind == FM_FFT_R2C, t = c->out_layout == FM_DIST_TRANSPOSED;
    int64_t m_in, m_out;
    void *xin = make_block(p, FM_DIST_IN, real_in, c->dbl, n, 0, gx, &m_in);
    void *yout = make_block(p, FM_DIST_OUT, 0, c->dbl, nc, t, NULL, &m_out);
    st = fm_dist_fft_execute(p, xin, yout);
    CHECK(st == FM_OK, "execute: %s", fm_last_error());
    /* the reference: the full complex DFT, halved along the last axis for r2c */
    cd *ref = malloc(sizeof(cd) * (size_t)total);
    memcpy(ref, gx, sizeof(cd) * (size_t)total);
    naive_dft(ref, nd, n, -1);
    double norm = c->norm == FM_FFT_NORM_ORTHO ? 1 / sqrt((double)total) : c->norm == FM_FFT_NORM_FORWARD ? 1.0 / (double)total : 1;
    int64_t tc = prod(nc, nd), last = n[nd - 1], lastc = nc[nd - 1];
    cd *refc = malloc(sizeof(cd) * (size_t)tc);
    for (int64_t i = 0; i < tc; i++)
        refc[i] = ref[(i / lastc) * last + i % lastc] * norm * c->epi_scale;
    cd *y = assemble(comm, p, FM_DIST_OUT, 0, c->dbl, nc, t, yout) ;
    double tol = c->dbl ? 1e-12 : 1e-5;
    if (y) {
        double e = rel_err(y, refc, tc);
        CHECK(e <= tol, "forward %s: relative error %.3g > %.0e", fm_dist_fft_describe(p), e, tol);
    }
    /* inverse from the forward's layout: back to the slab input, times total * norm * scale */
    fm_dist_fft_options oi = o;
    oi.kind = c->kind == FM_FFT_C2C ? FM_FFT_C2C : FM_FFT_C2R;
    oi.inverse = 1, oi.in_layout = c->out_layout, oi.out_layout = FM_DIST_SLAB;
    oi.epilog.ops = 0, oi.epilog.scale[0] = 1, oi.norm = FM_FFT_NORM_FORWARD; /* unscaled inverse */
    int64_t loc_i[3];
    fm_dist_fft_local(p, FM_DIST_OUT, loc_i, NULL);
    st = fm_dist_fft_plan(comm, nd, n, fm_dist_fft_out_dtype(p), loc_i, &oi, &q);
    CHECK(st == FM_OK, "inverse plan: %s", fm_last_error());
    if (st == FM_OK) {
        int64_t m_back;
        void *back = make_block(q, FM_DIST_OUT, real_in, c->dbl, n, 0, NULL, &m_back);
        CHECK(m_back == m_in, "inverse output block %lld, input block %lld", (long long)m_back, (long long)m_in);
        st = fm_dist_fft_execute(q, yout, back);
        CHECK(st == FM_OK, "inverse execute: %s", fm_last_error());
        cd *xb = assemble(comm, q, FM_DIST_OUT, real_in, c->dbl, n, 0, back);
        if (xb) {
            for (int64_t i = 0; i < total; i++)
                xb[i] /= (double)total * norm * c->epi_scale;
            double e = rel_err(xb, gx, total);
            CHECK(e <= tol, "inverse %s: round-trip relative error %.3g > %.0e", fm_dist_fft_describe(q), e, tol);
        }
        free(xb);
        free(back);
    }
    fm_dist_fft_destroy(q);
    fm_dist_fft_destroy(p);
    free(y), free(refc), free(ref), free(xin), free(yout), free(gx);
}

static void test_transforms(void)
{
    static const tcase cases[] = {
        {2, {10, 6, 1}, FM_FFT_C2C, 1, FM_DIST_SLAB, FM_FFT_NORM_BACKWARD, 1, 0},
        {2, {10, 6, 1}, FM_FFT_C2C, 0, FM_DIST_TRANSPOSED, FM_FFT_NORM_BACKWARD, 1, 0},
        {3, {5, 6, 4}, FM_FFT_C2C, 1, FM_DIST_TRANSPOSED, FM_FFT_NORM_ORTHO, 1, 0},
        {3, {5, 6, 4}, FM_FFT_C2C, 0, FM_DIST_SLAB, FM_FFT_NORM_FORWARD, 2.5, 0},
        {2, {3, 8, 1}, FM_FFT_R2C, 1, FM_DIST_SLAB, FM_FFT_NORM_BACKWARD, 1, 0}, /* fewer rows than ranks */
        {2, {9, 7, 1}, FM_FFT_R2C, 0, FM_DIST_TRANSPOSED, FM_FFT_NORM_BACKWARD, 1, 0}, /* odd last axis */
        {3, {6, 5, 9}, FM_FFT_R2C, 1, FM_DIST_TRANSPOSED, FM_FFT_NORM_ORTHO, 1, 0},
        {3, {7, 4, 6}, FM_FFT_R2C, 0, FM_DIST_SLAB, FM_FFT_NORM_BACKWARD, -0.5, 0},
        {3, {16, 12, 10}, FM_FFT_C2C, 1, FM_DIST_SLAB, FM_FFT_NORM_BACKWARD, 1, 2}, /* FFTW's threads */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(MPI_COMM_WORLD, &cases[i]);
}

static void test_bad_input(void)
{
    const int64_t n[2] = {8, 6};
    fm_dist_fft_options o;
    fm_dist_fft_options_init(&o);
    int64_t loc[2];
    fm_dist_local_shape(MPI_COMM_WORLD, 2, n, &o, FM_DIST_IN, loc, NULL);
    fm_dist_plan *p = NULL;
    int last = g_rank == g_size - 1;

    /* the last rank's block does not tile the global shape */
    int64_t bad[2] = {loc[0] + (last ? 1 : 0), loc[1]};
    expect_all(fm_dist_fft_plan(MPI_COMM_WORLD, 2, n, FM_C128, bad, &o, &p), FM_ERR_SHAPE, "does not tile",
               "local shape");
    CHECK(p == NULL, "a failed plan is NULL");
    /* ranks disagreeing on the global shape, on the dtype */
    int64_t n2[2] = {8, last && g_size > 1 ? 7 : 6};
    expect_all(fm_dist_fft_plan(MPI_COMM_WORLD, 2, n2, FM_C128, loc, &o, &p),
               g_size > 1 ? FM_ERR_INVALID_ARGUMENT : FM_OK, g_size > 1 ? "disagree on n[1]" : NULL, "global shape");
    fm_dist_fft_destroy(p), p = NULL;
    expect_all(fm_dist_fft_plan(MPI_COMM_WORLD, 2, n, last && g_size > 1 ? FM_C64 : FM_C128, loc, &o, &p),
               g_size > 1 ? FM_ERR_INVALID_ARGUMENT : FM_OK, g_size > 1 ? "disagree on dtype" : NULL, "dtype");
    fm_dist_fft_destroy(p), p = NULL;
    /* a bad option on one rank only: its message reaches every rank */
    fm_dist_fft_options ob = o;
    if (last)
        ob.epilog.ops = FM_FFT_OP_CALLBACK;
    expect_all(fm_dist_fft_plan(MPI_COMM_WORLD, 2, n, FM_C128, loc, &ob, &p), FM_ERR_NOT_SUPPORTED,
               "not implemented", "callback epilog");
    expect_all(fm_dist_fft_plan(MPI_COMM_WORLD, 2, n, FM_F64, loc, &o, &p), FM_ERR_DTYPE, "c64 or c128",
               "c2c of real data");
    /* NULL input on one rank at execute: every rank fails, none waits in FFTW's all-to-all */
    expect_all(fm_dist_fft_plan(MPI_COMM_WORLD, 2, n, FM_C128, loc, &o, &p), FM_OK, NULL, "good plan");
    double complex *x = calloc((size_t)(loc[0] * loc[1] + 1), sizeof *x);
    double complex *y = calloc((size_t)(loc[0] * loc[1] + 1), sizeof *y);
    expect_all(fm_dist_fft_execute(p, last ? NULL : x, y), FM_ERR_INVALID_ARGUMENT,
               NULL, "NULL input");
    expect_all(fm_dist_fft_execute(p, x, y), FM_OK, NULL, "execute after the failure");
    fm_dist_fft_destroy(p), p = NULL;
    free(x), free(y);
    /* a communicator of one rank works (each rank's own transform) */
    tcase self = {2, {4, 6, 1}, FM_FFT_C2C, 1, FM_DIST_SLAB, FM_FFT_NORM_BACKWARD, 1, 0};
    run_case(MPI_COMM_SELF, &self);
    /* an inter-communicator is refused on every rank */
    if (g_size >= 2) {
        MPI_Comm half, inter;
        int color = g_rank % 2;
        MPI_Comm_split(MPI_COMM_WORLD, color, g_rank, &half);
        MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, color ? 0 : 1, 7, &inter);
        expect_all(fm_dist_fft_plan(inter, 2, n, FM_C128, loc, &o, &p), FM_ERR_INVALID_ARGUMENT, "inter-communicator",
                   "inter-communicator");
        MPI_Comm_free(&inter);
        MPI_Comm_free(&half);
    }
    expect_all(fm_dist_fft_plan(MPI_COMM_NULL, 2, n, FM_C128, loc, &o, &p), FM_ERR_INVALID_ARGUMENT, "MPI_COMM_NULL",
               "null communicator");
    const int64_t n1[1] = {8};
    expect_all(fm_dist_local_shape(MPI_COMM_WORLD, 1, n1, NULL, FM_DIST_IN, loc, NULL), FM_ERR_NOT_SUPPORTED,
               "2 or 3 dimensions", "1-D");
    /* FFTW-MPI mishandles a length-1 second axis (buffer overflows, wrong values): refused on every rank */
    const int64_t unit1[3] = {5, 1, 3}, unit2[2] = {7, 1}, unit0[2] = {1, 5};
    int64_t loc3[3] = {0, 0, 0};
    expect_all(fm_dist_local_shape(MPI_COMM_WORLD, 3, unit1, NULL, FM_DIST_IN, loc3, NULL), FM_ERR_NOT_SUPPORTED,
               "n[1] = 1", "a (5, 1, 3) shape");
    expect_all(fm_dist_fft_plan(MPI_COMM_WORLD, 2, unit2, FM_C128, loc, &o, &p), FM_ERR_NOT_SUPPORTED, "n[1] = 1",
               "a (7, 1) shape");
    fm_dist_fft_options ot = o;
    ot.out_layout = FM_DIST_TRANSPOSED;
    expect_all(fm_dist_fft_plan(MPI_COMM_WORLD, 2, unit0, FM_C128, loc, &ot, &p), FM_ERR_NOT_SUPPORTED,
               "n[0] = 1 with a transposed layout", "a (1, 5) shape transposed out");
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv);
    test_transforms();
    test_bad_input();
    return mpi_test_finish("test_dist_fft");
}
