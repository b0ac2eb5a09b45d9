/*
 * fusemath_mpi.h : the distributed layer, libfusemath_mpi (link -lfusemath_mpi -lfusemath and
 * your MPI). libfusemath itself keeps no MPI dependency: this header and its library are built
 * only where MPI and FFTW-MPI are found (docs/design.md, Distributed).
 *
 * Conventions, beyond fusemath.h's:
 *  - The caller owns MPI: it calls MPI_Init before and MPI_Finalize after; the library never does.
 *  - Every fm_dist_* function taking an MPI_Comm or a plan is collective unless it says it is local:
 *    call it on every rank of the communicator, in the same order. A bad argument on any rank makes
 *    the call fail on every rank with the same status and message (fm_last_error(), naming the
 *    rank), so no rank is left waiting in a collective.
 *  - Slab decomposition: the global array is split along axis 0 in FFTW-MPI's blocks (ceil(n0 /
 *    size) rows per rank, the last ranks may hold fewer or none); each rank holds its block as a
 *    C-contiguous array. fm_dist_local_shape() tells the block of a rank, as FFTW's
 *    fftw_mpi_local_size_many_transposed does.
 *  - FM_DIST_TRANSPOSED (FFTW_MPI_TRANSPOSED_OUT / _IN): the array of that side with axes 0 and 1
 *    swapped (n1 x n0 [x n2]), split along its axis 0 (i.e. the global axis 1) the same way. A
 *    forward transform to transposed output saves FFTW's last all-to-all; the inverse from it
 *    (in_layout transposed) restores the slab layout.
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
    FM_DIST_TRANSPOSED = 1 /* axes 0 and 1 swapped, split along the swapped array's axis 0 */
} fm_dist_layout;

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
    int32_t reserved[5]; /* zero */
    /* Fused chains: FM_FFT_OP_SCALE and FM_FFT_OP_CONJ only (applied as the data is copied into
     * and out of FFTW's buffers); FM_FFT_OP_MULTIPLY / CALLBACK: FM_ERR_NOT_SUPPORTED for now. */
    fm_fft_chain prolog, epilog;
} fm_dist_fft_options;

/*! fm_dist_fft_options_init() : forward c2c, slab in and out, backward norm, estimate, 1 thread. */
FM_API void fm_dist_fft_options_init(fm_dist_fft_options *o);

/*! fm_dist_local_shape() : local (no communication). The part of side `which` (FM_DIST_IN /
 *  FM_DIST_OUT) of the transform of logical global shape n[ndim] (ndim 2 or 3; for r2c / c2r the
 *  real shape: the complex side has n[ndim-1] / 2 + 1 there) that this rank of comm holds, in the
 *  order it is stored: local_shape[ndim] (for a transposed side, axes 0 and 1 swapped) and
 *  offset[ndim], the index of its first element in that (swapped) global array (zero but on
 *  axis 0). Uses opts' kind and layouts (NULL: the defaults). */
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

/*! fm_dist_fft_execute() : collective. out = epilog(norm * FFT(prolog(in))) over the global array;
 *  in and out are this rank's C-contiguous blocks (fm_dist_fft_local), may be NULL where the block
 *  is empty, and are not changed / fully written (in is never overwritten, c2r included). One
 *  plan runs one execute at a time (it owns FFTW's buffers). */
FM_API fm_status fm_dist_fft_execute(const fm_dist_plan *plan, const void *in, void *out);

/*! fm_dist_fft_local() : local. The block of side `which` this rank holds (fm_dist_local_shape's
 *  answer for the plan), with ndim entries each; either may be NULL. */
FM_API fm_status fm_dist_fft_local(const fm_dist_plan *plan, int which, int64_t *local_shape, int64_t *offset);

/*! fm_dist_fft_ndim() / fm_dist_fft_out_dtype() : local. */
FM_API int fm_dist_fft_ndim(const fm_dist_plan *plan);
FM_API fm_dtype fm_dist_fft_out_dtype(const fm_dist_plan *plan);

/*! fm_dist_fft_describe() : local. "dist_fft cpu/fftw-mpi c2c c128 forward 64x64x32 ranks=4 ...". */
FM_API const char *fm_dist_fft_describe(const fm_dist_plan *plan);

/*! fm_dist_fft_destroy() : collective (FFTW-MPI plans hold a duplicate of the communicator);
 *  NULL is fine. Before MPI_Finalize. */
FM_API void fm_dist_fft_destroy(fm_dist_plan *plan);

/*! fm_dist_mpi_library() : local. MPI_Get_library_version() of the MPI this library was linked
 *  with (front ends check that theirs is the same one). */
FM_API const char *fm_dist_mpi_library(void);

#ifdef __cplusplus
}
#endif

#endif /* FUSEMATH_MPI_H */
