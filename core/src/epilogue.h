/* epilogue.h : the matmul epilogue chain, parsed and validated in core (every backend sees the
 * same rules); fusion/ lowers a validated chain for a backend (cpu_epilogue.c, cuda_epilogue_kernel.c). */
#ifndef FM_EPILOGUE_H
#define FM_EPILOGUE_H

#include "internal.h"

#define FM_EPILOGUE_FORWARD_ACT_                                                                             \
    (FM_EPILOGUE_RELU | FM_EPILOGUE_GELU | FM_EPILOGUE_SIGMOID | FM_EPILOGUE_TANH | FM_EPILOGUE_SILU |         \
     FM_EPILOGUE_CLAMP)
#define FM_EPILOGUE_BACKWARD_ (FM_EPILOGUE_DRELU | FM_EPILOGUE_DGELU | FM_EPILOGUE_DDROPOUT)
#define FM_EPILOGUE_ALL_                                                                                     \
    (FM_EPILOGUE_BIAS | FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_AUX | FM_EPILOGUE_BACKWARD_ | FM_EPILOGUE_BGRAD | \
     FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB | FM_EPILOGUE_SCALE | FM_EPILOGUE_DROPOUT |     \
     FM_EPILOGUE_DDROPOUT)
/* Chains that write the bias-gradient slot. */
#define FM_EPILOGUE_ANY_BGRAD_ (FM_EPILOGUE_BGRAD | FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB)

/* Reject unknown bits and combinations without a meaning (two activations, aux
 * without an activation, a backward kind with a forward one, ...). */
FM_INTERNAL_API fm_status fm_epilogue_validate(unsigned e);

/* The chain reads aux (drelu/dgelu) or writes it (AUX bit). */
static inline int fm_epilogue_uses_aux(unsigned e) { return (e & (FM_EPILOGUE_AUX | FM_EPILOGUE_BACKWARD_)) != 0; }
/* aux is a bit mask (relu+aux, drelu; dropout+aux, ddropout: the keep mask, with relu AND the relu
 * bit) rather than an activation input. */
static inline int fm_epilogue_aux_is_mask(unsigned e)
{
    return (e & (FM_EPILOGUE_RELU | FM_EPILOGUE_DRELU | FM_EPILOGUE_DROPOUT | FM_EPILOGUE_DDROPOUT)) != 0;
}
/* The chain uses a dropout probability (options.dropout). */
static inline int fm_epilogue_has_dropout(unsigned e) { return (e & (FM_EPILOGUE_DROPOUT | FM_EPILOGUE_DDROPOUT)) != 0; }

/* Dropout's integer threshold: keep iff the element's 32-bit word >= round(p * 2^32) (at most
 * 2^32: then nothing is kept), the same compare on every device. */
static inline uint64_t fm_dropout_threshold(double p)
{
    const double t = p * 4294967296.0 + 0.5; /* p * 2^32 is exact (a power-of-two scale) */
    return t >= 4294967296.0 ? (uint64_t)1 << 32 : (uint64_t)t;
}
/* The factor of kept values, 1 / (1 - p) in double (each device rounds it to D's dtype once). */
static inline double fm_dropout_scale(double p) { return 1.0 / (1.0 - p); }

#endif
