/* check.h : the tiny test harness shared by tests/c/test_*.c.
 *
 * Every CHECK counts as one check; a failing one prints file:line, the condition and
 * fm_last_error() of the calling thread, and counts a failure. TEST_MAIN_RETURN()
 * returns nonzero when anything failed or when nothing was checked at all, so a test
 * can never pass vacuously. The counters are atomic so worker threads may CHECK too.
 */
#ifndef FM_TEST_CHECK_H
#define FM_TEST_CHECK_H

#include <fusemath/fusemath.h>
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static atomic_int fm_test_checks_;
static atomic_int fm_test_failures_;
static atomic_int fm_test_skips_;

/* Copy this thread's detail message before anything else can overwrite it. */
static inline void fm_test_copy_error_(char *buf, size_t size)
{
    const char *e = fm_last_error();
    snprintf(buf, size, "%s", e ? e : "(null)");
}

/* Case-insensitive substring search (strcasestr is a GNU extension). */
static inline int fm_test_contains(const char *hay, const char *needle)
{
    if (!hay || !needle) return 0;
    size_t n = strlen(needle);
    for (const char *h = hay; *h; ++h) {
        size_t i = 0;
        while (i < n && h[i] && tolower((unsigned char)h[i]) == tolower((unsigned char)needle[i])) ++i;
        if (i == n) return 1;
    }
    return n == 0;
}

/* Case-insensitive search for `word` as a whole identifier (not inside a longer one). */
static inline int fm_test_mentions_word(const char *hay, const char *word)
{
    if (!hay || !word) return 0;
    size_t n = strlen(word);
    for (const char *h = hay; *h; ++h) {
        if (h != hay && (isalnum((unsigned char)h[-1]) || h[-1] == '_')) continue;
        size_t i = 0;
        while (i < n && h[i] && tolower((unsigned char)h[i]) == tolower((unsigned char)word[i])) ++i;
        if (i == n && !(isalnum((unsigned char)h[n]) || h[n] == '_')) return 1;
    }
    return 0;
}

#define CHECK_MSG(cond, ...)                                                                   \
    do {                                                                                       \
        atomic_fetch_add(&fm_test_checks_, 1);                                                 \
        if (!(cond)) {                                                                         \
            char fm_e_[512];                                                                   \
            fm_test_copy_error_(fm_e_, sizeof fm_e_);                                          \
            atomic_fetch_add(&fm_test_failures_, 1);                                           \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n    fm_last_error: \"%s\"\n", fm_e_);                           \
        }                                                                                      \
    } while (0)

#define CHECK(cond) CHECK_MSG(cond, "%s", "")

/* expr must return FM_OK. Evaluates to nothing; use CHECK_OK_R to get the status back. */
#define CHECK_OK(expr)                                                                         \
    do {                                                                                       \
        fm_status fm_s_ = (expr);                                                              \
        atomic_fetch_add(&fm_test_checks_, 1);                                                 \
        if (fm_s_ != FM_OK) {                                                                  \
            char fm_e_[512];                                                                   \
            fm_test_copy_error_(fm_e_, sizeof fm_e_);                                          \
            atomic_fetch_add(&fm_test_failures_, 1);                                           \
            fprintf(stderr, "%s:%d: %s returned %s, expected FM_OK\n    fm_last_error: \"%s\"\n", \
                    __FILE__, __LINE__, #expr, fm_status_name(fm_s_), fm_e_);                  \
        }                                                                                      \
    } while (0)

/* expr must return `expected` (not FM_OK) and leave a non-empty detail message. */
#define CHECK_STATUS(expr, expected)                                                           \
    do {                                                                                       \
        fm_status fm_s_ = (expr);                                                              \
        char fm_e_[512];                                                                       \
        fm_test_copy_error_(fm_e_, sizeof fm_e_);                                              \
        atomic_fetch_add(&fm_test_checks_, 1);                                                 \
        if (fm_s_ != (expected) || ((expected) != FM_OK && fm_e_[0] == '\0')) {                \
            atomic_fetch_add(&fm_test_failures_, 1);                                           \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s%s\n    fm_last_error: \"%s\"\n", \
                    __FILE__, __LINE__, #expr, fm_status_name(fm_s_), fm_status_name(expected),  \
                    fm_s_ == (expected) ? " with a detail message" : "", fm_e_);               \
        }                                                                                      \
    } while (0)

/* The current detail message must contain `text` (case-insensitive). */
#define CHECK_ERROR_MENTIONS(text)                                                             \
    do {                                                                                       \
        char fm_e_[512];                                                                       \
        fm_test_copy_error_(fm_e_, sizeof fm_e_);                                              \
        atomic_fetch_add(&fm_test_checks_, 1);                                                 \
        if (!fm_test_contains(fm_e_, (text))) {                                                \
            atomic_fetch_add(&fm_test_failures_, 1);                                           \
            fprintf(stderr, "%s:%d: fm_last_error \"%s\" does not mention \"%s\"\n", __FILE__,  \
                    __LINE__, fm_e_, (text));                                                  \
        }                                                                                      \
    } while (0)

