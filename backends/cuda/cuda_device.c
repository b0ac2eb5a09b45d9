/* cuda_device.c : CUDA device discovery and memory operations. Any error from
 * cudaGetDeviceCount (no driver, no GPU) means "no GPU": the CPU keeps working.
 *
 * Large copies between pageable host memory and the device go through two pinned buffers: the
 * host copies chunk c+1 into one buffer (several threads) while the DMA engine moves chunk c
 * from the other. Pageable cudaMemcpy moves ~4-6 GB/s on the H200 host; pinned DMA runs at the
 * link's speed, so the host memcpy bounds this path. */
#include "cuda_workspace.h"

#include <cuda_runtime.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

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

/* ---- pinned staging ---- */
#define CHUNK ((size_t)8 << 20)
#define PINNED_MIN_BYTES ((size_t)4 << 20) /* copies at least this large go through the pinned buffers */
#define MAX_DEVICES 16

static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER; /* one pipeline at a time */
/* Per device: an event can only be recorded on a stream of the device it was made on, so each
 * device has its own pair (the pinned buffers too, made while that device is current). */
static struct {
    void *pinned[2];
    cudaEvent_t done[2];
    int ready; /* 0 untried, -1 unavailable, 1 ready */
} dev_state[MAX_DEVICES];

/* The pair of the current device (the caller's stream belongs to it), or -1. */
static int pinned_setup(void)
{
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEVICES) {
        (void)cudaGetLastError();
        return -1; /* callers fall back to plain copies */
    }
    if (dev_state[dev].ready)
        return dev_state[dev].ready > 0 ? dev : -1;
    dev_state[dev].ready = -1;
    for (int i = 0; i < 2; i++) {
        if (cudaHostAlloc(&dev_state[dev].pinned[i], CHUNK, cudaHostAllocPortable) != cudaSuccess ||
            cudaEventCreateWithFlags(&dev_state[dev].done[i], cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            return -1; /* callers fall back to plain copies; what was made stays for the process */
        }
    }
    dev_state[dev].ready = 1;
    return dev;
}

static void host_copy(void *dst, const void *src, size_t n)
{
    /* one thread moves ~8-10 GB/s; several together approach the link */
    int threads = omp_get_max_threads();
    if (threads > 8)
        threads = 8;
    if (n < ((size_t)1 << 20) || threads < 2) {
        memcpy(dst, src, n);
        return;
    }
    size_t part = (n + (size_t)threads - 1) / (size_t)threads;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; t++) {
        size_t lo = (size_t)t * part, hi = lo + part < n ? lo + part : n;
        if (lo < hi)
            memcpy((char *)dst + lo, (const char *)src + lo, hi - lo);
    }
}

/* Copy `bytes` between pageable host memory and device memory on `stream` (to_device:
 * src is host). A copy to the host is complete on return; a copy to the device is queued.
 * *used = 0 when no pinned buffers could be had: nothing was done, copy directly. */
static fm_status pinned_copy(void *dst, const void *src, size_t bytes, int to_device, cudaStream_t stream,
                             int *used)
{
    *used = 0;
    pthread_mutex_lock(&pinned_lock);
    const int dev = pinned_setup();
    if (dev < 0) {
        pthread_mutex_unlock(&pinned_lock);
        return FM_OK; /* not used: the caller copies directly */
    }
    void *const *pinned = dev_state[dev].pinned;
    cudaEvent_t *done = dev_state[dev].done;
    *used = 1;
    fm_status s = FM_OK;
    cudaError_t e;
    size_t nchunks = (bytes + CHUNK - 1) / CHUNK;
    if (to_device) {
        for (size_t c = 0; c < nchunks && s == FM_OK; c++) {
            int b = (int)(c & 1);
            size_t off = c * CHUNK, n = bytes - off < CHUNK ? bytes - off : CHUNK;
            if ((e = cudaEventSynchronize(done[b])) != cudaSuccess) { /* its last DMA is finished */
                s = fm_cuda_status(e, "cudaEventSynchronize");
                break;
            }
            host_copy(pinned[b], (const char *)src + off, n);
            e = cudaMemcpyAsync((char *)dst + off, pinned[b], n, cudaMemcpyHostToDevice, stream);
            if (e != cudaSuccess || (e = cudaEventRecord(done[b], stream)) != cudaSuccess)
                s = fm_cuda_status(e, "cudaMemcpyAsync (pinned staging)");
        } /* no wait: the events keep the buffers until their DMA is done */
    } else {
        for (size_t c = 0; c < nchunks + 1 && s == FM_OK; c++) {
            if (c < nchunks) { /* queue chunk c, then drain chunk c - 1 while it runs */
                int b = (int)(c & 1);
                size_t off = c * CHUNK, n = bytes - off < CHUNK ? bytes - off : CHUNK;
                e = cudaMemcpyAsync(pinned[b], (const char *)src + off, n, cudaMemcpyDeviceToHost, stream);
                if (e != cudaSuccess || (e = cudaEventRecord(done[b], stream)) != cudaSuccess) {
                    s = fm_cuda_status(e, "cudaMemcpyAsync (pinned staging)");
                    break;
                }
            }
            if (c > 0) {
                int b = (int)((c - 1) & 1);
                size_t off = (c - 1) * CHUNK, n = bytes - off < CHUNK ? bytes - off : CHUNK;
                if ((e = cudaEventSynchronize(done[b])) != cudaSuccess) {
                    s = fm_cuda_status(e, "cudaEventSynchronize");
                    break;
                }
                host_copy((char *)dst + off, pinned[b], n);
            }
        }
    }
    /* after a failure no event may cover a queued copy: drain the stream before the next caller
     * refills the buffers (or a queued copy writes one it fills) */
    if (s != FM_OK)
        cudaStreamSynchronize(stream);
    pthread_mutex_unlock(&pinned_lock);
    return s;
}

