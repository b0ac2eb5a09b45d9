/* wisdom.c : tuned choices kept by the context and saved as text, so a later process plans the
 * tuned choice without timing again. An entry maps the stable hash of an untuned problem to the
 * values of its operation's tunable fields (fm_operation.tunables) that won: autotune's winners
 * and the backends' own timed choices (the CPU FFT's path, backends/cpu/fftw_timed.c) alike.
 *
 * The file: a first line WISDOM_MAGIC, then one line per entry,
 *   <op name> <key, 16 hex digits> <the op's ntunables values> # <the tuned plan's describe()>
 * and the backends' own knowledge (FFTW's wisdom) as length-prefixed blobs. Version 1 files
 * (matmul lines with 4 values) were keyed before problems carried their settings_key, version 2
 * files before they carried FM_EXECUTION_BEST's fields: their entries can never match a problem
 * of this build, so they load without error and are not applied (FUSEMATH_LOG=plan says so);
 * their blobs, the backends' own knowledge, still load. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "context.h"
#include "operation.h"
#include "profile.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WISDOM_MAGIC "fusemath-wisdom 3"
#define WISDOM_MAGIC_V2 "fusemath-wisdom 2" /* read: its entries skipped (see above) */
#define WISDOM_MAGIC_V1 "fusemath-wisdom 1" /* likewise */

typedef struct fm_wisdom_entry {
    uint64_t key;
    int32_t op;
    int32_t v[FM_MAX_TUNABLES]; /* the operation's tunable fields (fm_operation.tunables), in order */
    char note[120]; /* the tuned plan's describe(), for people reading the file */
} fm_wisdom_entry;

/* The hash saved in wisdom files: word-wise multiply-xorshift over the problem's bytes. Its
 * own function, not the plan cache's fm_problem_hash (free to change for speed), so that
 * files written by earlier versions keep matching. */
