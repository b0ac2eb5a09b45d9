/* dist_fft_util.h : what tests/mpi's FFT tests share (included by each; static functions): the
 * checks (mpi_check.h), a naive separable DFT in double, and the blocks of each rank made from and
 * summed back into a global complex array. */
#ifndef FM_DIST_FFT_UTIL_H
#define FM_DIST_FFT_UTIL_H

#include "mpi_check.h"

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef double complex cd;

static int64_t prod(const int64_t *v, int nd)
{
    int64_t k = 1;
    for (int i = 0; i < nd; i++)
        k *= v[i];
    return k;
}

/* naive DFT of x (shape n, C order) along every axis, in place; sign -1 forward */
static void naive_dft(cd *x, int nd, const int64_t *n, int sign)
{
    int64_t total = prod(n, nd);
    cd *tmp = malloc(sizeof(cd) * (size_t)total);
    for (int ax = 0; ax < nd; ax++) {
        int64_t stride = prod(n + ax + 1, nd - ax - 1), len = n[ax];
        for (int64_t i = 0; i < total; i++) {
            int64_t k = (i / stride) % len, base = i - k * stride;
            cd s = 0;
            for (int64_t j = 0; j < len; j++)
                s += x[base + j * stride] * cexp(sign * 2 * M_PI * I * (double)((j * k) % len) / (double)len);
            tmp[i] = s;
        }
        memcpy(x, tmp, sizeof(cd) * (size_t)total);
    }
    free(tmp);
}

/* the global index of element e of the block of side s (storage order; axes 0, 1 swapped when t) */
static int64_t global_index(int nd, const int64_t *glob, const int64_t *loc, const int64_t *off, int t, int64_t e)
{
    int64_t idx[3] = {0, 0, 0}, rem = e;
    for (int i = nd - 1; i >= 0; i--) {
        idx[i] = rem % loc[i] + off[i];
        rem /= loc[i];
    }
    if (t) { /* the swapped array's (i1, i0, i2) -> the global (i0, i1, i2) */
        int64_t a = idx[0];
        idx[0] = idx[1], idx[1] = a;
    }
    int64_t k = 0; /* glob: the global shape in its own axis order */
    for (int i = 0; i < nd; i++)
        k = k * glob[i] + idx[i];
    return k;
}

/* the block (loc, off: nd entries) of the global complex array g (NULL: zeros) of logical shape glob
 * (axes 0, 1 swapped when t) as typed scalars (complex: re, im), zeroed past its end; its size in
 * *bytes unless bytes is NULL */
static void *block_at(int nd, const int64_t *loc, const int64_t *off, const cd *g, const int64_t *glob, int t,
                      int real, int dbl, size_t *bytes)
{
    int64_t m = prod(loc, nd), per = real ? 1 : 2;
    const size_t size = (size_t)(m * per) * (dbl ? 8 : 4);
    char *b = calloc(size + 16, 1); /* never a zero-byte allocation */
    for (int64_t e = 0; g && b && e < m; e++) {
        cd v = g[global_index(nd, glob, loc, off, t, e)];
        double re[2] = {creal(v), cimag(v)};
        for (int c = 0; c < per; c++) {
            if (dbl)
                ((double *)b)[e * per + c] = re[c];
            else
                ((float *)b)[e * per + c] = (float)re[c];
        }
    }
    if (bytes)
        *bytes = size;
    return b;
}

/* sum every rank's block of side w into a global complex array (of glob's total size) */
static cd *assemble(MPI_Comm comm, const fm_dist_plan *p, int w, int real, int dbl, const int64_t *glob, int t, const void *b)
{
    int nd = fm_dist_fft_ndim(p);
    int64_t loc[3], off[3], total = prod(glob, nd), per = real ? 1 : 2;
    fm_dist_fft_local(p, w, loc, off);
    double *acc = calloc((size_t)(2 * total), sizeof(double));
    for (int64_t e = 0; e < prod(loc, nd); e++)
        for (int c = 0; c < per; c++)
            acc[2 * global_index(nd, glob, loc, off, t, e) + c] =
                dbl ? ((const double *)b)[e * per + c] : ((const float *)b)[e * per + c];
    MPI_Allreduce(MPI_IN_PLACE, acc, (int)(2 * total), MPI_DOUBLE, MPI_SUM, comm);
    cd *out = malloc(sizeof(cd) * (size_t)total);
    for (int64_t i = 0; i < total; i++)
        out[i] = acc[2 * i] + I * acc[2 * i + 1];
    free(acc);
    return out;
}

static double rel_err(const cd *a, const cd *b, int64_t m)
{
    double e = 0, s = 0;
    for (int64_t i = 0; i < m; i++) {
        e = fmax(e, cabs(a[i] - b[i]));
        s = fmax(s, cabs(b[i]));
    }
    return e / (s > 0 ? s : 1);
}

#endif /* FM_DIST_FFT_UTIL_H */
