/* cublaslt_matmul.c : matmul on CUDA devices through cuBLASLt.
 *
 * Row-major operands map onto column-major cuBLASLt as D^T = B^T A^T, so the
 * library's "A" is built from our B and its "B" from our A, and a bias of length N
 * (one per column of our D) is cuBLASLt's native bias (one per row of D^T).
 * The chain is fused into cuBLASLt's epilogue where cuBLASLt can do it (passes=1);
 * otherwise the plan is a plain cuBLASLt GEMM plus one generated elementwise kernel
 * (fusion/cuda/cuda_epilogue_kernel.c) and, for bias gradients, a column-sum kernel.
 * The plan (cublaslt_matmul.h) is built here from cublaslt_layout.c (operands, batch, layouts,
 * epilogue, descriptors) and cublaslt_search.c (the algorithm candidates). */
#include "cublaslt_matmul.h"
#include "cuda_nvtx.h"
#include "epilogue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---- */
fm_status fm_lt_status(cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return FM_OK;
    return fm_fail(s == CUBLAS_STATUS_ALLOC_FAILED ? FM_ERR_OUT_OF_MEMORY : FM_ERR_BACKEND, "matmul on cuda: %s: %s (%s)",
                   what, cublasLtGetStatusName(s), cublasLtGetStatusString(s));
}

/* ---- backend state (per context) ---- */
static void cublaslt_release(void *state)
{
    lt_state *st = state;
    if (!st)
        return;
    fm_cuda_ws_table_destroy(st->ws);
    if (st->handle)
        cublasLtDestroy(st->handle);
    free(st);
}

static fm_status cublaslt_probe(const fm_settings *settings, void **state, const char **why)
{
    void *ws = NULL;
    fm_status s = fm_cuda_ws_probe("cublaslt", &ws, why); /* first: "no CUDA device" is the reason to give */
    if (s != FM_OK)
        return s;
    lt_state *st = calloc(1, sizeof *st);
    if (!st) {
        fm_cuda_ws_table_destroy(ws);
        *why = "out of host memory";
        return FM_ERR_UNAVAILABLE;
    }
    st->ws = ws;
    cublasStatus_t cs = s == FM_OK ? cublasLtCreate(&st->handle) : CUBLAS_STATUS_SUCCESS;
    if (cs != CUBLAS_STATUS_SUCCESS) {
        st->handle = NULL;
        s = fm_fail(FM_ERR_UNAVAILABLE, "cublasLtCreate: %s", cublasLtGetStatusName(cs));
        *why = fm_last_error();
    }
    if (s != FM_OK) {
        cublaslt_release(st);
        return s;
    }
    st->limit = (size_t)32 << 20;
    if (settings->cuda_workspace_mb >= 0) /* FUSEMATH_CUDA_WORKSPACE_MB */
        st->limit = (size_t)settings->cuda_workspace_mb << 20;
    *state = st;
    return FM_OK;
}

/* ---- types ---- */
static int lt_types(fm_dtype t, int tf32, cudaDataType_t *dt, cudaDataType_t *scale, cublasComputeType_t *ct)
{
    switch (t) {
    case FM_F16: *dt = CUDA_R_16F, *scale = CUDA_R_32F, *ct = CUBLAS_COMPUTE_32F; return 1;
    case FM_BF16: *dt = CUDA_R_16BF, *scale = CUDA_R_32F, *ct = CUBLAS_COMPUTE_32F; return 1;
    case FM_F32: *dt = CUDA_R_32F, *scale = CUDA_R_32F, *ct = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; return 1;
    case FM_F64: *dt = CUDA_R_64F, *scale = CUDA_R_64F, *ct = CUBLAS_COMPUTE_64F; return 1;
    case FM_C64: *dt = CUDA_C_32F, *scale = CUDA_C_32F, *ct = CUBLAS_COMPUTE_32F; return 1;
    case FM_C128: *dt = CUDA_C_64F, *scale = CUDA_C_64F, *ct = CUBLAS_COMPUTE_64F; return 1;
    default: return 0;
    }
}

