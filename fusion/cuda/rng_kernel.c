/* rng_kernel.c : the portable RNG's generated CUDA kernel (see rng_kernel.h). The kernel body is
 * common; what a (distribution, dtype) adds is one row of kernel_rows: its value type, values per
 * Philox block, and the statements that make a block's values from its four words (the same
 * statements as backends/cpu/philox_rng.c's emit functions, in the same order, so that with
 * --fmad=false the bits are the CPU's). A distribution added to philox_portable.h is one row. */
#include "cuda/rng_kernel.h"

#include "cuda/nvrtc_cache.h"
#include "cuda/philox_source.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RNG_NB 8       /* vectors per lane per warp run: the extra block a shifted position costs is 1/NB */
#define RNG_THREADS FM_RNG_KERNEL_THREADS
/* the grid's cap in full waves: 4 waves filled 2^28 f32 values 3-5% faster than one on the H200
 * (every distribution: the last wave's tail is shorter); 32768 blocks were no faster than 4 waves */
#define RNG_WAVES 4

static const char WHO[] = "cuda rng kernel";

/* w[0..3]: the block's words; W64(j): words j, j + 1 as a 64-bit value; a: the kernel's arguments
 * (f0, f1 the float parameters, p0, p1 the double ones: uniform lo, width; normal mean, stddev;
 * exponential scale). */
typedef struct kernel_row {
    int distribution;
    fm_dtype dtype;
    const char *type; /* the value type */
    int vpb;          /* values per block (and per 16-byte vector) */
    const char *body;
} kernel_row;

static const kernel_row kernel_rows[] = {
    {FM_RNG_RAW, FM_U32, "unsigned int", 4, "for (int q = 0; q < 4; q++) v[q] = w[q];"},
    {FM_RNG_UNIFORM, FM_F32, "float", 4, "for (int q = 0; q < 4; q++) v[q] = a.f0 + a.f1 * fm_px_u01_f32(w[q]);"},
    {FM_RNG_NORMAL, FM_F32, "float", 4,
     "float z[4];\n"
     "    fm_px_normal_pair_f32(w[0], w[1], &z[0], &z[1]);\n"
     "    fm_px_normal_pair_f32(w[2], w[3], &z[2], &z[3]);\n"
     "    for (int q = 0; q < 4; q++) v[q] = z[q] * a.f1 + a.f0;"},
    {FM_RNG_LOGNORMAL, FM_F32, "float", 4,
     "float z[4];\n"
     "    fm_px_normal_pair_f32(w[0], w[1], &z[0], &z[1]);\n"
     "    fm_px_normal_pair_f32(w[2], w[3], &z[2], &z[3]);\n"
     "    for (int q = 0; q < 4; q++) { const float y = z[q] * a.f1 + a.f0; v[q] = fm_px_expf(y); }"},
    {FM_RNG_EXPONENTIAL, FM_F32, "float", 4, /* 0 - log: +0, not -0, for u = 1 */
     "for (int q = 0; q < 4; q++) v[q] = (0.0f - fm_px_logf(fm_px_u01_open_f32(w[q]))) * a.f0;"},
    {FM_RNG_UNIFORM, FM_F64, "double", 2,
     "v[0] = a.p0 + a.p1 * fm_px_u01_f64(W64(0));\n"
     "    v[1] = a.p0 + a.p1 * fm_px_u01_f64(W64(2));"},
    {FM_RNG_NORMAL, FM_F64, "double", 2,
     "double z0, z1;\n"
     "    fm_px_normal_pair_f64(W64(0), W64(2), &z0, &z1);\n"
     "    v[0] = z0 * a.p1 + a.p0;\n"
     "    v[1] = z1 * a.p1 + a.p0;"},
    {FM_RNG_LOGNORMAL, FM_F64, "double", 2,
     "double z0, z1;\n"
     "    fm_px_normal_pair_f64(W64(0), W64(2), &z0, &z1);\n"
     "    const double y0 = z0 * a.p1 + a.p0, y1 = z1 * a.p1 + a.p0;\n"
     "    v[0] = fm_px_exp(y0);\n"
     "    v[1] = fm_px_exp(y1);"},
    {FM_RNG_EXPONENTIAL, FM_F64, "double", 2,
     "v[0] = (0.0 - fm_px_log(fm_px_u01_open_f64(W64(0)))) * a.p0;\n"
     "    v[1] = (0.0 - fm_px_log(fm_px_u01_open_f64(W64(2)))) * a.p0;"},
};
#define NROWS ((int)(sizeof kernel_rows / sizeof kernel_rows[0]))

