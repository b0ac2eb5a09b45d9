/*
 * fmpy.h : what the source files of the CPython extension module fusemath._fusemath
 * (python/src/fmpy_*.c) share; private to the extension, never installed.
 *
 * Limited API (abi3, Python >= 3.11) only; how arrays come in (buffer protocol, registered
 * array libraries, DLPack's C exchange API, __cuda_array_interface__, DLPack capsules), how
 * results are allocated with the caller's library and how errors map to exception classes is
 * told in docs/design.md ("Python front"). The module state owns one fm_context, created at
 * exec and destroyed when the module is freed; every Plan keeps a strong reference to the
 * module so the context outlives the plans made in it.
 *
 * The files, one topic each:
 *   fmpy_module.c         the method table, the module lifecycle, small module functions
 *   fmpy_args.c           the exception classes and raising them; small argument helpers
 *   fmpy_tensor.c         array objects -> fm_tensor (buffer, registered libraries, CAI)
 *   fmpy_dlpack.c         DLPack capsules and DLPack's C exchange API (the fast path of libraries)
 *   fmpy_libs.c           register_array_library; allocation and streams through a library
 *   fmpy_plan.c           the Plan type; the Runner (a plan bound to its operands: Matmul.execute)
 *   fmpy_call.c           call(): every operation's stateless call, output specs, plan, autotune
 *   fmpy_array_matmul.c   matmul's part of call() (fmpy_matmul_def): options, NumPy's 1-D promotion
 *   fmpy_fft.c            FFT's part of call() (fmpy_fft_def): options, argument names
 *   fmpy_rng.c            the RNG's part of call() (fmpy_rng_def): options, the stream position
 *   fmpy_solve.c          the dense solvers' part of call() (fmpy_solve_def): options, 1-D b
 */
#ifndef FMPY_H
#define FMPY_H

#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fusemath/fusemath.h>

/* ------------------------------------------------------------------------ */
/* DLPack: the stable ABI, declared here so no header is needed.            */
/* ------------------------------------------------------------------------ */
enum { DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3, DL_CUDA_MANAGED = 13 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_OPAQUE = 3, DL_BFLOAT = 4, DL_COMPLEX = 5, DL_BOOL = 6 };

typedef struct {
    int32_t device_type;
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL = compact row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define DLPACK_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_IS_COPIED (UINT64_C(1) << 1)

/* DLPack's C exchange API (dlpack.h, DLPackExchangeAPI; major version 1): a table of C
 * functions an array library publishes as __dlpack_c_exchange_api__ on its array type. */
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct {
    DLPackExchangeAPIHeader header;
    int (*managed_tensor_allocator)(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                                    void (*set_error)(void *error_ctx, const char *kind, const char *message));
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, DLManagedTensorVersioned **out);
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *tensor, void **out_py_object);
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_current_stream);
} DLPackExchangeAPI;

/* ------------------------------------------------------------------------ */
/* Array libraries and module state.                                        */
/* ------------------------------------------------------------------------ */
/* How a registered library's arrays are read and allocated. */
enum { STYLE_NUMPY = 1, STYLE_TORCH = 2, STYLE_CUPY = 3 };
#define FM_MAX_LIBS 8
#define LIB_KW_DEVICES 16 /* torch.empty keyword dicts cached for cuda:0..15 (and the cpu) */

typedef struct {
    int style;
    int device_count;                  /* CUDA devices the library sees (cupy: device check skipped if 1) */
    PyObject *name;                    /* "numpy", "torch", "cupy", ... */
    PyObject *type;                    /* instances are recognised by isinstance(); NULL for numpy */
    PyObject *dtypes[FM_DTYPE_COUNT_]; /* the library's dtype object per fm dtype (NULL: none) */
    PyObject *empty;                   /* numpy.empty(shape, dtype) / cupy.empty(shape, dtype) / torch.empty */
    PyObject *current_stream;          /* torch: f(device) -> raw int; cupy: f(device) -> Stream (.ptr) */
    PyObject *get_device;              /* cupy: f() -> current device id */
    PyObject *device_obj;              /* torch: f(index) -> torch.device (-1: cpu) */
    PyObject *oom;                     /* the library's out-of-memory exception class (or tuple) */
    PyObject *slow_alloc;              /* f(shape, dtype, device, stream or None): allocation on a
                                          non-current stream or device (Python, slow path) */
    PyObject *kwargs[FM_DTYPE_COUNT_][LIB_KW_DEVICES + 1]; /* torch: {"dtype":, "device":} per device+1 */
    const DLPackExchangeAPI *xapi;     /* the type's DLPack C exchange table, or NULL (fmpy_dlpack.c) */
    PyObject *xapi_capsule;            /* keeps it alive */
} fm_lib;
/* fm_lib's references besides its dtype objects and keyword dicts */
#define FM_LIB_OBJECTS(X)                                                                       \
    X(name) X(type) X(empty) X(current_stream) X(get_device) X(device_obj) X(oom) X(slow_alloc) \
    X(xapi_capsule)

