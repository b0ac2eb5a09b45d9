/*
 * _fusemath.c : the CPython extension module fusemath._fusemath.
 *
 * Limited API (abi3, Python >= 3.11) only: module state instead of static globals,
 * heap types, multi-phase initialisation, METH_FASTCALL on the hot paths. The
 * module state owns one fm_context, created at exec and destroyed when the module
 * is freed; every Plan keeps a strong reference to the module so the context
 * outlives the plans made in it.
 *
 * Arrays come in through the buffer protocol (NumPy, memoryview, array.array) or
 * through DLPack (__dlpack__, CPU only for now). Both are turned into fm_tensor
 * descriptors; the buffers / capsules are held while the C library runs and
 * released afterwards. Errors of the library become per-module exception classes
 * that also derive from the matching builtin (ValueError, TypeError, ...).
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <fusemath/fusemath.h>

/* ------------------------------------------------------------------------ */
/* DLPack: the stable ABI, declared here so no header is needed.            */
/* ------------------------------------------------------------------------ */
enum { DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3, DL_CUDA_MANAGED = 13 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_OPAQUE = 3, DL_BFLOAT = 4, DL_COMPLEX = 5, DL_BOOL = 6 };

typedef struct {
    int32_t device_type;
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL = compact row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define DLPACK_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_IS_COPIED (UINT64_C(1) << 1)

/* ------------------------------------------------------------------------ */
/* Module state.                                                            */
/* ------------------------------------------------------------------------ */
typedef struct {
    fm_context *ctx;
    PyObject *plan_type;
    PyObject *runner_type;
    PyObject *base_error;                  /* FusemathError */
    PyObject *errors[FM_STATUS_COUNT_];    /* class per status; [FM_OK] unused */
    PyObject *s_dlpack;                    /* "__dlpack__" */
    PyObject *s_dlpack_device;             /* "__dlpack_device__" */
    PyObject *empty_tuple;
    PyObject *kw_max_version;              /* {"max_version": (1, 0)} */
} fm_state;

static inline fm_state *module_state(PyObject *module) { return (fm_state *)PyModule_GetState(module); }

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
    {FM_ERR_OUT_OF_MEMORY, "OutOfMemoryError", B_MEMORY, -1, "The library ran out of memory."},
    {FM_ERR_ALIAS, "AliasError", B_VALUE, -1, "An output overlaps an input in memory."},
    {FM_ERR_TOO_LARGE, "TooLargeError", B_VALUE, -1, "A size exceeds the index range of the backend."},
    {FM_ERR_BACKEND, "BackendError", B_RUNTIME, -1, "The backend library reported an error."},
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

/* Raise the class of status s with message msg (decoded leniently). */
static PyObject *raise_msg(fm_state *st, fm_status s, const char *msg)
{
    PyObject *cls = NULL;
    if (st && (int)s > 0 && (int)s < FM_STATUS_COUNT_)
        cls = st->errors[s];
    if (!cls)
        cls = st && st->base_error ? st->base_error : PyExc_RuntimeError;
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (!text)
        return NULL;
    PyErr_SetObject(cls, text);
    Py_DECREF(text);
    return NULL;
}

/* Raise for a failed library call: message = fm_last_error() or fm_status_string(). */
static PyObject *raise_status(fm_state *st, fm_status s)
{
    const char *detail = fm_last_error();
    return raise_msg(st, s, (detail && detail[0]) ? detail : fm_status_string(s));
}

/* New reference to the name of o's type, for messages. */
static PyObject *type_name(PyObject *o)
{
    PyObject *n = PyType_GetName(Py_TYPE(o));
    if (!n) {
        PyErr_Clear();
        n = PyUnicode_FromString("?");
    }
    return n;
}

static void raise_type(PyObject *exc, const char *fmt_prefix, const char *name, const char *what, PyObject *o)
{
    PyObject *tn = type_name(o);
    if (tn) {
        PyErr_Format(exc, "%s%s must be %s, not %U", fmt_prefix, name, what, tn);
        Py_DECREF(tn);
    }
}

/* ------------------------------------------------------------------------ */
/* Small argument helpers.                                                  */
/* ------------------------------------------------------------------------ */

/* Parse vectorcall arguments (positional then keywords) into out[0..n-1] (borrowed,
 * NULL where absent). The first nrequired must be present. */
static int parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, int n, int nrequired, PyObject **out)
{
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fname, n, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    if (kwnames) {
        Py_ssize_t nkw = PyTuple_Size(kwnames);
        if (nkw < 0)
            return -1;
        for (Py_ssize_t j = 0; j < nkw; j++) {
            PyObject *key = PyTuple_GetItem(kwnames, j);
            if (!key)
                return -1;
            int found = -1;
            for (int i = 0; i < n; i++) {
                if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) {
                    found = i;
                    break;
                }
            }
            if (found < 0) {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname, key);
                return -1;
            }
            if (out[found]) {
                PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname, names[found]);
                return -1;
            }
            out[found] = args[nargs + j];
        }
    }
    for (int i = 0; i < nrequired; i++) {
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", fname, names[i], i + 1);
            return -1;
        }
    }
    return 0;
}

