/* test_matmul_cpu.c : matmul results on the cpu against a naive double-precision reference.
 *
 * Tolerance (as LAPACK's tests): |D - ref| <= c * (k + 4) * eps * (|alpha| |A||B| + |beta||C| + |bias| + |ref|),
 * elementwise, c = 2 (real) or 4 (complex), times 1.2 for gelu.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "mmref.h"

#include <stdio.h>

static fm_context *g_ctx;

enum { BIAS_NONE = 0, BIAS_N, BIAS_BATCH_N };
enum { C_NONE = 0, C_FULL, C_MATRIX_ONLY, C_ROW_BCAST };

typedef struct {
    fm_dtype dt;
    int nba, nbb;        /* batch dims of a and b */
    int64_t ba[3], bb[3];
    int64_t m, n, k;
    test_layout la, lb, lc, ld;
    int c_kind;          /* C_* */
    int bias_kind;       /* BIAS_* */
    unsigned epilogue;
    double complex alpha, beta;
    int stateless;       /* fm_matmul instead of plan + execute */
    int b_zero_batch_stride; /* b's batch dims get stride 0 (broadcast through strides) */
    int aux_rowpad;      /* gelu aux with row stride n + 3 */
    int threads;         /* fm_matmul_options.num_threads (0: the context's) */
    int panel_rows;      /* fm_matmul_options.panel_rows (0: heuristic) */
} mm_case;

static mm_case base_case(fm_dtype dt, int64_t m, int64_t n, int64_t k)
{
    mm_case c;
    memset(&c, 0, sizeof c);
    c.dt = dt;
    c.m = m;
    c.n = n;
    c.k = k;
    c.alpha = 1.0;
    c.beta = 0.0;
    return c;
}

static void case_label(const mm_case *c, char *buf, size_t size)
{
    char ep[64] = "?";
    fm_epilogue_format(c->epilogue, ep, sizeof ep);
    int o = snprintf(buf, size, "%s ", fm_dtype_name(c->dt));
    for (int i = 0; i < c->nba; ++i) o += snprintf(buf + o, size - (size_t)o, "%lldx", (long long)c->ba[i]);
    o += snprintf(buf + o, size - (size_t)o, "[%lldx%lld] @ ", (long long)c->m, (long long)c->k);
    for (int i = 0; i < c->nbb; ++i) o += snprintf(buf + o, size - (size_t)o, "%lldx", (long long)c->bb[i]);
    snprintf(buf + o, size - (size_t)o,
             "[%lldx%lld]%s a=%s b=%s c=%s/%d d=%s bias=%d ep=%s alpha=(%g,%g) beta=(%g,%g)%s threads=%d panel_rows=%d",
             (long long)c->k,
             (long long)c->n, c->b_zero_batch_stride ? "(stride-0 batch)" : "", test_layout_names[c->la],
             test_layout_names[c->lb], test_layout_names[c->lc], c->c_kind, test_layout_names[c->ld], c->bias_kind,
             ep, creal(c->alpha), cimag(c->alpha), creal(c->beta), cimag(c->beta), c->stateless ? " fm_matmul" : "",
             c->threads, c->panel_rows);
}

