/* nvrtc_cache.h : run-time compilation of CUDA C++ with NVRTC, cached in memory and on disk.
 *
 * Generic on purpose: the matmul epilogue kernels (cuda_epilogue_kernel.c) and the cuFFT
 * LTO callbacks both go through it. Needs no GPU: NVRTC compiles for any supported
 * sm_<arch>; the driver is only needed to load the result.
 *
 * Disk cache: one file per (source, options, arch, lto, NVRTC version), named by the
 * SHA-256 of all of them, under <fm_nvrtc_cache_dir(settings)>/nvrtc/. Files carry a header with
 * the key and a checksum of the image; anything that does not verify (truncated, corrupt,
 * written by another version) is ignored and replaced. Writes go to a temporary file
 * that is renamed into place, so concurrent processes and threads never see a partial
 * file. When the directory cannot be created or written the cache is memory-only. */
#ifndef FM_NVRTC_CACHE_H
#define FM_NVRTC_CACHE_H

#include "internal.h"

#include <cuda_runtime.h>
#include <stddef.h>

/* The settings (the context's, fm_context_settings; NULL: no disk cache) give the cache
 * directory: read once from the environment at context creation, never here. */

/* Directory of the on-disk cache: settings.cache_dir ($FUSEMATH_CACHE_DIR, else
 * $XDG_CACHE_HOME/fusemath, else $HOME/.cache/fusemath; unset, empty or relative variables are
 * skipped); NULL if none. The string is the settings'. */
const char *fm_nvrtc_cache_dir(const fm_settings *settings);

/* Compile CUDA C++ source with NVRTC for sm_<arch> (e.g. 90) to a cubin (lto = 0) or LTO-IR
 * (lto = 1: "-arch=compute_<arch> -dlto --relocatable-device-code=true", what cuFFT's JIT LTO
 * links; else "-arch=sm_<arch>"), added to `options` here.
 * Cached on disk (and in memory) keyed by a strong hash (SHA-256) of source + options + arch +
 * lto + NVRTC version. *image is malloc'ed (caller frees). *from_cache (may be NULL) says
 * whether it came from the cache (memory or disk).
 * Errors: FM_ERR_BACKEND "nvrtc: compiling <name> for sm_<arch> failed: <compiler log>" for
 * a compile error (the log's first lines are in fm_last_error()); FM_ERR_INVALID_ARGUMENT for
 * bad arguments or an arch NVRTC does not support; FM_ERR_OUT_OF_MEMORY. Thread-safe. */
fm_status fm_nvrtc_compile(const fm_settings *settings, const char *source, const char *name_for_messages,
                           const char *const *options, int noptions, int arch, int lto, void **image, size_t *size,
                           int *from_cache);

/* fm_nvrtc_compile of a source fusemath generated, with the options they all take (C++17).
 * user_code: the source holds the user's function; the generated part always compiles, so a
 * compile error is then the user's: FM_ERR_INVALID_ARGUMENT with NVRTC's log. */
fm_status fm_nvrtc_compile_generated(const fm_settings *settings, const char *source, const char *name,
                                     int arch, int lto, int user_code, void **image, size_t *size,
                                     int *from_cache);

/* NVRTC's version (nvrtcVersion). */
fm_status fm_nvrtc_version(int *major, int *minor);

/* Whether NVRTC can compile for sm_<arch> (nvrtcGetSupportedArchs). */
int fm_nvrtc_supports_arch(int arch);

/* The NVRTC target for device_id: sm_<major><minor> or, when this NVRTC does not know it, the
 * newest sm_<major><m> with m <= minor (code for one minor runs on later minors of the same
 * major). FM_ERR_UNAVAILABLE / FM_ERR_NOT_SUPPORTED naming `who` otherwise. */
fm_status fm_nvrtc_arch_for_device(int device_id, const char *who, int *arch);

/* ---- loading what fm_nvrtc_compile made (lto 0) ----
 * A CUDA library (context-independent: its kernels launch on whichever device is current). */
typedef struct fm_nvrtc_module {
    void *image; /* from fm_nvrtc_compile, owned: freed by fm_nvrtc_module_unload */
    cudaLibrary_t lib;
} fm_nvrtc_module;

/* Load m->image and get the kernels names[0..n) into kernels; errors name `who`. */
fm_status fm_nvrtc_module_load(fm_nvrtc_module *m, const char *who, const char *const *names, cudaKernel_t *kernels,
                               int n);
/* fm_nvrtc_compile_generated (cubin) for device_id's architecture, then fm_nvrtc_module_load. */
fm_status fm_nvrtc_module_build(fm_nvrtc_module *m, const fm_settings *settings, const char *source,
                                const char *name, int device_id, int user_code, const char *who,
                                const char *const *names, cudaKernel_t *kernels, int n);
/* Unload and free the image; a zeroed module is fine. */
void fm_nvrtc_module_unload(fm_nvrtc_module *m);

/* A failed CUDA runtime call as a status naming who and what: FM_ERR_OUT_OF_MEMORY for
 * cudaErrorMemoryAllocation, FM_ERR_UNAVAILABLE for no device / driver, else FM_ERR_BACKEND;
 * clears a non-sticky error. */
fm_status fm_cuda_runtime_fail(cudaError_t e, const char *who, const char *what);

/* Tests: forget the in-memory cache (the disk cache is untouched). */
void fm_nvrtc_cache_clear_memory(void);

/* Tests: the disk-cache file that fm_nvrtc_compile would use for these arguments, into buf
 * (FM_ERR_UNAVAILABLE when there is no cache directory). */
fm_status fm_nvrtc_cache_file(const fm_settings *settings, const char *source, const char *const *options, int noptions,
                              int arch, int lto, char *buf, size_t size);

#endif
