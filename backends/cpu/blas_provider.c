/* blas_provider.c : which OpenBLAS the CPU backends call (chosen once per process).
 *
 * libfusemath links the system OpenBLAS. An OpenBLAS older than the CPU does not know its core
 * and runs its generic kernels (Debian 12's 0.3.21 says "Prescott" on recent Xeons: 3x slower at
 * f32 1024^3 than the same machine's recognised core), and a current OpenBLAS is faster than 0.3.21
 * at skinny and f64 products even on a recognised core. So, unless FUSEMATH_BLAS says otherwise, an
 * offered OpenBLAS (fm_blas_offer: the Python front offers the scipy-openblas32 wheel's library
 * when installed) replaces the linked one when it is newer, or when the linked one runs generic
 * kernels; FUSEMATH_BLAS=<path> forces one. The replacement is loaded
 * RTLD_LOCAL: a private instance whose thread count is fusemath's alone (NumPy's own OpenBLAS is
 * never used: its thread count is the user's, and openblas_set_num_threads_local changed the
 * global count as well when measured). Symbols may carry scipy-openblas's "scipy_" prefix; ILP64
 * builds (NumPy's "64_" suffix) are not taken. */
#define _GNU_SOURCE
#include "blas_provider.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

char *openblas_get_config(void);   /* OpenBLAS's own; reference CBLAS headers lack them */
char *openblas_get_corename(void);
void openblas_set_num_threads(int num_threads);

#define LINKED_LIB                                                                                 \
    {.sgemm = cblas_sgemm, .dgemm = cblas_dgemm, .cgemm = cblas_cgemm, .zgemm = cblas_zgemm,            \
     .set_num_threads = openblas_set_num_threads, .get_config = openblas_get_config}
static const fm_blas linked_lib = LINKED_LIB;
fm_blas fm_blas_lib = LINKED_LIB;

/* LAPACKE's names for every routine (s, d, c, z), in FM_LAPACK_ROUTINES' order. */
#define FM_LAPACK_NAMES(name, s, d, c, z) {s, d, c, z},
static const char *const lapack_names[][4] = {FM_LAPACK_ROUTINES(FM_LAPACK_NAMES)};
#define LAPACK_COUNT ((int)(sizeof lapack_names / sizeof lapack_names[0]))

#ifdef FM_HAVE_LAPACKE
/* liblapacke's (linked): declared without prototypes here (lapack_solve.c casts to the real ones);
 * lapacke.h is not included so that a build without it needs no header. */
/* the complex routines of syevd / orgqr are heevd / ungqr */
void LAPACKE_ssyevd(void); void LAPACKE_dsyevd(void); void LAPACKE_cheevd(void); void LAPACKE_zheevd(void);
void LAPACKE_sorgqr(void); void LAPACKE_dorgqr(void); void LAPACKE_cungqr(void); void LAPACKE_zungqr(void);
#define FM_LAPACK_PLAIN(X) X(getrf) X(getrs) X(potrf) X(potrs) X(trtrs) X(getri) X(geqrf) X(gesdd) X(gelsd)
#define FM_LAPACK_DECL1(name) \
    void LAPACKE_s##name(void); void LAPACKE_d##name(void); void LAPACKE_c##name(void); void LAPACKE_z##name(void);
FM_LAPACK_PLAIN(FM_LAPACK_DECL1)
void LAPACKE_set_nancheck(int);

static void linked_lapack(fm_lapack *l)
{
#define FM_LAPACK_SET(name) \
    l->name[0] = LAPACKE_s##name, l->name[1] = LAPACKE_d##name, l->name[2] = LAPACKE_c##name, l->name[3] = LAPACKE_z##name;
    FM_LAPACK_PLAIN(FM_LAPACK_SET)
    l->syevd[0] = LAPACKE_ssyevd, l->syevd[1] = LAPACKE_dsyevd, l->syevd[2] = LAPACKE_cheevd;
    l->syevd[3] = LAPACKE_zheevd;
    l->orgqr[0] = LAPACKE_sorgqr, l->orgqr[1] = LAPACKE_dorgqr, l->orgqr[2] = LAPACKE_cungqr;
    l->orgqr[3] = LAPACKE_zungqr;
    l->set_nancheck = LAPACKE_set_nancheck;
}
#else
static void linked_lapack(fm_lapack *l) { memset(l, 0, sizeof *l); }
#endif

static void *sym(void *h, const char *prefix, const char *name);

/* The LAPACKE entries of library h (prefix: "" or "scipy_"); all of them or none. */
static void load_lapack(void *h, const char *prefix, fm_lapack *l)
{
    memset(l, 0, sizeof *l);
    void (**slots)(void) = (void (**)(void))l; /* the fields are LAPACK_COUNT arrays of 4 pointers */
    char name[48];
    for (int r = 0; r < LAPACK_COUNT; r++)
        for (int t = 0; t < 4; t++) {
            snprintf(name, sizeof name, "LAPACKE_%s", lapack_names[r][t]);
            void *f = sym(h, prefix, name);
            if (!f) {
                memset(l, 0, sizeof *l);
                return;
            }
            memcpy(&slots[r * 4 + t], &f, sizeof f);
        }
    void *f = sym(h, prefix, "LAPACKE_set_nancheck");
    memcpy(&l->set_nancheck, &f, sizeof f);
}

