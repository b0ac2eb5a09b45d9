/* fft_overhead_gpu.c : host time per call of fusemath's GPU FFT next to the bare cufftExecC2C in one process
 * (benchmarks/README.md): c64 1-D, batch 1; bare, planned (fm_plan_execute) and stateless (fm_fft) in rounds
 * of `calls` calls and one sync, median over rounds; every result
 * checked against a double-precision DFT first. Usage: fft_overhead_gpu [n (64)] [calls (20000)] [rounds (15)];
 * one JSON line; no GPU: {"error"} and exit 2. */
#define _POSIX_C_SOURCE 200809L
#include <fusemath/fusemath.h>

#include <cuda_runtime_api.h>
#include <cufft.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"

enum { M_BARE, M_PLANNED, M_STATELESS, M_COUNT };
static const char *const names[M_COUNT] = {"bare", "planned", "stateless"};

static cufftHandle bare;
static fm_context *ctx;
static fm_plan *plan[M_COUNT];
static fm_tensor tin, tout;
static fm_fft_options opts;
static void *in, *out;
static cudaStream_t s;

static fm_status call(int m)
{
    void *ptrs[FM_FFT_NSLOTS] = {in, out, NULL, NULL};
    if (m == M_BARE)
        return cufftExecC2C(bare, in, out, CUFFT_FORWARD) == CUFFT_SUCCESS ? FM_OK : FM_ERR_BACKEND;
    if (m == M_STATELESS)
        return fm_fft(ctx, &tin, &tout, NULL, NULL, &opts, s);
    return fm_plan_execute(plan[m], ptrs, FM_FFT_NSLOTS, s);
}

/* max |got - ref| / max |ref|, ref = the DFT of x in double */
static double check(const float *got, const float *x, long n)
{
    double maxerr = 0, maxref = 0;
    for (long k = 0; k < n; k++) {
        double re = 0, im = 0;
        for (long j = 0; j < n; j++) {
            double ang = -6.283185307179586 * (double)((k * j) % n) / (double)n;
            re += x[2 * j] * cos(ang) - x[2 * j + 1] * sin(ang), im += x[2 * j] * sin(ang) + x[2 * j + 1] * cos(ang);
        }
        double dr = got[2 * k] - re, di = got[2 * k + 1] - im;
        maxerr = fmax(maxerr, sqrt(dr * dr + di * di)), maxref = fmax(maxref, sqrt(re * re + im * im));
    }
    return maxref > 0 ? maxerr / maxref : maxerr;
}

/* a JSON-safe copy of a message */
static void json_clean(char *dst, size_t size, const char *src)
{
    size_t j = 0;
    for (size_t i = 0; src && src[i] && j + 1 < size; i++)
        dst[j++] = (src[i] == '"' || src[i] == '\\' || (unsigned char)src[i] < 0x20) ? '\'' : src[i];
    dst[j] = '\0';
}

