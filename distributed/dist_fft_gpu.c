/* dist_fft_gpu.c : the GPU ranks of libfusemath_mpi's slab FFTs (docs/design.md, Distributed, GPU
 * ranks). The same slab blocks as the CPU ranks (dist_xgeom.h: S, Y, T); two local transforms,
 * each a core plan on the rank's CUDA device (cuFFT through the core's planner, which fuses a chain
 * given to it as its cuFFT path does on one GPU):
 *   A: the axes past 0 of the slab S (c2c, r2c or c2r: batched over the rank's rows);
 *   B: axis 0 of the columns Y (c2c, in place: batched over the rank's columns, one cuFFT batch);
 * and between them the exchange S <-> Y (dist_exchange.c) and the move kernel (dist_gpu_kernel.c)
 * that packs, unpacks and transposes Y <-> T. Two orders:
 *   A first (input in S, not c2r, and a forward or a transposed output):
 *     A(in -> W, prolog by the core), pack W, exchange S -> Y, B, then the output: T: the move
 *     Y -> out, or S: exchange Y -> S and the unpack into out; the epilog (its multiply array in the
 *     output's layout) and the norm in that last move;
 *   B first (input in T, c2r, or an inverse to a slab output): the input moved into Y (from T: the
 *     transpose; from S: pack + exchange), the prolog in that move; B, exchange Y -> S, unpack to W,
 *     then A(W -> out) with the epilog and the norm given to the core plan.
 * Both layouts transposed at once (T in and T out) is not implemented (FM_ERR_NOT_SUPPORTED). */
#include "dist_gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <pthread.h>

static int emulate;
static pthread_once_t emulate_once = PTHREAD_ONCE_INIT;
static void read_emulate(void)
{
    const char *v = getenv("FUSEMATH_DIST_GPU_EMULATE");
    emulate = v && !strcmp(v, "host");
}

int fm_dist_gpu_emulated(void)
{
    pthread_once(&emulate_once, read_emulate);
    return emulate;
}

struct fm_dist_gpu {
    MPI_Comm comm;
    int rank, size, dbl, device, a_first;
    fm_dist_fft_options o;
    fm_dist_geom g;
    fm_dist_xgeom x;
    int64_t *cnt;              /* x's four arrays */
    fm_context *ctx;
    fm_plan *plan_a, *plan_b;  /* NULL where this rank's block is empty */
    const fm_dist_kernel *k;
    fm_dist_exchange *xch;
    void *w, *bb, *yc;         /* device: W (S-sized), the exchange's other side, Y */
    fm_dist_mv_chain mv;       /* the chain of the first (B first: prolog) or last (A first: epilog) move */
    const void *arr[2];        /* the multiply arrays' device pointers (prolog, epilog) */
    cudaEvent_t done;          /* recorded after each execute's work on its stream: the next execute, maybe on
                                  another stream, waits for it before it reuses W, the exchange buffer, Y and
                                  the staged exchange's pinned buffers (NULL when emulated) */
    int recorded;              /* done has been recorded */
};

static fm_status cu(cudaError_t e, const char *where, const char *what)
{
    if (e == cudaSuccess)
        return FM_OK;
    return fm_fail(e == cudaErrorMemoryAllocation ? FM_ERR_OUT_OF_MEMORY : FM_ERR_BACKEND, "%s: %s: %s", where, what,
                   cudaGetErrorString(e));
}

/* device memory (host memory when emulated) */
fm_status fm_dist_dev_alloc(const char *where, void **ptr, size_t bytes, const char *what)
{
    *ptr = NULL;
    if (!bytes)
        return FM_OK;
    if (fm_dist_gpu_emulated())
        return (*ptr = malloc(bytes)) ? FM_OK : fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for %s", where, what);
    return cu(cudaMalloc(ptr, bytes), where, what);
}

void fm_dist_dev_free(void *ptr)
{
    if (fm_dist_gpu_emulated())
        free(ptr);
    else if (ptr)
        cudaFree(ptr);
}

