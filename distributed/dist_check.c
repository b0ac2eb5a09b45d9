/* dist_check.c : argument checks, the decomposition and the collective agreement of
 * libfusemath_mpi (docs/design.md, Distributed). */
#include "dist_impl.h"
#include "dist_xgeom.h"

#if FM_HAVE_FFTW_MPI
#include <fftw3-mpi.h>
#endif
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

void fm_dist_fft_options_init(fm_dist_fft_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->kind = FM_FFT_C2C;
    o->in_layout = o->out_layout = FM_DIST_SLAB;
    o->norm = FM_FFT_NORM_BACKWARD;
    o->effort = FM_FFT_EFFORT_ESTIMATE;
    o->prolog.scale[0] = o->epilog.scale[0] = 1.0;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_fftw_mpi(void)
{
#if FM_HAVE_FFTW_MPI
    /* fftw_init_threads first (the planner enter does it), then the MPI solvers, under the lock */
    (void)fm_fftw_planner_enter();
    fftw_mpi_init();
    fftwf_mpi_init();
    fm_fftw_planner_leave();
#endif
}

fm_status fm_dist_init(const char *where)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: MPI is %s: the caller initializes MPI (MPI_Init, or importing "
                       "mpi4py's MPI) before and finalizes it after", where, finalized ? "already finalized" : "not initialized");
    pthread_once(&init_once, init_fftw_mpi);
    return FM_OK;
}

fm_status fm_dist_check_comm(const char *where, MPI_Comm comm, int *rank, int *size)
{
    fm_status st = fm_dist_init(where);
    if (st != FM_OK)
        return st;
    if (comm == MPI_COMM_NULL)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: comm is MPI_COMM_NULL; expected an intra-communicator", where);
    int inter = 0;
    MPI_Comm_test_inter(comm, &inter);
    if (inter) /* the same answer on every rank of it: all of them refuse, none waits */
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: comm is an inter-communicator; FFTW-MPI takes an "
                       "intra-communicator (MPI_Intercomm_merge makes one)", where);
    MPI_Comm_rank(comm, rank);
    MPI_Comm_size(comm, size);
    return FM_OK;
}

static fm_status check_chain(const char *where, const char *name, const fm_fft_chain *c, int real)
{
    const unsigned allowed = FM_FFT_OP_SCALE | FM_FFT_OP_CONJ | FM_FFT_OP_MULTIPLY;
    if (c->ops & ~allowed)
        return fm_fail(c->ops & ~(allowed | FM_FFT_OP_CALLBACK) ? FM_ERR_INVALID_ARGUMENT : FM_ERR_NOT_SUPPORTED,
                       "%s: opts->%s.ops = 0x%x; distributed transforms fuse scale (0x%x), multiply (0x%x) and "
                       "conj (0x%x) (CUDA callbacks are not implemented on CPU ranks)",
                       where, name, c->ops, FM_FFT_OP_SCALE, FM_FFT_OP_MULTIPLY, FM_FFT_OP_CONJ);
    if (!(c->ops & FM_FFT_OP_SCALE))
        return FM_OK;
    if (!isfinite(c->scale[0]) || !isfinite(c->scale[1]))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->%s.scale = (%g, %g); expected finite numbers", where, name,
                       c->scale[0], c->scale[1]);
    if (real && c->scale[1] != 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->%s.scale = (%g, %g) is complex but the data it scales is "
                       "real", where, name, c->scale[0], c->scale[1]);
    return FM_OK;
}

