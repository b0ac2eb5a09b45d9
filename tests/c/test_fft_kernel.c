/* test_fft_kernel.c : the fused FFT kernel generator (fusion/cuda/fft_kernel.c) without a GPU:
 * which specs it takes and refuses, and that every generated source compiles with NVRTC for
 * sm_90 (each length, both directions, both precisions, every chain form, a user function next
 * to a generated chain).
 *
 * Its arithmetic too: the generated CUDA C++ is compiled by the host C++ compiler behind a small
 * prelude (float2/double2, __shared__ as function statics, __syncthreads as a barrier) and run
 * with one thread per CUDA thread, block after block, on host memory, against FFTW in double
 * (the library's CPU FFT). That checks the generator's index arithmetic, twiddles, chains and
 * barriers on any machine; test_fft_cufft_gpu checks the same against FFTW on the GPU. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <complex.h>
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef FM_HAVE_CUDA
#include "cuda/fft_kernel.h"
#include "cuda/nvrtc_cache.h"

#include "emu_kernel.h"
#include "env_settings.h"
#include "operation.h"

static const char *const opts[] = {"-std=c++17"};

static void chain(fm_cufft_cb_spec *c, int store, fm_dtype t, int64_t rows, int64_t n, unsigned ops)
{
    memset(c, 0, sizeof *c);
    c->store = store, c->data = t, c->ops = ops, c->ndim = 2;
    c->extent[0] = rows, c->extent[1] = n, c->stride[0] = n, c->stride[1] = 1;
    c->scale[0] = 0.5;
    if (ops & FM_FFT_OP_MULTIPLY) { /* a real window along the transform, broadcast over rows */
        c->array = t == FM_C128 ? FM_F64 : FM_F32;
        c->array_stride[1] = 1;
    }
}

static void spec(fm_fft_kernel_spec *s, fm_dtype t, int64_t rows, int64_t n)
{
    memset(s, 0, sizeof *s);
    s->dtype = t, s->n = n, s->in_stride = 1, s->out_stride = 1;
    s->nbatch = 1, s->batch_ext[0] = rows, s->batch_in[0] = n, s->batch_out[0] = n;
}

static int compiles(const fm_fft_kernel_spec *s)
{
    char *src = NULL;
    if (fm_fft_kernel_source(env_settings(), s, &src) != FM_OK)
        return 0;
    void *img = NULL;
    size_t size = 0;
    fm_status st = fm_nvrtc_compile(env_settings(), src, "fft kernel test", opts, 1, 90, 0, &img, &size, NULL);
    if (st != FM_OK)
        fprintf(stderr, "%s\n", fm_last_error());
    free(src);
    free(img);
    return st == FM_OK && size > 0;
}

static void test_limits(void)
{
    CHECK(fm_fft_kernel_max_n(FM_C64) == 4096);
    CHECK(fm_fft_kernel_max_n(FM_C128) == 2048);
    CHECK(fm_fft_kernel_max_n(FM_F32) == 0);
    fm_fft_kernel_spec s;
    fm_cufft_cb_spec pro, epi;
    chain(&pro, 0, FM_C64, 4, 4096, FM_FFT_OP_MULTIPLY);
    spec(&s, FM_C64, 4, 4096);
    s.prolog = &pro;
    CHECK_OK(fm_fft_kernel_check(&s));
    static const int64_t bad_n[] = {1, 3, 96, 1000, 8192};
    for (int i = 0; i < 5; i++) {
        s.n = bad_n[i];
        CHECK_MSG(fm_fft_kernel_check(&s) == FM_ERR_NOT_APPLICABLE, "n = %lld", (long long)bad_n[i]);
        CHECK_ERROR_MENTIONS("power of two");
    }
    spec(&s, FM_C128, 4, 4096);
    CHECK(fm_fft_kernel_check(&s) == FM_ERR_NOT_APPLICABLE);
    spec(&s, FM_F32, 4, 64);
    CHECK(fm_fft_kernel_check(&s) == FM_ERR_NOT_APPLICABLE);
    spec(&s, FM_C64, 4, 64);
    s.in_stride = 0;
    CHECK(fm_fft_kernel_check(&s) == FM_ERR_NOT_APPLICABLE);
    spec(&s, FM_C64, 4, 64);
    s.batch_out[0] = -64;
    CHECK(fm_fft_kernel_check(&s) == FM_ERR_NOT_APPLICABLE);
    /* a user function in both chains: two cuFFT callbacks instead */
    spec(&s, FM_C64, 4, 64);
    chain(&pro, 0, FM_C64, 4, 64, FM_FFT_OP_CALLBACK);
    chain(&epi, 1, FM_C64, 4, 64, FM_FFT_OP_CALLBACK);
    pro.user_source = epi.user_source = "__device__ float2 f(float2 x, unsigned long long o, const void *d) { return x; }";
    pro.user_symbol = epi.user_symbol = "f";
    s.prolog = &pro, s.epilog = &epi;
    CHECK(fm_fft_kernel_check(&s) == FM_ERR_NOT_APPLICABLE);
    CHECK_ERROR_MENTIONS("both");
    /* a chain spec of the wrong side */
    s.epilog = &pro, s.prolog = NULL;
    CHECK(fm_fft_kernel_check(&s) == FM_ERR_INVALID_ARGUMENT);
}

static void test_every_length_compiles(void)
{
    static const fm_dtype types[2] = {FM_C64, FM_C128};
    for (int ti = 0; ti < 2; ti++)
        for (int64_t n = 2; n <= fm_fft_kernel_max_n(types[ti]); n *= 2) {
            fm_fft_kernel_spec s;
            fm_cufft_cb_spec pro, epi;
            spec(&s, types[ti], 3, n);
            chain(&pro, 0, types[ti], 3, n, FM_FFT_OP_MULTIPLY | FM_FFT_OP_SCALE);
            chain(&epi, 1, types[ti], 3, n, FM_FFT_OP_CONJ);
            s.prolog = &pro, s.epilog = &epi;
            s.inverse = n % 8 != 0; /* both directions across the lengths */
            CHECK_MSG(compiles(&s), "%s n = %lld", fm_dtype_name(types[ti]), (long long)n);
            /* lanes mode: the transform along axis 0 of (n, 7), the rows contiguous */
            s.in_stride = s.out_stride = 7;
            s.batch_ext[0] = 7, s.batch_in[0] = s.batch_out[0] = 1;
            pro.stride[0] = epi.stride[0] = 1, pro.stride[1] = epi.stride[1] = 7;
            pro.extent[0] = epi.extent[0] = 7;
            CHECK_MSG(compiles(&s), "%s n = %lld, lanes", fm_dtype_name(types[ti]), (long long)n);
        }
}

/* The chain mode: FUSEMATH_CUFFT_PROLOG (read into the context's settings) overrides AUTO only
 * when the problem is built, and the mode counts only where a chain exists and something is
 * computed (a plain or empty transform with the variable set must still plan: cuFFT refuses a
 * forced kernel). */
static int mode_under(const char *env, int asked)
{
    fm_settings st;
    if (env)
        setenv("FUSEMATH_CUFFT_PROLOG", env, 1);
    else
        unsetenv("FUSEMATH_CUFFT_PROLOG");
    fm_settings_read(&st);
    unsetenv("FUSEMATH_CUFFT_PROLOG");
    return fm_fft_prolog_mode_setting(&st, asked);
}

