/* json_obj.h: a JSON object parsed out of a buffer with duplicate keys
 * refused, the one way the checkpoint loaders (config.json, Kyutai's and
 * Mimi's configs, a safetensors header) read theirs. */
#ifndef MT_MODEL_JSON_OBJ_H
#define MT_MODEL_JSON_OBJ_H

#include <jansson.h>
#include <stddef.h>

/* The object in json [len] (a new reference: json_decref it); NULL with
 * "WHAT: JSON syntax error at line L, column C: ..." or "WHAT: not a JSON
 * object" in err. */
json_t *mt_json_object(const char *json, size_t len, const char *what, char *err,
                       size_t errlen);

#endif
