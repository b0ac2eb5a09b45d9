/* cuda_device.c : CUDA device discovery and memory operations. Any error from
 * cudaGetDeviceCount (no driver, no GPU) means "no GPU": the CPU keeps working. */
#include "cuda_pinned_copy.h"
#include "cuda_status.h"
#include "internal.h"

#include <cuda_runtime.h>
#include <pthread.h>

static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int device_count;

static void probe_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 0)
        n = 0;
    (void)cudaGetLastError(); /* leave no sticky error behind */
    device_count = n;
}

int fm_cuda_probe_device_count(void)
{
    pthread_once(&count_once, probe_count);
    return device_count;
}

/* Stream-ordered: a staged call allocates and frees per call, and cudaMalloc/cudaFree
 * would synchronize the device each time; the pool behind cudaMallocAsync does not. */
static fm_status cuda_alloc(int device_id, size_t bytes, void *stream, void **ptr)
{
    fm_status s = fm_cuda_status(cudaSetDevice(device_id), "cudaSetDevice");
    if (s != FM_OK)
        return s;
    return fm_cuda_status(cudaMallocAsync(ptr, bytes ? bytes : 1, (cudaStream_t)stream), "cudaMallocAsync");
}

static void cuda_free(int device_id, void *ptr, void *stream)
{
    (void)device_id;
    cudaFreeAsync(ptr, (cudaStream_t)stream);
}

static fm_status cuda_copy(void *dst, fm_device dst_dev, const void *src, fm_device src_dev, size_t bytes,
                           void *stream, int wait)
{
    fm_status s;
    int host_src = src_dev.type == FM_DEVICE_CPU, host_dst = dst_dev.type == FM_DEVICE_CPU;
    if (bytes >= FM_CUDA_PINNED_MIN_BYTES && host_src != host_dst) { /* where pinned staging pays */
        int used = 0;
        s = fm_cuda_pinned_copy(dst, src, bytes, host_src, (cudaStream_t)stream, &used);
        if (used) /* a copy to the host is complete; one to the device is ordered on the stream */
            return s != FM_OK || !wait || host_dst ? s
                                                   : fm_cuda_status(cudaStreamSynchronize((cudaStream_t)stream),
                                                                 "cudaStreamSynchronize");
    }
    s = fm_cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream), "cudaMemcpyAsync");
    if (s != FM_OK || !wait)
        return s;
    return fm_cuda_status(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

static fm_status cuda_classify(const void *ptr, fm_device *dev)
{
    if (fm_cuda_probe_device_count() == 0 || !ptr)
        return FM_ERR_NOT_APPLICABLE;
    struct cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
        (void)cudaGetLastError();
        return FM_ERR_NOT_APPLICABLE;
    }
    switch (attr.type) {
    case cudaMemoryTypeDevice:
        dev->type = FM_DEVICE_CUDA;
        dev->id = attr.device;
        return FM_OK;
    case cudaMemoryTypeManaged:
        dev->type = FM_DEVICE_CUDA_MANAGED;
        dev->id = attr.device;
        return FM_OK;
    case cudaMemoryTypeHost: /* pinned host memory computes on the cpu */
    default:
        dev->type = FM_DEVICE_CPU;
        dev->id = 0;
        return FM_OK;
    }
}

static fm_status cuda_sync(int device_id)
{
    fm_status s = fm_cuda_status(cudaSetDevice(device_id), "cudaSetDevice");
    return s != FM_OK ? s : fm_cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

const fm_device_ops fm_cuda_device_ops = {.device = FM_DEVICE_CUDA,
                                          .sync = cuda_sync,
                                          .alloc = cuda_alloc,
                                          .free = cuda_free,
                                          .copy = cuda_copy,
                                          .classify = cuda_classify};
