/* fft_ref.h : the naive FFT reference and the tensor <-> C-order copies the FFT tests share
 * (fft_harness.h, test_fft_many_axes.c). */
#ifndef FM_TEST_FFT_REF_H
#define FM_TEST_FFT_REF_H
#include "mmref.h"

#include <complex.h>
#include <math.h>
#include <stdlib.h>

#define TEST_PI 3.14159265358979323846

static int64_t numel(int nd, const int64_t *sh)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= sh[i];
    return n;
}
static int64_t t_offset(const fm_tensor *t, int64_t lin)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (lin % t->shape[d]) * t->strides[d];
        lin /= t->shape[d];
    }
    return off;
}
/* logical C-order array <-> tensor */
static void t_store(const fm_tensor *t, const double complex *a)
{
    int64_t n = numel(t->ndim, t->shape);
    for (int64_t i = 0; i < n; i++)
        elem_set(t->data, t->dtype, t_offset(t, i), a[i]);
}
static void t_load(const fm_tensor *t, double complex *a)
{
    int64_t n = numel(t->ndim, t->shape);
    for (int64_t i = 0; i < n; i++)
        a[i] = elem_get(t->data, t->dtype, t_offset(t, i));
}
/* ---- naive reference ---- */
static void dft_axis(double complex *a, int nd, const int64_t *sh, int axis, int sign)
{
    int64_t n = sh[axis], inner = 1, outer = 1;
    for (int d = axis + 1; d < nd; d++)
        inner *= sh[d];
    for (int d = 0; d < axis; d++)
        outer *= sh[d];
    double complex *line = malloc(sizeof *line * (size_t)n), *res = malloc(sizeof *res * (size_t)n);
    double complex *w = malloc(sizeof *w * (size_t)n);
    for (int64_t k = 0; k < n; k++)
        w[k] = cexp(sign * 2.0 * TEST_PI * I * (double)k / (double)n);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double complex *p = a + o * n * inner + i;
            for (int64_t j = 0; j < n; j++)
                line[j] = p[j * inner];
            for (int64_t k = 0; k < n; k++) {
                long double re = 0, im = 0;
                for (int64_t j = 0; j < n; j++) {
                    double complex v = line[j] * w[(j * k) % n];
                    re += creal(v), im += cimag(v);
                }
                res[k] = CMPLX((double)re, (double)im);
            }
            for (int64_t k = 0; k < n; k++)
                p[k * inner] = res[k];
        }
    free(line), free(res), free(w);
}

/* a copy of the sub-block of x (shape from) with shape to (every extent <= from's) */
static void crop(int nd, const int64_t *from, const int64_t *to, const double complex *x, double complex *y)
{
    int64_t n = numel(nd, to);
    for (int64_t i = 0; i < n; i++) {
        int64_t lin = i, src = 0, mul = 1;
        for (int d = nd - 1; d >= 0; d--) {
            src += (lin % to[d]) * mul;
            lin /= to[d];
            mul *= from[d];
        }
        y[i] = x[src];
    }
}

static double norm_factor(int norm, int inverse, double total)
{
    if (norm == FM_FFT_NORM_ORTHO)
        return 1.0 / sqrt(total);
    if ((norm == FM_FFT_NORM_FORWARD) != !!inverse)
        return 1.0 / total;
    return 1.0;
}

#endif
