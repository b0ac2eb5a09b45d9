/* internal.h : what core/, fusion/ and backends/ share; not installed. */
#ifndef FM_INTERNAL_H
#define FM_INTERNAL_H

#include <fusemath/fusemath.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>

#define FM_MAX_SLOTS 10
#define FM_DESCRIBE_LEN 640
#define FM_WHY_LEN 256 /* why a backend is unavailable (fm_context_backend_info) */
#define FM_MAX_PIPELINE_THREADS 64 /* FUSEMATH_PIPELINE_THREADS' ceiling */

/* Internal functions the CUDA module (libfusemath_cuda.so, core/src/cuda_module.c) and the
 * distributed layer (libfusemath_mpi.so, distributed/) call: exported from libfusemath.so (protected:
 * calls inside it still bind locally, no PLT), declared only here, never part of the public API. The
 * modules' own objects (FM_CUDA_MODULE_BUILD, FM_MPI_MODULE_BUILD) import them. */
#if defined(FM_CUDA_MODULE_BUILD) || defined(FM_MPI_MODULE_BUILD)
#define FM_INTERNAL_API
#else
#define FM_INTERNAL_API __attribute__((visibility("protected")))
#endif

typedef struct fm_settings fm_settings; /* below: the environment, read at context creation */

/* FM_SIMD_CLONES: the element loops of the CPU chain passes (matmul epilogues, FFT
 * prolog/epilog) compiled for AVX-512, AVX2 and baseline x86-64, picked once at load time
 * (GCC/Clang function multi-versioning). The library is built for baseline x86-64, whose
 * SSE2 loops ran the relu + bias passes of a skinny matmul at half the L2 bandwidth. */