/* An int argument (anything with __index__) in [lo, hi]; NULL or None keeps *v. */
static int int_arg(const char *fname, const char *name, PyObject *o, long long lo, long long hi, long long *v)
{
    if (!o || o == Py_None)
        return 0;
    PyObject *idx = PyNumber_Index(o);
    if (!idx) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            raise_type(PyExc_TypeError, fname, name, "an int", o);
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
static int number_arg(const char *fname, const char *name, PyObject *o, double z[2])
{
    if (!o || o == Py_None)
        return 0;
    if (PyFloat_Check(o) || PyLong_Check(o)) {
        double x = PyFloat_AsDouble(o);
        if (x == -1.0 && PyErr_Occurred())
            return -1;
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
        raise_type(PyExc_TypeError, fname, name, "a number", o);
        return -1;
    }
    /* NumPy scalars and other number-likes: complex(o) uses __complex__, __float__ or __index__. */
    PyObject *c = PyObject_CallFunctionObjArgs((PyObject *)&PyComplex_Type, o, NULL);
    if (!c) {
        PyErr_Clear();
        raise_type(PyExc_TypeError, fname, name, "a number", o);
        return -1;
    }
    z[0] = PyComplex_RealAsDouble(c);
    z[1] = PyComplex_ImagAsDouble(c);
    Py_DECREF(c);
    return PyErr_Occurred() ? -1 : 0;
}

/* A pointer given as an int (or None = NULL). */
static int ptr_arg(const char *fname, const char *name, PyObject *o, void **p)
{
    if (o == Py_None) {
        *p = NULL;
        return 0;
    }
    if (!PyLong_Check(o)) {
        raise_type(PyExc_TypeError, fname, name, "an int (address) or None", o);
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

/* ------------------------------------------------------------------------ */
/* Array objects -> fm_tensor.                                              */
/* ------------------------------------------------------------------------ */
enum { HOLD_NONE = 0, HOLD_BUFFER, HOLD_DLPACK, HOLD_DLPACK_V1 };

/* What keeps an operand's memory alive while the library uses it. */
typedef struct {
    int kind;
    Py_buffer view;
    PyObject *capsule;
    void *managed; /* DLManagedTensor* or DLManagedTensorVersioned*, owned after the rename */
} fm_hold;

static void hold_release(fm_hold *h)
{
    if (h->kind == HOLD_NONE)
        return;
    /* Deleters and buffer releases may run Python code: keep a pending error intact. */
    PyObject *et = NULL, *ev = NULL, *etb = NULL;
    int had_error = PyErr_Occurred() != NULL;
    if (had_error)
        PyErr_Fetch(&et, &ev, &etb);
    switch (h->kind) {
    case HOLD_BUFFER:
        PyBuffer_Release(&h->view);
        break;
    case HOLD_DLPACK: {
        DLManagedTensor *m = (DLManagedTensor *)h->managed;
        if (m && m->deleter)
            m->deleter(m);
        Py_XDECREF(h->capsule);
        break;
    }
    case HOLD_DLPACK_V1: {
        DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)h->managed;
        if (m && m->deleter)
            m->deleter(m);
        Py_XDECREF(h->capsule);
        break;
    }
    default:
        break;
    }
    h->kind = HOLD_NONE;
    h->capsule = NULL;
    h->managed = NULL;
    if (had_error)
        PyErr_Restore(et, ev, etb);
    else if (PyErr_Occurred())
        PyErr_WriteUnraisable(NULL); /* a deleter failed: report, do not mask success */
}

/* struct-module format + itemsize -> dtype (FM_DTYPE_INVALID if not representable). */
static fm_dtype format_dtype(const char *fmt, Py_ssize_t itemsize)
{
    if (!fmt)
        fmt = "B";
    char order = '@';
    if (*fmt == '@' || *fmt == '=' || *fmt == '<' || *fmt == '>' || *fmt == '!')
        order = *fmt++;
    if (itemsize > 1 && (order == '>' || order == '!')) {
        const uint16_t one = 1;
        if (*(const uint8_t *)&one == 1)
            return FM_DTYPE_INVALID; /* big-endian data on a little-endian host */
    }
    if (itemsize > 1 && order == '<') {
        const uint16_t one = 1;
        if (*(const uint8_t *)&one != 1)
            return FM_DTYPE_INVALID;
    }
    fm_dtype t = FM_DTYPE_INVALID;
    if (fmt[0] && fmt[1] == '\0') {
        switch (fmt[0]) {
        case 'e': t = FM_F16; break;
        case 'f': t = FM_F32; break;
        case 'd': t = FM_F64; break;
        case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
            t = itemsize == 1 ? FM_I8 : itemsize == 4 ? FM_I32 : itemsize == 8 ? FM_I64 : FM_DTYPE_INVALID;
            break;
        case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
            t = itemsize == 1 ? FM_U8 : itemsize == 4 ? FM_U32 : FM_DTYPE_INVALID;
            break;
        default: break;
        }
    } else if (fmt[0] == 'Z' && fmt[1] && fmt[2] == '\0') {
        if (fmt[1] == 'f')
            t = FM_C64;
        else if (fmt[1] == 'd')
            t = FM_C128;
    }
    if (t != FM_DTYPE_INVALID && (Py_ssize_t)fm_dtype_size(t) != itemsize)
        t = FM_DTYPE_INVALID;
    return t;
}

static fm_dtype dlpack_dtype(DLDataType d)
{
    if (d.lanes != 1)
        return FM_DTYPE_INVALID;
    switch (d.code) {
    case DL_FLOAT: return d.bits == 16 ? FM_F16 : d.bits == 32 ? FM_F32 : d.bits == 64 ? FM_F64 : FM_DTYPE_INVALID;
    case DL_BFLOAT: return d.bits == 16 ? FM_BF16 : FM_DTYPE_INVALID;
    case DL_COMPLEX: return d.bits == 64 ? FM_C64 : d.bits == 128 ? FM_C128 : FM_DTYPE_INVALID;
    case DL_INT: return d.bits == 8 ? FM_I8 : d.bits == 32 ? FM_I32 : d.bits == 64 ? FM_I64 : FM_DTYPE_INVALID;
    case DL_UINT: return d.bits == 8 ? FM_U8 : d.bits == 32 ? FM_U32 : FM_DTYPE_INVALID;
    default: return FM_DTYPE_INVALID;
    }
}

static const char *device_name(int32_t type)
{
    switch (type) {
    case DL_CPU: return "cpu";
    case DL_CUDA: return "cuda";
    case DL_CUDA_HOST: return "cuda_host";
    case DL_CUDA_MANAGED: return "cuda_managed";
    default: return "unknown";
    }
}

static int tensor_from_buffer(PyObject *obj, const char *name, int writable, fm_tensor *t, fm_hold *h)
{
    Py_buffer *v = &h->view;
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) < 0)
        return -1;
    h->kind = HOLD_BUFFER;

    fm_dtype dt = format_dtype(v->format, v->itemsize);
    if (dt == FM_DTYPE_INVALID) {
        PyErr_Format(PyExc_TypeError, "argument '%s': unsupported element type (buffer format '%s', itemsize %zd)",
                     name, v->format ? v->format : "B", v->itemsize);
        return -1;
    }
    if (v->ndim < 0 || v->ndim > FM_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "argument '%s' has %d dimensions; at most %d are supported", name, v->ndim,
                     FM_MAX_NDIM);
        return -1;
    }
    if (v->suboffsets) {
        PyErr_Format(PyExc_TypeError, "argument '%s': indirect (suboffset) buffers are not supported", name);
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
    for (int i = v->ndim; i < FM_MAX_NDIM; i++) {
        t->shape[i] = 0;
        t->strides[i] = 0;
    }
    return 0;
}

/* Parse (device_type, device_id) returned by __dlpack_device__; -1 with error set. */
static int check_dlpack_device(fm_state *st, PyObject *obj, const char *name)
{
    PyObject *meth = PyObject_GetAttr(obj, st->s_dlpack_device);
    if (!meth) {
        PyErr_Clear(); /* optional: the capsule's device is checked anyway */
        return 0;
    }
    PyObject *r = PyObject_CallNoArgs(meth);
    Py_DECREF(meth);
    if (!r)
        return -1;
    long type = -1, id = 0;
    if (PyTuple_Check(r) && PyTuple_Size(r) == 2) {
        type = PyLong_AsLong(PyTuple_GetItem(r, 0));
        id = PyLong_AsLong(PyTuple_GetItem(r, 1));
    }
    Py_DECREF(r);
    if (PyErr_Occurred() || type < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "argument '%s': __dlpack_device__() did not return (device_type, device_id)",
                     name);
        return -1;
    }
    if (type != DL_CPU && type != DL_CUDA_HOST) {
        PyErr_Format(st->errors[FM_ERR_DEVICE] ? st->errors[FM_ERR_DEVICE] : PyExc_ValueError,
                     "argument '%s' lives on device %s:%ld; fusemath's Python front takes CPU arrays only for now",
                     name, device_name((int32_t)type), id);
        return -1;
    }
    return 0;
}

