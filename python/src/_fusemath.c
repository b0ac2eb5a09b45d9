/*
 * _fusemath.c : the CPython extension module fusemath._fusemath.
 *
 * Limited API (abi3, Python >= 3.11) only: module state instead of static globals,
 * heap types, multi-phase initialisation, METH_FASTCALL on the hot paths. The
 * module state owns one fm_context, created at exec and destroyed when the module
 * is freed; every Plan keeps a strong reference to the module so the context
 * outlives the plans made in it.
 *
 * Arrays come in, zero-copy, through
 *  - the buffer protocol (NumPy, memoryview, array.array): host memory;
 *  - registered array libraries (PyTorch tensors, CuPy arrays; registered lazily by
 *    fusemath._arrays the first time one is seen): their pointer, shape, strides, dtype
 *    and device are read through the library's cheapest attributes (torch: data_ptr(),
 *    shape, stride(), dtype, get_device(); cupy: data.ptr, data.device_id, shape,
 *    strides, dtype), never through an exchange protocol;
 *  - __cuda_array_interface__ (device resolved by the library from the pointer);
 *  - DLPack (__dlpack__ / __dlpack_device__): cpu, cuda, cuda_host, cuda_managed.
 * They become fm_tensor descriptors; buffers / capsules are held while the C library
 * runs and released afterwards. Results on a registered library's device are
 * allocated with that library (torch.empty / cupy.empty), so the memory comes from
 * the caller's allocator and pool, stream-ordered on the stream the call runs on.
 * Errors of the library become per-module exception classes that also derive from
 * the matching builtin (ValueError, TypeError, MemoryError, ...).
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
/* Array libraries and module state.                                        */
/* ------------------------------------------------------------------------ */
/* How a registered library's arrays are read and allocated. */
enum { STYLE_NUMPY = 1, STYLE_TORCH = 2, STYLE_CUPY = 3 };
#define FM_MAX_LIBS 8
#define LIB_KW_DEVICES 16 /* torch.empty keyword dicts cached for cuda:0..15 (and the cpu) */

typedef struct {
    int style;
    int device_count;                  /* CUDA devices the library sees (cupy: device check skipped if 1) */
    PyObject *name;                    /* "numpy", "torch", "cupy", ... */
    PyObject *type;                    /* instances are recognised by isinstance(); NULL for numpy */
    PyObject *dtypes[FM_DTYPE_COUNT_]; /* the library's dtype object per fm dtype (NULL: none) */
    PyObject *empty;                   /* numpy.empty(shape, dtype) / cupy.empty(shape, dtype) / torch.empty */
    PyObject *current_stream;          /* torch: f(device) -> raw int; cupy: f(device) -> Stream (.ptr) */
    PyObject *get_device;              /* cupy: f() -> current device id */
    PyObject *device_obj;              /* torch: f(index) -> torch.device (-1: cpu) */
    PyObject *oom;                     /* the library's out-of-memory exception class (or tuple) */
    PyObject *slow_alloc;              /* f(shape, dtype, device, stream or None): allocation on a
                                          non-current stream or device (Python, slow path) */
    PyObject *kwargs[FM_DTYPE_COUNT_][LIB_KW_DEVICES + 1]; /* torch: {"dtype":, "device":} per device+1 */
} fm_lib;

#define INTERNED(X)                                                                                     \
    X(dlpack, "__dlpack__") X(dlpack_device, "__dlpack_device__") X(cai, "__cuda_array_interface__")    \
    X(data_ptr, "data_ptr") X(shape, "shape") X(stride, "stride") X(strides, "strides") X(dtype, "dtype") \
    X(is_cuda, "is_cuda") X(get_device, "get_device") X(is_conj, "is_conj") X(is_neg, "is_neg")         \
    X(data, "data") X(ptr, "ptr") X(device_id, "device_id") X(cuda_stream, "cuda_stream")               \
    X(cuda_stream_proto, "__cuda_stream__") X(typestr, "typestr") X(mask, "mask") X(device, "device")   \
    X(handle, "handle")

enum {
#define X_ENUM(n, s) S_##n,
    INTERNED(X_ENUM)
#undef X_ENUM
    S_COUNT
};

