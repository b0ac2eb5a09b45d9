/* host_overhead.c : host cost per call of a small planned fusemath matmul next to the bare cblas_sgemm it wraps
 * (OpenBLAS at 1 thread, as fusemath keeps it), n x n x n f32: cblas_sgemm, fm_plan_execute (identity and
 * bias+relu) and the stateless fm_matmul; results checked first, then bursts of `calls` calls, the methods
 * interleaved, median and min over bursts (ns). One JSON object. Usage: host_overhead [n calls bursts threads] */
#define _POSIX_C_SOURCE 200809L
#include <fusemath/fusemath.h>

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"

/* OpenBLAS extensions (not in cblas.h on every distribution). */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char *openblas_get_config(void);

enum { M_BLAS, M_FM_ID, M_FM_BR, M_FM_STATELESS, M_COUNT };
static const char *const names[M_COUNT] = {"cblas_sgemm", "fm_plan_execute_identity", "fm_plan_execute_bias_relu",
                                           "fm_matmul_identity"};

static int n;
static float *A, *B, *BIAS, *D;
static fm_context *ctx;
static fm_plan *plan_id, *plan_br;
static fm_tensor ta, tb, td;
static fm_matmul_options o_id;

static void check(const char *what, fm_status s)
{
    if (s != FM_OK) {
        fprintf(stderr, "host_overhead: %s failed: %s (%s)\n", what, fm_status_name(s), fm_last_error());
        exit(1);
    }
}

static void run_once(int method)
{
    void *ptrs[FM_MATMUL_NSLOTS] = {A, B, NULL, method == M_FM_BR ? BIAS : NULL, D, NULL};
    switch (method) {
    case M_BLAS:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, D, n);
        break;
    case M_FM_ID:
    case M_FM_BR:
        check("fm_plan_execute", fm_plan_execute(method == M_FM_ID ? plan_id : plan_br, ptrs, FM_MATMUL_NSLOTS, NULL));
        break;
    default:
        check("fm_matmul", fm_matmul(ctx, &ta, &tb, NULL, NULL, &td, NULL, &o_id, NULL));
    }
}

/* largest |D - ref| relative to max(1, |ref|), D zeroed before the call */
static double rel_diff(int method, const float *ref)
{
    double worst = 0.0;
    memset(D, 0, sizeof(float) * (size_t)n * n);
    run_once(method);
    for (size_t i = 0; i < (size_t)n * n; i++)
        worst = fmax(worst, fabs((double)D[i] - ref[i]) / fmax(1.0, fabs((double)ref[i])));
    return worst;
}

