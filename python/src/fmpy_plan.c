/* fmpy_plan.c : the Plan type (fusemath._fusemath.Plan): an fm_plan that keeps its
 * module, and so the context, alive; execute on raw addresses, describe, free. */
#include "fmpy.h"

fm_state *fmpy_plan_state(PyObject *self)
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

static void plan_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    plan_clear(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

PyObject *fmpy_plan_freed_error(PyObject *self, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof msg, "Plan.%s: the plan was freed", what);
    return fmpy_raise_msg(fmpy_plan_state(self), FM_ERR_FREED, msg);
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
};

static PyObject *plan_execute(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PlanObject *po = (PlanObject *)self;
    if (!po->plan) /* freed (by free(), or by a re-plan in another thread): say so whatever the arguments */
        return fmpy_plan_freed_error(self, "execute()");
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
        return fmpy_plan_freed_error(self, "execute()");
    fm_plan_retain(p); /* another thread may free() the Python object meanwhile */
    fm_status s;
    Py_BEGIN_ALLOW_THREADS
    fm_clear_error(); /* no stale detail from an earlier failure on this thread */
    s = fm_plan_execute(p, ptrs, fm_op_slot_count(op), stream);
    Py_END_ALLOW_THREADS
    fm_plan_release(p);
    if (s != FM_OK)
        return fmpy_raise_status(fmpy_plan_state(self), s);
    Py_RETURN_NONE;
}

static PyObject *plan_describe(PyObject *self, PyObject *unused)
{
    PlanObject *po = (PlanObject *)self;
    if (!po->plan)
        return fmpy_plan_freed_error(self, "describe()");
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
        return fmpy_plan_freed_error(self, "backend");
    const char *b = fm_plan_backend(po->plan);
    return PyUnicode_FromString(b ? b : "");
}

static PyObject *plan_get_op(PyObject *self, void *closure)
{
    PlanObject *po = (PlanObject *)self;
    if (!po->plan)
        return fmpy_plan_freed_error(self, "op");
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
