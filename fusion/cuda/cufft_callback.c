/* cufft_callback.c : FFT chains as cuFFT LTO load / store callbacks (see cufft_callback.h). */
#define _POSIX_C_SOURCE 200809L

#include "cufft_callback.h"
#include "nvrtc_cache.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *ctype_of(fm_dtype t)
{
    switch (t) {
    case FM_F32: return "float";
    case FM_F64: return "double";
    case FM_C64: return "float2";
    case FM_C128: return "double2";
    case FM_F16: return "unsigned short"; /* half: the storage type; the chain computes in float */
    case FM_C32: return "ushort2";
    default: return NULL;
    }
}

static int is_double(fm_dtype t) { return t == FM_F64 || t == FM_C128; }
static int is_half(fm_dtype t) { return t == FM_F16 || t == FM_C32; }
/* The type the chain computes in (and a user callback sees): float / float2 for half data. */
static const char *compute_of(fm_dtype t) { return t == FM_F16 ? "float" : t == FM_C32 ? "float2" : ctype_of(t); }

/* Half <-> float for the half chains (PTX cvt: no cuda_fp16.h needed). Half data has no cuFFT
 * callbacks: these sources only run as passes. */
static const char half_helpers[] =
    "__device__ __forceinline__ float fm_ld(unsigned short v) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(v)); return f; }\n"
    "__device__ __forceinline__ unsigned short fm_st(float f) { unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
    "__device__ __forceinline__ float2 fm_ld(ushort2 v) { float2 r; r.x = fm_ld(v.x); r.y = fm_ld(v.y); return r; }\n"
    "__device__ __forceinline__ ushort2 fm_st(float2 v) { ushort2 r; r.x = fm_st(v.x); r.y = fm_st(v.y); return r; }\n";

/* One axis of the data operand as the index code walks it: outermost (largest stride) first. */
typedef struct axis {
    int64_t extent, stride, astride;
} axis;

/* Emit code mapping cuFFT's element offset `off` to the array's element offset `a`. The
 * operand's axes (extent > 1) sorted by decreasing stride must nest: each stride larger than
 * the furthest offset the inner axes reach, so that q = r / stride; r -= q * stride peels them
 * off one by one. Axes where the array broadcasts (astride 0) only need r %= stride, and
 * nothing after the last axis the array varies along is computed. */
