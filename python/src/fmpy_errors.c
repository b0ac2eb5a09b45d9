/* fmpy_errors.c : the module's exception classes (FusemathError and one class per
 * fm_status, each also deriving from the matching builtin), made at module exec, and
 * the helpers that raise them. */
#include "fmpy.h"

/* ------------------------------------------------------------------------ */
/* Errors.                                                                  */
/* ------------------------------------------------------------------------ */
enum { B_VALUE, B_TYPE, B_MEMORY, B_RUNTIME };

static const struct {
    fm_status status;
    const char *name;
    int builtin;
    int parent; /* status whose class is the base instead of (FusemathError, builtin); -1 none */
    const char *doc;
} error_table[] = {
    {FM_ERR_INVALID_ARGUMENT, "InvalidArgumentError", B_VALUE, -1, "An argument has an invalid value."},
    {FM_ERR_SHAPE, "ShapeError", B_VALUE, -1, "Operand shapes do not match."},
    {FM_ERR_DTYPE, "DtypeError", B_TYPE, -1, "Unsupported or mismatched dtype."},
    {FM_ERR_DEVICE, "DeviceError", B_VALUE, -1, "Operands are on different or unsupported devices."},
    {FM_ERR_NOT_SUPPORTED, "NotSupportedError", B_TYPE, -1, "Not supported by any available backend."},
    {FM_ERR_OUT_OF_MEMORY, "OutOfMemoryError", B_MEMORY, -1,
     "The library (or the array library allocating a result) ran out of host or device memory."},
    {FM_ERR_ALIAS, "AliasError", B_VALUE, -1, "An output overlaps an input in memory."},
    {FM_ERR_TOO_LARGE, "TooLargeError", B_VALUE, -1, "A size exceeds the index range of the backend."},
    {FM_ERR_BACKEND, "BackendError", B_RUNTIME, -1, "The backend library (OpenBLAS, cuBLASLt, CUDA) reported an error."},
    {FM_ERR_UNAVAILABLE, "UnavailableError", B_RUNTIME, -1, "The device or backend is unavailable."},
    {FM_ERR_NOT_APPLICABLE, "NotApplicableError", B_TYPE, FM_ERR_NOT_SUPPORTED,
     "No backend is applicable to this problem."},
    {FM_ERR_FREED, "InvalidStateError", B_RUNTIME, -1, "An object was used after it was freed."},
    {FM_ERR_LINALG, "LinAlgError", B_VALUE, -1,
     "Linear algebra error (singular or not positive definite), like numpy.linalg.LinAlgError."},
    {FM_ERR_INTERNAL, "InternalError", B_RUNTIME, -1, "Internal error of the library."},
};
#define ERROR_TABLE_LEN ((int)(sizeof error_table / sizeof error_table[0]))

static PyObject *builtin_exc(int b)
{
    switch (b) {
    case B_VALUE: return PyExc_ValueError;
    case B_TYPE: return PyExc_TypeError;
    case B_MEMORY: return PyExc_MemoryError;
    default: return PyExc_RuntimeError;
    }
}

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
    PyObject *dict = PyDict_New();
    if (!dict)
        return NULL;
    PyObject *cls = NULL;
    PyObject *s = status ? PyUnicode_FromString(status) : (Py_INCREF(Py_None), Py_None);
    PyObject *d = PyUnicode_FromString(doc);
    if (s && d && PyDict_SetItemString(dict, "status", s) == 0 && PyDict_SetItemString(dict, "__doc__", d) == 0)
        cls = PyErr_NewException(qual, bases, dict);
    Py_XDECREF(s);
    Py_XDECREF(d);
    Py_DECREF(dict);
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
        PyObject *bases;
        if (error_table[i].parent >= 0) {
            PyObject *parent = st->errors[error_table[i].parent];
            if (!parent) {
                PyErr_SetString(PyExc_SystemError, "fusemath: error table out of order");
                return -1;
            }
            bases = PyTuple_Pack(1, parent);
        } else {
            bases = PyTuple_Pack(2, st->base_error, builtin_exc(error_table[i].builtin));
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
