/* heat2d_spectral.c : the 2-D heat equation u_t = nu (u_xx + u_yy) on the periodic square
 * [0, 2 pi)^2, solved spectrally with fusemath's public C API.
 *
 * Each time step is two planned transforms, and everything around them is fused into them:
 *   forward  r2c : U = FFT(u), with the epilog  U *= exp(-nu |k|^2 dt)   (the time step)
 *   inverse  c2r : u = IFFT(U), the 1/N^2 normalisation fused (norm = backward)
 * so no pass over the data happens outside the FFT calls. The program starts from one
 * Fourier mode, sin(3x) cos(2y), whose exact solution decays as exp(-13 nu t), and checks the
 * computed field against it after all steps (exit status 1 if the error exceeds 1e-10).
 *
 * Usage: heat2d_spectral [N] [steps]   (defaults 128, 100) */
#include <fusemath/fusemath.h>

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                           \
    do {                                                                                                      \
        fm_status s_ = (call);                                                                                \
        if (s_ != FM_OK) {                                                                                    \
            fprintf(stderr, "%s failed: %s: %s\n", #call, fm_status_name(s_), fm_last_error());               \
            return 1;                                                                                         \
        }                                                                                                     \
    } while (0)

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 128, steps = argc > 2 ? atoi(argv[2]) : 100;
    if (n < 8 || steps < 1) {
        fprintf(stderr, "usage: %s [N >= 8] [steps >= 1]\n", argv[0]);
        return 2;
    }
    const int h = n / 2 + 1; /* r2c keeps n/2+1 columns */
    const double nu = 0.1, dt = 1e-2, pi = 3.14159265358979323846;
    double *u = malloc(sizeof(double) * (size_t)n * n);
    double complex *uhat = malloc(sizeof(double complex) * (size_t)n * h);
    double *decay = malloc(sizeof(double) * (size_t)n * h);
    if (!u || !uhat || !decay)
        return 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double x = 2 * pi * i / n, y = 2 * pi * j / n;
            u[i * n + j] = sin(3 * x) * cos(2 * y);
        }
    for (int i = 0; i < n; i++) { /* wavenumbers: 0..n/2, then negative */
        int kx = i <= n / 2 ? i : i - n;
        for (int j = 0; j < h; j++)
            decay[i * h + j] = exp(-nu * (double)(kx * kx + j * j) * dt);
    }

    fm_context *ctx;
    CHECK(fm_context_create(&ctx));
    fm_device cpu = {FM_DEVICE_CPU, 0};
    int64_t real_shape[2] = {n, n}, spec_shape[2] = {n, h};
    fm_tensor tu, tuhat, tdecay;
    CHECK(fm_tensor_init(&tu, u, cpu, FM_F64, 2, real_shape, NULL));
    CHECK(fm_tensor_init(&tuhat, uhat, cpu, FM_C128, 2, spec_shape, NULL));
    CHECK(fm_tensor_init(&tdecay, decay, cpu, FM_F64, 2, spec_shape, NULL));

    fm_fft_options fwd, inv;
    fm_fft_options_init(&fwd);
    fwd.kind = FM_FFT_R2C;
    fwd.naxes = 2, fwd.axes[0] = 0, fwd.axes[1] = 1;
    fwd.epilog.ops = FM_FFT_OP_MULTIPLY; /* U *= exp(-nu k^2 dt), fused into the transform */
    fm_fft_options_init(&inv);
    inv.kind = FM_FFT_C2R;
    inv.inverse = 1;
    inv.naxes = 2, inv.axes[0] = 0, inv.axes[1] = 1; /* norm backward: the 1/N^2 is fused */
    fm_plan *pf, *pi_;
    CHECK(fm_fft_plan(ctx, &tu, &tuhat, NULL, &tdecay, &fwd, &pf));
    CHECK(fm_fft_plan(ctx, &tuhat, &tu, NULL, NULL, &inv, &pi_));
    printf("%s\n%s\n", fm_plan_describe(pf), fm_plan_describe(pi_));

    void *fptrs[FM_FFT_NSLOTS] = {u, uhat, NULL, decay};
    void *iptrs[FM_FFT_NSLOTS] = {uhat, u, NULL, NULL};
    for (int s = 0; s < steps; s++) {
        CHECK(fm_plan_execute(pf, fptrs, FM_FFT_NSLOTS, NULL));
        CHECK(fm_plan_execute(pi_, iptrs, FM_FFT_NSLOTS, NULL));
    }

    double t = steps * dt, amp = exp(-13 * nu * t), err = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double x = 2 * pi * i / n, y = 2 * pi * j / n;
            double e = fabs(u[i * n + j] - amp * sin(3 * x) * cos(2 * y));
            err = e > err ? e : err;
        }
    printf("heat2d: N = %d, %d steps, t = %g: amplitude exp(-13 nu t) = %.12f, max error %.3g\n", n, steps, t, amp,
           err);
    fm_plan_release(pf);
    fm_plan_release(pi_);
    fm_context_destroy(ctx);
    free(u), free(uhat), free(decay);
    if (!(err < 1e-10)) {
        fprintf(stderr, "heat2d: error %.3g exceeds 1e-10\n", err);
        return 1;
    }
    return 0;
}
