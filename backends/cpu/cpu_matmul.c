/* cpu_matmul.c : the planning, the temporary D and the tiles' execute both CPU matmul backends
 * share (cpu_matmul.h): checks, the cut of D into tiles, describe(), autotune's candidates. */
#include "cpu_matmul.h"

#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PANEL_TARGET_BYTES (2 * 1024 * 1024) /* a D panel that stays in L2 or near L3 */
#define SMALL_FLOPS 4.0e6                    /* below this, one thread beats a team */

/* How BLAS can read a rows x cols matrix with strides (rs, cs); stride of an
 * extent-1 axis does not matter. */
static fm_cpu_mm_layout blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs)
{
    fm_cpu_mm_layout l = {0, 0, 0};
    if ((cs == 1 || cols <= 1) && (rows <= 1 || rs >= (cols > 1 ? cols : 1))) {
        l.ld = rows <= 1 ? (cols > 1 ? cols : 1) : rs;
    } else if ((rs == 1 || rows <= 1) && (cols <= 1 || cs >= (rows > 1 ? rows : 1))) {
        l.trans = 1;
        l.ld = cols <= 1 ? (rows > 1 ? rows : 1) : cs;
    } else {
        l.copy = 1;
        l.ld = cols > 1 ? cols : 1;
    }
    return l;
}

fm_status fm_cpu_mm_init(const fm_problem *p, fm_cpu_mm *mm, fm_cpu_mm_layout *la, fm_cpu_mm_layout *lb)
{
    memset(mm, 0, sizeof *mm);
    fm_matmul_geom_from_problem(p, &mm->g);
    mm->mp = p->u.matmul;
    const fm_matmul_geom *g = &mm->g;
    if (p->t[FM_MATMUL_A].dtype == FM_F8E4M3 || p->t[FM_MATMUL_A].dtype == FM_F8E5M2)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fp8 inputs are not supported on cpu (cuBLASLt on sm_89+ takes them); "
                       "convert to f32, or use execution='cuda'");
    if (g->dtype == FM_F16 || g->dtype == FM_BF16)
        return fm_fail(FM_ERR_NOT_APPLICABLE,
                       "dtype %s is not supported on cpu (the OpenBLAS backend computes f32, f64, c64 and "
                       "c128); convert to f32, or use execution='cuda'", fm_dtype_name(g->dtype));
    if (fm_dtype_is_integer(g->dtype))
        return fm_fail(FM_ERR_NOT_APPLICABLE, "dtype %s is computed exactly by the intgemm backend",
                       fm_dtype_name(g->dtype));
    mm->es = fm_dtype_size(g->dtype);
    if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX)
        return fm_fail(FM_ERR_TOO_LARGE,
                       "matmul: %lldx%lldx%lld exceeds the cpu backend's 32-bit BLAS index range (max %d per "
                       "dimension)", (long long)g->m, (long long)g->n, (long long)g->k, INT_MAX);
    *la = blas_layout(g->m, g->k, g->row_stride[FM_MATMUL_A], g->col_stride[FM_MATMUL_A]);
    *lb = blas_layout(g->k, g->n, g->row_stride[FM_MATMUL_B], g->col_stride[FM_MATMUL_B]);
    if (la->ld > INT_MAX || lb->ld > INT_MAX)
        return fm_fail(FM_ERR_TOO_LARGE, "matmul: a leading dimension of a or b exceeds the 32-bit BLAS range");
    int64_t drs = g->row_stride[FM_MATMUL_D], dcs = g->col_stride[FM_MATMUL_D];
    mm->d_direct = (dcs == 1 || g->n <= 1) && (g->m <= 1 || drs >= (g->n > 1 ? g->n : 1)) && drs <= INT_MAX;
    if (!mm->d_direct && (double)g->batch_count * (double)g->m * (double)g->n * (double)mm->es > 1e15)
        return fm_fail(FM_ERR_TOO_LARGE, "matmul: d is too large for a temporary copy");
    return FM_OK;
}

