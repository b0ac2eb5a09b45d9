/* cuda_nvtx.h : an NVTX range around each GPU execute, named from the plan's describe() text (written
 * once at plan time: nothing is formatted per call), so a profiler (Nsight Systems) shows fusemath's
 * calls. NVTX v3 is header-only (the toolkit's nvtx3/); with no tool attached a range costs one
 * pointer test. */
#ifndef FM_CUDA_NVTX_H
#define FM_CUDA_NVTX_H

#include "internal.h"

#include <nvtx3/nvToolsExt.h>

/* static fm_status name(plan, ptrs, args, stream): run(...) inside the range */
#define FM_NVTX_EXECUTE(name, run)                                                                       \
    static fm_status name(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream) \
    {                                                                                                    \
        nvtxRangePushA(plan->describe);                                                                  \
        const fm_status s = run(plan, ptrs, args, stream);                                               \
        nvtxRangePop();                                                                                  \
        return s;                                                                                        \
    }

#endif
