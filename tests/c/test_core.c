/* test_core.c : status table, errors, tensors, dtypes, epilogue names, context basics. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- status table ---- */
static void test_status_table(void)
{
    static const struct { fm_status s; const char *name; const char *msg; } rows[] = {
#define ROW(name, value, message) {name, #name, message},
        FM_STATUS_TABLE(ROW)
#undef ROW
    };
    const int n = (int)(sizeof rows / sizeof rows[0]);
    CHECK(n == (int)FM_STATUS_COUNT_);
    CHECK(FM_OK == 0);
    for (int i = 0; i < n; ++i) {
        const char *name = fm_status_name(rows[i].s);
        const char *msg = fm_status_string(rows[i].s);
        CHECK_MSG(rows[i].s == (fm_status)i, "status %s has value %d, expected %d", rows[i].name, (int)rows[i].s, i);
        CHECK_MSG(name && strcmp(name, rows[i].name) == 0, "fm_status_name(%d) = \"%s\", expected \"%s\"", i,
                  name ? name : "(null)", rows[i].name);
        CHECK_MSG(msg && strcmp(msg, rows[i].msg) == 0, "fm_status_string(%d) = \"%s\", expected \"%s\"", i,
                  msg ? msg : "(null)", rows[i].msg);
        for (int j = 0; j < i; ++j) {
            const char *name2 = fm_status_name(rows[j].s), *msg2 = fm_status_string(rows[j].s);
            CHECK_MSG(name && name2 && strcmp(name, name2) != 0, "statuses %d and %d share a name", i, j);
            CHECK_MSG(msg && msg2 && strcmp(msg, msg2) != 0, "statuses %d and %d share a message", i, j);
        }
    }
    const int outside[] = {-1, (int)FM_STATUS_COUNT_, 99, 1 << 30, -2147483647 - 1};
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; ++i) {
        const char *name = fm_status_name((fm_status)outside[i]);
        const char *msg = fm_status_string((fm_status)outside[i]);
        CHECK_MSG(name && strcmp(name, "FM_UNKNOWN_STATUS") == 0, "fm_status_name(%d) = \"%s\"", outside[i],
                  name ? name : "(null)");
        CHECK_MSG(msg != NULL && msg[0] != '\0', "fm_status_string(%d) must still return a message", outside[i]);
    }
}

/* ---- last error ---- */
typedef struct {
    char seen_at_start[256];
    char own_message[256];
    fm_status own_status;
} thread_probe;

static void *error_thread(void *arg)
{
    thread_probe *p = arg;
    snprintf(p->seen_at_start, sizeof p->seen_at_start, "%s", fm_last_error() ? fm_last_error() : "(null)");
    fm_tensor t;
    int64_t shape[1] = {-5};
    p->own_status = fm_tensor_init(&t, NULL, (fm_device){FM_DEVICE_CPU, 0}, FM_F32, 1, shape, NULL);
    snprintf(p->own_message, sizeof p->own_message, "%s", fm_last_error() ? fm_last_error() : "(null)");
    return NULL;
}

static void test_last_error(void)
{
    fm_clear_error();
    CHECK(fm_last_error() != NULL && fm_last_error()[0] == '\0');

    fm_tensor t;
    int64_t shape[2] = {2, 3};
    fm_status s = fm_tensor_init(&t, NULL, (fm_device){FM_DEVICE_CPU, 0}, FM_F32, FM_MAX_NDIM + 1, shape, NULL);
    char mine[256];
    snprintf(mine, sizeof mine, "%s", fm_last_error());
    CHECK(s == FM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(mine[0] != '\0', "a failure must leave a detail message");

    thread_probe probe;
    memset(&probe, 0, sizeof probe);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, error_thread, &probe) == 0);
    pthread_join(th, NULL);
    CHECK_MSG(strcmp(probe.seen_at_start, "") == 0, "a new thread sees \"%s\" instead of \"\"", probe.seen_at_start);
    CHECK(probe.own_status == FM_ERR_INVALID_ARGUMENT);
    CHECK(probe.own_message[0] != '\0');
    CHECK_MSG(strcmp(fm_last_error(), mine) == 0, "main thread's message changed from \"%s\" to \"%s\"", mine,
              fm_last_error());

    fm_clear_error();
    CHECK(fm_last_error()[0] == '\0');
}

