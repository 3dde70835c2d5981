/* kyutai.c: Kyutai's LM frame for a batch of sessions (kyutai.h): the
 * delayed token streams, the temporal step on the decoder, the depformer,
 * Kyutai's sampling with a generator per session. */
#include "util/errmsg.h"
#include "util/clock.h"
#include "util/rng.h"
#include "speech/kyutai.h"
#include "decode/depformer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { UNGENERATED = -2 };

struct mt_kyutai_sess {
    int64_t  offset;       /* frames stepped */
    int      nk, ct;       /* streams (1 + n_q), ring length (max_delay + 2) */
    int32_t *ring;         /* [nk, ct] tokens by frame mod ct */
    mt_rng   rng;
    mt_kyutai_sampling smp;
};

struct mt_kyutai_gen {
    const mt_kyutai_lm *lm;
    mt_decoder   *dec;
    mt_depformer *df;      /* NULL when dep_q is 0 */
    int     maxb, max_delay;
    float   *x;            /* [maxb, dim]   summed input embeddings */
    float   *h;            /* [maxb, dim]   out_norm(temporal output) */
    float   *tlog;         /* [maxb, text_card_out] */
    float   *dlog;         /* [maxb, card] */
    int32_t *in;           /* [maxb, 1 + n_q] this frame's input tokens */
    int32_t *tok;          /* [maxb] the step's sampled tokens */
    int32_t *text;         /* [maxb] the frame's text tokens */
    int32_t *audio;        /* [maxb, dep_q] */
    int     *idx;          /* [max(text_card_out, card)] top-k candidates */
    /* MT_CUDA_DEVICE_SAMPLING=1 with a CUDA depformer: the frame's codebook
     * steps sampled on the device (mt_depformer_frame), one sync a frame */
    int      dev_sample;
    float   *s_temp;       /* [maxb] */
    int     *s_topk, *s_greedy; /* [maxb] */
    uint64_t *s_rng;       /* [maxb, 4] the sessions' generator states */
    mt_kyutai_times times;
};

void mt_kyutai_sampling_default(mt_kyutai_sampling *s)
{
    s->greedy = 0;
    s->temp = 0.8f;
    s->temp_text = 0.7f;
    s->top_k = 250;
    s->top_k_text = 25;
}

void mt_kyutai_gen_free(mt_kyutai_gen *g)
{
    if (!g)
        return;
    mt_depformer_free(g->df);
    free(g->x);
    free(g->h);
    free(g->tlog);
    free(g->dlog);
    free(g->in);
    free(g->tok);
    free(g->text);
    free(g->audio);
    free(g->idx);
    free(g->s_temp);
    free(g->s_topk);
    free(g->s_greedy);
    free(g->s_rng);
    free(g);
}

int mt_kyutai_gen_create(const mt_kyutai_lm *lm, mt_decoder *dec, int max_batch,
                         mt_kyutai_gen **out, char *err, size_t errlen)
{
    return mt_kyutai_gen_create_with(lm, dec, max_batch, NULL, out, err, errlen);
}

const char *mt_kyutai_gen_dep_where(const mt_kyutai_gen *g)
{
    return !g->df ? "none" : mt_depformer_is_cuda(g->df) ? "cuda"
                          : mt_depformer_is_sim(g->df) ? "sim" : "host";
}

