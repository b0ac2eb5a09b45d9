/* cuda_module.c : CUDA on demand. The CUDA backends are their own shared module, libfusemath_cuda.so,
 * the only part of fusemath that links the CUDA libraries, so libfusemath.so loads on any machine and
 * a CPU-only process maps none of CUDA's few hundred MiB. Order, once per process (the first context
 * creation, or the first fm_cuda_device_count):
 *   1. a build without CUDA, or a CUDA-less build of the tests: nothing to load;
 *   2. test programs linked against the objects carry the module's entry themselves: use it;
 *   3. the driver probe: libcuda.so.1 through dlopen, cuInit + cuDeviceGetCount through dlsym (no
 *      driver or no device: stop here, nothing else is loaded);
 *   4. dlopen the module next to libfusemath.so (dladdr), or FUSEMATH_CUDA_MODULE's path, which
 *      also skips step 3 (tests simulate a missing or broken module with it).
 * The module is never unloaded: plans and contexts hold its rows. */
#define _GNU_SOURCE
#include "context.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* Defined when the module's objects are linked into the same program (the C tests); a hidden weak
 * reference, so in libfusemath.so it is NULL at link time and exports nothing. */
extern const fm_cuda_module *fm_cuda_module_entry(void) __attribute__((weak, visibility("hidden")));

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int decided;            /* 1 once `loaded` and `absent_why` are final */
static const fm_cuda_module *loaded;  /* written before `decided` (release), read after it (acquire) */
static char absent_why[FM_WHY_LEN];

#ifndef FM_WITH_CUDA_MODULE
static const fm_cuda_module *load(const fm_settings *s, char *why, size_t n)
{
    snprintf(why, n, "built without CUDA (FUSEMATH_WITH_CUDA=OFF or no CUDA toolkit at build time)");
    return NULL;
}
#else
/* Whether the NVIDIA driver sees a device; loads libcuda.so.1 only (kept: the runtime maps it anyway,
 * and a library whose cuInit ran is not safe to unload). */
static int driver_sees_device(char *why, size_t n)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) {
        snprintf(why, n, "no NVIDIA driver (libcuda.so.1 not found)");
        return 0;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(cuda, "cuDeviceGetCount");
    int devices = 0, r = -1;
    if (!init || !count)
        snprintf(why, n, "no NVIDIA driver (libcuda.so.1 has no cuInit / cuDeviceGetCount)");
    else if ((r = init(0)) != 0)
        snprintf(why, n, "no CUDA device (cuInit failed: CUresult %d)", r);
    else if ((r = count(&devices)) != 0 || devices <= 0)
        snprintf(why, n, "no CUDA device (cuDeviceGetCount: %d devices, CUresult %d)", devices, r);
    return r == 0 && devices > 0;
}

/* libfusemath_cuda.so in the directory libfusemath.so was loaded from (build tree, install prefix
 * and wheel alike); the bare name (the loader's search path) when that is unknown. */
static void module_path(char *path, size_t n)
{
    Dl_info info;
    const int found = dladdr((const void *)fm_cuda_module_get, &info) && info.dli_fname;
    const char *self = found ? info.dli_fname : "";
    const char *slash = strrchr(self, '/');
    snprintf(path, n, "%.*slibfusemath_cuda.so", slash ? (int)(slash - self + 1) : 0, self);
}

static const fm_cuda_module *checked(const fm_cuda_module *m, const char *path, char *why, size_t n)
{
    if (m && m->abi_version == FM_CUDA_MODULE_ABI && m->layout == FM_CUDA_MODULE_LAYOUT)
        return m;
    snprintf(why, n, "libfusemath_cuda.so: %.120s is not the CUDA module of this libfusemath build (ABI %d, "
             "expected %d)", path, m ? m->abi_version : -1, FM_CUDA_MODULE_ABI);
    return NULL;
}

static const fm_cuda_module *load(const fm_settings *s, char *why, size_t n)
{
    if (fm_cuda_module_entry)
        return checked(fm_cuda_module_entry(), "the linked-in module", why, n);
    if (!s->cuda_module[0] && !driver_sees_device(why, n))
        return NULL;
    char path[sizeof s->cuda_module + 32];
    if (s->cuda_module[0])
        snprintf(path, sizeof path, "%s", s->cuda_module);
    else
        module_path(path, sizeof path);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, n, "libfusemath_cuda.so: %s", dlerror());
        return NULL;
    }
    typedef const fm_cuda_module *(*entry_fn)(void);
    const entry_fn entry = (entry_fn)dlsym(lib, "fm_cuda_module_entry");
    return checked(entry ? entry() : NULL, path, why, n); /* a refused library stays mapped: never unload */
}
#endif

const fm_cuda_module *fm_cuda_module_get(const fm_settings *settings, const char **why)
{
    if (!atomic_load_explicit(&decided, memory_order_acquire)) {
        pthread_mutex_lock(&load_lock);
        if (!atomic_load_explicit(&decided, memory_order_relaxed)) {
            fm_settings own;
            if (!settings && fm_settings_read(&own) != FM_OK) /* another variable is malformed: not ours */
                fm_clear_error(); /* (own is filled all the same, FUSEMATH_CUDA_MODULE included) */
            loaded = load(settings ? settings : &own, absent_why, sizeof absent_why);
            atomic_store_explicit(&decided, 1, memory_order_release);
        }
        pthread_mutex_unlock(&load_lock);
    }
    if (why)
        *why = loaded ? "" : absent_why;
    return loaded;
}

const char *fm_cuda_missing_device_text(void)
{
    static char text[FM_WHY_LEN + 40];
    const char *why = "";
    const fm_cuda_module *m = fm_cuda_module_get(NULL, &why);
    if (m && m->device_count() > 0)
        return "that device does not exist";
    pthread_mutex_lock(&load_lock); /* the same text every time: written once */
    if (!text[0])
        snprintf(text, sizeof text, "no CUDA device is available (%s)",
                 m ? "the CUDA runtime sees none" : why);
    pthread_mutex_unlock(&load_lock);
    return text;
}

static fm_status absent_probe(const fm_settings *settings, void **state, const char **why)
{
    fm_cuda_module_get(settings, why);
    return FM_ERR_UNAVAILABLE;
}

const fm_backend fm_cuda_absent_backend = {
    .name = "cuda",
    .device = FM_DEVICE_CUDA,
    .ops = ~0u, /* every operation: a problem on the GPU names it with the reason */
    .probe = absent_probe,
};

int fm_cuda_device_count(void)
{
    const fm_cuda_module *m = fm_cuda_module_get(NULL, NULL);
    return m ? m->device_count() : 0;
}
