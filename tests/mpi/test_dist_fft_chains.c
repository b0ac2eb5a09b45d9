/* test_dist_fft_chains.c : fused chains with multiply arrays across ranks, run by ctest under
 * mpirun -np 1..4. Every rank makes the same global input and the same global prolog / epilog
 * arrays, passes its blocks of them (the epilog's in the output's layout), and the output blocks
 * summed into the global result are compared with the serial fusemath transform of the whole
 * arrays with the same chains and, for c2c / r2c, with a naive DFT of conj?(x * s * P) times
 * the epilog in double (relative max error <= 1e-5 f32 / 1e-12 f64). Then the bad arrays: each
 * must fail on every rank with the same status, and a good plan must run after them. */
#define _POSIX_C_SOURCE 200809L /* M_PI */
#define _DEFAULT_SOURCE
#include "dist_fft_util.h"

typedef struct {
    int nd;
    int64_t n[3]; /* logical (real for r2c / c2r) */
    int kind, dbl, layout; /* layout: out_layout (forward) or in_layout (c2r) */
    int pro_cplx, epi_cplx; /* the arrays' dtypes: complex (1) or real (0) */
    double pro_scale, epi_scale;
    int pro_conj, epi_conj;
    int norm;
} ccase;

/* this rank's block of side w (from fm_dist_local_shape) of the global array g of logical global
 * shape glob (unswapped), as typed scalars (complex unless real) */
static void *block_of(MPI_Comm comm, int nd, const int64_t *n, const fm_dist_fft_options *o, int w, int real, int dbl,
                      const int64_t *glob, int t, const cd *g, int64_t *loc)
{
    int64_t off[3];
    fm_dist_local_shape(comm, nd, n, o, w, loc, off);
    return block_at(nd, loc, off, g, glob, t, real, dbl, NULL);
}

static fm_dtype dtype_of(int real, int dbl) { return real ? (dbl ? FM_F64 : FM_F32) : (dbl ? FM_C128 : FM_C64); }

static void tensor(fm_tensor *t, void *data, int real, int dbl, int nd, const int64_t *shape)
{
    fm_tensor_init(t, data, (fm_device){FM_DEVICE_CPU, 0}, dtype_of(real, dbl), nd, shape, NULL);
}

/* a global array of m values, real unless cplx, rounded to the precision (the same on every rank) */
static cd *pattern(int64_t m, int cplx, int dbl, double a, double b)
{
    cd *g = malloc(sizeof(cd) * (size_t)m);
    for (int64_t i = 0; i < m; i++) {
        double re = 0.6 + 0.5 * sin(a * (double)i + b), im = cplx ? cos(b * (double)i + a) : 0;
        g[i] = dbl ? re + I * im : (double)(float)re + I * (double)(float)im;
    }
    return g;
}

