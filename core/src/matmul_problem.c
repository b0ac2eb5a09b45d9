/* matmul_problem.c : validate matmul operands into a normalised fm_problem and
 * run the planner. Every operand is expanded to the full batch rank with stride 0
 * on broadcast dimensions, so backends see one uniform layout. */
#include "epilogue.h"
#include "operation.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const char *const slot_names[FM_MATMUL_NSLOTS] = {"a", "b", "c", "bias", "d", "aux", "bgrad", "scale",
                                                          "a_scale", "b_scale"};

static int is_fp8(fm_dtype t) { return t == FM_F8E4M3 || t == FM_F8E5M2; }

static const char *dtype_word(fm_dtype t) { return fm_dtype_word(t); }

void fm_matmul_options_init(fm_matmul_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->alpha[0] = 1.0;
}

/* A shape as text for messages, as NumPy prints it: "(2, 3)", "(4,)". */
static void shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t u = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && u < n; i++)
        u += (size_t)snprintf(buf + u, n - u, "%lld%s", (long long)shape[i], i + 1 < ndim ? ", " : "");
    if (u < n)
        snprintf(buf + u, n - u, "%s)", ndim == 1 ? "," : "");
}

fm_status fm_matmul_output_shape(const fm_tensor *a, const fm_tensor *b, int *ndim, int64_t *shape)
{
    if (!a || !b || !ndim || !shape)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: a, b, ndim and shape must not be NULL");
    fm_status s;
    if ((s = fm_problem_check_descriptor(&fm_operation_matmul, "a", a, 2)) != FM_OK ||
        (s = fm_problem_check_descriptor(&fm_operation_matmul, "b", b, 2)) != FM_OK)
        return s;
    int64_t k1 = a->shape[a->ndim - 1], k2 = b->shape[b->ndim - 2];
    if (k1 != k2) {
        char sa[128], sb[128];
        shape_str(a->ndim, a->shape, sa, sizeof sa);
        shape_str(b->ndim, b->shape, sb, sizeof sb);
        return fm_fail(FM_ERR_SHAPE, "matmul: a has shape %s and b has shape %s; K = %lld (the last dimension of a) "
                       "must equal the second-to-last dimension of b (%lld)", sa, sb, (long long)k1, (long long)k2);
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
    int64_t n = 1; /* zero-stride inputs can describe a result no 64-bit count holds (zeros count as 1) */
    for (int i = 0; i < bn + 2; i++)
        if (__builtin_mul_overflow(n, shape[i] > 0 ? shape[i] : 1, &n)) {
            char sa[128], sb[128];
            shape_str(a->ndim, a->shape, sa, sizeof sa);
            shape_str(b->ndim, b->shape, sb, sizeof sb);
            return fm_fail(FM_ERR_TOO_LARGE, "matmul: a of shape %s times b of shape %s has a result with more "
                           "elements than a 64-bit count holds", sa, sb);
        }
    return FM_OK;
}

/* Expand t to rank `ndim` against `target` shape (right-aligned, stride 0 where
 * broadcast or extent 1). bias_style: a bias or scale (..., N) broadcasts over the M axis and has N. */
static fm_status expand(const char *name, const fm_tensor *t, int ndim, const int64_t *target, fm_tensor *out,
                        int bias_style)
{
    if (t->ndim > ndim) { /* before the axes: which axis would "not broadcast" is meaningless then */
        char st[128];
        shape_str(t->ndim, t->shape, st, sizeof st);
        return fm_fail(FM_ERR_SHAPE, "matmul: %s has shape %s, which does not broadcast to the result: %s of shape %s "
                       "has more dimensions than the output (%d)", name, st, name, st, ndim);
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
        if (bias_style && i == ndim - 1 && ext != target[i])
            return fm_fail(FM_ERR_SHAPE, "matmul: %s has length %lld, expected N = %lld (the result's columns)",
                           name, (long long)ext, (long long)target[i]);
        if (ext != target[i] && ext != 1) {
            char st[128], tt[128];
            shape_str(t->ndim, t->shape, st, sizeof st);
            shape_str(ndim, target, tt, sizeof tt);
            return fm_fail(FM_ERR_SHAPE, "matmul: %s has shape %s, which does not broadcast to the result: axis %d of "
                           "the result (%s) has %lld, expected %lld or 1", name, st, i, tt,
                           (long long)ext, (long long)target[i]);
        }
        e.shape[i] = target[i];
        e.strides[i] = (ext == 1 || target[i] <= 1) ? 0 : str;
    }
    *out = e; /* t->ndim <= ndim (checked above): the loop consumed every axis of t */
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
    shape_str(t->ndim, t->shape, got, sizeof got);
    shape_str(ndim, shape, want, sizeof want);
    return fm_fail(FM_ERR_SHAPE, "matmul: %s has shape %s, expected %s", name, got, want);
}

/* The options alone: ranges, reserved fields, the epilogue's own rules. */
static fm_status check_options(const fm_matmul_options *opts)
{
    fm_status s;
    unsigned epi = opts->epilogue;
    if ((s = fm_epilogue_validate(epi)) != FM_OK)
        return fm_fail(s, "matmul: %s", fm_last_error());
    if (opts->execution < FM_EXECUTION_AUTO || opts->execution > FM_EXECUTION_BEST)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: execution = %d, expected auto (0), cpu (1), cuda (2) or "
                       "best (3)",
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
    if (opts->compute != FM_COMPUTE_DEFAULT && opts->compute != FM_COMPUTE_TF32)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: compute = %d, expected 0 (default) or 1 (tf32)", opts->compute);
    if (opts->gpu_algo < 0 || opts->gpu_algo > 63 || opts->gpu_passes < 0 || opts->gpu_passes > 2)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: gpu_algo = %d, gpu_passes = %d; expected 0..63 and 0..2",
                       opts->gpu_algo, opts->gpu_passes);
    if (fm_epilogue_has_dropout(epi) && !(opts->dropout >= 0.0 && opts->dropout < 1.0))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: dropout = %g, expected a probability 0 <= p < 1",
                       opts->dropout);
    if (!fm_epilogue_has_dropout(epi) && opts->dropout != 0.0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: dropout = %g but the epilogue has no dropout or ddropout "
                       "(e.g. 'relu+dropout'); expected 0", opts->dropout);
    if ((epi & FM_EPILOGUE_CLAMP) && !(opts->clamp[0] <= opts->clamp[1]))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: clamp = (%g, %g), expected lo <= hi (and no NaN)",
                       opts->clamp[0], opts->clamp[1]);
    return FM_OK;
}

