/* lapack_solve.c : the dense solvers on the CPU, LAPACKE of the chosen OpenBLAS (blas_provider.c).
 *
 * Per batch entry: the operands are gathered into column-major scratch once (LAPACK overwrites
 * its inputs, so the copy is needed whatever the layout; tiled, so a row-major matrix transposes
 * at memory speed), the routine runs, and the results are scattered into the C-contiguous outputs.
 * Threads: a batch of small matrices is split over the pool (single-threaded LAPACK per entry);
 * one or a few large matrices run one at a time with OpenBLAS's threads. A failure of an entry
 * (info > 0: singular, not positive definite, no convergence) is reported for the lowest failing
 * batch index, as numpy.linalg does, or only recorded in the info output (check = 0). */
#include "blas_provider.h"
#include "cpu_matmul.h"
#include "lapack_layout.h"

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COL_MAJOR 102 /* LAPACK_COL_MAJOR */
#define WORK_MEMORY_ERROR (-1010)
#define SMALL_N 512 /* up to here a batch is split over threads (docs/design.md, "Dense solvers") */
#define SMALL_THREADED 128 /* one matrix below this runs on one thread */

typedef int32_t lint;
typedef lint (*getrf_fn)(int, lint, lint, void *, lint, lint *);
typedef lint (*getrs_fn)(int, char, lint, lint, const void *, lint, const lint *, void *, lint);
typedef lint (*potrf_fn)(int, char, lint, void *, lint);
typedef lint (*potrs_fn)(int, char, lint, lint, const void *, lint, void *, lint);
typedef lint (*trtrs_fn)(int, char, char, char, lint, lint, const void *, lint, void *, lint);
typedef lint (*getri_fn)(int, lint, void *, lint, const lint *);
typedef lint (*syevd_fn)(int, char, char, lint, void *, lint, void *);
typedef lint (*geqrf_fn)(int, lint, lint, void *, lint, void *);
typedef lint (*orgqr_fn)(int, lint, lint, lint, void *, lint, const void *);
typedef lint (*gesdd_fn)(int, char, lint, lint, void *, lint, void *, void *, lint, void *, lint);
typedef lint (*gelsd_s_fn)(int, lint, lint, lint, void *, lint, void *, lint, void *, float, lint *);
typedef lint (*gelsd_d_fn)(int, lint, lint, lint, void *, lint, void *, lint, void *, double, lint *);

enum { FAIL_NONE, FAIL_INFO, FAIL_FINITE, FAIL_IPIV, FAIL_LAPACK, FAIL_MEMORY };

typedef struct {
    int kind;
    int64_t batch;  /* entry */
    int64_t value;  /* info, the bad pivot's position, the slot */
    int64_t extra;  /* the bad pivot's value */
} entry_fail;

typedef struct {
    const fm_problem *p;
    const fm_solve_params *sp;
    int ti;          /* 0 s, 1 d, 2 c, 3 z */
    size_t es, rs;   /* element size; its real type's */
    int64_t lda, ldb;
    size_t work;     /* scratch bytes per entry */
    int threads, over_batch;
    /* a gathered as a^T (the C-order matrix read as column-major: contiguous copies, no transpose),
     * the routine told so (getrs 'T', the other triangle); the results come out in C order as they are */
    int at;
    int direct; /* a read-only a (getrs, potrs, trtrs) already column-major: LAPACK reads it in place */
} solve_impl;

typedef struct {
    const solve_impl *x;
    void *const *ptrs;
    int64_t chunk;   /* entries per item */
    entry_fail *fails; /* per item */
    int par;         /* threads for one entry's copies and checks (1 where entries run in parallel) */
} solve_call;

/* ---- layout ---- */
static void gather_slot(const solve_call *c, int slot, int64_t b, char *dst, int64_t ld, int64_t rows,
                        int64_t cols, int transposed)
{
    const fm_tensor *t = &c->x->p->t[slot];
    const char *base = (const char *)c->ptrs[slot] + fm_solve_batch_offset(c->x->p, slot, b) * (int64_t)c->x->es;
    const int64_t rs = t->strides[t->ndim - 2], cs = t->strides[t->ndim - 1];
    if (transposed) /* square: a^T's rows are a's columns */
        fm_lapack_gather(c->par, dst, ld, base, cs, rs, cols, rows, c->x->es);
    else
        fm_lapack_gather(c->par, dst, ld, base, rs, cs, rows, cols, c->x->es);
}

/* dst (C-contiguous n x n) = the column-major n x n at src read row by row: (src's matrix)^T; the
 * rows are contiguous copies (gather's column-at-a-time case with dst's rows as its columns). */
