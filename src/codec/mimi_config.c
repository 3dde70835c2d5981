/* mimi_config.c: Mimi's configuration: Kyutai's published one, the tiny
 * one of the fixtures, and their configuration dictionary read from JSON,
 * refusing the variants this implementation does not compute. */
#include "codec/mimi.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "model/json_obj.h"
#include "util/errmsg.h"

void mimi_config_default(mimi_config *c)
{
    memset(c, 0, sizeof *c);
    c->sample_rate = 24000;
    c->frame_rate = 12.5;
    c->dimension = 512;
    c->n_filters = 64;
    c->n_residual_layers = 1;
    c->n_ratios = 4;
    c->ratios[0] = 8; c->ratios[1] = 6; c->ratios[2] = 5; c->ratios[3] = 4;
    c->kernel_size = 7;
    c->residual_kernel_size = 3;
    c->last_kernel_size = 3;
    c->dilation_base = 2;
    c->compress = 2;
    c->q_dimension = 256;
    c->n_q = 32;
    c->n_q_semantic = 1;
    c->bins = 2048;
    c->d_model = 512;
    c->num_heads = 8;
    c->num_layers = 8;
    c->context = 250;
    c->dim_feedforward = 2048;
    c->max_period = 10000;
    c->layer_scale = 1;
    c->n_q_used = 8;
}

void mimi_config_tiny(mimi_config *c)
{
    mimi_config_default(c);
    c->dimension = 32;
    c->n_filters = 2;
    c->q_dimension = 16;
    c->n_q = 4;
    c->bins = 32;
    c->d_model = 32;
    c->num_heads = 4;
    c->num_layers = 2;
    c->context = 6;
    c->dim_feedforward = 64;
    c->n_q_used = 4;
}

int mimi_hop_length(const mimi_config *c)
{
    int h = 1;
    for (int i = 0; i < c->n_ratios; i++)
        h *= c->ratios[i];
    return h;
}

int mimi_frame_size(const mimi_config *c)
{
    return (int)lround(c->sample_rate / c->frame_rate);
}

int mimi_downsample_stride(const mimi_config *c)
{
    return mimi_frame_size(c) / mimi_hop_length(c);
}

int mimi_config_check(const mimi_config *c, char *err, size_t errlen)
{
#define NEED(cond, ...) do { if (!(cond)) { mt_set_err(err, errlen, __VA_ARGS__); return -1; } } while (0)
    NEED(c->sample_rate > 0 && c->sample_rate <= 384000, "sample_rate %d out of range", c->sample_rate);
    NEED(c->frame_rate > 0 && c->frame_rate <= c->sample_rate, "frame_rate %g out of range", c->frame_rate);
    NEED(c->n_ratios >= 1 && c->n_ratios <= MIMI_MAX_RATIOS, "seanet.ratios: 1 to %d ratios", MIMI_MAX_RATIOS);
    for (int i = 0; i < c->n_ratios; i++)
        NEED(c->ratios[i] >= 1 && c->ratios[i] <= 64, "seanet.ratios[%d] = %d out of range", i, c->ratios[i]);
    double fs = c->sample_rate / c->frame_rate;
    NEED(fabs(fs - lround(fs)) < 1e-9, "sample_rate / frame_rate (%g) is not an integer", fs);
    int hop = mimi_hop_length(c), frame = mimi_frame_size(c);
    NEED(frame <= 96000, "frame of %d samples is too long", frame);
    NEED(frame % hop == 0, "frame of %d samples is not a multiple of the hop %d", frame, hop);
    int ds = frame / hop;
    NEED(ds >= 1 && ds <= 64, "downsampling stride %d out of range", ds);
    NEED(c->dimension >= 1 && c->dimension <= 8192, "seanet.dimension %d out of range", c->dimension);
    NEED(c->n_filters >= 1 && c->n_filters <= 4096, "seanet.n_filters %d out of range", c->n_filters);
    NEED((long long)c->n_filters << c->n_ratios <= 16384, "seanet: n_filters * 2^ratios too wide");
    NEED(c->n_residual_layers >= 0 && c->n_residual_layers <= 8, "seanet.n_residual_layers %d out of range", c->n_residual_layers);
    NEED(c->kernel_size >= 1 && c->kernel_size <= 64, "seanet.kernel_size %d out of range", c->kernel_size);
    NEED(c->residual_kernel_size >= 1 && c->residual_kernel_size <= 64, "seanet.residual_kernel_size out of range");
    NEED(c->last_kernel_size >= 1 && c->last_kernel_size <= 64, "seanet.last_kernel_size out of range");
    NEED(c->dilation_base >= 1 && c->dilation_base <= 8, "seanet.dilation_base out of range");
    NEED(c->compress >= 1 && c->n_filters % c->compress == 0, "seanet.compress %d must divide n_filters", c->compress);
    NEED(c->q_dimension >= 1 && c->q_dimension <= 8192, "quantizer.dimension out of range");
    NEED(c->n_q_semantic >= 1 && c->n_q > c->n_q_semantic && c->n_q <= 64,
         "quantizer: n_q %d must exceed n_q_semantic %d (at most 64)", c->n_q, c->n_q_semantic);
    NEED(c->bins >= 1 && c->bins <= 65536, "quantizer.bins %d out of range", c->bins);
    NEED(c->d_model == c->dimension, "transformer.d_model %d differs from seanet.dimension %d "
         "(projected transformers are not implemented)", c->d_model, c->dimension);
    NEED(c->num_heads >= 1 && c->d_model % c->num_heads == 0 && (c->d_model / c->num_heads) % 2 == 0,
         "transformer.num_heads %d must divide d_model into even head sizes", c->num_heads);
    NEED(c->num_layers >= 0 && c->num_layers <= 64, "transformer.num_layers out of range");
    NEED(c->context >= 1 && c->context <= 100000, "transformer.context %d out of range", c->context);
    NEED(c->dim_feedforward >= 1 && c->dim_feedforward <= 65536, "transformer.dim_feedforward out of range");
    NEED(c->max_period > 1, "transformer.max_period out of range");
    NEED(c->n_q_used >= c->n_q_semantic && c->n_q_used <= c->n_q,
         "codebooks used %d: between %d and %d", c->n_q_used, c->n_q_semantic, c->n_q);
    return 0;
#undef NEED
}

