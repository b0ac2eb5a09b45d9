/* solve_problem.c : validate a dense-solver call (the routine, its operands, the options) into a
 * normalised fm_problem. One table (routines[]) says per routine which inputs it reads, which
 * outputs it writes and how many axes each operand's matrix / vector / scalar has; the batch is
 * the broadcast of the inputs' leading axes (numpy.linalg's rule), which outputs have exactly.
 * Output descriptors come from the same code (output_specs), so front ends allocate from them. */
#include "operation.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const slot_names[FM_SOLVE_NSLOTS] = {"a", "b", "ipiv", "x", "factor",
                                                        "pivots", "info", "w", "aux", "rank"};
static const uint8_t slot_roles[FM_SOLVE_NSLOTS] = {
    FM_SLOT_INPUT,  FM_SLOT_INPUT,  FM_SLOT_INPUT,  FM_SLOT_OUTPUT, FM_SLOT_OUTPUT,
    FM_SLOT_OUTPUT, FM_SLOT_OUTPUT, FM_SLOT_OUTPUT, FM_SLOT_OUTPUT, FM_SLOT_OUTPUT};

#define BIT(s) (1u << (s))
enum { SQUARE = 1, RHS_N = 2 }; /* a must be square; b has n rows (else m: gelsd) */

/* Per routine: its name (numpy / scipy's), required inputs, optional inputs, outputs. */
static const struct {
    const char *name;
    uint32_t need, may, out;
    unsigned flags;
} routines[FM_SOLVE_ROUTINE_COUNT_] = {
    [FM_SOLVE_GESV] = {"solve", BIT(FM_SOLVE_A) | BIT(FM_SOLVE_B), 0, BIT(FM_SOLVE_X), SQUARE},
    [FM_SOLVE_GETRF] = {"lu_factor", BIT(FM_SOLVE_A), 0, BIT(FM_SOLVE_FACTOR) | BIT(FM_SOLVE_PIVOTS), SQUARE},
    [FM_SOLVE_GETRS] = {"lu_solve", BIT(FM_SOLVE_A) | BIT(FM_SOLVE_B) | BIT(FM_SOLVE_IPIV), 0, BIT(FM_SOLVE_X),
                        SQUARE},
    [FM_SOLVE_POTRF] = {"cholesky", BIT(FM_SOLVE_A), 0, BIT(FM_SOLVE_FACTOR), SQUARE},
    [FM_SOLVE_POTRS] = {"cho_solve", BIT(FM_SOLVE_A) | BIT(FM_SOLVE_B), 0, BIT(FM_SOLVE_X), SQUARE},
    [FM_SOLVE_TRTRS] = {"solve_triangular", BIT(FM_SOLVE_A) | BIT(FM_SOLVE_B), 0, BIT(FM_SOLVE_X), SQUARE},
    [FM_SOLVE_INV] = {"inv", BIT(FM_SOLVE_A), 0, BIT(FM_SOLVE_X), SQUARE},
    [FM_SOLVE_DET] = {"det", BIT(FM_SOLVE_A), BIT(FM_SOLVE_IPIV), BIT(FM_SOLVE_W), SQUARE},
    [FM_SOLVE_SLOGDET] = {"slogdet", BIT(FM_SOLVE_A), BIT(FM_SOLVE_IPIV), BIT(FM_SOLVE_W) | BIT(FM_SOLVE_AUX),
                          SQUARE},
    [FM_SOLVE_SYEVD] = {"eigh", BIT(FM_SOLVE_A), 0, BIT(FM_SOLVE_W) | BIT(FM_SOLVE_X), SQUARE},
    [FM_SOLVE_GEQRF] = {"qr", BIT(FM_SOLVE_A), 0, BIT(FM_SOLVE_X) | BIT(FM_SOLVE_FACTOR), 0},
    [FM_SOLVE_GESDD] = {"svd", BIT(FM_SOLVE_A), 0, BIT(FM_SOLVE_X) | BIT(FM_SOLVE_FACTOR) | BIT(FM_SOLVE_W), 0},
    [FM_SOLVE_GELSD] = {"lstsq", BIT(FM_SOLVE_A) | BIT(FM_SOLVE_B), 0,
                        BIT(FM_SOLVE_X) | BIT(FM_SOLVE_W) | BIT(FM_SOLVE_AUX) | BIT(FM_SOLVE_RANK), 0},
};

