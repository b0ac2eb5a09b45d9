/* test_fft_kernel.c : the fused FFT kernel generator (fusion/cuda/fft_kernel.c) without a GPU:
 * which specs it takes and refuses, and that every generated source compiles with NVRTC for
 * sm_90 (each length, both directions, both precisions, every chain form, a user function next
 * to a generated chain). Its arithmetic is checked on the GPU by test_fft_cufft_gpu against
 * FFTW in double precision. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include "cuda/fft_kernel.h"
#include "cuda/nvrtc_cache.h"

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
    if (fm_fft_kernel_source(s, &src) != FM_OK)
        return 0;
    void *img = NULL;
    size_t size = 0;
    fm_status st = fm_nvrtc_compile(src, "fft kernel test", opts, 1, 90, 0, &img, &size, NULL);
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
        }
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
    /* several batch axes with their own strides (a transposed batch) */
    spec(&s, FM_C128, 1, 64);
    s.nbatch = 2;
    s.batch_ext[0] = 3, s.batch_in[0] = 64, s.batch_out[0] = 64 * 7;
    s.batch_ext[1] = 7, s.batch_in[1] = 64 * 3, s.batch_out[1] = 64;
    chain(&epi, 1, FM_C128, 1, 64, FM_FFT_OP_SCALE);
    s.epilog = &epi;
    CHECK(compiles(&s));
}
#endif

int main(void)
{
#ifdef FM_HAVE_CUDA
    RUN_TEST(test_limits);
    RUN_TEST(test_every_length_compiles);
    RUN_TEST(test_chain_forms_compile);
    TEST_MAIN_RETURN();
#else
    printf("skipped: built without CUDA\n");
    return 0;
#endif
}
