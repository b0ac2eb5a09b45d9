/* fmpy_dlpack.c : DLPack -> fm_tensor. Capsules (__dlpack__ / __dlpack_device__, versioned 1.x
 * or legacy) for cpu, cuda, cuda_host and cuda_managed arrays; and DLPack's C exchange API: a
 * registered array library whose array type carries __dlpack_c_exchange_api__ (a PyCapsule
 * "dlpack_exchange_api" holding a DLPackExchangeAPI table; PyTorch >= 2.10 has one) has its arrays
 * read, its results allocated and its current stream queried through C function pointers: no
 * attribute reads, method calls or keyword parsing on the hot path (on the H200 machine
 * torch.empty costs 3.5 us, data_ptr()/shape/stride() 0.1-0.15 us each).
 *
 * The exchange functions answer "not handled" (1, or Py_NotImplemented) whenever the table cannot
 * express the case (a dtype outside the table below, complex data whose lazy conj/neg bits DLPack
 * does not carry, another device type, a layout the allocator did not make): the caller then
 * takes the library's Python path, which also produces the error messages.
 * FUSEMATH_DLPACK_C_API=0 in the environment (read once, when the module creates its context) turns the fast
 * path off. The ABI structs are declared in fmpy.h. */
#include "fmpy.h"

/* DLPack dtypes fusemath maps (lanes 1); fp8 and the rest are not taken. */
static const struct {
    fm_dtype dt;
    uint8_t code, bits;
} DL_DTYPES[] = {
    {FM_F16, DL_FLOAT, 16},   {FM_BF16, DL_BFLOAT, 16}, {FM_F32, DL_FLOAT, 32},  {FM_F64, DL_FLOAT, 64},
    {FM_C32, DL_COMPLEX, 32}, {FM_C64, DL_COMPLEX, 64}, {FM_C128, DL_COMPLEX, 128}, {FM_I8, DL_INT, 8},
    {FM_U8, DL_UINT, 8},      {FM_I32, DL_INT, 32},     {FM_I64, DL_INT, 64},    {FM_U32, DL_UINT, 32},
    {FM_I16, DL_INT, 16},     {FM_U16, DL_UINT, 16},    {FM_U64, DL_UINT, 64},   {FM_BOOL, DL_BOOL, 8},
};
#define N_DL_DTYPES (sizeof DL_DTYPES / sizeof DL_DTYPES[0])

