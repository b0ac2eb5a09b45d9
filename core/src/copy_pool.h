/* copy_pool.h : the context's staging threads (core/src/copy_pool.c). Pipelined transfers hand them
 * the copies between pageable and pinned host memory (a chunk's fill, an earlier chunk's drain), each
 * copy cut into parts that several threads move at once, so that the host copies, not one thread's
 * memcpy, set the pace and the caller's thread stays free to queue the GPU's work. */
#ifndef FM_COPY_POOL_H
#define FM_COPY_POOL_H

#include "internal.h"

#define FM_COPY_JOB_PARTS 64 /* parts one job holds (a copy past them runs on the submitting thread) */

typedef struct fm_copy_pool fm_copy_pool;

/* One part of a copy; the queue links them. */
typedef struct fm_copy_part {
    struct fm_copy_part *next;
    struct fm_copy_job *job;
    void *dst;
    const void *src;
    size_t n;
} fm_copy_part;

/* A group of copies waited for together, on its submitter's stack: fm_copy_job_init, any number of
 * fm_copy_submit, one fm_copy_wait before it goes out of scope (also after an error: parts in flight
 * still read and write the buffers). */
typedef struct fm_copy_job {
    int pending; /* parts queued or running; guarded by the pool's lock */
    int used;
    fm_copy_part part[FM_COPY_JOB_PARTS];
} fm_copy_job;

void fm_copy_job_init(fm_copy_job *job);
/* ctx's pool, its threads started on first use (FUSEMATH_PIPELINE_THREADS of them); NULL when none
 * could be started (copies then run on the caller: slower, never wrong). */
fm_copy_pool *fm_context_copy_pool(fm_context *ctx);
/* Copy n bytes src -> dst as part of job: cut into up to the pool's thread count of parts (no part
 * under FM_COPY_MIN_PART), queued; pool NULL or the job's parts used up: copied here, now. */
void fm_copy_submit(fm_copy_pool *pool, fm_copy_job *job, void *dst, const void *src, size_t n);
/* Until every part of job is done; the caller moves parts of job still queued itself meanwhile. */
void fm_copy_wait(fm_copy_pool *pool, fm_copy_job *job);
int fm_copy_pool_threads(const fm_copy_pool *pool);
/* Parts queued or being copied now, from every submitter (tests: 0 once a call has returned). */
int fm_copy_pool_busy(fm_copy_pool *pool);
/* The context's pool: threads joined (called at context release, with no copy in flight). */
void fm_context_copy_pool_free(fm_context *ctx);

#define FM_COPY_MIN_PART ((size_t)64 << 10)

#endif
