/* test_solve_cpu.c : the dense solvers on the CPU (core/src/solve_problem.c, backends/cpu/lapack_solve.c).
 *  - LAPACK's residual ratios (each below 30): ||A X - B|| / (n ||A|| ||X|| eps) for solve, lu_solve,
 *    cho_solve and solve_triangular; ||A A^-1 - I|| / (n ||A|| ||A^-1|| eps); ||L L^H - A|| / (n ||A|| eps);
 *    ||Q R - A|| / (n ||A|| eps) and ||Q^H Q - I|| / (n eps); ||A V - V diag(w)|| / (n ||A|| eps);
 *    ||U S Vt - A|| / (n ||A|| eps); on random, positive definite, graded (cond 1e6, f64 1e12),
 *    diagonal and banded matrices at n in {0, 1, 2, 3, 5, 10, 50, 257}, 2-D and batched, every dtype;
 *  - det against the product of a triangular matrix's diagonal; singular and indefinite matrices:
 *    FM_ERR_LINALG naming the batch entry and the pivot / minor, or the info output with check = 0;
 *  - every bad input's status and message; output specs; the plan cache; 8 threads on one plan. */
#define _GNU_SOURCE
#include "check.h"
#define SOLVE_TEST_SEED 12345
#include "solve_test_util.h"

#include <complex.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static fm_context *ctx;
static const fm_device cpu = {FM_DEVICE_CPU, 0};
static const fm_dtype dtypes[] = {FM_F32, FM_F64, FM_C64, FM_C128};

enum { RANDOM, SPD, GRADED, DIAGONAL, BANDED, NTYPES };
static const char *const type_names[] = {"random", "spd", "graded", "diagonal", "banded"};






/* A matrix of the given type, n x n row-major, into c (complex doubles; rounded to dt below). */
static void make_matrix(int type, fm_dtype dt, int64_t n, cplx *c)
{
    const int cx = is_complex(dt);
    const double cond = dt == FM_F64 || dt == FM_C128 ? 1e12 : 1e6;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            cplx v = urand() + (cx ? I * urand() : 0);
            if (type == DIAGONAL && i != j)
                v = 0;
            if (type == BANDED && llabs(i - j) > 2)
                v = 0;
            if (type == GRADED) /* columns scaled from 1 down to 1 / cond */
                v *= pow(cond, -(double)j / (double)(n > 1 ? n - 1 : 1));
            c[i * n + j] = v;
        }
    if (type == SPD) { /* M M^H + n I */
        cplx *m = malloc(sizeof(cplx) * (size_t)(n > 0 ? n * n : 1));
        memcpy(m, c, sizeof(cplx) * (size_t)(n * n));
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                cplx s = i == j ? (double)n : 0;
                for (int64_t k = 0; k < n; k++)
                    s += m[i * n + k] * conj(m[j * n + k]);
                c[i * n + j] = i == j ? creal(s) : s;
            }
        free(m);
    }
}

/* max column sum of |.| (the 1-norm) of rows x cols of dt at p (row-major), less e (or not) */
static double norm1(fm_dtype dt, const void *p, int64_t rows, int64_t cols)
{
    double best = 0;
    for (int64_t j = 0; j < cols; j++) {
        double s = 0;
        for (int64_t i = 0; i < rows; i++)
            s += cabs(get(dt, p, i * cols + j));
        best = s > best ? s : best;
    }
    return best;
}

/* ||A X - B||_1 / (n ||A||_1 ||X||_1 eps), op(A) per trans (0, 1 T, 2 H). */
static double solve_ratio(fm_dtype dt, const void *a, const void *x, const void *b, int64_t n, int64_t k, int trans)
{
    double worst = 0;
    for (int64_t j = 0; j < k; j++) {
        double s = 0;
        for (int64_t i = 0; i < n; i++) {
            cplx r = -get(dt, b, i * k + j);
            for (int64_t l = 0; l < n; l++) {
                cplx e = trans ? get(dt, a, l * n + i) : get(dt, a, i * n + l);
                r += (trans == 2 ? conj(e) : e) * get(dt, x, l * k + j);
            }
            s += cabs(r);
        }
        worst = s > worst ? s : worst;
    }
    const double den = (double)n * norm1(dt, a, n, n) * norm1(dt, x, n, k) * eps_of(dt);
    return den > 0 ? worst / den : worst;
}

static void *alloc_of(fm_dtype dt, int64_t count)
{
    return calloc((size_t)(count > 0 ? count : 1), fm_dtype_size(dt));
}

