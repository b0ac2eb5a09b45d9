/* test_dispatch.c : FM_EXECUTION_BEST and the machine profile (core/src/dispatch.c, profile.c,
 * calibrate.c) on the cpu: the choice and its describe(), results equal to a plain call's, the bad
 * inputs, the log-log prediction against its formula, calibration (stopped, then whole), the profile
 * file read back by a new context, a corrupt or foreign file ignored with a note, the profile in a
 * wisdom file, and FUSEMATH_EXECUTION. Each context gets a fresh cache directory. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "mmref.h"
#include "context.h"
#include "operation.h"
#include "profile.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];

static fm_context *fresh_context(const char *sub)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, sub);
    setenv("FUSEMATH_CACHE_DIR", dir, 1);
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    return ctx;
}

/* d = a @ b for 64x64 f32 under execution ex; its describe() into desc. */
static float a[64 * 64], b[64 * 64]; /* fill_operands(), before any thread */

static void fill_operands(void)
{
    for (int i = 0; i < 64 * 64; i++)
        a[i] = (float)((i * 7) % 13) - 6, b[i] = (float)((i * 5) % 11) - 5;
}

static fm_status matmul_with(fm_context *ctx, int ex, int device_id, float *d, char *desc, size_t n)
{
    const int64_t s[2] = {64, 64};
    fm_tensor ta, tb, td;
    fm_tensor_init(&ta, a, fm_test_cpu, FM_F32, 2, s, NULL);
    fm_tensor_init(&tb, b, fm_test_cpu, FM_F32, 2, s, NULL);
    fm_tensor_init(&td, d, fm_test_cpu, FM_F32, 2, s, NULL);
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.execution = ex;
    o.device_id = device_id;
    fm_plan *plan = NULL;
    fm_status st = fm_matmul_plan(ctx, &ta, &tb, NULL, NULL, &td, NULL, &o, &plan);
    if (st == FM_OK) {
        snprintf(desc, n, "%s", fm_plan_describe(plan));
        void *ptrs[FM_MATMUL_NSLOTS] = {a, b, NULL, NULL, d};
        st = fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL);
    }
    fm_plan_release(plan);
    return st;
}

static void test_best_on_cpu_data(void)
{
    fm_context *ctx = fresh_context("best");
    static float d_best[64 * 64], d_auto[64 * 64];
    char desc[640], desc_auto[640];
    CHECK_OK(matmul_with(ctx, FM_EXECUTION_BEST, 0, d_best, desc, sizeof desc));
    CHECK_OK(matmul_with(ctx, FM_EXECUTION_AUTO, 0, d_auto, desc_auto, sizeof desc_auto));
    CHECK(memcmp(d_best, d_auto, sizeof d_best) == 0);
    /* a 64^3 product stays on the cpu under the built-in model whatever GPU there is */
    CHECK_MSG(strstr(desc, " best=cpu predicted cpu ") && strstr(desc, "model=builtin"), "%s", desc);
    CHECK_MSG(!strstr(desc_auto, "best="), "%s", desc_auto);
    if (fm_cuda_device_count() == 0)
        CHECK_MSG(strstr(desc, "cuda n/a"), "%s", desc);
    fm_context_destroy(ctx);
}

