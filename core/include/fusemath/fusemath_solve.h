/* fusemath_solve.h : the dense-solver operation (FM_OP_SOLVE) of the public API; included by
 * fusemath.h, whose types it uses (including it alone includes fusemath.h first). */
#ifndef FUSEMATH_SOLVE_H
#define FUSEMATH_SOLVE_H

#include "fusemath.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Dense solvers: numpy.linalg / scipy.linalg routines on LAPACK (cpu) and   */
/* cuSOLVER (cuda), batched over leading dimensions (docs/design.md).       */
/* ------------------------------------------------------------------------ */
/* Operand slots of a solve plan. Matrices are the last two axes, vectors the last one; the axes
 * before are the batch, broadcast as numpy.linalg broadcasts them (inputs), exactly the broadcast
 * batch (outputs). What each routine reads and writes is told with fm_solve_routine. */
enum {
    FM_SOLVE_A = 0,      /* in: the matrix (getrs: its LU factor; potrs: its Cholesky factor) */
    FM_SOLVE_B = 1,      /* in: right-hand sides (..., n, k) */
    FM_SOLVE_IPIV = 2,   /* in: getrs / det of a factor: the pivots (..., n), int64, 1-based as LAPACK's */
    FM_SOLVE_X = 3,      /* out: solution, inverse, Q (qr), eigenvectors (syevd), U (gesdd) */
    FM_SOLVE_FACTOR = 4, /* out: LU (getrf), L or U (potrf), R (geqrf), Vt (gesdd) */
    FM_SOLVE_PIVOTS = 5, /* out: getrf's pivots (..., n), int64, 1-based */
    FM_SOLVE_INFO = 6,   /* out (check = 0): LAPACK's info per batch entry (...), int64 */
    FM_SOLVE_W = 7,      /* out: eigenvalues, singular values, det, slogdet's log|det| */
    FM_SOLVE_AUX = 8,    /* out: slogdet's sign; gelsd's residual sums of squares (..., k) */
    FM_SOLVE_RANK = 9,   /* out: gelsd's effective rank (...), int64 */
    FM_SOLVE_NSLOTS = 10
};

/* The routines (fm_solve_options.routine). a is (..., n, n) unless said otherwise. */
typedef enum fm_solve_routine {
    FM_SOLVE_GESV = 0,    /* x = a^-1 b (LU with partial pivoting) */
    FM_SOLVE_GETRF = 1,   /* factor = LU of a, pivots */
    FM_SOLVE_GETRS = 2,   /* x = op(a)^-1 b with a = an LU factor and ipiv its pivots (transpose) */
    FM_SOLVE_POTRF = 3,   /* factor = L (uplo lower; the upper triangle zeroed) or U, a Hermitian positive definite */
    FM_SOLVE_POTRS = 4,   /* x = a^-1 b with a's Cholesky factor (uplo says which triangle it is) */
    FM_SOLVE_TRTRS = 5,   /* x = op(a)^-1 b, a triangular (uplo, transpose, unit_diagonal) */
    FM_SOLVE_INV = 6,     /* x = a^-1 */
    FM_SOLVE_DET = 7,     /* w = det(a) (...); with ipiv given, a is an LU factor and ipiv its pivots */
    FM_SOLVE_SLOGDET = 8, /* aux = sign (a's dtype), w = log|det| (real), as numpy.linalg.slogdet; ipiv as det */
    FM_SOLVE_SYEVD = 9,   /* w = eigenvalues (..., n) ascending (real), x = eigenvectors unless values_only */
    FM_SOLVE_GEQRF = 10,  /* a (..., m, n), k = min(m, n): qr_mode reduced: x = Q (m, k), factor = R (k, n);
                             complete: Q (m, m), R (m, n); r: R (k, n) only */
    FM_SOLVE_GESDD = 11,  /* a (..., m, n): w = singular values (k) descending; unless values_only x = U, factor
                             = Vt: (m, k), (k, n), or (m, m), (n, n) with full_matrices */
    FM_SOLVE_GELSD = 12,  /* least squares, a (..., m, n), b (..., m, k): x (n, k), w = singular values (k),
                             rank, aux = sum of squared residuals per column (0 where m <= n or rank < n) */
    FM_SOLVE_ROUTINE_COUNT_
} fm_solve_routine;

