/* synthetic.c: the synthetic presets: fixed shapes (tiny, tiny-qwen2/3 for
 * tests, small/base for CPU work, moshi-7b, llama-3.2-1b, qwen2.5-7b and
 * qwen3-8b for capacity work at real shapes) and weights generated
 * deterministically from a seed, so tests and experiments need no
 * checkpoint. The init is documented in
 * model.h; it is chunked per tensor so threads can share the work without
 * changing a single value. */
#include "util/errmsg.h"
#include "model/synthetic.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/rng.h"

typedef struct preset {
    const char *name;
    int hidden, ffn, layers, heads, kv_heads, head_dim, vocab;
    float eps, rope_theta;
    int tie, has_audio, has_tokens, passthrough;
    int qkv_bias, qk_norm;     /* Qwen2, Qwen3 */
} preset;

static const preset presets[] = {
    /* name           H     ffn    L   h   kvh hd  vocab   eps   theta     tie au tk pass bias qkn */
    { "tiny",         64,   128,   2,  4,  2,  0,  256,    1e-5f, 10000.f,  0, 1, 1, 0, 0, 0 },
    { "echo",         64,   128,   2,  4,  2,  0,  256,    1e-5f, 10000.f,  0, 1, 1, 1, 0, 0 },
    { "small",        512,  1536,  8,  8,  8,  0,  1024,   1e-5f, 10000.f,  0, 1, 1, 0, 0, 0 },
    { "base",         1024, 2816,  12, 16, 8,  0,  1024,   1e-5f, 10000.f,  0, 1, 1, 0, 0, 0 },
    { "moshi-7b",     4096, 11008, 32, 32, 32, 0,  0,      1e-5f, 10000.f,  0, 1, 0, 0, 0, 0 },
    { "llama-3.2-1b", 2048, 8192,  16, 32, 8,  64, 128256, 1e-5f, 500000.f, 1, 1, 1, 0, 0, 0 },
    /* Qwen2.5-7B (config.json of Qwen/Qwen2.5-7B-Instruct; the Thinker of
     * Qwen2.5-Omni-7B and MiniCPM-o 2.6's LLM have this shape): q/k/v biases.
     * Qwen3-8B (Qwen/Qwen3-8B; MiniCPM-o 4.5's LLM): q/k norms, head_dim
     * 128 given explicitly. Both untied, rope theta 1e6, eps 1e-6.
     * tiny-qwen2/tiny-qwen3: the same features at test size (tiny-qwen3's
     * heads*head_dim = 128 is not its hidden 64). */
    { "qwen2.5-7b",   3584, 18944, 28, 28, 4,  128, 152064, 1e-6f, 1e6f,     0, 1, 1, 0, 1, 0 },
    { "qwen3-8b",     4096, 12288, 36, 32, 8,  128, 151936, 1e-6f, 1e6f,     0, 1, 1, 0, 0, 1 },
    { "tiny-qwen2",   64,   128,   2,  4,  2,  0,  256,    1e-6f, 1e6f,     0, 1, 1, 0, 1, 0 },
    { "tiny-qwen3",   64,   128,   2,  4,  2,  32, 256,    1e-6f, 1e6f,     0, 1, 1, 0, 0, 1 },
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

static const char *const preset_names[] = {
    "synthetic:tiny", "synthetic:echo", "synthetic:small", "synthetic:base",
    "synthetic:moshi-7b", "synthetic:llama-3.2-1b", "synthetic:qwen2.5-7b",
    "synthetic:qwen3-8b", "synthetic:tiny-qwen2", "synthetic:tiny-qwen3", NULL,
};

const char *const *mt_synthetic_presets(void) { return preset_names; }

/* ---- generator ----------------------------------------------------------- */

/* Stream for (seed, tensor, chunk): documented in model.h. */
static void xo_seed(mt_rng *r, uint64_t seed, int tensor, uint64_t chunk)
{
    uint64_t x = seed ^ ((uint64_t)(tensor + 1) * 0x9E3779B97F4A7C15ull);
    uint64_t y = mt_splitmix64(&x) ^ chunk;
    for (int i = 0; i < 4; i++)
        r->s[i] = mt_splitmix64(&y);
}

#define CHUNK 65536u

/* std of tensor i (see model.h); 0 means "constant 1.0" (norms). */
static double tensor_std(const mt_config *c, const char *name)
{
    double L2 = sqrt(2.0 * c->layers);
    if (strstr(name, "_proj.bias"))
        return 0.5;
    if (strstr(name, "q_norm") || strstr(name, "k_norm"))
        return 0.25;
    if (strstr(name, "layernorm") || strcmp(name, "model.norm.weight") == 0)
        return 0.0;
    if (strstr(name, "o_proj"))
        return 1.0 / sqrt((double)c->heads * c->head_dim) / L2;
    if (strstr(name, "down_proj"))
        return 1.0 / sqrt((double)c->ffn) / L2;
    if (strstr(name, "_proj"))
        return 1.0 / sqrt((double)c->hidden);
    if (strcmp(name, "model.embed_tokens.weight") == 0)
        return 1.0;
    if (strcmp(name, "lm_head.weight") == 0)
        return 1.0 / sqrt((double)c->hidden);
    if (strcmp(name, "audio_in.weight") == 0)
        return 10.0 / sqrt((double)c->frame_samples);
    if (strcmp(name, "audio_out.weight") == 0)
        return 0.1 / sqrt((double)c->hidden);
    return 0.0;
}

/* mean of tensor i: the q/k norms' weights scatter around 1 */
static double tensor_mean(const char *name)
{
    return strstr(name, "q_norm") || strstr(name, "k_norm") ? 1.0 : 0.0;
}

static void fill_chunk(float *dst, size_t n, double mean, double std, uint64_t seed,
                       int tensor, uint64_t chunk)
{
    if (std == 0.0) {
        for (size_t i = 0; i < n; i++)
            dst[i] = 1.0f;
        return;
    }
    mt_rng r;
    xo_seed(&r, seed, tensor, chunk);
    /* Marsaglia's polar method: two uniforms in (-1, 1), rejected outside
     * the unit disc (about 21% of pairs), give two normals with one log and
     * no trigonometry: about twice as fast as Box-Muller. */
    const double k53 = 2.0 / 9007199254740992.0;
    for (size_t i = 0; i < n; i += 2) {
        double u, v, q;
        do {
            u = (double)(mt_rng_next(&r) >> 11) * k53 - 1.0;
            v = (double)(mt_rng_next(&r) >> 11) * k53 - 1.0;
            q = u * u + v * v;
        } while (q >= 1.0 || q == 0.0);
        double f = sqrt(-2.0 * log(q) / q) * std;
        dst[i] = (float)(mean + u * f);
        if (i + 1 < n)
            dst[i + 1] = (float)(mean + v * f);
    }
}

/* One tensor's chunks, shared out among threads; each chunk has its own
 * stream so the split never changes a value. */
typedef struct pool {
    float          *dst;
    size_t          n;
    double          mean, std;
    int             tensor;
    uint64_t        seed;
    uint64_t        nchunks;
    uint64_t        next;
    pthread_mutex_t mu;
} pool;

static void *worker(void *arg)
{
    pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        uint64_t k = p->next++;
        pthread_mutex_unlock(&p->mu);
        if (k >= p->nchunks)
            return NULL;
        size_t off = (size_t)k * CHUNK;
        size_t len = p->n - off < CHUNK ? p->n - off : CHUNK;
        fill_chunk(p->dst + off, len, p->mean, p->std, p->seed, p->tensor, k);
    }
}

