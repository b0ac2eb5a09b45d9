/* test_matmul_dropout_gpu.c : the dropout epilogue on the GPU (cuBLASLt GEMM + the generated
 * kernel, passes=2) against the CPU on the same data and stream position: the keep mask must be
 * identical bit for bit (aux bytes, padding included; with relu, AND the relu bit, which may differ
 * only where the pre-activation rounds to 0 differently: counted and bounded), every dropped element
 * exactly 0 on both, the values within the dtype's tolerance of a float64 reference whose mask comes
 * from the RNG operation's raw words (fm_rng FM_RNG_RAW on the CPU). Also batches that cuBLASLt runs
 * as outer loops (a broadcast batch), ddropout, and f16/bf16 (computed in float). Skips (exit 0)
 * without a GPU. */
#include "check.h"
#include "dropout_ref.h"
#include "mmref.h"

#ifdef FM_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
static fm_context *g_ctx;
static const fm_device g_cuda = {FM_DEVICE_CUDA, 0};

/* f16 / bf16 <-> double for the host side (round to nearest even) */
static uint16_t half_bits(double x, fm_dtype t)
{
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (t == FM_BF16)
        return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    _Float16 h = (_Float16)f;
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}
static double half_value(uint16_t b, fm_dtype t)
{
    if (t == FM_BF16) {
        uint32_t u = (uint32_t)b << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    _Float16 h;
    memcpy(&h, &b, 2);
    return (double)h;
}
static double get(const void *p, fm_dtype t, int64_t i)
{
    if (t == FM_F16 || t == FM_BF16)
        return half_value(((const uint16_t *)p)[i], t);
    return creal(elem_get(p, t, i));
}
static void set(void *p, fm_dtype t, int64_t i, double v)
{
    if (t == FM_F16 || t == FM_BF16)
        ((uint16_t *)p)[i] = half_bits(v, t);
    else
        elem_set(p, t, i, v);
}

typedef struct dbuf {
    void *h, *d;
    size_t bytes;
} dbuf;
static void dbuf_make(dbuf *b, size_t bytes)
{
    b->bytes = bytes ? bytes : 1;
    b->h = calloc(1, b->bytes);
    b->d = NULL;
    CHECK(cudaMalloc(&b->d, b->bytes) == cudaSuccess);
}
static void up(dbuf *b) { CHECK(cudaMemcpy(b->d, b->h, b->bytes, cudaMemcpyHostToDevice) == cudaSuccess); }
static void down(dbuf *b) { CHECK(cudaMemcpy(b->h, b->d, b->bytes, cudaMemcpyDeviceToHost) == cudaSuccess); }
static void dbuf_free(dbuf *b)
{
    free(b->h);
    cudaFree(b->d);
}

/* batch x (m x k) @ (k x n) [+ bias], epi, p at (seed, pos): the GPU against the reference, and
 * (f32/f64) against the CPU; a_batch_stride 0 broadcasts a over the batch */
static void run_case(fm_dtype t, int64_t batch, int64_t m, int64_t n, int64_t k, unsigned epi, double p,
                     uint64_t seed, int64_t pos, int broadcast_a)
{
    char en[96];
    fm_epilogue_format(epi, en, sizeof en);
    const size_t es = fm_dtype_size(t);
    const int64_t rb = fm_relu_mask_row_bytes(n), numel = batch * m * n;
    const int aux = (epi & FM_EPILOGUE_AUX) != 0, bias = (epi & FM_EPILOGUE_BIAS) != 0;
    test_rng rng = {0xABCDEF + (uint64_t)(m * 131 + n * 7 + k)};
    dbuf a, b, bv, d, x;
    const int64_t a_batches = broadcast_a ? 1 : batch;
    dbuf_make(&a, (size_t)(a_batches * m * k) * es);
    dbuf_make(&b, (size_t)(batch * k * n) * es);
    dbuf_make(&bv, (size_t)n * es);
    dbuf_make(&d, (size_t)numel * es);
    dbuf_make(&x, (size_t)(batch * m * rb));
    for (int64_t i = 0; i < a_batches * m * k; i++)
        set(a.h, t, i, rng_uniform(&rng));
    for (int64_t i = 0; i < batch * k * n; i++)
        set(b.h, t, i, rng_uniform(&rng));
    for (int64_t i = 0; i < n; i++)
        set(bv.h, t, i, rng_uniform(&rng));
    up(&a), up(&b), up(&bv);
    int64_t as[3] = {batch, m, k}, ast[3] = {broadcast_a ? 0 : m * k, k, 1}, bs[3] = {batch, k, n},
            ds[3] = {batch, m, n}, xs[3] = {batch, m, rb}, vs[1] = {n};
    fm_tensor ta, tb, tv, td, tx;
    fm_tensor_init(&ta, a.d, g_cuda, t, 3, as, ast);
    fm_tensor_init(&tb, b.d, g_cuda, t, 3, bs, NULL);
    fm_tensor_init(&tv, bv.d, g_cuda, t, 1, vs, NULL);
    fm_tensor_init(&td, d.d, g_cuda, t, 3, ds, NULL);
    fm_tensor_init(&tx, x.d, g_cuda, FM_U8, 3, xs, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = epi;
    o.dropout = p;
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&ta, &tb, NULL, bias ? &tv : NULL, &td, aux ? &tx : NULL};
    fm_exec_args args;
    fm_exec_args_init(&args);
    args.ints[0] = pos;
    args.ints[3] = (int64_t)seed;
    fm_status s = fm_run(g_ctx, FM_OP_MATMUL, ts, FM_MATMUL_NSLOTS, &o, &args, NULL);
    CHECK_MSG(s == FM_OK, "gpu %s %s", fm_dtype_name(t), en);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    down(&d), down(&x);

    /* the reference */
    uint32_t *w = dropout_raw_words(g_ctx, seed, pos, numel);
    const uint64_t thr = dropout_threshold(p);
    const double scale = 1.0 / (1.0 - p);
    const double eps = t == FM_F64 ? DBL_EPSILON : t == FM_F32 ? FLT_EPSILON : t == FM_F16 ? 1.0 / 1024 : 1.0 / 128;
    const double tol = (t == FM_F16 || t == FM_BF16 ? 4.0 : 8.0 * (double)(k + 2)) * eps;
    int64_t bad = 0, bad_zero = 0, bad_bits = 0, near_zero = 0;
    for (int64_t bi = 0; bi < batch; bi++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double v = 0;
                for (int64_t q = 0; q < k; q++)
                    v += get(a.h, t, ((broadcast_a ? 0 : bi) * m + i) * k + q) * get(b.h, t, (bi * k + q) * n + j);
                if (bias)
                    v += get(bv.h, t, j);
                const int pre = v > 0;
                const int close0 = fabs(v) <= tol * 4;
                if (epi & FM_EPILOGUE_RELU)
                    v = v > 0 ? v : 0;
                const int64_t e = (bi * m + i) * n + j;
                const int keep = (uint64_t)w[e] >= thr;
                const double want = keep ? v * scale : 0, got = get(d.h, t, e);
                bad += !(fabs(got - want) <= tol * scale * (1 + fabs(want)));
                bad_zero += !keep && got != 0.0;
                if (aux) {
                    const int bit = (((const unsigned char *)x.h)[(bi * m + i) * rb + j / 8] >> (j % 8)) & 1;
                    const int want_bit = (epi & FM_EPILOGUE_RELU) ? keep && pre : keep;
                    if (bit != want_bit) {
                        if ((epi & FM_EPILOGUE_RELU) && keep && close0)
                            near_zero++; /* the relu bit of a pre-activation within rounding of 0 */
                        else
                            bad_bits++;
                    }
                }
            }
    CHECK_MSG(bad == 0, "gpu %s %s %lldx%lldx%lldx%lld p=%g: %lld values off the reference", fm_dtype_name(t), en,
              (long long)batch, (long long)m, (long long)n, (long long)k, p, (long long)bad);
    CHECK_MSG(bad_zero == 0, "gpu %s %s: %lld dropped elements not 0", fm_dtype_name(t), en, (long long)bad_zero);
    CHECK_MSG(bad_bits == 0, "gpu %s %s: %lld mask bits differ from the raw words'", fm_dtype_name(t), en,
              (long long)bad_bits);
    CHECK_MSG(near_zero <= numel / 1000 + 2, "gpu %s %s: %lld relu bits near 0 differ", fm_dtype_name(t), en,
              (long long)near_zero);
    /* padding bytes of the mask are zero, as the CPU writes them */
    if (aux && !(epi & FM_EPILOGUE_RELU)) {
        int64_t pad = 0;
        for (int64_t r = 0; r < batch * m; r++)
            for (int64_t byte = (n + 7) / 8; byte < rb; byte++)
                pad += ((const unsigned char *)x.h)[r * rb + byte] != 0;
        CHECK_MSG(pad == 0, "gpu %s %s: %lld padding bytes set", fm_dtype_name(t), en, (long long)pad);
    }
    /* the CPU on the same data: the same mask bytes (dropout+aux: exactly) */
    if ((t == FM_F32 || t == FM_F64) && aux && !(epi & FM_EPILOGUE_RELU)) {
        unsigned char *cx = calloc(1, x.bytes);
        void *cd = malloc(d.bytes);
        fm_tensor ca, cb, cv, cdt, cxt;
        fm_tensor_init(&ca, a.h, fm_test_cpu, t, 3, as, ast);
        fm_tensor_init(&cb, b.h, fm_test_cpu, t, 3, bs, NULL);
        fm_tensor_init(&cv, bv.h, fm_test_cpu, t, 1, vs, NULL);
        fm_tensor_init(&cdt, cd, fm_test_cpu, t, 3, ds, NULL);
        fm_tensor_init(&cxt, cx, fm_test_cpu, FM_U8, 3, xs, NULL);
        const fm_tensor *cts[FM_MATMUL_NSLOTS] = {&ca, &cb, NULL, bias ? &cv : NULL, &cdt, &cxt};
        CHECK_OK(fm_run(g_ctx, FM_OP_MATMUL, cts, FM_MATMUL_NSLOTS, &o, &args, NULL));
        CHECK_MSG(memcmp(cx, x.h, x.bytes) == 0, "gpu %s %s: mask bytes differ from the CPU's", fm_dtype_name(t), en);
        free(cx);
        free(cd);
    }
    /* ddropout with the GPU's mask (aux with its keep bits) */
    if (aux) {
        fm_matmul_options_init(&o);
        o.epilogue = FM_EPILOGUE_DDROPOUT;
        o.dropout = p;
        const fm_tensor *bt[FM_MATMUL_NSLOTS] = {&ta, &tb, NULL, NULL, &td, &tx};
        CHECK_OK(fm_matmul_v(g_ctx, bt, &o, NULL));
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        down(&d);
        int64_t bad_b = 0;
        for (int64_t bi = 0; bi < batch; bi++)
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double v = 0;
                    for (int64_t q = 0; q < k; q++)
                        v += get(a.h, t, ((broadcast_a ? 0 : bi) * m + i) * k + q) * get(b.h, t, (bi * k + q) * n + j);
                    const int bit = (((const unsigned char *)x.h)[(bi * m + i) * rb + j / 8] >> (j % 8)) & 1;
                    const double want = bit ? v * scale : 0, got = get(d.h, t, (bi * m + i) * n + j);
                    bad_b += !(fabs(got - want) <= tol * scale * (1 + fabs(want))) || (!bit && got != 0.0);
                }
        CHECK_MSG(bad_b == 0, "gpu %s ddropout: %lld values wrong", fm_dtype_name(t), (long long)bad_b);
    }
    free(w);
    dbuf_free(&a), dbuf_free(&b), dbuf_free(&bv), dbuf_free(&d), dbuf_free(&x);
}

