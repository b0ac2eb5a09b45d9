/* fmpy_runner.c : the Runner type behind Matmul.execute() (a plan bound to its
 * operands, run in one C call) and make_runner, which creates one. */
#include "fmpy.h"

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
    const void *out_id;    /* identity of the last out= that passed validation (compared, never
                            * dereferenced: no reference is held, so the caller's array is not kept
                            * alive), and its address */
    void *out_ptr;
    /* NumPy out=: its buffer's element format when it passed (a NumPy array can be reshaped,
     * retyped or resized in place: shape, strides and format are compared on every call) */
    char out_format[8];
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

/* Whether a torch out= validated before is still the array it was: read through the DLPack
 * exchange table (one C call, cheaper than data_ptr()), the planned dtype, device and shape,
 * C-contiguous; it may have been re-pointed (the address is returned). torch can change a
 * tensor's shape and strides in place at the same address (t_(), resize_(), as_strided_()), so
 * the address alone does not say it is the same array. A failed check leaves no exception: the
 * full validation then says what changed. Libraries without the table (CuPy)
 * are validated in full on every call. 0 for changed or unreadable. */
static int xapi_out_same(fm_state *st, const RunnerObject *r, const fm_lib *lib, PyObject *out, void **p)
{
    fm_tensor t;
    /* the library's own type exactly: out_id may name a new object of another type by now */
    if (!lib->xapi || (PyObject *)Py_TYPE(out) != lib->type || fmpy_xapi_tensor(lib, out, &t) != 0 ||
        t.dtype != r->outs[0].dtype || t.ndim != r->rndim)
        return 0;
    /* `out.data = ...` can swap in a view with the negative bit set; the table does not say */
    if (lib->style == STYLE_TORCH && fmpy_torch_lazy_bits(st, out, "out", 0) != 0)
        return 0;
    if (r->device >= 0 ? !(t.device.type == FM_DEVICE_CUDA && t.device.id == r->device)
                       : t.device.type != FM_DEVICE_CPU)
        return 0;
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; i--) {
        if (t.shape[i] != r->rshape[i] || (t.shape[i] > 1 && t.strides[i] != expect))
            return 0;
        expect *= t.shape[i];
    }
    *p = t.data;
    return 1;
}

/* Whether a NumPy out= validated before is still the array it was: address, format, the planned
 * shape, C-contiguous (which fixes its size). With record != 0 it is taken as the new reference
 * instead (after a validation). 0 for changed or unreadable (no exception left set). */
static int numpy_out_same(RunnerObject *r, PyObject *out, void **p, int record)
{
    Py_buffer v;
    if (PyObject_GetBuffer(out, &v, PyBUF_RECORDS) < 0) {
        PyErr_Clear();
        if (record)
            r->out_format[0] = 0; /* nothing recorded: every later call validates in full */
        return 0;
    }
    const char *fmt = v.format ? v.format : "B";
    int same = 1;
    if (record) {
        if (strlen(fmt) < sizeof r->out_format)
            strcpy(r->out_format, fmt);
        else
            r->out_format[0] = 0; /* a long format: validated every call */
    } else {
        same = v.buf == r->out_ptr && v.ndim == r->rndim && r->out_format[0] && strcmp(fmt, r->out_format) == 0;
        Py_ssize_t expect = v.itemsize;
        for (int i = v.ndim - 1; same && i >= 0; i--) {
            same = v.shape[i] == r->rshape[i] && (v.shape[i] <= 1 || v.strides[i] == expect);
            expect *= v.shape[i];
        }
    }
    *p = v.buf;
    PyBuffer_Release(&v);
    return same;
}

/* What fusemath.matmul(out=) refuses in Python, refused with the same classes and words here
 * (the generic buffer reader would say "argument 'out'" with builtin exception types, and a
 * misaligned out would be named by its C slot, d, at execute). 0 when none applies. */