/* the serial fusemath transform of the whole arrays, the same chains */
static cd *serial(const ccase *c, const fm_dist_fft_options *o, const int64_t *in_shape, const int64_t *out_shape,
                  const cd *gx, const cd *gp, const cd *ge)
{
    int nd = c->nd, real_in = c->kind == FM_FFT_R2C, real_out = c->kind == FM_FFT_C2R;
    int64_t mo = prod(out_shape, nd);
    fm_dist_fft_options all = *o;
    all.in_layout = all.out_layout = FM_DIST_SLAB;
    /* on MPI_COMM_SELF every block is the whole array */
    void *x = block_of(MPI_COMM_SELF, nd, c->n, &all, FM_DIST_IN, real_in, c->dbl, in_shape, 0, gx, (int64_t[3]){0});
    void *pa = block_of(MPI_COMM_SELF, nd, c->n, &all, FM_DIST_IN, !c->pro_cplx, c->dbl, in_shape, 0, gp,
                        (int64_t[3]){0});
    void *ea = block_of(MPI_COMM_SELF, nd, c->n, &all, FM_DIST_OUT, !c->epi_cplx, c->dbl, out_shape, 0, ge,
                        (int64_t[3]){0});
    void *y = calloc((size_t)(2 * mo), c->dbl ? sizeof(double) : sizeof(float));
    fm_tensor tin, tout, tp, te;
    tensor(&tin, x, real_in, c->dbl, nd, in_shape);
    tensor(&tout, y, real_out, c->dbl, nd, out_shape);
    tensor(&tp, pa, !c->pro_cplx, c->dbl, nd, in_shape);
    tensor(&te, ea, !c->epi_cplx, c->dbl, nd, out_shape);
    fm_fft_options so;
    fm_fft_options_init(&so);
    so.kind = c->kind, so.inverse = c->kind == FM_FFT_C2R, so.naxes = nd, so.norm = c->norm;
    for (int i = 0; i < nd; i++)
        so.axes[i] = i;
    so.prolog = o->prolog, so.epilog = o->epilog;
    fm_context *ctx = NULL;
    fm_status st = fm_context_create(&ctx);
    if (st == FM_OK)
        st = fm_fft(ctx, &tin, &tout, &tp, &te, &so, NULL);
    CHECK(st == FM_OK, "serial fm_fft: %s", fm_last_error());
    fm_context_destroy(ctx);
    cd *r = malloc(sizeof(cd) * (size_t)mo);
    for (int64_t i = 0; i < mo; i++) {
        double re, im = 0;
        if (c->dbl)
            re = ((double *)y)[real_out ? i : 2 * i], im = real_out ? 0 : ((double *)y)[2 * i + 1];
        else
            re = ((float *)y)[real_out ? i : 2 * i], im = real_out ? 0 : ((float *)y)[2 * i + 1];
        r[i] = re + I * im;
    }
    free(x), free(pa), free(ea), free(y);
    return r;
}

/* conj?(naive DFT of conj?(x * sp * P)) * se * E * norm, for c2c and r2c */
static cd *naive(const ccase *c, const int64_t *nc, const cd *gx, const cd *gp, const cd *ge)
{
    int nd = c->nd;
    int64_t total = prod(c->n, nd), tc = prod(nc, nd), last = c->n[nd - 1], lastc = nc[nd - 1];
    cd *f = malloc(sizeof(cd) * (size_t)total);
    for (int64_t i = 0; i < total; i++) {
        f[i] = gx[i] * c->pro_scale * gp[i];
        if (c->pro_conj && c->kind == FM_FFT_C2C)
            f[i] = conj(f[i]);
    }
    naive_dft(f, nd, c->n, -1);
    double norm = c->norm == FM_FFT_NORM_ORTHO ? 1 / sqrt((double)total)
                  : c->norm == FM_FFT_NORM_FORWARD ? 1.0 / (double)total : 1;
    cd *r = malloc(sizeof(cd) * (size_t)tc);
    for (int64_t i = 0; i < tc; i++) {
        r[i] = f[(i / lastc) * last + i % lastc] * norm * c->epi_scale * ge[i];
        if (c->epi_conj)
            r[i] = conj(r[i]);
    }
    free(f);
    return r;
}

