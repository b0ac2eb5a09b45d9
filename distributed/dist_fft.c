/* dist_fft.c : slab-decomposed FFTs over MPI ranks through FFTW-MPI (libfusemath_mpi).
 * The caller's blocks are copied into FFTW's own buffers (sized by fftw_mpi_local_size_*, the
 * real rows padded) and back; the prolog's and the epilog's scale / conj and the norm are applied
 * in those copies, so they cost no extra pass (docs/design.md, Distributed). Plans whose data is
 * on GPUs (opts->device_type FM_DEVICE_CUDA) are dist_fft_gpu.c's; this file checks and agrees on
 * their arguments as on the CPU ranks' and hands them over. */
#include "dist_gpu.h"
#include "dist_impl.h"

#if FM_HAVE_FFTW_MPI
#include <fftw3-mpi.h>
#else
#include <fftw3.h>
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fm_dist_plan {
    MPI_Comm comm; /* a duplicate of the caller's: execute's agreement and FFTW's plan use it */
    int rank, size;
    fm_dist_geom g;
    fm_dist_fft_options o;
    fm_dtype in_dtype, out_dtype;
    int dbl;
    void *fftw_plan; /* fftw_plan or fftwf_plan */
    void *buf[2];    /* FFTW's input and output buffers */
    fm_dist_chain_run run[2]; /* FM_DIST_IN: the prolog; FM_DIST_OUT: the epilog, the norm in its scale */
    fm_dist_gpu *gpu;         /* GPU ranks (dist_fft_gpu.c): then none of the FFTW members is used */
    fm_dist_pencil *pencil;   /* pencil decompositions (dist_pencil.c): likewise */
    fm_dist_pencil *gpu_pencil; /* pencils on GPU ranks (the GPU module's dist_pencil_gpu.c): likewise */
    const fm_dist_gpu_ops *gpu_ops; /* the GPU module's table (dist_gpu_load.c), set with gpu */
    char text[FM_DESCRIBE_LEN];
};

static const char *const kind_names[3] = {"c2c", "r2c", "c2r"};
static const char *const layout_names[2] = {"slab", "transposed"};
static const char *const effort_names[3] = {"estimate", "measure", "patient"};
static const char *const norm_names[3] = {"backward", "ortho", "forward"};

static int64_t side_numel(const fm_dist_geom *g, int which)
{
    int64_t k = 1;
    for (int i = 0; i < g->ndim; i++)
        k *= g->side[which].local[i];
    return k;
}

#if FM_HAVE_FFTW_MPI /* the CPU ranks' execute: copies, the direct path, FFTW-MPI's execute and planner */
/* Copy side `which` between the caller's block (user) and FFTW's buffer, through that side's chain. */
static void copy_side(const fm_dist_plan *p, int which, const void *user)
{
    const fm_dist_side *s = &p->g.side[which];
    int64_t rows = 1;
    for (int i = 0; i + 1 < p->g.ndim; i++)
        rows *= s->local[i];
    int64_t len = s->local[p->g.ndim - 1] * (s->real ? 1 : 2); /* scalars per row of the caller's block */
    if (rows * len == 0)
        return;
    int in = which == FM_DIST_IN;
    void *dst = in ? p->buf[0] : (void *)user;
    const void *src = in ? user : p->buf[1];
    int64_t drow = in ? s->buf_row : len, srow = in ? len : s->buf_row;
    fm_dist_copy(p->dbl, dst, drow, src, srow, rows, len, !s->real, &p->run[which]);
}

/* Can side `which` run on the caller's block `user` itself, no copy? Only a complex side with no
 * chain and no norm on it (the input also needs overwrite_input: FFTW destroys it), not the other
 * side's block, at least FFTW's buffer size and aligned as fftw_malloc's memory (new-array execute).
 * Local: FFTW-MPI's arrays are each rank's own. */
