/* fmpy_array_matmul.c : array_matmul, the stateless matmul behind fusemath.matmul for
 * arrays of a registered library: NumPy semantics (1-D promotion, batch broadcast),
 * results allocated with that library. */
#include "fmpy.h"

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
    fmpy_shape_text(t->shape, t->ndim, got, sizeof got);
    fmpy_shape_text(want, n, exp, sizeof exp);
    PyErr_Format(fmpy_error_class(st, FM_ERR_SHAPE), "matmul: %s has shape %s, expected %s%s", name, got, exp, hint);
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

int fmpy_device_index(const fm_tensor *t) { return t->device.type == FM_DEVICE_CUDA ? t->device.id : -1; }

enum {
    X_LIB, X_A, X_B, X_C, X_BIAS, X_SCALE, X_AUX, X_OUT, X_ALPHA, X_BETA, X_EPI, X_EXEC, X_DEV, X_NTH, X_PANEL,
    X_STRAT, X_COMPUTE, X_CLAMP, X_STREAM, X_ASCALE, X_BSCALE, X_COUNT
};

FMPY_DOC_VAR(fmpy_array_matmul_doc,
             "array_matmul(lib, a, b, c, bias, scale, aux, out, alpha, beta, epilogue, execution, device_id,\n"
             "             num_threads, panel_rows, cpu_strategy, compute, clamp, stream, a_scale, b_scale)\n--\n\n"
             "The stateless matmul of fusemath.matmul for arrays of a registered library, in one C call\n"
             "(all arguments positional): NumPy matmul semantics (1-D promotion, batch broadcast); the\n"
             "results are allocated with library `lib` on the device of the operand of that library; GPU\n"
             "work is queued on `stream` (None: the library's current stream) without synchronizing.\n"
             "aux is the relu_aux / gelu_aux input of drelu / dgelu. a_scale / b_scale: fp8 scale factors\n"
             "(one-element float32 arrays on the device, or None). fp8 a and b give a bfloat16 result\n"
             "unless out says otherwise. Returns d or (d, {key: extra}).");

