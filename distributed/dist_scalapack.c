/* dist_scalapack.c : matmul (pdgemm / psgemm, the bias and activation applied to each rank's
 * block of D by the core's CPU epilogue passes), solve (p?gesv), cholesky (p?potrf) and its solve
 * (p?potrs) on block-cyclic matrices. Each call checks its arguments on every rank, agrees on the
 * outcome over the grid's communicator (a bad argument on one rank fails the call on all), checks
 * that the ranks pass the same global problem, and only then enters ScaLAPACK. */
#include "dist_scalapack.h"

#include "cpu_epilogue.h" /* fusion/: fm_cpu_add_bias, fm_cpu_activate */
#include "epilogue.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fm_dist_matmul_options_init(fm_dist_matmul_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->alpha = 1.0;
}

#if FM_HAVE_SCALAPACK

#define FM_DIST_DISTRIBUTED_EPILOGUES (FM_EPILOGUE_BIAS | FM_EPILOGUE_FORWARD_ACT_)

static int64_t bits_of(double v)
{
    int64_t k;
    memcpy(&k, &v, sizeof k);
    return k;
}

static fm_status check_grid(const char *where, const fm_dist_grid *g)
{
    return g ? FM_OK : fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: grid is NULL; expected fm_dist_grid_create's", where);
}

static fm_status check_epilogue(const char *where, const fm_dist_matmul_options *o, const void *bias)
{
    unsigned e = o->epilogue;
    char name[160] = "?";
    if (fm_epilogue_validate(e) != FM_OK) {
        char why[FM_DESCRIBE_LEN];
        snprintf(why, sizeof why, "%s", fm_last_error());
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->epilogue = 0x%x: %s", where, e, why);
    }
    fm_epilogue_format(e, name, sizeof name);
    if (e & ~FM_DIST_DISTRIBUTED_EPILOGUES)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "%s: opts->epilogue = %s; a distributed matmul fuses a bias and one of "
                       "relu, gelu, sigmoid, tanh, silu, clamp (aux, scale, dropout and the backward kinds are not "
                       "implemented across ranks)", where, name);
    if ((e & FM_EPILOGUE_BIAS) && !bias)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->epilogue = %s adds a bias but bias is NULL", where, name);
    if (!(e & FM_EPILOGUE_BIAS) && bias)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: bias is given but opts->epilogue = %s has no FM_EPILOGUE_BIAS",
                       where, name);
    if ((e & FM_EPILOGUE_CLAMP) &&
        (!isfinite(o->clamp[0]) || !isfinite(o->clamp[1]) || o->clamp[0] > o->clamp[1]))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->clamp = (%g, %g); expected finite lo <= hi", where,
                       o->clamp[0], o->clamp[1]);
    return FM_OK;
}

static fm_status check_matmul_layouts(const char *where, const fm_dist_matrix *a, const fm_dist_matrix *b,
                                      const fm_dist_matrix *c, const fm_dist_matrix *d)
{
    if (a->n != b->m || d->m != a->m || d->n != b->n)
        return fm_fail(FM_ERR_SHAPE, "%s: a is %lld x %lld, b %lld x %lld, d %lld x %lld; expected a m x k, b k x n "
                       "and d m x n", where, (long long)a->m, (long long)a->n, (long long)b->m, (long long)b->n,
                       (long long)d->m, (long long)d->n);
    if (a->mb != d->mb || b->nb != d->nb || a->nb != b->mb)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: mismatched layouts: blocks a %lld x %lld, b %lld x %lld, d %lld "
                       "x %lld; expected a's mb = d's mb, b's nb = d's nb and a's nb = b's mb", where,
                       (long long)a->mb, (long long)a->nb, (long long)b->mb, (long long)b->nb, (long long)d->mb,
                       (long long)d->nb);
    if (c && (c->m != d->m || c->n != d->n || c->mb != d->mb || c->nb != d->nb))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: mismatched layouts: c is %lld x %lld in %lld x %lld blocks, d "
                       "%lld x %lld in %lld x %lld; expected the same", where, (long long)c->m, (long long)c->n,
                       (long long)c->mb, (long long)c->nb, (long long)d->m, (long long)d->n, (long long)d->mb,
                       (long long)d->nb);
    return FM_OK;
}

