/* test_cuda_epilogue_kernel_gpu.c : the generated elementwise epilogue kernel and the column-sum
 * kernel (fusion/cuda/cuda_epilogue_kernel.c) on a GPU, against a double-precision reference
 * computed here: every dtype x chain x add_c over unit-stride, padded, column-major and
 * negative/strided layouts (relu masks with N = 1, 7, 129, 300, batch 3, bit-exact, padding
 * bits zero, bytes outside the rows untouched), and column sums for every dtype and layout,
 * including rows = 1, rows = 0 and 100000 x 3, run twice for determinism.
 * Skips (exit 0, "skipped: no GPU") without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <fusemath/fusemath.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include "cuda/cuda_epilogue_kernel.h"
#include "cuda/nvrtc_cache.h"
#include "epilogue.h"
#include "ew_chains.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <time.h>

#include "env_settings.h"

/* ------------------------------------------------------------------------ */
/* host helpers                                                             */
/* ------------------------------------------------------------------------ */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(double lo, double hi)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t x = rng_state * 0x2545F4914F6CDD1Dull;
    return lo + (hi - lo) * (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float h2f(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return s ? -f : f;
    }
    if (e == 31)
        return bits_f(s | 0x7f800000u | (m << 13));
    return bits_f(s | ((e + 112) << 23) | (m << 13));
}

static uint16_t f2h(float f)
{
    uint32_t x = f_bits(f), s = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u)
        return (uint16_t)(s | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0));
    if (x >= 0x477ff000u) /* rounds to >= 65520: inf */
        return (uint16_t)(s | 0x7c00u);
    if (x < 0x38800000u) /* below 2^-14: subnormal, exact scaling then round to nearest even */
        return (uint16_t)(s | (uint32_t)nearbyintf(bits_f(x) * 16777216.0f));
    uint32_t h = (((x >> 23) - 112) << 10) | ((x & 0x7fffffu) >> 13), rem = x & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(s | h);
}