/* ---- solve, batched, every type, size and dtype ---- */
static void check_solve(fm_dtype dt, int type, int64_t n, int64_t batch)
{
    const int64_t k = 3, nb = batch ? batch : 1;
    void *a = alloc_of(dt, nb * n * n), *b = alloc_of(dt, nb * n * k), *x = alloc_of(dt, nb * n * k);
    cplx *c = malloc(sizeof(cplx) * (size_t)(n * n + 1));
    for (int64_t e = 0; e < nb; e++) {
        make_matrix(type, dt, n, c);
        for (int64_t i = 0; i < n * n; i++)
            set(dt, a, e * n * n + i, c[i]);
        for (int64_t i = 0; i < n * k; i++)
            set(dt, b, e * n * k + i, urand() + (is_complex(dt) ? I * urand() : 0));
    }
    const int64_t sa[3] = {batch, n, n}, sb[3] = {batch, n, k};
    const int off = batch ? 0 : 1;
    fm_tensor ta, tb, tx;
    fm_tensor_init(&ta, a, cpu, dt, 3 - off, sa + off, NULL);
    fm_tensor_init(&tb, b, cpu, dt, 3 - off, sb + off, NULL);
    fm_tensor_init(&tx, x, cpu, dt, 3 - off, sb + off, NULL);
    const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, &tb, NULL, &tx};
    fm_solve_options o;
    fm_solve_options_init(&o);
    CHECK_OK(fm_solve(ctx, t, &o, NULL));
    for (int64_t e = 0; e < nb; e++) {
        const size_t es = fm_dtype_size(dt);
        const double r = solve_ratio(dt, (char *)a + e * n * n * es, (char *)x + e * n * k * es,
                                     (char *)b + e * n * k * es, n, k, 0);
        CHECK_MSG(r < 30, "solve %s %s n=%lld batch %lld entry %lld: ratio %g", fm_dtype_name(dt),
                  type_names[type], (long long)n, (long long)batch, (long long)e, r);
    }
    free(a), free(b), free(x), free(c);
}

static void test_solve_residuals(void)
{
    static const int64_t sizes[] = {0, 1, 2, 3, 5, 10, 50, 257};
    for (int d = 0; d < 4; d++)
        for (int type = 0; type < NTYPES; type++)
            for (int s = 0; s < 8; s++) {
                if (sizes[s] == 257 && type != RANDOM && type != GRADED)
                    continue; /* the largest size twice per dtype is enough time */
                check_solve(dtypes[d], type, sizes[s], 0);
                if (sizes[s] <= 50)
                    check_solve(dtypes[d], type, sizes[s], 3);
            }
}

/* ---- factorizations: one matrix per call through a small helper ---- */
typedef struct {
    fm_dtype dt;
    int64_t n;
    void *a;
} mat;

static mat new_mat(fm_dtype dt, int type, int64_t n)
{
    mat m = {dt, n, alloc_of(dt, n * n)};
    cplx *c = malloc(sizeof(cplx) * (size_t)(n * n + 1));
    make_matrix(type, dt, n, c);
    for (int64_t i = 0; i < n * n; i++)
        set(dt, m.a, i, c[i]);
    free(c);
    return m;
}

static fm_tensor desc(void *p, fm_dtype dt, int nd, int64_t d0, int64_t d1)
{
    fm_tensor t;
    const int64_t s[2] = {d0, d1};
    fm_tensor_init(&t, p, cpu, dt, nd, s, NULL);
    return t;
}

static void test_cholesky_inv_det(void)
{
    static const int64_t sizes[] = {1, 2, 5, 10, 50};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 5; s++) {
            const fm_dtype dt = dtypes[d];
            const int64_t n = sizes[s];
            mat m = new_mat(dt, SPD, n);
            void *l = alloc_of(dt, n * n), *inv = alloc_of(dt, n * n), *prod = alloc_of(dt, n * n);
            fm_tensor ta = desc(m.a, dt, 2, n, n), tl = desc(l, dt, 2, n, n), ti = desc(inv, dt, 2, n, n);
            fm_solve_options o;
            fm_solve_options_init(&o);
            o.routine = FM_SOLVE_POTRF;
            const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, NULL, &tl};
            CHECK_OK(fm_solve(ctx, t, &o, NULL));
            double worst = 0; /* ||L L^H - A|| / (n ||A|| eps), L lower with zeros above */
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) {
                    cplx v = -get(dt, m.a, i * n + j);
                    for (int64_t k = 0; k < n; k++)
                        v += get(dt, l, i * n + k) * conj(get(dt, l, j * n + k));
                    worst = fmax(worst, cabs(v));
                    if (j > i)
                        CHECK(get(dt, l, i * n + j) == 0);
                }
            const double na = norm1(dt, m.a, n, n);
            CHECK_MSG(worst / (n * na * eps_of(dt)) < 30, "cholesky %s n=%lld ratio %g", fm_dtype_name(dt),
                      (long long)n, worst / (n * na * eps_of(dt)));
            o.routine = FM_SOLVE_INV;
            const fm_tensor *t2[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, &ti};
            CHECK_OK(fm_solve(ctx, t2, &o, NULL));
            worst = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) {
                    cplx v = i == j ? -1.0 : 0.0;
                    for (int64_t k = 0; k < n; k++)
                        v += get(dt, m.a, i * n + k) * get(dt, inv, k * n + j);
                    worst = fmax(worst, cabs(v));
                }
            const double ri = worst / (n * na * norm1(dt, inv, n, n) * eps_of(dt));
            CHECK_MSG(ri < 30, "inv %s n=%lld ratio %g", fm_dtype_name(dt), (long long)n, ri);
            /* det and slogdet of the factor L (triangular: the product of its diagonal; f32's
             * det of n = 50 overflows, as NumPy's does, so slogdet carries the comparison there) */
            void *w = alloc_of(dt, 1), *sg = alloc_of(dt, 1), *lg = alloc_of(real_of(dt), 1);
            fm_tensor tl2 = desc(l, dt, 2, n, n), tw = desc(w, dt, 0, 0, 0), tsg = desc(sg, dt, 0, 0, 0),
                      tlg = desc(lg, real_of(dt), 0, 0, 0);
            o.routine = FM_SOLVE_DET;
            const fm_tensor *t3[FM_SOLVE_NSLOTS] = {&tl2, NULL, NULL, NULL, NULL, NULL, NULL, &tw};
            CHECK_OK(fm_solve(ctx, t3, &o, NULL));
            o.routine = FM_SOLVE_SLOGDET;
            const fm_tensor *t4[FM_SOLVE_NSLOTS] = {&tl2, NULL, NULL, NULL, NULL, NULL, NULL, &tlg, &tsg};
            CHECK_OK(fm_solve(ctx, t4, &o, NULL));
            cplx want = 1;
            double logabs = 0;
            for (int64_t i = 0; i < n; i++)
                want *= get(dt, l, i * n + i), logabs += log(cabs(get(dt, l, i * n + i)));
            if (isfinite(cabs(want)) && cabs(want) < 1e30)
                CHECK_MSG(cabs(get(dt, w, 0) - want) <= 100 * n * eps_of(dt) * cabs(want), "det %s n=%lld",
                          fm_dtype_name(dt), (long long)n);
            CHECK_MSG(fabs(creal(get(real_of(dt), lg, 0)) - logabs) <= 100 * n * eps_of(dt) * fmax(1, fabs(logabs)) &&
                          cabs(get(dt, sg, 0) - 1.0) < 1e-5, "slogdet %s n=%lld", fm_dtype_name(dt), (long long)n);
            free(sg), free(lg);
            free(w), free(m.a), free(l), free(inv), free(prod);
        }
}

