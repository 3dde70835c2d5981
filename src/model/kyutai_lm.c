/* kyutai_lm.c: Kyutai's LM checkpoints and presets (see kyutai_lm.h): the
 * config (jansson), the tensor names in both published forms, the
 * conversion of the temporal transformer to the HuggingFace layout the
 * backends run (q|k|v split, interleaved rotary made rotate-half by a row
 * permutation, gate|up split), and the random presets. */
#include "util/errmsg.h"
#include "util/mapfile.h"
#include "util/io.h"
#include "util/rng.h"
#include "model/json_obj.h"
#include "model/kyutai_lm.h"
#include "model/safetensors.h"
#include "model/synthetic.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- config ------------------------------------------------------------------ */

/* The presets (synthetic:NAME), one row each; a feed-forward width
 * KY_GATED is Kyutai's gating width, 2/3 of int(4.125 dim). */
#define KY_GATED(dim) (2 * (int)(4.125 * (dim)) / 3)
#define KY_MOSHIKO_DELAYS { 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1 }
typedef struct ky_preset {
    const char      *name;
    mt_kyutai_config kc;
} ky_preset;

static const ky_preset ky_presets[] = {
    /* The published Moshi configuration (moshi/models/loaders.py
     * _lm_kwargs); also the defaults under a config.json. */
    { "moshiko", { .dim = 4096, .num_heads = 32, .num_layers = 32, .ffn = KY_GATED(4096),
                   .text_card = 32000, .text_card_out = 32000, .card = 2048, .n_q = 16,
                   .dep_q = 8, .delays = KY_MOSHIKO_DELAYS, .context = 3000,
                   .max_period = 10000, .text_pad = 3, .dep_dim = 1024, .dep_heads = 16,
                   .dep_layers = 6, .dep_ffn = KY_GATED(1024), .eps = 1e-8f } },
    /* The fixture's shape (tests/fixtures/gen/gen_kyutai_lm.py) */
    { "kyutai-tiny", { .dim = 32, .num_heads = 4, .num_layers = 2, .ffn = 88, .text_card = 40,
                       .text_card_out = 40, .card = 24, .n_q = 4, .dep_q = 2,
                       .delays = { 0, 0, 1, 0, 1 }, .context = 6, .max_period = 10000,
                       .text_pad = 3, .dep_dim = 24, .dep_heads = 2, .dep_layers = 2,
                       .dep_ffn = 66, .eps = 1e-8f } },
    /* The tiny shape speaking through synthetic:mimi-tiny (mt-serve's
     * tests and make demo): the codec's 32 bins as the card, its codebooks
     * split as 2 of the model's and 2 of the user's (dep_q 2), ... */
    { "kyutai-tiny-mimi", { .dim = 32, .num_heads = 4, .num_layers = 2, .ffn = 88,
                            .text_card = 40, .text_card_out = 40, .card = 32, .n_q = 4,
                            .dep_q = 2, .delays = { 0, 0, 1, 0, 1 }, .context = 6,
                            .max_period = 10000, .text_pad = 3, .dep_dim = 24,
                            .dep_heads = 2, .dep_layers = 2, .dep_ffn = 66, .eps = 1e-8f } },
    /* ... or 2 of the user's alone (dep_q 0: speech to text, text delayed
     * one frame after the audio); the depformer's shape stays, unused. */
    { "kyutai-tiny-stt", { .dim = 32, .num_heads = 4, .num_layers = 2, .ffn = 88,
                           .text_card = 40, .text_card_out = 40, .card = 32, .n_q = 2,
                           .dep_q = 0, .delays = { 1, 0, 0 }, .context = 6,
                           .max_period = 10000, .text_pad = 3, .dep_dim = 24,
                           .dep_heads = 2, .dep_layers = 2, .dep_ffn = 66, .eps = 1e-8f } },
    /* A mid-size Kyutai shape for the CPU benchmark: Moshi's streams (16
     * codebooks, 8 of them the depformer's, Moshi's delays) on a small
     * transformer. */
    { "kyutai-small", { .dim = 256, .num_heads = 4, .num_layers = 6, .ffn = KY_GATED(256),
                        .text_card = 4000, .text_card_out = 4000, .card = 1024, .n_q = 16,
                        .dep_q = 8, .delays = KY_MOSHIKO_DELAYS, .context = 3000,
                        .max_period = 10000, .text_pad = 3, .dep_dim = 256, .dep_heads = 4,
                        .dep_layers = 4, .dep_ffn = KY_GATED(256), .eps = 1e-8f } },
    /* Kyutai's speech-to-text models (moshi's configs/stt_1b_enfr.json and
     * stt_2.6b_en.json with the model sizes of their config.json on the
     * hub): 32 Mimi codebooks in, all the user's (dep_q 0: no depformer,
     * text only), every delay 0 (the text comes later by the audio's
     * shift, stt_config.audio_delay_seconds, 0.5 s and 2.5 s: the stream
     * protocol's business), text padding 3, rope max_period 100000, silu
     * gating at hidden_scale 4.125 (ffn 5632). stt-1b-en_fr: 16 layers of
     * 2048 (16 heads), 8000 text tokens, context 750; stt-2.6b-en: 48
     * layers of 2048 (32 heads), 4000 text tokens, context 375; stt-1b's
     * extra heads (its semantic VAD: 4 linear heads of 6 outputs on the
     * last hidden state, 49k weights, nothing beside a frame's 1G
     * multiply-adds; random like the rest, after it in the arena, so the
     * other weights are those of before). Not modelled (see
     * KYUTAI_PRESET_NOTES): the lm_gen_config's sampling (temp 0: greedy, which a session asks for),
     * the tokenizer and Mimi's name. */
    { "stt-1b", { .dim = 2048, .num_heads = 16, .num_layers = 16, .ffn = KY_GATED(2048),
                  .text_card = 8000, .text_card_out = 8000, .card = 2048, .n_q = 32,
                  .dep_q = 0, .context = 750, .max_period = 100000, .text_pad = 3,
                  .eps = 1e-8f, .extra_heads = 4, .extra_dim = 6 } },
    { "stt-2.6b", { .dim = 2048, .num_heads = 32, .num_layers = 48, .ffn = KY_GATED(2048),
                    .text_card = 4000, .text_card_out = 4000, .card = 2048, .n_q = 32,
                    .dep_q = 0, .context = 375, .max_period = 100000, .text_pad = 3,
                    .eps = 1e-8f } },
    /* Kyutai's 2B Moshi (moshi's configs/moshi_dev_2b.json): 24 layers of
     * 2560 (20 heads), 48000 text tokens, 32 codebooks of 2048 of which the
     * depformer makes 16 (1024 wide, 16 heads, 6 layers, feed-forward
     * 4224: gating 2816, weights per step), delays 0 2 ... (text 0,
     * semantic 0, the acoustic ones 2, for the model's and the user's 16),
     * context 3000, max_period 100000. Not modelled: its conditioner (a
     * lookup table of 31 description bins, dim 16, summed into the input
     * by the fuser: one constant vector per session, nothing a frame's
     * cost sees). */
    { "moshi-2b", { .dim = 2560, .num_heads = 20, .num_layers = 24, .ffn = KY_GATED(2560),
                    .text_card = 48000, .text_card_out = 48000, .card = 2048, .n_q = 32,
                    .dep_q = 16,
                    .delays = { 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                                0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2 },
                    .context = 3000, .max_period = 100000, .text_pad = 3, .dep_dim = 1024,
                    .dep_heads = 16, .dep_layers = 6, .dep_ffn = 2 * 4224 / 3,
                    .eps = 1e-8f } },
};

