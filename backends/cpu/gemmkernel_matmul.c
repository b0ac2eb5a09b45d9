/* gemmkernel_matmul.c : the "gemmkernel" backend, CPU matmul through fusemath's own GEMM kernel
 * (fusion/cpu_gemm_kernel.h): D cut into tiles (cpu_matmul.h), each tile summed over k in
 * registers and stored once with alpha, beta*C, bias and relu applied; other activations and aux
 * outputs as a pass over each L1 slab of the tile right after the kernel wrote it.
 *
 * Offered before "openblas" (a higher priority), the way backends/cuda/fftkernel_fft.c is offered
 * before cuFFT. With cpu_strategy auto it takes what it does better than OpenBLAS, by the
 * measured rules of auto_declines() (k up to its variant's auto_max_k; packing B only over
 * enough rows), and answers FM_ERR_NOT_APPLICABLE with the reason for everything else, which
 * FUSEMATH_LOG=plan shows, so openblas plans it. cpu_strategy 'kernel' forces it: a product it
 * cannot compute (complex, alpha = 0 or k = 0, scale, backward or bias-gradient epilogues) is
 * then FM_ERR_NOT_SUPPORTED and planning stops there, never falling through to cblas.
 * cpu_strategy 'tiles' and 'blas_threads' are openblas's: declined.
 *
 * FUSEMATH_BACKEND=gemmkernel: only this backend plans, with the same rules (a product auto gives
 * to OpenBLAS is then refused; cpu_strategy 'kernel' makes it take whatever it computes).
 * FUSEMATH_BACKEND=openblas: OpenBLAS only, never this kernel (auto plans cblas tiles).
 * FUSEMATH_CPU_KERNEL=avx2|generic caps the variant, FUSEMATH_CPU_KERNEL_KC sets the k block:
 * both read at context creation (fm_settings). */
#include "cpu_gemm_kernel.h"
#include "cpu/blas_provider.h"
#include "cpu_matmul.h"

#include <stdio.h>
#include <string.h>

/* Rows of D per call of the kernel when an activation pass follows it: a slab the
 * pass (fm_cpu_activate) finds in L1 */
#define KERNEL_SLAB_BYTES (32 * 1024)
#define KERNEL_DIRECT_B_BYTES (32 * 1024) /* B up to this size is read in place, not packed */
#define KERNEL_ITEM_B_BYTES (128 * 1024) /* auto packs a B per batch entry (per item) up to this */
#define KERNEL_MIN_ROWS 64 /* auto packs B (shared: over all batches' rows) for at least this many rows */
#define KERNEL_TILE_COLS 256 /* column block of the kernel's compute-bound tiles (a multiple of 128) */

/* How the kernel gets B: read in place (small, row-major, n a multiple of the strip),
 * packed once per execute (one B for every batch), or packed per work item into the
 * thread's buffer (a B per batch entry: packing them all first cost a pass over memory and
 * B's size again in scratch; per item the strips are still in cache when the kernel reads them). */
enum { KERNEL_B_DIRECT, KERNEL_B_SHARED, KERNEL_B_PER_ITEM };

typedef struct gemmkernel_impl {
    fm_cpu_mm mm;
    const fm_cpu_gemm_kernel *kern;
    int relu;         /* the kernel applies relu in registers (no slab pass) */
    int64_t kc;       /* k per block of the kernel (0: all of k at once) */
    int b_mode;       /* how the kernel gets B: KERNEL_B_* */
    int bias_direct;  /* it reads the bias in place (unit stride, n % nr == 0), else packs it */
} gemmkernel_impl;

typedef struct gemmkernel_args {
    const gemmkernel_impl *pl;
    fm_cpu_mm_io io;
    char *bp;             /* KERNEL_B_SHARED: B packed in strips; KERNEL_B_PER_ITEM: one buffer of
                           * bp_thread_bytes per thread, bp_tag[tid] saying what it holds */
    size_t bp_thread_bytes;
    int64_t *bp_tag;
    char *bias_p;         /* the bias packed, [batch][strips * nr], or NULL */
    int64_t bias_p_len;   /* elements per batch of bias_p */
} gemmkernel_args;

