/* settings.c : every environment variable the library reads, read once when a context is
 * created (fm_settings). Backends and fusion read the context's copy, never the environment, so
 * a plan depends on nothing that can change behind the cache; the settings that change a plan are
 * hashed into plan_key, which every problem carries in its key. */
#include "context.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* FUSEMATH_NUM_THREADS, else the online cores. Unset, empty or 0: the cores (as
 * set_num_threads(0)); anything but an integer from 0 to FM_MAX_THREADS is an error naming the
 * variable (it was ignored without a word, and the library ran on every core). */
static fm_status read_threads(int *threads)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    *threads = n > 0 ? (int)n : 1;
    const char *env = getenv("FUSEMATH_NUM_THREADS");
    if (!env || !*env)
        return FM_OK;
    char *end = NULL;
    errno = 0;
    const long v = strtol(env, &end, 10);
    if (errno || end == env || *end != '\0' || v < 0 || v > FM_MAX_THREADS)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "FUSEMATH_NUM_THREADS = '%.40s': expected an integer from 1 to %d "
                       "(0 or unset: the number of online cores)", env, FM_MAX_THREADS);
    if (v > 0)
        *threads = (int)v;
    return FM_OK;
}

static void copy_env(char *dst, size_t n, const char *name)
{
    const char *v = getenv(name);
    snprintf(dst, n, "%s", v ? v : "");
}

/* An integer variable: def when unset, empty or malformed, else its value clamped to [lo, hi]
 * (out-of-range values also give def). */
static long long env_int(const char *name, long long def, long long lo, long long hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end = NULL;
    errno = 0;
    const long long x = strtoll(v, &end, 10);
    return errno || end == v || *end || x < lo || x > hi ? def : x;
}

/* Directories: only absolute paths count (a relative one would move with the working directory). */
static void cache_dir(char *dst, size_t n)
{
    const char *v = getenv("FUSEMATH_CACHE_DIR");
    int w = -1;
    if (v && v[0] == '/')
        w = snprintf(dst, n, "%s", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && v[0] == '/')
        w = snprintf(dst, n, "%s/fusemath", v);
    else if ((v = getenv("HOME")) && v[0] == '/')
        w = snprintf(dst, n, "%s/.cache/fusemath", v);
    if (w <= 0 || (size_t)w >= n - 128) /* leave room for nvrtc/<hash>.<ext> */
        dst[0] = '\0';
    while (w > 1 && (size_t)w < n && dst[w - 1] == '/') /* "dir/" -> "dir" */
        dst[--w] = '\0';
}

uint64_t fm_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Every field is filled even when a variable is malformed (the first such one is the status
 * returned): a caller that needs one setting (the CUDA module decision) still has it. */
