/*
 * fusemath_mpi.h : the distributed layer, libfusemath_mpi (link -lfusemath_mpi -lfusemath and
 * your MPI). libfusemath itself keeps no MPI dependency: this header and its library are built
 * only where MPI is found (docs/design.md, Distributed); CPU ranks' FFTs need FFTW-MPI, GPU ranks'
 * the CUDA toolkit at build time (FM_ERR_UNAVAILABLE where the build lacked one).
 *
 * Conventions, beyond fusemath.h's:
 *  - The caller owns MPI: it calls MPI_Init before and MPI_Finalize after; the library never does.
 *  - Every fm_dist_* function taking an MPI_Comm or a plan is collective unless it says it is local:
 *    call it on every rank of the communicator, in the same order. A bad argument on any rank makes
 *    the call fail on every rank with the same status and message (fm_last_error(), naming the
 *    rank), so no rank is left waiting in a collective.
 *  - Slab decomposition: the global array is split along axis 0 in FFTW-MPI's blocks (ceil(n0 /
 *    size) rows per rank, the last ranks may hold fewer or none); each rank holds its block as a
 *    C-contiguous array. CPU ranks (host data) and GPU ranks (opts->device_type FM_DEVICE_CUDA)
 *    split alike: the same local shapes for the same global shape and communicator. fm_dist_local_shape() tells the block of a rank, as FFTW's
 *    fftw_mpi_local_size_many_transposed does.
 *  - FM_DIST_TRANSPOSED (FFTW_MPI_TRANSPOSED_OUT / _IN): the array of that side with axes 0 and 1
 *    swapped (n1 x n0 [x n2]), split along its axis 0 (i.e. the global axis 1) the same way. A
 *    forward transform to transposed output saves FFTW's last all-to-all; the inverse from it
 *    (in_layout transposed) restores the slab layout.
 *  - Pencil decomposition (opts->decomposition FM_DIST_DECOMP_PENCIL; 3-D, CPU and GPU ranks): the ranks form a
 *    P1 x P2 grid (opts->grid_rows = P1; rank r is (r / P2, r % P2) = (r1, r2)), each axis split in
 *    the same ceil(n / P) blocks. FM_DIST_SLAB side ("z-pencil"): axis 0 block r1 of P1, axis 1 block
 *    r2 of P2, axis 2 whole. FM_DIST_TRANSPOSED side ("x-pencil"): axis 0 whole, axis 1 block r1 of
 *    P1, axis 2 block r2 of P2 (n2 / 2 + 1 for the complex side of r2c / c2r). Both are stored
 *    C-contiguous in the logical axis order (no axes swapped) and their offsets have two non-zero
 *    entries. Slab -> transposed (or back) costs 2 all-to-alls over the grid's rows / columns, slab ->
 *    slab 4; the local FFTs are the core's (FFTW on CPU ranks, cuFFT on GPU ranks, whose exchanges are
 *    the slab GPU ranks' per row / column). A grid of size x 1 has the slab's input blocks.
 */
#ifndef FUSEMATH_MPI_H
#define FUSEMATH_MPI_H

#include <mpi.h>

#include "fusemath.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fm_dist_layout {
    FM_DIST_SLAB = 0,      /* split along axis 0, axes in their global order */
    FM_DIST_TRANSPOSED = 1 /* slabs: axes 0 and 1 swapped, split along the swapped array's axis 0; pencils: the
                              x-pencil (axis 0 whole, axes in their global order) */
} fm_dist_layout;

/* How the global array is split over the ranks. */
typedef enum fm_dist_decomposition {
    FM_DIST_DECOMP_SLAB = 0,  /* axis 0 over all ranks (FFTW-MPI on CPU ranks; GPU ranks) */
    FM_DIST_DECOMP_PENCIL = 1 /* 3-D: two axes over a P1 x P2 grid (CPU and GPU ranks; the top of this file) */
} fm_dist_decomposition;

/* Which side of a transform fm_dist_local_shape / fm_dist_fft_local describe. */
enum { FM_DIST_IN = 0, FM_DIST_OUT = 1 };