static int numpy_out_precheck(fm_state *st, const RunnerObject *r, PyObject *out, const char *where)
{
    Py_buffer v;
    if (PyObject_GetBuffer(out, &v, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear(); /* not a buffer: the full check says what it is */
        return 0;
    }
    const char *fmt = v.format ? v.format : "B";
    const char *f = fmt[0] && strchr("@=<", fmt[0]) ? fmt + 1 : fmt; /* little-endian hosts only */
    /* numeric element codes NumPy writes: reals, and complex as "Z" + the component's */
    const int complex_ = f[0] == 'Z' && f[1] && strchr("efdg", f[1]) && !f[2];
    const int numeric = complex_ || (f[0] && strchr("efdgbBhHiIlLqQ", f[0]) && !f[1]);
    const Py_ssize_t align = complex_ ? v.itemsize / 2 : v.itemsize;
    int rc = -1;
    if (v.readonly)
        PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT), "%sout is read-only", where);
    else if (fmt[0] == '>' || fmt[0] == '!')
        PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT),
                     "%sout is in big-endian byte order; the result is written in the machine's (pass a "
                     "native array)", where);
    else if (f[0] == '?' || (!numeric && f[0]))
        PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT), "%sout has element format '%s', expected %s",
                     where, fmt, fm_dtype_name(r->outs[0].dtype));
    else if (numeric && align > 0 && (uintptr_t)v.buf % (uintptr_t)align != 0)
        PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT),
                     "%sout at %p is not aligned to %zd bytes (the result is written as whole elements); pass "
                     "an aligned array (NumPy allocates aligned ones)", where, v.buf, align);
    else
        rc = 0;
    PyBuffer_Release(&v);
    return rc;
}

/* Validate a caller-given result array: the planned library, device, dtype, shape and
 * a C-contiguous layout (the plan was made for one). Cached per object, and checked again on
 * every call (NumPy: the buffer's size, format, shape and strides; torch through the exchange
 * table: dtype, device, shape and strides); otherwise validated in full. */