/* Every local check of a matmul (no communication). */
static fm_status check_matmul(const char *where, const fm_dist_grid *g, fm_dtype dtype, const fm_dist_matrix *a,
                              const fm_dist_matrix *b, const fm_dist_matrix *c, const void *bias,
                              const fm_dist_matmul_options *o, const fm_dist_matrix *d)
{
    fm_status st = fm_dist_check_real_dtype(where, dtype);
    if (st == FM_OK)
        st = fm_dist_check_matrix(where, g, "a", a);
    if (st == FM_OK)
        st = fm_dist_check_matrix(where, g, "b", b);
    if (st == FM_OK)
        st = fm_dist_check_matrix(where, g, "d", d);
    if (st == FM_OK && c)
        st = fm_dist_check_matrix(where, g, "c", c);
    if (st != FM_OK)
        return st;
    if (!isfinite(o->alpha) || !isfinite(o->beta))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->alpha = %g, opts->beta = %g; expected finite numbers", where,
                       o->alpha, o->beta);
    if (o->beta != 0 && !c)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->beta = %g but c is NULL; give c (it may be d itself)", where,
                       o->beta);
    for (size_t i = 0; i < sizeof o->reserved / sizeof o->reserved[0]; i++)
        if (o->reserved[i])
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->reserved[%zu] = %d; expected 0 "
                           "(fm_dist_matmul_options_init)", where, i, (int)o->reserved[i]);
    if ((st = check_epilogue(where, o, bias)) != FM_OK || (st = check_matmul_layouts(where, a, b, c, d)) != FM_OK)
        return st;
    if ((st = fm_dist_check_disjoint(where, dtype, "d", d, "a", a)) != FM_OK ||
        (st = fm_dist_check_disjoint(where, dtype, "d", d, "b", b)) != FM_OK)
        return st;
    if (c && !(c->data == d->data && c->ld == d->ld)) /* c may be d itself, not part of it */
        st = fm_dist_check_disjoint(where, dtype, "d", d, "c", c);
    return st;
}

/* Collective, after the local checks passed on every rank: the ranks pass the same problem. */
static fm_status same_matmul(const char *where, const fm_dist_grid *g, fm_dtype dtype, const fm_dist_matrix *a,
                             const fm_dist_matrix *b, const fm_dist_matrix *c, const void *bias,
                             const fm_dist_matmul_options *o, const fm_dist_matrix *d)
{
    static const char *const names[] = {"dtype", "a.m", "a.n", "a.mb", "a.nb", "b.m", "b.n", "b.mb", "b.nb", "d.m",
                                        "d.n", "d.mb", "d.nb", "c (given or NULL)", "bias (given or NULL)",
                                        "opts->epilogue", "opts->alpha", "opts->beta", "opts->clamp[0]",
                                        "opts->clamp[1]"};
    int64_t v[20] = {dtype};
    fm_dist_matrix_vals(a, v + 1);
    fm_dist_matrix_vals(b, v + 5);
    fm_dist_matrix_vals(d, v + 9);
    v[13] = c != NULL, v[14] = bias != NULL, v[15] = o->epilogue;
    v[16] = bits_of(o->alpha), v[17] = bits_of(o->beta), v[18] = bits_of(o->clamp[0]), v[19] = bits_of(o->clamp[1]);
    return fm_dist_check_same(where, g->comm, v, names, 20);
}

/* The epilogue on this rank's block of D (column-major local_rows x local_cols, ld): seen by the
 * CPU passes as a row-major panel of local_cols rows of local_rows entries, so the bias, per global
 * column, is one constant per panel row. */
static void local_epilogue(const fm_dist_grid *g, fm_dtype t, const void *bias, const fm_dist_matmul_options *o,
                           fm_dist_matrix *d)
{
    if (d->local_rows == 0 || d->local_cols == 0)
        return;
    const size_t es = t == FM_F64 ? sizeof(double) : sizeof(float);
    if (o->epilogue & FM_EPILOGUE_BIAS) {
        for (int64_t jl = 0; jl < d->local_cols; jl++) {
            fm_cpu_panel p;
            memset(&p, 0, sizeof p);
            p.rows = 1, p.cols = d->local_rows, p.ldd = d->ld;
            p.d = (char *)d->data + (size_t)(jl * d->ld) * es;
            p.bias = (const char *)bias + (size_t)fm_dist_l2g(jl, d->nb, g->mycol, g->npcol) * es;
            p.bias_cs = 0; /* the column's one value along the panel row */
            fm_cpu_add_bias(t, &p);
        }
    }
    unsigned act = o->epilogue & FM_EPILOGUE_FORWARD_ACT_;
    if (act) {
        fm_cpu_panel p;
        memset(&p, 0, sizeof p);
        p.rows = d->local_cols, p.cols = d->local_rows, p.ldd = d->ld, p.d = d->data;
        p.clamp[0] = o->clamp[0], p.clamp[1] = o->clamp[1];
        fm_cpu_activate(t, act, &p);
    }
}

