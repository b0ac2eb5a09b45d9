/* cuda_epilogue_source.c : the CUDA C++ sources of the two-pass matmul's generated elementwise
 * epilogue kernel and deterministic column sums, and their NVRTC compiles (see
 * cuda_epilogue_kernel.h; loading and launching: cuda_epilogue_kernel.c).
 *
 * The CUDA C++ source is a fixed body specialised by #defines (dtype, chain) and compiled
 * with NVRTC through nvrtc_cache.c. It needs no toolkit header: f16 converts with PTX cvt
 * instructions, bf16 with integer arithmetic (round to nearest even), so it compiles the
 * same wherever libnvrtc is found. One thread handles FM_CW consecutive columns of a row: 8 when
 * a relu mask is read or written (a mask byte whole, by one thread), else 16 bytes' worth (2 for
 * f64), so that a warp's 16-byte accesses are contiguous (8 f64 per thread made each access
 * touch half sectors: fp64 8192^2 bias+relu ran at 2.6 TB/s on the H200). With unit column
 * strides (the launch checks them: the `unit` flag) the elements move as 16-byte vector accesses wherever the addresses
 * are 16-byte aligned, else element by element; other strides take the same code with strided
 * element accesses, rows fastest when |rs| < |cs| so that column-major D stays coalesced. The
 * stride choice is a uniform run-time flag rather than a second kernel: it costs nothing at run
 * time and halves the compile time. Memory-bound: one pass over D (+ C, aux), one launch,
 * grid-stride loop, 32-bit index arithmetic unless the problem needs 64. */
#define _POSIX_C_SOURCE 200809L

#include "cuda_epilogue_internal.h"

#include "epilogue.h"
#include "nvrtc_cache.h"
#include "philox_source.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* Source builder                                                           */
/* ------------------------------------------------------------------------ */
static const char SOURCE_OOM[] = "cuda epilogue kernel: out of memory generating the source";

/* The source written to the memory stream f (buffer *buf) into *out, or out of memory. */
static fm_status finish_source(FILE *f, char **buf, char **out)
{
    if (fclose(f) != 0 || !*buf) {
        free(*buf);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, SOURCE_OOM);
    }
    *out = *buf;
    return FM_OK;
}

/* ------------------------------------------------------------------------ */
/* Device source pieces                                                     */
/* ------------------------------------------------------------------------ */
static const char src_common[] =
    "typedef long long i64;\n"
    "typedef unsigned long long u64;\n"
    "typedef unsigned int u32;\n";

/* Per dtype: st_t (storage), ct_t (compute = accumulate), rt_t (real part), sc_t (scale),
 * fm_ld / fm_st (storage <-> compute), math names. */
static const char *src_dtype(fm_dtype t)
{
    switch (t) {
    case FM_F16:
        return "#define FM_COMPLEX 0\n"
               "typedef unsigned short st_t; typedef float ct_t; typedef float rt_t; typedef float sc_t;\n"
               "__device__ __forceinline__ ct_t fm_ld(st_t v) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(v)); return f; }\n"
               "__device__ __forceinline__ st_t fm_st(ct_t f) { unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
               "#define FM_TANH tanhf\n#define FM_EXP expf\n#define FM_FMIN fminf\n#define FM_FMAX fmaxf\n";
    case FM_BF16:
        return "#define FM_COMPLEX 0\n"
               "typedef unsigned short st_t; typedef float ct_t; typedef float rt_t; typedef float sc_t;\n"
               "__device__ __forceinline__ ct_t fm_ld(st_t v) { return __uint_as_float(((u32)v) << 16); }\n"
               "__device__ __forceinline__ st_t fm_st(ct_t f) {\n"
               "  u32 u = __float_as_uint(f);\n"
               "  if ((u & 0x7fffffffu) > 0x7f800000u) return (st_t)((u >> 16) | 0x40u); /* quiet NaN */\n"
               "  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */\n"
               "  return (st_t)(u >> 16);\n"
               "}\n"
               "#define FM_TANH tanhf\n#define FM_EXP expf\n#define FM_FMIN fminf\n#define FM_FMAX fmaxf\n";
    case FM_F32:
        return "#define FM_COMPLEX 0\n"
               "typedef float st_t; typedef float ct_t; typedef float rt_t; typedef float sc_t;\n"
               "__device__ __forceinline__ ct_t fm_ld(st_t v) { return v; }\n"
               "__device__ __forceinline__ st_t fm_st(ct_t v) { return v; }\n"
               "#define FM_TANH tanhf\n#define FM_EXP expf\n#define FM_FMIN fminf\n#define FM_FMAX fmaxf\n";
    case FM_F64:
        return "#define FM_COMPLEX 0\n"
               "typedef double st_t; typedef double ct_t; typedef double rt_t; typedef double sc_t;\n"
               "__device__ __forceinline__ ct_t fm_ld(st_t v) { return v; }\n"
               "__device__ __forceinline__ st_t fm_st(ct_t v) { return v; }\n"
               "#define FM_TANH tanh\n#define FM_EXP exp\n#define FM_FMIN fmin\n#define FM_FMAX fmax\n";
    case FM_C64:
        return "#define FM_COMPLEX 1\n"
               "typedef float2 st_t; typedef float2 ct_t; typedef float rt_t; typedef float sc_t;\n"
               "__device__ __forceinline__ ct_t fm_ld(st_t v) { return v; }\n"
               "__device__ __forceinline__ st_t fm_st(ct_t v) { return v; }\n";
    case FM_C128:
        return "#define FM_COMPLEX 1\n"
               "typedef double2 st_t; typedef double2 ct_t; typedef double rt_t; typedef double sc_t;\n"
               "__device__ __forceinline__ ct_t fm_ld(st_t v) { return v; }\n"
               "__device__ __forceinline__ st_t fm_st(ct_t v) { return v; }\n";
    default:
        return NULL;
    }
}

