/* cuda_epilogue_internal.h : what cuda_epilogue_source.c (the generated sources) and
 * cuda_epilogue_kernel.c (loading and launching them) share, private to fusion/cuda: the host
 * mirrors of the kernels' parameter blocks (their sizes are compiled into the sources) and the
 * checks of a spec. */
#ifndef FM_CUDA_EPILOGUE_INTERNAL_H
#define FM_CUDA_EPILOGUE_INTERNAL_H

#include "cuda_epilogue_kernel.h"
#include "epilogue.h"

/* Host mirrors of the parameter blocks (same member order and types, naturally aligned). */
typedef struct ew_params {
    void *d;
    const void *c, *bias, *scale;
    void *aux;
    int64_t m, n, batch, nch, total;
    int64_t d_rs, d_cs, d_bs, c_rs, c_cs, c_bs;
    int64_t bias_cs, bias_bs, scale_cs, scale_bs;
    int64_t aux_rs, aux_cs, aux_bs;
    double beta_re, beta_im, clamp_lo, clamp_hi;
    uint64_t drop_base, drop_seed, drop_thr; /* dropout: word of element (0, 0, 0), key, threshold */
    double drop_scale;
    int32_t small, rows_fast, unit, pad_;
} ew_params;

typedef struct cs_params {
    const void *x;
    void *out, *ws;
    int64_t rows, cols, batch, S, seg, tiles, nitems;
    int64_t x_rs, x_cs, x_bs, o_cs, o_bs;
    int32_t direct, pad_;
} cs_params;

_Static_assert(sizeof(ew_params) == 5 * 8 + 5 * 8 + 13 * 8 + 4 * 8 + 4 * 8 + 16, "ew_params layout");
_Static_assert(sizeof(cs_params) == 3 * 8 + 7 * 8 + 5 * 8 + 8, "cs_params layout");

static inline int fm_cuda_epi_dtype_ok(fm_dtype t)
{
    return t == FM_F16 || t == FM_BF16 || t == FM_F32 || t == FM_F64 || t == FM_C64 || t == FM_C128;
}

/* the bits the elementwise kernel applies (the bias gradients are the column sums') */
static inline unsigned fm_cuda_epi_ew_bits(unsigned e) { return e & ~(unsigned)FM_EPILOGUE_ANY_BGRAD_; }

/* the kernel writes a bit mask as aux (relu+aux, dropout+aux) / reads one (drelu, ddropout) */
static inline int fm_cuda_ew_mask_out(unsigned e)
{
    return (e & FM_EPILOGUE_AUX) && (e & (FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT));
}
static inline int fm_cuda_ew_mask_in(unsigned e) { return (e & (FM_EPILOGUE_DRELU | FM_EPILOGUE_DDROPOUT)) != 0; }

/* spec is non-NULL, its dtype one the kernels take, its chain valid for it (cuda_epilogue_source.c) */
fm_status fm_cuda_ew_check_spec(const fm_cuda_ew_spec *spec);
/* columns per thread (FM_CW): 8 with a relu mask (one byte per thread), else 16 bytes' worth */
int fm_cuda_ew_chunk_width(const fm_cuda_ew_spec *spec);

#endif
