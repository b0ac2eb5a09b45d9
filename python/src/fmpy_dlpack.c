/* fmpy_dlpack.c : DLPack capsules (__dlpack__ / __dlpack_device__, versioned 1.x or
 * legacy) -> fm_tensor, for cpu, cuda, cuda_host and cuda_managed arrays. The ABI
 * structs are declared in fmpy.h. */
#include "fmpy.h"

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

const char *fmpy_device_name(int32_t type)
{
    switch (type) {
    case DL_CPU: return "cpu";
    case DL_CUDA: return "cuda";
    case DL_CUDA_HOST: return "cuda_host";
    case DL_CUDA_MANAGED: return "cuda_managed";
    default: return "unknown";
    }
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

int fmpy_tensor_from_dlpack(fm_state *st, PyObject *obj, PyObject *meth, const char *name, int writable,
                            fm_tensor *t, fm_hold *h)
{
    long dtype_ = 0, did = 0;
    if (dlpack_device(st, obj, name, &dtype_, &did) < 0)
        return -1;
    if (dtype_ && !dl_device_ok(dtype_)) {
        PyErr_Format(fmpy_error_class(st, FM_ERR_DEVICE),
                     "argument '%s' lives on DLPack device %s (%ld):%ld; fusemath takes cpu and cuda arrays", name,
                     fmpy_device_name((int32_t)dtype_), dtype_, did);
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
        PyErr_Format(fmpy_error_class(st, FM_ERR_DEVICE),
                     "argument '%s' lives on DLPack device %s (%d):%d; fusemath takes cpu and cuda arrays", name,
                     fmpy_device_name(dl->device.device_type), (int)dl->device.device_type, (int)dl->device.device_id);
        return -1;
    }
    fm_dtype dt = dlpack_dtype(dl->dtype);
    if (dt == FM_DTYPE_INVALID) {
        PyErr_Format(PyExc_TypeError, "argument '%s': unsupported DLPack dtype (code %d, bits %d, lanes %d)", name,
                     (int)dl->dtype.code, (int)dl->dtype.bits, (int)dl->dtype.lanes);
        return -1;
    }
    if (dl->ndim < 0 || dl->ndim > FM_MAX_NDIM)
        return fmpy_too_many_dims(name, dl->ndim);
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
    fmpy_zero_tail(t);
    return 0;
}
