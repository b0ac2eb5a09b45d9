/* cufft_restage.h : the cuFFT backend's staged copy (cufft_restage.c). Private to backends/cuda/. */
#ifndef FM_CUFFT_RESTAGE_H
#define FM_CUFFT_RESTAGE_H

#include "internal.h"

/* p's operands laid out differently from the staged copy's dense layout (so that planning that
 * layout instead can succeed where p's failed: no endless restaging). */
int fm_cufft_restage_helps(const fm_problem *p);
/* out: p through a staged copy: the input copied on the device into a dense layout with the
 * transformed axes innermost, the transform planned (and cached) on that, its dense result
 * copied into out's layout. */
fm_status fm_cufft_plan_restaged(fm_context *ctx, const fm_problem *p, fm_plan *out);

#endif
