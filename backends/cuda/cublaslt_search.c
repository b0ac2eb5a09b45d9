/* cublaslt_search.c : the cuBLASLt matmul's algorithm (see cublaslt_matmul.h): the heuristic's
 * candidates at the workspace limit, the wider search autotune walks beyond them, and the pick of
 * gpu_algo among them. */
#include "cublaslt_matmul.h"
#include "epilogue.h"

#include <string.h>

/* gpu_algo 0..LT_BASE_CANDIDATES-1: the heuristic's list at the workspace limit (the choices
 * plans had before the wider search, so saved wisdom keeps its meaning); beyond it, the
 * wider search of widen_candidates(), up to LT_MAX_CANDIDATES in all (gpu_algo <= 63). */
#define LT_BASE_CANDIDATES 8
#define LT_PER_ID_CANDIDATES 4
#define LT_MAX_CANDIDATES 64

/* A heuristic preference: workspace limit, the operands' alignments, and optionally the
 * search limited to the algorithm id the results are seeded with. */
static fm_status make_pref(const lt_plan *pl, const fm_problem *p, uint64_t ws, int by_id,
                           cublasLtMatmulPreference_t *pref)
{
    fm_status s = fm_lt_status(cublasLtMatmulPreferenceCreate(pref), "cublasLtMatmulPreferenceCreate");
    if (s != FM_OK)
        return s;
    cublasLtMatmulPreferenceSetAttribute(*pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    static const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        int slot;
    } al[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, FM_MATMUL_B},
              {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, FM_MATMUL_A},
              {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, FM_MATMUL_C},
              {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, FM_MATMUL_D}};
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
        int slot = al[i].slot == FM_MATMUL_C && !pl->c_in_gemm ? FM_MATMUL_D : al[i].slot;
        uint32_t bytes = 1u << p->align_log2[slot];
        cublasLtMatmulPreferenceSetAttribute(*pref, al[i].attr, &bytes, sizeof bytes);
    }
    if (by_id) {
        uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
        cublasLtMatmulPreferenceSetAttribute(*pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode, sizeof mode);
    }
    return FM_OK;
}

/* Appends up to `want` heuristic answers for pref to list[0..count), skipping algorithms
 * already there; seed (by-id search) initialises the results. Returns the new count. */
static int append_heuristic(const lt_plan *pl, cublasLtMatmulPreference_t pref, int want,
                            const cublasLtMatmulAlgo_t *seed, cublasLtMatmulHeuristicResult_t *list, int count,
                            cublasStatus_t *status)
{
    cublasLtMatmulHeuristicResult_t res[LT_BASE_CANDIDATES];
    if (want > LT_BASE_CANDIDATES)
        want = LT_BASE_CANDIDATES;
    memset(res, 0, sizeof res);
    for (int i = 0; seed && i < want; i++)
        res[i].algo = *seed;
    int got = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(pl->st->handle, pl->desc, pl->lay_a, pl->lay_b,
                                                       pl->lay_c, pl->lay_d, pref, want, res, &got);
    *status = st;
    for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < got && count < LT_MAX_CANDIDATES; i++) {
        int dup = res[i].state != CUBLAS_STATUS_SUCCESS;
        for (int j = 0; j < count && !dup; j++)
            dup = memcmp(&list[j].algo, &res[i].algo, sizeof res[i].algo) == 0;
        if (!dup)
            list[count++] = res[i];
    }
    return count;
}

/* The wider search behind gpu_algo >= the first list's length (autotune walks it): the
 * heuristic's answers at smaller workspace limits, then its best configurations of every
 * algorithm id of these types (CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID). On the H200 it found
 * fused fp32 / tf32 / bf16 kernels 3-9% faster than the best of the first list. The order
 * is fixed, so an index (saved in wisdom) names the same algorithm in a later process with
 * the same GPU, cuBLASLt and workspace limit. An id the heuristic has nothing for is
 * skipped; running out of memory fails the plan (a shorter list would renumber the rest). */
