/* cufft_bare.c : the bare cuFFT baseline for fusemath's GPU FFT host overhead.
 *
 * What a C programmer who knows cuFFT writes by hand: one cufftPlan1d (c64 -> c64,
 * batch 1) made beforehand, the stream set once with cufftSetStream, input and output
 * cudaMalloc'ed once; the timed part is cufftExecC2C alone.
 *
 * Per burst: wall clock around `calls` back-to-back cufftExecC2C calls followed by one
 * cudaStreamSynchronize; us per call = burst time / calls. Prints one JSON line
 *   {"n": .., "calls": .., "bursts": .., "us_per_call_median": .., "us_per_call_min": ..}
 * (benchmarks/fft_gpu.py runs it as a subprocess and keeps the line).
 *
 * Usage: cufft_bare [n (64)] [calls per burst (20000)] [bursts (15)]
 * No GPU (cudaGetDeviceCount fails or finds none): a message on stderr, a JSON line
 * {"error": ...} on stdout, exit status 2. A failing CUDA/cuFFT call: exit status 1.
 * Links libcufft and libcudart only (no fusemath, never libcuda). */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <cufft.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_timing.h"

#define CU(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "cufft_bare: %s failed (line %d): %s\n", #call, __LINE__, cudaGetErrorString(e_));         \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)
#define FT(call)                                                                                                       \
    do {                                                                                                               \
        cufftResult r_ = (call);                                                                                       \
        if (r_ != CUFFT_SUCCESS) {                                                                                     \
            fprintf(stderr, "cufft_bare: %s failed (line %d): cufftResult %d\n", #call, __LINE__, (int)r_);            \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

int main(int argc, char **argv)
{
    if (argc > 1 && (argv[1][0] == '-')) {
        printf("usage: cufft_bare [n (64)] [calls per burst (20000)] [bursts (15)]\n");
        return 0;
    }
    long n = arg_long(argc, argv, 1, 64);
    long calls = arg_long(argc, argv, 2, 20000);
    long bursts = arg_long(argc, argv, 3, 15);

    int ndev = 0;
    cudaError_t de = cudaGetDeviceCount(&ndev);
    if (de != cudaSuccess || ndev < 1) {
        const char *why = de != cudaSuccess ? cudaGetErrorString(de) : "no CUDA device";
        fprintf(stderr, "cufft_bare: no GPU (%s)\n", why);
        printf("{\"error\": \"no GPU: %s\"}\n", why);
        return 2;
    }
    CU(cudaSetDevice(0));

    size_t bytes = (size_t)n * sizeof(cufftComplex);
    cufftComplex *h = malloc(bytes);
    double *t = malloc((size_t)bursts * sizeof *t);
    if (!h || !t) {
        fprintf(stderr, "cufft_bare: out of host memory\n");
        return 1;
    }
    for (long i = 0; i < n; i++) {
        h[i].x = (float)((unsigned long)(i * 2654435761u) % 1000u) / 500.0f - 1.0f;
        h[i].y = (float)((unsigned long)(i * 40503u + 7u) % 1000u) / 500.0f - 1.0f;
    }
    cufftComplex *in = NULL, *out = NULL;
    CU(cudaMalloc((void **)&in, bytes));
    CU(cudaMalloc((void **)&out, bytes));
    CU(cudaMemcpy(in, h, bytes, cudaMemcpyHostToDevice));
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    cufftHandle plan;
    FT(cufftPlan1d(&plan, (int)n, CUFFT_C2C, 1));
    FT(cufftSetStream(plan, s));

    /* warm-up (module loading, first launches) */
    for (int i = 0; i < 200; i++)
        FT(cufftExecC2C(plan, in, out, CUFFT_FORWARD));
    CU(cudaStreamSynchronize(s));

    int failed = 0;
    for (long b = 0; b < bursts; b++) {
        double t0 = now_us();
        for (long i = 0; i < calls; i++)
            failed |= cufftExecC2C(plan, in, out, CUFFT_FORWARD) != CUFFT_SUCCESS;
        CU(cudaStreamSynchronize(s));
        t[b] = (now_us() - t0) / (double)calls;
    }
    if (failed) {
        fprintf(stderr, "cufft_bare: cufftExecC2C failed during timing\n");
        return 1;
    }
    double mn = t[0];
    for (long b = 1; b < bursts; b++)
        mn = t[b] < mn ? t[b] : mn;
    double med = median_of(t, (int)bursts);
    int ver = 0;
    cufftGetVersion(&ver);
    printf("{\"n\": %ld, \"calls\": %ld, \"bursts\": %ld, \"us_per_call_median\": %.4f, \"us_per_call_min\": %.4f, "
           "\"cufft_version\": %d}\n",
           n, calls, bursts, med, mn, ver);

    cufftDestroy(plan);
    cudaStreamDestroy(s);
    cudaFree(in);
    cudaFree(out);
    free(h);
    free(t);
    return 0;
}
