/* test_fft_cufft_gpu.c : the cuFFT backend.
 *  1. every check of fft_harness.h (the ones FFTW passes) with execution = cuda: naive-DFT
 *     references for every kind / precision / norm / layout, identities, fused chains against
 *     the chain applied by hand, concurrent execution of one plan;
 *  2. on device-resident data: the c2r input left intact (cuFFT overwrites it), raw CUDA C
 *     callbacks (prolog with the offset, epilog reading its data array, real data, double),
 *     one plan re-executed with other chain arrays and on alternating streams, two threads
 *     on two streams, the plan cache keyed by the callback's text, compile errors. */
#define _POSIX_C_SOURCE 200809L
#include "fft_harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef FM_HAVE_CUDA
#include <cuda_runtime.h>

static const fm_device gpu0 = {FM_DEVICE_CUDA, 0};

/* A device copy of a host tensor (same strides). */
typedef struct {
    void *dev;
    size_t bytes;
    fm_tensor t;
} dbuf;

static int d_from_host(dbuf *d, const fm_tensor *h)
{
    int64_t lo, hi;
    size_t es = fm_dtype_size(h->dtype);
    lo = 0, hi = 1;
    for (int i = 0; i < h->ndim; i++)
        hi += (h->shape[i] - 1) * h->strides[i];
    d->bytes = (size_t)(hi - lo) * es;
    if (cudaMalloc(&d->dev, d->bytes + 256) != cudaSuccess)
        return -1;
    cudaMemcpy(d->dev, h->data, d->bytes, cudaMemcpyHostToDevice);
    d->t = *h;
    d->t.data = d->dev;
    d->t.device = gpu0;
    return 0;
}
static void d_to_host(const dbuf *d, void *host) { cudaMemcpy(host, d->dev, d->bytes, cudaMemcpyDeviceToHost); }
static void d_free(dbuf *d) { cudaFree(d->dev); }

/* 1-D c64 rows: x (rows x n) on host, random */
static void fill_c64(float *x, int64_t count)
{
    for (int64_t i = 0; i < 2 * count; i++)
        x[i] = (float)rng_uniform(&g_rng);
}

/* reference: forward c2c of each row of y (rows x n), in double, into out */
static void ref_rows(const double complex *y, int64_t rows, int64_t n, int inverse, double complex *out)
{
    int64_t sh[2] = {rows, n};
    int ax[1] = {1};
    ref_transform(FM_FFT_C2C, inverse, 2, sh, sh, 1, ax, (double complex *)y, out);
}

static double max_rel(const float *got, const double complex *ref, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = cabs(CMPLX(got[2 * i], got[2 * i + 1]) - ref[i]);
        if (!(d <= e) && !isnan(e)) /* a NaN sticks */
            e = d;
        if (cabs(ref[i]) > m)
            m = cabs(ref[i]);
    }
    return e / (m > 0 ? m : 1);
}

/* c2r on device data: the input must be left as it was (cuFFT overwrites its input) */
static void test_c2r_input_intact(void)
{
    int64_t out_sh[2] = {64, 96}, in_sh[2] = {64, 49};
    tbuf hi, ho;
    tb_make(&hi, FM_C64, 2, in_sh, NULL, 0, 1, -1);
    tb_make(&ho, FM_F32, 2, out_sh, NULL, 0, 1, -1);
    fill_c64(hi.t.data, 64 * 49);
    dbuf di, dout;
    if (d_from_host(&di, &hi.t) || d_from_host(&dout, &ho.t)) {
        CHECK_MSG(0, "cudaMalloc");
        return;
    }
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.kind = FM_FFT_C2R, o.inverse = 1, o.naxes = 2, o.axes[0] = 0, o.axes[1] = 1;
    CHECK_OK(fm_fft(g_ctx, &di.t, &dout.t, NULL, NULL, &o, NULL));
    unsigned char *after = malloc(di.bytes);
    d_to_host(&di, after);
    CHECK_MSG(memcmp(after, hi.mem, di.bytes) == 0, "c2r modified its device input");
    /* and the result equals the staged run (host data through the same backend) */
    o.execution = FM_EXECUTION_CUDA;
    CHECK_OK(fm_fft(g_ctx, &hi.t, &ho.t, NULL, NULL, &o, NULL));
    float *got = malloc(sizeof(float) * 64 * 96);
    cudaMemcpy(got, dout.dev, sizeof(float) * 64 * 96, cudaMemcpyDeviceToHost);
    CHECK(memcmp(got, ho.t.data, sizeof(float) * 64 * 96) == 0);
    free(after), free(got);
    d_free(&di), d_free(&dout);
    tb_free(&hi), tb_free(&ho);
}

static const char *const phase_src =
    "__device__ float2 phase(float2 x, unsigned long long off, const void *d)\n"
    "{ (void)d; float s, c; sincosf(0.001f * (float)off, &s, &c);\n"
    "  float2 r; r.x = x.x * c - x.y * s; r.y = x.x * s + x.y * c; return r; }\n";
static const char *const add_src =
    "__device__ float2 add_data(float2 x, unsigned long long off, const void *d)\n"
    "{ const float *a = (const float *)d; x.x += a[off]; return x; }\n";

/* prolog: user phase ramp after a window multiply (the prolog scale is folded elsewhere);
 * epilog: user function adding its data array. Against the host computation. */
