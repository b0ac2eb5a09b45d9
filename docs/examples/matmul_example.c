/*
 * matmul_example.c : plan D = relu(A @ B + bias) once, run it on several inputs.
 *
 *   A: 256 x 128 (M x K), B: 128 x 512 (K x N), bias: 512 (N), D: 256 x 512, all float32.
 *
 * Build against an installed fusemath:  cc matmul_example.c -lfusemath -lm
 */
#include <fusemath/fusemath.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { M = 256, N = 512, K = 128, RUNS = 3 };

/* Print what went wrong and give up: every fusemath call returns an fm_status, and
 * fm_last_error() says why the last one failed. */
#define TRY(call)                                                                                \
    do {                                                                                         \
        fm_status status_ = (call);                                                              \
        if (status_ != FM_OK) {                                                                  \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, fm_status_name(status_), fm_last_error()); \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)

static void fill_random(float *x, size_t n, unsigned *seed)
{
    for (size_t i = 0; i < n; ++i) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = (float)((*seed >> 8) * (2.0 / 16777216.0) - 1.0); /* in [-1, 1) */
    }
}

/* The same computation, the slow obvious way; returns the number of wrong elements. */
static int count_wrong(const float *a, const float *b, const float *bias, const float *d)
{
    int wrong = 0;
    for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
            double sum = bias[j], magnitude = fabs(bias[j]);
            for (int k = 0; k < K; ++k) {
                sum += (double)a[i * K + k] * b[k * N + j];
                magnitude += fabs((double)a[i * K + k] * b[k * N + j]);
            }
            double want = sum > 0 ? sum : 0;
            if (fabs(d[i * N + j] - want) > 4.0 * K * 1.2e-7 * magnitude) ++wrong;
        }
    }
    return wrong;
}

int main(void)
{
    int result = 1;
    fm_context *ctx = NULL;
    fm_plan *plan = NULL;
    float *a = malloc(sizeof(float) * M * K);
    float *b = malloc(sizeof(float) * K * N);
    float *bias = malloc(sizeof(float) * N);
    float *d = malloc(sizeof(float) * M * N);
    if (!a || !b || !bias || !d) {
        fprintf(stderr, "out of memory\n");
        goto done;
    }
    printf("fusemath %s\n", fm_version_string());

    /* 1. A context holds the backends (OpenBLAS on the CPU here) and a plan cache. */
    TRY(fm_context_create(&ctx));

    /* 2. Describe the operands: shape, dtype, device. NULL strides = row-major. */
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    const int64_t shape_a[2] = {M, K}, shape_b[2] = {K, N}, shape_d[2] = {M, N}, shape_bias[1] = {N};
    fm_tensor ta, tb, tbias, td;
    TRY(fm_tensor_init(&ta, a, cpu, FM_F32, 2, shape_a, NULL));
    TRY(fm_tensor_init(&tb, b, cpu, FM_F32, 2, shape_b, NULL));
    TRY(fm_tensor_init(&tbias, bias, cpu, FM_F32, 1, shape_bias, NULL));
    TRY(fm_tensor_init(&td, d, cpu, FM_F32, 2, shape_d, NULL));

    /* 3. Plan once: D = relu(A @ B + bias), fused into one pass over D. */
    fm_matmul_options options;
    fm_matmul_options_init(&options);
    TRY(fm_epilogue_parse("bias+relu", &options.epilogue));
    TRY(fm_matmul_plan(ctx, &ta, &tb, NULL, &tbias, &td, NULL, &options, &plan));
    printf("plan: %s\n", fm_plan_describe(plan));

    /* 4. Execute many times, on new data each time. Pointers go in operand-slot order;
     *    unused slots (C and aux here) are NULL. */
    unsigned seed = 2024;
    for (int run = 0; run < RUNS; ++run) {
        fill_random(a, (size_t)M * K, &seed);
        fill_random(b, (size_t)K * N, &seed);
        fill_random(bias, N, &seed);
        void *ptrs[FM_MATMUL_NSLOTS] = {NULL};
        ptrs[FM_MATMUL_A] = a;
        ptrs[FM_MATMUL_B] = b;
        ptrs[FM_MATMUL_BIAS] = bias;
        ptrs[FM_MATMUL_D] = d;
        TRY(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL));

        int wrong = count_wrong(a, b, bias, d);
        printf("run %d: %d of %d elements wrong\n", run, wrong, M * N);
        if (wrong) goto done;
    }
    printf("OK\n");
    result = 0;

done:
    /* 5. Clean up: both calls accept NULL. */
    fm_plan_release(plan);
    fm_context_destroy(ctx);
    free(a);
    free(b);
    free(bias);
    free(d);
    return result;
}