/* Not under ASan or TSan: the load-time resolvers run before the sanitizer's runtime is up
 * (TSan builds crashed in activate_f64's resolver before any test ran). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FM_NO_SIMD_CLONES 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FM_NO_SIMD_CLONES 1
#endif
#if defined(__x86_64__) && defined(__has_attribute) && !defined(FM_NO_SIMD_CLONES)
#if __has_attribute(target_clones)
#define FM_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef FM_SIMD_CLONES
#define FM_SIMD_CLONES
#endif

/* ---- errors and logging (core/src/status.c, core/src/planner.c) ---- */
/* Set this thread's detail message and return s. printf-style. */
FM_INTERNAL_API fm_status fm_fail(fm_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* FFTW's planner is not thread-safe: every plan made or destroyed in the process, libfusemath_mpi's
 * too, is made under this lock (backends/cpu/fftw_fft.c). enter() also runs fftw_init_threads once
 * (before fftw_mpi_init, as FFTW asks) and returns whether FFTW's threads are usable. */
FM_INTERNAL_API int fm_fftw_planner_enter(void);
FM_INTERNAL_API void fm_fftw_planner_leave(void);
/* With FUSEMATH_LOG=plan on the context: one "fusemath[plan] ..." line on stderr. */
FM_INTERNAL_API void fm_log_plan(const fm_context *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void *fm_malloc_aligned(size_t bytes, size_t align); /* NULL on failure; free with fm_free_aligned */
void fm_free_aligned(void *p);
/* Host scratch for executes (host_scratch.c): 64-byte aligned; large buffers are kept in a
 * bounded process-wide cache after fm_host_scratch_free and handed out again (no fresh pages
 * to fault in per call). fm_host_scratch_trim releases the cache. */
void *fm_host_scratch_alloc(size_t bytes); /* NULL on failure */
void fm_host_scratch_free(void *p);        /* NULL is fine */
void fm_host_scratch_trim(void);
/* Part `part` of `nparts` of [base, base + bytes) mapped writable now, content unchanged
 * (host_prefault.c): threads about to write strided shares of a fresh output fault it in
 * side by side instead of queueing on the same pages. */
void fm_host_prefault(void *base, size_t bytes, int part, int nparts);

/* The dtype as NumPy / PyTorch spell it ("float32"; fm_dtype_name: "f32"), for messages to front
 * ends whose users know those names. */
const char *fm_dtype_word(fm_dtype t);
/* 1 for the integer dtypes and bool (computed exactly), else 0. */
int fm_dtype_is_integer(fm_dtype t);

/* Byte range [lo, hi) a strided tensor touches, relative to its data pointer
 * (lo <= 0 with negative strides; lo == hi for an empty tensor). */
FM_INTERNAL_API void fm_tensor_byte_span(const fm_tensor *t, int64_t *lo, int64_t *hi);
/* Whether t's element count, and its byte span from the lowest to the highest element it
 * addresses, fit a signed 64-bit count (FM_ERR_TOO_LARGE naming op and name otherwise; a
 * descriptor past that matches no real buffer, and the span arithmetic would overflow). Every
 * operand is checked before fm_tensor_byte_span or fm_tensor_check_distinct looks at it. */
fm_status fm_tensor_check_range(const char *op, const char *name, const fm_tensor *t);
/* FM_ERR_ALIAS naming op and its output slot when two elements of output t share memory. */
fm_status fm_tensor_check_distinct(fm_op op, int slot, const fm_tensor *t);
/* The slots of the last alias failure (fm_last_error_slots), set after its fm_fail. */
void fm_fail_slots(int slot, int other);
/* s, the failure just made, recorded as one about slot's operand (its message starts with the slot's
 * name), so that a front end can name the operand as its caller passed it. */
fm_status fm_about_slot(fm_status s, int slot);
/* The device t computes on (FM_DEVICE_AUTO resolved from its pointer; pinned -> cpu,
 * managed -> cuda); FM_ERR_DEVICE naming `op` and `name` for other device types. */
FM_INTERNAL_API fm_status fm_tensor_resolve_device(const char *op, const char *name, const fm_tensor *t, fm_device *dev);

/* Plan-time attachments: what a problem's key holds only as a digest (an FFT callback's source
 * text and symbol), handed to the backends while they plan. Valid during planning only: a plan
 * that needs any of it later copies it. Meaning per operation (fft: FM_FFT_ATTACH_*). */
#define FM_MAX_ATTACHMENTS 4
typedef struct fm_attachments {
    const char *text[FM_MAX_ATTACHMENTS];
} fm_attachments;
enum { FM_FFT_ATTACH_PROLOG_SOURCE, FM_FFT_ATTACH_PROLOG_SYMBOL, FM_FFT_ATTACH_EPILOG_SOURCE, FM_FFT_ATTACH_EPILOG_SYMBOL };

/* ---- problems ---- */
typedef struct fm_matmul_params {
    double alpha[2];
    double beta[2];
    unsigned epilogue;
    int32_t num_threads; /* resolved: never 0 */
    int32_t panel_rows;  /* 0 = backend heuristic */
    int32_t cpu_strategy; /* fm_cpu_strategy */
    int32_t compute;      /* fm_compute */
    int32_t gpu_algo;     /* 0 = heuristic's first candidate */
    int32_t gpu_passes;   /* 0 auto, 1 fused, 2 GEMM + elementwise kernel */
    double clamp[2];      /* only with FM_EPILOGUE_CLAMP, else zero */
    double dropout;       /* p, only with FM_EPILOGUE_DROPOUT / DDROPOUT, else zero */
} fm_matmul_params;

typedef struct fm_fft_params {
    int32_t kind, inverse, naxes;
    int32_t axes[3];  /* normalised: 0 <= axis < ndim, ascending but for the last (r2c / c2r: the halved) */
    int64_t n[3];     /* logical transform length per axis (c2r: from out) */
    int32_t norm, effort, num_threads;
    unsigned prolog_ops, epilog_ops; /* FM_FFT_OP_* still to apply (scales folded away where exact) */
    int32_t gpu_prolog;              /* fm_fft_gpu_prolog as asked (AUTO resolved by the backends) */
    int32_t cpu_path; /* tunable: FM_FFT_CPU_PATH_* the CPU FFT takes where FFTW's plan and the library's
                         paths compete (0: timed at measure/patient, else the heuristic); wisdom sets it */
    /* naxes > 3: the axes after axes[0..2], in the same order (their n from the shapes). Core
     * plans such a problem as steps of at most 3 axes (fft_axis_split.c); backends never see it. */
    int8_t axes_more[FM_MAX_NDIM - 3];
    double prolog_scale[2]; /* x * prolog_scale * prolog_array, then conj */
    double epilog_scale[2]; /* y * epilog_scale * epilog_array, then conj; the norm is folded in here */
    /* FM_FFT_OP_CALLBACK: SHA-256 of the symbol and source of the user's device function (the
     * text itself is not plain data: fm_fft_callback_text gives it to a backend while planning) */
    uint8_t prolog_cb[32], epilog_cb[32];
} fm_fft_params;
/* fm_fft_params.cpu_path, named as FUSEMATH_FFT_CPU_PATH names them (backends/cpu/fftw_timed.c):
 * FFTW's plans (direct), the library's chunks through the scratch or the split (chunks), a
 * prolog or a plain c2c batch of rows gathered into out, FFTW in place there (inplace). */
enum { FM_FFT_CPU_PATH_TIMED, FM_FFT_CPU_PATH_DIRECT, FM_FFT_CPU_PATH_CHUNKS, FM_FFT_CPU_PATH_INPLACE };


typedef struct fm_rng_params {
    int32_t distribution, mode; /* fm_rng_distribution, fm_rng_mode; the seed is per call (ints[3]) */
    double a, b;         /* uniform: low, high; normal / lognormal: mean, stddev; exponential: scale, 0;
                            poisson: lam, 0 */
    int64_t ia, ib;      /* integers: the lowest and the highest value (both included) */
    int32_t num_threads; /* resolved: never 0 */
} fm_rng_params;

/* A solve problem (core/src/solve_problem.c): the routine and its options as numbers, the matrix
 * sizes and the broadcast batch; operands' own batch axes are read from p->t with fm_solve_batch_offset. */
typedef struct fm_solve_params {
    int32_t routine;                    /* fm_solve_routine */
    int32_t uplo, transpose, unit_diagonal, check, check_finite, qr_mode, full_matrices, values_only;
    int32_t num_threads;                /* resolved: never 0 */
    int32_t refine;                     /* gesv: fm_solve_refine (the cpu ignores it) */
    int32_t trusted_factor;             /* fm_solve_options.trusted_factor (routines that read a factor) */
    double rcond;                       /* gelsd; < 0: machine epsilon (LAPACK's rule) */
    int64_t m, n, nrhs;                 /* a is m x n (square routines: m == n); b is m x nrhs */
    int64_t batch_count;
    int32_t batch_ndim;
    int8_t core_ndim[FM_SOLVE_NSLOTS];  /* per slot: the matrix / vector / scalar axes at the end */
    int64_t batch_shape[FM_MAX_NDIM];
} fm_solve_params;

/* The routine's name as numpy.linalg / scipy.linalg call it ("solve", "cholesky"), for messages. */
FM_INTERNAL_API const char *fm_solve_routine_name(int routine);
/* "a" or "a[2, 0]": batch entry b of slot name; FM_ERR_LINALG for entry b's info > 0 (NumPy's words;
 * core/src/solve_problem.c), shared by the backends so that CPU and GPU say the same. */
FM_INTERNAL_API void fm_solve_entry_name(const fm_solve_params *sp, const char *name, int64_t b, char *buf, size_t n);
FM_INTERNAL_API fm_status fm_solve_fail_info(const fm_solve_params *sp, int64_t b, int64_t info);

/* A problem is plain data, zero-initialised before filling so it can be hashed and
 * compared byte-wise. Data pointers are never part of it. */
typedef struct fm_problem {
    uint64_t settings_key;          /* the context's fm_settings.plan_key */
    fm_op op;
    int32_t nslots;
    uint32_t present;               /* bit i: slot i is used */
    fm_device exec_device;          /* where the computation runs */
    int32_t best;                   /* FM_EXECUTION_BEST chose exec_device: 1 measured profile, 2 built-in model */
    float best_ms[2];               /* its predictions (ms): cpu, cuda (-1: not a candidate), copies included */
    fm_tensor t[FM_MAX_SLOTS];      /* data == NULL */
    uint8_t align_log2[FM_MAX_SLOTS]; /* pointer alignment seen at planning, capped at 8 (256 B) */
    uint32_t output_mask;           /* bit i: slot i is written */
    int8_t inplace_partner[FM_MAX_SLOTS]; /* input slot that may alias output slot i exactly, or -1 */
    const char *slot_names[FM_MAX_SLOTS]; /* static strings, for messages (not hashed) */
    union {
        fm_matmul_params matmul;
        fm_fft_params fft;
        fm_rng_params rng;
        fm_solve_params solve;
        uint8_t raw[192];
    } u;
    /* FM_EXECUTION_BEST's split (core/src/split.c): indices [0, split) of the chunk hook's axis on the
     * cpu, the rest on cuda:(best >> 8) at once (0: not split); its predicted time (ms). Last, so that
     * wisdom's stable hash of an unsplit problem covers the bytes it always did. */
    int64_t split;
    float split_ms;
    int32_t split_cpu_threads; /* the cpu part's threads (the rest copy the GPU part's operands) */
} fm_problem;

/* Element offset in slot s of p (a solve problem) of batch entry b in [0, batch_count): the
 * slot's batch axes broadcast against the batch (extent 1: stride ignored). */
FM_INTERNAL_API int64_t fm_solve_batch_offset(const fm_problem *p, int slot, int64_t b);

/* Pointer alignment as log2 (8 for NULL, capped at 8), and the rule putting it in a key:
 * zero for cpu execution, at most 4 (16 bytes) for cuda. */
unsigned fm_align_log2_of(const void *p);
void fm_problem_key_alignment(fm_problem *p);

/* Zero every slot's data pointer and its shape/strides past ndim. Builders copy callers'
 * descriptors, whose entries past ndim are whatever the caller left there (fm_tensor_init zeroes
 * them, a hand-filled descriptor need not); a problem's bytes are the cache and wisdom key, so an
 * identical problem would otherwise miss both. */
void fm_problem_key_tails(fm_problem *p);
uint64_t fm_problem_hash(const fm_problem *p);
bool fm_problem_equal(const fm_problem *a, const fm_problem *b);

/* The source and symbol of the chain's raw callback (epilog = 0 prolog, 1 epilog) of problem p
 * among the attachments the plan is being made with, or NULL when p has none. */
FM_INTERNAL_API const char *fm_fft_callback_text(const fm_attachments *att, const fm_problem *p, int epilog,
                                                 const char **symbol);
/* p's gpu_prolog (AUTO overridden by FUSEMATH_CUFFT_PROLOG=kernel|pass|callback when the problem
 * was built); AUTO whatever was asked when there is no chain or nothing to compute */
FM_INTERNAL_API int fm_fft_gpu_prolog_mode(const fm_problem *p);
/* The mode a problem built under these settings records: asked, or for AUTO what
 * FUSEMATH_CUFFT_PROLOG=kernel|pass|callback says (for experiments; settings NULL: asked). */
int fm_fft_prolog_mode_setting(const fm_settings *settings, int asked);
/* "scale+multiply+conj+callback" (the ops present) or "none", for describe() */
FM_INTERNAL_API void fm_fft_ops_text(char *buf, size_t size, unsigned ops);

/* Normalised view of a matmul problem for backends (core/src/matmul_problem.c). */
typedef struct fm_matmul_geom {
    int64_t m, n, k;
    int32_t batch_ndim;
    int64_t batch_shape[FM_MAX_NDIM];
    int64_t batch_count;
    /* per slot: element strides of the batch dims (0 where broadcast), then row/col strides */
    int64_t batch_strides[FM_MATMUL_NSLOTS][FM_MAX_NDIM];
    int64_t row_stride[FM_MATMUL_NSLOTS];
    int64_t col_stride[FM_MATMUL_NSLOTS];
    fm_dtype dtype;
} fm_matmul_geom;
FM_INTERNAL_API void fm_matmul_geom_from_problem(const fm_problem *p, fm_matmul_geom *g);
/* Element offset of batch index `b` (0 .. batch_count-1) for slot s. */
int64_t fm_matmul_batch_offset(const fm_matmul_geom *g, int slot, int64_t b);

/* ---- plans ---- */
/* args: the caller's per-call arguments, or a zeroed fm_exec_args when it passed none (never NULL). */
typedef fm_status (*fm_execute_fn)(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream);

/* The zeroed arguments an execute gets when its caller passed none. */
extern const fm_exec_args fm_no_exec_args;


struct fm_plan {
    atomic_int refcount;
    fm_problem problem;
    const struct fm_backend *backend;
    fm_context *ctx;            /* holds a reference: a plan outlives fm_context_destroy */
    void *impl;                 /* backend-owned */
    fm_execute_fn execute;
    void (*destroy_impl)(void *impl);
    size_t required_align[FM_MAX_SLOTS]; /* bytes each pointer must be aligned to at execute */
    const fm_attachments *attach; /* while a backend plans it: the attachments (never NULL); NULL after */
    char describe[FM_DESCRIBE_LEN];
    size_t footprint; /* bytes the plan holds, for the cache's byte cap: sizeof(fm_plan), plus what the
                         backend adds for what its impl holds (an estimate, e.g. FFTW's plans) */
};

/* Allocate a plan for problem p with refcount 1 (backend fills impl/execute/describe). */
fm_plan *fm_plan_alloc(const fm_problem *p);
/* Set p's describe() line, printf-style; a longer line is cut at FM_DESCRIBE_LEN. */
FM_INTERNAL_API void fm_plan_set_describe(fm_plan *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- settings: every environment variable the library reads, read once at context creation ---- */
struct fm_settings {
    int num_threads;           /* FUSEMATH_NUM_THREADS, else the online cores */
    char backend[64];          /* FUSEMATH_BACKEND: only this backend plans ("" = any) */
    char blas[1024];           /* FUSEMATH_BLAS: auto ("") | system | an OpenBLAS path (blas_provider.c) */
    int log_plan;              /* FUSEMATH_LOG contains "plan" */
    char cpu_kernel[16];       /* FUSEMATH_CPU_KERNEL: cap on the own GEMM kernel's ISA ("" = the best) */
    int cpu_kernel_kc;         /* FUSEMATH_CPU_KERNEL_KC: the kernel's k block (0: k in one block; -1: its default) */
    char fft_cpu_path[16];     /* FUSEMATH_FFT_CPU_PATH: direct|chunks|inplace forced ("" = timed/heuristic) */
    char cufft_prolog[16];     /* FUSEMATH_CUFFT_PROLOG: kernel|pass|callback for AUTO ("" = none) */
    int fft_kernel_regcap;     /* FUSEMATH_FFT_KERNEL_REGCAP (0: no register cap; -1: the default) */
    long cuda_workspace_mb;    /* FUSEMATH_CUDA_WORKSPACE_MB (-1 = default) */
    char cache_dir[512];       /* FUSEMATH_CACHE_DIR, else $XDG_CACHE_HOME/fusemath, else ~/.cache/fusemath */
    char cuda_module[512];     /* FUSEMATH_CUDA_MODULE: the module to load, skipping the driver probe ("": the
                                  libfusemath_cuda.so next to libfusemath.so, when a driver sees a device) */
    int64_t cache_max_bytes;   /* FUSEMATH_CACHE_MAX_MB (default 256) in bytes; fm_context_set_cache_max_bytes */
    int execution_best;        /* FUSEMATH_EXECUTION=best: FM_EXECUTION_AUTO calls are planned as BEST */
    int pipeline;              /* FUSEMATH_PIPELINE: FM_PIPELINE_AUTO (unset) | ON | OFF (core/src/pipeline.c) */
    int pipeline_threads;      /* FUSEMATH_PIPELINE_THREADS: the context's staging threads (core/src/copy_pool.c;
                                  unset: min(8, cores / 2), at least 1); not in plan_key: no plan computes
                                  otherwise, and the auto rule it feeds runs per context (its own cache) */
    int split;                 /* FUSEMATH_SPLIT: 1 auto (unset: best may split a batch over cpu + GPU), 0 off
                                  (core/src/split.c); not in plan_key: the decision is in the problem */
    int solve_eig_batched;     /* FUSEMATH_SOLVE_EIG_BATCHED: FM_EIG_BATCHED_AUTO (unset: the cuSOLVER backend's
                                  table) | SYEVJ | XSYEV | LOOP, the batched eigh routine forced (measuring) */
    int solve_irs;             /* FUSEMATH_SOLVE_IRS: the GPU's refinement solver, FM_IRS_* (unset: GMRES) */
    /* Hash of the settings that change what a plan does (all but num_threads, log_plan and the
     * directories): part of every problem's key, so a plan made under other settings is never
     * returned from the cache or wisdom. */
    uint64_t plan_key;
};
/* fm_settings.pipeline: host operands of a GPU call copied in chunks overlapping the compute when
 * the chunk rule says it pays (auto), whenever the problem splits at all (on), or never (off). */
enum { FM_PIPELINE_AUTO = 0, FM_PIPELINE_ON = 1, FM_PIPELINE_OFF = 2 };
/* fm_settings.solve_eig_batched: eigh of a batch on the GPU by the table in cusolver_batched.c (auto), or
 * forced to syevjBatched (n <= 32, its limit), XsyevBatched, or the per-entry Xsyevd loop. */
enum { FM_EIG_BATCHED_AUTO = 0, FM_EIG_BATCHED_SYEVJ = 1, FM_EIG_BATCHED_XSYEV = 2, FM_EIG_BATCHED_LOOP = 3 };
/* fm_settings.solve_irs: cusolverDnIRSXgesv's refinement solver (cusolver_refine.c): gmres (the default,
 * cuSOLVER's documented best), classical, classical-gmres, gmres-gmres. */
enum { FM_IRS_GMRES = 0, FM_IRS_CLASSICAL = 1, FM_IRS_CLASSICAL_GMRES = 2, FM_IRS_GMRES_GMRES = 3 };
/* The settings of ctx. */
FM_INTERNAL_API const fm_settings *fm_context_settings(const fm_context *ctx);
/* Read them from the environment (context creation; tests). FM_ERR_INVALID_ARGUMENT naming the
 * variable for a malformed FUSEMATH_NUM_THREADS. */
fm_status fm_settings_read(fm_settings *s);
/* mkdir -p (the cache directory's parts); 0 when the directory exists afterwards. */
FM_INTERNAL_API int fm_make_dirs(const char *path);

/* ---- backends ---- */
typedef struct fm_backend {
    const char *name;       /* "openblas", "cublaslt" */
    fm_device_type device;  /* device type whose data it computes on */
    uint32_t ops;           /* bit (1u << fm_op) per operation: plan() and hooks see only these */
    int priority;           /* higher is offered first */
    /* Create per-context state (library handles; *state is NULL before); return FM_ERR_UNAVAILABLE
     * with a reason in *why (static string or fm_last_error()) when the device is absent. */
    fm_status (*probe)(const fm_settings *settings, void **state, const char **why);
    void (*release)(void *state);
    /* Plan p or return FM_ERR_NOT_APPLICABLE (with a reason via fm_fail) so the next
     * backend is tried; any other error stops planning. On success fill plan->impl,
     * execute, destroy_impl, required_align and describe. */
    fm_status (*plan)(fm_context *ctx, void *state, const fm_problem *p, fm_plan *plan);
    /* Optional: the library's own planning knowledge (FFTW wisdom) as text, saved and
     * loaded with the context's wisdom file. export: malloc'ed string (NULL = nothing). */
    fm_status (*wisdom_export)(char **text);
    fm_status (*wisdom_import)(const char *text);
    void (*wisdom_forget)(void); /* optional: drop that knowledge (fm_context_wisdom_forget) */
    /* Optional: what a tuned choice depends on besides the problem (library version, device
     * model, settings), as text in buf. Wisdom entries are keyed by it too, so a choice tuned
     * with another library build, GPU or thread count is not applied here. */
    void (*wisdom_salt)(const fm_context *ctx, void *state, const fm_problem *p, char *buf, size_t n);
    /* Optional: the variants of p worth timing in autotune (p with the operation's tunable fields
     * set, see fm_operation.tunables), at most max of them, into cand[]; group[i] numbers runs of
     * candidates where the first that fails to plan ends its run (a library's candidate list of
     * unknown length). Return the count. The generic autotune (core/src/autotune.c) times the
     * default plan against every candidate of every backend that could plan p. */
    int (*tune_candidates)(const fm_context *ctx, void *state, const fm_problem *p, fm_problem *cand, int *group,
                           int max);
} fm_backend;

/* The table of built-in backends lives in backends/registry.c, not in core/, so a
 * new backend is a new file plus a row there. */
extern const fm_backend *const fm_builtin_backends[];
extern const int fm_builtin_backend_count;

/* Device memory operations, for moving operands when execution is explicit. */
typedef struct fm_device_ops {
    fm_device_type device;
    /* stream-ordered where the device has streams (cudaMallocAsync / cudaFreeAsync) */
    fm_status (*alloc)(int device_id, size_t bytes, void *stream, void **ptr);
    void (*free)(int device_id, void *ptr, void *stream);
    /* copy bytes between host and this device (either side may be host) on stream; wait for
     * it when `wait` (a host destination must be complete before anyone reads it) */
    fm_status (*copy)(void *dst, fm_device dst_dev, const void *src, fm_device src_dev, size_t bytes,
                      void *stream, int wait);
    /* classify a pointer for FM_DEVICE_AUTO; return FM_ERR_NOT_APPLICABLE if unknown */
    fm_status (*classify)(const void *ptr, fm_device *dev);
    /* wait until all work queued on the device is done (timing in autotune); NULL = nothing to wait for */
    fm_status (*sync)(int device_id);
    /* Pipelined host<->device transfers (core/src/pipeline.c); all NULL where the device has no
     * streams (the cpu). Streams are non-blocking (no implicit order with the legacy stream);
     * events carry no timing. */
    fm_status (*stream_create)(int device_id, void **stream);
    void (*stream_destroy)(void *stream);
    fm_status (*stream_sync)(void *stream);
    fm_status (*event_create)(int device_id, void **event);
    void (*event_destroy)(void *event);
    fm_status (*event_record)(void *event, void *stream);
    fm_status (*stream_wait_event)(void *stream, void *event); /* later work on stream waits for it */
    fm_status (*event_sync)(void *event);                       /* the host waits for it */
    fm_status (*host_alloc_pinned)(size_t bytes, void **ptr);   /* page-locked host memory */
    void (*host_free_pinned)(void *ptr);
    /* bytes between pinned host memory and this device, queued on stream: no staging, no wait */
    fm_status (*copy_async)(void *dst, const void *src, size_t bytes, void *stream);
} fm_device_ops;
/* The memory operations of a device type, or NULL. */
FM_INTERNAL_API const fm_device_ops *fm_device_ops_for(int device_type);
/* The device types' memory operations in classification order (the CUDA module's first, once it is
 * loaded), i from 0; NULL past the last (backends/registry.c). */
const fm_device_ops *fm_device_ops_at(int i);

/* ---- the CUDA module: backends/cuda + fusion/cuda as libfusemath_cuda.so, the only part of fusemath
 * that links the CUDA libraries; core loads it at the first context creation (core/src/cuda_module.c) ---- */
#define FM_CUDA_MODULE_ABI 1
/* The sizes of what core and module share by layout: a module built from other sources is refused. */
#define FM_CUDA_MODULE_LAYOUT                                                                               \
    ((uint64_t)sizeof(fm_backend) | (uint64_t)sizeof(fm_plan) << 16 | (uint64_t)sizeof(fm_problem) << 32 | \
     (uint64_t)sizeof(fm_settings) << 48)
typedef struct fm_cuda_module {
    int abi_version;   /* FM_CUDA_MODULE_ABI */
    uint64_t layout;   /* FM_CUDA_MODULE_LAYOUT */
    const fm_backend *const *backends; /* joined to every context after the built-in rows */
    int nbackends;
    const fm_device_ops *device_ops;   /* cuda memory operations */
    int (*device_count)(void);         /* usable CUDA devices (the runtime's count, probed once) */
} fm_cuda_module;
/* The module's one export, fm_cuda_module_entry (backends/cuda/cuda_entry.c), returns that table.
 * fm_cuda_module_get: the module, loaded once per process (thread-safe; settings: the creating
 * context's, NULL: read here), or NULL with *why (if given) saying why not (no driver, no device,
 * a dlopen failure). */
const fm_cuda_module *fm_cuda_module_get(const fm_settings *settings, const char **why);
/* For messages about a cuda:N that is not there: "no CUDA device is available (<why>)" when there is
 * none (why: the module's absence, else the runtime's empty count), else "that device does not exist". */
const char *fm_cuda_missing_device_text(void);
/* The row that stands for the CUDA backends in a context when the module is absent: never
 * available, its reason says why (fm_context_backend_info, planner messages, FUSEMATH_LOG=plan). */
extern const fm_backend fm_cuda_absent_backend;

/* Registration at run time (used by tests with a fake backend). */
fm_status fm_context_register_backend(fm_context *ctx, const fm_backend *b);

/* ---- context internals ---- */
/* The thread count a plan runs with: requested (0: the context setting), at most four per
 * online core (and at least 16 allowed). */
int fm_context_threads_for(const fm_context *ctx, int requested);
/* A problem planned: from the cache, else by the planner (att NULL: no plan-time attachments). */
FM_INTERNAL_API fm_status fm_plan_problem_with(fm_context *ctx, const fm_problem *p, const fm_attachments *att,
                                             fm_plan **plan);
/* The same without the plan cache (neither looked up nor filled): autotune's candidates. */
fm_status fm_plan_problem_uncached(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **plan);
/* Plan p whose operands live on other devices than p->exec_device (staging.c); no caching. why: why
 * it is not pipelined (core/src/pipeline.c), for describe() ("" says nothing). */
fm_status fm_plan_build_staged(fm_context *ctx, const fm_problem *p, const fm_attachments *att, fm_plan **plan,
                               const char *why);
/* *plan: a new plan for problem key that executes `target`, cached under key (taking over the
 * caller's reference to target). Autotune and wisdom: the tuned plan answers for the default key.
 * An alias given as target is replaced by its own target: repeated autotunes never build a chain. */
fm_status fm_plan_alias_for(fm_context *ctx, const fm_problem *key, fm_plan *target, fm_plan **plan);
/* The plan an alias executes; p itself when p is no alias. */
const fm_plan *fm_plan_alias_target(const fm_plan *p);
/* Replace the cached plan for its problem (autotune). */
void fm_context_cache_put(fm_context *ctx, fm_plan *plan);
/* The cached plan for p (retained) or NULL. */
fm_plan *fm_context_cache_get(fm_context *ctx, const fm_problem *p);

/* ---- wisdom (core/src/wisdom.c): autotune results that outlive the process ---- */
/* Hash of p that is the same in every process (no pointers). */
uint64_t fm_problem_stable_hash(const fm_problem *p);
/* Remember that `tuned` (p with its tuning fields set) won for p. */
void fm_wisdom_record(fm_context *ctx, const fm_problem *p, const fm_problem *tuned, const char *describe);
/* If wisdom holds a result for p (untuned), fill *tuned and return 1. */
int fm_wisdom_lookup(fm_context *ctx, const fm_problem *p, fm_problem *tuned);
void fm_wisdom_clear_(fm_context *ctx);

/* ---- small helpers ---- */
static inline int64_t fm_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t fm_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
/* The median of v[0..n), n >= 1 and small (sorts v in place: insertion). */
static inline double fm_median(double *v, int n)
{
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && v[b] < v[b - 1]; b--) {
            const double t = v[b];
            v[b] = v[b - 1];
            v[b - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
/* Autotune's timing rules (autotune.c): calls per GPU timing for a plan taking
 * est seconds a call (at least `repeats` and 1 ms, at most 1000); the relative gain a
 * candidate must show over the default given the default's drifts between the two timings
 * around each candidate (GPU; drift is reordered), 3% on the CPU. */
int fm_autotune_gpu_calls(double est_seconds, int repeats);
double fm_now_seconds(void); /* a monotonic clock, for timings */
/* h with n bytes of p hashed on (FNV-1a steps; start from FM_FNV_START): stable across builds,
 * for settings keys, wisdom salts and the profile's checksum. */
#define FM_FNV_START 0xcbf29ce484222325ull
uint64_t fm_fnv1a(uint64_t h, const void *p, size_t n);
int fm_autotune_sustained_calls(double est_seconds);
double fm_autotune_required_gain(int on_gpu, double *drift, int n);

/* The part size that cuts `total` into the smallest multiple of `threads` parts that is at least
 * `parts`: a static schedule then gives every thread the same count (the CPU FFT's chunks, the
 * CPU matmul's row panels). */
static inline int64_t fm_part_for_threads(int64_t total, int64_t parts, int threads)
{
    const int64_t want = (parts + threads - 1) / threads * threads;
    return (total + want - 1) / want;
}

#endif
