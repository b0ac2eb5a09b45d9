/* test_matmul_dropout.c : the dropout matmul epilogue on the CPU (FM_EPILOGUE_DROPOUT, DDROPOUT).
 *
 * The reference is independent of the epilogue's code: the product in double (mmref.h), the
 * activation, and the mask recomputed from the RNG operation's raw 32-bit words (fm_rng with
 * FM_RNG_RAW, backends/cpu/philox_rng.c, itself checked against Random123's known answers in
 * test_rng_cpu.c) at the same seed and position: keep iff word >= round(p * 2^32). Every CPU
 * strategy, thread count and panel height must give the same bytes. */
#include "check.h"
#include "dropout_ref.h"
#include "mmref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static fm_context *g_ctx;

typedef struct dcase {
    fm_dtype dt;
    int nbatch; /* 0: 2-D */
    int64_t m, n, k;
    unsigned epi;
    double p;
    uint64_t seed;
    int64_t pos;
} dcase;

typedef struct dresult {
    test_operand d, aux;
} dresult;

/* One run of the case with the given options tweaks; a, b, bias shared. */
static fm_status run_once(const dcase *c, const test_operand *a, const test_operand *b, const test_operand *bias,
                          int strategy, int threads, int panel, dresult *r)
{
    int nd = c->nbatch ? 3 : 2;
    int64_t dshape[3] = {c->nbatch, c->m, c->n}, ashape[3] = {c->nbatch, c->m, fm_relu_mask_row_bytes(c->n)};
    const int64_t *ds = c->nbatch ? dshape : dshape + 1, *as = c->nbatch ? ashape : ashape + 1;
    operand_contig(&r->d, c->dt, nd, ds, NULL);
    memset(&r->aux, 0, sizeof r->aux);
    if (c->epi & FM_EPILOGUE_AUX) {
        operand_contig(&r->aux, FM_U8, nd, as, NULL);
    }
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = c->epi;
    o.dropout = c->p;
    o.execution = FM_EXECUTION_CPU;
    o.cpu_strategy = strategy;
    o.num_threads = threads;
    o.panel_rows = panel;
    const fm_tensor *t[FM_MATMUL_NSLOTS] = {&a->t, &b->t, NULL, bias ? &bias->t : NULL, &r->d.t,
                                            (c->epi & FM_EPILOGUE_AUX) ? &r->aux.t : NULL};
    fm_exec_args args;
    fm_exec_args_init(&args);
    args.ints[0] = c->pos;
    args.ints[3] = (int64_t)c->seed;
    return fm_run(g_ctx, FM_OP_MATMUL, t, FM_MATMUL_NSLOTS, &o, &args, NULL);
}

/* d and aux against the float64 reference with the raw words' mask */
static void check_against_reference(const dcase *c, const test_operand *a, const test_operand *b,
                                    const test_operand *bias, const dresult *r, const char *label)
{
    const int64_t nb = c->nbatch ? c->nbatch : 1, numel = nb * c->m * c->n, rb = fm_relu_mask_row_bytes(c->n);
    uint32_t *w = dropout_raw_words(g_ctx, c->seed, c->pos, numel);
    const uint64_t thr = dropout_threshold(c->p);
    const double scale = 1.0 / (1.0 - c->p), tol = 8.0 * (double)(c->k + 2) * dtype_eps(c->dt);
    int64_t bad = 0, badmask = 0;
    for (int64_t bi = 0; bi < nb; bi++)
        for (int64_t i = 0; i < c->m; i++)
            for (int64_t j = 0; j < c->n; j++) {
                double x = 0;
                for (int64_t q = 0; q < c->k; q++)
                    x += creal(elem_get(a->t.data, c->dt, (bi * c->m + i) * c->k + q)) *
                         creal(elem_get(b->t.data, c->dt, q * c->n + j));
                if (bias)
                    x += creal(elem_get(bias->t.data, c->dt, j));
                const int pre_pos = x > 0;
                if (c->epi & FM_EPILOGUE_RELU)
                    x = x > 0 ? x : 0;
                const int64_t e = (bi * c->m + i) * c->n + j;
                const int keep = (uint64_t)w[e] >= thr;
                const double want = keep ? x * scale : 0.0;
                const double got = creal(elem_get(r->d.t.data, c->dt, e));
                if (!(fabs(got - want) <= tol * (1.0 + fabs(want))) || (!keep && got != 0.0))
                    bad++;
                if (c->epi & FM_EPILOGUE_AUX) {
                    const unsigned char byte = ((const unsigned char *)r->aux.t.data)[(bi * c->m + i) * rb + j / 8];
                    const int bit = (byte >> (j % 8)) & 1;
                    const int want_bit = (c->epi & FM_EPILOGUE_RELU) ? (keep && pre_pos) : keep;
                    badmask += bit != want_bit;
                }
            }
    CHECK_MSG(bad == 0, "%s: %lld of %lld elements differ from the reference", label, (long long)bad,
              (long long)numel);
    CHECK_MSG(badmask == 0, "%s: %lld mask bits wrong", label, (long long)badmask);
    free(w);
}

