/* fmpy_libs.c : the registered array libraries: register_array_library, which teaches the
 * extension one (an fm_lib of the module state); results allocated by the library (numpy / cupy
 * / torch .empty, or its DLPack exchange table) on the operands' device; the stream a call runs
 * on; and the module functions over them (lib_empty, current_stream, lib_uses_dlpack_c_api). */
#include "fmpy.h"

void fmpy_lib_clear(fm_lib *lib)
{
#define X_CLEAR(f) Py_CLEAR(lib->f);
    FM_LIB_OBJECTS(X_CLEAR)
#undef X_CLEAR
    for (int i = 0; i < FM_DTYPE_COUNT_; i++) {
        Py_CLEAR(lib->dtypes[i]);
        for (int j = 0; j <= LIB_KW_DEVICES; j++)
            Py_CLEAR(lib->kwargs[i][j]);
    }
    lib->xapi = NULL;
}

int fmpy_lib_traverse(fm_lib *lib, visitproc visit, void *arg)
{
#define X_VISIT(f) Py_VISIT(lib->f);
    FM_LIB_OBJECTS(X_VISIT)
#undef X_VISIT
    for (int i = 0; i < FM_DTYPE_COUNT_; i++) {
        Py_VISIT(lib->dtypes[i]);
        for (int j = 0; j <= LIB_KW_DEVICES; j++)
            Py_VISIT(lib->kwargs[i][j]);
    }
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
    fmpy_xapi_attach(&fresh, st->dlpack_c_api);
    fm_lib old = st->libs[idx];
    st->libs[idx] = fresh;
    if (idx == st->nlibs)
        st->nlibs++;
    else
        fmpy_lib_clear(&old);
    return PyLong_FromLong(idx);
}

/* ------------------------------------------------------------------------ */
/* Results allocated by the library, and its streams.                       */
/* ------------------------------------------------------------------------ */
/* torch.empty keywords {"dtype": dt, "device": device} (new reference; cached per device). */
static PyObject *lib_kwargs(fm_state *st, fm_lib *lib, fm_dtype dt, int dev)
{
    int slot = dev + 1;
    int cacheable = slot >= 0 && slot <= LIB_KW_DEVICES;
    if (cacheable && lib->kwargs[dt][slot])
        return Py_NewRef(lib->kwargs[dt][slot]);
    if (!lib->device_obj) {
        PyErr_SetString(PyExc_SystemError, "fusemath: a torch-style library was registered without a device factory");
        return NULL;
    }
    PyObject *idx = PyLong_FromLong(dev);
    PyObject *device = idx ? PyObject_CallFunctionObjArgs(lib->device_obj, idx, NULL) : NULL;
    Py_XDECREF(idx);
    if (!device)
        return NULL;
    PyObject *kw = PyDict_New();
    if (!kw || PyDict_SetItem(kw, st->s[S_dtype], lib->dtypes[dt]) < 0 ||
        PyDict_SetItem(kw, st->s[S_device], device) < 0) {
        Py_XDECREF(kw);
        Py_DECREF(device);
        return NULL;
    }
    Py_DECREF(device);
    if (cacheable)
        lib->kwargs[dt][slot] = Py_NewRef(kw);
    return kw;
}

/* 1 with DtypeError set when library lib has no dtype dt */
static int lacks_dtype(fm_state *st, const fm_lib *lib, fm_dtype dt)
{
    if ((int)dt > 0 && dt < FM_DTYPE_COUNT_ && lib->dtypes[dt])
        return 0;
    PyErr_Format(fmpy_error_class(st, FM_ERR_DTYPE), "fusemath: the array library %U has no dtype %s", lib->name,
                 fm_dtype_name(dt));
    return 1;
}

/* Allocation arguments for `shape` (tuple) and dtype dt: *args and *kwargs (torch; else
 * NULL) are new references. */
int fmpy_lib_alloc_args(fm_state *st, int li, PyObject *shape, fm_dtype dt, int dev, PyObject **args,
                        PyObject **kwargs)
{
    fm_lib *lib = &st->libs[li];
    *args = NULL;
    *kwargs = NULL;
    if (lacks_dtype(st, lib, dt))
        return -1;
    if (lib->style == STYLE_TORCH) {
        if (!(*kwargs = lib_kwargs(st, lib, dt, dev)))
            return -1;
        *args = PyTuple_Pack(1, shape);
    } else {
        *args = PyTuple_Pack(2, shape, lib->dtypes[dt]);
    }
    if (!*args) {
        Py_CLEAR(*kwargs);
        return -1;
    }
    return 0;
}

