/* fft_problem.c : validate FFT operands into a normalised fm_problem and run the planner.
 * The transform axes are recorded ascending but for the last given, kept last; a transform over
 * more than 3 axes is planned by core as steps (fft_axis_split.c). The problem keeps the
 * operands' own shapes and strides (backends take any layout through FFTW's guru interface /
 * cuFFT's advanced layout, or copy). Scales that commute with the transform are folded into
 * the epilogue scale, together with the norm. */
#include "fft_axis_split.h"
#include "operation.h"
#include "sha256.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const slot_names[FM_FFT_NSLOTS] = {"in", "out", "prolog_array", "epilog_array"};

void fm_fft_options_init(fm_fft_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->prolog.scale[0] = o->epilog.scale[0] = 1.0;
}

static fm_dtype real_of(fm_dtype t)
{
    return t == FM_C32 ? FM_F16 : t == FM_C64 ? FM_F32 : t == FM_C128 ? FM_F64 : t == FM_CLD ? FM_LD : t;
}
static fm_dtype complex_of(fm_dtype t)
{
    return t == FM_F16 ? FM_C32 : t == FM_F32 ? FM_C64 : t == FM_F64 ? FM_C128 : t == FM_LD ? FM_CLD : t;
}

static fm_status check_desc(const char *name, const fm_tensor *t)
{
    return fm_problem_check_descriptor(&fm_operation_fft, name, t, 1);
}

/* The chain's array broadcasts to `target` (NumPy rules, right-aligned); expand it to the
 * target's rank with stride 0 where broadcast. */
static fm_status expand_array(const char *name, const fm_tensor *a, const fm_tensor *target, fm_tensor *out)
{
    if (a->ndim > target->ndim)
        return fm_fail(FM_ERR_SHAPE, "fft: %s has %d dimensions, more than the %d of the data it multiplies", name,
                       a->ndim, target->ndim);
    fm_tensor e = *a;
    e.data = NULL;
    e.ndim = target->ndim;
    for (int i = target->ndim - 1, j = a->ndim - 1; i >= 0; i--, j--) {
        int64_t ext = j >= 0 ? a->shape[j] : 1, st = j >= 0 ? a->strides[j] : 0;
        if (ext != target->shape[i] && ext != 1)
            return fm_fail(FM_ERR_SHAPE, "fft: %s has extent %lld on axis %d, expected %lld or 1 (it broadcasts "
                           "against the data)", name, (long long)ext, j, (long long)target->shape[i]);
        e.shape[i] = target->shape[i];
        e.strides[i] = ext == 1 ? 0 : st;
    }
    *out = e;
    return FM_OK;
}

/* A raw callback: a C identifier that the source defines as a function (lexically: the name
 * as a whole token followed by "("; NVRTC catches what this cannot, with its log). The check
 * matters: cuFFT crashes on a symbol name the LTO-IR does not define, and the name we hand it
 * is the wrapper's, which calls this one. */
static fm_status check_callback(const char *cn, const fm_fft_chain *ch)
{
    if (!ch->source || !ch->symbol)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: the %s has a callback but its %s is NULL", cn,
                       ch->source ? "symbol" : "source");
    const char *sym = ch->symbol;
    size_t n = strlen(sym);
    int ident = n > 0 && n <= 200 && (isalpha((unsigned char)sym[0]) || sym[0] == '_');
    for (size_t i = 1; ident && i < n; i++)
        ident = isalnum((unsigned char)sym[i]) || sym[i] == '_';
    if (!ident)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: %s callback symbol '%.200s' is not a C identifier (letters, "
                       "digits and _, not starting with a digit)", cn, sym);
    if (strncmp(sym, "fm_cb_", 6) == 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: %s callback symbol '%s' uses the reserved prefix fm_cb_", cn, sym);
    for (const char *q = strstr(ch->source, sym); q; q = strstr(q + 1, sym)) {
        int start = q == ch->source || !(isalnum((unsigned char)q[-1]) || q[-1] == '_');
        const char *e = q + n;
        if (!start || isalnum((unsigned char)*e) || *e == '_')
            continue;
        while (*e == ' ' || *e == '\t' || *e == '\n' || *e == '\r')
            e++;
        if (*e == '(')
            return FM_OK;
    }
    return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: %s callback symbol '%s' is not defined in its source (expected "
                   "__device__ T %s(T x, unsigned long long offset, const void *data))", cn, sym, sym);
}

static void callback_digest(const fm_fft_chain *ch, uint8_t out[32])
{
    fm_sha256 h;
    fm_sha256_init(&h);
    fm_sha256_update(&h, ch->symbol, strlen(ch->symbol) + 1);
    fm_sha256_update(&h, ch->source, strlen(ch->source));
    fm_sha256_final(&h, out);
}

