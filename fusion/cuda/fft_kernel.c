/* fft_kernel.c : a batched 1-D c2c FFT with its chains as one generated kernel (see fft_kernel.h).
 *
 * The transform (Stockham, self-sorting): with Ns the product of the radices already applied,
 * a stage of radix R takes butterfly j (0 <= j < n/R) from x[j + r n/R], r < R, multiplies
 * element r by w^(r k n/(Ns R)) where k = j mod Ns and w = exp(-+2 pi i / n) (a table per stage,
 * see emit_twiddles), does a length-R
 * DFT in registers and writes element r to y[(j - k) R + k + r Ns]. After the last stage y is
 * the transform in natural order. Each thread holds 8 values (E = min(8, n)): one radix-8
 * butterfly, or 8/R butterflies of a smaller radix, j = t + u n/E. The first stage reads
 * straight from global memory, the last writes straight to it, both coalesced (consecutive
 * threads, consecutive j); the stages in between exchange through shared memory, padded by
 * one element in 32 against bank conflicts. */
#define _POSIX_C_SOURCE 200809L

#include "fft_kernel.h"
#include "nvrtc_cache.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMEM_LIMIT 36000 /* bytes of shared memory per block we allow ourselves (static limit: 48 KiB) */
#define BLOCK_TARGET 256 /* threads per block we aim for when rows are short */
#define WIDE_SMEM_MAX (140 * 1024) /* dynamic shared memory per block we allow lanes / transposed stores */

struct fm_fft_kernel {
    fm_nvrtc_module mod;
    cudaKernel_t kernel;
    unsigned long long rows;
    unsigned grid, bx, by; /* launch shape */
    size_t dyn_smem;       /* dynamic shared memory bytes (0: the static array) */
    char radices[32];
};

static size_t elem_size(fm_dtype t) { return t == FM_C128 ? 16 : 8; }
static int64_t padded(int64_t n) { return n + n / 32; }

int64_t fm_fft_kernel_max_n(fm_dtype t)
{
    if (t != FM_C64 && t != FM_C128)
        return 0;
    int64_t n = 2;
    while ((size_t)padded(2 * n) * elem_size(t) <= SMEM_LIMIT)
        n *= 2;
    return n;
}

static int log2_of(int64_t n)
{
    int m = 0;
    while (((int64_t)1 << m) < n)
        m++;
    return m;
}

/* Radices in the order applied. 8 values per thread: radix 8, after one radix-2 or radix-4
 * stage where needed. 16 values per thread: as few stages as radices up to 16 allow, the
 * bits spread evenly, the larger radices first (1024 = 16 x 8 x 8: three stages, not four). */
static int radix_plan(int64_t n, unsigned e, int r[16])
{
    const int m = log2_of(n);
    int k = 0;
    if (e == 16) {
        const int ns = (m + 3) / 4;
        for (int i = 0; i < ns; i++)
            r[k++] = 1 << (m / ns + (i < m % ns ? 1 : 0));
        return k;
    }
    if (m % 3 == 1)
        r[k++] = 2;
    else if (m % 3 == 2)
        r[k++] = 4;
    for (int i = 0; i < m / 3; i++)
        r[k++] = 8;
    return k;
}

static int64_t rows_of(const fm_fft_kernel_spec *s)
{
    int64_t rows = 1;
    for (int i = 0; i < s->nbatch; i++)
        rows *= s->batch_ext[i];
    return rows;
}

/* Rows mode (the transformed axis contiguous): a row's threads are threadIdx.x, rows are
 * threadIdx.y. Lanes mode (the transformed axis strided, the innermost batch axis contiguous in
 * and out): neighbouring rows are neighbouring elements in memory, so the rows ("lanes") are
 * threadIdx.x and a row's threads threadIdx.y: a warp's loads then cover whole 32-byte
 * sectors of several lanes instead of one element per sector. */
static int lanes_mode(const fm_fft_kernel_spec *s)
{
    return (s->in_stride != 1 || s->out_stride != 1) && s->nbatch > 0 && s->batch_in[s->nbatch - 1] == 1 &&
           s->batch_out[s->nbatch - 1] == 1;
}

/* Transposed store: rows read contiguously (rows mode) but written along a stride, with the
 * rows neighbours in the output (the four-step's last step, X[k1 + n1 k2]). The last stage
 * then goes through shared memory and the block stores lane-fastest, so that a warp writes
 * whole sectors of several rows instead of one element per sector. */
static int transposed_store(const fm_fft_kernel_spec *s)
{
    return !lanes_mode(s) && s->in_stride == 1 && s->out_stride != 1 && s->nbatch > 0 &&
           s->batch_out[s->nbatch - 1] == 1;
}