static void test_gpu_prolog_mode(void)
{
    fm_problem prob;
    memset(&prob, 0, sizeof prob);
    int64_t four = 4;
    fm_tensor_init(&prob.t[FM_FFT_IN], NULL, (fm_device){FM_DEVICE_CUDA, 0}, FM_C64, 1, &four, NULL);
    prob.t[FM_FFT_OUT] = prob.t[FM_FFT_IN];
    fm_fft_params *fp = &prob.u.fft;
    fp->gpu_prolog = mode_under("kernel", FM_FFT_PROLOG_AUTO);
    CHECK(fm_fft_gpu_prolog_mode(&prob) == FM_FFT_PROLOG_AUTO); /* no chain: nothing to place */
    fp->epilog_ops = FM_FFT_OP_CONJ;
    CHECK(fm_fft_gpu_prolog_mode(&prob) == FM_FFT_PROLOG_KERNEL);
    fp->gpu_prolog = mode_under("kernel", FM_FFT_PROLOG_PASS);
    CHECK(fm_fft_gpu_prolog_mode(&prob) == FM_FFT_PROLOG_PASS); /* asked for: the variable does not override */
    fp->gpu_prolog = mode_under("kernel", FM_FFT_PROLOG_AUTO);
    CHECK(fm_fft_gpu_prolog_mode(&prob) == FM_FFT_PROLOG_KERNEL);
    prob.t[FM_FFT_OUT].shape[0] = 0; /* empty: nothing to compute */
    CHECK(fm_fft_gpu_prolog_mode(&prob) == FM_FFT_PROLOG_AUTO);
    prob.t[FM_FFT_OUT].shape[0] = 4;
    fp->gpu_prolog = mode_under("callback", FM_FFT_PROLOG_AUTO);
    CHECK(fm_fft_gpu_prolog_mode(&prob) == FM_FFT_PROLOG_CALLBACK);
    fp->gpu_prolog = mode_under("nonsense", FM_FFT_PROLOG_AUTO);
    CHECK(fm_fft_gpu_prolog_mode(&prob) == FM_FFT_PROLOG_AUTO);
    fp->gpu_prolog = mode_under(NULL, FM_FFT_PROLOG_AUTO);
    CHECK(fm_fft_gpu_prolog_mode(&prob) == FM_FFT_PROLOG_AUTO);
}

/* The batch size is a kernel argument: other batch sizes reuse the compiled kernel (the NVRTC
 * cache is keyed by the source); only small counts, which shrink the rows per block, differ. */
static void test_batch_size_not_in_source(void)
{
    fm_fft_kernel_spec a, b;
    fm_cufft_cb_spec pa, pb;
    spec(&a, FM_C64, 300, 1024);
    spec(&b, FM_C64, 70000, 1024);
    chain(&pa, 0, FM_C64, 300, 1024, FM_FFT_OP_MULTIPLY);
    chain(&pb, 0, FM_C64, 70000, 1024, FM_FFT_OP_MULTIPLY);
    a.prolog = &pa, b.prolog = &pb;
    char *sa = NULL, *sb = NULL;
    CHECK_OK(fm_fft_kernel_source(env_settings(), &a, &sa));
    CHECK_OK(fm_fft_kernel_source(env_settings(), &b, &sb));
    CHECK(sa && sb && strcmp(sa, sb) == 0);
    free(sb), sb = NULL;
    spec(&b, FM_C64, 1, 1024); /* one row: one row per block, another source */
    chain(&pb, 0, FM_C64, 1, 1024, FM_FFT_OP_MULTIPLY);
    b.prolog = &pb;
    CHECK_OK(fm_fft_kernel_source(env_settings(), &b, &sb));
    CHECK(sa && sb && strcmp(sa, sb) != 0);
    free(sa), free(sb);
}

/* The launch bounds a spec's source declares, "" when the spec is refused. mode: 'r' rows,
 * 'l' lanes (the rows are neighbours, the transform strided), 't' transposed store. */
static void bounds_of(const fm_settings *set, fm_dtype t, int64_t rows, int64_t n, char mode, char *buf, size_t size)
{
    fm_fft_kernel_spec s;
    fm_cufft_cb_spec p;
    spec(&s, t, rows, n);
    if (mode == 'l')
        s.in_stride = s.out_stride = rows, s.batch_in[0] = s.batch_out[0] = 1;
    if (mode == 't')
        s.out_stride = rows, s.batch_out[0] = 1;
    chain(&p, 0, t, rows, n, FM_FFT_OP_MULTIPLY);
    s.prolog = &p;
    char *src = NULL;
    buf[0] = 0;
    if (fm_fft_kernel_source(set, &s, &src) == FM_OK) {
        const char *b = strstr(src, "__launch_bounds__(");
        if (b)
            snprintf(buf, size, "%.*s", (int)(strchr(b, ')') - b + 1), b);
    }
    free(src);
}

/* complex64 kernels with 16 values per thread declare a minimum of blocks per SM (registers
 * capped at 64, so 1024 threads stay resident; at most 32 blocks, what an SM holds); 8 values
 * per thread, blocks of 1024 threads, complex128 and FUSEMATH_FFT_KERNEL_REGCAP=0 leave ptxas's
 * choice. */
static void test_register_cap(void)
{
    static const struct {
        fm_dtype t;
        int64_t rows, n;
        char mode;
        const char *want;
    } cases[] = {
        {FM_C64, 4096, 4096, 'r', "__launch_bounds__(256, 4)"},  /* 16x16x16 */
        {FM_C64, 4096, 1024, 'r', "__launch_bounds__(256, 4)"},  /* 16x8x8 */
        {FM_C64, 4096, 256, 'r', "__launch_bounds__(256)"},      /* 8 values per thread */
        {FM_C128, 4096, 1024, 'r', "__launch_bounds__(256)"},    /* complex128 */
        {FM_C64, 4096, 1024, 'l', "__launch_bounds__(512, 2)"},  /* lanes: a 2^20 multi-step's first step */
        {FM_C64, 4096, 4096, 'l', "__launch_bounds__(1024)"},    /* 1024 threads: no minimum */
        {FM_C64, 4, 16, 'l', "__launch_bounds__(4, 32)"},        /* four threads: 32 blocks at most */
        {FM_C64, 4096, 1024, 't', "__launch_bounds__(512, 2)"},  /* transposed store: its last step */
    };
    /* the settings as a context created with the variable unset, then with it = 0, reads them */
    const char *had = getenv("FUSEMATH_FFT_KERNEL_REGCAP");
    char saved[64] = "", b[64];
    if (had)
        snprintf(saved, sizeof saved, "%s", had);
    unsetenv("FUSEMATH_FFT_KERNEL_REGCAP");
    fm_settings set;
    CHECK_OK(fm_settings_read(&set));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bounds_of(&set, cases[i].t, cases[i].rows, cases[i].n, cases[i].mode, b, sizeof b);
        CHECK_MSG(strcmp(b, cases[i].want) == 0, "%s %lld x %lld (%c): %s, expected %s", fm_dtype_name(cases[i].t),
                  (long long)cases[i].rows, (long long)cases[i].n, cases[i].mode, b, cases[i].want);
    }
    setenv("FUSEMATH_FFT_KERNEL_REGCAP", "0", 1);
    CHECK_OK(fm_settings_read(&set));
    bounds_of(&set, FM_C64, 4096, 4096, 'r', b, sizeof b);
    CHECK_MSG(strcmp(b, "__launch_bounds__(256)") == 0, "cap off: %s", b);
    bounds_of(NULL, FM_C64, 4096, 4096, 'r', b, sizeof b); /* no settings: the default cap */
    CHECK_MSG(strcmp(b, "__launch_bounds__(256, 4)") == 0, "no settings: %s", b);
    bounds_of(&set, FM_C64, 4096, 4096, 'r', b, sizeof b);
    CHECK_MSG(strcmp(b, "__launch_bounds__(256)") == 0, "cap off: %s", b);
    if (had)
        setenv("FUSEMATH_FFT_KERNEL_REGCAP", saved, 1);
    else
        unsetenv("FUSEMATH_FFT_KERNEL_REGCAP");
}

