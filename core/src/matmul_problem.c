/* matmul_problem.c : validate matmul operands into a normalised fm_problem and
 * run the planner. Every operand is expanded to the full batch rank with stride 0
 * on broadcast dimensions, so backends see one uniform layout. */
#include "context.h"
#include "epilogue.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const slot_names[FM_MATMUL_NSLOTS] = {"a", "b", "c", "bias", "d", "aux", "bgrad", "scale",
                                                          "a_scale", "b_scale"};

static int is_fp8(fm_dtype t) { return t == FM_F8E4M3 || t == FM_F8E5M2; }

void fm_matmul_options_init(fm_matmul_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->alpha[0] = 1.0;
}

static void shape_str(const fm_tensor *t, char *buf, size_t n)
{
    size_t u = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < t->ndim && u < n; i++)
        u += (size_t)snprintf(buf + u, n - u, "%lld%s", (long long)t->shape[i], i + 1 < t->ndim ? ", " : "");
    if (u < n)
        snprintf(buf + u, n - u, "%s)", t->ndim == 1 ? "," : "");
}

static fm_status check_tensor(const char *name, const fm_tensor *t, int min_ndim)
{
    if (t->ndim < min_ndim || t->ndim > FM_MAX_NDIM)
        return fm_fail(FM_ERR_SHAPE, "matmul: %s has ndim = %d, expected %d <= ndim <= %d%s", name, t->ndim,
                       min_ndim, FM_MAX_NDIM,
                       min_ndim == 2 ? " (vectors are promoted to matrices by the caller, as NumPy does)" : "");
    if (fm_dtype_size(t->dtype) == 0)
        return fm_fail(FM_ERR_DTYPE, "matmul: %s has an invalid dtype (%d)", name, (int)t->dtype);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return fm_fail(FM_ERR_SHAPE, "matmul: %s has shape[%d] = %lld, expected >= 0", name, i,
                           (long long)t->shape[i]);
    return fm_tensor_check_range("matmul", name, t);
}

fm_status fm_matmul_output_shape(const fm_tensor *a, const fm_tensor *b, int *ndim, int64_t *shape)
{
    if (!a || !b || !ndim || !shape)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: a, b, ndim and shape must not be NULL");
    fm_status s;
    if ((s = check_tensor("a", a, 2)) != FM_OK || (s = check_tensor("b", b, 2)) != FM_OK)
        return s;
    int64_t k1 = a->shape[a->ndim - 1], k2 = b->shape[b->ndim - 2];
    if (k1 != k2) {
        char sa[128], sb[128];
        shape_str(a, sa, sizeof sa);
        shape_str(b, sb, sizeof sb);
        return fm_fail(FM_ERR_SHAPE, "matmul: a has K = %lld columns but b has %lld rows (a is %s, b is %s)",
                       (long long)k1, (long long)k2, sa, sb);
    }
    int bn = (a->ndim > b->ndim ? a->ndim : b->ndim) - 2;
    for (int i = 0; i < bn; i++) { /* right-aligned batch dims */
        int ia = a->ndim - 3 - i, ib = b->ndim - 3 - i;
        int64_t ea = ia >= 0 ? a->shape[ia] : 1, eb = ib >= 0 ? b->shape[ib] : 1;
        if (ea != eb && ea != 1 && eb != 1)
            return fm_fail(FM_ERR_SHAPE,
                           "matmul: batch dimensions do not broadcast: a has %lld and b has %lld at batch axis %d "
                           "from the right",
                           (long long)ea, (long long)eb, i);
        shape[bn - 1 - i] = ea == 1 ? eb : ea;
    }
    shape[bn] = a->shape[a->ndim - 2];
    shape[bn + 1] = b->shape[b->ndim - 1];
    *ndim = bn + 2;
    return FM_OK;
}

/* Expand t to rank `ndim` against `target` shape (right-aligned, stride 0 where
 * broadcast or extent 1). `skip_rows` lets bias of shape (..., N) fill the M axis. */
static fm_status expand(const char *name, const fm_tensor *t, int ndim, const int64_t *target, fm_tensor *out,
                        int bias_style)
{
    if (t->ndim > ndim) { /* before the axes: which axis would "not broadcast" is meaningless then */
        char st[128];
        shape_str(t, st, sizeof st);
        return fm_fail(FM_ERR_SHAPE, "matmul: %s of shape %s has more dimensions than the output (%d)", name, st,
                       ndim);
    }
    fm_tensor e = *t;
    e.data = NULL;
    e.ndim = ndim;
    int src = t->ndim - 1;
    for (int i = ndim - 1; i >= 0; i--) {
        int64_t ext = 1, str = 0;
        int row_axis = (i == ndim - 2);
        if (bias_style && row_axis && t->ndim < ndim) {
            /* bias (..., N): no row axis in the source; it broadcasts over rows */
        } else if (src >= 0) {
            ext = t->shape[src];
            str = t->strides[src];
            src--;
        }
        if (ext != target[i] && ext != 1) {
            char st[128];
            shape_str(t, st, sizeof st);
            if (bias_style && i == ndim - 1)
                return fm_fail(FM_ERR_SHAPE, "matmul: %s has length %lld, expected N = %lld", name, (long long)ext,
                               (long long)target[i]);
            return fm_fail(FM_ERR_SHAPE, "matmul: %s of shape %s does not broadcast to the output: axis %d has %lld, "
                           "expected %lld or 1", name, st, i, (long long)ext, (long long)target[i]);
        }
        if (bias_style && i == ndim - 1 && ext != target[i])
            return fm_fail(FM_ERR_SHAPE, "matmul: %s has length %lld, expected N = %lld", name, (long long)ext,
                           (long long)target[i]);
        e.shape[i] = target[i];
        e.strides[i] = (ext == 1 || target[i] <= 1) ? 0 : str;
    }
    if (src >= 0) {
        char st[128];
        shape_str(t, st, sizeof st);
        return fm_fail(FM_ERR_SHAPE, "matmul: %s of shape %s has more dimensions than the output (%d)", name, st,
                       ndim);
    }
    *out = e;
    return FM_OK;
}

