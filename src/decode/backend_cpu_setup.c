/* backend_cpu_setup.c: creating and destroying the CPU backend
 * (backend_cpu.c runs its steps): the model's geometry, the activation
 * buffers, the kv pool on 2 MiB pages, the half copies of the weights for
 * --weights f16, the thread pool and OpenBLAS's settings. */
#include "util/errmsg.h"
#include "decode/backend_cpu_int.h"
#include "decode/decoder.h"
#include "decode/cpu_f16.h"
#include "decode/cpu_q8.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

static void cpu_destroy(mt_backend *b)
{
    if (!b)
        return;
    cpu_backend *be = b->impl;
    if (be) {
        mt_tpool *tp = &be->tp;
        mt_tpool_stop(tp);
        if (be->scr)
            for (int t = 0; t < tp->n; t++) {
                free(be->scr[t].slot);
                free(be->scr[t].rope);
                free(be->scr[t].abs);
                free(be->scr[t].run);
                free(be->scr[t].score);
                free(be->scr[t].qd);
                free(be->scr[t].ml);
                free(be->scr[t].dcs);
                free(be->scr[t].dsn);
            }
        free(be->scr);
        free(be->att_next);
        free(be->kv);
        free(be->w16);
        free(be->w16_store);
        free(be->w8);
        free(be->w8_store);
        free(be->w8_scales);
        free(be->x); free(be->xn); free(be->qkv); free(be->att);
        free(be->gate); free(be->up); free(be->pcmf);
        free(be->rcos); free(be->rsin); free(be->qcos); free(be->qsin);
        free(be->dcos); free(be->dsin);
        free(be->ccos); free(be->csin); free(be->inv_freq);
        free(be->rows);
        free(be);
    }
    free(b);
}

/* Crossover of the f16-weight product (rows per call; measured with
 * bench/bench_step.sh, see bench/RESULTS.md): up to it the f16 product,
 * which reads half the weight bytes, is faster; above it OpenBLAS's sgemm,
 * compute-bound with much better blocking than a small-M kernel, wins. */
enum { F16_ROWS_DEFAULT = MT_WEIGHTS_ROWS_DEFAULT };

/* A large buffer that steps read in long streams (the kv pool, the f16
 * weights), on 2 MiB pages where the kernel gives them on request
 * (transparent huge pages in "madvise" mode, Debian's default): the
 * attention reads a few KiB in each of thousands of blocks, a new 4 KiB
 * page every few KiB, and that pattern reads faster on 2 MiB pages than on
 * 4 KiB ones (fewer TLB misses). Freed with free(). */
