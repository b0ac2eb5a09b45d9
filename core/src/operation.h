/* operation.h : the operation table. One row (an fm_operation) per operation, defined in the
 * operation's own file (core/src/<op>_problem.c) and listed in core/src/operations.c; the
 * planner, the plan cache, wisdom, autotune and the generic entry points (fm_plan_create,
 * fm_run, fm_output_specs, fm_autotune) know operations only through it. */
#ifndef FM_OPERATION_H
#define FM_OPERATION_H

#include "internal.h"

#define FM_MAX_TUNABLES 4

/* One chunk of a problem cut along its operation's split axis (fm_operation.chunk). */
typedef struct fm_chunk {
    int64_t offset[FM_MAX_SLOTS]; /* element offset of the chunk's first element in slot i's operand */
    uint32_t whole;               /* present slots every chunk reads whole (matmul's b and bias) */
    int64_t position;             /* added to the per-call position args.ints[0] (RNG, dropout); else 0 */
} fm_chunk;

typedef struct fm_operation {
    fm_op op;
    const char *name;                    /* "matmul": messages' prefix */
    int nslots;
    const char *const *slot_names;       /* nslots static strings */
    const uint8_t *slot_roles;           /* fm_slot_role per slot */
    size_t options_size;                 /* the options struct this op's calls take */
    void (*options_init)(void *opts);
    /* The problem for operands t[0..nslots) and options (NULL: defaults), every check made with
     * a message naming the argument; fills *att with what the key holds as a digest only. The
     * generic code zeroes p before and normalises its key tails after. */
    fm_status (*build)(fm_context *ctx, const fm_tensor *const *t, const void *opts, fm_problem *p,
                       fm_attachments *att);
    /* The output descriptors for these inputs and options (see fm_output_specs); inputs
     * validated as build would. */
    fm_status (*output_specs)(const fm_tensor *const *t, const void *opts, fm_tensor *specs, uint32_t *written);
    /* Optional: plan p itself as steps of other problems, each planned through the planner (FFT
     * over more than 3 axes), instead of offering p to the backends; FM_ERR_NOT_APPLICABLE (no
     * message needed) when the backends plan p. */
    fm_status (*plan_steps)(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **plan);
    /* The int32 fields of the params union that autotune and wisdom set (byte offsets into
     * fm_problem.u); all zero = untuned (the planner's own choice). */
    int ntunables;
    uint16_t tunables[FM_MAX_TUNABLES];
    /* Optional: whether v[0..ntunables) (as a wisdom file holds them) are values a caller could
     * ask for; FM_ERR_INVALID_ARGUMENT with a message naming them otherwise, so that an edited
     * file never plans what no call could. */
    fm_status (*check_tunables)(const int32_t *v);
    /* The per-call arguments it reads: fm_exec_args.ints[0..exec_ints), reals[0..exec_reals),
     * and info when exec_info; a caller's value anywhere else is refused at execute. */
    int exec_ints, exec_reals, exec_info;
    /* Optional: the values of those per-call arguments for the planned problem p (a range the
     * operation needs: matmul's dropout position), checked at every execute after the fields. */
    fm_status (*check_exec_args)(const fm_problem *p, const fm_exec_args *a);
    /* Optional (FM_EXECUTION_BEST, core/src/dispatch.c): the work of the problem these operands and
     * options make, in the unit its rate curves count (flops for matmul and solve, 5 N log2 n for
     * FFT, values for RNG), the dtype its curves are keyed by, and in *devices (bit FM_DEVICE_CPU,
     * bit FM_DEVICE_CUDA; both set on entry) the devices that can run it, in *threads the cpu
     * threads its options ask for (0 on entry: the context's). Without the hook, best is where the
     * operands live. */
    double (*work)(const fm_tensor *const *t, const void *opts, fm_dtype *dtype, unsigned *devices, int *threads);
    /* Optional: which of the operation's rate curves predicts these operands, when one rate per unit
     * of work does not fit all its shapes (0 without the hook). The FFT: 1 for a transform over one
     * axis, whose batches ran 3x a 2-D transform's rate per unit of work on the H200 host's cpu. The
     * calibration points are keyed by it too; a profile without that curve predicts from curve 0. */
    int (*curve)(const fm_tensor *const *t, const void *opts);
    /* Optional (fm_context_calibrate, core/src/calibrate.c): descriptors (data NULL, C-contiguous)
     * and options of the index-th problem that measures this operation's curves, planned for
     * `execution`, the slots used in *slots; 0 past the last (quick: the shorter list). */
    int (*calibration_problem)(int index, int quick, int execution, fm_tensor *t, void *opts, uint32_t *slots);
    /* Optional (pipelined host<->GPU transfers, core/src/pipeline.c): p cut along the operation's own
     * split axis (matmul: d's rows; fft: the outermost batch axis; rng: out's first axis). Returns
     * that axis' extent, or 0 when p does not split (*why: a static string saying why). With sub
     * non-NULL and 0 <= lo < hi <= extent, also fills *sub with the problem of indices [lo, hi) of the
     * axis (p's descriptors, the split slots' extent hi - lo, strides kept) and *c. A pure function
     * of p (tests call it directly); without the hook host operands are staged whole. */
    int64_t (*chunk)(const fm_problem *p, int64_t lo, int64_t hi, fm_problem *sub, fm_chunk *c, const char **why);
    /* Optional (the pipeline's auto rule, core/src/pipeline.c): the work of built problem p in the unit
     * of `work` above, its curves' dtype in *dtype and the rate curve (`curve` above: the same answer
     * for the same problem) in *variant; < 0 unknown (the rule then assumes no compute). */
    double (*problem_work)(const fm_problem *p, fm_dtype *dtype, int *variant);
    /* Optional (split execution, core/src/split.c): byte offset into fm_problem.u of the int32 resolved
     * cpu thread count, which the split's cpu part lowers (0: none; the part keeps the problem's). */
    uint16_t cpu_threads;
} fm_operation;

