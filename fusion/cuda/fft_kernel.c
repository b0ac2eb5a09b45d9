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

static const char *const nvrtc_options[] = {"-std=c++17"};
enum { N_NVRTC_OPTIONS = 1 };

#define SMEM_LIMIT 36000 /* bytes of shared memory per block we allow ourselves (static limit: 48 KiB) */
/* (lanes mode: up to 512 threads, at most 32 lanes per block) */
#define BLOCK_TARGET 256 /* threads per block we aim for when rows are short */

struct fm_fft_kernel {
    fm_nvrtc_module mod;
    cudaKernel_t kernel;
    unsigned long long rows;
    unsigned grid, bx, by; /* launch shape */
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

/* Radices in the order applied: radix 8, after one radix-2 or radix-4 stage where needed. */
static int radix_plan(int64_t n, int r[16])
{
    int m = 0, k = 0;
    while (((int64_t)1 << m) < n)
        m++;
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

/* One row's slice of shared memory: padded against bank conflicts within a row, and in lanes
 * mode by one more element so that the lanes (neighbouring threads) fall in other banks. */
static int64_t row_stride(const fm_fft_kernel_spec *s) { return padded(s->n) + (lanes_mode(s) ? 1 : 0); }

/* threads per row, rows per block */
static void geometry(const fm_fft_kernel_spec *s, unsigned *tpr, unsigned *rpb)
{
    const int64_t e = s->n < 8 ? s->n : 8;
    *tpr = (unsigned)(s->n / e);
    unsigned r = lanes_mode(s) ? (*tpr >= 512 ? 1 : 512 / *tpr) : (*tpr >= BLOCK_TARGET ? 1 : BLOCK_TARGET / *tpr);
    if (lanes_mode(s) && r > 32)
        r = 32;
    while (r > 1 && (size_t)r * (size_t)row_stride(s) * elem_size(s->dtype) > SMEM_LIMIT)
        r /= 2;
    const int64_t rows = rows_of(s);
    /* no block of mostly idle rows; only a few row counts change the source this way (the
     * count itself is a kernel argument, so other batch sizes reuse the compiled kernel) */
    while (r > 1 && (int64_t)(r / 2) >= rows)
        r /= 2;
    *rpb = r;
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
    unsigned tpr, rpb;
    geometry(s, &tpr, &rpb);
    const int64_t blocks = (rows_of(s) + rpb - 1) / rpb;
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

fm_status fm_fft_kernel_source(const fm_fft_kernel_spec *s, char **source)
{
    *source = NULL;
    fm_status st = fm_fft_kernel_check(s);
    if (st != FM_OK)
        return st;
    int rad[16];
    const int nst = radix_plan(s->n, rad);
    const int64_t n = s->n, e = n < 8 ? n : 8;
    unsigned tpr, rpb;
    geometry(s, &tpr, &rpb);
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
    fprintf(f, "#define FMK_SMI(i) ((i) + ((i) >> 5))\n");
    fprintf(f, "extern \"C\" __global__ void __launch_bounds__(%u) fm_fft_kernel(const fmk_T *in, fmk_T *out, const void *pa, "
               "const void *ea, unsigned long long rows)\n{\n", tpr * rpb);
    const int lanes = lanes_mode(s);
    fprintf(f, "    const unsigned t = threadIdx.%c, lane = threadIdx.%c;\n", lanes ? 'y' : 'x', lanes ? 'x' : 'y');
    if (nst > 1)
        fprintf(f, "    __shared__ fmk_T sm[%u][%lld];\n    fmk_T *x = sm[lane];\n", rpb, (long long)row_stride(s));
    fprintf(f, "    const unsigned long long row = (unsigned long long)blockIdx.x * %uu + lane;\n"
               "    const bool valid = row < rows;\n"
               "    long long bi = 0, bo = 0;\n    (void)pa; (void)ea;\n",
            rpb);
    if (s->nbatch > 0) {
        fprintf(f, "    {\n        unsigned long long rr = row, q;\n");
        for (int i = s->nbatch - 1; i >= 0; i--) {
            if (i > 0)
                fprintf(f, "        q = rr %% %lldull; rr /= %lldull;\n", (long long)s->batch_ext[i],
                        (long long)s->batch_ext[i]);
            else
                fprintf(f, "        q = rr;\n");
            fprintf(f, "        bi += (long long)q * %lldLL; bo += (long long)q * %lldLL;\n", (long long)s->batch_in[i],
                    (long long)s->batch_out[i]);
        }
        fprintf(f, "        (void)q;\n    }\n");
    }
    if (s->prolog)
        fprintf(f, "    %s::fm_cb_params pp = {{pa, ea}, {nullptr, nullptr}};\n", pq[0] ? pq : "");
    if (s->epilog)
        fprintf(f, "    %s::fm_cb_params ep = {{pa, ea}, {nullptr, nullptr}};\n", eq[0] ? eq : "");
    fprintf(f, "    fmk_T v[%lld];\n", (long long)e);
    int64_t ns = 1, tw_off = 0;
    for (int si = 0; si < nst; si++) {
        const int r = rad[si];
        const int64_t u_count = e / r, stride = n / r;
        const int first = si == 0, last = si == nst - 1;
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
        if (r == 2)
            fprintf(f, "        fmk_dft2(v[u * 2], v[u * 2 + 1]);\n");
        else if (r == 4)
            fprintf(f, "        fmk_dft4(v[u * 4], v[u * 4 + 1], v[u * 4 + 2], v[u * 4 + 3]);\n");
        else
            fprintf(f, "        fmk_dft8(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);\n");
        fprintf(f, "    }\n");
        /* write: to global memory after the last stage, else to shared memory for the next */
        if (!last && !first)
            fprintf(f, "    __syncthreads();\n");
        fprintf(f, "#pragma unroll\n    for (int u = 0; u < %lld; u++) {\n", (long long)u_count);
        fprintf(f, "        const unsigned j = t + u * %uu, k = j & %lldu;\n", tpr, (long long)(ns - 1));
        fprintf(f, "#pragma unroll\n        for (int r = 0; r < %d; r++) {\n", r);
        fprintf(f, "            const unsigned o = (j - k) * %du + k + r * %lldu;\n", r, (long long)ns);
        if (last) {
            fprintf(f, "            if (valid) {\n                const long long off = bo + (long long)o * %lldLL;\n",
                    (long long)s->out_stride);
            if (s->tw_n > 0) /* p / tw_n exactly representable (tw_n <= 2^24): one rounding in sincospi */
                fprintf(f, "                {\n"
                           "                    const unsigned long long p = ((row %% %lldull) * o) %% %lldull;\n"
                           "                    fmk_R sn, cs;\n"
                           "                    %s((fmk_R)2 * (fmk_R)p / (fmk_R)%lld, &sn, &cs);\n"
                           "                    fmk_T w; w.x = cs; w.y = %ssn;\n"
                           "                    v[u * %d + r] = fmk_cmul(v[u * %d + r], w);\n"
                           "                }\n",
                        (long long)s->tw_rows, (long long)s->tw_n, s->dtype == FM_C128 ? "sincospi" : "sincospif",
                        (long long)s->tw_n, s->inverse ? "" : "-", r, r);
            if (s->epilog)
                fprintf(f, "                %s::fm_cb_store((void *)out, (unsigned long long)off, v[u * %d + r], &ep, 0);\n",
                        eq, r);
            else
                fprintf(f, "                out[off] = v[u * %d + r];\n", r);
            fprintf(f, "            }\n");
        } else {
            fprintf(f, "            x[FMK_SMI(o)] = v[u * %d + r];\n", r);
        }
        fprintf(f, "        }\n    }\n");
        if (!last)
            fprintf(f, "    __syncthreads();\n");
        if (si > 0)
            tw_off += (r - 1) * ns;
        ns *= r;
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

fm_status fm_fft_kernel_create(const fm_fft_kernel_spec *s, int device_id, fm_fft_kernel **out)
{
    *out = NULL;
    char *src = NULL;
    fm_status st = fm_fft_kernel_source(s, &src);
    if (st != FM_OK)
        return st;
    fm_fft_kernel *k = calloc(1, sizeof *k);
    if (!k) {
        free(src);
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft kernel: out of host memory");
    }
    int arch = 0;
    size_t size = 0;
    const int user = (s->prolog && (s->prolog->ops & FM_FFT_OP_CALLBACK)) ||
                     (s->epilog && (s->epilog->ops & FM_FFT_OP_CALLBACK));
    st = fm_nvrtc_arch_for_device(device_id, "fft kernel", &arch);
    if (st == FM_OK) {
        st = fm_nvrtc_compile(src, "the fused fft kernel", nvrtc_options, N_NVRTC_OPTIONS, arch, 0, &k->mod.image,
                              &size, NULL);
        if (st == FM_ERR_BACKEND && user) { /* the generated part compiles: the user's code does not */
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", fm_last_error());
            st = fm_fail(FM_ERR_INVALID_ARGUMENT, "%s", msg);
        }
    }
    free(src);
    static const char *const names[1] = {"fm_fft_kernel"};
    if (st == FM_OK)
        st = fm_nvrtc_module_load(&k->mod, "fft kernel", names, &k->kernel, 1);
    if (st != FM_OK) {
        fm_fft_kernel_destroy(k);
        return st;
    }
    fm_fft_kernel_launch_shape(s, &k->grid, &k->bx, &k->by);
    k->rows = (unsigned long long)rows_of(s);
    int rad[16], nst = radix_plan(s->n, rad);
    size_t used = 0;
    for (int i = 0; i < nst && used < sizeof k->radices; i++)
        used += (size_t)snprintf(k->radices + used, sizeof k->radices - used, "%s%d", i ? "x" : "", rad[i]);
    *out = k;
    return FM_OK;
}

fm_status fm_fft_kernel_launch(const fm_fft_kernel *k, const void *in, void *out, const void *prolog_array,
                               const void *epilog_array, void *stream)
{
    unsigned long long rows = k->rows;
    void *args[5] = {(void *)&in, (void *)&out, (void *)&prolog_array, (void *)&epilog_array, (void *)&rows};
    dim3 grid = {k->grid, 1, 1}, block = {k->bx, k->by, 1};
    cudaError_t e = cudaLaunchKernel((const void *)k->kernel, grid, block, args, 0, (cudaStream_t)stream);
    return e == cudaSuccess ? FM_OK : fm_cuda_runtime_fail(e, "fft kernel", "cudaLaunchKernel(fm_fft_kernel)");
}

const char *fm_fft_kernel_radices(const fm_fft_kernel *k) { return k->radices; }

void fm_fft_kernel_launch_shape(const fm_fft_kernel_spec *s, unsigned *grid, unsigned *block_x, unsigned *block_y)
{
    unsigned tpr, rpb;
    geometry(s, &tpr, &rpb);
    *block_x = lanes_mode(s) ? rpb : tpr;
    *block_y = lanes_mode(s) ? tpr : rpb;
    *grid = (unsigned)((rows_of(s) + rpb - 1) / rpb);
}
