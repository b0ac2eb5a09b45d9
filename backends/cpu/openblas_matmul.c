/* openblas_matmul.c : CPU matmul through cblas_?gemm with the epilogue fused
 * panel by panel. D is cut into row panels (and column blocks when rows are too
 * few for the threads); each panel is one single-threaded GEMM run by one of the
 * library's own threads: bias and beta*C are preloaded into the panel (GEMM beta =
 * 1) and the activation runs right after the GEMM, while the panel is in cache.
 * OpenBLAS itself is kept at one thread so the two never oversubscribe. */
#include "cpu_epilogue.h"
#include "epilogue.h"

#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_pool.h"
#include "openblas_threads.h"


#define PANEL_TARGET_BYTES (2 * 1024 * 1024) /* a D panel that stays in L2 or near L3 */
#define SMALL_FLOPS 4.0e6               /* below this, one thread beats a team */
#define LARGE_K 256                     /* from here on the GEMM, not the epilogue, dominates */

typedef struct mm_layout {
    int trans; /* operand stored transposed (column-major) */
    int64_t ld;
    int copy; /* layout BLAS cannot take: packed into a contiguous copy at execute */
} mm_layout;

typedef struct openblas_plan {
    fm_matmul_geom g;
    fm_matmul_params mp;
    mm_layout la, lb;
    int d_direct;         /* D is row-major with unit column stride */
    int blas_threaded;    /* FM_CPU_STRATEGY_BLAS_THREADS */
    int64_t panel_rows, col_block;
    int64_t n_row_panels, n_col_blocks, items;
    int threads;
    size_t es;
} openblas_plan;

static fm_status probe(void **state, const char **why)
{
    (void)why;
    *state = NULL;
    fm_blas_threads_init();
    return FM_OK;
}

/* How BLAS can read a rows x cols matrix with strides (rs, cs); stride of an
 * extent-1 axis does not matter. */
static mm_layout blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs)
{
    mm_layout l = {0, 0, 0};
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

/* ---- GEMM on one panel ---- */
static void gemm(const openblas_plan *pl, int64_t rows, int64_t cols, const void *a, int64_t lda, const void *b,
                 int64_t ldb, void *d, int64_t ldd, int accumulate)
{
    const enum CBLAS_TRANSPOSE ta = pl->la.trans ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = pl->lb.trans ? CblasTrans : CblasNoTrans;
    const int m = (int)rows, n = (int)cols, k = (int)pl->g.k;
    const double *al = pl->mp.alpha;
    switch (pl->g.dtype) {
    case FM_F32:
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, (float)al[0], a, (int)lda, b, (int)ldb, accumulate ? 1.0f : 0.0f,
                    d, (int)ldd);
        break;
    case FM_F64:
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, al[0], a, (int)lda, b, (int)ldb, accumulate ? 1.0 : 0.0, d,
                    (int)ldd);
        break;
    case FM_C64: {
        const float alpha[2] = {(float)al[0], (float)al[1]}, beta[2] = {accumulate ? 1.0f : 0.0f, 0.0f};
        cblas_cgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, (int)lda, b, (int)ldb, beta, d, (int)ldd);
        break;
    }
    case FM_C128: {
        const double beta[2] = {accumulate ? 1.0 : 0.0, 0.0};
        cblas_zgemm(CblasRowMajor, ta, tb, m, n, k, al, a, (int)lda, b, (int)ldb, beta, d, (int)ldd);
        break;
    }
    default:
        break;
    }
}

/* ---- packing of layouts BLAS cannot read ---- */
static void copy_matrix(size_t es, int64_t rows, int64_t cols, const char *src, int64_t rs, int64_t cs, char *dst)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            memcpy(dst + (size_t)(i * cols + j) * es, src + (i * rs + j * cs) * (int64_t)es, es);
}

