/* cuda_pinned_copy.c : large copies between pageable host memory and the device through
 * two pinned buffers: the host copies chunk c+1 into one buffer (several threads) while
 * the DMA engine moves chunk c from the other. Pageable cudaMemcpy moves ~4-6 GB/s on the
 * H200 host; pinned DMA runs at the link's speed, so the host memcpy bounds this path. */
#include "cuda_pinned_copy.h"
#include "cuda_status.h"

#include <omp.h>
#include <pthread.h>
#include <string.h>

#define CHUNK ((size_t)8 << 20)

#define MAX_DEVICES 16

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* one pipeline at a time */
/* Per device: an event can only be recorded on a stream of the device it was made on, so each
 * device has its own pair (the pinned buffers too, made while that device is current). */
static struct {
    void *pinned[2];
    cudaEvent_t done[2];
    int ready; /* 0 untried, -1 unavailable, 1 ready */
} dev_state[MAX_DEVICES];

/* The pair of the current device (the caller's stream belongs to it), or -1. */
static int setup(void)
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

fm_status fm_cuda_pinned_copy(void *dst, const void *src, size_t bytes, int to_device, cudaStream_t stream,
                              int *used)
{
    *used = 0;
    pthread_mutex_lock(&lock);
    const int dev = setup();
    if (dev < 0) {
        pthread_mutex_unlock(&lock);
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
            if ((e = cudaMemcpyAsync((char *)dst + off, pinned[b], n, cudaMemcpyHostToDevice, stream)) != cudaSuccess ||
                (e = cudaEventRecord(done[b], stream)) != cudaSuccess)
                s = fm_cuda_status(e, "cudaMemcpyAsync (pinned staging)");
        }
        /* no wait: the events keep the buffers until their DMA is done; after a failure no event
         * may cover a queued DMA, so the stream is drained before the buffers are refilled */
        if (s != FM_OK)
            cudaStreamSynchronize(stream);
    } else {
        for (size_t c = 0; c < nchunks + 1 && s == FM_OK; c++) {
            if (c < nchunks) { /* queue chunk c, then drain chunk c - 1 while it runs */
                int b = (int)(c & 1);
                size_t off = c * CHUNK, n = bytes - off < CHUNK ? bytes - off : CHUNK;
                if ((e = cudaMemcpyAsync(pinned[b], (const char *)src + off, n, cudaMemcpyDeviceToHost, stream)) !=
                        cudaSuccess ||
                    (e = cudaEventRecord(done[b], stream)) != cudaSuccess) {
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
        if (s != FM_OK) /* leave no queued copy writing a buffer the next caller fills */
            cudaStreamSynchronize(stream);
    }
    pthread_mutex_unlock(&lock);
    return s;
}
