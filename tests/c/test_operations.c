/* test_operations.c : the generic operation interface (fm_op_slot_*, fm_output_specs,
 * fm_plan_create, fm_run, fm_autotune, fm_plan_execute_args, fm_plan_slot_info) for matmul and FFT
 * on the CPU, against naive references and the typed entry points. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "mmref.h"

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static fm_context *g_ctx;

static void test_slots(void)
{
    CHECK(fm_op_slot_count(FM_OP_MATMUL) == FM_MATMUL_NSLOTS);
    CHECK(fm_op_slot_count(FM_OP_FFT) == FM_FFT_NSLOTS);
    CHECK(fm_op_slot_count((fm_op)99) == 0);
    CHECK(strcmp(fm_op_slot_name(FM_OP_MATMUL, FM_MATMUL_BIAS), "bias") == 0);
    CHECK(strcmp(fm_op_slot_name(FM_OP_FFT, FM_FFT_OUT), "out") == 0);
    CHECK(strcmp(fm_op_slot_name(FM_OP_FFT, 9), "") == 0);
    CHECK(fm_op_slot_role(FM_OP_MATMUL, FM_MATMUL_A) == FM_SLOT_INPUT);
    CHECK(fm_op_slot_role(FM_OP_MATMUL, FM_MATMUL_D) == FM_SLOT_OUTPUT);
    CHECK(fm_op_slot_role(FM_OP_FFT, FM_FFT_OUT) == FM_SLOT_OUTPUT);
    CHECK(fm_op_slot_role(FM_OP_FFT, -1) == 0);
}

static int same_shape(const fm_tensor *t, int ndim, const int64_t *shape)
{
    if (t->ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i])
            return 0;
    return 1;
}

/* Output specs: shapes and dtypes of every output the options write, C-contiguous, and the
 * planner's errors for bad inputs. */