void fm_fft_ops_text(char *buf, size_t size, unsigned ops)
{
    snprintf(buf, size, "%s%s%s%s%s", ops ? "" : "+none", (ops & FM_FFT_OP_SCALE) ? "+scale" : "",
             (ops & FM_FFT_OP_MULTIPLY) ? "+multiply" : "", (ops & FM_FFT_OP_CONJ) ? "+conj" : "",
             (ops & FM_FFT_OP_CALLBACK) ? "+callback" : "");
    memmove(buf, buf + 1, strlen(buf)); /* drop the leading + */
}

int fm_fft_gpu_prolog_mode(const fm_problem *p)
{
    const fm_fft_params *fp = &p->u.fft;
    /* nothing to place, or nothing to compute: the mode means nothing (whoever runs empty
     * problems runs this one) */
    if ((!fp->prolog_ops && !fp->epilog_ops) || fm_tensor_numel(&p->t[FM_FFT_IN]) == 0 ||
        fm_tensor_numel(&p->t[FM_FFT_OUT]) == 0)
        return FM_FFT_PROLOG_AUTO;
    return fp->gpu_prolog;
}

int fm_fft_prolog_mode_setting(const fm_settings *settings, int asked)
{
    const char *env = settings ? settings->cufft_prolog : "";
    if (asked != FM_FFT_PROLOG_AUTO || !*env)
        return asked;
    return strcmp(env, "callback") == 0 ? FM_FFT_PROLOG_CALLBACK
           : strcmp(env, "pass") == 0   ? FM_FFT_PROLOG_PASS
           : strcmp(env, "kernel") == 0 ? FM_FFT_PROLOG_KERNEL
                                        : FM_FFT_PROLOG_AUTO;
}

const char *fm_fft_callback_text(const fm_attachments *att, const fm_problem *p, int epilog, const char **symbol)
{
    const fm_fft_params *fp = &p->u.fft;
    unsigned ops = epilog ? fp->epilog_ops : fp->prolog_ops;
    if (!att || p->op != FM_OP_FFT || !(ops & FM_FFT_OP_CALLBACK))
        return NULL;
    if (symbol)
        *symbol = att->text[epilog ? FM_FFT_ATTACH_EPILOG_SYMBOL : FM_FFT_ATTACH_PROLOG_SYMBOL];
    return att->text[epilog ? FM_FFT_ATTACH_EPILOG_SOURCE : FM_FFT_ATTACH_PROLOG_SOURCE];
}

/* The options alone: ranges, reserved zeros, the chains' ops and callbacks. */
static fm_status check_options(const fm_tensor *const ts[FM_FFT_NSLOTS], const fm_fft_options *opts)
{
    fm_status s;
    for (int i = 0; i < (int)(sizeof opts->reserved / sizeof opts->reserved[0]); i++)
        if (opts->reserved[i] != 0) /* a later version may give them a meaning: refuse garbage now */
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: options.reserved[%d] = %d, expected 0 (fm_fft_options_init "
                           "sets it)", i, (int)opts->reserved[i]);
    if (opts->kind < FM_FFT_C2C || opts->kind > FM_FFT_C2R)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: kind = %d, expected 0 (c2c), 1 (r2c) or 2 (c2r)", opts->kind);
    if (opts->last_n < 0 || (opts->last_n && opts->kind != FM_FFT_C2R))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: last_n = %d, expected 0%s", (int)opts->last_n,
                       opts->kind == FM_FFT_C2R ? " or the output length n > 0" : " (it is for c2r only)");
    if (opts->inverse != 0 && opts->inverse != 1)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: inverse = %d, expected 0 or 1", opts->inverse);
    if (opts->kind == FM_FFT_R2C && opts->inverse)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: r2c is a forward transform (use c2r for the inverse)");
    if (opts->kind == FM_FFT_C2R && !opts->inverse)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: c2r is an inverse transform (set inverse = 1)");
    if (opts->norm < FM_FFT_NORM_BACKWARD || opts->norm > FM_FFT_NORM_FORWARD)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: norm = %d, expected 0 (backward), 1 (ortho) or 2 (forward)",
                       opts->norm);
    if (opts->effort < FM_FFT_EFFORT_ESTIMATE || opts->effort > FM_FFT_EFFORT_PATIENT)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: effort = %d, expected 0 (estimate), 1 (measure) or 2 (patient)",
                       opts->effort);
    if (opts->gpu_prolog < FM_FFT_PROLOG_AUTO || opts->gpu_prolog > FM_FFT_PROLOG_KERNEL)
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "fft: gpu_prolog = %d, expected 0 (auto), 1 (pass), 2 (callback) or 3 (kernel)",
                       opts->gpu_prolog);
    if (opts->execution < FM_EXECUTION_AUTO || opts->execution > FM_EXECUTION_BEST || opts->device_id < 0 ||
        opts->num_threads < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: execution = %d, device_id = %d, num_threads = %d; expected "
                       "execution 0..3 (auto, cpu, cuda, best) and values >= 0", opts->execution, opts->device_id, opts->num_threads);
    if (opts->num_threads > FM_MAX_THREADS)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: num_threads = %d, expected 0 (the library setting) to %d",
                       opts->num_threads, FM_MAX_THREADS);
    const unsigned all_ops = FM_FFT_OP_SCALE | FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ | FM_FFT_OP_CALLBACK;
    for (int c = 0; c < 2; c++) {
        const fm_fft_chain *ch = c ? &opts->epilog : &opts->prolog;
        const char *cn = c ? "epilog" : "prolog";
        if (ch->ops & ~all_ops)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: %s has unknown ops bits 0x%x", cn, ch->ops & ~all_ops);
        if ((ch->ops & FM_FFT_OP_SCALE) && !(isfinite(ch->scale[0]) && isfinite(ch->scale[1])))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: %s scale = (%g, %g) is not finite", cn, ch->scale[0],
                           ch->scale[1]);
        int has_array = ts[c ? FM_FFT_EPILOG : FM_FFT_PROLOG] != NULL;
        if (has_array && !(ch->ops & (FM_FFT_OP_MULTIPLY | FM_FFT_OP_CALLBACK)))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: %s_array was given but the %s neither multiplies nor has a "
                           "callback", cn, cn);
        if ((ch->ops & FM_FFT_OP_MULTIPLY) && !has_array)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: the %s multiplies by an array but %s_array is NULL", cn, cn);
        if ((ch->ops & FM_FFT_OP_CALLBACK) && (s = check_callback(cn, ch)) != FM_OK)
            return s;
    }
    return FM_OK;
}