static void make_inputs(const dcase *c, test_operand *a, test_operand *b, test_operand *bias, test_rng *rng)
{
    int64_t as[3] = {c->nbatch, c->m, c->k}, bs[2] = {c->k, c->n}, vs[1] = {c->n};
    operand_contig(a, c->dt, c->nbatch ? 3 : 2, c->nbatch ? as : as + 1, rng);
    operand_contig(b, c->dt, 2, bs, rng);
    operand_contig(bias, c->dt, 1, vs, rng);
}

static int same_bytes(const test_operand *x, const test_operand *y)
{
    if (!x->buf || !y->buf)
        return x->buf == y->buf;
    return memcmp(x->t.data, y->t.data, (size_t)fm_tensor_numel(&x->t) * fm_dtype_size(x->t.dtype)) == 0;
}

static void sweep_case(const dcase *c)
{
    char label[160], en[96];
    fm_epilogue_format(c->epi, en, sizeof en);
    test_rng rng = {0x1234567 + (uint64_t)c->m * 31 + (uint64_t)c->n};
    test_operand a, b, bias;
    make_inputs(c, &a, &b, &bias, &rng);
    const test_operand *bp = (c->epi & FM_EPILOGUE_BIAS) ? &bias : NULL;
    dresult base;
    snprintf(label, sizeof label, "%s %s %lldx%lldx%lld batch %d p=%g", fm_dtype_name(c->dt), en, (long long)c->m,
             (long long)c->n, (long long)c->k, c->nbatch, c->p);
    CHECK_OK(run_once(c, &a, &b, bp, 0, 0, 0, &base));
    check_against_reference(c, &a, &b, bp, &base, label);
    /* every strategy, thread count and panel height: the reference's values and the same mask
     * bytes (the dropped zeros are the reference's); the own kernel the same D bytes too (the
     * GEMMs, and OpenBLAS's for other panel heights, differ in rounding) */
    static const int strategies[] = {FM_CPU_STRATEGY_TILES, FM_CPU_STRATEGY_BLAS_THREADS, FM_CPU_STRATEGY_KERNEL};
    static const int threads[] = {1, 2, 7};
    static const int panels[] = {0, 3, 16};
    for (int si = 0; si < 3; si++) {
        dresult first = {0};
        for (int ti = 0; ti < 3; ti++)
            for (int pi = 0; pi < 3; pi++) {
                if (strategies[si] == FM_CPU_STRATEGY_BLAS_THREADS && pi)
                    continue; /* no panels there */
                dresult r;
                char lab[220];
                snprintf(lab, sizeof lab, "%s strategy %d threads %d panel %d", label, strategies[si], threads[ti],
                         panels[pi]);
                fm_status s = run_once(c, &a, &b, bp, strategies[si], threads[ti], panels[pi], &r);
                CHECK_MSG(s == FM_OK, "%s", lab);
                if (s == FM_OK) {
                    check_against_reference(c, &a, &b, bp, &r, lab);
                    CHECK_MSG(same_bytes(&r.aux, &base.aux), "%s: other mask bytes", lab);
                    if (!first.d.buf && strategies[si] == FM_CPU_STRATEGY_KERNEL) {
                        first = r;
                        continue;
                    }
                    if (strategies[si] == FM_CPU_STRATEGY_KERNEL) /* OpenBLAS's edge kernels round otherwise */
                        CHECK_MSG(same_bytes(&r.d, &first.d), "%s: other D bytes than threads %d panel 0", lab,
                                  threads[0]);
                }
                operand_free(&r.d);
                operand_free(&r.aux);
            }
        operand_free(&first.d);
        operand_free(&first.aux);
    }
    operand_free(&base.d);
    operand_free(&base.aux);
    operand_free(&a);
    operand_free(&b);
    operand_free(&bias);
}