const char *fm_solve_routine_name(int routine)
{
    return routine >= 0 && routine < FM_SOLVE_ROUTINE_COUNT_ ? routines[routine].name : "unknown";
}

void fm_solve_options_init(fm_solve_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->check = 1;
    o->rcond = -1.0;
}

static fm_status check_options(const fm_solve_options *o)
{
    for (int i = 0; i < (int)(sizeof o->reserved / sizeof o->reserved[0]); i++)
        if (o->reserved[i] != 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: options.reserved[%d] = %d, expected 0 "
                           "(fm_solve_options_init sets it)", i, (int)o->reserved[i]);
    if (o->routine < 0 || o->routine >= FM_SOLVE_ROUTINE_COUNT_)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: options.routine = %d, expected 0..%d (fm_solve_routine)",
                       (int)o->routine, FM_SOLVE_ROUTINE_COUNT_ - 1);
    const struct { const char *name; int32_t v, hi; } flags[] = {
        {"uplo", o->uplo, 1}, {"transpose", o->transpose, 2}, {"unit_diagonal", o->unit_diagonal, 1},
        {"check", o->check, 1}, {"check_finite", o->check_finite, 1}, {"qr_mode", o->qr_mode, 2},
        {"full_matrices", o->full_matrices, 1}, {"values_only", o->values_only, 1},
        {"refine", o->refine, FM_SOLVE_REFINE_FP16}, {"trusted_factor", o->trusted_factor, 1}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flags[i].v < 0 || flags[i].v > flags[i].hi)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: options.%s = %d, expected 0..%d", flags[i].name,
                           (int)flags[i].v, (int)flags[i].hi);
    if (!(o->rcond == o->rcond))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: options.rcond is NaN, expected a number (< 0: machine "
                       "epsilon)");
    if (o->execution < FM_EXECUTION_AUTO || o->execution > FM_EXECUTION_BEST || o->device_id < 0 ||
        o->num_threads < 0 || o->num_threads > FM_MAX_THREADS)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: execution = %d, device_id = %d, num_threads = %d; "
                       "expected execution 0..3 (auto, cpu, cuda, best), device_id >= 0 and 0 <= num_threads <= %d",
                       (int)o->execution, (int)o->device_id, (int)o->num_threads, FM_MAX_THREADS);
    return FM_OK;
}

/* The outputs the routine writes with these options. */
static uint32_t written_mask(const fm_solve_options *o)
{
    uint32_t w = routines[o->routine].out;
    if (o->routine == FM_SOLVE_SYEVD && o->values_only)
        w &= ~BIT(FM_SOLVE_X);
    if (o->routine == FM_SOLVE_GESDD && o->values_only)
        w &= ~(BIT(FM_SOLVE_X) | BIT(FM_SOLVE_FACTOR));
    if (o->routine == FM_SOLVE_GEQRF && o->qr_mode == 2)
        w &= ~BIT(FM_SOLVE_X);
    if (!o->check)
        w |= BIT(FM_SOLVE_INFO);
    return w;
}

static const char *shape_text(const fm_tensor *t, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, t->ndim == 1 ? ",)" : ")");
    return buf;
}

static fm_status check_float_dtype(const char *routine, const char *name, fm_dtype dt)
{
    if (dt == FM_F32 || dt == FM_F64 || dt == FM_C64 || dt == FM_C128)
        return FM_OK;
    if (dt == FM_F16 || dt == FM_BF16 || dt == FM_C32)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "solve: %s has dtype %s, which %s does not support (LAPACK and "
                       "cuSOLVER have no half-precision routines); expected float32, float64, complex64 or "
                       "complex128", name, fm_dtype_word(dt), routine);
    return fm_fail(FM_ERR_DTYPE, "solve: %s has dtype %s, expected float32, float64, complex64 or complex128 "
                   "for %s (integers: convert to float64 first, as numpy.linalg does)", name, fm_dtype_word(dt),
                   routine);
}

static fm_dtype real_of(fm_dtype dt) { return dt == FM_C64 ? FM_F32 : dt == FM_C128 ? FM_F64 : dt; }

