/* cublaslt_call_trace.c : an LD_PRELOAD shim that prints what each distinct cublasLtMatmul call
 * passes (algorithm bytes and config, every readable descriptor and layout attribute, workspace
 * size, pointer alignments), so that two callers launching "the same kernel" can be compared
 * field by field (written for torch._addmm_activation running fusemath's default bf16 kernel
 * 2% faster at the H200's power cap).
 *
 *   LD_PRELOAD=$PWD/build/benchmarks/cublaslt_call_trace.so python script.py 2> trace.txt
 *   (built by `make build` when the CUDA toolkit is found)
 *
 * A diagnostic for benchmarks, never linked into libfusemath. Prints each distinct call once
 * (by a hash of everything but the data pointers), at most 64 of them.
 *
 * LT_SWAP_ALGO="<16 hex words of one algo>/<16 hex words of another>" (8 words each, as printed
 * after "raw") makes every call that passes the first algorithm run the second instead: one
 * caller's exact configuration timed inside the other's call. */
#define _GNU_SOURCE
#include <cublasLt.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cublasStatus_t (*matmul_fn)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                                    cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *,
                                    const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                                    const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);

static uint64_t seen[64];
static cublasLtMatmulAlgo_t swap_from, swap_to;
static int swap_state; /* 0 not read, 1 none, 2 active */

static void read_swap(void)
{
    const char *e = getenv("LT_SWAP_ALGO");
    unsigned long long w[16];
    swap_state = 1;
    if (!e || sscanf(e, "%llx %llx %llx %llx %llx %llx %llx %llx/%llx %llx %llx %llx %llx %llx %llx %llx", &w[0],
                     &w[1], &w[2], &w[3], &w[4], &w[5], &w[6], &w[7], &w[8], &w[9], &w[10], &w[11], &w[12], &w[13],
                     &w[14], &w[15]) != 16)
        return;
    for (int i = 0; i < 8; i++)
        swap_from.data[i] = w[i], swap_to.data[i] = w[8 + i];
    swap_state = 2;
    fprintf(stderr, "LT_SWAP_ALGO active\n");
}
static int nseen;

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Appends "id=hex" for every attribute id 0..max that answers; pointer-valued attributes are
 * reported as their alignment (low 8 bits) so that two calls with different buffers compare. */
static uint64_t dump_desc(char *out, size_t cap, cublasLtMatmulDesc_t d, uint64_t h)
{
    size_t used = strlen(out);
    for (int id = 0; id < 64; id++) {
        unsigned char buf[64];
        size_t got = 0; /* the size first: a buffer of any other size is refused */
        if (cublasLtMatmulDescGetAttribute(d, (cublasLtMatmulDescAttributes_t)id, NULL, 0, &got) !=
                CUBLAS_STATUS_SUCCESS || got == 0 || got > sizeof buf ||
            cublasLtMatmulDescGetAttribute(d, (cublasLtMatmulDescAttributes_t)id, buf, got, &got) !=
                CUBLAS_STATUS_SUCCESS)
            continue;
        int is_ptr = id == CUBLASLT_MATMUL_DESC_BIAS_POINTER || id == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER ||
                     id == CUBLASLT_MATMUL_DESC_A_SCALE_POINTER || id == CUBLASLT_MATMUL_DESC_B_SCALE_POINTER ||
                     id == CUBLASLT_MATMUL_DESC_C_SCALE_POINTER || id == CUBLASLT_MATMUL_DESC_D_SCALE_POINTER ||
                     id == CUBLASLT_MATMUL_DESC_AMAX_D_POINTER;
        if (is_ptr && got == 8) {
            uint64_t v;
            memcpy(&v, buf, 8);
            v = v ? (v & 255) | 0x1000 : 0; /* alignment, and whether set */
            memcpy(buf, &v, 8);
        }
        h = mix(h, &id, sizeof id);
        h = mix(h, buf, got);
        used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, " d%d=", id);
        for (size_t i = 0; i < got && used < cap; i++)
            used += (size_t)snprintf(out + used, cap - used, "%02x", buf[i]);
    }
    return h;
}

static uint64_t dump_layout(char *out, size_t cap, const char *name, cublasLtMatrixLayout_t l, uint64_t h)
{
    size_t used = strlen(out);
    used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, " | %s", name);
    for (int id = 0; id < 16; id++) {
        unsigned char buf[16];
        size_t got = 0;
        if (cublasLtMatrixLayoutGetAttribute(l, (cublasLtMatrixLayoutAttribute_t)id, NULL, 0, &got) !=
                CUBLAS_STATUS_SUCCESS || got == 0 || got > sizeof buf ||
            cublasLtMatrixLayoutGetAttribute(l, (cublasLtMatrixLayoutAttribute_t)id, buf, got, &got) !=
                CUBLAS_STATUS_SUCCESS)
            continue;
        int64_t v = 0;
        memcpy(&v, buf, got < 8 ? got : 8);
        h = mix(h, &id, sizeof id);
        h = mix(h, &v, sizeof v);
        used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, " l%d=%lld", id, (long long)v);
    }
    return h;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_size, cudaStream_t stream)
{
    static matmul_fn real;
    if (!real)
        real = (matmul_fn)dlsym(RTLD_NEXT, "cublasLtMatmul");
    char line[4096] = "";
    uint64_t h = 1469598103934665603ull;
    h = dump_desc(line, sizeof line, desc, h);
    h = dump_layout(line, sizeof line, "A", la, h);
    h = dump_layout(line, sizeof line, "B", lb, h);
    h = dump_layout(line, sizeof line, "C", lc, h);
    h = dump_layout(line, sizeof line, "D", ld, h);
    if (algo)
        h = mix(h, algo->data, sizeof algo->data);
    h = mix(h, &ws_size, sizeof ws_size);
    int fresh = 1;
    for (int i = 0; i < nseen; i++)
        fresh &= seen[i] != h;
    if (fresh && nseen < 64) {
        seen[nseen++] = h;
        int cfg[9] = {0};
        for (int id = 0; algo && id < 9; id++) {
            size_t got = 0;
            cublasLtMatmulAlgoConfigGetAttribute(algo, (cublasLtMatmulAlgoConfigAttributes_t)id, &cfg[id],
                                                 sizeof cfg[id], &got);
        }
        fprintf(stderr, "LTCALL %016llx ws=%zu align A%lu B%lu C%lu D%lu W%lu C==D %d stream %p\n",
                (unsigned long long)h, ws_size, (unsigned long)((uintptr_t)A & 1023),
                (unsigned long)((uintptr_t)B & 1023), (unsigned long)((uintptr_t)C & 1023),
                (unsigned long)((uintptr_t)D & 1023), (unsigned long)((uintptr_t)ws & 1023), C == D, (void *)stream);
        fprintf(stderr, "  algo id %d tile %d splitk %d red %d swizzle %d custom %d stages %d inner %d cluster %d "
                "raw", cfg[0], cfg[1], cfg[2], cfg[3], cfg[4], cfg[5], cfg[6], cfg[7], cfg[8]);
        for (int i = 0; algo && i < 8; i++)
            fprintf(stderr, " %016llx", (unsigned long long)algo->data[i]);
        fprintf(stderr, "\n  %s\n", line);
    }
    if (!swap_state)
        read_swap();
    if (swap_state == 2 && algo && !memcmp(algo->data, swap_from.data, sizeof algo->data))
        algo = &swap_to;
    return real(handle, desc, alpha, A, la, B, lb, beta, C, lc, D, ld, algo, ws, ws_size, stream);
}
