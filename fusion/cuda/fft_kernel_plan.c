/* fft_kernel_plan.c : which fused FFT kernels a problem takes (see fft_kernel.h), apart from the
 * backend (backends/cuda/fftkernel_fft.c) so that the host emulation in tests/c/test_fft_kernel.c
 * drives the same planning as the GPU: the problem's norm folding, layouts and chains as the
 * core builds them. */
#include "fft_kernel.h"

#include <string.h>

static fm_status not_here(const char *why) { return fm_fail(FM_ERR_NOT_APPLICABLE, "fused kernel: %s", why); }

/* The problem's chains as specs over its input / output (ops 0 where absent). */
static fm_status kernel_chains(const fm_problem *p, const fm_attachments *att, fm_cufft_cb_spec chain[2])
{
    const fm_fft_params *fp = &p->u.fft;
    memset(chain, 0, 2 * sizeof *chain);
    if (fp->prolog_ops)
        fm_cufft_cb_spec_from_problem(p, att, 0, 0, &chain[0]);
    if (fp->epilog_ops)
        fm_cufft_cb_spec_from_problem(p, att, 1, 0, &chain[1]);
    for (int i = 0; i < 2; i++)
        if ((chain[i].ops & FM_FFT_OP_CALLBACK) && !chain[i].user_source)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft on cuda: the %s callback's source is only available while "
                           "fm_fft_plan runs", i ? "epilog" : "prolog");
    return FM_OK;
}

fm_status fm_fft_kernel_one(const fm_problem *p, const fm_attachments *att, fm_cufft_cb_spec chain[2], fm_fft_kernel_spec *ks)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    memset(ks, 0, sizeof *ks);
    if (fp->kind != FM_FFT_C2C || fp->naxes != 1)
        return not_here("one-axis c2c transforms only");
    if (!fp->prolog_ops && !fp->epilog_ops)
        return not_here("no chain to fuse (cuFFT runs plain transforms)");
    if (ti->dtype != to->dtype || (ti->dtype != FM_C64 && ti->dtype != FM_C128))
        return not_here("complex64 / complex128 only");
    if (fm_tensor_numel(ti) == 0 || fm_tensor_numel(to) == 0 || ti->ndim != to->ndim)
        return not_here("empty or reshaped operands");
    const int ax = fp->axes[0];
    ks->dtype = ti->dtype;
    ks->n = fp->n[0];
    ks->inverse = fp->inverse;
    if (ti->shape[ax] != ks->n || to->shape[ax] != ks->n)
        return not_here("the transformed axis is padded or cropped");
    ks->in_stride = ti->strides[ax], ks->out_stride = to->strides[ax];
    for (int d = 0; d < ti->ndim; d++) {
        if (ti->shape[d] != to->shape[d])
            return not_here("in and out shapes differ");
        if (d == ax || ti->shape[d] == 1)
            continue;
        if (ti->strides[d] < 0 || to->strides[d] <= 0)
            return not_here("negative or zero batch strides");
        ks->batch_ext[ks->nbatch] = ti->shape[d];
        ks->batch_in[ks->nbatch] = ti->strides[d];
        ks->batch_out[ks->nbatch] = to->strides[d];
        ks->nbatch++;
    }
    fm_status s = kernel_chains(p, att, chain);
    if (s != FM_OK)
        return s;
    ks->prolog = fp->prolog_ops ? &chain[0] : NULL;
    ks->epilog = fp->epilog_ops ? &chain[1] : NULL;
    return fm_fft_kernel_check(ks);
}

/* Contiguous rows of n along axis ax (the last one that is not 1): the batch count, else 0. */
static int64_t contiguous_rows(const fm_tensor *t, int ax, int64_t n)
{
    if (t->strides[ax] != 1)
        return 0;
    int64_t expect = n, rows = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (d == ax || t->shape[d] == 1)
            continue;
        if (d > ax || t->strides[d] != expect)
            return 0;
        expect *= t->shape[d], rows *= t->shape[d];
    }
    return rows;
}

