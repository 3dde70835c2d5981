/* kyutai_lm.h: Kyutai's language model (Moshi's temporal transformer and
 * depformer) as Kyutai publishes it, loaded for Metronome's decoder.
 *
 * The temporal transformer becomes an ordinary mt_model (model.h) so that
 * the decoder, its backends and the bounded cache run it unchanged:
 *   in_projs.0 (or the older fused in_proj_weight) [3 dim, dim]
 *       rows q | k | v, each head-major            -> wq, wk, wv
 *   out_projs.0 (or out_proj.weight)               -> wo
 *   norm1.alpha / norm2.alpha [1, 1, dim]          -> attn_norm / mlp_norm
 *   gating.linear_in [2 ffn, dim]: SiLU(first half) * second half
 *                                                  -> w_gate | w_up
 *   gating.linear_out [dim, ffn]                   -> w_down
 *   out_norm.alpha                                 -> norm
 *   text_linear [text_card_out, dim]               -> lm_head (tied to the
 *       token table, which the Kyutai path never reads: its input is a
 *       vector, mt_step_io.x_in)
 *   RMSNorm eps 1e-8 (Kyutai's rms_norm_f32), rope_theta = max_period.
 *   extra_heads.N.weight [extra_heads_dim, dim] (only with
 *       extra_heads_num_heads > 0; the speech-to-text models' voice
 *       activity, speech/kyutai.h)                  -> extra[N], host fp32
 *
 * Interleaved rotary. Kyutai rotates pairs (2i, 2i+1) of each head; the
 * backends rotate halves (i, i + hd/2), HuggingFace's layout. With P the
 * permutation of a head's coordinates that puts the even ones first and
 * the odd ones after, interleaved(R) = P^-1 . rotate_half(R) . P, and a
 * score q.k is the same for P q . P k. So the loader permutes the rows of
 * wq and wk within each head by P (mt_kyutai_rope_perm), and every
 * backend's rotate-half rotary then computes Kyutai's attention exactly,
 * on the CPU and the GPU alike, in every cache mode (the permuted keys are
 * only ever dotted with permuted queries; V and the output are untouched).
 *
 * The rest stays here, fp32, for the streams and the depformer
 * (speech/kyutai.h): text_emb, emb[k], depformer_in[k],
 * depformer_text_emb, depformer_emb[k], linears[k], and the depformer's
 * layers with one set of projections per step (weights_per_step).
 *
 * Sources: a directory with config.json (Kyutai's LM arguments, the keys
 * of moshi/models/loaders.py's _lm_kwargs, defaults from the published
 * Moshi configuration) and model.safetensors (F32, F16 or BF16, split
 * in_projs.N / out_projs.N or fused in_proj_weight / out_proj.weight
 * names); or "synthetic:moshiko" (the published shape),
 * "synthetic:moshi-2b", "synthetic:stt-1b" and "synthetic:stt-2.6b"
 * (Kyutai's 2B Moshi and speech-to-text models, their published shapes;
 * what of their configurations is not modelled is said in
 * kyutai_lm.c),
 * "synthetic:kyutai-small" (Moshi's streams on a 256-wide, 6-layer
 * transformer, for the CPU benchmark), "synthetic:kyutai-tiny" (the
 * fixture's shape), "synthetic:kyutai-tiny-mimi" and
 * "synthetic:kyutai-tiny-stt" (the tiny shape with synthetic:mimi-tiny's
 * 32 bins as card, 2 + 2 codebooks, or 2 of the user's and no depformer),
 * [":seed=N"], random weights. A missing tensor or a shape that disagrees with the config is
 * refused with its name and both shapes.
 */
#ifndef MT_KYUTAI_LM_H
#define MT_KYUTAI_LM_H

#include <stddef.h>
#include <stdint.h>
#include "model/model.h"

#define MT_KY_MAX_Q 64          /* audio codebooks (n_q) */
#define MT_KY_MAX_XH 16         /* extra heads (extra_heads_num_heads) */
#define MT_KY_MAX_XH_DIM 4096   /* outputs of one extra head */

typedef struct mt_kyutai_config {
    int   dim, num_heads, num_layers;
    int   ffn;                 /* gated MLP width: 21 dim / 8 when
                                  hidden_scale is 4, else 2/3 of
                                  int(hidden_scale * dim) */
    int   text_card;           /* text vocabulary (input table has +1) */
    int   text_card_out;       /* text_linear rows */
    int   card;                /* audio codebook size (tables have +1) */
    int   n_q;                 /* audio codebooks in: dep_q model + user */
    int   dep_q;               /* model codebooks the depformer makes */
    int   delays[MT_KY_MAX_Q + 1]; /* [1 + n_q]: text, then codebooks */
    int   context;             /* Kyutai's temporal ring (frames) */
    float max_period;          /* rotary */
    int   text_pad;            /* existing_text_padding_id */
    int   dep_dim, dep_heads, dep_layers, dep_ffn;
    float eps;                 /* 1e-8 */
    int   extra_heads;         /* extra_heads_num_heads (0: none) */
    int   extra_dim;           /* extra_heads_dim (LMModel's default 6) */
} mt_kyutai_config;