static void test_against_reference_and_cpu(void)
{
    const unsigned D = FM_EPILOGUE_DROPOUT, R = FM_EPILOGUE_RELU, B = FM_EPILOGUE_BIAS, X = FM_EPILOGUE_AUX;
    const unsigned epis[] = {D, D | X, B | R | D, B | R | D | X};
    const fm_dtype dts[] = {FM_F32, FM_F64, FM_F16, FM_BF16};
    const double ps[] = {0.0, 0.3, 0.9};
    for (int di = 0; di < 4; di++)
        for (int ei = 0; ei < 4; ei++)
            for (int pi = 0; pi < 3; pi++) {
                run_case(dts[di], 1, 37, 131, 19, epis[ei], ps[pi], 0x9E3779B97F4A7C15ull, 12345, 0);
                run_case(dts[di], 3, 64, 200, 40, epis[ei], ps[pi], 7, 1, 0);
            }
    /* a broadcast a: cuBLASLt's batch as outer loops here (each outer batch its own launch and offset) */
    run_case(FM_F32, 4, 33, 70, 9, D | X, 0.5, 42, 3, 1);
    run_case(FM_F32, 2, 1024, 1024, 64, B | R | D | X, 0.1, 99, 0, 0);
}

static void test_plan_is_split(void)
{
    float *dp = NULL;
    CHECK(cudaMalloc((void **)&dp, 4 * 64 * 64 * sizeof(float)) == cudaSuccess);
    int64_t s2[2] = {64, 64};
    fm_tensor ta, td;
    fm_tensor_init(&ta, dp, g_cuda, FM_F32, 2, s2, NULL);
    fm_tensor_init(&td, dp + 2 * 64 * 64, g_cuda, FM_F32, 2, s2, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT;
    o.dropout = 0.5;
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_plan(g_ctx, &ta, &ta, NULL, NULL, &td, NULL, &o, &plan));
    CHECK(plan && strstr(fm_plan_describe(plan), "passes=2") != NULL);
    fm_plan_release(plan);
    o.gpu_passes = 1; /* cuBLASLt has no dropout epilogue */
    plan = NULL;
    CHECK(fm_matmul_plan(g_ctx, &ta, &ta, NULL, NULL, &td, NULL, &o, &plan) != FM_OK && plan == NULL);
    CHECK_ERROR_MENTIONS("fuse");
    cudaFree(dp);
}

GPU_TEST_MAIN(&g_ctx, test_against_reference_and_cpu, test_plan_is_split)
#else
TEST_MAIN_SKIPPED("built without CUDA")
#endif
