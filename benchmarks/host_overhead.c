/* host_overhead.c : host cost per call of a small planned fusemath matmul against
 * the bare BLAS call it wraps.
 *
 * For an M x N x K f32 product (64x64x64 by default) it times, per call:
 *   cblas_sgemm                 the bare OpenBLAS call (OpenBLAS at 1 thread, as
 *                               fusemath keeps it), beta = 0
 *   cblas_sgemm+bias+relu       the bare call plus a hand-written bias+relu loop
 *                               (what the fused epilogue has to do anyway)
 *   fm_plan_execute identity    a planned fusemath matmul, no epilogue
 *   fm_plan_execute bias+relu   a planned fusemath matmul with the fused epilogue
 *   fm_matmul identity          the stateless call (descriptors -> cached plan -> run)
 * Each method runs `bursts` bursts of `calls` calls after a warm-up; the methods
 * are interleaved burst by burst so that clock drift hits them all alike. Reported:
 * median and min over bursts of the per-call time (ns). overhead_ns = median of
 * the fusemath method - median of the matching bare method.
 *
 * Prints one JSON object on stdout; errors go to stderr with exit status 1.
 * Usage: host_overhead [--m M] [--n N] [--k K] [--calls C] [--bursts B] [--threads T]
 *   --threads sets the fusemath context's thread count (default: the context's
 *   default; below 4 MFLOP a plan runs on one thread anyway).
 */
#define _POSIX_C_SOURCE 200809L
#include <fusemath/fusemath.h>

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_timing.h"

/* OpenBLAS extensions (not in cblas.h on every distribution). */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char *openblas_get_config(void);

typedef struct bench_args {
    int m, n, k, calls, bursts, threads;
} bench_args;

typedef struct problem {
    int m, n, k;
    float *a, *b, *bias, *d;
    fm_plan *plan_id, *plan_br;
    fm_context *ctx;
    fm_tensor ta, tb, tbias, td;
    fm_matmul_options o_id;
} problem;

enum { M_BLAS = 0, M_BLAS_BR, M_FM_ID, M_FM_BR, M_FM_STATELESS, M_COUNT };
static const char *const method_names[M_COUNT] = {"cblas_sgemm", "cblas_sgemm_bias_relu", "fm_plan_execute_identity",
                                                  "fm_plan_execute_bias_relu", "fm_matmul_identity"};

static void die(const char *what, fm_status s)
{
    fprintf(stderr, "host_overhead: %s failed: %s (%s)\n", what, fm_status_name(s), fm_last_error());
    exit(1);
}

static void *xalloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        fprintf(stderr, "host_overhead: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static void fill(float *x, size_t n, unsigned *state)
{
    for (size_t i = 0; i < n; i++) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = (float)((*state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    }
}

/* The epilogue written by hand, branch-free (a compare-and-jump mispredicts on the
 * random signs of a GEMM result): every value whose sign bit is set becomes +0.0.
 * Four lanes per step so that gcc -O2 (basic-block SLP) turns it into SSE code. */
static inline float relu1(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u &= (uint32_t)((int32_t)u >> 31) ^ 0xFFFFFFFFu;
    memcpy(&v, &u, sizeof u);
    return v;
}

static void bias_relu(float *restrict d, const float *restrict bias, int m, int n)
{
    for (int i = 0; i < m; i++) {
        float *restrict row = d + (size_t)i * n;
        int j = 0;
        for (; j + 4 <= n; j += 4) {
            float v0 = row[j] + bias[j], v1 = row[j + 1] + bias[j + 1];
            float v2 = row[j + 2] + bias[j + 2], v3 = row[j + 3] + bias[j + 3];
            row[j] = relu1(v0);
            row[j + 1] = relu1(v1);
            row[j + 2] = relu1(v2);
            row[j + 3] = relu1(v3);
        }
        for (; j < n; j++)
            row[j] = relu1(row[j] + bias[j]);
    }
}

/* One call of a method. */
static void run_once(problem *p, int method)
{
    fm_status s;
    switch (method) {
    case M_BLAS:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->m, p->n, p->k, 1.0f, p->a, p->k, p->b, p->n, 0.0f,
                    p->d, p->n);
        break;
    case M_BLAS_BR:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->m, p->n, p->k, 1.0f, p->a, p->k, p->b, p->n, 0.0f,
                    p->d, p->n);
        bias_relu(p->d, p->bias, p->m, p->n);
        break;
    case M_FM_ID: {
        void *ptrs[FM_MATMUL_NSLOTS] = {p->a, p->b, NULL, NULL, p->d, NULL};
        s = fm_plan_execute(p->plan_id, ptrs, FM_MATMUL_NSLOTS, NULL);
        if (s != FM_OK)
            die("fm_plan_execute(identity)", s);
        break;
    }
    case M_FM_BR: {
        void *ptrs[FM_MATMUL_NSLOTS] = {p->a, p->b, NULL, p->bias, p->d, NULL};
        s = fm_plan_execute(p->plan_br, ptrs, FM_MATMUL_NSLOTS, NULL);
        if (s != FM_OK)
            die("fm_plan_execute(bias+relu)", s);
        break;
    }
    case M_FM_STATELESS:
        s = fm_matmul(p->ctx, &p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o_id, NULL);
        if (s != FM_OK)
            die("fm_matmul", s);
        break;
    }
}

