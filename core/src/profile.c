/* profile.c : the machine profile FM_EXECUTION_BEST predicts from: the built-in model, prediction
 * from measured curves (log-log interpolation), the text form with its checksum and fingerprint,
 * and the context's copy of it (swapped whole, never edited, so a planner reading it needs no lock). */
#define _XOPEN_SOURCE 700
#include "profile.h"

#include "context.h"
#include "operation.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROFILE_MAGIC "fusemath-profile 1"
#define PROFILE_FILE "machine-profile"

/* ---- the built-in model: deliberately modest rates (per cpu thread, per GPU), so that without a
 * measured profile "best" moves work only where the gain is large ---- */
static double builtin_rate(fm_op op, fm_dtype dt, int cuda)
{
    const int wide = dt == FM_F64 || dt == FM_C128 || dt == FM_LD || dt == FM_CLD;
    const int half = dt == FM_F16 || dt == FM_BF16 || dt == FM_F8E4M3 || dt == FM_F8E5M2 || dt == FM_C32;
    switch (op) {
    case FM_OP_MATMUL: /* flops (f64: many GPUs run it at 1/32 to 1/64 of f32) */
        if (cuda)
            return half ? 2e14 : wide ? 1e12 : 2e13;
        return half || fm_dtype_is_integer(dt) ? 5e9 : wide ? 2e10 : 4e10;
    case FM_OP_FFT: /* 5 N log2 n */
        return cuda ? (wide ? 2.5e11 : 5e11) : (wide ? 1.5e9 : 3e9);
    case FM_OP_RNG: /* values */
        return cuda ? (wide ? 5e10 : 1e11) : (wide ? 2e8 : 3e8);
    case FM_OP_SOLVE: /* flops */
        return cuda ? (wide ? 2e12 : 4e12) : (wide ? 2e10 : 4e10);
    default:
        return cuda ? 1e11 : 1e9;
    }
}

static const double builtin_fixed[2] = {2e-6, 2e-5};        /* seconds per call: cpu, cuda (with its sync) */
static const double builtin_copy_latency = 1e-5, builtin_copy_rate = 5e9; /* pageable, each way */

/* Seconds for work on curve c: log-log between its points, its first point's time below them (a
 * call costs at least that), its last point's rate above them. */
static double curve_seconds(const fm_rate_curve *c, double work)
{
    if (work <= c->work[0])
        return c->seconds[0];
    for (int i = 1; i < c->n; i++) {
        if (work > c->work[i])
            continue;
        const double f = (log(work) - log(c->work[i - 1])) / (log(c->work[i]) - log(c->work[i - 1]));
        return exp(log(c->seconds[i - 1]) + f * (log(c->seconds[i]) - log(c->seconds[i - 1])));
    }
    return c->seconds[c->n - 1] * (work / c->work[c->n - 1]);
}

/* Whether pf has a curve of `curve` on device (any dtype). */
static int has_curve(const fm_profile *pf, int curve, int device)
{
    for (int i = 0; pf && i < pf->ncurves; i++)
        if (pf->curves[i].op == (int32_t)curve && pf->curves[i].device == device)
            return 1;
    return 0;
}

double fm_profile_predict(const fm_profile *pf, int threads, int curve, fm_dtype dtype, int cuda, double work)
{
    const int device = cuda ? FM_DEVICE_CUDA : FM_DEVICE_CPU;
    const fm_op op = (fm_op)(curve & 0xff);
    if (curve >> 8 && !has_curve(pf, curve, device))
        curve = (int)op; /* a profile measured without that variant: the operation's first curve */
    const fm_rate_curve *other = NULL;
    for (int i = 0; pf && i < pf->ncurves; i++) {
        const fm_rate_curve *c = &pf->curves[i];
        if (c->op != (int32_t)curve || c->device != device)
            continue;
        if (c->dtype == (int32_t)dtype)
            return curve_seconds(c, work) * (cuda || threads <= 0 ? 1.0 : (double)pf->threads / threads);
        /* else the curve of the dtype closest in element size (c128 takes f64's, not f32's) */
        const double d = fabs(log((double)fm_dtype_size((fm_dtype)c->dtype) / (double)fm_dtype_size(dtype)));
        if (!other || d < fabs(log((double)fm_dtype_size((fm_dtype)other->dtype) / (double)fm_dtype_size(dtype))))
            other = c;
    }
    if (threads <= 0)
        threads = 1;
    if (other) /* another dtype's curve, at the built-in ratio of the two dtypes' rates */
        return curve_seconds(other, work * builtin_rate(op, (fm_dtype)other->dtype, cuda) /
                                        builtin_rate(op, dtype, cuda)) *
               (cuda ? 1.0 : (double)pf->threads / threads);
    return builtin_fixed[cuda != 0] + work / (builtin_rate(op, dtype, cuda) * (cuda ? 1 : threads));
}

