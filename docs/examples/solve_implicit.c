/* solve_implicit.c : implicit (backward Euler) time stepping of the 1-D heat equation u_t = u_xx on
 * (0, 1) with u = 0 at both ends, through fusemath's dense solvers and the public C API.
 *
 * Each step solves (I - dt L) u_next = u with L the second-difference matrix on n interior points.
 * The matrix never changes, so it is factored once (FM_SOLVE_GETRF: LU and pivots) and every step is
 * one execute of a single FM_SOLVE_GETRS plan with the step's pointers (b = u, x = u_next): no
 * refactoring, no replanning. The program checks its own result: sin(pi x) is an eigenvector of L
 * with eigenvalue -4 / h^2 sin^2(pi h / 2), so after N steps u must equal the initial profile times
 * (1 - dt lambda)^-N to rounding (relative error below 1e-10); exit status 1 otherwise.
 *
 * Usage: solve_implicit [n] [steps]   (default 200 points, 500 steps) */
#include <fusemath/fusemath.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        fm_status s_ = (call);                                                                      \
        if (s_ != FM_OK) {                                                                          \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, fm_status_name(s_), fm_last_error());    \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)

int main(int argc, char **argv)
{
    const int64_t n = argc > 1 ? atoll(argv[1]) : 200;
    const int steps = argc > 2 ? atoi(argv[2]) : 500;
    if (n < 2 || steps < 1) {
        fprintf(stderr, "n = %lld, steps = %d; expected n >= 2 and steps >= 1\n", (long long)n, steps);
        return 1;
    }
    const double pi = 3.14159265358979323846, h = 1.0 / (double)(n + 1), dt = 1e-4;
    double *m = calloc((size_t)(n * n), sizeof *m), *lu = malloc((size_t)(n * n) * sizeof *lu);
    double *u = malloc((size_t)n * sizeof *u), *next = malloc((size_t)n * sizeof *next);
    int64_t *piv = malloc((size_t)n * sizeof *piv);
    if (!m || !lu || !u || !next || !piv) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < n; i++) { /* I - dt L, L = tridiag(1, -2, 1) / h^2 */
        m[i * n + i] = 1.0 + 2.0 * dt / (h * h);
        if (i > 0)
            m[i * n + i - 1] = -dt / (h * h);
        if (i + 1 < n)
            m[i * n + i + 1] = -dt / (h * h);
        u[i] = sin(pi * (double)(i + 1) * h);
    }
    fm_context *ctx = NULL;
    CHECK(fm_context_create(&ctx));
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    const int64_t sm[2] = {n, n}, sv[2] = {n, 1};
    fm_tensor tm, tlu, tpiv, tu, tnext;
    CHECK(fm_tensor_init(&tm, m, cpu, FM_F64, 2, sm, NULL));
    CHECK(fm_tensor_init(&tlu, lu, cpu, FM_F64, 2, sm, NULL));
    CHECK(fm_tensor_init(&tpiv, piv, cpu, FM_I64, 1, &n, NULL));
    CHECK(fm_tensor_init(&tu, u, cpu, FM_F64, 2, sv, NULL));
    CHECK(fm_tensor_init(&tnext, next, cpu, FM_F64, 2, sv, NULL));

    /* factor once */
    fm_solve_options o;
    fm_solve_options_init(&o);
    o.routine = FM_SOLVE_GETRF;
    const fm_tensor *factor_ops[FM_SOLVE_NSLOTS] = {[FM_SOLVE_A] = &tm, [FM_SOLVE_FACTOR] = &tlu,
                                                    [FM_SOLVE_PIVOTS] = &tpiv};
    CHECK(fm_solve(ctx, factor_ops, &o, NULL));

    /* one plan for every step; the buffers swap roles between steps */
    o.routine = FM_SOLVE_GETRS;
    const fm_tensor *step_ops[FM_SOLVE_NSLOTS] = {[FM_SOLVE_A] = &tlu, [FM_SOLVE_B] = &tu, [FM_SOLVE_IPIV] = &tpiv,
                                                  [FM_SOLVE_X] = &tnext};
    fm_plan *step = NULL;
    CHECK(fm_solve_plan(ctx, step_ops, &o, &step));
    double *cur = u, *nxt = next;
    for (int s = 0; s < steps; s++) {
        void *ptrs[FM_SOLVE_NSLOTS] = {[FM_SOLVE_A] = lu, [FM_SOLVE_B] = cur, [FM_SOLVE_IPIV] = piv,
                                       [FM_SOLVE_X] = nxt};
        CHECK(fm_plan_execute(step, ptrs, FM_SOLVE_NSLOTS, NULL));
        double *t = cur;
        cur = nxt, nxt = t;
    }

    const double s2 = sin(pi * h / 2.0), lambda = -4.0 / (h * h) * s2 * s2;
    const double decay = pow(1.0 - dt * lambda, -steps);
    double err = 0.0, peak = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double want = decay * sin(pi * (double)(i + 1) * h);
        err = fmax(err, fabs(cur[i] - want));
        peak = fmax(peak, fabs(want));
    }
    printf("solve_implicit: n = %lld, %d steps of dt = %g with one LU (%s); peak %.6e, relative error %.2e\n",
           (long long)n, steps, dt, fm_plan_describe(step), peak, err / peak);
    fm_plan_release(step);
    fm_context_destroy(ctx);
    free(m), free(lu), free(u), free(next), free(piv);
    if (!(err / peak < 1e-10)) {
        fprintf(stderr, "solve_implicit: relative error %.3e, expected < 1e-10\n", err / peak);
        return 1;
    }
    return 0;
}
