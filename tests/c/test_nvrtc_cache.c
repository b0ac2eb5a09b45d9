/* test_nvrtc_cache.c : NVRTC compilation and its memory/disk cache (fusion/cuda/nvrtc_cache.c),
 * and the generated CUDA sources of the unfused epilogue (fusion/cuda/cuda_epilogue_source.c):
 * every dtype x chain x add_c (and four zero_d chains per dtype) and every column-sum dtype must compile for sm_90.
 * Needs no GPU: NVRTC compiles for any architecture it knows. Uses a fresh temporary
 * FUSEMATH_CACHE_DIR and removes it at the end. */
#define _XOPEN_SOURCE 700
#include "check.h"

#include <fusemath/fusemath.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FM_HAVE_CUDA
#include "cuda/cuda_epilogue_kernel.h"
#include "cuda/nvrtc_cache.h"
#include "epilogue.h"
#include "ew_chains.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { ARCH = 90 };
static char tmpdir[256];

static const char *good_src = "extern \"C\" __global__ void fm_test_scale(float *x, float a, int n) {\n"
                              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                              "  if (i < n) x[i] *= a;\n"
                              "}\n";

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int is_cubin(const void *img, size_t n)
{
    const unsigned char *p = img;
    /* ELF, 64-bit, little endian, e_machine EM_CUDA (190) */
    return n > 64 && p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F' && p[4] == 2 && p[5] == 1 &&
           (p[18] | p[19] << 8) == 190;
}

