/* context.c : backend registry, thread setting, plan cache; the environment through settings.c. */
#define _GNU_SOURCE
#include "context.h"
#include "copy_pool.h"
#include "split.h"
#include "operation.h"
#include "profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* contexts alive in the process: the last one to go releases the host scratch cache */
static atomic_int live_contexts;

/* -1: the table is full; -2: the probe refused a setting (FM_ERR_INVALID_ARGUMENT, message set):
 * a setting that cannot be honoured fails context creation rather than every plan later. */
static int add_backend(fm_context *ctx, const fm_backend *b)
{
    if (ctx->nbackends == FM_MAX_BACKENDS)
        return -1;
    const int index = ctx->nbackends++;
    int at = index;
    for (; at > 0 && ctx->backends[ctx->order[at - 1]].backend->priority < b->priority; at--)
        ctx->order[at] = ctx->order[at - 1];
    ctx->order[at] = index;
    fm_backend_slot *slot = &ctx->backends[index];
    memset(slot, 0, sizeof *slot);
    slot->backend = b;
    const char *why = NULL;
    fm_status s = b->probe ? b->probe(&ctx->settings, &slot->state, &why) : FM_OK;
    slot->available = (s == FM_OK);
    snprintf(slot->why, sizeof slot->why, "%s", slot->available ? "" : (why ? why : fm_status_string(s)));
    return s == FM_ERR_INVALID_ARGUMENT ? -2 : 0;
}

/* The built-in rows, then the CUDA module's (or the row saying why it is absent): the order, and so
 * the priority ties, of the time the CUDA backends were built in. */
/* -2: a probe refused a setting (add_backend), the message set */
static int add_builtin_backends(fm_context *ctx)
{
    for (int i = 0; i < fm_builtin_backend_count; i++)
        if (add_backend(ctx, fm_builtin_backends[i]) == -2)
            return -2;
    const fm_cuda_module *cuda = fm_cuda_module_get(&ctx->settings, NULL);
    for (int i = 0; cuda && i < cuda->nbackends; i++)
        add_backend(ctx, cuda->backends[i]);
    if (!cuda)
        add_backend(ctx, &fm_cuda_absent_backend);
    return 0;
}

/* A forced backend that does not exist would fail every plan later; refuse it where it is read. */
static int names_backend(const fm_context *ctx, const char *name)
{
    for (int i = 0; i < ctx->nbackends; i++)
        if (strcmp(ctx->backends[i].backend->name, name) == 0)
            return 1;
    return 0;
}

fm_status fm_context_create(fm_context **out)
{
    if (!out)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_context_create: ctx out-pointer is NULL");
    *out = NULL;
    fm_settings settings;
    fm_status s = fm_settings_read(&settings); /* before anything is counted or allocated */
    if (s != FM_OK)
        return s;
    fm_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fm_context_create: out of host memory");
    atomic_init(&ctx->refcount, 1);
    atomic_fetch_add(&live_contexts, 1);
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->settings = settings;
    ctx->num_threads = settings.num_threads;
    if (add_builtin_backends(ctx) == -2) {
        char msg[1536];
        snprintf(msg, sizeof msg, "%s", fm_last_error());
        fm_context_release_(ctx);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_context_create: %s", msg);
    }
    fm_clear_error(); /* probes of absent devices leave no noise behind */
    if (settings.backend[0] && !names_backend(ctx, settings.backend)) {
        char built[160] = "";
        for (int i = 0, w = 0; i < ctx->nbackends && w >= 0 && (size_t)w < sizeof built; i++)
            w += snprintf(built + w, sizeof built - (size_t)w, "%s%s", i ? ", " : "",
                          ctx->backends[i].backend->name);
        const char *why = "";
        fm_cuda_module_get(&settings, &why);
        fm_context_release_(ctx);
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fm_context_create: FUSEMATH_BACKEND = '%s' names no backend "
                       "of this build; expected one of %s (or unset)%s%s", settings.backend, built,
                       why[0] ? "; the CUDA backends are absent: " : "", why);
    }
    fm_context_profile_load_default(ctx); /* FM_EXECUTION_BEST's model, when this machine was calibrated */
    *out = ctx;
    return FM_OK;
}

