/* test_dist_fft_gpu.c : libfusemath_mpi's GPU ranks (ctest test_dist_fft_gpu_np1 / _np2, labels gpu and
 * mpi; exits 77, skipped, without a GPU). Every rank runs on cuda:(rank % GPUs), so two ranks share a
 * one-GPU machine (the staged exchange). c2c forward to the slab and the transposed layouts, 2-D and
 * 3-D, c64 / c128, with a prolog scale, against a naive DFT of the assembled global array; the inverse
 * from each layout back to the input; r2c 2-D / 3-D to either layout and back through c2r. The data goes to the GPU
 * and back through the core's fm_memory_* (no CUDA runtime here). */
#define _POSIX_C_SOURCE 200809L /* M_PI */
#define _DEFAULT_SOURCE
#include "dist_fft_util.h"

static fm_device gpu_dev;
static int dev_type = FM_DEVICE_CUDA; /* --cpu: the same cases on CPU ranks (host memory), a check of this test */

static void *to_gpu(const void *host, size_t bytes)
{
    void *d = NULL;
    if (fm_memory_alloc(gpu_dev, bytes ? bytes : 1, &d) != FM_OK)
        return NULL;
    fm_device cpu = {FM_DEVICE_CPU, 0};
    if (bytes)
        fm_memory_copy(d, gpu_dev, host, cpu, bytes);
    return d;
}

static void to_host(void *host, const void *dev, size_t bytes)
{
    fm_device cpu = {FM_DEVICE_CPU, 0};
    if (bytes)
        fm_memory_copy(host, cpu, dev, gpu_dev, bytes);
}

/* block_at for side `which` of plan p */
static void *block_of(const fm_dist_plan *p, int which, const cd *g, const int64_t *glob, int t, int real, int dbl,
                      size_t *bytes)
{
    int64_t loc[3], off[3];
    fm_dist_fft_local(p, which, loc, off);
    return block_at(fm_dist_fft_ndim(p), loc, off, g, glob, t, real, dbl, bytes);
}

static void c2c_case(int nd, const int64_t *n, int dbl, int out_layout)
{
    fm_dist_fft_options o;
    fm_dist_fft_options_init(&o);
    o.device_type = dev_type, o.device_id = gpu_dev.id, o.out_layout = out_layout;
    o.prolog.ops = FM_FFT_OP_SCALE, o.prolog.scale[0] = 2, o.prolog.scale[1] = -1;
    int64_t total = prod(n, nd), loc[3];
    cd *g = malloc(sizeof(cd) * (size_t)total), *ref = malloc(sizeof(cd) * (size_t)total);
    for (int64_t i = 0; i < total; i++)
        g[i] = sin(0.37 * (double)i) + I * cos(1.3 * (double)i + 0.2);
    fm_dist_local_shape(MPI_COMM_WORLD, nd, n, &o, FM_DIST_IN, loc, NULL);
    fm_dist_plan *p = NULL, *b = NULL;
    fm_status st = fm_dist_fft_plan(MPI_COMM_WORLD, nd, n, dbl ? FM_C128 : FM_C64, loc, &o, &p);
    expect_all(st, FM_OK, NULL, "plan c2c");
    if (st != FM_OK)
        goto done;
    CHECK(dev_type != FM_DEVICE_CUDA ||
              (strstr(fm_dist_fft_describe(p), "cuda:") && strstr(fm_dist_fft_describe(p), "exchange=") &&
               (gpu_dev.type == FM_DEVICE_CUDA) == !strstr(fm_dist_fft_describe(p), "emulated-on-host")),
          "describe: %s", fm_dist_fft_describe(p));
    size_t ib, ob;
    void *hin = block_of(p, FM_DIST_IN, g, n, 0, 0, dbl, &ib);
    int64_t oloc[3];
    fm_dist_fft_local(p, FM_DIST_OUT, oloc, NULL);
    ob = (size_t)prod(oloc, nd) * (dbl ? 16 : 8);
    void *din = to_gpu(hin, ib), *dout = to_gpu(NULL, 0), *hout = malloc(ob + 16);
    fm_memory_free(gpu_dev, dout);
    dout = NULL;
    fm_memory_alloc(gpu_dev, ob ? ob : 1, &dout);
    expect_all(fm_dist_fft_execute(p, din, dout), FM_OK, NULL, "execute c2c");
    to_host(hout, dout, ob);
    /* assemble takes the global shape in the global axis order; t: the block is of the swapped array */
    cd *got = assemble(MPI_COMM_WORLD, p, FM_DIST_OUT, 0, dbl, n, out_layout == FM_DIST_TRANSPOSED, hout);
    for (int64_t i = 0; i < total; i++)
        ref[i] = g[i] * (2 - I);
    naive_dft(ref, nd, n, -1);
    double e = rel_err(got, ref, total), tol = dbl ? 1e-12 : 1e-5;
    CHECK(e <= tol, "c2c %s %dd to %s: relative error %.3g > %.3g (%s)", dbl ? "c128" : "c64", nd,
          out_layout ? "transposed" : "slab", e, tol, fm_dist_fft_describe(p));
    /* the inverse from that layout gives 2 - i times the input back (backward norm: 1/N) */
    fm_dist_fft_options ob_o = o;
    ob_o.inverse = 1, ob_o.in_layout = out_layout, ob_o.out_layout = FM_DIST_SLAB, ob_o.prolog.ops = 0;
    st = fm_dist_fft_plan(MPI_COMM_WORLD, nd, n, dbl ? FM_C128 : FM_C64, oloc, &ob_o, &b);
    expect_all(st, FM_OK, NULL, "plan inverse");
    if (st == FM_OK) {
        void *dback = NULL, *hback = malloc(ib + 16);
        fm_memory_alloc(gpu_dev, ib ? ib : 1, &dback);
        expect_all(fm_dist_fft_execute(b, dout, dback), FM_OK, NULL, "execute inverse");
        to_host(hback, dback, ib);
        cd *back = assemble(MPI_COMM_WORLD, b, FM_DIST_OUT, 0, dbl, n, 0, hback);
        for (int64_t i = 0; i < total; i++)
            ref[i] = g[i] * (2 - I);
        e = rel_err(back, ref, total);
        CHECK(e <= tol, "inverse from %s: relative error %.3g (%s)", out_layout ? "transposed" : "slab", e,
              fm_dist_fft_describe(b));
        free(back), free(hback);
        fm_memory_free(gpu_dev, dback);
    }
    fm_dist_fft_destroy(b);
    free(got), free(hin), free(hout);
    fm_memory_free(gpu_dev, din);
    fm_memory_free(gpu_dev, dout);
done:
    fm_dist_fft_destroy(p);
    free(g), free(ref);
}

