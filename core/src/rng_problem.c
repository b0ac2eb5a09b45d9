/* rng_problem.c : validate an RNG fill (the output descriptor, the distribution and its
 * parameters, the mode) into a normalised fm_problem. The stream position is no part of the
 * problem, nor is the seed: execute reads both from fm_exec_args (fusemath.h, fm_rng_plan), so one plan serves every
 * call of a shape. Only the distribution's own parameters enter the key (the others zeroed). */
#include "operation.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

static const char *const slot_names[FM_RNG_NSLOTS] = {"out"};
static const uint8_t slot_roles[FM_RNG_NSLOTS] = {FM_SLOT_OUTPUT};
static const char *const dist_names[] = {"uniform", "normal", "lognormal", "exponential", "raw", "integers",
                                         "poisson"};
/* poisson's largest lam: NumPy's POISSON_LAM_MAX (int64 max - 10 sqrt(int64 max)), cuRAND's 400000 */
#define RNG_POISSON_LAM_MAX 9.223372006484771e18
#define RNG_CURAND_LAM_MAX 400000.0

void fm_rng_options_init(fm_rng_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->high = 1.0;
    o->stddev = 1.0;
    o->scale = 1.0;
    o->out_ndim = -1;
    o->lam = 1.0;
}

/* The integers' range [low, high] (both included) from the options; 0 when it is empty. */
static int integers_range(const fm_rng_options *o, int64_t *lo, int64_t *hi)
{
    *lo = o->int_low;
    if (o->endpoint) {
        *hi = o->int_high;
        return o->int_low <= o->int_high;
    }
    *hi = o->int_high - (o->int_high > INT64_MIN);
    return o->int_low < o->int_high;
}

static fm_status check_params(const fm_rng_options *o)
{
    const char *d = dist_names[o->distribution];
    switch (o->distribution) {
    case FM_RNG_UNIFORM:
        if (!isfinite(o->low) || !isfinite(o->high) || !(o->low < o->high))
            return fm_fail(FM_ERR_INVALID_ARGUMENT,
                           "rng: uniform low = %g, high = %g; expected finite low < high", o->low, o->high);
        if (!isfinite(o->high - o->low)) /* the width the fills scale by: inf would fill inf / nan (NumPy raises) */
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: uniform low = %g, high = %g; expected high - low "
                           "finite (it overflows to inf)", o->low, o->high);
        break;
    case FM_RNG_NORMAL:
    case FM_RNG_LOGNORMAL:
        /* with NumPy's names in parentheses: what Python callers passed */
        if (!isfinite(o->mean))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: %s mean%s = %g, expected a finite value", d,
                           o->distribution == FM_RNG_NORMAL ? " (loc)" : "", o->mean);
        if (!isfinite(o->stddev) || o->stddev < 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: %s stddev (%s) = %g, expected a finite value >= 0",
                           d, o->distribution == FM_RNG_NORMAL ? "scale" : "sigma", o->stddev);
        break;
    case FM_RNG_EXPONENTIAL:
        if (!isfinite(o->scale) || o->scale < 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT,
                           "rng: exponential scale = %g, expected a finite value >= 0", o->scale);
        break;
    case FM_RNG_INTEGERS: {
        int64_t lo, hi;
        if (o->endpoint != 0 && o->endpoint != 1)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: integers endpoint = %d, expected 0 or 1",
                           (int)o->endpoint);
        if (!integers_range(o, &lo, &hi))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: integers low = %lld, high = %lld; expected low %s high",
                           (long long)o->int_low, (long long)o->int_high, o->endpoint ? "<=" : "<");
        break;
    }
    case FM_RNG_POISSON:
        if (o->mode == FM_RNG_CURAND && !(o->lam > 0 && o->lam <= RNG_CURAND_LAM_MAX))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: poisson lam = %g, expected 0 < lam <= 400000 in "
                           "mode curand (cuRAND's range; mode portable takes 0 <= lam <= %.16g)",
                           o->lam, RNG_POISSON_LAM_MAX);
        if (!(o->lam >= 0 && o->lam <= RNG_POISSON_LAM_MAX))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: poisson lam = %g, expected a finite value with "
                           "0 <= lam <= %.16g (NumPy's bound)%s", o->lam, RNG_POISSON_LAM_MAX,
                           o->lam > RNG_POISSON_LAM_MAX ? ": lam too large" : "");
        break;
    default: break;
    }
    return FM_OK;
}