static void test_bad_input(void)
{
    fm_context *ctx = fresh_context("bad");
    static float d[64 * 64];
    char desc[640];
    CHECK_STATUS(matmul_with(ctx, 4, 0, d, desc, sizeof desc), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("execution = 4");
    CHECK_STATUS(matmul_with(ctx, FM_EXECUTION_BEST, 7, d, desc, sizeof desc), FM_ERR_UNAVAILABLE);
    CHECK_ERROR_MENTIONS("device_id = 7");
    char text[64];
    CHECK_STATUS(fm_context_profile_text(ctx, NULL, 10), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_context_calibrate(NULL, 1, NULL, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text)); /* truncated, terminated */
    CHECK(strlen(text) == sizeof text - 1 && strncmp(text, "profile: builtin", 16) == 0);
    fm_context_destroy(ctx);
}

static uint64_t fnv(const char *s, size_t n);

/* text (a valid profile) with `line` added before its checksum, the checksum made right again */
static fm_status parse_with(const char *text, const char *line, fm_profile *out)
{
    static char body[16384], whole[16500];
    const char *sum = strstr(text, "\nchecksum ");
    snprintf(body, sizeof body, "%.*s\n%s\n", (int)(sum - text), text, line);
    snprintf(whole, sizeof whole, "%schecksum %016" PRIx64 "\n", body, fnv(body, strlen(body)));
    const fm_status s = fm_profile_parse(whole, "test", out);
    fm_clear_error();
    return s;
}

/* The new lines' ranges and forms: out of range or trailing words are malformed, not half read */
static void check_malformed_lines(const char *text)
{
    static fm_profile back;
    if (!text)
        return;
    static const char *good[] = {"touch 5e9", "concurrency rng 1 0.02", "curve fft.2 c64 cuda 1 10 1e-3"};
    static const char *bad[] = {"touch 0", "touch -1", "touch nan", "touch inf", "touch 5e9 7", "touch",
                                "concurrency matmul 0 0.5", "concurrency matmul 0.5 1.5", "concurrency matmul nan 1",
                                "concurrency matmul 0.5 0.5 9", "concurrency fft.1 0.5 0.5", "concurrency nothing 1 1",
                                "concurrency matmul 0.5", "curve fft.0 c64 cpu 1 10 1", "curve fft.16 c64 cpu 1 10 1",
                                "curve fft. c64 cpu 1 10 1", "curve fft.x c64 cpu 1 10 1", "curve fft.+1 c64 cpu 1 10 1",
                                "curve fft.1 c64 cpu 1 10 -1", "curve fft.1 c64 cpu 2 10 1 5 1",
                                "threads 4 junk", "copy h2d 1e-5 1e10 junk"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK_MSG(parse_with(text, good[i], &back) == FM_OK, "'%s' refused", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(parse_with(text, bad[i], &back) == FM_ERR_INVALID_ARGUMENT, "'%s' accepted", bad[i]);
}

/* The prediction is log-log between measured points, the last point's rate above, the first
 * point's time below; cpu times scale with the threads measured / used. */
static void test_prediction(void)
{
    fm_profile pf;
    memset(&pf, 0, sizeof pf);
    pf.threads = 4;
    pf.ncurves = 1;
    fm_rate_curve *c = &pf.curves[0];
    *c = (fm_rate_curve){.op = FM_OP_FFT, .dtype = FM_C64, .device = FM_DEVICE_CPU, .n = 2};
    c->work[0] = 1e6, c->seconds[0] = 1e-3, c->work[1] = 1e9, c->seconds[1] = 2e-1;
    const double mid = exp(log(1e-3) + (log(3e7) - log(1e6)) / (log(1e9) - log(1e6)) * (log(2e-1) - log(1e-3)));
    CHECK(fabs(fm_profile_predict(&pf, 4, FM_OP_FFT, FM_C64, 0, 3e7) - mid) < 1e-12 * mid);
    CHECK(fabs(fm_profile_predict(&pf, 4, FM_OP_FFT, FM_C64, 0, 4e9) - 0.8) < 1e-12);
    CHECK(fabs(fm_profile_predict(&pf, 4, FM_OP_FFT, FM_C64, 0, 10) - 1e-3) < 1e-15);
    CHECK(fabs(fm_profile_predict(&pf, 8, FM_OP_FFT, FM_C64, 0, 4e9) - 0.4) < 1e-12);
    /* another dtype of the op: the same curve, not the built-in model */
    const double other = fm_profile_predict(&pf, 4, FM_OP_FFT, FM_C128, 0, 1e9);
    CHECK(other > 2e-1 && other < 1.0);
    /* an operation's second curve (the FFT's over one axis) when the profile has it; without it, the first */
    const int one_axis = FM_PROFILE_CURVE(FM_OP_FFT, 1);
    CHECK(fabs(fm_profile_predict(&pf, 4, one_axis, FM_C64, 0, 4e9) - 0.8) < 1e-12);
    pf.ncurves = 2;
    pf.curves[1] = (fm_rate_curve){.op = one_axis, .dtype = FM_C64, .device = FM_DEVICE_CPU, .n = 1};
    pf.curves[1].work[0] = 1e9, pf.curves[1].seconds[0] = 5e-2;
    CHECK(fabs(fm_profile_predict(&pf, 4, one_axis, FM_C64, 0, 4e9) - 0.2) < 1e-12);
    CHECK(fabs(fm_profile_predict(&pf, 4, FM_OP_FFT, FM_C64, 0, 4e9) - 0.8) < 1e-12);
    /* ... and the FFT's hook picks it for a transform over one axis only */
    const fm_operation *fop = fm_operation_for(FM_OP_FFT);
    fm_tensor x;
    const int64_t xs[2] = {8, 64};
    fm_tensor_init(&x, NULL, (fm_device){FM_DEVICE_CPU, 0}, FM_C64, 2, xs, NULL);
    const fm_tensor *fts[FM_FFT_NSLOTS] = {&x, &x, NULL, NULL};
    fm_fft_options fo;
    fm_fft_options_init(&fo);
    fo.naxes = 1, fo.axes[0] = 1;
    CHECK(fop->curve && fop->curve(fts, &fo) == 1);
    fo.naxes = 2, fo.axes[0] = 0, fo.axes[1] = 1;
    CHECK(fop->curve(fts, &fo) == 0);
    pf.ncurves = 1;
    /* copies: latency + bytes / rate */
    pf.copy_latency[0] = 1e-5, pf.copy_rate[0] = 1e10;
    CHECK(fabs(fm_profile_copy_time(&pf, 0, 1e9) - (1e-5 + 0.1)) < 1e-12);
    CHECK(fm_profile_copy_time(&pf, 0, 0) == 0);
    /* a fresh result's first touch: nothing without a measured rate */
    CHECK(fm_profile_touch_time(&pf, 1e9) == 0);
    pf.touch_rate = 1e10;
    CHECK(fabs(fm_profile_touch_time(&pf, 1e9) - 0.1) < 1e-12 && fm_profile_touch_time(&pf, 0) == 0);
    /* the text form keeps the touch rate, the concurrency and the second curve */
    pf.ncurves = 2;
    pf.concurrency[FM_OP_FFT][0] = 0.66, pf.concurrency[FM_OP_FFT][1] = 0.82;
    pf.threads = 4, pf.copy_rate[1] = 5e9, pf.copy_latency[1] = 1e-5;
    fm_profile_fingerprint(pf.fingerprint, sizeof pf.fingerprint);
    char *text = NULL;
    CHECK_OK(fm_profile_format(&pf, &text));
    static fm_profile back;
    CHECK_OK(text ? fm_profile_parse(text, "test", &back) : FM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(back.touch_rate == 1e10 && back.concurrency[FM_OP_FFT][0] == 0.66 &&
                  back.concurrency[FM_OP_FFT][1] == 0.82 && back.ncurves == 2 &&
                  back.curves[1].op == FM_PROFILE_CURVE(FM_OP_FFT, 1) && strstr(text, "curve fft.1 c64 cpu 1 ") &&
                  back.concurrency[FM_OP_MATMUL][0] == 0,
              "%s", text ? text : "");
    check_malformed_lines(text);
    free(text);
    pf.ncurves = 1;
}

static int stop_at_once(void *user, double fraction, const char *what)
{
    (void)fraction, (void)what;
    ++*(int *)user;
    return 1;
}

static int count_calls(void *user, double fraction, const char *what)
{
    CHECK(fraction > 0 && fraction <= 1 && what && what[0]);
    ++*(int *)user;
    return 0;
}

static void read_file(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(buf, 1, n - 1, f) : 0;
    buf[got] = '\0';
    if (f)
        fclose(f);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0);
    if (f)
        fclose(f);
}

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

/* text with its fingerprint line replaced by fp and the checksum made right again */
static void foreign_copy(const char *text, const char *fp_line, char *out, size_t n)
{
    const char *fp = strstr(text, "\nfingerprint "), *eol = strchr(fp + 1, '\n');
    const char *sum = strstr(text, "\nchecksum ");
    char body[12288];
    snprintf(body, sizeof body, "%.*s\nfingerprint %s%.*s\n", (int)(fp - text), text, fp_line, (int)(sum - eol), eol);
    snprintf(out, n, "%schecksum %016" PRIx64 "\n", body, fnv(body, strlen(body)));
}

/* this machine's fingerprint with another library version */
static void other_version(const char *text, char *fp_line, size_t n)
{
    const char *fp = strstr(text, "\nfingerprint fusemath ") + 22;
    snprintf(fp_line, n, "fusemath 0.0.9%.*s", (int)(strchr(fp, '\n') - strchr(fp, ' ')), strchr(fp, ' '));
}

static void test_calibrate_and_files(void)
{
    fm_context *ctx = fresh_context("cal");
    int calls = 0;
    static char text[16384], file[16384], path[400], bad_copy[16384];
    CHECK_STATUS(fm_context_calibrate(ctx, 1, stop_at_once, &calls), FM_ERR_CANCELLED);
    CHECK(calls == 1);
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text));
    CHECK_MSG(strncmp(text, "profile: builtin", 16) == 0, "%s", text);
    calls = 0;
    CHECK_OK(fm_context_calibrate(ctx, 1, count_calls, &calls));
    CHECK(calls > 5);
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text));
    CHECK_MSG(strstr(text, "profile: calibrated ") && strstr(text, "curve matmul f32 cpu 3 ") &&
                  strstr(text, "curve fft c64 cpu 3 ") && strstr(text, "curve fft.1 c64 cpu 3 ") &&
                  strstr(text, "curve rng f32 cpu 3 ") &&
                  strstr(text, "curve solve f64 cpu 4 "), "%s", text);
    /* stopped again now that a profile and its file exist: both stay as they were */
    char before[16384], after[16384];
    snprintf(path, sizeof path, "%s/cal/machine-profile", g_dir);
    read_file(path, file, sizeof file);
    CHECK_OK(fm_context_profile_text(ctx, before, sizeof before));
    calls = 0;
    CHECK_STATUS(fm_context_calibrate(ctx, 1, stop_at_once, &calls), FM_ERR_CANCELLED);
    CHECK_OK(fm_context_profile_text(ctx, after, sizeof after));
    read_file(path, bad_copy, sizeof bad_copy);
    CHECK(strcmp(before, after) == 0 && strcmp(file, bad_copy) == 0);
    /* a calibrated best call says so, without "model=builtin" */
    static float d[64 * 64];
    char desc[640];
    CHECK_OK(matmul_with(ctx, FM_EXECUTION_BEST, 0, d, desc, sizeof desc));
    CHECK_MSG(strstr(desc, " best=cpu predicted cpu ") && !strstr(desc, "builtin"), "%s", desc);
    /* the wisdom file carries it */
    snprintf(path, sizeof path, "%s/w.txt", g_dir);
    CHECK_OK(fm_context_wisdom_save(ctx, path));
    fm_context_destroy(ctx);

    ctx = fresh_context("cal"); /* same cache dir: the file is read at creation */
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text));
    CHECK_MSG(strstr(text, "loaded from ") && strstr(text, "/cal/machine-profile"), "%s", text);
    fm_context_destroy(ctx);

    snprintf(path, sizeof path, "%s/cal/machine-profile", g_dir);
    read_file(path, file, sizeof file);
    static char bad[20000];
    snprintf(bad, sizeof bad, "%s", file);
    bad[strlen(bad) / 2] ^= 1; /* one bit: the checksum catches it */
    write_file(path, bad);
    ctx = fresh_context("cal");
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text));
    CHECK_MSG(strncmp(text, "profile: builtin", 16) == 0 && strstr(text, "corrupt"), "%s", text);
    fm_context_destroy(ctx);

    snprintf(bad, sizeof bad, "%sjunk after the checksum\n", file); /* the checksum line must be the last */
    write_file(path, bad);
    ctx = fresh_context("cal");
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text));
    CHECK_MSG(strncmp(text, "profile: builtin", 16) == 0 && strstr(text, "corrupt"), "%s", text);
    fm_context_destroy(ctx);

    char fp_line[300];
    other_version(file, fp_line, sizeof fp_line); /* this machine, another version */
    foreign_copy(file, fp_line, bad, sizeof bad);
    write_file(path, bad);
    ctx = fresh_context("cal");
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text));
    CHECK_MSG(strncmp(text, "profile: builtin", 16) == 0 && strstr(text, "note: ") && strstr(text, "0.0.9"), "%s",
              text);
    fm_context_destroy(ctx);

    foreign_copy(file, "fusemath 0.0.0 cpu 'elsewhere' x1 cuda 0 ''", bad, sizeof bad);
    write_file(path, bad);
    ctx = fresh_context("cal");
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text));
    CHECK_MSG(strncmp(text, "profile: builtin", 16) == 0 && strstr(text, "another machine"), "%s", text);
    /* the wisdom file's profile (this machine's) loads over it */
    snprintf(path, sizeof path, "%s/w.txt", g_dir);
    CHECK_OK(fm_context_wisdom_load(ctx, path));
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text));
    CHECK_MSG(strstr(text, "loaded from ") && strstr(text, "w.txt"), "%s", text);
    /* a foreign profile while one is in use: that one stays, and the note says why */
    snprintf(path, sizeof path, "%s/cal/machine-profile", g_dir); /* (holds the foreign one now) */
    static char wfile[24000];
    char wpath[400];
    read_file(path, bad, sizeof bad);
    snprintf(wfile, sizeof wfile, "fusemath-wisdom 3\nblob profile %zu\n%s\n", strlen(bad), bad);
    snprintf(wpath, sizeof wpath, "%s/foreign.txt", g_dir);
    write_file(wpath, wfile);
    CHECK_OK(fm_context_wisdom_load(ctx, wpath));
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text));
    CHECK_MSG(strstr(text, "loaded from ") && strstr(text, "\nnote: ") && strstr(text, "another machine") &&
                  strstr(text, "the profile in use stays"), "%s", text);
    CHECK_OK(fm_context_profile_clear(ctx));
    CHECK_OK(fm_context_profile_text(ctx, text, sizeof text));
    CHECK(strncmp(text, "profile: builtin", 16) == 0);
    fm_context_destroy(ctx);
}

