/* backend_sim.c: the simulated device (see backend_sim.h): a cost model
 * from a profile, seeded noise, and a backend that waits what the model
 * predicts instead of computing. Nothing here is a measurement; every
 * caller that prints a figure from it labels it with mt_sim_label(). */
#define _GNU_SOURCE
#include "util/errmsg.h"
#include "decode/backend_sim.h"
#include "decode/backend.h"
#include "util/clock.h"
#include "util/rng.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct mt_sim {
    mt_sim_profile p;
    char           label[80];
    double         params;
    int            layers, heads, kv_heads, head_dim;
    size_t         position_bytes;
    double         weight_bytes;
    size_t         kv_budget;
    mt_codec_cost  codec;        /* the sessions' codec; zero: none */
    int            codec_sessions;
    mt_sim_clock   clk;
    uint64_t       t0;
    double         time_scale;   /* K: waits are model time / K */
    mt_rng         rng;
    int            have_spare;   /* polar method gives normals in pairs */
    double         spare;
    pthread_mutex_t mu;          /* the two sums below */
    double         pred_ms, noise_ms;
};

static uint64_t real_now(void *ctx)
{
    (void)ctx;
    return mt_clock_ns();
}

static void real_sleep_until(void *ctx, uint64_t t_ns)
{
    (void)ctx;
    mt_sleep_until_ns(t_ns);
}

static double next_normal(mt_sim *s)
{
    if (s->have_spare) {
        s->have_spare = 0;
        return s->spare;
    }
    double u, v, q;
    do {
        u = 2.0 * mt_rng_uniform(&s->rng) - 1.0;
        v = 2.0 * mt_rng_uniform(&s->rng) - 1.0;
        q = u * u + v * v;
    } while (q >= 1.0 || q == 0.0);
    double f = sqrt(-2.0 * log(q) / q);
    s->spare = v * f;
    s->have_spare = 1;
    return u * f;
}

int mt_sim_create(const mt_sim_profile *p, const mt_config *c,
                  const mt_sim_clock *clk, mt_sim **out, char *err,
                  size_t errlen)
{
    *out = NULL;
    if (p->model[0] && strcmp(p->model, c->name) != 0) {
        mt_set_err(err, errlen, "sim: profile %s describes %s, not %s (give -m %s or a profile for this model)",
                 p->name, p->model, c->name, p->model);
        return -1;
    }
    mt_sim *s = mt_calloc_or_err(1, sizeof *s, err, errlen, "sim");
    if (!s)
        return -1;
    s->p = *p;
    snprintf(s->label, sizeof s->label, "sim:%s", p->name);
    s->params = (double)mt_model_params(c);
    s->layers = c->layers;
    s->heads = c->heads;
    s->kv_heads = c->kv_heads;
    s->head_dim = c->head_dim;
    s->position_bytes = mt_decoder_position_bytes(c, (size_t)p->kv_bytes);
    s->weight_bytes = s->params * p->weight_bytes;
    double budget = p->memory_bytes - s->weight_bytes - p->reserve_bytes;
    if (budget < (double)s->position_bytes * MT_KV_BLOCK) {
        mt_set_err(err, errlen, "sim: profile %s: %.3g bytes of memory less %.3g of weights (%s at %d bytes a parameter) and a %.3g reserve leave no room for a K/V block",
                 p->name, p->memory_bytes, s->weight_bytes, c->name,
                 p->weight_bytes, p->reserve_bytes);
        free(s);
        return -1;
    }
    s->kv_budget = (size_t)budget;
    if (clk && clk->now && clk->sleep_until)
        s->clk = *clk;
    else
        s->clk = (mt_sim_clock){ real_now, real_sleep_until, NULL };
    s->t0 = s->clk.now(s->clk.ctx);
    s->time_scale = 1;
    mt_rng_seed(&s->rng, p->seed);
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return 0;
}

