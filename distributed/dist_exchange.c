/* dist_exchange.c : the GPU ranks' all-to-all, three backends chosen at planning (docs/design.md,
 * Distributed, GPU ranks; FUSEMATH_DIST_EXCHANGE = auto | nccl | mpi | staged, read once):
 *  - nccl   : ncclSend / ncclRecv per peer in one group, on the caller's stream; the communicator is
 *             made at planning from an ncclUniqueId broadcast over the plan's MPI communicator. NCCL
 *             refuses two ranks on one GPU: nccl asked for where ranks share a device (their UUIDs,
 *             allgathered, so every rank sees the same pair) fails the plan on every rank, naming the
 *             ranks and the MPI paths; auto takes the MPI path there and describe() says why;
 *  - mpi    : MPI_Alltoallv on the device pointers, where the MPI library is CUDA-aware (Open MPI's
 *             MPIX_Query_cuda_support() from mpi-ext.h; an MPI without it is taken as not CUDA-aware);
 *  - staged : the peers' blocks copied to pinned host buffers on the stream (cudaMemcpyAsync), the
 *             stream synchronized, MPI_Alltoallv on the host, copied back on the stream.
 * auto: nccl where built and the ranks have a GPU each, else mpi where CUDA-aware, else staged.
 * Every backend copies this rank's own block device to device; MPI sees none of it. */
#include "dist_gpu.h"

#if FM_DIST_HAVE_CUDA
#include <cuda_runtime.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if FM_DIST_HAVE_NCCL
#include <nccl.h>
#endif
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

enum { X_STAGED = 0, X_MPI = 1, X_NCCL = 2, X_HOST = 3 };
static const char *const x_names[4] = {"staged", "mpi-cuda-aware", "nccl", "host"};

struct fm_dist_exchange {
    int kind, rank, size, dbl;
    MPI_Comm comm;
    void *host[2];   /* staged: pinned send / receive buffers */
    int *counts;     /* MPI: 4 x size ints (send counts, displacements, receive counts, displacements) */
    int fits;        /* every rank's blocks fit MPI's int counts: one MPI_Alltoallv (else messages) */
#if FM_DIST_HAVE_NCCL
    ncclComm_t nccl;
#endif
    char text[200];
};

/* FUSEMATH_DIST_EXCHANGE, read once: -1 = auto, else X_* ; -2 = a bad value */
static int env_choice = -1;
static char env_text[64];
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static void read_env(void)
{
    const char *v = getenv("FUSEMATH_DIST_EXCHANGE");
    if (!v || !*v || !strcmp(v, "auto"))
        return;
    snprintf(env_text, sizeof env_text, "%s", v);
    env_choice = !strcmp(v, "nccl") ? X_NCCL : !strcmp(v, "mpi") ? X_MPI : !strcmp(v, "staged") ? X_STAGED : -2;
}

static int mpi_cuda_aware(void)
{
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() == 1;
#else
    return 0; /* the library says nothing (or was built without CUDA): not CUDA-aware */
#endif
}

/* Collective: do two ranks of comm run on one GPU (the same UUID)? -1 on a CUDA error; pair gets the
 * first two such ranks (alike on every rank: the UUIDs are allgathered). */
static int shared_gpu(MPI_Comm comm, int size, int device_id, int pair[2])
{
    struct cudaDeviceProp prop;
    unsigned char mine[16] = {0};
    int ok = cudaGetDeviceProperties(&prop, device_id) == cudaSuccess;
    if (ok)
        memcpy(mine, &prop.uuid, 16);
    unsigned char *all = malloc((size_t)size * 16);
    int shared = 0, bad = !ok || !all;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, comm);
    if (bad) {
        free(all);
        return -1;
    }
    MPI_Allgather(mine, 16, MPI_BYTE, all, 16, MPI_BYTE, comm);
    for (int i = 0; i < size && !shared; i++)
        for (int j = i + 1; j < size && !shared; j++)
            if ((shared = !memcmp(all + 16 * i, all + 16 * j, 16)))
                pair[0] = i, pair[1] = j;
    free(all);
    return shared;
}