/* Room for any operation's options struct (generic defaults, calibration problems). */
typedef struct fm_options_room {
    _Alignas(16) unsigned char bytes[1024];
} fm_options_room;

/* The row of op, or NULL for an unknown op. */
const fm_operation *fm_operation_for(fm_op op);
/* Values of op's tunable fields in p (v has FM_MAX_TUNABLES entries; unused ones zero). */
void fm_problem_tunables(const fm_problem *p, int32_t *v);
void fm_problem_set_tunables(fm_problem *p, const int32_t *v);
/* Whether every tunable field of p is zero. */
int fm_problem_untuned(const fm_problem *p);

/* ---- pipelined transfers (core/src/pipeline.c) ---- */
/* How a problem whose host operands run on a GPU is cut (fm_pipeline_geometry): nchunks chunks of
 * `chunk` indices of the split axis, the last of `last` (== chunk: no remainder). */
typedef struct fm_pipeline_geom {
    int64_t extent, chunk, last;
    int nchunks;
    uint32_t split;                /* moved slots copied chunk by chunk */
    uint32_t whole;                /* moved slots copied whole before the first chunk */
    int64_t span[FM_MAX_SLOTS];    /* split slots: bytes of a full chunk's span */
    double in_bytes, out_bytes;    /* bytes the split slots move per call, host->device and back */
    double whole_bytes;            /* bytes the whole slots move (host->device) */
} fm_pipeline_geom;
/* The chunk rule (docs/design.md, "Pipelined transfers") for p, placed on a cuda exec_device with
 * some operands on the host, under FUSEMATH_PIPELINE's mode: FM_OK and *g when p is pipelined,
 * FM_ERR_NOT_APPLICABLE with why (no fm_fail message) when it is staged whole. A pure function. */
fm_status fm_pipeline_geometry(const fm_problem *p, int mode, fm_pipeline_geom *g, char *why, size_t why_size);
/* The rule's sizes: auto wants chunks of at least FM_PIPELINE_MIN_CHUNK moved bytes, about
 * FM_PIPELINE_CHUNKS of them, none over FM_PIPELINE_MAX_CHUNK unless one index is larger. */
#define FM_PIPELINE_MIN_CHUNK ((int64_t)4 << 20)
#define FM_PIPELINE_MAX_CHUNK ((int64_t)64 << 20)
#define FM_PIPELINE_CHUNKS 8
#define FM_PIPELINE_MAX_NCHUNKS 64
/* A chunk whose split slots span more than this (one index of the split axis is that large: an FFT slab)
 * is staged whole rather than held three times in pinned memory. */
