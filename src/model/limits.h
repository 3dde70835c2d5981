/* limits.h: the bounds a model config must stay within (mt_config_check
 * in model.c, and config.json's field ranges in config_json.c). They keep
 * every size product far inside 64 bits (and every per-tensor element
 * count inside size_t on 64-bit hosts) and reject configs that are typos
 * rather than models. Internal to model/. */
#ifndef MT_MODEL_LIMITS_H
#define MT_MODEL_LIMITS_H

#define LIM_HIDDEN     65536
#define LIM_FFN        (1 << 20)
#define LIM_LAYERS     1024
#define LIM_HEADS      1024
#define LIM_HEAD_DIM   4096
#define LIM_VOCAB      (1 << 24)
#define LIM_FRAME      (1 << 20)
#define LIM_RATE       (1 << 20)

#endif
