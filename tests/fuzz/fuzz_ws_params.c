/* fuzz_ws_params.c: libFuzzer harness for Kyutai's /api/chat URL
 * parameters (src/serve/ws_params.c). Any bytes up to the first NUL go in
 * as the query; the reader returns 0 or -1 with a reason that names a
 * parameter. On 0, the sampling block it set passes the HELLO's own range
 * check and encodes into a HELLO that decodes to the same fields, and the
 * log strings hold no control byte (they reach the log as they are). */
#include "serve/ws_params.h"
#include "wire/frame.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void clean(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char q[4096];
    size_t n = size < sizeof q - 1 ? size : sizeof q - 1;
    memcpy(q, data, n);
    q[n] = '\0';
    mt_hello h;
    memset(&h, 0, sizeof h);
    uint64_t seed = 0;
    char said[256], ign[256], why[160];
    why[0] = '\0';
    if (mt_ws_chat_params(q, &h, &seed, said, sizeof said, ign, sizeof ign, why,
                          sizeof why) != 0) {
        if (!strchr(why, '=') || strlen(why) >= sizeof why)
            abort();   /* a refusal names the parameter: NAME=VALUE: why */
        return 0;
    }
    clean(said);
    clean(ign);
    if (mt_hello_smp_check(&h, NULL, 0) != 0)
        abort();
    h.sample_rate = 24000;
    h.frame_samples = 1920;
    h.channels = 1;
    h.encoding = MT_ENC_PCM_S16LE;
    uint8_t b[MT_HELLO_MAX];
    long len = mt_hello_encode(&h, b, sizeof b);
    mt_hello g;
    if (len < 0 || mt_hello_decode(b, (size_t)len, &g) != 0 || g.smp_mask != h.smp_mask ||
        g.temp != h.temp || g.temp_text != h.temp_text || g.top_k != h.top_k ||
        g.top_k_text != h.top_k_text)
        abort();
    return 0;
}