/* Pack every batch of `slot` into a contiguous (batch, rows, cols) buffer. */
static void *pack_operand(const openblas_plan *pl, int slot, const char *base, int64_t rows, int64_t cols)
{
    const fm_matmul_geom *g = &pl->g;
    size_t per = (size_t)(rows * cols) * pl->es;
    char *buf = fm_malloc_aligned(per * (size_t)(g->batch_count > 0 ? g->batch_count : 1), 64);
    if (!buf)
        return NULL;
#pragma omp parallel for num_threads(pl->threads) schedule(static) if (g->batch_count > 1)
    for (int64_t b = 0; b < g->batch_count; b++)
        copy_matrix(pl->es, rows, cols, base + fm_matmul_batch_offset(g, slot, b) * (int64_t)pl->es,
                    g->row_stride[slot], g->col_stride[slot], buf + per * (size_t)b);
    return buf;
}

/* ---- one work item: (batch, row panel, column block) ---- */
typedef struct exec_args {
    const char *a, *b, *c, *bias;
    char *d, *aux;
    int64_t ldd, d_batch; /* D geometry actually written (user's or a temp) */
    int a_packed, b_packed;
} exec_args;

/* The epilogue's view of rows [r0, r0+rows) x cols [c0, c0+cols) of batch b. */
static fm_cpu_panel make_panel(const openblas_plan *pl, const exec_args *x, int64_t b, int64_t r0, int64_t rows,
                               int64_t c0, int64_t cols)
{
    const fm_matmul_geom *g = &pl->g;
    const int64_t es = (int64_t)pl->es;
    fm_cpu_panel p = {0};
    p.rows = rows;
    p.cols = cols;
    p.ldd = x->ldd;
    int64_t d_off = pl->d_direct ? fm_matmul_batch_offset(g, FM_MATMUL_D, b) : b * x->d_batch;
    p.d = x->d + (d_off + r0 * x->ldd + c0) * es;
    if (x->c)
        p.c = x->c + (fm_matmul_batch_offset(g, FM_MATMUL_C, b) + r0 * g->row_stride[FM_MATMUL_C] +
                      c0 * g->col_stride[FM_MATMUL_C]) * es;
    p.c_rs = g->row_stride[FM_MATMUL_C];
    p.c_cs = g->col_stride[FM_MATMUL_C];
    if (x->bias)
        p.bias = x->bias + (fm_matmul_batch_offset(g, FM_MATMUL_BIAS, b) + c0 * g->col_stride[FM_MATMUL_BIAS]) * es;
    p.bias_cs = g->col_stride[FM_MATMUL_BIAS];
    p.col0 = c0;
    p.last_col_block = (c0 + cols == g->n);
    if (x->aux) {
        int relu = (pl->mp.epilogue & FM_EPILOGUE_RELU) != 0;
        int64_t aes = relu ? 1 : es;
        p.aux_ld = g->row_stride[FM_MATMUL_AUX];
        if (g->m == 1 || p.aux_ld == 0)
            p.aux_ld = relu ? fm_relu_mask_row_bytes(g->n) : g->n;
        p.mask_row_bytes = fm_relu_mask_row_bytes(g->n);
        p.aux = x->aux + (fm_matmul_batch_offset(g, FM_MATMUL_AUX, b) + r0 * p.aux_ld + (relu ? 0 : c0)) * aes;
    }
    return p;
}

/* Operand origins of batch b. */
static const char *batch_a(const openblas_plan *pl, const exec_args *x, int64_t b)
{
    const fm_matmul_geom *g = &pl->g;
    return x->a_packed ? x->a + (size_t)(b * g->m * g->k) * pl->es
                       : x->a + fm_matmul_batch_offset(g, FM_MATMUL_A, b) * (int64_t)pl->es;
}

static const char *batch_b(const openblas_plan *pl, const exec_args *x, int64_t b)
{
    const fm_matmul_geom *g = &pl->g;
    return x->b_packed ? x->b + (size_t)(b * g->k * g->n) * pl->es
                       : x->b + fm_matmul_batch_offset(g, FM_MATMUL_B, b) * (int64_t)pl->es;
}

