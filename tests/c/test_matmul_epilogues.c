/* test_matmul_epilogues.c : every epilogue chain of docs/epilogues.md on the cpu
 * against a naive float64 reference written here: forward activations (sigmoid,
 * tanh, silu, clamp, relu, gelu; with bias, aux, scale), backward drelu/dgelu (aux
 * as input, the relu mask coming from a forward relu+aux call), their bias gradient,
 * bgrada/bgradb (also complex), at odd sizes, batched with broadcast batch dims,
 * transposed and strided operands, several thread counts and both cpu strategies.
 *
 * Tolerance of D: as test_matmul_cpu.c, c * (k + 4) * eps * (|alpha||scale| |A||B| +
 * |beta||C| + |bias| + |ref|) times a Lipschitz factor, plus a few eps of the value
 * for the vector math (tanh, exp) of the activation. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "mmref.h"

#include <stdio.h>

static fm_context *g_ctx;

enum { BATCH_NONE = 0, BATCH_BCAST, BATCH_ZERO_STRIDE, BATCH_A_2D };

typedef struct {
    fm_dtype dt;
    int64_t m, n, k;
    int batch;            /* BATCH_* */
    test_layout la, lb, ld;
    int with_c, c_is_d;   /* C operand; C is D's own memory (in place) */
    double complex alpha, beta;
    unsigned epi;
    int per_batch_vectors; /* bias / scale of shape (batch..., N) */
    int threads;          /* fm_context_set_num_threads; 0 = default */
    int strategy;         /* fm_cpu_strategy */
    int panel_rows;
    double lo, hi;        /* clamp */
    int bg_strided;       /* bgrad with element stride 2 */
    int aux_rowpad;       /* activation-input aux with row stride n + 3 */
    int want_parallel;    /* the plan must use more than one thread (else the case tests less than it claims) */
    /* out: the bias gradient as computed (for determinism checks), batch * L values */
    double complex *bgrad_out;
} ecase;

static ecase make_case(fm_dtype dt, int64_t m, int64_t n, int64_t k, unsigned epi)
{
    ecase c;
    memset(&c, 0, sizeof c);
    c.dt = dt;
    c.m = m;
    c.n = n;
    c.k = k;
    c.epi = epi;
    c.alpha = 1.0;
    c.lo = -0.3;
    c.hi = 0.45;
    return c;
}

static void label_of(const ecase *c, char *buf, size_t size)
{
    char ep[96] = "?";
    fm_epilogue_format(c->epi, ep, sizeof ep);
    snprintf(buf, size,
             "%s %s %lldx%lldx%lld batch=%d a=%s b=%s d=%s c=%d%s alpha=%g beta=%g threads=%d strategy=%d "
             "panel_rows=%d per_batch=%d bg_strided=%d",
             fm_dtype_name(c->dt), ep, (long long)c->m, (long long)c->n, (long long)c->k, c->batch,
             test_layout_names[c->la], test_layout_names[c->lb], test_layout_names[c->ld], c->with_c,
             c->c_is_d ? "(in place)" : "", creal(c->alpha), creal(c->beta), c->threads, c->strategy, c->panel_rows,
             c->per_batch_vectors, c->bg_strided);
}

