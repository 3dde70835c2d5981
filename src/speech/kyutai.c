/* kyutai.c: Kyutai's LM frame for a batch of sessions (kyutai.h): the
 * delayed token streams, the temporal step on the decoder, the depformer,
 * Kyutai's sampling with a generator per session. */
#include "util/errmsg.h"
#include "util/clock.h"
#include "util/grow.h"
#include "util/rng.h"
#include "speech/kyutai.h"
#include "decode/depformer.h"
#include "util/vec8.h"

#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
#include <immintrin.h>
#endif
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
    int     nthreads;      /* the decoder's (mt_decoder_threads) */
    float   *sv;           /* [nthreads, V] each thread's copy of a row's logits */
    int     *si;           /* [nthreads, V] its top-k candidates; V = max(text_card_out, card) */
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
    free(g->sv);
    free(g->si);
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

const char *mt_kyutai_gen_dep_mode(const mt_kyutai_gen *g)
{
    return g->df ? mt_depformer_mode(g->df) : "none";
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
    g->dlog = mt_alloc_lines(R * (size_t)kc->card * sizeof(float));   /* column halves */
    g->in = malloc(R * (size_t)(1 + kc->n_q) * sizeof(int32_t));
    g->tok = malloc(R * sizeof(int32_t));
    g->text = malloc(R * sizeof(int32_t));
    g->audio = malloc(R * (size_t)(kc->dep_q + 1) * sizeof(int32_t));
    int dev_ok = 1;
    const char *ds = getenv("MT_CUDA_DEVICE_SAMPLING");
    if (df && mt_depformer_can_frame(df) && ds && !strcmp(ds, "1")) {
        g->dev_sample = 1;
        g->s_temp = malloc(R * sizeof(float));
        g->s_topk = malloc(R * sizeof(int));
        g->s_greedy = malloc(R * sizeof(int));
        g->s_rng = malloc(R * 4 * sizeof(uint64_t));
        dev_ok = g->s_temp && g->s_topk && g->s_greedy && g->s_rng;
    }
    if (!g->x || !g->h || !g->tlog || !g->dlog || !g->in || !g->tok || !g->text || !g->audio ||
        !dev_ok) {
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
    /* a host depformer on the decoder's threads (and its f16 copies) */
    if (!rc && g->df)
        rc = mt_depformer_attach(g->df, dec, err, errlen);
    /* the sampling's scratch per thread, counted once attaching has given
     * a sim or CUDA decoder its host threads (mt_decoder_host_threads) */
    if (!rc) {
        g->nthreads = mt_decoder_threads(dec);
        g->sv = malloc((size_t)g->nthreads * V * sizeof(float));
        g->si = malloc((size_t)g->nthreads * V * sizeof(int));
        if (!g->sv || !g->si) {
            mt_set_err(err, errlen, "kyutai: out of memory");
            rc = -1;
        }
    }
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

/* Kyutai's sample_token on one row: one 8-lane pass over the n logits
 * for the maximum (greedy) or, with a top k under n, a partial selection
 * (the k-th largest value by bisection over a sample's survivors, no
 * sort: kth_of_row) and one pass collecting the candidates in index
 * order, then the race among them.
 * The candidates are the top k of the order (logit descending, index
 * ascending), what torch.topk's stable order keeps; their draw is in
 * index order, one uniform each from the session's generator, so the
 * stream does not depend on the batch, the thread or the selection. */

/* The index of the largest of n logits, the lowest on ties. */
#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static int argmax_row(const float *l, int n)
{
    v8f m8 = splat8(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f x = load8(l + i);
        v8i gt = x > m8;
        m8 = (v8f)(((v8i)x & gt) | ((v8i)m8 & ~gt));
    }
    float m = -INFINITY;
    for (int j = 0; j < 8; j++)
        m = m8[j] > m ? m8[j] : m;
    for (int j = i; j < n; j++)
        m = l[j] > m ? l[j] : m;
    for (int j = 0; j < n; j++)
        if (l[j] == m)
            return j;
    return 0;   /* every logit nan */
}

/* Floats as unsigned keys in the same order (finite ones; -0 below +0). */
static inline uint32_t fkey(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static inline float funkey(uint32_t k)
{
    uint32_t u = k & 0x80000000u ? k & 0x7fffffffu : ~k;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The smallest and largest of v [n] (n >= 1) in *mn, *mx, by 8 lanes:
 * each lane keeps x < m ? x : m, so a nan other than v[0] is never taken,
 * as in one scalar pass (a zero's sign may differ: only the bisection's
 * range starts there). */
VINLINE void min_max(const float *v, int n, float *mn, float *mx)
{
    v8f lo8 = splat8(v[0]), hi8 = lo8;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f x = load8(v + i);
        v8i lt = x < lo8, gt = x > hi8;
        lo8 = (v8f)(((v8i)x & lt) | ((v8i)lo8 & ~lt));
        hi8 = (v8f)(((v8i)x & gt) | ((v8i)hi8 & ~gt));
    }
    float a = lo8[0], b = hi8[0];
    for (int j = 1; j < 8; j++) {
        a = lo8[j] < a ? lo8[j] : a;
        b = hi8[j] > b ? hi8[j] : b;
    }
    for (; i < n; i++) {
        a = v[i] < a ? v[i] : a;
        b = v[i] > b ? v[i] : b;
    }
    *mn = a;
    *mx = b;
}

/* The k-th largest (1 <= k <= n) of v [n]: a bisection over the keys
 * between v's smallest and largest, each probe one branch-free 8-lane
 * count of v >= the probe (a quickselect's partitions mispredict half
 * their branches on logits). The largest key with at least k logits at
 * or above it is the k-th largest's. A probe that counts exactly k has
 * the top k above it and the k-th largest the least of them: one pass
 * for that ends the search (about log2 n probes on logits, against 32;
 * the same value, +0 for a zero, as the bisection to its end). */
VINLINE float kth_largest(const float *v, int n, int k)
{
    float mn, mx;
    min_max(v, n, &mn, &mx);
    uint32_t lo = fkey(mn), hi = fkey(mx);
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        const v8f m8 = splat8(funkey(mid));
        v8i acc = { 0 };
        int i = 0, c = 0;
        for (; i + 8 <= n; i += 8)
            acc += load8(v + i) >= m8;
        for (int j = 0; j < 8; j++)
            c -= acc[j];
        for (; i < n; i++)
            c += v[i] >= funkey(mid);
        if (c == k) {
            v8f least = splat8(INFINITY);
            for (i = 0; i + 8 <= n; i += 8) {
                v8f x = load8(v + i);
                v8i in = (x >= m8) & (x < least);
                least = (v8f)(((v8i)x & in) | ((v8i)least & ~in));
            }
            float t = least[0];
            for (int j = 1; j < 8; j++)
                t = least[j] < t ? least[j] : t;
            for (; i < n; i++)
                t = v[i] >= funkey(mid) && v[i] < t ? v[i] : t;
            return t == 0.0f ? 0.0f : t;
        }
        if (c >= k)
            lo = mid;
        else
            hi = mid - 1;
    }
    return funkey(lo);
}

/* 1 when any lane of a compare's mask is set: its four quadwords ORed (a
 * lane by lane extraction costs eight moves) */
VINLINE int any8(v8i m)
{
    uint64_t w[4];
    memcpy(w, &m, sizeof w);
    return (w[0] | w[1] | w[2] | w[3]) != 0;
}

/* The selection's two collecting passes with AVX-512's compress, where
 * the CPU has it (sample_level 1): sixteen logits a compare, the lanes
 * taken packed by one instruction into a register and stored whole (v
 * and idx have room for n), where the 8-lane code went through every
 * lane of a block with a hit (most blocks: a quarter of the logits pass
 * in kth_of_row, top k of 1024 in top_k_ordered). The same values and
 * indices in the same order as the 8-lane passes. */
static int sample_level = -1;   /* -1 not yet chosen (mt_kyutai_sample_select) */

#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
#define SAMPLE512 __attribute__((target("avx512f")))

/* v [0, c) = l's logits at or above t in index order; returns c. */
SAMPLE512 static int at_or_above_avx512(const float *l, int n, float t, float *v)
{
    const __m512 t16 = _mm512_set1_ps(t);
    int c = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(l + i);
        const __mmask16 m = _mm512_cmp_ps_mask(x, t16, _CMP_GE_OQ);
        _mm512_storeu_ps(v + c, _mm512_maskz_compress_ps(m, x));
        c += __builtin_popcount(m);
    }
    for (; i < n; i++)
        if (l[i] >= t)
            v[c++] = l[i];
    return c;
}

/* idx [0, k) = the indices of l's logits above t and of the first ties
 * equal to it, in index order (top_k_ordered's second pass); returns how
 * many (k, but for a nan t). */
SAMPLE512 static int top_k_collect_avx512(const float *l, int n, float t, int ties, int k,
                                           int *idx)
{
    const __m512 t16 = _mm512_set1_ps(t);
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    int c = 0, i = 0;
    for (; i + 16 <= n && c < k; i += 16) {
        const __m512 x = _mm512_loadu_ps(l + i);
        __mmask16 take = _mm512_cmp_ps_mask(x, t16, _CMP_GT_OQ);
        for (unsigned eq = _mm512_cmp_ps_mask(x, t16, _CMP_EQ_OQ); eq && ties > 0; ties--) {
            take |= (__mmask16)(eq & -eq);    /* the lowest equal lane */
            eq &= eq - 1;
        }
        _mm512_storeu_si512(idx + c, _mm512_maskz_compress_epi32(
                                         take, _mm512_add_epi32(iota, _mm512_set1_epi32(i))));
        c += __builtin_popcount(take);
    }
    for (; i < n && c < k; i++)
        if (l[i] > t || (l[i] == t && ties-- > 0))
            idx[c++] = i;
    return c;
}

static int sample_level_max(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
}
#else
static int at_or_above_avx512(const float *l, int n, float t, float *v)
{
    (void)l, (void)n, (void)t, (void)v;
    return 0;
}
static int top_k_collect_avx512(const float *l, int n, float t, int ties, int k, int *idx)
{
    (void)l, (void)n, (void)t, (void)ties, (void)k, (void)idx;
    return 0;
}
static int sample_level_max(void) { return 0; }
#endif

int mt_kyutai_sample_select(int level)
{
    const int top = sample_level_max();
    if (level < 0)
        level = top;
    __atomic_store_n(&sample_level, level < top ? level : top, __ATOMIC_RELAXED);
    return level < top ? level : top;
}

static int sample_compress(void)
{
    int lv = __atomic_load_n(&sample_level, __ATOMIC_RELAXED);
    return (lv < 0 ? mt_kyutai_sample_select(-1) : lv) == 1;
}

VINLINE float kth_of_row(const float *l, int n, int k, float *v)
{
    enum { SAMPLES = 256 };
    if (n >= 2 * k && n >= 2 * SAMPLES) {
        int r = (int)((5LL * k * SAMPLES) / (4LL * n)) + 4;
        r = r > SAMPLES ? SAMPLES : r;
        for (int i = 0; i < SAMPLES; i++)
            v[i] = l[(size_t)i * n / SAMPLES];
        const float t0 = kth_largest(v, SAMPLES, r);
        int c = 0, i = 0;
        if (sample_compress()) {
            c = at_or_above_avx512(l, n, t0, v);
        } else {
            const v8f t8 = splat8(t0);
            /* branch-free within a block: a quarter of the logits pass, in
             * no order a predictor learns (v has room for n) */
            for (; i + 8 <= n; i += 8)
                if (any8(load8(l + i) >= t8))
                    for (int j = i; j < i + 8; j++) {
                        v[c] = l[j];
                        c += l[j] >= t0;
                    }
            for (; i < n; i++)
                if (l[i] >= t0)
                    v[c++] = l[i];
        }
        if (c >= k)
            return kth_largest(v, c, k);
    }
    return kth_largest(l, n, k);
}

/* The top k (1 <= k < n) of l [n] under (logit descending, index
 * ascending), in index order, into idx [k]; v [n] is scratch. Returns
 * how many: k, or fewer where the k-th largest is nan (a row whose first
 * logit is nan: no logit compares above it). */
#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static int top_k_ordered(const float *l, int n, int k, float *v, int *idx)
{
    const float t = kth_of_row(l, n, k, v);
    int above = 0, i = 0;
    const v8f t8 = splat8(t);
    v8i acc = { 0 };         /* minus the count of logits above t, by lane */
    for (; i + 8 <= n; i += 8)
        acc += load8(l + i) > t8;
    for (int j = 0; j < 8; j++)
        above -= acc[j];
    for (; i < n; i++)
        above += l[i] > t;
    int ties = k - above, c = 0;     /* the first `ties` logits equal to t */
    if (sample_compress())
        return top_k_collect_avx512(l, n, t, ties, k, idx);
    for (i = 0; i + 8 <= n && c < k; i += 8) {
        if (!any8(load8(l + i) >= t8))
            continue;
        for (int j = i; j < i + 8; j++) {   /* branch-free, as in kth_of_row */
            const int eq = l[j] == t, take = (l[j] > t) | (eq & (ties > 0));
            ties -= eq & take;
            idx[c] = j;      /* idx has room for n > k */
            c += take;
        }
    }
    for (; i < n && c < k; i++)
        if (l[i] > t || (l[i] == t && ties-- > 0))
            idx[c++] = i;
    return c;
}

/* One draw among the candidates cand [k] (index order; NULL: all of
 * 0..k-1): argmax p_j / E_j, p_j = exp((l_j - m) / temp), E_j = -log(1 -
 * u_j), one u_j per candidate in order. A candidate that cannot win is
 * skipped: its u_j is drawn (the stream stays the same) but its exp and
 * log are not, by two tests with a margin (1e-9) far above the rounding
 * of exp and log, so the arithmetic of those evaluated is unchanged, and
 * so is the winner:
 * - p_j <= 1, so E_j >= 1 / best loses: u_j >= 1 - exp(-1 / best);
 * - E_j >= u_j, and p_j = exp(-y) <= 1 / T(y) for y = (m - l_j) / temp >=
 *   0, T the exponential's series to y^4 / 24 (every term >= 0), so u_j
 *   T(y) >= 1 / best loses too: a few multiply-adds, where p_j <= 1 alone
 *   let through about half of the candidates until the best was found
 *   (126 of 250 evaluated on logits of spread 3, mt-benchkyutai's). */
static int32_t race(const float *l, const int *cand, int k, float temp, mt_rng *rng)
{
    float m = -INFINITY;
    for (int j = 0; j < k; j++) {
        float x = l[cand ? cand[j] : j];
        m = x > m ? x : m;
    }
    const double inv_temp = 1.0 / temp;
    double bestv = -1, u_skip = 2, lose = INFINITY;   /* lose: (1 + 1e-9) / best */
    int best = cand ? cand[0] : 0;
    for (int j = 0; j < k; j++) {
        double u = mt_rng_uniform(rng);
        if (u >= u_skip)
            continue;
        int i = cand ? cand[j] : j;
        const double y = ((double)m - l[i]) * inv_temp;
        if (u * (1.0 + y * (1.0 + y * (0.5 + y * (1.0 / 6 + y * (1.0 / 24))))) >= lose)
            continue;
        double p = exp(((double)l[i] - m) / temp);
        double e = -log(1.0 - u);
        double v = p / (e > 0 ? e : 1e-300);
        if (v > bestv) {
            bestv = v;
            best = i;
            /* E >= x(1 - 1e-9) >= 1 / bestv for every u >= u_skip */
            u_skip = bestv > 0 ? -expm1(-(1.0 / bestv) * (1.0 + 1e-9)) : 2;
            lose = bestv > 0 ? (1.0 + 1e-9) / bestv : INFINITY;
        }
    }
    return best;
}

/* One row: greedy (or temperature 0) the argmax, lowest index on ties;
 * else Kyutai's softmax(l / temp), top k, one draw. */
static int32_t sample_row(mt_rng *rng, int greedy, const float *l, int n, float temp,
                          int top_k_n, float *v, int *idx)
{
    if (greedy || !(temp > 0.0f))
        return argmax_row(l, n);
    if (top_k_n > 0 && top_k_n < n) {
        const int c = top_k_ordered(l, n, top_k_n, v, idx);
        return c > 0 ? race(l, idx, c, temp, rng) : argmax_row(l, n);
    }
    return race(l, NULL, n, temp, rng);
}

/* The rows of a sampling phase: the text (audio < 0) or the depformer's
 * step k, each row with its session's settings and generator. */
struct smp_job {
    mt_kyutai_gen *g;
    mt_kyutai_sess *const *sess;
    int B, step;               /* step -1: text */
};

/* Rows [r0, r1) of a sampling step into g->tok, with thread tid's scratch. */
static void sample_range(mt_kyutai_gen *g, mt_kyutai_sess *const *sess, int step, int r0,
                         int r1, int tid)
{
    const mt_kyutai_config *kc = &g->lm->kc;
    const int text = step < 0, n = text ? kc->text_card_out : kc->card;
    const float *logits = text ? g->tlog : g->dlog;
    const size_t V = (size_t)(kc->text_card_out > kc->card ? kc->text_card_out : kc->card);
    float *v = g->sv + (size_t)tid * V;
    int *idx = g->si + (size_t)tid * V;
    for (int r = r0; r < r1; r++) {
        mt_kyutai_sess *s = sess[r];
        g->tok[r] = sample_row(&s->rng, s->smp.greedy, logits + (size_t)r * n, n,
                               text ? s->smp.temp_text : s->smp.temp,
                               text ? s->smp.top_k_text : s->smp.top_k, v, idx);
    }
}

/* Thread tid's share [r0, r1) of B rows. */
static void share(int B, int tid, int nt, int *r0, int *r1)
{
    int per = (B + nt - 1) / nt;
    *r0 = tid * per < B ? tid * per : B;
    *r1 = *r0 + per < B ? *r0 + per : B;
}

static void sample_phase(void *ctx, int tid, int nt)
{
    const struct smp_job *j = ctx;
    int r0, r1;
    share(j->B, tid, nt, &r0, &r1);
    sample_range(j->g, j->sess, j->step, r0, r1, tid);
}

/* Samples g->tok [B] from the text logits (step -1) or the depformer's of
 * step k, the rows split over the decoder's threads from SAMPLE_POOL_ROWS
 * rows on: below, a row's few microseconds are less than a phase's
 * barrier, which on a loaded machine waits for a descheduled thread
 * (bench/RESULTS.md, issue 49). On 2 or more threads the depformer's
 * steps sample inside its own phase (row mode, frame mode), so there
 * only the text is posted. */
enum { SAMPLE_POOL_ROWS = MT_DEPFORMER_ROWS_MIN };

static void sample_rows(mt_kyutai_gen *g, mt_kyutai_sess *const *sess, int B, int step)
{
    struct smp_job j = { g, sess, B, step };
    if (B >= SAMPLE_POOL_ROWS && g->nthreads > 1)
        mt_decoder_parallel(g->dec, sample_phase, &j);
    else
        sample_phase(&j, 0, 1);
}

/* The depformer's frame in row mode (mt_depformer_rows_split): each
 * thread its rows through every step, each step's tokens sampled at once,
 * no barrier until the frame's end; or in frame mode
 * (mt_depformer_frame_split), the depformer's one phase calling
 * dep_frame_sample on each thread's rows after each step. */
struct dep_frame {
    mt_kyutai_gen *g;
    mt_kyutai_sess *const *sess;
    const mt_kyutai_out *out;
    int B;
    double sample_ns;          /* thread 0's sampling */
};

/* Step k's rows [r0, r1) once its logits are made, on thread tid: their
 * logits kept where asked, their tokens sampled into tok and audio. */
static void dep_frame_sample(void *ctx, int k, int r0, int r1, int tid)
{
    struct dep_frame *j = ctx;
    mt_kyutai_gen *g = j->g;
    const mt_kyutai_config *kc = &g->lm->kc;
    const int Q = kc->dep_q;
    if (j->out->dep_logits)
        for (int r = r0; r < r1; r++)
            memcpy(j->out->dep_logits + ((size_t)r * Q + k) * kc->card,
                   g->dlog + (size_t)r * kc->card, (size_t)kc->card * sizeof(float));
    uint64_t ts = mt_clock_ns();
    sample_range(g, j->sess, k, r0, r1, tid);
    for (int r = r0; r < r1; r++)
        g->audio[(size_t)r * Q + k] = g->tok[r];
    if (tid == 0)
        j->sample_ns += (double)(mt_clock_ns() - ts);
}

static void dep_frame_phase(void *ctx, int tid, int nt)
{
    struct dep_frame *j = ctx;
    mt_kyutai_gen *g = j->g;
    int r0, r1;
    share(j->B, tid, nt, &r0, &r1);
    for (int k = 0; k < g->lm->kc.dep_q; k++) {
        mt_depformer_next_rows(g->df, k, r0, r1, g->tok, g->dlog, tid);
        dep_frame_sample(j, k, r0, r1, tid);
    }
}

/* ---- the frame --------------------------------------------------------------- */

/* The depformer's dep_q steps with their sampling on the device: the same
 * draws as the host's sampler from the same generator states, which come
 * back advanced; on a failure no session's state changes. */
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

/* The user's tokens of the step [B, n_q - dep_q]: each -1 (none) or a
 * code of the card. 0, or -1 with err. */
static int check_user(const mt_kyutai_gen *g, int B, const int32_t *user, char *err,
                      size_t errlen)
{
    const mt_kyutai_config *kc = &g->lm->kc;
    const int nu = kc->n_q - kc->dep_q;
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
    return 0;
}

/* The embedding row of stream k's token v (v >= 0). */
static inline const float *emb_row(const mt_kyutai_lm *lm, int k, int32_t v)
{
    const size_t D = (size_t)lm->kc.dim;
    return k == 0 ? lm->text_emb + (size_t)v * D : lm->emb[k - 1] + (size_t)v * D;
}

/* Asks for every line of a row's embedding rows (in [1 + n_q]: its tokens). */
static void embed_prefetch(const mt_kyutai_lm *lm, const int32_t *in, int nk)
{
    const size_t bytes = (size_t)lm->kc.dim * sizeof(float);
    for (int k = 0; k < nk; k++)
        if (in[k] >= 0) {
            const char *e = (const char *)emb_row(lm, k, in[k]);
            for (size_t o = 0; o < bytes; o += 64)
                __builtin_prefetch(e + o);
            __builtin_prefetch(e + bytes - 1);
        }
}

/* x [D] = the sum of the rows of in [nk] (each >= 0; -1 none), in stream
 * order from 0.0f, eight columns at a time (the scalar sum's order, so
 * the same bits). */
#if defined(__x86_64__) && !defined(MT_FUZZ_BUILD)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static void embed_sum(const mt_kyutai_lm *lm, const int32_t *in, int nk, float *x)
{
    const int D = lm->kc.dim;
    int i = 0;
    for (; i + 8 <= D; i += 8) {
        v8f acc = splat8(0.0f);
        for (int k = 0; k < nk; k++)
            if (in[k] >= 0)
                acc += load8(emb_row(lm, k, in[k]) + i);
        store8(x + i, acc);
    }
    for (; i < D; i++) {
        float acc = 0.0f;
        for (int k = 0; k < nk; k++)
            if (in[k] >= 0)
                acc += emb_row(lm, k, in[k])[i];
        x[i] = acc;
    }
}

/* The embedding rows are random rows of tables of megabytes, each a
 * miss: a row's 1 + n_q rows are asked for EMBED_AHEAD rows ahead of
 * their sum (fetched one after the other, each waited for, the stage ran
 * 30 times its bound at 8-32 rows); the sums run on the decoder's threads
 * from EMBED_POOL_ROWS rows on (each thread's misses in flight its own;
 * below, a phase's barrier costs more than the rows). */
enum { EMBED_AHEAD = 2, EMBED_POOL_ROWS = 8 };

struct embed_job {
    mt_kyutai_gen *g;
    int B;
};

static void embed_phase(void *ctx, int tid, int nt)
{
    const struct embed_job *j = ctx;
    const mt_kyutai_lm *lm = j->g->lm;
    const int nk = 1 + lm->kc.n_q;
    const size_t D = (size_t)lm->kc.dim;
    int r0, r1;
    share(j->B, tid, nt, &r0, &r1);
    for (int r = r0; r < r1 && r < r0 + EMBED_AHEAD; r++)
        embed_prefetch(lm, j->g->in + (size_t)r * nk, nk);
    for (int r = r0; r < r1; r++) {
        if (r + EMBED_AHEAD < r1)
            embed_prefetch(lm, j->g->in + (size_t)(r + EMBED_AHEAD) * nk, nk);
        embed_sum(lm, j->g->in + (size_t)r * nk, nk, j->g->x + (size_t)r * D);
    }
}

/* The step's input tokens g->in [B, 1 + n_q] (each stream's, delayed) and
 * their embeddings summed into g->x [B, dim]; the user's tokens go into
 * the rings only once the step has succeeded (write_rings), so a failed
 * step changes nothing. 0, or -1 with err. */
static int embed_inputs(mt_kyutai_gen *g, int B, mt_kyutai_sess *const *sess,
                        const int32_t *user, char *err, size_t errlen)
{
    const mt_kyutai_lm *lm = g->lm;
    const mt_kyutai_config *kc = &lm->kc;
    const int nk = 1 + kc->n_q, nu = kc->n_q - kc->dep_q, Q = kc->dep_q;
    for (int r = 0; r < B; r++) {
        const mt_kyutai_sess *s = sess[r];
        int64_t t = s->offset;
        int32_t *in = g->in + (size_t)r * nk;
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
        }
    }
    struct embed_job j = { g, B };
    if (B >= EMBED_POOL_ROWS && g->nthreads > 1)
        mt_decoder_parallel(g->dec, embed_phase, &j);
    else
        embed_phase(&j, 0, 1);
    return 0;
}

