/* openblas_matmul.c : CPU matmul through cblas_?gemm with the epilogue fused
 * panel by panel. D is cut into row panels (and column blocks when rows are too
 * few for the threads); each panel is one single-threaded GEMM run by one of the
 * library's own threads: bias and beta*C are preloaded into the panel (GEMM beta =
 * 1) and the activation runs right after the GEMM, while the panel is in cache.
 * With a scale vector the GEMM runs with beta = 0 and scale, beta*C and bias are
 * applied in the pass after it. Bias gradients: bgrada/bgradb sum the panel's rows
 * of A / columns of B next to its GEMM; drelu/dgelu+bgrad keep per-panel column sums
 * of D, reduced in panel order at the end (deterministic for a given plan).
 * OpenBLAS itself is kept at one thread so the two never oversubscribe. */
#include "cpu_epilogue.h"
#include "cpu_gemm_kernel.h"
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
#define FOLD_BLOCK_BYTES (64 * 1024)   /* rows of D per bias+activation block (blas-threads pass) */

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
    int dynamic; /* tiles handed out one by one (schedule(dynamic)) instead of a static split */
    const fm_cpu_gemm_kernel *kern; /* fusemath's own small-k kernel instead of cblas (NULL: cblas) */
    int kern_relu;                  /* the kernel applies relu in registers (no slab pass) */
    int64_t kern_kc;                /* k per block of the kernel (0: all of k at once) */
    int kern_b;                     /* how the kernel gets B: KERNEL_B_* */
    int kern_bias_direct;           /* it reads the bias in place (unit stride, n % nr == 0), else packs it */
    size_t es;
} openblas_plan;

