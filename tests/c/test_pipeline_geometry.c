/* test_pipeline_geometry.c : the pipelined transfers' chunk hooks and chunk rule on the CPU (pure
 * functions of a problem; core/src/pipeline.c, the chunk rows of matmul / fft / rng). Problems are
 * built on host descriptors (fake, never dereferenced pointers for the large ones) and then placed on
 * cuda:0 by hand, as FM_EXECUTION_CUDA would place them: every chunk's sub-problem must cover the
 * operand exactly once (each element of each split slot addressed by one chunk, whole slots
 * unchanged), remainders must be the rest, and what does not cut must say why. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "context.h"
#include "operation.h"
#include "profile.h"

#include <stdlib.h>
#include <string.h>

/* the rule declines with its reason in why, no fm_fail message */
#define CHECK_NA(expr, st) CHECK((expr) == (st))

static fm_context *ctx;
static const fm_device cpu = {FM_DEVICE_CPU, 0}, gpu = {FM_DEVICE_CUDA, 0};
static char fake[1 << 12] __attribute__((aligned(256)));

static void on_gpu(fm_problem *p) { p->exec_device = gpu; }

/* The element offsets a descriptor addresses, each counted in hits[] (an operand's span in elements). */
static void mark(const fm_tensor *t, int64_t base, unsigned char *hits, int64_t nhits, int *bad)
{
    int64_t n = fm_tensor_numel(t), idx[FM_MAX_NDIM] = {0};
    for (int64_t e = 0; e < n; e++) {
        int64_t off = base;
        for (int d = 0; d < t->ndim; d++)
            off += idx[d] * t->strides[d];
        if (off < 0 || off >= nhits)
            *bad = 1;
        else
            hits[off]++;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d])
                break;
            idx[d] = 0;
        }
    }
}

/* Every chunk of g through the operation's hook: split slots covered exactly once, whole slots as in p. */
static void check_cover(const fm_problem *p, const fm_pipeline_geom *g, int64_t position_per_index)
{
    const fm_operation *op = fm_operation_for(p->op);
    for (int i = 0; i < p->nslots; i++) {
        if (!(p->present & (1u << i)))
            continue;
        int64_t lo, hi;
        fm_tensor_byte_span(&p->t[i], &lo, &hi);
        const int64_t nel = hi / (int64_t)fm_dtype_size(p->t[i].dtype) + 1;
        unsigned char *hits = calloc((size_t)nel, 1);
        int bad = 0, chunks = 0;
        for (int64_t c0 = 0; c0 < g->extent; c0 += g->chunk, chunks++) {
            const int64_t c1 = c0 + g->chunk < g->extent ? c0 + g->chunk : g->extent;
            fm_problem sub;
            fm_chunk ch;
            const char *why = "";
            CHECK(op->chunk(p, c0, c1, &sub, &ch, &why) == g->extent);
            CHECK(ch.position == c0 * position_per_index);
            if ((g->whole >> i) & 1 || (ch.whole >> i) & 1) {
                CHECK(ch.offset[i] == 0);
                CHECK(memcmp(&sub.t[i], &p->t[i], sizeof sub.t[i]) == 0);
                continue;
            }
            mark(&sub.t[i], ch.offset[i], hits, nel, &bad);
            CHECK(c1 - c0 == (c1 == g->extent ? g->last : g->chunk));
        }
        CHECK(chunks == g->nchunks);
        if ((g->split >> i) & 1) {
            int exact = !bad;
            fm_tensor whole = p->t[i];
            unsigned char *want = calloc((size_t)nel, 1);
            mark(&whole, 0, want, nel, &bad);
            for (int64_t e = 0; e < nel; e++)
                exact &= hits[e] == want[e];
            CHECK_MSG(exact && !bad, "slot %s is not covered exactly once", p->slot_names[i]);
            free(want);
        }
        free(hits);
    }
}

