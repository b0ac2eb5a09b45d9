/* registry.c : the table of built-in backends and device memory operations.
 * Adding a backend: one new file under backends/<device>/ plus one row here (a CUDA one: a row in
 * backends/cuda/cuda_entry.c, the table of the CUDA module libfusemath_cuda.so). */
#include "internal.h"

extern const fm_backend fm_backend_openblas_matmul;
extern const fm_backend fm_backend_gemmkernel_matmul;
extern const fm_backend fm_backend_intgemm_matmul;
extern const fm_backend fm_backend_halfgemm_matmul;
extern const fm_backend fm_backend_fftw_fft;
extern const fm_backend fm_backend_philox_rng;
extern const fm_backend fm_backend_lapack_solve;
#ifdef FM_HAVE_FFTW3L
extern const fm_backend fm_backend_fftwl_fft;
#endif
extern const fm_device_ops fm_cpu_device_ops;

const fm_backend *const fm_builtin_backends[] = {
    &fm_backend_openblas_matmul,
    &fm_backend_gemmkernel_matmul, /* offered first (priority): it declines what auto leaves to cblas */
    &fm_backend_intgemm_matmul,    /* integer and bool dtypes */
    &fm_backend_halfgemm_matmul,   /* float16 and bfloat16, through float32 */
    &fm_backend_fftw_fft,
#ifdef FM_HAVE_FFTW3L
    &fm_backend_fftwl_fft, /* long double, which fftw declines */
#endif
    &fm_backend_philox_rng,
    &fm_backend_lapack_solve,
};
const int fm_builtin_backend_count = (int)(sizeof fm_builtin_backends / sizeof fm_builtin_backends[0]);

const fm_device_ops *fm_device_ops_at(int i)
{
    const fm_cuda_module *cuda = fm_cuda_module_get(NULL, NULL); /* loaded by now: contexts exist */
    if (cuda && i-- == 0)
        return cuda->device_ops; /* first: it classifies FM_DEVICE_AUTO pointers */
    return i == 0 ? &fm_cpu_device_ops : NULL;
}