/* One depformer layer at one step: its own projections. */
typedef struct mt_ky_dep_w {
    float *wqkv;   /* [3 dep_dim, dep_dim]  q | k | v, head-major */
    float *wo;     /* [dep_dim, dep_dim] */
    float *w_in;   /* [2 dep_ffn, dep_dim]  gate | up */
    float *w_out;  /* [dep_dim, dep_ffn] */
} mt_ky_dep_w;

typedef struct mt_kyutai_lm {
    mt_kyutai_config kc;
    mt_model *temporal;           /* the backbone, HuggingFace layout */
    float *text_emb;              /* [text_card + 1, dim] */
    float *emb[MT_KY_MAX_Q];      /* [n_q] of [card + 1, dim] */
    float *dep_in[MT_KY_MAX_Q];   /* [dep_q] of [dep_dim, dim] */
    float *dep_text_emb;          /* [text_card + 1, dep_dim] */
    float *dep_emb[MT_KY_MAX_Q];  /* [dep_q - 1] of [card + 1, dep_dim] */
    float *linears[MT_KY_MAX_Q];  /* [dep_q] of [card, dep_dim] */
    float **dep_norm1, **dep_norm2; /* [dep_layers] of [dep_dim] */
    mt_ky_dep_w *dep;             /* [dep_layers * dep_q], layer-major */
    float *extra[MT_KY_MAX_XH];   /* [extra_heads] of [extra_dim, dim]: the
                                     extra heads (extra_heads.N.weight, no
                                     bias), on out_norm(h) like text_linear */
    int    shape_only;            /* no side tensors on the host (config only);
                                     temporal->shape_only alone: its
                                     weights are the device's */
    float *arena;                 /* the storage behind every pointer above */
} mt_kyutai_lm;

/* Kyutai's config.json text -> *kc with the published Moshi defaults for
 * absent keys; refuses what this implementation does not run (norm other
 * than rms_norm_f32, gating other than silu, rope other than "rope",
 * depformer positions other than "none", layer scale, conditioners,
 * low-rank or demuxed embeddings, a weights schedule, kv_repeat != 1);
 * extra_heads_num_heads 0..MT_KY_MAX_XH, extra_heads_dim 1..MT_KY_MAX_XH_DIM.
 * 0, or -1 with a message naming file and key. */
int mt_kyutai_config_parse(const char *json, size_t len, const char *file,
                           mt_kyutai_config *kc, char *err, size_t errlen);
/* Range checks (also for presets). */
int mt_kyutai_config_check(const mt_kyutai_config *kc, const char *file, char *err,
                           size_t errlen);
/* The temporal backbone's mt_config for kc. */
void mt_kyutai_backbone_config(const mt_kyutai_config *kc, const char *name, mt_config *c);

/* flags: with MT_KYUTAI_HOST_SIDE (presets only) the temporal transformer
 * is shape-only (a GPU or the simulated device makes or needs no host
 * weights: the CUDA backend generates a preset's from its seed) while the
 * streams and the depformer are on the host, so the whole frame runs with
 * the temporal step on the device: moshiko's 2.4 GB of fp32 depformer
 * instead of 30 GB. */
enum { MT_KYUTAI_HOST_SIDE = 1 << 8 };

/* spec: a directory or "synthetic:moshiko" / "synthetic:kyutai-small" /
 * "synthetic:kyutai-tiny" [":seed=N"]. flags: MT_MODEL_SHAPE_ONLY for config
 * only, MT_KYUTAI_HOST_SIDE as above. */
int  mt_kyutai_load(const char *spec, int flags, mt_kyutai_lm **out, char *err,
                    size_t errlen);
void mt_kyutai_free(mt_kyutai_lm *lm);
/* What a preset of Kyutai's published shapes leaves out of its
 * configuration, for the caller to print; NULL for the others. */
const char *mt_kyutai_preset_note(const char *spec);
/* 1 when spec names a Kyutai model: a Kyutai preset, or a directory whose
 * config.json has Kyutai's keys ("n_q" and "dep_q"). */
int  mt_kyutai_is_kyutai(const char *spec);

/* The row permutation of one head of hd coordinates that makes Kyutai's
 * interleaved rotary the backends' rotate-half one: new row i takes old
 * row perm[i] (2i for i < hd/2, 2(i - hd/2) + 1 after). */
void mt_kyutai_rope_perm(int hd, int *perm);

/* Host bytes of the depformer's per-session scratch at one step (its
 * per-frame K/V of dep_q positions, every layer), for the memory report. */
size_t mt_kyutai_dep_state_bytes(const mt_kyutai_config *kc);
/* A session's bytes besides the temporal K/V (which the KV pool counts):
 * the depformer's per-frame K/V and the token rings (speech/kyutai.h). */
size_t mt_kyutai_session_bytes(const mt_kyutai_config *kc);

#endif