/* The descriptors' own validity, and the one dtype of the product (*dt: d's; fp8 a and b give
 * f16, bf16 or f32 d, which then comes from d, or is bf16 when d is absent: output specs). */
static fm_status check_dtypes(const fm_tensor *const ts[FM_MATMUL_NSLOTS], const fm_matmul_options *opts,
                              fm_dtype *dt_out)
{
    /* a, b, d, aux: matrices; bias, bgrad, scale: vectors; c and the fp8 scale factors: any rank */
    static const int min_ndim[FM_MATMUL_NSLOTS] = {2, 2, 0, 1, 2, 2, 1, 1, 0, 0};
    fm_status s;
    const unsigned epi = opts->epilogue;
    const fm_tensor *a = ts[FM_MATMUL_A], *b = ts[FM_MATMUL_B], *d = ts[FM_MATMUL_D];
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        if (ts[i] && (s = fm_problem_check_descriptor(&fm_operation_matmul, slot_names[i], ts[i], min_ndim[i])))
            return s;
    fm_dtype dt = a->dtype;
    const int fp8 = is_fp8(a->dtype);
    if (fp8) {
        dt = d ? d->dtype : FM_BF16; /* fp8 products are bfloat16 unless d says otherwise */
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
            return fm_fail(FM_ERR_DTYPE, "matmul: %s has dtype %s but %s has dtype %s (%s, %s); mixed dtypes are not "
                           "supported (convert one of them)", fp8 ? "d" : "a", dtype_word(dt), slot_names[i],
                           dtype_word(ts[i]->dtype), fm_dtype_name(dt), fm_dtype_name(ts[i]->dtype));
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
    const int exact = fm_dtype_is_integer(dt);
    if (!(exact || dt == FM_F16 || dt == FM_BF16 || dt == FM_F32 || dt == FM_F64 || dt == FM_C64 ||
          dt == FM_C128))
        return fm_fail(FM_ERR_DTYPE, "matmul: a and b have dtype %s (%s), which is not supported; expected "
                       "float32, float64, complex64, complex128, an integer dtype or bool (float16, bfloat16 "
                       "where a GPU backend is available)", dtype_word(dt), fm_dtype_name(dt));
    if (exact && (epi || ts[FM_MATMUL_C])) { /* NumPy's exact product only: no chain is defined for it */
        char en[160];
        fm_epilogue_format(epi, en, sizeof en);
        return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul: %s is not supported for dtype %s (integer and bool "
                       "matmul is the plain product a @ b: no c, no epilogue)", epi ? en : "c (beta * c)",
                       dtype_word(dt));
    }
    if (fm_dtype_is_complex(dt) &&
        (epi & (FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_BACKWARD_ | FM_EPILOGUE_SCALE | FM_EPILOGUE_DROPOUT))) {
        char en[160];
        fm_epilogue_format(epi, en, sizeof en);
        return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul: epilogue %s is not defined for complex dtype %s (complex "
                       "data takes bias, bgrada and bgradb only)", en, fm_dtype_name(dt));
    }
    if (opts->compute == FM_COMPUTE_TF32 && dt != FM_F32)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: compute='tf32' applies to f32 data, not %s", fm_dtype_name(dt));
    *dt_out = dt;
    return FM_OK;
}

static fm_status expand_operands(const fm_tensor *const ts[FM_MATMUL_NSLOTS], unsigned epi, fm_dtype dt, int ndim,
                                 const int64_t *shape, fm_problem *p);
static fm_status finish_problem(fm_context *ctx, const fm_tensor *const ts[FM_MATMUL_NSLOTS],
                                const fm_matmul_options *opts, fm_dtype dt, fm_problem *p);
static fm_status make_specs(const fm_tensor *const *given, unsigned epi, fm_dtype dt, int ndim,
                            const int64_t *shape, fm_tensor *specs, uint32_t *written, const fm_tensor **ts);

/* The problem for operands `given`; with specs (output specs): first the descriptors of the
 * outputs into specs (make_specs), then every check against them (the outputs given as given). */
static fm_status build_problem_fields(fm_context *ctx, const fm_tensor *const given[FM_MATMUL_NSLOTS],
                                      const fm_matmul_options *opts, fm_problem *p, fm_tensor *specs,
                                      uint32_t *written)
{
    fm_status s;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        if (!given[i] && (i == FM_MATMUL_A || i == FM_MATMUL_B || (i == FM_MATMUL_D && !specs)))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: %s is NULL, expected a tensor descriptor",
                           slot_names[i]);
    const unsigned epi = opts->epilogue; /* opts: never NULL (the generic code fills in defaults) */
    fm_dtype dt;
    if ((s = check_options(opts)) != FM_OK || (s = check_dtypes(given, opts, &dt)) != FM_OK)
        return s;

    /* shapes */
    int ndim;
    int64_t shape[FM_MAX_NDIM + 2];
    if ((s = fm_matmul_output_shape(given[FM_MATMUL_A], given[FM_MATMUL_B], &ndim, shape)) != FM_OK)
        return s;
    if (ndim > FM_MAX_NDIM)
        return fm_fail(FM_ERR_SHAPE, "matmul: output would have %d dimensions, at most %d", ndim, FM_MAX_NDIM);
    const fm_tensor *ts[FM_MATMUL_NSLOTS];
    memcpy(ts, given, sizeof ts);
    if (specs && ((s = make_specs(given, epi, dt, ndim, shape, specs, written, ts)) != FM_OK ||
                  (s = check_dtypes(ts, opts, &dt)) != FM_OK))
        return s;
    const fm_tensor *d = ts[FM_MATMUL_D];
    if ((s = exact_shape("d", d, ndim, shape)) != FM_OK)
        return s;
    /* aux is written by the forward *_aux chains; drelu/dgelu read it (an input may repeat,
     * e.g. one mask broadcast over the batch) */
    if ((s = fm_tensor_check_distinct(FM_OP_MATMUL, FM_MATMUL_D, d)) != FM_OK ||
        (ts[FM_MATMUL_AUX] && (epi & FM_EPILOGUE_AUX) &&
         (s = fm_tensor_check_distinct(FM_OP_MATMUL, FM_MATMUL_AUX, ts[FM_MATMUL_AUX])) != FM_OK))
        return s;

    /* each input or output of the epilogue is given exactly when it has one; the failure names
     * the slot (so that a front end names its own argument) */
    const int slots[] = {FM_MATMUL_BIAS, FM_MATMUL_AUX, FM_MATMUL_BGRAD, FM_MATMUL_SCALE};
    const int wanted[] = {!!(epi & FM_EPILOGUE_BIAS), !!fm_epilogue_uses_aux(epi), !!(epi & FM_EPILOGUE_ANY_BGRAD_),
                          !!(epi & FM_EPILOGUE_SCALE)};
    for (int i = 0; i < 4; i++)
        if (wanted[i] != !!ts[slots[i]]) {
            char chain[128];
            fm_epilogue_format(epi, chain, sizeof chain);
            return fm_about_slot(fm_fail(FM_ERR_INVALID_ARGUMENT, ts[slots[i]]
                                             ? "matmul: %s was given but the epilogue '%s' uses none%s"
                                             : "matmul: %s was not given but the epilogue '%s' uses one%s",
                                         slot_names[slots[i]], chain, slots[i] == FM_MATMUL_AUX &&
                                         (epi & FM_EPILOGUE_BACKWARD_) ? " (the forward pass's aux result)" : ""),
                                 slots[i]);
        }

    /* the header is fm_problem_begin's (zeroed, names, roles); aux is an output of the forward
     * chains only (drelu/dgelu read it) */
    p->output_mask = (1u << FM_MATMUL_D) | (1u << FM_MATMUL_BGRAD) | ((epi & FM_EPILOGUE_AUX) ? (1u << FM_MATMUL_AUX) : 0);
    p->inplace_partner[FM_MATMUL_D] = FM_MATMUL_C;
    if ((s = expand_operands(ts, epi, dt, ndim, shape, p)) != FM_OK)
        return s;
    return finish_problem(ctx, ts, opts, dt, p);
}