static fm_status exact_shape(const char *name, const fm_tensor *t, int ndim, const int64_t *shape)
{
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (ok)
        return FM_OK;
    char got[128], want[128];
    fm_tensor w = {.ndim = ndim};
    memcpy(w.shape, shape, sizeof(int64_t) * (size_t)ndim);
    shape_str(t, got, sizeof got);
    shape_str(&w, want, sizeof want);
    return fm_fail(FM_ERR_SHAPE, "matmul: %s has shape %s, expected %s", name, got, want);
}

/* An output whose elements share memory (a zero stride, or strides that
 * interleave) would be written twice: reject it. Sort axes by |stride| and require
 * each stride to step past everything the smaller axes span. */

static void device_str(fm_device d, char *buf, size_t n)
{
    if (d.type == FM_DEVICE_CUDA)
        snprintf(buf, n, "cuda:%d", d.id);
    else
        snprintf(buf, n, "cpu");
}

/* Build the problem; shared by plan, stateless and autotune entry points. */
static fm_status build_problem_fields(fm_context *ctx, const fm_tensor *const ts[FM_MATMUL_NSLOTS],
                                      const fm_matmul_options *opts, fm_problem *p)
{
    fm_status s;
    if (!ctx)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: ctx is NULL");
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        if (!ts[i] && (i == FM_MATMUL_A || i == FM_MATMUL_B || i == FM_MATMUL_D))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: %s is NULL, expected a tensor descriptor",
                           slot_names[i]);
    fm_matmul_options defaults;
    if (!opts) {
        fm_matmul_options_init(&defaults);
        opts = &defaults;
    }
    unsigned epi = opts->epilogue;
    if ((s = fm_epilogue_validate(epi)) != FM_OK)
        return fm_fail(s, "matmul: %s", fm_last_error());
    if (opts->execution < FM_EXECUTION_AUTO || opts->execution > FM_EXECUTION_CUDA)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: execution = %d, expected auto (0), cpu (1) or cuda (2)",
                       opts->execution);
    if (opts->cpu_strategy < FM_CPU_STRATEGY_AUTO || opts->cpu_strategy > FM_CPU_STRATEGY_KERNEL)
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "matmul: cpu_strategy = %d, expected 0 (auto), 1 (tiles), 2 (blas_threads) or 3 (kernel)",
                       opts->cpu_strategy);
    if (opts->num_threads < 0 || opts->panel_rows < 0 || opts->device_id < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "matmul: num_threads = %d, panel_rows = %d, device_id = %d; expected values >= 0",
                       opts->num_threads, opts->panel_rows, opts->device_id);
    if (opts->num_threads > FM_MAX_THREADS)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: num_threads = %d, expected 0 (the library setting) to %d",
                       opts->num_threads, FM_MAX_THREADS);
    for (int i = 0; i < (int)(sizeof opts->reserved / sizeof opts->reserved[0]); i++)
        if (opts->reserved[i] != 0) /* a later version may give them a meaning: refuse garbage now */
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: options.reserved[%d] = %d, expected 0 "
                           "(fm_matmul_options_init sets it)", i, (int)opts->reserved[i]);

    const fm_tensor *a = ts[FM_MATMUL_A], *b = ts[FM_MATMUL_B], *d = ts[FM_MATMUL_D];
    if ((s = check_tensor("d", d, 2)) != FM_OK)
        return s;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        if (ts[i] && i != FM_MATMUL_D && (s = check_tensor(slot_names[i], ts[i], (i == FM_MATMUL_BIAS || i == FM_MATMUL_BGRAD || i == FM_MATMUL_SCALE) ? 1 : (i == FM_MATMUL_C || i >= FM_MATMUL_A_SCALE ? 0 : 2))) != FM_OK)
            return s;

    /* dtypes: one dtype for a, b, c, bias and d; fp8 a and b produce f16, bf16 or f32 d */
    fm_dtype dt = a->dtype;
    const int fp8 = is_fp8(a->dtype);
    if (fp8) {
        dt = d->dtype;
        if (!is_fp8(b->dtype))
            return fm_fail(FM_ERR_DTYPE, "matmul: a is %s but b is %s; fp8 a needs fp8 b", fm_dtype_name(a->dtype),
                           fm_dtype_name(b->dtype));
        if (a->dtype == FM_F8E5M2 && b->dtype == FM_F8E5M2)
            return fm_fail(FM_ERR_DTYPE, "matmul: a and b are both f8e5m2; cuBLASLt takes e4m3 x e4m3, e4m3 x e5m2 "
                           "or e5m2 x e4m3");
        if (!(dt == FM_F16 || dt == FM_BF16 || dt == FM_F32))
            return fm_fail(FM_ERR_DTYPE, "matmul: fp8 inputs give d of dtype f16, bf16 or f32, not %s",
                           fm_dtype_name(dt));
        if (epi & (FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB))
            return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul: bgrada/bgradb (sums of the fp8 inputs) are not supported");
    }
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
        if (!ts[i] || i == FM_MATMUL_AUX || i == FM_MATMUL_SCALE || i >= FM_MATMUL_A_SCALE ||
            (fp8 && (i == FM_MATMUL_A || i == FM_MATMUL_B)))
            continue;
        if (ts[i]->dtype != dt)
            return fm_fail(FM_ERR_DTYPE, "matmul: dtype mismatch: %s is %s but %s is %s; all operands must share one dtype",
                           fp8 ? "d" : "a", fm_dtype_name(dt), slot_names[i], fm_dtype_name(ts[i]->dtype));
    }
    for (int i = FM_MATMUL_A_SCALE; i <= FM_MATMUL_B_SCALE; i++) {
        if (!ts[i])
            continue;
        if (!fp8)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: %s is given but a is %s; scale factors go with fp8 inputs",
                           slot_names[i], fm_dtype_name(a->dtype));
        if (ts[i]->dtype != FM_F32 || fm_tensor_numel(ts[i]) != 1)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: %s must be one f32 value (shape () or (1,)), got %s with "
                           "%lld elements", slot_names[i], fm_dtype_name(ts[i]->dtype), (long long)fm_tensor_numel(ts[i]));
    }
    if (!(dt == FM_F16 || dt == FM_BF16 || dt == FM_F32 || dt == FM_F64 || dt == FM_C64 || dt == FM_C128))
        return fm_fail(FM_ERR_DTYPE, "matmul: dtype %s is not supported; expected f16, bf16, f32, f64, c64 or c128",
                       fm_dtype_name(dt));
    if (fm_dtype_is_complex(dt) && (epi & (FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_BACKWARD_ | FM_EPILOGUE_SCALE))) {
        char en[160];
        fm_epilogue_format(epi, en, sizeof en);
        return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul: epilogue %s is not defined for complex dtype %s (complex "
                       "data takes bias, bgrada and bgradb only)", en, fm_dtype_name(dt));
    }
    if ((epi & FM_EPILOGUE_CLAMP) && !(opts->clamp[0] <= opts->clamp[1]))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: clamp = (%g, %g), expected lo <= hi (and no NaN)",
                       opts->clamp[0], opts->clamp[1]);
    if (opts->compute != FM_COMPUTE_DEFAULT && opts->compute != FM_COMPUTE_TF32)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: compute = %d, expected 0 (default) or 1 (tf32)", opts->compute);
    if (opts->compute == FM_COMPUTE_TF32 && dt != FM_F32)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: compute='tf32' applies to f32 data, not %s", fm_dtype_name(dt));
    if (opts->gpu_algo < 0 || opts->gpu_algo > 63 || opts->gpu_passes < 0 || opts->gpu_passes > 2)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: gpu_algo = %d, gpu_passes = %d; expected 0..63 and 0..2",
                       opts->gpu_algo, opts->gpu_passes);

    /* shapes */
    int ndim;
    int64_t shape[FM_MAX_NDIM + 2];
    if ((s = fm_matmul_output_shape(a, b, &ndim, shape)) != FM_OK)
        return s;
    if (ndim > FM_MAX_NDIM)
        return fm_fail(FM_ERR_SHAPE, "matmul: output would have %d dimensions, at most %d", ndim, FM_MAX_NDIM);
    if ((s = exact_shape("d", d, ndim, shape)) != FM_OK)
        return s;
    int64_t m = shape[ndim - 2], n = shape[ndim - 1], k = a->shape[a->ndim - 1];
    /* aux is written by the forward *_aux chains; drelu/dgelu read it (an input may repeat,
     * e.g. one mask broadcast over the batch) */
    if ((s = fm_tensor_check_distinct("matmul", "d", d)) != FM_OK ||
        (ts[FM_MATMUL_AUX] && (epi & FM_EPILOGUE_AUX) &&
         (s = fm_tensor_check_distinct("matmul", "aux", ts[FM_MATMUL_AUX])) != FM_OK))
        return s;

    if (!!(epi & FM_EPILOGUE_BIAS) != !!ts[FM_MATMUL_BIAS])
        return fm_fail(FM_ERR_INVALID_ARGUMENT, ts[FM_MATMUL_BIAS]
                           ? "matmul: bias was given but the epilogue has no bias; use e.g. 'bias' or 'bias+relu'"
                           : "matmul: the epilogue adds a bias but bias is NULL; expected a tensor of shape (N,)");
    if (fm_epilogue_uses_aux(epi) != !!ts[FM_MATMUL_AUX])
        return fm_fail(FM_ERR_INVALID_ARGUMENT, ts[FM_MATMUL_AUX]
                           ? "matmul: aux was given but the epilogue uses no aux; use e.g. 'relu+aux' or 'drelu'"
                           : (epi & FM_EPILOGUE_BACKWARD_) ? "matmul: drelu/dgelu read aux (the forward pass's mask or "
                                                             "activation input) but aux is NULL"
                                                           : "matmul: the epilogue stores aux but aux is NULL");
    if (!!(epi & FM_EPILOGUE_ANY_BGRAD_) != !!ts[FM_MATMUL_BGRAD])
        return fm_fail(FM_ERR_INVALID_ARGUMENT, ts[FM_MATMUL_BGRAD]
                           ? "matmul: bgrad was given but the epilogue computes no bias gradient"
                           : "matmul: the epilogue computes a bias gradient but bgrad is NULL");
    if (!!(epi & FM_EPILOGUE_SCALE) != !!ts[FM_MATMUL_SCALE])
        return fm_fail(FM_ERR_INVALID_ARGUMENT, ts[FM_MATMUL_SCALE]
                           ? "matmul: scale was given but the epilogue has no 'scale'"
                           : "matmul: the epilogue has 'scale' but scale is NULL; expected a vector of length N");

    memset(p, 0, sizeof *p);
    p->op = FM_OP_MATMUL;
    p->nslots = FM_MATMUL_NSLOTS;
    p->output_mask = (1u << FM_MATMUL_D) | (1u << FM_MATMUL_BGRAD) |
                     ((epi & FM_EPILOGUE_AUX) ? (1u << FM_MATMUL_AUX) : 0); /* drelu/dgelu read aux */
    for (int i = 0; i < FM_MAX_SLOTS; i++)
        p->inplace_partner[i] = -1;
    p->inplace_partner[FM_MATMUL_D] = FM_MATMUL_C;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        p->slot_names[i] = slot_names[i];

    int64_t a_target[FM_MAX_NDIM], b_target[FM_MAX_NDIM], bias_target[FM_MAX_NDIM];
    memcpy(a_target, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(b_target, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(bias_target, shape, sizeof(int64_t) * (size_t)ndim);
    a_target[ndim - 1] = k;
    b_target[ndim - 2] = k;
    bias_target[ndim - 2] = 1;
    if ((s = expand("a", a, ndim, a_target, &p->t[FM_MATMUL_A], 0)) != FM_OK ||
        (s = expand("b", b, ndim, b_target, &p->t[FM_MATMUL_B], 0)) != FM_OK ||
        (s = expand("d", d, ndim, shape, &p->t[FM_MATMUL_D], 0)) != FM_OK)
        return s;
    if (ts[FM_MATMUL_C] && (s = expand("c", ts[FM_MATMUL_C], ndim, shape, &p->t[FM_MATMUL_C], 0)) != FM_OK)
        return s;
    if (ts[FM_MATMUL_BIAS]) {
        const fm_tensor *bias = ts[FM_MATMUL_BIAS];
        if (bias->ndim == ndim && bias->shape[ndim - 2] != 1)
            return fm_fail(FM_ERR_SHAPE, "matmul: bias has %lld rows; expected shape (N,), (batch..., N) or "
                           "(batch..., 1, N)", (long long)bias->shape[ndim - 2]);
        if ((s = expand("bias", bias, ndim, bias_target, &p->t[FM_MATMUL_BIAS], 1)) != FM_OK)
            return s;
    }
    if (ts[FM_MATMUL_AUX]) {
        const fm_tensor *aux = ts[FM_MATMUL_AUX];
        int64_t aux_shape[FM_MAX_NDIM];
        memcpy(aux_shape, shape, sizeof(int64_t) * (size_t)ndim);
        if (fm_epilogue_aux_is_mask(epi)) {
            aux_shape[ndim - 1] = fm_relu_mask_row_bytes(n);
            if (aux->dtype != FM_U8)
                return fm_fail(FM_ERR_DTYPE, "matmul: relu aux (bit mask) has dtype %s, expected u8",
                               fm_dtype_name(aux->dtype));
        } else if (aux->dtype != dt) {
            return fm_fail(FM_ERR_DTYPE, "matmul: aux (activation input) has dtype %s, expected %s like d",
                           fm_dtype_name(aux->dtype), fm_dtype_name(dt));
        }
        if ((s = exact_shape("aux", aux, ndim, aux_shape)) != FM_OK)
            return s;
        if (aux->strides[ndim - 1] != 1 && aux_shape[ndim - 1] > 1)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: aux has column stride %lld, expected 1",
                           (long long)aux->strides[ndim - 1]);
        if (fm_epilogue_aux_is_mask(epi) && m > 1 && aux_shape[ndim - 1] > 0 && aux->strides[ndim - 2] != aux_shape[ndim - 1])
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: relu aux rows must be contiguous (row stride %lld, expected %lld)",
                           (long long)aux->strides[ndim - 2], (long long)aux_shape[ndim - 1]);
        if (m > 1 && aux->strides[ndim - 2] < aux_shape[ndim - 1])
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: aux has row stride %lld, expected >= %lld",
                           (long long)aux->strides[ndim - 2], (long long)aux_shape[ndim - 1]);
        if ((s = expand("aux", aux, ndim, aux_shape, &p->t[FM_MATMUL_AUX], 0)) != FM_OK)
            return s;
    }

    if (ts[FM_MATMUL_SCALE]) {
        const fm_tensor *sc = ts[FM_MATMUL_SCALE];
        fm_dtype want = dt == FM_F64 ? FM_F64 : FM_F32;
        if (sc->dtype != want)
            return fm_fail(FM_ERR_DTYPE, "matmul: scale has dtype %s, expected %s for %s data", fm_dtype_name(sc->dtype),
                           fm_dtype_name(want), fm_dtype_name(dt));
        if (sc->ndim == ndim && sc->shape[ndim - 2] != 1)
            return fm_fail(FM_ERR_SHAPE, "matmul: scale has %lld rows; expected shape (N,) or (batch..., N)",
                           (long long)sc->shape[ndim - 2]);
        if ((s = expand("scale", sc, ndim, bias_target, &p->t[FM_MATMUL_SCALE], 1)) != FM_OK)
            return s;
    }
    if (ts[FM_MATMUL_BGRAD]) {
        /* (batch..., L): one gradient per batch entry, L = M for bgrada, else N. */
        const fm_tensor *bg = ts[FM_MATMUL_BGRAD];
        int along_rows = (epi & FM_EPILOGUE_BGRADA) != 0;
        int64_t want[FM_MAX_NDIM];
        memcpy(want, shape, sizeof(int64_t) * (size_t)(ndim - 2));
        want[ndim - 2] = along_rows ? m : n;
        if ((s = exact_shape(along_rows ? "bgrad (bgrada: length M)" : "bgrad (length N)", bg, ndim - 1, want)) != FM_OK)
            return s;
        fm_tensor e = *bg;
        e.data = NULL;
        e.ndim = ndim;
        memcpy(e.shape, shape, sizeof(int64_t) * (size_t)ndim);
        for (int i = 0; i < ndim - 2; i++)
            e.strides[i] = shape[i] > 1 ? bg->strides[i] : 0;
        e.shape[ndim - 2] = along_rows ? m : 1;
        e.shape[ndim - 1] = along_rows ? 1 : n;
        e.strides[ndim - 2] = along_rows && m > 1 ? bg->strides[ndim - 2] : 0;
        e.strides[ndim - 1] = !along_rows && n > 1 ? bg->strides[ndim - 2] : 0;
        if ((s = fm_tensor_check_distinct("matmul", "bgrad", &e)) != FM_OK)
            return s;
        p->t[FM_MATMUL_BGRAD] = e;
    }

    for (int i = FM_MATMUL_A_SCALE; i <= FM_MATMUL_B_SCALE; i++) {
        if (!ts[i])
            continue;
        fm_tensor e = *ts[i]; /* one value: full rank, all extents 1, strides 0 */
        e.data = NULL;
        e.ndim = ndim;
        for (int j = 0; j < ndim; j++)
            e.shape[j] = 1, e.strides[j] = 0;
        p->t[i] = e;
    }

    /* devices */
    fm_device devs[FM_MATMUL_NSLOTS];
    int first = -1;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
        if (!ts[i])
            continue;
        p->present |= 1u << i;
        p->align_log2[i] = (uint8_t)fm_align_log2_of(ts[i]->data);
        if ((s = fm_tensor_resolve_device("matmul", slot_names[i], ts[i], &devs[i])) != FM_OK)
            return s;
        p->t[i].device = devs[i];
        if (first < 0)
            first = i;
    }
    if (opts->execution == FM_EXECUTION_AUTO) {
        for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
            if (!ts[i] || (devs[i].type == devs[first].type && devs[i].id == devs[first].id))
                continue;
            char d0[32], d1[32];
            device_str(devs[first], d0, sizeof d0);
            device_str(devs[i], d1, sizeof d1);
            return fm_fail(FM_ERR_DEVICE,
                           "matmul: %s is on %s but %s is on %s; move them to one device or pass execution='cpu' "
                           "or 'cuda' to let fusemath move the data",
                           slot_names[first], d0, slot_names[i], d1);
        }
        p->exec_device = devs[first];
    } else {
        p->exec_device.type = opts->execution == FM_EXECUTION_CPU ? FM_DEVICE_CPU : FM_DEVICE_CUDA;
        p->exec_device.id = opts->execution == FM_EXECUTION_CPU ? 0 : opts->device_id;
    }

    /* After the mixed-device check, so "a on cpu, b on cuda" names both first. */
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
        if (!ts[i] || devs[i].type != FM_DEVICE_CUDA || devs[i].id < fm_cuda_device_count())
            continue;
        return fm_fail(FM_ERR_UNAVAILABLE, "matmul: %s is on cuda:%d but %s", slot_names[i], devs[i].id,
                       fm_cuda_device_count() == 0 ? "no CUDA device is available (no GPU, no driver, or a build "
                                                     "without CUDA)"
                                                   : "that device does not exist");
    }

    fm_problem_key_alignment(p);

    fm_matmul_params *mp = &p->u.matmul;
    mp->alpha[0] = opts->alpha[0];
    mp->alpha[1] = fm_dtype_is_complex(dt) ? opts->alpha[1] : 0.0;
    if (ts[FM_MATMUL_C]) {
        mp->beta[0] = opts->beta[0];
        mp->beta[1] = fm_dtype_is_complex(dt) ? opts->beta[1] : 0.0;
    }
    if (!fm_dtype_is_complex(dt) && (opts->alpha[1] != 0.0 || (ts[FM_MATMUL_C] && opts->beta[1] != 0.0)))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: alpha or beta has an imaginary part but the dtype %s is real",
                       fm_dtype_name(dt));
    mp->epilogue = epi;
    mp->num_threads = fm_context_threads_for(ctx, opts->num_threads);
    mp->panel_rows = opts->panel_rows;
    mp->cpu_strategy = opts->cpu_strategy;
    mp->compute = opts->compute;
    mp->gpu_algo = opts->gpu_algo;
    mp->gpu_passes = opts->gpu_passes;
    if (epi & FM_EPILOGUE_CLAMP) {
        mp->clamp[0] = opts->clamp[0];
        mp->clamp[1] = opts->clamp[1];
    }
    return FM_OK;
}

