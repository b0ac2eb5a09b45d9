/* cufft_fft.c : FFT on CUDA devices through cuFFT (c2c, r2c, c2r; single and double
 * precision; 1-3 axes anywhere, batched over the others).
 *
 * Layout: the transform axes become cuFFT's advanced layout (istride, inembed; c2c axes are
 * ordered by stride so any nesting order works), the batch axes' longest run that collapses
 * into one stride becomes cuFFT's batch (idist, odist), any other batch axes are looped on
 * the host with offset pointers. 64-bit sizes through cufftXtMakePlanMany.
 *
 * Chains (prolog / epilog, the norm folded in) run inside cuFFT as LTO callbacks generated
 * and compiled with NVRTC (fusion/cuda/cufft_callback.c), attached with
 * cufftXtSetJITCallback between cufftCreate and planning: no pass over the data outside the
 * FFT. The callbacks read the execute-time array pointers from a small device block the
 * plan owns (cuFFT's caller info is fixed at planning); it is rewritten, stream-ordered,
 * only when the pointers change.
 *
 * Work area: auto-allocation off; the context's buffer for (device, stream) is set at
 * execute. A plan's cuFFT handle is one object: executions hold the plan's mutex while they
 * set the stream / work area and enqueue; a plan with a parameter block records an event after
 * each execution and every execution first waits for it, so executions of one plan on
 * several streams are ordered around the block; one plan per stream runs them concurrently. */
#include "cuda/cufft_callback.h"
#include "cuda/nvrtc_cache.h"
#include "cuda_nvtx.h"
#include "cuda_workspace.h"
#include "cufft_restage.h"
#include "fft_axis_split.h"
#include "internal.h"

#include <cuda_runtime.h>
#include <cufft.h>
#include <cufftXt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(fm_cufft_cb_params) == 4 * sizeof(void *), "execute writes the block as four pointers");

/* cuFFT's advanced layout of a problem: the transform axes, cuFFT's batch, and the batch axes
 * beyond it, looped on the host */
typedef struct layout {
    int rank;
    long long n[3], inembed[3], onembed[3];
    long long istride, ostride, idist, odist, batch;
    int nloop;
    int64_t loop_ext[FM_MAX_NDIM], loop_in[FM_MAX_NDIM], loop_out[FM_MAX_NDIM];
} layout;

typedef struct cufft_impl {
    fm_cuda_ws_table *ws;          /* the backend's state: the work areas */
    const fm_attachments *attach; /* while planning: the fm_plan's attachments (callback sources) */
    int device;
    cufftHandle handle;
    int have_handle;
    size_t work_size;
    int empty;                     /* a zero extent: nothing to do */
    int inverse;
    size_t es_in, es_out;          /* element sizes */
    layout L;
    /* c2r: cuFFT may overwrite its input, so it transforms a copy (in the work buffer) */
    int copy_input;
    int64_t copy_lo;               /* byte offset of the input's first byte from its pointer */
    size_t copy_bytes, copy_room;  /* bytes copied; room they take at the start of the buffer */
    int callbacks;                 /* the chains run inside cuFFT (LTO callbacks) or as passes */
    /* cuFFT refused callbacks for this size (CUFFT_INVALID_SIZE for some lengths): the chains
     * run as a prolog pass into the staging buffer and an epilog pass in place on out */
    fm_cufft_pass *pass[2];
    int params_need_base;          /* looped: the callbacks add the loop offset from the data pointers */
    void *d_params;                /* device block: fm_cufft_cb_params + the data base pointers */
    /* cuFFT reads the LTO-IR and the caller-info array when it plans, not when they are set:
     * both live as long as the plan */
    void *ltoir[2];
    void *caller_info[1];
    /* execution state, under lock */
    pthread_mutex_t lock;
    cudaStream_t last_stream;
    int used;
    void *last_work;
    const void *last_params[4];
    cudaEvent_t ev;
} cufft_impl;

/* ---- errors ---- */
static const char *cufft_name(cufftResult r)
{
    switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA: return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    case CUFFT_MISSING_DEPENDENCY: return "CUFFT_MISSING_DEPENDENCY";
    case CUFFT_NVRTC_FAILURE: return "CUFFT_NVRTC_FAILURE";
    case CUFFT_NVJITLINK_FAILURE: return "CUFFT_NVJITLINK_FAILURE";
    default: return "CUFFT error";
    }
}