static fm_status check_options(const fm_rng_options *o)
{
    for (int i = 0; i < (int)(sizeof o->reserved / sizeof o->reserved[0]); i++)
        if (o->reserved[i] != 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT,
                           "rng: options.reserved[%d] = %d, expected 0 (fm_rng_options_init "
                           "sets it)",
                           i, (int)o->reserved[i]);
    if (o->distribution < FM_RNG_UNIFORM || o->distribution > FM_RNG_POISSON)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: distribution = %d, expected 0 (uniform), 1 (normal), "
                       "2 (lognormal), 3 (exponential), 4 (raw), 5 (integers) or 6 (poisson)",
                       (int)o->distribution);
    if (o->mode != FM_RNG_PORTABLE && o->mode != FM_RNG_CURAND)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: mode = %d, expected 0 (portable) or 1 (curand)",
                       (int)o->mode);
    if (o->mode == FM_RNG_CURAND && o->distribution == FM_RNG_EXPONENTIAL)
        return fm_fail(FM_ERR_NOT_SUPPORTED,
                       "rng: mode curand has no exponential (cuRAND generates none), expected "
                       "mode portable");
    if (o->mode == FM_RNG_CURAND && o->distribution == FM_RNG_INTEGERS)
        return fm_fail(FM_ERR_NOT_SUPPORTED,
                       "rng: mode curand has no integers (cuRAND generates none), expected "
                       "mode portable");
    if (o->execution < FM_EXECUTION_AUTO || o->execution > FM_EXECUTION_BEST || o->device_id < 0 ||
        o->num_threads < 0 || o->num_threads > FM_MAX_THREADS)
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "rng: execution = %d, device_id = %d, num_threads = %d; expected "
                       "execution 0..3 (auto, cpu, cuda, best), device_id >= 0 and 0 <= num_threads <= %d",
                       (int)o->execution, (int)o->device_id, (int)o->num_threads, FM_MAX_THREADS);
    if (o->out_ndim < -1 || o->out_ndim > FM_MAX_NDIM)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: out_ndim = %d, expected -1 (not given) or 0..%d",
                       (int)o->out_ndim, FM_MAX_NDIM);
    if (o->out_dtype != 0 && fm_dtype_size((fm_dtype)o->out_dtype) == 0)
        return fm_fail(FM_ERR_DTYPE, "rng: out_dtype = %d is not a dtype (0: the distribution's default)",
                       (int)o->out_dtype);
    return check_params(o);
}

/* The integer dtypes' ranges (integers' low and high must lie within out's). */
static int int_dtype_range(fm_dtype dt, int64_t *mn, int64_t *mx)
{
    switch (dt) {
    case FM_I8: *mn = INT8_MIN, *mx = INT8_MAX; return 1;
    case FM_I16: *mn = INT16_MIN, *mx = INT16_MAX; return 1;
    case FM_I32: *mn = INT32_MIN, *mx = INT32_MAX; return 1;
    case FM_I64: *mn = INT64_MIN, *mx = INT64_MAX; return 1;
    case FM_U8: *mn = 0, *mx = UINT8_MAX; return 1;
    case FM_U16: *mn = 0, *mx = UINT16_MAX; return 1;
    case FM_U32: *mn = 0, *mx = UINT32_MAX; return 1;
    default: return 0;
    }
}

static fm_status check_dtype(const fm_rng_options *o, fm_dtype dt)
{
    const char *want = "float32 or float64";
    int ok = dt == FM_F32 || dt == FM_F64;
    switch (o->distribution) {
    case FM_RNG_RAW: ok = dt == FM_U32, want = "uint32"; break;
    case FM_RNG_POISSON:
        ok = dt == FM_I64 || (o->mode == FM_RNG_CURAND && dt == FM_U32);
        want = o->mode == FM_RNG_CURAND ? "int64 or uint32" : "int64 (uint32 in mode curand)";
        break;
    case FM_RNG_INTEGERS: {
        int64_t mn, mx, lo, hi;
        want = "int8, int16, int32, int64, uint8, uint16 or uint32";
        if (!(ok = int_dtype_range(dt, &mn, &mx)))
            break;
        integers_range(o, &lo, &hi);
        if (lo < mn || hi > mx)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: integers low = %lld, high = %lld%s are out of bounds "
                           "for %s, expected %lld <= low <= high%s <= %lld", (long long)o->int_low,
                           (long long)o->int_high, o->endpoint ? " (endpoint)" : "", fm_dtype_word(dt),
                           (long long)mn, o->endpoint ? "" : " - 1", (long long)mx);
        break;
    }
    default: break;
    }
    if (ok)
        return FM_OK;
    return fm_fail(FM_ERR_DTYPE, "rng: dtype %s (out's), expected %s for %s", fm_dtype_word(dt), want,
                   dist_names[o->distribution]);
}

