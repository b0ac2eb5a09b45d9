/* openblas_threads.h : who owns OpenBLAS's (process-wide) thread count. */
#ifndef FM_OPENBLAS_THREADS_H
#define FM_OPENBLAS_THREADS_H

/* Set OpenBLAS to one thread, once per process. */
void fm_blas_threads_init(void);
/* Around single-threaded GEMM calls made from the library's own threads (shared). */
void fm_blas_single_begin(void);
void fm_blas_single_end(void);
/* Around one GEMM that OpenBLAS runs on n threads (exclusive). */
void fm_blas_threads_begin(int n);
void fm_blas_threads_end(void);

#endif
