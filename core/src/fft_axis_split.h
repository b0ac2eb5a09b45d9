/* fft_axis_split.h : one multi-axis transform with a chain as two batched transforms, and one over
 * more than 3 axes as steps of at most 3. */
#ifndef FM_FFT_AXIS_SPLIT_H
#define FM_FFT_AXIS_SPLIT_H

#include "internal.h"

/* A single transform (batch 1) over 2 or 3 axes with a prolog or epilog. */
FM_INTERNAL_API int fm_fft_should_split_axes(const fm_problem *p);
/* Plan p as [last axis] then [the other axes] (c2r: the reverse), each a cached plan of
 * whichever backend takes it (untuned: p's tuned choice is not the steps'); the c2r intermediate
 * comes from p's execution device. */
FM_INTERNAL_API fm_status fm_fft_plan_axis_split(fm_context *ctx, const fm_problem *p, fm_plan *out);
/* A transform over more than 3 axes as successive plans of at most 3 axes each (the FFT's
 * fm_operation.plan_steps); FM_ERR_NOT_APPLICABLE for at most 3 axes, which the backends plan. */
fm_status fm_fft_plan_steps(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **plan);

#endif
