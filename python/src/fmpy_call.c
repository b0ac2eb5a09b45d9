/* fmpy_call.c : call(), the one entry point behind every operation's stateless call, output
 * specs, plan and autotune. The operands come as a tuple in the operation's slot order (an
 * output slot holds the caller's out= or None); the core's fm_output_specs says which outputs
 * are written, their shapes and dtypes: the given ones are compared with it (to name the Python
 * argument), the others are allocated from it with the results' library on its device. What is
 * particular to an operation (its options, argument names, NumPy conventions such as matmul's
 * 1-D promotion, the shape of its result) comes from its fmpy_opdef (fmpy_array_matmul.c, fmpy_fft.c). */
#include "fmpy.h"

/* The extension's operation table: one row per operation (its fmpy_opdef, in its own file). */
static const fmpy_opdef *const opdefs[FM_OP_COUNT_] = {
    [FM_OP_MATMUL] = &fmpy_matmul_def,
    [FM_OP_FFT] = &fmpy_fft_def,
    [FM_OP_RNG] = &fmpy_rng_def,
    [FM_OP_SOLVE] = &fmpy_solve_def,
};

const fmpy_opdef *fmpy_opdef_of(long op) { return op >= 0 && op < FM_OP_COUNT_ ? opdefs[op] : NULL; }

/* Insert a unit axis at position pos (its stride never matters). */
int fmpy_insert_axis(fmpy_call *c, fm_tensor *t, int pos)
{
    if (t->ndim >= FM_MAX_NDIM) {
        PyErr_Format(fmpy_error_class(c->st, FM_ERR_SHAPE), "%s: an operand would have more than %d dimensions", c->where,
                     FM_MAX_NDIM);
        return -1;
    }
    for (int i = t->ndim; i > pos; i--) {
        t->shape[i] = t->shape[i - 1];
        t->strides[i] = t->strides[i - 1];
    }
    t->shape[pos] = 1;
    t->strides[pos] = 0;
    t->ndim++;
    return 0;
}

/* The shape the caller sees: the spec's, less the axes the operation's conventions drop. */
static int reduced_shape(const fmpy_call *c, int slot, const fm_tensor *spec, int64_t *shape)
{
    unsigned drop = c->def->dropped ? c->def->dropped(c, slot) : 0;
    int n = 0;
    for (int i = 0; i < spec->ndim; i++)
        if (!(drop >> (spec->ndim - 1 - i) & 1u))
            shape[n++] = spec->shape[i];
    return n;
}

/* NumPy's name of a dtype for NumPy results (float32, as its users know it), the library's short one
 * (f32) for the others */
static const char *dtype_text(fmpy_call *c, fm_dtype dt, PyObject **keep)
{
    const fm_lib *lib = &c->st->libs[c->li];
    PyObject *o = lib->style == STYLE_NUMPY ? lib->dtypes[dt] : NULL;
    *keep = o ? PyObject_Str(o) : NULL;
    PyErr_Clear();
    return *keep ? PyUnicode_AsUTF8AndSize(*keep, NULL) : fm_dtype_name(dt);
}

/* A given output against its spec, in the caller's terms. */
static int check_given(fmpy_call *c, int slot, const fm_tensor *spec)
{
    int64_t want[FM_MAX_NDIM];
    int n = reduced_shape(c, slot, spec, want);
    const fm_tensor *u = &c->user[slot];
    int same = u->ndim == n;
    for (int i = 0; same && i < n; i++)
        same = u->shape[i] == want[i];
    const char *name = c->def->argname(c, slot);
    if (!same) {
        char got[160], exp[160];
        fmpy_shape_text(u->shape, u->ndim, got, sizeof got);
        fmpy_shape_text(want, n, exp, sizeof exp);
        const char *words = c->def->out_shape_words;
        PyErr_Format(fmpy_error_class(c->st, FM_ERR_SHAPE), "%s%s%s: %s has shape %s, expected %s%s", words ? words : "",
                     words ? " (" : "", c->where, name, got, exp, words ? ")" : "");
        return -1;
    }
    if (u->dtype != spec->dtype) {
        PyObject *k1, *k2;
        const char *t1 = dtype_text(c, u->dtype, &k1), *t2 = dtype_text(c, spec->dtype, &k2);
        PyErr_Format(fmpy_error_class(c->st, c->def->out_dtype_status), "%s: %s has dtype %s, expected %s%s", c->where, name,
                     t1, t2, c->def->out_dtype_hint);
        Py_XDECREF(k1);
        Py_XDECREF(k2);
        return -1;
    }
    return 0;
}

