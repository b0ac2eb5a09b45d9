/* ew_chains.h : the epilogue chains the CUDA elementwise pass (fusion/cuda) accepts, for the tests
 * that run or compile every one (test_cuda_epilogue_kernel_gpu.c, test_nvrtc_cache.c). */
#ifndef FM_TEST_EW_CHAINS_H
#define FM_TEST_EW_CHAINS_H

#include <fusemath/fusemath.h>

static const fm_dtype all_dtypes[6] = {FM_F16, FM_BF16, FM_F32, FM_F64, FM_C64, FM_C128};

/* Every chain the elementwise pass accepts for dtype t into out (room for 64); with_dropout adds
 * the dropout chains (the Philox header prepended, philox_source.h). Returns how many. */
static inline int ew_chains(fm_dtype t, int with_dropout, unsigned *out)
{
    int n = 0;
    if (fm_dtype_is_complex(t)) {
        out[n++] = 0;
        out[n++] = FM_EPILOGUE_BIAS;
        return n;
    }
    static const unsigned acts[7] = {0, FM_EPILOGUE_RELU, FM_EPILOGUE_GELU, FM_EPILOGUE_SIGMOID,
                                     FM_EPILOGUE_TANH, FM_EPILOGUE_SILU, FM_EPILOGUE_CLAMP};
    for (int sc = 0; sc < 2; sc++)
        for (int bi = 0; bi < 2; bi++)
            for (int a = 0; a < 7; a++)
                for (int aux = 0; aux < 2; aux++)
                    if (!aux || acts[a])
                        out[n++] = (sc ? FM_EPILOGUE_SCALE : 0) | (bi ? FM_EPILOGUE_BIAS : 0) | acts[a] |
                                   (aux ? FM_EPILOGUE_AUX : 0);
    out[n++] = FM_EPILOGUE_DRELU;
    out[n++] = FM_EPILOGUE_DGELU;
    if (with_dropout) {
        out[n++] = FM_EPILOGUE_DROPOUT;
        out[n++] = FM_EPILOGUE_DROPOUT | FM_EPILOGUE_AUX;
        out[n++] = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT;
        out[n++] = FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU | FM_EPILOGUE_DROPOUT | FM_EPILOGUE_AUX;
        out[n++] = FM_EPILOGUE_SCALE | FM_EPILOGUE_GELU | FM_EPILOGUE_DROPOUT;
        out[n++] = FM_EPILOGUE_DDROPOUT;
    }
    return n;
}

#endif
