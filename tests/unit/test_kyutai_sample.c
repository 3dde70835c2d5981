/* test_kyutai_sample.c: Kyutai's sampling in the frame (decode/kyutai.c):
 * the partial selection and the pruned race give the same tokens as a
 * plain reference (a full sort of every row, exp and log for every
 * candidate) fed the frame's own logits and the same seeds; a session's
 * tokens are the same at B = 1 and B = 32, on 1 thread and on 2 (each
 * session its own generator); per-row settings (greedy, temperature 0,
 * top-k 1, no top-k) taken row by row; the selection's 8-lane passes
 * and its AVX-512 ones (mt_kyutai_sample_select) draw the same. Model: synthetic:kyutai-small's
 * card (1024) and text card (4000), so top-k 250 / 25 select. */
#include "tap.h"
#include "test_util.h"
#include "decode/decoder.h"
#include "speech/kyutai.h"
#include "model/kyutai_lm.h"
#include "util/rng.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NB = 32, F = 3, QMAX = 8 };

/* the sampling settings of session b: most with the defaults (top-k
 * 250 / 25), some greedy, temperature 0, top-k 1, no top-k (0), hot */
static mt_kyutai_sampling settings(int b)
{
    mt_kyutai_sampling s;
    mt_kyutai_sampling_default(&s);
    switch (b % 8) {
    case 1: s.greedy = 1; break;
    case 2: s.temp = s.temp_text = 0.0f; break;
    case 3: s.top_k = s.top_k_text = 1; break;
    case 4: s.top_k = s.top_k_text = 0; s.temp = 2.0f; break;
    case 5: s.temp = s.temp_text = 3.0f; s.top_k = 7; s.top_k_text = 3; break;
    default: break;
    }
    return s;
}

typedef struct run_out {
    int32_t text[NB][F], audio[NB][F][QMAX];
    float  *tlog, *dlog;   /* [NB][F][text_card_out], [NB][F][dep_q][card] */
    int     threads;       /* the decoder's host threads (mt_decoder_threads) */
} run_out;

/* run's device: the CPU backend, or with sim_path a simulated temporal
 * (this profile) and the depformer on the host beside it, q8 copies */
static const char *sim_path;

/* F frames of sessions first..first+nb-1 (seeds 100 + b) together, on
 * `threads` threads; outputs by session. */
static int run(const mt_kyutai_lm *lm, int first, int nb, int threads, run_out *o)
{
    const mt_kyutai_config *kc = &lm->kc;
    const int nu = kc->n_q - kc->dep_q, Q = kc->dep_q, V = kc->text_card_out, C = kc->card;
    mt_decoder_opts opt = { .device = MT_DEV_CPU, .max_batch = nb, .threads = threads };
    if (sim_path) {
        opt.device = MT_DEV_SIM;
        opt.sim_profile = sim_path;
        opt.weights = MT_FMT_Q8;
        opt.weights_f16_rows = NB;
    }
    opt.kv.policy = MT_KV_WINDOW;
    opt.kv.sink = 0;
    opt.kv.window = 16;
    opt.kv.rope = MT_ROPE_CACHE;
    opt.kv.budget_bytes = (size_t)nb * 64 * mt_decoder_position_bytes(&lm->temporal->cfg, 4);
    mt_decoder *d = NULL;
    mt_kyutai_gen *g = NULL;
    mt_kyutai_sess *ss[NB] = { 0 };
    mt_kv_seq *seqs[NB] = { 0 };
    int32_t *user = malloc((size_t)NB * (nu ? nu : 1) * sizeof *user), text[NB], audio[NB * QMAX];
    float *tl = malloc((size_t)NB * V * sizeof *tl), *dl = malloc((size_t)NB * Q * C * sizeof *dl);
    char err[256] = "";
    int rc = -1;
    if (!user || !tl || !dl || mt_decoder_create(lm->temporal, &opt, &d, err, sizeof err) ||
        mt_kyutai_gen_create(lm, d, nb, &g, err, sizeof err))
        goto out;
    o->threads = mt_decoder_threads(d);
    mt_kv_pool *pool = mt_decoder_pool(d);
    for (int i = 0; i < nb; i++) {
        mt_kyutai_sampling s = settings(first + i);
        if (mt_kyutai_sess_open(g, 100 + (uint64_t)(first + i), &s, &ss[i], err, sizeof err) ||
            mt_kv_seq_open(pool, &seqs[i]))
            goto out;
    }
    for (int t = 0; t < F; t++) {
        for (int i = 0; i < nb; i++) {
            mt_rng r;   /* user tokens a function of (session, frame) */
            mt_rng_seed(&r, (uint64_t)(first + i) * 1000 + (uint64_t)t);
            for (int j = 0; j < nu; j++)
                user[i * nu + j] = (int32_t)(mt_rng_next(&r) % (uint64_t)C);
            if (mt_kv_reserve(pool, seqs[i], 1))
                goto out;
        }
        mt_kyutai_out io = { .text = text, .audio = audio, .text_logits = tl, .dep_logits = dl };
        if (mt_kyutai_step(g, nb, seqs, ss, user, &io, err, sizeof err))
            goto out;
        for (int i = 0; i < nb; i++) {
            int b = first + i;
            o->text[b][t] = text[i];
            memcpy(o->audio[b][t], audio + i * Q, (size_t)Q * sizeof(int32_t));
            memcpy(o->tlog + ((size_t)b * F + t) * V, tl + (size_t)i * V, (size_t)V * sizeof(float));
            memcpy(o->dlog + ((size_t)b * F + t) * Q * C, dl + (size_t)i * Q * C,
                   (size_t)Q * C * sizeof(float));
        }
    }
    rc = 0;
out:
    if (rc)
        tap_diag("run: %s", err);
    for (int i = 0; i < NB; i++) {
        mt_kyutai_sess_close(ss[i]);
        if (seqs[i])
            mt_kv_seq_close(mt_decoder_pool(d), seqs[i]);
    }
    mt_kyutai_gen_free(g);
    mt_decoder_free(d);
    free(user);
    free(tl);
    free(dl);
    return rc;
}