static float bf2f(uint16_t b) { return bits_f((uint32_t)b << 16); }
static uint16_t f2bf(float f)
{
    uint32_t u = f_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* element idx of a buffer of dtype t as (re, im) */
static void get_el(fm_dtype t, const void *p, int64_t i, double *re, double *im)
{
    *im = 0;
    switch (t) {
    case FM_F16: *re = h2f(((const uint16_t *)p)[i]); break;
    case FM_BF16: *re = bf2f(((const uint16_t *)p)[i]); break;
    case FM_F32: *re = ((const float *)p)[i]; break;
    case FM_F64: *re = ((const double *)p)[i]; break;
    case FM_C64: *re = ((const float *)p)[2 * i], *im = ((const float *)p)[2 * i + 1]; break;
    case FM_C128: *re = ((const double *)p)[2 * i], *im = ((const double *)p)[2 * i + 1]; break;
    default: *re = NAN; break;
    }
}

static void set_el(fm_dtype t, void *p, int64_t i, double re, double im)
{
    switch (t) {
    case FM_F16: ((uint16_t *)p)[i] = f2h((float)re); break;
    case FM_BF16: ((uint16_t *)p)[i] = f2bf((float)re); break;
    case FM_F32: ((float *)p)[i] = (float)re; break;
    case FM_F64: ((double *)p)[i] = re; break;
    case FM_C64: ((float *)p)[2 * i] = (float)re, ((float *)p)[2 * i + 1] = (float)im; break;
    case FM_C128: ((double *)p)[2 * i] = re, ((double *)p)[2 * i + 1] = im; break;
    default: break;
    }
}

static double tol_of(fm_dtype t)
{
    switch (t) {
    case FM_F16: case FM_BF16: return 1e-2;
    case FM_F32: case FM_C64: return 1e-5;
    default: return 1e-12;
    }
}

/* A host buffer with a device twin. Views point at element `origin` (negative strides). */
typedef struct dbuf {
    unsigned char *h, *init; /* current host copy, initial contents */
    void *d;
    int64_t n;               /* elements */
    size_t es;
} dbuf;

static int dbuf_make(dbuf *b, size_t es, int64_t n)
{
    b->es = es;
    b->n = n < 1 ? 1 : n;
    b->h = malloc((size_t)b->n * es);
    b->init = malloc((size_t)b->n * es);
    b->d = NULL;
    return b->h && b->init && cudaMalloc(&b->d, (size_t)b->n * es) == cudaSuccess;
}
static void dbuf_fill(dbuf *b, fm_dtype t, double lo, double hi)
{
    for (int64_t i = 0; i < b->n; i++)
        if (t == FM_U8)
            b->h[i] = (unsigned char)(urand(0, 256));
        else
            set_el(t, b->h, i, urand(lo, hi), fm_dtype_is_complex(t) ? urand(lo, hi) : 0);
    memcpy(b->init, b->h, (size_t)b->n * b->es);
}
static int dbuf_upload(dbuf *b) { return cudaMemcpy(b->d, b->h, (size_t)b->n * b->es, cudaMemcpyHostToDevice) == cudaSuccess; }
static int dbuf_download(dbuf *b) { return cudaMemcpy(b->h, b->d, (size_t)b->n * b->es, cudaMemcpyDeviceToHost) == cudaSuccess; }
static void dbuf_free(dbuf *b)
{
    free(b->h), free(b->init);
    if (b->d)
        cudaFree(b->d);
    memset(b, 0, sizeof *b);
}

/* elements touched by a (batch, rows, cols) view with these strides: [lo, hi] offsets */
static void span(int64_t batch, int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t bs, int64_t *lo, int64_t *hi)
{
    *lo = *hi = 0;
    int64_t ext[3] = {batch - 1, rows - 1, cols - 1}, st[3] = {bs, rs, cs};
    for (int k = 0; k < 3; k++) {
        if (ext[k] <= 0)
            continue;
        if (st[k] < 0)
            *lo += ext[k] * st[k];
        else
            *hi += ext[k] * st[k];
    }
}

/* a strided operand: buffer + view (ptr at element `origin`, 256-byte aligned plus `misalign`
 * elements, with slack on both sides to catch stray writes) */
typedef struct opnd {
    dbuf b;
    int64_t origin, rs, cs, bs;
} opnd;

static int opnd_make(opnd *o, fm_dtype t, size_t es, int64_t batch, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                     int64_t bs, double lo, double hi, int misalign)
{
    int64_t a, z;
    span(batch, rows, cols, rs, cs, bs, &a, &z);
    const int64_t slack = 256 / (int64_t)es;
    o->origin = -a + slack + misalign;
    o->rs = rs, o->cs = cs, o->bs = bs;
    if (!dbuf_make(&o->b, es, z - a + 2 * slack + misalign))
        return 0;
    dbuf_fill(&o->b, t, lo, hi);
    return dbuf_upload(&o->b);
}
static fm_cuda_view opnd_view(const opnd *o)
{
    fm_cuda_view v = {(unsigned char *)o->b.d + o->origin * (int64_t)o->b.es, o->rs, o->cs, o->bs};
    return v;
}
static int64_t opnd_at(const opnd *o, int64_t b, int64_t i, int64_t j) { return o->origin + b * o->bs + i * o->rs + j * o->cs; }

/* ------------------------------------------------------------------------ */
/* reference epilogue                                                       */
/* ------------------------------------------------------------------------ */
static const double K0 = 0.7978845608028654, K1 = 0.044715;
static double gelu(double x) { return 0.5 * x * (1 + tanh(K0 * (x + K1 * x * x * x))); }
static double dgelu(double x)
{
    double th = tanh(K0 * (x + K1 * x * x * x));
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * K0 * (1 + 3 * K1 * x * x);
}
static double act(unsigned e, double x, const double *clamp)
{
    if (e & FM_EPILOGUE_RELU) return x > 0 ? x : 0;
    if (e & FM_EPILOGUE_GELU) return gelu(x);
    if (e & FM_EPILOGUE_SIGMOID) return 1 / (1 + exp(-x));
    if (e & FM_EPILOGUE_TANH) return tanh(x);
    if (e & FM_EPILOGUE_SILU) return x / (1 + exp(-x));
    if (e & FM_EPILOGUE_CLAMP) return fmin(fmax(x, clamp[0]), clamp[1]);
    return x;
}

/* Layouts of D (and C, bias, scale alongside):
 *  0 contiguous; 1 padded rows, broadcast C and bias over the batch; 2 column-major D and C,
 *  strided bias/scale (strided kernel path, rows fastest); 3 every other column, rows in reverse
 *  (strided path, negative row stride). */
enum { NLAYOUTS = 4 };
static const char *const layout_names[NLAYOUTS] = {"contig", "rowpad+bcast", "colmajor", "cs2+negrow"};

typedef struct ew_case {
    fm_dtype t;
    unsigned e;
    int add_c;
    int64_t m, n, batch;
    int layout;
} ew_case;

static int64_t n_bad_total;

static void run_ew_case(const fm_cuda_ew *k, const ew_case *c)
{
    const fm_dtype t = c->t;
    const unsigned e = c->e;
    const int64_t m = c->m, n = c->n, B = c->batch, L = c->layout;
    const size_t es = fm_dtype_size(t);
    const fm_dtype st = t == FM_F64 ? FM_F64 : FM_F32; /* scale dtype */
    const int mask_out = (e & FM_EPILOGUE_RELU) && (e & FM_EPILOGUE_AUX), mask_in = (e & FM_EPILOGUE_DRELU) != 0;
    const int xaux_out = (e & FM_EPILOGUE_AUX) && !mask_out, xaux_in = (e & FM_EPILOGUE_DGELU) != 0;
    const int64_t R = fm_relu_mask_row_bytes(n);
    char what[256], chain[96];
    fm_epilogue_format(e, chain, sizeof chain);
    snprintf(what, sizeof what, "%s %s%s m=%lld n=%lld batch=%lld %s", fm_dtype_name(t), chain, c->add_c ? " +C" : "",
             (long long)m, (long long)n, (long long)B, layout_names[L]);

    opnd D = {0}, C = {0}, bias = {0}, scale = {0}, aux = {0};
    int ok = 1;
    /* D */
    if (L == 0) ok &= opnd_make(&D, t, es, B, m, n, n, 1, m * n, -2, 2, 0);
    if (L == 1) ok &= opnd_make(&D, t, es, B, m, n, n + 5, 1, m * (n + 5) + 3, -2, 2, 1); /* misaligned */
    if (L == 2) ok &= opnd_make(&D, t, es, B, m, n, 1, m, m * n + 1, -2, 2, 0);
    if (L == 3) ok &= opnd_make(&D, t, es, B, m, n, -(2 * n + 1), 2, m * (2 * n + 1), -2, 2, 0);
    /* C */
    if (c->add_c) {
        if (L == 0) ok &= opnd_make(&C, t, es, B, m, n, n, 1, m * n, -1, 1, 0);
        if (L == 1) ok &= opnd_make(&C, t, es, B, m, n, n + 2, 1, 0, -1, 1, 0);
        if (L == 2) ok &= opnd_make(&C, t, es, B, m, n, 1, m, m * n, -1, 1, 0);
        if (L == 3) ok &= opnd_make(&C, t, es, B, m, n, n, 1, m * n, -1, 1, 0);
    }
    if (e & FM_EPILOGUE_BIAS) {
        int64_t cs = L == 2 ? 2 : 1, bs = L == 1 ? 0 : cs * n;
        ok &= opnd_make(&bias, t, es, B, 1, n, 0, cs, bs, -1, 1, 0);
    }
    if (e & FM_EPILOGUE_SCALE) {
        int64_t cs = L == 2 ? 3 : 1, bs = L == 1 ? 0 : cs * n + 1;
        ok &= opnd_make(&scale, st, fm_dtype_size(st), B, 1, n, 0, cs, bs, -1.5, 1.5, 0);
    }
    if (mask_out || mask_in) {
        int64_t pitch = (L & 1) ? R + 16 : R;
        ok &= opnd_make(&aux, FM_U8, 1, B, m, pitch, pitch, 1, m * pitch, 0, 0, 0);
    } else if (xaux_out || xaux_in) {
        int64_t rs = L == 0 ? n : n + 1;
        ok &= opnd_make(&aux, t, es, B, m, n, rs, 1, m * rs, -3, 3, 0);
    }
    CHECK_MSG(ok, "%s: allocation failed", what);
    if (!ok)
        goto out;

    fm_cuda_ew_args a;
    memset(&a, 0, sizeof a);
    a.m = m, a.n = n, a.batch = B;
    a.d = opnd_view(&D);
    if (c->add_c)
        a.c = opnd_view(&C);
    if (e & FM_EPILOGUE_BIAS) {
        a.bias = opnd_view(&bias);
        a.bias.rs = 0;
    }
    if (e & FM_EPILOGUE_SCALE)
        a.scale = opnd_view(&scale);
    if (aux.b.d)
        a.aux = opnd_view(&aux);
    const int cplx = fm_dtype_is_complex(t);
    a.beta[0] = 0.75, a.beta[1] = cplx ? -0.5 : 0;
    a.clamp[0] = -0.5, a.clamp[1] = 0.7;

    fm_status s = fm_cuda_ew_launch(k, &a, NULL);
    CHECK_MSG(s == FM_OK, "%s: launch", what);
    cudaError_t ce = cudaDeviceSynchronize();
    CHECK_MSG(ce == cudaSuccess, "%s: %s", what, cudaGetErrorString(ce));
    if (s != FM_OK || ce != cudaSuccess || !dbuf_download(&D.b) || (aux.b.d && !dbuf_download(&aux.b))) {
        CHECK_MSG(0, "%s: no result", what);
        goto out;
    }

    /* expected values; everything outside the views must be unchanged */
    const double tol = tol_of(t), sign_tol = (t == FM_F64) ? 1e-12 : 1e-5;
    unsigned char *d_cover = calloc((size_t)D.b.n, 1), *a_cover = aux.b.d ? calloc((size_t)aux.b.n, 1) : NULL;
    int64_t bad = 0, bad_mask = 0;
    double worst = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < m; i++) {
            unsigned char mrow[4096];
            memset(mrow, 0, sizeof mrow);
            int64_t near0[64]; /* bits whose sign is within rounding of 0: not checked */
            int nnear = 0;
            for (int64_t j = 0; j < n; j++) {
                double xr, xi, vr, vi;
                const int64_t od = opnd_at(&D, b, i, j);
                get_el(t, D.b.init, od, &xr, &xi);
                if (e & FM_EPILOGUE_SCALE) {
                    get_el(st, scale.b.init, opnd_at(&scale, b, 0, j), &vr, &vi);
                    xr *= vr;
                }
                if (c->add_c) {
                    get_el(t, C.b.init, opnd_at(&C, b, i, j), &vr, &vi);
                    double br = a.beta[0], bi = a.beta[1];
                    xr += br * vr - bi * vi;
                    xi += br * vi + bi * vr;
                }
                if (e & FM_EPILOGUE_BIAS) {
                    get_el(t, bias.b.init, opnd_at(&bias, b, 0, j), &vr, &vi);
                    xr += vr, xi += vi;
                }
                if (mask_out) {
                    if (xr > 0)
                        mrow[j / 8] |= (unsigned char)(1u << (j % 8));
                    if (fabs(xr) < sign_tol && nnear < 64)
                        near0[nnear++] = j;
                } else if (xaux_out) {
                    const int64_t oa = opnd_at(&aux, b, i, j);
                    a_cover[oa] = 1;
                    get_el(t, aux.b.h, oa, &vr, &vi);
                    double err = fabs(vr - xr) / (1 + fabs(xr));
                    if (!(err <= tol) && bad++ < 5)
                        fprintf(stderr, "    %s: aux[%lld,%lld,%lld] = %.9g, expected %.9g\n", what, (long long)b,
                                (long long)i, (long long)j, vr, xr);
                }
                if (!cplx)
                    xr = act(e, xr, a.clamp);
                if (mask_in) {
                    unsigned char byte = aux.b.init[opnd_at(&aux, b, i, j / 8)];
                    if (!((byte >> (j % 8)) & 1))
                        xr = 0;
                } else if (xaux_in) {
                    get_el(t, aux.b.init, opnd_at(&aux, b, i, j), &vr, &vi);
                    xr *= dgelu(vr);
                }
                d_cover[od] = 1;
                get_el(t, D.b.h, od, &vr, &vi);
                double err = hypot(vr - xr, vi - xi) / (1 + hypot(xr, xi));
                if (!(err <= tol)) {
                    if (bad++ < 5)
                        fprintf(stderr, "    %s: D[%lld,%lld,%lld] = (%.9g, %.9g), expected (%.9g, %.9g)\n", what,
                                (long long)b, (long long)i, (long long)j, vr, vi, xr, xi);
                } else if (err > worst) {
                    worst = err;
                }
            }
            if (mask_out) {
                for (int64_t q = 0; q < R; q++) {
                    const int64_t oa = opnd_at(&aux, b, i, q);
                    a_cover[oa] = 1;
                    unsigned char got = aux.b.h[oa], want = mrow[q];
                    for (int z = 0; z < nnear; z++)
                        if (near0[z] / 8 == q) {
                            unsigned bit = 1u << (near0[z] % 8);
                            got = (unsigned char)(got & ~bit), want = (unsigned char)(want & ~bit);
                        }
                    if (got != want && bad_mask++ < 5)
                        fprintf(stderr, "    %s: mask[%lld,%lld] byte %lld = 0x%02x, expected 0x%02x\n", what,
                                (long long)b, (long long)i, (long long)q, got, want);
                }
            }
        }
    int64_t touched = 0;
    for (int64_t q = 0; q < D.b.n; q++)
        if (!d_cover[q] && memcmp(D.b.h + q * es, D.b.init + q * es, es) != 0)
            touched++;
    if (a_cover)
        for (int64_t q = 0; q < aux.b.n; q++)
            if (!a_cover[q] && memcmp(aux.b.h + q * aux.b.es, aux.b.init + q * aux.b.es, aux.b.es) != 0)
                touched++;
    CHECK_MSG(bad == 0, "%s: %lld wrong values", what, (long long)bad);
    CHECK_MSG(bad_mask == 0, "%s: %lld wrong mask bytes", what, (long long)bad_mask);
    CHECK_MSG(touched == 0, "%s: %lld elements outside the views were written", what, (long long)touched);
    n_bad_total += bad + bad_mask + touched;
    free(d_cover);
    free(a_cover);
out:
    dbuf_free(&D.b), dbuf_free(&C.b), dbuf_free(&bias.b), dbuf_free(&scale.b), dbuf_free(&aux.b);
}

