/* stand_in_gpu.h : a GPU for tests of the pipelined and split drivers on a machine without one
 * (fm_pipeline_test_device): its memory is host memory, its streams and events complete at once, and
 * counters say what is live, so a test sees every stream, event and buffer freed. Header-only: each
 * test that includes it gets its own copy of the counters. */
#ifndef FM_TEST_STAND_IN_GPU_H
#define FM_TEST_STAND_IN_GPU_H

#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_int live_device, live_pinned, streams, events, copies_async;
/* > 0: the fail_countdown-th copy_async or event_sync from now fails (each call counts it down) */
static atomic_int fail_countdown;

static int injected_failure(void)
{
    int n = atomic_load(&fail_countdown);
    while (n > 0 && !atomic_compare_exchange_weak(&fail_countdown, &n, n - 1))
        ;
    return n == 1;
}

static fm_status f_alloc(int id, size_t bytes, void *stream, void **p)
{
    *p = malloc(bytes ? bytes : 1);
    atomic_fetch_add(&live_device, 1);
    return *p ? FM_OK : FM_ERR_OUT_OF_MEMORY;
}
static void f_free(int id, void *p, void *stream)
{
    free(p);
    atomic_fetch_sub(&live_device, 1);
}
static fm_status f_copy(void *dst, fm_device dd, const void *src, fm_device sd, size_t n, void *stream, int wait)
{
    memcpy(dst, src, n);
    return FM_OK;
}
static fm_status f_copy_async(void *dst, const void *src, size_t n, void *stream)
{
    if (injected_failure())
        return fm_fail(FM_ERR_INTERNAL, "stand-in GPU: injected copy_async failure");
    memcpy(dst, src, n);
    atomic_fetch_add(&copies_async, 1);
    return FM_OK;
}
static int token;
static fm_status f_stream_create(int id, void **s)
{
    atomic_fetch_add(&streams, 1);
    *s = &token;
    return FM_OK;
}
static void f_stream_destroy(void *s) { atomic_fetch_sub(&streams, 1); }
static fm_status f_ok1(void *x) { return FM_OK; }
static fm_status f_ok2(void *x, void *y) { return FM_OK; }
static fm_status f_event_sync(void *e)
{
    return injected_failure() ? fm_fail(FM_ERR_INTERNAL, "stand-in GPU: injected event_sync failure") : FM_OK;
}
static fm_status f_event_create(int id, void **e)
{
    atomic_fetch_add(&events, 1);
    *e = &token;
    return FM_OK;
}
static void f_event_destroy(void *e) { atomic_fetch_sub(&events, 1); }
static fm_status f_pinned(size_t n, void **p)
{
    if (!(*p = malloc(n)))
        return FM_ERR_OUT_OF_MEMORY;
    atomic_fetch_add(&live_pinned, 1);
    memset(*p, 0x5a, n); /* stale bytes: a chunk read before it was filled shows */
    return FM_OK;
}
static void f_pinned_free(void *p)
{
    free(p);
    atomic_fetch_sub(&live_pinned, 1);
}

static const fm_device_ops stand_in_gpu = {.device = FM_DEVICE_CUDA, .alloc = f_alloc, .free = f_free, .copy = f_copy,
                                       .stream_create = f_stream_create, .stream_destroy = f_stream_destroy,
                                       .stream_sync = f_ok1, .event_create = f_event_create,
                                       .event_destroy = f_event_destroy, .event_record = f_ok2,
                                       .stream_wait_event = f_ok2, .event_sync = f_event_sync,
                                       .host_alloc_pinned = f_pinned, .host_free_pinned = f_pinned_free,
                                       .copy_async = f_copy_async};

#endif
