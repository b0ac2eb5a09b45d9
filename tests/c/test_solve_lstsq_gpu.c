/* test_solve_lstsq_gpu.c : lstsq (FM_SOLVE_GELSD) on the GPU (backends/cuda/cusolver_lstsq.c)
 * against the CPU backend's LAPACK gelsd on the same inputs: rank exactly, singular values within
 * 30 max(m, n) eps s_max, x and the residuals within that times the effective condition number
 * (and its square times the relative residual: the least-squares perturbation bound); m > n,
 * m < n, m == n, rank-deficient (rcond given, default, outside (0, 1)), a zero matrix, empty
 * shapes, no right-hand side, batches (on the lanes) with a broadcast b, every dtype. A NaN / inf
 * entry fails with the CPU's very message, and with check = 0 gives the CPU's info array. The
 * plan's describe() names the route. Every failure prints what differed. */
#include "check.h"
#define SOLVE_TEST_SEED 4242
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


/* one lstsq: a (ba, m, n), b (bb, m, k) (a batch of 0: none), the outputs of the broadcast batch */
typedef struct {
    fm_dtype dt;
    int64_t ba, bb, batch, m, n, k;
    void *h[FM_SOLVE_NSLOTS];
    int nd[FM_SOLVE_NSLOTS];
    int64_t shape[FM_SOLVE_NSLOTS][3];
} problem;

static int64_t numel(const problem *p, int s)
{
    int64_t e = 1;
    for (int i = 0; i < p->nd[s]; i++)
        e *= p->shape[s][i];
    return e;
}
static fm_dtype dtype_of(const problem *p, int s)
{
    if (s == FM_SOLVE_RANK || s == FM_SOLVE_INFO)
        return FM_I64;
    return s == FM_SOLVE_W || s == FM_SOLVE_AUX ? real_of(p->dt) : p->dt;
}
static size_t bytes(const problem *p, int s) { return (size_t)numel(p, s) * fm_dtype_size(dtype_of(p, s)); }
static void set_shape(problem *p, int s, int64_t batch, int64_t d0, int64_t d1, int core)
{
    int nd = 0;
    if (batch)
        p->shape[s][nd++] = batch;
    if (core >= 1)
        p->shape[s][nd++] = d0;
    if (core >= 2)
        p->shape[s][nd++] = d1;
    p->nd[s] = nd;
    p->h[s] = calloc(bytes(p, s) + 16, 1);
}

/* rank: a's entries of rank r < min(m, n) (a product of m x r and r x n), r = 0 a zero matrix, -1 random */
static problem make(fm_dtype dt, int64_t ba, int64_t bb, int64_t m, int64_t n, int64_t k, int rank)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.dt = dt, p.ba = ba, p.bb = bb, p.m = m, p.n = n, p.k = k, p.batch = ba > bb ? ba : bb;
    const int64_t kmin = m < n ? m : n;
    set_shape(&p, FM_SOLVE_A, ba, m, n, 2);
    set_shape(&p, FM_SOLVE_B, bb, m, k, 2);
    set_shape(&p, FM_SOLVE_X, p.batch, n, k, 2);
    set_shape(&p, FM_SOLVE_W, p.batch, kmin, 0, 1);
    set_shape(&p, FM_SOLVE_AUX, p.batch, k, 0, 1);
    set_shape(&p, FM_SOLVE_RANK, p.batch, 0, 0, 0);
    const int c = is_complex(dt);
    for (int64_t e = 0; e < (ba ? ba : 1); e++) {
        double complex *l = malloc(sizeof *l * (size_t)(m * 3 + 1)), *r = malloc(sizeof *r * (size_t)(3 * n + 1));
        for (int64_t i = 0; i < m * 3; i++)
            l[i] = urand() + (c ? I * urand() : 0);
        for (int64_t i = 0; i < 3 * n; i++)
            r[i] = urand() + (c ? I * urand() : 0);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double complex v = urand() + (c ? I * urand() : 0);
                if (rank >= 0) {
                    v = 0;
                    for (int q = 0; q < rank; q++)
                        v += l[i * 3 + q] * r[q * n + j];
                }
                set(dt, p.h[FM_SOLVE_A], (e * m + i) * n + j, v);
            }
        free(l), free(r);
    }
    for (int64_t i = 0; i < numel(&p, FM_SOLVE_B); i++)
        set(dt, p.h[FM_SOLVE_B], i, urand() + (c ? I * urand() : 0));
    return p;
}
static problem copy_of(const problem *p)
{
    problem c = *p;
    for (int s = 0; s < FM_SOLVE_NSLOTS; s++)
        if (p->h[s]) {
            c.h[s] = malloc(bytes(p, s) + 16);
            memcpy(c.h[s], p->h[s], bytes(p, s) + 16);
        }
    return c;
}
static void drop(problem *p)
{
    for (int s = 0; s < FM_SOLVE_NSLOTS; s++)
        free(p->h[s]);
}

