/* pipeline_test_util.h : what the split and pipeline tests (test_split*.c, test_pipeline_*.c) share:
 * seeded host operands, the relative difference that fails on a NaN, and the host tensors of the
 * operations they run both whole and in parts. */
#ifndef FM_TEST_PIPELINE_UTIL_H
#define FM_TEST_PIPELINE_UTIL_H

#include <fusemath/fusemath.h>
#include <math.h>
#include <stddef.h>

/* n values in [-1, 1) from an LCG: the same operands on every run */
static inline void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* max |x - ref| / max |ref|; a NaN (an element never written: 0xff bytes) counts as infinitely off */
static inline double max_rel(const float *x, const float *ref, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)x[i] - ref[i]);
        e = d != d ? INFINITY : fmax(e, d);
        m = fmax(m, fabs((double)ref[i]));
    }
    return e / (m > 0 ? m : 1);
}

/* d (bn, m, n) = a (bn, m, k) @ b (k, n) in f32 on the host: the tensors, and options that run it on
 * the GPU (staged) */
static inline void batched_matmul_host(float *a, float *b, float *d, int64_t bn, int64_t m, int64_t k, int64_t n,
                                       fm_tensor *ta, fm_tensor *tb, fm_tensor *td, fm_matmul_options *o)
{
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    const int64_t sa[3] = {bn, m, k}, sb[2] = {k, n}, sd[3] = {bn, m, n};
    fm_tensor_init(ta, a, cpu, FM_F32, 3, sa, NULL);
    fm_tensor_init(tb, b, cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(td, d, cpu, FM_F32, 3, sd, NULL);
    fm_matmul_options_init(o);
    o->execution = FM_EXECUTION_CUDA;
}

/* t c64 transforms of l points (the last axis) from in to out on the host, run on the CPU (the
 * reference); the tensors and options stay in *ti, *to, *o for the run under test. */
static inline fm_status fft_rows_on_cpu(fm_context *ctx, float *in, float *out, int64_t t, int64_t l, fm_tensor *ti,
                                        fm_tensor *to, fm_fft_options *o)
{
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    const int64_t sh[2] = {t, l};
    fm_tensor_init(ti, in, cpu, FM_C64, 2, sh, NULL);
    fm_tensor_init(to, out, cpu, FM_C64, 2, sh, NULL);
    fm_fft_options_init(o);
    o->naxes = 1;
    o->axes[0] = 1;
    o->execution = FM_EXECUTION_CPU;
    return fm_fft(ctx, ti, to, NULL, NULL, o, NULL);
}

#endif