static fm_status check_dtypes(int kind, fm_dtype it, fm_dtype ot)
{
    int ok;
    switch (kind) {
    case FM_FFT_C2C: ok = (it == FM_C32 || it == FM_C64 || it == FM_C128 || it == FM_CLD) && ot == it; break;
    case FM_FFT_R2C: ok = (it == FM_F16 || it == FM_F32 || it == FM_F64 || it == FM_LD) && ot == complex_of(it); break;
    default: ok = (it == FM_C32 || it == FM_C64 || it == FM_C128 || it == FM_CLD) && ot == real_of(it); break;
    }
    if (ok)
        return FM_OK;
    static const char *const want[3] = {"c64 -> c64, c128 -> c128, cld -> cld (cpu) or c32 -> c32 (cuda)",
                                        "f32 -> c64, f64 -> c128, ld -> cld (cpu) or f16 -> c32 (cuda)",
                                        "c64 -> f32, c128 -> f64, cld -> ld (cpu) or c32 -> f16 (cuda)"};
    static const char *const kinds[3] = {"c2c", "r2c", "c2r"};
    return fm_fail(FM_ERR_DTYPE, "fft: %s from %s to %s; expected %s%s", kinds[kind], fm_dtype_name(it),
                   fm_dtype_name(ot), want[kind],
                   kind == FM_FFT_C2C && complex_of(it) != it ? " (a real input wants r2c)"
                   : kind == FM_FFT_R2C && fm_dtype_is_complex(it) ? " (a complex input wants c2c)"
                                                                    : "");
}

/* The transform axes of an nd-dimensional input, normalised: 0 <= axis < nd, the last given
 * kept last (the halved one of r2c / c2r), the others ascending. */
static fm_status resolve_axes(const fm_fft_options *opts, int nd, int *naxes_out, int axes[FM_MAX_NDIM])
{
    int naxes = opts->naxes ? opts->naxes : (nd < 3 ? nd : 3);
    if (naxes < 1 || naxes > nd)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: naxes = %d, expected 1 <= naxes <= ndim = %d", opts->naxes,
                       nd);
    for (int i = 0; i < naxes; i++) {
        int a = opts->naxes ? opts->axes[i] : nd - naxes + i;
        if (a < -nd || a >= nd)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: axes[%d] = %d is out of range for %d dimensions", i, a, nd);
        axes[i] = a < 0 ? a + nd : a;
        for (int j = 0; j < i; j++)
            if (axes[j] == axes[i])
                return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: axis %d is repeated in axes", axes[i]);
    }
    for (int i = 1; i < naxes - 1; i++)
        for (int j = i; j > 0 && axes[j] < axes[j - 1]; j--) {
            int t = axes[j];
            axes[j] = axes[j - 1];
            axes[j - 1] = t;
        }
    *naxes_out = naxes;
    return FM_OK;
}