static void copy_rows(int par, char *dst, const char *src, int64_t ld, int64_t n, size_t es)
{
    fm_lapack_gather(par, dst, n, src, 1, ld, n, n, es);
}

static char *out_at(const solve_call *c, int slot, int64_t b, int64_t per_entry, size_t es)
{
    return (char *)c->ptrs[slot] + (size_t)(b * per_entry) * es;
}

/* Output matrix slot of entry b = column-major rows x cols buf: column copies into a factor stored
 * column-major (solve_problem.c allows that for it), else the transposing scatter into C order. */
static void put_matrix(const solve_call *c, int slot, int64_t b, const char *buf, int64_t ld, int64_t rows,
                       int64_t cols)
{
    const fm_tensor *t = &c->x->p->t[slot];
    char *dst = out_at(c, slot, b, rows * cols, c->x->es);
    if (rows * cols > 0 && t->strides[t->ndim - 2] == 1 && rows > 1)
        fm_lapack_gather(c->par, dst, rows, buf, 1, ld, rows, cols, c->x->es);
    else
        fm_lapack_scatter(c->par, dst, buf, ld, rows, cols, c->x->es);
}

/* re + i im (CMPLX is C11 but not every compiler's libc has it: clang on glibc 2.36 lacked it) */
static inline double complex make_cplx(double re, double im)
{
    double complex z;
    ((double *)&z)[0] = re, ((double *)&z)[1] = im;
    return z;
}

static double complex elem(const solve_impl *x, const char *w, int64_t at)
{
    switch (x->ti) {
    case 0: return ((const float *)w)[at];
    case 1: return ((const double *)w)[at];
    case 2: return make_cplx(((const float *)w)[2 * at], ((const float *)w)[2 * at + 1]);
    default: return make_cplx(((const double *)w)[2 * at], ((const double *)w)[2 * at + 1]);
    }
}

static void put(const solve_impl *x, char *dst, int64_t at, double complex v, int real)
{
    if (real || x->ti < 2) {
        if (x->rs == 4)
            ((float *)dst)[at] = (float)creal(v);
        else
            ((double *)dst)[at] = creal(v);
    } else if (x->rs == 4) {
        ((float *)dst)[2 * at] = (float)creal(v), ((float *)dst)[2 * at + 1] = (float)cimag(v);
    } else {
        ((double *)dst)[2 * at] = creal(v), ((double *)dst)[2 * at + 1] = cimag(v);
    }
}

static void identity(const solve_impl *x, char *dst, int64_t n)
{
    memset(dst, 0, (size_t)(n * n) * x->es);
    for (int64_t i = 0; i < n; i++)
        put(x, dst, i * n + i, 1.0, 0);
}

/* ---- one batch entry ---- */
typedef struct {
    char *a, *b, *tau, *u, *vt, *s;
    lint *ipiv;
    int64_t lda; /* a's: the scratch's, or the caller's column-major matrix's (direct) */
} scratch;

static int lapack_status(lint info, entry_fail *f, int64_t b)
{
    if (info >= 0)
        return 0;
    f->kind = info == WORK_MEMORY_ERROR ? FAIL_MEMORY : FAIL_LAPACK;
    f->batch = b, f->value = info;
    return -1;
}

/* Pivots of slot ipiv (int64, 1-based) into w->ipiv, each checked to be a row of a. */
static int read_pivots(const solve_call *c, int64_t b, lint *ipiv, entry_fail *f)
{
    const fm_tensor *t = &c->x->p->t[FM_SOLVE_IPIV];
    const int64_t *src = (const int64_t *)c->ptrs[FM_SOLVE_IPIV] + fm_solve_batch_offset(c->x->p, FM_SOLVE_IPIV, b);
    const int64_t n = c->x->sp->n, st = t->strides[t->ndim - 1];
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = src[i * st];
        if (v < 1 || v > n) {
            f->kind = FAIL_IPIV, f->batch = b, f->value = i, f->extra = v;
            return -1;
        }
        ipiv[i] = (lint)v;
    }
    return 0;
}

/* det / slogdet from column-major LU w and its pivots. */
static void determinant(const solve_call *c, int64_t b, const scratch *w, lint info)
{
    const solve_impl *x = c->x;
    const int64_t n = x->sp->n;
    double complex sign = 1.0;
    double logabs = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double complex d = elem(x, w->a, i + i * w->lda);
        const double ad = cabs(d);
        if (ad == 0.0 || info > 0) {
            sign = 0.0, logabs = -INFINITY;
            break;
        }
        sign *= (w->ipiv[i] != i + 1 ? -1.0 : 1.0) * (x->ti >= 2 ? d / ad : (creal(d) < 0 ? -1.0 : 1.0));
        logabs += log(ad);
    }
    if (x->sp->routine == FM_SOLVE_DET) {
        put(x, out_at(c, FM_SOLVE_W, b, 1, x->es), 0, sign * exp(logabs), 0);
    } else {
        put(x, out_at(c, FM_SOLVE_AUX, b, 1, x->es), 0, sign, 0);
        put(x, out_at(c, FM_SOLVE_W, b, 1, x->rs), 0, logabs, 1);
    }
}

