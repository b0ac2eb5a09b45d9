/* fmpy_fft.c : FFT's part of call() (fmpy_fft_def): its options from Python objects and the
 * Python names of its slots. */
#include "fmpy.h"

/* options (all positional, None = default): kind, inverse, axes, norm, effort, execution, device_id,
 * num_threads, prolog_ops, prolog_scale, epilog_ops, epilog_scale, prolog_source, prolog_symbol,
 * epilog_source, epilog_symbol, gpu_prolog, n (c2r's last_n). The strings stay owned by the caller's
 * str objects, alive for the call; shapes, n / s padding and NumPy semantics live in fusemath.fft.
 * A range error has the class of the core's (InvalidArgumentError). */
static int fft_fill(fmpy_call *c, PyObject *const *o)
{
    const char *fname = c->prefix;
    fm_fft_options *opt = &c->o.fft;
    fm_fft_options_init(opt);
    static const char *const names[] = {"kind", "norm", "effort", "execution", "device_id", "num_threads",
                                        "gpu_prolog", "n"};
    static const int at[] = {0, 3, 4, 5, 6, 7, 16, 17};
    int32_t *fields[] = {&opt->kind, &opt->norm, &opt->effort, &opt->execution, &opt->device_id, &opt->num_threads,
                         &opt->gpu_prolog, &opt->last_n};
    const long long his[] = {2, 2, 2, FM_EXECUTION_BEST, INT32_MAX, FM_MAX_THREADS, 3, INT32_MAX};
    long long v;
    for (int i = 0; i < 8; i++) {
        v = *fields[i];
        if (fmpy_int_arg(fname, names[i], o[at[i]], 0, his[i], &v) < 0)
            return fmpy_range_error_class(c->st);
        *fields[i] = (int32_t)v;
    }
    if (o[1] != Py_None) {
        int t = PyObject_IsTrue(o[1]);
        if (t < 0)
            return -1;
        opt->inverse = t;
    }
    if (o[2] != Py_None) {
        PyObject *seq = PySequence_Check(o[2]) && !PyUnicode_Check(o[2]) ? PySequence_Tuple(o[2]) : NULL;
        if (!seq) {
            PyErr_Clear();
            fmpy_raise_type(PyExc_TypeError, fname, "axes", "a sequence of ints", o[2]);
            return -1;
        }
        /* as many axes as the options hold (the core says how many it transforms) */
        const Py_ssize_t most = (Py_ssize_t)(sizeof opt->axes / sizeof opt->axes[0]);
        Py_ssize_t n = PyTuple_Size(seq);
        if (n < 1 || n > most) {
            Py_DECREF(seq);
            PyErr_Format(fmpy_error_class(c->st, FM_ERR_INVALID_ARGUMENT), "%saxes has %zd entries, expected 1 to %zd",
                         fname, n, most);
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            v = 0;
            char what[24];
            snprintf(what, sizeof what, "axes[%zd]", i);
            if (fmpy_int_arg(fname, what, PyTuple_GetItem(seq, i), -FM_MAX_NDIM, FM_MAX_NDIM - 1, &v) < 0) {
                Py_DECREF(seq);
                return fmpy_range_error_class(c->st);
            }
            opt->axes[i] = (int32_t)v;
        }
        opt->naxes = (int32_t)n;
        Py_DECREF(seq);
    }
    static const char *const ops_names[2] = {"prolog_ops", "epilog_ops"}, *const scale_names[2] = {"prolog_scale",
                                                                                                 "epilog_scale"};
    static const char *const str_names[2][2] = {{"prolog['source']", "prolog['name']"},
                                                {"epilog['source']", "epilog['name']"}};
    for (int k = 0; k < 2; k++) { /* (no snprintf here: a measurable share of a planned execute) */
        fm_fft_chain *ch = k ? &opt->epilog : &opt->prolog;
        v = 0;
        if (fmpy_int_arg(fname, ops_names[k], o[8 + 2 * k], 0, 15, &v) < 0 ||
            fmpy_number_arg(fname, scale_names[k], o[9 + 2 * k], ch->scale) < 0)
            return fmpy_range_error_class(c->st);
        ch->ops = (unsigned)v;
        for (int j = 0; j < 2; j++) {
            PyObject *str = o[12 + 2 * k + j];
            const char **dst = j ? &ch->symbol : &ch->source;
            if (str == Py_None)
                continue;
            if (!PyUnicode_Check(str)) {
                fmpy_raise_type(PyExc_TypeError, fname, str_names[k][j], "a str", str);
                return -1;
            }
            Py_ssize_t len;
            if (!(*dst = PyUnicode_AsUTF8AndSize(str, &len)))
                return -1;
            if ((size_t)len != strlen(*dst)) {
                PyErr_Format(PyExc_ValueError, "%s%s contains a NUL character", fname, str_names[k][j]);
                return -1;
            }
        }
    }
    return 0;
}

/* a chain's array as the caller passed it: prolog['multiply'], or a callback's prolog['data'] */
static const char *fft_argname(const fmpy_call *c, int slot)
{
    static const char *const chains[2][2] = {{"prolog['multiply']", "prolog['data']"},
                                             {"epilog['multiply']", "epilog['data']"}};
    if (slot < FM_FFT_PROLOG)
        return slot == FM_FFT_IN ? "x" : "out";
    const fm_fft_chain *ch = slot == FM_FFT_PROLOG ? &c->o.fft.prolog : &c->o.fft.epilog;
    return chains[slot != FM_FFT_PROLOG][(ch->ops & FM_FFT_OP_CALLBACK) != 0];
}

static int fft_writable(const fmpy_call *c, int slot)
{
    (void)c;
    return slot == FM_FFT_OUT;
}

static PyObject *fft_result(fmpy_call *c) { return Py_NewRef(c->res[FM_FFT_OUT]); }

const fmpy_opdef fmpy_fft_def = {
    .op = FM_OP_FFT,
    .fname = "fft",
    .nopts = 18,
    .out_dtype_status = FM_ERR_DTYPE,
    .out_dtype_hint = "",
    .out_shape_words = "output array has wrong shape.", /* numpy.fft's */
    .out_overlap_temporary = 1,
    .fill = fft_fill,
    .argname = fft_argname,
    .writable = fft_writable,
    .result = fft_result,
};