static const char src_arith[] =
    "#if FM_COMPLEX\n"
    "__device__ __forceinline__ ct_t fm_zero() { ct_t z; z.x = 0; z.y = 0; return z; }\n"
    "__device__ __forceinline__ ct_t fm_add(ct_t a, ct_t b) { a.x += b.x; a.y += b.y; return a; }\n"
    "__device__ __forceinline__ ct_t fm_cmul(rt_t re, rt_t im, ct_t c) {\n"
    "  ct_t r; r.x = re * c.x - im * c.y; r.y = re * c.y + im * c.x; return r; }\n"
    "__device__ __forceinline__ ct_t fm_shfl(ct_t v, int o) {\n"
    "  v.x = __shfl_xor_sync(0xffffffffu, v.x, o); v.y = __shfl_xor_sync(0xffffffffu, v.y, o); return v; }\n"
    "#else\n"
    "__device__ __forceinline__ ct_t fm_zero() { return (ct_t)0; }\n"
    "__device__ __forceinline__ ct_t fm_add(ct_t a, ct_t b) { return a + b; }\n"
    "__device__ __forceinline__ ct_t fm_cmul(rt_t re, rt_t im, ct_t c) { (void)im; return re * c; }\n"
    "__device__ __forceinline__ ct_t fm_shfl(ct_t v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }\n"
    "#endif\n"
    "template <bool RO, typename T> __device__ __forceinline__ T fm_load1(const T *p) {\n"
    "  if constexpr (RO) return __ldg(p); else return *p; }\n";

