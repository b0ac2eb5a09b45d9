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
#include <string.h>

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

/* One chain on the GPU (gpu_passes = passes, gpu_algo = algo) against the CPU backend.
 * Returns 0 when the GPU refused the plan (passes=1: cuBLASLt cannot fuse the chain, or
 * algo is beyond the backend's candidates), else 1. */
static int run_case(fm_context *ctx, fm_dtype dt, const char *chain_name, int passes, int algo, int batched,
                    test_rng *rng)
{
    int made = 1;
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
    o.gpu_algo = algo;
    const fm_tensor *th[FM_MATMUL_NSLOTS] = {&a.h, &b.h, NULL, bias.bytes ? &bias.h : NULL, &d.h,
                                             aux.bytes ? &aux.h : NULL, bgrad.bytes ? &bgrad.h : NULL,
                                             scale.bytes ? &scale.h : NULL};
    const fm_tensor *td[FM_MATMUL_NSLOTS] = {&a.d, &b.d, NULL, bias.bytes ? &bias.d : NULL, &d.d,
                                             aux.bytes ? &aux.d : NULL, bgrad.bytes ? &bgrad.d : NULL,
                                             scale.bytes ? &scale.d : NULL};
    fm_status s_cpu = fm_matmul_v(ctx, th, &o, NULL);
    fm_plan *plan = NULL;
    fm_status s_gpu = fm_matmul_plan_v(ctx, td, &o, &plan);
    if ((passes == 1 && s_gpu != FM_OK) ||
        (algo > 0 && (s_gpu == FM_ERR_NOT_APPLICABLE || s_gpu == FM_ERR_NOT_SUPPORTED))) {
        /* cuBLASLt may refuse a fused chain; and the candidates end somewhere (the planner
         * reports a backend's NOT_APPLICABLE as NOT_SUPPORTED when no other backend plans) */
        fm_clear_error();
        made = 0;
        goto done;
    }
    CHECK_MSG(s_cpu == FM_OK, "%s cpu %s: %s", fm_dtype_name(dt), chain_name, fm_last_error());
    CHECK_MSG(s_gpu == FM_OK, "%s gpu %s passes=%d algo=%d: %s", fm_dtype_name(dt), chain_name, passes, algo,
              fm_last_error());
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
    return made;
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
                    run_case(ctx, dts[t], chains[c].name, passes, 0, batched, &rng);
        }
    fm_context_destroy(ctx);
}

/* A plain f32 m x k @ k x n problem on the GPU, for planning only: one buffer (planning
 * reads no data) serves every operand. Returns the buffer (cudaFree it), NULL on failure. */
static void *plain_f32_problem(int64_t m, int64_t n, int64_t k, fm_tensor t[3], const fm_tensor *ts[FM_MATMUL_NSLOTS])
{
    void *p = NULL;
    if (cudaMalloc(&p, (size_t)(m > k ? m : k) * (size_t)(n > k ? n : k) * 4 + 256) != cudaSuccess) {
        CHECK_MSG(0, "cudaMalloc failed");
        return NULL;
    }
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n};
    fm_device cuda = {FM_DEVICE_CUDA, 0};
    fm_tensor_init(&t[0], p, cuda, FM_F32, 2, sa, NULL);
    fm_tensor_init(&t[1], p, cuda, FM_F32, 2, sb, NULL);
    fm_tensor_init(&t[2], p, cuda, FM_F32, 2, sd, NULL);
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        ts[i] = NULL;
    ts[FM_MATMUL_A] = &t[0], ts[FM_MATMUL_B] = &t[1], ts[FM_MATMUL_D] = &t[2];
    return p;
}

/* Wisdom saves gpu_algo as an index: in a fresh context (as in a later process) the same
 * index must name the same cuBLASLt kernel (describe() names its id and tile). */
