/* nvrtc_cache.c : NVRTC compilation with an in-memory and an on-disk cache (see nvrtc_cache.h). */
#define _POSIX_C_SOURCE 200809L

#include "nvrtc_cache.h"
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <cuda_runtime.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define FM_PATH_MAX 4096
#define FILE_MAGIC "FMNVRTC1"
#define FILE_HEADER 80                       /* magic 8 + key 32 + size 8 + image sha 32 */
#define FILE_MAX_IMAGE ((uint64_t)1 << 30)   /* anything larger is not ours */
#define MEM_MAX_ENTRIES 4096
#define MEM_MAX_BYTES ((size_t)512 << 20)

/* ------------------------------------------------------------------------ */
/* Paths                                                                    */
/* ------------------------------------------------------------------------ */
const char *fm_nvrtc_cache_dir(const fm_settings *settings)
{
    /* resolved at context creation (settings.c), with room left for nvrtc/<hash>.<ext> */
    return settings && settings->cache_dir[0] ? settings->cache_dir : NULL;
}

/* ------------------------------------------------------------------------ */
/* NVRTC facts                                                              */
/* ------------------------------------------------------------------------ */
static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;
static int nvrtc_major = -1, nvrtc_minor = -1;
static int nvrtc_archs[128];
static int nvrtc_narchs;

static void nvrtc_probe(void)
{
    if (nvrtcVersion(&nvrtc_major, &nvrtc_minor) != NVRTC_SUCCESS)
        nvrtc_major = nvrtc_minor = -1;
    int n = 0;
    if (nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0 && n <= (int)(sizeof nvrtc_archs / sizeof nvrtc_archs[0]) &&
        nvrtcGetSupportedArchs(nvrtc_archs) == NVRTC_SUCCESS)
        nvrtc_narchs = n;
}

fm_status fm_nvrtc_version(int *major, int *minor)
{
    pthread_once(&nvrtc_once, nvrtc_probe);
    if (nvrtc_major < 0)
        return fm_fail(FM_ERR_UNAVAILABLE, "nvrtc: nvrtcVersion failed");
    if (major)
        *major = nvrtc_major;
    if (minor)
        *minor = nvrtc_minor;
    return FM_OK;
}

int fm_nvrtc_supports_arch(int arch)
{
    pthread_once(&nvrtc_once, nvrtc_probe);
    for (int i = 0; i < nvrtc_narchs; i++)
        if (nvrtc_archs[i] == arch)
            return 1;
    return 0;
}

