/* cpu_matmul.h : what the two CPU matmul backends share (private to backends/cpu), and the threads
 * they run on (cpu_threads.c).
 *
 * openblas_matmul.c ("openblas": cblas tiles, blas-threads) and gemmkernel_matmul.c
 * ("gemmkernel": tiles through fusemath's own GEMM kernel) both cut D into tiles (row panels,
 * column blocks when rows are too few for the threads) run by OpenMP threads with the epilogue
 * fused per tile. Shared here: the problem's checks and geometry, the cut into tiles, the
 * epilogue's view of a tile, the temporary D for layouts that are written element by element,
 * and the common part of describe(). Definitions in cpu_matmul.c. */
#ifndef FM_CPU_MATMUL_H
#define FM_CPU_MATMUL_H

#include "cpu_epilogue.h"
#include "epilogue.h"
#include "internal.h"

#define FM_CPU_MM_LARGE_K 256 /* from here on the GEMM, not the epilogue, dominates */

/* ---- threads ---- */
/* cpu_threads.c: a small process-wide pool of threads that sleep between jobs. Runs fn(arg, i) for
 * i in [0, items) on up to `threads` threads (the caller is one of them) and returns when all are
 * done. Jobs from several callers run one after the other. Workers wait passively, so they leave
 * the cores to OpenBLAS's threads as soon as a job ends (OpenMP's workers spin for milliseconds
 * instead). Returns 0, or -1 when threads could not be started (then the caller ran every item). */
typedef void (*fm_pool_fn)(void *arg, int64_t item);
int fm_pool_run(int threads, int64_t items, fm_pool_fn fn, void *arg);
/* cpu_threads.c: who owns OpenBLAS's (process-wide) thread count, one thread outside these:
 * around single-threaded GEMM calls made from the library's own threads (shared); around one
 * GEMM that OpenBLAS runs on n threads (exclusive). */
void fm_blas_single_begin(void);
void fm_blas_single_end(void);
void fm_blas_threads_begin(int n);
void fm_blas_threads_end(void);

/* How BLAS can read an operand (cpu_matmul.c: fm_cpu_mm_layout). */
typedef struct fm_cpu_mm_layout {
    int trans; /* operand stored transposed (column-major) */
    int64_t ld;
    int copy; /* layout BLAS cannot take: packed into a contiguous copy at execute */
} fm_cpu_mm_layout;

/* The part of a plan both backends have: the problem and its cut into tiles. */
typedef struct fm_cpu_mm {
    fm_matmul_geom g;
    fm_matmul_params mp;
    int d_direct; /* D is row-major with unit column stride */
    int64_t panel_rows, col_block;
    int64_t n_row_panels, n_col_blocks, items;
    int threads;
    int dynamic; /* tiles handed out one by one (schedule(dynamic)) instead of a static split */
    size_t es;
} fm_cpu_mm;

/* An execute's operands (D: the user's or the temporary, with the geometry actually written). */
typedef struct fm_cpu_mm_io {
    const char *a, *b, *c, *bias, *scale;
    char *d, *aux, *bgrad;
    int64_t ldd, d_batch;
    uint64_t drop_pos, drop_seed; /* dropout's per-call position and seed (fm_exec_args ints[0], ints[3]) */
} fm_cpu_mm_io;

/* io's dropout fields from the per-call arguments (never NULL at a backend's execute). */
static inline void fm_cpu_mm_io_args(fm_cpu_mm_io *io, const fm_exec_args *args)
{
    io->drop_pos = (uint64_t)args->ints[0];
    io->drop_seed = (uint64_t)args->ints[3];
}

/* Fill mm from p (geometry, parameters, D's layout) after the checks both backends make, in this
 * order: fp8 and half-precision inputs (FM_ERR_NOT_APPLICABLE, the reason naming what to do),
 * extents and leading dimensions past 32-bit BLAS and a temporary D too large (FM_ERR_TOO_LARGE).
 * la, lb: how BLAS reads A and B. */
fm_status fm_cpu_mm_init(const fm_problem *p, fm_cpu_mm *mm, fm_cpu_mm_layout *la, fm_cpu_mm_layout *lb);

/* The threads a plan runs on: the problem's, or one below 4 MFLOP (an explicit blas-threads
 * strategy keeps them). */
int fm_cpu_mm_threads(const fm_cpu_mm *mm);
/* Tiles of rows x cols (columns split further while there are fewer tiles than threads), the
 * counts and the threads used. */
