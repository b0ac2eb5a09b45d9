/* cpu_pool.h : a small process-wide pool of threads that spin briefly, then sleep,
 * between jobs. */
#ifndef FM_CPU_POOL_H
#define FM_CPU_POOL_H

#include <stdint.h>

typedef void (*fm_pool_fn)(void *arg, int64_t item);

/* Run fn(arg, i) for i in [0, items) on up to `threads` threads (the caller is one
 * of them) and return when all are done. Jobs from several callers run one after
 * the other. Idle workers spin for 0.2 ms, then wait passively (OpenBLAS's own
 * workers and OpenMP's spin for milliseconds or more). Returns 0, or -1 when
 * threads could not be started (then fewer threads ran the items). */
int fm_pool_run(int threads, int64_t items, fm_pool_fn fn, void *arg);

/* Start the workers a job on `threads` threads needs, ahead of time: 0, or -1 when
 * the system refused a thread. Jobs whose items wait for one another (OpenBLAS's,
 * through its threads callback) need every item on its own thread. */
int fm_pool_reserve(int threads);

#endif