#if FM_DIST_HAVE_NCCL
static fm_status nccl_init(const char *where, fm_dist_exchange *x)
{
    ncclUniqueId id;
    fm_status st = FM_OK;
    if (x->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess)
        st = fm_fail(FM_ERR_BACKEND, "%s: ncclGetUniqueId failed", where);
    if ((st = fm_dist_agree(x->comm, st)) != FM_OK)
        return st;
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, x->comm);
    ncclResult_t r = ncclCommInitRank(&x->nccl, x->size, id, x->rank);
    if (r != ncclSuccess) {
        x->nccl = NULL;
        st = fm_fail(FM_ERR_BACKEND, "%s: ncclCommInitRank (%d ranks): %s", where, x->size, ncclGetErrorString(r));
    }
    return fm_dist_agree(x->comm, st);
}
#endif

/* rank r of comm as a rank of MPI_COMM_WORLD (a pencil's exchange spans a row or column of the grid,
 * whose own numbering the user never sees) */
static int world_rank(MPI_Comm comm, int r)
{
    MPI_Group g, w;
    int out = r;
    if (MPI_Comm_group(comm, &g) == MPI_SUCCESS) {
        if (MPI_Comm_group(MPI_COMM_WORLD, &w) == MPI_SUCCESS) {
            if (MPI_Group_translate_ranks(g, 1, &r, w, &out) != MPI_SUCCESS || out == MPI_UNDEFINED)
                out = r;
            MPI_Group_free(&w);
        }
        MPI_Group_free(&g);
    }
    return out;
}

/* the backend asked for (env) and the one this machine allows; x->text says which and why */
static fm_status choose(const char *where, fm_dist_exchange *x, int device_id)
{
    pthread_once(&env_once, read_env);
    fm_status st = FM_OK;
    if (env_choice == -2)
        st = fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: FUSEMATH_DIST_EXCHANGE = '%s'; expected auto, nccl, mpi or "
                     "staged", where, env_text);
    if ((st = fm_dist_agree(x->comm, st)) != FM_OK) /* every rank reads its own environment */
        return st;
    int lo = env_choice, hi = env_choice;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, x->comm);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, x->comm);
    if (lo != hi)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "%s: the ranks disagree on FUSEMATH_DIST_EXCHANGE (set it alike "
                       "on every rank, e.g. mpirun -x FUSEMATH_DIST_EXCHANGE)", where);
    int want = env_choice, pair[2] = {0, 0};
    int shared = x->size > 1 ? shared_gpu(x->comm, x->size, device_id, pair) : 0;
    if (shared < 0)
        return fm_fail(FM_ERR_BACKEND, "%s: cudaGetDeviceProperties failed on some rank", where);
    int aware = mpi_cuda_aware(), have_nccl = FM_DIST_HAVE_NCCL;
    MPI_Allreduce(MPI_IN_PLACE, &aware, 1, MPI_INT, MPI_MIN, x->comm); /* every rank alike */
    /* nccl asked for and impossible: refused (alike on every rank), not swapped for a slower path; the
     * shared GPU first: with it no build of NCCL would do */
    if (want == X_NCCL && shared)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "%s: FUSEMATH_DIST_EXCHANGE=nccl, but ranks %d and %d (of "
                       "MPI_COMM_WORLD) share one GPU, which NCCL refuses (one GPU per rank); use "
                       "FUSEMATH_DIST_EXCHANGE=mpi (the MPI "
                       "library, staged through pinned host buffers where it is not CUDA-aware), staged, or "
                       "auto", where, world_rank(x->comm, pair[0]), world_rank(x->comm, pair[1]));
    if (want == X_NCCL && !have_nccl)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "%s: FUSEMATH_DIST_EXCHANGE=nccl, but libfusemath_mpi_cuda.so was "
                       "built without NCCL; use FUSEMATH_DIST_EXCHANGE=mpi (the MPI library, staged through pinned "
                       "host buffers where it is not CUDA-aware), staged, or auto", where);
    const char *why = "";
    if (want == X_MPI && !aware)
        x->kind = X_STAGED, why = " (mpi asked for: the MPI library is not CUDA-aware)";
    else if (want >= 0)
        x->kind = want;
    else if (have_nccl && !shared && x->size > 1)
        x->kind = X_NCCL;
    else
        x->kind = aware ? X_MPI : X_STAGED, why = shared ? " (auto: ranks share a GPU)" : "";
    snprintf(x->text, sizeof x->text, "%s%s", x_names[x->kind], why);
    return FM_OK;
}