/* The preset named name[0..nl), or NULL. */
static const mt_kyutai_config *ky_preset_find(const char *name, size_t nl)
{
    for (size_t i = 0; i < sizeof ky_presets / sizeof ky_presets[0]; i++)
        if (strlen(ky_presets[i].name) == nl && !strncmp(name, ky_presets[i].name, nl))
            return &ky_presets[i].kc;
    return NULL;
}

/* The published Moshi configuration: the first preset. */
static void moshiko_defaults(mt_kyutai_config *kc)
{
    *kc = ky_presets[0].kc;
}

/* Kyutai's gating width for a feed-forward size of ff at width dim. */
static int gating_width(int dim, long long ff)
{
    return ff == 4LL * dim ? (int)(21LL * dim / 8) : (int)(2 * ff / 3);
}

static int ky_int(json_t *root, const char *file, const char *key, int lo, int hi, int *out,
                  char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        mt_set_err(err, errlen, "%s: field %s is not an integer in %d..%d", file, key, lo, hi);
        return -1;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

static int ky_num(json_t *root, const char *file, const char *key, double lo, double hi,
                  double *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi)) {
        mt_set_err(err, errlen, "%s: field %s is not a number in %g..%g", file, key, lo, hi);
        return -1;
    }
    *out = json_number_value(v);
    return 0;
}

/* key must be absent, null, or the string want. */
static int ky_str(json_t *root, const char *file, const char *key, const char *want, char *err,
                  size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) || strcmp(json_string_value(v), want) != 0) {
        mt_set_err(err, errlen, "%s: field %s must be \"%s\" (the only one implemented)", file,
                 key, want);
        return -1;
    }
    return 0;
}

/* key absent, null or false/0 (a feature not implemented). */
static int ky_off(json_t *root, const char *file, const char *key, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v) || json_is_false(v) ||
        (json_is_integer(v) && json_integer_value(v) == 0))
        return 0;
    mt_set_err(err, errlen, "%s: field %s is set: not implemented", file, key);
    return -1;
}

/* key absent, null or true (a feature this implementation always has). */
static int ky_on(json_t *root, const char *file, const char *key, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v) || json_is_true(v))
        return 0;
    mt_set_err(err, errlen, "%s: field %s must be true (the only form implemented)", file, key);
    return -1;
}

