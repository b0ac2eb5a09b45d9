/* cuda_epilogue_kernel.h : the unfused CUDA epilogue: one generated elementwise kernel run in
 * place on D after the cuBLASLt GEMM, and a deterministic column-sum kernel for the bias
 * gradients. Kernels are generated per dtype and chain, compiled with NVRTC for the device's
 * sm_<major><minor> (cached in memory and on disk, nvrtc_cache.h) and loaded with the runtime's
 * library API (cudaLibraryLoadData / cudaLibraryGetKernel / cudaLaunchKernel); libcuda is
 * never linked.
 *
 * Launches run on the calling thread's current device, which must be the create call's
 * device_id (the stream's device). Objects are immutable after create: one may be launched
 * from several threads at once. */
#ifndef FM_CUDA_EPILOGUE_KERNEL_H
#define FM_CUDA_EPILOGUE_KERNEL_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

typedef struct fm_cuda_view {
    void *ptr;
    int64_t rs, cs, bs; /* element strides: row, column, batch; relu mask: BYTES per row in rs, cs unused */
} fm_cuda_view;

typedef struct fm_cuda_ew_spec {
    fm_dtype dtype;    /* D's dtype (f16, bf16, f32, f64, c64, c128); C, bias, activation-input aux share it */
    unsigned epilogue; /* bits applied by this pass: SCALE, BIAS, one forward activation (RELU GELU SIGMOID TANH
                          SILU CLAMP), AUX (store aux), DRELU/DGELU (read aux). BGRAD/BGRADA/BGRADB are ignored
                          (the column-sum kernel does them). Complex dtypes: BIAS only. */
    int add_c;         /* this pass adds beta*C (the GEMM ran with beta = 0) */
    int zero_d;        /* no GEMM ran (alpha = 0 or k = 0): x starts at 0, D is only written */
} fm_cuda_ew_spec;

typedef struct fm_cuda_ew_args {
    int64_t m, n, batch;
    fm_cuda_view d, c, bias, scale, aux; /* bias/scale: only cs and bs are used */
    double beta[2];                      /* re, im */
    double clamp[2];                     /* lo, hi */
    /* DROPOUT: element (b, i, j) uses word drop_word0 + (b * m + i) * n + j of the portable stream of
     * drop_seed, kept iff word >= drop_threshold; DROPOUT / DDROPOUT: kept values times drop_scale */
    uint64_t drop_word0, drop_seed, drop_threshold;
    double drop_scale;
} fm_cuda_ew_args;

typedef struct fm_cuda_ew fm_cuda_ew;

/* Generate the source, compile it (cached; settings as fm_nvrtc_compile's) for device_id's
 * architecture, load it. */
fm_status fm_cuda_ew_create(const fm_settings *settings, const fm_cuda_ew_spec *spec, int device_id, fm_cuda_ew **out);
void fm_cuda_ew_destroy(fm_cuda_ew *k); /* accepts NULL */

/* In place on D, for every (b, i, j): x = D[i,j] (the GEMM's alpha*A@B [+ beta*C]), or 0 with zero_d;
 * if SCALE x *= scale[j]; if add_c x += beta*C[i,j]; if BIAS x += bias[j];
 * if AUX store aux (relu: mask bit x > 0, rows padded to fm_relu_mask_row_bytes(n) with zero bits
 * (whole bytes are written, padding bytes too); else x in D's dtype); x = act(x);
 * if DROPOUT x = keep ? x * drop_scale : 0 (AUX then stores the keep bit, with RELU AND x > 0, instead of
 * relu's mask before the activation);
 * if DRELU x = maskbit(aux[i,j]) ? x : 0; if DDROPOUT x = maskbit ? x * drop_scale : 0;
 * if DGELU x *= gelu'(aux[i,j]); D[i,j] = x.
 * f16/bf16 are computed in float and rounded once (to nearest even) when stored.
 * scale is f32 for f16/bf16/f32 and f64 for f64. relu(x) = x > 0 ? x : 0 (NaN -> 0);
 * clamp(x) = fmin(fmax(x, lo), hi) (NaN -> lo). Unit column strides get vectorised loads. */
fm_status fm_cuda_ew_launch(const fm_cuda_ew *k, const fm_cuda_ew_args *a, void *stream /* cudaStream_t */);

typedef struct fm_cuda_colsum fm_cuda_colsum;
fm_status fm_cuda_colsum_create(const fm_settings *settings, fm_dtype dtype, int device_id, fm_cuda_colsum **out);
void fm_cuda_colsum_destroy(fm_cuda_colsum *k); /* accepts NULL */

/* out[b*out.bs + j*out.cs] = sum_{i<rows} x[b*x.bs + i*x.rs + j*x.cs], j < cols, b < batch (rs of out is
 * unused). Deterministic: a fixed-order two-stage reduction through the workspace whose split depends
 * only on (rows, cols, batch), no atomics. Accumulates in float for f16/bf16/f32, double for f64,
 * complex float/double for c64/c128. The workspace (fm_cuda_colsum_workspace bytes, 16-byte aligned)
 * may be NULL when that size is 0. rows == 0 writes zeros. */
size_t fm_cuda_colsum_workspace(fm_dtype dtype, int64_t rows, int64_t cols, int64_t batch);
fm_status fm_cuda_colsum_launch(const fm_cuda_colsum *k, int64_t rows, int64_t cols, int64_t batch, fm_cuda_view x,
                                fm_cuda_view out, void *workspace, size_t workspace_bytes, void *stream);

/* ---- device-free entry points (tests, tools) ---- */
/* The CUDA C++ source of the kernels, malloc'ed into *source (caller frees). */
fm_status fm_cuda_ew_source(const fm_cuda_ew_spec *spec, char **source);
fm_status fm_cuda_colsum_source(fm_dtype dtype, char **source);
/* Generate and compile (through the NVRTC cache) for sm_<arch> without a device; *image as
 * fm_nvrtc_compile (caller frees). */
fm_status fm_cuda_ew_compile(const fm_settings *settings, const fm_cuda_ew_spec *spec, int arch, void **image,
                             size_t *size, int *from_cache);
fm_status fm_cuda_colsum_compile(const fm_settings *settings, fm_dtype dtype, int arch, void **image, size_t *size,
                                 int *from_cache);

#endif