/* ---- device operations ---- */
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
    if (bytes >= PINNED_MIN_BYTES && host_src != host_dst) { /* where pinned staging pays */
        int used = 0;
        s = pinned_copy(dst, src, bytes, host_src, (cudaStream_t)stream, &used);
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

/* ---- streams, events, pinned memory: the pipelined transfers' rows (core/src/pipeline.c) ---- */
static fm_status cuda_stream_create(int device_id, void **stream)
{
    fm_status s = fm_cuda_status(cudaSetDevice(device_id), "cudaSetDevice");
    cudaStream_t st = NULL;
    if (s == FM_OK && (s = fm_cuda_status(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking),
                                          "cudaStreamCreateWithFlags")) == FM_OK)
        *stream = st;
    return s;
}

static void cuda_stream_destroy(void *stream) { cudaStreamDestroy((cudaStream_t)stream); }

static fm_status cuda_stream_sync(void *stream)
{
    return fm_cuda_status(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

static fm_status cuda_event_create(int device_id, void **event)
{
    fm_status s = fm_cuda_status(cudaSetDevice(device_id), "cudaSetDevice");
    cudaEvent_t ev = NULL;
    if (s == FM_OK &&
        (s = fm_cuda_status(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags")) ==
            FM_OK)
        *event = ev;
    return s;
}

static void cuda_event_destroy(void *event) { cudaEventDestroy((cudaEvent_t)event); }

static fm_status cuda_event_record(void *event, void *stream)
{
    return fm_cuda_status(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream), "cudaEventRecord");
}

static fm_status cuda_stream_wait_event(void *stream, void *event)
{
    return fm_cuda_status(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0), "cudaStreamWaitEvent");
}

static fm_status cuda_event_sync(void *event)
{
    return fm_cuda_status(cudaEventSynchronize((cudaEvent_t)event), "cudaEventSynchronize");
}

static fm_status cuda_host_alloc_pinned(size_t bytes, void **ptr)
{
    return fm_cuda_status(cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocPortable), "cudaHostAlloc");
}

static void cuda_host_free_pinned(void *ptr) { cudaFreeHost(ptr); }

static fm_status cuda_copy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    return fm_cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream),
                          "cudaMemcpyAsync (pipelined)");
}

const fm_device_ops fm_cuda_device_ops = {.device = FM_DEVICE_CUDA,
                                          .sync = cuda_sync,
                                          .alloc = cuda_alloc,
                                          .free = cuda_free,
                                          .copy = cuda_copy,
                                          .classify = cuda_classify,
                                          .stream_create = cuda_stream_create,
                                          .stream_destroy = cuda_stream_destroy,
                                          .stream_sync = cuda_stream_sync,
                                          .event_create = cuda_event_create,
                                          .event_destroy = cuda_event_destroy,
                                          .event_record = cuda_event_record,
                                          .stream_wait_event = cuda_stream_wait_event,
                                          .event_sync = cuda_event_sync,
                                          .host_alloc_pinned = cuda_host_alloc_pinned,
                                          .host_free_pinned = cuda_host_free_pinned,
                                          .copy_async = cuda_copy_async};