int mt_kyutai_config_parse(const char *json, size_t len, const char *file,
                           mt_kyutai_config *kc, char *err, size_t errlen)
{
    json_t *root = mt_json_object(json, len, file, err, errlen);
    if (!root)
        return -1;
    int rc = -1;
    moshiko_defaults(kc);
    double hs = 4.125, dhs = -1, mp = kc->max_period;
    int dff = -1, heads = -1, layers = -1, kvr = 1, tco = -1;
    kc->extra_heads = 0;
    kc->extra_dim = 6;
    if (ky_int(root, file, "dim", 1, 65536, &kc->dim, err, errlen) ||
        ky_int(root, file, "num_heads", 1, 1024, &kc->num_heads, err, errlen) ||
        ky_int(root, file, "num_layers", 1, 1024, &kc->num_layers, err, errlen) ||
        ky_num(root, file, "hidden_scale", 0.01, 64, &hs, err, errlen) ||
        ky_int(root, file, "text_card", 1, 1 << 24, &kc->text_card, err, errlen) ||
        ky_int(root, file, "text_card_out", 1, 1 << 24, &tco, err, errlen) ||
        ky_int(root, file, "card", 1, 1 << 20, &kc->card, err, errlen) ||
        ky_int(root, file, "n_q", 0, MT_KY_MAX_Q, &kc->n_q, err, errlen) ||
        ky_int(root, file, "dep_q", 0, MT_KY_MAX_Q, &kc->dep_q, err, errlen) ||
        ky_int(root, file, "context", 1, 1 << 24, &kc->context, err, errlen) ||
        ky_num(root, file, "max_period", 1, 1e12, &mp, err, errlen) ||
        ky_int(root, file, "existing_text_padding_id", 0, 1 << 24, &kc->text_pad, err, errlen) ||
        ky_int(root, file, "depformer_dim", 1, 65536, &kc->dep_dim, err, errlen) ||
        ky_int(root, file, "depformer_dim_feedforward", 1, 1 << 20, &dff, err, errlen) ||
        ky_num(root, file, "depformer_hidden_scale", 0.01, 64, &dhs, err, errlen) ||
        ky_int(root, file, "depformer_num_heads", 1, 1024, &heads, err, errlen) ||
        ky_int(root, file, "depformer_num_layers", 1, 1024, &layers, err, errlen) ||
        ky_int(root, file, "kv_repeat", 1, 1024, &kvr, err, errlen) ||
        ky_int(root, file, "extra_heads_num_heads", 0, MT_KY_MAX_XH, &kc->extra_heads, err,
               errlen) ||
        ky_int(root, file, "extra_heads_dim", 1, MT_KY_MAX_XH_DIM, &kc->extra_dim, err, errlen) ||
        ky_str(root, file, "norm", "rms_norm_f32", err, errlen) ||
        ky_str(root, file, "gating", "silu", err, errlen) ||
        ky_str(root, file, "depformer_gating", "silu", err, errlen) ||
        ky_str(root, file, "positional_embedding", "rope", err, errlen) ||
        ky_str(root, file, "depformer_pos_emb", "none", err, errlen) ||
        ky_on(root, file, "causal", err, errlen) ||
        ky_on(root, file, "depformer_multi_linear", err, errlen) ||
        ky_on(root, file, "depformer_weights_per_step", err, errlen) ||
        ky_off(root, file, "layer_scale", err, errlen) ||
        ky_off(root, file, "depformer_layer_scale", err, errlen) ||
        ky_off(root, file, "depformer_norm", err, errlen) ||
        ky_off(root, file, "depformer_weights_per_step_schedule", err, errlen) ||
        ky_off(root, file, "depformer_low_rank_embeddings", err, errlen) ||
        ky_off(root, file, "demux_second_stream", err, errlen) ||
        ky_off(root, file, "demux_second_text_stream", err, errlen) ||
        ky_off(root, file, "norm_emb", err, errlen) ||
        ky_off(root, file, "bias_proj", err, errlen) ||
        ky_off(root, file, "conditioners", err, errlen) ||
        ky_off(root, file, "fuser", err, errlen) ||
        ky_off(root, file, "cross_attention", err, errlen))
        goto out;
    if (kvr != 1) {
        mt_set_err(err, errlen, "%s: field kv_repeat = %d: only 1 is implemented", file, kvr);
        goto out;
    }
    kc->max_period = (float)mp;
    kc->text_card_out = tco > 0 ? tco : kc->text_card;
    kc->ffn = gating_width(kc->dim, (long long)(hs * kc->dim));
    if (dff < 0)
        dff = (int)((dhs > 0 ? dhs : hs) * kc->dep_dim);
    kc->dep_ffn = gating_width(kc->dep_dim, dff);
    kc->dep_heads = heads > 0 ? heads : kc->num_heads;
    kc->dep_layers = layers > 0 ? layers : kc->num_layers;
    json_t *d = json_object_get(root, "delays");
    if (d && !json_is_null(d)) {
        if (!json_is_array(d) || json_array_size(d) != (size_t)kc->n_q + 1) {
            mt_set_err(err, errlen, "%s: field delays must be a list of n_q + 1 = %d integers",
                     file, kc->n_q + 1);
            goto out;
        }
        for (int i = 0; i <= kc->n_q; i++) {
            json_t *e = json_array_get(d, (size_t)i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 64) {
                mt_set_err(err, errlen, "%s: delays[%d] is not an integer in 0..64", file, i);
                goto out;
            }
            kc->delays[i] = (int)json_integer_value(e);
        }
    } else if (kc->n_q != 16) {
        mt_set_err(err, errlen, "%s: field delays is missing (needed when n_q is not 16)", file);
        goto out;
    }
    rc = mt_kyutai_config_check(kc, file, err, errlen);
out:
    json_decref(root);
    return rc;
}