double fm_profile_touch_time(const fm_profile *pf, double bytes)
{
    return pf && pf->touch_rate > 0 && bytes > 0 ? bytes / pf->touch_rate : 0;
}

double fm_profile_copy_time(const fm_profile *pf, int dir, double bytes)
{
    if (bytes <= 0)
        return 0;
    if (!pf || pf->copy_rate[dir] <= 0)
        return builtin_copy_latency + bytes / builtin_copy_rate;
    return pf->copy_latency[dir] + bytes / pf->copy_rate[dir];
}

/* ---- fingerprint ---- */
/* The value of the first "<key>... : value" line of a /proc file, or "" */
static void proc_value(const char *path, const char *key, char *out, size_t n)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, strlen(key)) != 0)
            continue;
        const char *v = strchr(line, ':');
        if (!v)
            continue;
        v += 1 + strspn(v + 1, " \t");
        snprintf(out, n, "%s", v);
        out[strcspn(out, "\r\n")] = '\0';
        break;
    }
    fclose(f);
}

void fm_profile_fingerprint(char *buf, size_t size)
{
    char cpu[160], gpu[160] = "";
    proc_value("/proc/cpuinfo", "model name", cpu, sizeof cpu);
    const int ncuda = fm_cuda_device_count();
    if (ncuda > 0) { /* the driver's name of a GPU (the first in directory order); no CUDA call needed */
        DIR *dir = opendir("/proc/driver/nvidia/gpus");
        const struct dirent *e;
        while (dir && (e = readdir(dir)) && !gpu[0]) {
            char path[320];
            if (e->d_name[0] != '.' &&
                snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/information", e->d_name) < (int)sizeof path)
                proc_value(path, "Model", gpu, sizeof gpu);
        }
        if (dir)
            closedir(dir);
    }
    snprintf(buf, size, "fusemath %s cpu '%s' x%ld cuda %d '%s'", fm_version_string(), cpu,
             sysconf(_SC_NPROCESSORS_ONLN), ncuda, gpu);
}

/* ---- text form ---- */
static uint64_t fnv(const char *s, size_t n) { return fm_fnv1a(FM_FNV_START, s, n); }

static const char *device_word(int device) { return device == FM_DEVICE_CUDA ? "cuda" : "cpu"; }

fm_status fm_profile_format(const fm_profile *pf, char **text)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "profile: out of host memory");
    fprintf(f, "%s\nfingerprint %s\nsource %s\nthreads %d\n", PROFILE_MAGIC, pf->fingerprint, pf->source, pf->threads);
    for (int d = 0; d < 2; d++)
        fprintf(f, "copy %s %.6g %.6g\n", d ? "d2h" : "h2d", pf->copy_latency[d], pf->copy_rate[d]);
    if (pf->touch_rate > 0)
        fprintf(f, "touch %.6g\n", pf->touch_rate);
    for (int i = 0; i < pf->ncurves; i++) {
        const fm_rate_curve *c = &pf->curves[i];
        char name[24];
        snprintf(name, sizeof name, c->op >> 8 ? "%s.%d" : "%s", fm_op_name((fm_op)(c->op & 0xff)), c->op >> 8);
        fprintf(f, "curve %s %s %s %d", name, fm_dtype_name((fm_dtype)c->dtype), device_word(c->device), c->n);
        for (int k = 0; k < c->n; k++)
            fprintf(f, " %.6g %.6g", c->work[k], c->seconds[k]);
        fputc('\n', f);
    }
    for (int op = 0; op < FM_OP_COUNT_; op++)
        if (pf->concurrency[op][0] > 0)
            fprintf(f, "concurrency %s %.4g %.4g\n", fm_op_name((fm_op)op), pf->concurrency[op][0],
                    pf->concurrency[op][1]);
    if (fclose(f) != 0 || !buf)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "profile: out of host memory");
    char *out = malloc(len + 32);
    if (!out) {
        free(buf);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "profile: out of host memory");
    }
    snprintf(out, len + 32, "%schecksum %016" PRIx64 "\n", buf, fnv(buf, len));
    free(buf);
    *text = out;
    return FM_OK;
}