typedef struct fm_dist_fft_options {
    int32_t kind;        /* fm_fft_kind: c2c, r2c (forward only), c2r (inverse only) */
    int32_t inverse;     /* 0: forward (exp(-i...)), 1: inverse (exp(+i...)) */
    int32_t in_layout;   /* fm_dist_layout of the input; the real side of r2c / c2r is always a slab */
    int32_t out_layout;  /* fm_dist_layout of the output */
    int32_t norm;        /* fm_fft_norm, over the whole global transform */
    int32_t effort;      /* fm_fft_effort: FFTW_ESTIMATE / MEASURE / PATIENT, measured collectively */
    int32_t num_threads; /* FFTW threads per rank; 0 = 1 (one rank per core is the usual layout) */
    int32_t overwrite_input; /* 1: execute may overwrite `in` (its values are then undefined), which lets
                                FFTW-MPI run on the caller's complex input block itself where there is no
                                prolog (fm_dist_fft_execute says when); 0: `in` is never changed */
    int32_t device_type; /* where the ranks' data lives: FM_DEVICE_AUTO (0) or FM_DEVICE_CPU: host memory, CPU ranks
                            (FFTW-MPI); FM_DEVICE_CUDA: device memory on cuda:device_id, GPU ranks (local cuFFT
                            through the core's planner + the exchange; docs/design.md, Distributed, GPU ranks).
                            Every rank must say the same (checked at planning) */
    int32_t device_id;   /* FM_DEVICE_CUDA: this rank's GPU (ranks may name different GPUs, or share one) */
    int32_t decomposition; /* fm_dist_decomposition: FM_DIST_DECOMP_SLAB (0) or FM_DIST_DECOMP_PENCIL (3-D, CPU
                              ranks; overwrite_input is ignored there: the input is never changed) */
    int32_t grid_rows;   /* pencils: P1 of the P1 x P2 process grid (a divisor of the size); 0 = MPI_Dims_create's
                            choice (P1 >= P2). Slabs: 0 */
    /* Fused chains, x -> conj?(x * scale * array) as fusemath.h's, applied as the data is copied
     * into (prolog) and out of (epilog) FFTW's buffers: FM_FFT_OP_SCALE, FM_FFT_OP_CONJ and
     * FM_FFT_OP_MULTIPLY (its array is each rank's block: fm_dist_fft_plan_chains);
     * FM_FFT_OP_CALLBACK: FM_ERR_NOT_SUPPORTED. GPU ranks apply a chain in the core's local cuFFT plan
     * where that plan reads the input (prolog) or writes the output (epilog), else in the move kernel
     * that packs the input or unpacks / transposes the output. */
    fm_fft_chain prolog, epilog;
} fm_dist_fft_options;

/*! fm_dist_fft_options_init() : forward c2c, slab in and out, backward norm, estimate, 1 thread. */
FM_API void fm_dist_fft_options_init(fm_dist_fft_options *o);

/*! fm_dist_local_shape() : local (no communication). The part of side `which` (FM_DIST_IN /
 *  FM_DIST_OUT) of the transform of logical global shape n[ndim] (ndim 2 or 3; for r2c / c2r the
 *  real shape: the complex side has n[ndim-1] / 2 + 1 there) that this rank of comm holds, in the
 *  order it is stored: local_shape[ndim] (for a transposed slab side, axes 0 and 1 swapped) and
 *  offset[ndim], the index of its first element in that (swapped) global array (slabs: zero but on
 *  axis 0; pencils: non-zero on the two split axes, the array never swapped). Uses opts' kind,
 *  layouts, decomposition and grid_rows (NULL: the defaults). */
FM_API fm_status fm_dist_local_shape(MPI_Comm comm, int ndim, const int64_t *n, const fm_dist_fft_options *opts,
                                     int which, int64_t *local_shape, int64_t *offset);

typedef struct fm_dist_plan fm_dist_plan;

