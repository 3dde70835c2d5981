/* test_mimi_cuda.c: Mimi through the codec's backend switch
 * (mimi_engine.h): the CPU engine, and the CUDA one against Kyutai's
 * fixtures and the CPU (parity), ready for a device.
 *
 * Always (CPU): the switch's parsing and argument checks; the CPU engine
 * over each fixture (tests/fixtures/mimi, mimi-b: Kyutai's streaming
 * codes and float64 PCM, rings that wrap) gives Kyutai's codes, for one
 * slot and for three slots batched with staggered starts (a slot mapped
 * to the wrong state fails); and a negative control: the CPU run with a
 * wrong rotary period (what a wrong rotary or ring position on the GPU
 * would produce) must fail the same checks the GPU is held to.
 *
 * With a GPU (skipped without; MT_REQUIRE_GPU=1 fails instead): the CUDA
 * engine over each fixture, alone and batched with staggered starts and a
 * reset: codes identical to Kyutai's and the CPU's, PCM within the
 * tolerance below; and the published shape (synthetic:mimi) at batch 4:
 * CUDA decode of the CPU's codes against the CPU's decode.
 *
 * Tolerance. The CUDA path is fp32 throughout (cuBLAS SGEMM in pedantic
 * math: no TF32; LayerNorm's moments in double as on the CPU; CUDA's
 * expf/expm1f/erff/sinf/cosf within 2 ulp, like glibc's), so it is the
 * same function as the CPU's and Kyutai's float32 runs, in another order
 * of summation: its error against Kyutai's float64 output is accumulated
 * float32 rounding of the same size (see test_mimi.c). It is held to the
 * CPU's bound: within 8x torch-f32's error of float64 (info.json), 2.1e-3
 * on outputs up to 507 (mimi), 0.11 on outputs up to 11755 (mimi-b); and
 * CUDA vs CPU within the sum of the two (16x). The codes must be
 * identical: the fixtures' smallest code margin (3.8e-4 of the distance)
 * is three orders above the latent's float32 error. For synthetic:mimi
 * (no float64 reference) the decode's CUDA-vs-CPU difference must be under
 * 1e-4 of the peak (float32 through ~40 layers stays near 1e-6). TF32
 * (10-bit mantissa) would exceed these: it is not used. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/mimi.h"
#include "codec/mimi_engine.h"
#include "codec/mimi_impl.h"
#include "decode/decoder.h"
#include "tap.h"

static char root[2048];

static void *slurp(const char *fixture, const char *rel, size_t *len)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/tests/fixtures/%s/%s", root, fixture, rel);
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    void *b = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
        b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b)
        *len = (size_t)n;
    return b;
}

static double json_num(const char *txt, const char *key)
{
    const char *p = strstr(txt, key);
    if (!p)
        return NAN;
    p = strchr(p, ':');
    return p ? strtod(p + 1, NULL) : NAN;
}

typedef struct fixture {
    const char *name;
    mimi_model *m;
    int nf, fs, nq;
    float *pcm;      /* [nf][fs] */
    int32_t *ref;    /* [nf][nq]: Kyutai's codes */
    float *dec64;    /* [nf][fs]: Kyutai's float64 decode */
    double tol, peak;
} fixture;

static int fixture_load(fixture *x, const char *name)
{
    memset(x, 0, sizeof *x);
    x->name = name;
    size_t ln = 0, li = 0, lc = 0, l64 = 0, linfo = 0;
    char err[512];
    void *st = slurp(name, "model.safetensors", &ln);
    char *info = slurp(name, "info.json", &linfo);
    x->pcm = slurp(name, "input.f32", &li);
    x->ref = slurp(name, "codes.i32", &lc);
    x->dec64 = slurp(name, "decoded-ref.f32", &l64);
    int rc = st && info && x->pcm && x->ref && x->dec64 ? 0 : -1;
    if (rc == 0) {
        info[linfo] = 0;
        x->nf = (int)json_num(info, "\"frames\"");
        x->tol = 8 * json_num(info, "\"torch_f32_vs_f64_max_abs\"");
        rc = mimi_load_mem(st, ln, name, NULL, &x->m, err, sizeof err);
        if (rc == 0)
            rc = mimi_set_codebooks(x->m, (int)json_num(info, "\"n_q_used\""), err, sizeof err);
        if (rc)
            tap_diag("%s: %s", name, err);
    }
    if (rc == 0) {
        x->fs = mimi_frame_size(mimi_model_config(x->m));
        x->nq = mimi_model_config(x->m)->n_q_used;
        rc = li == (size_t)x->nf * x->fs * 4 && lc == (size_t)x->nf * x->nq * 4 &&
             l64 == li && isfinite(x->tol) ? 0 : -1;
        for (size_t i = 0; i < (size_t)x->nf * x->fs; i++)
            if (fabs(x->dec64[i]) > x->peak)
                x->peak = fabs(x->dec64[i]);
    }
    free(st);
    free(info);
    return rc;
}

