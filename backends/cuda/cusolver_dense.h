/* cusolver_dense.h : what cusolver_dense.c (the per-entry 64-bit path, planning, execution) and
 * cusolver_batched.c (the batched routines for many small matrices) share. */
#ifndef FM_CUSOLVER_DENSE_H
#define FM_CUSOLVER_DENSE_H

#include "cuda/nvrtc_cache.h"
#include "internal.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <pthread.h>

#define WHO "solve cuda/cusolver"
#define MAX_DEV 64

enum { FM_CS_EIG_NONE = 0, FM_CS_EIG_SYEVJ = 1, FM_CS_EIG_XSYEV = 2 }; /* cs_impl.eig */
/* cs_impl.direct: the factor gathered into scratch (none), the caller's column-major matrices, or its
 * row-major ones read as their column-major transposes (the triangular solves flip fill and op) */
enum { FM_CS_DIRECT_NONE = 0, FM_CS_DIRECT_COLS = 1, FM_CS_DIRECT_ROWS = 2 };

#define FM_CS_LANES 16 /* streams a batch of mid-sized matrices runs on at once */

enum { K_COPY, K_FINITE, K_DIAG, K_DET, K_PIVOTS, K_INFO, K_PTRS, K_NARROW, K_PERM, K_ROWS, K_TRSV, K_LSQFIN, K_LSQ,
       K_LSQRES, K_TCOPY, K_FLAGINFO, K_CHOL32, K_LU32, K_COUNT };

typedef struct {
    char *dst;
    const char *src;
    long long rows, cols, count, drs, dcs, dbs, srs, scs, srows, scols;
    int nb, tri, conj, ident;
    long long bshape[8], bstride[8];
} fm_copy_args; /* the kernels' FmCopy */
_Static_assert(FM_MAX_NDIM <= 8, "FmCopy holds 8 batch axes");

/* ---- backend state: workspaces, and per device the handles and the kernels ---- */
typedef struct {
    int made;
    cusolverDnHandle_t sv;
    cusolverDnParams_t prm;
    cublasHandle_t bl;
    syevjInfo_t sj; /* syevjBatched's parameters (defaults: machine-precision tolerance, sorted) */
    fm_nvrtc_module mod;
    cudaKernel_t k[4][K_COUNT]; /* per dtype (s d c z) */
    int lanes_made;             /* the lanes below (cusolver_lanes.c), made when a plan first needs them */
    cudaStream_t lane[FM_CS_LANES];
    cusolverDnHandle_t lane_sv[FM_CS_LANES];
    cudaEvent_t fork_ev, lane_ev[FM_CS_LANES];
} dev_state;

typedef struct {
    void *ws; /* fm_cuda_ws_table */
    pthread_mutex_t lock;
    dev_state dev[MAX_DEV];
} cs_state;

/* ---- the plan ---- */
typedef struct {
    cs_state *st;
    const fm_problem *p;
    const fm_solve_params *sp;
    int device, ti;
    size_t es, rs;
    cudaDataType dt, rt;
    int64_t m, n, k, mm, nn; /* mm x nn: the matrix cuSOLVER factors (gesvd: a^H when m < n) */
    size_t dwork, hwork;     /* per routine call, the larger of the routines the plan runs */
    /* workspace parts (byte offsets) and the total */
    size_t off_a, off_b, off_q, off_vt, off_tau, off_piv, off_info, off_flag, off_work, total;
    int batched;                   /* the batched routines (cusolver_batched.c) */
    int eig;                       /* eigh's batched routine: FM_CS_EIG_* */
    size_t off_pa, off_pb, off_p32; /* their pointer arrays and int32 pivots */
    int lowest;                     /* gesv refined from this cusolverPrecType_t (cusolver_refine.c), 0: no */
    int blocked;                    /* triangular solves blocked into trsm + gemm (cusolver_trsm.c) */
    int lanes;                      /* streams the per-entry routine calls are spread over (1: the caller's) */
    size_t dwork_step;              /* bytes between the lanes' device workspaces */
    size_t off_perm, off_b2;        /* getrs's permutation and its second right-hand side (blocked) */
    size_t off_c;                   /* lstsq's U^H b (cusolver_lstsq.c) */
    int direct;                     /* getrs / potrs read the caller's factor in place, not gathered: FM_CS_DIRECT_* */
    cusolverDnIRSParams_t irs;
    int refine;                     /* the refine choice run, auto resolved (fm_solve_refine; cusolver_refine.c) */
    int irs_solver;                 /* its refinement solver: FM_IRS_* */
} cs_impl;

typedef struct {
    const cs_impl *x;
    const dev_state *d;
    char *ws;
    void *const *ptrs;
    cudaStream_t stream;
    void *hwork;
    int *info, *junk; /* per entry; for routines whose info only flags a bad argument (validated here) */
} run_ctx;

/* entry b's cuSOLVER handle, device and host workspace: its lane's (cusolver_lanes.c) */
#define SV(r, b) ((r)->x->lanes > 1 ? (r)->d->lane_sv[(b) % (r)->x->lanes] : (r)->d->sv)
#define WORK(r, b) ((r)->ws + (r)->x->off_work + (size_t)((b) % (r)->x->lanes) * (r)->x->dwork_step)
#define HWORK(r, b) ((r)->hwork ? (char *)(r)->hwork + (size_t)((b) % (r)->x->lanes) * (r)->x->hwork : NULL)
#define WS(r, off, b, elems, es) fm_cs_entry((r)->x, (r)->ws, (r)->x->off, b, elems, es)