/* Elementwise kernel body; the FM_* switches come before it. */
static const char src_ew[] =
    "struct P {\n"
    "  void *d; const void *c; const void *bias; const void *scale; void *aux;\n"
    "  i64 m, n, batch, nch, total;\n"
    "  i64 d_rs, d_cs, d_bs, c_rs, c_cs, c_bs;\n"
    "  i64 bias_cs, bias_bs, scale_cs, scale_bs;\n"
    "  i64 aux_rs, aux_cs, aux_bs;\n"
    "  double beta_re, beta_im, clamp_lo, clamp_hi;\n"
    "  u64 drop_base, drop_seed, drop_thr;\n"
    "  double drop_scale;\n"
    "  int small, rows_fast, unit, pad_;\n"
    "};\n"
    "static_assert(sizeof(P) == FM_P_SIZE, \"parameter block must match the host's\");\n"
    "static_assert(!(FM_MASK_OUT || FM_MASK_IN) || FM_CW == 8, \"a relu mask byte is one thread's 8 columns\");\n"
    "\n"
    "/* up to FM_CW consecutive elements of a row (stride cs); vec: one aligned 16-byte access per 16 bytes */\n"
    "template <bool RO, typename T>\n"
    "__device__ __forceinline__ void fm_getw(const T *p, i64 cs, int cnt, bool vec, T (&v)[FM_CW]) {\n"
    "  if (vec) {\n"
    "    union { uint4 q[FM_CW * sizeof(T) / 16]; T e[FM_CW]; } u;\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < (int)(FM_CW * sizeof(T) / 16); k++) u.q[k] = fm_load1<RO>((const uint4 *)p + k);\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) v[k] = u.e[k];\n"
    "  } else {\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) if (k < cnt) v[k] = fm_load1<RO>(p + k * cs);\n"
    "  }\n"
    "}\n"
    "template <typename T>\n"
    "__device__ __forceinline__ void fm_putw(T *p, i64 cs, int cnt, bool vec, const T (&v)[FM_CW]) {\n"
    "  if (vec) {\n"
    "    union { uint4 q[FM_CW * sizeof(T) / 16]; T e[FM_CW]; } u;\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) u.e[k] = v[k];\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < (int)(FM_CW * sizeof(T) / 16); k++) ((uint4 *)p)[k] = u.q[k];\n"
    "  } else {\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) if (k < cnt) p[k * cs] = v[k];\n"
    "  }\n"
    "}\n"
    "\n"
    "#if !FM_COMPLEX\n"
    "__device__ __forceinline__ ct_t fm_act(ct_t x, const P &p) {\n"
    "  (void)p;\n"
    "#if FM_ACT == 1 /* relu */\n"
    "  return x > (ct_t)0 ? x : (ct_t)0;\n"
    "#elif FM_ACT == 2 /* gelu, tanh approximation */\n"
    "  const ct_t k0 = (ct_t)0.7978845608028654, k1 = (ct_t)0.044715;\n"
    "  return (ct_t)0.5 * x * ((ct_t)1 + FM_TANH(k0 * (x + k1 * x * x * x)));\n"
    "#elif FM_ACT == 3 /* sigmoid */\n"
    "  return (ct_t)1 / ((ct_t)1 + FM_EXP(-x));\n"
    "#elif FM_ACT == 4 /* tanh */\n"
    "  return FM_TANH(x);\n"
    "#elif FM_ACT == 5 /* silu */\n"
    "  return x / ((ct_t)1 + FM_EXP(-x));\n"
    "#elif FM_ACT == 6 /* clamp */\n"
    "  return FM_FMIN(FM_FMAX(x, (ct_t)p.clamp_lo), (ct_t)p.clamp_hi);\n"
    "#else\n"
    "  return x;\n"
    "#endif\n"
    "}\n"
    "__device__ __forceinline__ ct_t fm_dgelu(ct_t x) {\n"
    "  const ct_t k0 = (ct_t)0.7978845608028654, k1 = (ct_t)0.044715;\n"
    /* x^2 and x capped at |x| = 10, where tanh is already exactly +-1: an uncapped x^2 overflows
     * (f32 at |x| > 1.8e19) into 0 * inf = NaN, and x = +-inf gave inf * 0, where the
     * derivative is 1 or 0 (NaN stays NaN through th) */
    "  const ct_t x2 = FM_FMIN(x * x, (ct_t)100);\n"
    "  const ct_t xc = x > (ct_t)10 ? (ct_t)10 : (x < (ct_t)-10 ? (ct_t)-10 : x);\n"
    "  const ct_t th = FM_TANH(k0 * (x + k1 * x2 * x));\n"
    "  return (ct_t)0.5 * ((ct_t)1 + th) + (ct_t)0.5 * xc * ((ct_t)1 - th * th) * k0 * ((ct_t)1 + (ct_t)3 * k1 * x2);\n"
    "}\n"
    "#endif\n"
    "\n"
    "#if FM_DROPOUT\n"
    "/* words e0 .. e0 + cnt - 1 of the portable stream (word w: word w % 4 of block w / 4,\n"
    " * philox_portable.h's fm_px_block), the same bits the CPU's epilogue draws */\n"
    "__device__ __forceinline__ void fm_drop_words(u64 seed, u64 e0, int cnt, u32 (&w)[FM_CW]) {\n"
    "  const u64 b0 = e0 >> 2; const int off = (int)(e0 & 3u), nb = (off + cnt + 3) >> 2;\n"
    "  u32 buf[4 * ((FM_CW + 3) / 4 + 1)];\n"
    "#pragma unroll\n"
    "  for (int q = 0; q < (FM_CW + 3) / 4 + 1; q++) {\n"
    "    fm_px_u32 r[4] = {0u, 0u, 0u, 0u};\n"
    "    if (q < nb) fm_px_block((fm_px_u64)seed, (fm_px_u64)(b0 + (u64)q), r);\n"
    "    buf[4 * q] = r[0]; buf[4 * q + 1] = r[1]; buf[4 * q + 2] = r[2]; buf[4 * q + 3] = r[3];\n"
    "  }\n"
    "#pragma unroll\n" /* constant indices only: buf stays in registers (buf[off + k] went to local memory) */
    "  for (int k = 0; k < FM_CW; k++)\n"
    "    w[k] = off == 0 ? buf[k] : off == 1 ? buf[k + 1] : off == 2 ? buf[k + 2] : buf[k + 3];\n"
    "}\n"
    "#endif\n"
    "\n"
    "/* columns FM_CW*ch .. FM_CW*ch+FM_CW-1 of row i of batch entry b; unit: every column stride is 1 */\n"
    "__device__ __forceinline__ void fm_item(const P &p, const bool unit, i64 b, i64 i, i64 ch) {\n"
    "  const i64 j0 = ch * FM_CW;\n"
    "#if FM_MASK_OUT || FM_MASK_IN\n"
    "  unsigned char *mrow = (unsigned char *)p.aux + b * p.aux_bs + i * p.aux_rs;\n"
    "#endif\n"
    "#if FM_MASK_OUT\n"
    "  if (j0 >= p.n) { mrow[ch] = 0; return; } /* row padding: whole zero bytes */\n"
    "#endif\n"
    "  const i64 left = p.n - j0;\n"
    "  const int cnt = left < FM_CW ? (int)left : FM_CW;\n"
    "  st_t *dp = (st_t *)p.d + b * p.d_bs + i * p.d_rs + j0 * (unit ? 1 : p.d_cs);\n"
    "  u64 align = (u64)dp;\n"
    "#if FM_ADD_C\n"
    "  const st_t *cp = (const st_t *)p.c + b * p.c_bs + i * p.c_rs + j0 * (unit ? 1 : p.c_cs);\n"
    "  align |= (u64)cp;\n"
    "#endif\n"
    "#if FM_BIAS\n"
    "  const st_t *bp = (const st_t *)p.bias + b * p.bias_bs + j0 * (unit ? 1 : p.bias_cs);\n"
    "  align |= (u64)bp;\n"
    "#endif\n"
    "#if FM_SCALE\n"
    "  const sc_t *sp = (const sc_t *)p.scale + b * p.scale_bs + j0 * (unit ? 1 : p.scale_cs);\n"
    "  align |= (u64)sp;\n"
    "#endif\n"
    "#if FM_XAUX_OUT || FM_XAUX_IN\n"
    "  st_t *ap = (st_t *)p.aux + b * p.aux_bs + i * p.aux_rs + j0 * (unit ? 1 : p.aux_cs);\n"
    "  align |= (u64)ap;\n"
    "#endif\n"
    "  const bool vec = unit && cnt == FM_CW && (align & 15) == 0;\n"
    "  st_t dv[FM_CW] = {};\n"
    "#if !FM_ZERO_D /* no product (alpha = 0 or k = 0): D is not read, x starts at 0 */\n"
    "  fm_getw<false>(dp, unit ? 1 : p.d_cs, cnt, vec, dv);\n"
    "#endif\n"
    "  ct_t x[FM_CW];\n"
    "#pragma unroll\n"
    "  for (int k = 0; k < FM_CW; k++) x[k] = fm_ld(dv[k]);\n"
    "#if FM_SCALE /* with FM_ZERO_D too: 0 * scale[j], as the CPU computes it (inf there gives NaN) */\n"
    "  { sc_t sv[FM_CW] = {};\n"
    "    fm_getw<true>(sp, unit ? 1 : p.scale_cs, cnt, vec, sv);\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) x[k] = x[k] * (ct_t)sv[k]; }\n"
    "#endif\n"
    "#if FM_ADD_C\n"
    "  { st_t cv[FM_CW] = {};\n"
    "    fm_getw<true>(cp, unit ? 1 : p.c_cs, cnt, vec, cv);\n"
    "    const rt_t br = (rt_t)p.beta_re, bi = (rt_t)p.beta_im;\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) x[k] = fm_add(x[k], fm_cmul(br, bi, fm_ld(cv[k]))); }\n"
    "#endif\n"
    "#if FM_BIAS\n"
    "  { st_t bv[FM_CW] = {};\n"
    "    fm_getw<true>(bp, unit ? 1 : p.bias_cs, cnt, vec, bv);\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) x[k] = fm_add(x[k], fm_ld(bv[k])); }\n"
    "#endif\n"
    "#if FM_MASK_OUT && !FM_DROPOUT\n"
    "  { u32 m = 0;\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) m |= (u32)(k < cnt && x[k] > (ct_t)0) << k;\n"
    "    mrow[ch] = (unsigned char)m; }\n"
    "#elif FM_XAUX_OUT\n"
    "  { st_t av[FM_CW];\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) av[k] = fm_st(x[k]);\n"
    "    fm_putw(ap, unit ? 1 : p.aux_cs, cnt, vec, av); }\n"
    "#endif\n"
    "#if FM_ACT\n"
    "#pragma unroll\n"
    "  for (int k = 0; k < FM_CW; k++) x[k] = fm_act(x[k], p);\n"
    "#endif\n"
    "#if FM_DROPOUT /* element e = (b m + i) n + j of D uses word drop_base + e */\n"
    "  { u32 w[FM_CW];\n"
    "    fm_drop_words(p.drop_seed, p.drop_base + ((u64)b * (u64)p.m + (u64)i) * (u64)p.n + (u64)j0, cnt, w);\n"
    "    const ct_t s = (ct_t)p.drop_scale;\n"
    "    u32 m = 0;\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) {\n"
    "      const bool keep = k < cnt && (u64)w[k] >= p.drop_thr;\n"
    "      x[k] = keep ? x[k] * s : (ct_t)0;\n"
    "      m |= (u32)(keep && (FM_ACT != 1 || x[k] > (ct_t)0)) << k; /* relu: AND the relu bit */\n"
    "    }\n"
    "#if FM_MASK_OUT\n"
    "    mrow[ch] = (unsigned char)m;\n"
    "#else\n"
    "    (void)m;\n"
    "#endif\n"
    "  }\n"
    "#endif\n"
    "#if FM_MASK_IN\n"
    "  { const u32 m = __ldg((const unsigned char *)mrow + ch);\n"
    "#if FM_DDROPOUT\n"
    "    const ct_t s = (ct_t)p.drop_scale;\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) x[k] = ((m >> k) & 1u) ? x[k] * s : (ct_t)0; }\n"
    "#else\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) x[k] = ((m >> k) & 1u) ? x[k] : (ct_t)0; }\n"
    "#endif\n"
    "#elif FM_XAUX_IN\n"
    "  { st_t av[FM_CW] = {};\n"
    "    fm_getw<true>((const st_t *)ap, unit ? 1 : p.aux_cs, cnt, vec, av);\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < FM_CW; k++) x[k] = x[k] * fm_dgelu(fm_ld(av[k])); }\n"
    "#endif\n"
    "#pragma unroll\n"
    "  for (int k = 0; k < FM_CW; k++) dv[k] = fm_st(x[k]);\n"
    "  fm_putw(dp, unit ? 1 : p.d_cs, cnt, vec, dv);\n"
    "}\n"
    "\n"
    "/* items t = (b, i, ch), chunks fastest (rows fastest for strided D with |rs| < |cs|);\n"
    " * 32-bit index arithmetic when the item count allows it */\n"
    "extern \"C\" __global__ void __launch_bounds__(256) fm_ew(const P p) {\n"
    "  const bool unit = p.unit != 0, small = p.small != 0, rows_fast = p.rows_fast != 0, one = p.batch == 1;\n"
    "  const u64 total = (u64)p.total, step = (u64)gridDim.x * blockDim.x;\n"
    "  for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += step) {\n"
    "    i64 b, i, ch;\n"
    "    if (small) {\n"
    "      const u32 tt = (u32)t, nch = (u32)p.nch, m = (u32)p.m;\n"
    "      u32 b32, i32, c32;\n"
    "      if (!rows_fast) {\n"
    "        const u32 row = tt / nch; c32 = tt - row * nch;\n"
    "        if (one) { b32 = 0; i32 = row; } else { b32 = row / m; i32 = row - b32 * m; }\n"
    "      } else {\n"
    "        const u32 q = tt / m; i32 = tt - q * m;\n"
    "        if (one) { b32 = 0; c32 = q; } else { b32 = q / nch; c32 = q - b32 * nch; }\n"
    "      }\n"
    "      b = b32; i = i32; ch = c32;\n"
    "    } else {\n"
    "      const i64 tt = (i64)t;\n"
    "      if (!rows_fast) { const i64 row = tt / p.nch; ch = tt - row * p.nch; b = row / p.m; i = row - b * p.m; }\n"
    "      else { const i64 q = tt / p.m; i = tt - q * p.m; b = q / p.nch; ch = q - b * p.nch; }\n"
    "    }\n"
    "    fm_item(p, unit, b, i, ch);\n"
    "  }\n"
    "}\n";