static void test_raw_callbacks(void)
{
    enum { R = 8, N = 300 };
    int64_t sh[2] = {R, N}, wn = N;
    tbuf hx, hw, hd, hy;
    tb_make(&hx, FM_C64, 2, sh, NULL, 0, 1, -1);
    tb_make(&hy, FM_C64, 2, sh, NULL, 0, 1, -1);
    tb_make(&hw, FM_F32, 1, &wn, NULL, 0, 1, -1);
    tb_make(&hd, FM_F32, 2, sh, NULL, 0, 1, -1);
    fill_c64(hx.t.data, R * N);
    for (int i = 0; i < N; i++)
        ((float *)hw.t.data)[i] = 0.5f + 0.001f * (float)i;
    for (int i = 0; i < R * N; i++)
        ((float *)hd.t.data)[i] = (float)i * 0.01f;
    dbuf dx, dw, dd, dy;
    if (d_from_host(&dx, &hx.t) || d_from_host(&dw, &hw.t) || d_from_host(&dd, &hd.t) || d_from_host(&dy, &hy.t)) {
        CHECK_MSG(0, "cudaMalloc");
        return;
    }
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 1, o.axes[0] = -1; /* each row */
    o.norm = FM_FFT_NORM_ORTHO;
    o.prolog.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CALLBACK, o.prolog.source = phase_src, o.prolog.symbol = "phase";
    o.epilog.ops = FM_FFT_OP_CALLBACK, o.epilog.source = add_src, o.epilog.symbol = "add_data";
    fm_plan *plan = NULL;
    CHECK_OK(fm_fft_plan(g_ctx, &dx.t, &dy.t, &dw.t, &dd.t, &o, &plan));
    if (!plan)
        return;
    CHECK_MSG(strstr(fm_plan_describe(plan), "lto"), "%s", fm_plan_describe(plan)); /* the epilog's store callback */
    void *ptrs[4] = {dx.dev, dy.dev, dw.dev, dd.dev};
    CHECK_OK(fm_plan_execute(plan, ptrs, 4, NULL));
    float *got = malloc(sizeof(float) * 2 * R * N);
    cudaMemcpy(got, dy.dev, sizeof(float) * 2 * R * N, cudaMemcpyDeviceToHost);
    double complex *v = malloc(sizeof *v * R * N), *ref = malloc(sizeof *ref * R * N);
    const float *x = hx.t.data, *w = hw.t.data, *d = hd.t.data;
    for (int64_t i = 0; i < R * N; i++)
        v[i] = CMPLX(x[2 * i], x[2 * i + 1]) * w[i % N] * cexp(I * 0.001 * (double)i);
    ref_rows(v, R, N, 0, ref);
    for (int64_t i = 0; i < R * N; i++)
        ref[i] = ref[i] / sqrt((double)N) + d[i];
    double e = max_rel(got, ref, R * N);
    CHECK_MSG(e < 2e-5, "raw callbacks: rel err %.3g", e);

    /* the same plan with another window: the parameter block follows the pointers */
    dbuf dw2;
    for (int i = 0; i < N; i++)
        ((float *)hw.t.data)[i] = 2.0f - 0.002f * (float)i;
    d_from_host(&dw2, &hw.t);
    cudaStream_t s2;
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    void *ptrs2[4] = {dx.dev, dy.dev, dw2.dev, dd.dev};
    CHECK_OK(fm_plan_execute(plan, ptrs2, 4, s2));
    CHECK_OK(fm_plan_execute(plan, ptrs, 4, NULL)); /* back to the first window, other stream */
    CHECK_OK(fm_plan_execute(plan, ptrs2, 4, s2));
    cudaStreamSynchronize(s2);
    cudaMemcpy(got, dy.dev, sizeof(float) * 2 * R * N, cudaMemcpyDeviceToHost);
    for (int64_t i = 0; i < R * N; i++)
        v[i] = CMPLX(x[2 * i], x[2 * i + 1]) * w[i % N] * cexp(I * 0.001 * (double)i);
    ref_rows(v, R, N, 0, ref);
    for (int64_t i = 0; i < R * N; i++)
        ref[i] = ref[i] / sqrt((double)N) + d[i];
    e = max_rel(got, ref, R * N);
    CHECK_MSG(e < 2e-5, "second window on another stream: rel err %.3g", e);
    cudaStreamDestroy(s2);
    fm_plan_release(plan);

    /* the plan cache keys on the text: a changed constant is another plan with another result */
    fm_context_clear_cache(g_ctx); /* (a full cache would evict one plan per new one) */
    int before = fm_context_cache_size(g_ctx);
    fm_fft_options_init(&o);
    o.naxes = 1, o.axes[0] = -1;
    o.prolog.ops = FM_FFT_OP_CALLBACK, o.prolog.source = phase_src, o.prolog.symbol = "phase";
    CHECK_OK(fm_fft(g_ctx, &dx.t, &dy.t, NULL, NULL, &o, NULL));
    CHECK_OK(fm_fft(g_ctx, &dx.t, &dy.t, NULL, NULL, &o, NULL));
    CHECK(fm_context_cache_size(g_ctx) == before + 1);
    char *src2 = strdup(phase_src);
    char *k = strstr(src2, "0.001f");
    k[4] = '2'; /* 0.002f */
    o.prolog.source = src2;
    CHECK_OK(fm_fft(g_ctx, &dx.t, &dy.t, NULL, NULL, &o, NULL));
    CHECK(fm_context_cache_size(g_ctx) == before + 2);
    cudaMemcpy(got, dy.dev, sizeof(float) * 2 * R * N, cudaMemcpyDeviceToHost);
    for (int64_t i = 0; i < R * N; i++)
        v[i] = CMPLX(x[2 * i], x[2 * i + 1]) * cexp(I * 0.002 * (double)i);
    ref_rows(v, R, N, 0, ref);
    e = max_rel(got, ref, R * N);
    CHECK_MSG(e < 2e-5, "edited callback: rel err %.3g", e);
    free(src2);

    /* errors at planning, on the GPU: compile failure (log), undefined name */
    o.prolog.source = "__device__ float2 phase(float2 x, unsigned long long off, const void *d) { return q; }";
    CHECK(fm_fft(g_ctx, &dx.t, &dy.t, NULL, NULL, &o, NULL) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("error");
    o.prolog.source = phase_src, o.prolog.symbol = "phase_x";
    CHECK(fm_fft(g_ctx, &dx.t, &dy.t, NULL, NULL, &o, NULL) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("phase_x");

    free(got), free(v), free(ref);
    d_free(&dx), d_free(&dw), d_free(&dd), d_free(&dy), d_free(&dw2);
    tb_free(&hx), tb_free(&hw), tb_free(&hd), tb_free(&hy);
}

/* r2c with a real prolog callback (T = float) and c128 with a double2 epilog */
static void test_raw_callback_types(void)
{
    enum { N = 256 };
    int64_t n = N, h = N / 2 + 1;
    tbuf hx, hy;
    tb_make(&hx, FM_F32, 1, &n, NULL, 0, 1, -1);
    tb_make(&hy, FM_C64, 1, &h, NULL, 0, 1, -1);
    for (int i = 0; i < N; i++)
        ((float *)hx.t.data)[i] = (float)rng_uniform(&g_rng);
    dbuf dx, dy;
    d_from_host(&dx, &hx.t), d_from_host(&dy, &hy.t);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.kind = FM_FFT_R2C;
    o.prolog.ops = FM_FFT_OP_CALLBACK, o.prolog.symbol = "sq";
    o.prolog.source = "__device__ float sq(float x, unsigned long long off, const void *d) { return x * x + (float)off; }";
    CHECK_OK(fm_fft(g_ctx, &dx.t, &dy.t, NULL, NULL, &o, NULL));
    float got[2 * (N / 2 + 1)];
    cudaMemcpy(got, dy.dev, sizeof got, cudaMemcpyDeviceToHost);
    double complex v[N], full[N];
    for (int i = 0; i < N; i++) {
        double xv = ((float *)hx.t.data)[i];
        v[i] = xv * xv + i;
    }
    ref_rows(v, 1, N, 0, full);
    CHECK_MSG(max_rel(got, full, N / 2 + 1) < 2e-5, "r2c real callback: rel err %.3g", max_rel(got, full, N / 2 + 1));
    d_free(&dx), d_free(&dy);
    tb_free(&hx), tb_free(&hy);

    tbuf zx, zy;
    tb_make(&zx, FM_C128, 1, &n, NULL, 0, 1, -1);
    tb_make(&zy, FM_C128, 1, &n, NULL, 0, 1, -1);
    for (int i = 0; i < 2 * N; i++)
        ((double *)zx.t.data)[i] = rng_uniform(&g_rng);
    dbuf ex, ey;
    d_from_host(&ex, &zx.t), d_from_host(&ey, &zy.t);
    fm_fft_options_init(&o);
    o.inverse = 1;
    o.epilog.ops = FM_FFT_OP_CALLBACK | FM_FFT_OP_CONJ, o.epilog.symbol = "twice";
    o.epilog.source = "__device__ double2 twice(double2 x, unsigned long long off, const void *d)"
                      " { x.x *= 2.0; x.y *= 2.0; return x; }";
    CHECK_OK(fm_fft(g_ctx, &ex.t, &ey.t, NULL, NULL, &o, NULL));
    double gz[2 * N];
    cudaMemcpy(gz, ey.dev, sizeof gz, cudaMemcpyDeviceToHost);
    double complex zr[N], zv[N];
    for (int i = 0; i < N; i++)
        zv[i] = CMPLX(((double *)zx.t.data)[2 * i], ((double *)zx.t.data)[2 * i + 1]);
    ref_rows(zv, 1, N, 1, zr);
    double e = 0, m = 0;
    for (int i = 0; i < N; i++) {
        double complex want = 2.0 * conj(zr[i] / N);
        e = fmax(e, cabs(CMPLX(gz[2 * i], gz[2 * i + 1]) - want));
        m = fmax(m, cabs(want));
    }
    CHECK_MSG(e / m < 1e-12, "c128 callback: rel err %.3g", e / m);
    d_free(&ex), d_free(&ey);
    tb_free(&zx), tb_free(&zy);
}

/* two threads, each its own plan on its own stream, windowed transforms */
typedef struct {
    int idx;
    int ok;
    double err;
} sthr;
static void *stream_thr(void *arg)
{
    sthr *a = arg;
    enum { R = 64, N = 1000 };
    int64_t sh[2] = {R, N}, wn = N;
    tbuf hx, hw, hy;
    tb_make(&hx, FM_C64, 2, sh, NULL, 0, 1, -1);
    tb_make(&hy, FM_C64, 2, sh, NULL, 0, 1, -1);
    tb_make(&hw, FM_F32, 1, &wn, NULL, 0, 1, -1);
    test_rng rng = {0x1234567ULL + (uint64_t)a->idx};
    for (int64_t i = 0; i < 2 * R * N; i++)
        ((float *)hx.t.data)[i] = (float)rng_uniform(&rng);
    for (int i = 0; i < N; i++)
        ((float *)hw.t.data)[i] = 1.0f + (float)a->idx + 0.001f * (float)i;
    dbuf dx, dw, dy;
    d_from_host(&dx, &hx.t), d_from_host(&dw, &hw.t), d_from_host(&dy, &hy.t);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 1, o.axes[0] = -1; /* each row */
    o.prolog.ops = FM_FFT_OP_MULTIPLY, o.epilog.ops = FM_FFT_OP_SCALE, o.epilog.scale[0] = 0.5;
    fm_plan *plan = NULL;
    a->ok = fm_fft_plan(g_ctx, &dx.t, &dy.t, &dw.t, NULL, &o, &plan) == FM_OK;
    void *ptrs[4] = {dx.dev, dy.dev, dw.dev, NULL};
    for (int r = 0; r < 50 && a->ok; r++)
        a->ok = fm_plan_execute(plan, ptrs, 4, s) == FM_OK;
    cudaStreamSynchronize(s);
    float *got = malloc(sizeof(float) * 2 * R * N);
    cudaMemcpy(got, dy.dev, sizeof(float) * 2 * R * N, cudaMemcpyDeviceToHost);
    double complex *v = malloc(sizeof *v * R * N), *ref = malloc(sizeof *ref * R * N);
    const float *x = hx.t.data, *w = hw.t.data;
    for (int64_t i = 0; i < R * N; i++)
        v[i] = CMPLX(x[2 * i], x[2 * i + 1]) * w[i % N] * 0.5;
    ref_rows(v, R, N, 0, ref);
    a->err = max_rel(got, ref, R * N);
    free(got), free(v), free(ref);
    fm_plan_release(plan);
    cudaStreamDestroy(s);
    d_free(&dx), d_free(&dw), d_free(&dy);
    tb_free(&hx), tb_free(&hw), tb_free(&hy);
    return NULL;
}
static void test_streams_threads(void)
{
    pthread_t th[2];
    sthr args[2] = {{0, 0, 1}, {1, 0, 1}};
    for (int t = 0; t < 2; t++)
        pthread_create(&th[t], NULL, stream_thr, &args[t]);
    for (int t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        CHECK_MSG(args[t].ok && args[t].err < 2e-5, "thread %d: ok=%d err=%.3g", t, args[t].ok, args[t].err);
    }
}

/* a batch axis the plan loops over (fft along the middle axis of a 3-D array) with a window:
 * the callbacks add the loop's pointer shift back */
static void test_looped_batch_chain(void)
{
    int64_t sh[3] = {5, 64, 3}, wn = 64;
    tbuf hx, hw, hy;
    tb_make(&hx, FM_C64, 3, sh, NULL, 0, 1, -1);
    tb_make(&hy, FM_C64, 3, sh, NULL, 0, 1, -1);
    tb_make(&hw, FM_F32, 1, &wn, NULL, 0, 1, -1);
    fill_c64(hx.t.data, 5 * 64 * 3);
    for (int i = 0; i < 64; i++)
        ((float *)hw.t.data)[i] = 0.25f + 0.01f * (float)i;
    /* the window broadcasts along axis 1: shape (64, 1) */
    int64_t wsh[2] = {64, 1};
    fm_tensor w2 = hw.t;
    w2.ndim = 2, w2.shape[0] = 64, w2.shape[1] = 1, w2.strides[0] = 1, w2.strides[1] = 1;
    (void)wsh;
    dbuf dx, dw, dy;
    d_from_host(&dx, &hx.t), d_from_host(&dw, &w2), d_from_host(&dy, &hy.t);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 1, o.axes[0] = 1;
    o.prolog.ops = FM_FFT_OP_MULTIPLY;
    o.epilog.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ;
    fm_plan *plan = NULL;
    CHECK_OK(fm_fft_plan(g_ctx, &dx.t, &dy.t, &dw.t, &dw.t, &o, &plan));
    if (!plan)
        return;
    /* cuFFT loops over the batch axis it cannot collapse; the fused kernel indexes any batch */
    CHECK_MSG(strstr(fm_plan_describe(plan), "loops=1") || strstr(fm_plan_describe(plan), "cuda/fftkernel"), "%s",
              fm_plan_describe(plan));
    void *ptrs[4] = {dx.dev, dy.dev, dw.dev, dw.dev};
    CHECK_OK(fm_plan_execute(plan, ptrs, 4, NULL));
    float *got = malloc(sizeof(float) * 2 * 5 * 64 * 3);
    cudaMemcpy(got, dy.dev, sizeof(float) * 2 * 5 * 64 * 3, cudaMemcpyDeviceToHost);
    double complex *v = malloc(sizeof *v * 5 * 64 * 3), *ref = malloc(sizeof *ref * 5 * 64 * 3);
    const float *x = hx.t.data, *w = hw.t.data;
    for (int64_t i = 0; i < 5 * 64 * 3; i++)
        v[i] = CMPLX(x[2 * i], x[2 * i + 1]) * w[(i / 3) % 64];
    int ax[1] = {1};
    ref_transform(FM_FFT_C2C, 0, 3, sh, sh, 1, ax, v, ref);
    for (int64_t i = 0; i < 5 * 64 * 3; i++)
        ref[i] = conj(ref[i] * w[(i / 3) % 64]);
    double e = max_rel(got, ref, 5 * 64 * 3);
    CHECK_MSG(e < 2e-5, "looped batch with chains: rel err %.3g", e);
    fm_plan_release(plan);
    free(got), free(v), free(ref);
    d_free(&dx), d_free(&dw), d_free(&dy);
    tb_free(&hx), tb_free(&hw), tb_free(&hy);
}

/* gpu_prolog: AUTO takes the load callback for a small transform and the pass for a large one;
 * explicit PASS / CALLBACK are honoured; every form gives fft(x * w) * 0.5. */
static void prolog_mode_case(int64_t rows, int64_t n, int mode, const char *want)
{
    int64_t sh[2] = {rows, n};
    tbuf hx, hw, hy;
    tb_make(&hx, FM_C64, 2, sh, NULL, 0, 1, -1);
    tb_make(&hy, FM_C64, 2, sh, NULL, 0, 1, -1);
    tb_make(&hw, FM_F32, 1, &n, NULL, 0, 1, -1);
    fill_c64(hx.t.data, rows * n);
    for (int64_t i = 0; i < n; i++)
        ((float *)hw.t.data)[i] = 1.0f + 0.5f * (float)((i * 7) % 13) / 13.0f;
    dbuf dx, dw, dy;
    d_from_host(&dx, &hx.t), d_from_host(&dw, &hw.t), d_from_host(&dy, &hy.t);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 1, o.axes[0] = 1, o.gpu_prolog = mode;
    o.prolog.ops = FM_FFT_OP_MULTIPLY;
    o.epilog.ops = FM_FFT_OP_SCALE, o.epilog.scale[0] = 0.5;
    fm_plan *plan = NULL;
    CHECK_OK(fm_fft_plan(g_ctx, &dx.t, &dy.t, &dw.t, NULL, &o, &plan));
    if (plan) {
        CHECK_MSG(strstr(fm_plan_describe(plan), want), "mode %d, %lldx%lld: want %s in '%s'", mode,
                  (long long)rows, (long long)n, want, fm_plan_describe(plan));
        void *ptrs[4] = {dx.dev, dy.dev, dw.dev, NULL};
        CHECK_OK(fm_plan_execute(plan, ptrs, 4, NULL));
        float *got = malloc(sizeof(float) * 2 * (size_t)(rows * n));
        double complex *v = malloc(sizeof *v * (size_t)(rows * n)), *ref = malloc(sizeof *ref * (size_t)(rows * n));
        cudaMemcpy(got, dy.dev, sizeof(float) * 2 * (size_t)(rows * n), cudaMemcpyDeviceToHost);
        const float *x = hx.t.data, *w = hw.t.data;
        for (int64_t i = 0; i < rows * n; i++)
            v[i] = CMPLX(x[2 * i], x[2 * i + 1]) * w[i % n] * 0.5;
        /* the reference: FFTW in double on the host (an independent library), unfused */
        fm_tensor tv, tr;
        fm_tensor_init(&tv, v, (fm_device){FM_DEVICE_CPU, 0}, FM_C128, 2, sh, NULL);
        fm_tensor_init(&tr, ref, (fm_device){FM_DEVICE_CPU, 0}, FM_C128, 2, sh, NULL);
        fm_fft_options plain;
        fm_fft_options_init(&plain);
        plain.naxes = 1, plain.axes[0] = 1;
        CHECK_OK(fm_fft(g_ctx, &tv, &tr, NULL, NULL, &plain, NULL));
        double e = max_rel(got, ref, rows * n);
        CHECK_MSG(e < 1e-5 * (1 + log2((double)n)), "mode %d %lldx%lld: rel err %.3g", mode, (long long)rows,
                  (long long)n, e);
        free(got), free(v), free(ref);
        fm_plan_release(plan);
    }
    d_free(&dx), d_free(&dw), d_free(&dy);
    tb_free(&hx), tb_free(&hw), tb_free(&hy);
}

static void test_prolog_modes(void)
{
    prolog_mode_case(4, 256, FM_FFT_PROLOG_AUTO, "cuda/fftkernel");
    prolog_mode_case(9, 65536, FM_FFT_PROLOG_AUTO, "steps=256x256"); /* beyond one block: the multi-step */
    prolog_mode_case(4, 256, FM_FFT_PROLOG_PASS, "callbacks=prolog-pass");
    prolog_mode_case(9, 65536, FM_FFT_PROLOG_PASS, "callbacks=prolog-pass");
    prolog_mode_case(4, 256, FM_FFT_PROLOG_CALLBACK, "callbacks=lto");
    prolog_mode_case(9, 65536, FM_FFT_PROLOG_CALLBACK, "callbacks=lto");
    prolog_mode_case(4096, 4096, FM_FFT_PROLOG_KERNEL, "radices=16x16x16");
    prolog_mode_case(3, 32, FM_FFT_PROLOG_KERNEL, "radices=4x8");
    /* the kernel asked for where it does not apply: refused with both backends' reasons */
    int64_t sh[2] = {2, 96};
    dbuf dx, dy;
    tbuf hx, hy;
    tb_make(&hx, FM_C64, 2, sh, NULL, 0, 1, -1);
    tb_make(&hy, FM_C64, 2, sh, NULL, 0, 1, -1);
    d_from_host(&dx, &hx.t), d_from_host(&dy, &hy.t);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 1, o.axes[0] = 1, o.gpu_prolog = FM_FFT_PROLOG_KERNEL;
    o.epilog.ops = FM_FFT_OP_CONJ;
    fm_plan *plan = NULL;
    CHECK(fm_fft_plan(g_ctx, &dx.t, &dy.t, NULL, NULL, &o, &plan) == FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("power of two");
    CHECK_ERROR_MENTIONS("gpu_prolog is 'kernel'");
    CHECK(plan == NULL);
    d_free(&dx), d_free(&dy);
    tb_free(&hx), tb_free(&hy);
}

/* The fused kernel at every length it takes (both precisions, both directions) on a batch laid
 * out as (A, n, B) with the transform along the middle axis (stride B, batch axes of unequal
 * strides), out of place and in place; fft(x * w) * 0.5, conjugated for the inverse ones,
 * against FFTW in double on the host (an independent library), unfused. */
static void kernel_case(fm_dtype dt, int64_t n, int inverse, int inplace)
{
    const int dbl = dt == FM_C128;
    const int64_t A = 3, B = n >= 1024 ? 2 : 5, count = A * n * B;
    const size_t es = fm_dtype_size(dt);
    double complex *x = malloc(sizeof *x * (size_t)count), *rows = malloc(sizeof *rows * (size_t)count),
                   *ref = malloc(sizeof *ref * (size_t)count);
    double *w = malloc(sizeof *w * (size_t)n);
    void *hbuf = malloc(es * (size_t)count), *hw = malloc(es / 2 * (size_t)n);
    for (int64_t i = 0; i < count; i++)
        x[i] = CMPLX(rng_uniform(&g_rng), rng_uniform(&g_rng));
    for (int64_t i = 0; i < n; i++) {
        w[i] = 0.5 + (double)((i * 7) % 13) / 13.0;
        if (dbl)
            ((double *)hw)[i] = w[i];
        else
            ((float *)hw)[i] = (float)w[i];
    }
    for (int64_t i = 0; i < count; i++) {
        if (dbl)
            ((double *)hbuf)[2 * i] = creal(x[i]), ((double *)hbuf)[2 * i + 1] = cimag(x[i]);
        else
            ((float *)hbuf)[2 * i] = (float)creal(x[i]), ((float *)hbuf)[2 * i + 1] = (float)cimag(x[i]);
    }
    /* rows[(a B + b) n + k] = x[a, k, b] * w[k] * 0.5, as the device rounded x */
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t k = 0; k < n; k++) {
                int64_t i = (a * n + k) * B + b;
                double complex xv = dbl ? x[i] : CMPLX((float)creal(x[i]), (float)cimag(x[i]));
                rows[(a * B + b) * n + k] = xv * (dbl ? w[k] : (double)(float)w[k]) * 0.5;
            }
    ref_rows(rows, A * B, n, inverse, ref);
    if (inverse) /* the reference is unnormalized; the plan's norm ("backward") divides by n */
        for (int64_t i = 0; i < count; i++)
            ref[i] /= (double)n;
    void *din = NULL, *dout = NULL, *dw = NULL;
    cudaMalloc(&din, es * (size_t)count), cudaMalloc(&dw, es / 2 * (size_t)n);
    dout = din;
    if (!inplace)
        cudaMalloc(&dout, es * (size_t)count);
    cudaMemcpy(din, hbuf, es * (size_t)count, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, hw, es / 2 * (size_t)n, cudaMemcpyHostToDevice);
    int64_t sh[3] = {A, n, B}, wsh[3] = {1, n, 1};
    fm_tensor ti, to, tw;
    fm_tensor_init(&ti, din, gpu0, dt, 3, sh, NULL);
    fm_tensor_init(&to, dout, gpu0, dt, 3, sh, NULL);
    fm_tensor_init(&tw, dw, gpu0, dbl ? FM_F64 : FM_F32, 3, wsh, NULL);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 1, o.axes[0] = 1, o.inverse = inverse;
    o.gpu_prolog = FM_FFT_PROLOG_KERNEL; /* AUTO leaves a strided transform axis to cuFFT */
    o.prolog.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_SCALE, o.prolog.scale[0] = 0.5;
    if (inverse)
        o.epilog.ops = FM_FFT_OP_CONJ;
    fm_plan *plan = NULL;
    CHECK_OK(fm_fft_plan(g_ctx, &ti, &to, &tw, NULL, &o, &plan));
    if (plan) {
        CHECK_MSG(strstr(fm_plan_describe(plan), "cuda/fftkernel"), "%s", fm_plan_describe(plan));
        void *ptrs[4] = {din, dout, dw, NULL};
        CHECK_OK(fm_plan_execute(plan, ptrs, 4, NULL));
        cudaMemcpy(hbuf, dout, es * (size_t)count, cudaMemcpyDeviceToHost);
        double e = 0, m = 0;
        for (int64_t a = 0; a < A; a++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t k = 0; k < n; k++) {
                    int64_t i = (a * n + k) * B + b;
                    double complex want = ref[(a * B + b) * n + k];
                    if (inverse)
                        want = conj(want);
                    double complex got = dbl ? CMPLX(((double *)hbuf)[2 * i], ((double *)hbuf)[2 * i + 1])
                                             : CMPLX(((float *)hbuf)[2 * i], ((float *)hbuf)[2 * i + 1]);
                    double d = cabs(got - want);
                    if (!(d <= e) && !isnan(e)) /* a NaN sticks */
                        e = d;
                    if (cabs(want) > m)
                        m = cabs(want);
                }
        e /= m > 0 ? m : 1;
        const double tol = (dbl ? 1e-14 : 2e-7) * (4 + log2((double)n));
        CHECK_MSG(e < tol, "%s n=%lld %s%s: rel err %.3g > %.3g", fm_dtype_name(dt), (long long)n,
                  inverse ? "inverse" : "forward", inplace ? " in place" : "", e, tol);
        fm_plan_release(plan);
    }
    cudaFree(din), cudaFree(dw);
    if (!inplace)
        cudaFree(dout);
    free(x), free(rows), free(ref), free(w), free(hbuf), free(hw);
}

static void test_fused_kernel(void)
{
    for (int64_t n = 2; n <= 4096; n *= 2) {
        kernel_case(FM_C64, n, n % 16 == 0, n % 64 == 0);
        if (n <= 2048)
            kernel_case(FM_C128, n, n % 16 != 0, n % 32 == 0);
    }
    kernel_case(FM_C64, 4096, 1, 0);
    kernel_case(FM_C128, 2048, 0, 1);
}

/* ---- half precision (c32 / f16): cuFFT with CUDA_C_16F / CUDA_R_16F ---- */
static uint16_t f2h(float f) /* round to nearest even */
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) /* >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* half subnormal or zero: a multiple of 2^-24 */
        float af;
        memcpy(&af, &ax, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(af * 16777216.0f));
    }
    uint32_t h = ((ax >> 23) - 112) << 10 | ((ax & 0x7fffffu) >> 13), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

