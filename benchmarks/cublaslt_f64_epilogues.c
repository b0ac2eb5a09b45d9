/* cublaslt_f64_epilogues.c : which cuBLASLt epilogues are slow in f64, with no fusemath involved.
 * For each shape, the plain product (EPILOGUE_DEFAULT) and RELU, BIAS, RELU_BIAS, GELU: every
 * heuristic candidate (up to 16) timed once, the fastest kept, in 3 interleaved rounds (this GPU's
 * f64 clock drifts between rounds, so compare within a round). If RELU alone ran at the plain
 * speed, bias+relu could fold the bias into the product (one more column of K) and keep the
 * activation in the GEMM. One JSON line per (round, epilogue): ms of the fastest candidate, its
 * algorithm id and tile, and how many candidates the heuristic returned.
 * Then "forced": the plain product's fastest candidate (algorithm and configuration) handed to
 * cublasLtMatmulAlgoCheck with each epilogue - does the fast kernel take RELU / BIAS although the
 * heuristic does not offer it? - timed next to plain where it does, and its 1024^3 result
 * checked against plain + bias, relu on the host. Also every f64 algorithm id's epilogue mask.
 *   cublaslt_f64_epilogues [forced]   (8192x8192x1024, 16384x4096x512, 1024^3, 8192^3) */
#define _DEFAULT_SOURCE /* srand48, drand48 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static float timeit(cublasLtHandle_t lt, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                    cublasLtMatrixLayout_t lc, const cublasLtMatmulAlgo_t *algo, void *A, void *B, void *C, void *ws,
                    size_t wss, int reps)
{
    double one = 1, zero = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    if (cublasLtMatmul(lt, d, &one, A, la, B, lb, &zero, C, lc, C, lc, algo, ws, wss, 0) != CUBLAS_STATUS_SUCCESS)
        return -1;
    cudaEventRecord(e0, 0);
    for (int i = 0; i < reps; i++)
        cublasLtMatmul(lt, d, &one, A, la, B, lb, &zero, C, lc, C, lc, algo, ws, wss, 0);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ms / reps;
}

static void shape(int m, int n, int k, int reps)
{
    static const struct { cublasLtEpilogue_t e; const char *name; } eps[] = {
        {CUBLASLT_EPILOGUE_DEFAULT, "plain"}, {CUBLASLT_EPILOGUE_RELU, "relu"}, {CUBLASLT_EPILOGUE_BIAS, "bias"},
        {CUBLASLT_EPILOGUE_RELU_BIAS, "relu_bias"}, {CUBLASLT_EPILOGUE_GELU, "gelu"}};
    void *A, *B, *C, *bias, *ws;
    size_t wss = 256u << 20;
    cudaMalloc(&A, (size_t)m * k * 8), cudaMalloc(&B, (size_t)k * n * 8), cudaMalloc(&C, (size_t)m * n * 8);
    cudaMalloc(&bias, (size_t)m * 8), cudaMalloc(&ws, wss);
    size_t na = (size_t)m * k, nb = (size_t)k * n, mx = na > nb ? na : nb;
    double *h = malloc(mx * 8);
    srand48(7);
    for (size_t i = 0; i < mx; i++)
        h[i] = drand48() - 0.5;
    cudaMemcpy(A, h, na * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(bias, h, (size_t)m * 8, cudaMemcpyHostToDevice);
    for (size_t i = 0; i < mx; i++)
        h[i] = drand48() - 0.5;
    cudaMemcpy(B, h, nb * 8, cudaMemcpyHostToDevice);
    free(h);
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_64F, m, k, m);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_64F, k, n, k);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_64F, m, n, m);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wss, sizeof wss);
    for (int round = 0; round < 3; round++)
        for (size_t e = 0; e < sizeof eps / sizeof eps[0]; e++) {
            cublasLtMatmulDesc_t d;
            cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_64F, CUDA_R_64F);
            cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &eps[e].e, sizeof eps[e].e);
            if (eps[e].e == CUBLASLT_EPILOGUE_BIAS || eps[e].e == CUBLASLT_EPILOGUE_RELU_BIAS)
                cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
            cublasLtMatmulHeuristicResult_t res[16];
            int got = 0;
            cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, 16, res, &got);
            float best = -1;
            int bi = -1;
            for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < got; i++) {
                float t = timeit(lt, d, la, lb, lc, &res[i].algo, A, B, C, ws, wss, reps);
                if (t > 0 && (best < 0 || t < best))
                    best = t, bi = i;
            }
            int id = -1, tile = -1;
            size_t w;
            if (bi >= 0) {
                cublasLtMatmulAlgoConfigGetAttribute(&res[bi].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
                cublasLtMatmulAlgoConfigGetAttribute(&res[bi].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
            }
            printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"round\":%d,\"epilogue\":\"%s\",\"status\":%d,\"candidates\":%d,"
                   "\"best_idx\":%d,\"algo\":%d,\"tile\":%d,\"ms\":%.4f}\n", m, n, k, round, eps[e].name, (int)st, got, bi,
                   id, tile, best);
            fflush(stdout);
            cublasLtMatmulDescDestroy(d);
        }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    cublasLtDestroy(lt);
    cudaFree(A), cudaFree(B), cudaFree(C), cudaFree(bias), cudaFree(ws);
}