static int lookup_name(const char *word, int count, const char *(*name_of)(int))
{
    for (int i = 0; i < count; i++)
        if (strcmp(word, name_of(i)) == 0)
            return i;
    return -1;
}
static const char *op_name_i(int i) { return fm_op_name((fm_op)i); }
static const char *dtype_name_i(int i) { return fm_dtype_name((fm_dtype)i); }

/* One "curve <op> <dtype> <device> <n> <work seconds>..." line; 0 when well formed. */
static int parse_curve(const char *line, fm_rate_curve *c)
{
    char op[16], dt[16], dev[8];
    int used = 0;
    if (sscanf(line, "curve %15s %15s %7s %d%n", op, dt, dev, &c->n, &used) != 4 || c->n < 1 ||
        c->n > FM_PROFILE_MAX_POINTS)
        return -1;
    char *dot = strchr(op, '.'); /* "fft.1": the operation's curve 1 */
    int variant = 0;
    if (dot) {
        char *end = NULL;
        const long v = strtol(dot + 1, &end, 10);
        if (!isdigit((unsigned char)dot[1]) || end == dot + 1 || *end || v < 1 || v > 15)
            return -1;
        variant = (int)v;
        *dot = '\0';
    }
    c->op = lookup_name(op, FM_OP_COUNT_, op_name_i);
    if (c->op >= 0)
        c->op = FM_PROFILE_CURVE(c->op, variant);
    c->dtype = lookup_name(dt, FM_DTYPE_COUNT_, dtype_name_i);
    c->device = strcmp(dev, "cuda") == 0 ? FM_DEVICE_CUDA : strcmp(dev, "cpu") == 0 ? FM_DEVICE_CPU : -1;
    if (c->op < 0 || c->dtype <= 0 || c->device < 0)
        return -1;
    const char *s = line + used;
    for (int k = 0; k < c->n; k++) {
        char *end = NULL;
        c->work[k] = strtod(s, &end);
        s = end;
        c->seconds[k] = strtod(s, &end);
        if (end == s || !isfinite(c->work[k]) || !isfinite(c->seconds[k]) || c->work[k] <= 0 || c->seconds[k] <= 0 ||
            (k && c->work[k] <= c->work[k - 1]))
            return -1;
        s = end;
    }
    return *(s + strspn(s, " \t\r\n")) ? -1 : 0;
}

/* Nothing but blanks from s on: a line's numbers are all it holds ("touch 5e9 7" is malformed). */
static int blank_from(const char *s) { return s[strspn(s, " \t\r")] == '\0'; }

static fm_status parse_line(const char *line, fm_profile *pf)
{
    if (strncmp(line, "fingerprint ", 12) == 0 || strncmp(line, "source ", 7) == 0) {
        const int fp = line[0] == 'f';
        char *dst = fp ? pf->fingerprint : pf->source;
        const size_t cap = fp ? sizeof pf->fingerprint : sizeof pf->source, n = strlen(line + (fp ? 12 : 7));
        if (n >= cap)
            return FM_ERR_INVALID_ARGUMENT;
        memcpy(dst, line + (fp ? 12 : 7), n + 1);
        dst[strcspn(dst, "\r\n")] = '\0';
        return FM_OK;
    }
    int used = 0;
    if (sscanf(line, "threads %d%n", &pf->threads, &used) == 1)
        return pf->threads >= 1 && pf->threads <= FM_MAX_THREADS && blank_from(line + used) ? FM_OK
                                                                                            : FM_ERR_INVALID_ARGUMENT;
    char dir[8];
    double lat, rate;
    if (sscanf(line, "copy %7s %lf %lf%n", dir, &lat, &rate, &used) == 3) {
        const int d = strcmp(dir, "d2h") == 0 ? 1 : strcmp(dir, "h2d") == 0 ? 0 : -1;
        if (d < 0 || !(lat >= 0 && lat < 1) || !(rate > 0 && rate < 1e15) || !blank_from(line + used))
            return FM_ERR_INVALID_ARGUMENT;
        pf->copy_latency[d] = lat, pf->copy_rate[d] = rate;
        return FM_OK;
    }
    if (sscanf(line, "touch %lf%n", &rate, &used) == 1)
        return rate > 0 && rate < 1e15 && blank_from(line + used) ? (pf->touch_rate = rate, FM_OK)
                                                                  : FM_ERR_INVALID_ARGUMENT;
    char op[16];
    double cpu_side, copy_side;
    if (sscanf(line, "concurrency %15s %lf %lf%n", op, &cpu_side, &copy_side, &used) == 3) {
        const int o = lookup_name(op, FM_OP_COUNT_, op_name_i);
        if (o < 0 || !(cpu_side > 0 && cpu_side <= 1) || !(copy_side > 0 && copy_side <= 1) ||
            !blank_from(line + used))
            return FM_ERR_INVALID_ARGUMENT;
        pf->concurrency[o][0] = cpu_side, pf->concurrency[o][1] = copy_side;
        return FM_OK;
    }
    if (strncmp(line, "curve ", 6) == 0 && pf->ncurves < FM_PROFILE_MAX_CURVES)
        return parse_curve(line, &pf->curves[pf->ncurves++]) == 0 ? FM_OK : FM_ERR_INVALID_ARGUMENT;
    return FM_ERR_INVALID_ARGUMENT;
}