/* Broadcast the batch axes of input t (core trailing axes) into params' batch. */
static fm_status broadcast_batch(fm_solve_params *sp, const char *routine, const char *name, const fm_tensor *t,
                                 int core)
{
    const int nb = t->ndim - core;
    if (nb > sp->batch_ndim) {
        for (int i = sp->batch_ndim - 1; i >= 0; i--)
            sp->batch_shape[i + nb - sp->batch_ndim] = sp->batch_shape[i];
        for (int i = 0; i < nb - sp->batch_ndim; i++)
            sp->batch_shape[i] = 1;
        sp->batch_ndim = nb;
    }
    for (int i = 0; i < nb; i++) {
        int64_t *d = &sp->batch_shape[sp->batch_ndim - nb + i];
        const int64_t e = t->shape[i];
        if (e == *d || e == 1)
            continue;
        if (*d != 1) {
            char sh[160];
            return fm_fail(FM_ERR_SHAPE, "solve: %s has shape %s, whose batch axis %d (extent %lld) does not "
                           "broadcast with the other operands' (%lld) in %s", name, shape_text(t, sh, sizeof sh),
                           i, (long long)e, (long long)*d, routine);
        }
        *d = e;
    }
    return FM_OK;
}

/* a and b and ipiv, their dtypes, shapes and the batch. */
static fm_status check_inputs(const fm_tensor *const *ts, const fm_solve_options *o, fm_solve_params *sp)
{
    const char *rn = routines[o->routine].name;
    const fm_tensor *a = ts[FM_SOLVE_A], *b = ts[FM_SOLVE_B], *ip = ts[FM_SOLVE_IPIV];
    fm_status s;
    char sh[160];
    if (!a)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: a is NULL, expected the matrix of %s", rn);
    if ((s = fm_problem_check_descriptor(&fm_operation_solve, "a", a, 0)) != FM_OK)
        return s;
    if (a->ndim < 2)
        return fm_fail(FM_ERR_SHAPE, "solve: a is %d-dimensional, expected at least 2 dimensions (..., %s) for %s",
                       (int)a->ndim, routines[o->routine].flags & SQUARE ? "n, n" : "m, n", rn);
    if ((s = check_float_dtype(rn, "a", a->dtype)) != FM_OK)
        return s;
    sp->m = a->shape[a->ndim - 2];
    sp->n = a->shape[a->ndim - 1];
    if ((routines[o->routine].flags & SQUARE) && sp->m != sp->n)
        return fm_fail(FM_ERR_SHAPE, "solve: a has shape %s, expected square matrices (..., n, n) for %s "
                       "(the last two axes equal)", shape_text(a, sh, sizeof sh), rn);
    if ((s = broadcast_batch(sp, rn, "a", a, 2)) != FM_OK)
        return s;
    if (b) {
        if ((s = fm_problem_check_descriptor(&fm_operation_solve, "b", b, 0)) != FM_OK)
            return s;
        if (b->ndim < 2)
            return fm_fail(FM_ERR_SHAPE, "solve: b is %d-dimensional, expected (..., %lld, k) for %s (a vector "
                           "b is a column: (%lld, 1))", (int)b->ndim, (long long)sp->m, rn, (long long)sp->m);
        if (b->dtype != a->dtype)
            return fm_fail(FM_ERR_DTYPE, "solve: b has dtype %s but a has %s, expected the same dtype for %s",
                           fm_dtype_word(b->dtype), fm_dtype_word(a->dtype), rn);
        if (b->shape[b->ndim - 2] != sp->m)
            return fm_fail(FM_ERR_SHAPE, "solve: b has shape %s, expected %lld rows (..., %lld, k: a's %s) "
                           "for %s", shape_text(b, sh, sizeof sh), (long long)sp->m, (long long)sp->m,
                           routines[o->routine].flags & SQUARE ? "n" : "m", rn);
        sp->nrhs = b->shape[b->ndim - 1];
        if ((s = broadcast_batch(sp, rn, "b", b, 2)) != FM_OK)
            return s;
    }
    if (ip) {
        if ((s = fm_problem_check_descriptor(&fm_operation_solve, "ipiv", ip, 1)) != FM_OK)
            return s;
        if (ip->dtype != FM_I64)
            return fm_fail(FM_ERR_DTYPE, "solve: ipiv has dtype %s, expected int64 (1-based pivots, as "
                           "lu_factor's) for %s", fm_dtype_word(ip->dtype), rn);
        if (ip->shape[ip->ndim - 1] != sp->n)
            return fm_fail(FM_ERR_SHAPE, "solve: ipiv has shape %s, expected (..., %lld): one pivot per row of a "
                           "for %s", shape_text(ip, sh, sizeof sh), (long long)sp->n, rn);
        if ((s = broadcast_batch(sp, rn, "ipiv", ip, 1)) != FM_OK)
            return s;
    }
    sp->batch_count = 1;
    for (int i = 0; i < sp->batch_ndim; i++) {
        if (sp->batch_shape[i] > 0 && sp->batch_count > INT64_MAX / sp->batch_shape[i])
            return fm_fail(FM_ERR_TOO_LARGE, "solve: the batch of %s has more than 2^63 entries", rn);
        sp->batch_count *= sp->batch_shape[i];
    }
    return FM_OK;
}