typedef struct {
    fm_context *ctx;
    PyObject *plan_type;
    PyObject *runner_type;
    PyObject *base_error;                  /* FusemathError */
    PyObject *errors[FM_STATUS_COUNT_];    /* class per status; [FM_OK] unused */
    PyObject *s[S_COUNT];                  /* interned attribute names */
    PyObject *empty_tuple;
    PyObject *kw_max_version;              /* {"max_version": (1, 0)} */
    PyObject *kw_cuda_v1;                  /* {"max_version": (1, 0), "stream": 1}: cuda producers */
    PyObject *kw_cuda_legacy;              /* {"stream": 1} */
    int nlibs;
    fm_lib libs[FM_MAX_LIBS];
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
static PyObject *error_class(fm_state *st, fm_status s)
{
    PyObject *cls = NULL;
    if (st && (int)s > 0 && (int)s < FM_STATUS_COUNT_)
        cls = st->errors[s];
    if (!cls)
        cls = st && st->base_error ? st->base_error : PyExc_RuntimeError;
    return cls;
}

/* Raise the class of status s with message msg (decoded leniently). */
static PyObject *raise_msg(fm_state *st, fm_status s, const char *msg)
{
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (!text)
        return NULL;
    PyErr_SetObject(error_class(st, s), text);
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

/* Fast pointer from an int known to be an address (data_ptr(), .ptr); -1 with an error set. */
static int long_ptr(PyObject *o, const char *what, void **p)
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
static int stream_from_object(fm_state *st, const char *fname, PyObject *o, void **h)
{
    if (o == Py_None) {
        *h = NULL;
        return 0;
    }
    if (PyLong_Check(o) && !PyBool_Check(o))
        return ptr_arg(fname, "stream", o, h);
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
        int r = ok ? ptr_arg(fname, "stream", v, h) : 0;
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
            rc = ptr_arg(fname, "stream", PyTuple_GetItem(r, 1), h);
        else
            PyErr_Format(PyExc_TypeError, "%sstream.__cuda_stream__() did not return (version, handle)", fname);
        Py_DECREF(r);
        return rc;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
        return -1;
    PyErr_Clear();
    raise_type(PyExc_TypeError, fname, "stream", "None, an int (cudaStream_t) or a CuPy/PyTorch stream", o);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Array objects -> fm_tensor.                                              */
/* ------------------------------------------------------------------------ */
enum { HOLD_NONE = 0, HOLD_BUFFER, HOLD_DLPACK, HOLD_DLPACK_V1 };

/* What keeps an operand's memory alive while the library uses it. Registered
 * libraries and __cuda_array_interface__ objects need nothing: the caller holds the
 * object for the duration of the call. */
typedef struct {
    int kind;
    Py_buffer view;
    PyObject *capsule;
    void *managed; /* DLManagedTensor* or DLManagedTensorVersioned*, owned after the rename */
} fm_hold;

static void hold_init(fm_hold *h)
{
    h->kind = HOLD_NONE;
    h->capsule = NULL;
    h->managed = NULL;
}

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

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* struct-module format + itemsize -> dtype (FM_DTYPE_INVALID if not representable). */
static fm_dtype format_dtype(const char *fmt, Py_ssize_t itemsize)
{
    if (!fmt)
        fmt = "B";
    char order = '@';
    if (*fmt == '@' || *fmt == '=' || *fmt == '<' || *fmt == '>' || *fmt == '!')
        order = *fmt++;
    if (itemsize > 1 && (order == '>' || order == '!') && host_is_little_endian())
        return FM_DTYPE_INVALID; /* big-endian data on a little-endian host */
    if (itemsize > 1 && order == '<' && !host_is_little_endian())
        return FM_DTYPE_INVALID;
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

/* NumPy array-interface typestr ("<f4", "|u1", "<c8") -> dtype. */
static fm_dtype typestr_dtype(const char *s)
{
    if (!s || !s[0] || !s[1])
        return FM_DTYPE_INVALID;
    char order = s[0], kind = s[1];
    int bytes = atoi(s + 2);
    if (bytes > 1 && ((order == '>' && host_is_little_endian()) || (order == '<' && !host_is_little_endian())))
        return FM_DTYPE_INVALID;
    fm_dtype t = FM_DTYPE_INVALID;
    switch (kind) {
    case 'f': t = bytes == 2 ? FM_F16 : bytes == 4 ? FM_F32 : bytes == 8 ? FM_F64 : FM_DTYPE_INVALID; break;
    case 'c': t = bytes == 4 ? FM_C32 : bytes == 8 ? FM_C64 : bytes == 16 ? FM_C128 : FM_DTYPE_INVALID; break;
    case 'i': t = bytes == 1 ? FM_I8 : bytes == 4 ? FM_I32 : bytes == 8 ? FM_I64 : FM_DTYPE_INVALID; break;
    case 'u': t = bytes == 1 ? FM_U8 : bytes == 4 ? FM_U32 : FM_DTYPE_INVALID; break;
    default: break;
    }
    return t;
}

static fm_dtype dlpack_dtype(DLDataType d)
{
    if (d.lanes != 1)
        return FM_DTYPE_INVALID;
    switch (d.code) {
    case DL_FLOAT: return d.bits == 16 ? FM_F16 : d.bits == 32 ? FM_F32 : d.bits == 64 ? FM_F64 : FM_DTYPE_INVALID;
    case DL_BFLOAT: return d.bits == 16 ? FM_BF16 : FM_DTYPE_INVALID;
    case DL_COMPLEX:
        return d.bits == 32 ? FM_C32 : d.bits == 64 ? FM_C64 : d.bits == 128 ? FM_C128 : FM_DTYPE_INVALID;
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

static void zero_tail(fm_tensor *t)
{
    for (int i = t->ndim; i < FM_MAX_NDIM; i++) {
        t->shape[i] = 0;
        t->strides[i] = 0;
    }
}

static int too_many_dims(const char *name, Py_ssize_t ndim)
{
    PyErr_Format(PyExc_ValueError, "argument '%s' has %zd dimensions; at most %d are supported", name, ndim,
                 FM_MAX_NDIM);
    return -1;
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
    if (v->ndim < 0 || v->ndim > FM_MAX_NDIM)
        return too_many_dims(name, v->ndim);
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
    zero_tail(t);
    return 0;
}

/* shape (and strides, in units of `unit` bytes; NULL = C-contiguous) from tuples. */
static int dims_from_tuples(const char *name, PyObject *shape, PyObject *strides, Py_ssize_t unit, fm_tensor *t)
{
    if (!PyTuple_Check(shape)) {
        PyErr_Format(PyExc_TypeError, "argument '%s': shape is not a tuple", name);
        return -1;
    }
    Py_ssize_t nd = PyTuple_Size(shape);
    if (nd > FM_MAX_NDIM)
        return too_many_dims(name, nd);
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
    zero_tail(t);
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

static int unsupported_dtype(const char *name, PyObject *dt)
{
    PyErr_Format(PyExc_TypeError, "argument '%s': unsupported dtype %R", name, dt);
    return -1;
}

static PyObject *call_method0(PyObject *obj, PyObject *name) { return PyObject_CallMethodObjArgs(obj, name, NULL); }

/* A PyTorch tensor: data_ptr(), shape, stride(), dtype, get_device() (+ is_cuda). */
static int tensor_from_torch(fm_state *st, const fm_lib *lib, PyObject *obj, const char *name, fm_tensor *t)
{
    PyObject *o = PyObject_GetAttr(obj, st->s[S_dtype]);
    if (!o)
        return -1;
    fm_dtype dt = lib_dtype(lib, o);
    if (dt == FM_DTYPE_INVALID) {
        unsupported_dtype(name, o);
        Py_DECREF(o);
        return -1;
    }
    Py_DECREF(o);
    if (fm_dtype_is_complex(dt)) { /* lazily conjugated / negated views are not their memory */
        static const int bits[2] = {S_is_conj, S_is_neg};
        static const char *const fix[2] = {"resolve_conj", "resolve_neg"};
        for (int i = 0; i < 2; i++) {
            PyObject *r = call_method0(obj, st->s[bits[i]]);
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
    }
    o = call_method0(obj, st->s[S_get_device]);
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
            PyErr_Format(error_class(st, FM_ERR_DEVICE),
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
    o = call_method0(obj, st->s[S_data_ptr]);
    int r = long_ptr(o, "tensor.data_ptr()", &t->data);
    Py_XDECREF(o);
    if (r < 0)
        return -1;
    PyObject *shape = PyObject_GetAttr(obj, st->s[S_shape]);
    PyObject *strides = shape ? call_method0(obj, st->s[S_stride]) : NULL;
    r = strides ? dims_from_tuples(name, shape, strides, 1, t) : -1;
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    t->dtype = dt;
    return r;
}

/* A CuPy array: data.ptr, data.device_id, shape, strides (bytes), dtype. */
static int tensor_from_cupy(fm_state *st, const fm_lib *lib, PyObject *obj, const char *name, fm_tensor *t)
{
    PyObject *o = PyObject_GetAttr(obj, st->s[S_dtype]);
    if (!o)
        return -1;
    fm_dtype dt = lib_dtype(lib, o);
    if (dt == FM_DTYPE_INVALID) {
        unsupported_dtype(name, o);
        Py_DECREF(o);
        return -1;
    }
    Py_DECREF(o);
    PyObject *data = PyObject_GetAttr(obj, st->s[S_data]);
    if (!data)
        return -1;
    PyObject *p = PyObject_GetAttr(data, st->s[S_ptr]);
    PyObject *dev = p ? PyObject_GetAttr(data, st->s[S_device_id]) : NULL;
    Py_DECREF(data);
    int r = dev ? long_ptr(p, "array.data.ptr", &t->data) : -1;
    long id = r == 0 ? PyLong_AsLong(dev) : -1;
    Py_XDECREF(p);
    Py_XDECREF(dev);
    if (r < 0 || (id == -1 && PyErr_Occurred()))
        return -1;
    t->device.type = FM_DEVICE_CUDA;
    t->device.id = (int32_t)id;
    t->dtype = dt;
    PyObject *shape = PyObject_GetAttr(obj, st->s[S_shape]);
    PyObject *strides = shape ? PyObject_GetAttr(obj, st->s[S_strides]) : NULL;
    r = strides ? dims_from_tuples(name, shape, strides, (Py_ssize_t)fm_dtype_size(dt), t) : -1;
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return r;
}

/* __cuda_array_interface__ (v2/v3): the device is resolved by the library from the pointer. */
static int tensor_from_cai(fm_state *st, PyObject *cai, const char *name, int writable, fm_tensor *t)
{
    if (!PyDict_Check(cai)) {
        PyErr_Format(PyExc_TypeError, "argument '%s': __cuda_array_interface__ is not a dict", name);
        return -1;
    }
    PyObject *shape = PyDict_GetItemString(cai, "shape");
    PyObject *typestr = PyDict_GetItemString(cai, "typestr");
    PyObject *data = PyDict_GetItemString(cai, "data");
    PyObject *strides = PyDict_GetItemString(cai, "strides");
    PyObject *mask = PyDict_GetItemString(cai, "mask");
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
    if (long_ptr(PyTuple_GetItem(data, 0), "__cuda_array_interface__['data'][0]", &t->data) < 0)
        return -1;
    t->device.type = FM_DEVICE_AUTO;
    t->device.id = 0;
    t->dtype = dt;
    return dims_from_tuples(name, shape, strides, (Py_ssize_t)fm_dtype_size(dt), t);
}

/* Parse (device_type, device_id) of __dlpack_device__; -1 with error set, *type = 0 if absent. */
static int dlpack_device(fm_state *st, PyObject *obj, const char *name, long *type, long *id)
{
    *type = 0;
    *id = 0;
    PyObject *meth = PyObject_GetAttr(obj, st->s[S_dlpack_device]);
    if (!meth) {
        PyErr_Clear(); /* optional: the capsule's device is checked anyway */
        return 0;
    }
    PyObject *r = PyObject_CallNoArgs(meth);
    Py_DECREF(meth);
    if (!r)
        return -1;
    long ty = -1, i = 0;
    if (PyTuple_Check(r) && PyTuple_Size(r) == 2) {
        ty = PyLong_AsLong(PyTuple_GetItem(r, 0));
        i = PyLong_AsLong(PyTuple_GetItem(r, 1));
    }
    Py_DECREF(r);
    if (PyErr_Occurred() || ty < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "argument '%s': __dlpack_device__() did not return (device_type, device_id)",
                     name);
        return -1;
    }
    *type = ty;
    *id = i;
    return 0;
}

static int dl_device_ok(long type)
{
    return type == DL_CPU || type == DL_CUDA_HOST || type == DL_CUDA || type == DL_CUDA_MANAGED;
}

static int tensor_from_dlpack(fm_state *st, PyObject *obj, PyObject *meth, const char *name, int writable,
                              fm_tensor *t, fm_hold *h)
{
    long dtype_ = 0, did = 0;
    if (dlpack_device(st, obj, name, &dtype_, &did) < 0)
        return -1;
    if (dtype_ && !dl_device_ok(dtype_)) {
        PyErr_Format(error_class(st, FM_ERR_DEVICE),
                     "argument '%s' lives on DLPack device %s (%ld):%ld; fusemath takes cpu and cuda arrays", name,
                     device_name((int32_t)dtype_), dtype_, did);
        return -1;
    }
    int cuda = dtype_ == DL_CUDA || dtype_ == DL_CUDA_MANAGED;
    /* cuda producers: stream=1 (the legacy default stream) orders their pending work before ours */
    PyObject *cap = PyObject_Call(meth, st->empty_tuple, cuda ? st->kw_cuda_v1 : st->kw_max_version);
    if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
        /* a producer older than DLPack 1.0 does not know max_version */
        PyErr_Clear();
        cap = cuda ? PyObject_Call(meth, st->empty_tuple, st->kw_cuda_legacy) : PyObject_CallNoArgs(meth);
        if (!cap && cuda && PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            cap = PyObject_CallNoArgs(meth);
        }
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

    if (!dl_device_ok(dl->device.device_type)) {
        PyErr_Format(error_class(st, FM_ERR_DEVICE),
                     "argument '%s' lives on DLPack device %s (%d):%d; fusemath takes cpu and cuda arrays", name,
                     device_name(dl->device.device_type), (int)dl->device.device_type, (int)dl->device.device_id);
        return -1;
    }
    fm_dtype dt = dlpack_dtype(dl->dtype);
    if (dt == FM_DTYPE_INVALID) {
        PyErr_Format(PyExc_TypeError, "argument '%s': unsupported DLPack dtype (code %d, bits %d, lanes %d)", name,
                     (int)dl->dtype.code, (int)dl->dtype.bits, (int)dl->dtype.lanes);
        return -1;
    }
    if (dl->ndim < 0 || dl->ndim > FM_MAX_NDIM)
        return too_many_dims(name, dl->ndim);
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
    zero_tail(t);
    return 0;
}

/* The registered library obj belongs to (index), -1 if none. */
static int lib_of(fm_state *st, PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    for (int i = 0; i < st->nlibs; i++) /* exact types first: no MRO walk on the hot path */
        if ((PyObject *)tp == st->libs[i].type)
            return i;
    for (int i = 0; i < st->nlibs; i++)
        if (st->libs[i].type && PyType_IsSubtype(tp, (PyTypeObject *)st->libs[i].type))
            return i;
    return -1;
}

/* Fill *t from obj. *lib (if not NULL) receives the registered library of obj, or -1
 * (buffer protocol, __cuda_array_interface__, DLPack). On failure h is released. */
static int tensor_from_any(fm_state *st, PyObject *obj, const char *name, int writable, fm_tensor *t, fm_hold *h,
                           int *lib)
{
    hold_init(h);
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
        return L->style == STYLE_TORCH ? tensor_from_torch(st, L, obj, name, t) : tensor_from_cupy(st, L, obj, name, t);
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
    } else {
        PyObject *cai = PyObject_GetAttr(obj, st->s[S_cai]);
        if (cai) {
            int r = tensor_from_cai(st, cai, name, writable, t);
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
        PyObject *tn = type_name(obj);
        if (tn) {
            PyErr_Format(PyExc_TypeError,
                         "argument '%s' must be an array (buffer protocol, PyTorch, CuPy, "
                         "__cuda_array_interface__ or __dlpack__), not %U",
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

static int tensor_from_object(fm_state *st, PyObject *obj, const char *name, int writable, fm_tensor *t,
                              fm_hold *h)
{
    return tensor_from_any(st, obj, name, writable, t, h, NULL);
}

/* ------------------------------------------------------------------------ */
/* Allocation and streams through a registered library.                    */
/* ------------------------------------------------------------------------ */
static void shape_text(const int64_t *shape, int n, char *buf, size_t size)
{
    size_t u = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < n && u < size; i++)
        u += (size_t)snprintf(buf + u, size - u, "%lld%s", (long long)shape[i], i + 1 < n ? ", " : "");
    if (u < size)
        snprintf(buf + u, size - u, "%s)", n == 1 ? "," : "");
}

static PyObject *shape_tuple(const int64_t *shape, int n)
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

/* Allocation arguments for `shape` (tuple) and dtype dt: *args and *kwargs (torch; else
 * NULL) are new references. */
static int lib_alloc_args(fm_state *st, int li, PyObject *shape, fm_dtype dt, int dev, PyObject **args,
                          PyObject **kwargs)
{
    fm_lib *lib = &st->libs[li];
    *args = NULL;
    *kwargs = NULL;
    if ((int)dt <= 0 || dt >= FM_DTYPE_COUNT_ || !lib->dtypes[dt]) {
        PyErr_Format(error_class(st, FM_ERR_DTYPE), "fusemath: the array library %U has no dtype %s", lib->name,
                     fm_dtype_name(dt));
        return -1;
    }
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

static void device_text(int dev, char *buf, size_t n)
{
    if (dev >= 0)
        snprintf(buf, n, "cuda:%d", dev);
    else
        snprintf(buf, n, "cpu");
}

/* A new array from the library (args/kwargs from lib_alloc_args) and its address.
 * stream: not NULL = allocate with that stream current (slow path, Python). The
 * library's out-of-memory error becomes fusemath.OutOfMemoryError (a MemoryError). */
static PyObject *lib_alloc(fm_state *st, int li, PyObject *args, PyObject *kwargs, int dev, PyObject *stream,
                           const char *what, void **ptr)
{
    fm_lib *lib = &st->libs[li];
    int slow = stream != NULL;
    if (!slow && lib->style == STYLE_CUPY && dev >= 0 && lib->device_count > 1 && lib->get_device) {
        PyObject *cur = PyObject_CallNoArgs(lib->get_device); /* cupy.empty allocates on the current device */
        if (!cur)
            return NULL;
        long c = PyLong_AsLong(cur);
        Py_DECREF(cur);
        if (c == -1 && PyErr_Occurred())
            return NULL;
        slow = c != dev;
    }
    PyObject *arr;
    if (slow && lib->slow_alloc) {
        PyObject *shape = PyTuple_GetItem(args, 0);
        PyObject *native = kwargs ? PyDict_GetItem(kwargs, st->s[S_dtype]) : PyTuple_GetItem(args, 1);
        PyObject *d = PyLong_FromLong(dev);
        arr = d ? PyObject_CallFunctionObjArgs(lib->slow_alloc, shape, native, d, stream ? stream : Py_None, NULL)
                : NULL;
        Py_XDECREF(d);
    } else {
        arr = PyObject_Call(lib->empty, args, kwargs);
    }
    if (!arr) {
        int oom = lib->oom ? PyErr_ExceptionMatches(lib->oom) : 0;
        if (oom || PyErr_ExceptionMatches(PyExc_MemoryError)) {
            PyObject *text = take_error_text();
            char dv[32];
            device_text(dev, dv, sizeof dv);
            PyObject *shape = PyTuple_GetItem(args, 0);
            if (text && shape)
                PyErr_Format(error_class(st, FM_ERR_OUT_OF_MEMORY), "matmul: cannot allocate %s of shape %R on %s (%U): %U",
                             what, shape, dv, lib->name, text);
            Py_XDECREF(text);
        }
        return NULL;
    }
    int r;
    if (lib->style == STYLE_NUMPY) {
        Py_buffer v;
        r = PyObject_GetBuffer(arr, &v, PyBUF_WRITABLE);
        if (r == 0) {
            *ptr = v.buf;
            PyBuffer_Release(&v); /* the array owns the memory; the caller holds the array */
        }
    } else if (lib->style == STYLE_TORCH) {
        PyObject *p = call_method0(arr, st->s[S_data_ptr]);
        r = long_ptr(p, "tensor.data_ptr()", ptr);
        Py_XDECREF(p);
    } else {
        PyObject *data = PyObject_GetAttr(arr, st->s[S_data]);
        PyObject *p = data ? PyObject_GetAttr(data, st->s[S_ptr]) : NULL;
        Py_XDECREF(data);
        r = long_ptr(p, "array.data.ptr", ptr);
        Py_XDECREF(p);
    }
    if (r < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* The library's current stream on device dev (NULL for host arrays). */
static int lib_current_stream(fm_state *st, int li, int dev, void **h)
{
    fm_lib *lib = &st->libs[li];
    *h = NULL;
    if (lib->style == STYLE_NUMPY || dev < 0 || !lib->current_stream)
        return 0;
    PyObject *d = PyLong_FromLong(dev);
    PyObject *r = d ? PyObject_CallFunctionObjArgs(lib->current_stream, d, NULL) : NULL;
    Py_XDECREF(d);
    if (!r)
        return -1;
    int rc;
    if (PyLong_Check(r)) {
        rc = long_ptr(r, "current stream", h);
    } else {
        PyObject *p = PyObject_GetAttr(r, st->s[S_ptr]);
        rc = long_ptr(p, "current stream .ptr", h);
        Py_XDECREF(p);
    }
    Py_DECREF(r);
    return rc;
}

/* Resolve the stream of a call on library li / device dev: an explicit stream object
 * (None: the library's current stream). *override is set (new reference, the handle as
 * an int) when the explicit stream is not the current one and outputs must be allocated:
 * they are then allocated with that stream current. */
static int resolve_stream(fm_state *st, const char *fname, int li, int dev, PyObject *stream_arg, int allocating,
                          void **h, PyObject **override)
{
    *override = NULL;
    if (!stream_arg || stream_arg == Py_None)
        return lib_current_stream(st, li, dev, h);
    if (stream_from_object(st, fname, stream_arg, h) < 0)
        return -1;
    if (allocating && st->libs[li].style != STYLE_NUMPY && dev >= 0) {
        void *cur = NULL;
        if (lib_current_stream(st, li, dev, &cur) < 0)
            return -1;
        if (cur != *h && !(*override = PyLong_FromVoidPtr(*h)))
            return -1;
    }
    return 0;
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

static const char *const slot_names[FM_MATMUL_NSLOTS] = {"a", "b", "c", "bias", "d", "aux", "bgrad", "scale",
                                                          "a_scale", "b_scale"};

PyDoc_STRVAR(plan_execute_doc,
             "execute(a, b, c, bias, d, aux[, bgrad, scale[, a_scale, b_scale]], stream=None)\n--\n\n"
             "Run the plan on raw addresses (ints, or None/0 for unused slots), in the slot order of\n"
             "fusemath.h (A, B, C, BIAS, D, AUX, BGRAD, SCALE, A_SCALE, B_SCALE): 6, 8 or 10 addresses,\n"
             "then optionally the\n"
             "stream (int cudaStream_t). The GIL is released while it runs; GPU work is asynchronous.\n"
             "UNSAFE: the addresses must point at memory laid out as planned and alive for the call.");

/* Plan.execute of an FFT plan: 4 addresses (x, out, prolog_array, epilog_array) and an optional stream. */
static PyObject *plan_execute_fft(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *const names[FM_FFT_NSLOTS] = {"address of 'x'", "address of 'out'",
                                                     "address of 'prolog_array'", "address of 'epilog_array'"};
    if (nargs != FM_FFT_NSLOTS && nargs != FM_FFT_NSLOTS + 1) {
        PyErr_Format(PyExc_TypeError,
                     "Plan.execute() of an FFT plan takes 4 addresses (x, out, prolog_array, epilog_array) and an "
                     "optional stream (%zd arguments given)", nargs);
        return NULL;
    }
    void *ptrs[FM_FFT_NSLOTS] = {0};
    for (int i = 0; i < FM_FFT_NSLOTS; i++)
        if (ptr_arg("Plan.execute(): ", names[i], args[i], &ptrs[i]) < 0)
            return NULL;
    void *stream = NULL;
    if (nargs > FM_FFT_NSLOTS && ptr_arg("Plan.execute(): ", "stream", args[FM_FFT_NSLOTS], &stream) < 0)
        return NULL;
    fm_plan *p = ((PlanObject *)self)->plan;
    if (!p)
        return plan_freed_error(self, "execute()");
    fm_plan_retain(p);
    fm_status s;
    Py_BEGIN_ALLOW_THREADS
    fm_clear_error();
    s = fm_plan_execute(p, ptrs, FM_FFT_NSLOTS, stream);
    Py_END_ALLOW_THREADS
    fm_plan_release(p);
    if (s != FM_OK)
        return raise_status(plan_state(self), s);
    Py_RETURN_NONE;
}

static PyObject *plan_execute(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PlanObject *po = (PlanObject *)self;
    if (po->plan && fm_plan_op(po->plan) == FM_OP_FFT)
        return plan_execute_fft(self, args, nargs);
    int naddr = (nargs == 6 || nargs == 7) ? 6 : (nargs == 8 || nargs == 9) ? 8 : (nargs == 10 || nargs == 11) ? 10 : -1;
    if (naddr < 0) {
        PyErr_Format(PyExc_TypeError,
                     "Plan.execute() takes 6 addresses (a, b, c, bias, d, aux), 8 (+ bgrad, scale) or 10 (+ a_scale, "
                     "b_scale) and an optional stream (%zd arguments given)",
                     nargs);
        return NULL;
    }
    void *ptrs[FM_MATMUL_NSLOTS] = {0};
    for (int i = 0; i < naddr; i++) {
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
    if (nargs > naddr && ptr_arg("Plan.execute(): ", "stream", args[naddr], &stream) < 0)
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
/* Matmul.execute() goes through it: resolving the stream, allocating the    */
/* outputs (or taking the caller's out=), taking their addresses and running */
/* the plan cost no Python frames (host overhead).                           */
/* ------------------------------------------------------------------------ */
typedef struct {
    int slot;         /* FM_MATMUL_D, _AUX or _BGRAD */
    fm_dtype dtype;
    PyObject *args;   /* allocation arguments: (shape,) for torch, (shape, dtype) otherwise */
    PyObject *kwargs; /* torch: {"dtype":, "device":}; else NULL */
    PyObject *key;    /* result dict key ("relu_aux", "drelu_bgrad", ...); NULL for D */
} runner_out;

typedef struct {
    PyObject_HEAD
    PyObject *plan;        /* PlanObject */
    PyObject *keep;        /* the operand arrays: their memory lives while we run */
    int lib;               /* registered library of the results */
    int device;            /* cuda device of the results, -1 = host */
    int gpu;               /* results on a GPU: a stream is resolved per call */
    int nout;
    void *ptrs[FM_MATMUL_NSLOTS]; /* bound inputs; outputs NULL */
    runner_out outs[3];    /* outs[0] is D */
    PyObject *index;       /* () for a 0-d NumPy result to unwrap, or NULL */
    int rndim;             /* the result shape, for out= */
    int64_t rshape[FM_MAX_NDIM];
    PyObject *out_obj;     /* the last out= that passed validation, and its address */
    void *out_ptr;
    PyObject *stream_obj;  /* the last explicit stream object and its handle */
    void *stream_handle;
} RunnerObject;

static int runner_traverse(PyObject *self, visitproc visit, void *arg)
{
    RunnerObject *r = (RunnerObject *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(r->plan);
    Py_VISIT(r->keep);
    for (int i = 0; i < r->nout; i++) {
        Py_VISIT(r->outs[i].args);
        Py_VISIT(r->outs[i].kwargs);
        Py_VISIT(r->outs[i].key);
    }
    Py_VISIT(r->index);
    Py_VISIT(r->out_obj);
    Py_VISIT(r->stream_obj);
    return 0;
}

static int runner_clear(PyObject *self)
{
    RunnerObject *r = (RunnerObject *)self;
    Py_CLEAR(r->plan);
    Py_CLEAR(r->keep);
    for (int i = 0; i < 3; i++) {
        Py_CLEAR(r->outs[i].args);
        Py_CLEAR(r->outs[i].kwargs);
        Py_CLEAR(r->outs[i].key);
    }
    r->nout = 0;
    Py_CLEAR(r->index);
    Py_CLEAR(r->out_obj);
    Py_CLEAR(r->stream_obj);
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

static void set_ref(PyObject **slot, PyObject *value)
{
    PyObject *old = *slot;
    *slot = Py_NewRef(value);
    Py_XDECREF(old);
}

/* The address of an out= array seen before (cheap re-read: it may have been re-pointed). */
static int out_address(fm_state *st, const fm_lib *lib, PyObject *out, void **p)
{
    if (lib->style == STYLE_NUMPY) {
        Py_buffer v;
        if (PyObject_GetBuffer(out, &v, PyBUF_WRITABLE) < 0)
            return -1;
        *p = v.buf;
        PyBuffer_Release(&v);
        return 0;
    }
    if (lib->style == STYLE_TORCH) {
        PyObject *o = call_method0(out, st->s[S_data_ptr]);
        int r = long_ptr(o, "out.data_ptr()", p);
        Py_XDECREF(o);
        return r;
    }
    PyObject *data = PyObject_GetAttr(out, st->s[S_data]);
    PyObject *o = data ? PyObject_GetAttr(data, st->s[S_ptr]) : NULL;
    Py_XDECREF(data);
    int r = long_ptr(o, "out.data.ptr", p);
    Py_XDECREF(o);
    return r;
}

/* Validate a caller-given result array: the planned library, device, dtype, shape and
 * a C-contiguous layout (the plan was made for one). Cached per object. */
static int runner_check_out(fm_state *st, RunnerObject *r, PyObject *out, void **ptr)
{
    const fm_lib *lib = &st->libs[r->lib];
    if (out == r->out_obj) {
        void *p = NULL;
        if (out_address(st, lib, out, &p) == 0 && p == r->out_ptr) {
            *ptr = p;
            return 0;
        }
        PyErr_Clear(); /* validate again: it says what changed */
    }
    const char *where = "Matmul.execute(): ";
    fm_tensor t;
    fm_hold h;
    int li = -1;
    if (tensor_from_any(st, out, "out", 1, &t, &h, &li) < 0)
        return -1;
    int rc = -1;
    int lib_ok = lib->style == STYLE_NUMPY ? (h.kind == HOLD_BUFFER) : (li == r->lib);
    char want_dev[32], got_dev[32];
    device_text(r->device, want_dev, sizeof want_dev);
    device_text(t.device.type == FM_DEVICE_CUDA ? t.device.id : -1, got_dev, sizeof got_dev);
    int dev_ok = r->device >= 0 ? (t.device.type == FM_DEVICE_CUDA && t.device.id == r->device)
                                : (t.device.type == FM_DEVICE_CPU);
    int shape_ok = t.ndim == r->rndim;
    for (int i = 0; shape_ok && i < t.ndim; i++)
        shape_ok = t.shape[i] == r->rshape[i];
    int contiguous = 1;
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; i--) {
        if (t.shape[i] > 1 && t.strides[i] != expect)
            contiguous = 0;
        expect *= t.shape[i];
    }
    if (!lib_ok) {
        PyObject *tn = type_name(out);
        if (tn)
            PyErr_Format(error_class(st, FM_ERR_INVALID_ARGUMENT), "%sout must be an array of the result's library (%U), not %U",
                         where, lib->name, tn);
        Py_XDECREF(tn);
    } else if (!dev_ok) {
        PyErr_Format(error_class(st, FM_ERR_DEVICE), "%sout is on %s but the result lives on %s", where, got_dev,
                     want_dev);
    } else if (t.dtype != r->outs[0].dtype) {
        PyErr_Format(error_class(st, FM_ERR_INVALID_ARGUMENT), "%sout has dtype %s, expected %s (the dtype of a and b)",
                     where, fm_dtype_name(t.dtype), fm_dtype_name(r->outs[0].dtype));
    } else if (!shape_ok) {
        char got[160], want[160];
        shape_text(t.shape, t.ndim, got, sizeof got);
        shape_text(r->rshape, r->rndim, want, sizeof want);
        PyErr_Format(error_class(st, FM_ERR_SHAPE), "%sout has shape %s, expected %s", where, got, want);
    } else if (!contiguous) {
        PyErr_Format(error_class(st, FM_ERR_INVALID_ARGUMENT),
                     "%sout must be C-contiguous (the plan was made for a contiguous result); use "
                     "fusemath.matmul(..., out=) for other layouts",
                     where);
    } else {
        rc = 0;
    }
    hold_release(&h);
    if (rc == 0) {
        set_ref(&r->out_obj, out);
        r->out_ptr = t.data;
        *ptr = t.data;
    }
    return rc;
}

static PyObject *runner_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    RunnerObject *r = (RunnerObject *)self;
    if (nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "Runner.run() takes at most two arguments (stream, out)");
        return NULL;
    }
    if (!r->plan) { /* only after a garbage-collector clear */
        PyErr_SetString(PyExc_RuntimeError, "Matmul.execute(): the runner was cleared");
        return NULL;
    }
    PyObject *stream_arg = nargs > 0 ? args[0] : Py_None;
    PyObject *out = nargs > 1 ? args[1] : Py_None;
    fm_state *st = plan_state(r->plan);
    if (!st || r->lib >= st->nlibs) { /* the module was cleared (interpreter shutdown) */
        PyErr_SetString(PyExc_RuntimeError, "Matmul.execute(): the fusemath module was torn down");
        return NULL;
    }
    void *ptrs[FM_MATMUL_NSLOTS];
    memcpy(ptrs, r->ptrs, sizeof ptrs);

    void *stream = NULL;
    PyObject *override = NULL;
    if (stream_arg == Py_None) {
        if (r->gpu && lib_current_stream(st, r->lib, r->device, &stream) < 0)
            return NULL;
    } else {
        if (stream_arg == r->stream_obj) {
            stream = r->stream_handle;
        } else {
            if (stream_from_object(st, "Matmul.execute(): ", stream_arg, &stream) < 0)
                return NULL;
            set_ref(&r->stream_obj, stream_arg);
            r->stream_handle = stream;
        }
        if (r->gpu && (out == Py_None || r->nout > 1)) {
            void *cur = NULL;
            if (lib_current_stream(st, r->lib, r->device, &cur) < 0)
                return NULL;
            if (cur != stream && !(override = PyLong_FromVoidPtr(stream)))
                return NULL;
        }
    }

    PyObject *res[3] = {NULL, NULL, NULL};
    int first = 0;
    if (out != Py_None) {
        if (runner_check_out(st, r, out, &ptrs[FM_MATMUL_D]) < 0)
            goto fail;
        res[0] = Py_NewRef(out);
        first = 1;
    }
    for (int i = first; i < r->nout; i++) {
        const runner_out *o = &r->outs[i];
        res[i] = lib_alloc(st, r->lib, o->args, o->kwargs, r->device, override, slot_names[o->slot], &ptrs[o->slot]);
        if (!res[i])
            goto fail;
    }
    Py_CLEAR(override);

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
    if (!p || s != FM_OK) {
        if (p)
            raise_status(plan_state(plan), s);
        else
            plan_freed_error(plan, "execute()");
        Py_DECREF(plan);
        goto fail;
    }
    Py_DECREF(plan);

    PyObject *d = res[0];
    if (r->index && out == Py_None) {
        d = PyObject_GetItem(res[0], r->index);
        Py_DECREF(res[0]);
        res[0] = NULL;
        if (!d)
            goto fail;
    }
    if (r->nout == 1)
        return d;
    PyObject *extra = PyDict_New();
    if (!extra) {
        Py_DECREF(d);
        res[0] = NULL;
        goto fail;
    }
    for (int i = 1; i < r->nout; i++) {
        if (PyDict_SetItem(extra, r->outs[i].key, res[i]) < 0) {
            Py_DECREF(extra);
            Py_DECREF(d);
            res[0] = NULL;
            goto fail;
        }
        Py_CLEAR(res[i]);
    }
    return Py_BuildValue("(NN)", d, extra);

fail:
    Py_XDECREF(override);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(res[i]);
    return NULL;
}

static fm_dtype dtype_by_name(PyObject *name)
{
    if (!PyUnicode_Check(name))
        return FM_DTYPE_INVALID;
    for (int i = 1; i < FM_DTYPE_COUNT_; i++)
        if (PyUnicode_CompareWithASCIIString(name, fm_dtype_name((fm_dtype)i)) == 0)
            return (fm_dtype)i;
    return FM_DTYPE_INVALID;
}

static int lib_index_arg(fm_state *st, const char *fname, PyObject *o, int *li)
{
    long v = PyLong_Check(o) ? PyLong_AsLong(o) : -1;
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v >= st->nlibs) {
        PyErr_Format(PyExc_ValueError, "%s(): lib must be the index of a registered array library", fname);
        return -1;
    }
    *li = (int)v;
    return 0;
}

static PyObject *mod_make_runner(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    /* make_runner(plan, keep, ptrs, lib, device, outs, scalar)
     *   ptrs: 8 addresses (int or None) in slot order, outputs None
     *   outs: ((slot, shape, dtype name, key or None), ...), D first */
    fm_state *st = module_state(module);
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "make_runner() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], (PyTypeObject *)st->plan_type)) {
        PyErr_SetString(PyExc_TypeError, "make_runner(): plan must be a fusemath Plan");
        return NULL;
    }
    PyObject *ptrs = args[2], *outs = args[5];
    Py_ssize_t nptr = PyTuple_Check(ptrs) ? PyTuple_Size(ptrs) : -1;
    if (nptr != 8 && nptr != FM_MATMUL_NSLOTS) {
        PyErr_SetString(PyExc_TypeError, "make_runner(): ptrs must be a tuple of 8 or 10 addresses");
        return NULL;
    }
    if (!PyTuple_Check(outs) || PyTuple_Size(outs) < 1 || PyTuple_Size(outs) > 3) {
        PyErr_SetString(PyExc_TypeError, "make_runner(): outs must be a tuple of 1 to 3 output specs");
        return NULL;
    }
    int li;
    if (lib_index_arg(st, "make_runner", args[3], &li) < 0)
        return NULL;
    long dev = PyLong_AsLong(args[4]);
    if (dev == -1 && PyErr_Occurred())
        return NULL;
    void *p[FM_MATMUL_NSLOTS] = {0};
    for (int i = 0; i < nptr; i++)
        if (ptr_arg("make_runner(): ", slot_names[i], PyTuple_GetItem(ptrs, i), &p[i]) < 0)
            return NULL;
    PyTypeObject *tp = (PyTypeObject *)st->runner_type;
    allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    RunnerObject *r = (RunnerObject *)alloc(tp, 0);
    if (!r)
        return NULL;
    memcpy(r->ptrs, p, sizeof p);
    r->plan = Py_NewRef(args[0]);
    r->keep = Py_NewRef(args[1]);
    r->lib = li;
    r->device = (int)dev;
    r->gpu = st->libs[li].style != STYLE_NUMPY && dev >= 0;
    Py_ssize_t n = PyTuple_Size(outs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *spec = PyTuple_GetItem(outs, i);
        if (!PyTuple_Check(spec) || PyTuple_Size(spec) != 4) {
            PyErr_SetString(PyExc_TypeError, "make_runner(): an output spec is (slot, shape, dtype, key)");
            goto fail;
        }
        long slot = PyLong_AsLong(PyTuple_GetItem(spec, 0));
        if (slot == -1 && PyErr_Occurred())
            goto fail;
        PyObject *shape = PyTuple_GetItem(spec, 1), *key = PyTuple_GetItem(spec, 3);
        fm_dtype dt = dtype_by_name(PyTuple_GetItem(spec, 2));
        if ((i == 0) != (slot == FM_MATMUL_D) ||
            (slot != FM_MATMUL_D && slot != FM_MATMUL_AUX && slot != FM_MATMUL_BGRAD) || !PyTuple_Check(shape) ||
            dt == FM_DTYPE_INVALID || (i > 0 && !PyUnicode_Check(key))) {
            PyErr_SetString(PyExc_ValueError, "make_runner(): invalid output spec");
            goto fail;
        }
        runner_out *o = &r->outs[i];
        o->slot = (int)slot;
        o->dtype = dt;
        r->nout = (int)i + 1;
        if (lib_alloc_args(st, li, shape, dt, (int)dev, &o->args, &o->kwargs) < 0)
            goto fail;
        if (i > 0)
            o->key = Py_NewRef(key);
        if (i == 0) {
            fm_tensor t;
            if (dims_from_tuples("out", shape, NULL, 1, &t) < 0)
                goto fail;
            r->rndim = t.ndim;
            memcpy(r->rshape, t.shape, sizeof r->rshape);
        }
    }
    int scalar = PyObject_IsTrue(args[6]);
    if (scalar < 0)
        goto fail;
    if (scalar)
        r->index = Py_NewRef(st->empty_tuple);
    return (PyObject *)r;
fail:
    Py_DECREF(r);
    return NULL;
}

static PyMethodDef runner_methods[] = {
    {"run", (PyCFunction)(void (*)(void))runner_run, METH_FASTCALL,
     "run(stream=None, out=None)\n--\n\nResolve the stream, allocate the results (or take out=), execute the plan "
     "on the bound operands, return them."},
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
/* Matmul options.                                                          */
/* ------------------------------------------------------------------------ */
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

typedef struct {
    PyObject *alpha, *beta, *epilogue, *execution, *device_id, *num_threads, *panel_rows, *cpu_strategy, *compute,
        *clamp;
} opt_objs;

static int fill_options(fm_state *st, const char *fname, const opt_objs *a, fm_matmul_options *o)
{
    fm_matmul_options_init(o);
    long long v;
    if (number_arg(fname, "alpha", a->alpha, o->alpha) < 0 || number_arg(fname, "beta", a->beta, o->beta) < 0)
        return -1;
    if (epilogue_arg(st, fname, a->epilogue, &o->epilogue) < 0)
        return -1;
    v = o->execution;
    if (int_arg(fname, "execution", a->execution, 0, 2, &v) < 0)
        return -1;
    o->execution = (int32_t)v;
    v = o->device_id;
    if (int_arg(fname, "device_id", a->device_id, 0, INT32_MAX, &v) < 0)
        return -1;
    o->device_id = (int32_t)v;
    v = o->num_threads;
    if (int_arg(fname, "num_threads", a->num_threads, 0, INT32_MAX, &v) < 0)
        return -1;
    o->num_threads = (int32_t)v;
    v = o->panel_rows;
    if (int_arg(fname, "panel_rows", a->panel_rows, 0, INT32_MAX, &v) < 0)
        return -1;
    o->panel_rows = (int32_t)v;
    v = o->cpu_strategy;
    if (int_arg(fname, "cpu_strategy", a->cpu_strategy, 0, 2, &v) < 0)
        return -1;
    o->cpu_strategy = (int32_t)v;
    v = o->compute;
    if (int_arg(fname, "compute", a->compute, 0, 1, &v) < 0)
        return -1;
    o->compute = (int32_t)v;
    if (a->clamp && a->clamp != Py_None) {
        PyObject *seq = a->clamp;
        if (PyUnicode_Check(seq) || !PySequence_Check(seq) || PySequence_Size(seq) != 2) {
            PyErr_Clear();
            raise_type(PyExc_TypeError, fname, "clamp", "a pair of numbers (lo, hi)", seq);
            return -1;
        }
        for (int i = 0; i < 2; i++) {
            PyObject *x = PySequence_GetItem(seq, i);
            double d = x ? PyFloat_AsDouble(x) : -1.0;
            Py_XDECREF(x);
            if (d == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                raise_type(PyExc_TypeError, fname, "clamp", "a pair of real numbers (lo, hi)", seq);
                return -1;
            }
            o->clamp[i] = d;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Matmul entry points (low level: the caller gives every array).            */
/* ------------------------------------------------------------------------ */
enum { MM_RUN, MM_PLAN, MM_TUNE };
enum {
    K_A, K_B, K_C, K_BIAS, K_D, K_AUX, K_ALPHA, K_BETA, K_EPI, K_EXEC, K_DEV, K_NTH, K_PANEL, K_STRAT,
    K_STREAM, K_BGRAD, K_SCALE, K_COMPUTE, K_CLAMP, K_REPEATS, K_COUNT
};

#define MM_COMMON_NAMES                                                                                 \
    "a", "b", "c", "bias", "d", "aux", "alpha", "beta", "epilogue", "execution", "device_id", "num_threads", \
        "panel_rows", "cpu_strategy"
#define MM_COMMON_MAP 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13
static const char *const mm_run_names[] = {MM_COMMON_NAMES, "stream", "bgrad", "scale", "compute", "clamp"};
static const int mm_run_map[] = {MM_COMMON_MAP, K_STREAM, K_BGRAD, K_SCALE, K_COMPUTE, K_CLAMP};
static const char *const mm_plan_names[] = {MM_COMMON_NAMES, "bgrad", "scale", "compute", "clamp"};
static const int mm_plan_map[] = {MM_COMMON_MAP, K_BGRAD, K_SCALE, K_COMPUTE, K_CLAMP};
static const char *const mm_tune_names[] = {MM_COMMON_NAMES, "repeats", "bgrad", "scale", "compute", "clamp"};
static const int mm_tune_map[] = {MM_COMMON_MAP, K_REPEATS, K_BGRAD, K_SCALE, K_COMPUTE, K_CLAMP};

/* Convert the operand objects (slot order); a, b, d required. */
static int convert_slots(fm_state *st, PyObject **objs, unsigned epi, fm_tensor *tens, fm_hold *holds,
                         const fm_tensor **tp)
{
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
        hold_init(&holds[i]);
        tp[i] = NULL;
    }
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
        PyObject *o = objs[i];
        int required = (i == FM_MATMUL_A || i == FM_MATMUL_B || i == FM_MATMUL_D);
        if (!o || o == Py_None) {
            if (required) {
                PyErr_Format(PyExc_TypeError, "argument '%s' must be an array, not None", slot_names[i]);
                return -1;
            }
            continue;
        }
        int writable = i == FM_MATMUL_D || i == FM_MATMUL_BGRAD || (i == FM_MATMUL_AUX && (epi & FM_EPILOGUE_AUX));
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
    const char *const *names = mode == MM_RUN ? mm_run_names : mode == MM_PLAN ? mm_plan_names : mm_tune_names;
    const int *map = mode == MM_RUN ? mm_run_map : mode == MM_PLAN ? mm_plan_map : mm_tune_map;
    int nnames = mode == MM_PLAN ? 18 : 19;
    PyObject *raw[19], *v[K_COUNT];
    if (parse_args(fname, args, nargs, kwnames, names, nnames, 2, raw) < 0)
        return NULL;
    for (int i = 0; i < K_COUNT; i++)
        v[i] = NULL;
    for (int i = 0; i < nnames; i++)
        v[map[i]] = raw[i];
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%s(): ", fname);
    opt_objs oo = {v[K_ALPHA], v[K_BETA], v[K_EPI], v[K_EXEC], v[K_DEV], v[K_NTH], v[K_PANEL], v[K_STRAT],
                   v[K_COMPUTE], v[K_CLAMP]};
    fm_matmul_options opts;
    if (fill_options(st, prefix, &oo, &opts) < 0)
        return NULL;
    void *stream = NULL;
    long long repeats = 3;
    if (v[K_STREAM] && stream_from_object(st, prefix, v[K_STREAM], &stream) < 0)
        return NULL;
    if (int_arg(prefix, "repeats", v[K_REPEATS], 1, 1000000, &repeats) < 0)
        return NULL;

    PyObject *objs[FM_MATMUL_NSLOTS] = {v[K_A], v[K_B], v[K_C], v[K_BIAS], v[K_D], v[K_AUX], v[K_BGRAD], v[K_SCALE]};
    fm_tensor tens[FM_MATMUL_NSLOTS];
    fm_hold holds[FM_MATMUL_NSLOTS];
    const fm_tensor *tp[FM_MATMUL_NSLOTS];
    if (convert_slots(st, objs, opts.epilogue, tens, holds, tp) < 0) {
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
        s = fm_matmul_v(st->ctx, tp, &opts, stream);
        break;
    case MM_PLAN:
        s = fm_matmul_plan_v(st->ctx, tp, &opts, &plan);
        break;
    default:
        s = fm_matmul_autotune_v(st->ctx, tp, &opts, tuning, &plan);
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

#define MM_SIG_COMMON                                                                                   \
    "a, b, c, bias, d, aux, alpha=1.0, beta=0.0, epilogue=0, execution=0, device_id=0,\n"               \
    "       num_threads=0, panel_rows=0, cpu_strategy=0"

PyDoc_STRVAR(matmul_doc,
             "matmul(" MM_SIG_COMMON ", stream=None, bgrad=None, scale=None,\n"
             "       compute=0, clamp=None)\n--\n\n"
             "Low level: D = act(alpha*A@B + beta*C + bias) into the array d (and aux, bgrad), with fm_matmul_v.\n"
             "a: (..., M, K), b: (..., K, N) (no 1-D promotion here), c/bias/aux/bgrad/scale may be None.\n"
             "epilogue is an int of EPILOGUE_* bits or a string; compute 0 = default, 1 = tf32; clamp (lo, hi).\n"
             "The GIL is released while it runs; GPU work is queued on `stream` without synchronizing.");

static PyObject *mod_matmul(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return matmul_common(module, MM_RUN, args, nargs, kwnames);
}

PyDoc_STRVAR(plan_matmul_doc,
             "plan_matmul(" MM_SIG_COMMON ", bgrad=None, scale=None,\n"
             "            compute=0, clamp=None)\n--\n\n"
             "Plan D = act(alpha*A@B + beta*C + bias) for operands laid out like the given arrays\n"
             "(their shapes, strides, dtypes, devices and alignment; the data is not touched). Returns a Plan.");

static PyObject *mod_plan_matmul(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return matmul_common(module, MM_PLAN, args, nargs, kwnames);
}

PyDoc_STRVAR(autotune_doc,
             "autotune(" MM_SIG_COMMON ", repeats=3, bgrad=None,\n"
             "         scale=None, compute=0, clamp=None)\n--\n\n"
             "Time the candidate configurations on these arrays (d, aux and bgrad are overwritten) and\n"
             "return a Plan with the fastest; it also replaces the cached plan for this problem.");

static PyObject *mod_autotune(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return matmul_common(module, MM_TUNE, args, nargs, kwnames);
}

/* ------------------------------------------------------------------------ */
/* Stateless matmul on arrays of a registered library (the fast front end).   */
/* ------------------------------------------------------------------------ */
/* Insert an axis of extent 1 at pos (its stride never matters). */
static void insert_axis(fm_tensor *t, int pos)
{
    for (int i = t->ndim; i > pos; i--) {
        t->shape[i] = t->shape[i - 1];
        t->strides[i] = t->strides[i - 1];
    }
    t->shape[pos] = 1;
    t->strides[pos] = 0;
    t->ndim++;
}

/* From the result shape (1-D dims dropped) to the promoted (..., M, N). */
static void expand_result(fm_tensor *t, int nbatch, int a1d, int b1d)
{
    if (a1d)
        insert_axis(t, nbatch);
    if (b1d)
        insert_axis(t, t->ndim);
}

static int same_shape(const fm_tensor *t, const int64_t *shape, int n)
{
    if (t->ndim != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (t->shape[i] != shape[i])
            return 0;
    return 1;
}

static int shape_mismatch(fm_state *st, const char *name, const fm_tensor *t, const int64_t *want, int n,
                          const char *hint)
{
    char got[160], exp[160];
    shape_text(t->shape, t->ndim, got, sizeof got);
    shape_text(want, n, exp, sizeof exp);
    PyErr_Format(error_class(st, FM_ERR_SHAPE), "matmul: %s has shape %s, expected %s%s", name, got, exp, hint);
    return -1;
}

/* The key of the extra result of an epilogue (nvmath-python's names), NULL if none. */
static const char *extra_key(unsigned epi)
{
    if (epi & FM_EPILOGUE_AUX) {
        if (epi & FM_EPILOGUE_RELU) return "relu_aux";
        if (epi & FM_EPILOGUE_GELU) return "gelu_aux";
        if (epi & FM_EPILOGUE_SIGMOID) return "sigmoid_aux";
        if (epi & FM_EPILOGUE_TANH) return "tanh_aux";
        if (epi & FM_EPILOGUE_SILU) return "silu_aux";
        if (epi & FM_EPILOGUE_CLAMP) return "clamp_aux";
    }
    if (epi & FM_EPILOGUE_BGRAD)
        return (epi & FM_EPILOGUE_DRELU) ? "drelu_bgrad" : "dgelu_bgrad";
    if (epi & FM_EPILOGUE_BGRADA)
        return "bgrada";
    if (epi & FM_EPILOGUE_BGRADB)
        return "bgradb";
    return NULL;
}

static int device_index(const fm_tensor *t) { return t->device.type == FM_DEVICE_CUDA ? t->device.id : -1; }

enum {
    X_LIB, X_A, X_B, X_C, X_BIAS, X_SCALE, X_AUX, X_OUT, X_ALPHA, X_BETA, X_EPI, X_EXEC, X_DEV, X_NTH, X_PANEL,
    X_STRAT, X_COMPUTE, X_CLAMP, X_STREAM, X_ASCALE, X_BSCALE, X_COUNT
};

PyDoc_STRVAR(array_matmul_doc,
             "array_matmul(lib, a, b, c, bias, scale, aux, out, alpha, beta, epilogue, execution, device_id,\n"
             "             num_threads, panel_rows, cpu_strategy, compute, clamp, stream, a_scale, b_scale)\n--\n\n"
             "The stateless matmul of fusemath.matmul for arrays of a registered library, in one C call\n"
             "(all arguments positional): NumPy matmul semantics (1-D promotion, batch broadcast); the\n"
             "results are allocated with library `lib` on the device of the operand of that library; GPU\n"
             "work is queued on `stream` (None: the library's current stream) without synchronizing.\n"
             "aux is the relu_aux / gelu_aux input of drelu / dgelu. a_scale / b_scale: fp8 scale factors\n"
             "(one-element float32 arrays on the device, or None). fp8 a and b give a bfloat16 result\n"
             "unless out says otherwise. Returns d or (d, {key: extra}).");

static PyObject *mod_array_matmul(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = module_state(module);
    if (nargs != X_COUNT) {
        PyErr_Format(PyExc_TypeError, "array_matmul() takes %d arguments (%zd given)", (int)X_COUNT, nargs);
        return NULL;
    }
    int li;
    if (lib_index_arg(st, "array_matmul", args[X_LIB], &li) < 0)
        return NULL;
    const fm_lib *lib = &st->libs[li];
    opt_objs oo = {args[X_ALPHA], args[X_BETA], args[X_EPI], args[X_EXEC], args[X_DEV], args[X_NTH],
                   args[X_PANEL], args[X_STRAT], args[X_COMPUTE], args[X_CLAMP]};
    fm_matmul_options opts;
    if (fill_options(st, "matmul(): ", &oo, &opts) < 0)
        return NULL;
    const unsigned epi = opts.epilogue;

    fm_tensor tens[FM_MATMUL_NSLOTS];
    fm_hold holds[FM_MATMUL_NSLOTS];
    const fm_tensor *tp[FM_MATMUL_NSLOTS];
    int libs[FM_MATMUL_NSLOTS];
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
        hold_init(&holds[i]);
        tp[i] = NULL;
        libs[i] = -1;
    }
    PyObject *res[3] = {NULL, NULL, NULL}; /* d, aux, bgrad */
    PyObject *override = NULL, *result = NULL;
    fm_status s;

    fm_tensor *ta = &tens[FM_MATMUL_A], *tb = &tens[FM_MATMUL_B];
    if (tensor_from_any(st, args[X_A], "a", 0, ta, &holds[FM_MATMUL_A], &libs[FM_MATMUL_A]) < 0 ||
        tensor_from_any(st, args[X_B], "b", 0, tb, &holds[FM_MATMUL_B], &libs[FM_MATMUL_B]) < 0)
        goto done;
    tp[FM_MATMUL_A] = ta;
    tp[FM_MATMUL_B] = tb;
    if (ta->ndim == 0 || tb->ndim == 0) {
        PyErr_Format(error_class(st, FM_ERR_SHAPE),
                     "matmul: %s is 0-d (a scalar); matmul needs operands with at least one dimension "
                     "(use * to scale by a scalar)",
                     ta->ndim == 0 ? "a" : "b");
        goto done;
    }
    const int a1d = ta->ndim == 1, b1d = tb->ndim == 1;
    if (a1d) { /* (K,) -> (1, K) */
        ta->shape[1] = ta->shape[0];
        ta->strides[1] = ta->strides[0];
        ta->shape[0] = 1;
        ta->strides[0] = 0;
        ta->ndim = 2;
    }
    if (b1d) { /* (K,) -> (K, 1) */
        tb->shape[1] = 1;
        tb->strides[1] = 0;
        tb->ndim = 2;
    }
    int nd = 0;
    int64_t dshape[FM_MAX_NDIM + 2];
    fm_clear_error();
    if ((s = fm_matmul_output_shape(ta, tb, &nd, dshape)) != FM_OK) {
        raise_status(st, s);
        goto done;
    }
    if (nd > FM_MAX_NDIM) {
        PyErr_Format(error_class(st, FM_ERR_SHAPE), "matmul: the result would have %d dimensions, at most %d", nd,
                     FM_MAX_NDIM);
        goto done;
    }
    const int nb = nd - 2;
    const int64_t m = dshape[nd - 2], n = dshape[nd - 1];
    int64_t rshape[FM_MAX_NDIM];
    int rnd = 0;
    for (int i = 0; i < nb; i++)
        rshape[rnd++] = dshape[i];
    if (!a1d)
        rshape[rnd++] = m;
    if (!b1d)
        rshape[rnd++] = n;
    /* fp8 inputs: the result is bfloat16 unless out= has f16 / bf16 / f32 (the core checks) */
    const int fp8 = ta->dtype == FM_F8E4M3 || ta->dtype == FM_F8E5M2;
    fm_dtype dt = ta->dtype;
    if (fp8) {
        dt = FM_BF16;
        if (args[X_OUT] != Py_None) {
            fm_tensor probe;
            fm_hold hp;
            if (tensor_from_any(st, args[X_OUT], "out", 1, &probe, &hp, NULL) < 0)
                goto done;
            hold_release(&hp);
            dt = probe.dtype;
        }
    }
    for (int i = 0; i < 2; i++) {
        int x = i ? X_BSCALE : X_ASCALE, sl = i ? FM_MATMUL_B_SCALE : FM_MATMUL_A_SCALE;
        if (args[x] == Py_None)
            continue;
        if (tensor_from_any(st, args[x], slot_names[sl], 0, &tens[sl], &holds[sl], &libs[sl]) < 0)
            goto done;
        tp[sl] = &tens[sl];
    }

    if (args[X_OUT] != Py_None) {
        fm_tensor *td = &tens[FM_MATMUL_D];
        if (tensor_from_any(st, args[X_OUT], "out", 1, td, &holds[FM_MATMUL_D], &libs[FM_MATMUL_D]) < 0)
            goto done;
        if (!same_shape(td, rshape, rnd)) {
            shape_mismatch(st, "out", td, rshape, rnd, "");
            goto done;
        }
        if (td->dtype != dt) {
            PyErr_Format(error_class(st, FM_ERR_INVALID_ARGUMENT),
                         "matmul: out has dtype %s, expected %s (the dtype of a and b)", fm_dtype_name(td->dtype),
                         fm_dtype_name(dt));
            goto done;
        }
        expand_result(td, nb, a1d, b1d);
        tp[FM_MATMUL_D] = td;
        res[0] = Py_NewRef(args[X_OUT]);
    }

    /* the results live with the operand of library `lib` */
    int dev = -1;
    if (libs[FM_MATMUL_A] == li)
        dev = device_index(ta);
    else if (libs[FM_MATMUL_B] == li)
        dev = device_index(tb);
    else if (lib->style != STYLE_NUMPY) {
        PyErr_Format(PyExc_ValueError, "array_matmul(): neither a nor b is an array of %U", lib->name);
        goto done;
    }

    if (args[X_C] != Py_None) {
        fm_tensor *tc = &tens[FM_MATMUL_C];
        if (tensor_from_any(st, args[X_C], "c", 0, tc, &holds[FM_MATMUL_C], &libs[FM_MATMUL_C]) < 0)
            goto done;
        if (tc->ndim > rnd) {
            char cs[160], rs[160];
            shape_text(tc->shape, tc->ndim, cs, sizeof cs);
            shape_text(rshape, rnd, rs, sizeof rs);
            PyErr_Format(error_class(st, FM_ERR_SHAPE),
                         "matmul: c has shape %s, which does not broadcast to the result shape %s", cs, rs);
            goto done;
        }
        while (tc->ndim < rnd)
            insert_axis(tc, 0);
        expand_result(tc, nb, a1d, b1d);
        tp[FM_MATMUL_C] = tc;
    }
    static const struct {
        int x, slot;
        const char *name;
    } vec_inputs[] = {{X_BIAS, FM_MATMUL_BIAS, "bias"}, {X_SCALE, FM_MATMUL_SCALE, "scale"}};
    for (int i = 0; i < 2; i++) {
        int sl = vec_inputs[i].slot;
        if (args[vec_inputs[i].x] == Py_None)
            continue;
        if (tensor_from_any(st, args[vec_inputs[i].x], vec_inputs[i].name, 0, &tens[sl], &holds[sl], &libs[sl]) < 0)
            goto done;
        tp[sl] = &tens[sl];
    }
    if (args[X_AUX] != Py_None) {
        fm_tensor *tx = &tens[FM_MATMUL_AUX];
        const int mask = (epi & FM_EPILOGUE_DRELU) != 0;
        const char *name = mask ? "relu_aux" : "gelu_aux";
        if (tensor_from_any(st, args[X_AUX], name, 0, tx, &holds[FM_MATMUL_AUX], &libs[FM_MATMUL_AUX]) < 0)
            goto done;
        if (epi & (FM_EPILOGUE_DRELU | FM_EPILOGUE_DGELU)) {
            int64_t want[FM_MAX_NDIM];
            int nw = 0;
            for (int i = 0; i < nb; i++)
                want[nw++] = dshape[i];
            if (!a1d)
                want[nw++] = m;
            if (mask)
                want[nw++] = fm_relu_mask_row_bytes(n);
            else if (!b1d)
                want[nw++] = n;
            if (!same_shape(tx, want, nw)) {
                shape_mismatch(st, name, tx, want, nw,
                               mask ? " (the relu_aux mask of the forward RELU_AUX call on operands of these shapes)"
                                    : " (the gelu_aux of the forward GELU_AUX call on operands of these shapes)");
                goto done;
            }
            fm_dtype want_dt = mask ? FM_U8 : dt;
            if (tx->dtype != want_dt) {
                PyErr_Format(error_class(st, FM_ERR_DTYPE), "matmul: %s has dtype %s, expected %s", name,
                             fm_dtype_name(tx->dtype), fm_dtype_name(want_dt));
                goto done;
            }
            if (a1d)
                insert_axis(tx, nb);
            if (!mask && b1d)
                insert_axis(tx, tx->ndim);
        }
        tp[FM_MATMUL_AUX] = tx;
    }
    const unsigned any_bgrad = FM_EPILOGUE_BGRAD | FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB;
    int allocating = !res[0] || (epi & (FM_EPILOGUE_AUX | any_bgrad));
    void *stream = NULL;
    if (resolve_stream(st, "matmul(): ", li, dev, args[X_STREAM], allocating, &stream, &override) < 0)
        goto done;

    fm_device odev = {dev >= 0 ? FM_DEVICE_CUDA : FM_DEVICE_CPU, dev >= 0 ? dev : 0};
    for (int k = 0; k < 3; k++) {
        static const int slots[3] = {FM_MATMUL_D, FM_MATMUL_AUX, FM_MATMUL_BGRAD};
        int sl = slots[k];
        int64_t ret[FM_MAX_NDIM], full[FM_MAX_NDIM];
        int nret = 0, nfull = 0;
        fm_dtype odt = dt;
        if (k == 0) {
            if (res[0])
                continue;
            memcpy(ret, rshape, sizeof(int64_t) * (size_t)rnd);
            nret = rnd;
            memcpy(full, dshape, sizeof(int64_t) * (size_t)nd);
            nfull = nd;
        } else if (k == 1) {
            if (!(epi & FM_EPILOGUE_AUX))
                continue;
            int mask = (epi & FM_EPILOGUE_RELU) != 0;
            int64_t last = mask ? fm_relu_mask_row_bytes(n) : n;
            for (int i = 0; i < nb; i++)
                ret[nret++] = full[nfull++] = dshape[i];
            if (!a1d)
                ret[nret++] = m;
            if (mask || !b1d)
                ret[nret++] = last;
            full[nfull++] = m;
            full[nfull++] = last;
            odt = mask ? FM_U8 : dt;
        } else {
            if (!(epi & any_bgrad))
                continue;
            for (int i = 0; i < nb; i++)
                ret[nret++] = full[nfull++] = dshape[i];
            ret[nret++] = full[nfull++] = (epi & FM_EPILOGUE_BGRADA) ? m : n;
        }
        PyObject *shape = shape_tuple(ret, nret), *aargs = NULL, *akw = NULL;
        void *ptr = NULL;
        if (shape && lib_alloc_args(st, li, shape, odt, dev, &aargs, &akw) == 0)
            res[k] = lib_alloc(st, li, aargs, akw, dev, override, slot_names[sl], &ptr);
        Py_XDECREF(shape);
        Py_XDECREF(aargs);
        Py_XDECREF(akw);
        if (!res[k])
            goto done;
        fm_tensor_init(&tens[sl], ptr, odev, odt, nfull, full, NULL);
        tp[sl] = &tens[sl];
    }

    Py_BEGIN_ALLOW_THREADS
    fm_clear_error();
    s = fm_matmul_v(st->ctx, tp, &opts, stream);
    Py_END_ALLOW_THREADS
    if (s != FM_OK) {
        raise_status(st, s);
        goto done;
    }
    const char *key = extra_key(epi);
    if (!key) {
        result = res[0];
        res[0] = NULL;
    } else {
        PyObject *extra = res[1] ? res[1] : res[2];
        result = Py_BuildValue("(O{sO})", res[0], key, extra);
    }
done:
    release_slots(holds);
    Py_XDECREF(override);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(res[i]);
    return result;
}

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
    if (int_arg(fname, "kind", o[0], 0, 2, &v) < 0)
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
            raise_type(PyExc_TypeError, fname, "axes", "a sequence of 1 to 3 ints", o[2]);
            return -1;
        }
        Py_ssize_t n = PyTuple_Size(seq);
        if (n < 1 || n > 3) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "%saxes has %zd entries, expected 1 to 3", fname, n);
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            v = 0;
            if (int_arg(fname, "axes[i]", PyTuple_GetItem(seq, i), -FM_MAX_NDIM, FM_MAX_NDIM - 1, &v) < 0) {
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
        if (int_arg(fname, names[i], o[3 + i], 0, his[i], &v) < 0)
            return -1;
        *fields[i] = (int32_t)v;
    }
    for (int c = 0; c < 2; c++) {
        fm_fft_chain *ch = c ? &opt->epilog : &opt->prolog;
        v = 0;
        if (int_arg(fname, c ? "epilog_ops" : "prolog_ops", o[8 + 2 * c], 0, 15, &v) < 0)
            return -1;
        ch->ops = (unsigned)v;
        if (number_arg(fname, c ? "epilog_scale" : "prolog_scale", o[9 + 2 * c], ch->scale) < 0)
            return -1;
        for (int k = 0; k < 2; k++) {
            PyObject *str = o[12 + 2 * c + k];
            const char **dst = k ? &ch->symbol : &ch->source;
            if (str == Py_None)
                continue;
            if (!PyUnicode_Check(str)) {
                raise_type(PyExc_TypeError, fname, k ? (c ? "epilog['name']" : "prolog['name']")
                                                     : (c ? "epilog['source']" : "prolog['source']"),
                           "a str", str);
                return -1;
            }
            Py_ssize_t len;
            *dst = PyUnicode_AsUTF8AndSize(str, &len);
            if (!*dst)
                return -1;
            if ((size_t)len != strlen(*dst)) {
                PyErr_Format(PyExc_ValueError, "%s%s contains a NUL character", fname, k ? "name" : "source");
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
        hold_release(&holds[i]);
}

enum { F_LIB, F_X, F_OUT, F_PRO, F_EPI, F_OPTS, F_SHAPE = F_OPTS + FFT_NOPTS, F_STREAM, F_COUNT };

PyDoc_STRVAR(fft_execute_doc,
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

static PyObject *mod_fft_execute(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = module_state(module);
    if (nargs != F_COUNT) {
        PyErr_Format(PyExc_TypeError, "fft_execute() takes %d arguments (%zd given)", (int)F_COUNT, nargs);
        return NULL;
    }
    int li;
    if (lib_index_arg(st, "fft_execute", args[F_LIB], &li) < 0)
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
        hold_init(&holds[i]);
        tp[i] = NULL;
        libs[i] = -1;
    }
    PyObject *res = NULL, *override = NULL, *result = NULL;
    fm_status s;
    fm_tensor *tx = &tens[FM_FFT_IN];
    if (tensor_from_any(st, args[F_X], "x", 0, tx, &holds[FM_FFT_IN], &libs[FM_FFT_IN]) < 0)
        goto done;
    tp[FM_FFT_IN] = tx;
    int dev = -1;
    if (libs[FM_FFT_IN] == li)
        dev = device_index(tx);
    else if (lib->style != STYLE_NUMPY) {
        PyErr_Format(PyExc_ValueError, "fft_execute(): x is not an array of %U", lib->name);
        goto done;
    }
    for (int i = FM_FFT_PROLOG; i <= FM_FFT_EPILOG; i++) {
        PyObject *o = args[i == FM_FFT_PROLOG ? F_PRO : F_EPI];
        if (o == Py_None)
            continue;
        if (tensor_from_any(st, o, fft_slot_names[i], 0, &tens[i], &holds[i], &libs[i]) < 0)
            goto done;
        tp[i] = &tens[i];
    }
    if (args[F_OUT] != Py_None) {
        if (tensor_from_any(st, args[F_OUT], "out", 1, &tens[FM_FFT_OUT], &holds[FM_FFT_OUT], &libs[FM_FFT_OUT]) < 0)
            goto done;
        tp[FM_FFT_OUT] = &tens[FM_FFT_OUT];
        res = Py_NewRef(args[F_OUT]);
    }
    void *stream = NULL;
    if (resolve_stream(st, "fft(): ", li, dev, args[F_STREAM], res == NULL, &stream, &override) < 0)
        goto done;
    if (!res) {
        fm_dtype odt = fft_out_dtype(opts.kind, tx->dtype);
        if (odt == FM_DTYPE_INVALID) {
            static const char *const kinds[3] = {"c2c", "r2c", "c2r"};
            PyErr_Format(error_class(st, FM_ERR_DTYPE), "fft: x has dtype %s, which a %s transform does not take "
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
            if (int_arg("fft_execute(): ", "out_shape[i]", PyTuple_GetItem(shape, i), 0, INT64_MAX, &e) < 0)
                goto done;
            oshape[i] = e;
        }
        PyObject *aargs = NULL, *akw = NULL;
        void *ptr = NULL;
        if (lib_alloc_args(st, li, shape, odt, dev, &aargs, &akw) == 0)
            res = lib_alloc(st, li, aargs, akw, dev, override, "out", &ptr);
        Py_XDECREF(aargs);
        Py_XDECREF(akw);
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
        raise_status(st, s);
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

PyDoc_STRVAR(plan_fft_doc,
             "plan_fft(x, out, prolog_array, epilog_array, kind, inverse, axes, norm, effort, execution,\n"
             "         device_id, num_threads, prolog_ops, prolog_scale, epilog_ops, epilog_scale,\n"
             "         prolog_source, prolog_symbol, epilog_source, epilog_symbol, gpu_prolog)\n--\n\n"
             "Plan out = epilog(norm * FFT(prolog(x))) for arrays laid out like the given ones (shapes,\n"
             "strides, dtypes, devices; the data is not touched unless effort > 0, which may overwrite out).\n"
             "Returns a Plan; Plan.execute(x, out, prolog, epilog[, stream]) takes the 4 addresses.");

static PyObject *mod_plan_fft(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = module_state(module);
    if (nargs != 5 + FFT_NOPTS) {
        PyErr_Format(PyExc_TypeError, "plan_fft() takes %d arguments (%zd given)", 5 + FFT_NOPTS, nargs);
        return NULL;
    }
    fm_fft_options opts;
    if (fft_fill_options("plan_fft(): ", args + 4, &opts) < 0)
        return NULL;
    long long gpu_prolog = FM_FFT_PROLOG_AUTO; /* fm_fft_gpu_prolog */
    if (int_arg("plan_fft(): ", "gpu_prolog", args[4 + FFT_NOPTS], 0, 2, &gpu_prolog) < 0)
        return NULL;
    opts.gpu_prolog = (int32_t)gpu_prolog;
    fm_tensor tens[FM_FFT_NSLOTS];
    fm_hold holds[FM_FFT_NSLOTS];
    const fm_tensor *tp[FM_FFT_NSLOTS];
    for (int i = 0; i < FM_FFT_NSLOTS; i++) {
        hold_init(&holds[i]);
        tp[i] = NULL;
    }
    for (int i = 0; i < FM_FFT_NSLOTS; i++) {
        if (args[i] == Py_None && i >= FM_FFT_PROLOG)
            continue;
        if (tensor_from_object(st, args[i], fft_slot_names[i], i == FM_FFT_OUT, &tens[i], &holds[i]) < 0) {
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
        return raise_status(st, s);
    }
    if (!plan)
        return raise_msg(st, FM_ERR_INTERNAL, "the library returned FM_OK without a plan");
    return plan_wrap(st, module, plan);
}

/* ------------------------------------------------------------------------ */
/* Array helpers exposed to Python.                                          */
/* ------------------------------------------------------------------------ */
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
    int64_t shape[FM_MAX_NDIM + 2];
    fm_clear_error();
    fm_status s = fm_matmul_output_shape(&ta, &tb, &ndim, shape);
    hold_release(&ha);
    hold_release(&hb);
    if (s != FM_OK)
        return raise_status(st, s);
    if (ndim < 0 || ndim > FM_MAX_NDIM)
        return raise_msg(st, FM_ERR_SHAPE, "output_shape: the result would have more than FM_MAX_NDIM dimensions");
    return shape_tuple(shape, ndim);
}

PyDoc_STRVAR(tensor_info_doc,
             "tensor_info(obj, writable=False)\n--\n\n"
             "How the library sees an array: (address, (device_type, device_id), dtype name, shape,\n"
             "element strides). device_type follows DLPack (1 cpu, 2 cuda; 0 = resolved by the library\n"
             "from the pointer, for __cuda_array_interface__). For debugging and tests.");

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
    PyObject *shape = shape_tuple(t.shape, t.ndim), *strides = shape_tuple(t.strides, t.ndim), *res = NULL;
    if (shape && strides)
        res = Py_BuildValue("(N(ii)sOO)", PyLong_FromVoidPtr(t.data), (int)t.device.type, (int)t.device.id,
                            fm_dtype_name(t.dtype), shape, strides);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    hold_release(&h);
    return res;
}

PyDoc_STRVAR(data_ptr_doc, "data_ptr(obj)\n--\n\nAddress (int) of element 0 of an array (any kind tensor_info takes).");

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

PyDoc_STRVAR(lib_empty_doc,
             "lib_empty(lib, shape, dtype, device)\n--\n\n"
             "A new array of registered library `lib` (index), shape (tuple), dtype (fusemath name: 'f32',\n"
             "'u8', ...) on cuda:device (-1: host), from the library's allocator on its current stream.\n"
             "The library's out-of-memory error becomes fusemath.OutOfMemoryError.");

static PyObject *mod_lib_empty(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = module_state(module);
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "lib_empty() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    int li;
    if (lib_index_arg(st, "lib_empty", args[0], &li) < 0)
        return NULL;
    fm_dtype dt = dtype_by_name(args[2]);
    if (dt == FM_DTYPE_INVALID || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_ValueError, "lib_empty(): shape must be a tuple and dtype a fusemath dtype name");
        return NULL;
    }
    long dev = PyLong_AsLong(args[3]);
    if (dev == -1 && PyErr_Occurred())
        return NULL;
    PyObject *aargs = NULL, *akw = NULL;
    if (lib_alloc_args(st, li, args[1], dt, (int)dev, &aargs, &akw) < 0)
        return NULL;
    void *ptr;
    PyObject *arr = lib_alloc(st, li, aargs, akw, (int)dev, NULL, "an array", &ptr);
    Py_DECREF(aargs);
    Py_XDECREF(akw);
    return arr;
}

PyDoc_STRVAR(current_stream_doc,
             "current_stream(lib, device)\n--\n\nThe current stream (int handle) of registered library `lib` on "
             "cuda:device (0 for host libraries).");

static PyObject *mod_current_stream(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = module_state(module);
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "current_stream() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    int li;
    if (lib_index_arg(st, "current_stream", args[0], &li) < 0)
        return NULL;
    long dev = PyLong_AsLong(args[1]);
    if (dev == -1 && PyErr_Occurred())
        return NULL;
    void *h = NULL;
    if (lib_current_stream(st, li, (int)dev, &h) < 0)
        return NULL;
    return PyLong_FromVoidPtr(h);
}

static void lib_clear(fm_lib *lib)
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
}

static int lib_traverse(fm_lib *lib, visitproc visit, void *arg)
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
    return 0;
}

static PyObject *none_to_null(PyObject *o) { return o == Py_None ? NULL : o; }

PyDoc_STRVAR(register_doc,
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

static PyObject *mod_register_array_library(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = module_state(module);
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
        fm_dtype dt = dtype_by_name(k);
        if (dt == FM_DTYPE_INVALID) {
            lib_clear(&fresh);
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
    fm_lib old = st->libs[idx];
    st->libs[idx] = fresh;
    if (idx == st->nlibs)
        st->nlibs++;
    else
        lib_clear(&old);
    return PyLong_FromLong(idx);
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
    char buf[160];
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

/* wisdom_save(path) / wisdom_load(path) / wisdom_size(): autotune results as a file. */
static PyObject *wisdom_io(PyObject *module, PyObject *arg, int save)
{
    fm_state *st = module_state(module);
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    const char *path = PyBytes_AsString(bytes);
    fm_status s = FM_OK;
    if (path) {
        Py_BEGIN_ALLOW_THREADS
        s = save ? fm_context_wisdom_save(st->ctx, path) : fm_context_wisdom_load(st->ctx, path);
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(bytes);
    if (!path)
        return NULL;
    if (s != FM_OK)
        return raise_status(st, s);
    Py_RETURN_NONE;
}

static PyObject *mod_wisdom_save(PyObject *module, PyObject *arg) { return wisdom_io(module, arg, 1); }
static PyObject *mod_wisdom_load(PyObject *module, PyObject *arg) { return wisdom_io(module, arg, 0); }
static PyObject *mod_wisdom_size(PyObject *module, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(fm_context_wisdom_size(module_state(module)->ctx));
}

static PyObject *mod_wisdom_forget(PyObject *module, PyObject *unused)
{
    (void)unused;
    fm_state *st = module_state(module);
    fm_status s = fm_context_wisdom_forget(st->ctx);
    if (s != FM_OK)
        return raise_status(st, s);
    Py_RETURN_NONE;
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

#define FASTCALL(f) (PyCFunction)(void (*)(void))(f)

static PyMethodDef module_methods[] = {
    {"matmul", FASTCALL(mod_matmul), METH_FASTCALL | METH_KEYWORDS, matmul_doc},
    {"plan_matmul", FASTCALL(mod_plan_matmul), METH_FASTCALL | METH_KEYWORDS, plan_matmul_doc},
    {"autotune", FASTCALL(mod_autotune), METH_FASTCALL | METH_KEYWORDS, autotune_doc},
    {"array_matmul", FASTCALL(mod_array_matmul), METH_FASTCALL, array_matmul_doc},
    {"fft_execute", FASTCALL(mod_fft_execute), METH_FASTCALL, fft_execute_doc},
    {"plan_fft", FASTCALL(mod_plan_fft), METH_FASTCALL, plan_fft_doc},
    {"output_shape", FASTCALL(mod_output_shape), METH_FASTCALL, output_shape_doc},
    {"tensor_info", FASTCALL(mod_tensor_info), METH_FASTCALL, tensor_info_doc},
    {"data_ptr", mod_data_ptr, METH_O, data_ptr_doc},
    {"lib_empty", FASTCALL(mod_lib_empty), METH_FASTCALL, lib_empty_doc},
    {"current_stream", FASTCALL(mod_current_stream), METH_FASTCALL, current_stream_doc},
    {"register_array_library", FASTCALL(mod_register_array_library), METH_FASTCALL, register_doc},
    {"make_runner", FASTCALL(mod_make_runner), METH_FASTCALL,
     "make_runner(plan, keep, ptrs, lib, device, outs, scalar)\n--\n\n"
     "Bind a plan to operand addresses (ptrs: 8, slot order); .run(stream, out) allocates the results\n"
     "(outs: ((slot, shape, dtype name, key), ...), D first) with library `lib` and executes."},
    {"epilogue_parse", mod_epilogue_parse, METH_O,
     "epilogue_parse(text)\n--\n\nEpilogue bits for 'relu', 'bias+gelu', 'RELU_AUX_BIAS', 'DGELU_BGRAD', ... "
     "(ValueError if unknown)."},
    {"epilogue_format", mod_epilogue_format, METH_O,
     "epilogue_format(bits)\n--\n\nCanonical name of epilogue bits ('bias+relu', 'identity'); ValueError for an "
     "invalid chain."},
    {"set_num_threads", mod_set_num_threads, METH_O,
     "set_num_threads(n)\n--\n\nCPU threads of the library; n <= 0 restores the default."},
    {"get_num_threads", mod_get_num_threads, METH_NOARGS, "get_num_threads()\n--\n\nCPU threads of the library."},
    {"backends", mod_backends, METH_NOARGS,
     "backends()\n--\n\nList of (name, device, available, why) for the registered backends."},
    {"cuda_device_count", mod_cuda_device_count, METH_NOARGS,
     "cuda_device_count()\n--\n\nNumber of usable CUDA devices (0 without CUDA)."},
    {"clear_cache", mod_clear_cache, METH_NOARGS, "clear_cache()\n--\n\nDrop the context's cached plans."},
    {"wisdom_save", mod_wisdom_save, METH_O, "wisdom_save(path)\n--\n\nWrite the autotune results to path."},
    {"wisdom_load", mod_wisdom_load, METH_O, "wisdom_load(path)\n--\n\nMerge autotune results from path."},
    {"wisdom_size", mod_wisdom_size, METH_NOARGS, "wisdom_size()\n--\n\nNumber of autotune results held."},
    {"wisdom_forget", mod_wisdom_forget, METH_NOARGS,
     "wisdom_forget()\n--\n\nDrop the autotune results and the backends' planning knowledge."},
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
#define X_INTERN(n, text)                                        \
    if (!(st->s[S_##n] = PyUnicode_InternFromString(text)))     \
        return -1;
    INTERNED(X_INTERN)
#undef X_INTERN
    st->empty_tuple = PyTuple_New(0);
    st->kw_max_version = Py_BuildValue("{s(ii)}", "max_version", 1, 0);
    st->kw_cuda_v1 = Py_BuildValue("{s(ii)si}", "max_version", 1, 0, "stream", 1);
    st->kw_cuda_legacy = Py_BuildValue("{si}", "stream", 1);
    if (!st->empty_tuple || !st->kw_max_version || !st->kw_cuda_v1 || !st->kw_cuda_legacy)
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
    if (PyModule_AddStringConstant(m, "__version__", v ? v : "0.0.0") < 0)
        return -1;
    static const struct {
        const char *name;
        long long value;
    } ints[] = {
        {"version_number", 0}, /* filled below */
        {"header_version_number", FM_VERSION_NUMBER},
        {"MAX_NDIM", FM_MAX_NDIM},
        {"EPILOGUE_DEFAULT", FM_EPILOGUE_DEFAULT},
        {"EPILOGUE_BIAS", FM_EPILOGUE_BIAS},
        {"EPILOGUE_RELU", FM_EPILOGUE_RELU},
        {"EPILOGUE_GELU", FM_EPILOGUE_GELU},
        {"EPILOGUE_AUX", FM_EPILOGUE_AUX},
        {"EPILOGUE_SIGMOID", FM_EPILOGUE_SIGMOID},
        {"EPILOGUE_TANH", FM_EPILOGUE_TANH},
        {"EPILOGUE_SILU", FM_EPILOGUE_SILU},
        {"EPILOGUE_CLAMP", FM_EPILOGUE_CLAMP},
        {"EPILOGUE_DRELU", FM_EPILOGUE_DRELU},
        {"EPILOGUE_DGELU", FM_EPILOGUE_DGELU},
        {"EPILOGUE_BGRAD", FM_EPILOGUE_BGRAD},
        {"EPILOGUE_BGRADA", FM_EPILOGUE_BGRADA},
        {"EPILOGUE_BGRADB", FM_EPILOGUE_BGRADB},
        {"EPILOGUE_SCALE", FM_EPILOGUE_SCALE},
        {"EXECUTION_AUTO", FM_EXECUTION_AUTO},
        {"EXECUTION_CPU", FM_EXECUTION_CPU},
        {"EXECUTION_CUDA", FM_EXECUTION_CUDA},
        {"CPU_STRATEGY_AUTO", FM_CPU_STRATEGY_AUTO},
        {"CPU_STRATEGY_TILES", FM_CPU_STRATEGY_TILES},
        {"CPU_STRATEGY_BLAS_THREADS", FM_CPU_STRATEGY_BLAS_THREADS},
        {"COMPUTE_DEFAULT", FM_COMPUTE_DEFAULT},
        {"COMPUTE_TF32", FM_COMPUTE_TF32},
        {"MATMUL_A", FM_MATMUL_A},
        {"MATMUL_B", FM_MATMUL_B},
        {"MATMUL_C", FM_MATMUL_C},
        {"MATMUL_BIAS", FM_MATMUL_BIAS},
        {"MATMUL_D", FM_MATMUL_D},
        {"MATMUL_AUX", FM_MATMUL_AUX},
        {"MATMUL_BGRAD", FM_MATMUL_BGRAD},
        {"MATMUL_SCALE", FM_MATMUL_SCALE},
        {"MATMUL_NSLOTS", FM_MATMUL_NSLOTS},
        {"FFT_IN", FM_FFT_IN},
        {"FFT_OUT", FM_FFT_OUT},
        {"FFT_PROLOG", FM_FFT_PROLOG},
        {"FFT_EPILOG", FM_FFT_EPILOG},
        {"FFT_NSLOTS", FM_FFT_NSLOTS},
        {"FFT_C2C", FM_FFT_C2C},
        {"FFT_R2C", FM_FFT_R2C},
        {"FFT_C2R", FM_FFT_C2R},
        {"FFT_NORM_BACKWARD", FM_FFT_NORM_BACKWARD},
        {"FFT_NORM_ORTHO", FM_FFT_NORM_ORTHO},
        {"FFT_NORM_FORWARD", FM_FFT_NORM_FORWARD},
        {"FFT_EFFORT_ESTIMATE", FM_FFT_EFFORT_ESTIMATE},
        {"FFT_EFFORT_MEASURE", FM_FFT_EFFORT_MEASURE},
        {"FFT_EFFORT_PATIENT", FM_FFT_EFFORT_PATIENT},
        {"FFT_PROLOG_AUTO", FM_FFT_PROLOG_AUTO},
        {"FFT_PROLOG_PASS", FM_FFT_PROLOG_PASS},
        {"FFT_PROLOG_CALLBACK", FM_FFT_PROLOG_CALLBACK},
        {"FFT_OP_SCALE", FM_FFT_OP_SCALE},
        {"FFT_OP_MULTIPLY", FM_FFT_OP_MULTIPLY},
        {"FFT_OP_CONJ", FM_FFT_OP_CONJ},
        {"FFT_OP_CALLBACK", FM_FFT_OP_CALLBACK},
        {"STYLE_NUMPY", STYLE_NUMPY},
        {"STYLE_TORCH", STYLE_TORCH},
        {"STYLE_CUPY", STYLE_CUPY},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (add_int(m, ints[i].name, i == 0 ? (long long)fm_version_number() : ints[i].value) < 0)
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
    for (int i = 0; i < st->nlibs; i++) {
        int r = lib_traverse(&st->libs[i], visit, arg);
        if (r)
            return r;
    }
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
    for (int i = 0; i < S_COUNT; i++)
        Py_CLEAR(st->s[i]);
    Py_CLEAR(st->empty_tuple);
    Py_CLEAR(st->kw_max_version);
    Py_CLEAR(st->kw_cuda_v1);
    Py_CLEAR(st->kw_cuda_legacy);
    for (int i = 0; i < st->nlibs; i++)
        lib_clear(&st->libs[i]);
    st->nlibs = 0;
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