fm_status fm_dist_exchange_create(const char *where, MPI_Comm comm, int dbl, int64_t max_elems, int device_id,
                                  fm_dist_exchange **out)
{
    *out = NULL;
    fm_dist_exchange *x = calloc(1, sizeof *x);
    fm_status st = x ? FM_OK : fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for the exchange", where);
    if ((st = fm_dist_agree(comm, st)) != FM_OK) {
        free(x); /* allocated here though another rank's failed */
        return st;
    }
    x->comm = comm, x->dbl = dbl;
    MPI_Comm_rank(comm, &x->rank);
    MPI_Comm_size(comm, &x->size);
    if (fm_dist_gpu_emulated()) /* host buffers: MPI_Alltoallv on them */
        x->kind = X_HOST, snprintf(x->text, sizeof x->text, "host (emulated)");
    else
        st = choose(where, x, device_id); /* the same outcome on every rank (its inputs are agreed) */
    size_t bytes = (size_t)max_elems * (dbl ? 16 : 8);
    if (st == FM_OK && x->kind != X_NCCL && !(x->counts = calloc((size_t)x->size * 4, sizeof(int))))
        st = fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: out of memory for the exchange's counts", where);
    for (int i = 0; st == FM_OK && x->kind == X_STAGED && i < 2; i++)
        if (bytes && cudaMallocHost(&x->host[i], bytes) != cudaSuccess) {
            x->host[i] = NULL;
            st = fm_fail(FM_ERR_OUT_OF_MEMORY, "%s: cudaMallocHost of the %zu-byte staging buffers failed", where,
                         bytes);
        }
    st = fm_dist_agree(comm, st);
    if (st == FM_OK) { /* every rank is here: whether the MPI paths' exchanges are one MPI_Alltoallv, once */
        x->fits = max_elems <= INT_MAX;
        MPI_Allreduce(MPI_IN_PLACE, &x->fits, 1, MPI_INT, MPI_LAND, comm);
    }
#if FM_DIST_HAVE_NCCL
    if (st == FM_OK && x->kind == X_NCCL)
        st = nccl_init(where, x);
#endif
    if (st != FM_OK) {
        fm_dist_exchange_destroy(x);
        return st;
    }
    *out = x;
    return FM_OK;
}

const char *fm_dist_exchange_describe(const fm_dist_exchange *x) { return x ? x->text : "none"; }

void fm_dist_exchange_destroy(fm_dist_exchange *x)
{
    if (!x)
        return;
#if FM_DIST_HAVE_NCCL
    if (x->nccl)
        ncclCommDestroy(x->nccl);
#endif
    for (int i = 0; i < 2; i++)
        if (x->host[i])
            cudaFreeHost(x->host[i]);
    free(x->counts);
    free(x);
}

static fm_status cuda_check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return FM_OK;
    return fm_fail(FM_ERR_BACKEND, "fm_dist_fft_execute: %s: %s", what, cudaGetErrorString(e));
}

/* MPI_Alltoallv of everything but this rank's own block, on host or (CUDA-aware) device buffers; past
 * MPI's int counts as messages (fm_dist_alltoallv) */
static fm_status mpi_alltoallv(fm_dist_exchange *x, const void *send, const int64_t *sc, const int64_t *so,
                               void *recv, const int64_t *rc, const int64_t *ro)
{
    MPI_Datatype t = x->dbl ? MPI_C_DOUBLE_COMPLEX : MPI_C_FLOAT_COMPLEX;
    int r = fm_dist_alltoallv(send, sc, so, recv, rc, ro, t, x->dbl ? 16 : 8, x->comm, x->counts, INT_MAX, 1,
                              x->fits);
    if (r != MPI_SUCCESS)
        return fm_fail(FM_ERR_BACKEND, "fm_dist_fft_execute: the MPI exchange failed (%d)", r);
    return FM_OK;
}