fm_status fm_profile_parse(const char *text, const char *where, fm_profile *pf)
{
    memset(pf, 0, sizeof *pf);
    const char *sum = strstr(text, "\nchecksum ");
    uint64_t want = 0;
    int tail = 0; /* the checksum line is the last: nothing after it is trusted either */
    if (strncmp(text, PROFILE_MAGIC "\n", strlen(PROFILE_MAGIC) + 1) != 0 || !sum ||
        sscanf(sum + 10, "%" SCNx64 "%n", &want, &tail) != 1 || strcmp(sum + 10 + tail, "\n") != 0 ||
        want != fnv(text, (size_t)(sum + 1 - text)))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "profile %s is corrupt (its first line or checksum does not match)",
                       where);
    int lineno = 1;
    for (const char *line = strchr(text, '\n') + 1; line < sum + 1; line = strchr(line, '\n') + 1) {
        lineno++;
        char buf[1024];
        const size_t n = (size_t)(strchr(line, '\n') - line);
        if (n >= sizeof buf || (snprintf(buf, sizeof buf, "%.*s", (int)n, line), parse_line(buf, pf) != FM_OK))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "profile %s: line %d is malformed", where, lineno);
    }
    char here[256];
    fm_profile_fingerprint(here, sizeof here);
    if (strcmp(here, pf->fingerprint) != 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "profile %s was measured on another machine or version (%.100s; "
                       "this is %.100s)", where, pf->fingerprint, here);
    if (pf->threads < 1 || pf->copy_rate[0] <= 0 || pf->copy_rate[1] <= 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "profile %s lacks its threads or copy lines", where);
    return FM_OK;
}

/* ---- the context's profile ---- */
const fm_profile *fm_context_profile(const fm_context *ctx)
{
    return atomic_load_explicit(&((fm_context *)ctx)->profile, memory_order_acquire);
}

/* Whether a and b predict alike (what they were measured as, and where they came from, aside). */
static int same_profile(const fm_profile *a, const fm_profile *b)
{
    if (!a || !b)
        return a == b;
    return a->threads == b->threads && a->ncurves == b->ncurves && !strcmp(a->fingerprint, b->fingerprint) &&
           !memcmp(a->copy_latency, b->copy_latency, sizeof a->copy_latency) &&
           !memcmp(a->copy_rate, b->copy_rate, sizeof a->copy_rate) &&
           !memcmp(a->concurrency, b->concurrency, sizeof a->concurrency) && a->touch_rate == b->touch_rate &&
           !memcmp(a->curves, b->curves, (size_t)a->ncurves * sizeof a->curves[0]);
}

void fm_context_profile_install(fm_context *ctx, fm_profile *pf)
{
    pthread_mutex_lock(&ctx->lock);
    if (same_profile(pf, atomic_load(&ctx->profile))) { /* a wisdom file loaded again: nothing changes */
        ctx->profile_note[0] = '\0';
        pthread_mutex_unlock(&ctx->lock);
        free(pf);
        return;
    }
    fm_profile *old = atomic_exchange(&ctx->profile, pf);
    if (old) { /* kept until the context goes: a planner may be reading it */
        old->retired = ctx->profile_retired;
        ctx->profile_retired = old;
    }
    ctx->profile_note[0] = '\0';
    pthread_mutex_unlock(&ctx->lock);
    fm_context_clear_cache(ctx); /* plans chosen by the previous model */
}

void fm_context_profile_free_all(fm_context *ctx)
{
    fm_profile *pf = atomic_exchange(&ctx->profile, NULL);
    free(pf);
    for (fm_profile *r = ctx->profile_retired, *next; r; r = next) {
        next = r->retired;
        free(r);
    }
    ctx->profile_retired = NULL;
}

