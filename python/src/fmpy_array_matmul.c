/* fmpy_array_matmul.c : matmul's part of call() (fmpy_matmul_def): its options from Python objects, the Python
 * names of its slots, NumPy's conventions the core does not take (a 1-D a gets a leading 1, a
 * 1-D b a trailing 1, both removed from the results), and its result: d, or (d, {key: extra})
 * with nvmath-python's keys. Everything else is checked by the core. */
#include "fmpy.h"

enum { A1D = 1, B1D = 2 };

int fmpy_device_index(const fm_tensor *t) { return t->device.type == FM_DEVICE_CUDA ? t->device.id : -1; }

/* An epilogue: a string (fm_epilogue_parse) or an int of EPILOGUE_* bits; None keeps *epi. */
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
        return fmpy_range_error_class(st);
    *epi = (unsigned)v;
    return 0;
}

/* dropout's options (p, position, seed): p None or a float, position and seed ints (the seed's
 * uint64 bit pattern as an int64, as fm_exec_args carries it); the per-call pair only for a chain
 * that draws (DROPOUT), so other chains call as before. The core checks them. */
static int mm_fill_dropout(fmpy_call *c, PyObject *const *a)
{
    const char *fname = c->prefix;
    fm_matmul_options *o = &c->o.mm;
    if (a[0] != Py_None) {
        double p = PyFloat_AsDouble(a[0]);
        if (p == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            fmpy_raise_type(PyExc_TypeError, fname, "dropout", "a probability (a real number)", a[0]);
            return -1;
        }
        o->dropout = p;
    }
    if (!(o->epilogue & FM_EPILOGUE_DROPOUT))
        return 0;
    fm_exec_args_init(&c->args);
    static const char *const names[] = {"dropout position", "dropout seed"};
    static const int slots[] = {0, 3}; /* the RNG family's: position, seed */
    for (int i = 0; i < 2; i++) {
        long long x = 0;
        if (fmpy_int_arg(fname, names[i], a[1 + i], INT64_MIN, INT64_MAX, &x) < 0)
            return -1;
        c->args.ints[slots[i]] = x;
    }
    c->has_args = 1;
    return 0;
}

/* beta: None is 1 with c and 0 without; without c only a zero may be given (what the caller meant
 * by another is unknown: an error, not a silent 0). */
static int mm_fill_beta(fmpy_call *c, PyObject *beta)
{
    fm_matmul_options *o = &c->o.mm;
    if (c->objs[FM_MATMUL_C] != Py_None) {
        o->beta[0] = 1.0;
        return fmpy_number_arg(c->prefix, "beta", beta, o->beta);
    }
    if (beta == Py_None || (fmpy_number_arg(c->prefix, "beta", beta, o->beta) == 0 && !o->beta[0] && !o->beta[1]))
        return 0;
    PyErr_Clear();
    PyErr_Format(fmpy_error_class(c->st, FM_ERR_INVALID_ARGUMENT), "%sbeta = %R was given but c is None", c->prefix,
                 beta);
    return -1;
}

/* options: (alpha, beta, epilogue, execution, device_id, num_threads, panel_rows, cpu_strategy, compute, clamp,
 * dropout, dropout position, dropout seed) */
static int mm_fill(fmpy_call *c, PyObject *const *a)
{
    const char *fname = c->prefix;
    fm_matmul_options *o = &c->o.mm;
    fm_matmul_options_init(o);
    if (fmpy_number_arg(fname, "alpha", a[0], o->alpha) < 0 || mm_fill_beta(c, a[1]) < 0 ||
        fmpy_epilogue_arg(c->st, fname, a[2], &o->epilogue) < 0)
        return -1;
    static const char *const names[] = {"execution", "device_id", "num_threads", "panel_rows", "cpu_strategy",
                                         "compute"};
    int32_t *fields[] = {&o->execution, &o->device_id, &o->num_threads, &o->panel_rows, &o->cpu_strategy, &o->compute};
    const long long los[] = {0, 0, 0, 0, FM_CPU_STRATEGY_AUTO, 0};
    const long long his[] = {FM_EXECUTION_BEST, INT32_MAX, FM_MAX_THREADS, INT32_MAX, FM_CPU_STRATEGY_KERNEL, 1};
    for (int i = 0; i < 6; i++) {
        long long v = *fields[i];
        if (fmpy_int_arg(fname, names[i], a[3 + i], los[i], his[i], &v) < 0)
            return fmpy_range_error_class(c->st);
        *fields[i] = (int32_t)v;
    }
    if (mm_fill_dropout(c, a + 10) < 0)
        return -1;
    PyObject *seq = a[9];
    if (seq == Py_None)
        return 0;
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
            const int big = PyErr_ExceptionMatches(PyExc_OverflowError);
            PyErr_Clear();
            if (big)
                PyErr_Format(PyExc_ValueError, "%sclamp has a bound too large for a float64", fname);
            else
                fmpy_raise_type(PyExc_TypeError, fname, "clamp", "a pair of real numbers (lo, hi)", seq);
            return -1;
        }
        o->clamp[i] = d;
    }
    return 0;
}

