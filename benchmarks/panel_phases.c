/* panel_phases.c : where the fused CPU matmul's time goes, phase by phase, for given tile
 * shapes. No fusemath plan: the library's own thread pool (cpu_pool.c, compiled in) runs the
 * tiles statically (thread t takes tiles t*T/threads .. (t+1)*T/threads - 1, in row-major
 * order), each tile one single-threaded cblas GEMM, as the library's tiles strategy does.
 *
 *   panel_phases f32|f64 M N K threads reps RxC[,RxC...] [fresh|kept] [pool|pooldyn|omp|ompdyn]
 *
 * Variants, interleaved call by call (rep r runs every variant once, in a rotated order):
 *   plain    GEMM beta = 0
 *   fused3   bias preloaded into the tile, GEMM beta = 1, relu pass (the library's way)
 *   fused2   GEMM beta = 0, then one bias+relu pass over the tile
 * Per variant: the median wall time of a call, and per phase (preload / gemm / pass) the
 * median over calls of the mean over threads of the phase's time in that call; ms.
 * "fresh": D is allocated (malloc, i.e. a fresh mmap at these sizes) and freed every call,
 * as NumPy's `a @ b` and fusemath's `execute()` do; else one D, first touched before timing.
 * Scheduling: pool (default) = the library's pool, thread t takes a static range of tiles;
 * pooldyn = the pool's atomic counter hands out tiles one by one; omp / ompdyn = OpenMP
 * `parallel for` over the tiles, schedule(static) (what the library's tiles strategy runs)
 * or schedule(dynamic, 1).
 * Per thread and call also: when it started its first tile and finished its last (ms after
 * the call began), reported as the median over calls of the latest start, the mean busy
 * time, the largest busy time and the latest finish: the wall time minus the mean busy
 * time is what imbalance and wake-up cost.
 * Prints one JSON object per tile shape. */
#define _GNU_SOURCE /* sched_getcpu */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>

#include "../backends/cpu/cpu_pool.h"

void openblas_set_num_threads(int num_threads);

enum { V_PLAIN, V_FUSED3, V_FUSED2, NV };
enum { S_POOL, S_POOLDYN, S_OMP, S_OMPDYN };
enum { X_START, X_BUSY, X_MAXBUSY, X_END, NX };
static const char *const vname[NV] = {"plain", "fused3", "fused2"};
#define MAXT 256

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

typedef struct job {
    int f64, variant, threads;
    int64_t m, n, k, tr, tc, tiles_c, tiles;
    const void *a, *b, *bias;
    void *d;
    double ph[MAXT][3]; /* per thread: preload, gemm, pass */
    double first[MAXT], last[MAXT], t_call;
    int cpu[MAXT];
} job;

static void gemm(const job *j, int64_t rows, int64_t cols, int64_t r0, int64_t c0, int beta1)
{
    const int64_t k = j->k, n = j->n;
    if (j->f64)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)cols, (int)k, 1.0,
                    (const double *)j->a + r0 * k, (int)k, (const double *)j->b + c0, (int)n, beta1 ? 1.0 : 0.0,
                    (double *)j->d + r0 * n + c0, (int)n);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)cols, (int)k, 1.0f,
                    (const float *)j->a + r0 * k, (int)k, (const float *)j->b + c0, (int)n, beta1 ? 1.0f : 0.0f,
                    (float *)j->d + r0 * n + c0, (int)n);
}

#define ROWS_LOOP(T, body)                                                                                             \
    for (int64_t i = 0; i < rows; i++) {                                                                               \
        T *restrict x = (T *)j->d + (r0 + i) * j->n + c0;                                                              \
        const T *restrict bb = (const T *)j->bias + c0;                                                                \
        (void)bb;                                                                                                      \
        _Pragma("omp simd") for (int64_t q = 0; q < cols; q++) {                                                       \
            body;                                                                                                      \
        }                                                                                                              \
    }

/* vectorised as the library's passes are (core/src/internal.h: FM_SIMD_CLONES) */
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

CLONES static void preload(const job *j, int64_t rows, int64_t cols, int64_t r0, int64_t c0)
{
    if (j->f64) {
        ROWS_LOOP(double, x[q] = bb[q])
    } else {
        ROWS_LOOP(float, x[q] = bb[q])
    }
}

CLONES static void relu(const job *j, int64_t rows, int64_t cols, int64_t r0, int64_t c0, int add_bias)
{
    if (j->f64) {
        if (add_bias) {
            ROWS_LOOP(double, double v = x[q] + bb[q]; x[q] = v > 0.0 ? v : 0.0)
        } else {
            ROWS_LOOP(double, x[q] = x[q] > 0.0 ? x[q] : 0.0)
        }
    } else {
        if (add_bias) {
            ROWS_LOOP(float, float v = x[q] + bb[q]; x[q] = v > 0.0f ? v : 0.0f)
        } else {
            ROWS_LOOP(float, x[q] = x[q] > 0.0f ? x[q] : 0.0f)
        }
    }
}