static void test_matmul_output_specs(void)
{
    float a[2 * 4 * 3], b[3 * 5];
    const int64_t sa[3] = {2, 4, 3}, sb[2] = {3, 5};
    fm_tensor ta, tb;
    fm_tensor_init(&ta, a, fm_test_cpu, FM_F32, 3, sa, NULL);
    fm_tensor_init(&tb, b, fm_test_cpu, FM_F32, 2, sb, NULL);
    const fm_tensor *t[FM_MATMUL_NSLOTS] = {&ta, &tb};
    fm_tensor specs[FM_MATMUL_NSLOTS];
    uint32_t written = 0;
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    CHECK_OK(fm_output_specs(FM_OP_MATMUL, t, FM_MATMUL_NSLOTS, &o, specs, &written));
    const int64_t d_shape[3] = {2, 4, 5};
    CHECK(written == 1u << FM_MATMUL_D);
    CHECK(same_shape(&specs[FM_MATMUL_D], 3, d_shape) && specs[FM_MATMUL_D].dtype == FM_F32);
    CHECK(specs[FM_MATMUL_D].strides[0] == 20 && specs[FM_MATMUL_D].strides[2] == 1);
    CHECK(specs[FM_MATMUL_D].device.type == FM_DEVICE_CPU && specs[FM_MATMUL_D].data == NULL);
    /* relu + aux: a u8 bit mask (batch, M, row bytes of N) */
    o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_AUX;
    CHECK_OK(fm_output_specs(FM_OP_MATMUL, t, FM_MATMUL_NSLOTS, &o, specs, &written));
    const int64_t mask_shape[3] = {2, 4, fm_relu_mask_row_bytes(5)};
    CHECK(written == ((1u << FM_MATMUL_D) | (1u << FM_MATMUL_AUX)));
    CHECK(same_shape(&specs[FM_MATMUL_AUX], 3, mask_shape) && specs[FM_MATMUL_AUX].dtype == FM_U8);
    /* gelu + aux: the activation input, D's dtype and shape */
    o.epilogue = FM_EPILOGUE_GELU | FM_EPILOGUE_AUX;
    CHECK_OK(fm_output_specs(FM_OP_MATMUL, t, FM_MATMUL_NSLOTS, &o, specs, &written));
    CHECK(same_shape(&specs[FM_MATMUL_AUX], 3, d_shape) && specs[FM_MATMUL_AUX].dtype == FM_F32);
    /* bgrada: (batch, M) */
    o.epilogue = FM_EPILOGUE_BGRADA;
    CHECK_OK(fm_output_specs(FM_OP_MATMUL, t, FM_MATMUL_NSLOTS, &o, specs, &written));
    const int64_t bg_shape[2] = {2, 4};
    CHECK(written == ((1u << FM_MATMUL_D) | (1u << FM_MATMUL_BGRAD)));
    CHECK(same_shape(&specs[FM_MATMUL_BGRAD], 2, bg_shape));
    /* the planner's checks: K mismatch, mixed dtypes, a bad epilogue */
    o.epilogue = 0;
    const int64_t sb2[2] = {4, 5};
    fm_tensor tb2;
    fm_tensor_init(&tb2, b, fm_test_cpu, FM_F32, 2, sb2, NULL);
    const fm_tensor *t2[FM_MATMUL_NSLOTS] = {&ta, &tb2};
    CHECK_STATUS(fm_output_specs(FM_OP_MATMUL, t2, FM_MATMUL_NSLOTS, &o, specs, &written), FM_ERR_SHAPE);
    CHECK_ERROR_MENTIONS("K = 3");
    fm_tensor_init(&tb2, b, fm_test_cpu, FM_F64, 2, sb, NULL);
    CHECK_STATUS(fm_output_specs(FM_OP_MATMUL, t2, FM_MATMUL_NSLOTS, &o, specs, &written), FM_ERR_DTYPE);
    o.epilogue = FM_EPILOGUE_RELU | FM_EPILOGUE_GELU;
    CHECK_STATUS(fm_output_specs(FM_OP_MATMUL, t, FM_MATMUL_NSLOTS, &o, specs, &written), FM_ERR_INVALID_ARGUMENT);
    /* the arguments themselves */
    CHECK_STATUS(fm_output_specs(FM_OP_MATMUL, t, 3, &o, specs, &written), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("nslots = 3");
    CHECK_STATUS(fm_output_specs((fm_op)42, t, 3, &o, specs, &written), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_output_specs(FM_OP_MATMUL, t, FM_MATMUL_NSLOTS, &o, NULL, &written), FM_ERR_INVALID_ARGUMENT);
}

static void test_fft_output_specs(void)
{
    float x[6 * 8];
    const int64_t sx[2] = {6, 8};
    fm_tensor tx;
    fm_tensor_init(&tx, x, fm_test_cpu, FM_F32, 2, sx, NULL);
    const fm_tensor *t[FM_FFT_NSLOTS] = {&tx};
    fm_tensor specs[FM_FFT_NSLOTS];
    uint32_t written = 0;
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.kind = FM_FFT_R2C;
    CHECK_OK(fm_output_specs(FM_OP_FFT, t, FM_FFT_NSLOTS, &o, specs, &written));
    const int64_t r2c_shape[2] = {6, 5};
    CHECK(written == 1u << FM_FFT_OUT);
    CHECK(same_shape(&specs[FM_FFT_OUT], 2, r2c_shape) && specs[FM_FFT_OUT].dtype == FM_C64);
    /* c2r: 2 (m - 1) points, or last_n */
    fm_tensor_init(&tx, x, fm_test_cpu, FM_C64, 2, r2c_shape, NULL);
    o.kind = FM_FFT_C2R;
    o.inverse = 1;
    CHECK_OK(fm_output_specs(FM_OP_FFT, t, FM_FFT_NSLOTS, &o, specs, &written));
    const int64_t c2r_shape[2] = {6, 8}, c2r_odd[2] = {6, 9};
    CHECK(same_shape(&specs[FM_FFT_OUT], 2, c2r_shape) && specs[FM_FFT_OUT].dtype == FM_F32);
    o.last_n = 9;
    CHECK_OK(fm_output_specs(FM_OP_FFT, t, FM_FFT_NSLOTS, &o, specs, &written));
    CHECK(same_shape(&specs[FM_FFT_OUT], 2, c2r_odd));
    o.last_n = 12; /* 12 / 2 + 1 = 7 != 5 */
    CHECK_STATUS(fm_output_specs(FM_OP_FFT, t, FM_FFT_NSLOTS, &o, specs, &written), FM_ERR_SHAPE);
    o.last_n = 0;
    /* m = 2^62 + 2 (one-byte elements: the byte span fits): 2 (m - 1) is past 64 bits, refused
     * before the dtype is looked at (the fuzzer's find: it overflowed) */
    const int64_t huge[1] = {(1LL << 62) + 2}, zero[1] = {0};
    fm_tensor_init(&tx, x, fm_test_cpu, FM_U8, 1, huge, zero);
    CHECK_STATUS(fm_output_specs(FM_OP_FFT, t, FM_FFT_NSLOTS, &o, specs, &written), FM_ERR_TOO_LARGE);
    CHECK_ERROR_MENTIONS("in.shape[0]");
    o.kind = FM_FFT_C2C; /* a c2c of real data: the dtype rule of planning */
    o.inverse = 0;
    fm_tensor_init(&tx, x, fm_test_cpu, FM_F32, 2, sx, NULL);
    CHECK_STATUS(fm_output_specs(FM_OP_FFT, t, FM_FFT_NSLOTS, &o, specs, &written), FM_ERR_DTYPE);
    CHECK_ERROR_MENTIONS("r2c");
}

/* fm_plan_create is the typed entry's plan (one cache entry), fm_run computes what a naive loop does. */
static void test_create_and_run(void)
{
    enum { M = 5, K = 4, N = 3 };
    double a[M * K], b[K * N], bias[N], d[M * N], want[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = sin(0.3 * i);
    for (int i = 0; i < K * N; i++)
        b[i] = cos(0.7 * i);
    for (int j = 0; j < N; j++)
        bias[j] = 0.25 * j - 0.4;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = bias[j];
            for (int k = 0; k < K; k++)
                s += a[i * K + k] * b[k * N + j];
            want[i * N + j] = s > 0 ? s : 0;
        }
    const int64_t sa[2] = {M, K}, sb[2] = {K, N}, sbias[1] = {N}, sd[2] = {M, N};
    fm_tensor ta, tb, tbias, td;
    fm_tensor_init(&ta, a, fm_test_cpu, FM_F64, 2, sa, NULL);
    fm_tensor_init(&tb, b, fm_test_cpu, FM_F64, 2, sb, NULL);
    fm_tensor_init(&tbias, bias, fm_test_cpu, FM_F64, 1, sbias, NULL);
    fm_tensor_init(&td, d, fm_test_cpu, FM_F64, 2, sd, NULL);
    const fm_tensor *t[FM_MATMUL_NSLOTS] = {&ta, &tb, NULL, &tbias, &td};
    fm_matmul_options o;
    fm_matmul_options_init(&o);
    o.epilogue = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU;
    fm_context_clear_cache(g_ctx);
    fm_plan *p1 = NULL, *p2 = NULL;
    CHECK_OK(fm_plan_create(g_ctx, FM_OP_MATMUL, t, FM_MATMUL_NSLOTS, &o, &p1));
    CHECK_OK(fm_matmul_plan_v(g_ctx, t, &o, &p2));
    CHECK(p1 && p1 == p2 && fm_context_cache_size(g_ctx) == 1);
    CHECK(p1 && fm_plan_op(p1) == FM_OP_MATMUL);
    memset(d, 0, sizeof d);
    CHECK_OK(fm_run(g_ctx, FM_OP_MATMUL, t, FM_MATMUL_NSLOTS, &o, NULL, NULL));
    double err = 0;
    for (int i = 0; i < M * N; i++)
        err = fmax(err, fabs(d[i] - want[i]));
    CHECK_MSG(err < 1e-12, "fm_run: max error %g against the naive loop", err);
    /* slot info: the normalised descriptors the plan holds (documented), bias expanded to (1, N) */
    fm_tensor desc;
    int used = -1;
    CHECK_OK(fm_plan_slot_info(p1, FM_MATMUL_BIAS, &desc, &used));
    CHECK(used == 1 && desc.data == NULL && desc.ndim == 2 && desc.shape[0] == 1 && desc.shape[1] == N);
    CHECK_OK(fm_plan_slot_info(p1, FM_MATMUL_C, &desc, &used));
    CHECK(used == 0);
    CHECK_STATUS(fm_plan_slot_info(p1, FM_MATMUL_NSLOTS, &desc, &used), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("slot = 10");
    /* per-call arguments: matmul's row takes ints[0..3] (dropout reads ints[0] and ints[3]); reals
     * are refused, naming the field */
    void *ptrs[FM_MATMUL_NSLOTS] = {a, b, NULL, bias, d};
    fm_exec_args args;
    fm_exec_args_init(&args);
    CHECK_OK(fm_plan_execute_args(p1, ptrs, FM_MATMUL_NSLOTS, &args, NULL));
    args.ints[3] = 7; /* read by dropout only: ignored here */
    CHECK_OK(fm_plan_execute_args(p1, ptrs, FM_MATMUL_NSLOTS, &args, NULL));
    fm_exec_args_init(&args);
    args.reals[0] = 0.5;
    CHECK_STATUS(fm_plan_execute_args(p1, ptrs, FM_MATMUL_NSLOTS, &args, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("args.reals[0]");
    int64_t info[2];
    fm_exec_args_init(&args);
    args.info = info;
    args.ninfo = 2;
    CHECK_STATUS(fm_plan_execute_args(p1, ptrs, FM_MATMUL_NSLOTS, &args, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("args.info");
    fm_exec_args_init(&args);
    args.reserved[1] = 1;
    CHECK_STATUS(fm_plan_execute_args(p1, ptrs, FM_MATMUL_NSLOTS, &args, NULL), FM_ERR_INVALID_ARGUMENT);
    fm_exec_args_init(&args);
    args.flags = 2; /* no such FM_EXEC_* bit */
    CHECK_STATUS(fm_plan_execute_args(p1, ptrs, FM_MATMUL_NSLOTS, &args, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("args.flags = 2");
    fm_plan_release(p1);
    fm_plan_release(p2);
    /* the generic entries' own arguments */
    CHECK_STATUS(fm_run(g_ctx, (fm_op)77, t, FM_MATMUL_NSLOTS, &o, NULL, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("run: op = 77");
    CHECK_STATUS(fm_plan_create(g_ctx, FM_OP_MATMUL, NULL, FM_MATMUL_NSLOTS, &o, &p1), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_plan_create(NULL, FM_OP_MATMUL, t, FM_MATMUL_NSLOTS, &o, &p1), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("ctx");
}

/* FFT has no autotune candidates: fm_autotune gives the ordinary plan and leaves wisdom as the
 * CPU FFT's own timing made it (it once recorded an untuned entry over it that no load took). */
static void test_fft_autotune_keeps_wisdom(void)
{
    enum { ROWS = 64, N = 4096 };
    float complex *x = malloc(sizeof *x * ROWS * N), *y = malloc(sizeof *y * ROWS * N);
    if (!x || !y) {
        free(x), free(y);
        CHECK(0);
        return;
    }
    for (int i = 0; i < ROWS * N; i++)
        x[i] = (float)sin(0.01 * i) + I * (float)cos(0.02 * i);
    const int64_t s[2] = {ROWS, N};
    fm_tensor tx, ty;
    fm_tensor_init(&tx, x, fm_test_cpu, FM_C64, 2, s, NULL);
    fm_tensor_init(&ty, y, fm_test_cpu, FM_C64, 2, s, NULL);
    const fm_tensor *t[FM_FFT_NSLOTS] = {&tx, &ty};
    fm_fft_options o;
    fm_fft_options_init(&o);
    o.effort = FM_FFT_EFFORT_MEASURE;
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    fm_plan *p = NULL, *q = NULL;
    CHECK_OK(fm_plan_create(ctx, FM_OP_FFT, t, FM_FFT_NSLOTS, &o, &p)); /* timed: one wisdom entry */
    const int entries = fm_context_wisdom_size(ctx);
    CHECK_OK(fm_autotune(ctx, FM_OP_FFT, t, FM_FFT_NSLOTS, &o, 2, &q));
    CHECK(entries >= 1);
    CHECK(q && p && strcmp(fm_plan_describe(p), fm_plan_describe(q)) == 0);
    CHECK(fm_context_wisdom_size(ctx) == entries);
    char file[96];
    snprintf(file, sizeof file, "/tmp/fm_test_operations_%ld", (long)getpid());
    CHECK_OK(fm_context_wisdom_save(ctx, file));
    fm_context *ctx2 = NULL;
    CHECK_OK(fm_context_create(&ctx2));
    CHECK_OK(fm_context_wisdom_load(ctx2, file));
    CHECK(fm_context_wisdom_size(ctx2) == entries);
    remove(file);
    fm_plan_release(p);
    fm_plan_release(q);
    fm_context_destroy(ctx);
    fm_context_destroy(ctx2);
    free(x);
    free(y);
}

/* d = a @ b (4 x 4 f64) with d at `dp` (row stride drs) while a is at ap and b at bp (row strides 4
 * and brs), through FM_EXEC_OVERLAP_COPY; compared with the product of copies made before. */
static void overlap_case(const char *label, double *ap, double *bp, int64_t brs, double *dp, int64_t drs,
                         int overlaps)
{
    double a0[16], b0[16], want[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            a0[i * 4 + j] = ap[i * 4 + j], b0[i * 4 + j] = bp[i * brs + j];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            want[i * 4 + j] = 0;
            for (int k = 0; k < 4; k++)
                want[i * 4 + j] += a0[i * 4 + k] * b0[k * 4 + j];
        }
    const int64_t s44[2] = {4, 4}, st_a[2] = {4, 1}, st_b[2] = {brs, 1}, st_d[2] = {drs, 1};
    fm_tensor A, B, D;
    fm_tensor_init(&A, ap, fm_test_cpu, FM_F64, 2, s44, st_a);
    fm_tensor_init(&B, bp, fm_test_cpu, FM_F64, 2, s44, st_b);
    fm_tensor_init(&D, dp, fm_test_cpu, FM_F64, 2, s44, st_d);
    fm_plan *plan = NULL;
    CHECK_OK(fm_matmul_plan(g_ctx, &A, &B, NULL, NULL, &D, NULL, NULL, &plan));
    if (!plan)
        return;
    void *ptrs[FM_MATMUL_NSLOTS] = {ap, bp, NULL, NULL, dp};
    fm_exec_args args;
    fm_exec_args_init(&args);
    if (overlaps) { /* refused without the flag, naming the slots */
        CHECK_STATUS(fm_plan_execute(plan, ptrs, FM_MATMUL_NSLOTS, NULL), FM_ERR_ALIAS);
        CHECK_ERROR_MENTIONS("output d overlaps input");
    }
    args.flags = FM_EXEC_OVERLAP_COPY;
    CHECK_OK(fm_plan_execute_args(plan, ptrs, FM_MATMUL_NSLOTS, &args, NULL));
    CHECK(fm_last_error()[0] == '\0');
    int bad = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            bad += fabs(dp[i * drs + j] - want[i * 4 + j]) > 1e-12;
    CHECK_MSG(bad == 0, "%s: %d elements differ", label, bad);
    fm_plan_release(plan);
}

static void test_overlap_copy(void)
{
    double x[64], y[64], z[64];
    for (int i = 0; i < 64; i++)
        x[i] = 1 + i % 5, y[i] = 2 - i % 3, z[i] = -7.0;
    overlap_case("d = a", x, y, 4, x, 4, 1);
    for (int i = 0; i < 64; i++)
        x[i] = 1 + i % 5;
    overlap_case("d = b", y, x, 4, x, 4, 1);
    for (int i = 0; i < 64; i++)
        x[i] = 1 + i % 7;
    overlap_case("d shifted over b", y, x, 4, x + 6, 4, 1);
    /* b in columns 0..3 and d in columns 4..7 of one 4 x 8 block: the byte spans overlap, the
     * elements do not; the copy out writes d's elements only (b stays as it was) */
    for (int i = 0; i < 32; i++)
        z[i] = (i % 8) < 4 ? 1 + i % 3 : -7.0;
    double b_before[32];
    memcpy(b_before, z, sizeof b_before);
    overlap_case("d interleaved with b", y, z, 8, z + 4, 8, 1);
    int same = 1;
    for (int i = 0; i < 32; i++)
        same &= (i % 8) >= 4 || z[i] == b_before[i];
    CHECK_MSG(same, "b, between d's rows, was written");
    overlap_case("no overlap: the flag changes nothing", x, y, 4, z + 32, 4, 0);
}

int main(void)
{
    if (fm_context_create(&g_ctx) != FM_OK) {
        printf("fm_context_create failed: %s\n", fm_last_error());
        return 1;
    }
    RUN_TEST(test_slots);
    RUN_TEST(test_matmul_output_specs);
    RUN_TEST(test_fft_output_specs);
    RUN_TEST(test_create_and_run);
    RUN_TEST(test_fft_autotune_keeps_wisdom);
    RUN_TEST(test_overlap_copy);
    fm_context_destroy(g_ctx);
    TEST_MAIN_RETURN();
}