#define INTERNED(X)                                                                                     \
    X(dlpack, "__dlpack__") X(dlpack_device, "__dlpack_device__") X(cai, "__cuda_array_interface__")    \
    X(data_ptr, "data_ptr") X(shape, "shape") X(stride, "stride") X(strides, "strides") X(dtype, "dtype") \
    X(is_cuda, "is_cuda") X(get_device, "get_device") X(is_conj, "is_conj") X(is_neg, "is_neg")         \
    X(data, "data") X(ptr, "ptr") X(device_id, "device_id") X(cuda_stream, "cuda_stream")               \
    X(cuda_stream_proto, "__cuda_stream__") X(device, "device") X(handle, "handle")

enum {
#define X_ENUM(n, s) S_##n,
    INTERNED(X_ENUM)
#undef X_ENUM
    S_COUNT
};

/* The last specs fm_output_specs gave per operation (fmpy_call.c): a stateless call repeated on
 * operands of one layout asks the core once (the run that follows checks everything again). */
#define FMPY_MAX_SLOTS 10
typedef union {
    fm_matmul_options mm;
    fm_fft_options fft;
    fm_rng_options rng;
    fm_solve_options solve;
} fmpy_options;
typedef struct {
    int valid;
    fm_tensor in[FMPY_MAX_SLOTS]; /* the descriptors asked about (data NULL; ndim -1: absent) */
    fmpy_options o;
    fm_tensor specs[FMPY_MAX_SLOTS];
    uint32_t written;
} fmpy_specs_memo;

typedef struct {
    fm_context *ctx;
    int dlpack_c_api; /* FUSEMATH_DLPACK_C_API != "0", read once with the context */
    fmpy_specs_memo memo[FM_OP_COUNT_];
    PyObject *plan_type;
    PyObject *runner_type;
    PyObject *base_error;                  /* FusemathError */
    PyObject *errors[FM_STATUS_COUNT_];    /* class per status; [FM_OK] unused */
    PyObject *s[S_COUNT];                  /* interned attribute names */
    PyObject *empty_tuple;
    PyObject *kw_max_version;              /* {"max_version": (1, 0)} */
    PyObject *kw_cuda_v1;                  /* {"max_version": (1, 0), "stream": 1}: cuda producers */
    PyObject *kw_cuda_legacy;              /* {"stream": 1} */
    int nlibs;
    fm_lib libs[FM_MAX_LIBS];
} fm_state;
/* fm_state's references besides its arrays */
#define FM_STATE_OBJECTS(X) \
    X(plan_type) X(runner_type) X(base_error) X(empty_tuple) X(kw_max_version) X(kw_cuda_v1) X(kw_cuda_legacy)

static inline fm_state *fmpy_module_state(PyObject *module) { return (fm_state *)PyModule_GetState(module); }

/* PyDoc_STRVAR without `static`: the docstring of a function defined in a topic file
 * and listed in the method table of fmpy_module.c (declared below, by file). */
#define FMPY_DOC_VAR(name, str) const char name[] = PyDoc_STR(str)

/* ------------------------------------------------------------------------ */
/* fmpy_args.c: exception classes and raising them; argument helpers.       */
/* ------------------------------------------------------------------------ */
PyObject *fmpy_error_class(fm_state *st, fm_status s);
PyObject *fmpy_raise_msg(fm_state *st, fm_status s, const char *msg);
PyObject *fmpy_raise_status(fm_state *st, fm_status s);
PyObject *fmpy_type_name(PyObject *o);
void fmpy_raise_type(PyObject *exc, const char *fmt_prefix, const char *name, const char *what, PyObject *o);
PyObject *fmpy_take_error_text(void);
int fmpy_make_errors(PyObject *m, fm_state *st);
int fmpy_int_arg(const char *fname, const char *name, PyObject *o, long long lo, long long hi, long long *v);
/* -1, with fmpy_int_arg's out-of-range ValueError (if that is the error) turned into the class of the
 * core's refusals (InvalidArgumentError), so an option past its limit is one class whatever its size. */
