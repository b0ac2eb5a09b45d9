/* fmpy_plan.c : the Plan type (fusemath._fusemath.Plan): an fm_plan that keeps its module, and
 * so the context, alive; execute on raw addresses, describe, free. And the Runner type, a plan of
 * any operation bound to its operands and run in one C call (Matmul.execute() goes through it),
 * with make_runner, which creates one from call()'s output specs: resolving the stream,
 * allocating the outputs (or taking the caller's out= for the first), taking their addresses and
 * running the plan cost no Python frames (host overhead). */
#include "fmpy.h"

/* tp_dealloc of the types here (GC, heap types): untrack, clear, free, drop the type. */
static void gc_dealloc(PyObject *self, inquiry clear)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    clear(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static fm_state *plan_state(PyObject *self)
{
    PlanObject *po = (PlanObject *)self;
    return po->module ? fmpy_module_state(po->module) : NULL;
}

PyObject *fmpy_plan_wrap(fm_state *st, PyObject *module, fm_plan *plan)
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

static void plan_dealloc(PyObject *self) { gc_dealloc(self, plan_clear); }

static PyObject *plan_freed_error(PyObject *self, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof msg, "Plan.%s: the plan was freed", what);
    return fmpy_raise_msg(plan_state(self), FM_ERR_FREED, msg);
}

PyDoc_STRVAR(plan_execute_doc,
             "execute(*addresses, stream=None)\n--\n\n"
             "Run the plan on raw addresses (ints, or None/0 for unused slots) in the operation's slot\n"
             "order of fusemath.h, then optionally the stream (int cudaStream_t): a matmul plan takes 6\n"
             "(A, B, C, BIAS, D, AUX), 8 (+ BGRAD, SCALE) or 10 (+ A_SCALE, B_SCALE), an FFT plan 4 (IN,\n"
             "OUT, PROLOG, EPILOG). The GIL is released while it runs; GPU work is asynchronous.\n"
             "UNSAFE: the addresses must point at memory laid out as planned and alive for the call.");

/* How many addresses Plan.execute takes per operation (bit n: n of them; the slots left out are
 * NULL), and how it says so. */
static const struct {
    uint32_t counts;
    const char *usage;
} execute_forms[FM_OP_COUNT_] = {
    [FM_OP_MATMUL] = {1u << 6 | 1u << 8 | 1u << 10,
                      "6 addresses (a, b, c, bias, d, aux), 8 (+ bgrad, scale) or 10 (+ a_scale, b_scale)"},
    [FM_OP_FFT] = {1u << FM_FFT_NSLOTS, "4 addresses (in, out, prolog_array, epilog_array)"},
    /* its stream position is a per-call argument, which this form has no place for */
    [FM_OP_RNG] = {0, "no addresses: an rng plan runs through fusemath.random's Generator"},
    [FM_OP_SOLVE] = {1u << FM_SOLVE_NSLOTS,
                     "10 addresses (a, b, ipiv, x, factor, pivots, info, w, aux, rank; 0 where unused)"},
};

static PyObject *plan_execute(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PlanObject *po = (PlanObject *)self;
    if (!po->plan) /* freed (by free(), or by a re-plan in another thread): say so whatever the arguments */
        return plan_freed_error(self, "execute()");
    const fm_op op = fm_plan_op(po->plan);
    const uint32_t counts = op >= 0 && op < FM_OP_COUNT_ ? execute_forms[op].counts : 0;
    int naddr = -1; /* the addresses given: nargs, or nargs - 1 and a stream */
    for (int n = (int)nargs - 1; n <= (int)nargs && n >= 0 && n < 32; n++)
        if (counts >> n & 1u)
            naddr = n;
    if (naddr < 0)
        return PyErr_Format(PyExc_TypeError, "Plan.execute() of a %s plan takes %s and an optional stream "
                            "(%zd arguments given)", fm_op_name(op), counts ? execute_forms[op].usage : "?",
                            nargs);
    void *ptrs[FMPY_MAX_SLOTS] = {0};
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
        char what[48];
        snprintf(what, sizeof what, "address of '%s'", fm_op_slot_name(op, i));
        if (fmpy_ptr_arg("Plan.execute(): ", what, o, &ptrs[i]) < 0)
            return NULL;
    }
    void *stream = NULL;
    if (nargs > naddr && fmpy_ptr_arg("Plan.execute(): ", "stream", args[naddr], &stream) < 0)
        return NULL;
    fm_plan *p = po->plan;
    if (!p)
        return plan_freed_error(self, "execute()");
    fm_plan_retain(p); /* another thread may free() the Python object meanwhile */
    fm_status s;
    Py_BEGIN_ALLOW_THREADS
    fm_clear_error(); /* no stale detail from an earlier failure on this thread */
    s = fm_plan_execute(p, ptrs, fm_op_slot_count(op), stream);
    Py_END_ALLOW_THREADS
    fm_plan_release(p);
    if (s != FM_OK)
        return fmpy_raise_status(plan_state(self), s);
    Py_RETURN_NONE;
}

