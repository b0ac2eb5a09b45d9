/* host_overhead_gpu.c : host time per call of a planned fusemath GPU matmul against
 * the bare cublasLtMatmul call, in one process, on the same buffers and stream,
 * interleaved. No Python: this is the library's own cost.
 *
 * Per case (64x64x64 f32 by default; identity and bias+relu): the enqueue time per
 * call in bursts of 20 calls (the stream is drained between bursts, so the queue
 * never fills and the time is host time), median over 200 bursts for each method.
 * bf16 plans carry a cuBLASLt workspace, so they also pay its lease (f32 ones do not).
 * Prints one JSON object. Usage: host_overhead_gpu [n] [f32|bf16] */
#define _POSIX_C_SOURCE 200809L
#include <fusemath/fusemath.h>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_timing.h"

#define BURST 20
#define BURSTS 200

#define CK(call)                                                                                                      \
    do {                                                                                                              \
        int rc_ = (int)(call);                                                                                        \
        if (rc_ != 0) {                                                                                               \
            fprintf(stderr, "%s:%d: %s failed (%d) %s\n", __FILE__, __LINE__, #call, rc_, fm_last_error());           \
            exit(1);                                                                                                  \
        }                                                                                                             \
    } while (0)

typedef struct bare {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    size_t ws_bytes;
} bare;

/* D^T = B^T A^T column-major, as fusemath does it; bias over N as cuBLASLt's native bias */
static void bare_init(bare *b, int n, int bias_relu, void *bias_ptr, size_t ws_limit, cudaDataType_t t)
{
    CK(cublasLtCreate(&b->lt));
    CK(cublasLtMatmulDescCreate(&b->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (bias_relu) {
        uint32_t e = CUBLASLT_EPILOGUE_RELU_BIAS;
        CK(cublasLtMatmulDescSetAttribute(b->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
        CK(cublasLtMatmulDescSetAttribute(b->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr));
    }
    CK(cublasLtMatrixLayoutCreate(&b->la, t, n, n, n));
    CK(cublasLtMatrixLayoutCreate(&b->lb, t, n, n, n));
    CK(cublasLtMatrixLayoutCreate(&b->ld, t, n, n, n));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_limit, sizeof ws_limit));
    cublasLtMatmulHeuristicResult_t r;
    int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(b->lt, b->desc, b->la, b->lb, b->ld, b->ld, pref, 1, &r, &got));
    if (got < 1) {
        fprintf(stderr, "no cuBLASLt algorithm\n");
        exit(1);
    }
    b->algo = r.algo;
    b->ws_bytes = r.workspaceSize;
    cublasLtMatmulPreferenceDestroy(pref);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 64;
    const int bf16 = argc > 2 && strcmp(argv[2], "bf16") == 0;
    if (n < 1 || fm_cuda_device_count() == 0 || (argc > 2 && !bf16 && strcmp(argv[2], "f32") != 0)) {
        printf("{\"error\": \"no GPU (or bad arguments: [n] [f32|bf16])\"}\n");
        return 2;
    }
    const size_t es = bf16 ? 2 : 4;
    const fm_dtype fdt = bf16 ? FM_BF16 : FM_F32;
    const cudaDataType_t cdt = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    size_t bytes = (size_t)n * n * es;
    unsigned char *h = malloc(bytes);
    for (size_t i = 0; i < (size_t)n * n; i++) {
        float v = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
        uint32_t u;
        memcpy(&u, &v, 4);
        if (bf16) {
            uint16_t hi = (uint16_t)(u >> 16); /* exact: the values have few mantissa bits */
            memcpy(h + i * 2, &hi, 2);
        } else {
            memcpy(h + i * 4, &u, 4);
        }
    }
    void *a, *b, *d, *bias, *ws;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMalloc(&d, bytes));
    CK(cudaMalloc(&bias, n * es));
    size_t ws_limit = (size_t)32 << 20;
    CK(cudaMalloc(&ws, ws_limit));
    CK(cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, h, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(bias, h, n * es, cudaMemcpyHostToDevice));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    fm_context *ctx;
    CK(fm_context_create(&ctx));
    printf("{\"n\": %d, \"dtype\": \"%s\", \"burst\": %d, \"bursts\": %d, \"cases\": [", n, bf16 ? "bf16" : "f32", BURST,
           BURSTS);
    for (int c = 0; c < 2; c++) {
        bare br;
        bare_init(&br, n, c, bias, ws_limit, cdt);
        fm_device cuda = {FM_DEVICE_CUDA, 0};
        int64_t sh[2] = {n, n}, sb[1] = {n};
        fm_tensor ta, tb, td, tbias;
        fm_tensor_init(&ta, a, cuda, fdt, 2, sh, NULL);
        fm_tensor_init(&tb, b, cuda, fdt, 2, sh, NULL);
        fm_tensor_init(&td, d, cuda, fdt, 2, sh, NULL);
        fm_tensor_init(&tbias, bias, cuda, fdt, 1, sb, NULL);
        fm_matmul_options o;
        fm_matmul_options_init(&o);
        o.epilogue = c ? (FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU) : 0;
        fm_plan *plan;
        CK(fm_matmul_plan(ctx, &ta, &tb, NULL, c ? &tbias : NULL, &td, NULL, &o, &plan));
        void *ptrs[FM_MATMUL_NSLOTS] = {a, b, NULL, c ? bias : NULL, d, NULL, NULL, NULL};
        float one = 1, zero = 0;
        double tb_[BURSTS], tf_[BURSTS], ts_[BURSTS];
        for (int warm = 0; warm < 50; warm++) {
            CK(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, s));
            CK(cublasLtMatmul(br.lt, br.desc, &one, b, br.la, a, br.lb, &zero, d, br.ld, d, br.ld, &br.algo, ws,
                              br.ws_bytes, s));
        }
        CK(cudaStreamSynchronize(s));
        for (int k = 0; k < BURSTS; k++) {
            double t0 = now_us();
            for (int i = 0; i < BURST; i++)
                cublasLtMatmul(br.lt, br.desc, &one, b, br.la, a, br.lb, &zero, d, br.ld, d, br.ld, &br.algo, ws,
                               br.ws_bytes, s);
            tb_[k] = (now_us() - t0) / BURST;
            CK(cudaStreamSynchronize(s));
            t0 = now_us();
            for (int i = 0; i < BURST; i++)
                fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, s);
            tf_[k] = (now_us() - t0) / BURST;
            CK(cudaStreamSynchronize(s));
            /* stateless: plan lookup in the cache + execute */
            const fm_tensor *tv[FM_MATMUL_NSLOTS] = {&ta, &tb, NULL, c ? &tbias : NULL, &td, NULL, NULL, NULL};
            t0 = now_us();
            for (int i = 0; i < BURST; i++)
                fm_matmul_v(ctx, tv, &o, s);
            ts_[k] = (now_us() - t0) / BURST;
            CK(cudaStreamSynchronize(s));
        }
        double mb = median_of(tb_, BURSTS), mf = median_of(tf_, BURSTS), ms = median_of(ts_, BURSTS);
        printf("%s\n  {\"epilogue\": \"%s\", \"plan\": \"%s\", \"bare_us\": %.3f, \"planned_execute_us\": %.3f, "
               "\"stateless_us\": %.3f, \"planned_above_bare_us\": %.3f, \"stateless_above_bare_us\": %.3f}",
               c ? "," : "", c ? "bias+relu" : "identity", fm_plan_describe(plan), mb, mf, ms, mf - mb, ms - mb);
        fm_plan_release(plan);
        cublasLtMatmulDescDestroy(br.desc);
        cublasLtMatrixLayoutDestroy(br.la);
        cublasLtMatrixLayoutDestroy(br.lb);
        cublasLtMatrixLayoutDestroy(br.ld);
        cublasLtDestroy(br.lt);
    }
    printf("\n]}\n");
    fm_context_destroy(ctx);
    cudaFree(a), cudaFree(b), cudaFree(d), cudaFree(bias), cudaFree(ws);
    free(h);
    return 0;
}