static pthread_mutex_t select_lock = PTHREAD_MUTEX_INITIALIZER;
static int selected;          /* fm_blas_lib is final */
static char offered[1024];    /* fm_blas_offer's path */
static char select_error[1400];

/* Cores OpenBLAS falls back to when it does not know the CPU (all pre-AVX2). */
static int generic_core(const char *core)
{
    static const char *const names[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                        "Katmai", "Coppermine", "Northwood", "Banias", "Unknown"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (core && strcmp(core, names[i]) == 0)
            return 1;
    return 0;
}

static int cpu_has_avx2(void);

int fm_blas_runs_generic(void) { return generic_core(fm_blas_lib.core) && cpu_has_avx2(); }

/* prefix+name defined in h's own file: dlsym also searches h's dependencies, and a library
 * that merely links the system OpenBLAS would hand back the linked one's functions. */
static void *sym(void *h, const char *prefix, const char *name)
{
    char full[96];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    void *f = dlsym(h, full);
    Dl_info where;
    struct link_map *own = NULL;
    if (!f || !dladdr(f, &where) || dlinfo(h, RTLD_DI_LINKMAP, &own) != 0 || !own || !where.dli_fname ||
        strcmp(where.dli_fname, own->l_name) != 0)
        return NULL;
    return f;
}

/* Load an OpenBLAS at path into a candidate table; 0, or -1 with the reason in why (a library
 * without OpenBLAS's symbols closed again). *shared: the file was loaded in this process already, so dlopen hands back that
 * instance (RTLD_LOCAL limits symbol visibility only): its thread count is not fusemath's alone. */
static int load(const char *path, fm_blas *c, int *shared, char *why, size_t n)
{
    void *before = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    *shared = before != NULL;
    if (before)
        dlclose(before);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, n, "%s", dlerror());
        return -1;
    }
    static const char *const prefixes[] = {"", "scipy_"};
    for (int i = 0; i < 2; i++) {
        const char *p = prefixes[i];
        fm_blas t = {.sgemm = sym(h, p, "cblas_sgemm"), .dgemm = sym(h, p, "cblas_dgemm"),
                     .cgemm = sym(h, p, "cblas_cgemm"), .zgemm = sym(h, p, "cblas_zgemm"),
                     .set_num_threads = sym(h, p, "openblas_set_num_threads"),
                     .get_config = sym(h, p, "openblas_get_config")};
        char *(*corename)(void) = sym(h, p, "openblas_get_corename");
        if (t.sgemm && t.dgemm && t.cgemm && t.zgemm && t.set_num_threads && t.get_config && corename) {
            const char *config = t.get_config();
            if (config && strstr(config, "USE64BITINT")) { /* ILP64 with plain names: 64-bit dims expected */
                /* (not dlclose'd: OpenBLAS started its threads when it loaded; unmapping it under them
                 * crashed the process) */
                snprintf(why, n, "it is an ILP64 build (USE64BITINT in its config: 64-bit integer arguments); "
                                 "an LP64 OpenBLAS is expected");
                return -1;
            }
            load_lapack(h, p, &t.lapack);
            snprintf(t.core, sizeof t.core, "%s", corename());
            snprintf(t.path, sizeof t.path, "%s", path);
            t.handle = h;
            *c = t;
            return 0; /* (h stays open: the process keeps using it) */
        }
    }
    dlclose(h);
    snprintf(why, n, "no OpenBLAS cblas_?gemm / openblas_get_corename symbols (plain or scipy_-prefixed; "
                     "an LP64 OpenBLAS is expected)");
    return -1;
}

static void describe_lib(fm_blas *b, const char *how)
{
    const char *config = b->get_config();
    char version[32] = "";
    if (config && sscanf(config, "OpenBLAS %31s", version) != 1)
        version[0] = '\0';
    snprintf(b->what, sizeof b->what, "OpenBLAS %s, core %s, %s", version[0] ? version : "(unknown version)",
             b->core, how);
    snprintf(b->tag, sizeof b->tag, "%.20s/%.30s", version[0] ? version : "unknown", b->core);
}

/* OpenBLAS's version from its config string as one number (0.3.21 -> 321), 0 if unreadable. */
static long version_number(const fm_blas *b)
{
    const char *config = b->get_config();
    int major = 0, minor = 0, patch = 0;
    if (!config || sscanf(config, "OpenBLAS %d.%d.%d", &major, &minor, &patch) < 2)
        return 0;
    return major * 10000L + minor * 100L + patch;
}

