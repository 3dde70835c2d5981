/* model.c: what a model is and where it comes from: the config (checked
 * once, here, so no backend sees an absurd shape), the fixed tensor list
 * with HuggingFace names, the fp32 host storage, the directory loader
 * (config.json via jansson + memory-mapped model.safetensors) and the
 * writer. Presets live in synthetic.c, the container format in
 * safetensors.c. */
#include "util/errmsg.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/synthetic.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where `make install` puts the shipped models (DATADIR/models/NAME); the
 * Makefile defines it from PREFIX. */
#ifndef MT_DATADIR
#define MT_DATADIR "/usr/local/share/metronome"
#endif

/* Storage behind mt_model.priv: one arena for every fp32 tensor. */
typedef struct model_store {
    float  *arena;
    size_t  floats;
} model_store;

/* Limits that keep every size product far inside 64 bits (and every
 * per-tensor element count inside size_t on 64-bit hosts) and reject
 * configs that are typos rather than models. */
#define LIM_HIDDEN     65536
#define LIM_FFN        (1 << 20)
#define LIM_LAYERS     1024
#define LIM_HEADS      1024
#define LIM_HEAD_DIM   4096
#define LIM_VOCAB      (1 << 24)
#define LIM_FRAME      (1 << 20)
#define LIM_RATE       (1 << 20)

const char *mt_dtype_name(mt_dtype dt)
{
    switch (dt) {
    case MT_DT_F32: return "F32";
    case MT_DT_F16: return "F16";
    case MT_DT_BF16: return "BF16";
    }
    return "?";
}

const char *const *mt_model_presets(void) { return mt_synthetic_presets(); }

/* ---- config checks ------------------------------------------------------- */

static int range(const char *file, const char *key, long long v, long long lo,
                 long long hi, char *err, size_t errlen)
{
    if (v >= lo && v <= hi)
        return 0;
    mt_set_err(err, errlen, "%s: %s = %lld is out of range (%lld..%lld)", file, key,
             v, lo, hi);
    return -1;
}

int mt_config_check(const mt_config *c, const char *file, char *err, size_t errlen)
{
    if (range(file, "hidden_size", c->hidden, 1, LIM_HIDDEN, err, errlen) ||
        range(file, "intermediate_size", c->ffn, 1, LIM_FFN, err, errlen) ||
        range(file, "num_hidden_layers", c->layers, 1, LIM_LAYERS, err, errlen) ||
        range(file, "num_attention_heads", c->heads, 1, LIM_HEADS, err, errlen) ||
        range(file, "num_key_value_heads", c->kv_heads, 1, LIM_HEADS, err, errlen) ||
        range(file, "head_dim", c->head_dim, 2, LIM_HEAD_DIM, err, errlen) ||
        range(file, "vocab_size", c->vocab, 0, LIM_VOCAB, err, errlen) ||
        range(file, "sample_rate", c->sample_rate, 1, LIM_RATE, err, errlen) ||
        range(file, "frame_samples", c->frame_samples, 1, LIM_FRAME, err, errlen))
        return -1;
    if (c->heads % c->kv_heads != 0) {
        mt_set_err(err, errlen, "%s: num_key_value_heads = %d does not divide "
                 "num_attention_heads = %d", file, c->kv_heads, c->heads);
        return -1;
    }
    if (c->head_dim % 2 != 0) {
        mt_set_err(err, errlen, "%s: head_dim = %d is odd (rotary embedding "
                 "rotates halves)", file, c->head_dim);
        return -1;
    }
    if (!(c->eps > 0.0f && c->eps < 1.0f)) {
        mt_set_err(err, errlen, "%s: rms_norm_eps = %g is out of range (0..1)",
                 file, (double)c->eps);
        return -1;
    }
    if (!(c->rope_theta > 0.0f && isfinite(c->rope_theta))) {
        mt_set_err(err, errlen, "%s: rope_theta = %g must be positive and finite",
                 file, (double)c->rope_theta);
        return -1;
    }
    if (c->has_tokens && c->vocab < 1) {
        mt_set_err(err, errlen, "%s: vocab_size = %d but the model has a token "
                 "adapter", file, c->vocab);
        return -1;
    }
    return 0;
}