static void test_forward(void)
{
    const unsigned R = FM_EPILOGUE_RELU, D = FM_EPILOGUE_DROPOUT, B = FM_EPILOGUE_BIAS, X = FM_EPILOGUE_AUX;
    const unsigned epis[] = {D, R | D, B | R | D, B | R | D | X, D | X, B | D};
    const double ps[] = {0.0, 0.3, 0.9};
    /* the last: rows longer than a batch of words (FM_CPU_DROP_BLOCKS), which make their own */
    const int64_t shapes[][4] = {{0, 37, 131, 19}, {0, 64, 257, 40}, {3, 17, 33, 9}, {0, 1, 300, 7}, {0, 3, 4133, 5}};
    int n = 0;
    for (int dt = 0; dt < 2; dt++)
        for (size_t ei = 0; ei < sizeof epis / sizeof epis[0]; ei++)
            for (int pi = 0; pi < 3; pi++, n++) {
                const int64_t *sh = shapes[n % 5];
                dcase c = {dt ? FM_F64 : FM_F32, (int)sh[0], sh[1], sh[2], sh[3], epis[ei], ps[pi],
                           0x9E3779B97F4A7C15ull + (uint64_t)n, 12345 + 7 * n};
                sweep_case(&c);
            }
}

/* keep fraction within binomial bounds, and the kept values are exactly x * (1/(1-p) in f32) */
static void test_keep_fraction(void)
{
    const double ps[] = {0.1, 0.5, 0.75};
    for (int i = 0; i < 3; i++) {
        dcase c = {FM_F32, 0, 512, 512, 8, FM_EPILOGUE_DROPOUT | FM_EPILOGUE_AUX, ps[i], 42 + (uint64_t)i, 3};
        test_rng rng = {99};
        test_operand a, b, bias;
        make_inputs(&c, &a, &b, &bias, &rng);
        dresult r;
        CHECK_OK(run_once(&c, &a, &b, NULL, 0, 0, 0, &r));
        int64_t kept = 0, nel = c.m * c.n;
        const unsigned char *mask = r.aux.t.data;
        for (int64_t e = 0; e < c.m * fm_relu_mask_row_bytes(c.n); e++)
            kept += __builtin_popcount(mask[e]);
        const double mean = (double)nel * (1.0 - c.p), sd = sqrt((double)nel * c.p * (1.0 - c.p));
        CHECK_MSG(fabs((double)kept - mean) < 6.0 * sd, "p=%g: kept %lld of %lld, expected %.0f +- %.0f", c.p,
                  (long long)kept, (long long)nel, mean, 6 * sd);
        operand_free(&r.d);
        operand_free(&r.aux);
        operand_free(&a);
        operand_free(&b);
        operand_free(&bias);
    }
}

