/* dropout_ref.h : the dropout epilogue's reference mask for test_matmul_dropout*.c, independent of
 * the epilogue's code: the RNG operation's raw 32-bit words (fm_rng FM_RNG_RAW on the CPU) at the
 * same seed and position, an element kept iff its word >= dropout_threshold(p). */
#ifndef FM_TEST_DROPOUT_REF_H
#define FM_TEST_DROPOUT_REF_H

#include "check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* numel words of the portable stream of seed from position pos; free() them */
static inline uint32_t *dropout_raw_words(fm_context *ctx, uint64_t seed, int64_t pos, int64_t numel)
{
    uint32_t *w = malloc(sizeof(uint32_t) * (size_t)(numel ? numel : 1));
    fm_tensor t;
    fm_tensor_init(&t, w, (fm_device){FM_DEVICE_CPU, 0}, FM_U32, 1, &numel, NULL);
    fm_rng_options o;
    fm_rng_options_init(&o);
    o.distribution = FM_RNG_RAW;
    CHECK_OK(fm_rng(ctx, &t, &o, seed, pos, NULL));
    return w;
}

/* round(p * 2^32): a word below it drops its element */
static inline uint64_t dropout_threshold(double p) { return (uint64_t)floor(p * 4294967296.0 + 0.5); }

#endif