/* The key of the second result of an epilogue (nvmath-python's names), NULL if none. */
static const char *extra_key(unsigned epi)
{
    if (epi & FM_EPILOGUE_AUX) {
        if (epi & FM_EPILOGUE_DROPOUT) return "dropout_aux"; /* the keep mask (with relu: AND the relu bit) */
        if (epi & FM_EPILOGUE_RELU) return "relu_aux";
        if (epi & FM_EPILOGUE_GELU) return "gelu_aux";
        if (epi & FM_EPILOGUE_SIGMOID) return "sigmoid_aux";
        if (epi & FM_EPILOGUE_TANH) return "tanh_aux";
        if (epi & FM_EPILOGUE_SILU) return "silu_aux";
        if (epi & FM_EPILOGUE_CLAMP) return "clamp_aux";
    }
    if (epi & FM_EPILOGUE_BGRAD)
        return (epi & FM_EPILOGUE_DRELU) ? "drelu_bgrad" : (epi & FM_EPILOGUE_DDROPOUT) ? "ddropout_bgrad" : "dgelu_bgrad";
    if (epi & FM_EPILOGUE_BGRADA)
        return "bgrada";
    if (epi & FM_EPILOGUE_BGRADB)
        return "bgradb";
    return NULL;
}

static const char *mm_key(const fmpy_call *c, int slot)
{
    return slot == FM_MATMUL_D ? NULL : extra_key(c->o.mm.epilogue);
}

static const char *mm_argname(const fmpy_call *c, int slot)
{
    const unsigned epi = c->o.mm.epilogue;
    if (slot == FM_MATMUL_D)
        return "out";
    if (slot == FM_MATMUL_AUX && (epi & FM_EPILOGUE_AUX))
        return extra_key(epi);
    if (slot == FM_MATMUL_AUX)
        return (epi & FM_EPILOGUE_DRELU) ? "relu_aux" : (epi & FM_EPILOGUE_DDROPOUT) ? "dropout_aux" : "gelu_aux";
    return fm_op_slot_name(FM_OP_MATMUL, slot);
}

static int mm_writable(const fmpy_call *c, int slot)
{
    return slot != FM_MATMUL_AUX || (c->o.mm.epilogue & FM_EPILOGUE_AUX);
}

static int mask_aux(unsigned epi)
{
    return (epi & (FM_EPILOGUE_RELU | FM_EPILOGUE_DRELU | FM_EPILOGUE_DROPOUT | FM_EPILOGUE_DDROPOUT)) != 0;
}

static unsigned mm_dropped(const fmpy_call *c, int slot)
{
    const unsigned a1d = (c->flags & A1D) != 0, b1d = (c->flags & B1D) != 0;
    if (slot == FM_MATMUL_D)
        return a1d << 1 | b1d;
    if (slot == FM_MATMUL_AUX) /* the relu mask keeps its bytes axis */
        return a1d << 1 | (mask_aux(c->o.mm.epilogue) ? 0 : b1d);
    return 0;
}

/* An operand of the result's shape (c, gelu_aux; the relu mask without b1d) at the promoted rank,
 * right-aligned as the core broadcasts it. */
static int promote_like_result(fmpy_call *c, fm_tensor *t, int b1d)
{
    const int a1d = (c->flags & A1D) != 0;
    if (a1d && !b1d)
        return t->ndim >= 1 ? fmpy_insert_axis(c, t, t->ndim - 1) : 0;
    if (a1d && fmpy_insert_axis(c, t, t->ndim) < 0)
        return -1;
    return b1d ? fmpy_insert_axis(c, t, t->ndim) : 0;
}

