/* cpu_gemm_kernel.c : the small-k GEMM kernel's variants (cpu_gemm_kernel.inc) for
 * AVX-512, AVX2 and plain C, f32 and f64, and the choice between them for this CPU. */
#include "cpu_gemm_kernel.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define FM_GEMM_KERNEL_X86 1
#include <immintrin.h>
#endif

/* ---- plain C: any CPU (MR x NR = 4 x 8 scalars) ---- */
#define T float
#define V float
#define VL 1
#define NRV 8
#define MR 4
#define KTARGET
#define KNAME(x) generic_f32_##x
#define KISA "generic"
#define KAUTO_MAX_K 0 /* scalar: 4-6x OpenBLAS's time, never auto's choice */
#include "cpu_gemm_kernel_scalar.h"
#include "cpu_gemm_kernel.inc"

#define T double
#define V double
#define VL 1
#define NRV 8
#define MR 4
#define KTARGET
#define KNAME(x) generic_f64_##x
#define KISA "generic"
#define KAUTO_MAX_K 0 /* scalar: 4-6x OpenBLAS's time, never auto's choice */
#include "cpu_gemm_kernel_scalar.h"
#include "cpu_gemm_kernel.inc"

#ifdef FM_GEMM_KERNEL_X86
/* ---- AVX2 + FMA: 16 ymm registers, 6 x 2 accumulators ---- */
#define T float
#define V __m256
#define W 256
#define SX ps
#define VL 8
#define NRV 2
#define MR 6
#define KTARGET __attribute__((target("avx2,fma")))
#define KNAME(x) avx2_f32_##x
#define KISA "avx2"
#define KAUTO_MAX_K FM_CPU_GEMM_ONE_BLOCK_K /* 2-core Zen 3: k in blocks ran 1.0-1.2x OpenBLAS */
#include "cpu_gemm_kernel_simd.h"
#include "cpu_gemm_kernel.inc"

#define T double
#define V __m256d
#define W 256
#define SX pd
#define VL 4
#define NRV 2
#define MR 6
#define KTARGET __attribute__((target("avx2,fma")))
#define KNAME(x) avx2_f64_##x
#define KISA "avx2"
#define KAUTO_MAX_K FM_CPU_GEMM_ONE_BLOCK_K /* 2-core Zen 3: k in blocks ran 1.0-1.2x OpenBLAS */
#include "cpu_gemm_kernel_simd.h"
#include "cpu_gemm_kernel.inc"

/* ---- AVX-512: 32 zmm registers, 8 x 2 accumulators ---- */
#define T float
#define V __m512
#define W 512
#define SX ps
#define VL 16
#define NRV 2
#define MR 8
#define KTARGET __attribute__((target("avx512f,avx2,fma")))
#define KNAME(x) avx512_f32_##x
#define KISA "avx512"
#define KAUTO_MAX_K INT64_MAX /* H200 host: squares 0.73-1.03x NumPy (cblas tiles 0.81-1.10) */
#include "cpu_gemm_kernel_simd.h"
#include "cpu_gemm_kernel.inc"

#define T double
#define V __m512d
#define W 512
#define SX pd
#define VL 8
#define NRV 2
#define MR 8
#define KTARGET __attribute__((target("avx512f,avx2,fma")))
#define KNAME(x) avx512_f64_##x
#define KISA "avx512"
#define KAUTO_MAX_K INT64_MAX /* H200 host: squares 0.73-1.03x NumPy (cblas tiles 0.81-1.10) */
#include "cpu_gemm_kernel_simd.h"
#include "cpu_gemm_kernel.inc"
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