static int convert(fmpy_call *c, int slot)
{
    const fmpy_opdef *d = c->def;
    fm_state *st = c->st;
    int out = fm_op_slot_role(d->op, slot) == FM_SLOT_OUTPUT && d->writable(c, slot);
    if (fmpy_tensor_from_any(st, c->objs[slot], d->argname(c, slot), out, &c->tens[slot], &c->holds[slot],
                             &c->libs[slot]) < 0) {
        if (!out && d->dtype_hint && PyErr_ExceptionMatches(fmpy_error_class(st, FM_ERR_DTYPE))) {
            PyObject *type, *value, *tb; /* the operation says what it takes */
            PyErr_Fetch(&type, &value, &tb);
            PyErr_Format(fmpy_error_class(st, FM_ERR_DTYPE), "%s: %S; %s", c->where, value ? value : Py_None,
                         d->dtype_hint);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        }
        return -1;
    }
    c->tp[slot] = &c->tens[slot];
    c->user[slot] = c->tens[slot];
    c->given |= out ? 1u << slot : 0;
    return 0;
}

/* Whether descriptor t (NULL: absent) is the memo's m: everything but the data pointer, the
 * extents and strides up to ndim (what lies past them means nothing). */
static int same_descriptor(const fm_tensor *t, const fm_tensor *m)
{
    if (!t)
        return m->ndim == -1;
    return t->ndim == m->ndim && t->dtype == m->dtype && t->device.type == m->device.type &&
           t->device.id == m->device.id && t->ndim >= 0 && t->ndim <= FM_MAX_NDIM &&
           !memcmp(t->shape, m->shape, (size_t)t->ndim * sizeof t->shape[0]) &&
           !memcmp(t->strides, m->strides, (size_t)t->ndim * sizeof t->strides[0]);
}

/* The core's specs for these descriptors and options: the memo's when they are the last ones asked
 * about (compared without data pointers; a stateless call's repeat costs a few compares, not a
 * copy of every slot's descriptor), else fm_output_specs' (remembered when it succeeds). */
static fm_status specs_of(fmpy_call *c, const fm_tensor *const *tp)
{
    fmpy_specs_memo *memo = &c->st->memo[c->def->op];
    int hit = memo->valid && !memcmp(&c->o, &memo->o, sizeof c->o);
    for (int i = 0; hit && i < c->nslots; i++)
        hit = same_descriptor(tp[i], &memo->in[i]);
    if (hit) {
        memcpy(c->specs, memo->specs, (size_t)c->nslots * sizeof c->specs[0]);
        c->written = memo->written;
        return FM_OK;
    }
    fm_clear_error();
    fm_status s = fm_output_specs(c->def->op, tp, c->nslots, &c->o, c->specs, &c->written);
    memo->valid = 0;
    if (s == FM_OK) {
        for (int i = 0; i < c->nslots; i++) {
            memset(&memo->in[i], 0, sizeof memo->in[i]);
            if (tp[i])
                memcpy(&memo->in[i], tp[i], sizeof memo->in[i]);
            else
                memo->in[i].ndim = -1;
            memo->in[i].data = NULL;
        }
        memo->o = c->o;
        memcpy(memo->specs, c->specs, sizeof memo->specs);
        memo->written = c->written;
        memo->valid = 1;
    }
    return s;
}

