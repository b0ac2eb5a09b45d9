/* test_host_scratch.c : the host scratch cache (core/src/host_scratch.c): alignment, reuse of
 * freed large buffers (a thread's own first), no reuse of a buffer too large for a request, small buffers straight
 * from malloc, the byte budget, trim, and threads taking and returning buffers at once (every
 * thread writes its own pattern over its whole buffer and checks it: two threads never hold
 * one buffer). Also fm_host_prefault (core/src/host_prefault.c): content never changes, bytes
 * beside the range untouched, fresh pages become resident, bad arguments are ignored. */
#define _DEFAULT_SOURCE
#include "check.h"
#include "internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* Thread B returns a 1 MiB buffer and then thread A (the test's own) a 1.5 MiB one; B's is the
 * smaller fit for A's next request of 1 MiB, but A gets its own back. */
static void *return_one(void *arg)
{
    fm_host_scratch_free(arg);
    return NULL;
}

static void test_own_buffer_first(void)
{
    fm_host_scratch_trim();
    void *theirs = fm_host_scratch_alloc(MiB), *mine = fm_host_scratch_alloc(3 * MiB / 2);
    CHECK(theirs && mine);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, return_one, theirs) == 0);
    pthread_join(t, NULL);
    fm_host_scratch_free(mine);
    void *got = fm_host_scratch_alloc(MiB);
    CHECK_MSG(got == mine, "a thread's next request takes the buffer it returned (%p), not another thread's (%p): "
              "got %p", mine, theirs, got);
    void *second = fm_host_scratch_alloc(MiB); /* none of its own left: the other thread's */
    CHECK_MSG(second == theirs, "then any buffer that fits: got %p, expected %p", second, theirs);
    fm_host_scratch_free(got);
    fm_host_scratch_free(second);
    fm_host_scratch_trim();
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

static void test_prefault_keeps_content(void)
{
    /* odd size and offset: parts are cut on page (or 2 MiB) bounds that lie outside the range */
    const size_t bytes = 9 * MiB + 12345, pad = 3 * 4096;
    unsigned char *buf = malloc(bytes + 2 * pad + 777);
    CHECK(buf != NULL);
    if (!buf)
        return;
    unsigned char *p = buf + pad + 777;
    for (size_t i = 0; i < bytes + 2 * pad; i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    for (int nparts = 1; nparts <= 17; nparts += 4)
        for (int part = 0; part < nparts; part++)
            fm_host_prefault(p, bytes, part, nparts);
    int same = 1;
    for (size_t i = 0; i < bytes + 2 * pad; i++)
        same &= buf[i] == (unsigned char)(i * 131 + 7);
    CHECK_MSG(same, "prefault changed bytes in or around the range");
    /* arguments that mean nothing to do */
    fm_host_prefault(NULL, bytes, 0, 1);
    fm_host_prefault(p, 0, 0, 1);
    fm_host_prefault(p, bytes, 3, 3);
    fm_host_prefault(p, bytes, -1, 3);
    fm_host_prefault(p, bytes, 0, 0);
    free(buf);
}

static void *prefault_part(void *arg)
{
    void **a = arg;
    fm_host_prefault(a[0], 32 * MiB, (int)(uintptr_t)a[1], 8);
    return NULL;
}

static void test_prefault_populates(void)
{
    const size_t bytes = 32 * MiB, page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    if (m == MAP_FAILED)
        return;
    pthread_t t[8];
    void *args[8][2];
    for (int i = 0; i < 8; i++) {
        args[i][0] = m, args[i][1] = (void *)(uintptr_t)i;
        pthread_create(&t[i], NULL, prefault_part, args[i]);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    unsigned char vec[32 * MiB / 4096];
    size_t npages = bytes / page, resident = 0;
    int zero = 1;
    if (npages <= sizeof vec && mincore(m, bytes, vec) == 0) {
        for (size_t i = 0; i < npages; i++)
            resident += vec[i] & 1;
        for (size_t i = 0; i < bytes; i += 997)
            zero &= m[i] == 0;
        CHECK_MSG(zero, "fresh pages read back non-zero after prefault");
#ifdef MADV_POPULATE_WRITE
        if (madvise(m, page, MADV_POPULATE_WRITE) == 0)
            CHECK_MSG(resident == npages, "%zu of %zu fresh pages resident after prefault", resident, npages);
        else
            printf("  (this kernel has no MADV_POPULATE_WRITE: residency not checked)\n");
#endif
    }
    munmap(m, bytes);
}

/* Only the pages the range lies on: an unaligned range inside a larger mapping, cut into parts
 * on 2 MiB bounds that lie outside it; pages before and after it stay unmapped. */
static void test_prefault_stays_in_range(void)
{
    const size_t map = 16 * MiB, page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *m = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    if (m == MAP_FAILED)
        return;
    (void)madvise(m, map, MADV_NOHUGEPAGE); /* page-exact residency */
#ifdef MADV_POPULATE_WRITE
    if (madvise(m + map - page, page, MADV_POPULATE_WRITE) != 0) {
        printf("  (this kernel has no MADV_POPULATE_WRITE: not checked)\n");
        munmap(m, map);
        return;
    }
#endif
    const size_t lo = 3 * MiB + 100, hi = 11 * MiB - 200;
    for (int part = 0; part < 3; part++)
        fm_host_prefault(m + lo, hi - lo, part, 3);
    static unsigned char vec[16 * MiB / 4096];
    const size_t npages = map / page, first = lo / page, last = (hi + page - 1) / page;
    size_t outside = 0, inside = 0;
    if (npages <= sizeof vec && mincore(m, map, vec) == 0) {
        for (size_t i = 0; i < npages - 1; i++) { /* the last page was populated above */
            if (i >= first && i < last)
                inside += vec[i] & 1;
            else
                outside += vec[i] & 1;
        }
    }
    CHECK_MSG(inside == last - first, "%zu of %zu pages of the range resident", inside, last - first);
    CHECK_MSG(outside == 0, "%zu pages outside the range resident", outside);
    munmap(m, map);
}

int main(void)
{
    RUN_TEST(test_prefault_keeps_content);
    RUN_TEST(test_prefault_stays_in_range);
    RUN_TEST(test_prefault_populates);
    RUN_TEST(test_alignment_and_reuse);
    RUN_TEST(test_small_and_zero);
    RUN_TEST(test_budget);
    RUN_TEST(test_own_buffer_first);
    RUN_TEST(test_threads);
    TEST_MAIN_RETURN();
}