/* Where ScaLAPACK is handed a local block this rank holds none of: a valid address all the same. */
static double empty_block[1];
#define FM_DIST_DATA(x) ((x)->data ? (x)->data : (void *)empty_block)

fm_status fm_dist_matmul(const fm_dist_grid *grid, fm_dtype dtype, const fm_dist_matrix *a, const fm_dist_matrix *b,
                         const fm_dist_matrix *c, const void *bias, const fm_dist_matmul_options *opts,
                         fm_dist_matrix *d)
{
    static const char where[] = "fm_dist_matmul";
    fm_dist_matmul_options dflt;
    if (!opts) {
        fm_dist_matmul_options_init(&dflt);
        opts = &dflt;
    }
    fm_status st = check_grid(where, grid);
    if (st != FM_OK)
        return st;
    st = fm_dist_agree(grid->comm, check_matmul(where, grid, dtype, a, b, c, bias, opts, d));
    if (st == FM_OK)
        st = same_matmul(where, grid, dtype, a, b, c, bias, opts, d);
    if (st != FM_OK)
        return st;
    const size_t es = dtype == FM_F64 ? sizeof(double) : sizeof(float);
    double beta = c ? opts->beta : 0.0;
    if (beta != 0 && c->data != d->data) /* pdgemm updates D in place: D = C first */
        for (int64_t j = 0; j < d->local_cols; j++)
            memcpy((char *)d->data + (size_t)(j * d->ld) * es, (const char *)c->data + (size_t)(j * c->ld) * es,
                   (size_t)d->local_rows * es);
    int da[9], db[9], dd[9], one = 1, m = (int)d->m, n = (int)d->n, k = (int)a->n;
    fm_dist_descriptor(grid, a, da);
    fm_dist_descriptor(grid, b, db);
    fm_dist_descriptor(grid, d, dd); /* beta = 0: D's entries need not be set (PBLAS) */
    if (dtype == FM_F64) {
        pdgemm_("N", "N", &m, &n, &k, &opts->alpha, FM_DIST_DATA(a), &one, &one, da, FM_DIST_DATA(b), &one, &one, db,
                &beta, FM_DIST_DATA(d), &one, &one, dd);
    } else {
        float al = (float)opts->alpha, be = (float)beta;
        psgemm_("N", "N", &m, &n, &k, &al, FM_DIST_DATA(a), &one, &one, da, FM_DIST_DATA(b), &one, &one, db, &be,
                FM_DIST_DATA(d), &one, &one, dd);
    }
    local_epilogue(grid, dtype, bias, opts, d);
    return FM_OK;
}

/* The local checks of a square system A (factor) with right-hand sides B. */
static fm_status check_system(const char *where, const fm_dist_grid *g, fm_dtype dtype, const char *aname,
                              const fm_dist_matrix *a, const fm_dist_matrix *b)
{
    fm_status st = fm_dist_check_real_dtype(where, dtype);
    if (st == FM_OK)
        st = fm_dist_check_matrix(where, g, aname, a);
    if (st == FM_OK && b)
        st = fm_dist_check_matrix(where, g, "b", b);
    if (st != FM_OK)
        return st;
    if (a->m != a->n)
        return fm_fail(FM_ERR_SHAPE, "%s: %s is %lld x %lld; expected a square matrix", where, aname, (long long)a->m,
                       (long long)a->n);
    if (a->mb != a->nb)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s's blocks are %lld x %lld; ScaLAPACK's factorizations take "
                       "square blocks (mb = nb)", where, aname, (long long)a->mb, (long long)a->nb);
    if (!b)
        return FM_OK;
    if (b->m != a->n)
        return fm_fail(FM_ERR_SHAPE, "%s: %s is %lld x %lld but b has %lld rows; expected %lld", where, aname,
                       (long long)a->m, (long long)a->n, (long long)b->m, (long long)a->n);
    if (b->mb != a->mb)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: mismatched layouts: b's row blocks are %lld, %s's %lld; expected "
                       "the same", where, (long long)b->mb, aname, (long long)a->mb);
    return fm_dist_check_disjoint(where, dtype, "b", b, aname, a);
}

