/* cublaslt_bare.c : the bare cuBLASLt baseline of fusemath's GPU host overhead, what a C programmer
 * who knows cuBLASLt writes: descriptors, layouts and the heuristic's first algorithm (32 MiB
 * workspace) made once; the timed part is cublasLtMatmul alone, on one non-blocking stream, into
 * the same output. Row-major D = A @ B as column-major D^T = B^T A^T (cuBLASLt's A is our B), with
 * RELU_BIAS when a bias is given (its per-row bias of D^T is our per-column bias); compute 32F.
 * Two builds of this file (benchmarks/CMakeLists.txt):
 *   cublaslt_bare [n (64)] [calls (2000)] [repeats (5)]   the executable: f32 and bf16, identity and
 *       bias+relu on n x n x n, each checked against a CPU reference, then timed, the cases
 *       interleaved: loops of `calls` back-to-back calls and one sync (median / min over repeats),
 *       and bursts of 20 calls with an untimed sync between (enqueue time per call, median over 200).
 *       Prints one JSON object; exit 1 on a failing call or a wrong result.
 *   cublaslt_bare_inproc.so (FM_BARE_MODULE)   the same call in the benchmark's own process, loaded
 *       by matmul_gpu.py with ctypes and timed in its loops (a baseline timed in another process
 *       moved 0-2.8 us against this one). One ctypes call runs a whole loop:
 *         fm_bare_open(a, b, d, bias, m, n, k, stream, workspace_bytes)  f32 device buffers (bias 0:
 *             none) -> handle, or NULL with the reason in fm_bare_error()
 *         fm_bare_calls(h, calls) -> 0, or the failing cublasStatus_t;  fm_bare_close(h)
 * Links libcublasLt and libcudart only (never libcuda: the runtime finds the driver). */
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
#define CU(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "cublaslt_bare: %s failed (line %d): %s\n", #call, __LINE__, cudaGetErrorString(e_));      \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static float bf16_round(float f, uint16_t *bits) /* round to nearest even (finite data) */
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    *bits = (uint16_t)(u >> 16);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* device copy of x[0..cnt) as f32 or bf16 (x itself rounded to what the GPU sees) */
static void *upload(float *x, size_t cnt, int bf16, unsigned *rng)
{
    uint16_t *h16 = malloc(cnt * 2);
    void *dev;
    for (size_t i = 0; i < cnt; i++) {
        *rng = *rng * 1664525u + 1013904223u; /* uniform in [-1, 1): never an all-zero product */
        x[i] = (float)((*rng >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
        if (bf16)
            x[i] = bf16_round(x[i], &h16[i]);
    }
    CU(cudaMalloc(&dev, cnt * (bf16 ? 2 : 4)));
    CU(cudaMemcpy(dev, bf16 ? (void *)h16 : (void *)x, cnt * (bf16 ? 2 : 4), cudaMemcpyHostToDevice));
    free(h16);
    return dev;
}

int main(int argc, char **argv)
{
    int n = (int)arg_long(argc, argv, 1, 64), calls = (int)arg_long(argc, argv, 2, 2000);
    int repeats = (int)arg_long(argc, argv, 3, 5), ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        fprintf(stderr, "cublaslt_bare: no CUDA device\n");
        return 1;
    }
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    size_t nn = (size_t)n * n;
    float *ha = malloc(nn * 4), *hb = malloc(nn * 4), *hbias = malloc((size_t)n * 4), *hd = malloc(nn * 4);
    uint16_t *h16 = malloc(nn * 2);
    bare *cases[4];
    double loop[4][64], burst[4][BURSTS], err[4];
    unsigned rng = 12345u;
    int ok = 1;
    if (repeats > 64)
        repeats = 64;
    for (int c = 0; c < 4; c++) { /* c: bit 0 bias+relu, bit 1 bf16 */
        int bf16 = c >> 1, br = c & 1;
        void *da = upload(ha, nn, bf16, &rng), *db = upload(hb, nn, bf16, &rng), *dd;
        void *dbias = upload(hbias, (size_t)n, bf16, &rng);
        CU(cudaMalloc(&dd, nn * (bf16 ? 2 : 4)));
        cases[c] = open_bare(bf16 ? CUDA_R_16BF : CUDA_R_32F, (uintptr_t)da, (uintptr_t)db, (uintptr_t)dd,
                             br ? (uintptr_t)dbias : 0, n, n, n, (uintptr_t)s, (size_t)32 << 20);
        if (!cases[c] || fm_bare_calls(cases[c], 1) != 0) {
            fprintf(stderr, "cublaslt_bare: %s\n", fm_bare_error());
            return 1;
        }
        CU(cudaStreamSynchronize(s));
        CU(cudaMemcpy(bf16 ? (void *)h16 : (void *)hd, dd, nn * (bf16 ? 2 : 4), cudaMemcpyDeviceToHost));
        double worst = 0, scale = 1e-30;
        for (size_t i = 0; i < nn; i++) {
            double ref = hbias[i % n] * br;
            for (int p = 0; p < n; p++)
                ref += (double)ha[i / n * n + p] * hb[(size_t)p * n + i % n];
            ref = br && ref < 0 ? 0 : ref;
            float got = hd[i];
            if (bf16) {
                uint32_t u = (uint32_t)h16[i] << 16;
                memcpy(&got, &u, 4);
            }
            worst = fmax(worst, fabs(got - ref)), scale = fmax(scale, fabs(ref));
        }
        err[c] = worst / scale;
        if (!(err[c] <= (bf16 ? 2e-2 : 1e-4))) {
            fprintf(stderr, "cublaslt_bare: WRONG RESULT (case %d): max error %g of max |D|\n", c, err[c]);
            ok = 0;
        }
        fm_bare_calls(cases[c], calls); /* warm-up */
    }
    CU(cudaStreamSynchronize(s));
    for (int r = 0; r < repeats; r++)
        for (int c = 0; c < 4; c++) {
            double t0 = now_us();
            fm_bare_calls(cases[c], calls);
            CU(cudaStreamSynchronize(s));
            loop[c][r] = (now_us() - t0) / calls;
        }
    for (int r = 0; r < BURSTS; r++)
        for (int c = 0; c < 4; c++) {
            double t0 = now_us();
            fm_bare_calls(cases[c], BURST);
            burst[c][r] = (now_us() - t0) / BURST;
            CU(cudaStreamSynchronize(s));
        }
    printf("{\"benchmark\": \"cublaslt_bare\", \"n\": %d, \"calls\": %d, \"repeats\": %d, \"burst_calls\": %d, "
           "\"bursts\": %d, \"workspace_bytes\": %d, \"cublasLt_version\": %zu, \"correct\": %s, \"cases\": [",
           n, calls, repeats, BURST, BURSTS, 32 << 20, cublasLtGetVersion(), ok ? "true" : "false");
    for (int c = 0; c < 4; c++) {
        double lmed = median_of(loop[c], repeats), bmed = median_of(burst[c], BURSTS); /* sorted now */
        printf("%s\n {\"dtype\": \"%s\", \"epilogue\": \"%s\", \"max_rel_err\": %.3g, \"loop_us_per_call\": "
               "{\"median\": %.3f, \"min\": %.3f}, \"burst_us_per_call\": {\"median\": %.3f, \"min\": %.3f}}",
               c ? "," : "", c >> 1 ? "bf16" : "f32", c & 1 ? "bias_relu" : "none", err[c], lmed, loop[c][0], bmed,
               burst[c][0]);
        fm_bare_close(cases[c]);
    }
    printf("\n]}\n");
    return ok ? 0 : 1;
}
#endif
