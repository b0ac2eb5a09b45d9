/* mmref.h : operand builders and a naive double-precision matmul reference for the C tests.
 *
 * Everything here is deliberately simple (one element at a time, through the strides), so
 * that it can be trusted as the oracle for the library.
 */
#ifndef FM_TEST_MMREF_H
#define FM_TEST_MMREF_H

#include <fusemath/fusemath.h>
#include <complex.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const fm_device fm_test_cpu = {FM_DEVICE_CPU, 0};

/* ---- random numbers (xorshift64*, deterministic) ---- */
typedef struct { uint64_t s; } test_rng;
static inline double rng_uniform(test_rng *r) /* in [-1, 1) */
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    uint64_t x = r->s * 0x2545F4914F6CDD1DULL;
    return (double)(x >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* ---- element access ---- */
static inline double complex elem_get(const void *base, fm_dtype dt, int64_t off)
{
    switch (dt) {
    case FM_F32: return ((const float *)base)[off];
    case FM_F64: return ((const double *)base)[off];
    case FM_C64: return CMPLX(((const float *)base)[2 * off], ((const float *)base)[2 * off + 1]);
    case FM_C128: return CMPLX(((const double *)base)[2 * off], ((const double *)base)[2 * off + 1]);
    case FM_U8: return ((const uint8_t *)base)[off];
    default: return NAN;
    }
}
static inline void elem_set(void *base, fm_dtype dt, int64_t off, double complex v)
{
    switch (dt) {
    case FM_F32: ((float *)base)[off] = (float)creal(v); break;
    case FM_F64: ((double *)base)[off] = creal(v); break;
    case FM_C64:
        ((float *)base)[2 * off] = (float)creal(v);
        ((float *)base)[2 * off + 1] = (float)cimag(v);
        break;
    case FM_C128:
        ((double *)base)[2 * off] = creal(v);
        ((double *)base)[2 * off + 1] = cimag(v);
        break;
    default: break;
    }
}
static inline double dtype_eps(fm_dtype dt)
{
    return (dt == FM_F32 || dt == FM_C64) ? (double)FLT_EPSILON : DBL_EPSILON;
}

/* ---- operands: a buffer and a strided view into it ---- */
typedef enum {
    LAY_CONTIG = 0, /* row-major */
    LAY_TRANS,      /* the matrix is stored column-major: strides (1, rows) */
    LAY_STRIDED,    /* every other row and every other column of a 2x2-larger matrix */
    LAY_NEGROW,     /* rows in reverse: data at the last row, row stride -cols */
    LAY_NEGBOTH,    /* rows and columns reversed: data at the last element */
    LAY_ROWPAD      /* row stride cols + 3, unit column stride */
} test_layout;

static const char *const test_layout_names[] = {"contig", "trans", "strided", "negrow", "negboth", "rowpad"};

typedef struct {
    unsigned char *buf; /* allocation */
    int64_t nbuf;       /* elements in buf */
    fm_tensor t;        /* view; t.data points inside buf */
} test_operand;

/* Make a view of shape (batch..., rows, cols) with the given layout of each matrix; batch
 * dims are packed outside the matrices. Fills the whole buffer with random values in
 * [-1, 1) (rng != NULL) or with the byte pattern 0xA5 (rng == NULL: outputs). */
static inline void operand_make(test_operand *o, fm_dtype dt, int ndim, const int64_t *shape, test_layout lay,
                                test_rng *rng)
{
    memset(o, 0, sizeof *o);
    int64_t r = shape[ndim - 2], c = shape[ndim - 1];
    if (r == 0 || c == 0) lay = LAY_CONTIG;
    int64_t foot = 0, rs = 0, cs = 0, start = 0;
    switch (lay) {
    case LAY_CONTIG: foot = r * c; rs = c; cs = 1; break;
    case LAY_TRANS: foot = r * c; rs = 1; cs = r; break;
    case LAY_STRIDED: foot = 4 * r * c; rs = 4 * c; cs = 2; break;
    case LAY_NEGROW: foot = r * c; rs = -c; cs = 1; start = (r - 1) * c; break;
    case LAY_NEGBOTH: foot = r * c; rs = -c; cs = -1; start = r * c - 1; break;
    case LAY_ROWPAD: foot = r * (c + 3); rs = c + 3; cs = 1; break;
    }
    int64_t strides[FM_MAX_NDIM];
    strides[ndim - 2] = rs;
    strides[ndim - 1] = cs;
    int64_t nb = 1;
    for (int i = ndim - 3; i >= 0; --i) {
        strides[i] = foot * nb;
        nb *= shape[i];
    }
    o->nbuf = foot * nb + 1;
    size_t es = fm_dtype_size(dt);
    o->buf = malloc((size_t)o->nbuf * es + 64);
    if (rng) {
        for (int64_t i = 0; i < o->nbuf; ++i)
            elem_set(o->buf, dt, i, CMPLX(rng_uniform(rng), fm_dtype_is_complex(dt) ? rng_uniform(rng) : 0.0));
    } else {
        memset(o->buf, 0xA5, (size_t)o->nbuf * es);
    }
    fm_tensor_init(&o->t, o->buf + start * (int64_t)es, fm_test_cpu, dt, ndim, shape, strides);
}

/* A C-contiguous operand (1-D allowed). */
static inline void operand_contig(test_operand *o, fm_dtype dt, int ndim, const int64_t *shape, test_rng *rng)
{
    memset(o, 0, sizeof *o);
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    o->nbuf = n;
    size_t es = fm_dtype_size(dt);
    o->buf = malloc((size_t)(n ? n : 1) * es + 64);
    if (rng) {
        for (int64_t i = 0; i < n; ++i)
            elem_set(o->buf, dt, i, CMPLX(rng_uniform(rng), fm_dtype_is_complex(dt) ? rng_uniform(rng) : 0.0));
    } else {
        memset(o->buf, 0xA5, (size_t)(n ? n : 1) * es);
    }
    fm_tensor_init(&o->t, o->buf, fm_test_cpu, dt, ndim, shape, NULL);
}

static inline void operand_free(test_operand *o)
{
    free(o->buf);
    o->buf = NULL;
}

/* Element offset (from t->data) of full index idx[0..t->ndim-1]. */
static inline int64_t tensor_offset(const fm_tensor *t, const int64_t *idx)
{
    int64_t off = 0;
    for (int i = 0; i < t->ndim; ++i) off += idx[i] * t->strides[i];
    return off;
}

/* Mark every buffer element reachable through the view; returns a byte map of nbuf. */
static inline unsigned char *operand_footprint(const test_operand *o)
{
    unsigned char *map = calloc((size_t)o->nbuf + 1, 1);
    int64_t n = fm_tensor_numel(&o->t);
    size_t es = fm_dtype_size(o->t.dtype);
    int64_t base = ((const unsigned char *)o->t.data - o->buf) / (int64_t)es;
    int64_t idx[FM_MAX_NDIM] = {0};
    for (int64_t e = 0; e < n; ++e) {
        int64_t rem = e;
        for (int i = o->t.ndim - 1; i >= 0; --i) {
            idx[i] = rem % o->t.shape[i];
            rem /= o->t.shape[i];
        }
        map[base + tensor_offset(&o->t, idx)] = 1;
    }
    return map;
}

/* Number of buffer elements outside the view that no longer hold the 0xA5 pattern. */
static inline int64_t operand_count_clobbered(const test_operand *o)
{
    unsigned char *map = operand_footprint(o);
    size_t es = fm_dtype_size(o->t.dtype);
    int64_t bad = 0;
    for (int64_t i = 0; i < o->nbuf; ++i) {
        if (map[i]) continue;
        for (size_t b = 0; b < es; ++b)
            if (o->buf[(size_t)i * es + b] != 0xA5) {
                ++bad;
                break;
            }
    }
    free(map);
    return bad;
}

/* ---- the reference ---- */
static inline double gelu_tanh(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* Offset in t of an operand broadcast against D's batch index bidx[0..nbd-1] (NumPy rules:
 * dims aligned at the right, extent 1 broadcasts), followed by `tail` trailing indices. */
static inline int64_t bcast_offset(const fm_tensor *t, int ntail, const int64_t *tail, int nbd, const int64_t *bidx)
{
    int64_t off = 0;
    int tb = t->ndim - ntail;
    for (int i = 0; i < tb; ++i) {
        int di = i + nbd - tb;
        int64_t ix = (t->shape[i] == 1 || di < 0) ? 0 : bidx[di];
        off += ix * t->strides[i];
    }
    for (int i = 0; i < ntail; ++i) {
        int64_t ix = t->shape[tb + i] == 1 ? 0 : tail[i];
        off += ix * t->strides[tb + i];
    }
    return off;
}

typedef struct {
    int64_t batch, m, n, k;
    double complex *pre;  /* batch*m*n pre-activation values */
    double complex *post; /* batch*m*n after the activation */
    double *tol;          /* batch*m*n absolute tolerance */
} mm_ref;

/* D = act(alpha*A@B + beta*C + bias) with d giving the output shape. c, bias may be NULL. */
static inline void mm_reference(mm_ref *r, const fm_tensor *a, const fm_tensor *b, const fm_tensor *c,
                                const fm_tensor *bias, const fm_tensor *d, double complex alpha, double complex beta,
                                unsigned epilogue)
{
    int nbd = d->ndim - 2;
    r->m = d->shape[d->ndim - 2];
    r->n = d->shape[d->ndim - 1];
    r->k = a->shape[a->ndim - 1];
    r->batch = 1;
    for (int i = 0; i < nbd; ++i) r->batch *= d->shape[i];
    size_t cnt = (size_t)(r->batch * r->m * r->n) + 1;
    r->pre = malloc(cnt * sizeof *r->pre);
    r->post = malloc(cnt * sizeof *r->post);
    r->tol = malloc(cnt * sizeof *r->tol);
    double eps = dtype_eps(d->dtype);
    double cfac = fm_dtype_is_complex(d->dtype) ? 4.0 : 2.0;
    double lip = (epilogue & FM_EPILOGUE_GELU) ? 1.2 : 1.0;
    int64_t bidx[FM_MAX_NDIM] = {0};
    for (int64_t bt = 0; bt < r->batch; ++bt) {
        int64_t rem = bt;
        for (int i = nbd - 1; i >= 0; --i) {
            bidx[i] = rem % d->shape[i];
            rem /= d->shape[i];
        }
        for (int64_t i = 0; i < r->m; ++i) {
            for (int64_t j = 0; j < r->n; ++j) {
                double complex acc = 0;
                double mag = 0;
                for (int64_t l = 0; l < r->k; ++l) {
                    int64_t ta[2] = {i, l}, tb[2] = {l, j};
                    double complex x = elem_get(a->data, a->dtype, bcast_offset(a, 2, ta, nbd, bidx));
                    double complex y = elem_get(b->data, b->dtype, bcast_offset(b, 2, tb, nbd, bidx));
                    acc += x * y;
                    mag += cabs(x) * cabs(y);
                }
                double complex v = alpha * acc;
                double scale = cabs(alpha) * mag;
                if (c) {
                    int64_t tc[2] = {i, j};
                    double complex cv = elem_get(c->data, c->dtype, bcast_offset(c, 2, tc, nbd, bidx));
                    v += beta * cv;
                    scale += cabs(beta) * cabs(cv);
                }
                if (bias && (epilogue & FM_EPILOGUE_BIAS)) {
                    int64_t tj[1] = {j};
                    double complex bv = elem_get(bias->data, bias->dtype, bcast_offset(bias, 1, tj, nbd, bidx));
                    v += bv;
                    scale += cabs(bv);
                }
                size_t o = (size_t)((bt * r->m + i) * r->n + j);
                r->pre[o] = v;
                double complex p = v;
                if (epilogue & FM_EPILOGUE_RELU) p = creal(v) > 0 ? creal(v) : 0.0;
                if (epilogue & FM_EPILOGUE_GELU) p = gelu_tanh(creal(v));
                r->post[o] = p;
                r->tol[o] = lip * cfac * (double)(r->k + 4) * eps * (scale + cabs(v)) + 1e3 * DBL_MIN;
            }
        }
    }
}

static inline void mm_ref_free(mm_ref *r)
{
    free(r->pre);
    free(r->post);
    free(r->tol);
}

/* Compare a (batch..., M, N) view `out` with want[] (pre or post); returns mismatches and
 * writes the first one into *first (flattened index) and its values. */
static inline int64_t mm_compare(const fm_tensor *out, const mm_ref *r, const double complex *want, int64_t *first,
                                 double complex *got_first, double complex *want_first)
{
    int nbd = out->ndim - 2;
    int64_t bad = 0, idx[FM_MAX_NDIM] = {0};
    *first = -1;
    for (int64_t bt = 0; bt < r->batch; ++bt) {
        int64_t rem = bt;
        for (int i = nbd - 1; i >= 0; --i) {
            idx[i] = rem % out->shape[i];
            rem /= out->shape[i];
        }
        for (int64_t i = 0; i < r->m; ++i)
            for (int64_t j = 0; j < r->n; ++j) {
                idx[nbd] = i;
                idx[nbd + 1] = j;
                double complex g = elem_get(out->data, out->dtype, tensor_offset(out, idx));
                size_t o = (size_t)((bt * r->m + i) * r->n + j);
                double complex w = want[o];
                if (!(cabs(g - w) <= r->tol[o])) { /* NaN counts as a mismatch */
                    if (bad++ == 0) {
                        *first = (int64_t)o;
                        *got_first = g;
                        *want_first = w;
                    }
                }
            }
    }
    return bad;
}

#endif