static float h2f(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float f = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000u) ? -f : f;
}

/* half values (count of them) from the device, as floats */
static float *half_to_host(const void *dev, int64_t count)
{
    uint16_t *h = malloc(sizeof *h * (size_t)count);
    float *f = malloc(sizeof *f * (size_t)count);
    cudaMemcpy(h, dev, sizeof *h * (size_t)count, cudaMemcpyDeviceToHost);
    for (int64_t i = 0; i < count; i++)
        f[i] = h2f(h[i]);
    free(h);
    return f;
}

/* a device buffer of `count` random halves in [-1, 1); *vals gets them as doubles */
static void *half_random(int64_t count, double **vals)
{
    uint16_t *h = malloc(sizeof *h * (size_t)count);
    *vals = malloc(sizeof **vals * (size_t)count);
    for (int64_t i = 0; i < count; i++) {
        h[i] = f2h((float)rng_uniform(&g_rng));
        (*vals)[i] = h2f(h[i]);
    }
    void *d = NULL;
    if (cudaMalloc(&d, sizeof *h * (size_t)count) == cudaSuccess)
        cudaMemcpy(d, h, sizeof *h * (size_t)count, cudaMemcpyHostToDevice);
    free(h);
    return d;
}

/* ||got - ref||_max / max|ref|; half's 11-bit mantissa: 1.5e-3 per level of the FFT */
static double half_tol(int64_t n) { return 1.5e-3 * log2((double)n); }