/* One work item of the tiles strategy: (batch, row panel, column block), one
 * single-threaded GEMM with the epilogue before and after it. */
static void run_item(const openblas_plan *pl, const exec_args *x, int64_t item)
{
    const fm_matmul_geom *g = &pl->g;
    const int64_t es = (int64_t)pl->es;
    int64_t per_batch = pl->n_row_panels * pl->n_col_blocks;
    int64_t b = item / per_batch, rem = item % per_batch;
    int64_t r0 = (rem / pl->n_col_blocks) * pl->panel_rows, c0 = (rem % pl->n_col_blocks) * pl->col_block;
    int64_t rows = fm_min_i64(pl->panel_rows, g->m - r0), cols = fm_min_i64(pl->col_block, g->n - c0);
    const char *a = batch_a(pl, x, b) + (pl->la.trans ? r0 : r0 * pl->la.ld) * es;
    const char *bm = batch_b(pl, x, b) + (pl->lb.trans ? c0 * pl->lb.ld : c0) * es;
    fm_cpu_panel p = make_panel(pl, x, b, r0, rows, c0, cols);
    int preloaded = fm_cpu_preload(g->dtype, &p, pl->mp.beta);
    if (g->k > 0)
        gemm(pl, rows, cols, a, pl->la.ld, bm, pl->lb.ld, p.d, x->ldd, preloaded);
    else if (!preloaded)
        for (int64_t i = 0; i < rows; i++)
            memset((char *)p.d + i * x->ldd * es, 0, (size_t)cols * pl->es);
    fm_cpu_activate(g->dtype, pl->mp.epilogue, &p);
}

/* ---- the blas-threads strategy ---- */
/* OpenBLAS threads the whole GEMM (sharing packed panels between its threads,
 * which independent per-tile calls cannot); the preload and the activation are
 * passes over row chunks around it, run by the passive pool (cpu_pool.c) so no
 * spinning thread competes with OpenBLAS's. The passes cost O(mn) against the
 * GEMM's O(mnk). */
typedef struct pass_job {
    const openblas_plan *pl;
    const exec_args *x;
    int64_t b, rows; /* one contiguous block of rows per thread (see execute) */
    int activate;
} pass_job;

static void pass_chunk(void *arg, int64_t ci)
{
    pass_job *j = arg;
    const fm_matmul_geom *g = &j->pl->g;
    if (ci * j->rows >= g->m)
        return;
    fm_cpu_panel p = make_panel(j->pl, j->x, j->b, ci * j->rows, fm_min_i64(j->rows, g->m - ci * j->rows), 0, g->n);
    if (j->activate)
        fm_cpu_activate(g->dtype, j->pl->mp.epilogue, &p);
    else
        fm_cpu_preload(g->dtype, &p, j->pl->mp.beta);
}

static void run_blas_threaded(const openblas_plan *pl, const exec_args *x)
{
    const fm_matmul_geom *g = &pl->g;
    const int64_t rows = (g->m + pl->threads - 1) / pl->threads, chunks = (g->m + rows - 1) / rows;
    const int has_act = (pl->mp.epilogue & (FM_EPILOGUE_RELU | FM_EPILOGUE_GELU)) != 0;
    /* the condition under which fm_cpu_preload writes: then the GEMM accumulates */
    const int has_pre = x->bias || (x->c && (pl->mp.beta[0] != 0.0 || pl->mp.beta[1] != 0.0));
    for (int64_t b = 0; b < g->batch_count; b++) {
        pass_job j = {pl, x, b, rows, 0};
        if (has_pre)
            fm_pool_run(pl->threads, chunks, pass_chunk, &j);
        fm_cpu_panel whole = make_panel(pl, x, b, 0, g->m, 0, g->n);
        fm_blas_threads_begin(pl->threads);
        gemm(pl, g->m, g->n, batch_a(pl, x, b), pl->la.ld, batch_b(pl, x, b), pl->lb.ld, whole.d, x->ldd, has_pre);
        fm_blas_threads_end();
        if (has_act) {
            j.activate = 1;
            fm_pool_run(pl->threads, chunks, pass_chunk, &j);
        }
    }
}