/* The depformer: dep_q tokens into g->audio [B, dep_q], each from the one
 * before: on the device with their sampling (one sync), by rows on the
 * decoder's threads, or step by step. *sample_ns: the time spent sampling.
 * A failure (CUDA's) returns before any session's token rings are
 * written. 0, or -1 with err. */
static int depformer_frame(mt_kyutai_gen *g, int B, mt_kyutai_sess *const *sess,
                           const mt_kyutai_out *out, double *sample_ns, char *err,
                           size_t errlen)
{
    const mt_kyutai_config *kc = &g->lm->kc;
    const int Q = kc->dep_q;
    *sample_ns = 0;
    if (mt_depformer_begin(g->df, B, g->h)) {
        mt_set_err(err, errlen, "kyutai: %s", mt_depformer_error(g->df));
        return -1;
    }
    int on_device = g->dev_sample && !out->dep_logits;
    if (on_device)
        return dep_frame_device(g, sess, B, err, errlen);
    if (mt_depformer_frame_split(g->df)) {
        struct dep_frame j = { g, sess, out, B, 0 };
        if (mt_depformer_run_frame(g->df, g->tok, g->dlog, dep_frame_sample, &j)) {
            mt_set_err(err, errlen, "kyutai: %s", mt_depformer_error(g->df));
            return -1;
        }
        *sample_ns = j.sample_ns;
        return 0;
    }
    if (mt_depformer_rows_split(g->df)) {
        struct dep_frame j = { g, sess, out, B, 0 };
        mt_decoder_parallel(g->dec, dep_frame_phase, &j);
        *sample_ns = j.sample_ns;
        return 0;
    }
    for (int k = 0; k < Q; k++) {
        if (mt_depformer_next(g->df, k, g->tok, g->dlog)) {
            mt_set_err(err, errlen, "kyutai: %s", mt_depformer_error(g->df));
            return -1;
        }
        if (out->dep_logits)
            for (int r = 0; r < B; r++)
                memcpy(out->dep_logits + ((size_t)r * Q + k) * kc->card,
                       g->dlog + (size_t)r * kc->card, (size_t)kc->card * sizeof(float));
        uint64_t ts = mt_clock_ns();
        sample_rows(g, sess, B, k);
        for (int r = 0; r < B; r++)
            g->audio[(size_t)r * Q + k] = g->tok[r];
        *sample_ns += (double)(mt_clock_ns() - ts);
    }
    return 0;
}