static fm_status emit_index(FILE *f, const fm_cufft_cb_spec *sp)
{
    axis ax[FM_MAX_NDIM];
    int n = 0;
    int64_t span = 0;
    for (int d = 0; d < sp->ndim; d++) {
        if (sp->extent[d] <= 1)
            continue;
        if (sp->stride[d] <= 0)
            return fm_fail(FM_ERR_NOT_SUPPORTED, "fft on cuda: a %s multiplying by an array needs positive strides on "
                           "the %s (axis %d has stride %lld); pass a contiguous array", sp->store ? "epilog" : "prolog",
                           sp->store ? "output" : "input", d, (long long)sp->stride[d]);
        ax[n++] = (axis){sp->extent[d], sp->stride[d], sp->array_stride[d]};
        span += (sp->extent[d] - 1) * sp->stride[d];
    }
    for (int i = 1; i < n; i++) /* insertion sort, decreasing stride */
        for (int j = i; j > 0 && ax[j].stride > ax[j - 1].stride; j--) {
            axis t = ax[j];
            ax[j] = ax[j - 1];
            ax[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        int64_t inner = 0;
        for (int j = i + 1; j < n; j++)
            inner += (ax[j].extent - 1) * ax[j].stride;
        if (ax[i].stride <= inner)
            return fm_fail(FM_ERR_NOT_SUPPORTED, "fft on cuda: the %s's strides do not nest (a stride of %lld inside "
                           "a span of %lld), so a %s array cannot be indexed from cuFFT's offsets; pass a contiguous "
                           "array", sp->store ? "output" : "input", (long long)ax[i].stride, (long long)inner,
                           sp->store ? "epilog" : "prolog");
    }
    int last = -1;
    for (int i = 0; i < n; i++)
        if (ax[i].astride != 0)
            last = i;
    /* 32-bit index arithmetic when every offset fits: integer division by a constant is a
     * multiply-high, and 32-bit ones are cheaper */
    const char *u = span < ((int64_t)1 << 31) ? "unsigned int" : "unsigned long long";
    fprintf(f, "    long long a = 0;\n");
    if (last < 0)
        return FM_OK;
    fprintf(f, "    %s r = (%s)off, q;\n    (void)q;\n", u, u);
    for (int i = 0; i <= last; i++) {
        const axis *x = &ax[i];
        if (i == last && x->stride == 1)
            fprintf(f, "    a += (long long)r * %lldLL;\n", (long long)x->astride);
        else if (x->astride == 0)
            fprintf(f, "    r %%= %lldu;\n", (long long)x->stride);
        else
            fprintf(f, "    q = r / %lldu; r -= q * %lldu; a += (long long)q * %lldLL;\n", (long long)x->stride,
                    (long long)x->stride, (long long)x->astride);
    }
    return FM_OK;
}

void fm_cufft_cb_spec_from_problem(const fm_problem *p, const fm_attachments *att, int store, int need_base,
                                   fm_cufft_cb_spec *sp)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *data = &p->t[store ? FM_FFT_OUT : FM_FFT_IN];
    const fm_tensor *arr = &p->t[store ? FM_FFT_EPILOG : FM_FFT_PROLOG];
    memset(sp, 0, sizeof *sp);
    sp->store = store;
    sp->data = data->dtype;
    sp->ops = store ? fp->epilog_ops : fp->prolog_ops;
    memcpy(sp->scale, store ? fp->epilog_scale : fp->prolog_scale, sizeof sp->scale);
    sp->ndim = data->ndim;
    for (int d = 0; d < data->ndim; d++) {
        sp->extent[d] = data->shape[d];
        sp->stride[d] = data->strides[d];
        sp->array_stride[d] = (sp->ops & FM_FFT_OP_MULTIPLY) ? arr->strides[d] : 0;
    }
    if (sp->ops & FM_FFT_OP_MULTIPLY)
        sp->array = arr->dtype;
    if (sp->ops & FM_FFT_OP_CALLBACK)
        sp->user_source = fm_fft_callback_text(att, p, store, &sp->user_symbol);
    sp->need_base = need_base;
}

static fm_status check_spec(const fm_cufft_cb_spec *sp)
{
    if (!sp || !ctype_of(sp->data) || sp->ndim < 1 || sp->ndim > FM_MAX_NDIM)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft callback: invalid spec");
    const int cplx = fm_dtype_is_complex(sp->data);
    if ((sp->ops & FM_FFT_OP_MULTIPLY) &&
        !(ctype_of(sp->array) && is_double(sp->array) == is_double(sp->data) &&
          is_half(sp->array) == is_half(sp->data) && (cplx || !fm_dtype_is_complex(sp->array))))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft callback: array dtype %s does not fit data of dtype %s",
                       fm_dtype_name(sp->array), fm_dtype_name(sp->data));
    if ((sp->ops & FM_FFT_OP_CALLBACK) && (!sp->user_source || !sp->user_symbol))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft callback: user source or symbol missing");
    if (!cplx && (sp->ops & FM_FFT_OP_SCALE) && sp->scale[1] != 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft callback: complex scale on real data");
    return FM_OK;
}