/* The output of slot s: its trailing extents and dtype (the batch goes in front). */
static int out_core(const fm_solve_options *o, const fm_solve_params *sp, fm_dtype adt, int s, int64_t *dims,
                    fm_dtype *dt)
{
    const int64_t m = sp->m, n = sp->n, k = m < n ? m : n;
    *dt = adt;
    switch (s) {
    case FM_SOLVE_X:
        switch (o->routine) {
        case FM_SOLVE_INV: case FM_SOLVE_SYEVD: dims[0] = n, dims[1] = n; return 2;
        case FM_SOLVE_GEQRF: dims[0] = m, dims[1] = o->qr_mode == 1 ? m : k; return 2;
        case FM_SOLVE_GESDD: dims[0] = m, dims[1] = o->full_matrices ? m : k; return 2;
        default: dims[0] = n, dims[1] = sp->nrhs; return 2; /* solutions: n x nrhs */
        }
    case FM_SOLVE_FACTOR:
        if (o->routine == FM_SOLVE_GEQRF) {
            dims[0] = o->qr_mode == 1 ? m : k, dims[1] = n;
            return 2;
        }
        if (o->routine == FM_SOLVE_GESDD) {
            dims[0] = o->full_matrices ? n : k, dims[1] = n;
            return 2;
        }
        dims[0] = n, dims[1] = n;
        return 2;
    case FM_SOLVE_PIVOTS: *dt = FM_I64; dims[0] = n; return 1;
    case FM_SOLVE_INFO: *dt = FM_I64; return 0;
    case FM_SOLVE_RANK: *dt = FM_I64; return 0;
    case FM_SOLVE_W:
        if (o->routine == FM_SOLVE_DET)
            return 0;
        *dt = real_of(adt);
        if (o->routine == FM_SOLVE_SLOGDET)
            return 0;
        dims[0] = o->routine == FM_SOLVE_SYEVD ? n : k;
        return 1;
    case FM_SOLVE_AUX:
        if (o->routine == FM_SOLVE_SLOGDET)
            return 0; /* the sign, a's dtype */
        *dt = real_of(adt);
        dims[0] = sp->nrhs;
        return 1;
    default: return 0;
    }
}

static fm_status spec_of(const fm_solve_options *o, const fm_solve_params *sp, const fm_tensor *a, int s,
                         fm_tensor *out)
{
    int64_t shape[FM_MAX_NDIM + 2], dims[2];
    fm_dtype dt;
    const int core = out_core(o, sp, a->dtype, s, dims, &dt);
    if (sp->batch_ndim + core > FM_MAX_NDIM)
        return fm_fail(FM_ERR_SHAPE, "solve: %s would have %d dimensions, more than %d", slot_names[s],
                       sp->batch_ndim + core, FM_MAX_NDIM);
    memcpy(shape, sp->batch_shape, sizeof(int64_t) * (size_t)sp->batch_ndim);
    memcpy(shape + sp->batch_ndim, dims, sizeof(int64_t) * (size_t)core);
    return fm_tensor_init(out, NULL, a->device, dt, sp->batch_ndim + core, shape, NULL);
}