static void fixture_free(fixture *x)
{
    mimi_free(x->m);
    free(x->pcm); free(x->ref); free(x->dec64);
}

/* Session b's input: the fixture's, shifted and scaled (b = 0: itself). */
static float input(const fixture *x, int b, size_t i)
{
    size_t n = (size_t)x->nf * x->fs;
    return x->pcm[(i + (size_t)b * 777) % n] * (1.0f - 0.2f * b);
}

/* Runs B sessions on slots 0..B-1 of e, session b starting at frame
 * b * stagger (joining a running batch), every frame of each; codes
 * [B][nf][nq], out [B][nf][fs]. */
static int run(mimi_engine *e, const fixture *x, int B, int stagger, int32_t *codes, float *out)
{
    char err[512];
    int slot[8], in_batch[8];
    float *in = malloc((size_t)B * x->fs * 4), *o = malloc((size_t)B * x->fs * 4);
    int32_t *c = malloc((size_t)B * x->nq * 4);
    int rc = in && o && c && B <= 8 ? 0 : -1;
    for (int b = 0; b < B && rc == 0; b++)
        rc = mimi_engine_reset(e, b, err, sizeof err);
    for (int t = 0; rc == 0 && t < x->nf + (B - 1) * stagger; t++) {
        int n = 0;
        for (int b = 0; b < B; b++) {
            int f = t - b * stagger;
            if (f < 0 || f >= x->nf)
                continue;
            in_batch[n] = b;
            slot[n] = b;
            for (int i = 0; i < x->fs; i++)
                in[(size_t)n * x->fs + i] = input(x, b, (size_t)f * x->fs + i);
            n++;
        }
        rc = mimi_engine_encode(e, slot, n, in, c, err, sizeof err);
        if (rc == 0)
            rc = mimi_engine_decode(e, slot, n, c, o, err, sizeof err);
        for (int j = 0; rc == 0 && j < n; j++) {
            int b = in_batch[j], f = t - b * stagger;
            memcpy(codes + ((size_t)b * x->nf + f) * x->nq, c + (size_t)j * x->nq, (size_t)x->nq * 4);
            memcpy(out + ((size_t)b * x->nf + f) * x->fs, o + (size_t)j * x->fs, (size_t)x->fs * 4);
        }
    }
    if (rc)
        tap_diag("run: %s", err);
    free(in); free(o); free(c);
    return rc;
}

/* Session 0's codes against Kyutai's, and its PCM against the float64
 * reference; returns 1 when both hold. */
