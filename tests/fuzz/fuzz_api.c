/* fuzz_api.c : a libFuzzer target over the C API's descriptor and option validation and planning.
 * The fuzzer's bytes build up to FM_MATMUL_NSLOTS tensor descriptors (through fm_tensor_init or
 * written field by field, as a C caller may), an operation (matmul, FFT or an invalid value) and its
 * options; then fm_output_specs, fm_plan_create (for problems of at most 2^22 elements per operand,
 * or invalid counts), describe and slot info, and, where every descriptor lies inside the fuzzer's
 * arena, one execute. Also fm_epilogue_parse / _format on the bytes as text.
 * What must hold: no crash, no sanitizer report, no leak, and every failure carries a message.
 * FFT efforts stay at estimate (measure would time FFTW plans, seconds for large sizes).
 * Built and run by `make fuzz` (docs/testing.md). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <fusemath/fusemath.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ARENA_BYTES = 1 << 20, MAX_EXEC_ELEMENTS = 1 << 14, MAX_PLAN_ELEMENTS = 1 << 22 };

typedef struct {
    const uint8_t *p;
    size_t n;
} bytes;

static fm_context *g_ctx;
static unsigned char *g_arena;

static uint8_t u8(bytes *b)
{
    if (!b->n)
        return 0;
    b->n--;
    return *b->p++;
}

static int32_t i32(bytes *b)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = v << 8 | u8(b);
    return (int32_t)v;
}

/* Mostly small values (what real calls use), sometimes the edges of the 64-bit range. */
static int64_t extent(bytes *b)
{
    const uint8_t sel = u8(b);
    if (sel < 200)
        return sel % 9;
    if (sel < 240)
        return (int64_t)1 << (u8(b) % 63);
    static const int64_t edges[] = {-1, INT64_MAX, INT64_MIN, 0, 1 << 16, -(1LL << 40)};
    return edges[sel % (sizeof edges / sizeof edges[0])];
}

static int64_t stride(bytes *b)
{
    const uint8_t sel = u8(b);
    if (sel < 200)
        return (int64_t)(sel % 17) - 4;
    return extent(b);
}

static void fill_tensor(bytes *b, fm_tensor *t)
{
    const fm_device devices[] = {{FM_DEVICE_CPU, 0}, {FM_DEVICE_AUTO, 0}, {FM_DEVICE_CUDA, 0},
                                 {FM_DEVICE_CUDA_HOST, 0}, {7, 0}, {FM_DEVICE_CPU, 3}};
    const uint8_t how = u8(b);
    const fm_device dev = devices[(how >> 2) % (sizeof devices / sizeof devices[0])];
    const fm_dtype dtype = (fm_dtype)((int)(u8(b) % (FM_DTYPE_COUNT_ + 2)) - 1);
    const int ndim = (int)(u8(b) % (FM_MAX_NDIM + 2)) - (how & 1); /* -1 .. FM_MAX_NDIM + 1 */
    int64_t shape[FM_MAX_NDIM + 1] = {0}, strides[FM_MAX_NDIM + 1] = {0};
    for (int i = 0; i < ndim && i <= FM_MAX_NDIM; i++) {
        shape[i] = extent(b);
        strides[i] = stride(b);
    }
    if (how & 2) { /* field by field: nothing checked until planning */
        memset(t, 0, sizeof *t);
        t->device = dev;
        t->dtype = dtype;
        t->ndim = ndim;
        for (int i = 0; i < ndim && i < FM_MAX_NDIM; i++)
            t->shape[i] = shape[i], t->strides[i] = strides[i];
    } else if (fm_tensor_init(t, NULL, dev, dtype, ndim, shape, (how & 16) ? strides : NULL) != FM_OK) {
        if (!fm_last_error()[0])
            abort(); /* a failure without a message */
        memset(t, 0, sizeof *t);
    }
}

/* Places t inside the arena when its whole span fits there (any strides), else a fake address or
 * NULL: planning must never read data. Returns whether t may be executed on. */
