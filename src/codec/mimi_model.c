/* mimi_model.c: Mimi's weights: the layer table built from a
 * configuration (Kyutai's state-dict names and shapes), the checkpoint
 * loader (safetensors, F32/F16/BF16, every tensor checked by name and
 * shape), deterministic synthetic weights, and the session state's layout. */
#include "codec/mimi_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "model/safetensors.h"
#include "util/errmsg.h"
#include "util/mapfile.h"
#include "util/rng.h"

/* ---- building the table ------------------------------------------------ */

typedef struct builder {
    mimi_model *m;
    size_t      floats;   /* arena floats so far (pass 1 counts, pass 2 places) */
    int         place;    /* pass 2: pointers into m->arena */
    int         cap;
} builder;

static float *add_tensor(builder *bd, const char *name, const char *alt, int ndim,
                         int64_t d0, int64_t d1, int64_t d2, int store)
{
    mimi_model *m = bd->m;
    size_t n = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1) * (size_t)(ndim > 2 ? d2 : 1);
    float *dst = NULL;
    if (store) {
        if (bd->place && m->arena)
            dst = m->arena + bd->floats;
        bd->floats += (n + 15) & ~(size_t)15;   /* 64-byte aligned starts */
    }
    if (bd->place) {
        mimi_tensor *t = &m->tab[m->ntab++];
        snprintf(t->name, sizeof t->name, "%s", name);
        snprintf(t->alt, sizeof t->alt, "%s", alt ? alt : "");
        t->ndim = ndim;
        t->shape[0] = d0; t->shape[1] = d1; t->shape[2] = d2;
        t->dst = dst;
        t->stored = store;
        t->optional = !store;
    } else {
        m->ntab++;
    }
    if (store)
        m->params += n;
    return dst;
}

static void conv_tensors(builder *bd, mimi_conv *cv, const char *prefix, int bias)
{
    char n1[112], n2[112];
    const char *kind = cv->tr ? "convtr.convtr" : "conv.conv";
    snprintf(n1, sizeof n1, "%s.%s.weight", prefix, kind);
    if (cv->tr)
        cv->w = add_tensor(bd, n1, NULL, 3, cv->cin, cv->grouped ? 1 : cv->cout, cv->k, 1);
    else
        cv->w = add_tensor(bd, n1, NULL, 3, cv->cout, cv->cin, cv->k, 1);
    cv->b = NULL;
    if (bias) {
        snprintf(n2, sizeof n2, "%s.%s.bias", prefix, kind);
        cv->b = add_tensor(bd, n2, NULL, 1, cv->cout, 0, 0, 1);
    }
}

/* A convolution's geometry and its state slot. */
static void conv_geom(mimi_model *m, mimi_conv *cv, int cin, int cout, int k, int stride,
                      int dil, int tr, int tin)
{
    memset(cv, 0, sizeof *cv);
    cv->cin = cin; cv->cout = cout; cv->k = k; cv->stride = stride; cv->dil = dil;
    cv->tr = tr; cv->tin = tin;
    if (tr) {
        cv->tout = tin * stride;
        cv->ctx = k - stride;
        cv->st = m->state_floats;
        m->state_floats += (size_t)cout * (size_t)cv->ctx;
    } else {
        cv->tout = tin / stride;
        cv->ctx = (k - 1) * dil + 1 - stride;
        cv->st = m->state_floats;
        m->state_floats += (size_t)cin * (size_t)cv->ctx;
    }
    size_t rows = tr ? (size_t)cout * (size_t)k : (size_t)cin * (size_t)k;
    if (!cv->grouped && (int)rows > m->max_rows)
        m->max_rows = (int)rows;
    size_t a = (size_t)cin * (size_t)tin, b = (size_t)cout * (size_t)cv->tout;
    if (a > m->max_act) m->max_act = a;
    if (b > m->max_act) m->max_act = b;
}

