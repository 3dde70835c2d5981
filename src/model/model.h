/* model.h: the model a Metronome decoder runs.
 *
 * A Llama-architecture backbone (RMSNorm, rotary positions, GQA attention,
 * SwiGLU MLP) with HuggingFace tensor names, optionally with Qwen2's q/k/v
 * biases or Qwen3's per-head q/k norms, plus two adapters:
 *   audio: audio_in.weight  [hidden, frame_samples]  PCM frame -> input vector
 *          audio_out.weight [frame_samples, hidden]  final hidden -> PCM frame
 *   token: model.embed_tokens.weight [vocab, hidden], lm_head.weight
 *          [vocab, hidden] (tied to the embedding when tie_word_embeddings).
 *
 * A model comes from a directory (config.json + model.safetensors, F32, F16
 * or BF16, memory-mapped and converted once to fp32 here) or from a
 * synthetic preset ("synthetic:tiny", "synthetic:small", "synthetic:base",
 * "synthetic:moshi-7b", "synthetic:llama-3.2-1b", "synthetic:qwen2.5-7b",
 * "synthetic:qwen3-8b", "synthetic:tiny-qwen2", "synthetic:tiny-qwen3", optionally
 * "synthetic:NAME:seed=N") whose weights are generated deterministically.
 *
 * Synthetic init (implemented in synthetic.c; values never depend on the
 * thread count or the machine's word size):
 *   - generator: xoshiro256**, one stream per (tensor, chunk of 65536
 *     elements), seeded by splitmix64 from seed ^ (tensor index + 1) *
 *     0x9E3779B97F4A7C15 and then from chunk index; tensors in the fixed
 *     order of mt_model_tensor() below; default seed 1.
 *   - normal: Marsaglia's polar method on pairs of 53-bit uniforms in
 *     (-1,1) (pairs outside the unit disc or at 0 are drawn again), both
 *     outputs used in order, computed in double and rounded to fp32.
 *   - std per tensor (so activations are O(1) at any width, attention is
 *     far from uniform and the residual stream stays bounded over depth):
 *       RMSNorm weights              1.0 (constant)
 *       q, k, v, gate, up            1 / sqrt(hidden)
 *       o_proj                       1 / sqrt(heads*head_dim) / sqrt(2*layers)
 *       down_proj                    1 / sqrt(ffn) / sqrt(2*layers)
 *       embed_tokens                 1.0
 *       lm_head (untied)             1 / sqrt(hidden)
 *       audio_in                     10 / sqrt(frame_samples): speech at
 *                                    -20 dBFS RMS maps to a unit-RMS vector
 *       audio_out                    0.1 / sqrt(hidden): output RMS about
 *                                    0.1 (-20 dBFS), rarely clipped
 *       q/k/v biases                 0.5 (so a bias moves a unit-RMS
 *                                    projection visibly)
 *       q_norm, k_norm               1.0 + 0.25 N(0, 1): not constant, so a
 *                                    decoder that forgot the weight differs
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
    int   qkv_bias;          /* q_proj, k_proj, v_proj carry biases (Qwen2;
                                o_proj never does here) */
    int   qk_norm;           /* per-head RMSNorm of q and k before the
                                rotation, eps = rms_norm_eps (Qwen3) */
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
    float *bq;         /* [heads*head_dim]     q_proj.bias, or NULL (no qkv_bias) */
    float *bk;         /* [kv_heads*head_dim]  k_proj.bias, or NULL */
    float *bv;         /* [kv_heads*head_dim]  v_proj.bias, or NULL */
    float *q_norm;     /* [head_dim]  self_attn.q_norm.weight, or NULL (no qk_norm) */
    float *k_norm;     /* [head_dim]  self_attn.k_norm.weight, or NULL */
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
 * message naming the file, the tensor and the problem. config.json and
 * model.safetensors must be regular files (a FIFO is refused, not waited
 * on). A bare name that is no path here (-m fortune-byte) is looked up with
 * mt_model_resolve. */
int  mt_model_load(const char *spec, int flags, mt_model **out,
                   char *err, size_t errlen);
/* Writes config.json + model.safetensors into dir (created if missing). */
int  mt_model_save(const mt_model *m, const char *dir, mt_dtype dtype,
                   char *err, size_t errlen);
void mt_model_free(mt_model *m);

/* The directory a spec names: spec itself when it exists (or is
 * synthetic:...); for a bare name (no '/') that does not, DATADIR/models/NAME
 * (the installed models, DATADIR = $(PREFIX)/share/metronome at build time)
 * and then the source tree's models/NAME beside the program's bin/.
 * 0 with dir filled, or -1 (dir then holds spec). */
int  mt_model_resolve(const char *spec, char *dir, size_t cap);

/* A checkpoint folder's two files (this loader's and kyutai_lm.c's):
 * config.json read whole (at most 1 MiB, NUL-terminated, the caller
 * frees it) and the path of model.safetensors. */
typedef struct mt_ckpt_dir {
    char   cpath[4096];     /* DIR/config.json */
    char   wpath[4096];     /* DIR/model.safetensors */
    char  *config;          /* [config_len + 1] */
    size_t config_len;
} mt_ckpt_dir;
int  mt_ckpt_dir_read(const char *dir, mt_ckpt_dir *d, char *err, size_t errlen);