static int tensor_from_dlpack(fm_state *st, PyObject *obj, PyObject *meth, const char *name, int writable,
                              fm_tensor *t, fm_hold *h)
{
    if (check_dlpack_device(st, obj, name) < 0)
        return -1;
    PyObject *cap = PyObject_Call(meth, st->empty_tuple, st->kw_max_version);
    if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
        /* a producer older than DLPack 1.0 does not know max_version */
        PyErr_Clear();
        cap = PyObject_CallNoArgs(meth);
    }
    if (!cap)
        return -1;

    const DLTensor *dl;
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (!m) {
            Py_DECREF(cap);
            return -1;
        }
        if (m->version.major != 1) {
            /* Leave the capsule unconsumed: its own destructor frees it. */
            PyErr_Format(PyExc_TypeError, "argument '%s': unsupported DLPack version %u.%u", name,
                         (unsigned)m->version.major, (unsigned)m->version.minor);
            Py_DECREF(cap);
            return -1;
        }
        if (PyCapsule_SetName(cap, "used_dltensor_versioned") < 0) {
            Py_DECREF(cap);
            return -1;
        }
        h->kind = HOLD_DLPACK_V1;
        h->capsule = cap;
        h->managed = m;
        if (writable && (m->flags & DLPACK_FLAG_READ_ONLY)) {
            PyErr_Format(PyExc_ValueError, "argument '%s' is read-only; an output must be writable", name);
            return -1;
        }
        if (writable && (m->flags & DLPACK_FLAG_IS_COPIED)) {
            PyErr_Format(PyExc_ValueError,
                         "argument '%s': its producer exported a copy; an output must be the array's own memory",
                         name);
            return -1;
        }
        dl = &m->dl_tensor;
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = (DLManagedTensor *)PyCapsule_GetPointer(cap, "dltensor");
        if (!m) {
            Py_DECREF(cap);
            return -1;
        }
        if (PyCapsule_SetName(cap, "used_dltensor") < 0) {
            Py_DECREF(cap);
            return -1;
        }
        h->kind = HOLD_DLPACK;
        h->capsule = cap;
        h->managed = m;
        dl = &m->dl_tensor;
    } else {
        Py_DECREF(cap);
        PyErr_Format(PyExc_TypeError, "argument '%s': __dlpack__() did not return an unused DLPack capsule", name);
        return -1;
    }

    if (dl->device.device_type != DL_CPU && dl->device.device_type != DL_CUDA_HOST) {
        PyErr_Format(st->errors[FM_ERR_DEVICE] ? st->errors[FM_ERR_DEVICE] : PyExc_ValueError,
                     "argument '%s' lives on device %s:%d; fusemath's Python front takes CPU arrays only for now",
                     name, device_name(dl->device.device_type), (int)dl->device.device_id);
        return -1;
    }
    fm_dtype dt = dlpack_dtype(dl->dtype);
    if (dt == FM_DTYPE_INVALID) {
        PyErr_Format(PyExc_TypeError, "argument '%s': unsupported DLPack dtype (code %d, bits %d, lanes %d)", name,
                     (int)dl->dtype.code, (int)dl->dtype.bits, (int)dl->dtype.lanes);
        return -1;
    }
    if (dl->ndim < 0 || dl->ndim > FM_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "argument '%s' has %d dimensions; at most %d are supported", name,
                     (int)dl->ndim, FM_MAX_NDIM);
        return -1;
    }
    if (dl->ndim > 0 && !dl->shape) {
        PyErr_Format(PyExc_ValueError, "argument '%s': DLPack tensor without a shape", name);
        return -1;
    }
    t->data = (char *)dl->data + dl->byte_offset;
    t->device.type = dl->device.device_type;
    t->device.id = dl->device.device_type == DL_CPU ? 0 : dl->device.device_id;
    t->dtype = dt;
    t->ndim = dl->ndim;
    int64_t contiguous = 1;
    for (int i = dl->ndim - 1; i >= 0; i--) {
        if (dl->shape[i] < 0) {
            PyErr_Format(PyExc_ValueError, "argument '%s': negative extent in DLPack shape", name);
            return -1;
        }
        t->shape[i] = dl->shape[i];
        t->strides[i] = dl->strides ? dl->strides[i] : contiguous;
        contiguous *= dl->shape[i];
    }
    for (int i = dl->ndim; i < FM_MAX_NDIM; i++) {
        t->shape[i] = 0;
        t->strides[i] = 0;
    }
    return 0;
}

/* Take the pending exception and return str(value) (new reference, never NULL unless out of memory). */
static PyObject *take_error_text(void)
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

/* Fill *t from obj (buffer protocol preferred, then DLPack). On failure h is released. */
static int tensor_from_object(fm_state *st, PyObject *obj, const char *name, int writable, fm_tensor *t,
                              fm_hold *h)
{
    h->kind = HOLD_NONE;
    h->capsule = NULL;
    h->managed = NULL;
    if (obj == Py_None) {
        PyErr_Format(PyExc_TypeError, "argument '%s' must be an array, not None", name);
        return -1;
    }
    PyObject *buffer_error = NULL; /* why the buffer export failed, if it did */
    if (PyObject_CheckBuffer(obj)) {
        if (tensor_from_buffer(obj, name, writable, t, h) == 0)
            return 0;
        if (h->kind != HOLD_NONE) { /* the buffer was obtained but is unusable: error already set */
            hold_release(h);
            return -1;
        }
        buffer_error = take_error_text();
        if (!buffer_error)
            return -1;
        if (writable) { /* the usual reason: a read-only array given as an output */
            Py_buffer probe;
            if (PyObject_GetBuffer(obj, &probe, PyBUF_STRIDES) == 0) {
                PyBuffer_Release(&probe);
                Py_DECREF(buffer_error);
                PyErr_Format(PyExc_ValueError, "argument '%s' is read-only; an output must be writable", name);
                return -1;
            }
            PyErr_Clear();
        }
    }
    PyObject *meth = PyObject_GetAttr(obj, st->s_dlpack);
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
        PyObject *tn = type_name(obj);
        if (tn) {
            PyErr_Format(PyExc_TypeError,
                         "argument '%s' must be an array (an object with the buffer protocol or __dlpack__), not %U",
                         name, tn);
            Py_DECREF(tn);
        }
        return -1;
    }
    Py_XDECREF(buffer_error);
    int r = tensor_from_dlpack(st, obj, meth, name, writable, t, h);
    Py_DECREF(meth);
    if (r < 0)
        hold_release(h);
    return r;
}

/* ------------------------------------------------------------------------ */
/* Plan type.                                                               */
/* ------------------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    fm_plan *plan;
    PyObject *module; /* strong: the context in its state must outlive the plan */
} PlanObject;

static fm_state *plan_state(PyObject *self)
{
    PlanObject *po = (PlanObject *)self;
    return po->module ? module_state(po->module) : NULL;
}

static PyObject *plan_wrap(fm_state *st, PyObject *module, fm_plan *plan)
{
    PyTypeObject *tp = (PyTypeObject *)st->plan_type;
    allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    PlanObject *po = (PlanObject *)alloc(tp, 0);
    if (!po) {
        fm_plan_release(plan);
        return NULL;
    }
    po->plan = plan;
    Py_INCREF(module);
    po->module = module;
    return (PyObject *)po;
}

static int plan_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(((PlanObject *)self)->module);
    return 0;
}