static fm_status execute(const fm_plan *plan, void *const *ptrs, void *stream)
{
    (void)stream;
    const openblas_plan *pl = plan->impl;
    const fm_matmul_geom *g = &pl->g;
    if (g->m == 0 || g->n == 0 || g->batch_count == 0)
        return FM_OK;
    exec_args x = {ptrs[FM_MATMUL_A], ptrs[FM_MATMUL_B], ptrs[FM_MATMUL_C], ptrs[FM_MATMUL_BIAS],
                   ptrs[FM_MATMUL_D], ptrs[FM_MATMUL_AUX], 0, 0, 0, 0};
    void *a_tmp = NULL, *b_tmp = NULL, *d_tmp = NULL;
    if (pl->la.copy && g->k > 0) {
        if (!(a_tmp = pack_operand(pl, FM_MATMUL_A, x.a, g->m, g->k)))
            return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory packing a");
        x.a = a_tmp;
        x.a_packed = 1;
    }
    if (pl->lb.copy && g->k > 0) {
        if (!(b_tmp = pack_operand(pl, FM_MATMUL_B, x.b, g->k, g->n))) {
            fm_free_aligned(a_tmp);
            return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory packing b");
        }
        x.b = b_tmp;
        x.b_packed = 1;
    }
    char *user_d = x.d;
    if (pl->d_direct) {
        x.ldd = g->m > 1 ? g->row_stride[FM_MATMUL_D] : g->n;
    } else {
        /* Compute into a contiguous temp, copy out after. If C is D itself, the
         * preload reads it from the user's memory, which is still intact. */
        if (!(d_tmp = fm_malloc_aligned((size_t)(g->batch_count * g->m * g->n) * pl->es, 64))) {
            fm_free_aligned(a_tmp);
            fm_free_aligned(b_tmp);
            return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory for a temporary d");
        }
        x.d = d_tmp;
        x.ldd = g->n;
        x.d_batch = g->m * g->n;
    }
    if (pl->blas_threaded) {
        run_blas_threaded(pl, &x);
    } else {
        fm_blas_single_begin();
        if (pl->threads <= 1 || pl->items == 1) {
            for (int64_t it = 0; it < pl->items; it++)
                run_item(pl, &x, it);
        } else {
            /* static: each thread gets consecutive panels, so a fresh output's huge
             * pages are first touched by one thread each; with dynamic, 1 four threads
             * faulted the same 2 MiB page (8192x1024x64 from Python: 14.3 vs 10.3 ms) */
#pragma omp parallel for num_threads(pl->threads) schedule(static)
            for (int64_t it = 0; it < pl->items; it++)
                run_item(pl, &x, it);
        }
        fm_blas_single_end();
    }

    if (d_tmp) {
        for (int64_t b = 0; b < g->batch_count; b++)
            for (int64_t i = 0; i < g->m; i++)
                for (int64_t j = 0; j < g->n; j++)
                    memcpy(user_d + (fm_matmul_batch_offset(g, FM_MATMUL_D, b) + i * g->row_stride[FM_MATMUL_D] +
                                     j * g->col_stride[FM_MATMUL_D]) * (int64_t)pl->es,
                           (char *)d_tmp + (size_t)((b * g->m + i) * g->n + j) * pl->es, pl->es);
    }
    fm_free_aligned(a_tmp);
    fm_free_aligned(b_tmp);
    fm_free_aligned(d_tmp);
    return FM_OK;
}

/* ---- planning ---- */
/* Split D (per batch) into a pm x pn grid of tiles for `parts` threads, choosing
 * the grid that packs the least: every GEMM call packs its rows of A and its
 * columns of B, so a pm x pn grid packs pn*m*k + pm*k*n elements. */