static lint run_lu_family(const solve_call *c, int64_t b, scratch *w, entry_fail *f)
{
    const solve_impl *x = c->x;
    const fm_solve_params *sp = x->sp;
    const fm_lapack *L = &fm_blas_lib.lapack;
    const int t = x->ti;
    const lint n = (lint)sp->n, k = (lint)sp->nrhs, lda = (lint)w->lda, ldb = (lint)x->ldb;
    lint info = 0;
    const int factored = (sp->routine == FM_SOLVE_GETRS || sp->routine == FM_SOLVE_DET ||
                          sp->routine == FM_SOLVE_SLOGDET) && (x->p->present & 1u << FM_SOLVE_IPIV);
    if (factored && read_pivots(c, b, w->ipiv, f) < 0)
        return -1;
    if (!factored && n > 0 && lapack_status(info = ((getrf_fn)L->getrf[t])(COL_MAJOR, n, n, w->a, lda, w->ipiv), f,
                                            b) < 0)
        return -1;
    switch (sp->routine) {
    case FM_SOLVE_GESV:
    case FM_SOLVE_GETRS:
        if (info == 0 && n > 0 && k > 0) {
            const char tr = x->at ? 'T' : "NTC"[sp->transpose]; /* at: the LU is a^T's (gesv only) */
            if (lapack_status(((getrs_fn)L->getrs[t])(COL_MAJOR, tr, n, k, w->a, lda, w->ipiv,
                                                      w->b, ldb), f, b) < 0)
                return -1;
        }
        put_matrix(c, FM_SOLVE_X, b, w->b, ldb, sp->n, sp->nrhs);
        break;
    case FM_SOLVE_GETRF:
        put_matrix(c, FM_SOLVE_FACTOR, b, w->a, lda, sp->n, sp->n);
        for (int64_t i = 0; i < sp->n; i++)
            ((int64_t *)c->ptrs[FM_SOLVE_PIVOTS])[b * sp->n + i] = w->ipiv[i];
        break;
    case FM_SOLVE_INV:
        if (info == 0 && n > 0 &&
            lapack_status(((getri_fn)L->getri[t])(COL_MAJOR, n, w->a, lda, w->ipiv), f, b) < 0)
            return -1;
        if (x->at) /* (a^T)^-1 read row by row is a^-1 */
            copy_rows(c->par, out_at(c, FM_SOLVE_X, b, sp->n * sp->n, x->es), w->a, lda, sp->n, x->es);
        else
            put_matrix(c, FM_SOLVE_X, b, w->a, lda, sp->n, sp->n);
        break;
    default: /* det, slogdet: a singular matrix has det 0, as NumPy's */
        determinant(c, b, w, info);
        info = 0;
        break;
    }
    return info;
}

/* Reference LAPACK's potrf stops at the first diagonal entry that is not positive or is NaN;
 * OpenBLAS's own potrf does not test for NaN and passes a NaN matrix as factored. The first NaN on
 * the factor's diagonal (1-based), or 0: the info reference LAPACK, and cuSOLVER, give there. */
static lint first_nan_diagonal(const solve_impl *x, const char *a, lint lda, lint n)
{
    for (lint j = 0; j < n; j++)
        if (isnan(creal(elem(x, a, (int64_t)j * (lda + 1)))))
            return j + 1;
    return 0;
}