int mt_kyutai_config_check(const mt_kyutai_config *kc, const char *file, char *err,
                           size_t errlen)
{
    if (kc->dim % kc->num_heads || (kc->dim / kc->num_heads) % 2) {
        mt_set_err(err, errlen, "%s: dim %d is not num_heads %d times an even head size",
                 file, kc->dim, kc->num_heads);
        return -1;
    }
    if (kc->dep_q > 0 && kc->dep_dim % kc->dep_heads) {
        mt_set_err(err, errlen, "%s: depformer_dim %d is not a multiple of depformer_num_heads %d",
                 file, kc->dep_dim, kc->dep_heads);
        return -1;
    }
    if (kc->text_card_out > kc->text_card + 1) {
        /* a sampled text token is embedded again (text_emb has text_card + 1 rows) */
        mt_set_err(err, errlen, "%s: text_card_out %d is over text_card + 1 = %d", file,
                 kc->text_card_out, kc->text_card + 1);
        return -1;
    }
    if (kc->dep_q > kc->n_q) {
        mt_set_err(err, errlen, "%s: dep_q %d is more than n_q %d", file, kc->dep_q, kc->n_q);
        return -1;
    }
    if (kc->ffn < 1 || kc->dep_ffn < 1 || kc->ffn > (1 << 20) || kc->dep_ffn > (1 << 20)) {
        mt_set_err(err, errlen, "%s: a feed-forward width (%d, depformer %d) is outside 1..%d",
                 file, kc->ffn, kc->dep_ffn, 1 << 20);
        return -1;
    }
    mt_config c;
    mt_kyutai_backbone_config(kc, file, &c);
    if (mt_config_check(&c, file, err, errlen))
        return -1;
    /* every size product stays far inside 64 bits */
    double floats = (double)mt_model_params(&c) +
                    (double)kc->dep_layers * kc->dep_q *
                        (4.0 * kc->dep_dim * kc->dep_dim + 3.0 * kc->dep_ffn * kc->dep_dim) +
                    (double)(kc->n_q + 2) * (kc->card + kc->text_card + 2) * (kc->dim + kc->dep_dim);
    if (floats > 1e15) {
        mt_set_err(err, errlen, "%s: %.3g parameters is not a model this loader takes", file,
                 floats);
        return -1;
    }
    return 0;
}

void mt_kyutai_backbone_config(const mt_kyutai_config *kc, const char *name, mt_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->hidden = kc->dim;
    c->ffn = kc->ffn;
    c->layers = kc->num_layers;
    c->heads = kc->num_heads;
    c->kv_heads = kc->num_heads;
    c->head_dim = kc->dim / kc->num_heads;
    c->vocab = kc->text_card_out;
    c->eps = kc->eps;
    c->rope_theta = kc->max_period;
    c->tie_embeddings = 1;
    c->has_tokens = 1;
    c->sample_rate = 24000;
    c->frame_samples = 1920;
}

void mt_kyutai_rope_perm(int hd, int *perm)
{
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        perm[i] = 2 * i;
        perm[half + i] = 2 * i + 1;
    }
}

size_t mt_kyutai_dep_state_bytes(const mt_kyutai_config *kc)
{
    /* K and V of dep_q positions, every layer, fp32 */
    return (size_t)kc->dep_layers * 2 * kc->dep_q * kc->dep_dim * sizeof(float);
}

size_t mt_kyutai_session_bytes(const mt_kyutai_config *kc)
{
    int max_delay = 0;
    for (int k = 0; k <= kc->n_q; k++)
        max_delay = kc->delays[k] > max_delay ? kc->delays[k] : max_delay;
    return mt_kyutai_dep_state_bytes(kc) +
           (size_t)(1 + kc->n_q) * (max_delay + 2) * sizeof(int32_t);
}

/* ---- storage ----------------------------------------------------------------- */

/* Floats of every non-temporal tensor. */
static size_t side_floats(const mt_kyutai_config *kc)
{
    size_t D = kc->dim, dd = kc->dep_dim, n = 0;
    n += (size_t)(kc->text_card + 1) * D;
    n += (size_t)kc->n_q * (kc->card + 1) * D;
    if (kc->dep_q > 0) {
        n += (size_t)kc->dep_q * dd * D;
        n += (size_t)(kc->text_card + 1) * dd;
        n += (size_t)(kc->dep_q - 1) * (kc->card + 1) * dd;
        n += (size_t)kc->dep_q * kc->card * dd;
        n += (size_t)kc->dep_layers * 2 * dd;
        n += (size_t)kc->dep_layers * kc->dep_q *
             (4 * dd * dd + 3 * (size_t)kc->dep_ffn * dd);
    }
    n += (size_t)kc->extra_heads * kc->extra_dim * D;
    return n;
}

/* temporal_shape_only: the backbone without host weights (a device
 * backend makes its own); shape_only: no side tensors either. */
