/* openblas_vs_numpy.c : the OpenBLAS fusemath links (the system's) against the one NumPy
 * bundles (scipy-openblas64, ILP64, symbols prefixed scipy_ and suffixed 64_), on the same
 * plain f64 GEMM with the same thread count, in one process. Tells whether a gap between
 * fusemath and NumPy on the CPU is the library build or fusemath's own work.
 *   openblas_vs_numpy <path to libscipy_openblas64_*.so> m n k threads
 * (NumPy's copy: python -c "import numpy, glob, os; print(glob.glob(os.path.join(
 *  os.path.dirname(numpy.__file__), '..', 'numpy.libs', 'libscipy_openblas64_*.so'))[0])")
 * Prints one JSON line: best of 30 calls each, interleaved in 6 rounds, ms. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_timing.h"

void openblas_set_num_threads(int num_threads);
typedef void (*dgemm64_fn)(int, int, int, int64_t, int64_t, int64_t, double, const double *, int64_t, const double *,
                           int64_t, double, double *, int64_t);
typedef void (*set_threads_fn)(int);

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: openblas_vs_numpy <libscipy_openblas64_*.so> m n k threads\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "openblas_vs_numpy: %s\n", dlerror());
        return 1;
    }
    dgemm64_fn np_dgemm;
    set_threads_fn np_threads;
    /* dlsym returns an object pointer; POSIX guarantees it converts to a function pointer */
    *(void **)&np_dgemm = dlsym(h, "scipy_cblas_dgemm64_");
    *(void **)&np_threads = dlsym(h, "scipy_openblas_set_num_threads64_");
    if (!np_dgemm || !np_threads) {
        fprintf(stderr, "openblas_vs_numpy: %s has no scipy_cblas_dgemm64_ / scipy_openblas_set_num_threads64_\n",
                argv[1]);
        return 1;
    }
    const int m = atoi(argv[2]), n = atoi(argv[3]), k = atoi(argv[4]), th = atoi(argv[5]);
    if (m <= 0 || n <= 0 || k <= 0 || th <= 0) {
        fprintf(stderr, "openblas_vs_numpy: m, n, k and threads must be positive\n");
        return 2;
    }
    openblas_set_num_threads(th);
    np_threads(th);
    double *a = malloc(sizeof(double) * (size_t)m * (size_t)k), *b = malloc(sizeof(double) * (size_t)k * (size_t)n);
    double *c = calloc((size_t)m * (size_t)n, sizeof(double));
    if (!a || !b || !c) {
        fprintf(stderr, "openblas_vs_numpy: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)m * (size_t)k; i++)
        a[i] = (double)rand() / RAND_MAX - 0.5;
    for (size_t i = 0; i < (size_t)k * (size_t)n; i++)
        b[i] = (double)rand() / RAND_MAX - 0.5;
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < 6; r++)
        for (int lib = 0; lib < 2; lib++)
            for (int it = 0; it < 5; it++) {
                double t = now_us();
                if (lib == 0)
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a, k, b, n, 0.0, c, n);
                else
                    np_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a, k, b, n, 0.0, c, n);
                t = now_us() - t;
                if (t < best[lib])
                    best[lib] = t;
            }
    printf("{\"m\": %d, \"n\": %d, \"k\": %d, \"threads\": %d, \"system_ms\": %.4f, \"numpy_ms\": %.4f, "
           "\"system_over_numpy\": %.4f}\n",
           m, n, k, th, best[0] / 1e3, best[1] / 1e3, best[0] / best[1]);
    free(a);
    free(b);
    free(c);
    dlclose(h);
    return 0;
}