/* Largest |x - y| relative to max(1, |y|). */
static double max_rel_diff(const float *x, const float *y, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - (double)y[i]) / fmax(1.0, fabs((double)y[i]));
        if (e > worst)
            worst = e;
    }
    return worst;
}

static int parse_int(const char *flag, const char *val, int lo)
{
    char *end = NULL;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || *end != '\0' || v < lo || v > 1000000000L) {
        fprintf(stderr, "host_overhead: %s needs an integer >= %d\n", flag, lo);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    bench_args args = {64, 64, 64, 2000, 15, 0};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--m")) args.m = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--n")) args.n = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--k")) args.k = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--calls")) args.calls = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--bursts")) args.bursts = parse_int(f, v, 1), i++;
        else if (!strcmp(f, "--threads")) args.threads = parse_int(f, v, 0), i++;
        else {
            fprintf(stderr, "usage: %s [--m M] [--n N] [--k K] [--calls C] [--bursts B] [--threads T]\n", argv[0]);
            return 2;
        }
    }

    problem p;
    memset(&p, 0, sizeof p);
    p.m = args.m, p.n = args.n, p.k = args.k;
    size_t na = (size_t)p.m * p.k, nb = (size_t)p.k * p.n, nd = (size_t)p.m * p.n;
    p.a = xalloc(na * sizeof(float));
    p.b = xalloc(nb * sizeof(float));
    p.bias = xalloc((size_t)p.n * sizeof(float));
    p.d = xalloc(nd * sizeof(float));
    float *ref = xalloc(nd * sizeof(float));
    unsigned rng = 12345u;
    fill(p.a, na, &rng);
    fill(p.b, nb, &rng);
    fill(p.bias, (size_t)p.n, &rng);
    memset(p.d, 0, nd * sizeof(float));

    fm_status s = fm_context_create(&p.ctx);
    if (s != FM_OK)
        die("fm_context_create", s);
    if (args.threads > 0 && (s = fm_context_set_num_threads(p.ctx, args.threads)) != FM_OK)
        die("fm_context_set_num_threads", s);
    /* fusemath already did this when its cpu backend was probed; make it explicit for
     * the bare calls regardless. */
    openblas_set_num_threads(1);

    fm_device cpu = {FM_DEVICE_CPU, 0};
    int64_t sa[2] = {p.m, p.k}, sb[2] = {p.k, p.n}, sd[2] = {p.m, p.n}, sbias[1] = {p.n};
    if ((s = fm_tensor_init(&p.ta, p.a, cpu, FM_F32, 2, sa, NULL)) != FM_OK ||
        (s = fm_tensor_init(&p.tb, p.b, cpu, FM_F32, 2, sb, NULL)) != FM_OK ||
        (s = fm_tensor_init(&p.td, p.d, cpu, FM_F32, 2, sd, NULL)) != FM_OK ||
        (s = fm_tensor_init(&p.tbias, p.bias, cpu, FM_F32, 1, sbias, NULL)) != FM_OK)
        die("fm_tensor_init", s);
    fm_matmul_options o_br;
    fm_matmul_options_init(&p.o_id);
    fm_matmul_options_init(&o_br);
    o_br.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU;
    if ((s = fm_matmul_plan(p.ctx, &p.ta, &p.tb, NULL, NULL, &p.td, NULL, &p.o_id, &p.plan_id)) != FM_OK)
        die("fm_matmul_plan(identity)", s);
    if ((s = fm_matmul_plan(p.ctx, &p.ta, &p.tb, NULL, &p.tbias, &p.td, NULL, &o_br, &p.plan_br)) != FM_OK)
        die("fm_matmul_plan(bias+relu)", s);

    /* Correctness first: never time a wrong answer. */
    double err_id, err_br, err_sl;
    run_once(&p, M_BLAS);
    memcpy(ref, p.d, nd * sizeof(float));
    memset(p.d, 0, nd * sizeof(float));
    run_once(&p, M_FM_ID);
    err_id = max_rel_diff(p.d, ref, nd);
    memset(p.d, 0, nd * sizeof(float));
    run_once(&p, M_FM_STATELESS);
    err_sl = max_rel_diff(p.d, ref, nd);
    bias_relu(ref, p.bias, p.m, p.n);
    memset(p.d, 0, nd * sizeof(float));
    run_once(&p, M_FM_BR);
    err_br = max_rel_diff(p.d, ref, nd);
    double tol = 1e-4;
    int ok = err_id <= tol && err_br <= tol && err_sl <= tol;
    if (!ok)
        fprintf(stderr, "host_overhead: WRONG RESULT: max rel diff identity %g, bias+relu %g, stateless %g\n", err_id,
                err_br, err_sl);

    /* Warm-up: one full burst of each method. */
    for (int mth = 0; mth < M_COUNT; mth++)
        for (int c = 0; c < args.calls; c++)
            run_once(&p, mth);

    double *per_call = xalloc(sizeof(double) * (size_t)M_COUNT * (size_t)args.bursts);
    for (int bu = 0; bu < args.bursts; bu++) {
        for (int mth = 0; mth < M_COUNT; mth++) {
            double t0 = now_ns();
            for (int c = 0; c < args.calls; c++)
                run_once(&p, mth);
            double t1 = now_ns();
            per_call[mth * args.bursts + bu] = (t1 - t0) / args.calls;
        }
    }
    double med[M_COUNT], mn[M_COUNT];
    for (int mth = 0; mth < M_COUNT; mth++) {
        double *x = per_call + mth * args.bursts;
        med[mth] = median_of(x, args.bursts); /* sorts x */
        mn[mth] = x[0];
    }

    const char *cfg = openblas_get_config();
    printf("{\n");
    printf("  \"benchmark\": \"host_overhead\",\n");
    printf("  \"fusemath_version\": \"%s\",\n", fm_version_string());
    printf("  \"openblas_config\": \"%s\",\n", cfg ? cfg : "");
    printf("  \"openblas_threads\": %d,\n", openblas_get_num_threads());
    printf("  \"fusemath_threads\": %d,\n", fm_context_get_num_threads(p.ctx));
    printf("  \"dtype\": \"f32\",\n");
    printf("  \"m\": %d, \"n\": %d, \"k\": %d,\n", p.m, p.n, p.k);
    printf("  \"calls_per_burst\": %d, \"bursts\": %d,\n", args.calls, args.bursts);
    printf("  \"plan_identity\": \"%s\",\n", fm_plan_describe(p.plan_id));
    printf("  \"plan_bias_relu\": \"%s\",\n", fm_plan_describe(p.plan_br));
    printf("  \"correct\": %s,\n", ok ? "true" : "false");
    printf("  \"max_rel_diff\": {\"identity\": %.3g, \"bias_relu\": %.3g, \"stateless\": %.3g},\n", err_id, err_br,
           err_sl);
    printf("  \"per_call_ns\": {\n");
    for (int mth = 0; mth < M_COUNT; mth++)
        printf("    \"%s\": {\"median\": %.1f, \"min\": %.1f}%s\n", method_names[mth], med[mth], mn[mth],
               mth + 1 < M_COUNT ? "," : "");
    printf("  },\n");
    printf("  \"overhead_ns\": {\n");
    printf("    \"fm_plan_execute_identity_vs_cblas\": %.1f,\n", med[M_FM_ID] - med[M_BLAS]);
    printf("    \"fm_plan_execute_bias_relu_vs_cblas\": %.1f,\n", med[M_FM_BR] - med[M_BLAS]);
    printf("    \"fm_plan_execute_bias_relu_vs_cblas_bias_relu\": %.1f,\n", med[M_FM_BR] - med[M_BLAS_BR]);
    printf("    \"fm_matmul_identity_vs_cblas\": %.1f\n", med[M_FM_STATELESS] - med[M_BLAS]);
    printf("  }\n");
    printf("}\n");

    fm_plan_release(p.plan_id);
    fm_plan_release(p.plan_br);
    fm_context_destroy(p.ctx);
    free(per_call);
    free(ref);
    free(p.a);
    free(p.b);
    free(p.bias);
    free(p.d);
    return ok ? 0 : 1;
}
