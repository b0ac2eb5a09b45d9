/* cpu_gemm_kernel_simd.h : the vector operations of cpu_gemm_kernel.inc as the x86
 * intrinsics _mm<W>_<op>_<SX> (W: 256 or 512 bits, SX: ps or pd), included before each
 * vector instantiation, since the .inc undefines them after use. No include guard on purpose. */
#define FM_KERNEL_CAT4_(a, b, c, d) a##b##c##d
#define FM_KERNEL_CAT4(a, b, c, d) FM_KERNEL_CAT4_(a, b, c, d)
#define FM_KERNEL_OP(op) FM_KERNEL_CAT4(_mm, W, op, SX)
#define V_ZERO() FM_KERNEL_OP(_setzero_)()
#define V_LOAD(p) FM_KERNEL_OP(_loadu_)(p)
#define V_BCAST(x) FM_KERNEL_OP(_set1_)(x)
#define V_FMA(a, b, c) FM_KERNEL_OP(_fmadd_)(a, b, c)
#define V_MUL(a, b) FM_KERNEL_OP(_mul_)(a, b)
#define V_ADD(a, b) FM_KERNEL_OP(_add_)(a, b)
#define V_MAX(a, z) FM_KERNEL_OP(_max_)(a, z) /* NaN in a gives z, as x > 0 ? x : 0 */
#define V_STORE(p, v) FM_KERNEL_OP(_storeu_)(p, v)