static int ky_alloc(const mt_kyutai_config *kc, const char *name, int shape_only,
                    int temporal_shape_only, mt_kyutai_lm **out, char *err, size_t errlen)
{
    mt_kyutai_lm *lm = calloc(1, sizeof *lm);
    if (!lm) {
        mt_set_err(err, errlen, "kyutai: out of memory");
        return -1;
    }
    lm->kc = *kc;
    lm->shape_only = shape_only;
    mt_config c;
    mt_kyutai_backbone_config(kc, name, &c);
    if (mt_config_check(&c, name, err, errlen) ||
        mt_model_make(&c, shape_only || temporal_shape_only, 0, &lm->temporal, err, errlen)) {
        free(lm);
        return -1;
    }
    if (shape_only) {
        *out = lm;
        return 0;
    }
    size_t n = side_floats(kc);
    lm->arena = malloc(n * sizeof(float));
    lm->dep_norm1 = calloc((size_t)kc->dep_layers + 1, sizeof(float *));
    lm->dep_norm2 = calloc((size_t)kc->dep_layers + 1, sizeof(float *));
    lm->dep = calloc((size_t)kc->dep_layers * kc->dep_q + 1, sizeof *lm->dep);
    if (!lm->arena || !lm->dep_norm1 || !lm->dep_norm2 || !lm->dep) {
        mt_kyutai_free(lm);
        mt_set_err(err, errlen, "kyutai: out of memory (%zu floats)", n);
        return -1;
    }
    float *p = lm->arena;
    size_t D = kc->dim, dd = kc->dep_dim;
#define TAKE(ptr, cnt) do { (ptr) = p; p += (cnt); } while (0)
    TAKE(lm->text_emb, (size_t)(kc->text_card + 1) * D);
    for (int k = 0; k < kc->n_q; k++)
        TAKE(lm->emb[k], (size_t)(kc->card + 1) * D);
    if (kc->dep_q > 0) {
        for (int k = 0; k < kc->dep_q; k++)
            TAKE(lm->dep_in[k], dd * D);
        TAKE(lm->dep_text_emb, (size_t)(kc->text_card + 1) * dd);
        for (int k = 0; k < kc->dep_q - 1; k++)
            TAKE(lm->dep_emb[k], (size_t)(kc->card + 1) * dd);
        for (int k = 0; k < kc->dep_q; k++)
            TAKE(lm->linears[k], (size_t)kc->card * dd);
        for (int l = 0; l < kc->dep_layers; l++) {
            TAKE(lm->dep_norm1[l], dd);
            TAKE(lm->dep_norm2[l], dd);
            for (int k = 0; k < kc->dep_q; k++) {
                mt_ky_dep_w *w = &lm->dep[(size_t)l * kc->dep_q + k];
                TAKE(w->wqkv, 3 * dd * dd);
                TAKE(w->wo, dd * dd);
                TAKE(w->w_in, 2 * (size_t)kc->dep_ffn * dd);
                TAKE(w->w_out, dd * kc->dep_ffn);
            }
        }
    }
    for (int h = 0; h < kc->extra_heads; h++)   /* last: the presets' random fill is kept */
        TAKE(lm->extra[h], (size_t)kc->extra_dim * D);
#undef TAKE
    *out = lm;
    return 0;
}

void mt_kyutai_free(mt_kyutai_lm *lm)
{
    if (!lm)
        return;
    mt_model_free(lm->temporal);
    free(lm->arena);
    free(lm->dep_norm1);
    free(lm->dep_norm2);
    free(lm->dep);
    free(lm);
}

/* ---- tensors from a checkpoint ------------------------------------------------ */

typedef struct ky_src {
    const mt_st_file *sf;
    const char       *path;
    char             *err;
    size_t            errlen;
} ky_src;

/* Tensor name (or, when fused is not NULL and name is absent, fused, of
 * which slice k of mult is meant) of rows x cols (a norm: cols 0, any
 * shape of rows elements) -> dst. */
static int ky_get(const ky_src *s, const char *name, const char *fused, int k, int mult,
                  uint64_t rows, uint64_t cols, float *dst)
{
    const mt_st_tensor *t = mt_st_find(s->sf, name);
    const char *nm = name;
    uint64_t want_rows = rows;
    if (!t && fused) {
        t = mt_st_find(s->sf, fused);
        nm = fused;
        want_rows = rows * (uint64_t)mult;
    }
    if (!t) {
        if (fused)
            mt_set_err(s->err, s->errlen, "%s: tensor '%s' (or '%s'): missing, expected [%llu, %llu]",
                     s->path, name, fused, (unsigned long long)rows, (unsigned long long)cols);
        else
            mt_set_err(s->err, s->errlen, "%s: tensor '%s': missing", s->path, name);
        return -1;
    }
    int ok;
    if (cols == 0)
        ok = t->numel == rows && t->ndim >= 1 && t->shape[t->ndim - 1] == rows;
    else
        ok = t->ndim == 2 && t->shape[0] == want_rows && t->shape[1] == cols;
    if (!ok) {
        char got[96];
        mt_st_shape_str(t, got, sizeof got);
        if (cols == 0)
            mt_set_err(s->err, s->errlen, "%s: tensor '%s': shape [%s], expected [1, 1, %llu]",
                     s->path, nm, got, (unsigned long long)rows);
        else
            mt_set_err(s->err, s->errlen, "%s: tensor '%s': shape [%s], expected [%llu, %llu]",
                     s->path, nm, got, (unsigned long long)want_rows, (unsigned long long)cols);
        return -1;
    }
    if (mt_st_check_float(t, s->path, s->err, s->errlen) != 0)
        return -1;
    if (nm == name || mult == 1)
        return mt_st_to_f32(t, dst);
    /* one slice of the fused tensor: convert it through a view */
    mt_st_tensor v = *t;
    size_t es = (size_t)mt_st_dtype_size(t->dtype);
    v.shape[0] = rows;
    v.numel = rows * cols;
    v.data = t->data + (size_t)k * rows * cols * es;
    return mt_st_to_f32(&v, dst);
}

