/* host_scratch.c : large host scratch buffers kept for reuse between executes (fresh pages per
 * call, mmap + first-touch faults + munmap, cost a chained FFT 1.88x against 1.17x). Freed
 * buffers of at least SCRATCH_MIN_BYTES go into a small process-wide cache (SCRATCH_SLOTS,
 * SCRATCH_MAX_TOTAL bytes); fm_host_scratch_trim() frees them (the last context's destroy).
 * 64-byte aligned. A request takes first a buffer its own thread returned: another core's
 * buffer sits in that core's L2. */
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define SCRATCH_MIN_BYTES ((size_t)256 << 10)   /* smaller ones come cheaply from malloc's heap */
#define SCRATCH_MAX_TOTAL ((size_t)512 << 20)   /* bytes kept idle at most */
#define SCRATCH_SLOTS 32
#define HEADER 64 /* the capacity lives in front of the buffer, keeping it 64-byte aligned */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *base;
    size_t capacity;
    uint64_t stamp; /* when it was put back: the oldest goes first */
    uint64_t owner; /* the thread that put it back (this_thread()) */
} slots[SCRATCH_SLOTS];
static size_t total;
static uint64_t clock_;

/* A number for the calling thread, unique for the process's life (0 is never handed out). */
static uint64_t this_thread(void)
{
    static atomic_uint_fast64_t next = 1;
    static _Thread_local uint64_t me;
    if (!me)
        me = (uint64_t)atomic_fetch_add(&next, 1);
    return me;
}

static void *user_of(char *base) { return base + HEADER; }
static char *base_of(void *p) { return (char *)p - HEADER; }

void *fm_host_scratch_alloc(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes > SIZE_MAX - HEADER - 4096)
        return NULL;
    if (bytes >= SCRATCH_MIN_BYTES) {
        /* the smallest cached buffer that fits, unless it is more than twice the request; one
         * this thread returned before any other */
        const uint64_t me = this_thread();
        pthread_mutex_lock(&lock);
        int best = -1, mine = 0;
        for (int i = 0; i < SCRATCH_SLOTS; i++) {
            if (!slots[i].base || slots[i].capacity < bytes || slots[i].capacity / 2 > bytes)
                continue;
            const int own = slots[i].owner == me;
            if (best < 0 || own > mine || (own == mine && slots[i].capacity < slots[best].capacity))
                best = i, mine = own;
        }
        char *base = NULL;
        if (best >= 0) {
            base = slots[best].base;
            total -= slots[best].capacity;
            slots[best].base = NULL;
        }
        pthread_mutex_unlock(&lock);
        if (base)
            return user_of(base);
        bytes = (bytes + 4095) & ~(size_t)4095; /* page multiples: more requests fit a kept buffer */
    }
    char *base = fm_malloc_aligned(bytes + HEADER, 64);
    if (!base)
        return NULL;
    *(size_t *)base = bytes;
    return user_of(base);
}

void fm_host_scratch_free(void *p)
{
    if (!p)
        return;
    char *base = base_of(p), *drop = NULL;
    const size_t capacity = *(size_t *)base;
    if (capacity < SCRATCH_MIN_BYTES || capacity > SCRATCH_MAX_TOTAL) {
        fm_free_aligned(base);
        return;
    }
    const uint64_t me = this_thread();
    pthread_mutex_lock(&lock);
    /* room: evict the oldest buffers until this one fits the slots and the byte budget */
    for (;;) {
        int free_slot = -1, oldest = -1;
        for (int i = 0; i < SCRATCH_SLOTS; i++) {
            if (!slots[i].base)
                free_slot = free_slot < 0 ? i : free_slot;
            else if (oldest < 0 || slots[i].stamp < slots[oldest].stamp)
                oldest = i;
        }
        if (free_slot >= 0 && total + capacity <= SCRATCH_MAX_TOTAL) {
            slots[free_slot].base = base;
            slots[free_slot].capacity = capacity;
            slots[free_slot].stamp = ++clock_;
            slots[free_slot].owner = me;
            total += capacity;
            break;
        }
        if (oldest < 0) { /* nothing to evict: cannot happen while capacity <= the budget */
            drop = base;
            break;
        }
        fm_free_aligned(slots[oldest].base);
        total -= slots[oldest].capacity;
        slots[oldest].base = NULL;
    }
    pthread_mutex_unlock(&lock);
    fm_free_aligned(drop);
}

void fm_host_scratch_trim(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < SCRATCH_SLOTS; i++) {
        fm_free_aligned(slots[i].base);
        slots[i].base = NULL;
    }
    total = 0;
    pthread_mutex_unlock(&lock);
}