static void tlayers(builder *bd, mimi_tlayer *L, const char *which)
{
    mimi_model *m = bd->m;
    const mimi_config *c = &m->c;
    int d = c->d_model, ff = c->dim_feedforward;
    char p[64], n[112], a[112];
    for (int i = 0; i < c->num_layers; i++) {
        mimi_tlayer *l = &L[i];
        snprintf(p, sizeof p, "%s.transformer.layers.%d", which, i);
        snprintf(n, sizeof n, "%s.self_attn.in_projs.0.weight", p);
        snprintf(a, sizeof a, "%s.self_attn.in_proj_weight", p);
        l->in_proj = add_tensor(bd, n, a, 2, 3 * d, d, 0, 1);
        snprintf(n, sizeof n, "%s.self_attn.out_projs.0.weight", p);
        snprintf(a, sizeof a, "%s.self_attn.out_proj.weight", p);
        l->out_proj = add_tensor(bd, n, a, 2, d, d, 0, 1);
        snprintf(n, sizeof n, "%s.norm1.weight", p); l->n1w = add_tensor(bd, n, NULL, 1, d, 0, 0, 1);
        snprintf(n, sizeof n, "%s.norm1.bias", p);   l->n1b = add_tensor(bd, n, NULL, 1, d, 0, 0, 1);
        snprintf(n, sizeof n, "%s.norm2.weight", p); l->n2w = add_tensor(bd, n, NULL, 1, d, 0, 0, 1);
        snprintf(n, sizeof n, "%s.norm2.bias", p);   l->n2b = add_tensor(bd, n, NULL, 1, d, 0, 0, 1);
        snprintf(n, sizeof n, "%s.linear1.weight", p); l->l1 = add_tensor(bd, n, NULL, 2, ff, d, 0, 1);
        snprintf(n, sizeof n, "%s.linear2.weight", p); l->l2 = add_tensor(bd, n, NULL, 2, d, ff, 0, 1);
        l->ls1 = l->ls2 = NULL;
        if (c->layer_scale) {
            snprintf(n, sizeof n, "%s.layer_scale_1.scale", p); l->ls1 = add_tensor(bd, n, NULL, 1, d, 0, 0, 1);
            snprintf(n, sizeof n, "%s.layer_scale_2.scale", p); l->ls2 = add_tensor(bd, n, NULL, 1, d, 0, 0, 1);
        }
        if (!bd->place) {
            l->st_k = m->state_floats;
            m->state_floats += (size_t)c->context * (size_t)d;
            l->st_v = m->state_floats;
            m->state_floats += (size_t)c->context * (size_t)d;
        }
    }
}

static void rvq_tensors(builder *bd, mimi_rvq *q, const char *which, int nq)
{
    const mimi_config *c = &bd->m->c;
    char n[112];
    q->nq = nq;
    snprintf(n, sizeof n, "quantizer.%s.input_proj.weight", which);
    q->in_proj = add_tensor(bd, n, NULL, 3, c->q_dimension, c->dimension, 1, 1);
    snprintf(n, sizeof n, "quantizer.%s.output_proj.weight", which);
    q->out_proj = add_tensor(bd, n, NULL, 3, c->dimension, c->q_dimension, 1, 1);
    for (int i = 0; i < nq; i++) {
        snprintf(n, sizeof n, "quantizer.%s.vq.layers.%d._codebook._initialized", which, i);
        add_tensor(bd, n, NULL, 1, 1, 0, 0, 0);
        snprintf(n, sizeof n, "quantizer.%s.vq.layers.%d._codebook.cluster_usage", which, i);
        q->usage[i] = add_tensor(bd, n, NULL, 1, c->bins, 0, 0, 1);
        snprintf(n, sizeof n, "quantizer.%s.vq.layers.%d._codebook.embedding_sum", which, i);
        q->cb[i] = add_tensor(bd, n, NULL, 2, c->bins, c->q_dimension, 0, 1);
        if (bd->place && bd->m->arena)
            q->norm2[i] = bd->m->arena + bd->floats;
        bd->floats += ((size_t)c->bins + 15) & ~(size_t)15;
    }
}