int main(int argc, char **argv)
{
    long n = arg_long(argc, argv, 1, 64), calls = arg_long(argc, argv, 2, 20000), rounds = arg_long(argc, argv, 3, 15);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("{\"error\": \"no GPU\"}\n");
        return 2;
    }
    size_t bytes = (size_t)n * 2 * sizeof(float);
    float *hx = malloc(bytes), *hy = malloc(bytes);
    double *t = calloc((size_t)(M_COUNT * rounds), sizeof(double)), err[M_COUNT] = {0};
    for (long i = 0; i < n; i++) {
        hx[2 * i] = (float)((unsigned long)(i * 2654435761u) % 1000u) / 500.0f - 1.0f;
        hx[2 * i + 1] = (float)((unsigned long)(i * 40503u + 7u) % 1000u) / 500.0f - 1.0f;
    }
    BENCH_CHECK(cudaMalloc(&in, bytes));
    BENCH_CHECK(cudaMalloc(&out, bytes));
    BENCH_CHECK(cudaMemcpy(in, hx, bytes, cudaMemcpyHostToDevice));
    BENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    BENCH_CHECK(cufftPlan1d(&bare, (int)n, CUFFT_C2C, 1));
    BENCH_CHECK(cufftSetStream(bare, s));

    char errors[M_COUNT][400] = {{0}};
    int ok[M_COUNT] = {1, 1, 1}, wrong = 0;
    fm_device cuda = {FM_DEVICE_CUDA, 0};
    int64_t shape[1] = {n};
    fm_fft_options_init(&opts);
    BENCH_CHECK(fm_context_create(&ctx));
    BENCH_CHECK(fm_tensor_init(&tin, in, cuda, FM_C64, 1, shape, NULL));
    BENCH_CHECK(fm_tensor_init(&tout, out, cuda, FM_C64, 1, shape, NULL));
    if (fm_fft_plan(ctx, &tin, &tout, NULL, NULL, &opts, &plan[M_PLANNED]) != FM_OK) {
        ok[M_PLANNED] = ok[M_STATELESS] = 0;
        json_clean(errors[M_PLANNED], sizeof errors[0], fm_last_error());
    }
    for (int m = 0; m < M_COUNT; m++) { /* one call of each, checked */
        if (!ok[m])
            continue;
        BENCH_CHECK(cudaMemsetAsync(out, 0, bytes, s));
        if (call(m) != FM_OK) {
            ok[m] = 0;
            json_clean(errors[m], sizeof errors[0], m == M_BARE ? "cufftExecC2C failed" : fm_last_error());
            continue;
        }
        BENCH_CHECK(cudaStreamSynchronize(s));
        BENCH_CHECK(cudaMemcpy(hy, out, bytes, cudaMemcpyDeviceToHost));
        err[m] = check(hy, hx, n);
        if (!(err[m] <= 1e-3)) {
            wrong = 1, ok[m] = 0;
            snprintf(errors[m], sizeof errors[0], "wrong result: max rel err %.3g", err[m]);
        }
    }
    for (int i = 0; i < 200; i++) /* warm-up */
        for (int m = 0; m < M_COUNT; m++)
            if (ok[m])
                call(m);
    BENCH_CHECK(cudaStreamSynchronize(s));
    for (long r = 0; r < rounds; r++)
        for (int m = 0; m < M_COUNT; m++) {
            if (!ok[m])
                continue;
            double t0 = now_us();
            for (long i = 0; i < calls; i++)
                call(m);
            BENCH_CHECK(cudaStreamSynchronize(s));
            t[m * rounds + r] = (now_us() - t0) / (double)calls;
        }
    double med[M_COUNT];
    printf("{\"n\": %ld, \"calls\": %ld, \"bursts\": %ld", n, calls, rounds);
    for (int m = 0; m < M_COUNT; m++) {
        med[m] = median_of(t + m * rounds, (int)rounds); /* sorts: [0] is the min */
        if (ok[m])
            printf(", \"%s_us\": %.4f, \"%s_us_min\": %.4f, \"%s_max_rel_err\": %.3g", names[m], med[m], names[m],
                   t[m * rounds], names[m], err[m]);
        else
            printf(", \"%s_us\": null, \"%s_us_min\": null", names[m], names[m]);
        if (m > M_BARE && ok[m])
            printf(", \"%s_above_bare_us\": %.4f", names[m], med[m] - med[M_BARE]);
    }
    char desc[400];
    json_clean(desc, sizeof desc, plan[M_PLANNED] ? fm_plan_describe(plan[M_PLANNED]) : "");
    printf(", \"plan\": \"%s\", \"errors\": {", desc);
    for (int m = 0, first = 1; m < M_COUNT; m++)
        if (errors[m][0])
            printf("%s\"%s\": \"%s\"", first ? "" : ", ", names[m], errors[m]), first = 0;
    printf("}}\n");
    fm_plan_release(plan[M_PLANNED]);
    fm_context_destroy(ctx);
    cufftDestroy(bare);
    return wrong ? 1 : 0;
}