static int place(bytes *b, fm_tensor *t)
{
    const size_t es = fm_dtype_size(t->dtype);
    int64_t lo = 0, hi = 0, n = 1;
    int ok = es > 0 && t->ndim >= 0 && t->ndim <= FM_MAX_NDIM;
    for (int i = 0; ok && i < t->ndim; i++) {
        const int64_t e = t->shape[i], s = t->strides[i];
        if (e < 0 || e > MAX_EXEC_ELEMENTS || s < -MAX_EXEC_ELEMENTS || s > MAX_EXEC_ELEMENTS)
            ok = 0;
        else if (e > 0) {
            n *= e;
            if (s < 0)
                lo += s * (e - 1);
            else
                hi += s * (e - 1);
        }
        ok = ok && n <= MAX_EXEC_ELEMENTS;
    }
    const int64_t span = (hi - lo + 1) * (int64_t)es;
    if (ok && span <= ARENA_BYTES) {
        const int64_t room = ARENA_BYTES - span, off = room ? (int64_t)(((uint32_t)i32(b)) % (uint64_t)room) : 0;
        t->data = g_arena + off - lo * (int64_t)es;
        return 1;
    }
    t->data = (u8(b) & 1) ? NULL : (void *)(uintptr_t)0x1000; /* never dereferenced by planning */
    return 0;
}

/* Random descriptors nearly always fail the first shape check. Half the inputs start instead from
 * a coherent problem: matmul a (.., M, K) and b (K, N), an FFT input, with the outputs (and a bias
 * or c) as fm_output_specs describes them; then the bytes bend one field of one descriptor. */
static void cohere(bytes *b, fm_op op, const void *opts, fm_tensor *t, unsigned *used)
{
    static const fm_dtype dtypes[] = {FM_F32, FM_F64, FM_C64, FM_C128, FM_F16, FM_BF16, FM_I8};
    const fm_dtype dt = dtypes[u8(b) % (sizeof dtypes / sizeof dtypes[0])];
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    const int batch = u8(b) % 3;
    int64_t sa[4] = {2, 3, 4, 5}, sb[4] = {2, 3, 4, 5};
    for (int i = 0; i < batch; i++)
        sa[i] = sb[i] = 1 + u8(b) % 3;
    const int64_t m = u8(b) % 9, k = u8(b) % 9, n = u8(b) % 9;
    sa[batch] = m, sa[batch + 1] = k, sb[batch] = k, sb[batch + 1] = n;
    *used = 0;
    if (op == FM_OP_FFT) {
        for (int i = 0; i < 3; i++)
            sa[i] = 1 + u8(b) % 12;
        (void)fm_tensor_init(&t[FM_FFT_IN], NULL, cpu, dt, 1 + batch, sa, NULL);
        *used = 1u << FM_FFT_IN;
    } else {
        (void)fm_tensor_init(&t[FM_MATMUL_A], NULL, cpu, dt, batch + 2, sa, NULL);
        (void)fm_tensor_init(&t[FM_MATMUL_B], NULL, cpu, dt, batch + 2, sb, NULL);
        *used = 1u << FM_MATMUL_A | 1u << FM_MATMUL_B;
        if (u8(b) & 1) {
            (void)fm_tensor_init(&t[FM_MATMUL_BIAS], NULL, cpu, dt, 1, &n, NULL);
            *used |= 1u << FM_MATMUL_BIAS;
        }
    }
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {0};
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        ts[i] = (*used >> i & 1) ? &t[i] : NULL;
    fm_tensor specs[FM_MATMUL_NSLOTS];
    unsigned written = 0;
    const int nslots = op == FM_OP_FFT ? FM_FFT_NSLOTS : FM_MATMUL_NSLOTS;
    if (fm_output_specs(op, ts, nslots, opts, specs, &written) == FM_OK)
        for (int i = 0; i < nslots; i++)
            if (written >> i & 1)
                t[i] = specs[i], *used |= 1u << i;
    if (op == FM_OP_MATMUL && (*used >> FM_MATMUL_D & 1) && (u8(b) & 3) == 0)
        t[FM_MATMUL_C] = t[FM_MATMUL_D], *used |= 1u << FM_MATMUL_C;
    const uint8_t bend = u8(b);
    fm_tensor *v = &t[bend % nslots];
    if (bend & 0x80) {
        const int axis = (u8(b) % FM_MAX_NDIM);
        if (bend & 0x40)
            v->shape[axis] = extent(b);
        else
            v->strides[axis] = stride(b);
    } else if (bend & 0x20) {
        v->dtype = (fm_dtype)(u8(b) % FM_DTYPE_COUNT_);
    }
}