static void last_describe_same_in_new_context(fm_context *ctx)
{
    fm_tensor t[3];
    const fm_tensor *ts[FM_MATMUL_NSLOTS];
    void *p = plain_f32_problem(67, 130, 33, t, ts);
    if (!p)
        return;
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.gpu_passes = 1;
    fm_plan *p1 = NULL, *p2 = NULL;
    for (o.gpu_algo = 63; o.gpu_algo > 0; o.gpu_algo--) /* the last candidate: the end of the wider search */
        if (fm_matmul_plan_v(ctx, ts, &o, &p1) == FM_OK)
            break;
    fm_clear_error();
    CHECK_MSG(o.gpu_algo > 8, "f32 67x130x33: only %d candidates", o.gpu_algo + 1);
    fm_context *fresh = NULL;
    CHECK_OK(fm_context_create(&fresh));
    CHECK_OK(fm_matmul_plan_v(fresh, ts, &o, &p2));
    if (p1 && p2)
        CHECK_MSG(strcmp(fm_plan_describe(p1), fm_plan_describe(p2)) == 0, "gpu_algo %d: '%s' in one context, '%s' in another",
                  o.gpu_algo, fm_plan_describe(p1), fm_plan_describe(p2));
    fm_plan_release(p1);
    fm_plan_release(p2);
    fm_context_destroy(fresh);
    cudaFree(p);
}

/* An empty result runs no GEMM: gpu_algo > 0 is refused, so autotune plans one candidate
 * per pass count instead of 64 identical ones. */
static void empty_result_has_one_candidate(fm_context *ctx)
{
    fm_tensor t[3];
    const fm_tensor *ts[FM_MATMUL_NSLOTS];
    void *p = plain_f32_problem(0, 130, 33, t, ts);
    if (!p)
        return;
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_plan_v(ctx, ts, &o, &plan)); /* gpu_algo 0: the empty plan */
    fm_plan_release(plan);
    plan = NULL;
    o.gpu_algo = 1;
    fm_status s = fm_matmul_plan_v(ctx, ts, &o, &plan);
    CHECK_MSG(s == FM_ERR_NOT_SUPPORTED || s == FM_ERR_NOT_APPLICABLE, "0x130 result, gpu_algo 1: status %d (%s)", (int)s,
              fm_last_error());
    fm_clear_error();
    fm_plan_release(plan);
    cudaFree(p);
}

/* Every candidate of the wider cuBLASLt search (gpu_algo beyond the heuristic's first list:
 * smaller workspace limits, every algorithm id; what autotune walks) computes the right
 * answer, fused and split, plain and batched, and the candidates end with NOT_APPLICABLE. */
static void test_wider_search(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    test_rng rng = {777};
    static const fm_dtype dts[] = {FM_F32, FM_F64, FM_C64};
    static const char *names[] = {"identity", "bias+relu", "bias+gelu+aux", "drelu+bgrad"};
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (size_t c = 0; c < sizeof names / sizeof names[0]; c++) {
            if (fm_dtype_is_complex(dts[t]) && c > 0)
                continue;
            for (int passes = 1; passes <= 2; passes++) {
                int algo = 0;
                while (algo < 64 && run_case(ctx, dts[t], names[c], passes, algo, c == 1, &rng))
                    algo++;
                if (passes == 2) /* the split plan always has the heuristic's first GEMM */
                    CHECK_MSG(algo >= 1, "%s %s passes=2: no candidate", fm_dtype_name(dts[t]), names[c]);
                if (passes == 1 && dts[t] == FM_F32 && c == 0) /* 18-21 on the H200 (batched bias+relu: 7) */
                    CHECK_MSG(algo > 8, "f32 identity: the wider search found only %d candidates", algo);
            }
        }
    last_describe_same_in_new_context(ctx);
    empty_result_has_one_candidate(ctx);
    fm_context_destroy(ctx);
}

/* fp8: decode on the host so the reference sees exactly the values the GPU reads. */
static double f8_decode(unsigned char v, int e5m2)
{
    int sign = v >> 7, ebits = e5m2 ? 5 : 4, mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    int e = (v >> mbits) & ((1 << ebits) - 1), m = v & ((1 << mbits) - 1);
    double x = e == 0 ? ldexp((double)m / (1 << mbits), 1 - bias) : ldexp(1.0 + (double)m / (1 << mbits), e - bias);
    return sign ? -x : x;
}