/* ---- the reference's math ---- */
static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }
static double dgelu_ref(double x)
{
    const double k0 = 0.7978845608028654, k1 = 0.044715;
    double th = tanh(k0 * (x + k1 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k0 * (1.0 + 3.0 * k1 * x * x);
}

static double act_ref(unsigned epi, double x, double lo, double hi)
{
    if (epi & FM_EPILOGUE_RELU) return x > 0 ? x : 0.0;
    if (epi & FM_EPILOGUE_GELU) return gelu_tanh(x);
    if (epi & FM_EPILOGUE_SIGMOID) return sigmoid_ref(x);
    if (epi & FM_EPILOGUE_TANH) return tanh(x);
    if (epi & FM_EPILOGUE_SILU) return x * sigmoid_ref(x);
    if (epi & FM_EPILOGUE_CLAMP) return x < lo ? lo : (x > hi ? hi : x);
    return x;
}

static const unsigned ANY_BGRAD = FM_EPILOGUE_BGRAD | FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB;

/* A copy of an operand (same layout, its own buffer). */
static void operand_clone(test_operand *dst, const test_operand *src)
{
    *dst = *src;
    size_t bytes = (size_t)src->nbuf * fm_dtype_size(src->t.dtype) + 64;
    dst->buf = malloc(bytes);
    memcpy(dst->buf, src->buf, bytes);
    dst->t.data = dst->buf + ((const unsigned char *)src->t.data - src->buf);
}

/* Elements of o's buffer outside its view that differ from `before` (same size). */
static int64_t changed_outside(const test_operand *o, const unsigned char *before)
{
    unsigned char *map = operand_footprint(o);
    size_t es = fm_dtype_size(o->t.dtype);
    int64_t bad = 0;
    for (int64_t i = 0; i < o->nbuf; ++i)
        if (!map[i] && memcmp(o->buf + (size_t)i * es, before + (size_t)i * es, es) != 0) ++bad;
    free(map);
    return bad;
}

/* A vector operand of shape (batch..., L) (nbd batch dims of D's shape sd), contiguous
 * or with element stride 2; rng == NULL fills 0xA5. */
static void vector_make(test_operand *o, fm_dtype dt, int nbd, const int64_t *sd, int64_t len, int strided,
                        test_rng *rng)
{
    memset(o, 0, sizeof *o);
    int64_t shape[FM_MAX_NDIM], strides[FM_MAX_NDIM], step = strided ? 2 : 1, total = 1;
    for (int i = 0; i < nbd; ++i) shape[i] = sd[i];
    shape[nbd] = len;
    for (int i = nbd; i >= 0; --i) {
        strides[i] = step;
        step *= shape[i];
        total *= shape[i];
    }
    o->nbuf = (strided ? 2 * total : total) + 1;
    size_t es = fm_dtype_size(dt);
    o->buf = malloc((size_t)o->nbuf * es + 64);
    if (rng)
        for (int64_t i = 0; i < o->nbuf; ++i)
            elem_set(o->buf, dt, i, CMPLX(rng_uniform(rng), fm_dtype_is_complex(dt) ? rng_uniform(rng) : 0.0));
    else
        memset(o->buf, 0xA5, (size_t)o->nbuf * es);
    fm_tensor_init(&o->t, o->buf, fm_test_cpu, dt, nbd + 1, shape, strides);
}

/* Offset of element (bidx..., j) of a vector (batch..., L) or (L,) tensor, broadcasting. */
static int64_t vec_offset(const fm_tensor *t, int nbd, const int64_t *bidx, int64_t j)
{
    int64_t tail[1] = {j};
    return bcast_offset(t, 1, tail, nbd, bidx);
}

/* A@B of one batch entry in double, with sum |a||b| per element; operands are first
 * gathered into dense double arrays through the strides (one element at a time, as
 * mmref.h does), then multiplied by plain loops. */
typedef struct {
    int64_t m, n, k;
    double *are, *aim, *aabs, *bre, *bim, *babs, *re, *im, *mag;
} ref_prod;

static void ref_prod_init(ref_prod *r, int64_t m, int64_t n, int64_t k)
{
    r->m = m, r->n = n, r->k = k;
    size_t mk = (size_t)(m * k) + 1, kn = (size_t)(k * n) + 1, mn = (size_t)(m * n) + 1;
    r->are = malloc(mk * sizeof(double)), r->aim = malloc(mk * sizeof(double)), r->aabs = malloc(mk * sizeof(double));
    r->bre = malloc(kn * sizeof(double)), r->bim = malloc(kn * sizeof(double)), r->babs = malloc(kn * sizeof(double));
    r->re = malloc(mn * sizeof(double)), r->im = malloc(mn * sizeof(double)), r->mag = malloc(mn * sizeof(double));
}

static void ref_prod_free(ref_prod *r)
{
    free(r->are), free(r->aim), free(r->aabs), free(r->bre), free(r->bim), free(r->babs);
    free(r->re), free(r->im), free(r->mag);
}

static void ref_product(ref_prod *r, const fm_tensor *a, const fm_tensor *b, int nbd, const int64_t *bidx)
{
    const int64_t m = r->m, n = r->n, k = r->k;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t l = 0; l < k; ++l) {
            int64_t ta[2] = {i, l};
            double complex x = elem_get(a->data, a->dtype, bcast_offset(a, 2, ta, nbd, bidx));
            r->are[i * k + l] = creal(x), r->aim[i * k + l] = cimag(x), r->aabs[i * k + l] = cabs(x);
        }
    for (int64_t l = 0; l < k; ++l)
        for (int64_t j = 0; j < n; ++j) {
            int64_t tb[2] = {l, j};
            double complex y = elem_get(b->data, b->dtype, bcast_offset(b, 2, tb, nbd, bidx));
            r->bre[l * n + j] = creal(y), r->bim[l * n + j] = cimag(y), r->babs[l * n + j] = cabs(y);
        }
    for (int64_t e = 0; e < m * n; ++e) r->re[e] = r->im[e] = r->mag[e] = 0.0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t l = 0; l < k; ++l) {
            const double xr = r->are[i * k + l], xi = r->aim[i * k + l], xa = r->aabs[i * k + l];
            double *re = r->re + i * n, *im = r->im + i * n, *mag = r->mag + i * n;
            const double *br = r->bre + l * n, *bi = r->bim + l * n, *ba = r->babs + l * n;
            for (int64_t j = 0; j < n; ++j) {
                re[j] += xr * br[j] - xi * bi[j];
                im[j] += xr * bi[j] + xi * br[j];
                mag[j] += xa * ba[j];
            }
        }
}