/* Column sums: stage 1 (fm_colsum_cols_unit / _cols_strided / _rows) sums a segment of rows per
 * item into the workspace (or straight into out when there is one segment); stage 2
 * (fm_colsum_final) adds the segments in order. */
static const char src_colsum[] =
    "struct CP {\n"
    "  const void *x; void *out; void *ws;\n"
    "  i64 rows, cols, batch, S, seg, tiles, nitems;\n"
    "  i64 x_rs, x_cs, x_bs, o_cs, o_bs;\n"
    "  int direct, pad_;\n"
    "};\n"
    "static_assert(sizeof(CP) == FM_CP_SIZE, \"parameter block must match the host's\");\n"
    "constexpr int FM_V = 16 / (int)sizeof(st_t); /* columns per thread in the unit-stride kernel */\n"
    "\n"
    "__device__ __forceinline__ void fm_emit(const CP &p, i64 b, i64 s, i64 j, ct_t v) {\n"
    "  if (p.direct) ((st_t *)p.out)[b * p.o_bs + j * p.o_cs] = fm_st(v);\n"
    "  else ((ct_t *)p.ws)[(b * p.S + s) * p.cols + j] = v;\n"
    "}\n"
    "\n"
    "/* block (256 threads = 8 warps) per item (b, segment, tile of 32*FM_V columns); lanes across\n"
    " * columns, warps across rows; fixed-order reduction over the warps through shared memory */\n"
    "template <bool UNIT>\n"
    "__device__ __forceinline__ void fm_cols(const CP &p) {\n"
    "  __shared__ ct_t sh[8][32 * FM_V];\n"
    "  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;\n"
    "  for (i64 item = blockIdx.x; item < p.nitems; item += gridDim.x) {\n"
    "    const i64 tile = item % p.tiles, r = item / p.tiles, s = r % p.S, b = r / p.S;\n"
    "    const i64 jt = tile * (32 * FM_V);\n"
    "    const i64 i0 = s * p.seg, i1 = p.rows < i0 + p.seg ? p.rows : i0 + p.seg;\n"
    "    const st_t *xb = (const st_t *)p.x + b * p.x_bs;\n"
    "    ct_t acc[FM_V];\n"
    "#pragma unroll\n"
    "    for (int v = 0; v < FM_V; v++) acc[v] = fm_zero();\n"
    "    if (UNIT) {\n"
    "      const i64 j = jt + lane * FM_V;\n"
    "      const bool full = j + FM_V <= p.cols;\n"
    "#pragma unroll 4\n"
    "      for (i64 i = i0 + w; i < i1; i += 8) {\n"
    "        const st_t *q = xb + i * p.x_rs + j;\n"
    "        if (full && ((u64)q & 15) == 0) {\n"
    "          union { uint4 u; st_t e[FM_V]; } t;\n"
    "          t.u = __ldg((const uint4 *)q);\n"
    "#pragma unroll\n"
    "          for (int v = 0; v < FM_V; v++) acc[v] = fm_add(acc[v], fm_ld(t.e[v]));\n"
    "        } else {\n"
    "#pragma unroll\n"
    "          for (int v = 0; v < FM_V; v++) if (j + v < p.cols) acc[v] = fm_add(acc[v], fm_ld(__ldg(q + v)));\n"
    "        }\n"
    "      }\n"
    "    } else {\n"
    "#pragma unroll 4\n"
    "      for (i64 i = i0 + w; i < i1; i += 8) {\n"
    "        const st_t *q = xb + i * p.x_rs;\n"
    "#pragma unroll\n"
    "        for (int v = 0; v < FM_V; v++) {\n"
    "          const i64 j = jt + lane + 32 * v;\n"
    "          if (j < p.cols) acc[v] = fm_add(acc[v], fm_ld(__ldg(q + j * p.x_cs)));\n"
    "        }\n"
    "      }\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int v = 0; v < FM_V; v++) sh[w][UNIT ? lane * FM_V + v : lane + 32 * v] = acc[v];\n"
    "    __syncthreads();\n"
    "    for (int c = threadIdx.x; c < 32 * FM_V; c += blockDim.x) {\n"
    "      const i64 j = jt + c;\n"
    "      if (j < p.cols) {\n"
    "        ct_t t = sh[0][c];\n"
    "#pragma unroll\n"
    "        for (int k = 1; k < 8; k++) t = fm_add(t, sh[k][c]);\n"
    "        fm_emit(p, b, s, j, t);\n"
    "      }\n"
    "    }\n"
    "    __syncthreads();\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(256) fm_colsum_cols_unit(const CP p) { fm_cols<true>(p); }\n"
    "extern \"C\" __global__ void __launch_bounds__(256) fm_colsum_cols_strided(const CP p) { fm_cols<false>(p); }\n"
    "\n"
    "/* warp per item (b, segment, column): lanes across rows (coalesced when rs == 1), shuffle tree */\n"
    "extern \"C\" __global__ void __launch_bounds__(256) fm_colsum_rows(const CP p) {\n"
    "  const int lane = threadIdx.x & 31;\n"
    "  const i64 nw = ((i64)gridDim.x * blockDim.x) >> 5;\n"
    "  for (i64 item = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; item < p.nitems; item += nw) {\n"
    "    const i64 j = item % p.cols, r = item / p.cols, s = r % p.S, b = r / p.S;\n"
    "    const i64 i0 = s * p.seg, i1 = p.rows < i0 + p.seg ? p.rows : i0 + p.seg;\n"
    "    const st_t *q = (const st_t *)p.x + b * p.x_bs + j * p.x_cs;\n"
    "    ct_t acc = fm_zero();\n"
    "#pragma unroll 4\n"
    "    for (i64 i = i0 + lane; i < i1; i += 32) acc = fm_add(acc, fm_ld(__ldg(q + i * p.x_rs)));\n"
    "#pragma unroll\n"
    "    for (int o = 16; o; o >>= 1) acc = fm_add(acc, fm_shfl(acc, o));\n"
    "    if (lane == 0) fm_emit(p, b, s, j, acc);\n"
    "  }\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void __launch_bounds__(256) fm_colsum_final(const CP p) {\n"
    "  const i64 total = p.batch * p.cols, step = (i64)gridDim.x * blockDim.x;\n"
    "  for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += step) {\n"
    "    const i64 j = t % p.cols, b = t / p.cols;\n"
    "    const ct_t *w = (const ct_t *)p.ws + b * p.S * p.cols + j;\n"
    "    ct_t acc = w[0];\n"
    "    for (i64 s = 1; s < p.S; s++) acc = fm_add(acc, w[s * p.cols]);\n"
    "    ((st_t *)p.out)[b * p.o_bs + j * p.o_cs] = fm_st(acc);\n"
    "  }\n"
    "}\n";

