/* dist_gpu_kernel.c : the GPU ranks' one kernel, a strided 3-D move of complex elements through a
 * chain (x -> conj?(x * scale * array)): the exchange's pack and unpack and the Y <-> T transpose
 * (dist_xgeom.h), the chain applied in the same pass where the move is the first or last stage.
 * Compiled at the first plan on a device with NVRTC for that device's architecture (as the CUDA
 * backend's run-time kernels are: fusion/cuda/), loaded through the runtime's cudaLibraryLoadData,
 * and kept for the process. */
#include "dist_gpu.h"
#include "dist_move_body.h"

#include <stddef.h>

/* the kernel's argument of move m from src to dst (whole buffers: the bases are added) through c */
static void make_args(int dbl, const fm_dist_move *m, const void *src, void *dst, const fm_dist_mv_chain *c,
                      fm_dist_move_args *a)
{
    size_t es = dbl ? 2 * sizeof(double) : 2 * sizeof(float);
    *a = (fm_dist_move_args){0};
    a->src = (const char *)src + (size_t)m->src_base * es;
    a->dst = (char *)dst + (size_t)m->dst_base * es;
    a->e0 = m->e[0], a->e1 = m->e[1], a->e2 = m->e[2];
    a->s0 = m->s[0], a->s1 = m->s[1], a->s2 = m->s[2];
    a->d0 = m->d[0], a->d1 = m->d[1], a->d2 = m->d[2];
    a->sr = 1, a->si = 0;
    if (c) {
        a->flags = c->flags, a->sr = c->scale[0], a->si = c->scale[1];
        if (c->flags & FM_DIST_MV_ARR) { /* the array is offset as the operand it is laid out like */
            size_t aes = (c->flags & FM_DIST_MV_ARR_CPLX) ? es : es / 2;
            int64_t base = (c->flags & FM_DIST_MV_ARR_DST) ? m->dst_base : m->src_base;
            a->arr = (const char *)c->arr + (size_t)base * aes;
        }
    }
}

void fm_dist_move_host(int dbl, const fm_dist_move *m, const void *src, void *dst, const fm_dist_mv_chain *c)
{
    fm_dist_move_args a;
    make_args(dbl, m, src, dst, c, &a);
    long long total = a.e0 * a.e1 * a.e2;
    for (long long k = 0; k < total; k++) {
        if (dbl)
            FM_DIST_MOVE_ONE(double, a, k);
        else
            FM_DIST_MOVE_ONE(float, a, k);
    }
}

#if FM_DIST_HAVE_CUDA
#include <cuda_runtime.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the kernel: dist_move_body.h's element (its text embedded: fm_dist_move_body_src) in a grid-stride loop */
extern const char fm_dist_move_body_src[];
static const char kernel_wrappers[] =
    "template <typename T> __device__ void fm_dist_move(const fm_dist_move_args &a)\n"
    "{\n"
    "    const long long total = a.e0 * a.e1 * a.e2;\n"
    "    const long long step = (long long)gridDim.x * blockDim.x;\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += step)\n"
    "        FM_DIST_MOVE_ONE(T, a, k);\n"
    "}\n"
    "extern \"C\" __global__ void fm_dist_move_f32(fm_dist_move_args a) { fm_dist_move<float>(a); }\n"
    "extern \"C\" __global__ void fm_dist_move_f64(fm_dist_move_args a) { fm_dist_move<double>(a); }\n";

struct fm_dist_kernel {
    cudaLibrary_t lib;
    cudaKernel_t fn[2]; /* f32, f64 */
};

enum { MAX_DEVICES = 64 };
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static fm_dist_kernel *cache[MAX_DEVICES];