static fm_status cufft_status(cufftResult r, const char *what)
{
    if (r == CUFFT_SUCCESS)
        return FM_OK;
    (void)cudaGetLastError();
    fm_status s = r == CUFFT_ALLOC_FAILED ? FM_ERR_OUT_OF_MEMORY
                  : r == CUFFT_INVALID_SIZE || r == CUFFT_NOT_SUPPORTED || r == CUFFT_NOT_IMPLEMENTED
                      ? FM_ERR_NOT_SUPPORTED
                      : FM_ERR_BACKEND;
    return fm_fail(s, "fft on cuda: %s: %s (%d)", what, cufft_name(r), (int)r);
}

/* ---- backend state: the work areas ---- */
static fm_status cufft_probe(const fm_settings *settings, void **state, const char **why)
{
    (void)settings;
    return fm_cuda_ws_probe("cufft", state, why);
}

static void cufft_release(void *state) { fm_cuda_ws_table_destroy(state); }

/* ---- layout ---- */
/* Sort the axes ax[0..n) by decreasing stride (outermost first). */
static void sort_outermost_first(int *ax, int n, const int64_t *strides)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strides[ax[j]] > strides[ax[j - 1]]; j--) {
            int t = ax[j];
            ax[j] = ax[j - 1];
            ax[j - 1] = t;
        }
}

/* Strides of the transform axes (cuFFT order) -> stride of the innermost and the embeds. */
static int embed_of(int rank, const int64_t *st, const int64_t *ext, long long *stride, long long *embed)
{
    if (st[rank - 1] <= 0)
        return 0;
    *stride = st[rank - 1];
    embed[0] = ext[0];
    for (int i = 1; i < rank; i++) {
        if (st[i] <= 0 || st[i - 1] % st[i] != 0 || st[i - 1] / st[i] < ext[i])
            return 0;
        embed[i] = st[i - 1] / st[i];
    }
    return 1;
}

static fm_status make_layout(const fm_problem *p, layout *L)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    for (int d = 0; d < ti->ndim; d++)
        if ((ti->shape[d] > 1 && ti->strides[d] <= 0) || (to->shape[d] > 1 && to->strides[d] <= 0))
            return fm_fail(FM_ERR_NOT_SUPPORTED, "fft on cuda: %s has a %s stride along axis %d; cuFFT takes "
                           "positive strides: pass contiguous arrays", ti->strides[d] <= 0 ? "in" : "out",
                           (ti->strides[d] < 0 || to->strides[d] < 0) ? "negative" : "zero", d);
    int ax[3];
    for (int i = 0; i < fp->naxes; i++)
        ax[i] = fp->axes[i];
    /* c2c: any order of the axes is the same transform; order them outermost first */
    if (fp->kind == FM_FFT_C2C)
        sort_outermost_first(ax, fp->naxes, ti->strides);
    L->rank = fp->naxes;
    int64_t si[3], so[3], ei[3], eo[3];
    for (int i = 0; i < fp->naxes; i++) {
        int a = ax[i];
        for (int k = 0; k < fp->naxes; k++)
            if (fp->axes[k] == a)
                L->n[i] = fp->n[k];
        si[i] = ti->shape[a] > 1 ? ti->strides[a] : 0, so[i] = to->shape[a] > 1 ? to->strides[a] : 0;
        ei[i] = ti->shape[a], eo[i] = to->shape[a];
    }
    /* an axis of extent 1 has no meaningful stride: give it the span of the axes inside it */
    for (int i = fp->naxes - 1; i >= 0; i--) {
        if (si[i] == 0)
            si[i] = i == fp->naxes - 1 ? 1 : si[i + 1] * ei[i + 1];
        if (so[i] == 0)
            so[i] = i == fp->naxes - 1 ? 1 : so[i + 1] * eo[i + 1];
    }
    if (!embed_of(L->rank, si, ei, &L->istride, L->inembed) || !embed_of(L->rank, so, eo, &L->ostride, L->onembed))
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fft on cuda: the transformed axes' strides do not nest as cuFFT's "
                       "layout requires (in strides / out strides along the axes not decreasing by whole factors); "
                       "pass contiguous arrays");
    /* batch axes (extent > 1), outermost (by input stride) first */
    int b[FM_MAX_NDIM], nb = 0;
    for (int d = 0; d < ti->ndim; d++) {
        int tr = 0;
        for (int i = 0; i < fp->naxes; i++)
            tr |= fp->axes[i] == d;
        if (!tr && ti->shape[d] > 1)
            b[nb++] = d;
    }
    sort_outermost_first(b, nb, ti->strides);
    /* the longest (by count) run of consecutive batch axes that collapses in both in and out */
    int best_lo = 0, best_hi = -1;
    int64_t best = 0;
    for (int lo = 0; lo < nb; lo++) {
        int64_t count = ti->shape[b[lo]];
        if (count > best)
            best = count, best_lo = lo, best_hi = lo;
        for (int hi = lo + 1; hi < nb; hi++) {
            int prev = b[hi - 1], cur = b[hi];
            if (ti->strides[prev] != ti->strides[cur] * ti->shape[cur] ||
                to->strides[prev] != to->strides[cur] * to->shape[cur])
                break;
            count *= ti->shape[cur];
            if (count > best)
                best = count, best_lo = lo, best_hi = hi;
        }
    }
    if (best_hi >= 0) {
        L->batch = best;
        L->idist = ti->strides[b[best_hi]];
        L->odist = to->strides[b[best_hi]];
    } else {
        L->batch = 1;
        L->idist = L->inembed[0] * L->istride * (L->rank > 1 ? L->inembed[1] : 1) * (L->rank > 2 ? L->inembed[2] : 1);
        L->odist = L->onembed[0] * L->ostride * (L->rank > 1 ? L->onembed[1] : 1) * (L->rank > 2 ? L->onembed[2] : 1);
    }
    L->nloop = 0;
    for (int i = 0; i < nb; i++)
        if (i < best_lo || i > best_hi) {
            L->loop_ext[L->nloop] = ti->shape[b[i]];
            L->loop_in[L->nloop] = ti->strides[b[i]];
            L->loop_out[L->nloop] = to->strides[b[i]];
            L->nloop++;
        }
    return FM_OK;
}