/* Run one case end to end; every problem found is one CHECK failure naming the case. */
static void run_case(const mm_case *cs)
{
    char label[512];
    case_label(cs, label, sizeof label);
    test_rng rng = {0x9E3779B97F4A7C15ULL ^ (uint64_t)(cs->m * 131 + cs->n * 17 + cs->k + cs->dt)};

    /* shapes */
    int64_t sa[FM_MAX_NDIM], sb[FM_MAX_NDIM], sd[FM_MAX_NDIM];
    int nbd = cs->nba > cs->nbb ? cs->nba : cs->nbb;
    for (int i = 0; i < cs->nba; ++i) sa[i] = cs->ba[i];
    for (int i = 0; i < cs->nbb; ++i) sb[i] = cs->bb[i];
    for (int i = 0; i < nbd; ++i) {
        int ia = i - (nbd - cs->nba), ib = i - (nbd - cs->nbb);
        int64_t ea = ia >= 0 ? cs->ba[ia] : 1, eb = ib >= 0 ? cs->bb[ib] : 1;
        sd[i] = ea == 1 ? eb : ea;
    }
    sa[cs->nba] = cs->m;
    sa[cs->nba + 1] = cs->k;
    sb[cs->nbb] = cs->k;
    sb[cs->nbb + 1] = cs->n;
    sd[nbd] = cs->m;
    sd[nbd + 1] = cs->n;

    test_operand A, B, C, D, BIAS, AUX;
    memset(&C, 0, sizeof C);
    memset(&BIAS, 0, sizeof BIAS);
    memset(&AUX, 0, sizeof AUX);
    operand_make(&A, cs->dt, cs->nba + 2, sa, cs->la, &rng);
    operand_make(&B, cs->dt, cs->nbb + 2, sb, cs->lb, &rng);
    if (cs->b_zero_batch_stride)
        for (int i = 0; i < cs->nbb; ++i) B.t.strides[i] = 0;
    operand_make(&D, cs->dt, nbd + 2, sd, cs->ld, NULL);
    if (cs->c_kind == C_FULL) {
        operand_make(&C, cs->dt, nbd + 2, sd, cs->lc, &rng);
    } else if (cs->c_kind == C_MATRIX_ONLY) {
        operand_make(&C, cs->dt, 2, sd + nbd, cs->lc, &rng);
    } else if (cs->c_kind == C_ROW_BCAST) { /* one row, repeated through a zero row stride */
        operand_make(&C, cs->dt, nbd + 2, sd, LAY_CONTIG, &rng);
        C.t.strides[nbd] = 0;
        for (int i = nbd - 1; i >= 0; --i) C.t.strides[i] = 0;
    }
    if (cs->bias_kind == BIAS_N) {
        operand_contig(&BIAS, cs->dt, 1, &cs->n, &rng);
    } else if (cs->bias_kind == BIAS_BATCH_N) {
        int64_t sbias[FM_MAX_NDIM];
        for (int i = 0; i < nbd; ++i) sbias[i] = sd[i];
        sbias[nbd] = cs->n;
        operand_contig(&BIAS, cs->dt, nbd + 1, sbias, &rng);
    }
    int relu_aux = (cs->epilogue & FM_EPILOGUE_AUX) && (cs->epilogue & FM_EPILOGUE_RELU);
    int gelu_aux = (cs->epilogue & FM_EPILOGUE_AUX) && (cs->epilogue & FM_EPILOGUE_GELU);
    int64_t rb = fm_relu_mask_row_bytes(cs->n);
    if (relu_aux) {
        int64_t saux[FM_MAX_NDIM];
        memcpy(saux, sd, sizeof saux);
        saux[nbd + 1] = rb;
        operand_contig(&AUX, FM_U8, nbd + 2, saux, NULL);
    } else if (gelu_aux) {
        operand_make(&AUX, cs->dt, nbd + 2, sd, cs->aux_rowpad ? LAY_ROWPAD : LAY_CONTIG, NULL);
    }

    /* output shape query agrees with ours */
    int ndo = -1;
    int64_t so[FM_MAX_NDIM] = {0};
    fm_status s = fm_matmul_output_shape(&A.t, &B.t, &ndo, so);
    int same = s == FM_OK && ndo == nbd + 2;
    for (int i = 0; same && i < ndo; ++i) same = so[i] == sd[i];
    CHECK_MSG(same, "%s: fm_matmul_output_shape -> %s, ndim %d", label, fm_status_name(s), ndo);

    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.alpha[0] = creal(cs->alpha);
    o.alpha[1] = cimag(cs->alpha);
    o.beta[0] = creal(cs->beta);
    o.beta[1] = cimag(cs->beta);
    o.epilogue = cs->epilogue;
    o.num_threads = cs->threads;
    o.panel_rows = cs->panel_rows;
    const fm_tensor *pc = cs->c_kind ? &C.t : NULL, *pbias = cs->bias_kind ? &BIAS.t : NULL;
    const fm_tensor *paux = (relu_aux || gelu_aux) ? &AUX.t : NULL;

    if (cs->stateless) {
        s = fm_matmul(g_ctx, &A.t, &B.t, pc, pbias, &D.t, paux, &o, NULL);
        CHECK_MSG(s == FM_OK, "%s: fm_matmul -> %s", label, fm_status_name(s));
    } else {
        fm_plan *plan = NULL;
        s = fm_matmul_plan(g_ctx, &A.t, &B.t, pc, pbias, &D.t, paux, &o, &plan);
        CHECK_MSG(s == FM_OK && plan != NULL, "%s: fm_matmul_plan -> %s", label, fm_status_name(s));
        if (plan) {
            void *ptrs[FM_MATMUL_NSLOTS] = {A.t.data, B.t.data, pc ? C.t.data : NULL, pbias ? BIAS.t.data : NULL,
                                            D.t.data, paux ? AUX.t.data : NULL};
            s = fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL);
            CHECK_MSG(s == FM_OK, "%s: fm_plan_execute -> %s (%s)", label, fm_status_name(s),
                      fm_plan_describe(plan));
            fm_plan_release(plan);
        }
    }

    if (s == FM_OK) {
        mm_ref r;
        mm_reference(&r, &A.t, &B.t, pc, pbias, &D.t, cs->alpha, cs->beta, cs->epilogue);
        int64_t first;
        double complex g = 0, w = 0;
        int64_t bad = mm_compare(&D.t, &r, r.post, &first, &g, &w);
        CHECK_MSG(bad == 0, "%s: %lld of %lld wrong, first flat index %lld: got (%.9g,%.9g) want (%.9g,%.9g) tol %.3g",
                  label, (long long)bad, (long long)(r.batch * r.m * r.n), (long long)first, creal(g), cimag(g),
                  creal(w), cimag(w), first >= 0 ? r.tol[first] : 0.0);
        int64_t clob = operand_count_clobbered(&D);
        CHECK_MSG(clob == 0, "%s: %lld elements outside the D view were written", label, (long long)clob);

        if (gelu_aux) {
            bad = mm_compare(&AUX.t, &r, r.pre, &first, &g, &w);
            CHECK_MSG(bad == 0, "%s: gelu aux: %lld wrong, first %lld: got %.9g want pre-activation %.9g", label,
                      (long long)bad, (long long)first, creal(g), creal(w));
            clob = operand_count_clobbered(&AUX);
            CHECK_MSG(clob == 0, "%s: %lld elements of the aux row padding were written", label, (long long)clob);
        }
        if (relu_aux) {
            int64_t badbits = 0, firstbit = -1, checked = 0;
            const uint8_t *mask = (const uint8_t *)AUX.t.data;
            for (int64_t bt = 0; bt < r.batch; ++bt)
                for (int64_t i = 0; i < r.m; ++i)
                    for (int64_t j = 0; j < r.n; ++j) {
                        size_t e = (size_t)((bt * r.m + i) * r.n + j);
                        double pre = creal(r.pre[e]);
                        if (fabs(pre) <= r.tol[e]) continue; /* sign not decidable at this precision */
                        int bit = (mask[(bt * r.m + i) * rb + j / 8] >> (j % 8)) & 1;
                        ++checked;
                        if (bit != (pre > 0)) {
                            if (badbits++ == 0) firstbit = (int64_t)e;
                        }
                    }
            CHECK_MSG(badbits == 0, "%s: relu mask: %lld of %lld bits wrong, first at flat index %lld (pre %.9g)",
                      label, (long long)badbits, (long long)checked, (long long)firstbit,
                      firstbit >= 0 ? creal(r.pre[firstbit]) : 0.0);
            CHECK_MSG(checked > 0 || r.batch * r.m * r.n == 0, "%s: no mask bit was checked", label);
        }
        mm_ref_free(&r);
    }
    operand_free(&A);
    operand_free(&B);
    operand_free(&C);
    operand_free(&D);
    operand_free(&BIAS);
    operand_free(&AUX);
}