/* m with the first whole-word occurrence of each of the two slots' core names in the Python
 * arguments' names ("in is on cpu but prolog_array is on cuda:0" -> "x is on cpu but prolog[...] ..."). */
static void rename_two(fmpy_call *c, int slot, int other, const char *m, char *buf, size_t size)
{
    const int slots[2] = {slot, other};
    const char *at[2] = {NULL, NULL};
    for (int j = 0; j < 2; j++) {
        const char *name = fm_op_slot_name(c->def->op, slots[j]);
        const size_t k = strlen(name);
        for (const char *q = strstr(m, name); q && k; q = strstr(q + 1, name))
            if ((q == m || q[-1] == ' ') && (q[k] == ' ' || q[k] == ',' || q[k] == ';' || !q[k])) {
                at[j] = q;
                break;
            }
    }
    size_t used = 0;
    for (const char *q = m; *q && used + 1 < size;) {
        const int j = q == at[0] ? 0 : q == at[1] ? 1 : -1;
        if (j < 0) {
            buf[used++] = *q++;
            continue;
        }
        used += (size_t)snprintf(buf + used, size - used, "%s", c->def->argname(c, slots[j]));
        q += strlen(fm_op_slot_name(c->def->op, slots[j]));
    }
    buf[used < size ? used : size - 1] = '\0';
}

/* A failed core call: its message; an alias is said with the Python arguments that overlap
 * (and the core's detail of an output overlapping itself: the axis and stride), a failure about
 * one operand with its Python argument's name in place of the slot name that starts it. */
static void raise_core(fmpy_call *c, fm_status s)
{
    int other, slot = fm_last_error_slots(&other);
    if (s != FM_ERR_ALIAS || slot < 0 || slot >= c->nslots || other < 0 || other >= c->nslots) {
        /* the core's message under the caller's name: "matmul: bias has ..." -> "fusemath.matmul: bias has ..." */
        const char *m = fm_last_error(), *op = fm_op_name(c->def->op), *arg = "";
        const char *sn = other == -1 && slot >= 0 && slot < c->nslots ? fm_op_slot_name(c->def->op, slot) : "";
        const size_t n = strlen(op), k = strlen(sn);
        if (!m[0])
            m = fm_status_string(s);
        else if (strncmp(m, op, n) == 0 && m[n] == ':' && m[n + 1] == ' ')
            m += n + 2;
        if (k && strncmp(m, sn, k) == 0 && m[k] == ' ') {
            arg = c->def->argname(c, slot);
            m += k;
        }
        char two[640];
        if (slot >= 0 && slot < c->nslots && other >= 0 && other < c->nslots && other != slot) {
            rename_two(c, slot, other, m, two, sizeof two); /* e.g. two operands on different devices */
            m = two;
        }
        PyErr_Format(fmpy_error_class(c->st, s), "%s: %s%s", c->where, arg, m);
    } else if (other == slot)
        PyErr_Format(fmpy_error_class(c->st, s), "%s: %s overlaps itself (%s)", c->where, c->def->argname(c, slot),
                     fm_last_error());
    else
        PyErr_Format(fmpy_error_class(c->st, s), "%s: %s overlaps %s in memory", c->where, c->def->argname(c, slot),
                     c->def->argname(c, other));
}

