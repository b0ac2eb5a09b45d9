/* dist_alltoallv.c : fm_dist_alltoallv (dist_impl.h), MPI_Alltoallv with 64-bit counts and
 * displacements. MPI before MPI-4 (Debian's Open MPI 4.1) counts in int: a slab or pencil exchange
 * past 2^31 - 1 elements a rank (a 2048^3 c64 transform on two ranks moves 2^32) would not fit.
 * Where everything fits, one MPI_Alltoallv as before; else every peer's block goes as messages of at
 * most message_max elements (MPI_Irecv / MPI_Isend on the plan's own communicator, which MPI keeps
 * in order between a pair). skip_self: this rank's own block is the caller's to copy (device buffers).
 * Its own file because both libfusemath_mpi and its GPU module compile it. */
#include "dist_impl.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { TAG = 0x464d }; /* the plans' communicators are their own (duplicated or split): no user traffic */

/* the messages of one direction: block p of count[p] elements at displ[p], cut at message_max */
static int post(int dir, char *base, const int64_t *count, const int64_t *displ, int peers, int me,
                MPI_Datatype t, size_t esize, MPI_Comm comm, int64_t message_max, MPI_Request *req, int *nreq)
{
    for (int p = 0; p < peers; p++) {
        if (p == me) /* this rank's own block: the caller's copy (as MPI_Alltoallv would, by a local copy) */
            continue;
        for (int64_t done = 0; done < count[p]; done += message_max) {
            const int64_t left = count[p] - done;
            const int n = (int)(left < message_max ? left : message_max);
            char *at = base + (size_t)(displ[p] + done) * esize;
            int r = dir ? MPI_Isend(at, n, t, p, TAG, comm, &req[*nreq]) : MPI_Irecv(at, n, t, p, TAG, comm,
                                                                                    &req[*nreq]);
            if (r != MPI_SUCCESS)
                return r;
            (*nreq)++;
        }
    }
    return MPI_SUCCESS;
}

int fm_dist_alltoallv_fits(const int64_t *sc, const int64_t *so, const int64_t *rc, const int64_t *ro, int peers,
                           int64_t message_max)
{
    if (message_max < 1 || message_max > INT_MAX)
        message_max = INT_MAX;
    int fits = 1;
    for (int p = 0; p < peers; p++)
        fits &= sc[p] <= message_max && rc[p] <= message_max && so[p] <= INT_MAX && ro[p] <= INT_MAX;
    return fits;
}

int fm_dist_alltoallv(const void *send, const int64_t *sc, const int64_t *so, void *recv, const int64_t *rc,
                      const int64_t *ro, MPI_Datatype t, size_t esize, MPI_Comm comm, int *scratch,
                      int64_t message_max, int skip_self, int path)
{
    int n, me;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    if (message_max < 1 || message_max > INT_MAX)
        message_max = INT_MAX;
    int fits = fm_dist_alltoallv_fits(sc, so, rc, ro, n, message_max);
    if (path < 0) /* the same path on every rank: a pair's send and receive must both be messages or both
                   * the collective */
        MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_LAND, comm);
    else if (path == 1 && !fits) /* the caller's agreement is wrong for these counts: never truncate */
        return MPI_ERR_COUNT;
    else
        fits = path;
    if (fits) {
        for (int p = 0; p < n; p++) {
            const int self = skip_self && p == me;
            scratch[p] = self ? 0 : (int)sc[p], scratch[n + p] = (int)so[p];
            scratch[2 * n + p] = self ? 0 : (int)rc[p], scratch[3 * n + p] = (int)ro[p];
        }
        return MPI_Alltoallv(send, scratch, scratch + n, t, recv, scratch + 2 * n, scratch + 3 * n, t, comm);
    }
    int64_t messages = 0;
    for (int p = 0; p < n; p++)
        if (p != me)
            messages += (sc[p] + message_max - 1) / message_max + (rc[p] + message_max - 1) / message_max;
    if (sc[me] && !skip_self) /* this rank's own block (host memory), as MPI_Alltoallv copies it */
        memcpy((char *)recv + (size_t)ro[me] * esize, (const char *)send + (size_t)so[me] * esize,
               (size_t)sc[me] * esize);
    MPI_Request *req = malloc(sizeof *req * (size_t)(messages > 0 ? messages : 1));
    if (!req)
        return MPI_ERR_NO_MEM;
    int nreq = 0;
    int r = post(0, recv, rc, ro, n, me, t, esize, comm, message_max, req, &nreq);
    if (r == MPI_SUCCESS)
        r = post(1, (char *)(uintptr_t)send, sc, so, n, me, t, esize, comm, message_max, req, &nreq);
    int w = MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    free(req);
    return r != MPI_SUCCESS ? r : w;
}