fm_status fm_cufft_cb_source(const fm_cufft_cb_spec *sp, char **source, const char **symbol)
{
    fm_status s = check_spec(sp);
    if (s != FM_OK)
        return s;
    /* S: the element type in memory; T: the one the chain computes in (the same but for half) */
    const char *S = ctype_of(sp->data), *T = compute_of(sp->data), *R = is_double(sp->data) ? "double" : "float";
    const int cplx = fm_dtype_is_complex(sp->data), side = sp->store ? 1 : 0, half = is_half(sp->data);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft callback: out of host memory");
    fprintf(f, "// fusemath cuFFT %s callback (generated)\n", sp->store ? "store" : "load");
    if (sp->ops & FM_FFT_OP_CALLBACK)
        fprintf(f, "#line 1 \"%s_callback\"\n%s\n#line 1 \"fusemath_generated\"\n", sp->store ? "epilog" : "prolog",
                sp->user_source);
    /* C++ linkage on purpose: cuFFT declares the callback with its documented C++ signature
     * and links the mangled name built from the symbol we give it */
    fprintf(f, "struct fm_cb_params { const void *array[2]; const void *base[2]; };\n");
    if (half)
        fputs(half_helpers, f);
    /* (S and T differ for half data only: the value then converts at the load and the store) */
    if (sp->store) {
        fprintf(f, "__device__ void " FM_CUFFT_STORE_SYMBOL
                   "(void *data_out, unsigned long long off, %s %s, void *info, void *smem)\n{\n"
                   "    const unsigned long long cufft_off = off;\n", S, half ? "xs" : "x");
        if (half)
            fprintf(f, "    %s x = fm_ld(xs);\n", T);
    } else {
        fprintf(f, "__device__ %s " FM_CUFFT_LOAD_SYMBOL
                   "(void *data_in, unsigned long long off, void *info, void *smem)\n{\n", S);
        fprintf(f, half ? "    %s x = fm_ld(((const %s *)data_in)[off]);\n"
                        : "    %s x = ((const %s *)data_in)[off];\n", T, S);
    }
    fprintf(f, "    (void)smem;\n    const fm_cb_params *p = (const fm_cb_params *)info;\n    (void)p;\n");
    if (sp->need_base) /* the offset from the caller's data pointer, not from the looped call's */
        fprintf(f, "    off += (unsigned long long)((const %s *)data_%s - (const %s *)p->base[%d]);\n", S,
                sp->store ? "out" : "in", S, side);
    if (sp->ops & FM_FFT_OP_SCALE) {
        if (cplx && sp->scale[1] != 0)
            fprintf(f, "    { const %s sr = %.17g, si = %.17g; %s t; t.x = x.x * sr - x.y * si; t.y = x.x * si + x.y * sr; "
                       "x = t; }\n", R, sp->scale[0], sp->scale[1], T);
        else if (cplx)
            fprintf(f, "    { const %s sr = %.17g; x.x *= sr; x.y *= sr; }\n", R, sp->scale[0]);
        else
            fprintf(f, "    x *= (%s)%.17g;\n", R, sp->scale[0]);
    }
    if (sp->ops & FM_FFT_OP_MULTIPLY) {
        fprintf(f, "    {\n");
        if ((s = emit_index(f, sp)) != FM_OK) {
            fclose(f);
            free(buf);
            return s;
        }
        const char *A = ctype_of(sp->array);
        if (half)
            fprintf(f, "    const %s w = fm_ld(((const %s *)p->array[%d])[a]);\n", compute_of(sp->array), A, side);
        else
            fprintf(f, "    const %s w = ((const %s *)p->array[%d])[a];\n", A, A, side);
        if (fm_dtype_is_complex(sp->array))
            fprintf(f, "    %s t; t.x = x.x * w.x - x.y * w.y; t.y = x.x * w.y + x.y * w.x; x = t;\n", T);
        else if (cplx)
            fprintf(f, "    x.x *= w; x.y *= w;\n");
        else
            fprintf(f, "    x *= w;\n");
        fprintf(f, "    }\n");
    }
    if ((sp->ops & FM_FFT_OP_CONJ) && cplx)
        fprintf(f, "    x.y = -x.y;\n");
    if (sp->ops & FM_FFT_OP_CALLBACK)
        fprintf(f, "    x = %s(x, off, p->array[%d]);\n", sp->user_symbol, side);
    if (sp->store)
        fprintf(f, "    ((%s *)data_out)[cufft_off] = %s;\n}\n", S, half ? "fm_st(x)" : "x");
    else
        fprintf(f, "    return %s;\n}\n", half ? "fm_st(x)" : "x");
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft callback: out of host memory");
    }
    *source = buf;
    *symbol = sp->store ? FM_CUFFT_STORE_SYMBOL : FM_CUFFT_LOAD_SYMBOL;
    return FM_OK;
}