static int mm_prepare(fmpy_call *c)
{
    fm_tensor *ta = &c->tens[FM_MATMUL_A], *tb = &c->tens[FM_MATMUL_B];
    if (!c->tp[FM_MATMUL_A] || !c->tp[FM_MATMUL_B]) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an array, not None", c->where, c->tp[FM_MATMUL_A] ? "b" : "a");
        return -1;
    }
    if (ta->ndim == 0 || tb->ndim == 0) {
        PyErr_Format(fmpy_error_class(c->st, FM_ERR_SHAPE),
                     "%s: %s is 0-d (a scalar); matmul needs operands with at least one dimension "
                     "(use * to scale by a scalar)", c->where, ta->ndim == 0 ? "a" : "b");
        return -1;
    }
    const int a1d = ta->ndim == 1, b1d = tb->ndim == 1;
    const int64_t k1 = ta->shape[ta->ndim - 1], k2 = tb->shape[b1d ? 0 : tb->ndim - 2];
    if ((a1d || b1d) && k1 != k2) { /* in the caller's shapes, before the promotion */
        char sa[160], sb[160];
        fmpy_shape_text(ta->shape, ta->ndim, sa, sizeof sa);
        fmpy_shape_text(tb->shape, tb->ndim, sb, sizeof sb);
        PyErr_Format(fmpy_error_class(c->st, FM_ERR_SHAPE),
                     "%s: a has shape %s and b has shape %s; K = %lld (the last dimension of a) must equal the %s "
                     "dimension of b (%lld)", c->where, sa, sb, (long long)k1, b1d ? "only" : "second-to-last", (long long)k2);
        return -1;
    }
    c->flags = (a1d ? A1D : 0) | (b1d ? B1D : 0);
    if ((a1d && fmpy_insert_axis(c, ta, 0) < 0) || (b1d && fmpy_insert_axis(c, tb, 1) < 0))
        return -1;
    if (c->tp[FM_MATMUL_C] && promote_like_result(c, &c->tens[FM_MATMUL_C], b1d) < 0)
        return -1;
    const unsigned epi = c->o.mm.epilogue;
    if (c->tp[FM_MATMUL_AUX] && !(epi & FM_EPILOGUE_AUX)) /* the input of drelu / dgelu */
        return promote_like_result(c, &c->tens[FM_MATMUL_AUX], mask_aux(epi) ? 0 : b1d);
    return 0;
}

/* fp8 inputs give a bfloat16 d unless out= says float16 / float32: its spec depends on out */
static uint32_t mm_spec_needs(const fmpy_call *c)
{
    const fm_dtype a = c->tens[FM_MATMUL_A].dtype;
    return a == FM_F8E4M3 || a == FM_F8E5M2 ? 1u << FM_MATMUL_D : 0;
}

static PyObject *mm_result(fmpy_call *c)
{
    PyObject *d = c->res[FM_MATMUL_D];
    const char *key = extra_key(c->o.mm.epilogue);
    if (key)
        return Py_BuildValue("(O{sO})", d, key, c->res[FM_MATMUL_AUX] ? c->res[FM_MATMUL_AUX] : c->res[FM_MATMUL_BGRAD]);
    /* NumPy gives a scalar for two 1-D operands without batch: the 0-d array's item */
    if (c->flags == (A1D | B1D) && c->specs[FM_MATMUL_D].ndim == 2 && !(c->given >> FM_MATMUL_D & 1u) &&
        c->st->libs[c->li].style == STYLE_NUMPY)
        return PyObject_GetItem(d, c->st->empty_tuple);
    return Py_NewRef(d);
}

const fmpy_opdef fmpy_matmul_def = {
    .op = FM_OP_MATMUL,
    .fname = "matmul",
    .nopts = 13,
    .out_dtype_status = FM_ERR_DTYPE, /* NumPy: TypeError; fft's too */
    .out_dtype_hint = " (the dtype of a and b)",
    .dtype_hint = "a and b must be float32, float64, complex64, complex128, an integer dtype or bool (float16, "
                  "bfloat16 where a GPU backend is available)",
    .fill = mm_fill,
    .argname = mm_argname,
    .writable = mm_writable,
    .prepare = mm_prepare,
    .dropped = mm_dropped,
    .key = mm_key,
    .spec_needs = mm_spec_needs,
    .result = mm_result,
    .out_overlap_temporary = 1, /* out= overlapping a, b, c or bias: computed through a temporary */
};
