/* dist_pencil.c : pencil-decomposed 3-D FFTs on CPU ranks (opts->decomposition FM_DIST_DECOMP_PENCIL;
 * docs/design.md, Distributed, Pencils). FFTW-MPI has no pencils, so the transform is made of the
 * core's local FFT plans (FFTW on host data) and MPI_Alltoallv on the two sub-communicators of a
 * P1 x P2 grid (rank = r1 P2 + r2). Three pencils of the complex array (n0, n1, m2; m2 = n2 / 2 + 1
 * for r2c / c2r), each C-contiguous in logical axis order, in FFTW-style ceil(n / P) blocks:
 *   Z (slab layout side): axis 0 block r1 of P1, axis 1 block r2 of P2, axis 2 whole;
 *   Y (internal):         axis 0 block r1 of P1, axis 1 whole,          axis 2 block r2 of P2;
 *   X (transposed side):  axis 0 whole,          axis 1 block r1 of P1, axis 2 block r2 of P2.
 * Z <-> Y is an all-to-all among the P2 ranks of a row (same r1), Y <-> X among the P1 ranks of a
 * column (same r2). A transform walks Z -> Y -> X (2 exchanges), X -> Y -> Z, or out and back (Z ->
 * Y -> X -> Y -> Z, 4 exchanges), running the FFT of axis 2 / 1 / 0 where that axis is whole: on the
 * first visit, but for c2r on the last (its real axis 2 is the last transform). An exchange within a
 * row or column of one rank (P2 = 1 or P1 = 1) would move nothing (both pencils are the same block):
 * it is left out and the FFTs on either side of it are one core plan of two or three axes (a P x 1
 * grid is then the slab algorithm, 1 x 1 one local 3-D FFT). The prolog goes into
 * the first step (the first core plan's prolog, or the first pack), the epilog and the global norm
 * into the last (the last core plan's epilog, or the last unpack: fm_dist_copy).
 *
 * GPU ranks (docs/design.md, Distributed, GPU ranks): the GPU module, libfusemath_mpi_cuda.so, builds
 * this file too (dist_pencil_gpu.c defines FM_DIST_PENCIL_GPU), so that the algorithm is one: only its
 * three primitives differ there. The core plans are on cuda:opts->device_id (cuFFT through the core,
 * which fuses the chains), the box copies are the module's move kernel (fm_dist_kernel_move, the chain
 * as fm_dist_mv_chain), the exchanges are the module's (fm_dist_exchange: staged, CUDA-aware MPI or
 * NCCL, one for the rows and one for the columns), the three buffers are device memory, and an
 * execute is ordered on the caller's stream (a `done` event: the next execute, on any stream, waits
 * for the previous one's use of the buffers). FUSEMATH_DIST_GPU_EMULATE=host runs all of it on the
 * host. */
#include "dist_impl.h"
#include "dist_xgeom.h"
#if FM_DIST_PENCIL_GPU
#include "dist_gpu.h"

#include <cuda_runtime.h>
#endif

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { POS_Z = 0, POS_Y = 1, POS_X = 2 };
enum { MAX_OPS = 8 };
static const char pos_names[3] = {'z', 'y', 'x'};
/* which grid index splits each axis of a pencil: 0 none, 1 r1 (of P1), 2 r2 (of P2) */
static const int split_of[3][3] = {{1, 2, 0}, {1, 0, 2}, {0, 1, 2}};
static const int whole_axis[3] = {2, 1, 0};

typedef struct pencil_xchg {
    MPI_Comm comm;                /* the pencil's row (Z <-> Y) or column (Y <-> X) communicator */
    int peers, from, to;          /* pencils */
    int64_t *cnt;                 /* send count, send displ, recv count, recv displ: peers entries each */
    int *scratch;                 /* fm_dist_alltoallv's int counts (CPU ranks) */
    int fits;                     /* the exchange's counts fit MPI's int on every rank (CPU ranks) */
    int64_t *rng;                 /* send offset, send length, recv offset, recv length (along sk / rk) */
    int64_t sdims[3], rdims[3];   /* this rank's blocks of the two pencils */
    int sk, rk;                   /* the axis each side's per-peer box is cut along */
#if FM_DIST_PENCIL_GPU
    fm_dist_exchange *ex;         /* the pencil's row or column exchange (not owned) */
#endif
} pencil_xchg;

