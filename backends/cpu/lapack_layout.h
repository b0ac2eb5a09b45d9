/* lapack_layout.h : the CPU solver backend's matrix copies and checks (lapack_layout.c), between the
 * callers' strided arrays and LAPACK's column-major scratch. par: threads a call may use; a matrix past
 * 64 MiB is cut into column ranges on the library's pool, smaller ones run on the calling thread. */
#ifndef FM_LAPACK_LAYOUT_H
#define FM_LAPACK_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

/* dst (column-major, leading dimension ld) = src's rows x cols with element strides rs, cs; es: the
 * element's bytes (4, 8 or 16) */
void fm_lapack_gather(int par, char *dst, int64_t ld, const char *src, int64_t rs, int64_t cs, int64_t rows,
                      int64_t cols, size_t es);
/* dst (C-contiguous rows x cols) = src (column-major, ld) */
void fm_lapack_scatter(int par, char *dst, const char *src, int64_t ld, int64_t rows, int64_t cols, size_t es);
/* whether rows x cols of column-major w are all finite; rs: the bytes of the element's real type */
int fm_lapack_all_finite(int par, const char *w, int64_t ld, int64_t rows, int64_t cols, size_t es, size_t rs);
/* the strictly lower (lower) or upper triangle of column-major w set to zero */
void fm_lapack_zero_triangle(int par, char *w, int64_t ld, int64_t rows, int64_t cols, size_t es, int lower);

#endif /* FM_LAPACK_LAYOUT_H */
