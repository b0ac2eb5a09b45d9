/* host_prefault.c : fault in a fresh output's pages from several threads at once. Threads that
 * each write a strided share (the column FFT path) fault on the same pages together, zeroed under
 * one lock; MADV_POPULATE_WRITE per thread on its own contiguous part (cut on 2 MiB boundaries:
 * no huge page split) spreads that. Errors are ignored: the faults then happen as before. */
#define _DEFAULT_SOURCE
#include "internal.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE ((uintptr_t)2 << 20)

void fm_host_prefault(void *base, size_t bytes, int part, int nparts)
{
#ifdef MADV_POPULATE_WRITE
    if (!base || !bytes || nparts < 1 || part < 0 || part >= nparts)
        return;
    const long sys_page = sysconf(_SC_PAGESIZE);
    const uintptr_t small = sys_page > 0 ? (uintptr_t)sys_page : 4096;
    const uintptr_t unit = bytes >= (size_t)nparts * HUGE_PAGE ? HUGE_PAGE : small;
    const uintptr_t start = (uintptr_t)base & ~(small - 1), end = (uintptr_t)base + bytes;
    const uintptr_t lo = (uintptr_t)base & ~(unit - 1);
    const size_t units = (size_t)((end - lo + unit - 1) / unit);
    uintptr_t a = lo + (uintptr_t)(units * (size_t)part / (size_t)nparts) * unit;
    uintptr_t b = lo + (uintptr_t)(units * (size_t)(part + 1) / (size_t)nparts) * unit;
    a = a < start ? start : a; /* never below the buffer's first page */
    b = b > end ? (end + small - 1) & ~(small - 1) : b;
    if (b > a)
        (void)madvise((void *)a, b - a, MADV_POPULATE_WRITE);
#else
    (void)base, (void)bytes, (void)part, (void)nparts;
#endif
}