/* ---- callbacks ---- */
static cufftXtCallbackType cb_type(fm_dtype t, int store)
{
    switch (t) {
    case FM_F32: return store ? CUFFT_CB_ST_REAL : CUFFT_CB_LD_REAL;
    case FM_F64: return store ? CUFFT_CB_ST_REAL_DOUBLE : CUFFT_CB_LD_REAL_DOUBLE;
    case FM_C64: return store ? CUFFT_CB_ST_COMPLEX : CUFFT_CB_LD_COMPLEX;
    default: return store ? CUFFT_CB_ST_COMPLEX_DOUBLE : CUFFT_CB_LD_COMPLEX_DOUBLE;
    }
}

static int is_half(fm_dtype t) { return t == FM_F16 || t == FM_C32; }

static fm_status attach_callback(const fm_settings *set, cufft_impl *pl, const fm_problem *p, int store, int arch)
{
    fm_cufft_cb_spec sp;
    fm_cufft_cb_spec_from_problem(p, pl->attach, store, pl->params_need_base, &sp);
    if ((sp.ops & FM_FFT_OP_CALLBACK) && !sp.user_source)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "fft on cuda: the %s callback's source is only available while "
                       "fm_fft_plan runs", store ? "epilog" : "prolog");
    size_t size = 0;
    const char *symbol = NULL;
    fm_status s = fm_cufft_cb_compile(set, &sp, arch, &pl->ltoir[store], &size, &symbol, NULL);
    if (s != FM_OK)
        return s;
    pl->caller_info[0] = pl->d_params;
    return cufft_status(cufftXtSetJITCallback(pl->handle, symbol, pl->ltoir[store], size, cb_type(sp.data, store),
                                              pl->caller_info),
                        store ? "cufftXtSetJITCallback(store)" : "cufftXtSetJITCallback(load)");
}

/* ---- plan ---- */
static void cufft_destroy(void *impl)
{
    cufft_impl *pl = impl;
    if (!pl)
        return;
    if (pl->have_handle)
        cufftDestroy(pl->handle);
    if (pl->d_params)
        cudaFree(pl->d_params); /* synchronizes: no queued callback still reads it */
    if (pl->ev)
        cudaEventDestroy(pl->ev);
    free(pl->ltoir[0]);
    free(pl->ltoir[1]);
    fm_cufft_pass_destroy(pl->pass[0]);
    fm_cufft_pass_destroy(pl->pass[1]);
    (void)cudaGetLastError();
    pthread_mutex_destroy(&pl->lock);
    free(pl);
}