static void test_chain_forms_compile(void)
{
    fm_fft_kernel_spec s;
    fm_cufft_cb_spec pro, epi;
    /* epilog only, prolog only */
    spec(&s, FM_C64, 5, 256);
    chain(&epi, 1, FM_C64, 5, 256, FM_FFT_OP_SCALE);
    s.epilog = &epi;
    CHECK(compiles(&s));
    spec(&s, FM_C64, 5, 256);
    chain(&pro, 0, FM_C64, 5, 256, FM_FFT_OP_MULTIPLY);
    pro.array = FM_C64; /* a complex array */
    s.prolog = &pro;
    CHECK(compiles(&s));
    /* a user function in the prolog next to a generated epilog, and the other way round: the
     * generated chain is namespaced, so the two sources' definitions do not collide */
    static const char *const user = "__device__ float2 phase(float2 x, unsigned long long off, const void *d)\n"
                                    "{ (void)d; float s, c; sincosf(0.01f * (float)off, &s, &c);\n"
                                    "  float2 r; r.x = x.x * c - x.y * s; r.y = x.x * s + x.y * c; return r; }\n";
    for (int side = 0; side < 2; side++) {
        spec(&s, FM_C64, 5, 512);
        chain(&pro, 0, FM_C64, 5, 512, side == 0 ? FM_FFT_OP_CALLBACK | FM_FFT_OP_MULTIPLY : FM_FFT_OP_MULTIPLY);
        chain(&epi, 1, FM_C64, 5, 512, side == 1 ? FM_FFT_OP_CALLBACK | FM_FFT_OP_SCALE : FM_FFT_OP_SCALE);
        fm_cufft_cb_spec *u = side == 0 ? &pro : &epi;
        u->user_source = user, u->user_symbol = "phase";
        s.prolog = &pro, s.epilog = &epi;
        CHECK_MSG(compiles(&s), "user function in the %s", side ? "epilog" : "prolog");
    }
    /* a user function whose helpers share names a kernel might use (cmul, add, T, R): the
     * generated kernel's own names are prefixed, so they do not collide */
    static const char *const clash = "typedef float2 T;\ntypedef float R;\n"
                                     "__device__ T add(T a, T b) { T r; r.x = a.x + b.x; r.y = a.y + b.y; return r; }\n"
                                     "__device__ T cmul(T a, T b) { T r; r.x = a.x * b.x - a.y * b.y; "
                                     "r.y = a.x * b.y + a.y * b.x; return r; }\n"
                                     "__device__ T twist(T x, unsigned long long off, const void *d)\n"
                                     "{ (void)d; T w; w.x = (R)0.5; w.y = (R)(off % 3); return add(cmul(x, w), x); }\n";
    spec(&s, FM_C64, 5, 1024);
    chain(&pro, 0, FM_C64, 5, 1024, FM_FFT_OP_CALLBACK);
    pro.user_source = clash, pro.user_symbol = "twist";
    chain(&epi, 1, FM_C64, 5, 1024, FM_FFT_OP_MULTIPLY);
    s.prolog = &pro, s.epilog = &epi;
    CHECK_MSG(compiles(&s), "user function named like the kernel's helpers");
    /* the four-step's column step (lanes, the twiddle on store, sincospi[f]) in both precisions */
    for (int dbl = 0; dbl < 2; dbl++) {
        memset(&s, 0, sizeof s);
        s.dtype = dbl ? FM_C128 : FM_C64, s.n = 1024, s.in_stride = s.out_stride = 1024, s.inverse = dbl;
        s.nbatch = 2, s.batch_ext[0] = 4, s.batch_in[0] = s.batch_out[0] = 1 << 20;
        s.batch_ext[1] = 1024, s.batch_in[1] = s.batch_out[1] = 1;
        s.tw_n = 1 << 20, s.tw_rows = 1024;
        CHECK_MSG(compiles(&s), "four-step column step, %s", dbl ? "c128" : "c64");
    }
    s.tw_n = 1 << 25;
    CHECK(fm_fft_kernel_check(&s) == FM_ERR_INVALID_ARGUMENT);
    /* several batch axes with their own strides (a transposed batch) */
    spec(&s, FM_C128, 1, 64);
    s.nbatch = 2;
    s.batch_ext[0] = 3, s.batch_in[0] = 64, s.batch_out[0] = 64 * 7;
    s.batch_ext[1] = 7, s.batch_in[1] = 64 * 3, s.batch_out[1] = 64;
    chain(&epi, 1, FM_C128, 1, 64, FM_FFT_OP_SCALE);
    s.epilog = &epi;
    CHECK(compiles(&s));
}

/* ---- the generated kernel on the host ---- */
static const char emu_prelude[] =
    "#include <cmath>\n#include <cstdio>\n#include <pthread.h>\n"
    "struct float2 { float x, y; };\nstruct double2 { double x, y; };\nstruct ushort2 { unsigned short x, y; };\n"
    "struct fm_emu_dim3 { unsigned x, y, z; };\n"
    "extern thread_local fm_emu_dim3 threadIdx, blockIdx;\nvoid fm_emu_barrier();\n"
    "#define __device__\n#define __global__\n#define __forceinline__ inline\n#define __shared__ static\n"
    "#define __launch_bounds__(...)\n#define __syncthreads() fm_emu_barrier()\n"
    "#define FMK_DYN_SHARED(name) static fmk_T name[FMK_SMEM_ELEMS]\n"
    "inline void sincospif(float x, float *s, float *c) { double a = M_PI * (double)x; *s = (float)std::sin(a); "
    "*c = (float)std::cos(a); }\n"
    "inline void sincospi(double x, double *s, double *c) { *s = std::sin(M_PI * x); *c = std::cos(M_PI * x); }\n";