/* Profiles swapped (wisdom loads, clears) while four threads plan best problems: every result
 * right, nothing freed under a planner (ASan runs this in CI). */
typedef struct swap_arg {
    fm_context *ctx;
    atomic_int *stop;
    int bad;
} swap_arg;

static void *plan_best_loop(void *p)
{
    swap_arg *a = p;
    static _Thread_local float d[64 * 64];
    char desc[640];
    for (int i = 0; !atomic_load(a->stop) && i < 100000; i++) {
        if (matmul_with(a->ctx, FM_EXECUTION_BEST, 0, d, desc, sizeof desc) != FM_OK || !strstr(desc, " best=cpu "))
            a->bad++;
        float want = 0; /* d[0] = row 0 of a . column 0 of b, as matmul_with fills them */
        for (int k = 0; k < 64; k++)
            want += ((float)((k * 7) % 13) - 6) * ((float)((k * 64 * 5) % 11) - 5);
        a->bad += d[0] != want;
    }
    return NULL;
}

static void test_profile_swaps_under_planners(void)
{
    fm_context *ctx = fresh_context("swap");
    char path[400];
    CHECK_OK(fm_context_calibrate(ctx, 1, NULL, NULL));
    snprintf(path, sizeof path, "%s/swap.txt", g_dir);
    CHECK_OK(fm_context_wisdom_save(ctx, path));
    atomic_int stop = 0;
    swap_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (swap_arg){ctx, &stop, 0};
        CHECK(pthread_create(&th[i], NULL, plan_best_loop, &args[i]) == 0);
    }
    for (int r = 0; r < 40; r++) {
        CHECK_OK(fm_context_profile_clear(ctx));
        CHECK_OK(fm_context_wisdom_load(ctx, path));
    }
    atomic_store(&stop, 1);
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += args[i].bad;
    }
    CHECK_MSG(bad == 0, "%d wrong plans or results under profile swaps", bad);
    fm_context_destroy(ctx);
}