/* A given output: exactly its spec's shape and dtype, C-contiguous. */
static fm_status check_output(const fm_solve_options *o, const fm_solve_params *sp, const fm_tensor *a, int s,
                              const fm_tensor *t)
{
    fm_status st = fm_problem_check_descriptor(&fm_operation_solve, slot_names[s], t, 0);
    fm_tensor want;
    if (st != FM_OK || (st = spec_of(o, sp, a, s, &want)) != FM_OK)
        return st;
    char sh[160], ws[160];
    int same = t->ndim == want.ndim;
    for (int i = 0; same && i < t->ndim; i++)
        same = t->shape[i] == want.shape[i];
    if (!same)
        return fm_fail(FM_ERR_SHAPE, "solve: %s has shape %s, expected %s for %s", slot_names[s],
                       shape_text(t, sh, sizeof sh), shape_text(&want, ws, sizeof ws), routines[o->routine].name);
    if (t->dtype != want.dtype)
        return fm_fail(FM_ERR_DTYPE, "solve: %s has dtype %s, expected %s for %s", slot_names[s],
                       fm_dtype_word(t->dtype), fm_dtype_word(want.dtype), routines[o->routine].name);
    /* C-contiguous; the factor may also be column-major within each matrix (the batch outside in C
     * order), which the routines that read it back (lu_solve, cho_solve) then take without a copy */
    const int nd = t->ndim, fmat = s == FM_SOLVE_FACTOR && nd >= 2 && fm_tensor_numel(t) > 0 &&
                                   t->strides[nd - 2] == 1 && t->strides[nd - 1] == t->shape[nd - 2];
    int64_t step = fmat ? t->shape[nd - 2] * t->shape[nd - 1] : 1;
    for (int i = (fmat ? nd - 2 : nd) - 1; i >= 0 && fm_tensor_numel(t) > 0; i--) {
        if (t->shape[i] > 1 && t->strides[i] != step)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: %s has stride %lld on axis %d, expected %lld (a "
                           "C-contiguous %s%s)", slot_names[s], (long long)t->strides[i], i, (long long)step,
                           slot_names[s], s == FM_SOLVE_FACTOR ? ", or one column-major within each matrix" : "");
        step *= t->shape[i];
    }
    return FM_OK;
}

/* Which operands the routine takes: an input it has no use for, or a missing required one. */
static fm_status check_presence(const fm_tensor *const *ts, const fm_solve_options *o, uint32_t written,
                                int outputs_given)
{
    const char *rn = routines[o->routine].name;
    for (int s = 0; s < FM_SOLVE_NSLOTS; s++) {
        const int in = slot_roles[s] == FM_SLOT_INPUT;
        const uint32_t b = BIT(s);
        if (in && (routines[o->routine].need & b) && !ts[s])
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: %s is NULL, expected a tensor descriptor for %s",
                           slot_names[s], rn);
        if (ts[s] && in && !((routines[o->routine].need | routines[o->routine].may) & b))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: %s is given, but %s takes no %s (expected NULL)",
                           slot_names[s], rn, slot_names[s]);
        if (ts[s] && !in && !(written & b))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: %s is given, but %s writes no %s with these options "
                           "(expected NULL%s)", slot_names[s], rn, slot_names[s],
                           s == FM_SOLVE_INFO ? "; options.check = 0 writes it" : "");
        if (outputs_given && !in && (written & b) && !ts[s])
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "solve: %s is NULL, expected the descriptor of the %s %s "
                           "writes (fm_output_specs gives it)", slot_names[s], slot_names[s], rn);
    }
    return FM_OK;
}