static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

fm_status fm_cs_sv_status(cusolverStatus_t e, const char *what);
/* a grid-stride kernel over `work` items, one argument block */
fm_status fm_cs_launch(cudaKernel_t k, const char *name, int64_t work, void **args, cudaStream_t stream);
/* contiguous per-entry scratch (column-major rows x cols, leading dimension ld, per elements apart) */
fm_copy_args fm_cs_scratch_view(const cs_impl *x, const void *base, int64_t rows, int64_t cols, int64_t ld,
                                int64_t per);
/* view a into dst: scratch (ld) or, out_slot >= 0, that output slot's layout */
fm_status fm_cs_copy_to(const cs_impl *x, const dev_state *d, fm_copy_args a, void *dst, int out_slot, int64_t ld,
                        cudaStream_t stream);
char *fm_cs_entry(const cs_impl *x, const char *ws, size_t off, int64_t b, int64_t elems, size_t es);


/* ---- cusolver_report.c ---- */
/* After the one synchronisation: the lowest failing entry (a non-finite input, then a bad given
 * pivot, then info) as core's error; FM_OK when none failed. */
fm_status fm_cs_report(const cs_impl *x, const int *info, const uint64_t *flags, int64_t bad_pivot);
/* The caller's pivot that fm_sv_pivots found bad (flat index at = b * n + i), read back. */
fm_status fm_cs_read_bad_pivot(const cs_impl *x, void *const *ptrs, uint64_t at, int64_t *v);

/* ---- cusolver_batched.c ---- */
/* Whether x runs on the batched routines (many small matrices), set in x->batched (eigh: x->eig, by
 * the table there or set->solve_eig_batched). */
void fm_cs_batched_pick(cs_impl *x, const fm_settings *set);
/* describe()'s words for the batched routine x runs */
const char *fm_cs_batched_name(const cs_impl *x);
/* Its device workspace (syevjBatched's lwork; XsyevBatched's device and host bytes) into x->dwork / hwork. */
fm_status fm_cs_batched_sizes(cs_impl *x, const dev_state *d);
/* The routine's calls over the batch (chunks of at most 32768 entries). */
fm_status fm_cs_batched_run(const run_ctx *r);

/* ---- cusolver_lanes.c ---- */
/* How many lanes x's per-entry loop runs on (x->lanes, 1 when none). */
void fm_cs_lanes_pick(cs_impl *x);
/* d's lane streams, handles and events (with the state's lock held); clear destroys what exists. */
fm_status fm_cs_lanes_make(dev_state *d, int device);
void fm_cs_lanes_clear(dev_state *d);
/* Before a per-entry loop: the lanes wait for the caller's stream; after it: the caller's stream waits
 * for every lane. Both no-ops when x->lanes is 1; join also runs after a failure part way. */
fm_status fm_cs_lanes_fork(const run_ctx *r);
fm_status fm_cs_lanes_join(const run_ctx *r, fm_status s);

/* ---- cusolver_trsm.c ---- */
/* Whether x's triangular solves run blocked (x->blocked): large n, few right-hand sides. */
void fm_cs_trsm_pick(cs_impl *x);
/* op(a) x = b in place for entry-sized n x nrhs b (n x n a, both column-major, leading dimension n). */
fm_status fm_cs_trsm(const run_ctx *r, cublasFillMode_t fill, cublasOperation_t op, cublasDiagType_t diag,
                     const void *a, void *b);
/* getrs (blocked: permutation, two trsm) of entry e's LU factor and pivots, on b in place. */
fm_status fm_cs_getrs(const run_ctx *r, cublasOperation_t op, const void *lu, const int64_t *piv, void *b,
                      int64_t e);
/* potrs (blocked: two trsm) of a Cholesky factor on b in place. */
fm_status fm_cs_potrs(const run_ctx *r, cublasFillMode_t fill, const void *l, void *b);
/* Whether getrs / potrs read the caller's factor in place (x->direct, FM_CS_DIRECT_*); after the picks above. */
void fm_cs_direct_pick(cs_impl *x);
/* entry b's factor: the gathered scratch, or (x->direct) the caller's matrix in place */
char *fm_cs_factor(const run_ctx *r, int64_t b);

/* ---- cusolver_refine.c ---- */
/* Whether x's gesv runs refined (x->lowest; it then takes the per-entry path). */
void fm_cs_refine_pick(cs_impl *x);
/* Its parameters (the refinement solver: set->solve_irs) and workspace (into x->dwork);
 * fm_cs_refine_destroy frees them. */
fm_status fm_cs_refine_plan(cs_impl *x, const dev_state *d, const fm_settings *set);
void fm_cs_refine_destroy(cs_impl *x);
/* "fp32" ... for describe(), "" when not refined; the refinement solver's name ("gmres" ...) */
const char *fm_cs_refine_name(const cs_impl *x);
const char *fm_cs_refine_solver_name(const cs_impl *x);
fm_status fm_cs_refine_run(const run_ctx *r);

/* ---- cusolver_lstsq.c ---- */
/* lstsq (gelsd's results): gesvd per entry, then gemms and kernels over the batch. */
fm_status fm_cs_lstsq_run(const run_ctx *r);

#endif