static PyObject *plan_describe(PyObject *self, PyObject *unused)
{
    PlanObject *po = (PlanObject *)self;
    if (!po->plan)
        return plan_freed_error(self, "describe()");
    const char *d = fm_plan_describe(po->plan);
    return PyUnicode_DecodeUTF8(d ? d : "", d ? (Py_ssize_t)strlen(d) : 0, "replace");
}

static PyObject *plan_free(PyObject *self, PyObject *unused)
{
    PlanObject *po = (PlanObject *)self;
    fm_plan *p = po->plan;
    po->plan = NULL;
    fm_plan_release(p);
    Py_RETURN_NONE;
}

static PyObject *plan_get_backend(PyObject *self, void *closure)
{
    PlanObject *po = (PlanObject *)self;
    if (!po->plan)
        return plan_freed_error(self, "backend");
    const char *b = fm_plan_backend(po->plan);
    return PyUnicode_FromString(b ? b : "");
}

static PyObject *plan_get_op(PyObject *self, void *closure)
{
    PlanObject *po = (PlanObject *)self;
    if (!po->plan)
        return plan_freed_error(self, "op");
    return PyUnicode_FromString(fm_op_name(fm_plan_op(po->plan)));
}

static PyObject *plan_get_freed(PyObject *self, void *closure)
{
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

PyType_Spec fmpy_plan_spec = {
    .name = "fusemath._fusemath.Plan",
    .basicsize = sizeof(PlanObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = plan_slots,
};

/* ------------------------------------------------------------------------ */
/* Runner: a plan bound to its operands.                                    */
/* ------------------------------------------------------------------------ */
#define RUNNER_MAX_OUTS 4

typedef struct {
    int slot, ndim;
    fm_dtype dtype;
    int64_t shape[FM_MAX_NDIM]; /* as the caller sees it */
    PyObject *args;   /* allocation arguments: (shape,) for torch, (shape, dtype) otherwise */
    PyObject *kwargs; /* torch: {"dtype":, "device":}; else NULL */
    PyObject *key;    /* the result dict's key of a second output ("relu_aux", ...); NULL for the first */
    const char *what; /* its slot's name, for an out-of-memory message */
} runner_out;

typedef struct {
    PyObject_HEAD
    PyObject *plan;        /* PlanObject */
    PyObject *keep;        /* the operand arrays: their memory lives while we run */
    char prefix[72];       /* of messages: "Matmul.execute(): " */
    const fmpy_opdef *def; /* the plan's operation */
    int lib;               /* registered library of the results */
    int device;            /* cuda device of the results, -1 = host */
    int nslots, nout;
    int scalar;            /* a 0-d NumPy result is returned as its item */
    void *ptrs[FMPY_MAX_SLOTS]; /* bound inputs; outputs NULL */
    runner_out outs[RUNNER_MAX_OUTS]; /* outs[0]: the result out= replaces */
    const void *out_id;    /* identity of the last out= that passed validation (compared, never
                            * dereferenced: no reference is held, so the caller's array is not kept
                            * alive), and its address */
    void *out_ptr;
    /* NumPy out=: its buffer's element format when it passed (a NumPy array can be reshaped,
     * retyped or resized in place: shape, strides and format are compared on every call) */
    char out_format[8];
    fmpy_stream_memo stream; /* the last explicit stream object and its handle */
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
    Py_VISIT(r->stream.obj);
    return 0;
}

static int runner_clear(PyObject *self)
{
    RunnerObject *r = (RunnerObject *)self;
    Py_CLEAR(r->plan);
    Py_CLEAR(r->keep);
    for (int i = 0; i < RUNNER_MAX_OUTS; i++) {
        Py_CLEAR(r->outs[i].args);
        Py_CLEAR(r->outs[i].kwargs);
        Py_CLEAR(r->outs[i].key);
    }
    r->nout = 0;
    Py_CLEAR(r->stream.obj);
    return 0;
}

static void runner_dealloc(PyObject *self) { gc_dealloc(self, runner_clear); }

static int on_device(const fm_tensor *t, int dev)
{
    if (dev < 0)
        return t->device.type == FM_DEVICE_CPU;
    return t->device.type == FM_DEVICE_CUDA && t->device.id == dev;
}

static int same_shape(const fm_tensor *t, const runner_out *o)
{
    int same = t->ndim == o->ndim;
    for (int i = 0; same && i < t->ndim; i++)
        same = t->shape[i] == o->shape[i];
    return same;
}

static int c_contiguous(const fm_tensor *t)
{
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] > 1 && t->strides[i] != expect)
            return 0;
        expect *= t->shape[i];
    }
    return 1;
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
        t.dtype != r->outs[0].dtype || !on_device(&t, r->device) || !same_shape(&t, &r->outs[0]) ||
        !c_contiguous(&t))
        return 0;
    /* `out.data = ...` can swap in a view with the negative bit set; the table does not say */
    if (lib->style == STYLE_TORCH && fmpy_torch_lazy_bits(st, out, "out", 0) != 0) {
        PyErr_Clear();
        return 0;
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
    const runner_out *o = &r->outs[0];
    int same = 1;
    if (record) {
        if (strlen(fmt) < sizeof r->out_format)
            strcpy(r->out_format, fmt);
        else
            r->out_format[0] = 0; /* a long format: validated every call */
    } else {
        same = v.buf == r->out_ptr && v.ndim == o->ndim && r->out_format[0] &&
               strcmp(fmt, r->out_format) == 0;
        Py_ssize_t expect = v.itemsize;
        for (int i = v.ndim - 1; same && i >= 0; i--) {
            same = v.shape[i] == o->shape[i] && (v.shape[i] <= 1 || v.strides[i] == expect);
            expect *= v.shape[i];
        }
    }
    *p = v.buf;
    PyBuffer_Release(&v);
    return same;
}

