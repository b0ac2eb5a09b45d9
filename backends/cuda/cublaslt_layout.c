/* cublaslt_layout.c : the cuBLASLt matmul's view of the problem (see cublaslt_matmul.h): our
 * row-major operands as cuBLASLt's column-major ones, the batch split into a host loop and
 * cuBLASLt's strided batch, the matrix layouts, which chains cuBLASLt's epilogue can fuse, and
 * the matmul descriptors (filled at planning with stand-in pointers, per call with the real ones). */
#include "cublaslt_matmul.h"
#include "epilogue.h"

/* ---- layouts ---- */

/* Our X (rows R x cols C, strides rs/cs) as cuBLASLt's column-major operand that
 * equals X^T after op. */
lt_operand fm_lt_operand_for(int64_t r, int64_t c, int64_t rs, int64_t cs)
{
    lt_operand o = {0};
    int row_major = (cs == 1 || c <= 1) && (r <= 1 || rs >= (c > 1 ? c : 1));
    int col_major = (rs == 1 || r <= 1) && (c <= 1 || cs >= (r > 1 ? r : 1));
    if (row_major) { /* memory is column-major X^T (c x r) */
        o.ok = 1;
        o.ld = r <= 1 ? (c > 1 ? c : 1) : rs;
        o.op = CUBLAS_OP_N;
    } else if (col_major) { /* memory is column-major X (r x c) */
        o.ok = 1;
        o.ld = c <= 1 ? (r > 1 ? r : 1) : cs;
        o.op = CUBLAS_OP_T;
    }
    return o;
}

int fm_lt_row_major_like_d(const fm_matmul_geom *g, int slot)
{
    int64_t rs = g->row_stride[slot], cs = g->col_stride[slot];
    return (cs == 1 || g->n <= 1) && (g->m <= 1 || rs >= (g->n > 1 ? g->n : 1));
}

int64_t fm_lt_d_ld(const fm_matmul_geom *g, int slot)
{
    return g->m <= 1 ? (g->n > 1 ? g->n : 1) : g->row_stride[slot];
}

/* Split the batch dims into an outer part looped on the host and the longest inner
 * suffix that every operand can express as one (count, stride) pair. */
void fm_lt_split_batch(const fm_problem *p, lt_plan *pl)
{
    const fm_matmul_geom *g = &pl->g;
    const int nd = g->batch_ndim;
    int start = nd;
    int64_t span = 1; /* elements of the batch dims from start on */
    while (start > 0) {
        const int s = start - 1;
        /* dim s folds into the suffix when stepping over it equals stepping over the whole
         * suffix (whose own dims were checked before); broadcast (0) folds with broadcast only */
        int ok = 1;
        for (int slot = 0; slot < FM_MATMUL_NSLOTS && ok && s < nd - 1; slot++)
            ok = !(p->present & (1u << slot)) ||
                 g->batch_strides[slot][s] == g->batch_strides[slot][nd - 1] * span;
        if (!ok)
            break;
        span *= g->batch_shape[s];
        start = s;
    }
    pl->outer_ndim = start;
    pl->inner_count = span;
    for (int i = 0; i < start; i++)
        pl->outer_shape[i] = g->batch_shape[i];
    for (int slot = 0; slot < FM_MATMUL_NSLOTS; slot++) {
        for (int i = 0; i < start; i++)
            pl->outer_stride[slot][i] = g->batch_strides[slot][i];
        pl->inner_stride[slot] = nd > start ? g->batch_strides[slot][nd - 1] : 0;
    }
}

fm_status fm_lt_make_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld,
                            int64_t count, int64_t stride)
{
    fm_status s = fm_lt_status(cublasLtMatrixLayoutCreate(l, t, rows, cols, ld), "cublasLtMatrixLayoutCreate");
    if (s != FM_OK)
        return s;
    int32_t c32 = (int32_t)count;
    if (count > 1) {
        if ((s = fm_lt_status(
                 cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c32, sizeof c32),
                 "set BATCH_COUNT")) != FM_OK ||
            (s = fm_lt_status(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                               &stride, sizeof stride),
                              "set STRIDED_BATCH_OFFSET")) != FM_OK)
            return s;
    }
    return FM_OK;
}