static fm_status widen_candidates(const lt_plan *pl, const fm_problem *p, uint64_t ws,
                                  cublasLtMatmulHeuristicResult_t *list, int *count)
{
    static const uint64_t limits[] = {0, (uint64_t)1 << 20, (uint64_t)4 << 20};
    cublasLtMatmulPreference_t pref;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    fm_status s;
    for (size_t i = 0; i < sizeof limits / sizeof limits[0] && limits[i] < ws; i++) {
        if ((s = make_pref(pl, p, limits[i], 0, &pref)) != FM_OK)
            return s;
        *count = append_heuristic(pl, pref, LT_BASE_CANDIDATES, NULL, list, *count, &st);
        cublasLtMatmulPreferenceDestroy(pref);
        if (st == CUBLAS_STATUS_ALLOC_FAILED)
            return fm_lt_status(st, "cublasLtMatmulAlgoGetHeuristic");
    }
    int ids[LT_MAX_CANDIDATES], nids = 0;
    cublasLtHandle_t h = pl->st->handle;
    st = cublasLtMatmulAlgoGetIds(h, pl->compute, pl->scale_type, pl->b_type, pl->a_type, pl->dtype, pl->dtype,
                                  LT_MAX_CANDIDATES, ids, &nids);
    if (st == CUBLAS_STATUS_ALLOC_FAILED)
        return fm_lt_status(st, "cublasLtMatmulAlgoGetIds");
    if (st != CUBLAS_STATUS_SUCCESS)
        return FM_OK; /* no ids for these types: the list ends here */
    if ((s = make_pref(pl, p, ws, 1, &pref)) != FM_OK)
        return s;
    for (int i = 0; i < nids && *count < LT_MAX_CANDIDATES; i++) {
        cublasLtMatmulAlgo_t seed;
        memset(&seed, 0, sizeof seed); /* bytes Init leaves alone must not differ between runs (memcmp) */
        if (cublasLtMatmulAlgoInit(h, pl->compute, pl->scale_type, pl->b_type, pl->a_type, pl->dtype, pl->dtype, ids[i],
                                   &seed) != CUBLAS_STATUS_SUCCESS)
            continue;
        *count = append_heuristic(pl, pref, LT_PER_ID_CANDIDATES, &seed, list, *count, &st);
        if (st == CUBLAS_STATUS_ALLOC_FAILED)
            break;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    return st == CUBLAS_STATUS_ALLOC_FAILED ? fm_lt_status(st, "cublasLtMatmulAlgoGetHeuristic") : FM_OK;
}

/* The heuristic's candidates at the workspace limit (up to LT_BASE_CANDIDATES: gpu_algo 0 is
 * its first choice), widened only when gpu_algo asks beyond them; pick pl->mp.gpu_algo. */
fm_status fm_lt_choose_algo(lt_plan *pl, const fm_problem *p)
{
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t ws = pl->st->limit;
    fm_status s = make_pref(pl, p, ws, 0, &pref);
    if (s != FM_OK)
        return s;
    cublasLtMatmulHeuristicResult_t list[LT_MAX_CANDIDATES];
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    int returned = append_heuristic(pl, pref, LT_BASE_CANDIDATES, NULL, list, 0, &st);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || returned == 0) {
        char epi[160];
        fm_epilogue_format(pl->mp.epilogue, epi, sizeof epi);
        return fm_fail(FM_ERR_NOT_APPLICABLE, "cuBLASLt has no algorithm for %s %s%s (%s)",
                       fm_dtype_name(pl->g.dtype), pl->fused ? "epilogue=" : "plain GEMM", pl->fused ? epi : "",
                       st != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusName(st) : "0 candidates");
    }
    if (pl->mp.gpu_algo >= returned && (s = widen_candidates(pl, p, ws, list, &returned)) != FM_OK)
        return s;
    pl->algo_count = returned;
    if (pl->mp.gpu_algo >= returned)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "cuBLASLt candidate %d requested, the search found %d",
                       pl->mp.gpu_algo, returned);
    pl->algo_index = pl->mp.gpu_algo;
    pl->algo = list[pl->algo_index].algo;
    pl->algo_ws = list[pl->algo_index].workspaceSize;
    return FM_OK;
}
