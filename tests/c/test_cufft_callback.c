/* test_cufft_callback.c : the FFT chains' raw-callback rules through fm_fft_plan (any machine)
 * and, where the CUDA toolkit was built in, the generated cuFFT LTO callbacks compiled by
 * NVRTC for sm_90 without a GPU: every data type x chain compiles to LTO-IR that defines the
 * symbol handed to cuFFT, a user function that does not compile is an error carrying NVRTC's
 * log, and layouts whose offsets cannot be mapped back to an index are refused. The callbacks'
 * arithmetic is checked on the GPU by test_fft_cufft_gpu. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include "cuda/cufft_callback.h"
#include "cuda/nvrtc_cache.h"
#include <pthread.h>

#include "env_settings.h"
#endif

static fm_context *g_ctx;

static const char *const user_src = "__device__ float2 phase(float2 x, unsigned long long off, const void *d)\n"
                                    "{ (void)d; float s, c; sincosf(0.01f * (float)off, &s, &c);\n"
                                    "  float2 r; r.x = x.x * c - x.y * s; r.y = x.x * s + x.y * c; return r; }\n";

/* Planning rules that hold whatever the machine: checked before any backend is asked. */
static void test_callback_rules(void)
{
    static float complex_buf[2 * 64], out_buf[2 * 64], data[64];
    fm_device cpu = {FM_DEVICE_CPU, 0};
    int64_t sh[1] = {64};
    fm_tensor in, out, d;
    fm_tensor_init(&in, complex_buf, cpu, FM_C64, 1, sh, NULL);
    fm_tensor_init(&out, out_buf, cpu, FM_C64, 1, sh, NULL);
    fm_tensor_init(&d, data, cpu, FM_F32, 1, sh, NULL);
    fm_fft_options o;
    fm_plan *plan = NULL;

    /* cpu data: a CUDA C callback is refused by name */
    fm_fft_options_init(&o);
    o.prolog.ops = FM_FFT_OP_CALLBACK, o.prolog.source = user_src, o.prolog.symbol = "phase";
    CHECK(fm_fft_plan(g_ctx, &in, &out, NULL, NULL, &o, &plan) == FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("only on the GPU");
    CHECK(plan == NULL);

    /* not a C identifier */
    static const char *const bad_names[] = {"", "1x", "a-b", "a b", "x;y"};
    for (int i = 0; i < 5; i++) {
        o.prolog.symbol = bad_names[i];
        CHECK_MSG(fm_fft_plan(g_ctx, &in, &out, NULL, NULL, &o, &plan) == FM_ERR_INVALID_ARGUMENT, "name '%s'",
                  bad_names[i]);
        CHECK_ERROR_MENTIONS("identifier");
    }
    /* a name the source does not define (a whole-token match followed by '(') */
    static const char *const undefined[] = {"phas", "phase2", "nothere", "x"};
    for (int i = 0; i < 4; i++) {
        o.prolog.symbol = undefined[i];
        CHECK_MSG(fm_fft_plan(g_ctx, &in, &out, NULL, NULL, &o, &plan) == FM_ERR_INVALID_ARGUMENT, "name '%s'",
                  undefined[i]);
        CHECK_ERROR_MENTIONS("not defined");
        CHECK_ERROR_MENTIONS(undefined[i]);
    }
    o.prolog.symbol = "fm_cb_load"; /* the generated wrapper's own name */
    CHECK(fm_fft_plan(g_ctx, &in, &out, NULL, NULL, &o, &plan) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("reserved");
    /* NULL source / symbol */
    o.prolog.symbol = NULL;
    CHECK(fm_fft_plan(g_ctx, &in, &out, NULL, NULL, &o, &plan) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("symbol");
    o.prolog.symbol = "phase", o.prolog.source = NULL;
    CHECK(fm_fft_plan(g_ctx, &in, &out, NULL, NULL, &o, &plan) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("source");

    /* an array without multiply or callback */
    fm_fft_options_init(&o);
    CHECK(fm_fft_plan(g_ctx, &in, &out, &d, NULL, &o, &plan) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("neither multiplies nor has a callback");
    /* unknown ops bits */
    o.epilog.ops = 1u << 6;
    CHECK(fm_fft_plan(g_ctx, &in, &out, NULL, NULL, &o, &plan) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("unknown ops");
}

/* Half precision (f16 / c32): cuda only, through cuFFT; the dtype rules hold everywhere. */
static void test_half_rules(void)
{
    static uint16_t r16[64], c32[2 * 64], c32b[2 * 64];
    static float f32[64];
    fm_device cpu = {FM_DEVICE_CPU, 0};
    int64_t sh[1] = {64}, hsh[1] = {33};
    fm_tensor cin, cout, rin, hout, w32;
    fm_tensor_init(&cin, c32, cpu, FM_C32, 1, sh, NULL);
    fm_tensor_init(&cout, c32b, cpu, FM_C32, 1, sh, NULL);
    fm_tensor_init(&rin, r16, cpu, FM_F16, 1, sh, NULL);
    fm_tensor_init(&hout, c32b, cpu, FM_C32, 1, hsh, NULL);
    fm_tensor_init(&w32, f32, cpu, FM_F32, 1, sh, NULL);
    fm_fft_options o;
    fm_plan *plan = NULL;
    /* valid problems, but FFTW has no half precision: refused by name on the cpu */
    fm_fft_options_init(&o);
    CHECK(fm_fft_plan(g_ctx, &cin, &cout, NULL, NULL, &o, &plan) == FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("cuda only");
    CHECK(plan == NULL);
    o.kind = FM_FFT_R2C;
    CHECK(fm_fft_plan(g_ctx, &rin, &hout, NULL, NULL, &o, &plan) == FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("f16/c32");
    o.kind = FM_FFT_C2R, o.inverse = 1;
    CHECK(fm_fft_plan(g_ctx, &hout, &rin, NULL, NULL, &o, &plan) == FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("FFTW has no half precision");
    CHECK(fm_fft(g_ctx, &hout, &rin, NULL, NULL, &o, NULL) == FM_ERR_NOT_SUPPORTED);
    /* dtype pairs: half goes with half */
    fm_tensor c64o;
    static float c64buf[2 * 33];
    fm_tensor_init(&c64o, c64buf, cpu, FM_C64, 1, hsh, NULL);
    fm_fft_options_init(&o);
    o.kind = FM_FFT_R2C;
    CHECK(fm_fft_plan(g_ctx, &rin, &c64o, NULL, NULL, &o, &plan) == FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("f16 -> c32");
    fm_fft_options_init(&o);
    CHECK(fm_fft_plan(g_ctx, &rin, &cout, NULL, NULL, &o, &plan) == FM_ERR_DTYPE); /* c2c of real input */
    CHECK_ERROR_MENTIONS("wants r2c");
    /* a chain's array has the data's precision: f16 or c32 on c32 data, not f32 */
    o.prolog.ops = FM_FFT_OP_MULTIPLY;
    CHECK(fm_fft_plan(g_ctx, &cin, &cout, &w32, NULL, &o, &plan) == FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("expected float16 or complex32"); /* NumPy / PyTorch names */
}

#ifdef FM_HAVE_CUDA
static const fm_dtype data_types[4] = {FM_F32, FM_F64, FM_C64, FM_C128};
static const char *const ctype[4] = {"float", "double", "float2", "double2"};

/* The source must define the symbol we hand cuFFT as a __device__ function with C++ linkage
 * (cuFFT links the mangled name of its documented signature and fails on one the LTO-IR lacks;
 * LTO-IR is bitcode, whose string table is not plain bytes, so the check is on the source). */
static int defines(const fm_cufft_cb_spec *sp, const char *sym)
{
    char *src = NULL;
    const char *got = NULL;
    if (fm_cufft_cb_source(sp, &src, &got) != FM_OK)
        return 0;
    char want[96];
    snprintf(want, sizeof want, " %s(void *data_", sym);
    const char *at = strstr(src, want);
    int ok = at && strcmp(got, sym) == 0 && !strstr(src, "extern \"C\"") && strstr(src, "__device__") < at;
    free(src);
    return ok;
}

/* the compile checks need an NVRTC that targets sm_90; without one the test says so and passes */
#define REQUIRE_SM90()                                                                                                 \
    do {                                                                                                               \
        if (!fm_nvrtc_supports_arch(90)) {                                                                             \
            SKIP("this NVRTC cannot compile for sm_90");                                                               \
            CHECK(1);                                                                                                  \
            return;                                                                                                    \
        }                                                                                                              \
    } while (0)


static fm_cufft_cb_spec spec_2d(int store, fm_dtype dt, unsigned ops, fm_dtype arr)
{
    fm_cufft_cb_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.store = store, sp.data = dt, sp.ops = ops, sp.array = arr;
    sp.scale[0] = 0.5, sp.scale[1] = fm_dtype_is_complex(dt) ? -0.25 : 0.0;
    sp.ndim = 2;
    sp.extent[0] = 8, sp.extent[1] = 100;
    sp.stride[0] = 100, sp.stride[1] = 1;
    sp.array_stride[0] = 0, sp.array_stride[1] = 1; /* a window along the transform, broadcast over rows */
    return sp;
}

static void test_generated_compile(void)
{
    REQUIRE_SM90();
    for (int t = 0; t < 4; t++)
        for (int store = 0; store < 2; store++)
            for (unsigned ops = 1; ops < 8; ops++) {
                fm_dtype dt = data_types[t];
                fm_dtype arr = dt == FM_C64 && (ops & 2) && store ? FM_C64 : dt == FM_C64 ? FM_F32
                               : dt == FM_C128 ? FM_F64
                                               : dt;
                fm_cufft_cb_spec sp = spec_2d(store, dt, ops, arr);
                if (!fm_dtype_is_complex(dt))
                    sp.ops &= ~(unsigned)FM_FFT_OP_CONJ;
                void *img = NULL;
                size_t n = 0;
                const char *sym = NULL;
                fm_status s = fm_cufft_cb_compile(env_settings(), &sp, 90, &img, &n, &sym, NULL);
                CHECK_MSG(s == FM_OK, "%s %s ops=%u", ctype[t], store ? "store" : "load", ops);
                if (s == FM_OK) {
                    CHECK(strcmp(sym, store ? FM_CUFFT_STORE_SYMBOL : FM_CUFFT_LOAD_SYMBOL) == 0);
                    CHECK_MSG(n > 0 && defines(&sp, sym), "%s: no __device__ %s", ctype[t], sym);
                }
                free(img);
            }
    /* the looped form (offsets from a shifted pointer) and a large span (64-bit index math) */
    fm_cufft_cb_spec sp = spec_2d(0, FM_C64, FM_FFT_OP_MULTIPLY, FM_C64);
    sp.need_base = 1;
    sp.extent[0] = 1 << 20, sp.stride[0] = 1 << 13, sp.extent[1] = 1 << 13, sp.array_stride[0] = 3;
    char *src = NULL;
    const char *sym = NULL;
    CHECK_OK(fm_cufft_cb_source(&sp, &src, &sym));
    CHECK(src && strstr(src, "unsigned long long r") && strstr(src, "p->base[0]"));
    void *img = NULL;
    size_t n = 0;
    CHECK_OK(fm_cufft_cb_compile(env_settings(), &sp, 90, &img, &n, &sym, NULL));
    free(img);
    free(src);
}

static void test_user_function(void)
{
    REQUIRE_SM90();
    fm_cufft_cb_spec sp = spec_2d(0, FM_C64, FM_FFT_OP_CALLBACK | FM_FFT_OP_SCALE, FM_C64);
    sp.user_source = user_src, sp.user_symbol = "phase";
    void *img = NULL;
    size_t n = 0;
    const char *sym = NULL;
    CHECK_OK(fm_cufft_cb_compile(env_settings(), &sp, 90, &img, &n, &sym, NULL));
    CHECK(img && n > 0 && defines(&sp, FM_CUFFT_LOAD_SYMBOL));
    free(img);
    img = NULL;
    /* does not compile: NVRTC's log in the error, as an invalid argument (the user's code) */
    sp.user_source = "__device__ float2 phase(float2 x, unsigned long long off, const void *d) { return y; }";
    CHECK(fm_cufft_cb_compile(env_settings(), &sp, 90, &img, &n, &sym, NULL) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("error");
    CHECK_ERROR_MENTIONS("prolog_callback"); /* the #line file name: the user's own line numbers */
    CHECK(img == NULL);
    /* the wrong signature for the data type (double2 data, float2 function) */
    sp = spec_2d(1, FM_C128, FM_FFT_OP_CALLBACK, FM_C128);
    sp.user_source = user_src, sp.user_symbol = "phase";
    CHECK(fm_cufft_cb_compile(env_settings(), &sp, 90, &img, &n, &sym, NULL) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("error");
    free(img);
}

/* the fallback where cuFFT takes no callbacks: the same chain as a kernel over the operand */
static void test_pass_kernels(void)
{
    REQUIRE_SM90();
    static const char *const opts[1] = {"-std=c++17"};
    for (int t = 0; t < 4; t++)
        for (int store = 0; store < 2; store++) {
            fm_dtype dt = data_types[t];
            fm_cufft_cb_spec sp = spec_2d(store, dt, FM_FFT_OP_SCALE | FM_FFT_OP_MULTIPLY,
                                          dt == FM_C64 ? FM_F32 : dt == FM_C128 ? FM_F64 : dt);
            char *src = NULL;
            CHECK_OK(fm_cufft_pass_source(&sp, &src));
            CHECK(src && strstr(src, "__global__ void fm_cb_pass") && strstr(src, "800ull"));
            void *img = NULL;
            size_t n = 0;
            if (src)
                CHECK_OK(fm_nvrtc_compile(env_settings(), src, "pass", opts, 1, 90, 0, &img, &n, NULL));
            free(img);
            free(src);
        }
    /* a user function that does not compile: the user's error, with the log */
    fm_cufft_cb_spec bad = spec_2d(0, FM_C64, FM_FFT_OP_CALLBACK, FM_C64);
    bad.user_symbol = "f";
    bad.user_source = "__device__ float2 f(float2 x, unsigned long long o, const void *d) { return nope; }";
    char *bsrc = NULL;
    CHECK_OK(fm_cufft_pass_source(&bad, &bsrc));
    void *bimg = NULL;
    size_t bn = 0;
    /* (fm_cufft_pass_create needs a device; the mapping is the same function as the LTO compile's) */
    CHECK(fm_cufft_cb_compile(env_settings(), &bad, 90, &bimg, &bn, &(const char *){NULL}, NULL) == FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("nope");
    free(bimg);
    free(bsrc);
    fm_cufft_cb_spec sp = spec_2d(0, FM_C64, FM_FFT_OP_SCALE, FM_C64);
    sp.need_base = 1; /* a pass covers the whole operand: there is no loop offset to add */
    char *src = NULL;
    CHECK(fm_cufft_pass_source(&sp, &src) == FM_ERR_INVALID_ARGUMENT);
}

/* Half data: no cuFFT callback types, so the chains are passes computing in float; they
 * compile (NVRTC, sm_90, no GPU) for every chain, with half or real-half arrays and a user
 * function over float2 / float; the LTO callback path refuses half. */
static void test_half_passes(void)
{
    REQUIRE_SM90();
    static const char *const opts[1] = {"-std=c++17"};
    static const fm_dtype half_types[2] = {FM_F16, FM_C32};
    for (int t = 0; t < 2; t++)
        for (int store = 0; store < 2; store++)
            for (unsigned ops = 1; ops < 8; ops++)
                for (int carr = 0; carr < 2; carr++) {
                    fm_dtype dt = half_types[t];
                    if (carr && dt == FM_F16)
                        continue; /* real data takes a real array only */
                    fm_cufft_cb_spec sp = spec_2d(store, dt, ops, carr ? FM_C32 : FM_F16);
                    if (dt == FM_F16)
                        sp.ops &= ~(unsigned)FM_FFT_OP_CONJ;
                    char *src = NULL;
                    CHECK_OK(fm_cufft_pass_source(&sp, &src));
                    CHECK(src && strstr(src, "fm_cb_pass(const ") && strstr(src, "cvt.rn.f16.f32"));
                    CHECK(src && strstr(src, dt == FM_C32 ? "const ushort2 *src" : "const unsigned short *src"));
                    void *img = NULL;
                    size_t n = 0;
                    if (src)
                        CHECK_MSG(fm_nvrtc_compile(env_settings(), src, "half pass", opts, 1, 90, 0, &img, &n, NULL) == FM_OK,
                                  "%s %s ops=%u array %s: %s", fm_dtype_name(dt), store ? "store" : "load", ops,
                                  carr ? "c32" : "f16", fm_last_error());
                    free(img);
                    free(src);
                }
    /* a user function sees the compute type: float2 for c32 */
    fm_cufft_cb_spec sp = spec_2d(1, FM_C32, FM_FFT_OP_CALLBACK | FM_FFT_OP_SCALE, FM_C32);
    sp.user_source = user_src, sp.user_symbol = "phase";
    char *src = NULL;
    CHECK_OK(fm_cufft_pass_source(&sp, &src));
    void *img = NULL;
    size_t n = 0;
    if (src)
        CHECK_OK(fm_nvrtc_compile(env_settings(), src, "half pass", opts, 1, 90, 0, &img, &n, NULL));
    free(img);
    free(src);
    /* no LTO callback for half; and the existing types' sources carry no half helpers */
    const char *sym = NULL;
    img = NULL;
    CHECK(fm_cufft_cb_compile(env_settings(), &sp, 90, &img, &n, &sym, NULL) == FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("half precision");
    CHECK(img == NULL);
    for (int t = 0; t < 4; t++) {
        fm_cufft_cb_spec s2 = spec_2d(0, data_types[t], FM_FFT_OP_SCALE, data_types[t]);
        src = NULL;
        CHECK_OK(fm_cufft_cb_source(&s2, &src, &sym));
        CHECK(src && !strstr(src, "fm_ld") && !strstr(src, "ushort"));
        free(src);
    }
    /* a half array on single-precision data (and the reverse) does not fit */
    sp = spec_2d(0, FM_C64, FM_FFT_OP_MULTIPLY, FM_F16);
    CHECK(fm_cufft_cb_source(&sp, &src, &sym) == FM_ERR_INVALID_ARGUMENT);
    sp = spec_2d(0, FM_C32, FM_FFT_OP_MULTIPLY, FM_F32);
    CHECK(fm_cufft_cb_source(&sp, &src, &sym) == FM_ERR_INVALID_ARGUMENT);
}

static void test_layouts_refused(void)
{
    char *src = NULL;
    const char *sym = NULL;
    /* strides that do not nest: 3 inside a span of 2 * (2 - 1) + ... */
    fm_cufft_cb_spec sp = spec_2d(0, FM_C64, FM_FFT_OP_MULTIPLY, FM_F32);
    sp.extent[0] = 2, sp.stride[0] = 3, sp.extent[1] = 4, sp.stride[1] = 2, sp.array_stride[0] = 1;
    CHECK(fm_cufft_cb_source(&sp, &src, &sym) == FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("contiguous");
    /* a negative stride */
    sp = spec_2d(1, FM_C64, FM_FFT_OP_MULTIPLY, FM_F32);
    sp.stride[1] = -1;
    CHECK(fm_cufft_cb_source(&sp, &src, &sym) == FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("positive strides");
    CHECK(src == NULL);
    /* the broadcast axis needs no index: a column-major layout with a per-row array is fine */
    sp = spec_2d(0, FM_C64, FM_FFT_OP_MULTIPLY, FM_F32);
    sp.stride[0] = 1, sp.stride[1] = 8, sp.array_stride[0] = 1, sp.array_stride[1] = 0;
    CHECK_OK(fm_cufft_cb_source(&sp, &src, &sym));
    CHECK(src && strstr(src, "a += (long long)r * 1LL"));
    free(src);
}

/* The staged copy of layouts cuFFT cannot take (cufft_restage.c): a kernel from any strides (a
 * reversed, a zero-stride broadcast, an interleaved axis) to any others, for every element type
 * the FFT moves; it compiles for sm_90 without a GPU (the GPU layout sweeps run it). */
static void test_staged_copy_kernels(void)
{
    REQUIRE_SM90();
    static const fm_dtype types[6] = {FM_F16, FM_C32, FM_F32, FM_F64, FM_C64, FM_C128};
    const int64_t ext[3] = {8, 128, 2}, from[3] = {-256, 2, 1}, to[3] = {128, 1, 1024};
    for (int t = 0; t < 6; t++) {
        char *src = NULL;
        CHECK_OK(fm_cufft_copy_source(types[t], 3, ext, from, to, &src));
        CHECK(src && strstr(src, "fm_cb_pass") && strstr(src, "* -256LL") && strstr(src, "* 1024LL") &&
              strstr(src, "2048ull"));
        void *img = NULL;
        size_t n = 0;
        if (src)
            CHECK_MSG(fm_nvrtc_compile(env_settings(), src, "copy", NULL, 0, 90, 0, &img, &n, NULL) == FM_OK, "%s: %s",
                      fm_dtype_name(types[t]), fm_last_error());
        free(img);
        free(src);
    }
    char *src = NULL; /* an element type the FFT never moves on the GPU */
    CHECK(fm_cufft_copy_source(FM_CLD, 3, ext, from, to, &src) == FM_ERR_INVALID_ARGUMENT && src == NULL);
}
#endif

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "no context: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_callback_rules);
    RUN_TEST(test_half_rules);
#ifdef FM_HAVE_CUDA
    RUN_TEST(test_generated_compile);
    RUN_TEST(test_user_function);
    RUN_TEST(test_pass_kernels);
    RUN_TEST(test_half_passes);
    RUN_TEST(test_layouts_refused);
    RUN_TEST(test_staged_copy_kernels);
#else
    printf("built without CUDA: only the planning rules were checked\n");
#endif
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
