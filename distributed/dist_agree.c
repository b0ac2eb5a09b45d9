/* dist_agree.c : fm_dist_agree (dist_impl.h), the one collective every distributed stage ends with.
 * Its own file because both libfusemath_mpi and its GPU module (libfusemath_mpi_cuda.so, which
 * links neither libfusemath_mpi nor its internals) compile it. */
#include "dist_impl.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

fm_status fm_dist_agree(MPI_Comm comm, fm_status st)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int bad = st != FM_OK ? rank : INT_MAX;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MIN, comm);
    if (bad == INT_MAX)
        return FM_OK;
    /* every rank gets the failing rank's own status and message */
    struct {
        int status;
        char msg[480];
    } m;
    memset(&m, 0, sizeof m);
    if (rank == bad) {
        m.status = (int)st;
        snprintf(m.msg, sizeof m.msg, "%s", fm_last_error());
    }
    MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, bad, comm);
    return fm_fail((fm_status)m.status, "%s (on rank %d of %d)", m.msg, bad, size);
}