/* fm_solve on the GPU (inputs uploaded, outputs read back) or the CPU */
static fm_status run(int gpu, const fm_solve_options *o, problem *p)
{
    fm_tensor t[FM_SOLVE_NSLOTS];
    const fm_tensor *tp[FM_SOLVE_NSLOTS] = {0};
    void *d[FM_SOLVE_NSLOTS] = {0};
    const fm_device dev = {gpu ? FM_DEVICE_CUDA : FM_DEVICE_CPU, 0};
    for (int s = 0; s < FM_SOLVE_NSLOTS; s++) {
        if (!p->h[s])
            continue;
        d[s] = p->h[s];
        if (gpu) {
            if (cudaMalloc(&d[s], bytes(p, s) + 256) != cudaSuccess) {
                fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes(p, s));
                abort();
            }
            cudaMemcpy(d[s], p->h[s], bytes(p, s), cudaMemcpyHostToDevice);
        }
        fm_tensor_init(&t[s], d[s], dev, dtype_of(p, s), p->nd[s], p->shape[s], NULL);
        tp[s] = &t[s];
    }
    const fm_status st = fm_solve(ctx, tp, o, NULL);
    for (int s = 0; gpu && s < FM_SOLVE_NSLOTS; s++)
        if (d[s]) {
            if (s >= FM_SOLVE_X)
                cudaMemcpy(p->h[s], d[s], bytes(p, s), cudaMemcpyDeviceToHost);
            cudaFree(d[s]);
        }
    if (gpu && cudaDeviceSynchronize() != cudaSuccess) {
        fprintf(stderr, "the device failed after lstsq\n");
        abort();
    }
    return st;
}

static fm_solve_options lstsq_opts(double rcond)
{
    fm_solve_options o;
    fm_solve_options_init(&o);
    o.routine = FM_SOLVE_GELSD;
    o.rcond = rcond;
    return o;
}

/* entry e's ||a x - b|| / ||x|| (Frobenius) from p's x */
static double relative_residual(const problem *p, int64_t e)
{
    const int64_t m = p->m, n = p->n, k = p->k, ea = p->ba ? e : 0, eb = p->bb ? e : 0;
    double r2 = 0, x2 = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < k; j++) {
            double complex v = -get(p->dt, p->h[FM_SOLVE_B], (eb * m + i) * k + j);
            for (int64_t q = 0; q < n; q++)
                v += get(p->dt, p->h[FM_SOLVE_A], (ea * m + i) * n + q) *
                     get(p->dt, p->h[FM_SOLVE_X], (e * n + q) * k + j);
            r2 += creal(v * conj(v));
        }
    for (int64_t i = 0; i < n * k; i++) {
        const double complex v = get(p->dt, p->h[FM_SOLVE_X], e * n * k + i);
        x2 += creal(v * conj(v));
    }
    return x2 > 0 ? sqrt(r2 / x2) : 0;
}

/* GPU and CPU on the same problem (g, rcond): rank equal, s, x and the residuals within the
 * least-squares perturbation bound, 30 max(m, n) eps cond (1 + cond ||r|| / (s_max ||x||)) */