static int plan_clear(PyObject *self)
{
    PlanObject *po = (PlanObject *)self;
    fm_plan *p = po->plan;
    po->plan = NULL;
    fm_plan_release(p); /* before the module, whose state owns the context */
    Py_CLEAR(po->module);
    return 0;
}

static void plan_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    plan_clear(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyObject *plan_freed_error(PyObject *self, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof msg, "Plan.%s: the plan was freed", what);
    return raise_msg(plan_state(self), FM_ERR_FREED, msg);
}

static const char *const slot_names[FM_MATMUL_NSLOTS] = {"a", "b", "c", "bias", "d", "aux", "bgrad", "scale"};
#define PY_NSLOTS 6 /* slots the Python calls take so far */

PyDoc_STRVAR(plan_execute_doc,
             "execute(a, b, c, bias, d, aux, stream=None)\n--\n\n"
             "Run the plan on raw addresses (ints, or None/0 for unused slots), in the slot order of\n"
             "fusemath.h (A, B, C, BIAS, D, AUX). The GIL is released while it runs.\n"
             "UNSAFE: the addresses must point at memory laid out as planned and alive for the call.");

static PyObject *plan_execute(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PlanObject *po = (PlanObject *)self;
    if (nargs != PY_NSLOTS && nargs != PY_NSLOTS + 1) {
        PyErr_Format(PyExc_TypeError,
                     "Plan.execute() takes 6 addresses (a, b, c, bias, d, aux) and an optional stream (%zd given)",
                     nargs);
        return NULL;
    }
    void *ptrs[FM_MATMUL_NSLOTS] = {0};
    for (int i = 0; i < PY_NSLOTS; i++) {
        PyObject *o = args[i];
        if (PyLong_CheckExact(o)) { /* fast path */
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
            if (!overflow && v >= 0) {
                ptrs[i] = (void *)(uintptr_t)v;
                continue;
            }
        }
        char what[32];
        snprintf(what, sizeof what, "address of '%s'", slot_names[i]);
        if (ptr_arg("Plan.execute(): ", what, o, &ptrs[i]) < 0)
            return NULL;
    }
    void *stream = NULL;
    if (nargs > PY_NSLOTS && ptr_arg("Plan.execute(): ", "stream", args[PY_NSLOTS], &stream) < 0)
        return NULL;
    fm_plan *p = po->plan;
    if (!p)
        return plan_freed_error(self, "execute()");
    fm_plan_retain(p); /* another thread may free() the Python object meanwhile */
    fm_status s;
    Py_BEGIN_ALLOW_THREADS
    s = fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, stream);
    Py_END_ALLOW_THREADS
    fm_plan_release(p);
    if (s != FM_OK)
        return raise_status(plan_state(self), s);
    Py_RETURN_NONE;
}

static PyObject *plan_describe(PyObject *self, PyObject *unused)
{
    (void)unused;
    PlanObject *po = (PlanObject *)self;
    if (!po->plan)
        return plan_freed_error(self, "describe()");
    const char *d = fm_plan_describe(po->plan);
    return PyUnicode_DecodeUTF8(d ? d : "", d ? (Py_ssize_t)strlen(d) : 0, "replace");
}

static PyObject *plan_free(PyObject *self, PyObject *unused)
{
    (void)unused;
    PlanObject *po = (PlanObject *)self;
    fm_plan *p = po->plan;
    po->plan = NULL;
    fm_plan_release(p);
    Py_RETURN_NONE;
}

static PyObject *plan_get_backend(PyObject *self, void *closure)
{
    (void)closure;
    PlanObject *po = (PlanObject *)self;
    if (!po->plan)
        return plan_freed_error(self, "backend");
    const char *b = fm_plan_backend(po->plan);
    return PyUnicode_FromString(b ? b : "");
}

static PyObject *plan_get_op(PyObject *self, void *closure)
{
    (void)closure;
    PlanObject *po = (PlanObject *)self;
    if (!po->plan)
        return plan_freed_error(self, "op");
    return PyUnicode_FromString(fm_op_name(fm_plan_op(po->plan)));
}

static PyObject *plan_get_freed(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((PlanObject *)self)->plan == NULL);
}

static PyObject *plan_repr(PyObject *self)
{
    PlanObject *po = (PlanObject *)self;
    if (!po->plan)
        return PyUnicode_FromString("<fusemath Plan (freed)>");
    const char *d = fm_plan_describe(po->plan);
    return PyUnicode_FromFormat("<fusemath Plan: %s>", d ? d : "");
}

