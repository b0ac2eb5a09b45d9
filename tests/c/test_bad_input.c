/* test_bad_input.c : every bad input at the C API gives the right status and a message
 * naming the culprit; nothing crashes, nothing is allocated for impossible sizes. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <complex.h>
#include "mmref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static fm_context *g_ctx;

/* A valid f32 problem: a (M, K), b (K, N), c/d (M, N), bias (N), with real buffers. */
enum { M = 16, K = 12, N = 256 };
typedef struct {
    float a[M * K], b[K * N], c[M * N], d[M * N], bias[N];
    uint8_t mask[M * 32];
    float gaux[M * N];
    fm_tensor ta, tb, tc, td, tbias, tmask, tgaux;
    fm_matmul_options o;
} problem;

static problem *problem_new(void)
{
    problem *p = calloc(1, sizeof *p);
    test_rng rng = {11};
    for (int i = 0; i < M * K; ++i) p->a[i] = (float)rng_uniform(&rng);
    for (int i = 0; i < K * N; ++i) p->b[i] = (float)rng_uniform(&rng);
    for (int i = 0; i < M * N; ++i) p->c[i] = (float)rng_uniform(&rng);
    for (int i = 0; i < N; ++i) p->bias[i] = (float)rng_uniform(&rng);
    int64_t sa[2] = {M, K}, sb[2] = {K, N}, sd[2] = {M, N}, sbias[1] = {N},
            smask[2] = {M, fm_relu_mask_row_bytes(N)};
    fm_tensor_init(&p->ta, p->a, fm_test_cpu, FM_F32, 2, sa, NULL);
    fm_tensor_init(&p->tb, p->b, fm_test_cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&p->tc, p->c, fm_test_cpu, FM_F32, 2, sd, NULL);
    fm_tensor_init(&p->td, p->d, fm_test_cpu, FM_F32, 2, sd, NULL);
    fm_tensor_init(&p->tbias, p->bias, fm_test_cpu, FM_F32, 1, sbias, NULL);
    fm_tensor_init(&p->tmask, p->mask, fm_test_cpu, FM_U8, 2, smask, NULL);
    fm_tensor_init(&p->tgaux, p->gaux, fm_test_cpu, FM_F32, 2, sd, NULL);
    fm_matmul_options_init(&p->o);
    return p;
}

/* Plan with the given descriptors; the plan, if any, is released. */
static fm_status try_plan(const fm_tensor *a, const fm_tensor *b, const fm_tensor *c, const fm_tensor *bias,
                          const fm_tensor *d, const fm_tensor *aux, const fm_matmul_options *o)
{
    fm_plan *p = NULL;
    fm_status s = fm_matmul_plan(g_ctx, a, b, c, bias, d, aux, o, &p);
    if (s != FM_OK && p != NULL) {
        fprintf(stderr, "    plan returned %s but set *plan\n", fm_status_name(s));
        s = FM_ERR_INTERNAL;
    }
    fm_plan_release(p);
    return s;
}

#define CHECK_MENTIONS_WORD(word)                                                                      \
    do {                                                                                               \
        char e_[512];                                                                                  \
        fm_test_copy_error_(e_, sizeof e_);                                                            \
        CHECK_MSG(fm_test_mentions_word(e_, word), "message \"%s\" does not name \"%s\"", e_, word);  \
    } while (0)

