/* fftw_prolog_probe.c : where a CPU FFT prolog's time goes, with FFTW alone (no fusemath).
 * B transforms of n complex floats, y = FFT(x * w * s), w real, on T threads:
 *   whole        plain: one FFTW plan over the batch on FFTW's T threads, in -> out
 *   rows         plain: T OpenMP threads, one single-transform plan per row, in -> out
 *   gather       the prolog alone: x * w * s into a per-thread scratch, no FFT
 *   scratch_out  fused: per row, the prolog into the scratch, then FFTW scratch -> out
 *   prolog_out   fused: per row, the prolog into out, then FFTW in place on out
 *   split2       fused: per row, even and odd samples through the prolog into two half-length
 *                scratches, FFTW in place on each (n/2 points, in L2), then the radix-2 butterfly
 *                with twiddles into out (the last pass FFTW would have made anyway)
 *   fm_plain     fusemath's planned c2c (effort measure, T threads), in -> out
 *   fm_fused     the same plan with the prolog multiply(w) + scale(s): what the library does
 *   gather_simd, scratch_out_simd   gather / scratch_out with the prolog as an explicit simd loop
 * Every round runs each method once, in a fixed order; prints one JSON line: per method the median ms over 15 rounds
 * and the median over rounds of its ratio to `whole`, and a max-error check of split2 against
 * scratch_out.   fftw_prolog_probe [T] [n] [B]   (defaults 16 65536 64) */
#define _POSIX_C_SOURCE 200809L
#include <complex.h>
#include <fftw3.h>
#include <fusemath/fusemath.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"

#define METHODS 10
#define ROUNDS 15
static const char *const names[METHODS] = {"whole", "rows", "gather", "scratch_out", "prolog_out", "split2", "fm_plain",
                                               "fm_fused",  "gather_simd", "scratch_out_simd"};

/* fusemath's plan of the batch, with or without the prolog; NULL (and a message) on failure. */
static fm_plan *fm_plan_of(fm_context *ctx, float complex *x, float complex *y, float *w, long n, long B, int T, int fused)
{
    fm_tensor in, out, win;
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    const int64_t shape[2] = {B, n}, wshape[1] = {n};
    fm_tensor_init(&in, x, cpu, FM_C64, 2, shape, NULL);
    fm_tensor_init(&out, y, cpu, FM_C64, 2, shape, NULL);
    fm_tensor_init(&win, w, cpu, FM_F32, 1, wshape, NULL);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.effort = FM_FFT_EFFORT_MEASURE, o.num_threads = T, o.naxes = 1, o.axes[0] = 1;
    if (fused) {
        o.prolog.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_SCALE;
        o.prolog.scale[0] = 0.5;
    }
    fm_plan *p = NULL;
    if (fm_fft_plan(ctx, &in, &out, fused ? &win : NULL, NULL, &o, &p) != FM_OK) {
        fprintf(stderr, "fftw_prolog_probe: fm_fft_plan: %s\n", fm_last_error());
        return NULL;
    }
    fprintf(stderr, "%s\n", fm_plan_describe(p));
    return p;
}

static void prolog(const float complex *x, const float *w, float s, float complex *dst, long n, long step, long first)
{
    for (long j = 0; j < n; j++)
        dst[j] = x[first + j * step] * (w[first + j * step] * s);
}

/* The prolog on a dense row as float pairs, restrict and an explicit simd loop. */
static void prolog_simd(const float *restrict x, const float *restrict w, float s, float *restrict dst, long n)
{
#pragma omp simd
    for (long j = 0; j < n; j++) {
        const float f = w[j] * s;
        dst[2 * j] = x[2 * j] * f;
        dst[2 * j + 1] = x[2 * j + 1] * f;
    }
}

