/* operations.c : the table of operations and the generic entry points over it.
 * Adding an operation: its own core/src/<op>_problem.c defining an fm_operation, plus one row
 * here (docs/adding-an-operation.md lists the rest). */
#include "context.h"
#include "operation.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const fm_operation *const operations[FM_OP_COUNT_] = {
    [FM_OP_MATMUL] = &fm_operation_matmul,
    [FM_OP_FFT] = &fm_operation_fft,
    [FM_OP_RNG] = &fm_operation_rng,
    [FM_OP_SOLVE] = &fm_operation_solve,
};

const fm_operation *fm_operation_for(fm_op op)
{
    return (unsigned)op < FM_OP_COUNT_ ? operations[op] : NULL;
}

int fm_op_slot_count(fm_op op)
{
    const fm_operation *o = fm_operation_for(op);
    return o ? o->nslots : 0;
}

const char *fm_op_slot_name(fm_op op, int slot)
{
    const fm_operation *o = fm_operation_for(op);
    return o && slot >= 0 && slot < o->nslots ? o->slot_names[slot] : "";
}

int fm_op_slot_role(fm_op op, int slot)
{
    const fm_operation *o = fm_operation_for(op);
    return o && slot >= 0 && slot < o->nslots ? o->slot_roles[slot] : 0;
}

void fm_problem_tunables(const fm_problem *p, int32_t *v)
{
    const fm_operation *o = fm_operation_for(p->op);
    memset(v, 0, FM_MAX_TUNABLES * sizeof *v);
    for (int i = 0; o && i < o->ntunables; i++)
        memcpy(&v[i], p->u.raw + o->tunables[i], sizeof *v);
}

void fm_problem_set_tunables(fm_problem *p, const int32_t *v)
{
    const fm_operation *o = fm_operation_for(p->op);
    for (int i = 0; o && i < o->ntunables; i++)
        memcpy(p->u.raw + o->tunables[i], &v[i], sizeof *v);
}

int fm_problem_untuned(const fm_problem *p)
{
    int32_t v[FM_MAX_TUNABLES];
    fm_problem_tunables(p, v);
    for (int i = 0; i < FM_MAX_TUNABLES; i++)
        if (v[i])
            return 0;
    return 1;
}

void fm_problem_begin(fm_context *ctx, const fm_operation *op, fm_problem *p)
{
    memset(p, 0, sizeof *p);
    p->settings_key = ctx ? ctx->settings.plan_key : 0;
    p->op = op->op;
    p->nslots = op->nslots;
    for (int i = 0; i < FM_MAX_SLOTS; i++) {
        p->inplace_partner[i] = -1;
        if (i < op->nslots) {
            p->slot_names[i] = op->slot_names[i];
            if (op->slot_roles[i] == FM_SLOT_OUTPUT)
                p->output_mask |= 1u << i;
        }
    }
}

fm_status fm_problem_check_descriptor(const fm_operation *op, const char *name, const fm_tensor *t, int min_ndim)
{
    if (t->ndim < min_ndim || t->ndim > FM_MAX_NDIM)
        return fm_fail(FM_ERR_SHAPE, "%s: %s has ndim = %d, expected %d <= ndim <= %d%s", op->name, name, t->ndim,
                       min_ndim, FM_MAX_NDIM,
                       min_ndim == 2 ? " (vectors are promoted to matrices by the caller, as NumPy does)" : "");
    if (fm_dtype_size(t->dtype) == 0)
        return fm_fail(FM_ERR_DTYPE, "%s: %s has an invalid dtype (%d)", op->name, name, (int)t->dtype);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return fm_fail(FM_ERR_SHAPE, "%s: %s has shape[%d] = %lld, expected >= 0", op->name, name, i,
                           (long long)t->shape[i]);
    return fm_tensor_check_range(op->name, name, t);
}

static void device_str(fm_device d, char *buf, size_t n)
{
    if (d.type == FM_DEVICE_CUDA)
        snprintf(buf, n, "cuda:%d", d.id);
    else
        snprintf(buf, n, "cpu");
}

