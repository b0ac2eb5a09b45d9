/* intgemm_matmul.c : exact integer and bool matmul on the CPU (i8 .. u64, bool), as NumPy computes
 * it: each element summed over k in the operands' own width, wrapping modulo 2^bits; bool @ bool is
 * an OR of ANDs. The sum is formed in unsigned arithmetic of that width: its low bits are the same
 * for signed and unsigned data (two's complement), so one loop per width serves both signs, and no
 * signed overflow (undefined in C) can happen. Core lets no epilogue, c or alpha != 1 through for
 * these dtypes (matmul_problem.c), and aliasing of d with a or b is refused at execute.
 * Rows of d are shared out over the plan's threads; every element is summed in order by one thread. */
#include "internal.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    fm_matmul_geom g;
    int threads;
} intgemm_impl;

/* d[i, :] = sum over k of a[i, k] * b[k, :], for one row i of one batch entry; T the element,
 * W the type its products are formed in (never narrower than unsigned int: no promotion to int). */
#define FM_DEFINE_INT_ROW(NAME, T, W)                                                                    \
    static void NAME(const fm_matmul_geom *g, const T *a, const T *b, T *d)                            \
    {                                                                                                \
        const int64_t n = g->n, acs = g->col_stride[FM_MATMUL_A];                                    \
        const int64_t brs = g->row_stride[FM_MATMUL_B], bcs = g->col_stride[FM_MATMUL_B];            \
        const int64_t dcs = g->col_stride[FM_MATMUL_D];                                              \
        for (int64_t j = 0; j < n; j++)                                                              \
            d[j * dcs] = 0;                                                                          \
        for (int64_t k = 0; k < g->k; k++) {                                                         \
            const W x = (W)a[k * acs];                                                               \
            const T *bk = b + k * brs;                                                               \
            if (bcs == 1 && dcs == 1) /* the common layout, vectorised */                           \
                for (int64_t j = 0; j < n; j++)                                                      \
                    d[j] = (T)((W)d[j] + x * (W)bk[j]);                                              \
            else                                                                                     \
                for (int64_t j = 0; j < n; j++)                                                      \
                    d[j * dcs] = (T)((W)d[j * dcs] + x * (W)bk[j * bcs]);                            \
        }                                                                                            \
    }
FM_DEFINE_INT_ROW(row_u8, uint8_t, unsigned)
FM_DEFINE_INT_ROW(row_u16, uint16_t, unsigned)
FM_DEFINE_INT_ROW(row_u32, uint32_t, uint32_t)
FM_DEFINE_INT_ROW(row_u64, uint64_t, uint64_t)

static void row_bool(const fm_matmul_geom *g, const uint8_t *a, const uint8_t *b, uint8_t *d)
{
    const int64_t brs = g->row_stride[FM_MATMUL_B], bcs = g->col_stride[FM_MATMUL_B];
    const int64_t dcs = g->col_stride[FM_MATMUL_D];
    for (int64_t j = 0; j < g->n; j++)
        d[j * dcs] = 0;
    for (int64_t k = 0; k < g->k; k++)
        if (a[k * g->col_stride[FM_MATMUL_A]]) /* any nonzero byte is true, as NumPy reads a bool */
            for (int64_t j = 0; j < g->n; j++)
                d[j * dcs] |= b[k * brs + j * bcs] != 0;
}

static fm_status intgemm_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const intgemm_impl *pl = p->impl;
    const fm_matmul_geom *g = &pl->g;
    const size_t es = fm_dtype_size(g->dtype);
    const char *a = ptrs[FM_MATMUL_A], *b = ptrs[FM_MATMUL_B];
    char *d = ptrs[FM_MATMUL_D];
    const int64_t rows = g->batch_count * g->m;
#pragma omp parallel for schedule(static) num_threads(pl->threads) if (pl->threads > 1)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t bi = r / g->m, i = r % g->m;
        const int64_t e = (int64_t)es;
        const char *ar = a + (fm_matmul_batch_offset(g, FM_MATMUL_A, bi) + i * g->row_stride[FM_MATMUL_A]) *
                                 e;
        const char *bb = b + fm_matmul_batch_offset(g, FM_MATMUL_B, bi) * e;
        char *dr = d + (fm_matmul_batch_offset(g, FM_MATMUL_D, bi) + i * g->row_stride[FM_MATMUL_D]) * e;
        if (g->dtype == FM_BOOL)
            row_bool(g, (const uint8_t *)ar, (const uint8_t *)bb, (uint8_t *)dr);
        else if (es == 1)
            row_u8(g, (const uint8_t *)ar, (const uint8_t *)bb, (uint8_t *)dr);
        else if (es == 2)
            row_u16(g, (const uint16_t *)ar, (const uint16_t *)bb, (uint16_t *)dr);
        else if (es == 4)
            row_u32(g, (const uint32_t *)ar, (const uint32_t *)bb, (uint32_t *)dr);
        else
            row_u64(g, (const uint64_t *)ar, (const uint64_t *)bb, (uint64_t *)dr);
    }
    return FM_OK;
}

static fm_status intgemm_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    const fm_dtype dt = p->t[FM_MATMUL_D].dtype;
    if (!fm_dtype_is_integer(dt))
        return fm_fail(FM_ERR_NOT_APPLICABLE, "it computes integer and bool dtypes only");
    if (p->u.matmul.cpu_strategy != FM_CPU_STRATEGY_AUTO || p->u.matmul.panel_rows != 0)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "cpu_strategy and panel_rows choose how float products are cut "
                       "(integer and bool matmul has one way: leave them at auto / 0)");
    intgemm_impl pl;
    fm_matmul_geom_from_problem(p, &pl.g);
    /* a thread team only where there is work for it (the float plans' 4 MFLOP rule) */
    const double ops = (double)pl.g.batch_count * (double)pl.g.m * (double)pl.g.n * (double)pl.g.k;
    pl.threads = ops < 4e6 ? 1 : p->u.matmul.num_threads;
    if (!(out->impl = malloc(sizeof pl)))
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory while planning");
    *(intgemm_impl *)out->impl = pl;
    out->execute = intgemm_execute;
    out->destroy_impl = free;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        out->required_align[i] = fm_dtype_size(dt);
    char batch[32] = "";
    if (pl.g.batch_count != 1)
        snprintf(batch, sizeof batch, " batch=%lld", (long long)pl.g.batch_count);
    fm_plan_set_describe(out, "matmul cpu/intgemm %s %lldx%lldx%lld%s exact (%s) threads=%d",
                         fm_dtype_name(dt), (long long)pl.g.m, (long long)pl.g.n, (long long)pl.g.k, batch,
                         dt == FM_BOOL ? "or of ands" : "wrapping", pl.threads);
    return FM_OK;
}

const fm_backend fm_backend_intgemm_matmul = {
    .name = "intgemm",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_MATMUL,
    .priority = 2, /* the only CPU backend for integer dtypes; it declines the rest at once */
    .plan = intgemm_plan,
};