int fm_fft_kernel_coalesced(const fm_fft_kernel_spec *s)
{
    return (s->in_stride == 1 && s->out_stride == 1) || lanes_mode(s) || transposed_store(s);
}

/* The launch geometry and shared-memory layout of a spec. */
typedef struct geom {
    unsigned e;   /* values per thread: 8 (16 where 8 would need more than 1024 threads) */
    unsigned tpr; /* threads per row, n / e */
    unsigned rpb; /* rows per block */
    int64_t rs;   /* one row's slice of shared memory, elements */
    size_t smem;  /* bytes of shared memory per block */
    int dynamic;  /* smem exceeds the static limit: dynamic shared memory */
    unsigned minb; /* blocks per SM the registers must allow (__launch_bounds__), 0: ptxas's choice */
    int nst;      /* stages */
    int rad[16];  /* their radices, in the order applied */
} geom;

/* regcap: fm_settings.fft_kernel_regcap (0: no register cap; -1, the default, or any other: the cap) */
static void geometry(const fm_fft_kernel_spec *s, int regcap, geom *g)
{
    const int wide = lanes_mode(s) || transposed_store(s);
    const size_t es = elem_size(s->dtype);
    /* rows that share 32-byte sectors: at least this many of them in a block, and twice as many
     * (64 contiguous bytes per row segment) where the threads allow: measured on the H200, 4
     * complex64 lanes of 1024 points moved 2.4 TB/s, 16 lanes of 256 points 3.1 TB/s */
    const unsigned want = wide ? (unsigned)(32 / es) : 1, pref = 2 * want;
    /* 16 values per thread where that saves a stage (each stage is a round trip through shared
     * memory and a barrier), or where 8 would need more than 1024 threads for the lanes. It
     * doubles the shared memory per thread (fewer threads resident): measured on the H200 with
     * complex64 rows, 1024 points 4 -> 3 stages ran 4% faster, 256 points 3 -> 2 stages 15%
     * slower; lanes of 256 points (the 2^24 three-step) 5% faster. So rows take it from four
     * stages up, complex64 only (complex128 rows unmeasured), lanes wherever it saves one. */
    g->e = s->n < 8 ? (unsigned)s->n : 8;
    const int st8 = (log2_of(s->n) + 2) / 3, st16 = (log2_of(s->n) + 3) / 4;
    if (s->n >= 16 && st16 < st8 && (wide || (st8 >= 4 && s->dtype == FM_C64)))
        g->e = 16;
    g->tpr = (unsigned)(s->n / g->e);
    if (g->tpr * want > 1024)
        g->e = 16, g->tpr = (unsigned)(s->n / 16);
    g->nst = radix_plan(s->n, g->e, g->rad);
    unsigned r;
    if (wide) {
        r = g->tpr >= 512 ? 1 : 512 / g->tpr;
        if (r > 32)
            r = 32;
        if (r < pref && g->tpr * pref <= 1024)
            r = pref;
        if (r < want)
            r = want;
    } else {
        r = g->tpr >= BLOCK_TARGET ? 1 : BLOCK_TARGET / g->tpr;
    }
    /* one row's slice: padded against bank conflicts within a row; with several lanes in a warp
     * also by up to 31 more (see below) */
    const size_t row_max = (size_t)(padded(s->n) + (wide ? 32 : 0)) * es;
    size_t limit = SMEM_LIMIT;
    if (wide && r * row_max > limit) /* dynamic shared memory: at most ~140 KB (4096 complex64 x 4) */
        limit = r * row_max <= WIDE_SMEM_MAX ? r * row_max : WIDE_SMEM_MAX;
    while (r > 1 && r * row_max > limit)
        r /= 2;
    const int64_t rows = rows_of(s);
    /* no block of mostly idle rows; only a few row counts change the source this way (the
     * count itself is a kernel argument, so other batch sizes reuse the compiled kernel) */
    while (r > 1 && (int64_t)(r / 2) >= rows)
        r /= 2;
    g->rpb = r;
    g->rs = padded(s->n);
    if (wide) {
        /* shared memory serves 128 bytes per wavefront: 16 complex64 or 8 complex128. Threads
         * go lane-fastest, each lane over consecutive elements, so lanes that start unit / rpb
         * elements apart (mod unit) fill one wavefront without a conflict. */
        const int64_t unit = 128 / (int64_t)es, target = r >= unit ? 1 : unit / r;
        while (g->rs % unit != target % unit)
            g->rs++;
    }
    /* complex64 with 16 values per thread: at most 64 registers, so that 1024 threads stay
     * resident on an SM; left to itself ptxas took 80 (512-768 threads per SM); capped, ptxas
     * spills 16-32 bytes per thread there (to L1). Measured on the
     * H200 (paired A/B): 2^20 x 64 1.105 -> 1.02 x plain cuFFT, 4096 x 4096 1.09 -> 1.01, 2^24 x 4
     * 1.08 -> 0.97. With 8 values ptxas needs ~48 and the cap made it take 63 (256-point rows
     * 1.00 -> 1.06: five blocks per SM became four), so those keep ptxas's choice; so do blocks
     * of 1024 threads (an explicit minimum of one block changes ptxas's choices: 80 -> 121) and
     * complex128 (64 registers spill 1.2 KB there). FUSEMATH_FFT_KERNEL_REGCAP=0: no cap (A/B). */
    const unsigned threads = g->tpr * r;
    g->minb = s->dtype == FM_C64 && g->e == 16 && threads <= 512 && regcap != 0 ? 1024 / threads : 0;
    if (g->minb > 32) /* an SM holds 32 blocks at most (ptxas ignores more); a block of fewer than 32
                       * threads still takes a warp's registers, so 32 keeps the 64-register cap */
        g->minb = 32;
    const int staged = g->nst > 1 || transposed_store(s);
    g->smem = staged ? (size_t)r * (size_t)g->rs * es : 0;
    g->dynamic = g->smem > SMEM_LIMIT;
}

