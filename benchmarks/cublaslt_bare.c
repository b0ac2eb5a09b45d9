/* cublaslt_bare.c : the bare cuBLASLt baseline for fusemath's GPU host overhead.
 *
 * What a C programmer who knows cuBLASLt writes by hand: descriptors, layouts and
 * the algorithm (one cublasLtMatmulAlgoGetHeuristic call) are made once, beforehand;
 * the timed part is cublasLtMatmul alone, on one non-blocking stream, into the same
 * output every call. D = A @ B (row-major, M x N x K, 64x64x64 by default), optionally
 * with the fused bias + relu epilogue (bias of length N, added to every row), for f32
 * (compute 32F) and bf16 (compute 32F, bf16 in/out).
 *
 * Row-major D = A @ B is computed as the column-major D^T = B^T A^T (cuBLASLt's "A" is
 * our B, its "B" our A), so the epilogue's per-row bias of D^T is our per-column bias.
 *
 * Per case it measures host time per call:
 *   loop   wall clock around `calls` (2000) back-to-back cublasLtMatmul calls, then one
 *          cudaStreamSynchronize: issue_us = time to enqueue / calls, us = time until
 *          the stream is drained / calls; `repeats` times, median and min;
 *   burst  bursts of `burst_calls` (20) calls with a sync between bursts (not timed):
 *          per-call enqueue time of each burst, median and min over `bursts` bursts;
 *   events device time per call (cudaEvents around one loop), for reference.
 * The cases are interleaved repeat by repeat so that slow drift hits all alike. Every
 * result is checked against a CPU reference before it is timed.
 *
 * Prints one JSON object on stdout. Errors (no device, a failing call) go to stderr,
 * exit status 1; a wrong result: JSON with "correct": false, exit status 1.
 * Usage: cublaslt_bare [--m M] [--n N] [--k K] [--calls C] [--repeats R] [--bursts B]
 *                      [--burst-calls BC] [--dtype f32|bf16|all] [--epilogue none|bias_relu|all]
 *                      [--workspace-mib W]
 * Links libcublasLt and libcudart only (never libcuda: the runtime finds the driver).
 */
#define _POSIX_C_SOURCE 200809L
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_timing.h"

#define MAX_CASES 4

typedef struct args {
    int m, n, k, calls, repeats, bursts, burst_calls, workspace_mib;
    int want_f32, want_bf16, want_none, want_bias_relu;
} args;

typedef struct bcase {
    const char *dtype;    /* "f32" | "bf16" */
    const char *epilogue; /* "none" | "bias_relu" */
    int bf16, bias_relu;
    size_t elem;
    void *a, *b, *bias, *d;                    /* device */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;         /* cuBLASLt's A (= our B), B (= our A), C = D */
    cublasLtMatmulHeuristicResult_t heur;
    double max_rel_err;
    int correct;
    double *loop_us, *loop_issue_us, *burst_us; /* per repeat / per burst */
    double event_us;
} bcase;

static void die_cuda(const char *what, cudaError_t e, int line)
{
    fprintf(stderr, "cublaslt_bare: %s failed (line %d): %s: %s\n", what, line, cudaGetErrorName(e),
            cudaGetErrorString(e));
    exit(1);
}

static void die_lt(const char *what, cublasStatus_t s, int line)
{
    fprintf(stderr, "cublaslt_bare: %s failed (line %d): cublasStatus %d\n", what, line, (int)s);
    exit(1);
}

#define CU(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            die_cuda(#call, e_, __LINE__);                                                                             \
    } while (0)
#define LT(call)                                                                                                       \
    do {                                                                                                               \
        cublasStatus_t s_ = (call);                                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                               \
            die_lt(#call, s_, __LINE__);                                                                               \
    } while (0)

static double min_of(const double *x, int n)
{
    double v = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] < v)
            v = x[i];
    return v;
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "cublaslt_bare: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* float <-> bf16 (round to nearest even; NaN stays NaN). */
static uint16_t f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Uniform in [-1, 1): random data, never zeros (an all-zero product is not timed). */
static void fill(float *x, size_t n, unsigned *state)
{
    for (size_t i = 0; i < n; i++) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = (float)((*state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    }
}

static int parse_int(const char *flag, const char *val, int lo)
{
    char *end = NULL;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || *end != '\0' || v < lo || v > 100000000L) {
        fprintf(stderr, "cublaslt_bare: %s needs an integer >= %d\n", flag, lo);
        exit(2);
    }
    return (int)v;
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--m M] [--n N] [--k K] [--calls C] [--repeats R] [--bursts B] [--burst-calls BC]\n"
            "          [--dtype f32|bf16|all] [--epilogue none|bias_relu|all] [--workspace-mib W]\n",
            prog);
}

