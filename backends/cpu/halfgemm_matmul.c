/* halfgemm_matmul.c : float16 and bfloat16 matmul on the CPU, computed as NumPy computes float16's:
 * the operands widened to float32, the product and its epilogue planned as the same problem in
 * float32 (by the other CPU backends: the own kernel or cblas, cached by the planner as any plan),
 * and the result rounded once to the output's dtype (round to nearest, ties to even). NumPy's
 * float16 matmul gives the same bits wherever the float32 sums agree.
 *
 * Each operand is widened into a compact float32 copy that keeps its broadcast axes at stride 0
 * (a bias (N,) stays N values); d is written through a float32 copy too. Outputs other than d
 * (aux, bgrad) and dgelu's aux input (of d's dtype) would need their own copies and narrowing rules:
 * those epilogues are refused, as is fp8. ddropout's input, the uint8 keep mask, is no 16-bit
 * operand: the float32 plan reads it where it is. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slots widened to float32 (when present): every float operand and d. */
static const int half_slots[] = {FM_MATMUL_A, FM_MATMUL_B, FM_MATMUL_C, FM_MATMUL_BIAS, FM_MATMUL_SCALE,
                                 FM_MATMUL_D};
#define NHALF ((int)(sizeof half_slots / sizeof half_slots[0]))

typedef struct halfgemm_impl {
    fm_plan *inner;         /* the float32 problem */
    fm_dtype dtype;         /* FM_F16 or FM_BF16 */
    fm_tensor outer[NHALF]; /* the caller's layouts */
    fm_tensor wide[NHALF];  /* the float32 copies' layouts */
    size_t offset[NHALF];   /* of each copy in the scratch, bytes (64-byte aligned) */
    size_t scratch_bytes;
    uint32_t present;       /* bit i: half_slots[i] is used */
} halfgemm_impl;

/* ---- conversions (IEEE binary16 and bfloat16 <-> binary32, by their bits) ---- */
static float f32_of_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t bits_of_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h >> 10 & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F) /* inf, NaN (quiet, payload kept) */
        return f32_of_bits(sign | 0x7F800000u | m << 13 | (m ? 0x400000u : 0));
    if (e == 0) /* zero, subnormal: m * 2^-24 exactly */
        return sign ? -(float)m * 0x1p-24f : (float)m * 0x1p-24f;
    return f32_of_bits(sign | (e + 112) << 23 | m << 13);
}

static uint16_t f32_to_f16(float x)
{
    const uint32_t u = bits_of_f32(x), sign = u >> 16 & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) /* inf, NaN (quiet) */
        return (uint16_t)(sign | 0x7C00u | (a > 0x7F800000u ? 0x200u | (a >> 13 & 0x3FFu) : 0));
    if (a >= 0x477FF000u) /* rounds past 65504 */
        return (uint16_t)(sign | 0x7C00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal or zero, rounded in float arithmetic (exact) */
        const float t = f32_of_bits(a) + 0.5f; /* 0.5 = 2^-1: the sum's ulp is 2^-24, half's step */
        return (uint16_t)(sign | (bits_of_f32(t) - 0x3F000000u));
    }
    const uint32_t odd = a >> 13 & 1u, r = a + 0xC8000FFFu + odd; /* rebias 127 -> 15, round to even */
    return (uint16_t)(sign | r >> 13);
}

static float bf16_to_f32(uint16_t h) { return f32_of_bits((uint32_t)h << 16); }

static uint16_t f32_to_bf16(float x)
{
    const uint32_t u = bits_of_f32(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)(u >> 16 | 0x40u); /* NaN stays NaN (quiet) */
    return (uint16_t)((u + 0x7FFFu + (u >> 16 & 1u)) >> 16);
}

/* ---- the copies ---- */
/* t's layout as a compact float32 copy: axes of stride 0 (broadcast) keep stride 0, the others
 * row-major over the axes that are stored; the copy's element count in *elems. */
static fm_tensor wide_layout(const fm_tensor *t, int64_t *elems)
{
    fm_tensor w = *t;
    w.dtype = FM_F32;
    int64_t step = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        const int stored = t->strides[d] != 0 && t->shape[d] > 1;
        w.strides[d] = stored ? step : 0;
        step *= stored ? t->shape[d] : 1;
    }
    *elems = fm_tensor_numel(t) > 0 ? step : 0;
    return w;
}

/* Every stored element between the caller's layout f (16-bit) and the copy's w (float32, the
 * same shape): widened from `from` (f) into `to` (w), or with narrow from `from` (w) into `to`
 * (f); the odometer walks f's shape in row-major order. */
