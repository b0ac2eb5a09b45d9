/* test_dist_fft_pencil.c : pencil-decomposed 3-D FFTs on CPU ranks (opts->decomposition
 * FM_DIST_DECOMP_PENCIL), run by ctest under mpirun -np 1..4. Every rank makes the same global
 * input (and chain arrays), passes its blocks, and compares its output block with the serial
 * fusemath transform of the whole array in double, chains applied by hand (relative max error
 * <= 1e-5 f32 / 1e-12 f64, agreed over the ranks): c2c forward / inverse, r2c, c2r, slab and
 * transposed sides, odd sizes, empty blocks, every grid of the size, chains with multiply arrays.
 * Then the refusals: each must fail on every rank with the same status. Self-contained (no
 * dist_fft_util.h) so that it does not depend on the other tests' helpers.
 *
 * GPU ranks (the same cases, opts->device_type FM_DEVICE_CUDA): --gpu puts every block (and the chain
 * arrays) in device memory on cuda:(rank % GPUs) through the core's fm_memory_* (exit 77, skipped,
 * without a GPU; ctest test_dist_fft_pencil_gpu_np1 / _np2, labels gpu and mpi); --emulate, with
 * FUSEMATH_DIST_GPU_EMULATE=host, runs the GPU ranks' plan with its stages on the host (host memory),
 * on any machine whose build has the GPU module (ctest test_dist_fft_pencil_gpu_emulated_np1..4). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <complex.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fusemath/fusemath_mpi.h>

typedef double complex cd;

static int rank_, size_, failures, cases, overwrite_;
static int gpu_mode_;                       /* 0 CPU ranks, 1 GPU ranks (--gpu), 2 emulated GPU ranks (--emulate) */
static fm_device dev_ = {FM_DEVICE_CPU, 0}; /* where the blocks live: cuda:(rank % GPUs) with --gpu */

/* a copy of host memory on dev_ (NULL for NULL); bytes may be 0 */
static void *to_dev(const void *host, size_t bytes)
{
    if (!host)
        return NULL;
    if (dev_.type == FM_DEVICE_CPU) {
        void *d = malloc(bytes + 1);
        memcpy(d, host, bytes);
        return d;
    }
    void *d = NULL;
    fm_device cpu = {FM_DEVICE_CPU, 0};
    if (fm_memory_alloc(dev_, bytes + 16, &d) != FM_OK)
        return NULL;
    if (bytes)
        fm_memory_copy(d, dev_, host, cpu, bytes);
    return d;
}

static void from_dev(void *host, const void *d, size_t bytes)
{
    fm_device cpu = {FM_DEVICE_CPU, 0};
    if (dev_.type == FM_DEVICE_CPU)
        memcpy(host, d, bytes);
    else if (bytes)
        fm_memory_copy(host, cpu, d, dev_, bytes);
}

static void dev_free(void *d)
{
    if (dev_.type == FM_DEVICE_CPU)
        free(d);
    else
        fm_memory_free(dev_, d);
}

#define CHECK(cond, ...)                                                                                       \
    do {                                                                                                        \
        if (!(cond)) {                                                                                          \
            failures++;                                                                                         \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank_, __FILE__, __LINE__);                                \
            fprintf(stderr, __VA_ARGS__);                                                                       \
            fprintf(stderr, "\n");                                                                              \
        }                                                                                                       \
    } while (0)

typedef struct {
    int64_t n[3];   /* logical (real for r2c / c2r) */
    int kind, inverse, in_layout, out_layout, dbl, grid_rows, norm;
    int pro_mul, epi_mul; /* 0 none, 1 real, 2 complex multiply array */
    double pro_scale, epi_scale;
    int pro_conj, epi_conj;
} pcase;

static int64_t last_c(const pcase *c) { return c->kind == FM_FFT_C2C ? c->n[2] : c->n[2] / 2 + 1; }

/* the global shape of side w (logical order) and whether it is real */
static int side_shape(const pcase *c, int w, int64_t g[3])
{
    int real = (c->kind == FM_FFT_R2C && w == FM_DIST_IN) || (c->kind == FM_FFT_C2R && w == FM_DIST_OUT);
    g[0] = c->n[0], g[1] = c->n[1], g[2] = real ? c->n[2] : last_c(c);
    return real;
}

