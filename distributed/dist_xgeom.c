/* dist_xgeom.c : the GPU ranks' exchange geometry (dist_xgeom.h; docs/design.md, Distributed, GPU
 * ranks). Pure arithmetic: tests/c/test_dist_xgeom.c compiles this file alone. */
#include "dist_xgeom.h"

#include <stddef.h>

void fm_dist_block_of(int64_t n, int size, int rank, int64_t *count, int64_t *offset)
{
    int64_t block = (n + size - 1) / size; /* FFTW_MPI_DEFAULT_BLOCK: ceil(n / size) */
    int64_t first = block * rank;
    int64_t left = n - first;
    *count = left <= 0 ? 0 : left < block ? left : block;
    *offset = *count ? first : 0; /* an empty block starts at 0, as FFTW-MPI says */
}

int fm_dist_xgeom_init(fm_dist_xgeom *g, int64_t n0, int64_t n1, int64_t inner, int size, int rank,
                       int64_t *send_count, int64_t *send_off, int64_t *recv_count, int64_t *recv_off)
{
    if (!g || size < 1 || rank < 0 || rank >= size || n0 < 1 || n1 < 1 || inner < 1 || !send_count || !send_off ||
        !recv_count || !recv_off)
        return -1;
    g->size = size, g->rank = rank, g->n0 = n0, g->n1 = n1, g->inner = inner;
    fm_dist_block_of(n0, size, rank, &g->l0, &g->o0);
    fm_dist_block_of(n1, size, rank, &g->b1, &g->o1);
    g->s_elems = g->l0 * n1 * inner;
    g->y_elems = n0 * g->b1 * inner;
    g->send_count = send_count, g->send_off = send_off, g->recv_count = recv_count, g->recv_off = recv_off;
    for (int p = 0; p < size; p++) {
        int64_t bp, op, lq, oq;
        fm_dist_block_of(n1, size, p, &bp, &op);
        fm_dist_block_of(n0, size, p, &lq, &oq);
        send_count[p] = g->l0 * bp * inner;
        send_off[p] = g->l0 * op * inner;
        recv_count[p] = lq * g->b1 * inner;
        recv_off[p] = oq * g->b1 * inner;
    }
    return 0;
}

void fm_dist_xgeom_pack_s(const fm_dist_xgeom *g, int p, fm_dist_move *m)
{
    int64_t bp, op;
    fm_dist_block_of(g->n1, g->size, p, &bp, &op);
    m->src_base = op * g->inner;
    m->dst_base = g->send_off[p];
    m->e[0] = g->l0, m->e[1] = bp, m->e[2] = g->inner;
    m->s[0] = g->n1 * g->inner, m->s[1] = g->inner, m->s[2] = 1;
    m->d[0] = bp * g->inner, m->d[1] = g->inner, m->d[2] = 1;
}

void fm_dist_xgeom_unpack_s(const fm_dist_xgeom *g, int p, fm_dist_move *m)
{
    fm_dist_move f;
    fm_dist_xgeom_pack_s(g, p, &f);
    m->src_base = f.dst_base, m->dst_base = f.src_base;
    for (int i = 0; i < 3; i++)
        m->e[i] = f.e[i], m->s[i] = f.d[i], m->d[i] = f.s[i];
}

void fm_dist_xgeom_y_to_t(const fm_dist_xgeom *g, fm_dist_move *m)
{
    m->src_base = 0, m->dst_base = 0;
    m->e[0] = g->n0, m->e[1] = g->b1, m->e[2] = g->inner;
    m->s[0] = g->b1 * g->inner, m->s[1] = g->inner, m->s[2] = 1;
    m->d[0] = g->inner, m->d[1] = g->n0 * g->inner, m->d[2] = 1;
}
