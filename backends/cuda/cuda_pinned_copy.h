/* cuda_pinned_copy.h : pageable host <-> device copies pipelined through pinned buffers. */
#ifndef FM_CUDA_PINNED_COPY_H
#define FM_CUDA_PINNED_COPY_H

#include "internal.h"

#include <cuda_runtime.h>

/* Copy `bytes` between pageable host memory and device memory on `stream` (to_device:
 * src is host). A copy to the host is complete on return; a copy to the device is queued.
 * *used = 0 when no pinned buffers could be had: nothing was done, copy directly. */
fm_status fm_cuda_pinned_copy(void *dst, const void *src, size_t bytes, int to_device, cudaStream_t stream,
                              int *used);

/* Copies at least this large go through the pinned buffers. */
#define FM_CUDA_PINNED_MIN_BYTES ((size_t)4 << 20)

#endif