/* ------------------------------------------------------------------------ */
/* Specs                                                                    */
/* ------------------------------------------------------------------------ */
fm_status fm_cuda_ew_check_spec(const fm_cuda_ew_spec *spec)
{
    if (!spec)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "cuda epilogue kernel: spec is NULL");
    if (!fm_cuda_epi_dtype_ok(spec->dtype))
        return fm_fail(FM_ERR_DTYPE, "cuda epilogue kernel: dtype %s is not one of f16, bf16, f32, f64, c64, c128",
                       fm_dtype_name(spec->dtype));
    unsigned e = fm_cuda_epi_ew_bits(spec->epilogue);
    fm_status s = fm_epilogue_validate(e);
    if (s != FM_OK)
        return s;
    if (fm_dtype_is_complex(spec->dtype) && (e & ~(unsigned)FM_EPILOGUE_BIAS))
        return fm_fail(FM_ERR_NOT_SUPPORTED, "cuda epilogue kernel: complex dtype %s takes bias only (epilogue 0x%x)",
                       fm_dtype_name(spec->dtype), e);
    return FM_OK;
}

static int act_code(unsigned e)
{
    if (e & FM_EPILOGUE_RELU) return 1;
    if (e & FM_EPILOGUE_GELU) return 2;
    if (e & FM_EPILOGUE_SIGMOID) return 3;
    if (e & FM_EPILOGUE_TANH) return 4;
    if (e & FM_EPILOGUE_SILU) return 5;
    if (e & FM_EPILOGUE_CLAMP) return 6;
    return 0;
}

