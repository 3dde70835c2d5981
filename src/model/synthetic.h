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

/* Fills every tensor of m (not shape_only) from m->seed as documented in
 * model.h. Used by mt_synthetic_load; exposed for tests. */
void mt_synthetic_fill(mt_model *m);

#endif