typedef struct pencil_op {
    int fft, axes, pos;           /* fft: the FFT of the axes (bit a: axis a) on pencil pos; else the exchange x */
    fm_plan *plan;                /* NULL where this rank's block is empty */
    pencil_xchg x;
} pencil_op;

struct fm_dist_pencil {
    MPI_Comm comm, row, col;      /* comm: the plan's (not owned); row, col: owned */
    int P1, P2, r1, r2, dbl, real_in, real_out, nops, nx;
    int64_t nc[3], n2;            /* the complex array's shape; the real axis 2 */
    int64_t most;                 /* complex elements of this rank's largest pencil: each buffer's */
    pencil_op ops[MAX_OPS];
    fm_context *ctx;
    void *w, *s, *r;              /* the pencil being worked on, the send and the receive buffer */
    fm_dist_chain_run run[2];     /* the prolog's and the epilog's (the norm included) */
    fm_dist_chain_run none;
#if FM_DIST_PENCIL_GPU
    int device;
    fm_dist_exchange *xrow, *xcol; /* the rows' (z <> y) and columns' (y <> x) exchanges; NULL where unused */
    const fm_dist_kernel *k;       /* the move kernel (NULL when emulated) */
    cudaEvent_t done;              /* recorded after each execute's work on its stream (NULL when emulated) */
    int recorded;
#endif
};

fm_status fm_dist_pencil_grid(const char *where, int size, int rows, int *p1, int *p2)
{
    if (rows < 0 || (rows > 0 && size % rows != 0))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->grid_rows = %d does not divide the communicator's %d "
                       "ranks; expected a divisor of %d (P1 of a P1 x P2 grid) or 0 (MPI_Dims_create's choice)",
                       where, rows, size, size);
    int dims[2] = {rows, rows ? size / rows : 0};
    if (!rows)
        MPI_Dims_create(size, 2, dims); /* dims[0] >= dims[1] */
    *p1 = dims[0], *p2 = dims[1];
    return FM_OK;
}

/* this rank's block of pencil pos of an array of shape nc (r1 of P1, r2 of P2) */
static void block3(const int64_t nc[3], int pos, int P1, int P2, int r1, int r2, int64_t d[3], int64_t o[3])
{
    for (int a = 0; a < 3; a++) {
        int s = split_of[pos][a];
        d[a] = nc[a], o[a] = 0;
        if (s)
            fm_dist_block_of(nc[a], s == 1 ? P1 : P2, s == 1 ? r1 : r2, &d[a], &o[a]);
    }
}

fm_status fm_dist_pencil_geometry(const char *where, MPI_Comm comm, int ndim, const int64_t *n,
                                  const fm_dist_fft_options *o, fm_dist_geom *g)
{
    memset(g, 0, sizeof *g);
    if (ndim != 3)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "%s: ndim = %d with opts->decomposition = FM_DIST_DECOMP_PENCIL: "
                       "pencils are 3-D only; use decomposition slab for 2-D transforms", where, ndim);
    int rank, size, P1, P2;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    fm_status st = fm_dist_pencil_grid(where, size, o->grid_rows, &P1, &P2);
    if (st != FM_OK)
        return st;
    g->ndim = 3;
    int64_t nc[3] = {n[0], n[1], o->kind == FM_FFT_C2C ? n[2] : n[2] / 2 + 1};
    for (int w = 0; w < 2; w++) {
        fm_dist_side *s = &g->side[w];
        int layout = w == FM_DIST_IN ? o->in_layout : o->out_layout;
        s->real = (o->kind == FM_FFT_R2C && w == FM_DIST_IN) || (o->kind == FM_FFT_C2R && w == FM_DIST_OUT);
        block3(nc, layout == FM_DIST_TRANSPOSED ? POS_X : POS_Z, P1, P2, rank / P2, rank % P2, s->local, s->offset);
        for (int a = 0; a < 3; a++)
            s->global[a] = s->real ? n[a] : nc[a];
        if (s->real) /* the real side is a z-pencil: axis 2 whole, real */
            s->local[2] = n[2];
        s->buf_row = 2 * s->local[2];
    }
    for (int a = 0; a < 3; a++)
        g->n[a] = n[a];
    g->alloc = 1; /* no FFTW-MPI buffers */
    return FM_OK;
}