fm_status fm_problem_place_devices(fm_context *ctx, const fm_operation *op, const fm_tensor *const *ts,
                                   const void *opts, int execution, int device_id, fm_problem *p)
{
    fm_status s;
    int first = -1;
    for (int i = 0; i < op->nslots; i++) {
        if (!ts[i])
            continue;
        p->present |= 1u << i;
        p->align_log2[i] = (uint8_t)fm_align_log2_of(ts[i]->data);
        if ((s = fm_tensor_resolve_device(op->name, op->slot_names[i], ts[i], &p->t[i].device)) != FM_OK)
            return s;
        if (first < 0)
            first = i;
    }
    const fm_device d0 = p->t[first < 0 ? 0 : first].device; /* the builders' first slot is never NULL */
    if (execution == FM_EXECUTION_AUTO && ctx && ctx->settings.execution_best)
        execution = FM_EXECUTION_BEST; /* FUSEMATH_EXECUTION=best */
    if (execution == FM_EXECUTION_BEST) {
        if ((s = fm_dispatch_best(ctx, op, ts, opts, device_id, p)) != FM_OK)
            return s;
    } else if (execution == FM_EXECUTION_AUTO) {
        for (int i = first + 1; i < op->nslots; i++) {
            const fm_device di = p->t[i].device;
            if (!ts[i] || (di.type == d0.type && di.id == d0.id))
                continue;
            char w0[32], wi[32];
            device_str(d0, w0, sizeof w0);
            device_str(di, wi, sizeof wi);
            fm_fail(FM_ERR_DEVICE, "%s: %s is on %s but %s is on %s; move them to one device or pass "
                    "execution='cpu', 'cuda' or 'best' to let fusemath move the data", op->name, op->slot_names[first], w0,
                    op->slot_names[i], wi);
            fm_fail_slots(first, i); /* front ends name their arguments for both */
            return FM_ERR_DEVICE;
        }
        p->exec_device = d0;
    } else {
        p->exec_device.type = execution == FM_EXECUTION_CPU ? FM_DEVICE_CPU : FM_DEVICE_CUDA;
        p->exec_device.id = execution == FM_EXECUTION_CPU ? 0 : device_id;
    }
    /* After the mixed-device check, so "a on cpu, b on cuda" names both first. */
    for (int i = 0; i < op->nslots; i++) {
        const fm_device di = p->t[i].device;
        if (!ts[i] || di.type != FM_DEVICE_CUDA || di.id < fm_cuda_device_count())
            continue;
        fm_fail(FM_ERR_UNAVAILABLE, "%s: %s is on cuda:%d but %s", op->name, op->slot_names[i], di.id,
                fm_cuda_missing_device_text());
        fm_fail_slots(i, -1);
        return FM_ERR_UNAVAILABLE;
    }
    fm_problem_key_alignment(p);
    return FM_OK;
}

/* The row of op and the checks every generic entry makes of its arguments. */
static fm_status generic_args(const char *what, fm_op op, const fm_tensor *const *t, int nslots,
                              const fm_operation **row)
{
    const fm_operation *o = fm_operation_for(op);
    if (!o)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: op = %d is not an operation of this library", what, (int)op);
    if (!t)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: tensor array is NULL", o->name);
    if (nslots != o->nslots)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: nslots = %d, expected %d", o->name, nslots, o->nslots);
    *row = o;
    return FM_OK;
}

/* Room for any operation's options: a NULL opts becomes the operation's defaults here, so that
 * builders and output specs always get options. */

static fm_status options_or_defaults(const fm_operation *o, const void **opts, fm_options_room *buf)
{
    if (*opts)
        return FM_OK;
    if (o->options_size > sizeof buf->bytes) /* a row whose options outgrew the buffer: say so, do not overrun */
        return fm_fail(FM_ERR_INTERNAL, "%s: options of %zu bytes exceed the generic buffer", o->name, o->options_size);
    o->options_init(buf->bytes);
    *opts = buf->bytes;
    return FM_OK;
}

fm_status fm_operation_build(fm_context *ctx, const fm_operation *o, const fm_tensor *const *t, const void *opts,
                             fm_problem *p, fm_attachments *att)
{
    if (!ctx)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", o->name);
    fm_options_room defaults;
    fm_status s = options_or_defaults(o, &opts, &defaults);
    if (s != FM_OK)
        return s;
    memset(att, 0, sizeof *att);
    fm_problem_begin(ctx, o, p);
    if ((s = o->build(ctx, t, opts, p, att)) != FM_OK)
        return s;
    fm_problem_key_tails(p);
    return FM_OK;
}

fm_status fm_output_specs(fm_op op, const fm_tensor *const *t, int nslots, const void *opts, fm_tensor *specs,
                          uint32_t *written)
{
    const fm_operation *o = NULL;
    fm_status s = generic_args("output specs", op, t, nslots, &o);
    if (s != FM_OK)
        return s;
    if (!specs || !written)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: specs and written must not be NULL", o->name);
    memset(specs, 0, (size_t)o->nslots * sizeof *specs);
    *written = 0;
    fm_options_room defaults;
    if ((s = options_or_defaults(o, &opts, &defaults)) != FM_OK)
        return s;
    return o->output_specs(t, opts, specs, written);
}

/* p planned: from the cache, else the choice wisdom remembers for it (when it still plans
 * here), else the planner's own. A remembered choice answers for p's key through an alias, so
 * later calls of the same problem find it in the cache. */