static fm_status probe(const fm_settings *settings, void **state, const char **why)
{
    (void)settings;
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
static void zero_rows(char *d, int64_t rows, int64_t cols, int64_t ld, size_t es)
{
    for (int64_t i = 0; i < rows; i++)
        memset(d + (size_t)(i * ld) * es, 0, (size_t)cols * es);
}

static void gemm(const openblas_plan *pl, int64_t rows, int64_t cols, const void *a, int64_t lda, const void *b,
                 int64_t ldb, void *d, int64_t ldd, int accumulate)
{
    /* alpha = 0: as BLAS specifies, A and B are not read (inf / NaN there do not propagate).
     * OpenBLAS itself skips them on some paths and not on others (its small-matrix kernels form
     * the product: the answer depended on the operands' layout), so it is decided here. */
    if (pl->mp.alpha[0] == 0.0 && pl->mp.alpha[1] == 0.0) {
        if (!accumulate)
            zero_rows(d, rows, cols, ldd, pl->es);
        return;
    }
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
    const char *a, *b, *c, *bias, *scale;
    char *d, *aux, *bgrad;
    int64_t ldd, d_batch; /* D geometry actually written (user's or a temp) */
    int a_packed, b_packed;
    char *scratch;        /* scale with C == D: per-thread GEMM panels of scratch_bytes */
    size_t scratch_bytes;
    double *partial;      /* drelu/dgelu+bgrad: column sums, [batch][part][n] */
    int64_t nparts;       /* parts (row panels or row chunks) per batch */
    char *bp;             /* own kernel, KERNEL_B_SHARED: B packed in strips; KERNEL_B_PER_ITEM: one
                           * buffer of bp_thread_bytes per thread, bp_tag[tid] saying what it holds */
    size_t bp_thread_bytes;
    int64_t *bp_tag;
    char *bias_p;         /* own kernel: the bias packed, [batch][strips * nr], or NULL */
    int64_t bias_p_len;   /* elements per batch of bias_p */
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
    if (x->scale)
        p.scale = x->scale + (fm_matmul_batch_offset(g, FM_MATMUL_SCALE, b) + c0 * g->col_stride[FM_MATMUL_SCALE]) * es;
    p.scale_cs = g->col_stride[FM_MATMUL_SCALE];
    p.clamp[0] = pl->mp.clamp[0];
    p.clamp[1] = pl->mp.clamp[1];
    p.col0 = c0;
    p.last_col_block = (c0 + cols == g->n);
    if (x->aux) {
        int relu = fm_epilogue_aux_is_mask(pl->mp.epilogue); /* relu+aux writes, drelu reads the mask */
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

/* bgrada: bgrad[b, r0 + i] = sum_k A[b, r0 + i, k] for the rows of a panel; `a` is the
 * panel's first row as the GEMM reads it (packed or the user's layout). */
static void bgrada_rows(const openblas_plan *pl, const exec_args *x, int64_t b, int64_t r0, int64_t rows,
                        const char *a)
{
    const fm_matmul_geom *g = &pl->g;
    int64_t os = pl->la.trans ? 1 : pl->la.ld, rs = pl->la.trans ? pl->la.ld : 1;
    char *out = x->bgrad + (fm_matmul_batch_offset(g, FM_MATMUL_BGRAD, b) + r0 * g->row_stride[FM_MATMUL_BGRAD]) *
                               (int64_t)pl->es;
    fm_cpu_sums_store(g->dtype, rows, g->k, a, os, rs, out, g->row_stride[FM_MATMUL_BGRAD]);
}

/* bgradb: bgrad[b, c0 + j] = sum_k B[b, k, c0 + j]; `bm` is column c0 of B as the GEMM reads it. */
static void bgradb_cols(const openblas_plan *pl, const exec_args *x, int64_t b, int64_t c0, int64_t cols,
                        const char *bm)
{
    const fm_matmul_geom *g = &pl->g;
    int64_t os = pl->lb.trans ? pl->lb.ld : 1, rs = pl->lb.trans ? 1 : pl->lb.ld;
    char *out = x->bgrad + (fm_matmul_batch_offset(g, FM_MATMUL_BGRAD, b) + c0 * g->col_stride[FM_MATMUL_BGRAD]) *
                               (int64_t)pl->es;
    fm_cpu_sums_store(g->dtype, cols, g->k, bm, os, rs, out, g->col_stride[FM_MATMUL_BGRAD]);
}

static int has_c_term(const openblas_plan *pl, int has_c)
{
    return has_c && (pl->mp.beta[0] != 0.0 || pl->mp.beta[1] != 0.0);
}

/* Rows of D per call of the own kernel when an activation pass follows it: a slab the
 * pass (fm_cpu_activate) finds in L1 */
#define KERNEL_SLAB_BYTES (32 * 1024)
#define KERNEL_DIRECT_B_BYTES (32 * 1024) /* B up to this size is read in place, not packed */
#define KERNEL_ITEM_B_BYTES (128 * 1024) /* auto packs a B per batch entry (per item) up to this */
#define KERNEL_MIN_ROWS 64 /* auto packs B (shared: over all batches' rows) for at least this many rows */
#define KERNEL_TILE_COLS 256 /* column block of the kernel's compute-bound tiles (a multiple of 128) */

/* How the own kernel gets B: read in place (small, row-major, n a multiple of the strip),
 * packed once per execute (one B for every batch), or packed per work item into the
 * thread's buffer (a B per batch entry: packing them all first cost a pass over memory and
 * B's size again in scratch; per item the strips are still in cache when the kernel reads them). */
enum { KERNEL_B_DIRECT, KERNEL_B_SHARED, KERNEL_B_PER_ITEM };

/* B of work item (batch b, columns from c0) as the kernel reads it, into ka. */
static void kernel_b_for_item(const openblas_plan *pl, const exec_args *x, int64_t b, int64_t c0, int64_t cols,
                              int tid, fm_cpu_gemm_args *ka)
{
    const fm_matmul_geom *g = &pl->g;
    const int64_t es = (int64_t)pl->es, nr = pl->kern->nr;
    const char *bsrc = x->b + (fm_matmul_batch_offset(g, FM_MATMUL_B, b) + c0 * g->col_stride[FM_MATMUL_B]) * es;
    ka->b_ld = nr;
    ka->b_strip = g->k * nr;
    if (pl->kern_b == KERNEL_B_DIRECT) {
        ka->bp = bsrc;
        ka->b_ld = g->row_stride[FM_MATMUL_B];
        ka->b_strip = nr;
    } else if (pl->kern_b == KERNEL_B_SHARED) {
        ka->bp = x->bp + (c0 / nr) * g->k * nr * es; /* c0 is a multiple of nr (plan checks) */
    } else {
        char *buf = x->bp + (size_t)tid * x->bp_thread_bytes;
        const int64_t tag = b * pl->n_col_blocks + c0 / pl->col_block + 1;
        if (x->bp_tag[tid] != tag) { /* consecutive items of a thread often share it */
            pl->kern->pack(g->k, cols, bsrc, g->row_stride[FM_MATMUL_B], g->col_stride[FM_MATMUL_B], buf, 0,
                           (cols + nr - 1) / nr);
            x->bp_tag[tid] = tag;
        }
        ka->bp = buf;
    }
}

/* A work item through fusemath's own kernel (cpu_gemm_kernel.h): alpha, beta*C, bias and
 * relu in registers; other activations (and aux outputs) as a pass over each L1 slab. */
static void run_item_kernel(const openblas_plan *pl, const exec_args *x, int64_t b, int64_t r0, int64_t rows,
                            int64_t c0, int64_t cols, int tid)
{
    const fm_matmul_geom *g = &pl->g;
    const int64_t es = (int64_t)pl->es, ars = g->row_stride[FM_MATMUL_A];
    const char *a = x->a + (fm_matmul_batch_offset(g, FM_MATMUL_A, b) + r0 * ars) * es;
    fm_cpu_gemm_args ka = {.k = g->k, .kc = pl->kern_kc, .alpha = pl->mp.alpha[0], .a = a, .a_rs = ars,
                           .a_cs = g->col_stride[FM_MATMUL_A],
                           .bias = !x->bias            ? NULL
                                   : pl->kern_bias_direct ? x->bias + (fm_matmul_batch_offset(g, FM_MATMUL_BIAS, b) + c0) * es
                                                          : x->bias_p + (b * x->bias_p_len + c0) * es,
                           .beta = pl->mp.beta[0],
                           .relu = pl->kern_relu};
    kernel_b_for_item(pl, x, b, c0, cols, tid, &ka);
    const int with_c = has_c_term(pl, x->c != NULL);
    /* one call for the item, or slabs with the activation pass after each */
    const int pass = (pl->mp.epilogue & FM_EPILOGUE_FORWARD_ACT_) && !pl->kern_relu;
    int64_t slab = rows;
    if (pass) {
        slab = fm_max_i64(1, KERNEL_SLAB_BYTES / (cols * es));
        slab = (slab + pl->kern->mr - 1) / pl->kern->mr * pl->kern->mr;
    }
    for (int64_t i = 0; i < rows; i += slab) {
        const int64_t h = fm_min_i64(slab, rows - i);
        fm_cpu_panel s = make_panel(pl, x, b, r0 + i, h, c0, cols);
        ka.a = a + i * ars * es;
        if (with_c)
            ka.c = s.c, ka.c_rs = s.c_rs, ka.c_cs = s.c_cs;
        pl->kern->block(&ka, h, cols, s.d, x->ldd);
        if (pass)
            fm_cpu_activate(g->dtype, pl->mp.epilogue, &s);
    }
}

/* One work item of the tiles strategy: (batch, row panel, column block), one
 * single-threaded GEMM with the epilogue before and after it. tid: the calling
 * thread's index in the team (selects its scratch panel). */
static void run_item(const openblas_plan *pl, const exec_args *x, int64_t item, int tid)
{
    const fm_matmul_geom *g = &pl->g;
    const int64_t es = (int64_t)pl->es;
    const unsigned epi = pl->mp.epilogue;
    int64_t per_batch = pl->n_row_panels * pl->n_col_blocks;
    int64_t b = item / per_batch, rem = item % per_batch;
    int64_t rp = rem / pl->n_col_blocks;
    int64_t r0 = rp * pl->panel_rows, c0 = (rem % pl->n_col_blocks) * pl->col_block;
    int64_t rows = fm_min_i64(pl->panel_rows, g->m - r0), cols = fm_min_i64(pl->col_block, g->n - c0);
    if (pl->kern) {
        run_item_kernel(pl, x, b, r0, rows, c0, cols, tid);
        return;
    }
    const char *a = batch_a(pl, x, b) + (pl->la.trans ? r0 : r0 * pl->la.ld) * es;
    const char *bm = batch_b(pl, x, b) + (pl->lb.trans ? c0 * pl->lb.ld : c0) * es;
    fm_cpu_panel p = make_panel(pl, x, b, r0, rows, c0, cols);
    if (x->partial)
        p.colsum = x->partial + (b * x->nparts + rp) * g->n + c0;
    if (x->scale) {
        /* alpha*A@B alone first (beta = 0), then scale, beta*C and bias while it is hot */
        char *src = p.d;
        int64_t lds = x->ldd;
        if (x->scratch) { /* C is D's memory: keep it intact until the combine reads it */
            src = x->scratch + (size_t)tid * x->scratch_bytes;
            lds = cols;
        }
        if (g->k > 0)
            gemm(pl, rows, cols, a, pl->la.ld, bm, pl->lb.ld, src, lds, 0);
        else
            zero_rows(src, rows, cols, lds, pl->es);
        fm_cpu_scale_combine(g->dtype, &p, src, lds, pl->mp.beta);
    } else {
        int preloaded = fm_cpu_preload(g->dtype, &p, pl->mp.beta);
        if (g->k > 0)
            gemm(pl, rows, cols, a, pl->la.ld, bm, pl->lb.ld, p.d, x->ldd, preloaded);
        else if (!preloaded)
            zero_rows(p.d, rows, cols, x->ldd, pl->es);
    }
    fm_cpu_activate(g->dtype, epi, &p);
    if ((epi & FM_EPILOGUE_BGRADA) && c0 == 0) /* one column block per row panel sums A's rows */
        bgrada_rows(pl, x, b, r0, rows, a);
    if ((epi & FM_EPILOGUE_BGRADB) && r0 == 0) /* one row panel per column block sums B's columns */
        bgradb_cols(pl, x, b, c0, cols, bm);
}

/* ---- the blas-threads strategy ---- */
/* OpenBLAS threads the whole GEMM (sharing packed panels between its threads,
 * which independent per-tile calls cannot); the preload and the epilogue are
 * passes over row chunks around it, run by the passive pool (cpu_pool.c) so no
 * spinning thread competes with OpenBLAS's. The passes cost O(mn) against the
 * GEMM's O(mnk). */
typedef struct pass_job {
    const openblas_plan *pl;
    const exec_args *x;
    int64_t b, rows; /* one contiguous block of rows per thread (see execute) */
    int activate;
    int fold_bias; /* the post pass adds the bias too (the GEMM ran with beta = 0) */
    const char *src; /* scale: alpha*A@B of batch b (row 0), row stride lds */
    int64_t lds;
} pass_job;

#define BGRADB_CHUNK_COLS 512 /* columns of B summed per pool item */

/* Rows per chunk of the blas-threads passes: one chunk per thread. */
static int64_t blas_chunk_rows(const openblas_plan *pl) { return (pl->g.m + pl->threads - 1) / pl->threads; }

static void pass_chunk(void *arg, int64_t ci)
{
    pass_job *j = arg;
    const openblas_plan *pl = j->pl;
    const fm_matmul_geom *g = &pl->g;
    const int64_t r0 = ci * j->rows;
    if (r0 >= g->m)
        return;
    const int64_t rows = fm_min_i64(j->rows, g->m - r0);
    if (j->fold_bias) {
        /* bias and activation in one sweep over D, block by block while a block is in L1/L2 */
        const int64_t step = fm_max_i64(1, FOLD_BLOCK_BYTES / (g->n * (int64_t)pl->es));
        for (int64_t s = r0; s < r0 + rows; s += step) {
            fm_cpu_panel p = make_panel(pl, j->x, j->b, s, fm_min_i64(step, r0 + rows - s), 0, g->n);
            fm_cpu_add_bias(g->dtype, &p);
            fm_cpu_activate(g->dtype, pl->mp.epilogue, &p);
        }
        return;
    }
    fm_cpu_panel p = make_panel(pl, j->x, j->b, r0, rows, 0, g->n);
    if (!j->activate) {
        fm_cpu_preload(g->dtype, &p, pl->mp.beta);
        return;
    }
    if (j->x->partial)
        p.colsum = j->x->partial + (j->b * j->x->nparts + ci) * g->n;
    if (j->x->scale)
        fm_cpu_scale_combine(g->dtype, &p, j->src + r0 * j->lds * (int64_t)pl->es, j->lds, pl->mp.beta);
    fm_cpu_activate(g->dtype, pl->mp.epilogue, &p);
    if (pl->mp.epilogue & FM_EPILOGUE_BGRADA)
        bgrada_rows(pl, j->x, j->b, r0, rows,
                    batch_a(pl, j->x, j->b) + (pl->la.trans ? r0 : r0 * pl->la.ld) * (int64_t)pl->es);
}

static void bgradb_chunk(void *arg, int64_t ci)
{
    pass_job *j = arg;
    const openblas_plan *pl = j->pl;
    const int64_t c0 = ci * BGRADB_CHUNK_COLS, cols = fm_min_i64(BGRADB_CHUNK_COLS, pl->g.n - c0);
    bgradb_cols(pl, j->x, j->b, c0, cols,
                batch_b(pl, j->x, j->b) + (pl->lb.trans ? c0 * pl->lb.ld : c0) * (int64_t)pl->es);
}

/* Which passes around the GEMM a plan needs (also what describe() counts). */
static int needs_post_pass(const openblas_plan *pl)
{
    return (pl->mp.epilogue & (FM_EPILOGUE_SCALE | FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_BACKWARD_ |
                               FM_EPILOGUE_BGRAD | FM_EPILOGUE_BGRADA)) != 0;
}

/* bias + a forward activation, no C term: one pass after a beta = 0 GEMM adds the
 * bias and activates, where a preload before the GEMM would be a second pass */
static int folds_bias(const openblas_plan *pl, int has_c)
{
    return needs_post_pass(pl) && (pl->mp.epilogue & FM_EPILOGUE_BIAS) && !has_c_term(pl, has_c) &&
           !(pl->mp.epilogue & (FM_EPILOGUE_SCALE | FM_EPILOGUE_BACKWARD_ | FM_EPILOGUE_ANY_BGRAD_));
}

static int needs_pre_pass(const openblas_plan *pl, int has_c)
{
    return !(pl->mp.epilogue & FM_EPILOGUE_SCALE) && !folds_bias(pl, has_c) &&
           ((pl->mp.epilogue & FM_EPILOGUE_BIAS) || has_c_term(pl, has_c));
}

static void run_blas_threaded(const openblas_plan *pl, const exec_args *x)
{
    const fm_matmul_geom *g = &pl->g;
    const int64_t rows = blas_chunk_rows(pl), chunks = (g->m + rows - 1) / rows;
    const int scaled = x->scale != NULL;
    const int has_post = needs_post_pass(pl), fold_bias = x->bias && folds_bias(pl, x->c != NULL);
    /* the condition under which fm_cpu_preload writes: then the GEMM accumulates */
    const int has_pre = !scaled && !fold_bias && (x->bias || has_c_term(pl, x->c != NULL));
    for (int64_t b = 0; b < g->batch_count; b++) {
        pass_job j = {pl, x, b, rows, 0, 0, NULL, 0};
        if (has_pre)
            fm_pool_run(pl->threads, chunks, pass_chunk, &j);
        fm_cpu_panel whole = make_panel(pl, x, b, 0, g->m, 0, g->n);
        char *dst = whole.d;
        int64_t ldd = x->ldd;
        if (scaled && x->scratch) { /* C is D's memory: the GEMM goes to a temp */
            dst = x->scratch;
            ldd = g->n;
        }
        if (g->k == 0) { /* an empty sum: no BLAS call with k = 0 (as the tiles, run_item) */
            if (!has_pre)
                zero_rows(dst, g->m, g->n, ldd, pl->es);
        } else {
            fm_blas_threads_begin(pl->threads);
            gemm(pl, g->m, g->n, batch_a(pl, x, b), pl->la.ld, batch_b(pl, x, b), pl->lb.ld, dst, ldd, has_pre);
            fm_blas_threads_end();
        }
        if (has_post) {
            j.activate = 1;
            j.fold_bias = fold_bias;
            j.src = dst;
            j.lds = ldd;
            fm_pool_run(pl->threads, chunks, pass_chunk, &j);
        }
        if (pl->mp.epilogue & FM_EPILOGUE_BGRADB)
            fm_pool_run(pl->threads, (g->n + BGRADB_CHUNK_COLS - 1) / BGRADB_CHUNK_COLS, bgradb_chunk, &j);
    }
}

/* m == 0 or n == 0: no GEMM, but the bias gradient along the other extent is still
 * defined (sums over K of A's rows or B's columns; zeros for a sum over no rows). */
static void bgrad_of_empty(const openblas_plan *pl, void *const *ptrs)
{
    const fm_matmul_geom *g = &pl->g;
    const unsigned epi = pl->mp.epilogue;
    const int64_t es = (int64_t)pl->es;
    if (!(epi & FM_EPILOGUE_ANY_BGRAD_) || !ptrs[FM_MATMUL_BGRAD])
        return;
    const char *a = ptrs[FM_MATMUL_A], *bm = ptrs[FM_MATMUL_B]; /* NULL when empty (k == 0) */
    for (int64_t b = 0; b < g->batch_count; b++) {
        char *out = (char *)ptrs[FM_MATMUL_BGRAD] + fm_matmul_batch_offset(g, FM_MATMUL_BGRAD, b) * es;
        if (epi & FM_EPILOGUE_BGRADA)
            fm_cpu_sums_store(g->dtype, g->m, g->k, a ? a + fm_matmul_batch_offset(g, FM_MATMUL_A, b) * es : NULL,
                              g->row_stride[FM_MATMUL_A], g->col_stride[FM_MATMUL_A], out,
                              g->row_stride[FM_MATMUL_BGRAD]);
        else if (epi & FM_EPILOGUE_BGRADB)
            fm_cpu_sums_store(g->dtype, g->n, g->k, bm ? bm + fm_matmul_batch_offset(g, FM_MATMUL_B, b) * es : NULL,
                              g->col_stride[FM_MATMUL_B], g->row_stride[FM_MATMUL_B], out,
                              g->col_stride[FM_MATMUL_BGRAD]);
        else
            fm_cpu_reduce_partials(g->dtype, 0, g->n, NULL, out, g->col_stride[FM_MATMUL_BGRAD]);
    }
}

/* ---- the own kernel's packed operands ---- */
/* Packing before the items: one unit per strip of a shared B, one per batch entry of a
 * bias that is not read in place. */
static int64_t kernel_strips(const openblas_plan *pl) { return (pl->g.n + pl->kern->nr - 1) / pl->kern->nr; }

static int kernel_packs_bias(const openblas_plan *pl, const exec_args *x) { return x->bias && !pl->kern_bias_direct; }

static int64_t kernel_b_units(const openblas_plan *pl) { return pl->kern_b == KERNEL_B_SHARED ? kernel_strips(pl) : 0; }

static int64_t kernel_pack_units(const openblas_plan *pl, const exec_args *x)
{
    return kernel_b_units(pl) + (kernel_packs_bias(pl, x) ? pl->g.batch_count : 0);
}

/* The kernel's scratch: shared packed B, per-thread B buffers (+ their tags), packed
 * bias; NULL when it needs none or is out of memory (*fail says which). */
static void *kernel_pack_alloc(const openblas_plan *pl, exec_args *x, int *fail)
{
    const fm_matmul_geom *g = &pl->g;
    const int64_t nr = pl->kern->nr;
    *fail = 0;
    size_t bbytes = 0, tagbytes = 0;
    if (pl->kern_b == KERNEL_B_SHARED)
        bbytes = (size_t)(kernel_strips(pl) * nr * g->k) * pl->es;
    if (pl->kern_b == KERNEL_B_PER_ITEM) {
        x->bp_thread_bytes = ((size_t)((pl->col_block + nr - 1) / nr * nr * g->k) * pl->es + 63) / 64 * 64;
        bbytes = x->bp_thread_bytes * (size_t)pl->threads;
        tagbytes = sizeof(int64_t) * (size_t)pl->threads;
    }
    bbytes = (bbytes + 63) / 64 * 64;
    x->bias_p_len = kernel_strips(pl) * nr;
    const size_t biasbytes = kernel_packs_bias(pl, x) ? (size_t)(x->bias_p_len * g->batch_count) * pl->es : 0;
    if (bbytes + tagbytes + biasbytes == 0)
        return NULL;
    char *buf = fm_host_scratch_alloc(bbytes + biasbytes + tagbytes);
    if (!buf) {
        *fail = 1;
        return NULL;
    }
    x->bp = buf;
    x->bias_p = biasbytes ? buf + bbytes : NULL;
    if (tagbytes) {
        x->bp_tag = (int64_t *)(buf + bbytes + biasbytes);
        memset(x->bp_tag, 0, tagbytes); /* 0: holds nothing yet */
    }
    return buf;
}

/* Packing units [u0, u1) of kernel_pack_units. */
static void kernel_pack(const openblas_plan *pl, const exec_args *x, int64_t u0, int64_t u1)
{
    const fm_matmul_geom *g = &pl->g;
    const int64_t es = (int64_t)pl->es, bunits = kernel_b_units(pl);
    if (u0 < bunits) /* the user's b, through its strides */
        pl->kern->pack(g->k, g->n, x->b, g->row_stride[FM_MATMUL_B], g->col_stride[FM_MATMUL_B], x->bp, u0,
                       fm_min_i64(u1, bunits));
    for (int64_t u = fm_max_i64(u0, bunits); u < u1; u++) { /* the bias of batch u - bunits, as a 1 x n matrix */
        const int64_t b = u - bunits;
        pl->kern->pack(1, g->n, x->bias + fm_matmul_batch_offset(g, FM_MATMUL_BIAS, b) * es, 0,
                       g->col_stride[FM_MATMUL_BIAS], x->bias_p + b * x->bias_p_len * es, 0, kernel_strips(pl));
    }
}

/* Why the own kernel cannot compute this problem, or NULL when it can: real f32/f64 with
 * a forward epilogue (alpha, beta*C, bias, activation, aux). */
static const char *kernel_misfit(const openblas_plan *pl, const fm_cpu_gemm_kernel *kern)
{
    const fm_matmul_geom *g = &pl->g;
    if (!kern)
        return "it computes f32 and f64 only";
    if (g->k == 0 || pl->mp.alpha[0] == 0.0)
        return "it needs k > 0 and alpha != 0 (cblas tiles compute those)";
    if (pl->mp.epilogue & (FM_EPILOGUE_SCALE | FM_EPILOGUE_BACKWARD_ | FM_EPILOGUE_ANY_BGRAD_))
        return "it has no scale, backward activation or bias gradient epilogue";
    return NULL;
}

/* How kernel kern gets B (KERNEL_B_*), from the problem alone. */
static int kernel_b_mode(const openblas_plan *pl, const fm_cpu_gemm_kernel *kern)
{
    const fm_matmul_geom *g = &pl->g;
    if (g->n % kern->nr == 0 && g->col_stride[FM_MATMUL_B] == 1 &&
        (double)g->k * (double)g->n * (double)pl->es <= KERNEL_DIRECT_B_BYTES)
        return KERNEL_B_DIRECT;
    for (int i = 0; i < g->batch_ndim; i++)
        if (g->batch_strides[FM_MATMUL_B][i] != 0 && g->batch_shape[i] > 1)
            return KERNEL_B_PER_ITEM;
    return KERNEL_B_SHARED;
}

/* Byte ranges of two operands overlap (then, after the core's alias check, they are
 * the same memory with the same layout). */
static int operands_overlap(const fm_problem *pr, int s1, const void *p1, int s2, const void *p2)
{
    int64_t lo1, hi1, lo2, hi2;
    fm_tensor_byte_span(&pr->t[s1], &lo1, &hi1);
    fm_tensor_byte_span(&pr->t[s2], &lo2, &hi2);
    if (!p1 || !p2 || lo1 == hi1 || lo2 == hi2)
        return 0;
    intptr_t a = (intptr_t)p1, b = (intptr_t)p2;
    return a + lo1 < b + hi2 && b + lo2 < a + hi1;
}

static fm_status execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)args; /* pointer-only: nothing per call */
    (void)stream;
    const openblas_plan *pl = plan->impl;
    const fm_matmul_geom *g = &pl->g;
    const unsigned epi = pl->mp.epilogue;
    if (g->batch_count == 0)
        return FM_OK;
    if (g->m == 0 || g->n == 0) {
        bgrad_of_empty(pl, ptrs);
        return FM_OK;
    }
    exec_args x = {.a = ptrs[FM_MATMUL_A], .b = ptrs[FM_MATMUL_B], .c = ptrs[FM_MATMUL_C],
                   .bias = ptrs[FM_MATMUL_BIAS], .scale = ptrs[FM_MATMUL_SCALE], .d = ptrs[FM_MATMUL_D],
                   .aux = ptrs[FM_MATMUL_AUX], .bgrad = ptrs[FM_MATMUL_BGRAD]};
    void *a_tmp = NULL, *b_tmp = NULL, *d_tmp = NULL, *scratch = NULL, *kernel_buf = NULL;
    double *partial = NULL;
    fm_status st = FM_OK;
    if (pl->la.copy && g->k > 0) {
        if (!(a_tmp = pack_operand(pl, FM_MATMUL_A, x.a, g->m, g->k))) {
            st = fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory packing a");
            goto out;
        }
        x.a = a_tmp;
        x.a_packed = 1;
    }
    if (pl->lb.copy && g->k > 0) {
        if (!(b_tmp = pack_operand(pl, FM_MATMUL_B, x.b, g->k, g->n))) {
            st = fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory packing b");
            goto out;
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
            st = fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory for a temporary d");
            goto out;
        }
        x.d = d_tmp;
        x.ldd = g->n;
        x.d_batch = g->m * g->n;
    }
    if (x.scale && x.c && pl->mp.beta[0] != 0.0 && pl->d_direct &&
        operands_overlap(&plan->problem, FM_MATMUL_C, x.c, FM_MATMUL_D, user_d)) {
        /* scale with D = C in place: the beta = 0 GEMM must not overwrite C before the
         * combine reads it, so it writes a scratch panel per thread (the whole D for
         * the blas-threads strategy) */
        x.scratch_bytes = pl->blas_threaded ? (size_t)(g->m * g->n) * pl->es
                                            : (size_t)(pl->panel_rows * pl->col_block) * pl->es;
        x.scratch_bytes = (x.scratch_bytes + 63) / 64 * 64;
        if (!(scratch = fm_malloc_aligned(x.scratch_bytes * (size_t)(pl->blas_threaded ? 1 : pl->threads), 64))) {
            st = fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory for the scale chain's scratch panels");
            goto out;
        }
        x.scratch = scratch;
    }
    if (epi & FM_EPILOGUE_BGRAD) {
        /* column sums of D per part (row panel / row chunk), reduced in part order below */
        x.nparts = pl->blas_threaded ? (g->m + blas_chunk_rows(pl) - 1) / blas_chunk_rows(pl) : pl->n_row_panels;
        if (!(partial = fm_malloc_aligned(sizeof(double) * (size_t)(g->batch_count * x.nparts * g->n), 64))) {
            st = fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory for the bias gradient's partial sums");
            goto out;
        }
        x.partial = partial;
    }
    int kernel_oom = 0;
    if (pl->kern && (kernel_buf = kernel_pack_alloc(pl, &x, &kernel_oom)) == NULL && kernel_oom) {
        st = fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory for the packed b");
        goto out;
    }
    if (pl->blas_threaded) {
        run_blas_threaded(pl, &x);
    } else {
        fm_blas_single_begin();
        if (pl->threads <= 1 || pl->items == 1) {
            if (pl->kern)
                kernel_pack(pl, &x, 0, kernel_pack_units(pl, &x));
            for (int64_t it = 0; it < pl->items; it++)
                run_item(pl, &x, it, 0);
        } else {
#pragma omp parallel num_threads(pl->threads)
            {
                if (pl->kern) { /* every thread reads all of a shared B: pack it first, together */
                    const int64_t units = kernel_pack_units(pl, &x);
#pragma omp for schedule(static)
                    for (int64_t u = 0; u < units; u++)
                        kernel_pack(pl, &x, u, u + 1);
                }
                if (pl->dynamic) { /* large tiles, four per thread: see choose_panels */
#pragma omp for schedule(dynamic, 1) nowait
                    for (int64_t it = 0; it < pl->items; it++)
                        run_item(pl, &x, it, omp_get_thread_num());
                } else {
                    /* static: each thread gets consecutive panels, so a fresh output's huge
                     * pages are first touched by one thread each; with dynamic, 1 four threads
                     * faulted the same 2 MiB page (8192x1024x64 from Python: 14.3 vs 10.3 ms) */
#pragma omp for schedule(static) nowait
                    for (int64_t it = 0; it < pl->items; it++)
                        run_item(pl, &x, it, omp_get_thread_num());
                }
            }
        }
        fm_blas_single_end();
    }
    if (partial)
        for (int64_t b = 0; b < g->batch_count; b++)
            fm_cpu_reduce_partials(g->dtype, x.nparts, g->n, partial + b * x.nparts * g->n,
                                   x.bgrad + fm_matmul_batch_offset(g, FM_MATMUL_BGRAD, b) * (int64_t)pl->es,
                                   g->col_stride[FM_MATMUL_BGRAD]);

    if (d_tmp) {
        for (int64_t b = 0; b < g->batch_count; b++)
            for (int64_t i = 0; i < g->m; i++)
                for (int64_t j = 0; j < g->n; j++)
                    memcpy(user_d + (fm_matmul_batch_offset(g, FM_MATMUL_D, b) + i * g->row_stride[FM_MATMUL_D] +
                                     j * g->col_stride[FM_MATMUL_D]) * (int64_t)pl->es,
                           (char *)d_tmp + (size_t)((b * g->m + i) * g->n + j) * pl->es, pl->es);
    }
out:
    fm_free_aligned(a_tmp);
    fm_free_aligned(b_tmp);
    fm_free_aligned(d_tmp);
    fm_free_aligned(scratch);
    fm_free_aligned(partial);
    fm_host_scratch_free(kernel_buf);
    return st;
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
    } else if (g->k >= LARGE_K && pl->kern) {
        /* The own kernel packs B once for every tile, so small tiles repack nothing: at least
         * four per thread (up to 16 register blocks x 256 columns), handed out as threads come
         * free, which absorbs the H200 host's unequal vCPUs (see below) */
        const int64_t mr = pl->kern->mr, ncb = (n + KERNEL_TILE_COLS - 1) / KERNEL_TILE_COLS;
        const int64_t want = (m * batch * ncb + 4 * (int64_t)threads - 1) / (4 * (int64_t)threads);
        rows = fm_min_i64(fm_max_i64((want + mr - 1) / mr * mr, mr), 16 * mr);
        rows = fm_min_i64(rows, m);
        cols = fm_min_i64(KERNEL_TILE_COLS, n);
        pl->dynamic = threads > 1;
    } else if (g->k >= LARGE_K) {
        /* Compute-bound: one big tile per thread (OpenBLAS blocks inside the call),
         * tiles shaped to pack the least; the epilogue pass then costs O(1/k). */
        int parts = (int)fm_max_i64(1, (threads + batch - 1) / batch);
        int64_t pm, pn;
        grid_for(m, n, g->k, parts, &pm, &pn);
        rows = (m + pm - 1) / pm;
        if (pn > 1)
            cols = fm_min_i64(((n + pn - 1) / pn + 127) / 128 * 128, n);
        /* One tile per thread finishes when the slowest thread does. On the H200 host's 16
         * vCPUs the same GEMM ran 4.3-8.4 ms from one vCPU to the next, and in a 2048^3 f64
         * product the slowest thread's tile took 1.25x the mean (benchmarks/panel_phases.c,
         * 2026-12-01). Four tiles per thread, handed out as threads come free, absorb that
         * where the tiles stay large enough (>= 256 x 256) that packing them costs little
         * more; 1024^3 on 16 threads would need 128 x 128 tiles, which cost 1.25x in GEMM time. */
        if (batch == 1 && threads >= 4) {
            int64_t pm4, pn4;
            grid_for(m, n, g->k, 4 * parts, &pm4, &pn4);
            const int64_t rows4 = (m + pm4 - 1) / pm4;
            const int64_t cols4 = pn4 > 1 ? fm_min_i64(((n + pn4 - 1) / pn4 + 127) / 128 * 128, n) : n;
            if (rows4 >= 256 && cols4 >= 256 && ((m + rows4 - 1) / rows4) * ((n + cols4 - 1) / cols4) >= 3 * parts) {
                rows = rows4;
                cols = cols4;
                pl->dynamic = 1;
            }
        }
    } else {
        /* Memory-bound (small k): the epilogue's traffic matters, so panels of at most
         * PANEL_TARGET_BYTES that are still in cache when the activation runs; but each
         * GEMM call repacks B, so not shorter than 128 rows (64-row panels measured
         * 1.25x slower than 512-row ones on 8192x1024x64). */
        int64_t fit = (int64_t)(PANEL_TARGET_BYTES / ((size_t)n * pl->es));
        rows = fm_max_i64(fm_min_i64(fit, 512), 128);
        /* at least four panels per thread: on 16 cores 8192x1024x64 ran 1.25x faster
         * fused with 128-row panels (4 per thread) than with 512 (1 per thread); on 2
         * cores 512 stays the best. Tried again on the H200 host (2026-11-30, fourth
         * session): two and one panel per thread looked better in paired samples of
         * benchmarks/matmul_cpu_layouts.py, but in matmul_cpu.py runs 10-11 the fusion
         * then cost 12-13% over the plain product on 8192x1024x64 (1-3% with 128-row
         * panels in run 9: the larger panel no longer stays in L2 for the epilogue). */
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
    if (p->t[FM_MATMUL_A].dtype == FM_F8E4M3 || p->t[FM_MATMUL_A].dtype == FM_F8E5M2)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fp8 inputs are not supported on cpu (cuBLASLt on sm_89+ takes them); "
                       "convert to f32, or use execution='cuda'");
    if (g->dtype == FM_F16 || g->dtype == FM_BF16)
        return fm_fail(FM_ERR_NOT_APPLICABLE,
                       "dtype %s is not supported on cpu (the OpenBLAS backend computes f32, f64, c64 and "
                       "c128); convert to f32, or use execution='cuda'", fm_dtype_name(g->dtype));
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
    const int has_c = (p->present >> FM_MATMUL_C) & 1;
    const fm_cpu_gemm_kernel *kern = fm_cpu_gemm_kernel_for(g->dtype); /* NULL: a dtype it lacks */
    const char *misfit = kernel_misfit(&pl, kern);
    if (pl.mp.cpu_strategy == FM_CPU_STRATEGY_KERNEL && misfit)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "cpu_strategy 'kernel' (fusemath's own GEMM kernel) cannot take this "
                       "product: %s", misfit); /* the planner prefixes "matmul: openblas: " */
    /* Auto's choice of the own kernel, up to the k its variant measured at OpenBLAS's speed
     * (auto_max_k): memory-bound products (small k), where it stores each block of D once
     * with the epilogue applied while cblas tiles need passes over D around the call; on
     * AVX2 up to k = 384 (one k block: 0.70-0.96x the tiles at 256^3-2048x2048x256 on dev);
     * on AVX-512 any k (the H200 host: one packed B for all tiles, small tiles handed out
     * dynamically); the plain-C variant never. Packing B pays only over enough rows: single
     * threaded on dev, n = 256-2048 with k = 64-256, the kernel took 1.1-1.7x the tiles' time
     * at m = 4-16, 0.96-1.06 at 32, 0.84-0.98 at 64; a B per batch entry, packed per item,
     * also needs a small B (batch 32, m = 64: 0.80 at 512x64, 1.08 at 256x256, 1.19 at
     * 2048x128 f32). */
    pl.kern_b = kern ? kernel_b_mode(&pl, kern) : KERNEL_B_DIRECT;
    const double b_bytes = (double)g->k * (double)g->n * (double)pl.es;
    const int auto_kernel =
        !misfit && g->k <= kern->auto_max_k &&
        (pl.kern_b == KERNEL_B_DIRECT ||
         (pl.kern_b == KERNEL_B_SHARED && g->m * g->batch_count >= KERNEL_MIN_ROWS) ||
         (pl.kern_b == KERNEL_B_PER_ITEM && g->m >= KERNEL_MIN_ROWS && b_bytes <= KERNEL_ITEM_B_BYTES));
    if (pl.mp.cpu_strategy == FM_CPU_STRATEGY_KERNEL || (pl.mp.cpu_strategy == FM_CPU_STRATEGY_AUTO && auto_kernel)) {
        pl.kern = kern;
        pl.kern_relu = (pl.mp.epilogue & FM_EPILOGUE_FORWARD_ACT_) == FM_EPILOGUE_RELU &&
                       !(pl.mp.epilogue & FM_EPILOGUE_AUX);
        pl.la.copy = pl.lb.copy = 0; /* it reads A through its strides and packs B itself */
        pl.kern_kc = fm_cpu_gemm_kc(g->k);
        pl.kern_bias_direct = g->n % kern->nr == 0 && g->col_stride[FM_MATMUL_BIAS] == 1;
    }
    choose_panels(&pl);
    if (pl.kern && pl.kern_b == KERNEL_B_SHARED && pl.n_col_blocks > 1 && pl.col_block % pl.kern->nr)
        return fm_fail(FM_ERR_INTERNAL, "matmul: column blocks of %lld are not a multiple of the %s kernel's %d-column "
                       "strips", (long long)pl.col_block, pl.kern->isa, pl.kern->nr);

    openblas_plan *impl = malloc(sizeof *impl);
    if (!impl)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory while planning");
    *impl = pl;
    out->impl = impl;
    out->execute = execute;
    out->destroy_impl = free;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        out->required_align[i] = (i == FM_MATMUL_AUX && fm_epilogue_aux_is_mask(pl.mp.epilogue))
                                     ? 1
                                     : pl.es / (fm_dtype_is_complex(g->dtype) ? 2 : 1);

    /* passes over D: tiles fuse everything into one; blas-threads adds a preload
     * before and an epilogue pass after the threaded GEMM when there is work for them */
    int passes = pl.blas_threaded ? 1 + needs_pre_pass(&pl, has_c) + needs_post_pass(&pl) : 1;
    char epi[96], batch[32] = "", copies[32] = "", kernel_desc[48] = "";
    fm_epilogue_format(pl.mp.epilogue, epi, sizeof epi);
    if (g->batch_count != 1)
        snprintf(batch, sizeof batch, " batch=%lld", (long long)g->batch_count);
    if (pl.la.copy || pl.lb.copy || !pl.d_direct)
        snprintf(copies, sizeof copies, " copies=%s%s%s", pl.la.copy ? "a" : "",
                 pl.lb.copy ? (pl.la.copy ? ",b" : "b") : "", !pl.d_direct ? ((pl.la.copy || pl.lb.copy) ? ",d" : "d") : "");
    if (pl.kern) {
        static const char *b_modes[] = {"direct", "packed", "per_item"};
        int w = snprintf(kernel_desc, sizeof kernel_desc, " kernel=%s b=%s", pl.kern->isa, b_modes[pl.kern_b]);
        if (pl.kern_kc && w > 0 && (size_t)w < sizeof kernel_desc)
            snprintf(kernel_desc + w, sizeof kernel_desc - (size_t)w, " kc=%lld", (long long)pl.kern_kc);
    }
    snprintf(out->describe, sizeof out->describe,
             "matmul cpu/openblas %s %lldx%lldx%lld%s epilogue=%s passes=%d %s=%lldx%lld threads=%d%s%s%s%s%s",
             fm_dtype_name(g->dtype), (long long)g->m, (long long)g->n, (long long)g->k, batch, epi, passes,
             pl.blas_threaded ? "blas_threads" : "panel", (long long)pl.panel_rows, (long long)pl.col_block, pl.threads,
             pl.dynamic ? " tiles=dynamic" : "", kernel_desc,
             !pl.kern && pl.la.trans ? " trans_a" : "", !pl.kern && pl.lb.trans ? " trans_b" : "", copies);
    return FM_OK;
}