/* 2-D: the columns split between the ranks are the n1 / 2 + 1 of the complex axis */
static void r2c_case(int nd, const int64_t *n, int dbl, int lay)
{
    fm_dist_fft_options o;
    fm_dist_fft_options_init(&o);
    o.kind = FM_FFT_R2C, o.device_type = dev_type, o.device_id = gpu_dev.id, o.out_layout = lay;
    int64_t nc[3] = {n[0], n[1], nd > 2 ? n[2] : 1}, loc[3], oloc[3];
    nc[nd - 1] = n[nd - 1] / 2 + 1;
    int64_t total = prod(n, nd), ctotal = prod(nc, nd);
    cd *g = malloc(sizeof(cd) * (size_t)total), *ref = malloc(sizeof(cd) * (size_t)total);
    for (int64_t i = 0; i < total; i++)
        g[i] = sin(0.7 * (double)i) + 0.5;
    fm_dist_local_shape(MPI_COMM_WORLD, nd, n, &o, FM_DIST_IN, loc, NULL);
    fm_dist_plan *p = NULL, *b = NULL;
    fm_status st = fm_dist_fft_plan(MPI_COMM_WORLD, nd, n, dbl ? FM_F64 : FM_F32, loc, &o, &p);
    expect_all(st, FM_OK, NULL, "plan r2c");
    if (st != FM_OK)
        goto done;
    size_t ib, ob;
    void *hin = block_of(p, FM_DIST_IN, g, n, 0, 1, dbl, &ib);
    fm_dist_fft_local(p, FM_DIST_OUT, oloc, NULL);
    ob = (size_t)prod(oloc, nd) * (dbl ? 16 : 8);
    void *din = to_gpu(hin, ib), *dout = NULL, *hout = malloc(ob + 16);
    fm_memory_alloc(gpu_dev, ob ? ob : 1, &dout);
    expect_all(fm_dist_fft_execute(p, din, dout), FM_OK, NULL, "execute r2c");
    to_host(hout, dout, ob);
    cd *got = assemble(MPI_COMM_WORLD, p, FM_DIST_OUT, 0, dbl, nc, lay == FM_DIST_TRANSPOSED, hout);
    memcpy(ref, g, sizeof(cd) * (size_t)total);
    naive_dft(ref, nd, n, -1);
    cd *half = malloc(sizeof(cd) * (size_t)ctotal);
    for (int64_t i = 0; i < ctotal; i++) /* the first n / 2 + 1 of the last axis */
        half[i] = ref[(i / nc[nd - 1]) * n[nd - 1] + i % nc[nd - 1]];
    double e = rel_err(got, half, ctotal), tol = dbl ? 1e-12 : 1e-5;
    CHECK(e <= tol, "r2c %dd to %s: relative error %.3g (%s)", nd, lay ? "transposed" : "slab", e,
          fm_dist_fft_describe(p));
    fm_dist_fft_options bo = o;
    bo.kind = FM_FFT_C2R, bo.inverse = 1, bo.in_layout = lay, bo.out_layout = FM_DIST_SLAB;
    st = fm_dist_fft_plan(MPI_COMM_WORLD, nd, n, dbl ? FM_C128 : FM_C64, oloc, &bo, &b);
    expect_all(st, FM_OK, NULL, "plan c2r");
    if (st == FM_OK) {
        void *dback = NULL, *hback = malloc(ib + 16);
        fm_memory_alloc(gpu_dev, ib ? ib : 1, &dback);
        expect_all(fm_dist_fft_execute(b, dout, dback), FM_OK, NULL, "execute c2r");
        to_host(hback, dback, ib);
        cd *back = assemble(MPI_COMM_WORLD, b, FM_DIST_OUT, 1, dbl, n, 0, hback);
        e = rel_err(back, g, total);
        CHECK(e <= tol, "c2r %dd from %s round trip: relative error %.3g (%s)", nd, lay ? "transposed" : "slab", e,
              fm_dist_fft_describe(b));
        free(back), free(hback);
        fm_memory_free(gpu_dev, dback);
    }
    fm_dist_fft_destroy(b);
    free(got), free(hin), free(hout), free(half);
    fm_memory_free(gpu_dev, din);
    fm_memory_free(gpu_dev, dout);
done:
    fm_dist_fft_destroy(p);
    free(g), free(ref);
}

