/* hide_cuda_audit.c : an LD_AUDIT library that makes the CUDA libraries (libcuda, libcudart, libcublas*,
 * libcufft, libnvrtc, ...) impossible to find, whatever the search path or ld.so.cache holds:
 * the process then runs as on a machine without driver and toolkit (tests/CMakeLists.txt, .ci/run). */
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <string.h>

unsigned int la_version(unsigned int version) { return version < LAV_CURRENT ? version : LAV_CURRENT; }

char *la_objsearch(const char *name, uintptr_t *cookie, unsigned int flag)
{
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    static const char *const hidden[] = {"libcuda.", "libcudart", "libcublas", "libcufft", "libcurand",
                                         "libcusolver", "libcusparse", "libnvrtc", "libnvJitLink"};
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
        if (strncmp(base, hidden[i], strlen(hidden[i])) == 0)
            return NULL; /* not searched: "cannot open shared object file" */
    return (char *)name;
}
