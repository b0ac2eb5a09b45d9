/* test_rng_discrete_gpu.c : fusion/philox_portable.h's integers and poisson compiled by NVRTC
 * (sm_90, --fmad=false, the embedded header text the CUDA module compiles) give the same bits on
 * a GPU as the CPU backend (backends/cpu/philox_discrete.c): narrow, rejection-heavy and 64-bit
 * integer ranges, poisson by inversion and by PTRS, at positions 0, near 2^40 and near 2^62.
 * The NVRTC compile runs without a GPU too; the comparison skips (exit 0) without one. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "internal.h"
#include "philox_portable.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include "cuda/philox_source.h"

#include <cuda_runtime.h>
#include <nvrtc.h>

static const char *kernels_src =
    "extern \"C\" __global__ void fm_t_int32(unsigned long long seed, unsigned long long pos,\n"
    "    unsigned long long n, unsigned int r, unsigned int t, unsigned long long lo, long long *out) {\n"
    "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "  if (i >= n) return;\n"
    "  unsigned long long m = pos + i; fm_px_u32 w[4]; fm_px_block(seed, m / 4, w);\n"
    "  out[i] = (long long)(lo + fm_px_integer32(seed, m, w[m % 4], r, t));\n"
    "}\n"
    "extern \"C\" __global__ void fm_t_int64(unsigned long long seed, unsigned long long pos,\n"
    "    unsigned long long n, unsigned long long r, unsigned long long t, unsigned long long lo, long long *out) {\n"
    "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "  if (i >= n) return;\n"
    "  unsigned long long m = pos + i; fm_px_u32 w[4]; fm_px_block(seed, m / 2, w);\n"
    "  unsigned h = 2u * (unsigned)(m % 2);\n"
    "  out[i] = (long long)(lo + fm_px_integer64(seed, m, (fm_px_u64)w[h] | (fm_px_u64)w[h + 1] << 32, r, t));\n"
    "}\n"
    "extern \"C\" __global__ void fm_t_poisson(unsigned long long seed, unsigned long long pos,\n"
    "    unsigned long long n, double lam, long long *out) {\n"
    "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "  if (i >= n) return;\n"
    "  fm_px_poisson_consts c = fm_px_poisson_setup(lam);\n"
    "  out[i] = fm_px_poisson(seed, pos + i, &c);\n"
    "}\n";

static void *cubin; /* the compiled kernels */

static void test_nvrtc_compiles(void)
{
    const size_t a = strlen(fm_philox_portable_src), b = strlen(kernels_src);
    char *src = malloc(a + b + 2);
    memcpy(src, fm_philox_portable_src, a);
    src[a] = '\n';
    memcpy(src + a + 1, kernels_src, b + 1);
    nvrtcProgram prog;
    CHECK(nvrtcCreateProgram(&prog, src, "rng_discrete.cu", 0, NULL, NULL) == NVRTC_SUCCESS);
    const char *opts[] = {"--gpu-architecture=sm_90", "--fmad=false", "-std=c++17"};
    const nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
    if (r != NVRTC_SUCCESS) {
        size_t n = 0;
        nvrtcGetProgramLogSize(prog, &n);
        char *log = malloc(n + 1);
        nvrtcGetProgramLog(prog, log);
        log[n] = 0;
        CHECK_MSG(0, "nvrtc: %s\n%s", nvrtcGetErrorString(r), log);
        free(log);
    } else {
        size_t n = 0;
        nvrtcGetCUBINSize(prog, &n);
        cubin = malloc(n);
        CHECK(nvrtcGetCUBIN(prog, cubin) == NVRTC_SUCCESS);
    }
    nvrtcDestroyProgram(&prog);
    free(src);
}

static fm_context *ctx;

/* the CPU backend's n values at pos into host */
static void cpu_fill(const fm_rng_options *o, uint64_t seed, int64_t pos, int64_t n, int64_t *host)
{
    fm_tensor t;
    fm_tensor_init(&t, host, (fm_device){FM_DEVICE_CPU, 0}, FM_I64, 1, &n, NULL);
    fm_exec_args a;
    fm_exec_args_init(&a);
    a.ints[0] = pos, a.ints[3] = (int64_t)seed;
    fm_plan *plan = NULL;
    CHECK_OK(fm_rng_plan(ctx, &t, o, &plan));
    CHECK_OK(fm_plan_execute_args(plan, (void *[]){host}, 1, &a, NULL));
    fm_plan_release(plan);
}