#define FM_PIPELINE_MAX_RING_ENTRY ((int64_t)256 << 20) /* the ring: at most 768 MiB pinned per GPU */
/* Plan p (host operands, cuda execution) pipelined; FM_ERR_NOT_APPLICABLE with why in the buffer when
 * it is not (then the caller stages it whole). */
fm_status fm_plan_build_pipelined(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **plan,
                                  char *why, size_t why_size);
/* The model (docs/design.md, "Pipelined transfers"): seconds of p pipelined as g cuts it with `threads`
 * staging threads and `compute` seconds of GPU work, rates from profile pf (NULL: built-in); *staged
 * (non-NULL) the same problem staged whole. */
struct fm_profile;
double fm_pipeline_predict(const struct fm_profile *pf, const fm_pipeline_geom *g, double compute, int threads,
                           double *staged);
/* Tests only (test_pipeline_driver.c): plan pipelines with these memory operations, as on a cuda:0
 * that is there, instead of the CUDA module's (NULL: back to those). */
void fm_pipeline_test_device(const fm_device_ops *ops);
/* Free the context's pipeline streams, events and pinned buffers (context release). */
void fm_context_pipeline_free(fm_context *ctx);

/* For chunk rows: *sub = *p and *c cleared, then every present slot in `cut` that has nd axes, `axis` of
 * extent e > 1 and a real stride there cut to indices [lo, hi) of that axis (its shape and element
 * offset), the rest marked read whole in c->whole. */
void fm_chunk_cut_slots(const fm_problem *p, uint32_t cut, int nd, int axis, int64_t e, int64_t lo, int64_t hi,
                        fm_problem *sub, fm_chunk *c);

/* The rows (each in its operation's file). */
extern const fm_operation fm_operation_matmul;
extern const fm_operation fm_operation_fft;
extern const fm_operation fm_operation_rng;
extern const fm_operation fm_operation_solve;

/* Helpers every builder uses. The operation's slot names and roles fill p's header (op, nslots,
 * slot_names, output_mask, inplace_partner = -1, settings_key). */
void fm_problem_begin(fm_context *ctx, const fm_operation *op, fm_problem *p);
/* A descriptor's own validity (min_ndim <= ndim <= FM_MAX_NDIM, dtype, extents >= 0, its span in
 * 64 bits), the message naming the argument. */
fm_status fm_problem_check_descriptor(const fm_operation *op, const char *name, const fm_tensor *t, int min_ndim);
/* The present slots' devices and alignments into p, one device for all under FM_EXECUTION_AUTO,
 * p->exec_device from execution / device_id, no cuda device that does not exist; key alignment. */
fm_status fm_problem_place_devices(fm_context *ctx, const fm_operation *op, const fm_tensor *const *ts,
                                   const void *opts, int execution, int device_id, fm_problem *p);
/* FM_EXECUTION_BEST's choice of p->exec_device for operands on the devices p->t[] holds
 * (core/src/dispatch.c); the predictions go into p for describe(). */
fm_status fm_dispatch_best(fm_context *ctx, const fm_operation *op, const fm_tensor *const *ts, const void *opts,
                           int device_id, fm_problem *p);
/* The problem p (placed by best) becomes on the other candidate device, into q; 0 when there is
 * none or p is that already. For a problem no backend of the chosen device plans. */
int fm_dispatch_fallback(const fm_problem *p, fm_problem *q);
/* " best=cuda predicted cpu 2.41 ms cuda+xfer 0.73 ms" for a problem placed by best, else "". */
void fm_dispatch_describe(const fm_problem *p, char *buf, size_t size);

/* The problem of op for these operands and options: zeroed, built, key tails normalised. */
fm_status fm_operation_build(fm_context *ctx, const fm_operation *op, const fm_tensor *const *t, const void *opts,
                             fm_problem *p, fm_attachments *att);
/* A built problem planned: the cache, else wisdom's remembered choice, else the planner. */
fm_status fm_plan_built(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **plan);
/* Autotune a built problem on the operands at ptrs (core/src/autotune.c). */
fm_status fm_autotune_problem(fm_context *ctx, const fm_problem *p, const fm_attachments *att, void *const *ptrs,
                              int repeats, fm_plan **plan);

#endif
