/* heat2d_spectral.c : the 2-D heat equation u_t = nu (u_xx + u_yy) on the periodic square
 * [0, 2 pi)^2, solved spectrally with fusemath's public C API, on the CPU or the GPU.
 *
 * Each time step is two planned transforms, and everything around them is fused into them:
 *   forward  r2c : U = FFT(u), with the epilog  U *= exp(-nu |k|^2 dt)   (the time step)
 *   inverse  c2r : u = IFFT(U), the 1/N^2 normalisation fused (norm = backward)
 * so no pass over the data happens outside the FFT calls. The program starts from one
 * Fourier mode, sin(3x) cos(2y), whose exact solution decays as exp(-13 nu t), and checks the
 * computed field against it after all steps (exit status 1 if the error exceeds 1e-10).
 *
 * Where the fields live decides where it runs: with `cuda`, u, U and the decay factors are
 * allocated on the GPU with fm_memory_alloc, the initial field and the factors are copied up
 * once with fm_memory_copy, the tensors say {FM_DEVICE_CUDA, 0}, and the same plans run there
 * (cuFFT) on the default stream; only the final field comes back. The program links
 * libfusemath only, not the CUDA runtime.
 *
 * Usage: heat2d_spectral [N] [steps] [cpu|cuda]   (defaults 128, 100, cpu)
 * With cuda on a machine without a GPU it fails (exit 1), unless FM_EXAMPLE_ALLOW_SKIP=1 is
 * set: then it prints "no CUDA device: skipped" and exits 0. */