/* ---- execute ---- */
/* B of work item (batch b, columns from c0) as the kernel reads it, into ka. */
static void item_b(const gemmkernel_impl *pl, const gemmkernel_args *x, int64_t b, int64_t c0, int64_t cols, int tid,
                   fm_cpu_gemm_args *ka)
{
    const fm_matmul_geom *g = &pl->mm.g;
    const int64_t es = (int64_t)pl->mm.es, nr = pl->kern->nr;
    const char *bsrc = x->io.b + (fm_matmul_batch_offset(g, FM_MATMUL_B, b) + c0 * g->col_stride[FM_MATMUL_B]) * es;
    ka->b_ld = nr;
    ka->b_strip = g->k * nr;
    if (pl->b_mode == KERNEL_B_DIRECT) {
        ka->bp = bsrc;
        ka->b_ld = g->row_stride[FM_MATMUL_B];
        ka->b_strip = nr;
    } else if (pl->b_mode == KERNEL_B_SHARED) {
        ka->bp = x->bp + (c0 / nr) * g->k * nr * es; /* c0 is a multiple of nr (plan checks) */
    } else {
        char *buf = x->bp + (size_t)tid * x->bp_thread_bytes;
        const int64_t tag = b * pl->mm.n_col_blocks + c0 / pl->mm.col_block + 1;
        if (x->bp_tag[tid] != tag) { /* consecutive items of a thread often share it */
            pl->kern->pack(g->k, cols, bsrc, g->row_stride[FM_MATMUL_B], g->col_stride[FM_MATMUL_B], buf, 0,
                           (cols + nr - 1) / nr);
            x->bp_tag[tid] = tag;
        }
        ka->bp = buf;
    }
}

/* One work item (arg: the gemmkernel_args): (batch, row panel, column block): alpha, beta*C,
 * bias and relu in registers; other activations (and aux outputs) as a pass over each L1 slab.
 * tid: the calling thread's index in the team (selects its B buffer). */
static void run_item(const void *arg, int64_t item, int tid)
{
    const gemmkernel_args *x = arg;
    const gemmkernel_impl *pl = x->pl;
    const fm_cpu_mm *mm = &pl->mm;
    const fm_matmul_geom *g = &mm->g;
    const int64_t per_batch = mm->n_row_panels * mm->n_col_blocks;
    const int64_t b = item / per_batch, rem = item % per_batch;
    const int64_t r0 = rem / mm->n_col_blocks * mm->panel_rows, c0 = (rem % mm->n_col_blocks) * mm->col_block;
    const int64_t rows = fm_min_i64(mm->panel_rows, g->m - r0), cols = fm_min_i64(mm->col_block, g->n - c0);
    const int64_t es = (int64_t)mm->es, ars = g->row_stride[FM_MATMUL_A];
    const char *a = x->io.a + (fm_matmul_batch_offset(g, FM_MATMUL_A, b) + r0 * ars) * es;
    const char *bias = !x->io.bias       ? NULL
                       : pl->bias_direct ? x->io.bias + (fm_matmul_batch_offset(g, FM_MATMUL_BIAS, b) + c0) * es
                                         : x->bias_p + (b * x->bias_p_len + c0) * es;
    fm_cpu_gemm_args ka = {.k = g->k, .kc = pl->kc, .alpha = mm->mp.alpha[0], .a = a, .a_rs = ars,
                           .a_cs = g->col_stride[FM_MATMUL_A], .bias = bias, .beta = mm->mp.beta[0],
                           .relu = pl->relu};
    item_b(pl, x, b, c0, cols, tid, &ka);
    const int with_c = fm_cpu_mm_has_c_term(mm, x->io.c != NULL);
    /* one call for the item, or slabs with the activation pass after each (dropout too: its
     * Philox words and select on the slab while the kernel's stores are in L1; relu stays in
     * registers then, so the pass leaves it out) */
    const unsigned epi = pl->relu ? mm->mp.epilogue & ~(unsigned)FM_EPILOGUE_RELU : mm->mp.epilogue;
    const int pass = (epi & (FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_DROPOUT)) != 0;
    int64_t slab = rows;
    if (pass) {
        slab = fm_max_i64(1, KERNEL_SLAB_BYTES / (cols * es));
        slab = (slab + pl->kern->mr - 1) / pl->kern->mr * pl->kern->mr;
    }
    for (int64_t i = 0; i < rows; i += slab) {
        const int64_t h = fm_min_i64(slab, rows - i);
        fm_cpu_panel s = fm_cpu_mm_panel(mm, &x->io, b, r0 + i, h, c0, cols);
        ka.a = a + i * ars * es;
        if (with_c)
            ka.c = s.c, ka.c_rs = s.c_rs, ka.c_cs = s.c_cs;
        pl->kern->block(&ka, h, cols, s.d, x->io.ldd);
        if (pass)
            fm_cpu_activate(g->dtype, epi, &s);
    }
}