/* The problem of a call; its bytes are the plan cache's and wisdom's key (see fm_problem_key_tails). */
static fm_status build_problem(fm_context *ctx, const fm_tensor *const ts[FM_MATMUL_NSLOTS],
                               const fm_matmul_options *opts, fm_problem *p)
{
    fm_status s = build_problem_fields(ctx, ts, opts, p);
    if (s == FM_OK)
        fm_problem_key_tails(p);
    return s;
}

fm_status fm_matmul_plan_v(fm_context *ctx, const fm_tensor *const ts[FM_MATMUL_NSLOTS],
                           const fm_matmul_options *opts, fm_plan **plan)
{
    if (!plan)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: plan out-pointer is NULL");
    *plan = NULL;
    if (!ts)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: tensor array is NULL");
    fm_problem p;
    fm_status s = build_problem(ctx, ts, opts, &p);
    if (s != FM_OK)
        return s;
    /* The cache first: a planned problem (tuned or not) never pays the wisdom lookup, which
     * hashes every backend's salt. */
    if ((*plan = fm_context_cache_get(ctx, &p)) != NULL)
        return FM_OK;
    fm_problem tuned;
    if (!fm_wisdom_lookup(ctx, &p, &tuned))
        return fm_plan_problem(ctx, &p, plan);
    /* Plan the remembered choice; if it no longer plans here, the default does. */
    fm_plan *winner = NULL;
    if (fm_plan_problem(ctx, &tuned, &winner) != FM_OK) {
        fm_clear_error();
        return fm_plan_problem(ctx, &p, plan);
    }
    fm_plan *out = fm_plan_alloc(&p);
    if (!out) {
        fm_plan_release(winner);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory");
    }
    fm_plan_alias_init(out, winner);
    fm_context_cache_put(ctx, out);
    *plan = out;
    return FM_OK;
}

