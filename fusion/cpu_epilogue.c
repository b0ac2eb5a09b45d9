/* cpu_epilogue.c : preload (beta*C + bias), the scale combine and the activation
 * passes (forward activations, drelu/dgelu, bgrad column sums) for CPU panels.
 * Each body is written once as a macro and instantiated per dtype with the full
 * function name spelled out, so grep finds every definition. */
#include "cpu_epilogue.h"
#include "epilogue.h"

#include <complex.h>
#include <math.h>
#include <string.h>

/* ---- preload: D = beta*C + bias ---- */
#define FM_DEFINE_PRELOAD(fname, T, BETA_EXPR)                                                    \
    FM_SIMD_CLONES static void fname(const fm_cpu_panel *p, const double beta[2])                               \
    {                                                                                             \
        const T bt = BETA_EXPR;                                                                   \
        const T *bias = p->bias;                                                                  \
        const T *c = (beta[0] != 0.0 || beta[1] != 0.0) ? (const T *)p->c : NULL;                 \
        for (int64_t i = 0; i < p->rows; i++) {                                                   \
            T *d = (T *)p->d + i * p->ldd;                                                        \
            if (c) {                                                                              \
                const T *cr = c + i * p->c_rs;                                                    \
                if (bias)                                                                         \
                    for (int64_t j = 0; j < p->cols; j++)                                         \
                        d[j] = bt * cr[j * p->c_cs] + bias[j * p->bias_cs];                       \
                else                                                                              \
                    for (int64_t j = 0; j < p->cols; j++)                                         \
                        d[j] = bt * cr[j * p->c_cs];                                              \
            } else if (bias && p->bias_cs == 1) {                                                 \
                memcpy(d, bias, sizeof(T) * (size_t)p->cols);                                     \
            } else if (bias) {                                                                    \
                for (int64_t j = 0; j < p->cols; j++)                                             \
                    d[j] = bias[j * p->bias_cs];                                                  \
            } else {                                                                              \
                memset(d, 0, sizeof(T) * (size_t)p->cols);                                        \
            }                                                                                     \
        }                                                                                         \
    }

/* Call NAME##_f32, _f64, _c64 or _c128 for dtype t with the arguments; `otherwise` for other dtypes. */
#define FM_DISPATCH_DTYPE(t, otherwise, NAME, ...)                                                \
    switch (t) {                                                                                  \
    case FM_F32: NAME##_f32(__VA_ARGS__); break;                                                  \
    case FM_F64: NAME##_f64(__VA_ARGS__); break;                                                  \
    case FM_C64: NAME##_c64(__VA_ARGS__); break;                                                  \
    case FM_C128: NAME##_c128(__VA_ARGS__); break;                                                \
    default: otherwise;                                                                           \
    }

FM_DEFINE_PRELOAD(preload_f32, float, (float)beta[0])
FM_DEFINE_PRELOAD(preload_f64, double, beta[0])
FM_DEFINE_PRELOAD(preload_c64, float complex, (float)beta[0] + (float)beta[1] * I)
FM_DEFINE_PRELOAD(preload_c128, double complex, beta[0] + beta[1] * I)

int fm_cpu_preload(fm_dtype t, const fm_cpu_panel *p, const double beta[2])
{
    if (!p->bias && !(p->c && (beta[0] != 0.0 || beta[1] != 0.0)))
        return 0;
    FM_DISPATCH_DTYPE(t, return 0, preload, p, beta)
    return 1;
}

/* ---- add bias: D += bias (after a beta = 0 GEMM) ---- */
#define FM_DEFINE_ADD_BIAS(fname, T)                                                              \
    FM_SIMD_CLONES static void fname(const fm_cpu_panel *p)                                       \
    {                                                                                             \
        const T *bias = p->bias;                                                                  \
        const int64_t bcs = p->bias_cs;                                                           \
        for (int64_t i = 0; i < p->rows; i++) {                                                   \
            T *d = (T *)p->d + i * p->ldd;                                                        \
            _Pragma("omp simd") for (int64_t j = 0; j < p->cols; j++) d[j] += bias[j * bcs];      \
        }                                                                                         \
    }

