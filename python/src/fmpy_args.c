/* fmpy_args.c : errors out and arguments in: the module's exception classes (FusemathError
 * and one class per fm_status, each also deriving from the matching builtin), made at module
 * exec, and the helpers that raise them; the small argument helpers (ints, numbers, addresses,
 * streams, fusemath dtype names, registered-library indices). */
#include "fmpy.h"

static const struct {
    fm_status status;
    const char *name;
    PyObject **builtin;
    int parent; /* status whose class is the base instead of (FusemathError, builtin); -1 none */
    const char *doc;
} error_table[] = {
    {FM_ERR_INVALID_ARGUMENT, "InvalidArgumentError", &PyExc_ValueError, -1,
     "An argument has an invalid value."},
    {FM_ERR_SHAPE, "ShapeError", &PyExc_ValueError, -1, "Operand shapes do not match."},
    {FM_ERR_DTYPE, "DtypeError", &PyExc_TypeError, -1, "Unsupported or mismatched dtype."},
    {FM_ERR_DEVICE, "DeviceError", &PyExc_ValueError, -1,
     "Operands are on different or unsupported devices."},
    {FM_ERR_NOT_SUPPORTED, "NotSupportedError", &PyExc_TypeError, -1,
     "Not supported by any available backend."},
    {FM_ERR_OUT_OF_MEMORY, "OutOfMemoryError", &PyExc_MemoryError, -1,
     "The library (or the array library allocating a result) ran out of host or device memory."},
    {FM_ERR_ALIAS, "AliasError", &PyExc_ValueError, -1, "An output overlaps an input in memory."},
    {FM_ERR_TOO_LARGE, "TooLargeError", &PyExc_ValueError, -1,
     "A size exceeds the index range of the backend."},
    {FM_ERR_BACKEND, "BackendError", &PyExc_RuntimeError, -1,
     "The backend library (OpenBLAS, cuBLASLt, CUDA) reported an error."},
    {FM_ERR_UNAVAILABLE, "UnavailableError", &PyExc_RuntimeError, -1,
     "The device or backend is unavailable."},
    {FM_ERR_NOT_APPLICABLE, "NotApplicableError", &PyExc_TypeError, FM_ERR_NOT_SUPPORTED,
     "No backend is applicable to this problem."},
    {FM_ERR_FREED, "InvalidStateError", &PyExc_RuntimeError, -1, "An object was used after it was freed."},
    {FM_ERR_LINALG, "LinAlgError", &PyExc_ValueError, -1,
     "Linear algebra error (singular or not positive definite), like numpy.linalg.LinAlgError."},
    {FM_ERR_INTERNAL, "InternalError", &PyExc_RuntimeError, -1, "Internal error of the library."},
    {FM_ERR_CANCELLED, "CancelledError", &PyExc_RuntimeError, -1, "The caller stopped the work (calibrate)."},
};
#define ERROR_TABLE_LEN ((int)(sizeof error_table / sizeof error_table[0]))

/* The class of status s (falls back to FusemathError, then RuntimeError). */
PyObject *fmpy_error_class(fm_state *st, fm_status s)
{
    PyObject *cls = NULL;
    if (st && (int)s > 0 && (int)s < FM_STATUS_COUNT_)
        cls = st->errors[s];
    if (!cls)
        cls = st && st->base_error ? st->base_error : PyExc_RuntimeError;
    return cls;
}

/* Raise the class of status s with message msg (decoded leniently). */
PyObject *fmpy_raise_msg(fm_state *st, fm_status s, const char *msg)
{
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (!text)
        return NULL;
    PyErr_SetObject(fmpy_error_class(st, s), text);
    Py_DECREF(text);
    return NULL;
}

/* Raise for a failed library call: message = fm_last_error() or fm_status_string(). */
PyObject *fmpy_raise_status(fm_state *st, fm_status s)
{
    const char *detail = fm_last_error();
    return fmpy_raise_msg(st, s, (detail && detail[0]) ? detail : fm_status_string(s));
}

/* New reference to the name of o's type, for messages. */
PyObject *fmpy_type_name(PyObject *o)
{
    PyObject *n = PyType_GetName(Py_TYPE(o));
    if (!n) {
        PyErr_Clear();
        n = PyUnicode_FromString("?");
    }
    return n;
}

void fmpy_raise_type(PyObject *exc, const char *fmt_prefix, const char *name, const char *what, PyObject *o)
{
    PyObject *tn = fmpy_type_name(o);
    if (tn) {
        PyErr_Format(exc, "%s%s must be %s, not %U", fmt_prefix, name, what, tn);
        Py_DECREF(tn);
    }
}

/* Take the pending exception and return str(value) (new reference, never NULL unless out of memory). */
PyObject *fmpy_take_error_text(void)
{
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    PyErr_NormalizeException(&et, &ev, &etb);
    PyObject *text = ev ? PyObject_Str(ev) : NULL;
    if (!text) {
        PyErr_Clear();
        text = PyUnicode_FromString("unknown error");
    }
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(etb);
    return text;
}