static PyMethodDef plan_methods[] = {
    {"execute", (PyCFunction)(void (*)(void))plan_execute, METH_FASTCALL, plan_execute_doc},
    {"describe", plan_describe, METH_NOARGS,
     "describe()\n--\n\nOne line naming the operation, backend, dtype, sizes and epilogue."},
    {"free", plan_free, METH_NOARGS,
     "free()\n--\n\nRelease the plan now (running executions finish first). Later use raises "
     "InvalidStateError."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef plan_getset[] = {
    {"backend", plan_get_backend, NULL, "Name of the backend that executes the plan.", NULL},
    {"op", plan_get_op, NULL, "The operation: 'matmul', ...", NULL},
    {"freed", plan_get_freed, NULL, "True once free() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot plan_slots[] = {
    {Py_tp_doc, (void *)"A planned fusemath operation (immutable; safe to execute from several threads)."},
    {Py_tp_dealloc, (void *)plan_dealloc},
    {Py_tp_traverse, (void *)plan_traverse},
    {Py_tp_clear, (void *)plan_clear},
    {Py_tp_methods, plan_methods},
    {Py_tp_getset, plan_getset},
    {Py_tp_repr, (void *)plan_repr},
    {0, NULL},
};

static PyType_Spec plan_spec = {
    .name = "fusemath._fusemath.Plan",
    .basicsize = sizeof(PlanObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = plan_slots,
};


/* ------------------------------------------------------------------------ */
/* Runner: one planned execute bound to its operands, in a single C call.    */
/* Matmul.execute() goes through it: allocating the output, taking its       */
/* address and running the plan cost no Python frames (host overhead).       */
/* ------------------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    PyObject *plan;     /* PlanObject */
    PyObject *keep;     /* the operand arrays: their memory lives while we run */
    PyObject *empty;    /* numpy.empty */
    PyObject *d_args;   /* (shape, dtype) */
    PyObject *aux_args; /* (shape, dtype) or NULL */
    PyObject *key;      /* "relu_aux" / "gelu_aux" or NULL */
    PyObject *index;    /* () for a 0-d result to unwrap, or NULL */
    void *ptrs[4];      /* a, b, c, bias */
} RunnerObject;

static int runner_traverse(PyObject *self, visitproc visit, void *arg)
{
    RunnerObject *r = (RunnerObject *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(r->plan);
    Py_VISIT(r->keep);
    Py_VISIT(r->empty);
    Py_VISIT(r->d_args);
    Py_VISIT(r->aux_args);
    Py_VISIT(r->key);
    Py_VISIT(r->index);
    return 0;
}

static int runner_clear(PyObject *self)
{
    RunnerObject *r = (RunnerObject *)self;
    Py_CLEAR(r->plan);
    Py_CLEAR(r->keep);
    Py_CLEAR(r->empty);
    Py_CLEAR(r->d_args);
    Py_CLEAR(r->aux_args);
    Py_CLEAR(r->key);
    Py_CLEAR(r->index);
    return 0;
}

static void runner_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    runner_clear(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* A fresh output from numpy.empty and its address. */
static PyObject *runner_alloc(PyObject *empty, PyObject *args, void **ptr)
{
    PyObject *arr = PyObject_Call(empty, args, NULL);
    if (!arr)
        return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(arr, &v, PyBUF_WRITABLE) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    *ptr = v.buf;
    PyBuffer_Release(&v); /* the array owns the memory; we hold the array */
    return arr;
}

static PyObject *runner_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    RunnerObject *r = (RunnerObject *)self;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "Runner.run() takes at most one argument (stream)");
        return NULL;
    }
    void *stream = NULL;
    if (nargs == 1 && ptr_arg("Matmul.execute(): ", "stream", args[0], &stream) < 0)
        return NULL;
    if (!r->plan) { /* only after a garbage-collector clear */
        PyErr_SetString(PyExc_RuntimeError, "Matmul.execute(): the runner was cleared");
        return NULL;
    }
    void *ptrs[FM_MATMUL_NSLOTS] = {r->ptrs[0], r->ptrs[1], r->ptrs[2], r->ptrs[3], NULL, NULL};
    PyObject *d = runner_alloc(r->empty, r->d_args, &ptrs[FM_MATMUL_D]);
    if (!d)
        return NULL;
    PyObject *aux = NULL;
    if (r->aux_args && !(aux = runner_alloc(r->empty, r->aux_args, &ptrs[FM_MATMUL_AUX]))) {
        Py_DECREF(d);
        return NULL;
    }
    PyObject *plan = r->plan, *keep = r->keep; /* alive even if the Matmul is freed meanwhile */
    Py_INCREF(plan);
    Py_XINCREF(keep);
    fm_plan *p = ((PlanObject *)plan)->plan;
    fm_status s = FM_OK;
    if (p) {
        fm_plan_retain(p);
        Py_BEGIN_ALLOW_THREADS
        s = fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, stream);
        Py_END_ALLOW_THREADS
        fm_plan_release(p);
    }
    Py_XDECREF(keep);
    Py_DECREF(plan);
    if (!p || s != FM_OK) {
        Py_DECREF(d);
        Py_XDECREF(aux);
        return p ? raise_status(plan_state(plan), s) : plan_freed_error(plan, "execute()");
    }
    if (r->index) {
        PyObject *scalar = PyObject_GetItem(d, r->index);
        Py_DECREF(d);
        d = scalar;
        if (!d) {
            Py_XDECREF(aux);
            return NULL;
        }
    }
    if (!aux)
        return d;
    return Py_BuildValue("(N{ON})", d, r->key, aux);
}

static PyObject *mod_make_runner(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    /* make_runner(plan, keep, pa, pb, pc, pbias, empty, dshape, dtype, aux_shape, aux_dtype, key, scalar) */
    fm_state *st = module_state(module);
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "make_runner() takes 13 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], (PyTypeObject *)st->plan_type)) {
        PyErr_SetString(PyExc_TypeError, "make_runner(): plan must be a fusemath Plan");
        return NULL;
    }
    void *ptrs[4];
    for (int i = 0; i < 4; i++)
        if (ptr_arg("make_runner(): ", slot_names[i], args[2 + i], &ptrs[i]) < 0)
            return NULL;
    PyTypeObject *tp = (PyTypeObject *)st->runner_type;
    allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    RunnerObject *r = (RunnerObject *)alloc(tp, 0);
    if (!r)
        return NULL;
    memcpy(r->ptrs, ptrs, sizeof ptrs);
    r->plan = Py_NewRef(args[0]);
    r->keep = Py_NewRef(args[1]);
    r->empty = Py_NewRef(args[6]);
    r->d_args = PyTuple_Pack(2, args[7], args[8]);
    int has_aux = args[11] != Py_None; /* key: "relu_aux" / "gelu_aux" */
    if (has_aux) {
        r->aux_args = PyTuple_Pack(2, args[9], args[10]);
        r->key = Py_NewRef(args[11]);
    }
    if (PyObject_IsTrue(args[12]) == 1)
        r->index = Py_NewRef(st->empty_tuple);
    if (!r->d_args || (has_aux && !r->aux_args)) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

static PyMethodDef runner_methods[] = {
    {"run", (PyCFunction)(void (*)(void))runner_run, METH_FASTCALL,
     "run(stream=None)\n--\n\nAllocate the result, execute the plan on the bound operands, return it."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot runner_slots[] = {
    {Py_tp_doc, (void *)"A plan bound to its operands (internal to fusemath.Matmul)."},
    {Py_tp_dealloc, (void *)runner_dealloc},
    {Py_tp_traverse, (void *)runner_traverse},
    {Py_tp_clear, (void *)runner_clear},
    {Py_tp_methods, runner_methods},
    {0, NULL},
};

static PyType_Spec runner_spec = {
    .name = "fusemath._fusemath.Runner",
    .basicsize = sizeof(RunnerObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = runner_slots,
};

/* ------------------------------------------------------------------------ */
/* Matmul entry points.                                                     */
/* ------------------------------------------------------------------------ */
enum { MM_RUN, MM_PLAN, MM_TUNE };

#define MM_COMMON_NAMES                                                                                 \
    "a", "b", "c", "bias", "d", "aux", "alpha", "beta", "epilogue", "execution", "device_id", "num_threads", \
        "panel_rows", "cpu_strategy"
static const char *const mm_run_names[] = {MM_COMMON_NAMES, "stream"};
static const char *const mm_plan_names[] = {MM_COMMON_NAMES};
static const char *const mm_tune_names[] = {MM_COMMON_NAMES, "repeats"};
enum { MM_NARGS = 15 };

static int epilogue_arg(fm_state *st, const char *fname, PyObject *o, unsigned *epi)
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
            raise_status(st, s);
            return -1;
        }
        return 0;
    }
    long long v = 0;
    if (int_arg(fname, "epilogue", o, 0, (long long)UINT32_MAX, &v) < 0)
        return -1;
    *epi = (unsigned)v;
    return 0;
}

static int options_from_args(fm_state *st, const char *fname, PyObject **a, fm_matmul_options *o)
{
    fm_matmul_options_init(o);
    long long v;
    if (number_arg(fname, "alpha", a[6], o->alpha) < 0 || number_arg(fname, "beta", a[7], o->beta) < 0)
        return -1;
    if (epilogue_arg(st, fname, a[8], &o->epilogue) < 0)
        return -1;
    v = o->execution;
    if (int_arg(fname, "execution", a[9], 0, 2, &v) < 0)
        return -1;
    o->execution = (int32_t)v;
    v = o->device_id;
    if (int_arg(fname, "device_id", a[10], 0, INT32_MAX, &v) < 0)
        return -1;
    o->device_id = (int32_t)v;
    v = o->num_threads;
    if (int_arg(fname, "num_threads", a[11], 0, INT32_MAX, &v) < 0)
        return -1;
    o->num_threads = (int32_t)v;
    v = o->panel_rows;
    if (int_arg(fname, "panel_rows", a[12], 0, INT32_MAX, &v) < 0)
        return -1;
    o->panel_rows = (int32_t)v;
    v = o->cpu_strategy;
    if (int_arg(fname, "cpu_strategy", a[13], 0, 2, &v) < 0)
        return -1;
    o->cpu_strategy = (int32_t)v;
    return 0;
}

/* Convert the six operand objects; a, b, d required. */
static int convert_slots(fm_state *st, PyObject **objs, fm_tensor *tens, fm_hold *holds, const fm_tensor **tp)
{
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
        holds[i].kind = HOLD_NONE;
        tp[i] = NULL;
    }
    for (int i = 0; i < PY_NSLOTS; i++) {
        PyObject *o = objs[i];
        int required = (i == FM_MATMUL_A || i == FM_MATMUL_B || i == FM_MATMUL_D);
        if (!o || o == Py_None) {
            if (required) {
                PyErr_Format(PyExc_TypeError, "argument '%s' must be an array, not None", slot_names[i]);
                return -1;
            }
            continue;
        }
        int writable = (i == FM_MATMUL_D || i == FM_MATMUL_AUX);
        if (tensor_from_object(st, o, slot_names[i], writable, &tens[i], &holds[i]) < 0)
            return -1;
        tp[i] = &tens[i];
    }
    return 0;
}

