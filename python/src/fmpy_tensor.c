/* fmpy_tensor.c : array objects -> fm_tensor: the buffer protocol, registered array
 * libraries (PyTorch, CuPy) and __cuda_array_interface__, and the dispatch over them
 * (DLPack: fmpy_dlpack.c); an fm_hold keeps the operand's memory alive meanwhile. */
#include "fmpy.h"

void fmpy_hold_init(fm_hold *h)
{
    h->kind = HOLD_NONE;
    h->capsule = NULL;
    h->managed = NULL;
}

void fmpy_hold_release(fm_hold *h)
{
    if (h->kind == HOLD_NONE)
        return;
    /* Deleters and buffer releases may run Python code: keep a pending error intact. */
    PyObject *et = NULL, *ev = NULL, *etb = NULL;
    int had_error = PyErr_Occurred() != NULL;
    if (had_error)
        PyErr_Fetch(&et, &ev, &etb);
    if (h->kind == HOLD_BUFFER) {
        PyBuffer_Release(&h->view);
    } else if (h->kind == HOLD_DLPACK_V1) {
        DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)h->managed;
        if (m->deleter)
            m->deleter(m);
    } else {
        DLManagedTensor *m = (DLManagedTensor *)h->managed;
        if (m->deleter)
            m->deleter(m);
    }
    Py_XDECREF(h->capsule);
    fmpy_hold_init(h);
    if (had_error)
        PyErr_Restore(et, ev, etb);
    else if (PyErr_Occurred())
        PyErr_WriteUnraisable(NULL); /* a deleter failed: report, do not mask success */
}

/* Whether a byte-order mark ('<', '>', '!'; '@', '=' and '|' are native) says other than the
 * host's, for items of n bytes. */
static int foreign_order(char order, Py_ssize_t n)
{
    const uint16_t one = 1;
    const int little = *(const uint8_t *)&one == 1;
    return n > 1 && ((order == '<' && !little) || ((order == '>' || order == '!') && little));
}

/* A dtype from its kind ('f' float, 'c' complex, 'i' / 'u' signed / unsigned integer, 'b' bool) and its
 * size in bytes; FM_DTYPE_INVALID where fusemath has none. */
static fm_dtype kind_dtype(char kind, Py_ssize_t bytes)
{
    const int code = kind == 'f'   ? DL_FLOAT
                     : kind == 'c' ? DL_COMPLEX
                     : kind == 'i' ? DL_INT
                     : kind == 'b' ? DL_BOOL
                                   : DL_UINT;
    return kind && strchr("fciub", kind) && bytes > 0 && bytes <= 16 ? fmpy_dl_dtype(code, (int)bytes * 8)
                                                                     : FM_DTYPE_INVALID;
}

/* struct-module format + itemsize -> dtype (FM_DTYPE_INVALID if not representable). A switch, not
 * kind_dtype's table: every host operand and result comes through here. */
static fm_dtype format_dtype(const char *fmt, Py_ssize_t itemsize)
{
    if (!fmt)
        fmt = "B";
    const char order = *fmt == '@' || *fmt == '=' || *fmt == '<' || *fmt == '>' || *fmt == '!' ? *fmt++ : '@';
    if (foreign_order(order, itemsize))
        return FM_DTYPE_INVALID; /* big-endian data on a little-endian host, or the reverse */
    const int cplx = fmt[0] == 'Z'; /* complex: Z + the component's code */
    if (!fmt[cplx] || fmt[cplx + 1] || (cplx && fmt[1] != 'f' && fmt[1] != 'd' && fmt[1] != 'g'))
        return FM_DTYPE_INVALID;
    fm_dtype t;
    switch (fmt[cplx]) {
    case 'e': t = FM_F16; break;
    case 'f': t = cplx ? FM_C64 : FM_F32; break;
    case 'd': t = cplx ? FM_C128 : FM_F64; break;
    case 'g': t = cplx ? FM_CLD : FM_LD; break; /* long double (NumPy's longdouble / clongdouble) */
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
        t = itemsize == 1 ? FM_I8 : itemsize == 2 ? FM_I16 : itemsize == 4 ? FM_I32 : FM_I64;
        break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
        t = itemsize == 1 ? FM_U8 : itemsize == 2 ? FM_U16 : itemsize == 4 ? FM_U32 : FM_U64;
        break;
    case '?': t = FM_BOOL; break;
    default: return FM_DTYPE_INVALID;
    }
    return t != FM_DTYPE_INVALID && (Py_ssize_t)fm_dtype_size(t) == itemsize ? t : FM_DTYPE_INVALID;
}

