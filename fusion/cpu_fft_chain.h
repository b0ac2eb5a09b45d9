/* cpu_fft_chain.h : the FFT prolog / epilog of a CPU backend, applied while data moves
 * between the caller's arrays and the backend's scratch. One row of n elements becomes
 * conj?(x * scale * array) (docs/api.md); strides count real scalars inside the loops and
 * elements in this struct. */
#ifndef FM_CPU_FFT_CHAIN_H
#define FM_CPU_FFT_CHAIN_H

#include "internal.h"

#define FM_FFT_COL_TILE 8   /* column tiles: points per tile (one cache line of c64 per transform) */
#define FM_FFT_COL_BLOCK 64 /* column tiles: transforms per tile (a column chunk holds at least this many) */

/* One transform's geometry on each side, and the chain (transform axes padded in front to
 * three, extent 1 and stride 0 where absent). */
typedef struct fm_fft_chain_layout {
    int64_t ext_in[3], ext_out[3];
    int64_t s_in[3], s_out[3], s_pa[3], s_ea[3]; /* element strides along the transform axes */
    int64_t b_pa0, b_ea0;                        /* the arrays' strides along the first batch axis */
    int64_t per_in, per_out;                     /* elements per transform */
    int64_t sd_in, sd_out;                       /* scratch elements from one transform to the next */
    int in_cplx, out_cplx, pa_cplx, ea_cplx;
    unsigned pro_ops, epi_ops;                   /* FM_FFT_OP_* still to apply */
    double pro_scale[2], epi_scale[2];
} fm_fft_chain_layout;

/* One transform: in (element offset oin, prolog array at opa) -> dst, contiguous, prolog
 * applied; nthr > 1 shares its rows (or pieces of them) among OpenMP threads. */
void fm_fft_gather(const fm_fft_chain_layout *x, int dbl, const void *in, const void *pa, int64_t oin, int64_t opa,
                   void *dst, int nthr);
/* One transform: contiguous src -> out (offset oout, epilog array at oea), epilog applied;
 * src == NULL: the epilog in place on out. */
void fm_fft_scatter(const fm_fft_chain_layout *x, int dbl, const void *src, void *out, const void *ea, int64_t oout,
                    int64_t oea, int nthr);
/* cnt transforms side by side along a unit-stride batch axis (columns): in -> dst, transform
 * e at e * sd_in, prolog applied. */
void fm_fft_gather_cols(const fm_fft_chain_layout *x, int dbl, const void *in, const void *pa, int64_t oin,
                        int64_t opa, int64_t cnt, void *dst);
/* The reverse with the epilog; src == NULL: the epilog in place on out's columns. */
void fm_fft_scatter_cols(const fm_fft_chain_layout *x, int dbl, const void *src, void *out, const void *ea,
                         int64_t oout, int64_t oea, int64_t cnt);

#endif