int fm_cpu_mm_threads(const fm_cpu_mm *mm)
{
    const fm_matmul_geom *g = &mm->g;
    double flops = 2.0 * (double)g->m * (double)g->n * (double)(g->k > 0 ? g->k : 1) * (double)g->batch_count;
    if (flops < SMALL_FLOPS && mm->mp.cpu_strategy != FM_CPU_STRATEGY_BLAS_THREADS)
        return 1; /* an explicit strategy is honoured at any size (tests, autotune) */
    return mm->mp.num_threads;
}

void fm_cpu_mm_set_tiles(fm_cpu_mm *mm, int threads, int64_t rows, int64_t cols)
{
    const fm_matmul_geom *g = &mm->g;
    int64_t m = g->m > 0 ? g->m : 1, n = g->n > 0 ? g->n : 1;
    int64_t batch = g->batch_count > 0 ? g->batch_count : 1;
    mm->panel_rows = rows;
    mm->n_row_panels = (m + rows - 1) / rows;
    /* Still fewer tiles than threads: split columns too, in blocks of 128 so relu
     * mask bytes never straddle two blocks. */
    int64_t row_items = mm->n_row_panels * batch;
    if (cols == n && row_items < threads && n >= 256) {
        int64_t want = (threads + row_items - 1) / row_items;
        cols = fm_min_i64(((n + want - 1) / want + 127) / 128 * 128, n);
    }
    mm->col_block = cols;
    mm->n_col_blocks = (n + cols - 1) / cols;
    mm->items = mm->n_row_panels * mm->n_col_blocks * batch;
    mm->threads = (int)fm_max_i64(1, fm_min_i64(threads, mm->items));
}

/* Split D (per batch) into a pm x pn grid of tiles for `parts` threads, choosing
 * the grid that packs the least: every GEMM call packs its rows of A and its
 * columns of B, so a pm x pn grid packs pn*m*k + pm*k*n elements. The tiles' rows and
 * columns (column blocks a multiple of 128) into *rows, *cols. */
static void grid_for(int64_t m, int64_t n, int64_t k, int parts, int64_t *rows, int64_t *cols)
{
    int64_t best_pm = 1, best_pn = parts;
    double best = -1;
    for (int64_t pm = 1; pm <= parts; pm++) {
        int64_t pn = (parts + pm - 1) / pm;
        if (pm > m || (pn > 1 && n / pn < 128))
            continue;
        double cost = (double)pn * (double)m * (double)k + (double)pm * (double)k * (double)n;
        if (best < 0 || cost < best) {
            best = cost;
            best_pm = pm;
            best_pn = pn;
        }
    }
    if (best < 0) {
        best_pm = fm_min_i64(parts, m);
        best_pn = 1;
    }
    *rows = (m + best_pm - 1) / best_pm;
    *cols = best_pn > 1 ? fm_min_i64(((n + best_pn - 1) / best_pn + 127) / 128 * 128, n) : n;
}

/* Compute-bound: one big tile per thread (OpenBLAS blocks inside the call), tiles shaped to
 * pack the least; the epilogue pass then costs O(1/k). */
static void compute_bound_tiles(fm_cpu_mm *mm, int threads, int64_t *rows_out, int64_t *cols_out)
{
    const fm_matmul_geom *g = &mm->g;
    int64_t m = g->m > 0 ? g->m : 1, n = g->n > 0 ? g->n : 1;
    int64_t batch = g->batch_count > 0 ? g->batch_count : 1;
    int64_t rows, cols;
    int parts = (int)fm_max_i64(1, (threads + batch - 1) / batch);
    grid_for(m, n, g->k, parts, &rows, &cols);
    /* Four tiles per thread, handed out as threads come free, where tiles stay >= 256 x 256: the
     * vCPUs are not equal (docs/design.md, Lessons from measurement). */
    if (batch == 1 && threads >= 4) {
        int64_t rows4, cols4;
        grid_for(m, n, g->k, 4 * parts, &rows4, &cols4);
        if (rows4 >= 256 && cols4 >= 256 && ((m + rows4 - 1) / rows4) * ((n + cols4 - 1) / cols4) >= 3 * parts) {
            rows = rows4;
            cols = cols4;
            mm->dynamic = 1;
        }
    }
    *rows_out = rows;
    *cols_out = cols;
}