/* ---- tensors ---- */
static void test_tensor_init(void)
{
    fm_tensor t;
    const fm_device cpu = {FM_DEVICE_CPU, 0};
    float buf[24];
    int64_t shape[3] = {2, 3, 4};
    CHECK_OK(fm_tensor_init(&t, buf, cpu, FM_F32, 3, shape, NULL));
    CHECK(t.data == buf && t.dtype == FM_F32 && t.ndim == 3);
    CHECK(t.device.type == FM_DEVICE_CPU && t.device.id == 0);
    CHECK(t.shape[0] == 2 && t.shape[1] == 3 && t.shape[2] == 4);
    CHECK_MSG(t.strides[0] == 12 && t.strides[1] == 4 && t.strides[2] == 1, "strides (%lld, %lld, %lld)",
              (long long)t.strides[0], (long long)t.strides[1], (long long)t.strides[2]);
    CHECK(fm_tensor_numel(&t) == 24);

    int64_t strides[3] = {-1, 0, 7};
    CHECK_OK(fm_tensor_init(&t, buf, cpu, FM_C128, 3, shape, strides));
    CHECK(t.strides[0] == -1 && t.strides[1] == 0 && t.strides[2] == 7);
    CHECK(t.dtype == FM_C128);

    int64_t zshape[2] = {5, 0};
    CHECK_OK(fm_tensor_init(&t, NULL, cpu, FM_F64, 2, zshape, NULL));
    CHECK(fm_tensor_numel(&t) == 0);

    CHECK_OK(fm_tensor_init(&t, buf, cpu, FM_F64, 0, shape, NULL));
    CHECK(t.ndim == 0 && fm_tensor_numel(&t) == 1);

    int64_t big[FM_MAX_NDIM];
    for (int i = 0; i < FM_MAX_NDIM; ++i) big[i] = 2;
    CHECK_OK(fm_tensor_init(&t, buf, cpu, FM_F32, FM_MAX_NDIM, big, NULL));
    CHECK(fm_tensor_numel(&t) == 256 && t.strides[0] == 128 && t.strides[FM_MAX_NDIM - 1] == 1);

    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, FM_F32, FM_MAX_NDIM + 1, big, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, FM_F32, -1, shape, NULL), FM_ERR_INVALID_ARGUMENT);
    int64_t neg[2] = {3, -1};
    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, FM_F32, 2, neg, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, FM_DTYPE_INVALID, 3, shape, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, (fm_dtype)FM_DTYPE_COUNT_, 3, shape, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, (fm_dtype)-3, 3, shape, NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_tensor_init(NULL, buf, cpu, FM_F32, 3, shape, NULL), FM_ERR_INVALID_ARGUMENT);
    /* more elements than an int64 counts: refused with explicit strides too (zero strides make such a
     * view cheap to describe), as with NULL strides; zero extents count as 1 wherever they sit */
    const int64_t huge[3] = {1LL << 40, 1LL << 40, 16}, zero_strides[3] = {0, 0, 0};
    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, FM_F32, 3, huge, zero_strides), FM_ERR_TOO_LARGE);
    CHECK_ERROR_MENTIONS("64-bit");
    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, FM_F32, 3, huge, NULL), FM_ERR_TOO_LARGE);
    const int64_t zero_first[3] = {0, 1LL << 40, 1LL << 40}, zero_last[3] = {1LL << 40, 1LL << 40, 0};
    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, FM_F32, 3, zero_first, zero_strides), FM_ERR_TOO_LARGE);
    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, FM_F32, 3, zero_last, zero_strides), FM_ERR_TOO_LARGE);
    CHECK_STATUS(fm_tensor_init(&t, buf, cpu, FM_F32, 3, zero_first, NULL), FM_ERR_TOO_LARGE);
    const int64_t big_empty[3] = {1LL << 30, 0, 1LL << 30};
    CHECK_OK(fm_tensor_init(&t, buf, cpu, FM_F32, 3, big_empty, zero_strides));
    CHECK(fm_tensor_numel(&t) == 0);
}

