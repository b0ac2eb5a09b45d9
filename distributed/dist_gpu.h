/* dist_gpu.h : the GPU ranks of libfusemath_mpi's FFTs (dist_fft_gpu.c, dist_exchange.c,
 * dist_gpu_kernel.c; docs/design.md, Distributed, GPU ranks). Not installed. */
#ifndef FM_DIST_GPU_H
#define FM_DIST_GPU_H

#include "dist_impl.h"
#include "dist_xgeom.h"

/* FUSEMATH_DIST_GPU_EMULATE=host (read once; a testing aid, docs/design.md): GPU-rank plans run their
 * stages on the host (host memory, the core's CPU FFTs, dist_move_body.h in a loop, MPI_Alltoallv of
 * host buffers), so that machines without a GPU run the GPU ranks' orchestration. 0 without CUDA. */
int fm_dist_gpu_emulated(void);

/* ---- the move kernel (dist_gpu_kernel.c): dist_xgeom.h's fm_dist_move on complex data, through a chain */
enum { FM_DIST_MV_SCALE = 1, FM_DIST_MV_CONJ = 2, FM_DIST_MV_ARR = 4, FM_DIST_MV_ARR_CPLX = 8, FM_DIST_MV_ARR_DST = 16 };
typedef struct fm_dist_mv_chain {
    unsigned flags;   /* FM_DIST_MV_* */
    double scale[2];
    const void *arr;  /* the multiply array, indexed as dst (FM_DIST_MV_ARR_DST) or src of the move */
} fm_dist_mv_chain;
typedef struct fm_dist_kernel fm_dist_kernel;
/* The kernels for device_id (NVRTC at the first call for that device, kept for the process). */
fm_status fm_dist_kernel_get(const char *where, int device_id, const fm_dist_kernel **k);
/* the move on the host (emulation), as the kernel runs it */
void fm_dist_move_host(int dbl, const fm_dist_move *m, const void *src, void *dst, const fm_dist_mv_chain *c);
/* src / dst are the whole buffers (the move's bases are added here); stream: cudaStream_t. */
fm_status fm_dist_kernel_move(const fm_dist_kernel *k, int dbl, const fm_dist_move *m, const void *src, void *dst,
                              const fm_dist_mv_chain *c, void *stream);

/* ---- the exchange (dist_exchange.c) */
typedef struct fm_dist_exchange fm_dist_exchange;
/* Collective. Chooses the backend (FUSEMATH_DIST_EXCHANGE, read once: auto | nccl | mpi | staged) for
 * messages of complex elements (dbl: double) of at most max_elems a rank, on device_id. */
fm_status fm_dist_exchange_create(const char *where, MPI_Comm comm, int dbl, int64_t max_elems, int device_id,
                                  fm_dist_exchange **x);
/* Collective: recv[recv_off[q] ..] = peer q's send[send_off[me] ..] (counts in complex elements), on stream.
 * prior: this rank's status so far, agreed first (every rank calls this even after a failed stage, so
 * that all of them return that failure and none waits in the all-to-all). */
fm_status fm_dist_exchange_run(fm_dist_exchange *x, fm_status prior, const void *send, const int64_t *send_count,
                               const int64_t *send_off, void *recv, const int64_t *recv_count,
                               const int64_t *recv_off, void *stream);
/* "staged", "mpi-cuda-aware" or "nccl", and why where it was not the one asked for. */
const char *fm_dist_exchange_describe(const fm_dist_exchange *x);
void fm_dist_exchange_destroy(fm_dist_exchange *x); /* collective (NCCL's communicator); NULL is fine */

/* ---- the plan (dist_fft_gpu.c) */
typedef struct fm_dist_gpu fm_dist_gpu;
/* Collective over comm (the plan's duplicate). g and o as the CPU ranks' plan has them; pro / epi:
 * the multiply arrays (checked here: on cuda:o->device_id). text: describe()'s tail. */
fm_status fm_dist_gpu_plan(const char *where, MPI_Comm comm, const fm_dist_geom *g, const fm_dist_fft_options *o,
                           fm_dtype in_dtype, const fm_tensor *pro, const fm_tensor *epi, fm_dist_gpu **out,
                           char *text, size_t cap);
fm_status fm_dist_gpu_execute(fm_dist_gpu *x, const void *in, void *out, void *stream);
void fm_dist_gpu_destroy(fm_dist_gpu *x); /* collective; NULL is fine */

#endif /* FM_DIST_GPU_H */