static int64_t prod3(const int64_t d[3]) { return d[0] * d[1] * d[2]; }

/* The exchange from pencil a to b: per-peer boxes, counts and displacements (local). */
static fm_status plan_xchg(const char *where, fm_dist_pencil *p, int a, int b, pencil_xchg *x)
{
    int zy = (a == POS_Z || b == POS_Z), P = zy ? p->P2 : p->P1;
    x->comm = zy ? p->row : p->col, x->peers = P, x->from = a, x->to = b;
    block3(p->nc, a, p->P1, p->P2, p->r1, p->r2, x->sdims, (int64_t[3]){0});
    block3(p->nc, b, p->P1, p->P2, p->r1, p->r2, x->rdims, (int64_t[3]){0});
    x->sk = whole_axis[a], x->rk = whole_axis[b]; /* whole on this side, split over the peers on the other */
    x->cnt = calloc((size_t)P * 4, sizeof(int64_t));
    x->rng = calloc((size_t)P * 4, sizeof(int64_t));
    x->scratch = calloc((size_t)P * 4, sizeof(int));
    if (!x->cnt || !x->rng || !x->scratch)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for the exchange's counts", where);
    int64_t sdisp = 0, rdisp = 0;
    for (int q = 0; q < P; q++) {
        int64_t *r = x->rng;
        fm_dist_block_of(p->nc[x->sk], P, q, &r[P + q], &r[q]);
        fm_dist_block_of(p->nc[x->rk], P, q, &r[3 * P + q], &r[2 * P + q]);
        int64_t sc = prod3(x->sdims) / x->sdims[x->sk] * r[P + q]; /* the cut axis is whole: >= 1 */
        int64_t rc = prod3(x->rdims) / x->rdims[x->rk] * r[3 * P + q];
        x->cnt[q] = sc, x->cnt[P + q] = sdisp, x->cnt[2 * P + q] = rc, x->cnt[3 * P + q] = rdisp;
        sdisp += sc, rdisp += rc;
    }
    /* this rank's part; agreed over the row / column once the plan is (fm_dist_pencil_plan) */
    x->fits = fm_dist_alltoallv_fits(x->cnt, x->cnt + P, x->cnt + 2 * P, x->cnt + 3 * P, P, INT_MAX);
    return FM_OK;
}

/* The core's FFT of op's axes (local): the chains from p->run where it is the first / last step. */
static fm_status plan_fft(fm_dist_pencil *p, pencil_op *op, int first, int last, const fm_dist_fft_options *o,
                          const fm_tensor *pro, const fm_tensor *epi)
{
    int64_t d[3], off[3];
    block3(p->nc, op->pos, p->P1, p->P2, p->r1, p->r2, d, off);
    if (!prod3(d))
        return FM_OK;
    fm_dtype cx = p->dbl ? FM_C128 : FM_C64, re = p->dbl ? FM_F64 : FM_F32;
    int r2c = first && p->real_in, c2r = last && p->real_out;
    int64_t rd[3] = {d[0], d[1], p->n2};
    fm_device dev = {FM_DEVICE_CPU, 0};
#if FM_DIST_PENCIL_GPU
    if (!fm_dist_gpu_emulated())
        dev.type = FM_DEVICE_CUDA, dev.id = p->device;
#endif
    fm_tensor tin, tout;
    fm_tensor_init(&tin, NULL, dev, r2c ? re : cx, 3, r2c ? rd : d, NULL);
    fm_tensor_init(&tout, NULL, dev, c2r ? re : cx, 3, c2r ? rd : d, NULL);
    fm_fft_options c;
    fm_fft_options_init(&c);
    c.kind = r2c ? FM_FFT_R2C : c2r ? FM_FFT_C2R : FM_FFT_C2C;
    c.inverse = o->inverse, c.naxes = 0;
    for (int a = 0; a < 3; a++) /* ascending: r2c / c2r's halved axis 2 last */
        if (op->axes & (1 << a))
            c.axes[c.naxes++] = a;
    c.norm = o->inverse ? FM_FFT_NORM_FORWARD : FM_FFT_NORM_BACKWARD; /* a factor of 1: the norm is a scale */
    c.effort = o->effort, c.execution = FM_EXECUTION_CPU, c.num_threads = o->num_threads > 0 ? o->num_threads : 1;
    if (dev.type == FM_DEVICE_CUDA) /* on the rank's GPU, whatever FUSEMATH_EXECUTION says */
        c.execution = FM_EXECUTION_CUDA, c.device_id = dev.id;
    for (int w = 0; w < 2; w++) {
        if (!(w == FM_DIST_IN ? first : last))
            continue;
        const fm_dist_chain_run *r = &p->run[w];
        fm_fft_chain *ch = w == FM_DIST_IN ? &c.prolog : &c.epilog;
        ch->ops = (r->scaled ? FM_FFT_OP_SCALE : 0u) | (r->conj ? FM_FFT_OP_CONJ : 0u) | (r->arr ? FM_FFT_OP_MULTIPLY : 0u);
        ch->scale[0] = r->scale[0], ch->scale[1] = r->scale[1];
    }
    return fm_fft_plan(p->ctx, &tin, &tout, first && p->run[0].arr ? pro : NULL, last && p->run[1].arr ? epi : NULL,
                       &c, &op->plan);
}

