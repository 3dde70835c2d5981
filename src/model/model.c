/* model.c: what a model is: the config (checked once, here, so no
 * backend sees an absurd shape), the fixed tensor list with HuggingFace
 * names, and the fp32 host storage. Where models come from is elsewhere:
 * config.json in config_json.c, directories and specs in load.c, presets
 * in synthetic.c, the writer in save.c, the container format in
 * safetensors.c. */
#include "util/errmsg.h"
#include "model/model.h"
#include "model/limits.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Storage behind mt_model.priv: one arena for every fp32 tensor. */
typedef struct model_store {
    float  *arena;
    size_t  floats;
} model_store;

const char *mt_dtype_name(mt_dtype dt)
{
    switch (dt) {
    case MT_DT_F32: return "F32";
    case MT_DT_F16: return "F16";
    case MT_DT_BF16: return "BF16";
    }
    return "?";
}

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

uint64_t mt_model_host_limit(void)
{
    const char *v = getenv("MT_HOST_LIMIT_GIB");
    char *end;
    errno = 0;
    long g = v && *v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || errno || *end || g < 1 || g > 4096)
        return MT_MODEL_HOST_LIMIT_BYTES;
    return (uint64_t)g << 30;
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