static void run_tile(job *j, int64_t it, int t)
{
    double *ph = j->ph[t];
    {
        const int64_t r0 = (it / j->tiles_c) * j->tr, c0 = (it % j->tiles_c) * j->tc;
        const int64_t rows = j->m - r0 < j->tr ? j->m - r0 : j->tr, cols = j->n - c0 < j->tc ? j->n - c0 : j->tc;
        double t0 = now_ms(), t1 = t0;
        if (j->variant == V_FUSED3) {
            preload(j, rows, cols, r0, c0);
            t1 = now_ms();
        }
        gemm(j, rows, cols, r0, c0, j->variant == V_FUSED3);
        const double t2 = now_ms();
        if (j->variant != V_PLAIN)
            relu(j, rows, cols, r0, c0, j->variant == V_FUSED2);
        const double t3 = now_ms();
        ph[0] += t1 - t0, ph[1] += t2 - t1, ph[2] += t3 - t2;
        if (j->first[t] < 0)
            j->first[t] = t0 - j->t_call;
        j->cpu[t] = sched_getcpu();
        j->last[t] = t3 - j->t_call;
    }
}

static void run_range(void *arg, int64_t t)
{
    job *j = arg;
    for (int64_t it = t * j->tiles / j->threads; it < (t + 1) * j->tiles / j->threads; it++)
        run_tile(j, it, (int)t);
}

static _Thread_local int pool_slot = -1;
static atomic_int pool_slots;
static void run_one(void *arg, int64_t it)
{
    if (pool_slot < 0) /* a stable slot per pool thread (the pool's threads live on) */
        pool_slot = atomic_fetch_add(&pool_slots, 1);
    run_tile(arg, it, pool_slot);
}

