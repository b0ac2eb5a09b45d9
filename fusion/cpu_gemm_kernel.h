/* cpu_gemm_kernel.h : fusemath's own GEMM microkernel, the forward epilogue applied in
 * registers before D is stored.
 *
 * Why: with k of 64-128 the product is bound by writing D, and OpenBLAS as a black
 * box needs the bias and the activation as passes over each D tile (4-8% of the
 * product on the H200 host, docs/performance.md). Here every MR x NR block of D is
 * summed over k in registers (in blocks of KC for long k), then alpha, beta*C, bias
 * and relu are applied and the block is stored once. B is packed into strips of NR
 * columns (k x NR each, zero padded): once per execute when every batch shares it,
 * which every thread then reads, else per work item into the thread's scratch; a
 * small row-major B is read in place. A is read through its strides (a broadcast per
 * element, so any layout works without packing). */
#ifndef FM_CPU_GEMM_KERNEL_H
#define FM_CPU_GEMM_KERNEL_H

#include "internal.h"

typedef struct fm_cpu_gemm_args {
    int64_t k;
    int64_t kc;         /* k per block (0: all of k in one): the first block starts from beta*C,
                         * later ones add to D, the last applies bias and relu */
    double alpha;
    const void *a;      /* A at the block's first row; element (i, p) at a[i * a_rs + p * a_cs] */
    int64_t a_rs, a_cs;
    const void *bp;     /* B at the block's first strip: packed, or the caller's rows (see b_ld) */
    int64_t b_ld;       /* elements from one k row of a strip to the next: nr packed, B's row stride direct */
    int64_t b_strip;    /* elements from one strip to the next: k * nr packed, nr direct */
    const void *bias;   /* packed bias (contiguous, zero padded) at the block's first column, or NULL */
    const void *c;      /* C at the block's origin (element (i, j) at c[i * c_rs + j * c_cs]), or NULL;
                         * may be D itself: each block of C is read before that block of D is stored */
    int64_t c_rs, c_cs;
    double beta;
    int relu;           /* max(x, 0) before the store (NaN gives 0, as fm_cpu_activate) */
} fm_cpu_gemm_args;

typedef struct fm_cpu_gemm_kernel {
    const char *isa; /* "avx512", "avx2" or "generic" (describe() names it) */
    int mr;          /* rows per register block */
    int nr;          /* columns per packed strip; divides 128 (column blocks are multiples of 128) */
    int64_t auto_max_k; /* auto picks this variant up to this k (0: never): set from measurements
                         * against OpenBLAS (docs/design.md "Own kernel") */
    /* strips [s0, s1) of the k x n matrix (element (p, j) at src[p * rs + j * cs]) into
     * dst + s * k * nr, zero beyond column n */
    void (*pack)(int64_t k, int64_t n, const void *src, int64_t rs, int64_t cs, void *dst, int64_t s0, int64_t s1);
    /* D[rows x cols] (row stride ldd, unit column stride) = epilogue(alpha * A @ B + beta * C);
     * cols counted from the block's first strip */
    void (*block)(const fm_cpu_gemm_args *x, int64_t rows, int64_t cols, void *d, int64_t ldd);
} fm_cpu_gemm_kernel;

/* The fastest variant this CPU runs for real dtype t (f32, f64), capped by the context's
 * settings->cpu_kernel (FUSEMATH_CPU_KERNEL=avx2|generic; settings NULL: no cap); NULL for other
 * dtypes. */
const fm_cpu_gemm_kernel *fm_cpu_gemm_kernel_for(fm_dtype t, const fm_settings *settings);

/* k per block for a product of this k (0: one block): KC = 256 for k > 384, so that a
 * strip of B's block (16-32 KiB) stays in L1; settings->cpu_kernel_kc (FUSEMATH_CPU_KERNEL_KC,
 * read at context creation; -1: unset) overrides it (settings NULL: the default). */
#define FM_CPU_GEMM_KC 256
#define FM_CPU_GEMM_ONE_BLOCK_K (FM_CPU_GEMM_KC + FM_CPU_GEMM_KC / 2) /* up to this k: one block */
int64_t fm_cpu_gemm_kc(int64_t k, const fm_settings *settings);

#endif