/* Run one case; every problem is one CHECK failure naming the case. */
static void run_ecase(ecase *cs)
{
    char label[512];
    label_of(cs, label, sizeof label);
    test_rng rng = {0x51ED270B27A1ULL ^ (uint64_t)(cs->m * 7919 + cs->n * 104729 + cs->k * 31 + cs->dt + cs->epi * 13)};
    const fm_dtype dt = cs->dt;
    const unsigned epi = cs->epi;
    const int cplx = fm_dtype_is_complex(dt);

    /* shapes */
    int nba = 0, nbb = 0;
    int64_t ba[2] = {0}, bb[2] = {0};
    switch (cs->batch) {
    case BATCH_BCAST: nba = 2, ba[0] = 2, ba[1] = 1, nbb = 1, bb[0] = 3; break;
    case BATCH_ZERO_STRIDE: nba = nbb = 1, ba[0] = bb[0] = 3; break;
    case BATCH_A_2D: nbb = 1, bb[0] = 4; break;
    default: break;
    }
    int nbd = nba > nbb ? nba : nbb;
    int64_t sa[FM_MAX_NDIM], sb[FM_MAX_NDIM], sd[FM_MAX_NDIM];
    for (int i = 0; i < nba; ++i) sa[i] = ba[i];
    for (int i = 0; i < nbb; ++i) sb[i] = bb[i];
    for (int i = 0; i < nbd; ++i) {
        int ia = i - (nbd - nba), ib = i - (nbd - nbb);
        int64_t ea = ia >= 0 ? ba[ia] : 1, eb = ib >= 0 ? bb[ib] : 1;
        sd[i] = ea == 1 ? eb : ea;
    }
    sa[nba] = cs->m, sa[nba + 1] = cs->k;
    sb[nbb] = cs->k, sb[nbb + 1] = cs->n;
    sd[nbd] = cs->m, sd[nbd + 1] = cs->n;
    int64_t nbatch = 1;
    for (int i = 0; i < nbd; ++i) nbatch *= sd[i];

    test_operand A, B, C, D, BIAS, SCALE, AUX, BG;
    memset(&C, 0, sizeof C), memset(&BIAS, 0, sizeof BIAS), memset(&SCALE, 0, sizeof SCALE);
    memset(&AUX, 0, sizeof AUX), memset(&BG, 0, sizeof BG);
    operand_make(&A, dt, nba + 2, sa, cs->la, &rng);
    operand_make(&B, dt, nbb + 2, sb, cs->lb, &rng);
    if (cs->batch == BATCH_ZERO_STRIDE) B.t.strides[0] = 0;
    if (cs->with_c && cs->c_is_d) {
        operand_make(&D, dt, nbd + 2, sd, cs->ld, &rng); /* D holds C's values */
        operand_clone(&C, &D);                           /* the reference reads this copy */
    } else {
        operand_make(&D, dt, nbd + 2, sd, cs->ld, NULL);
        if (cs->with_c) operand_make(&C, dt, nbd + 2, sd, LAY_CONTIG, &rng);
    }
    if (epi & FM_EPILOGUE_BIAS) vector_make(&BIAS, dt, cs->per_batch_vectors ? nbd : 0, sd, cs->n, 0, &rng);
    if (epi & FM_EPILOGUE_SCALE) vector_make(&SCALE, dt, cs->per_batch_vectors ? nbd : 0, sd, cs->n, 0, &rng);
    const int mask_aux = (epi & (FM_EPILOGUE_RELU | FM_EPILOGUE_DRELU)) && (epi & (FM_EPILOGUE_AUX | FM_EPILOGUE_DRELU));
    const int val_aux = ((epi & FM_EPILOGUE_AUX) && !(epi & FM_EPILOGUE_RELU)) || (epi & FM_EPILOGUE_DGELU);
    const int64_t rb = fm_relu_mask_row_bytes(cs->n);
    int64_t saux[FM_MAX_NDIM];
    memcpy(saux, sd, sizeof saux);
    saux[nbd + 1] = rb;
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.alpha[0] = creal(cs->alpha), o.alpha[1] = cimag(cs->alpha);
    o.beta[0] = creal(cs->beta), o.beta[1] = cimag(cs->beta);
    o.epilogue = epi;
    o.cpu_strategy = cs->strategy;
    o.panel_rows = cs->panel_rows;
    o.clamp[0] = cs->lo, o.clamp[1] = cs->hi;
    CHECK_OK(fm_context_set_num_threads(g_ctx, cs->threads));

    if (mask_aux) {
        operand_contig(&AUX, FM_U8, nbd + 2, saux, NULL); /* 0xA5: padding bits set until written */
        /* N = 0: rows of 0 bytes. The core wants row stride == 0 then, but fm_tensor_init
         * (like NumPy) gives 1 for an empty last axis; see the report. */
        if (rb == 0) AUX.t.strides[nbd] = 0;
        if (epi & FM_EPILOGUE_DRELU) {
            /* the mask of a forward relu+aux call on other operands of the same output shape */
            test_operand A2, B2, D2;
            operand_make(&A2, dt, nba + 2, sa, LAY_CONTIG, &rng);
            operand_make(&B2, dt, nbb + 2, sb, LAY_CONTIG, &rng);
            operand_make(&D2, dt, nbd + 2, sd, LAY_CONTIG, NULL);
            fm_matmul_options of;
            fm_matmul_options_init(&of);
            of.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_AUX;
            fm_status s = fm_matmul(g_ctx, &A2.t, &B2.t, NULL, NULL, &D2.t, &AUX.t, &of, NULL);
            CHECK_MSG(s == FM_OK, "%s: forward relu+aux for the mask -> %s", label, fm_status_name(s));
            if (cs->k == 0) /* all-zero pre-activations give an empty mask: use a pattern instead */
                for (int64_t e = 0; e < nbatch * cs->m; ++e)
                    for (int64_t byte = 0; byte < (cs->n + 7) / 8; ++byte)
                        AUX.buf[e * rb + byte] = (unsigned char)((0x5A ^ (e * 31 + byte * 7)) &
                                                                 (byte == cs->n / 8 ? (1u << (cs->n % 8)) - 1 : 0xFF));
            operand_free(&A2), operand_free(&B2), operand_free(&D2);
        }
    } else if (val_aux) {
        if (epi & FM_EPILOGUE_DGELU) {
            operand_make(&AUX, dt, nbd + 2, sd, cs->aux_rowpad ? LAY_ROWPAD : LAY_CONTIG, &rng);
            for (int64_t i = 0; i < AUX.nbuf; ++i) elem_set(AUX.buf, dt, i, 3.0 * elem_get(AUX.buf, dt, i));
        } else {
            operand_make(&AUX, dt, nbd + 2, sd, cs->aux_rowpad ? LAY_ROWPAD : LAY_CONTIG, NULL);
        }
    }
    const int64_t bg_len = (epi & FM_EPILOGUE_BGRADA) ? cs->m : cs->n;
    if (epi & ANY_BGRAD) vector_make(&BG, dt, nbd, sd, bg_len, cs->bg_strided, NULL);

    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&A.t,
                                             &B.t,
                                             cs->with_c ? (cs->c_is_d ? &D.t : &C.t) : NULL,
                                             (epi & FM_EPILOGUE_BIAS) ? &BIAS.t : NULL,
                                             &D.t,
                                             (mask_aux || val_aux) ? &AUX.t : NULL,
                                             (epi & ANY_BGRAD) ? &BG.t : NULL,
                                             (epi & FM_EPILOGUE_SCALE) ? &SCALE.t : NULL};
    unsigned char *d_before = malloc((size_t)D.nbuf * fm_dtype_size(dt) + 64);
    memcpy(d_before, D.buf, (size_t)D.nbuf * fm_dtype_size(dt));
    test_operand AUX_IN;
    memset(&AUX_IN, 0, sizeof AUX_IN);
    if (epi & (FM_EPILOGUE_DRELU | FM_EPILOGUE_DGELU)) operand_clone(&AUX_IN, &AUX);

    fm_plan *plan = NULL;
    fm_status s = fm_matmul_plan_v(g_ctx, ts, &o, &plan);
    CHECK_MSG(s == FM_OK && plan, "%s: plan -> %s", label, fm_status_name(s));
    if (plan) {
        void *ptrs[FM_MATMUL_NSLOTS];
        for (int i = 0; i < FM_MATMUL_NSLOTS; ++i) ptrs[i] = ts[i] ? ts[i]->data : NULL;
        s = fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL);
        CHECK_MSG(s == FM_OK, "%s: execute -> %s (%s)", label, fm_status_name(s), fm_plan_describe(plan));
        /* a cpu backend: cblas tiles, or fusemath's own GEMM kernel where auto gives it the product */
        CHECK_MSG(strcmp(fm_plan_backend(plan), "openblas") == 0 || strcmp(fm_plan_backend(plan), "gemmkernel") == 0,
                  "%s: planned by %s", label, fm_plan_backend(plan));
        if (cs->want_parallel) {
            const char *th = strstr(fm_plan_describe(plan), "threads=");
            CHECK_MSG(th && atoi(th + 8) > 1, "%s: expected a multithreaded plan: %s", label, fm_plan_describe(plan));
        }
        fm_plan_release(plan);
    }
    if (s != FM_OK) goto out;

    {
        const double eps = dtype_eps(dt), cfac = cplx ? 4.0 : 2.0;
        const double lip = (epi & (FM_EPILOGUE_GELU | FM_EPILOGUE_SILU)) ? 1.2 : 1.0;
        const int backward = (epi & (FM_EPILOGUE_DRELU | FM_EPILOGUE_DGELU)) != 0;
        const float lof = (float)cs->lo, hif = (float)cs->hi;
        int64_t bad = 0, bad_aux = 0, bad_bits = 0, bad_pad = 0, bad_clamp = 0, bad_bg = 0, checked_bits = 0;
        char first[400] = "", first_bg[300] = "";
        ref_prod pr;
        ref_prod_init(&pr, cs->m, cs->n, cs->k);
        double complex *colsum = calloc((size_t)(cs->n + 1), sizeof *colsum);
        double *colsum_tol = calloc((size_t)(cs->n + 1), sizeof *colsum_tol);
        int64_t bidx[FM_MAX_NDIM] = {0}, idx[FM_MAX_NDIM] = {0};
        for (int64_t bt = 0; bt < nbatch; ++bt) {
            int64_t rem = bt;
            for (int i = nbd - 1; i >= 0; --i) {
                bidx[i] = rem % sd[i];
                rem /= sd[i];
                idx[i] = bidx[i];
            }
            for (int64_t j = 0; j < cs->n; ++j) colsum[j] = 0, colsum_tol[j] = 0;
            ref_product(&pr, &A.t, &B.t, nbd, bidx);
            for (int64_t i = 0; i < cs->m; ++i) {
                for (int64_t j = 0; j < cs->n; ++j) {
                    const double complex acc = CMPLX(pr.re[i * cs->n + j], pr.im[i * cs->n + j]);
                    const double mag = pr.mag[i * cs->n + j];
                    double complex sc = 1.0;
                    if (epi & FM_EPILOGUE_SCALE)
                        sc = elem_get(SCALE.t.data, dt, vec_offset(&SCALE.t, nbd, bidx, j));
                    double complex v = cs->alpha * sc * acc;
                    double bound = cabs(cs->alpha) * cabs(sc) * mag;
                    if (cs->with_c) {
                        int64_t tc[2] = {i, j};
                        double complex cv = elem_get(C.t.data, dt, bcast_offset(&C.t, 2, tc, nbd, bidx));
                        v += cs->beta * cv;
                        bound += cabs(cs->beta) * cabs(cv);
                    }
                    if (epi & FM_EPILOGUE_BIAS) {
                        double complex bv = elem_get(BIAS.t.data, dt, vec_offset(&BIAS.t, nbd, bidx, j));
                        v += bv;
                        bound += cabs(bv);
                    }
                    double tol_v = cfac * (double)(cs->k + 4) * eps * (bound + cabs(v)) + 1e3 * DBL_MIN;
                    idx[nbd] = i, idx[nbd + 1] = j;
                    double complex want, got = elem_get(D.t.data, dt, tensor_offset(&D.t, idx));
                    double tol;
                    if (backward) {
                        double fac;
                        if (epi & FM_EPILOGUE_DRELU) {
                            fac = (AUX_IN.buf[(bt * cs->m + i) * rb + j / 8] >> (j % 8)) & 1;
                        } else {
                            double xa = creal(elem_get(AUX_IN.t.data, dt, tensor_offset(&AUX_IN.t, idx)));
                            fac = dgelu_ref(xa);
                        }
                        want = v * fac;
                        tol = fabs(fac) * tol_v + 32.0 * eps * cabs(v) + 1e3 * DBL_MIN;
                    } else {
                        want = cplx ? v : act_ref(epi, creal(v), cs->lo, cs->hi);
                        tol = lip * tol_v + 8.0 * eps * cabs(want);
                    }
                    if (!(cabs(got - want) <= tol) && bad++ == 0)
                        snprintf(first, sizeof first, "b%lld [%lld,%lld]: got (%.9g,%.9g) want (%.9g,%.9g) tol %.3g",
                                 (long long)bt, (long long)i, (long long)j, creal(got), cimag(got), creal(want),
                                 cimag(want), tol);
                    colsum[j] += want;
                    colsum_tol[j] += tol + 2.0 * eps * cabs(want);
                    if ((epi & FM_EPILOGUE_CLAMP) &&
                        !(dt == FM_F32 ? (creal(got) >= lof && creal(got) <= hif)
                                       : (creal(got) >= cs->lo && creal(got) <= cs->hi)))
                        ++bad_clamp;
                    if ((epi & FM_EPILOGUE_AUX) && !(epi & FM_EPILOGUE_RELU)) {
                        double complex ga = elem_get(AUX.t.data, dt, tensor_offset(&AUX.t, idx));
                        bad_aux += !(cabs(ga - v) <= tol_v);
                    }
                    if ((epi & FM_EPILOGUE_AUX) && (epi & FM_EPILOGUE_RELU)) {
                        int bit = (AUX.buf[(bt * cs->m + i) * rb + j / 8] >> (j % 8)) & 1;
                        /* exact: the bit is set exactly where the library's relu output is positive */
                        bad_bits += bit != (creal(got) > 0);
                        if (fabs(creal(v)) > tol_v) { /* and agrees with the reference where decidable */
                            ++checked_bits;
                            bad_bits += bit != (creal(v) > 0);
                        }
                    }
                }
                if ((epi & FM_EPILOGUE_AUX) && (epi & FM_EPILOGUE_RELU)) /* padding bits and bytes are zero */
                    for (int64_t j = cs->n; j < 8 * rb; ++j)
                        bad_pad += (AUX.buf[(bt * cs->m + i) * rb + j / 8] >> (j % 8)) & 1;
            }
            /* bias gradients of this batch entry */
            if (epi & ANY_BGRAD) {
                int64_t len = bg_len;
                for (int64_t q = 0; q < len; ++q) {
                    double complex want = 0;
                    double tol = 0;
                    if (epi & FM_EPILOGUE_BGRAD) {
                        want = colsum[q];
                        tol = colsum_tol[q] + 1e3 * DBL_MIN;
                    } else {
                        double mag = 0;
                        for (int64_t l = 0; l < cs->k; ++l) {
                            double complex x;
                            if (epi & FM_EPILOGUE_BGRADA) {
                                int64_t ta[2] = {q, l};
                                x = elem_get(A.t.data, dt, bcast_offset(&A.t, 2, ta, nbd, bidx));
                            } else {
                                int64_t tb[2] = {l, q};
                                x = elem_get(B.t.data, dt, bcast_offset(&B.t, 2, tb, nbd, bidx));
                            }
                            want += x;
                            mag += cabs(x);
                        }
                        tol = 2.0 * eps * mag + 1e3 * DBL_MIN;
                    }
                    int64_t off = 0;
                    for (int i = 0; i < nbd; ++i) off += bidx[i] * BG.t.strides[i];
                    off += q * BG.t.strides[nbd];
                    double complex got = elem_get(BG.t.data, dt, off);
                    if (cs->bgrad_out) cs->bgrad_out[bt * len + q] = got;
                    if (!(cabs(got - want) <= tol) && bad_bg++ == 0)
                        snprintf(first_bg, sizeof first_bg, "b%lld [%lld]: got (%.9g,%.9g) want (%.9g,%.9g) tol %.3g",
                                 (long long)bt, (long long)q, creal(got), cimag(got), creal(want), cimag(want), tol);
                }
            }
        }
        CHECK_MSG(bad == 0, "%s: %lld wrong D elements, first %s", label, (long long)bad, first);
        CHECK_MSG(bad_bg == 0, "%s: %lld wrong bgrad elements, first %s", label, (long long)bad_bg, first_bg);
        CHECK_MSG(bad_aux == 0, "%s: %lld wrong aux (activation input) elements", label, (long long)bad_aux);
        CHECK_MSG(bad_bits == 0 && bad_pad == 0, "%s: relu mask: %lld wrong bits, %lld padding bits set (%lld checked)",
                  label, (long long)bad_bits, (long long)bad_pad, (long long)checked_bits);
        CHECK_MSG(bad_clamp == 0, "%s: %lld elements outside clamp [%g, %g]", label, (long long)bad_clamp, cs->lo,
                  cs->hi);
        int64_t clob = changed_outside(&D, d_before);
        CHECK_MSG(clob == 0, "%s: %lld elements outside the D view were written", label, (long long)clob);
        if (epi & ANY_BGRAD) {
            clob = operand_count_clobbered(&BG);
            CHECK_MSG(clob == 0, "%s: %lld elements between strided bgrad elements were written", label, (long long)clob);
        }
        if (val_aux && !(epi & FM_EPILOGUE_DGELU)) {
            clob = operand_count_clobbered(&AUX);
            CHECK_MSG(clob == 0, "%s: %lld elements of the aux row padding were written", label, (long long)clob);
        }
        if (AUX_IN.buf) { /* drelu/dgelu read aux and leave it alone */
            size_t bytes = (size_t)AUX.nbuf * fm_dtype_size(AUX.t.dtype);
            CHECK_MSG(memcmp(AUX.buf, AUX_IN.buf, bytes) == 0, "%s: the input aux was modified", label);
        }
        free(colsum);
        free(colsum_tol);
        ref_prod_free(&pr);
    }