FM_DEFINE_ADD_BIAS(add_bias_f32, float)
FM_DEFINE_ADD_BIAS(add_bias_f64, double)
FM_DEFINE_ADD_BIAS(add_bias_c64, float complex)
FM_DEFINE_ADD_BIAS(add_bias_c128, double complex)

void fm_cpu_add_bias(fm_dtype t, const fm_cpu_panel *p)
{
    if (!p->bias)
        return;
    FM_DISPATCH_DTYPE(t, break, add_bias, p)
}

/* ---- scale: D = scale[j] * src + beta*C + bias ---- */
#define FM_DEFINE_SCALE_COMBINE(fname, T)                                                          \
    FM_SIMD_CLONES static void fname(const fm_cpu_panel *p, const T *src, int64_t lds, const double beta[2])    \
    {                                                                                             \
        const T bt = (T)beta[0];                                                                  \
        const T *s = p->scale, *bias = p->bias;                                                   \
        const int64_t scs = p->scale_cs, bcs = p->bias_cs, ccs = p->c_cs;                         \
        const T *c = beta[0] != 0.0 ? (const T *)p->c : NULL;                                     \
        for (int64_t i = 0; i < p->rows; i++) {                                                   \
            T *d = (T *)p->d + i * p->ldd;                                                        \
            const T *g = src + i * lds;                                                           \
            if (c) {                                                                              \
                const T *cr = c + i * p->c_rs;                                                    \
                if (bias) {                                                                       \
                    _Pragma("omp simd") for (int64_t j = 0; j < p->cols; j++) d[j] =               \
                        s[j * scs] * g[j] + bt * cr[j * ccs] + bias[j * bcs];                     \
                } else {                                                                          \
                    _Pragma("omp simd") for (int64_t j = 0; j < p->cols; j++) d[j] =               \
                        s[j * scs] * g[j] + bt * cr[j * ccs];                                     \
                }                                                                                 \
            } else if (bias) {                                                                    \
                _Pragma("omp simd") for (int64_t j = 0; j < p->cols; j++) d[j] =                   \
                    s[j * scs] * g[j] + bias[j * bcs];                                            \
            } else {                                                                              \
                _Pragma("omp simd") for (int64_t j = 0; j < p->cols; j++) d[j] = s[j * scs] * g[j]; \
            }                                                                                     \
        }                                                                                         \
    }

FM_DEFINE_SCALE_COMBINE(scale_combine_f32, float)
FM_DEFINE_SCALE_COMBINE(scale_combine_f64, double)

void fm_cpu_scale_combine(fm_dtype t, const fm_cpu_panel *p, const void *src, int64_t lds, const double beta[2])
{
    if (t == FM_F32)
        scale_combine_f32(p, src, lds, beta);
    else if (t == FM_F64)
        scale_combine_f64(p, src, lds, beta);
}

/* ---- activation ---- */
/* glibc >= 2.35's libmvec has vector tanhf/tanh (and expf/exp); declared simd, the omp simd
 * loops call them a vector at a time (docs/design.md, Lessons from measurement: glibc's tanh). */
#if defined(FM_HAVE_LIBMVEC)
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
double tanh(double);
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
double exp(double);
#endif

/* sqrt(2/pi) and the cubic coefficient of the tanh approximation of gelu */
#define GELU_K0 0.7978845608028654
#define GELU_K1 0.044715

/* gelu, tanh approximation, as cuBLASLt: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and
 * gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2). For gelu' x^2 is
 * capped at 100 and x at +-10: past |x| = 10, th is exactly +-1 in both precisions and the value
 * exactly 1 or 0 (no finite result changes), while an uncapped x^2 overflows (|x| > 1.8e19 in f32,
 * 1.3e154 in f64) into 0 * inf = NaN and x = +-inf gave inf * 0. A NaN x stays NaN (fmin drops it
 * from x2, but th is NaN). */
