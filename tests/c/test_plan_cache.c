/* test_plan_cache.c : the plan cache's byte cap (FUSEMATH_CACHE_MAX_MB, fm_context_set_cache_max_bytes),
 * plan footprints, clear_cache, and the FUSEMATH_LOG sink (fm_context_set_log_sink). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "check.h"

#include <stdint.h>
#include <stdlib.h>

/* One stateless c2c f64 FFT of length n on the CPU (plans through the cache). */
static fm_status fft_of_length(fm_context *ctx, int64_t n, double *buf)
{
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    fm_tensor in, out;
    fm_status s = fm_tensor_init(&in, buf, cpu, FM_C128, 1, &n, NULL);
    if (s == FM_OK)
        s = fm_tensor_init(&out, buf + 2 * n, cpu, FM_C128, 1, &n, NULL);
    fm_fft_options o;
    fm_fft_options_init(&o);
    return s == FM_OK ? fm_fft(ctx, &in, &out, NULL, NULL, &o, NULL) : s;
}

static void test_footprint_and_byte_cap(double *buf)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    CHECK(fm_context_cache_max_bytes(ctx) == 256 << 20); /* the documented default */
    CHECK_OK(fft_of_length(ctx, 1 << 16, buf));
    CHECK(fm_context_cache_size(ctx) == 1);
    /* FFTW's plan of 2^16 points holds at least its n/2 twiddle factors (16 bytes each) */
    CHECK_MSG(fm_context_cache_bytes(ctx) >= 8 * (1 << 16), "%lld bytes", (long long)fm_context_cache_bytes(ctx));

    /* A cap below what is cached evicts at once, all but the newest; a plan larger than the cap
     * stays, alone (as the header says). */
    CHECK_OK(fft_of_length(ctx, 1 << 14, buf));
    CHECK(fm_context_cache_size(ctx) == 2);
    CHECK_OK(fm_context_set_cache_max_bytes(ctx, 4096));
    CHECK(fm_context_cache_max_bytes(ctx) == 4096);
    CHECK(fm_context_cache_size(ctx) == 1 && fm_context_cache_bytes(ctx) > 4096);
    CHECK_OK(fft_of_length(ctx, 1 << 16, buf));
    CHECK_OK(fft_of_length(ctx, 1 << 15, buf));
    CHECK(fm_context_cache_size(ctx) == 1 && fm_context_cache_bytes(ctx) > 4096);

    /* Many lengths under a 1 MiB cap: the bytes never pass it, the oldest plans go first. */
    const int64_t cap = 1 << 20;
    CHECK_OK(fm_context_set_cache_max_bytes(ctx, cap));
    int over = 0;
    for (int64_t n = 1000; n < 1400; n++) {
        CHECK_OK(fft_of_length(ctx, n, buf));
        over += fm_context_cache_bytes(ctx) > cap;
    }
    CHECK(over == 0);
    const int kept = fm_context_cache_size(ctx);
    CHECK_MSG(kept > 0 && kept < 400, "%d plans kept", kept);
    CHECK_OK(fft_of_length(ctx, 1399, buf)); /* the newest is still cached: no new entry */
    CHECK(fm_context_cache_size(ctx) == kept);

    fm_context_clear_cache(ctx);
    CHECK(fm_context_cache_size(ctx) == 0 && fm_context_cache_bytes(ctx) == 0);
    CHECK_STATUS(fm_context_set_cache_max_bytes(ctx, -1), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("max_bytes");
    CHECK_STATUS(fm_context_set_cache_max_bytes(NULL, 1), FM_ERR_INVALID_ARGUMENT);
    fm_context_destroy(ctx);
}

static void test_env_cap(double *buf)
{
    static const char *const bad[] = {"abc", "-1", "12MB", "99999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("FUSEMATH_CACHE_MAX_MB", bad[i], 1);
        fm_context *ctx = NULL;
        CHECK_STATUS(fm_context_create(&ctx), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("FUSEMATH_CACHE_MAX_MB");
        CHECK(ctx == NULL);
    }
    setenv("FUSEMATH_CACHE_MAX_MB", "3", 1);
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    CHECK(fm_context_cache_max_bytes(ctx) == 3 << 20);
    fm_context_destroy(ctx);
    setenv("FUSEMATH_CACHE_MAX_MB", "0", 1); /* only the newest plan */
    CHECK_OK(fm_context_create(&ctx));
    CHECK_OK(fft_of_length(ctx, 64, buf));
    CHECK_OK(fft_of_length(ctx, 96, buf));
    CHECK(fm_context_cache_size(ctx) == 1);
    fm_context_destroy(ctx);
    unsetenv("FUSEMATH_CACHE_MAX_MB");
}

typedef struct sink_record {
    int lines, chosen;
} sink_record;

static void count_lines(const char *line, void *user)
{
    sink_record *r = user;
    r->lines++;
    r->chosen += strstr(line, "(chosen)") != NULL && strncmp(line, "fusemath[plan]", 14) != 0;
}

static void test_log_sink(double *buf)
{
    for (int on = 0; on < 2; on++) {
        if (on)
            setenv("FUSEMATH_LOG", "plan", 1);
        else
            unsetenv("FUSEMATH_LOG");
        fm_context *ctx = NULL;
        CHECK_OK(fm_context_create(&ctx));
        sink_record r = {0, 0};
        CHECK_OK(fm_context_set_log_sink(ctx, count_lines, &r));
        CHECK_OK(fft_of_length(ctx, 96, buf));
        CHECK_MSG(on ? r.chosen >= 1 : r.lines == 0, "FUSEMATH_LOG %s: %d lines, %d chosen", on ? "plan" : "unset",
                  r.lines, r.chosen);
        fm_context_destroy(ctx);
    }
    unsetenv("FUSEMATH_LOG");
    CHECK_STATUS(fm_context_set_log_sink(NULL, count_lines, NULL), FM_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    double *buf = calloc(4 << 16, sizeof *buf); /* in and out of up to 2^16 complex points */
    if (!buf)
        return 1;
    test_footprint_and_byte_cap(buf);
    test_env_cap(buf);
    test_log_sink(buf);
    free(buf);
    TEST_MAIN_RETURN();
}
