/* cpu_epilogue.h : the matmul epilogue chain lowered for the CPU, applied to one
 * row panel of D while it is still in cache. D panels are row-major (unit column
 * stride, row stride ldd). Semantics: docs/epilogues.md. */
#ifndef FM_CPU_EPILOGUE_H
#define FM_CPU_EPILOGUE_H

#include "internal.h"

/* What a CPU panel needs besides the GEMM; pointers already at the panel's origin. */
typedef struct fm_cpu_panel {
    int64_t rows, cols;
    void *d;
    int64_t ldd;
    const void *c; /* NULL: no C term */
    int64_t c_rs, c_cs;
    const void *bias; /* NULL: no bias; bias[j * bias_cs] */
    int64_t bias_cs;
    const void *scale; /* NULL: no scale; scale[j * scale_cs] (D's real dtype) */
    int64_t scale_cs;
    void *aux; /* relu mask: bytes of row 0 (column 0); else the activation input at the panel origin */
    int64_t aux_ld;
    int64_t col0;       /* first column of the panel in D (for mask bit positions) */
    int last_col_block; /* this panel holds D's last column: it zeroes the mask padding */
    int64_t mask_row_bytes;
    double clamp[2];    /* lo, hi of FM_EPILOGUE_CLAMP */
    double *colsum;     /* NULL, or cols doubles: set to the column sums of the final panel (bgrad) */
    /* dropout: element (i, j) of the panel uses word drop_word0 + i * drop_ld + j of the portable
     * stream of drop_seed, kept iff word >= drop_threshold, then times drop_scale (also ddropout's) */
    uint64_t drop_word0, drop_seed, drop_threshold;
    int64_t drop_ld;
    double drop_scale;
} fm_cpu_panel;

/* D = beta * C + bias on the panel (the GEMM then accumulates with beta = 1).
 * beta is {re, im}. Returns 1 when it wrote the panel, 0 when nothing was to add. */
int fm_cpu_preload(fm_dtype t, const fm_cpu_panel *p, const double beta[2]);

/* D += bias on the panel (the GEMM ran with beta = 0); nothing without a bias. Also applied by the
 * distributed layer to each rank's block of D (FM_INTERNAL_API: exported to libfusemath_mpi). */
FM_INTERNAL_API void fm_cpu_add_bias(fm_dtype t, const fm_cpu_panel *p);

/* The scale chain: src holds alpha * A@B of the panel (row stride lds; src may be
 * p->d itself): D = scale[j] * src + beta * C + bias. Real dtypes. */
void fm_cpu_scale_combine(fm_dtype t, const fm_cpu_panel *p, const void *src, int64_t lds, const double beta[2]);

/* In place on the panel (real dtypes): the forward activation then dropout (writing aux when the
 * epilogue has AUX), or drelu/dgelu/ddropout reading aux; then, if p->colsum, the column sums
 * of the result. */
FM_INTERNAL_API void fm_cpu_activate(fm_dtype t, unsigned epilogue, const fm_cpu_panel *p); /* distributed too */

/* ---- dropout (fusion/cpu_dropout.c), real dtypes ---- */
/* The Philox words of several consecutive rows, made together: a short row (a skinny D's 64
 * columns: 17 blocks) alone is one latency-bound vector chain, a batch of rows keeps the vector
 * units busy. Rows longer than the batch make their words themselves, a chunk at a time. */
#define FM_CPU_DROP_BLOCKS 1024 /* blocks per batch (16 KB of words) */
#define FM_CPU_DROP_ROWS 256    /* rows per batch at most */
typedef struct fm_cpu_drop_words {
    int64_t i0, i1;                    /* the panel rows whose words are here; i0 == i1: none */
    int32_t at[FM_CPU_DROP_ROWS];      /* row i0 + r's first word: w[at[r]] */
    uint32_t w[4 * (FM_CPU_DROP_BLOCKS + 15)]; /* + the last vector's lanes past the rows */
} fm_cpu_drop_words;

/* Row i of the panel: d = keep ? d * drop_scale : 0; the keep bits into mask (the row's byte of
 * the panel's first column) unless mask is NULL. dw: the caller's batch (i0 = i1 = 0 before its
 * first row), made anew where it lacks row i. */
void fm_cpu_dropout_row(fm_dtype t, const fm_cpu_panel *p, int64_t i, unsigned char *mask, fm_cpu_drop_words *dw);
/* Row i: d = (bit of mask) ? d * drop_scale : 0, mask at the row's byte of the panel's first column. */
void fm_cpu_ddropout_row(fm_dtype t, const fm_cpu_panel *p, int64_t i, const unsigned char *mask);

/* ---- bias gradients (fusion/cpu_bgrad.c) ---- */
/* out[i * out_stride] = sum over r < nred of x[i * os + r * rs] for i < nout, in
 * D's dtype t (complex: complex sums); accumulated in double, each output summed in
 * ascending r by one caller, so the result does not depend on how outputs are split. */
void fm_cpu_sums_store(fm_dtype t, int64_t nout, int64_t nred, const void *x, int64_t os, int64_t rs, void *out,
                       int64_t out_stride);
/* out[j * out_stride] = sum over q < nparts of partial[q * n + j] (in that order), real t. */
void fm_cpu_reduce_partials(fm_dtype t, int64_t nparts, int64_t n, const double *partial, void *out,
                            int64_t out_stride);

#endif
