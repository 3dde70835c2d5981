/* mt-benchkyutai.c: Kyutai's LM frame on the CPU by stage, behind
 * bench/bench_kyutai.sh. For each batch size B: B sessions of a Kyutai
 * model (sampling with LMGen's defaults, random user codebooks), a few
 * frames of warm-up, then F frames timed; per stage (input embeddings,
 * temporal transformer, depformer, sampling) and in total, the median over
 * the frames, and the per-session bytes (temporal K/V under the bound,
 * depformer K/V and token rings). The temporal K/V is the window policy's
 * (S sinks + W), reached by stepping, so the attention reads what a long
 * session's would once W frames have passed.
 *
 * -d cuda or -d sim:PROFILE runs the temporal step there (the model's
 * temporal weights the device's own, a preset only: MT_KYUTAI_HOST_SIDE),
 * the streams and the sampling on the host as always; on the simulated
 * device the temporal time is the profile's prediction and the line says
 * so (device=sim:...). The depformer runs where the decoder does (on the
 * GPU with -d cuda, as mt-serve runs it), or where -D says: host or cuda;
 * the line says which (depformer=).
 *
 * usage: mt-benchkyutai [-m MODEL] [-d cpu|cuda|sim:PROFILE] [-D host|cuda]
 *                       [-b 1,8,32] [-f FRAMES] [-S S] [-W W] [-t THREADS]
 * Prints one logfmt line per B; asserts nothing. */
#include "decode/decoder.h"
#include "decode/kyutai.h"
#include "model/kyutai_lm.h"
#include "util/rng.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static mt_device dev = MT_DEV_CPU;
static const char *dev_name = "cpu", *sim_profile;
static const char *dep_on;      /* -D host | cuda | serial; NULL: where the decoder runs */
static mt_num_format weights;   /* -w f16: the backbone's and the depformer's f16 copies */
static int f16_rows;            /* -r ROWS: the f16 product up to ROWS rows (0: default) */

static int bench(const mt_kyutai_lm *lm, int B, int F, int S, int W, int threads)
{
    const mt_kyutai_config *kc = &lm->kc;
    const int nu = kc->n_q - kc->dep_q;
    char err[512] = "";
    mt_decoder_opts o = { .device = dev, .max_batch = B, .threads = threads,
                          .sim_profile = sim_profile, .weights = weights,
                          .weights_f16_rows = f16_rows };
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = S;
    o.kv.window = W;
    o.kv.rope = MT_ROPE_CACHE;
    o.kv.budget_bytes = (size_t)B * ((size_t)(S + W) / 16 + 2) * 16 *
                        mt_decoder_position_bytes(&lm->temporal->cfg, 4);
    mt_decoder *d = NULL;
    mt_kyutai_gen *g = NULL;
    mt_kyutai_sess **ss = calloc((size_t)B, sizeof *ss);
    mt_kv_seq **seqs = calloc((size_t)B, sizeof *seqs);
    int32_t *user = malloc((size_t)B * (nu > 0 ? nu : 1) * sizeof *user);
    int32_t *text = malloc((size_t)B * sizeof *text);
    double *st[5];
    for (int i = 0; i < 5; i++)
        st[i] = malloc((size_t)F * sizeof(double));
    int rc = -1;
    if (!ss || !seqs || !user || !text || !st[0] || !st[1] || !st[2] || !st[3] || !st[4])
        goto out;
    mt_depformer *df = NULL;
    if (dep_on && kc->dep_q > 0 &&
        (!strcmp(dep_on, "cuda") ? mt_depformer_create_cuda(lm, B, &df, err, sizeof err)
                                 : mt_depformer_create(lm, B, &df, err, sizeof err)))
        goto out;
    if (df && !strcmp(dep_on, "serial"))
        mt_depformer_set_serial(df);    /* the depformer before issue 49 */
    if (mt_decoder_create(lm->temporal, &o, &d, err, sizeof err)) {
        mt_depformer_free(df);
        goto out;
    }
    if (mt_kyutai_gen_create_with(lm, d, B, df, &g, err, sizeof err))
        goto out;
    mt_kv_pool *pool = mt_decoder_pool(d);
    for (int b = 0; b < B; b++)
        if (mt_kyutai_sess_open(g, 1000 + (uint64_t)b, NULL, &ss[b], err, sizeof err) ||
            mt_kv_seq_open(pool, &seqs[b])) {
            if (!err[0])
                snprintf(err, sizeof err, "kv pool full");
            goto out;
        }
    mt_rng r;
    mt_rng_seed(&r, 42);
    int warm = S + W + 2;       /* the ring full: every step reads S + W positions */
    for (int f = 0; f < warm + F; f++) {
        for (int i = 0; i < B * nu; i++)
            user[i] = (int32_t)(mt_rng_next(&r) % (uint64_t)kc->card);
        for (int b = 0; b < B; b++)
            if (mt_kv_reserve(pool, seqs[b], 1)) {
                snprintf(err, sizeof err, "kv reserve");
                goto out;
            }
        mt_kyutai_out io = { .text = text };
        if (mt_kyutai_step(g, B, seqs, ss, user, &io, err, sizeof err))
            goto out;
        if (f >= warm) {
            mt_kyutai_times t;
            mt_kyutai_last_times(g, &t);
            st[0][f - warm] = t.embed_ms;
            st[1][f - warm] = t.temporal_ms;
            st[2][f - warm] = t.depformer_ms;
            st[3][f - warm] = t.sample_ms;
            st[4][f - warm] = t.embed_ms + t.temporal_ms + t.depformer_ms + t.sample_ms;
        }
    }
    size_t kvb = (size_t)(S + W) * mt_decoder_position_bytes(&lm->temporal->cfg, 4);
    printf("kyutai device=%s depformer=%s dep_mode=%s model=%s B=%d S=%d W=%d frames=%d embed_ms=%.3f "
           "temporal_ms=%.3f depformer_ms=%.3f sample_ms=%.3f total_ms=%.3f "
           "per_frame_session_ms=%.3f session_kv_bytes=%zu session_other_bytes=%zu\n",
           dev_name, mt_kyutai_gen_dep_where(g), mt_kyutai_gen_dep_mode(g), lm->temporal->cfg.name, B, S, W, F, median(st[0], F), median(st[1], F),
           median(st[2], F), median(st[3], F), median(st[4], F), median(st[4], F) / B, kvb,
           mt_kyutai_session_bytes(kc));
    fflush(stdout);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "mt-benchkyutai: B=%d: %s\n", B, err);
    for (int b = 0; b < B && ss; b++)
        mt_kyutai_sess_close(ss[b]);
    if (d && seqs)
        mt_kv_seq_close_all(mt_decoder_pool(d), seqs, (size_t)B);
    mt_kyutai_gen_free(g);
    mt_decoder_free(d);
    free(ss);
    free(seqs);
    free(user);
    free(text);
    for (int i = 0; i < 5; i++)
        free(st[i]);
    return rc;
}

