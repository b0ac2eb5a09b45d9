/* openblas_matmul.c : the "openblas" backend, CPU matmul through cblas_?gemm with the epilogue
 * fused panel by panel. D is cut into row panels (and column blocks when rows are too few for
 * the threads; cpu_matmul.h); each panel is one single-threaded GEMM run by one of the
 * library's own threads: bias and beta*C are preloaded into the panel (GEMM beta = 1) and the
 * activation runs right after the GEMM, while the panel is in cache. With a scale vector the
 * GEMM runs with beta = 0 and scale, beta*C and bias are applied in the pass after it. Bias
 * gradients: bgrada/bgradb sum the panel's rows of A / columns of B next to its GEMM;
 * drelu/dgelu+bgrad keep per-panel column sums of D, reduced in panel order at the end
 * (deterministic for a given plan). cpu_strategy 'blas_threads': OpenBLAS threads one GEMM,
 * the epilogue in passes around it. OpenBLAS itself is kept at one thread otherwise, so the two
 * never oversubscribe.
 *
 * fusemath's own GEMM kernel is the "gemmkernel" backend (gemmkernel_matmul.c), offered first:
 * this one plans what it declines. It declines cpu_strategy 'kernel' (FM_ERR_NOT_APPLICABLE) and
 * plans 'tiles', 'blas_threads' and auto, which it computes as cblas tiles; so
 * FUSEMATH_BACKEND=openblas means OpenBLAS only, never the kernel. */
#include "blas_provider.h"
#include "cpu_matmul.h"

#include <stdio.h>
#include <string.h>

#define FOLD_BLOCK_BYTES (64 * 1024) /* rows of D per bias+activation block (blas-threads pass) */

typedef struct openblas_impl {
    fm_cpu_mm mm;              /* the problem and its tiles */
    fm_cpu_mm_layout la, lb;   /* how BLAS reads A and B */
    int blas_threaded;         /* FM_CPU_STRATEGY_BLAS_THREADS */
} openblas_impl;

static fm_status openblas_probe(const fm_settings *settings, void **state, const char **why)
{
    return fm_blas_select(settings->blas); /* once per process; it also sets one OpenBLAS thread */
}

/* ---- GEMM on one panel ---- */
static void zero_rows(char *d, int64_t rows, int64_t cols, int64_t ld, size_t es)
{
    for (int64_t i = 0; i < rows; i++)
        memset(d + (size_t)(i * ld) * es, 0, (size_t)cols * es);
}