#define FM_DEFINE_GELU(SFX, T, TANH, FMIN)                                                             \
    static inline T gelu_##SFX(T x)                                                                  \
    {                                                                                               \
        const T k0 = (T)GELU_K0, k1 = (T)GELU_K1;                                                   \
        return (T)0.5 * x * ((T)1 + TANH(k0 * (x + k1 * x * x * x)));                               \
    }                                                                                               \
    static inline T dgelu_##SFX(T x)                                                                 \
    {                                                                                               \
        const T k0 = (T)GELU_K0, k1 = (T)GELU_K1;                                                   \
        const T x2 = FMIN(x * x, (T)100), xc = x > (T)10 ? (T)10 : (x < (T)-10 ? (T)-10 : x);       \
        const T th = TANH(k0 * (x + k1 * x2 * x));                                                  \
        return (T)0.5 * ((T)1 + th) + (T)0.5 * xc * ((T)1 - th * th) * k0 * ((T)1 + (T)3 * k1 * x2); \
    }
FM_DEFINE_GELU(f32, float, tanhf, fminf)
FM_DEFINE_GELU(f64, double, tanh, fmin)

static void relu_mask_row(unsigned char *mask, const void *row, int64_t cols, int is_f64)
{
    /* bit j%8 of byte j/8: pre-activation > 0. cols of a non-final block are a multiple of 8. */
    for (int64_t j0 = 0; j0 < cols; j0 += 8) {
        unsigned byte = 0;
        int64_t jn = cols - j0 < 8 ? cols - j0 : 8;
        for (int64_t b = 0; b < jn; b++) {
            double v = is_f64 ? ((const double *)row)[j0 + b] : ((const float *)row)[j0 + b];
            byte |= (unsigned)(v > 0) << b;
        }
        mask[j0 / 8] = (unsigned char)byte;
    }
}

/* Row kernels, branch-free and vectorised: signs of GEMM output are random, so a
 * branch mispredicts half the time (measured: 4 ns per element with the branch).
 * FM_DEFINE_ROW(name, T, EXPR) defines name(d, n, lo, hi) doing d[j] = EXPR(d[j]). */
#define FM_DEFINE_ROW(fname, T, EXPR)                                                    \
    static void fname(T *restrict d, int64_t n, T lo, T hi)                              \
    {                                                                                    \
        (void)lo, (void)hi;                                                              \
        _Pragma("omp simd") for (int64_t j = 0; j < n; j++)                              \
        {                                                                                \
            const T x = d[j];                                                            \
            d[j] = EXPR;                                                                 \
        }                                                                                \
    }

FM_DEFINE_ROW(relu_row_f32, float, x > 0.0f ? x : 0.0f)
FM_DEFINE_ROW(relu_row_f64, double, x > 0.0 ? x : 0.0)
FM_DEFINE_ROW(gelu_row_f32, float, gelu_f32(x))
FM_DEFINE_ROW(gelu_row_f64, double, gelu_f64(x))
FM_DEFINE_ROW(sigmoid_row_f32, float, 1.0f / (1.0f + expf(-x)))
FM_DEFINE_ROW(sigmoid_row_f64, double, 1.0 / (1.0 + exp(-x)))
FM_DEFINE_ROW(tanh_row_f32, float, tanhf(x))
FM_DEFINE_ROW(tanh_row_f64, double, tanh(x))
FM_DEFINE_ROW(silu_row_f32, float, x / (1.0f + expf(-x)))
FM_DEFINE_ROW(silu_row_f64, double, x / (1.0 + exp(-x)))
/* min(max(x, lo), hi); NaN stays NaN */
FM_DEFINE_ROW(clamp_row_f32, float, x < lo ? lo : (x > hi ? hi : x))
FM_DEFINE_ROW(clamp_row_f64, double, x < lo ? lo : (x > hi ? hi : x))

/* drelu: d *= mask bit (0 or 1) of the same element; mask points at byte 0 of the panel's
 * columns. A byte's bits become 8 factors through a table, so whole vectors multiply (exactly
 * d * 1 or d * 0, docs/epilogues.md); extracting each bit in the loop ran 4x slower. */
