/* dist_gpu_load.c : the GPU ranks on demand (dist_gpu.h). libfusemath_mpi links no CUDA library; the
 * first GPU-rank plan of a process loads libfusemath_mpi_cuda.so from the directory libfusemath_mpi.so
 * was loaded from (build tree, install prefix and Python package alike), as the core loads
 * libfusemath_cuda.so. A build without it, or a machine whose loader cannot satisfy it (no CUDA
 * runtime), leaves the CPU ranks working and GPU-rank plans failing with the loader's reason. The
 * module is never unloaded: plans hold its functions. */
#define _GNU_SOURCE
#include "dist_gpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const fm_dist_gpu_ops *loaded;
static char absent_why[400];

static void load(void)
{
#if !FM_DIST_HAVE_GPU_MODULE
    snprintf(absent_why, sizeof absent_why, "libfusemath_mpi was built without them (no CUDA toolkit at build time, "
             "or FUSEMATH_WITH_DIST_GPU=OFF)");
#else
    Dl_info info;
    const int found = dladdr((const void *)fm_dist_gpu_module, &info) && info.dli_fname;
    const char *self = found ? info.dli_fname : "", *slash = strrchr(self, '/');
    char path[4096];
    snprintf(path, sizeof path, "%.*slibfusemath_mpi_cuda.so", slash ? (int)(slash - self + 1) : 0, self);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(absent_why, sizeof absent_why, "libfusemath_mpi_cuda.so cannot be loaded: %s", dlerror());
        return;
    }
    typedef const fm_dist_gpu_ops *(*entry_fn)(void);
    const entry_fn entry = (entry_fn)dlsym(lib, "fm_dist_gpu_module_entry");
    const fm_dist_gpu_ops *ops = entry ? entry() : NULL;
    if (ops && ops->abi == FM_DIST_GPU_ABI && ops->layout == FM_DIST_GPU_LAYOUT)
        loaded = ops;
    else
        snprintf(absent_why, sizeof absent_why, "%.280s is not the GPU module of this libfusemath_mpi build (ABI %d, "
                 "layout %d; expected %d, %d)", path, ops ? ops->abi : -1, ops ? ops->layout : -1, FM_DIST_GPU_ABI,
                 FM_DIST_GPU_LAYOUT);
#endif
}

const fm_dist_gpu_ops *fm_dist_gpu_module(const char **why)
{
    pthread_once(&load_once, load);
    if (why)
        *why = loaded ? "" : absent_why;
    return loaded;
}