fm_status fm_fft_kernel_check(const fm_fft_kernel_spec *s)
{
    if (!s || (s->dtype != FM_C64 && s->dtype != FM_C128))
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fft kernel: complex64 / complex128 only");
    const int64_t max = fm_fft_kernel_max_n(s->dtype);
    if (s->n < 2 || s->n > max || (s->n & (s->n - 1)) != 0)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fft kernel: length %lld; it takes a power of two from 2 to %lld for %s",
                       (long long)s->n, (long long)max, fm_dtype_name(s->dtype));
    if (s->in_stride <= 0 || s->out_stride <= 0)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fft kernel: non-positive stride along the transformed axis");
    if (s->nbatch < 0 || s->nbatch > FM_MAX_NDIM)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fft kernel: bad batch rank");
    for (int i = 0; i < s->nbatch; i++)
        if (s->batch_ext[i] < 1 || s->batch_in[i] < 0 || s->batch_out[i] < 0)
            return fm_fail(FM_ERR_NOT_APPLICABLE, "fft kernel: negative batch stride");
    if (s->tw_n < 0 || s->tw_n > ((int64_t)1 << 24) || (s->tw_n > 0 && s->tw_rows < 1))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft kernel: bad four-step twiddle (tw_n %lld, tw_rows %lld)",
                       (long long)s->tw_n, (long long)s->tw_rows);
    if (s->prolog && s->epilog && (s->prolog->ops & FM_FFT_OP_CALLBACK) && (s->epilog->ops & FM_FFT_OP_CALLBACK))
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fft kernel: user functions in both the prolog and the epilog "
                       "(compiled as separate cuFFT callbacks instead)");
    if ((s->prolog && (s->prolog->store || s->prolog->need_base || s->prolog->data != s->dtype)) ||
        (s->epilog && (!s->epilog->store || s->epilog->need_base || s->epilog->data != s->dtype)))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft kernel: invalid chain spec");
    geom g;
    geometry(s, -1, &g);
    const int64_t blocks = (rows_of(s) + g.rpb - 1) / g.rpb;
    if (blocks > 2147483647)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "fft kernel: %lld rows exceed one grid", (long long)rows_of(s));
    return FM_OK;
}

/* A chain's source: in namespace ns unless it holds the user's function (which must stay at
 * global scope, as the user wrote it); the other chain is then namespaced, so the two sources'
 * own definitions never collide. */
static fm_status emit_chain(FILE *f, const fm_cufft_cb_spec *c, const char *ns, const char **qual)
{
    char *src = NULL;
    const char *sym = NULL;
    fm_status s = fm_cufft_cb_source(c, &src, &sym);
    if (s != FM_OK)
        return s == FM_ERR_NOT_SUPPORTED ? fm_fail(FM_ERR_NOT_APPLICABLE, "%s", fm_last_error()) : s;
    const int user = (c->ops & FM_FFT_OP_CALLBACK) != 0;
    if (user)
        fprintf(f, "%s\n", src), *qual = "";
    else
        fprintf(f, "namespace %s {\n%s\n}\n", ns, src), *qual = ns;
    free(src);
    return FM_OK;
}