/* One pass over the architecture; pass 1 (place 0) sizes, pass 2 fills. */
static void walk(builder *bd)
{
    mimi_model *m = bd->m;
    const mimi_config *c = &m->c;
    char p[112];
    m->ntab = 0;
    m->params = 0;
    bd->floats = 0;
    if (!bd->place) {
        m->state_floats = 0;
        m->max_rows = 0;
        m->max_act = 0;
    }
    /* encoder: ratios reversed */
    int idx = 0, nc = 0, mult = 1, t = m->frame, nf = c->n_filters;
#define GEOM(cv, ...) do { if (!bd->place) conv_geom(m, cv, __VA_ARGS__); } while (0)
    /* the graph (mimi_graph.c): emitted once, beside the geometry */
#define OP(call) do { if (!bd->place) call; } while (0)
    mimi_graph *ge = &m->genc, *gd = &m->gdec;
    OP(mimi_graph_begin(ge, MIMI_BUF_IO));
    GEOM(&m->enc[nc], 1, nf, c->kernel_size, 1, 1, 0, t);
    snprintf(p, sizeof p, "encoder.model.%d", idx++);
    OP(mimi_graph_conv(ge, &m->enc[nc], MIMI_ST_SEANET, 0, 0));
    conv_tensors(bd, &m->enc[nc++], p, 1);
    for (int r = c->n_ratios - 1; r >= 0; r--) {
        int ratio = c->ratios[r], ch = mult * nf, hid = ch / c->compress;
        for (int j = 0, dil = 1; j < c->n_residual_layers; j++, dil *= c->dilation_base) {
            GEOM(&m->enc[nc], ch, hid, c->residual_kernel_size, 1, dil, 0, t);
            snprintf(p, sizeof p, "encoder.model.%d.block.1", idx);
            conv_tensors(bd, &m->enc[nc++], p, 1);
            GEOM(&m->enc[nc], hid, ch, 1, 1, 1, 0, t);
            snprintf(p, sizeof p, "encoder.model.%d.block.3", idx++);
            OP(mimi_graph_residual(ge, &m->enc[nc - 1], &m->enc[nc]));
            conv_tensors(bd, &m->enc[nc++], p, 1);
        }
        idx++;   /* ELU */
        GEOM(&m->enc[nc], ch, 2 * ch, 2 * ratio, ratio, 1, 0, t);
        snprintf(p, sizeof p, "encoder.model.%d", idx++);
        OP(mimi_graph_conv(ge, &m->enc[nc], MIMI_ST_SEANET, 1, 0));
        conv_tensors(bd, &m->enc[nc++], p, 1);
        t /= ratio;
        mult *= 2;
    }
    idx++;   /* ELU */
    GEOM(&m->enc[nc], mult * nf, c->dimension, c->last_kernel_size, 1, 1, 0, t);
    snprintf(p, sizeof p, "encoder.model.%d", idx++);
    OP(mimi_graph_conv(ge, &m->enc[nc], MIMI_ST_SEANET, 1, 0));
    conv_tensors(bd, &m->enc[nc++], p, 1);
    m->n_enc = nc;

    int ds = m->enc_steps;
    tlayers(bd, m->etr, "encoder_transformer");
    OP(mimi_graph_transformer(ge, 0));
    GEOM(&m->down, c->dimension, c->dimension, 2 * ds, ds, 1, 0, ds);
    if (!bd->place)
        m->down.replicate = 1;
    conv_tensors(bd, &m->down, "downsample.conv", 0);
    OP(mimi_graph_conv(ge, &m->down, MIMI_ST_RESAMPLE, 0, 0));

    rvq_tensors(bd, &m->first, "rvq_first", c->n_q_semantic);
    rvq_tensors(bd, &m->rest, "rvq_rest", c->n_q - c->n_q_semantic);
    OP(mimi_graph_quantize(ge));
    OP(mimi_graph_begin(gd, 0));
    OP(mimi_graph_dequantize(gd));

    GEOM(&m->up, c->dimension, c->dimension, 2 * ds, ds, 1, 1, 1);
    if (!bd->place)
        m->up.grouped = 1;
    conv_tensors(bd, &m->up, "upsample.convtr", 0);
    OP(mimi_graph_conv(gd, &m->up, MIMI_ST_RESAMPLE, 0, 0));
    tlayers(bd, m->dtr, "decoder_transformer");
    OP(mimi_graph_transformer(gd, 1));

    /* decoder: ratios in order */
    idx = 0; nc = 0; t = ds; mult = 1 << c->n_ratios;
    GEOM(&m->dec[nc], c->dimension, mult * nf, c->kernel_size, 1, 1, 0, t);
    snprintf(p, sizeof p, "decoder.model.%d", idx++);
    OP(mimi_graph_conv(gd, &m->dec[nc], MIMI_ST_SEANET, 0, 0));
    conv_tensors(bd, &m->dec[nc++], p, 1);
    for (int r = 0; r < c->n_ratios; r++) {
        int ratio = c->ratios[r], ch = mult * nf / 2, hid = ch / c->compress;
        idx++;   /* ELU */
        GEOM(&m->dec[nc], mult * nf, ch, 2 * ratio, ratio, 1, 1, t);
        snprintf(p, sizeof p, "decoder.model.%d", idx++);
        OP(mimi_graph_conv(gd, &m->dec[nc], MIMI_ST_SEANET, 1, 0));
        conv_tensors(bd, &m->dec[nc++], p, 1);
        t *= ratio;
        for (int j = 0, dil = 1; j < c->n_residual_layers; j++, dil *= c->dilation_base) {
            GEOM(&m->dec[nc], ch, hid, c->residual_kernel_size, 1, dil, 0, t);
            snprintf(p, sizeof p, "decoder.model.%d.block.1", idx);
            conv_tensors(bd, &m->dec[nc++], p, 1);
            GEOM(&m->dec[nc], hid, ch, 1, 1, 1, 0, t);
            snprintf(p, sizeof p, "decoder.model.%d.block.3", idx++);
            OP(mimi_graph_residual(gd, &m->dec[nc - 1], &m->dec[nc]));
            conv_tensors(bd, &m->dec[nc++], p, 1);
        }
        mult /= 2;
    }
    idx++;   /* ELU */
    GEOM(&m->dec[nc], nf, 1, c->last_kernel_size, 1, 1, 0, t);
    snprintf(p, sizeof p, "decoder.model.%d", idx++);
    OP(mimi_graph_conv(gd, &m->dec[nc], MIMI_ST_SEANET, 1, 1));
    conv_tensors(bd, &m->dec[nc++], p, 1);
    m->n_dec = nc;
#undef OP
#undef GEOM
}