out:
    CHECK_OK(fm_context_set_num_threads(g_ctx, 0));
    free(d_before);
    operand_free(&A), operand_free(&B), operand_free(&C), operand_free(&D), operand_free(&BIAS);
    operand_free(&SCALE), operand_free(&AUX), operand_free(&AUX_IN), operand_free(&BG);
}

static const fm_dtype real_dtypes[] = {FM_F32, FM_F64};
static const fm_dtype all_dtypes[] = {FM_F32, FM_F64, FM_C64, FM_C128};

/* odd sizes: M = 1, N not a multiple of 8 or 128, K = 0, several panels / blocks */
static const int64_t sizes[][3] = {{1, 1, 1}, {1, 300, 7}, {37, 131, 19}, {5, 9, 0}, {64, 257, 40}};

/* Variants applied to one chain: sizes x a few layouts, thread counts, strategies,
 * batch broadcasts and C. */
static void sweep(fm_dtype dt, unsigned epi)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
        ecase c = make_case(dt, sizes[i][0], sizes[i][1], sizes[i][2], epi);
        run_ecase(&c);
        c.threads = 3; /* with several panels: panel_rows splits even small problems */
        c.panel_rows = 8;
        c.la = LAY_TRANS;
        run_ecase(&c);
    }
    /* batched with broadcast batch dims, per-batch vectors, C, alpha/beta, transposed B */
    const int batches[] = {BATCH_BCAST, BATCH_ZERO_STRIDE, BATCH_A_2D};
    for (int bi = 0; bi < 3; ++bi) {
        ecase c = make_case(dt, 19, 150, 250, epi);
        c.batch = batches[bi];
        c.want_parallel = 1;
        c.per_batch_vectors = bi != 1;
        c.with_c = 1;
        c.alpha = 0.75;
        c.beta = -1.5;
        c.lb = LAY_TRANS;
        c.ld = bi == 2 ? LAY_NEGROW : LAY_CONTIG;
        c.threads = 2 + bi;
        c.bg_strided = bi == 1;
        c.aux_rowpad = bi == 0;
        run_ecase(&c);
    }
    /* more threads than row panels: column blocks of 128; then the blas-threads strategy */
    for (int strategy = FM_CPU_STRATEGY_TILES; strategy <= FM_CPU_STRATEGY_BLAS_THREADS; ++strategy) {
        ecase c = make_case(dt, 6, 1000, 350, epi);
        c.threads = 4;
        c.want_parallel = 1;
        c.strategy = strategy;
        c.with_c = 1;
        c.beta = 0.5;
        run_ecase(&c);
        c = make_case(dt, 70, 300, 40, epi);
        c.threads = 3;
        c.strategy = strategy;
        c.la = LAY_STRIDED; /* packed copy of a */
        c.want_parallel = 1;
        c.ld = LAY_STRIDED; /* a temporary d */
        c.batch = BATCH_BCAST;
        run_ecase(&c);
    }
}

