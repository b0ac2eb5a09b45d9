/* dist_blockcyclic.c : the BLACS process grid over the caller's communicator and the 2-D
 * block-cyclic matrices on it (local shapes by numroc, local -> global indices, the checks the
 * ScaLAPACK calls share). The grid comes from Csys2blacs_handle + Cblacs_gridinit on a duplicate of
 * the caller's communicator and goes with Cblacs_gridexit + Cfree_blacs_system_handle: BLACS never
 * initializes or finalizes MPI here (docs/design.md, Distributed). */
#include "dist_scalapack.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

void fm_dist_matrix_vals(const fm_dist_matrix *x, int64_t *vals)
{
    vals[0] = x->m, vals[1] = x->n, vals[2] = x->mb, vals[3] = x->nb;
}

fm_status fm_dist_check_real_dtype(const char *where, fm_dtype dtype)
{
    if (dtype != FM_F32 && dtype != FM_F64)
        return fm_fail(FM_ERR_DTYPE, "%s: dtype = %s; expected f32 or f64 (ScaLAPACK's s / d routines)", where,
                       fm_dtype_name(dtype));
    return FM_OK;
}

fm_status fm_dist_check_disjoint(const char *where, fm_dtype dtype, const char *xname, const fm_dist_matrix *x,
                                 const char *yname, const fm_dist_matrix *y)
{
    if (!x->data || !y->data || x->local_rows * x->local_cols == 0 || y->local_rows * y->local_cols == 0)
        return FM_OK;
    const int64_t es = dtype == FM_F64 ? 8 : 4;
    const char *xl = x->data, *yl = y->data;
    const char *xh = xl + ((x->local_cols - 1) * x->ld + x->local_rows) * es;
    const char *yh = yl + ((y->local_cols - 1) * y->ld + y->local_rows) * es;
    if (xl < yh && yl < xh)
        return fm_fail(FM_ERR_ALIAS, "%s: %s's local block overlaps %s's; they must be separate arrays", where, xname,
                       yname);
    return FM_OK;
}

#if FM_HAVE_SCALAPACK

static int64_t local_count(int64_t n, int64_t nb, int p, int np)
{
    int n32 = (int)n, nb32 = (int)nb, zero = 0;
    return numroc_(&n32, &nb32, &p, &zero, &np);
}

/* fm_dist_check_matrix but for data (fm_dist_matrix_init's matrix has none yet) */
static fm_status check_layout(const char *where, const fm_dist_grid *g, const char *name, const fm_dist_matrix *x)
{
    if (!x)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s is NULL; expected an fm_dist_matrix (fm_dist_matrix_init)",
                       where, name);
    if (x->m < 1 || x->n < 1)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s is %lld x %lld; expected a global shape of at least 1 x 1",
                       where, name, (long long)x->m, (long long)x->n);
    if (x->m > INT_MAX || x->n > INT_MAX)
        return fm_fail(FM_ERR_TOO_LARGE, "%s: %s is %lld x %lld; ScaLAPACK's indices hold at most %d", where, name,
                       (long long)x->m, (long long)x->n, INT_MAX);
    if (x->mb < 1 || x->nb < 1 || x->mb > INT_MAX || x->nb > INT_MAX)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s's blocks are %lld x %lld; expected block sizes from 1 to %d "
                       "(fm_dist_matrix_init takes 0 for %d)", where, name, (long long)x->mb, (long long)x->nb,
                       INT_MAX, FM_DIST_DEFAULT_BLOCK);
    int64_t lr = local_count(x->m, x->mb, g->myrow, g->nprow), lc = local_count(x->n, x->nb, g->mycol, g->npcol);
    if (x->local_rows != lr || x->local_cols != lc)
        return fm_fail(FM_ERR_SHAPE, "%s: %s's local block is %lld x %lld on grid process (%d, %d), but a %lld x %lld "
                       "matrix in %lld x %lld blocks on a %d x %d grid puts %lld x %lld there (fm_dist_matrix_init)",
                       where, name, (long long)x->local_rows, (long long)x->local_cols, g->myrow, g->mycol,
                       (long long)x->m, (long long)x->n, (long long)x->mb, (long long)x->nb, g->nprow, g->npcol,
                       (long long)lr, (long long)lc);
    if (x->ld < (lr > 1 ? lr : 1) || x->ld > INT_MAX)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s->ld = %lld; expected from max(1, local_rows) = %lld to %d",
                       where, name, (long long)x->ld, (long long)(lr > 1 ? lr : 1), INT_MAX);
    return FM_OK;
}