fm_status fm_cufft_cb_compile(const fm_settings *settings, const fm_cufft_cb_spec *sp, int arch, void **ltoir,
                              size_t *size, const char **symbol, int *from_cache)
{
    if (sp && is_half(sp->data))
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fft callback: cuFFT has no callbacks for half precision (%s); the "
                       "chain runs as a pass (fm_cufft_pass_create)", fm_dtype_name(sp->data));
    char *src = NULL;
    fm_status s = fm_cufft_cb_source(sp, &src, symbol);
    if (s != FM_OK)
        return s;
    const char *name = sp->store ? "the fft epilog callback" : "the fft prolog callback";
    const int user = (sp->ops & FM_FFT_OP_CALLBACK) != 0;
    s = fm_nvrtc_compile_generated(settings, src, name, arch, 1, user, ltoir, size, from_cache);
    free(src);
    return s;
}

/* ---- separate passes ---- */
fm_status fm_cufft_pass_source(const fm_cufft_cb_spec *sp, char **source)
{
    if (!sp || sp->need_base)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft pass: invalid spec");
    char *cb = NULL;
    const char *sym = NULL;
    fm_status s = fm_cufft_cb_source(sp, &cb, &sym);
    if (s != FM_OK)
        return s;
    const char *T = ctype_of(sp->data);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        free(cb);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft pass: out of host memory");
    }
    int64_t count = 1;
    for (int d = 0; d < sp->ndim; d++)
        count *= sp->extent[d];
    fputs(cb, f);
    fprintf(f, "extern \"C\" __global__ void fm_cb_pass(const %s *src, %s *dst, void *info)\n{\n"
               "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < %lldull;\n"
               "         i += (unsigned long long)gridDim.x * blockDim.x) {\n"
               "        unsigned long long r = i;\n        long long off = 0;\n", T, T, (long long)count);
    for (int d = sp->ndim - 1; d >= 0; d--)
        if (sp->extent[d] > 1)
            fprintf(f, "        off += (long long)(r %% %lldull) * %lldLL; r /= %lldull;\n", (long long)sp->extent[d],
                    (long long)sp->stride[d], (long long)sp->extent[d]);
    if (sp->store)
        fprintf(f, "        " FM_CUFFT_STORE_SYMBOL "((void *)dst, (unsigned long long)off, src[off], info, 0);\n");
    else
        fprintf(f, "        dst[off] = " FM_CUFFT_LOAD_SYMBOL "((void *)src, (unsigned long long)off, info, 0);\n");
    fprintf(f, "    }\n}\n");
    free(cb);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft pass: out of host memory");
    }
    *source = buf;
    return FM_OK;
}

struct fm_cufft_pass {
    fm_nvrtc_module mod;
    cudaKernel_t kernel;
    unsigned grid;
};

void fm_cufft_pass_destroy(fm_cufft_pass *k)
{
    if (!k)
        return;
    fm_nvrtc_module_unload(&k->mod);
    free(k);
}

