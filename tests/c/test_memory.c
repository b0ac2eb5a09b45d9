/* test_memory.c : the public memory API (core/src/memory.c): fm_memory_alloc / fm_memory_free /
 * fm_memory_copy. Runs everywhere: the cpu cases always; with a GPU a cpu -> cuda -> cpu round
 * trip (small and large enough for the pinned staging path), without one that cuda requests are
 * reported unavailable with a clear message. */
#include "check.h"

#include <fusemath/fusemath.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const fm_device cpu = {FM_DEVICE_CPU, 0};

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
}

static void test_cpu_round_trip(void)
{
    const size_t n = 100003; /* odd size */
    void *a = NULL, *b = NULL;
    CHECK_OK(fm_memory_alloc(cpu, n, &a));
    CHECK_OK(fm_memory_alloc(cpu, n, &b));
    CHECK(a && b);
    if (!a || !b)
        return;
    CHECK_MSG((uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0, "cpu memory must be 64-byte aligned: %p %p", a, b);
    unsigned char *host = malloc(n);
    CHECK(host != NULL);
    if (host) {
        fill(host, n, 17);
        CHECK_OK(fm_memory_copy(a, cpu, host, cpu, n));
        CHECK_OK(fm_memory_copy(b, cpu, a, cpu, n));
        memset(host, 0, n);
        CHECK_OK(fm_memory_copy(host, cpu, b, cpu, n));
        unsigned char *ref = malloc(n);
        if (ref) {
            fill(ref, n, 17);
            CHECK_MSG(memcmp(host, ref, n) == 0, "cpu round trip changed the data");
            free(ref);
        }
        /* overlapping ranges within one buffer behave like memmove */
        unsigned char *ua = a;
        fill(ua, 64, 3);
        unsigned char expect[64];
        memcpy(expect, ua, 64);
        CHECK_OK(fm_memory_copy(ua + 8, cpu, ua, cpu, 56));
        CHECK(memcmp(ua + 8, expect, 56) == 0);
        free(host);
    }
    fm_memory_free(cpu, a);
    fm_memory_free(cpu, b);
}

static void test_zero_and_null(void)
{
    void *p = (void *)&p; /* non-NULL: must be overwritten */
    CHECK_OK(fm_memory_alloc(cpu, 0, &p));
    CHECK(p == NULL);
    fm_memory_free(cpu, NULL); /* no-op */
    CHECK_OK(fm_memory_copy(NULL, cpu, NULL, cpu, 0)); /* nothing to copy */

    CHECK_STATUS(fm_memory_alloc(cpu, 16, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("memory:");
    CHECK_ERROR_MENTIONS("ptr");

    char buf[16] = {0};
    CHECK_STATUS(fm_memory_copy(NULL, cpu, buf, cpu, sizeof buf), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("dst");
    CHECK_STATUS(fm_memory_copy(buf, cpu, NULL, cpu, sizeof buf), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("src");
}

static void test_bad_device_type(void)
{
    void *p = (void *)&p;
    const fm_device bad = {42, 0}, autodev = {FM_DEVICE_AUTO, 0}, managed = {FM_DEVICE_CUDA_MANAGED, 0};
    CHECK_STATUS(fm_memory_alloc(bad, 64, &p), FM_ERR_DEVICE);
    CHECK(p == NULL);
    CHECK_ERROR_MENTIONS("memory:");
    CHECK_ERROR_MENTIONS("42");
    CHECK_STATUS(fm_memory_alloc(autodev, 64, &p), FM_ERR_DEVICE);
    CHECK_STATUS(fm_memory_alloc(managed, 64, &p), FM_ERR_DEVICE);
    char a[8] = {0}, b[8] = {0};
    CHECK_STATUS(fm_memory_copy(a, bad, b, cpu, sizeof a), FM_ERR_DEVICE);
    CHECK_ERROR_MENTIONS("dst_device");
    CHECK_STATUS(fm_memory_copy(a, cpu, b, bad, sizeof a), FM_ERR_DEVICE);
    CHECK_ERROR_MENTIONS("src_device");
    fm_clear_error();
    fm_memory_free(bad, a); /* not freed (never from fm_memory_alloc there), only a message */
    CHECK_ERROR_MENTIONS("memory:");
    const fm_device neg = {FM_DEVICE_CUDA, -1};
    CHECK_STATUS(fm_memory_alloc(neg, 64, &p), FM_ERR_DEVICE);
}

static void test_cuda_unavailable(void)
{
    int count = fm_cuda_device_count();
    void *p = (void *)&p;
    char host[32] = {0};
    if (count == 0) {
        const fm_device cuda0 = {FM_DEVICE_CUDA, 0};
        CHECK_STATUS(fm_memory_alloc(cuda0, 1024, &p), FM_ERR_UNAVAILABLE);
        CHECK(p == NULL);
        CHECK_ERROR_MENTIONS("memory: cuda:0 requested but no CUDA device is available");
        CHECK_STATUS(fm_memory_copy(host, cpu, host + 16, cuda0, 16), FM_ERR_UNAVAILABLE);
        CHECK_ERROR_MENTIONS("no CUDA device is available");
        CHECK_STATUS(fm_memory_copy(host + 16, cuda0, host, cpu, 16), FM_ERR_UNAVAILABLE);
        fm_memory_free(cuda0, host); /* never touches the pointer */
        CHECK(1);
    } else {
        const fm_device missing = {FM_DEVICE_CUDA, count};
        CHECK_STATUS(fm_memory_alloc(missing, 1024, &p), FM_ERR_UNAVAILABLE);
        CHECK(p == NULL);
        CHECK_ERROR_MENTIONS("requested but only");
    }
}

static void cuda_round_trip(size_t n)
{
    const fm_device cuda0 = {FM_DEVICE_CUDA, 0};
    unsigned char *host = malloc(n), *back = malloc(n), *ref = malloc(n);
    void *d1 = NULL, *d2 = NULL;
    CHECK(host && back && ref);
    if (host && back && ref) {
        fill(host, n, (unsigned)n);
        memcpy(ref, host, n);
        memset(back, 0xA5, n);
        CHECK_OK(fm_memory_alloc(cuda0, n, &d1));
        CHECK_OK(fm_memory_alloc(cuda0, n, &d2));
        CHECK(d1 && d2);
        CHECK_MSG((uintptr_t)d1 % 256 == 0, "cuda memory must be 256-byte aligned: %p", d1);
        if (d1 && d2) {
            CHECK_OK(fm_memory_copy(d1, cuda0, host, cpu, n));
            memset(host, 0, n); /* the copy is complete: the source may be reused at once */
            CHECK_OK(fm_memory_copy(d2, cuda0, d1, cuda0, n));
            CHECK_OK(fm_memory_copy(back, cpu, d2, cuda0, n));
            CHECK_MSG(memcmp(back, ref, n) == 0, "cpu -> cuda -> cuda -> cpu round trip of %zu bytes changed the data",
                      n);
        }
    }
    fm_memory_free(cuda0, d1);
    fm_memory_free(cuda0, d2);
    free(host), free(back), free(ref);
}

static void test_cuda_round_trip(void)
{
    if (fm_cuda_device_count() == 0) {
        SKIP("no CUDA device: cpu -> cuda -> cpu round trip not run");
        CHECK(1);
        return;
    }
    cuda_round_trip(4099);             /* small: plain cudaMemcpyAsync */
    cuda_round_trip((size_t)9 << 20);  /* large: pinned staging where it pays */
    void *p = (void *)&p;
    CHECK_OK(fm_memory_alloc((fm_device){FM_DEVICE_CUDA, 0}, 0, &p));
    CHECK(p == NULL);
    fm_memory_free((fm_device){FM_DEVICE_CUDA, 0}, NULL);
}

int main(void)
{
    RUN_TEST(test_cpu_round_trip);
    RUN_TEST(test_zero_and_null);
    RUN_TEST(test_bad_device_type);
    RUN_TEST(test_cuda_unavailable);
    RUN_TEST(test_cuda_round_trip);
    TEST_MAIN_RETURN();
}