/* The transform lengths n[] (c2r: from out) and the extents in and out must have. */
static fm_status check_shapes(const fm_fft_options *opts, const fm_tensor *in, const fm_tensor *out, int naxes,
                              const int *axes, int64_t *n)
{
    for (int i = 0; i < naxes; i++) {
        int a = axes[i];
        int last = i == naxes - 1;
        int64_t ie = in->shape[a], oe = out->shape[a];
        n[i] = opts->kind == FM_FFT_C2R ? oe : ie;
        if (opts->kind == FM_FFT_C2R && last && opts->last_n && oe != opts->last_n)
            return fm_fail(FM_ERR_SHAPE, "fft: c2r out has %lld along axis %d but last_n = %d", (long long)oe, a,
                           (int)opts->last_n);
        int64_t want_out = (opts->kind == FM_FFT_R2C && last) ? ie / 2 + 1 : ie;
        int64_t want_in = (opts->kind == FM_FFT_C2R && last) ? oe / 2 + 1 : oe;
        if (n[i] < 1)
            return fm_fail(FM_ERR_SHAPE, "fft: transform length along axis %d is %lld, expected >= 1", a,
                           (long long)n[i]);
        if (opts->kind == FM_FFT_C2R ? ie != want_in : oe != want_out)
            return fm_fail(FM_ERR_SHAPE, "fft: along axis %d, in has %lld and out %lld; expected %s", a,
                           (long long)ie, (long long)oe,
                           opts->kind == FM_FFT_C2C       ? "equal extents"
                           : opts->kind == FM_FFT_R2C && last ? "out = in / 2 + 1 (r2c)"
                           : opts->kind == FM_FFT_C2R && last ? "in = out / 2 + 1 (c2r: out's extent is n)"
                                                              : "equal extents");
    }
    fm_status s;
    if ((s = fm_tensor_check_distinct(FM_OP_FFT, FM_FFT_OUT, out)) != FM_OK)
        return s;
    for (int d = 0; d < in->ndim; d++) {
        int transformed = 0;
        for (int i = 0; i < naxes; i++)
            transformed |= axes[i] == d;
        if (!transformed && in->shape[d] != out->shape[d])
            return fm_fail(FM_ERR_SHAPE, "fft: batch axis %d has %lld in in but %lld in out", d,
                           (long long)in->shape[d], (long long)out->shape[d]);
    }
    return FM_OK;
}

/* The chains' arrays (of the data's precision, real or complex, broadcast to it) into p. */
static fm_status place_chain_arrays(const fm_tensor *const ts[FM_FFT_NSLOTS], const fm_fft_options *opts,
                                    fm_problem *p)
{
    fm_status s;
    for (int c = 0; c < 2; c++) {
        int slot = c ? FM_FFT_EPILOG : FM_FFT_PROLOG;
        const fm_tensor *arr = ts[slot];
        if (!arr)
            continue;
        const fm_tensor *target = c ? ts[FM_FFT_OUT] : ts[FM_FFT_IN];
        if (!((c ? opts->epilog.ops : opts->prolog.ops) & FM_FFT_OP_MULTIPLY)) {
            /* only passed to the callback: any dtype and shape */
            if ((s = check_desc(slot_names[slot], arr)) != FM_OK)
                return fm_about_slot(s, slot);
            p->t[slot] = *arr;
            p->t[slot].data = NULL;
            continue;
        }
        fm_dtype r = real_of(target->dtype);
        int real_data = !fm_dtype_is_complex(target->dtype);
        if (!(arr->dtype == r || (!real_data && arr->dtype == complex_of(r))))
            return fm_about_slot(fm_fail(FM_ERR_DTYPE, "fft: %s has dtype %s, expected %s%s%s", slot_names[slot],
                                      fm_dtype_word(arr->dtype), fm_dtype_word(r), real_data ? "" : " or ",
                                      real_data ? " (the data it multiplies is real)" : fm_dtype_word(complex_of(r))),
                              slot);
        if ((s = check_desc(slot_names[slot], arr)) != FM_OK ||
            (s = expand_array(slot_names[slot], arr, target, &p->t[slot])) != FM_OK)
            return fm_about_slot(s, slot);
    }
    return FM_OK;
}