/* A float32 out: the fills compute in float from the parameters rounded to float (uniform's low and
 * width), so each must be finite there, else every value is inf or nan. */
static fm_status check_f32_params(const fm_rng_options *o, fm_dtype dt)
{
    if (dt != FM_F32)
        return FM_OK;
    const char *d = dist_names[o->distribution];
    int ok = 1;
    switch (o->distribution) {
    case FM_RNG_UNIFORM: ok = isfinite((float)o->low) && isfinite((float)(o->high - o->low)); break;
    case FM_RNG_NORMAL:
    case FM_RNG_LOGNORMAL: ok = isfinite((float)o->mean) && isfinite((float)o->stddev); break;
    case FM_RNG_EXPONENTIAL: ok = isfinite((float)o->scale); break;
    default: return FM_OK;
    }
    if (ok)
        return FM_OK;
    if (o->distribution == FM_RNG_UNIFORM)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: uniform low = %g, high = %g for a float32 out; expected low "
                       "and high - low within float32's range (|x| <= 3.4028235e+38)", o->low, o->high);
    if (o->distribution == FM_RNG_EXPONENTIAL)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: exponential scale = %g for a float32 out; expected a scale "
                       "within float32's range (<= 3.4028235e+38)", o->scale);
    return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: %s mean = %g, stddev = %g for a float32 out; expected both "
                   "within float32's range (|x| <= 3.4028235e+38)", d, o->mean, o->stddev);
}

/* out: C-contiguous (values are written in row-major order of its shape); matching the options'
 * out_ndim / out_shape / out_dtype when those are given. */
static fm_status check_out(const fm_rng_options *o, const fm_tensor *out)
{
    fm_status s = fm_problem_check_descriptor(&fm_operation_rng, "out", out, 0);
    if (s != FM_OK || (s = check_dtype(o, out->dtype)) != FM_OK || (s = check_f32_params(o, out->dtype)) != FM_OK)
        return s;
    int64_t want = 1;
    for (int i = out->ndim - 1; i >= 0 && fm_tensor_numel(out) > 0; i--) {
        if (out->shape[i] > 1 && out->strides[i] != want)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: out has stride %lld on axis %d, expected %lld (a "
                           "C-contiguous out; pass a contiguous array and copy it into the strided one)",
                           (long long)out->strides[i], i, (long long)want);
        want *= out->shape[i];
    }
    if (o->out_dtype != 0 && o->out_dtype != (int32_t)out->dtype)
        return fm_fail(FM_ERR_DTYPE, "rng: out has dtype %s but options.out_dtype is %s",
                       fm_dtype_word(out->dtype), fm_dtype_word((fm_dtype)o->out_dtype));
    if (o->out_ndim < 0)
        return FM_OK;
    int same = o->out_ndim == out->ndim;
    for (int i = 0; same && i < out->ndim; i++)
        same = o->out_shape[i] == out->shape[i];
    if (!same)
        return fm_fail(FM_ERR_SHAPE, "rng: out's shape differs from options.out_shape (out_ndim = %d; set "
                       "out_ndim = -1 when planning with out)", (int)o->out_ndim);
    return FM_OK;
}

static fm_status build_fields(fm_context *ctx, const fm_tensor *const *ts, const fm_rng_options *o,
                              fm_problem *p)
{
    const fm_tensor *out = ts[FM_RNG_OUT];
    if (!out)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng: out is NULL, expected a tensor descriptor");
    fm_status s;
    if ((s = check_options(o)) != FM_OK || (s = check_out(o, out)) != FM_OK)
        return s;
    p->t[FM_RNG_OUT] = *out;
    p->t[FM_RNG_OUT].data = NULL;
    if ((s = fm_problem_place_devices(ctx, &fm_operation_rng, ts, o, o->execution, o->device_id, p)) != FM_OK)
        return s;
    fm_rng_params *rp = &p->u.rng;
    rp->distribution = o->distribution;
    rp->mode = o->mode;
    switch (o->distribution) {
    case FM_RNG_UNIFORM: rp->a = o->low, rp->b = o->high; break;
    case FM_RNG_NORMAL:
    case FM_RNG_LOGNORMAL: rp->a = o->mean, rp->b = o->stddev; break;
    case FM_RNG_EXPONENTIAL: rp->a = o->scale; break;
    case FM_RNG_INTEGERS: integers_range(o, &rp->ia, &rp->ib); break;
    case FM_RNG_POISSON: rp->a = o->lam; break;
    default: break;
    }
    rp->num_threads = ctx ? fm_context_threads_for(ctx, o->num_threads) : 0;
    return FM_OK;
}