static void cublaslt_destroy(void *impl)
{
    lt_plan *pl = impl;
    if (!pl)
        return;
    if (pl->desc)
        cublasLtMatmulDescDestroy(pl->desc);
    if (pl->lay_a)
        cublasLtMatrixLayoutDestroy(pl->lay_a);
    if (pl->lay_b)
        cublasLtMatrixLayoutDestroy(pl->lay_b);
    if (pl->lay_c && pl->lay_c != pl->lay_d)
        cublasLtMatrixLayoutDestroy(pl->lay_c);
    if (pl->lay_d)
        cublasLtMatrixLayoutDestroy(pl->lay_d);
    fm_cuda_ew_destroy(pl->ew);
    fm_cuda_colsum_destroy(pl->colsum);
    free(pl);
}

/* ---- the second pass ---- */
static fm_cuda_view view_of(const lt_plan *pl, int slot)
{
    fm_cuda_view v = {NULL, pl->g.row_stride[slot], pl->g.col_stride[slot], pl->inner_stride[slot]};
    return v;
}

static fm_status plan_second_pass(const fm_settings *set, lt_plan *pl)
{
    unsigned e = pl->mp.epilogue;
    const fm_matmul_geom *g = &pl->g;
    unsigned ew_bits = e & (FM_EPILOGUE_SCALE | FM_EPILOGUE_BIAS | FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_AUX |
                            FM_EPILOGUE_BACKWARD_ | FM_EPILOGUE_DROPOUT);
    int add_c = (pl->mp.beta[0] != 0.0 || pl->mp.beta[1] != 0.0) && !pl->c_in_gemm;
    fm_status s;
    if (ew_bits || add_c || pl->no_product) {
        fm_cuda_ew_spec spec = {.dtype = g->dtype, .epilogue = ew_bits, .add_c = add_c, .zero_d = pl->no_product};
        if ((s = fm_cuda_ew_create(set, &spec, pl->device, &pl->ew)) != FM_OK)
            return s;
        fm_cuda_ew_args *a = &pl->ew_args;
        memset(a, 0, sizeof *a);
        a->m = g->m;
        a->n = g->n;
        a->batch = pl->inner_count;
        a->d = view_of(pl, FM_MATMUL_D);
        a->c = view_of(pl, FM_MATMUL_C);
        a->bias = view_of(pl, FM_MATMUL_BIAS);
        a->scale = view_of(pl, FM_MATMUL_SCALE);
        a->aux = view_of(pl, FM_MATMUL_AUX);
        if (fm_epilogue_uses_aux(e) && fm_epilogue_aux_is_mask(e))
            a->aux.rs = fm_relu_mask_row_bytes(g->n), a->aux.bs = pl->inner_stride[FM_MATMUL_AUX];
        memcpy(a->beta, pl->mp.beta, sizeof a->beta);
        memcpy(a->clamp, pl->mp.clamp, sizeof a->clamp);
        a->drop_threshold = fm_dropout_threshold(pl->mp.dropout);
        a->drop_scale = fm_dropout_scale(pl->mp.dropout);
    }
    if (e & FM_EPILOGUE_ANY_BGRAD_) {
        if ((s = fm_cuda_colsum_create(set, g->dtype, pl->device, &pl->colsum)) != FM_OK)
            return s;
        fm_cuda_view out = {NULL, 0, 0, pl->inner_stride[FM_MATMUL_BGRAD]};
        if (e & FM_EPILOGUE_BGRADA) { /* row sums of A = column sums of A^T (K x M) */
            pl->colsum_src = FM_MATMUL_A;
            pl->cs_rows = g->k, pl->cs_cols = g->m;
            pl->cs_x = (fm_cuda_view){NULL, g->col_stride[FM_MATMUL_A], g->row_stride[FM_MATMUL_A],
                                      pl->inner_stride[FM_MATMUL_A]};
            out.cs = g->row_stride[FM_MATMUL_BGRAD];
        } else if (e & FM_EPILOGUE_BGRADB) {
            pl->colsum_src = FM_MATMUL_B;
            pl->cs_rows = g->k, pl->cs_cols = g->n;
            pl->cs_x = view_of(pl, FM_MATMUL_B);
            out.cs = g->col_stride[FM_MATMUL_BGRAD];
        } else {
            pl->colsum_src = FM_MATMUL_D;
            pl->cs_rows = g->m, pl->cs_cols = g->n;
            pl->cs_x = view_of(pl, FM_MATMUL_D);
            out.cs = g->col_stride[FM_MATMUL_BGRAD];
        }
        pl->cs_out = out;
        pl->cs_ws = fm_cuda_colsum_workspace(g->dtype, pl->cs_rows, pl->cs_cols, pl->inner_count);
    }
    return FM_OK;
}