static void algo_masks(void)
{
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    int ids[128], n = 0;
    cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, 128, ids,
                             &n);
    for (int i = 0; i < n; i++) {
        cublasLtMatmulAlgo_t a;
        uint32_t mask = 0;
        size_t w = 0;
        if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, ids[i],
                                   &a) == CUBLAS_STATUS_SUCCESS)
            cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_EPILOGUE_MASK, &mask, sizeof mask, &w);
        printf("{\"algo\":%d,\"epilogue_mask\":\"0x%x\"}\n", ids[i], mask);
    }
    cublasLtDestroy(lt);
}

/* The plain product's fastest candidate forced onto each epilogue. */
static void forced(int m, int n, int k, int reps)
{
    static const struct { cublasLtEpilogue_t e; const char *name; } eps[] = {
        {CUBLASLT_EPILOGUE_DEFAULT, "plain"}, {CUBLASLT_EPILOGUE_RELU, "relu"}, {CUBLASLT_EPILOGUE_BIAS, "bias"},
        {CUBLASLT_EPILOGUE_RELU_BIAS, "relu_bias"}, {CUBLASLT_EPILOGUE_GELU_BIAS, "gelu_bias"}};
    double *A, *B, *C, *bias, *ws;
    size_t wss = 256u << 20;
    cudaMalloc((void **)&A, (size_t)m * k * 8), cudaMalloc((void **)&B, (size_t)k * n * 8);
    cudaMalloc((void **)&C, (size_t)m * n * 8), cudaMalloc((void **)&bias, (size_t)m * 8);
    cudaMalloc((void **)&ws, wss);
    size_t na = (size_t)m * k, nb = (size_t)k * n, mx = na > nb ? na : nb;
    double *h = malloc(mx * 8);
    srand48(11);
    for (size_t i = 0; i < mx; i++)
        h[i] = drand48() - 0.5;
    cudaMemcpy(A, h, na * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(bias, h, (size_t)m * 8, cudaMemcpyHostToDevice);
    for (size_t i = 0; i < mx; i++)
        h[i] = drand48() - 0.5;
    cudaMemcpy(B, h, nb * 8, cudaMemcpyHostToDevice);
    free(h);
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_64F, m, k, m);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_64F, k, n, k);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_64F, m, n, m);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wss, sizeof wss);
    cublasLtMatmulDesc_t d[5];
    for (int e = 0; e < 5; e++) {
        cublasLtMatmulDescCreate(&d[e], CUBLAS_COMPUTE_64F, CUDA_R_64F);
        cublasLtMatmulDescSetAttribute(d[e], CUBLASLT_MATMUL_DESC_EPILOGUE, &eps[e].e, sizeof eps[e].e);
        if (e >= 2)
            cublasLtMatmulDescSetAttribute(d[e], CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    cublasLtMatmulHeuristicResult_t res[16];
    int got = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, d[0], la, lb, lc, lc, pref, 16, res, &got);
    int best = -1;
    float bt = 0;
    for (int i = 0; i < got; i++) {
        float t = timeit(lt, d[0], la, lb, lc, &res[i].algo, A, B, C, ws, wss, reps);
        if (t > 0 && (best < 0 || t < bt))
            best = i, bt = t;
    }
    if (best < 0) {
        printf("{\"m\":%d,\"forced\":\"no plain candidate\"}\n", m);
        return;
    }
    const cublasLtMatmulAlgo_t *algo = &res[best].algo;
    int id = -1;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    int ok[5];
    for (int e = 0; e < 5; e++) {
        cublasLtMatmulHeuristicResult_t r;
        cublasStatus_t st = cublasLtMatmulAlgoCheck(lt, d[e], la, lb, lc, lc, algo, &r);
        ok[e] = st == CUBLAS_STATUS_SUCCESS;
        printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"forced_algo\":%d,\"epilogue\":\"%s\",\"check_status\":%d}\n", m, n, k,
               id, eps[e].name, (int)st);
    }
    for (int round = 0; round < 3; round++)
        for (int e = 0; e < 5; e++)
            if (ok[e])
                printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"round\":%d,\"forced_algo\":%d,\"epilogue\":\"%s\",\"ms\":%.4f}\n",
                       m, n, k, round, id, eps[e].name, timeit(lt, d[e], la, lb, lc, algo, A, B, C, ws, wss, reps));
    if (m == 1024 && ok[0] && ok[3]) { /* relu_bias against plain + bias, relu on the host */
        double one = 1, zero = 0, *P = malloc((size_t)m * n * 8), *F = malloc((size_t)m * n * 8), *hb = malloc((size_t)m * 8);
        cublasLtMatmul(lt, d[0], &one, A, la, B, lb, &zero, C, lc, C, lc, algo, ws, wss, 0);
        cudaMemcpy(P, C, (size_t)m * n * 8, cudaMemcpyDeviceToHost);
        cublasLtMatmul(lt, d[3], &one, A, la, B, lb, &zero, C, lc, C, lc, algo, ws, wss, 0);
        cudaMemcpy(F, C, (size_t)m * n * 8, cudaMemcpyDeviceToHost);
        cudaMemcpy(hb, bias, (size_t)m * 8, cudaMemcpyDeviceToHost);
        double err = 0;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double v = P[(size_t)j * m + i] + hb[i], want = v > 0 ? v : 0, dif = F[(size_t)j * m + i] - want;
                if (dif < 0)
                    dif = -dif;
                if (dif > err)
                    err = dif;
            }
        printf("{\"m\":%d,\"forced_algo\":%d,\"relu_bias_max_abs_err_vs_plain\":%.3e}\n", m, id, err);
        free(P), free(F), free(hb);
    }
    for (int e = 0; e < 5; e++)
        cublasLtMatmulDescDestroy(d[e]);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    cublasLtDestroy(lt);
    cudaFree(A), cudaFree(B), cudaFree(C), cudaFree(bias), cudaFree(ws);
}

int main(int argc, char **argv)
{
    if (argc > 1 && argv[1][0] == 'f') {
        algo_masks();
        forced(1024, 1024, 1024, 50);
        forced(8192, 8192, 1024, 5);
        forced(16384, 4096, 512, 5);
        return 0;
    }
    shape(8192, 8192, 1024, 5);
    shape(16384, 4096, 512, 5);
    shape(1024, 1024, 1024, 50);
    shape(8192, 8192, 8192, 2);
    return 0;
}