fm_status fm_plan_built(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **plan)
{
    /* The cache first: a planned problem (tuned or not) never pays the wisdom lookup, which
     * hashes every backend's salt. */
    if ((*plan = fm_context_cache_get(ctx, p)) != NULL)
        return FM_OK;
    fm_problem tuned;
    if (!fm_wisdom_lookup(ctx, p, &tuned)) {
        fm_status s = fm_plan_problem_with(ctx, p, att, plan);
        /* best's device had no backend for it (a distribution without a GPU kernel): the other
         * one, cached under p's key so that the next call does not ask the refusing one again */
        fm_problem cur = *p, other;
        fm_plan *winner = NULL;
        char why[256] = "";
        const fm_status first = s;
        /* a split whose part was refused: the unsplit problem, then (refused too) the other device */
        while ((s == FM_ERR_NOT_SUPPORTED || s == FM_ERR_NOT_APPLICABLE) && fm_dispatch_fallback(&cur, &other)) {
            if (!*why)
                snprintf(why, sizeof why, "%s", fm_last_error());
            if ((s = fm_plan_problem_with(ctx, &other, att, &winner)) == FM_OK) {
                fm_log_plan(ctx, "%s: best's plan was refused (%s); planned %s", fm_op_name(p->op), why,
                            other.split ? "split" : other.exec_device.type == FM_DEVICE_CUDA ? "on cuda" : "on the cpu");
                return fm_plan_alias_for(ctx, p, winner, plan);
            }
            cur = other;
        }
        return *why ? fm_fail(first, "%s", why) : s; /* the first refusal is the one to report */
    }
    fm_plan *winner = NULL;
    if (fm_plan_problem_with(ctx, &tuned, att, &winner) != FM_OK) {
        fm_clear_error();
        return fm_plan_problem_with(ctx, p, att, plan);
    }
    return fm_plan_alias_for(ctx, p, winner, plan);
}

fm_status fm_plan_create(fm_context *ctx, fm_op op, const fm_tensor *const *t, int nslots, const void *opts,
                         fm_plan **plan)
{
    if (!plan)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: plan out-pointer is NULL",
                       fm_operation_for(op) ? fm_op_name(op) : "plan");
    *plan = NULL;
    const fm_operation *o = NULL;
    fm_status s = generic_args("plan", op, t, nslots, &o);
    if (s != FM_OK)
        return s;
    fm_problem p;
    fm_attachments att;
    if ((s = fm_operation_build(ctx, o, t, opts, &p, &att)) != FM_OK)
        return s;
    return fm_plan_built(ctx, &p, &att, plan);
}

fm_status fm_run(fm_context *ctx, fm_op op, const fm_tensor *const *t, int nslots, const void *opts,
                 const fm_exec_args *args, void *stream)
{
    if (!fm_operation_for(op))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "run: op = %d is not an operation of this library", (int)op);
    fm_plan *plan = NULL;
    fm_status s = fm_plan_create(ctx, op, t, nslots, opts, &plan);
    if (s != FM_OK)
        return s;
    void *ptrs[FM_MAX_SLOTS];
    for (int i = 0; i < nslots; i++)
        ptrs[i] = t[i] ? t[i]->data : NULL;
    s = fm_plan_execute_args(plan, ptrs, nslots, args, stream);
    fm_plan_release(plan);
    return s;
}

fm_status fm_autotune(fm_context *ctx, fm_op op, const fm_tensor *const *t, int nslots, const void *opts,
                      int repeats, fm_plan **plan)
{
    if (!plan)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "autotune: plan out-pointer is NULL");
    *plan = NULL;
    const fm_operation *o = NULL;
    fm_status s = generic_args("autotune", op, t, nslots, &o);
    if (s != FM_OK)
        return s;
    if (repeats < 1 || repeats > 1000)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s autotune: repeats = %d, expected 1 <= repeats <= 1000", o->name,
                       repeats);
    fm_problem p;
    fm_attachments att;
    if ((s = fm_operation_build(ctx, o, t, opts, &p, &att)) != FM_OK)
        return s;
    void *ptrs[FM_MAX_SLOTS];
    for (int i = 0; i < nslots; i++)
        if (!(ptrs[i] = t[i] ? t[i]->data : NULL) && t[i] && fm_tensor_numel(t[i]) > 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s autotune: %s has no data pointer; autotune runs on the real "
                           "operands", o->name, o->slot_names[i]);
    return fm_autotune_problem(ctx, &p, &att, ptrs, repeats, plan);
}

void fm_chunk_cut_slots(const fm_problem *p, uint32_t cut, int nd, int axis, int64_t e, int64_t lo, int64_t hi,
                        fm_problem *sub, fm_chunk *c)
{
    *sub = *p;
    memset(c, 0, sizeof *c);
    for (int s = 0; s < p->nslots; s++) {
        if (!(p->present & (1u << s)))
            continue;
        fm_tensor *t = &sub->t[s];
        if (!((cut >> s) & 1) || t->ndim != nd || t->shape[axis] != e || e < 2 || t->strides[axis] == 0) {
            c->whole |= 1u << s;
            continue;
        }
        t->shape[axis] = hi - lo;
        c->offset[s] = lo * t->strides[axis];
    }
}