/* prs[r, j] = softmax(extra[j] . h[r])[0]: Kyutai's Step prs, every row
 * and head (a few dot products of dim a row: no GEMM needed). The softmax
 * as theirs: less the row's maximum, exp, divided by the sum. */
static void extra_heads(const mt_kyutai_gen *g, int B, float *prs)
{
    const mt_kyutai_config *kc = &g->lm->kc;
    const int D = kc->dim, E = kc->extra_dim;
    float z[MT_KY_MAX_XH_DIM];                 /* [extra_dim] one head's logits */
    for (int r = 0; r < B; r++) {
        const float *h = g->h + (size_t)r * D;
        for (int j = 0; j < kc->extra_heads; j++) {
            const float *w = g->lm->extra[j];  /* [extra_dim, dim] */
            float mx = -INFINITY;
            for (int i = 0; i < E; i++) {
                float acc = 0.0f;
                for (int d = 0; d < D; d++)
                    acc += w[(size_t)i * D + d] * h[d];
                z[i] = acc;
                mx = acc > mx ? acc : mx;
            }
            double sum = 0.0;
            for (int i = 0; i < E; i++)
                sum += exp((double)(z[i] - mx));
            prs[(size_t)r * kc->extra_heads + j] = (float)(exp((double)(z[0] - mx)) / sum);
        }
    }
}

