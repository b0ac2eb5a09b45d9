/* lapack_layout.c : lapack_layout.h's copies and checks. A column at a time where the source's columns
 * are contiguous, else in 32 x 32 tiles (a transpose at memory speed); past 64 MiB in column ranges on
 * the pool (why that threshold: for_cols). */
#include "lapack_layout.h"

#include "cpu_matmul.h" /* fm_pool_run */

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* dst (column-major, leading dimension ld) = src's rows x cols with element strides rs, cs: a column at
 * a time where src's columns are contiguous, else in 32 x 32 tiles (a transpose at memory speed). */
#define GATHER_TILES(T)                                                                                   \
    for (int64_t i0 = 0; i0 < rows; i0 += 32)                                                             \
        for (int64_t j0 = 0; j0 < cols; j0 += 32) {                                                       \
            const int64_t i1 = fm_min_i64(rows, i0 + 32), j1 = fm_min_i64(cols, j0 + 32);                 \
            for (int64_t j = j0; j < j1; j++)                                                             \
                for (int64_t i = i0; i < i1; i++)                                                         \
                    ((T *)dst)[i + j * ld] = ((const T *)src)[i * rs + j * cs];                           \
        }
typedef struct { uint64_t lo, hi; } u128;
static void gather(char *dst, int64_t ld, const char *src, int64_t rs, int64_t cs, int64_t rows, int64_t cols,
                   size_t es)
{
    if (rs == 1 || rows == 1) {
        for (int64_t j = 0; j < cols; j++)
            memcpy(dst + (size_t)(j * ld) * es, src + j * cs * (int64_t)es, (size_t)rows * es);
        return;
    }
    switch (es) {
    case 4: GATHER_TILES(uint32_t) break;
    case 8: GATHER_TILES(uint64_t) break;
    default: GATHER_TILES(u128) break;
    }
}

/* fn(arg, j0, j1) over the columns [0, cols) of a matrix of `bytes`, in up to par ranges on the pool.
 * One entry's copies and checks are memory passes that a single thread ran at a fifth of the machine's
 * bandwidth: at n = 4096 f64 (128 MiB) they took a third of a 16-thread cholesky (129 -> 79 ms on the
 * H200 host). Below 64 MiB they stay serial: at n = 1024 (8 MiB) the pool's threads, sharing the cores
 * with OpenBLAS's workers still spinning after the last call, made a 5 ms cholesky take 114. */
typedef void (*cols_fn)(void *arg, int64_t j0, int64_t j1);
typedef struct {
    cols_fn fn;
    void *arg;
    int64_t cols, per;
} cols_job;
static void cols_item(void *arg, int64_t item)
{
    const cols_job *j = arg;
    const int64_t j0 = item * j->per, j1 = fm_min_i64(j->cols, j0 + j->per);
    if (j0 < j1)
        j->fn(j->arg, j0, j1);
}
static void for_cols(int par, int64_t cols, size_t bytes, cols_fn fn, void *arg)
{
    if (par <= 1 || cols < 2 || bytes < ((size_t)64 << 20)) {
        fn(arg, 0, cols);
        return;
    }
    const int parts = (int)fm_min_i64(par, cols);
    cols_job j = {fn, arg, cols, (cols + parts - 1) / parts};
    fm_pool_run(parts, parts, cols_item, &j);
}

typedef struct {
    char *dst;
    const char *src;
    int64_t ld, rs, cs, rows;
    size_t es;
} gather_job;
static void gather_cols(void *arg, int64_t j0, int64_t j1)
{
    const gather_job *g = arg;
    gather(g->dst + (size_t)(j0 * g->ld) * g->es, g->ld, g->src + j0 * g->cs * (int64_t)g->es, g->rs, g->cs, g->rows,
           j1 - j0, g->es);
}
void fm_lapack_gather(int par, char *dst, int64_t ld, const char *src, int64_t rs, int64_t cs, int64_t rows,
                    int64_t cols, size_t es)
{
    gather_job g = {dst, src, ld, rs, cs, rows, es};
    for_cols(par, cols, (size_t)(rows * cols) * es, gather_cols, &g);
}

void fm_lapack_scatter(int par, char *dst, const char *src, int64_t ld, int64_t rows, int64_t cols, size_t es)
{
    fm_lapack_gather(par, dst, cols, src, ld, 1, cols, rows, es); /* dst^T is column-major with leading dimension cols */
}

/* Whether rows x cols of column-major w are all finite. */
static int all_finite(const char *w, int64_t ld, int64_t rows, int64_t cols, size_t es, size_t rs)
{
    const int64_t k = (int64_t)(es / rs); /* reals an element */
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows * k; i++) {
            const size_t at = (size_t)(j * ld * k + i);
            if (rs == 4 ? !isfinite(((const float *)w)[at]) : !isfinite(((const double *)w)[at]))
                return 0;
        }
    return 1;
}

typedef struct {
    const char *w;
    int64_t ld, rows;
    size_t es, rs;
    atomic_int bad;
} finite_job;
static void finite_cols(void *arg, int64_t j0, int64_t j1)
{
    finite_job *f = arg;
    if (!atomic_load_explicit(&f->bad, memory_order_relaxed) &&
        !all_finite(f->w + (size_t)(j0 * f->ld) * f->es, f->ld, f->rows, j1 - j0, f->es, f->rs))
        atomic_store_explicit(&f->bad, 1, memory_order_relaxed);
}
int fm_lapack_all_finite(int par, const char *w, int64_t ld, int64_t rows, int64_t cols, size_t es, size_t rs)
{
    finite_job f = {.w = w, .ld = ld, .rows = rows, .es = es, .rs = rs};
    atomic_init(&f.bad, 0);
    for_cols(par, cols, (size_t)(rows * cols) * es, finite_cols, &f);
    return !atomic_load(&f.bad);
}

/* Zero the strict lower (lower = 1) or upper triangle of column-major rows x cols w: one run per column. */
typedef struct {
    char *w;
    int64_t ld, rows;
    size_t es;
    int lower;
} zero_job;
static void zero_cols(void *arg, int64_t j0, int64_t j1)
{
    const zero_job *z = arg;
    for (int64_t j = j0; j < j1; j++) {
        const int64_t i0 = z->lower ? j + 1 : 0, i1 = z->lower ? z->rows : fm_min_i64(j, z->rows);
        if (i1 > i0)
            memset(z->w + (size_t)(i0 + j * z->ld) * z->es, 0, (size_t)(i1 - i0) * z->es);
    }
}
void fm_lapack_zero_triangle(int par, char *w, int64_t ld, int64_t rows, int64_t cols, size_t es, int lower)
{
    zero_job z = {w, ld, rows, es, lower};
    for_cols(par, cols, (size_t)(rows * cols) * es, zero_cols, &z);
}

