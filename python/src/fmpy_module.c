/* fmpy_module.c : the module fusemath._fusemath: its small functions (epilogue names,
 * threads, backends, plan cache, wisdom), its method table (the other functions are
 * defined in the topic files, declared in fmpy.h) and its lifecycle (exec, traverse,
 * clear, free, PyInit). */
#include "fmpy.h"

/* ------------------------------------------------------------------------ */
/* Small module functions.                                                  */
/* ------------------------------------------------------------------------ */
/* None for FM_OK, else the status raised */
static PyObject *none_or_raise(fm_state *st, fm_status s)
{
    return s == FM_OK ? Py_NewRef(Py_None) : fmpy_raise_status(st, s);
}

static PyObject *mod_epilogue_parse(PyObject *module, PyObject *arg)
{
    fm_state *st = fmpy_module_state(module);
    if (!PyUnicode_Check(arg)) {
        fmpy_raise_type(PyExc_TypeError, "epilogue_parse(): ", "text", "a str", arg);
        return NULL;
    }
    unsigned e = 0;
    if (fmpy_epilogue_arg(st, "epilogue_parse(): ", arg, &e) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(e);
}

static PyObject *mod_epilogue_format(PyObject *module, PyObject *arg)
{
    fm_state *st = fmpy_module_state(module);
    long long v = 0;
    if (fmpy_int_required("epilogue_format(): ", "epilogue", arg, 0, (long long)UINT32_MAX, &v) < 0)
        return NULL;
    char buf[160];
    fm_clear_error();
    fm_status s = fm_epilogue_format((unsigned)v, buf, sizeof buf);
    if (s != FM_OK)
        return fmpy_raise_status(st, s);
    buf[sizeof buf - 1] = '\0';
    return PyUnicode_FromString(buf);
}

static PyObject *mod_set_num_threads(PyObject *module, PyObject *arg)
{
    fm_state *st = fmpy_module_state(module);
    long long n = 0;
    if (fmpy_int_required("set_num_threads(): ", "n", arg, INT32_MIN, INT32_MAX, &n) < 0)
        return NULL;
    fm_clear_error();
    return none_or_raise(st, fm_context_set_num_threads(st->ctx, (int)n));
}

static PyObject *mod_get_num_threads(PyObject *module, PyObject *unused)
{
    return PyLong_FromLong(fm_context_get_num_threads(fmpy_module_state(module)->ctx));
}

static PyObject *mod_backends(PyObject *module, PyObject *unused)
{
    fm_state *st = fmpy_module_state(module);
    const int n = fm_context_backend_count(st->ctx);
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        const char *name = NULL, *why = NULL;
        fm_device_type dev = FM_DEVICE_AUTO;
        int avail = 0;
        fm_clear_error();
        fm_status s = fm_context_backend_info(st->ctx, i, &name, &dev, &avail, &why);
        if (s != FM_OK) {
            Py_DECREF(list);
            return fmpy_raise_status(st, s);
        }
        PyObject *whyo = avail || !why || !why[0]
                             ? Py_NewRef(Py_None)
                             : PyUnicode_DecodeUTF8(why, (Py_ssize_t)strlen(why), "replace");
        PyObject *item = whyo ? Py_BuildValue("(ssNN)", name ? name : "?", fmpy_device_name((int32_t)dev),
                                              PyBool_FromLong(avail), whyo)
                              : NULL;
        if (item)
            PyList_SetItem(list, i, item);
        else
            Py_CLEAR(list);
    }
    return list;
}

static PyObject *mod_blas_info(PyObject *module, PyObject *unused) { return PyUnicode_FromString(fm_blas_info()); }

static PyObject *mod_cuda_device_count(PyObject *module, PyObject *unused)
{
    int n;
    Py_BEGIN_ALLOW_THREADS
    n = fm_cuda_device_count();
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(n);
}