/* ---- packed operands ---- */
/* Packing before the items: one unit per strip of a shared B, one per batch entry of a
 * bias that is not read in place. */
static int64_t strips(const gemmkernel_impl *pl) { return (pl->mm.g.n + pl->kern->nr - 1) / pl->kern->nr; }

static int packs_bias(const gemmkernel_impl *pl, const gemmkernel_args *x) { return x->io.bias && !pl->bias_direct; }

static int64_t b_units(const gemmkernel_impl *pl) { return pl->b_mode == KERNEL_B_SHARED ? strips(pl) : 0; }

static int64_t pack_units(const gemmkernel_impl *pl, const gemmkernel_args *x)
{
    return b_units(pl) + (packs_bias(pl, x) ? pl->mm.g.batch_count : 0);
}

/* The kernel's scratch into *buf: shared packed B, per-thread B buffers (+ their tags), packed
 * bias; NULL when it needs none. */
static fm_status pack_alloc(const gemmkernel_impl *pl, gemmkernel_args *x, char **buf)
{
    const fm_matmul_geom *g = &pl->mm.g;
    const size_t es = pl->mm.es;
    const int64_t nr = pl->kern->nr;
    size_t bbytes = 0, tagbytes = 0;
    if (pl->b_mode == KERNEL_B_SHARED)
        bbytes = (size_t)(strips(pl) * nr * g->k) * es;
    if (pl->b_mode == KERNEL_B_PER_ITEM) {
        x->bp_thread_bytes = ((size_t)((pl->mm.col_block + nr - 1) / nr * nr * g->k) * es + 63) / 64 * 64;
        bbytes = x->bp_thread_bytes * (size_t)pl->mm.threads;
        tagbytes = sizeof(int64_t) * (size_t)pl->mm.threads;
    }
    bbytes = (bbytes + 63) / 64 * 64;
    x->bias_p_len = strips(pl) * nr;
    const size_t biasbytes = packs_bias(pl, x) ? (size_t)(x->bias_p_len * g->batch_count) * es : 0;
    if (bbytes + tagbytes + biasbytes == 0)
        return FM_OK;
    if (!(*buf = fm_host_scratch_alloc(bbytes + biasbytes + tagbytes)))
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory for the packed b");
    x->bp = *buf;
    x->bias_p = biasbytes ? *buf + bbytes : NULL;
    if (tagbytes) {
        x->bp_tag = (int64_t *)(*buf + bbytes + biasbytes);
        memset(x->bp_tag, 0, tagbytes); /* 0: holds nothing yet */
    }
    return FM_OK;
}

/* Packing unit u of pack_units (arg: the gemmkernel_args). */
static void pack(const void *arg, int64_t u)
{
    const gemmkernel_args *x = arg;
    const gemmkernel_impl *pl = x->pl;
    const fm_matmul_geom *g = &pl->mm.g;
    const int64_t es = (int64_t)pl->mm.es, bunits = b_units(pl), b = u - bunits;
    if (u < bunits) /* a strip of the user's b, through its strides */
        pl->kern->pack(g->k, g->n, x->io.b, g->row_stride[FM_MATMUL_B], g->col_stride[FM_MATMUL_B], x->bp, u,
                       u + 1);
    else /* the bias of batch u - bunits, as a 1 x n matrix */
        pl->kern->pack(1, g->n, x->io.bias + fm_matmul_batch_offset(g, FM_MATMUL_BIAS, b) * es, 0,
                       g->col_stride[FM_MATMUL_BIAS], x->bias_p + b * x->bias_p_len * es, 0, strips(pl));
}