/* NVRTC's CUBIN of kernel_source for sm_<arch>; *log gets the compiler's log on failure (freed by the caller) */
static fm_status compile(const char *where, int arch, char **image, char **log)
{
    nvrtcProgram prog;
    *image = NULL, *log = NULL;
    size_t nb = strlen(fm_dist_move_body_src), nw = strlen(kernel_wrappers);
    char *source = malloc(nb + nw + 2);
    if (!source)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for the move kernel's source", where);
    memcpy(source, fm_dist_move_body_src, nb);
    source[nb] = '\n';
    memcpy(source + nb + 1, kernel_wrappers, nw + 1);
    nvrtcResult cr = nvrtcCreateProgram(&prog, source, "fm_dist_move.cu", 0, NULL, NULL);
    free(source); /* NVRTC keeps its own copy */
    if (cr != NVRTC_SUCCESS)
        return fm_fail(FM_ERR_BACKEND, "%s: nvrtcCreateProgram failed for the exchange's move kernel", where);
    char opt[48];
    snprintf(opt, sizeof opt, "--gpu-architecture=sm_%d", arch);
    const char *opts[] = {opt, "-default-device"};
    nvrtcResult r = nvrtcCompileProgram(prog, 2, opts);
    fm_status st = FM_OK;
    size_t n = 0;
    if (r != NVRTC_SUCCESS) {
        if (nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && (*log = malloc(n + 1)))
            (void)nvrtcGetProgramLog(prog, *log);
        st = fm_fail(FM_ERR_BACKEND, "%s: NVRTC could not compile the exchange's move kernel for sm_%d: %s (%s)",
                     where, arch, nvrtcGetErrorString(r), *log ? *log : "no log");
    } else if (nvrtcGetCUBINSize(prog, &n) != NVRTC_SUCCESS || !(*image = malloc(n)) ||
               nvrtcGetCUBIN(prog, *image) != NVRTC_SUCCESS) {
        st = fm_fail(FM_ERR_BACKEND, "%s: NVRTC gave no CUBIN for sm_%d", where, arch);
    }
    nvrtcDestroyProgram(&prog);
    return st;
}

static fm_status build(const char *where, int device_id, fm_dist_kernel **out)
{
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_id) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_id) != cudaSuccess)
        return fm_fail(FM_ERR_UNAVAILABLE, "%s: cuda:%d: no compute capability (%s)", where, device_id,
                       cudaGetErrorString(cudaGetLastError()));
    char *image, *log;
    fm_status st = compile(where, major * 10 + minor, &image, &log);
    free(log);
    if (st != FM_OK) {
        free(image);
        return st;
    }
    fm_dist_kernel *k = calloc(1, sizeof *k);
    cudaError_t e = cudaErrorMemoryAllocation;
    if (k && (e = cudaLibraryLoadData(&k->lib, image, NULL, NULL, 0, NULL, NULL, 0)) == cudaSuccess &&
        (e = cudaLibraryGetKernel(&k->fn[0], k->lib, "fm_dist_move_f32")) == cudaSuccess)
        e = cudaLibraryGetKernel(&k->fn[1], k->lib, "fm_dist_move_f64");
    free(image);
    if (e != cudaSuccess) {
        if (k && k->lib)
            cudaLibraryUnload(k->lib);
        free(k);
        return fm_fail(FM_ERR_BACKEND, "%s: loading the exchange's move kernel on cuda:%d: %s", where, device_id,
                       cudaGetErrorString(e));
    }
    *out = k;
    return FM_OK;
}

fm_status fm_dist_kernel_get(const char *where, int device_id, const fm_dist_kernel **k)
{
    if (device_id < 0 || device_id >= MAX_DEVICES)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: device_id = %d; expected 0 to %d", where, device_id,
                       MAX_DEVICES - 1);
    pthread_mutex_lock(&cache_lock);
    fm_status st = FM_OK;
    if (!cache[device_id])
        st = build(where, device_id, &cache[device_id]);
    *k = cache[device_id];
    pthread_mutex_unlock(&cache_lock);
    return st;
}

static dim3 dim3_make(unsigned x)
{
    dim3 d = {x, 1, 1};
    return d;
}

fm_status fm_dist_kernel_move(const fm_dist_kernel *k, int dbl, const fm_dist_move *m, const void *src, void *dst,
                              const fm_dist_mv_chain *c, void *stream)
{
    long long total = (long long)(m->e[0] * m->e[1] * m->e[2]);
    if (total == 0)
        return FM_OK;
    fm_dist_move_args a;
    make_args(dbl, m, src, dst, c, &a);
    long long blocks = (total + 255) / 256;
    if (blocks > 65536)
        blocks = 65536; /* grid-stride beyond */
    void *args[] = {&a};
    cudaError_t e = cudaLaunchKernel((const void *)k->fn[dbl ? 1 : 0], dim3_make((unsigned)blocks), dim3_make(256),
                                     args, 0, (cudaStream_t)stream);
    if (e != cudaSuccess)
        return fm_fail(FM_ERR_BACKEND, "fm_dist_fft_execute: launching the exchange's move kernel (%lld x %lld x "
                       "%lld): %s", a.e0, a.e1, a.e2, cudaGetErrorString(e));
    return FM_OK;
}
#endif /* FM_DIST_HAVE_CUDA */
