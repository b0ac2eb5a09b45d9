/* panel_sweep.c : how the CPU matmul's panel height and thread layout perform on
 * this machine, against OpenBLAS threading the plain product itself.
 *   panel_sweep f32|f64 M N K [reps] [rows,rows,...]     (a row count "b": blas-threads strategy)
 * Prints one JSON object per line: the multithreaded cblas product (OpenBLAS's own
 * threads, measured before fusemath takes OpenBLAS to one thread), then fusemath
 * plain and fused bias+relu for the heuristic (rows 0) and each given panel height.
 * Times are the fastest of `reps` calls, in ms. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <fusemath/fusemath.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void openblas_set_num_threads(int num_threads);

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static void fill(void *p, size_t n, int f64)
{
    for (size_t i = 0; i < n; i++) {
        double v = (double)rand() / RAND_MAX - 0.5;
        if (f64)
            ((double *)p)[i] = v;
        else
            ((float *)p)[i] = (float)v;
    }
}

static double time_fm(fm_context *ctx, int f64, int m, int n, int k, int rows, int strategy, int fused, int reps, void *A,
                      void *B, void *D, void *bias, char *describe, size_t dlen)
{
    fm_device cpu = {FM_DEVICE_CPU, 0};
    fm_dtype dt = f64 ? FM_F64 : FM_F32;
    fm_tensor a, b, d, bb;
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n}, sbias[1] = {n};
    fm_tensor_init(&a, A, cpu, dt, 2, sa, NULL);
    fm_tensor_init(&b, B, cpu, dt, 2, sb, NULL);
    fm_tensor_init(&d, D, cpu, dt, 2, sd, NULL);
    fm_tensor_init(&bb, bias, cpu, dt, 1, sbias, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.panel_rows = rows;
    o.cpu_strategy = strategy;
    if (fused)
        o.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU;
    fm_plan *p = NULL;
    if (fm_matmul_plan(ctx, &a, &b, NULL, fused ? &bb : NULL, &d, NULL, &o, &p) != FM_OK) {
        fprintf(stderr, "plan: %s\n", fm_last_error());
        return -1;
    }
    snprintf(describe, dlen, "%s", fm_plan_describe(p));
    void *ptrs[FM_MATMUL_NSLOTS] = {A, B, NULL, fused ? bias : NULL, D, NULL};
    double best = 1e300;
    for (int r = 0; r < reps + 1; r++) {
        double t = now_ms();
        fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL);
        t = now_ms() - t;
        if (r > 0 && t < best)
            best = t;
    }
    fm_plan_release(p);
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s f32|f64 M N K [reps] [rows,rows,...]\n", argv[0]);
        return 2;
    }
    int f64 = strcmp(argv[1], "f64") == 0;
    int m = atoi(argv[2]), n = atoi(argv[3]), k = atoi(argv[4]);
    int reps = argc > 5 ? atoi(argv[5]) : 5;
    size_t es = f64 ? 8 : 4;
    void *A = malloc(es * (size_t)m * k), *B = malloc(es * (size_t)k * n), *D = malloc(es * (size_t)m * n);
    void *bias = malloc(es * (size_t)n);
    fill(A, (size_t)m * k, f64);
    fill(B, (size_t)k * n, f64);
    fill(bias, (size_t)n, f64);
    memset(D, 0, es * (size_t)m * n);
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("FUSEMATH_NUM_THREADS");
    if (env && atoi(env) > 0)
        threads = atoi(env);

    openblas_set_num_threads(threads);
    double best = 1e300;
    for (int r = 0; r < reps + 1; r++) {
        double t = now_ms();
        if (f64)
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, A, k, B, n, 0.0, D, n);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, A, k, B, n, 0.0f, D, n);
        t = now_ms() - t;
        if (r > 0 && t < best)
            best = t;
    }
    printf("{\"what\": \"cblas_mt_plain\", \"dtype\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"threads\": %d, "
           "\"ms\": %.4f}\n", argv[1], m, n, k, threads, best);

    fm_context *ctx = NULL;
    if (fm_context_create(&ctx) != FM_OK)
        return 1;
    char list[256] = "0";
    if (argc > 6)
        snprintf(list, sizeof list, "0,%s", argv[6]);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int rows = atoi(tok), strategy = tok[0] == 'b' ? FM_CPU_STRATEGY_BLAS_THREADS : 0;
        for (int fused = 0; fused < 2; fused++) {
            char desc[256];
            double t = time_fm(ctx, f64, m, n, k, rows, strategy, fused, reps, A, B, D, bias, desc, sizeof desc);
            printf("{\"what\": \"%s\", \"rows\": %d, \"ms\": %.4f, \"plan\": \"%s\"}\n", fused ? "fm_fused" : "fm_plain",
                   rows, t, desc);
        }
    }
    fm_context_destroy(ctx);
    free(A);
    free(B);
    free(D);
    free(bias);
    return 0;
}