static fm_status gemmkernel_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const gemmkernel_impl *pl = plan->impl;
    const fm_matmul_geom *g = &pl->mm.g;
    if (g->batch_count == 0 || g->m == 0 || g->n == 0)
        return FM_OK; /* nothing to compute: it takes no bias gradient (kernel_misfit) */
    gemmkernel_args x = {.pl = pl,
                         .io = {.a = ptrs[FM_MATMUL_A], .b = ptrs[FM_MATMUL_B], .c = ptrs[FM_MATMUL_C],
                                .bias = ptrs[FM_MATMUL_BIAS], .d = ptrs[FM_MATMUL_D], .aux = ptrs[FM_MATMUL_AUX]}};
    fm_cpu_mm_io_args(&x.io, args);
    char *user_d = x.io.d;
    void *d_tmp = NULL;
    char *kernel_buf = NULL;
    fm_status st = fm_cpu_mm_open_d(&pl->mm, &x.io, &d_tmp);
    if (st == FM_OK && (st = pack_alloc(pl, &x, &kernel_buf)) == FM_OK) {
        fm_cpu_mm_run(&pl->mm, pack_units(pl, &x), pack, run_item, &x);
        fm_cpu_mm_close_d(&pl->mm, user_d, d_tmp);
    }
    fm_free_aligned(d_tmp);
    fm_host_scratch_free(kernel_buf);
    return st;
}

/* ---- planning ---- */
/* Why the kernel cannot compute this problem, or NULL when it can: real f32/f64 with
 * a forward epilogue (alpha, beta*C, bias, activation, aux). */
static const char *kernel_misfit(const fm_cpu_mm *mm, const fm_cpu_gemm_kernel *kern)
{
    if (!kern)
        return "it computes f32 and f64 only";
    if (mm->g.k == 0 || mm->mp.alpha[0] == 0.0)
        return "it needs k > 0 and alpha != 0 (cblas tiles compute those)";
    if (mm->mp.epilogue & (FM_EPILOGUE_SCALE | FM_EPILOGUE_BACKWARD_ | FM_EPILOGUE_ANY_BGRAD_))
        return "it has no scale, backward activation or bias gradient epilogue";
    return NULL;
}

/* How kernel kern gets B (KERNEL_B_*), from the problem alone. */
static int kernel_b_mode(const fm_cpu_mm *mm, const fm_cpu_gemm_kernel *kern)
{
    const fm_matmul_geom *g = &mm->g;
    if (g->n % kern->nr == 0 && g->col_stride[FM_MATMUL_B] == 1 &&
        (double)g->k * (double)g->n * (double)mm->es <= KERNEL_DIRECT_B_BYTES)
        return KERNEL_B_DIRECT;
    for (int i = 0; i < g->batch_ndim; i++)
        if (g->batch_strides[FM_MATMUL_B][i] != 0 && g->batch_shape[i] > 1)
            return KERNEL_B_PER_ITEM;
    return KERNEL_B_SHARED;
}

/* Why auto leaves p to OpenBLAS (into buf), or NULL when auto takes the kernel: up to the k its
 * variant measured at OpenBLAS's speed (auto_max_k; AVX2 384, AVX-512 f32 any, f64 1024, plain C
 * never; any k while the chosen OpenBLAS runs its generic kernels, 3x slower), and only over
 * enough rows to pay for packing B (a B per batch entry also needs a small B); the measurements
 * are in docs/design.md, CPU matmul. */