/* Print why something is skipped (never counts as a pass). */
#define SKIP(...)                                                                              \
    do {                                                                                       \
        atomic_fetch_add(&fm_test_skips_, 1);                                                  \
        printf("    SKIP: ");                                                                  \
        printf(__VA_ARGS__);                                                                   \
        printf("\n");                                                                          \
    } while (0)

/* One test function: its checks and failures counted, and failed when it checked nothing. */
static inline void fm_test_run_(const char *name, void (*fn)(void), const char *file, int line)
{
    int f0 = atomic_load(&fm_test_failures_), c0 = atomic_load(&fm_test_checks_);
    printf("[ RUN  ] %s\n", name);
    fflush(stdout);
    fm_clear_error();
    fn();
    int f = atomic_load(&fm_test_failures_) - f0;
    int c = atomic_load(&fm_test_checks_) - c0;
    if (c == 0) { /* a test that checked nothing has not passed */
        atomic_fetch_add(&fm_test_failures_, 1);
        f = 1;
        fprintf(stderr, "%s:%d: %s checked nothing\n", file, line, name);
    }
    printf("[ %s ] %s (%d checks, %d failed)\n", f ? "FAIL" : " OK ", name, c, f);
    fflush(stdout);
}

#define RUN_TEST(fn) fm_test_run_(#fn, fn, __FILE__, __LINE__)

/* Each of fns in turn, named by the comma-separated list `names` (RUN_TESTS' stringized arguments). */
static inline void fm_test_run_list_(const char *names, void (*const *fns)(void), size_t n, const char *file,
                                     int line)
{
    for (size_t i = 0; i < n; i++) {
        char name[128];
        size_t len = 0;
        while (*names == ',' || isspace((unsigned char)*names)) ++names;
        while (*names && *names != ',' && !isspace((unsigned char)*names)) {
            if (len + 1 < sizeof name) name[len++] = *names;
            ++names;
        }
        name[len] = '\0';
        fm_test_run_(name, fns[i], file, line);
    }
}

/* RUN_TEST on each argument in turn: RUN_TESTS(test_a, test_b, ...). */
#define RUN_TESTS(...)                                                                         \
    do {                                                                                       \
        static void (*const fm_fns_[])(void) = {__VA_ARGS__};                                  \
        fm_test_run_list_(#__VA_ARGS__, fm_fns_, sizeof fm_fns_ / sizeof fm_fns_[0], __FILE__, \
                          __LINE__);                                                           \
    } while (0)

/* GPU tests pass as skipped (exit 0, this very text) where no device is visible. */
#define SKIP_WITHOUT_GPU()                                                                     \
    do {                                                                                       \
        if (fm_cuda_device_count() == 0) {                                                     \
            printf("skipped: no GPU\n");                                                       \
            return 0;                                                                          \
        }                                                                                      \
    } while (0)

/* The tests' context, or exit 1 from main() with the reason: nothing could be checked without it. */
#define CREATE_CONTEXT_OR_FAIL(ctxp)                                                           \
    do {                                                                                       \
        if (fm_context_create(ctxp) != FM_OK) {                                                \
            fprintf(stderr, "no context: %s\n", fm_last_error());                              \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

/* The main() of a GPU test: skipped without a device; the test functions run in a row, sharing
 * *ctxp (created before, destroyed after) unless ctxp is NULL. */
#define GPU_TEST_MAIN(ctxp, ...)                                                               \
    int main(void)                                                                             \
    {                                                                                          \
        fm_context **fm_ctxp_ = (ctxp);                                                        \
        SKIP_WITHOUT_GPU();                                                                    \
        if (fm_ctxp_)                                                                          \
            CREATE_CONTEXT_OR_FAIL(fm_ctxp_);                                                  \
        RUN_TESTS(__VA_ARGS__);                                                                \
        if (fm_ctxp_)                                                                          \
            fm_context_destroy(*fm_ctxp_);                                                     \
        TEST_MAIN_RETURN();                                                                    \
    }

/* The main() of a test this build cannot run (e.g. no CUDA): exit 0 with "skipped: <why>". */
#define TEST_MAIN_SKIPPED(why)                                                                 \
    int main(void)                                                                             \
    {                                                                                          \
        (void)fm_test_checks_, (void)fm_test_failures_, (void)fm_test_skips_;                  \
        printf("skipped: %s\n", why);                                                          \
        return 0;                                                                              \
    }

#define TEST_MAIN_RETURN()                                                                     \
    do {                                                                                       \
        int fm_f_ = atomic_load(&fm_test_failures_), fm_c_ = atomic_load(&fm_test_checks_);    \
        printf("%s: %d checks, %d failures, %d skipped\n", __FILE__, fm_c_, fm_f_,              \
               atomic_load(&fm_test_skips_));                                                  \
        if (fm_c_ == 0) printf("%s: nothing was checked\n", __FILE__);                         \
        return (fm_f_ != 0 || fm_c_ == 0) ? 1 : 0;                                             \
    } while (0)

#endif