/* cupy.empty allocates on the current device: whether that is not dev (-1 with an error set) */
static int cupy_elsewhere(const fm_lib *lib, int dev)
{
    if (lib->style != STYLE_CUPY || dev < 0 || lib->device_count <= 1 || !lib->get_device)
        return 0;
    PyObject *cur = PyObject_CallNoArgs(lib->get_device);
    long c = cur ? PyLong_AsLong(cur) : -1;
    Py_XDECREF(cur);
    return c == -1 && PyErr_Occurred() ? -1 : c != dev;
}

/* The array's address, read as its library gives it. */
static int array_address(fm_state *st, const fm_lib *lib, PyObject *arr, void **ptr)
{
    if (lib->style == STYLE_NUMPY) {
        Py_buffer v;
        if (PyObject_GetBuffer(arr, &v, PyBUF_WRITABLE) < 0)
            return -1;
        *ptr = v.buf;
        PyBuffer_Release(&v); /* the array owns the memory; the caller holds the array */
        return 0;
    }
    if (lib->style == STYLE_TORCH) {
        PyObject *p = fmpy_call_method0(arr, st->s[S_data_ptr]);
        int r = fmpy_ptr_arg("", "tensor.data_ptr()", p, ptr);
        Py_XDECREF(p);
        return r;
    }
    PyObject *data = PyObject_GetAttr(arr, st->s[S_data]);
    PyObject *p = data ? PyObject_GetAttr(data, st->s[S_ptr]) : NULL;
    Py_XDECREF(data);
    int r = fmpy_ptr_arg("", "array.data.ptr", p, ptr);
    Py_XDECREF(p);
    return r;
}

/* A new array of library li, shape[0..nd) and dtype dt on cuda:dev (-1: host), and its address:
 * from the exchange table's allocator where it serves the call, else through the library's
 * empty() with args / kwargs (fmpy_lib_alloc_args; NULL: made here). stream: not NULL =
 * allocate with that stream current (slow path, Python). The library's out-of-memory error
 * becomes fusemath.OutOfMemoryError (a MemoryError). */
PyObject *fmpy_lib_alloc(fm_state *st, int li, const int64_t *shape, int nd, fm_dtype dt, int dev,
                         PyObject *stream, PyObject *args, PyObject *kwargs, const char *what, void **ptr)
{
    fm_lib *lib = &st->libs[li];
    if (lacks_dtype(st, lib, dt))
        return NULL;
    int slow = stream != NULL ? 1 : cupy_elsewhere(lib, dev);
    if (slow < 0)
        return NULL;
    if (!slow && lib->xapi) {
        PyObject *arr = fmpy_xapi_alloc(lib, shape, nd, dt, dev, ptr);
        if (arr != Py_NotImplemented)
            return arr;
        Py_DECREF(arr);
    }
    PyObject *made_args = NULL, *made_kwargs = NULL, *arr = NULL;
    if (!args) {
        PyObject *t = fmpy_shape_tuple(shape, nd);
        int r = t ? fmpy_lib_alloc_args(st, li, t, dt, dev, &made_args, &made_kwargs) : -1;
        Py_XDECREF(t);
        if (r < 0)
            return NULL;
        args = made_args;
        kwargs = made_kwargs;
    }
    if (slow && lib->slow_alloc) {
        PyObject *d = PyLong_FromLong(dev), *s = stream ? stream : Py_None, *sh = PyTuple_GetItem(args, 0);
        arr = d ? PyObject_CallFunctionObjArgs(lib->slow_alloc, sh, lib->dtypes[dt], d, s, NULL) : NULL;
        Py_XDECREF(d);
    } else {
        arr = PyObject_Call(lib->empty, args, kwargs);
    }
    const int oom = !arr && lib->oom && PyErr_ExceptionMatches(lib->oom);
    if (!arr && (oom || PyErr_ExceptionMatches(PyExc_MemoryError))) {
        PyObject *text = fmpy_take_error_text();
        char dv[32];
        fmpy_device_text(dev, dv, sizeof dv);
        if (text)
            PyErr_Format(fmpy_error_class(st, FM_ERR_OUT_OF_MEMORY),
                         "fusemath: cannot allocate %s of shape %R on %s (%U): %U", what,
                         PyTuple_GetItem(args, 0), dv, lib->name, text);
        Py_XDECREF(text);
    }
    if (arr && array_address(st, lib, arr, ptr) < 0)
        Py_CLEAR(arr);
    Py_XDECREF(made_args);
    Py_XDECREF(made_kwargs);
    return arr;
}

