/* dist_bare.c : FFTW-MPI and ScaLAPACK called directly, the baselines of benchmarks/distributed.py,
 * loaded into its MPI ranks with ctypes (dist_bare.so, built with FUSEMATH_BUILD_BENCHMARKS where
 * libfusemath_mpi is) so that the bare calls and fusemath.distributed's run in the same processes,
 * on the same data, in paired rounds. Each timed function times only the library call, between an
 * MPI_Barrier and the call's return on this rank (the caller takes the maximum over ranks); refills
 * of destroyed inputs are outside the timing.
 *
 * FFT: bare_fft_setup plans fftw(f)_mpi_plan_many_dft (c2c forward) on FFTW-MPI's own buffers
 * with the flags fusemath uses (FFTW_ESTIMATE / MEASURE, FFTW_DESTROY_INPUT, FFTW_MPI_TRANSPOSED_OUT
 * where asked), default blocks; bare_fft_execute refills the input from the caller's block (not
 * timed) and times fftw_execute; bare_fft_output copies the output block out for the check.
 * ScaLAPACK: bare_sl_grid makes a BLACS grid (row-major, as fusemath's), bare_pdgemm / bare_pdgesv
 * time pdgemm_ / pdgesv_ on the caller's local column-major blocks. */
#include <fftw3-mpi.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#define FM_BARE_API __attribute__((visibility("default")))

/* ---- FFT: up to BARE_SLOTS plans at once (slab and transposed output side by side) ---- */
#define BARE_SLOTS 4
typedef struct {
    int dbl, ndim;
    void *plan, *in, *out;
    ptrdiff_t in_count, out_count; /* complex elements of this rank's input / output block */
    const void *src;               /* the caller's input block, copied in before each execute */
    MPI_Comm comm;
} bare_fft;
static bare_fft g_slots[BARE_SLOTS];
#define g_fft g_slots[slot]

FM_BARE_API void bare_fft_destroy(int slot)
{
    if (slot < 0 || slot >= BARE_SLOTS)
        return;
    if (g_fft.plan) {
        if (g_fft.dbl)
            fftw_destroy_plan(g_fft.plan);
        else
            fftwf_destroy_plan(g_fft.plan);
    }
    fftw_free(g_fft.in);
    fftw_free(g_fft.out);
    if (g_fft.comm != MPI_COMM_NULL && g_fft.comm)
        MPI_Comm_free(&g_fft.comm);
    memset(&g_fft, 0, sizeof g_fft);
}

/* 0 on success; -1 when FFTW-MPI plans nothing. n[ndim]: the global shape; src: this rank's
 * C-contiguous input block (kept, read before each execute); effort 0 estimate, 1 measure. */
FM_BARE_API int bare_fft_setup(int slot, MPI_Comm comm, int ndim, const long *n, int dbl, int transposed_out,
                               int effort, const void *src)
{
    if (slot < 0 || slot >= BARE_SLOTS || ndim < 2 || ndim > 3)
        return -1;
    bare_fft_destroy(slot);
    static int inited;
    if (!inited) { /* idempotent here: fusemath's own fftw_mpi_init ran in this process first */
        fftw_mpi_init();
        fftwf_mpi_init();
        inited = 1;
    }
    MPI_Comm_dup(comm, &g_fft.comm);
    ptrdiff_t nn[3], l0, o0, l1, o1;
    for (int i = 0; i < ndim; i++)
        nn[i] = (ptrdiff_t)n[i];
    ptrdiff_t alloc = fftw_mpi_local_size_many_transposed(ndim, nn, 1, FFTW_MPI_DEFAULT_BLOCK, FFTW_MPI_DEFAULT_BLOCK,
                                                          g_fft.comm, &l0, &o0, &l1, &o1);
    ptrdiff_t rest = 1;
    for (int i = 1; i < ndim; i++)
        rest *= nn[i];
    g_fft.in_count = l0 * rest;
    g_fft.out_count = (transposed_out ? l1 * nn[0] * (rest / nn[1]) : l0 * rest);
    g_fft.dbl = dbl, g_fft.ndim = ndim, g_fft.src = src;
    size_t bytes = (size_t)(alloc > 0 ? alloc : 1) * (dbl ? sizeof(fftw_complex) : sizeof(fftwf_complex));
    g_fft.in = fftw_malloc(bytes);
    g_fft.out = fftw_malloc(bytes);
    int short_of_memory = !g_fft.in || !g_fft.out, any_short = 0; /* agreed: no rank left in the planner */
    MPI_Allreduce(&short_of_memory, &any_short, 1, MPI_INT, MPI_MAX, g_fft.comm);
    if (any_short)
        return -1;
    memset(g_fft.in, 0, bytes);
    memset(g_fft.out, 0, bytes);
    unsigned flags = (effort ? FFTW_MEASURE : FFTW_ESTIMATE) | FFTW_DESTROY_INPUT;
    if (transposed_out)
        flags |= FFTW_MPI_TRANSPOSED_OUT;
    if (dbl)
        g_fft.plan = fftw_mpi_plan_many_dft(ndim, nn, 1, FFTW_MPI_DEFAULT_BLOCK, FFTW_MPI_DEFAULT_BLOCK, g_fft.in,
                                            g_fft.out, g_fft.comm, FFTW_FORWARD, flags);
    else
        g_fft.plan = fftwf_mpi_plan_many_dft(ndim, nn, 1, FFTW_MPI_DEFAULT_BLOCK, FFTW_MPI_DEFAULT_BLOCK, g_fft.in,
                                             g_fft.out, g_fft.comm, FFTW_FORWARD, flags);
    return g_fft.plan ? 0 : -1;
}