fm_status fm_dist_check_matrix(const char *where, const fm_dist_grid *g, const char *name, const fm_dist_matrix *x)
{
    fm_status st = check_layout(where, g, name, x);
    if (st == FM_OK && !x->data && x->local_rows * x->local_cols > 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s->data is NULL but this rank's block of it is %lld x %lld",
                       where, name, (long long)x->local_rows, (long long)x->local_cols);
    return st;
}

void fm_dist_descriptor(const fm_dist_grid *g, const fm_dist_matrix *x, int desc[9])
{
    /* DTYPE_ = 1 (dense block-cyclic), CTXT_, M_, N_, MB_, NB_, RSRC_, CSRC_, LLD_ */
    const int d[9] = {1, g->ctxt, (int)x->m, (int)x->n, (int)x->mb, (int)x->nb, 0, 0, (int)x->ld};
    memcpy(desc, d, sizeof d);
}

/* nprow x npcol for size ranks: the largest divisor of size up to its square root, by npcol */
static void near_square(int size, int *nprow, int *npcol)
{
    int r = 1;
    for (int i = 1; (long)i * i <= size; i++)
        if (size % i == 0)
            r = i;
    *nprow = r;
    *npcol = size / r;
}

static fm_status check_grid_shape(const char *where, int size, int *nprow, int *npcol)
{
    if (*nprow == 0 && *npcol == 0) {
        near_square(size, nprow, npcol);
        return FM_OK;
    }
    if (*nprow < 1 || *npcol < 1 || (long)*nprow * *npcol != size)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: nprow x npcol = %d x %d; expected both 0 (near-square) or a "
                       "grid of exactly comm's %d ranks", where, *nprow, *npcol, size);
    return FM_OK;
}

fm_status fm_dist_grid_create(MPI_Comm comm, int nprow, int npcol, fm_dist_grid **grid)
{
    static const char where[] = "fm_dist_grid_create";
    if (!grid)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: grid is NULL; expected where to store the handle", where);
    *grid = NULL;
    int rank, size;
    fm_status st = fm_dist_check_comm(where, comm, &rank, &size);
    if (st != FM_OK)
        return st; /* the same on every rank of comm: none waits */
    st = check_grid_shape(where, size, &nprow, &npcol);
    fm_dist_grid *g = st == FM_OK ? calloc(1, sizeof *g) : NULL;
    if (st == FM_OK && !g)
        st = fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory", where);
    if ((st = fm_dist_agree(comm, st)) == FM_OK) {
        static const char *const names[2] = {"nprow", "npcol"};
        const int64_t vals[2] = {nprow, npcol};
        st = fm_dist_check_same(where, comm, vals, names, 2);
    }
    if (st != FM_OK) {
        free(g);
        return st;
    }
    MPI_Comm_dup(comm, &g->comm);
    g->rank = rank, g->size = size;
    g->sys = Csys2blacs_handle(g->comm);
    g->ctxt = g->sys; /* in: the system handle; out: the grid's context */
    char order[] = "Row";
    Cblacs_gridinit(&g->ctxt, order, nprow, npcol);
    Cblacs_gridinfo(g->ctxt, &g->nprow, &g->npcol, &g->myrow, &g->mycol);
    int bad = g->ctxt < 0 || g->nprow != nprow || g->npcol != npcol || g->myrow < 0 || g->mycol < 0;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, g->comm);
    if (bad) {
        if (g->ctxt >= 0)
            Cblacs_gridexit(g->ctxt);
        Cfree_blacs_system_handle(g->sys);
        MPI_Comm_free(&g->comm);
        free(g);
        return fm_fail(FM_ERR_BACKEND, "%s: Cblacs_gridinit did not make the %d x %d grid of %d ranks", where, nprow,
                       npcol, size);
    }
    *grid = g;
    return FM_OK;
}

void fm_dist_grid_destroy(fm_dist_grid *grid)
{
    if (!grid)
        return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) { /* after MPI_Finalize only the memory can go */
        Cblacs_gridexit(grid->ctxt);
        Cfree_blacs_system_handle(grid->sys);
        MPI_Comm_free(&grid->comm);
    }
    free(grid);
}