#define _POSIX_C_SOURCE 200112L /* clock_gettime */
#include <fusemath/fusemath.h>

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                                           \
    do {                                                                                                      \
        fm_status s_ = (call);                                                                                \
        if (s_ != FM_OK) {                                                                                    \
            fprintf(stderr, "%s failed: %s: %s\n", #call, fm_status_name(s_), fm_last_error());               \
            goto done;                                                                                        \
        }                                                                                                     \
    } while (0)

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 128, steps = argc > 2 ? atoi(argv[2]) : 100;
    const char *where = argc > 3 ? argv[3] : "cpu";
    const int on_gpu = strcmp(where, "cuda") == 0;
    const fm_device dev = {on_gpu ? FM_DEVICE_CUDA : FM_DEVICE_CPU, 0}, cpu = {FM_DEVICE_CPU, 0};
    if (n < 8 || steps < 1 || argc > 4 || (!on_gpu && strcmp(where, "cpu") != 0)) {
        fprintf(stderr, "usage: %s [N >= 8] [steps >= 1] [cpu|cuda]\n", argv[0]);
        return 2;
    }
    if (on_gpu && fm_cuda_device_count() == 0) {
        const char *allow = getenv("FM_EXAMPLE_ALLOW_SKIP");
        if (allow && strcmp(allow, "1") == 0) {
            printf("no CUDA device: skipped\n");
            return 0;
        }
        fprintf(stderr,
                "heat2d: cuda requested but no CUDA device is available (no GPU, no driver, or a fusemath "
                "build without CUDA); run with cpu, or set FM_EXAMPLE_ALLOW_SKIP=1 to skip\n");
        return 1;
    }

    int rc = 1;
    const int h = n / 2 + 1; /* r2c keeps n/2+1 columns */
    const double nu = 0.1, dt = 1e-2, pi = 3.14159265358979323846;
    const size_t real_bytes = sizeof(double) * (size_t)n * n, spec_bytes = sizeof(double complex) * (size_t)n * h,
                 decay_bytes = sizeof(double) * (size_t)n * h;
    fm_context *ctx = NULL;
    fm_plan *pf = NULL, *pi_ = NULL;
    void *u = NULL, *uhat = NULL, *decay = NULL; /* on `dev` */
    double *hu = malloc(real_bytes), *hdecay = malloc(decay_bytes); /* host: set-up and check */
    if (!hu || !hdecay) {
        fprintf(stderr, "heat2d: out of host memory\n");
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double x = 2 * pi * i / n, y = 2 * pi * j / n;
            hu[i * n + j] = sin(3 * x) * cos(2 * y);
        }
    for (int i = 0; i < n; i++) { /* wavenumbers: 0..n/2, then negative */
        int kx = i <= n / 2 ? i : i - n;
        for (int j = 0; j < h; j++)
            hdecay[i * h + j] = exp(-nu * (double)(kx * kx + j * j) * dt);
    }

    /* The fields live on `dev` (on the cpu the copies are plain memcpy). */
    CHECK(fm_memory_alloc(dev, real_bytes, &u));
    CHECK(fm_memory_alloc(dev, spec_bytes, &uhat));
    CHECK(fm_memory_alloc(dev, decay_bytes, &decay));
    CHECK(fm_memory_copy(u, dev, hu, cpu, real_bytes));
    CHECK(fm_memory_copy(decay, dev, hdecay, cpu, decay_bytes));

    CHECK(fm_context_create(&ctx));
    int64_t real_shape[2] = {n, n}, spec_shape[2] = {n, h};
    fm_tensor tu, tuhat, tdecay;
    CHECK(fm_tensor_init(&tu, u, dev, FM_F64, 2, real_shape, NULL));
    CHECK(fm_tensor_init(&tuhat, uhat, dev, FM_C128, 2, spec_shape, NULL));
    CHECK(fm_tensor_init(&tdecay, decay, dev, FM_F64, 2, spec_shape, NULL));

    fm_fft_options fwd, inv;
    fm_fft_options_init(&fwd);
    fwd.kind = FM_FFT_R2C;
    fwd.naxes = 2, fwd.axes[0] = 0, fwd.axes[1] = 1;
    fwd.epilog.ops = FM_FFT_OP_MULTIPLY; /* U *= exp(-nu k^2 dt), fused into the transform */
    fwd.effort = FM_FFT_EFFORT_MEASURE;  /* planned once, run every step: let FFTW time its plans */
    fm_fft_options_init(&inv);
    inv.kind = FM_FFT_C2R;
    inv.effort = FM_FFT_EFFORT_MEASURE;
    inv.inverse = 1;
    inv.naxes = 2, inv.axes[0] = 0, inv.axes[1] = 1; /* norm backward: the 1/N^2 is fused */
    CHECK(fm_fft_plan(ctx, &tu, &tuhat, NULL, &tdecay, &fwd, &pf));
    CHECK(fm_fft_plan(ctx, &tuhat, &tu, NULL, NULL, &inv, &pi_));
    printf("%s\n%s\n", fm_plan_describe(pf), fm_plan_describe(pi_));

    /* stream NULL: on the GPU the default stream, so the steps run in order */
    void *fptrs[FM_FFT_NSLOTS] = {u, uhat, NULL, decay};
    void *iptrs[FM_FFT_NSLOTS] = {uhat, u, NULL, NULL};
    double t0 = now_seconds();
    for (int s = 0; s < steps; s++) {
        CHECK(fm_plan_execute(pf, fptrs, FM_FFT_NSLOTS, NULL));
        CHECK(fm_plan_execute(pi_, iptrs, FM_FFT_NSLOTS, NULL));
    }
    /* fm_memory_copy waits for all work queued on the device before it copies: copying one value
     * back ends the timing once every step is done; then the whole field comes back */
    double first;
    CHECK(fm_memory_copy(&first, cpu, u, dev, sizeof first));
    double elapsed = now_seconds() - t0;
    CHECK(fm_memory_copy(hu, cpu, u, dev, real_bytes));

    double t = steps * dt, amp = exp(-13 * nu * t), err = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double x = 2 * pi * i / n, y = 2 * pi * j / n;
            double e = fabs(hu[i * n + j] - amp * sin(3 * x) * cos(2 * y));
            err = e > err ? e : err;
        }
    printf("heat2d on %s: N = %d, %d steps, t = %g: amplitude exp(-13 nu t) = %.12f, max error %.3g, "
           "%.3f ms per step (forward + inverse)\n",
           on_gpu ? "cuda:0" : "cpu", n, steps, t, amp, err, 1e3 * elapsed / steps);
    if (!(err < 1e-10)) { /* also catches NaN */
        fprintf(stderr, "heat2d: error %.3g exceeds 1e-10\n", err);
        goto done;
    }
    rc = 0;
done:
    fm_plan_release(pf);
    fm_plan_release(pi_);
    fm_context_destroy(ctx);
    fm_memory_free(dev, u);
    fm_memory_free(dev, uhat);
    fm_memory_free(dev, decay);
    free(hu), free(hdecay);
    return rc;
}