char *openblas_get_config(void); /* OpenBLAS's own; reference CBLAS headers lack it */

/* Wisdom salt: tuned panel heights depend on the BLAS build and the CPU it picked (the
 * thread count is part of the problem already). */
static void wisdom_salt(const fm_context *ctx, void *state, const fm_problem *p, char *buf, size_t n)
{
    (void)ctx, (void)state, (void)p;
    const char *config = openblas_get_config();
    snprintf(buf, n, "%s kernel=%s", config ? config : "", fm_cpu_gemm_kernel_for(FM_F32)->isa);
}

/* Autotune's candidates: each panel height up to M (0: the heuristic's) through cblas tiles,
 * then through the own kernel (which refuses what it does not take: the candidate is dropped).
 * The blas-threads strategy is not a candidate: after each call OpenBLAS's threads spin for
 * milliseconds and slow whatever runs next (measured 3-4x on the next tile plan on the H200
 * host), which a timing loop of one plan does not see. */
static int tune_candidates(const fm_context *ctx, void *state, const fm_problem *p, fm_problem *cand, int *group,
                           int max)
{
    (void)ctx, (void)state;
    static const int32_t heights[] = {0, 16, 32, 64, 128, 256, 512, 1024};
    enum { NH = sizeof heights / sizeof heights[0] };
    const fm_tensor *d = &p->t[FM_MATMUL_D];
    const int64_t m = d->shape[d->ndim - 2];
    int n = 0;
    for (int strategy = 0; strategy < 2; strategy++)
        for (int h = 0; h < NH && n < max; h++) {
            if (heights[h] > m)
                continue;
            cand[n] = *p;
            cand[n].u.matmul.panel_rows = heights[h];
            cand[n].u.matmul.cpu_strategy = strategy ? FM_CPU_STRATEGY_KERNEL : FM_CPU_STRATEGY_TILES;
            group[n++] = -1; /* each on its own: a height the kernel refuses says nothing of the next */
        }
    return n;
}

const fm_backend fm_backend_openblas_matmul = {
    .name = "openblas",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_MATMUL,
    .priority = 0,
    .probe = probe,
    .release = NULL,
    .plan = plan,
    .wisdom_salt = wisdom_salt,
    .tune_candidates = tune_candidates,
};