/* Memory-bound (small k): panels of at most PANEL_TARGET_BYTES, still in cache for the epilogue,
 * but not shorter than 128 rows: every cblas call repacks B (docs/design.md, Lessons). */
static int64_t memory_bound_rows(const fm_cpu_mm *mm, int threads)
{
    const fm_matmul_geom *g = &mm->g;
    int64_t m = g->m > 0 ? g->m : 1, n = g->n > 0 ? g->n : 1;
    int64_t batch = g->batch_count > 0 ? g->batch_count : 1;
    int64_t fit = (int64_t)(PANEL_TARGET_BYTES / ((size_t)n * mm->es));
    int64_t rows = fm_max_i64(fm_min_i64(fit, 512), 128);
    /* at least four panels per thread: bigger ones leave L2 before the epilogue (docs/design.md,
     * Lessons from measurement: bigger skinny panels) */
    int64_t balanced = (m * batch) / (4 * (int64_t)threads);
    if (balanced < rows)
        rows = fm_max_i64(balanced, 64);
    rows = fm_min_i64(rows, m);
    /* the panels are shared out statically: a count that is not a multiple of the threads
     * leaves some threads a panel more (m = 10000 on 16 threads: 65 panels of 156 rows, one
     * thread doing 5 where the average is 4.06); spread m over the next multiple instead */
    const int64_t panels = (m + rows - 1) / rows;
    if (threads > 1 && batch == 1 && panels > threads && panels % threads) {
        const int64_t spread = fm_part_for_threads(m, panels, threads);
        if (spread >= 64)
            rows = spread;
    }
    return rows;
}

void fm_cpu_mm_choose_tiles(fm_cpu_mm *mm, int threads)
{
    const fm_matmul_geom *g = &mm->g;
    int64_t m = g->m > 0 ? g->m : 1, n = g->n > 0 ? g->n : 1;
    int64_t rows, cols = n;
    if (mm->mp.panel_rows > 0)
        rows = fm_min_i64(mm->mp.panel_rows, m);
    else if (g->k >= FM_CPU_MM_LARGE_K)
        compute_bound_tiles(mm, threads, &rows, &cols);
    else
        rows = memory_bound_rows(mm, threads);
    fm_cpu_mm_set_tiles(mm, threads, rows, cols);
}

fm_status fm_cpu_mm_open_d(const fm_cpu_mm *mm, fm_cpu_mm_io *io, void **tmp)
{
    const fm_matmul_geom *g = &mm->g;
    *tmp = NULL;
    if (mm->d_direct) {
        io->ldd = g->m > 1 ? g->row_stride[FM_MATMUL_D] : g->n;
        return FM_OK;
    }
    /* Compute into a contiguous temp, copy out after. If C is D itself, the
     * preload reads it from the user's memory, which is still intact. */
    if (!(*tmp = fm_malloc_aligned((size_t)(g->batch_count * g->m * g->n) * mm->es, 64)))
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory for a temporary d");
    io->d = *tmp;
    io->ldd = g->n;
    io->d_batch = g->m * g->n;
    return FM_OK;
}

void fm_cpu_mm_close_d(const fm_cpu_mm *mm, char *user_d, const void *tmp)
{
    const fm_matmul_geom *g = &mm->g;
    if (!tmp)
        return;
    for (int64_t b = 0; b < g->batch_count; b++)
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++)
                memcpy(user_d + (fm_matmul_batch_offset(g, FM_MATMUL_D, b) + i * g->row_stride[FM_MATMUL_D] +
                                 j * g->col_stride[FM_MATMUL_D]) * (int64_t)mm->es,
                       (const char *)tmp + (size_t)((b * g->m + i) * g->n + j) * mm->es, mm->es);
}

