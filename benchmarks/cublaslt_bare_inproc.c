/* cublaslt_bare_inproc.c : the bare cuBLASLt call, loaded into the benchmark's own Python process.
 *
 * cublaslt_bare (the executable) times the bare call in a process of its own, so "fusemath's
 * call minus the bare call" also measures the difference between two processes (which core,
 * which clock, what else runs): 2-4 us of scatter between runs. This module is the same call
 * made from the benchmark's process, on the caller's buffers and stream, so that
 * benchmarks/matmul_gpu.py can time it in the same loop as fusemath, torch and cupy (loaded
 * with ctypes; build/benchmarks/cublaslt_bare_inproc.so).
 *
 * One timed entry point runs many calls, so that ctypes' own cost (~1 us) is paid once per loop,
 * not per call, and the per-call figure is the C call alone:
 *   fm_bare_open(a, b, d, bias, m, n, k, stream, workspace_bytes)  row-major f32 device
 *       buffers; D = A @ B (bias == 0) or relu(A @ B + bias) with cuBLASLt's RELU_BIAS.
 *       Descriptors, layouts and the heuristic's first algorithm are made here, once.
 *       Returns a handle, or NULL with the reason in fm_bare_error().
 *   fm_bare_calls(h, calls)   enqueue `calls` cublasLtMatmul calls on `stream` (no sync);
 *       0, or the failing cublasStatus_t with a line in fm_bare_error()
 *   fm_bare_close(h)          free everything (NULL is fine)
 * Links libcublasLt and libcudart only, the files the library uses. Not thread-safe (one
 * benchmark thread), which is all it is for.
 */
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct bare {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulHeuristicResult_t heur;
    const void *a, *b;
    void *d, *ws;
    size_t ws_bytes;
    cudaStream_t stream;
} bare;

static char g_error[256];

const char *fm_bare_error(void) { return g_error; }

static int lt_failed(const char *what, cublasStatus_t s)
{
    snprintf(g_error, sizeof g_error, "%s failed: cublasStatus %d", what, (int)s);
    return (int)s;
}

#define LT(call)                                                                                                       \
    do {                                                                                                               \
        cublasStatus_t s_ = (call);                                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                               \
            return lt_failed(#call, s_);                                                                               \
    } while (0)

void fm_bare_close(bare *g)
{
    if (!g)
        return;
    if (g->ld) cublasLtMatrixLayoutDestroy(g->ld);
    if (g->lb) cublasLtMatrixLayoutDestroy(g->lb);
    if (g->la) cublasLtMatrixLayoutDestroy(g->la);
    if (g->op) cublasLtMatmulDescDestroy(g->op);
    if (g->lt) cublasLtDestroy(g->lt);
    if (g->ws) cudaFree(g->ws);
    free(g);
}

static int setup(bare *g, uintptr_t bias, int m, int n, int k, size_t workspace_bytes)
{
    if (workspace_bytes) {
        cudaError_t e = cudaMalloc(&g->ws, workspace_bytes);
        if (e != cudaSuccess) {
            snprintf(g_error, sizeof g_error, "cudaMalloc(workspace) failed: %s", cudaGetErrorName(e));
            g->ws = NULL;
            return -(int)e;
        }
    }
    LT(cublasLtCreate(&g->lt));
    LT(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
        const void *bp = (const void *)bias;
        LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
    }
    /* row-major D = A @ B as column-major D^T = B^T A^T: cuBLASLt's A is our B (N x K, ld N) */
    LT(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_32F, (uint64_t)n, (uint64_t)k, (int64_t)n));
    LT(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_32F, (uint64_t)k, (uint64_t)m, (int64_t)k));
    LT(cublasLtMatrixLayoutCreate(&g->ld, CUDA_R_32F, (uint64_t)n, (uint64_t)m, (int64_t)n));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = workspace_bytes;
    cublasStatus_t s =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
    int nres = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(g->lt, g->op, g->la, g->lb, g->ld, g->ld, pref, 1, &g->heur, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS)
        return lt_failed("cublasLtMatmulAlgoGetHeuristic", s);
    if (nres < 1)
        return lt_failed("cublasLtMatmulAlgoGetHeuristic (no algorithm)", CUBLAS_STATUS_NOT_SUPPORTED);
    return 0;
}

bare *fm_bare_open(uintptr_t a, uintptr_t b, uintptr_t d, uintptr_t bias, int m, int n, int k, uintptr_t stream,
                   size_t workspace_bytes)
{
    bare *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(g_error, sizeof g_error, "out of host memory");
        return NULL;
    }
    g->a = (const void *)a;
    g->b = (const void *)b;
    g->d = (void *)d;
    g->stream = (cudaStream_t)stream;
    g->ws_bytes = workspace_bytes;
    if (setup(g, bias, m, n, k, workspace_bytes) != 0) {
        fm_bare_close(g);
        return NULL;
    }
    return g;
}

int fm_bare_calls(bare *g, int calls)
{
    static const float one = 1.0f, zero = 0.0f;
    for (int t = 0; t < calls; t++) {
        cublasStatus_t s = cublasLtMatmul(g->lt, g->op, &one, g->b, g->la, g->a, g->lb, &zero, g->d, g->ld, g->d, g->ld,
                                          &g->heur.algo, g->ws, g->ws_bytes, g->stream);
        if (s != CUBLAS_STATUS_SUCCESS)
            return lt_failed("cublasLtMatmul", s);
    }
    return 0;
}