/* cuBLASLt reads alpha and beta as doubles for f64/c128 scale types, else as floats */
static int scalars_are_double(const lt_plan *pl)
{
    return pl->scale_type == CUDA_R_64F || pl->scale_type == CUDA_C_64F;
}

/* ---- execute ---- */
/* One launch of the plan's inner batch; drop_word0: dropout's word for its first element (the
 * call's position plus the elements of the outer batches before it), drop_seed the key. */
static fm_status run_once(const lt_plan *pl, void *const *ptrs, cudaStream_t stream, void *ws, size_t ws_size,
                          uint64_t drop_word0, uint64_t drop_seed)
{
    const int wide = scalars_are_double(pl);
    const void *alpha = wide ? (const void *)pl->alpha_d : (const void *)pl->alpha_f;
    const void *beta = wide ? (const void *)pl->beta_d : (const void *)pl->beta_f;
    static const double zero[2] = {0, 0};
    if (!pl->c_in_gemm)
        beta = zero; /* all-zero bits read as 0 in every scale type */
    if (pl->alpha_vector)
        alpha = ptrs[FM_MATMUL_SCALE];
    cublasLtMatmulDesc_t desc = pl->desc;
    fm_status s;
    if (pl->needs_call_desc) {
        /* The epilogue's pointers live in the descriptor, and plans are shared between
         * threads: each thread keeps the descriptor of its last (plan, pointers) and
         * rebuilds it only when they change (a planned call with a fixed bias reuses it). */
        static _Thread_local struct {
            uint64_t serial;
            void *bias, *aux, *sa, *sb;
            cublasLtMatmulDescOpaque_t desc;
        } tl;
        void *bias = pl->lt_bias_slot >= 0 ? ptrs[pl->lt_bias_slot] : NULL;
        void *aux = ptrs[FM_MATMUL_AUX], *sa = ptrs[FM_MATMUL_A_SCALE], *sb = ptrs[FM_MATMUL_B_SCALE];
        desc = &tl.desc;
        if (tl.serial != pl->serial || tl.bias != bias || tl.aux != aux || tl.sa != sa || tl.sb != sb) {
            tl.serial = 0;
            if ((s = fm_lt_status(cublasLtMatmulDescInit(desc, pl->compute, pl->scale_type),
                                  "cublasLtMatmulDescInit")) != FM_OK ||
                (s = fm_lt_fill_desc(pl, NULL, desc, ptrs, pl->fused)) != FM_OK)
                return s;
            tl.serial = pl->serial, tl.bias = bias, tl.aux = aux, tl.sa = sa, tl.sb = sb;
        }
    }
    const void *c = pl->c_in_gemm ? ptrs[FM_MATMUL_C] : ptrs[FM_MATMUL_D];
    if (pl->g.m > 0 && pl->g.n > 0 && !pl->no_product) {
        s = fm_lt_status(cublasLtMatmul(pl->st->handle, desc, alpha, ptrs[FM_MATMUL_B], pl->lay_a,
                                        ptrs[FM_MATMUL_A], pl->lay_b, beta, c, pl->lay_c, ptrs[FM_MATMUL_D], pl->lay_d,
                                        &pl->algo, ws, pl->algo_ws, stream),
                         "cublasLtMatmul");
        if (s != FM_OK)
            return s;
    }
    if (pl->ew) {
        fm_cuda_ew_args a = pl->ew_args;
        a.d.ptr = ptrs[FM_MATMUL_D];
        a.c.ptr = ptrs[FM_MATMUL_C];
        a.bias.ptr = ptrs[FM_MATMUL_BIAS];
        a.scale.ptr = ptrs[FM_MATMUL_SCALE];
        a.aux.ptr = ptrs[FM_MATMUL_AUX];
        a.drop_word0 = drop_word0;
        a.drop_seed = drop_seed;
        if ((s = fm_cuda_ew_launch(pl->ew, &a, stream)) != FM_OK)
            return s;
    }
    if (pl->colsum) {
        fm_cuda_view x = pl->cs_x, out = pl->cs_out;
        x.ptr = ptrs[pl->colsum_src];
        out.ptr = ptrs[FM_MATMUL_BGRAD];
        if ((s = fm_cuda_colsum_launch(pl->colsum, pl->cs_rows, pl->cs_cols, pl->inner_count, x, out, ws, ws_size,
                                       stream)) != FM_OK)
            return s;
    }
    return FM_OK;
}

