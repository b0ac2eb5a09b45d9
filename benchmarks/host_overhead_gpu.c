/* host_overhead_gpu.c : the library's own host cost per GPU matmul call, in C: planned fm_plan_execute and stateless
 * fm_matmul_v next to cublaslt_bare.c's bare call, same buffers and stream, identity and bias+relu, n x n x n f32
 * or bf16; enqueue time per call in bursts of 20, median of 200. Usage: host_overhead_gpu [n (64)] [f32|bf16] */
#define FM_BARE_MODULE
#include "cublaslt_bare.c"

#include <fusemath/fusemath.h>

#define BENCH_DETAIL fm_last_error()
#include "bench_timing.h"

#define BURST 20
#define BURSTS 200

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 64, ndev = 0;
    const int bf16 = argc > 2 && strcmp(argv[2], "bf16") == 0;
    if (n < 1 || cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 || (argc > 2 && !bf16 && strcmp(argv[2], "f32"))) {
        printf("{\"error\": \"no GPU (or bad arguments: [n] [f32|bf16])\"}\n");
        return 2;
    }
    const size_t es = bf16 ? 2 : 4, bytes = (size_t)n * n * es;
    unsigned char *h = malloc(bytes);
    for (size_t i = 0; i < (size_t)n * n; i++) {
        float v = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
        uint32_t u;
        memcpy(&u, &v, 4);
        uint16_t hi = (uint16_t)(u >> 16); /* exact in bf16: the values have few mantissa bits */
        memcpy(h + i * es, bf16 ? (void *)&hi : (void *)&u, es);
    }
    void *a, *b, *d, *bias;
    BENCH_CHECK(cudaMalloc(&a, bytes));
    BENCH_CHECK(cudaMalloc(&b, bytes));
    BENCH_CHECK(cudaMalloc(&d, bytes));
    BENCH_CHECK(cudaMalloc(&bias, n * es));
    BENCH_CHECK(cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice));
    BENCH_CHECK(cudaMemcpy(b, h, bytes, cudaMemcpyHostToDevice));
    BENCH_CHECK(cudaMemcpy(bias, h, n * es, cudaMemcpyHostToDevice));
    cudaStream_t s;
    BENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    fm_context *ctx;
    BENCH_CHECK(fm_context_create(&ctx));
    printf("{\"n\": %d, \"dtype\": \"%s\", \"burst\": %d, \"bursts\": %d, \"cases\": [", n, bf16 ? "bf16" : "f32", BURST,
           BURSTS);
    for (int c = 0; c < 2; c++) { /* identity, bias+relu */
        bare *br = open_bare(bf16 ? CUDA_R_16BF : CUDA_R_32F, (uintptr_t)a, (uintptr_t)b, (uintptr_t)d,
                             c ? (uintptr_t)bias : 0, n, n, n, (uintptr_t)s, (size_t)32 << 20);
        if (!br) {
            fprintf(stderr, "host_overhead_gpu: %s\n", fm_bare_error());
            return 1;
        }
        fm_device cuda = {FM_DEVICE_CUDA, 0};
        int64_t sh[2] = {n, n}, sb[1] = {n};
        fm_tensor ta, tb, td, tbias;
        fm_dtype fdt = bf16 ? FM_BF16 : FM_F32;
        BENCH_CHECK(fm_tensor_init(&ta, a, cuda, fdt, 2, sh, NULL));
        BENCH_CHECK(fm_tensor_init(&tb, b, cuda, fdt, 2, sh, NULL));
        BENCH_CHECK(fm_tensor_init(&td, d, cuda, fdt, 2, sh, NULL));
        BENCH_CHECK(fm_tensor_init(&tbias, bias, cuda, fdt, 1, sb, NULL));
        fm_matmul_options o;
        fm_matmul_options_init(&o);
        o.epilogue = c ? (FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU) : 0;
        fm_plan *plan;
        BENCH_CHECK(fm_matmul_plan(ctx, &ta, &tb, NULL, c ? &tbias : NULL, &td, NULL, &o, &plan));
        void *ptrs[FM_MATMUL_NSLOTS] = {a, b, NULL, c ? bias : NULL, d, NULL, NULL, NULL};
        const fm_tensor *tv[FM_MATMUL_NSLOTS] = {&ta, &tb, NULL, c ? &tbias : NULL, &td, NULL, NULL, NULL};
        double t[3][BURSTS];
        for (int warm = 0; warm < 50; warm++) {
            BENCH_CHECK(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, s));
            BENCH_CHECK(fm_bare_calls(br, 1));
        }
        BENCH_CHECK(cudaStreamSynchronize(s));
        for (int k = 0; k < BURSTS; k++)
            for (int m = 0; m < 3; m++) { /* bare, planned, stateless (plan from the context's cache) */
                double t0 = now_us();
                for (int i = 0; i < BURST; i++)
                    m == 0 ? fm_bare_calls(br, 1) : m == 1 ? (int)fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, s)
                                                           : (int)fm_matmul_v(ctx, tv, &o, s);
                t[m][k] = (now_us() - t0) / BURST;
                BENCH_CHECK(cudaStreamSynchronize(s));
            }
        double mb = median_of(t[0], BURSTS), mf = median_of(t[1], BURSTS), ms = median_of(t[2], BURSTS);
        printf("%s\n  {\"epilogue\": \"%s\", \"plan\": \"%s\", \"bare_us\": %.3f, \"planned_execute_us\": %.3f, "
               "\"stateless_us\": %.3f, \"planned_above_bare_us\": %.3f, \"stateless_above_bare_us\": %.3f}",
               c ? "," : "", c ? "bias+relu" : "identity", fm_plan_describe(plan), mb, mf, ms, mf - mb, ms - mb);
        fm_plan_release(plan);
        fm_bare_close(br);
    }
    printf("\n]}\n");
    fm_context_destroy(ctx);
    return 0;
}
