/* test_solve_cusolver_handles_gpu.c : the cuSOLVER backend's per-device handles when one of their
 * creates fails part way (backends/cuda/cusolver_dense.c, device_state): the test defines the
 * create / destroy functions itself (the library's objects are linked into it, so their calls bind
 * here), forwards them to the real ones (dlsym RTLD_NEXT), counts the live handles of each kind and
 * fails the create it is told to. After each failed plan (FM_ERR_BACKEND naming the call) every
 * handle made for it is destroyed again; the next plan, with nothing failing, solves correctly; the
 * context's destruction leaves no handle alive. */
#define _GNU_SOURCE
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <dlfcn.h>

enum { SV, PRM, BL, SJ, NKINDS };
static const char *const create_names[NKINDS] = {"cusolverDnCreate", "cusolverDnCreateParams", "cublasCreate",
                                                 "cusolverDnCreateSyevjInfo"};
static int live[NKINDS], fail_kind = -1;

static void *real(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "dlsym(%s): %s\n", name, dlerror());
        abort();
    }
    return f;
}

/* the four creates: fail_kind's refuses (as out of memory would) without making a handle */
cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t *h)
{
    if (fail_kind == SV)
        return CUSOLVER_STATUS_ALLOC_FAILED;
    cusolverStatus_t e = ((cusolverStatus_t(*)(cusolverDnHandle_t *))real("cusolverDnCreate"))(h);
    live[SV] += e == CUSOLVER_STATUS_SUCCESS;
    return e;
}
cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t h)
{
    live[SV]--;
    return ((cusolverStatus_t(*)(cusolverDnHandle_t))real("cusolverDnDestroy"))(h);
}
cusolverStatus_t cusolverDnCreateParams(cusolverDnParams_t *p)
{
    if (fail_kind == PRM)
        return CUSOLVER_STATUS_ALLOC_FAILED;
    cusolverStatus_t e = ((cusolverStatus_t(*)(cusolverDnParams_t *))real("cusolverDnCreateParams"))(p);
    live[PRM] += e == CUSOLVER_STATUS_SUCCESS;
    return e;
}
cusolverStatus_t cusolverDnDestroyParams(cusolverDnParams_t p)
{
    live[PRM]--;
    return ((cusolverStatus_t(*)(cusolverDnParams_t))real("cusolverDnDestroyParams"))(p);
}
cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    if (fail_kind == BL)
        return CUBLAS_STATUS_ALLOC_FAILED;
    cublasStatus_t e = ((cublasStatus_t(*)(cublasHandle_t *))real("cublasCreate_v2"))(h);
    live[BL] += e == CUBLAS_STATUS_SUCCESS;
    return e;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    live[BL]--;
    return ((cublasStatus_t(*)(cublasHandle_t))real("cublasDestroy_v2"))(h);
}
cusolverStatus_t cusolverDnCreateSyevjInfo(syevjInfo_t *s)
{
    if (fail_kind == SJ)
        return CUSOLVER_STATUS_ALLOC_FAILED;
    cusolverStatus_t e = ((cusolverStatus_t(*)(syevjInfo_t *))real("cusolverDnCreateSyevjInfo"))(s);
    live[SJ] += e == CUSOLVER_STATUS_SUCCESS;
    return e;
}
cusolverStatus_t cusolverDnDestroySyevjInfo(syevjInfo_t s)
{
    live[SJ]--;
    return ((cusolverStatus_t(*)(syevjInfo_t))real("cusolverDnDestroySyevjInfo"))(s);
}

/* x = a^-1 b on the GPU for a = diag(1, 2, 4), b = ones: x = (1, 1/2, 1/4) */
static fm_status solve_diag(fm_context *ctx, double *x)
{
    const double a[9] = {1, 0, 0, 0, 2, 0, 0, 0, 4}, b[3] = {1, 1, 1};
    double *d = NULL;
    if (cudaMalloc((void **)&d, sizeof a + sizeof b + 3 * sizeof(double)) != cudaSuccess)
        abort();
    cudaMemcpy(d, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(d + 9, b, sizeof b, cudaMemcpyHostToDevice);
    const fm_device dev = {FM_DEVICE_CUDA, 0};
    const int64_t sa[2] = {3, 3}, sb[2] = {3, 1};
    fm_tensor ta, tb, tx;
    fm_tensor_init(&ta, d, dev, FM_F64, 2, sa, NULL);
    fm_tensor_init(&tb, d + 9, dev, FM_F64, 2, sb, NULL);
    fm_tensor_init(&tx, d + 12, dev, FM_F64, 2, sb, NULL);
    const fm_tensor *t[FM_SOLVE_NSLOTS] = {&ta, &tb, NULL, &tx};
    fm_solve_options o;
    fm_solve_options_init(&o);
    const fm_status s = fm_solve(ctx, t, &o, NULL);
    cudaMemcpy(x, d + 12, 3 * sizeof(double), cudaMemcpyDeviceToHost);
    cudaFree(d);
    return s;
}

static void test_partial_failure(void)
{
    int base[NKINDS];
    memcpy(base, live, sizeof base);
    for (int k = 0; k < NKINDS; k++) {
        fm_context *ctx = NULL;
        CHECK_OK(fm_context_create(&ctx));
        int before[NKINDS];
        memcpy(before, live, sizeof before);
        double x[3] = {0};
        fail_kind = k;
        CHECK_STATUS(solve_diag(ctx, x), FM_ERR_BACKEND);
        /* cusolverDnCreate makes a cuBLAS handle of its own: failing cublasCreate may fail it first */
        CHECK_MSG(fm_test_contains(fm_last_error(), create_names[k]) ||
                      (k == BL && fm_test_contains(fm_last_error(), create_names[SV])),
                  "%s failing: the message names neither it nor its caller", create_names[k]);
        fail_kind = -1;
        for (int j = 0; j < NKINDS; j++)
            CHECK_MSG(live[j] == before[j], "%s failing: %d %s handle(s) left alive by the failed plan",
                      create_names[k], live[j] - before[j], create_names[j]);
        CHECK_OK(solve_diag(ctx, x)); /* nothing fails now: the handles are made afresh */
        CHECK_MSG(x[0] == 1 && x[1] == 0.5 && x[2] == 0.25, "after %s failed once: x = (%g, %g, %g)", create_names[k],
                  x[0], x[1], x[2]);
        fm_context_destroy(ctx);
        for (int j = 0; j < NKINDS; j++)
            CHECK_MSG(live[j] == base[j], "after the context: %d %s handle(s) alive", live[j] - base[j],
                      create_names[j]);
    }
}

GPU_TEST_MAIN(NULL, test_partial_failure)
#else
TEST_MAIN_SKIPPED("built without CUDA")
#endif
