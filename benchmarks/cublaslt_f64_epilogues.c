/* cublaslt_f64_epilogues.c : which cuBLASLt epilogues are slow in f64, with no fusemath involved.
 * For each shape, the plain product (EPILOGUE_DEFAULT) and RELU, BIAS, RELU_BIAS, GELU: every
 * heuristic candidate (up to 16) timed once, the fastest kept, in 3 interleaved rounds (this GPU's
 * f64 clock drifts between rounds, so compare within a round). If RELU alone ran at the plain
 * speed, bias+relu could fold the bias into the product (one more column of K) and keep the
 * activation in the GEMM. One JSON line per (round, epilogue): ms of the fastest candidate, its
 * algorithm id and tile, and how many candidates the heuristic returned.
 * Then "forced": the plain product's fastest candidate (algorithm and configuration) handed to
 * cublasLtMatmulAlgoCheck with each epilogue - does the fast kernel take RELU / BIAS although the
 * heuristic does not offer it? - timed next to plain where it does, and its 1024^3 result
 * checked against plain + bias, relu on the host. Also every f64 algorithm id's epilogue mask.
 *   cublaslt_f64_epilogues [forced]   (8192x8192x1024, 16384x4096x512, 1024^3, 8192^3) */
#define _DEFAULT_SOURCE /* srand48, drand48 */
#include <math.h>
#include <stdint.h>

#include "cublaslt_f64_probe.h"

static const struct {
    cublasLtEpilogue_t e;
    const char *name;
    int bias;
} eps[] = {{CUBLASLT_EPILOGUE_DEFAULT, "plain", 0},     {CUBLASLT_EPILOGUE_RELU, "relu", 0},
           {CUBLASLT_EPILOGUE_BIAS, "bias", 1},         {CUBLASLT_EPILOGUE_RELU_BIAS, "relu_bias", 1},
           {CUBLASLT_EPILOGUE_GELU, "gelu", 0},         {CUBLASLT_EPILOGUE_GELU_BIAS, "gelu_bias", 1}};
#define NEPS (int)(sizeof eps / sizeof eps[0])

/* An f64 matmul descriptor with epilogue e (and the problem's bias where e adds one). */
static cublasLtMatmulDesc_t desc_of(const f64_problem *p, int e)
{
    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_64F, CUDA_R_64F);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &eps[e].e, sizeof eps[e].e);
    if (eps[e].bias)
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias, sizeof p->bias);
    return d;
}

/* The fastest of up to 16 heuristic candidates for d: its index in res, -1 for none. */
static int fastest(const f64_problem *p, cublasLtMatmulDesc_t d, cublasLtMatmulHeuristicResult_t res[16], int *got,
                   cublasStatus_t *st, float *best, int reps)
{
    *got = 0, *best = -1;
    *st = cublasLtMatmulAlgoGetHeuristic(p->lt, d, p->la, p->lb, p->lc, p->lc, p->pref, 16, res, got);
    int bi = -1;
    for (int i = 0; *st == CUBLAS_STATUS_SUCCESS && i < *got; i++) {
        const float t = f64_time(p, d, &res[i].algo, reps);
        if (t > 0 && (bi < 0 || t < *best))
            *best = t, bi = i;
    }
    return bi;
}

static int algo_id(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t what)
{
    int v = -1;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(a, what, &v, sizeof v, &w);
    return v;
}

/* Each epilogue (gelu_bias aside) with its own fastest heuristic candidate, 3 rounds. */
static void shape(int m, int n, int k, int reps)
{
    f64_problem p;
    if (f64_problem_init(&p, m, n, k, 7))
        return;
    for (int round = 0; round < 3; round++)
        for (int e = 0; e < NEPS - 1; e++) {
            cublasLtMatmulDesc_t d = desc_of(&p, e);
            cublasLtMatmulHeuristicResult_t res[16];
            int got;
            cublasStatus_t st;
            float best;
            const int bi = fastest(&p, d, res, &got, &st, &best, reps);
            printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"round\":%d,\"epilogue\":\"%s\",\"status\":%d,\"candidates\":%d,"
                   "\"best_idx\":%d,\"algo\":%d,\"tile\":%d,\"ms\":%.4f}\n", m, n, k, round, eps[e].name, (int)st, got, bi,
                   bi >= 0 ? algo_id(&res[bi].algo, CUBLASLT_ALGO_CONFIG_ID) : -1,
                   bi >= 0 ? algo_id(&res[bi].algo, CUBLASLT_ALGO_CONFIG_TILE_ID) : -1, best);
            fflush(stdout);
            cublasLtMatmulDescDestroy(d);
        }
    f64_problem_free(&p);
}