static void test_qr_eigh_svd(void)
{
    static const int64_t sizes[] = {1, 3, 10, 50};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 4; s++) {
            const fm_dtype dt = dtypes[d], rt = real_of(dt);
            const int64_t n = sizes[s];
            const double e = eps_of(dt);
            mat m = new_mat(dt, SPD, n);
            const double na = norm1(dt, m.a, n, n);
            void *q = alloc_of(dt, n * n), *r = alloc_of(dt, n * n), *w = alloc_of(rt, n), *vt = alloc_of(dt, n * n);
            fm_tensor ta = desc(m.a, dt, 2, n, n), tq = desc(q, dt, 2, n, n), tr = desc(r, dt, 2, n, n),
                      tw = desc(w, rt, 1, n, 0), tv = desc(vt, dt, 2, n, n);
            fm_solve_options o;
            fm_solve_options_init(&o);
            o.routine = FM_SOLVE_GEQRF;
            const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, &tq, &tr};
            CHECK_OK(fm_solve(ctx, t, &o, NULL));
            double wr = 0, wo = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) {
                    cplx v = -get(dt, m.a, i * n + j), g = i == j ? -1.0 : 0.0;
                    for (int64_t k = 0; k < n; k++) {
                        v += get(dt, q, i * n + k) * get(dt, r, k * n + j);
                        g += conj(get(dt, q, k * n + i)) * get(dt, q, k * n + j);
                    }
                    wr = fmax(wr, cabs(v)), wo = fmax(wo, cabs(g));
                }
            CHECK_MSG(wr / (n * na * e) < 30 && wo / (n * e) < 30, "qr %s n=%lld: %g %g", fm_dtype_name(dt),
                      (long long)n, wr / (n * na * e), wo / (n * e));
            o.routine = FM_SOLVE_SYEVD; /* eigenvectors into q */
            const fm_tensor *t2[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, &tq, NULL, NULL, NULL, &tw};
            CHECK_OK(fm_solve(ctx, t2, &o, NULL));
            double we = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) {
                    cplx v = -get(dt, q, i * n + j) * get(rt, w, j);
                    for (int64_t k = 0; k < n; k++)
                        v += get(dt, m.a, i * n + k) * get(dt, q, k * n + j);
                    we = fmax(we, cabs(v));
                }
            for (int64_t j = 1; j < n; j++)
                CHECK(creal(get(rt, w, j - 1)) <= creal(get(rt, w, j)));
            CHECK_MSG(we / (n * na * e) < 30, "eigh %s n=%lld: %g", fm_dtype_name(dt), (long long)n, we / (n * na * e));
            o.routine = FM_SOLVE_GESDD; /* U into q, Vt into vt */
            const fm_tensor *t3[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, &tq, &tv, NULL, NULL, &tw};
            CHECK_OK(fm_solve(ctx, t3, &o, NULL));
            double ws = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++) {
                    cplx v = -get(dt, m.a, i * n + j);
                    for (int64_t k = 0; k < n; k++)
                        v += get(dt, q, i * n + k) * get(rt, w, k) * get(dt, vt, k * n + j);
                    ws = fmax(ws, cabs(v));
                }
            CHECK_MSG(ws / (n * na * e) < 30, "svd %s n=%lld: %g", fm_dtype_name(dt), (long long)n, ws / (n * na * e));
            free(m.a), free(q), free(r), free(w), free(vt);
        }
}