int mt_kyutai_gen_create_with(const mt_kyutai_lm *lm, mt_decoder *dec, int max_batch,
                              mt_depformer *df, mt_kyutai_gen **out, char *err,
                              size_t errlen)
{
    const mt_kyutai_config *kc = &lm->kc;
    *out = NULL;
    if (df && kc->dep_q == 0) {
        mt_depformer_free(df);
        mt_set_err(err, errlen, "kyutai: a depformer given for a model without one (dep_q 0)");
        return -1;
    }
    if (lm->shape_only) {
        mt_depformer_free(df);
        mt_set_err(err, errlen, "kyutai: %s is shape-only (no host weights for the streams)",
                 lm->temporal->cfg.name);
        return -1;
    }
    if (mt_decoder_model(dec)->cfg.hidden != kc->dim ||
        mt_decoder_model(dec)->cfg.vocab != kc->text_card_out) {
        mt_set_err(err, errlen, "kyutai: the decoder runs another model (hidden %d, vocab %d; "
                 "want %d, %d)", mt_decoder_model(dec)->cfg.hidden,
                 mt_decoder_model(dec)->cfg.vocab, kc->dim, kc->text_card_out);
        mt_depformer_free(df);
        return -1;
    }
    mt_kyutai_gen *g = calloc(1, sizeof *g);
    if (!g) {
        mt_depformer_free(df);
        mt_set_err(err, errlen, "kyutai: out of memory");
        return -1;
    }
    g->df = df;
    g->lm = lm;
    g->dec = dec;
    g->maxb = max_batch;
    for (int k = 0; k <= kc->n_q; k++)
        g->max_delay = kc->delays[k] > g->max_delay ? kc->delays[k] : g->max_delay;
    size_t R = (size_t)max_batch, D = (size_t)kc->dim;
    size_t V = (size_t)(kc->text_card_out > kc->card ? kc->text_card_out : kc->card);
    g->x = malloc(R * D * sizeof(float));
    g->h = malloc(R * D * sizeof(float));
    g->tlog = malloc(R * (size_t)kc->text_card_out * sizeof(float));
    g->dlog = malloc(R * (size_t)kc->card * sizeof(float));
    g->in = malloc(R * (size_t)(1 + kc->n_q) * sizeof(int32_t));
    g->tok = malloc(R * sizeof(int32_t));
    g->text = malloc(R * sizeof(int32_t));
    g->audio = malloc(R * (size_t)(kc->dep_q + 1) * sizeof(int32_t));
    g->idx = malloc(V * sizeof(int));
    const char *ds = getenv("MT_CUDA_DEVICE_SAMPLING");
    if (df && mt_depformer_can_frame(df) && ds && !strcmp(ds, "1")) {
        g->dev_sample = 1;
        g->s_temp = malloc(R * sizeof(float));
        g->s_topk = malloc(R * sizeof(int));
        g->s_greedy = malloc(R * sizeof(int));
        g->s_rng = malloc(R * 4 * sizeof(uint64_t));
        if (!g->s_temp || !g->s_topk || !g->s_greedy || !g->s_rng) {
            free(g->idx);   /* so the check below says out of memory */
            g->idx = NULL;
        }
    }
    if (!g->x || !g->h || !g->tlog || !g->dlog || !g->in || !g->tok || !g->text || !g->audio || !g->idx) {
        mt_kyutai_gen_free(g);
        mt_set_err(err, errlen, "kyutai: out of memory");
        return -1;
    }
    /* the depformer where the decoder runs: a CUDA decoder's on the GPU,
     * else the host's */
    int rc = 0;
    if (kc->dep_q > 0 && !g->df)
        rc = !strcmp(mt_decoder_backend_name(dec), "cuda")
                 ? mt_depformer_create_cuda(lm, max_batch, &g->df, err, errlen)
                 : mt_depformer_create(lm, max_batch, &g->df, err, errlen);
    if (rc) {
        mt_kyutai_gen_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

int mt_kyutai_sess_open(const mt_kyutai_gen *g, uint64_t seed, const mt_kyutai_sampling *smp,
                        mt_kyutai_sess **out, char *err, size_t errlen)
{
    *out = NULL;
    mt_kyutai_sess *s = calloc(1, sizeof *s);
    if (s) {
        s->nk = 1 + g->lm->kc.n_q;
        s->ct = g->max_delay + 2;
        s->ring = malloc((size_t)s->nk * s->ct * sizeof(int32_t));
    }
    if (!s || !s->ring) {
        mt_kyutai_sess_close(s);
        mt_set_err(err, errlen, "kyutai: out of memory");
        return -1;
    }
    for (int i = 0; i < s->nk * s->ct; i++)
        s->ring[i] = UNGENERATED;
    mt_rng_seed(&s->rng, seed);
    if (smp)
        s->smp = *smp;
    else
        mt_kyutai_sampling_default(&s->smp);
    *out = s;
    return 0;
}

void mt_kyutai_sess_close(mt_kyutai_sess *s)
{
    if (!s)
        return;
    free(s->ring);
    free(s);
}

int64_t mt_kyutai_sess_offset(const mt_kyutai_sess *s) { return s->offset; }

void mt_kyutai_last_times(const mt_kyutai_gen *g, mt_kyutai_times *t) { *t = g->times; }

/* ---- sampling ---------------------------------------------------------------- */

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The top k of n logits by a min-heap of their indices (smallest logit at
 * the root; ties: the larger index counts as smaller, so the lower index
 * is kept, as torch.topk's stable order would): idx [k]. */
static int worse(const float *l, int a, int b)
{
    return l[a] < l[b] || (l[a] == l[b] && a > b);
}

static void sift_down(const float *l, int *h, int k, int i)
{
    for (;;) {
        int c = 2 * i + 1;
        if (c >= k)
            return;
        if (c + 1 < k && worse(l, h[c + 1], h[c]))
            c++;
        if (!worse(l, h[c], h[i]))
            return;
        int t = h[c];
        h[c] = h[i];
        h[i] = t;
        i = c;
    }
}

static void top_k(const float *l, int n, int k, int *h)
{
    for (int i = 0; i < k; i++)
        h[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(l, h, k, i);
    for (int i = k; i < n; i++)
        if (worse(l, h[0], i)) {
            h[0] = i;
            sift_down(l, h, k, 0);
        }
}

/* Kyutai's sample_token on one row of n logits: softmax(l / temp), its top
 * k, one draw. The softmax is taken over the top k only: the draw
 * (argmax p_i / E_i) does not change when every p_i is scaled by one
 * factor, and the order of p is the order of the logits. */
static int32_t sample(mt_kyutai_gen *g, mt_kyutai_sess *s, const float *logits, int n,
                      float temp, int top_k_n)
{
    int best = 0;
    if (s->smp.greedy || !(temp > 0.0f)) {
        for (int i = 1; i < n; i++)
            if (logits[i] > logits[best])
                best = i;
        return best;
    }
    int k = top_k_n > 0 && top_k_n < n ? top_k_n : n;
    top_k(logits, n, k, g->idx);
    float m = -INFINITY;
    for (int j = 0; j < k; j++)
        m = logits[g->idx[j]] > m ? logits[g->idx[j]] : m;
    /* the draws in the order of the candidates' indices, so that the
     * generator's stream does not depend on the heap's order */
    qsort(g->idx, (size_t)k, sizeof *g->idx, cmp_int);
    double bestv = -1;
    for (int j = 0; j < k; j++) {
        double p = exp(((double)logits[g->idx[j]] - m) / temp);
        double e = -log(1.0 - mt_rng_uniform(&s->rng));
        double v = p / (e > 0 ? e : 1e-300);
        if (v > bestv) {
            bestv = v;
            best = g->idx[j];
        }
    }
    return best;
}

/* ---- the frame --------------------------------------------------------------- */

/* The depformer's dep_q steps with their sampling on the device: the same
 * draws as sample() from the same generator states, which come back
 * advanced; on a failure no session's state changes. */
static int dep_frame_device(mt_kyutai_gen *g, mt_kyutai_sess *const *sess, int B, char *err,
                            size_t errlen)
{
    const int Q = g->lm->kc.dep_q;
    for (int r = 0; r < B; r++) {
        g->s_temp[r] = sess[r]->smp.temp;
        g->s_topk[r] = sess[r]->smp.top_k;
        g->s_greedy[r] = sess[r]->smp.greedy;
        memcpy(g->s_rng + (size_t)r * 4, sess[r]->rng.s, sizeof sess[r]->rng.s);
    }
    if (mt_depformer_frame(g->df, g->tok, g->s_temp, g->s_topk, g->s_greedy, g->s_rng,
                           g->audio)) {
        mt_set_err(err, errlen, "kyutai: %s", mt_depformer_error(g->df));
        return -1;
    }
    for (int r = 0; r < B; r++) {
        memcpy(sess[r]->rng.s, g->s_rng + (size_t)r * 4, sizeof sess[r]->rng.s);
        g->tok[r] = g->audio[(size_t)r * Q + Q - 1];
    }
    return 0;
}

static double ms_since(uint64_t t0) { return (double)(mt_clock_ns() - t0) / 1e6; }

int mt_kyutai_step(mt_kyutai_gen *g, int B, mt_kv_seq *const *seqs,
                   mt_kyutai_sess *const *sess, const int32_t *user,
                   const mt_kyutai_out *out, char *err, size_t errlen)
{
    const mt_kyutai_lm *lm = g->lm;
    const mt_kyutai_config *kc = &lm->kc;
    const int nk = 1 + kc->n_q, nu = kc->n_q - kc->dep_q, Q = kc->dep_q;
    const size_t D = (size_t)kc->dim;
    if (B < 1 || B > g->maxb) {
        mt_set_err(err, errlen, "kyutai: batch of %d outside 1..%d", B, g->maxb);
        return -1;
    }
    for (int r = 0; r < B * nu; r++)
        if (user[r] < -1 || user[r] >= kc->card) {
            mt_set_err(err, errlen, "kyutai: user token %d (row %d, codebook %d) outside -1..%d",
                     (int)user[r], r / (nu ? nu : 1), r % (nu ? nu : 1), kc->card - 1);
            return -1;
        }

    /* input tokens and embeddings; the user's tokens go into the rings
     * only once the step has succeeded, so a failed step changes nothing */
    uint64_t t0 = mt_clock_ns();
    for (int r = 0; r < B; r++) {
        const mt_kyutai_sess *s = sess[r];
        int64_t t = s->offset;
        int32_t *in = g->in + (size_t)r * nk;
        float *x = g->x + (size_t)r * D;
        memset(x, 0, D * sizeof(float));
        for (int k = 0; k < nk; k++) {
            int32_t v;
            if (t <= kc->delays[k])
                v = k == 0 ? kc->text_card : kc->card;
            else if (k > Q && kc->delays[k] == 0)
                v = user[(size_t)r * nu + (k - 1 - Q)];   /* written at t, read at t */
            else
                v = s->ring[k * s->ct + (int)(t % s->ct)];
            if (v == UNGENERATED) {
                mt_set_err(err, errlen, "kyutai: stream %d of row %d has no token at frame %lld",
                         k, r, (long long)t);
                return -1;
            }
            in[k] = v;
            if (v < 0)
                continue;
            const float *e = k == 0 ? lm->text_emb + (size_t)v * D
                                    : lm->emb[k - 1] + (size_t)v * D;
            for (size_t i = 0; i < D; i++)
                x[i] += e[i];
        }
    }
    g->times.embed_ms = ms_since(t0);

    /* the temporal transformer: text logits and out_norm(h) */
    t0 = mt_clock_ns();
    mt_step_io io = { .x_in = g->x, .h_out = g->h, .logits = g->tlog };
    if (mt_decoder_step(g->dec, B, seqs, &io, err, errlen))
        return -1;
    g->times.temporal_ms = ms_since(t0);

    uint64_t ts = mt_clock_ns();
    for (int r = 0; r < B; r++)
        g->tok[r] = sample(g, sess[r], g->tlog + (size_t)r * kc->text_card_out,
                           kc->text_card_out, sess[r]->smp.temp_text, sess[r]->smp.top_k_text);
    double text_sample_ns = (double)(mt_clock_ns() - ts), dep_sample_ns = 0;
    memcpy(g->text, g->tok, (size_t)B * sizeof(int32_t));
    if (out->text)
        memcpy(out->text, g->text, (size_t)B * sizeof(int32_t));
    if (out->text_logits)
        memcpy(out->text_logits, g->tlog, (size_t)B * kc->text_card_out * sizeof(float));

    /* the depformer: dep_q tokens, each from the one before */
    t0 = mt_clock_ns();
    if (Q > 0) {
        /* a failure (CUDA's) returns before any session's token rings
         * are written */
        if (mt_depformer_begin(g->df, B, g->h)) {
            mt_set_err(err, errlen, "kyutai: %s", mt_depformer_error(g->df));
            return -1;
        }
        if (g->dev_sample && !out->dep_logits && dep_frame_device(g, sess, B, err, errlen))
            return -1;
        for (int k = 0; k < Q && !(g->dev_sample && !out->dep_logits); k++) {
            if (mt_depformer_next(g->df, k, g->tok, g->dlog)) {
                mt_set_err(err, errlen, "kyutai: %s", mt_depformer_error(g->df));
                return -1;
            }
            if (out->dep_logits)
                for (int r = 0; r < B; r++)
                    memcpy(out->dep_logits + ((size_t)r * Q + k) * kc->card,
                           g->dlog + (size_t)r * kc->card, (size_t)kc->card * sizeof(float));
            ts = mt_clock_ns();
            for (int r = 0; r < B; r++) {
                g->tok[r] = sample(g, sess[r], g->dlog + (size_t)r * kc->card, kc->card,
                                   sess[r]->smp.temp, sess[r]->smp.top_k);
                g->audio[(size_t)r * Q + k] = g->tok[r];
            }
            dep_sample_ns += (double)(mt_clock_ns() - ts);
        }
    }
    g->times.depformer_ms = ms_since(t0) - dep_sample_ns / 1e6;
    g->times.sample_ms = (text_sample_ns + dep_sample_ns) / 1e6;
    if (out->audio)
        memcpy(out->audio, g->audio, (size_t)B * Q * sizeof(int32_t));

    /* the rings: user tokens at t + delay, the generated ones at t + 1;
     * from t + 1 > max_delay on, the undelayed frame t + 1 - max_delay */
    for (int r = 0; r < B; r++) {
        mt_kyutai_sess *s = sess[r];
        int64_t t = s->offset;
        for (int j = 0; j < nu; j++) {
            int k = 1 + Q + j;
            s->ring[k * s->ct + (int)((t + kc->delays[k]) % s->ct)] = user[(size_t)r * nu + j];
        }
        t = ++s->offset;
        s->ring[(int)(t % s->ct)] = g->text[r];
        for (int k = 0; k < Q; k++)
            s->ring[(1 + k) * s->ct + (int)(t % s->ct)] = g->audio[(size_t)r * Q + k];
        if (out->frame) {
            int32_t *f = out->frame + (size_t)r * (1 + Q);
            for (int k = 0; k <= Q; k++)
                f[k] = t > g->max_delay
                           ? s->ring[k * s->ct + (int)((t - g->max_delay + kc->delays[k]) % s->ct)]
                           : UNGENERATED;
        }
    }
    return 0;
}