static PyObject *new_error_class(const char *name, PyObject *bases, const char *status, const char *doc)
{
    char qual[96];
    snprintf(qual, sizeof qual, "fusemath.%s", name);
    PyObject *dict = Py_BuildValue("{szss}", "status", status, "__doc__", doc); /* status NULL: None */
    PyObject *cls = dict ? PyErr_NewException(qual, bases, dict) : NULL;
    Py_XDECREF(dict);
    return cls;
}

/* numpy.linalg.LinAlgError (new reference), so code catching NumPy's class catches fusemath's; NULL
 * without NumPy (LinAlgError then derives from ValueError, as NumPy's does). */
static PyObject *linalg_error_class(void)
{
    PyObject *mod = PyImport_ImportModule("numpy.linalg");
    PyObject *cls = mod ? PyObject_GetAttrString(mod, "LinAlgError") : NULL;
    Py_XDECREF(mod);
    if (!cls || !PyType_Check(cls) || !PyObject_IsSubclass(cls, PyExc_ValueError)) {
        PyErr_Clear();
        Py_XDECREF(cls);
        return NULL;
    }
    return cls;
}

int fmpy_make_errors(PyObject *m, fm_state *st)
{
    st->base_error = new_error_class("FusemathError", PyExc_Exception, NULL,
                                     "Base class of the errors raised by fusemath; .status names the fm_status.");
    if (!st->base_error || PyModule_AddObjectRef(m, "FusemathError", st->base_error) < 0)
        return -1;
    /* Parents first: the table lists NOT_SUPPORTED before NOT_APPLICABLE. */
    for (int i = 0; i < ERROR_TABLE_LEN; i++) {
        PyObject *bases, *np_linalg = NULL;
        if (error_table[i].parent >= 0) {
            PyObject *parent = st->errors[error_table[i].parent];
            if (!parent) {
                PyErr_SetString(PyExc_SystemError, "fusemath: error table out of order");
                return -1;
            }
            bases = PyTuple_Pack(1, parent);
        } else if (error_table[i].status == FM_ERR_LINALG && (np_linalg = linalg_error_class())) {
            bases = PyTuple_Pack(2, st->base_error, np_linalg); /* numpy.linalg's (a ValueError) */
            Py_DECREF(np_linalg);
        } else {
            bases = PyTuple_Pack(2, st->base_error, *error_table[i].builtin);
        }
        if (!bases)
            return -1;
        PyObject *cls =
            new_error_class(error_table[i].name, bases, fm_status_name(error_table[i].status), error_table[i].doc);
        Py_DECREF(bases);
        if (!cls)
            return -1;
        st->errors[error_table[i].status] = cls;
        if (PyModule_AddObjectRef(m, error_table[i].name, cls) < 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Small argument helpers.                                                  */
/* ------------------------------------------------------------------------ */

/* An int argument (anything with __index__) in [lo, hi]; NULL or None keeps *v. */
int fmpy_int_arg(const char *fname, const char *name, PyObject *o, long long lo, long long hi, long long *v)
{
    if (!o || o == Py_None)
        return 0;
    PyObject *idx = PyNumber_Index(o);
    if (!idx) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            fmpy_raise_type(PyExc_TypeError, fname, name, "an int", o);
        }
        return -1;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(idx, &overflow);
    Py_DECREF(idx);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow || x < lo || x > hi) {
        PyErr_Format(PyExc_ValueError, "%s%s is out of range (must be in [%lld, %lld])", fname, name, lo, hi);
        return -1;
    }
    *v = x;
    return 0;
}

int fmpy_range_error_class(fm_state *st)
{
    PyObject *cls = fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT);
    if (PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(cls)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_SetObject(cls, value);
        Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
    }
    return -1;
}

/* The same for an argument that must be given: None is refused like any other non-int. */
int fmpy_int_required(const char *fname, const char *name, PyObject *o, long long lo, long long hi,
                      long long *v)
{
    if (o == Py_None) {
        fmpy_raise_type(PyExc_TypeError, fname, name, "an int", o);
        return -1;
    }
    return fmpy_int_arg(fname, name, o, lo, hi, v);
}

/* A real or complex number into z[2]; NULL or None keeps z. */
int fmpy_number_arg(const char *fname, const char *name, PyObject *o, double z[2])
{
    if (!o || o == Py_None)
        return 0;
    if (PyFloat_Check(o) || PyLong_Check(o)) {
        double x = PyFloat_AsDouble(o);
        if (x == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) { /* an int beyond the double range */
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "%s%s is too large for a float64 (about 1.8e308 at most)", fname,
                             name);
            }
            return -1;
        }
        z[0] = x;
        z[1] = 0.0;
        return 0;
    }
    if (PyComplex_Check(o)) {
        z[0] = PyComplex_RealAsDouble(o);
        z[1] = PyComplex_ImagAsDouble(o);
        return PyErr_Occurred() ? -1 : 0;
    }
    if (PyUnicode_Check(o) || PyBytes_Check(o)) {
        fmpy_raise_type(PyExc_TypeError, fname, name, "a number", o);
        return -1;
    }
    /* NumPy scalars and other number-likes: complex(o) uses __complex__, __float__ or __index__. */
    PyObject *c = PyObject_CallFunctionObjArgs((PyObject *)&PyComplex_Type, o, NULL);
    if (!c) {
        PyErr_Clear();
        fmpy_raise_type(PyExc_TypeError, fname, name, "a number", o);
        return -1;
    }
    z[0] = PyComplex_RealAsDouble(c);
    z[1] = PyComplex_ImagAsDouble(c);
    Py_DECREF(c);
    return PyErr_Occurred() ? -1 : 0;
}

