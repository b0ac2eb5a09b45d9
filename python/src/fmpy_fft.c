/* fmpy_fft.c : FFT's part of call() (fmpy_fft_def): its options from Python objects and the
 * Python names of its slots. */
#include "fmpy.h"

/* ------------------------------------------------------------------------ */
/* FFT options (shapes, n / s padding and NumPy semantics live in fusemath.fft). */
/* ------------------------------------------------------------------------ */

/* Options of an FFT call from its Python objects (all positional, None = default). */
static int fft_fill_options(const char *fname, PyObject *const *o, fm_fft_options *opt)
{
    /* o: kind, inverse, axes, norm, effort, execution, device_id, num_threads, prolog_ops, prolog_scale,
     *    epilog_ops, epilog_scale, prolog_source, prolog_symbol, epilog_source, epilog_symbol (the
     *    strings stay owned by the caller's str objects, alive for the call) */
    fm_fft_options_init(opt);
    long long v;
    v = opt->kind;
    if (fmpy_int_arg(fname, "kind", o[0], 0, 2, &v) < 0)
        return -1;
    opt->kind = (int32_t)v;
    if (o[1] && o[1] != Py_None) {
        int t = PyObject_IsTrue(o[1]);
        if (t < 0)
            return -1;
        opt->inverse = t;
    }
    if (o[2] && o[2] != Py_None) {
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
            PyErr_Format(PyExc_ValueError, "%saxes has %zd entries, expected 1 to %zd", fname, n, most);
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            v = 0;
            char what[24];
            snprintf(what, sizeof what, "axes[%zd]", i);
            if (fmpy_int_arg(fname, what, PyTuple_GetItem(seq, i), -FM_MAX_NDIM, FM_MAX_NDIM - 1, &v) < 0) {
                Py_DECREF(seq);
                return -1;
            }
            opt->axes[i] = (int32_t)v;
        }
        opt->naxes = (int32_t)n;
        Py_DECREF(seq);
    }
    static const char *const names[] = {"norm", "effort", "execution", "device_id", "num_threads"};
    int32_t *fields[] = {&opt->norm, &opt->effort, &opt->execution, &opt->device_id, &opt->num_threads};
    const long long his[] = {2, 2, FM_EXECUTION_BEST, INT32_MAX, FM_MAX_THREADS};
    for (int i = 0; i < 5; i++) {
        v = *fields[i];
        if (fmpy_int_arg(fname, names[i], o[3 + i], 0, his[i], &v) < 0)
            return -1;
        *fields[i] = (int32_t)v;
    }
    for (int c = 0; c < 2; c++) {
        fm_fft_chain *ch = c ? &opt->epilog : &opt->prolog;
        v = 0;
        if (fmpy_int_arg(fname, c ? "epilog_ops" : "prolog_ops", o[8 + 2 * c], 0, 15, &v) < 0)
            return -1;
        ch->ops = (unsigned)v;
        if (fmpy_number_arg(fname, c ? "epilog_scale" : "prolog_scale", o[9 + 2 * c], ch->scale) < 0)
            return -1;
        for (int k = 0; k < 2; k++) {
            PyObject *str = o[12 + 2 * c + k];
            const char **dst = k ? &ch->symbol : &ch->source;
            if (str == Py_None)
                continue;
            if (!PyUnicode_Check(str)) {
                fmpy_raise_type(PyExc_TypeError, fname, k ? (c ? "epilog['name']" : "prolog['name']")
                                                          : (c ? "epilog['source']" : "prolog['source']"),
                                "a str", str);
                return -1;
            }
            Py_ssize_t len;
            *dst = PyUnicode_AsUTF8AndSize(str, &len);
            if (!*dst)
                return -1;
            if ((size_t)len != strlen(*dst)) {
                PyErr_Format(PyExc_ValueError, "%s%s['%s'] contains a NUL character", fname, c ? "epilog" : "prolog",
                             k ? "name" : "source");
                return -1;
            }
        }
    }
    return 0;
}
#define FFT_NOPTS 16

/* ------------------------------------------------------------------------ */
/* FFT's part of call() (fmpy_fft_def).                                     */
/* ------------------------------------------------------------------------ */
/* options: the 16 of fft_fill_options, gpu_prolog, last_n */
static int fft_fill(fmpy_call *c, PyObject *const *o)
{
    fm_fft_options *opt = &c->o.fft;
    long long gp = FM_FFT_PROLOG_AUTO, last_n = 0;
    if (fft_fill_options(c->prefix, o, opt) < 0) /* a range error: the class of the core's (num_threads) */
        return fmpy_range_error_class(c->st);
    if (fmpy_int_arg(c->prefix, "gpu_prolog", o[FFT_NOPTS], 0, 3, &gp) < 0 ||
        fmpy_int_arg(c->prefix, "n", o[FFT_NOPTS + 1], 0, INT32_MAX, &last_n) < 0)
        return -1;
    opt->gpu_prolog = (int32_t)gp;
    opt->last_n = (int32_t)last_n;
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
    .nopts = FFT_NOPTS + 2,
    .out_dtype_status = FM_ERR_DTYPE,
    .out_dtype_hint = "",
    .out_shape_words = "output array has wrong shape.", /* numpy.fft's */
    .out_overlap_temporary = 1,
    .fill = fft_fill,
    .argname = fft_argname,
    .writable = fft_writable,
    .result = fft_result,
};
