/* test_dist_move_body.c : the GPU ranks' move kernel's element (distributed/dist_move_body.h, the very
 * text NVRTC compiles) run on the host over every k, as the kernel's grid-stride loop does: a pack
 * (strided source, contiguous destination), a transpose and chains (scale, conj, a real and a complex
 * multiply array indexed as the source or as the destination), f32 and f64, against a direct loop in
 * double complex. */
#include "check.h"

#include <complex.h>
#include <math.h>
#include <stdlib.h>

#include "../../distributed/dist_move_body.h"

static void run_f64(const fm_dist_move_args *a)
{
    for (long long k = 0; k < a->e0 * a->e1 * a->e2; k++)
        FM_DIST_MOVE_ONE(double, *a, k);
}

static void run_f32(const fm_dist_move_args *a)
{
    for (long long k = 0; k < a->e0 * a->e1 * a->e2; k++)
        FM_DIST_MOVE_ONE(float, *a, k);
}

/* one move of e over src strides s into dst strides d with flags, checked element by element */
static void one_case(const long long e[3], const long long s[3], const long long d[3], unsigned flags, int dbl)
{
    long long ns = 1 + (e[0] - 1) * s[0] + (e[1] - 1) * s[1] + (e[2] - 1) * s[2];
    long long nd = 1 + (e[0] - 1) * d[0] + (e[1] - 1) * d[1] + (e[2] - 1) * d[2];
    long long na = ns > nd ? ns : nd;
    double complex *x = malloc(sizeof *x * (size_t)ns), *m = malloc(sizeof *m * (size_t)na);
    double *mr = malloc(sizeof *mr * (size_t)na);
    for (long long i = 0; i < ns; i++)
        x[i] = sin(0.3 * (double)i) + I * cos(0.7 * (double)i);
    for (long long i = 0; i < na; i++)
        m[i] = 1.5 + cos((double)i) + I * sin(1.1 * (double)i), mr[i] = 0.5 + sin(0.2 * (double)i);
    const double complex sc = 0.75 - 0.5 * I;
    void *src = malloc((size_t)ns * 16), *dst = calloc((size_t)nd, 16), *arr = malloc((size_t)na * 16);
    for (long long i = 0; i < ns; i++) {
        if (dbl)
            ((double *)src)[2 * i] = creal(x[i]), ((double *)src)[2 * i + 1] = cimag(x[i]);
        else
            ((float *)src)[2 * i] = (float)creal(x[i]), ((float *)src)[2 * i + 1] = (float)cimag(x[i]);
    }
    int cplx = (flags & 8u) != 0;
    for (long long i = 0; i < na; i++) {
        double v[2] = {cplx ? creal(m[i]) : mr[i], cimag(m[i])};
        for (int c = 0; c < (cplx ? 2 : 1); c++) {
            if (dbl)
                ((double *)arr)[(cplx ? 2 : 1) * i + c] = v[c];
            else
                ((float *)arr)[(cplx ? 2 : 1) * i + c] = (float)v[c];
        }
    }
    fm_dist_move_args a = {src, dst, arr, e[0], e[1], e[2], s[0], s[1], s[2], d[0], d[1], d[2],
                           creal(sc), cimag(sc), flags, 0};
    if (dbl)
        run_f64(&a);
    else
        run_f32(&a);
    double worst = 0;
    for (long long i0 = 0; i0 < e[0]; i0++)
        for (long long i1 = 0; i1 < e[1]; i1++)
            for (long long i2 = 0; i2 < e[2]; i2++) {
                long long so = i0 * s[0] + i1 * s[1] + i2 * s[2], dof = i0 * d[0] + i1 * d[1] + i2 * d[2];
                double complex want = x[so];
                if (flags & 1u)
                    want *= sc;
                if (flags & 4u) {
                    long long mo = (flags & 16u) ? dof : so;
                    want *= cplx ? m[mo] : mr[mo];
                }
                if (flags & 2u)
                    want = conj(want);
                double gr = dbl ? ((double *)dst)[2 * dof] : ((float *)dst)[2 * dof];
                double gi = dbl ? ((double *)dst)[2 * dof + 1] : ((float *)dst)[2 * dof + 1];
                double err = cabs(gr + I * gi - want) / (cabs(want) + 1);
                worst = err > worst ? err : worst;
            }
    CHECK_MSG(worst <= (dbl ? 1e-14 : 1e-5), "flags %u %s: worst error %.3g", flags, dbl ? "f64" : "f32", worst);
    free(x), free(m), free(mr), free(src), free(dst), free(arr);
}

int main(void)
{
    /* a pack: columns [2, 5) of a 4 x 7 x 3 slab into a contiguous 4 x 3 x 3 block */
    const long long e_pack[3] = {4, 3, 3}, s_pack[3] = {21, 3, 1}, d_pack[3] = {9, 3, 1};
    /* a transpose: Y (5 x 4 x 2) into T (4 x 5 x 2) */
    const long long e_t[3] = {5, 4, 2}, s_t[3] = {8, 2, 1}, d_t[3] = {2, 10, 1};
    static const unsigned flags[] = {0, 1, 2, 3, 4, 4 | 16, 4 | 8, 4 | 8 | 16, 1 | 2 | 4 | 8 | 16, 1 | 4 | 8};
    for (int dbl = 0; dbl < 2; dbl++)
        for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
            one_case(e_pack, s_pack, d_pack, flags[f], dbl);
            one_case(e_t, s_t, d_t, flags[f], dbl);
        }
    TEST_MAIN_RETURN();
}
