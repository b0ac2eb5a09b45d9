/* epilogue.c : the matmul epilogue chain as data: parsing, naming, validation.
 * The chain always means D = act(alpha * A@B + beta * C + bias), aux = the
 * activation's input (or its sign mask), whatever backend runs it. */
#include "epilogue.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *word;
    unsigned bits;
} words[] = {
    {"identity", 0}, {"none", 0}, {"default", 0}, {"bias", FM_EPILOGUE_BIAS},
    {"relu", FM_EPILOGUE_RELU}, {"gelu", FM_EPILOGUE_GELU}, {"aux", FM_EPILOGUE_AUX},
};

fm_status fm_epilogue_validate(unsigned e)
{
    if (e & ~FM_EPILOGUE_ALL_)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: unknown bits 0x%x", e & ~FM_EPILOGUE_ALL_);
    if ((e & FM_EPILOGUE_RELU) && (e & FM_EPILOGUE_GELU))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: relu and gelu together; choose one activation");
    if ((e & FM_EPILOGUE_AUX) && !(e & (FM_EPILOGUE_RELU | FM_EPILOGUE_GELU)))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: aux needs an activation (relu_aux or gelu_aux)");
    return FM_OK;
}

fm_status fm_epilogue_parse(const char *text, unsigned *epilogue)
{
    if (!text || !epilogue)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: text and epilogue must not be NULL");
    unsigned bits = 0;
    int nwords = 0;
    const char *p = text;
    while (*p) {
        while (*p && (*p == '+' || *p == '_' || *p == ',' || *p == '|' || isspace((unsigned char)*p)))
            p++;
        const char *start = p;
        while (*p && !(*p == '+' || *p == '_' || *p == ',' || *p == '|' || isspace((unsigned char)*p)))
            p++;
        size_t len = (size_t)(p - start);
        if (len == 0)
            break;
        size_t i;
        for (i = 0; i < sizeof words / sizeof words[0]; i++)
            if (strlen(words[i].word) == len && strncasecmp(words[i].word, start, len) == 0)
                break;
        if (i == sizeof words / sizeof words[0])
            return fm_fail(FM_ERR_INVALID_ARGUMENT,
                           "epilogue: unknown name '%.*s' in '%s'; expected identity, bias, relu, gelu, aux "
                           "joined by '+' or '_' (e.g. 'bias+relu', 'RELU_AUX_BIAS')",
                           (int)len, start, text);
        bits |= words[i].bits;
        nwords++;
    }
    if (nwords == 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: empty name; use 'identity' for none");
    fm_status s = fm_epilogue_validate(bits);
    if (s != FM_OK)
        return s;
    *epilogue = bits;
    return FM_OK;
}

fm_status fm_epilogue_format(unsigned e, char *buf, size_t size)
{
    if (!buf || size == 0)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: buffer is NULL or empty");
    fm_status s = fm_epilogue_validate(e);
    if (s != FM_OK)
        return s;
    const char *act = (e & FM_EPILOGUE_RELU) ? "relu" : (e & FM_EPILOGUE_GELU) ? "gelu" : NULL;
    int n;
    if (!act && !(e & FM_EPILOGUE_BIAS))
        n = snprintf(buf, size, "identity");
    else
        n = snprintf(buf, size, "%s%s%s%s", (e & FM_EPILOGUE_BIAS) ? "bias" : "",
                     (act && (e & FM_EPILOGUE_BIAS)) ? "+" : "", act ? act : "",
                     (e & FM_EPILOGUE_AUX) ? "+aux" : "");
    if (n < 0 || (size_t)n >= size)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: buffer of %zu bytes is too small", size);
    return FM_OK;
}

int64_t fm_relu_mask_row_bytes(int64_t n)
{
    if (n <= 0)
        return 0;
    return (n + 127) / 128 * 16; /* 128-bit rows, cuBLASLt's aux ld rule */
}