static void fill_params(const fm_solve_options *o, fm_solve_params *sp)
{
    sp->routine = o->routine;
    sp->uplo = o->uplo;
    sp->check = o->check;
    sp->check_finite = o->check_finite;
    /* only the fields a routine reads enter the key: two calls that differ elsewhere share a plan */
    if (o->routine == FM_SOLVE_GETRS || o->routine == FM_SOLVE_TRTRS)
        sp->transpose = o->transpose;
    if (o->routine == FM_SOLVE_TRTRS)
        sp->unit_diagonal = o->unit_diagonal;
    if (o->routine != FM_SOLVE_POTRF && o->routine != FM_SOLVE_POTRS && o->routine != FM_SOLVE_TRTRS &&
        o->routine != FM_SOLVE_SYEVD)
        sp->uplo = 0;
    if (o->routine == FM_SOLVE_GEQRF)
        sp->qr_mode = o->qr_mode;
    if (o->routine == FM_SOLVE_GESDD)
        sp->full_matrices = o->full_matrices;
    if (o->routine == FM_SOLVE_GESDD || o->routine == FM_SOLVE_SYEVD)
        sp->values_only = o->values_only;
    if (o->routine == FM_SOLVE_GESV)
        sp->refine = o->refine;
    if (o->routine == FM_SOLVE_GETRS || o->routine == FM_SOLVE_POTRS || o->routine == FM_SOLVE_TRTRS ||
        o->routine == FM_SOLVE_DET || o->routine == FM_SOLVE_SLOGDET)
        sp->trusted_factor = o->trusted_factor;
    sp->rcond = o->routine == FM_SOLVE_GELSD ? (o->rcond < 0 ? -1.0 : o->rcond) : 0.0;
    static const int8_t core[FM_SOLVE_NSLOTS] = {2, 2, 1, 2, 2, 1, 0, 1, 1, 0};
    memcpy(sp->core_ndim, core, sizeof core);
    if (o->routine == FM_SOLVE_DET || o->routine == FM_SOLVE_SLOGDET)
        sp->core_ndim[FM_SOLVE_W] = 0;
    if (o->routine == FM_SOLVE_SLOGDET)
        sp->core_ndim[FM_SOLVE_AUX] = 0;
}

/* Everything but the devices: options, inputs, outputs; p may be NULL-less scratch. */
static fm_status build_fields(const fm_tensor *const *ts, const fm_solve_options *o, fm_solve_params *sp,
                              int outputs_given)
{
    fm_status s = check_options(o);
    if (s != FM_OK)
        return s;
    const uint32_t w = written_mask(o);
    if ((s = check_presence(ts, o, w, outputs_given)) != FM_OK || (s = check_inputs(ts, o, sp)) != FM_OK)
        return s;
    if (sp->m > INT64_MAX / (sp->n ? sp->n : 1))
        return fm_fail(FM_ERR_TOO_LARGE, "solve: a's matrices have more than 2^63 elements");
    fill_params(o, sp);
    for (int i = 0; i < FM_SOLVE_NSLOTS; i++)
        if (ts[i] && slot_roles[i] == FM_SLOT_OUTPUT &&
            (s = check_output(o, sp, ts[FM_SOLVE_A], i, ts[i])) != FM_OK)
            return s;
    return FM_OK;
}

static void options_init(void *o) { fm_solve_options_init(o); }

static fm_status build(fm_context *ctx, const fm_tensor *const *ts, const void *opts, fm_problem *p,
                       fm_attachments *att)
{
    (void)att;
    const fm_solve_options *o = opts;
    fm_solve_params *sp = &p->u.solve;
    fm_status s = build_fields(ts, o, sp, 1);
    if (s != FM_OK)
        return s;
    for (int i = 0; i < FM_SOLVE_NSLOTS; i++)
        if (ts[i]) {
            p->t[i] = *ts[i];
            p->t[i].data = NULL;
        }
    if ((s = fm_problem_place_devices(ctx, &fm_operation_solve, ts, o, o->execution, o->device_id, p)) != FM_OK)
        return s;
    p->output_mask = written_mask(o);
    sp->num_threads = fm_context_threads_for(ctx, o->num_threads);
    return FM_OK;
}

/* The outputs' descriptors: the broadcast batch, then the routine's matrix / vector extents,
 * C-contiguous, on a's device (the execution's, when that is explicit). */
static fm_status output_specs(const fm_tensor *const *ts, const void *opts, fm_tensor *specs, uint32_t *written)
{
    const fm_solve_options *o = opts;
    fm_solve_params sp;
    memset(&sp, 0, sizeof sp);
    fm_status s = build_fields(ts, o, &sp, 0);
    if (s != FM_OK)
        return s;
    fm_tensor a = *ts[FM_SOLVE_A];
    if ((s = fm_tensor_resolve_device("solve", "a", ts[FM_SOLVE_A], &a.device)) != FM_OK)
        return s;
    if (o->execution == FM_EXECUTION_CPU || o->execution == FM_EXECUTION_CUDA) { /* auto, best: a's device */
        a.device.type = o->execution == FM_EXECUTION_CUDA ? FM_DEVICE_CUDA : FM_DEVICE_CPU;
        a.device.id = o->execution == FM_EXECUTION_CUDA ? o->device_id : 0;
    }
    const uint32_t w = written_mask(o);
    for (int i = 0; i < FM_SOLVE_NSLOTS; i++)
        if ((w & BIT(i)) && (s = spec_of(o, &sp, &a, i, &specs[i])) != FM_OK)
            return s;
    *written = w;
    return FM_OK;
}

