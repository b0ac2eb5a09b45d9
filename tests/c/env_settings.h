/* env_settings.h : the environment's settings, read as a context reads them (the NVRTC disk
 * cache's directory, the register cap), for tests that call library functions taking them. */
#ifndef FM_TEST_ENV_SETTINGS_H
#define FM_TEST_ENV_SETTINGS_H

#include "internal.h"

#include <pthread.h>

static fm_settings g_settings_;
static pthread_once_t g_settings_once_ = PTHREAD_ONCE_INIT;
static void read_settings_(void) { (void)fm_settings_read(&g_settings_); }
static inline const fm_settings *env_settings(void)
{
    pthread_once(&g_settings_once_, read_settings_);
    return &g_settings_;
}

#endif
