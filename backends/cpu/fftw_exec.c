/* fftw_exec.c : running a plan of the FFTW backend (fftw_impl.h): FFTW's plan straight on the
 * caller's arrays where it was planned for them and the pointers keep FFTW's alignment, else
 * the chunks, on the library's OpenMP threads, each chunk along its path (fftw_fft.c's header
 * lists them) with the chain applied as the data moves. */
#include "fftw_impl.h"

#include <omp.h>
#include <stdatomic.h>

/* FFTW's new-array execute of x's kind in precision PRE (fftw: double, fftwf: single) */
#define EXECUTE(PRE)                                                                                  \
    (x->kind == FM_FFT_C2C   ? PRE##_execute_dft((PRE##_plan)p, in, out)                             \
     : x->kind == FM_FFT_R2C ? PRE##_execute_dft_r2c((PRE##_plan)p, in, out)                         \
                             : PRE##_execute_dft_c2r((PRE##_plan)p, in, out))

static void run_plan(const fftw_impl *x, void *p, void *in, void *out)
{
    if (x->dbl)
        EXECUTE(fftw);
    else
        EXECUTE(fftwf);
}

static void batch_offsets(const fftw_impl *x, int64_t b, int64_t off[4])
{
    off[0] = off[1] = off[2] = off[3] = 0;
    for (int i = x->nb - 1; i >= 0; i--) {
        int64_t q = b / x->bext[i], r = b - q * x->bext[i];
        b = q;
        off[0] += r * x->b_in[i];
        off[1] += r * x->b_out[i];
        off[2] += r * x->b_pa[i];
        off[3] += r * x->b_ea[i];
    }
}

/* The epilog on transforms b0 .. b0+cnt-1 of out, in place, right after their FFT. */
static void epilog_in_place(const fftw_impl *x, void *const *ptrs, int64_t b0, int64_t cnt)
{
    int64_t off[4];
    if (x->c.epi_ops && cnt > 1 && x->nb == 1 && x->b_out[0] == 1 && x->c.s_out[2] != 1 && x->pass_threads <= 1) {
        batch_offsets(x, b0, off);
        fm_fft_scatter_cols(&x->c, x->dbl, NULL, ptrs[FM_FFT_OUT], ptrs[FM_FFT_EPILOG], off[1], off[3], cnt);
        return;
    }
    for (int64_t e = 0; x->c.epi_ops && e < cnt; e++) {
        batch_offsets(x, b0 + e, off);
        fm_fft_scatter(&x->c, x->dbl, NULL, ptrs[FM_FFT_OUT], ptrs[FM_FFT_EPILOG], off[1], off[3], x->pass_threads);
    }
}

/* Run chunk c with scratch sin/sout (sout == sin when the scratch is in place). */
static void run_chunk(const fftw_impl *x, void *const *ptrs, int64_t c, void *sin, void *sout)
{
    int64_t b0 = c * x->chunk, cnt = fm_min_i64(x->chunk, x->batch - b0);
    size_t ein = x->rs * (x->c.in_cplx ? 2 : 1), eout = x->rs * (x->c.out_cplx ? 2 : 1);
    int64_t off[4];
    const int same_ptr = ptrs[FM_FFT_IN] == ptrs[FM_FFT_OUT];
    if (x->ip_plan && (x->pro_out || same_ptr) && (!same_ptr || x->same_io)) {
        batch_offsets(x, b0, off);
        char *op = (char *)ptrs[FM_FFT_OUT] + off[1] * (int64_t)eout;
        if (fftw_aligned(x, op)) {
            for (int64_t e = 0; x->pro_out && e < cnt; e++) {
                batch_offsets(x, b0 + e, off);
                fm_fft_gather(&x->c, x->dbl, ptrs[FM_FFT_IN], ptrs[FM_FFT_PROLOG], off[0], off[2],
                              (char *)ptrs[FM_FFT_OUT] + off[1] * (int64_t)eout, x->pass_threads);
            }
            run_plan(x, cnt == x->chunk ? x->ip_plan : x->ip_rem, op, op);
            epilog_in_place(x, ptrs, b0, cnt);
            return;
        }
    }
    if (x->od_plan) {
        batch_offsets(x, b0, off);
        char *ip = (char *)ptrs[FM_FFT_IN] + off[0] * (int64_t)ein, *op = (char *)ptrs[FM_FFT_OUT] + off[1] * (int64_t)eout;
        int ok = fftw_aligned(x, op);
        if (x->od_in_direct)
            ok = ok && ptrs[FM_FFT_IN] != ptrs[FM_FFT_OUT] && fftw_aligned(x, ip);
        if (ok) {
            if (!x->od_in_direct)
                for (int64_t e = 0; e < cnt; e++) {
                    batch_offsets(x, b0 + e, off);
                    char *dst = (char *)sin + (size_t)(e * x->c.sd_in) * ein;
                    fm_fft_gather(&x->c, x->dbl, ptrs[FM_FFT_IN], ptrs[FM_FFT_PROLOG], off[0], off[2], dst,
                                  x->pass_threads);
                }
            run_plan(x, cnt == x->chunk ? x->od_plan : x->od_rem, x->od_in_direct ? ip : sin, op);
            epilog_in_place(x, ptrs, b0, cnt);
            return;
        }
    }
    if (x->cols) {
        batch_offsets(x, b0, off);
        fm_fft_gather_cols(&x->c, x->dbl, ptrs[FM_FFT_IN], ptrs[FM_FFT_PROLOG], off[0], off[2], cnt, sin);
        run_plan(x, cnt == x->chunk ? x->chunk_plan : x->rem_plan, sin, sout);
        fm_fft_scatter_cols(&x->c, x->dbl, sout, ptrs[FM_FFT_OUT], ptrs[FM_FFT_EPILOG], off[1], off[3], cnt);
        return;
    }
    for (int64_t e = 0; e < cnt; e++) {
        batch_offsets(x, b0 + e, off);
        char *dst = (char *)sin + (size_t)(e * x->c.sd_in) * ein;
        fm_fft_gather(&x->c, x->dbl, ptrs[FM_FFT_IN], ptrs[FM_FFT_PROLOG], off[0], off[2], dst, x->pass_threads);
    }
    run_plan(x, cnt == x->chunk ? x->chunk_plan : x->rem_plan, sin, sout);
    for (int64_t e = 0; e < cnt; e++) {
        batch_offsets(x, b0 + e, off);
        const char *src = (const char *)sout + (size_t)(e * x->c.sd_out) * eout;
        fm_fft_scatter(&x->c, x->dbl, src, ptrs[FM_FFT_OUT], ptrs[FM_FFT_EPILOG], off[1], off[3], x->pass_threads);
    }
}

static _Thread_local int last_path; /* fm_fftw_last_path(), for the tests */
int fm_fftw_last_path(void) { return last_path; }

fm_status fm_fftw_run(const fftw_impl *x, void *const *ptrs)
{
    last_path = FM_FFTW_RAN_NOTHING;
    if (x->batch == 0)
        return FM_OK;
    if (x->direct_ip && ptrs[FM_FFT_IN] == ptrs[FM_FFT_OUT] && fftw_aligned(x, ptrs[FM_FFT_OUT])) {
        run_plan(x, x->direct_ip, ptrs[FM_FFT_OUT], ptrs[FM_FFT_OUT]);
        last_path = FM_FFTW_RAN_DIRECT_INPLACE;
        return FM_OK;
    }
    if (x->direct && ptrs[FM_FFT_IN] != ptrs[FM_FFT_OUT] && fftw_aligned(x, ptrs[FM_FFT_IN]) &&
        fftw_aligned(x, ptrs[FM_FFT_OUT])) {
        run_plan(x, x->direct, ptrs[FM_FFT_IN], ptrs[FM_FFT_OUT]);
        last_path = FM_FFTW_RAN_DIRECT;
        return FM_OK;
    }
    last_path = FM_FFTW_RAN_CHUNKS;
    size_t bin = scratch_in_bytes(x, x->chunk), bout = scratch_out_bytes(x, x->chunk);
    atomic_int oom = 0;
    if (x->threads <= 1 || x->nchunks <= 1) {
        void *sin, *sout;
        if (!fm_fftw_scratch_get(bin, bout, &sin, &sout))
            return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory for %zu bytes of scratch", bin + bout);
        for (int64_t c = 0; c < x->nchunks; c++)
            run_chunk(x, ptrs, c, sin, sout);
        fm_fftw_scratch_put(sin, sout);
        return FM_OK;
    }
    /* column chunks: every thread writes every row of out, so a fresh out is faulted in
     * first, each thread its own part (host_prefault.c) */
    const intptr_t ib = (intptr_t)ptrs[FM_FFT_IN], ob = (intptr_t)ptrs[FM_FFT_OUT];
    const int prefault = x->prefault && (ob + x->out_hi <= ib + x->in_lo || ib + x->in_hi <= ob + x->out_lo);
#pragma omp parallel num_threads(x->threads)
    {
        void *sin, *sout;
        if (!fm_fftw_scratch_get(bin, bout, &sin, &sout))
            atomic_store(&oom, 1);
        if (prefault) {
            fm_host_prefault((char *)ptrs[FM_FFT_OUT] + x->out_lo, (size_t)(x->out_hi - x->out_lo),
                             omp_get_thread_num(), omp_get_num_threads());
#pragma omp barrier
        }
#pragma omp for schedule(static)
        for (int64_t c = 0; c < x->nchunks; c++)
            if (sin)
                run_chunk(x, ptrs, c, sin, sout);
        fm_fftw_scratch_put(sin, sout);
    }
    if (atomic_load(&oom))
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory for %zu bytes of scratch per thread",
                       bin + bout);
    return FM_OK;
}

fm_status fm_fftw_execute(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    (void)args; /* pointer-only: nothing per call */
    return fm_fftw_run(plan->impl, ptrs);
}

