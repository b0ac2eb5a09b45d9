/* openblas_threads.c : OpenBLAS's thread count is one process-wide setting. Plans
 * that call single-threaded GEMMs from the library's own threads hold a shared
 * lock; a plan that lets OpenBLAS thread one big GEMM holds it exclusively while
 * the count is raised, so the two never run together and never oversubscribe. */
#define _POSIX_C_SOURCE 200809L
#include "cpu_matmul.h"

#include <pthread.h>

void openblas_set_num_threads(int num_threads);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;

static void set_single(void) { openblas_set_num_threads(1); }

void fm_blas_threads_init(void) { pthread_once(&once, set_single); }

void fm_blas_single_begin(void) { pthread_rwlock_rdlock(&lock); }

void fm_blas_single_end(void) { pthread_rwlock_unlock(&lock); }

void fm_blas_threads_begin(int n)
{
    pthread_rwlock_wrlock(&lock);
    openblas_set_num_threads(n);
}

void fm_blas_threads_end(void)
{
    openblas_set_num_threads(1);
    pthread_rwlock_unlock(&lock);
}