/* ------------------------------------------------------------------------ */
/* Compile every module on all cores first: the creates below then hit the cache. */
typedef struct warm_job {
    fm_cuda_ew_spec spec;
    int colsum;
} warm_job;
static warm_job warm_jobs[512];
static int n_warm, warm_arch;
static pthread_mutex_t warm_lock = PTHREAD_MUTEX_INITIALIZER;
static int warm_next;

static void *warm_main(void *unused)
{
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&warm_lock);
        int i = warm_next++;
        pthread_mutex_unlock(&warm_lock);
        if (i >= n_warm)
            return NULL;
        void *img = NULL;
        size_t n = 0;
        if (warm_jobs[i].colsum)
            fm_cuda_colsum_compile(env_settings(), warm_jobs[i].spec.dtype, warm_arch, &img, &n, NULL);
        else
            fm_cuda_ew_compile(env_settings(), &warm_jobs[i].spec, warm_arch, &img, &n, NULL);
        free(img);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void warm_cache(void)
{
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    warm_arch = major * 10 + minor;
    if (!fm_nvrtc_supports_arch(warm_arch))
        return;
    n_warm = 0;
    for (int d = 0; d < 6; d++) {
        unsigned ch[64];
        int nc = ew_chains(all_dtypes[d], 0, ch);
        for (int c = 0; c < nc; c++)
            for (int add_c = 0; add_c < 2; add_c++)
                warm_jobs[n_warm++].spec = (fm_cuda_ew_spec){.dtype = all_dtypes[d], .epilogue = ch[c], .add_c = add_c};
        warm_jobs[n_warm].spec.dtype = all_dtypes[d];
        warm_jobs[n_warm++].colsum = 1;
    }
    double t0 = now();
    pthread_t th[32];
    int nth = 16;
    for (int i = 0; i < nth; i++)
        pthread_create(&th[i], NULL, warm_main, NULL);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    printf("    %d modules compiled or found in the cache for sm_%d in %.2f s\n", n_warm, warm_arch, now() - t0);
}

