/* plan.c : plan lifetime, description and the checked execute entry point. */
#include "context.h"
#include "operation.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fm_plan *fm_plan_alloc(const fm_problem *p)
{
    fm_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return NULL;
    atomic_init(&plan->refcount, 1);
    plan->problem = *p;
    plan->footprint = sizeof *plan; /* a backend adds what its impl holds */
    for (int i = 0; i < FM_MAX_SLOTS; i++)
        plan->required_align[i] = 1;
    return plan;
}

void fm_plan_retain(fm_plan *p)
{
    if (p)
        atomic_fetch_add(&p->refcount, 1);
}

void fm_plan_release(fm_plan *p)
{
    if (!p || atomic_fetch_sub(&p->refcount, 1) != 1)
        return;
    if (p->destroy_impl && p->impl)
        p->destroy_impl(p->impl);
    if (p->ctx)
        fm_context_release_(p->ctx);
    free(p);
}

const char *fm_plan_describe(const fm_plan *p) { return p ? p->describe : ""; }

void fm_plan_set_describe(fm_plan *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->describe, sizeof p->describe, fmt, ap);
    va_end(ap);
}

fm_op fm_plan_op(const fm_plan *p) { return p ? p->problem.op : FM_OP_COUNT_; }

const char *fm_plan_backend(const fm_plan *p) { return p && p->backend ? p->backend->name : ""; }

static int same_layout(const fm_tensor *x, const fm_tensor *y)
{
    if (x->ndim != y->ndim || x->dtype != y->dtype)
        return 0;
    for (int i = 0; i < x->ndim; i++)
        if (x->shape[i] != y->shape[i] || (x->shape[i] > 1 && x->strides[i] != y->strides[i]))
            return 0;
    return 1;
}

static fm_status check_aliasing(const fm_problem *pr, void *const *ptrs)
{
    for (int o = 0; o < pr->nslots; o++) {
        if (!(pr->output_mask & (1u << o)) || !ptrs[o])
            continue;
        int64_t olo, ohi;
        fm_tensor_byte_span(&pr->t[o], &olo, &ohi);
        uintptr_t ob = (uintptr_t)ptrs[o];
        for (int i = 0; i < pr->nslots; i++) {
            if (i == o || !(pr->present & (1u << i)) || !ptrs[i])
                continue;
            int64_t ilo, ihi;
            fm_tensor_byte_span(&pr->t[i], &ilo, &ihi);
            if (ohi == olo || ihi == ilo)
                continue;
            uintptr_t ib = (uintptr_t)ptrs[i];
            int overlap = (intptr_t)(ob + olo) < (intptr_t)(ib + ihi) && (intptr_t)(ib + ilo) < (intptr_t)(ob + ohi);
            if (!overlap)
                continue;
            if (pr->inplace_partner[o] == i && ptrs[o] == ptrs[i] && same_layout(&pr->t[o], &pr->t[i]))
                continue; /* exact in-place use, e.g. D = C */
            fm_status s = fm_fail(FM_ERR_ALIAS, "%s: output %s overlaps %s %s in memory%s", fm_op_name(pr->op),
                                  pr->slot_names[o], (pr->output_mask & (1u << i)) ? "output" : "input",
                                  pr->slot_names[i],
                                  pr->inplace_partner[o] == i ? " (only exact, identical-layout reuse is allowed)" : "");
            fm_fail_slots(o, i);
            return s;
        }
    }
    return FM_OK;
}

const fm_exec_args fm_no_exec_args;

/* Element-wise copy of t's elements from the layout at src to the same layout at dst (byte
 * addresses of element 0), in row-major index order. */
static void copy_elements(const fm_tensor *t, const char *src, char *dst)
{
    const int64_t es = (int64_t)fm_dtype_size(t->dtype), n = fm_tensor_numel(t);
    int64_t idx[FM_MAX_NDIM] = {0}, off = 0;
    for (int64_t e = 0; e < n; e++) {
        memcpy(dst + off * es, src + off * es, (size_t)es);
        for (int i = t->ndim - 1; i >= 0; i--) { /* next index: odometer over the axes */
            off += t->strides[i];
            if (++idx[i] < t->shape[i])
                break;
            off -= t->strides[i] * t->shape[i];
            idx[i] = 0;
        }
    }
}

/* FM_EXEC_OVERLAP_COPY: every output that overlaps an input is computed into a temporary of its
 * own byte span (the planned layout, so the backend sees what it planned) and copied out. */
