/* test_dist_alltoallv.c : fm_dist_alltoallv (distributed/dist_alltoallv.c, compiled into this test), the
 * exchange that goes past MPI's int counts as messages, under mpirun -np 1..4. Blocks of every size
 * (0 included) with gaps between them, each element naming its sender, receiver and index; the
 * message path forced by a small message_max (7, 1, a block's size) or by path 0, and the
 * one-collective path, must both deliver every element to its place and leave the gaps untouched;
 * skip_self leaves this rank's own block to the caller. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dist_impl.h"
#include "mpi_check.h"

/* the count from rank s to rank r in round k (deterministic, the same on every rank) */
static int64_t count_of(int s, int r, int k) { return (int64_t)((s * 7 + r * 3 + k * 5) % 11) * (k % 3 == 0 ? 1 : 3); }

static double value_of(int s, int r, int64_t i) { return s * 1e6 + r * 1e4 + (double)i; }

static void one_round(int k, int64_t message_max, int skip_self, int path)
{
    const int n = g_size, me = g_rank;
    int64_t *sc = calloc((size_t)n * 4, sizeof(int64_t)), *so = sc + n, *rc = sc + 2 * n, *ro = sc + 3 * n;
    int *scratch = calloc((size_t)n * 4, sizeof(int));
    int64_t stot = 0, rtot = 0;
    for (int p = 0; p < n; p++) { /* a gap of 2 elements before every block */
        sc[p] = count_of(me, p, k), so[p] = stot + 2, stot += sc[p] + 2;
        rc[p] = count_of(p, me, k), ro[p] = rtot + 2, rtot += rc[p] + 2;
    }
    double *send = malloc(sizeof(double) * (size_t)(stot + 1)), *recv = malloc(sizeof(double) * (size_t)(rtot + 1));
    for (int64_t i = 0; i <= stot; i++)
        send[i] = -2.0;
    for (int64_t i = 0; i <= rtot; i++)
        recv[i] = -1.0;
    for (int p = 0; p < n; p++)
        for (int64_t i = 0; i < sc[p]; i++)
            send[so[p] + i] = value_of(me, p, i);
    int r = fm_dist_alltoallv(send, sc, so, recv, rc, ro, MPI_DOUBLE, sizeof(double), MPI_COMM_WORLD, scratch,
                              message_max, skip_self, path);
    CHECK(r == MPI_SUCCESS, "round %d: MPI error %d", k, r);
    int64_t bad = 0, gaps = 0;
    for (int p = 0; p < n; p++) {
        const int untouched = skip_self && p == me;
        for (int64_t i = 0; i < rc[p]; i++)
            bad += recv[ro[p] + i] != (untouched ? -1.0 : value_of(p, me, i));
        gaps += recv[ro[p] - 1] != -1.0 || recv[ro[p] - 2] != -1.0;
    }
    CHECK(!bad && !gaps && recv[rtot] == -1.0, "round %d (message_max %lld, skip_self %d): %lld elements wrong, "
          "%lld gaps written", k, (long long)message_max, skip_self, (long long)bad, (long long)gaps);
    free(send);
    free(recv);
    free(sc);
    free(scratch);
}

int main(int argc, char **argv)
{
    mpi_test_init(&argc, &argv);
    const int64_t limits[] = {7, 1, 33, 0 /* out of range: INT_MAX, one MPI_Alltoallv */};
    for (int k = 0; k < 6; k++)
        for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++)
            for (int skip = 0; skip < 2; skip++) {
                one_round(k, limits[l], skip, -1); /* agreed in the call */
                one_round(k, limits[l], skip, 0);  /* messages, whatever the counts */
            }
    one_round(1, 0, 0, 1); /* agreed beforehand: the counts fit */
    return mpi_test_finish("test_dist_alltoallv");
}
