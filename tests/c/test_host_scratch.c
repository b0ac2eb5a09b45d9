/* test_host_scratch.c : the host scratch cache (core/src/host_scratch.c): alignment, reuse of
 * freed large buffers, no reuse of a buffer too large for a request, small buffers straight
 * from malloc, the byte budget, trim, and threads taking and returning buffers at once (every
 * thread writes its own pattern over its whole buffer and checks it: two threads never hold
 * one buffer). */
#include "check.h"
#include "internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define MiB ((size_t)1 << 20)

static void test_alignment_and_reuse(void)
{
    fm_host_scratch_trim();
    void *a = fm_host_scratch_alloc(3 * MiB);
    CHECK(a && (uintptr_t)a % 64 == 0);
    memset(a, 1, 3 * MiB);
    fm_host_scratch_free(a);
    void *b = fm_host_scratch_alloc(3 * MiB - 100); /* fits the kept buffer */
    CHECK_MSG(b == a, "a freed 3 MiB buffer is handed out again (%p vs %p)", b, a);
    fm_host_scratch_free(b);
    void *c = fm_host_scratch_alloc(MiB); /* the kept 3 MiB is more than twice this: not reused */
    CHECK(c && c != a && (uintptr_t)c % 64 == 0);
    void *d = fm_host_scratch_alloc(3 * MiB); /* still kept for a request of its size */
    CHECK(d == a);
    fm_host_scratch_free(c);
    fm_host_scratch_free(d);
    void *e = fm_host_scratch_alloc(8 * MiB); /* larger than anything kept: a new one */
    CHECK(e && e != a && e != c);
    memset(e, 2, 8 * MiB);
    fm_host_scratch_free(e);
    fm_host_scratch_trim();
    fm_host_scratch_free(NULL);
}

static void test_small_and_zero(void)
{
    void *z = fm_host_scratch_alloc(0);
    CHECK(z && (uintptr_t)z % 64 == 0);
    fm_host_scratch_free(z);
    void *s = fm_host_scratch_alloc(1000);
    CHECK(s && (uintptr_t)s % 64 == 0);
    memset(s, 3, 1000);
    fm_host_scratch_free(s);
    CHECK(fm_host_scratch_alloc(SIZE_MAX - 8) == NULL); /* overflow: NULL, not a crash */
}

static void test_budget(void)
{
    fm_host_scratch_trim();
    /* 40 buffers of 32 MiB returned: the cache keeps what its slots and budget allow and frees
     * the rest (ASan's leak check at exit sees any buffer lost on the way) */
    void *p[40];
    for (int i = 0; i < 40; i++) {
        p[i] = fm_host_scratch_alloc(32 * MiB);
        CHECK(p[i] != NULL);
    }
    for (int i = 0; i < 40; i++)
        fm_host_scratch_free(p[i]);
    int reused = 0;
    for (int i = 0; i < 40; i++) {
        void *q = fm_host_scratch_alloc(32 * MiB);
        for (int j = 0; j < 40; j++)
            reused += q == p[j];
        p[i] = q;
    }
    CHECK_MSG(reused >= 1 && reused <= 16, "buffers reused from the cache: %d (budget 512 MiB = 16)", reused);
    for (int i = 0; i < 40; i++)
        fm_host_scratch_free(p[i]);
    fm_host_scratch_trim();
}

static void *worker(void *arg)
{
    const unsigned char mark = (unsigned char)(uintptr_t)arg;
    for (int it = 0; it < 200; it++) {
        size_t bytes = (size_t)(1 + (it * 7 + mark) % 5) * MiB / 2;
        unsigned char *b = fm_host_scratch_alloc(bytes);
        if (!b) {
            CHECK(b != NULL);
            return NULL;
        }
        memset(b, mark, bytes);
        int ok = 1;
        for (size_t i = 0; i < bytes; i += 4093)
            ok &= b[i] == mark;
        CHECK_MSG(ok, "thread %d found another thread's bytes in its buffer", mark);
        fm_host_scratch_free(b);
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    fm_host_scratch_trim();
}

int main(void)
{
    RUN_TEST(test_alignment_and_reuse);
    RUN_TEST(test_small_and_zero);
    RUN_TEST(test_budget);
    RUN_TEST(test_threads);
    TEST_MAIN_RETURN();
}
