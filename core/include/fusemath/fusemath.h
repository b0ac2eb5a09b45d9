/*
 * fusemath.h : the one public header of libfusemath.
 *
 * fusemath plans matmul, FFT, random-number and dense-solver calls, runs each on
 * the CPU or the GPU according to where the operands live, and fuses the work
 * around the call (scaling, bias, activation) into the call itself.
 *
 * Conventions
 *  - Every function returns an fm_status; FM_OK is 0. On failure a thread-local
 *    detail message is available from fm_last_error() ("matmul: bias has length
 *    255, expected N = 256"). Nothing aborts or exits the process.
 *  - Handles are opaque, created through out-parameters; destroy functions accept
 *    NULL.
 *  - Descriptors (fm_tensor) describe shape, strides, dtype and device. Data
 *    pointers are execute-time arguments: a plan is immutable after planning and
 *    can be executed from several threads at once with different pointers.
 */
#ifndef FUSEMATH_H
#define FUSEMATH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FM_API __declspec(dllexport)
#else
#define FM_API __attribute__((visibility("default")))
#endif

#define FM_VERSION_MAJOR 0
#define FM_VERSION_MINOR 1
#define FM_VERSION_PATCH 0
#define FM_VERSION_NUMBER (FM_VERSION_MAJOR * 10000 + FM_VERSION_MINOR * 100 + FM_VERSION_PATCH)

/*! fm_version_number() : @return FM_VERSION_NUMBER of the library actually loaded. */
FM_API unsigned fm_version_number(void);
/*! fm_version_string() : @return "MAJOR.MINOR.PATCH" of the library actually loaded. */
FM_API const char *fm_version_string(void);

