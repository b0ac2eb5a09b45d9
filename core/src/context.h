/* context.h : the context's layout, private to core/. */
#ifndef FM_CONTEXT_H
#define FM_CONTEXT_H

#include "internal.h"

#define FM_MAX_BACKENDS 16
#define FM_CACHE_MAX_PLANS 1024

typedef struct fm_backend_slot {
    const fm_backend *backend;
    void *state;
    int available;
    char why[FM_WHY_LEN];
} fm_backend_slot;

typedef struct fm_cache_entry {
    uint64_t hash;
    fm_plan *plan;
    struct fm_cache_entry *next;            /* bucket chain */
    struct fm_cache_entry *older, *newer;   /* insertion order, for eviction */
} fm_cache_entry;

typedef struct fm_plan_cache {
    fm_cache_entry **buckets;
    size_t nbuckets;
    atomic_int count; /* written under the context's lock; atomic for fm_context_cache_size */
    _Atomic int64_t bytes; /* the cached plans' footprints; likewise */
    fm_cache_entry *oldest, *newest;
} fm_plan_cache;

struct fm_context {
    atomic_int refcount; /* the user's reference + one per live plan */
    pthread_mutex_t lock; /* guards the cache and registration */
    atomic_int num_threads;
    fm_settings settings; /* the environment, read at creation; settings.num_threads is the default */
    int nbackends;
    fm_backend_slot backends[FM_MAX_BACKENDS]; /* in registration order */
    int order[FM_MAX_BACKENDS]; /* the indices by descending priority (registration order breaks ties) */
    fm_plan_cache cache;
    fm_log_sink log_sink; /* NULL: FUSEMATH_LOG lines go to stderr */
    void *log_user;
    struct fm_wisdom_entry *wisdom; /* guarded by lock */
    atomic_int nwisdom;             /* written under lock; atomic for fm_wisdom_lookup's unlocked peek */
    int capwisdom;
    _Atomic(struct fm_profile *) profile; /* FM_EXECUTION_BEST's model; NULL: the built-in one (profile.c) */
    struct fm_profile *profile_retired;   /* earlier profiles, freed with the context; guarded by lock */
    char profile_note[256];               /* why a profile file was ignored ("" none); guarded by lock */
    /* pipelined transfers' streams, events and pinned buffers per GPU (core/src/pipeline.c): made on
     * first use under lock, freed with the context */
    struct fm_pipeline_pool *pipeline_pools[16];
    /* the staging threads the pipelines' host copies run on (core/src/copy_pool.c): started on first
     * use under lock, joined with the context; copy_pool_failed: none would start, callers copy */
    _Atomic(struct fm_copy_pool *) copy_pool;
    atomic_int copy_pool_failed;
    /* split execution's worker thread (core/src/split.c): made on first use under lock, joined with the
     * context */
    struct fm_split_worker *split_worker;
};

void fm_context_retain_(fm_context *ctx);
void fm_context_release_(fm_context *ctx);

#endif