/* The chains' scales and the norm folded where that is exact, the ops left to apply. */
static fm_status fold_scales(const fm_fft_options *opts, double norm, fm_fft_params *fp)
{
    fp->prolog_ops = opts->prolog.ops;
    fp->epilog_ops = opts->epilog.ops;
    fp->prolog_scale[0] = 1, fp->prolog_scale[1] = 0;
    fp->epilog_scale[0] = 1, fp->epilog_scale[1] = 0;
    if (opts->prolog.ops & FM_FFT_OP_SCALE)
        memcpy(fp->prolog_scale, opts->prolog.scale, sizeof fp->prolog_scale);
    if (opts->epilog.ops & FM_FFT_OP_SCALE)
        memcpy(fp->epilog_scale, opts->epilog.scale, sizeof fp->epilog_scale);
    /* real data takes no imaginary scale and no conj */
    if (opts->kind == FM_FFT_R2C) {
        if (fp->prolog_scale[1] != 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: r2c input is real: the prolog scale must be real, got "
                           "(%g, %g)", fp->prolog_scale[0], fp->prolog_scale[1]);
        fp->prolog_ops &= ~(unsigned)FM_FFT_OP_CONJ;
    }
    if (opts->kind == FM_FFT_C2R) {
        if (fp->epilog_scale[1] != 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: c2r output is real: the epilog scale must be real, got "
                           "(%g, %g)", fp->epilog_scale[0], fp->epilog_scale[1]);
        fp->epilog_ops &= ~(unsigned)FM_FFT_OP_CONJ;
    }
    /* the norm is real: it commutes with everything; a prolog scale alone commutes with the
     * transform when the transform is linear over it (c2r needs a real one) */
    fp->epilog_scale[0] *= norm, fp->epilog_scale[1] *= norm;
    if (fp->prolog_ops == FM_FFT_OP_SCALE && (opts->kind != FM_FFT_C2R || fp->prolog_scale[1] == 0)) {
        double a = fp->epilog_scale[0], b = fp->epilog_scale[1], c = fp->prolog_scale[0], d = fp->prolog_scale[1];
        fp->epilog_scale[0] = a * c - b * d, fp->epilog_scale[1] = a * d + b * c;
        fp->prolog_scale[0] = 1, fp->prolog_scale[1] = 0;
        fp->prolog_ops = 0;
    }
    /* ... and an epilog that is only a scale (the norm included) moves into a prolog that
     * multiplies anyway, saving a pass over the output: FFT(x * w) * s = FFT(x * w * s), and
     * with the prolog's conj, FFT(conj(x * w)) * s = FFT(conj(x * w * conj(s))). Real input
     * (r2c) takes only a real s. */
    if (!(fp->epilog_ops & ~(unsigned)FM_FFT_OP_SCALE) && (fp->prolog_ops & FM_FFT_OP_MULTIPLY) &&
        !(fp->prolog_ops & FM_FFT_OP_CALLBACK) && /* the user's function need not be linear */
        (fp->epilog_scale[0] != 1 || fp->epilog_scale[1] != 0) &&
        (opts->kind == FM_FFT_C2C || fp->epilog_scale[1] == 0)) {
        double c = fp->epilog_scale[0], d = (fp->prolog_ops & FM_FFT_OP_CONJ) ? -fp->epilog_scale[1] : fp->epilog_scale[1];
        double a = fp->prolog_scale[0], b = fp->prolog_scale[1];
        fp->prolog_scale[0] = a * c - b * d, fp->prolog_scale[1] = a * d + b * c;
        fp->epilog_scale[0] = 1, fp->epilog_scale[1] = 0;
        fp->epilog_ops = 0;
    }
    fp->prolog_ops &= ~(unsigned)FM_FFT_OP_SCALE;
    fp->epilog_ops &= ~(unsigned)FM_FFT_OP_SCALE;
    if (fp->prolog_scale[0] != 1 || fp->prolog_scale[1] != 0)
        fp->prolog_ops |= FM_FFT_OP_SCALE;
    if (fp->epilog_scale[0] != 1 || fp->epilog_scale[1] != 0)
        fp->epilog_ops |= FM_FFT_OP_SCALE;
    return FM_OK;
}

/* The parameters: kind, axes (past the third in axes_more), lengths, settings, the chains. */
static fm_status set_params(fm_context *ctx, const fm_fft_options *opts, int naxes, const int *axes,
                            const int64_t *n, fm_problem *p)
{
    fm_fft_params *fp = &p->u.fft;
    fp->kind = opts->kind;
    fp->inverse = opts->inverse;
    fp->naxes = naxes;
    double total = 1;
    for (int i = 0; i < naxes; i++) {
        if (i < 3)
            fp->axes[i] = axes[i], fp->n[i] = n[i];
        else
            fp->axes_more[i - 3] = (int8_t)axes[i];
        total *= (double)n[i];
    }
    fp->norm = opts->norm;
    fp->effort = opts->effort;
    fp->gpu_prolog = fm_fft_prolog_mode_setting(ctx ? fm_context_settings(ctx) : NULL, opts->gpu_prolog);
    fp->num_threads = ctx ? fm_context_threads_for(ctx, opts->num_threads) : 0;
    double norm = opts->norm == FM_FFT_NORM_ORTHO                      ? 1.0 / sqrt(total)
                  : (opts->norm == FM_FFT_NORM_FORWARD) != !!opts->inverse ? 1.0 / total
                                                                           : 1.0;
    if (opts->prolog.ops & FM_FFT_OP_CALLBACK)
        callback_digest(&opts->prolog, fp->prolog_cb);
    if (opts->epilog.ops & FM_FFT_OP_CALLBACK)
        callback_digest(&opts->epilog, fp->epilog_cb);
    fm_status s = fold_scales(opts, norm, fp);
    if (s != FM_OK)
        return s;
    if ((!fp->prolog_ops && !fp->epilog_ops) || p->exec_device.type != FM_DEVICE_CUDA)
        fp->gpu_prolog = FM_FFT_PROLOG_AUTO; /* nothing to place (or the cpu): one plan key */
    return FM_OK;
}