/* What the stateless call refuses for a NumPy out=, refused with the same classes and words
 * here (the generic buffer reader would name the dtype of a big-endian or non-numeric array,
 * and a misaligned out would be named by its C slot at execute). 0 when none applies. */
static int numpy_out_precheck(fm_state *st, const RunnerObject *r, PyObject *out)
{
    Py_buffer v;
    if (PyObject_GetBuffer(out, &v, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear(); /* not a buffer: the full check says what it is */
        return 0;
    }
    const char *fmt = v.format ? v.format : "B", *where = r->prefix;
    const char *f = fmt[0] && strchr("@=<", fmt[0]) ? fmt + 1 : fmt; /* little-endian hosts only */
    /* element codes NumPy writes: reals, integers, bool, and complex as "Z" + the component's */
    const int complex_ = f[0] == 'Z' && f[1] && strchr("efdg", f[1]) && !f[2];
    const int numeric = complex_ || (f[0] && strchr("efdgbBhHiIlLqQ?", f[0]) && !f[1]);
    const Py_ssize_t align = complex_ ? v.itemsize / 2 : v.itemsize;
    PyObject *cls = fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT);
    int rc = -1;
    if (v.readonly)
        PyErr_Format(cls, "%sout is read-only", where);
    else if (fmt[0] == '>' || fmt[0] == '!')
        PyErr_Format(cls, "%sout is in big-endian byte order; the result is written in the machine's (pass a "
                          "native array)", where);
    else if (!numeric && f[0])
        PyErr_Format(cls, "%sout has element format '%s', expected %s", where, fmt,
                     fm_dtype_name(r->outs[0].dtype));
    else if (numeric && align > 0 && (uintptr_t)v.buf % (uintptr_t)align != 0)
        PyErr_Format(cls, "%sout at %p is not aligned to %zd bytes (the result is written as whole "
                          "elements); pass an aligned array (NumPy allocates aligned ones)", where, v.buf,
                     align);
    else
        rc = 0;
    PyBuffer_Release(&v);
    return rc;
}

