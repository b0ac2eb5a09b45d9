/* cublaslt_bare.c : the bare cublasLtMatmul baseline of the GPU host overhead (benchmarks/README.md): descriptors,
 * layouts and the heuristic's first algorithm (32 MiB workspace) made once, D = A @ B row-major as column-major
 * D^T = B^T A^T, RELU_BIAS when a bias is given. Built twice: the executable cublaslt_bare [n calls repeats]
 * (f32 identity and bias+relu, checked, then loops and bursts of 20 timed; one JSON object), and the module
 * cublaslt_bare_inproc.so (FM_BARE_MODULE) with fm_bare_open / fm_bare_calls / fm_bare_close, which
 * matmul_gpu.py times in its own loops (ctypes) and host_overhead_gpu.c includes. cuBLASLt + cudart only. */
#define _POSIX_C_SOURCE 200809L
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int lt_failed(const char *what, int status)
{
    snprintf(g_error, sizeof g_error, "%s failed: status %d", what, status);
    return status ? status : -1;
}

#define LT(call)                                                                                                       \
    do {                                                                                                               \
        cublasStatus_t s_ = (call);                                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                               \
            return lt_failed(#call, (int)s_);                                                                          \
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

static int setup(bare *g, cudaDataType_t ty, const void *bias, int m, int n, int k)
{
    if (g->ws_bytes && cudaMalloc(&g->ws, g->ws_bytes) != cudaSuccess) {
        g->ws = NULL;
        return lt_failed("cudaMalloc(workspace)", -1);
    }
    LT(cublasLtCreate(&g->lt));
    LT(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
        LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    LT(cublasLtMatrixLayoutCreate(&g->la, ty, (uint64_t)n, (uint64_t)k, (int64_t)n));
    LT(cublasLtMatrixLayoutCreate(&g->lb, ty, (uint64_t)k, (uint64_t)m, (int64_t)k));
    LT(cublasLtMatrixLayoutCreate(&g->ld, ty, (uint64_t)n, (uint64_t)m, (int64_t)n));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = g->ws_bytes;
    cublasStatus_t s =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
    int nres = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(g->lt, g->op, g->la, g->lb, g->ld, g->ld, pref, 1, &g->heur, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || nres < 1)
        return lt_failed("cublasLtMatmulAlgoGetHeuristic", s != CUBLAS_STATUS_SUCCESS ? (int)s : -1);
    return 0;
}

static bare *open_bare(cudaDataType_t ty, uintptr_t a, uintptr_t b, uintptr_t d, uintptr_t bias, int m, int n, int k,
                       uintptr_t stream, size_t workspace_bytes)
{
    bare *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(g_error, sizeof g_error, "out of host memory");
        return NULL;
    }
    g->a = (const void *)a, g->b = (const void *)b, g->d = (void *)d;
    g->stream = (cudaStream_t)stream, g->ws_bytes = workspace_bytes;
    if (setup(g, ty, (const void *)bias, m, n, k) != 0) {
        fm_bare_close(g);
        return NULL;
    }
    return g;
}

bare *fm_bare_open(uintptr_t a, uintptr_t b, uintptr_t d, uintptr_t bias, int m, int n, int k, uintptr_t stream,
                   size_t workspace_bytes)
{
    return open_bare(CUDA_R_32F, a, b, d, bias, m, n, k, stream, workspace_bytes);
}

int fm_bare_calls(bare *g, int calls)
{
    static const float one = 1.0f, zero = 0.0f;
    for (int t = 0; t < calls; t++) {
        cublasStatus_t s = cublasLtMatmul(g->lt, g->op, &one, g->b, g->la, g->a, g->lb, &zero, g->d, g->ld, g->d, g->ld,
                                          &g->heur.algo, g->ws, g->ws_bytes, g->stream);
        if (s != CUBLAS_STATUS_SUCCESS)
            return lt_failed("cublasLtMatmul", (int)s);
    }
    return 0;
}

#ifndef FM_BARE_MODULE
#include "bench_timing.h"

#define BURST 20
#define BURSTS 200

static float *upload(size_t cnt, void **dev, unsigned *rng) /* uniform in [-1, 1): never an all-zero product */
{
    float *x = malloc(cnt * 4);
    for (size_t i = 0; i < cnt; i++, *rng = *rng * 1664525u + 1013904223u)
        x[i] = (float)((*rng >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    if (cudaMalloc(dev, cnt * 4) != cudaSuccess || cudaMemcpy(*dev, x, cnt * 4, cudaMemcpyHostToDevice) != cudaSuccess)
        exit(1);
    return x;
}

int main(int argc, char **argv)
{
    int n = (int)arg_long(argc, argv, 1, 64), calls = (int)arg_long(argc, argv, 2, 2000);
    int repeats = (int)arg_long(argc, argv, 3, 5), ndev = 0, ok = 1;
    cudaStream_t s;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) {
        fprintf(stderr, "cublaslt_bare: no CUDA device\n");
        return 1;
    }
    size_t nn = (size_t)n * n;
    unsigned rng = 12345u;
    void *da, *db, *dbias, *dd;
    float *ha = upload(nn, &da, &rng), *hb = upload(nn, &db, &rng), *hbias = upload((size_t)n, &dbias, &rng);
    float *hd = upload(nn, &dd, &rng);
    bare *cases[2];
    double loop[2][64], burst[2][BURSTS], err[2];
    repeats = repeats > 64 ? 64 : repeats;
    for (int c = 0; c < 2; c++) { /* identity, bias+relu */
        cases[c] = open_bare(CUDA_R_32F, (uintptr_t)da, (uintptr_t)db, (uintptr_t)dd, c ? (uintptr_t)dbias : 0, n, n, n,
                             (uintptr_t)s, (size_t)32 << 20);
        if (!cases[c] || fm_bare_calls(cases[c], 1) != 0 || cudaStreamSynchronize(s) != cudaSuccess ||
            cudaMemcpy(hd, dd, nn * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
            fprintf(stderr, "cublaslt_bare: %s\n", fm_bare_error());
            return 1;
        }
        double worst = 0, scale = 1e-30; /* correctness first: never time a wrong answer */
        for (size_t i = 0; i < nn; i++) {
            double ref = c ? hbias[i % n] : 0.0;
            for (int p = 0; p < n; p++)
                ref += (double)ha[i / n * n + p] * hb[(size_t)p * n + i % n];
            ref = c && ref < 0 ? 0 : ref;
            worst = fmax(worst, fabs(hd[i] - ref)), scale = fmax(scale, fabs(ref));
        }
        if (!((err[c] = worst / scale) <= 1e-4)) {
            fprintf(stderr, "cublaslt_bare: WRONG RESULT: max error %g of max |D|\n", err[c]);
            ok = 0;
        }
        fm_bare_calls(cases[c], calls); /* warm-up */
    }
    cudaStreamSynchronize(s);
    for (int r = 0; r < repeats + BURSTS; r++) /* loops (calls, one sync), then bursts (enqueue time) */
        for (int c = 0; c < 2; c++) {
            double t0 = now_us();
            fm_bare_calls(cases[c], r < repeats ? calls : BURST);
            double t1 = now_us();
            cudaStreamSynchronize(s);
            if (r < repeats)
                loop[c][r] = (now_us() - t0) / calls;
            else
                burst[c][r - repeats] = (t1 - t0) / BURST;
        }
    printf("{\"benchmark\": \"cublaslt_bare\", \"n\": %d, \"calls\": %d, \"repeats\": %d, \"burst_calls\": %d, "
           "\"bursts\": %d, \"workspace_bytes\": %d, \"cublasLt_version\": %zu, \"correct\": %s, \"cases\": [",
           n, calls, repeats, BURST, BURSTS, 32 << 20, cublasLtGetVersion(), ok ? "true" : "false");
    for (int c = 0; c < 2; c++) {
        double lmed = median_of(loop[c], repeats), bmed = median_of(burst[c], BURSTS); /* sorted now */
        printf("%s\n {\"dtype\": \"f32\", \"epilogue\": \"%s\", \"max_rel_err\": %.3g, \"loop_us_per_call\": "
               "{\"median\": %.3f, \"min\": %.3f}, \"burst_us_per_call\": {\"median\": %.3f, \"min\": %.3f}}",
               c ? "," : "", c ? "bias_relu" : "none", err[c], lmed, loop[c][0], bmed, burst[c][0]);
        fm_bare_close(cases[c]);
    }
    printf("\n]}\n");
    return ok ? 0 : 1;
}
#endif
