/* mt-refdump.c: test helper for tests/integration/reference.sh. Runs the C
 * decoder over the input schedule that tests/reference/llama_ref.py also
 * implements, and writes the outputs for the reference to compare:
 *
 *   sessions b = 0..n-1 start at step starts[b]; at step t every started
 *   session is stepped at its position i = t - starts[b], all as one batch
 *   in order of b (so the batch grows and its sessions differ in length).
 *     token input:  id = (b * 7919 + i * 104729 + 13) % vocab
 *     audio input:  pcm[k] = ((b * 131 + i * 17 + k * 7) % 2001 - 1000) * 8
 *   output per stepped session, in order: logits (float32 [vocab]) or
 *   output pcm (int16 [frame_samples]).
 * --kv-dtype f16 and --weights f16 run the CPU backend with its K/V cache
 * and its weights in IEEE half (llama_ref.py --kv-dtype / --weights round
 * the same values to float16).
 *
 * --pos-stride K gives each input its rotary position 3 * b + K * i
 * (mt_step_io.positions), as llama_ref.py --pos-stride does.
 *
 * Also saves a model (--save DIR --dtype f32|f16|bf16), so the test can make
 * a safetensors file that both sides read.
 */
#include "decode/decoder.h"
#include "model/model.h"
#include "test_util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mt-refdump --model SPEC --save DIR [--dtype f32|f16|bf16]\n"
            "       mt-refdump --model SPEC --policy full|window [--sink S] [--window W]\n"
            "                  [--rope cache|absolute] --starts 0,5,11 --steps N\n"
            "                  [--input tokens|audio] [--threads T] [--kv-dtype f32|f16]\n"
            "                  [--weights f32|f16] [--pos-stride K] --out FILE\n");
}