static fm_status run_staged(fm_dist_exchange *x, const char *send, const int64_t *sc, const int64_t *so, char *recv,
                            const int64_t *rc, const int64_t *ro, cudaStream_t s)
{
    size_t es = x->dbl ? 16 : 8;
    char *hs = x->host[0], *hr = x->host[1];
    fm_status st = FM_OK;
    for (int p = 0; p < x->size && st == FM_OK; p++)
        if (p != x->rank && sc[p])
            st = cuda_check(cudaMemcpyAsync(hs + so[p] * es, send + so[p] * es, (size_t)sc[p] * es,
                                            cudaMemcpyDeviceToHost, s), "staging the send blocks to the host");
    if (st == FM_OK)
        st = cuda_check(cudaStreamSynchronize(s), "the stream before the staged exchange");
    if ((st = fm_dist_agree(x->comm, st)) != FM_OK)
        return st;
    if ((st = mpi_alltoallv(x, hs, sc, so, hr, rc, ro)) != FM_OK)
        return st;
    for (int q = 0; q < x->size && st == FM_OK; q++)
        if (q != x->rank && rc[q])
            st = cuda_check(cudaMemcpyAsync(recv + ro[q] * es, hr + ro[q] * es, (size_t)rc[q] * es,
                                            cudaMemcpyHostToDevice, s), "copying the received blocks to the GPU");
    return st;
}

#if FM_DIST_HAVE_NCCL
static fm_status run_nccl(fm_dist_exchange *x, const char *send, const int64_t *sc, const int64_t *so, char *recv,
                          const int64_t *rc, const int64_t *ro, cudaStream_t s)
{
    size_t es = x->dbl ? 16 : 8;
    ncclDataType_t t = x->dbl ? ncclDouble : ncclFloat; /* complex as pairs */
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < x->size && r == ncclSuccess; p++) {
        if (p == x->rank)
            continue;
        if (sc[p])
            r = ncclSend(send + so[p] * es, (size_t)sc[p] * 2, t, p, x->nccl, s);
        if (r == ncclSuccess && rc[p])
            r = ncclRecv(recv + ro[p] * es, (size_t)rc[p] * 2, t, p, x->nccl, s);
    }
    ncclResult_t g = ncclGroupEnd();
    if (r == ncclSuccess)
        r = g;
    if (r != ncclSuccess)
        return fm_fail(FM_ERR_BACKEND, "fm_dist_fft_execute: NCCL send / recv: %s", ncclGetErrorString(r));
    return FM_OK;
}
#endif

fm_status fm_dist_exchange_run(fm_dist_exchange *x, fm_status prior, const void *send, const int64_t *sc,
                               const int64_t *so, void *recv, const int64_t *rc, const int64_t *ro, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    size_t es = x->dbl ? 16 : 8;
    int me = x->rank;
    fm_status st = prior;
    if (st == FM_OK && sc[me] && x->kind == X_HOST)
        memcpy((char *)recv + ro[me] * es, (const char *)send + so[me] * es, (size_t)sc[me] * es);
    else if (st == FM_OK && sc[me]) /* this rank's own block, before the agreement: a failure here is agreed too */
        st = cuda_check(cudaMemcpyAsync((char *)recv + ro[me] * es, (const char *)send + so[me] * es,
                                        (size_t)sc[me] * es, cudaMemcpyDeviceToDevice, s), "the rank's own block");
    if (x->size > 1)
        st = fm_dist_agree(x->comm, st); /* a failed stage (or copy) on one rank: every rank stops here */
    if (x->size == 1 || st != FM_OK)
        return st;
    if (x->kind == X_STAGED)
        return run_staged(x, send, sc, so, recv, rc, ro, s);
#if FM_DIST_HAVE_NCCL
    if (x->kind == X_NCCL)
        return run_nccl(x, send, sc, so, recv, rc, ro, s);
#endif
    if (x->kind == X_HOST)
        return mpi_alltoallv(x, send, sc, so, recv, rc, ro);
    st = cuda_check(cudaStreamSynchronize(s), "the stream before the exchange");
    if ((st = fm_dist_agree(x->comm, st)) != FM_OK)
        return st;
    return mpi_alltoallv(x, send, sc, so, recv, rc, ro);
}
#endif /* FM_DIST_HAVE_CUDA */
