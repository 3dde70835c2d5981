/* quality.c: `mt-probe quality`, quality under the bound.
 *
 * The paper's second claim is that bounding the cache keeps quality, and
 * that a few sink positions are what keep a sliding window coherent. This
 * probe measures it on a trained byte-level model with the same C decoder
 * the server runs, so what it reports is what a bounded session gets:
 *
 *   stream mode   K streams of N positions, each [BOS, b0 .. b(N-2)]
 *                 predicting [b0 .. b(N-1)], stepped one position at a time
 *                 (the K streams are one batch) under one policy; prints the
 *                 mean NLL and perplexity per position bucket, overall,
 *                 within the training context T and past it, and optionally
 *                 the mean NLL of every position (--per-position).
 *   chunked mode  (--chunk N) the training script's own evaluation:
 *                 non-overlapping chunks of N bytes, each read after BOS
 *                 with a fresh full cache, prefilled in one call.
 *   generation    (--gen-prompt) BOS + prompt, then --gen-tokens sampled
 *                 bytes under the same policy; prints the share of repeated
 *                 word 4-grams, word distinct-1..4 and byte-level rep4, and
 *                 the same figures for an equally long slice of --text (the
 *                 natural level).
 *
 * Policies (a pool of one policy per decoder):
 *   full         slot = position: nothing is ever dropped, positions run
 *                past the training context T.
 *   window       S = 0, a ring of W (default T) positions.
 *   window+sink  S sinks (default 4) + a ring of W (default T - S).
 *   recompute    the gold standard: at every step, the kept tokens (the
 *                first S, default 0, and the last W, default T - S) are
 *                recomputed from scratch at positions 0 .. S+W-1 on a
 *                full-policy sequence (released and prefilled each step).
 *
 * The experiments only: the options of `mt-probe quality` are read in
 * src/cmd/quality_cmd.c, which prints the records this file hands back;
 * errors come back in err.
 * The decoder runs on the CPU backend with --threads threads (default 1:
 * the probe is meant to run beside others).
 */
#define _GNU_SOURCE
#include "probe/quality.h"
#include "probe/progress.h"
#include "decode/decoder.h"
#include "decode/kv.h"
#include "model/model.h"
#include "util/clock.h"
#include "util/errmsg.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_TEXT_BYTES (256u << 20)

const char *const mt_quality_policy_names[] = { "full", "window", "window+sink",
                                                "recompute", NULL };

/* ---- small helpers -------------------------------------------------------- */

/* Reads a whole file; bytes >= 128 become '?' as in the model's tokenizer
 * (7-bit text). */
static int read_text(const char *path, unsigned char **out, size_t *len,
                     char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_set_err(err, errlen, "%s: %s", path, strerror(errno)), -1;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return mt_set_err(err, errlen, "%s: out of memory", path), -1;
    }
    for (;;) {
        if (n == cap) {
            if (cap >= MAX_TEXT_BYTES) {
                free(buf);
                fclose(f);
                return mt_set_err(err, errlen, "%s: larger than %u bytes", path,
                                MAX_TEXT_BYTES), -1;
            }
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return mt_set_err(err, errlen, "%s: out of memory", path), -1;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return mt_set_err(err, errlen, "%s: read error", path), -1;
    }
    for (size_t i = 0; i < n; i++)
        if (buf[i] >= 128)
            buf[i] = '?';
    *out = buf;
    *len = n;
    return 0;
}

/* The training context and BOS id from DIR/config.json
 * (max_position_embeddings, bos_token_id); left alone when absent. */
static void config_extras(const char *spec, int *ctx, int *bos)
{
    struct stat st;
    if (stat(spec, &st) || !S_ISDIR(st.st_mode))
        return;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", spec) >= (int)sizeof path)
        return;
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        return;
    json_t *v = json_object_get(j, "max_position_embeddings");
    if (json_is_integer(v) && json_integer_value(v) > 0 &&
        json_integer_value(v) <= (1 << 20))
        *ctx = (int)json_integer_value(v);
    v = json_object_get(j, "bos_token_id");
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) < (1 << 30))
        *bos = (int)json_integer_value(v);
    json_decref(j);
}