/* Collective: the ranks pass the same system (extra: upper, or -1). */
static fm_status same_system(const char *where, const fm_dist_grid *g, fm_dtype dtype, const fm_dist_matrix *a,
                             const fm_dist_matrix *b, int extra)
{
    static const char *const names[] = {"dtype", "a.m", "a.n", "a.mb", "a.nb", "upper", "b.m", "b.n", "b.mb", "b.nb"};
    int64_t v[10] = {dtype};
    fm_dist_matrix_vals(a, v + 1);
    v[5] = extra;
    if (b)
        fm_dist_matrix_vals(b, v + 6);
    return fm_dist_check_same(where, g->comm, v, names, b ? 10 : 6);
}

/* ScaLAPACK's info, the same on every rank (the routines say it is global; made so regardless). */
static int agreed_info(const fm_dist_grid *g, int info)
{
    int lo = info, hi = info;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, g->comm);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, g->comm);
    return lo < 0 ? lo : hi;
}

static fm_status bad_info(const char *where, const char *routine, int info)
{
    return fm_fail(FM_ERR_INTERNAL, "%s: %s rejected its argument %d (a check of fusemath's missed it)", where,
                   routine, -info);
}

fm_status fm_dist_solve(const fm_dist_grid *grid, fm_dtype dtype, fm_dist_matrix *a, fm_dist_matrix *b)
{
    static const char where[] = "fm_dist_solve";
    fm_status st = check_grid(where, grid);
    if (st != FM_OK)
        return st;
    st = check_system(where, grid, dtype, "a", a, b);
    if (st == FM_OK && !b)
        st = fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: b is NULL; expected the right-hand sides", where);
    int *ipiv = NULL; /* LOCr(M_A) + MB_A entries (pdgesv) */
    if (st == FM_OK && !(ipiv = malloc(sizeof(int) * (size_t)(a->local_rows + a->mb))))
        st = fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for the pivots", where);
    if ((st = fm_dist_agree(grid->comm, st)) == FM_OK)
        st = same_system(where, grid, dtype, a, b, -1);
    if (st != FM_OK) {
        free(ipiv);
        return st;
    }
    int da[9], db[9], one = 1, n = (int)a->n, nrhs = (int)b->n, info = 0;
    fm_dist_descriptor(grid, a, da);
    fm_dist_descriptor(grid, b, db);
    if (dtype == FM_F64)
        pdgesv_(&n, &nrhs, FM_DIST_DATA(a), &one, &one, da, ipiv, FM_DIST_DATA(b), &one, &one, db, &info);
    else
        psgesv_(&n, &nrhs, FM_DIST_DATA(a), &one, &one, da, ipiv, FM_DIST_DATA(b), &one, &one, db, &info);
    free(ipiv);
    info = agreed_info(grid, info);
    if (info > 0)
        return fm_fail(FM_ERR_LINALG, "%s: a is singular: U[%d, %d] of its LU factorization is exactly zero (%s info "
                       "%d)", where, info - 1, info - 1, dtype == FM_F64 ? "pdgesv" : "psgesv", info);
    return info < 0 ? bad_info(where, dtype == FM_F64 ? "pdgesv" : "psgesv", info) : FM_OK;
}

static fm_status check_upper(const char *where, int upper)
{
    return upper == 0 || upper == 1
               ? FM_OK
               : fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: upper = %d; expected 0 (L L^T) or 1 (U^T U)", where, upper);
}

