/* philox_source.h : the text of fusion/philox_portable.h, embedded at build time
 * (cmake/FusemathCUDA.cmake, fusemath_embed_text), for NVRTC programs that must give the CPU's bits. */
#ifndef FM_PHILOX_SOURCE_H
#define FM_PHILOX_SOURCE_H

extern const char fm_philox_portable_src[];

#endif
