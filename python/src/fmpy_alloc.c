/* fmpy_alloc.c : results allocated by a registered array library (numpy / cupy /
 * torch .empty) on the operands' device, the stream a call runs on, and shape / device
 * text for messages. */
#include "fmpy.h"

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

void fmpy_device_text(int dev, char *buf, size_t n)
{
    if (dev >= 0)
        snprintf(buf, n, "cuda:%d", dev);
    else
        snprintf(buf, n, "cpu");
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
        int r = fmpy_long_ptr(p, "tensor.data_ptr()", ptr);
        Py_XDECREF(p);
        return r;
    }
    PyObject *data = PyObject_GetAttr(arr, st->s[S_data]);
    PyObject *p = data ? PyObject_GetAttr(data, st->s[S_ptr]) : NULL;
    Py_XDECREF(data);
    int r = fmpy_long_ptr(p, "array.data.ptr", ptr);
    Py_XDECREF(p);
    return r;
}

/* A new array of library li, shape[0..nd) and dtype dt on cuda:dev (-1: host), and its address:
 * from the exchange table's allocator where it serves the call, else through the library's
 * empty() with args / kwargs (fmpy_lib_alloc_args; NULL: made here). stream: not NULL =
 * allocate with that stream current (slow path, Python). The library's out-of-memory error
 * becomes fusemath.OutOfMemoryError (a MemoryError). */
PyObject *fmpy_lib_alloc(fm_state *st, int li, const int64_t *shape, int nd, fm_dtype dt, int dev, PyObject *stream,
                         PyObject *args, PyObject *kwargs, const char *what, void **ptr)
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
    PyObject *tuple = PyTuple_GetItem(args, 0); /* the shape */
    if (slow && lib->slow_alloc) {
        PyObject *d = PyLong_FromLong(dev);
        arr = d ? PyObject_CallFunctionObjArgs(lib->slow_alloc, tuple, lib->dtypes[dt], d, stream ? stream : Py_None,
                                               NULL)
                : NULL;
        Py_XDECREF(d);
    } else {
        arr = PyObject_Call(lib->empty, args, kwargs);
    }
    if (!arr && ((lib->oom && PyErr_ExceptionMatches(lib->oom)) || PyErr_ExceptionMatches(PyExc_MemoryError))) {
        PyObject *text = fmpy_take_error_text();
        char dv[32];
        fmpy_device_text(dev, dv, sizeof dv);
        if (text)
            PyErr_Format(fmpy_error_class(st, FM_ERR_OUT_OF_MEMORY), "fusemath: cannot allocate %s of shape %R on %s (%U): %U",
                         what, tuple, dv, lib->name, text);
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
    if (lib->xapi)
        return fmpy_xapi_current_stream(lib, dev, h);
    PyObject *d = PyLong_FromLong(dev);
    PyObject *r = d ? PyObject_CallFunctionObjArgs(lib->current_stream, d, NULL) : NULL;
    Py_XDECREF(d);
    if (!r)
        return -1;
    int rc;
    if (PyLong_Check(r)) {
        rc = fmpy_long_ptr(r, "current stream", h);
    } else {
        PyObject *p = PyObject_GetAttr(r, st->s[S_ptr]);
        rc = fmpy_long_ptr(p, "current stream .ptr", h);
        Py_XDECREF(p);
    }
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