static lint run_triangular(const solve_call *c, int64_t b, scratch *w, entry_fail *f)
{
    const solve_impl *x = c->x;
    const fm_solve_params *sp = x->sp;
    const fm_lapack *L = &fm_blas_lib.lapack;
    const int t = x->ti;
    const lint n = (lint)sp->n, k = (lint)sp->nrhs, lda = (lint)w->lda, ldb = (lint)x->ldb;
    /* at: the gathered matrix is a^T, whose stored triangle is the other one (a Hermitian a: a^T =
     * conj(a), whose factor read row by row is a's; a real triangular t: solve with t^T's transpose) */
    const char uplo = (sp->uplo != 0) != (x->at != 0) ? 'U' : 'L';
    lint info = 0;
    if (sp->routine == FM_SOLVE_POTRF) {
        if (n > 0 && lapack_status(info = ((potrf_fn)L->potrf[t])(COL_MAJOR, uplo, n, w->a, lda), f, b) < 0)
            return -1;
        if (info == 0)
            info = first_nan_diagonal(x, w->a, lda, n);
        fm_lapack_zero_triangle(c->par, w->a, w->lda, sp->n, sp->n, x->es, uplo == 'U');
        if (x->at)
            copy_rows(c->par, out_at(c, FM_SOLVE_FACTOR, b, sp->n * sp->n, x->es), w->a, lda, sp->n, x->es);
        else
            put_matrix(c, FM_SOLVE_FACTOR, b, w->a, lda, sp->n, sp->n);
        return info;
    }
    if (n > 0 && k > 0) {
        if (sp->routine == FM_SOLVE_POTRS) {
            info = ((potrs_fn)L->potrs[t])(COL_MAJOR, uplo, n, k, w->a, lda, w->b, ldb);
        } else {
            const char tr = x->at ? (sp->transpose == 0 ? 'T' : 'N') : "NTC"[sp->transpose];
            info = ((trtrs_fn)L->trtrs[t])(COL_MAJOR, uplo, tr, sp->unit_diagonal ? 'U' : 'N', n, k, w->a, lda,
                                          w->b, ldb);
        }
        if (lapack_status(info, f, b) < 0)
            return -1;
    }
    put_matrix(c, FM_SOLVE_X, b, w->b, ldb, sp->n, sp->nrhs);
    return info;
}

static lint run_eigh(const solve_call *c, int64_t b, scratch *w, entry_fail *f)
{
    const solve_impl *x = c->x;
    const fm_solve_params *sp = x->sp;
    const lint n = (lint)sp->n;
    lint info = 0;
    if (n > 0 && lapack_status(info = ((syevd_fn)fm_blas_lib.lapack.syevd[x->ti])(COL_MAJOR, sp->values_only ? 'N'
                                       : 'V', sp->uplo ? 'U' : 'L', n, w->a, (lint)x->lda, w->s), f, b) < 0)
        return -1;
    memcpy(out_at(c, FM_SOLVE_W, b, sp->n, x->rs), w->s, (size_t)sp->n * x->rs);
    if (!sp->values_only)
        put_matrix(c, FM_SOLVE_X, b, w->a, x->lda, sp->n, sp->n);
    return info;
}

static lint run_qr(const solve_call *c, int64_t b, scratch *w, entry_fail *f)
{
    const solve_impl *x = c->x;
    const fm_solve_params *sp = x->sp;
    const fm_lapack *L = &fm_blas_lib.lapack;
    const int64_t m = sp->m, n = sp->n, k = m < n ? m : n, rr = sp->qr_mode == 1 ? m : k;
    if (k > 0 && lapack_status(((geqrf_fn)L->geqrf[x->ti])(COL_MAJOR, (lint)m, (lint)n, w->a, (lint)x->lda, w->tau),
                               f, b) < 0)
        return -1;
    /* R: the upper triangle of the first rr rows (complete mode's rows past k are zero) */
    char *r = out_at(c, FM_SOLVE_FACTOR, b, rr * n, x->es);
    fm_lapack_scatter(c->par, r, w->a, x->lda, k, n, x->es); /* the first k rows (tiled), then the zeros below the diagonal */
    for (int64_t i = 1; i < k; i++)
        memset(r + (size_t)(i * n) * x->es, 0, (size_t)fm_min_i64(i, n) * x->es);
    if (rr > k)
        memset(r + (size_t)(k * n) * x->es, 0, (size_t)((rr - k) * n) * x->es);
    if (sp->qr_mode == 2)
        return 0;
    const int64_t qc = sp->qr_mode == 1 ? m : k; /* Q's columns */
    char *q = w->u;                               /* m x qc, leading dimension lda */
    memset(q, 0, (size_t)(x->lda * (qc > 0 ? qc : 1)) * x->es);
    fm_lapack_gather(c->par, q, x->lda, w->a, 1, x->lda, m, k < qc ? k : qc, x->es);
    if (qc > 0 && lapack_status(((orgqr_fn)L->orgqr[x->ti])(COL_MAJOR, (lint)m, (lint)qc, (lint)k, q, (lint)x->lda,
                                                            w->tau), f, b) < 0)
        return -1;
    put_matrix(c, FM_SOLVE_X, b, q, x->lda, m, qc);
    return 0;
}