/* -log softmax(logits)[target], in double. */
static double nll_of(const float *logits, int vocab, int target)
{
    float mx = logits[0];
    for (int i = 1; i < vocab; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double s = 0;
    for (int i = 0; i < vocab; i++)
        s += exp((double)logits[i] - mx);
    return log(s) + mx - (double)logits[target];
}

/* ---- a runner: B sequences advanced one position per call ----------------- */

typedef struct runner {
    mt_decoder *d;
    mt_kv_pool *pool;
    int         B, vocab;
    mt_kv_seq **seq;
    float      *logits;        /* [B, vocab] */
    /* recompute */
    int         recompute, rs, rw;
    int32_t    *hist;          /* [B, hcap] tokens fed so far */
    int32_t    *list;          /* [rs + rw] */
    int64_t     hlen, hcap;
} runner;

static void runner_free(runner *r)
{
    mt_kv_seq_close_all(r->pool, r->seq, (size_t)r->B);
    free(r->seq);
    mt_decoder_free(r->d);
    free(r->logits);
    free(r->hist);
    free(r->list);
    memset(r, 0, sizeof *r);
}

/* positions: the most positions one sequence will hold. */
static int runner_init(runner *r, const mt_model *m, const mt_quality_opts *o, int S,
                       int W, int B, int64_t positions, char *err,
                       size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->B = B;
    r->vocab = m->cfg.vocab;
    mt_decoder_opts dop;
    memset(&dop, 0, sizeof dop);
    dop.device = MT_DEV_CPU;
    dop.max_batch = B;
    dop.threads = o->threads;
    /* fp32, the widest K/V element a CPU decoder stores: enough in any dtype */
    size_t pb = mt_decoder_position_bytes(&m->cfg, sizeof(float));
    int64_t per_seq;
    if (o->pol == MT_QUALITY_FULL || o->pol == MT_QUALITY_RECOMPUTE) {
        dop.kv.policy = MT_KV_FULL;
        per_seq = o->pol == MT_QUALITY_FULL ? positions : S + W;
    } else {
        dop.kv.policy = MT_KV_WINDOW;
        dop.kv.sink = S;
        dop.kv.window = W;
        per_seq = S + W;
    }
    dop.kv.rope = o->rope;
    int64_t blocks = (per_seq + MT_KV_BLOCK - 1) / MT_KV_BLOCK + 1;
    dop.kv.budget_bytes = (size_t)(blocks * B) * MT_KV_BLOCK * pb;
    if (mt_decoder_create(m, &dop, &r->d, err, errlen))
        return -1;
    r->pool = mt_decoder_pool(r->d);
    r->seq = calloc((size_t)B, sizeof *r->seq);
    r->logits = malloc((size_t)B * r->vocab * sizeof *r->logits);
    if (!r->seq || !r->logits)
        goto oom;
    for (int b = 0; b < B; b++)
        if (mt_kv_seq_open(r->pool, &r->seq[b])) {
            mt_set_err(err, errlen, "kv: cannot open sequence %d of %d", b, B);
            runner_free(r);
            return -1;
        }
    if (o->pol == MT_QUALITY_RECOMPUTE) {
        r->recompute = 1;
        r->rs = S;
        r->rw = W;
        r->hcap = positions;
        r->hist = malloc((size_t)B * (size_t)positions * sizeof *r->hist);
        r->list = malloc((size_t)(S + W) * sizeof *r->list);
        if (!r->hist || !r->list)
            goto oom;
    }
    return 0;
oom:
    runner_free(r);
    mt_set_err(err, errlen, "out of memory");
    return -1;
}

/* Feeds tok[b] to sequence b at the next position; logits in r->logits. */
static int runner_step(runner *r, const int32_t *tok, char *err, size_t errlen)
{
    if (r->recompute) {
        if (r->hlen >= r->hcap)
            return mt_set_err(err, errlen, "recompute: history full"), -1;
        int64_t p = r->hlen;
        for (int b = 0; b < r->B; b++)
            r->hist[(size_t)b * r->hcap + p] = tok[b];
        r->hlen++;
        int L = r->rs + r->rw;
        if (p >= L) {
            /* Rebuild each sequence from the kept tokens: sinks, then the
             * last rw - 1 before this one; this one is the batched step. */
            for (int b = 0; b < r->B; b++) {
                const int32_t *h = r->hist + (size_t)b * r->hcap;
                int n = 0;
                for (int i = 0; i < r->rs; i++)
                    r->list[n++] = h[i];
                for (int64_t i = p - r->rw + 1; i < p; i++)
                    r->list[n++] = h[i];
                mt_kv_release(r->pool, r->seq[b]);
                if (mt_kv_reserve(r->pool, r->seq[b], n))
                    return mt_set_err(err, errlen, "recompute: kv reserve of %d failed", n), -1;
                mt_step_io io = { .tokens_in = r->list };
                if (n > 0 && mt_decoder_prefill(r->d, r->seq[b], n, &io, err, errlen))
                    return -1;
            }
        }
    }
    for (int b = 0; b < r->B; b++)
        if (mt_kv_reserve(r->pool, r->seq[b], 1))
            return mt_set_err(err, errlen, "kv: pool exhausted at position %lld",
                            (long long)r->seq[b]->len), -1;
    mt_step_io io = { .tokens_in = tok, .logits = r->logits };
    return mt_decoder_step(r->d, r->B, r->seq, &io, err, errlen);
}

/* ---- n-gram statistics ------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static size_t count_unique(uint64_t *k, size_t n)
{
    if (!n)
        return 0;
    qsort(k, n, sizeof *k, cmp_u64);
    size_t u = 1;
    for (size_t i = 1; i < n; i++)
        u += k[i] != k[i - 1];
    return u;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

typedef mt_quality_ngrams ngram_stats;

/* Words are maximal runs of non-space bytes, compared exactly (by a 64-bit
 * hash). A statistic with no n-gram to count is NAN. */
static int ngrams(const unsigned char *s, size_t n, ngram_stats *st)
{
    memset(st, 0, sizeof *st);
    st->bytes = n;
    uint64_t *w = malloc((n + 1) * sizeof *w);
    uint64_t *k = malloc((n + 1) * sizeof *k);
    if (!w || !k) {
        free(w);
        free(k);
        return -1;
    }
    size_t nw = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r'))
            i++;
        if (i >= n)
            break;
        uint64_t h = 1469598103934665603ULL;
        while (i < n && !(s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r'))
            h = (h ^ s[i++]) * 1099511628211ULL;
        w[nw++] = h;
    }
    st->words = nw;
    for (int g = 1; g <= 4; g++) {
        size_t m = 0;
        for (size_t i = 0; i + g <= nw; i++) {
            uint64_t h = 0;
            for (int j = 0; j < g; j++)
                h = mix64(h ^ w[i + j]) + (uint64_t)j;
            k[m++] = h;
        }
        st->distinct[g - 1] = m ? (double)count_unique(k, m) / m : NAN;
    }
    st->rep4 = 1.0 - st->distinct[3];
    size_t m = 0;
    for (size_t i = 0; i + 4 <= n; i++)
        k[m++] = (uint64_t)s[i] | (uint64_t)s[i + 1] << 8 |
                 (uint64_t)s[i + 2] << 16 | (uint64_t)s[i + 3] << 24;
    st->rep4_bytes = m ? 1.0 - (double)count_unique(k, m) / m : NAN;
    free(w);
    free(k);
    return 0;
}

/* ---- sampling ------------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    return mix64(z);
}

/* Byte 0..255 (BOS and any other non-byte id are never sampled): argmax at
 * temperature 0, else softmax(logits / temperature). */
static int sample_byte(const float *logits, double temp, uint64_t *rng,
                       double *p)
{
    int best = 0;
    for (int i = 1; i < 256; i++)
        if (logits[i] > logits[best])
            best = i;
    if (temp <= 0)
        return best;
    double sum = 0;
    for (int i = 0; i < 256; i++) {
        p[i] = exp(((double)logits[i] - logits[best]) / temp);
        sum += p[i];
    }
    double u = (double)(splitmix(rng) >> 11) * 0x1.0p-53 * sum;
    for (int i = 0; i < 256; i++) {
        u -= p[i];
        if (u < 0)
            return i;
    }
    return best;
}

/* ---- the runs -------------------------------------------------------------------- */

static void policy_shape(const mt_quality_opts *o, int T, int *S, int *W)
{
    switch (o->pol) {
    case MT_QUALITY_FULL:
        *S = 0; *W = 0;
        break;
    case MT_QUALITY_WINDOW:
        *S = 0;
        *W = o->window >= 0 ? o->window : T;
        break;
    case MT_QUALITY_WINDOW_SINK:
        *S = o->sink >= 0 ? o->sink : 4;
        *W = o->window >= 0 ? o->window : T - *S;
        break;
    case MT_QUALITY_RECOMPUTE:
        *S = o->sink >= 0 ? o->sink : 0;
        *W = o->window >= 0 ? o->window : T - *S;
        break;
    }
}

/* Where the records go, and the run's shape every record carries. */
typedef struct sink_to {
    mt_quality_emit_fn emit;
    void              *ctx;
} sink_to;

static mt_quality_record record_of(const mt_quality_opts *o, mt_quality_kind kind, int S,
                                   int W, int T)
{
    mt_quality_record r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    r.pol = o->pol;
    r.sink = S;
    r.window = W;
    r.ctx = T;
    r.rope = o->rope;
    r.nll = r.nll_within_ctx = r.nll_past_ctx = r.gen_nll = r.ref_nll = NAN;
    return r;
}

static int run_stream(const mt_model *m, const mt_quality_opts *o, int S, int W, int T,
                      int bos, const unsigned char *text, size_t tlen, const sink_to *to_,
                      char *err, size_t errlen)
{
    int N = o->length, K = o->streams;
    if ((size_t)o->offset + (size_t)N * K > tlen)
        return mt_set_err(err, errlen,
                        "--text has %zu bytes; %d stream(s) of %d from offset %d need %zu",
                        tlen, K, N, o->offset, (size_t)o->offset + (size_t)N * K), -1;
    runner r;
    if (runner_init(&r, m, o, S, W, K, N, err, errlen))
        return -1;
    double *sum = calloc((size_t)N, sizeof *sum);
    int32_t *tok = malloc((size_t)K * sizeof *tok);
    int rc = -1;
    if (!sum || !tok) {
        mt_set_err(err, errlen, "out of memory");
        goto out;
    }
    mt_progress pg;
    mt_progress_start(&pg, o->progress != NULL, o->progress, "quality", mt_clock_ns());
    for (int p = 0; p < N; p++) {
        mt_progress_show(&pg, mt_clock_ns(), 0, "position", p, N, NULL);
        for (int k = 0; k < K; k++) {
            const unsigned char *s = text + o->offset + (size_t)k * N;
            tok[k] = p == 0 ? bos : s[p - 1];
        }
        if (runner_step(&r, tok, err, errlen)) {
            mt_progress_clear(&pg);
            goto out;
        }
        for (int k = 0; k < K; k++) {
            const unsigned char *s = text + o->offset + (size_t)k * N;
            sum[p] += nll_of(r.logits + (size_t)k * r.vocab, r.vocab, s[p]);
        }
    }
    mt_progress_clear(&pg);
    if (o->per_position) {
        FILE *f = fopen(o->per_position, "w");
        if (!f) {
            mt_set_err(err, errlen, "%s: %s", o->per_position, strerror(errno));
            goto out;
        }
        fprintf(f, "# position\tnll (nats/byte, mean over %d stream(s))\n", K);
        for (int p = 0; p < N; p++)
            fprintf(f, "%d\t%.9g\n", p, sum[p] / K);
        if (fclose(f)) {
            mt_set_err(err, errlen, "%s: write error", o->per_position);
            goto out;
        }
    }
    int nb = o->buckets < N ? o->buckets : N;
    for (int b = 0; b < nb; b++) {
        int from = (int)((int64_t)b * N / nb), to = (int)((int64_t)(b + 1) * N / nb);
        double s = 0;
        for (int p = from; p < to; p++)
            s += sum[p];
        mt_quality_record rec = record_of(o, MT_QREC_BUCKET, S, W, T);
        rec.streams = K;
        rec.bucket = b + 1;
        rec.buckets = nb;
        rec.from = from;
        rec.to = to;
        rec.nll = s / ((double)(to - from) * K);
        to_->emit(to_->ctx, &rec);
    }
    double all = 0, in = 0, past = 0;
    int nin = N < T ? N : T;
    for (int p = 0; p < N; p++) {
        all += sum[p];
        if (p < T)
            in += sum[p];
        else
            past += sum[p];
    }
    mt_quality_record rec = record_of(o, MT_QREC_ALL, S, W, T);
    rec.streams = K;
    rec.from = 0;
    rec.to = N;
    rec.nll = all / ((double)N * K);
    rec.nll_within_ctx = in / ((double)nin * K);
    if (N > T)
        rec.nll_past_ctx = past / ((double)(N - T) * K);
    to_->emit(to_->ctx, &rec);
    rc = 0;
out:
    free(sum);
    free(tok);
    runner_free(&r);
    return rc;
}

/* train.py's evaluate(): chunks of C bytes, [BOS, c0..c(C-2)] -> [c0..c(C-1)],
 * each on a fresh full cache, one prefill per chunk. Mean NLL into *nll. */
static int chunked_nll(const mt_model *m, const mt_quality_opts *o, int C, int bos,
                       const unsigned char *text, size_t nchunks, size_t stride,
                       double *nll, char *err, size_t errlen)
{
    mt_quality_opts full = *o;
    full.pol = MT_QUALITY_FULL;
    runner r;
    if (runner_init(&r, m, &full, 0, 0, 1, C, err, errlen))
        return -1;
    int32_t *tok = malloc((size_t)C * sizeof *tok);
    float *logits = malloc((size_t)C * r.vocab * sizeof *logits);
    int rc = -1;
    double tot = 0;
    if (!tok || !logits) {
        mt_set_err(err, errlen, "out of memory");
        goto out;
    }
    mt_progress pg;
    mt_progress_start(&pg, o->progress != NULL, o->progress, "quality", mt_clock_ns());
    for (size_t c = 0; c < nchunks; c++) {
        mt_progress_show(&pg, mt_clock_ns(), 0, "chunk", (double)c, (double)nchunks, NULL);
        const unsigned char *s = text + c * stride * (size_t)C;
        tok[0] = bos;
        for (int i = 1; i < C; i++)
            tok[i] = s[i - 1];
        mt_kv_release(r.pool, r.seq[0]);
        if (mt_kv_reserve(r.pool, r.seq[0], C)) {
            mt_set_err(err, errlen, "kv: reserve of %d failed", C);
            goto out;
        }
        mt_step_io io = { .tokens_in = tok, .logits = logits };
        if (mt_decoder_prefill(r.d, r.seq[0], C, &io, err, errlen))
            goto out;
        for (int i = 0; i < C; i++)
            tot += nll_of(logits + (size_t)i * r.vocab, r.vocab, s[i]);
    }
    *nll = tot / ((double)nchunks * C);
    rc = 0;
out:
    mt_progress_clear(&pg);
    free(tok);
    free(logits);
    runner_free(&r);
    return rc;
}

static int run_chunked(const mt_model *m, const mt_quality_opts *o, int T, int bos,
                       const unsigned char *text, size_t tlen, const sink_to *to_,
                       char *err, size_t errlen)
{
    int C = o->chunk;
    size_t stride = o->chunk_stride > 0 ? (size_t)o->chunk_stride : 1;
    size_t nchunks = (tlen / (size_t)C + stride - 1) / stride;
    if (o->max_chunks > 0 && nchunks > (size_t)o->max_chunks)
        nchunks = (size_t)o->max_chunks;
    if (!nchunks)
        return mt_set_err(err, errlen, "--text is shorter than one chunk of %d bytes", C), -1;
    double nll;
    if (chunked_nll(m, o, C, bos, text, nchunks, stride, &nll, err, errlen))
        return -1;
    mt_quality_opts full = *o;
    full.pol = MT_QUALITY_FULL;
    mt_quality_record rec = record_of(&full, MT_QREC_CHUNKED, 0, 0, T);
    rec.chunk = C;
    rec.stride = stride;
    rec.chunks = nchunks;
    rec.nll = nll;
    to_->emit(to_->ctx, &rec);
    return 0;
}

/* The n-gram figures of buf[0..n) and the model's own judgement of it,
 * within its training context: the bytes in T-byte chunks, each after BOS
 * on a fresh full cache (garbled text scores high, loops score low); *nll
 * NAN when n < T. For the generated text and the reference alike. */
static int text_figures(const mt_model *m, const mt_quality_opts *o, int T, int bos,
                        const unsigned char *buf, size_t n, ngram_stats *g,
                        double *nll, char *err, size_t errlen)
{
    if (ngrams(buf, n, g)) {
        mt_set_err(err, errlen, "out of memory");
        return -1;
    }
    *nll = NAN;
    if (n >= (size_t)T && chunked_nll(m, o, T, bos, buf, n / T, 1, nll, err, errlen))
        return -1;
    return 0;
}

static int run_generation(const mt_model *m, const mt_quality_opts *o, int S, int W, int T,
                          int bos, const unsigned char *text, size_t tlen,
                          const sink_to *to_, char *err, size_t errlen)
{
    size_t plen = strlen(o->gen_prompt);
    int G = o->gen_tokens;
    runner r;
    if (runner_init(&r, m, o, S, W, 1, (int64_t)plen + 1 + G, err, errlen))
        return -1;
    mt_progress pg;
    mt_progress_start(&pg, o->progress != NULL, o->progress, "quality", mt_clock_ns());
    unsigned char *out = malloc((size_t)G + 1);
    double p[256];
    uint64_t rng = o->seed;
    int rc = -1;
    if (!out) {
        mt_set_err(err, errlen, "out of memory");
        goto done;
    }
    int32_t t = bos;
    if (runner_step(&r, &t, err, errlen))
        goto done;
    for (size_t i = 0; i < plen; i++) {
        t = (unsigned char)o->gen_prompt[i] < 128 ? (unsigned char)o->gen_prompt[i] : '?';
        if (runner_step(&r, &t, err, errlen))
            goto done;
    }
    for (int i = 0; i < G; i++) {
        mt_progress_show(&pg, mt_clock_ns(), 0, "generated byte", i, G, NULL);
        out[i] = (unsigned char)sample_byte(r.logits, o->temperature, &rng, p);
        if (i + 1 < G) {
            t = out[i];
            if (runner_step(&r, &t, err, errlen))
                goto done;
        }
    }
    mt_progress_clear(&pg);
    mt_quality_record rec = record_of(o, MT_QREC_GENERATION, S, W, T);
    rec.prompt_bytes = plen;
    rec.tokens = G;
    rec.seed = o->seed;
    rec.temperature = o->temperature;
    if (text_figures(m, o, T, bos, out, (size_t)G, &rec.gen, &rec.gen_nll, err, errlen))
        goto done;
    if (text && tlen >= (size_t)G) {
        /* The natural level: the same figures over G bytes of the text. */
        rec.has_ref = 1;
        if (text_figures(m, o, T, bos, text, (size_t)G, &rec.ref, &rec.ref_nll, err, errlen))
            goto done;
    }
    to_->emit(to_->ctx, &rec);
    if (o->gen_out) {
        FILE *f = fopen(o->gen_out, "wb");
        if (!f || fwrite(o->gen_prompt, 1, plen, f) != plen ||
            fwrite(out, 1, (size_t)G, f) != (size_t)G) {
            mt_set_err(err, errlen, "%s: %s", o->gen_out, strerror(errno));
            if (f)
                fclose(f);
            goto done;
        }
        if (fclose(f)) {
            mt_set_err(err, errlen, "%s: write error", o->gen_out);
            goto done;
        }
    }
    rc = 0;
done:
    mt_progress_clear(&pg);
    free(out);
    runner_free(&r);
    return rc;
}

/* ---- one run -------------------------------------------------------------- */

void mt_quality_opts_default(mt_quality_opts *o)
{
    memset(o, 0, sizeof *o);
    o->pol = MT_QUALITY_WINDOW_SINK;
    o->sink = o->window = -1;
    o->rope = MT_ROPE_CACHE;
    o->streams = 1;
    o->buckets = 8;
    o->seed = 1;
    o->temperature = 0.8;
    o->threads = 1;
}

int mt_quality_run(const mt_quality_opts *opts, mt_quality_emit_fn emit, void *ctx,
                   char *err, size_t errlen)
{
    mt_quality_opts o = *opts;
    const sink_to to = { emit, ctx };
    mt_model *m = NULL;
    if (mt_model_load(o.model, 0, &m, err, errlen))
        return -1;
    int T = 256, bos = 256;
    char mdir[4096];
    if (mt_model_resolve(o.model, mdir, sizeof mdir) != 0)
        snprintf(mdir, sizeof mdir, "%s", o.model);
    config_extras(mdir, &T, &bos);   /* -m fortune-byte: the directory found */
    if (o.ctx)
        T = o.ctx;
    int rc = -1;
    unsigned char *text = NULL;
    size_t tlen = 0;
    if (!m->cfg.has_tokens || m->cfg.vocab < 257 || bos < 256 || bos >= m->cfg.vocab) {
        mt_set_err(err, errlen,
                 "%s: not a byte-level token model (vocab %d, bos %d; need ids "
                 "0..255 = bytes and a BOS id >= 256)", o.model, m->cfg.vocab, bos);
        goto out;
    }
    if (!o.length)
        o.length = 8 * T;
    if (!o.gen_tokens)
        o.gen_tokens = 4 * T;
    int S = 0, W = 0;
    policy_shape(&o, T, &S, &W);
    if (o.pol != MT_QUALITY_FULL && W < 1) {
        mt_set_err(err, errlen, "window of %d positions (sink %d, ctx %d): give --window", W, S, T);
        goto out;
    }
    if (o.text && read_text(o.text, &text, &tlen, err, errlen))
        goto out;
    if (o.gen_only) {
        /* generation only */
    } else if (o.text && o.chunk) {
        if (run_chunked(m, &o, T, bos, text, tlen, &to, err, errlen))
            goto out;
    } else if (o.text) {
        if (run_stream(m, &o, S, W, T, bos, text, tlen, &to, err, errlen))
            goto out;
    }
    if (o.gen_prompt &&
        run_generation(m, &o, S, W, T, bos, text, tlen, &to, err, errlen))
        goto out;
    rc = 0;
out:
    free(text);
    mt_model_free(m);
    return rc;
}