static fm_status execute_through_temporaries(const fm_plan *p, void *const *ptrs, const fm_exec_args *args,
                                             void *stream)
{
    const fm_problem *pr = &p->problem;
    void *moved[FM_MAX_SLOTS], *temp[FM_MAX_SLOTS] = {0}, *outs[FM_MAX_SLOTS] = {0};
    for (int i = 0; i < pr->nslots; i++)
        outs[i] = (pr->output_mask & (1u << i)) ? ptrs[i] : NULL;
    fm_status s = check_aliasing(pr, outs); /* outputs overlapping each other stay refused */
    if (s != FM_OK)
        return s;
    fm_clear_error(); /* the overlap with an input is taken care of: no error */
    memcpy(moved, ptrs, sizeof(void *) * (size_t)pr->nslots);
    for (int o = 0; o < pr->nslots && s == FM_OK; o++) {
        if (!(pr->output_mask & (1u << o)) || !ptrs[o])
            continue;
        void *only[FM_MAX_SLOTS] = {0}; /* this output against the inputs: does it overlap one? */
        memcpy(only, ptrs, sizeof(void *) * (size_t)pr->nslots);
        for (int i = 0; i < pr->nslots; i++)
            if (i != o && (pr->output_mask & (1u << i)))
                only[i] = NULL;
        if (check_aliasing(pr, only) == FM_OK)
            continue;
        fm_clear_error();
        if (pr->t[o].device.type != FM_DEVICE_CPU || pr->exec_device.type != FM_DEVICE_CPU) {
            s = fm_fail(FM_ERR_NOT_SUPPORTED, "%s execute: FM_EXEC_OVERLAP_COPY takes host outputs only; "
                        "output %s is on a GPU", fm_op_name(pr->op), pr->slot_names[o]);
            break;
        }
        int64_t lo, hi;
        fm_tensor_byte_span(&pr->t[o], &lo, &hi);
        const size_t align = p->required_align[o] > 64 ? p->required_align[o] : 64;
        const size_t shift = (size_t)(((lo % (int64_t)align) + (int64_t)align) % (int64_t)align);
        if (!(temp[o] = fm_malloc_aligned((size_t)(hi - lo) + shift, align)))
            s = fm_fail(FM_ERR_OUT_OF_MEMORY, "%s execute: cannot allocate the %lld-byte temporary for "
                        "output %s (FM_EXEC_OVERLAP_COPY)", fm_op_name(pr->op), (long long)(hi - lo),
                        pr->slot_names[o]);
        else
            moved[o] = (char *)temp[o] + shift - lo; /* element 0 where the planned layout puts it */
    }
    if (s == FM_OK)
        s = p->execute(p, moved, args, stream);
    for (int o = 0; o < pr->nslots; o++) {
        if (s == FM_OK && temp[o])
            copy_elements(&pr->t[o], moved[o], ptrs[o]);
        fm_free_aligned(temp[o]);
    }
    return s;
}

void fm_exec_args_init(fm_exec_args *a)
{
    if (a)
        memset(a, 0, sizeof *a);
}

/* The per-call arguments: only the fields the operation reads may differ from fm_exec_args_init's. */
static fm_status check_args(fm_op op, const fm_exec_args *a)
{
    const fm_operation *o = fm_operation_for(op);
    const char *name = fm_op_name(op);
    if (a->reserved[0] || a->reserved[1] || a->ninfo < 0 || (a->ninfo > 0 && !a->info))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s execute: args has reserved fields set or ninfo = %d without "
                       "info; expected fm_exec_args_init's zeros there", name, (int)a->ninfo);
    if (a->flags & ~FM_EXEC_OVERLAP_COPY)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s execute: args.flags = %d, expected FM_EXEC_* bits (%d)",
                       name, (int)a->flags, FM_EXEC_OVERLAP_COPY);
    for (int i = o ? o->exec_ints : 0; i < FM_EXEC_MAX_SCALARS; i++)
        if (a->ints[i])
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s execute: args.ints[%d] = %lld, expected 0 (%s reads %d per-call "
                           "integers)", name, i, (long long)a->ints[i], name, o ? o->exec_ints : 0);
    for (int i = o ? o->exec_reals : 0; i < FM_EXEC_MAX_SCALARS; i++)
        if (a->reals[i] != 0.0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s execute: args.reals[%d] = %g, expected 0 (%s reads %d per-call "
                           "reals)", name, i, a->reals[i], name, o ? o->exec_reals : 0);
    if ((a->info || a->ninfo) && !(o && o->exec_info))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s execute: args.info was given, expected NULL (%s writes no per-call "
                       "information)", name, name);
    return FM_OK;
}

