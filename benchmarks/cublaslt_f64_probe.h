/* cublaslt_f64_probe.h : what the f64 cuBLASLt probes (cublaslt_f64_candidates.c,
 * cublaslt_f64_epilogues.c) share: random column-major operands on the device (uniform in
 * [-0.5, 0.5), seeded), their layouts, a heuristic preference with a 256 MiB workspace, and the
 * time of one algorithm. No fusemath involved. */
#ifndef FM_CUBLASLT_F64_PROBE_H
#define FM_CUBLASLT_F64_PROBE_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct f64_problem {
    int m, n, k;
    double *A, *B, *C, *bias; /* m x k, k x n, m x n, m */
    void *ws;
    size_t wss;
    cublasLtHandle_t lt;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
} f64_problem;

static void f64_problem_free(f64_problem *p)
{
    cublasLtMatmulPreferenceDestroy(p->pref);
    cublasLtMatrixLayoutDestroy(p->la), cublasLtMatrixLayoutDestroy(p->lb), cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtDestroy(p->lt);
    cudaFree(p->A), cudaFree(p->B), cudaFree(p->C), cudaFree(p->bias), cudaFree(p->ws);
}

/* 0 on success; a message and 1 when memory runs out. bias holds A's first m values. */
static int f64_problem_init(f64_problem *p, int m, int n, int k, long seed)
{
    *p = (f64_problem){.m = m, .n = n, .k = k, .wss = (size_t)256 << 20};
    const size_t na = (size_t)m * k, nb = (size_t)k * n, mx = na > nb ? na : nb;
    double *h = malloc(mx * sizeof *h);
    if (!h || cudaMalloc((void **)&p->A, na * 8) != cudaSuccess || cudaMalloc((void **)&p->B, nb * 8) != cudaSuccess ||
        cudaMalloc((void **)&p->C, (size_t)m * n * 8) != cudaSuccess ||
        cudaMalloc((void **)&p->bias, (size_t)m * 8) != cudaSuccess || cudaMalloc(&p->ws, p->wss) != cudaSuccess) {
        fprintf(stderr, "f64 probe: out of memory for %d x %d x %d\n", m, n, k);
        free(h);
        cudaFree(p->A), cudaFree(p->B), cudaFree(p->C), cudaFree(p->bias), cudaFree(p->ws);
        return 1;
    }
    srand48(seed);
    for (size_t i = 0; i < mx; i++)
        h[i] = drand48() - 0.5;
    cudaMemcpy(p->A, h, na * 8, cudaMemcpyHostToDevice);
    cudaMemcpy(p->bias, h, (size_t)m * 8, cudaMemcpyHostToDevice);
    for (size_t i = 0; i < mx; i++)
        h[i] = drand48() - 0.5;
    cudaMemcpy(p->B, h, nb * 8, cudaMemcpyHostToDevice);
    free(h);
    cublasLtCreate(&p->lt);
    cublasLtMatrixLayoutCreate(&p->la, CUDA_R_64F, m, k, m);
    cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_64F, k, n, k);
    cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_64F, m, n, m);
    cublasLtMatmulPreferenceCreate(&p->pref);
    cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p->wss, sizeof p->wss);
    return 0;
}

/* D = A B (+ d's epilogue) with algo, ms per call over reps after two warm-up calls; -1 when
 * cuBLASLt refuses the call. */
static float f64_time(const f64_problem *p, cublasLtMatmulDesc_t d, const cublasLtMatmulAlgo_t *algo, int reps)
{
    const double one = 1, zero = 0;
    for (int i = 0; i < 2; i++)
        if (cublasLtMatmul(p->lt, d, &one, p->A, p->la, p->B, p->lb, &zero, p->C, p->lc, p->C, p->lc, algo, p->ws, p->wss,
                           0) != CUBLAS_STATUS_SUCCESS)
            return -1;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    cudaEventRecord(e0, 0);
    for (int i = 0; i < reps; i++)
        cublasLtMatmul(p->lt, d, &one, p->A, p->la, p->B, p->lb, &zero, p->C, p->lc, p->C, p->lc, algo, p->ws, p->wss, 0);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ms / (float)reps;
}

#endif