/* Every operand expanded to the full batch rank (stride 0 where broadcast) into p->t[]. */
static fm_status expand_operands(const fm_tensor *const ts[FM_MATMUL_NSLOTS], unsigned epi, fm_dtype dt, int ndim,
                                 const int64_t *shape, fm_problem *p)
{
    fm_status s;
    const fm_tensor *a = ts[FM_MATMUL_A], *b = ts[FM_MATMUL_B], *d = ts[FM_MATMUL_D];
    const int64_t m = shape[ndim - 2], n = shape[ndim - 1], k = a->shape[a->ndim - 1];
    int64_t a_target[FM_MAX_NDIM], b_target[FM_MAX_NDIM], bias_target[FM_MAX_NDIM], col_target[FM_MAX_NDIM];
    memcpy(a_target, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(b_target, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(bias_target, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(col_target, shape, sizeof(int64_t) * (size_t)ndim);
    a_target[ndim - 1] = k;
    b_target[ndim - 2] = k;
    bias_target[ndim - 2] = 1;
    col_target[ndim - 1] = 1;
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
        /* the input of drelu / dgelu by nvmath-python's name of it (the result key of the forward call) */
        const char *an = (epi & FM_EPILOGUE_DRELU)      ? "relu_aux"
                         : (epi & FM_EPILOGUE_DGELU)    ? "gelu_aux"
                         : (epi & FM_EPILOGUE_DDROPOUT) ? "dropout_aux"
                                                        : "aux";
        int64_t aux_shape[FM_MAX_NDIM];
        memcpy(aux_shape, shape, sizeof(int64_t) * (size_t)ndim);
        if (fm_epilogue_aux_is_mask(epi)) {
            aux_shape[ndim - 1] = fm_relu_mask_row_bytes(n);
            if (aux->dtype != FM_U8)
                return fm_fail(FM_ERR_DTYPE, "matmul: %s has dtype %s, expected uint8 (aux, the relu/dropout bit mask: %s, "
                               "expected u8)", an, dtype_word(aux->dtype), fm_dtype_name(aux->dtype));
        } else if (aux->dtype != dt) {
            return fm_fail(FM_ERR_DTYPE, "matmul: %s has dtype %s, expected %s (aux, the activation input, like d: "
                           "%s, expected %s)", an, dtype_word(aux->dtype), dtype_word(dt), fm_dtype_name(aux->dtype),
                           fm_dtype_name(dt));
        }
        if ((s = exact_shape(an, aux, ndim, aux_shape)) != FM_OK)
            return s;
        if (aux->strides[ndim - 1] != 1 && aux_shape[ndim - 1] > 1)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: aux has column stride %lld, expected 1",
                           (long long)aux->strides[ndim - 1]);
        if (fm_epilogue_aux_is_mask(epi) && m > 1 && aux_shape[ndim - 1] > 0 && aux->strides[ndim - 2] != aux_shape[ndim - 1])
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: mask aux rows must be contiguous (row stride %lld, expected %lld)",
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
            return fm_fail(FM_ERR_DTYPE, "matmul: scale has dtype %s, expected %s for %s data (%s, expected %s)",
                           dtype_word(sc->dtype), dtype_word(want), dtype_word(dt), fm_dtype_name(sc->dtype),
                           fm_dtype_name(want));
        if (sc->ndim == ndim && sc->shape[ndim - 2] != 1)
            return fm_fail(FM_ERR_SHAPE, "matmul: scale has %lld rows; expected shape (N,) or (batch..., N)",
                           (long long)sc->shape[ndim - 2]);
        if ((s = expand("scale", sc, ndim, bias_target, &p->t[FM_MATMUL_SCALE], 1)) != FM_OK)
            return s;
    }
    if (ts[FM_MATMUL_BGRAD]) {
        /* (batch..., L): one gradient per batch entry, L = M for bgrada, else N. */
        fm_tensor bg = *ts[FM_MATMUL_BGRAD];
        int along_rows = (epi & FM_EPILOGUE_BGRADA) != 0;
        int64_t want[FM_MAX_NDIM];
        memcpy(want, shape, sizeof(int64_t) * (size_t)(ndim - 2));
        want[ndim - 2] = along_rows ? m : n;
        if ((s = exact_shape(along_rows ? "bgrad (bgrada: length M)" : "bgrad (length N)", &bg, ndim - 1, want)) != FM_OK)
            return s;
        /* expanded as a column of D's shape (bgrada: a unit axis after its length) or a row, like a bias */
        if (along_rows)
            bg.ndim = ndim, bg.shape[ndim - 1] = 1, bg.strides[ndim - 1] = 0;
        if ((s = expand("bgrad", &bg, ndim, along_rows ? col_target : bias_target, &p->t[FM_MATMUL_BGRAD],
                        !along_rows)) != FM_OK ||
            (s = fm_tensor_check_distinct(FM_OP_MATMUL, FM_MATMUL_BGRAD, &p->t[FM_MATMUL_BGRAD])) != FM_OK)
            return s;
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
    return FM_OK;
}

/* Devices, alignment, and the plain-data parameters. */
static fm_status finish_problem(fm_context *ctx, const fm_tensor *const ts[FM_MATMUL_NSLOTS],
                                const fm_matmul_options *opts, fm_dtype dt, fm_problem *p)
{
    fm_status s;
    const unsigned epi = opts->epilogue;
    if ((s = fm_problem_place_devices(ctx, &fm_operation_matmul, ts, opts, opts->execution, opts->device_id, p)) != FM_OK)
        return s;

    if (fm_dtype_is_integer(dt) && p->exec_device.type != FM_DEVICE_CPU)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul: dtype %s on device cuda:%d is not supported: no GPU "
                       "library computes NumPy's exact (wrapping) integer or bool matmul; run it on the CPU "
                       "(execution='cpu')", dtype_word(dt), p->exec_device.id);
    if (fm_dtype_is_integer(dt) && (opts->alpha[0] != 1.0 || opts->alpha[1] != 0.0))
        return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul: alpha = %g%+gj is not supported for dtype %s (integer "
                       "and bool matmul is the plain product a @ b: alpha = 1)", opts->alpha[0], opts->alpha[1],
                       dtype_word(dt));
    fm_matmul_params *mp = &p->u.matmul;
    mp->alpha[0] = opts->alpha[0];
    mp->alpha[1] = fm_dtype_is_complex(dt) ? opts->alpha[1] : 0.0;
    if (ts[FM_MATMUL_C]) {
        mp->beta[0] = opts->beta[0];
        mp->beta[1] = fm_dtype_is_complex(dt) ? opts->beta[1] : 0.0;
    }
    if (!fm_dtype_is_complex(dt) && (opts->alpha[1] != 0.0 || (ts[FM_MATMUL_C] && opts->beta[1] != 0.0)))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: %s = (%g%+gj) has an imaginary part but the operands are real "
                       "(%s)", opts->alpha[1] != 0.0 ? "alpha" : "beta", opts->alpha[1] != 0.0 ? opts->alpha[0] : opts->beta[0],
                       opts->alpha[1] != 0.0 ? opts->alpha[1] : opts->beta[1], dtype_word(dt));
    /* one policy with the FFT's scale: a non-finite factor is a mistake, not a request for NaNs */
    if (!isfinite(mp->alpha[0]) || !isfinite(mp->alpha[1]) || !isfinite(mp->beta[0]) || !isfinite(mp->beta[1]))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul: %s = (%g, %g) is not finite; expected a finite number",
                       isfinite(mp->alpha[0]) && isfinite(mp->alpha[1]) ? "beta" : "alpha",
                       isfinite(mp->alpha[0]) && isfinite(mp->alpha[1]) ? mp->beta[0] : mp->alpha[0],
                       isfinite(mp->alpha[0]) && isfinite(mp->alpha[1]) ? mp->beta[1] : mp->alpha[1]);
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
    mp->dropout = fm_epilogue_has_dropout(epi) ? opts->dropout + 0.0 : 0.0; /* + 0.0: -0 keys as 0 */
    return FM_OK;
}