static void algo_masks(void)
{
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    int ids[128], n = 0;
    cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, 128, ids,
                             &n);
    for (int i = 0; i < n; i++) {
        cublasLtMatmulAlgo_t a;
        uint32_t mask = 0;
        size_t w = 0;
        if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, ids[i],
                                   &a) == CUBLAS_STATUS_SUCCESS)
            cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_EPILOGUE_MASK, &mask, sizeof mask, &w);
        printf("{\"algo\":%d,\"epilogue_mask\":\"0x%x\"}\n", ids[i], mask);
    }
    cublasLtDestroy(lt);
}

/* relu_bias with algo against plain + bias, relu on the host: the largest absolute difference. */
static double relu_bias_error(const f64_problem *p, cublasLtMatmulDesc_t plain, cublasLtMatmulDesc_t fused,
                              const cublasLtMatmulAlgo_t *algo)
{
    const size_t mn = (size_t)p->m * p->n;
    const double one = 1, zero = 0;
    double *P = malloc(mn * 8), *F = malloc(mn * 8), *hb = malloc((size_t)p->m * 8), err = 0;
    if (P && F && hb) {
        cublasLtMatmul(p->lt, plain, &one, p->A, p->la, p->B, p->lb, &zero, p->C, p->lc, p->C, p->lc, algo, p->ws, p->wss, 0);
        cudaMemcpy(P, p->C, mn * 8, cudaMemcpyDeviceToHost);
        cublasLtMatmul(p->lt, fused, &one, p->A, p->la, p->B, p->lb, &zero, p->C, p->lc, p->C, p->lc, algo, p->ws, p->wss, 0);
        cudaMemcpy(F, p->C, mn * 8, cudaMemcpyDeviceToHost);
        cudaMemcpy(hb, p->bias, (size_t)p->m * 8, cudaMemcpyDeviceToHost);
        for (size_t j = 0; j < (size_t)p->n; j++)
            for (size_t i = 0; i < (size_t)p->m; i++) {
                const double v = P[j * p->m + i] + hb[i], want = v > 0 ? v : 0, dif = fabs(F[j * p->m + i] - want);
                err = dif > err ? dif : err;
            }
    } else {
        err = -1;
    }
    free(P), free(F), free(hb);
    return err;
}

/* The plain product's fastest candidate forced onto each epilogue (gelu aside). */
static void forced(int m, int n, int k, int reps)
{
    f64_problem p;
    if (f64_problem_init(&p, m, n, k, 11))
        return;
    cublasLtMatmulDesc_t d[NEPS];
    for (int e = 0; e < NEPS; e++)
        d[e] = desc_of(&p, e);
    cublasLtMatmulHeuristicResult_t res[16];
    int got;
    cublasStatus_t st;
    float bt;
    const int best = fastest(&p, d[0], res, &got, &st, &bt, reps);
    if (best < 0) {
        printf("{\"m\":%d,\"forced\":\"no plain candidate\"}\n", m);
    } else {
        const cublasLtMatmulAlgo_t *algo = &res[best].algo;
        const int id = algo_id(algo, CUBLASLT_ALGO_CONFIG_ID);
        int ok[NEPS];
        for (int e = 0; e < NEPS; e++) {
            if (eps[e].e == CUBLASLT_EPILOGUE_GELU) {
                ok[e] = 0;
                continue;
            }
            cublasLtMatmulHeuristicResult_t r;
            const cublasStatus_t cs = cublasLtMatmulAlgoCheck(p.lt, d[e], p.la, p.lb, p.lc, p.lc, algo, &r);
            ok[e] = cs == CUBLAS_STATUS_SUCCESS;
            printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"forced_algo\":%d,\"epilogue\":\"%s\",\"check_status\":%d}\n", m, n, k,
                   id, eps[e].name, (int)cs);
        }
        for (int round = 0; round < 3; round++)
            for (int e = 0; e < NEPS; e++)
                if (ok[e])
                    printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"round\":%d,\"forced_algo\":%d,\"epilogue\":\"%s\",\"ms\":%.4f}\n",
                           m, n, k, round, id, eps[e].name, f64_time(&p, d[e], algo, reps));
        if (m == 1024 && ok[0] && ok[3])
            printf("{\"m\":%d,\"forced_algo\":%d,\"relu_bias_max_abs_err_vs_plain\":%.3e}\n", m, id,
                   relu_bias_error(&p, d[0], d[3], algo));
    }
    for (int e = 0; e < NEPS; e++)
        cublasLtMatmulDescDestroy(d[e]);
    f64_problem_free(&p);
}

int main(int argc, char **argv)
{
    if (argc > 1 && argv[1][0] == 'f') {
        algo_masks();
        forced(1024, 1024, 1024, 50);
        forced(8192, 8192, 1024, 5);
        forced(16384, 4096, 512, 5);
        return 0;
    }
    shape(8192, 8192, 1024, 5);
    shape(16384, 4096, 512, 5);
    shape(1024, 1024, 1024, 50);
    shape(8192, 8192, 8192, 2);
    return 0;
}
