/* fmpy_array_helpers.c : array helpers exposed to Python (tensor_info,
 * data_ptr, lib_empty, current_stream) and register_array_library, which teaches the
 * extension an array library (an fm_lib of the module state). */
#include "fmpy.h"

/* ------------------------------------------------------------------------ */
/* Array helpers exposed to Python.                                          */
/* ------------------------------------------------------------------------ */
FMPY_DOC_VAR(fmpy_tensor_info_doc,
             "tensor_info(obj, writable=False)\n--\n\n"
             "How the library sees an array: (address, (device_type, device_id), dtype name, shape,\n"
             "element strides). device_type follows DLPack (1 cpu, 2 cuda; 0 = resolved by the library\n"
             "from the pointer, for __cuda_array_interface__). For debugging and tests.");

PyObject *fmpy_mod_tensor_info(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = fmpy_module_state(module);
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "tensor_info() takes 1 or 2 arguments (%zd given)", nargs);
        return NULL;
    }
    int writable = 0;
    if (nargs == 2) {
        writable = PyObject_IsTrue(args[1]);
        if (writable < 0)
            return NULL;
    }
    fm_tensor t;
    fm_hold h;
    if (fmpy_tensor_from_any(st, args[0], "obj", writable, &t, &h, NULL) < 0)
        return NULL;
    PyObject *shape = fmpy_shape_tuple(t.shape, t.ndim), *strides = fmpy_shape_tuple(t.strides, t.ndim), *res = NULL;
    if (shape && strides)
        res = Py_BuildValue("(N(ii)sOO)", PyLong_FromVoidPtr(t.data), (int)t.device.type, (int)t.device.id,
                            fm_dtype_name(t.dtype), shape, strides);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    fmpy_hold_release(&h);
    return res;
}

FMPY_DOC_VAR(fmpy_data_ptr_doc, "data_ptr(obj)\n--\n\nAddress (int) of element 0 of an array (any kind tensor_info takes).");

PyObject *fmpy_mod_data_ptr(PyObject *module, PyObject *obj)
{
    if (PyObject_CheckBuffer(obj)) {
        Py_buffer v;
        if (PyObject_GetBuffer(obj, &v, PyBUF_STRIDES) == 0) {
            PyObject *r = PyLong_FromVoidPtr(v.buf);
            PyBuffer_Release(&v);
            return r;
        }
        PyErr_Clear();
    }
    fm_tensor t;
    fm_hold h;
    if (fmpy_tensor_from_any(fmpy_module_state(module), obj, "obj", 0, &t, &h, NULL) < 0)
        return NULL;
    PyObject *r = PyLong_FromVoidPtr(t.data);
    fmpy_hold_release(&h);
    return r;
}

FMPY_DOC_VAR(fmpy_lib_empty_doc,
             "lib_empty(lib, shape, dtype, device)\n--\n\n"
             "A new array of registered library `lib` (index), shape (tuple), dtype (fusemath name: 'f32',\n"
             "'u8', ...) on cuda:device (-1: host), from the library's allocator on its current stream.\n"
             "The library's out-of-memory error becomes fusemath.OutOfMemoryError.");

PyObject *fmpy_mod_lib_empty(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = fmpy_module_state(module);
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "lib_empty() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    int li;
    if (fmpy_lib_index_arg(st, "lib_empty", args[0], &li) < 0)
        return NULL;
    fm_dtype dt = fmpy_dtype_by_name(args[2]);
    if (dt == FM_DTYPE_INVALID || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_ValueError, "lib_empty(): shape must be a tuple and dtype a fusemath dtype name");
        return NULL;
    }
    long dev = PyLong_AsLong(args[3]);
    fm_tensor t;
    if ((dev == -1 && PyErr_Occurred()) || fmpy_dims_from_tuples("shape", args[1], NULL, 1, &t) < 0)
        return NULL;
    void *ptr;
    return fmpy_lib_alloc(st, li, t.shape, t.ndim, dt, (int)dev, NULL, NULL, NULL, "an array", &ptr);
}

FMPY_DOC_VAR(fmpy_current_stream_doc,
             "current_stream(lib, device)\n--\n\nThe current stream (int handle) of registered library `lib` on "
             "cuda:device (0 for host libraries).");

PyObject *fmpy_mod_current_stream(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = fmpy_module_state(module);
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "current_stream() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    int li;
    if (fmpy_lib_index_arg(st, "current_stream", args[0], &li) < 0)
        return NULL;
    long dev = PyLong_AsLong(args[1]);
    if (dev == -1 && PyErr_Occurred())
        return NULL;
    void *h = NULL;
    if (fmpy_lib_current_stream(st, li, (int)dev, &h) < 0)
        return NULL;
    return PyLong_FromVoidPtr(h);
}

FMPY_DOC_VAR(fmpy_lib_uses_dlpack_c_api_doc,
             "lib_uses_dlpack_c_api(lib)\n--\n\nTrue when registered library `lib` is read, allocated and asked "
             "for its stream through DLPack's C exchange API (its array type has __dlpack_c_exchange_api__).");

PyObject *fmpy_mod_lib_uses_dlpack_c_api(PyObject *module, PyObject *arg)
{
    fm_state *st = fmpy_module_state(module);
    int li;
    if (fmpy_lib_index_arg(st, "lib_uses_dlpack_c_api", arg, &li) < 0)
        return NULL;
    return PyBool_FromLong(st->libs[li].xapi != NULL);
}