static const char emu_driver[] =
    "\nthread_local fm_emu_dim3 threadIdx, blockIdx;\nstatic pthread_barrier_t fm_emu_bar;\n"
    "void fm_emu_barrier() { pthread_barrier_wait(&fm_emu_bar); }\n"
    "namespace {\nstruct emu_arg { unsigned tx, ty, bx; const void *in; void *out; const void *pa, *ea; "
    "unsigned long long rows; };\n"
    "void *emu_thread(void *p)\n{\n    emu_arg *a = (emu_arg *)p;\n"
    "    threadIdx = {a->tx, a->ty, 0}; blockIdx = {a->bx, 0, 0};\n"
    "    fm_fft_kernel((const fmk_T *)a->in, (fmk_T *)a->out, a->pa, a->ea, a->rows);\n    return nullptr;\n}\n}\n"
    "extern \"C\" int fm_emu_launch(unsigned grid, unsigned bx, unsigned by, const void *in, void *out,\n"
    "                              const void *pa, const void *ea, unsigned long long rows)\n{\n"
    "    const unsigned nt = bx * by;\n    emu_arg *args = new emu_arg[nt];\n    pthread_t *th = new pthread_t[nt];\n"
    "    pthread_attr_t attr;\n    pthread_attr_init(&attr);\n    pthread_attr_setstacksize(&attr, 1 << 21); /* static TLS of the loaded libraries (ASan, CUDA) included */\n"
    "    int rc = 0;\n"
    "    for (unsigned b = 0; b < grid && rc == 0; b++) {\n"
    "        pthread_barrier_init(&fm_emu_bar, nullptr, nt);\n"
    "        for (unsigned i = 0; i < nt; i++) {\n"
    "            args[i] = {i % bx, i / bx, b, in, out, pa, ea, rows};\n"
    "            int e = pthread_create(&th[i], &attr, emu_thread, &args[i]);\n"
    "            if (e != 0) { /* the started threads wait at the barrier: the test fails, hung */\n"
    "                fprintf(stderr, \"emulator: pthread_create of thread %u of %u: error %d\\n\", i, nt, e);\n"
    "                return -1;\n            }\n"
    "        }\n"
    "        for (unsigned i = 0; i < nt; i++)\n            pthread_join(th[i], nullptr);\n"
    "        pthread_barrier_destroy(&fm_emu_bar);\n    }\n"
    "    pthread_attr_destroy(&attr);\n    delete[] args;\n    delete[] th;\n    return rc;\n}\n";

typedef int (*emu_launch_fn)(unsigned, unsigned, unsigned, const void *, void *, const void *, const void *,
                             unsigned long long);
static fm_context *g_ctx;
static char g_dir[64];
static int g_serial;

/* Compile the spec's kernel with the host compiler and load it; NULL (a failed check) if not. */
static void *emu_load(const fm_fft_kernel_spec *s, emu_launch_fn *fn)
{
    char *src = NULL;
    if (fm_fft_kernel_source(env_settings(), s, &src) != FM_OK) {
        CHECK_MSG(0, "source: %s", fm_last_error());
        return NULL;
    }
    char stem[32];
    snprintf(stem, sizeof stem, "k%d", g_serial++);
    void (*launch)(void) = NULL;
    void *h = emu_compile_load(g_dir, stem, "", emu_prelude, src, emu_driver, &launch);
    free(src);
    *fn = (emu_launch_fn)launch;
    return h;
}

/* element i of a complex64 / complex128 host buffer, and the same for a real one */
static double complex cget(const void *buf, int dbl, int64_t i)
{
    return dbl ? CMPLX(((const double *)buf)[2 * i], ((const double *)buf)[2 * i + 1])
               : CMPLX(((const float *)buf)[2 * i], ((const float *)buf)[2 * i + 1]);
}
static void cset(void *buf, int dbl, int64_t i, double re, double im)
{
    if (dbl)
        ((double *)buf)[2 * i] = re, ((double *)buf)[2 * i + 1] = im;
    else
        ((float *)buf)[2 * i] = (float)re, ((float *)buf)[2 * i + 1] = (float)im;
}
static double rget(const void *buf, int dbl, int64_t i) { return dbl ? ((const double *)buf)[i] : ((const float *)buf)[i]; }
static void rset(void *buf, int dbl, int64_t i, double v)
{
    if (dbl)
        ((double *)buf)[i] = v;
    else
        ((float *)buf)[i] = (float)v;
}

/* max |got - want| / max |want|, a NaN anywhere sticking */
typedef struct relerr {
    double e, m;
} relerr;
static void relerr_add(relerr *r, double complex got, double complex want)
{
    double d = cabs(got - want);
    if (!(d <= r->e) && !isnan(r->e))
        r->e = d;
    if (cabs(want) > r->m)
        r->m = cabs(want);
}
static double relerr_value(const relerr *r) { return r->e / (r->m > 0 ? r->m : 1); }

/* FFTW in double, unnormalized either way: ref[row * n + k] over the rows of v (rows x n) */
static void fftw_rows(double complex *v, int64_t rows, int64_t n, int inverse, double complex *ref)
{
    int64_t sh[2] = {rows, n};
    fm_tensor tv, tr;
    fm_tensor_init(&tv, v, (fm_device){FM_DEVICE_CPU, 0}, FM_C128, 2, sh, NULL);
    fm_tensor_init(&tr, ref, (fm_device){FM_DEVICE_CPU, 0}, FM_C128, 2, sh, NULL);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 1, o.axes[0] = 1, o.inverse = inverse;
    o.norm = inverse ? FM_FFT_NORM_FORWARD : FM_FFT_NORM_BACKWARD; /* no 1/n on either side */
    CHECK_OK(fm_fft(g_ctx, &tv, &tr, NULL, NULL, &o, NULL));
}

/* x laid out (A, n, B), the transform along the middle axis; y = fft(x * w * 0.5), for the
 * inverse ones conj(ifft(x * w * 0.5) * filter); in place or not. */