#define BITS1(x) {((x) >> 0) & 1, ((x) >> 1) & 1, ((x) >> 2) & 1, ((x) >> 3) & 1, \
                  ((x) >> 4) & 1, ((x) >> 5) & 1, ((x) >> 6) & 1, ((x) >> 7) & 1}
#define BITS4(x) BITS1(x), BITS1((x) + 1), BITS1((x) + 2), BITS1((x) + 3)
#define BITS16(x) BITS4(x), BITS4((x) + 4), BITS4((x) + 8), BITS4((x) + 12)
#define BITS64(x) BITS16(x), BITS16((x) + 16), BITS16((x) + 32), BITS16((x) + 48)
static const float mask_factors_f32[256][8] = {BITS64(0), BITS64(64), BITS64(128), BITS64(192)};
static const double mask_factors_f64[256][8] = {BITS64(0), BITS64(64), BITS64(128), BITS64(192)};

#define FM_DEFINE_DRELU_ROW(fname, T, TABLE)                                             \
    static void fname(T *restrict d, const unsigned char *restrict mask, int64_t n)      \
    {                                                                                    \
        int64_t j0 = 0;                                                                  \
        for (; j0 + 8 <= n; j0 += 8) {                                                   \
            const T *f = TABLE[mask[j0 >> 3]];                                           \
            _Pragma("omp simd") for (int b = 0; b < 8; b++) d[j0 + b] *= f[b];           \
        }                                                                                \
        for (int64_t j = j0; j < n; j++)                                                 \
            d[j] *= (T)((mask[j >> 3] >> (j & 7)) & 1);                                  \
    }
FM_DEFINE_DRELU_ROW(drelu_row_f32, float, mask_factors_f32)
FM_DEFINE_DRELU_ROW(drelu_row_f64, double, mask_factors_f64)

/* dgelu: d *= gelu'(x) with x the forward pass's activation input */
#define FM_DEFINE_DGELU_ROW(fname, T, DERIV)                                             \
    static void fname(T *restrict d, const T *restrict x, int64_t n)                     \
    {                                                                                    \
        _Pragma("omp simd") for (int64_t j = 0; j < n; j++) d[j] = d[j] * DERIV(x[j]);   \
    }
FM_DEFINE_DGELU_ROW(dgelu_row_f32, float, dgelu_f32)
FM_DEFINE_DGELU_ROW(dgelu_row_f64, double, dgelu_f64)

/* column sums of the panel, accumulated in double */
#define FM_DEFINE_COLSUM_ROW(fname, T)                                                   \
    static void fname(double *restrict acc, const T *restrict d, int64_t n)              \
    {                                                                                    \
        _Pragma("omp simd") for (int64_t j = 0; j < n; j++) acc[j] += (double)d[j];      \
    }
FM_DEFINE_COLSUM_ROW(colsum_row_f32, float)
FM_DEFINE_COLSUM_ROW(colsum_row_f64, double)

enum { ACT_NONE, ACT_RELU, ACT_GELU, ACT_SIGMOID, ACT_TANH, ACT_SILU, ACT_CLAMP };

static int act_kind(unsigned epi)
{
    if (epi & FM_EPILOGUE_RELU) return ACT_RELU;
    if (epi & FM_EPILOGUE_GELU) return ACT_GELU;
    if (epi & FM_EPILOGUE_SIGMOID) return ACT_SIGMOID;
    if (epi & FM_EPILOGUE_TANH) return ACT_TANH;
    if (epi & FM_EPILOGUE_SILU) return ACT_SILU;
    if (epi & FM_EPILOGUE_CLAMP) return ACT_CLAMP;
    return ACT_NONE;
}

/* The aux mask row i writes (relu+aux, dropout+aux), with its padding zeroed in the last column
 * block; NULL when the chain writes none. */
static unsigned char *mask_row_out(unsigned epi, const fm_cpu_panel *p, int64_t i)
{
    if (!(epi & FM_EPILOGUE_AUX) || !(epi & (FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT)))
        return NULL;
    unsigned char *row = (unsigned char *)p->aux + i * p->aux_ld;
    if (p->last_col_block) {
        int64_t used = (p->col0 + p->cols + 7) / 8;
        memset(row + used, 0, (size_t)(p->mask_row_bytes - used));
    }
    return row + p->col0 / 8;
}