static void release_slots(fm_hold *holds)
{
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        hold_release(&holds[i]);
}

static PyObject *matmul_common(PyObject *module, int mode, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    fm_state *st = module_state(module);
    const char *fname = mode == MM_RUN ? "matmul" : mode == MM_PLAN ? "plan_matmul" : "autotune";
    PyObject *a[MM_NARGS];
    const char *const *names = mode == MM_RUN ? mm_run_names : mode == MM_PLAN ? mm_plan_names : mm_tune_names;
    int nnames = mode == MM_PLAN ? MM_NARGS - 1 : MM_NARGS;
    if (parse_args(fname, args, nargs, kwnames, names, nnames, 2, a) < 0)
        return NULL;
    if (mode == MM_PLAN)
        a[MM_NARGS - 1] = NULL;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%s(): ", fname);
    fm_matmul_options opts;
    if (options_from_args(st, prefix, a, &opts) < 0)
        return NULL;
    void *stream = NULL;
    long long repeats = 3;
    if (mode == MM_RUN && a[14] && ptr_arg(prefix, "stream", a[14], &stream) < 0)
        return NULL;
    if (mode == MM_TUNE && int_arg(prefix, "repeats", a[14], 1, 1000000, &repeats) < 0)
        return NULL;

    fm_tensor tens[FM_MATMUL_NSLOTS];
    fm_hold holds[FM_MATMUL_NSLOTS];
    const fm_tensor *tp[FM_MATMUL_NSLOTS];
    if (convert_slots(st, a, tens, holds, tp) < 0) {
        release_slots(holds);
        return NULL;
    }
    fm_status s;
    fm_plan *plan = NULL;
    int tuning = (int)repeats;
    Py_BEGIN_ALLOW_THREADS
    fm_clear_error();
    switch (mode) {
    case MM_RUN:
        s = fm_matmul(st->ctx, tp[0], tp[1], tp[2], tp[3], tp[4], tp[5], &opts, stream);
        break;
    case MM_PLAN:
        s = fm_matmul_plan(st->ctx, tp[0], tp[1], tp[2], tp[3], tp[4], tp[5], &opts, &plan);
        break;
    default:
        s = fm_matmul_autotune(st->ctx, tp[0], tp[1], tp[2], tp[3], tp[4], tp[5], &opts, tuning, &plan);
        break;
    }
    Py_END_ALLOW_THREADS
    release_slots(holds);
    if (s != FM_OK) {
        fm_plan_release(plan);
        return raise_status(st, s);
    }
    if (mode == MM_RUN)
        Py_RETURN_NONE;
    if (!plan)
        return raise_msg(st, FM_ERR_INTERNAL, "the library returned FM_OK without a plan");
    return plan_wrap(st, module, plan);
}

PyDoc_STRVAR(matmul_doc,
             "matmul(a, b, c, bias, d, aux, alpha=1.0, beta=0.0, epilogue=0, execution=0, device_id=0,\n"
             "       num_threads=0, panel_rows=0, stream=None)\n--\n\n"
             "Low level: D = act(alpha*A@B + beta*C + bias) into the array d (and aux), with fm_matmul.\n"
             "a: (..., M, K), b: (..., K, N) (no 1-D promotion here), c/bias/aux may be None.\n"
             "epilogue is an int of EPILOGUE_* bits or a string. The GIL is released while it runs.");

static PyObject *mod_matmul(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return matmul_common(module, MM_RUN, args, nargs, kwnames);
}

PyDoc_STRVAR(plan_matmul_doc,
             "plan_matmul(a, b, c, bias, d, aux, alpha=1.0, beta=0.0, epilogue=0, execution=0, device_id=0,\n"
             "            num_threads=0, panel_rows=0)\n--\n\n"
             "Plan D = act(alpha*A@B + beta*C + bias) for operands laid out like the given arrays\n"
             "(their shapes, strides, dtypes and alignment; the data is not touched). Returns a Plan.");

static PyObject *mod_plan_matmul(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return matmul_common(module, MM_PLAN, args, nargs, kwnames);
}

PyDoc_STRVAR(autotune_doc,
             "autotune(a, b, c, bias, d, aux, alpha=1.0, beta=0.0, epilogue=0, execution=0, device_id=0,\n"
             "         num_threads=0, panel_rows=0, repeats=3)\n--\n\n"
             "Time the candidate configurations on these arrays (d and aux are overwritten) and return\n"
             "a Plan with the fastest; it also replaces the cached plan for this problem.");

static PyObject *mod_autotune(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return matmul_common(module, MM_TUNE, args, nargs, kwnames);
}

PyDoc_STRVAR(output_shape_doc, "output_shape(a, b)\n--\n\nThe shape of D for a (..., M, K) and b (..., K, N).");

static PyObject *mod_output_shape(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = module_state(module);
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "output_shape() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    fm_tensor ta, tb;
    fm_hold ha, hb;
    if (tensor_from_object(st, args[0], "a", 0, &ta, &ha) < 0)
        return NULL;
    if (tensor_from_object(st, args[1], "b", 0, &tb, &hb) < 0) {
        hold_release(&ha);
        return NULL;
    }
    int ndim = 0;
    int64_t shape[FM_MAX_NDIM];
    fm_clear_error();
    fm_status s = fm_matmul_output_shape(&ta, &tb, &ndim, shape);
    hold_release(&ha);
    hold_release(&hb);
    if (s != FM_OK)
        return raise_status(st, s);
    if (ndim < 0 || ndim > FM_MAX_NDIM)
        return raise_msg(st, FM_ERR_INTERNAL, "output_shape: the library returned an invalid ndim");
    PyObject *t = PyTuple_New(ndim);
    if (!t)
        return NULL;
    for (int i = 0; i < ndim; i++) {
        PyObject *x = PyLong_FromLongLong(shape[i]);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, i, x);
    }
    return t;
}

PyDoc_STRVAR(tensor_info_doc,
             "tensor_info(obj, writable=False)\n--\n\n"
             "How the library sees an array: (address, (device_type, device_id), dtype name, shape,\n"
             "element strides). For debugging and tests of the buffer/DLPack conversion.");