static const char *auto_declines(const gemmkernel_impl *pl, char *buf, size_t n)
{
    const fm_matmul_geom *g = &pl->mm.g;
    const double b_bytes = (double)g->k * (double)g->n * (double)pl->mm.es;
    if (pl->kern->auto_max_k == 0)
        snprintf(buf, n, "auto never picks the %s variant (slower than OpenBLAS)", pl->kern->isa);
    else if (g->k > pl->kern->auto_max_k && !fm_blas_runs_generic())
        snprintf(buf, n, "auto leaves k = %lld to cblas (the %s variant measured at OpenBLAS's speed up to k = %lld)",
                 (long long)g->k, pl->kern->isa, (long long)pl->kern->auto_max_k);
    else if (pl->b_mode == KERNEL_B_SHARED && g->m * g->batch_count < KERNEL_MIN_ROWS)
        snprintf(buf, n, "auto leaves %lld rows to cblas (packing b pays from %d rows)",
                 (long long)(g->m * g->batch_count), KERNEL_MIN_ROWS);
    else if (pl->b_mode == KERNEL_B_PER_ITEM && g->m < KERNEL_MIN_ROWS)
        snprintf(buf, n, "auto leaves %lld rows per b to cblas (packing a b per batch entry pays from %d rows)",
                 (long long)g->m, KERNEL_MIN_ROWS);
    else if (pl->b_mode == KERNEL_B_PER_ITEM && b_bytes > KERNEL_ITEM_B_BYTES)
        snprintf(buf, n, "auto leaves a b of %.0f KiB per batch entry to cblas (packed per item it pays up to %d KiB)",
                 b_bytes / 1024, KERNEL_ITEM_B_BYTES / 1024);
    else
        return NULL;
    return buf;
}

/* The kernel's cut of D: compute-bound products (k >= FM_CPU_MM_LARGE_K, no panel height asked)
 * in small tiles, the others as the cblas tiles. */
static void kernel_tiles(gemmkernel_impl *pl)
{
    fm_cpu_mm *mm = &pl->mm;
    const fm_matmul_geom *g = &mm->g;
    const int threads = fm_cpu_mm_threads(mm);
    if (mm->mp.panel_rows > 0 || g->k < FM_CPU_MM_LARGE_K) {
        fm_cpu_mm_choose_tiles(mm, threads);
        return;
    }
    /* The kernel packs B once for every tile, so small tiles repack nothing: at least four per
     * thread (up to 16 register blocks x 256 columns), handed out as threads come free, which
     * absorbs the H200 host's unequal vCPUs (cpu_matmul.c, compute_bound_tiles) */
    const int64_t m = g->m > 0 ? g->m : 1, n = g->n > 0 ? g->n : 1, batch = g->batch_count > 0 ? g->batch_count : 1;
    const int64_t mr = pl->kern->mr, ncb = (n + KERNEL_TILE_COLS - 1) / KERNEL_TILE_COLS;
    const int64_t want = (m * batch * ncb + 4 * (int64_t)threads - 1) / (4 * (int64_t)threads);
    int64_t rows = fm_min_i64(fm_max_i64((want + mr - 1) / mr * mr, mr), 16 * mr);
    rows = fm_min_i64(rows, m);
    mm->dynamic = threads > 1;
    fm_cpu_mm_set_tiles(mm, threads, rows, fm_min_i64(KERNEL_TILE_COLS, n));
}

/* The checks of both CPU backends (cpu_matmul.h), then what the kernel would do with p: the
 * variant for the context's settings, how it gets B; *misfit: why it cannot compute p, or NULL. */
static fm_status kernel_setup(const fm_context *ctx, const fm_problem *p, gemmkernel_impl *pl, const char **misfit)
{
    fm_cpu_mm_layout la, lb; /* BLAS's view: unused (the kernel reads A and packs B through their strides) */
    memset(pl, 0, sizeof *pl);
    fm_status st = fm_cpu_mm_init(p, &pl->mm, &la, &lb);
    if (st != FM_OK)
        return st;
    pl->kern = fm_cpu_gemm_kernel_for(pl->mm.g.dtype, fm_context_settings(ctx)); /* NULL: a dtype it lacks */
    *misfit = kernel_misfit(&pl->mm, pl->kern);
    pl->b_mode = pl->kern ? kernel_b_mode(&pl->mm, pl->kern) : KERNEL_B_DIRECT;
    return FM_OK;
}