/* seconds of this rank's fftw_execute, after the input is refilled and the ranks meet */
FM_BARE_API double bare_fft_execute(int slot)
{
    size_t esz = g_fft.dbl ? sizeof(fftw_complex) : sizeof(fftwf_complex);
    if (g_fft.in_count)
        memcpy(g_fft.in, g_fft.src, (size_t)g_fft.in_count * esz);
    MPI_Barrier(g_fft.comm);
    double t0 = MPI_Wtime();
    if (g_fft.dbl)
        fftw_execute(g_fft.plan);
    else
        fftwf_execute(g_fft.plan);
    return MPI_Wtime() - t0;
}

/* this rank's output block (out_count complex elements) into dst */
FM_BARE_API long bare_fft_output(int slot, void *dst)
{
    size_t esz = g_fft.dbl ? sizeof(fftw_complex) : sizeof(fftwf_complex);
    if (dst && g_fft.out_count)
        memcpy(dst, g_fft.out, (size_t)g_fft.out_count * esz);
    return (long)g_fft.out_count;
}

#undef g_fft

/* ---- ScaLAPACK (prototypes as distributed/dist_scalapack.h's: the packages ship no header) ---- */
int Csys2blacs_handle(MPI_Comm comm);
void Cfree_blacs_system_handle(int handle);
void Cblacs_gridinit(int *ctxt, char *order, int nprow, int npcol);
void Cblacs_gridinfo(int ctxt, int *nprow, int *npcol, int *myrow, int *mycol);
void Cblacs_gridexit(int ctxt);
int numroc_(const int *n, const int *nb, const int *iproc, const int *isrcproc, const int *nprocs);
void descinit_(int *desc, const int *m, const int *n, const int *mb, const int *nb, const int *irsrc,
               const int *icsrc, const int *ictxt, const int *lld, int *info);
void pdgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k, const double *alpha,
             const double *a, const int *ia, const int *ja, const int *desca, const double *b, const int *ib,
             const int *jb, const int *descb, const double *beta, double *c, const int *ic, const int *jc,
             const int *descc);
void pdgesv_(const int *n, const int *nrhs, double *a, const int *ia, const int *ja, const int *desca, int *ipiv,
             double *b, const int *ib, const int *jb, const int *descb, int *info);

static struct {
    MPI_Comm comm;
    int sys, ctxt, nprow, npcol, myrow, mycol;
} g_sl = {MPI_COMM_NULL, -1, -1, 0, 0, 0, 0};

FM_BARE_API void bare_sl_destroy(void)
{
    if (g_sl.ctxt >= 0)
        Cblacs_gridexit(g_sl.ctxt);
    if (g_sl.sys >= 0)
        Cfree_blacs_system_handle(g_sl.sys);
    if (g_sl.comm != MPI_COMM_NULL)
        MPI_Comm_free(&g_sl.comm);
    g_sl.comm = MPI_COMM_NULL, g_sl.sys = g_sl.ctxt = -1;
}

/* the nprow x npcol grid over comm, row-major (rank r at (r / npcol, r % npcol)); 0 on success */
FM_BARE_API int bare_sl_grid(MPI_Comm comm, int nprow, int npcol)
{
    bare_sl_destroy();
    MPI_Comm_dup(comm, &g_sl.comm);
    g_sl.sys = Csys2blacs_handle(g_sl.comm);
    g_sl.ctxt = g_sl.sys;
    Cblacs_gridinit(&g_sl.ctxt, "Row", nprow, npcol);
    Cblacs_gridinfo(g_sl.ctxt, &g_sl.nprow, &g_sl.npcol, &g_sl.myrow, &g_sl.mycol);
    return g_sl.nprow == nprow && g_sl.npcol == npcol ? 0 : -1;
}

static int local_ld(int m, int mb)
{
    int zero = 0, r = numroc_(&m, &mb, &g_sl.myrow, &zero, &g_sl.nprow);
    return r > 1 ? r : 1;
}

static void desc(int *d, int m, int n, int mb, int nb)
{
    int zero = 0, ld = local_ld(m, mb), info = 0;
    descinit_(d, &m, &n, &mb, &nb, &zero, &zero, &g_sl.ctxt, &ld, &info);
}

/* seconds of C = A B (n x n, nb x nb blocks, local column-major blocks with ld = local rows) */
FM_BARE_API double bare_pdgemm(int n, int nb, const double *a, const double *b, double *c)
{
    int da[9], db[9], dc[9], one = 1;
    double alpha = 1, beta = 0;
    desc(da, n, n, nb, nb), desc(db, n, n, nb, nb), desc(dc, n, n, nb, nb);
    MPI_Barrier(g_sl.comm);
    double t0 = MPI_Wtime();
    pdgemm_("N", "N", &n, &n, &n, &alpha, a, &one, &one, da, b, &one, &one, db, &beta, c, &one, &one, dc);
    return MPI_Wtime() - t0;
}

/* seconds of pdgesv on A (n x n) and B (n x nrhs), overwritten; *info its INFO */
FM_BARE_API double bare_pdgesv(int n, int nrhs, int nb, double *a, double *b, int *info)
{
    int da[9], db[9], one = 1, zero = 0;
    desc(da, n, n, nb, nb), desc(db, n, nrhs, nb, nb);
    int lr = numroc_(&n, &nb, &g_sl.myrow, &zero, &g_sl.nprow);
    int *ipiv = malloc(sizeof(int) * (size_t)(lr + nb));
    MPI_Barrier(g_sl.comm);
    double t0 = MPI_Wtime();
    pdgesv_(&n, &nrhs, a, &one, &one, da, ipiv, b, &one, &one, db, info);
    double t = MPI_Wtime() - t0;
    free(ipiv);
    return t;
}