static void grid_for(int64_t m, int64_t n, int64_t k, int parts, int64_t *pm_out, int64_t *pn_out)
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
    *pm_out = best_pm;
    *pn_out = best_pn;
}

static void choose_panels(openblas_plan *pl)
{
    const fm_matmul_geom *g = &pl->g;
    double flops = 2.0 * (double)g->m * (double)g->n * (double)(g->k > 0 ? g->k : 1) * (double)g->batch_count;
    int threads = pl->mp.num_threads;
    if (flops < SMALL_FLOPS && pl->mp.cpu_strategy != FM_CPU_STRATEGY_BLAS_THREADS)
        threads = 1; /* an explicit strategy is honoured at any size (tests, autotune) */
    int64_t m = g->m > 0 ? g->m : 1, n = g->n > 0 ? g->n : 1;
    int64_t batch = g->batch_count > 0 ? g->batch_count : 1;
    int64_t rows, cols = n;
    if (pl->mp.cpu_strategy == FM_CPU_STRATEGY_BLAS_THREADS && threads > 1) {
        pl->blas_threaded = 1;
        rows = m;
    } else if (pl->mp.panel_rows > 0) {
        rows = fm_min_i64(pl->mp.panel_rows, m);
    } else if (g->k >= LARGE_K) {
        /* Compute-bound: one big tile per thread (OpenBLAS blocks inside the call),
         * tiles shaped to pack the least; the epilogue pass then costs O(1/k). */
        int parts = (int)fm_max_i64(1, (threads + batch - 1) / batch);
        int64_t pm, pn;
        grid_for(m, n, g->k, parts, &pm, &pn);
        rows = (m + pm - 1) / pm;
        if (pn > 1)
            cols = fm_min_i64(((n + pn - 1) / pn + 127) / 128 * 128, n);
    } else {
        /* Memory-bound (small k): the epilogue's traffic matters, so panels of at most
         * PANEL_TARGET_BYTES that are still in cache when the activation runs; but each
         * GEMM call repacks B, so not shorter than 128 rows (64-row panels measured
         * 1.25x slower than 512-row ones on 8192x1024x64). */
        int64_t fit = (int64_t)(PANEL_TARGET_BYTES / ((size_t)n * pl->es));
        rows = fm_max_i64(fm_min_i64(fit, 512), 128);
        /* at least four panels per thread, so the dynamic schedule can balance them:
         * on 16 cores 8192x1024x64 ran 1.25x faster fused with 128-row panels (4 per
         * thread) than with 512 (1 per thread); on 2 cores 512 stays the best */
        int64_t balanced = (m * batch) / (4 * (int64_t)threads);
        if (balanced < rows)
            rows = fm_max_i64(balanced, 64);
        rows = fm_min_i64(rows, m);
    }
    pl->panel_rows = rows;
    pl->n_row_panels = (m + rows - 1) / rows;
    /* Still fewer tiles than threads: split columns too, in blocks of 128 so relu
     * mask bytes never straddle two blocks. */
    int64_t row_items = pl->n_row_panels * batch;
    if (!pl->blas_threaded && cols == n && row_items < threads && n >= 256) {
        int64_t want = (threads + row_items - 1) / row_items;
        cols = fm_min_i64(((n + want - 1) / want + 127) / 128 * 128, n);
    }
    pl->col_block = cols;
    pl->n_col_blocks = (n + cols - 1) / cols;
    pl->items = pl->n_row_panels * pl->n_col_blocks * batch;
    pl->threads = pl->blas_threaded ? threads : (int)fm_max_i64(1, fm_min_i64(threads, pl->items));
}