/* ---- dtypes ---- */
static void test_dtypes(void)
{
    static const struct { fm_dtype t; size_t size; const char *name; int cplx; } rows[] = {
        {FM_F16, 2, "f16", 0}, {FM_BF16, 2, "bf16", 0}, {FM_F32, 4, "f32", 0},  {FM_F64, 8, "f64", 0},
        {FM_C64, 8, "c64", 1}, {FM_C128, 16, "c128", 1}, {FM_I8, 1, "i8", 0},   {FM_U8, 1, "u8", 0},
        {FM_I32, 4, "i32", 0}, {FM_I64, 8, "i64", 0},    {FM_U32, 4, "u32", 0},
        {FM_F8E4M3, 1, "f8e4m3", 0}, {FM_F8E5M2, 1, "f8e5m2", 0}, {FM_C32, 4, "c32", 1},
        {FM_I16, 2, "i16", 0}, {FM_U16, 2, "u16", 0},    {FM_U64, 8, "u64", 0}, {FM_BOOL, 1, "bool", 0},
        {FM_LD, sizeof(long double), "ld", 0}, {FM_CLD, 2 * sizeof(long double), "cld", 1},
    };
    const int n = (int)(sizeof rows / sizeof rows[0]);
    CHECK(n == (int)FM_DTYPE_COUNT_ - 1);
    for (int i = 0; i < n; ++i) {
        const char *name = fm_dtype_name(rows[i].t);
        CHECK_MSG(fm_dtype_size(rows[i].t) == rows[i].size, "size of %s is %zu", rows[i].name,
                  fm_dtype_size(rows[i].t));
        CHECK_MSG(name && strcmp(name, rows[i].name) == 0, "name of %d is \"%s\", expected \"%s\"", (int)rows[i].t,
                  name ? name : "(null)", rows[i].name);
        CHECK_MSG(fm_dtype_is_complex(rows[i].t) == rows[i].cplx, "is_complex(%s)", rows[i].name);
    }
    CHECK(fm_dtype_size(FM_DTYPE_INVALID) == 0);
    CHECK(fm_dtype_size((fm_dtype)FM_DTYPE_COUNT_) == 0);
    CHECK(fm_dtype_size((fm_dtype)1000) == 0);
    CHECK(fm_dtype_name(FM_DTYPE_INVALID) && strcmp(fm_dtype_name(FM_DTYPE_INVALID), "invalid") == 0);
    CHECK(fm_dtype_name((fm_dtype)1000) && strcmp(fm_dtype_name((fm_dtype)1000), "invalid") == 0);
    CHECK(fm_dtype_name((fm_dtype)-1) && strcmp(fm_dtype_name((fm_dtype)-1), "invalid") == 0);
    CHECK(fm_dtype_is_complex((fm_dtype)1000) == 0);

    static const char *const ops[] = {"matmul", "fft", "rng", "solve"};
    for (int i = 0; i < (int)FM_OP_COUNT_; ++i)
        CHECK_MSG(fm_op_name((fm_op)i) && strcmp(fm_op_name((fm_op)i), ops[i]) == 0, "fm_op_name(%d)", i);
}