static void emit_dfts(FILE *f, int sign)
{
    /* mul_s(a): a * (sign i) */
    if (sign < 0)
        fprintf(f, "__device__ __forceinline__ fmk_T fmk_mul_s(fmk_T a) { fmk_T r; r.x = a.y; r.y = -a.x; return r; }\n");
    else
        fprintf(f, "__device__ __forceinline__ fmk_T fmk_mul_s(fmk_T a) { fmk_T r; r.x = -a.y; r.y = a.x; return r; }\n");
    fprintf(f,
            "__device__ __forceinline__ fmk_T fmk_add(fmk_T a, fmk_T b) { fmk_T r; r.x = a.x + b.x; r.y = a.y + b.y; return r; }\n"
            "__device__ __forceinline__ fmk_T fmk_sub(fmk_T a, fmk_T b) { fmk_T r; r.x = a.x - b.x; r.y = a.y - b.y; return r; }\n"
            "__device__ __forceinline__ fmk_T fmk_cmul(fmk_T a, fmk_T b)\n"
            "{ fmk_T r; r.x = a.x * b.x - a.y * b.y; r.y = a.x * b.y + a.y * b.x; return r; }\n"
            "__device__ __forceinline__ void fmk_dft2(fmk_T &a0, fmk_T &a1) { fmk_T t = a0; a0 = fmk_add(t, a1); a1 = fmk_sub(t, a1); }\n"
            "__device__ __forceinline__ void fmk_dft4(fmk_T &a0, fmk_T &a1, fmk_T &a2, fmk_T &a3)\n{\n"
            "    fmk_T t0 = fmk_add(a0, a2), t1 = fmk_sub(a0, a2), t2 = fmk_add(a1, a3), t3 = fmk_mul_s(fmk_sub(a1, a3));\n"
            "    a0 = fmk_add(t0, t2); a2 = fmk_sub(t0, t2); a1 = fmk_add(t1, t3); a3 = fmk_sub(t1, t3);\n}\n");
    /* w8 = exp(sign 2 pi i / 8) = c (1 + sign i); w8^3 = c (-1 + sign i) */
    fprintf(f,
            "__device__ __forceinline__ fmk_T fmk_mul_w1(fmk_T a)\n"
            "{ const fmk_R c = (fmk_R)0.70710678118654752440; fmk_T r; r.x = c * (a.x %s a.y); r.y = c * (a.y %s a.x); return r; }\n"
            "__device__ __forceinline__ fmk_T fmk_mul_w3(fmk_T a)\n"
            "{ const fmk_R c = (fmk_R)0.70710678118654752440; fmk_T r; r.x = c * (-a.x %s a.y); r.y = c * (%sa.x - a.y); return r; }\n",
            sign < 0 ? "+" : "-", sign < 0 ? "-" : "+", sign < 0 ? "+" : "-", sign < 0 ? "-" : "");
    fprintf(f, "__device__ __forceinline__ void fmk_dft8(fmk_T &a0, fmk_T &a1, fmk_T &a2, fmk_T &a3, fmk_T &a4, fmk_T &a5, "
               "fmk_T &a6, fmk_T &a7)\n{\n"
               "    fmk_dft4(a0, a2, a4, a6); fmk_dft4(a1, a3, a5, a7);\n"
               "    fmk_T o1 = fmk_mul_w1(a3), o2 = fmk_mul_s(a5), o3 = fmk_mul_w3(a7);\n"
               "    fmk_T x0 = fmk_add(a0, a1), x4 = fmk_sub(a0, a1), x1 = fmk_add(a2, o1), x5 = fmk_sub(a2, o1);\n"
               "    fmk_T x2 = fmk_add(a4, o2), x6 = fmk_sub(a4, o2), x3 = fmk_add(a6, o3), x7 = fmk_sub(a6, o3);\n"
               "    a0 = x0; a1 = x1; a2 = x2; a3 = x3; a4 = x4; a5 = x5; a6 = x6; a7 = x7;\n}\n");
    /* 16 = 4 x 4: a length-4 DFT down the columns (a[j1 + 4 j2] over j2), the twiddles
     * w16^(j1 k1), a length-4 DFT along the rows, then a 4 x 4 transpose into natural order */
    fprintf(f, "__device__ __forceinline__ fmk_T fmk_mul_c(fmk_T a, fmk_R c, fmk_R s)\n"
               "{ fmk_T r; r.x = a.x * c - a.y * s; r.y = a.x * s + a.y * c; return r; }\n");
    fprintf(f, "__device__ __forceinline__ void fmk_swap(fmk_T &a, fmk_T &b) { fmk_T t = a; a = b; b = t; }\n");
    fprintf(f, "__device__ __forceinline__ void fmk_dft16(");
    for (int i = 0; i < 16; i++)
        fprintf(f, "fmk_T &a%d%s", i, i < 15 ? ", " : ")\n{\n");
    fprintf(f, "    fmk_dft4(a0, a4, a8, a12); fmk_dft4(a1, a5, a9, a13); fmk_dft4(a2, a6, a10, a14); "
               "fmk_dft4(a3, a7, a11, a15);\n");
    static const int pos[9] = {5, 9, 13, 6, 10, 14, 7, 11, 15}, ex[9] = {1, 2, 3, 2, 4, 6, 3, 6, 9};
    for (int i = 0; i < 9; i++) {
        if (ex[i] == 2)
            fprintf(f, "    a%d = fmk_mul_w1(a%d);\n", pos[i], pos[i]);
        else if (ex[i] == 4)
            fprintf(f, "    a%d = fmk_mul_s(a%d);\n", pos[i], pos[i]);
        else if (ex[i] == 6)
            fprintf(f, "    a%d = fmk_mul_w3(a%d);\n", pos[i], pos[i]);
        else {
            const double a = 2.0 * 3.14159265358979323846 * ex[i] / 16.0;
            fprintf(f, "    a%d = fmk_mul_c(a%d, (fmk_R)%.17e, (fmk_R)%.17e);\n", pos[i], pos[i], cos(a), sign * sin(a));
        }
    }
    fprintf(f, "    fmk_dft4(a0, a1, a2, a3); fmk_dft4(a4, a5, a6, a7); fmk_dft4(a8, a9, a10, a11); "
               "fmk_dft4(a12, a13, a14, a15);\n"
               "    fmk_swap(a1, a4); fmk_swap(a2, a8); fmk_swap(a3, a12); fmk_swap(a6, a9); fmk_swap(a7, a13); "
               "fmk_swap(a11, a14);\n}\n");
}