static void test_null_arguments(void)
{
    problem *p = problem_new();
    fm_plan *plan = NULL;
    CHECK_STATUS(fm_matmul_plan(NULL, &p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o, &plan), FM_ERR_INVALID_ARGUMENT);
    {
        char e[512];
        fm_test_copy_error_(e, sizeof e);
        CHECK_MSG(fm_test_mentions_word(e, "ctx") || fm_test_contains(e, "context"), "\"%s\" does not name ctx", e);
    }
    CHECK(plan == NULL);
    CHECK_STATUS(fm_matmul_plan(g_ctx, NULL, &p->tb, NULL, NULL, &p->td, NULL, &p->o, &plan), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("a");
    CHECK_STATUS(fm_matmul_plan(g_ctx, &p->ta, NULL, NULL, NULL, &p->td, NULL, &p->o, &plan), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("b");
    CHECK_STATUS(fm_matmul_plan(g_ctx, &p->ta, &p->tb, NULL, NULL, NULL, NULL, &p->o, &plan), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("d");
    CHECK_STATUS(fm_matmul_plan(g_ctx, &p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("plan");
    CHECK(plan == NULL);

    CHECK_STATUS(fm_matmul(NULL, &p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_matmul(g_ctx, NULL, &p->tb, NULL, NULL, &p->td, NULL, &p->o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("a");
    CHECK_STATUS(fm_matmul(g_ctx, &p->ta, &p->tb, NULL, NULL, NULL, NULL, &p->o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("d");

    int nd = 0;
    int64_t shape[FM_MAX_NDIM];
    CHECK_STATUS(fm_matmul_output_shape(NULL, &p->tb, &nd, shape), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_matmul_output_shape(&p->ta, &p->tb, NULL, shape), FM_ERR_INVALID_ARGUMENT);

    /* execute: NULL plan, NULL ptrs */
    void *ptrs[FM_MATMUL_NSLOTS] = {p->a, p->b, NULL, NULL, p->d, NULL};
    CHECK_STATUS(fm_plan_execute(NULL, ptrs, FM_MATMUL_NSLOTS, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_OK(fm_matmul_plan(g_ctx, &p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o, &plan));
    if (plan) CHECK_STATUS(fm_plan_execute(plan, NULL, FM_MATMUL_NSLOTS, NULL), FM_ERR_INVALID_ARGUMENT);
    fm_plan_release(plan);

    /* 1-D operands are the Python layer's business */
    int64_t s1[1] = {K};
    fm_tensor v;
    fm_tensor_init(&v, p->a, fm_test_cpu, FM_F32, 1, s1, NULL);
    fm_status st1 = try_plan(&v, &p->tb, NULL, NULL, &p->td, NULL, &p->o);
    CHECK_MSG(st1 == FM_ERR_SHAPE || st1 == FM_ERR_INVALID_ARGUMENT, "1-D a -> %s", fm_status_name(st1));
    CHECK_MENTIONS_WORD("a");
    free(p);
}

static void test_shapes(void)
{
    problem *p = problem_new();
    /* inner dimensions */
    fm_tensor b2 = p->tb;
    b2.shape[0] = K + 1;
    CHECK_STATUS(try_plan(&p->ta, &b2, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_SHAPE);
    CHECK_MENTIONS_WORD("K");
    int nd = 0;
    int64_t shape[FM_MAX_NDIM];
    CHECK_STATUS(fm_matmul_output_shape(&p->ta, &b2, &nd, shape), FM_ERR_SHAPE);
    CHECK_MENTIONS_WORD("K");

    /* d of the wrong shape */
    fm_tensor d2 = p->td;
    d2.shape[0] = M - 1;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &d2, NULL, &p->o), FM_ERR_SHAPE);
    CHECK_MENTIONS_WORD("d");
    d2 = p->td;
    d2.shape[1] = N + 1;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &d2, NULL, &p->o), FM_ERR_SHAPE);
    int64_t s3[3] = {2, M, N};
    fm_tensor d3;
    fm_tensor_init(&d3, p->d, fm_test_cpu, FM_F32, 3, s3, NULL);
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &d3, NULL, &p->o), FM_ERR_SHAPE);

    /* batch dims not broadcastable: (2, M, K) @ (3, K, N) */
    int64_t sa[3] = {2, M, K}, sb[3] = {3, K, N}, sd[3] = {3, M, N};
    fm_tensor a3, b3, dd;
    float *buf = calloc(6 * M * N + 3 * K * N + 2 * M * K, sizeof(float));
    fm_tensor_init(&a3, buf, fm_test_cpu, FM_F32, 3, sa, NULL);
    fm_tensor_init(&b3, buf, fm_test_cpu, FM_F32, 3, sb, NULL);
    fm_tensor_init(&dd, buf, fm_test_cpu, FM_F32, 3, sd, NULL);
    CHECK_STATUS(try_plan(&a3, &b3, NULL, NULL, &dd, NULL, &p->o), FM_ERR_SHAPE);
    CHECK_STATUS(fm_matmul_output_shape(&a3, &b3, &nd, shape), FM_ERR_SHAPE);
    CHECK(fm_test_contains(fm_last_error(), "2") && fm_test_contains(fm_last_error(), "3"));
    free(buf);

    /* C not broadcastable to d */
    fm_tensor c2 = p->tc;
    c2.shape[1] = N / 2;
    p->o.beta[0] = 1.0;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, &c2, NULL, &p->td, NULL, &p->o), FM_ERR_SHAPE);
    CHECK_MENTIONS_WORD("c");
    free(p);
}

static void test_dtypes(void)
{
    problem *p = problem_new();
    double *bd = calloc(K * N, sizeof(double));
    fm_tensor b64;
    int64_t sb[2] = {K, N};
    fm_tensor_init(&b64, bd, fm_test_cpu, FM_F64, 2, sb, NULL);
    CHECK_STATUS(try_plan(&p->ta, &b64, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_DTYPE);
    CHECK(fm_test_contains(fm_last_error(), "f32") && fm_test_contains(fm_last_error(), "f64"));
    fm_tensor d64 = p->td; /* d of another dtype */
    d64.dtype = FM_F64;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &d64, NULL, &p->o), FM_ERR_DTYPE);

    /* integers and bool: the plain product only (test_matmul_int.c checks its results) */
    const fm_dtype ints[] = {FM_I8, FM_U8, FM_I32, FM_I64, FM_U32, FM_BOOL};
    const char *const words[] = {"int8", "uint8", "int32", "int64", "uint32", "bool"}; /* NumPy's names */
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; ++i) {
        fm_tensor a = p->ta, b = p->tb, d = p->td;
        a.dtype = b.dtype = d.dtype = ints[i];
        CHECK_OK(try_plan(&a, &b, NULL, NULL, &d, NULL, &p->o));
        fm_matmul_options o = p->o;
        o.epilogue = FM_EPILOGUE_RELU;
        CHECK_STATUS(try_plan(&a, &b, NULL, NULL, &d, NULL, &o), FM_ERR_NOT_SUPPORTED);
        CHECK_ERROR_MENTIONS("not supported for dtype");
        CHECK_ERROR_MENTIONS(words[i]);
    }
    /* half precision on the cpu plans (through float32: halfgemm); with an aux output it does not */
    const fm_dtype halves[] = {FM_F16, FM_BF16};
    const char *const half_words[] = {"float16", "bfloat16"};
    for (size_t i = 0; i < 2; ++i) {
        fm_tensor a = p->ta, b = p->tb, d = p->td, aux = p->td;
        a.dtype = b.dtype = d.dtype = aux.dtype = halves[i];
        CHECK_OK(try_plan(&a, &b, NULL, NULL, &d, NULL, &p->o));
        fm_matmul_options o = p->o;
        o.epilogue = FM_EPILOGUE_GELU | FM_EPILOGUE_AUX;
        CHECK_STATUS(try_plan(&a, &b, NULL, NULL, &d, &aux, &o), FM_ERR_NOT_SUPPORTED);
        CHECK_ERROR_MENTIONS("on the cpu");
        CHECK_ERROR_MENTIONS(half_words[i]);
    }
    fm_tensor bad = p->ta;
    bad.dtype = (fm_dtype)77;
    CHECK_STATUS(try_plan(&bad, &p->tb, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_DTYPE);
    free(bd);
    free(p);
}

static void test_bias(void)
{
    problem *p = problem_new();
    p->o.epilogue = FM_EPILOGUE_BIAS;
    fm_tensor bias = p->tbias;
    bias.shape[0] = N - 1;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, &bias, &p->td, NULL, &p->o), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("bias");
    CHECK_ERROR_MENTIONS("255");
    CHECK_ERROR_MENTIONS("256");
    bias = p->tbias;
    bias.dtype = FM_F64;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, &bias, &p->td, NULL, &p->o), FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("bias");
    /* BIAS without a bias tensor, bias without BIAS */
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("bias");
    p->o.epilogue = 0;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, &p->tbias, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("bias");
    free(p);
}

static void test_epilogue_and_aux(void)
{
    problem *p = problem_new();
    /* AUX without its tensor */
    p->o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_AUX;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("aux");
    p->o.epilogue = FM_EPILOGUE_GELU | FM_EPILOGUE_AUX;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("aux");
    /* aux without AUX */
    p->o.epilogue = FM_EPILOGUE_RELU;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tmask, &p->o), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("aux");
    /* the valid ones plan */
    p->o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_AUX;
    CHECK_OK(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tmask, &p->o));
    p->o.epilogue = FM_EPILOGUE_GELU | FM_EPILOGUE_AUX;
    CHECK_OK(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tgaux, &p->o));
    /* aux of the wrong shape / dtype */
    p->o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_AUX;
    fm_tensor mask = p->tmask;
    mask.shape[1] = fm_relu_mask_row_bytes(N) - 1; /* one byte short of the padded row */
    mask.strides[0] = mask.shape[1];
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, &mask, &p->o), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("aux");
    mask = p->tmask;
    mask.shape[0] = M + 1;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, &mask, &p->o), FM_ERR_SHAPE);
    mask = p->tmask;
    mask.dtype = FM_F32;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, &mask, &p->o), FM_ERR_DTYPE);
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tgaux, &p->o), FM_ERR_DTYPE);
    p->o.epilogue = FM_EPILOGUE_GELU | FM_EPILOGUE_AUX;
    fm_tensor g = p->tgaux;
    g.shape[1] = N - 1;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, &g, &p->o), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("aux");
    g = p->tgaux;
    g.strides[1] = 2; /* gelu aux needs a unit column stride */
    g.strides[0] = 2 * N;
    CHECK(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, &g, &p->o) != FM_OK);
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tmask, &p->o), FM_ERR_DTYPE);

    /* relu and gelu together, unknown bits */
    p->o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_GELU;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("relu");
    CHECK_ERROR_MENTIONS("gelu");
    p->o.epilogue = 1u << 16; /* the first bit without a meaning (14, 15: dropout, ddropout) */
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("epilogue");
    p->o.epilogue = FM_EPILOGUE_RELU | (1u << 20);
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);

    /* activations on complex operands */
    double complex *zbuf = calloc(M * K + K * N + M * N, sizeof(double complex));
    int64_t sa[2] = {M, K}, sb[2] = {K, N}, sd[2] = {M, N};
    fm_tensor za, zb, zd;
    fm_tensor_init(&za, zbuf, fm_test_cpu, FM_C128, 2, sa, NULL);
    fm_tensor_init(&zb, zbuf + M * K, fm_test_cpu, FM_C128, 2, sb, NULL);
    fm_tensor_init(&zd, zbuf + M * K + K * N, fm_test_cpu, FM_C128, 2, sd, NULL);
    const unsigned acts[] = {FM_EPILOGUE_RELU, FM_EPILOGUE_GELU};
    for (int i = 0; i < 2; ++i) {
        p->o.epilogue = acts[i];
        fm_status s = try_plan(&za, &zb, NULL, NULL, &zd, NULL, &p->o);
        CHECK_MSG(s == FM_ERR_DTYPE || s == FM_ERR_NOT_SUPPORTED || s == FM_ERR_INVALID_ARGUMENT,
                  "%s on c128 -> %s", i ? "gelu" : "relu", fm_status_name(s));
        CHECK_ERROR_MENTIONS(i ? "gelu" : "relu");
        CHECK_ERROR_MENTIONS("complex");
    }
    /* complex alpha for real operands cannot be honoured */
    p->o.epilogue = 0;
    p->o.alpha[1] = 0.5;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("alpha");
    free(zbuf);
    free(p);
}

