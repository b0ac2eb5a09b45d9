/* cpu_pool.h : a small process-wide pool of threads that sleep between jobs. */
#ifndef FM_CPU_POOL_H
#define FM_CPU_POOL_H

#include <stdint.h>

typedef void (*fm_pool_fn)(void *arg, int64_t item);

/* Run fn(arg, i) for i in [0, items) on up to `threads` threads (the caller is one
 * of them) and return when all are done. Jobs from several callers run one after
 * the other. Workers wait passively, so they leave the cores to OpenBLAS's threads
 * as soon as a job ends (OpenMP's workers spin for milliseconds instead). Returns
 * 0, or -1 when threads could not be started (then the caller ran every item). */
int fm_pool_run(int threads, int64_t items, fm_pool_fn fn, void *arg);

#endif