static int runner_check_out(fm_state *st, RunnerObject *r, PyObject *out, void **ptr)
{
    const fm_lib *lib = &st->libs[r->lib];
    /* the same object as last time (or a new one at its address: every check below reads `out`
     * itself, which the caller holds) */
    if (out == (const PyObject *)r->out_id) {
        void *p = NULL;
        const int same = lib->style == STYLE_NUMPY ? numpy_out_same(r, out, &p, 0) : xapi_out_same(st, r, lib, out, &p);
        if (same) {
            *ptr = p;
            return 0;
        }
        PyErr_Clear(); /* validate again: it says what changed */
    }
    const char *where = "Matmul.execute(): ";
    if (lib->style == STYLE_NUMPY && numpy_out_precheck(st, r, out, where) < 0)
        return -1;
    fm_tensor t;
    fm_hold h;
    int li = -1;
    if (fmpy_tensor_from_any(st, out, "out", 1, &t, &h, &li) < 0)
        return -1;
    int rc = -1;
    int lib_ok = lib->style == STYLE_NUMPY ? (h.kind == HOLD_BUFFER) : (li == r->lib);
    char want_dev[32], got_dev[32];
    fmpy_device_text(r->device, want_dev, sizeof want_dev);
    fmpy_device_text(t.device.type == FM_DEVICE_CUDA ? t.device.id : -1, got_dev, sizeof got_dev);
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
        PyObject *tn = fmpy_type_name(out);
        if (tn)
            PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT), "%sout must be an array of the result's library (%U), not %U",
                         where, lib->name, tn);
        Py_XDECREF(tn);
    } else if (!dev_ok) {
        PyErr_Format(fmpy_error_class(st, FM_ERR_DEVICE), "%sout is on %s but the result lives on %s", where, got_dev,
                     want_dev);
    } else if (t.dtype != r->outs[0].dtype) {
        PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT), "%sout has dtype %s, expected %s (the dtype of a and b)",
                     where, fm_dtype_name(t.dtype), fm_dtype_name(r->outs[0].dtype));
    } else if (!shape_ok) {
        char got[160], want[160];
        fmpy_shape_text(t.shape, t.ndim, got, sizeof got);
        fmpy_shape_text(r->rshape, r->rndim, want, sizeof want);
        PyErr_Format(fmpy_error_class(st, FM_ERR_SHAPE), "%sout has shape %s, expected %s", where, got, want);
    } else if (!contiguous) {
        PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT),
                     "%sout must be C-contiguous (the plan was made for a contiguous result); use "
                     "fusemath.matmul(..., out=) for other layouts",
                     where);
    } else {
        rc = 0;
    }
    fmpy_hold_release(&h);
    if (rc == 0) {
        void *p = NULL;
        if (lib->style == STYLE_NUMPY)
            (void)numpy_out_same(r, out, &p, 1);
        r->out_id = out;
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
    fm_state *st = fmpy_plan_state(r->plan);
    if (!st || r->lib >= st->nlibs) { /* the module was cleared (interpreter shutdown) */
        PyErr_SetString(PyExc_RuntimeError, "Matmul.execute(): the fusemath module was torn down");
        return NULL;
    }
    void *ptrs[FM_MATMUL_NSLOTS];
    memcpy(ptrs, r->ptrs, sizeof ptrs);

    void *stream = NULL;
    PyObject *override = NULL;
    if (stream_arg == Py_None) {
        if (r->gpu && fmpy_lib_current_stream(st, r->lib, r->device, &stream) < 0)
            return NULL;
    } else {
        if (stream_arg == r->stream_obj) {
            stream = r->stream_handle;
        } else {
            if (fmpy_stream_from_object(st, "Matmul.execute(): ", stream_arg, &stream) < 0)
                return NULL;
            set_ref(&r->stream_obj, stream_arg);
            r->stream_handle = stream;
        }
        if (r->gpu && (out == Py_None || r->nout > 1)) {
            void *cur = NULL;
            if (fmpy_lib_current_stream(st, r->lib, r->device, &cur) < 0)
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
        res[i] = fmpy_lib_alloc(st, r->lib, o->args, o->kwargs, r->device, override, fmpy_slot_names[o->slot], &ptrs[o->slot]);
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
        fm_clear_error();
        s = fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, stream);
        Py_END_ALLOW_THREADS
        fm_plan_release(p);
    }
    Py_XDECREF(keep);
    if (!p || s != FM_OK) {
        int other, slot = fm_last_error_slots(&other);
        if (p && s == FM_ERR_ALIAS && out != Py_None) /* said from the caller's side, as fusemath.matmul does */
            PyErr_Format(fmpy_error_class(st, FM_ERR_ALIAS), "Matmul.execute(): out %s (%s)",
                         slot >= 0 && slot == other ? "overlaps itself" : "overlaps an input", fm_last_error());
        else if (p)
            fmpy_raise_status(fmpy_plan_state(plan), s);
        else
            fmpy_plan_freed_error(plan, "execute()");
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

PyObject *fmpy_mod_make_runner(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    /* make_runner(plan, keep, ptrs, lib, device, outs, scalar)
     *   ptrs: 8 addresses (int or None) in slot order, outputs None
     *   outs: ((slot, shape, dtype name, key or None), ...), D first */
    fm_state *st = fmpy_module_state(module);
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
    if (fmpy_lib_index_arg(st, "make_runner", args[3], &li) < 0)
        return NULL;
    long dev = PyLong_AsLong(args[4]);
    if (dev == -1 && PyErr_Occurred())
        return NULL;
    void *p[FM_MATMUL_NSLOTS] = {0};
    for (int i = 0; i < nptr; i++)
        if (fmpy_ptr_arg("make_runner(): ", fmpy_slot_names[i], PyTuple_GetItem(ptrs, i), &p[i]) < 0)
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
        fm_dtype dt = fmpy_dtype_by_name(PyTuple_GetItem(spec, 2));
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
        if (fmpy_lib_alloc_args(st, li, shape, dt, (int)dev, &o->args, &o->kwargs) < 0)
            goto fail;
        if (i > 0)
            o->key = Py_NewRef(key);
        if (i == 0) {
            fm_tensor t;
            if (fmpy_dims_from_tuples("out", shape, NULL, 1, &t) < 0)
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

PyType_Spec fmpy_runner_spec = {
    .name = "fusemath._fusemath.Runner",
    .basicsize = sizeof(RunnerObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = runner_slots,
};