/* lu_factor + lu_solve (every transpose), cho_solve, solve_triangular against their residuals. */
static void test_factored_solves(void)
{
    for (int d = 0; d < 4; d++) {
        const fm_dtype dt = dtypes[d];
        const int64_t n = 10, k = 2;
        mat m = new_mat(dt, RANDOM, n), spd = new_mat(dt, SPD, n);
        void *lu = alloc_of(dt, n * n), *b = alloc_of(dt, n * k), *x = alloc_of(dt, n * k);
        int64_t piv[10];
        for (int64_t i = 0; i < n * k; i++)
            set(dt, b, i, urand());
        fm_tensor ta = desc(m.a, dt, 2, n, n), tlu = desc(lu, dt, 2, n, n), tp = desc(piv, FM_I64, 1, n, 0),
                  tb = desc(b, dt, 2, n, k), tx = desc(x, dt, 2, n, k);
        fm_solve_options o;
        fm_solve_options_init(&o);
        o.routine = FM_SOLVE_GETRF;
        const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, NULL, &tlu, &tp};
        CHECK_OK(fm_solve(ctx, t, &o, NULL));
        for (int tr = 0; tr < 3; tr++) {
            o.routine = FM_SOLVE_GETRS, o.transpose = tr;
            const fm_tensor *t2[FM_SOLVE_NSLOTS] = {&tlu, &tb, &tp, &tx};
            CHECK_OK(fm_solve(ctx, t2, &o, NULL));
            const double r = solve_ratio(dt, m.a, x, b, n, k, tr);
            CHECK_MSG(r < 30, "lu_solve %s trans %d: %g", fm_dtype_name(dt), tr, r);
        }
        /* the factor column-major (strides 1, n): lu_solve reads it in place (describe says so) */
        void *luf = alloc_of(dt, n * n);
        const int64_t sf[2] = {n, n}, stf[2] = {1, n};
        fm_tensor tluf;
        fm_tensor_init(&tluf, luf, cpu, dt, 2, sf, stf);
        fm_solve_options_init(&o);
        o.routine = FM_SOLVE_GETRF;
        const fm_tensor *t6[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, NULL, &tluf, &tp};
        CHECK_OK(fm_solve(ctx, t6, &o, NULL));
        for (int64_t i = 0; i < n * n; i++) /* the same factor as the C-ordered one */
            CHECK(cabs(get(dt, luf, (i % n) * n + i / n) - get(dt, lu, i)) == 0);
        o.routine = FM_SOLVE_GETRS;
        const fm_tensor *t7[FM_SOLVE_NSLOTS] = {&tluf, &tb, &tp, &tx};
        fm_plan *pl = NULL;
        CHECK_OK(fm_solve_plan(ctx, t7, &o, &pl));
        CHECK(pl && fm_test_contains(fm_plan_describe(pl), "a in place"));
        void *ptrs[FM_SOLVE_NSLOTS] = {luf, b, piv, x};
        CHECK_OK(fm_plan_execute(pl, ptrs, FM_SOLVE_NSLOTS, NULL));
        CHECK(solve_ratio(dt, m.a, x, b, n, k, 0) < 30);
        fm_plan_release(pl);
        free(luf);
        /* solve_triangular on lu's upper triangle, cho_solve on the Cholesky factor */
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < i; j++)
                set(dt, lu, i * n + j, 0);
        fm_solve_options_init(&o);
        o.routine = FM_SOLVE_TRTRS, o.uplo = 1;
        const fm_tensor *t3[FM_SOLVE_NSLOTS] = {&tlu, &tb, NULL, &tx};
        CHECK_OK(fm_solve(ctx, t3, &o, NULL));
        CHECK(solve_ratio(dt, lu, x, b, n, k, 0) < 30);
        fm_tensor ts = desc(spd.a, dt, 2, n, n);
        o.routine = FM_SOLVE_POTRF, o.uplo = 0;
        const fm_tensor *t4[FM_SOLVE_NSLOTS] = {&ts, NULL, NULL, NULL, &tlu};
        CHECK_OK(fm_solve(ctx, t4, &o, NULL));
        o.routine = FM_SOLVE_POTRS;
        const fm_tensor *t5[FM_SOLVE_NSLOTS] = {&tlu, &tb, NULL, &tx};
        CHECK_OK(fm_solve(ctx, t5, &o, NULL));
        CHECK(solve_ratio(dt, spd.a, x, b, n, k, 0) < 30);
        free(m.a), free(spd.a), free(lu), free(b), free(x);
    }
}