static PyObject *mod_clear_cache(PyObject *module, PyObject *unused)
{
    fm_context *ctx = fmpy_module_state(module)->ctx;
    Py_BEGIN_ALLOW_THREADS /* releasing plans can wait on FFTW's planner lock; malloc_trim takes time */
    fm_context_clear_cache(ctx);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *mod_cache_size(PyObject *module, PyObject *unused)
{
    return PyLong_FromLong(fm_context_cache_size(fmpy_module_state(module)->ctx));
}

static PyObject *mod_cache_bytes(PyObject *module, PyObject *unused)
{
    return PyLong_FromLongLong(fm_context_cache_bytes(fmpy_module_state(module)->ctx));
}

static PyObject *mod_set_cache_max_bytes(PyObject *module, PyObject *arg)
{
    fm_state *st = fmpy_module_state(module);
    long long n = 0;
    if (fmpy_int_required("set_cache_max_bytes(): ", "max_bytes", arg, INT64_MIN, INT64_MAX, &n) < 0)
        return NULL;
    const long long previous = fm_context_cache_max_bytes(st->ctx);
    fm_status s;
    Py_BEGIN_ALLOW_THREADS /* (evicted plans are released here) */
    fm_clear_error();
    s = fm_context_set_cache_max_bytes(st->ctx, n);
    Py_END_ALLOW_THREADS
    return s == FM_OK ? PyLong_FromLongLong(previous) : fmpy_raise_status(st, s);
}

/* The context's FUSEMATH_LOG=plan lines go to logging.getLogger("fusemath") (level INFO) when it or
 * an ancestor has a handler, else to stderr as the C library writes them, so FUSEMATH_LOG=plan alone
 * still prints. Called on the planning thread, which may or may not hold the GIL. */
static void log_to_python(const char *line, void *user)
{
    (void)user;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *et, *ev, *etb; /* a pending exception of the caller survives the call */
    PyErr_Fetch(&et, &ev, &etb);
    PyObject *logging = PyImport_ImportModule("logging");
    PyObject *logger = logging ? PyObject_CallMethod(logging, "getLogger", "s", "fusemath") : NULL;
    PyObject *has = logger ? PyObject_CallMethod(logger, "hasHandlers", NULL) : NULL;
    PyObject *r = NULL;
    /* (a line may quote a path that is not UTF-8, or end mid-character where it was cut at 1 KiB) */
    PyObject *text = has ? PyUnicode_DecodeUTF8(line, (Py_ssize_t)strlen(line), "backslashreplace") : NULL;
    if (text && PyObject_IsTrue(has) == 1)
        r = PyObject_CallMethod(logger, "info", "O", text);
    else
        fprintf(stderr, "fusemath[plan] %s\n", line);
    Py_XDECREF(text);
    if (PyErr_Occurred())
        PyErr_WriteUnraisable(logger); /* a failing handler must not fail the planning */
    PyErr_Clear();
    Py_XDECREF(r);
    Py_XDECREF(has);
    Py_XDECREF(logger);
    Py_XDECREF(logging);
    PyErr_Restore(et, ev, etb);
    PyGILState_Release(gil);
}

/* wisdom_save(path) / wisdom_load(path) / wisdom_size(): autotune results as a file. */
static PyObject *wisdom_io(PyObject *module, PyObject *arg, int save)
{
    fm_state *st = fmpy_module_state(module);
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    const char *path = PyBytes_AsString(bytes);
    fm_status s = FM_OK;
    if (path) {
        Py_BEGIN_ALLOW_THREADS
        fm_clear_error();
        s = save ? fm_context_wisdom_save(st->ctx, path) : fm_context_wisdom_load(st->ctx, path);
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(bytes);
    return path ? none_or_raise(st, s) : NULL;
}

static PyObject *mod_wisdom_save(PyObject *module, PyObject *arg) { return wisdom_io(module, arg, 1); }
static PyObject *mod_wisdom_load(PyObject *module, PyObject *arg) { return wisdom_io(module, arg, 0); }
static PyObject *mod_wisdom_size(PyObject *module, PyObject *unused)
{
    return PyLong_FromLong(fm_context_wisdom_size(fmpy_module_state(module)->ctx));
}

static PyObject *mod_wisdom_forget(PyObject *module, PyObject *unused)
{
    fm_state *st = fmpy_module_state(module);
    fm_clear_error();
    return none_or_raise(st, fm_context_wisdom_forget(st->ctx));
}

/* calibrate(quick, progress): fm_context_calibrate with the GIL released; progress(fraction, what)
 * is called with it held, and an exception it raises (KeyboardInterrupt from Ctrl-C included) stops
 * the calibration, leaving the profile as it was, and is raised from here. */
typedef struct calibration_call {
    PyObject *progress;       /* callable or None */
    PyObject *et, *ev, *etb;  /* the exception that stopped it */
} calibration_call;

static int calibration_progress(void *user, double fraction, const char *what)
{
    calibration_call *c = user;
    PyGILState_STATE gil = PyGILState_Ensure();
    int stop = PyErr_CheckSignals() < 0;
    if (!stop && c->progress != Py_None) {
        PyObject *r = PyObject_CallFunction(c->progress, "ds", fraction, what);
        stop = r == NULL;
        Py_XDECREF(r);
    }
    if (stop && !c->et)
        PyErr_Fetch(&c->et, &c->ev, &c->etb);
    PyErr_Clear();
    PyGILState_Release(gil);
    return stop;
}

static PyObject *mod_calibrate(PyObject *module, PyObject *args)
{
    fm_state *st = fmpy_module_state(module);
    int quick = 1;
    calibration_call c = {Py_None, NULL, NULL, NULL};
    if (!PyArg_ParseTuple(args, "pO:calibrate", &quick, &c.progress))
        return NULL;
    fm_status s;
    Py_BEGIN_ALLOW_THREADS
    fm_clear_error();
    s = fm_context_calibrate(st->ctx, quick, calibration_progress, &c);
    Py_END_ALLOW_THREADS
    if (c.et) {
        PyErr_Restore(c.et, c.ev, c.etb);
        return NULL;
    }
    return none_or_raise(st, s);
}

static PyObject *mod_profile_text(PyObject *module, PyObject *unused)
{
    fm_state *st = fmpy_module_state(module);
    char text[16384];
    fm_status s = fm_context_profile_text(st->ctx, text, sizeof text);
    return s == FM_OK ? PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "backslashreplace")
                      : fmpy_raise_status(st, s);
}

static PyObject *mod_profile_clear(PyObject *module, PyObject *unused)
{
    fm_state *st = fmpy_module_state(module);
    fm_status s;
    Py_BEGIN_ALLOW_THREADS /* (the cache's plans are released here) */
    fm_clear_error();
    s = fm_context_profile_clear(st->ctx);
    Py_END_ALLOW_THREADS
    return none_or_raise(st, s);
}

static PyObject *mod_relu_mask_row_bytes(PyObject *module, PyObject *arg)
{
    long long n = 0;
    if (fmpy_int_required("relu_mask_row_bytes(): ", "n", arg, 0, INT64_MAX / 2, &n) < 0)
        return NULL;
    return PyLong_FromLongLong(fm_relu_mask_row_bytes(n));
}

static PyObject *mod_status_name(PyObject *module, PyObject *arg)
{
    long long n = 0;
    if (fmpy_int_required("status_name(): ", "status", arg, INT32_MIN, INT32_MAX, &n) < 0)
        return NULL;
    return PyUnicode_FromString(fm_status_name((fm_status)n));
}

#define FASTCALL(f) (PyCFunction)(void (*)(void))(f)

static PyMethodDef module_methods[] = {
    {"call", FASTCALL(fmpy_mod_call), METH_FASTCALL, fmpy_call_doc},
    {"tensor_info", FASTCALL(fmpy_mod_tensor_info), METH_FASTCALL, fmpy_tensor_info_doc},
    {"data_ptr", fmpy_mod_data_ptr, METH_O, fmpy_data_ptr_doc},
    {"lib_empty", FASTCALL(fmpy_mod_lib_empty), METH_FASTCALL, fmpy_lib_empty_doc},
    {"current_stream", FASTCALL(fmpy_mod_current_stream), METH_FASTCALL, fmpy_current_stream_doc},
    {"register_array_library", FASTCALL(fmpy_mod_register_array_library), METH_FASTCALL, fmpy_register_doc},
    {"lib_uses_dlpack_c_api", fmpy_mod_lib_uses_dlpack_c_api, METH_O, fmpy_lib_uses_dlpack_c_api_doc},
    {"make_runner", FASTCALL(fmpy_mod_make_runner), METH_FASTCALL,
     "make_runner(plan, keep, ptrs, lib, device, outs, scalar, where)\n--\n\n"
     "Bind a plan of any operation to operand addresses (ptrs: in slot order, outputs None, trailing ones\n"
     "may be left out); .run(stream, out) allocates the results (outs: call()'s output specs, out='s first)\n"
     "with library `lib` on `device` and executes. where: the caller's name in messages."},
    {"epilogue_parse", mod_epilogue_parse, METH_O,
     "epilogue_parse(text)\n--\n\nEpilogue bits for 'relu', 'bias+gelu', 'RELU_AUX_BIAS', 'DGELU_BGRAD', ... "
     "(ValueError if unknown)."},
    {"epilogue_format", mod_epilogue_format, METH_O,
     "epilogue_format(bits)\n--\n\nCanonical name of epilogue bits ('bias+relu', 'identity'); ValueError for an "
     "invalid chain."},
    {"set_num_threads", mod_set_num_threads, METH_O,
     "set_num_threads(n)\n--\n\nCPU threads of the library; n <= 0 restores the default."},
    {"get_num_threads", mod_get_num_threads, METH_NOARGS,
     "get_num_threads()\n--\n\nThe number of CPU threads the library uses."},
    {"backends", mod_backends, METH_NOARGS,
     "backends()\n--\n\nList of (name, device, available, why) for the registered backends."},
    {"blas_info", mod_blas_info, METH_NOARGS,
     "blas_info()\n--\n\nWhich OpenBLAS the CPU backends call: version, core and why it was chosen (the linked\n"
     "one, or, where that one runs generic kernels on this CPU, the scipy-openblas32 wheel's or FUSEMATH_BLAS's)."},
    {"cuda_device_count", mod_cuda_device_count, METH_NOARGS,
     "cuda_device_count()\n--\n\nNumber of usable CUDA devices; 0 without a CUDA build, driver or GPU."},
    {"clear_cache", mod_clear_cache, METH_NOARGS,
     "clear_cache()\n--\n\nDrop the library's cached plans and return their memory (plans held by Matmul objects\n"
     "stay valid)."},
    {"wisdom_save", mod_wisdom_save, METH_O, "wisdom_save(path)\n--\n\nWrite the autotune results to path."},
    {"wisdom_load", mod_wisdom_load, METH_O, "wisdom_load(path)\n--\n\nMerge autotune results from path."},
    {"wisdom_size", mod_wisdom_size, METH_NOARGS, "wisdom_size()\n--\n\nNumber of autotune results held."},
    {"wisdom_forget", mod_wisdom_forget, METH_NOARGS,
     "wisdom_forget()\n--\n\nDrop the autotune results and the backends' planning knowledge."},
    {"calibrate", mod_calibrate, METH_VARARGS,
     "calibrate(quick, progress)\n--\n\nMeasure the machine profile execution='best' predicts from."},
    {"profile_text", mod_profile_text, METH_NOARGS, "profile_text()\n--\n\nThe machine profile, as text."},
    {"profile_clear", mod_profile_clear, METH_NOARGS, "profile_clear()\n--\n\nBack to the built-in model."},
    {"cache_size", mod_cache_size, METH_NOARGS, "cache_size()\n--\n\nNumber of plans in the library's cache."},
    {"cache_bytes", mod_cache_bytes, METH_NOARGS,
     "cache_bytes()\n--\n\nEstimated host memory of the cached plans (their backends' estimates, e.g. FFTW's\n"
     "plans), in bytes."},
    {"set_cache_max_bytes", mod_set_cache_max_bytes, METH_O,
     "set_cache_max_bytes(max_bytes)\n--\n\nCap the plan cache by its plans' footprint (default FUSEMATH_CACHE_MAX_MB,\n"
     "else 256 MiB), besides its cap of 1024 plans; returns the previous cap. The oldest plans are evicted\n"
     "first; the newest stays even when it alone is over the cap."},
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

/* OP_<OP>, and per slot <OP>_<SLOT> and <OP>_NSLOTS ("MATMUL_BIAS", "FFT_NSLOTS"), from the
 * core's table of operations (those with slots: the ones it implements). */
static int add_op_constants(PyObject *m)
{
    for (int op = 0; op < FM_OP_COUNT_; op++) {
        const int n = fm_op_slot_count((fm_op)op);
        for (int slot = n > 0 ? -2 : n; slot < n; slot++) {
            char name[64];
            const char *form = slot == -2 ? "OP_%s" : slot == -1 ? "%s_NSLOTS" : "%s_%s";
            const char *slot_name = slot >= 0 ? fm_op_slot_name((fm_op)op, slot) : "";
            snprintf(name, sizeof name, form, fm_op_name((fm_op)op), slot_name);
            for (char *c = name; *c; c++)
                *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
            if (add_int(m, name, slot == -2 ? op : slot == -1 ? n : slot) < 0)
                return -1;
        }
    }
    return 0;
}

/* The scipy-openblas32 wheel's OpenBLAS, when installed, is offered to the core (fm_blas_offer),
 * which uses it where it is newer than the linked one or the linked one does not know this CPU; its
 * absence is no error. Found through importlib.util.find_spec, not imported: importing the wheel's
 * module loads its library (RTLD_GLOBAL), and the core would then find it shared and leave it. */
static void offer_wheel_blas(void)
{
    PyObject *util = PyImport_ImportModule("importlib.util");
    PyObject *spec = util ? PyObject_CallMethod(util, "find_spec", "s", "scipy_openblas32") : NULL;
    PyObject *where = spec && spec != Py_None ? PyObject_GetAttrString(spec, "submodule_search_locations") : NULL;
    PyObject *dir = where ? PySequence_GetItem(where, 0) : NULL;
    PyObject *path = dir && PyUnicode_Check(dir) ? PyUnicode_FromFormat("%U/lib/libscipy_openblas.so", dir) : NULL;
    const char *p = path ? PyUnicode_AsUTF8AndSize(path, NULL) : NULL;
    if (p && fm_blas_offer(p) != FM_OK)
        fm_clear_error();
    PyErr_Clear();
    Py_XDECREF(path);
    Py_XDECREF(dir);
    Py_XDECREF(where);
    Py_XDECREF(spec);
    Py_XDECREF(util);
}

/* The constants the module exports under the names fusemath.h gives them, less the FM_ prefix. */
#define FM_CONSTANTS(X) \
    X(MAX_NDIM) X(EPILOGUE_DEFAULT) X(EPILOGUE_BIAS) X(EPILOGUE_RELU) X(EPILOGUE_GELU) X(EPILOGUE_AUX) \
    X(EPILOGUE_SIGMOID) X(EPILOGUE_TANH) X(EPILOGUE_SILU) X(EPILOGUE_CLAMP) X(EPILOGUE_DRELU) X(EPILOGUE_DGELU) \
    X(EPILOGUE_BGRAD) X(EPILOGUE_BGRADA) X(EPILOGUE_BGRADB) X(EPILOGUE_SCALE) X(EPILOGUE_DROPOUT) \
    X(EPILOGUE_DDROPOUT) X(EXECUTION_AUTO) X(EXECUTION_CPU) X(EXECUTION_CUDA) X(EXECUTION_BEST) \
    X(CPU_STRATEGY_AUTO) X(CPU_STRATEGY_TILES) X(CPU_STRATEGY_BLAS_THREADS) X(CPU_STRATEGY_KERNEL) \
    X(COMPUTE_DEFAULT) X(COMPUTE_TF32) X(FFT_C2C) X(FFT_R2C) X(FFT_C2R) X(FFT_NORM_BACKWARD) X(FFT_NORM_ORTHO) \
    X(FFT_NORM_FORWARD) X(FFT_EFFORT_ESTIMATE) X(FFT_EFFORT_MEASURE) X(FFT_EFFORT_PATIENT) X(FFT_PROLOG_AUTO) \
    X(FFT_PROLOG_PASS) X(FFT_PROLOG_CALLBACK) X(FFT_PROLOG_KERNEL) X(FFT_OP_SCALE) X(FFT_OP_MULTIPLY) \
    X(FFT_OP_CONJ) X(FFT_OP_CALLBACK) X(RNG_UNIFORM) X(RNG_NORMAL) X(RNG_LOGNORMAL) X(RNG_EXPONENTIAL) X(RNG_RAW) \
    X(RNG_INTEGERS) X(RNG_POISSON) X(RNG_PORTABLE) X(RNG_CURAND) X(SOLVE_GESV) X(SOLVE_GETRF) X(SOLVE_GETRS) \
    X(SOLVE_POTRF) X(SOLVE_POTRS) X(SOLVE_TRTRS) X(SOLVE_INV) X(SOLVE_DET) X(SOLVE_SLOGDET) X(SOLVE_SYEVD) \
    X(SOLVE_GEQRF) X(SOLVE_GESDD) X(SOLVE_GELSD)

static int module_exec(PyObject *m)
{
    fm_state *st = fmpy_module_state(m);
    if (fmpy_make_errors(m, st) < 0)
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

    offer_wheel_blas();
    fm_context *ctx = NULL;
    fm_status s = fm_context_create(&ctx);
    if (s != FM_OK) {
        const char *detail = fm_last_error();
        PyErr_Format(PyExc_ImportError, "fusemath: cannot create the library context: %s",
                     detail && detail[0] ? detail : fm_status_string(s));
        return -1;
    }
    st->ctx = ctx;
    fm_context_set_log_sink(ctx, log_to_python, NULL);
    /* the extension's one environment variable, read where the library reads its own */
    const char *dlpack_env = getenv("FUSEMATH_DLPACK_C_API");
    st->dlpack_c_api = !(dlpack_env && strcmp(dlpack_env, "0") == 0);

    st->plan_type = PyType_FromModuleAndSpec(m, &fmpy_plan_spec, NULL);
    if (!st->plan_type || PyModule_AddObjectRef(m, "Plan", st->plan_type) < 0)
        return -1;
    st->runner_type = PyType_FromModuleAndSpec(m, &fmpy_runner_spec, NULL);
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
#define X_CONST(n) {#n, FM_##n},
        FM_CONSTANTS(X_CONST)
#undef X_CONST
        {"CALL_RUN", FMPY_RUN}, {"CALL_SPECS", FMPY_SPECS}, {"CALL_PLAN", FMPY_PLAN}, {"CALL_TUNE", FMPY_TUNE},
        {"STYLE_NUMPY", STYLE_NUMPY}, {"STYLE_TORCH", STYLE_TORCH}, {"STYLE_CUPY", STYLE_CUPY},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (add_int(m, ints[i].name, i == 0 ? (long long)fm_version_number() : ints[i].value) < 0)
            return -1;
    return add_op_constants(m);
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    fm_state *st = fmpy_module_state(m);
    if (!st)
        return 0;
#define X_VISIT(f) Py_VISIT(st->f);
    FM_STATE_OBJECTS(X_VISIT)
#undef X_VISIT
    for (int i = 0; i < FM_STATUS_COUNT_; i++)
        Py_VISIT(st->errors[i]);
    for (int i = 0; i < st->nlibs; i++) {
        int r = fmpy_lib_traverse(&st->libs[i], visit, arg);
        if (r)
            return r;
    }
    return 0;
}

/* Drops Python references only; the context is destroyed in module_free, when no
 * Plan can reference it any more (each Plan holds the module). */
static int module_clear(PyObject *m)
{
    fm_state *st = fmpy_module_state(m);
    if (!st)
        return 0;
#define X_CLEAR(f) Py_CLEAR(st->f);
    FM_STATE_OBJECTS(X_CLEAR)
#undef X_CLEAR
    for (int i = 0; i < FM_STATUS_COUNT_; i++)
        Py_CLEAR(st->errors[i]);
    for (int i = 0; i < S_COUNT; i++)
        Py_CLEAR(st->s[i]);
    for (int i = 0; i < st->nlibs; i++)
        fmpy_lib_clear(&st->libs[i]);
    st->nlibs = 0;
    return 0;
}

static void module_free(void *m)
{
    fm_state *st = fmpy_module_state((PyObject *)m);
    if (!st)
        return;
    module_clear((PyObject *)m);
    fm_context_set_log_sink(st->ctx, NULL, NULL); /* plans outliving the module log to stderr */
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
