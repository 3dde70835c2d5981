/* test_kyutai_prs.c: the extra heads of Kyutai's speech-to-text models (voice
 * activity: the prs of their Step message) against Kyutai's own PyTorch
 * code. The fixture tests/fixtures/kyutai_stt_vad (made by
 * tests/fixtures/gen/gen_kyutai_stt_vad.py: kyutai_stt's tiny model with 2
 * extra heads of 3 outputs, run greedy by their LMGen.step_with_extra_heads
 * over kyutai_stt's codes) lists per step "Step step_idx=K prs=P0,P1": each
 * head's softmax output 0 at model step K, as their server sends it.
 *
 * Checked: the config's extra heads read; 2 sessions stepped as one batch
 * (the same codes, the second starting 3 frames later, so that rows of
 * one batch are at different steps) give Kyutai's prs at every step within
 * PRS_TOL (fp32 both sides, sums in another order; probabilities, so an
 * absolute bound); a checkpoint without a head's tensor and one whose head
 * is misshaped are refused naming the tensor; the stt-1b preset has its
 * published 4 heads of 6. */
#include "tap.h"
#include "test_util.h"
#include "decode/decoder.h"
#include "speech/kyutai.h"
#include "model/kyutai_lm.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, LAG = 3, MAXT = 128, NH = 2 };
#define PRS_TOL 1e-5

static char root[1024] = ".";

/* Kyutai's prs per step from expected.msgs: want[k][j] for step_idx k + 1;
 * the count of steps. */
static int read_expected(float want[MAXT][NH])
{
    char path[1200];
    size_t n;
    snprintf(path, sizeof path, "%s/tests/fixtures/kyutai_stt_vad/expected.msgs", root);
    char *buf = test_file_read(path, &n);
    int steps = 0;
    for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
        int k;
        float a, b;
        if (sscanf(l, "Step step_idx=%d prs=%f,%f", &k, &a, &b) != 3)
            continue;
        if (k != steps + 1 || k > MAXT) {
            tap_diag("expected.msgs: step %d out of order", k);
            break;
        }
        want[steps][0] = a;
        want[steps][1] = b;
        steps++;
    }
    free(buf);
    return steps;
}

/* The fixture's codes, [T, n_q] (user order); T. */
static int read_codes(int32_t codes[MAXT][2])
{
    char path[1200];
    size_t n;
    snprintf(path, sizeof path, "%s/tests/fixtures/kyutai_stt/codes.txt", root);
    char *buf = test_file_read(path, &n);
    int t = 0;
    for (char *l = strtok(buf, "\n"); l && t < MAXT; l = strtok(NULL, "\n"))
        if (l[0] != '#' && sscanf(l, "%d %d", &codes[t][0], &codes[t][1]) == 2)
            t++;
    free(buf);
    return t;
}

/* Steps session 0 over every frame and session 1 LAG frames behind, in
 * one batch once both run; got[i][k] session i's prs at its step k + 1. */
static int run(const mt_kyutai_lm *lm, int T, const int32_t codes[MAXT][2],
               float got[B][MAXT][NH])
{
    mt_decoder_opts o = { .device = MT_DEV_CPU, .max_batch = B, .threads = 1 };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.window = lm->kc.context;
    o.kv.rope = MT_ROPE_ABSOLUTE;
    o.kv.budget_bytes = (size_t)B * 4 * MAXT * mt_decoder_position_bytes(&lm->temporal->cfg, 4);
    mt_decoder *d = NULL;
    mt_kyutai_gen *g = NULL;
    mt_kyutai_sess *ss[B] = { 0 };
    mt_kv_seq *seqs[B] = { 0 };
    mt_kyutai_sampling greedy;
    mt_kyutai_sampling_default(&greedy);
    greedy.greedy = 1;
    char err[256] = "";
    int rc = -1;
    if (mt_decoder_create(lm->temporal, &o, &d, err, sizeof err) ||
        mt_kyutai_gen_create(lm, d, B, &g, err, sizeof err))
        goto out;
    mt_kv_pool *pool = mt_decoder_pool(d);
    for (int i = 0; i < B; i++)
        if (mt_kyutai_sess_open(g, 1, &greedy, &ss[i], err, sizeof err) ||
            mt_kv_seq_open(pool, &seqs[i]))
            goto out;
    for (int t = 0; t < T + LAG; t++) {
        int32_t u[B * 2];                    /* [rows, n_q] */
        float prs[B * NH];                   /* [rows, extra_heads] */
        mt_kyutai_sess *rs[B];
        mt_kv_seq *rq[B];
        int rows = 0, who[B];
        for (int i = 0; i < B; i++) {
            int f = t - i * LAG;             /* session i's frame */
            if (f < 0 || f >= T)
                continue;
            memcpy(u + rows * 2, codes[f], sizeof codes[f]);
            if (mt_kv_reserve(pool, seqs[i], 1))
                goto out;
            rs[rows] = ss[i];
            rq[rows] = seqs[i];
            who[rows++] = i;
        }
        mt_kyutai_out io = { .prs = prs };
        if (mt_kyutai_step(g, rows, rq, rs, u, &io, err, sizeof err))
            goto out;
        for (int r = 0; r < rows; r++)
            memcpy(got[who[r]][t - who[r] * LAG], prs + r * NH, sizeof(float) * NH);
    }
    rc = 0;
out:
    if (rc)
        tap_diag("run: %s", err);
    for (int i = 0; i < B; i++) {
        mt_kyutai_sess_close(ss[i]);
        if (seqs[i])
            mt_kv_seq_close(mt_decoder_pool(d), seqs[i]);
    }
    mt_kyutai_gen_free(g);
    mt_decoder_free(d);
    return rc;
}

