/* cuda_epilogue_kernel.c : loading and launching the generated elementwise epilogue kernel and
 * deterministic column sums for the two-pass CUDA matmul (see cuda_epilogue_kernel.h; the
 * sources, and why they look as they do: cuda_epilogue_source.c). */
#include "cuda_epilogue_internal.h"

#include "epilogue.h"
#include "nvrtc_cache.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* Device side                                                              */
/* ------------------------------------------------------------------------ */

/* The NVRTC target of device_id and its multiprocessor count (grid sizes). */
static fm_status device_arch(int device_id, const char *who, int *arch, int *sms)
{
    fm_status s = fm_nvrtc_arch_for_device(device_id, who, arch);
    if (s != FM_OK)
        return s;
    cudaError_t e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device_id);
    if (e != cudaSuccess)
        return fm_cuda_runtime_fail(e, who, "cudaDeviceGetAttribute(multiprocessor count)");
    if (*sms < 1)
        *sms = 1;
    return FM_OK;
}

static fm_status launch(cudaKernel_t k, const char *who, const char *name, unsigned blocks, void *params, void *stream)
{
    dim3 grid = {blocks ? blocks : 1, 1, 1}, block = {256, 1, 1};
    void *args[1] = {params};
    cudaError_t e = cudaLaunchKernel((const void *)k, grid, block, args, 0, (cudaStream_t)stream);
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "cudaLaunchKernel(%s)", name);
        return fm_cuda_runtime_fail(e, who, what);
    }
    return FM_OK;
}

/* Resident 256-thread blocks per SM for kernel k on device_id (the grid of a grid-stride kernel
 * is one full wave). The occupancy query runs on the current device, so switch to device_id
 * for it. Falls back to 4 (at most 64 registers a thread) if the query fails. */
static int blocks_per_sm(cudaKernel_t k, int device_id)
{
    int prev = -1, n = 0;
    if (cudaGetDevice(&prev) != cudaSuccess || (prev != device_id && cudaSetDevice(device_id) != cudaSuccess)) {
        (void)cudaGetLastError();
        return 4;
    }
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, (const void *)k, 256, 0) != cudaSuccess || n < 1)
        n = 4;
    (void)cudaGetLastError();
    if (prev != device_id)
        cudaSetDevice(prev);
    return n;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

static unsigned grid_for(int64_t items_per_block_units, int64_t cap)
{
    int64_t g = items_per_block_units < cap ? items_per_block_units : cap;
    return (unsigned)(g < 1 ? 1 : g);
}

/* ---- elementwise ---- */
static const char EW_WHO[] = "cuda epilogue kernel";

struct fm_cuda_ew {
    fm_cuda_ew_spec spec;
    int sms, blocks_per_sm;
    int cw; /* columns per thread, the source's FM_CW */
    fm_nvrtc_module mod;
    cudaKernel_t kernel;
};

fm_status fm_cuda_ew_create(const fm_settings *settings, const fm_cuda_ew_spec *spec, int device_id, fm_cuda_ew **out)
{
    if (!out)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: out is NULL", EW_WHO);
    *out = NULL;
    fm_status s = fm_cuda_ew_check_spec(spec);
    if (s != FM_OK)
        return s;
    fm_cuda_ew *k = calloc(1, sizeof *k);
    if (!k)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory", EW_WHO);
    k->spec = *spec;
    k->spec.epilogue = fm_cuda_epi_ew_bits(spec->epilogue);
    k->spec.add_c = !!spec->add_c;
    k->spec.zero_d = !!spec->zero_d;
    k->cw = fm_cuda_ew_chunk_width(&k->spec);
    int arch = 0;
    size_t size = 0;
    static const char *const names[1] = {"fm_ew"};
    if ((s = device_arch(device_id, EW_WHO, &arch, &k->sms)) != FM_OK ||
        (s = fm_cuda_ew_compile(settings, &k->spec, arch, &k->mod.image, &size, NULL)) != FM_OK ||
        (s = fm_nvrtc_module_load(&k->mod, EW_WHO, names, &k->kernel, 1)) != FM_OK) {
        fm_cuda_ew_destroy(k);
        return s;
    }
    k->blocks_per_sm = blocks_per_sm(k->kernel, device_id);
    *out = k;
    return FM_OK;
}

void fm_cuda_ew_destroy(fm_cuda_ew *k)
{
    if (!k)
        return;
    fm_nvrtc_module_unload(&k->mod);
    free(k);
}