static const char *const dist_names[] = {"uniform", "normal", "lognormal", "exponential", "raw"};

static const kernel_row *row_for(int distribution, fm_dtype dtype)
{
    for (int i = 0; i < NROWS; i++)
        if (kernel_rows[i].distribution == distribution && kernel_rows[i].dtype == dtype)
            return &kernel_rows[i];
    return NULL;
}

fm_status fm_rng_kernel_check(int distribution, fm_dtype dtype)
{
    if (row_for(distribution, dtype))
        return FM_OK;
    char name[32];
    if (distribution >= 0 && distribution < (int)(sizeof dist_names / sizeof dist_names[0]))
        snprintf(name, sizeof name, "%s", dist_names[distribution]);
    else
        snprintf(name, sizeof name, "%d", distribution);
    return fm_fail(FM_ERR_NOT_APPLICABLE, "rng cuda/rngkernel: no GPU kernel for distribution %s %s in portable "
                   "mode (the kernel table has no row for it yet; execution='cpu' computes it)", name,
                   fm_dtype_name(dtype));
}

/* The common kernel: fm_gen (the row) makes block b's values; fm_fill<R> is the fill for a first
 * vector starting at word R of its block. The arguments' layout is rng_args's below. */
static const char kernel_text[] =
    "struct fm_rng_args {\n"
    "    FM_T *out;\n"
    "    unsigned long long seed;\n"
    "    long long n, head, nvec;\n"
    "    unsigned long long b_first, pos;\n"
    "    double p0, p1;\n"
    "    float f0, f1;\n"
    "};\n"
    "struct __align__(16) fm_vec { FM_T v[FM_VPB]; };\n"
    "#define W64(j) ((fm_px_u64)w[j] | (fm_px_u64)w[(j) + 1] << 32)\n"
    "static __device__ __forceinline__ void fm_gen(const fm_rng_args &a, unsigned long long b, FM_T v[FM_VPB])\n"
    "{\n"
    "    fm_px_u32 w[4];\n"
    "    fm_px_block(a.seed, b, w);\n"
    "    FM_ROW_BODY\n"
    "}\n"
    "template <int R> static __device__ __forceinline__ void fm_fill(const fm_rng_args &a)\n"
    "{\n"
    "    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    const long long tail0 = a.head + a.nvec * FM_VPB, nscalar = a.head + (a.n - tail0);\n"
    "    if (tid < nscalar) { /* before out's first 16-byte boundary, after the last whole vector */\n"
    "        const long long i = tid < a.head ? tid : tail0 + (tid - a.head);\n"
    "        const unsigned long long p = a.pos + (unsigned long long)i;\n"
    "        FM_T v[FM_VPB];\n"
    "        fm_gen(a, p / FM_VPB, v);\n"
    "        const int j = (int)(p % FM_VPB);\n"
    "        FM_T x = v[0];\n"
    "#pragma unroll\n"
    "        for (int q = 1; q < FM_VPB; q++)\n"
    "            x = q == j ? v[q] : x;\n"
    "        a.out[i] = x;\n"
    "    }\n"
    "    const int lane = threadIdx.x & 31;\n"
    "    const long long warp = tid >> 5, nwarps = ((long long)gridDim.x * blockDim.x) >> 5;\n"
    "    const long long span = 32LL * FM_RNG_NB;\n"
    "    fm_vec *const ov = (fm_vec *)(a.out + a.head);\n"
    "    for (long long base = warp * span; base < a.nvec; base += nwarps * span) {\n"
    "        FM_T cur[FM_VPB], nxt[FM_VPB];\n"
    "        fm_gen(a, a.b_first + (unsigned long long)(base + lane), cur);\n"
    "#pragma unroll 1\n"
    "        for (int k = 0; k < FM_RNG_NB && base + 32LL * k < a.nvec; k++) { /* warp-uniform */\n"
    "            const long long v = base + 32LL * k + lane;\n"
    "            const bool more = k + 1 < FM_RNG_NB && base + 32LL * (k + 1) < a.nvec;\n"
    "            if (R != 0 || more) /* the next run's block: lane 0's also ends lane 31's vector */\n"
    "                fm_gen(a, a.b_first + (unsigned long long)(v + 32), nxt);\n"
    "            fm_vec o;\n"
    "#pragma unroll\n"
    "            for (int q = 0; q < FM_VPB; q++) {\n"
    "                if (R == 0 || q < FM_VPB - R) {\n"
    "                    o.v[q] = cur[(q + R) % FM_VPB];\n"
    "                } else { /* the first R values of the next block: lane + 1's, lane 31 lane 0's next */\n"
    "                    const FM_T x = __shfl_down_sync(0xffffffffu, cur[(q + R) % FM_VPB], 1);\n"
    "                    const FM_T y = __shfl_sync(0xffffffffu, nxt[(q + R) % FM_VPB], 0);\n"
    "                    o.v[q] = lane == 31 ? y : x;\n"
    "                }\n"
    "            }\n"
    "            if (v < a.nvec)\n"
    "                ov[v] = o;\n"
    "#pragma unroll\n"
    "            for (int q = 0; q < FM_VPB; q++)\n"
    "                cur[q] = nxt[q];\n"
    "        }\n"
    "    }\n"
    "}\n";