/* ---- JSON ------------------------------------------------------------ */

static int get_int(json_t *o, const char *sect, const char *key, int *dst, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < -1000000000 || json_integer_value(v) > 1000000000) {
        mt_set_err(err, errlen, "%s.%s: not an integer", sect, key);
        return -1;
    }
    *dst = (int)json_integer_value(v);
    return 0;
}

static int get_num(json_t *o, const char *sect, const char *key, double *dst, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_number(v)) {
        mt_set_err(err, errlen, "%s.%s: not a number", sect, key);
        return -1;
    }
    *dst = json_number_value(v);
    return 0;
}

/* key absent, or equal to want (a string), or refused */
static int want_str(json_t *o, const char *sect, const char *key, const char *want, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_string(v) || strcmp(json_string_value(v), want) != 0) {
        mt_set_err(err, errlen, "%s.%s: only \"%s\" is implemented", sect, key, want);
        return -1;
    }
    return 0;
}

static int want_bool(json_t *o, const char *sect, const char *key, int want, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v) || json_is_true(v) != want) {
        mt_set_err(err, errlen, "%s.%s: only %s is implemented", sect, key, want ? "true" : "false");
        return -1;
    }
    return 0;
}

/* config.seanet, the encoder's and decoder's shape: into c. 0, or -1. */
static int parse_seanet(json_t *s, mimi_config *c, char *err, size_t errlen)
{
    const char *S = "seanet";
    if (!json_is_object(s)) {
        mt_set_err(err, errlen, "seanet: not an object");
        return -1;
    }
    json_t *sc = json_object_get(s, "channels");
    if (sc && !(json_is_integer(sc) && json_integer_value(sc) == 1)) {
        mt_set_err(err, errlen, "seanet.channels: only 1 is implemented");
        return -1;
    }
    if (get_int(s, S, "dimension", &c->dimension, err, errlen) ||
        get_int(s, S, "n_filters", &c->n_filters, err, errlen) ||
        get_int(s, S, "n_residual_layers", &c->n_residual_layers, err, errlen) ||
        get_int(s, S, "kernel_size", &c->kernel_size, err, errlen) ||
        get_int(s, S, "residual_kernel_size", &c->residual_kernel_size, err, errlen) ||
        get_int(s, S, "last_kernel_size", &c->last_kernel_size, err, errlen) ||
        get_int(s, S, "dilation_base", &c->dilation_base, err, errlen) ||
        get_int(s, S, "compress", &c->compress, err, errlen) ||
        want_bool(s, S, "causal", 1, err, errlen) ||
        want_bool(s, S, "true_skip", 1, err, errlen) ||
        want_str(s, S, "activation", "ELU", err, errlen) ||
        want_str(s, S, "norm", "none", err, errlen) ||
        want_str(s, S, "pad_mode", "constant", err, errlen))
        return -1;
    json_t *r = json_object_get(s, "ratios");
    if (r) {
        if (!json_is_array(r) || json_array_size(r) < 1 || json_array_size(r) > MIMI_MAX_RATIOS) {
            mt_set_err(err, errlen, "seanet.ratios: a list of 1 to %d integers", MIMI_MAX_RATIOS);
            return -1;
        }
        c->n_ratios = (int)json_array_size(r);
        for (int i = 0; i < c->n_ratios; i++) {
            json_t *e = json_array_get(r, (size_t)i);
            if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > 64) {
                mt_set_err(err, errlen, "seanet.ratios[%d]: an integer 1..64", i);
                return -1;
            }
            c->ratios[i] = (int)json_integer_value(e);
        }
    }
    json_t *d = json_object_get(s, "disable_norm_outer_blocks");
    (void)d;   /* irrelevant with norm "none" */
    return 0;
}