int64_t fm_solve_batch_offset(const fm_problem *p, int slot, int64_t b)
{
    const fm_solve_params *sp = &p->u.solve;
    const fm_tensor *t = &p->t[slot];
    const int nb = t->ndim - sp->core_ndim[slot];
    int64_t off = 0;
    for (int i = sp->batch_ndim - 1; i >= 0; i--) {
        const int64_t e = sp->batch_shape[i], idx = e ? b % e : 0;
        b = e ? b / e : 0;
        const int ti = i - (sp->batch_ndim - nb);
        if (ti >= 0 && t->shape[ti] != 1)
            off += idx * t->strides[ti];
    }
    return off;
}

/* FM_EXECUTION_BEST: LAPACK's flop counts (leading terms) per matrix, times the batch, complex 4x. */
static double work(const fm_tensor *const *ts, const void *opts_, fm_dtype *dtype, unsigned *devices, int *threads)
{
    const fm_solve_options *o = opts_;
    const fm_tensor *a = ts[FM_SOLVE_A], *b = ts[FM_SOLVE_B];
    *threads = o->num_threads;
    if (!a || a->ndim < 2)
        return -1;
    const double m = (double)a->shape[a->ndim - 2], n = (double)a->shape[a->ndim - 1];
    const double k = b && b->ndim >= 1 ? (double)b->shape[b->ndim - 1] : 1, mn = fmin(m, n);
    /* the batch: a's, or b's where b broadcasts a over more matrices */
    const double rows_b = b && b->ndim >= 2 ? (double)b->shape[b->ndim - 2] : 1;
    const double batch = fmax(m * n > 0 ? (double)fm_tensor_numel(a) / (m * n) : 0,
                              b && rows_b * k > 0 ? (double)fm_tensor_numel(b) / (rows_b * k) : 0);
    double f;
    switch (o->routine) {
    case FM_SOLVE_GESV: f = 2.0 / 3 * n * n * n + 2 * n * n * k; break;
    case FM_SOLVE_GETRS: case FM_SOLVE_POTRS: f = 2 * n * n * k; break;
    case FM_SOLVE_TRTRS: f = n * n * k; break;
    case FM_SOLVE_POTRF: f = n * n * n / 3; break;
    case FM_SOLVE_INV: f = 2 * n * n * n; break;
    case FM_SOLVE_SYEVD: f = (o->values_only ? 4.0 / 3 : 9) * n * n * n; break;
    case FM_SOLVE_GEQRF: /* LAPACK's 2 m n^2 - 2 n^3 / 3 (m >= n), as much again to form Q */
        f = (o->qr_mode == 2 ? 1 : 2) * (2 * fmax(m, n) * mn * mn - 2 * mn * mn * mn / 3);
        break;
    case FM_SOLVE_GESDD: f = (o->values_only ? 4 : 12) * fmax(m, n) * mn * mn; break;
    case FM_SOLVE_GELSD: f = 12 * fmax(m, n) * mn * mn + 6 * fmax(m, n) * mn * k; break; /* + U^H b, V c, U c */
    default: f = 2.0 / 3 * n * n * n; /* getrf, det, slogdet */
    }
    *dtype = a->dtype;
    (void)devices; /* every routine runs on both (cuSOLVER's lstsq: cusolver_lstsq.c) */
    return f * batch * (fm_dtype_is_complex(a->dtype) ? 4 : 1);
}