/* Plan through the slot-array entry point (reaches bgrad and scale). */
static fm_status try_plan_v(const fm_tensor *a, const fm_tensor *b, const fm_tensor *c, const fm_tensor *bias,
                            const fm_tensor *d, const fm_tensor *aux, const fm_tensor *bgrad, const fm_tensor *scale,
                            const fm_matmul_options *o)
{
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {a, b, c, bias, d, aux, bgrad, scale};
    fm_plan *p = NULL;
    fm_status s = fm_matmul_plan_v(g_ctx, ts, o, &p);
    if (s != FM_OK && p != NULL) {
        fprintf(stderr, "    plan_v returned %s but set *plan\n", fm_status_name(s));
        s = FM_ERR_INTERNAL;
    }
    fm_plan_release(p);
    return s;
}

/* The epilogues of commit dda9e9c: drelu/dgelu, bias gradients, scale, clamp. */
static void test_new_epilogues(void)
{
    problem *p = problem_new();
    float bg[M + N + 1], sc[N + 1];
    double sc64[N], bg64[N];
    int64_t sn[1] = {N}, sm[1] = {M}, sn1[1] = {N - 1}, s2n[2] = {2, N};
    fm_tensor tbg, tbgm, tbg_short, tbg64, tbg2, tsc, tsc64, tsc_short;
    fm_tensor_init(&tbg, bg, fm_test_cpu, FM_F32, 1, sn, NULL);
    fm_tensor_init(&tbgm, bg, fm_test_cpu, FM_F32, 1, sm, NULL);
    fm_tensor_init(&tbg_short, bg, fm_test_cpu, FM_F32, 1, sn1, NULL);
    fm_tensor_init(&tbg64, bg64, fm_test_cpu, FM_F64, 1, sn, NULL);
    fm_tensor_init(&tbg2, bg, fm_test_cpu, FM_F32, 2, s2n, NULL); /* batch dims d does not have */
    fm_tensor_init(&tsc, sc, fm_test_cpu, FM_F32, 1, sn, NULL);
    fm_tensor_init(&tsc64, sc64, fm_test_cpu, FM_F64, 1, sn, NULL);
    fm_tensor_init(&tsc_short, sc, fm_test_cpu, FM_F32, 1, sn1, NULL);
    fm_matmul_options o = p->o;

    /* the valid forms plan (so the failures below are about the one wrong thing) */
    o.epilogue = FM_EPILOGUE_DRELU | FM_EPILOGUE_BGRAD;
    CHECK_OK(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tmask, &tbg, NULL, &o));
    o.epilogue = FM_EPILOGUE_DGELU;
    CHECK_OK(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tgaux, NULL, NULL, &o));
    o.epilogue = FM_EPILOGUE_BGRADA;
    CHECK_OK(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &tbgm, NULL, &o));
    o.epilogue = FM_EPILOGUE_SCALE | FM_EPILOGUE_BIAS;
    CHECK_OK(try_plan_v(&p->ta, &p->tb, NULL, &p->tbias, &p->td, NULL, NULL, &tsc, &o));

    /* drelu / dgelu without their aux input */
    o.epilogue = FM_EPILOGUE_DRELU;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("aux");
    CHECK_ERROR_MENTIONS("drelu");
    o.epilogue = FM_EPILOGUE_DGELU | FM_EPILOGUE_BGRAD;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &tbg, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("aux");
    /* aux of the wrong dtype: drelu reads a u8 mask, dgelu d's dtype */
    o.epilogue = FM_EPILOGUE_DRELU;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tgaux, NULL, NULL, &o), FM_ERR_DTYPE);
    CHECK_MENTIONS_WORD("aux");
    CHECK_ERROR_MENTIONS("u8");
    o.epilogue = FM_EPILOGUE_DGELU;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tmask, NULL, NULL, &o), FM_ERR_DTYPE);
    CHECK_MENTIONS_WORD("aux");
    CHECK_ERROR_MENTIONS("f32");
    fm_tensor g64 = p->tgaux;
    g64.dtype = FM_F64;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, &g64, NULL, NULL, &o), FM_ERR_DTYPE);
    CHECK_MENTIONS_WORD("aux");
    /* drelu/dgelu with a forward activation, bias or scale */
    o.epilogue = FM_EPILOGUE_DRELU | FM_EPILOGUE_BIAS;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, &p->tbias, &p->td, &p->tmask, NULL, NULL, &o),
                 FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("bias");

    /* bgrad: missing, alone, wrong shape, wrong dtype, given without a gradient epilogue */
    o.epilogue = FM_EPILOGUE_DRELU | FM_EPILOGUE_BGRAD;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tmask, NULL, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("bgrad");
    o.epilogue = FM_EPILOGUE_BGRADB;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("bgrad");
    o.epilogue = FM_EPILOGUE_BGRAD; /* bgrad without drelu/dgelu */
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &tbg, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("bgrad");
    CHECK_ERROR_MENTIONS("drelu");
    o.epilogue = FM_EPILOGUE_DRELU | FM_EPILOGUE_BGRAD;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tmask, &tbg_short, NULL, &o), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("bgrad");
    CHECK_ERROR_MENTIONS("255");
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tmask, &tbgm, NULL, &o), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("bgrad");
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tmask, &tbg2, NULL, &o), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("bgrad");
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, &p->tmask, &tbg64, NULL, &o), FM_ERR_DTYPE);
    CHECK_MENTIONS_WORD("bgrad");
    o.epilogue = FM_EPILOGUE_BGRADA; /* length M, not N */
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &tbg, NULL, &o), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("bgrad");
    o.epilogue = FM_EPILOGUE_BGRADB;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &tbgm, NULL, &o), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("bgrad");
    o.epilogue = 0;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &tbg, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("bgrad");
    /* bgrada and bgradb together; either with anything else */
    o.epilogue = FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &tbg, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("bgrada");
    CHECK_MENTIONS_WORD("bgradb");
    o.epilogue = FM_EPILOGUE_BGRADB | FM_EPILOGUE_BIAS;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, &p->tbias, &p->td, NULL, &tbg, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("bgradb");

    /* scale: missing, unexpected, wrong dtype, wrong length, complex data */
    o.epilogue = FM_EPILOGUE_SCALE;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("scale");
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, &tsc64, &o), FM_ERR_DTYPE);
    CHECK_MENTIONS_WORD("scale");
    CHECK_ERROR_MENTIONS("f64");
    fm_tensor sc_u8 = tsc;
    sc_u8.dtype = FM_U8;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, &sc_u8, &o), FM_ERR_DTYPE);
    CHECK_MENTIONS_WORD("scale");
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, &tsc_short, &o), FM_ERR_SHAPE);
    CHECK_MENTIONS_WORD("scale");
    CHECK_ERROR_MENTIONS("255");
    o.epilogue = 0;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, &tsc, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("scale");
    {
        double complex *zbuf = calloc(M * K + K * N + M * N + N, sizeof(double complex));
        int64_t sa[2] = {M, K}, sb[2] = {K, N}, sd[2] = {M, N};
        fm_tensor za, zb, zd, zsc;
        fm_tensor_init(&za, zbuf, fm_test_cpu, FM_C128, 2, sa, NULL);
        fm_tensor_init(&zb, zbuf + M * K, fm_test_cpu, FM_C128, 2, sb, NULL);
        fm_tensor_init(&zd, zbuf + M * K + K * N, fm_test_cpu, FM_C128, 2, sd, NULL);
        fm_tensor_init(&zsc, sc64, fm_test_cpu, FM_F64, 1, sn, NULL);
        o.epilogue = FM_EPILOGUE_SCALE;
        fm_status s = try_plan_v(&za, &zb, NULL, NULL, &zd, NULL, NULL, &zsc, &o);
        CHECK_MSG(s == FM_ERR_NOT_SUPPORTED || s == FM_ERR_DTYPE, "scale on c128 -> %s", fm_status_name(s));
        CHECK_MENTIONS_WORD("scale");
        CHECK_ERROR_MENTIONS("complex");
        o.epilogue = FM_EPILOGUE_DRELU; /* backward kinds are real too */
        s = try_plan_v(&za, &zb, NULL, NULL, &zd, &p->tmask, NULL, NULL, &o);
        CHECK_MSG(s == FM_ERR_NOT_SUPPORTED || s == FM_ERR_DTYPE, "drelu on c128 -> %s", fm_status_name(s));
        CHECK_MENTIONS_WORD("drelu");
        free(zbuf);
    }

    /* clamp: lo > hi, NaN bounds */
    o.epilogue = FM_EPILOGUE_CLAMP;
    o.clamp[0] = 1.0;
    o.clamp[1] = -1.0;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("clamp");
    o.clamp[0] = NAN;
    o.clamp[1] = 1.0;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("clamp");
    o.clamp[0] = -1.0;
    o.clamp[1] = NAN;
    CHECK_STATUS(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_MENTIONS_WORD("clamp");
    o.clamp[1] = -1.0; /* lo == hi is a valid (constant) clamp */
    CHECK_OK(try_plan_v(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, NULL, NULL, &o));

    /* execute: bgrad overlapping an input, and the new slots left NULL */
    o = p->o;
    o.epilogue = FM_EPILOGUE_BGRADB;
    fm_plan *plan = NULL;
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &tbg, NULL};
    CHECK_OK(fm_matmul_plan_v(g_ctx, ts, &o, &plan));
    if (plan) {
        void *ptrs[FM_MATMUL_NSLOTS] = {p->a, p->b, NULL, NULL, p->d, NULL, bg, NULL};
        CHECK_OK(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL));
        ptrs[FM_MATMUL_BGRAD] = p->b + 5;
        CHECK_STATUS(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL), FM_ERR_ALIAS);
        CHECK_MENTIONS_WORD("bgrad");
        ptrs[FM_MATMUL_BGRAD] = NULL;
        CHECK_STATUS(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL), FM_ERR_INVALID_ARGUMENT);
        CHECK_MENTIONS_WORD("bgrad");
        fm_plan_release(plan);
    }
    free(p);
}