int fmpy_range_error_class(fm_state *st);
int fmpy_int_required(const char *fname, const char *name, PyObject *o, long long lo, long long hi,
                      long long *v);
int fmpy_number_arg(const char *fname, const char *name, PyObject *o, double z[2]);
int fmpy_ptr_arg(const char *fname, const char *name, PyObject *o, void **p);
int fmpy_stream_from_object(fm_state *st, const char *fname, PyObject *o, void **h);
fm_dtype fmpy_dtype_by_name(PyObject *name);
int fmpy_lib_index_arg(fm_state *st, const char *fname, PyObject *o, int *li);
void fmpy_shape_text(const int64_t *shape, int n, char *buf, size_t size);
PyObject *fmpy_shape_tuple(const int64_t *shape, int n);
void fmpy_device_text(int dev, char *buf, size_t n);

/* ------------------------------------------------------------------------ */
/* Array objects -> fm_tensor: fmpy_tensor.c, fmpy_dlpack.c.                */
/* ------------------------------------------------------------------------ */
enum { HOLD_NONE = 0, HOLD_BUFFER, HOLD_DLPACK, HOLD_DLPACK_V1 };

/* What keeps an operand's memory alive while the library uses it. Registered
 * libraries and __cuda_array_interface__ objects need nothing: the caller holds the
 * object for the duration of the call. */
typedef struct {
    int kind;
    Py_buffer view;
    PyObject *capsule;
    void *managed; /* DLManagedTensor* or DLManagedTensorVersioned*, owned after the rename */
} fm_hold;

void fmpy_hold_init(fm_hold *h);
void fmpy_hold_release(fm_hold *h);
void fmpy_zero_tail(fm_tensor *t);
int fmpy_too_many_dims(const char *name, Py_ssize_t ndim);
int fmpy_dims_from_tuples(const char *name, PyObject *shape, PyObject *strides, Py_ssize_t unit, fm_tensor *t);
PyObject *fmpy_call_method0(PyObject *obj, PyObject *name);
int fmpy_torch_lazy_bits(fm_state *st, PyObject *obj, const char *name, int complex);
int fmpy_tensor_from_any(fm_state *st, PyObject *obj, const char *name, int writable, fm_tensor *t, fm_hold *h,
                         int *lib);