int main(int argc, char **argv)
{
    const int T = (int)arg_long(argc, argv, 1, 16);
    const long n = arg_long(argc, argv, 2, 65536), B = arg_long(argc, argv, 3, 64), h = n / 2;
    if (n % 4) { /* split2's odd half starts n/2 in: FFTW's alignment needs n/2 even */
        fprintf(stderr, "fftw_prolog_probe: n must be a multiple of 4\n");
        return 2;
    }
    fftwf_init_threads();
    const size_t total = (size_t)n * (size_t)B;
    float complex *x = fftwf_alloc_complex(total), *y = fftwf_alloc_complex(total), *ref = fftwf_alloc_complex(total);
    float *w = fftwf_alloc_real((size_t)n);
    float complex *tw = fftwf_alloc_complex((size_t)h);
    float complex *scr = fftwf_alloc_complex((size_t)n * (size_t)T);
    if (!x || !y || !ref || !w || !tw || !scr)
        return 1;
    srand(3);
    for (size_t i = 0; i < total; i++)
        x[i] = (float)rand() / (float)RAND_MAX - 0.5f + I * ((float)rand() / (float)RAND_MAX - 0.5f);
    for (long j = 0; j < n; j++)
        w[j] = 1.0f + 0.5f * (float)cos(6.283185307179586 * 3.0 * (double)j / (double)n);
    for (long k = 0; k < h; k++)
        tw[k] = (float complex)cexp(-I * 6.283185307179586 * (double)k / (double)n);
    const float s = 0.5f;
    int nn = (int)n, hh = (int)h;
    fftwf_plan_with_nthreads(T);
    fftwf_plan whole = fftwf_plan_many_dft(1, &nn, (int)B, x, NULL, 1, nn, y, NULL, 1, nn, FFTW_FORWARD, FFTW_MEASURE);
    fftwf_plan_with_nthreads(1);
    fftwf_plan row = fftwf_plan_dft_1d(nn, x, y, FFTW_FORWARD, FFTW_MEASURE);
    fftwf_plan row_ip = fftwf_plan_dft_1d(nn, y, y, FFTW_FORWARD, FFTW_MEASURE);
    fftwf_plan half_ip = fftwf_plan_dft_1d(hh, scr, scr, FFTW_FORWARD, FFTW_MEASURE);
    fm_context *ctx = NULL;
    if (fm_context_create(&ctx) != FM_OK)
        return 1;
    fm_plan *fp[2] = {fm_plan_of(ctx, x, y, w, n, B, T, 0), fm_plan_of(ctx, x, y, w, n, B, T, 1)};
    if (!fp[0] || !fp[1])
        return 1;
    /* planning with MEASURE wrote over x: refill */
    srand(3);
    for (size_t i = 0; i < total; i++)
        x[i] = (float)rand() / (float)RAND_MAX - 0.5f + I * ((float)rand() / (float)RAND_MAX - 0.5f);
    double ms[METHODS][ROUNDS], ratio[METHODS][ROUNDS];
    double err = 0;
    for (int r = 0; r < ROUNDS + 1; r++) {
        double t[METHODS];
        for (int m = 0; m < METHODS; m++) {
            double t0 = now_us();
            if (m == 0) {
                fftwf_execute(whole);
            } else if (m == 6 || m == 7) {
                void *ptrs[FM_FFT_NSLOTS] = {x, y, m == 7 ? w : NULL, NULL};
                if (fm_plan_execute(fp[m - 6], ptrs, FM_FFT_NSLOTS, NULL) != FM_OK) {
                    fprintf(stderr, "fftw_prolog_probe: execute: %s\n", fm_last_error());
                    return 1;
                }
            } else {
#pragma omp parallel num_threads(T)
                {
                    float complex *sc = scr + (size_t)omp_get_thread_num() * (size_t)n;
#pragma omp for schedule(static)
                    for (long b = 0; b < B; b++) {
                        const float complex *xb = x + (size_t)b * (size_t)n;
                        float complex *yb = y + (size_t)b * (size_t)n;
                        if (m == 1) {
                            fftwf_execute_dft(row, (fftwf_complex *)xb, yb);
                        } else if (m == 2) {
                            prolog(xb, w, s, sc, n, 1, 0);
                        } else if (m == 3) {
                            prolog(xb, w, s, sc, n, 1, 0);
                            fftwf_execute_dft(row, sc, yb);
                        } else if (m == 4) {
                            prolog(xb, w, s, yb, n, 1, 0);
                            fftwf_execute_dft(row_ip, yb, yb);
                        } else if (m == 8) {
                            prolog_simd((const float *)xb, w, s, (float *)sc, n);
                        } else if (m == 9) {
                            prolog_simd((const float *)xb, w, s, (float *)sc, n);
                            fftwf_execute_dft(row, sc, yb);
                        } else {
                            float complex *e = sc, *o = sc + h;
                            prolog(xb, w, s, e, h, 2, 0);
                            prolog(xb, w, s, o, h, 2, 1);
                            fftwf_execute_dft(half_ip, e, e);
                            fftwf_execute_dft(half_ip, o, o);
                            for (long k = 0; k < h; k++) {
                                const float complex a = e[k], c = o[k] * tw[k];
                                yb[k] = a + c;
                                yb[k + h] = a - c;
                            }
                        }
                    }
                }
            }
            t[m] = now_us() - t0;
            if (r == 0 && m == 3)
                memcpy(ref, y, total * sizeof *y);
            if (r == 0 && (m == 5 || m == 7 || m == 9))
                for (size_t i = 0; i < total; i++)
                    if (cabsf(y[i] - ref[i]) > err)
                        err = cabsf(y[i] - ref[i]);
        }
        if (r == 0)
            continue; /* warm-up */
        for (int m = 0; m < METHODS; m++)
            ms[m][r - 1] = t[m] / 1e3, ratio[m][r - 1] = t[m] / t[0];
    }
    printf("{\"threads\": %d, \"n\": %ld, \"batch\": %ld, \"split2_fm_fused_simd_max_abs_err_vs_scratch_out\": %.3e", T, n, B,
           err);
    for (int m = 0; m < METHODS; m++)
        printf(", \"%s_ms\": %.4f, \"%s_over_whole\": %.4f", names[m], median_of(ms[m], ROUNDS), names[m],
               median_of(ratio[m], ROUNDS));
    printf("}\n");
    fm_plan_release(fp[0]), fm_plan_release(fp[1]);
    fm_context_destroy(ctx);
    fftwf_destroy_plan(whole), fftwf_destroy_plan(row), fftwf_destroy_plan(row_ip), fftwf_destroy_plan(half_ip);
    fftwf_free(x), fftwf_free(y), fftwf_free(ref), fftwf_free(w), fftwf_free(tw), fftwf_free(scr);
    fftwf_cleanup_threads();
    return 0;
}