/* the pencils a transform visits, from in_layout's to out_layout's */
static int walk(const fm_dist_fft_options *o, int path[5])
{
    int from = o->in_layout == FM_DIST_TRANSPOSED ? POS_X : POS_Z, to = o->out_layout == FM_DIST_TRANSPOSED ? POS_X : POS_Z;
    int k = 0, other = from == POS_Z ? POS_X : POS_Z;
    path[k++] = from, path[k++] = POS_Y, path[k++] = other;
    if (to == from)
        path[k++] = POS_Y, path[k++] = from;
    return k;
}

/* The steps, buffers and core plans on this rank (local). */
static fm_status plan_local(const char *where, fm_dist_pencil *p, const fm_dist_fft_options *o, const fm_tensor *pro,
                            const fm_tensor *epi)
{
    int path[5], len = walk(o, path), late = o->kind == FM_FFT_C2R, done[3] = {0, 0, 0};
    int at[5] = {-1, -1, -1, -1, -1}; /* the axis transformed at each visit */
    for (int i = late ? len - 1 : 0; late ? i >= 0 : i < len; i += late ? -1 : 1)
        if (!done[whole_axis[path[i]]])
            done[whole_axis[path[i]]] = 1, at[i] = whole_axis[path[i]];
    fm_status st = FM_OK;
    for (int i = 0; i < len && st == FM_OK; i++) {
        pencil_op *prev = p->nops ? &p->ops[p->nops - 1] : NULL;
        if (at[i] >= 0 && prev && prev->fft) /* no exchange between: one core plan of both axes */
            prev->axes |= 1 << at[i];
        else if (at[i] >= 0)
            p->ops[p->nops++] = (pencil_op){.fft = 1, .axes = 1 << at[i], .pos = path[i]};
        /* an exchange within a row or column of one rank moves nothing: both pencils are the same block */
        int peers = path[i] == POS_Z || (i + 1 < len && path[i + 1] == POS_Z) ? p->P2 : p->P1;
        if (i + 1 < len && peers > 1) {
            pencil_op *op = &p->ops[p->nops++];
            op->pos = path[i], p->nx++;
            st = plan_xchg(where, p, path[i], path[i + 1], &op->x);
        }
    }
    if (st != FM_OK)
        return st;
    int64_t most = 1;
    for (int pos = 0; pos < 3; pos++) {
        int64_t d[3], off[3];
        block3(p->nc, pos, p->P1, p->P2, p->r1, p->r2, d, off);
        most = prod3(d) > most ? prod3(d) : most;
    }
    p->most = most;
    size_t bytes = (size_t)most * (p->dbl ? 16 : 8);
#if FM_DIST_PENCIL_GPU
    if ((st = fm_dist_dev_alloc(where, &p->w, bytes, "the pencil work buffer")) != FM_OK ||
        (st = fm_dist_dev_alloc(where, &p->s, bytes, "the pencil send buffer")) != FM_OK ||
        (st = fm_dist_dev_alloc(where, &p->r, bytes, "the pencil receive buffer")) != FM_OK)
        return st;
    if (!fm_dist_gpu_emulated()) {
        if ((st = fm_dist_kernel_get(where, p->device, &p->k)) != FM_OK)
            return st;
        cudaEvent_t ev = NULL;
        cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e != cudaSuccess)
            return fm_fail(FM_ERR_BACKEND, "%s: the plan's event: %s", where, cudaGetErrorString(e));
        p->done = ev;
    }
