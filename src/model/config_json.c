/* config_json.c: config.json (HuggingFace LlamaConfig, Qwen2Config or
 * Qwen3Config, + our audio fields)
 * into an mt_config, every field range-checked (jansson), then
 * mt_config_check. */
#include "util/errmsg.h"
#include "model/json_obj.h"
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

/* rope_scaling: null or absent; or the multimodal rotary of Qwen2-VL and
 * Qwen2.5-Omni ({"type"/"rope_type": "mrope" or "default", "mrope_section":
 * [t, h, w]} summing to head_dim/2), which with one position per token
 * (text or audio alone: the three sections' positions are equal) is the
 * plain rotation. Any other key or type (linear, dynamic, yarn, a factor)
 * is refused. */
static int rope_scaling(json_t *rs, const char *file, const mt_config *c, char *err,
                        size_t errlen)
{
    if (!rs || json_is_null(rs))
        return 0;
    const char *key;
    json_t *v;
    if (!json_is_object(rs))
        goto bad;
    json_object_foreach(rs, key, v) {
        if (!strcmp(key, "type") || !strcmp(key, "rope_type")) {
            if (!json_is_string(v) || (strcmp(json_string_value(v), "mrope") != 0 &&
                                       strcmp(json_string_value(v), "default") != 0)) {
                mt_set_err(err, errlen, "%s: field rope_scaling: %s %s is not supported "
                           "(only M-RoPE's \"mrope\" or \"default\")", file, key,
                           json_is_string(v) ? json_string_value(v) : "(not a string)");
                return -1;
            }
        } else if (!strcmp(key, "mrope_section")) {
            size_t i;
            json_t *e;
            long long sum = 0;
            if (!json_is_array(v) || json_array_size(v) == 0)
                goto bad;
            json_array_foreach(v, i, e) {
                if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                    json_integer_value(e) > c->head_dim)
                    goto bad;
                sum += json_integer_value(e);
            }
            if (sum != c->head_dim / 2) {
                mt_set_err(err, errlen, "%s: field rope_scaling: mrope_section sums to %lld, "
                           "not head_dim/2 = %d", file, sum, c->head_dim / 2);
                return -1;
            }
        } else {
            mt_set_err(err, errlen, "%s: field rope_scaling: %s is not supported (only "
                       "M-RoPE's mrope_section, which one position a token reduces to the "
                       "plain rotation)", file, key);
            return -1;
        }
    }
    return 0;
bad:
    mt_set_err(err, errlen, "%s: field rope_scaling: not supported (null, or M-RoPE's "
               "{\"type\": \"mrope\", \"mrope_section\": [t, h, w]})", file);
    return -1;
}

/* A field that must be absent, null, false or equal to `ok` (a number) for
 * the decoders' arithmetic to be the model's. */
static int refuse_unless(json_t *root, const char *file, const char *key, double ok,
                         const char *why, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v) || json_is_false(v) ||
        (json_is_number(v) && json_number_value(v) == ok))
        return 0;
    mt_set_err(err, errlen, "%s: field %s: %s", file, key, why);
    return -1;
}

/* model_type and the fields of HuggingFace's Qwen2Config and Qwen3Config
 * that change the arithmetic. Qwen2 biases q/k/v (not o) whatever the
 * config says; Qwen3 norms each head of q and k and biases q/k/v *and* o
 * when attention_bias (o's bias is not implemented: refused). Sliding
 * window attention (use_sliding_window, or a layer_types entry other than
 * full_attention) and partial rotary are refused; sliding_window and
 * max_window_layers alone change nothing while use_sliding_window is off. */
static int qwen_fields(json_t *root, const char *file, mt_config *c, int att_bias,
                       char *err, size_t errlen)
{
    json_t *mt = json_object_get(root, "model_type");
    const char *type = "llama";
    if (mt && !json_is_null(mt)) {
        if (!json_is_string(mt)) {
            mt_set_err(err, errlen, "%s: field model_type is not a string", file);
            return -1;
        }
        type = json_string_value(mt);
    }
    if (strcmp(type, "qwen2") == 0) {
        c->qkv_bias = 1;
    } else if (strcmp(type, "qwen3") == 0) {
        c->qk_norm = 1;
    } else if (strcmp(type, "llama") != 0) {
        mt_set_err(err, errlen, "%s: field model_type: \"%s\" is not supported "
                 "(llama, qwen2, qwen3)", file, type);
        return -1;
    }
    if (att_bias) {
        mt_set_err(err, errlen, "%s: field attention_bias: an o_proj bias is not "
                 "supported (%s)", file,
                 c->qkv_bias ? "qwen2 has q/k/v biases without this field" :
                 "true biases o_proj too");
        return -1;
    }
    if (refuse_unless(root, file, "use_sliding_window", 0, "sliding-window attention "
                      "is not supported (must be false)", err, errlen) ||
        refuse_unless(root, file, "partial_rotary_factor", 1, "partial rotary is not "
                      "supported (must be 1)", err, errlen) ||
        refuse_unless(root, file, "rope_parameters", 0, "not supported (rope_theta and "
                      "a null rope_scaling say the same)", err, errlen))
        return -1;
    json_t *lt = json_object_get(root, "layer_types");
    if (lt && !json_is_null(lt)) {
        size_t i;
        json_t *e;
        if (!json_is_array(lt)) {
            mt_set_err(err, errlen, "%s: field layer_types is not an array", file);
            return -1;
        }
        json_array_foreach(lt, i, e) {
            if (!json_is_string(e) || strcmp(json_string_value(e), "full_attention") != 0) {
                mt_set_err(err, errlen, "%s: field layer_types: entry %zu is not "
                         "\"full_attention\" (sliding-window layers are not "
                         "supported)", file, i);
                return -1;
            }
        }
    }
    return 0;
}

int mt_config_parse(const char *json, size_t len, const char *file, mt_config *c,
                    char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    json_t *root = mt_json_object(json, len, file, err, errlen);
    if (!root)
        return -1;
    int rc = -1, att_bias = 0, mlp_bias = 0, max_pos = 0;
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
    if (rope_scaling(json_object_get(root, "rope_scaling"), file, c, err, errlen) != 0)
        goto out;
    if (qwen_fields(root, file, c, att_bias, err, errlen) != 0)
        goto out;
    if (mlp_bias) {
        mt_set_err(err, errlen, "%s: field mlp_bias: biases are not supported", file);
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