static void test_execute_pointers(void)
{
    problem *p = problem_new();
    p->o.epilogue = FM_EPILOGUE_BIAS;
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_plan(g_ctx, &p->ta, &p->tb, NULL, &p->tbias, &p->td, NULL, &p->o, &plan));
    if (!plan) {
        free(p);
        return;
    }
    void *good[FM_MATMUL_NSLOTS] = {p->a, p->b, NULL, p->bias, p->d, NULL};
    CHECK_OK(fm_plan_execute(plan, good, FM_MATMUL_NSLOTS, NULL));
    const int required[] = {FM_MATMUL_A, FM_MATMUL_B, FM_MATMUL_BIAS, FM_MATMUL_D};
    static const char *const names[] = {"a", "b", "bias", "d"};
    for (int i = 0; i < 4; ++i) {
        void *ptrs[FM_MATMUL_NSLOTS];
        memcpy(ptrs, good, sizeof ptrs);
        ptrs[required[i]] = NULL;
        CHECK_STATUS(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL), FM_ERR_INVALID_ARGUMENT);
        CHECK_MENTIONS_WORD(names[i]);
    }
    /* a pointer in a slot the plan does not use */
    void *extra[FM_MATMUL_NSLOTS];
    memcpy(extra, good, sizeof extra);
    extra[FM_MATMUL_C] = p->c;
    CHECK_STATUS(fm_plan_execute(plan, extra, FM_MATMUL_NSLOTS, NULL), FM_ERR_INVALID_ARGUMENT);
    memcpy(extra, good, sizeof extra);
    extra[FM_MATMUL_AUX] = p->mask;
    CHECK_STATUS(fm_plan_execute(plan, extra, FM_MATMUL_NSLOTS, NULL), FM_ERR_INVALID_ARGUMENT);
    /* nptrs */
    CHECK_STATUS(fm_plan_execute(plan, good, FM_MATMUL_D, NULL), FM_ERR_INVALID_ARGUMENT); /* D cut off */
    CHECK_ERROR_MENTIONS("nptrs");
    CHECK_STATUS(fm_plan_execute(plan, good, 0, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_plan_execute(plan, good, -1, NULL), FM_ERR_INVALID_ARGUMENT);
    /* a longer array with something in a slot past the operation's last */
    void *longer[FM_MATMUL_NSLOTS + 1] = {p->a, p->b, NULL, p->bias, p->d, NULL, p->c};
    CHECK_STATUS(fm_plan_execute(plan, longer, FM_MATMUL_NSLOTS + 1, NULL), FM_ERR_INVALID_ARGUMENT);
    /* and the good call still works after all of that */
    CHECK_OK(fm_plan_execute(plan, good, FM_MATMUL_NSLOTS, NULL));
    fm_plan_release(plan);
    free(p);
}