/* The rings, once the step succeeded: user tokens at t + delay, the
 * generated ones at t + 1; from t + 1 > max_delay on, out->frame gets the
 * undelayed frame t + 1 - max_delay. */
static void write_rings(mt_kyutai_gen *g, int B, mt_kyutai_sess *const *sess,
                        const int32_t *user, const mt_kyutai_out *out)
{
    const mt_kyutai_config *kc = &g->lm->kc;
    const int nu = kc->n_q - kc->dep_q, Q = kc->dep_q;
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
}

int mt_kyutai_step(mt_kyutai_gen *g, int B, mt_kv_seq *const *seqs,
                   mt_kyutai_sess *const *sess, const int32_t *user,
                   const mt_kyutai_out *out, char *err, size_t errlen)
{
    const mt_kyutai_config *kc = &g->lm->kc;
    const int Q = kc->dep_q;
    if (check_user(g, B, user, err, errlen))
        return -1;

    uint64_t t0 = mt_clock_ns();
    if (embed_inputs(g, B, sess, user, err, errlen))
        return -1;
    g->times.embed_ms = ms_since(t0);

    /* the temporal transformer: text logits and out_norm(h) */
    t0 = mt_clock_ns();
    mt_step_io io = { .x_in = g->x, .h_out = g->h, .logits = g->tlog };
    if (mt_decoder_step(g->dec, B, seqs, &io, err, errlen))
        return -1;
    g->times.temporal_ms = ms_since(t0);

    uint64_t ts = mt_clock_ns();
    sample_rows(g, sess, B, -1);
    double text_sample_ns = (double)(mt_clock_ns() - ts), dep_sample_ns = 0;
    memcpy(g->text, g->tok, (size_t)B * sizeof(int32_t));
    if (out->text)
        memcpy(out->text, g->text, (size_t)B * sizeof(int32_t));
    if (out->text_logits)
        memcpy(out->text_logits, g->tlog, (size_t)B * kc->text_card_out * sizeof(float));
    if (out->prs && kc->extra_heads > 0)
        extra_heads(g, B, out->prs);

    t0 = mt_clock_ns();
    if (Q > 0 && depformer_frame(g, B, sess, out, &dep_sample_ns, err, errlen))
        return -1;
    g->times.depformer_ms = ms_since(t0) - dep_sample_ns / 1e6;
    g->times.sample_ms = (text_sample_ns + dep_sample_ns) / 1e6;
    if (out->audio)
        memcpy(out->audio, g->audio, (size_t)B * Q * sizeof(int32_t));

    write_rings(g, B, sess, user, out);
    return 0;
}