/* relu+dropout+aux forward, then ddropout with that mask: the whole backward (relu' * keep / (1-p));
 * ddropout+bgrad sums it */
static void test_backward(void)
{
    for (int dt = 0; dt < 2; dt++) {
        const fm_dtype t = dt ? FM_F64 : FM_F32;
        const int64_t m = 45, n = 70, k = 13;
        const double p = 0.4;
        dcase fwd = {t, 0, m, n, k, FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT | FM_EPILOGUE_AUX, p, 7, 1001};
        test_rng rng = {5 + (uint64_t)dt};
        test_operand a, b, bias, ga, gb;
        make_inputs(&fwd, &a, &b, &bias, &rng);
        dresult f;
        CHECK_OK(run_once(&fwd, &a, &b, NULL, 0, 0, 0, &f));
        int64_t gas[2] = {m, k}, gbs[2] = {k, n}, vs[1] = {n};
        operand_contig(&ga, t, 2, gas, &rng);
        operand_contig(&gb, t, 2, gbs, &rng);
        for (int with_bgrad = 0; with_bgrad < 2; with_bgrad++) {
            test_operand d, bg;
            int64_t ds[2] = {m, n};
            operand_contig(&d, t, 2, ds, NULL);
            operand_contig(&bg, t, 1, vs, NULL);
            fm_matmul_options o;
            fm_matmul_options_init(&o);
            o.epilogue = FM_EPILOGUE_DDROPOUT | (with_bgrad ? FM_EPILOGUE_BGRAD : 0);
            o.dropout = p;
            const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&ga.t, &gb.t, NULL, NULL, &d.t, &f.aux.t,
                                                     with_bgrad ? &bg.t : NULL};
            CHECK_OK(fm_matmul_v(g_ctx, ts, &o, NULL));
            const double scale = 1.0 / (1.0 - p), tol = 8.0 * (double)(k + 2) * dtype_eps(t);
            int64_t bad = 0, badsum = 0;
            const int64_t rb = fm_relu_mask_row_bytes(n);
            for (int64_t j = 0; j < n; j++) {
                double sum = 0;
                for (int64_t i = 0; i < m; i++) {
                    double x = 0;
                    for (int64_t q = 0; q < k; q++)
                        x += creal(elem_get(ga.t.data, t, i * k + q)) * creal(elem_get(gb.t.data, t, q * n + j));
                    const int bit = (((const unsigned char *)f.aux.t.data)[i * rb + j / 8] >> (j % 8)) & 1;
                    const double want = bit ? x * scale : 0.0;
                    sum += want;
                    const double got = creal(elem_get(d.t.data, t, i * n + j));
                    bad += !(fabs(got - want) <= tol * (1.0 + fabs(want)));
                }
                if (with_bgrad)
                    badsum += !(fabs(creal(elem_get(bg.t.data, t, j)) - sum) <= tol * (double)m * (1.0 + fabs(sum)));
            }
            CHECK_MSG(bad == 0, "ddropout%s %s: %lld elements wrong", with_bgrad ? "+bgrad" : "", fm_dtype_name(t),
                      (long long)bad);
            CHECK_MSG(badsum == 0, "ddropout+bgrad %s: %lld sums wrong", fm_dtype_name(t), (long long)badsum);
            operand_free(&d);
            operand_free(&bg);
        }
        operand_free(&f.d);
        operand_free(&f.aux);
        operand_free(&a);
        operand_free(&b);
        operand_free(&bias);
        operand_free(&ga);
        operand_free(&gb);
    }
}

/* consecutive calls at position, position + numel(D) use consecutive words: two calls on halves
 * of a batch equal one call on the whole batch */
