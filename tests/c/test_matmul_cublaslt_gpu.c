/* test_matmul_cublaslt_gpu.c : every epilogue chain on the cuBLASLt backend, fused
 * (passes=1 where cuBLASLt can) and split (GEMM + generated kernel), against the CPU
 * backend on the same data: two independent implementations must agree within the
 * dtype's tolerance (the CPU one is itself checked against a float64 reference in
 * test_matmul_epilogues.c). Relu masks must agree bit for bit except where the
 * pre-activation is within rounding of 0. Skips (exit 0) without a GPU. */
#include "check.h"
#include "mmref.h"
#include "epilogue.h"

#ifdef FM_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include <math.h>
#include <stdlib.h>

#ifdef FM_HAVE_CUDA
typedef struct chain {
    const char *name;
    int complex_ok;
} chain;

static const chain chains[] = {
    {"identity", 1},       {"bias", 1},          {"relu", 0},         {"bias+relu", 0},     {"relu+aux", 0},
    {"bias+relu+aux", 0},  {"gelu", 0},          {"bias+gelu+aux", 0}, {"sigmoid", 0},      {"bias+tanh", 0},
    {"silu+aux", 0},       {"clamp", 0},         {"scale+bias+relu", 0}, {"drelu", 0},      {"drelu+bgrad", 0},
    {"dgelu", 0},          {"dgelu+bgrad", 0},   {"bgrada", 1},        {"bgradb", 1},
};

static size_t es_of(fm_dtype t) { return fm_dtype_size(t); }

/* host buffer + device copy of one contiguous tensor */
typedef struct buf {
    fm_tensor h, d;
    size_t bytes;
} buf;

static void buf_make(buf *b, fm_dtype dt, int ndim, const int64_t *shape, test_rng *rng, int fill)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    b->bytes = (size_t)(n > 0 ? n : 1) * es_of(dt);
    void *h = malloc(b->bytes);
    for (int64_t i = 0; i < n; i++) {
        if (dt == FM_U8)
            ((unsigned char *)h)[i] = (unsigned char)(rng_uniform(rng) * 127 + 128);
        else
            elem_set(h, dt, i, fill ? rng_uniform(rng) + (fm_dtype_is_complex(dt) ? I * rng_uniform(rng) : 0) : 0);
    }
    fm_tensor_init(&b->h, h, fm_test_cpu, dt, ndim, shape, NULL);
    void *d = NULL;
    cudaMalloc(&d, b->bytes);
    cudaMemcpy(d, h, b->bytes, cudaMemcpyHostToDevice);
    fm_device cuda = {FM_DEVICE_CUDA, 0};
    fm_tensor_init(&b->d, d, cuda, dt, ndim, shape, NULL);
}

static void buf_free(buf *b)
{
    free(b->h.data);
    cudaFree(b->d.data);
}

/* max |x - y| / max(1, max|y|) over n elements */
static double rel_err(const void *x, const void *y, fm_dtype dt, int64_t n)
{
    double num = 0, den = 1;
    for (int64_t i = 0; i < n; i++) {
        double complex a = elem_get(x, dt, i), b = elem_get(y, dt, i);
        if (isnan(creal(a)) || isnan(cimag(a)))
            return INFINITY;
        double e = cabs(a - b);
        if (e > num)
            num = e;
        if (cabs(b) > den)
            den = cabs(b);
    }
    return num / den;
}