/* Convert, prepare, and ask the core for the outputs. */
static int call_specs(fmpy_call *c)
{
    const fmpy_opdef *d = c->def;
    for (int i = 0; i < c->nslots; i++)
        if (c->objs[i] != Py_None && convert(c, i) < 0)
            return -1;
    c->dev = -2;
    for (int i = 0; i < c->nslots && c->dev == -2; i++)
        if (c->libs[i] == c->li && !(c->given >> i & 1u))
            c->dev = fmpy_device_index(&c->tens[i]);
    if (d->place && d->place(c) < 0)
        return -1;
    if (c->dev == -2) {
        if (c->st->libs[c->li].style != STYLE_NUMPY) {
            PyErr_Format(PyExc_ValueError, "%s: no input is an array of %U", c->where, c->st->libs[c->li].name);
            return -1;
        }
        c->dev = -1;
    }
    if (d->prepare && d->prepare(c) < 0)
        return -1;
    for (int i = 0; i < c->nslots; i++) { /* given outputs at the full rank */
        unsigned drop = (c->given >> i & 1u) && d->dropped ? d->dropped(c, i) : 0;
        for (int k = 0; drop >> k; k++)
            if ((drop >> k & 1u) && fmpy_insert_axis(c, &c->tens[i], c->tens[i].ndim - k) < 0)
                return -1;
    }
    /* the core is asked about the outputs not given, except those their specs depend on (fp8's d) */
    const fm_tensor *tp[FMPY_MAX_SLOTS];
    uint32_t keep = d->spec_needs ? d->spec_needs(c) : 0;
    for (int i = 0; i < c->nslots; i++)
        tp[i] = (c->given >> i & 1u) && !(keep >> i & 1u) ? NULL : c->tp[i];
    fm_status s;
    if ((s = specs_of(c, tp)) != FM_OK) {
        raise_core(c, s);
        return -1;
    }
    for (int i = 0; i < c->nslots; i++)
        if ((c->written >> i & 1u) && (c->given >> i & 1u) && check_given(c, i, &c->specs[i]) < 0)
            return -1;
    return 0;
}

/* Output slot i allocated from its spec with the results' library on its device. */
static int allocate_one(fmpy_call *c, int i, PyObject *stream)
{
    fm_device odev = {c->dev >= 0 ? FM_DEVICE_CUDA : FM_DEVICE_CPU, c->dev >= 0 ? c->dev : 0};
    const fm_tensor *sp = &c->specs[i];
    int64_t ret[FM_MAX_NDIM];
    int n = reduced_shape(c, i, sp, ret);
    void *ptr = NULL;
    c->res[i] = fmpy_lib_alloc(c->st, c->li, ret, n, sp->dtype, c->dev, stream, NULL, NULL,
                               fm_op_slot_name(c->def->op, i), &ptr);
    if (!c->res[i])
        return -1;
    fm_tensor_init(&c->tens[i], ptr, odev, sp->dtype, sp->ndim, sp->shape, NULL);
    c->tp[i] = &c->tens[i];
    return 0;
}

static int allocate(fmpy_call *c, PyObject *stream)
{
    for (int i = 0; i < c->nslots; i++) {
        if (!(c->written >> i & 1u))
            continue;
        if (c->given >> i & 1u)
            c->res[i] = Py_NewRef(c->objs[i]);
        else if (allocate_one(c, i, stream) < 0)
            return -1;
    }
    return 0;
}

/* The core refused a given output that overlaps an input (before writing anything): it is
 * computed into a temporary instead and copied into out= afterwards, as NumPy does. 1: the
 * temporary is in place of that slot (marked in *moved); 0: the failure stands (an output
 * overlapping itself, or a GPU stream other than the library's current one, which the copy
 * would not be ordered on); -1: a Python error. */
static int take_temporary(fmpy_call *c, fm_status s, PyObject *stream_arg, uint32_t *moved)
{
    int other, slot = fm_last_error_slots(&other);
    if (s != FM_ERR_ALIAS || !c->def->out_overlap_temporary || slot < 0 || slot >= c->nslots || other == slot ||
        !(c->given >> slot & 1u) || (*moved >> slot & 1u))
        return 0;
    if (!PyType_GetSlot(Py_TYPE(c->objs[slot]), Py_mp_ass_subscript))
        return 0; /* no out[...] = temporary to copy back with (a DLPack-only library): the refusal stands */
    if (c->st->libs[c->li].style != STYLE_NUMPY && stream_arg && stream_arg != Py_None) {
        void *h = NULL;
        PyObject *override = NULL;
        if (fmpy_resolve_stream(c->st, c->prefix, c->li, c->dev, stream_arg, 1, NULL, &h, &override) < 0)
            return -1;
        Py_XDECREF(override);
        if (override)
            return 0;
    }
    Py_CLEAR(c->res[slot]);
    if (allocate_one(c, slot, NULL) < 0)
        return -1;
    *moved |= 1u << slot;
    return 1;
}