static void test_ew_all(void)
{
    static const int64_t ns[4] = {1, 7, 129, 300};
    int ncases = 0, rot = 0;
    double t0 = now();
    for (int d = 0; d < 6; d++) {
        fm_dtype t = all_dtypes[d];
        unsigned ch[64];
        int nc = ew_chains(t, 0, ch);
        for (int c = 0; c < nc; c++)
            for (int add_c = 0; add_c < 2; add_c++) {
                fm_cuda_ew_spec spec = {.dtype = t, .epilogue = ch[c], .add_c = add_c};
                fm_cuda_ew *k = NULL;
                fm_status s = fm_cuda_ew_create(env_settings(), &spec, 0, &k);
                char chain[96];
                fm_epilogue_format(ch[c], chain, sizeof chain);
                CHECK_MSG(s == FM_OK && k, "create %s %s add_c=%d", fm_dtype_name(t), chain, add_c);
                if (!k)
                    continue;
                const int mask = (ch[c] & FM_EPILOGUE_RELU) && (ch[c] & FM_EPILOGUE_AUX);
                if (mask) { /* every N and every layout, batch 3 */
                    for (int q = 0; q < 4; q++)
                        for (int L = 0; L < NLAYOUTS; L++) {
                            ew_case cs = {t, ch[c], add_c, 5 + q, ns[q], 3, L};
                            run_ew_case(k, &cs);
                            ncases++;
                        }
                } else { /* two (N, layout) pairs, rotating */
                    for (int r = 0; r < 2; r++, rot++) {
                        ew_case cs = {t, ch[c], add_c, 3 + rot % 5, ns[(rot / 4) % 4], 1 + rot % 3, rot % NLAYOUTS};
                        run_ew_case(k, &cs);
                        ncases++;
                    }
                }
                fm_cuda_ew_destroy(k);
            }
    }
    printf("    %d elementwise cases in %.2f s (%lld mismatches)\n", ncases, now() - t0, (long long)n_bad_total);
}