/* Validate a caller-given first result: the planned library, device, dtype, shape and a
 * C-contiguous layout (the plan was made for one). Remembered per object, and checked again on
 * every call (NumPy: the buffer's size, format, shape and strides; torch through the exchange
 * table: dtype, device, shape and strides); otherwise validated in full. */
static int runner_check_out(fm_state *st, RunnerObject *r, PyObject *out, void **ptr)
{
    const fm_lib *lib = &st->libs[r->lib];
    const runner_out *o = &r->outs[0];
    /* the same object as last time (or a new one at its address: every check below reads `out`
     * itself, which the caller holds) */
    if (out == (const PyObject *)r->out_id &&
        (lib->style == STYLE_NUMPY ? numpy_out_same(r, out, ptr, 0) : xapi_out_same(st, r, lib, out, ptr)))
        return 0;
    const char *where = r->prefix;
    if (lib->style == STYLE_NUMPY && numpy_out_precheck(st, r, out) < 0)
        return -1;
    fm_tensor t;
    fm_hold h;
    int li = -1;
    if (fmpy_tensor_from_any(st, out, "out", 1, &t, &h, &li) < 0)
        return -1;
    const int lib_ok = lib->style == STYLE_NUMPY ? h.kind == HOLD_BUFFER : li == r->lib;
    fmpy_hold_release(&h); /* the caller holds out */
    char want[160], got[160];
    if (!lib_ok) {
        PyObject *tn = fmpy_type_name(out);
        if (tn)
            PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT),
                         "%sout must be an array of the result's library (%U), not %U", where, lib->name, tn);
        Py_XDECREF(tn);
    } else if (!on_device(&t, r->device)) {
        fmpy_device_text(r->device, want, sizeof want);
        fmpy_device_text(t.device.type == FM_DEVICE_CUDA ? t.device.id : -1, got, sizeof got);
        PyErr_Format(fmpy_error_class(st, FM_ERR_DEVICE), "%sout is on %s but the result lives on %s", where,
                     got, want);
    } else if (t.dtype != o->dtype) {
        PyErr_Format(fmpy_error_class(st, r->def->out_dtype_status), "%sout has dtype %s, expected %s%s",
                     where, fm_dtype_name(t.dtype), fm_dtype_name(o->dtype), r->def->out_dtype_hint);
    } else if (!same_shape(&t, o)) {
        fmpy_shape_text(t.shape, t.ndim, got, sizeof got);
        fmpy_shape_text(o->shape, o->ndim, want, sizeof want);
        PyErr_Format(fmpy_error_class(st, FM_ERR_SHAPE), "%sout has shape %s, expected %s", where, got, want);
    } else if (!c_contiguous(&t)) {
        PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT),
                     "%sout must be C-contiguous (the plan was made for a contiguous result)", where);
    } else {
        void *p = NULL;
        if (lib->style == STYLE_NUMPY)
            (void)numpy_out_same(r, out, &p, 1);
        r->out_id = out;
        r->out_ptr = t.data;
        *ptr = t.data;
        return 0;
    }
    return -1;
}

/* The first result (its reference taken from res), or (first, {key: result, ...}) when there are more. */
static PyObject *runner_result(fm_state *st, const RunnerObject *r, PyObject **res, int given)
{
    PyObject *first = res[0];
    res[0] = NULL;
    if (r->scalar && !given) { /* NumPy gives a scalar for 1-D @ 1-D: the 0-d array's item */
        PyObject *item = PyObject_GetItem(first, st->empty_tuple);
        Py_DECREF(first);
        first = item;
    }
    if (!first || r->nout == 1)
        return first;
    PyObject *extra = PyDict_New();
    for (int i = 1; extra && i < r->nout; i++)
        if (PyDict_SetItem(extra, r->outs[i].key, res[i]) < 0)
            Py_CLEAR(extra);
    if (!extra) {
        Py_DECREF(first);
        return NULL;
    }
    return Py_BuildValue("(NN)", first, extra);
}