void mt_sim_free(mt_sim *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void mt_sim_set_time_scale(mt_sim *s, double k)
{
    s->time_scale = k > 0 ? k : 1;
}

double mt_sim_time_scale(const mt_sim *s) { return s->time_scale; }

const mt_sim_profile *mt_sim_profile_of(const mt_sim *s) { return &s->p; }
const char *mt_sim_label(const mt_sim *s) { return s->label; }
size_t mt_sim_position_bytes(const mt_sim *s) { return s->position_bytes; }
double mt_sim_weight_bytes(const mt_sim *s) { return s->weight_bytes; }
size_t mt_sim_kv_budget(const mt_sim *s) { return s->kv_budget; }

double mt_sim_codec_booked(const mt_codec_cost *c, int sessions)
{
    return c->weight_bytes + (double)sessions * c->state_bytes;
}

double mt_sim_codec_rate(const mt_sim_profile *p)
{
    return p->codec_rate > 0 ? p->codec_rate : p->matrix_rate;
}

static double codec_seconds(const mt_sim_profile *p, const mt_codec_cost *c, int B,
                            double f_rate, double f_over)
{
    if (c->flops <= 0 && c->state_bytes <= 0 && c->weight_bytes <= 0)
        return 0;
    double rate = mt_sim_codec_rate(p) * f_rate;
    return (double)B * c->flops / rate + p->codec_overhead_us * 1e-6 * f_over;
}

double mt_sim_codec_seconds(const mt_sim_profile *p, const mt_codec_cost *c, int B)
{
    return codec_seconds(p, c, B, 1, 1);
}

int mt_sim_depformer_weight_bytes(const mt_sim_profile *p)
{
    return p->depformer_weight_bytes > 0 ? p->depformer_weight_bytes : p->weight_bytes;
}

/* backend_sim.h's t_depformer, with the schedule's factors f_bw, f_rate,
 * f_over. */
static double depformer_seconds(const mt_sim_profile *p, int B, double f_bw, double f_rate,
                                double f_over)
{
    if (!(p->depformer_params > 0))
        return 0;
    double rate = (p->depformer_rate > 0 ? p->depformer_rate : p->matrix_rate) * f_rate;
    double t_mem = p->depformer_params * mt_sim_depformer_weight_bytes(p) / (p->bandwidth * f_bw);
    double t_flop = 2.0 * p->depformer_params * (double)B / rate;
    return (t_mem > t_flop ? t_mem : t_flop) + p->depformer_overhead_us * 1e-6 * f_over;
}

double mt_sim_depformer_seconds(const mt_sim_profile *p, int B)
{
    return depformer_seconds(p, B, 1, 1, 1);
}

int mt_sim_set_codec(mt_sim *s, const mt_codec_cost *c, int sessions, char *err,
                     size_t errlen)
{
    if (!(c->flops >= 0 && c->state_bytes >= 0 && c->weight_bytes >= 0) || sessions < 1) {
        mt_set_err(err, errlen, "sim: codec: bad figures (%g flops, %g state bytes, %g weight bytes, %d sessions)",
                   c->flops, c->state_bytes, c->weight_bytes, sessions);
        return -1;
    }
    double budget = s->p.memory_bytes - s->weight_bytes - s->p.reserve_bytes -
                    mt_sim_codec_booked(c, sessions);
    if (budget < (double)s->position_bytes * MT_KV_BLOCK) {
        mt_set_err(err, errlen, "sim: profile %s: the codec's %.3g bytes of weights and %d sessions' state of %.3g bytes leave no room for a K/V block",
                   s->p.name, c->weight_bytes, sessions, c->state_bytes);
        return -1;
    }
    s->kv_budget = (size_t)budget;
    s->codec = *c;
    s->codec_sessions = sessions;
    return 0;
}

const mt_codec_cost *mt_sim_codec(const mt_sim *s, int *sessions)
{
    if (sessions)
        *sessions = s->codec_sessions;
    return &s->codec;
}

double mt_sim_factor(const mt_sim *s, mt_sim_field f, double t_s)
{
    double k = 1.0;
    for (int i = 0; i < s->p.nschedule && s->p.schedule[i].t_s <= t_s; i++)
        if (s->p.schedule[i].field == f)
            k = s->p.schedule[i].factor;
    return k;
}

static void finish_cost(const mt_sim *s, double t_s, mt_sim_cost *c)
{
    double bw = s->p.bandwidth * mt_sim_factor(s, MT_SIM_BANDWIDTH, t_s);
    double rate = s->p.matrix_rate * mt_sim_factor(s, MT_SIM_MATRIX_RATE, t_s);
    c->t_mem = c->bytes / bw;
    c->t_flop = c->flops / rate;
    c->t_overhead = s->p.overhead_us * 1e-6 * mt_sim_factor(s, MT_SIM_OVERHEAD, t_s);
    c->total = (c->t_mem > c->t_flop ? c->t_mem : c->t_flop) + c->t_overhead + c->t_codec +
               c->t_depformer;
}

/* flops of attention per visible position: QK^T and PV, 2 flops a MAC */
static double attn_flops_per_pos(const mt_sim *s)
{
    return 4.0 * s->layers * s->heads * s->head_dim;
}

void mt_sim_step_cost(const mt_sim *s, int B, const int64_t *visible,
                      double t_s, mt_sim_cost *c)
{
    double vsum = 0;
    for (int i = 0; i < B; i++)
        vsum += (double)visible[i];
    memset(c, 0, sizeof *c);
    c->bytes = s->weight_bytes + (double)s->position_bytes * vsum;
    c->flops = 2.0 * s->params * B + attn_flops_per_pos(s) * vsum;
    c->t_codec = codec_seconds(&s->p, &s->codec, B,
                               mt_sim_factor(s, MT_SIM_MATRIX_RATE, t_s),
                               mt_sim_factor(s, MT_SIM_OVERHEAD, t_s));
    c->t_depformer = depformer_seconds(&s->p, B, mt_sim_factor(s, MT_SIM_BANDWIDTH, t_s),
                                       mt_sim_factor(s, MT_SIM_MATRIX_RATE, t_s),
                                       mt_sim_factor(s, MT_SIM_OVERHEAD, t_s));
    finish_cost(s, t_s, c);
}

void mt_sim_prefill_cost(const mt_sim *s, int64_t n, int64_t visible_last,
                         double visible_sum, double t_s, mt_sim_cost *c)
{
    memset(c, 0, sizeof *c);
    c->bytes = s->weight_bytes + (double)s->position_bytes * (double)visible_last;
    c->flops = 2.0 * s->params * (double)n + attn_flops_per_pos(s) * visible_sum;
    finish_cost(s, t_s, c);
}

double mt_sim_draw_noise(mt_sim *s, double pred_s)
{
    double extra = 0;
    if (s->p.jitter_sigma > 0)
        extra = pred_s * (exp(s->p.jitter_sigma * next_normal(s)) - 1.0);
    if (s->p.stall_prob > 0 && mt_rng_uniform(&s->rng) < s->p.stall_prob)
        extra += s->p.stall_ms * 1e-3;
    return extra;
}

static void wait_cost(mt_sim *s, uint64_t start, const mt_sim_cost *c)
{
    double noise = mt_sim_draw_noise(s, c->total);
    double k = s->time_scale;
    double wait_s = (c->total + noise) / k;
    if (wait_s < 0)
        wait_s = 0;
    pthread_mutex_lock(&s->mu);
    s->pred_ms += c->total * 1e3 / k;
    s->noise_ms += noise * 1e3 / k;
    pthread_mutex_unlock(&s->mu);
    s->clk.sleep_until(s->clk.ctx, start + (uint64_t)llround(wait_s * 1e9));
}

/* Model seconds since the device started (the schedule's clock). */
static double model_s(const mt_sim *s, uint64_t now)
{
    return (double)(now - s->t0) / 1e9 * s->time_scale;
}

void mt_sim_run_step(mt_sim *s, int B, const int64_t *visible)
{
    uint64_t start = s->clk.now(s->clk.ctx);
    mt_sim_cost c;
    mt_sim_step_cost(s, B, visible, model_s(s, start), &c);
    wait_cost(s, start, &c);
}

void mt_sim_run_prefill(mt_sim *s, int64_t n, int64_t visible_last,
                        double visible_sum)
{
    uint64_t start = s->clk.now(s->clk.ctx);
    mt_sim_cost c;
    mt_sim_prefill_cost(s, n, visible_last, visible_sum,
                        model_s(s, start), &c);
    wait_cost(s, start, &c);
}

void mt_sim_take(mt_sim *s, double *pred_ms, double *noise_ms)
{
    pthread_mutex_lock(&s->mu);
    *pred_ms = s->pred_ms;
    *noise_ms = s->noise_ms;
    s->pred_ms = s->noise_ms = 0;
    pthread_mutex_unlock(&s->mu);
}

/* ---- the backend ---------------------------------------------------------- */

typedef struct sim_impl {
    mt_sim         *sim;
    int             own_sim;   /* made by mt_sim_backend_create: freed with it */
    const mt_model *m;
    mt_kv_pool     *pool;      /* attached */
    int64_t        *visible;   /* [max_batch] */
    char            note[1536];  /* the profile path (512) and figures */
} sim_impl;

/* Output of rows rows: input PCM echoed (the sim computes nothing, and an
 * echo lets clients check every frame's content), logits and h_out zero. */
static void echo(const sim_impl *im, int rows, const mt_step_io *io)
{
    const mt_config *c = &im->m->cfg;
    if (io->pcm_out) {
        size_t n = (size_t)rows * (size_t)c->frame_samples;
        if (io->pcm_in)
            memcpy(io->pcm_out, io->pcm_in, n * sizeof(int16_t));
        else
            memset(io->pcm_out, 0, n * sizeof(int16_t));
    }
    if (io->logits && c->vocab > 0)
        memset(io->logits, 0, (size_t)rows * (size_t)c->vocab * sizeof(float));
    if (io->h_out)
        memset(io->h_out, 0, (size_t)rows * (size_t)c->hidden * sizeof(float));
}

static int sim_step(mt_backend *be, int B, mt_kv_seq *const *seqs,
                    const mt_step_io *io, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    sim_impl *im = be->impl;
    for (int i = 0; i < B; i++)
        im->visible[i] = mt_kv_visible_count(im->pool, seqs[i]->len);
    mt_sim_run_step(im->sim, B, im->visible);
    echo(im, B, io);
    return 0;
}

static int sim_prefill(mt_backend *be, mt_kv_seq *seq, int n,
                       const mt_step_io *io, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    sim_impl *im = be->impl;
    double vsum = 0;
    int64_t vlast = 0;
    for (int64_t k = 0; k < n; k++) {
        vlast = mt_kv_visible_count(im->pool, seq->len + k);
        vsum += (double)vlast;
    }
    mt_sim_run_prefill(im->sim, n, vlast, vsum);
    echo(im, n, io);
    return 0;
}

/* The pool only keeps books (no memory behind its blocks), so a 141 GB
 * device costs the host a few hundred KB of block ids. */
static int sim_attach_pool(mt_backend *be, mt_kv_pool *pool, char *err, size_t errlen)
{
    sim_impl *im = be->impl;
    const mt_kv_params *kp = mt_kv_pool_params(pool);
    if (kp->position_bytes != im->sim->position_bytes) {
        mt_set_err(err, errlen, "sim: pool has %zu bytes a position, profile %zu",
                   kp->position_bytes, im->sim->position_bytes);
        return -1;
    }
    im->pool = pool;
    const mt_sim *s = im->sim;
    char codec[256] = "";
    if (s->codec_sessions > 0)
        snprintf(codec, sizeof codec,
                 ", codec %.0f B booked (%.0f B of weights + %d sessions x %.0f B of state), "
                 "%.4g ms a session-frame + %.4g ms a step",
                 mt_sim_codec_booked(&s->codec, s->codec_sessions), s->codec.weight_bytes,
                 s->codec_sessions, s->codec.state_bytes,
                 s->codec.flops / mt_sim_codec_rate(&s->p) * 1e3,
                 s->p.codec_overhead_us * 1e-3);
    char dep[160] = "";
    if (s->p.depformer_params > 0)
        snprintf(dep, sizeof dep, ", depformer %.4g parameters, %.4g ms a step of one session",
                 s->p.depformer_params, mt_sim_depformer_seconds(&s->p, 1) * 1e3);
    snprintf(im->note, sizeof im->note,
             "SIMULATED device %s (profile %s: %.4g B memory, %.4g B/s, %.4g flop/s, "
             "%.0f B of weights, K/V pool %zu B%s%s%s%s): no figure from this server is a measurement",
             s->label, s->p.path, s->p.memory_bytes, s->p.bandwidth, s->p.matrix_rate,
             s->weight_bytes, kp->budget_bytes,
             kp->budget_bytes == s->kv_budget ? "" : ", set by the caller", codec, dep,
             s->time_scale != 1 ? ", time-scaled: steps wait 1/K of the model's time" : "");
    be->note = im->note;
    return 0;
}

static void sim_take_modeled(mt_backend *be, double *pred_ms, double *noise_ms)
{
    sim_impl *im = be->impl;
    mt_sim_take(im->sim, pred_ms, noise_ms);
}

static void sim_destroy(mt_backend *be)
{
    if (!be)
        return;
    sim_impl *im = be->impl;
    if (im) {
        free(im->visible);
        if (im->own_sim)
            mt_sim_free(im->sim);
    }
    free(im);
    free(be);
}

int mt_sim_backend_wrap(mt_sim *s, const mt_model *m, int max_batch,
                        mt_backend **out, char *err, size_t errlen)
{
    *out = NULL;
    mt_backend *be = mt_backend_alloc(sizeof(sim_impl), "sim: out of memory", err, errlen);
    if (!be)
        return -1;
    sim_impl *im = be->impl;
    im->visible = calloc((size_t)(max_batch > 0 ? max_batch : 1), sizeof *im->visible);
    if (!im->visible) {
        sim_destroy(be);
        mt_set_err(err, errlen, "sim: out of memory");
        return -1;
    }
    im->sim = s;
    im->m = m;
    be->name = s->label;
    be->sim_label = s->label;
    be->kv_elem_bytes = (size_t)s->p.kv_bytes;
    be->kv_max_bytes = s->kv_budget;
    be->attach_pool = sim_attach_pool;
    be->step = sim_step;
    be->prefill = sim_prefill;
    be->wake = NULL;
    be->take_modeled = sim_take_modeled;
    be->destroy = sim_destroy;
    *out = be;
    return 0;
}

int mt_sim_backend_create(const mt_model *m, const mt_decoder_opts *o,
                          mt_backend **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!o->sim_profile) {
        mt_set_err(err, errlen, "sim: no profile given");
        return -1;
    }
    mt_sim_profile prof;
    mt_sim *s = NULL;
    if (mt_sim_profile_load(o->sim_profile, &prof, err, errlen) != 0 ||
        mt_sim_create(&prof, &m->cfg, NULL, &s, err, errlen) != 0)
        return -1;
    if ((o->codec.flops > 0 || o->codec.state_bytes > 0 || o->codec.weight_bytes > 0) &&
        mt_sim_set_codec(s, &o->codec, o->max_batch > 0 ? o->max_batch : 1, err, errlen)) {
        mt_sim_free(s);
        return -1;
    }
    mt_sim_set_time_scale(s, o->sim_time_scale);
    if (mt_sim_backend_wrap(s, m, o->max_batch, out, err, errlen) != 0) {
        mt_sim_free(s);
        return -1;
    }
    ((sim_impl *)(*out)->impl)->own_sim = 1;
    return 0;
}