/* C-contiguous descriptors on a's device for d and the outputs the epilogue writes (aux, bgrad)
 * into specs, *written their bits; ts: the operands, a spec for each output not given. */
static fm_status make_specs(const fm_tensor *const *given, unsigned epi, fm_dtype dt, int ndim,
                            const int64_t *shape, fm_tensor *specs, uint32_t *written, const fm_tensor **ts)
{
    fm_device dev;
    fm_status s = fm_tensor_resolve_device("matmul", "a", given[FM_MATMUL_A], &dev);
    if (s != FM_OK)
        return s;
    const int64_t m = shape[ndim - 2], n = shape[ndim - 1];
    fm_tensor_init(&specs[FM_MATMUL_D], NULL, dev, dt, ndim, shape, NULL);
    *written = 1u << FM_MATMUL_D;
    if (epi & FM_EPILOGUE_AUX) {
        int64_t aux[FM_MAX_NDIM];
        memcpy(aux, shape, sizeof(int64_t) * (size_t)ndim);
        const int mask = fm_epilogue_aux_is_mask(epi);
        if (mask)
            aux[ndim - 1] = fm_relu_mask_row_bytes(n);
        fm_tensor_init(&specs[FM_MATMUL_AUX], NULL, dev, mask ? FM_U8 : dt, ndim, aux, NULL);
        *written |= 1u << FM_MATMUL_AUX;
    }
    if (epi & FM_EPILOGUE_ANY_BGRAD_) {
        int64_t bg[FM_MAX_NDIM];
        memcpy(bg, shape, sizeof(int64_t) * (size_t)(ndim - 2));
        bg[ndim - 2] = (epi & FM_EPILOGUE_BGRADA) ? m : n;
        fm_tensor_init(&specs[FM_MATMUL_BGRAD], NULL, dev, dt, ndim - 1, bg, NULL);
        *written |= 1u << FM_MATMUL_BGRAD;
    }
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        ts[i] = ((*written >> i) & 1u) && !given[i] ? &specs[i] : given[i];
    return FM_OK;
}