uint64_t fm_problem_stable_hash(const fm_problem *p)
{
    fm_problem q = *p;
    memset(q.slot_names, 0, sizeof q.slot_names); /* pointers differ between processes */
    q.best = 0; /* how best chose, and its predictions: a tuned choice holds for the device whoever chose it */
    q.best_ms[0] = q.best_ms[1] = 0;
    const unsigned char *b = (const unsigned char *)&q;
    const size_t n = offsetof(fm_problem, split); /* the fields every version had; a split below */
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    for (; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    if (q.split) { /* a split problem is its own entry (its prediction left out, as best's) */
        h = fm_fnv1a(h, &q.split, sizeof q.split);
        h = fm_fnv1a(h, &q.split_cpu_threads, sizeof q.split_cpu_threads);
    }
    return h ^ (h >> 29);
}

static uint64_t hash_text(uint64_t h, const char *s) { return fm_fnv1a(h, s, strlen(s)); }

/* The key of p's entry: the problem's stable hash with the name and salt of every backend
 * that could plan it (see fm_backend.wisdom_salt) hashed on. */
static uint64_t wisdom_key(const fm_context *ctx, const fm_problem *p)
{
    uint64_t h = fm_problem_stable_hash(p);
    for (int i = 0; i < ctx->nbackends; i++) {
        const fm_backend_slot *slot = &ctx->backends[i];
        const fm_backend *b = slot->backend;
        if (!slot->available || !b->wisdom_salt || (int)b->device != p->exec_device.type ||
            !(b->ops & (1u << p->op)))
            continue;
        char salt[256] = "";
        b->wisdom_salt(ctx, slot->state, p, salt, sizeof salt);
        h = hash_text(hash_text(h, b->name), salt);
        h = (h ^ 0xffu) * 0x100000001b3ull; /* ends this backend's part */
    }
    return h;
}

/* Insert or replace; called with ctx->lock held. */
static int put_locked(fm_context *ctx, const fm_wisdom_entry *e)
{
    for (int i = 0; i < ctx->nwisdom; i++)
        if (ctx->wisdom[i].key == e->key && ctx->wisdom[i].op == e->op) {
            ctx->wisdom[i] = *e;
            return 0;
        }
    if (ctx->nwisdom == ctx->capwisdom) {
        int cap = ctx->capwisdom ? 2 * ctx->capwisdom : 16;
        fm_wisdom_entry *w = realloc(ctx->wisdom, (size_t)cap * sizeof *w);
        if (!w)
            return -1;
        ctx->wisdom = w;
        ctx->capwisdom = cap;
    }
    ctx->wisdom[ctx->nwisdom++] = *e;
    return 0;
}

void fm_wisdom_record(fm_context *ctx, const fm_problem *p, const fm_problem *tuned, const char *describe)
{
    if (!fm_problem_untuned(p))
        return;
    fm_wisdom_entry e = {.key = wisdom_key(ctx, p), .op = p->op};
    fm_problem_tunables(tuned, e.v);
    snprintf(e.note, sizeof e.note, "%s", describe ? describe : "");
    for (char *c = e.note; *c; c++)
        if (*c == '\n')
            *c = ' ';
    pthread_mutex_lock(&ctx->lock);
    put_locked(ctx, &e);
    pthread_mutex_unlock(&ctx->lock);
}

int fm_wisdom_lookup(fm_context *ctx, const fm_problem *p, fm_problem *tuned)
{
    if (!atomic_load_explicit(&ctx->nwisdom, memory_order_relaxed) || !fm_problem_untuned(p)) /* peek; rechecked below */
        return 0;
    uint64_t key = wisdom_key(ctx, p);
    int found = 0;
    pthread_mutex_lock(&ctx->lock);
    for (int i = 0; i < ctx->nwisdom && !found; i++)
        if (ctx->wisdom[i].key == key && ctx->wisdom[i].op == (int32_t)p->op) {
            *tuned = *p;
            fm_problem_set_tunables(tuned, ctx->wisdom[i].v);
            found = 1;
        }
    pthread_mutex_unlock(&ctx->lock);
    return found;
}

void fm_wisdom_clear_(fm_context *ctx)
{
    free(ctx->wisdom);
    ctx->wisdom = NULL;
    ctx->capwisdom = 0;
    ctx->nwisdom = 0;
}

fm_status fm_context_wisdom_forget(fm_context *ctx)
{
    if (!ctx)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom forget: ctx must not be NULL");
    pthread_mutex_lock(&ctx->lock);
    fm_wisdom_clear_(ctx);
    pthread_mutex_unlock(&ctx->lock);
    for (int i = 0; i < ctx->nbackends; i++)
        if (ctx->backends[i].backend->wisdom_forget)
            ctx->backends[i].backend->wisdom_forget();
    return FM_OK;
}

int fm_context_wisdom_size(const fm_context *ctx)
{
    return ctx ? atomic_load(&((fm_context *)ctx)->nwisdom) : 0; /* written under the lock, atomic to read */
}

/* Where a save of path writes: path itself, or the file a symlink at path points to (a save
 * replaces the file by renaming a finished temporary over it, which would replace the link
 * itself), existing or not yet. Anything there that is not a regular file (a directory, a FIFO,
 * a device) is refused: the rename would replace it. dest has PATH_MAX bytes; *mode is the
 * existing file's permission bits, or -1 for a new file (the temporary's, from the umask). */
static fm_status save_destination(const char *path, char *dest, int *mode)
{
    struct stat st;
    *mode = -1;
    if (!*path)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: path is empty");
    if (strlen(path) >= PATH_MAX)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: path is too long");
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: cannot use '%s': %s", path, strerror(errno));
        strcpy(dest, path); /* a new file */
        return FM_OK;
    }
    if (S_ISLNK(st.st_mode)) {
        if (!realpath(path, dest)) {
            if (errno != ENOENT)
                return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: '%s' is a symbolic link that cannot be followed "
                               "(%s)", path, strerror(errno));
            /* a link to a file not written yet: its target, relative to the link's directory */
            char target[PATH_MAX];
            const ssize_t n = readlink(path, target, sizeof target - 1);
            if (n < 0)
                return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: cannot read the symbolic link '%s': %s", path,
                               strerror(errno));
            target[n] = '\0';
            const char *slash = strrchr(path, '/');
            const int dirlen = target[0] == '/' || !slash ? 0 : (int)(slash - path + 1);
            if (dirlen + strlen(target) >= PATH_MAX)
                return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: path is too long");
            memcpy(dest, path, (size_t)dirlen); /* lengths checked above */
            memcpy(dest + dirlen, target, strlen(target) + 1);
            if (lstat(dest, &st) == 0 && S_ISLNK(st.st_mode))
                return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: '%s' is a symbolic link to a dangling link",
                               path);
            return FM_OK;
        }
        if (stat(dest, &st) != 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: cannot use '%s': %s", dest, strerror(errno));
    } else {
        strcpy(dest, path);
    }
    if (!S_ISREG(st.st_mode))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: '%s' exists and is not a regular file (a wisdom file "
                       "replaces what is there)", path);
    *mode = (int)(st.st_mode & 07777);
    return FM_OK;
}