static void fill_tensor(const mt_config *c, uint64_t seed, int i,
                        const mt_tensor_ref *r, float *dst)
{
    size_t n = (size_t)r->shape[0] * (size_t)(r->ndim == 2 ? r->shape[1] : 1);
    pool p = { .dst = dst, .n = n, .mean = tensor_mean(r->name),
               .std = tensor_std(c, r->name), .tensor = i,
               .seed = seed, .nchunks = (n + CHUNK - 1) / CHUNK, .next = 0 };
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu;
    if (p.nchunks < 4)
        nthreads = 1;
    pthread_mutex_init(&p.mu, NULL);
    pthread_t th[16];
    int started = 0;
    for (int t = 1; t < nthreads; t++)
        if (pthread_create(&th[started], NULL, worker, &p) == 0)
            started++;
    worker(&p);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&p.mu);
}

void mt_synthetic_fill(mt_model *m)
{
    int nt = mt_model_tensor_count(&m->cfg);
    mt_tensor_ref r;
    for (int i = 0; i < nt; i++)
        if (mt_model_tensor(m, i, &r) == 0 && r.data)
            fill_tensor(&m->cfg, m->seed, i, &r, r.data);
}

int mt_model_synthetic_tensor(const mt_model *m, int i, float *dst)
{
    mt_tensor_ref r;
    if (!m || !dst || mt_model_tensor(m, i, &r) != 0)
        return -1;
    fill_tensor(&m->cfg, m->seed, i, &r, dst);
    return 0;
}

