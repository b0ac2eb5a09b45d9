/* blas_provider.h : the OpenBLAS the CPU backends call, chosen once per process (blas_provider.c). */
#ifndef FM_BLAS_PROVIDER_H
#define FM_BLAS_PROVIDER_H

#include <cblas.h>

#include "internal.h"

typedef struct fm_blas {
    void (*sgemm)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint, float,
                  const float *, blasint, const float *, blasint, float, float *, blasint);
    void (*dgemm)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint, double,
                  const double *, blasint, const double *, blasint, double, double *, blasint);
    void (*cgemm)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                  const void *, const void *, blasint, const void *, blasint, const void *, void *, blasint);
    void (*zgemm)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                  const void *, const void *, blasint, const void *, blasint, const void *, void *, blasint);
    void (*set_num_threads)(int);
    char *(*get_config)(void);
    void *handle;     /* dlopen's, NULL for the linked library */
    char core[32];    /* openblas_get_corename() */
    char path[1024];  /* "" for the linked library */
    char what[768];   /* version, core, why this one (fm_blas_info) */
    char tag[64];     /* describe()'s "blas=" value: version/core */
} fm_blas;

/* The chosen library (valid after fm_blas_select; the linked one before). */
extern fm_blas fm_blas_lib;

/* Choose once per process for FUSEMATH_BLAS = setting ("" / "auto", "system" or a path); later calls
 * return at once. FM_ERR_INVALID_ARGUMENT when a path cannot be used (context creation fails). */
fm_status fm_blas_select(const char *setting);
/* Whether the chosen library runs OpenBLAS's generic (pre-AVX2) kernels on this AVX2+ CPU: then
 * the own GEMM kernel takes every product it computes (gemmkernel_matmul.c). */
int fm_blas_runs_generic(void);
/* The rule itself, with the linked library's core given (tests; the caller holds no lock). */
fm_status fm_blas_select_for(const char *setting, const char *linked_core);

#endif