/* Every batch of the plan (the outer ones a loop here, in row-major order, so that outer batch o
 * starts at element o * inner_count * m * n of D), queued on stream with workspace ws; args:
 * dropout's position and seed. */
static fm_status run_all(const lt_plan *pl, void *const *ptrs, cudaStream_t stream, void *ws, size_t need,
                         const fm_exec_args *args)
{
    fm_status s = FM_OK;
    const uint64_t pos = (uint64_t)args->ints[0], seed = (uint64_t)args->ints[3];
    const uint64_t per_outer = (uint64_t)pl->inner_count * (uint64_t)pl->g.m * (uint64_t)pl->g.n;
    if (pl->outer_ndim == 0)
        return run_once(pl, ptrs, stream, ws, need, pos, seed);
    int64_t outer = 1;
    for (int i = 0; i < pl->outer_ndim; i++)
        outer *= pl->outer_shape[i];
    for (int64_t o = 0; o < outer; o++) {
        void *p[FM_MATMUL_NSLOTS];
        int64_t rem = o;
        int64_t off[FM_MATMUL_NSLOTS] = {0};
        for (int i = pl->outer_ndim - 1; i >= 0; i--) {
            int64_t idx = rem % pl->outer_shape[i];
            rem /= pl->outer_shape[i];
            for (int slot = 0; slot < FM_MATMUL_NSLOTS; slot++)
                off[slot] += idx * pl->outer_stride[slot][i];
        }
        for (int slot = 0; slot < FM_MATMUL_NSLOTS; slot++)
            p[slot] = ptrs[slot] ? (char *)ptrs[slot] + off[slot] * (int64_t)pl->slot_es[slot] : NULL;
        if ((s = run_once(pl, p, stream, ws, need, pos + (uint64_t)o * per_outer, seed)) != FM_OK)
            return s;
    }
    return FM_OK;
}

static fm_status cublaslt_run(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream_)
{
    const lt_plan *pl = plan->impl;
    cudaStream_t stream = (cudaStream_t)stream_;
    fm_status s = fm_cuda_use_device(pl->device);
    if (s != FM_OK)
        return s;
    if (pl->g.batch_count == 0) /* an empty batch: nothing to write (with no batch count cuBLASLt would run one) */
        return FM_OK;
    size_t need = pl->algo_ws > pl->cs_ws ? pl->algo_ws : pl->cs_ws;
    void *ws = NULL;
    fm_cuda_ws_lease lease = NULL;
    if (need && (s = fm_cuda_ws_acquire(pl->st->ws, pl->device, stream, need, &ws, &lease)) != FM_OK)
        return s;
    s = run_all(pl, ptrs, stream, ws, need, args);
    fm_cuda_ws_release(lease); /* the kernels using ws are queued */
    return s;
}
FM_NVTX_EXECUTE(cublaslt_execute, cublaslt_run)

/* ---- plan ---- */

/* cuBLASLt's types for the problem; fp8 inputs: their scales' alignment and the device's
 * compute capability. */
static fm_status plan_types(lt_plan *pl, const fm_problem *p, fm_dtype in_dt, int fp8)
{
    const fm_matmul_geom *g = &pl->g;
    if (!lt_types(g->dtype, pl->mp.compute == FM_COMPUTE_TF32, &pl->dtype, &pl->scale_type, &pl->compute))
        return fm_fail(FM_ERR_DTYPE, "matmul on cuda: dtype %s is not supported", fm_dtype_name(g->dtype));
    pl->a_type = pl->b_type = pl->dtype;
    if (fp8) {
        pl->a_type = in_dt == FM_F8E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
        pl->b_type = p->t[FM_MATMUL_B].dtype == FM_F8E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
        pl->compute = CUBLAS_COMPUTE_32F, pl->scale_type = CUDA_R_32F;
        pl->has_scales = (p->present >> FM_MATMUL_A_SCALE & 1) || (p->present >> FM_MATMUL_B_SCALE & 1);
        for (int i = FM_MATMUL_A_SCALE; i <= FM_MATMUL_B_SCALE; i++)
            if ((p->present >> i & 1) && p->align_log2[i] < 4) {
                /* cuBLASLt refused a 4-byte-aligned scale pointer at execute (H200, cuBLASLt 13.1) */
                return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul on cuda: %s must be 16-byte aligned (its own "
                               "allocation, not an offset into one); it is aligned to %d bytes", p->slot_names[i],
                               1 << p->align_log2[i]);
            }
        int cc = 0;
        if (cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, pl->device) != cudaSuccess || cc < 9) {
            int minor = 0;
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, pl->device);
            (void)cudaGetLastError();
            if (!(cc == 8 && minor >= 9))
                return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul on cuda: fp8 needs compute capability 8.9 or newer, "
                               "cuda:%d has %d.%d", pl->device, cc, minor);
        }
    }
    return FM_OK;
}