static fm_status gemmkernel_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    const int strategy = p->u.matmul.cpu_strategy, forced = strategy == FM_CPU_STRATEGY_KERNEL;
    if (!forced && strategy != FM_CPU_STRATEGY_AUTO)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "cpu_strategy '%s' is cblas (the openblas backend)",
                       strategy == FM_CPU_STRATEGY_TILES ? "tiles" : "blas_threads");
    if (!forced && !fm_cpu_gemm_kernel_for(p->t[FM_MATMUL_A].dtype, NULL))
        return fm_fail(FM_ERR_NOT_APPLICABLE, "it computes f32 and f64 only"); /* openblas says the rest */
    gemmkernel_impl pl;
    const char *misfit = NULL;
    fm_status st = kernel_setup(ctx, p, &pl, &misfit);
    if (st == FM_ERR_NOT_APPLICABLE && forced) /* forced: the reason stops planning (fp8, f16, bf16) */
        return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul: gemmkernel: %s", fm_last_error());
    if (st != FM_OK)
        return st;
    if (misfit && forced)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul: gemmkernel: cpu_strategy 'kernel' (fusemath's own GEMM kernel) "
                       "cannot take this product: %s", misfit);
    if (misfit)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "%s", misfit);
    char why[192];
    const char *declined = forced ? NULL : auto_declines(&pl, why, sizeof why);
    if (declined)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "%s", declined);

    const fm_matmul_geom *g = &pl.mm.g;
    pl.relu = (pl.mm.mp.epilogue & FM_EPILOGUE_FORWARD_ACT_) == FM_EPILOGUE_RELU &&
              !(pl.mm.mp.epilogue & FM_EPILOGUE_AUX);
    pl.kc = fm_cpu_gemm_kc(g->k, fm_context_settings(ctx));
    pl.bias_direct = g->n % pl.kern->nr == 0 && g->col_stride[FM_MATMUL_BIAS] == 1;
    kernel_tiles(&pl);
    if (pl.b_mode == KERNEL_B_SHARED && pl.mm.n_col_blocks > 1 && pl.mm.col_block % pl.kern->nr)
        return fm_fail(FM_ERR_INTERNAL, "matmul: column blocks of %lld are not a multiple of the %s kernel's %d-column "
                       "strips", (long long)pl.mm.col_block, pl.kern->isa, pl.kern->nr);
    static const char *const b_modes[] = {"direct", "packed", "per_item"};
    char suffix[64];
    int w = snprintf(suffix, sizeof suffix, " kernel=%s b=%s", pl.kern->isa, b_modes[pl.b_mode]);
    if (pl.kc && w > 0 && (size_t)w < sizeof suffix)
        w += snprintf(suffix + w, sizeof suffix - (size_t)w, " kc=%lld", (long long)pl.kc);
    if (!pl.mm.d_direct && w > 0 && (size_t)w < sizeof suffix)
        snprintf(suffix + w, sizeof suffix - (size_t)w, " copies=d");
    return fm_cpu_mm_install(&pl.mm, &pl, sizeof pl, gemmkernel_execute, "gemmkernel", 1, "panel", suffix,
                             out);
}

/* Wisdom salt: a tuned panel height depends on the variant the settings and the CPU give and on
 * its k block (the thread count is part of the problem already). */
static void gemmkernel_wisdom_salt(const fm_context *ctx, void *state, const fm_problem *p, char *buf, size_t n)
{
    const fm_settings *settings = fm_context_settings(ctx);
    const fm_tensor *a = &p->t[FM_MATMUL_A]; /* k: its last extent */
    snprintf(buf, n, "kernel=%s kc=%lld", fm_cpu_gemm_kernel_for(FM_F32, settings)->isa,
             (long long)fm_cpu_gemm_kc(a->shape[a->ndim - 1], settings));
}

/* Autotune's candidates: each panel height up to M (0: the heuristic's) through the kernel
 * (cpu_strategy 'kernel'), where the kernel computes p at all; openblas offers the cblas tiles. */
static int gemmkernel_tune_candidates(const fm_context *ctx, void *state, const fm_problem *p, fm_problem *cand,
                                      int *group, int max)
{
    gemmkernel_impl pl;
    const char *misfit = NULL;
    if (kernel_setup(ctx, p, &pl, &misfit) != FM_OK || misfit) {
        fm_clear_error();
        return 0;
    }
    return fm_cpu_mm_tune_heights(p, FM_CPU_STRATEGY_KERNEL, cand, group, max);
}

const fm_backend fm_backend_gemmkernel_matmul = {
    .name = "gemmkernel",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_MATMUL,
    .priority = 1, /* before openblas: it declines what auto leaves to cblas */
    /* no probe: plain C runs anywhere; the variant is picked per plan */
    .plan = gemmkernel_plan,
    .wisdom_salt = gemmkernel_wisdom_salt,
    .tune_candidates = gemmkernel_tune_candidates,
};
