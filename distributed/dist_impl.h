/* dist_impl.h : what the distributed/ sources share inside libfusemath_mpi (not installed). */
#ifndef FM_DIST_IMPL_H
#define FM_DIST_IMPL_H

#include <fusemath/fusemath_mpi.h>

#include "internal.h" /* fm_fail, the FFTW planner lock (FM_MPI_MODULE_BUILD: imported from libfusemath) */

#define FM_DIST_MAX_NDIM 3

/* One side of a transform: its global shape (in storage order: a transposed side has axes 0 and 1
 * swapped) and this rank's block of it. */
typedef struct fm_dist_side {
    int64_t global[FM_DIST_MAX_NDIM];
    int64_t local[FM_DIST_MAX_NDIM];
    int64_t offset[FM_DIST_MAX_NDIM];
    int real;         /* the real side of r2c / c2r */
    int64_t buf_row;  /* FFTW buffer's row length in scalars (real side: 2 (n/2 + 1), padded) */
} fm_dist_side;

/* The decomposition of a transform on one rank: what fm_dist_local_shape and the plan share. */
typedef struct fm_dist_geom {
    int ndim;
    int64_t n[FM_DIST_MAX_NDIM]; /* the logical (real for r2c / c2r) shape */
    fm_dist_side side[2];        /* FM_DIST_IN, FM_DIST_OUT */
    int64_t alloc;               /* complex elements FFTW asks each buffer to hold */
} fm_dist_geom;

/* Checks (dist_check.c). Each returns FM_OK or fm_fail's status with a message naming the
 * argument; none communicates unless it says so. */
fm_status fm_dist_check_comm(const char *where, MPI_Comm comm, int *rank, int *size);
fm_status fm_dist_check_options(const char *where, const fm_dist_fft_options *o);
/* pencil: FFTW-MPI's slab limits (a length-1 axis 1) do not apply */
fm_status fm_dist_check_shape(const char *where, int ndim, const int64_t *n, int pencil);
/* geometry of (ndim, n, opts) on this rank of comm (calls fftw_mpi_local_size_many_transposed) */
fm_status fm_dist_geometry(const char *where, MPI_Comm comm, int ndim, const int64_t *n,
                           const fm_dist_fft_options *o, fm_dist_geom *g);
/* Collective: every rank returns FM_OK when every rank's st is FM_OK, else the status and message
 * of the lowest failing rank (its number added). */
fm_status fm_dist_agree(MPI_Comm comm, fm_status st);
/* Collective: MPI_Alltoallv with int64 counts and displacements (elements of t, esize bytes each;
 * dist_alltoallv.c): one MPI_Alltoallv where every rank's counts are at most message_max (INT_MAX when
 * out of 1..INT_MAX) and its displacements fit an int, else each peer's block as messages of at most
 * message_max elements. path: 1 every rank's counts fit (agreed at planning: MPI_ERR_COUNT where this
 * rank's do not, never a truncation), 0 messages, -1 agree here (an allreduce). scratch: 4 x size ints.
 * skip_self: this rank's own block is left to the caller. Returns an MPI error code. */
int fm_dist_alltoallv(const void *send, const int64_t *sc, const int64_t *so, void *recv, const int64_t *rc,
                      const int64_t *ro, MPI_Datatype t, size_t esize, MPI_Comm comm, int *scratch,
                      int64_t message_max, int skip_self, int path);
/* whether this rank's counts and displacements suit fm_dist_alltoallv's one MPI_Alltoallv (local) */
int fm_dist_alltoallv_fits(const int64_t *sc, const int64_t *so, const int64_t *rc, const int64_t *ro, int peers,
                           int64_t message_max);
/* Collective: FM_ERR_INVALID_ARGUMENT on every rank when the ranks' vals[count] differ, naming
 * names[i] of the first that does. */
fm_status fm_dist_check_same(const char *where, MPI_Comm comm, const int64_t *vals, const char *const *names,
                             int count);
/* One side's fused chain as the copy applies it (dist_chain.c): x -> conj?(x * scale * arr). */
typedef struct fm_dist_chain_run {
    int scaled;       /* scale != 1 */
    double scale[2];  /* re, im (the epilog's: the norm included) */
    int conj;
    const void *arr;  /* the multiply array (C-contiguous, the caller's block layout) or NULL */
    int arr_cplx;     /* arr is complex */
} fm_dist_chain_run;
/* rows x len scalars, src (row stride srow) -> dst (row stride drow), through c; cplx: complex data.
 * dbl: double, else float. */
void fm_dist_copy(int dbl, void *dst, int64_t drow, const void *src, int64_t srow, int64_t rows, int64_t len,
                  int cplx, const fm_dist_chain_run *c);
/* The multiply array t of chain `name` ("prolog" / "epilog") with ops: NULL unless ops has
 * FM_FFT_OP_MULTIPLY, else of shape local[ndim], C-contiguous, host (gpu < 0) or on cuda:gpu, real
 * or complex of the precision (real only where real_side). Sets run->arr, run->arr_cplx. Local. */
fm_status fm_dist_check_array(const char *where, const char *name, const fm_tensor *t, unsigned ops, int ndim,
                              const int64_t *local, int dbl, int real_side, int gpu, fm_dist_chain_run *run);
/* One-time fftw_mpi_init / fftwf_mpi_init (after fftw_init_threads); FM_ERR_INVALID_ARGUMENT when
 * MPI is not initialized or already finalized. Local. */
fm_status fm_dist_init(const char *where);

/* Pencil decompositions on CPU ranks (dist_pencil.c); the GPU module builds the same file for GPU ranks
 * (dist_pencil_gpu.c: FM_DIST_PENCIL_GPU), reached through fm_dist_gpu_ops (dist_gpu.h). */
typedef struct fm_dist_pencil fm_dist_pencil;
/* P1 x P2 = size from opts->grid_rows (0: MPI_Dims_create); FM_ERR_INVALID_ARGUMENT unless it divides. Local. */
fm_status fm_dist_pencil_grid(const char *where, int size, int rows, int *p1, int *p2);
/* fm_dist_geometry's answer for a pencil decomposition (3-D only). Local. */
fm_status fm_dist_pencil_geometry(const char *where, MPI_Comm comm, int ndim, const int64_t *n,
                                  const fm_dist_fft_options *o, fm_dist_geom *g);
/* Collective over comm (the plan's, kept, not owned): the exchanges' communicators and the core's
 * local plans; run: the chains as set_chains made them (the epilog's scale holds the norm). text: the
 * describe() suffix. Fails on every rank alike. */
fm_status fm_dist_pencil_plan(const char *where, MPI_Comm comm, const fm_dist_geom *g, const fm_dist_fft_options *o,
                              fm_dtype in_dtype, const fm_tensor *pro, const fm_tensor *epi,
                              const fm_dist_chain_run run[2], fm_dist_pencil **out, char *text, size_t cap);
/* Collective; agrees on the outcome. stream: GPU ranks' cudaStream_t (CPU ranks: ignored). */
fm_status fm_dist_pencil_execute(fm_dist_pencil *p, const void *in, void *out, void *stream);
/* Collective (frees communicators); NULL is fine. */
void fm_dist_pencil_destroy(fm_dist_pencil *p);

#endif /* FM_DIST_IMPL_H */