static void fill_matmul_options(bytes *b, fm_matmul_options *o)
{
    fm_matmul_options_init(o);
    const uint8_t mask = u8(b);
    if (mask & 1)
        o->epilogue = (unsigned)i32(b) & ((mask & 2) ? 0xffffffffu : 0x3fffu);
    if (mask & 4)
        o->execution = (int32_t)(u8(b) % 5) - 1, o->device_id = (int32_t)(u8(b) % 3) - 1;
    if (mask & 8)
        o->num_threads = i32(b) % 8, o->panel_rows = i32(b) % 600;
    if (mask & 16)
        o->cpu_strategy = (int32_t)(u8(b) % 6) - 1, o->compute = (int32_t)(u8(b) % 4) - 1;
    if (mask & 32)
        o->gpu_algo = i32(b) % 70, o->gpu_passes = (int32_t)(u8(b) % 4) - 1;
    if (mask & 64)
        o->reserved[u8(b) % (sizeof o->reserved / sizeof o->reserved[0])] = i32(b);
    if (mask & 128) {
        static const double vals[] = {0.0, 1.0, -2.5, 1e308, 0.0 / 0.0, 1.0 / 0.0};
        o->alpha[u8(b) % 2] = vals[u8(b) % 6];
        o->beta[u8(b) % 2] = vals[u8(b) % 6];
        o->clamp[u8(b) % 2] = vals[u8(b) % 6];
        o->dropout = vals[u8(b) % 6] * 0.25; /* 0, 0.25 (valid), the rest refused */
    }
}

static void fill_fft_options(bytes *b, fm_fft_options *o)
{
    fm_fft_options_init(o);
    const uint8_t mask = u8(b);
    o->kind = (int32_t)(u8(b) % 5) - 1;
    o->inverse = (int32_t)(u8(b) % 3) - (mask & 1);
    if (mask & 2) {
        o->naxes = (int32_t)(u8(b) % (FM_MAX_NDIM + 2)) - 1;
        for (int i = 0; i < FM_MAX_NDIM; i++)
            o->axes[i] = (int32_t)(u8(b) % 20) - 10;
    }
    if (mask & 4)
        o->norm = (int32_t)(u8(b) % 5) - 1, o->last_n = i32(b) % 20;
    if (mask & 8)
        o->execution = (int32_t)(u8(b) % 5) - 1, o->device_id = (int32_t)(u8(b) % 3) - 1;
    if (mask & 16)
        o->num_threads = i32(b) % 8, o->gpu_prolog = (int32_t)(u8(b) % 6) - 1;
    if (mask & 32)
        o->effort = (u8(b) & 1) ? -1 : 9; /* invalid values; never measure (see the top) */
    if (mask & 64)
        o->reserved[u8(b) % (sizeof o->reserved / sizeof o->reserved[0])] = i32(b);
    if (mask & 128) {
        static const double vals[] = {0.0, 1.0, -2.5, 0.0 / 0.0, 1.0 / 0.0};
        fm_fft_chain *ch = (u8(b) & 1) ? &o->epilog : &o->prolog;
        ch->ops = (unsigned)u8(b) & 0x17; /* scale, multiply, conj, an unknown bit; no CUDA callback */
        ch->scale[0] = vals[u8(b) % 5];
        ch->scale[1] = vals[u8(b) % 5];
    }
}

/* Every option of the RNG family from the bytes (fm_rng_options_init first, then some fields
 * overwritten, invalid values included). */