/* Temporal layer l: Kyutai's tensors into the HuggingFace layout. */
static int load_temporal_layer(const ky_src *s, mt_kyutai_lm *lm, int l, float *tmp)
{
    const mt_kyutai_config *kc = &lm->kc;
    mt_layer_weights *w = &lm->temporal->layer[l];
    const uint64_t D = (uint64_t)kc->dim, F = (uint64_t)kc->ffn;
    char n1[160], n2[160];
#define P(buf, fmt) snprintf(buf, sizeof buf, "transformer.layers.%d." fmt, l)
    P(n1, "self_attn.in_projs.0.weight");
    P(n2, "self_attn.in_proj_weight");
    if (ky_get(s, n1, n2, 0, 1, 3 * D, D, tmp))
        return -1;
    /* q and k rows permuted per head (interleaved -> rotate-half rotary) */
    int hd = kc->dim / kc->num_heads;
    int perm[4096];
    mt_kyutai_rope_perm(hd, perm);
    for (int part = 0; part < 2; part++) {
        float *dst = part ? w->wk : w->wq;
        for (int h = 0; h < kc->num_heads; h++)
            for (int i = 0; i < hd; i++)
                memcpy(dst + ((size_t)h * hd + i) * D,
                       tmp + ((size_t)part * D + (size_t)h * hd + perm[i]) * D, D * sizeof(float));
    }
    memcpy(w->wv, tmp + 2 * D * D, D * D * sizeof(float));
    P(n1, "self_attn.out_projs.0.weight");
    P(n2, "self_attn.out_proj.weight");
    if (ky_get(s, n1, n2, 0, 1, D, D, w->wo))
        return -1;
    P(n1, "norm1.alpha");
    if (ky_get(s, n1, NULL, 0, 1, D, 0, w->attn_norm))
        return -1;
    P(n1, "norm2.alpha");
    if (ky_get(s, n1, NULL, 0, 1, D, 0, w->mlp_norm))
        return -1;
    P(n1, "gating.linear_in.weight");
    if (ky_get(s, n1, NULL, 0, 1, 2 * F, D, tmp))
        return -1;
    memcpy(w->w_gate, tmp, F * D * sizeof(float));
    memcpy(w->w_up, tmp + F * D, F * D * sizeof(float));
    P(n1, "gating.linear_out.weight");
    if (ky_get(s, n1, NULL, 0, 1, D, F, w->w_down))
        return -1;
#undef P
    return 0;
}

static int load_depformer(const ky_src *s, mt_kyutai_lm *lm)
{
    const mt_kyutai_config *kc = &lm->kc;
    const uint64_t dd = (uint64_t)kc->dep_dim, F = (uint64_t)kc->dep_ffn, Q = (uint64_t)kc->dep_q;
    char n1[160], n2[160];
    for (int k = 0; k < kc->dep_q; k++) {
        snprintf(n1, sizeof n1, "depformer_in.%d.weight", k);
        if (ky_get(s, n1, NULL, 0, 1, dd, (uint64_t)kc->dim, lm->dep_in[k]))
            return -1;
        snprintf(n1, sizeof n1, "linears.%d.weight", k);
        if (ky_get(s, n1, NULL, 0, 1, (uint64_t)kc->card, dd, lm->linears[k]))
            return -1;
        if (k < kc->dep_q - 1) {
            snprintf(n1, sizeof n1, "depformer_emb.%d.weight", k);
            if (ky_get(s, n1, NULL, 0, 1, (uint64_t)kc->card + 1, dd, lm->dep_emb[k]))
                return -1;
        }
    }
    if (ky_get(s, "depformer_text_emb.weight", NULL, 0, 1, (uint64_t)kc->text_card + 1, dd,
               lm->dep_text_emb))
        return -1;
    for (int l = 0; l < kc->dep_layers; l++) {
        char pre[64];
        snprintf(pre, sizeof pre, "depformer.layers.%d.", l);
        snprintf(n1, sizeof n1, "%snorm1.alpha", pre);
        if (ky_get(s, n1, NULL, 0, 1, dd, 0, lm->dep_norm1[l]))
            return -1;
        snprintf(n1, sizeof n1, "%snorm2.alpha", pre);
        if (ky_get(s, n1, NULL, 0, 1, dd, 0, lm->dep_norm2[l]))
            return -1;
        for (int k = 0; k < kc->dep_q; k++) {
            mt_ky_dep_w *w = &lm->dep[(size_t)l * kc->dep_q + k];
            /* per step: in_projs.k / out_projs.k, or slice k of the fused
             * in_proj_weight [dep_q * 3 dd, dd] / out_proj.weight */
            snprintf(n1, sizeof n1, "%sself_attn.in_projs.%d.weight", pre, k);
            snprintf(n2, sizeof n2, "%sself_attn.in_proj_weight", pre);
            if (ky_get(s, n1, n2, k, (int)Q, 3 * dd, dd, w->wqkv))
                return -1;
            snprintf(n1, sizeof n1, "%sself_attn.out_projs.%d.weight", pre, k);
            snprintf(n2, sizeof n2, "%sself_attn.out_proj.weight", pre);
            if (ky_get(s, n1, n2, k, (int)Q, dd, dd, w->wo))
                return -1;
            snprintf(n1, sizeof n1, "%sgating.%d.linear_in.weight", pre, k);
            if (ky_get(s, n1, NULL, 0, 1, 2 * F, dd, w->w_in))
                return -1;
            snprintf(n1, sizeof n1, "%sgating.%d.linear_out.weight", pre, k);
            if (ky_get(s, n1, NULL, 0, 1, dd, F, w->w_out))
                return -1;
        }
    }
    return 0;
}

