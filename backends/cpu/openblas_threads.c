/* openblas_threads.c : OpenBLAS's thread count is one process-wide setting. Plans
 * that call single-threaded GEMMs from the library's own threads hold a shared
 * lock; a plan that lets OpenBLAS thread one big GEMM holds it exclusively while
 * the count is raised, so the two never run together and never oversubscribe.
 *
 * With an OpenBLAS that has the threads callback (scipy-openblas, 0.3.28+), its
 * threaded calls hand their jobs to fusemath's pool instead of OpenBLAS's own
 * workers, which spin for ~0.1 s after every call: the epilogue pass that follows
 * the GEMM then runs on the same, already awake threads and shares no core with
 * spinning ones. */
#define _POSIX_C_SOURCE 200809L
#include "openblas_threads.h"

#include <pthread.h>
#include <stddef.h>

#include "blas_api.h"
#include "cpu_pool.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;

#ifdef FM_BLAS_HAS_THREADS_CALLBACK
typedef struct blas_jobs {
    openblas_dojob_callback dojob;
    char *jobdata;
    size_t elsize;
    int dojob_data;
} blas_jobs;

static void run_blas_job(void *arg, int64_t i)
{
    blas_jobs *j = arg;
    j->dojob((int)i, j->jobdata + (size_t)i * j->elsize, j->dojob_data);
}

/* OpenBLAS's level-3 jobs wait for one another's packed panels by spinning, so each
 * needs a thread of its own: fm_pool_run gives every item its own thread when the
 * pool holds numjobs - 1 workers, which fm_pool_reserve made sure of when the
 * blas-threads plan was made (the thread count of that plan caps numjobs). */
static void pool_callback(int sync, openblas_dojob_callback dojob, int numjobs, size_t elsize, void *jobdata,
                          int dojob_data)
{
    (void)sync; /* fm_pool_run returns when every job is done, which also serves sync = 0 */
    blas_jobs j = {dojob, jobdata, elsize, dojob_data};
    fm_pool_run(numjobs, numjobs, run_blas_job, &j);
}
#endif

static void init_once(void)
{
#ifdef FM_BLAS_HAS_THREADS_CALLBACK
    fm_blas_set_threads_callback(pool_callback);
#endif
    fm_blas_set_num_threads(1);
}

void fm_blas_threads_init(void) { pthread_once(&once, init_once); }

int fm_blas_threads_on_pool(void)
{
#ifdef FM_BLAS_HAS_THREADS_CALLBACK
    return 1;
#else
    return 0;
#endif
}

void fm_blas_single_begin(void) { pthread_rwlock_rdlock(&lock); }

void fm_blas_single_end(void) { pthread_rwlock_unlock(&lock); }

void fm_blas_threads_begin(int n)
{
    pthread_rwlock_wrlock(&lock);
    fm_blas_set_num_threads(n);
}

void fm_blas_threads_end(void)
{
    fm_blas_set_num_threads(1);
    pthread_rwlock_unlock(&lock);
}