static int64_t numel(const int64_t *v) { return v[0] * v[1] * v[2]; }

/* a value per global index, symmetric under (i, j) -> (-i, -j) where sym (keeps c2r input Hermitian) */
static cd value(const int64_t g[3], int64_t i, int64_t j, int64_t k, int cplx, int sym, double a)
{
    if (sym) {
        i = i < g[0] - i ? i : g[0] - i;
        j = j < g[1] - j ? j : g[1] - j;
    }
    double t = (double)((i * g[1] + j) * g[2] + k);
    double re = 0.6 + 0.5 * sin(a * t + 0.3), im = cplx ? cos(0.7 * t + a) : 0;
    return re + I * im;
}

static cd round_to(cd v, int dbl) { return dbl ? v : (double)(float)creal(v) + I * (double)(float)cimag(v); }

static fm_dtype dtype_of(int real, int dbl) { return real ? (dbl ? FM_F64 : FM_F32) : (dbl ? FM_C128 : FM_C64); }

/* the serial reference: epilog(norm * FFT(prolog(x))) of the whole array, in double */
static cd *reference(const pcase *c, const cd *x, const cd *pro, const cd *epi)
{
    int64_t gi[3], go[3];
    int rin = side_shape(c, FM_DIST_IN, gi), rout = side_shape(c, FM_DIST_OUT, go);
    int64_t mi = numel(gi), mo = numel(go);
    cd *xin = malloc(sizeof(cd) * (size_t)mi), *y = malloc(sizeof(cd) * (size_t)mo);
    double *rbuf = malloc(sizeof(double) * (size_t)(mi > mo ? mi : mo));
    for (int64_t e = 0; e < mi; e++) {
        cd v = x[e] * c->pro_scale * (pro ? pro[e] : 1);
        xin[e] = c->pro_conj ? conj(v) : v;
        rbuf[e] = creal(xin[e]);
    }
    fm_context *ctx;
    fm_context_create(&ctx);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.kind = c->kind, o.inverse = c->inverse, o.norm = c->norm, o.naxes = 3;
    o.axes[0] = 0, o.axes[1] = 1, o.axes[2] = 2, o.execution = FM_EXECUTION_CPU;
    fm_tensor ti, to;
    fm_device host = {FM_DEVICE_CPU, 0};
    fm_tensor_init(&ti, rin ? (void *)rbuf : (void *)xin, host, dtype_of(rin, 1), 3, gi, NULL);
    fm_tensor_init(&to, rout ? (void *)rbuf : (void *)y, host, dtype_of(rout, 1), 3, go, NULL);
    fm_status st = fm_fft(ctx, &ti, &to, NULL, NULL, &o, NULL);
    if (st != FM_OK)
        fprintf(stderr, "reference fft: %s\n", fm_last_error());
    for (int64_t e = 0; e < mo; e++) {
        cd v = (rout ? rbuf[e] : y[e]) * c->epi_scale * (epi ? epi[e] : 1);
        y[e] = c->epi_conj ? conj(v) : v;
    }
    fm_context_destroy(ctx);
    free(xin);
    free(rbuf);
    return y;
}

/* this rank's block (local shape loc, offset off) of the global array g (shape gs), typed */
static void *block(const cd *g, const int64_t gs[3], const int64_t loc[3], const int64_t off[3], int real, int dbl)
{
    int64_t m = numel(loc), per = real ? 1 : 2;
    void *b = calloc((size_t)(m * per + 1), dbl ? sizeof(double) : sizeof(float));
    for (int64_t a = 0, e = 0; a < loc[0]; a++)
        for (int64_t bb = 0; bb < loc[1]; bb++)
            for (int64_t k = 0; k < loc[2]; k++, e++) {
                cd v = g[((a + off[0]) * gs[1] + bb + off[1]) * gs[2] + k + off[2]];
                for (int q = 0; q < per; q++) {
                    double s = q ? cimag(v) : creal(v);
                    if (dbl)
                        ((double *)b)[e * per + q] = s;
                    else
                        ((float *)b)[e * per + q] = (float)s;
                }
            }
    return b;
}