static PyObject *mod_tensor_info(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = module_state(module);
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
    if (tensor_from_object(st, args[0], "obj", writable, &t, &h) < 0)
        return NULL;
    PyObject *shape = PyTuple_New(t.ndim), *strides = PyTuple_New(t.ndim), *res = NULL;
    if (shape && strides) {
        int ok = 1;
        for (int i = 0; i < t.ndim && ok; i++) {
            PyObject *x = PyLong_FromLongLong(t.shape[i]);
            PyObject *y = PyLong_FromLongLong(t.strides[i]);
            if (!x || !y) {
                Py_XDECREF(x);
                Py_XDECREF(y);
                ok = 0;
                break;
            }
            PyTuple_SetItem(shape, i, x);
            PyTuple_SetItem(strides, i, y);
        }
        if (ok)
            res = Py_BuildValue("(N(ii)sOO)", PyLong_FromVoidPtr(t.data), (int)t.device.type, (int)t.device.id,
                                fm_dtype_name(t.dtype), shape, strides);
    }
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    hold_release(&h);
    return res;
}

PyDoc_STRVAR(data_ptr_doc, "data_ptr(obj)\n--\n\nAddress (int) of element 0 of an array (buffer protocol or DLPack).");

static PyObject *mod_data_ptr(PyObject *module, PyObject *obj)
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
    if (tensor_from_object(module_state(module), obj, "obj", 0, &t, &h) < 0)
        return NULL;
    PyObject *r = PyLong_FromVoidPtr(t.data);
    hold_release(&h);
    return r;
}