/* ---- tensor list ----------------------------------------------------------- */

enum { PER_LAYER = 9 };

/* Qwen tensors per layer, after every Llama tensor */
static int extra_per_layer(const mt_config *c)
{
    return (c->qkv_bias ? 3 : 0) + (c->qk_norm ? 2 : 0);
}

static int base_tensor_count(const mt_config *c)
{
    int n = c->layers * PER_LAYER + 1;
    if (c->has_tokens)
        n += c->tie_embeddings ? 1 : 2;
    if (c->has_audio)
        n += 2;
    return n;
}

int mt_model_tensor_count(const mt_config *c)
{
    return base_tensor_count(c) + c->layers * extra_per_layer(c);
}

/* Tensor e of the Qwen section: layer e / extra, the biases then the norms. */
static void extra_info(const mt_config *c, mt_model *m, int e, mt_tensor_ref *r,
                       float ***slot)
{
    int per = extra_per_layer(c), l = e / per, k = e % per;
    if (!c->qkv_bias)
        k += 3;
    static const char *const suffix[5] = {
        "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
        "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    };
    const int64_t n[5] = { (int64_t)c->heads * c->head_dim, (int64_t)c->kv_heads * c->head_dim,
                           (int64_t)c->kv_heads * c->head_dim, c->head_dim, c->head_dim };
    snprintf(r->name, sizeof r->name, "model.layers.%d.%s", l, suffix[k]);
    r->ndim = 1;
    r->shape[0] = n[k];
    if (m && m->layer) {
        mt_layer_weights *w = &m->layer[l];
        float **s[5] = { &w->bq, &w->bk, &w->bv, &w->q_norm, &w->k_norm };
        *slot = s[k];
    }
}

/* Name, shape and the slot in m that holds tensor i (m may be NULL). */
static int tensor_info(const mt_config *c, mt_model *m, int i, mt_tensor_ref *r,
                       float ***slot)
{
    int n = mt_model_tensor_count(c);
    if (i < 0 || i >= n)
        return -1;
    memset(r, 0, sizeof *r);
    static float *const none = NULL; /* slot of a tensor m does not hold */
    *slot = (float **)&none;
    int64_t H = c->hidden, Q = (int64_t)c->heads * c->head_dim,
            KV = (int64_t)c->kv_heads * c->head_dim, F = c->ffn;
    if (i >= base_tensor_count(c)) {
        extra_info(c, m, i - base_tensor_count(c), r, slot);
        return 0;
    }
    if (i < c->layers * PER_LAYER) {
        int l = i / PER_LAYER, k = i % PER_LAYER;
        static const char *const suffix[PER_LAYER] = {
            "input_layernorm.weight", "self_attn.q_proj.weight",
            "self_attn.k_proj.weight", "self_attn.v_proj.weight",
            "self_attn.o_proj.weight", "post_attention_layernorm.weight",
            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
        };
        const int64_t shp[PER_LAYER][2] = {
            { H, 0 }, { Q, H }, { KV, H }, { KV, H }, { H, Q },
            { H, 0 }, { F, H }, { F, H }, { H, F },
        };
        snprintf(r->name, sizeof r->name, "model.layers.%d.%s", l, suffix[k]);
        r->shape[0] = shp[k][0];
        r->shape[1] = shp[k][1];
        r->ndim = shp[k][1] ? 2 : 1;
        if (m && m->layer) {
            mt_layer_weights *w = &m->layer[l];
            float **s[PER_LAYER] = { &w->attn_norm, &w->wq, &w->wk, &w->wv, &w->wo,
                                     &w->mlp_norm, &w->w_gate, &w->w_up, &w->w_down };
            *slot = s[k];
        }
        return 0;
    }
    i -= c->layers * PER_LAYER;
    const char *name;
    int64_t s0, s1;
    float **s = NULL;
    if (i == 0) {
        name = "model.norm.weight"; s0 = H; s1 = 0; s = m ? &m->norm : NULL;
    } else {
        i--;
        if (c->has_tokens && i == 0) {
            name = "model.embed_tokens.weight"; s0 = c->vocab; s1 = H;
            s = m ? &m->embed : NULL;
        } else if (c->has_tokens && !c->tie_embeddings && i == 1) {
            name = "lm_head.weight"; s0 = c->vocab; s1 = H;
            s = m ? &m->lm_head : NULL;
        } else {
            if (c->has_tokens)
                i -= c->tie_embeddings ? 1 : 2;
            if (i == 0) {
                name = "audio_in.weight"; s0 = H; s1 = c->frame_samples;
                s = m ? &m->audio_in : NULL;
            } else {
                name = "audio_out.weight"; s0 = c->frame_samples; s1 = H;
                s = m ? &m->audio_out : NULL;
            }
        }
    }
    snprintf(r->name, sizeof r->name, "%s", name);
    r->shape[0] = s0;
    r->shape[1] = s1;
    r->ndim = s1 ? 2 : 1;
    if (s)
        *slot = s;
    return 0;
}

int mt_model_tensor(const mt_model *m, int i, mt_tensor_ref *r)
{
    float **slot;
    if (!m || tensor_info(&m->cfg, (mt_model *)m, i, r, &slot) != 0)
        return -1;
    r->data = *slot;
    return 0;
}

static uint64_t tensor_numel(const mt_tensor_ref *r)
{
    return (uint64_t)r->shape[0] * (uint64_t)(r->ndim == 2 ? r->shape[1] : 1);
}

uint64_t mt_model_params(const mt_config *c)
{
    uint64_t n = 0;
    int nt = mt_model_tensor_count(c);
    mt_tensor_ref r;
    float **slot;
    for (int i = 0; i < nt; i++)
        if (tensor_info(c, NULL, i, &r, &slot) == 0)
            n += tensor_numel(&r);
    return n;
}

/* ---- storage -------------------------------------------------------------- */

int mt_model_make(const mt_config *c, int shape_only, int zero, mt_model **out,
                  char *err, size_t errlen)
{
    *out = NULL;
    mt_model *m = calloc(1, sizeof *m);
    model_store *st = calloc(1, sizeof *st);
    if (!m || !st) {
        free(m);
        free(st);
        mt_set_err(err, errlen, "%s: out of memory", c->name);
        return -1;
    }
    m->cfg = *c;
    m->seed = 1;
    m->priv = st;
    m->shape_only = shape_only;
    if (shape_only) {
        *out = m;
        return 0;
    }
    m->layer = calloc((size_t)c->layers, sizeof *m->layer);
    int nt = mt_model_tensor_count(c);
    size_t floats = 0;
    mt_tensor_ref r;
    float **slot;
    for (int i = 0; i < nt; i++) {
        tensor_info(c, NULL, i, &r, &slot);
        floats += ((size_t)tensor_numel(&r) + 15) & ~(size_t)15; /* 64-byte aligned */
    }
    void *arena = NULL;
    if (!m->layer || posix_memalign(&arena, 64, floats * sizeof(float)) != 0) {
        mt_set_err(err, errlen, "%s: out of memory for %.1f MiB of fp32 weights",
                 c->name, floats * 4.0 / 1048576.0);
        free(m->layer);
        free(st);
        free(m);
        return -1;
    }
    st->arena = arena;
    st->floats = floats;
    if (zero)
        memset(arena, 0, floats * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        tensor_info(c, m, i, &r, &slot);
        *slot = st->arena + off;
        off += ((size_t)tensor_numel(&r) + 15) & ~(size_t)15;
    }
    if (c->has_tokens && c->tie_embeddings)
        m->lm_head = m->embed;
    *out = m;
    return 0;
}

int mt_model_alloc(const mt_config *c, mt_model **out, char *err, size_t errlen)
{
    *out = NULL;
    if (mt_config_check(c, c->name[0] ? c->name : "config", err, errlen) != 0)
        return -1;
    if (!c->has_audio && !c->has_tokens) {
        mt_set_err(err, errlen, "%s: a model needs an audio or a token adapter",
                 c->name[0] ? c->name : "config");
        return -1;
    }
    return mt_model_make(c, 0, 1, out, err, errlen);
}

void mt_model_free(mt_model *m)
{
    if (!m)
        return;
    model_store *st = m->priv;
    if (st)
        free(st->arena);
    free(st);
    free(m->layer);
    free(m);
}

/* ---- loading ---------------------------------------------------------------- */

static int load_dir(const char *dir, int flags, mt_model **out, char *err,
                    size_t errlen);

int mt_model_load(const char *spec, int flags, mt_model **out, char *err,
                  size_t errlen)
{
    *out = NULL;
    if (!spec || !*spec) {
        mt_set_err(err, errlen, "empty model spec (a directory or synthetic:NAME)");
        return -1;
    }
    if (strncmp(spec, "synthetic:", 10) == 0)
        return mt_synthetic_load(spec, flags, out, err, errlen);
    char dir[4096];
    if (mt_model_resolve(spec, dir, sizeof dir) != 0) {
        mt_set_err(err, errlen, "%s: no such model directory (looked in ./%s, "
                 MT_DATADIR "/models/%s and the source tree's models/) and not "
                 "synthetic:NAME", spec, spec, spec);
        return -1;
    }
    return load_dir(dir, flags, out, err, errlen);
}

/* A bare name ("fortune-byte") that is not a path here: the installed
 * models, then the source tree's when the program runs from bin/ in it. */
static int model_candidate(char *out, size_t cap, const char *fmt,
                           const char *base, const char *name)
{
    struct stat sb;
    int w = snprintf(out, cap, fmt, base, name);
    return w > 0 && (size_t)w < cap && stat(out, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int mt_model_resolve(const char *spec, char *dir, size_t cap)
{
    struct stat sb;
    if (!spec || !*spec || cap == 0)
        return -1;
    int w = snprintf(dir, cap, "%s", spec);
    if (w < 0 || (size_t)w >= cap)
        return -1;
    if (stat(spec, &sb) == 0 || strncmp(spec, "synthetic:", 10) == 0)
        return 0;
    if (strchr(spec, '/') || !strcmp(spec, ".") || !strcmp(spec, ".."))
        return -1;
    if (model_candidate(dir, cap, "%s/models/%s", MT_DATADIR, spec))
        return 0;
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            if (model_candidate(dir, cap, "%s/../models/%s", exe, spec))
                return 0;
        }
    }
    snprintf(dir, cap, "%s", spec);
    return -1;
}

/* ---- config.json ------------------------------------------------------------ */

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

/* ---- directory loader ------------------------------------------------------ */

static void set_name(mt_config *c, const char *dir)
{
    size_t n = strlen(dir), cap = sizeof c->name - 1;
    if (n <= cap) {
        memcpy(c->name, dir, n + 1);
    } else {                       /* keep the tail, which says the most */
        memcpy(c->name, "...", 3);
        memcpy(c->name + 3, dir + n - (cap - 3), cap - 3);
        c->name[cap] = '\0';
    }
}

/* Opens path for reading only if it is a regular file. A FIFO (or a
 * device) in place of a model file would block open() or read() for ever,
 * holding a server at start: open without blocking, check, then clear
 * O_NONBLOCK for the reads that follow. */
static int open_regular(const char *path, struct stat *sb, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, sb) != 0) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb->st_mode)) {
        mt_set_err(err, errlen, "%s: not a regular file (%s)", path,
                 S_ISDIR(sb->st_mode) ? "a directory" :
                 S_ISFIFO(sb->st_mode) ? "a FIFO" :
                 S_ISSOCK(sb->st_mode) ? "a socket" : "a device");
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        mt_set_err(err, errlen, "%s: fcntl: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads a small file whole (config.json). */
static char *read_small(const char *path, size_t limit, size_t *len, char *err, size_t errlen)
{
    struct stat sb;
    int fd = open_regular(path, &sb, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    char *buf = malloc(limit + 1);
    size_t n = buf ? fread(buf, 1, limit + 1, f) : 0;
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad || n > limit) {
        mt_set_err(err, errlen, "%s: %s", path, bad ? "read error" : "too large (over 1 MiB)");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int is_ignored(const char *name)
{
    /* rotary tables some older checkpoints store; we compute them */
    size_t n = strlen(name), k = strlen(".rotary_emb.inv_freq");
    return n > k && strcmp(name + n - k, ".rotary_emb.inv_freq") == 0;
}

static int check_tensors(const mt_config *c, const mt_st_file *sf, const char *path,
                         char *err, size_t errlen)
{
    int nt = mt_model_tensor_count(c);
    mt_tensor_ref r;
    float **slot;
    const char *missing = NULL;
    char missing_buf[80];
    for (int i = 0; i < nt && !missing; i++) {
        tensor_info(c, NULL, i, &r, &slot);
        if (!mt_st_find(sf, r.name)) {
            snprintf(missing_buf, sizeof missing_buf, "%s", r.name);
            missing = missing_buf;
        }
    }
    /* unknown names first: a misnamed tensor is reported as itself, with
     * the expected tensor it probably was meant to be */
    for (int j = 0; j < sf->n; j++) {
        const char *name = sf->t[j].name;
        int known = is_ignored(name);
        for (int i = 0; i < nt && !known; i++) {
            tensor_info(c, NULL, i, &r, &slot);
            known = strcmp(r.name, name) == 0;
        }
        if (!known) {
            if (missing)
                mt_set_err(err, errlen, "%s: tensor '%s': unknown tensor name (and "
                         "'%s' is missing: misnamed?)", path, name, missing);
            else
                mt_set_err(err, errlen, "%s: tensor '%s': unknown tensor name (not a "
                         "tensor of this config)", path, name);
            return -1;
        }
    }
    if (missing) {
        mt_set_err(err, errlen, "%s: tensor '%s': missing", path, missing);
        return -1;
    }
    for (int i = 0; i < nt; i++) {
        tensor_info(c, NULL, i, &r, &slot);
        const mt_st_tensor *t = mt_st_find(sf, r.name);
        if (t->dtype != MT_ST_F32 && t->dtype != MT_ST_F16 && t->dtype != MT_ST_BF16) {
            mt_set_err(err, errlen, "%s: tensor '%s': unsupported dtype %s (F32, F16 or "
                     "BF16)", path, r.name, mt_st_dtype_name(t->dtype));
            return -1;
        }
        int same = t->ndim == r.ndim && t->shape[0] == (uint64_t)r.shape[0] &&
                   (r.ndim == 1 || t->shape[1] == (uint64_t)r.shape[1]);
        if (!same) {
            char got[128];
            size_t o = 0;
            got[0] = '\0';
            for (int d = 0; d < t->ndim && o < sizeof got; d++) {
                int k = snprintf(got + o, sizeof got - o, "%s%" PRIu64, d ? ", " : "",
                                 t->shape[d]);
                if (k < 0)
                    break;
                o += (size_t)k;
            }
            if (r.ndim == 1)
                mt_set_err(err, errlen, "%s: tensor '%s': wrong shape [%s], expected "
                         "[%lld]", path, r.name, got, (long long)r.shape[0]);
            else
                mt_set_err(err, errlen, "%s: tensor '%s': wrong shape [%s], expected "
                         "[%lld, %lld]", path, r.name, got, (long long)r.shape[0],
                         (long long)r.shape[1]);
            return -1;
        }
    }
    return 0;
}

static int load_dir(const char *dir, int flags, mt_model **out, char *err,
                    size_t errlen)
{
    char cpath[4096], wpath[4096];
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        mt_set_err(err, errlen, "%s: not a model directory (%s) and not synthetic:NAME",
                 dir, stat(dir, &sb) != 0 ? strerror(errno) : "not a directory");
        return -1;
    }
    if ((size_t)snprintf(cpath, sizeof cpath, "%s/config.json", dir) >= sizeof cpath ||
        (size_t)snprintf(wpath, sizeof wpath, "%s/model.safetensors", dir) >= sizeof wpath) {
        mt_set_err(err, errlen, "%s: path too long", dir);
        return -1;
    }
    size_t clen;
    char *text = read_small(cpath, 1u << 20, &clen, err, errlen);
    if (!text)
        return -1;
    mt_config c;
    int rc = mt_config_parse(text, clen, cpath, &c, err, errlen);
    free(text);
    if (rc != 0)
        return -1;
    set_name(&c, dir);

    int fd = open_regular(wpath, &sb, err, errlen);
    if (fd < 0)
        return -1;
    size_t flen = (size_t)sb.st_size;
    const uint8_t *map = NULL;
    if (flen > 0) {
        void *p = mmap(NULL, flen, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            mt_set_err(err, errlen, "%s: mmap: %s", wpath, strerror(errno));
            close(fd);
            return -1;
        }
        map = p;
    }
    close(fd);
    static const uint8_t empty[1];
    mt_st_file sf;
    mt_model *m = NULL;
    rc = -1;
    if (mt_st_parse(map ? map : empty, flen, wpath, &sf, err, errlen) != 0)
        goto unmap;
    c.has_audio = mt_st_find(&sf, "audio_in.weight") || mt_st_find(&sf, "audio_out.weight");
    c.has_tokens = c.vocab > 0;
    if (!c.has_audio && !c.has_tokens) {
        mt_set_err(err, errlen, "%s: tensor 'audio_in.weight': missing, and vocab_size "
                 "is 0: the model has neither an audio nor a token adapter", wpath);
        goto done;
    }
    if (check_tensors(&c, &sf, wpath, err, errlen) != 0)
        goto done;
    int shape_only = (flags & MT_MODEL_SHAPE_ONLY) != 0;
    uint64_t bytes = mt_model_params(&c) * 4;
    if (!shape_only && bytes > MT_MODEL_HOST_LIMIT_BYTES) {
        mt_set_err(err, errlen, "%s: %.1f GiB of fp32 host weights is over the %.0f GiB "
                 "host limit: use a GPU backend (shape-only load)", wpath,
                 bytes / 1073741824.0, MT_MODEL_HOST_LIMIT_BYTES / 1073741824.0);
        goto done;
    }
    if (mt_model_make(&c, shape_only, 0, &m, err, errlen) != 0)
        goto done;
    m->seed = 0;
    if (!shape_only) {
        int nt = mt_model_tensor_count(&c);
        mt_tensor_ref r;
        for (int i = 0; i < nt; i++) {
            mt_model_tensor(m, i, &r);
            mt_st_to_f32(mt_st_find(&sf, r.name), r.data);   /* checked above */
        }
    }
    *out = m;
    rc = 0;
done:
    mt_st_free(&sf);
unmap:
    if (map)
        munmap((void *)map, flen);
    return rc;
}

/* ---- writer ------------------------------------------------------------------ */

/* A Qwen model's config.json says what HuggingFace's Qwen2Config or
 * Qwen3Config says for Qwen2.5-7B and Qwen3-8B, so the directory is the
 * shape of a published one (only the values differ): model_type and
 * architectures, and their window, position and token-id fields (all of
 * which the loader reads or refuses). */
static int qwen_config(const mt_config *c, json_t *cfg)
{
    if (!c->qkv_bias && !c->qk_norm)
        return 0;
    int q2 = c->qkv_bias;
    json_t *extra = json_pack(
        "{s:[s],s:s,s:f,s:i,s:i,s:f,s:i,s:i,s:b,s:b,s:s}",
        "architectures", q2 ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM",
        "model_type", q2 ? "qwen2" : "qwen3", "attention_dropout", 0.0,
        "bos_token_id", 151643, "eos_token_id", 151645,
        "initializer_range", 0.02, "max_position_embeddings", q2 ? 32768 : 40960,
        "max_window_layers", c->layers, "use_cache", 1, "use_sliding_window", 0,
        "transformers_version", q2 ? "4.43.1" : "4.51.0");
    if (!extra)
        return -1;
    int bad = json_object_update(cfg, extra) != 0 ||
              json_object_set_new(cfg, "sliding_window",
                                  q2 ? json_integer(131072) : json_null()) != 0;
    json_decref(extra);
    if (q2) {                /* Qwen2Config has neither: its biases are fixed */
        json_object_del(cfg, "attention_bias");
        json_object_del(cfg, "mlp_bias");
    }
    return bad ? -1 : 0;
}

int mt_model_save(const mt_model *m, const char *dir, mt_dtype dtype, char *err,
                  size_t errlen)
{
    if (!m || m->shape_only || !m->layer) {
        mt_set_err(err, errlen, "%s: the model has no host weights to save", dir);
        return -1;
    }
    if (dtype != MT_DT_F32 && dtype != MT_DT_F16 && dtype != MT_DT_BF16) {
        mt_set_err(err, errlen, "%s: unknown dtype %d", dir, (int)dtype);
        return -1;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        mt_set_err(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    char cpath[4096], wpath[4096];
    if ((size_t)snprintf(cpath, sizeof cpath, "%s/config.json", dir) >= sizeof cpath ||
        (size_t)snprintf(wpath, sizeof wpath, "%s/model.safetensors", dir) >= sizeof wpath) {
        mt_set_err(err, errlen, "%s: path too long", dir);
        return -1;
    }
    const mt_config *c = &m->cfg;
    static const char *const torch_dtype[] = { "float32", "float16", "bfloat16" };
    json_t *cfg = json_pack(
        "{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:i,s:b,s:s,s:s,s:b,s:b,s:n,s:i,s:i,s:b}",
        "architectures", "LlamaForCausalLM", "model_type", "llama",
        "hidden_size", c->hidden, "intermediate_size", c->ffn,
        "num_hidden_layers", c->layers, "num_attention_heads", c->heads,
        "num_key_value_heads", c->kv_heads, "head_dim", c->head_dim,
        "rms_norm_eps", (double)c->eps, "rope_theta", (double)c->rope_theta,
        "vocab_size", c->has_tokens ? c->vocab : 0,
        "tie_word_embeddings", c->has_tokens && c->tie_embeddings,
        "hidden_act", "silu", "torch_dtype", torch_dtype[dtype],
        "attention_bias", 0, "mlp_bias", 0, "rope_scaling",
        "sample_rate", c->sample_rate, "frame_samples", c->frame_samples,
        "audio_passthrough", c->audio_passthrough != 0);
    if (!cfg || qwen_config(c, cfg) != 0) {
        json_decref(cfg);
        mt_set_err(err, errlen, "%s: out of memory", cpath);
        return -1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", cpath);
    int bad = json_dump_file(cfg, tmp, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) != 0;
    json_decref(cfg);
    if (bad || rename(tmp, cpath) != 0) {
        mt_set_err(err, errlen, "%s: write failed: %s", cpath, strerror(errno));
        unlink(tmp);
        return -1;
    }
    int nt = mt_model_tensor_count(c);
    mt_st_out *o = calloc((size_t)nt, sizeof *o);
    mt_tensor_ref *r = calloc((size_t)nt, sizeof *r);
    if (!o || !r) {
        free(o);
        free(r);
        mt_set_err(err, errlen, "%s: out of memory", wpath);
        return -1;
    }
    for (int i = 0; i < nt; i++) {
        mt_model_tensor(m, i, &r[i]);
        o[i].name = r[i].name;
        o[i].ndim = r[i].ndim;
        o[i].shape[0] = (uint64_t)r[i].shape[0];
        o[i].shape[1] = (uint64_t)r[i].shape[1];
        o[i].data = r[i].data;
    }
    int rc = mt_st_write(wpath, o, nt, (int)dtype, err, errlen);
    free(o);
    free(r);
    return rc;
}
