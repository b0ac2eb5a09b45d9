/* test_rng_kernel.c : the portable RNG's generated kernel (fusion/cuda/rng_kernel.c) without a GPU:
 * every row's source compiles with NVRTC for sm_90 (--fmad=false), rows it lacks are declined with
 * FM_ERR_NOT_APPLICABLE, and the kernel's indexing (heads before out's 16-byte boundary, the shift
 * of a position inside a block through warp shuffles, grid-stride runs, tails) is right: the
 * generated CUDA C++ is compiled by the host C++ compiler behind a small prelude (shuffles through
 * a per-warp barrier, one thread per CUDA thread) and run on host memory against the CPU backend,
 * byte for byte. The host build takes philox_portable.h's C branch, so this checks the kernel's
 * index arithmetic; test_rng_cuda_gpu checks the GPU's bits. */
#define _POSIX_C_SOURCE 200809L
#include "rng_test_util.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef FM_HAVE_CUDA
#include "cuda/nvrtc_cache.h"
#include "cuda/rng_kernel.h"

#include "emu_kernel.h"
#include "env_settings.h"

#define NKINDS RNG_NKINDS

static void params(const kind *k, double *p0, double *p1)
{
    *p0 = 0, *p1 = 1;
    if (k->dist == FM_RNG_UNIFORM)
        *p0 = -2.5, *p1 = 3.25;
    else if (k->dist == FM_RNG_NORMAL || k->dist == FM_RNG_LOGNORMAL)
        *p0 = 0.25, *p1 = 1.5;
    else if (k->dist == FM_RNG_EXPONENTIAL)
        *p0 = 2.0;
}

static void test_rows_compile(void)
{
    static const char *const opts[] = {"-std=c++17", "--fmad=false"};
    for (int i = 0; i < NKINDS; i++) {
        char *src = NULL;
        CHECK_OK(fm_rng_kernel_source(kinds[i].dist, kinds[i].dt, &src));
        void *img = NULL;
        size_t size = 0;
        fm_status s = src ? fm_nvrtc_compile(env_settings(), src, "rng kernel test", opts, 2, 90, 0, &img, &size, NULL)
                          : FM_ERR_INTERNAL;
        CHECK_MSG(s == FM_OK && size > 0, "%s: NVRTC for sm_90: %s", kinds[i].name, fm_last_error());
        free(src);
        free(img);
    }
}

static void test_declines(void)
{
    CHECK(fm_rng_kernel_check(FM_RNG_RAW, FM_F32) == FM_ERR_NOT_APPLICABLE);
    CHECK_ERROR_MENTIONS("no GPU kernel");
    CHECK(fm_rng_kernel_check(17, FM_F64) == FM_ERR_NOT_APPLICABLE); /* a distribution added on the CPU only */
    CHECK_ERROR_MENTIONS("execution='cpu'");
    CHECK(fm_rng_kernel_check(FM_RNG_NORMAL, FM_F16) == FM_ERR_NOT_APPLICABLE);
    char *src = (char *)1;
    CHECK(fm_rng_kernel_source(FM_RNG_UNIFORM, FM_C64, &src) == FM_ERR_NOT_APPLICABLE && src == NULL);
}

/* ---- the kernel on the host ---- */
static const char emu_prelude[] =
    "#include <cstdint>\n#include <cstring>\n#include <pthread.h>\n"
    "struct fm_emu_dim3 { unsigned x, y, z; };\n"
    "extern thread_local fm_emu_dim3 threadIdx, blockIdx;\nextern fm_emu_dim3 blockDim, gridDim;\n"
    "void fm_emu_warp_barrier();\nunsigned long long *fm_emu_warp_slots();\n"
    "template <class T> T fm_emu_shfl(T v, int src)\n{\n"
    "    unsigned long long *s = fm_emu_warp_slots();\n    const int lane = (int)(threadIdx.x & 31);\n"
    "    std::memcpy(&s[lane], &v, sizeof v);\n    fm_emu_warp_barrier();\n"
    "    T r;\n    std::memcpy(&r, &s[src >= 0 && src < 32 ? src : lane], sizeof r);\n"
    "    fm_emu_warp_barrier();\n    return r;\n}\n"
    "template <class T> T __shfl_down_sync(unsigned, T v, int d) { return fm_emu_shfl(v, (int)(threadIdx.x & 31) + d); }\n"
    "template <class T> T __shfl_sync(unsigned, T v, int l) { return fm_emu_shfl(v, l); }\n"
    "#define __device__\n#define __global__\n#define __forceinline__ inline\n"
    "#define __launch_bounds__(...)\n#define __align__(n) alignas(n)\n";
