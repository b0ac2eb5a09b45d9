/* openblas_threads.h : who owns OpenBLAS's (process-wide) thread count. */
#ifndef FM_OPENBLAS_THREADS_H
#define FM_OPENBLAS_THREADS_H

/* Set OpenBLAS to one thread, once per process; with an OpenBLAS that has the threads
 * callback, also hand its threading to fusemath's pool (cpu_pool.c). */
void fm_blas_threads_init(void);
/* 1 when OpenBLAS's threaded GEMMs run on fusemath's pool (threads callback), else 0. */
int fm_blas_threads_on_pool(void);
/* Around single-threaded GEMM calls made from the library's own threads (shared). */
void fm_blas_single_begin(void);
void fm_blas_single_end(void);
/* Around one GEMM that OpenBLAS runs on n threads (exclusive). */
void fm_blas_threads_begin(int n);
void fm_blas_threads_end(void);

#endif