fm_status fm_settings_read(fm_settings *s)
{
    memset(s, 0, sizeof *s);
    fm_status st = read_threads(&s->num_threads);
    copy_env(s->backend, sizeof s->backend, "FUSEMATH_BACKEND");
    copy_env(s->blas, sizeof s->blas, "FUSEMATH_BLAS");
    const char *log = getenv("FUSEMATH_LOG");
    s->log_plan = log && strstr(log, "plan") != NULL;
    copy_env(s->cpu_kernel, sizeof s->cpu_kernel, "FUSEMATH_CPU_KERNEL");
    s->cpu_kernel_kc = (int)env_int("FUSEMATH_CPU_KERNEL_KC", -1, 0, INT32_MAX);
    copy_env(s->fft_cpu_path, sizeof s->fft_cpu_path, "FUSEMATH_FFT_CPU_PATH");
    copy_env(s->cufft_prolog, sizeof s->cufft_prolog, "FUSEMATH_CUFFT_PROLOG");
    s->fft_kernel_regcap = (int)env_int("FUSEMATH_FFT_KERNEL_REGCAP", -1, 0, 255);
    s->cuda_workspace_mb = (long)env_int("FUSEMATH_CUDA_WORKSPACE_MB", -1, 0, 1LL << 20);
    cache_dir(s->cache_dir, sizeof s->cache_dir);
    copy_env(s->cuda_module, sizeof s->cuda_module, "FUSEMATH_CUDA_MODULE");
    const char *mb = getenv("FUSEMATH_CACHE_MAX_MB");
    s->cache_max_bytes = env_int("FUSEMATH_CACHE_MAX_MB", -1, 0, 1LL << 40);
    if (s->cache_max_bytes < 0 && mb && *mb && st == FM_OK) /* a cap silently not the one asked for misleads */
        st = fm_fail(FM_ERR_INVALID_ARGUMENT, "FUSEMATH_CACHE_MAX_MB = '%.40s': expected an integer from 0 to "
                     "%lld (MiB of plans the cache keeps; unset: 256)", mb, 1LL << 40);
    s->cache_max_bytes = (s->cache_max_bytes < 0 ? 256 : s->cache_max_bytes) << 20;
    const char *ex = getenv("FUSEMATH_EXECUTION");
    s->execution_best = ex && strcmp(ex, "best") == 0;
    if (ex && *ex && !s->execution_best && strcmp(ex, "auto") != 0 && st == FM_OK)
        st = fm_fail(FM_ERR_INVALID_ARGUMENT, "FUSEMATH_EXECUTION = '%.40s': expected 'best' or 'auto' (or unset: "
                     "auto, where the operands live)", ex);
    const char *pl = getenv("FUSEMATH_PIPELINE");
    s->pipeline = !pl || !*pl || strcmp(pl, "auto") == 0 ? FM_PIPELINE_AUTO
                  : strcmp(pl, "on") == 0                ? FM_PIPELINE_ON
                  : strcmp(pl, "off") == 0               ? FM_PIPELINE_OFF
                                                         : -1;
    if (s->pipeline < 0) {
        s->pipeline = FM_PIPELINE_AUTO;
        if (st == FM_OK)
            st = fm_fail(FM_ERR_INVALID_ARGUMENT, "FUSEMATH_PIPELINE = '%.40s': expected 'auto', 'on' or 'off' "
                         "(or unset: auto, chunked host<->GPU copies where they pay)", pl);
    }
    const char *pt = getenv("FUSEMATH_PIPELINE_THREADS");
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const long half = cores / 2 < 1 ? 1 : cores / 2 > 8 ? 8 : cores / 2; /* memcpy bandwidth stops growing by ~8 */
    s->pipeline_threads = (int)env_int("FUSEMATH_PIPELINE_THREADS", -1, 1, FM_MAX_PIPELINE_THREADS);
    if (s->pipeline_threads < 0) {
        s->pipeline_threads = (int)half;
        if (pt && *pt && st == FM_OK)
            st = fm_fail(FM_ERR_INVALID_ARGUMENT, "FUSEMATH_PIPELINE_THREADS = '%.40s': expected an integer from 1 "
                         "to %d (threads copying between pageable and pinned memory; unset: min(8, cores / 2) = %ld)",
                         pt, FM_MAX_PIPELINE_THREADS, half);
    }
    const char *sp = getenv("FUSEMATH_SPLIT");
    s->split = !sp || !*sp || strcmp(sp, "auto") == 0 ? 1 : strcmp(sp, "off") == 0 ? 0 : -1;
    if (s->split < 0) {
        s->split = 1;
        if (st == FM_OK)
            st = fm_fail(FM_ERR_INVALID_ARGUMENT, "FUSEMATH_SPLIT = '%.40s': expected 'auto' or 'off' (or unset: "
                         "auto, execution='best' may split a batch of host data over the cpu and the GPU)", sp);
    }
    const char *eb = getenv("FUSEMATH_SOLVE_EIG_BATCHED");
    s->solve_eig_batched = !eb || !*eb || strcmp(eb, "auto") == 0 ? FM_EIG_BATCHED_AUTO
                           : strcmp(eb, "syevj") == 0             ? FM_EIG_BATCHED_SYEVJ
                           : strcmp(eb, "xsyev") == 0             ? FM_EIG_BATCHED_XSYEV
                           : strcmp(eb, "loop") == 0              ? FM_EIG_BATCHED_LOOP
                                                                  : -1;
    if (s->solve_eig_batched < 0) {
        s->solve_eig_batched = FM_EIG_BATCHED_AUTO;
        if (st == FM_OK)
            st = fm_fail(FM_ERR_INVALID_ARGUMENT, "FUSEMATH_SOLVE_EIG_BATCHED = '%.40s': expected 'auto', 'syevj', "
                         "'xsyev' or 'loop' (or unset: auto, the GPU backend's table by size)", eb);
    }
    const char *irs = getenv("FUSEMATH_SOLVE_IRS");
    s->solve_irs = !irs || !*irs || strcmp(irs, "gmres") == 0 ? FM_IRS_GMRES
                   : strcmp(irs, "classical") == 0            ? FM_IRS_CLASSICAL
                   : strcmp(irs, "classical-gmres") == 0      ? FM_IRS_CLASSICAL_GMRES
                   : strcmp(irs, "gmres-gmres") == 0          ? FM_IRS_GMRES_GMRES
                                                              : -1;
    if (s->solve_irs < 0) {
        s->solve_irs = FM_IRS_GMRES;
        if (st == FM_OK)
            st = fm_fail(FM_ERR_INVALID_ARGUMENT, "FUSEMATH_SOLVE_IRS = '%.40s': expected 'gmres', 'classical', "
                         "'classical-gmres' or 'gmres-gmres' (or unset: gmres, the GPU's refinement solver)", irs);
    }
    /* the settings that change what a plan does (not the directories, thread default or log) */
    uint64_t h = FM_FNV_START;
    h = fm_fnv1a(h, s->backend, sizeof s->backend);
    h = fm_fnv1a(h, s->cpu_kernel, sizeof s->cpu_kernel);
    h = fm_fnv1a(h, &s->cpu_kernel_kc, sizeof s->cpu_kernel_kc);
    h = fm_fnv1a(h, s->fft_cpu_path, sizeof s->fft_cpu_path);
    h = fm_fnv1a(h, s->cufft_prolog, sizeof s->cufft_prolog);
    h = fm_fnv1a(h, &s->fft_kernel_regcap, sizeof s->fft_kernel_regcap);
    h = fm_fnv1a(h, &s->cuda_workspace_mb, sizeof s->cuda_workspace_mb);
    h = fm_fnv1a(h, &s->solve_eig_batched, sizeof s->solve_eig_batched);
    h = fm_fnv1a(h, &s->solve_irs, sizeof s->solve_irs);
    h = fm_fnv1a(h, &s->pipeline, sizeof s->pipeline);
    s->plan_key = h;
    return st;
}

int fm_make_dirs(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return -1;
        buf[i] = saved;
    }
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

const fm_settings *fm_context_settings(const fm_context *ctx) { return &ctx->settings; }