/* Sizes, scalars and the batch split; whether a product runs; a, b, d (and c) as cuBLASLt can
 * read them. */
static fm_status plan_operands(lt_plan *pl, const fm_problem *p, int fp8)
{
    const fm_matmul_geom *g = &pl->g;
    if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX)
        return fm_fail(FM_ERR_TOO_LARGE, "matmul on cuda: %lldx%lldx%lld exceeds cuBLASLt's 32-bit dimension range",
                       (long long)g->m, (long long)g->n, (long long)g->k);
    for (int i = 0; i < 2; i++) {
        pl->alpha_d[i] = pl->mp.alpha[i], pl->beta_d[i] = pl->mp.beta[i];
        pl->alpha_f[i] = (float)pl->mp.alpha[i], pl->beta_f[i] = (float)pl->mp.beta[i];
    }
    fm_lt_split_batch(p, pl);
    if (pl->inner_count > INT32_MAX)
        return fm_fail(FM_ERR_TOO_LARGE, "matmul on cuda: batch of %lld exceeds cuBLASLt's range",
                       (long long)pl->inner_count);

    /* alpha as cuBLASLt would see it: a double that rounds to 0 in a float scale type is 0 */
    const int alpha_zero = scalars_are_double(pl) ? (pl->alpha_d[0] == 0.0 && pl->alpha_d[1] == 0.0)
                                                  : (pl->alpha_f[0] == 0.0f && pl->alpha_f[1] == 0.0f);
    pl->no_product = !fp8 && (alpha_zero || g->k == 0);
    pl->la = fm_lt_operand_for(g->k, g->n, g->row_stride[FM_MATMUL_B], g->col_stride[FM_MATMUL_B]);
    pl->lb = fm_lt_operand_for(g->m, g->k, g->row_stride[FM_MATMUL_A], g->col_stride[FM_MATMUL_A]);
    for (int i = 0; i < 2 && !pl->no_product; i++) { /* no product: a and b are never read */
        const lt_operand *o = i ? &pl->la : &pl->lb;
        if (!o->ok) {
            int slot = i ? FM_MATMUL_B : FM_MATMUL_A;
            return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul on cuda: %s has strides (%lld, %lld) elements; cuBLASLt "
                           "needs one unit stride and the other at least the extent (make it contiguous first)",
                           p->slot_names[slot], (long long)g->row_stride[slot], (long long)g->col_stride[slot]);
        }
    }
    if (fp8 && !(pl->la.op == CUBLAS_OP_T && pl->lb.op == CUBLAS_OP_N))
        return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul on cuda: fp8 needs a row-major (unit column stride) and b "
                       "column-major (unit row stride), the layout of x @ w.T for a row-major weight w of shape "
                       "(N, K): cuBLASLt's fp8 kernels take only that form (got a strides (%lld, %lld), b strides "
                       "(%lld, %lld))",
                       (long long)g->row_stride[FM_MATMUL_A], (long long)g->col_stride[FM_MATMUL_A],
                       (long long)g->row_stride[FM_MATMUL_B], (long long)g->col_stride[FM_MATMUL_B]);
    if (!fm_lt_row_major_like_d(g, FM_MATMUL_D))
        return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul on cuda: d has strides (%lld, %lld); expected a unit column "
                       "stride and a row stride >= N", (long long)g->row_stride[FM_MATMUL_D],
                       (long long)g->col_stride[FM_MATMUL_D]);
    int has_c = (p->present >> FM_MATMUL_C) & 1;
    /* C joins the GEMM when cuBLASLt can read it like D (a broadcast C is added by the kernel) */
    pl->c_in_gemm = has_c && fm_lt_row_major_like_d(g, FM_MATMUL_C) && !(pl->mp.epilogue & FM_EPILOGUE_SCALE) &&
                    (pl->inner_count == 1 || pl->inner_stride[FM_MATMUL_C] != 0) && !pl->no_product;
    return FM_OK;
}

