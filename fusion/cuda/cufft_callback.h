/* cufft_callback.h : the FFT prolog / epilog chains as cuFFT LTO callbacks.
 *
 * A chain (scale, multiply by a broadcast array, conj, then optionally the user's own device
 * function) becomes CUDA C++ source for one cuFFT load callback (prolog) or store callback
 * (epilog), compiled by NVRTC to LTO-IR (-dlto) through the NVRTC cache (memory + disk, keyed
 * by source, options, architecture and NVRTC version) and handed to cufftXtSetJITCallback.
 *
 * The callbacks have fixed names (FM_CUFFT_LOAD_SYMBOL / FM_CUFFT_STORE_SYMBOL) that this
 * file generates itself: the user's function is called from them by its own name, so the
 * name passed to cuFFT always exists in the LTO-IR (cuFFT crashes on one that does not).
 *
 * Execute-time pointers reach the callbacks through cuFFT's caller info, which is fixed when
 * the plan is made: it points to a small device block of FM_CUFFT_CB_PARAMS_BYTES holding
 * {prolog array, epilog array} (fm_cufft_cb_params), written by the backend when they change. */
#ifndef FM_CUFFT_CALLBACK_H
#define FM_CUFFT_CALLBACK_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

#define FM_CUFFT_LOAD_SYMBOL "fm_cb_load"
#define FM_CUFFT_STORE_SYMBOL "fm_cb_store"

typedef struct fm_cufft_cb_params {
    const void *array[2]; /* [0] prolog array, [1] epilog array (device pointers or NULL) */
    const void *base[2];  /* with need_base: the input's / output's data pointer of the call */
} fm_cufft_cb_params;

typedef struct fm_cufft_cb_spec {
    int store;         /* 0: load callback (prolog), 1: store callback (epilog) */
    fm_dtype data;     /* the element type the callback sees: f32, f64, c64 or c128; f16 / c32 for passes
                          only (cuFFT has no half callbacks), computed in float / float2 */
    unsigned ops;      /* FM_FFT_OP_* still to apply */
    double scale[2];   /* with FM_FFT_OP_SCALE */
    fm_dtype array;    /* with FM_FFT_OP_MULTIPLY: the array's dtype (real or complex, same precision) */
    /* The data operand's layout and, with MULTIPLY, the array's strides over it (0 where it
     * broadcasts): every axis, in the operand's own order. */
    int ndim;
    int64_t extent[FM_MAX_NDIM], stride[FM_MAX_NDIM], array_stride[FM_MAX_NDIM];
    const char *user_source, *user_symbol; /* with FM_FFT_OP_CALLBACK */
    /* The backend loops over some batch axes, calling cuFFT with shifted data pointers, and
     * cuFFT's offsets count from the pointer it got: add (pointer - base) back first. */
    int need_base;
} fm_cufft_cb_spec;

/* The spec of problem p's prolog (store 0) or epilog (store 1) chain over its input / output. */
void fm_cufft_cb_spec_from_problem(const fm_problem *p, const fm_attachments *att, int store, int need_base,
                                   fm_cufft_cb_spec *sp);

/* The callback's CUDA C++ source (malloc'ed, caller frees) and its symbol. Errors:
 * FM_ERR_NOT_SUPPORTED when the operand's layout cannot be mapped back from cuFFT's element
 * offset to an index (strides that are not nested: an axis's stride smaller than the span of
 * the axes inside it); FM_ERR_INVALID_ARGUMENT for a bad spec. */
fm_status fm_cufft_cb_source(const fm_cufft_cb_spec *spec, char **source, const char **symbol);

/* Generate and compile to LTO-IR for sm_<arch> (cached; settings as fm_nvrtc_compile's). *ltoir
 * malloc'ed (caller frees).
 * A user function that does not compile: FM_ERR_INVALID_ARGUMENT with NVRTC's log. */
fm_status fm_cufft_cb_compile(const fm_settings *settings, const fm_cufft_cb_spec *spec, int arch, void **ltoir,
                              size_t *size, const char **symbol, int *from_cache);

/* ---- the same chains as separate passes, where cuFFT refuses callbacks for a size ----
 * One kernel over every element of the data operand (C order over its extents, its own
 * strides): a load pass writes chain(src[off]) to dst[off] (dst: a scratch of the input's
 * layout), a store pass applies the chain in place (src == dst == out). need_base must be 0. */
typedef struct fm_cufft_pass fm_cufft_pass;
fm_status fm_cufft_pass_create(const fm_settings *settings, const fm_cufft_cb_spec *spec, int device_id,
                               fm_cufft_pass **out);
void fm_cufft_pass_destroy(fm_cufft_pass *k); /* accepts NULL */
fm_status fm_cufft_pass_launch(const fm_cufft_pass *k, const void *src, void *dst, void *caller_info,
                               void *stream /* cudaStream_t */);
/* The pass's source (malloc'ed) - tests */
fm_status fm_cufft_pass_source(const fm_cufft_cb_spec *spec, char **source);

/* ---- a layout change on the device (the staged copy of operands cuFFT cannot take) ----
 * A kernel (launched as a pass: fm_cufft_pass_launch, caller_info NULL) writing every element of
 * a tensor of these extents from src's strides to dst's (elements of t; any signs). */
fm_status fm_cufft_copy_create(const fm_settings *settings, fm_dtype t, int ndim, const int64_t *extent,
                               const int64_t *src_stride, const int64_t *dst_stride, int device_id,
                               fm_cufft_pass **out);
/* Its source (malloc'ed) - tests */
fm_status fm_cufft_copy_source(fm_dtype t, int ndim, const int64_t *extent, const int64_t *src_stride,
                               const int64_t *dst_stride, char **source);

#endif