static const fm_dtype all_dtypes[] = {FM_F32, FM_F64, FM_C64, FM_C128};
static const fm_dtype real_dtypes[] = {FM_F32, FM_F64};

static void test_sizes(void)
{
    static const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {5, 3, 7}, {64, 64, 64}, {257, 129, 65}, {1, 300, 2},
                                       {300, 1, 3}, {2, 2, 1000}};
    for (int d = 0; d < 4; ++d)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
            mm_case c = base_case(all_dtypes[d], sizes[i][0], sizes[i][1], sizes[i][2]);
            run_case(&c);
            c.stateless = 1;
            run_case(&c);
        }
}

static void test_layouts(void)
{
    const test_layout lays[] = {LAY_CONTIG, LAY_TRANS, LAY_STRIDED, LAY_NEGROW, LAY_NEGBOTH, LAY_ROWPAD};
    const int nl = (int)(sizeof lays / sizeof lays[0]);
    for (int d = 0; d < 4; ++d) {
        for (int i = 0; i < nl; ++i)
            for (int j = 0; j < nl; ++j) {
                mm_case c = base_case(all_dtypes[d], 13, 11, 9);
                c.la = lays[i];
                c.lb = lays[j];
                run_case(&c);
                c.panel_rows = 4; /* several row panels, offsets into every layout */
                c.threads = 3;
                c.ld = lays[(i + j) % nl];
                run_case(&c);
            }
        for (int i = 0; i < nl; ++i) { /* output and C layouts */
            mm_case c = base_case(all_dtypes[d], 21, 10, 6);
            c.ld = lays[i];
            run_case(&c);
            c.c_kind = C_FULL;
            c.lc = lays[(i + 2) % nl];
            c.beta = 0.5;
            c.la = lays[(i + 1) % nl];
            run_case(&c);
        }
        /* everything transposed / reversed at a size that takes the blocked paths */
        mm_case c = base_case(all_dtypes[d], 70, 90, 80);
        c.la = LAY_TRANS;
        c.lb = LAY_NEGROW;
        c.ld = LAY_STRIDED;
        run_case(&c);
        c.la = LAY_NEGBOTH;
        c.lb = LAY_TRANS;
        c.ld = LAY_TRANS;
        c.bias_kind = BIAS_N;
        c.epilogue = FM_EPILOGUE_BIAS;
        run_case(&c);
    }
}