/*! fm_dist_fft_plan() : collective. Plan the distributed transform of logical global shape
 *  n[ndim] (as in fm_dist_local_shape) whose input on this rank has dtype `dtype` (c2c: c64 / c128;
 *  r2c: f32 / f64; c2r: c64 / c128) and local shape in_local_shape[ndim], which must be this
 *  rank's block (fm_dist_local_shape(FM_DIST_IN)). The ranks must agree on ndim, n, dtype and the
 *  options (checked here by a collective): FM_ERR_INVALID_ARGUMENT on every rank otherwise. An
 *  inter-communicator is refused (FM_ERR_INVALID_ARGUMENT); a communicator of size 1 works. */
FM_API fm_status fm_dist_fft_plan(MPI_Comm comm, int ndim, const int64_t *n, fm_dtype dtype,
                                  const int64_t *in_local_shape, const fm_dist_fft_options *opts,
                                  fm_dist_plan **plan);

/*! fm_dist_fft_plan_chains() : collective. fm_dist_fft_plan (which is this with both arrays NULL)
 *  with the chains' multiply arrays. prolog_array / epilog_array: NULL unless opts' prolog /
 *  epilog has FM_FFT_OP_MULTIPLY; else this rank's block of the array multiplied into the input as
 *  it is copied into FFTW's buffer (prolog: the input block, fm_dist_local_shape(FM_DIST_IN)) or
 *  into the output as it is copied out (epilog: the output block in the output's layout, axes 0
 *  and 1 swapped where it is transposed: fm_dist_local_shape(FM_DIST_OUT)): no broadcasting,
 *  ndim entries, C-contiguous host memory (device cpu or auto), dtype real or complex of the
 *  data's precision (real only on the real side of r2c / c2r); data may be NULL where the block is
 *  empty. The data pointers are kept and read at every execute (their contents may change between
 *  executes). A wrong shape, dtype or layout on any rank is an error on every rank. */
FM_API fm_status fm_dist_fft_plan_chains(MPI_Comm comm, int ndim, const int64_t *n, fm_dtype dtype,
                                         const int64_t *in_local_shape, const fm_tensor *prolog_array,
                                         const fm_tensor *epilog_array, const fm_dist_fft_options *opts,
                                         fm_dist_plan **plan);

/*! fm_dist_fft_execute() : collective. out = epilog(norm * FFT(prolog(in))) over the global array;
 *  in and out are this rank's C-contiguous blocks (fm_dist_fft_local), may be NULL where the block
 *  is empty, and are fully written (out) / not changed (in, unless opts->overwrite_input). One plan
 *  runs one execute at a time (it owns FFTW's buffers). The data is copied into and out of FFTW's
 *  buffers (the chains and the norm applied in those copies) except where FFTW-MPI can run on the
 *  caller's block itself: the output when it is complex, there is no epilog and no norm scaling,
 *  out != in, out is aligned as fftw_malloc'd memory (fftw_alignment_of) and holds at least FFTW's
 *  local buffer size (true of even splits: n0 and n1 multiples of the ranks); the input likewise
 *  when it is complex, there is no prolog and opts->overwrite_input is set. Each rank chooses the
 *  path for its own blocks (FFTW-MPI's arrays are local, so ranks may differ). */
FM_API fm_status fm_dist_fft_execute(const fm_dist_plan *plan, const void *in, void *out);

/*! fm_dist_fft_execute_stream() : collective. fm_dist_fft_execute on a stream: a GPU-rank plan
 *  (opts->device_type FM_DEVICE_CUDA) queues its local transforms, kernels and copies on `stream`
 *  (a cudaStream_t of the plan's device; NULL: the legacy default stream) and returns when they are
 *  queued, except that the MPI exchanges (staged and CUDA-aware) synchronize the stream before each
 *  all-to-all; with the NCCL exchange nothing waits. An execute on another stream than the plan's previous
 *  one waits (on the device, an event) for that one's work, since both use the plan's buffers. in and out
 *  are device memory of cuda:device_id.
 *  CPU-rank plans ignore the stream (fm_dist_fft_execute is this with NULL). */
FM_API fm_status fm_dist_fft_execute_stream(const fm_dist_plan *plan, const void *in, void *out, void *stream);

