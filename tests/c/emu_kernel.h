/* emu_kernel.h : a generated CUDA kernel run on the host (test_fft_kernel.c, test_rng_kernel.c):
 * the test's prelude (what the kernel needs of CUDA, emulated), the kernel's source and the test's
 * driver are compiled by the host C++ compiler into a shared object and loaded. */
#ifndef FM_TEST_EMU_KERNEL_H
#define FM_TEST_EMU_KERNEL_H

#include "check.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* prelude + src + driver built as dir/stem.so (c++ with the extra flags) and loaded; its
 * fm_emu_launch into *launch. The handle, or NULL after a failed check. The files are removed. */
static inline void *emu_compile_load(const char *dir, const char *stem, const char *flags, const char *prelude,
                                     const char *src, const char *driver, void (**launch)(void))
{
    char cpp[128], so[128], cmd[512];
    snprintf(cpp, sizeof cpp, "%s/%s.cpp", dir, stem);
    snprintf(so, sizeof so, "%s/%s.so", dir, stem);
    FILE *f = fopen(cpp, "w");
    if (f) {
        fputs(prelude, f), fputs(src, f), fputs(driver, f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "c++ -std=c++17 -O1 %s -w -shared -fPIC -o %s %s -lpthread", flags, so, cpp);
    int rc = f ? system(cmd) : -1;
    CHECK_MSG(rc == 0, "host compile of the generated kernel failed: %s", cmd);
    void *h = rc == 0 ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
    /* through uintptr_t: ISO C has no cast from an object pointer to a function pointer */
    *launch = h ? (void (*)(void))(uintptr_t)dlsym(h, "fm_emu_launch") : NULL;
    CHECK_MSG(h && *launch, "dlopen %s: %s", so, dlerror());
    unlink(cpp), unlink(so);
    return h;
}

#endif
