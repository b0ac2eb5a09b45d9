/* epilogue.h : the matmul epilogue chain, parsed and validated in core (every backend sees the
 * same rules); fusion/ lowers a validated chain for a backend (cpu_epilogue.c, cuda_epilogue_kernel.c). */
#ifndef FM_EPILOGUE_H
#define FM_EPILOGUE_H

#include "internal.h"

#define FM_EPILOGUE_FORWARD_ACT_                                                                             \
    (FM_EPILOGUE_RELU | FM_EPILOGUE_GELU | FM_EPILOGUE_SIGMOID | FM_EPILOGUE_TANH | FM_EPILOGUE_SILU |         \
     FM_EPILOGUE_CLAMP)
#define FM_EPILOGUE_BACKWARD_ (FM_EPILOGUE_DRELU | FM_EPILOGUE_DGELU)
#define FM_EPILOGUE_ALL_                                                                                     \
    (FM_EPILOGUE_BIAS | FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_AUX | FM_EPILOGUE_BACKWARD_ | FM_EPILOGUE_BGRAD | \
     FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB | FM_EPILOGUE_SCALE)
/* Chains that write the bias-gradient slot. */
#define FM_EPILOGUE_ANY_BGRAD_ (FM_EPILOGUE_BGRAD | FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB)

/* Reject unknown bits and combinations without a meaning (two activations, aux
 * without an activation, a backward kind with a forward one, ...). */
FM_INTERNAL_API fm_status fm_epilogue_validate(unsigned e);

/* The chain reads aux (drelu/dgelu) or writes it (AUX bit). */
static inline int fm_epilogue_uses_aux(unsigned e) { return (e & (FM_EPILOGUE_AUX | FM_EPILOGUE_BACKWARD_)) != 0; }
/* aux is the relu bit mask (relu+aux, drelu) rather than an activation input. */
static inline int fm_epilogue_aux_is_mask(unsigned e) { return (e & (FM_EPILOGUE_RELU | FM_EPILOGUE_DRELU)) != 0; }

#endif