fm_status fm_context_wisdom_save(fm_context *ctx, const char *path)
{
    if (!ctx || !path)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: ctx and path must not be NULL");
    char dest[PATH_MAX], tmp[PATH_MAX + 64];
    int mode = -1;
    fm_status s = save_destination(path, dest, &mode);
    if (s != FM_OK)
        return s;
    /* a temporary of its own per call (several threads may save to one path at once), created
     * with O_EXCL and the umask's permissions, renamed over dest once complete */
    static atomic_uint serial;
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", dest, (long)getpid(), atomic_fetch_add(&serial, 1));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd >= 0 && mode >= 0)
        (void)fchmod(fd, (mode_t)mode); /* a replaced file keeps its permissions */
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        const int err = errno;
        if (fd >= 0) {
            close(fd);
            remove(tmp);
        }
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: cannot write '%s': %s", path, strerror(err));
    }
    pthread_mutex_lock(&ctx->lock);
    int ok = fprintf(f, "%s\n", WISDOM_MAGIC) > 0;
    for (int i = 0; i < ctx->nwisdom && ok; i++) {
        const fm_wisdom_entry *e = &ctx->wisdom[i];
        const fm_operation *o = fm_operation_for((fm_op)e->op);
        ok = fprintf(f, "%s %016" PRIx64, o->name, e->key) > 0;
        for (int k = 0; k < o->ntunables && ok; k++)
            ok = fprintf(f, " %d", e->v[k]) > 0;
        ok = ok && fprintf(f, " # %s\n", e->note) > 0;
    }
    pthread_mutex_unlock(&ctx->lock);
    /* backends' own knowledge, as length-prefixed blobs ("blob <backend> <bytes>\n<text>\n") */
    for (int i = 0; i < ctx->nbackends && ok; i++) {
        const fm_backend *b = ctx->backends[i].backend;
        char *text = NULL;
        if (!b->wisdom_export || b->wisdom_export(&text) != FM_OK || !text)
            continue;
        size_t len = strlen(text);
        ok = fprintf(f, "blob %s %zu\n", b->name, len) > 0 && fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF;
        free(text);
    }
    /* the machine profile of FM_EXECUTION_BEST, as a blob of its own */
    char *profile = NULL;
    if (ok && fm_context_profile(ctx) && fm_profile_format(fm_context_profile(ctx), &profile) == FM_OK) {
        const size_t len = strlen(profile);
        ok = fprintf(f, "blob profile %zu\n", len) > 0 && fwrite(profile, 1, len, f) == len && fputc('\n', f) != EOF;
        free(profile);
    }
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, dest) != 0) {
        int err = errno;
        remove(tmp);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: writing '%s' failed: %s", path, strerror(err));
    }
    return FM_OK;
}

/* n decimal integers (then the end of the line or a "# note"), each within int32: strtoll
 * reports what does not fit, where sscanf's %d would silently wrap it into range. */