static lint run_svd(const solve_call *c, int64_t b, scratch *w, entry_fail *f)
{
    const solve_impl *x = c->x;
    const fm_solve_params *sp = x->sp;
    const int64_t m = sp->m, n = sp->n, k = m < n ? m : n;
    const int64_t uc = sp->full_matrices ? m : k, vr = sp->full_matrices ? n : k;
    const char jobz = sp->values_only ? 'N' : sp->full_matrices ? 'A' : 'S';
    lint info = 0;
    if (k > 0) {
        info = ((gesdd_fn)fm_blas_lib.lapack.gesdd[x->ti])(COL_MAJOR, jobz, (lint)m, (lint)n, w->a, (lint)x->lda,
                                                          w->s, w->u, (lint)fm_max_i64(1, m), w->vt,
                                                          (lint)fm_max_i64(1, vr));
        if (lapack_status(info, f, b) < 0)
            return -1;
    }
    memcpy(out_at(c, FM_SOLVE_W, b, k, x->rs), w->s, (size_t)k * x->rs);
    if (sp->values_only)
        return info;
    if (k == 0) { /* an empty matrix: the full bases are identities */
        if (uc)
            identity(x, out_at(c, FM_SOLVE_X, b, m * uc, x->es), m);
        if (vr)
            identity(x, out_at(c, FM_SOLVE_FACTOR, b, vr * n, x->es), n);
        return 0;
    }
    put_matrix(c, FM_SOLVE_X, b, w->u, m, m, uc);
    put_matrix(c, FM_SOLVE_FACTOR, b, w->vt, vr, vr, n);
    return info;
}

static lint run_lstsq(const solve_call *c, int64_t b, scratch *w, entry_fail *f)
{
    const solve_impl *x = c->x;
    const fm_solve_params *sp = x->sp;
    const int64_t m = sp->m, n = sp->n, k = m < n ? m : n, nr = sp->nrhs;
    lint rank = 0, info = 0;
    if (k > 0) { /* no right-hand side: one zero column (the scratch's), so s and rank are still numpy's */
        const fm_lapack *L = &fm_blas_lib.lapack;
        const double rc = sp->rcond;
        const lint nrl = (lint)(nr > 0 ? nr : 1);
        if (x->rs == 4)
            info = ((gelsd_s_fn)L->gelsd[x->ti])(COL_MAJOR, (lint)m, (lint)n, nrl, w->a, (lint)x->lda, w->b,
                                                 (lint)x->ldb, w->s, (float)rc, &rank);
        else
            info = ((gelsd_d_fn)L->gelsd[x->ti])(COL_MAJOR, (lint)m, (lint)n, nrl, w->a, (lint)x->lda, w->b,
                                                 (lint)x->ldb, w->s, rc, &rank);
        if (lapack_status(info, f, b) < 0)
            return -1;
    } else { /* an empty a: x = 0, and every row of b is a residual */
        memset(w->s, 0, (size_t)k * x->rs);
        for (int64_t j = 0; j < nr; j++)
            memset(w->b + (size_t)(j * x->ldb) * x->es, 0, (size_t)n * x->es);
    }
    put_matrix(c, FM_SOLVE_X, b, w->b, x->ldb, n, nr);
    memcpy(out_at(c, FM_SOLVE_W, b, k, x->rs), w->s, (size_t)k * x->rs);
    ((int64_t *)c->ptrs[FM_SOLVE_RANK])[b] = rank;
    char *res = out_at(c, FM_SOLVE_AUX, b, nr, x->rs);
    for (int64_t j = 0; j < nr; j++) { /* numpy: sums of squares of b's rows past n, when rank == n < m */
        double sum = 0.0;
        for (int64_t i = n; m > n && rank == n && i < m; i++) {
            const double complex v = elem(x, w->b, i + j * x->ldb);
            sum += creal(v) * creal(v) + cimag(v) * cimag(v);
        }
        put(x, res, j, sum, 1);
    }
    return info;
}