static void emu_case(fm_dtype dt, int64_t n, int inverse, int64_t A, int64_t B, int inplace)
{
    const int dbl = dt == FM_C128;
    const int64_t count = A * n * B, rows = A * B;
    const size_t es = fm_dtype_size(dt);
    fm_fft_kernel_spec s;
    memset(&s, 0, sizeof s);
    s.dtype = dt, s.n = n, s.inverse = inverse, s.in_stride = s.out_stride = B;
    s.nbatch = 2;
    s.batch_ext[0] = A, s.batch_in[0] = s.batch_out[0] = n * B;
    s.batch_ext[1] = B, s.batch_in[1] = s.batch_out[1] = 1;
    fm_cufft_cb_spec pro, epi;
    memset(&pro, 0, sizeof pro);
    pro.data = dt, pro.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_SCALE, pro.scale[0] = 0.5, pro.ndim = 3;
    pro.array = dbl ? FM_F64 : FM_F32;
    const int64_t ext[3] = {A, n, B}, st[3] = {n * B, B, 1};
    for (int d = 0; d < 3; d++)
        pro.extent[d] = ext[d], pro.stride[d] = st[d];
    pro.array_stride[1] = 1;
    /* the inverse ones: the epilog multiplies by a complex filter along the transform, then conj */
    epi = pro;
    epi.store = 1, epi.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ, epi.array = dt;
    s.prolog = &pro;
    s.epilog = inverse ? &epi : NULL;
    emu_launch_fn launch = NULL;
    void *h = emu_load(&s, &launch);
    if (!h)
        return;
    unsigned grid, bx, by;
    fm_fft_kernel_launch_shape(&s, &grid, &bx, &by);
    /* 8 values per thread, or 16 (where that saves a stage, or lanes mode needs the room) */
    const unsigned tpr8 = (unsigned)(n < 8 ? 1 : n / 8), tpr16 = (unsigned)(n < 16 ? 1 : n / 16);
    const unsigned tpr = B > 1 ? by : bx;
    CHECK_MSG(tpr == tpr8 || tpr == tpr16, "n=%lld B=%lld: block %ux%u (rows mode for B = 1, lanes for B > 1)",
              (long long)n, (long long)B, bx, by);
    void *in = malloc(es * (size_t)count), *out = inplace ? in : malloc(es * (size_t)count);
    void *w = malloc(es / 2 * (size_t)n), *filt = malloc(es * (size_t)n);
    double complex *rowsv = malloc(sizeof *rowsv * (size_t)count), *ref = malloc(sizeof *ref * (size_t)count);
    for (int64_t i = 0; i < count; i++)
        cset(in, dbl, i, sin(0.37 * (double)i + 0.1 * (double)n), cos(1.13 * (double)i));
    for (int64_t k = 0; k < n; k++) {
        cset(filt, dbl, k, cos(0.3 * (double)k), sin(0.7 * (double)k));
        rset(w, dbl, k, 0.5 + (double)((k * 7) % 13) / 13.0);
    }
    for (int64_t a = 0; a < A; a++) /* rowsv[(a B + b) n + k] = x[a, k, b] w[k] 0.5, as stored */
        for (int64_t b = 0; b < B; b++)
            for (int64_t k = 0; k < n; k++)
                rowsv[(a * B + b) * n + k] = cget(in, dbl, (a * n + k) * B + b) * rget(w, dbl, k) * 0.5;
    fftw_rows(rowsv, rows, n, inverse, ref);
    CHECK_MSG(launch(grid, bx, by, in, out, w, filt, (unsigned long long)rows) == 0, "launch");
    relerr r = {0, 0};
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t k = 0; k < n; k++) {
                double complex want = ref[(a * B + b) * n + k];
                if (inverse)
                    want = conj(want * cget(filt, dbl, k));
                relerr_add(&r, cget(out, dbl, (a * n + k) * B + b), want);
            }
    const double e = relerr_value(&r), tol = (dbl ? 1e-14 : 2e-7) * (4 + log2((double)n));
    CHECK_MSG(e < tol, "%s n=%lld %s (%lld, n, %lld)%s: rel err %.3g > %.3g", fm_dtype_name(dt), (long long)n,
              inverse ? "inverse" : "forward", (long long)A, (long long)B, inplace ? " in place" : "", e, tol);
    dlclose(h);
    free(in), free(w), free(filt), free(rowsv), free(ref);
    if (!inplace)
        free(out);
}

/* A long 1-D transform (n = n1 n2 > what one block holds) as the four-step the kernel backend
 * runs: A = lanes-mode length-n1 transforms down the columns of x viewed as n1 x n2 (prolog on
 * load, the twiddle w^(j2 k1) on store) into a scratch, then B = length-n2 transforms along its
 * rows, stored transposed (X[k1 + n1 k2]) through the epilog. y = conj(fft(x * w) * filter)
 * for the inverse ones, fft(x * w) otherwise; against FFTW. */
static void emu_four_step(fm_dtype dt, int64_t n1, int64_t n2, int inverse, int64_t batch)
{
    const int dbl = dt == FM_C128;
    const int64_t n = n1 * n2, count = batch * n;
    const size_t es = fm_dtype_size(dt);
    fm_cufft_cb_spec pro, epi;
    memset(&pro, 0, sizeof pro);
    pro.data = dt, pro.ops = FM_FFT_OP_MULTIPLY, pro.ndim = 2, pro.array = dbl ? FM_F64 : FM_F32;
    pro.extent[0] = batch, pro.extent[1] = n, pro.stride[0] = n, pro.stride[1] = 1, pro.array_stride[1] = 1;
    epi = pro;
    epi.store = 1, epi.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ, epi.array = dt;
    fm_fft_kernel_spec a, b;
    memset(&a, 0, sizeof a);
    a.dtype = dt, a.n = n1, a.inverse = inverse, a.in_stride = a.out_stride = n2;
    a.nbatch = 2;
    a.batch_ext[0] = batch, a.batch_in[0] = a.batch_out[0] = n;
    a.batch_ext[1] = n2, a.batch_in[1] = a.batch_out[1] = 1;
    a.prolog = &pro, a.tw_n = n, a.tw_rows = n2;
    b = a;
    b.n = n2, b.in_stride = 1, b.out_stride = n1, b.prolog = NULL, b.tw_n = 0, b.tw_rows = 0;
    b.batch_ext[1] = n1, b.batch_in[1] = n2, b.batch_out[1] = 1;
    b.epilog = inverse ? &epi : NULL;
    emu_launch_fn la = NULL, lb = NULL;
    void *ha = emu_load(&a, &la), *hb = emu_load(&b, &lb);
    void *x = malloc(es * (size_t)count), *mid = malloc(es * (size_t)count), *y = malloc(es * (size_t)count);
    void *w = malloc(es / 2 * (size_t)n), *filt = malloc(es * (size_t)n);
    double complex *v = malloc(sizeof *v * (size_t)count), *ref = malloc(sizeof *ref * (size_t)count);
    for (int64_t i = 0; i < count; i++)
        cset(x, dbl, i, sin(0.31 * (double)i), cos(0.77 * (double)i + 0.2));
    for (int64_t k = 0; k < n; k++) {
        rset(w, dbl, k, 0.5 + (double)((k * 5) % 11) / 11.0);
        cset(filt, dbl, k, cos(0.01 * (double)k), sin(0.03 * (double)k));
    }
    for (int64_t i = 0; i < count; i++)
        v[i] = cget(x, dbl, i) * rget(w, dbl, i % n);
    fftw_rows(v, batch, n, inverse, ref);
    if (ha && hb) {
        unsigned g, bx, by;
        fm_fft_kernel_launch_shape(&a, &g, &bx, &by);
        CHECK_MSG(la(g, bx, by, x, mid, w, NULL, (unsigned long long)(batch * n2)) == 0, "launch A");
        fm_fft_kernel_launch_shape(&b, &g, &bx, &by);
        CHECK_MSG(lb(g, bx, by, mid, y, NULL, filt, (unsigned long long)(batch * n1)) == 0, "launch B");
        relerr r = {0, 0};
        for (int64_t i = 0; i < count; i++)
            relerr_add(&r, cget(y, dbl, i), inverse ? conj(ref[i] * cget(filt, dbl, i % n)) : ref[i]);
        const double e = relerr_value(&r), tol = (dbl ? 1e-14 : 2e-7) * (4 + log2((double)n));
        CHECK_MSG(e < tol, "four-step %s %lld x %lld %s, batch %lld: rel err %.3g > %.3g", fm_dtype_name(dt),
                  (long long)n1, (long long)n2, inverse ? "inverse" : "forward", (long long)batch, e, tol);
    }
    if (ha)
        dlclose(ha);
    if (hb)
        dlclose(hb);
    free(x), free(mid), free(y), free(w), free(filt), free(v), free(ref);
}

/* Several axes as one kernel pass per axis, as the backend runs them with gpu_prolog="kernel":
 * x (A, B, C) c2c over all three axes; pass 1 along axis 2 (rows mode) from x into y with the
 * prolog (a window over the whole array), passes 2 and 3 along axes 1 and 0 in place on y
 * (lanes mode), the last one with the epilog (conj). Against FFTW's 3-D transform. */