static fm_status build_fields(fm_context *ctx, const fm_tensor *const ts[FM_FFT_NSLOTS], const fm_fft_options *opts,
                              fm_problem *p)
{
    fm_status s;
    if (!ts[FM_FFT_IN] || !ts[FM_FFT_OUT])
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: %s is NULL, expected a tensor descriptor",
                       ts[FM_FFT_IN] ? "out" : "in");
    const fm_tensor *in = ts[FM_FFT_IN], *out = ts[FM_FFT_OUT]; /* opts: never NULL (generic defaults) */
    if ((s = check_desc("in", in)) != FM_OK || (s = check_desc("out", out)) != FM_OK ||
        (s = check_options(ts, opts)) != FM_OK || (s = check_dtypes(opts->kind, in->dtype, out->dtype)) != FM_OK)
        return s;
    if (out->ndim != in->ndim)
        return fm_fail(FM_ERR_SHAPE, "fft: in has %d dimensions but out has %d", in->ndim, out->ndim);
    int naxes = 0, axes[FM_MAX_NDIM];
    int64_t n[FM_MAX_NDIM];
    if ((s = resolve_axes(opts, in->ndim, &naxes, axes)) != FM_OK ||
        (s = check_shapes(opts, in, out, naxes, axes, n)) != FM_OK)
        return s;
    /* the header is fm_problem_begin's (zeroed, names, roles) */
    if (opts->kind == FM_FFT_C2C)
        p->inplace_partner[FM_FFT_OUT] = FM_FFT_IN;
    p->t[FM_FFT_IN] = *in;
    p->t[FM_FFT_OUT] = *out;
    p->t[FM_FFT_IN].data = p->t[FM_FFT_OUT].data = NULL;
    if ((s = place_chain_arrays(ts, opts, p)) != FM_OK ||
        (s = fm_problem_place_devices(ctx, &fm_operation_fft, ts, opts, opts->execution, opts->device_id, p)) != FM_OK)
        return s;
    if (p->exec_device.type == FM_DEVICE_CUDA && (in->dtype == FM_LD || in->dtype == FM_CLD))
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fft: a long-double (%s) transform runs on the cpu only (FFTW's "
                       "libfftw3l; cuFFT has no long double)", fm_dtype_name(in->dtype));
    for (int c = 0; c < 2; c++) /* a callback needs cuda */
        if (((c ? opts->epilog.ops : opts->prolog.ops) & FM_FFT_OP_CALLBACK) && p->exec_device.type != FM_DEVICE_CUDA)
            return fm_fail(FM_ERR_NOT_SUPPORTED, "fft: the %s's CUDA C callback runs only on the GPU, and this "
                           "transform runs on the cpu (pass GPU arrays or execution='cuda')", c ? "epilog" : "prolog");
    return set_params(ctx, opts, naxes, axes, n, p);
}

static const uint8_t slot_roles[FM_FFT_NSLOTS] = {FM_SLOT_INPUT, FM_SLOT_OUTPUT, FM_SLOT_INPUT, FM_SLOT_INPUT};

static void options_init(void *o) { fm_fft_options_init(o); }

static fm_status build(fm_context *ctx, const fm_tensor *const *ts, const void *opts_, fm_problem *p,
                       fm_attachments *att)
{
    const fm_fft_options *opts = opts_;
    fm_status s = build_fields(ctx, ts, opts, p);
    if (s != FM_OK)
        return s;
    if (opts->prolog.ops & FM_FFT_OP_CALLBACK) {
        att->text[FM_FFT_ATTACH_PROLOG_SOURCE] = opts->prolog.source;
        att->text[FM_FFT_ATTACH_PROLOG_SYMBOL] = opts->prolog.symbol;
    }
    if (opts->epilog.ops & FM_FFT_OP_CALLBACK) {
        att->text[FM_FFT_ATTACH_EPILOG_SOURCE] = opts->epilog.source;
        att->text[FM_FFT_ATTACH_EPILOG_SYMBOL] = opts->epilog.symbol;
    }
    return FM_OK;
}

/* out's descriptor for in and the options: the dtype the kind maps in's to, the shape with the
 * last transformed axis n -> n/2 + 1 (r2c) or m -> options.last_n, else 2 (m - 1) (c2r); then
 * every check of planning made against it. */
static fm_status output_specs(const fm_tensor *const *ts, const void *opts_, fm_tensor *specs, uint32_t *written)
{
    const fm_fft_options *opts = opts_; /* never NULL */
    const fm_tensor *in = ts[FM_FFT_IN];
    if (!in)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft: in is NULL, expected a tensor descriptor");
    fm_status s = check_desc("in", in);
    if (s != FM_OK)
        return s;
    const int nd = in->ndim; /* an unknown kind is build_fields' error */
    int naxes = opts->naxes ? opts->naxes : (nd < 3 ? nd : 3);
    int last = naxes >= 1 && naxes <= nd ? (opts->naxes ? opts->axes[naxes - 1] : nd - 1) : nd - 1;
    if (last < 0)
        last += nd;
    fm_tensor out = *in;
    out.data = NULL;
    out.dtype = opts->kind == FM_FFT_C2C ? in->dtype : opts->kind == FM_FFT_R2C ? complex_of(in->dtype) : real_of(in->dtype);
    if (last >= 0 && last < nd) {
        const int64_t e = in->shape[last];
        if (opts->kind != FM_FFT_R2C && opts->kind != FM_FFT_C2C && opts->last_n <= 0 && e > INT64_MAX / 2)
            return fm_fail(FM_ERR_TOO_LARGE, "fft: the c2r output length 2 * (n - 1) for in.shape[%d] = %lld is "
                           "past a 64-bit size; expected n <= %lld", last, (long long)e, (long long)(INT64_MAX / 2));
        out.shape[last] = opts->kind == FM_FFT_R2C   ? e / 2 + 1
                          : opts->kind == FM_FFT_C2C ? e
                          : opts->last_n > 0         ? opts->last_n
                                                     : 2 * (e - 1);
    }
    fm_device dev;
    if ((s = fm_tensor_resolve_device("fft", "in", in, &dev)) != FM_OK)
        return s;
    fm_tensor_init(&out, NULL, dev, out.dtype, nd, out.shape, NULL); /* C order (it copies out.shape first) */
    const fm_tensor *all[FM_FFT_NSLOTS] = {in, &out, ts[FM_FFT_PROLOG], ts[FM_FFT_EPILOG]};
    fm_problem p = {0};
    if ((s = build_fields(NULL, all, opts, &p)) != FM_OK) /* every other check, against this out */
        return s;
    specs[FM_FFT_OUT] = out;
    *written = 1u << FM_FFT_OUT;
    return FM_OK;
}

