/* epilogue.c : the matmul epilogue chain as data: parsing, naming, validation.
 * The chain always means D = act(alpha * scale * A@B + beta * C + bias), aux = the
 * activation's input (or its sign mask), then dropout (D = keep ? D / (1 - p) : 0, aux the keep
 * mask), and for the backward kinds D = (alpha * A@B + beta * C) * act'(aux) (ddropout: * keep bit
 * / (1 - p)), whatever backend runs it. */
#include "epilogue.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Order here is the canonical order of fm_epilogue_format. */
static const struct {
    const char *word;
    unsigned bits;
} words[] = {
    {"scale", FM_EPILOGUE_SCALE}, {"bias", FM_EPILOGUE_BIAS},     {"relu", FM_EPILOGUE_RELU},
    {"gelu", FM_EPILOGUE_GELU},   {"sigmoid", FM_EPILOGUE_SIGMOID}, {"tanh", FM_EPILOGUE_TANH},
    {"silu", FM_EPILOGUE_SILU},   {"clamp", FM_EPILOGUE_CLAMP},   {"dropout", FM_EPILOGUE_DROPOUT},
    {"drelu", FM_EPILOGUE_DRELU}, {"dgelu", FM_EPILOGUE_DGELU},   {"ddropout", FM_EPILOGUE_DDROPOUT},
    {"aux", FM_EPILOGUE_AUX},     {"bgrad", FM_EPILOGUE_BGRAD},
    {"bgrada", FM_EPILOGUE_BGRADA}, {"bgradb", FM_EPILOGUE_BGRADB},
    {"identity", 0},              {"none", 0},                    {"default", 0},
};
enum { NWORDS = sizeof words / sizeof words[0] };

fm_status fm_epilogue_validate(unsigned e)
{
    if (e & ~FM_EPILOGUE_ALL_)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: unknown bits 0x%x", e & ~FM_EPILOGUE_ALL_);
    if (__builtin_popcount(e & FM_EPILOGUE_FORWARD_ACT_) > 1)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: two activations; choose one of relu, gelu, sigmoid, "
                       "tanh, silu, clamp");
    if (__builtin_popcount(e & FM_EPILOGUE_BACKWARD_) > 1)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: two of drelu, dgelu, ddropout together; choose one");
    if ((e & FM_EPILOGUE_BACKWARD_) &&
        (e & (FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_BIAS | FM_EPILOGUE_SCALE | FM_EPILOGUE_DROPOUT)))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: drelu/dgelu/ddropout take no forward activation, bias, "
                       "scale or dropout (use drelu, drelu+bgrad, dgelu, dgelu+bgrad, ddropout or ddropout+bgrad)");
    if ((e & FM_EPILOGUE_BACKWARD_) && (e & FM_EPILOGUE_AUX))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: aux is an input of drelu/dgelu/ddropout; drop 'aux' from "
                       "the name");
    if ((e & FM_EPILOGUE_AUX) && !(e & (FM_EPILOGUE_FORWARD_ACT_ | FM_EPILOGUE_DROPOUT)))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: aux needs an activation or dropout (e.g. relu_aux, "
                       "gelu_aux or relu+dropout+aux)");
    if ((e & FM_EPILOGUE_AUX) && (e & FM_EPILOGUE_DROPOUT) && (e & FM_EPILOGUE_FORWARD_ACT_ & ~FM_EPILOGUE_RELU))
        return fm_fail(FM_ERR_NOT_SUPPORTED, "epilogue: dropout+aux stores the keep mask, with relu or no activation "
                       "only (another activation would need its input as aux too); drop 'aux' or use relu");
    if ((e & FM_EPILOGUE_BGRAD) && !(e & FM_EPILOGUE_BACKWARD_))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: bgrad goes with drelu, dgelu or ddropout (drelu_bgrad, "
                       "dgelu_bgrad, ddropout_bgrad); "
                       "for the bias gradient of an input use bgrada or bgradb");
    if ((e & (FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB)) && (e & ~(FM_EPILOGUE_BGRADA | FM_EPILOGUE_BGRADB)))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: bgrada/bgradb stand alone (D = A@B plus the gradient)");
    if ((e & FM_EPILOGUE_BGRADA) && (e & FM_EPILOGUE_BGRADB))
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: bgrada and bgradb together; choose one");
    return FM_OK;
}

/* The words of a name are joined by single '+' or '_' ("bias+relu", "RELU_AUX_BIAS"); each stands
 * at most once, and identity / none / default stand alone. Anything else is a typo to report, not
 * to guess at. */
fm_status fm_epilogue_parse(const char *text, unsigned *epilogue)
{
    if (!text || !epilogue)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: text and epilogue must not be NULL");
    if (!*text)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: empty name; use 'identity' for none");
    unsigned bits = 0, seen = 0; /* seen: one bit per entry of words[] */
    int nwords = 0, alone = 0;
    for (const char *p = text;; p++) {
        const char *start = p;
        while (*p && *p != '+' && *p != '_')
            p++;
        const size_t len = (size_t)(p - start);
        if (len == 0)
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: '%s' has an empty term (at offset %d); expected "
                           "names joined by single '+' or '_' (e.g. 'bias+relu', 'RELU_AUX_BIAS')",
                           text, (int)(start - text));
        size_t i;
        for (i = 0; i < NWORDS; i++)
            if (strlen(words[i].word) == len && strncasecmp(words[i].word, start, len) == 0)
                break;
        if (i == NWORDS)
            return fm_fail(FM_ERR_INVALID_ARGUMENT,
                           "epilogue: unknown name '%.*s' in '%s'; expected identity, bias, relu, gelu, sigmoid, "
                           "tanh, silu, clamp, dropout, aux, drelu, dgelu, ddropout, bgrad, bgrada, bgradb, scale "
                           "joined by '+' or '_' "
                           "(e.g. 'bias+relu', 'RELU_AUX_BIAS', 'DGELU_BGRAD')",
                           (int)len, start, text);
        if (seen & (1u << i))
            return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: '%.*s' stands twice in '%s'", (int)len, start, text);
        seen |= 1u << i;
        alone |= words[i].bits == 0;
        bits |= words[i].bits;
        nwords++;
        if (!*p)
            break;
    }
    if (alone && nwords > 1)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: '%s' joins identity/none/default with other terms; "
                       "they stand alone", text);
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
    buf[0] = '\0'; /* a failure below leaves an empty string, never unterminated bytes */
    fm_status s = fm_epilogue_validate(e);
    if (s != FM_OK)
        return s;
    char tmp[160] = "identity";
    size_t used = 0;
    for (int i = 0; i < NWORDS; i++)
        if (words[i].bits && (e & words[i].bits))
            used += (size_t)snprintf(tmp + used, sizeof tmp - used, "%s%s", used ? "+" : "", words[i].word);
    if (strlen(tmp) >= size)
        return fm_fail(FM_ERR_INVALID_ARGUMENT, "epilogue: buffer of %zu bytes is too small", size);
    memcpy(buf, tmp, strlen(tmp) + 1);
    return FM_OK;
}

int64_t fm_relu_mask_row_bytes(int64_t n)
{
    if (n <= 0)
        return 0;
    return (n + 127) / 128 * 16; /* 128-bit rows, cuBLASLt's aux ld rule */
}
