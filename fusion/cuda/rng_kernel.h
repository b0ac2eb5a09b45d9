/* rng_kernel.h : the portable RNG stream (fusion/philox_portable.h) as one generated CUDA kernel per
 * (distribution, dtype), compiled with NVRTC from the very header the CPU backend includes and
 * with --fmad=false, so every value is bit-identical to backends/cpu/philox_rng.c's.
 *
 * One launch per fill: each warp takes runs of 32 x FM_RNG_NB 16-byte vectors (one Philox block's
 * values each: 4 of a 32-bit kind, 2 of f64), lane l the l-th of each 32, so stores coalesce. A
 * position that does not start a block (shift R = position mod values-per-block) takes the first
 * values of the next lane's block through a warp shuffle (one kernel instance per R). The few
 * values before out's first 16-byte boundary and after the last whole vector are made one by one
 * by the first threads. Indices are 64-bit throughout. */
#ifndef FM_RNG_KERNEL_H
#define FM_RNG_KERNEL_H

#include "internal.h"

typedef struct fm_rng_kernel fm_rng_kernel;

/* Whether the kernel generator has a row for (distribution, dtype) in portable mode; else
 * FM_ERR_NOT_APPLICABLE with the reason (a distribution added on the CPU only, a dtype). */
fm_status fm_rng_kernel_check(int distribution, fm_dtype dtype);

/* The CUDA C++ source (malloc'ed, caller frees): philox_portable.h's text and the row's kernel. */
fm_status fm_rng_kernel_source(int distribution, fm_dtype dtype, char **source);

/* Compile (NVRTC, cached under the settings' cache_dir) and load for device_id. p0, p1: the
 * distribution's parameters as fm_rng_params holds them (a, b). */
fm_status fm_rng_kernel_create(const fm_settings *settings, int distribution, fm_dtype dtype, double p0, double p1,
                               int device_id, fm_rng_kernel **out);
void fm_rng_kernel_destroy(fm_rng_kernel *k); /* accepts NULL */

/* A fill's launch (the kernel's fm_rng_args, the same layout): out[0, n) gets the values at
 * positions [position, position + n); kernel instance fm_rng_r<*R> on *grid blocks of
 * FM_RNG_KERNEL_THREADS, at most max_blocks (the device's resident blocks). Also for tests, which
 * run the kernel on the host. */
#define FM_RNG_KERNEL_THREADS 256
typedef struct fm_rng_kernel_args {
    void *out;
    uint64_t seed;
    int64_t n, head, nvec;
    uint64_t b_first, pos;
    double p0, p1;
    float f0, f1;
} fm_rng_kernel_args;
fm_status fm_rng_kernel_setup(int distribution, fm_dtype dtype, double p0, double p1, void *out, int64_t n,
                              uint64_t seed, int64_t position, int64_t max_blocks, fm_rng_kernel_args *a, int *R,
                              unsigned *grid);

/* Enqueue the fill of out[0, n) with the values at stream positions [position, position + n) of
 * seed's stream, on stream (cudaStream_t). out: aligned to the dtype's size. */
fm_status fm_rng_kernel_launch(const fm_rng_kernel *k, void *out, int64_t n, uint64_t seed, int64_t position,
                               void *stream);

/* The kernel's description for describe(): "vpb=4 nb=8 grid=..." */
const char *fm_rng_kernel_text(const fm_rng_kernel *k);

#endif