static void run_call(job *j, int sched)
{
    for (int t = 0; t < j->threads; t++)
        j->ph[t][0] = j->ph[t][1] = j->ph[t][2] = 0, j->first[t] = -1, j->last[t] = 0;
    j->t_call = now_ms();
    if (sched == S_POOL) {
        fm_pool_run(j->threads, j->threads, run_range, j);
    } else if (sched == S_POOLDYN) {
        fm_pool_run(j->threads, j->tiles, run_one, j);
    } else if (sched == S_OMP) {
#pragma omp parallel for num_threads(j->threads) schedule(static)
        for (int64_t it = 0; it < j->tiles; it++)
            run_tile(j, it, omp_get_thread_num());
    } else {
#pragma omp parallel for num_threads(j->threads) schedule(dynamic, 1)
        for (int64_t it = 0; it < j->tiles; it++)
            run_tile(j, it, omp_get_thread_num());
    }
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: panel_phases f32|f64 M N K threads reps RxC[,RxC...] [fresh]\n");
        return 2;
    }
    const int f64 = strcmp(argv[1], "f64") == 0;
    const int64_t m = atoll(argv[2]), n = atoll(argv[3]), k = atoll(argv[4]);
    const int threads = atoi(argv[5]), reps = atoi(argv[6]);
    const int fresh = argc > 8 && strcmp(argv[8], "fresh") == 0;
    const char *sname = argc > 9 ? argv[9] : "pool";
    const int sched = !strcmp(sname, "pooldyn") ? S_POOLDYN : !strcmp(sname, "omp") ? S_OMP
                      : !strcmp(sname, "ompdyn") ? S_OMPDYN : S_POOL;
    if (m < 1 || n < 1 || k < 1 || threads < 1 || threads > MAXT || reps < 1) {
        fprintf(stderr, "panel_phases: M, N, K, reps must be positive and 1 <= threads <= %d\n", MAXT);
        return 2;
    }
    openblas_set_num_threads(1);
    const size_t es = f64 ? 8 : 4;
    void *a = malloc((size_t)(m * k) * es), *b = malloc((size_t)(k * n) * es), *bias = malloc((size_t)n * es);
    void *dkeep = fresh ? NULL : malloc((size_t)(m * n) * es);
    double *wall = malloc(sizeof(double) * (size_t)reps * NV), *phs = malloc(sizeof(double) * (size_t)reps * NV * 3);
    double *xs = malloc(sizeof(double) * (size_t)reps * NV * NX);
    static double thread_busy[MAXT];
    static int thread_cpu[MAXT];
    if (!a || !b || !bias || (!fresh && !dkeep) || !wall || !phs || !xs) {
        fprintf(stderr, "panel_phases: out of memory\n");
        return 1;
    }
    srand(7);
    for (int64_t i = 0; i < m * k; i++) {
        double v = (double)rand() / RAND_MAX - 0.5;
        f64 ? (void)(((double *)a)[i] = v) : (void)(((float *)a)[i] = (float)v);
    }
    for (int64_t i = 0; i < k * n; i++) {
        double v = (double)rand() / RAND_MAX - 0.5;
        f64 ? (void)(((double *)b)[i] = v) : (void)(((float *)b)[i] = (float)v);
    }
    for (int64_t i = 0; i < n; i++)
        f64 ? (void)(((double *)bias)[i] = 0.1) : (void)(((float *)bias)[i] = 0.1f);
    if (dkeep)
        memset(dkeep, 0, (size_t)(m * n) * es);
    static job j;
    char *list = argv[7];
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int64_t tr = 0, tc = 0;
        if (sscanf(tok, "%lldx%lld", (long long *)&tr, (long long *)&tc) != 2 || tr < 1 || tc < 1) {
            fprintf(stderr, "panel_phases: bad tile %s (want RxC)\n", tok);
            return 2;
        }
        j.f64 = f64, j.threads = threads, j.m = m, j.n = n, j.k = k, j.tr = tr, j.tc = tc;
        j.tiles_c = (n + tc - 1) / tc;
        j.tiles = ((m + tr - 1) / tr) * j.tiles_c;
        j.a = a, j.b = b, j.bias = bias;
        for (int warm = 0; warm < 3; warm++)
            for (int v = 0; v < NV; v++) {
                j.variant = v;
                j.d = fresh ? malloc((size_t)(m * n) * es) : dkeep;
                run_call(&j, sched);
                if (fresh)
                    free(j.d);
            }
        for (int r = 0; r < reps; r++)
            for (int s = 0; s < NV; s++) {
                const int v = (s + r) % NV;
                j.variant = v;
                j.d = fresh ? malloc((size_t)(m * n) * es) : dkeep;
                const double t0 = now_ms();
                run_call(&j, sched);
                wall[v * reps + r] = now_ms() - t0;
                double start = 0, busy = 0, maxbusy = 0, end = 0;
                for (int t = 0; t < threads; t++) {
                    const double bt = j.ph[t][0] + j.ph[t][1] + j.ph[t][2];
                    start = j.first[t] > start ? j.first[t] : start;
                    end = j.last[t] > end ? j.last[t] : end;
                    maxbusy = bt > maxbusy ? bt : maxbusy;
                    busy += bt / threads;
                }
                if (v == V_PLAIN)
                    for (int t = 0; t < threads; t++)
                        thread_busy[t] += (j.ph[t][0] + j.ph[t][1] + j.ph[t][2]) / reps, thread_cpu[t] = j.cpu[t];
                xs[(v * NX + X_START) * reps + r] = start, xs[(v * NX + X_BUSY) * reps + r] = busy;
                xs[(v * NX + X_MAXBUSY) * reps + r] = maxbusy, xs[(v * NX + X_END) * reps + r] = end;
                if (fresh)
                    free(j.d);
                for (int p = 0; p < 3; p++) {
                    double sum = 0;
                    for (int t = 0; t < threads; t++)
                        sum += j.ph[t][p];
                    phs[(v * 3 + p) * reps + r] = sum / threads;
                }
            }
        printf("{\"dtype\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"threads\": %d, \"tile\": \"%s\", "
               "\"tiles\": %lld, \"fresh_d\": %s, \"sched\": \"%s\", \"reps\": %d",
               argv[1], (long long)m, (long long)n, (long long)k, threads, tok, (long long)j.tiles,
               fresh ? "true" : "false", sname, reps);
        double plain = 0;
        for (int v = 0; v < NV; v++) {
            const double w = median(wall + v * reps, reps);
            if (v == V_PLAIN)
                plain = w;
            printf(", \"%s\": {\"ms\": %.4f, \"over_plain\": %.4f, \"preload_ms\": %.4f, \"gemm_ms\": %.4f, "
                   "\"pass_ms\": %.4f, \"last_start_ms\": %.4f, \"mean_busy_ms\": %.4f, \"max_busy_ms\": %.4f, "
                   "\"last_end_ms\": %.4f}",
                   vname[v], w, w / plain, median(phs + (v * 3 + 0) * reps, reps),
                   median(phs + (v * 3 + 1) * reps, reps), median(phs + (v * 3 + 2) * reps, reps),
                   median(xs + (v * NX + X_START) * reps, reps), median(xs + (v * NX + X_BUSY) * reps, reps),
                   median(xs + (v * NX + X_MAXBUSY) * reps, reps), median(xs + (v * NX + X_END) * reps, reps));
        }
        /* plain: each thread slot's mean busy time over the calls and the CPU it last ran on */
        printf(", \"plain_thread_busy_ms\": [");
        for (int t = 0; t < threads; t++)
            printf("%s%.3f", t ? ", " : "", thread_busy[t]), thread_busy[t] = 0;
        printf("], \"plain_thread_cpu\": [");
        for (int t = 0; t < threads; t++)
            printf("%s%d", t ? ", " : "", thread_cpu[t]);
        printf("]}\n");
        fflush(stdout);
    }
    free(a), free(b), free(bias), free(dkeep), free(wall), free(phs), free(xs);
    return 0;
}