void fm_context_profile_note(fm_context *ctx, const char *fmt, ...)
{
    char msg[sizeof ctx->profile_note];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&ctx->lock);
    snprintf(ctx->profile_note, sizeof ctx->profile_note, "%s", msg);
    pthread_mutex_unlock(&ctx->lock);
    fm_log_plan(ctx, "%s", msg);
}

void fm_context_profile_import(fm_context *ctx, const char *text, const char *where)
{
    fm_profile *pf = malloc(sizeof *pf);
    if (!pf) {
        fm_context_profile_note(ctx, "profile %s ignored: out of host memory", where);
        return;
    }
    if (fm_profile_parse(text, where, pf) != FM_OK) {
        fm_context_profile_note(ctx, "%s: ignored, %s", fm_last_error(),
                                fm_context_profile(ctx) ? "the profile in use stays" : "the built-in model stays");
        fm_clear_error();
        free(pf);
        return;
    }
    snprintf(pf->source + strlen(pf->source), sizeof pf->source - strlen(pf->source), "; loaded from %s", where);
    fm_context_profile_install(ctx, pf);
}

/* <cache dir>/machine-profile, or "" where the context has no cache directory */
static void default_path(const fm_context *ctx, char *path, size_t n)
{
    const char *dir = ctx->settings.cache_dir;
    if (!dir[0] || snprintf(path, n, "%s/" PROFILE_FILE, dir) >= (int)n)
        path[0] = '\0';
}

fm_status fm_profile_save_file(const fm_context *ctx, const fm_profile *pf)
{
    char path[600], tmp[640];
    default_path(ctx, path, sizeof path);
    if (!path[0])
        return fm_fail(FM_ERR_UNAVAILABLE, "calibrate: no cache directory to keep the profile in (set "
                       "FUSEMATH_CACHE_DIR or HOME)");
    char *text = NULL;
    fm_status s = fm_profile_format(pf, &text);
    if (s != FM_OK)
        return s;
    (void)fm_make_dirs(ctx->settings.cache_dir); /* the open below says what failed */
    static atomic_uint serial; /* a temporary of its own per save: contexts and threads may save at once */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&serial, 1));
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0;
    ok = (f && fclose(f) == 0) && ok;
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        const int err = errno;
        remove(tmp);
        return fm_fail(FM_ERR_UNAVAILABLE, "calibrate: cannot write '%s': %s", path, strerror(err));
    }
    return FM_OK;
}

void fm_context_profile_load_default(fm_context *ctx)
{
    char path[600];
    default_path(ctx, path, sizeof path);
    if (!path[0])
        return;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return; /* none yet: the built-in model */
    struct stat sb;
    char *text = NULL;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 && sb.st_size < (1 << 20) &&
        (text = malloc((size_t)sb.st_size + 1)) && read(fd, text, (size_t)sb.st_size) == (ssize_t)sb.st_size) {
        text[sb.st_size] = '\0';
        fm_context_profile_import(ctx, text, path);
    } else {
        fm_context_profile_note(ctx, "profile %s ignored: not a readable regular file under 1 MiB", path);
    }
    free(text);
    close(fd);
}

fm_status fm_context_profile_text(const fm_context *ctx, char *buf, size_t size)
{
    if (!ctx || !buf || size == 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "profile text: ctx and buf must not be NULL and size > 0");
    const fm_profile *pf = fm_context_profile(ctx);
    char note[sizeof ctx->profile_note];
    pthread_mutex_lock((pthread_mutex_t *)&ctx->lock);
    snprintf(note, sizeof note, "%s", ctx->profile_note);
    pthread_mutex_unlock((pthread_mutex_t *)&ctx->lock);
    if (!pf) {
        snprintf(buf, size, "profile: builtin (no calibration on this machine; fusemath.calibrate() measures one)\n%s%s%s",
                 note[0] ? "note: " : "", note, note[0] ? "\n" : "");
        return FM_OK;
    }
    char *text = NULL;
    fm_status s = fm_profile_format(pf, &text);
    if (s != FM_OK)
        return s;
    snprintf(buf, size, "profile: %s\n%s%s%s", pf->source, note[0] ? "note: " : "", note[0] ? note : "",
             note[0] ? "\n" : "");
    const size_t used = strlen(buf);
    snprintf(buf + used, size - used, "%s", strchr(text, '\n') + 1);
    free(text);
    return FM_OK;
}

fm_status fm_context_profile_clear(fm_context *ctx)
{
    if (!ctx)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "profile clear: ctx is NULL");
    fm_context_profile_install(ctx, NULL);
    return FM_OK;
}
