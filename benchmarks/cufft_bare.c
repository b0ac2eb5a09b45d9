/* cufft_bare.c : the bare cufftExecC2C baseline of the GPU FFT host overhead: one cufftPlan1d (c64, batch 1) made
 * beforehand, the stream set once; bursts of `calls` calls and one sync. Usage: cufft_bare [n calls bursts];
 * one JSON line {n, calls, bursts, us_per_call_median, us_per_call_min, cufft_version}; no GPU: exit 2. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <cufft.h>

#include <stdio.h>
#include <stdlib.h>

#include "bench_timing.h"

int main(int argc, char **argv)
{
    long n = arg_long(argc, argv, 1, 64), calls = arg_long(argc, argv, 2, 20000), bursts = arg_long(argc, argv, 3, 15);
    int ndev = 0, failed = 0, ver = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("{\"error\": \"no GPU\"}\n");
        return 2;
    }
    size_t bytes = (size_t)n * sizeof(cufftComplex);
    cufftComplex *h = malloc(bytes), *in = NULL, *out = NULL;
    double *t = malloc((size_t)bursts * sizeof *t);
    for (long i = 0; i < n; i++) {
        h[i].x = (float)((unsigned long)(i * 2654435761u) % 1000u) / 500.0f - 1.0f;
        h[i].y = (float)((unsigned long)(i * 40503u + 7u) % 1000u) / 500.0f - 1.0f;
    }
    BENCH_CHECK(cudaMalloc((void **)&in, bytes));
    BENCH_CHECK(cudaMalloc((void **)&out, bytes));
    BENCH_CHECK(cudaMemcpy(in, h, bytes, cudaMemcpyHostToDevice));
    cudaStream_t s;
    BENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cufftHandle plan;
    BENCH_CHECK(cufftPlan1d(&plan, (int)n, CUFFT_C2C, 1));
    BENCH_CHECK(cufftSetStream(plan, s));
    for (int i = 0; i < 200; i++) /* warm-up: module loading, first launches */
        BENCH_CHECK(cufftExecC2C(plan, in, out, CUFFT_FORWARD));
    BENCH_CHECK(cudaStreamSynchronize(s));
    for (long b = 0; b < bursts; b++) {
        double t0 = now_us();
        for (long i = 0; i < calls; i++)
            failed |= cufftExecC2C(plan, in, out, CUFFT_FORWARD) != CUFFT_SUCCESS;
        BENCH_CHECK(cudaStreamSynchronize(s));
        t[b] = (now_us() - t0) / (double)calls;
    }
    if (failed) {
        fprintf(stderr, "cufft_bare: cufftExecC2C failed during timing\n");
        return 1;
    }
    double med = median_of(t, (int)bursts); /* sorts: t[0] is the min */
    cufftGetVersion(&ver);
    printf("{\"n\": %ld, \"calls\": %ld, \"bursts\": %ld, \"us_per_call_median\": %.4f, \"us_per_call_min\": %.4f, "
           "\"cufft_version\": %d}\n", n, calls, bursts, med, t[0], ver);
    cufftDestroy(plan);
    return 0;
}