/* ---- the reference: Kyutai's sample_token the plain way ----------------- */

static const float *ref_l;
static int by_logit(const void *a, const void *b)   /* descending, then index */
{
    int i = *(const int *)a, j = *(const int *)b;
    if (ref_l[i] != ref_l[j])
        return ref_l[i] > ref_l[j] ? -1 : 1;
    return i - j;
}
static int by_index(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static int32_t ref_sample(mt_rng *rng, const mt_kyutai_sampling *s, const float *l, int n,
                          float temp, int k)
{
    int best = 0;
    if (s->greedy || !(temp > 0.0f)) {
        for (int i = 1; i < n; i++)
            if (l[i] > l[best])
                best = i;
        return best;
    }
    int *idx = malloc((size_t)n * sizeof *idx);
    for (int i = 0; i < n; i++)
        idx[i] = i;
    if (k <= 0 || k > n)
        k = n;
    ref_l = l;
    qsort(idx, (size_t)n, sizeof *idx, by_logit);      /* the top k: a full sort */
    float m = l[idx[0]];
    qsort(idx, (size_t)k, sizeof *idx, by_index);      /* drawn in index order */
    double bestv = -1;
    for (int j = 0; j < k; j++) {
        double p = exp(((double)l[idx[j]] - m) / temp);
        double e = -log(1.0 - mt_rng_uniform(rng));
        double v = p / (e > 0 ? e : 1e-300);
        if (v > bestv) {
            bestv = v;
            best = idx[j];
        }
    }
    free(idx);
    return best;
}

/* The reference over a run's own logits: the mismatching tokens. */
static int ref_mismatches(const mt_kyutai_lm *lm, const run_out *o)
{
    const mt_kyutai_config *kc = &lm->kc;
    const int Q = kc->dep_q, V = kc->text_card_out, C = kc->card;
    int bad = 0;
    for (int b = 0; b < NB; b++) {
        mt_kyutai_sampling s = settings(b);
        mt_rng rng;
        mt_rng_seed(&rng, 100 + (uint64_t)b);
        for (int t = 0; t < F; t++) {
            bad += ref_sample(&rng, &s, o->tlog + ((size_t)b * F + t) * V, V, s.temp_text,
                              s.top_k_text) != o->text[b][t];
            for (int k = 0; k < Q; k++)
                bad += ref_sample(&rng, &s, o->dlog + (((size_t)b * F + t) * Q + k) * C, C,
                                  s.temp, s.top_k) != o->audio[b][t][k];
        }
    }
    return bad;
}

static run_out *new_out(const mt_kyutai_config *kc)
{
    run_out *o = calloc(1, sizeof *o);
    o->tlog = calloc((size_t)NB * F * kc->text_card_out, sizeof(float));
    o->dlog = calloc((size_t)NB * F * kc->dep_q * kc->card, sizeof(float));
    return o;
}

static void free_out(run_out *o)
{
    free(o->tlog);
    free(o->dlog);
    free(o);
}

static int same_tokens(const run_out *a, const run_out *b)
{
    return !memcmp(a->text, b->text, sizeof a->text) && !memcmp(a->audio, b->audio, sizeof a->audio);
}

/* A host depformer beside a simulated temporal (as mt-serve --device sim
 * or CUDA runs it): the decoder's own host threads (issue 49; it ran on
 * one thread there before, whatever --threads said), and on them the
 * same logits, bit for bit, and the same tokens as on one thread. At B =
 * NB the depformer splits by rows and the sampling is on the pool. */
static void test_sim_threads(void)
{
    char path[] = "/tmp/mt-test-kyutai-sample-sim-XXXXXX", err[256] = "";
    int wrote = test_sim_profile_small(path);
    mt_kyutai_lm *lm = NULL;
    if (!ok(wrote && mt_kyutai_load("synthetic:kyutai-small", MT_KYUTAI_HOST_SIDE, &lm, err,
                                    sizeof err) == 0,
            "sim: synthetic:kyutai-small, temporal shape-only (%s)", err)) {
        if (wrote)
            unlink(path);
        return;
    }
    sim_path = path;
    run_out *t1 = new_out(&lm->kc), *t2 = new_out(&lm->kc);
    int rc = run(lm, 0, NB, 1, t1) || run(lm, 0, NB, 2, t2);
    if (ok(rc == 0, "sim: %d frames of %d sessions, host depformer, threads 1 and 2", F, NB)) {
        ok(t1->threads == 1 && t2->threads == 2, "sim: the host work runs on --threads host "
           "threads (%d and %d)", t1->threads, t2->threads);
        size_t nd = (size_t)NB * F * lm->kc.dep_q * lm->kc.card;
        size_t nz = 0;
        for (size_t i = 0; i < nd; i++)
            nz += t1->dlog[i] != 0.0f;
        ok(nz > nd / 2 && !memcmp(t1->dlog, t2->dlog, nd * sizeof(float)),
           "sim: the depformer's logits (%zu of %zu not 0) bit-identical on 1 and 2 threads",
           nz, nd);
        ok(same_tokens(t1, t2), "sim: the same tokens on 1 and 2 threads");
    }
    sim_path = NULL;
    free_out(t1);
    free_out(t2);
    mt_kyutai_free(lm);
    unlink(path);
}

int main(void)
{
    char err[256] = "";
    mt_kyutai_lm *lm = NULL;
    if (mt_kyutai_load("synthetic:kyutai-small", 0, &lm, err, sizeof err)) {
        printf("Bail out! %s\n", err);
        return 1;
    }
    run_out *b32t1 = new_out(&lm->kc), *b32t2 = new_out(&lm->kc), *b1t1 = new_out(&lm->kc),
            *b1t2 = new_out(&lm->kc);
    int rc = run(lm, 0, NB, 1, b32t1) || run(lm, 0, NB, 2, b32t2);
    for (int b = 0; b < NB && !rc; b++)
        rc = run(lm, b, 1, b % 2 ? 2 : 1, b % 2 ? b1t2 : b1t1);
    if (ok(rc == 0, "%d frames of %d sessions at B = %d (threads 1 and 2) and alone", F, NB, NB)) {
        ok(same_tokens(b32t1, b32t2), "B = %d: the same tokens on 1 and 2 threads", NB);
        /* alone: even sessions on 1 thread, odd ones on 2 */
        int bad = 0;
        for (int b = 0; b < NB; b++) {
            const run_out *a = b % 2 ? b1t2 : b1t1;
            bad += memcmp(a->text[b], b32t1->text[b], sizeof a->text[b]) != 0 ||
                   memcmp(a->audio[b], b32t1->audio[b], sizeof a->audio[b]) != 0;
        }
        ok(bad == 0, "each session alone (B = 1, 1 or 2 threads) draws what it draws at B = %d "
           "(%d of %d differ)", NB, bad, NB);
        int m = ref_mismatches(lm, b32t2);
        ok(m == 0, "every token is the full-sort reference's on the same logits and seeds "
           "(%d differ)", m);
        /* the draws are draws: defaults-sampled sessions are not greedy */
        int differ = 0;
        for (int t = 0; t < F; t++)
            for (int k = 0; k < lm->kc.dep_q; k++)
                differ += b32t1->audio[0][t][k] != b32t1->audio[3][t][k] ||
                          b32t1->audio[8][t][k] != b32t1->audio[16][t][k];
        ok(differ > 0, "sessions with other seeds draw other tokens");
        /* the selection's collecting passes on 8 lanes (level 0) and with
         * AVX-512's compress (level 1, where the CPU has it): the same */
        const int top = mt_kyutai_sample_select(-1);
        run_out *lv0 = new_out(&lm->kc);
        mt_kyutai_sample_select(0);
        int r0 = run(lm, 0, NB, 2, lv0);
        mt_kyutai_sample_select(-1);
        ok(r0 == 0 && same_tokens(lv0, b32t2) && ref_mismatches(lm, lv0) == 0,
           "the 8-lane selection draws the tokens of level %d's and of the reference", top);
        free_out(lv0);
    }
    free_out(b32t1);
    free_out(b32t2);
    free_out(b1t1);
    free_out(b1t2);
    mt_kyutai_free(lm);
    test_sim_threads();
    return tap_done();
}