static fm_status matmul_problem(int64_t m, int64_t n, int64_t k, unsigned epi, int transposed_a, int64_t d_ld,
                                fm_problem *p)
{
    fm_tensor a, b, bias, c, d;
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, sd[2] = {m, n}, sbias[1] = {n};
    int64_t st_a[2] = {1, m}, st_d[2] = {d_ld, 1};
    fm_tensor_init(&a, fake, cpu, FM_F32, 2, sa, transposed_a ? st_a : NULL);
    fm_tensor_init(&b, fake, cpu, FM_F32, 2, sb, NULL);
    fm_tensor_init(&c, fake, cpu, FM_F32, 2, sd, NULL);
    fm_tensor_init(&bias, fake, cpu, FM_F32, 1, sbias, NULL);
    fm_tensor_init(&d, fake + 64, cpu, FM_F32, 2, sd, st_d);
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&a, &b, (epi & FM_EPILOGUE_DROPOUT) ? NULL : &c, &bias, &d};
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = epi | FM_EPILOGUE_BIAS;
    o.beta[0] = ts[FM_MATMUL_C] ? 1 : 0;
    o.dropout = (epi & FM_EPILOGUE_DROPOUT) ? 0.25 : 0;
    o.execution = FM_EXECUTION_CPU;
    fm_attachments att = {{0}};
    return fm_operation_build(ctx, fm_operation_for(FM_OP_MATMUL), ts, &o, p, &att);
}

