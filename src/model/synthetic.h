/* synthetic.h: deterministic synthetic presets (synthetic:NAME[:seed=N]).
 * Internal to model/ (load.c dispatches to it); the public contract is
 * model.h. */
#ifndef MT_SYNTHETIC_H
#define MT_SYNTHETIC_H

#include "model/model.h"

/* spec starts with "synthetic:". */
int mt_synthetic_load(const char *spec, int flags, mt_model **out,
                      char *err, size_t errlen);
const char *const *mt_synthetic_presets(void);

/* The presets of the other loaders, named in an unknown preset's message
 * so that one message lists every synthetic:NAME there is: Kyutai's LMs
 * (kyutai_lm.c) and Mimi codecs (codec/mimi_model.c, for --codec and
 * mt-probe codec -c; tests/integration/errors_first.sh checks each works). */
#define MT_KYUTAI_PRESET_NAMES "synthetic:moshiko, synthetic:moshi-2b, " \
    "synthetic:stt-1b, synthetic:stt-2.6b, synthetic:kyutai-small, " \
    "synthetic:kyutai-tiny, synthetic:kyutai-tiny-mimi, synthetic:kyutai-tiny-stt"
#define MT_CODEC_PRESET_NAMES "synthetic:mimi, synthetic:mimi-tiny"

/* Every preset, for a message: the models, Kyutai's, the codecs. */
void mt_synthetic_list(char *buf, size_t len);

/* Fills every tensor of m (not shape_only) from m->seed as documented in
 * model.h. Used by mt_synthetic_load; exposed for tests. */
void mt_synthetic_fill(mt_model *m);

#endif
