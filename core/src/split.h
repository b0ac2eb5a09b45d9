/* split.h : split execution (core/src/split.c). FM_EXECUTION_BEST may run a problem of host operands
 * partly on the cpu and partly on a GPU at once, cut along its operation's chunk axis
 * (fm_operation.chunk): indices [0, k) on the cpu, [k, extent) on the GPU (staged or pipelined as any
 * host operands on a GPU). core/src/dispatch.c decides (fm_split_decide), the planner builds the
 * plan (fm_plan_build_split). */
#ifndef FM_SPLIT_H
#define FM_SPLIT_H

#include "internal.h"

struct fm_profile;
struct fm_operation;

/* The gain over the better single device a split must be predicted to bring (issue 29: 10%). */
#define FM_SPLIT_MIN_GAIN 1.10
/* Problems predicted sooner than this on the better device are not split: the handoff to the worker
 * thread (tens of microseconds) and the second plan's fixed costs would eat the gain, and the decision
 * (a bisection over the split axis) would cost a small stateless call more than it saves. */
#define FM_SPLIT_MIN_SECONDS 5e-4

/* Predicted seconds of the cpu part, indices [0, k), and of the GPU part, [k, extent) with its copies. */
typedef struct fm_split_model {
    double (*cpu)(void *user, int64_t k);
    double (*gpu)(void *user, int64_t k);
    void *user;
} fm_split_model;

/* Split points are sought on a grid of at most this many (extent / FM_SPLIT_GRID indices apart). */
#define FM_SPLIT_GRID 1024
/* The k in [1, extent) at which both parts are predicted to finish together (bisection on
 * cpu(k) - gpu(k) over the grid, then the better of the two points around the crossing), when its time (the later
 * part's, into *t) is at least FM_SPLIT_MIN_GAIN times shorter than t_single; else 0 (*t: that
 * k's time, INFINITY when extent < 2). A pure function of its arguments. */
int64_t fm_split_choose(int64_t extent, double t_single, const fm_split_model *m, double *t);

/* What best asks of a split for problem q (built without a context, its operands on the host): the
 * work (fm_operation.work) in dtype, the call's cpu threads, the GPU, the pipeline mode, and whether
 * the whole problem's GPU run was predicted pipelined. */
typedef struct fm_split_query {
    const struct fm_profile *pf;
    const struct fm_operation *op;
    const fm_problem *q;
    double work;
    fm_dtype dtype;
    int threads;
    fm_device gpu;
    int pipeline_mode;
    int gpu_pipelined;
    int pipeline_threads; /* the context's staging threads (the pipeline's copy rate) */
    int curve; /* the rate curve (FM_PROFILE_CURVE); 0 (unset): the operation's first */
} fm_split_query;

/* The cpu part's threads for a call of `threads` (the rest are left to the GPU part's host copies:
 * the context's copy_threads staging threads when it is pipelined, one for the driver's staged copy). */
int fm_split_cpu_threads(int threads, int copy_threads, int gpu_pipelined);

/* The split of q: k (0: none, *why says why) and its predicted seconds, the cpu part's threads. Checks
 * that q cuts there (both parts' sub-problems) and that the parts' outputs are disjoint in memory. */
int64_t fm_split_decide(const fm_split_query *s, double t_single, double *t_split, int *cpu_threads,
                        const char **why);

/* Plan p (p->split set by best) as the two parts' plans run at once; FM_ERR_NOT_APPLICABLE or a part's
 * planning error when it cannot (the planner then plans p unsplit: fm_dispatch_fallback). */
fm_status fm_plan_build_split(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **plan);

/* The context's split worker thread joined and freed (context release). */
void fm_context_split_free(fm_context *ctx);

/* core/src/dispatch.c: the GPU's predicted seconds for problem q (its operands where q's descriptors say,
 * q->exec_device ignored) on gpu: `compute` plus the copies, pipelined (*pipelined = 1) where the
 * pipeline's rule would cut it under `mode` and that is sooner. */
double fm_dispatch_gpu_time(const struct fm_profile *pf, int mode, int copy_threads, const fm_problem *q, fm_device gpu,
                            double compute, int *pipelined);
/* core/src/dispatch.c: the first touch of p's results on the host that are not written in place
 * (fm_profile_touch_time): what a cpu run adds for a result allocated for the call. */
double fm_dispatch_touch_time(const struct fm_profile *pf, const fm_problem *p);
/* core/src/dispatch.c: whether pipeline.c's rule cuts q on gpu under `mode` (what its plan will do,
 * whatever the prediction). */
int fm_dispatch_would_pipeline(int mode, const fm_problem *q, fm_device gpu);

#endif