static fm_status output_specs(const fm_tensor *const *ts, const void *opts, fm_tensor *specs, uint32_t *written)
{
    fm_problem p;
    fm_problem_begin(NULL, &fm_operation_matmul, &p);
    return build_problem_fields(NULL, ts, opts, &p, specs, written);
}

static const uint8_t slot_roles[FM_MATMUL_NSLOTS] = {
    FM_SLOT_INPUT, FM_SLOT_INPUT, FM_SLOT_INPUT, FM_SLOT_INPUT, FM_SLOT_OUTPUT,
    FM_SLOT_OUTPUT, /* aux: written by forward kinds, read by drelu/dgelu (the problem's output_mask says) */
    FM_SLOT_OUTPUT, FM_SLOT_INPUT, FM_SLOT_INPUT, FM_SLOT_INPUT};

static void options_init(void *o) { fm_matmul_options_init(o); }

static fm_status build(fm_context *ctx, const fm_tensor *const *ts, const void *opts, fm_problem *p,
                       fm_attachments *att)
{
    return build_problem_fields(ctx, ts, opts, p, NULL, NULL);
}

/* The ranges fm_matmul_options accepts for the tunable fields (wisdom files are checked with it). */
static fm_status check_tunables(const int32_t *v)
{
    if (v[0] < 0 || v[1] < FM_CPU_STRATEGY_AUTO || v[1] > FM_CPU_STRATEGY_KERNEL || v[2] < 0 || v[2] > 63 ||
        v[3] < 0 || v[3] > 2)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "panel_rows %d, cpu_strategy %d, gpu_algo %d, gpu_passes %d; "
                       "expected >= 0, %d..%d, 0..63 and 0..2", v[0], v[1], v[2], v[3], FM_CPU_STRATEGY_AUTO,
                       FM_CPU_STRATEGY_KERNEL);
    return FM_OK;
}