/*! fm_dist_fft_local() : local. The block of side `which` this rank holds (fm_dist_local_shape's
 *  answer for the plan), with ndim entries each; either may be NULL. */
FM_API fm_status fm_dist_fft_local(const fm_dist_plan *plan, int which, int64_t *local_shape, int64_t *offset);

/*! fm_dist_fft_ndim() / fm_dist_fft_out_dtype() : local. */
FM_API int fm_dist_fft_ndim(const fm_dist_plan *plan);
FM_API fm_dtype fm_dist_fft_out_dtype(const fm_dist_plan *plan);

/*! fm_dist_fft_describe() : local. "dist_fft cpu/fftw-mpi c2c c128 forward 64x64x32 ranks=4 ..."; GPU ranks:
 *  "dist_fft cuda:0/cufft ... exchange=staged (auto: ranks share a GPU) order=local-first". */
FM_API const char *fm_dist_fft_describe(const fm_dist_plan *plan);

/*! fm_dist_fft_destroy() : collective (FFTW-MPI plans hold a duplicate of the communicator);
 *  NULL is fine. Before MPI_Finalize. */
FM_API void fm_dist_fft_destroy(fm_dist_plan *plan);

/* ---- Dense linear algebra on block-cyclic matrices through ScaLAPACK (CPU ranks) ----
 *  - A process grid (fm_dist_grid) is nprow x npcol ranks of the caller's communicator, in row-major
 *    order (rank r of comm is grid process (r / npcol, r % npcol)); every rank of comm is in it.
 *  - A matrix on it (fm_dist_matrix) is m x n, cut into mb x nb blocks dealt round the grid: global
 *    entry (i, j) is on grid process ((i / mb) % nprow, (j / nb) % npcol), at local entry
 *    ((i / (mb nprow)) mb + i % mb, (j / (nb npcol)) nb + j % nb) (ScaLAPACK's 2-D block-cyclic
 *    layout, first block on process (0, 0)). Each rank's local block is column-major (Fortran
 *    order), local_rows x local_cols (numroc's counts) with leading dimension ld.
 *  - Built where ScaLAPACK is found (CMake: FUSEMATH_WITH_SCALAPACK=AUTO|ON|OFF); otherwise these
 *    functions exist and return FM_ERR_UNAVAILABLE saying so.
 *  - Calls on one grid are collective over its communicator and serialized by the caller (BLACS is
 *    not thread-safe); the grid must be destroyed before MPI_Finalize. */
#define FM_DIST_DEFAULT_BLOCK 64

typedef struct fm_dist_grid fm_dist_grid;

/*! fm_dist_grid_create() : collective. The BLACS grid of nprow x npcol ranks of comm (both 0: the
 *  near-square factorization of comm's size, nprow <= npcol; else nprow * npcol must be the size).
 *  comm is duplicated (the caller may free its own). An inter-communicator is refused. */
FM_API fm_status fm_dist_grid_create(MPI_Comm comm, int nprow, int npcol, fm_dist_grid **grid);

/*! fm_dist_grid_destroy() : collective (Cblacs_gridexit frees communicators); NULL is fine. */
FM_API void fm_dist_grid_destroy(fm_dist_grid *grid);

/*! fm_dist_grid_shape() : local. The grid's shape and this rank's place in it; any may be NULL. */
FM_API fm_status fm_dist_grid_shape(const fm_dist_grid *grid, int *nprow, int *npcol, int *myrow, int *mycol);

/* One block-cyclic matrix as this rank sees it (fm_dist_matrix_init fills all but data). */
typedef struct fm_dist_matrix {
    int64_t m, n;                   /* global shape, >= 1 */
    int64_t mb, nb;                 /* block sizes, >= 1 */
    int64_t local_rows, local_cols; /* this rank's block: must be the layout's (numroc) */
    int64_t ld;                     /* leading dimension of data, >= max(1, local_rows) */
    void *data;                     /* column-major local block; may be NULL where it is empty */
} fm_dist_matrix;

