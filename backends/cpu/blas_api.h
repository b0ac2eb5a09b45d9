/* blas_api.h : the CBLAS / OpenBLAS functions the CPU backend calls, from whichever OpenBLAS
 * the build chose (cmake/FusemathBlas.cmake). scipy-openblas (FM_BLAS_SCIPY) has the same API
 * with every symbol prefixed scipy_, and OpenBLAS's threads callback (0.3.28+), which
 * FM_BLAS_HAS_THREADS_CALLBACK announces. */
#ifndef FM_BLAS_API_H
#define FM_BLAS_API_H

#include <cblas.h>

#ifdef FM_BLAS_SCIPY
#define cblas_sgemm scipy_cblas_sgemm
#define cblas_dgemm scipy_cblas_dgemm
#define cblas_cgemm scipy_cblas_cgemm
#define cblas_zgemm scipy_cblas_zgemm
#define fm_blas_set_num_threads scipy_openblas_set_num_threads
#define fm_blas_set_threads_callback scipy_openblas_set_threads_callback_function
#define fm_blas_get_config scipy_openblas_get_config
#define FM_BLAS_HAS_THREADS_CALLBACK 1
#else
#define fm_blas_set_num_threads openblas_set_num_threads
#define fm_blas_get_config openblas_get_config
#endif

#endif