/* the chains with multiply blocks: forward c2c 3-D to `lay` with a real prolog window and a complex
 * epilog filter + conj (local-first: the prolog in the core's plan, the epilog in the last move), and
 * the inverse slab -> slab with both (exchange-first: the prolog in the pack, the epilog in the core's) */
static void chain_case(int dbl, int inverse, int lay)
{
    const int64_t n[3] = {6, 5, 4};
    int nd = 3;
    fm_dist_fft_options o;
    fm_dist_fft_options_init(&o);
    o.device_type = dev_type, o.device_id = gpu_dev.id, o.inverse = inverse, o.out_layout = lay;
    o.prolog.ops = FM_FFT_OP_MULTIPLY;
    o.epilog.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ | FM_FFT_OP_SCALE, o.epilog.scale[0] = 0.5;
    int64_t total = prod(n, nd), loc[3], oloc[3];
    cd *g = malloc(sizeof(cd) * (size_t)total), *w = malloc(sizeof(cd) * (size_t)total);
    cd *f = malloc(sizeof(cd) * (size_t)total), *ref = malloc(sizeof(cd) * (size_t)total);
    for (int64_t i = 0; i < total; i++)
        g[i] = cos(0.4 * (double)i) + I * sin(0.9 * (double)i), w[i] = 1.5 + sin(0.3 * (double)i),
        f[i] = 0.5 + cos(0.21 * (double)i) + I * sin(0.17 * (double)i);
    /* the blocks from fm_dist_local_shape (no CPU-rank plan: that needs FFTW-MPI, which a GPU machine may lack) */
    int64_t ioff[3], ooff[3];
    fm_dist_local_shape(MPI_COMM_WORLD, nd, n, &o, FM_DIST_IN, loc, ioff);
    fm_dist_local_shape(MPI_COMM_WORLD, nd, n, &o, FM_DIST_OUT, oloc, ooff);
    fm_dist_plan *q = NULL;
    fm_dtype cx = dbl ? FM_C128 : FM_C64, re = dbl ? FM_F64 : FM_F32;
    size_t ib, wb, fb;
    void *hin = block_at(nd, loc, ioff, g, n, 0, 0, dbl, &ib);
    void *hw = block_at(nd, loc, ioff, w, n, 0, 1, dbl, &wb);
    void *hf = block_at(nd, oloc, ooff, f, n, lay == FM_DIST_TRANSPOSED, 0, dbl, &fb);
    size_t ob = (size_t)prod(oloc, nd) * (dbl ? 16 : 8);
    void *din = to_gpu(hin, ib), *dw = to_gpu(hw, wb), *df = to_gpu(hf, fb), *dout = NULL, *hout = malloc(ob + 16);
    fm_memory_alloc(gpu_dev, ob ? ob : 1, &dout);
    fm_tensor tw, tf;
    fm_tensor_init(&tw, dw, gpu_dev, re, nd, loc, NULL);
    fm_tensor_init(&tf, df, gpu_dev, cx, nd, oloc, NULL);
    fm_status st = fm_dist_fft_plan_chains(MPI_COMM_WORLD, nd, n, cx, loc, &tw, &tf, &o, &q);
    expect_all(st, FM_OK, NULL, "plan chains");
    if (st == FM_OK) {
        expect_all(fm_dist_fft_execute(q, din, dout), FM_OK, NULL, "execute chains");
        to_host(hout, dout, ob);
        cd *got = assemble(MPI_COMM_WORLD, q, FM_DIST_OUT, 0, dbl, n, lay == FM_DIST_TRANSPOSED, hout);
        for (int64_t i = 0; i < total; i++)
            ref[i] = g[i] * w[i];
        naive_dft(ref, nd, n, inverse ? 1 : -1);
        for (int64_t i = 0; i < total; i++)
            ref[i] = conj(ref[i] * (inverse ? 1.0 / (double)total : 1.0) * 0.5 * f[i]);
        double e = rel_err(got, ref, total), tol = dbl ? 1e-12 : 1e-5;
        CHECK(e <= tol, "chains %s %s to %s: relative error %.3g (%s)", dbl ? "c128" : "c64",
              inverse ? "inverse" : "forward", lay ? "transposed" : "slab", e, fm_dist_fft_describe(q));
        free(got);
    }
    fm_dist_fft_destroy(q);
    fm_memory_free(gpu_dev, din), fm_memory_free(gpu_dev, dw), fm_memory_free(gpu_dev, df);
    fm_memory_free(gpu_dev, dout);
    free(hin), free(hw), free(hf), free(hout), free(g), free(w), free(f), free(ref);
}