static PyObject *runner_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    RunnerObject *r = (RunnerObject *)self;
    if (nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "Runner.run() takes at most two arguments (stream, out)");
        return NULL;
    }
    if (!r->plan) { /* only after a garbage-collector clear */
        PyErr_Format(PyExc_RuntimeError, "%sthe runner was cleared", r->prefix);
        return NULL;
    }
    PyObject *stream_arg = nargs > 0 ? args[0] : Py_None;
    PyObject *out = nargs > 1 ? args[1] : Py_None;
    fm_state *st = plan_state(r->plan);
    if (!st || r->lib >= st->nlibs) { /* the module was cleared (interpreter shutdown) */
        PyErr_Format(PyExc_RuntimeError, "%sthe fusemath module was torn down", r->prefix);
        return NULL;
    }
    void *ptrs[FMPY_MAX_SLOTS], *stream = NULL;
    memcpy(ptrs, r->ptrs, sizeof ptrs);
    const int given = out != Py_None;
    PyObject *override = NULL, *res[RUNNER_MAX_OUTS] = {NULL}, *result = NULL;
    /* host results without a stream argument: no stream to resolve */
    if ((stream_arg != Py_None || r->device >= 0) &&
        fmpy_resolve_stream(st, r->prefix, r->lib, r->device, stream_arg, r->nout > given, &r->stream,
                            &stream, &override) < 0)
        return NULL;
    if (given) {
        if (runner_check_out(st, r, out, &ptrs[r->outs[0].slot]) < 0)
            goto done;
        res[0] = Py_NewRef(out);
    }
    for (int i = given; i < r->nout; i++) {
        const runner_out *o = &r->outs[i];
        res[i] = fmpy_lib_alloc(st, r->lib, o->shape, o->ndim, o->dtype, r->device, override, o->args,
                                o->kwargs, o->what, &ptrs[o->slot]);
        if (!res[i])
            goto done;
    }
    PyObject *plan = Py_NewRef(r->plan), *keep = Py_XNewRef(r->keep); /* alive even if the planner is freed */
    fm_plan *p = ((PlanObject *)plan)->plan;
    fm_status s = FM_OK;
    if (p) {
        fm_plan_retain(p);
        Py_BEGIN_ALLOW_THREADS
        fm_clear_error();
        s = fm_plan_execute(p, ptrs, r->nslots, stream);
        Py_END_ALLOW_THREADS
        fm_plan_release(p);
    }
    Py_XDECREF(keep);
    int other = -1, slot = s == FM_ERR_ALIAS ? fm_last_error_slots(&other) : -1;
    if (!p)
        plan_freed_error(plan, "execute()");
    else if (s == FM_ERR_ALIAS && given) /* said from the caller's side, as the stateless call does */
        PyErr_Format(fmpy_error_class(st, FM_ERR_ALIAS), "%sout %s (%s)", r->prefix,
                     slot >= 0 && slot == other ? "overlaps itself" : "overlaps an input", fm_last_error());
    else if (s != FM_OK)
        fmpy_raise_status(st, s);
    else
        result = runner_result(st, r, res, given);
    Py_DECREF(plan);
done:
    Py_XDECREF(override);
    for (int i = 0; i < r->nout; i++) /* the runner is alive (the caller holds it): nout stands */
        Py_XDECREF(res[i]);
    return result;
}

/* One output spec of make_runner, (slot, shape, dtype name, key or None), into o. */
static int runner_out_spec(fm_state *st, RunnerObject *r, fm_op op, PyObject *spec, int first, runner_out *o)
{
    PyObject *shape = NULL, *key = NULL;
    long slot = -1;
    fm_tensor t;
    if (PyTuple_Check(spec) && PyTuple_Size(spec) == 4) {
        slot = PyLong_AsLong(PyTuple_GetItem(spec, 0));
        shape = PyTuple_GetItem(spec, 1);
        o->dtype = fmpy_dtype_by_name(PyTuple_GetItem(spec, 2));
        key = PyTuple_GetItem(spec, 3);
    }
    if (slot == -1 && PyErr_Occurred())
        return -1;
    if (fm_op_slot_role(op, (int)slot) != FM_SLOT_OUTPUT || !PyTuple_Check(shape) ||
        o->dtype == FM_DTYPE_INVALID || (!first && !PyUnicode_Check(key))) {
        PyErr_SetString(PyExc_ValueError,
                        "make_runner(): an output spec is (output slot, shape, dtype name, key)");
        return -1;
    }
    o->slot = (int)slot;
    o->what = fm_op_slot_name(op, o->slot);
    o->key = first ? NULL : Py_NewRef(key);
    if (fmpy_dims_from_tuples("out", shape, NULL, 1, &t) < 0 ||
        fmpy_lib_alloc_args(st, r->lib, shape, o->dtype, r->device, &o->args, &o->kwargs) < 0)
        return -1;
    o->ndim = t.ndim;
    memcpy(o->shape, t.shape, sizeof o->shape);
    return 0;
}