static void test_alias(void)
{
    fm_plan *plan = NULL;
    /* square so that D can sit exactly on A or B */
    enum { S = 24 };
    float *buf = calloc(8 * S * S, sizeof(float));
    test_rng rng = {21};
    for (int i = 0; i < 8 * S * S; ++i) buf[i] = (float)rng_uniform(&rng);
    float *a = buf, *b = buf + 2 * S * S, *c = buf + 4 * S * S, *d = buf + 6 * S * S;
    int64_t sq[2] = {S, S};
    fm_tensor ta, tb, tc, td;
    fm_tensor_init(&ta, a, fm_test_cpu, FM_F32, 2, sq, NULL);
    fm_tensor_init(&tb, b, fm_test_cpu, FM_F32, 2, sq, NULL);
    fm_tensor_init(&tc, c, fm_test_cpu, FM_F32, 2, sq, NULL);
    fm_tensor_init(&td, d, fm_test_cpu, FM_F32, 2, sq, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.beta[0] = 1.0;
    CHECK_OK(fm_matmul_plan(g_ctx, &ta, &tb, &tc, NULL, &td, NULL, &o, &plan));
    if (plan) {
        void *cases[][FM_MATMUL_NSLOTS] = {
            {a, b, c, NULL, a, NULL},          /* D == A */
            {a, b, c, NULL, b, NULL},          /* D == B */
            {a, b, c, NULL, a + S * S / 2, NULL}, /* D overlaps the second half of A */
            {a, b, c, NULL, b - S * S + S, NULL}, /* D's last row is B's first */
            {a, b, c, NULL, c + 1, NULL},       /* D overlaps C, shifted by one element */
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
            CHECK_STATUS(fm_plan_execute(plan, cases[i], FM_MATMUL_NSLOTS, NULL), FM_ERR_ALIAS);
            CHECK_MENTIONS_WORD("d");
        }
        /* D == C, same layout: in-place accumulate D = A@B + D */
        float *expect = malloc(S * S * sizeof(float));
        for (int i = 0; i < S; ++i)
            for (int j = 0; j < S; ++j) {
                double acc = c[i * S + j];
                for (int l = 0; l < S; ++l) acc += (double)a[i * S + l] * b[l * S + j];
                expect[i * S + j] = (float)acc;
            }
        void *inplace[FM_MATMUL_NSLOTS] = {a, b, c, NULL, c, NULL};
        CHECK_OK(fm_plan_execute(plan, inplace, FM_MATMUL_NSLOTS, NULL));
        int bad = 0;
        for (int i = 0; i < S * S; ++i) bad += !(fabsf(c[i] - expect[i]) <= 1e-4f * (1.0f + fabsf(expect[i])));
        CHECK_MSG(bad == 0, "in-place D == C: %d wrong", bad);
        free(expect);
        fm_plan_release(plan);
    }
    /* the stateless call checks too */
    fm_tensor tda = td;
    tda.data = a;
    CHECK_STATUS(fm_matmul(g_ctx, &ta, &tb, &tc, NULL, &tda, NULL, &o, NULL), FM_ERR_ALIAS);
    int other = -2, slot = fm_last_error_slots(&other); /* the slots it is about: d over a */
    CHECK_MSG(slot == FM_MATMUL_D && other == FM_MATMUL_A, "alias slots (%d, %d), expected (d, a)", slot, other);
    fm_clear_error();
    CHECK(fm_last_error_slots(NULL) == -1);
    /* bias and aux overlapping D */
    fm_tensor tbias;
    int64_t sn[1] = {S};
    fm_tensor_init(&tbias, d + 3, fm_test_cpu, FM_F32, 1, sn, NULL);
    o.epilogue = FM_EPILOGUE_BIAS;
    CHECK_STATUS(fm_matmul(g_ctx, &ta, &tb, NULL, &tbias, &td, NULL, &o, NULL), FM_ERR_ALIAS);
    free(buf);
}

/* An output that overlaps itself (zero or too-small strides) has no defined result. */
static void test_self_overlapping_output(void)
{
    enum { R = 8, C = 6, KK = 5 };
    float *buf = calloc(3 * R * C + 3 * R * KK + 3 * KK * C, sizeof(float));
    int64_t sa[3] = {3, R, KK}, sb[3] = {3, KK, C}, sd[3] = {3, R, C};
    fm_tensor a, b, d;
    fm_tensor_init(&a, buf, fm_test_cpu, FM_F32, 3, sa, NULL);
    fm_tensor_init(&b, buf + 3 * R * KK, fm_test_cpu, FM_F32, 3, sb, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    const int64_t bad_strides[][3] = {
        {0, C, 1},          /* all batches write one matrix */
        {R * C, 0, 1},      /* all rows write one row */
        {R * C, 1, 1},      /* rows overlap */
        {R * C, C, 0},      /* all columns write one element */
    };
    for (size_t i = 0; i < sizeof bad_strides / sizeof bad_strides[0]; ++i) {
        fm_tensor_init(&d, buf + 3 * R * KK + 3 * KK * C, fm_test_cpu, FM_F32, 3, sd, bad_strides[i]);
        fm_plan *p = NULL;
        fm_status s = fm_matmul_plan(g_ctx, &a, &b, NULL, NULL, &d, NULL, &o, &p);
        if (s == FM_OK && p) {
            void *ptrs[FM_MATMUL_NSLOTS] = {a.data, b.data, NULL, NULL, d.data, NULL};
            s = fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL);
        }
        int other = -2, slot = fm_last_error_slots(&other);
        CHECK_MSG(s != FM_ERR_ALIAS || (slot == FM_MATMUL_D && other == FM_MATMUL_D),
                  "self-overlap slots (%d, %d), expected (d, d)", slot, other);
        fm_plan_release(p);
        CHECK_MSG(s == FM_ERR_ALIAS || s == FM_ERR_INVALID_ARGUMENT,
                  "d with strides (%lld, %lld, %lld) overlaps itself but plan+execute gave %s", (long long)bad_strides[i][0],
                  (long long)bad_strides[i][1], (long long)bad_strides[i][2], fm_status_name(s));
    }
    free(buf);
}

/* k = 3e9 with fake pointers: planning only; must be refused without allocating. */
/* Descriptors whose element count or byte span does not fit 64 bits match no buffer: refused at
 * planning naming the operand (strides of INT64_MAX / 2 on c, bias or d were planned, and the
 * execution then read and wrote far outside the buffers); INT64_MIN strides too (|stride|
 * overflowed); fm_tensor_init refuses a shape whose C-order strides overflow and
 * fm_tensor_numel saturates instead of wrapping to 0 ("empty"). Nonzero reserved option
 * fields are refused. */
static void test_descriptor_ranges(void)
{
    problem *p = problem_new();
    const int64_t s22[2] = {M, N}, huge[2] = {INT64_MAX / 2, 1}, minst[2] = {INT64_MIN, 1}, sb1[1] = {INT64_MAX / 2};
    fm_tensor c, d, bias;
    fm_tensor_init(&c, p->c, fm_test_cpu, FM_F32, 2, s22, huge);
    p->o.beta[0] = 1;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, &c, NULL, &p->td, NULL, &p->o), FM_ERR_TOO_LARGE);
    CHECK_MENTIONS_WORD("c");
    p->o.beta[0] = 0;
    fm_tensor_init(&d, p->d, fm_test_cpu, FM_F32, 2, s22, huge);
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &d, NULL, &p->o), FM_ERR_TOO_LARGE);
    CHECK_MENTIONS_WORD("d");
    fm_tensor_init(&d, p->d, fm_test_cpu, FM_F32, 2, s22, minst);
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &d, NULL, &p->o), FM_ERR_TOO_LARGE);
    const int64_t sbias[1] = {N};
    fm_tensor_init(&bias, p->bias, fm_test_cpu, FM_F32, 1, sbias, sb1);
    p->o.epilogue = FM_EPILOGUE_BIAS;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, &bias, &p->td, NULL, &p->o), FM_ERR_TOO_LARGE);
    CHECK_MENTIONS_WORD("bias");
    p->o.epilogue = 0;
    fm_tensor t;
    const int64_t hh[2] = {INT64_MAX, INT64_MAX}, h3[3] = {1LL << 40, 1LL << 40, 1LL << 40};
    CHECK_STATUS(fm_tensor_init(&t, NULL, fm_test_cpu, FM_F32, 2, hh, NULL), FM_ERR_TOO_LARGE);
    const int64_t st3[3] = {1, 1, 1};
    /* strides given: the element count must fit all the same (it did saturate fm_tensor_numel) */
    CHECK_STATUS(fm_tensor_init(&t, NULL, fm_test_cpu, FM_F32, 3, h3, st3), FM_ERR_TOO_LARGE);
    /* an empty operand (k = 0) is still addressed by batch offsets: its strides are checked too */
    {
        const int64_t sa0[3] = {2, M, 0}, sb0[3] = {2, 0, N}, sd0[3] = {2, M, N}, sta[3] = {INT64_MAX, 1, 1};
        fm_tensor a0, b0, d0;
        fm_tensor_init(&a0, p->a, fm_test_cpu, FM_F32, 3, sa0, sta);
        fm_tensor_init(&b0, p->b, fm_test_cpu, FM_F32, 3, sb0, NULL);
        fm_tensor_init(&d0, p->d, fm_test_cpu, FM_F32, 3, sd0, NULL);
        CHECK_STATUS(try_plan(&a0, &b0, NULL, NULL, &d0, NULL, &p->o), FM_ERR_TOO_LARGE);
        CHECK_MENTIONS_WORD("a");
    }
    /* the same checks on the fft path */
    fm_fft_options fo;
    fm_fft_options_init(&fo);
    fm_tensor fin, fout;
    fm_tensor_init(&fin, p->c, fm_test_cpu, FM_C64, 2, s22, huge);
    fm_tensor_init(&fout, p->d, fm_test_cpu, FM_C64, 2, s22, NULL);
    fm_plan *plan = NULL;
    CHECK_STATUS(fm_fft_plan(g_ctx, &fin, &fout, NULL, NULL, &fo, &plan), FM_ERR_TOO_LARGE);
    CHECK_MENTIONS_WORD("in");
    /* reserved fields */
    p->o.reserved[2] = 7;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("reserved[2]");
    p->o.reserved[2] = 0;
    fo.reserved[4] = 1;
    const int64_t s1[1] = {4};
    fm_tensor_init(&fin, p->c, fm_test_cpu, FM_C64, 1, s1, NULL);
    fm_tensor_init(&fout, p->d, fm_test_cpu, FM_C64, 1, s1, NULL);
    CHECK_STATUS(fm_fft_plan(g_ctx, &fin, &fout, NULL, NULL, &fo, &plan), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("reserved[4]");
    /* a chain array's failure is about its slot (fm_last_error_slots: that slot, other -1) */
    fo.reserved[4] = 0;
    fo.prolog.ops = FM_FFT_OP_MULTIPLY;
    fm_tensor fw;
    fm_tensor_init(&fw, p->c, fm_test_cpu, FM_F64, 1, s1, NULL); /* c64 data takes f32 or c64 */
    CHECK_STATUS(fm_fft_plan(g_ctx, &fin, &fout, &fw, NULL, &fo, &plan), FM_ERR_DTYPE);
    int other = -2, slot = fm_last_error_slots(&other);
    CHECK_MSG(slot == FM_FFT_PROLOG && other == -1, "chain array slots (%d, %d), expected (prolog, -1)", slot, other);
    fm_plan_release(plan);
    free(p);
}