fm_status fm_plan_execute(const fm_plan *p, void *const *ptrs, int nptrs, void *stream)
{
    return fm_plan_execute_args(p, ptrs, nptrs, NULL, stream);
}

fm_status fm_plan_execute_args(const fm_plan *p, void *const *ptrs, int nptrs, const fm_exec_args *args,
                               void *stream)
{
    if (!p)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "execute: plan is NULL");
    const fm_problem *pr = &p->problem;
    if (!ptrs)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s execute: ptrs is NULL", fm_op_name(pr->op));
    if (nptrs != pr->nslots)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s execute: nptrs = %d, expected %d", fm_op_name(pr->op), nptrs,
                       pr->nslots);
    for (int i = 0; i < pr->nslots; i++) {
        int used = (pr->present >> i) & 1;
        if (!used && ptrs[i])
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s execute: %s was not planned, expected NULL",
                           fm_op_name(pr->op), pr->slot_names[i]);
        if (used && !ptrs[i] && fm_tensor_numel(&pr->t[i]) > 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s execute: %s is NULL, expected a pointer to %lld elements",
                           fm_op_name(pr->op), pr->slot_names[i], (long long)fm_tensor_numel(&pr->t[i]));
        if (used && ptrs[i] && ((uintptr_t)ptrs[i] % p->required_align[i]) != 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT,
                           "%s execute: %s at %p is not aligned to %zu bytes as planned (the backend reads whole "
                           "elements); pass an aligned copy (x.copy())",
                           fm_op_name(pr->op), pr->slot_names[i], ptrs[i], p->required_align[i]);
    }
    fm_status s = args ? check_args(pr->op, args) : FM_OK;
    const fm_operation *op = fm_operation_for(pr->op);
    if (s == FM_OK && args && op && op->check_exec_args)
        s = op->check_exec_args(pr, args);
    if (s == FM_OK && (s = check_aliasing(pr, ptrs)) == FM_ERR_ALIAS && args &&
        (args->flags & FM_EXEC_OVERLAP_COPY))
        return execute_through_temporaries(p, ptrs, args, stream);
    if (s != FM_OK)
        return s;
    return p->execute(p, ptrs, args ? args : &fm_no_exec_args, stream);
}

static fm_status alias_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const fm_plan *target = p->impl;
    return target->execute(target, ptrs, args, stream);
}

static void alias_destroy(void *impl) { fm_plan_release(impl); }

fm_status fm_plan_alias_for(fm_context *ctx, const fm_problem *key, fm_plan *target, fm_plan **plan)
{
    fm_plan *alias = fm_plan_alloc(key);
    if (!alias) {
        fm_plan_release(target);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory", fm_op_name(key->op));
    }
    if (target->execute == alias_execute) { /* never a chain: point at the alias's own target */
        fm_plan *real = target->impl;
        fm_plan_retain(real);
        fm_plan_release(target);
        target = real;
    }
    alias->impl = target;
    alias->execute = alias_execute;
    alias->destroy_impl = alias_destroy;
    alias->backend = target->backend;
    alias->ctx = target->ctx;
    if (alias->ctx)
        fm_context_retain_(alias->ctx);
    for (int i = 0; i < FM_MAX_SLOTS; i++)
        alias->required_align[i] = target->required_align[i];
    snprintf(alias->describe, sizeof alias->describe, "%s", target->describe);
    fm_context_cache_put(ctx, alias);
    *plan = alias;
    return FM_OK;
}

const fm_plan *fm_plan_alias_target(const fm_plan *p)
{
    return p && p->execute == alias_execute ? (const fm_plan *)p->impl : p;
}

fm_status fm_plan_slot_info(const fm_plan *p, int slot, fm_tensor *desc, int *used)
{
    if (!p || !desc || !used)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "plan slot info: plan, desc and used must not be NULL");
    const fm_problem *pr = &p->problem;
    if (slot < 0 || slot >= pr->nslots)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s plan slot info: slot = %d, expected 0 <= slot < %d",
                       fm_op_name(pr->op), slot, pr->nslots);
    *used = (int)((pr->present >> slot) & 1u);
    *desc = pr->t[slot];
    desc->data = NULL;
    return FM_OK;
}