/* cpu_path as a wisdom file holds it: one of the ways FUSEMATH_FFT_CPU_PATH names. */
static fm_status check_tunables(const int32_t *v)
{
    if (v[0] < FM_FFT_CPU_PATH_DIRECT || v[0] > FM_FFT_CPU_PATH_INPLACE)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "cpu_path %d; expected %d (direct), %d (chunks) or %d (inplace)", v[0],
                       FM_FFT_CPU_PATH_DIRECT, FM_FFT_CPU_PATH_CHUNKS, FM_FFT_CPU_PATH_INPLACE);
    return FM_OK;
}

/* FM_EXECUTION_BEST: 5 N log2(n) for N complex points in transforms of n points (a real
 * transform: half the points); long double runs on the cpu only, a CUDA C callback on cuda only. */
static double work(const fm_tensor *const *ts, const void *opts_, fm_dtype *dtype, unsigned *devices, int *threads)
{
    const fm_fft_options *opts = opts_;
    const fm_tensor *in = ts[FM_FFT_IN];
    *threads = opts->num_threads;
    int naxes = 0, axes[FM_MAX_NDIM];
    if (!in || resolve_axes(opts, in->ndim, &naxes, axes) != FM_OK) {
        fm_clear_error();
        return -1;
    }
    const fm_tensor *cplx = opts->kind == FM_FFT_C2R ? in : ts[FM_FFT_OUT] ? ts[FM_FFT_OUT] : in;
    double n = 1;
    for (int i = 0; i < naxes; i++)
        n *= (double)(opts->kind == FM_FFT_C2R && i == naxes - 1 && ts[FM_FFT_OUT]
                          ? ts[FM_FFT_OUT]->shape[axes[i]]
                          : in->shape[axes[i]]);
    *dtype = cplx->dtype;
    if (in->dtype == FM_LD || in->dtype == FM_CLD)
        *devices &= 1u << FM_DEVICE_CPU;
    if ((opts->prolog.ops | opts->epilog.ops) & FM_FFT_OP_CALLBACK)
        *devices &= 1u << FM_DEVICE_CUDA;
    return 5.0 * (double)fm_tensor_numel(cplx) * log2(n > 2 ? n : 2);
}

static double problem_work(const fm_problem *p, fm_dtype *dtype, int *variant)
{
    const fm_fft_params *f = &p->u.fft;
    *variant = f->naxes == 1; /* curve() below: a batch of 1-D transforms reads curve 1 */
    const fm_tensor *cplx = &p->t[f->kind == FM_FFT_C2R ? FM_FFT_IN : FM_FFT_OUT];
    double n = 1;
    for (int i = 0; i < f->naxes && i < 3; i++)
        n *= (double)f->n[i];
    *dtype = cplx->dtype;
    return 5.0 * (double)fm_tensor_numel(cplx) * log2(n > 2 ? n : 2);
}

/* The rate curve: 1 for a transform over one axis (batches of independent 1-D transforms: each fits
 * in cache and the batch parallelises whole), 0 for 2-D and 3-D ones (passes over strided axes). */
static int curve(const fm_tensor *const *ts, const void *opts_)
{
    const fm_fft_options *opts = opts_;
    int naxes = 0, axes[FM_MAX_NDIM];
    if (!ts[FM_FFT_IN] || resolve_axes(opts, ts[FM_FFT_IN]->ndim, &naxes, axes) != FM_OK) {
        fm_clear_error();
        return 0;
    }
    return naxes == 1;
}

/* fm_context_calibrate: square c64 (and in full, c128) 2-D transforms, curve 0, then batches of 4096-point
 * 1-D transforms, curve 1 (on the H200 host's cpu a batch of 4096 of them ran 3x the 2-D rate per unit
 * of work: one curve for both sent best to the GPU where the cpu was 2.5x faster). */