fm_status fm_matmul_plan(fm_context *ctx, const fm_tensor *a, const fm_tensor *b, const fm_tensor *c,
                         const fm_tensor *bias, const fm_tensor *d, const fm_tensor *aux,
                         const fm_matmul_options *opts, fm_plan **plan)
{
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {a, b, c, bias, d, aux, NULL, NULL};
    return fm_matmul_plan_v(ctx, ts, opts, plan);
}

fm_status fm_matmul_v(fm_context *ctx, const fm_tensor *const ts[FM_MATMUL_NSLOTS], const fm_matmul_options *opts,
                      void *stream)
{
    fm_plan *plan = NULL;
    fm_status s = fm_matmul_plan_v(ctx, ts, opts, &plan);
    if (s != FM_OK)
        return s;
    void *ptrs[FM_MATMUL_NSLOTS];
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        ptrs[i] = ts[i] ? ts[i]->data : NULL;
    s = fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, stream);
    fm_plan_release(plan);
    return s;
}

fm_status fm_matmul(fm_context *ctx, const fm_tensor *a, const fm_tensor *b, const fm_tensor *c,
                    const fm_tensor *bias, const fm_tensor *d, const fm_tensor *aux, const fm_matmul_options *opts,
                    void *stream)
{
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {a, b, c, bias, d, aux, NULL, NULL};
    return fm_matmul_v(ctx, ts, opts, stream);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* *seconds = per call of plan: the fastest of `samples` timings of `calls` calls each (each
 * timing ends with a wait for the device). A failed call or wait is returned: a plan that
 * fails fast must not look fast. */
static fm_status time_plan(const fm_plan *plan, void *const *ptrs, int samples, int calls, fm_status (*sync)(int),
                           int device, double *seconds)
{
    fm_status s;
    double best = 1e300;
    for (int r = 0; r < samples; r++) {
        double t0 = now_seconds();
        for (int q = 0; q < calls; q++)
            if ((s = fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL)) != FM_OK)
                return s;
        if (sync && (s = sync(device)) != FM_OK)
            return s;
        double t = (now_seconds() - t0) / calls;
        if (t < best)
            best = t;
    }
    *seconds = best;
    return FM_OK;
}