static void fill_rng_options(bytes *b, fm_rng_options *o)
{
    static const double vals[] = {0.0, 1.0, -2.5, 0.0 / 0.0, 1.0 / 0.0, 1e300};
    fm_rng_options_init(o);
    const uint8_t mask = u8(b);
    o->distribution = (int32_t)(u8(b) % 8) - 1;
    o->mode = (int32_t)(u8(b) % 4) - 1;
    if (mask & 1)
        o->low = vals[u8(b) % 6], o->high = vals[u8(b) % 6];
    if (mask & 2)
        o->mean = vals[u8(b) % 6], o->stddev = vals[u8(b) % 6], o->scale = vals[u8(b) % 6];
    if (mask & 4)
        o->execution = (int32_t)(u8(b) % 5) - 1, o->device_id = (int32_t)(u8(b) % 3) - 1;
    if (mask & 8)
        o->num_threads = i32(b) % 8;
    if (mask & 16) {
        o->out_ndim = (int32_t)(u8(b) % (FM_MAX_NDIM + 3)) - 2;
        for (int i = 0; i < FM_MAX_NDIM; i++)
            o->out_shape[i] = extent(b);
        o->out_dtype = (int32_t)(u8(b) % (FM_DTYPE_COUNT_ + 2)) - 1;
    }
    if (mask & 32)
        o->reserved[u8(b) % (sizeof o->reserved / sizeof o->reserved[0])] = i32(b);
    if (mask & 64) { /* integers' range (the edges of int64 too) and poisson's lam */
        static const int64_t ints[] = {0, 1, -1, INT64_MIN, INT64_MAX, 255, (int64_t)1 << 32};
        o->int_low = ints[u8(b) % 7], o->int_high = ints[u8(b) % 7];
        o->endpoint = (int32_t)(u8(b) % 3);
        o->lam = vals[u8(b) % 6];
    }
}

static void fuzz_epilogue_text(bytes *b)
{
    char text[40];
    const size_t n = u8(b) % sizeof text;
    size_t i = 0;
    for (; i < n && b->n; i++)
        text[i] = (char)u8(b);
    text[i] = '\0';
    unsigned bits = 0;
    if (fm_epilogue_parse(text, &bits) == FM_OK) {
        char back[96];
        unsigned again = 0;
        if (fm_epilogue_format(bits, back, sizeof back) != FM_OK || fm_epilogue_parse(back, &again) != FM_OK ||
            again != bits)
            abort(); /* a name that parses formats and parses back to the same bits */
    } else if (!fm_last_error()[0]) {
        abort();
    }
    char small[8];
    memset(small, 'Z', sizeof small);
    if (fm_epilogue_format((unsigned)i32(b), small, 1 + u8(b) % sizeof small) != FM_OK && small[0] != '\0')
        abort(); /* a failed format leaves an empty string */
}

/* A valid problem of 2^40 elements (zero strides make it cheap to describe) would really need its
 * terabytes of scratch: plan only descriptors whose element count is small, or no count at all
 * (negative, overflowing: the refusals to exercise). */
static int plannable(const fm_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim && i < FM_MAX_NDIM; i++) {
        if (t->shape[i] <= 0)
            return 1;
        if (__builtin_mul_overflow(n, t->shape[i], &n))
            return 1;
    }
    return t->ndim < 0 || t->ndim > FM_MAX_NDIM || n <= MAX_PLAN_ELEMENTS;
}

