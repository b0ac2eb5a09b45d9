/* fmpy_fft.c : the FFT entry points fft_execute (stateless) and plan_fft. */
#include "fmpy.h"

/* ------------------------------------------------------------------------ */
/* FFT (thin: shapes, n / s padding and NumPy semantics live in fusemath.fft). */
/* ------------------------------------------------------------------------ */
static const char *const fft_slot_names[FM_FFT_NSLOTS] = {"x", "out", "prolog_array", "epilog_array"};

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
    const long long his[] = {2, 2, 2, INT32_MAX, INT32_MAX};
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

static fm_dtype fft_out_dtype(int kind, fm_dtype in)
{
    if (kind == FM_FFT_C2C)
        return (in == FM_C32 || in == FM_C64 || in == FM_C128) ? in : FM_DTYPE_INVALID;
    if (kind == FM_FFT_R2C)
        return in == FM_F16 ? FM_C32 : in == FM_F32 ? FM_C64 : in == FM_F64 ? FM_C128 : FM_DTYPE_INVALID;
    return in == FM_C32 ? FM_F16 : in == FM_C64 ? FM_F32 : in == FM_C128 ? FM_F64 : FM_DTYPE_INVALID;
}

static void fft_release(fm_hold *holds)
{
    for (int i = 0; i < FM_FFT_NSLOTS; i++)
        fmpy_hold_release(&holds[i]);
}

enum { F_LIB, F_X, F_OUT, F_PRO, F_EPI, F_OPTS, F_SHAPE = F_OPTS + FFT_NOPTS, F_STREAM, F_COUNT };

FMPY_DOC_VAR(fmpy_fft_execute_doc,
             "fft_execute(lib, x, out, prolog_array, epilog_array, kind, inverse, axes, norm, effort,\n"
             "            execution, device_id, num_threads, prolog_ops, prolog_scale, epilog_ops,\n"
             "            epilog_scale, prolog_source, prolog_symbol, epilog_source, epilog_symbol,\n"
             "            out_shape, stream)\n--\n\n"
             "Stateless FFT (fm_fft), all arguments positional: out = epilog(norm * FFT(prolog(x))).\n"
             "kind 0 c2c / 1 r2c / 2 c2r; axes None or 1-3 ints (the last is the halved one of r2c / c2r);\n"
             "norm 0 backward / 1 ortho / 2 forward; *_ops FFT_OP_* bits; *_scale numbers; *_source /\n"
             "*_symbol: the raw CUDA callback (FFT_OP_CALLBACK) or None. out None:\n"
             "allocated with library `lib` (index) of shape out_shape on x's device. GPU work is queued on\n"
             "`stream` (None: the library's current stream). The GIL is released while it runs. Returns out.");