/* ------------------------------------------------------------------------ */
/* Small module functions.                                                  */
/* ------------------------------------------------------------------------ */
static PyObject *mod_epilogue_parse(PyObject *module, PyObject *arg)
{
    fm_state *st = module_state(module);
    if (!PyUnicode_Check(arg)) {
        raise_type(PyExc_TypeError, "epilogue_parse(): ", "text", "a str", arg);
        return NULL;
    }
    unsigned e = 0;
    if (epilogue_arg(st, "epilogue_parse(): ", arg, &e) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(e);
}

static PyObject *mod_epilogue_format(PyObject *module, PyObject *arg)
{
    fm_state *st = module_state(module);
    long long v = 0;
    if (!arg || arg == Py_None) {
        raise_type(PyExc_TypeError, "epilogue_format(): ", "epilogue", "an int", Py_None);
        return NULL;
    }
    if (int_arg("epilogue_format(): ", "epilogue", arg, 0, (long long)UINT32_MAX, &v) < 0)
        return NULL;
    char buf[128];
    fm_clear_error();
    fm_status s = fm_epilogue_format((unsigned)v, buf, sizeof buf);
    if (s != FM_OK)
        return raise_status(st, s);
    buf[sizeof buf - 1] = '\0';
    return PyUnicode_FromString(buf);
}

static PyObject *mod_set_num_threads(PyObject *module, PyObject *arg)
{
    fm_state *st = module_state(module);
    long long n = 0;
    if (arg == Py_None) {
        raise_type(PyExc_TypeError, "set_num_threads(): ", "n", "an int", arg);
        return NULL;
    }
    if (int_arg("set_num_threads(): ", "n", arg, INT32_MIN, INT32_MAX, &n) < 0)
        return NULL;
    fm_clear_error();
    fm_status s = fm_context_set_num_threads(st->ctx, (int)n);
    if (s != FM_OK)
        return raise_status(st, s);
    Py_RETURN_NONE;
}

static PyObject *mod_get_num_threads(PyObject *module, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(fm_context_get_num_threads(module_state(module)->ctx));
}

static PyObject *mod_backends(PyObject *module, PyObject *unused)
{
    (void)unused;
    fm_state *st = module_state(module);
    int n = fm_context_backend_count(st->ctx);
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    for (int i = 0; i < n; i++) {
        const char *name = NULL, *why = NULL;
        fm_device_type dev = FM_DEVICE_AUTO;
        int avail = 0;
        fm_clear_error();
        fm_status s = fm_context_backend_info(st->ctx, i, &name, &dev, &avail, &why);
        if (s != FM_OK) {
            Py_DECREF(list);
            return raise_status(st, s);
        }
        PyObject *whyo;
        if (avail || !why || !why[0]) {
            whyo = Py_None;
            Py_INCREF(whyo);
        } else {
            whyo = PyUnicode_DecodeUTF8(why, (Py_ssize_t)strlen(why), "replace");
        }
        PyObject *item = whyo ? Py_BuildValue("(ssNN)", name ? name : "?", device_name((int32_t)dev),
                                              PyBool_FromLong(avail), whyo)
                              : NULL;
        if (!item || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(item);
    }
    return list;
}

static PyObject *mod_cuda_device_count(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    int n;
    Py_BEGIN_ALLOW_THREADS
    n = fm_cuda_device_count();
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(n);
}

static PyObject *mod_clear_cache(PyObject *module, PyObject *unused)
{
    (void)unused;
    fm_context_clear_cache(module_state(module)->ctx);
    Py_RETURN_NONE;
}

static PyObject *mod_cache_size(PyObject *module, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(fm_context_cache_size(module_state(module)->ctx));
}

static PyObject *mod_relu_mask_row_bytes(PyObject *module, PyObject *arg)
{
    (void)module;
    long long n = 0;
    if (arg == Py_None) {
        raise_type(PyExc_TypeError, "relu_mask_row_bytes(): ", "n", "an int", arg);
        return NULL;
    }
    if (int_arg("relu_mask_row_bytes(): ", "n", arg, 0, INT64_MAX / 2, &n) < 0)
        return NULL;
    return PyLong_FromLongLong(fm_relu_mask_row_bytes(n));
}

static PyObject *mod_status_name(PyObject *module, PyObject *arg)
{
    (void)module;
    long long n = 0;
    if (arg == Py_None) {
        raise_type(PyExc_TypeError, "status_name(): ", "status", "an int", arg);
        return NULL;
    }
    if (int_arg("status_name(): ", "status", arg, INT32_MIN, INT32_MAX, &n) < 0)
        return NULL;
    return PyUnicode_FromString(fm_status_name((fm_status)n));
}

static PyMethodDef module_methods[] = {
    {"matmul", (PyCFunction)(void (*)(void))mod_matmul, METH_FASTCALL | METH_KEYWORDS, matmul_doc},
    {"plan_matmul", (PyCFunction)(void (*)(void))mod_plan_matmul, METH_FASTCALL | METH_KEYWORDS, plan_matmul_doc},
    {"autotune", (PyCFunction)(void (*)(void))mod_autotune, METH_FASTCALL | METH_KEYWORDS, autotune_doc},
    {"output_shape", (PyCFunction)(void (*)(void))mod_output_shape, METH_FASTCALL, output_shape_doc},
    {"tensor_info", (PyCFunction)(void (*)(void))mod_tensor_info, METH_FASTCALL, tensor_info_doc},
    {"data_ptr", mod_data_ptr, METH_O, data_ptr_doc},
    {"make_runner", (PyCFunction)(void (*)(void))mod_make_runner, METH_FASTCALL,
     "make_runner(plan, keep, pa, pb, pc, pbias, empty, dshape, dtype, aux_shape, aux_dtype, key, scalar)\n--\n\n"
     "Bind a plan to operand addresses; .run(stream) allocates the result with empty() and executes."},
    {"epilogue_parse", mod_epilogue_parse, METH_O,
     "epilogue_parse(text)\n--\n\nEpilogue bits for 'relu', 'bias+gelu', 'RELU_AUX_BIAS', ... (ValueError if unknown)."},
    {"epilogue_format", mod_epilogue_format, METH_O,
     "epilogue_format(bits)\n--\n\nCanonical name of epilogue bits ('bias+relu', 'identity')."},
    {"set_num_threads", mod_set_num_threads, METH_O,
     "set_num_threads(n)\n--\n\nCPU threads of the library; n <= 0 restores the default."},
    {"get_num_threads", mod_get_num_threads, METH_NOARGS, "get_num_threads()\n--\n\nCPU threads of the library."},
    {"backends", mod_backends, METH_NOARGS,
     "backends()\n--\n\nList of (name, device, available, why) for the registered backends."},
    {"cuda_device_count", mod_cuda_device_count, METH_NOARGS,
     "cuda_device_count()\n--\n\nNumber of usable CUDA devices (0 without CUDA)."},
    {"clear_cache", mod_clear_cache, METH_NOARGS, "clear_cache()\n--\n\nDrop the context's cached plans."},
    {"cache_size", mod_cache_size, METH_NOARGS, "cache_size()\n--\n\nNumber of cached plans."},
    {"relu_mask_row_bytes", mod_relu_mask_row_bytes, METH_O,
     "relu_mask_row_bytes(n)\n--\n\nBytes per row of the relu aux bit mask for N = n columns."},
    {"status_name", mod_status_name, METH_O, "status_name(status)\n--\n\n'FM_ERR_SHAPE' etc."},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------------------ */
/* Module lifecycle.                                                        */
/* ------------------------------------------------------------------------ */
static int add_int(PyObject *m, const char *name, long long v)
{
    PyObject *o = PyLong_FromLongLong(v);
    if (!o)
        return -1;
    int r = PyModule_AddObjectRef(m, name, o);
    Py_DECREF(o);
    return r;
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

static int make_errors(PyObject *m, fm_state *st)
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

static int module_exec(PyObject *m)
{
    fm_state *st = module_state(m);
    if (make_errors(m, st) < 0)
        return -1;
    st->s_dlpack = PyUnicode_InternFromString("__dlpack__");
    st->s_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    st->empty_tuple = PyTuple_New(0);
    st->kw_max_version = Py_BuildValue("{s(ii)}", "max_version", 1, 0);
    if (!st->s_dlpack || !st->s_dlpack_device || !st->empty_tuple || !st->kw_max_version)
        return -1;

    fm_context *ctx = NULL;
    fm_status s = fm_context_create(&ctx);
    if (s != FM_OK) {
        const char *detail = fm_last_error();
        PyErr_Format(PyExc_ImportError, "fusemath: cannot create the library context: %s",
                     detail && detail[0] ? detail : fm_status_string(s));
        return -1;
    }
    st->ctx = ctx;

    st->plan_type = PyType_FromModuleAndSpec(m, &plan_spec, NULL);
    if (!st->plan_type || PyModule_AddObjectRef(m, "Plan", st->plan_type) < 0)
        return -1;
    st->runner_type = PyType_FromModuleAndSpec(m, &runner_spec, NULL);
    if (!st->runner_type)
        return -1;

    const char *v = fm_version_string();
    if (PyModule_AddStringConstant(m, "__version__", v ? v : "0.0.0") < 0 ||
        add_int(m, "version_number", fm_version_number()) < 0 ||
        add_int(m, "header_version_number", FM_VERSION_NUMBER) < 0 || add_int(m, "MAX_NDIM", FM_MAX_NDIM) < 0 ||
        add_int(m, "EPILOGUE_DEFAULT", FM_EPILOGUE_DEFAULT) < 0 || add_int(m, "EPILOGUE_BIAS", FM_EPILOGUE_BIAS) < 0 ||
        add_int(m, "EPILOGUE_RELU", FM_EPILOGUE_RELU) < 0 || add_int(m, "EPILOGUE_GELU", FM_EPILOGUE_GELU) < 0 ||
        add_int(m, "EPILOGUE_AUX", FM_EPILOGUE_AUX) < 0 || add_int(m, "EXECUTION_AUTO", FM_EXECUTION_AUTO) < 0 ||
        add_int(m, "EXECUTION_CPU", FM_EXECUTION_CPU) < 0 ||
        add_int(m, "CPU_STRATEGY_AUTO", FM_CPU_STRATEGY_AUTO) < 0 ||
        add_int(m, "CPU_STRATEGY_TILES", FM_CPU_STRATEGY_TILES) < 0 ||
        add_int(m, "CPU_STRATEGY_BLAS_THREADS", FM_CPU_STRATEGY_BLAS_THREADS) < 0 || add_int(m, "EXECUTION_CUDA", FM_EXECUTION_CUDA) < 0 ||
        add_int(m, "MATMUL_A", FM_MATMUL_A) < 0 || add_int(m, "MATMUL_B", FM_MATMUL_B) < 0 ||
        add_int(m, "MATMUL_C", FM_MATMUL_C) < 0 || add_int(m, "MATMUL_BIAS", FM_MATMUL_BIAS) < 0 ||
        add_int(m, "MATMUL_D", FM_MATMUL_D) < 0 || add_int(m, "MATMUL_AUX", FM_MATMUL_AUX) < 0 ||
        add_int(m, "MATMUL_NSLOTS", FM_MATMUL_NSLOTS) < 0)
        return -1;
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    fm_state *st = module_state(m);
    if (!st)
        return 0;
    Py_VISIT(st->plan_type);
    Py_VISIT(st->runner_type);
    Py_VISIT(st->base_error);
    for (int i = 0; i < FM_STATUS_COUNT_; i++)
        Py_VISIT(st->errors[i]);
    return 0;
}

/* Drops Python references only; the context is destroyed in module_free, when no
 * Plan can reference it any more (each Plan holds the module). */
static int module_clear(PyObject *m)
{
    fm_state *st = module_state(m);
    if (!st)
        return 0;
    Py_CLEAR(st->plan_type);
    Py_CLEAR(st->runner_type);
    Py_CLEAR(st->base_error);
    for (int i = 0; i < FM_STATUS_COUNT_; i++)
        Py_CLEAR(st->errors[i]);
    Py_CLEAR(st->s_dlpack);
    Py_CLEAR(st->s_dlpack_device);
    Py_CLEAR(st->empty_tuple);
    Py_CLEAR(st->kw_max_version);
    return 0;
}

static void module_free(void *m)
{
    fm_state *st = module_state((PyObject *)m);
    if (!st)
        return;
    module_clear((PyObject *)m);
    fm_context_destroy(st->ctx);
    st->ctx = NULL;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, (void *)module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fusemath._fusemath",
    .m_doc = "Low-level binding of libfusemath (see the fusemath package for the NumPy-style API).",
    .m_size = sizeof(fm_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__fusemath(void) { return PyModuleDef_Init(&module_def); }