/* make cuda:dev current, the caller's in *prev (-1: nothing to restore); emulated: nothing */
int fm_dist_enter_device(int dev, int *prev)
{
    *prev = -1;
    if (fm_dist_gpu_emulated())
        return 1;
    int cur;
    if (cudaGetDevice(&cur) != cudaSuccess || cudaSetDevice(dev) != cudaSuccess)
        return 0;
    *prev = cur;
    return 1;
}

void fm_dist_leave_device(int prev)
{
    if (prev >= 0)
        cudaSetDevice(prev);
}

static double norm_factor(const fm_dist_fft_options *o, const fm_dist_geom *g)
{
    double total = 1;
    for (int i = 0; i < g->ndim; i++)
        total *= (double)g->n[i];
    if (o->norm == FM_FFT_NORM_ORTHO)
        return 1 / sqrt(total);
    return (o->norm == FM_FFT_NORM_BACKWARD) == (o->inverse != 0) ? 1 / total : 1;
}

/* a core tensor on cuda:dev (data at execute) */
static void dev_tensor(fm_tensor *t, int dev, fm_dtype dt, int ndim, const int64_t *shape)
{
    fm_device d = {FM_DEVICE_CUDA, dev};
    if (fm_dist_gpu_emulated())
        d.type = FM_DEVICE_CPU, d.id = 0;
    fm_tensor_init(t, NULL, d, dt, ndim, shape, NULL);
}

/* the core options of a local plan over axes [first, first + naxes); norm 1 (the global norm is a scale) */
static void core_opts(const fm_dist_gpu *p, fm_fft_options *c, int kind, int first, int naxes)
{
    fm_fft_options_init(c);
    c->kind = kind, c->inverse = p->o.inverse;
    c->naxes = naxes;
    for (int i = 0; i < naxes; i++)
        c->axes[i] = first + i;
    c->norm = p->o.inverse ? FM_FFT_NORM_FORWARD : FM_FFT_NORM_BACKWARD; /* a factor of 1 either way */
    c->effort = p->o.effort;
    c->execution = FM_EXECUTION_CUDA; /* on the rank's GPU, whatever FUSEMATH_EXECUTION says */
    c->device_id = p->device;
    if (fm_dist_gpu_emulated())
        c->execution = FM_EXECUTION_CPU, c->device_id = 0;
}

/* plan A: the axes past 0 of the slab, between the caller's block (the real side for r2c / c2r) and W */
static fm_status plan_a(const char *where, fm_dist_gpu *p, fm_dtype in_dtype, const fm_tensor *pro,
                        const fm_tensor *epi)
{
    const fm_dist_side *user = &p->g.side[p->a_first ? FM_DIST_IN : FM_DIST_OUT]; /* a slab, by the order's rule */
    int64_t wshape[FM_DIST_MAX_NDIM] = {p->x.l0, p->x.n1, p->x.inner}; /* W: the complex array's slab */
    fm_dtype cx = p->dbl ? FM_C128 : FM_C64, re = p->dbl ? FM_F64 : FM_F32;
    fm_dtype udt = p->a_first ? in_dtype : (user->real ? re : cx);
    fm_tensor tu, tw;
    dev_tensor(&tu, p->device, udt, p->g.ndim, user->local);
    dev_tensor(&tw, p->device, cx, p->g.ndim, wshape);
    fm_fft_options c;
    core_opts(p, &c, p->o.kind, 1, p->g.ndim - 1);
    if (p->a_first) {
        c.prolog = p->o.prolog;
        return fm_fft_plan(p->ctx, &tu, &tw, pro, NULL, &c, &p->plan_a);
    }
    c.epilog = p->o.epilog;
    double nf = norm_factor(&p->o, &p->g);
    if (nf != 1) {
        if (!(c.epilog.ops & FM_FFT_OP_SCALE))
            c.epilog.scale[0] = 1, c.epilog.scale[1] = 0;
        c.epilog.ops |= FM_FFT_OP_SCALE;
        c.epilog.scale[0] *= nf, c.epilog.scale[1] *= nf;
    }
    (void)where;
    return fm_fft_plan(p->ctx, &tw, &tu, NULL, epi, &c, &p->plan_a);
}