PyObject *fmpy_mod_fft_execute(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = fmpy_module_state(module);
    if (nargs != F_COUNT) {
        PyErr_Format(PyExc_TypeError, "fft_execute() takes %d arguments (%zd given)", (int)F_COUNT, nargs);
        return NULL;
    }
    int li;
    if (fmpy_lib_index_arg(st, "fft_execute", args[F_LIB], &li) < 0)
        return NULL;
    const fm_lib *lib = &st->libs[li];
    fm_fft_options opts;
    if (fft_fill_options("fft(): ", args + F_OPTS, &opts) < 0)
        return NULL;
    fm_tensor tens[FM_FFT_NSLOTS];
    fm_hold holds[FM_FFT_NSLOTS];
    const fm_tensor *tp[FM_FFT_NSLOTS];
    int libs[FM_FFT_NSLOTS];
    for (int i = 0; i < FM_FFT_NSLOTS; i++) {
        fmpy_hold_init(&holds[i]);
        tp[i] = NULL;
        libs[i] = -1;
    }
    PyObject *res = NULL, *override = NULL, *result = NULL;
    fm_status s;
    fm_tensor *tx = &tens[FM_FFT_IN];
    if (fmpy_tensor_from_any(st, args[F_X], "x", 0, tx, &holds[FM_FFT_IN], &libs[FM_FFT_IN]) < 0)
        goto done;
    tp[FM_FFT_IN] = tx;
    int dev = -1;
    if (libs[FM_FFT_IN] == li)
        dev = fmpy_device_index(tx);
    else if (lib->style != STYLE_NUMPY) {
        PyErr_Format(PyExc_ValueError, "fft_execute(): x is not an array of %U", lib->name);
        goto done;
    }
    for (int i = FM_FFT_PROLOG; i <= FM_FFT_EPILOG; i++) {
        PyObject *o = args[i == FM_FFT_PROLOG ? F_PRO : F_EPI];
        if (o == Py_None)
            continue;
        if (fmpy_tensor_from_any(st, o, fft_slot_names[i], 0, &tens[i], &holds[i], &libs[i]) < 0)
            goto done;
        tp[i] = &tens[i];
    }
    if (args[F_OUT] != Py_None) {
        if (fmpy_tensor_from_any(st, args[F_OUT], "out", 1, &tens[FM_FFT_OUT], &holds[FM_FFT_OUT], &libs[FM_FFT_OUT]) < 0)
            goto done;
        tp[FM_FFT_OUT] = &tens[FM_FFT_OUT];
        res = Py_NewRef(args[F_OUT]);
    }
    void *stream = NULL;
    if (fmpy_resolve_stream(st, "fft(): ", li, dev, args[F_STREAM], res == NULL, &stream, &override) < 0)
        goto done;
    if (!res) {
        fm_dtype odt = fft_out_dtype(opts.kind, tx->dtype);
        if (odt == FM_DTYPE_INVALID) {
            static const char *const kinds[3] = {"c2c", "r2c", "c2r"};
            PyErr_Format(fmpy_error_class(st, FM_ERR_DTYPE), "fft: x has dtype %s, which a %s transform does not take "
                         "(c2c: c64 / c128 / c32, r2c: f32 / f64 / f16, c2r: c64 / c128 / c32; half on cuda only)",
                         fm_dtype_name(tx->dtype),
                         kinds[opts.kind]);
            goto done;
        }
        PyObject *shape = args[F_SHAPE];
        if (!PyTuple_Check(shape) || PyTuple_Size(shape) != tx->ndim) {
            PyErr_Format(PyExc_ValueError, "fft_execute(): out_shape must be a tuple of %d ints when out is None",
                         tx->ndim);
            goto done;
        }
        int64_t oshape[FM_MAX_NDIM];
        for (int i = 0; i < tx->ndim; i++) {
            long long e = 0;
            char what[32];
            snprintf(what, sizeof what, "out_shape[%d]", i);
            if (fmpy_int_arg("fft_execute(): ", what, PyTuple_GetItem(shape, i), 0, INT64_MAX, &e) < 0)
                goto done;
            oshape[i] = e;
        }
        void *ptr = NULL;
        res = fmpy_lib_alloc_dims(st, li, oshape, tx->ndim, odt, dev, override, "out", &ptr);
        if (!res)
            goto done;
        fm_device odev = {dev >= 0 ? FM_DEVICE_CUDA : FM_DEVICE_CPU, dev >= 0 ? dev : 0};
        fm_tensor_init(&tens[FM_FFT_OUT], ptr, odev, odt, tx->ndim, oshape, NULL);
        tp[FM_FFT_OUT] = &tens[FM_FFT_OUT];
    }
    Py_BEGIN_ALLOW_THREADS
    fm_clear_error();
    s = fm_fft(st->ctx, tp[FM_FFT_IN], tp[FM_FFT_OUT], tp[FM_FFT_PROLOG], tp[FM_FFT_EPILOG], &opts, stream);
    Py_END_ALLOW_THREADS
    if (s != FM_OK) {
        fmpy_raise_status(st, s);
        goto done;
    }
    result = res;
    res = NULL;
done:
    fft_release(holds);
    Py_XDECREF(override);
    Py_XDECREF(res);
    return result;
}