/* Dropout's position (args.ints[0]) as the RNG family takes it: word position + e for element e
 * of d, every word below 2^63 (a negative or wrapping position would reuse another call's words). */
static fm_status check_exec_args(const fm_problem *p, const fm_exec_args *a)
{
    if (!(p->u.matmul.epilogue & FM_EPILOGUE_DROPOUT))
        return FM_OK;
    const int64_t pos = a->ints[0], numel = fm_tensor_numel(&p->t[FM_MATMUL_D]);
    if (pos < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "matmul execute: dropout position args.ints[0] = %lld, expected >= 0",
                       (long long)pos);
    if (pos > INT64_MAX - numel)
        return fm_fail(FM_ERR_TOO_LARGE, "matmul execute: dropout position args.ints[0] = %lld + %lld elements of d "
                       "passes 2^63 - 1", (long long)pos, (long long)numel);
    return FM_OK;
}

/* FM_EXECUTION_BEST: 2 m n k flops per product (complex: 4 real products each), the batch from d
 * (both operands may broadcast); integer products run on the cpu only, fp8 on cuda only. */
static double work(const fm_tensor *const *ts, const void *opts, fm_dtype *dtype, unsigned *devices, int *threads)
{
    const fm_tensor *a = ts[FM_MATMUL_A], *b = ts[FM_MATMUL_B];
    *threads = ((const fm_matmul_options *)opts)->num_threads;
    if (!a || !b || a->ndim < 1 || b->ndim < 1)
        return -1;
    const double m = a->ndim >= 2 ? (double)a->shape[a->ndim - 2] : 1, k = (double)a->shape[a->ndim - 1];
    const double n = b->ndim >= 2 ? (double)b->shape[b->ndim - 1] : 1;
    const fm_tensor *d = ts[FM_MATMUL_D];
    const double na = (double)fm_tensor_numel(a), nb = (double)fm_tensor_numel(b);
    const double batch = d && m * n > 0 ? (double)fm_tensor_numel(d) / (m * n)
                         : m * k > 0 && k * n > 0 ? fmax(na / (m * k), nb / (k * n)) : 0;
    *dtype = a->dtype;
    if (fm_dtype_is_integer(a->dtype))
        *devices &= 1u << FM_DEVICE_CPU;
    if (a->dtype == FM_F8E4M3 || a->dtype == FM_F8E5M2)
        *devices &= 1u << FM_DEVICE_CUDA;
    return 2 * m * n * k * batch * (fm_dtype_is_complex(a->dtype) ? 4 : 1);
}