/* Fused or split: what cuBLASLt's epilogue can take, what gpu_passes / gpu_algo ask for, and
 * the refusals of choices that do not apply. */
static fm_status plan_fusion(lt_plan *pl, const fm_problem *p)
{
    const fm_matmul_geom *g = &pl->g;
    int has_c = (p->present >> FM_MATMUL_C) & 1;
    int can_fuse = fm_lt_epilogue_for(pl, &pl->lt_epi, &pl->lt_bias_slot) && (pl->c_in_gemm || !has_c) &&
                   !pl->no_product;
    if (pl->no_product && (pl->mp.gpu_passes == 1 || pl->mp.gpu_algo > 0)) {
        /* autotune's candidates: one plan serves, there is no cuBLASLt algorithm to choose */
        return fm_fail(FM_ERR_NOT_APPLICABLE, "matmul on cuda: with %s no GEMM runs (one kernel writes "
                       "act(beta*C + bias)): gpu_passes=1 and gpu_algo > 0 do not apply",
                       g->k == 0 ? "k = 0" : "alpha = 0");
    }
    if ((p->present & (1u << FM_MATMUL_AUX)) && (pl->mp.epilogue & FM_EPILOGUE_BACKWARD_)) {
        const fm_tensor *aux = &p->t[FM_MATMUL_AUX];
        for (int i = 0; i + 2 < aux->ndim; i++)
            if (aux->strides[i] == 0 && aux->shape[i] > 1) {
                /* allowed since the CPU path reads it; not yet run through cuBLASLt's aux batch
                 * stride or the generated kernel on a GPU, so refused rather than guessed */
                return fm_fail(FM_ERR_NOT_APPLICABLE, "matmul on cuda: the relu_aux/gelu_aux input repeats over "
                               "batch axis %d (stride 0); pass it with its own memory per batch (e.g. .contiguous())",
                               i);
            }
    }
    if ((g->m == 0 || g->n == 0 || g->batch_count == 0) && pl->mp.gpu_algo > 0) {
        /* an empty result: no GEMM runs, so every index would be the same plan */
        return fm_fail(FM_ERR_NOT_APPLICABLE, "matmul on cuda: the result is empty (%lldx%lld, batch %lld): "
                       "gpu_algo > 0 does not apply", (long long)g->m, (long long)g->n, (long long)g->batch_count);
    }
    if (pl->mp.gpu_passes == 1 && !can_fuse)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "cuBLASLt cannot fuse this chain/layout");
    /* f64/c128 epilogues inside cuBLASLt ran 2x slower than GEMM + kernel on the H200
     * (8192^3 bias+relu: 42.3 ms fused, 20.3 ms unfused): split by default there;
     * autotune still times both. */
    int wide = g->dtype == FM_F64 || g->dtype == FM_C128;
    int prefer_split = pl->mp.gpu_passes == 0 && wide && pl->mp.epilogue != 0;
    pl->fused = can_fuse && pl->mp.gpu_passes != 2 && !prefer_split;
    pl->alpha_vector = pl->fused && (pl->mp.epilogue & FM_EPILOGUE_SCALE);
    if (!pl->fused)
        pl->lt_epi = CUBLASLT_EPILOGUE_DEFAULT, pl->lt_bias_slot = -1;
    return FM_OK;
}

/* The plan's matmul descriptor, made anew (fused or not, as pl->fused says). */
static fm_status make_desc(lt_plan *pl, const fm_problem *p)
{
    if (pl->desc)
        cublasLtMatmulDescDestroy(pl->desc);
    pl->desc = NULL;
    fm_status s = fm_lt_status(cublasLtMatmulDescCreate(&pl->desc, pl->compute, pl->scale_type),
                               "cublasLtMatmulDescCreate");
    return s != FM_OK ? s : fm_lt_fill_desc(pl, p, pl->desc, NULL, pl->fused);
}

