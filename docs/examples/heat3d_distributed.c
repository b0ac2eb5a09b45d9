/* heat3d_distributed.c : the 3-D heat equation u_t = nu (u_xx + u_yy + u_zz) on the periodic cube
 * [0, 2 pi)^3, solved spectrally on N MPI ranks with libfusemath_mpi (fusemath/fusemath_mpi.h).
 *
 * The field is split in slabs along x (fm_dist_local_shape tells each rank its rows). Each time
 * step is two planned distributed transforms, and everything around them is fused into them:
 *   forward  r2c : U = FFT(u), with the epilog multiply U *= exp(-nu |k|^2 dt) (the time step),
 *                  the factor given as this rank's block of the output; the output is left
 *                  transposed (axes x and y swapped: FFTW-MPI saves its last all-to-all)
 *   inverse  c2r : u = IFFT(U) from that transposed layout back to slabs, the 1/N^3 fused (norm)
 * so no pass over the data happens outside the FFT calls. The program starts from one Fourier
 * mode, sin(3x) cos(2y) sin(z), whose exact solution decays as exp(-14 nu t), and checks the
 * field against it after all steps (exit status 1 on every rank if the error exceeds 1e-10).
 *
 * Usage: mpirun -np 2 heat3d_distributed [N] [steps]   (defaults 32, 20)
 * Build: cc heat3d_distributed.c -lfusemath_mpi -lfusemath $(mpicc --showme:link) -lm */
#define _DEFAULT_SOURCE /* M_PI */
#include <fusemath/fusemath_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                           \
    do {                                                                                                      \
        fm_status s_ = (call);                                                                                \
        if (s_ != FM_OK) { /* the library fails on every rank alike: every rank leaves here */               \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, #call, fm_status_name(s_), fm_last_error()); \
            goto done;                                                                                        \
        }                                                                                                     \
    } while (0)

/* the signed wave number of index j of a length-n axis */
static double wave(int64_t j, int64_t n) { return (double)(j <= n / 2 ? j : j - n); }

static double exact(double x, double y, double z, double decay) { return sin(3 * x) * cos(2 * y) * sin(z) * decay; }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1, ok = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int64_t N = argc > 1 ? atol(argv[1]) : 32;
    const int steps = argc > 2 ? atoi(argv[2]) : 20;
    const double nu = 0.1, dt = 0.01, h = 2 * M_PI / (double)N;
    const int64_t n[3] = {N, N, N};
    fm_dist_plan *fwd = NULL, *inv = NULL;
    double *u = NULL, *U = NULL, *decay = NULL;

    fm_dist_fft_options of, oi;
    fm_dist_fft_options_init(&of);
    of.kind = FM_FFT_R2C, of.out_layout = FM_DIST_TRANSPOSED, of.epilog.ops = FM_FFT_OP_MULTIPLY;
    fm_dist_fft_options_init(&oi);
    oi.kind = FM_FFT_C2R, oi.inverse = 1, oi.in_layout = FM_DIST_TRANSPOSED; /* norm backward: 1/N^3 */
    int64_t lu[3], ou[3], lk[3], ok_[3];
    CHECK(fm_dist_local_shape(MPI_COMM_WORLD, 3, n, &of, FM_DIST_IN, lu, ou));  /* slab of u: x rows */
    CHECK(fm_dist_local_shape(MPI_COMM_WORLD, 3, n, &of, FM_DIST_OUT, lk, ok_)); /* (ky, kx, kz) block */
    int64_t nu_loc = lu[0] * lu[1] * lu[2], nk_loc = lk[0] * lk[1] * lk[2];
    u = malloc(sizeof(double) * (size_t)(nu_loc + 1));
    U = malloc(2 * sizeof(double) * (size_t)(nk_loc + 1));
    decay = malloc(sizeof(double) * (size_t)(nk_loc + 1));
    int short_of_memory = !u || !U || !decay, any_short = 0; /* agreed, so that no rank waits in a plan */
    MPI_Allreduce(&short_of_memory, &any_short, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_short) {
        if (short_of_memory)
            fprintf(stderr, "rank %d: out of memory\n", rank);
        goto done;
    }
    for (int64_t i = 0; i < lu[0]; i++) /* the initial field, this rank's rows x = (ou[0] + i) h */
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < N; k++)
                u[(i * N + j) * N + k] = exact((double)(ou[0] + i) * h, (double)j * h, (double)k * h, 1);
    for (int64_t a = 0; a < lk[0]; a++) /* transposed output: axis 0 is ky (from ok_[0]), axis 1 kx */
        for (int64_t b = 0; b < lk[1]; b++)
            for (int64_t c = 0; c < lk[2]; c++) {
                double ky = wave(ok_[0] + a, N), kx = wave(b, N), kz = (double)c;
                decay[(a * lk[1] + b) * lk[2] + c] = exp(-nu * (kx * kx + ky * ky + kz * kz) * dt);
            }
    fm_tensor td;
    CHECK(fm_tensor_init(&td, decay, (fm_device){FM_DEVICE_CPU, 0}, FM_F64, 3, lk, NULL));
    CHECK(fm_dist_fft_plan_chains(MPI_COMM_WORLD, 3, n, FM_F64, lu, NULL, &td, &of, &fwd));
    CHECK(fm_dist_fft_plan(MPI_COMM_WORLD, 3, n, FM_C128, lk, &oi, &inv));
    if (rank == 0)
        printf("%s\n%s\n", fm_dist_fft_describe(fwd), fm_dist_fft_describe(inv));

    double t0 = MPI_Wtime();
    for (int s = 0; s < steps; s++) {
        CHECK(fm_dist_fft_execute(fwd, u, U)); /* U = decay * FFT(u) */
        CHECK(fm_dist_fft_execute(inv, U, u)); /* u = IFFT(U) / N^3 */
    }
    double elapsed = MPI_Wtime() - t0;

    double amp = exp(-14 * nu * dt * steps), err = 0;
    for (int64_t i = 0; i < lu[0]; i++)
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < N; k++) {
                double e = u[(i * N + j) * N + k] - exact((double)(ou[0] + i) * h, (double)j * h, (double)k * h, amp);
                err = fmax(err, fabs(e));
            }
    MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    ok = err <= 1e-10;
    if (rank == 0)
        printf("heat3d_distributed: N = %lld, %d ranks, %d steps (%.3f ms each), amplitude %.6f, max error %.3g: "
               "%s\n", (long long)N, size, steps, 1e3 * elapsed / (steps > 0 ? steps : 1), amp, err,
               ok ? "OK" : "FAILED (> 1e-10)");
done:
    fm_dist_fft_destroy(fwd);
    fm_dist_fft_destroy(inv);
    free(u), free(U), free(decay);
    MPI_Finalize();
    return ok ? 0 : 1;
}
