/* cuda_entry.c : the CUDA module's one entry point. libfusemath_cuda.so holds backends/cuda and
 * fusion/cuda and alone links the CUDA libraries; core dlopens it when a driver sees a device
 * (core/src/cuda_module.c) and joins these rows to every context after the built-in ones. */
#include "internal.h"

extern const fm_backend fm_backend_cublaslt_matmul;
extern const fm_backend fm_backend_cufft_fft;
extern const fm_backend fm_backend_fftkernel_fft;
extern const fm_backend fm_backend_rngkernel_rng;
extern const fm_backend fm_backend_curand_rng;
extern const fm_backend fm_backend_cusolver_dense;
extern const fm_device_ops fm_cuda_device_ops;
int fm_cuda_probe_device_count(void);

static const fm_backend *const cuda_backends[] = {
    &fm_backend_cublaslt_matmul,
    &fm_backend_cufft_fft,
    &fm_backend_fftkernel_fft,
    &fm_backend_rngkernel_rng, /* portable mode: the NVRTC kernel of philox_portable.h */
    &fm_backend_curand_rng,    /* curand mode: libcurand's device generator */
    &fm_backend_cusolver_dense,
};

static const fm_cuda_module cuda_module = {
    .abi_version = FM_CUDA_MODULE_ABI,
    .layout = FM_CUDA_MODULE_LAYOUT,
    .backends = cuda_backends,
    .nbackends = (int)(sizeof cuda_backends / sizeof cuda_backends[0]),
    .device_ops = &fm_cuda_device_ops,
    .device_count = fm_cuda_probe_device_count,
};

FM_API const fm_cuda_module *fm_cuda_module_entry(void) { return &cuda_module; }