static int cpu_has_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx2");
#else
    return 0; /* generic x86 cores are not a question elsewhere */
#endif
}

/* The choice for FUSEMATH_BLAS = setting with the linked library reporting linked_core; the caller
 * holds select_lock (fm_blas_select), or is a test (tests/c/test_blas_provider.c gives a generic
 * linked_core). */
fm_status fm_blas_select_for(const char *setting, const char *linked_core)
{
    fm_blas_lib = linked_lib;
    linked_lapack(&fm_blas_lib.lapack);
    snprintf(fm_blas_lib.core, sizeof fm_blas_lib.core, "%s", linked_core);
    const int forced_system = strcmp(setting, "system") == 0;
    const int auto_mode = !setting[0] || strcmp(setting, "auto") == 0;
    fm_blas cand = {0};
    char why[512] = "", how[700];
    int shared = 0;
    if (!auto_mode && !forced_system) { /* a path: it is used, or context creation fails */
        if (load(setting, &cand, &shared, why, sizeof why) != 0) {
            snprintf(select_error, sizeof select_error, "FUSEMATH_BLAS = '%.900s' cannot be used: %.300s; expected "
                     "the path of an OpenBLAS library, 'system' or 'auto' (or unset)", setting, why);
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s", select_error);
        }
        fm_blas_lib = cand;
        describe_lib(&fm_blas_lib, shared ? "FUSEMATH_BLAS (loaded by another user in this process too: they "
                                            "share its thread count)" : "FUSEMATH_BLAS");
        return FM_OK;
    }
    /* Measured (docs/design.md): a current OpenBLAS beats Debian 12's 0.3.21 even where 0.3.21 knows
     * the core (cblas tiles at skinny f32 shapes 1.44-1.55x NumPy with 0.3.21, 1.10-1.17x with 0.3.34),
     * so an offered newer one is taken; an older or equal one only where the linked one is generic. */
    const int generic = generic_core(fm_blas_lib.core) && cpu_has_avx2();
    if (auto_mode && offered[0]) {
        const char *refusal = NULL;
        if (load(offered, &cand, &shared, why, sizeof why) != 0)
            refusal = why;
        else if (shared)
            refusal = "is loaded by another user in this process (its thread count is theirs)";
        else if (generic_core(cand.core) && cpu_has_avx2())
            refusal = "runs generic kernels too";
        else if (!generic && version_number(&cand) <= version_number(&fm_blas_lib))
            refusal = "is not newer than the linked one";
        if (!refusal) {
            fm_blas_lib = cand;
            describe_lib(&fm_blas_lib, generic ? "offered (the linked OpenBLAS runs generic kernels on this CPU)"
                                               : "offered (newer than the linked OpenBLAS)");
            return FM_OK;
        }
        /* a refused OpenBLAS that loaded stays loaded, idle: dlclose under its running thread pool
         * crashed (its threads run its code) */
        snprintf(how, sizeof how, "linked%s; the offered %.200s: %.300s", generic ? " (generic kernels on this CPU)"
                 : "", offered, refusal);
        describe_lib(&fm_blas_lib, how);
        return FM_OK;
    }
    describe_lib(&fm_blas_lib, generic ? "linked (generic kernels on this CPU: set FUSEMATH_BLAS to a newer "
                                         "OpenBLAS, or pip install scipy-openblas32)"
                                       : "linked");
    return FM_OK;
}

fm_status fm_blas_select(const char *setting)
{
    pthread_mutex_lock(&select_lock);
    fm_status s = FM_OK;
    if (!selected) {
        s = fm_blas_select_for(setting ? setting : "", openblas_get_corename());
        if (s == FM_OK) {
            fm_blas_lib.set_num_threads(1); /* the library's own threads run single-threaded GEMMs */
            if (fm_blas_lib.lapack.set_nancheck)
                fm_blas_lib.lapack.set_nancheck(0); /* NaN input follows LAPACK; check_finite is the core's */
            selected = 1;
        }
    }
    pthread_mutex_unlock(&select_lock);
    return s;
}

fm_status fm_blas_offer(const char *path)
{
    if (!path || !path[0] || strlen(path) >= sizeof offered)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_blas_offer: path is %s; expected a library path shorter than "
                       "%zu bytes", !path ? "NULL" : !path[0] ? "empty" : "too long", sizeof offered);
    pthread_mutex_lock(&select_lock);
    const int late = selected;
    if (!late)
        snprintf(offered, sizeof offered, "%s", path);
    pthread_mutex_unlock(&select_lock);
    return late ? fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_blas_offer: the BLAS was chosen already (%s); offer it "
                          "before the first context is created", fm_blas_lib.what)
                : FM_OK;
}

const char *fm_blas_info(void)
{
    pthread_mutex_lock(&select_lock);
    const char *what = selected ? fm_blas_lib.what : "";
    pthread_mutex_unlock(&select_lock);
    return what;
}