static int direct_ok(const fm_dist_plan *p, int which, const void *user, const void *other)
{
    const fm_dist_chain_run *r = &p->run[which];
    if (p->g.side[which].real || r->scaled || r->conj || r->arr || !user || user == other)
        return 0;
    if (which == FM_DIST_IN && !p->o.overwrite_input)
        return 0;
    if (side_numel(&p->g, which) < p->g.alloc)
        return 0;
    if (p->dbl)
        return fftw_alignment_of((double *)(uintptr_t)user) == fftw_alignment_of((double *)p->buf[which]);
    return fftwf_alignment_of((float *)(uintptr_t)user) == fftwf_alignment_of((float *)p->buf[which]);
}

/* FFTW-MPI's execute of p from fin to fout: its own buffers, or the new-array execute */
static void run_fftw(const fm_dist_plan *p, void *fin, void *fout)
{
    int own = fin == p->buf[0] && fout == p->buf[1];
#define FM_DIST_RUN(PRE, R, C)                                                                             \
    do {                                                                                                  \
        PRE##_plan q = (PRE##_plan)p->fftw_plan;                                                          \
        if (own)                                                                                          \
            PRE##_execute(q);                                                                             \
        else if (p->o.kind == FM_FFT_C2C)                                                                 \
            PRE##_mpi_execute_dft(q, (C *)fin, (C *)fout);                                                \
        else if (p->o.kind == FM_FFT_R2C)                                                                 \
            PRE##_mpi_execute_dft_r2c(q, (R *)fin, (C *)fout);                                            \
        else                                                                                              \
            PRE##_mpi_execute_dft_c2r(q, (C *)fin, (R *)fout);                                            \
    } while (0)
    if (p->dbl)
        FM_DIST_RUN(fftw, double, fftw_complex);
    else
        FM_DIST_RUN(fftwf, float, fftwf_complex);
#undef FM_DIST_RUN
}

/* The FFTW-MPI plan of p on its buffers; call with the planner lock held. */
static void *make_fftw_plan(const fm_dist_plan *p, int threads_ok)
{
    ptrdiff_t n[FM_DIST_MAX_NDIM];
    for (int i = 0; i < p->g.ndim; i++)
        n[i] = (ptrdiff_t)p->g.n[i];
    static const unsigned efforts[3] = {FFTW_ESTIMATE, FFTW_MEASURE, FFTW_PATIENT};
    unsigned flags = efforts[p->o.effort] | FFTW_DESTROY_INPUT; /* the input buffer is ours */
    if (p->o.in_layout == FM_DIST_TRANSPOSED)
        flags |= FFTW_MPI_TRANSPOSED_IN;
    if (p->o.out_layout == FM_DIST_TRANSPOSED)
        flags |= FFTW_MPI_TRANSPOSED_OUT;
    int nth = p->o.num_threads > 0 ? p->o.num_threads : 1;
    const ptrdiff_t B = FFTW_MPI_DEFAULT_BLOCK;
    int sign = p->o.inverse ? FFTW_BACKWARD : FFTW_FORWARD, nd = p->g.ndim;
    void *in = p->buf[0], *out = p->buf[1];
#define FM_DIST_PLAN(PRE, R, C)                                                                            \
    do {                                                                                                  \
        if (threads_ok)                                                                                   \
            PRE##_plan_with_nthreads(nth);                                                                \
        if (p->o.kind == FM_FFT_C2C)                                                                      \
            return PRE##_mpi_plan_many_dft(nd, n, 1, B, B, (C *)in, (C *)out, p->comm, sign, flags);       \
        if (p->o.kind == FM_FFT_R2C)                                                                      \
            return PRE##_mpi_plan_many_dft_r2c(nd, n, 1, B, B, (R *)in, (C *)out, p->comm, flags);         \
        return PRE##_mpi_plan_many_dft_c2r(nd, n, 1, B, B, (C *)in, (R *)out, p->comm, flags);             \
    } while (0)
    if (p->dbl)
        FM_DIST_PLAN(fftw, double, fftw_complex);
    FM_DIST_PLAN(fftwf, float, fftwf_complex);
#undef FM_DIST_PLAN
}
#endif /* FM_HAVE_FFTW_MPI */