static void test_forward_activations(void)
{
    const unsigned acts[] = {FM_EPILOGUE_SIGMOID, FM_EPILOGUE_TANH, FM_EPILOGUE_SILU, FM_EPILOGUE_CLAMP,
                             FM_EPILOGUE_RELU, FM_EPILOGUE_GELU};
    for (int d = 0; d < 2; ++d)
        for (size_t a = 0; a < sizeof acts / sizeof acts[0]; ++a) {
            sweep(real_dtypes[d], acts[a]);
            sweep(real_dtypes[d], acts[a] | FM_EPILOGUE_BIAS | FM_EPILOGUE_AUX);
            ecase c = make_case(real_dtypes[d], 33, 70, 12, acts[a] | FM_EPILOGUE_BIAS);
            c.with_c = 1;
            c.beta = 2.0;
            run_ecase(&c);
            c.epi = acts[a] | FM_EPILOGUE_AUX;
            c.threads = 2;
            c.panel_rows = 5;
            run_ecase(&c);
        }
}

static void test_clamp_bounds(void)
{
    /* tight, wide, degenerate (lo == hi) and one-sided bounds; large values so many clamp */
    const double bounds[][2] = {{-0.05, 0.05}, {-10.0, 10.0}, {0.2, 0.2}, {0.0, 1e30}, {-1e30, -0.1}};
    for (int d = 0; d < 2; ++d)
        for (int i = 0; i < 5; ++i) {
            ecase c = make_case(real_dtypes[d], 40, 77, 30, FM_EPILOGUE_CLAMP | FM_EPILOGUE_BIAS | FM_EPILOGUE_AUX);
            c.lo = bounds[i][0];
            c.hi = bounds[i][1];
            c.alpha = 3.0;
            run_ecase(&c);
        }
}

