/* test_cuda_staging.c : operands in GPU memory with execution = cpu are moved by the
 * library (core/src/staging.c + backends/cuda/cuda_device.c), computed on the CPU and
 * the result copied back into GPU memory; FM_DEVICE_AUTO resolves device pointers.
 * Runs everywhere: with a GPU it checks the staging, without a CUDA
 * build or GPU it checks that cuda operands are reported unavailable. */
#include "check.h"

#include <fusemath/fusemath.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef FM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

enum { M = 37, N = 45, K = 29 };

static __attribute__((unused)) void host_reference(const float *a, const float *b, const float *bias, double *ref)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = bias[j];
            for (int q = 0; q < K; q++)
                s += (double)a[i * K + q] * b[q * N + j];
            ref[i * N + j] = s > 0 ? s : 0;
        }
}

static void describe(fm_tensor *t, void *p, int type, int rows, int cols)
{
    fm_device dev = {type, 0};
    int64_t shape[2] = {rows, cols};
    fm_tensor_init(t, p, dev, FM_F32, cols ? 2 : 1, cols ? shape : &shape[0], NULL);
}

static void test_without_gpu(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    float a[M * K] = {0}, b[K * N] = {0}, d[M * N] = {0};
    fm_tensor ta, tb, td;
    describe(&ta, a, FM_DEVICE_CUDA, M, K);
    describe(&tb, b, FM_DEVICE_CPU, K, N);
    describe(&td, d, FM_DEVICE_CPU, M, N);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.execution = FM_EXECUTION_CPU;
    fm_plan *p = NULL;
    CHECK_STATUS(fm_matmul_plan(ctx, &ta, &tb, NULL, NULL, &td, NULL, &o, &p), FM_ERR_UNAVAILABLE);
    CHECK_ERROR_MENTIONS("cuda");
    fm_context_destroy(ctx);
}

#ifdef FM_HAVE_CUDA
static void test_staged_cpu_execution(void)
{
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N), *bias = malloc(sizeof(float) * N);
    float *d = malloc(sizeof(float) * M * N);
    double *ref = malloc(sizeof(double) * M * N);
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 37 % 101) - 50) / 50.0f;
    for (int i = 0; i < K * N; i++) b[i] = (float)((i * 53 % 97) - 48) / 48.0f;
    for (int i = 0; i < N; i++) bias[i] = (float)(i % 7 - 3) / 4.0f;
    host_reference(a, b, bias, ref);
    float *da = NULL, *db = NULL, *dbias = NULL, *dd = NULL;
    CHECK(cudaMalloc((void **)&da, sizeof(float) * M * K) == cudaSuccess);
    CHECK(cudaMalloc((void **)&db, sizeof(float) * K * N) == cudaSuccess);
    CHECK(cudaMalloc((void **)&dbias, sizeof(float) * N) == cudaSuccess);
    CHECK(cudaMalloc((void **)&dd, sizeof(float) * M * N) == cudaSuccess);
    cudaMemcpy(da, a, sizeof(float) * M * K, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof(float) * K * N, cudaMemcpyHostToDevice);
    cudaMemcpy(dbias, bias, sizeof(float) * N, cudaMemcpyHostToDevice);
    cudaMemset(dd, 0xff, sizeof(float) * M * N); /* NaNs: the result must overwrite all */

    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    fm_tensor ta, tb, tbias, td;
    /* a and d say "cuda", b and bias say "auto" and must be resolved from the pointer */
    describe(&ta, da, FM_DEVICE_CUDA, M, K);
    describe(&tb, db, FM_DEVICE_AUTO, K, N);
    describe(&tbias, dbias, FM_DEVICE_AUTO, N, 0);
    describe(&td, dd, FM_DEVICE_CUDA, M, N);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU;
    o.execution = FM_EXECUTION_CPU;
    fm_plan *p = NULL;
    CHECK_OK(fm_matmul_plan(ctx, &ta, &tb, NULL, &tbias, &td, NULL, &o, &p));
    if (p) {
        CHECK_MSG(fm_test_contains(fm_plan_describe(p), "staged=a,b,bias,d"), "describe: %s", fm_plan_describe(p));
        void *ptrs[FM_MATMUL_NSLOTS] = {da, db, NULL, dbias, dd, NULL};
        CHECK_OK(fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL));
        CHECK(cudaMemcpy(d, dd, sizeof(float) * M * N, cudaMemcpyDeviceToHost) == cudaSuccess);
        double worst = 0;
        for (int i = 0; i < M * N; i++) {
            double e = fabs(d[i] - ref[i]) / (K * 1.2e-7 * (1 + fabs(ref[i])));
            if (!(e <= worst))
                worst = isnan(e) ? INFINITY : e;
        }
        CHECK_MSG(worst <= 4.0, "staged result off by %.3g x the bound", worst);
        fm_plan_release(p);
    }

    /* mixed devices without an explicit execution space: an error naming both */
    fm_tensor th;
    describe(&th, b, FM_DEVICE_AUTO, K, N); /* a host pointer */
    o.execution = FM_EXECUTION_AUTO;
    o.epilogue = 0;
    CHECK_STATUS(fm_matmul_plan(ctx, &ta, &th, NULL, NULL, &td, NULL, &o, &p), FM_ERR_DEVICE);
    CHECK_ERROR_MENTIONS("cuda:0");

    /* cuda execution: no cuda matmul backend yet -> a clear error, not a crash */
    o.execution = FM_EXECUTION_CUDA;
    fm_status s = fm_matmul_plan(ctx, &ta, &tb, NULL, NULL, &td, NULL, &o, &p);
    CHECK_MSG(s == FM_OK || s == FM_ERR_NOT_SUPPORTED, "execution=cuda gave %s", fm_status_name(s));
    if (s == FM_OK)
        fm_plan_release(p);

    fm_context_destroy(ctx);
    cudaFree(da), cudaFree(db), cudaFree(dbias), cudaFree(dd);
    free(a), free(b), free(bias), free(d), free(ref);
}
#endif

int main(void)
{
    if (fm_cuda_device_count() == 0) {
        RUN_TEST(test_without_gpu);
    } else {
#ifdef FM_HAVE_CUDA
        RUN_TEST(test_staged_cpu_execution);
#endif
    }
    TEST_MAIN_RETURN();
}