#else
    p->w = malloc(bytes), p->s = malloc(bytes), p->r = malloc(bytes);
    if (!p->w || !p->s || !p->r)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for the pencils' three %zu-byte buffers", where, bytes);
#endif
    if ((st = fm_context_create(&p->ctx)) != FM_OK)
        return st;
    for (int i = 0; i < p->nops && st == FM_OK; i++)
        if (p->ops[i].fft)
            st = plan_fft(p, &p->ops[i], i == 0, i == p->nops - 1, o, pro, epi);
    return st;
}

#if FM_DIST_PENCIL_GPU
/* GPU ranks: the two exchanges (each collective over its row or column; every rank creates the ones its
 * grid has, rows first, whatever the other gave, then agrees over the plan's communicator) */
static fm_status plan_exchanges(const char *where, fm_dist_pencil *p)
{
    fm_status sr = FM_OK, sc = FM_OK;
    if (p->P2 > 1)
        sr = fm_dist_exchange_create(where, p->row, p->dbl, p->most, p->device, &p->xrow);
    if (p->P1 > 1)
        sc = fm_dist_exchange_create(where, p->col, p->dbl, p->most, p->device, &p->xcol);
    for (int i = 0; i < p->nops; i++)
        if (!p->ops[i].fft)
            p->ops[i].x.ex = p->ops[i].x.comm == p->row ? p->xrow : p->xcol;
    return fm_dist_agree(p->comm, sr != FM_OK ? sr : sc);
}
#endif

