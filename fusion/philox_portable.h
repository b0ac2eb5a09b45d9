/* philox_portable.h : Philox4x32-10 and the arithmetic of the portable RNG mode (FM_RNG_PORTABLE),
 * one source for every device: plain C here (backends/cpu/philox_rng.c) and CUDA C++ through NVRTC
 * (the GPU backend, to come), so that both give the same bits for the same seed and position.
 *
 * Only IEEE basic operations (+ - * /, sqrt, conversions) and integer work: no libm, whose
 * transcendentals differ between glibc and CUDA. Multiply-adds are written as a multiply and an
 * add, never contracted: compile this with -ffp-contract=off (NVRTC: --fmad=false). Then each
 * result is the same correctly rounded sequence of operations everywhere.
 *
 * log, exp and sincos here are faithful to within a few ulp (tests/c/test_rng_cpu.c measures them
 * against glibc), not correctly rounded; the angle of Box-Muller is reduced exactly from the
 * integer bits (turns of 2^-32 / 2^-64), so no large-argument reduction is needed. */
#ifndef FM_PHILOX_PORTABLE_H
#define FM_PHILOX_PORTABLE_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FM_PX_FN static __device__ __forceinline__
typedef unsigned int fm_px_u32;
typedef unsigned long long fm_px_u64;
typedef long long fm_px_i64;
typedef int fm_px_i32;
FM_PX_FN float fm_px_f32_from_bits(fm_px_u32 u) { return __uint_as_float(u); }
FM_PX_FN fm_px_u32 fm_px_bits_of_f32(float x) { return __float_as_uint(x); }
FM_PX_FN double fm_px_f64_from_bits(fm_px_u64 u) { return __longlong_as_double((long long)u); }
FM_PX_FN fm_px_u64 fm_px_bits_of_f64(double x) { return (fm_px_u64)__double_as_longlong(x); }
FM_PX_FN float fm_px_sqrtf(float x) { return sqrtf(x); }
FM_PX_FN double fm_px_sqrt(double x) { return sqrt(x); }
#else
#include <stdint.h>
#include <string.h>
#define FM_PX_FN static inline __attribute__((always_inline)) /* inlined: the fill's loops vectorise */
typedef uint32_t fm_px_u32;
typedef uint64_t fm_px_u64;
typedef int64_t fm_px_i64;
typedef int32_t fm_px_i32;
FM_PX_FN float fm_px_f32_from_bits(fm_px_u32 u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
FM_PX_FN fm_px_u32 fm_px_bits_of_f32(float x)
{
    fm_px_u32 u;
    memcpy(&u, &x, sizeof u);
    return u;
}
FM_PX_FN double fm_px_f64_from_bits(fm_px_u64 u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}
FM_PX_FN fm_px_u64 fm_px_bits_of_f64(double x)
{
    fm_px_u64 u;
    memcpy(&u, &x, sizeof u);
    return u;
}
/* the correctly rounded square root (an IEEE basic operation; sqrtss / sqrtsd with -fno-math-errno) */
FM_PX_FN float fm_px_sqrtf(float x) { return __builtin_sqrtf(x); }
FM_PX_FN double fm_px_sqrt(double x) { return __builtin_sqrt(x); }
#endif

/* ---- Philox4x32-10 (Salmon et al. 2011; the constants of Random123 and cuRAND) ---- */
FM_PX_FN void fm_philox4x32_10(const fm_px_u32 ctr[4], fm_px_u32 k0, fm_px_u32 k1, fm_px_u32 out[4])
{
    fm_px_u32 c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    for (int r = 0; r < 10; r++) {
        const fm_px_u64 p0 = (fm_px_u64)0xD2511F53u * c0, p1 = (fm_px_u64)0xCD9E8D57u * c2;
        const fm_px_u32 n0 = (fm_px_u32)(p1 >> 32) ^ c1 ^ k0, n2 = (fm_px_u32)(p0 >> 32) ^ c3 ^ k1;
        c1 = (fm_px_u32)p1;
        c3 = (fm_px_u32)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* Block b of the portable stream: counter {lo32(b), hi32(b), 0, 0}, key {lo32(seed), hi32(seed)}. */
FM_PX_FN void fm_px_block(fm_px_u64 seed, fm_px_u64 b, fm_px_u32 out[4])
{
    const fm_px_u32 ctr[4] = {(fm_px_u32)b, (fm_px_u32)(b >> 32), 0u, 0u};
    fm_philox4x32_10(ctr, (fm_px_u32)seed, (fm_px_u32)(seed >> 32), out);
}

/* An integer below 2^63 (in magnitude) as a double, correctly rounded: the two 32-bit halves
 * converted exactly and added once, which is the direct conversion's value; written so because
 * int64 -> double has no vector instruction before AVX-512DQ, and this loop form vectorises. */
FM_PX_FN double fm_px_f64_of_i64(fm_px_i64 v)
{
    const fm_px_i32 hi = (fm_px_i32)(v >> 32);
    const fm_px_i32 lo = (fm_px_i32)((fm_px_u32)v ^ 0x80000000u); /* the low half less 2^31, signed */
    return (double)hi * 4294967296.0 + ((double)lo + 2147483648.0);
}

/* ---- uniforms ---- */
/* [0, 1) on the 2^-24 / 2^-53 grid, as numpy.random's random() */
FM_PX_FN float fm_px_u01_f32(fm_px_u32 w) { return (float)(fm_px_i32)(w >> 8) * 0x1p-24f; }
/* (w >> 11) 2^-53 summed from the halves (exact: 53 bits), which converts faster than 64 bits */
FM_PX_FN double fm_px_u01_f64(fm_px_u64 w)
{
    return (double)(fm_px_u32)(w >> 32) * 0x1p-32 + (double)((fm_px_u32)w >> 11) * 0x1p-53;
}
/* (0, 1], never 0 (the argument of log): w 2^-32 + 2^-33 in float (small w keep their resolution,
 * so the normal's tail reaches 6.8) / (w >> 11 + 1) 2^-53 */
FM_PX_FN float fm_px_u01_open_f32(fm_px_u32 w) { return (float)w * 0x1p-32f + 0x1p-33f; }
FM_PX_FN double fm_px_u01_open_f64(fm_px_u64 w)
{
    return (double)(fm_px_u32)(w >> 32) * 0x1p-32 + (double)(((fm_px_u32)w >> 11) + 1u) * 0x1p-53;
}

/* ---- log of a positive normal number: e ln2 + log(m), m in [sqrt(1/2), sqrt(2)), the latter as
 * 2 atanh(s) = 2s (1 + s^2/3 + s^4/5 + ...), s = (m - 1) / (m + 1), |s| <= 0.172 ---- */
FM_PX_FN float fm_px_logf(float x)
{
    fm_px_u32 b = fm_px_bits_of_f32(x);
    fm_px_i32 e = (fm_px_i32)(b >> 23) - 127;
    b = (b & 0x007FFFFFu) | 0x3F800000u;   /* m in [1, 2) */
    const fm_px_u32 big = b > 0x3FB504F3u; /* m > sqrt(2): halve it (branch-free: the loops vectorise) */
    b -= big << 23;
    e += (fm_px_i32)big;
    const float f = fm_px_f32_from_bits(b) - 1.0f; /* exact */
    const float s = f / (2.0f + f), z = s * s;
    const float r = z * (1.0f / 3 + z * (1.0f / 5 + z * (1.0f / 7 + z * (1.0f / 9))));
    const float lm = 2.0f * s + 2.0f * s * r;
    const float ef = (float)e;
    return ef * 0.693145751953125f + (lm + ef * 1.428606765e-06f); /* ln2 = hi + lo, e hi exact */
}

FM_PX_FN double fm_px_log(double x)
{
    fm_px_u64 b = fm_px_bits_of_f64(x);
    fm_px_i32 e = (fm_px_i32)(b >> 52) - 1023;
    b = (b & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
    const fm_px_u64 big = b > 0x3FF6A09E667F3BCCull;
    b -= big << 52;
    e += (fm_px_i32)big;
    const double f = fm_px_f64_from_bits(b) - 1.0;
    const double s = f / (2.0 + f), z = s * s;
    double r = 1.0 / 21;
    r = 1.0 / 19 + z * r;
    r = 1.0 / 17 + z * r;
    r = 1.0 / 15 + z * r;
    r = 1.0 / 13 + z * r;
    r = 1.0 / 11 + z * r;
    r = 1.0 / 9 + z * r;
    r = 1.0 / 7 + z * r;
    r = 1.0 / 5 + z * r;
    r = 1.0 / 3 + z * r;
    r = z * r;
    const double lm = 2.0 * s + 2.0 * s * r;
    const double ed = (double)e; /* e in [-1074, 1024] */
    return ed * 6.93147180369123816490e-01 + (lm + ed * 1.90821492927058770002e-10);
}

/* ---- exp: 2^k exp(r), k = round(x / ln2), |r| <= ln2 / 2, exp(r) by its Taylor series ---- */
FM_PX_FN float fm_px_expf(float x)
{
    /* branch-free (the loops vectorise): x clamped into the finite range, the cases selected after */
    const float xc = x < -104.0f ? -104.0f : x < 88.72284f ? x : 88.72284f;
    const float t = xc * 1.44269504f;
    const fm_px_i32 k = (fm_px_i32)(t + (t >= 0.0f ? 0.5f : -0.5f));
    const float kf = (float)k;
    const float r = (xc - kf * 0.693145751953125f) - kf * 1.428606765e-06f;
    float p = 1.0f / 40320;
    p = 1.0f / 5040 + r * p;
    p = 1.0f / 720 + r * p;
    p = 1.0f / 120 + r * p;
    p = 1.0f / 24 + r * p;
    p = 1.0f / 6 + r * p;
    p = 0.5f + r * p;
    p = 1.0f + r * p;
    p = 1.0f + r * p;
    /* 2^k as two normal factors: the first product is exact, the second rounds once (k in [-150, 128]) */
    const fm_px_i32 k1 = k / 2, k2 = k - k1;
    const float y = p * fm_px_f32_from_bits((fm_px_u32)(k1 + 127) << 23) *
                    fm_px_f32_from_bits((fm_px_u32)(k2 + 127) << 23);
    return x != x ? x : x >= 88.72284f ? fm_px_f32_from_bits(0x7F800000u) : x < -103.972084f ? 0.0f : y;
}

FM_PX_FN double fm_px_exp(double x)
{
    const double xc = x < -746.0 ? -746.0 : x < 709.782712893384 ? x : 709.782712893384;
    const double t = xc * 1.4426950408889634;
    const fm_px_i32 k = (fm_px_i32)(t + (t >= 0.0 ? 0.5 : -0.5));
    const double kd = (double)k;
    const double r = (xc - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0; /* 1/13! */
    p = 1.0 / 479001600.0 + r * p;
    p = 1.0 / 39916800.0 + r * p;
    p = 1.0 / 3628800.0 + r * p;
    p = 1.0 / 362880.0 + r * p;
    p = 1.0 / 40320.0 + r * p;
    p = 1.0 / 5040.0 + r * p;
    p = 1.0 / 720.0 + r * p;
    p = 1.0 / 120.0 + r * p;
    p = 1.0 / 24.0 + r * p;
    p = 1.0 / 6.0 + r * p;
    p = 0.5 + r * p;
    p = 1.0 + r * p;
    p = 1.0 + r * p;
    const fm_px_i32 k1 = k / 2, k2 = k - k1; /* k in [-1077, 1024] */
    const double y = p * fm_px_f64_from_bits((fm_px_u64)(k1 + 1023) << 52) *
                     fm_px_f64_from_bits((fm_px_u64)(k2 + 1023) << 52);
    return x != x ? x
           : x >= 709.782712893384 ? fm_px_f64_from_bits(0x7FF0000000000000ull)
           : x < -745.1332191019412 ? 0.0
                                    : y;
}

/* ---- sin and cos of 2 pi w / 2^32 (f32) and 2 pi w / 2^64 (f64): the nearest quarter turn q
 * taken off in integers (exact), the rest x in [-pi/4, pi/4) by Taylor series, then rotated ---- */
FM_PX_FN void fm_px_sincos_turns_f32(fm_px_u32 w, float *sin_out, float *cos_out)
{
    const fm_px_u32 q = ((w + 0x20000000u) >> 30) & 3u;
    const fm_px_i32 d = (fm_px_i32)(w - (q << 30)); /* in [-2^29, 2^29) */
    const float x = (float)d * 0x1.921fb6p-30f, x2 = x * x; /* 2 pi / 2^32 */
    float ps = -1.0f / 39916800;
    ps = 1.0f / 362880 + x2 * ps;
    ps = -1.0f / 5040 + x2 * ps;
    ps = 1.0f / 120 + x2 * ps;
    ps = -1.0f / 6 + x2 * ps;
    const float s = x + x * x2 * ps;
    float pc = -1.0f / 3628800;
    pc = 1.0f / 40320 + x2 * pc;
    pc = -1.0f / 720 + x2 * pc;
    pc = 1.0f / 24 + x2 * pc;
    pc = -0.5f + x2 * pc;
    const float c = 1.0f + x2 * pc;
    *sin_out = q == 0 ? s : q == 1 ? c : q == 2 ? -s : -c;
    *cos_out = q == 0 ? c : q == 1 ? -s : q == 2 ? -c : s;
}

FM_PX_FN void fm_px_sincos_turns_f64(fm_px_u64 w, double *sin_out, double *cos_out)
{
    const fm_px_u64 q = ((w + (1ull << 61)) >> 62) & 3u;
    const fm_px_i64 d = (fm_px_i64)(w - (q << 62)); /* in [-2^61, 2^61) */
    const double x = fm_px_f64_of_i64(d) * 0x1.921fb54442d18p-62, x2 = x * x; /* 2 pi / 2^64 */
    /* (-1)^k / (2k + 1)!, k = 8 .. 1, and (-1)^k / (2k)!, k = 9 .. 1 */
    double ps = 1.0 / 355687428096000.0;
    ps = -1.0 / 1307674368000.0 + x2 * ps;
    ps = 1.0 / 6227020800.0 + x2 * ps;
    ps = -1.0 / 39916800.0 + x2 * ps;
    ps = 1.0 / 362880.0 + x2 * ps;
    ps = -1.0 / 5040.0 + x2 * ps;
    ps = 1.0 / 120.0 + x2 * ps;
    ps = -1.0 / 6.0 + x2 * ps;
    const double s = x + x * x2 * ps;
    double pc = -1.0 / 6402373705728000.0;
    pc = 1.0 / 20922789888000.0 + x2 * pc;
    pc = -1.0 / 87178291200.0 + x2 * pc;
    pc = 1.0 / 479001600.0 + x2 * pc;
    pc = -1.0 / 3628800.0 + x2 * pc;
    pc = 1.0 / 40320.0 + x2 * pc;
    pc = -1.0 / 720.0 + x2 * pc;
    pc = 1.0 / 24.0 + x2 * pc;
    pc = -0.5 + x2 * pc;
    const double c = 1.0 + x2 * pc;
    *sin_out = q == 0 ? s : q == 1 ? c : q == 2 ? -s : -c;
    *cos_out = q == 0 ? c : q == 1 ? -s : q == 2 ? -c : s;
}

/* ---- Box-Muller: the pair (r sin t, r cos t), r = sqrt(-2 log u) ---- */
FM_PX_FN void fm_px_normal_pair_f32(fm_px_u32 wu, fm_px_u32 wt, float *z0, float *z1)
{
    const float r = fm_px_sqrtf(-2.0f * fm_px_logf(fm_px_u01_open_f32(wu)));
    float s, c;
    fm_px_sincos_turns_f32(wt, &s, &c);
    *z0 = s * r;
    *z1 = c * r;
}

FM_PX_FN void fm_px_normal_pair_f64(fm_px_u64 wu, fm_px_u64 wt, double *z0, double *z1)
{
    const double r = fm_px_sqrt(-2.0 * fm_px_log(fm_px_u01_open_f64(wu)));
    double s, c;
    fm_px_sincos_turns_f64(wt, &s, &c);
    *z0 = s * r;
    *z1 = c * r;
}

/* ---- discrete distributions (FM_RNG_INTEGERS, FM_RNG_POISSON) ----
 * Value m of a call (m: its stream position) is a function of (seed, m) alone. What a value needs
 * beyond its first draw comes from its own sub-stream: block j of value m's sub-stream is Philox of
 * counter {lo32(m), hi32(m), j, tag}, a counter the main stream never uses (its words 2 and 3 are
 * 0, cuRAND's word 3 is 0), so rejections neither move the position (each value takes exactly one)
 * nor depend on which values a thread or a chunk holds. */
#define FM_PX_TAG_INTEGERS 0x696E7431u /* "int1" */
#define FM_PX_TAG_POISSON 0x706F6931u  /* "poi1" */

FM_PX_FN void fm_px_sub_block(fm_px_u64 seed, fm_px_u64 m, fm_px_u32 j, fm_px_u32 tag, fm_px_u32 out[4])
{
    const fm_px_u32 ctr[4] = {(fm_px_u32)m, (fm_px_u32)(m >> 32), j, tag};
    fm_philox4x32_10(ctr, (fm_px_u32)seed, (fm_px_u32)(seed >> 32), out);
}

/* The high and low words of a 64 x 64-bit product, from 32-bit halves (no 128-bit type needed). */
FM_PX_FN fm_px_u64 fm_px_mul64(fm_px_u64 a, fm_px_u64 b, fm_px_u64 *lo)
{
    const fm_px_u64 a0 = (fm_px_u32)a, a1 = a >> 32, b0 = (fm_px_u32)b, b1 = b >> 32;
    const fm_px_u64 p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    const fm_px_u64 mid = (p00 >> 32) + (fm_px_u32)p01 + (fm_px_u32)p10;
    *lo = (mid << 32) | (fm_px_u32)p00;
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

/* Lemire's multiply-shift (2019): the offset in [0, r) is the high word of w r, accepted when its
 * low word is >= t = 2^32 mod r (2^64 mod r), which removes exactly the excess that makes x % r
 * biased. r = range size, 0 meaning 2^32 (2^64): every word is a value. t once per plan. */
FM_PX_FN fm_px_u32 fm_px_lemire_t32(fm_px_u32 r) { return r ? (0u - r) % r : 0u; }
FM_PX_FN fm_px_u64 fm_px_lemire_t64(fm_px_u64 r) { return r ? (0ull - r) % r : 0ull; }

/* Value m's offset for a range of r <= 2^32 values: first the main stream's word w (word m % 4 of
 * block m / 4, as raw), then on rejection the words of its sub-stream in order. */
FM_PX_FN fm_px_u32 fm_px_integer32(fm_px_u64 seed, fm_px_u64 m, fm_px_u32 w, fm_px_u32 r, fm_px_u32 t)
{
    if (r == 0u)
        return w;
    fm_px_u32 b[4] = {0u, 0u, 0u, 0u};
    for (fm_px_u32 i = 0u;; i++) { /* ends with probability 1: each try is accepted with p > 1/2 */
        const fm_px_u64 p = (fm_px_u64)w * r;
        if ((fm_px_u32)p >= t)
            return (fm_px_u32)(p >> 32);
        if ((i & 3u) == 0u)
            fm_px_sub_block(seed, m, i >> 2, FM_PX_TAG_INTEGERS, b);
        w = b[i & 3u];
    }
}

/* The same for ranges above 2^32 values: w the 64-bit word of value m as the portable f64 kinds
 * (block m / 2, words 2 (m % 2), 2 (m % 2) + 1), then its sub-stream's 64-bit halves. */
FM_PX_FN fm_px_u64 fm_px_integer64(fm_px_u64 seed, fm_px_u64 m, fm_px_u64 w, fm_px_u64 r, fm_px_u64 t)
{
    if (r == 0u)
        return w;
    fm_px_u32 b[4] = {0u, 0u, 0u, 0u};
    for (fm_px_u32 i = 0u;; i++) {
        fm_px_u64 lo;
        const fm_px_u64 hi = fm_px_mul64(w, r, &lo);
        if (lo >= t)
            return hi;
        if ((i & 1u) == 0u)
            fm_px_sub_block(seed, m, i >> 1, FM_PX_TAG_INTEGERS, b);
        w = (fm_px_u64)b[2u * (i & 1u)] | (fm_px_u64)b[2u * (i & 1u) + 1u] << 32;
    }
}

/* log Gamma(x) for x >= 1: NumPy's random_loggam (Stirling's series from x0 >= 7, then the
 * recurrence down), with this header's log. */
FM_PX_FN double fm_px_loggam(double x)
{
    if (x == 1.0 || x == 2.0)
        return 0.0;
    const fm_px_i64 n = x < 7.0 ? (fm_px_i64)(7.0 - x) : 0;
    double x0 = x + (double)n;
    const double x2 = (1.0 / x0) * (1.0 / x0);
    double gl0 = -1.39243221690590e+00;
    gl0 = gl0 * x2 + 1.796443723688307e-01;
    gl0 = gl0 * x2 + -2.955065359477124e-02;
    gl0 = gl0 * x2 + 6.410256410256410e-03;
    gl0 = gl0 * x2 + -1.917526917526918e-03;
    gl0 = gl0 * x2 + 8.417508417508418e-04;
    gl0 = gl0 * x2 + -5.952380952380952e-04;
    gl0 = gl0 * x2 + 7.936507936507937e-04;
    gl0 = gl0 * x2 + -2.777777777777778e-03;
    gl0 = gl0 * x2 + 8.333333333333333e-02;
    double gl = gl0 / x0 + 0.5 * 1.8378770664093453e+00 + (x0 - 0.5) * fm_px_log(x0) - x0;
    for (fm_px_i64 k = 1; k <= n; k++) {
        gl -= fm_px_log(x0 - 1.0);
        x0 -= 1.0;
    }
    return gl;
}

/* Poisson's per-lam constants (once per plan; lam >= 0). */
typedef struct fm_px_poisson_consts {
    double lam, enlam;                            /* lam < 10: exp(-lam) */
    double slam, loglam, a, b, invalpha, vr, lia; /* lam >= 10: PTRS's (lia = log(invalpha)) */
} fm_px_poisson_consts;

FM_PX_FN fm_px_poisson_consts fm_px_poisson_setup(double lam)
{
    fm_px_poisson_consts c;
    c.lam = lam;
    c.enlam = fm_px_exp(0.0 - lam);
    c.slam = fm_px_sqrt(lam);
    c.loglam = lam > 0.0 ? fm_px_log(lam) : 0.0;
    c.b = 0.931 + 2.53 * c.slam;
    c.a = -0.059 + 0.02483 * c.b;
    c.invalpha = 1.1239 + 1.1328 / (c.b - 3.4);
    c.vr = 0.9277 - 3.6224 / (c.b - 2.0);
    c.lia = fm_px_log(c.invalpha);
    return c;
}

/* Poisson value m, every draw from its sub-stream (tag FM_PX_TAG_POISSON). lam < 10: inversion of
 * the cdf with one uniform (block 0's first 64 bits), summed term by term; lam >= 10: Hormann's
 * transformed rejection PTRS (1993), NumPy's method for lam >= 10, try j from block j (u, v from
 * its two 64-bit halves). Exact in distribution up to double rounding; integer results. */
FM_PX_FN fm_px_i64 fm_px_poisson(fm_px_u64 seed, fm_px_u64 m, const fm_px_poisson_consts *c)
{
    fm_px_u32 b[4];
    if (c->lam < 10.0) {
        fm_px_sub_block(seed, m, 0u, FM_PX_TAG_POISSON, b);
        const double u = fm_px_u01_f64((fm_px_u64)b[0] | (fm_px_u64)b[1] << 32);
        fm_px_i64 k = 0;
        double p = c->enlam, f = p;
        while (u >= f && p > 0.0) { /* p underflows to 0 past k ~ 200: the loop ends */
            k++;
            p = p * c->lam / (double)k;
            f = f + p;
        }
        return k;
    }
    for (fm_px_u32 j = 0u;; j++) { /* each try is accepted with p > 0.85 or so */
        fm_px_sub_block(seed, m, j, FM_PX_TAG_POISSON, b);
        const double u = fm_px_u01_f64((fm_px_u64)b[0] | (fm_px_u64)b[1] << 32) - 0.5;
        const double v = fm_px_u01_f64((fm_px_u64)b[2] | (fm_px_u64)b[3] << 32);
        const double us = 0.5 - (u < 0.0 ? 0.0 - u : u);
        if ((us < 0.013 && v > us) || us == 0.0) /* PTRS's reject before k (us == 0: k infinite) */
            continue;
        const double x = (2.0 * c->a / us + c->b) * u + c->lam + 0.43;
        if (x < 0.0 || x >= 9.2233720368547758e18) /* k < 0, or past int64 */
            continue;
        const fm_px_i64 k = (fm_px_i64)x; /* floor, x >= 0 */
        if (us >= 0.07 && v <= c->vr)
            return k;
        if (v == 0.0) /* log(0) = -inf: accepted */
            return k;
        const double lhs = fm_px_log(v) + c->lia - fm_px_log(c->a / (us * us) + c->b);
        const double rhs = (0.0 - c->lam) + (double)k * c->loglam - fm_px_loggam((double)k + 1.0);
        if (lhs <= rhs)
            return k;
    }
}

#endif