/* Entry b: gather, check, run; 0, the routine's info > 0, or -1 with f filled. */
static lint run_entry(const solve_call *c, int64_t b, scratch *w, entry_fail *f)
{
    const solve_impl *x = c->x;
    const fm_solve_params *sp = x->sp;
    const uint32_t pr = x->p->present;
    w->lda = x->lda;
    if (x->direct) { /* LAPACK only reads it: the caller's column-major matrix in place */
        const fm_tensor *ta = &x->p->t[FM_SOLVE_A];
        w->a = (char *)c->ptrs[FM_SOLVE_A] + fm_solve_batch_offset(x->p, FM_SOLVE_A, b) * (int64_t)x->es;
        w->lda = fm_max_i64(1, ta->strides[ta->ndim - 1]);
    } else {
        gather_slot(c, FM_SOLVE_A, b, w->a, x->lda, sp->m, sp->n, x->at);
    }
    if (sp->routine == FM_SOLVE_GELSD)
        memset(w->b, 0, (size_t)(x->ldb * fm_max_i64(1, sp->nrhs)) * x->es);
    if (pr & 1u << FM_SOLVE_B)
        gather_slot(c, FM_SOLVE_B, b, w->b, x->ldb, sp->m, sp->nrhs, 0);
    if (sp->check_finite) {
        const int bad_a = !sp->trusted_factor && !fm_lapack_all_finite(c->par, w->a, x->lda, sp->m, sp->n, x->es, x->rs);
        if (bad_a || ((pr & 1u << FM_SOLVE_B) && !fm_lapack_all_finite(c->par, w->b, x->ldb, sp->m, sp->nrhs, x->es, x->rs))) {
            f->kind = FAIL_FINITE, f->batch = b, f->value = bad_a ? FM_SOLVE_A : FM_SOLVE_B;
            return -1;
        }
    }
    /* LAPACK's SVD and eigenvalue iterations need not end on an inf or NaN (zgelsd of the fuzzer's
     * bytes ran for minutes): such an entry did not converge (info 1), as NumPy reports it */
    if ((sp->routine == FM_SOLVE_GESDD || sp->routine == FM_SOLVE_GELSD || sp->routine == FM_SOLVE_SYEVD) &&
        !fm_lapack_all_finite(c->par, w->a, x->lda, sp->m, sp->n, x->es, x->rs))
        return 1;
    switch (sp->routine) {
    case FM_SOLVE_POTRF: case FM_SOLVE_POTRS: case FM_SOLVE_TRTRS: return run_triangular(c, b, w, f);
    case FM_SOLVE_SYEVD: return run_eigh(c, b, w, f);
    case FM_SOLVE_GEQRF: return run_qr(c, b, w, f);
    case FM_SOLVE_GESDD: return run_svd(c, b, w, f);
    case FM_SOLVE_GELSD: return run_lstsq(c, b, w, f);
    default: return run_lu_family(c, b, w, f);
    }
}

/* The columns of the m-row u scratch: svd's U (m x m full, else m x k), qr's Q (complete: m x m). */
static int64_t u_cols(const fm_solve_params *sp)
{
    const int64_t k = sp->m < sp->n ? sp->m : sp->n;
    if (sp->routine == FM_SOLVE_GEQRF)
        return sp->qr_mode == 1 ? sp->m : k;
    return sp->full_matrices && !sp->values_only ? sp->m : k;
}

/* The rows of the vt scratch: svd's Vh (n x n full, else k x n). */
static int64_t v_rows(const fm_solve_params *sp)
{
    const int64_t k = sp->m < sp->n ? sp->m : sp->n;
    return sp->routine == FM_SOLVE_GESDD && sp->full_matrices && !sp->values_only ? sp->n : k;
}

/* The most elements of one array LAPACK indexes with its 32-bit integers: a (m x n), b (ldb x nrhs),
 * and the m x m U / Q of a full svd / complete qr (scratch_layout's parts). */
static int64_t largest_array(const fm_solve_params *sp, int64_t ldb)
{
    int64_t most = fm_max_i64(sp->m * sp->n, ldb * sp->nrhs);
    if (sp->routine == FM_SOLVE_GEQRF || sp->routine == FM_SOLVE_GESDD)
        most = fm_max_i64(most, fm_max_i64(sp->m * u_cols(sp), v_rows(sp) * sp->n));
    return most;
}

/* Scratch per entry, in bytes (each part 64-byte aligned), and its parts at base. */
static size_t scratch_layout(const solve_impl *x, char *base, scratch *w)
{
    const fm_solve_params *sp = x->sp;
    const int64_t m = sp->m, n = sp->n, k = m < n ? m : n, big = m > n ? m : n;
    const size_t es = x->es;
    const size_t parts[7] = {
        (size_t)(x->lda * fm_max_i64(1, n)) * es,                 /* a */
        (size_t)(x->ldb * fm_max_i64(1, sp->nrhs)) * es,          /* b */
        (size_t)fm_max_i64(1, k) * es,                            /* tau */
        (size_t)(fm_max_i64(1, m) * fm_max_i64(1, u_cols(sp))) * es, /* u (svd: U; qr: Q), m rows */
        (size_t)(fm_max_i64(1, v_rows(sp)) * fm_max_i64(1, n)) * es, /* vt (svd: Vh, n columns) */
        (size_t)fm_max_i64(1, big) * x->rs,                        /* s / w */
        (size_t)fm_max_i64(1, n) * sizeof(lint)};                 /* ipiv */
    char **ptr[7] = {&w->a, &w->b, &w->tau, &w->u, &w->vt, &w->s, (char **)&w->ipiv};
    size_t off = 0;
    const int need_uv = sp->routine == FM_SOLVE_GESDD || sp->routine == FM_SOLVE_GEQRF;
    for (int i = 0; i < 7; i++) {
        if ((i == 3 || i == 4) && !need_uv)
            continue;
        if (base)
            *ptr[i] = base + off;
        off += (parts[i] + 63) & ~(size_t)63;
    }
    return off;
}