static void test_half(void)
{
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (major * 10 + minor < 53) {
        SKIP("half precision cuFFT needs compute capability >= 5.3 (device 0: %d.%d)", major, minor);
        CHECK(1);
        return;
    }
    fm_fft_options o;
    /* c2c c32 forward, n = 256, batch 8 */
    {
        enum { B = 8, N = 256 };
        int64_t sh[2] = {B, N};
        double *x = NULL;
        void *dx = half_random(2 * B * N, &x), *dy = NULL;
        cudaMalloc(&dy, 4 * (size_t)B * N);
        fm_tensor tx, ty;
        fm_tensor_init(&tx, dx, gpu0, FM_C32, 2, sh, NULL);
        fm_tensor_init(&ty, dy, gpu0, FM_C32, 2, sh, NULL);
        fm_fft_options_init(&o);
        o.naxes = 1, o.axes[0] = 1; /* the rows: naxes = 0 would transform both axes */
        fm_plan *plan = NULL;
        CHECK_OK(fm_fft_plan(g_ctx, &tx, &ty, NULL, NULL, &o, &plan));
        if (plan) {
            CHECK_MSG(strstr(fm_plan_describe(plan), "cufft c32 c2c"), "describe: %s", fm_plan_describe(plan));
            void *ptrs[4] = {dx, dy, NULL, NULL};
            CHECK_OK(fm_plan_execute(plan, ptrs, 4, NULL));
            cudaDeviceSynchronize();
            double complex *v = malloc(sizeof *v * B * N), *ref = malloc(sizeof *ref * B * N);
            for (int i = 0; i < B * N; i++)
                v[i] = CMPLX(x[2 * i], x[2 * i + 1]);
            ref_rows(v, B, N, 0, ref);
            float *got = half_to_host(dy, 2 * B * N);
            double e = max_rel(got, ref, B * N);
            CHECK_MSG(e < half_tol(N), "c32 c2c n=%d: rel err %.3g", N, e);
            free(v), free(ref), free(got);
            fm_plan_release(plan);
        }
        /* fused chains run as passes (cuFFT has no half callbacks): x * w (f16) -> FFT -> * e (c32), ortho */
        int64_t wn = N;
        double *w = NULL, *ev = NULL;
        void *dw = half_random(N, &w), *de = half_random(2 * N, &ev);
        fm_tensor tw, te;
        fm_tensor_init(&tw, dw, gpu0, FM_F16, 1, &wn, NULL);
        fm_tensor_init(&te, de, gpu0, FM_C32, 1, &wn, NULL);
        fm_fft_options_init(&o);
        o.naxes = 1, o.axes[0] = 1; /* the rows: naxes = 0 would transform both axes */
        o.norm = FM_FFT_NORM_ORTHO;
        o.prolog.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ;
        o.epilog.ops = FM_FFT_OP_MULTIPLY;
        plan = NULL;
        CHECK_OK(fm_fft_plan(g_ctx, &tx, &ty, &tw, &te, &o, &plan));
        if (plan) {
            CHECK_MSG(strstr(fm_plan_describe(plan), "callbacks=passes"), "describe: %s", fm_plan_describe(plan));
            void *ptrs[4] = {dx, dy, dw, de};
            CHECK_OK(fm_plan_execute(plan, ptrs, 4, NULL));
            cudaDeviceSynchronize();
            double complex *v = malloc(sizeof *v * B * N), *ref = malloc(sizeof *ref * B * N);
            for (int i = 0; i < B * N; i++)
                v[i] = conj(CMPLX(x[2 * i], x[2 * i + 1]) * w[i % N]);
            ref_rows(v, B, N, 0, ref);
            for (int i = 0; i < B * N; i++)
                ref[i] *= CMPLX(ev[2 * (i % N)], ev[2 * (i % N) + 1]) / sqrt((double)N);
            float *got = half_to_host(dy, 2 * B * N);
            double e = max_rel(got, ref, B * N);
            CHECK_MSG(e < half_tol(N), "c32 c2c with chains: rel err %.3g", e);
            free(v), free(ref), free(got);
            fm_plan_release(plan);
        }
        cudaFree(dw), cudaFree(de), free(w), free(ev);
        /* not a power of two: refused, naming the rule */
        int64_t sh100[2] = {B, 100};
        fm_tensor_init(&tx, dx, gpu0, FM_C32, 2, sh100, NULL);
        fm_tensor_init(&ty, dy, gpu0, FM_C32, 2, sh100, NULL);
        fm_fft_options_init(&o);
        o.naxes = 1, o.axes[0] = 1; /* the rows: naxes = 0 would transform both axes */
        plan = NULL;
        CHECK(fm_fft_plan(g_ctx, &tx, &ty, NULL, NULL, &o, &plan) == FM_ERR_NOT_SUPPORTED);
        CHECK_ERROR_MENTIONS("powers of two");
        CHECK_ERROR_MENTIONS("100");
        CHECK(plan == NULL);
        cudaFree(dx), cudaFree(dy), free(x);
    }
    /* r2c f16 -> c32, n = 1024, batch 4; then c2r back from that spectrum */
    {
        enum { B = 4, N = 1024, M = N / 2 + 1 };
        int64_t rsh[2] = {B, N}, csh[2] = {B, M};
        int ax[1] = {1};
        double *x = NULL;
        void *dx = half_random(B * N, &x), *dy = NULL, *dz = NULL;
        cudaMalloc(&dy, 4 * (size_t)B * M);
        cudaMalloc(&dz, 2 * (size_t)B * N);
        fm_tensor tx, ty, tz;
        fm_tensor_init(&tx, dx, gpu0, FM_F16, 2, rsh, NULL);
        fm_tensor_init(&ty, dy, gpu0, FM_C32, 2, csh, NULL);
        fm_tensor_init(&tz, dz, gpu0, FM_F16, 2, rsh, NULL);
        fm_fft_options_init(&o);
        o.naxes = 1, o.axes[0] = 1; /* the rows: naxes = 0 would transform both axes */
        o.kind = FM_FFT_R2C;
        CHECK_OK(fm_fft(g_ctx, &tx, &ty, NULL, NULL, &o, NULL));
        cudaDeviceSynchronize();
        double complex *v = malloc(sizeof *v * B * N), *ref = malloc(sizeof *ref * B * N);
        for (int i = 0; i < B * N; i++)
            v[i] = x[i];
        ref_transform(FM_FFT_R2C, 0, 2, rsh, csh, 1, ax, v, ref);
        float *spec = half_to_host(dy, 2 * B * M);
        double e = max_rel(spec, ref, B * M);
        CHECK_MSG(e < half_tol(N), "f16 r2c n=%d: rel err %.3g", N, e);
        /* c2r of the spectrum cuFFT gave (a valid half spectrum), backward norm: 1/n */
        o.kind = FM_FFT_C2R, o.inverse = 1;
        CHECK_OK(fm_fft(g_ctx, &ty, &tz, NULL, NULL, &o, NULL));
        cudaDeviceSynchronize();
        for (int i = 0; i < B * M; i++)
            v[i] = CMPLX(spec[2 * i], spec[2 * i + 1]);
        ref_transform(FM_FFT_C2R, 1, 2, csh, rsh, 1, ax, v, ref);
        float *back = half_to_host(dz, B * N);
        double err = 0, mx = 0;
        for (int i = 0; i < B * N; i++) {
            double r = creal(ref[i]) / N;
            err = fmax(err, fabs(back[i] - r));
            mx = fmax(mx, fabs(r));
        }
        CHECK_MSG(err / mx < half_tol(N), "c32 -> f16 c2r n=%d: rel err %.3g", N, err / mx);
        /* and it is (nearly) the input again */
        double rt = 0;
        for (int i = 0; i < B * N; i++)
            rt = fmax(rt, fabs(back[i] - x[i]));
        CHECK_MSG(rt < 2 * half_tol(N), "f16 round trip: max err %.3g", rt);
        /* an odd length along the halved axis: refused */
        int64_t r6[2] = {B, 6}, c6[2] = {B, 4};
        fm_tensor_init(&tx, dx, gpu0, FM_F16, 2, r6, NULL);
        fm_tensor_init(&ty, dy, gpu0, FM_C32, 2, c6, NULL);
        o.kind = FM_FFT_R2C, o.inverse = 0;
        CHECK(fm_fft(g_ctx, &tx, &ty, NULL, NULL, &o, NULL) == FM_ERR_NOT_SUPPORTED);
        CHECK_ERROR_MENTIONS("powers of two");
        free(v), free(ref), free(spec), free(back), free(x);
        cudaFree(dx), cudaFree(dy), cudaFree(dz);
    }
}

