/* fuzz_kyutai_config.c: libFuzzer harness for Kyutai's LM config.json
 * (mt_kyutai_config_parse in src/model/kyutai_lm.c). Any bytes go in as the
 * file's text; it must return 0 or -1 with a message naming the file, and a
 * config it accepts must pass the range checks, give the backbone a shape
 * the decoder takes, and sizes that do not overflow. */
#include "model/kyutai_lm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = '\0';
    mt_kyutai_config kc;
    if (mt_kyutai_config_parse((const char *)data, size, "config.json", &kc, err,
                               sizeof err) != 0) {
        if (strncmp(err, "config.json: ", 13) != 0)
            abort();
        return 0;
    }
    if (mt_kyutai_config_check(&kc, "config.json", err, sizeof err) != 0)
        abort();
    if (kc.dep_q > kc.n_q || kc.n_q > MT_KY_MAX_Q || kc.ffn < 1 || kc.dep_ffn < 1)
        abort();
    for (int k = 0; k <= kc.n_q; k++)
        if (kc.delays[k] < 0 || kc.delays[k] > 64)
            abort();
    mt_config c;
    mt_kyutai_backbone_config(&kc, "fuzz", &c);
    if (c.hidden != c.heads * c.head_dim || c.head_dim % 2)
        abort();
    uint64_t p = mt_model_params(&c);
    if (p == 0 || p > (1ull << 60))
        abort();
    return 0;
}