static const char emu_driver[] =
    "\nthread_local fm_emu_dim3 threadIdx, blockIdx;\nfm_emu_dim3 blockDim, gridDim;\n"
    "static pthread_barrier_t fm_emu_bars[32];\nstatic unsigned long long fm_emu_slots[32][32];\n"
    "void fm_emu_warp_barrier() { pthread_barrier_wait(&fm_emu_bars[threadIdx.x / 32]); }\n"
    "unsigned long long *fm_emu_warp_slots() { return fm_emu_slots[threadIdx.x / 32]; }\n"
    "namespace {\nstruct emu_arg { unsigned tx, bx; int R; const fm_rng_args *a; };\n"
    "void *emu_thread(void *p)\n{\n    emu_arg *e = (emu_arg *)p;\n"
    "    threadIdx = {e->tx, 0, 0}; blockIdx = {e->bx, 0, 0};\n"
    "    switch (e->R) {\n    case 0: fm_rng_r0(*e->a); break;\n    case 1: fm_rng_r1(*e->a); break;\n"
    "#if FM_VPB == 4\n    case 2: fm_rng_r2(*e->a); break;\n    case 3: fm_rng_r3(*e->a); break;\n#endif\n"
    "    }\n    return nullptr;\n}\n}\n"
    "extern \"C\" int fm_emu_launch(int R, unsigned grid, unsigned nt, const void *args)\n{\n"
    "    const fm_rng_args *a = (const fm_rng_args *)args;\n"
    "    blockDim = {nt, 1, 1}; gridDim = {grid, 1, 1};\n"
    "    emu_arg *ea = new emu_arg[nt];\n    pthread_t *th = new pthread_t[nt];\n"
    "    pthread_attr_t attr;\n    pthread_attr_init(&attr);\n    pthread_attr_setstacksize(&attr, 1 << 20);\n"
    "    for (unsigned b = 0; b < grid; b++) {\n"
    "        for (unsigned w = 0; w < nt / 32; w++)\n            pthread_barrier_init(&fm_emu_bars[w], nullptr, 32);\n"
    "        for (unsigned i = 0; i < nt; i++) {\n            ea[i] = {i, b, R, a};\n"
    "            if (pthread_create(&th[i], &attr, emu_thread, &ea[i]) != 0)\n                return -1;\n        }\n"
    "        for (unsigned i = 0; i < nt; i++)\n            pthread_join(th[i], nullptr);\n"
    "        for (unsigned w = 0; w < nt / 32; w++)\n            pthread_barrier_destroy(&fm_emu_bars[w]);\n    }\n"
    "    pthread_attr_destroy(&attr);\n    delete[] ea;\n    delete[] th;\n    return 0;\n}\n";

typedef int (*emu_launch_fn)(int, unsigned, unsigned, const void *);
static char g_dir[64];

static void *emu_load(const kind *k, emu_launch_fn *fn)
{
    char *src = NULL;
    *fn = NULL;
    if (fm_rng_kernel_source(k->dist, k->dt, &src) != FM_OK) {
        CHECK_MSG(0, "source: %s", fm_last_error());
        return NULL;
    }
    char stem[32];
    snprintf(stem, sizeof stem, "rng_%d_%d", k->dist, (int)k->dt);
    void (*launch)(void) = NULL;
    void *h = emu_compile_load(g_dir, stem, "-ffp-contract=off", emu_prelude, src, emu_driver, &launch);
    free(src);
    *fn = (emu_launch_fn)launch;
    return h;
}

