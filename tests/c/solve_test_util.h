/* solve_test_util.h : what the dense-solver tests (test_solve_*.c) share: a seeded generator of
 * entries, dtype facts, and element access in complex double. A test defines SOLVE_TEST_SEED (its
 * stream of matrices) before including this. */
#ifndef FM_TEST_SOLVE_UTIL_H
#define FM_TEST_SOLVE_UTIL_H

#include <fusemath/fusemath.h>
#include <complex.h>
#include <float.h>
#include <stdint.h>

#ifndef SOLVE_TEST_SEED
#error "define SOLVE_TEST_SEED before including solve_test_util.h"
#endif

typedef double complex cplx;

static uint64_t rng_state = SOLVE_TEST_SEED;
/* in (-1, 1), a 64-bit LCG: the same matrices on every run and machine */
static inline double urand(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((double)(rng_state >> 11) / 9007199254740992.0) * 2.0 - 1.0;
}

static inline int is_complex(fm_dtype dt) { return dt == FM_C64 || dt == FM_C128; }
static inline double eps_of(fm_dtype dt) { return dt == FM_F32 || dt == FM_C64 ? FLT_EPSILON : DBL_EPSILON; }
static inline fm_dtype real_of(fm_dtype dt) { return dt == FM_C64 ? FM_F32 : dt == FM_C128 ? FM_F64 : dt; }

/* re + i im (CMPLX is C11 but not every compiler's libc has it: clang on glibc 2.36 lacked it) */
static inline cplx make_cplx(double re, double im)
{
    cplx z;
    ((double *)&z)[0] = re, ((double *)&z)[1] = im;
    return z;
}

/* element i of a float / double / complex64 / complex128 (or int64: lstsq's rank) array, as complex double */
static inline cplx get(fm_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case FM_F32: return ((const float *)p)[i];
    case FM_F64: return ((const double *)p)[i];
    case FM_C64: return make_cplx(((const float *)p)[2 * i], ((const float *)p)[2 * i + 1]);
    case FM_C128: return make_cplx(((const double *)p)[2 * i], ((const double *)p)[2 * i + 1]);
    default: return (double)((const int64_t *)p)[i];
    }
}

/* element i := v, rounded to dt (the imaginary part dropped for a real dt) */
static inline void set(fm_dtype dt, void *p, int64_t i, cplx v)
{
    switch (dt) {
    case FM_F32: ((float *)p)[i] = (float)creal(v); break;
    case FM_F64: ((double *)p)[i] = creal(v); break;
    case FM_C64: ((float *)p)[2 * i] = (float)creal(v), ((float *)p)[2 * i + 1] = (float)cimag(v); break;
    default: ((double *)p)[2 * i] = creal(v), ((double *)p)[2 * i + 1] = cimag(v); break;
    }
}

#endif