fm_status fm_cuda_ew_launch(const fm_cuda_ew *k, const fm_cuda_ew_args *a, void *stream)
{
    if (!k || !a)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: kernel and args must not be NULL", EW_WHO);
    if (a->m < 0 || a->n < 0 || a->batch < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: negative extent (m %lld, n %lld, batch %lld)", EW_WHO,
                       (long long)a->m, (long long)a->n, (long long)a->batch);
    if (a->m == 0 || a->n == 0 || a->batch == 0)
        return FM_OK;
    const unsigned e = k->spec.epilogue;
    const int add_c = k->spec.add_c, mask_out = fm_cuda_ew_mask_out(e);
    const int uses_aux = fm_epilogue_uses_aux(e), xaux = uses_aux && !fm_epilogue_aux_is_mask(e);
    const char *missing = !a->d.ptr                                ? "D"
                          : add_c && !a->c.ptr                      ? "C"
                          : (e & FM_EPILOGUE_BIAS) && !a->bias.ptr  ? "bias"
                          : (e & FM_EPILOGUE_SCALE) && !a->scale.ptr ? "scale"
                          : uses_aux && !a->aux.ptr                 ? "aux"
                                                                    : NULL;
    if (missing)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: the %s pointer is NULL", EW_WHO, missing);
    const int64_t nch = mask_out ? fm_relu_mask_row_bytes(a->n) : ceil_div(a->n, k->cw);
    if (a->m > INT64_MAX / a->batch || a->m * a->batch > INT64_MAX / nch)
        return fm_fail(FM_ERR_TOO_LARGE, "%s: %lld x %lld x %lld elements overflow the index range", EW_WHO,
                       (long long)a->batch, (long long)a->m, (long long)a->n);
    const int64_t total = a->batch * a->m * nch;
    const int unit = a->n == 1 || (a->d.cs == 1 && (!add_c || a->c.cs == 1) &&
                                   (!(e & FM_EPILOGUE_BIAS) || a->bias.cs == 1) &&
                                   (!(e & FM_EPILOGUE_SCALE) || a->scale.cs == 1) && (!xaux || a->aux.cs == 1));
    ew_params p = {
        .d = a->d.ptr, .c = a->c.ptr, .bias = a->bias.ptr, .scale = a->scale.ptr, .aux = a->aux.ptr,
        .m = a->m, .n = a->n, .batch = a->batch, .nch = nch, .total = total,
        .d_rs = a->d.rs, .d_cs = a->d.cs, .d_bs = a->d.bs, .c_rs = a->c.rs, .c_cs = a->c.cs, .c_bs = a->c.bs,
        .bias_cs = a->bias.cs, .bias_bs = a->bias.bs, .scale_cs = a->scale.cs, .scale_bs = a->scale.bs,
        .aux_rs = a->aux.rs, .aux_cs = a->aux.cs, .aux_bs = a->aux.bs,
        .beta_re = a->beta[0], .beta_im = a->beta[1], .clamp_lo = a->clamp[0], .clamp_hi = a->clamp[1],
        .drop_base = a->drop_word0, .drop_seed = a->drop_seed, .drop_thr = a->drop_threshold,
        .drop_scale = a->drop_scale,
        .small = total < ((int64_t)1 << 31), .rows_fast = !unit && abs64(a->d.rs) < abs64(a->d.cs), .unit = unit};
    const unsigned blocks = grid_for(ceil_div(total, 256), (int64_t)k->sms * k->blocks_per_sm);
    return launch(k->kernel, EW_WHO, "fm_ew", blocks, &p, stream);
}

/* ---- column sums ---- */
static const char CS_WHO[] = "cuda column-sum kernel";

/* The split of the rows into segments depends on the shape only, so results are the same on
 * every device and the workspace size is known without one. Aim: ~2048 work items. */
static void colsum_split(int64_t rows, int64_t cols, int64_t batch, int64_t *S, int64_t *seg)
{
    const int64_t target = 2048, rows_min = 512;
    int64_t per = ceil_div(cols, 128);
    per = batch > target || per > target ? target : per * batch;
    int64_t s = per >= target ? 1 : ceil_div(target, per < 1 ? 1 : per);
    int64_t smax = rows > rows_min ? ceil_div(rows, rows_min) : 1;
    if (s > smax)
        s = smax;
    int64_t g = rows > 0 ? ceil_div(rows, s) : 32;
    g = ceil_div(g, 32) * 32;
    *seg = g;
    *S = rows > 0 ? ceil_div(rows, g) : 1;
}

static size_t acc_size(fm_dtype t)
{
    switch (t) {
    case FM_F64: case FM_C64: return 8;
    case FM_C128: return 16;
    default: return 4;
    }
}

size_t fm_cuda_colsum_workspace(fm_dtype dtype, int64_t rows, int64_t cols, int64_t batch)
{
    if (!fm_cuda_epi_dtype_ok(dtype) || rows < 0 || cols <= 0 || batch <= 0)
        return 0;
    int64_t S, seg;
    colsum_split(rows, cols, batch, &S, &seg);
    if (S <= 1)
        return 0;
    size_t bytes = (size_t)batch * (size_t)S * (size_t)cols * acc_size(dtype);
    return (bytes + 255) / 256 * 256;
}