PyObject *fmpy_mod_array_matmul(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    fm_state *st = fmpy_module_state(module);
    if (nargs != X_COUNT) {
        PyErr_Format(PyExc_TypeError, "array_matmul() takes %d arguments (%zd given)", (int)X_COUNT, nargs);
        return NULL;
    }
    int li;
    if (fmpy_lib_index_arg(st, "array_matmul", args[X_LIB], &li) < 0)
        return NULL;
    const fm_lib *lib = &st->libs[li];
    opt_objs oo = {args[X_ALPHA], args[X_BETA], args[X_EPI], args[X_EXEC], args[X_DEV], args[X_NTH],
                   args[X_PANEL], args[X_STRAT], args[X_COMPUTE], args[X_CLAMP]};
    fm_matmul_options opts;
    if (fmpy_fill_options(st, "matmul(): ", &oo, &opts) < 0)
        return NULL;
    const unsigned epi = opts.epilogue;

    fm_tensor tens[FM_MATMUL_NSLOTS];
    fm_hold holds[FM_MATMUL_NSLOTS];
    const fm_tensor *tp[FM_MATMUL_NSLOTS];
    int libs[FM_MATMUL_NSLOTS];
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++) {
        fmpy_hold_init(&holds[i]);
        tp[i] = NULL;
        libs[i] = -1;
    }
    PyObject *res[3] = {NULL, NULL, NULL}; /* d, aux, bgrad */
    PyObject *override = NULL, *result = NULL;
    fm_status s;

    fm_tensor *ta = &tens[FM_MATMUL_A], *tb = &tens[FM_MATMUL_B];
    if (fmpy_tensor_from_any(st, args[X_A], "a", 0, ta, &holds[FM_MATMUL_A], &libs[FM_MATMUL_A]) < 0 ||
        fmpy_tensor_from_any(st, args[X_B], "b", 0, tb, &holds[FM_MATMUL_B], &libs[FM_MATMUL_B]) < 0)
        goto done;
    tp[FM_MATMUL_A] = ta;
    tp[FM_MATMUL_B] = tb;
    if (ta->ndim == 0 || tb->ndim == 0) {
        PyErr_Format(fmpy_error_class(st, FM_ERR_SHAPE),
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
        fmpy_raise_status(st, s);
        goto done;
    }
    if (nd > FM_MAX_NDIM) {
        PyErr_Format(fmpy_error_class(st, FM_ERR_SHAPE), "matmul: the result would have %d dimensions, at most %d", nd,
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
            if (fmpy_tensor_from_any(st, args[X_OUT], "out", 1, &probe, &hp, NULL) < 0)
                goto done;
            fmpy_hold_release(&hp);
            dt = probe.dtype;
        }
    }
    for (int i = 0; i < 2; i++) {
        int x = i ? X_BSCALE : X_ASCALE, sl = i ? FM_MATMUL_B_SCALE : FM_MATMUL_A_SCALE;
        if (args[x] == Py_None)
            continue;
        if (fmpy_tensor_from_any(st, args[x], fmpy_slot_names[sl], 0, &tens[sl], &holds[sl], &libs[sl]) < 0)
            goto done;
        tp[sl] = &tens[sl];
    }

    if (args[X_OUT] != Py_None) {
        fm_tensor *td = &tens[FM_MATMUL_D];
        if (fmpy_tensor_from_any(st, args[X_OUT], "out", 1, td, &holds[FM_MATMUL_D], &libs[FM_MATMUL_D]) < 0)
            goto done;
        if (!same_shape(td, rshape, rnd)) {
            shape_mismatch(st, "out", td, rshape, rnd, "");
            goto done;
        }
        if (td->dtype != dt) {
            PyErr_Format(fmpy_error_class(st, FM_ERR_INVALID_ARGUMENT),
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
        dev = fmpy_device_index(ta);
    else if (libs[FM_MATMUL_B] == li)
        dev = fmpy_device_index(tb);
    else if (lib->style != STYLE_NUMPY) {
        PyErr_Format(PyExc_ValueError, "array_matmul(): neither a nor b is an array of %U", lib->name);
        goto done;
    }

    if (args[X_C] != Py_None) {
        fm_tensor *tc = &tens[FM_MATMUL_C];
        if (fmpy_tensor_from_any(st, args[X_C], "c", 0, tc, &holds[FM_MATMUL_C], &libs[FM_MATMUL_C]) < 0)
            goto done;
        if (tc->ndim > rnd) {
            char cs[160], rs[160];
            fmpy_shape_text(tc->shape, tc->ndim, cs, sizeof cs);
            fmpy_shape_text(rshape, rnd, rs, sizeof rs);
            PyErr_Format(fmpy_error_class(st, FM_ERR_SHAPE),
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
        if (fmpy_tensor_from_any(st, args[vec_inputs[i].x], vec_inputs[i].name, 0, &tens[sl], &holds[sl], &libs[sl]) < 0)
            goto done;
        tp[sl] = &tens[sl];
    }
    if (args[X_AUX] != Py_None) {
        fm_tensor *tx = &tens[FM_MATMUL_AUX];
        const int mask = (epi & FM_EPILOGUE_DRELU) != 0;
        const char *name = mask ? "relu_aux" : "gelu_aux";
        if (fmpy_tensor_from_any(st, args[X_AUX], name, 0, tx, &holds[FM_MATMUL_AUX], &libs[FM_MATMUL_AUX]) < 0)
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
                PyErr_Format(fmpy_error_class(st, FM_ERR_DTYPE), "matmul: %s has dtype %s, expected %s", name,
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
    if (fmpy_resolve_stream(st, "matmul(): ", li, dev, args[X_STREAM], allocating, &stream, &override) < 0)
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
        void *ptr = NULL;
        res[k] = fmpy_lib_alloc_dims(st, li, ret, nret, odt, dev, override, fmpy_slot_names[sl], &ptr);
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
        fmpy_raise_status(st, s);
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
    fmpy_release_slots(holds);
    Py_XDECREF(override);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(res[i]);
    return result;
}