/* trusted_factor (Solver's own factor): check_finite reads b alone (a NaN in the factor passes, one in b
 * does not), the option is range-checked by name, and a routine that reads no factor ignores it. */
static void test_trusted_factor(void)
{
    const int64_t n = 6, k = 2;
    mat m = new_mat(FM_F64, RANDOM, n);
    double lu[36], b[12], x[12];
    int64_t piv[6];
    for (int i = 0; i < 12; i++)
        b[i] = urand();
    fm_tensor ta = desc(m.a, FM_F64, 2, n, n), tlu = desc(lu, FM_F64, 2, n, n), tp = desc(piv, FM_I64, 1, n, 0),
              tb = desc(b, FM_F64, 2, n, k), tx = desc(x, FM_F64, 2, n, k);
    fm_solve_options o;
    fm_solve_options_init(&o);
    o.routine = FM_SOLVE_GETRF;
    const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, NULL, &tlu, &tp};
    CHECK_OK(fm_solve(ctx, t, &o, NULL));
    o.routine = FM_SOLVE_GETRS, o.check_finite = 1, o.trusted_factor = 1;
    const fm_tensor *t2[FM_SOLVE_NSLOTS] = {&tlu, &tb, &tp, &tx};
    CHECK_OK(fm_solve(ctx, t2, &o, NULL));
    CHECK(solve_ratio(FM_F64, m.a, x, b, n, k, 0) < 30);
    const double keep = lu[7];
    lu[7] = NAN; /* not re-checked: trusted */
    CHECK_OK(fm_solve(ctx, t2, &o, NULL));
    o.trusted_factor = 0; /* checked: refused */
    CHECK_STATUS(fm_solve(ctx, t2, &o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("a contains infs or NaNs");
    lu[7] = keep, b[3] = NAN, o.trusted_factor = 1; /* b is checked whatever the factor */
    CHECK_STATUS(fm_solve(ctx, t2, &o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("b contains infs or NaNs");
    b[3] = 0.5, o.trusted_factor = 2;
    CHECK_STATUS(fm_solve(ctx, t2, &o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("options.trusted_factor = 2, expected 0..1");
    free(m.a);
}

/* A singular entry (a zero row) and an indefinite one: the lowest failing batch entry is named. */
static void test_failures(void)
{
    const int64_t n = 4, B = 3;
    double a[3 * 16], x[3 * 4], bb[3 * 4];
    int64_t info[3];
    for (int i = 0; i < 48; i++)
        a[i] = (i % 16) % 5 == 0 ? 4.0 : 0.5; /* diagonally dominant */
    for (int i = 0; i < 12; i++)
        bb[i] = 1.0;
    for (int j = 0; j < 4; j++)
        a[16 + 2 * 4 + j] = 0; /* entry 1, row 2: zero */
    const int64_t sa[3] = {B, n, n}, sb[3] = {B, n, 1}, si[1] = {B};
    fm_tensor ta, tb, tx, ti;
    fm_tensor_init(&ta, a, cpu, FM_F64, 3, sa, NULL);
    fm_tensor_init(&tb, bb, cpu, FM_F64, 3, sb, NULL);
    fm_tensor_init(&tx, x, cpu, FM_F64, 3, sb, NULL);
    fm_tensor_init(&ti, info, cpu, FM_I64, 1, si, NULL);
    fm_solve_options o;
    fm_solve_options_init(&o);
    const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, &tb, NULL, &tx};
    CHECK_STATUS(fm_solve(ctx, t, &o, NULL), FM_ERR_LINALG);
    CHECK_ERROR_MENTIONS("a[1] is singular");
    o.check = 0;
    const fm_tensor *t2[FM_SOLVE_NSLOTS] = {&ta, &tb, NULL, &tx, NULL, NULL, &ti};
    CHECK_OK(fm_solve(ctx, t2, &o, NULL));
    CHECK(info[0] == 0 && info[1] > 0 && info[2] == 0);
    /* indefinite: entry 2's (1, 1) negative */
    a[32 + 5] = -4.0;
    fm_solve_options_init(&o);
    o.routine = FM_SOLVE_POTRF;
    double l[48];
    fm_tensor tl;
    fm_tensor_init(&tl, l, cpu, FM_F64, 3, sa, NULL);
    a[16 + 2 * 4 + 2] = 4.0; /* entry 1 regular again */
    const fm_tensor *t3[FM_SOLVE_NSLOTS] = {&ta, NULL, NULL, NULL, &tl};
    CHECK_STATUS(fm_solve(ctx, t3, &o, NULL), FM_ERR_LINALG);
    CHECK_ERROR_MENTIONS("a[2] is not positive definite: its leading minor of order 2");
    /* NaN with check_finite */
    a[3] = NAN;
    o.check_finite = 1;
    CHECK_STATUS(fm_solve(ctx, t3, &o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("a[0] contains infs or NaNs");
    /* NaN without check_finite: reference LAPACK's (and cuSOLVER's) outcome, not OpenBLAS's, which
     * passes a NaN diagonal as factored: the first NaN on the diagonal is the failing minor */
    const double keep = a[3];
    a[3] = 0.0, a[5] = NAN; /* entry 0's (1, 1) */
    o.check_finite = 0;
    CHECK_STATUS(fm_solve(ctx, t3, &o, NULL), FM_ERR_LINALG);
    CHECK_ERROR_MENTIONS("a[0] is not positive definite: its leading minor of order 2");
    a[3] = keep;
}

static void test_bad_inputs(void)
{
    double a[64] = {0}, b[16] = {0}, x[16] = {0};
    int64_t piv[4] = {1, 2, 3, 9};
    float f[16];
    int32_t iv[16];
    uint16_t h[16];
    fm_tensor t33 = desc(a, FM_F64, 2, 3, 3), t34 = desc(a, FM_F64, 2, 3, 4), t0 = desc(a, FM_F64, 0, 0, 0),
              tb = desc(b, FM_F64, 2, 3, 1), tb4 = desc(b, FM_F64, 2, 4, 1), tx = desc(x, FM_F64, 2, 3, 1),
              tf = desc(f, FM_F32, 2, 3, 1), ti = desc(iv, FM_I32, 2, 3, 3), th = desc(h, FM_F16, 2, 3, 3),
              tp = desc(piv, FM_I64, 1, 4, 0), tx2 = desc(x, FM_F64, 2, 3, 2);
    fm_tensor t44 = desc(a, FM_F64, 2, 4, 4), tb44 = desc(b, FM_F64, 2, 4, 1), tx44 = desc(x, FM_F64, 2, 4, 1);
    fm_tensor tstr = tx;
    tstr.strides[0] = 5;
    fm_solve_options o;
#define BAD(setup, status, text, ...)                                                                 \
    do {                                                                                              \
        fm_solve_options_init(&o);                                                                    \
        setup;                                                                                        \
        const fm_tensor *t_[FM_SOLVE_NSLOTS] = {__VA_ARGS__};                                         \
        fm_plan *p_ = NULL;                                                                           \
        CHECK_STATUS(fm_solve_plan(ctx, t_, &o, &p_), status);                                        \
        CHECK_ERROR_MENTIONS(text);                                                                   \
        fm_tensor specs_[FM_SOLVE_NSLOTS];                                                            \
        uint32_t w_;                                                                                  \
        CHECK_STATUS(fm_output_specs(FM_OP_SOLVE, t_, FM_SOLVE_NSLOTS, &o, specs_, &w_), status);     \
        fm_plan_release(p_);                                                                          \
    } while (0)
    BAD((void)0, FM_ERR_SHAPE, "a has shape (3, 4), expected square matrices", &t34, &tb, NULL, &tx);
    BAD((void)0, FM_ERR_SHAPE, "a is 0-dimensional", &t0, &tb, NULL, &tx);
    BAD((void)0, FM_ERR_SHAPE, "b has shape (4, 1), expected 3 rows", &t33, &tb4, NULL, &tx);
    BAD((void)0, FM_ERR_DTYPE, "b has dtype float32 but a has float64", &t33, &tf, NULL, &tx);
    BAD((void)0, FM_ERR_DTYPE, "a has dtype int32, expected float32, float64, complex64 or complex128", &ti, &tb,
        NULL, &tx);
    BAD((void)0, FM_ERR_NOT_SUPPORTED, "a has dtype float16", &th, &tb, NULL, &tx);
    BAD((void)0, FM_ERR_INVALID_ARGUMENT, "b is NULL", &t33, NULL, NULL, &tx);
    BAD((void)0, FM_ERR_INVALID_ARGUMENT, "a is NULL", NULL, &tb, NULL, &tx);
    BAD(o.reserved[1] = 3, FM_ERR_INVALID_ARGUMENT, "reserved[1] = 3, expected 0", &t33, &tb, NULL, &tx);
    BAD(o.routine = 99, FM_ERR_INVALID_ARGUMENT, "routine = 99", &t33, &tb, NULL, &tx);
    BAD(o.uplo = 2, FM_ERR_INVALID_ARGUMENT, "uplo = 2, expected 0..1", &t33, &tb, NULL, &tx);
    BAD(o.rcond = NAN, FM_ERR_INVALID_ARGUMENT, "rcond is NaN", &t33, &tb, NULL, &tx);
    BAD(o.refine = 6, FM_ERR_INVALID_ARGUMENT, "refine = 6, expected 0..5", &t33, &tb, NULL, &tx);
    BAD(o.num_threads = -2, FM_ERR_INVALID_ARGUMENT, "num_threads = -2", &t33, &tb, NULL, &tx);
    BAD(o.routine = FM_SOLVE_POTRF, FM_ERR_INVALID_ARGUMENT, "b is given, but cholesky takes no b", &t33, &tb);
    BAD((void)0, FM_ERR_INVALID_ARGUMENT, "info is given, but solve writes no info", &t33, &tb, NULL, &tx, NULL,
        NULL, &tx);
    BAD((void)0, FM_ERR_SHAPE, "x has shape (3, 2), expected (3, 1)", &t33, &tb, NULL, &tx2);
    BAD((void)0, FM_ERR_INVALID_ARGUMENT, "x has stride 5 on axis 0", &t33, &tb, NULL, &tstr);
    BAD(o.routine = FM_SOLVE_GETRS, FM_ERR_INVALID_ARGUMENT, "ipiv is NULL", &t33, &tb, NULL, &tx);
    BAD(o.routine = FM_SOLVE_GETRS, FM_ERR_SHAPE, "ipiv has shape (4,), expected (..., 3)", &t33, &tb, &tp, &tx);
    fm_tensor tpd = desc(piv, FM_F64, 1, 4, 0);
    BAD(o.routine = FM_SOLVE_GETRS, FM_ERR_DTYPE, "ipiv has dtype float64, expected int64", &t44, &tb44, &tpd,
        &tx44);
    /* batch axes that do not broadcast */
    const int64_t s2[3] = {2, 3, 3}, s3[3] = {3, 3, 1};
    fm_tensor ba, bbb, bx;
    fm_tensor_init(&ba, a, cpu, FM_F64, 3, s2, NULL);
    fm_tensor_init(&bbb, b, cpu, FM_F64, 3, s3, NULL);
    fm_tensor_init(&bx, x, cpu, FM_F64, 3, s3, NULL);
    BAD((void)0, FM_ERR_SHAPE, "does not broadcast", &ba, &bbb, NULL, &bx);
    /* a pivot out of range: at execute */
    fm_solve_options_init(&o);
    o.routine = FM_SOLVE_GETRS;
    const fm_tensor *t[FM_SOLVE_NSLOTS] = {&t44, &tb44, &tp, &tx44};
    CHECK_STATUS(fm_solve(ctx, t, &o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("ipiv has pivot 9 at position 3, expected 1..4");
    /* whatever check says (check = 0 writes info, but a bad pivot is no LAPACK info), and for det /
     * slogdet of a factor too: the GPU backend matches this (test_solve_cusolver_gpu.c) */
    int64_t info = 7;
    double w[2];
    fm_tensor tinfo = desc(&info, FM_I64, 0, 0, 0), tw = desc(w, FM_F64, 0, 0, 0), tw2 = desc(w + 1, FM_F64, 0, 0, 0);
    o.check = 0;
    const fm_tensor *t0c[FM_SOLVE_NSLOTS] = {&t44, &tb44, &tp, &tx44, NULL, NULL, &tinfo};
    CHECK_STATUS(fm_solve(ctx, t0c, &o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("ipiv has pivot 9 at position 3, expected 1..4");
    for (int check = 0; check < 2; check++) {
        fm_solve_options_init(&o);
        o.check = check, o.routine = FM_SOLVE_DET;
        const fm_tensor *td[FM_SOLVE_NSLOTS] = {&t44, NULL, &tp, NULL, NULL, NULL, check ? NULL : &tinfo, &tw};
        CHECK_STATUS(fm_solve(ctx, td, &o, NULL), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("ipiv has pivot 9 at position 3");
        o.routine = FM_SOLVE_SLOGDET;
        const fm_tensor *tl[FM_SOLVE_NSLOTS] = {&t44, NULL, &tp, NULL, NULL, NULL, check ? NULL : &tinfo, &tw, &tw2};
        CHECK_STATUS(fm_solve(ctx, tl, &o, NULL), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("(lu_factor's 1-based pivots; slogdet)");
    }
#undef BAD
}

static void test_specs_and_cache(void)
{
    double a[2 * 4 * 6];
    const int64_t s[3] = {2, 4, 6};
    fm_tensor ta;
    fm_tensor_init(&ta, a, cpu, FM_F64, 3, s, NULL);
    const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta};
    fm_solve_options o;
    fm_solve_options_init(&o);
    fm_tensor sp[FM_SOLVE_NSLOTS];
    uint32_t w = 0;
    o.routine = FM_SOLVE_GESDD, o.full_matrices = 1;
    CHECK_OK(fm_output_specs(FM_OP_SOLVE, t, FM_SOLVE_NSLOTS, &o, sp, &w));
    CHECK(w == (1u << FM_SOLVE_X | 1u << FM_SOLVE_FACTOR | 1u << FM_SOLVE_W));
    CHECK(sp[FM_SOLVE_X].ndim == 3 && sp[FM_SOLVE_X].shape[0] == 2 && sp[FM_SOLVE_X].shape[1] == 4 &&
          sp[FM_SOLVE_X].shape[2] == 4);
    CHECK(sp[FM_SOLVE_FACTOR].shape[1] == 6 && sp[FM_SOLVE_FACTOR].shape[2] == 6);
    CHECK(sp[FM_SOLVE_W].ndim == 2 && sp[FM_SOLVE_W].shape[1] == 4 && sp[FM_SOLVE_W].dtype == FM_F64);
    o.full_matrices = 0, o.check = 0;
    CHECK_OK(fm_output_specs(FM_OP_SOLVE, t, FM_SOLVE_NSLOTS, &o, sp, &w));
    CHECK(sp[FM_SOLVE_FACTOR].shape[1] == 4 && (w >> FM_SOLVE_INFO & 1u) && sp[FM_SOLVE_INFO].ndim == 1 &&
          sp[FM_SOLVE_INFO].dtype == FM_I64);
    fm_solve_options_init(&o);
    o.routine = FM_SOLVE_GEQRF, o.qr_mode = 2;
    CHECK_OK(fm_output_specs(FM_OP_SOLVE, t, FM_SOLVE_NSLOTS, &o, sp, &w));
    CHECK(w == 1u << FM_SOLVE_FACTOR && sp[FM_SOLVE_FACTOR].shape[1] == 4 && sp[FM_SOLVE_FACTOR].shape[2] == 6);
    /* slogdet of (2, 3, 3) complex: sign complex (2,), logabsdet real (2,) */
    const int64_t s2[3] = {2, 3, 3};
    fm_tensor tc;
    fm_tensor_init(&tc, a, cpu, FM_C64, 3, s2, NULL);
    const fm_tensor *t2[FM_SOLVE_NSLOTS] = {&tc};
    fm_solve_options_init(&o);
    o.routine = FM_SOLVE_SLOGDET;
    CHECK_OK(fm_output_specs(FM_OP_SOLVE, t2, FM_SOLVE_NSLOTS, &o, sp, &w));
    CHECK(sp[FM_SOLVE_AUX].dtype == FM_C64 && sp[FM_SOLVE_W].dtype == FM_F32 && sp[FM_SOLVE_W].ndim == 1);
    /* the plan cache: the same problem twice is the same plan */
    double x[2 * 3 * 3];
    fm_tensor tx;
    fm_tensor_init(&tx, x, cpu, FM_F64, 3, s2, NULL);
    fm_tensor_init(&tc, a, cpu, FM_F64, 3, s2, NULL);
    fm_solve_options_init(&o);
    o.routine = FM_SOLVE_INV;
    const fm_tensor *t3[FM_SOLVE_NSLOTS] = {&tc, NULL, NULL, &tx};
    fm_plan *p1 = NULL, *p2 = NULL;
    CHECK_OK(fm_solve_plan(ctx, t3, &o, &p1));
    o.transpose = 1; /* inv does not read it: the same key */
    CHECK_OK(fm_solve_plan(ctx, t3, &o, &p2));
    CHECK(p1 && p1 == p2);
    CHECK(p1 && fm_test_contains(fm_plan_describe(p1), "solve cpu/lapack inv f64 3x3"));
    fm_plan_release(p1);
    fm_plan_release(p2);
}

/* ---- 8 threads executing one plan, each on its own operands ---- */
typedef struct {
    fm_plan *plan;
    double a[64 * 64], b[64 * 2], x[64 * 2];
    double ratio;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    for (int rep = 0; rep < 20; rep++) {
        void *ptrs[FM_SOLVE_NSLOTS] = {j->a, j->b, NULL, j->x};
        if (fm_plan_execute(j->plan, ptrs, FM_SOLVE_NSLOTS, NULL) != FM_OK) {
            j->ratio = 1e9;
            return NULL;
        }
        const double r = solve_ratio(FM_F64, j->a, j->x, j->b, 64, 2, 0);
        j->ratio = r > j->ratio ? r : j->ratio;
    }
    return NULL;
}

static void test_threads(void)
{
    thread_job *jobs = calloc(8, sizeof *jobs);
    cplx *c = malloc(sizeof(cplx) * 64 * 64);
    for (int t = 0; t < 8; t++) {
        make_matrix(RANDOM, FM_F64, 64, c);
        for (int i = 0; i < 64 * 64; i++)
            jobs[t].a[i] = creal(c[i]);
        for (int i = 0; i < 128; i++)
            jobs[t].b[i] = urand();
    }
    fm_tensor ta = desc(jobs[0].a, FM_F64, 2, 64, 64), tb = desc(jobs[0].b, FM_F64, 2, 64, 2),
              tx = desc(jobs[0].x, FM_F64, 2, 64, 2);
    const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, &tb, NULL, &tx};
    fm_solve_options o;
    fm_solve_options_init(&o);
    fm_plan *plan = NULL;
    CHECK_OK(fm_solve_plan(ctx, t, &o, &plan));
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        jobs[i].plan = plan;
        pthread_create(&th[i], NULL, thread_main, &jobs[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(jobs[i].ratio < 30, "thread %d: ratio %g", i, jobs[i].ratio);
    }
    fm_plan_release(plan);
    free(jobs), free(c);
}

int main(void)
{
    if (fm_context_create(&ctx) != FM_OK) {
        fprintf(stderr, "context: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_solve_residuals);
    RUN_TEST(test_cholesky_inv_det);
    RUN_TEST(test_qr_eigh_svd);
    RUN_TEST(test_factored_solves);
    RUN_TEST(test_trusted_factor);
    RUN_TEST(test_failures);
    RUN_TEST(test_bad_inputs);
    RUN_TEST(test_specs_and_cache);
    RUN_TEST(test_threads);
    fm_context_destroy(ctx);
    TEST_MAIN_RETURN();
}
