/* cublaslt_f64_epilogues.c : which cuBLASLt epilogues are slow in f64, with no fusemath involved.
 * For each shape, the plain product (EPILOGUE_DEFAULT) and RELU, BIAS, RELU_BIAS, GELU: every
 * heuristic candidate (up to 16) timed once, the fastest kept, in 3 interleaved rounds (this GPU's
 * f64 clock drifts between rounds, so compare within a round). If RELU alone ran at the plain
 * speed, bias+relu could fold the bias into the product (one more column of K) and keep the
 * activation in the GEMM. One JSON line per (round, epilogue): ms of the fastest candidate, its
 * algorithm id and tile, and how many candidates the heuristic returned.
 *   cublaslt_f64_epilogues        (8192x8192x1024, 16384x4096x512, 1024^3, 8192^3) */
#define _DEFAULT_SOURCE /* srand48, drand48 */
#include <cublasLt.h>
#include <cuda_runtime.h>
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

int main(void)
{
    shape(8192, 8192, 1024, 5);
    shape(16384, 4096, 512, 5);
    shape(1024, 1024, 1024, 50);
    shape(8192, 8192, 8192, 2);
    return 0;
}
