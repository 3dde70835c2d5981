/* save.c: writes a model as a directory (config.json + model.safetensors
 * in F32, F16 or BF16), which load.c reads back. */
#include "util/errmsg.h"
#include "model/model.h"
#include "model/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
