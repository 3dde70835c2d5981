/* model.h: the model a Metronome decoder runs.
 *
 * A Llama-architecture backbone (RMSNorm, rotary positions, GQA attention,
 * SwiGLU MLP) with HuggingFace tensor names, plus two adapters:
 *   audio: audio_in.weight  [hidden, frame_samples]  PCM frame -> input vector
 *          audio_out.weight [frame_samples, hidden]  final hidden -> PCM frame
 *   token: model.embed_tokens.weight [vocab, hidden], lm_head.weight
 *          [vocab, hidden] (tied to the embedding when tie_word_embeddings).
 *
 * A model comes from a directory (config.json + model.safetensors, F32, F16
 * or BF16, memory-mapped and converted once to fp32 here) or from a
 * synthetic preset ("synthetic:tiny", "synthetic:small", "synthetic:base",
 * "synthetic:moshi-7b", "synthetic:llama-3.2-1b", optionally
 * "synthetic:NAME:seed=N") whose weights are generated deterministically.
 *
 * All matrices are row-major in HuggingFace's [out_features, in_features]
 * orientation, fp32, so y = W x is cblas_sgemv(RowMajor, NoTrans, ...).
 */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef enum mt_dtype { MT_DT_F32 = 0, MT_DT_F16 = 1, MT_DT_BF16 = 2 } mt_dtype;

typedef struct mt_config {
    char  name[64];          /* "synthetic:small", or the directory */
    int   hidden;            /* hidden_size */
    int   ffn;               /* intermediate_size */
    int   layers;            /* num_hidden_layers */
    int   heads;             /* num_attention_heads */
    int   kv_heads;          /* num_key_value_heads (GQA) */
    int   head_dim;          /* hidden / heads unless config says head_dim */
    int   vocab;             /* vocab_size; 0 without a token adapter */
    float eps;               /* rms_norm_eps */
    float rope_theta;
    int   tie_embeddings;    /* tie_word_embeddings */
    int   sample_rate;       /* our audio fields; 24000 by default */
    int   frame_samples;     /* 1920 by default (80 ms at 24 kHz) */
    int   has_audio;         /* audio_in/audio_out present */
    int   has_tokens;        /* embed_tokens/lm_head present */
    int   audio_passthrough; /* test preset: output frame = input frame
                                (the backbone still runs, for timing) */
} mt_config;

typedef struct mt_layer_weights {
    float *attn_norm;  /* [hidden]                          input_layernorm */
    float *wq;         /* [heads*head_dim, hidden]          q_proj */
    float *wk;         /* [kv_heads*head_dim, hidden]       k_proj */
    float *wv;         /* [kv_heads*head_dim, hidden]       v_proj */
    float *wo;         /* [hidden, heads*head_dim]          o_proj */
    float *mlp_norm;   /* [hidden]                          post_attention_layernorm */
    float *w_gate;     /* [ffn, hidden]                     gate_proj */
    float *w_up;       /* [ffn, hidden]                     up_proj */
    float *w_down;     /* [hidden, ffn]                     down_proj */
} mt_layer_weights;

typedef struct mt_model {
    mt_config         cfg;
    mt_layer_weights *layer;     /* [layers]; NULL when shape_only */
    float            *norm;      /* [hidden]  model.norm */
    float            *embed;     /* [vocab, hidden] or NULL */
    float            *lm_head;   /* [vocab, hidden] or NULL; == embed if tied */
    float            *audio_in;  /* [hidden, frame_samples] or NULL */
    float            *audio_out; /* [frame_samples, hidden] or NULL */
    uint64_t          seed;      /* synthetic presets */
    int               shape_only;/* config only, no host weights (for a
                                    device backend that makes its own) */
    void             *priv;      /* loader's storage */
} mt_model;

enum { MT_MODEL_SHAPE_ONLY = 1 };

/* spec: a directory or "synthetic:NAME[:seed=N]". Returns 0, or -1 with one
 * message naming the file, the tensor and the problem. */
int  mt_model_load(const char *spec, int flags, mt_model **out,
                   char *err, size_t errlen);
/* Writes config.json + model.safetensors into dir (created if missing). */
int  mt_model_save(const mt_model *m, const char *dir, mt_dtype dtype,
                   char *err, size_t errlen);
void mt_model_free(mt_model *m);

/* Backbone + adapter parameter count and bytes at a given element size. */
uint64_t mt_model_params(const mt_config *c);
/* Names of the presets, NULL-terminated, for --help and errors. */
const char *const *mt_model_presets(void);

#endif