static int load_tensors(const ky_src *s, mt_kyutai_lm *lm)
{
    const mt_kyutai_config *kc = &lm->kc;
    const uint64_t D = (uint64_t)kc->dim;
    if (kc->dim / kc->num_heads > 4096) {
        mt_set_err(s->err, s->errlen, "%s: head size over 4096", s->path);
        return -1;
    }
    size_t tmpn = 3 * (size_t)D * D > 2 * (size_t)kc->ffn * D ? 3 * (size_t)D * D
                                                               : 2 * (size_t)kc->ffn * D;
    float *tmp = malloc(tmpn * sizeof(float));
    if (!tmp) {
        mt_set_err(s->err, s->errlen, "kyutai: out of memory");
        return -1;
    }
    int rc = -1;
    for (int l = 0; l < kc->num_layers; l++)
        if (load_temporal_layer(s, lm, l, tmp))
            goto out;
    if (ky_get(s, "out_norm.alpha", NULL, 0, 1, D, 0, lm->temporal->norm) ||
        ky_get(s, "text_linear.weight", NULL, 0, 1, (uint64_t)kc->text_card_out, D,
               lm->temporal->lm_head) ||
        ky_get(s, "text_emb.weight", NULL, 0, 1, (uint64_t)kc->text_card + 1, D, lm->text_emb))
        goto out;
    for (int k = 0; k < kc->n_q; k++) {
        char n[64];
        snprintf(n, sizeof n, "emb.%d.weight", k);
        if (ky_get(s, n, NULL, 0, 1, (uint64_t)kc->card + 1, D, lm->emb[k]))
            goto out;
    }
    if (kc->dep_q > 0 && load_depformer(s, lm))
        goto out;
    for (int h = 0; h < kc->extra_heads; h++) {
        char n[64];
        snprintf(n, sizeof n, "extra_heads.%d.weight", h);
        if (ky_get(s, n, NULL, 0, 1, (uint64_t)kc->extra_dim, D, lm->extra[h]))
            goto out;
    }
    rc = 0;
out:
    free(tmp);
    return rc;
}

/* ---- sources ----------------------------------------------------------------- */

static int load_dir(const char *dir, int flags, mt_kyutai_lm **out, char *err, size_t errlen)
{
    mt_ckpt_dir d;
    if (mt_ckpt_dir_read(dir, &d, err, errlen))
        return -1;
    const char *wpath = d.wpath;
    mt_kyutai_config kc;
    int rc = mt_kyutai_config_parse(d.config, d.config_len, d.cpath, &kc, err, errlen);
    free(d.config);
    if (rc)
        return -1;
    const char *base = strrchr(dir, '/');
    base = base && base[1] ? base + 1 : dir;
    int shape_only = (flags & MT_MODEL_SHAPE_ONLY) != 0;
    mt_config c;
    mt_kyutai_backbone_config(&kc, base, &c);
    uint64_t bytes = (mt_model_params(&c) + side_floats(&kc)) * 4;
    if (!shape_only && bytes > mt_model_host_limit()) {
        mt_set_err(err, errlen, "%s: %.1f GiB of fp32 host weights is over the %.0f GiB host "
                 "limit (" MT_MODEL_HOST_LIMIT_HINT ")", dir, bytes / 1073741824.0,
                 mt_model_host_limit() / 1073741824.0);
        return -1;
    }
    mt_kyutai_lm *lm = NULL;
    if (ky_alloc(&kc, base, shape_only, shape_only, &lm, err, errlen))
        return -1;
    if (shape_only) {
        *out = lm;
        return 0;
    }
    mt_mapfile f;
    if (mt_mapfile_open(wpath, &f, err, errlen)) {
        mt_kyutai_free(lm);
        return -1;
    }
    mt_st_file sf;
    rc = -1;
    if (mt_st_parse(f.data, f.len, wpath, &sf, err, errlen) == 0) {
        ky_src s = { &sf, wpath, err, errlen };
        rc = load_tensors(&s, lm);
        mt_st_free(&sf);
    }
    mt_mapfile_close(&f);
    if (rc) {
        mt_kyutai_free(lm);
        return -1;
    }
    *out = lm;
    return 0;
}

/* Random side tensors: N(0, 1/in) for matrices and tables (Kyutai's init
 * scale), norms 1. */