static cudaDataType cuda_type(fm_dtype t)
{
    switch (t) {
    case FM_F32: return CUDA_R_32F;
    case FM_F64: return CUDA_R_64F;
    case FM_C64: return CUDA_C_32F;
    case FM_F16: return CUDA_R_16F;
    case FM_C32: return CUDA_C_16F;
    default: return CUDA_C_64F;
    }
}

static fm_status exec_once(cufft_impl *pl, void *in, void *out)
{
    cufftResult r = cufftXtExec(pl->handle, in, out, pl->inverse ? CUFFT_INVERSE : CUFFT_FORWARD);
    return cufft_status(r, "cufftXtExec");
}

static fm_status cufft_run(const fm_plan *plan, void *const *ptrs, const fm_exec_args *args, void *stream_)
{
    (void)args; /* pointer-only: nothing per call */
    cufft_impl *pl = plan->impl;
    if (pl->empty)
        return FM_OK;
    cudaStream_t stream = (cudaStream_t)stream_;
    fm_status s = fm_cuda_use_device(pl->device);
    if (s != FM_OK)
        return s;
    char *buf = NULL;
    fm_cuda_ws_lease lease = NULL; /* held until the steps using buf are queued */
    if (pl->copy_room + pl->work_size &&
        (s = fm_cuda_ws_acquire(pl->ws, pl->device, stream, pl->copy_room + pl->work_size, (void **)&buf,
                                &lease)) != FM_OK)
        return s;
    void *work = pl->work_size ? buf + pl->copy_room : NULL;
    char *in = ptrs[FM_FFT_IN];
    if (pl->copy_input)
        in = buf - pl->copy_lo; /* filled below, after the parameters the prolog pass reads */
    pthread_mutex_lock(&pl->lock);
    if (pl->callbacks) {
        const void *want[4] = {ptrs[FM_FFT_PROLOG], ptrs[FM_FFT_EPILOG], pl->params_need_base ? in : NULL,
                               pl->params_need_base ? ptrs[FM_FFT_OUT] : NULL};
        /* The one parameter block serves every stream: each execution waits for the previous
         * one (an event recorded after it, on its own stream), so a block written on one stream
         * is never read before the write lands nor rewritten under an FFT still reading it on
         * another. (Compared by handle, streams cannot be told apart: cudaStreamPerThread is
         * one handle for every thread's stream; on one stream the wait costs nothing.) */
        if (pl->used) {
            cudaError_t e = cudaStreamWaitEvent(stream, pl->ev, 0);
            if ((s = fm_cuda_status(e, "fft on cuda: ordering after the plan's previous execution")) != FM_OK)
                goto out;
        }
        if (!pl->used || memcmp(want, pl->last_params, sizeof want) != 0) {
            /* pageable source: copied out before the call returns, so `want` may go */
            cudaError_t e = cudaMemcpyAsync(pl->d_params, want, sizeof want, cudaMemcpyHostToDevice, stream);
            if ((s = fm_cuda_status(e, "fft on cuda: writing the callback parameters")) != FM_OK)
                goto out;
            memcpy(pl->last_params, want, sizeof want);
        }
    }
    if (!pl->used || pl->last_stream != stream) {
        if ((s = cufft_status(cufftSetStream(pl->handle, stream), "cufftSetStream")) != FM_OK)
            goto out;
        pl->last_stream = stream;
    }
    pl->used = 1;
    if (pl->pass[0]) {
        if ((s = fm_cufft_pass_launch(pl->pass[0], ptrs[FM_FFT_IN], in, pl->d_params, stream)) != FM_OK)
            goto out;
    } else if (pl->copy_input) {
        cudaError_t e = cudaMemcpyAsync(buf, (char *)ptrs[FM_FFT_IN] + pl->copy_lo, pl->copy_bytes,
                                        cudaMemcpyDeviceToDevice, stream);
        if ((s = fm_cuda_status(e, "fft on cuda: copying the c2r input (cuFFT overwrites it)")) != FM_OK)
            goto out;
    }
    if (work && work != pl->last_work) {
        if ((s = cufft_status(cufftSetWorkArea(pl->handle, work), "cufftSetWorkArea")) != FM_OK)
            goto out;
        pl->last_work = work;
    }
    const layout *L = &pl->L;
    int64_t idx[FM_MAX_NDIM] = {0}; /* of the host-looped batch axes (none: one call) */
    for (;;) {
        int64_t oi = 0, oo = 0;
        for (int k = 0; k < L->nloop; k++)
            oi += idx[k] * L->loop_in[k], oo += idx[k] * L->loop_out[k];
        s = exec_once(pl, in + oi * (int64_t)pl->es_in, (char *)ptrs[FM_FFT_OUT] + oo * (int64_t)pl->es_out);
        if (s != FM_OK)
            break;
        int k = L->nloop - 1;
        while (k >= 0 && ++idx[k] == L->loop_ext[k])
            idx[k--] = 0;
        if (k < 0)
            break;
    }
    if (s == FM_OK && pl->pass[1])
        s = fm_cufft_pass_launch(pl->pass[1], ptrs[FM_FFT_OUT], ptrs[FM_FFT_OUT], pl->d_params, stream);
    if (pl->callbacks) { /* the next execution, on whatever stream, waits for this one */
        fm_status r = fm_cuda_status(cudaEventRecord(pl->ev, stream), "fft on cuda: marking the execution's end");
        if (s == FM_OK)
            s = r;
    }
out:
    pthread_mutex_unlock(&pl->lock);
    fm_cuda_ws_release(lease);
    return s;
}
FM_NVTX_EXECUTE(cufft_execute, cufft_run)