/* a byte whose value is finite and of moderate size: exponent field in [bias-3, bias+2] */
static unsigned char f8_random(test_rng *r, int e5m2)
{
    int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    int e = bias - 3 + (int)((rng_uniform(r) + 1) * 3);
    int m = (int)((rng_uniform(r) + 1) * 0.5 * (1 << mbits)) & ((1 << mbits) - 1);
    int sign = rng_uniform(r) < 0;
    return (unsigned char)(sign << 7 | e << mbits | m);
}

static void fp8_case(fm_context *ctx, fm_dtype ta, fm_dtype tb, fm_dtype td, const char *chain, int passes,
                     test_rng *rng)
{
    const int64_t M = 64, N = 128, K = 96;
    unsigned epi = 0;
    CHECK_OK(fm_epilogue_parse(chain, &epi));
    unsigned char *ha = malloc(M * K), *hbt = malloc(N * K); /* b stored as b^T, row-major (N, K) */
    for (int64_t i = 0; i < M * K; i++)
        ha[i] = f8_random(rng, ta == FM_F8E5M2);
    for (int64_t i = 0; i < N * K; i++)
        hbt[i] = f8_random(rng, tb == FM_F8E5M2);
    float hbias[128], scales[2] = {0.5f, 4.0f};
    for (int j = 0; j < N; j++)
        hbias[j] = (float)rng_uniform(rng);
    void *da, *db, *dd, *dbias, *dsc, *dsc2;
    size_t des = fm_dtype_size(td);
    cudaMalloc(&da, M * K), cudaMalloc(&db, N * K), cudaMalloc(&dd, M * N * des), cudaMalloc(&dbias, N * des);
    cudaMalloc(&dsc, 2 * sizeof(float));
    cudaMalloc(&dsc2, sizeof(float)); /* scale pointers need their own (aligned) allocations */
    cudaMemcpy(da, ha, M * K, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hbt, N * K, cudaMemcpyHostToDevice);
    cudaMemcpy(dsc, scales, sizeof scales, cudaMemcpyHostToDevice);
    cudaMemcpy(dsc2, scales + 1, sizeof(float), cudaMemcpyHostToDevice);
    unsigned char biasbuf[128 * 4];
    for (int j = 0; j < N; j++) {
        if (td == FM_F32) {
            memcpy(biasbuf + 4 * j, &hbias[j], 4);
            continue;
        }
        uint32_t u; /* bf16, round to nearest even; the reference uses the rounded value */
        memcpy(&u, &hbias[j], 4);
        uint16_t h16 = (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
        memcpy(biasbuf + 2 * j, &h16, 2);
        uint32_t back = (uint32_t)h16 << 16;
        memcpy(&hbias[j], &back, 4);
    }
    cudaMemcpy(dbias, biasbuf, N * des, cudaMemcpyHostToDevice);
    fm_device cuda = {FM_DEVICE_CUDA, 0};
    int64_t sa[2] = {M, K}, sb[2] = {K, N}, sbs[2] = {1, K}, sd[2] = {M, N}, sbias[1] = {N}, one[1] = {1};
    fm_tensor a, b, d, bias, asc, bsc;
    fm_tensor_init(&a, da, cuda, ta, 2, sa, NULL);
    fm_tensor_init(&b, db, cuda, tb, 2, sb, sbs);
    fm_tensor_init(&d, dd, cuda, td, 2, sd, NULL);
    fm_tensor_init(&bias, dbias, cuda, td, 1, sbias, NULL);
    fm_tensor_init(&asc, dsc, cuda, FM_F32, 1, one, NULL);
    fm_tensor_init(&bsc, dsc2, cuda, FM_F32, 1, one, NULL);
    const fm_tensor *t[FM_MATMUL_NSLOTS] = {&a, &b, NULL, (epi & FM_EPILOGUE_BIAS) ? &bias : NULL, &d, NULL, NULL, NULL,
                                            &asc, &bsc};
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = epi;
    o.gpu_passes = passes;
    fm_plan *plan = NULL;
    fm_status st = fm_matmul_plan_v(ctx, t, &o, &plan);
    CHECK_MSG(st == FM_OK, "fp8 %s x %s -> %s %s passes=%d: %s", fm_dtype_name(ta), fm_dtype_name(tb),
              fm_dtype_name(td), chain, passes, fm_last_error());
    if (st == FM_OK) {
        void *ptrs[FM_MATMUL_NSLOTS] = {da, db, NULL, (epi & FM_EPILOGUE_BIAS) ? dbias : NULL, dd, NULL, NULL, NULL,
                                        dsc, dsc2};
        CHECK_OK(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL));
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        unsigned char *hd = malloc(M * N * des);
        cudaMemcpy(hd, dd, M * N * des, cudaMemcpyDeviceToHost);
        double num = 0, den = 1e-30, got00 = 0, ref00 = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += f8_decode(ha[i * K + k], ta == FM_F8E5M2) * f8_decode(hbt[j * K + k], tb == FM_F8E5M2);
                double x = acc * scales[0] * scales[1] + ((epi & FM_EPILOGUE_BIAS) ? hbias[j] : 0);
                if (epi & FM_EPILOGUE_RELU)
                    x = x > 0 ? x : 0;
                double got;
                if (td == FM_F32) {
                    got = ((float *)hd)[i * N + j];
                } else {
                    uint16_t h16;
                    memcpy(&h16, hd + 2 * (i * N + j), 2);
                    uint32_t u = (uint32_t)h16 << 16;
                    float f;
                    memcpy(&f, &u, 4);
                    got = f;
                }
                num = fmax(num, fabs(got - x));
                den = fmax(den, fabs(x));
                if (i == 0 && j == 1)
                    got00 = got, ref00 = x;
            }
        double tol = td == FM_F32 ? 1e-3 : 1e-2; /* fp8 tensor cores accumulate with ~14 bits */
        CHECK_MSG(num / den <= tol, "fp8 %s x %s -> %s %s passes=%d: rel err %.3g, d[0,1] = %g expected %g (%s)",
                  fm_dtype_name(ta), fm_dtype_name(tb), fm_dtype_name(td), chain, passes, num / den, got00, ref00,
                  fm_plan_describe(plan));
        free(hd);
    }
    fm_plan_release(plan);
    /* a scale at an offset of 4 bytes is refused at planning, by name */
    fm_tensor bmis;
    fm_tensor_init(&bmis, (float *)dsc + 1, cuda, FM_F32, 1, one, NULL);
    const fm_tensor *t3[FM_MATMUL_NSLOTS] = {&a, &b, NULL, NULL, &d, NULL, NULL, NULL, &asc, &bmis};
    o.epilogue = 0;
    CHECK_STATUS(fm_matmul_plan_v(ctx, t3, &o, &plan), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("b_scale");
    /* a row-major b is refused with a message that says which layout works */
    int64_t sbr[2] = {N, 1};
    fm_tensor brow;
    fm_tensor_init(&brow, db, cuda, tb, 2, sb, sbr);
    const fm_tensor *t2[FM_MATMUL_NSLOTS] = {&a, &brow, NULL, NULL, &d, NULL, NULL, NULL, &asc, &bsc};
    o.epilogue = 0;
    CHECK_STATUS(fm_matmul_plan_v(ctx, t2, &o, &plan), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("column-major");
    cudaFree(da), cudaFree(db), cudaFree(dd), cudaFree(dbias), cudaFree(dsc), cudaFree(dsc2);
    free(ha), free(hbt);
}

static void test_fp8(void)
{
    int cc = 0;
    cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, 0);
    if (cc < 9) {
        SKIP("fp8 needs sm_89+; this GPU is sm_%d", cc * 10);
        CHECK(1);
        return;
    }
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    test_rng rng = {777};
    static const char *const chains[] = {"identity", "bias+relu"};
    for (int c = 0; c < 2; c++)
        for (int passes = 0; passes <= 2; passes += 2) {
            fp8_case(ctx, FM_F8E4M3, FM_F8E4M3, FM_F32, chains[c], passes, &rng);
            fp8_case(ctx, FM_F8E4M3, FM_F8E4M3, FM_BF16, chains[c], passes, &rng);
            fp8_case(ctx, FM_F8E5M2, FM_F8E4M3, FM_BF16, chains[c], passes, &rng);
        }
    fm_context_destroy(ctx);
}