static void convert(const fm_tensor *f, const void *from, const fm_tensor *w, void *to, fm_dtype dt, int narrow)
{
    if (fm_tensor_numel(f) == 0)
        return;
    int64_t idx[FM_MAX_NDIM] = {0};
    const int nd = f->ndim;
    for (;;) {
        int64_t fo = 0, wo = 0;
        for (int d = 0; d < nd; d++)
            fo += idx[d] * f->strides[d], wo += idx[d] * w->strides[d];
        const int64_t n = nd ? f->shape[nd - 1] : 1, fs = nd ? f->strides[nd - 1] : 0;
        const int64_t ws = nd ? w->strides[nd - 1] : 0;
        if (narrow) {
            const float *src = (const float *)from + wo;
            uint16_t *dst = (uint16_t *)to + fo;
            for (int64_t j = 0; j < n; j++)
                dst[j * fs] = dt == FM_F16 ? f32_to_f16(src[j * ws]) : f32_to_bf16(src[j * ws]);
        } else {
            const uint16_t *src = (const uint16_t *)from + fo;
            float *dst = (float *)to + wo;
            for (int64_t j = 0; j < n; j++)
                dst[j * ws] = dt == FM_F16 ? f16_to_f32(src[j * fs]) : bf16_to_f32(src[j * fs]);
        }
        int d = nd - 2; /* the last axis was the row above */
        for (; d >= 0; d--) {
            if (++idx[d] < (f->strides[d] == 0 ? 1 : f->shape[d])) /* a broadcast axis: once */
                break;
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

static fm_status halfgemm_execute(const fm_plan *p, void *const *ptrs, const fm_exec_args *args, void *stream)
{
    const halfgemm_impl *x = p->impl;
    if (x->scratch_bytes == 0) /* every copy empty, d too: nothing to write (the fuzzer's empty product) */
        return FM_OK;
    char *scratch = aligned_alloc(64, x->scratch_bytes);
    if (!scratch)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul cpu/halfgemm: out of host memory for the float32 copies "
                       "(%zu bytes)", x->scratch_bytes);
    void *inner_ptrs[FM_MATMUL_NSLOTS];
    memcpy(inner_ptrs, ptrs, sizeof inner_ptrs);
    for (int i = 0; i < NHALF; i++) {
        if (!(x->present >> i & 1))
            continue;
        inner_ptrs[half_slots[i]] = scratch + x->offset[i];
        if (half_slots[i] != FM_MATMUL_D) /* d is only written */
            convert(&x->outer[i], ptrs[half_slots[i]], &x->wide[i], inner_ptrs[half_slots[i]], x->dtype, 0);
    }
    /* an in-place d = c was read through c's copy above, before d is written */
    fm_status s = x->inner->execute(x->inner, inner_ptrs, args, stream);
    const int di = NHALF - 1; /* FM_MATMUL_D */
    if (s == FM_OK)
        convert(&x->outer[di], inner_ptrs[FM_MATMUL_D], &x->wide[di], ptrs[FM_MATMUL_D], x->dtype, 1);
    free(scratch);
    return s;
}

static void halfgemm_destroy(void *v)
{
    halfgemm_impl *x = v;
    if (x)
        fm_plan_release(x->inner);
    free(x);
}

static fm_status halfgemm_plan(fm_context *ctx, void *state, const fm_problem *p, fm_plan *out)
{
    (void)state;
    const fm_dtype dt = p->t[FM_MATMUL_D].dtype;
    if (dt != FM_F16 && dt != FM_BF16)
        return fm_fail(FM_ERR_NOT_APPLICABLE, "it computes float16 and bfloat16 only");
    const unsigned refused = FM_EPILOGUE_AUX | FM_EPILOGUE_DRELU | FM_EPILOGUE_DGELU | FM_EPILOGUE_BGRAD |
                             FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB;
    if (p->u.matmul.epilogue & refused) {
        char name[128];
        if (fm_epilogue_format(p->u.matmul.epilogue, name, sizeof name) != FM_OK)
            snprintf(name, sizeof name, "0x%x", p->u.matmul.epilogue);
        return fm_fail(FM_ERR_NOT_SUPPORTED, "matmul cpu: %s with epilogue '%s' is not supported on the cpu (it is "
                       "computed through float32 copies of the 16-bit operands; aux outputs, drelu, dgelu and bias "
                       "gradients are not: convert to float32, or use execution='cuda')", fm_dtype_word(dt), name);
    }
    halfgemm_impl *x = calloc(1, sizeof *x);
    if (!x)
        return fm_fail(FM_ERR_OUT_OF_MEMORY, "matmul: out of host memory while planning");
    x->dtype = dt;
    fm_problem q = *p;
    size_t at = 0;
    for (int i = 0; i < NHALF; i++) {
        const int slot = half_slots[i];
        if (!(p->present >> slot & 1) || p->t[slot].dtype != dt)
            continue;
        int64_t elems = 0;
        x->present |= 1u << i;
        x->outer[i] = p->t[slot];
        x->wide[i] = q.t[slot] = wide_layout(&p->t[slot], &elems);
        q.align_log2[slot] = 6; /* the scratch: 64-byte aligned */
        x->offset[i] = at;
        at += ((size_t)elems * sizeof(float) + 63) / 64 * 64;
    }
    x->scratch_bytes = at;
    for (int i = 0; i < FM_MAX_SLOTS; i++)
        q.inplace_partner[i] = -1; /* separate copies: nothing aliases */
    fm_status s = fm_plan_problem_with(ctx, &q, out->attach, &x->inner);
    if (s != FM_OK) {
        halfgemm_destroy(x);
        return s;
    }
    out->impl = x;
    out->execute = halfgemm_execute;
    out->destroy_impl = halfgemm_destroy;
    for (int i = 0; i < FM_MATMUL_NSLOTS; i++)
        out->required_align[i] = (p->present >> i & 1) ? fm_dtype_size(p->t[i].dtype) : 1;
    fm_plan_set_describe(out, "matmul cpu/halfgemm %s through float32 copies (%zu KiB) into [%s]",
                         fm_dtype_name(dt), at / 1024, x->inner->describe);
    return FM_OK;
}

const fm_backend fm_backend_halfgemm_matmul = {
    .name = "halfgemm",
    .device = FM_DEVICE_CPU,
    .ops = 1u << FM_OP_MATMUL,
    .priority = 2, /* the only CPU backend for float16 / bfloat16; it declines the rest at once */
    .plan = halfgemm_plan,
};
