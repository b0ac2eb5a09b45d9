/* fft_overhead_gpu.c : host time per call of fusemath's GPU FFT against the bare
 * cufftExecC2C call, in one process, on the same buffers and stream. No Python: this
 * is the library's own cost.
 *
 * A c64 1-D forward transform of length n (64 by default), batch 1, memory from
 * cudaMalloc, one non-blocking stream. Methods, in this order within each round:
 *   bare       cufftPlan1d made beforehand, cufftSetStream once; cufftExecC2C
 *   planned    fm_fft_plan once (public API); fm_plan_execute(plan, {in, out, NULL, NULL}, 4, s)
 *   stateless  fm_fft(ctx, &in, &out, NULL, NULL, &opts, s) (plan from the context's cache)
 *   fused      (extra) planned with prolog = multiply by a real f32 window and epilog =
 *              scale 0.5 (cuFFT callbacks); {in, out, window, NULL}
 * Per round and method: wall clock around `calls` back-to-back calls, then one
 * cudaStreamSynchronize; us per call = time / calls. Median and min over `bursts` rounds.
 * Every method's result is checked against a naive double-precision DFT first (max
 * |got - ref| / max |ref| <= 1e-3), reported as "max_rel_err".
 *
 * Prints one JSON line {"n", "calls", "bursts", "bare_us", "planned_us", "stateless_us",
 * "fused_us", ..._min, "planned_above_bare_us", "stateless_above_bare_us", "plan", "errors"}.
 * A fusemath method that fails to plan or execute is reported in "errors" (its time null)
 * and the others still run.
 *
 * Usage: fft_overhead_gpu [n (64)] [calls per burst (20000)] [bursts (15)]
 * No GPU (cudaGetDeviceCount fails or finds none): message on stderr, {"error": ...} on
 * stdout, exit status 2. Exit 1 on a failing bare CUDA/cuFFT call or a wrong result. */
#define _POSIX_C_SOURCE 200809L
#include <fusemath/fusemath.h>

#include <cuda_runtime_api.h>
#include <cufft.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_timing.h"

enum { M_BARE, M_PLANNED, M_STATELESS, M_FUSED, M_COUNT };
static const char *const method_names[M_COUNT] = {"bare", "planned", "stateless", "fused"};