fm_status fm_dist_pencil_plan(const char *where, MPI_Comm comm, const fm_dist_geom *g, const fm_dist_fft_options *o,
                              fm_dtype in_dtype, const fm_tensor *pro, const fm_tensor *epi,
                              const fm_dist_chain_run run[2], fm_dist_pencil **out, char *text, size_t cap)
{
    *out = NULL;
    fm_dist_pencil *p = calloc(1, sizeof *p);
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    fm_status st = p ? FM_OK : fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for the pencil plan", where);
    int P1 = 1, P2 = size;
    if (st == FM_OK)
        st = fm_dist_pencil_grid(where, size, o->grid_rows, &P1, &P2);
    /* the agreement first: the splits below are collective */
    if ((st = fm_dist_agree(comm, st)) != FM_OK) {
        free(p);
        return st;
    }
    p->comm = comm, p->P1 = P1, p->P2 = P2, p->r1 = rank / P2, p->r2 = rank % P2;
    p->row = p->col = MPI_COMM_NULL;
    MPI_Comm_split(comm, p->r1, p->r2, &p->row); /* the P2 ranks of row r1 */
    MPI_Comm_split(comm, p->r2, p->r1, &p->col); /* the P1 ranks of column r2 */
    p->dbl = in_dtype == FM_F64 || in_dtype == FM_C128;
    p->real_in = o->kind == FM_FFT_R2C, p->real_out = o->kind == FM_FFT_C2R;
    p->nc[0] = g->n[0], p->nc[1] = g->n[1], p->n2 = g->n[2];
    p->nc[2] = o->kind == FM_FFT_C2C ? g->n[2] : g->n[2] / 2 + 1;
    p->run[0] = run[0], p->run[1] = run[1];
#if FM_DIST_PENCIL_GPU
    p->device = o->device_id;
    int prev = -1;
    if (!fm_dist_enter_device(p->device, &prev))
        st = fm_fail(FM_ERR_UNAVAILABLE, "%s: GPU ranks: cuda:%d cannot be used (%s)", where, p->device,
                     cudaGetErrorString(cudaGetLastError()));
    else if ((st = fm_dist_check_chain_arrays(where, p->device, pro, epi)) == FM_OK)
        st = plan_local(where, p, o, pro, epi);
    st = fm_dist_agree(comm, st);
    if (st == FM_OK)
        st = plan_exchanges(where, p);
    fm_dist_leave_device(prev);
#else
    st = fm_dist_agree(comm, plan_local(where, p, o, pro, epi));
    /* every rank is here with the same ops: whether an exchange is one MPI_Alltoallv, agreed once over
     * its row / column instead of at every execute */
    for (int i = 0; st == FM_OK && i < p->nops; i++)
        if (!p->ops[i].fft)
            MPI_Allreduce(MPI_IN_PLACE, &p->ops[i].x.fits, 1, MPI_INT, MPI_LAND, p->ops[i].x.comm);
#endif
    if (st != FM_OK) {
        fm_dist_pencil_destroy(p);
        return st;
    }
    int k = snprintf(text, cap, " decomposition=pencil grid=%dx%d path=", P1, P2);
    for (int i = 0; i < p->nops && k > 0 && (size_t)k < cap; i++) {
        const pencil_op *op = &p->ops[i];
        if (op->fft)
            k += snprintf(text + k, cap - (size_t)k, "%sfft%s%s%s", i ? "," : "", op->axes & 1 ? "0" : "",
                          op->axes & 2 ? "1" : "", op->axes & 4 ? "2" : "");
        else
            k += snprintf(text + k, cap - (size_t)k, "%s%c>%c", i ? "," : "", pos_names[op->x.from], pos_names[op->x.to]);
    }
#if FM_DIST_PENCIL_GPU
    /* one exchange's text where both are alike (the usual case), else the rows' and the columns' */
    const char *xr = p->xrow ? fm_dist_exchange_describe(p->xrow) : NULL;
    const char *xc = p->xcol ? fm_dist_exchange_describe(p->xcol) : NULL;
    if (k > 0 && (size_t)k < cap)
        snprintf(text + k, cap - (size_t)k, " exchanges=%d exchange=%s%s%s%s local=core-fft%s", p->nx,
                 xr && xc && strcmp(xr, xc) ? "rows:" : "", xr ? xr : xc ? xc : "none",
                 xr && xc && strcmp(xr, xc) ? ",columns:" : "", xr && xc && strcmp(xr, xc) ? xc : "",
                 fm_dist_gpu_emulated() ? " emulated-on-host (FUSEMATH_DIST_GPU_EMULATE)" : "");
#else
    if (k > 0 && (size_t)k < cap)
        snprintf(text + k, cap - (size_t)k, " exchanges=%d (MPI_Alltoallv: z<>y over rows of %d, y<>x over columns "
                 "of %d) local=core-fft", p->nx, P2, P1);
#endif
    *out = p;
    return FM_OK;
}

/* Copy peer box (off, len along axis k) of the block `blk` (dims d) to or from the contiguous chunk at
 * element `at` of buf, through chain c (its multiply array laid out as the block). GPU ranks: one move
 * of the module's kernel on the stream. */
static fm_status box_copy(const fm_dist_pencil *p, int pack, const int64_t d[3], int k, int64_t off, int64_t len,
                          void *blk, void *buf, int64_t at, const fm_dist_chain_run *c, void *stream)
{
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < k; i++)
        outer *= d[i];
    for (int i = k + 1; i < 3; i++)
        inner *= d[i];