static void run_chunk(void *arg, int64_t item)
{
    const solve_call *c = arg;
    const solve_impl *x = c->x;
    entry_fail *f = &c->fails[item];
    f->kind = FAIL_NONE;
    char *base = fm_host_scratch_alloc(x->work);
    if (!base) {
        f->kind = FAIL_MEMORY, f->batch = item * c->chunk;
        return;
    }
    scratch w;
    scratch_layout(x, base, &w);
    char *own_a = w.a; /* direct entries point w.a at the caller's matrix */
    const int64_t b0 = item * c->chunk, b1 = fm_min_i64(x->sp->batch_count, b0 + c->chunk);
    int64_t *info_out = (x->p->present & 1u << FM_SOLVE_INFO) ? c->ptrs[FM_SOLVE_INFO] : NULL;
    for (int64_t b = b0; b < b1; b++) {
        entry_fail e = {0};
        w.a = own_a;
        const lint info = run_entry(c, b, &w, &e);
        if (info < 0) {
            *f = e;
            break;
        }
        if (info_out)
            info_out[b] = info;
        if (info > 0 && x->sp->check && f->kind == FAIL_NONE) {
            f->kind = FAIL_INFO, f->batch = b, f->value = info;
            break;
        }
    }
    fm_host_scratch_free(base);
}

static fm_status report(const solve_impl *x, const entry_fail *f)
{
    const fm_solve_params *sp = x->sp;
    const char *rn = fm_solve_routine_name(sp->routine);
    char e[128];
    fm_solve_entry_name(sp, f->kind == FAIL_FINITE && f->value == FM_SOLVE_B ? "b" : f->kind == FAIL_IPIV ? "ipiv" : "a",
               f->batch, e, sizeof e);
    switch (f->kind) {
    case FAIL_FINITE:
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: %s contains infs or NaNs, expected finite values "
                       "(check_finite; %s)", e, rn);
    case FAIL_IPIV:
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: %s has pivot %lld at position %lld, expected 1..%lld "
                       "(lu_factor's 1-based pivots; %s)", e, (long long)f->extra, (long long)f->value,
                       (long long)sp->n, rn);
    case FAIL_MEMORY: return fm_fail(FM_ERR_OUT_OF_MEMORY, "solve: out of host memory for %s's scratch", rn);
    case FAIL_LAPACK:
        return fm_fail(FM_ERR_BACKEND, "solve: LAPACK's %s returned info %lld for %s", rn, (long long)f->value, e);
    default: break;
    }
    return fm_solve_fail_info(sp, f->batch, f->value);
}

static fm_status solve_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)args, (void)stream;
    const solve_impl *x = p->impl;
    const int64_t B = x->sp->batch_count;
    if (B == 0)
        return FM_OK;
    const int items = x->over_batch ? (int)fm_min_i64(x->threads, B) : 1;
    entry_fail fails_small[16];
    entry_fail *fails = items <= 16 ? fails_small : calloc((size_t)items, sizeof *fails);
    if (!fails)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "solve: out of host memory");
    solve_call c = {.x = x, .ptrs = ptrs, .chunk = (B + items - 1) / items, .fails = fails,
                    .par = x->over_batch && items > 1 ? 1 : x->threads};
    if (x->over_batch && items > 1) {
        fm_blas_single_begin();
        fm_pool_run(items, items, run_chunk, &c); /* -1: the caller ran every item itself */
        fm_blas_single_end();
    } else if (x->threads > 1) {
        fm_blas_threads_begin(x->threads);
        run_chunk(&c, 0);
        fm_blas_threads_end();
    } else {
        fm_blas_single_begin();
        run_chunk(&c, 0);
        fm_blas_single_end();
    }
    const entry_fail *first = NULL; /* the lowest failing entry, as a serial loop would stop at */
    for (int i = 0; i < items; i++)
        if (fails[i].kind != FAIL_NONE && (!first || fails[i].batch < first->batch))
            first = &fails[i];
    fm_status s = first ? report(x, first) : FM_OK;
    if (fails != fails_small)
        free(fails);
    return s;
}

