/* fftw_chunks.c : does cutting a batched FFT into cache-sized chunks cost FFTW speed?
 * The CPU FFT backend runs a fused chain per chunk (backends/cpu/fftw_fft.c). This times,
 * with FFTW alone and one thread, on B transforms of n complex floats:
 *   whole          one plan over the batch, in -> out
 *   chunk_in_out   a plan for `chunk` transforms, run per chunk in -> out (new-array execute)
 *   copy_inplace   per chunk: copy to a scratch, transform it in place, copy out
 *   copy_to_out    per chunk: copy to a scratch, transform scratch -> out
 *   fftw_chunks n B chunk [estimate|measure]      (defaults 4096 1024 16 measure)
 * Prints one JSON line, best of 7 rounds, ms. 2026-11-30 dev machine (AMD EPYC), 4096 x 1024
 * x 16, measure: whole 10.1, chunk_in_out 10.2, copy_inplace 8.9, copy_to_out 8.9. */
#define _POSIX_C_SOURCE 200809L
#include <fftw3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4096, batch = argc > 2 ? atoi(argv[2]) : 1024;
    int chunk = argc > 3 ? atoi(argv[3]) : 16;
    unsigned flags = argc > 4 && argv[4][0] == 'e' ? FFTW_ESTIMATE : FFTW_MEASURE;
    if (n <= 0 || batch <= 0 || chunk <= 0 || batch % chunk) {
        fprintf(stderr, "usage: fftw_chunks n batch chunk [estimate|measure] (batch a multiple of chunk)\n");
        return 2;
    }
    size_t total = (size_t)n * (size_t)batch, per = (size_t)n * (size_t)chunk;
    fftwf_complex *in = fftwf_alloc_complex(total), *out = fftwf_alloc_complex(total);
    fftwf_complex *s1 = fftwf_alloc_complex(per), *s2 = fftwf_alloc_complex(per);
    if (!in || !out || !s1 || !s2) {
        fprintf(stderr, "fftw_chunks: out of memory\n");
        return 1;
    }
    fftwf_plan whole = fftwf_plan_many_dft(1, &n, batch, in, NULL, 1, n, out, NULL, 1, n, FFTW_FORWARD, flags);
    fftwf_plan part = fftwf_plan_many_dft(1, &n, chunk, s1, NULL, 1, n, s2, NULL, 1, n, FFTW_FORWARD, flags);
    fftwf_plan part_ip = fftwf_plan_many_dft(1, &n, chunk, s1, NULL, 1, n, s1, NULL, 1, n, FFTW_FORWARD, flags);
    for (size_t i = 0; i < total; i++)
        in[i][0] = (float)rand() / (float)RAND_MAX, in[i][1] = 0.0f;
    memset(out, 0, sizeof(fftwf_complex) * total);
    const size_t bytes = sizeof(fftwf_complex) * per;
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < 7; r++) {
        double t[5];
        t[0] = now_us();
        fftwf_execute(whole);
        t[1] = now_us();
        for (int c = 0; c < batch / chunk; c++)
            fftwf_execute_dft(part, in + (size_t)c * per, out + (size_t)c * per);
        t[2] = now_us();
        for (int c = 0; c < batch / chunk; c++) {
            memcpy(s1, in + (size_t)c * per, bytes);
            fftwf_execute_dft(part_ip, s1, s1);
            memcpy(out + (size_t)c * per, s1, bytes);
        }
        t[3] = now_us();
        for (int c = 0; c < batch / chunk; c++) {
            memcpy(s1, in + (size_t)c * per, bytes);
            fftwf_execute_dft(part, s1, out + (size_t)c * per);
        }
        t[4] = now_us();
        for (int k = 0; k < 4; k++)
            if (t[k + 1] - t[k] < best[k])
                best[k] = t[k + 1] - t[k];
    }
    printf("{\"n\": %d, \"batch\": %d, \"chunk\": %d, \"effort\": \"%s\", \"whole_ms\": %.3f, \"chunk_in_out_ms\": %.3f, "
           "\"copy_inplace_ms\": %.3f, \"copy_to_out_ms\": %.3f}\n",
           n, batch, chunk, flags == FFTW_ESTIMATE ? "estimate" : "measure", best[0] / 1e3, best[1] / 1e3,
           best[2] / 1e3, best[3] / 1e3);
    fftwf_destroy_plan(whole);
    fftwf_destroy_plan(part);
    fftwf_destroy_plan(part_ip);
    fftwf_free(in);
    fftwf_free(out);
    fftwf_free(s1);
    fftwf_free(s2);
    return 0;
}