/* gesv's iterative refinement (fm_solve_options.refine): an fp64-accurate answer from a factorization in
 * lower precision, falling back to the plain fp64 solve when it does not converge (a GPU backend's
 * choice; the CPU backend runs the plain solve whatever is asked: the answer is the same or better). */
typedef enum fm_solve_refine {
    FM_SOLVE_REFINE_AUTO = 0, FM_SOLVE_REFINE_OFF = 1, FM_SOLVE_REFINE_FP32 = 2, FM_SOLVE_REFINE_TF32 = 3,
    FM_SOLVE_REFINE_BF16 = 4, FM_SOLVE_REFINE_FP16 = 5
} fm_solve_refine;

typedef struct fm_solve_options {
    int32_t routine;       /* fm_solve_routine */
    int32_t uplo;          /* 0: lower (numpy's 'L'), 1: upper: potrf / potrs / trtrs / syevd's triangle */
    int32_t transpose;     /* getrs / trtrs: 0 op(a) = a, 1 a^T, 2 a^H */
    int32_t unit_diagonal; /* trtrs: a's diagonal taken as ones */
    /* 1 (default): a singular or non-positive-definite matrix (info > 0) fails the call with
     * FM_ERR_LINALG naming the batch index and the pivot or minor (on a GPU: one synchronisation to
     * read the info); 0: the info slot is written instead and nothing fails for info > 0. Given
     * pivots outside 1..n (ipiv) and, with check_finite, a NaN / Inf fail the call either way. */
    int32_t check;
    int32_t check_finite;  /* 1: a NaN or Inf in an input fails the call (FM_ERR_INVALID_ARGUMENT naming it) */
    int32_t qr_mode;       /* geqrf: 0 reduced, 1 complete, 2 r */
    int32_t full_matrices; /* gesdd: 1 U (m, m) and Vt (n, n) */
    int32_t values_only;   /* syevd / gesdd: w only */
    double rcond;          /* gelsd: singular values <= rcond * the largest count as zero (< 0: machine eps) */
    int32_t execution;     /* fm_execution */
    int32_t device_id;
    int32_t num_threads;   /* cpu threads; 0 = the context's setting */
    int32_t refine;        /* gesv: fm_solve_refine */
    /* getrs / potrs / trtrs / det / slogdet of a factor: 1 says a (and ipiv) are a factorization this
     * library wrote and the caller kept unchanged (fusemath.linalg.Solver's): a is not checked for
     * finiteness (check_finite then reads b alone), and a GPU backend does not synchronise to refuse a bad
     * pivot (it still replaces one outside 1..n on the device, so nothing faults). Other data under 1
     * gives undefined results. 0 (default): both checked. */
    int32_t trusted_factor;
    int32_t reserved[3];   /* zero */
} fm_solve_options;

/*! fm_solve_options_init() : gesv, lower, no transpose, check = 1, check_finite = 0, rcond -1, refine auto,
 *  auto execution. */
FM_API void fm_solve_options_init(fm_solve_options *o);

/*! fm_solve_plan() : plan the options' routine on these descriptors (t[FM_SOLVE_A ... FM_SOLVE_RANK],
 *  NULL where a routine has no such operand; fm_output_specs(FM_OP_SOLVE, ...) gives the outputs'). f32,
 *  f64, c64, c128; outputs C-contiguous, inputs any strides. Executes take no per-call arguments: a
 *  failure of check = 1 is the status and message, the info slot its record otherwise. */
FM_API fm_status fm_solve_plan(fm_context *ctx, const fm_tensor *const *t, const fm_solve_options *opts,
                               fm_plan **plan);
/*! fm_solve() : plan (cached) and execute once with the descriptors' data pointers. */
FM_API fm_status fm_solve(fm_context *ctx, const fm_tensor *const *t, const fm_solve_options *opts, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* FUSEMATH_SOLVE_H */