/* Calls that fill window_s seconds at `est` seconds a call, within [at_least, at_most]. */
static int window_calls(double est, double window_s, int at_least, int at_most)
{
    double c = est > 0 ? window_s / est : at_least;
    return c > at_most ? at_most : c > at_least ? (int)c + 1 : at_least;
}

/* GPU timing size for a plan taking `est` seconds a call: at least `repeats` calls and 1 ms
 * (three calls of a 10 us product make a 30 us window, about what the closing synchronization
 * costs). No untimed warm-up of each candidate: 50 ms of it, meant to let a power-capped clock
 * settle at each kernel's draw (fp64 and 8192^3 bf16 run at the H200's 700 W cap), changed no
 * choice on the H200; the sustained check below is what settles such choices. */
int fm_autotune_gpu_calls(double est, int repeats) { return window_calls(est, 1e-3, repeats, 1000); }

/* Calls per window of the sustained check: 100 ms (at least 1 call, at most 2000). The
 * short timings above rank kernels by their speed at whatever clock the GPU has just then;
 * in a long loop a GPU that reaches its power limit (the H200 at 700 W: every 8192^3 bf16 /
 * fp16 and fp64 kernel) runs each kernel at the clock its own draw allows, which can reverse
 * the order. Measured on the H200, bf16 8192^3 bias+relu: a tile-20 kernel 1.6% faster than
 * the default (tile 24) in 1 ms timings was 1.5-3% slower in 100 ms windows, and so in
 * matmul_gpu.py's loops (the kernel probe, 2026-12-01). */
