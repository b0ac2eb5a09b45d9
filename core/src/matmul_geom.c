/* matmul_geom.c : the normalised matmul problem as sizes and strides for backends. */
#include "internal.h"

#include <string.h>

void fm_matmul_geom_from_problem(const fm_problem *p, fm_matmul_geom *g)
{
    memset(g, 0, sizeof *g);
    const fm_tensor *d = &p->t[FM_MATMUL_D];
    int nd = d->ndim;
    g->m = d->shape[nd - 2];
    g->n = d->shape[nd - 1];
    g->k = p->t[FM_MATMUL_A].shape[nd - 1];
    g->dtype = d->dtype;
    g->batch_ndim = nd - 2;
    g->batch_count = 1;
    for (int i = 0; i < nd - 2; i++) {
        g->batch_shape[i] = d->shape[i];
        g->batch_count *= d->shape[i];
    }
    for (int s = 0; s < FM_MATMUL_NSLOTS; s++) {
        if (!(p->present & (1u << s)))
            continue;
        const fm_tensor *t = &p->t[s];
        for (int i = 0; i < nd - 2; i++)
            g->batch_strides[s][i] = t->strides[i];
        g->row_stride[s] = t->strides[nd - 2];
        g->col_stride[s] = t->strides[nd - 1];
    }
}

int64_t fm_matmul_batch_offset(const fm_matmul_geom *g, int slot, int64_t b)
{
    int64_t off = 0;
    for (int i = g->batch_ndim - 1; i >= 0; i--) {
        int64_t idx = b % g->batch_shape[i];
        b /= g->batch_shape[i];
        off += idx * g->batch_strides[slot][i];
    }
    return off;
}
