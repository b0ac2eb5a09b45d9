/* fmpy_solve.c : the dense solvers' part of call() (fmpy_solve_def): their options from Python
 * objects, the Python names of the slots, and NumPy's vector right-hand side (a 1-D b is a column
 * whose axis the solution drops). The routines' meaning and every check are the core's
 * (core/src/solve_problem.c); fusemath.linalg turns numpy.linalg's keywords into these options. */
#include "fmpy.h"

/* options: routine, uplo, transpose, unit_diagonal, check, check_finite, qr_mode, full_matrices,
 * values_only, rcond, execution, device_id, num_threads, refine, trusted_factor */
#define SOLVE_NOPTS 15
#define SOLVE_VECTOR_B 1u /* c->flags: b came 1-D */

static int solve_fill(fmpy_call *c, PyObject *const *o)
{
    fm_solve_options *opt = &c->o.solve;
    fm_solve_options_init(opt);
    static const char *const names[] = {"routine", "uplo", "transpose", "unit_diagonal", "check", "check_finite",
                                        "qr_mode", "full_matrices", "values_only"};
    int32_t *fields[] = {&opt->routine, &opt->uplo, &opt->transpose, &opt->unit_diagonal, &opt->check,
                         &opt->check_finite, &opt->qr_mode, &opt->full_matrices, &opt->values_only};
    for (int i = 0; i < 9; i++) { /* ranges are the core's checks; these only fit the fields */
        long long v = *fields[i];
        if (fmpy_int_arg(c->prefix, names[i], o[i], INT32_MIN, INT32_MAX, &v) < 0)
            return -1;
        *fields[i] = (int32_t)v;
    }
    double rc[2] = {opt->rcond, 0};
    if (fmpy_number_arg(c->prefix, "rcond", o[9], rc) < 0)
        return -1;
    opt->rcond = rc[0];
    static const char *const more[] = {"execution", "device_id", "num_threads", "refine", "trusted_factor"};
    int32_t *mf[] = {&opt->execution, &opt->device_id, &opt->num_threads, &opt->refine, &opt->trusted_factor};
    for (int i = 0; i < 5; i++) {
        long long v = *mf[i];
        if (fmpy_int_arg(c->prefix, more[i], o[10 + i], INT32_MIN, INT32_MAX, &v) < 0)
            return -1;
        *mf[i] = (int32_t)v;
    }
    return 0;
}

static const char *solve_argname(const fmpy_call *c, int slot)
{
    (void)c;
    return slot == FM_SOLVE_IPIV ? "piv" : fm_op_slot_name(FM_OP_SOLVE, slot);
}

static int solve_writable(const fmpy_call *c, int slot)
{
    (void)c;
    return fm_op_slot_role(FM_OP_SOLVE, slot) == FM_SLOT_OUTPUT;
}

/* NumPy's rule: a 1-D b is one right-hand side (n,) -> (n, 1); x then has b's shape. */
static int solve_prepare(fmpy_call *c)
{
    fm_tensor *b = &c->tens[FM_SOLVE_B];
    if (!c->tp[FM_SOLVE_B] || b->ndim != 1)
        return 0;
    c->flags |= SOLVE_VECTOR_B;
    return fmpy_insert_axis(c, b, 1);
}

static unsigned solve_dropped(const fmpy_call *c, int slot)
{
    return (c->flags & SOLVE_VECTOR_B) && slot == FM_SOLVE_X ? 1u : 0u;
}

/* A tuple of the ten slots: the outputs written, None elsewhere. */
static PyObject *solve_result(fmpy_call *c)
{
    PyObject *t = PyTuple_New(FM_SOLVE_NSLOTS);
    for (int i = 0; t && i < FM_SOLVE_NSLOTS; i++)
        PyTuple_SetItem(t, i, Py_NewRef(c->written >> i & 1u && c->res[i] ? c->res[i] : Py_None));
    return t;
}

const fmpy_opdef fmpy_solve_def = {
    .op = FM_OP_SOLVE,
    .fname = "solve",
    .nopts = SOLVE_NOPTS,
    .out_dtype_status = FM_ERR_DTYPE,
    .out_dtype_hint = "",
    .dtype_hint = "expected float32, float64, complex64 or complex128",
    .fill = solve_fill,
    .argname = solve_argname,
    .writable = solve_writable,
    .prepare = solve_prepare,
    .dropped = solve_dropped,
    .result = solve_result,
};
