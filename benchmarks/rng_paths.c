/* rng_paths.c : the CPU RNG's paths side by side (docs/performance.md, "Random numbers"): each
 * vector ISA this CPU has (AVX-512, AVX2, scalar; forced as test_rng_cpu does) with plain and with
 * streaming stores, on one preallocated, already written output, paired rounds (every round times
 * every path once, the order reversed every other round). Prints ns per value: the median over
 * rounds and the min-max. Linked to the library's objects (fm_rng_simd_set_isa and
 * fm_rng_set_stream_stores are internal).
 *   rng_paths [log2n (25)] [rounds (7)] [threads (1)] */
#include "cpu/philox_simd.h"
#include "fusemath/fusemath.h"

#define BENCH_DETAIL fm_last_error()
#include "bench_timing.h"

#include <stdint.h>
#include <string.h>

typedef struct dist {
    int dist;
    fm_dtype dt;
    const char *name;
} dist;

int main(int argc, char **argv)
{
    const long log2n = arg_long(argc, argv, 1, 25), rounds = arg_long(argc, argv, 2, 7);
    const long threads = arg_long(argc, argv, 3, 1);
    if (log2n > 30 || rounds > 64) {
        fprintf(stderr, "%s: log2n at most 30, rounds at most 64\n", argv[0]);
        return 1;
    }
    static const dist dists[] = {{FM_RNG_UNIFORM, FM_F64, "random f64"},
                                 {FM_RNG_UNIFORM, FM_F32, "random f32"},
                                 {FM_RNG_EXPONENTIAL, FM_F64, "standard_exponential f64"},
                                 {FM_RNG_NORMAL, FM_F64, "standard_normal f64"},
                                 {FM_RNG_RAW, FM_U32, "raw u32"}};
    static const char *const isa_names[] = {"scalar", "avx2", "avx512"};
    const int64_t n = (int64_t)1 << log2n;
    fm_context *ctx = NULL;
    BENCH_CHECK(fm_context_create(&ctx));
    void *buf = malloc((size_t)n * 8);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    memset(buf, 0, (size_t)n * 8);
    const int isa0 = fm_rng_simd_isa(), stream0 = fm_rng_set_stream_stores(-1);
    printf("2^%ld values, %ld rounds, %ld thread(s); this CPU's ISA: %s; ns per value, median (min-max)\n", log2n,
           rounds, threads, isa_names[isa0]);
    for (size_t d = 0; d < sizeof dists / sizeof dists[0]; d++) {
        int paths[6][2], np = 0; /* (isa, stream) */
        for (int isa = FM_RNG_ISA_AVX512; isa >= FM_RNG_ISA_SCALAR; isa--)
            if (fm_rng_simd_set_isa(isa) >= 0)
                for (int s = 0; s < 2; s++)
                    paths[np][0] = isa, paths[np][1] = s, np++;
        fm_rng_options o;
        fm_rng_options_init(&o);
        o.distribution = dists[d].dist, o.num_threads = (int32_t)threads;
        fm_tensor t;
        BENCH_CHECK(fm_tensor_init(&t, buf, (fm_device){FM_DEVICE_CPU, 0}, dists[d].dt, 1, &n, NULL));
        fm_plan *plan = NULL;
        BENCH_CHECK(fm_rng_plan(ctx, &t, &o, &plan));
        double ns[6][64];
        for (long r = 0; r < rounds; r++)
            for (int q = 0; q < np; q++) {
                const int k = r % 2 ? np - 1 - q : q;
                BENCH_CHECK(fm_rng_simd_set_isa(paths[k][0]) < 0);
                fm_rng_set_stream_stores(paths[k][1]);
                fm_exec_args a;
                fm_exec_args_init(&a);
                a.ints[0] = (int64_t)r * n, a.ints[3] = 777;
                void *ptrs[1] = {buf};
                const double t0 = now_ns();
                BENCH_CHECK(fm_plan_execute_args(plan, ptrs, 1, &a, NULL));
                ns[k][r] = (now_ns() - t0) / (double)n;
            }
        fm_plan_release(plan);
        for (int k = 0; k < np; k++) {
            const double med = median_of(ns[k], (int)rounds);
            printf("%-26s %-7s %-9s %7.3f (%.3f-%.3f)\n", dists[d].name, isa_names[paths[k][0]],
                   paths[k][1] ? "streamed" : "plain", med, ns[k][0], ns[k][rounds - 1]);
        }
    }
    fm_rng_simd_set_isa(isa0);
    fm_rng_set_stream_stores(stream0);
    free(buf);
    fm_context_destroy(ctx);
    return 0;
}