void fm_cpu_mm_set_tiles(fm_cpu_mm *mm, int threads, int64_t rows, int64_t cols);
/* The cblas tiles' cut: the asked panel height, else compute-bound (k >= FM_CPU_MM_LARGE_K) one
 * large tile per thread, or four handed out dynamically, else memory-bound panels that stay in
 * cache for the epilogue; then fm_cpu_mm_set_tiles. */
void fm_cpu_mm_choose_tiles(fm_cpu_mm *mm, int threads);

/* D for an execute: the user's (d_direct), else a contiguous temporary in *tmp (out of memory:
 * FM_ERR_OUT_OF_MEMORY); io->d, ldd and d_batch set. fm_cpu_mm_close_d copies a temporary out
 * to user_d. */
fm_status fm_cpu_mm_open_d(const fm_cpu_mm *mm, fm_cpu_mm_io *io, void **tmp);
void fm_cpu_mm_close_d(const fm_cpu_mm *mm, char *user_d, const void *tmp);

/* out runs a heap copy of impl (size bytes, freed with the plan; mm is impl's part) through
 * execute, with its operands' alignment and describe(): "matmul cpu/<backend> f32 MxNxK[ batch=B]
 * epilogue=E passes=P <tiling>=RxC threads=T[ tiles=dynamic]" and then the backend's suffix (its
 * own fields, each with a leading space). */
fm_status fm_cpu_mm_install(const fm_cpu_mm *mm, const void *impl, size_t size, fm_execute_fn execute,
                            const char *backend, int passes, const char *tiling, const char *suffix,
                            fm_plan *out);

/* Autotune's candidates of a backend: p with each panel height up to M (0: the heuristic's) and
 * cpu_strategy `strategy`, each on its own (a height it refuses says nothing of the next). */
int fm_cpu_mm_tune_heights(const fm_problem *p, int strategy, fm_problem *cand, int *group, int max);

/* A tiles plan's execute: pack(arg, u) for every u < units (what every item reads), then
 * item(arg, it, tid) for every work item (tid: the thread's index in the team); on the caller's
 * thread, or on the plan's team. */
void fm_cpu_mm_run(const fm_cpu_mm *mm, int64_t units, void (*pack)(const void *arg, int64_t u),
                   void (*item)(const void *arg, int64_t it, int tid), const void *arg);

/* The epilogue's view of rows [r0, r0+rows) x cols [c0, c0+cols) of batch b. Inline: every tile
 * (and the kernel's every L1 slab) makes one. */
static inline fm_cpu_panel fm_cpu_mm_panel(const fm_cpu_mm *mm, const fm_cpu_mm_io *x, int64_t b, int64_t r0,
                                           int64_t rows, int64_t c0, int64_t cols)
{
    const fm_matmul_geom *g = &mm->g;
    const int64_t es = (int64_t)mm->es;
    fm_cpu_panel p = {0};
    p.rows = rows;
    p.cols = cols;
    p.ldd = x->ldd;
    int64_t d_off = mm->d_direct ? fm_matmul_batch_offset(g, FM_MATMUL_D, b) : b * x->d_batch;
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
    p.clamp[0] = mm->mp.clamp[0];
    p.clamp[1] = mm->mp.clamp[1];
    p.col0 = c0;
    p.last_col_block = (c0 + cols == g->n);
    if (mm->mp.epilogue & FM_EPILOGUE_DROPOUT) {
        p.drop_word0 = x->drop_pos + (uint64_t)((b * g->m + r0) * g->n + c0);
        p.drop_ld = g->n;
        p.drop_seed = x->drop_seed;
        p.drop_threshold = fm_dropout_threshold(mm->mp.dropout);
    }
    p.drop_scale = fm_dropout_scale(mm->mp.dropout);
    if (x->aux) {
        int relu = fm_epilogue_aux_is_mask(mm->mp.epilogue); /* relu+aux writes, drelu reads the mask */
        int64_t aes = relu ? 1 : es;
        p.aux_ld = g->row_stride[FM_MATMUL_AUX];
        if (g->m == 1 || p.aux_ld == 0)
            p.aux_ld = relu ? fm_relu_mask_row_bytes(g->n) : g->n;
        p.mask_row_bytes = fm_relu_mask_row_bytes(g->n);
        p.aux = x->aux + (fm_matmul_batch_offset(g, FM_MATMUL_AUX, b) + r0 * p.aux_ld + (relu ? 0 : c0)) * aes;
    }
    return p;
}

/* True when beta * C contributes (C present and beta != 0). */
static inline int fm_cpu_mm_has_c_term(const fm_cpu_mm *mm, int has_c)
{
    return has_c && (mm->mp.beta[0] != 0.0 || mm->mp.beta[1] != 0.0);
}

#endif