/*! fm_dist_matrix_init() : local. *mat for an m x n matrix in mb x nb blocks (0: FM_DIST_DEFAULT_BLOCK)
 *  on grid: this rank's local shape, ld = max(1, local_rows), data NULL. */
FM_API fm_status fm_dist_matrix_init(const fm_dist_grid *grid, int64_t m, int64_t n, int64_t mb, int64_t nb,
                                     fm_dist_matrix *mat);

/*! fm_dist_matrix_global_index() : local. The global row (axis 0) or column (axis 1) of this rank's
 *  local row / column `local` (ScaLAPACK's indxl2g, from 0). */
FM_API fm_status fm_dist_matrix_global_index(const fm_dist_grid *grid, const fm_dist_matrix *mat, int axis,
                                             int64_t local, int64_t *global);

typedef struct fm_dist_matmul_options {
    double alpha, beta;  /* D = act(alpha A @ B + beta C + bias) */
    unsigned epilogue;   /* fm_epilogue bits: FM_EPILOGUE_BIAS and / or one of relu, gelu, sigmoid, tanh,
                            silu, clamp (aux, scale, dropout and the backward kinds: FM_ERR_NOT_SUPPORTED) */
    double clamp[2];     /* lo, hi of FM_EPILOGUE_CLAMP */
    int32_t reserved[4]; /* zero */
} fm_dist_matmul_options;

/*! fm_dist_matmul_options_init() : alpha = 1, beta = 0, no epilogue. */
FM_API void fm_dist_matmul_options_init(fm_dist_matmul_options *o);

/*! fm_dist_matmul() : collective. D = act(alpha A @ B + beta C + bias) through pdgemm / psgemm
 *  (dtype FM_F64 / FM_F32), A m x k, B k x n, C (NULL unless beta != 0; may be D itself) and D m x n;
 *  bias (NULL unless the epilogue has FM_EPILOGUE_BIAS) is the whole length-n row vector on every
 *  rank. The bias and the activation are applied to each rank's local block of D, by the core's
 *  CPU epilogue passes. Layouts: A's mb and B's nb are D's, A's nb is B's mb, C's is D's; D must
 *  not overlap A or B (FM_ERR_ALIAS). */
FM_API fm_status fm_dist_matmul(const fm_dist_grid *grid, fm_dtype dtype, const fm_dist_matrix *a,
                                const fm_dist_matrix *b, const fm_dist_matrix *c, const void *bias,
                                const fm_dist_matmul_options *opts, fm_dist_matrix *d);

/*! fm_dist_solve() : collective. X with A X = B through pdgesv / psgesv: A (n x n, square blocks)
 *  is overwritten by its LU factors, B (n x nrhs, B's mb = A's) by X. A singular A is FM_ERR_LINALG
 *  on every rank, naming the zero pivot (B is then not a solution). */
FM_API fm_status fm_dist_solve(const fm_dist_grid *grid, fm_dtype dtype, fm_dist_matrix *a, fm_dist_matrix *b);

/*! fm_dist_cholesky() : collective. A = L L^T (upper = 0) or U^T U (upper = 1) through pdpotrf /
 *  pspotrf: the triangle named is read and overwritten by the factor, the other is left as it was.
 *  A not positive definite is FM_ERR_LINALG on every rank, naming the leading minor. */
FM_API fm_status fm_dist_cholesky(const fm_dist_grid *grid, fm_dtype dtype, int upper, fm_dist_matrix *a);

/*! fm_dist_cho_solve() : collective. X with A X = B from fm_dist_cholesky's factor (the same upper)
 *  through pdpotrs / pspotrs; B (B's mb = the factor's) is overwritten by X. */
FM_API fm_status fm_dist_cho_solve(const fm_dist_grid *grid, fm_dtype dtype, int upper, const fm_dist_matrix *factor,
                                   fm_dist_matrix *b);

/*! fm_dist_mpi_library() : local. MPI_Get_library_version() of the MPI this library was linked
 *  with (front ends check that theirs is the same one). */
FM_API const char *fm_dist_mpi_library(void);

#ifdef __cplusplus
}
#endif

#endif /* FUSEMATH_MPI_H */