fm_status fm_nvrtc_arch_for_device(int device_id, const char *who, int *arch)
{
    int major = 0, minor = 0;
    cudaError_t e;
    if ((e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_id)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_id)) != cudaSuccess) {
        (void)cudaGetLastError();
        return fm_fail(e == cudaErrorNoDevice || e == cudaErrorInvalidDevice || e == cudaErrorInsufficientDriver
                           ? FM_ERR_UNAVAILABLE
                           : FM_ERR_BACKEND,
                       "%s: cudaDeviceGetAttribute(compute capability of device %d): %s (%s)", who, device_id,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    for (int m = minor; m >= 0; m--)
        if (fm_nvrtc_supports_arch(major * 10 + m)) {
            *arch = major * 10 + m;
            return FM_OK;
        }
    pthread_once(&nvrtc_once, nvrtc_probe);
    return fm_fail(FM_ERR_NOT_SUPPORTED, "%s: NVRTC %d.%d cannot compile for device %d (compute capability %d.%d)",
                   who, nvrtc_major, nvrtc_minor, device_id, major, minor);
}

/* ------------------------------------------------------------------------ */
/* Keys                                                                     */
/* ------------------------------------------------------------------------ */
static void make_key(const char *source, const char *const *options, int noptions, int arch, int lto, uint8_t key[32])
{
    fm_sha256 s;
    fm_sha256_init(&s);
    static const char tag[] = "fusemath nvrtc cache v2"; /* v2: LTO for compute_XX with -rdc */
    fm_sha256_update(&s, tag, sizeof tag);
    fm_sha256_u64(&s, (uint64_t)(int64_t)nvrtc_major);
    fm_sha256_u64(&s, (uint64_t)(int64_t)nvrtc_minor);
    fm_sha256_u64(&s, (uint64_t)(int64_t)arch);
    fm_sha256_u64(&s, (uint64_t)(lto != 0));
    fm_sha256_u64(&s, (uint64_t)noptions);
    for (int i = 0; i < noptions; i++) {
        size_t n = strlen(options[i]);
        fm_sha256_u64(&s, n);
        fm_sha256_update(&s, options[i], n);
    }
    size_t n = strlen(source);
    fm_sha256_u64(&s, n);
    fm_sha256_update(&s, source, n);
    fm_sha256_final(&s, key);
}

static int file_path(const char *dir, const uint8_t key[32], int lto, char *buf, size_t size)
{
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    int n = snprintf(buf, size, "%s/nvrtc/%s.%s", dir, hex, lto ? "ltoir" : "cubin");
    return n > 0 && (size_t)n < size ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* Memory cache                                                             */
/* ------------------------------------------------------------------------ */
typedef struct mem_entry {
    uint8_t key[32];
    void *image;
    size_t size;
} mem_entry;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_entry *mem_entries;
static size_t mem_count, mem_cap, mem_bytes;

static void *dup_bytes(const void *p, size_t n)
{
    void *q = malloc(n ? n : 1);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

/* The entry of key, or NULL (under mem_lock). */
static const mem_entry *mem_find(const uint8_t key[32])
{
    for (size_t i = 0; i < mem_count; i++)
        if (memcmp(mem_entries[i].key, key, 32) == 0)
            return &mem_entries[i];
    return NULL;
}

/* 1 and a malloc'ed copy when found. */
static int mem_get(const uint8_t key[32], void **image, size_t *size)
{
    pthread_mutex_lock(&mem_lock);
    const mem_entry *e = mem_find(key);
    if (e) {
        *image = dup_bytes(e->image, e->size);
        *size = e->size;
    }
    const int found = e && *image;
    pthread_mutex_unlock(&mem_lock);
    return found;
}

static void mem_put(const uint8_t key[32], const void *image, size_t size)
{
    pthread_mutex_lock(&mem_lock);
    if (mem_find(key))
        goto out; /* another thread was faster */
    if (mem_count >= MEM_MAX_ENTRIES || mem_bytes + size > MEM_MAX_BYTES)
        goto out;
    if (mem_count == mem_cap) {
        size_t cap = mem_cap ? 2 * mem_cap : 32;
        mem_entry *e = realloc(mem_entries, cap * sizeof *e);
        if (!e)
            goto out;
        mem_entries = e, mem_cap = cap;
    }
    void *copy = dup_bytes(image, size);
    if (!copy)
        goto out;
    memcpy(mem_entries[mem_count].key, key, 32);
    mem_entries[mem_count].image = copy;
    mem_entries[mem_count].size = size;
    mem_count++;
    mem_bytes += size;
out:
    pthread_mutex_unlock(&mem_lock);
}

void fm_nvrtc_cache_clear_memory(void)
{
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < mem_count; i++)
        free(mem_entries[i].image);
    free(mem_entries);
    mem_entries = NULL;
    mem_count = mem_cap = mem_bytes = 0;
    pthread_mutex_unlock(&mem_lock);
}

/* ------------------------------------------------------------------------ */
/* Disk cache                                                               */
/* ------------------------------------------------------------------------ */
static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* All n bytes read into buf (writing = 0) or written from it; -1 on an error or an early end. */
static int transfer_all(int fd, void *buf, size_t n, int writing)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = writing ? write(fd, p, n) : read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r, n -= (size_t)r;
    }
    return 0;
}

