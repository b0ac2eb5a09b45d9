/* bench_timing.h : the monotonic clock, the median, the positional arguments and the error check of the C
 * baselines. */
#ifndef FM_BENCH_TIMING_H
#define FM_BENCH_TIMING_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline double now_us(void) { return now_ns() * 1e-3; }

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median of x[0..n), which it sorts (x[0] is then the minimum) */
static inline double median_of(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, bench_cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* argv[i] as a positive integer, def when absent; anything else: a message and exit(1) */
static inline long arg_long(int argc, char **argv, int i, long def)
{
    char *end = NULL;
    long v = argc > i ? strtol(argv[i], &end, 10) : def;
    if (argc > i && (!end || *end != '\0' || v < 1)) {
        fprintf(stderr, "%s: argument %d (%s) must be a positive integer\n", argv[0], i, argv[i]);
        exit(1);
    }
    return v;
}

/* A library call (CUDA, cuFFT, fusemath) that returns nonzero: a message naming it and exit(1). A program
 * may define BENCH_DETAIL (e.g. fm_last_error()) before including this file to add the library's detail. */
#ifndef BENCH_DETAIL
#define BENCH_DETAIL ""
#endif
#define BENCH_CHECK(call)                                                                                  \
    do {                                                                                                    \
        int e_ = (int)(call);                                                                               \
        if (e_ != 0) {                                                                                      \
            fprintf(stderr, "%s:%d: %s failed: status %d %s\n", __FILE__, __LINE__, #call, e_, BENCH_DETAIL); \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

#endif