static double problem_work(const fm_problem *p, fm_dtype *dtype, int *variant)
{
    *variant = 0;
    fm_matmul_geom g;
    fm_matmul_geom_from_problem(p, &g);
    *dtype = p->t[FM_MATMUL_A].dtype;
    return 2.0 * (double)g.m * (double)g.n * (double)g.k * (double)g.batch_count *
           (fm_dtype_is_complex(*dtype) ? 4 : 1);
}

/* fm_context_calibrate: square f32 and f64 products (a, b -> d). */
static int calibration_problem(int index, int quick, int execution, fm_tensor *t, void *opts, uint32_t *slots)
{
    static const int64_t quick_n[] = {128, 512, 2048}, full_n[] = {64, 256, 1024, 2048, 4096};
    const int count = quick ? 3 : 5;
    if (index < 0 || index >= 2 * count)
        return 0;
    const int64_t n = (quick ? quick_n : full_n)[index % count], shape[2] = {n, n};
    const fm_dtype dt = index < count ? FM_F32 : FM_F64;
    const fm_device dev = {execution == FM_EXECUTION_CUDA ? FM_DEVICE_CUDA : FM_DEVICE_CPU, 0};
    for (int i = FM_MATMUL_A; i <= FM_MATMUL_D; i += (i == FM_MATMUL_B ? 3 : 1))
        fm_tensor_init(&t[i], NULL, dev, dt, 2, shape, NULL);
    fm_matmul_options *o = opts;
    fm_matmul_options_init(o);
    o->execution = execution;
    *slots = 1u << FM_MATMUL_A | 1u << FM_MATMUL_B | 1u << FM_MATMUL_D;
    return 1;
}