/* The smallest power of two whose k-th power reaches n. */
static int64_t root_up(int64_t n, int k)
{
    int64_t r = 1;
    for (;;) {
        int64_t pw = 1;
        for (int i = 0; i < k; i++)
            pw *= r;
        if (pw >= n)
            return r;
        r *= 2;
    }
}

fm_status fm_fft_kernel_steps_capped(const fm_problem *p, const fm_attachments *att, fm_cufft_cb_spec chain[2], int64_t cap,
                                     fm_fft_kernel_spec spec[3], int *nsteps, int64_t *scratch_elems)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    memset(spec, 0, 3 * sizeof *spec);
    if (fp->kind != FM_FFT_C2C || fp->naxes != 1 || ti->dtype != to->dtype ||
        (ti->dtype != FM_C64 && ti->dtype != FM_C128))
        return not_here("the multi-step: one-axis complex64 / complex128 c2c only");
    if (!fp->prolog_ops && !fp->epilog_ops)
        return not_here("no chain to fuse (cuFFT runs plain transforms)");
    const int ax = fp->axes[0];
    const int64_t n = fp->n[0], max = fm_fft_kernel_max_n(ti->dtype);
    if (cap < 2 || cap > max)
        cap = max;
    if (n <= max || n > ((int64_t)1 << 24) || (n & (n - 1)) != 0 || ti->shape[ax] != n || to->shape[ax] != n)
        return not_here("the multi-step takes powers of two beyond one block up to 2^24, unpadded");
    const int64_t rows = contiguous_rows(ti, ax, n);
    if (rows == 0 || contiguous_rows(to, ax, n) != rows)
        return not_here("the multi-step takes contiguous rows along the last axis, in and out");
    /* factors of at most cap: two where they do, else three (as equal as powers of two allow) */
    int64_t f[3] = {1, 1, 1};
    int ns = n <= cap * cap ? 2 : 3;
    if (ns == 2) {
        f[1] = root_up(n, 2), f[0] = n / f[1];
    } else {
        f[2] = root_up(n, 3), f[1] = root_up(n / f[2], 2), f[0] = n / (f[1] * f[2]);
    }
    for (int i = 0; i < ns; i++)
        if (f[i] > cap || f[i] < 2)
            return not_here("the multi-step: no factors within one block");
    const int64_t n1 = f[0], m = n / n1; /* x as n1 x m: step A down the columns */
    fm_fft_kernel_spec *a = &spec[0], *c = &spec[ns - 1];
    a->dtype = ti->dtype, a->n = n1, a->inverse = fp->inverse, a->in_stride = a->out_stride = m;
    a->nbatch = 2;
    a->batch_ext[0] = rows, a->batch_in[0] = a->batch_out[0] = n;
    a->batch_ext[1] = m, a->batch_in[1] = a->batch_out[1] = 1;
    a->tw_n = n, a->tw_rows = m;
    const int64_t n2 = f[1], n3 = ns == 3 ? f[2] : 1;
    if (ns == 3) { /* B: length n2 down the columns of each k1's n2 x n3 block, in place */
        fm_fft_kernel_spec *b = &spec[1];
        *b = *a;
        b->n = n2, b->in_stride = b->out_stride = n3, b->tw_n = m, b->tw_rows = n3;
        b->nbatch = 3;
        b->batch_ext[1] = n1, b->batch_in[1] = b->batch_out[1] = m;
        b->batch_ext[2] = n3, b->batch_in[2] = b->batch_out[2] = 1;
    }
    /* the last step: length n_last along the rows, stored transposed, k1 (then k2) fastest */
    const int64_t nl = f[ns - 1];
    *c = *a;
    c->n = nl, c->in_stride = 1, c->out_stride = n / nl, c->tw_n = 0, c->tw_rows = 0;
    if (ns == 2) {
        c->batch_ext[1] = n1, c->batch_in[1] = n2, c->batch_out[1] = 1;
    } else {
        c->nbatch = 3;
        c->batch_ext[1] = n2, c->batch_in[1] = n3, c->batch_out[1] = n1;
        c->batch_ext[2] = n1, c->batch_in[2] = m, c->batch_out[2] = 1;
    }
    fm_status s = kernel_chains(p, att, chain);
    if (s != FM_OK)
        return s;
    a->prolog = fp->prolog_ops ? &chain[0] : NULL;
    c->epilog = fp->epilog_ops ? &chain[1] : NULL;
    for (int i = 0; i < ns; i++)
        if ((s = fm_fft_kernel_check(&spec[i])) != FM_OK)
            return s;
    *nsteps = ns;
    *scratch_elems = rows * n;
    return FM_OK;
}