/* plan B: axis 0 of Y (n0 x b1 inner), in place */
static fm_status plan_b(fm_dist_gpu *p)
{
    int64_t shape[2] = {p->x.n0, p->x.b1 * p->x.inner};
    fm_tensor t;
    dev_tensor(&t, p->device, p->dbl ? FM_C128 : FM_C64, 2, shape);
    fm_fft_options c;
    core_opts(p, &c, FM_FFT_C2C, 0, 1);
    return fm_fft_plan(p->ctx, &t, &t, NULL, NULL, &c, &p->plan_b);
}

/* the move kernel's chain: the prolog (B first, the array laid out as the input) or the epilog with
 * the norm (A first, the array laid out as the output) */
static void set_move_chain(fm_dist_gpu *p, const fm_tensor *pro, const fm_tensor *epi)
{
    const fm_fft_chain *c = p->a_first ? &p->o.epilog : &p->o.prolog;
    const fm_tensor *t = p->a_first ? epi : pro;
    fm_dist_mv_chain *m = &p->mv;
    memset(m, 0, sizeof *m);
    m->scale[0] = 1;
    if (c->ops & FM_FFT_OP_SCALE)
        m->scale[0] = c->scale[0], m->scale[1] = c->scale[1];
    if (p->a_first) {
        double nf = norm_factor(&p->o, &p->g);
        m->scale[0] *= nf, m->scale[1] *= nf;
    }
    if (m->scale[0] != 1 || m->scale[1] != 0)
        m->flags |= FM_DIST_MV_SCALE;
    if (c->ops & FM_FFT_OP_CONJ)
        m->flags |= FM_DIST_MV_CONJ;
    if ((c->ops & FM_FFT_OP_MULTIPLY) && t) {
        m->flags |= FM_DIST_MV_ARR | (p->a_first ? FM_DIST_MV_ARR_DST : 0);
        if (t->dtype == FM_C64 || t->dtype == FM_C128)
            m->flags |= FM_DIST_MV_ARR_CPLX;
        m->arr = t->data;
    }
}

/* Local: the geometry, the flow, the buffers, the core plans and the kernel. */
static fm_status plan_local(const char *where, fm_dist_gpu *p, fm_dtype in_dtype, const fm_tensor *pro,
                            const fm_tensor *epi)
{
    /* the complex array as (n0, n1, inner): 3-D (n0, n1, n2 or n2 / 2 + 1), 2-D (n0, n1 or n1 / 2 + 1, 1) */
    int nd = p->g.ndim;
    int64_t last = p->o.kind == FM_FFT_C2C ? p->g.n[nd - 1] : p->g.n[nd - 1] / 2 + 1;
    int64_t nc1 = nd == 3 ? p->g.n[1] : last, inner = nd == 3 ? last : 1;
    if (!(p->cnt = calloc((size_t)p->size * 4, sizeof(int64_t))))
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for the exchange's counts", where);
    int64_t *c = p->cnt, n = p->size;
    if (fm_dist_xgeom_init(&p->x, p->g.n[0], nc1, inner, p->size, p->rank, c, c + n, c + 2 * n, c + 3 * n) != 0)
        return fm_fail(FM_ERR_INTERNAL, "%s: the exchange geometry refused its arguments", where);
    size_t es = p->dbl ? 16 : 8;
    size_t sb = (size_t)p->x.s_elems * es, yb = (size_t)p->x.y_elems * es, mb = sb > yb ? sb : yb;
    fm_status st = FM_OK;
    if ((st = fm_dist_dev_alloc(where, &p->w, sb, "the slab work buffer")) != FM_OK ||
        (st = fm_dist_dev_alloc(where, &p->bb, mb, "the exchange buffer")) != FM_OK ||
        (st = fm_dist_dev_alloc(where, &p->yc, yb, "the column buffer")) != FM_OK)
        return st;
    if (!fm_dist_gpu_emulated() && (st = fm_dist_kernel_get(where, p->device, &p->k)) != FM_OK)
        return st;
    if (!fm_dist_gpu_emulated()) {
        cudaEvent_t ev = NULL;
        if ((st = cu(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), where, "the plan's event")) != FM_OK)
            return st;
        p->done = ev;
    }
    if ((st = fm_context_create(&p->ctx)) != FM_OK)
        return st;
    if (p->x.l0 && (st = plan_a(where, p, in_dtype, pro, epi)) != FM_OK)
        return st;
    if (p->x.b1 && (st = plan_b(p)) != FM_OK)
        return st;
    set_move_chain(p, pro, epi);
    p->arr[0] = pro ? pro->data : NULL, p->arr[1] = epi ? epi->data : NULL;
    return FM_OK;
}