fm_status fm_cpu_mm_install(const fm_cpu_mm *mm, const void *impl, size_t size, fm_execute_fn execute,
                            const char *backend, int passes, const char *tiling, const char *suffix,
                            fm_plan *out)
{
    if (!(out->impl = malloc(size)))
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory while planning");
    memcpy(out->impl, impl, size);
    out->execute = execute;
    out->destroy_impl = free;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        out->required_align[i] = (i == FM_MATMUL_AUX && fm_epilogue_aux_is_mask(mm->mp.epilogue))
                                     ? 1
                                     : mm->es / (fm_dtype_is_complex(mm->g.dtype) ? 2 : 1);
    const fm_matmul_geom *g = &mm->g;
    char epi[96], batch[32] = "";
    fm_epilogue_format(mm->mp.epilogue, epi, sizeof epi);
    if (g->batch_count != 1)
        snprintf(batch, sizeof batch, " batch=%lld", (long long)g->batch_count);
    fm_plan_set_describe(out, "matmul cpu/%s %s %lldx%lldx%lld%s epilogue=%s passes=%d %s=%lldx%lld threads=%d"
                         "%s%s", backend, fm_dtype_name(g->dtype), (long long)g->m, (long long)g->n,
                         (long long)g->k, batch, epi, passes, tiling, (long long)mm->panel_rows,
                         (long long)mm->col_block, mm->threads, mm->dynamic ? " tiles=dynamic" : "", suffix);
    return FM_OK;
}

int fm_cpu_mm_tune_heights(const fm_problem *p, int strategy, fm_problem *cand, int *group, int max)
{
    static const int32_t heights[] = {0, 16, 32, 64, 128, 256, 512, 1024};
    const fm_tensor *d = &p->t[FM_MATMUL_D];
    int n = 0;
    for (int h = 0; h < (int)(sizeof heights / sizeof heights[0]) && n < max; h++) {
        if (heights[h] > d->shape[d->ndim - 2])
            continue;
        cand[n] = *p;
        cand[n].u.matmul.panel_rows = heights[h];
        cand[n].u.matmul.cpu_strategy = strategy;
        group[n++] = -1;
    }
    return n;
}

void fm_cpu_mm_run(const fm_cpu_mm *mm, int64_t units, void (*pack)(const void *arg, int64_t u),
                   void (*item)(const void *arg, int64_t it, int tid), const void *arg)
{
    fm_blas_single_begin(); /* a tiles plan: never alongside a blas-threads one (cpu_threads.c) */
    if (mm->threads <= 1 || mm->items == 1) {
        for (int64_t u = 0; u < units; u++)
            pack(arg, u);
        for (int64_t it = 0; it < mm->items; it++)
            item(arg, it, 0);
    } else {
#pragma omp parallel num_threads(mm->threads)
        {
            if (units > 0) { /* every thread reads all of a shared B: pack it first, together */
#pragma omp for schedule(static)
                for (int64_t u = 0; u < units; u++)
                    pack(arg, u);
            }
            if (mm->dynamic) { /* tiles handed out as threads come free: compute_bound_tiles, kernel_tiles */
#pragma omp for schedule(dynamic, 1) nowait
                for (int64_t it = 0; it < mm->items; it++)
                    item(arg, it, omp_get_thread_num());
            } else {
                /* static: each thread gets consecutive panels, so a fresh output's huge pages are
                 * first touched by one thread each; with dynamic, 1 four threads faulted the same
                 * 2 MiB page (8192x1024x64 from Python: 14.3 vs 10.3 ms) */
#pragma omp for schedule(static) nowait
                for (int64_t it = 0; it < mm->items; it++)
                    item(arg, it, omp_get_thread_num());
            }
        }
    }
    fm_blas_single_end();
}