/* alpha = 0 and k = 0 through the C API: no GEMM runs (describe() says no_product), a and b are
 * not read (an inf in b stays out of D), D = act(beta * C + bias) exactly. */
static void no_product_case(fm_context *ctx, fm_dtype dt, int64_t k, double alpha)
{
    enum { M = 5, N = 6 };
    const int real = !fm_dtype_is_complex(dt);
    const size_t es = fm_dtype_size(dt);
    const int64_t kk = k > 0 ? k : 1;
    void *ha = calloc((size_t)(M * kk), es), *hb = calloc((size_t)(kk * N), es), *hc = malloc(M * N * es);
    void *hbias = malloc(N * es), *hd = malloc(M * N * es);
    for (int64_t i = 0; i < M * kk; i++)
        elem_set(ha, dt, i, 1.0);
    for (int64_t i = 0; i < kk * N; i++)
        elem_set(hb, dt, i, i == 2 ? INFINITY : 1.0);
    for (int64_t i = 0; i < M * N; i++)
        elem_set(hc, dt, i, 2.0);
    for (int64_t j = 0; j < N; j++)
        elem_set(hbias, dt, j, (double)j - 3.0);
    void *da, *db, *dc, *dbias, *dd;
    cudaMalloc(&da, M * kk * es), cudaMalloc(&db, kk * N * es), cudaMalloc(&dc, M * N * es);
    cudaMalloc(&dbias, N * es), cudaMalloc(&dd, M * N * es);
    cudaMemcpy(da, ha, M * kk * es, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb, kk * N * es, cudaMemcpyHostToDevice);
    cudaMemcpy(dc, hc, M * N * es, cudaMemcpyHostToDevice);
    cudaMemcpy(dbias, hbias, N * es, cudaMemcpyHostToDevice);
    fm_device cuda = {FM_DEVICE_CUDA, 0};
    int64_t sa[2] = {M, k}, sb[2] = {k, N}, sd[2] = {M, N}, sn[1] = {N};
    fm_tensor ta, tb, tc, tbias, td;
    fm_tensor_init(&ta, da, cuda, dt, 2, sa, NULL);
    fm_tensor_init(&tb, db, cuda, dt, 2, sb, NULL);
    fm_tensor_init(&tc, dc, cuda, dt, 2, sd, NULL);
    fm_tensor_init(&tbias, dbias, cuda, dt, 1, sn, NULL);
    fm_tensor_init(&td, dd, cuda, dt, 2, sd, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_BIAS | (real ? FM_EPILOGUE_RELU : 0);
    o.alpha[0] = alpha;
    o.beta[0] = 0.5;
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&ta, &tb, &tc, &tbias, &td, NULL, NULL, NULL};
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_plan_v(ctx, ts, &o, &plan));
    if (plan) {
        CHECK_MSG(fm_test_contains(fm_plan_describe(plan), "no_product"), "%s", fm_plan_describe(plan));
        void *ptrs[FM_MATMUL_NSLOTS] = {da, db, dc, dbias, dd, NULL, NULL, NULL};
        CHECK_OK(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL));
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        cudaMemcpy(hd, dd, M * N * es, cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int64_t i = 0; i < M * N; i++) {
            double want = 1.0 + (double)(i % N) - 3.0;
            if (real && want < 0)
                want = 0;
            bad += elem_get(hd, dt, i) != want;
        }
        CHECK_MSG(bad == 0, "%s k=%lld alpha=%g: %d of %d elements differ from act(0.5 * C + bias)",
                  fm_dtype_name(dt), (long long)k, alpha, bad, M * N);
        fm_plan_release(plan);
    }
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dbias), cudaFree(dd);
    free(ha), free(hb), free(hc), free(hbias), free(hd);
}

static void test_no_product(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    const fm_dtype dts[] = {FM_F32, FM_F64, FM_C64, FM_C128};
    for (int i = 0; i < 4; i++) {
        no_product_case(ctx, dts[i], 4, 0.0);  /* alpha = 0: inf in b must not become NaN */
        no_product_case(ctx, dts[i], 0, 1.0);  /* k = 0: an empty sum */
    }
    fm_context_destroy(ctx);
}

GPU_TEST_MAIN(NULL, test_chains, test_fp8, test_no_product, test_wider_search)
#else
TEST_MAIN_SKIPPED("built without CUDA")
#endif