/* The temporaries copied into the caller's outputs (the array library's own copy). */
static int copy_back(fmpy_call *c, uint32_t moved)
{
    for (int i = 0; i < c->nslots; i++) {
        if (!(moved >> i & 1u))
            continue;
        if (PyObject_SetItem(c->objs[i], Py_Ellipsis, c->res[i]) < 0)
            return -1;
        Py_DECREF(c->res[i]);
        c->res[i] = Py_NewRef(c->objs[i]);
    }
    return 0;
}

/* ((slot, shape, dtype name, key or None), ...) of the written outputs: make_runner's outs. */
static PyObject *specs_tuple(fmpy_call *c)
{
    int n = 0;
    for (uint32_t w = c->written; w; w &= w - 1)
        n++;
    PyObject *t = PyTuple_New(n);
    for (int i = 0, k = 0; t && i < c->nslots; i++) {
        if (!(c->written >> i & 1u))
            continue;
        int64_t ret[FM_MAX_NDIM];
        int nd = reduced_shape(c, i, &c->specs[i], ret);
        const char *key = c->def->key ? c->def->key(c, i) : NULL;
        PyObject *e = Py_BuildValue("(iNsz)", i, fmpy_shape_tuple(ret, nd), fm_dtype_name(c->specs[i].dtype), key);
        if (e)
            PyTuple_SetItem(t, k++, e);
        else
            Py_CLEAR(t);
    }
    return t;
}

static PyObject *call_run(fmpy_call *c, int mode, PyObject *stream_arg, int repeats, PyObject *module)
{
    fm_state *st = c->st;
    PyObject *override = NULL, *result = NULL;
    void *stream = NULL;
    int allocating = (c->written & ~c->given) != 0;
    if (mode == FMPY_RUN && fmpy_resolve_stream(st, c->prefix, c->li, c->dev, stream_arg, allocating, NULL,
                                                &stream, &override) < 0)
        return NULL;
    if (allocate(c, override) < 0)
        goto done;
    fm_plan *plan = NULL;
    fm_status s;
    const fm_tensor *const *tp = c->tp;
    uint32_t moved = 0; /* outputs computed into a temporary (their out= overlapped an input) */
    int again;
    do {
        Py_BEGIN_ALLOW_THREADS
        fm_clear_error();
        if (mode == FMPY_RUN)
            s = fm_run(st->ctx, c->def->op, tp, c->nslots, &c->o, c->has_args ? &c->args : NULL, stream);
        else if (mode == FMPY_PLAN)
            s = fm_plan_create(st->ctx, c->def->op, tp, c->nslots, &c->o, &plan);
        else
            s = fm_autotune(st->ctx, c->def->op, tp, c->nslots, &c->o, repeats, &plan);
        Py_END_ALLOW_THREADS
        again = mode == FMPY_RUN ? take_temporary(c, s, stream_arg, &moved) : 0;
        if (again < 0)
            goto done;
    } while (again);
    if (s != FM_OK) {
        fm_plan_release(plan);
        raise_core(c, s);
    } else if (mode == FMPY_RUN) {
        result = copy_back(c, moved) < 0 ? NULL : c->def->result(c);
    } else if (!plan) {
        fmpy_raise_msg(st, FM_ERR_INTERNAL, "the library returned FM_OK without a plan");
    } else { /* the plan and the outputs it writes */
        PyObject *po = fmpy_plan_wrap(st, module, plan), *specs = po ? specs_tuple(c) : NULL;
        result = specs ? PyTuple_Pack(2, po, specs) : NULL;
        Py_XDECREF(po);
        Py_XDECREF(specs);
    }
done:
    Py_XDECREF(override);
    return result;
}