static void test_relu_mask(void)
{
    /* every N around the byte and 128-bit row boundaries, M = 1, batched, column blocks */
    const int64_t ns[] = {1, 7, 8, 9, 127, 128, 129, 255, 256, 300, 1000};
    for (int d = 0; d < 2; ++d)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; ++i) {
            ecase c = make_case(real_dtypes[d], 3, ns[i], 11, FM_EPILOGUE_RELU | FM_EPILOGUE_AUX);
            run_ecase(&c);
            c.m = 1;
            c.threads = 4; /* column blocks when N >= 256 */
            c.epi |= FM_EPILOGUE_BIAS;
            run_ecase(&c);
            c.m = 9;
            c.batch = BATCH_BCAST;
            c.strategy = FM_CPU_STRATEGY_BLAS_THREADS;
            run_ecase(&c);
            if (ns[i] >= 256) { /* column blocks of 128 on parallel tiles: mask bytes at block edges */
                c = make_case(real_dtypes[d], 5, ns[i], 4200000 / (10 * ns[i]) + 1, FM_EPILOGUE_RELU | FM_EPILOGUE_AUX);
                c.threads = 4;
                c.want_parallel = 1;
                run_ecase(&c);
            }
        }
}

static void test_backward(void)
{
    const unsigned chains[] = {FM_EPILOGUE_DRELU, FM_EPILOGUE_DGELU, FM_EPILOGUE_DRELU | FM_EPILOGUE_BGRAD,
                               FM_EPILOGUE_DGELU | FM_EPILOGUE_BGRAD};
    for (int d = 0; d < 2; ++d)
        for (int e = 0; e < 4; ++e) sweep(real_dtypes[d], chains[e]);
    /* mask bits across column blocks, N not a multiple of 8 */
    for (int d = 0; d < 2; ++d) {
        ecase c = make_case(real_dtypes[d], 5, 1283, 400, FM_EPILOGUE_DRELU | FM_EPILOGUE_BGRAD);
        c.threads = 4;
        c.want_parallel = 1;
        run_ecase(&c);
        c.want_parallel = 0;
        c.m = 1;
        run_ecase(&c);
    }
}