static void options_init(void *o) { fm_rng_options_init(o); }

static fm_status build(fm_context *ctx, const fm_tensor *const *ts, const void *opts, fm_problem *p,
                       fm_attachments *att)
{
    (void)att;
    return build_fields(ctx, ts, opts, p);
}

/* out's descriptor: out's own shape and dtype when it is given, else the options' out_shape and
 * out_dtype (0: float64, uint32 for raw, int64 for integers and poisson), C-contiguous, on the execution's device. */
static fm_status output_specs(const fm_tensor *const *ts, const void *opts_, fm_tensor *specs,
                              uint32_t *written)
{
    const fm_rng_options *o = opts_;
    fm_status s = check_options(o);
    if (s != FM_OK)
        return s;
    fm_tensor out;
    if (ts[FM_RNG_OUT]) {
        const fm_tensor *u = ts[FM_RNG_OUT];
        if ((s = fm_problem_check_descriptor(&fm_operation_rng, "out", u, 0)) != FM_OK ||
            (s = fm_tensor_init(&out, NULL, u->device, u->dtype, u->ndim, u->shape, NULL)) != FM_OK)
            return s;
    } else {
        if (o->out_ndim < 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT,
                           "rng: out is NULL and options.out_ndim = -1; expected an out "
                           "descriptor or the output's shape in out_ndim / out_shape");
        fm_dtype dt = o->out_dtype                                                            ? (fm_dtype)o->out_dtype
                      : o->distribution == FM_RNG_RAW                                         ? FM_U32
                      : o->distribution == FM_RNG_INTEGERS || o->distribution == FM_RNG_POISSON ? FM_I64
                                                                                              : FM_F64;
        fm_device dev = {o->execution == FM_EXECUTION_CUDA ? FM_DEVICE_CUDA : FM_DEVICE_CPU,
                         o->execution == FM_EXECUTION_CUDA ? o->device_id : 0};
        if ((s = fm_tensor_init(&out, NULL, dev, dt, o->out_ndim, o->out_shape, NULL)) != FM_OK)
            return fm_fail(s, "rng: options.out_shape has a negative extent, expected extents >= 0");
    }
    const fm_tensor *all[FM_RNG_NSLOTS] = {&out};
    fm_problem p = {0};
    if ((s = build_fields(NULL, all, o, &p)) != FM_OK)
        return s;
    specs[FM_RNG_OUT] = out;
    *written = 1u << FM_RNG_OUT;
    return FM_OK;
}

/* The per-call arguments (fusemath.h, fm_rng_plan) for the planned fill, checked once here for every
 * backend: the position, its end below 2^63, and curand mode's run of f64 calls. */
static fm_status check_exec_args(const fm_problem *p, const fm_exec_args *args)
{
    const int64_t pos = args->ints[0], a = args->ints[1], b = args->ints[2];
    const int64_t n = fm_tensor_numel(&p->t[FM_RNG_OUT]);
    if (pos < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "rng execute: position args.ints[0] = %lld, expected >= 0",
                       (long long)pos);
    if (pos > INT64_MAX - n)
        return fm_fail(FM_ERR_TOO_LARGE, "rng execute: position %lld + %lld values passes 2^63 - 1",
                       (long long)pos, (long long)n);
    if (p->u.rng.mode == FM_RNG_PORTABLE && (a || b))
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "rng execute: args.ints[1..2] = %lld, %lld; expected 0, 0 (the run "
                       "of f64 calls is curand mode's state)",
                       (long long)a, (long long)b);
    if (a < 0 || a > b || b > pos)
        return fm_fail(FM_ERR_INVALID_ARGUMENT,
                       "rng execute: the run of f64 calls args.ints[1..2] = [%lld, %lld), "
                       "expected 0 <= ints[1] <= ints[2] <= the position %lld",
                       (long long)a, (long long)b, (long long)pos);
    return FM_OK;
}

/* FM_EXECUTION_BEST: the values written. */
static double work(const fm_tensor *const *ts, const void *opts, fm_dtype *dtype, unsigned *devices, int *threads)
{
    (void)devices;
    *threads = ((const fm_rng_options *)opts)->num_threads;
    if (!ts[FM_RNG_OUT])
        return -1;
    *dtype = ts[FM_RNG_OUT]->dtype;
    return (double)fm_tensor_numel(ts[FM_RNG_OUT]);
}