/* 1 and a malloc'ed image when the file exists and verifies; anything else is a miss. */
static int disk_get(const char *path, const uint8_t key[32], void **image, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int ok = 0;
    uint8_t *data = NULL;
    struct stat st;
    uint8_t hdr[FILE_HEADER];
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < FILE_HEADER ||
        (uint64_t)st.st_size > FILE_MAX_IMAGE + FILE_HEADER || transfer_all(fd, hdr, FILE_HEADER, 0) != 0)
        goto out;
    uint64_t n = get_u64le(hdr + 40);
    if (memcmp(hdr, FILE_MAGIC, 8) != 0 || memcmp(hdr + 8, key, 32) != 0 || n == 0 ||
        n != (uint64_t)st.st_size - FILE_HEADER)
        goto out;
    if (!(data = malloc((size_t)n)) || transfer_all(fd, data, (size_t)n, 0) != 0)
        goto out;
    uint8_t sum[32];
    fm_sha256_bytes(data, (size_t)n, sum);
    if (memcmp(sum, hdr + 48, 32) != 0)
        goto out;
    *image = data, *size = (size_t)n;
    data = NULL;
    ok = 1;
out:
    free(data);
    close(fd);
    return ok;
}

static atomic_uint tmp_counter;

/* Best effort: failures only mean no disk cache. */
static void disk_put(const char *dir, const char *path, const uint8_t key[32], const void *image, size_t size)
{
    char sub[FM_PATH_MAX], tmp[FM_PATH_MAX];
    if (snprintf(sub, sizeof sub, "%s/nvrtc", dir) >= (int)sizeof sub || fm_make_dirs(sub) != 0)
        return;
    unsigned c = atomic_fetch_add(&tmp_counter, 1);
    if (snprintf(tmp, sizeof tmp, "%s.%ld.%u.%lx.tmp", path, (long)getpid(), c, (unsigned long)(uintptr_t)&c) >=
        (int)sizeof tmp)
        return;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0)
        return;
    uint8_t hdr[FILE_HEADER];
    memcpy(hdr, FILE_MAGIC, 8);
    memcpy(hdr + 8, key, 32);
    put_u64le(hdr + 40, size);
    fm_sha256_bytes(image, size, hdr + 48);
    int ok = transfer_all(fd, hdr, sizeof hdr, 1) == 0 && transfer_all(fd, (void *)image, size, 1) == 0;
    if (close(fd) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) /* rename is atomic: readers see the old file or the new one */
        unlink(tmp);
}

fm_status fm_nvrtc_cache_file(const fm_settings *settings, const char *source, const char *const *options, int noptions,
                              int arch, int lto, char *buf, size_t size)
{
    if (!source || (noptions > 0 && !options) || noptions < 0 || !buf)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "nvrtc cache: NULL argument");
    pthread_once(&nvrtc_once, nvrtc_probe);
    const char *dir = fm_nvrtc_cache_dir(settings);
    if (!dir)
        return fm_fail(FM_ERR_UNAVAILABLE, "nvrtc cache: no cache directory (FUSEMATH_CACHE_DIR, XDG_CACHE_HOME, HOME)");
    uint8_t key[32];
    make_key(source, options, noptions, arch, lto, key);
    if (file_path(dir, key, lto, buf, size) != 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "nvrtc cache: path buffer too small");
    return FM_OK;
}

/* ------------------------------------------------------------------------ */
/* Compilation                                                              */
/* ------------------------------------------------------------------------ */
static fm_status nvrtc_fail(nvrtcResult r, const char *what, const char *name, int arch)
{
    return fm_fail(r == NVRTC_ERROR_OUT_OF_MEMORY ? FM_ERR_OUT_OF_MEMORY : FM_ERR_BACKEND,
                   "nvrtc: %s (%s for sm_%d): %s", what, name, arch, nvrtcGetErrorString(r));
}