/* ---- presets ------------------------------------------------------------- */

static int parse_seed(const char *s, uint64_t *seed)
{
    if (strncmp(s, "seed=", 5) != 0)
        return -1;
    s += 5;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *seed = v;
    return 0;
}

void mt_synthetic_list(char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; preset_names[i] && o < len; i++) {
        int n = snprintf(buf + o, len - o, "%s%s", i ? ", " : "", preset_names[i]);
        if (n < 0)
            break;
        o += (size_t)n;
    }
    if (o < len)
        snprintf(buf + o, len - o, "; Kyutai's: %s; codecs, for --codec: %s",
                 MT_KYUTAI_PRESET_NAMES, MT_CODEC_PRESET_NAMES);
}

int mt_synthetic_load(const char *spec, int flags, mt_model **out,
                      char *err, size_t errlen)
{
    *out = NULL;
    const char *name = spec + strlen("synthetic:");
    const char *colon = strchr(name, ':');
    size_t nlen = colon ? (size_t)(colon - name) : strlen(name);
    uint64_t seed = 1;
    char names[1024];
    mt_synthetic_list(names, sizeof names);
    if (colon && parse_seed(colon + 1, &seed) != 0) {
        mt_set_err(err, errlen, "%s: bad option '%s' (want seed=N, N a decimal "
                 "integer)", spec, colon + 1);
        return -1;
    }
    const preset *p = NULL;
    for (int i = 0; i < NPRESETS; i++)
        if (strlen(presets[i].name) == nlen && strncmp(presets[i].name, name, nlen) == 0)
            p = &presets[i];
    if (!p) {
        mt_set_err(err, errlen, "%s: unknown synthetic preset (presets: %s)", spec, names);
        return -1;
    }
    mt_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "synthetic:%s", p->name);
    c.hidden = p->hidden;
    c.ffn = p->ffn;
    c.layers = p->layers;
    c.heads = p->heads;
    c.kv_heads = p->kv_heads;
    c.head_dim = p->head_dim ? p->head_dim : p->hidden / p->heads;
    c.vocab = p->has_tokens ? p->vocab : 0;
    c.eps = p->eps;
    c.rope_theta = p->rope_theta;
    c.tie_embeddings = p->tie;
    c.sample_rate = 24000;
    c.frame_samples = 1920;
    c.has_audio = p->has_audio;
    c.has_tokens = p->has_tokens;
    c.audio_passthrough = p->passthrough;
    c.qkv_bias = p->qkv_bias;
    c.qk_norm = p->qk_norm;
    if (mt_config_check(&c, spec, err, errlen) != 0)
        return -1;
    int shape_only = (flags & MT_MODEL_SHAPE_ONLY) != 0;
    uint64_t bytes = mt_model_params(&c) * 4;
    if (!shape_only && bytes > mt_model_host_limit()) {
        mt_set_err(err, errlen, "%s: %.1f GiB of fp32 host weights is over the "
                 "%.0f GiB host limit: use a GPU backend (shape-only load, "
                 "weights made on the device) or a smaller preset ("
                 MT_MODEL_HOST_LIMIT_HINT ")",
                 spec, bytes / 1073741824.0,
                 mt_model_host_limit() / 1073741824.0);
        return -1;
    }
    mt_model *m;
    if (mt_model_make(&c, shape_only, 0, &m, err, errlen) != 0)
        return -1;
    m->seed = seed;
    if (!shape_only)
        mt_synthetic_fill(m);
    *out = m;
    return 0;
}