/* Grid-stride loop and 64-bit-free large case, plus a bandwidth figure. */
static void test_ew_large(void)
{
    static const fm_dtype ts[2] = {FM_F32, FM_F16};
    for (int q = 0; q < 2; q++) {
        fm_cuda_ew_spec spec = {.dtype = ts[q], .epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_GELU | FM_EPILOGUE_AUX};
        fm_cuda_ew *k = NULL;
        CHECK_OK(fm_cuda_ew_create(env_settings(), &spec, 0, &k));
        if (!k)
            continue;
        ew_case cs = {ts[q], spec.epilogue, 0, 2048, 1024, 2, 0};
        run_ew_case(k, &cs); /* 2*2048*128 items: more than one grid's worth of threads */

        /* bandwidth: 8192 x 8192, D read + written, aux written */
        const int64_t m = 8192, n = 8192;
        const size_t es = fm_dtype_size(ts[q]);
        void *d = NULL, *aux = NULL, *bias = NULL;
        if (cudaMalloc(&d, (size_t)(m * n) * es) == cudaSuccess && cudaMalloc(&aux, (size_t)(m * n) * es) == cudaSuccess &&
            cudaMalloc(&bias, (size_t)n * es) == cudaSuccess) {
            cudaMemset(d, 0, (size_t)(m * n) * es);
            cudaMemset(bias, 0, (size_t)n * es);
            fm_cuda_ew_args a;
            memset(&a, 0, sizeof a);
            a.m = m, a.n = n, a.batch = 1;
            a.d = (fm_cuda_view){d, n, 1, 0};
            a.bias = (fm_cuda_view){bias, 0, 1, 0};
            a.aux = (fm_cuda_view){aux, n, 1, 0};
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0), cudaEventCreate(&e1);
            CHECK_OK(fm_cuda_ew_launch(k, &a, NULL)); /* warm-up */
            cudaEventRecord(e0, NULL);
            for (int r = 0; r < 5; r++)
                fm_cuda_ew_launch(k, &a, NULL);
            cudaEventRecord(e1, NULL);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            ms /= 5;
            printf("    %s bias+gelu+aux %lldx%lld: %.3f ms, %.0f GB/s (D read+write, aux write)\n", fm_dtype_name(ts[q]),
                   (long long)m, (long long)n, ms, 3.0 * (double)(m * n) * (double)es / (ms * 1e6));
            cudaEventDestroy(e0), cudaEventDestroy(e1);
        }
        cudaFree(d), cudaFree(aux), cudaFree(bias);
        fm_cuda_ew_destroy(k);
    }
}