static void test_gpu_matches_cpu(void)
{
    CHECK_MSG(cubin != NULL, "no kernels (NVRTC failed)");
    if (!cubin)
        return;
    cudaLibrary_t lib;
    cudaKernel_t k32, k64, kp;
    CHECK(cudaLibraryLoadData(&lib, cubin, NULL, NULL, 0, NULL, NULL, 0) == cudaSuccess);
    CHECK(cudaLibraryGetKernel(&k32, lib, "fm_t_int32") == cudaSuccess);
    CHECK(cudaLibraryGetKernel(&k64, lib, "fm_t_int64") == cudaSuccess);
    CHECK(cudaLibraryGetKernel(&kp, lib, "fm_t_poisson") == cudaSuccess);
    const int64_t n = 100003;
    int64_t *want = malloc((size_t)n * 8), *got = malloc((size_t)n * 8), *dev = NULL;
    CHECK(cudaMalloc((void **)&dev, (size_t)n * 8) == cudaSuccess);
    const uint64_t positions[] = {0, (1ull << 40) + 1, (1ull << 62) - 7};
    const int64_t ranges[][2] = {{0, 999}, {-7, (int64_t)1 << 31}, {5, ((int64_t)3 << 61) + 4}, {0, 4294967295}};
    const double lams[] = {0.0, 3.7, 9.5, 10.0, 1234.5, 1e15};
    const unsigned long long seed = 0xC0FFEE1234ull;
    unsigned long long nn = (unsigned long long)n;
    const dim3 grid = {(unsigned)((n + 255) / 256), 1, 1}, block = {256, 1, 1};
    for (int q = 0; q < 3; q++) {
        unsigned long long pos = positions[q];
        for (int c = 0; c < 4; c++) {
            fm_rng_options o;
            fm_rng_options_init(&o);
            o.distribution = FM_RNG_INTEGERS, o.int_low = ranges[c][0], o.int_high = ranges[c][1], o.endpoint = 1;
            cpu_fill(&o, seed, (int64_t)pos, n, want);
            const uint64_t span = (uint64_t)ranges[c][1] - (uint64_t)ranges[c][0];
            unsigned long long lo = (uint64_t)ranges[c][0];
            if (span > 0xFFFFFFFFu) {
                unsigned long long r = span + 1, t = fm_px_lemire_t64(span + 1);
                void *args[] = {(void *)&seed, &pos, &nn, &r, &t, &lo, &dev};
                CHECK(cudaLaunchKernel((const void *)k64, grid, block, args, 0, 0) == cudaSuccess);
            } else {
                unsigned r = (uint32_t)(span + 1), t = fm_px_lemire_t32((uint32_t)(span + 1));
                void *args[] = {(void *)&seed, &pos, &nn, &r, &t, &lo, &dev};
                CHECK(cudaLaunchKernel((const void *)k32, grid, block, args, 0, 0) == cudaSuccess);
            }
            CHECK(cudaMemcpy(got, dev, (size_t)n * 8, cudaMemcpyDeviceToHost) == cudaSuccess);
            CHECK_MSG(!memcmp(want, got, (size_t)n * 8), "integers [%lld, %lld] at %llu: GPU differs from CPU",
                      (long long)ranges[c][0], (long long)ranges[c][1], pos);
        }
        for (int l = 0; l < 6; l++) {
            fm_rng_options o;
            fm_rng_options_init(&o);
            o.distribution = FM_RNG_POISSON, o.lam = lams[l];
            cpu_fill(&o, seed, (int64_t)pos, n, want);
            double lam = lams[l];
            void *args[] = {(void *)&seed, &pos, &nn, &lam, &dev};
            CHECK(cudaLaunchKernel((const void *)kp, grid, block, args, 0, 0) == cudaSuccess);
            CHECK(cudaMemcpy(got, dev, (size_t)n * 8, cudaMemcpyDeviceToHost) == cudaSuccess);
            int64_t bad = -1;
            for (int64_t i = 0; i < n && bad < 0; i++)
                if (want[i] != got[i])
                    bad = i;
            CHECK_MSG(bad < 0, "poisson lam %g at %llu: element %lld GPU %lld, CPU %lld", lam, pos, (long long)bad,
                      bad < 0 ? 0LL : (long long)got[bad], bad < 0 ? 0LL : (long long)want[bad]);
        }
    }
    cudaFree(dev);
    cudaLibraryUnload(lib);
    free(want);
    free(got);
}
#endif

int main(void)
{
#ifdef FM_HAVE_CUDA
    CREATE_CONTEXT_OR_FAIL(&ctx);
    RUN_TEST(test_nvrtc_compiles);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0)
        RUN_TEST(test_gpu_matches_cpu);
    else
        printf("skipped: no GPU (NVRTC compiled the kernels; the comparison needs a device)\n");
    free(cubin);
    fm_context_destroy(ctx);
    TEST_MAIN_RETURN();
#else
    (void)fm_test_checks_, (void)fm_test_failures_, (void)fm_test_skips_; /* (unused without CUDA) */
    printf("skipped: built without the CUDA toolkit\n");
    return 0; /* nothing to check: a skip, as the other GPU tests' */
#endif
}