/* Build the kernel fm_cb_pass of src (freed here) over count elements. */
static fm_status pass_build(const fm_settings *settings, char *src, const char *name, int device_id, int user,
                            int64_t count, fm_cufft_pass **out)
{
    *out = NULL;
    fm_cufft_pass *k = calloc(1, sizeof *k);
    static const char *const names[1] = {"fm_cb_pass"};
    int sms = 0;
    fm_status s = k ? fm_nvrtc_module_build(&k->mod, settings, src, name, device_id, user, "fft pass", names,
                                            &k->kernel, 1)
                    : fm_fail(FM_ERR_OUT_OF_MEMORY, "fft pass: out of host memory");
    free(src);
    cudaError_t e = cudaSuccess;
    if (s == FM_OK && (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_id)) != cudaSuccess)
        s = fm_cuda_runtime_fail(e, "fft pass", "cudaDeviceGetAttribute");
    if (s != FM_OK) {
        fm_cufft_pass_destroy(k);
        return s;
    }
    int64_t blocks = (count + 255) / 256, cap = (int64_t)(sms > 0 ? sms : 1) * 8;
    k->grid = (unsigned)(blocks < 1 ? 1 : blocks < cap ? blocks : cap);
    *out = k;
    return FM_OK;
}

fm_status fm_cufft_pass_create(const fm_settings *settings, const fm_cufft_cb_spec *sp, int device_id,
                               fm_cufft_pass **out)
{
    *out = NULL;
    char *src = NULL;
    fm_status s = fm_cufft_pass_source(sp, &src);
    if (s != FM_OK)
        return s;
    int64_t count = 1;
    for (int d = 0; d < sp->ndim; d++)
        count *= sp->extent[d];
    return pass_build(settings, src, sp->store ? "the fft epilog pass" : "the fft prolog pass", device_id,
                      (sp->ops & FM_FFT_OP_CALLBACK) != 0, count, out);
}

fm_status fm_cufft_copy_source(fm_dtype t, int ndim, const int64_t *extent, const int64_t *src_stride,
                               const int64_t *dst_stride, char **source)
{
    const char *T = ctype_of(t);
    if (!T || ndim < 1 || ndim > FM_MAX_NDIM)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft copy: dtype %s, %d dimensions: not a layout to copy",
                       fm_dtype_name(t), ndim);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft copy: out of host memory");
    int64_t count = 1;
    for (int d = 0; d < ndim; d++)
        count *= extent[d];
    fprintf(f, "extern \"C\" __global__ void fm_cb_pass(const %s *src, %s *dst, void *info)\n{\n"
               "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < %lldull;\n"
               "         i += (unsigned long long)gridDim.x * blockDim.x) {\n"
               "        unsigned long long r = i, e;\n        long long s = 0, d = 0;\n        (void)e;\n",
            T, T, (long long)count);
    for (int k = ndim - 1; k >= 0; k--)
        if (extent[k] > 1)
            fprintf(f, "        e = r %% %lldull; r /= %lldull; s += (long long)e * %lldLL; d += (long long)e * %lldLL;\n",
                    (long long)extent[k], (long long)extent[k], (long long)src_stride[k], (long long)dst_stride[k]);
    fprintf(f, "        dst[d] = src[s];\n    }\n}\n");
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft copy: out of host memory");
    }
    *source = buf;
    return FM_OK;
}

fm_status fm_cufft_copy_create(const fm_settings *settings, fm_dtype t, int ndim, const int64_t *extent,
                               const int64_t *src_stride, const int64_t *dst_stride, int device_id,
                               fm_cufft_pass **out)
{
    *out = NULL;
    char *src = NULL;
    fm_status s = fm_cufft_copy_source(t, ndim, extent, src_stride, dst_stride, &src);
    if (s != FM_OK)
        return s;
    int64_t count = 1;
    for (int d = 0; d < ndim; d++)
        count *= extent[d];
    return pass_build(settings, src, "the fft staged copy", device_id, 0, count, out);
}

fm_status fm_cufft_pass_launch(const fm_cufft_pass *k, const void *src, void *dst, void *caller_info, void *stream)
{
    void *args[3] = {(void *)&src, (void *)&dst, (void *)&caller_info};
    dim3 grid = {k->grid, 1, 1}, block = {256, 1, 1};
    cudaError_t e = cudaLaunchKernel((const void *)k->kernel, grid, block, args, 0, (cudaStream_t)stream);
    return e == cudaSuccess ? FM_OK : fm_cuda_runtime_fail(e, "fft pass", "cudaLaunchKernel(fm_cb_pass)");
}