/* NumPy array-interface typestr ("<f4", "|u1", "<c8") -> dtype. */
static fm_dtype typestr_dtype(const char *s)
{
    if (!s[0] || !s[1] || foreign_order(s[0], atoi(s + 2)))
        return FM_DTYPE_INVALID;
    return kind_dtype(s[1], atoi(s + 2));
}

void fmpy_zero_tail(fm_tensor *t)
{
    for (int i = t->ndim; i < FM_MAX_NDIM; i++) {
        t->shape[i] = 0;
        t->strides[i] = 0;
    }
}

int fmpy_too_many_dims(const char *name, Py_ssize_t ndim)
{
    PyErr_Format(PyExc_ValueError, "argument '%s' has %zd dimensions; at most %d are supported", name, ndim,
                 FM_MAX_NDIM);
    return -1;
}

static int tensor_from_buffer(fm_state *st, PyObject *obj, const char *name, int writable, fm_tensor *t,
                              fm_hold *h)
{
    Py_buffer *v = &h->view;
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) < 0)
        return -1;
    h->kind = HOLD_BUFFER;

    fm_dtype dt = format_dtype(v->format, v->itemsize);
    if (dt == FM_DTYPE_INVALID) { /* named as the caller's library names it (NumPy: bool, >f8) */
        PyObject *dto = PyObject_GetAttr(obj, st->s[S_dtype]);
        PyObject *dts = dto ? PyObject_Str(dto) : NULL;
        Py_XDECREF(dto);
        PyErr_Clear();
        /* an output's is the caller's argument error (its dtype is the result's); an input's a dtype error */
        PyErr_Format(fmpy_error_class(st, writable ? FM_ERR_INVALID_ARGUMENT : FM_ERR_DTYPE),
                     "%s has dtype %s, which is not supported (argument '%s', buffer format '%s')", name,
                     dts ? PyUnicode_AsUTF8AndSize(dts, NULL) : "?", name, v->format ? v->format : "B");
        Py_XDECREF(dts);
        return -1;
    }
    if (v->ndim < 0 || v->ndim > FM_MAX_NDIM) {
        PyErr_Format(fmpy_error_class(st, FM_ERR_SHAPE), "%s has %d dimensions; at most %d are supported", name,
                     v->ndim, FM_MAX_NDIM);
        return -1;
    }
    if (v->suboffsets) {
        PyErr_Format(PyExc_TypeError, "argument '%s': indirect (suboffset) buffers are not supported", name);
        return -1;
    }
    size_t align = fm_dtype_size(dt) / (fm_dtype_is_complex(dt) ? 2 : 1); /* NumPy's: the component's */
    if (writable && align > 1 && (uintptr_t)v->buf % align) { /* results are stored as whole elements */
        PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT),
                     "%s at %p is not aligned to %zu bytes (the result is written as whole elements); pass an aligned "
                     "array (NumPy allocates aligned ones)", name, v->buf, align);
        return -1;
    }
    t->data = v->buf;
    t->device.type = FM_DEVICE_CPU;
    t->device.id = 0;
    t->dtype = dt;
    t->ndim = v->ndim;
    Py_ssize_t item = v->itemsize;
    Py_ssize_t contiguous = item;
    for (int i = v->ndim - 1; i >= 0; i--) {
        Py_ssize_t extent = v->shape ? v->shape[i] : (item ? v->len / item : 0);
        Py_ssize_t bs = v->strides ? v->strides[i] : contiguous;
        if (bs % item != 0) {
            PyErr_Format(PyExc_ValueError,
                         "argument '%s': byte stride %zd of dimension %d is not a multiple of the item size %zd",
                         name, bs, i, item);
            return -1;
        }
        t->shape[i] = (int64_t)extent;
        t->strides[i] = (int64_t)(bs / item);
        contiguous *= extent;
    }
    fmpy_zero_tail(t);
    return 0;
}

