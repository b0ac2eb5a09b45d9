/* blas_provider.h : the OpenBLAS the CPU backends call, chosen once per process (blas_provider.c). */
#ifndef FM_BLAS_PROVIDER_H
#define FM_BLAS_PROVIDER_H

#include <cblas.h>

#include "internal.h"

/* The LAPACKE routines the dense solvers call (backends/cpu/lapack_solve.c), per dtype in the order
 * f32, f64, c64, c128 (LAPACK's s, d, c, z). lapack_int is 32-bit (LP64 builds only: ILP64 ones are
 * refused); complex arguments are interleaved pairs, passed as void *. lapack_solve.c casts each
 * entry to its prototype. Entries are NULL where the library lacks them (no LAPACKE). */
#define FM_LAPACK_ROUTINES(X)                                                                               \
    X(getrf, "sgetrf", "dgetrf", "cgetrf", "zgetrf") X(getrs, "sgetrs", "dgetrs", "cgetrs", "zgetrs")       \
    X(potrf, "spotrf", "dpotrf", "cpotrf", "zpotrf") X(potrs, "spotrs", "dpotrs", "cpotrs", "zpotrs")       \
    X(trtrs, "strtrs", "dtrtrs", "ctrtrs", "ztrtrs") X(getri, "sgetri", "dgetri", "cgetri", "zgetri")       \
    X(syevd, "ssyevd", "dsyevd", "cheevd", "zheevd") X(geqrf, "sgeqrf", "dgeqrf", "cgeqrf", "zgeqrf")       \
    X(orgqr, "sorgqr", "dorgqr", "cungqr", "zungqr") X(gesdd, "sgesdd", "dgesdd", "cgesdd", "zgesdd")       \
    X(gelsd, "sgelsd", "dgelsd", "cgelsd", "zgelsd")
typedef struct fm_lapack {
#define FM_LAPACK_FIELD(name, s, d, c, z) void (*name[4])(void);
    FM_LAPACK_ROUTINES(FM_LAPACK_FIELD)
#undef FM_LAPACK_FIELD
    void (*set_nancheck)(int); /* LAPACKE_set_nancheck: off, so NaN input follows LAPACK (check_finite is ours) */
} fm_lapack;

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
    fm_lapack lapack; /* its LAPACKE (the linked library: liblapacke's when built with it) */
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
