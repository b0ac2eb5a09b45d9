/* registry.c : the table of built-in backends and device memory operations.
 * Adding a backend: one new file under backends/<device>/ plus one row here. */
#include "internal.h"

extern const fm_backend fm_backend_openblas_matmul;
extern const fm_backend fm_backend_gemmkernel_matmul;
extern const fm_backend fm_backend_fftw_fft;
extern const fm_backend fm_backend_philox_rng;
extern const fm_device_ops fm_cpu_device_ops;
#ifdef FM_HAVE_CUDA
extern const fm_backend fm_backend_cublaslt_matmul;
extern const fm_backend fm_backend_cufft_fft;
extern const fm_backend fm_backend_fftkernel_fft;
extern const fm_device_ops fm_cuda_device_ops;
int fm_cuda_probe_device_count(void);
#endif

const fm_backend *const fm_builtin_backends[] = {
    &fm_backend_openblas_matmul,
    &fm_backend_gemmkernel_matmul, /* offered first (priority): it declines what auto leaves to cblas */
    &fm_backend_fftw_fft,
    &fm_backend_philox_rng,
#ifdef FM_HAVE_CUDA
    &fm_backend_cublaslt_matmul,
    &fm_backend_cufft_fft,
    &fm_backend_fftkernel_fft,
#endif
};
const int fm_builtin_backend_count = (int)(sizeof fm_builtin_backends / sizeof fm_builtin_backends[0]);

const fm_device_ops *const fm_builtin_device_ops[] = {
#ifdef FM_HAVE_CUDA
    &fm_cuda_device_ops, /* first: it classifies FM_DEVICE_AUTO pointers */
#endif
    &fm_cpu_device_ops,
};
const int fm_builtin_device_ops_count = (int)(sizeof fm_builtin_device_ops / sizeof fm_builtin_device_ops[0]);

int fm_builtin_cuda_device_count(void)
{
#ifdef FM_HAVE_CUDA
    return fm_cuda_probe_device_count();
#else
    return 0;
#endif
}
