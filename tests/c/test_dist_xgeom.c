/* test_dist_xgeom.c : the GPU ranks' exchange geometry (distributed/dist_xgeom.c, pure arithmetic,
 * compiled in here: no MPI, no GPU). Every rank of 1..6 is simulated on the host: each packs its slab
 * of a labelled global array with its moves, the all-to-all is played from the counts and offsets
 * (a send count must equal the receiver's count), and the columns (Y), the transposed layout (T) and
 * the restored slab must hold exactly the global array's labels. */
#include "check.h"

#include <stdlib.h>

#include "../../distributed/dist_xgeom.c"

#define MAXR 8

static void apply(const fm_dist_move *m, const int64_t *src, int64_t *dst)
{
    for (int64_t a = 0; a < m->e[0]; a++)
        for (int64_t b = 0; b < m->e[1]; b++)
            for (int64_t c = 0; c < m->e[2]; c++)
                dst[m->dst_base + a * m->d[0] + b * m->d[1] + c * m->d[2]] =
                    src[m->src_base + a * m->s[0] + b * m->s[1] + c * m->s[2]];
}

/* the all-to-all: rank r's send block for q lands in q's receive buffer at recv_off[r] */
static int exchange(int size, fm_dist_xgeom *g, int64_t **send, int64_t **recv, int reverse)
{
    int ok = 1;
    for (int r = 0; r < size; r++)
        for (int q = 0; q < size; q++) {
            int64_t sc = reverse ? g[r].recv_count[q] : g[r].send_count[q];
            int64_t so = reverse ? g[r].recv_off[q] : g[r].send_off[q];
            int64_t rc = reverse ? g[q].send_count[r] : g[q].recv_count[r];
            int64_t ro = reverse ? g[q].send_off[r] : g[q].recv_off[r];
            ok = ok && sc == rc;
            for (int64_t i = 0; i < sc && sc == rc; i++)
                recv[q][ro + i] = send[r][so + i];
        }
    return ok;
}

static void one_case(int64_t n0, int64_t n1, int64_t inner, int size)
{
    fm_dist_xgeom g[MAXR];
    int64_t cnt[MAXR][4][MAXR];
    int64_t *S[MAXR], *Y[MAXR], *T[MAXR], *buf[MAXR], *R[MAXR];
    int64_t total_rows = 0, total_cols = 0;
    for (int r = 0; r < size; r++) {
        CHECK(fm_dist_xgeom_init(&g[r], n0, n1, inner, size, r, cnt[r][0], cnt[r][1], cnt[r][2], cnt[r][3]) == 0);
        total_rows += g[r].l0, total_cols += g[r].b1;
        int64_t cap = (g[r].s_elems > g[r].y_elems ? g[r].s_elems : g[r].y_elems) + 1;
        S[r] = calloc((size_t)cap, 8), Y[r] = calloc((size_t)cap, 8), T[r] = calloc((size_t)cap, 8);
        buf[r] = calloc((size_t)cap, 8), R[r] = calloc((size_t)cap, 8);
        for (int64_t i = 0; i < g[r].s_elems; i++) /* label: the global index */
            S[r][i] = (g[r].o0 * n1 * inner) + i + 1;
    }
    CHECK(total_rows == n0 && total_cols == n1); /* the blocks tile both axes */
    for (int r = 0; r < size; r++) {
        int64_t sum = 0;
        for (int p = 0; p < size; p++) {
            CHECK(g[r].send_count[p] == 0 || g[r].send_off[p] == sum); /* packed back to back, in rank order */
            sum += g[r].send_count[p];
            fm_dist_move m;
            fm_dist_xgeom_pack_s(&g[r], p, &m);
            apply(&m, S[r], buf[r]);
        }
        CHECK(sum == g[r].s_elems);
    }
    CHECK(exchange(size, g, buf, Y, 0));
    int bad = 0;
    for (int r = 0; r < size; r++) {
        for (int64_t i0 = 0; i0 < n0; i0++) /* Y: all rows, r's columns */
            for (int64_t j = 0; j < g[r].b1; j++)
                for (int64_t c = 0; c < inner; c++)
                    bad += Y[r][(i0 * g[r].b1 + j) * inner + c] != (i0 * n1 + g[r].o1 + j) * inner + c + 1;
        fm_dist_move m;
        fm_dist_xgeom_y_to_t(&g[r], &m);
        apply(&m, Y[r], T[r]);
        for (int64_t j = 0; j < g[r].b1; j++) /* T: r's columns, all rows */
            for (int64_t i0 = 0; i0 < n0; i0++)
                for (int64_t c = 0; c < inner; c++)
                    bad += T[r][(j * n0 + i0) * inner + c] != (i0 * n1 + g[r].o1 + j) * inner + c + 1;
    }
    CHECK(bad == 0);
    for (int r = 0; r < size; r++) /* Y -> S: the reversed exchange, then the unpack */
        for (int64_t i = 0; i < g[r].s_elems; i++)
            S[r][i] = -1;
    CHECK(exchange(size, g, Y, buf, 1));
    for (int r = 0; r < size; r++) {
        for (int p = 0; p < size; p++) {
            fm_dist_move m;
            fm_dist_xgeom_unpack_s(&g[r], p, &m);
            apply(&m, buf[r], R[r]);
        }
        for (int64_t i = 0; i < g[r].s_elems; i++)
            bad += R[r][i] != g[r].o0 * n1 * inner + i + 1;
    }
    if (bad)
        printf("case %lld x %lld x %lld on %d ranks: %d wrong\n", (long long)n0, (long long)n1, (long long)inner, size,
               bad);
    CHECK(bad == 0);
    for (int r = 0; r < size; r++)
        free(S[r]), free(Y[r]), free(T[r]), free(buf[r]), free(R[r]);
}

int main(void)
{
    int64_t count, offset; /* FFTW-MPI's default blocks: ceil(n / size), the last ranks fewer or none */
    fm_dist_block_of(10, 4, 3, &count, &offset);
    CHECK(count == 1 && offset == 9);
    fm_dist_block_of(5, 4, 3, &count, &offset); /* blocks of 2: ranks 0-2 hold 2, 2, 1; rank 3 none */
    CHECK(count == 0 && offset == 0); /* FFTW-MPI's offset of an empty block */
    fm_dist_block_of(5, 4, 2, &count, &offset);
    CHECK(count == 1 && offset == 4);
    static const int64_t shapes[][3] = {{8, 8, 1}, {6, 5, 3}, {5, 9, 4}, {3, 7, 2}, {9, 2, 5}, {16, 12, 9}, {1, 4, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int size = 1; size <= 6; size++)
            one_case(shapes[s][0], shapes[s][1], shapes[s][2], size);
    fm_dist_xgeom g;
    int64_t a[2], b[2], c[2], d[2];
    CHECK(fm_dist_xgeom_init(&g, 4, 4, 1, 2, 2, a, b, c, d) == -1); /* rank out of range */
    CHECK(fm_dist_xgeom_init(&g, 0, 4, 1, 2, 0, a, b, c, d) == -1);
    TEST_MAIN_RETURN();
}
