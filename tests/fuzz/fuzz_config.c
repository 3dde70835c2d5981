/* fuzz_config.c: libFuzzer harness for config.json validation
 * (mt_config_parse in src/model/config_json.c). Any bytes go in as the file's text; it
 * must return 0 or -1 with a message naming the file, and a config it
 * accepts must pass mt_config_check and give sizes that do not overflow. */
#include "model/model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = '\0';
    mt_config c;
    if (mt_config_parse((const char *)data, size, "config.json", &c, err, sizeof err) != 0) {
        if (strncmp(err, "config.json: ", 13) != 0)
            abort();
        return 0;
    }
    if (mt_config_check(&c, "config.json", err, sizeof err) != 0)
        abort();
    if (c.hidden < 1 || c.heads < 1 || c.kv_heads < 1 || c.heads % c.kv_heads ||
        c.head_dim < 2 || c.has_tokens != (c.vocab > 0))
        abort();
    c.has_audio = 1;
    uint64_t p = mt_model_params(&c);
    if (p == 0 || p > (1ull << 50))
        abort();
    return 0;
}