static int calibration_problem(int index, int quick, int execution, fm_tensor *t, void *opts, uint32_t *slots)
{
    static const int64_t quick_n[] = {64, 512, 2048}, full_n[] = {32, 128, 512, 1024, 2048, 4096};
    static const int64_t quick_b[] = {16, 256, 4096}, full_b[] = {4, 64, 512, 4096};
    const int count = quick ? 3 : 6, batches = quick ? 3 : 4, ndt = quick ? 1 : 2;
    if (index < 0 || index >= ndt * (count + batches))
        return 0;
    const int one_axis = index >= ndt * count, i = one_axis ? index - ndt * count : index, per = one_axis ? batches : count;
    const int64_t n = one_axis ? 4096 : (quick ? quick_n : full_n)[i % count];
    const int64_t shape[2] = {one_axis ? (quick ? quick_b : full_b)[i % batches] : n, n};
    const fm_device dev = {execution == FM_EXECUTION_CUDA ? FM_DEVICE_CUDA : FM_DEVICE_CPU, 0};
    const fm_dtype dt = i < per ? FM_C64 : FM_C128;
    fm_tensor_init(&t[FM_FFT_IN], NULL, dev, dt, 2, shape, NULL);
    fm_tensor_init(&t[FM_FFT_OUT], NULL, dev, dt, 2, shape, NULL);
    fm_fft_options *o = opts;
    fm_fft_options_init(o);
    o->naxes = one_axis ? 1 : 2;
    o->axes[0] = one_axis ? 1 : 0, o->axes[1] = 1;
    o->execution = execution;
    *slots = 1u << FM_FFT_IN | 1u << FM_FFT_OUT;
    return 1;
}

/* Pipelined transfers (core/src/pipeline.c): slabs of the outermost batch axis (the first axis not
 * transformed) of in and out, and of the chains' arrays where they have that axis' extent (else
 * they broadcast and are read whole). More than 3 axes run as steps (fft_axis_split.c): not cut. */
static int64_t chunk(const fm_problem *p, int64_t lo, int64_t hi, fm_problem *sub, fm_chunk *c, const char **why)
{
    const fm_fft_params *f = &p->u.fft;
    const fm_tensor *in = &p->t[FM_FFT_IN];
    if (f->naxes > 3)
        return *why = "transforms over more than 3 axes run as steps", 0;
    if ((f->prolog_ops | f->epilog_ops) & FM_FFT_OP_CALLBACK) /* a slab's plan would count from 0 */
        return *why = "a callback's offsets count from the whole operand's first element", 0;
    int axis = -1; /* the first axis not transformed; past batch axes of one index ((1, 8, n) slabs of 8) */
    for (int i = 0; i < in->ndim && (axis < 0 || in->shape[axis] == 1); i++) {
        int transformed = 0;
        for (int j = 0; j < f->naxes; j++)
            transformed |= f->axes[j] == i;
        if (!transformed)
            axis = i;
    }
    if (axis < 0)
        return *why = "every axis is transformed: no batch axis to cut", 0;
    const int64_t e = in->shape[axis];
    if (sub) /* in, out and the chains' arrays that have the axis; arrays that broadcast are read whole */
        fm_chunk_cut_slots(p, ~0u, in->ndim, axis, e, lo, hi, sub, c);
    return e;
}

const fm_operation fm_operation_fft = {
    .op = FM_OP_FFT,
    .name = "fft",
    .nslots = FM_FFT_NSLOTS,
    .slot_names = slot_names,
    .slot_roles = slot_roles,
    .options_size = sizeof(fm_fft_options),
    .options_init = options_init,
    .build = build,
    .output_specs = output_specs,
    .plan_steps = fm_fft_plan_steps,
    .ntunables = 1,
    .tunables = {offsetof(fm_fft_params, cpu_path)},
    .check_tunables = check_tunables,
    .work = work,
    .problem_work = problem_work,
    .calibration_problem = calibration_problem,
    .curve = curve,
    .chunk = chunk,
    .cpu_threads = offsetof(fm_fft_params, num_threads),
};

fm_status fm_fft_plan(fm_context *ctx, const fm_tensor *in, const fm_tensor *out, const fm_tensor *prolog_array,
                      const fm_tensor *epilog_array, const fm_fft_options *opts, fm_plan **plan)
{
    const fm_tensor *ts[FM_FFT_NSLOTS] = {in, out, prolog_array, epilog_array};
    return fm_plan_create(ctx, FM_OP_FFT, ts, FM_FFT_NSLOTS, opts, plan);
}

fm_status fm_fft(fm_context *ctx, const fm_tensor *in, const fm_tensor *out, const fm_tensor *prolog_array,
                 const fm_tensor *epilog_array, const fm_fft_options *opts, void *stream)
{
    const fm_tensor *ts[FM_FFT_NSLOTS] = {in, out, prolog_array, epilog_array};
    return fm_run(ctx, FM_OP_FFT, ts, FM_FFT_NSLOTS, opts, NULL, stream);
}
