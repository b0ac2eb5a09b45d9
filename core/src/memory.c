/* memory.c : the public memory API (fm_memory_alloc / fm_memory_free / fm_memory_copy) for C
 * callers that keep their data where it computes, without linking the CUDA runtime.
 *
 * Everything goes through the device memory operations table (fm_device_ops_for, the same
 * operations staging.c uses), on the default (legacy) stream, and is synchronous:
 *  - alloc: the stream-ordered allocation is waited for, so the memory may be used at once
 *    from any stream;
 *  - free: waits for all work queued on the device (it may still use the memory), then frees
 *    and waits for the free;
 *  - copy: waits for work queued on the GPU(s) involved (a kernel on another stream may still
 *    write the source), copies and waits, so the destination may be read at once.
 * These calls make the device they name the calling thread's current CUDA device. */
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The memory operations for `dev`, or an error: FM_ERR_DEVICE for device types other than cpu
 * and cuda, FM_ERR_UNAVAILABLE for a cuda device that is not there. `fn` and `arg` name the
 * function and the argument in messages. */
static fm_status memory_ops(const char *fn, const char *arg, fm_device dev, const fm_device_ops **ops)
{
    *ops = NULL;
    if (dev.type == FM_DEVICE_CUDA) {
        int count = fm_cuda_device_count();
        if (dev.id < 0)
            return fm_fail(FM_ERR_DEVICE, "memory: %s: %s is cuda:%d, not a valid device index", fn, arg, dev.id);
        if (count == 0)
            return fm_fail(FM_ERR_UNAVAILABLE, "memory: cuda:%d requested but %s", dev.id,
                           fm_cuda_missing_device_text());
        if (dev.id >= count)
            return fm_fail(FM_ERR_UNAVAILABLE, "memory: cuda:%d requested but only %d CUDA device%s present", dev.id,
                           count, count == 1 ? " is" : "s are");
    } else if (dev.type != FM_DEVICE_CPU) {
        return fm_fail(FM_ERR_DEVICE, "memory: %s: %s has device type %d; only cpu (%d) and cuda (%d) are supported",
                       fn, arg, (int)dev.type, (int)FM_DEVICE_CPU, (int)FM_DEVICE_CUDA);
    }
    *ops = fm_device_ops_for(dev.type);
    if (!*ops || !(*ops)->alloc || !(*ops)->free || !(*ops)->copy)
        return fm_fail(FM_ERR_UNAVAILABLE, "memory: %s: no memory operations for device type %d in this build", fn,
                       (int)dev.type);
    return FM_OK;
}

static const char *device_name(fm_device dev, char *buf, size_t size)
{
    snprintf(buf, size, "%s:%d", dev.type == FM_DEVICE_CUDA ? "cuda" : "cpu", (int)dev.id);
    return buf;
}

/* Put "memory: <what>: " in front of the detail message a device operation left. */
static fm_status prefix_error(fm_status s, const char *what)
{
    char detail[400];
    snprintf(detail, sizeof detail, "%s", fm_last_error());
    return fm_fail(s, "memory: %s: %s", what, detail[0] ? detail : fm_status_string(s));
}

/* Wait for the work queued on dev (nothing to wait for on the cpu). */
static fm_status device_sync(const fm_device_ops *ops, fm_device dev)
{
    return ops->sync ? ops->sync(dev.id) : FM_OK;
}

fm_status fm_memory_alloc(fm_device device, size_t bytes, void **ptr)
{
    if (!ptr)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "memory: fm_memory_alloc: ptr is NULL (it receives the allocation)");
    *ptr = NULL;
    const fm_device_ops *ops;
    fm_status s = memory_ops("fm_memory_alloc", "device", device, &ops);
    if (s != FM_OK || bytes == 0)
        return s;
    char name[32], what[96];
    device_name(device, name, sizeof name);
    void *p = NULL;
    s = ops->alloc(device.id, bytes, NULL, &p);
    if (s == FM_OK && !p)
        s = fm_fail(FM_ERR_OUT_OF_MEMORY, "no memory returned");
    if (s == FM_OK) {
        /* stream-ordered allocation on the default stream: make it usable from any stream now */
        s = device_sync(ops, device);
        if (s != FM_OK)
            ops->free(device.id, p, NULL);
    }
    if (s == FM_ERR_OUT_OF_MEMORY && device.type == FM_DEVICE_CPU)
        return fm_fail(s, "memory: out of host memory allocating %zu bytes on %s", bytes, name);
    if (s != FM_OK) {
        snprintf(what, sizeof what, "allocating %zu bytes on %s", bytes, name);
        return prefix_error(s, what);
    }
    *ptr = p;
    return FM_OK;
}

void fm_memory_free(fm_device device, void *ptr)
{
    if (!ptr)
        return;
    const fm_device_ops *ops;
    if (memory_ops("fm_memory_free", "device", device, &ops) != FM_OK)
        return; /* the detail message says why; nothing from fm_memory_alloc can be freed there */
    /* work queued on any stream may still use the memory: wait for it, free, wait for the free */
    char name[32], what[96];
    device_name(device, name, sizeof name);
    snprintf(what, sizeof what, "freeing %p on %s", ptr, name);
    fm_status s = device_sync(ops, device);
    if (s != FM_OK)
        prefix_error(s, what);
    ops->free(device.id, ptr, NULL);
    s = device_sync(ops, device);
    if (s != FM_OK)
        prefix_error(s, what);
}

fm_status fm_memory_copy(void *dst, fm_device dst_device, const void *src, fm_device src_device, size_t bytes)
{
    const fm_device_ops *dst_ops, *src_ops;
    fm_status s = memory_ops("fm_memory_copy", "dst_device", dst_device, &dst_ops);
    if (s == FM_OK)
        s = memory_ops("fm_memory_copy", "src_device", src_device, &src_ops);
    if (s != FM_OK || bytes == 0)
        return s;
    if (!dst)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "memory: fm_memory_copy: dst is NULL (copying %zu bytes)", bytes);
    if (!src)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "memory: fm_memory_copy: src is NULL (copying %zu bytes)", bytes);
    if (dst_device.type == FM_DEVICE_CPU && src_device.type == FM_DEVICE_CPU) {
        uintptr_t d = (uintptr_t)dst, sr = (uintptr_t)src;
        if (d == sr)
            return FM_OK;
        if ((d < sr && sr - d < bytes) || (sr < d && d - sr < bytes))
            memmove(dst, src, bytes); /* overlapping ranges */
        else
            memcpy(dst, src, bytes);
        return FM_OK;
    }
    char dname[32], sname[32], what[128];
    snprintf(what, sizeof what, "copying %zu bytes from %s to %s", bytes, device_name(src_device, sname, sizeof sname),
             device_name(dst_device, dname, sizeof dname));
    /* the GPU side does the copy; first wait for work that may still write the source or read
     * the destination (on any stream), then copy on the default stream and wait for it */
    const fm_device_ops *ops = dst_device.type == FM_DEVICE_CUDA ? dst_ops : src_ops;
    if (src_device.type == FM_DEVICE_CUDA && (s = device_sync(src_ops, src_device)) != FM_OK)
        return prefix_error(s, what);
    if (dst_device.type == FM_DEVICE_CUDA && !(src_device.type == FM_DEVICE_CUDA && src_device.id == dst_device.id) &&
        (s = device_sync(dst_ops, dst_device)) != FM_OK)
        return prefix_error(s, what);
    s = ops->copy(dst, dst_device, src, src_device, bytes, NULL, 1);
    return s != FM_OK ? prefix_error(s, what) : FM_OK;
}