static void run_case(MPI_Comm comm, const ccase *c)
{
    int nd = c->nd, c2r = c->kind == FM_FFT_C2R;
    int64_t nc[3] = {c->n[0], c->n[1], c->n[2]};
    if (c->kind != FM_FFT_C2C)
        nc[nd - 1] = c->n[nd - 1] / 2 + 1;
    const int64_t *in_shape = c->kind == FM_FFT_C2R ? nc : c->n, *out_shape = c->kind == FM_FFT_R2C ? nc : c->n;
    int64_t mi = prod(in_shape, nd), mo = prod(out_shape, nd);
    cd *gx = pattern(mi, c->kind != FM_FFT_R2C, c->dbl, 0.37, 0.1);
    cd *gp = pattern(mi, c->pro_cplx, c->dbl, 0.23, 0.7), *ge = pattern(mo, c->epi_cplx, c->dbl, 0.51, 0.3);
    cd *gr = NULL; /* c2r: the real array whose half spectrum the prolog makes */
    if (c2r) {     /* x = H / (s P), H = the DFT of gr halved: a Hermitian spectrum after the prolog */
        gr = pattern(mo, 0, 1, 0.41, 0.2);
        cd *h = malloc(sizeof(cd) * (size_t)mo);
        memcpy(h, gr, sizeof(cd) * (size_t)mo);
        naive_dft(h, nd, c->n, -1);
        for (int64_t i = 0; i < mi; i++)
            gx[i] = h[(i / nc[nd - 1]) * c->n[nd - 1] + i % nc[nd - 1]] / (c->pro_scale * gp[i]);
        free(h);
    }
    fm_dist_fft_options o;
    fm_dist_fft_options_init(&o);
    o.kind = c->kind, o.inverse = c2r, o.norm = c->norm;
    if (c2r)
        o.in_layout = c->layout;
    else
        o.out_layout = c->layout;
    o.prolog.ops = FM_FFT_OP_MULTIPLY | (c->pro_scale != 1 ? FM_FFT_OP_SCALE : 0) | (c->pro_conj ? FM_FFT_OP_CONJ : 0);
    o.epilog.ops = FM_FFT_OP_MULTIPLY | (c->epi_scale != 1 ? FM_FFT_OP_SCALE : 0) | (c->epi_conj ? FM_FFT_OP_CONJ : 0);
    o.prolog.scale[0] = c->pro_scale, o.epilog.scale[0] = c->epi_scale;
    int tin = c2r && c->layout == FM_DIST_TRANSPOSED, tout = !c2r && c->layout == FM_DIST_TRANSPOSED;
    int64_t lin[3], lpro[3], lepi[3], lout[3];
    void *x = block_of(comm, nd, c->n, &o, FM_DIST_IN, c->kind == FM_FFT_R2C, c->dbl, in_shape, tin, gx, lin);
    void *pa = block_of(comm, nd, c->n, &o, FM_DIST_IN, !c->pro_cplx, c->dbl, in_shape, tin, gp, lpro);
    void *ea = block_of(comm, nd, c->n, &o, FM_DIST_OUT, !c->epi_cplx, c->dbl, out_shape, tout, ge, lepi);
    void *y = block_of(comm, nd, c->n, &o, FM_DIST_OUT, c2r, c->dbl, out_shape, tout, ge, lout); /* overwritten */
    fm_tensor tp, te;
    tensor(&tp, pa, !c->pro_cplx, c->dbl, nd, lpro);
    tensor(&te, ea, !c->epi_cplx, c->dbl, nd, lepi);
    fm_dist_plan *p = NULL;
    fm_status st = fm_dist_fft_plan_chains(comm, nd, c->n, dtype_of(c->kind == FM_FFT_R2C, c->dbl), lin, &tp, &te, &o,
                                           &p);
    CHECK(st == FM_OK, "plan_chains: %s", fm_last_error());
    if (st == FM_OK) {
        CHECK(strstr(fm_dist_fft_describe(p), "prolog=") && strstr(fm_dist_fft_describe(p), "multiply"),
              "describe: %s", fm_dist_fft_describe(p));
        st = fm_dist_fft_execute(p, x, y);
        CHECK(st == FM_OK, "execute: %s", fm_last_error());
        cd *got = assemble(comm, p, FM_DIST_OUT, c2r, c->dbl, out_shape, tout, y);
        double tol = c->dbl ? 1e-12 : 1e-5;
        cd *ref = serial(c, &o, in_shape, out_shape, gx, gp, ge);
        double e = rel_err(got, ref, mo);
        CHECK(e <= tol, "%s vs serial fusemath: relative error %.3g > %.0e", fm_dist_fft_describe(p), e, tol);
        if (c2r) { /* the inverse of gr's spectrum: gr, times total * norm * se * E */
            double total = (double)mo, norm = c->norm == FM_FFT_NORM_ORTHO ? 1 / sqrt(total)
                                              : c->norm == FM_FFT_NORM_BACKWARD ? 1 / total : 1;
            cd *nref = malloc(sizeof(cd) * (size_t)mo);
            for (int64_t i = 0; i < mo; i++)
                nref[i] = gr[i] * total * norm * c->epi_scale * ge[i];
            e = rel_err(got, nref, mo);
            CHECK(e <= tol, "%s vs the analytic inverse: relative error %.3g > %.0e", fm_dist_fft_describe(p), e,
                  tol);
            free(nref);
        } else {
            cd *nref = naive(c, nc, gx, gp, ge);
            e = rel_err(got, nref, mo);
            CHECK(e <= tol, "%s vs the naive DFT: relative error %.3g > %.0e", fm_dist_fft_describe(p), e, tol);
            free(nref);
        }
        free(got), free(ref);
    }
    fm_dist_fft_destroy(p);
    free(x), free(pa), free(ea), free(y), free(gx), free(gp), free(ge), free(gr);
}