static double problem_work(const fm_problem *p, fm_dtype *dtype, int *variant)
{
    *variant = 0;
    *dtype = p->t[FM_RNG_OUT].dtype;
    return (double)fm_tensor_numel(&p->t[FM_RNG_OUT]);
}

/* fm_context_calibrate: standard normal f32 and f64 fills. */
static int calibration_problem(int index, int quick, int execution, fm_tensor *t, void *opts, uint32_t *slots)
{
    static const int64_t quick_n[] = {1 << 12, 1 << 18, 1 << 24}, full_n[] = {1 << 10, 1 << 14, 1 << 18, 1 << 22,
                                                                             1 << 26};
    const int count = quick ? 3 : 5;
    if (index < 0 || index >= 2 * count)
        return 0;
    const int64_t n = (quick ? quick_n : full_n)[index % count];
    const fm_device dev = {execution == FM_EXECUTION_CUDA ? FM_DEVICE_CUDA : FM_DEVICE_CPU, 0};
    fm_tensor_init(&t[FM_RNG_OUT], NULL, dev, index < count ? FM_F32 : FM_F64, 1, &n, NULL);
    fm_rng_options *o = opts;
    fm_rng_options_init(o);
    o->distribution = FM_RNG_NORMAL;
    o->execution = execution;
    *slots = 1u << FM_RNG_OUT;
    return 1;
}

/* Pipelined transfers (core/src/pipeline.c): blocks of out's first axis, each the stream at its
 * own position (out is C-contiguous: the block's first value is value lo * (numel / extent)). curand
 * mode is not cut: its run of f64 calls is state a block in the middle would have to re-derive. */
static int64_t chunk(const fm_problem *p, int64_t lo, int64_t hi, fm_problem *sub, fm_chunk *c, const char **why)
{
    const fm_tensor *out = &p->t[FM_RNG_OUT];
    if (p->u.rng.mode != FM_RNG_PORTABLE)
        return *why = "curand mode's streams are not cut into blocks", 0;
    if (out->ndim < 1 || out->shape[0] < 1)
        return *why = "out has no first axis to cut", 0;
    int a = 0; /* the first axis of more than one index: leading axes of one ((1, n) fills) are no cut */
    while (a + 1 < out->ndim && out->shape[a] == 1)
        a++;
    if (!sub)
        return out->shape[a];
    *sub = *p;
    memset(c, 0, sizeof *c);
    int64_t inner = 1;
    for (int i = a + 1; i < out->ndim; i++)
        inner *= out->shape[i];
    sub->t[FM_RNG_OUT].shape[a] = hi - lo;
    c->offset[FM_RNG_OUT] = lo * out->strides[a];
    c->position = lo * inner; /* values run in C order of out's shape */
    return out->shape[a];
}

const fm_operation fm_operation_rng = {
    .op = FM_OP_RNG,
    .name = "rng",
    .nslots = FM_RNG_NSLOTS,
    .slot_names = slot_names,
    .slot_roles = slot_roles,
    .options_size = sizeof(fm_rng_options),
    .options_init = options_init,
    .build = build,
    .output_specs = output_specs,
    .exec_ints = 4, /* position; curand mode's run of f64 calls [ints[1], ints[2]); the seed */
    .check_exec_args = check_exec_args,
    .work = work,
    .problem_work = problem_work,
    .calibration_problem = calibration_problem,
    .chunk = chunk,
    .cpu_threads = offsetof(fm_rng_params, num_threads),
};

fm_status fm_rng_plan(fm_context *ctx, const fm_tensor *out, const fm_rng_options *opts, fm_plan **plan)
{
    const fm_tensor *ts[FM_RNG_NSLOTS] = {out};
    return fm_plan_create(ctx, FM_OP_RNG, ts, FM_RNG_NSLOTS, opts, plan);
}

fm_status fm_rng(fm_context *ctx, const fm_tensor *out, const fm_rng_options *opts, uint64_t seed,
                 int64_t position, void *stream)
{
    const fm_tensor *ts[FM_RNG_NSLOTS] = {out};
    fm_exec_args args;
    fm_exec_args_init(&args);
    args.ints[0] = position;
    args.ints[3] = (int64_t)seed;
    return fm_run(ctx, FM_OP_RNG, ts, FM_RNG_NSLOTS, opts, &args, stream);
}