/* config.quantizer: the split residual VQ. 0, or -1. */
static int parse_quantizer(json_t *q, mimi_config *c, char *err, size_t errlen)
{
    const char *S = "quantizer";
    if (!json_is_object(q)) {
        mt_set_err(err, errlen, "quantizer: not an object");
        return -1;
    }
    int in_dim = c->dimension, out_dim = c->dimension;
    if (get_int(q, S, "dimension", &c->q_dimension, err, errlen) ||
        get_int(q, S, "n_q", &c->n_q, err, errlen) ||
        get_int(q, S, "n_q_semantic", &c->n_q_semantic, err, errlen) ||
        get_int(q, S, "bins", &c->bins, err, errlen) ||
        get_int(q, S, "input_dimension", &in_dim, err, errlen) ||
        get_int(q, S, "output_dimension", &out_dim, err, errlen))
        return -1;
    if (in_dim != c->dimension || out_dim != c->dimension) {
        mt_set_err(err, errlen, "quantizer.input_dimension/output_dimension must equal seanet.dimension %d",
                   c->dimension);
        return -1;
    }
    return 0;
}

/* config.transformer: the transformers each side of the VQ. 0, or -1. */
static int parse_transformer(json_t *t, mimi_config *c, char *err, size_t errlen)
{
    const char *S = "transformer";
    if (!json_is_object(t)) {
        mt_set_err(err, errlen, "transformer: not an object");
        return -1;
    }
    if (get_int(t, S, "d_model", &c->d_model, err, errlen) ||
        get_int(t, S, "num_heads", &c->num_heads, err, errlen) ||
        get_int(t, S, "num_layers", &c->num_layers, err, errlen) ||
        get_int(t, S, "context", &c->context, err, errlen) ||
        get_int(t, S, "dim_feedforward", &c->dim_feedforward, err, errlen) ||
        get_num(t, S, "max_period", &c->max_period, err, errlen) ||
        want_bool(t, S, "causal", 1, err, errlen) ||
        want_bool(t, S, "conv_layout", 1, err, errlen) ||
        want_str(t, S, "gating", "none", err, errlen) ||
        want_str(t, S, "norm", "layer_norm", err, errlen) ||
        want_str(t, S, "positional_embedding", "rope", err, errlen))
        return -1;
    json_t *ls = json_object_get(t, "layer_scale");
    if (ls)
        c->layer_scale = !json_is_null(ls);
    int in_dim = c->d_model;
    if (get_int(t, S, "input_dimension", &in_dim, err, errlen))
        return -1;
    json_t *od = json_object_get(t, "output_dimensions");
    int od_ok = !od || (json_is_array(od) && json_array_size(od) == 1 &&
                        json_is_integer(json_array_get(od, 0)) &&
                        json_integer_value(json_array_get(od, 0)) == c->d_model);
    if (in_dim != c->d_model || !od_ok) {
        mt_set_err(err, errlen, "transformer: input_dimension and output_dimensions must be [d_model] "
                   "(projections are not implemented)");
        return -1;
    }
    json_t *kv = json_object_get(t, "kv_repeat");
    if (kv && !(json_is_integer(kv) && json_integer_value(kv) == 1)) {
        mt_set_err(err, errlen, "transformer.kv_repeat: only 1 is implemented");
        return -1;
    }
    return 0;
}

static int parse_root(json_t *root, mimi_config *c, char *err, size_t errlen)
{
    if (!json_is_object(root)) {
        mt_set_err(err, errlen, "not a JSON object");
        return -1;
    }
    double sr = c->sample_rate;
    if (get_num(root, "config", "sample_rate", &sr, err, errlen) ||
        get_num(root, "config", "frame_rate", &c->frame_rate, err, errlen))
        return -1;
    if (!(sr >= 1 && sr <= 384000 && sr == floor(sr))) {
        mt_set_err(err, errlen, "config.sample_rate: not an integer rate");
        return -1;
    }
    c->sample_rate = (int)sr;
    json_t *ch = json_object_get(root, "channels");
    if (ch && !(json_is_integer(ch) && json_integer_value(ch) == 1)) {
        mt_set_err(err, errlen, "config.channels: only 1 is implemented");
        return -1;
    }
    json_t *s = json_object_get(root, "seanet");
    json_t *q = json_object_get(root, "quantizer");
    json_t *t = json_object_get(root, "transformer");
    if ((s && parse_seanet(s, c, err, errlen)) || (q && parse_quantizer(q, c, err, errlen)) ||
        (t && parse_transformer(t, c, err, errlen)))
        return -1;
    return 0;
}

int mimi_config_parse(const char *json, size_t len, const char *what,
                      mimi_config *c, char *err, size_t errlen)
{
    json_t *root = mt_json_object(json, len, what, err, errlen);
    if (!root)
        return -1;
    char e2[256];
    int rc = parse_root(root, c, e2, sizeof e2);
    json_decref(root);
    if (rc != 0) {
        mt_set_err(err, errlen, "%s: %s", what, e2);
        return -1;
    }
    if (c->n_q_used > c->n_q)
        c->n_q_used = c->n_q;
    if (mimi_config_check(c, e2, sizeof e2) != 0) {
        mt_set_err(err, errlen, "%s: %s", what, e2);
        return -1;
    }
    return 0;
}