fm_status fm_dist_check_options(const char *where, const fm_dist_fft_options *o)
{
    if (o->kind < FM_FFT_C2C || o->kind > FM_FFT_C2R)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->kind = %d; expected FM_FFT_C2C, FM_FFT_R2C or FM_FFT_C2R",
                       where, (int)o->kind);
    if (o->inverse != 0 && o->inverse != 1)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->inverse = %d; expected 0 or 1", where, (int)o->inverse);
    if (o->kind == FM_FFT_R2C && o->inverse)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: an r2c transform is forward only (opts->inverse = 0; plan a c2r "
                       "transform for the inverse)", where);
    if (o->kind == FM_FFT_C2R && !o->inverse)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: a c2r transform is inverse only (opts->inverse = 1)", where);
    const int32_t layouts[2] = {o->in_layout, o->out_layout};
    static const char *const lnames[2] = {"in_layout", "out_layout"};
    for (int i = 0; i < 2; i++) {
        if (layouts[i] != FM_DIST_SLAB && layouts[i] != FM_DIST_TRANSPOSED)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->%s = %d; expected FM_DIST_SLAB or FM_DIST_TRANSPOSED",
                           where, lnames[i], (int)layouts[i]);
        int real = (o->kind == FM_FFT_R2C && i == FM_DIST_IN) || (o->kind == FM_FFT_C2R && i == FM_DIST_OUT);
        if (real && layouts[i] == FM_DIST_TRANSPOSED)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->%s = FM_DIST_TRANSPOSED on the real side of a %s "
                           "transform; FFTW-MPI keeps real data in slabs (transpose the complex side)",
                           where, lnames[i], o->kind == FM_FFT_R2C ? "r2c" : "c2r");
    }
    if (o->norm < FM_FFT_NORM_BACKWARD || o->norm > FM_FFT_NORM_FORWARD)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->norm = %d; expected backward (0), ortho (1) or forward (2)",
                       where, (int)o->norm);
    if (o->effort < FM_FFT_EFFORT_ESTIMATE || o->effort > FM_FFT_EFFORT_PATIENT)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->effort = %d; expected estimate (0), measure (1) or "
                       "patient (2)", where, (int)o->effort);
    if (o->num_threads < 0 || o->num_threads > FM_MAX_THREADS)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->num_threads = %d; expected 0 (one) to %d", where,
                       (int)o->num_threads, FM_MAX_THREADS);
    if (o->overwrite_input != 0 && o->overwrite_input != 1)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->overwrite_input = %d; expected 0 or 1", where,
                       (int)o->overwrite_input);
    if (o->device_type != FM_DEVICE_AUTO && o->device_type != FM_DEVICE_CPU && o->device_type != FM_DEVICE_CUDA)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->device_type = %d; expected FM_DEVICE_CPU (host data, CPU "
                       "ranks) or FM_DEVICE_CUDA (device data, GPU ranks)", where, (int)o->device_type);
    if (o->device_type == FM_DEVICE_CUDA && o->device_id < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->device_id = %d; expected a CUDA device number >= 0", where,
                       (int)o->device_id);
    if (o->decomposition != FM_DIST_DECOMP_SLAB && o->decomposition != FM_DIST_DECOMP_PENCIL)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->decomposition = %d; expected FM_DIST_DECOMP_SLAB (0) or "
                       "FM_DIST_DECOMP_PENCIL (1)", where, (int)o->decomposition);
    if (o->grid_rows < 0 || (o->grid_rows && o->decomposition != FM_DIST_DECOMP_PENCIL))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: opts->grid_rows = %d; expected 0%s", where, (int)o->grid_rows,
                       o->grid_rows < 0 ? " (MPI_Dims_create's grid) or P1, a divisor of the ranks"
                                        : ": it is the pencil grid's P1 and the decomposition is slab");
    fm_status st = check_chain(where, "prolog", &o->prolog, o->kind == FM_FFT_R2C);
    return st != FM_OK ? st : check_chain(where, "epilog", &o->epilog, o->kind == FM_FFT_C2R);
}