static cd *global_of(const pcase *c, int w, int cplx, int sym, double a)
{
    int64_t g[3];
    side_shape(c, w, g);
    cd *v = malloc(sizeof(cd) * (size_t)numel(g));
    for (int64_t i = 0, e = 0; i < g[0]; i++)
        for (int64_t j = 0; j < g[1]; j++)
            for (int64_t k = 0; k < g[2]; k++, e++)
                v[e] = round_to(value(g, i, j, k, cplx, sym, a), c->dbl);
    return v;
}

static void options_of(const pcase *c, fm_dist_fft_options *o)
{
    fm_dist_fft_options_init(o);
    o->kind = c->kind, o->inverse = c->inverse, o->in_layout = c->in_layout, o->out_layout = c->out_layout;
    o->norm = c->norm, o->decomposition = FM_DIST_DECOMP_PENCIL, o->grid_rows = c->grid_rows;
    o->overwrite_input = overwrite_;
    if (gpu_mode_)
        o->device_type = FM_DEVICE_CUDA, o->device_id = dev_.id;
    if (c->pro_scale != 1 || c->pro_mul || c->pro_conj) {
        o->prolog.ops = (c->pro_scale != 1 ? FM_FFT_OP_SCALE : 0u) | (c->pro_mul ? FM_FFT_OP_MULTIPLY : 0u) |
                        (c->pro_conj ? FM_FFT_OP_CONJ : 0u);
        o->prolog.scale[0] = c->pro_scale;
    }
    if (c->epi_scale != 1 || c->epi_mul || c->epi_conj) {
        o->epilog.ops = (c->epi_scale != 1 ? FM_FFT_OP_SCALE : 0u) | (c->epi_mul ? FM_FFT_OP_MULTIPLY : 0u) |
                        (c->epi_conj ? FM_FFT_OP_CONJ : 0u);
        o->epilog.scale[0] = c->epi_scale;
    }
}

/* the global c2r input: the r2c of a real array, so that it is Hermitian */
static cd *hermitian_input(const pcase *c)
{
    pcase f = *c;
    f.kind = FM_FFT_R2C, f.inverse = 0, f.norm = FM_FFT_NORM_BACKWARD;
    f.pro_mul = f.epi_mul = 0, f.pro_scale = f.epi_scale = 1, f.pro_conj = f.epi_conj = 0;
    cd *r = global_of(&f, FM_DIST_IN, 0, 0, 0.37);
    cd *x = reference(&f, r, NULL, NULL);
    int64_t g[3];
    side_shape(c, FM_DIST_IN, g);
    for (int64_t e = 0; e < numel(g); e++)
        x[e] = round_to(x[e], c->dbl);
    free(r);
    return x;
}