static void gpu_destroy(fm_dist_gpu *p);

static fm_status gpu_plan(const char *where, MPI_Comm comm, const fm_dist_geom *g, const fm_dist_fft_options *o,
                          fm_dtype in_dtype, const fm_tensor *pro, const fm_tensor *epi, fm_dist_gpu **out, char *text,
                          size_t cap)
{
    *out = NULL;
    fm_dist_gpu *p = calloc(1, sizeof *p);
    fm_status st = p ? FM_OK : fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for the GPU plan", where);
    int prev = -1;
    if (p) {
        p->comm = comm, p->o = *o, p->g = *g, p->device = o->device_id;
        p->dbl = in_dtype == FM_F64 || in_dtype == FM_C128;
        MPI_Comm_rank(comm, &p->rank);
        MPI_Comm_size(comm, &p->size);
        p->a_first = o->in_layout == FM_DIST_SLAB && o->kind != FM_FFT_C2R &&
                     (o->out_layout == FM_DIST_TRANSPOSED || !o->inverse);
        if (o->in_layout == FM_DIST_TRANSPOSED && o->out_layout == FM_DIST_TRANSPOSED)
            st = fm_fail(FM_ERR_NOT_SUPPORTED, "%s: GPU ranks: both in_layout and out_layout transposed is not "
                         "implemented; use one slab side", where);
        else if (!fm_dist_enter_device(p->device, &prev))
            st = fm_fail(FM_ERR_UNAVAILABLE, "%s: GPU ranks: cuda:%d cannot be used (%s)", where, p->device,
                         cudaGetErrorString(cudaGetLastError()));
        else
            st = fm_dist_check_chain_arrays(where, p->device, pro, epi);
        if (st == FM_OK)
            st = plan_local(where, p, in_dtype, pro, epi);
    }
    if ((st = fm_dist_agree(comm, st)) == FM_OK) {
        int64_t most = p->x.s_elems > p->x.y_elems ? p->x.s_elems : p->x.y_elems;
        st = fm_dist_exchange_create(where, comm, p->dbl, most, p->device, &p->xch);
    }
    fm_dist_leave_device(prev);
    if (st != FM_OK) {
        gpu_destroy(p);
        return st;
    }
    snprintf(text, cap, " exchange=%s order=%s%s", fm_dist_exchange_describe(p->xch),
             p->a_first ? "local-first" : "exchange-first",
             fm_dist_gpu_emulated() ? " emulated-on-host (FUSEMATH_DIST_GPU_EMULATE)" : "");
    *out = p;
    return FM_OK;
}

/* the exchange S -> Y (to_y) or Y -> S; st: this rank's status so far (agreed there) */
static fm_status exchange(fm_dist_gpu *p, fm_status st, int to_y, const void *src, void *dst, void *stream)
{
    const fm_dist_xgeom *x = &p->x;
    if (to_y)
        return fm_dist_exchange_run(p->xch, st, src, x->send_count, x->send_off, dst, x->recv_count, x->recv_off,
                                    stream);
    return fm_dist_exchange_run(p->xch, st, src, x->recv_count, x->recv_off, dst, x->send_count, x->send_off, stream);
}

/* one move through the kernel on the stream (emulated: on the host, at once) */
static fm_status move(const fm_dist_gpu *p, const fm_dist_move *m, const void *src, void *dst,
                      const fm_dist_mv_chain *c, void *stream)
{
    if (!fm_dist_gpu_emulated())
        return fm_dist_kernel_move(p->k, p->dbl, m, src, dst, c, stream);
    fm_dist_move_host(p->dbl, m, src, dst, c);
    return FM_OK;
}

