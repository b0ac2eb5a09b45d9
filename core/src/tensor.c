/* tensor.c : dtypes and tensor descriptors. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *word; /* word: as NumPy / PyTorch spell it */
    size_t size;
    int complex;
} dtype_info[FM_DTYPE_COUNT_] = {
    [FM_DTYPE_INVALID] = {"invalid", "invalid", 0, 0},   [FM_F16] = {"f16", "float16", 2, 0},
    [FM_BF16] = {"bf16", "bfloat16", 2, 0},              [FM_F32] = {"f32", "float32", 4, 0},
    [FM_F64] = {"f64", "float64", 8, 0},                 [FM_C64] = {"c64", "complex64", 8, 1},
    [FM_C128] = {"c128", "complex128", 16, 1},           [FM_I8] = {"i8", "int8", 1, 0},
    [FM_U8] = {"u8", "uint8", 1, 0},                     [FM_I32] = {"i32", "int32", 4, 0},
    [FM_I64] = {"i64", "int64", 8, 0},                   [FM_U32] = {"u32", "uint32", 4, 0},
    [FM_F8E4M3] = {"f8e4m3", "float8_e4m3fn", 1, 0},     [FM_F8E5M2] = {"f8e5m2", "float8_e5m2", 1, 0},
    [FM_C32] = {"c32", "complex32", 4, 1},               [FM_I16] = {"i16", "int16", 2, 0},
    [FM_U16] = {"u16", "uint16", 2, 0},                  [FM_U64] = {"u64", "uint64", 8, 0},
    [FM_BOOL] = {"bool", "bool", 1, 0},                  [FM_LD] = {"ld", "longdouble", sizeof(long double), 0},
    [FM_CLD] = {"cld", "clongdouble", 2 * sizeof(long double), 1},
};

static int dtype_valid(fm_dtype t) { return (int)t > FM_DTYPE_INVALID && (int)t < FM_DTYPE_COUNT_; }

size_t fm_dtype_size(fm_dtype t) { return dtype_valid(t) ? dtype_info[t].size : 0; }

const char *fm_dtype_name(fm_dtype t) { return dtype_valid(t) ? dtype_info[t].name : "invalid"; }

const char *fm_dtype_word(fm_dtype t) { return dtype_valid(t) ? dtype_info[t].word : "invalid"; }

int fm_dtype_is_complex(fm_dtype t) { return dtype_valid(t) ? dtype_info[t].complex : 0; }

int fm_dtype_is_integer(fm_dtype t)
{
    return t == FM_I8 || t == FM_U8 || t == FM_I16 || t == FM_U16 || t == FM_I32 || t == FM_U32 ||
           t == FM_I64 || t == FM_U64 || t == FM_BOOL;
}

fm_status fm_tensor_init(fm_tensor *t, void *data, fm_device device, fm_dtype dtype, int ndim,
                         const int64_t *shape, const int64_t *strides)
{
    if (!t)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_tensor_init: tensor is NULL");
    /* shape / strides may be t's own arrays (re-initialising a descriptor in place) */
    int64_t own_shape[FM_MAX_NDIM], own_strides[FM_MAX_NDIM];
    if (ndim > 0 && ndim <= FM_MAX_NDIM && shape == t->shape) {
        memcpy(own_shape, shape, sizeof(int64_t) * (size_t)ndim);
        shape = own_shape;
    }
    if (ndim > 0 && ndim <= FM_MAX_NDIM && strides == t->strides) {
        memcpy(own_strides, strides, sizeof(int64_t) * (size_t)ndim);
        strides = own_strides;
    }
    memset(t, 0, sizeof *t);
    if (ndim < 0 || ndim > FM_MAX_NDIM)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_tensor_init: ndim = %d, expected 0 <= ndim <= %d", ndim,
                       FM_MAX_NDIM);
    if (!dtype_valid(dtype))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_tensor_init: dtype = %d is not a valid fm_dtype", (int)dtype);
    if (ndim > 0 && !shape)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_tensor_init: shape is NULL with ndim = %d", ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_tensor_init: shape[%d] = %lld, expected >= 0", i,
                           (long long)shape[i]);
    t->data = data;
    t->device = device;
    t->dtype = dtype;
    t->ndim = ndim;
    /* the extents' product (zeros counted as 1, so where a zero sits does not matter) must fit an
     * int64, with explicit strides too: zero strides make a huge shape cheap to describe */
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t->shape[i] = shape[i];
        t->strides[i] = strides ? strides[i] : stride;
        if (__builtin_mul_overflow(stride, shape[i] > 0 ? shape[i] : 1, &stride)) {
            memset(t, 0, sizeof *t);
            return fm_fail(FM_ERR_TOO_LARGE, "fm_tensor_init: the shape has more elements than a 64-bit count holds "
                           "(at axis %d)", i);
        }
    }
    return FM_OK;
}

int64_t fm_tensor_numel(const fm_tensor *t)
{
    if (!t)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0)
            return 0;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(n, t->shape[i], &n))
            return INT64_MAX; /* saturates: never reads as empty */
    return n;
}