static void test_batched(void)
{
    for (int d = 0; d < 4; ++d) {
        mm_case c = base_case(all_dtypes[d], 6, 5, 4);
        c.nba = c.nbb = 2;
        c.ba[0] = c.bb[0] = 2;
        c.ba[1] = c.bb[1] = 3;
        run_case(&c);
        c.la = LAY_TRANS; /* batched transposed views */
        c.lb = LAY_NEGROW;
        c.ld = LAY_STRIDED;
        run_case(&c);

        c = base_case(all_dtypes[d], 6, 5, 4); /* broadcast (2,1) x (3) -> (2,3) */
        c.nba = 2;
        c.ba[0] = 2;
        c.ba[1] = 1;
        c.nbb = 1;
        c.bb[0] = 3;
        run_case(&c);
        c.stateless = 1;
        run_case(&c);

        c = base_case(all_dtypes[d], 9, 7, 5); /* 2-D a with batched b */
        c.nbb = 1;
        c.bb[0] = 4;
        run_case(&c);
        c.nba = 1; /* batched a with 2-D b */
        c.ba[0] = 4;
        c.nbb = 0;
        run_case(&c);

        c = base_case(all_dtypes[d], 9, 7, 5); /* stride-0 batch of b */
        c.nba = c.nbb = 1;
        c.ba[0] = c.bb[0] = 4;
        c.b_zero_batch_stride = 1;
        run_case(&c);

        c = base_case(all_dtypes[d], 40, 33, 20); /* batched with C broadcast and bias per batch */
        c.nba = c.nbb = 1;
        c.ba[0] = c.bb[0] = 3;
        c.c_kind = C_MATRIX_ONLY;
        c.beta = 2.0;
        c.bias_kind = BIAS_BATCH_N;
        c.epilogue = FM_EPILOGUE_BIAS;
        run_case(&c);
    }
}

static void test_epilogues(void)
{
    const unsigned B = FM_EPILOGUE_BIAS, R = FM_EPILOGUE_RELU, G = FM_EPILOGUE_GELU, X = FM_EPILOGUE_AUX;
    const unsigned eps[] = {0, R, G, B, B | R, B | G, R | X, G | X, B | R | X, B | G | X};
    static const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {64, 64, 64}, {257, 129, 65}, {17, 200, 33}};
    for (int d = 0; d < 2; ++d)
        for (size_t e = 0; e < sizeof eps / sizeof eps[0]; ++e) {
            for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
                mm_case c = base_case(real_dtypes[d], sizes[i][0], sizes[i][1], sizes[i][2]);
                c.epilogue = eps[e];
                c.bias_kind = (eps[e] & B) ? BIAS_N : BIAS_NONE;
                run_case(&c);
            }
            /* batched, per-batch bias, C, alpha, gelu aux with padded rows, strided inputs */
            mm_case c = base_case(real_dtypes[d], 19, 150, 23);
            c.nba = 2;
            c.ba[0] = 2;
            c.ba[1] = 1;
            c.nbb = 1;
            c.bb[0] = 3;
            c.epilogue = eps[e];
            c.bias_kind = (eps[e] & B) ? BIAS_BATCH_N : BIAS_NONE;
            c.c_kind = C_FULL;
            c.alpha = 0.75;
            c.beta = -1.5;
            c.la = LAY_TRANS;
            c.lb = LAY_STRIDED;
            c.ld = LAY_NEGROW;
            c.aux_rowpad = 1;
            run_case(&c);
            c.stateless = 1;
            run_case(&c);
        }
    /* complex: bias only (activations are rejected for complex, see test_bad_input) */
    for (int d = 2; d < 4; ++d) {
        mm_case c = base_case(all_dtypes[d], 30, 20, 10);
        c.epilogue = B;
        c.bias_kind = BIAS_N;
        run_case(&c);
        c.nba = c.nbb = 1;
        c.ba[0] = c.bb[0] = 2;
        c.bias_kind = BIAS_BATCH_N;
        run_case(&c);
    }
}

