/* cpu_pool.c : see cpu_pool.h. One job at a time; items are claimed with an atomic
 * counter; the caller works too and then waits for the workers to check out.
 * Workers, and the caller waiting for them, spin for SPIN_NS before they sleep:
 * OpenBLAS's GEMM jobs (through its threads callback) and the epilogue pass after
 * them follow one another within microseconds, and a futex wake-up per worker per
 * job cost 3-4% of a 1024^3 f64 product on a 16-core host
 * (benchmarks/openblas_callback_probe.c). */
#define _POSIX_C_SOURCE 200809L
#include "cpu_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define FM_POOL_MAX 256
#define SPIN_NS 200000

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static int nworkers;
static atomic_ullong generation; /* written under lock; spinning threads read it without */
static int wanted;               /* workers that take part in the current job */
static atomic_int active;        /* of those, still working */
static fm_pool_fn job_fn;
static void *job_arg;
static int64_t job_items;
static atomic_llong next_item;

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void work(void)
{
    int64_t i;
    while ((i = atomic_fetch_add(&next_item, 1)) < job_items)
        job_fn(job_arg, i);
}

/* Spin until the generation moves on from `seen` or SPIN_NS have passed. */
static void spin_for_job(unsigned long long seen)
{
    const int64_t t0 = now_ns();
    for (unsigned i = 1; atomic_load_explicit(&generation, memory_order_acquire) == seen; i++) {
        if ((i & 255) == 0 && now_ns() - t0 > SPIN_NS)
            return;
        relax();
    }
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    unsigned long long seen = 0;
    for (;;) {
        spin_for_job(seen);
        pthread_mutex_lock(&lock);
        while (atomic_load(&generation) == seen || id >= wanted)
            if (atomic_load(&generation) != seen) /* a job too small for this worker */
                seen = atomic_load(&generation);
            else
                pthread_cond_wait(&wake, &lock);
        seen = atomic_load(&generation);
        pthread_mutex_unlock(&lock);
        work();
        if (atomic_fetch_sub(&active, 1) == 1) {
            pthread_mutex_lock(&lock);
            pthread_cond_signal(&done);
            pthread_mutex_unlock(&lock);
        }
    }
    return NULL;
}

/* Start workers up to `helpers` (lock held). 0, or -1 when a thread was refused. */
static int grow(int helpers)
{
    while (nworkers < helpers) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&t, &attr, worker, (void *)(intptr_t)nworkers);
        pthread_attr_destroy(&attr);
        if (err != 0)
            return -1;
        nworkers++;
    }
    return 0;
}

int fm_pool_reserve(int threads)
{
    int helpers = threads - 1 > FM_POOL_MAX ? FM_POOL_MAX : threads - 1;
    pthread_mutex_lock(&lock);
    int rc = grow(helpers);
    pthread_mutex_unlock(&lock);
    return threads - 1 > FM_POOL_MAX ? -1 : rc;
}

int fm_pool_run(int threads, int64_t items, fm_pool_fn fn, void *arg)
{
    int helpers = threads - 1;
    if (helpers > FM_POOL_MAX)
        helpers = FM_POOL_MAX;
    if (helpers > items - 1)
        helpers = (int)(items > 0 ? items - 1 : 0);
    pthread_mutex_lock(&job_lock);
    pthread_mutex_lock(&lock);
    int rc = grow(helpers);
    if (rc != 0)
        helpers = nworkers;
    job_fn = fn;
    job_arg = arg;
    job_items = items;
    atomic_store(&next_item, 0);
    wanted = helpers;
    atomic_store(&active, helpers);
    atomic_fetch_add_explicit(&generation, 1, memory_order_release);
    if (helpers > 0)
        pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    work();
    const int64_t t0 = now_ns();
    for (unsigned i = 1; atomic_load_explicit(&active, memory_order_acquire) > 0; i++) {
        if ((i & 255) == 0 && now_ns() - t0 > SPIN_NS) {
            pthread_mutex_lock(&lock);
            while (atomic_load(&active) > 0)
                pthread_cond_wait(&done, &lock);
            pthread_mutex_unlock(&lock);
            break;
        }
        relax();
    }
    pthread_mutex_unlock(&job_lock);
    return rc;
}