static void *alloc_streamed(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    if (n < huge)
        return malloc(n ? n : 1);
    size_t rounded = (n + huge - 1) / huge * huge;
    void *p = NULL;
    if (posix_memalign(&p, huge, rounded) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (madvise(p, rounded, MADV_HUGEPAGE) != 0) {
        /* advice only: refused (no THP, or "never"), 4 KiB pages work */
    }
#endif
    return p;
}

/* The weights of every matrix the step multiplies by (the layers' q/k/v,
 * output and feed-forward matrices, the LM head, the audio projections):
 * what a half or 8-bit copy holds. */
static size_t multiplied_weights(const cpu_backend *be)
{
    const mt_model *m = be->m;
    const mt_config *c = be->c;
    size_t H = (size_t)c->hidden;
    size_t per_layer = H * be->qkv_dim + (size_t)be->q_dim * H + 3 * H * c->ffn;
    size_t n_lm = m->lm_head ? (size_t)c->vocab * H : 0;
    size_t n_ai = m->audio_in ? H * c->frame_samples : 0;
    size_t n_ao = m->audio_out ? H * c->frame_samples : 0;
    return per_layer * c->layers + n_lm + n_ai + n_ao;
}

/* --weights f16: half copies of every matrix the step multiplies by, in one
 * allocation (the model's fp32 copies stay: the sgemm path above the
 * crossover reads them, so this costs half the matrices' fp32 bytes more). */
static int make_weights16(cpu_backend *be, const mt_decoder_opts *o, char *err, size_t errlen)
{
    const mt_model *m = be->m;
    const mt_config *c = be->c;
    size_t H = (size_t)c->hidden;
    size_t total = multiplied_weights(be);
    be->w16 = calloc((size_t)c->layers, sizeof *be->w16);
    be->w16_store = alloc_streamed(total * sizeof(uint16_t));
    if (!be->w16 || !be->w16_store) {
        mt_set_err(err, errlen, "cpu: cannot allocate the f16 weights (%zu bytes)",
                 total * sizeof(uint16_t));
        return -1;
    }
    uint16_t *p = be->w16_store;
    /* a matrix with a finite value beyond f16's range stays fp32 (its
     * half pointer NULL: gemm_cols reads the fp32 one), never infinite */
    int kept = 0;
    char first[64] = "";
    float first_big = 0;
#define TAKE(dst, src, count, ...)                                        \
    do {                                                                  \
        float big_ = mt_half_overflow((src), (count));                    \
        if (big_ > 0) {                                                   \
            (dst) = NULL;                                                 \
            if (!kept++) {                                                \
                snprintf(first, sizeof first, __VA_ARGS__);               \
                first_big = big_;                                         \
            }                                                             \
        } else {                                                          \
            (dst) = p;                                                    \
            mt_half_pack(p, (src), (count));                              \
        }                                                                 \
        p += (count);                                                     \
    } while (0)
    for (int l = 0; l < c->layers; l++) {
        const mt_layer_weights *w = &m->layer[l];
        layer16 *d = &be->w16[l];
        TAKE(d->wq, w->wq, (size_t)be->q_dim * H, "layers.%d.wq", l);
        TAKE(d->wk, w->wk, (size_t)be->kv_dim * H, "layers.%d.wk", l);
        TAKE(d->wv, w->wv, (size_t)be->kv_dim * H, "layers.%d.wv", l);
        TAKE(d->wo, w->wo, H * be->q_dim, "layers.%d.wo", l);
        TAKE(d->w_gate, w->w_gate, (size_t)c->ffn * H, "layers.%d.w_gate", l);
        TAKE(d->w_up, w->w_up, (size_t)c->ffn * H, "layers.%d.w_up", l);
        TAKE(d->w_down, w->w_down, H * c->ffn, "layers.%d.w_down", l);
    }
    if (m->lm_head)
        TAKE(be->lm_head16, m->lm_head, (size_t)c->vocab * H, "lm_head");
    if (m->audio_in)
        TAKE(be->audio_in16, m->audio_in, H * c->frame_samples, "audio_in");
    if (m->audio_out)
        TAKE(be->audio_out16, m->audio_out, H * c->frame_samples, "audio_out");
#undef TAKE
    if (kept) {
        size_t n = strlen(be->note);
        snprintf(be->note + n, sizeof be->note - n, "%sf16 weights: %d matri%s with values "
                 "beyond f16's range (%g) kept in fp32, first %s (largest |value| %g)",
                 n ? "; " : "", kept, kept == 1 ? "x" : "ces", (double)MT_HALF_MAX, first,
                 (double)first_big);
    }
    be->f16_rows = o->weights_f16_rows > 0 ? o->weights_f16_rows : F16_ROWS_DEFAULT;
    return 0;
}

/* One matrix [N, K] into the q8 copy at *q and *s (moved past it), in
 * lane groups where the kernels read them (the LM's products measured
 * fastest there: cpu_q8.h); left fp32 (d->q NULL) where K is not a
 * multiple of the block or a value is not finite: returns 1 then, else 0. */
static int take_q8(q8mat *d, const float *src, size_t N, int K, int8_t **q, float **s)
{
    return mt_q8_take(d, MT_Q8_LANES, src, N, K, q, s) != 0;
}

/* --weights q8: 8-bit copies (cpu_q8.h) of every matrix the step
 * multiplies by, the bytes in one allocation on 2 MiB pages and the
 * scales in another. The model's fp32 matrices stay, as with f16: calls
 * above f16_rows rows run sgemm on them, and the model owns them (its
 * loader, the depformer and the codec's tests read them), so q8 costs
 * 1.125 bytes a weight more, not 3 less. */
static int make_weights8(cpu_backend *be, const mt_decoder_opts *o, char *err, size_t errlen)
{
    const mt_model *m = be->m;
    const mt_config *c = be->c;
    size_t H = (size_t)c->hidden;
    size_t total = multiplied_weights(be);
    be->w8 = calloc((size_t)c->layers, sizeof *be->w8);
    be->w8_store = alloc_streamed(total);
    be->w8_scales = malloc((total / MT_Q8_BLOCK + 1) * sizeof(float));
    if (!be->w8 || !be->w8_store || !be->w8_scales) {
        mt_set_err(err, errlen, "cpu: cannot allocate the q8 weights (%zu bytes)",
                   total + total / MT_Q8_BLOCK * sizeof(float));
        return -1;
    }
    mt_q8_init();
    int8_t *q = be->w8_store;
    float *s = be->w8_scales;
    int kept = 0;
    for (int l = 0; l < c->layers; l++) {
        const mt_layer_weights *w = &m->layer[l];
        layer8 *d = &be->w8[l];
        kept += take_q8(&d->wq, w->wq, (size_t)be->q_dim, c->hidden, &q, &s);
        kept += take_q8(&d->wk, w->wk, (size_t)be->kv_dim, c->hidden, &q, &s);
        kept += take_q8(&d->wv, w->wv, (size_t)be->kv_dim, c->hidden, &q, &s);
        kept += take_q8(&d->wo, w->wo, H, be->q_dim, &q, &s);
        kept += take_q8(&d->w_gate, w->w_gate, (size_t)c->ffn, c->hidden, &q, &s);
        kept += take_q8(&d->w_up, w->w_up, (size_t)c->ffn, c->hidden, &q, &s);
        kept += take_q8(&d->w_down, w->w_down, H, c->ffn, &q, &s);
    }
    if (m->lm_head)
        kept += take_q8(&be->lm_head8, m->lm_head, (size_t)c->vocab, c->hidden, &q, &s);
    if (m->audio_in)
        kept += take_q8(&be->audio_in8, m->audio_in, H, c->frame_samples, &q, &s);
    if (m->audio_out)
        kept += take_q8(&be->audio_out8, m->audio_out, (size_t)c->frame_samples, c->hidden,
                        &q, &s);
    if (kept) {
        size_t n = strlen(be->note);
        snprintf(be->note + n, sizeof be->note - n, "%sq8 weights: %d matri%s kept in fp32 "
                 "(a width not a multiple of %d, or a value not finite)", n ? "; " : "", kept,
                 kept == 1 ? "x" : "ces", MT_Q8_BLOCK);
    }
    be->f16_rows = o->weights_f16_rows > 0 ? o->weights_f16_rows
                   : mt_q8_every_row()     ? MT_Q8_ALL_ROWS
                                           : F16_ROWS_DEFAULT;
    be->all_q8 = !kept;
    return 0;
}

static void *alloc_floats(size_t n, int *fail)
{
    void *p = calloc(n ? n : 1, sizeof(float));
    if (!p)
        *fail = 1;
    return p;
}

/* The pool, committed now (the pages touched) so that no step pays
 * page faults for it and a budget the machine cannot hold fails here. */
static int cpu_attach_pool(mt_backend *b, mt_kv_pool *pool, char *err, size_t errlen)
{
    cpu_backend *be = b->impl;
    be->pool = pool;
    be->kvp = mt_kv_pool_params(pool);
    size_t nbytes = (size_t)mt_kv_pool_blocks(pool) * be->block_elems * be->kv_elem;
    be->layer_elems = (size_t)mt_kv_pool_blocks(pool) * be->layer_block_elems;
    be->kv = alloc_streamed(nbytes);
    if (!be->kv) {
        mt_set_err(err, errlen, "cpu: cannot allocate the kv pool (%zu bytes)", nbytes);
        return -1;
    }
    memset(be->kv, 0, nbytes);
    return 0;
}

/* The model's dimensions as the step uses them. */
static void cpu_geometry(cpu_backend *be, const mt_model *m, const mt_decoder_opts *o)
{
    const mt_config *c = &m->cfg;
    const mt_kv_params *kvp = &o->kv; /* the pool's come with attach_pool */
    int kv_f16 = o->kv_dtype == MT_FMT_F16;
    be->m = m;
    be->c = c;
    be->cache_rope = kvp->policy == MT_KV_WINDOW && kvp->rope == MT_ROPE_CACHE;
    be->R = mt_backend_rows(o);
    be->hd = c->head_dim;
    be->half = c->head_dim / 2;
    be->q_dim = c->heads * c->head_dim;
    be->kv_dim = c->kv_heads * c->head_dim;
    be->qkv_dim = be->q_dim + 2 * be->kv_dim;
    be->group = c->heads / c->kv_heads;
    be->layer_block_elems = (size_t)c->kv_heads * 2 * MT_KV_BLOCK * c->head_dim;
    be->block_elems = (size_t)c->layers * be->layer_block_elems;
    be->kv_f16 = kv_f16;
    be->kv_elem = kv_f16 ? 2 : 4;
}

/* The activations of R rows, the rotary frequencies and, for a window
 * that keeps cache positions, their rotary table. 0, or -1 when out of
 * memory (what was allocated stays for cpu_destroy). */
static int cpu_alloc_activations(cpu_backend *be, const mt_decoder_opts *o)
{
    const mt_config *c = be->c;
    int fail = 0;
    size_t R = (size_t)be->R;
    int fs = c->frame_samples > 0 ? c->frame_samples : 1;
    be->x = alloc_floats(R * c->hidden, &fail);
    be->xn = alloc_floats(R * c->hidden, &fail);
    be->qkv = alloc_floats(R * be->qkv_dim, &fail);
    be->att = alloc_floats(R * be->q_dim, &fail);
    be->gate = alloc_floats(R * c->ffn, &fail);
    be->up = alloc_floats(R * c->ffn, &fail);
    be->pcmf = alloc_floats(R * fs, &fail);
    be->rcos = alloc_floats(R * be->half, &fail);
    be->rsin = alloc_floats(R * be->half, &fail);
    be->qcos = alloc_floats(R * be->half, &fail);
    be->qsin = alloc_floats(R * be->half, &fail);
    be->dcos = alloc_floats(R * be->half, &fail);
    be->dsin = alloc_floats(R * be->half, &fail);
    be->rows = calloc(R, sizeof *be->rows);
    be->inv_freq = calloc((size_t)be->half, sizeof *be->inv_freq);
    if (!be->rows || !be->inv_freq)
        fail = 1;
    if (!fail)
        for (int i = 0; i < be->half; i++)
            be->inv_freq[i] = pow((double)c->rope_theta, -(2.0 * i) / c->head_dim);
    if (!fail && be->cache_rope) {
        int n = o->kv.sink + o->kv.window;
        be->ccos = alloc_floats((size_t)n * be->half, &fail);
        be->csin = alloc_floats((size_t)n * be->half, &fail);
        for (int i = 0; !fail && i < n; i++)
            cpu_rope_table(be, i, be->ccos + (size_t)i * be->half,
                       be->csin + (size_t)i * be->half);
    }
    return fail ? -1 : 0;
}

/* o->threads, or every online core; 1..256. */
static int cpu_thread_count(const mt_decoder_opts *o)
{
    int T = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (T < 1)
        T = 1;
    if (T > 256)
        T = 256;
    return T;
}

/* OpenBLAS picks its kernels from cpuid at load time; in some virtual
 * machines it fails to recognise the CPU and falls back to its SSE3
 * (Prescott) kernels, several times slower than the AVX2/AVX-512 ones the
 * CPU has. It can only be told before it loads (OPENBLAS_CORETYPE), so say
 * so in the note, where the caller can print it. */
static void blas_note(mt_backend *b)
{
#if defined(__x86_64__)
    cpu_backend *be = b->impl;
    const char *core = openblas_get_corename();
    if (!core || strcasecmp(core, "prescott") != 0)
        return;
    const char *want = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2")  ? "Haswell" : NULL;
    if (!want)
        return;
    size_t n = strlen(be->note);   /* after the f16 weights' note, if any */
    snprintf(be->note + n, sizeof be->note - n,
             "%sOpenBLAS chose its %s kernels on a CPU with %s: set OPENBLAS_CORETYPE=%s for the fast ones",
             n ? "; " : "", core, want[0] == 'S' ? "AVX-512" : "AVX2", want);
    b->note = be->note;
#else
    (void)b;
#endif
}

int mt_cpu_backend_create(const mt_model *m, const mt_decoder_opts *o, mt_backend **out,
                          char *err, size_t errlen)
{
    *out = NULL;
    const mt_config *c = &m->cfg;
    if (m->shape_only || !m->layer) {
        mt_set_err(err, errlen, "cpu: model %s has no weights in memory (shape only)",
                 c->name);
        return -1;
    }
    if (mt_backend_check_model(m, o, "cpu", err, errlen))
        return -1;
    int kv_f16 = o->kv_dtype == MT_FMT_F16;
    mt_backend *b = mt_backend_alloc(sizeof(cpu_backend), "cpu: out of memory", err, errlen);
    if (!b)
        return -1;
    cpu_backend *be = b->impl;
    b->name = "cpu";
    b->kv_elem_bytes = kv_f16 ? 2 : sizeof(float); /* the K/V cache's dtype */
    b->attach_pool = cpu_attach_pool;
    b->step = cpu_step;
    b->prefill = cpu_prefill;
    b->wake = cpu_wake;
    b->parallel = cpu_parallel;
    b->destroy = cpu_destroy;
    cpu_geometry(be, m, o);
    if (kv_f16 || o->weights == MT_FMT_F16)
        mt_half_init();

    if (o->weights == MT_FMT_F16 && make_weights16(be, o, err, errlen)) {
        cpu_destroy(b);
        return -1;
    }
    if (o->weights == MT_FMT_Q8 && make_weights8(be, o, err, errlen)) {
        cpu_destroy(b);
        return -1;
    }
    if (be->note[0])
        b->note = be->note;   /* matrices kept in fp32 */
    int fail = cpu_alloc_activations(be, o) != 0;
    int T = cpu_thread_count(o);
    be->tp.n = T;
    be->scr = calloc((size_t)T, sizeof *be->scr);
    be->att_next = aligned_alloc(64, (size_t)T * sizeof *be->att_next);
    if (fail || !be->scr || !be->att_next) {
        mt_set_err(err, errlen, "cpu: out of memory for activations");
        be->tp.n = be->scr ? T : 0;
        cpu_destroy(b);
        return -1;
    }
    /* Our threads do the parallel work; OpenBLAS runs inside them. */
    openblas_set_num_threads(1);
    if (T > 1 && mt_tpool_start(&be->tp, T, err, errlen) != 0) {
        cpu_destroy(b);
        return -1;
    }
    blas_note(b);
    cpu_row_split_init(be);
    b->par_threads = T;
    /* q8 too: the depformer follows with 8-bit copies of its own */
    b->weights_f16_rows = be->w16 || be->w8 ? be->f16_rows : 0;
    *out = b;
    return 0;
}