static void test_ew_errors(void)
{
    fm_cuda_ew_spec spec = {.dtype = FM_F32, .epilogue = FM_EPILOGUE_BIAS};
    fm_cuda_ew *k = NULL;
    CHECK_OK(fm_cuda_ew_create(env_settings(), &spec, 0, &k));
    if (!k)
        return;
    fm_cuda_ew_args a;
    memset(&a, 0, sizeof a);
    a.m = 4, a.n = 4, a.batch = 1;
    a.d = (fm_cuda_view){NULL, 4, 1, 0};
    CHECK_STATUS(fm_cuda_ew_launch(k, &a, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("D pointer");
    float *dd = NULL;
    cudaMalloc((void **)&dd, 64);
    a.d.ptr = dd;
    CHECK_STATUS(fm_cuda_ew_launch(k, &a, NULL), FM_ERR_INVALID_ARGUMENT); /* bias missing */
    CHECK_ERROR_MENTIONS("bias");
    a.m = 0;
    CHECK_OK(fm_cuda_ew_launch(k, &a, NULL)); /* empty: nothing to do */
    a.m = -1;
    CHECK_STATUS(fm_cuda_ew_launch(k, &a, NULL), FM_ERR_INVALID_ARGUMENT);
    cudaFree(dd);
    fm_cuda_ew_destroy(k);
    fm_cuda_ew *k2 = (fm_cuda_ew *)1;
    /* no such device; under compute-sanitizer (FM_TEST_UNDER_SANITIZER set by
     * benchmarks/device_gpu.sh) the deliberate CUDA API error would count as a finding */
    if (!getenv("FM_TEST_UNDER_SANITIZER")) {
        CHECK_STATUS(fm_cuda_ew_create(env_settings(), &spec, 1000, &k2), FM_ERR_UNAVAILABLE);
        CHECK(k2 == NULL);
        CHECK_ERROR_MENTIONS("cuda epilogue kernel");
    } else {
        SKIP("invalid device id: a deliberate CUDA API error, left out under the sanitizer");
    }
}

/* ------------------------------------------------------------------------ */
/* column sums                                                              */
/* ------------------------------------------------------------------------ */
typedef struct cs_case {
    int64_t rows, cols, batch;
    int64_t rs, cs, bs; /* x; rs < 0: rows reversed */
    int64_t ocs, obs;   /* out */
    const char *name;
} cs_case;

static void run_colsum_case(const fm_cuda_colsum *k, fm_dtype t, const cs_case *c)
{
    const size_t es = fm_dtype_size(t);
    char what[160];
    snprintf(what, sizeof what, "colsum %s %s %lldx%lld batch %lld", fm_dtype_name(t), c->name, (long long)c->rows,
             (long long)c->cols, (long long)c->batch);
    opnd x = {0}, out = {0};
    int ok = opnd_make(&x, t, es, c->batch, c->rows > 0 ? c->rows : 1, c->cols, c->rs, c->cs, c->bs, -1, 1,
                       strcmp(c->name, "rowpad") == 0 /* misaligned start */);
    ok &= opnd_make(&out, t, es, c->batch, 1, c->cols, 0, c->ocs, c->obs, 5, 6, 0);
    size_t wsb = fm_cuda_colsum_workspace(t, c->rows, c->cols, c->batch);
    void *ws = NULL;
    if (wsb)
        ok &= cudaMalloc(&ws, wsb) == cudaSuccess;
    CHECK_MSG(ok, "%s: allocation failed", what);
    if (!ok)
        goto out;
    if (wsb) { /* too small a workspace is refused */
        CHECK_STATUS(fm_cuda_colsum_launch(k, c->rows, c->cols, c->batch, opnd_view(&x), opnd_view(&out), ws, wsb - 1, NULL),
                     FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("workspace");
    }
    unsigned char *first = NULL;
    for (int rep = 0; rep < 2; rep++) {
        cudaMemcpy(out.b.d, out.b.init, (size_t)out.b.n * es, cudaMemcpyHostToDevice);
        fm_status s = fm_cuda_colsum_launch(k, c->rows, c->cols, c->batch, opnd_view(&x), opnd_view(&out), ws, wsb, NULL);
        cudaError_t ce = cudaDeviceSynchronize();
        CHECK_MSG(s == FM_OK && ce == cudaSuccess, "%s: launch %s / %s", what, fm_status_name(s), cudaGetErrorString(ce));
        if (s != FM_OK || ce != cudaSuccess || !dbuf_download(&out.b))
            goto out;
        if (rep == 0) {
            first = malloc((size_t)out.b.n * es);
            memcpy(first, out.b.h, (size_t)out.b.n * es);
        } else {
            CHECK_MSG(memcmp(first, out.b.h, (size_t)out.b.n * es) == 0, "%s: two runs differ (not deterministic)", what);
        }
    }
    unsigned char *cover = calloc((size_t)out.b.n, 1);
    int64_t bad = 0;
    double tol = t == FM_F16 || t == FM_BF16 ? 1e-2 : tol_of(t);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t j = 0; j < c->cols; j++) {
            double sr = 0, si = 0, ar = 0, vr, vi;
            for (int64_t i = 0; i < c->rows; i++) {
                get_el(t, x.b.init, opnd_at(&x, b, i, j), &vr, &vi);
                sr += vr, si += vi, ar += fabs(vr) + fabs(vi);
            }
            const int64_t o = opnd_at(&out, b, 0, j);
            cover[o] = 1;
            get_el(t, out.b.h, o, &vr, &vi);
            double err = hypot(vr - sr, vi - si);
            /* output rounding relative to the sum + accumulation error relative to sum |x| */
            double lim = tol * hypot(sr, si) + (t == FM_F64 || t == FM_C128 ? 1e-13 : 1e-5) * ar + 1e-30;
            if (!(err <= lim) && bad++ < 5)
                fprintf(stderr, "    %s: out[%lld,%lld] = (%.9g, %.9g), expected (%.9g, %.9g)\n", what, (long long)b,
                        (long long)j, vr, vi, sr, si);
        }
    int64_t touched = 0;
    for (int64_t q = 0; q < out.b.n; q++)
        if (!cover[q] && memcmp(out.b.h + q * es, out.b.init + q * es, es) != 0)
            touched++;
    CHECK_MSG(bad == 0, "%s: %lld wrong sums", what, (long long)bad);
    CHECK_MSG(touched == 0, "%s: %lld output elements outside the view written", what, (long long)touched);
    free(cover);
    free(first);
out:
    if (ws)
        cudaFree(ws);
    dbuf_free(&x.b), dbuf_free(&out.b);
}

static void test_colsum_all(void)
{
    const cs_case cases[] = {
        {1, 300, 1, 300, 1, 300, 1, 300, "rows=1"},
        {100000, 3, 1, 3, 1, 300000, 1, 3, "tall"},
        {100000, 3, 1, 1, 100000, 300000, 1, 3, "tall-transposed(bgrada)"},
        {517, 129, 3, 129, 1, 517 * 129, 1, 129, "contig"},
        {517, 129, 3, 133, 1, 517 * 133 + 1, 1, 131, "rowpad"},
        {517, 129, 3, 1, 517, 517 * 129, 2, 300, "colmajor"},
        {300, 70, 2, 141, 2, 300 * 141, 1, 70, "cs=2"},
        {300, 70, 2, -70, 1, 300 * 70, 1, 70, "negrow"},
        {64, 1, 2, 1, 64, 64, 1, 1, "cols=1"},
        {1000, 40, 2, 40, 1, 0, 1, 40, "batch-broadcast"},
        {0, 5, 2, 5, 1, 5, 1, 5, "rows=0"},
        {4099, 1000, 1, 1000, 1, 0, 1, 1000, "big"},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int d = 0; d < 6; d++) {
        fm_cuda_colsum *k = NULL;
        CHECK_OK(fm_cuda_colsum_create(env_settings(), all_dtypes[d], 0, &k));
        if (!k)
            continue;
        for (int q = 0; q < ncases; q++)
            run_colsum_case(k, all_dtypes[d], &cases[q]);
        fm_cuda_colsum_destroy(k);
    }
    /* bandwidth: f32 8192 x 8192 column sums, row-major and transposed */
    fm_cuda_colsum *k = NULL;
    CHECK_OK(fm_cuda_colsum_create(env_settings(), FM_F32, 0, &k));
    const int64_t m = 8192, n = 8192;
    void *x = NULL, *o = NULL, *ws = NULL;
    size_t wsb = fm_cuda_colsum_workspace(FM_F32, m, n, 1);
    if (k && cudaMalloc(&x, (size_t)(m * n) * 4) == cudaSuccess && cudaMalloc(&o, (size_t)n * 4) == cudaSuccess &&
        (!wsb || cudaMalloc(&ws, wsb) == cudaSuccess)) {
        cudaMemset(x, 0, (size_t)(m * n) * 4);
        for (int tr = 0; tr < 2; tr++) {
            fm_cuda_view xv = {x, tr ? 1 : n, tr ? m : 1, 0}, ov = {o, 0, 1, 0};
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0), cudaEventCreate(&e1);
            CHECK_OK(fm_cuda_colsum_launch(k, m, n, 1, xv, ov, ws, wsb, NULL));
            cudaEventRecord(e0, NULL);
            for (int r = 0; r < 5; r++)
                fm_cuda_colsum_launch(k, m, n, 1, xv, ov, ws, wsb, NULL);
            cudaEventRecord(e1, NULL);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            ms /= 5;
            printf("    colsum f32 %lldx%lld %s: %.3f ms, %.0f GB/s\n", (long long)m, (long long)n,
                   tr ? "column-major (row sums)" : "row-major", ms, (double)(m * n) * 4.0 / (ms * 1e6));
            cudaEventDestroy(e0), cudaEventDestroy(e1);
        }
    }
    cudaFree(x), cudaFree(o);
    if (ws)
        cudaFree(ws);
    fm_cuda_colsum_destroy(k);
}

int main(void)
{
    SKIP_WITHOUT_GPU();
    if (cudaSetDevice(0) != cudaSuccess) {
        printf("skipped: no GPU (cudaSetDevice failed)\n");
        return 0;
    }
    double t0 = now();
    warm_cache();
    RUN_TESTS(test_ew_errors, test_ew_all, test_ew_large, test_colsum_all);
    printf("    total %.2f s\n", now() - t0);
    TEST_MAIN_RETURN();
}

#else /* built without CUDA */
TEST_MAIN_SKIPPED("no GPU (built without CUDA)")
#endif
