/* step.c: the position-bytes formula and the number-format names of
 * step.h, what the decoder and the backends both use. */
#include "decode/step.h"

#include <string.h>

size_t mt_decoder_position_bytes(const mt_config *c, size_t elem_bytes)
{
    return (size_t)c->layers * 2 * (size_t)c->kv_heads * (size_t)c->head_dim * elem_bytes;
}

size_t mt_num_format_bytes(mt_num_format f)
{
    return f == MT_FMT_F16 ? 2 : f == MT_FMT_Q8 ? 1 : sizeof(float);
}

const char *mt_num_format_name(mt_num_format f)
{
    return f == MT_FMT_F16 ? "f16" : f == MT_FMT_Q8 ? "q8" : "f32";
}

int mt_num_format_parse(const char *s, mt_num_format *out)
{
    if (!strcmp(s, "f32"))
        *out = MT_FMT_F32;
    else if (!strcmp(s, "f16"))
        *out = MT_FMT_F16;
    else if (!strcmp(s, "q8"))
        *out = MT_FMT_Q8;
    else
        return -1;
    return 0;
}