int main(void)
{
    SKIP_WITHOUT_GPU();
    CREATE_CONTEXT_OR_FAIL(&g_ctx);
    /* the shared checks, staged to the GPU */
    g_exec = FM_EXECUTION_CUDA;
    g_describe = "fft cuda/"; /* cuFFT, or the fused kernel for the 1-D c2c chains it takes */
    RUN_TESTS(test_small_vs_naive, test_identities, test_large_roundtrip, test_multi_axes_layouts,
              test_chains, test_chain_vs_unfused, test_concurrent);
    /* device-resident */
    g_exec = FM_EXECUTION_AUTO;
    RUN_TESTS(test_c2r_input_intact, test_raw_callbacks, test_raw_callback_types, test_streams_threads,
              test_looped_batch_chain, test_prolog_modes, test_fused_kernel, test_half);
    /* AUTO gives the small test transforms' chains to the fused kernel where it applies: run
     * the chains again through cuFFT, every prolog as a load callback, then as a pass */
    static const char *const modes[2] = {"callback", "pass"};
    for (int m = 0; m < 2; m++) {
        setenv("FUSEMATH_CUFFT_PROLOG", modes[m], 1);
        fm_context_destroy(g_ctx); /* the variable is read when a context is created */
        CREATE_CONTEXT_OR_FAIL(&g_ctx);
        g_exec = FM_EXECUTION_CUDA;
        g_describe = "fft cuda/cufft";
        RUN_TESTS(test_chains, test_chain_vs_unfused);
        g_exec = FM_EXECUTION_AUTO;
        RUN_TESTS(test_raw_callbacks, test_looped_batch_chain);
    }
    unsetenv("FUSEMATH_CUFFT_PROLOG");
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
#else
TEST_MAIN_SKIPPED("built without CUDA")
#endif