static void test_environment(void)
{
    setenv("FUSEMATH_EXECUTION", "bogus", 1);
    fm_context *ctx = NULL;
    CHECK_STATUS(fm_context_create(&ctx), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("FUSEMATH_EXECUTION");
    setenv("FUSEMATH_EXECUTION", "best", 1);
    ctx = fresh_context("env");
    static float d[64 * 64];
    char desc[640];
    CHECK_OK(matmul_with(ctx, FM_EXECUTION_AUTO, 0, d, desc, sizeof desc));
    CHECK_MSG(strstr(desc, " best=cpu "), "%s", desc);
    CHECK_OK(matmul_with(ctx, FM_EXECUTION_CPU, 0, d, desc, sizeof desc)); /* explicit stays explicit */
    CHECK_MSG(!strstr(desc, "best="), "%s", desc);
    fm_context_destroy(ctx);
    unsetenv("FUSEMATH_EXECUTION");
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/fm_test_dispatch.%ld", (long)getpid());
    fill_operands();
    RUN_TEST(test_best_on_cpu_data);
    RUN_TEST(test_bad_input);
    RUN_TEST(test_prediction);
    RUN_TEST(test_calibrate_and_files);
    RUN_TEST(test_profile_swaps_under_planners);
    RUN_TEST(test_environment);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    TEST_MAIN_RETURN();
}
