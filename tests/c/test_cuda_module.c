/* test_cuda_module.c : CUDA on demand, as a user's program sees it (linked against libfusemath.so,
 * not the objects: core must find, probe and load libfusemath_cuda.so itself).
 *   test_cuda_module auto        whatever this machine has: the module's rows iff a device is seen
 *   test_cuda_module rows        FUSEMATH_CUDA_MODULE names the built module: it loads (no device
 *                                needed), its rows join the context, the CUDA libraries are mapped
 *   test_cuda_module why <text>  the module is absent and the "cuda" row's reason contains <text>
 *                                (FUSEMATH_CUDA_MODULE missing or not a module; LD_AUDIT hiding CUDA)
 * In every case the context is created and CPU matmul and FFT agree with direct loops; where the
 * module is absent, GPU requests are refused with the reason (also in FUSEMATH_LOG=plan's log). */
#define _GNU_SOURCE /* M_PI */
#include "check.h"

#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static const fm_device cpu = {FM_DEVICE_CPU, 0};

/* Whether a library whose file name contains `name` is mapped into this process. */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, name) != NULL;
    if (f)
        fclose(f);
    return found;
}

static void check_cpu_matmul(fm_context *ctx)
{
    enum { M = 5, K = 7, N = 3 };
    double a[M * K], b[K * N], d[M * N];
    for (int i = 0; i < M * K; i++) a[i] = sin(1.0 + i);
    for (int i = 0; i < K * N; i++) b[i] = cos(2.0 + i);
    fm_tensor ta, tb, td;
    CHECK_OK(fm_tensor_init(&ta, a, cpu, FM_F64, 2, (const int64_t[]){M, K}, NULL));
    CHECK_OK(fm_tensor_init(&tb, b, cpu, FM_F64, 2, (const int64_t[]){K, N}, NULL));
    CHECK_OK(fm_tensor_init(&td, d, cpu, FM_F64, 2, (const int64_t[]){M, N}, NULL));
    CHECK_OK(fm_matmul(ctx, &ta, &tb, NULL, NULL, &td, NULL, NULL, NULL));
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0;
            for (int k = 0; k < K; k++) ref += a[i * K + k] * b[k * N + j];
            worst = fmax(worst, fabs(d[i * N + j] - ref));
        }
    CHECK_MSG(worst < 1e-12, "matmul: max error %g against the direct sum", worst);
}

static void check_cpu_fft(fm_context *ctx)
{
    enum { L = 12 };
    double complex in[L], out[L];
    for (int i = 0; i < L; i++) in[i] = sin(0.3 * i) + I * cos(0.7 * i);
    fm_tensor ti, to;
    CHECK_OK(fm_tensor_init(&ti, in, cpu, FM_C128, 1, (const int64_t[]){L}, NULL));
    CHECK_OK(fm_tensor_init(&to, out, cpu, FM_C128, 1, (const int64_t[]){L}, NULL));
    CHECK_OK(fm_fft(ctx, &ti, &to, NULL, NULL, NULL, NULL));
    double worst = 0;
    for (int k = 0; k < L; k++) {
        double complex ref = 0;
        for (int j = 0; j < L; j++) ref += in[j] * cexp(-2 * M_PI * I * j * k / L);
        worst = fmax(worst, cabs(out[k] - ref));
    }
    CHECK_MSG(worst < 1e-12, "fft: max error %g against the direct DFT", worst);
}

/* A matmul asked to run on cuda:0 (operands on the host) is refused naming the reason, and with
 * FUSEMATH_LOG=plan the reason is logged on stderr (caught here in a temporary file). */
