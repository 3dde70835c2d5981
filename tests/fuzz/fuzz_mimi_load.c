/* fuzz_mimi_load.c: libFuzzer harness for Mimi's checkpoint loader
 * (src/codec/mimi_model.c): any bytes go in as a whole safetensors file,
 * with the configuration taken from its "mimi_config" metadata (else the
 * published one). The loader must return 0 or -1 with a message naming
 * the file; a model it accepts must have only finite weights and, when
 * small, encode and decode one frame with finite output. */
#include "codec/mimi.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = '\0';
    mimi_model *m = NULL;
    if (mimi_load_mem(data, size, "fuzz.safetensors", NULL, &m, err, sizeof err) != 0) {
        if (strncmp(err, "fuzz.safetensors", 16) != 0)
            abort();
        return 0;
    }
    const mimi_config *c = mimi_model_config(m);
    int fs = mimi_frame_size(c);
    if (mimi_param_count(m) < 200000 && fs <= 4096) {
        mimi_state *s = mimi_state_new(m, err, sizeof err);
        mimi_batch *w = mimi_batch_new(m, 1, err, sizeof err);
        float *pcm = calloc((size_t)fs, sizeof *pcm), *out = calloc((size_t)fs, sizeof *out);
        int32_t codes[64];
        if (!s || !w || !pcm || !out)
            abort();
        for (int i = 0; i < fs; i++)
            pcm[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
        if (mimi_encode(m, w, &s, 1, pcm, codes, err, sizeof err) != 0 ||
            mimi_decode(m, w, &s, 1, codes, out, err, sizeof err) != 0)
            abort();
        for (int i = 0; i < c->n_q_used; i++)
            if (codes[i] < 0 || codes[i] >= c->bins)
                abort();
        free(pcm);
        free(out);
        mimi_batch_free(w);
        mimi_state_free(s);
    }
    mimi_free(m);
    return 0;
}
