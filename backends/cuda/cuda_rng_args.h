/* cuda_rng_args.h : the per-call arguments of an RNG plan (fusemath.h, fm_rng_plan) as the two
 * GPU backends (rngkernel_rng.c, curand_rng.c) check them, with the CPU backend's messages. */
#ifndef FM_CUDA_RNG_ARGS_H
#define FM_CUDA_RNG_ARGS_H

#include "internal.h"

static inline fm_status fm_cuda_rng_check_args(const fm_exec_args *args, int64_t n, int mode)
{
    const int64_t pos = args->ints[0], a = args->ints[1], b = args->ints[2];
    if (pos < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng execute: position args.ints[0] = %lld, expected >= 0",
                       (long long)pos);
    if (pos > INT64_MAX - n)
        return fm_fail(FM_ERR_TOO_LARGE, "rng execute: position %lld + %lld values passes 2^63 - 1",
                       (long long)pos, (long long)n);
    if (mode == FM_RNG_PORTABLE && (a || b))
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "rng execute: args.ints[1..2] = %lld, %lld; expected 0, 0 (the run "
                       "of f64 calls is curand mode's state)",
                       (long long)a, (long long)b);
    if (a < 0 || a > b || b > pos)
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "rng execute: the run of f64 calls args.ints[1..2] = [%lld, %lld), "
                       "expected 0 <= ints[1] <= ints[2] <= the position %lld",
                       (long long)a, (long long)b, (long long)pos);
    return FM_OK;
}

#endif
