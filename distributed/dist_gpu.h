/* dist_gpu.h : the GPU ranks of libfusemath_mpi's FFTs (docs/design.md, Distributed, GPU ranks). Not
 * installed. They are a module of their own, libfusemath_mpi_cuda.so (dist_fft_gpu.c, dist_exchange.c,
 * dist_gpu_kernel.c, dist_pencil_gpu.c (dist_pencil.c for the device), with their own copies of
 * dist_xgeom.c and dist_agree.c), the only part of the
 * distributed layer that links the CUDA runtime, NVRTC and NCCL, so that libfusemath_mpi.so loads on
 * machines without CUDA; libfusemath_mpi loads it at the first GPU-rank plan (dist_gpu_load.c) and
 * reaches it through fm_dist_gpu_ops. */
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

/* ---- what the module's plans share (dist_fft_gpu.c): device memory (host memory when emulated), the
 * current device, CUDA errors as fm_status, and the check that an execute's pointer is on the device */
fm_status fm_dist_dev_alloc(const char *where, void **ptr, size_t bytes, const char *what);
void fm_dist_dev_free(void *ptr);
/* make cuda:dev current, the caller's in *prev (-1: nothing to restore); emulated: nothing. 0: failed */
int fm_dist_enter_device(int dev, int *prev);
void fm_dist_leave_device(int prev);
/* FM_ERR_INVALID_ARGUMENT unless ptr (NULL is fine) is memory cuda:device can read (emulated: anything) */
fm_status fm_dist_check_device_ptr(const char *where, int device, const char *name, const void *ptr);
/* An execute's start on GPU ranks (local, before its agreement): in / out device memory of `device`, the
 * device entered (*prev: for fm_dist_leave_device), the stream made to wait for the previous execute's
 * work (the cudaEvent_t done, once recorded). */
fm_status fm_dist_gpu_begin(int device, const void *in, const void *out, void *done, int recorded, void *stream,
                            int *prev);
/* An execute's end: done (NULL: none, emulated) recorded on the stream, else the stream synchronized;
 * returns st, or the record's failure where st is FM_OK. */
fm_status fm_dist_gpu_end(void *done, int *recorded, void *stream, fm_status st);
/* fm_dist_check_device_ptr of both chains' multiply arrays (NULL: none) */
fm_status fm_dist_check_chain_arrays(const char *where, int device, const fm_tensor *pro, const fm_tensor *epi);

/* ---- the plan (dist_fft_gpu.c, slabs; dist_pencil_gpu.c, pencils), reached from libfusemath_mpi through
 * the module's table */
typedef struct fm_dist_gpu fm_dist_gpu;
#define FM_DIST_GPU_ABI 2 /* bumped with any change to fm_dist_gpu_ops or the types it passes (2: pencils) */
typedef struct fm_dist_gpu_ops {
    int abi;              /* FM_DIST_GPU_ABI of the module's build */
    int layout;           /* FM_DIST_GPU_LAYOUT, the sizes of the types passed: a stale module is refused */
    int (*emulated)(void); /* fm_dist_gpu_emulated */
    /* Collective over comm (the plan's duplicate). g and o as the CPU ranks' plan has them; pro / epi:
     * the multiply arrays (checked here: on cuda:o->device_id). text: describe()'s tail. */
    fm_status (*plan)(const char *where, MPI_Comm comm, const fm_dist_geom *g, const fm_dist_fft_options *o,
                      fm_dtype in_dtype, const fm_tensor *pro, const fm_tensor *epi, fm_dist_gpu **out, char *text,
                      size_t cap);
    fm_status (*execute)(fm_dist_gpu *x, const void *in, void *out, void *stream); /* collective */
    void (*destroy)(fm_dist_gpu *x); /* collective; NULL is fine */
    /* Pencils on GPU ranks (dist_pencil.c built into the module as dist_pencil_gpu.c): as
     * fm_dist_pencil_plan / _execute / _destroy (dist_impl.h), on cuda:o->device_id, stream-ordered. */
    fm_status (*pencil_plan)(const char *where, MPI_Comm comm, const fm_dist_geom *g, const fm_dist_fft_options *o,
                             fm_dtype in_dtype, const fm_tensor *pro, const fm_tensor *epi,
                             const fm_dist_chain_run run[2], fm_dist_pencil **out, char *text, size_t cap);
    fm_status (*pencil_execute)(fm_dist_pencil *x, const void *in, void *out, void *stream); /* collective */
    void (*pencil_destroy)(fm_dist_pencil *x); /* collective; NULL is fine */
} fm_dist_gpu_ops;
#define FM_DIST_GPU_LAYOUT ((int)(sizeof(fm_dist_geom) + sizeof(fm_dist_fft_options) + sizeof(fm_dist_chain_run)))
/* The module's one exported symbol (dist_fft_gpu.c). */
const fm_dist_gpu_ops *fm_dist_gpu_module_entry(void);
/* In libfusemath_mpi (dist_gpu_load.c): the module's table, loaded once a process from beside
 * libfusemath_mpi.so; NULL when it cannot be loaded, *why (if given) then says why. */
const fm_dist_gpu_ops *fm_dist_gpu_module(const char **why);

#endif /* FM_DIST_GPU_H */
