/* sha256.h : SHA-256 for cache keys (core/src/sha256.c). */
#ifndef FM_SHA256_H
#define FM_SHA256_H

#include "internal.h"

typedef struct fm_sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t fill;
} fm_sha256;

FM_INTERNAL_API void fm_sha256_init(fm_sha256 *s);
FM_INTERNAL_API void fm_sha256_update(fm_sha256 *s, const void *data, size_t n);
FM_INTERNAL_API void fm_sha256_final(fm_sha256 *s, uint8_t out[32]);
/* v as 8 little-endian bytes */
FM_INTERNAL_API void fm_sha256_u64(fm_sha256 *s, uint64_t v);
FM_INTERNAL_API void fm_sha256_bytes(const void *data, size_t n, uint8_t out[32]);

#endif
