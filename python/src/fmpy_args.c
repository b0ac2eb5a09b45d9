/* fmpy_args.c : small argument helpers: ints, numbers,
 * addresses, streams, fusemath dtype names and registered-library indices. */
#include "fmpy.h"

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

/* A pointer given as an int (or None = NULL). */
int fmpy_ptr_arg(const char *fname, const char *name, PyObject *o, void **p)
{
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

/* Fast pointer from an int known to be an address (data_ptr(), .ptr); -1 with an error set. */
int fmpy_long_ptr(PyObject *o, const char *what, void **p)
{
    if (!o)
        return -1;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s is not an int", what);
        return -1;
    }
    void *v = PyLong_AsVoidPtr(o);
    if (!v && PyErr_Occurred())
        return -1;
    *p = v;
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
