/* stt_config.c: a Kyutai model's speech-to-text settings (see
 * stt_config.h), from its config.json with the one JSON-object reader. */
#include "model/stt_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/json_obj.h"
#include "util/errmsg.h"
#include "util/io.h"

#define CONFIG_MAX (1 << 20)    /* bytes of a config.json, at most */

/* stt_config.key into *out when there, in 0..60 s. 0, or -1 with err. */
static int seconds(json_t *stt, const char *key, const char *file, double *out, char *err,
                   size_t errlen)
{
    json_t *v = json_object_get(stt, key);
    if (!v)
        return 0;
    if (!json_is_number(v) || !(json_number_value(v) >= 0 && json_number_value(v) <= 60)) {
        mt_set_err(err, errlen, "%s: stt_config.%s: want seconds in 0..60", file, key);
        return -1;
    }
    *out = json_number_value(v);
    return 0;
}

/* The top-level integer key into *out when there, in lo..hi. 0, or -1. */
static int integer(json_t *root, const char *key, const char *file, int lo, int hi, int *out,
                   char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        mt_set_err(err, errlen, "%s: %s: want an integer in %d..%d", file, key, lo, hi);
        return -1;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

int mt_stt_config_parse(const char *json, size_t len, const char *file, mt_stt_config *c,
                        char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    json_t *root = mt_json_object(json, len, file, err, errlen);
    if (!root)
        return -1;
    c->extra_heads_dim = 6;    /* LMModel's default */
    int rc = integer(root, "extra_heads_num_heads", file, 0, 1024, &c->extra_heads, err,
                     errlen) ||
             integer(root, "extra_heads_dim", file, 1, 65536, &c->extra_heads_dim, err,
                     errlen) ? -1 : 0;
    json_t *stt = rc ? NULL : json_object_get(root, "stt_config");
    if (stt && !json_is_object(stt)) {
        mt_set_err(err, errlen, "%s: stt_config: not an object", file);
        rc = -1;
    } else if (stt) {
        c->present = 1;
        rc = seconds(stt, "audio_delay_seconds", file, &c->audio_delay_s, err, errlen) ||
             seconds(stt, "audio_silence_prefix_seconds", file, &c->silence_prefix_s, err,
                     errlen) ? -1 : 0;
    }
    json_decref(root);
    return rc;
}

int mt_stt_config_load(const char *dir, mt_stt_config *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    char path[4200];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path) {
        mt_set_err(err, errlen, "%s: path too long", dir);
        return -1;
    }
    if (stat(path, &st) != 0 && errno == ENOENT)
        return 0;
    size_t len = 0;
    char *json = mt_read_regular(path, CONFIG_MAX, &len, err, errlen);
    if (!json)
        return -1;
    int rc = mt_stt_config_parse(json, len, path, c, err, errlen);
    free(json);
    return rc;
}