/* The GEMM's descriptor, layouts and algorithm (only where a product runs). A fused chain that
 * cuBLASLt refuses falls back to GEMM + kernel when gpu_passes leaves the choice open. */
static fm_status plan_gemm(fm_context *ctx, lt_plan *pl, const fm_problem *p)
{
    const fm_matmul_geom *g = &pl->g;
    fm_status s;
    if ((s = make_desc(pl, p)) != FM_OK)
        return s;
    if ((s = fm_lt_make_layout(&pl->lay_a, pl->b_type, pl->la.op == CUBLAS_OP_N ? g->n : g->k,
                               pl->la.op == CUBLAS_OP_N ? g->k : g->n, pl->la.ld, pl->inner_count,
                               pl->inner_stride[FM_MATMUL_B])) != FM_OK ||
        (s = fm_lt_make_layout(&pl->lay_b, pl->a_type, pl->lb.op == CUBLAS_OP_N ? g->k : g->m,
                               pl->lb.op == CUBLAS_OP_N ? g->m : g->k, pl->lb.ld, pl->inner_count,
                               pl->inner_stride[FM_MATMUL_A])) != FM_OK ||
        (s = fm_lt_make_layout(&pl->lay_d, pl->dtype, (uint64_t)g->n, (uint64_t)g->m, fm_lt_d_ld(g, FM_MATMUL_D),
                               pl->inner_count, pl->inner_stride[FM_MATMUL_D])) != FM_OK)
        return s;
    if (pl->c_in_gemm) {
        if ((s = fm_lt_make_layout(&pl->lay_c, pl->dtype, (uint64_t)g->n, (uint64_t)g->m, fm_lt_d_ld(g, FM_MATMUL_C),
                                   pl->inner_count, pl->inner_stride[FM_MATMUL_C])) != FM_OK)
            return s;
    } else {
        pl->lay_c = pl->lay_d;
    }
    if (g->m > 0 && g->n > 0) {
        s = fm_lt_choose_algo(pl, p);
        if (s == FM_ERR_NOT_APPLICABLE && pl->fused && pl->mp.gpu_passes == 0 && pl->algo_count == 0) {
            /* cuBLASLt refused the fused chain (e.g. BGRADB on Hopper): split it (not when only
             * gpu_algo was past the fused list: the split list's index names another kernel) */
            fm_log_plan(ctx, "cublaslt: fused chain refused (%s); using GEMM + kernel", fm_last_error());
            pl->fused = 0, pl->alpha_vector = 0, pl->lt_epi = CUBLASLT_EPILOGUE_DEFAULT, pl->lt_bias_slot = -1;
            if ((s = make_desc(pl, p)) != FM_OK)
                return s;
            s = fm_lt_choose_algo(pl, p);
        }
        if (s != FM_OK)
            return s;
    }
    return FM_OK;
}

