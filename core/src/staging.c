/* staging.c : run a problem on an explicit execution device when some operands
 * live elsewhere: copy each such operand's byte span to the execution device, run
 * the inner plan there, copy outputs back. Strides are kept, so any layout works. */
#include "context.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct staging_impl {
    fm_plan *inner;
    const fm_device_ops *exec_ops;
    const fm_device_ops *slot_ops[FM_MAX_SLOTS]; /* ops doing the copy for a moved slot, NULL if not moved */
} staging_impl;

const fm_device_ops *fm_device_ops_for(int type)
{
    const fm_device_ops *ops;
    for (int i = 0; (ops = fm_device_ops_at(i)); i++)
        if ((int)ops->device == type)
            return ops;
    return NULL;
}

static fm_status staged_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const staging_impl *st = p->impl;
    const fm_problem *pr = &p->problem;
    fm_device exec = pr->exec_device;
    void *inner_ptrs[FM_MAX_SLOTS] = {0};
    void *stage[FM_MAX_SLOTS] = {0};
    fm_status s = FM_OK;
    /* Everything is ordered on `stream`: device buffers come from the stream-ordered pool,
     * copies to the device are queued, and only copies to host memory are waited for
     * (the computation, or the caller, reads them next). */
    const int exec_on_host = exec.type == FM_DEVICE_CPU;
    for (int i = 0; i < pr->nslots && s == FM_OK; i++) {
        inner_ptrs[i] = ptrs[i];
        if (!st->slot_ops[i] || !ptrs[i])
            continue;
        int64_t lo, hi;
        fm_tensor_byte_span(&pr->t[i], &lo, &hi);
        if (hi == lo)
            continue;
        if ((s = st->exec_ops->alloc(exec.id, (size_t)(hi - lo), stream, &stage[i])) != FM_OK)
            break;
        inner_ptrs[i] = (char *)stage[i] - lo;
        int is_output = (pr->output_mask >> i) & 1;
        int partner = pr->inplace_partner[i];
        /* an output with gaps between its elements is copied in too: the copy back writes its whole
         * span, and the gaps must come back as they were */
        int needs_in = !is_output || (partner >= 0 && ptrs[partner] == ptrs[i]) ||
                       hi - lo != fm_tensor_numel(&pr->t[i]) * (int64_t)fm_dtype_size(pr->t[i].dtype);
        if (needs_in)
            s = st->slot_ops[i]->copy(stage[i], exec, (const char *)ptrs[i] + lo, pr->t[i].device,
                                      (size_t)(hi - lo), stream, exec_on_host);
    }
    /* An input that is the same memory as a moved output reads the staged copy. */
    if (s == FM_OK)
        s = st->inner->execute(st->inner, inner_ptrs, args, stream);
    for (int i = 0; i < pr->nslots && s == FM_OK; i++) {
        if (!stage[i] || !((pr->output_mask >> i) & 1))
            continue;
        int64_t lo, hi;
        fm_tensor_byte_span(&pr->t[i], &lo, &hi);
        s = st->slot_ops[i]->copy((char *)ptrs[i] + lo, pr->t[i].device, stage[i], exec, (size_t)(hi - lo), stream,
                                  1);
    }
    for (int i = 0; i < pr->nslots; i++)
        if (stage[i])
            st->exec_ops->free(exec.id, stage[i], stream);
    return s;
}

static void staging_destroy(void *impl)
{
    staging_impl *st = impl;
    fm_plan_release(st->inner);
    free(st);
}

fm_status fm_plan_build_staged(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **out,
                               const char *why)
{
    const char *op = fm_op_name(p->op);
    if (p->exec_device.type == FM_DEVICE_CUDA && fm_cuda_device_count() <= p->exec_device.id) {
        fm_fail(FM_ERR_UNAVAILABLE, "%s: execution on cuda:%d was requested but %s", op, p->exec_device.id,
                fm_cuda_missing_device_text());
        fm_log_plan(ctx, "%s", fm_last_error()); /* FUSEMATH_LOG=plan: why it stays off the GPU */
        return FM_ERR_UNAVAILABLE;
    }
    const fm_device_ops *exec_ops = fm_device_ops_for(p->exec_device.type);
    if (!exec_ops)
        return fm_fail(FM_ERR_UNAVAILABLE, "%s: no memory operations for the execution device", op);
    staging_impl *st = calloc(1, sizeof *st);
    if (!st)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory while planning", op);
    st->exec_ops = exec_ops;
    fm_problem q = *p;
    q.best = 0; /* the inner plan runs where it was told; the outer describe() says why */
    q.best_ms[0] = q.best_ms[1] = 0;
    char moved[64] = "";
    size_t used = 0;
    for (int i = 0; i < p->nslots; i++) {
        if (!(p->present & (1u << i)))
            continue;
        fm_device d = p->t[i].device;
        if (d.type == p->exec_device.type && d.id == p->exec_device.id)
            continue;
        /* the non-host side knows how to copy */
        const fm_device_ops *ops = fm_device_ops_for(d.type != FM_DEVICE_CPU ? d.type : p->exec_device.type);
        if (!ops || !ops->copy) {
            free(st);
            return fm_fail(FM_ERR_UNAVAILABLE, "%s: cannot move %s to the execution device", op, p->slot_names[i]);
        }
        st->slot_ops[i] = ops;
        q.t[i].device = p->exec_device;
        q.align_log2[i] = p->exec_device.type == FM_DEVICE_CUDA ? 4 : 0; /* fresh buffers; as build_problem caps */
        used += (size_t)snprintf(moved + used, used < sizeof moved ? sizeof moved - used : 0, "%s%s",
                                 used ? "," : "", p->slot_names[i]);
    }
    fm_status s = fm_plan_problem_with(ctx, &q, att, &st->inner);
    if (s != FM_OK) {
        free(st);
        return s;
    }
    fm_plan *plan = fm_plan_alloc(p);
    if (!plan) {
        staging_destroy(st);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory while planning", op);
    }
    plan->impl = st;
    plan->execute = staged_execute;
    plan->destroy_impl = staging_destroy;
    plan->backend = st->inner->backend;
    plan->ctx = ctx;
    fm_context_retain_(ctx);
    snprintf(plan->describe, sizeof plan->describe, "%.400s staged=%.40s%s%.150s%s", st->inner->describe, moved,
             why && *why ? " (not pipelined: " : "", why ? why : "", why && *why ? ")" : "");
    *out = plan;
    return FM_OK;
}