/* the chains as the copies run them: their scales (the norm folded into the epilog's) and conj */
static void set_chains(fm_dist_plan *p)
{
    double total = 1;
    for (int i = 0; i < p->g.ndim; i++)
        total *= (double)p->g.n[i];
    double norm = 1;
    if (p->o.norm == FM_FFT_NORM_ORTHO)
        norm = 1 / sqrt(total);
    else if ((p->o.norm == FM_FFT_NORM_BACKWARD) == (p->o.inverse != 0))
        norm = 1 / total;
    for (int w = 0; w < 2; w++) {
        const fm_fft_chain *c = w == FM_DIST_IN ? &p->o.prolog : &p->o.epilog;
        fm_dist_chain_run *r = &p->run[w];
        r->scale[0] = 1, r->scale[1] = 0;
        if (c->ops & FM_FFT_OP_SCALE)
            r->scale[0] = c->scale[0], r->scale[1] = c->scale[1];
        if (w == FM_DIST_OUT)
            r->scale[0] *= norm, r->scale[1] *= norm;
        r->scaled = r->scale[0] != 1 || r->scale[1] != 0;
        r->conj = (c->ops & FM_FFT_OP_CONJ) != 0;
    }
}

static const char *chain_text(unsigned ops)
{
    static const char *const t[8] = {"", "scale", "multiply", "scale+multiply", "conj", "scale+conj",
                                     "multiply+conj", "scale+multiply+conj"};
    return t[(ops & FM_FFT_OP_SCALE ? 1 : 0) | (ops & FM_FFT_OP_MULTIPLY ? 2 : 0) | (ops & FM_FFT_OP_CONJ ? 4 : 0)];
}

static void describe(fm_dist_plan *p, const char *gpu_text)
{
    char engine[32] = "cpu/fftw-mpi";
    if (p->pencil)
        snprintf(engine, sizeof engine, "cpu/fftw"); /* the core's local plans; the exchanges are MPI's */
    if (p->gpu || p->gpu_pencil)
        snprintf(engine, sizeof engine, "cuda:%d/cufft", (int)p->o.device_id);
    char dims[5][64]; /* the global shape, the two blocks, their offsets (pencils: every axis) */
    for (int d = 0; d < 5; d++) {
        const int64_t *v = d == 0 ? p->g.n : d < 3 ? p->g.side[d - 1].local : p->g.side[d - 3].offset;
        int k = 0, nd = d < 3 || p->pencil || p->gpu_pencil ? p->g.ndim : 1;
        for (int i = 0; i < nd; i++)
            k += snprintf(dims[d] + k, sizeof dims[d] - (size_t)k, "%s%lld", i ? (d < 3 ? "x" : ",") : "",
                          (long long)v[i]);
    }
    /* (the return value looked at: a long GPU tail may be cut, which describe() may do) */
    if (snprintf(p->text, sizeof p->text,
             "dist_fft %s %s %s %s %s ranks=%d %s->%s in=%s@%s out=%s@%s effort=%s threads=%d "
             "norm=%s%s%s%s%s%s",
             engine,
             kind_names[p->o.kind], fm_dtype_name(p->in_dtype), p->o.inverse ? "inverse" : "forward", dims[0],
             p->size, layout_names[p->o.in_layout], layout_names[p->o.out_layout], dims[1], dims[3], dims[2], dims[4],
             effort_names[p->o.effort], p->o.num_threads > 0 ? p->o.num_threads : 1, norm_names[p->o.norm],
             p->o.prolog.ops ? " prolog=" : "", chain_text(p->o.prolog.ops), p->o.epilog.ops ? " epilog=" : "",
             chain_text(p->o.epilog.ops), gpu_text) < 0)
        p->text[0] = '\0';
}