/* The library's current stream on device dev (NULL for host arrays). */
int fmpy_lib_current_stream(fm_state *st, int li, int dev, void **h)
{
    fm_lib *lib = &st->libs[li];
    *h = NULL;
    if (lib->style == STYLE_NUMPY || dev < 0 || !lib->current_stream)
        return 0;
    if (lib->xapi) /* Python error set on failure */
        return lib->xapi->current_work_stream(DL_CUDA, dev, h) == 0 ? 0 : -1;
    PyObject *d = PyLong_FromLong(dev);
    PyObject *r = d ? PyObject_CallFunctionObjArgs(lib->current_stream, d, NULL) : NULL;
    Py_XDECREF(d);
    if (!r)
        return -1;
    /* an int or a stream object (.ptr) */
    int rc = fmpy_stream_from_object(st, "the library's current stream: ", r, h);
    Py_DECREF(r);
    return rc;
}

/* Resolve the stream of a call on library li / device dev: an explicit stream object
 * (None: the library's current stream). memo (or NULL): the last explicit stream object and
 * its handle, reused while the same object comes. *override is set (new reference, the
 * handle as an int) when the explicit stream is not the current one and outputs must be
 * allocated: they are then allocated with that stream current. */
int fmpy_resolve_stream(fm_state *st, const char *fname, int li, int dev, PyObject *stream_arg, int allocating,
                        fmpy_stream_memo *memo, void **h, PyObject **override)
{
    *override = NULL;
    if (!stream_arg || stream_arg == Py_None)
        return fmpy_lib_current_stream(st, li, dev, h);
    if (memo && stream_arg == memo->obj) {
        *h = memo->handle;
    } else {
        if (fmpy_stream_from_object(st, fname, stream_arg, h) < 0)
            return -1;
        if (memo) {
            PyObject *old = memo->obj;
            memo->obj = Py_NewRef(stream_arg);
            memo->handle = *h;
            Py_XDECREF(old);
        }
    }
    if (allocating && st->libs[li].style != STYLE_NUMPY && dev >= 0) {
        void *cur = NULL;
        if (fmpy_lib_current_stream(st, li, dev, &cur) < 0)
            return -1;
        if (cur != *h && !(*override = PyLong_FromVoidPtr(*h)))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Module functions.                                                        */
/* ------------------------------------------------------------------------ */
/* The library index and the cuda device (-1: host) of lib_empty and current_stream. */
static int lib_and_device(fm_state *st, const char *fname, PyObject *lib, PyObject *device, int *li, int *dev)
{
    long d = PyLong_AsLong(device);
    *dev = (int)d;
    return (d == -1 && PyErr_Occurred()) || fmpy_lib_index_arg(st, fname, lib, li) < 0 ? -1 : 0;
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
    int li, dev;
    fm_tensor t;
    if (lib_and_device(st, "lib_empty", args[0], args[3], &li, &dev) < 0)
        return NULL;
    fm_dtype dt = fmpy_dtype_by_name(args[2]);
    if (dt == FM_DTYPE_INVALID || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_ValueError, "lib_empty(): shape must be a tuple and dtype a fusemath dtype name");
        return NULL;
    }
    if (fmpy_dims_from_tuples("shape", args[1], NULL, 1, &t) < 0)
        return NULL;
    void *ptr;
    return fmpy_lib_alloc(st, li, t.shape, t.ndim, dt, dev, NULL, NULL, NULL, "an array", &ptr);
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
    int li, dev;
    void *h = NULL;
    if (lib_and_device(st, "current_stream", args[0], args[1], &li, &dev) < 0 ||
        fmpy_lib_current_stream(st, li, dev, &h) < 0)
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