fm_status fm_fft_kernel_steps(const fm_problem *p, const fm_attachments *att, fm_cufft_cb_spec chain[2], fm_fft_kernel_spec spec[3], int *nsteps,
                              int64_t *scratch_elems)
{
    return fm_fft_kernel_steps_capped(p, att, chain, FM_FFT_KERNEL_STEP_MAX, spec, nsteps, scratch_elems);
}

fm_status fm_fft_kernel_axis_passes(const fm_problem *p, const fm_attachments *att, fm_cufft_cb_spec chain[2], fm_fft_kernel_spec spec[3],
                                    int order[3], int *npasses)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    if (fp->kind != FM_FFT_C2C || fp->naxes < 2 || ti->dtype != to->dtype ||
        (ti->dtype != FM_C64 && ti->dtype != FM_C128) || ti->ndim != to->ndim)
        return not_here("several axes: complex64 / complex128 c2c only");
    if (!fp->prolog_ops && !fp->epilog_ops)
        return not_here("no chain to fuse (cuFFT runs plain transforms)");
    if (fm_tensor_numel(ti) == 0 || fm_tensor_numel(to) == 0)
        return not_here("several axes: empty operands");
    for (int d = 0; d < ti->ndim; d++)
        if (ti->shape[d] != to->shape[d] || (ti->shape[d] > 1 && (ti->strides[d] < 0 || to->strides[d] <= 0)))
            return not_here("several axes: in and out of one shape with positive strides");
    int np = 0; /* an axis of length 1 is the identity: no pass */
    for (int i = 0; i < fp->naxes; i++)
        if (fp->n[i] > 1 || ti->shape[fp->axes[i]] != 1)
            order[np++] = i;
    if (np == 0)
        return not_here("several axes: all of length 1");
    for (int i = 1; i < np; i++) /* the input's smallest stride first */
        for (int j = i; j > 0 && ti->strides[fp->axes[order[j]]] < ti->strides[fp->axes[order[j - 1]]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    fm_status s = kernel_chains(p, att, chain);
    if (s != FM_OK)
        return s;
    for (int i = 0; i < np; i++) {
        const int ax = fp->axes[order[i]];
        const fm_tensor *src = i ? to : ti; /* the first pass reads in, the others work in place on out */
        fm_fft_kernel_spec *k = &spec[i];
        memset(k, 0, sizeof *k);
        k->dtype = ti->dtype, k->n = fp->n[order[i]], k->inverse = fp->inverse;
        if (src->shape[ax] != k->n)
            return not_here("several axes: a padded or cropped axis");
        k->in_stride = src->strides[ax], k->out_stride = to->strides[ax];
        for (int d = 0; d < ti->ndim; d++)
            if (d != ax && ti->shape[d] > 1) {
                k->batch_ext[k->nbatch] = ti->shape[d];
                k->batch_in[k->nbatch] = src->strides[d];
                k->batch_out[k->nbatch] = to->strides[d];
                k->nbatch++;
            }
        k->prolog = i == 0 && fp->prolog_ops ? &chain[0] : NULL;
        k->epilog = i == np - 1 && fp->epilog_ops ? &chain[1] : NULL;
        if ((s = fm_fft_kernel_check(k)) != FM_OK)
            return s;
    }
    *npasses = np;
    return FM_OK;
}