fm_status fm_tensor_check_range(const char *op, const char *name, const fm_tensor *t)
{
    const int64_t es = (int64_t)fm_dtype_size(t->dtype);
    if (es == 0)
        return fm_fail(FM_ERR_DTYPE, "%s: %s has an invalid dtype (%d)", op, name, (int)t->dtype);
    int64_t n = 1, span = 0, bytes;
    int empty = 0;
    for (int i = 0; i < t->ndim; i++)
        empty |= t->shape[i] == 0;
    /* the strides are checked on an empty tensor too: batch offsets are computed from them */
    for (int i = 0; i < t->ndim; i++) {
        int64_t ext;
        const int64_t st = t->strides[i];
        if (t->shape[i] == 0)
            continue;
        if ((!empty && __builtin_mul_overflow(n, t->shape[i], &n)) || st == INT64_MIN ||
            __builtin_mul_overflow(st < 0 ? -st : st, t->shape[i] - 1, &ext) || __builtin_add_overflow(span, ext, &span))
            return fm_fail(FM_ERR_TOO_LARGE, "%s: %s spans more than a 64-bit offset holds (axis %d: extent %lld, "
                           "stride %lld)", op, name, i, (long long)t->shape[i], (long long)st);
    }
    if ((!empty && __builtin_mul_overflow(n, es, &bytes)) || __builtin_add_overflow(span, 1, &span) ||
        __builtin_mul_overflow(span, es, &bytes))
        return fm_fail(FM_ERR_TOO_LARGE, "%s: %s spans more bytes than a 64-bit offset holds", op, name);
    return FM_OK;
}

void fm_tensor_byte_span(const fm_tensor *t, int64_t *lo, int64_t *hi)
{
    int64_t a = 0, b = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) {
            *lo = *hi = 0;
            return;
        }
        int64_t ext = (t->shape[i] - 1) * t->strides[i];
        if (ext < 0)
            a += ext;
        else
            b += ext;
    }
    int64_t es = (int64_t)fm_dtype_size(t->dtype);
    *lo = a * es;
    *hi = (b + 1) * es;
}

/* An output whose elements share memory (a zero stride, or strides that interleave) would be
 * written twice: sort axes by |stride| and require each stride to step past everything the
 * smaller axes span. The caller checked fm_tensor_check_range: no stride arithmetic overflows. */
fm_status fm_tensor_check_distinct(fm_op op, int slot, const fm_tensor *t)
{
    int idx[FM_MAX_NDIM], n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0)
            return FM_OK;
        if (t->shape[i] > 1)
            idx[n++] = i;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && llabs(t->strides[idx[j]]) < llabs(t->strides[idx[j - 1]]); j--) {
            int tmp = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = tmp;
        }
    int64_t span = 0; /* elements covered by the smaller axes, minus one */
    for (int i = 0; i < n; i++) {
        int64_t st = llabs(t->strides[idx[i]]);
        if (st <= span) {
            fm_status s = fm_fail(FM_ERR_ALIAS, "%s: output %s overlaps itself (axis %d has stride %lld); outputs need "
                                  "distinct memory for every element", fm_op_name(op), fm_op_slot_name(op, slot), idx[i],
                                  (long long)t->strides[idx[i]]);
            fm_fail_slots(slot, slot);
            return s;
        }
        span += st * (t->shape[idx[i]] - 1);
    }
    return FM_OK;
}

/* The device t computes on: FM_DEVICE_AUTO resolved from the pointer by the device ops,
 * pinned host memory as cpu, managed memory as cuda. */
fm_status fm_tensor_resolve_device(const char *op, const char *name, const fm_tensor *t, fm_device *dev)
{
    fm_device d = t->device;
    if (d.type == FM_DEVICE_AUTO) {
        d.type = FM_DEVICE_CPU;
        d.id = 0;
        const fm_device_ops *ops;
        for (int i = 0; (ops = fm_device_ops_at(i)); i++) {
            fm_device got;
            if (ops->classify && ops->classify(t->data, &got) == FM_OK) {
                d = got;
                break;
            }
        }
    }
    if (d.type == FM_DEVICE_CUDA_HOST)
        d.type = FM_DEVICE_CPU; /* pinned host memory is host memory */
    if (d.type == FM_DEVICE_CPU)
        d.id = 0;
    if (d.type == FM_DEVICE_CUDA_MANAGED)
        d.type = FM_DEVICE_CUDA;
    if (d.type != FM_DEVICE_CPU && d.type != FM_DEVICE_CUDA)
        return fm_fail(FM_ERR_DEVICE, "%s: %s has device type %d, expected cpu (1) or cuda (2)", op, name, d.type);
    *dev = d;
    return FM_OK;
}

unsigned fm_align_log2_of(const void *p)
{
    uintptr_t v = (uintptr_t)p;
    unsigned l = 0;
    if (!v)
        return 8;
    while (l < 8 && !(v & ((uintptr_t)1 << l)))
        l++;
    return l;
}

void fm_problem_key_alignment(fm_problem *p)
{
    /* CPU backends ignore pointer alignment; keeping it out of the key stops fresh buffers
     * from making one cached plan per alignment class. GPU code gains nothing past 16 bytes. */
    if (p->exec_device.type == FM_DEVICE_CPU)
        memset(p->align_log2, 0, sizeof p->align_log2);
    else
        for (int i = 0; i < FM_MAX_SLOTS; i++)
            p->align_log2[i] = p->align_log2[i] > 4 ? 4 : p->align_log2[i];
}
