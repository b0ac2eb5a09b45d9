/* cuda_status.h : a CUDA runtime error as an fm_status with its name in the message. */
#ifndef FM_CUDA_STATUS_H
#define FM_CUDA_STATUS_H

#include "internal.h"

#include <cuda_runtime.h>

/* FM_OK for cudaSuccess; else clears the (non-sticky) error and fails with
 * FM_ERR_OUT_OF_MEMORY for allocation failures, FM_ERR_BACKEND otherwise. */
static inline fm_status fm_cuda_status(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return FM_OK;
    (void)cudaGetLastError();
    return fm_fail(e == cudaErrorMemoryAllocation ? FM_ERR_OUT_OF_MEMORY : FM_ERR_BACKEND, "%s: %s (%s)", what,
                   cudaGetErrorName(e), cudaGetErrorString(e));
}

#endif