/* pack (S -> send buffer, to_send) or unpack (receive buffer -> S) every peer's columns, through c */
static fm_status peers(fm_dist_gpu *p, int to_send, const void *src, void *dst, const fm_dist_mv_chain *c,
                       void *stream)
{
    fm_status st = FM_OK;
    for (int q = 0; q < p->size && st == FM_OK; q++) {
        fm_dist_move m;
        if (to_send)
            fm_dist_xgeom_pack_s(&p->x, q, &m);
        else
            fm_dist_xgeom_unpack_s(&p->x, q, &m);
        st = move(p, &m, src, dst, c, stream);
    }
    return st;
}

static fm_status run_core(const fm_plan *plan, const void *in, void *out, const void *pro, const void *epi,
                          void *stream)
{
    if (!plan)
        return FM_OK; /* an empty block */
    void *ptrs[4] = {(void *)(uintptr_t)in, out, (void *)(uintptr_t)pro, (void *)(uintptr_t)epi};
    return fm_plan_execute(plan, ptrs, 4, stream);
}

/* Each exchange is entered on every rank whatever the stages before it gave (it agrees on that). */
static fm_status execute_a_first(fm_dist_gpu *p, const void *in, void *out, void *s)
{
    fm_status st = run_core(p->plan_a, in, p->w, p->arr[0], NULL, s);
    if (st == FM_OK)
        st = peers(p, 1, p->w, p->bb, NULL, s);
    st = exchange(p, st, 1, p->bb, p->yc, s);
    if (st == FM_OK)
        st = run_core(p->plan_b, p->yc, p->yc, NULL, NULL, s);
    if (p->o.out_layout == FM_DIST_TRANSPOSED) {
        fm_dist_move m;
        fm_dist_xgeom_y_to_t(&p->x, &m);
        return st == FM_OK ? move(p, &m, p->yc, out, &p->mv, s) : st;
    }
    st = exchange(p, st, 0, p->yc, p->bb, s);
    return st == FM_OK ? peers(p, 0, p->bb, out, &p->mv, s) : st;
}

static fm_status execute_b_first(fm_dist_gpu *p, const void *in, void *out, void *s)
{
    fm_status st;
    if (p->o.in_layout == FM_DIST_TRANSPOSED) { /* T -> Y: y_to_t's move reversed */
        fm_dist_move m, r;
        fm_dist_xgeom_y_to_t(&p->x, &m);
        r = m;
        for (int i = 0; i < 3; i++)
            r.s[i] = m.d[i], r.d[i] = m.s[i];
        st = move(p, &r, in, p->yc, &p->mv, s);
    } else {
        st = peers(p, 1, in, p->bb, &p->mv, s);
        st = exchange(p, st, 1, p->bb, p->yc, s);
    }
    if (st == FM_OK)
        st = run_core(p->plan_b, p->yc, p->yc, NULL, NULL, s);
    st = exchange(p, st, 0, p->yc, p->bb, s);
    if (st == FM_OK)
        st = peers(p, 0, p->bb, p->w, NULL, s);
    if (st == FM_OK)
        st = run_core(p->plan_a, p->w, out, NULL, p->arr[1], s);
    return st;
}

/* FM_ERR_INVALID_ARGUMENT unless ptr (of a non-empty block) is memory the GPU can read */
fm_status fm_dist_check_device_ptr(const char *where, int device, const char *name, const void *ptr)
{
    if (!ptr || fm_dist_gpu_emulated())
        return FM_OK;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
        (void)cudaGetLastError();
        a.type = cudaMemoryTypeUnregistered;
    }
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged)
        return a.device == device ? FM_OK
                                     : fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s is on cuda:%d; the plan is for "
                                               "cuda:%d", where, name, a.device, device);
    return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: %s is host memory; this plan runs on GPU ranks (cuda:%d) and "
                   "takes device memory", where, name, device);
}