/* Few rows and many columns: the cpu backend also splits D into column blocks (of 128)
 * when row panels alone cannot feed every thread. Every epilogue must still be right,
 * including mask bytes and gelu aux at the block boundaries. */
static void test_column_blocks(void)
{
    const unsigned B = FM_EPILOGUE_BIAS, R = FM_EPILOGUE_RELU, G = FM_EPILOGUE_GELU, X = FM_EPILOGUE_AUX;
    const unsigned eps[] = {0, B | R, B | G, R | X, B | R | X, G | X, B | G | X};
    for (int d = 0; d < 2; ++d)
        for (size_t e = 0; e < sizeof eps / sizeof eps[0]; ++e) {
            mm_case c = base_case(real_dtypes[d], 8, 1000, 600);
            c.threads = 4; /* more threads than row panels, whatever the machine */
            c.epilogue = eps[e];
            c.bias_kind = (eps[e] & B) ? BIAS_N : BIAS_NONE;
            run_case(&c);
            c.m = 3; /* fewer rows than threads, N not a multiple of 128 */
            c.n = 1321;
            c.c_kind = C_FULL;
            c.beta = -0.25;
            c.aux_rowpad = 1;
            c.lb = LAY_TRANS;
            run_case(&c);
            c.m = 1; /* a single row */
            c.ld = LAY_STRIDED;
            c.nba = c.nbb = 0;
            run_case(&c);
        }
    for (int d = 2; d < 4; ++d) {
        mm_case c = base_case(all_dtypes[d], 4, 900, 500);
        c.threads = 4;
        c.epilogue = B;
        c.bias_kind = BIAS_N;
        c.c_kind = C_FULL;
        c.beta = CMPLX(0.5, 0.5);
        c.alpha = CMPLX(-1.0, 0.25);
        run_case(&c);
    }
}

/* Pinned host memory (CUDA_HOST) and AUTO resolve to the cpu. */
static void test_device_kinds(void)
{
    const int32_t kinds[] = {FM_DEVICE_CUDA_HOST, FM_DEVICE_AUTO};
    for (int i = 0; i < 2; ++i) {
        test_rng rng = {17};
        int64_t sa[2] = {9, 7}, sb[2] = {7, 5}, sd[2] = {9, 5};
        test_operand A, B, D;
        operand_contig(&A, FM_F64, 2, sa, &rng);
        operand_contig(&B, FM_F64, 2, sb, &rng);
        operand_contig(&D, FM_F64, 2, sd, NULL);
        A.t.device.type = kinds[i];
        D.t.device.type = kinds[i];
        fm_matmul_options o;
        fm_matmul_options_init(&o);
        fm_plan *p = NULL;
        fm_status s = fm_matmul_plan(g_ctx, &A.t, &B.t, NULL, NULL, &D.t, NULL, &o, &p);
        CHECK_MSG(s == FM_OK, "device type %d with cpu operands -> %s", kinds[i], fm_status_name(s));
        if (p) {
            CHECK_MSG(strcmp(fm_plan_backend(p), "openblas") == 0, "device type %d planned by %s", kinds[i],
                      fm_plan_backend(p));
            void *ptrs[FM_MATMUL_NSLOTS] = {A.buf, B.buf, NULL, NULL, D.buf, NULL};
            CHECK_OK(fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL));
            mm_ref r;
            mm_reference(&r, &A.t, &B.t, NULL, NULL, &D.t, 1.0, 0.0, 0);
            int64_t first;
            double complex g, w;
            CHECK(mm_compare(&D.t, &r, r.post, &first, &g, &w) == 0);
            mm_ref_free(&r);
            fm_plan_release(p);
        }
        operand_free(&A);
        operand_free(&B);
        operand_free(&D);
    }
}