fm_status fm_dist_grid_shape(const fm_dist_grid *grid, int *nprow, int *npcol, int *myrow, int *mycol)
{
    if (!grid)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_dist_grid_shape: grid is NULL; expected fm_dist_grid_create's");
    if (nprow)
        *nprow = grid->nprow;
    if (npcol)
        *npcol = grid->npcol;
    if (myrow)
        *myrow = grid->myrow;
    if (mycol)
        *mycol = grid->mycol;
    return FM_OK;
}

fm_status fm_dist_matrix_init(const fm_dist_grid *grid, int64_t m, int64_t n, int64_t mb, int64_t nb,
                              fm_dist_matrix *mat)
{
    static const char where[] = "fm_dist_matrix_init";
    if (!grid || !mat)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s is NULL", where, grid ? "mat" : "grid");
    fm_dist_matrix x = {m, n, mb ? mb : FM_DIST_DEFAULT_BLOCK, nb ? nb : FM_DIST_DEFAULT_BLOCK, 0, 0, 1, NULL};
    if (x.m >= 1 && x.n >= 1 && x.m <= INT_MAX && x.n <= INT_MAX && x.mb >= 1 && x.nb >= 1 && x.mb <= INT_MAX &&
        x.nb <= INT_MAX) {
        x.local_rows = local_count(x.m, x.mb, grid->myrow, grid->nprow);
        x.local_cols = local_count(x.n, x.nb, grid->mycol, grid->npcol);
        x.ld = x.local_rows > 1 ? x.local_rows : 1;
    }
    fm_status st = check_layout(where, grid, "the matrix", &x);
    if (st == FM_OK)
        *mat = x;
    return st;
}

fm_status fm_dist_matrix_global_index(const fm_dist_grid *grid, const fm_dist_matrix *mat, int axis, int64_t local,
                                      int64_t *global)
{
    static const char where[] = "fm_dist_matrix_global_index";
    if (!grid || !global)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s is NULL", where, grid ? "global" : "grid");
    if (!mat)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: mat is NULL", where);
    /* only the layout matters here (data may not be there yet): checked as fm_dist_matrix_init's */
    fm_dist_matrix x;
    fm_status st = fm_dist_matrix_init(grid, mat->m, mat->n, mat->mb, mat->nb, &x);
    if (st != FM_OK)
        return st;
    if (axis != 0 && axis != 1)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: axis = %d; expected 0 (rows) or 1 (columns)", where, axis);
    int64_t count = axis ? x.local_cols : x.local_rows;
    if (local < 0 || local >= count)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: local = %lld; this rank holds %lld %s of the matrix", where,
                       (long long)local, (long long)count, axis ? "columns" : "rows");
    *global = axis ? fm_dist_l2g(local, x.nb, grid->mycol, grid->npcol) : fm_dist_l2g(local, x.mb, grid->myrow, grid->nprow);
    return FM_OK;
}

#else /* no ScaLAPACK: the same functions, each saying so (the same on every rank: none waits) */

fm_status fm_dist_check_matrix(const char *where, const fm_dist_grid *g, const char *name, const fm_dist_matrix *x)
{
    return fm_fail(FM_ERR_UNAVAILABLE, "%s: %s", where, FM_DIST_NO_SCALAPACK);
}

fm_status fm_dist_grid_create(MPI_Comm comm, int nprow, int npcol, fm_dist_grid **grid)
{
    if (grid)
        *grid = NULL;
    return fm_fail(FM_ERR_UNAVAILABLE, "fm_dist_grid_create: %s", FM_DIST_NO_SCALAPACK);
}

void fm_dist_grid_destroy(fm_dist_grid *grid) { free(grid); }

fm_status fm_dist_grid_shape(const fm_dist_grid *grid, int *nprow, int *npcol, int *myrow, int *mycol)
{
    return fm_fail(FM_ERR_UNAVAILABLE, "fm_dist_grid_shape: %s", FM_DIST_NO_SCALAPACK);
}

fm_status fm_dist_matrix_init(const fm_dist_grid *grid, int64_t m, int64_t n, int64_t mb, int64_t nb,
                              fm_dist_matrix *mat)
{
    return fm_fail(FM_ERR_UNAVAILABLE, "fm_dist_matrix_init: %s", FM_DIST_NO_SCALAPACK);
}

fm_status fm_dist_matrix_global_index(const fm_dist_grid *grid, const fm_dist_matrix *mat, int axis, int64_t local,
                                      int64_t *global)
{
    return fm_fail(FM_ERR_UNAVAILABLE, "fm_dist_matrix_global_index: %s", FM_DIST_NO_SCALAPACK);
}

#endif /* FM_HAVE_SCALAPACK */
