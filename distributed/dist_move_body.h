/* dist_move_body.h : the GPU ranks' move, one element: what the NVRTC kernel of dist_gpu_kernel.c runs
 * (this file's text is embedded and compiled there: cmake/FusemathMPI.cmake) and what
 * tests/c/test_dist_move_body.c runs on the host, so the kernel's indexing and chain are tested
 * without a GPU. Plain C / C++: no includes, no CUDA keywords.
 *
 * Element k of the e0 x e1 x e2 move (k = (i0 e1 + i1) e2 + i2): dst[i0 d0 + i1 d1 + i2 d2] =
 * conj?(src[i0 s0 + i1 s1 + i2 s2] * (sr + i si) * arr[...]) on complex T pairs; flags: 1 scale,
 * 2 conj, 4 multiply by arr, 8 arr complex, 16 arr indexed as dst (else as src). */
#ifndef FM_DIST_MOVE_BODY_H
#define FM_DIST_MOVE_BODY_H

typedef struct fm_dist_move_args {
    const void *src;
    void *dst;
    const void *arr;
    long long e0, e1, e2, s0, s1, s2, d0, d1, d2;
    double sr, si;
    unsigned flags;
    int pad;
} fm_dist_move_args;

#define FM_DIST_MOVE_ONE(T, a, k)                                                                                \
    do {                                                                                                        \
        const T *src_ = (const T *)(a).src;                                                                     \
        T *dst_ = (T *)(a).dst;                                                                                 \
        const T *arr_ = (const T *)(a).arr;                                                                     \
        const long long i2_ = (k) % (a).e2, r_ = (k) / (a).e2, i1_ = r_ % (a).e1, i0_ = r_ / (a).e1;            \
        const long long so_ = i0_ * (a).s0 + i1_ * (a).s1 + i2_ * (a).s2;                                       \
        const long long do_ = i0_ * (a).d0 + i1_ * (a).d1 + i2_ * (a).d2;                                       \
        T xr_ = src_[2 * so_], xi_ = src_[2 * so_ + 1];                                                          \
        if ((a).flags & 1u) {                                                                                   \
            const T sr_ = (T)(a).sr, si_ = (T)(a).si, t_ = xr_ * sr_ - xi_ * si_;                              \
            xi_ = xr_ * si_ + xi_ * sr_;                                                                        \
            xr_ = t_;                                                                                           \
        }                                                                                                       \
        if ((a).flags & 4u) {                                                                                   \
            const long long mo_ = ((a).flags & 16u) ? do_ : so_;                                                \
            if ((a).flags & 8u) {                                                                               \
                const T mr_ = arr_[2 * mo_], mi_ = arr_[2 * mo_ + 1], t_ = xr_ * mr_ - xi_ * mi_;              \
                xi_ = xr_ * mi_ + xi_ * mr_;                                                                    \
                xr_ = t_;                                                                                       \
            } else {                                                                                            \
                xr_ *= arr_[mo_];                                                                               \
                xi_ *= arr_[mo_];                                                                               \
            }                                                                                                   \
        }                                                                                                       \
        if ((a).flags & 2u)                                                                                     \
            xi_ = -xi_;                                                                                         \
        dst_[2 * do_] = xr_;                                                                                    \
        dst_[2 * do_ + 1] = xi_;                                                                                \
    } while (0)

#endif /* FM_DIST_MOVE_BODY_H */