PyObject *fmpy_mod_make_runner(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    /* make_runner(plan, keep, ptrs, lib, device, outs, scalar, where)
     *   ptrs: the addresses (int or None) in slot order, outputs None (trailing slots may be left out)
     *   outs: call()'s output specs ((slot, shape, dtype name, key or None), ...), out='s first */
    fm_state *st = fmpy_module_state(module);
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "make_runner() takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], (PyTypeObject *)st->plan_type))
        return PyErr_Format(PyExc_TypeError, "make_runner(): plan must be a fusemath Plan");
    if (!((PlanObject *)args[0])->plan)
        return plan_freed_error(args[0], "make_runner()");
    const fm_op op = fm_plan_op(((PlanObject *)args[0])->plan);
    const fmpy_opdef *def = fmpy_opdef_of(op);
    PyObject *ptrs = args[2], *outs = args[5];
    const Py_ssize_t nptr = PyTuple_Check(ptrs) ? PyTuple_Size(ptrs) : -1;
    if (!def)
        return PyErr_Format(PyExc_ValueError, "make_runner(): a %s plan has no runner", fm_op_name(op));
    if (nptr < 0 || nptr > fm_op_slot_count(op))
        return PyErr_Format(PyExc_TypeError, "make_runner(): ptrs must be a tuple of at most %d addresses",
                            fm_op_slot_count(op));
    const Py_ssize_t nout = PyTuple_Check(outs) ? PyTuple_Size(outs) : -1;
    if (nout < 1 || nout > RUNNER_MAX_OUTS)
        return PyErr_Format(PyExc_TypeError, "make_runner(): outs must be a tuple of 1 to %d output specs",
                            RUNNER_MAX_OUTS);
    const char *where = PyUnicode_Check(args[7]) ? PyUnicode_AsUTF8AndSize(args[7], NULL) : NULL;
    if (!where)
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "make_runner(): where must be a str");
    int li, scalar = PyObject_IsTrue(args[6]);
    long dev = PyLong_AsLong(args[4]);
    if (scalar < 0 || (dev == -1 && PyErr_Occurred()))
        return NULL;
    if (fmpy_lib_index_arg(st, "make_runner", args[3], &li) < 0)
        return NULL;
    void *p[FMPY_MAX_SLOTS] = {0};
    for (int i = 0; i < nptr; i++)
        if (fmpy_ptr_arg("make_runner(): ", fm_op_slot_name(op, i), PyTuple_GetItem(ptrs, i), &p[i]) < 0)
            return NULL;
    PyTypeObject *tp = (PyTypeObject *)st->runner_type;
    allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    RunnerObject *r = (RunnerObject *)alloc(tp, 0);
    if (!r)
        return NULL;
    memcpy(r->ptrs, p, sizeof p);
    r->plan = Py_NewRef(args[0]);
    r->keep = Py_NewRef(args[1]);
    snprintf(r->prefix, sizeof r->prefix, "%s: ", where);
    r->def = def;
    r->nslots = fm_op_slot_count(op);
    r->lib = li;
    r->device = (int)dev;
    r->scalar = scalar;
    for (r->nout = 0; r->nout < nout; r->nout++)
        if (runner_out_spec(st, r, op, PyTuple_GetItem(outs, r->nout), r->nout == 0, &r->outs[r->nout]) < 0) {
            Py_DECREF(r); /* what it filled is cleared with the rest */
            return NULL;
        }
    return (PyObject *)r;
}

static PyMethodDef runner_methods[] = {
    {"run", (PyCFunction)(void (*)(void))runner_run, METH_FASTCALL,
     "run(stream=None, out=None)\n--\n\nResolve the stream, allocate the results (or take out=), execute the plan "
     "on the bound operands, return them."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot runner_slots[] = {
    {Py_tp_doc, (void *)"A plan bound to its operands (internal to the planners: fusemath.Matmul)."},
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