fm_status fm_rng_kernel_source(int distribution, fm_dtype dtype, char **source)
{
    *source = NULL;
    const kernel_row *r = row_for(distribution, dtype);
    if (!r)
        return fm_rng_kernel_check(distribution, dtype);
    char head[256], tail[512];
    snprintf(head, sizeof head, "\n/* ---- the fill: %s %s ---- */\n#define FM_T %s\n#define FM_VPB %d\n#define FM_RNG_NB %d\n",
             dist_names[distribution], fm_dtype_name(dtype), r->type, r->vpb, RNG_NB);
    size_t v = 0;
    for (int R = 0; R < r->vpb; R++)
        v += (size_t)snprintf(tail + v, sizeof tail - v,
                              "extern \"C\" __global__ void __launch_bounds__(%d) fm_rng_r%d(const fm_rng_args a) "
                              "{ fm_fill<%d>(a); }\n", RNG_THREADS, R, R);
    const char *at = strstr(kernel_text, "FM_ROW_BODY");
    const size_t n = strlen(fm_philox_portable_src) + strlen(head) + strlen(kernel_text) + strlen(r->body) +
                     strlen(tail) + 1;
    char *s = malloc(n);
    if (!s)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory", WHO);
    snprintf(s, n, "%s%s%.*s%s%s%s", fm_philox_portable_src, head, (int)(at - kernel_text), kernel_text, r->body,
             at + strlen("FM_ROW_BODY"), tail);
    *source = s;
    return FM_OK;
}

struct fm_rng_kernel {
    int distribution, vpb, sms, blocks_per_sm;
    fm_dtype dtype;
    double p0, p1;
    fm_nvrtc_module mod;
    cudaKernel_t k[4]; /* fm_rng_r0 .. r(vpb - 1) */
    char text[64];
};

/* Resident blocks per SM for kernel k on device_id (the grid is one full wave; 4 if unknown). */
static int blocks_per_sm(cudaKernel_t k, int device_id)
{
    int prev = -1, n = 0;
    if (cudaGetDevice(&prev) != cudaSuccess || (prev != device_id && cudaSetDevice(device_id) != cudaSuccess)) {
        (void)cudaGetLastError();
        return 4;
    }
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, (const void *)k, RNG_THREADS, 0) != cudaSuccess || n < 1)
        n = 4;
    (void)cudaGetLastError();
    if (prev != device_id)
        cudaSetDevice(prev);
    return n;
}

fm_status fm_rng_kernel_create(const fm_settings *settings, int distribution, fm_dtype dtype, double p0, double p1,
                               int device_id, fm_rng_kernel **out)
{
    *out = NULL;
    const kernel_row *r = row_for(distribution, dtype);
    if (!r)
        return fm_rng_kernel_check(distribution, dtype);
    fm_rng_kernel *k = calloc(1, sizeof *k);
    char *src = NULL;
    if (!k)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory", WHO);
    k->vpb = r->vpb;
    k->distribution = distribution, k->dtype = dtype, k->p0 = p0, k->p1 = p1;
    static const char *const opts[] = {"-std=c++17", "--fmad=false"}; /* no contraction: the CPU's roundings */
    static const char *const names[4] = {"fm_rng_r0", "fm_rng_r1", "fm_rng_r2", "fm_rng_r3"};
    char name[64];
    snprintf(name, sizeof name, "fm_rng_%s_%s.cu", dist_names[distribution], fm_dtype_name(dtype));
    int arch = 0;
    size_t size = 0;
    fm_status s = fm_rng_kernel_source(distribution, dtype, &src);
    cudaError_t e = cudaSuccess;
    if (s == FM_OK)
        s = fm_nvrtc_arch_for_device(device_id, WHO, &arch);
    if (s == FM_OK)
        s = fm_nvrtc_compile(settings, src, name, opts, 2, arch, 0, &k->mod.image, &size, NULL);
    if (s == FM_OK)
        s = fm_nvrtc_module_load(&k->mod, WHO, names, k->k, k->vpb);
    if (s == FM_OK && (e = cudaDeviceGetAttribute(&k->sms, cudaDevAttrMultiProcessorCount, device_id)) != cudaSuccess)
        s = fm_cuda_runtime_fail(e, WHO, "cudaDeviceGetAttribute(multiprocessor count)");
    free(src);
    if (s != FM_OK) {
        fm_rng_kernel_destroy(k);
        return s;
    }
    k->sms = k->sms < 1 ? 1 : k->sms;
    k->blocks_per_sm = blocks_per_sm(k->k[0], device_id);
    snprintf(k->text, sizeof k->text, "vpb=%d nb=%d blocks/sm=%d waves=%d", k->vpb, RNG_NB, k->blocks_per_sm, RNG_WAVES);
    *out = k;
    return FM_OK;
}

