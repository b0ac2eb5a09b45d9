/* cpu_gemm_kernel.c : the own GEMM kernel (cpu_gemm_kernel.h): one body, FM_DEFINE_GEMM_KERNEL,
 * instantiated for AVX-512, AVX2 and plain C, f32 and f64; the choice between them for this CPU. */
#include "cpu_gemm_kernel.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define FM_GEMM_KERNEL_X86 1
#include <immintrin.h>
#endif

/* A variant's vector operations, OP(ZERO)(), OP(LOAD)(p), OP(BCAST)(x), OP(FMA)(a, b, c) = a*b + c,
 * OP(MUL), OP(ADD), OP(MAX)(a, z) (NaN in a gives z, as x > 0 ? x : 0), OP(STORE)(p, v): on plain
 * scalars (the portable variant), or as the x86 intrinsics _mm<W>_<op>_<SX>. */
#define SCALAR_OP(op) SCALAR_##op
#define SCALAR_ZERO() 0
#define SCALAR_LOAD(p) (*(p))
#define SCALAR_BCAST(x) (x)
#define SCALAR_FMA(a, b, c) ((a) * (b) + (c))
#define SCALAR_MUL(a, b) ((a) * (b))
#define SCALAR_ADD(a, b) ((a) + (b))
#define SCALAR_MAX(a, z) ((a) > (z) ? (a) : (z))
#define SCALAR_STORE(p, v) (*(p) = (v))
#define X86_CAT4_(a, b, c, d) a##b##c##d
#define X86_CAT4(a, b, c, d) X86_CAT4_(a, b, c, d)
#define X86_OP(W, SX, op) X86_CAT4(_mm, W, X86_##op, SX)
#define X86_ZERO _setzero_
#define X86_LOAD _loadu_
#define X86_BCAST _set1_
#define X86_FMA _fmadd_
#define X86_MUL _mul_
#define X86_ADD _add_
#define X86_MAX _max_
#define X86_STORE _storeu_
#define AVX2_PS(op) X86_OP(256, ps, op)
#define AVX2_PD(op) X86_OP(256, pd, op)
#define AVX512_PS(op) X86_OP(512, ps, op)
#define AVX512_PD(op) X86_OP(512, pd, op)

/* One variant, NAME##_kernel: T elements in vectors V of VL; a register block of MR rows x NRV
 * vectors (MR x NRV accumulators, which must fit the register file with NRV + 1 more), so strips of
 * NR = NRV x VL columns; compiled with TARGET (a function attribute); its vector operations OP; named
 * ISA in describe(); auto picks it up to k = AUTO_MAX_K (measured against OpenBLAS). NAME##_pack:
 * strips [s0, s1) of the k x n matrix src (element (p, j) at src[p * rs + j * cs]) into
 * dst + s * k * NR, zero beyond column n. */
#define FM_DEFINE_GEMM_KERNEL(NAME, T, V, VL, NRV, MR, TARGET, OP, ISA, AUTO_MAX_K)                         \
TARGET static void NAME##_pack(int64_t k, int64_t n, const void *src, int64_t rs, int64_t cs, void *dst,    \
                               int64_t s0, int64_t s1)                                                      \
{                                                                                                           \
    enum { NR = NRV * VL };                                                                                 \
    const T *s = src;                                                                                       \
    T *out = (T *)dst + s0 * k * NR;                                                                        \
    for (int64_t st = s0; st < s1; st++) {                                                                  \
        const int64_t j0 = st * NR, w = n - j0 < NR ? n - j0 : NR;                                          \
        for (int64_t p = 0; p < k; p++, out += NR) {                                                        \
            const T *row = s + p * rs + j0 * cs;                                                            \
            if (cs == 1) {                                                                                  \
                memcpy(out, row, sizeof(T) * (size_t)w);                                                    \
            } else {                                                                                        \
                for (int64_t j = 0; j < w; j++)                                                             \
                    out[j] = row[j * cs];                                                                   \
            }                                                                                               \
            for (int64_t j = w; j < NR; j++)                                                                \
                out[j] = 0;                                                                                 \
        }                                                                                                   \
    }                                                                                                       \
}                                                                                                           \
                                                                                                            \
/* Rows of D [i0, i0 + MR) x one strip, summed over k in [k0, k1) in registers; the first                   \
 * k block starts from beta*C (or 0), later ones from D; the last applies bias and relu. */                 \