void fmpy_lib_clear(fm_lib *lib)
{
    Py_CLEAR(lib->name);
    Py_CLEAR(lib->type);
    for (int i = 0; i < FM_DTYPE_COUNT_; i++) {
        Py_CLEAR(lib->dtypes[i]);
        for (int j = 0; j <= LIB_KW_DEVICES; j++)
            Py_CLEAR(lib->kwargs[i][j]);
    }
    Py_CLEAR(lib->empty);
    Py_CLEAR(lib->current_stream);
    Py_CLEAR(lib->get_device);
    Py_CLEAR(lib->device_obj);
    Py_CLEAR(lib->oom);
    Py_CLEAR(lib->slow_alloc);
    lib->xapi = NULL;
    Py_CLEAR(lib->xapi_capsule);
}

int fmpy_lib_traverse(fm_lib *lib, visitproc visit, void *arg)
{
    Py_VISIT(lib->name);
    Py_VISIT(lib->type);
    for (int i = 0; i < FM_DTYPE_COUNT_; i++) {
        Py_VISIT(lib->dtypes[i]);
        for (int j = 0; j <= LIB_KW_DEVICES; j++)
            Py_VISIT(lib->kwargs[i][j]);
    }
    Py_VISIT(lib->empty);
    Py_VISIT(lib->current_stream);
    Py_VISIT(lib->get_device);
    Py_VISIT(lib->device_obj);
    Py_VISIT(lib->oom);
    Py_VISIT(lib->slow_alloc);
    Py_VISIT(lib->xapi_capsule);
    return 0;
}

static PyObject *none_to_null(PyObject *o) { return o == Py_None ? NULL : o; }

FMPY_DOC_VAR(fmpy_register_doc,
             "register_array_library(name, style, type, dtypes, empty, current_stream, get_device, device_obj,\n"
             "                       oom, slow_alloc, device_count)\n--\n\n"
             "Teach the extension an array library (fusemath._arrays does it lazily): style 1 = numpy\n"
             "(buffer protocol, empty(shape, dtype)), 2 = torch (data_ptr(), shape, stride(), dtype,\n"
             "get_device(), is_cuda; empty(shape, dtype=, device=device_obj(index))), 3 = cupy (data.ptr,\n"
             "data.device_id, shape, strides, dtype; empty(shape, dtype)). dtypes maps fusemath dtype names\n"
             "('f32', 'bf16', 'u8', ...) to the library's dtype objects. current_stream(device) gives the\n"
             "raw handle (int) or a stream object with .ptr; slow_alloc(shape, dtype, device, stream)\n"
             "allocates with another stream / device current. Re-registering a name replaces it.\n"
             "Returns the library's index.");

PyObject *fmpy_mod_register_array_library(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = fmpy_module_state(module);
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "register_array_library() takes 11 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *name = args[0], *type = none_to_null(args[2]), *dtypes = args[3];
    long style = PyLong_AsLong(args[1]);
    long ndev = PyLong_AsLong(args[10]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyUnicode_Check(name) || style < STYLE_NUMPY || style > STYLE_CUPY || !PyDict_Check(dtypes) ||
        (type && !PyType_Check(type)) || (style != STYLE_NUMPY && !type) || !PyCallable_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "register_array_library(): invalid arguments");
        return NULL;
    }
    int idx = -1;
    for (int i = 0; i < st->nlibs; i++)
        if (PyUnicode_Compare(st->libs[i].name, name) == 0)
            idx = i;
    if (idx < 0) {
        if (st->nlibs >= FM_MAX_LIBS) {
            PyErr_SetString(PyExc_RuntimeError, "register_array_library(): too many array libraries");
            return NULL;
        }
        idx = st->nlibs;
    }
    fm_lib fresh;
    memset(&fresh, 0, sizeof fresh);
    fresh.style = (int)style;
    fresh.device_count = (int)ndev;
    fresh.name = Py_NewRef(name);
    fresh.type = type ? Py_NewRef(type) : NULL;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(dtypes, &pos, &k, &v)) {
        fm_dtype dt = fmpy_dtype_by_name(k);
        if (dt == FM_DTYPE_INVALID) {
            fmpy_lib_clear(&fresh);
            PyErr_Format(PyExc_ValueError, "register_array_library(): unknown dtype name %R", k);
            return NULL;
        }
        Py_XDECREF(fresh.dtypes[dt]);
        fresh.dtypes[dt] = Py_NewRef(v);
    }
    PyObject **slots[] = {&fresh.empty, &fresh.current_stream, &fresh.get_device, &fresh.device_obj, &fresh.oom,
                          &fresh.slow_alloc};
    for (int i = 0; i < 6; i++) {
        PyObject *o = none_to_null(args[4 + i]);
        *slots[i] = o ? Py_NewRef(o) : NULL;
    }
    fmpy_xapi_attach(&fresh);
    fm_lib old = st->libs[idx];
    st->libs[idx] = fresh;
    if (idx == st->nlibs)
        st->nlibs++;
    else
        fmpy_lib_clear(&old);
    return PyLong_FromLong(idx);
}