void fm_rng_kernel_destroy(fm_rng_kernel *k)
{
    if (!k)
        return;
    fm_nvrtc_module_unload(&k->mod);
    free(k);
}

const char *fm_rng_kernel_text(const fm_rng_kernel *k) { return k ? k->text : ""; }

fm_status fm_rng_kernel_setup(int distribution, fm_dtype dtype, double p0, double p1, void *out, int64_t n,
                              uint64_t seed, int64_t position, int64_t max_blocks, fm_rng_kernel_args *a, int *R,
                              unsigned *grid)
{
    const kernel_row *r = row_for(distribution, dtype);
    if (!r)
        return fm_rng_kernel_check(distribution, dtype);
    const int64_t es = (int64_t)fm_dtype_size(dtype), vpb = r->vpb;
    if (n < 0 || position < 0 || position > INT64_MAX - n || (n > 0 && (!out || (uintptr_t)out % (uintptr_t)es)))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: out %p (aligned to %lld bytes expected), n = %lld, position = "
                       "%lld", WHO, out, (long long)es, (long long)n, (long long)position);
    memset(a, 0, sizeof *a);
    /* as philox_rng.c: uniform lo + width u (width rounded from the double difference), z * sd + mean */
    a->p0 = p0, a->p1 = distribution == FM_RNG_UNIFORM ? p1 - p0 : p1;
    a->f0 = (float)a->p0, a->f1 = (float)a->p1;
    const int64_t mis = (int64_t)((uintptr_t)out % 16 / (uintptr_t)es);
    a->out = out, a->seed = seed, a->n = n, a->pos = (uint64_t)position;
    a->head = mis ? fm_min_i64(vpb - mis, n) : 0;
    a->nvec = (n - a->head) / vpb;
    a->b_first = (uint64_t)(position + a->head) / (uint64_t)vpb;
    *R = (int)((uint64_t)(position + a->head) % (uint64_t)vpb);
    const int64_t runs = (a->nvec + 32 * RNG_NB - 1) / (32 * RNG_NB), warps_per_block = RNG_THREADS / 32;
    const int64_t blocks = fm_min_i64((runs + warps_per_block - 1) / warps_per_block, max_blocks);
    *grid = (unsigned)(blocks < 1 ? 1 : blocks);
    return FM_OK;
}

fm_status fm_rng_kernel_launch(const fm_rng_kernel *k, void *out, int64_t n, uint64_t seed, int64_t position,
                               void *stream)
{
    if (!k)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: kernel is NULL", WHO);
    if (n == 0)
        return FM_OK;
    fm_rng_kernel_args a;
    int R = 0;
    unsigned blocks = 1;
    fm_status s = fm_rng_kernel_setup(k->distribution, k->dtype, k->p0, k->p1, out, n, seed, position,
                                      (int64_t)k->sms * k->blocks_per_sm * RNG_WAVES, &a, &R, &blocks);
    if (s != FM_OK)
        return s;
    dim3 grid = {blocks, 1, 1}, block = {RNG_THREADS, 1, 1};
    void *args[1] = {&a};
    cudaError_t e = cudaLaunchKernel((const void *)k->k[R], grid, block, args, 0, (cudaStream_t)stream);
    if (e != cudaSuccess) {
        char what[48];
        snprintf(what, sizeof what, "cudaLaunchKernel(fm_rng_r%d)", R);
        return fm_cuda_runtime_fail(e, WHO, what);
    }
    return FM_OK;
}