static void emu_axis_passes(fm_dtype dt, int64_t A, int64_t B, int64_t C, int inverse)
{
    const int dbl = dt == FM_C128;
    const int64_t count = A * B * C, ext[3] = {A, B, C}, st[3] = {B * C, C, 1};
    const size_t es = fm_dtype_size(dt);
    fm_cufft_cb_spec pro, epi;
    memset(&pro, 0, sizeof pro);
    pro.data = dt, pro.ops = FM_FFT_OP_MULTIPLY, pro.ndim = 3, pro.array = dbl ? FM_F64 : FM_F32;
    for (int d = 0; d < 3; d++)
        pro.extent[d] = ext[d], pro.stride[d] = pro.array_stride[d] = st[d];
    epi = pro;
    epi.store = 1, epi.ops = FM_FFT_OP_CONJ;
    fm_fft_kernel_spec k[3];
    void *h[3] = {NULL, NULL, NULL};
    emu_launch_fn fn[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        const int ax = 2 - i;
        memset(&k[i], 0, sizeof k[i]);
        k[i].dtype = dt, k[i].n = ext[ax], k[i].inverse = inverse, k[i].in_stride = k[i].out_stride = st[ax];
        for (int d = 0; d < 3; d++)
            if (d != ax) {
                k[i].batch_ext[k[i].nbatch] = ext[d];
                k[i].batch_in[k[i].nbatch] = k[i].batch_out[k[i].nbatch] = st[d];
                k[i].nbatch++;
            }
        k[i].prolog = i == 0 ? &pro : NULL;
        k[i].epilog = i == 2 ? &epi : NULL;
        h[i] = emu_load(&k[i], &fn[i]);
    }
    void *x = malloc(es * (size_t)count), *y = malloc(es * (size_t)count), *w = malloc(es / 2 * (size_t)count);
    double complex *v = malloc(sizeof *v * (size_t)count), *ref = malloc(sizeof *ref * (size_t)count);
    for (int64_t i = 0; i < count; i++) {
        cset(x, dbl, i, sin(0.23 * (double)i), cos(0.61 * (double)i));
        rset(w, dbl, i, 0.5 + (double)((i * 3) % 7) / 7.0);
        v[i] = cget(x, dbl, i) * rget(w, dbl, i);
    }
    fm_tensor tv, tr;
    fm_tensor_init(&tv, v, (fm_device){FM_DEVICE_CPU, 0}, FM_C128, 3, ext, NULL);
    fm_tensor_init(&tr, ref, (fm_device){FM_DEVICE_CPU, 0}, FM_C128, 3, ext, NULL);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 3, o.axes[0] = 0, o.axes[1] = 1, o.axes[2] = 2, o.inverse = inverse;
    o.norm = inverse ? FM_FFT_NORM_FORWARD : FM_FFT_NORM_BACKWARD;
    CHECK_OK(fm_fft(g_ctx, &tv, &tr, NULL, NULL, &o, NULL));
    if (h[0] && h[1] && h[2]) {
        for (int i = 0; i < 3; i++) {
            unsigned g, bx, by;
            fm_fft_kernel_launch_shape(&k[i], &g, &bx, &by);
            const int64_t rows = count / k[i].n;
            CHECK_MSG(fn[i](g, bx, by, i ? y : x, y, i == 0 ? w : NULL, NULL, (unsigned long long)rows) == 0, "pass %d",
                      i);
        }
        relerr r = {0, 0};
        for (int64_t i = 0; i < count; i++)
            relerr_add(&r, cget(y, dbl, i), conj(ref[i])); /* the epilog's conj */
        const double e = relerr_value(&r), tol = (dbl ? 1e-14 : 2e-7) * (4 + log2((double)count));
        CHECK_MSG(e < tol, "axis passes %s %lldx%lldx%lld %s: rel err %.3g > %.3g", fm_dtype_name(dt), (long long)A,
                  (long long)B, (long long)C, inverse ? "inverse" : "forward", e, tol);
    }
    for (int i = 0; i < 3; i++)
        if (h[i])
            dlclose(h[i]);
    free(x), free(y), free(w), free(v), free(ref);
}

static void test_emulated_axis_passes(void)
{
    emu_axis_passes(FM_C64, 8, 16, 32, 0);
    emu_axis_passes(FM_C128, 16, 4, 64, 1);
}

static void test_emulated_four_step(void)
{
    emu_four_step(FM_C64, 64, 128, 0, 2);
    emu_four_step(FM_C64, 128, 64, 1, 1);
    emu_four_step(FM_C128, 64, 64, 1, 2);
    emu_four_step(FM_C128, 32, 128, 0, 1);
}

/* ---- the backend's own planning (fft_kernel_plan.c) on problems built by the core ----
 * Host tensors through fft_problem (validation, norm folding, layouts as fm_fft_plan sees
 * them), the kernels the backend would make for it, run in its execute order (one kernel
 * in to out; the four-step in to scratch to out; axis passes in to out, then in place on out),
 * against the library's CPU FFT of the same call (FFTW with its own chain code). */
typedef struct ht {
    fm_tensor t;
    void *mem;
} ht;

/* The problem fm_fft_plan would plan for these operands and options (the core's own build). */
static fm_status fft_problem(fm_context *ctx, const fm_tensor *const ts[FM_FFT_NSLOTS], const fm_fft_options *o,
                             fm_problem *p)
{
    fm_attachments att;
    return fm_operation_build(ctx, &fm_operation_fft, ts, o, p, &att);
}

/* A host tensor of shape sh laid out in the axis order `order` (outermost first; NULL: C order),
 * filled from seed (complex, or real for a real dtype). */
static void ht_make(ht *h, fm_dtype dt, int nd, const int64_t *sh, const int *order, double seed)
{
    int64_t st[FM_MAX_NDIM], span = 1, count = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int d = order ? order[i] : i;
        st[d] = span;
        span *= sh[d];
    }
    for (int d = 0; d < nd; d++)
        count *= sh[d];
    h->mem = calloc((size_t)(count > 0 ? count : 1), fm_dtype_size(dt));
    fm_tensor_init(&h->t, h->mem, (fm_device){FM_DEVICE_CPU, 0}, dt, nd, sh, st);
    const int cplx = fm_dtype_is_complex(dt), dbl = dt == FM_C128 || dt == FM_F64;
    for (int64_t i = 0; i < count; i++) {
        double re = 0.5 + 0.5 * sin(seed + 0.37 * (double)i), im = cos(seed + 1.13 * (double)i);
        if (cplx)
            cset(h->mem, dbl, i, re, im);
        else
            rset(h->mem, dbl, i, re);
    }
}

/* Plan problem (in, out, pa, ea, o) the backend's way and run it on the host; 0 if it does not
 * plan (a failed check). kind: "one", "four", "passes". */