/* A failed nvrtcCompileProgram as a status carrying the compiler log. */
static fm_status compile_error(nvrtcProgram prog, nvrtcResult r, const char *name, int arch)
{
    size_t log_size = 0;
    char *log = NULL;
    if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1 &&
        (log = malloc(log_size)) && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) {
        log[log_size - 1] = '\0';
        size_t len = strlen(log);
        while (len && (log[len - 1] == '\n' || log[len - 1] == ' ' || log[len - 1] == '\r'))
            log[--len] = '\0';
    } else if (log) {
        log[0] = '\0';
    }
    fm_status s = fm_fail(r == NVRTC_ERROR_OUT_OF_MEMORY ? FM_ERR_OUT_OF_MEMORY : FM_ERR_BACKEND,
                          "nvrtc: compiling %s for sm_%d failed (%s): %s", name, arch, nvrtcGetErrorString(r),
                          log && log[0] ? log : "(no compiler log)");
    free(log);
    return s;
}

/* The compiled program's cubin (lto 0) or LTO-IR, malloc'ed. */
static fm_status program_image(nvrtcProgram prog, int lto, const char *name, int arch, void **image,
                               size_t *size)
{
    size_t n = 0;
    nvrtcResult r = lto ? nvrtcGetLTOIRSize(prog, &n) : nvrtcGetCUBINSize(prog, &n);
    if (r != NVRTC_SUCCESS)
        return nvrtc_fail(r, lto ? "nvrtcGetLTOIRSize" : "nvrtcGetCUBINSize", name, arch);
    if (n == 0)
        return fm_fail(FM_ERR_BACKEND, "nvrtc: %s for sm_%d produced an empty %s", name, arch,
                       lto ? "LTO-IR" : "cubin");
    char *img = malloc(n);
    if (!img)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "nvrtc: out of memory for a %zu-byte image", n);
    if ((r = lto ? nvrtcGetLTOIR(prog, img) : nvrtcGetCUBIN(prog, img)) != NVRTC_SUCCESS) {
        free(img);
        return nvrtc_fail(r, lto ? "nvrtcGetLTOIR" : "nvrtcGetCUBIN", name, arch);
    }
    *image = img;
    *size = n;
    return FM_OK;
}

static fm_status compile_now(const char *source, const char *name, const char *const *options, int noptions,
                             int arch, int lto, void **image, size_t *size)
{
    nvrtcProgram prog = NULL;
    nvrtcResult r = nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return nvrtc_fail(r, "nvrtcCreateProgram", name, arch);
    char arch_opt[32];
    /* LTO-IR for a link by someone else (cuFFT's JIT LTO): virtual architecture, relocatable
     * device code (else the unreferenced __device__ function is dropped), as cuFFT's samples do */
    snprintf(arch_opt, sizeof arch_opt, lto ? "-arch=compute_%d" : "-arch=sm_%d", arch);
    const char **opts = malloc(sizeof *opts * (size_t)(noptions + 3));
    fm_status s;
    if (!opts) {
        s = fm_fail(FM_ERR_OUT_OF_MEMORY, "nvrtc: out of memory");
    } else {
        int n = 0;
        for (int i = 0; i < noptions; i++)
            opts[n++] = options[i];
        opts[n++] = arch_opt;
        if (lto) {
            opts[n++] = "-dlto";
            opts[n++] = "--relocatable-device-code=true";
        }
        r = nvrtcCompileProgram(prog, n, opts);
        free(opts);
        s = r != NVRTC_SUCCESS ? compile_error(prog, r, name, arch)
                               : program_image(prog, lto, name, arch, image, size);
    }
    nvrtcDestroyProgram(&prog);
    return s;
}

