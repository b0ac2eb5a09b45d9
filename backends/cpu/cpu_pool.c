/* cpu_pool.c : the passive thread pool (fm_pool_run, cpu_matmul.h). One job at a time; items are
 * claimed with an atomic counter; the caller works too and then waits for the workers to check out. */
#define _POSIX_C_SOURCE 200809L
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