int fm_cuda_ew_chunk_width(const fm_cuda_ew_spec *spec)
{
    unsigned e = fm_cuda_epi_ew_bits(spec->epilogue);
    if (fm_cuda_ew_mask_out(e) || fm_cuda_ew_mask_in(e))
        return 8;
    size_t w = 16 / fm_dtype_size(spec->dtype);
    return w > 8 ? 8 : w < 1 ? 1 : (int)w;
}

static void ew_name(const fm_cuda_ew_spec *spec, char *buf, size_t size)
{
    char chain[128];
    if (fm_epilogue_format(fm_cuda_epi_ew_bits(spec->epilogue), chain, sizeof chain) != FM_OK)
        snprintf(chain, sizeof chain, "0x%x", fm_cuda_epi_ew_bits(spec->epilogue));
    snprintf(buf, size, "fusemath_ew_%s_%s%s%s.cu", fm_dtype_name(spec->dtype), chain, spec->add_c ? "_addc" : "",
             spec->zero_d ? "_zerod" : "");
}

fm_status fm_cuda_ew_source(const fm_cuda_ew_spec *spec, char **source)
{
    fm_status s = fm_cuda_ew_check_spec(spec);
    if (s != FM_OK)
        return s;
    if (!source)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "cuda epilogue kernel: source is NULL");
    unsigned e = fm_cuda_epi_ew_bits(spec->epilogue);
    int mask = fm_cuda_ew_mask_out(e);
    int xaux = (e & FM_EPILOGUE_AUX) && !mask;
    int drop = (e & FM_EPILOGUE_DROPOUT) != 0;
    int cw = fm_cuda_ew_chunk_width(spec);
    char name[192];
    ew_name(spec, name, sizeof name);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, SOURCE_OOM);
    fprintf(f, "/* %s: fusemath matmul epilogue, generated */\n", name);
    fputs(src_common, f);
    if (drop) /* the very header the CPU build includes: the same Philox, so the same mask */
        fputs(fm_philox_portable_src, f);
    fputs(src_dtype(spec->dtype), f);
    fprintf(f,
              "#define FM_SCALE %d\n#define FM_ADD_C %d\n#define FM_BIAS %d\n#define FM_ACT %d\n"
              "#define FM_MASK_OUT %d\n#define FM_XAUX_OUT %d\n#define FM_MASK_IN %d\n#define FM_XAUX_IN %d\n"
              "#define FM_ZERO_D %d\n#define FM_P_SIZE %zu\n#define FM_CW %d\n#define FM_DROPOUT %d\n"
              "#define FM_DDROPOUT %d\n",
              !!(e & FM_EPILOGUE_SCALE), !!spec->add_c, !!(e & FM_EPILOGUE_BIAS), act_code(e), mask, xaux,
              fm_cuda_ew_mask_in(e), !!(e & FM_EPILOGUE_DGELU), !!spec->zero_d, sizeof(ew_params), cw, drop,
              !!(e & FM_EPILOGUE_DDROPOUT));
    fputs(src_arith, f);
    fputs(src_ew, f);
    return finish_source(f, &buf, source);
}