fm_status fm_dist_check_shape(const char *where, int ndim, const int64_t *n, int pencil)
{
    if (ndim != 2 && ndim != 3)
        return fm_fail(ndim == 1 || (ndim > 3 && ndim <= FM_MAX_NDIM) ? FM_ERR_NOT_SUPPORTED : FM_ERR_INVALID_ARGUMENT,
                       "%s: ndim = %d; slab-decomposed transforms take 2 or 3 dimensions (1-D and batched "
                       "distributed transforms are not implemented)", where, ndim);
    if (!n)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: n is NULL; expected the %d-entry global shape", where, ndim);
    int64_t total = 1;
    for (int i = 0; i < ndim; i++) {
        if (n[i] < 1)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: n[%d] = %lld; expected a length >= 1", where, i,
                           (long long)n[i]);
        if (n[i] > INT64_MAX / 4 / total) /* room for the complex buffers' bytes too */
            return fm_fail(FM_ERR_TOO_LARGE, "%s: the global shape's element count overflows", where);
        total *= n[i];
    }
    /* FFTW-MPI 3.3.10 overflows its buffers or computes wrong values for a length-1 second axis
     * (reproduced without fusemath, under ASan): refused, with the way around it */
    if (n[1] == 1 && !pencil)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "%s: n[1] = 1: FFTW-MPI's slab transforms mishandle a length-1 second "
                       "axis; drop it and transform the array without it", where);
    if (n[0] > INT_MAX || (ndim > 1 && n[1] > INT_MAX)) /* MPI counts of the split axes */
        return fm_fail(FM_ERR_TOO_LARGE, "%s: n[0] / n[1] must be at most %d", where, INT_MAX);
    return FM_OK;
}

/* side `which` of the transform: its global shape in storage order and this rank's block */
static void make_side(const fm_dist_fft_options *o, int which, int ndim, const int64_t *n, const int64_t *nc,
                      const int64_t blk[4], fm_dist_side *s)
{
    s->real = (o->kind == FM_FFT_R2C && which == FM_DIST_IN) || (o->kind == FM_FFT_C2R && which == FM_DIST_OUT);
    const int64_t *g = s->real ? n : nc;
    int transposed = (which == FM_DIST_IN ? o->in_layout : o->out_layout) == FM_DIST_TRANSPOSED;
    for (int i = 0; i < ndim; i++) {
        s->global[i] = g[i];
        s->offset[i] = 0;
    }
    if (transposed) {
        s->global[0] = g[1];
        s->global[1] = g[0];
    }
    for (int i = 0; i < ndim; i++)
        s->local[i] = s->global[i];
    s->local[0] = transposed ? blk[2] : blk[0];
    s->offset[0] = transposed ? blk[3] : blk[1];
    /* FFTW-MPI's real arrays are padded to 2 (n/2 + 1) scalars per row, out of place too */
    s->buf_row = s->real ? 2 * nc[ndim - 1] : 2 * s->local[ndim - 1];
}

fm_status fm_dist_geometry(const char *where, MPI_Comm comm, int ndim, const int64_t *n,
                           const fm_dist_fft_options *o, fm_dist_geom *g)
{
    if (o->decomposition == FM_DIST_DECOMP_PENCIL)
        return fm_dist_pencil_geometry(where, comm, ndim, n, o, g);
    memset(g, 0, sizeof *g);
    g->ndim = ndim;
    ptrdiff_t nc[FM_DIST_MAX_NDIM];
    int64_t nc64[FM_DIST_MAX_NDIM];
    for (int i = 0; i < ndim; i++) {
        g->n[i] = n[i];
        nc64[i] = (o->kind != FM_FFT_C2C && i == ndim - 1) ? n[i] / 2 + 1 : n[i];
        nc[i] = (ptrdiff_t)nc64[i];
    }
    /* the distribution is the complex array's for r2c / c2r too (FFTW-MPI's rule): FFTW-MPI's default
     * blocks of axis 0 (slab) and axis 1 (transposed), computed here (dist_xgeom.c) so that CPU and GPU
     * ranks split alike; where FFTW-MPI is linked its own answer is checked against them */
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int64_t blk[4], inner = 1;
    fm_dist_block_of(nc64[0], size, rank, &blk[0], &blk[1]);
    fm_dist_block_of(nc64[1], size, rank, &blk[2], &blk[3]);
    for (int i = 2; i < ndim; i++)
        inner *= nc64[i];
    int64_t mine = blk[0] * nc64[1] * inner, cols = blk[2] * nc64[0] * inner;
    g->alloc = mine > cols ? mine : cols;
#if FM_HAVE_FFTW_MPI
    ptrdiff_t fb[4];
    ptrdiff_t alloc = fftw_mpi_local_size_many_transposed(ndim, nc, 1, FFTW_MPI_DEFAULT_BLOCK,
                                                          FFTW_MPI_DEFAULT_BLOCK, comm, &fb[0], &fb[1], &fb[2],
                                                          &fb[3]);
    if (alloc < 0)
        return fm_fail(FM_ERR_BACKEND, "%s: fftw_mpi_local_size_many_transposed failed", where);
    for (int i = 0; i < 4; i++)
        if (fb[i] != blk[i])
            return fm_fail(FM_ERR_INTERNAL, "%s: FFTW-MPI's block (%td, %td; transposed %td, %td) is not the "
                           "default block computed (%lld, %lld; %lld, %lld)", where, fb[0], fb[1], fb[2], fb[3],
                           (long long)blk[0], (long long)blk[1], (long long)blk[2], (long long)blk[3]);
    g->alloc = alloc; /* the CPU ranks' buffers: what FFTW asks for */
#else
    (void)nc;
#endif
    if (g->alloc < 1)
        g->alloc = 1;
    for (int w = 0; w < 2; w++)
        make_side(o, w, ndim, n, nc64, blk, &g->side[w]);
    return FM_OK;
}