static int emu_problem(const fm_tensor *in, const fm_tensor *out, const fm_tensor *pa, const fm_tensor *ea,
                       const fm_fft_options *o, const char *kind)
{
    const fm_tensor *ts[FM_FFT_NSLOTS] = {in, out, pa, ea};
    fm_problem p;
    fm_status st = fft_problem(g_ctx, ts, o, &p);
    CHECK_MSG(st == FM_OK, "problem: %s", fm_last_error());
    if (st != FM_OK)
        return 0;
    fm_cufft_cb_spec chain[2];
    fm_fft_kernel_spec k[3];
    int order[3], nk = 0;
    int64_t scratch = 0;
    if (strcmp(kind, "one") == 0)
        st = fm_fft_kernel_one(&p, NULL, chain, &k[0]), nk = 1;
    else if (strcmp(kind, "four") == 0)
        st = fm_fft_kernel_steps(&p, NULL, chain, k, &nk, &scratch);
    else if (strncmp(kind, "steps", 5) == 0) /* "steps<cap>": three steps at small n */
        st = fm_fft_kernel_steps_capped(&p, NULL, chain, atoll(kind + 5), k, &nk, &scratch);
    else
        st = fm_fft_kernel_axis_passes(&p, NULL, chain, k, order, &nk);
    CHECK_MSG(st == FM_OK, "%s: %s", kind, fm_last_error());
    if (st != FM_OK)
        return 0;
    void *mid = scratch ? malloc((size_t)scratch * fm_dtype_size(in->dtype)) : NULL;
    int ok = 1;
    for (int i = 0; i < nk && ok; i++) {
        emu_launch_fn fn = NULL;
        void *h = emu_load(&k[i], &fn);
        if (!h)
            return 0;
        unsigned g, bx, by;
        fm_fft_kernel_launch_shape(&k[i], &g, &bx, &by);
        int64_t rows = 1;
        for (int j = 0; j < k[i].nbatch; j++)
            rows *= k[i].batch_ext[j];
        /* multi-step: in -> mid (-> mid) -> out; passes: in -> out, then out in place */
        const void *src = i == 0 ? in->data : mid ? mid : out->data;
        void *dst = mid && i < nk - 1 ? mid : out->data;
        const void *a = i == 0 && pa ? pa->data : NULL, *e = i == nk - 1 && ea ? ea->data : NULL;
        ok = fn(g, bx, by, src, dst, a, e, (unsigned long long)rows) == 0;
        CHECK_MSG(ok, "%s: kernel %d", kind, i);
        dlclose(h);
    }
    free(mid);
    return ok;
}

static void emu_vs_cpu(const char *what, const char *kind, ht *in, ht *out, const ht *pa, const ht *ea,
                       const fm_fft_options *o, int dbl)
{
    const int64_t count = fm_tensor_numel(&out->t);
    ht ref;
    ht_make(&ref, out->t.dtype, out->t.ndim, out->t.shape, NULL, 0);
    /* the CPU reference first: the emulated call may work in place on in */
    CHECK_OK(fm_fft(g_ctx, &in->t, &ref.t, pa ? &pa->t : NULL, ea ? &ea->t : NULL, o, NULL));
    if (emu_problem(&in->t, &out->t, pa ? &pa->t : NULL, ea ? &ea->t : NULL, o, kind)) {
        relerr r = {0, 0};
        int64_t idx[FM_MAX_NDIM] = {0};
        for (int64_t i = 0; i < count; i++) { /* out in its own layout, ref in C order */
            int64_t off = 0, rem = i;
            for (int d = out->t.ndim - 1; d >= 0; d--)
                idx[d] = rem % out->t.shape[d], rem /= out->t.shape[d];
            for (int d = 0; d < out->t.ndim; d++)
                off += idx[d] * out->t.strides[d];
            relerr_add(&r, cget(out->mem, dbl, off), cget(ref.mem, dbl, i));
        }
        const double e = relerr_value(&r), tol = dbl ? 1e-13 : 5e-6;
        CHECK_MSG(e < tol, "%s: rel err %.3g > %.3g against the CPU path", what, e, tol);
    }
    free(ref.mem);
}

static void test_emulated_backend_planning(void)
{
    fm_fft_options o;
    /* one kernel: (5, 256) rows, a window and the ortho norm, inverse, epilog scale */
    {
        int64_t sh[2] = {5, 256}, wsh[1] = {256};
        ht x, y, w;
        ht_make(&x, FM_C64, 2, sh, NULL, 1), ht_make(&y, FM_C64, 2, sh, NULL, 0), ht_make(&w, FM_F32, 1, wsh, NULL, 2);
        fm_fft_options_init(&o);
        o.naxes = 1, o.axes[0] = 1, o.inverse = 1, o.norm = FM_FFT_NORM_ORTHO;
        o.prolog.ops = FM_FFT_OP_MULTIPLY, o.epilog.ops = FM_FFT_OP_SCALE, o.epilog.scale[0] = 3;
        emu_vs_cpu("one kernel, rows", "one", &x, &y, &w, NULL, &o, 0);
        free(x.mem), free(y.mem), free(w.mem);
    }
    /* one kernel, lanes: axis 0 of (128, 6) c128, into an F-ordered out, a complex epilog filter */
    {
        int64_t sh[2] = {128, 6}, fsh[2] = {128, 1};
        const int f_order[2] = {1, 0};
        ht x, y, f;
        ht_make(&x, FM_C128, 2, sh, NULL, 3), ht_make(&y, FM_C128, 2, sh, f_order, 0);
        ht_make(&f, FM_C128, 2, fsh, NULL, 4);
        fm_fft_options_init(&o);
        o.naxes = 1, o.axes[0] = 0;
        o.epilog.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ;
        emu_vs_cpu("one kernel, lanes in, rows out", "one", &x, &y, NULL, &f, &o, 1);
        free(x.mem), free(y.mem), free(f.mem);
    }
    /* the four-step: (2, 8192) c64 and (3, 4096) c128, norm "forward", in place for the second */
    {
        int64_t sh[2] = {2, 8192}, wsh[1] = {8192};
        ht x, y, w, f;
        ht_make(&x, FM_C64, 2, sh, NULL, 5), ht_make(&y, FM_C64, 2, sh, NULL, 0);
        ht_make(&w, FM_F32, 1, wsh, NULL, 6), ht_make(&f, FM_C64, 1, wsh, NULL, 7);
        fm_fft_options_init(&o);
        o.naxes = 1, o.axes[0] = 1, o.norm = FM_FFT_NORM_FORWARD;
        o.prolog.ops = FM_FFT_OP_MULTIPLY, o.epilog.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ;
        emu_vs_cpu("four-step c64", "four", &x, &y, &w, &f, &o, 0);
        free(x.mem), free(y.mem), free(w.mem), free(f.mem);
        int64_t sh2[2] = {3, 4096}, w2[1] = {4096};
        ht x2, w2t;
        ht_make(&x2, FM_C128, 2, sh2, NULL, 8), ht_make(&w2t, FM_F64, 1, w2, NULL, 9);
        o.inverse = 1, o.epilog.ops = 0;
        emu_vs_cpu("four-step c128 inverse in place", "four", &x2, &x2, &w2t, NULL, &o, 1);
        free(x2.mem), free(w2t.mem);
        /* three steps (factors capped for the test: 16 x 16 x 32 and 16 x 16 x 16) */
        int64_t sh3[2] = {2, 8192}, w3[1] = {8192};
        ht x3, y3, w3t, f3;
        ht_make(&x3, FM_C64, 2, sh3, NULL, 14), ht_make(&y3, FM_C64, 2, sh3, NULL, 0);
        ht_make(&w3t, FM_F32, 1, w3, NULL, 15), ht_make(&f3, FM_C64, 1, w3, NULL, 16);
        fm_fft_options_init(&o);
        o.naxes = 1, o.axes[0] = 1;
        o.prolog.ops = FM_FFT_OP_MULTIPLY, o.epilog.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ;
        emu_vs_cpu("three steps c64", "steps32", &x3, &y3, &w3t, &f3, &o, 0);
        free(x3.mem), free(y3.mem), free(w3t.mem), free(f3.mem);
        int64_t sh4[3] = {2, 1, 4096};
        ht x4, y4;
        ht_make(&x4, FM_C128, 3, sh4, NULL, 17), ht_make(&y4, FM_C128, 3, sh4, NULL, 0);
        fm_fft_options_init(&o);
        o.naxes = 1, o.axes[0] = 2, o.inverse = 1, o.norm = FM_FFT_NORM_ORTHO;
        o.epilog.ops = FM_FFT_OP_SCALE, o.epilog.scale[0] = 2;
        emu_vs_cpu("three steps c128 inverse", "steps16", &x4, &y4, NULL, NULL, &o, 1);
        free(x4.mem), free(y4.mem);
    }
    /* axis passes: 3-D (8, 16, 32), F-ordered in, C-ordered out, a full-shape prolog array; and
     * 2-D (16, 64) in place with an epilog scale and the backward norm, inverse */
    {
        int64_t sh[3] = {8, 16, 32};
        const int f_order[3] = {2, 1, 0};
        ht x, y, w;
        ht_make(&x, FM_C64, 3, sh, f_order, 10), ht_make(&y, FM_C64, 3, sh, NULL, 0);
        ht_make(&w, FM_F32, 3, sh, NULL, 11);
        fm_fft_options_init(&o);
        o.naxes = 3, o.axes[0] = 0, o.axes[1] = 1, o.axes[2] = 2;
        o.prolog.ops = FM_FFT_OP_MULTIPLY | FM_FFT_OP_CONJ;
        emu_vs_cpu("axis passes 3-D, F in, C out", "passes", &x, &y, &w, NULL, &o, 0);
        free(x.mem), free(y.mem), free(w.mem);
        int64_t sh2[2] = {16, 64};
        ht x2;
        ht_make(&x2, FM_C128, 2, sh2, NULL, 12);
        fm_fft_options_init(&o);
        o.naxes = 2, o.axes[0] = 0, o.axes[1] = 1, o.inverse = 1;
        o.epilog.ops = FM_FFT_OP_SCALE, o.epilog.scale[0] = 0.25, o.epilog.scale[1] = 0.5;
        emu_vs_cpu("axis passes 2-D in place, inverse", "passes", &x2, &x2, NULL, NULL, &o, 1);
        free(x2.mem);
        /* an axis of length 1 among the transformed ones: the identity, no pass */
        int64_t sh3[3] = {4, 1, 32};
        ht x3, y3;
        ht_make(&x3, FM_C64, 3, sh3, NULL, 13), ht_make(&y3, FM_C64, 3, sh3, NULL, 0);
        fm_fft_options_init(&o);
        o.naxes = 2, o.axes[0] = 1, o.axes[1] = 2, o.epilog.ops = FM_FFT_OP_CONJ;
        emu_vs_cpu("axis passes with a length-1 axis", "passes", &x3, &y3, NULL, NULL, &o, 0);
        free(x3.mem), free(y3.mem);
    }
}

