/* status.c : the status table's names and messages, the thread-local detail
 * message, versions and aligned allocation. */
#define _GNU_SOURCE
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned fm_version_number(void) { return FM_VERSION_NUMBER; }

#define FM_STR2(x) #x
#define FM_STR(x) FM_STR2(x)
const char *fm_version_string(void)
{
    return FM_STR(FM_VERSION_MAJOR) "." FM_STR(FM_VERSION_MINOR) "." FM_STR(FM_VERSION_PATCH);
}

const char *fm_status_name(fm_status s)
{
    switch (s) {
#define FM_X_NAME(name, value, message) \
    case name:                          \
        return #name;
        FM_STATUS_TABLE(FM_X_NAME)
#undef FM_X_NAME
    default:
        return "FM_UNKNOWN_STATUS";
    }
}

const char *fm_status_string(fm_status s)
{
    switch (s) {
#define FM_X_MSG(name, value, message) \
    case name:                         \
        return message;
        FM_STATUS_TABLE(FM_X_MSG)
#undef FM_X_MSG
    default:
        return "unknown status code";
    }
}

/* One buffer per thread: messages never race between threads. */
static _Thread_local char tls_error[512];

static _Thread_local int tls_slots[2] = {-1, -1};

const char *fm_last_error(void) { return tls_error; }

void fm_clear_error(void)
{
    tls_error[0] = '\0';
    tls_slots[0] = tls_slots[1] = -1;
}

void fm_fail_slots(int slot, int other)
{
    tls_slots[0] = slot;
    tls_slots[1] = other;
}

fm_status fm_about_slot(fm_status s, int slot)
{
    fm_fail_slots(slot, -1);
    return s;
}

int fm_last_error_slots(int *other)
{
    if (other)
        *other = tls_slots[1];
    return tls_slots[0];
}

fm_status fm_fail(fm_status s, const char *fmt, ...)
{
    /* Format into a temporary first: fmt's arguments may point into tls_error. */
    char tmp[sizeof tls_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(tls_error, tmp, sizeof tmp);
    tls_slots[0] = tls_slots[1] = -1;
    return s;
}

void *fm_malloc_aligned(size_t bytes, size_t align)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = align;
    if (posix_memalign(&p, align, bytes) != 0)
        return NULL;
    return p;
}

void fm_free_aligned(void *p) { free(p); }