static void test_too_large(void)
{
    const int64_t big = 3000000000LL;
    void *fake = (void *)(uintptr_t)0x10000;
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    int64_t sa[2] = {2, big}, sb[2] = {big, 3}, sd[2] = {2, 3};
    fm_tensor a, b, d;
    fm_tensor_init(&a, fake, fm_test_cpu, FM_F32, 2, sa, NULL);
    fm_tensor_init(&b, fake, fm_test_cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&d, fake, fm_test_cpu, FM_F32, 2, sd, NULL);
    CHECK_STATUS(try_plan(&a, &b, NULL, NULL, &d, NULL, &o), FM_ERR_TOO_LARGE);
    /* a transposed view: K is the leading dimension (lda = 2), still K > INT32_MAX */
    int64_t st[2] = {1, 2};
    fm_tensor at;
    fm_tensor_init(&at, fake, fm_test_cpu, FM_F32, 2, sa, st);
    CHECK_STATUS(try_plan(&at, &b, NULL, NULL, &d, NULL, &o), FM_ERR_TOO_LARGE);
    /* M too large */
    int64_t sa2[2] = {big, 4}, sb2[2] = {4, 2}, sd2[2] = {big, 2};
    fm_tensor_init(&a, fake, fm_test_cpu, FM_F64, 2, sa2, NULL);
    fm_tensor_init(&b, fake, fm_test_cpu, FM_F64, 2, sb2, NULL);
    fm_tensor_init(&d, fake, fm_test_cpu, FM_F64, 2, sd2, NULL);
    CHECK_STATUS(try_plan(&a, &b, NULL, NULL, &d, NULL, &o), FM_ERR_TOO_LARGE);
    /* a leading dimension beyond 32 bits with small extents */
    int64_t sa3[2] = {3, 4}, sb3[2] = {4, 2}, sd3[2] = {3, 2}, sbig[2] = {big, 1};
    fm_tensor_init(&a, fake, fm_test_cpu, FM_F32, 2, sa3, sbig);
    fm_tensor_init(&b, fake, fm_test_cpu, FM_F32, 2, sb3, NULL);
    fm_tensor_init(&d, fake, fm_test_cpu, FM_F32, 2, sd3, NULL);
    fm_status s = try_plan(&a, &b, NULL, NULL, &d, NULL, &o);
    CHECK_MSG(s == FM_ERR_TOO_LARGE || s == FM_OK, "row stride 3e9 -> %s (either refuse or copy later)",
              fm_status_name(s));
}