int mimi_model_build(const mimi_config *c, int with_weights, mimi_model **out, char *err, size_t errlen)
{
    *out = NULL;
    if (mimi_config_check(c, err, errlen) != 0)
        return -1;
    int nconv = 2 + c->n_ratios * (1 + 2 * c->n_residual_layers);
    if (nconv > MIMI_MAX_CONVS) {
        mt_set_err(err, errlen, "too many convolutions (%d)", nconv);
        return -1;
    }
    mimi_model *m = mt_calloc_or_err(1, sizeof *m, err, errlen, "mimi model");
    if (!m)
        return -1;
    m->c = *c;
    m->frame = mimi_frame_size(c);
    m->enc_steps = mimi_downsample_stride(c);
    m->etr = calloc((size_t)c->num_layers + 1, sizeof *m->etr);
    m->dtr = calloc((size_t)c->num_layers + 1, sizeof *m->dtr);
    if (!m->etr || !m->dtr) {
        mt_set_err(err, errlen, "mimi model: out of memory");
        mimi_free(m);
        return -1;
    }
    builder bd = { .m = m };
    walk(&bd);
    m->arena_floats = bd.floats;
    m->tab = calloc((size_t)m->ntab, sizeof *m->tab);
    if (!m->tab) {
        mt_set_err(err, errlen, "mimi model: out of memory");
        mimi_free(m);
        return -1;
    }
    bd.place = 1;
    walk(&bd);
    if (with_weights && mimi_model_alloc(m, err, errlen) != 0) {
        mimi_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

/* n bytes, zeroed, 64-byte aligned; from 2 MiB up on 2 MiB pages where
 * the kernel gives them on request (transparent huge pages in "madvise"
 * mode, Debian's default). Every frame streams the weights (hundreds of
 * MiB) and a session's rings through the GEMMs and the attention, and that
 * reads faster with a TLB entry per 2 MiB than per 4 KiB. Only the whole
 * 2 MiB pages inside the buffer are advised: nothing is rounded up, so
 * the bytes counted are the bytes held. Freed with free(). */
void *mimi_alloc_streamed(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    void *p = NULL;
    if (posix_memalign(&p, n >= huge ? huge : 64, n ? n : 1) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (n >= huge && madvise(p, n / huge * huge, MADV_HUGEPAGE) != 0) {
        /* advice only: refused (no THP, or "never"), 4 KiB pages work */
    }
#endif
    memset(p, 0, n ? n : 1);
    return p;
}

int mimi_model_alloc(mimi_model *m, char *err, size_t errlen)
{
    if (m->arena_floats > ((size_t)1 << 31)) {
        mt_set_err(err, errlen, "mimi: %zu weights is too many", m->arena_floats);
        return -1;
    }
    if (!(m->arena = mimi_alloc_streamed(m->arena_floats * sizeof(float) + 64))) {
        mt_set_err(err, errlen, "mimi model: out of memory (%zu weights)", m->arena_floats);
        return -1;
    }
    builder bd = { .m = m, .place = 1 };
    walk(&bd);   /* again, now with the weights' addresses */
    return 0;
}

void mimi_model_finish(mimi_model *m)
{
    const mimi_config *c = &m->c;
    mimi_rvq *qs[2] = { &m->first, &m->rest };
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < qs[r]->nq; i++) {
            float *cb = qs[r]->cb[i];
            for (int e = 0; e < c->bins; e++) {
                float u = qs[r]->usage[i][e];
                float den = u > 1e-5f ? u : 1e-5f;   /* clamp(min=epsilon) */
                double n2 = 0;
                for (int d = 0; d < c->q_dimension; d++) {
                    float v = cb[(size_t)e * c->q_dimension + d] / den;
                    cb[(size_t)e * c->q_dimension + d] = v;
                    n2 += (double)v * v;
                }
                qs[r]->norm2[i][e] = (float)n2;
            }
        }
}

void mimi_free(mimi_model *m)
{
    if (!m)
        return;
    free(m->arena);
    free(m->tab);
    free(m->etr);
    free(m->dtr);
    free(m);
}

const mimi_config *mimi_model_config(const mimi_model *m) { return &m->c; }
size_t mimi_param_count(const mimi_model *m) { return m->params; }

int mimi_set_codebooks(mimi_model *m, int n, char *err, size_t errlen)
{
    if (n < m->c.n_q_semantic || n > m->c.n_q) {
        mt_set_err(err, errlen, "codebooks: %d is outside %d..%d", n, m->c.n_q_semantic, m->c.n_q);
        return -1;
    }
    m->c.n_q_used = n;
    return 0;
}

/* ---- synthetic ----------------------------------------------------------- */

/* Weights uniform with variance 1/fan_in, so activations keep their size
 * through the stack; norms 1 and 0, layer scales 0.1, biases of variance
 * 1e-4; codebooks of variance 1 with usage 1. Deterministic in seed.
 * Uniform rather than normal draws: 96 M of them take a fraction of a
 * second. */
/* uniform on [-sd sqrt 3, sd sqrt 3): standard deviation sd */
static inline float unif(mt_rng *r, double sd)
{
    return (float)(sd * 1.7320508075688772 * (2.0 * (double)(mt_rng_next(r) >> 11) * 0x1p-53 - 1.0));
}

int mimi_synthetic(const mimi_config *c, uint64_t seed, mimi_model **out, char *err, size_t errlen)
{
    mimi_model *m;
    if (mimi_model_build(c, 1, &m, err, errlen) != 0)
        return -1;
    mt_rng r;
    mt_rng_seed(&r, seed);
    for (int i = 0; i < m->ntab; i++) {
        mimi_tensor *t = &m->tab[i];
        if (!t->dst)
            continue;
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim > 1 ? t->shape[1] : 1) *
                   (size_t)(t->ndim > 2 ? t->shape[2] : 1);
        const char *nm = t->name;
        size_t L = strlen(nm);
        int ends_w = L > 7 && strcmp(nm + L - 7, ".weight") == 0;
        if (strstr(nm, ".norm") && ends_w) {
            for (size_t k = 0; k < n; k++) t->dst[k] = 1.0f;
        } else if (strstr(nm, "layer_scale")) {
            for (size_t k = 0; k < n; k++) t->dst[k] = 0.1f;
        } else if (strstr(nm, "cluster_usage")) {
            for (size_t k = 0; k < n; k++) t->dst[k] = 1.0f;
        } else if (strstr(nm, "embedding_sum")) {
            for (size_t k = 0; k < n; k++) t->dst[k] = unif(&r, 1.0);
        } else if (L > 5 && strcmp(nm + L - 5, ".bias") == 0) {
            for (size_t k = 0; k < n; k++)
                t->dst[k] = strstr(nm, ".norm") ? 0.0f : unif(&r, 0.01);
        } else {
            /* fan_in: conv [cout][cin][k] -> cin*k; transposed [cin][cout][k]
             * -> cin*k/stride contributions per output; linear [out][in] -> in */
            double fan = (double)n / (double)t->shape[0];
            if (strstr(nm, "convtr"))
                fan = (double)t->shape[0] * 2;
            double sd = 1.0 / sqrt(fan > 1 ? fan : 1);
            for (size_t k = 0; k < n; k++) t->dst[k] = unif(&r, sd);
        }
    }
    mimi_model_finish(m);
    *out = m;
    return 0;
}

/* ---- loading --------------------------------------------------------------- */

static void shape_str(char *buf, size_t n, int ndim, const int64_t *s)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)s[i]);
}