/* Local checks of fm_dist_fft_plan's arguments (before any collective). */
static fm_status check_plan_args(const char *where, int ndim, const int64_t *n, fm_dtype dtype,
                                 const fm_dist_fft_options *o, fm_dist_plan **plan)
{
    if (!plan)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: plan is NULL", where);
    fm_status st = fm_dist_check_options(where, o);
    int pencil = o->decomposition == FM_DIST_DECOMP_PENCIL;
    if (st == FM_OK)
        st = fm_dist_check_shape(where, ndim, n, pencil);
    if (st != FM_OK)
        return st;
    if (n[0] == 1 && !pencil && (o->in_layout == FM_DIST_TRANSPOSED || o->out_layout == FM_DIST_TRANSPOSED))
        return fm_fail(FM_ERR_NOT_SUPPORTED, "%s: n[0] = 1 with a transposed layout: FFTW-MPI plans none; use the "
                       "slab layouts", where);
    int want_real = o->kind == FM_FFT_R2C;
    if (dtype != (want_real ? FM_F32 : FM_C64) && dtype != (want_real ? FM_F64 : FM_C128))
        return fm_fail(FM_ERR_DTYPE, "%s: dtype = %s; a %s transform takes %s", where, fm_dtype_name(dtype),
                       kind_names[o->kind], want_real ? "f32 or f64" : "c64 or c128");
    return FM_OK;
}

/* FM_ERR_SHAPE unless in_local_shape is this rank's block of the input. */
static fm_status check_tiling(const char *where, const fm_dist_plan *p, const int64_t *in_local_shape)
{
    const fm_dist_side *s = &p->g.side[FM_DIST_IN];
    char got[96] = "NULL", want[96];
    int k = 0, j = 0, ok = in_local_shape != NULL;
    for (int i = 0; i < p->g.ndim; i++) {
        if (in_local_shape) {
            k += snprintf(got + k, sizeof got - (size_t)k, "%s%lld", i ? ", " : "(", (long long)in_local_shape[i]);
            ok = ok && in_local_shape[i] == s->local[i];
        }
        j += snprintf(want + j, sizeof want - (size_t)j, "%s%lld", i ? ", " : "(", (long long)s->local[i]);
    }
    if (ok)
        return FM_OK;
    if (p->o.decomposition == FM_DIST_DECOMP_PENCIL)
        return fm_fail(FM_ERR_SHAPE, "%s: the local input shape %s%s does not tile the global array in the pencil "
                       "decomposition (%s side) over %d ranks: its block is %s) from index (%lld, %lld, %lld) "
                       "(fm_dist_local_shape)", where, got, in_local_shape ? ")" : "", layout_names[p->o.in_layout],
                       p->size, want, (long long)s->offset[0], (long long)s->offset[1], (long long)s->offset[2]);
    return fm_fail(FM_ERR_SHAPE, "%s: the local input shape %s%s does not tile the global array in FFTW-MPI's %s "
                   "decomposition over %d ranks: its block is %s) from index %lld of axis 0 "
                   "(fm_dist_local_shape)", where, got, in_local_shape ? ")" : "", layout_names[p->o.in_layout],
                   p->size, want, (long long)s->offset[0]);
}

/* Collective: the ranks' plan arguments are the same (FM_ERR_INVALID_ARGUMENT on all otherwise). */
static fm_status check_agreement(const char *where, MPI_Comm comm, int ndim, const int64_t *n, fm_dtype dtype,
                                 const fm_dist_fft_options *o)
{
    static const char *const names[] = {
        "ndim",          "n[0]",          "n[1]",          "n[2]",          "dtype",      "opts->kind",
        "opts->inverse", "opts->in_layout", "opts->out_layout", "opts->norm", "opts->effort",
        "opts->prolog.ops", "opts->epilog.ops", "opts->prolog.scale[0]", "opts->prolog.scale[1]",
        "opts->epilog.scale[0]", "opts->epilog.scale[1]", "device", "opts->decomposition", "opts->grid_rows"};
    int64_t v[sizeof names / sizeof names[0]] = {ndim, n[0], n[1], ndim > 2 ? n[2] : 1, dtype, o->kind, o->inverse,
                                                 o->in_layout, o->out_layout, o->norm, o->effort, o->prolog.ops,
                                                 o->epilog.ops};
    const double sc[4] = {o->prolog.scale[0], o->prolog.scale[1], o->epilog.scale[0], o->epilog.scale[1]};
    memcpy(&v[13], sc, sizeof sc); /* equal bit patterns: the same scale */
    v[17] = o->device_type == FM_DEVICE_CUDA; /* host or GPU data: device ids may differ between ranks */
    v[18] = o->decomposition, v[19] = o->grid_rows;
    return fm_dist_check_same(where, comm, v, names, (int)(sizeof v / sizeof v[0]));
}