static void test_devices(void)
{
    problem *p = problem_new();
    int ngpu = fm_cuda_device_count();
    fm_tensor bc = p->tb;
    bc.device.type = FM_DEVICE_CUDA;
    bc.device.id = 0;
    CHECK_STATUS(try_plan(&p->ta, &bc, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_DEVICE);
    CHECK_ERROR_MENTIONS("cpu");
    CHECK_ERROR_MENTIONS("cuda");
    fm_tensor dc = p->td;
    dc.device.type = FM_DEVICE_CUDA;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &dc, NULL, &p->o), FM_ERR_DEVICE);
    fm_tensor bad = p->ta;
    bad.device.type = 77;
    CHECK(try_plan(&bad, &p->tb, NULL, NULL, &p->td, NULL, &p->o) != FM_OK);

    if (ngpu == 0) {
        fm_matmul_options o = p->o;
        o.execution = FM_EXECUTION_CUDA;
        CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &o), FM_ERR_UNAVAILABLE);
        CHECK_ERROR_MENTIONS("cuda");
        /* everything on a GPU that is not there */
        fm_tensor ac = p->ta;
        ac.device.type = FM_DEVICE_CUDA;
        fm_status s = try_plan(&ac, &bc, NULL, NULL, &dc, NULL, &p->o);
        /* UNAVAILABLE from a cuda backend that is present but has no device, NOT_SUPPORTED
         * from a build without any cuda backend */
        CHECK_MSG(s == FM_ERR_UNAVAILABLE || s == FM_ERR_NOT_SUPPORTED, "all operands on cuda, no GPU -> %s",
                  fm_status_name(s));
        CHECK_ERROR_MENTIONS("cuda");
        /* execution=cpu cannot fetch b from a GPU that is not there */
        o.execution = FM_EXECUTION_CPU;
        fm_plan *plan = NULL;
        s = fm_matmul_plan(g_ctx, &p->ta, &bc, NULL, NULL, &p->td, NULL, &o, &plan);
        if (s == FM_OK) {
            void *ptrs[FM_MATMUL_NSLOTS] = {p->a, p->b, NULL, NULL, p->d, NULL};
            s = fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL);
            fm_plan_release(plan);
        }
        CHECK_MSG(s == FM_ERR_UNAVAILABLE || s == FM_ERR_DEVICE, "execution=cpu with b on cuda, no GPU -> %s",
                  fm_status_name(s));
    } else {
        SKIP("%d CUDA device(s) present: execution=CUDA without a GPU cannot be tested here", ngpu);
    }
    fm_matmul_options o = p->o;
    o.execution = 9;
    CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &o), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("execution");
    free(p);
}