static void enqueue(cublasLtHandle_t lt, bcase *c, void *ws, size_t ws_bytes, cudaStream_t s)
{
    static const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasLtMatmul(lt, c->op, &one, c->b, c->la, c->a, c->lb, &zero, c->d, c->ld, c->d, c->ld,
                                       &c->heur.algo, ws, ws_bytes, s);
    if (st != CUBLAS_STATUS_SUCCESS)
        die_lt("cublasLtMatmul", st, __LINE__);
}

int main(int argc, char **argv)
{
    args g = {64, 64, 64, 2000, 5, 200, 20, 32, 1, 1, 1, 1};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--m")) g.m = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--n")) g.n = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--k")) g.k = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--calls")) g.calls = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--repeats")) g.repeats = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--bursts")) g.bursts = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--burst-calls")) g.burst_calls = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--workspace-mib")) g.workspace_mib = parse_int(f, v, 0), i++;
        else if (!strcmp(f, "--dtype") && v) {
            g.want_f32 = !strcmp(v, "f32") || !strcmp(v, "all");
            g.want_bf16 = !strcmp(v, "bf16") || !strcmp(v, "all");
            if (!g.want_f32 && !g.want_bf16) {
                usage(argv[0]);
                return 2;
            }
            i++;
        } else if (!strcmp(f, "--epilogue") && v) {
            g.want_none = !strcmp(v, "none") || !strcmp(v, "all");
            g.want_bias_relu = !strcmp(v, "bias_relu") || !strcmp(v, "all");
            if (!g.want_none && !g.want_bias_relu) {
                usage(argv[0]);
                return 2;
            }
            i++;
        } else {
            usage(argv[0]);
            return 2;
        }
    }

    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        fprintf(stderr, "cublaslt_bare: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
        return 1;
    }
    CU(cudaSetDevice(0));
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    int rt_ver = 0, drv_ver = 0;
    CU(cudaRuntimeGetVersion(&rt_ver));
    CU(cudaDriverGetVersion(&drv_ver));

    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasLtHandle_t lt;
    LT(cublasLtCreate(&lt));
    size_t ws_bytes = (size_t)g.workspace_mib << 20;
    void *ws = NULL;
    if (ws_bytes)
        CU(cudaMalloc(&ws, ws_bytes));
    cudaEvent_t ev0, ev1;
    CU(cudaEventCreate(&ev0));
    CU(cudaEventCreate(&ev1));

    const int m = g.m, n = g.n, k = g.k;
    const size_t na = (size_t)m * k, nb = (size_t)k * n, nd = (size_t)m * n;
    float *ha = xmalloc(na * sizeof(float)), *hb = xmalloc(nb * sizeof(float));
    float *hbias = xmalloc((size_t)n * sizeof(float)), *hd = xmalloc(nd * sizeof(float));
    uint16_t *h16 = xmalloc((na > nb ? (na > nd ? na : nd) : (nb > nd ? nb : nd)) * sizeof(uint16_t));
    double *ref = xmalloc(nd * sizeof(double));
    unsigned rng = 12345u;

    bcase cases[MAX_CASES];
    int nc = 0;
    memset(cases, 0, sizeof cases);
    for (int dt = 0; dt < 2; dt++) {
        if ((dt == 0 && !g.want_f32) || (dt == 1 && !g.want_bf16))
            continue;
        for (int ep = 0; ep < 2; ep++) {
            if ((ep == 0 && !g.want_none) || (ep == 1 && !g.want_bias_relu))
                continue;
            bcase *c = &cases[nc++];
            c->bf16 = dt;
            c->bias_relu = ep;
            c->dtype = dt ? "bf16" : "f32";
            c->epilogue = ep ? "bias_relu" : "none";
            c->elem = dt ? 2 : 4;
        }
    }

    for (int ci = 0; ci < nc; ci++) {
        bcase *c = &cases[ci];
        fill(ha, na, &rng);
        fill(hb, nb, &rng);
        fill(hbias, (size_t)n, &rng);
        if (c->bf16) { /* round the inputs to bf16 so that the reference sees what the GPU sees */
            for (size_t i = 0; i < na; i++) ha[i] = bf2f(f2bf(ha[i]));
            for (size_t i = 0; i < nb; i++) hb[i] = bf2f(f2bf(hb[i]));
            for (int j = 0; j < n; j++) hbias[j] = bf2f(f2bf(hbias[j]));
        }
        CU(cudaMalloc(&c->a, na * c->elem));
        CU(cudaMalloc(&c->b, nb * c->elem));
        CU(cudaMalloc(&c->bias, (size_t)n * c->elem));
        CU(cudaMalloc(&c->d, nd * c->elem));
        const float *srcs[3] = {ha, hb, hbias};
        void *dsts[3] = {c->a, c->b, c->bias};
        size_t cnt[3] = {na, nb, (size_t)n};
        for (int t = 0; t < 3; t++) {
            if (c->bf16) {
                for (size_t i = 0; i < cnt[t]; i++)
                    h16[i] = f2bf(srcs[t][i]);
                CU(cudaMemcpy(dsts[t], h16, cnt[t] * 2, cudaMemcpyHostToDevice));
            } else {
                CU(cudaMemcpy(dsts[t], srcs[t], cnt[t] * 4, cudaMemcpyHostToDevice));
            }
        }
        CU(cudaMemset(c->d, 0, nd * c->elem));

        cudaDataType_t ty = c->bf16 ? CUDA_R_16BF : CUDA_R_32F;
        LT(cublasLtMatmulDescCreate(&c->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t nt = CUBLAS_OP_N;
        LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSA, &nt, sizeof nt));
        LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt));
        if (c->bias_relu) {
            cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_RELU_BIAS;
            LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
            LT(cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c->bias, sizeof c->bias));
        }
        /* column-major: cuBLASLt A = our B (N x K, ld N), B = our A (K x M, ld K), D = N x M (ld N) */
        LT(cublasLtMatrixLayoutCreate(&c->la, ty, (uint64_t)n, (uint64_t)k, (int64_t)n));
        LT(cublasLtMatrixLayoutCreate(&c->lb, ty, (uint64_t)k, (uint64_t)m, (int64_t)k));
        LT(cublasLtMatrixLayoutCreate(&c->ld, ty, (uint64_t)n, (uint64_t)m, (int64_t)n));
        cublasLtMatmulPreference_t pref;
        LT(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t wsb = ws_bytes;
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
        int nres = 0;
        LT(cublasLtMatmulAlgoGetHeuristic(lt, c->op, c->la, c->lb, c->ld, c->ld, pref, 1, &c->heur, &nres));
        LT(cublasLtMatmulPreferenceDestroy(pref));
        if (nres < 1) {
            fprintf(stderr, "cublaslt_bare: no algorithm for %s %s\n", c->dtype, c->epilogue);
            return 1;
        }

        /* Correctness first: never time a wrong answer. */
        enqueue(lt, c, ws, ws_bytes, stream);
        CU(cudaStreamSynchronize(stream));
        if (c->bf16) {
            CU(cudaMemcpy(h16, c->d, nd * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < nd; i++)
                hd[i] = bf2f(h16[i]);
        } else {
            CU(cudaMemcpy(hd, c->d, nd * 4, cudaMemcpyDeviceToHost));
        }
        double scale = 1e-30;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double s = 0.0;
                for (int p = 0; p < k; p++)
                    s += (double)ha[(size_t)i * k + p] * (double)hb[(size_t)p * n + j];
                if (c->bias_relu) {
                    s += hbias[j];
                    s = s > 0.0 ? s : 0.0;
                }
                ref[(size_t)i * n + j] = s;
                if (fabs(s) > scale)
                    scale = fabs(s);
            }
        double worst = 0.0;
        for (size_t i = 0; i < nd; i++) {
            double err = fabs((double)hd[i] - ref[i]) / scale;
            if (!(err <= worst)) /* NaN counts as worst */
                worst = isnan(err) ? 1e300 : err; /* JSON has no inf */
        }
        c->max_rel_err = worst;
        c->correct = worst <= (c->bf16 ? 2e-2 : 1e-4);
        if (!c->correct)
            fprintf(stderr, "cublaslt_bare: WRONG RESULT %s %s: max error %g (relative to max |D|)\n", c->dtype,
                    c->epilogue, worst);
        c->loop_us = xmalloc(sizeof(double) * (size_t)g.repeats);
        c->loop_issue_us = xmalloc(sizeof(double) * (size_t)g.repeats);
        c->burst_us = xmalloc(sizeof(double) * (size_t)g.bursts);
    }

    /* Warm-up: one loop of every case (clocks, lazy module loading, caches). */
    for (int ci = 0; ci < nc; ci++) {
        for (int t = 0; t < g.calls; t++)
            enqueue(lt, &cases[ci], ws, ws_bytes, stream);
        CU(cudaStreamSynchronize(stream));
    }

    /* loop: `calls` back-to-back, one sync; the cases interleaved repeat by repeat */
    for (int r = 0; r < g.repeats; r++) {
        for (int ci = 0; ci < nc; ci++) {
            bcase *c = &cases[ci];
            double t0 = now_ns();
            for (int t = 0; t < g.calls; t++)
                enqueue(lt, c, ws, ws_bytes, stream);
            double t1 = now_ns();
            CU(cudaStreamSynchronize(stream));
            double t2 = now_ns();
            c->loop_issue_us[r] = (t1 - t0) * 1e-3 / g.calls;
            c->loop_us[r] = (t2 - t0) * 1e-3 / g.calls;
        }
    }
    /* bursts of burst_calls with a sync (untimed) between them */
    for (int bu = 0; bu < g.bursts; bu++) {
        for (int ci = 0; ci < nc; ci++) {
            bcase *c = &cases[ci];
            double t0 = now_ns();
            for (int t = 0; t < g.burst_calls; t++)
                enqueue(lt, c, ws, ws_bytes, stream);
            double t1 = now_ns();
            CU(cudaStreamSynchronize(stream));
            c->burst_us[bu] = (t1 - t0) * 1e-3 / g.burst_calls;
        }
    }
    /* device time per call */
    for (int ci = 0; ci < nc; ci++) {
        bcase *c = &cases[ci];
        CU(cudaEventRecord(ev0, stream));
        for (int t = 0; t < g.calls; t++)
            enqueue(lt, c, ws, ws_bytes, stream);
        CU(cudaEventRecord(ev1, stream));
        CU(cudaEventSynchronize(ev1));
        float ms = 0.0f;
        CU(cudaEventElapsedTime(&ms, ev0, ev1));
        c->event_us = (double)ms * 1e3 / g.calls;
    }

    int all_ok = 1;
    printf("{\n");
    printf("  \"benchmark\": \"cublaslt_bare\",\n");
    printf("  \"device\": \"%s\", \"sm\": \"%d.%d\",\n", prop.name, prop.major, prop.minor);
    printf("  \"cudart_version\": %d, \"driver_cuda_version\": %d, \"cublasLt_version\": %zu,\n", rt_ver, drv_ver,
           cublasLtGetVersion());
    printf("  \"m\": %d, \"n\": %d, \"k\": %d,\n", m, n, k);
    printf("  \"calls\": %d, \"repeats\": %d, \"bursts\": %d, \"burst_calls\": %d, \"workspace_bytes\": %zu,\n", g.calls,
           g.repeats, g.bursts, g.burst_calls, ws_bytes);
    printf("  \"stream\": \"cudaStreamNonBlocking\", \"algorithm\": \"cublasLtMatmulAlgoGetHeuristic, first result, "
           "chosen once\",\n");
    printf("  \"cases\": [\n");
    for (int ci = 0; ci < nc; ci++) {
        bcase *c = &cases[ci];
        all_ok &= c->correct;
        double loop_min = min_of(c->loop_us, g.repeats), issue_min = min_of(c->loop_issue_us, g.repeats);
        double burst_min = min_of(c->burst_us, g.bursts);
        double loop_med = median_of(c->loop_us, g.repeats), issue_med = median_of(c->loop_issue_us, g.repeats);
        double burst_med = median_of(c->burst_us, g.bursts);
        printf("    {\"dtype\": \"%s\", \"epilogue\": \"%s\", \"correct\": %s, \"max_rel_err\": %.3g,\n", c->dtype,
               c->epilogue, c->correct ? "true" : "false", c->max_rel_err);
        printf("     \"loop_us_per_call\": {\"median\": %.3f, \"min\": %.3f},\n", loop_med, loop_min);
        printf("     \"loop_issue_us_per_call\": {\"median\": %.3f, \"min\": %.3f},\n", issue_med, issue_min);
        printf("     \"burst_us_per_call\": {\"median\": %.3f, \"min\": %.3f},\n", burst_med, burst_min);
        printf("     \"event_us_per_call\": %.3f}%s\n", c->event_us, ci + 1 < nc ? "," : "");
    }
    printf("  ],\n");
    printf("  \"correct\": %s\n", all_ok ? "true" : "false");
    printf("}\n");

    for (int ci = 0; ci < nc; ci++) {
        bcase *c = &cases[ci];
        cublasLtMatrixLayoutDestroy(c->la);
        cublasLtMatrixLayoutDestroy(c->lb);
        cublasLtMatrixLayoutDestroy(c->ld);
        cublasLtMatmulDescDestroy(c->op);
        cudaFree(c->a);
        cudaFree(c->b);
        cudaFree(c->bias);
        cudaFree(c->d);
        free(c->loop_us);
        free(c->loop_issue_us);
        free(c->burst_us);
    }
    cudaEventDestroy(ev0);
    cudaEventDestroy(ev1);
    if (ws)
        cudaFree(ws);
    cublasLtDestroy(lt);
    cudaStreamDestroy(stream);
    free(ha);
    free(hb);
    free(hbias);
    free(hd);
    free(h16);
    free(ref);
    return all_ok ? 0 : 1;
}