static int parse_fields(const char *text, int n, int32_t *v)
{
    for (int i = 0; i < n; i++) {
        char *end = NULL;
        errno = 0;
        long long x = strtoll(text, &end, 10);
        if (end == text || errno == ERANGE || x < INT32_MIN || x > INT32_MAX || (*end && !isspace((unsigned char)*end)))
            return -1;
        v[i] = (int32_t)x;
        text = end;
    }
    text += strspn(text, " \t\r\n");
    return *text == '\0' || *text == '#' ? 0 : -1;
}

/* The operation called name in a file, or NULL (one this build does not have). */
static const fm_operation *operation_named(const char *name)
{
    for (int op = 0; op < FM_OP_COUNT_; op++) {
        const fm_operation *o = fm_operation_for((fm_op)op);
        if (o && strcmp(o->name, name) == 0)
            return o;
    }
    return NULL;
}

enum { MAX_BLOBS = 32 };

/* A load in progress: what the file holds, merged only once all of it has parsed. */
typedef struct loading {
    fm_context *ctx;
    const char *path;
    FILE *f;
    int version, lineno;
    fm_wisdom_entry *got; /* the entries */
    int n, cap;
    int old_entries; /* a version 1 or 2 file's, skipped */
    /* backends' blobs are held until the whole file has parsed: a malformed line after a blob
     * must not leave that blob imported */
    struct {
        const fm_backend *backend;
        char *text;
    } blobs[MAX_BLOBS];
    int nblobs;
    char *profile; /* the machine profile's blob, imported (or ignored, with a note) once all parsed */
} loading;

/* The blob whose header is line ("blob <backend> <bytes>"): read whole, held for its backend
 * (skipped when that backend is not here, as another machine's may be). */
static fm_status read_blob(loading *ld, const char *line)
{
    char name[64];
    size_t len = 0;
    if (sscanf(line + 5, "%63s %zu", name, &len) != 2 || len > ((size_t)1 << 30))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' line %d is a malformed blob header", ld->path,
                       ld->lineno);
    char *text = malloc(len + 1);
    if (!text)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "wisdom load: out of host memory");
    if (fread(text, 1, len, ld->f) != len || fgetc(ld->f) != '\n') {
        free(text);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s': the %s blob at line %d is truncated", ld->path,
                       name, ld->lineno);
    }
    text[len] = '\0';
    for (size_t k = 0; k < len; k++)
        ld->lineno += text[k] == '\n';
    ld->lineno++;
    if (strcmp(name, "profile") == 0) {
        free(ld->profile);
        ld->profile = text;
        return FM_OK;
    }
    const fm_backend *b = NULL;
    for (int i = 0; i < ld->ctx->nbackends; i++)
        if (strcmp(ld->ctx->backends[i].backend->name, name) == 0)
            b = ld->ctx->backends[i].backend;
    if (!b || !b->wisdom_import) {
        free(text);
        return FM_OK;
    }
    if (ld->nblobs == MAX_BLOBS) {
        free(text);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' has more than %d blobs", ld->path, MAX_BLOBS);
    }
    ld->blobs[ld->nblobs].backend = b;
    ld->blobs[ld->nblobs++].text = text;
    return FM_OK;
}

/* The entry on line: "<op> <key> <values> # note", the values checked by the operation's own
 * check_tunables. Lines of operations this build does not have are skipped (a later build's:
 * they do not apply here), and so are a version 1 file's (see the top of this file). */