/* Allocate p's buffers and plan: local failures agreed on before FFTW's collective planning. */
static fm_status plan_fftw(const char *where, fm_dist_plan *p)
{
#if !FM_HAVE_FFTW_MPI
    return fm_dist_agree(p->comm, fm_fail(FM_ERR_UNAVAILABLE, "%s: CPU ranks: libfusemath_mpi was built without "
                  "FFTW-MPI (apt-get install libfftw3-mpi-dev, then rebuild); GPU ranks (device data) work", where));
#else
    size_t cbytes = (p->dbl ? sizeof(fftw_complex) : sizeof(fftwf_complex)) * (size_t)p->g.alloc;
    fm_status st = FM_OK;
    for (int i = 0; i < 2; i++)
        if (!(p->buf[i] = fftw_malloc(cbytes)))
            st = fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for FFTW's %zu-byte buffers", where, cbytes);
    if ((st = fm_dist_agree(p->comm, st)) != FM_OK)
        return st;
    int threads_ok = fm_fftw_planner_enter();
    p->fftw_plan = make_fftw_plan(p, threads_ok);
    fm_fftw_planner_leave();
    if (!p->fftw_plan)
        st = fm_fail(FM_ERR_BACKEND, "%s: FFTW-MPI could not plan the %s %s transform (%s_mpi_plan_many_dft%s "
                     "returned NULL)", where, p->dbl ? "double" : "single", kind_names[p->o.kind],
                     p->dbl ? "fftw" : "fftwf", p->o.kind == FM_FFT_C2C ? "" : p->o.kind == FM_FFT_R2C ? "_r2c" : "_c2r");
    return fm_dist_agree(p->comm, st);
#endif
}

/* The multiply arrays against the chains and this rank's blocks (local). */
static fm_status check_arrays(const char *where, fm_dist_plan *p, const fm_tensor *pro, const fm_tensor *epi)
{
    const fm_tensor *arr[2] = {pro, epi};
    static const char *const names[2] = {"prolog", "epilog"};
    for (int w = 0; w < 2; w++) {
        unsigned ops = w == FM_DIST_IN ? p->o.prolog.ops : p->o.epilog.ops;
        const fm_dist_gpu_ops *gm = p->o.device_type == FM_DEVICE_CUDA ? fm_dist_gpu_module(NULL) : NULL;
        int gpu = p->o.device_type == FM_DEVICE_CUDA && !(gm && gm->emulated()) ? p->o.device_id : -1;
        fm_status st = fm_dist_check_array(where, names[w], arr[w], ops, p->g.ndim, p->g.side[w].local, p->dbl,
                                           p->g.side[w].real, gpu, &p->run[w]);
        if (st != FM_OK)
            return st;
    }
    return FM_OK;
}

/* GPU ranks: the module's plan (collective), once every rank has the module (dist_gpu_load.c) */
static fm_status plan_gpu(const char *where, fm_dist_plan *p, fm_dtype dtype, const fm_tensor *pro,
                          const fm_tensor *epi, char *text, size_t cap)
{
    const char *why = "";
    p->gpu_ops = fm_dist_gpu_module(&why);
    fm_status st = p->gpu_ops ? FM_OK : fm_fail(FM_ERR_UNAVAILABLE, "%s: GPU ranks: %s", where, why);
    if ((st = fm_dist_agree(p->comm, st)) != FM_OK)
        return st;
    if (p->o.decomposition == FM_DIST_DECOMP_PENCIL)
        return p->gpu_ops->pencil_plan(where, p->comm, &p->g, &p->o, dtype, pro, epi, p->run, &p->gpu_pencil, text,
                                       cap);
    return p->gpu_ops->plan(where, p->comm, &p->g, &p->o, dtype, pro, epi, &p->gpu, text, cap);
}