/* One row: the forward activation, then dropout; relu+dropout+aux stores the mask of the final
 * values (> 0 iff the pre-activation was > 0 and the element was kept: relu AND keep). */
#define FM_DEFINE_ACTIVATE(fname, T, SFX, IS_F64)                                                \
    FM_SIMD_CLONES static void fname(unsigned epi, const fm_cpu_panel *p)                                       \
    {                                                                                            \
        const int aux = (epi & FM_EPILOGUE_AUX) != 0, kind = act_kind(epi);                      \
        const int drop = (epi & FM_EPILOGUE_DROPOUT) != 0;                                       \
        const T lo = (T)p->clamp[0], hi = (T)p->clamp[1];                                        \
        fm_cpu_drop_words dw; /* dropout's words, a batch of rows at a time */                   \
        dw.i0 = dw.i1 = 0;                                                                       \
        if (p->colsum)                                                                           \
            memset(p->colsum, 0, sizeof(double) * (size_t)p->cols);                              \
        for (int64_t i = 0; i < p->rows; i++) {                                                  \
            T *d = (T *)p->d + i * p->ldd;                                                       \
            unsigned char *mask = mask_row_out(epi, p, i);                                       \
            if (kind == ACT_RELU) {                                                              \
                if (mask && !drop)                                                               \
                    relu_mask_row(mask, d, p->cols, IS_F64);                                     \
                relu_row_##SFX(d, p->cols, lo, hi);                                              \
            } else if (kind != ACT_NONE) {                                                       \
                if (aux && !drop)                                                                \
                    memcpy((T *)p->aux + i * p->aux_ld, d, sizeof(T) * (size_t)p->cols);         \
                switch (kind) {                                                                  \
                case ACT_GELU: gelu_row_##SFX(d, p->cols, lo, hi); break;                        \
                case ACT_SIGMOID: sigmoid_row_##SFX(d, p->cols, lo, hi); break;                  \
                case ACT_TANH: tanh_row_##SFX(d, p->cols, lo, hi); break;                        \
                case ACT_SILU: silu_row_##SFX(d, p->cols, lo, hi); break;                        \
                default: clamp_row_##SFX(d, p->cols, lo, hi); break;                             \
                }                                                                                \
            } else if (epi & FM_EPILOGUE_DRELU) {                                                \
                drelu_row_##SFX(d, (const unsigned char *)p->aux + i * p->aux_ld + p->col0 / 8,  \
                                p->cols);                                                        \
            } else if (epi & FM_EPILOGUE_DGELU) {                                                \
                dgelu_row_##SFX(d, (const T *)p->aux + i * p->aux_ld, p->cols);                  \
            } else if (epi & FM_EPILOGUE_DDROPOUT) {                                             \
                fm_cpu_ddropout_row(IS_F64 ? FM_F64 : FM_F32, p, i,                              \
                                    (const unsigned char *)p->aux + i * p->aux_ld + p->col0 / 8); \
            }                                                                                    \
            if (drop) {                                                                          \
                fm_cpu_dropout_row(IS_F64 ? FM_F64 : FM_F32, p, i, kind == ACT_RELU ? NULL : mask, &dw); \
                if (mask && kind == ACT_RELU)                                                    \
                    relu_mask_row(mask, d, p->cols, IS_F64);                                     \
            }                                                                                    \
            if (p->colsum)                                                                       \
                colsum_row_##SFX(p->colsum, d, p->cols);                                         \
        }                                                                                        \
    }

FM_DEFINE_ACTIVATE(activate_f32, float, f32, 0)
FM_DEFINE_ACTIVATE(activate_f64, double, f64, 1)

void fm_cpu_activate(fm_dtype t, unsigned epi, const fm_cpu_panel *p)
{
    if (!(epi & (FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_BACKWARD_ | FM_EPILOGUE_DROPOUT)) && !p->colsum)
        return;
    if (t == FM_F32)
        activate_f32(epi, p);
    else if (t == FM_F64)
        activate_f64(epi, p);
}