fm_status fm_dist_local_shape(MPI_Comm comm, int ndim, const int64_t *n, const fm_dist_fft_options *opts,
                              int which, int64_t *local_shape, int64_t *offset)
{
    static const char where[] = "fm_dist_local_shape";
    int rank, size;
    fm_dist_fft_options dflt;
    if (!opts) {
        fm_dist_fft_options_init(&dflt);
        opts = &dflt;
    }
    fm_status st = fm_dist_check_comm(where, comm, &rank, &size);
    if (st == FM_OK)
        st = fm_dist_check_options(where, opts);
    if (st == FM_OK)
        st = fm_dist_check_shape(where, ndim, n, opts->decomposition == FM_DIST_DECOMP_PENCIL);
    if (st != FM_OK)
        return st;
    if (which != FM_DIST_IN && which != FM_DIST_OUT)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: which = %d; expected FM_DIST_IN (0) or FM_DIST_OUT (1)", where,
                       which);
    if (!local_shape && !offset)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: local_shape and offset are both NULL", where);
    fm_dist_geom g;
    if ((st = fm_dist_geometry(where, comm, ndim, n, opts, &g)) != FM_OK)
        return st;
    for (int i = 0; i < ndim; i++) {
        if (local_shape)
            local_shape[i] = g.side[which].local[i];
        if (offset)
            offset[i] = g.side[which].offset[i];
    }
    return FM_OK;
}

fm_status fm_dist_check_same(const char *where, MPI_Comm comm, const int64_t *vals, const char *const *names,
                             int count)
{
    enum { MAXV = 32 };
    int64_t lo[MAXV], hi[MAXV];
    if (count > MAXV)
        return fm_fail(FM_ERR_INTERNAL, "%s: %d values to compare, at most %d", where, count, MAXV);
    MPI_Allreduce(vals, lo, count, MPI_INT64_T, MPI_MIN, comm);
    MPI_Allreduce(vals, hi, count, MPI_INT64_T, MPI_MAX, comm);
    int size;
    MPI_Comm_size(comm, &size);
    for (int i = 0; i < count; i++) {
        if (lo[i] == hi[i])
            continue;
        if (!strcmp(names[i], "device"))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: the %d ranks of comm disagree on where the data lives (host "
                           "memory on some, a CUDA device on others); every rank must pass host arrays (CPU ranks) "
                           "or every rank device arrays (GPU ranks)", where, size);
        if (!strcmp(names[i], "dtype"))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: the %d ranks of comm disagree on dtype (%s on some, %s on "
                           "others); every rank must plan the same transform", where, size,
                           fm_dtype_name((fm_dtype)lo[i]), fm_dtype_name((fm_dtype)hi[i]));
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: the %d ranks of comm disagree on %s (from %lld to %lld); every "
                       "rank must pass the same global shape, dtype and options", where, size, names[i],
                       (long long)lo[i], (long long)hi[i]);
    }
    return FM_OK;
}