static void test_chains(void)
{
    static const ccase cases[] = {
        {2, {10, 6, 1}, FM_FFT_C2C, 1, FM_DIST_SLAB, 1, 0, 2.0, 1, 0, 1, FM_FFT_NORM_BACKWARD},
        {2, {9, 8, 1}, FM_FFT_C2C, 0, FM_DIST_TRANSPOSED, 0, 1, 1, -0.5, 1, 0, FM_FFT_NORM_ORTHO},
        {3, {5, 6, 4}, FM_FFT_C2C, 1, FM_DIST_TRANSPOSED, 1, 1, 1, 1.5, 0, 0, FM_FFT_NORM_FORWARD},
        {2, {3, 8, 1}, FM_FFT_C2C, 1, FM_DIST_SLAB, 1, 1, 1, 1, 0, 1, FM_FFT_NORM_BACKWARD}, /* empty blocks */
        {3, {6, 5, 9}, FM_FFT_R2C, 1, FM_DIST_SLAB, 0, 1, 0.5, 1, 0, 1, FM_FFT_NORM_BACKWARD},
        {3, {7, 4, 6}, FM_FFT_R2C, 0, FM_DIST_TRANSPOSED, 0, 0, 1, 2, 0, 0, FM_FFT_NORM_ORTHO},
        {2, {9, 7, 1}, FM_FFT_R2C, 0, FM_DIST_SLAB, 0, 1, 1, 1, 0, 1, FM_FFT_NORM_BACKWARD},
        {2, {8, 10, 1}, FM_FFT_C2R, 1, FM_DIST_SLAB, 1, 0, 3.0, 0.25, 0, 1, FM_FFT_NORM_BACKWARD},
        {3, {6, 4, 6}, FM_FFT_C2R, 0, FM_DIST_TRANSPOSED, 1, 0, 1, 1, 0, 0, FM_FFT_NORM_ORTHO},
        {3, {5, 6, 7}, FM_FFT_C2R, 1, FM_DIST_TRANSPOSED, 0, 0, 1, 1, 0, 0, FM_FFT_NORM_BACKWARD},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(MPI_COMM_WORLD, &cases[i]);
}

static void test_bad_arrays(void)
{
    const int64_t n[2] = {8, 6};
    fm_dist_fft_options o;
    fm_dist_fft_options_init(&o);
    o.prolog.ops = FM_FFT_OP_MULTIPLY;
    int64_t loc[2], lo_t[2];
    fm_dist_local_shape(MPI_COMM_WORLD, 2, n, &o, FM_DIST_IN, loc, NULL);
    int last = g_rank == g_size - 1;
    double complex *buf = calloc(64, sizeof *buf);
    fm_tensor good, t;
    tensor(&good, buf, 0, 1, 2, loc);
    fm_dist_plan *p = NULL;
    /* the last rank's array is one row too long */
    int64_t longer[2] = {loc[0] + 1, loc[1]};
    tensor(&t, buf, 0, 1, 2, last ? longer : loc);
    expect_all(fm_dist_fft_plan_chains(MPI_COMM_WORLD, 2, n, FM_C128, loc, &t, NULL, &o, &p), FM_ERR_SHAPE,
               "expected this rank's input block", "prolog array shape");
    CHECK(p == NULL, "a failed plan is NULL");
    /* a broadcastable (1, n1) array is refused too: no broadcasting across ranks */
    int64_t row[2] = {1, 6};
    tensor(&t, buf, 0, 1, 2, row);
    fm_status want = loc[0] == 1 ? FM_OK : FM_ERR_SHAPE;
    int any = loc[0] != 1;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    want = any ? FM_ERR_SHAPE : FM_OK;
    expect_all(fm_dist_fft_plan_chains(MPI_COMM_WORLD, 2, n, FM_C128, loc, &t, NULL, &o, &p), want, NULL, "broadcast");
    fm_dist_fft_destroy(p), p = NULL;
    /* wrong precision on the last rank */
    tensor(&t, buf, 0, last ? 0 : 1, 2, loc);
    expect_all(fm_dist_fft_plan_chains(MPI_COMM_WORLD, 2, n, FM_C128, loc, &t, NULL, &o, &p), FM_ERR_DTYPE,
               "expected f64 or c128", "prolog array dtype");
    /* a complex array on the real input of r2c */
    fm_dist_fft_options orc = o;
    orc.kind = FM_FFT_R2C;
    expect_all(fm_dist_fft_plan_chains(MPI_COMM_WORLD, 2, n, FM_F64, loc, &good, NULL, &orc, &p), FM_ERR_DTYPE,
               "the input data is real", "complex array on real data");
    /* multiply without an array, an array without multiply */
    expect_all(fm_dist_fft_plan_chains(MPI_COMM_WORLD, 2, n, FM_C128, loc, last ? NULL : &good, NULL, &o, &p),
               FM_ERR_INVALID_ARGUMENT, "prolog_array is NULL", "missing array");
    expect_all(fm_dist_fft_plan_chains(MPI_COMM_WORLD, 2, n, FM_C128, loc, &good, &good, &o, &p),
               FM_ERR_INVALID_ARGUMENT, "lacks FM_FFT_OP_MULTIPLY", "array without the op");
    /* non-contiguous strides (where the block has more than one row) */
    int64_t strides[2] = {2 * loc[1], 1}, ok_any = loc[0] > 1;
    fm_tensor_init(&t, buf, (fm_device){FM_DEVICE_CPU, 0}, FM_C128, 2, loc, strides);
    MPI_Allreduce(MPI_IN_PLACE, &ok_any, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    expect_all(fm_dist_fft_plan_chains(MPI_COMM_WORLD, 2, n, FM_C128, loc, &t, NULL, &o, &p),
               ok_any ? FM_ERR_INVALID_ARGUMENT : FM_OK, ok_any ? "not C-contiguous" : NULL, "strides");
    fm_dist_fft_destroy(p), p = NULL;
    /* the epilog of a transposed output in the slab shape */
    fm_dist_fft_options ot;
    fm_dist_fft_options_init(&ot);
    ot.out_layout = FM_DIST_TRANSPOSED, ot.epilog.ops = FM_FFT_OP_MULTIPLY;
    fm_dist_local_shape(MPI_COMM_WORLD, 2, n, &ot, FM_DIST_OUT, lo_t, NULL);
    int differs = lo_t[0] != loc[0] || lo_t[1] != loc[1];
    MPI_Allreduce(MPI_IN_PLACE, &differs, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    expect_all(fm_dist_fft_plan_chains(MPI_COMM_WORLD, 2, n, FM_C128, loc, NULL, &good, &ot, &p),
               differs ? FM_ERR_SHAPE : FM_OK, differs ? "output block" : NULL, "slab-shaped epilog of transposed out");
    fm_dist_fft_destroy(p), p = NULL;
    /* after all that, a good plan runs on every rank */
    for (int64_t i = 0; i < 64; i++)
        buf[i] = 1;
    expect_all(fm_dist_fft_plan_chains(MPI_COMM_WORLD, 2, n, FM_C128, loc, &good, NULL, &o, &p), FM_OK, NULL, "good");
    double complex *x = calloc(64, sizeof *x), *y = calloc(64, sizeof *y);
    expect_all(fm_dist_fft_execute(p, x, y), FM_OK, NULL, "execute after the failures");
    fm_dist_fft_destroy(p);
    free(x), free(y), free(buf);
}

/* execute on the caller's blocks themselves (overwrite_input, no chains), in place, and from
 * blocks not aligned as FFTW's (the copy path): each against the naive DFT */
static void test_direct_paths(void)
{
    const int64_t n[3] = {8, 6, 4};
    int64_t total = prod(n, 3);
    cd *g = pattern(total, 1, 1, 0.29, 0.4), *ref = malloc(sizeof(cd) * (size_t)total);
    memcpy(ref, g, sizeof(cd) * (size_t)total);
    naive_dft(ref, 3, n, -1);
    for (int variant = 0; variant < 4; variant++) { /* 0 copy, 1 overwrite, 2 in place, 3 misaligned */
        fm_dist_fft_options o;
        fm_dist_fft_options_init(&o);
        o.overwrite_input = variant == 1;
        int64_t loc[3], lo[3];
        void *x = block_of(MPI_COMM_WORLD, 3, n, &o, FM_DIST_IN, 0, 1, n, 0, g, loc);
        fm_dist_local_shape(MPI_COMM_WORLD, 3, n, &o, FM_DIST_OUT, lo, NULL);
        int64_t m = prod(loc, 3) > prod(lo, 3) ? prod(loc, 3) : prod(lo, 3);
        char *raw = calloc((size_t)(m + 2), 2 * sizeof(double));
        void *y = variant == 2 ? x : variant == 3 ? (void *)(raw + 8) : (void *)raw; /* +8: 8-byte aligned only */
        fm_dist_plan *p = NULL;
        fm_status st = fm_dist_fft_plan(MPI_COMM_WORLD, 3, n, FM_C128, loc, &o, &p);
        CHECK(st == FM_OK, "plan: %s", fm_last_error());
        if (st == FM_OK) {
            for (int rep = 0; rep < (variant == 1 ? 1 : 2); rep++) { /* twice: the input survives */
                st = fm_dist_fft_execute(p, x, y);
                CHECK(st == FM_OK, "execute: %s", fm_last_error());
                cd *got = assemble(MPI_COMM_WORLD, p, FM_DIST_OUT, 0, 1, n, 0, y);
                double e = rel_err(got, ref, total);
                CHECK(e <= 1e-12, "variant %d rep %d: relative error %.3g", variant, rep, e);
                free(got);
                if (variant == 2)
                    break; /* in place: the input is the output now */
            }
        }
        fm_dist_fft_destroy(p);
        free(x), free(raw);
    }
    fm_dist_fft_options o;
    fm_dist_fft_options_init(&o);
    o.overwrite_input = 2;
    fm_dist_plan *p = NULL;
    int64_t loc[3];
    fm_dist_local_shape(MPI_COMM_WORLD, 3, n, NULL, FM_DIST_IN, loc, NULL);
    expect_all(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n, FM_C128, loc, &o, &p), FM_ERR_INVALID_ARGUMENT,
               "overwrite_input = 2", "overwrite_input 2");
    free(g), free(ref);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv);
    test_chains();
    test_bad_arrays();
    test_direct_paths();
    return mpi_test_finish("test_dist_fft_chains");
}