fm_status fm_context_register_backend(fm_context *ctx, const fm_backend *b)
{
    if (!ctx || !b || !b->name || !b->plan)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "register_backend: ctx, backend, name and plan are required");
    pthread_mutex_lock(&ctx->lock);
    int r = add_backend(ctx, b); /* (a probe's refusal leaves it registered and unavailable, with why) */
    pthread_mutex_unlock(&ctx->lock);
    if (r == -1)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "register_backend: at most %d backends", FM_MAX_BACKENDS);
    return FM_OK;
}

void fm_context_retain_(fm_context *ctx) { atomic_fetch_add(&ctx->refcount, 1); }

void fm_context_release_(fm_context *ctx)
{
    if (!ctx || atomic_fetch_sub(&ctx->refcount, 1) != 1)
        return;
    for (int i = 0; i < ctx->nbackends; i++)
        if (ctx->backends[i].backend->release && ctx->backends[i].state)
            ctx->backends[i].backend->release(ctx->backends[i].state);
    fm_wisdom_clear_(ctx);
    fm_context_profile_free_all(ctx);
    fm_context_pipeline_free(ctx);
    fm_context_copy_pool_free(ctx);
    fm_context_split_free(ctx);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx->cache.buckets);
    free(ctx);
    if (atomic_fetch_sub(&live_contexts, 1) == 1)
        fm_host_scratch_trim();
}

void fm_context_destroy(fm_context *ctx)
{
    if (!ctx)
        return;
    /* Cached plans hold the context; drop them first so the last reference can go.
     * Plans the caller still holds keep the context (and its handles) alive. */
    fm_context_clear_cache(ctx);
    fm_context_release_(ctx);
}

fm_status fm_context_set_num_threads(fm_context *ctx, int n)
{
    if (!ctx)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "set_num_threads: ctx is NULL");
    if (n > FM_MAX_THREADS)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "set_num_threads: n = %d, expected <= %d", n, FM_MAX_THREADS);
    atomic_store(&ctx->num_threads, n > 0 ? n : ctx->settings.num_threads);
    return FM_OK;
}

int fm_context_get_num_threads(const fm_context *ctx)
{
    return ctx ? atomic_load(&((fm_context *)ctx)->num_threads) : 0;
}

/* More threads than four per online core never pays for these kernels, and each one costs
 * stacks and BLAS buffers (libgomp exits the process when it cannot create them): the
 * count a plan runs with is capped there, whatever was asked. */
static int thread_cap(void)
{
    static atomic_int cap;
    int c = atomic_load(&cap);
    if (c == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        c = n > 0 && n < FM_MAX_THREADS / 4 ? 4 * (int)n : FM_MAX_THREADS;
        if (c < 16)
            c = 16;
        atomic_store(&cap, c);
    }
    return c;
}

int fm_context_threads_for(const fm_context *ctx, int requested)
{
    int n = requested > 0 ? requested : fm_context_get_num_threads(ctx);
    int cap = thread_cap();
    return n > cap ? cap : n;
}

int fm_context_backend_count(const fm_context *ctx) { return ctx ? ctx->nbackends : 0; }

fm_status fm_context_backend_info(const fm_context *ctx, int index, const char **name, fm_device_type *device,
                                  int *available, const char **why)
{
    if (!ctx)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "backend_info: ctx is NULL");
    if (index < 0 || index >= ctx->nbackends)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "backend_info: index = %d, expected 0 <= index < %d", index,
                       ctx->nbackends);
    const fm_backend_slot *s = &ctx->backends[index];
    if (name)
        *name = s->backend->name;
    if (device)
        *device = s->backend->device;
    if (available)
        *available = s->available;
    if (why)
        *why = s->why;
    return FM_OK;
}

const char *fm_op_name(fm_op op)
{
    static const char *const names[FM_OP_COUNT_] = {"matmul", "fft", "rng", "solve"};
    return ((int)op >= 0 && op < FM_OP_COUNT_) ? names[op] : "unknown";
}