/* --module-hidden (CUDA's libraries hidden by LD_AUDIT, FUSEMATH_DIST_GPU_EMULATE=host): the GPU module
 * cannot be loaded, so a GPU-rank plan fails on every rank, saying why; no rank waits in a collective. */
static int module_hidden_case(void)
{
    static const int64_t n[3] = {6, 5, 4};
    fm_dist_fft_options o;
    fm_dist_fft_options_init(&o);
    o.device_type = FM_DEVICE_CUDA;
    int64_t loc[3], off[3];
    fm_dist_local_shape(MPI_COMM_WORLD, 3, n, &o, FM_DIST_IN, loc, off);
    fm_dist_plan *q = NULL;
    expect_all(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n, FM_C64, loc, &o, &q), FM_ERR_UNAVAILABLE,
               "libfusemath_mpi_cuda.so cannot be loaded", "GPU-rank plan without the GPU module");
    CHECK(q == NULL, "the failed plan left *plan set");
    fm_dist_fft_destroy(q);
    return g_fail;
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv);
    int cpu = argc > 1 && !strcmp(argv[1], "--cpu");
    /* --emulate (with FUSEMATH_DIST_GPU_EMULATE=host): GPU-rank plans whose stages run on the host */
    int emu = argc > 1 && !strcmp(argv[1], "--emulate");
    if (argc > 1 && !strcmp(argv[1], "--module-hidden")) {
        int bad = module_hidden_case();
        MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (g_rank == 0)
            printf("test_dist_fft_gpu --module-hidden on %d ranks: %s\n", g_size, bad ? "FAILED" : "OK");
        MPI_Finalize();
        return bad ? 1 : 0;
    }
    int gpus = cpu || emu ? 1 : fm_cuda_device_count(), least = gpus;
    MPI_Allreduce(&gpus, &least, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (least == 0) {
        if (g_rank == 0)
            printf("test_dist_fft_gpu: no GPU: skipped\n");
        MPI_Finalize();
        return 77;
    }
    dev_type = cpu ? FM_DEVICE_CPU : FM_DEVICE_CUDA;
    gpu_dev.type = cpu || emu ? FM_DEVICE_CPU : FM_DEVICE_CUDA, gpu_dev.id = cpu || emu ? 0 : g_rank % gpus;
    /* ne: empty blocks on 3 ranks (rows and columns 2, 2, 0) */
    static const int64_t n3[3] = {6, 5, 4}, n2[2] = {8, 6}, ne[3] = {4, 4, 3};
    for (int dbl = 0; dbl < 2; dbl++)
        for (int lay = 0; lay < 2; lay++) {
            c2c_case(3, n3, dbl, lay);
            c2c_case(2, n2, dbl, lay);
            c2c_case(3, ne, dbl, lay);
        }
    static const int64_t r3[3] = {6, 5, 8}, r2[2] = {5, 10};
    for (int dbl = 1; dbl >= 0; dbl--)
        for (int lay = 0; lay < 2; lay++) {
            r2c_case(3, r3, dbl, lay);
            r2c_case(2, r2, dbl, lay);
        }
    for (int dbl = 0; dbl < 2; dbl++) {
        chain_case(dbl, 0, FM_DIST_SLAB);
        chain_case(dbl, 0, FM_DIST_TRANSPOSED);
        chain_case(dbl, 1, FM_DIST_SLAB);
    }
    return mpi_test_finish(cpu   ? "test_dist_fft_gpu --cpu"
                           : emu ? "test_dist_fft_gpu --emulate"
                                 : "test_dist_fft_gpu");
}