/* The "mimi_config" entry of the header's __metadata__, if any (malloc'd). */
static char *metadata_config(const uint8_t *buf, size_t len)
{
    if (len < 8)
        return NULL;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)buf[i] << (8 * i);
    if (hl > len - 8)
        return NULL;
    json_error_t je;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hl, 0, &je);
    if (!root)
        return NULL;
    char *out = NULL;
    json_t *md = json_object_get(root, "__metadata__");
    json_t *s = md ? json_object_get(md, "mimi_config") : NULL;
    if (s && json_is_string(s))
        out = strdup(json_string_value(s));
    json_decref(root);
    return out;
}

/* Every checkpoint tensor is one of ours, every one of ours (not
 * optional) is there with its shape and a float dtype. */
static int check_tensors(const mimi_model *m, const mt_st_file *sf, const char *what, char *err, size_t errlen)
{
    char got[96], want[96];
    for (int i = 0; i < sf->n; i++) {
        const mt_st_tensor *st = &sf->t[i];
        int found = 0;
        for (int j = 0; j < m->ntab && !found; j++)
            found = strcmp(st->name, m->tab[j].name) == 0 ||
                    (m->tab[j].alt[0] && strcmp(st->name, m->tab[j].alt) == 0);
        if (!found) {
            mt_set_err(err, errlen, "%s: tensor '%s': not part of Mimi with this configuration", what,
                       st->name);
            return -1;
        }
    }
    for (int j = 0; j < m->ntab; j++) {
        const mimi_tensor *t = &m->tab[j];
        const mt_st_tensor *st = mt_st_find(sf, t->name);
        if (!st && t->alt[0])
            st = mt_st_find(sf, t->alt);
        shape_str(want, sizeof want, t->ndim, t->shape);
        if (!st) {
            if (t->optional)
                continue;
            mt_set_err(err, errlen, "%s: tensor '%s': missing (expected shape [%s])", what, t->name, want);
            return -1;
        }
        int ok = st->ndim == t->ndim;
        for (int d = 0; ok && d < t->ndim; d++)
            ok = st->shape[d] == (uint64_t)t->shape[d];
        if (!ok) {
            mt_st_shape_str(st, got, sizeof got);
            mt_set_err(err, errlen, "%s: tensor '%s': shape [%s], expected [%s]", what, st->name, got, want);
            return -1;
        }
        if (mt_st_check_float(st, what, err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* The weights in, converted to fp32, all finite. */
static int fill_from(mimi_model *m, const mt_st_file *sf, const char *what, char *err, size_t errlen)
{
    for (int j = 0; j < m->ntab; j++) {
        mimi_tensor *t = &m->tab[j];
        const mt_st_tensor *st = mt_st_find(sf, t->name);
        if (!st && t->alt[0])
            st = mt_st_find(sf, t->alt);
        if (!st || !t->dst)
            continue;
        if (mt_st_to_f32(st, t->dst) != 0) {
            mt_set_err(err, errlen, "%s: tensor '%s': cannot convert", what, st->name);
            return -1;
        }
        size_t n = (size_t)st->numel;
        for (size_t k = 0; k < n; k++)
            if (!isfinite(t->dst[k])) {
                mt_set_err(err, errlen, "%s: tensor '%s': element %zu is not finite", what, t->name, k);
                return -1;
            }
    }
    return 0;
}

int mimi_load_mem(const void *buf, size_t len, const char *what, const mimi_config *cin,
                  mimi_model **out, char *err, size_t errlen)
{
    *out = NULL;
    mt_st_file sf;
    if (mt_st_parse(buf, len, what, &sf, err, errlen) != 0)
        return -1;
    mimi_config c;
    if (cin) {
        c = *cin;
    } else {
        mimi_config_default(&c);
        char *js = metadata_config(buf, len);
        if (js) {
            char w2[300];
            snprintf(w2, sizeof w2, "%s: metadata mimi_config", what);
            int rc = mimi_config_parse(js, strlen(js), w2, &c, err, errlen);
            free(js);
            if (rc != 0) {
                mt_st_free(&sf);
                return -1;
            }
        }
    }
    /* the tensors' names and shapes are checked before the weights are
     * allocated, so the allocation is bounded by the file's size */
    mimi_model *m;
    char e2[256];
    if (mimi_model_build(&c, 0, &m, e2, sizeof e2) != 0) {
        mt_set_err(err, errlen, "%s: %s", what, e2);
        mt_st_free(&sf);
        return -1;
    }
    int rc = check_tensors(m, &sf, what, err, errlen);
    if (rc == 0 && mimi_model_alloc(m, e2, sizeof e2) != 0) {
        mt_set_err(err, errlen, "%s: %s", what, e2);
        rc = -1;
    }
    if (rc == 0)
        rc = fill_from(m, &sf, what, err, errlen);
    mt_st_free(&sf);
    if (rc != 0) {
        mimi_free(m);
        return -1;
    }
    mimi_model_finish(m);
    *out = m;
    return 0;
}

static char *read_text(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *b = malloc(max + 1);
    size_t n = b ? fread(b, 1, max + 1, f) : 0;
    int bad = !b || ferror(f) || n > max;
    fclose(f);
    if (bad) {
        mt_set_err(err, errlen, "%s: %s", path, !b ? "out of memory" : n > max ? "too large" : "read error");
        free(b);
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* path is a directory: its model.safetensors, else its only *.safetensors. */
static int find_weights(const char *dir, char *out, size_t outlen, char *err, size_t errlen)
{
    struct stat sb;
    snprintf(out, outlen, "%s/model.safetensors", dir);
    if (stat(out, &sb) == 0)
        return 0;
    DIR *d = opendir(dir);
    if (!d) {
        mt_set_err(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t L = strlen(e->d_name);
        if (L > 12 && strcmp(e->d_name + L - 12, ".safetensors") == 0) {
            if (n++ == 0)
                snprintf(out, outlen, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    if (n != 1) {
        mt_set_err(err, errlen, "%s: %s", dir, n ? "several .safetensors files and no model.safetensors"
                                                 : "no .safetensors file");
        return -1;
    }
    return 0;
}

/* A config.json at path into *c (over the published defaults). 0, or -1. */
static int config_file(const char *path, mimi_config *c, char *err, size_t errlen)
{
    mimi_config_default(c);
    size_t len;
    char *txt = read_text(path, 1 << 20, &len, err, errlen);
    if (!txt)
        return -1;
    int rc = mimi_config_parse(txt, len, path, c, err, errlen);
    free(txt);
    return rc != 0 ? -1 : 0;
}

/* synthetic:NAME[:seed=N]: the preset's config (unless have_c) with
 * random weights, or its shape alone. 0, or -1. */
static int load_synthetic(const char *spec, mimi_config *c, int have_c, int shape_only,
                          mimi_model **m, char *err, size_t errlen)
{
    const char *name = spec + 10;
    uint64_t seed = 1;
    const char *colon = strchr(name, ':');
    size_t nl = colon ? (size_t)(colon - name) : strlen(name);
    if (colon) {
        char *end;
        if (strncmp(colon, ":seed=", 6) != 0 || !colon[6]) {
            mt_set_err(err, errlen, "%s: expected synthetic:NAME[:seed=N]", spec);
            return -1;
        }
        errno = 0;
        seed = strtoull(colon + 6, &end, 10);
        if (*end || errno) {
            mt_set_err(err, errlen, "%s: bad seed", spec);
            return -1;
        }
    }
    if (!have_c) {
        if (nl == 4 && strncmp(name, "mimi", 4) == 0)
            mimi_config_default(c);
        else if (nl == 9 && strncmp(name, "mimi-tiny", 9) == 0)
            mimi_config_tiny(c);
        else {
            mt_set_err(err, errlen, "%s: unknown synthetic codec (synthetic:mimi, synthetic:mimi-tiny)",
                       spec);
            return -1;
        }
    }
    return shape_only ? mimi_model_build(c, 0, m, err, errlen)
                      : mimi_synthetic(c, seed, m, err, errlen);
}

/* The checkpoint file wpath, mapped: its weights (with *c when have_c,
 * else its own config), or with shape_only the config alone (have_c's, the
 * file's metadata, or the published one). 0, or -1. */
static int load_checkpoint(const char *wpath, mimi_config *c, int have_c, int shape_only,
                           mimi_model **m, char *err, size_t errlen)
{
    mt_mapfile f;
    if (mt_mapfile_open(wpath, &f, err, errlen))
        return -1;
    int rc;
    if (shape_only) {
        if (!have_c) {
            mimi_config_default(c);
            char *js = f.len ? metadata_config(f.data, f.len) : NULL;
            rc = js ? mimi_config_parse(js, strlen(js), wpath, c, err, errlen) : 0;
            free(js);
        } else {
            rc = 0;
        }
        if (rc == 0)
            rc = mimi_model_build(c, 0, m, err, errlen);
    } else {
        rc = mimi_load_mem(f.data, f.len, wpath, have_c ? c : NULL, m, err, errlen);
    }
    mt_mapfile_close(&f);
    return rc != 0 ? -1 : 0;
}

static int load_any(const char *spec, const char *config_path, int n_q_used, int shape_only,
                    mimi_model **out, char *err, size_t errlen)
{
    *out = NULL;
    mimi_config c;
    int have_c = 0;
    if (!spec || !*spec) {
        mt_set_err(err, errlen, "empty codec spec (a checkpoint, a directory or synthetic:mimi)");
        return -1;
    }
    if (config_path) {
        if (config_file(config_path, &c, err, errlen) != 0)
            return -1;
        have_c = 1;
    }
    mimi_model *m = NULL;
    if (strncmp(spec, "synthetic:", 10) == 0) {
        if (load_synthetic(spec, &c, have_c, shape_only, &m, err, errlen) != 0)
            return -1;
    } else {
        char wpath[4096];
        struct stat sb;
        if (stat(spec, &sb) != 0) {
            mt_set_err(err, errlen, "%s: %s", spec, strerror(errno));
            return -1;
        }
        if (S_ISDIR(sb.st_mode)) {
            if (find_weights(spec, wpath, sizeof wpath, err, errlen) != 0)
                return -1;
            char cpath[4096];
            snprintf(cpath, sizeof cpath, "%s/config.json", spec);
            if (!have_c && stat(cpath, &sb) == 0) {
                if (config_file(cpath, &c, err, errlen) != 0)
                    return -1;
                have_c = 1;
            }
        } else {
            snprintf(wpath, sizeof wpath, "%s", spec);
        }
        if (load_checkpoint(wpath, &c, have_c, shape_only, &m, err, errlen) != 0)
            return -1;
    }
    int nq = n_q_used > 0 ? n_q_used : (have_c ? c.n_q_used : m->c.n_q_used);
    if (nq > m->c.n_q && n_q_used <= 0)
        nq = m->c.n_q;
    if (mimi_set_codebooks(m, nq, err, errlen) != 0) {
        mimi_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

int mimi_load(const char *spec, const char *config_path, int n_q_used, mimi_model **out,
              char *err, size_t errlen)
{
    return load_any(spec, config_path, n_q_used, 0, out, err, errlen);
}

int mimi_load_shape(const char *spec, const char *config_path, int n_q_used, mimi_model **out,
                    char *err, size_t errlen)
{
    return load_any(spec, config_path, n_q_used, 1, out, err, errlen);
}

/* ---- session state --------------------------------------------------------- */

size_t mimi_state_bytes(const mimi_model *m)
{
    return sizeof(mimi_state) + m->state_floats * sizeof(float);
}

mimi_state *mimi_state_new(const mimi_model *m, char *err, size_t errlen)
{
    mimi_state *s = mimi_alloc_streamed(mimi_state_bytes(m));
    if (!s) {
        mt_set_err(err, errlen, "mimi session state: out of memory (%zu bytes)", mimi_state_bytes(m));
        return NULL;
    }
    s->down_first = 1;
    return s;
}

void mimi_state_reset(const mimi_model *m, mimi_state *s)
{
    memset(s, 0, mimi_state_bytes(m));
    s->down_first = 1;
}

void mimi_state_free(mimi_state *s) { free(s); }
int64_t mimi_state_frames_encoded(const mimi_state *s) { return s->enc_frames; }
int64_t mimi_state_frames_decoded(const mimi_state *s) { return s->dec_frames; }