extern const char fmpy_tensor_info_doc[], fmpy_data_ptr_doc[];
PyObject *fmpy_mod_tensor_info(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *fmpy_mod_data_ptr(PyObject *module, PyObject *obj);
/* fmpy_dlpack.c; the exchange table's functions answer 1 (tensor) or Py_NotImplemented (alloc)
 * where it cannot serve the case: the caller takes the library's Python path */
fm_dtype fmpy_dl_dtype(int code, int bits);
const char *fmpy_device_name(int32_t type);
int fmpy_tensor_from_dlpack(fm_state *st, PyObject *obj, PyObject *meth, const char *name, int writable,
                            fm_tensor *t, fm_hold *h);
void fmpy_xapi_attach(fm_lib *lib, int enabled); /* enabled: fm_state.dlpack_c_api */
int fmpy_xapi_tensor(const fm_lib *lib, PyObject *obj, fm_tensor *t);
PyObject *fmpy_xapi_alloc(const fm_lib *lib, const int64_t *shape, int nd, fm_dtype dt, int dev, void **ptr);

/* ------------------------------------------------------------------------ */
/* fmpy_libs.c: registered libraries; allocation and streams through them.  */
/* ------------------------------------------------------------------------ */
void fmpy_lib_clear(fm_lib *lib);
int fmpy_lib_traverse(fm_lib *lib, visitproc visit, void *arg);
int fmpy_lib_alloc_args(fm_state *st, int li, PyObject *shape, fm_dtype dt, int dev, PyObject **args,
                        PyObject **kwargs);
PyObject *fmpy_lib_alloc(fm_state *st, int li, const int64_t *shape, int nd, fm_dtype dt, int dev,
                         PyObject *stream, PyObject *args, PyObject *kwargs, const char *what, void **ptr);
int fmpy_lib_current_stream(fm_state *st, int li, int dev, void **h);
typedef struct {
    PyObject *obj; /* the last explicit stream object (strong), and its handle */
    void *handle;
} fmpy_stream_memo;
int fmpy_resolve_stream(fm_state *st, const char *fname, int li, int dev, PyObject *stream_arg, int allocating,
                        fmpy_stream_memo *memo, void **h, PyObject **override);
extern const char fmpy_lib_empty_doc[], fmpy_current_stream_doc[], fmpy_register_doc[],
    fmpy_lib_uses_dlpack_c_api_doc[];
PyObject *fmpy_mod_lib_empty(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *fmpy_mod_current_stream(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *fmpy_mod_register_array_library(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *fmpy_mod_lib_uses_dlpack_c_api(PyObject *module, PyObject *arg);

/* ------------------------------------------------------------------------ */
/* fmpy_plan.c: the Plan and Runner types.                                  */
/* ------------------------------------------------------------------------ */
typedef struct {
    PyObject_HEAD
    fm_plan *plan;
    PyObject *module; /* strong: the context in its state must outlive the plan */
} PlanObject;

PyObject *fmpy_plan_wrap(fm_state *st, PyObject *module, fm_plan *plan);
extern PyType_Spec fmpy_plan_spec, fmpy_runner_spec;
PyObject *fmpy_mod_make_runner(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

int fmpy_epilogue_arg(fm_state *st, const char *fname, PyObject *o, unsigned *epi); /* fmpy_array_matmul.c */
/* ------------------------------------------------------------------------ */
/* fmpy_call.c: call(), every operation's one entry point, and what an      */
/* operation tells it (fmpy_opdef: fmpy_array_matmul.c, fmpy_fft.c).        */
/* ------------------------------------------------------------------------ */
#define FMPY_MAX_OPTS 24
enum { FMPY_RUN, FMPY_SPECS, FMPY_PLAN, FMPY_TUNE };
typedef struct fmpy_call fmpy_call;
typedef struct {
    fm_op op;
    const char *fname;              /* the prefix of its messages: "matmul" */
    int nopts;                      /* the length of its options tuple */
    fm_status out_dtype_status;     /* the class of "out has dtype X, expected Y" */
    const char *out_dtype_hint;     /* appended to it */
    const char *out_shape_words;    /* the array library's words that begin "out has shape X" (or NULL) */
    int out_overlap_temporary;      /* an out= overlapping an input is computed into a temporary, then copied */
    const char *dtype_hint;         /* appended to an input's unsupported dtype: what it takes */
    int (*fill)(fmpy_call *c, PyObject *const *opts);            /* c->o from the options */
    const char *(*argname)(const fmpy_call *c, int slot);         /* the Python argument of a slot */
    int (*writable)(const fmpy_call *c, int slot);                /* an output slot written by this call */
    int (*prepare)(fmpy_call *c);                                  /* NumPy conventions, after conversion */
    /* Optional, after conversion: where the results live (c->dev) when no input says it (an
     * operation without inputs: the RNG's generator device), and where a given output must be */
    int (*place)(fmpy_call *c);
    unsigned (*dropped)(const fmpy_call *c, int slot);            /* bit k: the k-th axis from the right of
                                                                      the spec is not in the Python array */
    const char *(*key)(const fmpy_call *c, int slot);             /* the result's key of a second output */
    uint32_t (*spec_needs)(const fmpy_call *c);                   /* given outputs the specs depend on */
    PyObject *(*result)(fmpy_call *c);                            /* what a run returns */
} fmpy_opdef;

struct fmpy_call {
    fm_state *st;
    const fmpy_opdef *def;
    const char *where;              /* the caller's name ("fusemath.matmul"), the prefix of messages */
    char prefix[72];                /* where + ": " */
    int nslots, li, dev;            /* dev: the results' cuda device, -1 = host */
    unsigned flags;                 /* the operation's own (matmul: 1-D a / b) */
    uint32_t given, written;        /* output slots given by the caller / written by the operation */
    fmpy_options o;
    PyObject *objs[FMPY_MAX_SLOTS];  /* borrowed from the operands tuple */
    fm_tensor tens[FMPY_MAX_SLOTS], user[FMPY_MAX_SLOTS], specs[FMPY_MAX_SLOTS];
    fm_hold holds[FMPY_MAX_SLOTS];
    const fm_tensor *tp[FMPY_MAX_SLOTS];
    int libs[FMPY_MAX_SLOTS];
    PyObject *res[FMPY_MAX_SLOTS];   /* the outputs: given or allocated */
    fm_exec_args args;               /* per-call arguments, when has_args (the RNG's position) */
    int has_args;
};

extern const fmpy_opdef fmpy_matmul_def, fmpy_fft_def, fmpy_rng_def, fmpy_solve_def;
const fmpy_opdef *fmpy_opdef_of(long op);
int fmpy_insert_axis(fmpy_call *c, fm_tensor *t, int pos);
int fmpy_device_index(const fm_tensor *t);
extern const char fmpy_call_doc[];
PyObject *fmpy_mod_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