/* shape (and strides, in units of `unit` bytes; NULL = C-contiguous) from tuples. */
int fmpy_dims_from_tuples(const char *name, PyObject *shape, PyObject *strides, Py_ssize_t unit, fm_tensor *t)
{
    if (!PyTuple_Check(shape)) {
        PyErr_Format(PyExc_TypeError, "argument '%s': shape is not a tuple", name);
        return -1;
    }
    Py_ssize_t nd = PyTuple_Size(shape);
    if (nd > FM_MAX_NDIM)
        return fmpy_too_many_dims(name, nd);
    if (strides && strides != Py_None && (!PyTuple_Check(strides) || PyTuple_Size(strides) != nd)) {
        PyErr_Format(PyExc_TypeError, "argument '%s': strides do not match the shape", name);
        return -1;
    }
    t->ndim = (int32_t)nd;
    int64_t contiguous = 1;
    for (Py_ssize_t i = nd - 1; i >= 0; i--) {
        long long e = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
        if (e == -1 && PyErr_Occurred())
            return -1;
        if (e < 0) {
            PyErr_Format(PyExc_ValueError, "argument '%s': negative extent in shape", name);
            return -1;
        }
        t->shape[i] = e;
        if (strides && strides != Py_None) {
            long long s = PyLong_AsLongLong(PyTuple_GetItem(strides, i));
            if (s == -1 && PyErr_Occurred())
                return -1;
            if (unit > 1 && s % unit != 0) {
                PyErr_Format(PyExc_ValueError,
                             "argument '%s': byte stride %lld of dimension %zd is not a multiple of the item size %zd",
                             name, s, i, unit);
                return -1;
            }
            t->strides[i] = s / (unit > 0 ? unit : 1);
        } else {
            t->strides[i] = contiguous;
        }
        contiguous *= e;
    }
    fmpy_zero_tail(t);
    return 0;
}

/* The library's dtype object -> fm dtype (identity first, then equality for numpy-likes). */
static fm_dtype lib_dtype(const fm_lib *lib, PyObject *dt)
{
    for (int i = 1; i < FM_DTYPE_COUNT_; i++)
        if (lib->dtypes[i] == dt)
            return (fm_dtype)i;
    if (lib->style == STYLE_TORCH)
        return FM_DTYPE_INVALID; /* torch dtypes are singletons */
    for (int i = 1; i < FM_DTYPE_COUNT_; i++) {
        if (!lib->dtypes[i])
            continue;
        int eq = PyObject_RichCompareBool(lib->dtypes[i], dt, Py_EQ);
        if (eq < 0)
            PyErr_Clear();
        else if (eq)
            return (fm_dtype)i;
    }
    return FM_DTYPE_INVALID;
}

PyObject *fmpy_call_method0(PyObject *obj, PyObject *name) { return PyObject_CallMethodObjArgs(obj, name, NULL); }

/* Lazily conjugated / negated torch views are not their memory: refuse them. The
 * negative bit also appears on real tensors (z.conj().imag); the conjugate bit only on
 * complex ones. Neither is carried by DLPack, so the C exchange path asks too. */
int fmpy_torch_lazy_bits(fm_state *st, PyObject *obj, const char *name, int complex)
{
    static const int bits[2] = {S_is_conj, S_is_neg};
    static const char *const fix[2] = {"resolve_conj", "resolve_neg"};
    for (int i = complex ? 0 : 1; i < 2; i++) {
        PyObject *r = fmpy_call_method0(obj, st->s[bits[i]]);
        if (!r) {
            PyErr_Clear();
            continue;
        }
        int set = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (set) {
            PyErr_Format(PyExc_ValueError,
                         "argument '%s' is a torch tensor with its %s bit set (a lazy view); pass x.%s()", name,
                         i == 0 ? "conjugate" : "negative", fix[i]);
            return -1;
        }
    }
    return 0;
}