fm_status fm_nvrtc_compile(const fm_settings *settings, const char *source, const char *name_for_messages,
                           const char *const *options, int noptions, int arch, int lto, void **image, size_t *size,
                           int *from_cache)
{
    if (from_cache)
        *from_cache = 0;
    if (!source || !image || !size || noptions < 0 || (noptions > 0 && !options))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "nvrtc: source, image and size must not be NULL");
    for (int i = 0; i < noptions; i++)
        if (!options[i])
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "nvrtc: option %d is NULL", i);
    *image = NULL;
    *size = 0;
    const char *name = name_for_messages && name_for_messages[0] ? name_for_messages : "fusemath_kernel.cu";
    fm_status s = fm_nvrtc_version(NULL, NULL);
    if (s != FM_OK)
        return s;
    if (arch <= 0 || !fm_nvrtc_supports_arch(arch)) {
        char list[256] = "";
        size_t len = 0;
        for (int i = 0; i < nvrtc_narchs && len + 8 < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", i ? " " : "", nvrtc_archs[i]);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "nvrtc %d.%d cannot compile %s for sm_%d (supported: %s)", nvrtc_major,
                       nvrtc_minor, name, arch, list);
    }

    uint8_t key[32];
    make_key(source, options, noptions, arch, lto, key);
    if (mem_get(key, image, size)) {
        if (from_cache)
            *from_cache = 1;
        return FM_OK;
    }
    char path[FM_PATH_MAX];
    const char *dir = fm_nvrtc_cache_dir(settings);
    const int have_disk = dir && file_path(dir, key, lto, path, sizeof path) == 0;
    if (have_disk && disk_get(path, key, image, size)) {
        mem_put(key, *image, *size);
        if (from_cache)
            *from_cache = 1;
        return FM_OK;
    }
    if ((s = compile_now(source, name, options, noptions, arch, lto, image, size)) != FM_OK)
        return s;
    mem_put(key, *image, *size);
    if (have_disk)
        disk_put(dir, path, key, *image, *size);
    return FM_OK;
}

fm_status fm_nvrtc_compile_generated(const fm_settings *settings, const char *source, const char *name,
                                     int arch, int lto, int user_code, void **image, size_t *size,
                                     int *from_cache)
{
    static const char *const options[] = {"-std=c++17"};
    fm_status s = fm_nvrtc_compile(settings, source, name, options, 1, arch, lto, image, size, from_cache);
    if (s != FM_ERR_BACKEND || !user_code)
        return s;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fm_last_error());
    return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s", msg);
}

/* ---- modules ---- */
fm_status fm_cuda_runtime_fail(cudaError_t e, const char *who, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky error */
    fm_status s = FM_ERR_BACKEND;
    if (e == cudaErrorMemoryAllocation)
        s = FM_ERR_OUT_OF_MEMORY;
    else if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice)
        s = FM_ERR_UNAVAILABLE;
    return fm_fail(s, "%s: %s: %s (%s)", who, what, cudaGetErrorName(e), cudaGetErrorString(e));
}

fm_status fm_nvrtc_module_load(fm_nvrtc_module *m, const char *who, const char *const *names, cudaKernel_t *kernels,
                               int n)
{
    cudaError_t e = cudaLibraryLoadData(&m->lib, m->image, NULL, NULL, 0, NULL, NULL, 0);
    if (e != cudaSuccess) {
        m->lib = NULL;
        return fm_cuda_runtime_fail(e, who, "cudaLibraryLoadData");
    }
    for (int i = 0; i < n; i++)
        if ((e = cudaLibraryGetKernel(&kernels[i], m->lib, names[i])) != cudaSuccess) {
            char what[96];
            snprintf(what, sizeof what, "cudaLibraryGetKernel(%s)", names[i]);
            return fm_cuda_runtime_fail(e, who, what);
        }
    return FM_OK;
}

fm_status fm_nvrtc_module_build(fm_nvrtc_module *m, const fm_settings *settings, const char *source,
                                const char *name, int device_id, int user_code, const char *who,
                                const char *const *names, cudaKernel_t *kernels, int n)
{
    int arch = 0;
    size_t size = 0;
    fm_status s = fm_nvrtc_arch_for_device(device_id, who, &arch);
    if (s == FM_OK)
        s = fm_nvrtc_compile_generated(settings, source, name, arch, 0, user_code, &m->image, &size, NULL);
    return s == FM_OK ? fm_nvrtc_module_load(m, who, names, kernels, n) : s;
}

void fm_nvrtc_module_unload(fm_nvrtc_module *m)
{
    if (m->lib)
        cudaLibraryUnload(m->lib);
    free(m->image);
    m->lib = NULL, m->image = NULL;
}