/* The FFT reads a copy of the input in the work buffer (same strides), made at execute. */
static void stage_input(cufft_impl *pl, const fm_tensor *ti)
{
    if (pl->copy_input)
        return;
    int64_t lo, hi;
    fm_tensor_byte_span(ti, &lo, &hi);
    pl->copy_input = 1;
    pl->copy_lo = lo;
    pl->copy_bytes = (size_t)(hi - lo);
    pl->copy_room = (pl->copy_bytes + 255) & ~(size_t)255;
}

/* The prolog as a load callback or as a pass. cuFFT 12.0 (CUDA 13.0) on the H200 runs any LTO
 * *load* callback slower than the plain transform, about 9-11 ps per element (an identity
 * callback: 0.072 -> 0.214 ms at 4096 x 4096, 0.65 -> 1.36 ms at 2^20 x 64), while a separate
 * pass costs about one read and one write (~5 ps per element) plus a launch (~3 us of GPU and
 * ~4 us of host time): break-even near 2^19-2^20 elements, and the prolog-mode sweep of
 * benchmarks/fft_gpu.py puts it there. The epilog is always a store callback (1.27x at
 * 4096 x 4096, cheaper than a pass). In complex128 the callback costs far less (0.6 ps per element
 * at 1024 points) and beat the pass on one c2c axis up to 2^20 points at 2^24-2^26 elements (the
 * c128 sweep of fft_gpu.py); at 2^24 points and on a 2-D 4096^2 the pass did. c2c only: a c2r
 * copies its input anyway (stage_input), and the pass writes into that copy at no extra cost. */
#define PROLOG_CALLBACK_MAX_ELEMENTS (1 << 19)
#define PROLOG_CALLBACK_C128_MAX_N (1 << 20)
static int prolog_as_callback(const fm_problem *p, const layout *L)
{
    const fm_fft_params *fp = &p->u.fft;
    int mode = fm_fft_gpu_prolog_mode(p);
    if (mode != FM_FFT_PROLOG_AUTO)
        return mode == FM_FFT_PROLOG_CALLBACK;
    if (p->t[FM_FFT_IN].dtype == FM_C128 && fp->kind == FM_FFT_C2C && fp->naxes == 1 &&
        fp->n[0] <= PROLOG_CALLBACK_C128_MAX_N)
        return 1;
    double elements = (double)L->batch;
    for (int i = 0; i < fp->naxes; i++)
        elements *= (double)fp->n[i];
    return elements <= PROLOG_CALLBACK_MAX_ELEMENTS;
}

/* A chain as a generated kernel: the prolog's writes chain(in) into the staged copy of the
 * input the FFT reads, the epilog's runs in place on out after the FFT. */