int main(int argc, char **argv)
{
    const char *spec = NULL, *save = NULL, *out = NULL, *starts_s = "0";
    const char *policy = "window", *rope = "cache", *input = "tokens", *dtype = "f32";
    int sink = 4, window = 16, steps = 0, threads = 1, pos_stride = 0;
    mt_num_format kv_dtype = MT_FMT_F32, weights = MT_FMT_F32;
    static const struct option lo[] = {
        { "model", 1, 0, 'm' }, { "save", 1, 0, 'S' },   { "dtype", 1, 0, 'd' },
        { "policy", 1, 0, 'p' }, { "sink", 1, 0, 's' },  { "window", 1, 0, 'w' },
        { "rope", 1, 0, 'r' },   { "starts", 1, 0, 'b' }, { "steps", 1, 0, 'n' },
        { "input", 1, 0, 'i' },  { "threads", 1, 0, 't' }, { "out", 1, 0, 'o' },
        { "kv-dtype", 1, 0, 'K' }, { "weights", 1, 0, 'W' }, { "pos-stride", 1, 0, 'P' },
        { "help", 0, 0, 'h' },   { 0, 0, 0, 0 }
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "m:S:d:p:s:w:r:b:n:i:t:o:h", lo, NULL)) != -1) {
        switch (ch) {
        case 'm': spec = optarg; break;
        case 'S': save = optarg; break;
        case 'd': dtype = optarg; break;
        case 'p': policy = optarg; break;
        case 's': sink = atoi(optarg); break;
        case 'w': window = atoi(optarg); break;
        case 'r': rope = optarg; break;
        case 'b': starts_s = optarg; break;
        case 'n': steps = atoi(optarg); break;
        case 'i': input = optarg; break;
        case 't': threads = atoi(optarg); break;
        case 'o': out = optarg; break;
        case 'K':
            if (mt_num_format_parse(optarg, &kv_dtype)) {
                usage(stderr);
                return 2;
            }
            break;
        case 'W':
            if (mt_num_format_parse(optarg, &weights)) {
                usage(stderr);
                return 2;
            }
            break;
        case 'P': pos_stride = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!spec || (!save && (!out || steps < 1))) {
        usage(stderr);
        return 2;
    }
    char err[512] = "";
    mt_model *m = NULL;
    if (mt_model_load(spec, 0, &m, err, sizeof err)) {
        fprintf(stderr, "mt-refdump: %s\n", err);
        return 1;
    }
    if (save) {
        mt_dtype dt = !strcmp(dtype, "f16") ? MT_DT_F16 : !strcmp(dtype, "bf16") ? MT_DT_BF16 : MT_DT_F32;
        int rc = mt_model_save(m, save, dt, err, sizeof err);
        if (rc)
            fprintf(stderr, "mt-refdump: %s\n", err);
        mt_model_free(m);
        return rc ? 1 : 0;
    }

    int nb = 1;
    for (const char *p = starts_s; *p; p++)
        nb += *p == ',';
    int *starts = calloc((size_t)nb, sizeof *starts);
    mt_kv_seq **seqs = calloc((size_t)nb, sizeof *seqs);
    mt_kv_seq **batch = calloc((size_t)nb, sizeof *batch);
    int *bidx = calloc((size_t)nb, sizeof *bidx);
    const mt_config *c = &m->cfg;
    int audio = !strcmp(input, "audio");
    int fs = c->frame_samples;
    int16_t *pcm_in = calloc((size_t)nb * fs, sizeof *pcm_in);
    int16_t *pcm_out = calloc((size_t)nb * fs, sizeof *pcm_out);
    int32_t *tok = calloc((size_t)nb, sizeof *tok);
    int64_t *rpos = calloc((size_t)nb, sizeof *rpos);
    float *logits = calloc((size_t)nb * (c->vocab > 0 ? c->vocab : 1), sizeof *logits);
    if (!starts || !seqs || !batch || !bidx || !pcm_in || !pcm_out || !tok || !rpos || !logits) {
        fprintf(stderr, "mt-refdump: out of memory\n");
        return 1;
    }
    const char *p = starts_s;
    for (int b = 0; b < nb; b++) {
        starts[b] = atoi(p);
        p = strchr(p, ',');
        p = p ? p + 1 : "";
    }
    /* weights_f16_rows = nb: every step of the batch takes the f16 path */
    mt_decoder_opts o = { .device = MT_DEV_CPU, .max_batch = nb, .threads = threads,
                          .kv_dtype = kv_dtype, .weights = weights,
                          .weights_f16_rows = nb };
    o.kv.policy = !strcmp(policy, "full") ? MT_KV_FULL : MT_KV_WINDOW;
    o.kv.rope = !strcmp(rope, "absolute") ? MT_ROPE_ABSOLUTE : MT_ROPE_CACHE;
    o.kv.sink = sink;
    o.kv.window = window;
    size_t pb = mt_decoder_position_bytes(c, mt_num_format_bytes(kv_dtype));
    size_t per = o.kv.policy == MT_KV_FULL ? (size_t)(steps / MT_KV_BLOCK + 2) * MT_KV_BLOCK
                                           : (size_t)((sink + window) / MT_KV_BLOCK + 2) * MT_KV_BLOCK;
    o.kv.budget_bytes = per * pb * (size_t)nb;
    mt_decoder *d = NULL;
    if (mt_decoder_create(m, &o, &d, err, sizeof err)) {
        fprintf(stderr, "mt-refdump: %s\n", err);
        return 1;
    }
    mt_kv_pool *pool = mt_decoder_pool(d);
    for (int b = 0; b < nb; b++)
        if (mt_kv_seq_open(pool, &seqs[b])) {
            fprintf(stderr, "mt-refdump: cannot open session %d\n", b);
            return 1;
        }
    FILE *f = fopen(out, "wb");
    if (!f) {
        perror(out);
        return 1;
    }
    int rc = 0;
    for (int t = 0; t < steps && !rc; t++) {
        int B = 0;
        for (int b = 0; b < nb; b++) {
            if (t < starts[b])
                continue;
            int64_t i = t - starts[b];
            if (mt_kv_reserve(pool, seqs[b], 1)) {
                fprintf(stderr, "mt-refdump: kv exhausted\n");
                rc = 1;
                break;
            }
            tok[B] = (int32_t)((b * 7919LL + i * 104729LL + 13) % (c->vocab > 0 ? c->vocab : 1));
            for (int k = 0; k < fs; k++)
                pcm_in[(size_t)B * fs + k] = (int16_t)(((b * 131LL + i * 17 + k * 7LL) % 2001 - 1000) * 8);
            rpos[B] = 3LL * b + (int64_t)pos_stride * i;
            bidx[B] = b;
            batch[B++] = seqs[b];
        }
        if (rc || B == 0)
            continue;
        mt_step_io io = test_step_io(audio, pcm_in, pcm_out, tok, logits);
        if (pos_stride > 0)
            io.positions = rpos;
        if (mt_decoder_step(d, B, batch, &io, err, sizeof err)) {
            fprintf(stderr, "mt-refdump: step %d: %s\n", t, err);
            rc = 1;
            break;
        }
        size_t w = audio ? fwrite(pcm_out, sizeof *pcm_out, (size_t)B * fs, f)
                         : fwrite(logits, sizeof *logits, (size_t)B * c->vocab, f);
        if (w != (audio ? (size_t)B * fs : (size_t)B * c->vocab)) {
            perror(out);
            rc = 1;
        }
    }
    if (fclose(f) && !rc) {
        perror(out);
        rc = 1;
    }
    for (int b = 0; b < nb; b++)
        mt_kv_seq_close(pool, seqs[b]);
    mt_decoder_free(d);
    mt_model_free(m);
    free(starts); free(seqs); free(batch); free(bidx);
    free(pcm_in); free(pcm_out); free(tok); free(rpos); free(logits);
    return rc;
}
