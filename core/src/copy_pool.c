/* copy_pool.c : the context's staging threads (copy_pool.h). FUSEMATH_PIPELINE_THREADS persistent
 * threads, started when the first pipelined call needs them and joined when the context goes, take
 * parts of copies from one FIFO queue: a chunk's fill is queued before the drain of an earlier chunk,
 * so the copy on the critical path (the fill the next DMA waits for) goes first and the drain follows
 * on every thread while the GPU copies and computes. No CUDA call is made here: the threads only
 * memcpy; the pipeline's own thread waits on the GPU's events. Several calls (plans of any thread)
 * may share the queue: a job counts only its own parts. */
#define _POSIX_C_SOURCE 200809L /* getpid under -std=c11 */
#include "context.h"
#include "copy_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fm_copy_pool {
    pthread_mutex_t lock;
    pthread_cond_t work; /* parts queued, or stop */
    pthread_cond_t done; /* some job's last part finished */
    fm_copy_part *head, *tail;
    int stop;
    int busy; /* parts queued or being copied */
    int nthreads;
    pid_t pid; /* the process that started the threads: a forked child has none of them */
    pthread_t thread[FM_MAX_PIPELINE_THREADS];
};

void fm_copy_job_init(fm_copy_job *job)
{
    job->pending = 0;
    job->used = 0;
}

/* Under the lock: the first queued part (of job, when job is non-NULL), unlinked; NULL none. */
static fm_copy_part *take(fm_copy_pool *pl, const fm_copy_job *job)
{
    fm_copy_part **at = &pl->head, *prev = NULL;
    while (*at && job && (*at)->job != job) {
        prev = *at;
        at = &(*at)->next;
    }
    fm_copy_part *p = *at;
    if (!p)
        return NULL;
    *at = p->next;
    if (pl->tail == p)
        pl->tail = prev;
    return p;
}

/* Under the lock: part p done. */
static void finish(fm_copy_pool *pl, fm_copy_part *p)
{
    pl->busy--;
    if (--p->job->pending == 0)
        pthread_cond_broadcast(&pl->done);
}

static void *worker(void *arg)
{
    fm_copy_pool *pl = arg;
    pthread_mutex_lock(&pl->lock);
    for (;;) {
        fm_copy_part *p;
        while (!(p = take(pl, NULL)) && !pl->stop)
            pthread_cond_wait(&pl->work, &pl->lock);
        if (!p)
            break; /* stop, and the queue is empty */
        pthread_mutex_unlock(&pl->lock);
        memcpy(p->dst, p->src, p->n);
        pthread_mutex_lock(&pl->lock);
        finish(pl, p);
    }
    pthread_mutex_unlock(&pl->lock);
    return NULL;
}

static void pool_stop(fm_copy_pool *pl)
{
    pthread_mutex_lock(&pl->lock);
    pl->stop = 1;
    pthread_cond_broadcast(&pl->work);
    pthread_mutex_unlock(&pl->lock);
    for (int i = 0; i < pl->nthreads; i++)
        pthread_join(pl->thread[i], NULL);
    pthread_cond_destroy(&pl->work);
    pthread_cond_destroy(&pl->done);
    pthread_mutex_destroy(&pl->lock);
    free(pl);
}

static fm_copy_pool *pool_start(int threads)
{
    fm_copy_pool *pl = calloc(1, sizeof *pl);
    if (!pl)
        return NULL;
    pthread_mutex_init(&pl->lock, NULL);
    pthread_cond_init(&pl->work, NULL);
    pthread_cond_init(&pl->done, NULL);
    pl->pid = getpid();
    if (threads > FM_MAX_PIPELINE_THREADS)
        threads = FM_MAX_PIPELINE_THREADS;
    while (pl->nthreads < threads && pthread_create(&pl->thread[pl->nthreads], NULL, worker, pl) == 0)
        pl->nthreads++;
    if (pl->nthreads == 0) { /* none would start: the callers copy themselves */
        pool_stop(pl);
        return NULL;
    }
    return pl;
}

fm_copy_pool *fm_context_copy_pool(fm_context *ctx)
{
    fm_copy_pool *pl = atomic_load(&ctx->copy_pool);
    if (pl && pl->pid != getpid())
        return NULL; /* a forked child: the parent's threads are not here (its lock may be held): copy here */
    if (pl || atomic_load(&ctx->copy_pool_failed))
        return pl;
    pthread_mutex_lock(&ctx->lock);
    if (!(pl = atomic_load(&ctx->copy_pool)) && !atomic_load(&ctx->copy_pool_failed)) {
        pl = pool_start(ctx->settings.pipeline_threads);
        if (pl)
            atomic_store(&ctx->copy_pool, pl);
        else
            atomic_store(&ctx->copy_pool_failed, 1);
    }
    pthread_mutex_unlock(&ctx->lock);
    return pl;
}

int fm_copy_pool_threads(const fm_copy_pool *pool) { return pool ? pool->nthreads : 0; }

int fm_copy_pool_busy(fm_copy_pool *pool)
{
    if (!pool)
        return 0;
    pthread_mutex_lock(&pool->lock);
    const int n = pool->busy;
    pthread_mutex_unlock(&pool->lock);
    return n;
}

void fm_copy_submit(fm_copy_pool *pool, fm_copy_job *job, void *dst, const void *src, size_t n)
{
    size_t parts = pool ? (size_t)pool->nthreads : 1;
    if (parts > n / FM_COPY_MIN_PART)
        parts = n / FM_COPY_MIN_PART;
    if (parts > (size_t)(FM_COPY_JOB_PARTS - job->used))
        parts = (size_t)(FM_COPY_JOB_PARTS - job->used);
    if (!pool || parts < 1 || n == 0) {
        if (n)
            memcpy(dst, src, n);
        return;
    }
    /* parts of the ceiling of n / parts bytes, rounded up to a cache line (the last one shorter) */
    const size_t size = ((n + parts - 1) / parts + 63) & ~(size_t)63;
    pthread_mutex_lock(&pool->lock);
    for (size_t lo = 0; lo < n; lo += size) {
        fm_copy_part *p = &job->part[job->used++];
        *p = (fm_copy_part){NULL, job, (char *)dst + lo, (const char *)src + lo, n - lo < size ? n - lo : size};
        job->pending++;
        pool->busy++;
        if (pool->tail)
            pool->tail->next = p;
        else
            pool->head = p;
        pool->tail = p;
    }
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
}

void fm_copy_wait(fm_copy_pool *pool, fm_copy_job *job)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->lock);
    while (job->pending > 0) {
        fm_copy_part *p = take(pool, job); /* a part no thread has taken yet: move it here */
        if (!p) {
            pthread_cond_wait(&pool->done, &pool->lock);
            continue;
        }
        pthread_mutex_unlock(&pool->lock);
        memcpy(p->dst, p->src, p->n);
        pthread_mutex_lock(&pool->lock);
        finish(pool, p);
    }
    pthread_mutex_unlock(&pool->lock);
}

void fm_context_copy_pool_free(fm_context *ctx)
{
    fm_copy_pool *pl = atomic_exchange(&ctx->copy_pool, NULL);
    if (pl && pl->pid != getpid())
        return; /* a forked child: joining the parent's threads would wait forever; its copy is left */
    if (pl)
        pool_stop(pl);
}