static void run_case(fm_context *ctx, fm_dtype dt, const char *chain_name, int passes, int batched, test_rng *rng)
{
    unsigned epi = 0;
    CHECK_OK(fm_epilogue_parse(chain_name, &epi));
    int64_t M = 67, N = 130, K = 33, B = batched ? 3 : 1;
    int nd = batched ? 3 : 2;
    int64_t sa[3] = {B, M, K}, sb[3] = {B, K, N}, sd[3] = {B, M, N};
    const int64_t *pa = batched ? sa : sa + 1, *pb = batched ? sb : sb + 1, *pd = batched ? sd : sd + 1;
    buf a, b, d, bias = {0}, aux = {0}, bgrad = {0}, scale = {0};
    buf_make(&a, dt, nd, pa, rng, 1);
    buf_make(&b, dt, nd, pb, rng, 1);
    buf_make(&d, dt, nd, pd, rng, 0);
    int64_t sbias[2] = {B, N};
    if (epi & FM_EPILOGUE_BIAS)
        buf_make(&bias, dt, batched ? 2 : 1, batched ? sbias : sbias + 1, rng, 1);
    if (epi & FM_EPILOGUE_SCALE)
        buf_make(&scale, dt == FM_F64 ? FM_F64 : FM_F32, 1, &N, rng, 1);
    int mask = fm_epilogue_aux_is_mask(epi);
    if (fm_epilogue_uses_aux(epi)) {
        int64_t s[3] = {B, M, mask ? fm_relu_mask_row_bytes(N) : N};
        buf_make(&aux, mask ? FM_U8 : dt, nd, batched ? s : s + 1, rng, (epi & (FM_EPILOGUE_DRELU | FM_EPILOGUE_DGELU)) != 0);
    }
    if (epi & (FM_EPILOGUE_BGRAD | FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB)) {
        int64_t s[2] = {B, (epi & FM_EPILOGUE_BGRADA) ? M : N};
        buf_make(&bgrad, dt, batched ? 2 : 1, batched ? s : s + 1, rng, 0);
    }
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = epi;
    o.clamp[0] = -0.25, o.clamp[1] = 0.5;
    o.alpha[0] = (epi & FM_EPILOGUE_SCALE) ? 1.0 : 0.75;
    o.gpu_passes = passes;
    const fm_tensor *th[FM_MATMUL_NSLOTS] = {&a.h, &b.h, NULL, bias.bytes ? &bias.h : NULL, &d.h,
                                             aux.bytes ? &aux.h : NULL, bgrad.bytes ? &bgrad.h : NULL,
                                             scale.bytes ? &scale.h : NULL};
    const fm_tensor *td[FM_MATMUL_NSLOTS] = {&a.d, &b.d, NULL, bias.bytes ? &bias.d : NULL, &d.d,
                                             aux.bytes ? &aux.d : NULL, bgrad.bytes ? &bgrad.d : NULL,
                                             scale.bytes ? &scale.d : NULL};
    fm_status s_cpu = fm_matmul_v(ctx, th, &o, NULL);
    fm_plan *plan = NULL;
    fm_status s_gpu = fm_matmul_plan_v(ctx, td, &o, &plan);
    if (passes == 1 && s_gpu != FM_OK) { /* cuBLASLt may refuse a fused chain: fine */
        fm_clear_error();
        goto done;
    }
    CHECK_MSG(s_cpu == FM_OK, "%s cpu %s: %s", fm_dtype_name(dt), chain_name, fm_last_error());
    CHECK_MSG(s_gpu == FM_OK, "%s gpu %s passes=%d: %s", fm_dtype_name(dt), chain_name, passes, fm_last_error());
    if (s_cpu != FM_OK || s_gpu != FM_OK)
        goto done;
    void *ptrs[FM_MATMUL_NSLOTS];
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        ptrs[i] = td[i] ? td[i]->data : NULL;
    CHECK_OK(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    double tol = (dt == FM_F64 || dt == FM_C128) ? 1e-12 : 2e-5;
    if (dt == FM_F64 && (epi & (FM_EPILOGUE_GELU | FM_EPILOGUE_DGELU)))
        tol = 1e-10; /* cuBLASLt's f64 gelu is accurate to ~5e-11 relative (measured on the H200) */
    int64_t nd_el = B * M * N;
    void *got = malloc(d.bytes);
    cudaMemcpy(got, d.d.data, d.bytes, cudaMemcpyDeviceToHost);
    double e = rel_err(got, d.h.data, dt, nd_el);
    CHECK_MSG(e <= tol, "%s %s passes=%d batched=%d: D rel err %.3g > %.1g (%s)", fm_dtype_name(dt), chain_name,
              passes, batched, e, tol, fm_plan_describe(plan));
    free(got);
    if (aux.bytes && (epi & FM_EPILOGUE_AUX)) {
        void *ga = malloc(aux.bytes);
        cudaMemcpy(ga, aux.d.data, aux.bytes, cudaMemcpyDeviceToHost);
        if (mask) {
            int64_t rb = fm_relu_mask_row_bytes(N), bad = 0;
            for (int64_t r = 0; r < B * M; r++)
                for (int64_t byte = 0; byte < rb; byte++) {
                    unsigned char x = ((unsigned char *)ga)[r * rb + byte], y = ((unsigned char *)aux.h.data)[r * rb + byte];
                    for (int bit = 0; bit < 8; bit++) {
                        if (((x ^ y) >> bit & 1) == 0)
                            continue;
                        int64_t j = byte * 8 + bit;
                        if (j >= N)
                            continue; /* padding bits are unspecified (cuBLASLt leaves them) */
                        /* a differing bit is allowed only where the value is within rounding of 0 */
                        if (cabs(elem_get(d.h.data, dt, r * N + j)) > 1e-4)
                            bad++;
                    }
                }
            CHECK_MSG(bad == 0, "%s %s passes=%d: %lld relu mask bits differ", fm_dtype_name(dt), chain_name, passes,
                      (long long)bad);
        } else {
            double ea = rel_err(ga, aux.h.data, dt, nd_el);
            CHECK_MSG(ea <= tol, "%s %s passes=%d: aux rel err %.3g", fm_dtype_name(dt), chain_name, passes, ea);
        }
        free(ga);
    }
    if (bgrad.bytes) {
        void *gb = malloc(bgrad.bytes);
        cudaMemcpy(gb, bgrad.d.data, bgrad.bytes, cudaMemcpyDeviceToHost);
        double eb = rel_err(gb, bgrad.h.data, dt, (int64_t)(bgrad.bytes / es_of(dt)));
        CHECK_MSG(eb <= tol * 10, "%s %s passes=%d: bgrad rel err %.3g", fm_dtype_name(dt), chain_name, passes, eb);
        free(gb);
    }
done:
    fm_plan_release(plan);
    buf_free(&a), buf_free(&b), buf_free(&d);
    if (bias.bytes)
        buf_free(&bias);
    if (aux.bytes)
        buf_free(&aux);
    if (bgrad.bytes)
        buf_free(&bgrad);
    if (scale.bytes)
        buf_free(&scale);
}

static void test_chains(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    test_rng rng = {12345};
    static const fm_dtype dts[] = {FM_F32, FM_F64, FM_C64, FM_C128};
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++) {
            if (fm_dtype_is_complex(dts[t]) && !chains[c].complex_ok)
                continue;
            for (int passes = 0; passes <= 2; passes++)
                for (int batched = 0; batched <= 1; batched++)
                    run_case(ctx, dts[t], chains[c].name, passes, batched, &rng);
        }
    fm_context_destroy(ctx);
}

int main(void)
{
    if (fm_cuda_device_count() == 0) {
        printf("skipped: no GPU\n");
        return 0;
    }
    RUN_TEST(test_chains);
    TEST_MAIN_RETURN();
}
#else
int main(void)
{
    printf("skipped: built without CUDA\n");
    return 0;
}
#endif