static void test_alpha_beta(void)
{
    for (int d = 0; d < 4; ++d) {
        int cplx = fm_dtype_is_complex(all_dtypes[d]);
        double complex alphas[3] = {2.5, -0.5, 0.0};
        double complex betas[3] = {0.0, 1.0, -3.0};
        if (cplx) {
            alphas[1] = CMPLX(0.5, -1.5);
            betas[2] = CMPLX(0.25, 0.75);
        }
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) {
                mm_case c = base_case(all_dtypes[d], 35, 26, 17);
                c.alpha = alphas[i];
                c.beta = betas[j];
                c.c_kind = C_FULL;
                run_case(&c);
            }
        mm_case c = base_case(all_dtypes[d], 35, 26, 17); /* C with a zero row stride */
        c.c_kind = C_ROW_BCAST;
        c.beta = cplx ? CMPLX(-1.0, 2.0) : -1.0;
        c.alpha = cplx ? CMPLX(0.0, 1.0) : 3.0;
        run_case(&c);
        c.c_kind = C_FULL; /* C with a transposed layout */
        c.lc = LAY_TRANS;
        c.bias_kind = BIAS_N;
        c.epilogue = FM_EPILOGUE_BIAS;
        run_case(&c);
        c.stateless = 1;
        run_case(&c);
    }
}

static void test_k_zero(void)
{
    for (int d = 0; d < 4; ++d) {
        int cplx = fm_dtype_is_complex(all_dtypes[d]);
        mm_case c = base_case(all_dtypes[d], 6, 9, 0);
        run_case(&c); /* D = 0 */
        c.c_kind = C_FULL;
        c.beta = cplx ? CMPLX(2.0, -1.0) : 2.0;
        c.bias_kind = BIAS_N;
        c.epilogue = FM_EPILOGUE_BIAS;
        run_case(&c);
        if (!cplx) {
            c.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU | FM_EPILOGUE_AUX;
            run_case(&c);
            c.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_GELU | FM_EPILOGUE_AUX;
            run_case(&c);
        }
        c.nba = c.nbb = 1;
        c.ba[0] = c.bb[0] = 3;
        c.epilogue = FM_EPILOGUE_BIAS;
        c.stateless = 1;
        run_case(&c);
    }
}

/* m == 0 or n == 0 (or an empty batch): nothing crashes and nothing is written. */
static void test_empty_output(void)
{
    static const int64_t sizes[][3] = {{0, 5, 4}, {5, 0, 4}, {0, 0, 4}, {0, 5, 0}};
    for (int d = 0; d < 4; ++d)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
            for (int st = 0; st < 2; ++st) {
                fm_dtype dt = all_dtypes[d];
                test_rng rng = {3};
                int64_t m = sizes[i][0], n = sizes[i][1], k = sizes[i][2];
                int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n};
                test_operand A, B;
                operand_contig(&A, dt, 2, sa, &rng);
                operand_contig(&B, dt, 2, sb, &rng);
                unsigned char guard[256];
                memset(guard, 0xA5, sizeof guard);
                fm_tensor D;
                fm_tensor_init(&D, guard + 64, fm_test_cpu, dt, 2, sd, NULL);
                fm_matmul_options o;
                fm_matmul_options_init(&o);
                o.epilogue = fm_dtype_is_complex(dt) ? 0 : FM_EPILOGUE_RELU;
                fm_status s;
                if (st) {
                    s = fm_matmul(g_ctx, &A.t, &B.t, NULL, NULL, &D, NULL, &o, NULL);
                } else {
                    fm_plan *p = NULL;
                    s = fm_matmul_plan(g_ctx, &A.t, &B.t, NULL, NULL, &D, NULL, &o, &p);
                    if (p) {
                        void *ptrs[FM_MATMUL_NSLOTS] = {A.buf, B.buf, NULL, NULL, guard + 64, NULL};
                        fm_status s2 = fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL);
                        CHECK_MSG(s2 == FM_OK, "%s %lldx%lldx%lld execute -> %s", fm_dtype_name(dt), (long long)m,
                                  (long long)n, (long long)k, fm_status_name(s2));
                    }
                    fm_plan_release(p);
                }
                CHECK_MSG(s == FM_OK, "%s %lldx%lldx%lld -> %s", fm_dtype_name(dt), (long long)m, (long long)n,
                          (long long)k, fm_status_name(s));
                int untouched = 1;
                for (size_t b = 0; b < sizeof guard; ++b) untouched &= guard[b] == 0xA5;
                CHECK_MSG(untouched, "%s %lldx%lldx%lld: memory around an empty D was written", fm_dtype_name(dt),
                          (long long)m, (long long)n, (long long)k);
                operand_free(&A);
                operand_free(&B);
            }
    /* an empty batch */
    test_rng rng = {4};
    int64_t sa[3] = {0, 4, 3}, sb[3] = {0, 3, 5}, sd[3] = {0, 4, 5};
    test_operand A, B;
    operand_contig(&A, FM_F32, 3, sa, &rng);
    operand_contig(&B, FM_F32, 3, sb, &rng);
    float guard[8];
    for (int i = 0; i < 8; ++i) guard[i] = 42.0f;
    fm_tensor D;
    fm_tensor_init(&D, guard, fm_test_cpu, FM_F32, 3, sd, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    CHECK_OK(fm_matmul(g_ctx, &A.t, &B.t, NULL, NULL, &D, NULL, &o, NULL));
    for (int i = 0; i < 8; ++i) CHECK(guard[i] == 42.0f);
    operand_free(&A);
    operand_free(&B);
}