static fm_status plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    (void)ctx, (void)state;
    if (p->op != FM_OP_MATMUL)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "only matmul");
    openblas_plan pl;
    memset(&pl, 0, sizeof pl);
    fm_matmul_geom_from_problem(p, &pl.g);
    pl.mp = p->u.matmul;
    const fm_matmul_geom *g = &pl.g;
    if (g->dtype == FM_F16 || g->dtype == FM_BF16)
        return fm_fail(FM_ERR_NOT_APPLICABLE,
                       "dtype %s is not supported on cpu (the OpenBLAS backend computes f32, f64, c64 and "
                       "c128); convert to f32, or use execution='cuda'", fm_dtype_name(g->dtype));
    if (pl.mp.epilogue & ~(FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU | FM_EPILOGUE_GELU | FM_EPILOGUE_AUX))
        return fm_fail(FM_ERR_NOT_APPLICABLE, "this epilogue is not implemented on the cpu backend yet");
    pl.es = fm_dtype_size(g->dtype);
    if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX)
        return fm_fail(FM_ERR_TOO_LARGE,
                       "matmul: %lldx%lldx%lld exceeds the cpu backend's 32-bit BLAS index range (max %d per "
                       "dimension)", (long long)g->m, (long long)g->n, (long long)g->k, INT_MAX);
    pl.la = blas_layout(g->m, g->k, g->row_stride[FM_MATMUL_A], g->col_stride[FM_MATMUL_A]);
    pl.lb = blas_layout(g->k, g->n, g->row_stride[FM_MATMUL_B], g->col_stride[FM_MATMUL_B]);
    if (pl.la.ld > INT_MAX || pl.lb.ld > INT_MAX)
        return fm_fail(FM_ERR_TOO_LARGE, "matmul: a leading dimension of a or b exceeds the 32-bit BLAS range");
    int64_t drs = g->row_stride[FM_MATMUL_D], dcs = g->col_stride[FM_MATMUL_D];
    pl.d_direct = (dcs == 1 || g->n <= 1) && (g->m <= 1 || drs >= (g->n > 1 ? g->n : 1)) && drs <= INT_MAX;
    if (!pl.d_direct && (double)g->batch_count * (double)g->m * (double)g->n * (double)pl.es > 1e15)
        return fm_fail(FM_ERR_TOO_LARGE, "matmul: d is too large for a temporary copy");
    choose_panels(&pl);

    openblas_plan *impl = malloc(sizeof *impl);
    if (!impl)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory while planning");
    *impl = pl;
    out->impl = impl;
    out->execute = execute;
    out->destroy_impl = free;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        out->required_align[i] = i == FM_MATMUL_AUX ? 1 : pl.es / (fm_dtype_is_complex(g->dtype) ? 2 : 1);

    char epi[48], batch[32] = "", copies[32] = "";
    fm_epilogue_format(pl.mp.epilogue, epi, sizeof epi);
    if (g->batch_count != 1)
        snprintf(batch, sizeof batch, " batch=%lld", (long long)g->batch_count);
    if (pl.la.copy || pl.lb.copy || !pl.d_direct)
        snprintf(copies, sizeof copies, " copies=%s%s%s", pl.la.copy ? "a" : "",
                 pl.lb.copy ? (pl.la.copy ? ",b" : "b") : "", !pl.d_direct ? ((pl.la.copy || pl.lb.copy) ? ",d" : "d") : "");
    snprintf(out->describe, sizeof out->describe,
             "matmul cpu/openblas %s %lldx%lldx%lld%s epilogue=%s passes=%d %s=%lldx%lld threads=%d%s%s%s",
             fm_dtype_name(g->dtype), (long long)g->m, (long long)g->n, (long long)g->k, batch, epi,
             pl.blas_threaded ? 1 + !!(pl.mp.epilogue & (FM_EPILOGUE_RELU | FM_EPILOGUE_GELU)) : 1,
             pl.blas_threaded ? "blas_threads" : "panel", (long long)pl.panel_rows, (long long)pl.col_block, pl.threads, pl.la.trans ? " trans_a" : "",
             pl.lb.trans ? " trans_b" : "", copies);
    return FM_OK;
}

const fm_backend fm_backend_openblas_matmul = {
    .name = "openblas",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_MATMUL,
    .priority = 0,
    .probe = probe,
    .release = NULL,
    .plan = plan,
};