/* Backbone + adapter parameter count and bytes at a given element size. */
uint64_t mt_model_params(const mt_config *c);
/* Names of the presets, NULL-terminated, for --help and errors. */
const char *const *mt_model_presets(void);

/* ---- config, tensors and storage, for loaders and tools -------------- */

/* Host weights above this many bytes of fp32 are refused (presets and
 * directories) unless MT_MODEL_SHAPE_ONLY is given: such models belong on a
 * GPU backend that makes or uploads its own weights. */
#define MT_MODEL_HOST_LIMIT_BYTES (8ull << 30)
/* The limit in force: MT_MODEL_HOST_LIMIT_BYTES, or the environment's
 * MT_HOST_LIMIT_GIB (a whole number, 1..4096) where it is one, for a host
 * with the memory (the 2B Moshi's fp32 weights are 13.9 GiB, and
 * --weights q8 makes its 8-bit copies from them); anything else there
 * leaves the default. */
uint64_t mt_model_host_limit(void);
/* What the refusals add: how to raise it. */
#define MT_MODEL_HOST_LIMIT_HINT "MT_HOST_LIMIT_GIB=N raises it on a host with the memory"

/* config.json text (HuggingFace LlamaConfig + our audio fields) -> *c,
 * validated. file names the source in messages ("dir/config.json").
 * Fields: hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads (required); num_key_value_heads (default heads),
 * head_dim (default hidden/heads, which must then divide), rms_norm_eps
 * (default 1e-6), rope_theta (default 10000), vocab_size (default 0; > 0
 * means the token adapter is expected), tie_word_embeddings (default
 * false), sample_rate (24000), frame_samples (1920), audio_passthrough
 * (false), model_type (default "llama"; "qwen2": q/k/v biases; "qwen3":
 * per-head q/k RMSNorm; anything else refused). Rejected, each naming the
 * field: hidden_act other than "silu", attention_bias or mlp_bias true (an
 * o_proj or MLP bias), a rope_scaling other than null or M-RoPE's
 * mrope_section (Qwen2-VL, Qwen2.5-Omni: with one position a token it is
 * the plain rotation; the sections must sum to head_dim/2), rope_parameters,
 * use_sliding_window true, a layer_types entry other than
 * "full_attention", partial_rotary_factor other than 1 (none implemented
 * by the decoders). max_position_embeddings, when present, must be 1 or more
 * (the decoders do not use it). Other keys are ignored. has_audio is not a config field: the
 * loader sets it from the tensors present. */
int mt_config_parse(const char *json, size_t len, const char *file,
                    mt_config *c, char *err, size_t errlen);
/* Range and consistency checks shared by presets and config.json:
 * dimensions positive and below sane limits (so no size overflows),
 * heads | hidden (without an explicit head_dim), kv_heads | heads, head_dim
 * even (rotate-half rotary), at least one adapter when has_* are set. */
int mt_config_check(const mt_config *c, const char *file, char *err,
                    size_t errlen);

/* The model's tensors in the one fixed order used for generation, saving
 * and loading:
 *   for each layer N: model.layers.N.input_layernorm.weight,
 *     .self_attn.q_proj.weight, .k_proj, .v_proj, .o_proj,
 *     .post_attention_layernorm.weight, .mlp.gate_proj.weight, .up_proj,
 *     .down_proj;
 *   model.norm.weight;
 *   token adapter: model.embed_tokens.weight, lm_head.weight (untied only);
 *   audio adapter: audio_in.weight, audio_out.weight;
 *   then, for each layer N, when qkv_bias: model.layers.N.self_attn.q_proj.bias,
 *     .k_proj.bias, .v_proj.bias; when qk_norm: .self_attn.q_norm.weight,
 *     .k_norm.weight (last, so a Llama model's tensors keep their indices
 *     and synthetic values). */
typedef struct mt_tensor_ref {
    char     name[80];
    int      ndim;       /* 1 or 2 */
    int64_t  shape[2];   /* [out, in] for matrices, [n] for norms */
    float   *data;       /* NULL when shape_only */
} mt_tensor_ref;
int mt_model_tensor_count(const mt_config *c);
/* i in [0, count): fills *r; returns 0, or -1 when i is out of range. */
int mt_model_tensor(const mt_model *m, int i, mt_tensor_ref *r);

/* A model with every weight zeroed (norms too), for tests and tools that
 * fill weights themselves. c is checked with mt_config_check. */
int mt_model_alloc(const mt_config *c, mt_model **out, char *err,
                   size_t errlen);

const char *mt_dtype_name(mt_dtype dt);   /* "F32", "F16", "BF16" */

/* For the loaders (load.c, synthetic.c and any beside them): a model for
 * config c, the layer table and, unless shape_only, one 64-byte-aligned
 * fp32 arena holding every tensor (zeroed when zero is set, otherwise left
 * for the caller to fill). No size limit is applied here; callers check
 * MT_MODEL_HOST_LIMIT_BYTES first. Freed with mt_model_free. */
int mt_model_make(const mt_config *c, int shape_only, int zero,
                  mt_model **out, char *err, size_t errlen);

/* The values of synthetic tensor i (mt_model_tensor order) for m's config
 * and m->seed, written to dst [numel floats]; works on shape_only models,
 * so a device backend can make a preset's weights tensor by tensor
 * (identical to what a host load of the same spec holds). Returns 0, or -1
 * when i is out of range. */
int mt_model_synthetic_tensor(const mt_model *m, int i, float *dst);

#endif
