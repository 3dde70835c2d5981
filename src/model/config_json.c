/* config_json.c: config.json (HuggingFace LlamaConfig + our audio fields)
 * into an mt_config, every field range-checked (jansson), then
 * mt_config_check. */
#include "util/errmsg.h"
#include "model/model.h"
#include "model/limits.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Integer field: absent -> def (or an error when required, def < 0 meaning
 * required); present -> an integer within [lo, hi]. */
static int get_int(json_t *root, const char *file, const char *key, long long def,
                   long long lo, long long hi, int *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def == LLONG_MIN) {
            mt_set_err(err, errlen, "%s: missing field %s", file, key);
            return -1;
        }
        *out = (int)def;
        return 0;
    }
    if (!json_is_integer(v)) {
        mt_set_err(err, errlen, "%s: field %s is not an integer", file, key);
        return -1;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        mt_set_err(err, errlen, "%s: field %s = %lld is out of range (%lld..%lld)", file,
                 key, x, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int get_num(json_t *root, const char *file, const char *key, double def,
                   float *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = (float)def;
        return 0;
    }
    if (!json_is_number(v)) {
        mt_set_err(err, errlen, "%s: field %s is not a number", file, key);
        return -1;
    }
    *out = (float)json_number_value(v);
    return 0;
}

static int get_bool(json_t *root, const char *file, const char *key, int *out, char *err,
                    size_t errlen)
{
    json_t *v = json_object_get(root, key);
    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        mt_set_err(err, errlen, "%s: field %s is not true or false", file, key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

int mt_config_parse(const char *json, size_t len, const char *file, mt_config *c,
                    char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        mt_set_err(err, errlen, "%s: JSON syntax error at line %d, column %d: %s", file,
                 je.line, je.column, je.text);
        return -1;
    }
    int rc = -1, att_bias = 0, mlp_bias = 0, max_pos = 0;
    if (!json_is_object(root)) {
        mt_set_err(err, errlen, "%s: not a JSON object", file);
        goto out;
    }
    const long long REQ = LLONG_MIN;
    if (get_int(root, file, "hidden_size", REQ, 1, LIM_HIDDEN, &c->hidden, err, errlen) ||
        get_int(root, file, "intermediate_size", REQ, 1, LIM_FFN, &c->ffn, err, errlen) ||
        get_int(root, file, "num_hidden_layers", REQ, 1, LIM_LAYERS, &c->layers, err, errlen) ||
        get_int(root, file, "num_attention_heads", REQ, 1, LIM_HEADS, &c->heads, err, errlen) ||
        get_int(root, file, "num_key_value_heads", c->heads, 1, LIM_HEADS, &c->kv_heads, err, errlen) ||
        get_int(root, file, "head_dim", 0, 1, LIM_HEAD_DIM, &c->head_dim, err, errlen) ||
        get_int(root, file, "vocab_size", 0, 0, LIM_VOCAB, &c->vocab, err, errlen) ||
        get_int(root, file, "sample_rate", 24000, 1, LIM_RATE, &c->sample_rate, err, errlen) ||
        get_int(root, file, "frame_samples", 1920, 1, LIM_FRAME, &c->frame_samples, err, errlen) ||
        /* not used by the decoders (the cache policy bounds positions),
         * but a 0 or negative one is a broken config, not a model */
        get_int(root, file, "max_position_embeddings", 0, 1, INT_MAX, &max_pos, err, errlen) ||
        get_num(root, file, "rms_norm_eps", 1e-6, &c->eps, err, errlen) ||
        get_num(root, file, "rope_theta", 10000.0, &c->rope_theta, err, errlen) ||
        get_bool(root, file, "tie_word_embeddings", &c->tie_embeddings, err, errlen) ||
        get_bool(root, file, "audio_passthrough", &c->audio_passthrough, err, errlen) ||
        get_bool(root, file, "attention_bias", &att_bias, err, errlen) ||
        get_bool(root, file, "mlp_bias", &mlp_bias, err, errlen))
        goto out;
    if (c->head_dim == 0) {
        if (c->hidden % c->heads != 0) {
            mt_set_err(err, errlen, "%s: num_attention_heads = %d does not divide "
                     "hidden_size = %d (and no head_dim is given)", file, c->heads,
                     c->hidden);
            goto out;
        }
        c->head_dim = c->hidden / c->heads;
    }
    json_t *act = json_object_get(root, "hidden_act");
    if (act && !(json_is_string(act) && strcmp(json_string_value(act), "silu") == 0)) {
        mt_set_err(err, errlen, "%s: field hidden_act: only \"silu\" is supported", file);
        goto out;
    }
    json_t *rs = json_object_get(root, "rope_scaling");
    if (rs && !json_is_null(rs)) {
        mt_set_err(err, errlen, "%s: field rope_scaling: not supported (must be null "
                 "or absent)", file);
        goto out;
    }
    if (att_bias || mlp_bias) {
        mt_set_err(err, errlen, "%s: field %s: biases are not supported", file,
                 att_bias ? "attention_bias" : "mlp_bias");
        goto out;
    }
    c->has_tokens = c->vocab > 0;
    if (mt_config_check(c, file, err, errlen) != 0)
        goto out;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