static void run_case(const pcase *c)
{
    cases++;
    fm_dist_fft_options o;
    options_of(c, &o);
    int64_t gi[3], go[3], li[3], oi[3], lo[3], oo[3];
    int rin = side_shape(c, FM_DIST_IN, gi), rout = side_shape(c, FM_DIST_OUT, go);
    cd *x = c->kind == FM_FFT_C2R ? hermitian_input(c) : global_of(c, FM_DIST_IN, !rin, 0, 0.37);
    /* c2r's prolog array must keep the input Hermitian: real and symmetric */
    cd *pro = c->pro_mul ? global_of(c, FM_DIST_IN, c->pro_mul == 2 && c->kind != FM_FFT_C2R, c->kind == FM_FFT_C2R,
                                     1.1) : NULL;
    cd *epi = c->epi_mul ? global_of(c, FM_DIST_OUT, c->epi_mul == 2, 0, 0.9) : NULL;
    cd *ref = reference(c, x, pro, epi);
    fm_status st = fm_dist_local_shape(MPI_COMM_WORLD, 3, c->n, &o, FM_DIST_IN, li, oi);
    if (st == FM_OK)
        st = fm_dist_local_shape(MPI_COMM_WORLD, 3, c->n, &o, FM_DIST_OUT, lo, oo);
    CHECK(st == FM_OK, "local_shape: %s", fm_last_error());
    void *bin = block(x, gi, li, oi, rin, c->dbl), *bout = calloc((size_t)(numel(lo) * 2 + 1), 16);
    int pro_real = c->pro_mul == 1 || rin || c->kind == FM_FFT_C2R, epi_real = c->epi_mul == 1 || rout;
    void *bpro = pro ? block(pro, gi, li, oi, pro_real, c->dbl) : NULL;
    void *bepi = epi ? block(epi, go, lo, oo, epi_real, c->dbl) : NULL;
    size_t es = c->dbl ? 8 : 4, inbytes = (size_t)(numel(li) * (rin ? 1 : 2)) * es;
    size_t outbytes = (size_t)(numel(lo) * (rout ? 1 : 2)) * es;
    /* the blocks where the plan takes them: host memory, or device memory on GPU ranks (--gpu) */
    void *din = to_dev(bin, inbytes), *dout = to_dev(bout, outbytes);
    void *dpro = to_dev(bpro, (size_t)(numel(li) * (pro_real ? 1 : 2)) * es);
    void *depi = to_dev(bepi, (size_t)(numel(lo) * (epi_real ? 1 : 2)) * es);
    fm_tensor tp, te;
    fm_tensor_init(&tp, dpro, dev_, dtype_of(pro_real, c->dbl), 3, li, NULL);
    fm_tensor_init(&te, depi, dev_, dtype_of(epi_real, c->dbl), 3, lo, NULL);
    /* tiling: the blocks of every rank cover each side once */
    long long mine[2] = {(long long)numel(li), (long long)numel(lo)}, all[2];
    MPI_Allreduce(mine, all, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(all[0] == numel(gi) && all[1] == numel(go), "the blocks do not tile: %lld / %lld elements", all[0], all[1]);
    fm_dist_plan *plan = NULL;
    st = fm_dist_fft_plan_chains(MPI_COMM_WORLD, 3, c->n, dtype_of(rin, c->dbl), li, pro ? &tp : NULL,
                                 epi ? &te : NULL, &o, &plan);
    CHECK(st == FM_OK, "plan: %s", fm_last_error());
    double err = 0, big = 0;
    if (st == FM_OK) {
        int64_t l2[3], o2[3];
        fm_dist_fft_local(plan, FM_DIST_OUT, l2, o2);
        CHECK(!memcmp(l2, lo, sizeof l2) && !memcmp(o2, oo, sizeof o2), "fm_dist_fft_local differs");
        const char *d = fm_dist_fft_describe(plan);
        CHECK(strstr(d, "decomposition=pencil grid=") && strstr(d, "exchanges="), "describe: %s", d);
        if (gpu_mode_) /* the GPU ranks' engine and exchange; emulated on the host exactly with --emulate */
            CHECK(strstr(d, "cuda:") && strstr(d, "/cufft") && strstr(d, " exchange=") &&
                      (gpu_mode_ == 2) == (strstr(d, "emulated-on-host") != NULL),
                  "describe: %s", d);
        else
            CHECK(strstr(d, "cpu/fftw") && strstr(d, "MPI_Alltoallv"), "describe: %s", d);
        for (int rep = 0; rep < 2 && st == FM_OK; rep++) /* twice: the plan's buffers are reused */
            st = fm_dist_fft_execute(plan, numel(li) ? din : NULL, numel(lo) ? dout : NULL);
        CHECK(st == FM_OK, "execute: %s", fm_last_error());
        void *keep = malloc(inbytes + 1);
        from_dev(keep, din, inbytes);
        CHECK(!memcmp(keep, bin, inbytes), "the input was changed");
        free(keep);
        from_dev(bout, dout, outbytes);
        int64_t per = rout ? 1 : 2;
        for (int64_t a = 0, e = 0; a < lo[0]; a++)
            for (int64_t b = 0; b < lo[1]; b++)
                for (int64_t k = 0; k < lo[2]; k++, e++) {
                    cd r = ref[((a + oo[0]) * go[1] + b + oo[1]) * go[2] + k + oo[2]], v;
                    if (c->dbl)
                        v = ((double *)bout)[e * per] + (per == 2 ? I * ((double *)bout)[e * per + 1] : 0);
                    else
                        v = ((float *)bout)[e * per] + (per == 2 ? I * ((float *)bout)[e * per + 1] : 0);
                    err = fmax(err, cabs(v - r));
                }
    }
    for (int64_t e = 0; e < numel(go); e++)
        big = fmax(big, cabs(ref[e]));
    MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double rel = err / (big > 0 ? big : 1), tol = c->dbl ? 1e-12 : 1e-5;
    CHECK(rel <= tol, "case %d: %s n=(%lld,%lld,%lld) %s->%s inv=%d grid_rows=%d dbl=%d: relative error %.3g > %.0e",
          cases, c->kind == 0 ? "c2c" : c->kind == 1 ? "r2c" : "c2r", (long long)c->n[0], (long long)c->n[1],
          (long long)c->n[2], c->in_layout ? "x" : "z", c->out_layout ? "x" : "z", c->inverse, c->grid_rows, c->dbl,
          rel, tol);
    fm_dist_fft_destroy(plan);
    free(x), free(pro), free(epi), free(ref), free(bin), free(bout), free(bpro), free(bepi);
    dev_free(din), dev_free(dout), dev_free(dpro), dev_free(depi);
}

/* st is the same on every rank and equals want */
static void expect_everywhere(fm_status st, fm_status want, const char *what, const char *needle)
{
    int s[2] = {(int)st, -(int)st}, r[2];
    MPI_Allreduce(s, r, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    CHECK(r[0] == (int)want && -r[1] == (int)want, "%s: status %d (min %d max %d), expected %d: %s", what, (int)st,
          r[0], -r[1], (int)want, fm_last_error());
    if (needle && st != FM_OK)
        CHECK(strstr(fm_last_error(), needle) != NULL, "%s: message lacks '%s': %s", what, needle, fm_last_error());
}

static void refusals(void)
{
    int64_t n3[3] = {6, 5, 4}, n2[2] = {6, 5}, loc[3], off[3];
    fm_dist_fft_options o;
    fm_dist_plan *plan = NULL;
    /* 2-D pencils */
    fm_dist_fft_options_init(&o);
    o.decomposition = FM_DIST_DECOMP_PENCIL;
    expect_everywhere(fm_dist_fft_plan(MPI_COMM_WORLD, 2, n2, FM_C128, n2, &o, &plan), FM_ERR_NOT_SUPPORTED,
                      "2-D pencil", "3-D only");
    expect_everywhere(fm_dist_local_shape(MPI_COMM_WORLD, 2, n2, &o, FM_DIST_IN, loc, off), FM_ERR_NOT_SUPPORTED,
                      "2-D pencil local_shape", "3-D only");
    o.device_type = gpu_mode_ ? FM_DEVICE_CUDA : FM_DEVICE_CPU, o.device_id = dev_.id;
    expect_everywhere(fm_dist_fft_plan(MPI_COMM_WORLD, 2, n2, FM_C128, n2, &o, &plan), FM_ERR_NOT_SUPPORTED,
                      "2-D pencil on these ranks", "3-D only");
    /* GPU ranks (a real GPU): host memory is refused at execute, on every rank */
    if (gpu_mode_ == 1) {
        fm_dist_local_shape(MPI_COMM_WORLD, 3, n3, &o, FM_DIST_IN, loc, off);
        expect_everywhere(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n3, FM_C128, loc, &o, &plan), FM_OK, "GPU pencil plan",
                          NULL);
        int64_t lo2[3];
        fm_dist_fft_local(plan, FM_DIST_OUT, lo2, NULL);
        void *hi = calloc((size_t)(numel(loc) + 1), 16), *ho = calloc((size_t)(numel(lo2) + 1), 16);
        fm_status hs = fm_dist_fft_execute(plan, numel(loc) ? hi : NULL, numel(lo2) ? ho : NULL);
        /* a rank with two empty blocks passes nothing to check: the others' refusal is agreed */
        expect_everywhere(hs, FM_ERR_INVALID_ARGUMENT, "GPU pencil on host memory", NULL);
        fm_dist_fft_destroy(plan);
        plan = NULL;
        free(hi), free(ho);
    }
    /* a grid_rows that does not divide the size */
    fm_dist_fft_options_init(&o);
    o.decomposition = FM_DIST_DECOMP_PENCIL, o.grid_rows = size_ + 1;
    if (gpu_mode_)
        o.device_type = FM_DEVICE_CUDA, o.device_id = dev_.id;
    expect_everywhere(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n3, FM_C128, n3, &o, &plan), FM_ERR_INVALID_ARGUMENT,
                      "grid_rows", "opts->grid_rows");
    expect_everywhere(fm_dist_local_shape(MPI_COMM_WORLD, 3, n3, &o, FM_DIST_IN, loc, off), FM_ERR_INVALID_ARGUMENT,
                      "grid_rows local_shape", "opts->grid_rows");
    o.grid_rows = -1;
    expect_everywhere(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n3, FM_C128, n3, &o, &plan), FM_ERR_INVALID_ARGUMENT,
                      "negative grid_rows", "opts->grid_rows");
    /* ranks disagreeing on grid_rows (rank 0 asks for a 1 x size grid, the others for MPI_Dims_create's) */
    if (size_ > 1) {
        o.grid_rows = rank_ == 0 ? 1 : 0;
        fm_dist_local_shape(MPI_COMM_WORLD, 3, n3, &o, FM_DIST_IN, loc, off);
        expect_everywhere(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n3, FM_C128, loc, &o, &plan), FM_ERR_INVALID_ARGUMENT,
                          "disagreeing grid_rows", "grid_rows");
        /* and on the decomposition */
        fm_dist_fft_options_init(&o);
        o.decomposition = rank_ == 0 ? FM_DIST_DECOMP_PENCIL : FM_DIST_DECOMP_SLAB;
        fm_dist_local_shape(MPI_COMM_WORLD, 3, n3, &o, FM_DIST_IN, loc, off);
        expect_everywhere(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n3, FM_C128, loc, &o, &plan), FM_ERR_INVALID_ARGUMENT,
                          "disagreeing decomposition", "decomposition");
    }
    /* grid_rows with a slab decomposition, a bad decomposition */
    fm_dist_fft_options_init(&o);
    o.grid_rows = 1;
    expect_everywhere(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n3, FM_C128, n3, &o, &plan), FM_ERR_INVALID_ARGUMENT,
                      "grid_rows with slab", "opts->grid_rows");
    fm_dist_fft_options_init(&o);
    o.decomposition = 7;
    expect_everywhere(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n3, FM_C128, n3, &o, &plan), FM_ERR_INVALID_ARGUMENT,
                      "decomposition 7", "opts->decomposition");
    /* a local shape that is not this rank's pencil (the whole array, on more than one rank; a wrong one on 1) */
    fm_dist_fft_options_init(&o);
    o.decomposition = FM_DIST_DECOMP_PENCIL;
    if (gpu_mode_)
        o.device_type = FM_DEVICE_CUDA, o.device_id = dev_.id;
    int64_t wrong[3] = {n3[0], n3[1], size_ > 1 ? n3[2] : n3[2] - 1};
    expect_everywhere(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n3, FM_C128, wrong, &o, &plan), FM_ERR_SHAPE,
                      "wrong local shape", "pencil decomposition");
    CHECK(plan == NULL, "a refused plan is not NULL");
    /* a good plan still works after the refusals */
    pcase c = {{5, 4, 6}, FM_FFT_C2C, 0, FM_DIST_SLAB, FM_DIST_TRANSPOSED, 1, 0, 0, 0, 0, 1, 1, 0, 0};
    run_case(&c);
}