int main(int argc, char **argv)
{
    const char *model = "synthetic:kyutai-small", *bs = "1,8,32";
    int F = 40, S = 4, W = 252, threads = 0, c;
    while ((c = getopt(argc, argv, "m:d:D:b:f:S:W:t:w:r:")) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'd':
            dev_name = optarg;
            if (!strcmp(optarg, "cpu"))
                dev = MT_DEV_CPU;
            else if (!strcmp(optarg, "cuda"))
                dev = MT_DEV_CUDA;
            else if (!strncmp(optarg, "sim:", 4) && optarg[4]) {
                dev = MT_DEV_SIM;
                sim_profile = optarg + 4;
            } else {
                fprintf(stderr, "mt-benchkyutai: -d cpu, cuda or sim:PROFILE\n");
                return 2;
            }
            break;
        case 'D':
            if (strcmp(optarg, "host") && strcmp(optarg, "cuda") && strcmp(optarg, "serial")) {
                fprintf(stderr, "mt-benchkyutai: -D host, serial or cuda\n");
                return 2;
            }
            dep_on = optarg;
            break;
        case 'b': bs = optarg; break;
        case 'r': f16_rows = atoi(optarg); break;
        case 'w':
            if (mt_num_format_parse(optarg, &weights)) {
                fprintf(stderr, "mt-benchkyutai: -w f32 or f16\n");
                return 2;
            }
            break;
        case 'f': F = atoi(optarg); break;
        case 'S': S = atoi(optarg); break;
        case 'W': W = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: mt-benchkyutai [-m MODEL] [-d cpu|cuda|sim:PROFILE] "
                            "[-D host|cuda] [-b 1,8,32] [-f FRAMES] [-S S] [-W W] "
                            "[-t THREADS]\n");
            return 2;
        }
    }
    if (F < 1 || S < 0 || W < 1 || threads < 0) {
        fprintf(stderr, "mt-benchkyutai: bad -f, -S, -W or -t\n");
        return 2;
    }
    char err[512];
    mt_kyutai_lm *lm = NULL;
    if (mt_kyutai_load(model, dev == MT_DEV_CPU ? 0 : MT_KYUTAI_HOST_SIDE, &lm, err,
                       sizeof err)) {
        fprintf(stderr, "mt-benchkyutai: %s\n", err);
        return 1;
    }
    int rc = 0;
    char *list = strdup(bs);
    for (char *tok = list ? strtok(list, ",") : NULL; tok; tok = strtok(NULL, ",")) {
        int B = atoi(tok);
        if (B < 1 || bench(lm, B, F, S, W, threads))
            rc = 1;
    }
    free(list);
    mt_kyutai_free(lm);
    return rc;
}
