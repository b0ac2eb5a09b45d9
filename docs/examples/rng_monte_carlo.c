/* rng_monte_carlo.c : a Monte Carlo estimate of pi with fusemath's RNG through the public C API.
 *
 * One plan fills a buffer of 2^20 uniform doubles in [-1, 1); consecutive pairs are points of the
 * square, and the fraction inside the unit circle estimates pi / 4. The plan is executed again and
 * again at advancing stream positions (fm_exec_args.ints[0]), so one plan serves every batch and
 * the batches never overlap. The program checks its own result: the estimate must lie within 5
 * standard errors of pi, and a second run of the first batch must reproduce it bit for bit (the
 * values depend only on the seed and the position). Exit status 1 otherwise.
 *
 * Usage: rng_monte_carlo [batches]   (default 16, i.e. 8 million points) */
#include <fusemath/fusemath.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        fm_status s_ = (call);                                                                      \
        if (s_ != FM_OK) {                                                                          \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, fm_status_name(s_), fm_last_error());    \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)

/* Points inside the unit circle among the n / 2 pairs of xy. */
static long long inside(const double *xy, int64_t n)
{
    long long k = 0;
    for (int64_t i = 0; i + 1 < n; i += 2)
        k += xy[i] * xy[i] + xy[i + 1] * xy[i + 1] < 1.0;
    return k;
}

int main(int argc, char **argv)
{
    const int batches = argc > 1 ? atoi(argv[1]) : 16;
    const int64_t n = (int64_t)1 << 20;
    if (batches < 1) {
        fprintf(stderr, "batches = %d, expected >= 1\n", batches);
        return 1;
    }
    fm_context *ctx = NULL;
    CHECK(fm_context_create(&ctx));
    double *xy = malloc((size_t)n * sizeof *xy), *again = malloc((size_t)n * sizeof *again);
    if (!xy || !again) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    fm_tensor out;
    CHECK(fm_tensor_init(&out, xy, (fm_device){FM_DEVICE_CPU, 0}, FM_F64, 1, &n, NULL));
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = FM_RNG_UNIFORM;
    o.low = -1.0, o.high = 1.0;
    fm_plan *plan = NULL;
    CHECK(fm_rng_plan(ctx, &out, &o, &plan));
    const uint64_t seed = 20261202; /* the generator: a per-call argument, like the position */
    fm_exec_args args;
    fm_exec_args_init(&args);
    args.ints[3] = (int64_t)seed;
    long long hits = 0, first = 0;
    for (int b = 0; b < batches; b++) {
        args.ints[0] = (int64_t)b * n; /* this batch's stream position */
        CHECK(fm_plan_execute_args(plan, (void *[]){xy}, FM_RNG_NSLOTS, &args, NULL));
        const long long k = inside(xy, n);
        hits += k;
        if (b == 0)
            first = k, memcpy(again, xy, (size_t)n * sizeof *xy);
    }
    /* the first batch again, stateless: the same bits */
    out.data = xy;
    CHECK(fm_rng(ctx, &out, &o, seed, 0, NULL));
    const int same = memcmp(xy, again, (size_t)n * sizeof *xy) == 0 && inside(xy, n) == first;
    const double points = (double)batches * (double)(n / 2), p = (double)hits / points;
    const double estimate = 4.0 * p, stderr_pi = 4.0 * sqrt(p * (1.0 - p) / points);
    const double pi = 3.14159265358979323846;
    printf("%s\npi ~ %.6f +- %.6f from %.0f points (error %.2f standard errors); repeat of batch 0 %s\n",
           fm_plan_describe(plan), estimate, stderr_pi, points, (estimate - pi) / stderr_pi,
           same ? "identical" : "DIFFERS");
    fm_plan_release(plan);
    fm_context_destroy(ctx);
    free(xy);
    free(again);
    return fabs(estimate - pi) <= 5.0 * stderr_pi && same ? 0 : 1;
}