static void test_against_kyutai(void)
{
    static float want[MAXT][NH], got[B][MAXT][NH];
    static int32_t codes[MAXT][2];
    int steps = read_expected(want), T = read_codes(codes);
    ok(steps >= 50 && T >= steps, "fixture: %d steps of Kyutai's prs, %d frames of codes",
       steps, T);
    char path[1200], err[300] = "";
    snprintf(path, sizeof path, "%s/tests/fixtures/kyutai_stt_vad", root);
    mt_kyutai_lm *lm = NULL;
    if (!ok(mt_kyutai_load(path, 0, &lm, err, sizeof err) == 0, "the checkpoint loads") ||
        !ok(lm->kc.extra_heads == NH && lm->kc.extra_dim == 3,
            "its config's extra heads read: %d of %d outputs", lm->kc.extra_heads,
            lm->kc.extra_dim)) {
        tap_diag("%s", err);
        mt_kyutai_free(lm);
        return;
    }
    if (ok(run(lm, T, codes, got) == 0, "%d frames, 2 sessions %d frames apart in one batch",
           T, LAG)) {
        for (int i = 0; i < B; i++) {
            double worst = 0, lo = 1, hi = 0;
            int at = -1;
            for (int k = 0; k < steps; k++)
                for (int j = 0; j < NH; j++) {
                    double e = fabs((double)got[i][k][j] - want[k][j]);
                    if (!(e <= worst)) {
                        worst = e;
                        at = k;
                    }
                    lo = want[k][j] < lo ? want[k][j] : lo;
                    hi = want[k][j] > hi ? want[k][j] : hi;
                }
            ok(worst <= PRS_TOL, "session %d: Kyutai's prs at every step of %d, both heads "
               "(worst |diff| %.2g at step %d; theirs span %.3f..%.3f)", i, steps, worst,
               at + 1, lo, hi);
        }
    }
    mt_kyutai_free(lm);
}

/* The fixture with its config's "extra_heads_num_heads": 2 and
 * "extra_heads_dim": 3 replaced; the load's message. */
static int load_edited(const char *dir, int heads, int dim, char *err, size_t errlen)
{
    char src[1200], dst[1200];
    size_t n;
    snprintf(src, sizeof src, "%s/tests/fixtures/kyutai_stt_vad/model.safetensors", root);
    char *buf = test_file_read(src, &n);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    test_file_write(dst, buf, n);
    free(buf);
    snprintf(src, sizeof src, "%s/tests/fixtures/kyutai_stt_vad/config.json", root);
    buf = test_file_read(src, &n);
    char *h = strstr(buf, "\"extra_heads_num_heads\": 2"), *d = strstr(buf, "\"extra_heads_dim\": 3");
    if (!h || !d) {
        free(buf);
        snprintf(err, errlen, "config.json: the extra heads' keys not found");
        return 0;
    }
    h[strlen("\"extra_heads_num_heads\": ")] = (char)('0' + heads);
    d[strlen("\"extra_heads_dim\": ")] = (char)('0' + dim);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    test_file_write(dst, buf, n);
    free(buf);
    mt_kyutai_lm *lm = NULL;
    int rc = mt_kyutai_load(dir, 0, &lm, err, errlen);
    mt_kyutai_free(lm);
    return rc;
}

static void test_refusals(void)
{
    char dir[1024], err[400] = "";
    if (test_tmpdir_make(dir, sizeof dir, "mt-prs"))
        return;
    ok(load_edited(dir, 3, 3, err, sizeof err) != 0 &&
           strstr(err, "'extra_heads.2.weight': missing"),
       "a third head without its tensor: refused by name (%s)", err);
    err[0] = '\0';
    ok(load_edited(dir, 2, 4, err, sizeof err) != 0 &&
           strstr(err, "'extra_heads.0.weight': shape [3, 32], expected [4, 32]"),
       "heads of 4 outputs over tensors of 3: refused by name and shapes (%s)", err);
    err[0] = '\0';
    ok(load_edited(dir, 0, 3, err, sizeof err) == 0, "no extra heads: the same file loads (%s)",
       err);
    test_tmpdir_remove(dir);
}

/* The published shapes: stt-1b-en_fr has 4 extra heads of 6, stt-2.6b-en
 * none (their config.json). */
static void test_presets(void)
{
    static const struct { const char *spec; int heads, dim; } p[] = {
        { "synthetic:stt-1b", 4, 6 }, { "synthetic:stt-2.6b", 0, 0 },
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        char err[300] = "";
        mt_kyutai_lm *lm = NULL;
        int rc = mt_kyutai_load(p[i].spec, MT_MODEL_SHAPE_ONLY, &lm, err, sizeof err);
        ok(rc == 0 && lm->kc.extra_heads == p[i].heads &&
               (!p[i].heads || lm->kc.extra_dim == p[i].dim),
           "%s: %d extra heads (%s)", p[i].spec, rc == 0 ? lm->kc.extra_heads : -1, err);
        mt_kyutai_free(lm);
    }
}

int main(void)
{
    const char *r = getenv("MT_ROOT");
    if (r)
        snprintf(root, sizeof root, "%s", r);
    test_against_kyutai();
    test_refusals();
    test_presets();
    return tap_done();
}
