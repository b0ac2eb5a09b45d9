/* cuda_workspace.h : per-(device, stream) workspaces; the per-context cuBLASLt state. */
#ifndef FM_CUDA_WORKSPACE_H
#define FM_CUDA_WORKSPACE_H

#include "internal.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

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
fm_status fm_cuda_ws_table_create(const char *who, fm_cuda_ws_table **out); /* who: static, for messages */
void fm_cuda_ws_table_destroy(fm_cuda_ws_table *t);                          /* accepts NULL */
fm_status fm_cuda_ws_acquire(fm_cuda_ws_table *t, int device, cudaStream_t stream, size_t bytes, void **ws,
                             fm_cuda_ws_lease *lease);
void fm_cuda_ws_release(fm_cuda_ws_lease lease); /* accepts NULL */

typedef struct fm_cuda_lt_state fm_cuda_lt_state;

/* Handle + workspace table. The workspace limit is FUSEMATH_CUDA_WORKSPACE_MB
 * (default 32 MiB, cuBLAS's recommendation for Hopper), read here once. */
fm_status fm_cuda_lt_state_create(const fm_settings *settings, fm_cuda_lt_state **out);
void fm_cuda_lt_state_destroy(fm_cuda_lt_state *st);
cublasLtHandle_t fm_cuda_lt_handle(const fm_cuda_lt_state *st);
size_t fm_cuda_lt_workspace_limit(const fm_cuda_lt_state *st);

/* A leased workspace of at least `bytes` for work queued on `stream` of `device` (see
 * fm_cuda_ws_acquire; release the lease once the kernels are queued). */
fm_status fm_cuda_lt_workspace(fm_cuda_lt_state *st, int device, cudaStream_t stream, size_t bytes, void **ws,
                               fm_cuda_ws_lease *lease);

/* Make `device` current for this thread if it is not. */
fm_status fm_cuda_use_device(int device);

int fm_cuda_probe_device_count(void);

#endif