static void check_gpu_refusal(const char *reason)
{
    setenv("FUSEMATH_LOG", "plan", 1);
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    unsetenv("FUSEMATH_LOG");
    double a[4] = {1, 2, 3, 4}, d[4];
    fm_tensor ta, td;
    CHECK_OK(fm_tensor_init(&ta, a, cpu, FM_F64, 2, (const int64_t[]){2, 2}, NULL));
    CHECK_OK(fm_tensor_init(&td, d, cpu, FM_F64, 2, (const int64_t[]){2, 2}, NULL));
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.execution = FM_EXECUTION_CUDA;
    FILE *log = tmpfile();
    const int saved = dup(2);
    fflush(stderr);
    CHECK(log && saved >= 0 && dup2(fileno(log), 2) == 2);
    const fm_status st = ctx ? fm_matmul(ctx, &ta, &ta, NULL, NULL, &td, NULL, &o, NULL) : FM_ERR_INTERNAL;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    CHECK_MSG(st == FM_ERR_UNAVAILABLE && fm_test_contains(fm_last_error(), reason), "%s: '%s'",
              fm_status_name(st), fm_last_error());
    char text[1024] = "";
    if (log) {
        rewind(log);
        text[fread(text, 1, sizeof text - 1, log)] = '\0';
        fclose(log);
    }
    CHECK_MSG(strstr(text, "fusemath[plan] ") && fm_test_contains(text, reason), "log: '%s'", text);
    fm_context_destroy(ctx);
}

/* The row named `name`: its index, availability and reason; -1 when the context has none. */
static int find_row(fm_context *ctx, const char *name, int *avail, const char **why)
{
    for (int i = 0; i < fm_context_backend_count(ctx); i++) {
        const char *n = NULL;
        fm_device_type dev;
        CHECK_OK(fm_context_backend_info(ctx, i, &n, &dev, avail, why));
        if (n && strcmp(n, name) == 0)
            return i;
    }
    return -1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "auto";
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx)
        TEST_MAIN_RETURN();
    check_cpu_matmul(ctx);
    check_cpu_fft(ctx);
    int avail = -1;
    const char *why = NULL;
    const int absent_row = find_row(ctx, "cuda", &avail, &why);
    const int lt_row = find_row(ctx, "cublaslt", &avail, &why);
    const int loaded = lt_row >= 0 && find_row(ctx, "cufft", &avail, &why) >= 0 &&
                       find_row(ctx, "fftkernel", &avail, &why) >= 0 && find_row(ctx, "rngkernel", &avail, &why) >= 0 &&
                       find_row(ctx, "curand", &avail, &why) >= 0;
    CHECK_MSG(loaded != (absent_row >= 0), "module rows %d, 'cuda' row %d: exactly one of them", loaded,
              absent_row);
    if (strcmp(mode, "auto") == 0) {
        CHECK_MSG(loaded == (fm_cuda_device_count() > 0), "module loaded %d with %d CUDA devices", loaded,
                  fm_cuda_device_count());
    } else if (strcmp(mode, "rows") == 0) {
        CHECK(loaded);
        CHECK_MSG(mapped("libcudart"), "%s", "the loaded module maps the CUDA runtime");
        find_row(ctx, "cublaslt", &avail, &why);
        CHECK_MSG(avail == (fm_cuda_device_count() > 0) && (avail || (why && why[0])),
                  "cublaslt available %d (why '%s') with %d devices", avail, why ? why : "",
                  fm_cuda_device_count());
    } else if (strcmp(mode, "why") == 0 && argc > 2) {
        find_row(ctx, "cuda", &avail, &why);
        CHECK_MSG(absent_row >= 0 && avail == 0 && fm_test_contains(why, argv[2]), "'cuda' row: why = '%s', "
                  "expected it to contain '%s'", why ? why : "(none)", argv[2]);
        CHECK(fm_cuda_device_count() == 0);
        CHECK_MSG(!mapped("libcudart") && !mapped("libcublas") && !mapped("libcufft") && !mapped("libnvrtc"),
                  "%s", "no CUDA library is mapped when the module is absent");
        void *p = NULL;
        CHECK_STATUS(fm_memory_alloc((fm_device){FM_DEVICE_CUDA, 0}, 64, &p), FM_ERR_UNAVAILABLE);
        CHECK(p == NULL);
        CHECK_ERROR_MENTIONS(argv[2]);
        check_gpu_refusal(argv[2]);
    } else {
        CHECK_MSG(0, "unknown mode '%s' (expected auto, rows or why <text>)", mode);
    }
    fm_context_destroy(ctx);
    TEST_MAIN_RETURN();
}
