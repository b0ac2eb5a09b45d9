/* dist_xgeom.h : the geometry of the GPU ranks' global transposes (dist_xgeom.c): pure arithmetic,
 * no MPI and no CUDA, so that tests/c/test_dist_xgeom.c checks it on any machine.
 *
 * The complex array of a slab transform is viewed as (n0, n1, inner): inner = the product of the
 * axes past 1 (3-D: n2, or n2 / 2 + 1 for r2c / c2r; 2-D: 1). FFTW-MPI's default blocks split axis 0
 * (slab: rank r holds rows [o0, o0 + l0)) and axis 1 (columns: rank r holds [o1, o1 + b1)), each in
 * ceil(n / size)-long blocks, the last ranks holding fewer or none.
 *   S ("slab")    : this rank's rows, all columns: l0 x n1 x inner, C order;
 *   Y ("columns") : all rows, this rank's columns: n0 x b1 x inner, C order (the exchange's receive
 *                   buffer: the peers' blocks, in rank order, are its row blocks);
 *   T ("transposed", FFTW_MPI_TRANSPOSED_OUT): b1 x n0 x inner.
 * The exchange S -> Y sends peer p the l0 x b1(p) x inner block of columns [o1(p), o1(p) + b1(p)),
 * packed contiguous at send_off[p]; it receives from peer q its l0(q) x b1 x inner block, at
 * recv_off[q] = o0(q) b1 inner, which is Y's row block q. Y -> S is the same exchange reversed
 * (send and receive swapped). Counts and offsets are in complex elements. */
#ifndef FM_DIST_XGEOM_H
#define FM_DIST_XGEOM_H

#include <stdint.h>

/* FFTW-MPI's default block of an axis of length n over `size` ranks: rank's count and first index
 * (0 for an empty block, as FFTW-MPI gives it). */
void fm_dist_block_of(int64_t n, int size, int rank, int64_t *count, int64_t *offset);

typedef struct fm_dist_xgeom {
    int size, rank;
    int64_t n0, n1, inner;
    int64_t l0, o0, b1, o1; /* this rank's rows and columns */
    int64_t s_elems, y_elems; /* elements of S and of Y (= T) */
    /* S -> Y; Y -> S swaps send and recv. size entries each (the caller's arrays). */
    int64_t *send_count, *send_off, *recv_count, *recv_off;
} fm_dist_xgeom;

/* Fill g for rank of size (1 <= size, 0 <= rank < size), the arrays given by the caller (size
 * entries each). Returns 0, or -1 for an argument out of range. */
int fm_dist_xgeom_init(fm_dist_xgeom *g, int64_t n0, int64_t n1, int64_t inner, int size, int rank,
                       int64_t *send_count, int64_t *send_off, int64_t *recv_count, int64_t *recv_off);

/* One strided 3-D move of complex elements: dst[i0 d0 + i1 d1 + i2 d2] = src[i0 s0 + i1 s1 + i2 s2]
 * over e0 x e1 x e2, from element offset src_base / to dst_base (what the pack / unpack kernel runs). */
typedef struct fm_dist_move {
    int64_t src_base, dst_base;
    int64_t e[3], s[3], d[3];
} fm_dist_move;

/* The moves of the exchange's local stages, one per peer p (fm_dist_move[size]):
 *  pack_s    : S -> the send buffer of S -> Y (peer p's columns, contiguous at send_off[p]);
 *  unpack_s  : the receive buffer of Y -> S (peer p's columns, at send_off[p]) -> S (the inverse of pack_s);
 * and the one move between Y and T (y_to_t: Y -> T; swap src and dst for T -> Y). */
void fm_dist_xgeom_pack_s(const fm_dist_xgeom *g, int p, fm_dist_move *m);
void fm_dist_xgeom_unpack_s(const fm_dist_xgeom *g, int p, fm_dist_move *m);
void fm_dist_xgeom_y_to_t(const fm_dist_xgeom *g, fm_dist_move *m);

#endif /* FM_DIST_XGEOM_H */