static void grid_cases(int rows)
{
    /* c2c forward, slab -> transposed (2 exchanges) and slab -> slab (4), both precisions, odd sizes */
    const int64_t shapes[4][3] = {{8, 6, 10}, {5, 7, 9}, {1, 3, 4}, {3, 1, 5}};
    for (int s = 0; s < 4; s++)
        for (int dbl = 0; dbl < 2; dbl++)
            for (int lay = 0; lay < 2; lay++) {
                pcase c = {{shapes[s][0], shapes[s][1], shapes[s][2]}, FM_FFT_C2C, 0, FM_DIST_SLAB, lay, dbl, rows,
                           FM_FFT_NORM_BACKWARD, 0, 0, 1, 1, 0, 0};
                run_case(&c);
                /* the inverse from that output back to the slab layout, and slab -> slab */
                c.inverse = 1, c.in_layout = lay, c.out_layout = FM_DIST_SLAB, c.norm = FM_FFT_NORM_ORTHO;
                run_case(&c);
            }
    /* c2c with both sides transposed (x -> z -> x), and a forward from an x-pencil */
    pcase t = {{6, 5, 7}, FM_FFT_C2C, 0, FM_DIST_TRANSPOSED, FM_DIST_TRANSPOSED, 1, rows, FM_FFT_NORM_FORWARD,
               0, 0, 1, 1, 0, 0};
    run_case(&t);
    t.norm = FM_FFT_NORM_BACKWARD; /* no scaling: the last exchange receives into the output itself */
    run_case(&t);
    t.out_layout = FM_DIST_SLAB;
    run_case(&t);
    /* r2c (z-pencil real in) and c2r (real out), both layouts of the complex side, odd last axes */
    const int64_t rs[3][3] = {{6, 4, 8}, {5, 3, 7}, {2, 5, 1}};
    for (int s = 0; s < 3; s++)
        for (int dbl = 0; dbl < 2; dbl++)
            for (int lay = 0; lay < 2; lay++) {
                pcase r = {{rs[s][0], rs[s][1], rs[s][2]}, FM_FFT_R2C, 0, FM_DIST_SLAB, lay, dbl, rows,
                           FM_FFT_NORM_BACKWARD, 0, 0, 1, 1, 0, 0};
                run_case(&r);
                pcase i = {{rs[s][0], rs[s][1], rs[s][2]}, FM_FFT_C2R, 1, lay, FM_DIST_SLAB, dbl, rows,
                           FM_FFT_NORM_BACKWARD, 0, 0, 1, 1, 0, 0};
                run_case(&i);
            }
    /* chains: multiply arrays (real / complex), scales, conj, in the first / last core plan (z -> x)
     * and in the first pack / last unpack (z -> z; c2r z -> z packs its prolog) */
    for (int lay = 0; lay < 2; lay++)
        for (int dbl = 0; dbl < 2; dbl++) {
            pcase a = {{5, 6, 4}, FM_FFT_C2C, 0, FM_DIST_SLAB, lay, dbl, rows, FM_FFT_NORM_ORTHO, 2, 1, 0.5, 2.0, 1, 0};
            run_case(&a);
            pcase b = {{5, 6, 4}, FM_FFT_C2C, 1, lay, FM_DIST_SLAB, dbl, rows, FM_FFT_NORM_BACKWARD, 1, 2, 1.5, 1, 0,
                       1};
            run_case(&b);
            pcase r = {{4, 5, 6}, FM_FFT_R2C, 0, FM_DIST_SLAB, lay, dbl, rows, FM_FFT_NORM_FORWARD, 1, 2, 2.0, 0.5, 0,
                       1};
            run_case(&r);
            pcase i = {{4, 5, 6}, FM_FFT_C2R, 1, lay, FM_DIST_SLAB, dbl, rows, FM_FFT_NORM_BACKWARD, 1, 1, 0.5, 3.0, 0,
                       0};
            run_case(&i);
        }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    gpu_mode_ = argc > 1 && !strcmp(argv[1], "--gpu") ? 1 : argc > 1 && !strcmp(argv[1], "--emulate") ? 2 : 0;
    if (gpu_mode_ == 1) { /* every rank on cuda:(rank % GPUs); none: skipped */
        int gpus = fm_cuda_device_count(), least = gpus;
        MPI_Allreduce(&gpus, &least, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (least == 0) {
            if (rank_ == 0)
                printf("test_dist_fft_pencil --gpu: no GPU: skipped\n");
            MPI_Finalize();
            return 77;
        }
        dev_.type = FM_DEVICE_CUDA, dev_.id = rank_ % gpus;
    }
    /* every grid of this size (P1 = each divisor), and MPI_Dims_create's (0) */
    grid_cases(0);
    for (int rows = 1; rows <= size_; rows++)
        if (size_ % rows == 0)
            grid_cases(rows);
    refusals();
    /* overwrite_input is ignored by pencils: the input stays (run_case checks it) */
    pcase w = {{4, 4, 4}, FM_FFT_C2C, 0, FM_DIST_SLAB, FM_DIST_SLAB, 1, 0, 0, 0, 0, 1, 1, 0, 0};
    overwrite_ = 1;
    run_case(&w);
    overwrite_ = 0;
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("test_dist_fft_pencil%s: %d ranks, %d cases, %d failures\n",
               gpu_mode_ == 1 ? " --gpu" : gpu_mode_ == 2 ? " --emulate" : "", size_, cases, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