/* The plan's describe() line. */
static void describe_plan(const lt_plan *pl, fm_dtype in_dt, int fp8, fm_plan *out)
{
    const fm_matmul_geom *g = &pl->g;
    char epi[160];
    fm_epilogue_format(pl->mp.epilogue, epi, sizeof epi);
    int passes = !pl->no_product + (pl->ew != NULL) + (pl->colsum != NULL);
    char batch[64] = "";
    if (g->batch_count > 1)
        snprintf(batch, sizeof batch, " batch=%lld%s", (long long)g->batch_count,
                 pl->outer_ndim ? "(host-looped)" : "");
    int algo_id = -1, tile = -1; /* which cuBLASLt kernel: tells wider-search picks apart */
    size_t w;
    if (pl->algo_count > 0) {
        cublasLtMatmulAlgoConfigGetAttribute(&pl->algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof algo_id, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&pl->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    }
    snprintf(out->describe, sizeof out->describe,
             "matmul cuda:%d/cublaslt %s%s%s%s %lldx%lldx%lld%.40s epilogue=%.90s passes=%d algo=%d/%d(id %d tile %d) "
             "ws=%zu%s",
             pl->device, fp8 ? fm_dtype_name(in_dt) : "", fp8 ? "->" : "", fm_dtype_name(g->dtype),
             pl->mp.compute == FM_COMPUTE_TF32 ? "(tf32)" : "", (long long)g->m,
             (long long)g->n, (long long)g->k, batch, epi, passes, pl->algo_index, pl->algo_count, algo_id, tile,
             pl->algo_ws, pl->no_product ? " no_product" : "");
}

static fm_status cublaslt_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    lt_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory while planning");
    pl->st = state;
    pl->device = p->exec_device.id;
    pl->mp = p->u.matmul;
    fm_matmul_geom_from_problem(p, &pl->g);
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) /* aux masks are u8, fp8 inputs 1 byte, scales f32/f64 */
        pl->slot_es[i] = (p->present >> i & 1) ? fm_dtype_size(p->t[i].dtype) : 0;
    const fm_dtype in_dt = p->t[FM_MATMUL_A].dtype;
    const int fp8 = in_dt == FM_F8E4M3 || in_dt == FM_F8E5M2;
    fm_status s = FM_OK;
    if ((s = plan_types(pl, p, in_dt, fp8)) != FM_OK || (s = plan_operands(pl, p, fp8)) != FM_OK ||
        (s = plan_fusion(pl, p)) != FM_OK)
        goto fail;
    /* descriptors (none without a product: a, b and their layouts are never used) */
    if (!pl->no_product && (s = plan_gemm(ctx, pl, p)) != FM_OK)
        goto fail;
    if (!pl->fused && (s = plan_second_pass(fm_context_settings(ctx), pl)) != FM_OK)
        goto fail;
    pl->needs_call_desc = fm_lt_needs_call_desc(pl);
    static atomic_uint_fast64_t next_serial = 1;
    pl->serial = atomic_fetch_add(&next_serial, 1);

    out->impl = pl;
    out->execute = cublaslt_execute;
    out->destroy_impl = cublaslt_destroy;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        if (p->present & (1u << i))
            out->required_align[i] = (size_t)1 << p->align_log2[i];
    describe_plan(pl, in_dt, fp8, out);
    return FM_OK;
fail:
    cublaslt_destroy(pl);
    return s;
}

/* Wisdom salt: a tuned gpu_algo indexes cuBLASLt's candidate lists, which depend on the
 * cuBLASLt build, the GPU and the workspace limit (read when planning, not per call). */
static void cublaslt_wisdom_salt(const fm_context *ctx, void *state, const fm_problem *p, char *buf, size_t n)
{
    (void)ctx;
    int dev = p->exec_device.id, major = 0, minor = 0, sms = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        cudaGetLastError(); /* not sticky: clear it; the salt then says what was read */
    snprintf(buf, n, "cublasLt %zu sm_%d%d %d SMs workspace %zu", cublasLtGetVersion(), major, minor, sms,
             state ? ((const lt_state *)state)->limit : (size_t)0);
}

/* Autotune's candidates: the backend's algorithms with the chain fused (gpu_algo 0, 1, ...: the
 * heuristic's list, then the wider search), then the same for the plain GEMM followed by the
 * separate epilogue kernel: a fused path that loses (seen: torch's fused fp64 bias+relu, 1.7x
 * slower than unfused) is not chosen, and the split path gets the fastest GEMM (the wider search
 * holds an fp64 kernel 2-7% faster than the heuristic's first choice in long loops at the H200's
 * power cap). The lists are numbered without gaps: the first index that does not plan ends its
 * group. */
static int cublaslt_tune_candidates(const fm_context *ctx, void *state, const fm_problem *p, fm_problem *cand, int *group,
                              int max)
{
    (void)ctx, (void)state;
    enum { ALGOS = 64 };
    int n = 0;
    for (int passes = 1; passes <= 2; passes++)
        for (int algo = 0; algo < ALGOS && n < max; algo++) {
            cand[n] = *p;
            cand[n].u.matmul.gpu_passes = passes;
            cand[n].u.matmul.gpu_algo = algo;
            group[n++] = passes;
        }
    return n;
}

const fm_backend fm_backend_cublaslt_matmul = {
    .name = "cublaslt",
    .device = FM_DEVICE_CUDA,
    .ops = 1u << FM_OP_MATMUL,
    .priority = 100,
    .probe = cublaslt_probe,
    .release = cublaslt_release,
    .plan = cublaslt_plan,
    .wisdom_salt = cublaslt_wisdom_salt,
    .tune_candidates = cublaslt_tune_candidates,
};