int main(int argc, char **argv)
{
    n = (int)arg_long(argc, argv, 1, 64);
    int calls = (int)arg_long(argc, argv, 2, 2000), bursts = (int)arg_long(argc, argv, 3, 15);
    size_t nn = (size_t)n * n;
    A = malloc(nn * 4), B = malloc(nn * 4), D = malloc(nn * 4), BIAS = malloc((size_t)n * 4);
    float *ref = malloc(nn * 4);
    double *t = malloc(sizeof(double) * M_COUNT * (size_t)bursts);
    unsigned rng = 12345u;
    for (size_t i = 0; i < 2 * nn + (size_t)n; i++) {
        rng = rng * 1664525u + 1013904223u;
        float v = (float)((rng >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
        *(i < nn ? &A[i] : i < 2 * nn ? &B[i - nn] : &BIAS[i - 2 * nn]) = v;
    }
    check("fm_context_create", fm_context_create(&ctx));
    if (argc > 4)
        check("fm_context_set_num_threads", fm_context_set_num_threads(ctx, (int)arg_long(argc, argv, 4, 1)));
    openblas_set_num_threads(1); /* fusemath did it when it probed its cpu backend: for the bare calls too */
    fm_device cpu = {FM_DEVICE_CPU, 0};
    int64_t sh[2] = {n, n}, sbias[1] = {n};
    fm_tensor tbias;
    check("fm_tensor_init", fm_tensor_init(&ta, A, cpu, FM_F32, 2, sh, NULL));
    check("fm_tensor_init", fm_tensor_init(&tb, B, cpu, FM_F32, 2, sh, NULL));
    check("fm_tensor_init", fm_tensor_init(&td, D, cpu, FM_F32, 2, sh, NULL));
    check("fm_tensor_init", fm_tensor_init(&tbias, BIAS, cpu, FM_F32, 1, sbias, NULL));
    fm_matmul_options o_br;
    fm_matmul_options_init(&o_id);
    fm_matmul_options_init(&o_br);
    o_br.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU;
    check("fm_matmul_plan", fm_matmul_plan(ctx, &ta, &tb, NULL, NULL, &td, NULL, &o_id, &plan_id));
    check("fm_matmul_plan", fm_matmul_plan(ctx, &ta, &tb, NULL, &tbias, &td, NULL, &o_br, &plan_br));

    run_once(M_BLAS); /* correctness first: never time a wrong answer */
    memcpy(ref, D, nn * 4);
    double err_id = rel_diff(M_FM_ID, ref), err_sl = rel_diff(M_FM_STATELESS, ref);
    for (size_t i = 0; i < nn; i++)
        ref[i] = fmaxf(ref[i] + BIAS[i % n], 0.0f);
    double err_br = rel_diff(M_FM_BR, ref);
    int ok = err_id <= 1e-4 && err_br <= 1e-4 && err_sl <= 1e-4;
    if (!ok)
        fprintf(stderr, "host_overhead: WRONG RESULT: max rel diff %g / %g / %g\n", err_id, err_br, err_sl);

    for (int m = 0; m < M_COUNT; m++) /* warm-up: one burst of each */
        for (int c = 0; c < calls; c++)
            run_once(m);
    for (int b = 0; b < bursts; b++)
        for (int m = 0; m < M_COUNT; m++) {
            double t0 = now_ns();
            for (int c = 0; c < calls; c++)
                run_once(m);
            t[m * bursts + b] = (now_ns() - t0) / calls;
        }
    double med[M_COUNT];
    const char *cfg = openblas_get_config();
    printf("{\"benchmark\": \"host_overhead\", \"fusemath_version\": \"%s\", \"openblas_config\": \"%s\", "
           "\"openblas_threads\": %d, \"fusemath_threads\": %d, \"dtype\": \"f32\", \"m\": %d, \"n\": %d, \"k\": %d, "
           "\"calls_per_burst\": %d, \"bursts\": %d,\n \"plan_identity\": \"%s\", \"plan_bias_relu\": \"%s\", "
           "\"correct\": %s, \"max_rel_diff\": {\"identity\": %.3g, \"bias_relu\": %.3g, \"stateless\": %.3g},\n "
           "\"per_call_ns\": {",
           fm_version_string(), cfg ? cfg : "", openblas_get_num_threads(), fm_context_get_num_threads(ctx), n, n, n,
           calls, bursts, fm_plan_describe(plan_id), fm_plan_describe(plan_br), ok ? "true" : "false", err_id, err_br,
           err_sl);
    for (int m = 0; m < M_COUNT; m++) {
        med[m] = median_of(t + m * bursts, bursts); /* sorts: [0] is the min */
        printf("%s\"%s\": {\"median\": %.1f, \"min\": %.1f}", m ? ", " : "", names[m], med[m], t[m * bursts]);
    }
    printf("},\n \"overhead_ns\": {\"fm_plan_execute_identity_vs_cblas\": %.1f, \"fm_plan_execute_bias_relu_vs_cblas\": "
           "%.1f, \"fm_matmul_identity_vs_cblas\": %.1f}}\n",
           med[M_FM_ID] - med[M_BLAS], med[M_FM_BR] - med[M_BLAS], med[M_FM_STATELESS] - med[M_BLAS]);
    fm_plan_release(plan_id);
    fm_plan_release(plan_br);
    fm_context_destroy(ctx);
    return ok ? 0 : 1;
}
