/* mpi_check.h : the checks of tests/mpi's tests (included by each; static functions): a failure
 * counter per rank, CHECK, the same status on every rank, and the start and the end of main() with
 * one verdict for all ranks (exit 1 on every rank when any rank failed). */
#ifndef FM_MPI_CHECK_H
#define FM_MPI_CHECK_H

#include <fusemath/fusemath_mpi.h>

#include <stdio.h>
#include <string.h>

static int g_rank, g_size, g_fail;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "rank %d: %s:%d: ", g_rank, __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            g_fail = 1;                                                       \
        }                                                                     \
    } while (0)

/* the status every rank got is the same and is `want`, its message holding needle (when it failed) */
static inline void expect_all(fm_status st, fm_status want, const char *needle, const char *what)
{
    int lo = (int)st, hi = (int)st;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo == hi && st == want, "%s: status %s (ranks from %d to %d), expected %s: %s", what, fm_status_name(st), lo,
          hi, fm_status_name(want), fm_last_error());
    if (needle && st != FM_OK)
        CHECK(strstr(fm_last_error(), needle), "%s: message \"%s\" lacks \"%s\"", what, fm_last_error(), needle);
}

/* MPI up; g_rank and g_size in MPI_COMM_WORLD */
static inline void mpi_test_init(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
}

/* One verdict for all ranks ("<name> on <n> ranks: OK" or FAILED, from rank 0), MPI down; main()'s
 * exit status: 1 where any rank failed. */
static inline int mpi_test_finish(const char *name)
{
    int any = g_fail;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s on %d ranks: %s\n", name, g_size, any ? "FAILED" : "OK");
    MPI_Finalize();
    return any ? 1 : 0;
}

#endif /* FM_MPI_CHECK_H */