#define CU(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "fft_overhead_gpu: %s failed (line %d): %s\n", #call, __LINE__, cudaGetErrorString(e_));   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#define FT(call)                                                                                                       \
    do {                                                                                                               \
        cufftResult r_ = (call);                                                                                       \
        if (r_ != CUFFT_SUCCESS) {                                                                                     \
            fprintf(stderr, "fft_overhead_gpu: %s failed (line %d): cufftResult %d\n", #call, __LINE__, (int)r_);      \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* JSON-safe copy of a message (quotes, backslashes and control characters replaced). */
static void json_clean(char *dst, size_t size, const char *src)
{
    size_t j = 0;
    for (size_t i = 0; src && src[i] && j + 1 < size; i++) {
        char c = src[i];
        dst[j++] = (c == '"' || c == '\\' || (unsigned char)c < 0x20) ? '\'' : c;
    }
    dst[j] = '\0';
}

/* max |got - ref| / max |ref|, ref = scale * DFT(x * w) in double (w may be NULL). */
static double check(const float *got, const float *x, const float *w, double scale, long n)
{
    double maxerr = 0, maxref = 0;
    const double two_pi = 6.283185307179586;
    for (long k = 0; k < n; k++) {
        double re = 0, im = 0;
        for (long j = 0; j < n; j++) {
            double a = x[2 * j] * (w ? w[j] : 1.0), b = x[2 * j + 1] * (w ? w[j] : 1.0);
            double ang = -two_pi * (double)((k * j) % n) / (double)n, c = cos(ang), s = sin(ang);
            re += a * c - b * s;
            im += a * s + b * c;
        }
        re *= scale, im *= scale;
        double dr = got[2 * k] - re, di = got[2 * k + 1] - im;
        double e = sqrt(dr * dr + di * di), r = sqrt(re * re + im * im);
        maxerr = e > maxerr ? e : maxerr;
        maxref = r > maxref ? r : maxref;
    }
    return maxref > 0 ? maxerr / maxref : maxerr;
}

int main(int argc, char **argv)
{
    if (argc > 1 && argv[1][0] == '-') {
        printf("usage: fft_overhead_gpu [n (64)] [calls per burst (20000)] [bursts (15)]\n");
        return 0;
    }
    long n = arg_long(argc, argv, 1, 64);
    long calls = arg_long(argc, argv, 2, 20000);
    long bursts = arg_long(argc, argv, 3, 15);

    int ndev = 0;
    cudaError_t de = cudaGetDeviceCount(&ndev);
    if (de != cudaSuccess || ndev < 1) {
        const char *why = de != cudaSuccess ? cudaGetErrorString(de) : "no CUDA device";
        fprintf(stderr, "fft_overhead_gpu: no GPU (%s)\n", why);
        printf("{\"error\": \"no GPU: %s\"}\n", why);
        return 2;
    }
    CU(cudaSetDevice(0));

    size_t bytes = (size_t)n * 2 * sizeof(float);
    float *hx = malloc(bytes), *hy = malloc(bytes), *hw = malloc((size_t)n * sizeof(float));
    double *t[M_COUNT];
    for (int m = 0; m < M_COUNT; m++)
        t[m] = calloc((size_t)bursts, sizeof(double));
    if (!hx || !hy || !hw || !t[0] || !t[1] || !t[2] || !t[3]) {
        fprintf(stderr, "fft_overhead_gpu: out of host memory\n");
        return 1;
    }
    for (long i = 0; i < n; i++) {
        hx[2 * i] = (float)((unsigned long)(i * 2654435761u) % 1000u) / 500.0f - 1.0f;
        hx[2 * i + 1] = (float)((unsigned long)(i * 40503u + 7u) % 1000u) / 500.0f - 1.0f;
        hw[i] = (float)(0.5 - 0.5 * cos(6.283185307179586 * (double)i / (double)n)); /* Hann */
    }
    void *in = NULL, *out = NULL, *win = NULL;
    CU(cudaMalloc(&in, bytes));
    CU(cudaMalloc(&out, bytes));
    CU(cudaMalloc(&win, (size_t)n * sizeof(float)));
    CU(cudaMemcpy(in, hx, bytes, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(win, hw, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    /* bare */
    cufftHandle bare;
    FT(cufftPlan1d(&bare, (int)n, CUFFT_C2C, 1));
    FT(cufftSetStream(bare, s));

    /* fusemath */
    char errors[M_COUNT][400];
    memset(errors, 0, sizeof errors);
    int ok[M_COUNT] = {1, 0, 0, 0};
    fm_context *ctx = NULL;
    fm_plan *plan = NULL, *fplan = NULL;
    fm_device cuda = {FM_DEVICE_CUDA, 0};
    int64_t shape[1] = {n};
    fm_tensor tin, tout, twin;
    fm_fft_options o, of;
    fm_fft_options_init(&o);
    fm_fft_options_init(&of);
    of.prolog.ops = FM_FFT_OP_MULTIPLY;
    of.epilog.ops = FM_FFT_OP_SCALE;
    of.epilog.scale[0] = 0.5;
    of.epilog.scale[1] = 0.0;
    if (fm_context_create(&ctx) != FM_OK || fm_tensor_init(&tin, in, cuda, FM_C64, 1, shape, NULL) != FM_OK ||
        fm_tensor_init(&tout, out, cuda, FM_C64, 1, shape, NULL) != FM_OK ||
        fm_tensor_init(&twin, win, cuda, FM_F32, 1, shape, NULL) != FM_OK) {
        json_clean(errors[M_PLANNED], sizeof errors[0], fm_last_error());
        printf("{\"error\": \"fusemath setup: %s\"}\n", errors[M_PLANNED]);
        return 1;
    }
    if (fm_fft_plan(ctx, &tin, &tout, NULL, NULL, &o, &plan) == FM_OK)
        ok[M_PLANNED] = ok[M_STATELESS] = 1;
    else {
        json_clean(errors[M_PLANNED], sizeof errors[0], fm_last_error());
        json_clean(errors[M_STATELESS], sizeof errors[0], "planning failed (see planned)");
    }
    if (fm_fft_plan(ctx, &tin, &tout, &twin, NULL, &of, &fplan) == FM_OK)
        ok[M_FUSED] = 1;
    else
        json_clean(errors[M_FUSED], sizeof errors[0], fm_last_error());

    void *ptrs[FM_FFT_NSLOTS] = {in, out, NULL, NULL};
    void *fptrs[FM_FFT_NSLOTS] = {in, out, win, NULL};
    double max_rel_err[M_COUNT] = {0, 0, 0, 0};
    int wrong = 0;

    /* one call of each, checked, then a warm-up */
    for (int m = 0; m < M_COUNT; m++) {
        if (!ok[m])
            continue;
        CU(cudaMemsetAsync(out, 0, bytes, s));
        fm_status st = FM_OK;
        if (m == M_BARE)
            FT(cufftExecC2C(bare, in, out, CUFFT_FORWARD));
        else if (m == M_PLANNED)
            st = fm_plan_execute(plan, ptrs, FM_FFT_NSLOTS, s);
        else if (m == M_STATELESS)
            st = fm_fft(ctx, &tin, &tout, NULL, NULL, &o, s);
        else
            st = fm_plan_execute(fplan, fptrs, FM_FFT_NSLOTS, s);
        if (st != FM_OK) {
            ok[m] = 0;
            json_clean(errors[m], sizeof errors[0], fm_last_error());
            continue;
        }
        CU(cudaStreamSynchronize(s));
        CU(cudaMemcpy(hy, out, bytes, cudaMemcpyDeviceToHost));
        max_rel_err[m] = check(hy, hx, m == M_FUSED ? hw : NULL, m == M_FUSED ? 0.5 : 1.0, n);
        if (!(max_rel_err[m] <= 1e-3)) {
            wrong = 1;
            ok[m] = 0;
            snprintf(errors[m], sizeof errors[0], "wrong result: max rel err %.3g", max_rel_err[m]);
        }
    }
    for (int i = 0; i < 200; i++) {
        FT(cufftExecC2C(bare, in, out, CUFFT_FORWARD));
        if (ok[M_PLANNED])
            fm_plan_execute(plan, ptrs, FM_FFT_NSLOTS, s);
        if (ok[M_STATELESS])
            fm_fft(ctx, &tin, &tout, NULL, NULL, &o, s);
        if (ok[M_FUSED])
            fm_plan_execute(fplan, fptrs, FM_FFT_NSLOTS, s);
    }
    CU(cudaStreamSynchronize(s));

    /* timed rounds: bare, planned, stateless, fused */
    for (long b = 0; b < bursts; b++) {
        double t0 = now_us();
        for (long i = 0; i < calls; i++)
            cufftExecC2C(bare, in, out, CUFFT_FORWARD);
        CU(cudaStreamSynchronize(s));
        t[M_BARE][b] = (now_us() - t0) / (double)calls;
        if (ok[M_PLANNED]) {
            t0 = now_us();
            for (long i = 0; i < calls; i++)
                fm_plan_execute(plan, ptrs, FM_FFT_NSLOTS, s);
            CU(cudaStreamSynchronize(s));
            t[M_PLANNED][b] = (now_us() - t0) / (double)calls;
        }
        if (ok[M_STATELESS]) {
            t0 = now_us();
            for (long i = 0; i < calls; i++)
                fm_fft(ctx, &tin, &tout, NULL, NULL, &o, s);
            CU(cudaStreamSynchronize(s));
            t[M_STATELESS][b] = (now_us() - t0) / (double)calls;
        }
        if (ok[M_FUSED]) {
            t0 = now_us();
            for (long i = 0; i < calls; i++)
                fm_plan_execute(fplan, fptrs, FM_FFT_NSLOTS, s);
            CU(cudaStreamSynchronize(s));
            t[M_FUSED][b] = (now_us() - t0) / (double)calls;
        }
    }

    double med[M_COUNT], mn[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) {
        mn[m] = t[m][0];
        for (long b = 1; b < bursts; b++)
            mn[m] = t[m][b] < mn[m] ? t[m][b] : mn[m];
        med[m] = median_of(t[m], (int)bursts);
    }
    char desc[2][400];
    json_clean(desc[0], sizeof desc[0], plan ? fm_plan_describe(plan) : "");
    json_clean(desc[1], sizeof desc[1], fplan ? fm_plan_describe(fplan) : "");
    printf("{\"n\": %ld, \"calls\": %ld, \"bursts\": %ld", n, calls, bursts);
    for (int m = 0; m < M_COUNT; m++) {
        if (ok[m])
            printf(", \"%s_us\": %.4f, \"%s_us_min\": %.4f, \"%s_max_rel_err\": %.3g", method_names[m], med[m],
                   method_names[m], mn[m], method_names[m], max_rel_err[m]);
        else
            printf(", \"%s_us\": null, \"%s_us_min\": null", method_names[m], method_names[m]);
    }
    if (ok[M_PLANNED])
        printf(", \"planned_above_bare_us\": %.4f", med[M_PLANNED] - med[M_BARE]);
    if (ok[M_STATELESS])
        printf(", \"stateless_above_bare_us\": %.4f", med[M_STATELESS] - med[M_BARE]);
    if (ok[M_FUSED])
        printf(", \"fused_above_bare_us\": %.4f", med[M_FUSED] - med[M_BARE]);
    printf(", \"plan\": \"%s\", \"fused_plan\": \"%s\", \"errors\": {", desc[0], desc[1]);
    int first = 1;
    for (int m = 0; m < M_COUNT; m++) {
        if (errors[m][0]) {
            printf("%s\"%s\": \"%s\"", first ? "" : ", ", method_names[m], errors[m]);
            first = 0;
        }
    }
    printf("}}\n");

    fm_plan_release(plan);
    fm_plan_release(fplan);
    fm_context_destroy(ctx);
    cufftDestroy(bare);
    cudaStreamDestroy(s);
    cudaFree(in);
    cudaFree(out);
    cudaFree(win);
    free(hx);
    free(hy);
    free(hw);
    for (int m = 0; m < M_COUNT; m++)
        free(t[m]);
    return wrong ? 1 : 0;
}