/* Pipelined transfers (core/src/pipeline.c): d cut along its outermost batch axis of more than one
 * index (a batch slab; a, b, c, bias and aux too where they have that extent), else into row panels
 * (a, c and aux too where they have d's rows; b, bias, scale, and a c or aux broadcast over rows are
 * read whole). Dropout's position moves with the chunk (element e of d is word position + e, d
 * row-major over batch, M, N). bgrad (a sum over every row) is not cut. */
static int64_t chunk(const fm_problem *p, int64_t lo, int64_t hi, fm_problem *sub, fm_chunk *c, const char **why)
{
    const fm_tensor *d = &p->t[FM_MATMUL_D];
    const int nd = d->ndim;
    if (p->present & (1u << FM_MATMUL_BGRAD))
        return *why = "bgrad sums over every row of d", 0;
    int axis = nd - 2;
    for (int i = nd - 3; i >= 0; i--)
        if (d->shape[i] > 1)
            axis = i; /* the outermost batch axis of more than one index */
    const int64_t e = d->shape[axis];
    if (!sub)
        return e;
    /* a batch axis cuts every operand that has it; rows cut a, c, d and aux (b and bias read whole) */
    const uint32_t cut = axis < nd - 2 ? (1u << (FM_MATMUL_AUX + 1)) - 1
                                       : 1u << FM_MATMUL_A | 1u << FM_MATMUL_C | 1u << FM_MATMUL_D | 1u << FM_MATMUL_AUX;
    fm_chunk_cut_slots(p, cut, nd, axis, e, lo, hi, sub, c);
    if ((p->u.matmul.epilogue & FM_EPILOGUE_DROPOUT) && e > 0)
        c->position = lo * (fm_tensor_numel(d) / e);
    return e;
}

const fm_operation fm_operation_matmul = {
    .op = FM_OP_MATMUL,
    .name = "matmul",
    .nslots = FM_MATMUL_NSLOTS,
    .slot_names = slot_names,
    .slot_roles = slot_roles,
    .options_size = sizeof(fm_matmul_options),
    .options_init = options_init,
    .build = build,
    .output_specs = output_specs,
    .ntunables = 4,
    .tunables = {offsetof(fm_matmul_params, panel_rows), offsetof(fm_matmul_params, cpu_strategy),
                 offsetof(fm_matmul_params, gpu_algo), offsetof(fm_matmul_params, gpu_passes)},
    .check_tunables = check_tunables,
    .exec_ints = 4, /* dropout's position (ints[0]) and seed (ints[3]): fusemath.h, fm_matmul_plan */
    .check_exec_args = check_exec_args,
    .work = work,
    .problem_work = problem_work,
    .calibration_problem = calibration_problem,
    .chunk = chunk,
    .cpu_threads = offsetof(fm_matmul_params, num_threads),
};

fm_status fm_matmul_plan_v(fm_context *ctx, const fm_tensor *const ts[FM_MATMUL_NSLOTS],
                           const fm_matmul_options *opts, fm_plan **plan)
{
    return fm_plan_create(ctx, FM_OP_MATMUL, ts, FM_MATMUL_NSLOTS, opts, plan);
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
    return fm_run(ctx, FM_OP_MATMUL, ts, FM_MATMUL_NSLOTS, opts, NULL, stream);
}

fm_status fm_matmul(fm_context *ctx, const fm_tensor *a, const fm_tensor *b, const fm_tensor *c,
                    const fm_tensor *bias, const fm_tensor *d, const fm_tensor *aux, const fm_matmul_options *opts,
                    void *stream)
{
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {a, b, c, bias, d, aux, NULL, NULL};
    return fm_matmul_v(ctx, ts, opts, stream);
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
    return fm_autotune(ctx, FM_OP_MATMUL, ts, FM_MATMUL_NSLOTS, opts, repeats, plan);
}