static void test_bgrad_ab(void)
{
    const unsigned chains[] = {FM_EPILOGUE_BGRADA, FM_EPILOGUE_BGRADB};
    for (int d = 0; d < 4; ++d)
        for (int e = 0; e < 2; ++e) {
            sweep(all_dtypes[d], chains[e]);
            ecase c = make_case(all_dtypes[d], 30, 20, 10, chains[e]);
            c.la = LAY_NEGBOTH;
            c.lb = LAY_STRIDED;
            c.with_c = 1;
            c.beta = fm_dtype_is_complex(all_dtypes[d]) ? CMPLX(0.5, -0.5) : 0.5;
            c.alpha = fm_dtype_is_complex(all_dtypes[d]) ? CMPLX(-1.0, 0.25) : -1.0;
            run_ecase(&c);
            c.lb = LAY_TRANS;
            c.la = LAY_TRANS;
            c.threads = 2;
            c.strategy = FM_CPU_STRATEGY_BLAS_THREADS;
            c.want_parallel = 1;
            run_ecase(&c);
            c.threads = 4; /* tiles with column blocks: only the first block sums A's rows */
            c.strategy = 0;
            c.m = 3;
            c.n = 700;
            c.k = 1000;
            c.want_parallel = 1;
            c.lb = LAY_CONTIG;
            run_ecase(&c);
        }
}

/* M == 0 or N == 0: no product, but the gradient along the other extent is defined. */
static void test_bgrad_empty(void)
{
    const unsigned chains[] = {FM_EPILOGUE_BGRADA, FM_EPILOGUE_BGRADB, FM_EPILOGUE_DRELU | FM_EPILOGUE_BGRAD,
                               FM_EPILOGUE_DGELU | FM_EPILOGUE_BGRAD};
    const int64_t sz[][3] = {{0, 9, 5}, {7, 0, 5}, {0, 9, 0}};
    for (int d = 0; d < 2; ++d)
        for (int e = 0; e < 4; ++e)
            for (int i = 0; i < 3; ++i) {
                ecase c = make_case(real_dtypes[d], sz[i][0], sz[i][1], sz[i][2], chains[e]);
                run_ecase(&c);
                c.batch = BATCH_A_2D;
                c.la = LAY_TRANS;
                run_ecase(&c);
            }
    for (int d = 2; d < 4; ++d) {
        ecase c = make_case(all_dtypes[d], 0, 6, 4, FM_EPILOGUE_BGRADB);
        run_ecase(&c);
        c = make_case(all_dtypes[d], 6, 0, 4, FM_EPILOGUE_BGRADA);
        run_ecase(&c);
    }
}

static void test_complex_bias(void)
{
    for (int d = 2; d < 4; ++d) {
        ecase c = make_case(all_dtypes[d], 30, 20, 10, FM_EPILOGUE_BIAS);
        run_ecase(&c);
        c.batch = BATCH_BCAST;
        c.per_batch_vectors = 1;
        c.with_c = 1;
        c.beta = CMPLX(0.25, 1.0);
        c.lb = LAY_TRANS;
        c.threads = 3;
        run_ecase(&c);
    }
}

static void test_scale(void)
{
    const unsigned chains[] = {FM_EPILOGUE_SCALE, FM_EPILOGUE_SCALE | FM_EPILOGUE_BIAS,
                               FM_EPILOGUE_SCALE | FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU | FM_EPILOGUE_AUX,
                               FM_EPILOGUE_SCALE | FM_EPILOGUE_GELU | FM_EPILOGUE_AUX,
                               FM_EPILOGUE_SCALE | FM_EPILOGUE_BIAS | FM_EPILOGUE_SILU,
                               FM_EPILOGUE_SCALE | FM_EPILOGUE_CLAMP};
    for (int d = 0; d < 2; ++d)
        for (size_t e = 0; e < sizeof chains / sizeof chains[0]; ++e) {
            sweep(real_dtypes[d], chains[e]);
            /* D = C in place: the GEMM may not overwrite C before the combine reads it */
            for (int strategy = FM_CPU_STRATEGY_TILES; strategy <= FM_CPU_STRATEGY_BLAS_THREADS; ++strategy) {
                ecase c = make_case(real_dtypes[d], 200, 300, 64, chains[e]);
                c.with_c = c.c_is_d = 1;
                c.want_parallel = 1;
                c.beta = 0.5;
                c.alpha = -2.0;
                c.threads = 3;
                c.strategy = strategy;
                c.panel_rows = strategy == FM_CPU_STRATEGY_TILES ? 8 : 0; /* many panels: scratch reuse */
                run_ecase(&c);
                c.ld = LAY_ROWPAD;
                c.batch = BATCH_ZERO_STRIDE;
                c.k = 0;
                c.want_parallel = strategy == FM_CPU_STRATEGY_BLAS_THREADS;
                run_ecase(&c);
            }
        }
    /* in place without scale still works (the preload path) */
    ecase c = make_case(FM_F32, 45, 300, 200, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU);
    c.with_c = c.c_is_d = 1;
    c.want_parallel = 1;
    c.beta = 0.5;
    c.threads = 3;
    run_ecase(&c);
}

/* The same plan twice gives bit-identical bias gradients; bgrada/bgradb do not depend
 * on the thread count either (each output is summed by one thread in k order). */