static int is_ltoir(const void *img, size_t n)
{
    const unsigned char *p = img;
    /* NVVM LTO-IR: magic 0x7F4E43ED, little endian */
    return n > 16 && p[0] == 0xed && p[1] == 0x43 && p[2] == 0x4e && p[3] == 0x7f;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), s = strlen(suffix);
        if (l >= s && strcmp(e->d_name + l - s, suffix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* The library takes the cache directory from the settings a context reads at creation, not
 * from the environment: g_set is read again after every change of the environment here. */
static fm_settings g_set;

static const char *cache_dir_now(void)
{
    CHECK_OK(fm_settings_read(&g_set));
    return fm_nvrtc_cache_dir(&g_set);
}

static void set_cache_dir(const char *d)
{
    setenv("FUSEMATH_CACHE_DIR", d, 1);
    CHECK_OK(fm_settings_read(&g_set));
}

/* ------------------------------------------------------------------------ */
static void test_cache_dir(void)
{
    char *save_x = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    char *save_h = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    const char *d;

    setenv("FUSEMATH_CACHE_DIR", "/some/where/", 1);
    d = cache_dir_now();
    CHECK_MSG(d && strcmp(d, "/some/where") == 0, "got %s", d ? d : "(null)");

    unsetenv("FUSEMATH_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    setenv("HOME", "/home/u", 1);
    d = cache_dir_now();
    CHECK_MSG(d && strcmp(d, "/xdg/fusemath") == 0, "got %s", d ? d : "(null)");

    setenv("FUSEMATH_CACHE_DIR", "", 1); /* empty: skipped */
    setenv("XDG_CACHE_HOME", "relative/dir", 1); /* relative: skipped, as the XDG spec says */
    d = cache_dir_now();
    CHECK_MSG(d && strcmp(d, "/home/u/.cache/fusemath") == 0, "got %s", d ? d : "(null)");

    unsetenv("FUSEMATH_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    CHECK(cache_dir_now() == NULL);

    if (save_x)
        setenv("XDG_CACHE_HOME", save_x, 1);
    if (save_h)
        setenv("HOME", save_h, 1);
    free(save_x), free(save_h);
    set_cache_dir(tmpdir);
    d = cache_dir_now();
    CHECK(d && strcmp(d, tmpdir) == 0);
}

static void test_version_and_archs(void)
{
    int maj = 0, min = 0;
    CHECK_OK(fm_nvrtc_version(&maj, &min));
    CHECK(maj >= 12);
    printf("    nvrtc %d.%d, cache dir %s\n", maj, min, tmpdir);
    CHECK(fm_nvrtc_supports_arch(90));
    CHECK(!fm_nvrtc_supports_arch(12));
    void *img = NULL;
    size_t n = 0;
    CHECK_STATUS(fm_nvrtc_compile(&g_set, good_src, "t.cu", NULL, 0, 12, 0, &img, &n, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("sm_12");
    CHECK(img == NULL);
    CHECK_STATUS(fm_nvrtc_compile(&g_set, NULL, "t.cu", NULL, 0, ARCH, 0, &img, &n, NULL), FM_ERR_INVALID_ARGUMENT);
}

static void test_cubin_and_cache(void)
{
    void *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    int fc = -1;
    CHECK_OK(fm_nvrtc_compile(&g_set, good_src, "scale.cu", NULL, 0, ARCH, 0, &a, &na, &fc));
    CHECK(fc == 0);
    CHECK_MSG(is_cubin(a, na), "not a CUDA ELF (%zu bytes)", na);

    char path[1024];
    CHECK_OK(fm_nvrtc_cache_file(&g_set, good_src, NULL, 0, ARCH, 0, path, sizeof path));
    CHECK_MSG(strncmp(path, tmpdir, strlen(tmpdir)) == 0, "cache file %s not under FUSEMATH_CACHE_DIR %s", path, tmpdir);
    struct stat st;
    CHECK_MSG(stat(path, &st) == 0 && (size_t)st.st_size > na, "cache file %s missing", path);

    /* memory hit */
    CHECK_OK(fm_nvrtc_compile(&g_set, good_src, "scale.cu", NULL, 0, ARCH, 0, &b, &nb, &fc));
    CHECK(fc == 1);
    CHECK(nb == na && memcmp(a, b, na) == 0);
    /* disk hit */
    fm_nvrtc_cache_clear_memory();
    CHECK_OK(fm_nvrtc_compile(&g_set, good_src, "scale.cu", NULL, 0, ARCH, 0, &c, &nc, &fc));
    CHECK(fc == 1);
    CHECK(nc == na && memcmp(a, c, na) == 0);
    free(b), free(c);
    b = c = NULL;

    /* from_cache may be NULL; name may be NULL */
    CHECK_OK(fm_nvrtc_compile(&g_set, good_src, NULL, NULL, 0, ARCH, 0, &b, &nb, NULL));
    free(b);
    b = NULL;

    /* misses: other source, other option, other arch */
    char other[512];
    snprintf(other, sizeof other, "%s// another\n", good_src);
    CHECK_OK(fm_nvrtc_compile(&g_set, other, "scale2.cu", NULL, 0, ARCH, 0, &b, &nb, &fc));
    CHECK(fc == 0 && is_cubin(b, nb));
    free(b);
    const char *opt[2] = {"-DFM_SOMETHING=1", "-std=c++17"};
    CHECK_OK(fm_nvrtc_compile(&g_set, good_src, "scale.cu", opt, 1, ARCH, 0, &b, &nb, &fc));
    CHECK(fc == 0 && is_cubin(b, nb));
    free(b);
    CHECK_OK(fm_nvrtc_compile(&g_set, good_src, "scale.cu", opt, 2, ARCH, 0, &b, &nb, &fc));
    CHECK(fc == 0);
    free(b);
    CHECK_OK(fm_nvrtc_compile(&g_set, good_src, "scale.cu", opt, 2, ARCH, 0, &b, &nb, &fc));
    CHECK(fc == 1);
    free(b);
    if (fm_nvrtc_supports_arch(80)) {
        CHECK_OK(fm_nvrtc_compile(&g_set, good_src, "scale.cu", NULL, 0, 80, 0, &b, &nb, &fc));
        CHECK(fc == 0 && is_cubin(b, nb));
        CHECK(nb != na || memcmp(a, b, na) != 0);
        free(b);
    }
    b = NULL;

    /* LTO-IR: its own entry, its own format */
    CHECK_OK(fm_nvrtc_compile(&g_set, good_src, "scale.cu", NULL, 0, ARCH, 1, &b, &nb, &fc));
    CHECK(fc == 0);
    CHECK_MSG(is_ltoir(b, nb), "not LTO-IR (%zu bytes, %02x %02x %02x %02x)", nb, nb > 3 ? ((unsigned char *)b)[0] : 0,
              nb > 3 ? ((unsigned char *)b)[1] : 0, nb > 3 ? ((unsigned char *)b)[2] : 0,
              nb > 3 ? ((unsigned char *)b)[3] : 0);
    fm_nvrtc_cache_clear_memory();
    CHECK_OK(fm_nvrtc_compile(&g_set, good_src, "scale.cu", NULL, 0, ARCH, 1, &c, &nc, &fc));
    CHECK(fc == 1 && nc == nb && memcmp(b, c, nb) == 0);
    char lpath[1024];
    CHECK_OK(fm_nvrtc_cache_file(&g_set, good_src, NULL, 0, ARCH, 1, lpath, sizeof lpath));
    CHECK(strcmp(lpath, path) != 0 && stat(lpath, &st) == 0);
    free(b), free(c);
    free(a);
}

/* Corrupt, truncated and empty cache files are ignored, recompiled and rewritten. */
static void test_corrupt_files(void)
{
    static const char src[] = "extern \"C\" __global__ void fm_test_corrupt(int *x) { x[threadIdx.x] += 3; }\n";
    void *ref = NULL, *img = NULL;
    size_t nref = 0, n = 0;
    int fc = -1;
    CHECK_OK(fm_nvrtc_compile(&g_set, src, "corrupt.cu", NULL, 0, ARCH, 0, &ref, &nref, &fc));
    CHECK(fc == 0);
    char path[1024];
    CHECK_OK(fm_nvrtc_cache_file(&g_set, src, NULL, 0, ARCH, 0, path, sizeof path));
    struct stat st;
    CHECK(stat(path, &st) == 0);
    const off_t full = st.st_size;

    for (int mode = 0; mode < 4; mode++) {
        int fd = open(path, O_RDWR);
        CHECK(fd >= 0);
        if (fd < 0)
            return;
        const char *what = "";
        if (mode == 0) { /* flip a byte of the image */
            unsigned char x;
            CHECK(pread(fd, &x, 1, full - 7) == 1);
            x ^= 0x5a;
            CHECK(pwrite(fd, &x, 1, full - 7) == 1);
            what = "flipped byte";
        } else if (mode == 1) { /* short file */
            CHECK(ftruncate(fd, full / 2) == 0);
            what = "truncated";
        } else if (mode == 2) { /* empty file */
            CHECK(ftruncate(fd, 0) == 0);
            what = "empty";
        } else { /* garbage header */
            CHECK(pwrite(fd, "garbage!", 8, 0) == 8);
            what = "bad magic";
        }
        close(fd);
        fm_nvrtc_cache_clear_memory();
        CHECK_OK(fm_nvrtc_compile(&g_set, src, "corrupt.cu", NULL, 0, ARCH, 0, &img, &n, &fc));
        CHECK_MSG(fc == 0, "%s cache file was used", what);
        CHECK_MSG(n == nref && memcmp(img, ref, n) == 0, "%s: recompiled image differs", what);
        free(img);
        img = NULL;
        CHECK_MSG(stat(path, &st) == 0 && st.st_size == full, "%s: cache file not rewritten", what);
        fm_nvrtc_cache_clear_memory();
        CHECK_OK(fm_nvrtc_compile(&g_set, src, "corrupt.cu", NULL, 0, ARCH, 0, &img, &n, &fc));
        CHECK_MSG(fc == 1 && n == nref && memcmp(img, ref, n) == 0, "%s: rewritten file not used", what);
        free(img);
        img = NULL;
    }
    free(ref);
}

static void test_compile_error(void)
{
    static const char bad[] = "extern \"C\" __global__ void fm_bad(float *x)\n{\n  x[0] = 1.0f\n}\n";
    void *img = (void *)1;
    size_t n = 7;
    int fc = -1;
    CHECK_STATUS(fm_nvrtc_compile(&g_set, bad, "fm_bad_source.cu", NULL, 0, ARCH, 0, &img, &n, &fc), FM_ERR_BACKEND);
    CHECK_ERROR_MENTIONS("fm_bad_source.cu(4): error"); /* the compiler's log line */
    CHECK_ERROR_MENTIONS("expected a \";\"");
    CHECK_ERROR_MENTIONS("sm_90");
    CHECK(img == NULL && n == 0 && fc == 0);
    printf("    compile error message: %s\n", fm_last_error());
    /* an unknown option is reported too */
    const char *opt[1] = {"--no-such-option"};
    CHECK_STATUS(fm_nvrtc_compile(&g_set, good_src, "opt.cu", opt, 1, ARCH, 0, &img, &n, &fc), FM_ERR_BACKEND);
    CHECK_ERROR_MENTIONS("nvrtc");
}

/* A cache directory that cannot be created: compiles still work, from memory the second time. */
static void test_unwritable_dir(void)
{
    char file[512], dir[600];
    snprintf(file, sizeof file, "%s/plainfile", tmpdir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    snprintf(dir, sizeof dir, "%s/sub", file); /* below a regular file: mkdir fails */
    set_cache_dir(dir);
    static const char src[] = "extern \"C\" __global__ void fm_test_nodisk(int *x) { x[0] = 11; }\n";
    void *img = NULL;
    size_t n = 0;
    int fc = -1;
    CHECK_OK(fm_nvrtc_compile(&g_set, src, "nodisk.cu", NULL, 0, ARCH, 0, &img, &n, &fc));
    CHECK(fc == 0 && is_cubin(img, n));
    free(img);
    CHECK_OK(fm_nvrtc_compile(&g_set, src, "nodisk.cu", NULL, 0, ARCH, 0, &img, &n, &fc));
    CHECK(fc == 1);
    free(img);
    set_cache_dir(tmpdir);
    remove(file);
}

/* Many threads compile the same new source at once: identical images, no stray temp files. */
#define NTHREADS 6
static const char race_src[] = "extern \"C\" __global__ void fm_test_race(double *x) { x[threadIdx.x] = 0.5 * x[0]; }\n";
typedef struct race_arg {
    void *img;
    size_t n;
    fm_status s;
} race_arg;

static void *race_main(void *p)
{
    race_arg *r = p;
    r->s = fm_nvrtc_compile(&g_set, race_src, "race.cu", NULL, 0, ARCH, 0, &r->img, &r->n, NULL);
    return NULL;
}

static void test_threads(void)
{
    pthread_t th[NTHREADS];
    race_arg r[NTHREADS];
    memset(r, 0, sizeof r);
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, race_main, &r[i]);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NTHREADS; i++) {
        CHECK(r[i].s == FM_OK);
        CHECK(r[i].n == r[0].n && r[i].img && memcmp(r[i].img, r[0].img, r[0].n) == 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        free(r[i].img);
    char sub[512];
    snprintf(sub, sizeof sub, "%s/nvrtc", tmpdir);
    CHECK_MSG(count_files(sub, ".tmp") == 0, "temporary files left in %s", sub);
}

/* ------------------------------------------------------------------------ */
/* The generated epilogue sources                                           */
/* ------------------------------------------------------------------------ */
#define MAX_JOBS 640
typedef struct job {
    int colsum; /* 0: ew spec, 1: colsum dtype */
    fm_cuda_ew_spec spec;
    fm_dtype dtype;
    fm_status s;
    char err[512];
    int cubin;
} job;
static job jobs[MAX_JOBS];
static int njobs;
static atomic_int next_job;

static void *job_main(void *unused)
{
    (void)unused;
    for (;;) {
        int i = atomic_fetch_add(&next_job, 1);
        if (i >= njobs)
            return NULL;
        job *j = &jobs[i];
        void *img = NULL;
        size_t n = 0;
        j->s = j->colsum ? fm_cuda_colsum_compile(&g_set, j->dtype, ARCH, &img, &n, NULL)
                         : fm_cuda_ew_compile(&g_set, &j->spec, ARCH, &img, &n, NULL);
        if (j->s != FM_OK)
            snprintf(j->err, sizeof j->err, "%s", fm_last_error());
        j->cubin = j->s == FM_OK && is_cubin(img, n);
        free(img);
    }
}

static void test_generated_sources(void)
{
    njobs = 0;
    for (int d = 0; d < 6; d++) {
        unsigned chains[64];
        int nc = ew_chains(all_dtypes[d], 1, chains);
        for (int c = 0; c < nc; c++)
            for (int add_c = 0; add_c < 2 && njobs < MAX_JOBS; add_c++) {
                job *j = &jobs[njobs++];
                memset(j, 0, sizeof *j);
                j->spec = (fm_cuda_ew_spec){.dtype = all_dtypes[d], .epilogue = chains[c], .add_c = add_c};
            }
        /* no product (alpha = 0 or k = 0): x starts at 0; the first chain, a middle one, the last two
         * (gelu+dropout and ddropout for real dtypes), with and without C */
        const int pick[4] = {0, nc / 2, nc - 2, nc - 1};
        for (int q = 0; q < 4 && njobs < MAX_JOBS; q++) {
            job *j = &jobs[njobs++];
            memset(j, 0, sizeof *j);
            j->spec = (fm_cuda_ew_spec){.dtype = all_dtypes[d], .epilogue = chains[pick[q]], .add_c = q & 1, .zero_d = 1};
        }
    }
    for (int d = 0; d < 6 && njobs < MAX_JOBS; d++) {
        job *j = &jobs[njobs++];
        memset(j, 0, sizeof *j);
        j->colsum = 1;
        j->dtype = all_dtypes[d];
    }
    CHECK(njobs == 4 * 60 * 2 + 2 * 2 * 2 + 6 * 4 + 6); /* chains x add_c, zero_d, colsum */

    /* a source has the kernels and the chain's switches */
    char *src = NULL;
    fm_cuda_ew_spec sp = {.dtype = FM_BF16, .epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU | FM_EPILOGUE_AUX, .add_c = 1};
    CHECK_OK(fm_cuda_ew_source(&sp, &src));
    CHECK(src && strstr(src, "void __launch_bounds__(256) fm_ew(") && strstr(src, "#define FM_MASK_OUT 1") &&
          strstr(src, "#define FM_ADD_C 1") && !strstr(src, "#include"));
    free(src);
    src = NULL;
    /* columns per thread: 16 bytes' worth (contiguous warp accesses), 8 where a thread owns a mask byte */
    static const struct { fm_dtype t; unsigned e; const char *want; } widths[] = {
        {FM_F64, FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, "#define FM_CW 2\n"},
        {FM_F32, FM_EPILOGUE_GELU, "#define FM_CW 4\n"},
        {FM_C128, FM_EPILOGUE_BIAS, "#define FM_CW 1\n"},
        {FM_F16, FM_EPILOGUE_RELU, "#define FM_CW 8\n"},
        {FM_F64, FM_EPILOGUE_RELU | FM_EPILOGUE_AUX, "#define FM_CW 8\n"},
        {FM_F64, FM_EPILOGUE_DRELU, "#define FM_CW 8\n"},
        {FM_F64, FM_EPILOGUE_GELU | FM_EPILOGUE_AUX, "#define FM_CW 2\n"},
    };
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        fm_cuda_ew_spec w = {.dtype = widths[i].t, .epilogue = widths[i].e};
        CHECK_OK(fm_cuda_ew_source(&w, &src));
        CHECK(src && strstr(src, widths[i].want));
        free(src);
        src = NULL;
    }
    CHECK_OK(fm_cuda_colsum_source(FM_C128, &src));
    CHECK(src && strstr(src, "fm_colsum_final") && strstr(src, "double2"));
    free(src);

    /* specs that make no sense are refused before compiling */
    src = NULL;
    fm_cuda_ew_spec bad1 = {.dtype = FM_F32, .epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_GELU};
    CHECK_STATUS(fm_cuda_ew_source(&bad1, &src), FM_ERR_INVALID_ARGUMENT);
    fm_cuda_ew_spec bad2 = {.dtype = FM_C64, .epilogue = FM_EPILOGUE_RELU};
    CHECK_STATUS(fm_cuda_ew_source(&bad2, &src), FM_ERR_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("c64");
    fm_cuda_ew_spec bad3 = {.dtype = FM_I32, .epilogue = FM_EPILOGUE_BIAS};
    CHECK_STATUS(fm_cuda_ew_source(&bad3, &src), FM_ERR_DTYPE);
    fm_cuda_ew_spec bad4 = {.dtype = FM_F32, .epilogue = FM_EPILOGUE_DRELU | FM_EPILOGUE_BIAS};
    CHECK_STATUS(fm_cuda_ew_source(&bad4, &src), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_cuda_colsum_source(FM_U8, &src), FM_ERR_DTYPE);
    CHECK(src == NULL);
    /* bgrad bits belong to the column-sum kernel and are ignored here */
    fm_cuda_ew_spec bg = {.dtype = FM_F32, .epilogue = FM_EPILOGUE_DRELU | FM_EPILOGUE_BGRAD};
    CHECK_OK(fm_cuda_ew_source(&bg, &src));
    free(src);

    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nth = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu;
    double t0 = now();
    atomic_store(&next_job, 0);
    pthread_t th[16];
    for (int i = 0; i < nth; i++)
        pthread_create(&th[i], NULL, job_main, NULL);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    double t1 = now();
    int bad = 0;
    for (int i = 0; i < njobs; i++) {
        job *j = &jobs[i];
        char chain[128] = "";
        if (!j->colsum)
            fm_epilogue_format(j->spec.epilogue, chain, sizeof chain);
        CHECK_MSG(j->s == FM_OK && j->cubin, "%s %s %s%s: %s: %s", j->colsum ? "colsum" : "ew",
                  fm_dtype_name(j->colsum ? j->dtype : j->spec.dtype), chain, !j->colsum && j->spec.add_c ? " add_c" : "",
                  fm_status_name(j->s), j->err);
        bad += j->s != FM_OK;
    }
    printf("    compiled %d generated modules for sm_%d in %.1f s on %d threads (%d failed)\n", njobs, ARCH, t1 - t0,
           nth, bad);

    /* second round comes from the cache */
    void *img = NULL;
    size_t n = 0;
    int fc = 0;
    CHECK_OK(fm_cuda_ew_compile(&g_set, &jobs[3].spec, ARCH, &img, &n, &fc));
    CHECK(fc == 1);
    free(img);
    CHECK_OK(fm_cuda_colsum_compile(&g_set, FM_BF16, ARCH, &img, &n, &fc));
    CHECK(fc == 1);
    free(img);
}

/* Without a device, creating a kernel object fails cleanly (no GPU on CI). */
static void test_create_without_gpu(void)
{
    if (fm_cuda_device_count() > 0) {
        SKIP("a GPU is present: covered by test_cuda_epilogue_kernel_gpu");
        CHECK(1);
        return;
    }
    fm_cuda_ew *k = (fm_cuda_ew *)1;
    fm_cuda_ew_spec sp = {.dtype = FM_F32, .epilogue = FM_EPILOGUE_BIAS};
    fm_status s = fm_cuda_ew_create(&g_set, &sp, 0, &k);
    CHECK(s != FM_OK && k == NULL);
    CHECK_ERROR_MENTIONS("cuda epilogue kernel");
    fm_cuda_colsum *c = (fm_cuda_colsum *)1;
    s = fm_cuda_colsum_create(&g_set, FM_F32, 0, &c);
    CHECK(s != FM_OK && c == NULL);
    CHECK_ERROR_MENTIONS("cuda column-sum kernel");
    fm_cuda_ew_destroy(NULL);
    fm_cuda_colsum_destroy(NULL);
    CHECK(fm_cuda_colsum_workspace(FM_F32, 100000, 3, 1) > 0);
    CHECK(fm_cuda_colsum_workspace(FM_F32, 10, 3, 1) == 0);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fm_nvrtc_test_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    set_cache_dir(tmpdir);
    fm_nvrtc_cache_clear_memory();
    RUN_TESTS(test_cache_dir, test_version_and_archs, test_cubin_and_cache, test_corrupt_files,
              test_compile_error, test_unwritable_dir, test_threads, test_generated_sources,
              test_create_without_gpu);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    TEST_MAIN_RETURN();
}

#else /* no CUDA in this build */
static void test_no_cuda(void)
{
    SKIP("built without CUDA (FUSEMATH_WITH_CUDA=OFF or no toolkit): no NVRTC");
    CHECK(fm_cuda_device_count() == 0);
}

int main(void)
{
    RUN_TEST(test_no_cuda);
    TEST_MAIN_RETURN();
}
#endif
