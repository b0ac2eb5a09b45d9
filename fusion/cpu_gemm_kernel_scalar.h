/* cpu_gemm_kernel_scalar.h : the vector operations of cpu_gemm_kernel.inc on plain scalars of
 * type T (the portable variant); included before each scalar instantiation, since the .inc
 * undefines them after use. No include guard on purpose. */
#define V_ZERO() ((T)0)
#define V_LOAD(p) (*(p))
#define V_BCAST(x) (x)
#define V_FMA(a, b, c) ((a) * (b) + (c))
#define V_MUL(a, b) ((a) * (b))
#define V_ADD(a, b) ((a) + (b))
#define V_MAX(a, z) ((a) > (z) ? (a) : (z)) /* NaN in a gives z, as x > 0 ? x : 0 */
#define V_STORE(p, v) (*(p) = (v))
