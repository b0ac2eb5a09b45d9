/* cuda_workspace.c : per-(device, stream) workspaces; making a device current. */
#include "cuda_workspace.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FM_WS_SLOTS 64

/* One buffer per (device, stream). `use` is held by the lease holder from fm_cuda_ws_acquire
 * until its kernels are queued (fm_cuda_ws_release): two threads enqueuing on one stream (the
 * legacy default stream, a stream shared between threads) would otherwise interleave their
 * kernels on the buffer, or one would free it (to grow it) under the other's queued work. */
struct ws_slot {
    unsigned long long key; /* the stream's id (cudaStreamGetId): unique for the process's life */
    int device;
    struct fm_cuda_ws_table *owner; /* for fm_cuda_ws_release, which gets the slot only */
    int users;        /* leases held or waited for: never evicted while > 0 (table lock) */
    uint64_t last_use; /* for eviction, least recently used first (table lock) */
    pthread_mutex_t use;
    void *ptr;        /* buffer and size: only the lease holder touches them */
    size_t size;
};

struct fm_cuda_ws_table {
    const char *who;
    pthread_mutex_t lock;
    int nslots;
    uint64_t clock;
    ws_slot slots[FM_WS_SLOTS];
};

/* Free a slot's buffer, whatever stream may still be using it: the device's queued work is
 * waited for first (the stream may be gone, so nothing can be ordered on it). The calling
 * thread's current device is kept. */
static void free_slot_buffer(ws_slot *sl)
{
    if (!sl->ptr)
        return;
    int cur = -1;
    int switched = cudaGetDevice(&cur) == cudaSuccess && cur != sl->device && cudaSetDevice(sl->device) == cudaSuccess;
    cudaDeviceSynchronize();
    cudaFree(sl->ptr);
    if (switched)
        cudaSetDevice(cur);
    (void)cudaGetLastError();
    sl->ptr = NULL;
    sl->size = 0;
}

void fm_cuda_ws_table_destroy(fm_cuda_ws_table *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nslots; i++) /* all leases were released: no execute runs on a dying context */
        free_slot_buffer(&t->slots[i]);
    for (int i = 0; i < FM_WS_SLOTS; i++)
        pthread_mutex_destroy(&t->slots[i].use);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

fm_status fm_cuda_use_device(int device)
{
    /* cudaGetDevice answers 0 in a thread that never made a context current, and the libraries'
     * launches on the legacy default stream (handle 0) then fail (cuBLASLt: EXECUTION_FAILED in
     * every thread but the first, measured on the H200): each thread calls cudaSetDevice once
     * (and again whenever the device differs), which makes the primary context current. */
    static _Thread_local int made_current = -1;
    if (device == made_current) {
        if (fm_cuda_probe_device_count() == 1)
            return FM_OK; /* one GPU, made current in this thread: it still is */
        int cur = -1;
        if (cudaGetDevice(&cur) == cudaSuccess && cur == device)
            return FM_OK;
    }
    fm_status s = fm_cuda_status(cudaSetDevice(device), "cudaSetDevice");
    made_current = s == FM_OK ? device : -1;
    return s;
}

fm_status fm_cuda_ws_probe(const char *who, void **ws, const char **why)
{
    if (fm_cuda_probe_device_count() == 0) {
        *why = "no CUDA device (no GPU or no driver)";
        return FM_ERR_UNAVAILABLE;
    }
    fm_cuda_ws_table *t = calloc(1, sizeof *t);
    if (!t) {
        *why = "out of host memory";
        return FM_ERR_UNAVAILABLE;
    }
    t->who = who;
    pthread_mutex_init(&t->lock, NULL);
    for (int i = 0; i < FM_WS_SLOTS; i++) {
        pthread_mutex_init(&t->slots[i].use, NULL);
        t->slots[i].owner = t;
    }
    *ws = t;
    return FM_OK;
}

fm_status fm_cuda_ws_acquire(fm_cuda_ws_table *t, int device, cudaStream_t stream, size_t bytes, void **ws,
                             fm_cuda_ws_lease *lease)
{
    *ws = NULL;
    *lease = NULL;
    /* The key of a stream: its id. The handle value is no key: cudaStreamPerThread (0x2) names a
     * different stream in every thread, and a destroyed stream's handle can come back for a new
     * stream while the old one's work still runs. */
    unsigned long long key = 0;
    if (cudaStreamGetId(stream, &key) != cudaSuccess) {
        (void)cudaGetLastError();
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: the stream %p is not a valid CUDA stream", t->who, (void *)stream);
    }
    pthread_mutex_lock(&t->lock);
    ws_slot *sl = NULL;
    for (int i = 0; i < t->nslots && !sl; i++)
        if (t->slots[i].key == key && t->slots[i].device == device)
            sl = &t->slots[i];
    if (!sl && t->nslots < FM_WS_SLOTS) {
        sl = &t->slots[t->nslots++];
    } else if (!sl) { /* full: the least recently used idle slot goes (its stream may be long gone) */
        for (int i = 0; i < t->nslots; i++)
            if (t->slots[i].users == 0 && (!sl || t->slots[i].last_use < sl->last_use))
                sl = &t->slots[i];
        if (!sl) {
            pthread_mutex_unlock(&t->lock);
            return fm_fail(FM_ERR_UNAVAILABLE, "%s: %d streams are executing on one context at this moment; use "
                           "fewer at once or one context per group of streams", t->who, FM_WS_SLOTS);
        }
        free_slot_buffer(sl);
    }
    sl->key = key;
    sl->device = device;
    sl->users++;
    sl->last_use = ++t->clock;
    pthread_mutex_unlock(&t->lock);

    pthread_mutex_lock(&sl->use);
    fm_status s = FM_OK;
    if (sl->size < bytes) {
        size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes; /* grow in useful steps */
        void *p = NULL;
        cudaError_t e = cudaMallocAsync(&p, want, stream);
        if (e != cudaSuccess) {
            char what[96];
            snprintf(what, sizeof what, "cudaMallocAsync (%s workspace of %zu bytes)", t->who, want);
            s = fm_cuda_status(e, what);
        } else {
            if (sl->ptr)
                cudaFreeAsync(sl->ptr, stream); /* ordered after the work already queued with it */
            sl->ptr = p;
            sl->size = want;
        }
    }
    if (s != FM_OK) {
        fm_cuda_ws_release(sl);
        return s;
    }
    *ws = sl->ptr;
    *lease = sl;
    return FM_OK;
}

void fm_cuda_ws_release(fm_cuda_ws_lease lease)
{
    if (!lease)
        return;
    ws_slot *sl = lease;
    pthread_mutex_unlock(&sl->use);
    fm_cuda_ws_table *t = sl->owner; /* its lock: eviction reads users */
    pthread_mutex_lock(&t->lock);
    sl->users--;
    pthread_mutex_unlock(&t->lock);
}