FMPY_DOC_VAR(fmpy_plan_fft_doc,
             "plan_fft(x, out, prolog_array, epilog_array, kind, inverse, axes, norm, effort, execution,\n"
             "         device_id, num_threads, prolog_ops, prolog_scale, epilog_ops, epilog_scale,\n"
             "         prolog_source, prolog_symbol, epilog_source, epilog_symbol, gpu_prolog)\n--\n\n"
             "Plan out = epilog(norm * FFT(prolog(x))) for arrays laid out like the given ones (shapes,\n"
             "strides, dtypes, devices; the data is not touched unless effort > 0, which may overwrite out).\n"
             "Returns a Plan; Plan.execute(x, out, prolog, epilog[, stream]) takes the 4 addresses.");

PyObject *fmpy_mod_plan_fft(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = fmpy_module_state(module);
    if (nargs != 5 + FFT_NOPTS) {
        PyErr_Format(PyExc_TypeError, "plan_fft() takes %d arguments (%zd given)", 5 + FFT_NOPTS, nargs);
        return NULL;
    }
    fm_fft_options opts;
    if (fft_fill_options("plan_fft(): ", args + 4, &opts) < 0)
        return NULL;
    long long gpu_prolog = FM_FFT_PROLOG_AUTO; /* fm_fft_gpu_prolog */
    if (fmpy_int_arg("plan_fft(): ", "gpu_prolog", args[4 + FFT_NOPTS], 0, 3, &gpu_prolog) < 0)
        return NULL;
    opts.gpu_prolog = (int32_t)gpu_prolog;
    fm_tensor tens[FM_FFT_NSLOTS];
    fm_hold holds[FM_FFT_NSLOTS];
    const fm_tensor *tp[FM_FFT_NSLOTS];
    for (int i = 0; i < FM_FFT_NSLOTS; i++) {
        fmpy_hold_init(&holds[i]);
        tp[i] = NULL;
    }
    for (int i = 0; i < FM_FFT_NSLOTS; i++) {
        if (args[i] == Py_None && i >= FM_FFT_PROLOG)
            continue;
        if (fmpy_tensor_from_object(st, args[i], fft_slot_names[i], i == FM_FFT_OUT, &tens[i], &holds[i]) < 0) {
            fft_release(holds);
            return NULL;
        }
        tp[i] = &tens[i];
    }
    fm_plan *plan = NULL;
    fm_status s;
    Py_BEGIN_ALLOW_THREADS
    fm_clear_error();
    s = fm_fft_plan(st->ctx, tp[FM_FFT_IN], tp[FM_FFT_OUT], tp[FM_FFT_PROLOG], tp[FM_FFT_EPILOG], &opts, &plan);
    Py_END_ALLOW_THREADS
    fft_release(holds);
    if (s != FM_OK) {
        fm_plan_release(plan);
        return fmpy_raise_status(st, s);
    }
    if (!plan)
        return fmpy_raise_msg(st, FM_ERR_INTERNAL, "the library returned FM_OK without a plan");
    return fmpy_plan_wrap(st, module, plan);
}

/* ------------------------------------------------------------------------ */
/* FFT's part of call() (fmpy_fft_def).                                     */
/* ------------------------------------------------------------------------ */
/* options: the 16 of fft_fill_options, gpu_prolog, last_n */
static int fft_fill(fmpy_call *c, PyObject *const *o)
{
    fm_fft_options *opt = &c->o.fft;
    long long gp = FM_FFT_PROLOG_AUTO, last_n = 0;
    if (fft_fill_options(c->prefix, o, opt) < 0 || fmpy_int_arg(c->prefix, "gpu_prolog", o[FFT_NOPTS], 0, 3, &gp) < 0 ||
        fmpy_int_arg(c->prefix, "n", o[FFT_NOPTS + 1], 0, INT32_MAX, &last_n) < 0)
        return -1;
    opt->gpu_prolog = (int32_t)gp;
    opt->last_n = (int32_t)last_n;
    return 0;
}

static const char *fft_argname(const fmpy_call *c, int slot)
{
    (void)c;
    return fft_slot_names[slot];
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
    .fill = fft_fill,
    .argname = fft_argname,
    .writable = fft_writable,
    .result = fft_result,
};