static void emit_twiddles(FILE *f, const fm_fft_kernel_spec *s, const int *rad, int nst)
{
    const int dbl = s->dtype == FM_C128;
    const double sign = s->inverse ? 1.0 : -1.0;
    int64_t total = 0, ns = rad[0];
    for (int si = 1; si < nst; si++)
        total += (rad[si] - 1) * ns, ns *= rad[si];
    fprintf(f, "__device__ const fmk_T fmk_tw[%lld] = {\n", (long long)(total > 0 ? total : 1));
    if (total == 0)
        fprintf(f, "{0, 0}");
    ns = rad[0];
    int64_t count = 0;
    for (int si = 1; si < nst; si++) {
        for (int r = 1; r < rad[si]; r++)
            for (int64_t k = 0; k < ns; k++) {
                /* (r k) / (Ns R) is exact (powers of two): the angle's only rounding is 2 pi's */
                double a = 2.0 * 3.14159265358979323846 * ((double)(r * k) / (double)(ns * rad[si]));
                double c = cos(a), sn = sign * sin(a);
                if (dbl)
                    fprintf(f, "{%.17e, %.17e},%s", c, sn, ++count % 4 == 0 ? "\n" : " ");
                else
                    fprintf(f, "{%.9ef, %.9ef},%s", (double)(float)c, (double)(float)sn, ++count % 4 == 0 ? "\n" : " ");
            }
        ns *= rad[si];
    }
    fprintf(f, "};\n");
}

/* The batch offsets of a row: its C-order multi-index over the batch axes times their strides. */
static void emit_offsets(FILE *f, const fm_fft_kernel_spec *s)
{
    fprintf(f, "__device__ __forceinline__ void fmk_offsets(unsigned long long rr, long long &bi, long long &bo)\n{\n"
               "    bi = 0; bo = 0; (void)rr;\n");
    if (s->nbatch > 0)
        fprintf(f, "    unsigned long long q;\n");
    for (int i = s->nbatch - 1; i >= 0; i--) {
        if (i > 0)
            fprintf(f, "    q = rr %% %lldull; rr /= %lldull;\n", (long long)s->batch_ext[i], (long long)s->batch_ext[i]);
        else
            fprintf(f, "    q = rr;\n");
        fprintf(f, "    bi += (long long)q * %lldLL; bo += (long long)q * %lldLL;\n", (long long)s->batch_in[i],
                (long long)s->batch_out[i]);
    }
    fprintf(f, "}\n");
}