static void test_position_advances(void)
{
    dcase whole = {FM_F32, 2, 20, 24, 5, FM_EPILOGUE_DROPOUT, 0.5, 77, 9};
    test_rng rng = {3};
    test_operand a, b, bias;
    make_inputs(&whole, &a, &b, &bias, &rng);
    dresult w;
    CHECK_OK(run_once(&whole, &a, &b, NULL, 0, 0, 0, &w));
    for (int h = 0; h < 2; h++) {
        dcase half = {FM_F32, 0, 20, 24, 5, FM_EPILOGUE_DROPOUT, 0.5, 77, 9 + h * 20 * 24};
        test_operand ah = a;
        int64_t as[2] = {20, 5};
        fm_tensor_init(&ah.t, (float *)a.t.data + h * 20 * 5, fm_test_cpu, FM_F32, 2, as, NULL);
        dresult r;
        CHECK_OK(run_once(&half, &ah, &b, NULL, 0, 0, 0, &r));
        CHECK(memcmp(r.d.t.data, (float *)w.d.t.data + h * 20 * 24, sizeof(float) * 20 * 24) == 0);
        operand_free(&r.d);
    }
    operand_free(&w.d);
    operand_free(&a);
    operand_free(&b);
    operand_free(&bias);
}

static void test_bad_input(void)
{
    float a[4] = {1, 2, 3, 4}, d[4];
    unsigned char aux[32];
    int64_t s2[2] = {2, 2}, sa[2] = {2, 16};
    fm_tensor ta, td, tx;
    fm_tensor_init(&ta, a, fm_test_cpu, FM_F32, 2, s2, NULL);
    fm_tensor_init(&td, d, fm_test_cpu, FM_F32, 2, s2, NULL);
    fm_tensor_init(&tx, aux, fm_test_cpu, FM_U8, 2, sa, NULL);
    fm_matmul_options o;
    const double bad_p[] = {-0.1, 1.0, 1.5, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 6; i++) {
        fm_matmul_options_init(&o);
        o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT;
        o.dropout = bad_p[i];
        CHECK_STATUS(fm_matmul(g_ctx, &ta, &ta, NULL, NULL, &td, NULL, &o, NULL), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("dropout");
        CHECK_ERROR_MENTIONS("0 <= p < 1");
        o.epilogue = FM_EPILOGUE_DDROPOUT;
        CHECK_STATUS(fm_matmul(g_ctx, &ta, &ta, NULL, NULL, &td, &tx, &o, NULL), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("dropout");
    }
    /* a probability without dropout in the chain */
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_RELU;
    o.dropout = 0.5;
    CHECK_STATUS(fm_matmul(g_ctx, &ta, &ta, NULL, NULL, &td, NULL, &o, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("no dropout");
    /* chains without a meaning */
    unsigned e;
    CHECK_STATUS(fm_epilogue_parse("gelu+dropout+aux", &e), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("dropout+aux");
    CHECK_STATUS(fm_epilogue_parse("ddropout+relu", &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_epilogue_parse("ddropout+dropout", &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_epilogue_parse("drelu+ddropout", &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_epilogue_parse("ddropout+aux", &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_OK(fm_epilogue_parse("RELU_DROPOUT_AUX_BIAS", &e));
    CHECK(e == (FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT | FM_EPILOGUE_AUX | FM_EPILOGUE_BIAS));
    char buf[64];
    CHECK_OK(fm_epilogue_format(e, buf, sizeof buf));
    CHECK(strcmp(buf, "bias+relu+dropout+aux") == 0);
    CHECK_OK(fm_epilogue_parse("ddropout_bgrad", &e));
    CHECK(e == (FM_EPILOGUE_DDROPOUT | FM_EPILOGUE_BGRAD));
    /* complex data has no dropout */
    float ca[8] = {0};
    fm_tensor tc, tcd;
    fm_tensor_init(&tc, ca, fm_test_cpu, FM_C64, 2, s2, NULL);
    fm_tensor_init(&tcd, ca, fm_test_cpu, FM_C64, 2, s2, NULL);
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_DROPOUT;
    o.dropout = 0.5;
    CHECK_STATUS(fm_matmul(g_ctx, &tc, &tc, NULL, NULL, &tcd, NULL, &o, NULL), FM_ERR_NOT_SUPPORTED);
    /* dropout's aux is the mask: u8 */
    float fx[8];
    fm_tensor tfx;
    fm_tensor_init(&tfx, fx, fm_test_cpu, FM_F32, 2, s2, NULL);
    o.epilogue = FM_EPILOGUE_DROPOUT | FM_EPILOGUE_AUX;
    fm_tensor_init(&ta, a, fm_test_cpu, FM_F32, 2, s2, NULL);
    CHECK_STATUS(fm_matmul(g_ctx, &ta, &ta, NULL, NULL, &td, &tfx, &o, NULL), FM_ERR_DTYPE);
    /* per-call arguments dropout does not read: reals (ints[4..] too where FM_EXEC_MAX_SCALARS > 4) */
    fm_plan *plan = NULL;
    o.epilogue = FM_EPILOGUE_DROPOUT;
    CHECK_OK(fm_matmul_plan(g_ctx, &ta, &ta, NULL, NULL, &td, NULL, &o, &plan));
    fm_exec_args args;
    fm_exec_args_init(&args);
    args.reals[0] = 1;
    void *ptrs[FM_MATMUL_NSLOTS] = {a, a, NULL, NULL, d};
    CHECK_STATUS(fm_plan_execute_args(plan, ptrs, FM_MATMUL_NSLOTS, &args, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("reals[0]");
    /* the position as the RNG family takes it: >= 0, and every word of d's below 2^63 (d has 4) */
    fm_exec_args_init(&args);
    args.ints[0] = -1;
    CHECK_STATUS(fm_plan_execute_args(plan, ptrs, FM_MATMUL_NSLOTS, &args, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("dropout position args.ints[0] = -1, expected >= 0");
    args.ints[0] = INT64_MAX - 3;
    CHECK_STATUS(fm_plan_execute_args(plan, ptrs, FM_MATMUL_NSLOTS, &args, NULL), FM_ERR_TOO_LARGE);
    CHECK_ERROR_MENTIONS("passes 2^63 - 1");
    args.ints[0] = INT64_MAX - 4; /* the last word is 2^63 - 2 */
    CHECK_OK(fm_plan_execute_args(plan, ptrs, FM_MATMUL_NSLOTS, &args, NULL));
    fm_plan_release(plan);
}

/* the plan does not depend on seed or position; p is part of the key */
static void test_plan_key(void)
{
    float a[4] = {1, 2, 3, 4}, d[4];
    int64_t s2[2] = {2, 2};
    fm_tensor ta, td;
    fm_tensor_init(&ta, a, fm_test_cpu, FM_F32, 2, s2, NULL);
    fm_tensor_init(&td, d, fm_test_cpu, FM_F32, 2, s2, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT;
    o.dropout = 0.25;
    fm_plan *p1 = NULL, *p2 = NULL, *p3 = NULL;
    CHECK_OK(fm_matmul_plan(g_ctx, &ta, &ta, NULL, NULL, &td, NULL, &o, &p1));
    CHECK_OK(fm_matmul_plan(g_ctx, &ta, &ta, NULL, NULL, &td, NULL, &o, &p2));
    o.dropout = 0.5;
    CHECK_OK(fm_matmul_plan(g_ctx, &ta, &ta, NULL, NULL, &td, NULL, &o, &p3));
    CHECK(p1 == p2);
    CHECK(p1 != p3);
    CHECK(p1 && strstr(fm_plan_describe(p1), "dropout") != NULL);
    fm_plan_release(p1);
    fm_plan_release(p2);
    fm_plan_release(p3);
}

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "fm_context_create failed: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_forward);
    RUN_TEST(test_keep_fraction);
    RUN_TEST(test_backward);
    RUN_TEST(test_position_advances);
    RUN_TEST(test_bad_input);
    RUN_TEST(test_plan_key);
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
