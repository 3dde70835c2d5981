/* synthetic.h: deterministic synthetic presets (synthetic:NAME[:seed=N])
 * and the model-storage helper they share with the directory loader.
 * Internal to model.c / synthetic.c; the public contract is model.h. */
#ifndef MT_SYNTHETIC_H
#define MT_SYNTHETIC_H

#include "model/model.h"

/* Makes a model for config c: the layer table and, unless shape_only, one
 * 64-byte-aligned fp32 arena holding every tensor (zeroed when zero is
 * set, otherwise left for the caller to fill). No size limit is applied
 * here; callers check MT_MODEL_HOST_LIMIT_BYTES first. */
int mt_model_make(const mt_config *c, int shape_only, int zero,
                  mt_model **out, char *err, size_t errlen);

/* spec starts with "synthetic:". */
int mt_synthetic_load(const char *spec, int flags, mt_model **out,
                      char *err, size_t errlen);
const char *const *mt_synthetic_presets(void);

/* Fills every tensor of m (not shape_only) from m->seed as documented in
 * model.h. Used by mt_synthetic_load; exposed for tests. */
void mt_synthetic_fill(mt_model *m);

#endif