/* fm_context_calibrate: gesv of f64 (and in full, f32) matrices with 16 right-hand sides. */
static int calibration_problem(int index, int quick, int execution, fm_tensor *t, void *opts, uint32_t *slots)
{
    static const int64_t quick_n[] = {64, 128, 256, 1024}, full_n[] = {32, 64, 128, 256, 512, 1024, 2048, 4096};
    const int count = quick ? 4 : 8;
    if (index < 0 || index >= (quick ? 1 : 2) * count)
        return 0;
    const int64_t n = (quick ? quick_n : full_n)[index % count], sa[2] = {n, n}, sb[2] = {n, 16};
    const fm_device dev = {execution == FM_EXECUTION_CUDA ? FM_DEVICE_CUDA : FM_DEVICE_CPU, 0};
    const fm_dtype dt = index < count ? FM_F64 : FM_F32;
    fm_tensor_init(&t[FM_SOLVE_A], NULL, dev, dt, 2, sa, NULL);
    fm_tensor_init(&t[FM_SOLVE_B], NULL, dev, dt, 2, sb, NULL);
    fm_tensor_init(&t[FM_SOLVE_X], NULL, dev, dt, 2, sb, NULL);
    fm_solve_options *o = opts;
    fm_solve_options_init(o);
    o->execution = execution;
    *slots = 1u << FM_SOLVE_A | 1u << FM_SOLVE_B | 1u << FM_SOLVE_X;
    return 1;
}

const fm_operation fm_operation_solve = {
    .op = FM_OP_SOLVE,
    .name = "solve",
    .nslots = FM_SOLVE_NSLOTS,
    .slot_names = slot_names,
    .slot_roles = slot_roles,
    .options_size = sizeof(fm_solve_options),
    .options_init = options_init,
    .build = build,
    .output_specs = output_specs,
    .work = work,
    .calibration_problem = calibration_problem,
};

fm_status fm_solve_plan(fm_context *ctx, const fm_tensor *const *t, const fm_solve_options *opts, fm_plan **plan)
{
    return fm_plan_create(ctx, FM_OP_SOLVE, t, FM_SOLVE_NSLOTS, opts, plan);
}

fm_status fm_solve(fm_context *ctx, const fm_tensor *const *t, const fm_solve_options *opts, void *stream)
{
    return fm_run(ctx, FM_OP_SOLVE, t, FM_SOLVE_NSLOTS, opts, NULL, stream);
}

/* "a" or "a[2, 0]": the batch entry b of slot name, as every backend's messages name it. */
void fm_solve_entry_name(const fm_solve_params *sp, const char *name, int64_t b, char *buf, size_t n)
{
    int64_t idx[FM_MAX_NDIM];
    for (int i = sp->batch_ndim - 1; i >= 0; i--) {
        idx[i] = sp->batch_shape[i] ? b % sp->batch_shape[i] : 0;
        b = sp->batch_shape[i] ? b / sp->batch_shape[i] : 0;
    }
    size_t k = (size_t)snprintf(buf, n, "%s", name);
    for (int i = 0; i < sp->batch_ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld%s", i ? ", " : "[", (long long)idx[i],
                              i == sp->batch_ndim - 1 ? "]" : "");
}

/* FM_ERR_LINALG for entry b's LAPACK info > 0, in NumPy's words: one text for every backend. */
fm_status fm_solve_fail_info(const fm_solve_params *sp, int64_t b, int64_t info)
{
    const char *rn = fm_solve_routine_name(sp->routine);
    const long long v = (long long)info;
    char e[128];
    fm_solve_entry_name(sp, "a", b, e, sizeof e);
    switch (sp->routine) {
    case FM_SOLVE_POTRF:
        return fm_fail(FM_ERR_LINALG, "solve: %s is not positive definite: its leading minor of order %lld is "
                       "not (cholesky; LAPACK potrf info %lld)", e, v, v);
    case FM_SOLVE_TRTRS:
        return fm_fail(FM_ERR_LINALG, "solve: %s is singular: its diagonal entry %lld is zero (solve_triangular)",
                       e, v - 1);
    case FM_SOLVE_SYEVD:
        return fm_fail(FM_ERR_LINALG, "solve: the eigenvalue computation did not converge for %s (eigh; LAPACK "
                       "info %lld)", e, v);
    case FM_SOLVE_GESDD:
    case FM_SOLVE_GELSD:
        return fm_fail(FM_ERR_LINALG, "solve: SVD did not converge for %s (%s; LAPACK info %lld)", e, rn, v);
    default:
        return fm_fail(FM_ERR_LINALG, "solve: %s is singular: U[%lld, %lld] of its LU factorization is exactly "
                       "zero (%s; LAPACK getrf info %lld)", e, v - 1, v - 1, rn, v);
    }
}