fm_dtype fmpy_dl_dtype(int code, int bits)
{
    for (size_t i = 0; i < N_DL_DTYPES; i++)
        if (DL_DTYPES[i].code == code && DL_DTYPES[i].bits == bits)
            return DL_DTYPES[i].dt;
    return FM_DTYPE_INVALID;
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

/* t's shape and strides from DLPack's (strides in elements; NULL: compact row-major); -1, with
 * no exception set, for a negative extent. */
static int dl_dims(fm_tensor *t, int nd, const int64_t *shape, const int64_t *strides)
{
    t->ndim = nd;
    int64_t contiguous = 1;
    for (int i = nd - 1; i >= 0; i--) {
        if (shape[i] < 0)
            return -1;
        t->shape[i] = shape[i];
        t->strides[i] = strides ? strides[i] : contiguous;
        contiguous *= shape[i];
    }
    fmpy_zero_tail(t);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Capsules.                                                                */
/* ------------------------------------------------------------------------ */
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

/* -1 with DeviceError set for a device fusemath does not take, else 0. */
static int refuse_device(fm_state *st, const char *name, long type, long id)
{
    if (type == DL_CPU || type == DL_CUDA_HOST || type == DL_CUDA || type == DL_CUDA_MANAGED)
        return 0;
    PyErr_Format(fmpy_error_class(st, FM_ERR_DEVICE),
                 "argument '%s' lives on DLPack device %s (%ld):%ld; fusemath takes cpu and cuda arrays", name,
                 fmpy_device_name((int32_t)type), type, id);
    return -1;
}

/* __dlpack__() with the keywords this producer knows. */
static PyObject *dlpack_capsule(fm_state *st, PyObject *meth, int cuda)
{
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
    return cap;
}

int fmpy_tensor_from_dlpack(fm_state *st, PyObject *obj, PyObject *meth, const char *name, int writable,
                            fm_tensor *t, fm_hold *h)
{
    long type = 0, id = 0;
    if (dlpack_device(st, obj, name, &type, &id) < 0 || (type && refuse_device(st, name, type, id) < 0))
        return -1;
    PyObject *cap = dlpack_capsule(st, meth, type == DL_CUDA || type == DL_CUDA_MANAGED);
    if (!cap)
        return -1;
    const int v1 = PyCapsule_IsValid(cap, "dltensor_versioned");
    if (!v1 && !PyCapsule_IsValid(cap, "dltensor")) {
        Py_DECREF(cap);
        PyErr_Format(PyExc_TypeError, "argument '%s': __dlpack__() did not return an unused DLPack capsule", name);
        return -1;
    }
    void *m = PyCapsule_GetPointer(cap, v1 ? "dltensor_versioned" : "dltensor");
    const DLManagedTensorVersioned *mv = v1 ? (const DLManagedTensorVersioned *)m : NULL;
    if (mv && mv->version.major != 1) /* left unconsumed: its own destructor frees it */
        PyErr_Format(PyExc_TypeError, "argument '%s': unsupported DLPack version %u.%u", name,
                     (unsigned)mv->version.major, (unsigned)mv->version.minor);
    else if (m && PyCapsule_SetName(cap, v1 ? "used_dltensor_versioned" : "used_dltensor") == 0) {
        h->kind = v1 ? HOLD_DLPACK_V1 : HOLD_DLPACK; /* from here on the hold owns it */
        h->capsule = cap;
        h->managed = m;
    }
    if (!h->capsule) {
        Py_DECREF(cap);
        return -1;
    }
    if (mv && writable && (mv->flags & DLPACK_FLAG_READ_ONLY)) {
        PyErr_Format(PyExc_ValueError, "argument '%s' is read-only; an output must be writable", name);
        return -1;
    }
    if (mv && writable && (mv->flags & DLPACK_FLAG_IS_COPIED)) {
        PyErr_Format(PyExc_ValueError,
                     "argument '%s': its producer exported a copy; an output must be the array's own memory",
                     name);
        return -1;
    }
    const DLTensor *dl = mv ? &mv->dl_tensor : &((const DLManagedTensor *)m)->dl_tensor;
    if (refuse_device(st, name, dl->device.device_type, dl->device.device_id) < 0)
        return -1;
    t->dtype = dl->dtype.lanes == 1 ? fmpy_dl_dtype(dl->dtype.code, dl->dtype.bits) : FM_DTYPE_INVALID;
    if (t->dtype == FM_DTYPE_INVALID) {
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
    if (dl_dims(t, dl->ndim, dl->shape, dl->strides) < 0) {
        PyErr_Format(PyExc_ValueError, "argument '%s': negative extent in DLPack shape", name);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The C exchange API.                                                      */
/* ------------------------------------------------------------------------ */
void fmpy_xapi_attach(fm_lib *lib, int enabled)
{
    static const char capsule_name[] = "dlpack_exchange_api";
    lib->xapi = NULL;
    lib->xapi_capsule = NULL;
    if (!lib->type || !enabled)
        return;
    PyObject *cap = PyObject_GetAttrString(lib->type, "__dlpack_c_exchange_api__");
    if (!cap) {
        PyErr_Clear();
        return;
    }
    const DLPackExchangeAPI *api = PyCapsule_IsValid(cap, capsule_name)
                                       ? (const DLPackExchangeAPI *)PyCapsule_GetPointer(cap, capsule_name)
                                       : NULL;
    /* major 1 fixes the table's layout; every function used here must be present */
    if (!api || api->header.version.major != 1 || !api->managed_tensor_allocator ||
        !api->managed_tensor_to_py_object_no_sync || !api->dltensor_from_py_object_no_sync ||
        !api->current_work_stream) {
        PyErr_Clear();
        Py_DECREF(cap);
        return;
    }
    lib->xapi = api;
    lib->xapi_capsule = cap;
}

int fmpy_xapi_tensor(const fm_lib *lib, PyObject *obj, fm_tensor *t)
{
    DLTensor dl;
    if (lib->xapi->dltensor_from_py_object_no_sync(obj, &dl) != 0) {
        PyErr_Clear(); /* the Python path explains (or copes) */
        return 1;
    }
    fm_dtype dt = dl.dtype.lanes == 1 ? fmpy_dl_dtype(dl.dtype.code, dl.dtype.bits) : FM_DTYPE_INVALID;
    /* complex: a lazily conjugated or negated view is not its memory, and the DLTensor
     * does not say so; the Python path checks those bits */
    if (dt == FM_DTYPE_INVALID || !lib->dtypes[dt] || fm_dtype_is_complex(dt) || dl.ndim < 0 ||
        dl.ndim > FM_MAX_NDIM || (dl.device.device_type != DL_CUDA && dl.device.device_type != DL_CPU))
        return 1;
    t->device.type = dl.device.device_type == DL_CUDA ? FM_DEVICE_CUDA : FM_DEVICE_CPU;
    t->device.id = dl.device.device_type == DL_CUDA ? dl.device.device_id : 0;
    t->data = dl.data ? (char *)dl.data + dl.byte_offset : NULL;
    t->dtype = dt;
    return dl_dims(t, dl.ndim, dl.shape, dl.strides) < 0 ? 1 : 0;
}

/* The allocator's error report is not used: a failure takes the Python path (below). */
static void ignore_error(void *ctx, const char *kind, const char *message) {}

/* d is what was asked for (proto's ndim, shape, dtype, device), compact row-major */
static int is_as_asked(const DLTensor *d, const DLTensor *proto)
{
    if (d->ndim != proto->ndim || d->dtype.code != proto->dtype.code || d->dtype.bits != proto->dtype.bits ||
        d->dtype.lanes != proto->dtype.lanes || d->device.device_type != proto->device.device_type ||
        d->device.device_id != proto->device.device_id)
        return 0;
    int64_t want = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] != proto->shape[i] || (d->strides && d->shape[i] != 1 && d->strides[i] != want))
            return 0;
        want *= d->shape[i];
    }
    return 1;
}

PyObject *fmpy_xapi_alloc(const fm_lib *lib, const int64_t *shape, int nd, fm_dtype dt, int dev, void **ptr)
{
    DLTensor proto;
    memset(&proto, 0, sizeof proto);
    size_t k = 0;
    while (k < N_DL_DTYPES && DL_DTYPES[k].dt != dt)
        k++;
    if (nd < 0 || nd > FM_MAX_NDIM || k == N_DL_DTYPES)
        return Py_NewRef(Py_NotImplemented);
    int64_t ext[FM_MAX_NDIM];
    for (int i = 0; i < nd; i++)
        ext[i] = shape[i];
    proto.dtype.code = DL_DTYPES[k].code;
    proto.dtype.bits = DL_DTYPES[k].bits;
    proto.dtype.lanes = 1;
    proto.device.device_type = dev >= 0 ? DL_CUDA : DL_CPU;
    proto.device.device_id = dev >= 0 ? dev : 0;
    proto.ndim = (int32_t)nd;
    proto.shape = ext;
    DLManagedTensorVersioned *mt = NULL;
    if (lib->xapi->managed_tensor_allocator(&proto, &mt, NULL, ignore_error) != 0 || !mt) {
        /* Take the Python path: it raises the library's own exception, which fmpy_lib_alloc
         * maps to OutOfMemoryError only when it is the library's out-of-memory error. The
         * table cannot tell: PyTorch reports every failure (a bad device, a sticky CUDA
         * error) as kind "MemoryError", with e.what() (C++ backtrace included) as text. */
        PyErr_Clear(); /* mt: NULL on failure (dlpack.h), nothing to give back */
        return Py_NewRef(Py_NotImplemented);
    }
    if (!is_as_asked(&mt->dl_tensor, &proto)) {
        if (mt->deleter) /* not the layout asked for: give it back, take the Python path */
            mt->deleter(mt);
        return Py_NewRef(Py_NotImplemented);
    }
    void *data = mt->dl_tensor.data ? (char *)mt->dl_tensor.data + mt->dl_tensor.byte_offset : NULL;
    void *obj = NULL;
    if (lib->xapi->managed_tensor_to_py_object_no_sync(mt, &obj) != 0 || !obj) {
        if (!PyErr_Occurred()) /* mt belonged to the call either way */
            PyErr_SetString(PyExc_SystemError, "fusemath: managed_tensor_to_py_object_no_sync gave no object");
        return NULL;
    }
    *ptr = data;
    return (PyObject *)obj;
}
