/* philox_discrete.h : the CPU RNG backend's discrete distributions (integers, poisson), planned from
 * backends/cpu/philox_rng.c's rng_plan, which hands them here (philox_discrete.c). */
#ifndef FM_PHILOX_DISCRETE_H
#define FM_PHILOX_DISCRETE_H
#include "internal.h"

/* 1 for the distributions philox_discrete.c plans (FM_RNG_INTEGERS, FM_RNG_POISSON). */
static inline int fm_philox_is_discrete(int distribution)
{
    return distribution == FM_RNG_INTEGERS || distribution == FM_RNG_POISSON;
}

/* Plan p (a discrete distribution's, checked by core/src/rng_problem.c) into out. */
fm_status fm_philox_discrete_plan(const fm_problem *p, fm_plan *out);
#endif