/* The chains' multiply arrays said to be on the plan's GPU are device memory there (a host pointer
 * labelled CUDA would be read by the kernels and break the rank's CUDA context) */
fm_status fm_dist_check_chain_arrays(const char *where, int device, const fm_tensor *pro, const fm_tensor *epi)
{
    fm_status st = fm_dist_check_device_ptr(where, device, "prolog_array", pro ? pro->data : NULL);
    return st == FM_OK ? fm_dist_check_device_ptr(where, device, "epilog_array", epi ? epi->data : NULL) : st;
}

fm_status fm_dist_gpu_begin(int device, const void *in, const void *out, void *done, int recorded, void *stream,
                            int *prev)
{
    fm_status st = fm_dist_check_device_ptr("fm_dist_fft_execute", device, "in", in);
    if (st == FM_OK)
        st = fm_dist_check_device_ptr("fm_dist_fft_execute", device, "out", out);
    if (st == FM_OK && !fm_dist_enter_device(device, prev))
        st = fm_fail(FM_ERR_BACKEND, "fm_dist_fft_execute: cudaSetDevice(%d) failed", device);
    if (st == FM_OK && recorded) /* the previous execute (on any stream) is done with the plan's buffers */
        st = cu(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)done, 0), "fm_dist_fft_execute",
                "waiting for the previous execute's work");
    return st;
}

fm_status fm_dist_gpu_end(void *done, int *recorded, void *stream, fm_status st)
{
    if (!done)
        return st;
    fm_status rs = cu(cudaEventRecord((cudaEvent_t)done, (cudaStream_t)stream), "fm_dist_fft_execute",
                      "recording the execute's end");
    if (rs == FM_OK)
        *recorded = 1;
    else /* the event does not mark this execute's work: wait for it here instead */
        (void)cudaStreamSynchronize((cudaStream_t)stream);
    return st == FM_OK ? rs : st;
}

static fm_status gpu_execute(fm_dist_gpu *p, const void *in, void *out, void *stream)
{
    int prev = -1;
    fm_status st = fm_dist_gpu_begin(p->device, in, out, p->done, p->recorded, stream, &prev);
    if ((st = fm_dist_agree(p->comm, st)) == FM_OK) {
        st = p->a_first ? execute_a_first(p, in, out, stream) : execute_b_first(p, in, out, stream);
        st = fm_dist_gpu_end(p->done, &p->recorded, stream, st);
        /* what failed after the last exchange (the last copy to the GPU, an NCCL enqueue, the unpack, the
         * last local transform, the record) fails every rank: no rank goes on alone into its next collective */
        if (p->size > 1)
            st = fm_dist_agree(p->comm, st);
    }
    fm_dist_leave_device(prev);
    return st;
}

static void gpu_destroy(fm_dist_gpu *p)
{
    if (!p)
        return;
    int prev;
    (void)fm_dist_enter_device(p->device, &prev);
    if (!fm_dist_gpu_emulated())
        cudaDeviceSynchronize(); /* first: queued work may still use the buffers, the staging, cuFFT's areas */
    fm_dist_exchange_destroy(p->xch);
    fm_plan_release(p->plan_a);
    fm_plan_release(p->plan_b);
    fm_context_destroy(p->ctx);
    fm_dist_dev_free(p->w);
    fm_dist_dev_free(p->bb);
    fm_dist_dev_free(p->yc);
    if (p->done)
        cudaEventDestroy(p->done);
    fm_dist_leave_device(prev);
    free(p->cnt);
    free(p);
}

static const fm_dist_gpu_ops gpu_ops = {FM_DIST_GPU_ABI, FM_DIST_GPU_LAYOUT, fm_dist_gpu_emulated, gpu_plan,
                                          gpu_execute, gpu_destroy, fm_dist_pencil_plan, fm_dist_pencil_execute,
                                          fm_dist_pencil_destroy}; /* the pencils: dist_pencil_gpu.c */

__attribute__((visibility("default"))) const fm_dist_gpu_ops *fm_dist_gpu_module_entry(void) { return &gpu_ops; }

