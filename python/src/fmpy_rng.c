/* fmpy_rng.c : the RNG's part of call() (fmpy_rng_def): its options from Python objects, its one
 * slot's name, and the per-call seed and stream position (fm_exec_args.ints) that the front
 * (fusemath.random.Generator) keeps. */
#include "fmpy.h"

/* options: distribution, mode, seed, p0, p1 (uniform: low, high; normal / lognormal: mean, stddev;
 * exponential: scale; poisson: lam; integers: low, high as exact ints), execution, device_id,
 * num_threads, shape (a tuple of ints), dtype (the library's name, "f32"), position, run_a, run_b
 * (curand mode's run of f64 calls), p2 (integers: endpoint, 0 or 1; else 0) */
#define RNG_NOPTS 14

static int rng_fill(fmpy_call *c, PyObject *const *o)
{
    fm_rng_options *opt = &c->o.rng;
    fm_rng_options_init(opt);
    const char *f = c->prefix;
    long long v[5] = {0, 0, 0, 0, 0};
    static const char *const names[] = {"distribution", "mode", "execution", "device_id", "num_threads"};
    PyObject *const objs[] = {o[0], o[1], o[5], o[6], o[7]};
    for (int i = 0; i < 5; i++) /* ranges are the core's checks; these only fit the fields */
        if (fmpy_int_arg(f, names[i], objs[i], INT32_MIN, INT32_MAX, &v[i]) < 0)
            return -1;
    opt->distribution = (int32_t)v[0], opt->mode = (int32_t)v[1];
    opt->execution = (int32_t)v[2], opt->device_id = (int32_t)v[3], opt->num_threads = (int32_t)v[4];
    const unsigned long long seed = PyLong_Check(o[2]) ? PyLong_AsUnsignedLongLong(o[2]) : 0;
    if (!PyLong_Check(o[2]) || PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%sseed must be an int in [0, 2**64)", f);
        return -1;
    }
    double p[2][2] = {{0, 0}, {0, 0}};
    if (opt->distribution == FM_RNG_INTEGERS) { /* exact int64s (beyond 2^53), named as NumPy names them */
        long long lo = 0, hi = 0, ep = 0;
        if (fmpy_int_arg(f, "low", o[3], INT64_MIN, INT64_MAX, &lo) < 0 ||
            fmpy_int_arg(f, "high", o[4], INT64_MIN, INT64_MAX, &hi) < 0 ||
            fmpy_int_arg(f, "endpoint", o[13], INT32_MIN, INT32_MAX, &ep) < 0)
            return -1;
        opt->int_low = lo, opt->int_high = hi, opt->endpoint = (int32_t)ep;
    } else if (fmpy_number_arg(f, opt->distribution == FM_RNG_POISSON ? "lam" : "p0", o[3], p[0]) < 0 ||
               fmpy_number_arg(f, "p1", o[4], p[1]) < 0) {
        return -1;
    }
    switch (opt->distribution) {
    case FM_RNG_UNIFORM: opt->low = p[0][0], opt->high = p[1][0]; break;
    case FM_RNG_NORMAL:
    case FM_RNG_LOGNORMAL: opt->mean = p[0][0], opt->stddev = p[1][0]; break;
    case FM_RNG_EXPONENTIAL: opt->scale = p[0][0]; break;
    case FM_RNG_POISSON: opt->lam = p[0][0]; break;
    default: break;
    }
    if (!PyTuple_Check(o[8]) || PyTuple_Size(o[8]) > FM_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "%ssize must be a tuple of at most %d ints", f, FM_MAX_NDIM);
        return -1;
    }
    opt->out_ndim = (int32_t)PyTuple_Size(o[8]);
    for (int i = 0; i < opt->out_ndim; i++) {
        long long e = 0;
        if (fmpy_int_arg(f, "size", PyTuple_GetItem(o[8], i), INT64_MIN, INT64_MAX, &e) < 0)
            return -1;
        opt->out_shape[i] = e;
    }
    if ((opt->out_dtype = (int32_t)fmpy_dtype_by_name(o[9])) == FM_DTYPE_INVALID) {
        PyErr_Format(PyExc_TypeError, "%sdtype %R is not one the library knows", f, o[9]);
        return -1;
    }
    fm_exec_args_init(&c->args);
    static const char *const pos_names[] = {"position", "run_a", "run_b"};
    for (int i = 0; i < 3; i++) { /* their meaning is the core's check */
        long long x = 0;
        if (fmpy_int_arg(f, pos_names[i], o[10 + i], INT64_MIN, INT64_MAX, &x) < 0)
            return -1;
        c->args.ints[i] = x;
    }
    c->args.ints[3] = (int64_t)seed; /* per call: one plan serves every generator */
    c->has_args = 1;
    return 0;
}

static const char *rng_argname(const fmpy_call *c, int slot)
{
    (void)c, (void)slot;
    return "out";
}

static int rng_writable(const fmpy_call *c, int slot)
{
    (void)c;
    return slot == FM_RNG_OUT;
}

static PyObject *rng_result(fmpy_call *c) { return Py_NewRef(c->res[FM_RNG_OUT]); }

static void dev_text(char *buf, size_t n, int dev)
{
    if (dev < 0)
        snprintf(buf, n, "cpu");
    else
        snprintf(buf, n, "cuda:%d", dev);
}

/* The generator's device (execution cuda: device_id; else the host) is the results' device; an
 * out= elsewhere is refused here, where the core would stage it (the generator fills its own
 * device's memory, as NumPy's and CuPy's do). */
static int rng_place(fmpy_call *c)
{
    const fm_rng_options *o = &c->o.rng;
    const int gen = o->execution == FM_EXECUTION_CUDA ? o->device_id : -1;
    if (c->given >> FM_RNG_OUT & 1u) {
        const int dev = fmpy_device_index(&c->tens[FM_RNG_OUT]);
        if (dev != gen) {
            char a[24], b[24];
            dev_text(a, sizeof a, dev);
            dev_text(b, sizeof b, gen);
            PyErr_Format(fmpy_error_class(c->st, FM_ERR_DEVICE),
                         "%sout is on %s but the generator is on %s; pass an out on %s (or use a generator "
                         "made with device='%s')", c->prefix, a, b, b, a);
            return -1;
        }
    }
    c->dev = gen;
    return 0;
}

const fmpy_opdef fmpy_rng_def = {
    .op = FM_OP_RNG,
    .fname = "rng",
    .nopts = RNG_NOPTS,
    .out_dtype_status = FM_ERR_DTYPE,
    .out_dtype_hint = " (the dtype= asked for)",
    .fill = rng_fill,
    .argname = rng_argname,
    .writable = rng_writable,
    .place = rng_place,
    .result = rng_result,
};