static fm_status make_pass(const fm_settings *set, cufft_impl *pl, const fm_problem *p, int store)
{
    fm_cufft_cb_spec sp;
    fm_cufft_cb_spec_from_problem(p, pl->attach, store, 0, &sp);
    fm_status s = fm_cufft_pass_create(set, &sp, pl->device, &pl->pass[store]);
    if (s == FM_OK && !store)
        stage_input(pl, &p->t[FM_FFT_IN]);
    return s;
}

/* A fresh cuFFT handle (the old one destroyed), its work area allocation off. */
static fm_status new_handle(cufft_impl *pl)
{
    if (pl->have_handle)
        cufftDestroy(pl->handle);
    pl->have_handle = 0;
    fm_status s = cufft_status(cufftCreate(&pl->handle), "cufftCreate");
    if (s != FM_OK)
        return s;
    pl->have_handle = 1;
    return cufft_status(cufftSetAutoAllocation(pl->handle, 0), "cufftSetAutoAllocation");
}

static fm_status make_plan(cufft_impl *pl, fm_dtype in, fm_dtype out)
{
    cudaDataType it = cuda_type(in), ot = cuda_type(out);
    cudaDataType et = fm_dtype_is_complex(in) ? it : ot;
    layout *L = &pl->L;
    cufftResult r = cufftXtMakePlanMany(pl->handle, L->rank, L->n, L->inembed, L->istride, L->idist, it,
                                        L->onembed, L->ostride, L->odist, ot, L->batch, &pl->work_size, et);
    return cufft_status(r, "cufftXtMakePlanMany");
}

static const char *const kind_names[3] = {"c2c", "r2c", "c2r"};

/* Half precision (c32 / f16), cuFFT's rules ("Half-precision cuFFT Transforms"): compute
 * capability >= 5.3 and every transformed length a power of two. */
static fm_status check_half(const fm_problem *p)
{
    const fm_fft_params *fp = &p->u.fft;
    const char *dt = fm_dtype_name(fm_dtype_is_complex(p->t[FM_FFT_IN].dtype) ? p->t[FM_FFT_IN].dtype
                                                                               : p->t[FM_FFT_OUT].dtype);
    for (int i = 0; i < fp->naxes; i++) {
        int64_t n = fp->n[i];
        if (n < 1 || (n & (n - 1)) != 0)
            return fm_fail(FM_ERR_NOT_SUPPORTED, "fft on cuda: %s %s along axis %d has length %lld; cuFFT's half "
                           "precision (f16/c32) takes only powers of two as transform lengths: pad or crop to a "
                           "power of two (n= / s=) or use f32/c64", dt, kind_names[fp->kind], fp->axes[i],
                           (long long)n);
    }
    int major = 0, minor = 0, dev = p->exec_device.id;
    fm_status s = fm_cuda_status(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
                                 "fft on cuda: cudaDeviceGetAttribute");
    if (s == FM_OK)
        s = fm_cuda_status(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev),
                           "fft on cuda: cudaDeviceGetAttribute");
    if (s != FM_OK)
        return s;
    if (major * 10 + minor < 53)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fft on cuda: half precision (f16/c32) needs compute capability >= "
                       "5.3; device %d has %d.%d (use f32/c64)", dev, major, minor);
    return FM_OK;
}

/* ... and the layout: the real operand of r2c / c2r dense along the transformed axes (cuFFT
 * takes no strides on the real side in half precision), at most 2^32 elements per call. */
static fm_status check_half_layout(const fm_fft_params *fp, const layout *L)
{
    double per_call = (double)L->batch;
    for (int i = 0; i < L->rank; i++)
        per_call *= (double)L->n[i];
    if (per_call > 4294967296.0)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fft on cuda: half precision (f16/c32) takes at most 2^32 elements "
                       "per cuFFT call; this one spans %.0f", per_call);
    if (fp->kind == FM_FFT_C2C)
        return FM_OK;
    const int r2c = fp->kind == FM_FFT_R2C;
    long long stride = r2c ? L->istride : L->ostride;
    const long long *embed = r2c ? L->inembed : L->onembed;
    int dense = stride == 1;
    for (int i = 1; i < L->rank; i++)
        dense &= embed[i] == L->n[i];
    if (!dense)
        return fm_fail(FM_ERR_NOT_SUPPORTED, "fft on cuda: half precision (f16) %s needs the real %s dense along "
                       "the transformed axes (cuFFT takes no strides on the real side in half precision); pass "
                       "contiguous arrays with the transformed axes last", kind_names[fp->kind], r2c ? "in" : "out");
    return FM_OK;
}