#if FM_DIST_PENCIL_GPU
    if (!outer || !len || !inner)
        return FM_OK;
    /* the block's box: outer x len x inner at (0, off, 0); the chunk: the same, contiguous */
    fm_dist_move bm = {off * inner, at, {outer, len, inner}, {d[k] * inner, inner, 1}, {len * inner, inner, 1}}, m = bm;
    if (!pack) /* chunk -> block */
        for (int i = 0; i < 3; i++)
            m.s[i] = bm.d[i], m.d[i] = bm.s[i];
    m.src_base = pack ? bm.src_base : at, m.dst_base = pack ? at : bm.src_base;
    fm_dist_mv_chain mc = {0, {1, 0}, NULL};
    if (c->scaled)
        mc.flags |= FM_DIST_MV_SCALE, mc.scale[0] = c->scale[0], mc.scale[1] = c->scale[1];
    if (c->conj)
        mc.flags |= FM_DIST_MV_CONJ;
    if (c->arr) /* indexed as the block: the source of a pack, the destination of an unpack */
        mc.flags |= FM_DIST_MV_ARR | (c->arr_cplx ? FM_DIST_MV_ARR_CPLX : 0u) | (pack ? 0u : FM_DIST_MV_ARR_DST),
        mc.arr = c->arr;
    const void *src = pack ? blk : buf;
    void *dst = pack ? buf : blk;
    if (fm_dist_gpu_emulated()) {
        fm_dist_move_host(p->dbl, &m, src, dst, &mc);
        return FM_OK;
    }
    return fm_dist_kernel_move(p->k, p->dbl, &m, src, dst, &mc, stream);
#else
    (void)stream;
    int64_t L = 2 * len * inner, B = 2 * d[k] * inner; /* scalars: a row of the chunk, of the block */
    if (!outer || !L)
        return FM_OK;
    size_t es = p->dbl ? sizeof(double) : sizeof(float);
    char *b = (char *)blk + (size_t)(2 * off * inner) * es, *ch = (char *)buf + (size_t)(2 * at) * es;
    if (!c->arr) { /* one call: its rows are the box's */
        if (pack)
            fm_dist_copy(p->dbl, ch, L, b, B, outer, L, 1, c);
        else
            fm_dist_copy(p->dbl, b, B, ch, L, outer, L, 1, c);
        return FM_OK;
    }
    size_t ae = es * (c->arr_cplx ? 2 : 1); /* the array's element, at the block's element offsets */
    for (int64_t r = 0; r < outer; r++) {
        fm_dist_chain_run rc = *c;
        rc.arr = (const char *)c->arr + (size_t)(r * d[k] * inner + off * inner) * ae;
        if (pack)
            fm_dist_copy(p->dbl, ch + (size_t)(r * L) * es, L, b + (size_t)(r * B) * es, B, 1, L, 1, &rc);
        else
            fm_dist_copy(p->dbl, b + (size_t)(r * B) * es, B, ch + (size_t)(r * L) * es, L, 1, L, 1, &rc);
    }
    return FM_OK;
#endif
}

static int plain(const fm_dist_chain_run *c) { return !c->scaled && !c->conj && !c->arr; }

/* Pack src's boxes, the all-to-all (entered whatever st says: the peers are in it too), unpack into dst.
 * An x-pencil side is cut along axis 0, so its peers' boxes lie in peer order, contiguous, at the
 * displacements: that side is sent from / received into the block itself, no copy, when no chain
 * is applied there (dst is never src's block: the receive lands in W only after W was packed).
 * CPU ranks: MPI_Alltoallv (st passes through); GPU ranks: the module's exchange, which agrees on st
 * over the row or column first. */
static fm_status run_xchg(const fm_dist_pencil *p, const pencil_xchg *x, fm_status st, const void *src, void *dst,
                          const fm_dist_chain_run *pro, const fm_dist_chain_run *epi, void *stream)
{
    int P = x->peers;
    const int64_t *r = x->rng;
    int dsend = x->sk == 0 && plain(pro) && src, drecv = x->rk == 0 && plain(epi) && dst;
    for (int q = 0; st == FM_OK && !dsend && q < P; q++)
        st = box_copy(p, 1, x->sdims, x->sk, r[q], r[P + q], (void *)(uintptr_t)src, p->s, x->cnt[P + q], pro, stream);
    const int64_t *c = x->cnt;
#if FM_DIST_PENCIL_GPU
    st = fm_dist_exchange_run(x->ex, st, dsend ? src : p->s, c, c + P, drecv ? dst : p->r, c + 2 * P, c + 3 * P,
                              stream);
#else
    MPI_Datatype t = p->dbl ? MPI_C_DOUBLE_COMPLEX : MPI_C_FLOAT_COMPLEX;
    int mr = fm_dist_alltoallv(dsend ? src : p->s, c, c + P, drecv ? dst : p->r, c + 2 * P, c + 3 * P, t,
                               p->dbl ? 16 : 8, x->comm, x->scratch, INT_MAX, 0, x->fits);
    if (mr != MPI_SUCCESS && st == FM_OK)
        st = fm_fail(FM_ERR_BACKEND, "fm_dist_fft_execute: the pencil exchange failed (MPI error %d)", mr);
#endif
    for (int q = 0; st == FM_OK && !drecv && q < P; q++)
        st = box_copy(p, 0, x->rdims, x->rk, r[2 * P + q], r[3 * P + q], dst, p->r, x->cnt[3 * P + q], epi, stream);
    return st;
}