/* obj.dtype as an fm dtype; FM_DTYPE_INVALID with an exception set when it is not one. */
static fm_dtype obj_dtype(fm_state *st, const fm_lib *lib, PyObject *obj, const char *name)
{
    PyObject *o = PyObject_GetAttr(obj, st->s[S_dtype]);
    if (!o)
        return FM_DTYPE_INVALID;
    fm_dtype dt = lib_dtype(lib, o);
    if (dt == FM_DTYPE_INVALID)
        PyErr_Format(PyExc_TypeError, "argument '%s': unsupported dtype %R", name, o);
    Py_DECREF(o);
    return dt;
}

/* t's shape and strides from obj.shape and obj.stride() (torch, in elements) or obj.strides (in
 * bytes, items of `unit` of them). */
static int attr_dims(fm_state *st, PyObject *obj, const char *name, int torch, Py_ssize_t unit, fm_tensor *t)
{
    PyObject *shape = PyObject_GetAttr(obj, st->s[S_shape]), *strides = NULL;
    if (shape)
        strides = torch ? fmpy_call_method0(obj, st->s[S_stride]) : PyObject_GetAttr(obj, st->s[S_strides]);
    int r = strides ? fmpy_dims_from_tuples(name, shape, strides, unit, t) : -1;
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return r;
}

/* A PyTorch tensor: data_ptr(), shape, stride(), dtype, get_device() (+ is_cuda). */
static int tensor_from_torch(fm_state *st, const fm_lib *lib, PyObject *obj, const char *name, fm_tensor *t)
{
    fm_dtype dt = obj_dtype(st, lib, obj, name);
    if (dt == FM_DTYPE_INVALID)
        return -1;
    if (fmpy_torch_lazy_bits(st, obj, name, fm_dtype_is_complex(dt)) < 0)
        return -1;
    PyObject *o = fmpy_call_method0(obj, st->s[S_get_device]);
    if (!o)
        return -1;
    long dev = PyLong_AsLong(o);
    Py_DECREF(o);
    if (dev == -1 && PyErr_Occurred())
        return -1;
    if (dev >= 0) {
        o = PyObject_GetAttr(obj, st->s[S_is_cuda]);
        int cuda = o ? PyObject_IsTrue(o) : -1;
        Py_XDECREF(o);
        if (cuda < 0)
            return -1;
        if (!cuda) {
            PyObject *d = PyObject_GetAttr(obj, st->s[S_device]);
            PyErr_Format(fmpy_error_class(st, FM_ERR_DEVICE),
                         "argument '%s' is a torch tensor on device %R; fusemath takes cpu and cuda tensors", name,
                         d ? d : Py_None);
            Py_XDECREF(d);
            return -1;
        }
        t->device.type = FM_DEVICE_CUDA;
        t->device.id = (int32_t)dev;
    } else {
        t->device.type = FM_DEVICE_CPU;
        t->device.id = 0;
    }
    o = fmpy_call_method0(obj, st->s[S_data_ptr]);
    int r = fmpy_ptr_arg("", "tensor.data_ptr()", o, &t->data);
    Py_XDECREF(o);
    t->dtype = dt;
    return r < 0 ? -1 : attr_dims(st, obj, name, 1, 1, t);
}

/* A CuPy array: data.ptr, data.device_id, shape, strides (bytes), dtype. */
static int tensor_from_cupy(fm_state *st, const fm_lib *lib, PyObject *obj, const char *name, fm_tensor *t)
{
    fm_dtype dt = obj_dtype(st, lib, obj, name);
    if (dt == FM_DTYPE_INVALID)
        return -1;
    PyObject *data = PyObject_GetAttr(obj, st->s[S_data]);
    if (!data)
        return -1;
    PyObject *p = PyObject_GetAttr(data, st->s[S_ptr]);
    PyObject *dev = p ? PyObject_GetAttr(data, st->s[S_device_id]) : NULL;
    Py_DECREF(data);
    int r = dev ? fmpy_ptr_arg("", "array.data.ptr", p, &t->data) : -1;
    long id = r == 0 ? PyLong_AsLong(dev) : -1;
    Py_XDECREF(p);
    Py_XDECREF(dev);
    if (r < 0 || (id == -1 && PyErr_Occurred()))
        return -1;
    t->device.type = FM_DEVICE_CUDA;
    t->device.id = (int32_t)id;
    t->dtype = dt;
    return attr_dims(st, obj, name, 0, (Py_ssize_t)fm_dtype_size(dt), t);
}