/* The plan's describe() line. */
static void describe(fm_plan *out, const fm_problem *p, const cufft_impl *pl)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    char shape[96], tr[64] = "", pro[40], epi[40];
    size_t u = 0;
    for (int i = 0; i < fp->naxes && u < sizeof tr; i++)
        u += (size_t)snprintf(tr + u, sizeof tr - u, "%s%lld", i ? "x" : "", (long long)fp->n[i]);
    snprintf(shape, sizeof shape, "%lld", (long long)pl->L.batch);
    fm_fft_ops_text(pro, sizeof pro, fp->prolog_ops);
    fm_fft_ops_text(epi, sizeof epi, fp->epilog_ops);
    fm_plan_set_describe(out,
             "fft cuda/cufft %s %s %sx[%s] %s prolog=%s epilog=%s callbacks=%s loops=%d work=%zu%s device=%d",
             fm_dtype_name(fm_dtype_is_complex(ti->dtype) ? ti->dtype : to->dtype), kind_names[fp->kind],
             shape, tr, fp->inverse ? "inverse" : "forward", pro, epi,
             !pl->callbacks ? "none"
             : pl->pass[1]  ? "passes"
             : pl->pass[0]  ? (fp->epilog_ops ? "prolog-pass+lto" : "prolog-pass")
                            : "lto",
             pl->L.nloop,
             pl->work_size,
             pl->copy_input ? " input_copy=1" : "", pl->device);
}

