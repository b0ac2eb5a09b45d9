/* cpu_epilogue.h : the matmul epilogue chain lowered for the CPU, applied to one
 * row panel of D while it is still in cache. D panels are row-major (unit column
 * stride, row stride ldd). */
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
    void *aux; /* relu: mask bytes at column (col0 / 8); gelu: preactivation */
    int64_t aux_ld;
    int64_t col0;       /* first column of the panel in D (for mask bit positions) */
    int last_col_block; /* this panel holds D's last column: it zeroes the mask padding */
    int64_t mask_row_bytes;
} fm_cpu_panel;

/* D = beta * C + bias on the panel (the GEMM then accumulates with beta = 1).
 * beta is {re, im}. Returns 1 when it wrote the panel, 0 when nothing was to add. */
int fm_cpu_preload(fm_dtype t, const fm_cpu_panel *p, const double beta[2]);

/* Apply relu/gelu in place (real dtypes) and write aux if requested. */
void fm_cpu_activate(fm_dtype t, unsigned epilogue, const fm_cpu_panel *p);

#endif
