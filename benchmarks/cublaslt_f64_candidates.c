/* cublaslt_f64_candidates.c : f64 GEMMs on random operands, cublasDgemm (what torch's a @ b
 * calls) against cuBLASLt's heuristic candidates (up to 64; fusemath's plans take cuBLASLt's),
 * with no fusemath involved: 3 interleaved rounds of cublasDgemm and the first 6 candidates,
 * then every candidate once with its algorithm id, tile, stages and split-k. Tells whether a
 * gap between fusemath's f64 matmul and torch's is the algorithm choice. One JSON line per
 * timing (ms per call, CUDA events, mean over the repetitions).
 *   cublaslt_f64_candidates        (8192^3, 8192x8192x1024, 16384x4096x512, 1024^3) */
#define _DEFAULT_SOURCE /* srand48, drand48 */
#include <cublas_v2.h>

#include "cublaslt_f64_probe.h"

static void shape(int m, int n, int k, int reps)
{
    f64_problem pb;
    if (f64_problem_init(&pb, m, n, k, 7))
        return;
    double *A = pb.A, *B = pb.B, *C = pb.C;
    cublasHandle_t h;
    cublasCreate(&h);
    cublasSetWorkspace(h, pb.ws, pb.wss);
    double one = 1, zero = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    for (int i = 0; i < 2; i++)
        cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A, m, B, k, &zero, C, m);
    cudaEventRecord(e0, 0);
    for (int i = 0; i < reps; i++)
        cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A, m, B, k, &zero, C, m);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"form\":\"cublasDgemm\",\"ms\":%.4f}\n", m, n, k, ms / reps);
    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_64F, CUDA_R_64F);
    cublasLtMatmulHeuristicResult_t res[64];
    int got = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(pb.lt, d, pb.la, pb.lb, pb.lc, pb.lc, pb.pref, 64, res, &got);
    printf("{\"heuristic_status\":%d,\"returned\":%d}\n", (int)st, got);
    int top = got < 6 ? got : 6;
    for (int round = 0; round < 3; round++) {
        cudaEventRecord(e0, 0);
        for (int i = 0; i < reps; i++)
            cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A, m, B, k, &zero, C, m);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"round\":%d,\"form\":\"dgemm\",\"ms\":%.4f}\n", m, n, k, round, ms / reps);
        for (int i = 0; i < top; i++)
            printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"round\":%d,\"form\":\"lt\",\"idx\":%d,\"ms\":%.4f}\n", m, n, k, round, i,
                   f64_time(&pb, d, &res[i].algo, reps));
    }
    for (int i = 0; i < got; i++) {
        int tile = -1, stages = -1, id = -1, splitk = -1;
        size_t w;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
        float t = f64_time(&pb, d, &res[i].algo, reps);
        printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"form\":\"lt\",\"idx\":%d,\"algo\":%d,\"tile\":%d,\"stages\":%d,\"splitk\":%d,"
               "\"ws\":%zu,\"ms\":%.4f}\n", m, n, k, i, id, tile, stages, splitk, res[i].workspaceSize, t);
    }
    cublasLtMatmulDescDestroy(d);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cublasDestroy(h);
    f64_problem_free(&pb);
}

int main(void)
{
    shape(8192, 8192, 8192, 5);
    shape(8192, 8192, 1024, 20);
    shape(16384, 4096, 512, 20);
    shape(1024, 1024, 1024, 200);
    return 0;
}