/* ---- what cuBLASLt can fuse ---- */
int fm_lt_epilogue_for(const lt_plan *pl, cublasLtEpilogue_t *out, int *bias_slot)
{
    unsigned e = pl->mp.epilogue;
    const fm_matmul_geom *g = &pl->g;
    *bias_slot = -1;
    if (fm_dtype_is_complex(g->dtype) && e)
        return 0; /* cuBLASLt takes no epilogue with complex types */
    if (e & (FM_EPILOGUE_SIGMOID | FM_EPILOGUE_TANH | FM_EPILOGUE_SILU | FM_EPILOGUE_CLAMP))
        return 0;
    if (e & (FM_EPILOGUE_DROPOUT | FM_EPILOGUE_DDROPOUT))
        return 0; /* no dropout epilogue in cuBLASLt: the generated kernel does the chain */
    if ((e & FM_EPILOGUE_BIAS) && !(g->col_stride[FM_MATMUL_BIAS] == 1 || g->n <= 1))
        return 0;
    if (e & FM_EPILOGUE_SCALE) {
        /* alpha vector: per row of D^T = per column of ours; no scalar alpha on top */
        if (pl->mp.alpha[0] != 1.0 || !(g->col_stride[FM_MATMUL_SCALE] == 1 || g->n <= 1))
            return 0;
    }
    if (fm_epilogue_uses_aux(e)) {
        int64_t rs = g->row_stride[FM_MATMUL_AUX], bs = pl->inner_stride[FM_MATMUL_AUX];
        if (!fm_epilogue_aux_is_mask(e) && ((g->m > 1 && rs % 8) || bs % 8))
            return 0; /* cuBLASLt: gelu aux ld and batch stride divisible by 8 */
    }
    if ((e & FM_EPILOGUE_ANY_BGRAD_)) {
        int64_t cs = (e & FM_EPILOGUE_BGRADA) ? g->row_stride[FM_MATMUL_BGRAD] : g->col_stride[FM_MATMUL_BGRAD];
        int64_t len = (e & FM_EPILOGUE_BGRADA) ? g->m : g->n;
        if (!(cs == 1 || len <= 1))
            return 0;
    }
    unsigned act = e & (FM_EPILOGUE_RELU | FM_EPILOGUE_GELU);
    int bias = (e & FM_EPILOGUE_BIAS) != 0, aux = (e & FM_EPILOGUE_AUX) != 0;
    if (e & FM_EPILOGUE_DRELU)
        *out = (e & FM_EPILOGUE_BGRAD) ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
    else if (e & FM_EPILOGUE_DGELU)
        *out = (e & FM_EPILOGUE_BGRAD) ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    else if (e & FM_EPILOGUE_BGRADA) /* sums of our A = cuBLASLt's B */
        *out = CUBLASLT_EPILOGUE_BGRADB;
    else if (e & FM_EPILOGUE_BGRADB)
        *out = CUBLASLT_EPILOGUE_BGRADA;
    else if (act == FM_EPILOGUE_RELU)
        *out = bias ? (aux ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_BIAS)
                    : (aux ? CUBLASLT_EPILOGUE_RELU_AUX : CUBLASLT_EPILOGUE_RELU);
    else if (act == FM_EPILOGUE_GELU)
        *out = bias ? (aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS)
                    : (aux ? CUBLASLT_EPILOGUE_GELU_AUX : CUBLASLT_EPILOGUE_GELU);
    else
        *out = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (bias)
        *bias_slot = FM_MATMUL_BIAS;
    if (e & FM_EPILOGUE_ANY_BGRAD_)
        *bias_slot = FM_MATMUL_BGRAD;
    return 1;
}

/* Fill a matmul descriptor. ptrs == NULL at planning: pointer attributes get
 * stand-in values with the planned alignment (the heuristic reads alignment off them). */
fm_status fm_lt_fill_desc(const lt_plan *pl, const fm_problem *p, cublasLtMatmulDesc_t desc, void *const *ptrs,
                          int fused)
{
    fm_status s;
#define SET(attr, val)                                                                                              \
    do {                                                                                                            \
        if ((s = fm_lt_status(cublasLtMatmulDescSetAttribute(desc, attr, &(val), sizeof(val)), "set " #attr)) !=    \
            FM_OK)                                                                                                  \
            return s;                                                                                               \
    } while (0)
    int32_t ta = pl->la.op, tb = pl->lb.op;
    SET(CUBLASLT_MATMUL_DESC_TRANSA, ta);
    SET(CUBLASLT_MATMUL_DESC_TRANSB, tb);
    if (pl->has_scales && ptrs) { /* cuBLASLt's A is our b, its B our a */
        const void *sa = ptrs[FM_MATMUL_B_SCALE], *sb = ptrs[FM_MATMUL_A_SCALE];
        if (sa)
            SET(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, sa);
        if (sb)
            SET(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, sb);
    }
    if (!fused)
        return FM_OK;
    uint32_t epi = pl->lt_epi;
    SET(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    const fm_matmul_geom *g = &pl->g;
    if (pl->lt_bias_slot >= 0) {
        int slot = pl->lt_bias_slot;
        void *ptr = ptrs ? ptrs[slot] : (void *)((uintptr_t)1 << p->align_log2[slot]);
        int64_t bs = pl->inner_stride[slot];
        SET(CUBLASLT_MATMUL_DESC_BIAS_POINTER, ptr);
        if (pl->inner_count > 1)
            SET(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bs);
        if (pl->a_type != pl->dtype) { /* fp8: the default bias type is not D's; ours is */
            int32_t bt = pl->dtype;
            SET(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bt);
        }
    }
    if (fm_epilogue_uses_aux(pl->mp.epilogue)) {
        void *ptr = ptrs ? ptrs[FM_MATMUL_AUX] : (void *)((uintptr_t)1 << p->align_log2[FM_MATMUL_AUX]);
        int mask = fm_epilogue_aux_is_mask(pl->mp.epilogue);
        /* relu mask: ld and batch stride in bits; activation input: in elements */
        int64_t ld = mask ? 8 * fm_relu_mask_row_bytes(g->n) : (g->m > 1 ? g->row_stride[FM_MATMUL_AUX] : g->n);
        int64_t bs = pl->inner_stride[FM_MATMUL_AUX] * (mask ? 8 : 1);
        if (ld < 8)
            ld = 8;
        SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, ptr);
        SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld);
        if (pl->inner_count > 1)
            SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, bs);
    }
    if (pl->alpha_vector) {
        int32_t mode = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST;
        int64_t bs = pl->inner_stride[FM_MATMUL_SCALE];
        SET(CUBLASLT_MATMUL_DESC_POINTER_MODE, mode);
        if (pl->inner_count > 1)
            SET(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, bs);
    }
#undef SET
    return FM_OK;
}

int fm_lt_needs_call_desc(const lt_plan *pl)
{
    return pl->has_scales || (pl->fused && (pl->lt_bias_slot >= 0 || fm_epilogue_uses_aux(pl->mp.epilogue)));
}