static void fill_solve_options(bytes *b, fm_solve_options *o)
{
    static const double vals[] = {-1.0, 0.0, 1e-3, 0.0 / 0.0, 1.0 / 0.0};
    fm_solve_options_init(o);
    const uint8_t mask = u8(b);
    o->routine = (int32_t)(u8(b) % (FM_SOLVE_ROUTINE_COUNT_ + 2)) - 1;
    int32_t *flags[] = {&o->uplo, &o->transpose, &o->unit_diagonal, &o->check, &o->check_finite, &o->qr_mode,
                        &o->full_matrices, &o->values_only, &o->refine};
    for (int i = 0; i < 9 && (mask & 1); i++)
        *flags[i] = (int32_t)(u8(b) % 5) - 1;
    if (mask & 2)
        o->rcond = vals[u8(b) % 5];
    if (mask & 4)
        o->execution = (int32_t)(u8(b) % 5) - 1, o->device_id = (int32_t)(u8(b) % 3) - 1;
    if (mask & 8)
        o->num_threads = i32(b) % 8;
    if (mask & 16)
        o->reserved[u8(b) % (sizeof o->reserved / sizeof o->reserved[0])] = i32(b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("FUSEMATH_NUM_THREADS", "1", 0);
    g_arena = calloc(1, ARENA_BYTES);
    if (!g_arena || fm_context_create(&g_ctx) != FM_OK) {
        fprintf(stderr, "fuzz_api: setup failed: %s\n", fm_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned runs;
    bytes b = {data, size};
    if (u8(&b) & 1)
        fuzz_epilogue_text(&b);
    const fm_op op = (fm_op)((int)(u8(&b) % (FM_OP_COUNT_ + 2)) - 1);
    fm_matmul_options mo;
    fm_fft_options fo;
    fm_rng_options ro;
    fm_solve_options so;
    const void *opts = NULL;
    if (u8(&b) & 3) { /* (an operation's options are its own struct: the C API's contract) */
        if (op == FM_OP_FFT) {
            fill_fft_options(&b, &fo);
            opts = &fo;
        } else if (op == FM_OP_RNG) {
            fill_rng_options(&b, &ro);
            opts = &ro;
        } else if (op == FM_OP_SOLVE) {
            fill_solve_options(&b, &so);
            opts = &so;
        } else {
            fill_matmul_options(&b, &mo);
            opts = &mo;
        }
    }
    fm_tensor t[FM_MATMUL_NSLOTS];
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {0};
    unsigned used = 0;
    int nslots;
    if (u8(&b) & 1) {
        cohere(&b, op, opts, t, &used);
        nslots = op == FM_OP_FFT ? FM_FFT_NSLOTS : FM_MATMUL_NSLOTS;
    } else {
        used = u8(&b) | (unsigned)u8(&b) << 8;
        nslots = (int)(u8(&b) % (FM_MATMUL_NSLOTS + 2)) - 1;
        for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
            if (used >> i & 1)
                fill_tensor(&b, &t[i]);
    }
    int placed = 1;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        if (used >> i & 1) {
            placed &= place(&b, &t[i]);
            ts[i] = &t[i];
        }
    fm_tensor specs[FM_MATMUL_NSLOTS];
    unsigned written = 0;
    if (fm_output_specs(op, ts, nslots, opts, specs, &written) != FM_OK && !fm_last_error()[0])
        abort();
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        if (ts[i] && !plannable(ts[i]))
            return 0;
    fm_plan *plan = NULL;
    fm_status s = fm_plan_create(g_ctx, op, ts, nslots, opts, &plan);
    if (s != FM_OK) {
        if (plan || !fm_last_error()[0])
            abort(); /* a failed plan is NULL and says why */
    } else {
        if (!fm_plan_describe(plan)[0])
            abort();
        for (int i = -1; i <= nslots; i++) {
            fm_tensor desc;
            int in_use = 0;
            (void)fm_plan_slot_info(plan, i, &desc, &in_use);
        }
        if (placed) {
            void *ptrs[FM_MATMUL_NSLOTS] = {0};
            for (int i = 0; i < nslots && i < FM_MATMUL_NSLOTS; i++)
                ptrs[i] = ts[i] ? ts[i]->data : NULL;
            if (fm_plan_execute(plan, ptrs, nslots, NULL) != FM_OK && !fm_last_error()[0])
                abort();
        }
        fm_plan_release(plan);
    }
    if (++runs % 512 == 0)
        fm_context_clear_cache(g_ctx); /* distinct problems: keep the cache from growing all run */
    return 0;
}
