/* openblas_callback_probe.c : does OpenBLAS's threads callback (0.3.28+, scipy-openblas32
 * build) let fusemath thread one GEMM on its own pool and run the bias+relu pass on the
 * same threads, at NumPy's speed? The system OpenBLAS 0.3.26 has no callback: its workers
 * spin ~0.1 s after each call and the pass on our pool shares every core with them.
 *
 *   openblas_callback_probe <libscipy_openblas.so> threads [m n k ...]
 *
 * Methods, all f64 row-major D = relu(A @ B + bias) or the plain product:
 *   native_plain   OpenBLAS's own threads, plain (what NumPy's a @ b does)
 *   native_fused   OpenBLAS's own threads, then the pass on fusemath's pool (cpu_pool.c)
 *   cb_plain       the GEMM's jobs run on fusemath's pool (cpu_pool.c) through the callback
 *   cb_fused       the same, then the pass on the same pool
 *   spin_plain/_fused  as cb_*, on a gang in this file whose workers spin 200 us before
 *                  sleeping (cpu_pool.c's workers sleep at once)
 * 7 rounds; in each, every method after a 0.2 s pause: 2 warm-up calls, then the median of
 * `reps` calls. Ratios to native_plain are per round, then the median over rounds. JSON
 * lines on stdout. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../backends/cpu/cpu_pool.h"

typedef void (*dojob_fn)(int thread_num, void *jobdata, int dojob_data);
typedef void (*threads_cb)(int sync, dojob_fn dojob, int numjobs, size_t elsize, void *jobdata, int dojob_data);
typedef void (*dgemm_fn)(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
                         const double *b, int ldb, double beta, double *c, int ldc);

static dgemm_fn dgemm;
static void (*set_threads)(int);
static void (*set_callback)(threads_cb);
static int nthreads;
static long callbacks; /* how often OpenBLAS handed its jobs to the pool */

typedef struct {
    dojob_fn dojob;
    char *jobdata;
    size_t elsize;
    int data;
} cb_job;

static void run_one_job(void *arg, int64_t i)
{
    cb_job *j = arg;
    j->dojob((int)i, j->jobdata + (size_t)i * j->elsize, j->data);
}

/* OpenBLAS's level-3 jobs wait for each other's packed panels by spinning: every job
 * needs its own thread, which fm_pool_run gives when numjobs <= threads. */
static void pool_callback(int sync, dojob_fn dojob, int numjobs, size_t elsize, void *jobdata, int dojob_data)
{
    (void)sync; /* fm_pool_run always returns when all jobs are done */
    callbacks++;
    cb_job j = {dojob, jobdata, elsize, dojob_data};
    fm_pool_run(numjobs, numjobs, run_one_job, &j);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* A gang whose workers spin up to SPIN_US after a job before they sleep, as OpenBLAS's
 * own do (for ~0.1 s): a job that follows soon starts without a futex wake-up. Job i
 * runs on thread i (the caller is 0). */
#define SPIN_US 200
#define GANG_MAX 128
static atomic_ulong gang_gen;
static atomic_int gang_left;
static fm_pool_fn gang_fn;
static void *gang_arg;
static int gang_n, gang_started;
static pthread_mutex_t gang_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gang_wake = PTHREAD_COND_INITIALIZER;

static void *gang_worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    unsigned long seen = 0;
    for (;;) {
        double t0 = now();
        for (long spins = 0; atomic_load_explicit(&gang_gen, memory_order_acquire) == seen; spins++)
            if ((spins & 1023) == 1023 && now() - t0 > SPIN_US * 1e-6) {
                pthread_mutex_lock(&gang_lock);
                while (atomic_load(&gang_gen) == seen)
                    pthread_cond_wait(&gang_wake, &gang_lock);
                pthread_mutex_unlock(&gang_lock);
                break;
            }
        seen = atomic_load_explicit(&gang_gen, memory_order_acquire);
        if (id < gang_n) {
            gang_fn(gang_arg, id);
            atomic_fetch_sub_explicit(&gang_left, 1, memory_order_release);
        }
    }
    return NULL;
}

static void gang_run(int n, fm_pool_fn fn, void *arg)
{
    while (gang_started < GANG_MAX - 1 && gang_started < nthreads - 1) {
        pthread_t t;
        pthread_create(&t, NULL, gang_worker, (void *)(intptr_t)(gang_started + 1));
        pthread_detach(t);
        gang_started++;
    }
    gang_fn = fn;
    gang_arg = arg;
    gang_n = n;
    atomic_store(&gang_left, n - 1);
    pthread_mutex_lock(&gang_lock);
    atomic_fetch_add_explicit(&gang_gen, 1, memory_order_release);
    pthread_cond_broadcast(&gang_wake);
    pthread_mutex_unlock(&gang_lock);
    fn(arg, 0);
    while (atomic_load_explicit(&gang_left, memory_order_acquire) > 0)
        ;
}

static void gang_callback(int sync, dojob_fn dojob, int numjobs, size_t elsize, void *jobdata, int dojob_data)
{
    (void)sync;
    callbacks++;
    cb_job j = {dojob, jobdata, elsize, dojob_data};
    gang_run(numjobs, run_one_job, &j);
}

typedef struct {
    double *d;
    const double *bias;
    int64_t m, n, rows;
} pass_args;

static void pass_rows(void *arg, int64_t ci)
{
    pass_args *p = arg;
    int64_t r0 = ci * p->rows, r1 = r0 + p->rows < p->m ? r0 + p->rows : p->m;
    for (int64_t i = r0; i < r1; i++) {
        double *row = p->d + i * p->n;
        for (int64_t j = 0; j < p->n; j++) {
            double v = row[j] + p->bias[j];
            row[j] = v > 0 ? v : 0;
        }
    }
}


