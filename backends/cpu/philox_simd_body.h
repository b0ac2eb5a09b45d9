/* philox_simd_body.h : the vector fills, written once over the primitives that
 * philox_simd_avx512.c / philox_simd_avx2.c define (VI, VF, VD, L lanes of 32 bits, SFX(name)).
 * Every function is fusion/philox_portable.h's scalar function operation for operation: the same
 * IEEE operations on the same operands in the same order (a + b and b + a are the same operation),
 * integer tricks only where they are exact. Do not reorder, and use no FMA.
 *
 * Lanes: counter lane 4k + j (k-th 128-bit lane, element j) holds block (L / 4) j + k of the
 * vector, so that the in-lane 4x4 transpose (store4) puts blocks in memory order with no
 * cross-lane shuffle; the f64 fills' unpacks give the same order. */

/* ---- Philox4x32-10 (mulhilo: the ISA file's, the 64-bit products of the even and the odd lanes) ---- */
/* the 10 round keys, broadcast once per fill */
typedef struct round_keys {
    VI k0[10], k1[10];
} round_keys;

static inline void make_keys(uint64_t seed, round_keys *rk)
{
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        rk->k0[r] = iset(k0), rk->k1[r] = iset(k1);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* nv (1 or NV, the ISA file's) independent vectors through the 10 rounds together: one vector's
 * round is a chain of shuffle, multiply, shuffle, XOR (about 8 cycles), so alone it waits on
 * latency; NV of them interleaved keep the vector ports busy (the rounds unrolled, every state in
 * a register). */
static inline __attribute__((always_inline)) void philox_nv(VI c[][4], int nv, const round_keys *rk)
{
    const VI m0 = iset(0xD2511F53u), m1 = iset(0xCD9E8D57u);
    _Pragma("GCC unroll 10") for (int r = 0; r < 10; r++)
    {
        _Pragma("GCC unroll 4") for (int v = 0; v < nv; v++)
        {
            VI h0, l0, h1, l1;
            mulhilo(c[v][0], m0, &h0, &l0);
            mulhilo(c[v][2], m1, &h1, &l1);
            const VI n0 = ixor3(h1, c[v][1], rk->k0[r]), n2 = ixor3(h0, c[v][3], rk->k1[r]);
            c[v][1] = l1, c[v][3] = l0, c[v][0] = n0, c[v][2] = n2;
        }
    }
}

/* The L blocks u0 .. u0 + L - 1 of the portable stream (counter {lo32(b), hi32(b), 0, 0}), before
 * the rounds. */
static inline void portable_counters(uint64_t u0, VI w[4])
{
    const VI lo0 = iset((uint32_t)u0);
    w[0] = iadd(lo0, lane_perm());
    w[1] = isub(iset((uint32_t)(u0 >> 32)), iltu32(w[0], lo0)); /* + the carry (a mask of -1) */
    w[2] = w[3] = iset(0);
}

/* Four vectors of values j = 0..3 per lane, stored as 4 values per block in block order; nt:
 * streaming stores (dst aligned to the vector). */
static inline void store4(void *dst, VI a, VI b, VI c, VI d, int nt)
{
    const VI t0 = unlo32(a, b), t1 = unlo32(c, d), t2 = unhi32(a, b), t3 = unhi32(c, d);
    const VI v[4] = {unlo64(t0, t1), unhi64(t0, t1), unlo64(t2, t3), unhi64(t2, t3)};
    uint32_t *p = dst;
    for (int k = 0; k < 4; k++)
        nt ? istream(p + k * L, v[k]) : istore(p + k * L, v[k]);
}

/* f64 pairs: z0 / z1 of the blocks in lanes (lo: words of unlo32, hi: of unhi32) to memory. */
static inline void store_pairs(double *p, VD z0lo, VD z1lo, VD z0hi, VD z1hi, int nt)
{
    const VD v[4] = {dunlo(z0lo, z1lo), dunhi(z0lo, z1lo), dunlo(z0hi, z1hi), dunhi(z0hi, z1hi)};
    for (int k = 0; k < 4; k++)
        nt ? dstream(p + k * L / 2, v[k]) : dstore(p + k * L / 2, v[k]);
}

/* ---- conversions, exact as the scalar casts ---- */
/* a 64-bit lane below 2^52 as a double: exact */
static inline VD d_of_small_u64(VI x) { return dsub(d_of(ior(x, iset64(0x4330000000000000ull))), dset(0x1p52)); }
/* a signed 64-bit lane (|x| < 2^63) as the correctly rounded double: two exact halves added once,
 * which is fm_px_f64_of_i64's value (its halves are split differently; the exact sum is the same) */
static inline VD d_of_i64(VI x)
{
#ifdef FM_SIMD_HAVE_CVT_U64
    return d_of_s64(x); /* vcvtqq2pd: the same one rounding of the exact value */
#else
    const VD hi = dsub(d_of_small_u64(isrl64(ixor(x, iset64(0x8000000000000000ull)), 32)), dset(2147483648.0));
    return dadd(dmul(hi, dset(4294967296.0)), d_of_small_u64(iand(x, iset64(0xFFFFFFFFull))));
#endif
}

/* fm_px_u01_open_f32 */
static inline VF u01_open_f32(VI w) { return fadd(fmul(fcvt_u32(w), fset(0x1p-32f)), fset(0x1p-33f)); }
/* fm_px_u01_f64 / fm_px_u01_open_f64 of 64-bit lanes: hi 2^-32 + (lo + plus) 2^-53 with hi, lo the
 * halves of w >> 11; each term and the sum are exact (53 bits), so it is ((w >> 11) + plus) 2^-53,
 * computed so where the ISA converts 64-bit integers (d_of_u53), else as the scalar sum. */
static inline VD u01_f64(VI w, uint64_t plus)
{
#ifdef FM_SIMD_HAVE_CVT_U64
    return dmul(d_of_u53(iadd64(isrl64(w, 11), iset64(plus))), dset(0x1p-53));
#else
    const VD hi = d_of_small_u64(isrl64(w, 32));
    const VD lo = d_of_small_u64(iadd64(isrl64(iand(w, iset64(0xFFFFFFFFull)), 11), iset64(plus)));
    return dadd(dmul(hi, dset(0x1p-32)), dmul(lo, dset(0x1p-53)));
#endif
}

/* ---- fm_px_logf / fm_px_log ---- */
static inline VF logf_v(VF x)
{
    VI b = i_of_f(x);
    VI e = isub(isrl(b, 23), iset(127));
    b = ior(iand(b, iset(0x007FFFFFu)), iset(0x3F800000u));
    const VI big = igt32(b, iset(0x3FB504F3u)); /* -1 where m > sqrt(2) */
    b = isub(b, iand(big, iset(1u << 23)));
    e = isub(e, big);
    const VF f = fsub(f_of(b), fset(1.0f));
    const VF s = fdiv(f, fadd(fset(2.0f), f)), z = fmul(s, s);
    const VF r = fmul(z, fadd(fset(1.0f / 3),
                              fmul(z, fadd(fset(1.0f / 5), fmul(z, fadd(fset(1.0f / 7), fmul(z, fset(1.0f / 9))))))));
    const VF s2 = fmul(fset(2.0f), s);
    const VF lm = fadd(s2, fmul(s2, r));
    const VF ef = fcvt_i32(e);
    return fadd(fmul(ef, fset(0.693145751953125f)), fadd(lm, fmul(ef, fset(1.428606765e-06f))));
}

static inline VD log_v(VD x)
{
    VI b = i_of_d(x);
    VI e = isub64(isrl64(b, 52), iset64(1023));
    b = ior(iand(b, iset64(0x000FFFFFFFFFFFFFull)), iset64(0x3FF0000000000000ull));
    const VI big = igt64(b, iset64(0x3FF6A09E667F3BCCull));
    b = isub64(b, iand(big, iset64(1ull << 52)));
    e = isub64(e, big);
    const VD f = dsub(d_of(b), dset(1.0));
    const VD s = ddiv(f, dadd(dset(2.0), f)), z = dmul(s, s);
    static const double c[10] = {1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13,
                                 1.0 / 11, 1.0 / 9,  1.0 / 7,  1.0 / 5,  1.0 / 3};
    VD r = dset(c[0]);
    for (int i = 1; i < 10; i++)
        r = dadd(dset(c[i]), dmul(z, r));
    r = dmul(z, r);
    const VD s2 = dmul(dset(2.0), s);
    const VD lm = dadd(s2, dmul(s2, r));
    /* e in [-1074, 1024] as a double: exact through the 2^52 + 2^51 bias */
    const VD ed = dsub(d_of(iadd64(e, iset64(0x4338000000000000ull))), dset(6755399441055744.0));
    return dadd(dmul(ed, dset(6.93147180369123816490e-01)), dadd(lm, dmul(ed, dset(1.90821492927058770002e-10))));
}

/* ---- fm_px_sincos_turns_f32 / _f64 ---- */
static inline void sincos_f32(VI w, VF *sn, VF *cs)
{
    const VI q = isrl(iadd(w, iset(0x20000000u)), 30);
    const VF x = fmul(fcvt_i32(isub(w, isll(q, 30))), fset(0x1.921fb6p-30f)), x2 = fmul(x, x);
    static const float ps_c[5] = {-1.0f / 39916800, 1.0f / 362880, -1.0f / 5040, 1.0f / 120, -1.0f / 6};
    static const float pc_c[5] = {-1.0f / 3628800, 1.0f / 40320, -1.0f / 720, 1.0f / 24, -0.5f};
    VF ps = fset(ps_c[0]), pc = fset(pc_c[0]);
    for (int i = 1; i < 5; i++) {
        ps = fadd(fset(ps_c[i]), fmul(x2, ps));
        pc = fadd(fset(pc_c[i]), fmul(x2, pc));
    }
    const VF s = fadd(x, fmul(fmul(x, x2), ps)), c = fadd(fset(1.0f), fmul(x2, pc));
    const VI odd = iand(q, iset(1u));
    /* q 0..3: sin s, c, -s, -c; cos c, -s, -c, s (the sign flips are IEEE negation) */
    *sn = f_of(ixor(i_of_f(fsel_bit(odd, c, s)), isll(iand(q, iset(2u)), 30)));
    *cs = f_of(ixor(i_of_f(fsel_bit(odd, s, c)), isll(iand(iadd(q, iset(1u)), iset(2u)), 30)));
}

static inline void sincos_f64(VI w, VD *sn, VD *cs)
{
    const VI q = isrl64(iadd64(w, iset64(1ull << 61)), 62);
    const VD x = dmul(d_of_i64(isub64(w, isll64(q, 62))), dset(0x1.921fb54442d18p-62)), x2 = dmul(x, x);
    static const double ps_c[8] = {1.0 / 355687428096000.0, -1.0 / 1307674368000.0, 1.0 / 6227020800.0,
                                   -1.0 / 39916800.0,       1.0 / 362880.0,         -1.0 / 5040.0,
                                   1.0 / 120.0,             -1.0 / 6.0};
    static const double pc_c[9] = {-1.0 / 6402373705728000.0, 1.0 / 20922789888000.0, -1.0 / 87178291200.0,
                                   1.0 / 479001600.0,         -1.0 / 3628800.0,       1.0 / 40320.0,
                                   -1.0 / 720.0,              1.0 / 24.0,             -0.5};
    VD ps = dset(ps_c[0]), pc = dset(pc_c[0]);
    for (int i = 1; i < 8; i++)
        ps = dadd(dset(ps_c[i]), dmul(x2, ps));
    for (int i = 1; i < 9; i++)
        pc = dadd(dset(pc_c[i]), dmul(x2, pc));
    const VD s = dadd(x, dmul(dmul(x, x2), ps)), c = dadd(dset(1.0), dmul(x2, pc));
    const VI odd = iand(q, iset64(1u));
    *sn = d_of(ixor(i_of_d(dsel_bit(odd, c, s)), isll64(iand(q, iset64(2u)), 62)));
    *cs = d_of(ixor(i_of_d(dsel_bit(odd, s, c)), isll64(iand(iadd64(q, iset64(1u)), iset64(2u)), 62)));
}

/* ---- fm_px_expf / fm_px_exp: the clamps and cases as selects ---- */
static inline VF expf_v(VF x)
{
    const VF xc = fsel(flt(x, fset(-104.0f)), fset(-104.0f), fsel(flt(x, fset(88.72284f)), x, fset(88.72284f)));
    const VF t = fmul(xc, fset(1.44269504f));
    const VI k = fcvtt_i32(fadd(t, fsel(fge(t, fset(0.0f)), fset(0.5f), fset(-0.5f))));
    const VF kf = fcvt_i32(k);
    const VF r = fsub(fsub(xc, fmul(kf, fset(0.693145751953125f))), fmul(kf, fset(1.428606765e-06f)));
    static const float c[9] = {1.0f / 40320, 1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                               1.0f / 6,     0.5f,        1.0f,       1.0f};
    VF p = fset(c[0]);
    for (int i = 1; i < 9; i++)
        p = fadd(fset(c[i]), fmul(r, p));
    const VI k1 = isra(iadd(k, isrl(k, 31)), 1), k2 = isub(k, k1); /* k / 2 toward zero, as C */
    const VF y = fmul(fmul(p, f_of(isll(iadd(k1, iset(127)), 23))), f_of(isll(iadd(k2, iset(127)), 23)));
    VF res = fsel(flt(x, fset(-103.972084f)), fset(0.0f), y);
    res = fsel(fge(x, fset(88.72284f)), f_of(iset(0x7F800000u)), res);
    return fsel(funord(x), x, res);
}

static inline VD exp_v(VD x)
{
    const VD xc = dsel(dlt(x, dset(-746.0)), dset(-746.0), dsel(dlt(x, dset(709.782712893384)), x, dset(709.782712893384)));
    const VD t = dmul(xc, dset(1.4426950408889634));
    /* k as a double: the truncation is exact, as is every step on it below (|k| <= 1077) */
    const VD kd = dtrunc(dadd(t, dsel(dge(t, dset(0.0)), dset(0.5), dset(-0.5))));
    const VD r = dsub(dsub(xc, dmul(kd, dset(6.93147180369123816490e-01))), dmul(kd, dset(1.90821492927058770002e-10)));
    static const double c[14] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                 1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
                                 1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        0.5,
                                 1.0,                1.0};
    VD p = dset(c[0]);
    for (int i = 1; i < 14; i++)
        p = dadd(dset(c[i]), dmul(r, p));
    const VD k1 = dtrunc(dmul(kd, dset(0.5))), k2 = dsub(kd, k1); /* k / 2 toward zero, as C */
    /* 2^k1: (k1 + 1023) << 52, k1 read from the low bits of k1 + 2^52 + 2^51 */
    const VD b = dset(6755399441055744.0);
    const VI e1 = isll64(iadd64(i_of_d(dadd(k1, b)), iset64(1023)), 52);
    const VI e2 = isll64(iadd64(i_of_d(dadd(k2, b)), iset64(1023)), 52);
    const VD y = dmul(dmul(p, d_of(e1)), d_of(e2));
    VD res = dsel(dlt(x, dset(-745.1332191019412)), dset(0.0), y);
    res = dsel(dge(x, dset(709.782712893384)), d_of(iset64(0x7FF0000000000000ull)), res);
    return dsel(dunord(x), x, res);
}

/* ---- the fills: one vector of L blocks ---- */
static inline VF normal_r_f32(VI wu) { return fsqrt(fmul(fset(-2.0f), logf_v(u01_open_f32(wu)))); }
static inline VD normal_r_f64(VI wu) { return dsqrt(dmul(dset(-2.0), log_v(u01_f64(wu, 1)))); }

static inline __attribute__((always_inline)) void vec_f32(int kind, const fm_px_simd_args *a, const VI w[4], float *dst, int nt)
{
    const VF p0 = fset(a->f0), p1 = fset(a->f1);
    VF o[4];
    switch (kind) {
    case FM_PX_SIMD_UNIFORM_F32: /* lo + width (w >> 8) 2^-24 */
        for (int j = 0; j < 4; j++)
            o[j] = fadd(p0, fmul(p1, fmul(fcvt_i32(isrl(w[j], 8)), fset(0x1p-24f))));
        break;
    case FM_PX_SIMD_NORMAL_F32: /* pairs (w0, w1), (w2, w3): z sd + mean */
        for (int j = 0; j < 4; j += 2) {
            const VF r = normal_r_f32(w[j]);
            VF s, c;
            sincos_f32(w[j + 1], &s, &c);
            o[j] = fadd(fmul(fmul(s, r), p1), p0);
            o[j + 1] = fadd(fmul(fmul(c, r), p1), p0);
        }
        if (a->exp_after)
            for (int j = 0; j < 4; j++)
                o[j] = expf_v(o[j]);
        break;
    default: /* exponential: (0 - log u) scale */
        for (int j = 0; j < 4; j++)
            o[j] = fmul(fsub(fset(0.0f), logf_v(u01_open_f32(w[j]))), p0);
        break;
    }
    store4(dst, i_of_f(o[0]), i_of_f(o[1]), i_of_f(o[2]), i_of_f(o[3]), nt);
}

/* f64: value 2b + h of block b from its 64-bit word h (words 2h, 2h + 1) */
static inline __attribute__((always_inline)) void vec_f64(int kind, const fm_px_simd_args *a, const VI w[4], double *dst, int nt)
{
    const VD p0 = dset(a->d0), p1 = dset(a->d1);
    const VI W[2][2] = {{unlo32(w[0], w[1]), unhi32(w[0], w[1])}, {unlo32(w[2], w[3]), unhi32(w[2], w[3])}};
    VD z[2][2]; /* [value h][lo / hi half] */
    for (int half = 0; half < 2; half++) {
        switch (kind) {
        case FM_PX_SIMD_UNIFORM_F64:
            for (int h = 0; h < 2; h++)
                z[h][half] = dadd(p0, dmul(p1, u01_f64(W[h][half], 0)));
            break;
        case FM_PX_SIMD_NORMAL_F64: {
            const VD r = normal_r_f64(W[0][half]);
            VD s, c;
            sincos_f64(W[1][half], &s, &c);
            z[0][half] = dadd(dmul(dmul(s, r), p1), p0);
            z[1][half] = dadd(dmul(dmul(c, r), p1), p0);
            if (a->exp_after)
                z[0][half] = exp_v(z[0][half]), z[1][half] = exp_v(z[1][half]);
            break;
        }
        default:
            for (int h = 0; h < 2; h++)
                z[h][half] = dmul(dsub(dset(0.0), log_v(u01_f64(W[h][half], 1))), p0);
            break;
        }
    }
    store_pairs(dst, z[0][0], z[1][0], z[0][1], z[1][1], nt);
}

/* One vector's values (the kind a constant where fill_kind is inlined). */
static inline __attribute__((always_inline)) void emit_vec(int kind, const fm_px_simd_args *a, const VI w[4],
                                                           void *dst, int64_t v, int nt)
{
    switch (kind) {
    case FM_PX_SIMD_RAW: store4((uint32_t *)dst + 4 * L * v, w[0], w[1], w[2], w[3], nt); break;
    case FM_PX_SIMD_UNIFORM_F32:
    case FM_PX_SIMD_NORMAL_F32:
    case FM_PX_SIMD_EXPONENTIAL_F32: vec_f32(kind, a, w, (float *)dst + 4 * L * v, nt); break;
    default: vec_f64(kind, a, w, (double *)dst + 2 * L * v, nt); break;
    }
}

/* nv vectors of L blocks from block u0: NV at a time through Philox, then one at a time. */
static inline __attribute__((always_inline)) void fill_kind(int kind, const fm_px_simd_args *a,
                                                            const round_keys *rk, uint64_t u0, int64_t nv,
                                                            void *dst, int nt)
{
    int64_t v = 0;
    for (; v + NV <= nv; v += NV) {
        VI w[NV][4]; /* the loops unrolled: the states stay in registers */
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) portable_counters(u0 + (uint64_t)((v + j) * L), w[j]);
        philox_nv(w, NV, rk);
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) emit_vec(kind, a, w[j], dst, v + j, nt);
    }
    for (; v < nv; v++) {
        VI w[1][4];
        portable_counters(u0 + (uint64_t)(v * L), w[0]);
        philox_nv(w, 1, rk);
        emit_vec(kind, a, w[0], dst, v, nt);
    }
}