/* fp8 inputs: rules checked before any backend is asked, then the CPU's refusal. */
static void test_fp8_inputs(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    static unsigned char a8[16 * 16], b8[16 * 16];
    static float d32[16 * 16], sc = 1.0f;
    static double d64[16 * 16];
    fm_device cpu = {FM_DEVICE_CPU, 0};
    int64_t s2[2] = {16, 16}, one[1] = {1}, two[1] = {2};
    fm_tensor a, b, b55, a55, d, dd, asc, bad_sc, f32a;
    fm_tensor_init(&a, a8, cpu, FM_F8E4M3, 2, s2, NULL);
    fm_tensor_init(&b, b8, cpu, FM_F8E4M3, 2, s2, NULL);
    fm_tensor_init(&a55, a8, cpu, FM_F8E5M2, 2, s2, NULL);
    fm_tensor_init(&b55, b8, cpu, FM_F8E5M2, 2, s2, NULL);
    fm_tensor_init(&d, d32, cpu, FM_F32, 2, s2, NULL);
    fm_tensor_init(&dd, d64, cpu, FM_F64, 2, s2, NULL);
    fm_tensor_init(&asc, &sc, cpu, FM_F32, 1, one, NULL);
    fm_tensor_init(&bad_sc, d32, cpu, FM_F32, 1, two, NULL);
    fm_tensor_init(&f32a, d32, cpu, FM_F32, 2, s2, NULL);
    fm_plan *plan = NULL;
    const fm_tensor *t1[FM_MATMUL_NSLOTS] = {&a, &b, NULL, NULL, &d, NULL, NULL, NULL, &asc, NULL};
    CHECK_STATUS(fm_matmul_plan_v(ctx, t1, NULL, &plan), FM_ERR_NOT_SUPPORTED); /* no fp8 on the cpu */
    CHECK_ERROR_MENTIONS("fp8");
    CHECK_ERROR_MENTIONS("cpu");
    const fm_tensor *t2[FM_MATMUL_NSLOTS] = {&a55, &b55, NULL, NULL, &d, NULL, NULL, NULL, NULL, NULL};
    CHECK_STATUS(fm_matmul_plan_v(ctx, t2, NULL, &plan), FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("e5m2");
    const fm_tensor *t3[FM_MATMUL_NSLOTS] = {&a, &b, NULL, NULL, &dd, NULL, NULL, NULL, NULL, NULL};
    CHECK_STATUS(fm_matmul_plan_v(ctx, t3, NULL, &plan), FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("f64");
    const fm_tensor *t4[FM_MATMUL_NSLOTS] = {&a, &f32a, NULL, NULL, &d, NULL, NULL, NULL, NULL, NULL};
    CHECK_STATUS(fm_matmul_plan_v(ctx, t4, NULL, &plan), FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("fp8 b");
    const fm_tensor *t5[FM_MATMUL_NSLOTS] = {&a, &b, NULL, NULL, &d, NULL, NULL, NULL, &bad_sc, NULL};
    CHECK_STATUS(fm_matmul_plan_v(ctx, t5, NULL, &plan), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("a_scale");
    const fm_tensor *t6[FM_MATMUL_NSLOTS] = {&f32a, &f32a, NULL, NULL, &d, NULL, NULL, NULL, NULL, &asc};
    CHECK_STATUS(fm_matmul_plan_v(ctx, t6, NULL, &plan), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("b_scale");
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_BGRADB;
    int64_t sn[1] = {16};
    fm_tensor bg;
    fm_tensor_init(&bg, d32, cpu, FM_F32, 1, sn, NULL);
    const fm_tensor *t7[FM_MATMUL_NSLOTS] = {&a, &b, NULL, NULL, &d, NULL, &bg, NULL, NULL, NULL};
    CHECK_STATUS(fm_matmul_plan_v(ctx, t7, &o, &plan), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("bgradb");
    CHECK(plan == NULL);
    fm_context_destroy(ctx);
}

/* An FFT output whose elements share memory is refused like a matmul one. */
static void test_fft_self_overlapping_output(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    static double complex in[4 * 8], out[8];
    fm_device cpu = {FM_DEVICE_CPU, 0};
    int64_t shape[2] = {4, 8}, st0[2] = {0, 1};
    fm_tensor ti, to;
    fm_tensor_init(&ti, in, cpu, FM_C128, 2, shape, NULL);
    fm_tensor_init(&to, out, cpu, FM_C128, 2, shape, st0); /* all 4 rows on one row */
    fm_fft_options o;
    fm_fft_options_init(&o);
    fm_plan *plan = NULL;
    CHECK_STATUS(fm_fft_plan(ctx, &ti, &to, NULL, NULL, &o, &plan), FM_ERR_ALIAS);
    CHECK_ERROR_MENTIONS("out");
    CHECK_ERROR_MENTIONS("overlaps itself");
    CHECK(plan == NULL);
    fm_context_destroy(ctx);
}

/* zero strides describe huge inputs cheaply: a result no int64 counts is FM_ERR_TOO_LARGE naming the
 * shapes, not "do not broadcast" */
static void test_result_count_overflow(void)
{
    const int64_t sa[4] = {1LL << 40, 1, 1, 1}, sb[3] = {1LL << 30, 1, 1}, zero[4] = {0, 0, 0, 0};
    float x = 1.0f;
    fm_tensor a, b;
    CHECK_OK(fm_tensor_init(&a, &x, fm_test_cpu, FM_F32, 4, sa, zero));
    CHECK_OK(fm_tensor_init(&b, &x, fm_test_cpu, FM_F32, 3, sb, zero));
    int ndim = 0;
    int64_t shape[FM_MAX_NDIM];
    CHECK_STATUS(fm_matmul_output_shape(&a, &b, &ndim, shape), FM_ERR_TOO_LARGE);
    CHECK_ERROR_MENTIONS("64-bit");
    CHECK_ERROR_MENTIONS("(1099511627776, 1, 1, 1)");
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&a, &b};
    fm_tensor specs[FM_MATMUL_NSLOTS];
    unsigned written = 0;
    CHECK_STATUS(fm_output_specs(FM_OP_MATMUL, ts, FM_MATMUL_NSLOTS, NULL, specs, &written), FM_ERR_TOO_LARGE);
    /* (2^40, 1) @ (1, 2^40): each input fits, the result does not */
    const int64_t sl[2] = {1LL << 40, 1}, sr[2] = {1, 1LL << 40};
    CHECK_OK(fm_tensor_init(&a, &x, fm_test_cpu, FM_F32, 2, sl, zero));
    CHECK_OK(fm_tensor_init(&b, &x, fm_test_cpu, FM_F32, 2, sr, zero));
    CHECK_STATUS(fm_matmul_output_shape(&a, &b, &ndim, shape), FM_ERR_TOO_LARGE);
}

/* alpha and beta: finite numbers only, the same policy as the FFT chains' scale */
static void test_non_finite_factors(void)
{
    problem *p = problem_new();
    const double bad[] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; ++i) {
        p->o.alpha[0] = bad[i];
        CHECK_STATUS(try_plan(&p->ta, &p->tb, NULL, NULL, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("alpha");
        CHECK_ERROR_MENTIONS("finite");
        p->o.alpha[0] = 1.0;
        p->o.beta[0] = bad[i];
        CHECK_STATUS(try_plan(&p->ta, &p->tb, &p->tc, NULL, &p->td, NULL, &p->o), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("beta");
        p->o.beta[0] = 0.0;
    }
    CHECK_OK(try_plan(&p->ta, &p->tb, &p->tc, NULL, &p->td, NULL, &p->o));
    free(p);
}

/* wisdom load reads regular files only, and finds out before reading: a FIFO with no writer must
 * not block (ctest's timeout would catch a hang), /dev/zero must not be read forever */
static void test_wisdom_special_files(void)
{
    char dir[] = "/tmp/fm_wisdom_XXXXXX", fifo[64];
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    snprintf(fifo, sizeof fifo, "%s/pipe", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_STATUS(fm_context_wisdom_load(g_ctx, fifo), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("not a regular file");
    CHECK_STATUS(fm_context_wisdom_load(g_ctx, "/dev/zero"), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("not a regular file");
    CHECK_STATUS(fm_context_wisdom_load(g_ctx, dir), FM_ERR_INVALID_ARGUMENT);
    unlink(fifo);
    rmdir(dir);
}

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "fm_context_create failed: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_null_arguments);
    RUN_TEST(test_shapes);
    RUN_TEST(test_dtypes);
    RUN_TEST(test_bias);
    RUN_TEST(test_epilogue_and_aux);
    RUN_TEST(test_new_epilogues);
    RUN_TEST(test_execute_pointers);
    RUN_TEST(test_alias);
    RUN_TEST(test_self_overlapping_output);
    RUN_TEST(test_too_large);
    RUN_TEST(test_descriptor_ranges);
    RUN_TEST(test_devices);
    RUN_TEST(test_fp8_inputs);
    RUN_TEST(test_fft_self_overlapping_output);
    RUN_TEST(test_non_finite_factors);
    RUN_TEST(test_result_count_overflow);
    RUN_TEST(test_wisdom_special_files);
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