static int against_kyutai(const fixture *x, const int32_t *codes, const float *out, const char *what,
                          int report)
{
    int same = 0;
    for (int i = 0; i < x->nf * x->nq; i++)
        same += codes[i] == x->ref[i];
    double e64 = 0;
    for (size_t i = 0; i < (size_t)x->nf * x->fs; i++) {
        double d = fabs(out[i] - x->dec64[i]);
        if (!(d <= e64))
            e64 = isnan(d) ? INFINITY : d;
    }
    int good = same == x->nf * x->nq && e64 <= x->tol;
    if (report) {
        tap_ok(same == x->nf * x->nq, "%s %s: codes identical to Kyutai's (%d/%d)", x->name, what, same,
               x->nf * x->nq);
        tap_ok(e64 <= x->tol, "%s %s: PCM vs float64 %.3g <= %.3g (peak %.0f)", x->name, what, e64,
               x->tol, x->peak);
    }
    return good;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static void switch_checks(const fixture *x)
{
    char err[512];
    mimi_backend be;
    tap_ok(mimi_backend_parse("cpu", &be, err, sizeof err) == 0 && be == MIMI_BACKEND_CPU &&
           mimi_backend_parse("cuda", &be, err, sizeof err) == 0 && be == MIMI_BACKEND_CUDA &&
           strcmp(mimi_backend_name(MIMI_BACKEND_CUDA), "cuda") == 0,
           "backend names cpu, cuda parse");
    tap_ok(mimi_backend_parse("gpu", &be, err, sizeof err) == -1 && strstr(err, "cpu or cuda"),
           "backend 'gpu' refused: %s", err);
    mimi_engine *e = NULL;
    tap_ok(mimi_engine_new(x->m, MIMI_BACKEND_CPU, 0, 4, &e, err, sizeof err) == -1 && !e,
           "a batch of 0 refused: %s", err);
    if (mimi_engine_new(x->m, MIMI_BACKEND_CPU, 2, 3, &e, err, sizeof err)) {
        tap_ok(0, "cpu engine: %s", err);
        return;
    }
    float *pcm = calloc((size_t)2 * x->fs, 4);
    int32_t codes[64] = { 0 };
    int dup[2] = { 1, 1 }, far[1] = { 3 }, two[2] = { 0, 1 };
    tap_ok(pcm && mimi_engine_encode(e, dup, 2, pcm, codes, err, sizeof err) == -1 &&
           strstr(err, "twice"), "a slot twice in one batch refused: %s", err);
    tap_ok(mimi_engine_encode(e, far, 1, pcm, codes, err, sizeof err) == -1 && strstr(err, "slot 3"),
           "a slot past the engine's refused: %s", err);
    tap_ok(mimi_engine_encode(e, two, 3, pcm, codes, err, sizeof err) == -1,
           "a batch over max_batch refused: %s", err);
    codes[1] = mimi_model_config(x->m)->bins;
    tap_ok(mimi_engine_decode(e, two, 1, codes, pcm, err, sizeof err) == -1 && strstr(err, "outside"),
           "a code out of range refused: %s", err);
    tap_ok(mimi_engine_frames_encoded(e, 0) == 0 && mimi_engine_frames_decoded(e, 1) == 0 &&
           mimi_engine_frames_encoded(e, 9) == -1, "refused calls count no frame");
    free(pcm);
    mimi_engine_free(e);
}

/* The CPU engine on x: alone and 3 staggered slots. */
static void cpu_checks(fixture *x, int32_t *codes, float *out)
{
    char err[512];
    mimi_engine *e = NULL;
    if (mimi_engine_new(x->m, MIMI_BACKEND_CPU, 3, 3, &e, err, sizeof err)) {
        tap_ok(0, "%s: cpu engine: %s", x->name, err);
        return;
    }
    int rc = run(e, x, 1, 0, codes, out);
    tap_ok(rc == 0, "%s: cpu engine runs %d frames", x->name, x->nf);
    against_kyutai(x, codes, out, "cpu engine alone", 1);
    rc = run(e, x, 3, 2, codes, out);
    against_kyutai(x, codes, out, "cpu engine slot 0 of 3 staggered", 1);
    tap_ok(rc == 0 && mimi_engine_frames_encoded(e, 2) == x->nf && mimi_engine_frames_decoded(e, 1) == x->nf,
           "%s: every slot counted %d frames each way", x->name, x->nf);
    mimi_engine_free(e);

    /* negative control: a wrong rotary period must fail the checks */
    mimi_config *c = &x->m->c;
    double mp = c->max_period;
    c->max_period = mp * 0.9;
    rc = mimi_engine_new(x->m, MIMI_BACKEND_CPU, 1, 1, &e, err, sizeof err);
    if (rc == 0)
        rc = run(e, x, 1, 0, codes, out);
    tap_ok(rc == 0 && !against_kyutai(x, codes, out, "", 0),
           "%s: control: a rotary period off by 10%% fails the parity checks", x->name);
    mimi_engine_free(e);
    c->max_period = mp;
}

static void gpu_checks(fixture *x, int32_t *cc, float *co, int32_t *gc, float *go)
{
    char err[512];
    mimi_engine *cpu = NULL, *gpu = NULL;
    size_t nc = (size_t)3 * x->nf * x->nq, np = (size_t)3 * x->nf * x->fs;
    if (mimi_engine_new(x->m, MIMI_BACKEND_CPU, 3, 3, &cpu, err, sizeof err) ||
        mimi_engine_new(x->m, MIMI_BACKEND_CUDA, 3, 4, &gpu, err, sizeof err)) {
        tap_ok(0, "%s: engines: %s", x->name, err);
        mimi_engine_free(cpu);
        return;
    }
    tap_diag("%s: cuda engine holds %zu device bytes", x->name, mimi_engine_bytes(gpu));
    int rc = run(gpu, x, 1, 0, gc, go);
    tap_ok(rc == 0, "%s: cuda runs %d frames", x->name, x->nf);
    against_kyutai(x, gc, go, "cuda alone", 1);
    rc = run(cpu, x, 3, 2, cc, co) || run(gpu, x, 3, 2, gc, go);
    against_kyutai(x, gc, go, "cuda slot 0 of 3 staggered", 1);
    int cd = 0;
    for (size_t i = 0; i < nc; i++)
        cd += cc[i] != gc[i];
    double d = max_diff(co, go, np);
    tap_ok(rc == 0 && cd == 0, "%s: cuda codes equal the cpu's, 3 staggered sessions (%d differ)", x->name, cd);
    tap_ok(rc == 0 && d <= 2 * x->tol, "%s: cuda PCM vs cpu %.3g <= %.3g", x->name, d, 2 * x->tol);
    /* a reset slot starts over: slot 1 run alone again equals session 0 */
    mimi_engine_free(gpu);
    gpu = NULL;
    rc = mimi_engine_new(x->m, MIMI_BACKEND_CUDA, 1, 4, &gpu, err, sizeof err);
    if (rc == 0)
        rc = run(gpu, x, 1, 0, gc, go);
    tap_ok(rc == 0 && mimi_engine_frames_encoded(gpu, 0) == x->nf,
           "%s: a second cuda engine, slot 0 reset and reused", x->name);
    against_kyutai(x, gc, go, "cuda after reset", 1);
    mimi_engine_free(gpu);
    mimi_engine_free(cpu);
}

/* The published shape: CUDA decode of the CPU's codes, batch 4, 3 frames. */
static void gpu_real_shape(void)
{
    char err[512];
    mimi_model *m = NULL;
    if (mimi_load("synthetic:mimi", NULL, 0, &m, err, sizeof err)) {
        tap_ok(0, "synthetic:mimi: %s", err);
        return;
    }
    enum { B = 4, F = 3 };
    const mimi_config *c = mimi_model_config(m);
    int fs = mimi_frame_size(c), nq = c->n_q_used, slot[B] = { 0, 1, 2, 3 };
    mimi_engine *cpu = NULL, *gpu = NULL;
    float *pcm = malloc((size_t)B * fs * 4), *oc = malloc((size_t)B * fs * 4),
          *og = malloc((size_t)B * fs * 4);
    int32_t *cc = malloc((size_t)B * nq * 4), *gc = malloc((size_t)B * nq * 4);
    int rc = pcm && oc && og && cc && gc ? 0 : -1;
    if (rc == 0)
        rc = mimi_engine_new(m, MIMI_BACKEND_CPU, B, B, &cpu, err, sizeof err) ||
             mimi_engine_new(m, MIMI_BACKEND_CUDA, B, B, &gpu, err, sizeof err);
    double worst = 0, peak = 0;
    int same = 0;
    for (int f = 0; rc == 0 && f < F; f++) {
        for (int b = 0; b < B; b++)
            for (int i = 0; i < fs; i++)
                pcm[(size_t)b * fs + i] = 0.3f * sinf(0.001f * (float)((f * fs + i) * (b + 3)));
        rc = mimi_engine_encode(cpu, slot, B, pcm, cc, err, sizeof err) ||
             mimi_engine_encode(gpu, slot, B, pcm, gc, err, sizeof err) ||
             mimi_engine_decode(cpu, slot, B, cc, oc, err, sizeof err) ||
             mimi_engine_decode(gpu, slot, B, cc, og, err, sizeof err);
        for (int i = 0; rc == 0 && i < B * nq; i++)
            same += cc[i] == gc[i];
        for (size_t i = 0; rc == 0 && i < (size_t)B * fs; i++)
            if (fabs(oc[i]) > peak)
                peak = fabs(oc[i]);
        double d = rc == 0 ? max_diff(oc, og, (size_t)B * fs) : INFINITY;
        if (d > worst)
            worst = d;
    }
    if (rc)
        tap_diag("synthetic:mimi: %s", err);
    tap_diag("synthetic:mimi: encode codes equal cpu's: %d of %d (random weights: near ties possible)",
             same, B * F * nq);
    tap_ok(rc == 0 && worst <= 1e-4 * peak, "synthetic:mimi batch %d: cuda decode vs cpu %.3g <= 1e-4 of peak %.3g",
           B, worst, peak);
    mimi_engine_free(cpu);
    mimi_engine_free(gpu);
    mimi_free(m);
    free(pcm); free(oc); free(og); free(cc); free(gc);
}

int main(void)
{
    const char *r = getenv("MT_ROOT");
    snprintf(root, sizeof root, "%s", r && *r ? r : ".");
    const char *names[2] = { "mimi", "mimi-b" };
    fixture fx[2];
    int loaded[2];
    for (int i = 0; i < 2; i++) {
        loaded[i] = fixture_load(&fx[i], names[i]) == 0;
        tap_ok(loaded[i], "fixture %s loads", names[i]);
    }
    if (!loaded[0] || !loaded[1]) {
        for (int i = 0; i < 2; i++)
            fixture_free(&fx[i]);
        return tap_done();
    }
    size_t nc = 0, np = 0;
    for (int i = 0; i < 2; i++) {
        if ((size_t)3 * fx[i].nf * fx[i].nq > nc) nc = (size_t)3 * fx[i].nf * fx[i].nq;
        if ((size_t)3 * fx[i].nf * fx[i].fs > np) np = (size_t)3 * fx[i].nf * fx[i].fs;
    }
    int32_t *cc = calloc(nc, 4), *gc = calloc(nc, 4);
    float *co = calloc(np, 4), *go = calloc(np, 4);
    if (!tap_ok(cc && gc && co && go, "buffers")) {
        return tap_done();
    }
    switch_checks(&fx[0]);
    for (int i = 0; i < 2; i++)
        cpu_checks(&fx[i], cc, co);

    char why[512] = "";
    int present = 0;
#ifdef MT_HAVE_CUDA
    present = mt_cuda_device_present(why, sizeof why) && mt_cuda_available(why, sizeof why);
#else
    snprintf(why, sizeof why, "built without CUDA (no nvcc at build time)");
#endif
    if (!present) {
        char err[512];
        mimi_engine *e = NULL;
        tap_ok(mimi_engine_new(fx[0].m, MIMI_BACKEND_CUDA, 1, 1, &e, err, sizeof err) == -1 && !e &&
               err[0], "the cuda codec without a GPU fails cleanly: %s", err);
        if (getenv("MT_REQUIRE_GPU") && atoi(getenv("MT_REQUIRE_GPU")))
            tap_ok(0, "a GPU is present (MT_REQUIRE_GPU=1): %s", why);
        else
            tap_skip("CUDA codec parity (fixtures mimi, mimi-b; synthetic:mimi batch 4): no GPU here");
    } else {
        tap_diag("GPU: %s", why);
        for (int i = 0; i < 2; i++)
            gpu_checks(&fx[i], cc, co, gc, go);
        gpu_real_shape();
    }
    free(cc); free(gc); free(co); free(go);
    for (int i = 0; i < 2; i++)
        fixture_free(&fx[i]);
    return tap_done();
}