/* The CPU backend's values for the same (seed, position), portable mode */
static fm_status cpu_fill(fm_context *ctx, const kind *k, uint64_t seed, int64_t pos, int64_t n, void *buf)
{
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = k->dist;
    o.execution = FM_EXECUTION_CPU;
    double p0, p1;
    params(k, &p0, &p1);
    if (k->dist == FM_RNG_UNIFORM)
        o.low = p0, o.high = p1;
    else if (k->dist == FM_RNG_NORMAL || k->dist == FM_RNG_LOGNORMAL)
        o.mean = p0, o.stddev = p1;
    else if (k->dist == FM_RNG_EXPONENTIAL)
        o.scale = p0;
    fm_tensor t;
    fm_tensor_init(&t, buf, (fm_device){FM_DEVICE_CPU, 0}, k->dt, 1, &n, NULL);
    return fm_rng(ctx, &t, &o, seed, pos, NULL);
}

static void emulate_kind(fm_context *ctx, const kind *k)
{
    emu_launch_fn fn;
    void *h = emu_load(k, &fn);
    if (!h)
        return;
    const size_t es = fm_dtype_size(k->dt);
    static const int64_t positions[] = {0, 1, 3, 4097, ((int64_t)1 << 34) + 2};
    static const int64_t lens[] = {1, 3, 5, 1000, 8 * 256 * 4 + 13, 3 * 8 * 256 * 4 * 2 + 7};
    static const int64_t max_blocks[] = {1, 2, 64};
    const int64_t nmax = 3 * 8 * 256 * 4 * 2 + 7;
    char *want = malloc((size_t)nmax * es), *got = malloc((size_t)nmax * es + 16 + 64);
    for (size_t pi = 0; pi < sizeof positions / sizeof positions[0]; pi++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int64_t pos = positions[pi], n = lens[li];
            const uint64_t seed = 0xC0FFEE00u + pi * 131 + li;
            CHECK_OK(cpu_fill(ctx, k, seed, pos, n, want));
            for (size_t mis = 0; mis < 16; mis += es) { /* out at every element offset from a 16-byte boundary */
                char *out = (char *)(((uintptr_t)got + 15) & ~(uintptr_t)15) + mis;
                memset(out, 0xA5, (size_t)n * es + 32);
                fm_rng_kernel_args a;
                int R = 0;
                unsigned grid = 0;
                const int64_t mb = max_blocks[(pi + li + mis) % 3];
                double p0, p1;
                params(k, &p0, &p1);
                CHECK_OK(fm_rng_kernel_setup(k->dist, k->dt, p0, p1, out, n, seed, pos, mb, &a, &R, &grid));
                CHECK_MSG(fn(R, grid, FM_RNG_KERNEL_THREADS, &a) == 0, "emulated launch failed");
                int64_t first = -1;
                for (int64_t i = 0; i < n && first < 0; i++)
                    if (memcmp(out + i * es, want + i * es, es))
                        first = i;
                int clobbered = 0;
                for (size_t b = 0; b < 32; b++)
                    clobbered |= (unsigned char)out[(size_t)n * es + b] != 0xA5;
                CHECK_MSG(first < 0 && !clobbered,
                          "%s position %lld n %lld out+%zu (R %d grid %u): first mismatch at %lld%s", k->name,
                          (long long)pos, (long long)n, mis, R, grid, (long long)first,
                          clobbered ? "; wrote past out's end" : "");
            }
        }
    free(want);
    free(got);
    dlclose(h);
}

static void test_emulated(void)
{
    if (system("c++ --version >/dev/null 2>&1") != 0) {
        CHECK_MSG(0, "no host C++ compiler (c++): scripts/setup.sh installs g++");
        return;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/fm_rng_emu_XXXXXX");
    if (!mkdtemp(g_dir)) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    for (int i = 0; ctx && i < NKINDS; i++)
        emulate_kind(ctx, &kinds[i]);
    fm_context_destroy(ctx);
    rmdir(g_dir);
}
#endif

int main(void)
{
#ifdef FM_HAVE_CUDA
    RUN_TESTS(test_rows_compile, test_declines, test_emulated);
#else
    SKIP("built without the CUDA toolkit: no NVRTC, no kernel");
    CHECK(1);
#endif
    TEST_MAIN_RETURN();
}
