/* cpu_threads.c : the threads of the CPU matmul backends (cpu_matmul.h).
 * The passive pool (fm_pool_run): one job at a time; items are claimed with an atomic counter; the
 * caller works too and then waits for the workers to check out.
 * OpenBLAS's thread count is one process-wide setting. Plans that call single-threaded GEMMs from
 * the library's own threads hold a shared lock; a plan that lets OpenBLAS thread one big GEMM holds
 * it exclusively while the count is raised, so the two never run together and never oversubscribe. */
#define _POSIX_C_SOURCE 200809L
#include "blas_provider.h"
#include "cpu_matmul.h"

#include <pthread.h>
#include <stdatomic.h>

#define FM_POOL_MAX 256

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static int nworkers;
static uint64_t generation;
static int wanted;  /* workers that take part in the current job */
static int active;  /* of those, still working */
static fm_pool_fn job_fn;
static void *job_arg;
static int64_t job_items;
static atomic_llong next_item;

static void work(void)
{
    int64_t i;
    while ((i = atomic_fetch_add(&next_item, 1)) < job_items)
        job_fn(job_arg, i);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (generation == seen || id >= wanted)
            if (generation != seen) /* a job too small for this worker */
                seen = generation;
            else
                pthread_cond_wait(&wake, &lock);
        seen = generation;
        pthread_mutex_unlock(&lock);
        work();
        pthread_mutex_lock(&lock);
        if (--active == 0)
            pthread_cond_signal(&done);
    }
    return NULL;
}

int fm_pool_run(int threads, int64_t items, fm_pool_fn fn, void *arg)
{
    int helpers = threads - 1;
    if (helpers > FM_POOL_MAX)
        helpers = FM_POOL_MAX;
    if (helpers > items - 1)
        helpers = (int)(items > 0 ? items - 1 : 0);
    int rc = 0;
    pthread_mutex_lock(&job_lock);
    pthread_mutex_lock(&lock);
    while (nworkers < helpers) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&t, &attr, worker, (void *)(intptr_t)nworkers);
        pthread_attr_destroy(&attr);
        if (err != 0) {
            rc = -1;
            helpers = nworkers;
            break;
        }
        nworkers++;
    }
    job_fn = fn;
    job_arg = arg;
    job_items = items;
    atomic_store(&next_item, 0);
    wanted = helpers;
    active = helpers;
    generation++;
    if (helpers > 0)
        pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    work();
    pthread_mutex_lock(&lock);
    while (active > 0)
        pthread_cond_wait(&done, &lock);
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&job_lock);
    return rc;
}

/* ---- OpenBLAS's thread count (the chosen library's: blas_provider.c sets it to 1 once) ---- */
static pthread_rwlock_t blas_lock = PTHREAD_RWLOCK_INITIALIZER;

void fm_blas_single_begin(void) { pthread_rwlock_rdlock(&blas_lock); }

void fm_blas_single_end(void) { pthread_rwlock_unlock(&blas_lock); }

void fm_blas_threads_begin(int n)
{
    pthread_rwlock_wrlock(&blas_lock);
    fm_blas_lib.set_num_threads(n);
}

void fm_blas_threads_end(void)
{
    fm_blas_lib.set_num_threads(1);
    pthread_rwlock_unlock(&blas_lock);
}