int64_t SFX(fm_px_simd_fill)(const fm_px_simd_args *a, uint64_t seed, uint64_t u0, int64_t n, void *dst, int nt)
{
    const int64_t nv = n / L;
    round_keys rk;
    make_keys(seed, &rk);
    switch (a->kind) { /* one loop per kind: no dispatch inside it */
    case FM_PX_SIMD_RAW: fill_kind(FM_PX_SIMD_RAW, a, &rk, u0, nv, dst, nt); break;
    case FM_PX_SIMD_UNIFORM_F32: fill_kind(FM_PX_SIMD_UNIFORM_F32, a, &rk, u0, nv, dst, nt); break;
    case FM_PX_SIMD_NORMAL_F32: fill_kind(FM_PX_SIMD_NORMAL_F32, a, &rk, u0, nv, dst, nt); break;
    case FM_PX_SIMD_EXPONENTIAL_F32: fill_kind(FM_PX_SIMD_EXPONENTIAL_F32, a, &rk, u0, nv, dst, nt); break;
    case FM_PX_SIMD_UNIFORM_F64: fill_kind(FM_PX_SIMD_UNIFORM_F64, a, &rk, u0, nv, dst, nt); break;
    case FM_PX_SIMD_NORMAL_F64: fill_kind(FM_PX_SIMD_NORMAL_F64, a, &rk, u0, nv, dst, nt); break;
    default: fill_kind(FM_PX_SIMD_EXPONENTIAL_F64, a, &rk, u0, nv, dst, nt); break;
    }
    return nv * L;
}

int SFX(fm_philox_simd_blocks)(int nb, uint64_t seed, const uint32_t *const ctr[4], uint32_t *const out[4])
{
    int i = 0;
    round_keys rk;
    if (nb >= L)
        make_keys(seed, &rk);
    for (; i + NV * L <= nb; i += NV * L) {
        VI c[NV][4];
        for (int v = 0; v < NV; v++)
            for (int j = 0; j < 4; j++)
                c[v][j] = iload(ctr[j] + i + v * L);
        philox_nv(c, NV, &rk);
        for (int v = 0; v < NV; v++)
            for (int j = 0; j < 4; j++)
                istore(out[j] + i + v * L, c[v][j]);
    }
    for (; i + L <= nb; i += L) {
        VI c[1][4] = {{iload(ctr[0] + i), iload(ctr[1] + i), iload(ctr[2] + i), iload(ctr[3] + i)}};
        philox_nv(c, 1, &rk);
        for (int j = 0; j < 4; j++)
            istore(out[j] + i, c[0][j]);
    }
    return i;
}