/* ---- large sizes: Freivalds' projection plus sampled entries ---- */
static void run_large(fm_dtype dt, int64_t m, int64_t n, int64_t k, unsigned epilogue, int with_c)
{
    char ep[64];
    fm_epilogue_format(epilogue, ep, sizeof ep);
    test_rng rng = {0xC0FFEEULL + (uint64_t)dt + epilogue};
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n};
    test_operand A, B, C, D, BIAS;
    memset(&C, 0, sizeof C);
    memset(&BIAS, 0, sizeof BIAS);
    operand_contig(&A, dt, 2, sa, &rng);
    operand_contig(&B, dt, 2, sb, &rng);
    operand_contig(&D, dt, 2, sd, NULL);
    if (with_c) operand_contig(&C, dt, 2, sd, &rng);
    if (epilogue & FM_EPILOGUE_BIAS) operand_contig(&BIAS, dt, 1, &n, &rng);
    const double alpha = 0.75, beta = with_c ? -0.5 : 0.0;
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.alpha[0] = alpha;
    o.beta[0] = beta;
    o.epilogue = epilogue;
    fm_plan *p = NULL;
    CHECK_OK(fm_matmul_plan(g_ctx, &A.t, &B.t, with_c ? &C.t : NULL, BIAS.buf ? &BIAS.t : NULL, &D.t, NULL, &o, &p));
    if (!p) goto out;
    printf("    %s\n", fm_plan_describe(p));
    void *ptrs[FM_MATMUL_NSLOTS] = {A.buf, B.buf, C.buf, BIAS.buf, D.buf, NULL};
    CHECK_OK(fm_plan_execute(p, ptrs, FM_MATMUL_NSLOTS, NULL));
    fm_plan_release(p);
    double eps = dtype_eps(dt);

    if (!(epilogue & (FM_EPILOGUE_RELU | FM_EPILOGUE_GELU))) {
        /* D x == alpha A (B x) + beta C x + (bias . x), row by row */
        for (int trial = 0; trial < 2; ++trial) {
            double *x = malloc((size_t)n * sizeof *x), *bx = malloc((size_t)k * sizeof *bx);
            double *absbx = malloc((size_t)k * sizeof *absbx);
            double bias_x = 0, abs_bias_x = 0;
            for (int64_t j = 0; j < n; ++j) x[j] = rng_uniform(&rng);
            for (int64_t l = 0; l < k; ++l) {
                double s = 0, sa2 = 0;
                for (int64_t j = 0; j < n; ++j) {
                    double v = creal(elem_get(B.buf, dt, l * n + j));
                    s += v * x[j];
                    sa2 += fabs(v) * fabs(x[j]);
                }
                bx[l] = s;
                absbx[l] = sa2;
            }
            if (BIAS.buf)
                for (int64_t j = 0; j < n; ++j) {
                    double v = creal(elem_get(BIAS.buf, dt, j));
                    bias_x += v * x[j];
                    abs_bias_x += fabs(v * x[j]);
                }
            int64_t bad = 0, first = -1;
            double got_first = 0, want_first = 0, tol_first = 0;
            for (int64_t i = 0; i < m; ++i) {
                double dx = 0, want = 0, bound = 0, cx = 0, abscx = 0;
                for (int64_t j = 0; j < n; ++j) dx += creal(elem_get(D.buf, dt, i * n + j)) * x[j];
                for (int64_t l = 0; l < k; ++l) {
                    double a = creal(elem_get(A.buf, dt, i * k + l));
                    want += a * bx[l];
                    bound += fabs(a) * absbx[l];
                }
                if (with_c)
                    for (int64_t j = 0; j < n; ++j) {
                        double cv = creal(elem_get(C.buf, dt, i * n + j));
                        cx += cv * x[j];
                        abscx += fabs(cv * x[j]);
                    }
                want = alpha * want + beta * cx + bias_x;
                double tol = 2.0 * (double)(k + 4) * eps * (fabs(alpha) * bound + fabs(beta) * abscx + abs_bias_x);
                if (!(fabs(dx - want) <= tol)) {
                    if (bad++ == 0) {
                        first = i;
                        got_first = dx;
                        want_first = want;
                        tol_first = tol;
                    }
                }
            }
            CHECK_MSG(bad == 0,
                      "%s %lldx%lldx%lld %s: Freivalds check failed on %lld rows, first row %lld: Dx %.12g vs %.12g "
                      "(tol %.3g)",
                      fm_dtype_name(dt), (long long)m, (long long)n, (long long)k, ep, (long long)bad,
                      (long long)first, got_first, want_first, tol_first);
            free(x);
            free(bx);
            free(absbx);
        }
    }
    /* sampled entries, computed directly (works for every epilogue) */
    int64_t bad = 0;
    for (int s = 0; s < 400; ++s) {
        int64_t i = (int64_t)((rng_uniform(&rng) + 1.0) * 0.5 * (double)m);
        int64_t j = (int64_t)((rng_uniform(&rng) + 1.0) * 0.5 * (double)n);
        if (s == 0) i = 0, j = 0;
        if (s == 1) i = m - 1, j = n - 1;
        if (i >= m) i = m - 1;
        if (j >= n) j = n - 1;
        double acc = 0, mag = 0;
        for (int64_t l = 0; l < k; ++l) {
            double a = creal(elem_get(A.buf, dt, i * k + l)), b = creal(elem_get(B.buf, dt, l * n + j));
            acc += a * b;
            mag += fabs(a * b);
        }
        double v = alpha * acc, scale = fabs(alpha) * mag;
        if (with_c) {
            double cv = creal(elem_get(C.buf, dt, i * n + j));
            v += beta * cv;
            scale += fabs(beta * cv);
        }
        if (BIAS.buf) {
            double bv = creal(elem_get(BIAS.buf, dt, j));
            v += bv;
            scale += fabs(bv);
        }
        if (epilogue & FM_EPILOGUE_RELU) v = v > 0 ? v : 0;
        if (epilogue & FM_EPILOGUE_GELU) v = gelu_tanh(v);
        double tol = 2.4 * (double)(k + 4) * eps * scale;
        double got = creal(elem_get(D.buf, dt, i * n + j));
        if (!(fabs(got - v) <= tol)) {
            if (bad++ == 0)
                fprintf(stderr, "    D[%lld,%lld] = %.12g, expected %.12g (tol %.3g)\n", (long long)i, (long long)j,
                        got, v, tol);
        }
    }
    CHECK_MSG(bad == 0, "%s %lldx%lldx%lld %s: %lld of 400 sampled entries wrong", fm_dtype_name(dt), (long long)m,
              (long long)n, (long long)k, ep, (long long)bad);
out:
    operand_free(&A);
    operand_free(&B);
    operand_free(&C);
    operand_free(&D);
    operand_free(&BIAS);
}

static void test_large(void)
{
    run_large(FM_F32, 1500, 1200, 900, 0, 0);
    run_large(FM_F64, 1500, 1200, 900, 0, 0);
    run_large(FM_F32, 1500, 1200, 900, FM_EPILOGUE_BIAS, 1);
    run_large(FM_F64, 1500, 1200, 900, FM_EPILOGUE_BIAS | FM_EPILOGUE_GELU, 1);
    run_large(FM_F32, 1031, 777, 513, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, 0);
}

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "fm_context_create failed: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_sizes);
    RUN_TEST(test_layouts);
    RUN_TEST(test_batched);
    RUN_TEST(test_epilogues);
    RUN_TEST(test_column_blocks);
    RUN_TEST(test_device_kinds);
    RUN_TEST(test_alpha_beta);
    RUN_TEST(test_k_zero);
    RUN_TEST(test_empty_output);
    RUN_TEST(test_large);
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
