/* test_blas_provider.c : which OpenBLAS the CPU backends call (backends/cpu/blas_provider.c).
 * The rule runs with a linked core given, so the case this exists for (the linked OpenBLAS on its
 * generic Prescott kernels, a better one offered) is tested on any machine: the offered library
 * is a copy of the linked one's file under another path, a second instance that reports this
 * CPU's real core. Each chosen table computes a product checked against a direct sum. */
#define _GNU_SOURCE
#include "cpu/blas_provider.h"
#include "check.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char linked_path[1024], first_copy[1024], copy_path[1024];

/* The linked OpenBLAS's file (where cblas_sgemm lives) and a copy of it in /tmp named by `which`
 * (each offer that loads a copy keeps it loaded, so every case that must load one gets its own). */
static int make_copy(char *copy_path, size_t size, int which)
{
    Dl_info where;
    if (!dladdr((void *)cblas_sgemm, &where) || !where.dli_fname)
        return -1;
    snprintf(linked_path, sizeof linked_path, "%s", where.dli_fname);
    snprintf(copy_path, size, "/tmp/fm_test_openblas_%d_%d.so", (int)getpid(), which);
    FILE *in = fopen(linked_path, "rb"), *out = fopen(copy_path, "wb");
    int ok = in && out;
    char buf[1 << 16];
    for (size_t n; ok && (n = fread(buf, 1, sizeof buf, in)) > 0;)
        ok = fwrite(buf, 1, n, out) == n;
    if (in)
        fclose(in);
    if (out)
        ok = fclose(out) == 0 && ok;
    return ok ? 0 : -1;
}

/* fm_blas_lib.sgemm on a 3x4 @ 4x2 product against a direct sum. */
static int chosen_sgemm_is_right(void)
{
    float a[12], b[8], d[6];
    for (int i = 0; i < 12; i++)
        a[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 8; i++)
        b[i] = (float)(i % 3) + 0.5f;
    fm_blas_lib.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 3, 2, 4, 1.0f, a, 4, b, 2, 0.0f, d, 2);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            float ref = 0.0f;
            for (int k = 0; k < 4; k++)
                ref += a[i * 4 + k] * b[k * 2 + j];
            if (d[i * 2 + j] != ref)
                return 0;
        }
    return 1;
}

static void test_rule(void)
{
    if (make_copy(first_copy, sizeof first_copy, 1) != 0 || make_copy(copy_path, sizeof copy_path, 2) != 0) {
        CHECK_MSG(0, "could not copy the linked OpenBLAS (%s) to /tmp", linked_path);
        return;
    }
    const int avx2 = __builtin_cpu_supports("avx2");
    /* The copies are the linked library: where it does not know this CPU (0.3.21 on a Sapphire
     * Rapids), they run generic kernels too and are refused for that, whatever the rule is told. */
    const char *real_core = openblas_get_corename();
    const int copies_generic = avx2 && real_core && strcmp(real_core, "Prescott") == 0;
    /* a linked library that knows the CPU stays when the offered one is no newer (a copy: the same) */
    CHECK_OK(fm_blas_offer(first_copy));
    CHECK_OK(fm_blas_select_for("", "Cooperlake"));
    CHECK_MSG(fm_blas_lib.handle == NULL &&
                  strstr(fm_blas_lib.what, copies_generic ? "generic kernels too" : "not newer") != NULL,
              "%s", fm_blas_lib.what);
    CHECK(chosen_sgemm_is_right());
    /* generic kernels on an AVX2 machine: the offered second instance is taken */
    CHECK_OK(fm_blas_offer(copy_path));
    CHECK_OK(fm_blas_select_for("auto", "Prescott"));
    if (copies_generic) {
        CHECK_MSG(fm_blas_lib.handle == NULL && strstr(fm_blas_lib.what, "generic kernels too"), "%s",
                  fm_blas_lib.what);
    } else if (avx2) {
        CHECK_MSG(strcmp(fm_blas_lib.path, copy_path) == 0 && strstr(fm_blas_lib.what, "offered"), "%s",
                  fm_blas_lib.what);
        CHECK(strcmp(fm_blas_lib.core, "Prescott") != 0);
        CHECK(chosen_sgemm_is_right());
        fm_blas_lib.set_num_threads(1);
    } else {
        CHECK(fm_blas_lib.handle == NULL); /* no AVX2: Prescott is this CPU's core, nothing to fix */
    }
    /* 'system' keeps the linked one and says why it is slow */
    CHECK_OK(fm_blas_select_for("system", "Prescott"));
    CHECK(fm_blas_lib.handle == NULL);
    CHECK(!avx2 || strstr(fm_blas_lib.what, "generic kernels") != NULL);
    /* an offer of the linked library's own file is the linked instance: shared, so not taken */
    CHECK_OK(fm_blas_offer(linked_path));
    CHECK_OK(fm_blas_select_for("", "Prescott"));
    CHECK(fm_blas_lib.handle == NULL);
    CHECK_MSG(!avx2 || strstr(fm_blas_lib.what, "another user") != NULL, "%s", fm_blas_lib.what);
    /* a path that is no library, or no OpenBLAS, is refused naming FUSEMATH_BLAS */
    CHECK_STATUS(fm_blas_select_for("/nonexistent/libopenblas.so", "Cooperlake"), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_blas_select_for("libm.so.6", "Cooperlake"), FM_ERR_INVALID_ARGUMENT);
    /* an explicit path is used as given, whatever the linked core */
    CHECK_OK(fm_blas_select_for(copy_path, "Cooperlake"));
    CHECK(strcmp(fm_blas_lib.path, copy_path) == 0 && strstr(fm_blas_lib.what, "FUSEMATH_BLAS") != NULL);
    CHECK(chosen_sgemm_is_right());
    remove(first_copy);
    remove(copy_path);
}

int main(void)
{
    RUN_TEST(test_rule);
    TEST_MAIN_RETURN();
}