/* ---- epilogues ---- */
static void test_epilogue_parse(void)
{
    const unsigned B = FM_EPILOGUE_BIAS, R = FM_EPILOGUE_RELU, G = FM_EPILOGUE_GELU, X = FM_EPILOGUE_AUX;
    static const char *const names[] = {
        "identity", "none", "default", "DEFAULT", "Identity", "relu", "RELU", "gelu", "GELU", "bias", "BIAS",
        "bias+relu", "relu+bias", "ReLU+Bias", "RELU_BIAS", "relu_bias", "relu_aux", "RELU_AUX", "RELU_AUX_BIAS",
        "relu+aux+bias", "gelu+bias", "GELU_BIAS", "GELU_AUX", "gelu+aux", "GELU_AUX_BIAS", "gelu+bias+aux",
        "Gelu_Aux_Bias",
    };
    const unsigned want[] = {
        0, 0, 0, 0, 0, R, R, G, G, B, B, B | R, B | R, B | R, B | R, B | R, R | X, R | X, R | X | B,
        R | X | B, G | B, G | B, G | X, G | X, G | X | B, G | B | X, G | X | B,
    };
    CHECK(sizeof names / sizeof names[0] == sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        unsigned e = 0xdeadu;
        fm_status s = fm_epilogue_parse(names[i], &e);
        CHECK_MSG(s == FM_OK && e == want[i], "parse(\"%s\") -> %s, 0x%x; expected 0x%x", names[i], fm_status_name(s),
                  e, want[i]);
    }

    unsigned e = 0;
    CHECK_STATUS(fm_epilogue_parse("relu+swish", &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("swish");
    CHECK_STATUS(fm_epilogue_parse("SOFTMAX_BIAS", &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("softmax");
    CHECK_STATUS(fm_epilogue_parse("frobnicate", &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("frobnicate");
    CHECK_STATUS(fm_epilogue_parse("relu+gelu", &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_epilogue_parse("GELU_RELU", &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_epilogue_parse(NULL, &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_epilogue_parse("relu", NULL), FM_ERR_INVALID_ARGUMENT);
    /* malformed or repeated terms are refused, not guessed at; e keeps its value */
    static const char *const malformed[] = {
        "", "relu++bias", "+relu", "relu+", "RELU BIAS", "relu,bias", "relu|bias", " relu", "relu+relu",
        "RELU_AUX_BIAS_BIAS", "identity+relu", "none_none", "relu__aux", "_", "+",
    };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; ++i) {
        e = 0xbeefu;
        fm_status s = fm_epilogue_parse(malformed[i], &e);
        CHECK_MSG(s == FM_ERR_INVALID_ARGUMENT && e == 0xbeefu, "parse(\"%s\") -> %s, 0x%x; expected a refusal",
                  malformed[i], fm_status_name(s), e);
        CHECK_MSG(strstr(fm_last_error(), "epilogue") != NULL, "parse(\"%s\"): message '%s'", malformed[i],
                  fm_last_error());
    }
    CHECK_STATUS(fm_epilogue_parse("relu+relu", &e), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("twice");
}

static void test_epilogue_format(void)
{
    const unsigned B = FM_EPILOGUE_BIAS, R = FM_EPILOGUE_RELU, G = FM_EPILOGUE_GELU, X = FM_EPILOGUE_AUX;
    char buf[64];
    static const struct { unsigned e; const char *name; } exact[] = {
        {0, "identity"}, {FM_EPILOGUE_RELU, "relu"}, {FM_EPILOGUE_GELU, "gelu"}, {FM_EPILOGUE_BIAS, "bias"},
        {FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU, "bias+relu"},
    };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; ++i) {
        memset(buf, 0, sizeof buf);
        CHECK_OK(fm_epilogue_format(exact[i].e, buf, sizeof buf));
        CHECK_MSG(strcmp(buf, exact[i].name) == 0, "format(0x%x) = \"%s\", expected \"%s\"", exact[i].e, buf,
                  exact[i].name);
    }
    /* Every valid combination survives format -> parse. */
    const unsigned valid[] = {0, B, R, G, B | R, B | G, R | X, G | X, B | R | X, B | G | X};
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; ++i) {
        unsigned back = 0xdeadu;
        memset(buf, 0, sizeof buf);
        CHECK_OK(fm_epilogue_format(valid[i], buf, sizeof buf));
        fm_status s = fm_epilogue_parse(buf, &back);
        CHECK_MSG(s == FM_OK && back == valid[i], "format(0x%x) = \"%s\" parses back to 0x%x", valid[i], buf, back);
    }
    /* Too small a buffer: an error, and nothing written past `size`. */
    memset(buf, 'Z', sizeof buf);
    fm_status s = fm_epilogue_format(B | R, buf, 4);
    CHECK_MSG(s != FM_OK, "format into 4 bytes of \"bias+relu\" returned FM_OK");
    for (size_t i = 4; i < sizeof buf; ++i) CHECK_MSG(buf[i] == 'Z', "byte %zu past the buffer was written", i);
    CHECK_MSG(memchr(buf, '\0', 4) != NULL, "format into 4 bytes left the buffer unterminated");
    memset(buf, 'Z', sizeof buf);
    CHECK_STATUS(fm_epilogue_format(R | G, buf, sizeof buf), FM_ERR_INVALID_ARGUMENT);
    CHECK_MSG(buf[0] == '\0', "a refused format left the buffer unterminated");
    CHECK_STATUS(fm_epilogue_format(1u << 10, buf, sizeof buf), FM_ERR_INVALID_ARGUMENT);
    /* combinations that fm_epilogue_parse rejects cannot be formatted either */
    CHECK_STATUS(fm_epilogue_format(R | G, buf, sizeof buf), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_epilogue_format(X, buf, sizeof buf), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_epilogue_format(R, NULL, 16), FM_ERR_INVALID_ARGUMENT);
}

static void test_relu_mask_row_bytes(void)
{
    const int64_t n[] = {1, 7, 8, 9, 127, 128, 129, 256, 257, 1000, 4096};
    const int64_t want[] = {16, 16, 16, 16, 16, 16, 32, 32, 48, 128, 512};
    for (size_t i = 0; i < sizeof n / sizeof n[0]; ++i) {
        int64_t got = fm_relu_mask_row_bytes(n[i]);
        CHECK_MSG(got == want[i], "fm_relu_mask_row_bytes(%lld) = %lld, expected %lld", (long long)n[i],
                  (long long)got, (long long)want[i]);
        CHECK(got % 16 == 0 && got * 8 >= n[i]);
    }
}

/* ---- context ---- */
static void test_context_lifecycle(void)
{
    fm_context_destroy(NULL);
    fm_plan_release(NULL);
    CHECK(1); /* reached: neither crashed */
    CHECK_STATUS(fm_context_create(NULL), FM_ERR_INVALID_ARGUMENT);

    /* the BLAS is chosen at the first context: offers are checked, and refused once it is chosen */
    CHECK_STATUS(fm_blas_offer(NULL), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_blas_offer(""), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("empty");
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    CHECK(ctx != NULL);
    CHECK(strncmp(fm_blas_info(), "OpenBLAS ", 9) == 0 && strstr(fm_blas_info(), ", core ") != NULL);
    CHECK_STATUS(fm_blas_offer("/some/libopenblas.so"), FM_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("before the first context");
    CHECK(fm_context_cache_size(ctx) == 0);
    fm_context_clear_cache(ctx);
    CHECK(fm_context_cache_size(ctx) == 0);
    fm_context_destroy(ctx);

    /* Several contexts at once are independent. */
    fm_context *c1 = NULL, *c2 = NULL;
    CHECK_OK(fm_context_create(&c1));
    CHECK_OK(fm_context_create(&c2));
    CHECK(c1 && c2 && c1 != c2);
    if (c1 && c2) {
        CHECK_OK(fm_context_set_num_threads(c1, 1));
        CHECK_OK(fm_context_set_num_threads(c2, 2));
        CHECK(fm_context_get_num_threads(c1) == 1);
        CHECK(fm_context_get_num_threads(c2) == 2);
    }
    fm_context_destroy(c1);
    fm_context_destroy(c2);
}

static void test_threads_setting(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsetenv("FUSEMATH_NUM_THREADS");
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    int def = fm_context_get_num_threads(ctx);
    CHECK_MSG(def == (int)cores, "default threads %d, online cores %ld", def, cores);
    CHECK_OK(fm_context_set_num_threads(ctx, 1));
    CHECK(fm_context_get_num_threads(ctx) == 1);
    CHECK_OK(fm_context_set_num_threads(ctx, 3));
    CHECK(fm_context_get_num_threads(ctx) == 3);
    CHECK_OK(fm_context_set_num_threads(ctx, 0));
    CHECK(fm_context_get_num_threads(ctx) == def);
    CHECK_OK(fm_context_set_num_threads(ctx, 5));
    CHECK_OK(fm_context_set_num_threads(ctx, -4));
    CHECK(fm_context_get_num_threads(ctx) == def);
    fm_context_destroy(ctx);
    CHECK_STATUS(fm_context_set_num_threads(NULL, 2), FM_ERR_INVALID_ARGUMENT);
    fm_context *big = NULL;
    CHECK_OK(fm_context_create(&big));
    if (big) {
        CHECK_STATUS(fm_context_set_num_threads(big, 4097), FM_ERR_INVALID_ARGUMENT);
        CHECK_MSG(strstr(fm_last_error(), "4096") != NULL, "message: %s", fm_last_error());
        CHECK_OK(fm_context_set_num_threads(big, 4096)); /* stored as asked; plans cap what they run */
        CHECK(fm_context_get_num_threads(big) == 4096);
        fm_context_destroy(big);
    }

    /* FUSEMATH_NUM_THREADS is read at creation and is the default that n <= 0 restores. */
    setenv("FUSEMATH_NUM_THREADS", "3", 1);
    ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    unsetenv("FUSEMATH_NUM_THREADS");
    if (!ctx) return;
    CHECK_MSG(fm_context_get_num_threads(ctx) == 3, "FUSEMATH_NUM_THREADS=3 gave %d",
              fm_context_get_num_threads(ctx));
    CHECK_OK(fm_context_set_num_threads(ctx, 1));
    CHECK_OK(fm_context_set_num_threads(ctx, 0));
    CHECK_MSG(fm_context_get_num_threads(ctx) == 3, "reset gave %d", fm_context_get_num_threads(ctx));
    fm_context_destroy(ctx);
}

static void test_backends(void)
{
    fm_context *ctx = NULL;
    CHECK_OK(fm_context_create(&ctx));
    if (!ctx) return;
    int n = fm_context_backend_count(ctx);
    CHECK_MSG(n >= 1, "backend count %d", n);
    int found_openblas = 0, ngpu = fm_cuda_device_count();
    CHECK_MSG(ngpu >= 0, "fm_cuda_device_count() = %d", ngpu);
    printf("    %d backends, %d CUDA devices\n", n, ngpu);
    for (int i = 0; i < n; ++i) {
        const char *name = NULL, *why = NULL;
        fm_device_type dev = (fm_device_type)-1;
        int avail = -1;
        CHECK_OK(fm_context_backend_info(ctx, i, &name, &dev, &avail, &why));
        CHECK(name != NULL && name[0] != '\0');
        CHECK(avail == 0 || avail == 1);
        if (!name) continue;
        printf("    backend %d: %s device=%d available=%d%s%s\n", i, name, (int)dev, avail, avail ? "" : " why=",
               avail ? "" : (why ? why : "(null)"));
        if (strcmp(name, "openblas") == 0) {
            found_openblas = 1;
            CHECK(dev == FM_DEVICE_CPU);
            CHECK_MSG(avail == 1, "openblas must be available");
        }
        if (dev == FM_DEVICE_CUDA && ngpu == 0) {
            CHECK_MSG(avail == 0, "backend %s runs on cuda but no GPU is present", name);
            CHECK_MSG(why != NULL && why[0] != '\0', "unavailable backend %s gives no reason", name);
        }
        if (!avail) CHECK_MSG(why != NULL && why[0] != '\0', "unavailable backend %s gives no reason", name);
    }
    CHECK_MSG(found_openblas, "no \"openblas\" backend registered");
    const char *name = NULL, *why = NULL;
    fm_device_type dev;
    int avail;
    CHECK_STATUS(fm_context_backend_info(ctx, n, &name, &dev, &avail, &why), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_context_backend_info(ctx, -1, &name, &dev, &avail, &why), FM_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(fm_context_backend_info(NULL, 0, &name, &dev, &avail, &why), FM_ERR_INVALID_ARGUMENT);
    /* Twice in a row: no noise, same answer. */
    CHECK(fm_cuda_device_count() == ngpu);
    fm_context_destroy(ctx);
}

static void test_version(void)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", FM_VERSION_MAJOR, FM_VERSION_MINOR, FM_VERSION_PATCH);
    CHECK(fm_version_number() == FM_VERSION_NUMBER);
    CHECK(FM_VERSION_NUMBER == 100);
    const char *s = fm_version_string();
    CHECK_MSG(s && strcmp(s, want) == 0, "fm_version_string() = \"%s\", expected \"%s\"", s ? s : "(null)", want);
}

/* FUSEMATH_NUM_THREADS: an integer from 0 (the cores) to FM_MAX_THREADS; anything else makes
 * context creation fail naming the variable (it used to be ignored silently). */
static void test_num_threads_env(void)
{
    const char *had = getenv("FUSEMATH_NUM_THREADS");
    char saved[64] = "";
    if (had)
        snprintf(saved, sizeof saved, "%s", had);
    static const char *const bad[] = {"abc", "3x", "-3", "4097", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("FUSEMATH_NUM_THREADS", bad[i], 1);
        fm_context *c = (fm_context *)0x1;
        CHECK_STATUS(fm_context_create(&c), FM_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_MENTIONS("FUSEMATH_NUM_THREADS");
        CHECK(c == NULL);
    }
    setenv("FUSEMATH_NUM_THREADS", "3", 1);
    fm_context *c = NULL;
    CHECK_STATUS(fm_context_create(&c), FM_OK);
    CHECK(c && fm_context_get_num_threads(c) == 3);
    fm_context_destroy(c);
    setenv("FUSEMATH_NUM_THREADS", "0", 1);
    c = NULL;
    CHECK_STATUS(fm_context_create(&c), FM_OK);
    CHECK(c && fm_context_get_num_threads(c) >= 1);
    fm_context_destroy(c);
    if (had)
        setenv("FUSEMATH_NUM_THREADS", saved, 1);
    else
        unsetenv("FUSEMATH_NUM_THREADS");
}

int main(void)
{
    RUN_TEST(test_status_table);
    RUN_TEST(test_last_error);
    RUN_TEST(test_tensor_init);
    RUN_TEST(test_dtypes);
    RUN_TEST(test_epilogue_parse);
    RUN_TEST(test_epilogue_format);
    RUN_TEST(test_relu_mask_row_bytes);
    RUN_TEST(test_context_lifecycle);
    RUN_TEST(test_threads_setting);
    RUN_TEST(test_backends);
    RUN_TEST(test_version);
    RUN_TEST(test_num_threads_env);
    TEST_MAIN_RETURN();
}
