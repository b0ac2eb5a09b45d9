/* cuda_workspace.c : per-(device, stream) workspaces, and the cuBLASLt handle of a context. */
#include "cuda_status.h"
#include "cuda_workspace.h"

#include <stdio.h>
#include <stdlib.h>

#define FM_WS_SLOTS 64

typedef struct ws_slot {
    cudaStream_t stream;
    int device;
    void *ptr;
    size_t size;
} ws_slot;

struct fm_cuda_ws_table {
    const char *who;
    pthread_mutex_t lock;
    int nslots;
    ws_slot slots[FM_WS_SLOTS];
};

struct fm_cuda_lt_state {
    cublasLtHandle_t handle;
    size_t limit;
    fm_cuda_ws_table *ws;
};

fm_status fm_cuda_ws_table_create(const char *who, fm_cuda_ws_table **out)
{
    fm_cuda_ws_table *t = calloc(1, sizeof *t);
    if (!t)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
    t->who = who;
    pthread_mutex_init(&t->lock, NULL);
    *out = t;
    return FM_OK;
}

void fm_cuda_ws_table_destroy(fm_cuda_ws_table *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nslots; i++)
        if (t->slots[i].ptr) {
            cudaSetDevice(t->slots[i].device);
            cudaFree(t->slots[i].ptr); /* synchronizes: nothing queued still uses it */
        }
    (void)cudaGetLastError();
    pthread_mutex_destroy(&t->lock);
    free(t);
}

fm_status fm_cuda_use_device(int device)
{
    if (device == 0 && fm_cuda_probe_device_count() == 1)
        return FM_OK; /* one GPU: it is always the current one */
    int cur = -1;
    cudaError_t e = cudaGetDevice(&cur);
    if (e == cudaSuccess && cur == device)
        return FM_OK;
    return fm_cuda_status(cudaSetDevice(device), "cudaSetDevice");
}

fm_status fm_cuda_lt_state_create(fm_cuda_lt_state **out)
{
    fm_cuda_lt_state *st = calloc(1, sizeof *st);
    if (!st)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "cublaslt: out of host memory");
    cublasStatus_t s = cublasLtCreate(&st->handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(st);
        return fm_fail(FM_ERR_UNAVAILABLE, "cublasLtCreate: %s", cublasLtGetStatusName(s));
    }
    st->limit = (size_t)32 << 20;
    const char *env = getenv("FUSEMATH_CUDA_WORKSPACE_MB");
    if (env && *env) {
        char *end;
        long long mb = strtoll(env, &end, 10);
        if (*end == '\0' && mb >= 0 && mb <= (1LL << 20))
            st->limit = (size_t)mb << 20;
    }
    fm_status fs = fm_cuda_ws_table_create("cublaslt", &st->ws);
    if (fs != FM_OK) {
        cublasLtDestroy(st->handle);
        free(st);
        return fs;
    }
    *out = st;
    return FM_OK;
}

void fm_cuda_lt_state_destroy(fm_cuda_lt_state *st)
{
    if (!st)
        return;
    fm_cuda_ws_table_destroy(st->ws);
    cublasLtDestroy(st->handle);
    free(st);
}

cublasLtHandle_t fm_cuda_lt_handle(const fm_cuda_lt_state *st) { return st->handle; }
size_t fm_cuda_lt_workspace_limit(const fm_cuda_lt_state *st) { return st->limit; }

fm_status fm_cuda_lt_workspace(fm_cuda_lt_state *st, int device, cudaStream_t stream, size_t bytes, void **ws)
{
    return fm_cuda_ws_get(st->ws, device, stream, bytes, ws);
}

fm_status fm_cuda_ws_get(fm_cuda_ws_table *st, int device, cudaStream_t stream, size_t bytes, void **ws)
{
    fm_status s = FM_OK;
    pthread_mutex_lock(&st->lock);
    ws_slot *slot = NULL;
    for (int i = 0; i < st->nslots; i++)
        if (st->slots[i].stream == stream && st->slots[i].device == device) {
            slot = &st->slots[i];
            break;
        }
    if (slot && slot->size >= bytes) {
        *ws = slot->ptr;
        pthread_mutex_unlock(&st->lock);
        return FM_OK;
    }
    if (!slot && st->nslots == FM_WS_SLOTS) {
        pthread_mutex_unlock(&st->lock);
        return fm_fail(FM_ERR_UNAVAILABLE, "%s: more than %d streams in use on one context; use fewer streams "
                       "or one context per group of streams", st->who, FM_WS_SLOTS);
    }
    if (!slot) {
        slot = &st->slots[st->nslots++];
        *slot = (ws_slot){stream, device, NULL, 0};
    }
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes; /* grow in useful steps */
    void *p = NULL;
    cudaError_t e = cudaMallocAsync(&p, want, stream);
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "cudaMallocAsync (%s workspace of %zu bytes)", st->who, want);
        s = fm_cuda_status(e, what);
    } else {
        if (slot->ptr)
            cudaFreeAsync(slot->ptr, stream); /* ordered after the work already queued on it */
        slot->ptr = p;
        slot->size = want;
        *ws = p;
    }
    pthread_mutex_unlock(&st->lock);
    return s;
}
