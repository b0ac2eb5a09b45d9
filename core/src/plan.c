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
    if (a->reserved[0] || a->reserved[1] || a->reserved[2] || a->ninfo < 0 || (a->ninfo > 0 && !a->info))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s execute: args has reserved fields set or ninfo = %d without "
                       "info; expected fm_exec_args_init's zeros there", name, (int)a->ninfo);
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
    fm_status s = check_aliasing(pr, ptrs);
    if (s != FM_OK)
        return s;
    if (args && (s = check_args(pr->op, args)) != FM_OK)
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
