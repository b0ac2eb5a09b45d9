/* cublaslt_matmul.h : what the cuBLASLt matmul backend's files share (private to backends/cuda).
 *
 * cublaslt_matmul.c holds the backend (probe, plan, execute); cublaslt_layout.c maps the
 * problem onto cuBLASLt's operands, layouts, batch and epilogue and fills its matmul descriptors;
 * cublaslt_search.c asks the heuristic for the algorithm candidates and picks gpu_algo's. All work
 * on the plan below. */
#ifndef FM_CUBLASLT_MATMUL_H
#define FM_CUBLASLT_MATMUL_H

#include "cuda/cuda_epilogue_kernel.h"
#include "cuda_workspace.h"
#include "internal.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

/* The backend's state in a context: the handle, the workspace limit (FUSEMATH_CUDA_WORKSPACE_MB,
 * default 32 MiB, cuBLAS's recommendation for Hopper) and the workspaces. */
typedef struct lt_state {
    cublasLtHandle_t handle;
    size_t limit;
    fm_cuda_ws_table *ws;
} lt_state;

/* One operand as cuBLASLt sees it: a column-major matrix with leading dimension ld,
 * transposed (op = T) or not. */
typedef struct lt_operand {
    int ok;
    cublasOperation_t op;
    int64_t ld;
} lt_operand;

typedef struct lt_plan {
    lt_state *st;
    int device;
    fm_matmul_geom g;
    fm_matmul_params mp;
    cublasComputeType_t compute;
    cudaDataType_t dtype, scale_type; /* of C and D; the scale type */
    cudaDataType_t a_type, b_type;    /* of our A and B (fp8 inputs differ from D) */
    int has_scales;                   /* fp8 a_scale / b_scale given */
    /* alpha and beta in the scale type (float, double, or complex of either) */
    double alpha_d[2], beta_d[2];
    float alpha_f[2], beta_f[2];
    lt_operand la, lb; /* cuBLASLt's A (from our B) and B (from our A) */
    int c_in_gemm;     /* beta*C is added by cuBLASLt (else by the kernel, or there is no C) */
    int fused;         /* the whole chain runs inside cuBLASLt */
    int no_product;    /* alpha = 0 or k = 0: no GEMM; the kernel writes act(beta*C + bias) (BLAS reads
                          neither A nor B for alpha = 0: an inf there must not become NaN = inf * 0) */
    cublasLtEpilogue_t lt_epi;
    int lt_bias_slot;  /* slot whose pointer goes to BIAS_POINTER, or -1 */
    int alpha_vector;  /* scale as cuBLASLt's alpha vector */
    cublasLtMatmulDesc_t desc; /* complete when no per-call pointer is needed */
    int needs_call_desc;
    uint64_t serial; /* unique per plan in the process: keys the per-thread descriptor */
    cublasLtMatrixLayout_t lay_a, lay_b, lay_c, lay_d;
    cublasLtMatmulAlgo_t algo;
    size_t algo_ws;
    int algo_index, algo_count;
    /* batch: outer dims looped on the host, inner dims as cuBLASLt's strided batch */
    int outer_ndim;
    int64_t outer_shape[FM_MAX_NDIM];
    int64_t outer_stride[FM_MATMUL_NSLOTS][FM_MAX_NDIM];
    int64_t inner_count;
    int64_t inner_stride[FM_MATMUL_NSLOTS];
    /* second pass */
    fm_cuda_ew *ew;
    fm_cuda_ew_args ew_args; /* pointers filled per call */
    fm_cuda_colsum *colsum;
    int colsum_src; /* slot summed: D (drelu/dgelu+bgrad), A (bgrada) or B (bgradb) */
    int64_t cs_rows, cs_cols;
    fm_cuda_view cs_x, cs_out;
    size_t cs_ws;
    size_t slot_es[FM_MATMUL_NSLOTS]; /* bytes per element of each slot (offsets of host-looped batches) */
} lt_plan;

/* cublaslt_matmul.c */
fm_status fm_lt_status(cublasStatus_t s, const char *what); /* FM_OK, or fm_fail with cuBLASLt's names */

/* cublaslt_layout.c */
lt_operand fm_lt_operand_for(int64_t r, int64_t c, int64_t rs, int64_t cs);
int fm_lt_row_major_like_d(const fm_matmul_geom *g, int slot);
int64_t fm_lt_d_ld(const fm_matmul_geom *g, int slot);
void fm_lt_split_batch(const fm_problem *p, lt_plan *pl);
fm_status fm_lt_make_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld,
                            int64_t count, int64_t stride);
int fm_lt_epilogue_for(const lt_plan *pl, cublasLtEpilogue_t *out, int *bias_slot);
fm_status fm_lt_fill_desc(const lt_plan *pl, const fm_problem *p, cublasLtMatmulDesc_t desc, void *const *ptrs,
                          int fused);
int fm_lt_needs_call_desc(const lt_plan *pl);

/* cublaslt_search.c */
fm_status fm_lt_choose_algo(lt_plan *pl, const fm_problem *p);

#endif