/* No chain: every kernel path declines (cuFFT runs plain transforms), several axes included. */
static void test_no_chain_declines(void)
{
    int64_t sh[2] = {4, 32}, sh1[2] = {2, 8192};
    ht x, x1;
    ht_make(&x, FM_C64, 2, sh, NULL, 1), ht_make(&x1, FM_C64, 2, sh1, NULL, 2);
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 2, o.axes[0] = 0, o.axes[1] = 1, o.gpu_prolog = FM_FFT_PROLOG_KERNEL;
    const fm_tensor *ts[FM_FFT_NSLOTS] = {&x.t, &x.t, NULL, NULL};
    fm_problem p;
    CHECK_OK(fft_problem(g_ctx, ts, &o, &p));
    fm_cufft_cb_spec chain[2];
    fm_fft_kernel_spec k[3];
    int order[3], nk = 0;
    int64_t scratch = 0;
    CHECK(fm_fft_kernel_axis_passes(&p, NULL, chain, k, order, &nk) == FM_ERR_NOT_APPLICABLE);
    CHECK(strstr(fm_last_error(), "no chain") != NULL);
    o.naxes = 1, o.axes[0] = 1;
    CHECK_OK(fft_problem(g_ctx, ts, &o, &p));
    CHECK(fm_fft_kernel_one(&p, NULL, chain, &k[0]) == FM_ERR_NOT_APPLICABLE);
    const fm_tensor *ts1[FM_FFT_NSLOTS] = {&x1.t, &x1.t, NULL, NULL};
    CHECK_OK(fft_problem(g_ctx, ts1, &o, &p));
    CHECK(fm_fft_kernel_steps(&p, NULL, chain, k, &nk, &scratch) == FM_ERR_NOT_APPLICABLE);
    free(x.mem), free(x1.mem);
}

static void test_emulated_numerics(void)
{
    if (system("c++ --version >/dev/null 2>&1") != 0) {
        CHECK_MSG(0, "no host C++ compiler (c++): scripts/setup.sh installs g++");
        return;
    }
    /* B = 1: the transformed axis contiguous (rows mode); B > 1: strided, the batch axis B
     * contiguous (lanes mode: the rows are a block's fast thread index) */
    for (int64_t n = 2; n <= 4096; n *= 2) {
        emu_case(FM_C64, n, n % 16 == 0, 3, 1, n % 64 == 0);
        emu_case(FM_C64, n, n % 16 != 0, 2, n >= 1024 ? 2 : 5, n % 32 == 0);
    }
    for (int64_t n = 2; n <= 2048; n *= 2) {
        emu_case(FM_C128, n, n % 16 != 0, 2, 3, n % 32 == 0);
        emu_case(FM_C128, n, n % 16 == 0, 3, 1, 0);
    }
    emu_case(FM_C64, 64, 0, 37, 1, 0); /* a partial last block of rows */
    emu_case(FM_C64, 64, 1, 3, 40, 0); /* lanes: blocks of 32 lanes across the batch axis's end */
}
#endif

int main(void)
{
#ifdef FM_HAVE_CUDA
    RUN_TESTS(test_limits, test_every_length_compiles, test_chain_forms_compile,
              test_batch_size_not_in_source, test_register_cap, test_gpu_prolog_mode);
    snprintf(g_dir, sizeof g_dir, "/tmp/fm_emu_XXXXXX");
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "no scratch directory\n");
        return 1;
    }
    CREATE_CONTEXT_OR_FAIL(&g_ctx);
    RUN_TESTS(test_emulated_numerics, test_emulated_four_step, test_emulated_axis_passes,
              test_emulated_backend_planning, test_no_chain_declines);
    fm_context_destroy(g_ctx);
    rmdir(g_dir);
    TEST_MAIN_RETURN();
#else
    (void)fm_test_checks_, (void)fm_test_failures_, (void)fm_test_skips_; /* (unused without CUDA) */
    printf("skipped: built without CUDA\n");
    return 0;
#endif
}