/* Output element o of row `row` (names in the generated code) into global memory: the four-step's
 * twiddle, then the epilog or a plain store. val: an lvalue holding the value. */
static void emit_store(FILE *f, const fm_fft_kernel_spec *s, const char *eq, const char *row, const char *o,
                       const char *bo, const char *val, const char *indent)
{
    fprintf(f, "%sconst long long off = %s + (long long)%s * %lldLL;\n", indent, bo, o, (long long)s->out_stride);
    if (s->tw_n > 0) /* p / tw_n exactly representable (tw_n <= 2^24): one rounding in sincospi */
        fprintf(f, "%s{\n"
                   "%s    const unsigned long long p = ((%s %% %lldull) * %s) %% %lldull;\n"
                   "%s    fmk_R sn, cs;\n"
                   "%s    %s((fmk_R)2 * (fmk_R)p / (fmk_R)%lld, &sn, &cs);\n"
                   "%s    fmk_T w; w.x = cs; w.y = %ssn;\n"
                   "%s    %s = fmk_cmul(%s, w);\n"
                   "%s}\n",
                indent, indent, row, (long long)s->tw_rows, o, (long long)s->tw_n, indent, indent,
                s->dtype == FM_C128 ? "sincospi" : "sincospif", (long long)s->tw_n, indent, s->inverse ? "" : "-",
                indent, val, val, indent);
    if (s->epilog)
        fprintf(f, "%s%s::fm_cb_store((void *)out, (unsigned long long)off, %s, &ep, 0);\n", indent, eq, val);
    else
        fprintf(f, "%sout[off] = %s;\n", indent, val);
}

