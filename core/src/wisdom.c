/* wisdom.c : autotune results kept by the context and saved as text, so a later
 * process plans the tuned choice without timing again. An entry maps the stable
 * hash of an untuned problem to the tuning fields that won. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "context.h"
#include "operation.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WISDOM_MAGIC "fusemath-wisdom 1"

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
    const unsigned char *b = (const unsigned char *)&q;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ sizeof q;
    size_t i = 0;
    for (; i + 8 <= sizeof q; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    for (; i < sizeof q; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* h with the bytes of s hashed on (FNV-1a steps). */
static uint64_t hash_text(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

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
    if (!ctx)
        return 0;
    fm_context *c = (fm_context *)ctx;
    pthread_mutex_lock(&c->lock);
    int n = c->nwisdom;
    pthread_mutex_unlock(&c->lock);
    return n;
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
        ok = fprintf(f, "%s %016" PRIx64 " %d %d %d %d # %s\n", fm_op_name((fm_op)e->op), e->key, e->v[0], e->v[1],
                     e->v[2], e->v[3], e->note) > 0;
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
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, dest) != 0) {
        int err = errno;
        remove(tmp);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom save: writing '%s' failed: %s", path, strerror(err));
    }
    return FM_OK;
}

/* After fgets of a line longer than the buffer: drop the rest of that line (a long comment or
 * note; what is parsed fits in the buffer), so it is not read as lines of its own. */
static void drop_rest_of_line(FILE *f, const char *line)
{
    if (strchr(line, '\n'))
        return;
    int ch;
    while ((ch = fgetc(f)) != EOF && ch != '\n')
        ;
}

/* Four decimal integers (then the end of the line or a "# note"), each within int32: strtoll
 * reports what does not fit, where sscanf's %d would silently wrap it into range. */
static int parse_fields(const char *text, int32_t v[4])
{
    for (int i = 0; i < 4; i++) {
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

fm_status fm_context_wisdom_load(fm_context *ctx, const char *path)
{
    if (!ctx || !path)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: ctx and path must not be NULL");
    FILE *f = fopen(path, "r");
    if (!f)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: cannot read '%s': %s", path, strerror(errno));
    struct stat sb; /* a regular file only: /dev/zero has no end and no newline to skip to */
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' is not a regular file", path);
    }
    char line[512];
    fm_status s = FM_OK;
    const int first = fgets(line, sizeof line, f) != NULL;
    if (first)
        drop_rest_of_line(f, line);
    /* the whole first line: "fusemath-wisdom 17" is a later format, not this one */
    if (!first || strcspn(line, "\r\n") != strlen(WISDOM_MAGIC) || strncmp(line, WISDOM_MAGIC, strlen(WISDOM_MAGIC)) != 0) {
        fclose(f);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' is not a fusemath wisdom file (expected a first "
                       "line '%s')", path, WISDOM_MAGIC);
    }
    fm_wisdom_entry *got = NULL;
    int n = 0, cap = 0, lineno = 1;
    /* backends' blobs are held until the whole file has parsed: a malformed line after
     * a blob must not leave that blob imported */
    enum { MAX_BLOBS = 32 };
    struct {
        const fm_backend *backend;
        char *text;
    } blobs[MAX_BLOBS];
    int nblobs = 0;
    while (fgets(line, sizeof line, f)) {
        drop_rest_of_line(f, line);
        lineno++;
        if (line[0] == '\n' || line[0] == '#')
            continue;
        char op[16];
        fm_wisdom_entry e = {0};
        if (strncmp(line, "blob ", 5) == 0) { /* a backend's text: read it whole, hand it over */
            char name[64];
            size_t len = 0;
            if (sscanf(line + 5, "%63s %zu", name, &len) != 2 || len > ((size_t)1 << 30)) {
                s = fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' line %d is a malformed blob header", path, lineno);
                break;
            }
            char *text = malloc(len + 1);
            if (!text) {
                s = fm_fail(FM_ERR_OUT_OF_MEMORY, "wisdom load: out of host memory");
                break;
            }
            if (fread(text, 1, len, f) != len || fgetc(f) != '\n') {
                free(text);
                s = fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s': the %s blob at line %d is truncated", path,
                            name, lineno);
                break;
            }
            text[len] = '\0';
            for (size_t k = 0; k < len; k++)
                lineno += text[k] == '\n';
            lineno++;
            const fm_backend *b = NULL;
            for (int i = 0; i < ctx->nbackends; i++)
                if (strcmp(ctx->backends[i].backend->name, name) == 0)
                    b = ctx->backends[i].backend;
            if (!b || !b->wisdom_import) { /* another machine's blob for a backend not here: skipped */
                free(text);
                continue;
            }
            if (nblobs == MAX_BLOBS) {
                free(text);
                s = fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' has more than %d blobs", path, MAX_BLOBS);
                break;
            }
            blobs[nblobs].backend = b;
            blobs[nblobs++].text = text;
            continue;
        }
        int used = 0;
        if (sscanf(line, "%15s %" SCNx64 "%n", op, &e.key, &used) != 2 || parse_fields(line + used, e.v) != 0) {
            s = fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' line %d is malformed", path, lineno);
            break;
        }
        if (strcmp(op, "matmul") != 0)
            continue; /* other operations' wisdom (e.g. fft) is read by their own code */
        /* the ranges fm_matmul_options accepts: an edited file must not plan what no caller could ask */
        if (e.v[0] < 0 || e.v[1] < FM_CPU_STRATEGY_AUTO || e.v[1] > FM_CPU_STRATEGY_KERNEL || e.v[2] < 0 ||
            e.v[2] > 63 || e.v[3] < 0 || e.v[3] > 2) {
            s = fm_fail(FM_ERR_INVALID_ARGUMENT, "wisdom load: '%s' line %d: panel_rows %d, cpu_strategy %d, gpu_algo %d, "
                        "gpu_passes %d; expected >= 0, %d..%d, 0..63 and 0..2", path, lineno, e.v[0], e.v[1], e.v[2],
                        e.v[3], FM_CPU_STRATEGY_AUTO, FM_CPU_STRATEGY_KERNEL);
            break;
        }
        e.op = FM_OP_MATMUL;
        const char *note = strstr(line, "# ");
        if (note) {
            snprintf(e.note, sizeof e.note, "%s", note + 2);
            e.note[strcspn(e.note, "\n")] = '\0';
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            fm_wisdom_entry *w = realloc(got, (size_t)cap * sizeof *w);
            if (!w) {
                s = fm_fail(FM_ERR_OUT_OF_MEMORY, "wisdom load: out of host memory");
                break;
            }
            got = w;
        }
        got[n++] = e;
    }
    fclose(f);
    /* the file parsed: each backend checks and imports its blob (a blob its backend refuses
     * stops the load; the blobs imported before it stay), then the matmul entries, all or
     * nothing */
    for (int i = 0; i < nblobs; i++) {
        if (s == FM_OK)
            s = blobs[i].backend->wisdom_import(blobs[i].text);
        free(blobs[i].text);
    }
    if (s == FM_OK) {
        pthread_mutex_lock(&ctx->lock);
        for (int i = 0; i < n && s == FM_OK; i++)
            if (put_locked(ctx, &got[i]) != 0)
                s = fm_fail(FM_ERR_OUT_OF_MEMORY, "wisdom load: out of host memory");
        pthread_mutex_unlock(&ctx->lock);
    }
    free(got);
    return s;
}