static fm_status read_entry(loading *ld, const char *line)
{
    char op[16];
    uint64_t key = 0;
    int used = 0;
    if (sscanf(line, "%15s %" SCNx64 "%n", op, &key, &used) != 2)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' line %d is malformed", ld->path, ld->lineno);
    if (ld->version < 3) {
        ld->old_entries++;
        return FM_OK;
    }
    const fm_operation *o = operation_named(op);
    if (!o)
        return FM_OK;
    fm_wisdom_entry e = {.key = key, .op = (int32_t)o->op};
    if (parse_fields(line + used, o->ntunables, e.v) != 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' line %d is malformed (expected '%s <16 hex digits> "
                       "<%d integers> # note')", ld->path, ld->lineno, o->name, o->ntunables);
    /* an edited file must not plan what no caller could ask */
    if (o->check_tunables && o->check_tunables(e.v) != FM_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", fm_last_error());
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' line %d: %s", ld->path, ld->lineno, why);
    }
    const char *note = strstr(line + used, "# ");
    if (note) {
        snprintf(e.note, sizeof e.note, "%s", note + 2);
        e.note[strcspn(e.note, "\r\n")] = '\0';
    }
    if (ld->n == ld->cap) {
        const int cap = ld->cap ? 2 * ld->cap : 16;
        fm_wisdom_entry *w = realloc(ld->got, (size_t)cap * sizeof *w);
        if (!w)
            return fm_fail(FM_ERR_OUT_OF_MEMORY, "wisdom load: out of host memory");
        ld->got = w;
        ld->cap = cap;
    }
    ld->got[ld->n++] = e;
    return FM_OK;
}

/* Whether line (the first, newline included) is exactly magic: "fusemath-wisdom 17" is a later
 * format, not this one with a suffix. */
static int is_magic(const char *line, const char *magic)
{
    return strcspn(line, "\r\n") == strlen(magic) && strncmp(line, magic, strlen(magic)) == 0;
}

fm_status fm_context_wisdom_load(fm_context *ctx, const char *path)
{
    if (!ctx || !path)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: ctx and path must not be NULL");
    /* O_NONBLOCK: opening a FIFO with no writer would block; a regular file only (checked before any
     * read): /dev/zero has no end and no newline to skip to */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: cannot read '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' is not a regular file", path);
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "wisdom load: out of host memory opening '%s'", path);
    }
    char *line = NULL; /* whole lines, however long (a long comment or note) */
    size_t cap = 0;
    const int first = getline(&line, &cap, f) >= 0;
    const int version = !first                               ? 0
                        : is_magic(line, WISDOM_MAGIC)       ? 3
                        : is_magic(line, WISDOM_MAGIC_V2)    ? 2
                        : is_magic(line, WISDOM_MAGIC_V1)    ? 1
                                                             : 0;
    if (!version) {
        free(line);
        fclose(f);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' is not a fusemath wisdom file (expected a first "
                       "line '%s')", path, WISDOM_MAGIC);
    }
    loading ld = {.ctx = ctx, .path = path, .f = f, .version = version, .lineno = 1};
    fm_status s = FM_OK;
    while (s == FM_OK && getline(&line, &cap, f) >= 0) {
        ld.lineno++;
        if (line[0] == '\n' || line[0] == '#')
            continue;
        s = strncmp(line, "blob ", 5) == 0 ? read_blob(&ld, line) : read_entry(&ld, line);
    }
    free(line);
    fclose(f);
    /* the file parsed: each backend checks and imports its blob (a blob its backend refuses
     * stops the load; the blobs imported before it stay), then the entries, all or nothing */
    for (int i = 0; i < ld.nblobs; i++) {
        if (s == FM_OK)
            s = ld.blobs[i].backend->wisdom_import(ld.blobs[i].text);
        free(ld.blobs[i].text);
    }
    if (s == FM_OK) {
        pthread_mutex_lock(&ctx->lock);
        for (int i = 0; i < ld.n && s == FM_OK; i++)
            if (put_locked(ctx, &ld.got[i]) != 0)
                s = fm_fail(FM_ERR_OUT_OF_MEMORY, "wisdom load: out of host memory");
        pthread_mutex_unlock(&ctx->lock);
    }
    if (s == FM_OK && ld.profile)
        fm_context_profile_import(ctx, ld.profile, path); /* checked there; ignored with a note if foreign */
    free(ld.profile);
    if (s == FM_OK && ld.old_entries)
        fm_log_plan(ctx, "wisdom load: '%s' is a version %d file: its %d entries were keyed before problems carried "
                    "%s and match no problem now (not applied; its blobs were loaded)", path, ld.version,
                    ld.old_entries, ld.version == 1 ? "their settings" : "execution='best''s fields");
    free(ld.got);
    return s;
}