TARGET static void NAME##_block(const fm_cpu_gemm_args *x, int64_t rows, int64_t cols, void *dv,            \
                                int64_t ldd)                                                                \
{                                                                                                           \
    enum { NR = NRV * VL };                                                                                 \
    const T *a = x->a, *bp = x->bp, *bias = x->bias;                                                        \
    const int64_t k = x->k, ars = x->a_rs, acs = x->a_cs, kc = x->kc > 0 ? x->kc : k;                       \
    const T alpha = (T)x->alpha, beta = (T)x->beta, *cm = x->c;                                             \
    const int64_t crs = x->c_rs, ccs = x->c_cs, bld = x->b_ld, bstrip = x->b_strip;                         \
    const int scaled = alpha != (T)1, relu = x->relu;                                                       \
    const int64_t strips = (cols + NR - 1) / NR;                                                            \
    T *d = dv;                                                                                              \
    for (int64_t k0 = 0; k0 < k; k0 += kc) { /* k blocks: B's strips of a block stay in L1/L2 */            \
        const int64_t k1 = k - k0 < kc ? k : k0 + kc;                                                       \
        const int first = k0 == 0, last = k1 == k;                                                          \
        for (int64_t i0 = 0; i0 < rows; i0 += MR) {                                                         \
            const int64_t mr = rows - i0 < MR ? rows - i0 : MR;                                             \
            const T *ar[MR];                                                                                \
            for (int r = 0; r < MR; r++) /* a short last block reads its last row again, never stores it */ \
                ar[r] = a + (i0 + (r < mr ? r : mr - 1)) * ars + k0 * acs;                                  \
            for (int64_t s = 0; s < strips; s++) {                                                          \
                const T *b = bp + s * bstrip + k0 * bld;                                                    \
                V acc[MR][NRV];                                                                             \
                _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                       \
                    _Pragma("GCC unroll 4") for (int v = 0; v < NRV; v++) acc[r][v] = OP(ZERO)();           \
                for (int64_t p = 0; p < k1 - k0; p++, b += bld) {                                           \
                    V bv[NRV];                                                                              \
                    _Pragma("GCC unroll 4") for (int v = 0; v < NRV; v++) bv[v] = OP(LOAD)(b + v * VL);     \
                    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                   \
                    {                                                                                       \
                        const V av = OP(BCAST)(ar[r][p * acs]);                                             \
                        _Pragma("GCC unroll 4") for (int v = 0; v < NRV; v++)                               \
                            acc[r][v] = OP(FMA)(av, bv[v], acc[r][v]);                                      \
                    }                                                                                       \
                }                                                                                           \
                const int64_t w = cols - s * NR;                                                            \
                T *drow = d + i0 * ldd + s * NR;                                                            \
                /* the epilogue, in registers: alpha, then beta*C (first k block) or the partial            \
                 * sum so far (later ones), then bias and relu (last) */                                    \
                if (scaled) {                                                                               \
                    const V al = OP(BCAST)(alpha);                                                          \
                    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                   \
                        _Pragma("GCC unroll 4") for (int v = 0; v < NRV; v++)                               \
                            acc[r][v] = OP(MUL)(acc[r][v], al);                                             \
                }                                                                                           \
                if (!first || cm) {                                                                         \
                    const V bt = OP(BCAST)(first ? beta : (T)1);                                            \
                    /* constant bounds: acc stays in registers */                                           \
                    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {                                 \
                        if (r >= mr)                                                                        \
                            break;                                                                          \
                        const T *crow = first ? cm + (i0 + r) * crs + s * NR * ccs : drow + r * ldd;        \
                        const int64_t cs = first ? ccs : 1;                                                 \
                        T tmp[NR];                                                                          \
                        if (cs != 1 || w < NR) { /* gather a strided or partial row */                      \
                            for (int64_t j = 0; j < NR; j++)                                                \
                                tmp[j] = j < w ? crow[j * cs] : (T)0;                                       \
                            crow = tmp;                                                                     \
                        }                                                                                   \
                        _Pragma("GCC unroll 4") for (int v = 0; v < NRV; v++)                               \
                            acc[r][v] = OP(FMA)(bt, OP(LOAD)(crow + v * VL), acc[r][v]);                    \
                    }                                                                                       \
                }                                                                                           \
                if (last && bias) {                                                                         \
                    _Pragma("GCC unroll 4") for (int v = 0; v < NRV; v++)                                   \
                    {                                                                                       \
                        const V bb = OP(LOAD)(bias + s * NR + v * VL);                                      \
                        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                               \
                            acc[r][v] = OP(ADD)(acc[r][v], bb);                                             \
                    }                                                                                       \
                }                                                                                           \
                if (last && relu) {                                                                         \
                    const V z = OP(ZERO)();                                                                 \
                    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                   \
                        _Pragma("GCC unroll 4") for (int v = 0; v < NRV; v++)                               \
                            acc[r][v] = OP(MAX)(acc[r][v], z);                                              \
                }                                                                                           \
                if (w >= NR) {                                                                              \
                    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                   \
                    {                                                                                       \
                        if (r >= mr)                                                                        \
                            break;                                                                          \
                        _Pragma("GCC unroll 4") for (int v = 0; v < NRV; v++)                               \
                            OP(STORE)(drow + r * ldd + v * VL, acc[r][v]);                                  \
                    }                                                                                       \
                } else { /* the last, partial strip */                                                      \
                    T tmp[NR];                                                                              \
                    _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                   \
                    {                                                                                       \
                        if (r >= mr)                                                                        \
                            break;                                                                          \
                        _Pragma("GCC unroll 4") for (int v = 0; v < NRV; v++)                               \
                            OP(STORE)(tmp + v * VL, acc[r][v]);                                             \
                        memcpy(drow + r * ldd, tmp, sizeof(T) * (size_t)w);                                 \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
    }                                                                                                       \
}                                                                                                           \
static const fm_cpu_gemm_kernel NAME##_kernel = {ISA, MR, NRV * VL, AUTO_MAX_K, NAME##_pack, NAME##_block};

/* plain C: any CPU (MR x NR = 4 x 8 scalars); 4-6x OpenBLAS's time, never auto's choice */
FM_DEFINE_GEMM_KERNEL(generic_f32, float, float, 1, 8, 4, , SCALAR_OP, "generic", 0)
FM_DEFINE_GEMM_KERNEL(generic_f64, double, double, 1, 8, 4, , SCALAR_OP, "generic", 0)
#ifdef FM_GEMM_KERNEL_X86
/* AVX2 + FMA: 16 ymm registers, 6 x 2 accumulators; 2-core Zen 3: k in blocks ran 1.0-1.2x OpenBLAS */
#define AVX2_TARGET __attribute__((target("avx2,fma")))
FM_DEFINE_GEMM_KERNEL(avx2_f32, float, __m256, 8, 2, 6, AVX2_TARGET, AVX2_PS, "avx2", FM_CPU_GEMM_ONE_BLOCK_K)
FM_DEFINE_GEMM_KERNEL(avx2_f64, double, __m256d, 4, 2, 6, AVX2_TARGET, AVX2_PD, "avx2",
                      FM_CPU_GEMM_ONE_BLOCK_K)
/* AVX-512: 32 zmm registers, 8 x 2 accumulators; H200 host: squares 0.73-1.03x NumPy (cblas tiles
 * 0.81-1.10) */
#define AVX512_TARGET __attribute__((target("avx512f,avx2,fma")))
FM_DEFINE_GEMM_KERNEL(avx512_f32, float, __m512, 16, 2, 8, AVX512_TARGET, AVX512_PS, "avx512", INT64_MAX)
FM_DEFINE_GEMM_KERNEL(avx512_f64, double, __m512d, 8, 2, 8, AVX512_TARGET, AVX512_PD, "avx512", 1024)
#endif

/* The context's FUSEMATH_CPU_KERNEL=avx2|generic (fm_settings.cpu_kernel) caps the variant (tests
 * run the narrower ones on a machine that has the wider; a cap above what the CPU has is ignored). */
static int isa_cap(const fm_settings *settings)
{
    const char *e = settings ? settings->cpu_kernel : "";
    if (!strcmp(e, "generic"))
        return 0;
    if (!strcmp(e, "avx2"))
        return 1;
    return 2;
}

/* What this CPU runs, found once (2: AVX-512, 1: AVX2 + FMA, 0: neither). */
static int cpu_isa;
static pthread_once_t cpu_isa_once = PTHREAD_ONCE_INIT;

static void find_cpu_isa(void)
{
#ifdef FM_GEMM_KERNEL_X86
    __builtin_cpu_init();
    cpu_isa = __builtin_cpu_supports("avx512f")                                      ? 2
              : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                                 : 0;
#endif
}

const fm_cpu_gemm_kernel *fm_cpu_gemm_kernel_for(fm_dtype t, const fm_settings *settings)
{
    if (t != FM_F32 && t != FM_F64)
        return NULL;
    pthread_once(&cpu_isa_once, find_cpu_isa);
    const int f64 = t == FM_F64, cap = isa_cap(settings), isa = cpu_isa < cap ? cpu_isa : cap;
#ifdef FM_GEMM_KERNEL_X86
    if (isa == 2)
        return f64 ? &avx512_f64_kernel : &avx512_f32_kernel;
    if (isa == 1)
        return f64 ? &avx2_f64_kernel : &avx2_f32_kernel;
#else
    (void)isa;
#endif
    return f64 ? &generic_f64_kernel : &generic_f32_kernel;
}

int64_t fm_cpu_gemm_kc(int64_t k, const fm_settings *settings)
{
    /* FUSEMATH_CPU_KERNEL_KC=<n> (fm_settings.cpu_kernel_kc; 0: all of k in one block, -1: unset)
     * for measuring the choice */
    const int v = settings ? settings->cpu_kernel_kc : -1;
    if (v >= 0)
        return v == 0 || v >= k ? 0 : (int64_t)v;
    return k > FM_CPU_GEMM_ONE_BLOCK_K ? FM_CPU_GEMM_KC : 0;
}