static fm_status plan_impl(const char *where, MPI_Comm comm, int ndim, const int64_t *n, fm_dtype dtype,
                           const int64_t *in_local_shape, const fm_tensor *prolog_array,
                           const fm_tensor *epilog_array, const fm_dist_fft_options *opts, fm_dist_plan **plan);

fm_status fm_dist_fft_plan(MPI_Comm comm, int ndim, const int64_t *n, fm_dtype dtype, const int64_t *in_local_shape,
                           const fm_dist_fft_options *opts, fm_dist_plan **plan)
{
    return plan_impl("fm_dist_fft_plan", comm, ndim, n, dtype, in_local_shape, NULL, NULL, opts, plan);
}

fm_status fm_dist_fft_plan_chains(MPI_Comm comm, int ndim, const int64_t *n, fm_dtype dtype,
                                  const int64_t *in_local_shape, const fm_tensor *prolog_array,
                                  const fm_tensor *epilog_array, const fm_dist_fft_options *opts, fm_dist_plan **plan)
{
    return plan_impl("fm_dist_fft_plan_chains", comm, ndim, n, dtype, in_local_shape, prolog_array, epilog_array,
                     opts, plan);
}

static fm_status plan_impl(const char *where, MPI_Comm comm, int ndim, const int64_t *n, fm_dtype dtype,
                           const int64_t *in_local_shape, const fm_tensor *prolog_array,
                           const fm_tensor *epilog_array, const fm_dist_fft_options *opts, fm_dist_plan **plan)
{
    if (plan)
        *plan = NULL; /* before anything can fail */
    char gpu_text[384] = "";
    int rank, size;
    fm_status st = fm_dist_check_comm(where, comm, &rank, &size); /* same answer on every rank */
    if (st != FM_OK)
        return st;
    fm_dist_fft_options o;
    if (opts)
        o = *opts;
    else
        fm_dist_fft_options_init(&o);
    if ((st = fm_dist_agree(comm, check_plan_args(where, ndim, n, dtype, &o, plan))) != FM_OK)
        return st;
    if ((st = check_agreement(where, comm, ndim, n, dtype, &o)) != FM_OK)
        return st;
    fm_dist_plan *p = calloc(1, sizeof *p);
    st = p ? FM_OK : fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for the plan", where);
    if (p) {
        p->o = o, p->rank = rank, p->size = size, p->in_dtype = dtype, p->comm = MPI_COMM_NULL;
        p->dbl = dtype == FM_F64 || dtype == FM_C128;
        p->out_dtype = o.kind == FM_FFT_C2C ? dtype : o.kind == FM_FFT_R2C ? (p->dbl ? FM_C128 : FM_C64)
                                                                           : (p->dbl ? FM_F64 : FM_F32);
        st = fm_dist_geometry(where, comm, ndim, n, &o, &p->g);
        if (st == FM_OK)
            st = check_tiling(where, p, in_local_shape);
        if (st == FM_OK)
            st = check_arrays(where, p, prolog_array, epilog_array);
    }
    if ((st = fm_dist_agree(comm, st)) == FM_OK) {
        MPI_Comm_dup(comm, &p->comm); /* collective; the caller may free comm after planning */
        set_chains(p);
        if (o.device_type == FM_DEVICE_CUDA) /* slabs or pencils: the GPU module's */
            st = plan_gpu(where, p, dtype, prolog_array, epilog_array, gpu_text, sizeof gpu_text);
        else if (o.decomposition == FM_DIST_DECOMP_PENCIL)
            st = fm_dist_pencil_plan(where, p->comm, &p->g, &p->o, dtype, prolog_array, epilog_array, p->run,
                                     &p->pencil, gpu_text, sizeof gpu_text);
        else
            st = plan_fftw(where, p);
    }
    if (st != FM_OK) {
        fm_dist_fft_destroy(p);
        return st;
    }
    describe(p, gpu_text);
    *plan = p;
    return FM_OK;
}

fm_status fm_dist_fft_execute(const fm_dist_plan *p, const void *in, void *out)
{
    return fm_dist_fft_execute_stream(p, in, out, NULL);
}

