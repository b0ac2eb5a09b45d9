/* cuda_workspace.h : what the CUDA backends share: CUDA errors as statuses, making a device
 * current, per-(device, stream) workspaces. */
#ifndef FM_CUDA_WORKSPACE_H
#define FM_CUDA_WORKSPACE_H

#include "internal.h"

#include <cuda_runtime.h>

/* FM_OK for cudaSuccess; else clears the (non-sticky) error and fails with
 * FM_ERR_OUT_OF_MEMORY for allocation failures, FM_ERR_BACKEND otherwise. */
static inline fm_status fm_cuda_status(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return FM_OK;
    (void)cudaGetLastError();
    return fm_fail(e == cudaErrorMemoryAllocation ? FM_ERR_OUT_OF_MEMORY : FM_ERR_BACKEND, "%s: %s (%s)",
                   what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* A table of workspaces, one buffer per (device, stream), the stream known by its id: plans
 * executed concurrently on different streams never share one. A buffer is leased: from
 * fm_cuda_ws_acquire until fm_cuda_ws_release (after the kernels using it are queued) no other
 * thread gets it, so two threads queuing on one stream cannot interleave their kernels on it.
 * A buffer that must grow is released stream-ordered (cudaFreeAsync) on its own stream. Past
 * 64 streams the least recently used idle slot is freed (after a device synchronization: its
 * stream may be gone). */
typedef struct fm_cuda_ws_table fm_cuda_ws_table;
typedef struct ws_slot ws_slot;
typedef ws_slot *fm_cuda_ws_lease;
void fm_cuda_ws_table_destroy(fm_cuda_ws_table *t); /* accepts NULL */
fm_status fm_cuda_ws_acquire(fm_cuda_ws_table *t, int device, cudaStream_t stream, size_t bytes, void **ws,
                             fm_cuda_ws_lease *lease);
void fm_cuda_ws_release(fm_cuda_ws_lease lease); /* accepts NULL */

/* The CUDA backends' probe: a device, and the backend's workspace table in *ws (who: a static
 * string naming it in messages); else FM_ERR_UNAVAILABLE with the reason in *why. */
fm_status fm_cuda_ws_probe(const char *who, void **ws, const char **why);

/* Make `device` current for this thread if it is not. */
fm_status fm_cuda_use_device(int device);

int fm_cuda_probe_device_count(void);

#endif