static void gemm(const openblas_impl *pl, int64_t rows, int64_t cols, const void *a, int64_t lda, const void *b,
                 int64_t ldb, void *d, int64_t ldd, int accumulate)
{
    /* alpha = 0: as BLAS specifies, A and B are not read (inf / NaN there do not propagate).
     * OpenBLAS itself skips them on some paths and not on others (its small-matrix kernels form
     * the product: the answer depended on the operands' layout), so it is decided here. */
    if (pl->mm.mp.alpha[0] == 0.0 && pl->mm.mp.alpha[1] == 0.0) {
        if (!accumulate)
            zero_rows(d, rows, cols, ldd, pl->mm.es);
        return;
    }
    const enum CBLAS_TRANSPOSE ta = pl->la.trans ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = pl->lb.trans ? CblasTrans : CblasNoTrans;
    const int m = (int)rows, n = (int)cols, k = (int)pl->mm.g.k;
    const double *al = pl->mm.mp.alpha;
    switch (pl->mm.g.dtype) {
    case FM_F32:
        fm_blas_lib.sgemm(CblasRowMajor, ta, tb, m, n, k, (float)al[0], a, (int)lda, b, (int)ldb, accumulate ? 1.0f : 0.0f,
                    d, (int)ldd);
        break;
    case FM_F64:
        fm_blas_lib.dgemm(CblasRowMajor, ta, tb, m, n, k, al[0], a, (int)lda, b, (int)ldb, accumulate ? 1.0 : 0.0, d,
                    (int)ldd);
        break;
    case FM_C64: {
        const float alpha[2] = {(float)al[0], (float)al[1]}, beta[2] = {accumulate ? 1.0f : 0.0f, 0.0f};
        fm_blas_lib.cgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, (int)lda, b, (int)ldb, beta, d, (int)ldd);
        break;
    }
    case FM_C128: {
        const double beta[2] = {accumulate ? 1.0 : 0.0, 0.0};
        fm_blas_lib.zgemm(CblasRowMajor, ta, tb, m, n, k, al, a, (int)lda, b, (int)ldb, beta, d, (int)ldd);
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
static void *pack_operand(const openblas_impl *pl, int slot, const char *base, int64_t rows, int64_t cols)
{
    const fm_matmul_geom *g = &pl->mm.g;
    size_t per = (size_t)(rows * cols) * pl->mm.es;
    char *buf = fm_malloc_aligned(per * (size_t)(g->batch_count > 0 ? g->batch_count : 1), 64);
    if (!buf)
        return NULL;
#pragma omp parallel for num_threads(pl->mm.threads) schedule(static) if (g->batch_count > 1)
    for (int64_t b = 0; b < g->batch_count; b++)
        copy_matrix(pl->mm.es, rows, cols, base + fm_matmul_batch_offset(g, slot, b) * (int64_t)pl->mm.es,
                    g->row_stride[slot], g->col_stride[slot], buf + per * (size_t)b);
    return buf;
}

/* ---- one work item: (batch, row panel, column block) ---- */
typedef struct exec_args {
    const openblas_impl *pl;
    fm_cpu_mm_io io;      /* the operands; D's geometry actually written (user's or a temp) */
    char *scratch;        /* scale with C == D: per-thread GEMM panels of scratch_bytes */
    size_t scratch_bytes;
    double *partial;      /* drelu/dgelu+bgrad: column sums, [batch][part][n] */
    int64_t nparts;       /* parts (row panels or row chunks) per batch */
} exec_args;

/* Operand origins of batch b. */
static const char *batch_a(const openblas_impl *pl, const exec_args *x, int64_t b)
{
    const fm_matmul_geom *g = &pl->mm.g;
    return pl->la.copy ? x->io.a + (size_t)(b * g->m * g->k) * pl->mm.es
                       : x->io.a + fm_matmul_batch_offset(g, FM_MATMUL_A, b) * (int64_t)pl->mm.es;
}

static const char *batch_b(const openblas_impl *pl, const exec_args *x, int64_t b)
{
    const fm_matmul_geom *g = &pl->mm.g;
    return pl->lb.copy ? x->io.b + (size_t)(b * g->k * g->n) * pl->mm.es
                       : x->io.b + fm_matmul_batch_offset(g, FM_MATMUL_B, b) * (int64_t)pl->mm.es;
}

/* bgrada: bgrad[b, r0 + i] = sum_k A[b, r0 + i, k] for the rows of a panel; `a` is the
 * panel's first row as the GEMM reads it (packed or the user's layout). */
static void bgrada_rows(const openblas_impl *pl, const exec_args *x, int64_t b, int64_t r0, int64_t rows,
                        const char *a)
{
    const fm_matmul_geom *g = &pl->mm.g;
    int64_t os = pl->la.trans ? 1 : pl->la.ld, rs = pl->la.trans ? pl->la.ld : 1;
    char *out = x->io.bgrad + (fm_matmul_batch_offset(g, FM_MATMUL_BGRAD, b) + r0 * g->row_stride[FM_MATMUL_BGRAD]) *
                               (int64_t)pl->mm.es;
    fm_cpu_sums_store(g->dtype, rows, g->k, a, os, rs, out, g->row_stride[FM_MATMUL_BGRAD]);
}

/* bgradb: bgrad[b, c0 + j] = sum_k B[b, k, c0 + j]; `bm` is column c0 of B as the GEMM reads it. */
static void bgradb_cols(const openblas_impl *pl, const exec_args *x, int64_t b, int64_t c0, int64_t cols,
                        const char *bm)
{
    const fm_matmul_geom *g = &pl->mm.g;
    int64_t os = pl->lb.trans ? pl->lb.ld : 1, rs = pl->lb.trans ? 1 : pl->lb.ld;
    char *out = x->io.bgrad + (fm_matmul_batch_offset(g, FM_MATMUL_BGRAD, b) + c0 * g->col_stride[FM_MATMUL_BGRAD]) *
                               (int64_t)pl->mm.es;
    fm_cpu_sums_store(g->dtype, cols, g->k, bm, os, rs, out, g->col_stride[FM_MATMUL_BGRAD]);
}

/* One work item of the tiles strategy (arg: the exec_args): (batch, row panel, column block), one
 * single-threaded GEMM with the epilogue before and after it. tid: the calling thread's index in
 * the team (selects its scratch panel). */
static void run_item(const void *arg, int64_t item, int tid)
{
    const exec_args *x = arg;
    const openblas_impl *pl = x->pl;
    const fm_matmul_geom *g = &pl->mm.g;
    const int64_t es = (int64_t)pl->mm.es;
    const unsigned epi = pl->mm.mp.epilogue;
    int64_t per_batch = pl->mm.n_row_panels * pl->mm.n_col_blocks;
    int64_t b = item / per_batch, rem = item % per_batch;
    int64_t rp = rem / pl->mm.n_col_blocks;
    int64_t r0 = rp * pl->mm.panel_rows, c0 = (rem % pl->mm.n_col_blocks) * pl->mm.col_block;
    int64_t rows = fm_min_i64(pl->mm.panel_rows, g->m - r0), cols = fm_min_i64(pl->mm.col_block, g->n - c0);
    const char *a = batch_a(pl, x, b) + (pl->la.trans ? r0 : r0 * pl->la.ld) * es;
    const char *bm = batch_b(pl, x, b) + (pl->lb.trans ? c0 * pl->lb.ld : c0) * es;
    fm_cpu_panel p = fm_cpu_mm_panel(&pl->mm, &x->io, b, r0, rows, c0, cols);
    if (x->partial)
        p.colsum = x->partial + (b * x->nparts + rp) * g->n + c0;
    if (x->io.scale) {
        /* alpha*A@B alone first (beta = 0), then scale, beta*C and bias while it is hot */
        char *src = p.d;
        int64_t lds = x->io.ldd;
        if (x->scratch) { /* C is D's memory: keep it intact until the combine reads it */
            src = x->scratch + (size_t)tid * x->scratch_bytes;
            lds = cols;
        }
        if (g->k > 0)
            gemm(pl, rows, cols, a, pl->la.ld, bm, pl->lb.ld, src, lds, 0);
        else
            zero_rows(src, rows, cols, lds, pl->mm.es);
        fm_cpu_scale_combine(g->dtype, &p, src, lds, pl->mm.mp.beta);
    } else {
        int preloaded = fm_cpu_preload(g->dtype, &p, pl->mm.mp.beta);
        if (g->k > 0)
            gemm(pl, rows, cols, a, pl->la.ld, bm, pl->lb.ld, p.d, x->io.ldd, preloaded);
        else if (!preloaded)
            zero_rows(p.d, rows, cols, x->io.ldd, pl->mm.es);
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
 * passes over row chunks around it, run by the passive pool (cpu_threads.c) so no
 * spinning thread competes with OpenBLAS's. The passes cost O(mn) against the
 * GEMM's O(mnk). */
typedef struct pass_job {
    const openblas_impl *pl;
    const exec_args *x;
    int64_t b, rows; /* one contiguous block of rows per thread (see execute) */
    int activate;
    int fold_bias; /* the post pass adds the bias too (the GEMM ran with beta = 0) */
    const char *src; /* scale: alpha*A@B of batch b (row 0), row stride lds */
    int64_t lds;
} pass_job;

#define BGRADB_CHUNK_COLS 512 /* columns of B summed per pool item */

/* Rows per chunk of the blas-threads passes: one chunk per thread. */
static int64_t blas_chunk_rows(const openblas_impl *pl) { return (pl->mm.g.m + pl->mm.threads - 1) / pl->mm.threads; }

static void pass_chunk(void *arg, int64_t ci)
{
    pass_job *j = arg;
    const openblas_impl *pl = j->pl;
    const fm_matmul_geom *g = &pl->mm.g;
    const int64_t r0 = ci * j->rows;
    if (r0 >= g->m)
        return;
    const int64_t rows = fm_min_i64(j->rows, g->m - r0);
    if (j->fold_bias) {
        /* bias and activation in one sweep over D, block by block while a block is in L1/L2 */
        const int64_t step = fm_max_i64(1, FOLD_BLOCK_BYTES / (g->n * (int64_t)pl->mm.es));
        for (int64_t s = r0; s < r0 + rows; s += step) {
            fm_cpu_panel p = fm_cpu_mm_panel(&pl->mm, &j->x->io, j->b, s, fm_min_i64(step, r0 + rows - s), 0, g->n);
            fm_cpu_add_bias(g->dtype, &p);
            fm_cpu_activate(g->dtype, pl->mm.mp.epilogue, &p);
        }
        return;
    }
    fm_cpu_panel p = fm_cpu_mm_panel(&pl->mm, &j->x->io, j->b, r0, rows, 0, g->n);
    if (!j->activate) {
        fm_cpu_preload(g->dtype, &p, pl->mm.mp.beta);
        return;
    }
    if (j->x->partial)
        p.colsum = j->x->partial + (j->b * j->x->nparts + ci) * g->n;
    if (j->x->io.scale)
        fm_cpu_scale_combine(g->dtype, &p, j->src + r0 * j->lds * (int64_t)pl->mm.es, j->lds, pl->mm.mp.beta);
    fm_cpu_activate(g->dtype, pl->mm.mp.epilogue, &p);
    if (pl->mm.mp.epilogue & FM_EPILOGUE_BGRADA)
        bgrada_rows(pl, j->x, j->b, r0, rows,
                    batch_a(pl, j->x, j->b) + (pl->la.trans ? r0 : r0 * pl->la.ld) * (int64_t)pl->mm.es);
}

static void bgradb_chunk(void *arg, int64_t ci)
{
    pass_job *j = arg;
    const openblas_impl *pl = j->pl;
    const int64_t c0 = ci * BGRADB_CHUNK_COLS, cols = fm_min_i64(BGRADB_CHUNK_COLS, pl->mm.g.n - c0);
    bgradb_cols(pl, j->x, j->b, c0, cols,
                batch_b(pl, j->x, j->b) + (pl->lb.trans ? c0 * pl->lb.ld : c0) * (int64_t)pl->mm.es);
}

/* Which passes around the GEMM a plan needs (also what describe() counts). */
static int needs_post_pass(const openblas_impl *pl)
{
    return (pl->mm.mp.epilogue & (FM_EPILOGUE_SCALE | FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_BACKWARD_ |
                               FM_EPILOGUE_BGRAD | FM_EPILOGUE_BGRADA | FM_EPILOGUE_DROPOUT)) != 0;
}

/* bias + a forward activation, no C term: one pass after a beta = 0 GEMM adds the
 * bias and activates, where a preload before the GEMM would be a second pass */
static int folds_bias(const openblas_impl *pl, int has_c)
{
    return needs_post_pass(pl) && (pl->mm.mp.epilogue & FM_EPILOGUE_BIAS) && !fm_cpu_mm_has_c_term(&pl->mm, has_c) &&
           !(pl->mm.mp.epilogue & (FM_EPILOGUE_SCALE | FM_EPILOGUE_BACKWARD_ | FM_EPILOGUE_ANY_BGRAD_));
}

static int needs_pre_pass(const openblas_impl *pl, int has_c)
{
    return !(pl->mm.mp.epilogue & FM_EPILOGUE_SCALE) && !folds_bias(pl, has_c) &&
           ((pl->mm.mp.epilogue & FM_EPILOGUE_BIAS) || fm_cpu_mm_has_c_term(&pl->mm, has_c));
}

static void run_blas_threaded(const openblas_impl *pl, const exec_args *x)
{
    const fm_matmul_geom *g = &pl->mm.g;
    const int64_t rows = blas_chunk_rows(pl), chunks = (g->m + rows - 1) / rows;
    const int scaled = x->io.scale != NULL;
    const int has_post = needs_post_pass(pl), fold_bias = x->io.bias && folds_bias(pl, x->io.c != NULL);
    /* the condition under which fm_cpu_preload writes: then the GEMM accumulates */
    const int has_pre = !scaled && !fold_bias && (x->io.bias || fm_cpu_mm_has_c_term(&pl->mm, x->io.c != NULL));
    for (int64_t b = 0; b < g->batch_count; b++) {
        pass_job j = {pl, x, b, rows, 0, 0, NULL, 0};
        if (has_pre)
            fm_pool_run(pl->mm.threads, chunks, pass_chunk, &j);
        fm_cpu_panel whole = fm_cpu_mm_panel(&pl->mm, &x->io, b, 0, g->m, 0, g->n);
        char *dst = whole.d;
        int64_t ldd = x->io.ldd;
        if (scaled && x->scratch) { /* C is D's memory: the GEMM goes to a temp */
            dst = x->scratch;
            ldd = g->n;
        }
        if (g->k == 0) { /* an empty sum: no BLAS call with k = 0 (as the tiles, run_item) */
            if (!has_pre)
                zero_rows(dst, g->m, g->n, ldd, pl->mm.es);
        } else {
            fm_blas_threads_begin(pl->mm.threads);
            gemm(pl, g->m, g->n, batch_a(pl, x, b), pl->la.ld, batch_b(pl, x, b), pl->lb.ld, dst, ldd, has_pre);
            fm_blas_threads_end();
        }
        if (has_post) {
            j.activate = 1;
            j.fold_bias = fold_bias;
            j.src = dst;
            j.lds = ldd;
            fm_pool_run(pl->mm.threads, chunks, pass_chunk, &j);
        }
        if (pl->mm.mp.epilogue & FM_EPILOGUE_BGRADB)
            fm_pool_run(pl->mm.threads, (g->n + BGRADB_CHUNK_COLS - 1) / BGRADB_CHUNK_COLS, bgradb_chunk, &j);
    }
}

/* m == 0 or n == 0: no GEMM, but the bias gradient along the other extent is still
 * defined (sums over K of A's rows or B's columns; zeros for a sum over no rows). */
static void bgrad_of_empty(const openblas_impl *pl, void *const *ptrs)
{
    const fm_matmul_geom *g = &pl->mm.g;
    const unsigned epi = pl->mm.mp.epilogue;
    const int64_t es = (int64_t)pl->mm.es;
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

/* An execute's temporaries: packed copies of A and B (packed whenever la / lb say copy: with k = 0
 * nothing reads them), a temporary D (each NULL when not needed). */
typedef struct exec_bufs {
    void *a, *b, *d;
} exec_bufs;

/* The temporaries x needs, into t and x (the scale chain's scratch panels, the bias gradient's
 * partial sums); the caller frees them whatever this returns. */
static fm_status exec_prepare(const openblas_impl *pl, const fm_plan *plan, exec_args *x, exec_bufs *t)
{
    const fm_matmul_geom *g = &pl->mm.g;
    const size_t es = pl->mm.es;
    char *user_d = x->io.d;
    if (pl->la.copy && g->k > 0) {
        if (!(t->a = pack_operand(pl, FM_MATMUL_A, x->io.a, g->m, g->k)))
            return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory packing a");
        x->io.a = t->a;
    }
    if (pl->lb.copy && g->k > 0) {
        if (!(t->b = pack_operand(pl, FM_MATMUL_B, x->io.b, g->k, g->n)))
            return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory packing b");
        x->io.b = t->b;
    }
    fm_status st = fm_cpu_mm_open_d(&pl->mm, &x->io, &t->d);
    if (st != FM_OK)
        return st;
    if (x->io.scale && x->io.c && pl->mm.mp.beta[0] != 0.0 && pl->mm.d_direct &&
        operands_overlap(&plan->problem, FM_MATMUL_C, x->io.c, FM_MATMUL_D, user_d)) {
        /* scale with D = C in place: the beta = 0 GEMM must not overwrite C before the
         * combine reads it, so it writes a scratch panel per thread (the whole D for
         * the blas-threads strategy) */
        x->scratch_bytes = pl->blas_threaded ? (size_t)(g->m * g->n) * es
                                             : (size_t)(pl->mm.panel_rows * pl->mm.col_block) * es;
        x->scratch_bytes = (x->scratch_bytes + 63) / 64 * 64;
        if (!(x->scratch = fm_malloc_aligned(x->scratch_bytes * (size_t)(pl->blas_threaded ? 1 : pl->mm.threads), 64)))
            return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory for the scale chain's scratch panels");
    }
    if (pl->mm.mp.epilogue & FM_EPILOGUE_BGRAD) {
        /* column sums of D per part (row panel / row chunk), reduced in part order after */
        x->nparts = pl->blas_threaded ? (g->m + blas_chunk_rows(pl) - 1) / blas_chunk_rows(pl) : pl->mm.n_row_panels;
        if (!(x->partial = fm_malloc_aligned(sizeof(double) * (size_t)(g->batch_count * x->nparts * g->n), 64)))
            return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory for the bias gradient's partial sums");
    }
    return FM_OK;
}

static fm_status openblas_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const openblas_impl *pl = plan->impl;
    const fm_matmul_geom *g = &pl->mm.g;
    if (g->batch_count == 0)
        return FM_OK;
    if (g->m == 0 || g->n == 0) {
        bgrad_of_empty(pl, ptrs);
        return FM_OK;
    }
    exec_args x = {.pl = pl,
                   .io = {.a = ptrs[FM_MATMUL_A], .b = ptrs[FM_MATMUL_B], .c = ptrs[FM_MATMUL_C],
                          .bias = ptrs[FM_MATMUL_BIAS], .scale = ptrs[FM_MATMUL_SCALE], .d = ptrs[FM_MATMUL_D],
                          .aux = ptrs[FM_MATMUL_AUX], .bgrad = ptrs[FM_MATMUL_BGRAD]}};
    fm_cpu_mm_io_args(&x.io, args);
    char *user_d = x.io.d;
    exec_bufs t = {0};
    fm_status st = exec_prepare(pl, plan, &x, &t);
    if (st == FM_OK) {
        if (pl->blas_threaded)
            run_blas_threaded(pl, &x);
        else
            fm_cpu_mm_run(&pl->mm, 0, NULL, run_item, &x);
        if (x.partial)
            for (int64_t b = 0; b < g->batch_count; b++)
                fm_cpu_reduce_partials(g->dtype, x.nparts, g->n, x.partial + b * x.nparts * g->n,
                                       x.io.bgrad + fm_matmul_batch_offset(g, FM_MATMUL_BGRAD, b) * (int64_t)pl->mm.es,
                                       g->col_stride[FM_MATMUL_BGRAD]);
        fm_cpu_mm_close_d(&pl->mm, user_d, t.d);
    }
    fm_free_aligned(t.a);
    fm_free_aligned(t.b);
    fm_free_aligned(t.d);
    fm_free_aligned(x.scratch);
    fm_free_aligned(x.partial);
    return st;
}

/* ---- planning ---- */
/* The cut of D: one GEMM threaded by OpenBLAS (cpu_strategy 'blas_threads' on more than one
 * thread), else cblas tiles (cpu_matmul.c). */
static void choose_tiles(openblas_impl *pl)
{
    fm_cpu_mm *mm = &pl->mm;
    const int threads = fm_cpu_mm_threads(mm);
    if (mm->mp.cpu_strategy != FM_CPU_STRATEGY_BLAS_THREADS || threads <= 1) {
        fm_cpu_mm_choose_tiles(mm, threads);
        return;
    }
    pl->blas_threaded = 1;
    mm->panel_rows = mm->g.m > 0 ? mm->g.m : 1;
    mm->col_block = mm->g.n > 0 ? mm->g.n : 1;
    mm->n_row_panels = mm->n_col_blocks = 1;
    mm->items = mm->g.batch_count > 0 ? mm->g.batch_count : 1;
    mm->threads = threads;
}

static fm_status openblas_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    if (p->u.matmul.cpu_strategy == FM_CPU_STRATEGY_KERNEL)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "cpu_strategy 'kernel' is fusemath's own GEMM kernel (the gemmkernel "
                       "backend), not cblas");
    openblas_impl pl = {0};
    fm_status st = fm_cpu_mm_init(p, &pl.mm, &pl.la, &pl.lb);
    if (st != FM_OK)
        return st;
    choose_tiles(&pl);
    /* describe(): passes over D (tiles fuse everything into one; blas-threads adds a preload
     * before and an epilogue pass after the threaded GEMM when there is work for them), BLAS's
     * transposes, the copies */
    const int has_c = (p->present >> FM_MATMUL_C) & 1;
    const int passes = pl.blas_threaded ? 1 + needs_pre_pass(&pl, has_c) + needs_post_pass(&pl) : 1;
    const int ca = pl.la.copy, cb = pl.lb.copy, cd = !pl.mm.d_direct;
    char copies[32] = "", suffix[128];
    if (ca || cb || cd)
        snprintf(copies, sizeof copies, " copies=%s%s%s", ca ? "a" : "", cb ? (ca ? ",b" : "b") : "",
                 cd ? (ca || cb ? ",d" : "d") : "");
    snprintf(suffix, sizeof suffix, "%s%s%s blas=%s", pl.la.trans ? " trans_a" : "", pl.lb.trans ? " trans_b" : "",
             copies, fm_blas_lib.tag);
    return fm_cpu_mm_install(&pl.mm, &pl, sizeof pl, openblas_execute, "openblas", passes,
                             pl.blas_threaded ? "blas_threads" : "panel", suffix, out);
}

/* Wisdom salt: tuned panel heights depend on the BLAS build and the CPU it picked (the
 * thread count is part of the problem already). */
static void openblas_wisdom_salt(const fm_context *ctx, void *state, const fm_problem *p, char *buf, size_t n)
{
    const char *config = fm_blas_lib.get_config();
    snprintf(buf, n, "%s", config ? config : "");
}

/* Autotune's candidates: each panel height up to M (0: the heuristic's) through cblas tiles;
 * the gemmkernel backend offers the same heights through the own kernel. Not blas-threads:
 * OpenBLAS's spinning threads slow whatever runs next, which a timing loop does not see. */
static int openblas_tune_candidates(const fm_context *ctx, void *state, const fm_problem *p, fm_problem *cand,
                                    int *group, int max)
{
    return fm_cpu_mm_tune_heights(p, FM_CPU_STRATEGY_TILES, cand, group, max);
}

const fm_backend fm_backend_openblas_matmul = {
    .name = "openblas",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_MATMUL,
    .priority = 0,
    .probe = openblas_probe,
    .plan = openblas_plan,
    .wisdom_salt = openblas_wisdom_salt,
    .tune_candidates = openblas_tune_candidates,
};