static void fill_random(mt_kyutai_lm *lm, uint64_t seed)
{
    const mt_kyutai_config *kc = &lm->kc;
    mt_rng r;
    mt_rng_seed(&r, seed ^ 0x4b79757461694c4dull);
    size_t n = side_floats(kc);
    /* every side tensor is a matrix with `in` columns of dim or dep_dim,
     * but for the norms: scale by the smaller width, then set the norms */
    double sd = 1.0 / sqrt((double)(kc->dep_q > 0 && kc->dep_dim < kc->dim ? kc->dep_dim : kc->dim));
    for (size_t i = 0; i < n; i++)
        lm->arena[i] = (float)(mt_rng_normal(&r) * sd);
    for (int l = 0; l < kc->dep_layers && kc->dep_q > 0; l++)
        for (int i = 0; i < kc->dep_dim; i++)
            lm->dep_norm1[l][i] = lm->dep_norm2[l][i] = 1.0f;
}

static int load_synthetic(const char *spec, int flags, mt_kyutai_lm **out, char *err,
                          size_t errlen)
{
    const char *name = spec + strlen("synthetic:");
    size_t nl = strcspn(name, ":");
    uint64_t seed = 1;
    if (name[nl]) {
        const char *o = name + nl + 1;
        char *end;
        errno = 0;
        if (strncmp(o, "seed=", 5) != 0 || !o[5] || o[5] == '-')
            goto bad;
        seed = strtoull(o + 5, &end, 10);
        if (errno || *end)
            goto bad;
    }
    const mt_kyutai_config *preset = ky_preset_find(name, nl);
    if (!preset) {
        char names[1024];
        mt_synthetic_list(names, sizeof names);
        mt_set_err(err, errlen, "%s: unknown Kyutai preset (presets: %s)", spec, names);
        return -1;
    }
    mt_kyutai_config kc = *preset;
    int shape_only = (flags & MT_MODEL_SHAPE_ONLY) != 0;
    int side_only = !shape_only && (flags & MT_KYUTAI_HOST_SIDE) != 0;
    mt_config c;
    mt_kyutai_backbone_config(&kc, spec, &c);
    uint64_t bytes = ((side_only ? 0 : mt_model_params(&c)) + side_floats(&kc)) * 4;
    if (!shape_only && bytes > mt_model_host_limit()) {
        mt_set_err(err, errlen, "%s: %.1f GiB of fp32 host weights is over the %.0f GiB host "
                 "limit: load it shape-only (GPU or simulated device; " MT_MODEL_HOST_LIMIT_HINT
                 ")", spec, bytes / 1073741824.0, mt_model_host_limit() / 1073741824.0);
        return -1;
    }
    mt_kyutai_lm *lm = NULL;
    if (ky_alloc(&kc, spec, shape_only, side_only, &lm, err, errlen))
        return -1;
    lm->temporal->seed = seed;
    if (!shape_only) {
        if (!side_only)
            mt_synthetic_fill(lm->temporal);
        fill_random(lm, seed);
    }
    *out = lm;
    return 0;
bad:
    mt_set_err(err, errlen, "%s: bad option (want seed=N)", spec);
    return -1;
}

int mt_kyutai_load(const char *spec, int flags, mt_kyutai_lm **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!strncmp(spec, "synthetic:", 10))
        return load_synthetic(spec, flags, out, err, errlen);
    if ((flags & MT_KYUTAI_HOST_SIDE) && !(flags & MT_MODEL_SHAPE_ONLY)) {
        mt_set_err(err, errlen, "%s: the temporal transformer without host weights is for "
                 "the synthetic presets only (a device backend makes their weights)", spec);
        return -1;
    }
    return load_dir(spec, flags, out, err, errlen);
}

const char *mt_kyutai_preset_note(const char *spec)
{
    if (!strncmp(spec, "synthetic:stt-1b", 16))
        return "stt-1b-en_fr's shape with its extra heads (the semantic VAD: 4 heads of 6 "
               "outputs, random: Step prs on the CPU backend), its 0.5 s audio delay left to "
               "the stream; Kyutai samples it greedily (temp 0)";
    if (!strncmp(spec, "synthetic:stt-2.6b", 18))
        return "stt-2.6b-en's shape, its 2.5 s audio delay and 1 s silence prefix left to the "
               "stream; Kyutai samples it greedily (temp 0)";
    if (!strncmp(spec, "synthetic:moshi-2b", 18))
        return "moshi_dev_2b's shape without its description conditioner (a 31-bin lookup "
               "table summed into the input: one constant vector per session)";
    return NULL;
}

int mt_kyutai_is_kyutai(const char *spec)
{
    if (!strncmp(spec, "synthetic:", 10)) {
        const char *n = spec + 10;
        return !strncmp(n, "moshiko", 7) || !strncmp(n, "kyutai-", 7) ||
               !strncmp(n, "moshi-2b", 8) || !strncmp(n, "stt-", 4);
    }
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", spec) >= sizeof path)
        return 0;
    char e[8];
    size_t len;
    char *text = mt_read_regular(path, 1u << 20, &len, e, sizeof e);
    if (!text)
        return 0;
    json_t *root = json_loadb(text, len, 0, NULL);
    free(text);
    int yes = root && json_object_get(root, "n_q") && json_object_get(root, "dep_q");
    json_decref(root);
    return yes;
}