static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum { NATIVE_PLAIN, NATIVE_FUSED, CB_PLAIN, CB_FUSED, SPIN_PLAIN, SPIN_FUSED, NMETH };
static const char *names[NMETH] = {"native_plain", "native_fused", "cb_plain", "cb_fused", "spin_plain", "spin_fused"};

static void call(int meth, int m, int n, int k, const double *a, const double *b, const double *bias, double *d)
{
    set_callback(meth >= SPIN_PLAIN ? gang_callback : meth >= CB_PLAIN ? pool_callback : NULL);
    dgemm(101 /* row major */, 111, 111, m, n, k, 1.0, a, k, b, n, 0.0, d, n);
    if (meth == NATIVE_FUSED || meth == CB_FUSED || meth == SPIN_FUSED) {
        pass_args p = {d, bias, m, n, (m + nthreads - 1) / nthreads};
        if (meth == SPIN_FUSED)
            gang_run((int)((m + p.rows - 1) / p.rows), pass_rows, &p);
        else
            fm_pool_run(nthreads, (m + p.rows - 1) / p.rows, pass_rows, &p);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: openblas_callback_probe <libscipy_openblas.so> threads [m n k ...]\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "openblas_callback_probe: %s\n", dlerror());
        return 1;
    }
    *(void **)&dgemm = dlsym(h, "scipy_cblas_dgemm");
    *(void **)&set_threads = dlsym(h, "scipy_openblas_set_num_threads");
    *(void **)&set_callback = dlsym(h, "scipy_openblas_set_threads_callback_function");
    if (!dgemm || !set_threads || !set_callback) {
        fprintf(stderr, "openblas_callback_probe: %s lacks scipy_cblas_dgemm / set_num_threads / callback\n", argv[1]);
        return 1;
    }
    nthreads = atoi(argv[2]);
    set_threads(nthreads);
    int default_sizes[] = {1024, 1024, 1024, 2048, 2048, 2048, 16384, 512, 128, 8192, 1024, 64};
    int *sz = default_sizes, nsz = 4;
    int given[64];
    if (argc > 3) {
        nsz = 0;
        for (int i = 3; i + 2 < argc && nsz < 21; i += 3, nsz++)
            for (int q = 0; q < 3; q++)
                given[3 * nsz + q] = atoi(argv[i + q]);
        sz = given;
    }
    for (int s = 0; s < nsz; s++) {
        int m = sz[3 * s], n = sz[3 * s + 1], k = sz[3 * s + 2];
        double *a = malloc(sizeof(double) * (size_t)m * k), *b = malloc(sizeof(double) * (size_t)k * n);
        double *bias = malloc(sizeof(double) * (size_t)n), *d = malloc(sizeof(double) * (size_t)m * n);
        double *ref = malloc(sizeof(double) * (size_t)m * n);
        srand(1);
        for (size_t i = 0; i < (size_t)m * k; i++) a[i] = rand() / (double)RAND_MAX - 0.5;
        for (size_t i = 0; i < (size_t)k * n; i++) b[i] = rand() / (double)RAND_MAX - 0.5;
        for (int i = 0; i < n; i++) bias[i] = rand() / (double)RAND_MAX - 0.5;
        /* the four methods must agree: fused ones against the native product + pass */
        call(NATIVE_FUSED, m, n, k, a, b, bias, ref);
        double err = 0;
        for (int meth = CB_PLAIN; meth < NMETH; meth++) {
            call(meth, m, n, k, a, b, bias, d);
            if (meth == CB_PLAIN || meth == SPIN_PLAIN) {
                pass_args p = {d, bias, m, n, m};
                pass_rows(&p, 0);
            }
            for (size_t i = 0; i < (size_t)m * n; i++) err = fmax(err, fabs(d[i] - ref[i]));
        }
        double flops = 2.0 * m * n * k;
        int reps = (int)fmin(200, fmax(5, 0.15 / (flops / 3e11)));
        double t[NMETH][7], ratio[NMETH][7], per[200];
        for (int r = 0; r < 7; r++) {
            for (int q = 0; q < NMETH; q++) {
                int meth = r % 2 ? NMETH - 1 - q : q;
                struct timespec pause = {0, 200000000};
                nanosleep(&pause, NULL);
                call(meth, m, n, k, a, b, bias, d);
                call(meth, m, n, k, a, b, bias, d);
                for (int i = 0; i < reps; i++) {
                    double t0 = now();
                    call(meth, m, n, k, a, b, bias, d);
                    per[i] = now() - t0;
                }
                t[meth][r] = median(per, reps);
            }
            for (int meth = 0; meth < NMETH; meth++) ratio[meth][r] = t[meth][r] / t[NATIVE_PLAIN][r];
        }
        printf("{\"m\": %d, \"n\": %d, \"k\": %d, \"threads\": %d, \"max_abs_diff\": %.3g, \"callbacks\": %ld", m, n, k,
               nthreads, err, callbacks);
        for (int meth = 0; meth < NMETH; meth++)
            printf(", \"%s_ms\": %.4f, \"%s_over_native_plain\": %.4f", names[meth], 1e3 * median(t[meth], 7),
                   names[meth], median(ratio[meth], 7));
        printf("}\n");
        fflush(stdout);
        free(a), free(b), free(bias), free(d), free(ref);
    }
    set_callback(NULL);
    return 0;
}