/* A pointer given as an int (or None = NULL); o NULL: -1 (the error that made it is set). */
int fmpy_ptr_arg(const char *fname, const char *name, PyObject *o, void **p)
{
    if (!o)
        return -1;
    if (o == Py_None) {
        *p = NULL;
        return 0;
    }
    if (!PyLong_Check(o)) {
        fmpy_raise_type(PyExc_TypeError, fname, name, "an int (address) or None", o);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s%s is not a valid address (negative or wider than 64 bits)", fname,
                         name);
        }
        return -1;
    }
    if ((unsigned long long)(uintptr_t)v != v) {
        PyErr_Format(PyExc_ValueError, "%s%s does not fit in a pointer", fname, name);
        return -1;
    }
    *p = (void *)(uintptr_t)v;
    return 0;
}

/* A stream argument: an int (cudaStream_t), an object with .ptr (CuPy) or .cuda_stream
 * (PyTorch) or .handle, or the CUDA stream protocol __cuda_stream__() -> (version, ptr). */
int fmpy_stream_from_object(fm_state *st, const char *fname, PyObject *o, void **h)
{
    if (o == Py_None) {
        *h = NULL;
        return 0;
    }
    if (PyLong_Check(o) && !PyBool_Check(o))
        return fmpy_ptr_arg(fname, "stream", o, h);
    static const int attrs[] = {S_ptr, S_cuda_stream, S_handle};
    for (int i = 0; i < 3; i++) {
        PyObject *v = PyObject_GetAttr(o, st->s[attrs[i]]);
        if (!v) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();
            continue;
        }
        int ok = PyLong_Check(v) && !PyBool_Check(v);
        int r = ok ? fmpy_ptr_arg(fname, "stream", v, h) : 0;
        Py_DECREF(v);
        if (ok)
            return r;
    }
    PyObject *proto = PyObject_GetAttr(o, st->s[S_cuda_stream_proto]);
    if (proto) {
        PyObject *r = PyObject_CallNoArgs(proto);
        Py_DECREF(proto);
        if (!r)
            return -1;
        int rc = -1;
        if (PyTuple_Check(r) && PyTuple_Size(r) == 2)
            rc = fmpy_ptr_arg(fname, "stream", PyTuple_GetItem(r, 1), h);
        else
            PyErr_Format(PyExc_TypeError, "%sstream.__cuda_stream__() returned %R, expected (version, handle)", fname, r);
        Py_DECREF(r);
        return rc;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
        return -1;
    PyErr_Clear();
    fmpy_raise_type(PyExc_TypeError, fname, "stream", "None, an int (cudaStream_t) or a CuPy/PyTorch stream", o);
    return -1;
}

fm_dtype fmpy_dtype_by_name(PyObject *name)
{
    if (!PyUnicode_Check(name))
        return FM_DTYPE_INVALID;
    for (int i = 1; i < FM_DTYPE_COUNT_; i++)
        if (PyUnicode_CompareWithASCIIString(name, fm_dtype_name((fm_dtype)i)) == 0)
            return (fm_dtype)i;
    return FM_DTYPE_INVALID;
}

int fmpy_lib_index_arg(fm_state *st, const char *fname, PyObject *o, int *li)
{
    long v = PyLong_Check(o) && !PyBool_Check(o) ? PyLong_AsLong(o) : -1;
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v >= st->nlibs) {
        PyErr_Format(PyExc_ValueError, "%s(): lib must be the index of a registered array library", fname);
        return -1;
    }
    *li = (int)v;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Shapes and devices in messages.                                          */
/* ------------------------------------------------------------------------ */
void fmpy_shape_text(const int64_t *shape, int n, char *buf, size_t size)
{
    size_t u = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < n && u < size; i++)
        u += (size_t)snprintf(buf + u, size - u, "%lld%s", (long long)shape[i], i + 1 < n ? ", " : "");
    if (u < size)
        snprintf(buf + u, size - u, "%s)", n == 1 ? "," : "");
}

PyObject *fmpy_shape_tuple(const int64_t *shape, int n)
{
    PyObject *t = PyTuple_New(n);
    if (!t)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(shape[i]);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, i, x);
    }
    return t;
}

void fmpy_device_text(int dev, char *buf, size_t n)
{
    if (dev >= 0)
        snprintf(buf, n, "cuda:%d", dev);
    else
        snprintf(buf, n, "cpu");
}
