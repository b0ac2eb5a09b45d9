/* epilogue.h : epilogue chains shared by every backend. */
#ifndef FM_EPILOGUE_H
#define FM_EPILOGUE_H

#include "internal.h"

#define FM_EPILOGUE_ALL_ (FM_EPILOGUE_BIAS | FM_EPILOGUE_RELU | FM_EPILOGUE_GELU | FM_EPILOGUE_AUX)

/* Reject unknown bits, two activations, aux without activation. */
fm_status fm_epilogue_validate(unsigned e);

#endif