int fm_autotune_sustained_calls(double est) { return window_calls(est, 0.1, 1, 2000); }

/* The gain a candidate must show: 3% on the CPU; on a GPU 1%, or twice the default's own
 * typical change between the two timings around a candidate (drift[0..n), reordered), when
 * that is larger. At the H200's power cap (fp64, 8192^3 bf16) the default drifted by a few
 * percent between two timings and a second copy of the default scored 0.96-0.98 of it: a 1%
 * rule then picked among kernels by chance. */
double fm_autotune_required_gain(int on_gpu, double *drift, int n)
{
    if (!on_gpu)
        return 0.03;
    double noise = n > 0 ? fm_median(drift, n) : 0.0;
    return 2.0 * noise > 0.01 ? 2.0 * noise : 0.01;
}

fm_status fm_matmul_autotune(fm_context *ctx, const fm_tensor *a, const fm_tensor *b, const fm_tensor *c,
                             const fm_tensor *bias, const fm_tensor *d, const fm_tensor *aux,
                             const fm_matmul_options *opts, int repeats, fm_plan **plan)
{
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {a, b, c, bias, d, aux, NULL, NULL};
    return fm_matmul_autotune_v(ctx, ts, opts, repeats, plan);
}

fm_status fm_matmul_autotune_v(fm_context *ctx, const fm_tensor *const ts[FM_MATMUL_NSLOTS],
                               const fm_matmul_options *opts, int repeats, fm_plan **plan)
{
    if (!plan)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul autotune: plan out-pointer is NULL");
    *plan = NULL;
    if (repeats < 1 || repeats > 1000)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul autotune: repeats = %d, expected 1 <= repeats <= 1000", repeats);
    if (!ts)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul autotune: tensor array is NULL");
    fm_problem p;
    fm_status s = build_problem(ctx, ts, opts, &p);
    if (s != FM_OK)
        return s;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        if (ts[i] && !ts[i]->data && fm_tensor_numel(ts[i]) > 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul autotune: %s has no data pointer; autotune runs on the real operands",
                           slot_names[i]);
    void *ptrs[FM_MATMUL_NSLOTS];
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        ptrs[i] = ts[i] ? ts[i]->data : NULL;
    int on_gpu = p.exec_device.type == FM_DEVICE_CUDA;
    if (!on_gpu && (p.u.matmul.panel_rows != 0 || p.u.matmul.cpu_strategy != FM_CPU_STRATEGY_AUTO))
        return fm_plan_problem(ctx, &p, plan); /* the caller fixed the choice: nothing to tune */
    if (on_gpu && (p.u.matmul.gpu_algo != 0 || p.u.matmul.gpu_passes != 0))
        return fm_plan_problem(ctx, &p, plan);

    /* Candidates. CPU: the heuristic (0) and fixed panel heights up to M. GPU: the
     * backend's algorithms with the chain fused (gpu_algo 0, 1, ... until the backend has
     * no more: cuBLASLt's heuristic list, then its wider search), and the same for the
     * plain GEMM followed by the separate epilogue kernel: a fused path that loses (seen:
     * torch's fused fp64 bias+relu, 1.7x slower than unfused) is not chosen, and the split
     * path gets the fastest GEMM (the wider search holds an fp64 kernel 2-7% faster than
     * the heuristic's first choice in long loops at the H200's power cap, though slower on a
     * cool GPU; there the drift rule below keeps the default). Each is timed in
     * interleaved rounds (below). After the first round only candidates within 10% of the
     * fastest go on. A candidate replaces the default only when at least 3% faster on the
     * CPU (host timings scatter by more) or, on a GPU, 1% or twice the timings' own drift
     * when that is larger (below; fp32 gelu's better kernel was 2.2% faster on the H200). */
    /* The blas-threads strategy is not a CPU candidate: after each call OpenBLAS's
     * threads spin for milliseconds and slow whatever runs next (measured 3-4x on the
     * next tile plan on the H200 host), which a timing loop of one plan does not see. */
    static const int32_t cand[] = {0, 16, 32, 64, 128, 256, 512, 1024};
    enum { NCPU = sizeof cand / sizeof cand[0], GPU_FUSED_ALGOS = 64, GPU_PLAIN_ALGOS = 64, ROUNDS = 3,
           NMAX = 1 + GPU_FUSED_ALGOS + GPU_PLAIN_ALGOS };
    int64_t m = p.t[FM_MATMUL_D].shape[p.t[FM_MATMUL_D].ndim - 2];
    const fm_device_ops *dops = fm_device_ops_for(p.exec_device.type);
    fm_status (*sync)(int) = dops ? dops->sync : NULL;
    if (sync && (s = sync(p.exec_device.id)) != FM_OK) /* the operands may still be in flight */
        return s;
    fm_plan *plans[NMAX] = {0};
    double fastest[NMAX];
    int calls[NMAX]; /* per timing (GPU: see fm_autotune_gpu_calls) */
    int n = 0;
    /* qi 0: the default plan (the baseline of the 3% rule); then the candidates */
    for (int qi = 0; qi < NMAX; qi++) {
        fm_problem q = p;
        if (qi > 0 && on_gpu) {
            int fused = qi <= GPU_FUSED_ALGOS;
            q.u.matmul.gpu_passes = fused ? 1 : 2;
            q.u.matmul.gpu_algo = fused ? qi - 1 : qi - 1 - GPU_FUSED_ALGOS;
        } else if (qi > 0) {
            /* each panel height (0: the heuristic's) through cblas, then through the own
             * kernel where it applies (NOT_APPLICABLE skips it) */
            if (qi >= 2 * NCPU)
                break;
            const int ci = qi % NCPU;
            if (cand[ci] > m)
                continue;
            q.u.matmul.panel_rows = cand[ci];
            q.u.matmul.cpu_strategy = qi < NCPU ? FM_CPU_STRATEGY_TILES : FM_CPU_STRATEGY_KERNEL;
        }
        /* the default through the cache (it may be an earlier winner); candidates outside it,
         * so that tuning leaves one entry (the winner) instead of up to 128 */
        s = qi == 0 ? fm_plan_problem(ctx, &q, &plans[n]) : fm_plan_problem_uncached(ctx, &q, &plans[n]);
        if (s == FM_ERR_NOT_APPLICABLE || (s != FM_OK && qi > 0 && on_gpu) ||
            (s == FM_ERR_NOT_SUPPORTED && !on_gpu && qi >= NCPU)) { /* the own kernel does not take it */
            fm_clear_error(); /* e.g. no fused algorithm, or no more candidates */
            if (on_gpu && qi > 0 && qi <= GPU_FUSED_ALGOS)
                qi = GPU_FUSED_ALGOS; /* the backend's candidates are numbered without gaps */
            else if (on_gpu && qi > GPU_FUSED_ALGOS)
                break;
            continue;
        }
        double est = 0.0;
        if (s == FM_OK)
            s = fm_plan_execute(plans[n], ptrs, FM_MATMUL_NSLOTS, NULL); /* + warm-up */
        if (s == FM_OK && sync)
            s = sync(p.exec_device.id);
        if (s == FM_OK && on_gpu)
            s = time_plan(plans[n], ptrs, 1, 1, sync, p.exec_device.id, &est);
        if (s != FM_OK) {
            n++; /* released below with the others */
            goto fail;
        }
        calls[n] = on_gpu ? fm_autotune_gpu_calls(est, repeats) : 1;
        fastest[n++] = 1e300;
    }
    /* Timing, in rounds of alternating order. GPU: every candidate still running is timed
     * between two timings of the default and scored by its time over their mean, the score
     * being the median over its rounds: the clock drifts (fp64 on the H200 by up to 25%
     * within a process), so raw times taken at different moments, or a candidate's fastest
     * call across rounds, were decided by the drift. CPU: host noise comes as spikes, which
     * the fastest of all a candidate's calls filters best; the score is its fastest call over
     * the default's. After the first round, candidates scoring over 10% behind the best stop. */
    if (n == 0) /* nothing planned (the default refused): let the planner say why */
        return fm_plan_problem(ctx, &p, plan);
    const int samples = on_gpu ? 1 : repeats;
    double ratio[NMAX][ROUNDS], score[NMAX], drift[NMAX * ROUNDS];
    int nratio[NMAX] = {0}, alive[NMAX], ndrift = 0;
    for (int i = 0; i < n; i++)
        alive[i] = 1;
    for (int round = 0; round < ROUNDS; round++) {
        double before, t, after;
        if ((s = time_plan(plans[0], ptrs, samples, calls[0], sync, p.exec_device.id, &before)) != FM_OK)
            goto fail; /* the default itself fails: that is the caller's error */
        if (before < fastest[0])
            fastest[0] = before;
        for (int j = 1; j < n; j++) {
            int i = round % 2 ? n - j : j;
            if (!alive[i])
                continue;
            if (time_plan(plans[i], ptrs, samples, calls[i], sync, p.exec_device.id, &t) != FM_OK) {
                fm_clear_error(); /* a candidate that fails drops out */
                alive[i] = 0;
                fastest[i] = 1e300;
                nratio[i] = 0;
                continue;
            }
            if (t < fastest[i])
                fastest[i] = t;
            if (on_gpu) {
                if ((s = time_plan(plans[0], ptrs, samples, calls[0], sync, p.exec_device.id, &after)) != FM_OK)
                    goto fail;
                ratio[i][nratio[i]++] = t / (0.5 * (before + after));
                if (before > 0.0)
                    drift[ndrift++] = fabs(after / before - 1.0);
                before = after;
            }
        }
        /* the scores so far: GPU the median ratio, CPU the fastest call over the default's */
        double best = 1.0;
        for (int i = 1; i < n; i++) {
            score[i] = !on_gpu ? fastest[i] / fastest[0] : nratio[i] > 0 ? fm_median(ratio[i], nratio[i]) : 1e300;
            if (alive[i] && score[i] < best)
                best = score[i];
        }
        for (int i = 1; round == 0 && i < n; i++)
            alive[i] = score[i] <= 1.10 * best;
    }
    const double need = fm_autotune_required_gain(on_gpu, drift, ndrift);
    if (on_gpu)
        fm_log_plan(ctx, "autotune: the default's drift between two timings %.2f%% (median of %d): a candidate must "
                    "be %.1f%% faster", ndrift > 0 ? 100.0 * fm_median(drift, ndrift) : 0.0, ndrift, 100.0 * need);
    int win = 0;
    score[0] = 1.0;
    for (int i = 1; i < n; i++)
        if (score[i] < score[win] && score[i] < 1.0 - need)
            win = i;
    if (on_gpu && win > 0) {
        /* Sustained check: the winner against the default in 100 ms windows, alternating
         * (default first and last); it stays only if it still wins by the same margin
         * (see fm_autotune_sustained_calls). Costs about 0.9 s, or nine calls where one takes
         * longer than 100 ms. A winner that fails here is dropped. */
        enum { SUSTAIN_ROUNDS = 4 };
        const int sc = fm_autotune_sustained_calls(fastest[0]);
        double r[SUSTAIN_ROUNDS], before, t, after;
        if ((s = time_plan(plans[0], ptrs, 1, sc, sync, p.exec_device.id, &before)) != FM_OK)
            goto fail;
        for (int k = 0; k < SUSTAIN_ROUNDS; k++) {
            if (time_plan(plans[win], ptrs, 1, sc, sync, p.exec_device.id, &t) != FM_OK) {
                fm_clear_error();
                t = 1e300;
            }
            if ((s = time_plan(plans[0], ptrs, 1, sc, sync, p.exec_device.id, &after)) != FM_OK)
                goto fail;
            r[k] = before + after > 0.0 ? t / (0.5 * (before + after)) : 1.0;
            before = after;
        }
        const double sustained = fm_median(r, SUSTAIN_ROUNDS);
        fm_log_plan(ctx, "autotune: sustained check, %d windows of %d calls each: %s at %.3f x the default: %s",
                    SUSTAIN_ROUNDS, sc, plans[win]->describe, sustained,
                    sustained < 1.0 - need ? "kept" : "the default instead");
        if (sustained >= 1.0 - need)
            win = 0;
    }
    for (int i = 0; i < n; i++)
        if (fastest[i] >= 1e300)
            fm_log_plan(ctx, "autotune: %s: failed, dropped", plans[i]->describe);
        else
            fm_log_plan(ctx, "autotune: %s: %.3f ms, %.3f x the default%s", plans[i]->describe, fastest[i] * 1e3,
                        score[i], i == win ? " (chosen)" : "");
    fm_plan *best = plans[win];
    for (int i = 0; i < n; i++)
        if (i != win)
            fm_plan_release(plans[i]);
    if (!best)
        return fm_plan_problem(ctx, &p, plan);
    /* The winner answers for the default key, so later stateless calls get it. Made
     * as a fresh plan object: cached candidates must keep their own keys. */
    fm_problem key = p;
    fm_problem tuned = fm_plan_alias_target(best)->problem; /* the default may be an earlier winner's alias */
    if (win > 0)
        fm_context_cache_put(ctx, best); /* planned outside the cache: its own key gets it now */
    fm_plan_release(best);
    fm_plan *winner = NULL;
    if ((s = fm_plan_problem(ctx, &tuned, &winner)) != FM_OK)
        return s;
    fm_plan *out = fm_plan_alloc(&key);
    if (!out) {
        fm_plan_release(winner);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul autotune: out of host memory");
    }
    fm_wisdom_record(ctx, &key, &tuned, winner->describe);
    fm_plan_alias_init(out, winner);
    fm_context_cache_put(ctx, out);
    *plan = out;
    return FM_OK;
fail:
    for (int i = 0; i < n; i++)
        fm_plan_release(plans[i]);
    return s;
}