static fm_status solve_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    (void)ctx, (void)state;
    const fm_solve_params *sp = &p->u.solve;
    const fm_dtype dt = p->t[FM_SOLVE_A].dtype;
    const int ti = dt == FM_F32 ? 0 : dt == FM_F64 ? 1 : dt == FM_C64 ? 2 : 3;
    const fm_lapack *L = &fm_blas_lib.lapack;
    if (!L->getrf[ti])
        return fm_fail(FM_ERR_NOT_APPLICABLE, "solve cpu/lapack: the chosen OpenBLAS (%s) has no LAPACKE and "
                       "fusemath was built without liblapacke", fm_blas_lib.what);
    const int64_t big = sp->m > sp->n ? sp->m : sp->n;
    /* per array, not big^2: a tall 50000 x 3 lstsq / qr / svd indexes only 150000 elements */
    if (big > INT32_MAX || sp->nrhs > INT32_MAX ||
        largest_array(sp, fm_max_i64(1, sp->routine == FM_SOLVE_GELSD ? big : sp->m)) > INT32_MAX)
        return fm_fail(FM_ERR_TOO_LARGE, "solve: a is %lld x %lld with %lld right-hand sides: past the 32-bit "
                       "indices of LAPACK (LP64) on the cpu", (long long)sp->m, (long long)sp->n,
                       (long long)sp->nrhs);
    solve_impl *x = calloc(1, sizeof *x);
    if (!x)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "solve: out of host memory");
    x->p = &out->problem;
    x->sp = &out->problem.u.solve;
    x->ti = ti;
    x->es = fm_dtype_size(dt);
    x->rs = ti == 0 || ti == 2 ? 4 : 8;
    x->lda = fm_max_i64(1, sp->m);
    x->ldb = fm_max_i64(1, sp->routine == FM_SOLVE_GELSD ? big : sp->m);
    x->work = scratch_layout(x, NULL, &(scratch){0});
    const int real = ti < 2, det_fresh = (sp->routine == FM_SOLVE_DET || sp->routine == FM_SOLVE_SLOGDET) &&
                                         !(p->present & 1u << FM_SOLVE_IPIV);
    const fm_tensor *ta = &p->t[FM_SOLVE_A], *tf = &p->t[FM_SOLVE_FACTOR];
    const int read_only = sp->routine == FM_SOLVE_GETRS || sp->routine == FM_SOLVE_POTRS ||
                          sp->routine == FM_SOLVE_TRTRS;
    x->direct = read_only && (!sp->check_finite || sp->trusted_factor) && sp->n > 0 && ta->strides[ta->ndim - 2] == 1 &&
                ta->strides[ta->ndim - 1] >= sp->n;
    const int factor_f = (p->present & 1u << FM_SOLVE_FACTOR) && tf->strides[tf->ndim - 2] == 1 && sp->n > 1;
    x->at = !x->direct && (sp->routine == FM_SOLVE_GESV || sp->routine == FM_SOLVE_INV ||
                           (sp->routine == FM_SOLVE_POTRF && !factor_f) || det_fresh ||
                           (real && (sp->routine == FM_SOLVE_POTRS || sp->routine == FM_SOLVE_TRTRS)));
    x->threads = (int)fm_max_i64(1, sp->num_threads);
    if (sp->batch_count < 2 && big < SMALL_THREADED)
        x->threads = 1; /* one small matrix: waking OpenBLAS's threads costs more than they give */
    /* small matrices: one per thread; large ones: OpenBLAS's threads inside each */
    x->over_batch = sp->batch_count >= 2 && big <= SMALL_N && x->threads > 1;
    out->impl = x;
    out->execute = solve_execute;
    out->destroy_impl = free;
    for (int i = 0; i < FM_SOLVE_NSLOTS; i++)
        out->required_align[i] = fm_dtype_size(p->t[i].dtype ? p->t[i].dtype : FM_U8);
    fm_plan_set_describe(out, "solve cpu/lapack %s %s %lldx%lld nrhs=%lld batch=%lld threads=%d (%s)%s blas=%s",
                         fm_solve_routine_name(sp->routine), fm_dtype_name(dt), (long long)sp->m, (long long)sp->n,
                         (long long)sp->nrhs, (long long)sp->batch_count, x->threads,
                         x->over_batch ? "over the batch" : "lapack threads",
                         x->direct ? " a in place" : x->at ? " a as a^T" : "", fm_blas_lib.tag);
    return FM_OK;
}

const fm_backend fm_backend_lapack_solve = {
    .name = "lapack",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_SOLVE,
    .priority = 0,
    .plan = solve_plan,
};