FMPY_DOC_VAR(fmpy_call_doc,
             "call(op, mode, lib, operands, options, stream=None, repeats=3, where=None)\n--\n\n"
             "Every operation's entry point (all arguments positional). op: OP_MATMUL / OP_FFT; mode:\n"
             "CALL_RUN (compute; returns the result, as the operation's front end returns it), CALL_SPECS\n"
             "(check everything and return the outputs' ((slot, shape, dtype name, key), ...)), CALL_PLAN /\n"
             "CALL_TUNE ((Plan, those specs) for operands laid out like these; outputs not given are\n"
             "allocated as templates). lib: the registered library (index) results are allocated with, on the device of\n"
             "its first input; operands: a tuple in the operation's slot order (None where absent; an output\n"
             "slot holds out= or None); options: the operation's option values (fmpy_array_matmul.c, fmpy_fft.c).\n"
             "GPU work is queued on `stream` (None: the library's current stream); the GIL is released.\n"
             "where: the caller's name, the prefix of the messages (None: the operation's).");

PyObject *fmpy_mod_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = fmpy_module_state(module);
    if (nargs < 5 || nargs > 8) {
        PyErr_Format(PyExc_TypeError, "call() takes 5 to 8 arguments (%zd given)", nargs);
        return NULL;
    }
    long op = PyLong_AsLong(args[0]), mode = PyLong_AsLong(args[1]);
    if ((op == -1 || mode == -1) && PyErr_Occurred())
        return NULL;
    const fmpy_opdef *d = fmpy_opdef_of(op);
    long long repeats = 3;
    if (!d || mode < FMPY_RUN || mode > FMPY_TUNE) {
        PyErr_Format(PyExc_ValueError, "call(): op = %ld, mode = %ld: unknown", op, mode);
        return NULL;
    }
    if (nargs > 6 && fmpy_int_arg("call(): ", "repeats", args[6], 1, 1000, &repeats) < 0)
        return NULL;
    fmpy_call c;
    memset(&c, 0, sizeof c);
    c.st = st;
    c.def = d;
    c.nslots = fm_op_slot_count(d->op);
    c.where = d->fname;
    if (nargs > 7 && args[7] != Py_None && !(c.where = PyUnicode_AsUTF8AndSize(args[7], NULL)))
        return NULL;
    const size_t wl = strnlen(c.where, sizeof c.prefix - 3); /* (snprintf: a measurable share of a stateless call) */
    memcpy(c.prefix, c.where, wl);
    memcpy(c.prefix + wl, ": ", 3);
    for (int i = 0; i < FMPY_MAX_SLOTS; i++) {
        fmpy_hold_init(&c.holds[i]);
        c.libs[i] = -1;
    }
    if (fmpy_lib_index_arg(st, "call", args[2], &c.li) < 0)
        return NULL;
    if (!PyTuple_Check(args[3]) || PyTuple_Size(args[3]) != c.nslots || !PyTuple_Check(args[4]) ||
        PyTuple_Size(args[4]) != d->nopts) {
        PyErr_Format(PyExc_TypeError, "call(): %s takes a tuple of %d operands and one of %d options", d->fname,
                     c.nslots, d->nopts);
        return NULL;
    }
    for (int i = 0; i < c.nslots; i++)
        c.objs[i] = PyTuple_GetItem(args[3], i);
    PyObject *opts[FMPY_MAX_OPTS], *result = NULL;
    for (int i = 0; i < d->nopts; i++)
        opts[i] = PyTuple_GetItem(args[4], i);
    if (d->fill(&c, opts) == 0 && call_specs(&c) == 0)
        result = mode == FMPY_SPECS ? specs_tuple(&c)
                                    : call_run(&c, (int)mode, nargs > 5 ? args[5] : Py_None, (int)repeats, module);
    for (int i = 0; i < FMPY_MAX_SLOTS; i++) {
        fmpy_hold_release(&c.holds[i]);
        Py_XDECREF(c.res[i]);
    }
    return result;
}