/* __cuda_array_interface__ (v2/v3): the device is resolved by the library from the pointer.
 * The entries are held (not borrowed) while they are read: reading them may run the caller's
 * code (__index__, __bool__), which could drop them from the dict. */
static int cai_read(PyObject *shape, PyObject *typestr, PyObject *data, PyObject *strides, PyObject *mask,
                    const char *name, int writable, fm_tensor *t)
{
    if (!shape || !typestr || !data || !PyUnicode_Check(typestr) || !PyTuple_Check(data) || PyTuple_Size(data) != 2) {
        PyErr_Format(PyExc_TypeError, "argument '%s': malformed __cuda_array_interface__ (shape, typestr, data)", name);
        return -1;
    }
    if (mask && mask != Py_None) {
        PyErr_Format(PyExc_TypeError, "argument '%s': masked __cuda_array_interface__ arrays are not supported", name);
        return -1;
    }
    const char *ts = PyUnicode_AsUTF8AndSize(typestr, NULL);
    if (!ts)
        return -1;
    fm_dtype dt = typestr_dtype(ts);
    if (dt == FM_DTYPE_INVALID) {
        PyErr_Format(PyExc_TypeError, "argument '%s': unsupported element type (typestr '%s')", name, ts);
        return -1;
    }
    if (writable) {
        int ro = PyObject_IsTrue(PyTuple_GetItem(data, 1));
        if (ro < 0)
            return -1;
        if (ro) {
            PyErr_Format(PyExc_ValueError, "argument '%s' is read-only; an output must be writable", name);
            return -1;
        }
    }
    if (fmpy_ptr_arg("", "__cuda_array_interface__['data'][0]", PyTuple_GetItem(data, 0), &t->data) < 0)
        return -1;
    t->device.type = FM_DEVICE_AUTO;
    t->device.id = 0;
    t->dtype = dt;
    return fmpy_dims_from_tuples(name, shape, strides, (Py_ssize_t)fm_dtype_size(dt), t);
}

static int tensor_from_cai(PyObject *cai, const char *name, int writable, fm_tensor *t)
{
    if (!PyDict_Check(cai)) {
        PyErr_Format(PyExc_TypeError, "argument '%s': __cuda_array_interface__ is not a dict", name);
        return -1;
    }
    static const char *const keys[5] = {"shape", "typestr", "data", "strides", "mask"};
    PyObject *v[5];
    for (int i = 0; i < 5; i++)
        v[i] = Py_XNewRef(PyDict_GetItemString(cai, keys[i]));
    int r = cai_read(v[0], v[1], v[2], v[3], v[4], name, writable, t);
    for (int i = 0; i < 5; i++)
        Py_XDECREF(v[i]);
    return r;
}

/* The registered library obj belongs to (index), -1 if none. */
static int lib_of(fm_state *st, PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    for (int i = 0; i < st->nlibs; i++) /* exact types first: no MRO walk on the hot path */
        if ((PyObject *)tp == st->libs[i].type)
            return i;
    int best = -1; /* a subclass: the library of its most derived registered base */
    for (int i = 0; i < st->nlibs; i++)
        if (st->libs[i].type && PyType_IsSubtype(tp, (PyTypeObject *)st->libs[i].type) &&
            (best < 0 || PyType_IsSubtype((PyTypeObject *)st->libs[i].type, (PyTypeObject *)st->libs[best].type)))
            best = i;
    return best;
}

/* The exchange table reads objects of the type it was found on. A subclass too, unless
 * it overrides __torch_function__ (its data_ptr()/stride() may then mean something else,
 * which the attribute path honours); torch.nn.Parameter's override only disables the
 * protocol, but telling that apart would need torch itself, so it takes the attribute path. */