static void compare(const char *what, problem *g, double rcond)
{
    problem c = copy_of(g);
    const fm_solve_options o = lstsq_opts(rcond);
    const fm_status sg = run(1, &o, g), sc = run(0, &o, &c);
    int bad = 0;
    CHECK_MSG(sg == FM_OK && sc == FM_OK, "%s: gpu %s, cpu %s", what, fm_status_name(sg), fm_status_name(sc));
    const int64_t m = g->m, n = g->n, k = g->k, kmin = m < n ? m : n;
    const double e = 30 * (double)(m > n ? m : n > 1 ? n : 1) * eps_of(g->dt);
    const fm_dtype rt = real_of(g->dt), dt = g->dt;
    for (int64_t b = 0; sg == FM_OK && sc == FM_OK && b < (g->batch ? g->batch : 1); b++) {
        const int64_t rg = ((int64_t *)g->h[FM_SOLVE_RANK])[b], rc = ((int64_t *)c.h[FM_SOLVE_RANK])[b];
        const double smax = kmin ? creal(get(rt, c.h[FM_SOLVE_W], b * kmin)) : 0;
        const double sr = rc > 0 ? creal(get(rt, c.h[FM_SOLVE_W], b * kmin + rc - 1)) : 1;
        const double cond = rc > 0 ? smax / sr : 1;
        const double tol = e * cond * (1 + cond * (smax > 0 ? relative_residual(&c, b) / smax : 0));
        double ds = 0, dx = 0, xmax = 1, dr = 0, bmax = 1;
        for (int64_t i = 0; i < kmin; i++)
            ds = fmax(ds, cabs(get(rt, g->h[FM_SOLVE_W], b * kmin + i) - get(rt, c.h[FM_SOLVE_W], b * kmin + i)));
        for (int64_t i = 0; i < n * k; i++) {
            const double complex want = get(dt, c.h[FM_SOLVE_X], b * n * k + i);
            xmax = fmax(xmax, cabs(want));
            dx = fmax(dx, cabs(get(dt, g->h[FM_SOLVE_X], b * n * k + i) - want));
        }
        for (int64_t j = 0; j < k; j++) {
            double col = 0;
            for (int64_t i = 0; i < m; i++)
                col += pow(cabs(get(dt, g->h[FM_SOLVE_B], ((g->bb ? b : 0) * m + i) * k + j)), 2);
            bmax = fmax(bmax, col);
            dr = fmax(dr, fabs(creal(get(rt, g->h[FM_SOLVE_AUX], b * k + j) - get(rt, c.h[FM_SOLVE_AUX], b * k + j))));
        }
        if (rg != rc || ds > e * smax || dx > tol * xmax || dr > tol * bmax) {
            bad++;
            fprintf(stderr, "%s %s %lldx%lld k=%lld rcond=%g entry %lld: rank gpu %lld cpu %lld, |ds| %.3g (allowed "
                    "%.3g), |dx| %.3g (%.3g), |dres| %.3g (%.3g)\n", what, fm_dtype_name(dt), (long long)m,
                    (long long)n, (long long)k, rcond, (long long)b, (long long)rg, (long long)rc, ds, e * smax, dx,
                    tol * xmax, dr, tol * bmax);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d entries differ", what, bad);
    drop(&c);
}

static void test_against_cpu(void)
{
    static const int64_t shapes[][3] = {{6, 4, 3}, {4, 6, 3}, {5, 5, 2}, {50, 20, 4}, {20, 50, 4}, {1, 1, 1},
                                        {3, 1, 2}, {1, 3, 2}, {3000, 5, 2}, {300, 300, 5}};
    for (int d = 0; d < 4; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            problem p = make(dtypes[d], 0, 0, m, n, k, -1);
            compare("random", &p, -1), drop(&p);
            if (m * n > 2000)
                continue;
            p = make(dtypes[d], 20, 0, m, n, k, -1); /* on the lanes, b broadcast */
            compare("batch of 20, b broadcast", &p, -1), drop(&p);
        }
}

static void test_rank_deficient(void)
{
    for (int d = 0; d < 4; d++) {
        const int single = dtypes[d] == FM_F32 || dtypes[d] == FM_C64;
        const double rc = single ? 1e-4 : 1e-10;
        static const int64_t shapes[][3] = {{8, 5, 2}, {5, 8, 2}, {6, 6, 1}, {40, 12, 3}};
        for (int s = 0; s < 4; s++) {
            problem p = make(dtypes[d], 3, 3, shapes[s][0], shapes[s][1], 2, (int)shapes[s][2]);
            compare("rank-deficient", &p, rc), drop(&p);
            p = make(dtypes[d], 0, 0, shapes[s][0], shapes[s][1], 2, 0);
            compare("a zero matrix", &p, -1), drop(&p);
        }
        /* rcond outside (0, 1) is machine precision in gelsd; inside it sets the rank */
        const double rconds[] = {0.0, 1.0, 2.5, 0.999, 0.5};
        for (int r = 0; r < 5; r++) {
            problem p = make(dtypes[d], 0, 0, 7, 3, 2, -1);
            compare("rcond", &p, rconds[r]), drop(&p);
        }
    }
}

static void test_empty(void)
{
    static const int64_t shapes[][3] = {{0, 3, 2}, {3, 0, 2}, {0, 0, 1}, {5, 3, 0}, {3, 5, 0}};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 5; s++) {
            problem p = make(dtypes[d], 2, 0, shapes[s][0], shapes[s][1], shapes[s][2], -1);
            compare("empty", &p, -1), drop(&p);
        }
}

/* a NaN / inf in one entry: the CPU's message (check = 1) and info array (check = 0) */
static void test_nonfinite(void)
{
    for (int d = 0; d < 4; d++)
        for (int inf = 0; inf < 2; inf++) {
            problem g = make(dtypes[d], 20, 20, 6, 4, 2, -1);
            set(g.dt, g.h[FM_SOLVE_A], (13 * 6 + 2) * 4 + 1, inf ? INFINITY : NAN);
            problem c = copy_of(&g);
            fm_solve_options o = lstsq_opts(-1);
            const fm_status sg = run(1, &o, &g);
            char gm[512];
            snprintf(gm, sizeof gm, "%s", fm_last_error());
            const fm_status sc = run(0, &o, &c);
            CHECK_MSG(sg == FM_ERR_LINALG && sc == sg && !strcmp(gm, fm_last_error()) && strstr(gm, "a[13]"),
                      "%s: gpu %s \"%s\", cpu %s \"%s\"", inf ? "inf" : "NaN", fm_status_name(sg), gm,
                      fm_status_name(sc), fm_last_error());
            drop(&c);
            set_shape(&g, FM_SOLVE_INFO, 20, 0, 0, 0);
            c = copy_of(&g);
            o.check = 0;
            CHECK_OK(run(1, &o, &g));
            CHECK_OK(run(0, &o, &c));
            for (int64_t b = 0; b < 20; b++) {
                const int64_t ig = ((int64_t *)g.h[FM_SOLVE_INFO])[b], ic = ((int64_t *)c.h[FM_SOLVE_INFO])[b];
                CHECK_MSG(ig == ic && ig == (b == 13), "entry %lld: gpu info %lld, cpu %lld", (long long)b,
                          (long long)ig, (long long)ic);
            }
            drop(&c), drop(&g);
        }
}

static void test_describe(void)
{
    problem p = make(FM_F64, 0, 0, 8, 3, 2, -1);
    void *d[FM_SOLVE_NSLOTS] = {0};
    fm_tensor t[FM_SOLVE_NSLOTS];
    const fm_tensor *tp[FM_SOLVE_NSLOTS] = {0};
    const fm_device dev = {FM_DEVICE_CUDA, 0};
    for (int s = 0; s < FM_SOLVE_NSLOTS; s++)
        if (p.h[s]) {
            CHECK(cudaMalloc(&d[s], bytes(&p, s) + 256) == cudaSuccess);
            fm_tensor_init(&t[s], d[s], dev, dtype_of(&p, s), p.nd[s], p.shape[s], NULL);
            tp[s] = &t[s];
        }
    const fm_solve_options o = lstsq_opts(-1);
    fm_plan *plan = NULL;
    CHECK_OK(fm_solve_plan(ctx, tp, &o, &plan));
    const char *text = plan ? fm_plan_describe(plan) : NULL;
    CHECK_MSG(text && fm_test_contains(text, "cuda/cusolver lstsq") && fm_test_contains(text, "Xgesvd"),
              "describe: %s", text ? text : "(none)");
    fm_plan_release(plan);
    for (int s = 0; s < FM_SOLVE_NSLOTS; s++)
        cudaFree(d[s]);
    drop(&p);
}

GPU_TEST_MAIN(&ctx, test_describe, test_against_cpu, test_rank_deficient, test_empty, test_nonfinite)
#else
TEST_MAIN_SKIPPED("built without CUDA")
#endif