/* ------------------------------------------------------------------------ */
/* Status codes: one table generates the enum, the names and the messages.  */
/* ------------------------------------------------------------------------ */
#define FM_STATUS_TABLE(X)                                                              \
    X(FM_OK, 0, "success")                                                              \
    X(FM_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                   \
    X(FM_ERR_SHAPE, 2, "operand shapes do not match")                                   \
    X(FM_ERR_DTYPE, 3, "unsupported or mismatched dtype")                               \
    X(FM_ERR_DEVICE, 4, "operands are on different devices")                            \
    X(FM_ERR_NOT_SUPPORTED, 5, "not supported by any available backend")                \
    X(FM_ERR_OUT_OF_MEMORY, 6, "out of memory")                                         \
    X(FM_ERR_ALIAS, 7, "an output overlaps an input")                                   \
    X(FM_ERR_TOO_LARGE, 8, "size exceeds the index range of the backend")               \
    X(FM_ERR_BACKEND, 9, "the backend library reported an error")                       \
    X(FM_ERR_UNAVAILABLE, 10, "device or backend unavailable")                          \
    X(FM_ERR_NOT_APPLICABLE, 11, "backend not applicable to this problem")              \
    X(FM_ERR_FREED, 12, "object used after it was freed")                               \
    X(FM_ERR_LINALG, 13, "linear algebra error (singular or not positive definite)")    \
    X(FM_ERR_INTERNAL, 14, "internal error")                                            \
    X(FM_ERR_CANCELLED, 15, "stopped by the caller")

/* The most CPU threads a context setting or a plan may ask for (num_threads, fm_set_num_threads). */
#define FM_MAX_THREADS 4096

typedef enum fm_status {
#define FM_X_ENUM(name, value, message) name = value,
    FM_STATUS_TABLE(FM_X_ENUM)
#undef FM_X_ENUM
    FM_STATUS_COUNT_
} fm_status;

/*! fm_status_name() : @return "FM_ERR_SHAPE" etc.; "FM_UNKNOWN_STATUS" for values outside the table. */
FM_API const char *fm_status_name(fm_status s);
/*! fm_status_string() : @return a one-line human message for the status. */
FM_API const char *fm_status_string(fm_status s);
/*! fm_last_error() : @return the detail message of the most recent failing call on this thread.
 *  Read it right after that call: a later call replaces it when it fails and may clear it ("")
 *  when it succeeds (planning clears what backends that declined left behind). The pointer stays
 *  valid until the next fusemath call on this thread. */
FM_API const char *fm_last_error(void);
/*! fm_last_error_slots() : @return the operand slot the last failure on this thread is about and
 *  in *other (may be NULL) the slot it conflicts with (the same slot: with itself), or -1 for both
 *  when it names none. Set for FM_ERR_ALIAS (the output that overlaps, and what it overlaps) and,
 *  with *other = -1, for a failure about one operand whose message starts with its slot name. */
FM_API int fm_last_error_slots(int *other);
/*! fm_clear_error() : forget the detail message of this thread. */
FM_API void fm_clear_error(void);

/* ------------------------------------------------------------------------ */
/* Data types and devices.                                                  */
/* ------------------------------------------------------------------------ */
typedef enum fm_dtype {
    FM_DTYPE_INVALID = 0,
    FM_F16,
    FM_BF16,
    FM_F32,
    FM_F64,
    FM_C64,  /* complex float  (interleaved re, im) */
    FM_C128, /* complex double (interleaved re, im) */
    FM_I8,
    FM_U8,   /* relu bit masks are U8 */
    FM_I32,
    FM_I64,
    FM_U32,
    FM_F8E4M3, /* fp8 matmul inputs (cuda, sm_89+), 4 exponent / 3 mantissa bits, no infinities */
    FM_F8E5M2, /* fp8 matmul inputs, 5 exponent / 2 mantissa bits */
    FM_C32,    /* complex half (interleaved re, im; 4 bytes): FFT on cuda only */
    FM_I16,
    FM_U16,
    FM_U64,
    FM_BOOL, /* one byte, 0 or 1 */
    FM_LD,   /* C long double (x86-64: 80-bit extended in 16 bytes) */
    FM_CLD,  /* complex long double (interleaved re, im) */
    FM_DTYPE_COUNT_
} fm_dtype;

/*! fm_dtype_size() : @return bytes per element, 0 for an invalid dtype. */
FM_API size_t fm_dtype_size(fm_dtype t);
/*! fm_dtype_name() : @return "f32", "c64", ... ("invalid" for unknown values). */
FM_API const char *fm_dtype_name(fm_dtype t);
/*! fm_dtype_is_complex() : @return 1 for c32/c64/c128, else 0. */
FM_API int fm_dtype_is_complex(fm_dtype t);

/* Device types use DLPack's codes so DLPack devices convert without a table. */
typedef enum fm_device_type {
    FM_DEVICE_AUTO = 0, /* resolve from the pointer (cudaPointerGetAttributes when CUDA is present) */
    FM_DEVICE_CPU = 1,
    FM_DEVICE_CUDA = 2,
    FM_DEVICE_CUDA_HOST = 3,   /* pinned host memory: treated as cpu memory */
    FM_DEVICE_CUDA_MANAGED = 13
} fm_device_type;

typedef struct fm_device {
    int32_t type; /* fm_device_type */
    int32_t id;   /* 0 for the cpu */
} fm_device;

#define FM_MAX_NDIM 8

/* A DLPack-shaped strided view. strides count elements, not bytes, and may be
 * negative or zero (broadcast); the planner copies layouts a backend cannot take. */
typedef struct fm_tensor {
    void *data;
    fm_device device;
    fm_dtype dtype;
    int32_t ndim;
    int64_t shape[FM_MAX_NDIM];
    int64_t strides[FM_MAX_NDIM];
} fm_tensor;

/*! fm_tensor_init() : fill *t. strides == NULL means C-contiguous (row-major).
 *  @return FM_ERR_INVALID_ARGUMENT for ndim outside [0, FM_MAX_NDIM], a negative
 *  extent, or an invalid dtype. */
FM_API fm_status fm_tensor_init(fm_tensor *t, void *data, fm_device device, fm_dtype dtype, int ndim,
                                const int64_t *shape, const int64_t *strides);
/*! fm_tensor_numel() : @return the number of elements (product of the extents). */
FM_API int64_t fm_tensor_numel(const fm_tensor *t);

/* ------------------------------------------------------------------------ */
/* Memory on a device, for C callers that keep their data where it computes  */
/* (a simulation's fields on the GPU) without linking the CUDA runtime.      */
/* ------------------------------------------------------------------------ */
/*! fm_memory_alloc() : `bytes` of memory on `device` (cpu: 64-byte aligned host memory;
 *  cuda:N: device memory, 256-byte aligned). bytes == 0 gives *ptr == NULL and FM_OK.
 *  @return FM_ERR_UNAVAILABLE (no such GPU), FM_ERR_OUT_OF_MEMORY, FM_ERR_DEVICE for other
 *  device types, FM_ERR_INVALID_ARGUMENT for ptr == NULL. */
FM_API fm_status fm_memory_alloc(fm_device device, size_t bytes, void **ptr);
/*! fm_memory_free() : release memory from fm_memory_alloc on the same device; NULL is a no-op.
 *  Waits for work queued on the device that may still use it. */
FM_API void fm_memory_free(fm_device device, void *ptr);
/*! fm_memory_copy() : copy `bytes` between any two of cpu and cuda memory; returns when the
 *  copy is complete (synchronous: the destination may be read at once). */
FM_API fm_status fm_memory_copy(void *dst, fm_device dst_device, const void *src, fm_device src_device,
                                size_t bytes);

/* ------------------------------------------------------------------------ */
/* Context: backend registry, library handles, threads, plan cache.         */
/* ------------------------------------------------------------------------ */
typedef struct fm_context fm_context;

/*! fm_context_create() : a new context. Reads FUSEMATH_NUM_THREADS, FUSEMATH_BACKEND
 *  and FUSEMATH_LOG once, here. Backends whose device is absent (CUDA without a
 *  GPU) are kept but marked unavailable; the CPU always works. */
FM_API fm_status fm_context_create(fm_context **ctx);
/*! fm_context_destroy() : releases the context and its cached plans (plans still
 *  held by the caller stay valid until released). Accepts NULL. */
FM_API void fm_context_destroy(fm_context *ctx);

/*! fm_context_set_num_threads() : threads used by CPU backends (BLAS and the
 *  library's own epilogue threads together, never more). n <= 0 restores the default
 *  (FUSEMATH_NUM_THREADS, else the number of online cores). */
FM_API fm_status fm_context_set_num_threads(fm_context *ctx, int n);
FM_API int fm_context_get_num_threads(const fm_context *ctx);

/*! fm_context_backend_count() / fm_context_backend_info() : enumerate registered
 *  backends. *available is 0 when the backend's device is missing; *why then says why. Where the
 *  CUDA backends (the module libfusemath_cuda.so) are not loaded, one row named "cuda" stands for
 *  them, never available, its *why the reason ("no NVIDIA driver (libcuda.so.1 not found)", ...). */
FM_API int fm_context_backend_count(const fm_context *ctx);
FM_API fm_status fm_context_backend_info(const fm_context *ctx, int index, const char **name,
                                         fm_device_type *device, int *available, const char **why);

/*! fm_blas_offer() : offer an OpenBLAS library (LP64; symbols plain or with scipy-openblas's
 *  "scipy_" prefix) for the CPU backends to use instead of the linked OpenBLAS when it is newer,
 *  or when the linked one does not know this CPU and runs generic kernels (openblas_get_corename()
 *  "Prescott" and the like on an AVX2 / AVX-512 machine). The choice is made once per process, at the first
 *  context; call this before it (the Python front offers the scipy-openblas32 wheel's library
 *  when installed). FUSEMATH_BLAS overrides: "system" keeps the linked library, a path uses that
 *  library (context creation fails when it cannot be loaded), "auto" or unset is this rule.
 *  fm_blas_info() : @return which OpenBLAS was chosen and why ("" before the first context);
 *  CPU BLAS plans' describe() ends with " blas=<version>/<core>". */
FM_API fm_status fm_blas_offer(const char *library_path);
FM_API const char *fm_blas_info(void);

/*! fm_cuda_device_count() : @return the number of usable CUDA devices, 0 when the
 *  build has no CUDA or no GPU/driver is present (never an error, never noise). */
FM_API int fm_cuda_device_count(void);

/*! fm_context_wisdom_save() / fm_context_wisdom_load() : autotune results (CPU panel
 *  choices, GPU algorithm and fused/split choices) as a text file, so a later process
 *  skips tuning: after load, planning a problem that was tuned gives the tuned plan.
 *  load merges into what the context holds; entries that no longer plan on this
 *  machine (another GPU, another cuBLASLt) fall back to the default plan.
 *  fm_context_wisdom_size() : number of entries held.
 *  fm_context_wisdom_forget() : drop them, and the backends' own knowledge (FFTW's wisdom and
 *  the CPU FFT's timed path choices, which are process-wide): later plans are tuned or timed
 *  afresh; plans already made (and cached) are kept. */
FM_API fm_status fm_context_wisdom_save(fm_context *ctx, const char *path);
FM_API fm_status fm_context_wisdom_load(fm_context *ctx, const char *path);
FM_API int fm_context_wisdom_size(const fm_context *ctx);
FM_API fm_status fm_context_wisdom_forget(fm_context *ctx);

/*! Cost-aware dispatch (FM_EXECUTION_BEST, or FUSEMATH_EXECUTION=best for every call whose execution
 *  is auto). The planner predicts each device's time from the context's machine profile: per
 *  operation, dtype and device, measured times across sizes (interpolated in log-log), and the
 *  host<->device copy rates; the plan's describe() ends with the choice and both predictions
 *  ("best=cuda predicted cpu 2.41 ms cuda+xfer 0.73 ms"). Without a profile a conservative built-in
 *  model is used (" model=builtin"): it leaves the operands' own device only for a predicted gain of
 *  2x.
 *  fm_context_calibrate() : measure the profile on this machine (quick != 0: a few sizes per
 *  operation, seconds; else more sizes and dtypes). progress, if not NULL, is called with the
 *  fraction done and what is measured; a nonzero return stops the calibration (FM_ERR_CANCELLED),
 *  leaving the profile as it was. The new profile replaces the context's, clears its plan cache
 *  (plans chosen by the old one) and is saved as <cache dir>/machine-profile (written whole, then
 *  renamed), which fm_context_create loads when it was measured on this machine by this version
 *  (a file from elsewhere, or corrupt, is ignored: FUSEMATH_LOG=plan and fm_context_profile_text
 *  say why). fm_context_wisdom_save / _load carry the profile too.
 *  fm_context_profile_text() : one line per measured curve and copy rate after a first line saying
 *  where the profile came from ("profile: builtin (...)", "profile: calibrated ...", "profile:
 *  loaded from <path>", or why a file was ignored); at most size bytes, always terminated.
 *  fm_context_profile_clear() : back to the built-in model (the file is left alone). */
typedef int (*fm_progress_fn)(void *user, double fraction, const char *what);
FM_API fm_status fm_context_calibrate(fm_context *ctx, int quick, fm_progress_fn progress, void *user);
FM_API fm_status fm_context_profile_text(const fm_context *ctx, char *buf, size_t size);
FM_API fm_status fm_context_profile_clear(fm_context *ctx);

/*! fm_context_clear_cache() : drop cached plans and return their memory (plans the caller still
 *  holds stay valid). */
FM_API void fm_context_clear_cache(fm_context *ctx);
/*! fm_context_cache_size() : @return number of cached plans. */
FM_API int fm_context_cache_size(const fm_context *ctx);
/*! fm_context_set_cache_max_bytes() : cap the cache by the plans' footprints (their backends'
 *  estimates of the host memory they hold: FFTW's plans and twiddles) as well as by count (1024
 *  plans). Default FUSEMATH_CACHE_MAX_MB, else 256 MiB. The oldest plans are evicted first, at once
 *  when the new cap is below what the cache holds; the newest plan stays even when it alone is over
 *  the cap (0: only the newest is kept).
 *  fm_context_cache_bytes() : @return the cached plans' footprint in bytes.
 *  fm_context_cache_max_bytes() : @return the cap. */
FM_API fm_status fm_context_set_cache_max_bytes(fm_context *ctx, int64_t max_bytes);
FM_API int64_t fm_context_cache_bytes(const fm_context *ctx);
FM_API int64_t fm_context_cache_max_bytes(const fm_context *ctx);

/*! fm_log_sink : receives each FUSEMATH_LOG=plan line (without "fusemath[plan] " and newline),
 *  on the thread that plans. fm_context_set_log_sink() : send them there instead of stderr
 *  (sink NULL: stderr again). Set it before other threads plan on ctx. */
typedef void (*fm_log_sink)(const char *line, void *user);
FM_API fm_status fm_context_set_log_sink(fm_context *ctx, fm_log_sink sink, void *user);

/* ------------------------------------------------------------------------ */
/* Operations and plans.                                                    */
/* ------------------------------------------------------------------------ */
typedef enum fm_op {
    FM_OP_MATMUL = 0,
    FM_OP_FFT = 1,
    FM_OP_RNG = 2,
    FM_OP_SOLVE = 3,
    FM_OP_COUNT_
} fm_op;

/*! fm_op_name() : @return "matmul", "fft", "rng", "solve". */
FM_API const char *fm_op_name(fm_op op);

typedef struct fm_plan fm_plan;

/*! fm_plan_retain() / fm_plan_release() : reference counting. release accepts NULL. */
FM_API void fm_plan_retain(fm_plan *p);
FM_API void fm_plan_release(fm_plan *p);
/*! fm_plan_describe() : one line, e.g.
 *  "matmul cpu/openblas f32 256x512x128 epilogue=bias+relu passes=1".
 *  @return the line (owned by the plan, valid while the plan lives). */
FM_API const char *fm_plan_describe(const fm_plan *p);
/*! fm_plan_op() : @return the operation of the plan. */
FM_API fm_op fm_plan_op(const fm_plan *p);
/*! fm_plan_backend() : @return the name of the backend that executes the plan. */
FM_API const char *fm_plan_backend(const fm_plan *p);

/*! fm_plan_execute() : run the plan on this call's pointers. ptrs[i] belongs to
 *  operand slot i of the operation (FM_MATMUL_A ... for matmul); slots the plan does
 *  not use must be NULL; nptrs is the length of ptrs. stream is a backend stream
 *  (cudaStream_t) or NULL. Thread-safe: many threads may execute one plan at once.
 *  Returns FM_ERR_ALIAS when an output overlaps an input in memory. */
FM_API fm_status fm_plan_execute(const fm_plan *p, void *const *ptrs, int nptrs, void *stream);

/* Per-call arguments besides the pointers, for operations that take them (an RNG's stream
 * position, a count) and per-call information back (a solver's info). Which fields an operation
 * reads or writes is documented with it; the others must be left as fm_exec_args_init sets them.
 * Pointer-only operations (fft; matmul without dropout) take NULL or initialised arguments alike. */
#define FM_EXEC_MAX_SCALARS 8
typedef struct fm_exec_args {
    int64_t ints[FM_EXEC_MAX_SCALARS];     /* per-call integers (offsets, counters, counts) */
    double reals[FM_EXEC_MAX_SCALARS];     /* per-call real scalars */
    int64_t *info;                         /* per-call information out (NULL: not wanted) */
    int32_t ninfo;                         /* entries info has room for */
    int32_t flags;                         /* FM_EXEC_* bits (0: none) */
    int32_t reserved[2];                   /* zero */
} fm_exec_args;

/* fm_exec_args.flags: an output overlapping an input (FM_ERR_ALIAS without it, naming both slots) is
 * computed into a temporary and copied out element by element, as NumPy's out= does; host outputs
 * only (FM_ERR_NOT_SUPPORTED on a GPU). Costs an output-sized allocation and copy, only when they
 * overlap. */
#define FM_EXEC_OVERLAP_COPY 1

/*! fm_exec_args_init() : zero everything. */
FM_API void fm_exec_args_init(fm_exec_args *a);

/*! fm_plan_execute_args() : fm_plan_execute with per-call arguments (NULL: none). */
FM_API fm_status fm_plan_execute_args(const fm_plan *p, void *const *ptrs, int nptrs, const fm_exec_args *args,
                                      void *stream);

/* ------------------------------------------------------------------------ */
/* The generic operation interface: every operation through the same calls, */
/* its operands as an array of slots (FM_MATMUL_A..., FM_FFT_IN...) and its */
/* options struct (fm_matmul_options, fm_fft_options, ...) by pointer.      */
/* ------------------------------------------------------------------------ */
/* What a slot is to its operation. */
typedef enum fm_slot_role {
    FM_SLOT_INPUT = 1,  /* read */
    FM_SLOT_OUTPUT = 2  /* written (an in-place partner input may share its memory exactly) */
} fm_slot_role;

/*! fm_op_slot_count() : @return the number of operand slots of op (0 for an unknown op). */
FM_API int fm_op_slot_count(fm_op op);
/*! fm_op_slot_name() : @return the slot's name ("a", "bias", "in") or "" when out of range. */
FM_API const char *fm_op_slot_name(fm_op op, int slot);
/*! fm_op_slot_role() : @return the slot's fm_slot_role, or 0 when out of range. */
FM_API int fm_op_slot_role(fm_op op, int slot);

/*! fm_output_specs() : the descriptors the outputs of op must have for these inputs and
 *  options. t[0..nslots): the operands (NULL where absent; an output slot may be NULL: it is
 *  what the caller asks about). For each output slot the operation writes (bit i of *written),
 *  specs[i] gets its shape, dtype and device with C-contiguous strides and data = NULL; other
 *  entries are zeroed. The caller allocates from these and plans with them. Every check the
 *  planner makes of the inputs and options is made here too, with the same messages. */
FM_API fm_status fm_output_specs(fm_op op, const fm_tensor *const *t, int nslots, const void *opts,
                                 fm_tensor *specs, uint32_t *written);

/*! fm_plan_create() : plan op for operands t[0..nslots) and options (NULL: defaults); the same
 *  plan fm_matmul_plan_v / fm_fft_plan give (cached, wisdom applied). */
FM_API fm_status fm_plan_create(fm_context *ctx, fm_op op, const fm_tensor *const *t, int nslots,
                                const void *opts, fm_plan **plan);
/*! fm_run() : plan (cached) and execute once with the descriptors' data pointers. */
FM_API fm_status fm_run(fm_context *ctx, fm_op op, const fm_tensor *const *t, int nslots, const void *opts,
                        const fm_exec_args *args, void *stream);
/*! fm_autotune() : time the candidates every backend offers for this problem on the given
 *  operands (real pointers, outputs are overwritten), keep the fastest for later plans of the
 *  same problem (cache and wisdom) and return its plan. repeats: timings per candidate (CPU),
 *  calls per timing (GPU, at least 1 ms). An operation or problem with nothing to tune gives
 *  the default plan. */
FM_API fm_status fm_autotune(fm_context *ctx, fm_op op, const fm_tensor *const *t, int nslots, const void *opts,
                             int repeats, fm_plan **plan);
/*! fm_plan_slot_info() : the descriptor (data = NULL) of slot `slot` as the plan holds it, and
 *  whether the slot is used (*used = 0: the plan takes NULL there). It is the normalised view the
 *  backends plan from, not necessarily the caller's: matmul operands are expanded to the output's
 *  rank with stride 0 on broadcast axes (a bias (N,) of a batched product reads (batch..., 1, N)).
 *  The pointer passed at execute must address memory of the caller's layout, which this view
 *  addresses the same elements of. */
FM_API fm_status fm_plan_slot_info(const fm_plan *p, int slot, fm_tensor *desc, int *used);

/* ------------------------------------------------------------------------ */
/* Matmul: D = act(alpha * op(A) @ op(B) + beta * C + bias), NumPy semantics.  */
/* ------------------------------------------------------------------------ */
/* Operand slots of a matmul plan, in the order fm_plan_execute() takes pointers. */
enum {
    FM_MATMUL_A = 0,
    FM_MATMUL_B = 1,
    FM_MATMUL_C = 2,
    FM_MATMUL_BIAS = 3,
    FM_MATMUL_D = 4,
    FM_MATMUL_AUX = 5,
    FM_MATMUL_BGRAD = 6, /* bias gradient output of drelu/dgelu+bgrad, bgrada, bgradb */
    FM_MATMUL_SCALE = 7, /* per-column scale vector (epilogue 'scale') */
    FM_MATMUL_A_SCALE = 8, /* fp8: f32 scalar on the device multiplying a (optional, 1 if absent) */
    FM_MATMUL_B_SCALE = 9, /* fp8: f32 scalar on the device multiplying b (optional) */
    FM_MATMUL_NSLOTS = 10
};

/* Epilogue bits. D = act(alpha * scale[j] * (A@B)[i,j] + beta * C + bias[j]), then for
 * the backward kinds D *= act'(aux). Names follow nvmath-python / cuBLASLt
 * (RELU_AUX_BIAS = relu+aux+bias, DRELU_BGRAD = drelu+bgrad). At most one forward
 * activation; backward kinds take no bias, scale or forward activation. */
typedef enum fm_epilogue {
    FM_EPILOGUE_DEFAULT = 0,
    FM_EPILOGUE_BIAS = 1u << 0,    /* + bias[N] (or bias[..., N] with batch dims) */
    FM_EPILOGUE_RELU = 1u << 1,
    FM_EPILOGUE_GELU = 1u << 2,    /* tanh approximation, as cuBLASLt */
    FM_EPILOGUE_AUX = 1u << 3,     /* also store aux: relu bit mask, else the activation's input */
    FM_EPILOGUE_SIGMOID = 1u << 4, /* 1 / (1 + exp(-x)) */
    FM_EPILOGUE_TANH = 1u << 5,
    FM_EPILOGUE_SILU = 1u << 6,    /* x * sigmoid(x) */
    FM_EPILOGUE_CLAMP = 1u << 7,   /* min(max(x, clamp[0]), clamp[1]) from the options */
    FM_EPILOGUE_DRELU = 1u << 8,   /* backward: D = (alpha A@B + beta C) * (relu mask bit of aux) */
    FM_EPILOGUE_DGELU = 1u << 9,   /* backward: D = (alpha A@B + beta C) * gelu'(aux) */
    FM_EPILOGUE_BGRAD = 1u << 10,  /* with drelu/dgelu: bgrad[j] = sum over rows i of D[i, j] */
    FM_EPILOGUE_BGRADA = 1u << 11, /* bgrad[i] = sum over k of A[i, k] (length M); D = A@B */
    FM_EPILOGUE_BGRADB = 1u << 12, /* bgrad[j] = sum over k of B[k, j] (length N); D = A@B */
    FM_EPILOGUE_SCALE = 1u << 13,  /* per-column scale vector (slot FM_MATMUL_SCALE) */
    FM_EPILOGUE_DROPOUT = 1u << 14, /* after the activation: D = keep ? D / (1 - p) : 0, p = options.dropout,
                                       keep drawn from a Philox stream per element (see fm_matmul_plan) */
    FM_EPILOGUE_DDROPOUT = 1u << 15 /* backward: D = (alpha A@B + beta C) * (keep bit of aux) / (1 - p) */
} fm_epilogue;

/*! fm_epilogue_parse() : words joined by '+' or '_', case-insensitive: identity (none,
 *  default), bias, relu, gelu, sigmoid, tanh, silu, clamp, dropout, aux, drelu, dgelu, ddropout,
 *  bgrad, bgrada, bgradb, scale; so nvmath-python names ("RELU_AUX_BIAS", "DGELU_BGRAD") parse too. @return FM_ERR_INVALID_ARGUMENT naming the unknown word. */
FM_API fm_status fm_epilogue_parse(const char *text, unsigned *epilogue);
/*! fm_epilogue_format() : canonical name ("bias+relu", "identity") into buf. */
FM_API fm_status fm_epilogue_format(unsigned epilogue, char *buf, size_t size);

/* Aux layouts (shared by every backend):
 *  - relu mask (RELU + AUX): U8 tensor of shape (batch..., M, fm_relu_mask_row_bytes(N)),
 *    C-contiguous; bit (j % 8) of byte j / 8 of row i is 1 when the pre-activation
 *    D[i, j] > 0. Rows are padded to a multiple of 16 bytes (128 bits; padding bits are
 *    unspecified: cuBLASLt leaves them, the CPU zeroes them), the layout
 *    cuBLASLt uses for D^T.
 *  - activation input (GELU, SIGMOID, TANH, SILU or CLAMP + AUX): tensor of D's dtype and
 *    shape (batch..., M, N) holding alpha*A@B + beta*C + bias before the activation; any
 *    row stride >= N with unit column stride is accepted.
 *  - dropout mask (DROPOUT + AUX, with relu or no activation): the relu mask's layout, bit = the
 *    element was kept; with relu the bit is (pre-activation > 0) AND kept, so that the DDROPOUT
 *    backward of it is the whole backward of relu+dropout (relu' times the dropout mask).
 *    Another activation with dropout takes no aux (it would need the activation input too).
 *  DRELU, DGELU and DDROPOUT read aux in the same layouts (an input then).
 * Bias gradient (BGRAD, BGRADB: length N; BGRADA: length M): D's dtype, shape (L,) or
 *  (batch..., L) with D's batch shape: one gradient per batch entry.
 * Scale (SCALE): shape (N,) or (batch..., N) like bias, dtype f32 for f16/bf16/f32 data and
 *  f64 for f64 data (cuBLASLt's alpha vector); not for complex dtypes. */
FM_API int64_t fm_relu_mask_row_bytes(int64_t n);

typedef enum fm_execution {
    FM_EXECUTION_AUTO = 0, /* where the operands live; mixed devices are an error */
    FM_EXECUTION_CPU = 1,  /* compute on the cpu, moving data if needed */
    FM_EXECUTION_CUDA = 2, /* compute on cuda:device_id, moving data if needed */
    FM_EXECUTION_BEST = 3  /* where the context's machine profile predicts the result soonest, the
                              transfers included (see fm_context_calibrate); mixed devices allowed */
} fm_execution;

/* How the CPU backend spreads a matmul over threads. */
typedef enum fm_cpu_strategy {
    FM_CPU_STRATEGY_AUTO = 0,
    FM_CPU_STRATEGY_TILES = 1,        /* one single-threaded cblas GEMM per tile, epilogue fused per tile */
    FM_CPU_STRATEGY_BLAS_THREADS = 2, /* OpenBLAS threads one GEMM; bias/activation as parallel passes */
    FM_CPU_STRATEGY_KERNEL = 3        /* tiles through fusemath's own GEMM kernel, the epilogue in registers
                                         (real f32/f64, alpha != 0, forward epilogues with beta*C; auto
                                         picks it for k <= 384, and on AVX-512 for longer k) */
} fm_cpu_strategy;

/* Arithmetic of the GEMM. */
typedef enum fm_compute {
    FM_COMPUTE_DEFAULT = 0, /* the dtype's own precision (f16/bf16 accumulate in f32) */
    FM_COMPUTE_TF32 = 1     /* f32 data on tensor cores with tf32 inputs (opt-in, cuda only) */
} fm_compute;

typedef struct fm_matmul_options {
    double alpha[2];         /* real, imaginary part; default {1, 0} */
    double beta[2];          /* default {0, 0}; ignored without C */
    unsigned epilogue;       /* fm_epilogue bits */
    int32_t execution;       /* fm_execution */
    int32_t device_id;       /* for FM_EXECUTION_CUDA */
    int32_t num_threads;     /* cpu threads for this plan; 0 = the context's setting */
    int32_t panel_rows;      /* cpu: rows per fused panel; 0 = heuristic (autotune sets it) */
    int32_t cpu_strategy;    /* fm_cpu_strategy; 0 = heuristic (autotune sets it) */
    int32_t compute;         /* fm_compute */
    int32_t gpu_algo;        /* cuda: 0 = cuBLASLt heuristic's first choice, then its other candidates (up to
                                8), then a wider search (smaller workspaces, every algorithm id), at most
                                0..63; an index past the last is refused. autotune sets it */
    int32_t gpu_passes;      /* cuda: 0 = auto, 1 = epilogue fused in cuBLASLt, 2 = GEMM + kernel */
    int32_t reserved[3];     /* zero */
    double dropout;          /* p of FM_EPILOGUE_DROPOUT / DDROPOUT: 0 <= p < 1 (finite); 0 without them */
    double clamp[2];         /* lo, hi for FM_EPILOGUE_CLAMP */
} fm_matmul_options;

/*! fm_matmul_options_init() : defaults (alpha = 1, beta = 0, no epilogue, auto). */
FM_API void fm_matmul_options_init(fm_matmul_options *o);

/*! fm_matmul_plan() : plan D = act(alpha * A @ B + beta * C + bias).
 *  a: (..., M, K), b: (..., K, N), c: NULL or broadcastable to d, bias: NULL or (N,) or
 *  (..., N) broadcast over rows, d: (..., M, N) with the broadcast batch shape of a and b,
 *  aux: NULL unless the epilogue has FM_EPILOGUE_AUX. 1-D a or b are not accepted here
 *  (the Python layer promotes them as NumPy does). Data pointers in the descriptors are
 *  ignored except to resolve FM_DEVICE_AUTO. Plans come from the context's cache when
 *  an identical problem was planned before.
 *  Dropout (FM_EPILOGUE_DROPOUT) reads per-call arguments (fm_plan_execute_args / fm_run), the
 *  RNG's convention (fm_rng_plan) for its portable stream:
 *    ints[0]  the position: element e of D (row-major over batch..., M, N) uses 32-bit word
 *             ints[0] + e of the portable Philox4x32-10 stream (word w: word w % 4 of block
 *             w / 4), so a call uses numel(D) words and the next call's position is
 *             ints[0] + numel(D);
 *    ints[3]  the seed (the uint64 key, its bit pattern as int64), where the RNG family takes its
 *             seed (ints[1], ints[2] are not read: leave them 0).
 *  The element is kept iff word >= round(p * 2^32) (an integer compare, the same on every
 *  device), kept values multiplied by 1 / (1 - p) rounded to D's dtype. Without args, position
 *  and seed 0. Other chains do not read them; ints[4..] must be zero. */
FM_API fm_status fm_matmul_plan(fm_context *ctx, const fm_tensor *a, const fm_tensor *b, const fm_tensor *c,
                                const fm_tensor *bias, const fm_tensor *d, const fm_tensor *aux,
                                const fm_matmul_options *opts, fm_plan **plan);

/*! fm_matmul() : plan (cached) and execute once with the descriptors' data pointers. */
FM_API fm_status fm_matmul(fm_context *ctx, const fm_tensor *a, const fm_tensor *b, const fm_tensor *c,
                           const fm_tensor *bias, const fm_tensor *d, const fm_tensor *aux,
                           const fm_matmul_options *opts, void *stream);

/*! fm_matmul_plan_v() / fm_matmul_v() / fm_matmul_autotune_v() : the same with every
 *  operand slot in one array t[FM_MATMUL_NSLOTS] (NULL for unused slots), the form that
 *  reaches the bias-gradient and scale slots. */
FM_API fm_status fm_matmul_plan_v(fm_context *ctx, const fm_tensor *const t[FM_MATMUL_NSLOTS],
                                  const fm_matmul_options *opts, fm_plan **plan);
FM_API fm_status fm_matmul_v(fm_context *ctx, const fm_tensor *const t[FM_MATMUL_NSLOTS],
                             const fm_matmul_options *opts, void *stream);
FM_API fm_status fm_matmul_autotune_v(fm_context *ctx, const fm_tensor *const t[FM_MATMUL_NSLOTS],
                                      const fm_matmul_options *opts, int repeats, fm_plan **plan);

/*! fm_matmul_output_shape() : the shape D must have for a and b (broadcast batch
 *  dimensions, then M, N). @return FM_ERR_SHAPE naming the mismatching dimension. */
FM_API fm_status fm_matmul_output_shape(const fm_tensor *a, const fm_tensor *b, int *ndim, int64_t *shape);

/*! fm_matmul_autotune() : time the candidate CPU panel sizes / GPU algorithms on
 *  the given operands (real pointers, outputs are overwritten) and return a new plan
 *  with the fastest choice; the choice also replaces the cached plan. repeats: calls per
 *  timing (CPU: timings per candidate); a GPU timing also lasts at least 1 ms. */
FM_API fm_status fm_matmul_autotune(fm_context *ctx, const fm_tensor *a, const fm_tensor *b, const fm_tensor *c,
                                    const fm_tensor *bias, const fm_tensor *d, const fm_tensor *aux,
                                    const fm_matmul_options *opts, int repeats, fm_plan **plan);

/* ------------------------------------------------------------------------ */
/* FFT: out = epilog(FFT(prolog(in))) over 1 to ndim axes, batched over the others. */
/* ------------------------------------------------------------------------ */
/* Operand slots of an FFT plan, in the order fm_plan_execute() takes pointers. */
enum {
    FM_FFT_IN = 0,
    FM_FFT_OUT = 1,
    FM_FFT_PROLOG = 2, /* array multiplied into the input as it is loaded (FM_FFT_OP_MULTIPLY) */
    FM_FFT_EPILOG = 3, /* array multiplied into the output as it is stored */
    FM_FFT_NSLOTS = 4
};

typedef enum fm_fft_kind {
    FM_FFT_C2C = 0, /* complex -> complex, same shape */
    FM_FFT_R2C = 1, /* real -> complex, last transformed axis n -> n/2 + 1 (forward only) */
    FM_FFT_C2R = 2  /* complex -> real, last transformed axis n/2 + 1 -> n, n from out (inverse only) */
} fm_fft_kind;

/* Scaling, as numpy.fft's norm: backward = 1 forward, 1/n inverse; ortho = 1/sqrt(n) both;
 * forward = 1/n forward, 1 inverse (n = product of the transformed lengths). */
typedef enum fm_fft_norm { FM_FFT_NORM_BACKWARD = 0, FM_FFT_NORM_ORTHO = 1, FM_FFT_NORM_FORWARD = 2 } fm_fft_norm;

/* Planning effort (FFTW's estimate / measure / patient; cuFFT ignores it). */
typedef enum fm_fft_effort {
    FM_FFT_EFFORT_ESTIMATE = 0,
    FM_FFT_EFFORT_MEASURE = 1,
    FM_FFT_EFFORT_PATIENT = 2
} fm_fft_effort;

/* How the chains run on cuda (the cpu fuses them into its passes either way).
 * KERNEL: the whole transform is one generated kernel that reads through the prolog and writes
 * through the epilog (1-D c2c, complex64 / complex128, power-of-two lengths up to 4096 / 2048):
 * one read and one write of the data, no cuFFT. PASS / CALLBACK: cuFFT, the prolog as a
 * separate elementwise kernel or as a cuFFT LTO load callback (which makes cuFFT itself
 * slower on large transforms, docs/performance.md), the epilog as a store callback. AUTO: the
 * kernel where it applies, else the callback for small transforms and the pass for large ones.
 * FUSEMATH_CUFFT_PROLOG=kernel|pass|callback overrides AUTO (for experiments). */
typedef enum fm_fft_gpu_prolog {
    FM_FFT_PROLOG_AUTO = 0,
    FM_FFT_PROLOG_PASS = 1,     /* a generated elementwise kernel before the transform */
    FM_FFT_PROLOG_CALLBACK = 2, /* a cuFFT LTO load callback */
    FM_FFT_PROLOG_KERNEL = 3    /* the transform and both chains in one generated kernel */
} fm_fft_gpu_prolog;

/* A fused chain, applied elementwise: x -> conj?(x * scale * array), array broadcast against
 * the input (prolog) or the output (epilog) with NumPy rules (a window, a filter, a phase
 * ramp; real or complex of the data's precision).
 *
 * FM_FFT_OP_CALLBACK (GPU only): after those ops, x -> symbol(x, offset, data), a CUDA C++
 * device function the caller writes, compiled at planning with NVRTC into the cuFFT load
 * (prolog) or store (epilog) callback:
 *     __device__ T symbol(T x, unsigned long long offset, const void *data)
 * T is the element type of the data it sees: float2 (c64), double2 (c128), float (f32),
 * double (f64). offset is the element offset of x from the input's (prolog) or output's
 * (epilog) data pointer, batch included, in that operand's own strides. data is the chain's
 * array pointer (prolog_array / epilog_array) or NULL: with FM_FFT_OP_MULTIPLY the array is
 * multiplied in first and then passed too; without it the array is only passed (any dtype,
 * any shape, on the data's device). source must define symbol (a C identifier); both strings
 * are read while planning only. A symbol the source does not define, or source that does not
 * compile, is an error carrying the compiler's log. On cpu data: FM_ERR_NOT_SUPPORTED. */
enum { FM_FFT_OP_SCALE = 1u << 0, FM_FFT_OP_MULTIPLY = 1u << 1, FM_FFT_OP_CONJ = 1u << 2, FM_FFT_OP_CALLBACK = 1u << 3 };
typedef struct fm_fft_chain {
    unsigned ops;       /* FM_FFT_OP_* bits */
    double scale[2];    /* re, im; with FM_FFT_OP_SCALE */
    const char *source; /* with FM_FFT_OP_CALLBACK: CUDA C++ source defining symbol */
    const char *symbol; /* with FM_FFT_OP_CALLBACK: the device function's name */
} fm_fft_chain;

typedef struct fm_fft_options {
    int32_t kind;        /* fm_fft_kind */
    int32_t inverse;     /* 0: forward (exp(-i...)), 1: inverse (exp(+i...)) */
    int32_t naxes;       /* 1..ndim; 0 = the last min(ndim, 3) axes */
    int32_t axes[FM_MAX_NDIM]; /* axes of the input, distinct; negative counts from the end; the
                            last is the halved one of r2c / c2r. Over more than 3 axes the
                            transform runs as successive transforms of at most 3 axes (the prolog
                            in the first, the epilog and the norm in the last) */
    int32_t norm;        /* fm_fft_norm */
    int32_t effort;      /* fm_fft_effort */
    int32_t execution;   /* fm_execution */
    int32_t device_id;
    int32_t num_threads; /* cpu threads; 0 = the context's setting */
    int32_t gpu_prolog;  /* fm_fft_gpu_prolog */
    int32_t last_n;      /* c2r, for fm_output_specs only: n of the last transformed axis (0: 2 (m - 1));
                            when planning, 0 or out's extent there */
    int32_t reserved[5]; /* zero */
    fm_fft_chain prolog, epilog;
} fm_fft_options;

/*! fm_fft_options_init() : forward c2c over the last axis, backward norm, estimate, no chains. */
FM_API void fm_fft_options_init(fm_fft_options *o);

/*! fm_fft_plan() : plan out = epilog(norm * FFT(prolog(in))). in and out have the same
 *  batch (non-transformed) extents; transformed extents: equal for c2c, n -> n/2+1 for r2c,
 *  n/2+1 -> n for c2r (n is out's extent). Dtypes: c2c c64 -> c64 or c128 -> c128; r2c f32 ->
 *  c64, f64 -> c128; c2r the reverse. Half precision (c2c c32 -> c32, r2c f16 -> c32, c2r c32 ->
 *  f16) runs on cuda only (cuFFT; FM_ERR_NOT_SUPPORTED on the cpu): every transformed length a
 *  power of two, compute capability >= 5.3, chains as separate passes computing in float (a
 *  callback's T is then float2 / float). Any strides; in == out (same layout) runs in place
 *  (c2c only). prolog_array / epilog_array: NULL unless the chain has FM_FFT_OP_MULTIPLY. */
FM_API fm_status fm_fft_plan(fm_context *ctx, const fm_tensor *in, const fm_tensor *out,
                             const fm_tensor *prolog_array, const fm_tensor *epilog_array,
                             const fm_fft_options *opts, fm_plan **plan);

/*! fm_fft() : plan (cached, estimate effort unless opts say otherwise) and execute once. */
FM_API fm_status fm_fft(fm_context *ctx, const fm_tensor *in, const fm_tensor *out, const fm_tensor *prolog_array,
                        const fm_tensor *epilog_array, const fm_fft_options *opts, void *stream);

/* ------------------------------------------------------------------------ */
/* Random numbers: out = a distribution's values at stream positions        */
/* [position, position + numel(out)) of Philox4x32-10 keyed by the seed.     */
/* ------------------------------------------------------------------------ */
/* Operand slots of an RNG plan: the output only (no inputs). */
enum { FM_RNG_OUT = 0, FM_RNG_NSLOTS = 1 };

typedef enum fm_rng_distribution {
    FM_RNG_UNIFORM = 0,     /* low + (high - low) * u; f32 / f64 */
    FM_RNG_NORMAL = 1,      /* z * stddev + mean (Box-Muller); f32 / f64 */
    FM_RNG_LOGNORMAL = 2,   /* exp(z * stddev + mean); f32 / f64 */
    FM_RNG_EXPONENTIAL = 3, /* -log(u) * scale; f32 / f64; portable mode only */
    FM_RNG_RAW = 4,         /* the 32-bit words themselves; u32 */
    FM_RNG_INTEGERS = 5,    /* uniform integers in [int_low, int_high) (endpoint: ]), exact and unbiased;
                               i8 / i16 / i32 / i64 / u8 / u16 / u32; portable mode only */
    FM_RNG_POISSON = 6      /* Poisson(lam); portable: i64; curand: u32 (cuRAND's) or i64 */
} fm_rng_distribution;

/* The two streams (docs/design.md, "Random numbers"). PORTABLE: value m of a call is made from
 * block m / 4 (32-bit kinds, word m % 4) or m / 2 (f64, two words each) of the plain counter
 * stream, its arithmetic the library's own (fusion/philox_portable.h: no libm), the same on
 * every device; uniform in [0, 1). CURAND: the values libcurand's CURAND_RNG_PSEUDO_PHILOX4_32_10
 * host generator gives (uniform in (0, 1], glibc's libm for the transcendentals), its 65536
 * subsequences and the shift its double calls leave (the per-call arguments below). */
typedef enum fm_rng_mode { FM_RNG_PORTABLE = 0, FM_RNG_CURAND = 1 } fm_rng_mode;

typedef struct fm_rng_options {
    int32_t distribution; /* fm_rng_distribution */
    int32_t mode;         /* fm_rng_mode */
    double low, high;     /* uniform: low < high, finite (default 0, 1) */
    double mean, stddev;  /* normal, lognormal: finite, stddev >= 0 (default 0, 1) */
    double scale;         /* exponential: finite, >= 0 (default 1) */
    int32_t execution;    /* fm_execution */
    int32_t device_id;
    int32_t num_threads;  /* cpu threads; 0 = the context's setting; the values never depend on it */
    /* For fm_output_specs only, when out is not given: the output's rank (-1: not given, the
     * default), shape and dtype (0: f64, u32 for raw). When planning: -1 / 0, or out's own. */
    int32_t out_ndim;
    int64_t out_shape[FM_MAX_NDIM];
    int32_t out_dtype;    /* fm_dtype */
    /* integers: values in [int_low, int_high), or [int_low, int_high] when endpoint is 1 (NumPy's
     * endpoint=True); exact int64 (beyond 2^53), both within the dtype's range (default 0, 0, 0:
     * set them). */
    int32_t endpoint;
    int64_t int_low, int_high;
    /* poisson: the mean, finite; portable 0 <= lam <= 9.223372006484771e18 (NumPy's bound), curand
     * 0 < lam <= 400000 (cuRAND's) (default 1) */
    double lam;
    int32_t reserved[8];  /* zero */
} fm_rng_options;

/*! fm_rng_options_init() : uniform on [0, 1), portable, auto execution (lam 1, integers' range unset). */
FM_API void fm_rng_options_init(fm_rng_options *o);

/*! fm_rng_plan() : plan filling out (C-contiguous, f32 / f64, u32 for raw; any size, 64-bit
 *  counts) with values of the options' distribution. Neither the seed nor the stream position is
 *  part of the plan: execute reads both from fm_exec_args (fm_plan_execute_args), so one plan
 *  serves every call of a shape, whatever the generator:
 *    ints[0]  the position: the index in the stream of out's first value (>= 0; a call makes
 *             numel(out) values, so the next call's position is ints[0] + numel(out));
 *    ints[1], ints[2]  curand mode: [ints[1], ints[2]), the positions that calls of f64 kinds
 *             made since the offset was set (0, 0: none), ints[2] <= ints[0]. cuRAND's double
 *             calls advance each subsequence's counter twice per group, a shift later calls
 *             inherit; one contiguous run of them is what this state holds (a caller that mixes
 *             f64 calls, then 32-bit ones, then f64 again needs two runs: not representable).
 *             Portable mode: 0, 0.
 *    ints[3]  the seed (the Philox key): a uint64_t's bits, (int64_t)seed.
 *  Values depend only on (seed, position, distribution, dtype, mode, parameters), never on the
 *  thread count. */
FM_API fm_status fm_rng_plan(fm_context *ctx, const fm_tensor *out, const fm_rng_options *opts, fm_plan **plan);
/*! fm_rng() : plan (cached) and fill out once with the stream of `seed` from position `position`
 *  (the curand double run, if any, through fm_plan_execute_args); stream: as fm_fft's (NULL on the
 *  cpu). */
FM_API fm_status fm_rng(fm_context *ctx, const fm_tensor *out, const fm_rng_options *opts, uint64_t seed,
                        int64_t position, void *stream);

#ifdef __cplusplus
}
#endif

/* Dense solvers: their own header, part of this one. */
#include "fusemath_solve.h"
#endif /* FUSEMATH_H */