fm_status fm_fft_kernel_source(const fm_settings *settings, const fm_fft_kernel_spec *s, char **source)
{
    *source = NULL;
    fm_status st = fm_fft_kernel_check(s);
    if (st != FM_OK)
        return st;
    const int64_t n = s->n;
    geom g;
    geometry(s, settings ? settings->fft_kernel_regcap : -1, &g);
    const int nst = g.nst, *rad = g.rad;
    const unsigned e = g.e, tpr = g.tpr, rpb = g.rpb;
    const int lanes = lanes_mode(s), tstore = transposed_store(s);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft kernel: out of host memory");
    const char *pq = NULL, *eq = NULL;
    fprintf(f, "// fusemath fused FFT kernel (generated): n = %lld %s %s\n", (long long)n, fm_dtype_name(s->dtype),
            s->inverse ? "inverse" : "forward");
    if (s->prolog && (st = emit_chain(f, s->prolog, "fm_pro", &pq)) != FM_OK)
        goto fail;
    if (s->epilog && (st = emit_chain(f, s->epilog, "fm_epi", &eq)) != FM_OK)
        goto fail;
    fprintf(f, "typedef %s fmk_T;\ntypedef %s fmk_R;\n", s->dtype == FM_C128 ? "double2" : "float2",
            s->dtype == FM_C128 ? "double" : "float");
    emit_dfts(f, s->inverse ? 1 : -1);
    emit_twiddles(f, s, rad, nst);
    emit_offsets(f, s);
    fprintf(f, "#define FMK_SMI(i) ((i) + ((i) >> 5))\n");
    /* dynamic shared memory through a macro, so that a host emulation can give it storage */
    fprintf(f, "#define FMK_SMEM_ELEMS %lld\n#ifndef FMK_DYN_SHARED\n#define FMK_DYN_SHARED(name) extern __shared__ "
               "fmk_T name[]\n#endif\n", (long long)(g.smem / elem_size(s->dtype)));
    char bounds[32];
    if (g.minb)
        snprintf(bounds, sizeof bounds, "%u, %u", tpr * rpb, g.minb);
    else
        snprintf(bounds, sizeof bounds, "%u", tpr * rpb);
    fprintf(f, "extern \"C\" __global__ void __launch_bounds__(%s) fm_fft_kernel(const fmk_T *in, fmk_T *out, const void *pa, "
               "const void *ea, unsigned long long rows)\n{\n", bounds);
    fprintf(f, "    const unsigned t = threadIdx.%c, lane = threadIdx.%c;\n", lanes ? 'y' : 'x', lanes ? 'x' : 'y');
    if (g.smem) {
        if (g.dynamic)
            fprintf(f, "    FMK_DYN_SHARED(sm);\n");
        else
            fprintf(f, "    __shared__ fmk_T sm[FMK_SMEM_ELEMS];\n");
        fprintf(f, "    fmk_T *x = sm + lane * %lldu;\n", (long long)g.rs);
    }
    fprintf(f, "    const unsigned long long row = (unsigned long long)blockIdx.x * %uu + lane;\n"
               "    const bool valid = row < rows;\n"
               "    long long bi, bo;\n    fmk_offsets(row, bi, bo);\n    (void)pa; (void)ea; (void)bo;\n",
            rpb);
    if (s->prolog)
        fprintf(f, "    %s::fm_cb_params pp = {{pa, ea}, {nullptr, nullptr}};\n", pq[0] ? pq : "");
    if (s->epilog)
        fprintf(f, "    %s::fm_cb_params ep = {{pa, ea}, {nullptr, nullptr}};\n", eq[0] ? eq : "");
    fprintf(f, "    fmk_T v[%u];\n", e);
    int64_t ns = 1, tw_off = 0;
    for (int si = 0; si < nst; si++) {
        const int r = rad[si];
        const int64_t u_count = e / r, stride = n / r;
        const int first = si == 0, last = si == nst - 1, to_global = last && !tstore;
        fprintf(f, "    // stage %d: radix %d, Ns = %lld\n", si, r, (long long)ns);
        fprintf(f, "#pragma unroll\n    for (int u = 0; u < %lld; u++) {\n", (long long)u_count);
        fprintf(f, "        const unsigned j = t + u * %uu, k = j & %lldu;\n        (void)k;\n", tpr, (long long)(ns - 1));
        fprintf(f, "#pragma unroll\n        for (int r = 0; r < %d; r++) {\n", r);
        if (first) {
            fprintf(f, "            const long long off = bi + (long long)(j + r * %lldu) * %lldLL;\n", (long long)stride,
                    (long long)s->in_stride);
            if (s->prolog)
                fprintf(f, "            v[u * %d + r] = valid ? %s::fm_cb_load((void *)in, (unsigned long long)off, &pp, 0) "
                           ": fmk_T{};\n", r, pq);
            else
                fprintf(f, "            v[u * %d + r] = valid ? in[off] : fmk_T{};\n", r);
        } else {
            fprintf(f, "            const unsigned i = j + r * %lldu;\n            v[u * %d + r] = x[FMK_SMI(i)];\n",
                    (long long)stride, r);
        }
        fprintf(f, "        }\n");
        if (ns > 1)
            fprintf(f, "#pragma unroll\n        for (int r = 1; r < %d; r++)\n"
                       "            v[u * %d + r] = fmk_cmul(v[u * %d + r], fmk_tw[%lldu + (r - 1) * %lldu + k]);\n",
                    r, r, r, (long long)tw_off, (long long)ns);
        /* fmk_dft<r>(v[u * r], v[u * r + 1], ...) (radix 16 names its first value "+ 0") */
        fprintf(f, r == 16 ? "        fmk_dft%d(v[u * %d + 0]" : "        fmk_dft%d(v[u * %d]", r, r);
        for (int i = 1; i < r; i++)
            fprintf(f, ", v[u * %d + %d]", r, i);
        fprintf(f, ");\n");
        fprintf(f, "    }\n");
        /* write: to global memory after the last stage, else to shared memory for the next */
        if (!to_global && !first)
            fprintf(f, "    __syncthreads();\n");
        fprintf(f, "#pragma unroll\n    for (int u = 0; u < %lld; u++) {\n", (long long)u_count);
        fprintf(f, "        const unsigned j = t + u * %uu, k = j & %lldu;\n", tpr, (long long)(ns - 1));
        fprintf(f, "#pragma unroll\n        for (int r = 0; r < %d; r++) {\n", r);
        fprintf(f, "            const unsigned o = (j - k) * %du + k + r * %lldu;\n", r, (long long)ns);
        if (to_global) {
            char val[32];
            snprintf(val, sizeof val, "v[u * %d + r]", r);
            fprintf(f, "            if (valid) {\n");
            emit_store(f, s, eq, "row", "o", "bo", val, "                ");
            fprintf(f, "            }\n");
        } else {
            fprintf(f, "            x[FMK_SMI(o)] = v[u * %d + r];\n", r);
        }
        fprintf(f, "        }\n    }\n");
        if (!to_global)
            fprintf(f, "    __syncthreads();\n");
        if (si > 0)
            tw_off += (r - 1) * ns;
        ns *= r;
    }
    if (tstore) { /* the block's rows from shared memory, lane-fastest: whole output sectors */
        fprintf(f, "#pragma unroll\n    for (unsigned q = 0; q < %uu; q++) {\n", e);
        fprintf(f, "        const unsigned idx = (lane * %uu + t) + q * %uu, l = idx %% %uu, o = idx / %uu;\n", tpr,
                tpr * rpb, rpb, rpb);
        fprintf(f, "        const unsigned long long rw = (unsigned long long)blockIdx.x * %uu + l;\n"
                   "        if (rw < rows) {\n"
                   "            long long bi2, bo2;\n            fmk_offsets(rw, bi2, bo2);\n"
                   "            fmk_T val = sm[l * %lldu + FMK_SMI(o)];\n",
                rpb, (long long)g.rs);
        emit_store(f, s, eq, "rw", "o", "bo2", "val", "            ");
        fprintf(f, "        }\n    }\n");
    }
    fprintf(f, "}\n");
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft kernel: out of host memory");
    }
    *source = buf;
    return FM_OK;