/* the steps, in order (GPU ranks: enqueued on the stream) */
static fm_status steps(const fm_dist_pencil *p, const void *in, void *out, void *stream)
{
    fm_status st = FM_OK;
    const void *cur = in;
    for (int i = 0; i < p->nops; i++) {
        const pencil_op *op = &p->ops[i];
        int first = i == 0, last = i == p->nops - 1;
        void *dst = last ? out : p->w;
        if (op->fft) {
            if (st == FM_OK && op->plan) {
                void *ptrs[4] = {(void *)(uintptr_t)cur, dst, first ? (void *)(uintptr_t)p->run[0].arr : NULL,
                                 last ? (void *)(uintptr_t)p->run[1].arr : NULL};
                st = fm_plan_execute(op->plan, ptrs, 4, stream);
            }
        } else {
            st = run_xchg(p, &op->x, st, cur, dst, first ? &p->run[0] : &p->none, last ? &p->run[1] : &p->none,
                          stream);
        }
        cur = dst;
    }
    return st;
}

fm_status fm_dist_pencil_execute(fm_dist_pencil *p, const void *in, void *out, void *stream)
{
#if FM_DIST_PENCIL_GPU
    int prev = -1;
    fm_status st = fm_dist_gpu_begin(p->device, in, out, p->done, p->recorded, stream, &prev);
    if ((st = fm_dist_agree(p->comm, st)) == FM_OK) {
        st = fm_dist_gpu_end(p->done, &p->recorded, stream, steps(p, in, out, stream));
        /* a local failure (an enqueue, a core execute, the record) fails every rank; the exchanges were
         * entered by all */
        st = fm_dist_agree(p->comm, st);
    }
    fm_dist_leave_device(prev);
    return st;
#else
    (void)stream;
    /* a local failure (a core execute) fails every rank; the exchanges were entered by all */
    return fm_dist_agree(p->comm, steps(p, in, out, NULL));
#endif
}

void fm_dist_pencil_destroy(fm_dist_pencil *p)
{
    if (!p)
        return;
#if FM_DIST_PENCIL_GPU
    int prev = -1;
    (void)fm_dist_enter_device(p->device, &prev);
    if (!fm_dist_gpu_emulated())
        cudaDeviceSynchronize(); /* first: queued work may still use the buffers, the staging, cuFFT's areas */
    fm_dist_exchange_destroy(p->xrow); /* collective over its row / column (NCCL's communicator) */
    fm_dist_exchange_destroy(p->xcol);
#endif
    for (int i = 0; i < p->nops; i++) {
        fm_plan_release(p->ops[i].plan);
        free(p->ops[i].x.cnt);
        free(p->ops[i].x.rng);
        free(p->ops[i].x.scratch);
    }
    fm_context_destroy(p->ctx);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        if (p->row != MPI_COMM_NULL)
            MPI_Comm_free(&p->row);
        if (p->col != MPI_COMM_NULL)
            MPI_Comm_free(&p->col);
    }
#if FM_DIST_PENCIL_GPU
    fm_dist_dev_free(p->w);
    fm_dist_dev_free(p->s);
    fm_dist_dev_free(p->r);
    if (p->done)
        cudaEventDestroy(p->done);
    fm_dist_leave_device(prev);
#else
    free(p->w);
    free(p->s);
    free(p->r);
#endif
    free(p);
}