struct fm_cuda_colsum {
    fm_dtype dtype;
    int sms;
    fm_nvrtc_module mod;
    cudaKernel_t cols_unit, cols_strided, rows, final_;
};

fm_status fm_cuda_colsum_create(const fm_settings *settings, fm_dtype dtype, int device_id, fm_cuda_colsum **out)
{
    if (!out)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: out is NULL", CS_WHO);
    *out = NULL;
    if (!fm_cuda_epi_dtype_ok(dtype))
        return fm_fail(FM_ERR_DTYPE, "%s: dtype %s is not one of f16, bf16, f32, f64, c64, c128", CS_WHO,
                       fm_dtype_name(dtype));
    fm_cuda_colsum *k = calloc(1, sizeof *k);
    if (!k)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory", CS_WHO);
    k->dtype = dtype;
    int arch = 0;
    size_t size = 0;
    static const char *const names[4] = {"fm_colsum_cols_unit", "fm_colsum_cols_strided", "fm_colsum_rows",
                                         "fm_colsum_final"};
    cudaKernel_t ks[4] = {NULL, NULL, NULL, NULL};
    fm_status s;
    if ((s = device_arch(device_id, CS_WHO, &arch, &k->sms)) != FM_OK ||
        (s = fm_cuda_colsum_compile(settings, dtype, arch, &k->mod.image, &size, NULL)) != FM_OK ||
        (s = fm_nvrtc_module_load(&k->mod, CS_WHO, names, ks, 4)) != FM_OK) {
        fm_cuda_colsum_destroy(k);
        return s;
    }
    k->cols_unit = ks[0], k->cols_strided = ks[1], k->rows = ks[2], k->final_ = ks[3];
    *out = k;
    return FM_OK;
}

void fm_cuda_colsum_destroy(fm_cuda_colsum *k)
{
    if (!k)
        return;
    fm_nvrtc_module_unload(&k->mod);
    free(k);
}

fm_status fm_cuda_colsum_launch(const fm_cuda_colsum *k, int64_t rows, int64_t cols, int64_t batch, fm_cuda_view x,
                                fm_cuda_view out, void *workspace, size_t workspace_bytes, void *stream)
{
    if (!k)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: kernel is NULL", CS_WHO);
    if (rows < 0 || cols < 0 || batch < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: negative extent (rows %lld, cols %lld, batch %lld)", CS_WHO,
                       (long long)rows, (long long)cols, (long long)batch);
    if (cols == 0 || batch == 0)
        return FM_OK;
    if (!out.ptr || (rows > 0 && !x.ptr))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: the %s pointer is NULL", CS_WHO, out.ptr ? "input" : "output");
    int64_t S, seg;
    colsum_split(rows, cols, batch, &S, &seg);
    size_t need = fm_cuda_colsum_workspace(k->dtype, rows, cols, batch);
    if (need && (!workspace || workspace_bytes < need || ((uintptr_t)workspace & 15)))
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "%s: needs a 16-byte aligned workspace of %zu bytes for %lld x %lld x %lld (got %zu bytes at %p)",
                       CS_WHO, need, (long long)batch, (long long)rows, (long long)cols, workspace_bytes, workspace);
    const int64_t v = 16 / (int64_t)fm_dtype_size(k->dtype);
    cs_params p = {.x = x.ptr, .out = out.ptr, .ws = workspace, .rows = rows, .cols = cols, .batch = batch,
                   .S = S, .seg = seg, .x_rs = x.rs, .x_cs = x.cs, .x_bs = x.bs, .o_cs = out.cs, .o_bs = out.bs,
                   .direct = S == 1};
    const int64_t cap = (int64_t)1 << 22;
    fm_status s;
    if (cols == 1 || (x.cs != 1 && abs64(x.rs) < abs64(x.cs))) {
        p.tiles = cols;
        p.nitems = batch * S * cols;
        s = launch(k->rows, CS_WHO, "fm_colsum_rows", grid_for(ceil_div(p.nitems, 8), cap), &p, stream);
    } else {
        p.tiles = ceil_div(cols, 32 * v);
        p.nitems = batch * S * p.tiles;
        const int u = x.cs == 1;
        s = launch(u ? k->cols_unit : k->cols_strided, CS_WHO, u ? "fm_colsum_cols_unit" : "fm_colsum_cols_strided",
                   grid_for(p.nitems, cap), &p, stream);
    }
    if (s != FM_OK || S == 1)
        return s;
    return launch(k->final_, CS_WHO, "fm_colsum_final", grid_for(ceil_div(batch * cols, 256), (int64_t)k->sms * 8),
                  &p, stream);
}