static void test_matmul(void)
{
    fm_problem p;
    fm_pipeline_geom g;
    char why[160];
    /* 37 rows under "on": 8 chunks of 5, the last of 2; a, c, d cut; b and bias whole */
    CHECK_OK(matmul_problem(37, 45, 29, FM_EPILOGUE_RELU, 0, 45, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
    CHECK(g.extent == 37 && g.chunk == 5 && g.nchunks == 8 && g.last == 2);
    CHECK(g.split == (1u << FM_MATMUL_A | 1u << FM_MATMUL_C | 1u << FM_MATMUL_D));
    CHECK(g.whole == (1u << FM_MATMUL_B | 1u << FM_MATMUL_BIAS));
    CHECK(g.span[FM_MATMUL_A] == 5 * 29 * 4 && g.span[FM_MATMUL_D] == 5 * 45 * 4);
    CHECK(g.in_bytes == (37.0 * 29 + 37.0 * 45) * 4 && g.out_bytes == 37.0 * 45 * 4); /* a and c in, d out */
    CHECK(g.whole_bytes == (29.0 * 45 + 45) * 4);
    check_cover(&p, &g, 0);
    /* auto: a few KiB moved do not cut */
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_AUTO, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK_MSG(strstr(why, "under two chunks") != NULL, "%s", why);
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_OFF, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK(strstr(why, "FUSEMATH_PIPELINE=off") != NULL);
    /* dropout: the position moves with the panel (element e of d is word position + e) */
    CHECK_OK(matmul_problem(37, 45, 29, FM_EPILOGUE_DROPOUT, 0, 45, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
    check_cover(&p, &g, 45);
    /* a stored column-major: its row panels interleave in memory, not cut */
    CHECK_OK(matmul_problem(37, 45, 29, 0, 1, 45, &p));
    on_gpu(&p);
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK_MSG(strstr(why, "a's chunks would overlap") != NULL, "%s", why);
    /* d with padded rows: the copy back would write the gaps */
    CHECK_OK(matmul_problem(37, 45, 29, 0, 0, 48, &p));
    on_gpu(&p);
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK_MSG(strstr(why, "d is not dense") != NULL, "%s", why);
    /* one row: nothing to cut */
    CHECK_OK(matmul_problem(1, 45, 29, 0, 0, 45, &p));
    on_gpu(&p);
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    /* n = 8192 f32 with c: 768 MiB of a, c and d rows, so 12 chunks (none over 64 MiB) of 683 rows,
     * the last 679, under auto */
    CHECK_OK(matmul_problem(8192, 8192, 8192, 0, 0, 8192, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_AUTO, &g, why, sizeof why));
    CHECK(g.nchunks == 12 && g.chunk == 683 && g.last == 679);
    /* n = 2048: 48 MiB moved, 8 chunks of 6 MiB; n = 1024: 12 MiB, three chunks of 4 MiB */
    CHECK_OK(matmul_problem(2048, 2048, 2048, 0, 0, 2048, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_AUTO, &g, why, sizeof why));
    CHECK(g.nchunks == 8 && g.chunk == 256);
    CHECK_OK(matmul_problem(1024, 1024, 1024, 0, 0, 1024, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_AUTO, &g, why, sizeof why));
    CHECK(g.nchunks == 3 && g.chunk == 342 && g.last == 340);
    /* 512: 3 MiB moved, under two chunks of 4 MiB */
    CHECK_OK(matmul_problem(512, 512, 512, 0, 0, 512, &p));
    on_gpu(&p);
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_AUTO, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    /* a matmul on the cpu is never pipelined */
    CHECK_OK(matmul_problem(8192, 8192, 8192, 0, 0, 8192, &p));
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
}

/* a (batch..., 37, 29) @ b (29, 45) or (batch..., 29, 45), d (batch..., 37, 45) */
static fm_status batched_problem(int nb, const int64_t *batch, int batched_b, unsigned epi, fm_problem *p)
{
    fm_tensor a, b, d;
    int64_t sa[4], sb[4], sd[4];
    for (int i = 0; i < nb; i++)
        sa[i] = sb[i] = sd[i] = batch[i];
    sa[nb] = 37, sa[nb + 1] = 29, sd[nb] = 37, sd[nb + 1] = 45;
    sb[batched_b ? nb : 0] = 29, sb[batched_b ? nb + 1 : 1] = 45;
    fm_tensor_init(&a, fake, cpu, FM_F32, nb + 2, sa, NULL);
    fm_tensor_init(&b, fake, cpu, FM_F32, batched_b ? nb + 2 : 2, sb, NULL);
    fm_tensor_init(&d, fake, cpu, FM_F32, nb + 2, sd, NULL);
    const fm_tensor *ts[FM_MATMUL_NSLOTS] = {&a, &b, NULL, NULL, &d};
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.execution = FM_EXECUTION_CPU;
    o.epilogue = epi;
    o.dropout = (epi & FM_EPILOGUE_DROPOUT) ? 0.5 : 0;
    fm_attachments att = {{0}};
    return fm_operation_build(ctx, fm_operation_for(FM_OP_MATMUL), ts, &o, p, &att);
}

static void test_matmul_batched(void)
{
    fm_problem p;
    fm_pipeline_geom g;
    char why[160];
    /* 6 products sharing b: slabs of the batch, b whole; with dropout the position moves 37 x 45 a slab */
    const int64_t six[1] = {6}, one_five[2] = {1, 5}, ones[2] = {1, 1};
    CHECK_OK(batched_problem(1, six, 0, FM_EPILOGUE_DROPOUT, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
    CHECK(g.extent == 6 && g.chunk == 1 && g.nchunks == 6);
    CHECK(g.split == (1u << FM_MATMUL_A | 1u << FM_MATMUL_D) && g.whole == 1u << FM_MATMUL_B);
    check_cover(&p, &g, 37 * 45);
    /* b batched too: cut with the others */
    CHECK_OK(batched_problem(1, six, 1, 0, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
    CHECK(g.split == (1u << FM_MATMUL_A | 1u << FM_MATMUL_B | 1u << FM_MATMUL_D) && g.whole == 0);
    check_cover(&p, &g, 0);
    /* (1, 5, ...): the outermost axis of more than one index is the second */
    CHECK_OK(batched_problem(2, one_five, 1, 0, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
    CHECK(g.extent == 5 && g.nchunks == 5);
    check_cover(&p, &g, 0);
    /* (1, 1, ...): row panels, as a plain product */
    CHECK_OK(batched_problem(2, ones, 0, 0, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
    CHECK(g.extent == 37 && g.chunk == 5 && g.last == 2);
    check_cover(&p, &g, 0);
}

static void test_matmul_declined(void)
{
    fm_problem p;
    fm_pipeline_geom g;
    char why[160];
    /* an operand on another GPU */
    CHECK_OK(matmul_problem(37, 45, 29, 0, 0, 45, &p));
    on_gpu(&p);
    p.t[FM_MATMUL_B].device = (fm_device){FM_DEVICE_CUDA, 1};
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK_MSG(strstr(why, "another GPU") != NULL, "%s", why);
    /* b already on the GPU: not moved, neither split nor whole */
    CHECK_OK(matmul_problem(37, 45, 29, 0, 0, 45, &p));
    on_gpu(&p);
    p.t[FM_MATMUL_B].device = gpu;
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
    CHECK(!((g.whole | g.split) & (1u << FM_MATMUL_B)));
}

static fm_status fft_problem(int64_t rows, int64_t cols, int axis, fm_problem *p)
{
    fm_tensor in, out;
    int64_t s[2] = {rows, cols};
    fm_tensor_init(&in, fake, cpu, FM_C64, 2, s, NULL);
    fm_tensor_init(&out, fake + 256, cpu, FM_C64, 2, s, NULL);
    const fm_tensor *ts[FM_FFT_NSLOTS] = {&in, &out};
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.naxes = 1;
    o.axes[0] = axis;
    o.execution = FM_EXECUTION_CPU;
    fm_attachments att = {{0}};
    return fm_operation_build(ctx, fm_operation_for(FM_OP_FFT), ts, &o, p, &att);
}

static void test_fft(void)
{
    fm_problem p;
    fm_pipeline_geom g;
    char why[160];
    /* 13 rows of 64 points over the last axis: slabs of 2 rows, the last of 1 */
    CHECK_OK(fft_problem(13, 64, 1, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
    CHECK(g.extent == 13 && g.chunk == 2 && g.nchunks == 7 && g.last == 1);
    CHECK(g.split == (1u << FM_FFT_IN | 1u << FM_FFT_OUT) && g.whole == 0);
    check_cover(&p, &g, 0);
    /* a callback in the chain: its offsets count from the whole operand, so it is staged whole */
    p.u.fft.epilog_ops |= FM_FFT_OP_CALLBACK;
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK_MSG(strstr(why, "callback") != NULL, "%s", why);
    /* over axis 0: the batch is the columns, whose slabs interleave */
    CHECK_OK(fft_problem(64, 13, 0, &p));
    on_gpu(&p);
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK_MSG(strstr(why, "overlap") != NULL, "%s", why);
    /* the benchmark's 8 transforms of 2^24 points: 2 GiB moved, one transform per chunk */
    CHECK_OK(fft_problem(8, 1 << 24, 1, &p));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_AUTO, &g, why, sizeof why));
    CHECK(g.nchunks == 8 && g.chunk == 1);
    /* 4 transforms of 2^26 points: a slab of 512 MiB in + 512 MiB out is over the ring's entry */
    CHECK_OK(fft_problem(4, 1 << 26, 1, &p));
    on_gpu(&p);
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_AUTO, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK_MSG(strstr(why, "over the pinned ring") != NULL, "%s", why);
    /* (1, 9, 64) over the last axis: the batch axis of one is passed over, slabs of the 9 */
    {
        fm_tensor i3, o3;
        int64_t s3[3] = {1, 9, 64};
        fm_tensor_init(&i3, fake, cpu, FM_C64, 3, s3, NULL);
        fm_tensor_init(&o3, fake + 256, cpu, FM_C64, 3, s3, NULL);
        const fm_tensor *t3[FM_FFT_NSLOTS] = {&i3, &o3};
        fm_fft_options o3o;
        fm_fft_options_init(&o3o);
        o3o.naxes = 1;
        o3o.axes[0] = 2;
        o3o.execution = FM_EXECUTION_CPU;
        fm_attachments a3 = {{0}};
        CHECK_OK(fm_operation_build(ctx, fm_operation_for(FM_OP_FFT), t3, &o3o, &p, &a3));
        on_gpu(&p);
        CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
        CHECK(g.extent == 9 && g.nchunks > 1);
        check_cover(&p, &g, 0);
    }
    /* a 1-d transform has no batch axis */
    fm_tensor in, out;
    int64_t n = 1 << 20;
    fm_tensor_init(&in, fake, cpu, FM_C64, 1, &n, NULL);
    fm_tensor_init(&out, fake + 256, cpu, FM_C64, 1, &n, NULL);
    const fm_tensor *ts[FM_FFT_NSLOTS] = {&in, &out};
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.execution = FM_EXECUTION_CPU;
    fm_attachments att = {{0}};
    CHECK_OK(fm_operation_build(ctx, fm_operation_for(FM_OP_FFT), ts, &o, &p, &att));
    on_gpu(&p);
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK_MSG(strstr(why, "no batch axis") != NULL, "%s", why);
}

static void test_rng(void)
{
    fm_problem p;
    fm_pipeline_geom g;
    char why[160];
    fm_tensor out;
    int64_t s[2] = {37, 3};
    fm_tensor_init(&out, fake, cpu, FM_F32, 2, s, NULL);
    const fm_tensor *ts[FM_RNG_NSLOTS] = {&out};
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = FM_RNG_NORMAL;
    o.execution = FM_EXECUTION_CPU;
    fm_attachments att = {{0}};
    CHECK_OK(fm_operation_build(ctx, fm_operation_for(FM_OP_RNG), ts, &o, &p, &att));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
    CHECK(g.extent == 37 && g.chunk == 5 && g.last == 2 && g.in_bytes == 0 && g.out_bytes == 37 * 3 * 4);
    check_cover(&p, &g, 3); /* block lo starts at value 3 lo of the stream */
    o.mode = FM_RNG_CURAND;
    CHECK_OK(fm_operation_build(ctx, fm_operation_for(FM_OP_RNG), ts, &o, &p, &att));
    on_gpu(&p);
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK_MSG(strstr(why, "curand") != NULL, "%s", why);
    /* 2^24 f32 values under auto: 64 MiB, 8 blocks of 2^21 */
    int64_t big = 1 << 24;
    fm_tensor_init(&out, fake, cpu, FM_F32, 1, &big, NULL);
    o.mode = FM_RNG_PORTABLE;
    CHECK_OK(fm_operation_build(ctx, fm_operation_for(FM_OP_RNG), ts, &o, &p, &att));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_AUTO, &g, why, sizeof why));
    CHECK(g.nchunks == 8 && g.chunk == 1 << 21);
    /* (1, 1, 45) values: the leading axes of one are passed over, blocks of the last axis */
    int64_t s3[3] = {1, 1, 45};
    fm_tensor_init(&out, fake, cpu, FM_F32, 3, s3, NULL);
    CHECK_OK(fm_operation_build(ctx, fm_operation_for(FM_OP_RNG), ts, &o, &p, &att));
    on_gpu(&p);
    CHECK_OK(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why));
    CHECK(g.extent == 45 && g.nchunks > 1);
    check_cover(&p, &g, 1);
}

static void test_solve_and_settings(void)
{
    fm_problem p;
    memset(&p, 0, sizeof p);
    p.op = FM_OP_SOLVE;
    p.exec_device = gpu;
    fm_pipeline_geom g;
    char why[160];
    CHECK_NA(fm_pipeline_geometry(&p, FM_PIPELINE_ON, &g, why, sizeof why), FM_ERR_NOT_APPLICABLE);
    CHECK_MSG(strstr(why, "no chunk hook") != NULL, "%s", why);
    /* FUSEMATH_PIPELINE: read once per context, in the plan key, a malformed value an error naming it */
    fm_settings s_on, s_off, s_auto;
    setenv("FUSEMATH_PIPELINE", "on", 1);
    CHECK_OK(fm_settings_read(&s_on));
    setenv("FUSEMATH_PIPELINE", "off", 1);
    CHECK_OK(fm_settings_read(&s_off));
    unsetenv("FUSEMATH_PIPELINE");
    CHECK_OK(fm_settings_read(&s_auto));
    CHECK(s_on.pipeline == FM_PIPELINE_ON && s_off.pipeline == FM_PIPELINE_OFF && s_auto.pipeline == FM_PIPELINE_AUTO);
    CHECK(s_on.plan_key != s_off.plan_key && s_on.plan_key != s_auto.plan_key);
    setenv("FUSEMATH_PIPELINE", "sometimes", 1);
    fm_context *bad = NULL;
    CHECK_STATUS(fm_context_create(&bad), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("FUSEMATH_PIPELINE");
    unsetenv("FUSEMATH_PIPELINE");
}

/* The cost model (fm_pipeline_predict) and auto's decline: with nothing to overlap (the copy-bound
 * FFT of 8 x 2^24) pipelining cannot beat staging whole, both use the same host copies; where the
 * compute is as long as the copies (f32 matmul 8192) it does; more staging threads are never slower. */
static double predict(const fm_profile *pf, const fm_problem *p, int threads, double *staged)
{
    fm_pipeline_geom g;
    char why[160];
    fm_problem q = *p;
    on_gpu(&q);
    CHECK_OK(fm_pipeline_geometry(&q, FM_PIPELINE_AUTO, &g, why, sizeof why));
    fm_dtype dt = FM_DTYPE_INVALID;
    int variant = -1;
    const double work = fm_operation_for(q.op)->problem_work(&q, &dt, &variant);
    CHECK(work > 0 && variant == (q.op == FM_OP_FFT && q.u.fft.naxes == 1));
    return fm_pipeline_predict(pf, &g, fm_profile_predict(pf, 1, FM_PROFILE_CURVE(q.op, variant), dt, 1, work),
                               threads, staged);
}

static void test_model(void)
{
    /* the H200's as measured there (2026-12-03): staging ~35 GB/s each way, the FFT 1.8 ms, the f32
     * matmul 8192 21.5 ms */
    fm_profile h200 = {.copy_latency = {1e-5, 1e-5}, .copy_rate = {35e9, 35e9}, .ncurves = 2};
    h200.curves[0] = (fm_rate_curve){FM_OP_FFT, FM_C64, FM_DEVICE_CUDA, 2, {1e6, 1.6e10}, {1e-5, 1.8e-3}};
    h200.curves[1] = (fm_rate_curve){FM_OP_MATMUL, FM_F32, FM_DEVICE_CUDA, 2, {1e9, 1.1e12}, {3e-5, 21.5e-3}};
    const fm_profile *pfs[2] = {NULL, &h200};
    for (int i = 0; i < 2; i++) {
        fm_problem fft, mm, small;
        CHECK_OK(fft_problem(8, 1 << 24, 1, &fft));
        CHECK_OK(matmul_problem(8192, 8192, 8192, 0, 0, 8192, &mm));
        double staged = 0, t;
        for (int threads = 1; threads <= 16; threads *= 2) {
            t = predict(pfs[i], &fft, threads, &staged);
            CHECK_MSG(t >= staged, "fft, %d threads: %g s pipelined < %g staged", threads, t, staged);
        }
        t = predict(pfs[i], &mm, 8, &staged);
        CHECK_MSG(t < 0.9 * staged, "matmul 8192: %g s pipelined, %g staged", t, staged);
        CHECK(predict(pfs[i], &mm, 1, NULL) > predict(pfs[i], &mm, 4, NULL));
        CHECK(predict(pfs[i], &mm, 8, NULL) == predict(pfs[i], &mm, 64, NULL)); /* the rate stops at 8 */
        /* the whole operands (b, c here) are copied before any chunk: at least their staged time */
        CHECK_OK(matmul_problem(2048, 2048, 2048, 0, 0, 2048, &small));
        fm_pipeline_geom g;
        char why[160];
        on_gpu(&small);
        CHECK_OK(fm_pipeline_geometry(&small, FM_PIPELINE_AUTO, &g, why, sizeof why));
        CHECK(fm_pipeline_predict(pfs[i], &g, 0, 8, NULL) >= fm_profile_copy_time(pfs[i], 0, g.whole_bytes));
        /* test_pipeline_gpu's auto case: 2048 x 2048 with k = 16 (a, c in, d out): copies only, staged */
        CHECK_OK(matmul_problem(2048, 2048, 16, 0, 0, 2048, &small));
        t = predict(pfs[i], &small, 8, &staged);
        CHECK_MSG(t >= staged, "k = 16: %g s pipelined < %g staged", t, staged);
    }
    /* calibrate's device->host rate is into fresh pages (a NumPy result: 3 against 39 GB/s on the H200):
     * the drains pay it as whole staging does, and the decisions stand */
    fm_profile fresh = h200;
    fresh.copy_rate[0] = 39e9, fresh.copy_rate[1] = 3e9;
    fm_problem fft, mm;
    CHECK_OK(fft_problem(8, 1 << 24, 1, &fft));
    CHECK_OK(matmul_problem(8192, 8192, 8192, 0, 0, 8192, &mm));
    double staged = 0, t = predict(&fresh, &fft, 8, &staged);
    CHECK_MSG(t >= staged, "fft, fresh pages: %g s pipelined < %g staged", t, staged);
    t = predict(&fresh, &mm, 8, &staged);
    CHECK_MSG(t < staged, "matmul 8192, fresh pages: %g s pipelined >= %g staged", t, staged);
}

int main(void)
{
    unsetenv("FUSEMATH_PIPELINE");
    CHECK_OK(fm_context_create(&ctx));
    RUN_TEST(test_matmul);
    RUN_TEST(test_matmul_batched);
    RUN_TEST(test_matmul_declined);
    RUN_TEST(test_fft);
    RUN_TEST(test_rng);
    RUN_TEST(test_solve_and_settings);
    RUN_TEST(test_model);
    fm_context_destroy(ctx);
    TEST_MAIN_RETURN();
}
