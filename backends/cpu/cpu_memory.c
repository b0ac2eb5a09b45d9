/* cpu_memory.c : host memory operations for staging. */
#include "internal.h"

#include <string.h>

static fm_status cpu_alloc(int device_id, size_t bytes, void *stream, void **ptr)
{
    *ptr = fm_malloc_aligned(bytes, 64);
    if (!*ptr)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "out of host memory allocating %zu bytes for staging", bytes);
    return FM_OK;
}

static void cpu_free(int device_id, void *ptr, void *stream)
{
    fm_free_aligned(ptr);
}

static fm_status cpu_copy(void *dst, fm_device dst_dev, const void *src, fm_device src_dev, size_t bytes,
                          void *stream, int wait)
{
    memcpy(dst, src, bytes);
    return FM_OK;
}

const fm_device_ops fm_cpu_device_ops = {
    .device = FM_DEVICE_CPU, .alloc = cpu_alloc, .free = cpu_free, .copy = cpu_copy, .classify = NULL};