static int xapi_reads_type(const fm_lib *L, PyObject *obj)
{
    PyObject *tp = (PyObject *)Py_TYPE(obj);
    if (tp == L->type)
        return 1;
    /* walk the MRO up to the library's type: does a class on the way define its own? */
    PyObject *mro = PyObject_GetAttrString(tp, "__mro__");
    int ok = mro && PyTuple_Check(mro);
    for (Py_ssize_t i = 0; ok && i < PyTuple_Size(mro); i++) {
        PyObject *cls = PyTuple_GetItem(mro, i);
        if (cls == L->type)
            break;
        PyObject *dict = PyObject_GetAttrString(cls, "__dict__");
        int has = dict ? PyMapping_HasKeyString(dict, "__torch_function__") : 1;
        Py_XDECREF(dict);
        ok = !has;
    }
    Py_XDECREF(mro);
    PyErr_Clear();
    return ok;
}

/* Fill *t from obj. *lib (if not NULL) receives the registered library of obj, or -1
 * (buffer protocol, __cuda_array_interface__, DLPack). On failure h is released. */
int fmpy_tensor_from_any(fm_state *st, PyObject *obj, const char *name, int writable, fm_tensor *t, fm_hold *h,
                         int *lib)
{
    fmpy_hold_init(h);
    if (lib)
        *lib = -1;
    if (obj == Py_None) {
        PyErr_Format(PyExc_TypeError, "argument '%s' must be an array, not None", name);
        return -1;
    }
    /* Registered GPU-capable libraries first: a CuPy array may expose a buffer slot that
     * only fails (device memory), which would hide it from the library path. */
    int li0 = lib_of(st, obj);
    if (li0 >= 0 && st->libs[li0].style != STYLE_NUMPY) {
        if (lib)
            *lib = li0;
        const fm_lib *L = &st->libs[li0];
        if (L->xapi && xapi_reads_type(L, obj)) {
            int r = fmpy_xapi_tensor(L, obj, t);
            if (r == 0 && L->style == STYLE_TORCH) /* real data only here: the negative bit */
                r = fmpy_torch_lazy_bits(st, obj, name, 0);
            if (r <= 0)
                return r;
        }
        return L->style == STYLE_TORCH ? tensor_from_torch(st, L, obj, name, t) : tensor_from_cupy(st, L, obj, name, t);
    }
    PyObject *buffer_error = NULL; /* why the buffer export failed, if it did */
    if (PyObject_CheckBuffer(obj)) {
        if (tensor_from_buffer(st, obj, name, writable, t, h) == 0)
            return 0;
        if (h->kind != HOLD_NONE) { /* the buffer was obtained but is unusable: error already set */
            fmpy_hold_release(h);
            return -1;
        }
        buffer_error = fmpy_take_error_text();
        if (!buffer_error)
            return -1;
        if (writable) { /* the usual reason: a read-only array given as an output */
            Py_buffer probe;
            if (PyObject_GetBuffer(obj, &probe, PyBUF_STRIDES) == 0) {
                PyBuffer_Release(&probe);
                Py_DECREF(buffer_error);
                PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT), "%s is read-only; an output must be writable",
                             name);
                return -1;
            }
            PyErr_Clear();
        }
    } else {
        PyObject *cai = PyObject_GetAttr(obj, st->s[S_cai]);
        if (cai) {
            int r = tensor_from_cai(cai, name, writable, t);
            Py_DECREF(cai);
            return r;
        }
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
    }
    PyObject *meth = PyObject_GetAttr(obj, st->s[S_dlpack]);
    if (!meth) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            Py_XDECREF(buffer_error);
            return -1;
        }
        PyErr_Clear();
        if (buffer_error) {
            PyErr_Format(PyExc_TypeError, "argument '%s': its buffer cannot be used: %U", name, buffer_error);
            Py_DECREF(buffer_error);
            return -1;
        }
        fmpy_raise_type(PyExc_TypeError, "", name, "an array (buffer protocol, PyTorch, CuPy, "
                        "__cuda_array_interface__ or __dlpack__)", obj);
        return -1;
    }
    Py_XDECREF(buffer_error);
    int r = fmpy_tensor_from_dlpack(st, obj, meth, name, writable, t, h);
    Py_DECREF(meth);
    if (r < 0)
        fmpy_hold_release(h);
    return r;
}

/* ------------------------------------------------------------------------ */
/* How the extension sees an array, for Python.                             */
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