fail:
    fclose(f);
    free(buf);
    return st;
}

void fm_fft_kernel_destroy(fm_fft_kernel *k)
{
    if (!k)
        return;
    fm_nvrtc_module_unload(&k->mod);
    free(k);
}

fm_status fm_fft_kernel_create(const fm_settings *settings, const fm_fft_kernel_spec *s, int device_id,
                               fm_fft_kernel **out)
{
    *out = NULL;
    char *src = NULL;
    fm_status st = fm_fft_kernel_source(settings, s, &src);
    if (st != FM_OK)
        return st;
    fm_fft_kernel *k = calloc(1, sizeof *k);
    if (!k) {
        free(src);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft kernel: out of host memory");
    }
    const int user = (s->prolog && (s->prolog->ops & FM_FFT_OP_CALLBACK)) ||
                     (s->epilog && (s->epilog->ops & FM_FFT_OP_CALLBACK));
    static const char *const names[1] = {"fm_fft_kernel"};
    st = fm_nvrtc_module_build(&k->mod, settings, src, "the fused fft kernel", device_id, user, "fft kernel",
                               names, &k->kernel, 1);
    free(src);
    if (st != FM_OK) {
        fm_fft_kernel_destroy(k);
        return st;
    }
    geom g;
    geometry(s, -1, &g); /* the launch geometry: the register cap changes only the source */
    if (g.dynamic) { /* beyond the 48 KiB a block gets without asking */
        int optin = 0;
        cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_id);
        if (e == cudaSuccess && (size_t)optin < g.smem) {
            fm_fft_kernel_destroy(k);
            return fm_fail(FM_ERR_NOT_APPLICABLE, "fft kernel: needs %zu bytes of shared memory per block, the device "
                           "offers %d", g.smem, optin);
        }
        if (e == cudaSuccess)
            e = cudaKernelSetAttributeForDevice(k->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g.smem,
                                                device_id);
        if (e != cudaSuccess) {
            fm_fft_kernel_destroy(k);
            return fm_cuda_runtime_fail(e, "fft kernel", "cudaKernelSetAttributeForDevice(max dynamic shared memory)");
        }
        k->dyn_smem = g.smem;
    }
    fm_fft_kernel_launch_shape(s, &k->grid, &k->bx, &k->by);
    k->rows = (unsigned long long)rows_of(s);
    size_t used = 0;
    for (int i = 0; i < g.nst && used < sizeof k->radices; i++)
        used += (size_t)snprintf(k->radices + used, sizeof k->radices - used, "%s%d", i ? "x" : "", g.rad[i]);
    *out = k;
    return FM_OK;
}

fm_status fm_fft_kernel_launch(const fm_fft_kernel *k, const void *in, void *out, const void *prolog_array,
                               const void *epilog_array, void *stream)
{
    unsigned long long rows = k->rows;
    void *args[5] = {(void *)&in, (void *)&out, (void *)&prolog_array, (void *)&epilog_array, (void *)&rows};
    dim3 grid = {k->grid, 1, 1}, block = {k->bx, k->by, 1};
    cudaError_t e = cudaLaunchKernel((const void *)k->kernel, grid, block, args, k->dyn_smem, (cudaStream_t)stream);
    return e == cudaSuccess ? FM_OK : fm_cuda_runtime_fail(e, "fft kernel", "cudaLaunchKernel(fm_fft_kernel)");
}

const char *fm_fft_kernel_radices(const fm_fft_kernel *k) { return k->radices; }

void fm_fft_kernel_launch_shape(const fm_fft_kernel_spec *s, unsigned *grid, unsigned *block_x, unsigned *block_y)
{
    geom g;
    geometry(s, -1, &g);
    *block_x = lanes_mode(s) ? g.rpb : g.tpr;
    *block_y = lanes_mode(s) ? g.tpr : g.rpb;
    *grid = (unsigned)((rows_of(s) + g.rpb - 1) / g.rpb);
}
