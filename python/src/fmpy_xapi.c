/* fmpy_xapi.c : DLPack's C exchange API. A registered array library whose array type
 * carries __dlpack_c_exchange_api__ (a PyCapsule "dlpack_exchange_api" holding a
 * DLPackExchangeAPI table; PyTorch >= 2.10 has one) has its arrays read, its results
 * allocated and its current stream queried through C function pointers: no attribute
 * reads, method calls or keyword parsing on the hot path (on the H200 machine
 * torch.empty costs 3.5 us, data_ptr()/shape/stride() 0.1-0.15 us each).
 *
 * Each function answers 1 ("not handled") whenever the table cannot express the case
 * (a dtype outside the table below, complex data whose lazy conj/neg bits DLPack does not
 * carry, another device type, a layout the allocator did not make): the caller then takes
 * the library's Python path, which also produces the error messages. FUSEMATH_DLPACK_C_API=0
 * in the environment (read when a library is registered) turns the fast path off. */
#include "fmpy.h"

static const char CAPSULE_NAME[] = "dlpack_exchange_api";

/* DLPack dtypes fusemath maps directly (lanes 1); fp8 and the rest take the slow path. */
static const struct {
    fm_dtype dt;
    uint8_t code, bits;
} DL_DTYPES[] = {
    {FM_F16, DL_FLOAT, 16},   {FM_BF16, DL_BFLOAT, 16}, {FM_F32, DL_FLOAT, 32},  {FM_F64, DL_FLOAT, 64},
    {FM_C32, DL_COMPLEX, 32}, {FM_C64, DL_COMPLEX, 64}, {FM_C128, DL_COMPLEX, 128}, {FM_I8, DL_INT, 8},
    {FM_U8, DL_UINT, 8},      {FM_I32, DL_INT, 32},     {FM_I64, DL_INT, 64},    {FM_U32, DL_UINT, 32},
};
#define N_DL_DTYPES (sizeof DL_DTYPES / sizeof DL_DTYPES[0])

static fm_dtype from_dl(DLDataType d)
{
    if (d.lanes != 1)
        return FM_DTYPE_INVALID;
    for (size_t i = 0; i < N_DL_DTYPES; i++)
        if (DL_DTYPES[i].code == d.code && DL_DTYPES[i].bits == d.bits)
            return DL_DTYPES[i].dt;
    return FM_DTYPE_INVALID;
}

static int to_dl(fm_dtype dt, DLDataType *d)
{
    for (size_t i = 0; i < N_DL_DTYPES; i++)
        if (DL_DTYPES[i].dt == dt) {
            d->code = DL_DTYPES[i].code;
            d->bits = DL_DTYPES[i].bits;
            d->lanes = 1;
            return 0;
        }
    return -1;
}

void fmpy_xapi_attach(fm_lib *lib)
{
    lib->xapi = NULL;
    lib->xapi_capsule = NULL;
    const char *env = getenv("FUSEMATH_DLPACK_C_API");
    if (!lib->type || (env && strcmp(env, "0") == 0))
        return;
    PyObject *cap = PyObject_GetAttrString(lib->type, "__dlpack_c_exchange_api__");
    if (!cap) {
        PyErr_Clear();
        return;
    }
    const DLPackExchangeAPI *api =
        PyCapsule_IsValid(cap, CAPSULE_NAME) ? (const DLPackExchangeAPI *)PyCapsule_GetPointer(cap, CAPSULE_NAME) : NULL;
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
    fm_dtype dt = from_dl(dl.dtype);
    /* complex: a lazily conjugated or negated view is not its memory, and the DLTensor
     * does not say so; the Python path checks those bits */
    if (dt == FM_DTYPE_INVALID || !lib->dtypes[dt] || fm_dtype_is_complex(dt) || dl.ndim < 0 ||
        dl.ndim > FM_MAX_NDIM)
        return 1;
    if (dl.device.device_type == DL_CUDA) {
        t->device.type = FM_DEVICE_CUDA;
        t->device.id = dl.device.device_id;
    } else if (dl.device.device_type == DL_CPU) {
        t->device.type = FM_DEVICE_CPU;
        t->device.id = 0;
    } else {
        return 1;
    }
    t->data = dl.data ? (char *)dl.data + dl.byte_offset : NULL;
    t->dtype = dt;
    t->ndim = dl.ndim;
    int64_t contiguous = 1;
    for (int i = dl.ndim - 1; i >= 0; i--) {
        t->shape[i] = dl.shape[i];
        t->strides[i] = dl.strides ? dl.strides[i] : contiguous; /* NULL: compact row-major */
        contiguous *= dl.shape[i];
    }
    fmpy_zero_tail(t);
    return 0;
}

int fmpy_xapi_current_stream(const fm_lib *lib, int dev, void **h)
{
    *h = NULL;
    return lib->xapi->current_work_stream(DL_CUDA, dev, h) == 0 ? 0 : -1; /* Python error set */
}

/* The allocator's error report is not used: a failure takes the Python path (below). */
static void ignore_error(void *ctx, const char *kind, const char *message)
{
    (void)ctx, (void)kind, (void)message;
}

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
    if (nd < 0 || nd > FM_MAX_NDIM || to_dl(dt, &proto.dtype) < 0)
        return Py_NewRef(Py_NotImplemented);
    int64_t ext[FM_MAX_NDIM];
    for (int i = 0; i < nd; i++)
        ext[i] = shape[i];
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
