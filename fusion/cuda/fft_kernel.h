/* fft_kernel.h : a whole batched 1-D c2c FFT, prolog and epilog included, as one generated kernel.
 *
 * cuFFT runs any load callback 2-3x slower than its plain transform on the H200 (see
 * docs/performance.md), and a separate prolog pass is one more read and write of the data. For
 * the transforms that fit in one thread block's shared memory (power-of-two lengths up to 4096
 * complex64 / 2048 complex128) this file writes the transform itself: a self-sorting Stockham
 * FFT in radix 8 (one radix-2 or radix-4 stage first where log2(n) is not a multiple of 3),
 * each row read once from global memory through the prolog chain and written once through the
 * epilog chain. The chains are the same code the cuFFT callbacks use (fm_cufft_cb_source),
 * compiled into the kernel, so their semantics (offsets, broadcast arrays, the user's function)
 * are identical. Twiddles are tables (one per stage, laid out for coalesced loads) computed in
 * double on the host and compiled into the module as constants.
 *
 * A transform along a strided axis whose rows are neighbours in memory (the innermost batch axis
 * contiguous: a transform along axis 0 of a C-ordered array) runs in "lanes" mode: the rows are
 * the block's fast thread index, so a warp reads whole 32-byte sectors of several rows.
 *
 * Execute-time pointers are kernel arguments: the plan holds no mutable state, so one plan
 * runs on several streams and threads at once. */
#ifndef FM_FFT_KERNEL_H
#define FM_FFT_KERNEL_H

#include "cufft_callback.h"

typedef struct fm_fft_kernel_spec {
    fm_dtype dtype;   /* FM_C64 or FM_C128, input and output */
    int64_t n;        /* transform length: a power of two, 2 .. fm_fft_kernel_max_n(dtype) */
    int inverse;      /* exp(+2 pi i ...) instead of exp(-2 pi i ...); unnormalized either way */
    int64_t in_stride, out_stride; /* along the transformed axis, elements, > 0 */
    /* batch axes, outermost first (the row index is their C-order multi-index) */
    int nbatch;
    int64_t batch_ext[FM_MAX_NDIM], batch_in[FM_MAX_NDIM], batch_out[FM_MAX_NDIM];
    /* the chains (need_base 0), or NULL: at most one of them may hold a user function */
    const fm_cufft_cb_spec *prolog, *epilog;
    /* The four-step's inner twiddle (0: none): output element k of row `row` is multiplied by
     * exp(-+2 pi i ((row mod tw_rows) k mod tw_n) / tw_n) before the epilog and the store. */
    int64_t tw_n, tw_rows;
} fm_fft_kernel_spec;

typedef struct fm_fft_kernel fm_fft_kernel;

/* The longest transform one block holds (shared memory of at most ~34 KB per block). */
int64_t fm_fft_kernel_max_n(fm_dtype t);

/* Whether the spec can be a kernel; FM_ERR_NOT_APPLICABLE with the reason otherwise. */
fm_status fm_fft_kernel_check(const fm_fft_kernel_spec *s);

/* Whether the kernel reads and writes whole 32-byte sectors: rows contiguous, or lanes mode
 * (strided transform axis, neighbouring rows neighbours in memory), or a transposed store. */
int fm_fft_kernel_coalesced(const fm_fft_kernel_spec *s);

/* The CUDA C++ source (malloc'ed, caller frees) - also for tests. settings: the context's
 * (fft_kernel_regcap: 0 leaves the registers to ptxas) or NULL for the defaults. */
fm_status fm_fft_kernel_source(const fm_settings *settings, const fm_fft_kernel_spec *s, char **source);

/* Compile (NVRTC, cached on disk under the settings' cache_dir) and load for device_id. A user function that does not
 * compile: FM_ERR_INVALID_ARGUMENT with NVRTC's log. */
fm_status fm_fft_kernel_create(const fm_settings *settings, const fm_fft_kernel_spec *s, int device_id,
                               fm_fft_kernel **out);
void fm_fft_kernel_destroy(fm_fft_kernel *k); /* accepts NULL */

/* Enqueue on stream (cudaStream_t); the arrays are the chains' multiply operands or NULL. */
fm_status fm_fft_kernel_launch(const fm_fft_kernel *k, const void *in, void *out, const void *prolog_array,
                               const void *epilog_array, void *stream);

/* The launch shape the spec gets: grid blocks of block_x (threads per row) x block_y (rows) - tests */
void fm_fft_kernel_launch_shape(const fm_fft_kernel_spec *s, unsigned *grid, unsigned *block_x, unsigned *block_y);

/* ---- a problem's kernels (fft_kernel_plan.c): FM_ERR_NOT_APPLICABLE with the reason where they
 * do not apply. chain: storage for the chain specs the kernel specs point to. ---- */
/* A 1-D c2c transform with a chain as one kernel. */
fm_status fm_fft_kernel_one(const fm_problem *p, const fm_attachments *att, fm_cufft_cb_spec chain[2], fm_fft_kernel_spec *k);
/* A 1-D c2c length beyond one block on contiguous rows: the multi-step (Cooley-Tukey over n =
 * n1 n2 [n3], each factor at most FM_FFT_KERNEL_STEP_MAX). Step 0 (in -> a scratch of
 * *scratch_elems elements, same layout as in): length n1 down the columns of x as n1 x n/n1
 * (lanes mode), prolog on load, twiddle on store; with three factors step 1 (in place on the
 * scratch): length n2 down the columns of each n2 x n3 block, twiddle on store; the last step
 * (scratch -> out): along the rows, stored transposed (transposed-store mode) through the
 * epilog. Each step reads and writes whole 32-byte sectors. */
#define FM_FFT_KERNEL_STEP_MAX 1024 /* the longest factor with >= 32 bytes of lanes in 36 KB */
fm_status fm_fft_kernel_steps(const fm_problem *p, const fm_attachments *att, fm_cufft_cb_spec chain[2], fm_fft_kernel_spec spec[3], int *nsteps,
                              int64_t *scratch_elems);
/* The same with another factor limit (tests: three steps at small n). */
fm_status fm_fft_kernel_steps_capped(const fm_problem *p, const fm_attachments *att, fm_cufft_cb_spec chain[2], int64_t cap,
                                     fm_fft_kernel_spec spec[3], int *nsteps, int64_t *scratch_elems);
/* Several axes: *npasses kernels, spec[i] is pass i (p's axis order[i]; axes of length 1 get
 * none); pass 0 reads in and writes out with the prolog, the others run in place on out, the
 * last with the epilog. */
fm_status fm_fft_kernel_axis_passes(const fm_problem *p, const fm_attachments *att, fm_cufft_cb_spec chain[2], fm_fft_kernel_spec spec[3],
                                    int order[3], int *npasses);

/* "8x8x8x8": the radices, for describe() */
const char *fm_fft_kernel_radices(const fm_fft_kernel *k);

#endif
