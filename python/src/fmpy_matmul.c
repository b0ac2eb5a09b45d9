/* fmpy_matmul.c : matmul options from Python objects, and the low-level entry points
 * matmul, plan_matmul and autotune (the caller gives every array). */
#include "fmpy.h"

/* ------------------------------------------------------------------------ */
/* Matmul options.                                                          */
/* ------------------------------------------------------------------------ */
int fmpy_epilogue_arg(fm_state *st, const char *fname, PyObject *o, unsigned *epi)
{
    if (!o || o == Py_None)
        return 0;
    if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *text = PyUnicode_AsUTF8AndSize(o, &n);
        if (!text)
            return -1;
        if ((Py_ssize_t)strlen(text) != n) {
            PyErr_Format(PyExc_ValueError, "%sepilogue contains a NUL character", fname);
            return -1;
        }
        fm_clear_error();
        fm_status s = fm_epilogue_parse(text, epi);
        if (s != FM_OK) {
            fmpy_raise_status(st, s);
            return -1;
        }
        return 0;
    }
    long long v = 0;
    if (fmpy_int_arg(fname, "epilogue", o, 0, (long long)UINT32_MAX, &v) < 0)
        return -1;
    *epi = (unsigned)v;
    return 0;
}

int fmpy_fill_options(fm_state *st, const char *fname, const opt_objs *a, fm_matmul_options *o)
{
    fm_matmul_options_init(o);
    long long v;
    if (fmpy_number_arg(fname, "alpha", a->alpha, o->alpha) < 0 || fmpy_number_arg(fname, "beta", a->beta, o->beta) < 0)
        return -1;
    if (fmpy_epilogue_arg(st, fname, a->epilogue, &o->epilogue) < 0)
        return -1;
    v = o->execution;
    if (fmpy_int_arg(fname, "execution", a->execution, 0, 2, &v) < 0)
        return -1;
    o->execution = (int32_t)v;
    v = o->device_id;
    if (fmpy_int_arg(fname, "device_id", a->device_id, 0, INT32_MAX, &v) < 0)
        return -1;
    o->device_id = (int32_t)v;
    v = o->num_threads;
    if (fmpy_int_arg(fname, "num_threads", a->num_threads, 0, INT32_MAX, &v) < 0)
        return -1;
    o->num_threads = (int32_t)v;
    v = o->panel_rows;
    if (fmpy_int_arg(fname, "panel_rows", a->panel_rows, 0, INT32_MAX, &v) < 0)
        return -1;
    o->panel_rows = (int32_t)v;
    v = o->cpu_strategy;
    if (fmpy_int_arg(fname, "cpu_strategy", a->cpu_strategy, FM_CPU_STRATEGY_AUTO, FM_CPU_STRATEGY_KERNEL, &v) < 0)
        return -1;
    o->cpu_strategy = (int32_t)v;
    v = o->compute;
    if (fmpy_int_arg(fname, "compute", a->compute, 0, 1, &v) < 0)
        return -1;
    o->compute = (int32_t)v;
    if (a->clamp && a->clamp != Py_None) {
        PyObject *seq = a->clamp;
        if (PyUnicode_Check(seq) || !PySequence_Check(seq) || PySequence_Size(seq) != 2) {
            PyErr_Clear();
            fmpy_raise_type(PyExc_TypeError, fname, "clamp", "a pair of numbers (lo, hi)", seq);
            return -1;
        }
        for (int i = 0; i < 2; i++) {
            PyObject *x = PySequence_GetItem(seq, i);
            double d = x ? PyFloat_AsDouble(x) : -1.0;
            Py_XDECREF(x);
            if (d == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                fmpy_raise_type(PyExc_TypeError, fname, "clamp", "a pair of real numbers (lo, hi)", seq);
                return -1;
            }
            o->clamp[i] = d;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Matmul entry points (low level: the caller gives every array).            */
/* ------------------------------------------------------------------------ */
enum { MM_RUN, MM_PLAN, MM_TUNE };
enum {
    K_A, K_B, K_C, K_BIAS, K_D, K_AUX, K_ALPHA, K_BETA, K_EPI, K_EXEC, K_DEV, K_NTH, K_PANEL, K_STRAT,
    K_STREAM, K_BGRAD, K_SCALE, K_COMPUTE, K_CLAMP, K_REPEATS, K_COUNT
};

#define MM_COMMON_NAMES                                                                                 \
    "a", "b", "c", "bias", "d", "aux", "alpha", "beta", "epilogue", "execution", "device_id", "num_threads", \
        "panel_rows", "cpu_strategy"
#define MM_COMMON_MAP 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13
static const char *const mm_run_names[] = {MM_COMMON_NAMES, "stream", "bgrad", "scale", "compute", "clamp"};
static const int mm_run_map[] = {MM_COMMON_MAP, K_STREAM, K_BGRAD, K_SCALE, K_COMPUTE, K_CLAMP};
static const char *const mm_plan_names[] = {MM_COMMON_NAMES, "bgrad", "scale", "compute", "clamp"};
static const int mm_plan_map[] = {MM_COMMON_MAP, K_BGRAD, K_SCALE, K_COMPUTE, K_CLAMP};
static const char *const mm_tune_names[] = {MM_COMMON_NAMES, "repeats", "bgrad", "scale", "compute", "clamp"};
static const int mm_tune_map[] = {MM_COMMON_MAP, K_REPEATS, K_BGRAD, K_SCALE, K_COMPUTE, K_CLAMP};

/* Convert the operand objects (slot order); a, b, d required. */
static int convert_slots(fm_state *st, PyObject **objs, unsigned epi, fm_tensor *tens, fm_hold *holds,
                         const fm_tensor **tp)
{
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
        fmpy_hold_init(&holds[i]);
        tp[i] = NULL;
    }
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
        PyObject *o = objs[i];
        int required = (i == FM_MATMUL_A || i == FM_MATMUL_B || i == FM_MATMUL_D);
        if (!o || o == Py_None) {
            if (required) {
                PyErr_Format(PyExc_TypeError, "argument '%s' must be an array, not None", fmpy_slot_names[i]);
                return -1;
            }
            continue;
        }
        int writable = i == FM_MATMUL_D || i == FM_MATMUL_BGRAD || (i == FM_MATMUL_AUX && (epi & FM_EPILOGUE_AUX));
        if (fmpy_tensor_from_object(st, o, fmpy_slot_names[i], writable, &tens[i], &holds[i]) < 0)
            return -1;
        tp[i] = &tens[i];
    }
    return 0;
}

void fmpy_release_slots(fm_hold *holds)
{
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        fmpy_hold_release(&holds[i]);
}

static PyObject *matmul_common(PyObject *module, int mode, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    fm_state *st = fmpy_module_state(module);
    const char *fname = mode == MM_RUN ? "matmul" : mode == MM_PLAN ? "plan_matmul" : "autotune";
    const char *const *names = mode == MM_RUN ? mm_run_names : mode == MM_PLAN ? mm_plan_names : mm_tune_names;
    const int *map = mode == MM_RUN ? mm_run_map : mode == MM_PLAN ? mm_plan_map : mm_tune_map;
    int nnames = mode == MM_PLAN ? 18 : 19;
    PyObject *raw[19], *v[K_COUNT];
    if (fmpy_parse_args(fname, args, nargs, kwnames, names, nnames, 2, raw) < 0)
        return NULL;
    for (int i = 0; i < K_COUNT; i++)
        v[i] = NULL;
    for (int i = 0; i < nnames; i++)
        v[map[i]] = raw[i];
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%s(): ", fname);
    opt_objs oo = {v[K_ALPHA], v[K_BETA], v[K_EPI], v[K_EXEC], v[K_DEV], v[K_NTH], v[K_PANEL], v[K_STRAT],
                   v[K_COMPUTE], v[K_CLAMP]};
    fm_matmul_options opts;
    if (fmpy_fill_options(st, prefix, &oo, &opts) < 0)
        return NULL;
    void *stream = NULL;
    long long repeats = 3;
    if (v[K_STREAM] && fmpy_stream_from_object(st, prefix, v[K_STREAM], &stream) < 0)
        return NULL;
    if (fmpy_int_arg(prefix, "repeats", v[K_REPEATS], 1, 1000000, &repeats) < 0)
        return NULL;

    PyObject *objs[FM_MATMUL_NSLOTS] = {v[K_A], v[K_B], v[K_C], v[K_BIAS], v[K_D], v[K_AUX], v[K_BGRAD], v[K_SCALE]};
    fm_tensor tens[FM_MATMUL_NSLOTS];
    fm_hold holds[FM_MATMUL_NSLOTS];
    const fm_tensor *tp[FM_MATMUL_NSLOTS];
    if (convert_slots(st, objs, opts.epilogue, tens, holds, tp) < 0) {
        fmpy_release_slots(holds);
        return NULL;
    }
    fm_status s;
    fm_plan *plan = NULL;
    int tuning = (int)repeats;
    Py_BEGIN_ALLOW_THREADS
    fm_clear_error();
    switch (mode) {
    case MM_RUN:
        s = fm_matmul_v(st->ctx, tp, &opts, stream);
        break;
    case MM_PLAN:
        s = fm_matmul_plan_v(st->ctx, tp, &opts, &plan);
        break;
    default:
        s = fm_matmul_autotune_v(st->ctx, tp, &opts, tuning, &plan);
        break;
    }
    Py_END_ALLOW_THREADS
    fmpy_release_slots(holds);
    if (s != FM_OK) {
        fm_plan_release(plan);
        return fmpy_raise_status(st, s);
    }
    if (mode == MM_RUN)
        Py_RETURN_NONE;
    if (!plan)
        return fmpy_raise_msg(st, FM_ERR_INTERNAL, "the library returned FM_OK without a plan");
    return fmpy_plan_wrap(st, module, plan);
}

#define MM_SIG_COMMON                                                                                   \
    "a, b, c, bias, d, aux, alpha=1.0, beta=0.0, epilogue=0, execution=0, device_id=0,\n"               \
    "       num_threads=0, panel_rows=0, cpu_strategy=0"

FMPY_DOC_VAR(fmpy_matmul_doc,
             "matmul(" MM_SIG_COMMON ", stream=None, bgrad=None, scale=None,\n"
             "       compute=0, clamp=None)\n--\n\n"
             "Low level: D = act(alpha*A@B + beta*C + bias) into the array d (and aux, bgrad), with fm_matmul_v.\n"
             "a: (..., M, K), b: (..., K, N) (no 1-D promotion here), c/bias/aux/bgrad/scale may be None.\n"
             "epilogue is an int of EPILOGUE_* bits or a string; compute 0 = default, 1 = tf32; clamp (lo, hi).\n"
             "The GIL is released while it runs; GPU work is queued on `stream` without synchronizing.");

PyObject *fmpy_mod_matmul(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return matmul_common(module, MM_RUN, args, nargs, kwnames);
}

FMPY_DOC_VAR(fmpy_plan_matmul_doc,
             "plan_matmul(" MM_SIG_COMMON ", bgrad=None, scale=None,\n"
             "            compute=0, clamp=None)\n--\n\n"
             "Plan D = act(alpha*A@B + beta*C + bias) for operands laid out like the given arrays\n"
             "(their shapes, strides, dtypes, devices and alignment; the data is not touched). Returns a Plan.");

PyObject *fmpy_mod_plan_matmul(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return matmul_common(module, MM_PLAN, args, nargs, kwnames);
}

FMPY_DOC_VAR(fmpy_autotune_doc,
             "autotune(" MM_SIG_COMMON ", repeats=3, bgrad=None,\n"
             "         scale=None, compute=0, clamp=None)\n--\n\n"
             "Time the candidate configurations on these arrays (d, aux and bgrad are overwritten) and\n"
             "return a Plan with the fastest; it also replaces the cached plan for this problem.");

PyObject *fmpy_mod_autotune(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return matmul_common(module, MM_TUNE, args, nargs, kwnames);
}