static fm_status cufft_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    const fm_fft_params *fp = &p->u.fft;
    const fm_settings *set = fm_context_settings(ctx);
    if (fm_fft_gpu_prolog_mode(p) == FM_FFT_PROLOG_KERNEL)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "gpu_prolog is 'kernel' (cuFFT runs the 'pass' and 'callback' forms)");
    const fm_tensor *ti = &p->t[FM_FFT_IN], *to = &p->t[FM_FFT_OUT];
    const int half = is_half(ti->dtype) || is_half(to->dtype);
    if (half) {
        fm_status hs = check_half(p);
        if (hs != FM_OK)
            return hs;
    }
    cufft_impl *pl = calloc(1, sizeof *pl);
    if (!pl)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "fft: out of host memory while planning");
    pthread_mutex_init(&pl->lock, NULL);
    pl->ws = state;
    pl->attach = out->attach;
    pl->device = p->exec_device.id;
    pl->inverse = fp->inverse;
    pl->es_in = fm_dtype_size(ti->dtype);
    pl->es_out = fm_dtype_size(to->dtype);
    fm_status s = FM_OK;
    layout *L = &pl->L;
    pl->empty = fm_tensor_numel(ti) == 0 || fm_tensor_numel(to) == 0;
    if (!pl->empty) {
        if ((s = make_layout(p, L)) != FM_OK) {
            /* one plan cannot nest these axes (an r2c halving an outer axis, in and out laid out
             * differently): two batched steps can, each over fewer axes */
            if (s == FM_ERR_NOT_SUPPORTED && fp->naxes > 1 && strstr(fm_last_error(), "do not nest")) {
                cufft_destroy(pl);
                return fm_fft_plan_axis_split(ctx, p, out);
            }
            goto restage;
        }
        if (half && (s = check_half_layout(fp, L)) != FM_OK)
            goto restage;
        if ((s = fm_cuda_use_device(pl->device)) != FM_OK || (s = new_handle(pl)) != FM_OK)
            goto fail;
        /* cuFFT reads and writes real data in pairs: each call's real pointer must be aligned to
         * two reals (a misaligned one fails at exec with CUFFT_INVALID_VALUE, seen on the H200) */
        if (fp->kind != FM_FFT_C2C) {
            const int real_slot = fp->kind == FM_FFT_R2C ? FM_FFT_IN : FM_FFT_OUT;
            const int64_t *loop = fp->kind == FM_FFT_R2C ? L->loop_in : L->loop_out;
            int odd_loop = 0;
            for (int k = 0; k < L->nloop; k++)
                odd_loop |= (loop[k] & 1) != 0;
            const size_t real_es = fm_dtype_size(p->t[real_slot].dtype);
            const int misaligned = ((size_t)1 << p->align_log2[real_slot]) < 2 * real_es;
            if (odd_loop || (misaligned && fp->kind == FM_FFT_C2R)) {
                s = fm_fail(FM_ERR_NOT_SUPPORTED, "fft on cuda: cuFFT needs the real %s aligned to two elements "
                            "in every batch it is given", real_slot == FM_FFT_IN ? "in" : "out");
                goto restage;
            }
            if (misaligned) /* r2c: transform an aligned copy */
                stage_input(pl, ti);
            out->required_align[real_slot] = misaligned ? real_es : 2 * real_es;
        }
        if (fp->kind == FM_FFT_C2R) /* cuFFT overwrites a c2r input */
            stage_input(pl, ti);
        pl->callbacks = fp->prolog_ops != 0 || fp->epilog_ops != 0;
        if (pl->callbacks) {
            pl->params_need_base = L->nloop > 0; /* looped calls shift the pointers cuFFT counts from */
            int arch = 0;
            if ((s = fm_nvrtc_arch_for_device(pl->device, "fft on cuda", &arch)) != FM_OK ||
                (s = fm_cuda_status(cudaMalloc(&pl->d_params, sizeof(fm_cufft_cb_params)),
                                    "cudaMalloc (callback parameters)")) != FM_OK ||
                (s = fm_cuda_status(cudaEventCreateWithFlags(&pl->ev, cudaEventDisableTiming), "cudaEventCreate")) !=
                    FM_OK)
                goto fail;
            /* cuFFT has no callback types for half precision: its chains are passes computing in float */
            const int prolog_cb = !half && prolog_as_callback(p, L);
            if (fp->prolog_ops && (s = prolog_cb ? attach_callback(set, pl, p, 0, arch) : make_pass(set, pl, p, 0)) != FM_OK)
                goto fail;
            if (fp->epilog_ops && (s = !half ? attach_callback(set, pl, p, 1, arch) : make_pass(set, pl, p, 1)) != FM_OK)
                goto fail;
        }
        s = make_plan(pl, ti->dtype, to->dtype);
        if (s == FM_ERR_NOT_SUPPORTED && pl->callbacks) {
            /* cuFFT takes no callbacks for this size: a plain plan, the chains as passes */
            fm_log_plan(ctx, "cufft: no callbacks for this plan (%s): the chains run as separate passes",
                        fm_last_error());
            if ((s = new_handle(pl)) != FM_OK || (s = make_plan(pl, ti->dtype, to->dtype)) != FM_OK)
                goto fail;
            pl->params_need_base = 0;
            if (fp->prolog_ops && !pl->pass[0] && (s = make_pass(set, pl, p, 0)) != FM_OK)
                goto fail;
            if (fp->epilog_ops && !pl->pass[1] && (s = make_pass(set, pl, p, 1)) != FM_OK)
                goto fail;
        }
        if (s != FM_OK)
            goto fail;
    }
    pl->attach = NULL; /* valid while planning only */
    out->impl = pl;
    out->execute = cufft_execute;
    out->destroy_impl = cufft_destroy;
    for (int i = 0; i < FM_FFT_NSLOTS; i++)
        if (out->required_align[i] <= 1) /* (the real operand's may be set above) */
            out->required_align[i] = (p->present >> i & 1) ? fm_dtype_size(p->t[i].dtype) : 1;
    describe(out, p, pl);
    return FM_OK;
restage: /* a layout cuFFT cannot take: through a staged copy, unless that is the layout already */
    if (s == FM_ERR_NOT_SUPPORTED && fm_cufft_restage_helps(p)) {
        cufft_destroy(pl);
        return fm_cufft_plan_restaged(ctx, p, out);
    }
fail:
    cufft_destroy(pl);
    return s;
}

const fm_backend fm_backend_cufft_fft = {
    .name = "cufft",
    .device = FM_DEVICE_CUDA,
    .ops = 1u << FM_OP_FFT,
    .priority = 0,
    .probe = cufft_probe,
    .release = cufft_release,
    .plan = cufft_plan,
};
