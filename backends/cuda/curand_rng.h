/* curand_rng.h : one curand-mode call on a libcurand generator (curand_rng.c), also for tests
 * that check the replay of the f64 run against libcurand's host generator (no GPU needed). */
#ifndef FM_CURAND_RNG_H
#define FM_CURAND_RNG_H

#include "internal.h"

#include <curand.h>

#define FM_CURAND_ROUND ((int64_t)262144) /* 65536 groups of 4 positions: one block of every subsequence */

typedef struct fm_curand_kind {
    int distribution; /* raw, uniform (0, 1], normal, lognormal */
    fm_dtype dtype;
    double mean, stddev;
} fm_curand_kind;

/* dst <- src, bytes (the last value of an odd-length normal); ctx: the caller's (a stream) */
typedef fm_status (*fm_curand_copy_fn)(void *dst, const void *src, size_t bytes, void *ctx);

/* The scratch fm_curand_call needs for this call (0: none): ROUND doubles with a run of f64 calls,
 * two values for an odd-length normal. */
size_t fm_curand_scratch_bytes(const fm_curand_kind *k, int64_t n, const fm_exec_args *args);

/* Seed g, position it for the call's arguments (args.ints[0..3], fusemath.h's fm_rng_plan) and
 * make the n values into out: what the curand backend runs after curandSetStream. g's stream,
 * seed and offset are left as this call set them. */
fm_status fm_curand_call(curandGenerator_t g, const fm_curand_kind *k, int64_t n, const fm_exec_args *args, void *out,
                         void *scratch, fm_curand_copy_fn copy, void *copy_ctx);

#endif