fm_status fm_dist_cholesky(const fm_dist_grid *grid, fm_dtype dtype, int upper, fm_dist_matrix *a)
{
    static const char where[] = "fm_dist_cholesky";
    fm_status st = check_grid(where, grid);
    if (st != FM_OK)
        return st;
    st = check_upper(where, upper);
    if (st == FM_OK)
        st = check_system(where, grid, dtype, "a", a, NULL);
    if ((st = fm_dist_agree(grid->comm, st)) == FM_OK)
        st = same_system(where, grid, dtype, a, NULL, upper);
    if (st != FM_OK)
        return st;
    int da[9], one = 1, n = (int)a->n, info = 0;
    fm_dist_descriptor(grid, a, da);
    const char *uplo = upper ? "U" : "L";
    if (dtype == FM_F64)
        pdpotrf_(uplo, &n, FM_DIST_DATA(a), &one, &one, da, &info, 1);
    else
        pspotrf_(uplo, &n, FM_DIST_DATA(a), &one, &one, da, &info, 1);
    info = agreed_info(grid, info);
    if (info > 0)
        return fm_fail(FM_ERR_LINALG, "%s: a is not positive definite: its leading minor of order %d is not (%s info "
                       "%d)", where, info, dtype == FM_F64 ? "pdpotrf" : "pspotrf", info);
    return info < 0 ? bad_info(where, dtype == FM_F64 ? "pdpotrf" : "pspotrf", info) : FM_OK;
}

fm_status fm_dist_cho_solve(const fm_dist_grid *grid, fm_dtype dtype, int upper, const fm_dist_matrix *factor,
                            fm_dist_matrix *b)
{
    static const char where[] = "fm_dist_cho_solve";
    fm_status st = check_grid(where, grid);
    if (st != FM_OK)
        return st;
    st = check_upper(where, upper);
    if (st == FM_OK)
        st = check_system(where, grid, dtype, "factor", factor, b);
    if (st == FM_OK && !b)
        st = fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: b is NULL; expected the right-hand sides", where);
    if ((st = fm_dist_agree(grid->comm, st)) == FM_OK)
        st = same_system(where, grid, dtype, factor, b, upper);
    if (st != FM_OK)
        return st;
    int da[9], db[9], one = 1, n = (int)factor->n, nrhs = (int)b->n, info = 0;
    fm_dist_descriptor(grid, factor, da);
    fm_dist_descriptor(grid, b, db);
    const char *uplo = upper ? "U" : "L";
    if (dtype == FM_F64)
        pdpotrs_(uplo, &n, &nrhs, FM_DIST_DATA(factor), &one, &one, da, FM_DIST_DATA(b), &one, &one, db, &info, 1);
    else
        pspotrs_(uplo, &n, &nrhs, FM_DIST_DATA(factor), &one, &one, da, FM_DIST_DATA(b), &one, &one, db, &info, 1);
    info = agreed_info(grid, info);
    return info < 0 ? bad_info(where, dtype == FM_F64 ? "pdpotrs" : "pspotrs", info) : FM_OK;
}

#else /* no ScaLAPACK: each says so, the same on every rank (none waits) */

fm_status fm_dist_matmul(const fm_dist_grid *grid, fm_dtype dtype, const fm_dist_matrix *a, const fm_dist_matrix *b,
                         const fm_dist_matrix *c, const void *bias, const fm_dist_matmul_options *opts,
                         fm_dist_matrix *d)
{
    return fm_fail(FM_ERR_UNAVAILABLE, "fm_dist_matmul: %s", FM_DIST_NO_SCALAPACK);
}

fm_status fm_dist_solve(const fm_dist_grid *grid, fm_dtype dtype, fm_dist_matrix *a, fm_dist_matrix *b)
{
    return fm_fail(FM_ERR_UNAVAILABLE, "fm_dist_solve: %s", FM_DIST_NO_SCALAPACK);
}

fm_status fm_dist_cholesky(const fm_dist_grid *grid, fm_dtype dtype, int upper, fm_dist_matrix *a)
{
    return fm_fail(FM_ERR_UNAVAILABLE, "fm_dist_cholesky: %s", FM_DIST_NO_SCALAPACK);
}

fm_status fm_dist_cho_solve(const fm_dist_grid *grid, fm_dtype dtype, int upper, const fm_dist_matrix *factor,
                            fm_dist_matrix *b)
{
    return fm_fail(FM_ERR_UNAVAILABLE, "fm_dist_cho_solve: %s", FM_DIST_NO_SCALAPACK);
}

#endif /* FM_HAVE_SCALAPACK */
