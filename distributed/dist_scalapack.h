/* dist_scalapack.h : what dist_blockcyclic.c and dist_scalapack.c share (not installed): the grid,
 * the matrix checks, and the BLACS / ScaLAPACK entry points called (the Debian packages ship no
 * header; the prototypes follow the BLACS C interface and ScaLAPACK's Fortran routines: every
 * argument by pointer, and a hidden length after the last argument for each CHARACTER one). */
#ifndef FM_DIST_SCALAPACK_H
#define FM_DIST_SCALAPACK_H

#include "dist_impl.h"

#include <stddef.h>

struct fm_dist_grid {
    MPI_Comm comm;   /* a duplicate of the caller's: the agreements and BLACS use it */
    int sys;         /* BLACS system handle of comm (Csys2blacs_handle) */
    int ctxt;        /* the BLACS grid's context */
    int nprow, npcol, myrow, mycol;
    int rank, size;
};

/* FM_OK when x is a matrix of this rank on g as fm_dist_matrix_init makes it (its local shape the
 * layout's, ld and data usable); else fm_fail naming `name`. Local. */
fm_status fm_dist_check_matrix(const char *where, const fm_dist_grid *g, const char *name, const fm_dist_matrix *x);
/* FM_ERR_DTYPE unless dtype is FM_F32 or FM_F64. Local. */
fm_status fm_dist_check_real_dtype(const char *where, fm_dtype dtype);
/* FM_ERR_ALIAS when the local spans of x and y (both checked) overlap. Local. */
fm_status fm_dist_check_disjoint(const char *where, fm_dtype dtype, const char *xname, const fm_dist_matrix *x,
                                 const char *yname, const fm_dist_matrix *y);
/* vals[0..3] = x's m, n, mb, nb (for fm_dist_check_same) */
void fm_dist_matrix_vals(const fm_dist_matrix *x, int64_t *vals);
/* the global index of local index l along an axis cut in blocks of nb over np processes, this
 * process being p (ScaLAPACK's indxl2g from 0, first block on process 0) */
static inline int64_t fm_dist_l2g(int64_t l, int64_t nb, int p, int np)
{
    return ((l / nb) * np + p) * nb + l % nb;
}

#if FM_HAVE_SCALAPACK
/* ScaLAPACK's 9-entry descriptor of x on g (BLOCK_CYCLIC_2D, first block on process (0, 0)) */
void fm_dist_descriptor(const fm_dist_grid *g, const fm_dist_matrix *x, int desc[9]);

int Csys2blacs_handle(MPI_Comm comm);
void Cfree_blacs_system_handle(int handle);
void Cblacs_gridinit(int *ctxt, char *order, int nprow, int npcol);
void Cblacs_gridinfo(int ctxt, int *nprow, int *npcol, int *myrow, int *mycol);
void Cblacs_gridexit(int ctxt);
int numroc_(const int *n, const int *nb, const int *iproc, const int *isrcproc, const int *nprocs);

/* PBLAS (C, no hidden lengths) */
void pdgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k, const double *alpha,
             const double *a, const int *ia, const int *ja, const int *desca, const double *b, const int *ib,
             const int *jb, const int *descb, const double *beta, double *c, const int *ic, const int *jc,
             const int *descc);
void psgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k, const float *alpha,
             const float *a, const int *ia, const int *ja, const int *desca, const float *b, const int *ib,
             const int *jb, const int *descb, const float *beta, float *c, const int *ic, const int *jc,
             const int *descc);
/* ScaLAPACK (Fortran) */
void pdgesv_(const int *n, const int *nrhs, double *a, const int *ia, const int *ja, const int *desca, int *ipiv,
             double *b, const int *ib, const int *jb, const int *descb, int *info);
void psgesv_(const int *n, const int *nrhs, float *a, const int *ia, const int *ja, const int *desca, int *ipiv,
             float *b, const int *ib, const int *jb, const int *descb, int *info);
void pdpotrf_(const char *uplo, const int *n, double *a, const int *ia, const int *ja, const int *desca, int *info,
              size_t uplo_len);
void pspotrf_(const char *uplo, const int *n, float *a, const int *ia, const int *ja, const int *desca, int *info,
              size_t uplo_len);
void pdpotrs_(const char *uplo, const int *n, const int *nrhs, const double *a, const int *ia, const int *ja,
              const int *desca, double *b, const int *ib, const int *jb, const int *descb, int *info,
              size_t uplo_len);
void pspotrs_(const char *uplo, const int *n, const int *nrhs, const float *a, const int *ia, const int *ja,
              const int *desca, float *b, const int *ib, const int *jb, const int *descb, int *info,
              size_t uplo_len);
#else
/* what the functions say where libfusemath_mpi was built without ScaLAPACK */
#if FM_SCALAPACK_OFF_BY_OPTION
#define FM_DIST_NO_SCALAPACK "libfusemath_mpi was built without ScaLAPACK (FUSEMATH_WITH_SCALAPACK=OFF)"
#else
#define FM_DIST_NO_SCALAPACK                                                                             \
    "libfusemath_mpi was built without ScaLAPACK (not found: apt-get install libscalapack-openmpi-dev, or " \
    "scripts/setup.sh, then rebuild)"
#endif
#endif

#endif /* FM_DIST_SCALAPACK_H */