fm_status fm_dist_fft_execute_stream(const fm_dist_plan *p, const void *in, void *out, void *stream)
{
    static const char where[] = "fm_dist_fft_execute";
    if (!p)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: plan is NULL", where);
    fm_status st = fm_dist_init(where);
    if (st != FM_OK)
        return st;
    if (!in && side_numel(&p->g, FM_DIST_IN))
        st = fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: in is NULL but this rank's input block has %lld elements", where,
                     (long long)side_numel(&p->g, FM_DIST_IN));
    else if (!out && side_numel(&p->g, FM_DIST_OUT))
        st = fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: out is NULL but this rank's output block has %lld elements",
                     where, (long long)side_numel(&p->g, FM_DIST_OUT));
    /* one small allreduce so a bad pointer on one rank fails every rank, not a deadlock */
    if ((st = fm_dist_agree(p->comm, st)) != FM_OK)
        return st;
    if (p->gpu)
        return p->gpu_ops->execute(p->gpu, in, out, stream);
    if (p->gpu_pencil)
        return p->gpu_ops->pencil_execute(p->gpu_pencil, in, out, stream);
    if (p->pencil)
        return fm_dist_pencil_execute(p->pencil, in, out, NULL);
#if !FM_HAVE_FFTW_MPI
    (void)stream;
    return fm_fail(FM_ERR_INTERNAL, "%s: no FFTW-MPI in this build", where);
#else
    (void)stream;
    int din = direct_ok(p, FM_DIST_IN, in, out), dout = direct_ok(p, FM_DIST_OUT, out, in);
    if (!din)
        copy_side(p, FM_DIST_IN, in);
    run_fftw(p, din ? (void *)(uintptr_t)in : p->buf[0], dout ? out : p->buf[1]);
    if (!dout)
        copy_side(p, FM_DIST_OUT, out); /* in may be out: it was read in full above */
    return FM_OK;
#endif
}

fm_status fm_dist_fft_local(const fm_dist_plan *p, int which, int64_t *local_shape, int64_t *offset)
{
    if (!p)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_dist_fft_local: plan is NULL");
    if (which != FM_DIST_IN && which != FM_DIST_OUT)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_dist_fft_local: which = %d; expected FM_DIST_IN (0) or "
                       "FM_DIST_OUT (1)", which);
    for (int i = 0; i < p->g.ndim; i++) {
        if (local_shape)
            local_shape[i] = p->g.side[which].local[i];
        if (offset)
            offset[i] = p->g.side[which].offset[i];
    }
    return FM_OK;
}

int fm_dist_fft_ndim(const fm_dist_plan *p) { return p ? p->g.ndim : 0; }

fm_dtype fm_dist_fft_out_dtype(const fm_dist_plan *p) { return p ? p->out_dtype : FM_DTYPE_INVALID; }

const char *fm_dist_fft_describe(const fm_dist_plan *p) { return p ? p->text : "(null plan)"; }

void fm_dist_fft_destroy(fm_dist_plan *p)
{
    if (!p)
        return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (p->gpu)
        p->gpu_ops->destroy(p->gpu); /* its NCCL communicator and device memory need no MPI */
    if (p->gpu_pencil) /* frees its own communicators unless MPI is finalized */
        p->gpu_ops->pencil_destroy(p->gpu_pencil);
    fm_dist_pencil_destroy(p->pencil); /* frees its own communicators unless MPI is finalized */
    if (!finalized) { /* after MPI_Finalize the plan's communicators cannot be freed: left, as MPI's are */
        if (p->fftw_plan) {
            (void)fm_fftw_planner_enter();
            if (p->dbl)
                fftw_destroy_plan((fftw_plan)p->fftw_plan);
            else
                fftwf_destroy_plan((fftwf_plan)p->fftw_plan);
            fm_fftw_planner_leave();
        }
        if (p->comm != MPI_COMM_NULL)
            MPI_Comm_free(&p->comm);
    }
    fftw_free(p->buf[0]);
    fftw_free(p->buf[1]);
    free(p);
}

const char *fm_dist_mpi_library(void)
{
    static char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (!text[0])
        MPI_Get_library_version(text, &len); /* callable before MPI_Init */
    return text;
}