static void test_determinism(void)
{
    const unsigned chains[] = {FM_EPILOGUE_DRELU | FM_EPILOGUE_BGRAD, FM_EPILOGUE_DGELU | FM_EPILOGUE_BGRAD,
                               FM_EPILOGUE_BGRADA, FM_EPILOGUE_BGRADB};
    for (int d = 0; d < 2; ++d)
        for (int e = 0; e < 4; ++e) {
            const int64_t m = 300, n = 200, k = 64;
            int64_t len = (chains[e] & FM_EPILOGUE_BGRADA) ? m : n;
            double complex *r[3];
            const int threads[3] = {4, 4, 1};
            for (int t = 0; t < 3; ++t) {
                r[t] = calloc((size_t)len, sizeof **r);
                ecase c = make_case(real_dtypes[d], m, n, k, chains[e]);
                c.threads = threads[t];
                c.want_parallel = threads[t] > 1;
                c.bgrad_out = r[t];
                run_ecase(&c);
            }
            int same_run = memcmp(r[0], r[1], sizeof **r * (size_t)len) == 0;
            int same_threads = memcmp(r[0], r[2], sizeof **r * (size_t)len) == 0;
            CHECK_MSG(same_run, "%s epilogue 0x%x: two runs of one plan gave different bias gradients",
                      fm_dtype_name(real_dtypes[d]), chains[e]);
            if (chains[e] & (FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB))
                CHECK_MSG(same_threads, "%s epilogue 0x%x: 4 and 1 threads gave different bias gradients",
                          fm_dtype_name(real_dtypes[d]), chains[e]);
            for (int t = 0; t < 3; ++t) free(r[t]);
        }
}

/* describe() names the chain and counts the passes over D honestly. */
static void test_describe(void)
{
    const struct {
        unsigned epi;
        int strategy, with_c, passes;
    } rows[] = {
        {FM_EPILOGUE_DRELU | FM_EPILOGUE_BGRAD, FM_CPU_STRATEGY_TILES, 0, 1},
        {FM_EPILOGUE_SCALE | FM_EPILOGUE_BIAS | FM_EPILOGUE_SIGMOID, FM_CPU_STRATEGY_TILES, 1, 1},
        {0, FM_CPU_STRATEGY_BLAS_THREADS, 0, 1},
        {FM_EPILOGUE_BIAS, FM_CPU_STRATEGY_BLAS_THREADS, 0, 2},
        {FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, FM_CPU_STRATEGY_BLAS_THREADS, 0, 2}, /* bias folded into the pass */
        {FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, FM_CPU_STRATEGY_BLAS_THREADS, 1, 3}, /* beta*C: preloaded */
        {FM_EPILOGUE_SCALE | FM_EPILOGUE_BIAS, FM_CPU_STRATEGY_BLAS_THREADS, 1, 2},
        {FM_EPILOGUE_DGELU | FM_EPILOGUE_BGRAD, FM_CPU_STRATEGY_BLAS_THREADS, 1, 3},
        {FM_EPILOGUE_BGRADB, FM_CPU_STRATEGY_BLAS_THREADS, 0, 1},
    };
    enum { MM = 16, NN = 24, KK = 8 };
    static double a[MM * KK], b[KK * NN], c[MM * NN], d[MM * NN], bias[NN], scale[NN], aux[MM * NN], bg[MM + NN];
    static uint8_t mask[MM * 16];
    int64_t sa[2] = {MM, KK}, sb[2] = {KK, NN}, sd[2] = {MM, NN}, sn[1] = {NN}, sm[2] = {MM, 16};
    fm_tensor ta, tb, tc, td, tbias, tscale, taux, tmask, tbg;
    fm_tensor_init(&ta, a, fm_test_cpu, FM_F64, 2, sa, NULL);
    fm_tensor_init(&tb, b, fm_test_cpu, FM_F64, 2, sb, NULL);
    fm_tensor_init(&tc, c, fm_test_cpu, FM_F64, 2, sd, NULL);
    fm_tensor_init(&td, d, fm_test_cpu, FM_F64, 2, sd, NULL);
    fm_tensor_init(&tbias, bias, fm_test_cpu, FM_F64, 1, sn, NULL);
    fm_tensor_init(&tscale, scale, fm_test_cpu, FM_F64, 1, sn, NULL);
    fm_tensor_init(&taux, aux, fm_test_cpu, FM_F64, 2, sd, NULL);
    fm_tensor_init(&tmask, mask, fm_test_cpu, FM_U8, 2, sm, NULL);
    fm_tensor_init(&tbg, bg, fm_test_cpu, FM_F64, 1, sn, NULL);
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r) {
        unsigned e = rows[r].epi;
        const fm_tensor *ts[FM_MATMUL_NSLOTS] = {
            &ta, &tb, rows[r].with_c ? &tc : NULL, (e & FM_EPILOGUE_BIAS) ? &tbias : NULL, &td,
            (e & FM_EPILOGUE_DRELU) ? &tmask : (e & FM_EPILOGUE_DGELU) ? &taux : NULL,
            (e & ANY_BGRAD) ? &tbg : NULL, (e & FM_EPILOGUE_SCALE) ? &tscale : NULL};
        fm_matmul_options o;
        fm_matmul_options_init(&o);
        o.epilogue = e;
        o.beta[0] = 1.0;
        o.cpu_strategy = rows[r].strategy;
        o.num_threads = 2;
        fm_plan *p = NULL;
        CHECK_OK(fm_matmul_plan_v(g_ctx, ts, &o, &p));
        if (!p) continue;
        char ep[96], want[128];
        fm_epilogue_format(e, ep, sizeof ep);
        snprintf(want, sizeof want, "epilogue=%s passes=%d ", ep, rows[r].passes);
        CHECK_MSG(fm_test_contains(fm_plan_describe(p), want), "describe \"%s\" lacks \"%s\"", fm_plan_describe(p),
                  want);
        fm_plan_release(p);
    }
}

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "fm_context_create failed: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_forward_activations);
    RUN_TEST(test_clamp_bounds);
    RUN_TEST(test_relu_mask);
    RUN_TEST(test_backward);
    RUN_TEST(test_bgrad_ab);
    RUN_TEST(test_bgrad_empty);
    RUN_TEST(test_complex_bias);
    RUN_TEST(test_scale);
    RUN_TEST(test_determinism);
    RUN_TEST(test_describe);
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
