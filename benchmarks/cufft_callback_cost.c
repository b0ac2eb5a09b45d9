/* cufft_callback_cost.c : what cuFFT's JIT-LTO callbacks cost by themselves, without fusemath.
 *
 * One batched c64 1-D forward transform, timed with CUDA events (median-free: the mean of
 * `reps` back-to-back executions after warm-up), in seven forms: plain; with an identity load
 * callback; with a load callback multiplying by a window; with a store callback scaling by 0.5;
 * with both; then plain and identity-load in place. The callbacks are compiled here with NVRTC exactly as fusemath compiles its own
 * (-arch=compute_XX -dlto --relocatable-device-code=true). This is the measurement behind the
 * cuFFT backend running the prolog as a separate pass (docs/performance.md).
 *
 * Each form runs twice: as cuFFT plans by default, and with the plan property
 * NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT set (cuFFT >= 11.2 may then JIT-compile kernels for the
 * plan, callbacks included; "_patient" forms, plan creation time reported).
 *
 * Usage: cufft_callback_cost [n] [batch] [reps]   (default 4096 4096 50); prints one JSON line
 * per form. Exits 2 without a GPU. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <cuda_runtime.h>
#include <cufft.h>
#include <cufftXt.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *const names[3] = {"ident", "window", "half"};
static const char *const sources[3] = {
    "__device__ float2 ident(void *in, unsigned long long off, void *info, void *smem)\n"
    "{ return ((float2 *)in)[off]; }\n",
    "__device__ float2 window(void *in, unsigned long long off, void *info, void *smem)\n"
    "{ float2 x = ((float2 *)in)[off]; float w = ((const float *)info)[off % WINDOW_N]; x.x *= w; x.y *= w; return x; }\n",
    "__device__ void half(void *out, unsigned long long off, float2 x, void *info, void *smem)\n"
    "{ x.x *= 0.5f; x.y *= 0.5f; ((float2 *)out)[off] = x; }\n"};

static int compile(int which, int arch, int n, void **ir, size_t *size)
{
    char arch_opt[32], def[48];
    snprintf(arch_opt, sizeof arch_opt, "-arch=compute_%d", arch);
    snprintf(def, sizeof def, "-DWINDOW_N=%dull", n);
    const char *opts[] = {arch_opt, "-dlto", "--relocatable-device-code=true", "-std=c++17", def};
    nvrtcProgram p;
    if (nvrtcCreateProgram(&p, sources[which], names[which], 0, NULL, NULL) != NVRTC_SUCCESS)
        return -1;
    nvrtcResult r = nvrtcCompileProgram(p, 5, opts);
    if (r == NVRTC_SUCCESS && nvrtcGetLTOIRSize(p, size) == NVRTC_SUCCESS && (*ir = malloc(*size)))
        r = nvrtcGetLTOIR(p, *ir);
    nvrtcDestroyProgram(&p);
    return r == NVRTC_SUCCESS ? 0 : -1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* load / store: index into names or -1; patient: set NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT */
static void run(const char *label, int load, int store, int n, int batch, int reps, int arch, void *in, void *out,
                void *window, int patient)
{
    cufftHandle h;
    void *irs[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    void *info[1] = {window};
    const double t0 = now_s();
    cufftResult r = cufftCreate(&h);
    if (r == CUFFT_SUCCESS && patient)
        r = cufftSetPlanPropertyInt64(h, NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT, 1);
    if (r == CUFFT_SUCCESS && load >= 0 && compile(load, arch, n, &irs[0], &sizes[0]) == 0)
        r = cufftXtSetJITCallback(h, names[load], irs[0], sizes[0], CUFFT_CB_LD_COMPLEX, info);
    if (r == CUFFT_SUCCESS && store >= 0 && compile(store, arch, n, &irs[1], &sizes[1]) == 0)
        r = cufftXtSetJITCallback(h, names[store], irs[1], sizes[1], CUFFT_CB_ST_COMPLEX, info);
    long long nn[1] = {n};
    size_t ws = 0;
    if (r == CUFFT_SUCCESS)
        r = cufftXtMakePlanMany(h, 1, nn, NULL, 1, n, CUDA_C_32F, NULL, 1, n, CUDA_C_32F, batch, &ws, CUDA_C_32F);
    const double plan_s = now_s() - t0;
    float ms = -1;
    if (r == CUFFT_SUCCESS) {
        cudaEvent_t a, b;
        cudaEventCreate(&a);
        cudaEventCreate(&b);
        for (int i = 0; i < 5; i++)
            cufftXtExec(h, in, out, CUFFT_FORWARD);
        cudaEventRecord(a, 0);
        for (int i = 0; i < reps; i++)
            cufftXtExec(h, in, out, CUFFT_FORWARD);
        cudaEventRecord(b, 0);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
        ms /= (float)reps;
        cudaEventDestroy(a);
        cudaEventDestroy(b);
    }
    printf("{\"form\":\"%s%s\",\"n\":%d,\"batch\":%d,\"cufft_status\":%d,\"ms\":%.5f,\"plan_s\":%.3f}\n", label,
           patient ? "_patient" : "", n, batch, (int)r, ms, plan_s);
    cufftDestroy(h);
    free(irs[0]);
    free(irs[1]);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4096, batch = argc > 2 ? atoi(argv[2]) : 4096;
    int reps = argc > 3 ? atoi(argv[3]) : 50;
    int count = 0, major = 0, minor = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("{\"error\":\"no CUDA device\"}\n");
        return 2;
    }
    if (n < 1 || batch < 1 || reps < 1) {
        fprintf(stderr, "usage: %s [n >= 1] [batch >= 1] [reps >= 1]\n", argv[0]);
        return 2;
    }
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    size_t elems = (size_t)n * (size_t)batch;
    void *in = NULL, *out = NULL, *window = NULL;
    if (cudaMalloc(&in, elems * 8) != cudaSuccess || cudaMalloc(&out, elems * 8) != cudaSuccess ||
        cudaMalloc(&window, (size_t)n * 4) != cudaSuccess) {
        printf("{\"error\":\"out of device memory\"}\n");
        return 1;
    }
    cudaMemset(in, 0, elems * 8);
    cudaMemset(window, 0, (size_t)n * 4);
    const int arch = major * 10 + minor;
    for (int patient = 0; patient < 2; patient++) {
        run("plain", -1, -1, n, batch, reps, arch, in, out, window, patient);
        run("load_identity", 0, -1, n, batch, reps, arch, in, out, window, patient);
        run("load_window", 1, -1, n, batch, reps, arch, in, out, window, patient);
        run("store_scale", -1, 2, n, batch, reps, arch, in, out, window, patient);
        run("load_window+store_scale", 1, 2, n, batch, reps, arch, in, out, window, patient);
        /* in place: does cuFFT pick a different (slower) kernel for a load callback out of place only? */
        run("plain_inplace", -1, -1, n, batch, reps, arch, in, in, window, patient);
        run("load_identity_inplace", 0, -1, n, batch, reps, arch, in, in, window, patient);
    }
    cudaFree(in);
    cudaFree(out);
    cudaFree(window);
    return 0;
}