fm_status fm_cuda_colsum_source(fm_dtype dtype, char **source)
{
    if (!fm_cuda_epi_dtype_ok(dtype))
        return fm_fail(FM_ERR_DTYPE, "cuda column-sum kernel: dtype %s is not one of f16, bf16, f32, f64, c64, c128",
                       fm_dtype_name(dtype));
    if (!source)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "cuda column-sum kernel: source is NULL");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, SOURCE_OOM);
    fprintf(f, "/* fusemath_colsum_%s.cu: fusemath column sums, generated */\n", fm_dtype_name(dtype));
    fputs(src_common, f);
    fputs(src_dtype(dtype), f);
    fprintf(f, "#define FM_CP_SIZE %zu\n", sizeof(cs_params));
    fputs(src_arith, f);
    fputs(src_colsum, f);
    return finish_source(f, &buf, source);
}

/* A generated source (s: its generation's status) compiled through the NVRTC cache, then freed. */
static fm_status compile_source(const fm_settings *settings, fm_status s, char *src, const char *name,
                                int arch, void **image, size_t *size, int *from_cache)
{
    if (s == FM_OK)
        s = fm_nvrtc_compile_generated(settings, src, name, arch, 0, 0, image, size, from_cache);
    free(src);
    return s;
}

fm_status fm_cuda_ew_compile(const fm_settings *settings, const fm_cuda_ew_spec *spec, int arch, void **image,
                             size_t *size, int *from_cache)
{
    char *src = NULL, name[192] = "";
    fm_status s = fm_cuda_ew_source(spec, &src);
    if (s == FM_OK)
        ew_name(spec, name, sizeof name);
    return compile_source(settings, s, src, name, arch, image, size, from_cache);
}

fm_status fm_cuda_colsum_compile(const fm_settings *settings, fm_dtype dtype, int arch, void **image, size_t *size,
                                 int *from_cache)
{
    char *src = NULL, name[64];
    snprintf(name, sizeof name, "fusemath_colsum_%s.cu", fm_dtype_name(dtype));
    fm_status s = fm_cuda_colsum_source(dtype, &src);
    return compile_source(settings, s, src, name, arch, image, size, from_cache);
}
