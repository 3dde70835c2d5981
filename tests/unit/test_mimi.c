/* test_mimi.c: the Mimi codec against Kyutai's own PyTorch code, then
 * batch against single sessions, the loader's refusals, and bad calls.
 *
 * The fixtures (made by tests/fixtures/gen/mimi_gen.py) are tiny random
 * Mimis with the real ratios 8,6,5,4 at 24 kHz, run by Kyutai's streaming
 * path frame by frame: tests/fixtures/mimi (16 frames, rings of 6 steps,
 * 4 codebooks, plus a BF16 copy of the weights) and tests/fixtures/mimi-b
 * (12 frames, two residual layers per stage, the second dilated, rings of
 * 5, 3 of 5 codebooks used). Both rings wrap several times. A third,
 * tests/fixtures/mimi-own, is our own numpy reference
 * (tests/fixtures/gen/mimi_ref.py) for what those do not cover (test_own).
 *
 * Tolerance for the decoded PCM. Each fixture holds Kyutai's streaming
 * output computed in float64, and info.json the largest difference of
 * their float32 run from it. Their float32 run and ours are the same
 * function evaluated with float32 rounding in different orders of
 * summation, so each differs from the float64 result by accumulated
 * rounding of the same size (sums of n products carry about sqrt(n) eps32
 * |w||x| each, compounded through the same 30-odd layers). We require our
 * error against float64 to be within 8x theirs: 2.1e-3 on outputs up to
 * 507 (mimi), 0.11 on outputs up to 11755 (mimi-b), i.e. about 4e-6 and
 * 9e-6 of the peak; a wrong tap, bias, ring slot or rotary position moves
 * outputs by orders of magnitude more (see the report of issue 35 for the
 * faults planted). The codes must be identical: every code's nearest
 * centroid wins by at least 3.8e-4 (mimi) and 1.2e-2 (mimi-b) of its
 * distance (info.json: min_code_margin), far above the relative error of
 * the latent (4e-7). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "codec/mimi.h"
#include "codec/mimi_impl.h"
#include "decode/cpu_q8.h"
#include "model/safetensors.h"
#include "tap.h"
#include "test_util.h"

static char root[2048];
static const char *fixture = "mimi";   /* tests/fixtures/NAME */
static int NF = 16;                    /* its frames */

static void *slurp(const char *rel, size_t *len)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/tests/fixtures/%s/%s", root, fixture, rel);
    return test_file_load(p, len);
}

/* Runs the fixture's 16 frames through one session; codes [NF][nq]. */
static int run_single(const mimi_model *m, const float *pcm, int32_t *codes, float *out)
{
    char err[256];
    const mimi_config *c = mimi_model_config(m);
    int fs = mimi_frame_size(c), nq = c->n_q_used;
    mimi_state *es = mimi_state_new(m, err, sizeof err), *ds = mimi_state_new(m, err, sizeof err);
    mimi_batch *w = mimi_batch_new(m, 1, err, sizeof err);
    int rc = es && ds && w ? 0 : -1;
    for (int f = 0; f < NF && rc == 0; f++) {
        rc = mimi_encode(m, w, &es, 1, pcm + (size_t)f * fs, codes + f * nq, err, sizeof err);
        if (rc == 0)
            rc = mimi_decode(m, w, &ds, 1, codes + f * nq, out + (size_t)f * fs, err, sizeof err);
    }
    if (rc)
        tap_diag("run: %s", err);
    mimi_state_free(es);
    mimi_state_free(ds);
    mimi_batch_free(w);
    return rc;
}

/* full: also batch against single sessions, bad calls, the BF16 copy */
static void test_fixture(const char *name, int full)
{
    size_t ln, li, lc, l64, linfo;
    char err[512];
    fixture = name;
    tap_diag("fixture tests/fixtures/%s", name);
    void *st = slurp("model.safetensors", &ln);
    float *pcm = slurp("input.f32", &li);
    int32_t *ref = slurp("codes.i32", &lc);
    float *dec64 = slurp("decoded-ref.f32", &l64);
    char *info = slurp("info.json", &linfo);
    if (!tap_ok(st && pcm && ref && dec64 && info, "%s: fixtures read", name)) {
        free(st); free(pcm); free(ref); free(dec64); free(info);
        return;
    }
    info[linfo - 1] = 0;
    NF = (int)test_json_num(info, "\"frames\"");
    mimi_model *m = NULL;
    int rc = mimi_load_mem(st, ln, "model.safetensors", NULL, &m, err, sizeof err);
    if (rc == 0)
        rc = mimi_set_codebooks(m, (int)test_json_num(info, "\"n_q_used\""), err, sizeof err);
    if (!tap_ok(rc == 0, "%s: checkpoint loads with its metadata config%s%s", name, rc ? ": " : "", rc ? err : "")) {
        mimi_free(m);
        free(st); free(pcm); free(ref); free(dec64); free(info);
        return;
    }
    const mimi_config *c = mimi_model_config(m);
    int fs = mimi_frame_size(c), nq = c->n_q_used;
    tap_ok(fs == 1920 && mimi_downsample_stride(c) == 2 && nq == (int)test_json_num(info, "\"n_q_used\""),
           "%s: frame %d, %d of %d codebooks, context %d, %d residual layer(s)", name, fs, nq, c->n_q,
           c->context, c->n_residual_layers);
    tap_ok(li == (size_t)NF * fs * 4 && lc == (size_t)NF * nq * 4 && l64 == (size_t)NF * fs * 4,
           "%s: fixture sizes", name);

    int32_t *codes = calloc((size_t)NF * nq, 4);
    float *out = calloc((size_t)NF * fs, 4);
    rc = run_single(m, pcm, codes, out);
    int same = 0, first_bad = -1;
    for (int i = 0; i < NF * nq; i++) {
        if (codes[i] == ref[i])
            same++;
        else if (first_bad < 0)
            first_bad = i;
    }
    tap_ok(rc == 0 && same == NF * nq, "%s: codes identical to Kyutai's streaming encode: %d/%d (first differing %d)",
           name, same, NF * nq, first_bad);

    double t32 = test_json_num(info, "\"torch_f32_vs_f64_max_abs\""), tol = 8 * t32;
    double e64 = 0, peak = 0;
    for (size_t i = 0; i < (size_t)NF * fs; i++) {
        double d = fabs(out[i] - dec64[i]);
        if (d > e64) e64 = d;
        if (fabs(dec64[i]) > peak) peak = fabs(dec64[i]);
    }
    tap_diag("%s decoded: peak %.1f, ours vs float64 %.3g, torch float32 vs float64 %.3g, tolerance %.3g", name,
             peak, e64, t32, tol);
    tap_ok(isfinite(tol) && e64 <= tol, "%s: decoded PCM within 8x torch-f32's error of float64 (%.3g <= %.3g)",
           name, e64, tol);
    if (!full)
        goto done;

    /* batch: three sessions with different inputs, one call per frame,
     * equal to each session run alone */
    {
        enum { B = 3 };
        mimi_state *es[B], *ds[B];
        mimi_batch *w = mimi_batch_new(m, B, err, sizeof err);
        float *in = malloc((size_t)B * fs * 4), *o = malloc((size_t)B * fs * 4);
        float *alone[B];
        int32_t *ac[B], *bc = malloc((size_t)B * nq * 4);
        float *pin[B];
        int ok = w && in && o && bc;
        for (int b = 0; b < B; b++) {
            es[b] = mimi_state_new(m, err, sizeof err);
            ds[b] = mimi_state_new(m, err, sizeof err);
            pin[b] = malloc((size_t)NF * fs * 4);
            alone[b] = malloc((size_t)NF * fs * 4);
            ac[b] = malloc((size_t)NF * nq * 4);
            ok = ok && es[b] && ds[b] && pin[b] && alone[b] && ac[b];
        }
        for (int b = 0; ok && b < B; b++) {
            for (int i = 0; i < NF * fs; i++)   /* session b: the input, shifted and scaled */
                pin[b][i] = pcm[(i + b * 777) % (NF * fs)] * (1.0f - 0.2f * b);
            ok = run_single(m, pin[b], ac[b], alone[b]) == 0;
        }
        int cd = 0;
        double md = 0;
        for (int f = 0; ok && f < NF; f++) {
            for (int b = 0; b < B; b++)
                memcpy(in + (size_t)b * fs, pin[b] + (size_t)f * fs, (size_t)fs * 4);
            ok = mimi_encode(m, w, es, B, in, bc, err, sizeof err) == 0 &&
                 mimi_decode(m, w, ds, B, bc, o, err, sizeof err) == 0;
            for (int b = 0; ok && b < B; b++) {
                for (int i = 0; i < nq; i++)
                    cd += bc[b * nq + i] != ac[b][f * nq + i];
                for (int i = 0; i < fs; i++) {
                    double d = fabs(o[(size_t)b * fs + i] - alone[b][(size_t)f * fs + i]);
                    if (d > md) md = d;
                }
            }
        }
        tap_ok(ok && cd == 0, "batch of %d: codes equal to each session alone (%d differ)", B, cd);
        tap_ok(ok && md <= 1e-5 * peak, "batch of %d: PCM equal to each session alone (max diff %.3g)", B, md);
        for (int b = 0; b < B; b++) {
            tap_ok(mimi_state_frames_encoded(es[b]) == NF && mimi_state_frames_decoded(ds[b]) == NF,
                   "session %d counted %lld frames in, %lld out", b,
                   (long long)mimi_state_frames_encoded(es[b]), (long long)mimi_state_frames_decoded(ds[b]));
            mimi_state_free(es[b]); mimi_state_free(ds[b]);
            free(pin[b]); free(alone[b]); free(ac[b]);
        }
        /* bad calls */
        int32_t badc[4] = { 0, 32, 0, 0 };
        rc = mimi_decode(m, w, ds, 1, badc, o, err, sizeof err);
        tap_ok(rc == -1 && strstr(err, "code 32"), "a code out of range is refused: %s", err);
        rc = mimi_encode(m, w, es, B + 1, in, bc, err, sizeof err);
        tap_ok(rc == -1 && strstr(err, "batch"), "a batch over the workspace is refused: %s", err);
        mimi_batch_free(w);
        free(in); free(o); free(bc);
    }

    /* BF16 copy: every weight is the F32 one rounded to bfloat16 */
    size_t lb;
    void *stb = slurp("model-bf16.safetensors", &lb);
    mimi_model *mb = NULL;
    rc = stb ? mimi_load_mem(stb, lb, "model-bf16.safetensors", NULL, &mb, err, sizeof err) : -1;
    tap_ok(rc == 0, "BF16 checkpoint loads%s%s", rc ? ": " : "", rc ? err : "");
    if (rc == 0) {
        /* every weight (codebooks apart: divided by usage at load) is the
         * F32 one rounded to bfloat16 */
        mt_st_file sf;
        int bad = -1, checked = 0;
        if (mt_st_parse(st, ln, "f32", &sf, err, sizeof err) == 0) {
            bad = 0;
            for (int j = 0; j < mb->ntab; j++) {
                const mimi_tensor *t = &mb->tab[j];
                const mt_st_tensor *f = mt_st_find(&sf, t->name);
                if (!t->dst || strstr(t->name, "embedding_sum") || !f)
                    continue;
                float *a = malloc(f->numel * 4);
                if (!a || mt_st_to_f32(f, a) != 0) { bad++; free(a); continue; }
                for (uint64_t k = 0; k < f->numel; k++)
                    bad += t->dst[k] != mt_bf16_to_f32(mt_f32_to_bf16(a[k]));
                checked++;
                free(a);
            }
            mt_st_free(&sf);
        }
        tap_ok(bad == 0 && checked > 100, "BF16 checkpoint: %d tensors equal to F32 rounded to bfloat16 (%d differ)",
               checked, bad);
        tap_ok(bad == 0 && mimi_param_count(mb) == mimi_param_count(m), "BF16 model has the F32 model's %zu weights",
               mimi_param_count(mb));
        int32_t *cb = calloc((size_t)NF * nq, 4);
        float *ob = calloc((size_t)NF * fs, 4);
        int agree = 0;
        if (run_single(mb, pcm, cb, ob) == 0)
            for (int i = 0; i < NF * nq; i++)
                agree += cb[i] == ref[i];
        tap_diag("BF16 weights: %d/%d codes as F32", agree, NF * nq);
        tap_ok(agree >= NF * nq / 4, "BF16 weights run (%d/%d codes as F32)", agree, NF * nq);
        free(cb);
        free(ob);
    }
    mimi_free(mb);
    free(stb);
done:
    free(codes);
    free(out);
    mimi_free(m);
    free(st); free(pcm); free(ref); free(dec64); free(info);
}

/* One staggered run over the own fixture's sessions (test_own): session s
 * encodes its frame f at tick starts[s] + f and decodes it (from the
 * reference codes) one tick later, so every call's batch mixes sessions at
 * different positions, and its rows are in a different order every tick.
 * codes [S][NF][nq] and out [S][NF][fs] receive the results; dec_codes
 * [S][NF][nq] are the codes decoded. */
static int run_staggered(const mimi_model *m, int S, const int *starts, const int16_t *pcm16,
                         const int32_t *dec_codes, int32_t *codes, float *out, int *mixed)
{
    enum { MAXS = 8 };
    char err[256];
    const mimi_config *c = mimi_model_config(m);
    const int fs = mimi_frame_size(c), nq = c->n_q_used;
    mimi_state *es[MAXS], *ds[MAXS], *be[MAXS], *bd[MAXS];
    int re[MAXS], rd[MAXS];
    mimi_batch *w = mimi_batch_new(m, S, err, sizeof err);
    float *in = malloc((size_t)S * fs * 4), *o = malloc((size_t)S * fs * 4);
    int32_t *bc = malloc((size_t)S * nq * 4), *dc = malloc((size_t)S * nq * 4);
    int rc = S <= MAXS && w && in && o && bc && dc ? 0 : -1, last = 0;
    for (int s = 0; s < S && s < MAXS; s++) {
        es[s] = mimi_state_new(m, err, sizeof err);
        ds[s] = mimi_state_new(m, err, sizeof err);
        if (!es[s] || !ds[s])
            rc = -1;
        if (starts[s] + NF + 1 > last)
            last = starts[s] + NF + 1;
    }
    *mixed = 0;
    for (int k = 0; rc == 0 && k < last; k++) {
        int ne = 0, nd = 0;
        for (int i = 0; i < S; i++) {
            int s = k % 2 ? (i + k) % S : S - 1 - (i + k) % S;   /* a new row order each tick */
            int fe = k - starts[s], fd = fe - 1;
            if (fe >= 0 && fe < NF) {
                re[ne] = s;
                be[ne] = es[s];
                for (int j = 0; j < fs; j++)
                    in[(size_t)ne * fs + j] = pcm16[((size_t)s * NF + fe) * fs + j] / 32768.0f;
                ne++;
            }
            if (fd >= 0 && fd < NF) {
                rd[nd] = s;
                bd[nd] = ds[s];
                memcpy(dc + (size_t)nd * nq, dec_codes + ((size_t)s * NF + fd) * nq, (size_t)nq * 4);
                nd++;
            }
        }
        if (ne > 1 && starts[re[0]] != starts[re[1]])
            *mixed = 1;
        if (ne && mimi_encode(m, w, be, ne, in, bc, err, sizeof err))
            rc = -1;
        for (int r = 0; rc == 0 && r < ne; r++)
            memcpy(codes + ((size_t)re[r] * NF + (k - starts[re[r]])) * nq, bc + (size_t)r * nq,
                   (size_t)nq * 4);
        if (rc == 0 && nd && mimi_decode(m, w, bd, nd, dc, o, err, sizeof err))
            rc = -1;
        for (int r = 0; rc == 0 && r < nd; r++)
            memcpy(out + ((size_t)rd[r] * NF + (k - starts[rd[r]] - 1)) * fs, o + (size_t)r * fs,
                   (size_t)fs * 4);
    }
    for (int s = 0; s < S && s < MAXS; s++) {
        if (rc == 0 && (mimi_state_frames_encoded(es[s]) != NF || mimi_state_frames_decoded(ds[s]) != NF))
            rc = -2;
        mimi_state_free(es[s]);
        mimi_state_free(ds[s]);
    }
    if (rc == -1)
        tap_diag("staggered run: %s", err);
    mimi_batch_free(w);
    free(in); free(o); free(bc); free(dc);
    return rc;
}

/* Our own numpy reference (tests/fixtures/gen/mimi_ref.py, written from
 * the architecture, BF16 weights) for what Kyutai's fixtures do not cover: 6 of 8
 * codebooks and the semantic one alone, 3 heads of 6, no layer scale, a
 * ring of 3 steps, three residual layers a stage dilated 1, 3, 9 (left
 * contexts longer than the frame at the coarse stages), and the sessions
 * staggered in one batch. Tolerance as for Kyutai's fixtures: 8x the
 * distance of the reference's own float32 run from its float64 one (the
 * scale of float32 rounding through this network); codes identical (the
 * nearest centroid wins by info.json's min_code_margin of its distance). */
static void test_own(void)
{
    char err[512];
    size_t ln, li, lc, l64, linfo, lq, lq64;
    fixture = "mimi-own";
    void *st = slurp("model.safetensors", &ln);
    int16_t *pcm16 = slurp("input.s16", &li);
    int32_t *ref = slurp("codes.i32", &lc), *ref1 = slurp("codes-q1.i32", &lq);
    float *dec64 = slurp("decoded-ref.f32", &l64), *dec1 = slurp("decoded-q1-s0.f32", &lq64);
    char *info = slurp("info.json", &linfo);
    mimi_model *m = NULL;
    int32_t *codes = NULL;
    float *out = NULL;
    if (!tap_ok(st && pcm16 && ref && ref1 && dec64 && dec1 && info, "mimi-own: fixtures read"))
        goto done;
    info[linfo - 1] = 0;
    NF = (int)test_json_num(info, "\"frames\"");
    const int S = (int)test_json_num(info, "\"sessions\"");
    int starts[3] = { 0, 2, 3 };
    int rc = mimi_load_mem(st, ln, "mimi-own/model.safetensors", NULL, &m, err, sizeof err);
    if (rc == 0)
        rc = mimi_set_codebooks(m, (int)test_json_num(info, "\"n_q_used\""), err, sizeof err);
    if (!tap_ok(rc == 0, "mimi-own: loads with its metadata config%s%s", rc ? ": " : "", rc ? err : ""))
        goto done;
    const mimi_config *c = mimi_model_config(m);
    const int fs = mimi_frame_size(c), nq = c->n_q_used;
    tap_ok(S == 3 && NF == 6 && nq == 6 && c->n_q == 8 && c->context == 3 && c->num_heads == 3 &&
           c->num_layers == 2 && !c->layer_scale && c->n_residual_layers == 3 && c->dilation_base == 3,
           "mimi-own: %d sessions of %d frames; %d of %d codebooks, ring %d, %d heads, layer scale %d, "
           "%d residual layers", S, NF, nq, c->n_q, c->context, c->num_heads, c->layer_scale,
           c->n_residual_layers);
    tap_ok(li == (size_t)S * NF * fs * 2 && lc == (size_t)S * NF * nq * 4 && l64 == (size_t)S * NF * fs * 4 &&
           lq == (size_t)S * NF * 4 && lq64 == (size_t)NF * fs * 4, "mimi-own: fixture sizes");
    if (S != 3 || li != (size_t)S * NF * fs * 2 || lc != (size_t)S * NF * nq * 4 ||
        l64 != (size_t)S * NF * fs * 4 || lq != (size_t)S * NF * 4 || lq64 != (size_t)NF * fs * 4)
        goto done;
    codes = calloc((size_t)S * NF * 8, 4);
    out = calloc((size_t)S * NF * fs, 4);
    int mixed = 0;
    rc = codes && out ? run_staggered(m, S, starts, pcm16, ref, codes, out, &mixed) : -1;
    tap_ok(rc == 0 && mixed, "mimi-own: staggered batches ran (sessions at different frames in one "
           "call, decode a frame behind encode), every frame counted");
    int same = 0;
    for (int i = 0; i < S * NF * nq; i++)
        same += codes[i] == ref[i];
    tap_ok(same == S * NF * nq, "mimi-own: 6 codebooks: codes identical to the numpy reference (%d/%d)",
           same, S * NF * nq);
    double tol = 8 * test_json_num(info, "\"f32_vs_f64_max_abs\""), e = 0;
    for (size_t i = 0; i < (size_t)S * NF * fs; i++)
        if (fabs(out[i] - dec64[i]) > e)
            e = fabs(out[i] - dec64[i]);
    tap_ok(isfinite(tol) && tol > 0 && e <= tol,
           "mimi-own: 6 codebooks: PCM within 8x the reference's float32 error (%.3g <= %.3g, peak %.3g)",
           e, tol, test_json_num(info, "\"decoded_f64_max_abs\""));

    /* the semantic codebook alone: no acoustic quantizer in either direction */
    rc = mimi_set_codebooks(m, 1, err, sizeof err);
    if (rc == 0)
        rc = run_staggered(m, S, starts, pcm16, ref1, codes, out, &mixed);
    same = 0;
    for (int i = 0; i < S * NF; i++)
        same += codes[i] == ref1[i];
    tap_ok(rc == 0 && same == S * NF, "mimi-own: 1 codebook: codes identical (%d/%d)", same, S * NF);
    tol = 8 * test_json_num(info, "\"q1_f32_vs_f64_max_abs\"");
    e = 0;
    for (size_t i = 0; i < (size_t)NF * fs; i++)   /* session 0's frames */
        if (fabs(out[i] - dec1[i]) > e)
            e = fabs(out[i] - dec1[i]);
    tap_ok(rc == 0 && isfinite(tol) && tol > 0 && e <= tol,
           "mimi-own: 1 codebook: PCM within 8x the reference's float32 error (%.3g <= %.3g)", e, tol);
done:
    mimi_free(m);
    free(codes); free(out);
    free(st); free(pcm16); free(ref); free(ref1); free(dec64); free(dec1); free(info);
}

/* rewrites the fixture with one tensor renamed/reshaped/dropped/added */
static void test_refusals(void)
{
    size_t ln;
    char err[512];
    void *st = slurp("model.safetensors", &ln);
    mt_st_file sf;
    if (!st || mt_st_parse(st, ln, "f", &sf, err, sizeof err) != 0) {
        tap_ok(0, "fixture parses");
        free(st);
        return;
    }
    mimi_config tiny;
    mimi_config_tiny(&tiny);
    char path[] = "/tmp/test_mimi_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0)
        close(fd);
    for (int variant = 0; variant < 4; variant++) {
        int n = sf.n + 1;
        mt_st_out *o = calloc((size_t)n, sizeof *o);
        float **bufs = calloc((size_t)n, sizeof *bufs);
        int k = 0;
        const char *target = "decoder.model.5.convtr.convtr.weight";
        for (int i = 0; i < sf.n; i++) {
            const mt_st_tensor *t = &sf.t[i];
            int hit = strcmp(t->name, target) == 0;
            if (hit && variant == 0)
                continue;   /* missing */
            bufs[k] = malloc(t->numel * 4 + 4);
            mt_st_to_f32(t, bufs[k]);
            o[k].name = t->name;
            o[k].ndim = t->ndim;
            for (int d = 0; d < t->ndim; d++)
                o[k].shape[d] = t->shape[d];
            if (hit && variant == 1) {   /* mis-shaped: [16, 8, 12] -> [16, 12, 8] */
                o[k].shape[1] = t->shape[2];
                o[k].shape[2] = t->shape[1];
            }
            o[k].data = bufs[k];
            k++;
        }
        static const float one = 1;
        if (variant == 2) {   /* extra */
            o[k].name = "encoder.model.99.conv.conv.weight";
            o[k].ndim = 1;
            o[k].shape[0] = 1;
            o[k].data = &one;
            k++;
        }
        int rc = mt_st_write(path, o, k, MT_ST_F32, err, sizeof err);
        mimi_model *m = NULL;
        if (rc == 0 && variant == 3)
            rc = mimi_load(path, NULL, 0, &m, err, sizeof err);
        if (rc == 0 && variant < 3) {
            /* load from the file written, with the tiny configuration */
            FILE *f = fopen(path, "rb");
            size_t fl = 0;
            void *b = NULL;
            if (f) {
                fseek(f, 0, SEEK_END);
                fl = (size_t)ftell(f);
                fseek(f, 0, SEEK_SET);
                b = malloc(fl);
                if (b && fread(b, 1, fl, f) != fl) { free(b); b = NULL; }
                fclose(f);
            }
            rc = b ? mimi_load_mem(b, fl, "ckpt", &tiny, &m, err, sizeof err) : 0;
            free(b);
        }
        static const char *want[4] = {
            "'decoder.model.5.convtr.convtr.weight': missing (expected shape [16, 8, 12])",
            "'decoder.model.5.convtr.convtr.weight': shape [16, 12, 8], expected [16, 8, 12]",
            "'encoder.model.99.conv.conv.weight': not part of Mimi",
            "'encoder.model.0.conv.conv.weight': shape [2, 1, 7], expected [64, 1, 7]",
        };
        tap_ok(rc == -1 && strstr(err, want[variant]), "refused (%s): %s",
               variant == 0 ? "missing" : variant == 1 ? "mis-shaped" : variant == 2 ? "extra"
                            : "no metadata: the published shape", err);
        mimi_free(m);
        for (int i = 0; i < k; i++)
            if (o[i].data != &one)
                free(bufs[i]);
        free(bufs);
        free(o);
    }
    unlink(path);
    mt_st_free(&sf);
    free(st);

    /* config refusals */
    mimi_config c;
    mimi_config_default(&c);
    const char *bad = "{\"seanet\": {\"norm\": \"weight_norm\"}}";
    int rc = mimi_config_parse(bad, strlen(bad), "cfg", &c, err, sizeof err);
    tap_ok(rc == -1 && strstr(err, "seanet.norm"), "weight norm refused: %s", err);
    const char *bad2 = "{\"sample_rate\": 24000, \"frame_rate\": 7}";
    mimi_config_default(&c);
    rc = mimi_config_parse(bad2, strlen(bad2), "cfg", &c, err, sizeof err);
    tap_ok(rc == -1, "frame rate not dividing the rate refused: %s", err);
}

/* Two frames of two sessions through a batch on `threads` threads (fuse
 * 0: no op fused into a convolution, mimi_batch_fuse): codes
 * [2][2][n_q_used] and pcm [2][2][1920]. 0, or -1 with err. */
static int run_threads(const mimi_model *m, int threads, int q8, int fuse, int32_t *codes,
                       float *pcm, char *err, size_t errlen)
{
    const int nq = mimi_model_config(m)->n_q_used;
    mimi_state *s[2] = { mimi_state_new(m, err, errlen), mimi_state_new(m, err, errlen) };
    mimi_batch *w = mimi_batch_new(m, 2, err, errlen);
    int rc = s[0] && s[1] && w ? mimi_batch_threads(w, threads, err, errlen) : -1;
    if (rc == 0 && q8)
        rc = mimi_batch_weights_q8(w, 4, err, errlen);
    if (rc == 0)
        mimi_batch_fuse(w, fuse);
    if (rc == 0 && mimi_batch_thread_count(w) != threads) {
        snprintf(err, errlen, "the batch runs %d threads, not %d", mimi_batch_thread_count(w), threads);
        rc = -1;
    }
    float in[2 * 1920];
    for (int f = 0; f < 2 && rc == 0; f++) {
        for (int i = 0; i < 2 * 1920; i++)
            in[i] = 0.3f * sinf(i * 0.05f + (float)f) * (i < 1920 ? 1.0f : 0.5f);
        rc = mimi_encode(m, w, s, 2, in, codes + (size_t)f * 2 * nq, err, errlen);
        if (rc == 0)
            rc = mimi_decode(m, w, s, 2, codes + (size_t)f * 2 * nq, pcm + (size_t)f * 2 * 1920, err,
                             errlen);
    }
    mimi_state_free(s[0]);
    mimi_state_free(s[1]);
    mimi_batch_free(w);
    return rc;
}

/* The CPU codec splits its work by the shape alone: the same bits from
 * 1, 2 and 3 threads (published shape, where the products are tiled),
 * with fp32 transformers and with their 8-bit copies; and with the ELUs
 * and residual adds fused into the direct convolutions (the default) as
 * with every op by itself. */
static void test_threads(const mimi_model *m)
{
    char err[512] = "";
    static int32_t codes[4][2 * 2 * 32];
    static float pcm[4][2 * 2 * 1920];
    for (int q8 = 0; q8 < 2; q8++) {
        const char *what = q8 ? " (8-bit copies)" : "";
        int rc = 0;
        for (int t = 0; t < 3 && rc == 0; t++)
            rc = run_threads(m, t + 1, q8, 1, codes[t], pcm[t], err, sizeof err);
        if (rc == 0)
            rc = run_threads(m, 2, q8, 0, codes[3], pcm[3], err, sizeof err);
        tap_ok(rc == 0 && !memcmp(codes[1], codes[3], sizeof codes[0]) &&
                   !memcmp(pcm[1], pcm[3], sizeof pcm[0]),
               "ops fused into the direct convolutions or not: the same codes and PCM, bit "
               "for bit%s", what);
        tap_ok(rc == 0, "synthetic:mimi on 1, 2 and 3 threads%s%s%s", what, rc ? ": " : "",
               rc ? err : "");
        tap_ok(rc == 0 && !memcmp(codes[0], codes[1], sizeof codes[0]) &&
                   !memcmp(codes[0], codes[2], sizeof codes[0]),
               "codes identical on 1, 2 and 3 threads%s", what);
        tap_ok(rc == 0 && !memcmp(pcm[0], pcm[1], sizeof pcm[0]) &&
                   !memcmp(pcm[0], pcm[2], sizeof pcm[0]),
               "decoded PCM bit-identical on 1, 2 and 3 threads%s", what);
    }
    mimi_batch *w = mimi_batch_new(m, 1, err, sizeof err);
    tap_ok(w && mimi_batch_threads(w, 0, err, sizeof err) == -1 &&
               mimi_batch_threads(w, 65, err, sizeof err) == -1 &&
               mimi_batch_thread_count(w) == 1,
           "0 or 65 threads refused, the batch stays on one: %s", err);
    mimi_batch_free(w);
}

/* The published shape's SEANet with a one-layer transformer of context 4
 * (c set to it), its random weights from seed: the batch tests' model. */
static int small_published(mimi_config *c, uint64_t seed, mimi_model **m, char *err,
                           size_t errlen)
{
    mimi_config_default(c);
    c->num_layers = 1;
    c->context = 4;
    return mimi_synthetic(c, seed, m, err, errlen);
}

/* The published shape's first layers with a small transformer (1 layer,
 * ring 4: small session states), 40 sessions in one batch against each
 * alone: past 31 sessions the direct convolution's padded inputs no
 * longer fit the workspace together and it runs the batch in groups
 * (mimi.c conv_fwd); the codes must be those of each session alone,
 * the PCM within the batch test's bound (the decoder's sgemm products
 * differ in their last bits with the column count). */
static void test_groups(void)
{
    enum { B = 40, FS = 1920 };
    char err[512] = "";
    mimi_config c;
    mimi_model *m = NULL;
    int rc = small_published(&c, 7, &m, err, sizeof err);
    const int nq = rc == 0 ? mimi_model_config(m)->n_q_used : 0;
    static mimi_state *s[B], *one[1];
    static float pcm[B * FS], out[B * FS], out1[FS];
    static int32_t codes[B * 32], codes1[32];
    mimi_batch *w = rc == 0 ? mimi_batch_new(m, B, err, sizeof err) : NULL;
    mimi_batch *w1 = rc == 0 ? mimi_batch_new(m, 1, err, sizeof err) : NULL;
    rc = w && w1 ? 0 : -1;
    for (int b = 0; b < B && rc == 0; b++)
        rc = (s[b] = mimi_state_new(m, err, sizeof err)) ? 0 : -1;
    for (int i = 0; i < B * FS; i++)
        pcm[i] = 0.3f * sinf(i * 0.013f + (float)(i / FS));
    if (rc == 0)
        rc = mimi_encode(m, w, s, B, pcm, codes, err, sizeof err);
    if (rc == 0)
        rc = mimi_decode(m, w, s, B, codes, out, err, sizeof err);
    int cdiff = 0;
    double md = 0, peak = 0;
    for (int b = 0; b < B && rc == 0; b++) {
        rc = (one[0] = mimi_state_new(m, err, sizeof err)) ? 0 : -1;
        if (rc == 0)
            rc = mimi_encode(m, w1, one, 1, pcm + (size_t)b * FS, codes1, err, sizeof err);
        if (rc == 0)
            rc = mimi_decode(m, w1, one, 1, codes + (size_t)b * nq, out1, err, sizeof err);
        cdiff += memcmp(codes1, codes + (size_t)b * nq, (size_t)nq * sizeof *codes1) != 0;
        for (int i = 0; i < FS; i++) {
            md = fmax(md, fabs((double)out1[i] - out[(size_t)b * FS + i]));
            peak = fmax(peak, fabs((double)out1[i]));
        }
        mimi_state_free(one[0]);
    }
    tap_ok(rc == 0 && cdiff == 0, "40 sessions in one batch (the direct convolution in groups): the codes "
           "of each alone (%d sessions differ)%s%s", cdiff, rc ? ": " : "", rc ? err : "");
    tap_ok(rc == 0 && peak > 0 && md <= 1e-5 * peak,
           "40 sessions in one batch: PCM of each alone (max diff %.3g, peak %.3g)", md, peak);
    for (int b = 0; b < B; b++)
        mimi_state_free(s[b]);
    mimi_batch_free(w);
    mimi_batch_free(w1);
    mimi_free(m);
}

/* The decoder's transposed convolutions on mimi_convtr.c (the phases on
 * the direct tile, the few-vector product at 2 input steps) against the
 * previous kernels (sgemm + overlap-add, mimi_batch_old_kernels) on the
 * published shape's SEANet with a small transformer: 3 frames of the
 * same codes (the overlap carried between frames) at B = 1, 4 (the
 * product's 8 columns at once) and 7 (8, then 6), the PCM within float32
 * rounding of each other. */
static void test_decode_kernels(void)
{
    enum { NF = 3, BMAX = 7, FS = 1920 };
    char err[512] = "";
    mimi_config c;
    mimi_model *m = NULL;
    int rc = small_published(&c, 11, &m, err, sizeof err);
    const int nq = rc == 0 ? mimi_model_config(m)->n_q_used : 0;
    static int32_t codes[NF * BMAX * 32];
    static float out[2][NF * BMAX * FS];
    for (int i = 0; i < NF * BMAX * 32; i++)
        codes[i] = (int32_t)((i * 2654435761u >> 7) % (unsigned)c.bins);
    static const int Bs[] = { 1, 4, 7 };
    for (int bi = 0; bi < 3 && rc == 0; bi++) {
        const int B = Bs[bi];
        for (int old = 0; old < 2 && rc == 0; old++) {
            mimi_state *s[BMAX] = { 0 };
            mimi_batch *w = mimi_batch_new(m, B, err, sizeof err);
            rc = w ? 0 : -1;
            if (w)
                mimi_batch_old_kernels(w, old);
            for (int b = 0; b < B && rc == 0; b++)
                rc = (s[b] = mimi_state_new(m, err, sizeof err)) ? 0 : -1;
            for (int f = 0; f < NF && rc == 0; f++)
                rc = mimi_decode(m, w, s, B, codes + (size_t)f * B * nq, out[old] + (size_t)f * B * FS, err,
                                 sizeof err);
            for (int b = 0; b < B; b++)
                mimi_state_free(s[b]);
            mimi_batch_free(w);
        }
        double md = 0, peak = 0;
        for (size_t i = 0; i < (size_t)NF * B * FS; i++) {
            md = fmax(md, fabs((double)out[0][i] - out[1][i]));
            peak = fmax(peak, fabs((double)out[1][i]));
        }
        tap_ok(rc == 0 && peak > 0 && md <= 1e-5 * peak,
               "decode at B = %d, 3 frames: the transposed convolutions' kernels agree with sgemm + "
               "overlap-add (max diff %.3g, peak %.3g)%s%s", B, md, peak, rc ? ": " : "", rc ? err : "");
    }
    mimi_free(m);
}

/* NF frames of one session through batch w (fresh states): pcm in ->
 * codes, and codes_in (or, NULL, its own codes) decoded -> out. */
static int run_frames(const mimi_model *m, mimi_batch *w, int NF_, const float *pcm,
                      int32_t *codes, const int32_t *codes_in, float *out, char *err, size_t errlen)
{
    const mimi_config *c = mimi_model_config(m);
    const int fs = mimi_frame_size(c), nq = c->n_q_used;
    mimi_state *se = mimi_state_new(m, err, errlen), *sd = mimi_state_new(m, err, errlen);
    int rc = se && sd ? 0 : -1;
    for (int f = 0; f < NF_ && rc == 0; f++) {
        rc = mimi_encode(m, w, &se, 1, pcm + (size_t)f * fs, codes + (size_t)f * nq, err, errlen);
        if (rc == 0)
            rc = mimi_decode(m, w, &sd, 1, (codes_in ? codes_in : codes) + (size_t)f * nq,
                             out + (size_t)f * fs, err, errlen);
    }
    mimi_state_free(se);
    mimi_state_free(sd);
    return rc;
}

/* --weights q8 for the codec (mimi_batch_weights_q8): the transformers'
 * 8-bit products against the fp32 ones on the published shape, 12 frames
 * of a voice-like signal: the same codes decoded both ways give PCM
 * within 25 dB SNR of each other (the transformers' error through the
 * decoder's SEANet; 35 dB here, 14 with every scale 10% off), and the
 * encoder picks the same centroids in at least 90% of the codes (a
 * nearest centroid near a tie may flip, so a share, not a bound: all 96
 * here, 73 with the scales 10% off). */
static void test_q8(const mimi_model *m)
{
    enum { F = 12 };
    char err[512] = "";
    const mimi_config *c = mimi_model_config(m);
    const int fs = mimi_frame_size(c), nq = c->n_q_used;
    static float pcm[F * 1920], out[2][F * 1920];
    static int32_t codes[2][F * 32];
    for (int i = 0; i < F * fs; i++)
        pcm[i] = 0.25f * sinf(i * 0.031f + 2.0f * sinf(i * 0.0007f)) + 0.05f * sinf(i * 0.29f);
    mimi_batch *w = mimi_batch_new(m, 1, err, sizeof err);
    int rc = w ? run_frames(m, w, F, pcm, codes[0], NULL, out[0], err, sizeof err) : -1;
    if (rc == 0)
        rc = mimi_batch_weights_q8(w, 2, err, sizeof err);
    tap_ok(rc == 0 && mimi_batch_q8_bytes(w) > 0 &&
               mimi_batch_q8_bytes(w) < mimi_param_count(m) * sizeof(float) / 3,
           "8-bit copies made (%zu bytes)%s%s", w ? mimi_batch_q8_bytes(w) : 0,
           rc ? ": " : "", rc ? err : "");
    /* the published shape's layers of a few steps a frame: the encoder's
     * 512 -> 1024 k16, 1024 -> 512 k3 and downsample, the decoder's
     * 512 -> 1024 k7, 1024 -> 512 k16 and 512 -> 256 k12 transposed */
    int nconv = 0;
    for (int i = 0; i < m->n_enc; i++)
        nconv += mimi_q8_conv_eligible(&m->enc[i]);
    for (int i = 0; i < m->n_dec; i++)
        nconv += mimi_q8_conv_eligible(&m->dec[i]);
    nconv += mimi_q8_conv_eligible(&m->down) + mimi_q8_conv_eligible(&m->up);
    tap_ok(nconv == 6,
           "8-bit copies of the 6 deepest convolutions (%d eligible)", nconv);
    if (rc == 0)
        rc = run_frames(m, w, F, pcm, codes[1], codes[0], out[1], err, sizeof err);
    double sig = 0, noise = 0;
    int same = 0, same_all = 0;
    for (int i = 0; i < F * fs; i++) {
        sig += (double)out[0][i] * out[0][i];
        noise += ((double)out[1][i] - out[0][i]) * ((double)out[1][i] - out[0][i]);
    }
    for (int f = 0; f < F; f++) {
        same += codes[0][f * nq] == codes[1][f * nq];
        for (int k = 0; k < nq; k++)
            same_all += codes[0][f * nq + k] == codes[1][f * nq + k];
    }
    double snr = noise > 0 ? 10 * log10(sig / noise) : 999;
    tap_ok(rc == 0 && sig > 0 && snr >= 25,
           "8-bit copies: the same codes decode within %.1f dB SNR of fp32 (>= 25)%s%s", snr,
           rc ? ": " : "", rc ? err : "");
    tap_ok(rc == 0 && same_all * 10 >= F * nq * 9,
           "8-bit copies: fp32's codes in %d of %d (>= 90%%; the first codebook's in %d of "
           "%d frames)", same_all, F * nq, same, F);
    /* off again: fp32's bits (the copies kept) */
    static float out3[F * 1920];
    static int32_t codes3[F * 32];
    if (rc == 0)
        rc = mimi_batch_weights_q8(w, 0, err, sizeof err);
    if (rc == 0)
        rc = run_frames(m, w, F, pcm, codes3, NULL, out3, err, sizeof err);
    tap_ok(rc == 0 && !memcmp(codes3, codes[0], sizeof codes3) && !memcmp(out3, out[0], sizeof out3),
           "8-bit copies off again: fp32's codes and PCM, bit for bit");
    mimi_batch_free(w);
}

static void test_synthetic(void)
{
    char err[512];
    mimi_model *m = NULL;
    int rc = mimi_load("synthetic:mimi", NULL, 0, &m, err, sizeof err);
    tap_ok(rc == 0, "synthetic:mimi loads%s%s", rc ? ": " : "", rc ? err : "");
    if (rc)
        return;
    const mimi_config *c = mimi_model_config(m);
    tap_diag("synthetic:mimi: %zu weights, state %zu bytes/session, encode %.2f GFLOP, decode %.2f GFLOP per frame",
             mimi_param_count(m), mimi_state_bytes(m), mimi_encode_flops(m) / 1e9, mimi_decode_flops(m) / 1e9);
    tap_ok(mimi_frame_size(c) == 1920 && c->n_q_used == 8 && c->n_q == 32,
           "published shape: frame 1920, 8 of 32 codebooks");
    mimi_state *s = mimi_state_new(m, err, sizeof err);
    mimi_batch *w = mimi_batch_new(m, 1, err, sizeof err);
    float pcm[1920], out[1920];
    int32_t codes[8];
    for (int i = 0; i < 1920; i++)
        pcm[i] = 0.3f * sinf(i * 0.05f);
    rc = s && w ? mimi_encode(m, w, &s, 1, pcm, codes, err, sizeof err) : -1;
    if (rc == 0)
        rc = mimi_decode(m, w, &s, 1, codes, out, err, sizeof err);
    int fin = 1;
    for (int i = 0; i < 1920; i++)
        fin &= isfinite(out[i]);
    tap_ok(rc == 0 && fin, "synthetic:mimi encodes and decodes a frame");
    mimi_state_free(s);
    mimi_batch_free(w);
    test_threads(m);
    test_q8(m);
    mimi_free(m);
}

/* The 8-bit RVQ search (mimi_q8_nearest) against the nearest centroid in
 * double over every centroid: random codebooks and inputs, and inputs
 * placed halfway between two centroids (the near ties where the 8-bit
 * dots alone pick wrong), on every product the CPU runs (mt_q8_select). */
static void test_q8_nearest(void)
{
    enum { BINS = 256, QD = 64, TRIALS = 400 };
    static float cb[BINS * QD], n2[BINS], x[QD], dots[BINS], work[BINS];
    static int8_t q[BINS * QD];
    static float s[BINS * QD / 32];
    uint32_t r = 12345;
    for (int i = 0; i < BINS * QD; i++) {
        r = r * 1664525u + 1013904223u;
        cb[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * (1 + i / QD % 7);
    }
    for (int e = 0; e < BINS; e++) {
        double t = 0;
        for (int k = 0; k < QD; k++)
            t += (double)cb[e * QD + k] * cb[e * QD + k];
        n2[e] = (float)t;
    }
    mimi_q8cb c;
    int rc = 0, wrong = 0, ties_q8_wrong = 0, trials = 0, cand = 0, maxc = 0;
    for (int level = mt_q8_init(); level >= 0 && rc == 0; level--) {
        if (mt_q8_select(level) != level)
            continue;
        rc = mimi_q8cb_pack(&c, q, s, cb, BINS, QD);   /* in this level's layout */
        for (int t = 0; t < TRIALS; t++, trials++) {
            r = r * 1664525u + 1013904223u;
            int a = (int)(r >> 8) % BINS, b = (int)(r >> 20) % BINS;
            for (int k = 0; k < QD; k++) {
                r = r * 1664525u + 1013904223u;
                float noise = ((float)(r >> 8) / 16777216.0f - 0.5f);
                /* even trials: halfway between a and b (a near tie) */
                x[k] = t % 2 ? noise * 3 : 0.5f * (cb[a * QD + k] + cb[b * QD + k]) + 1e-4f * noise;
            }
            mt_q8_gemm(c.mat.layout, 1, BINS, QD, x, QD, q, s, 0.0f, dots, BINS);
            int n = 0, got = mimi_q8_nearest(&c, cb, n2, BINS, QD, x, dots, work, &n);
            int want = 0, q8only = 0;
            double bd = INFINITY, bq = INFINITY;
            for (int e = 0; e < BINS; e++) {
                double dot = 0;
                for (int k = 0; k < QD; k++)
                    dot += (double)cb[e * QD + k] * x[k];
                if ((double)n2[e] - 2 * dot < bd)
                    bd = (double)n2[e] - 2 * dot, want = e;
                if (n2[e] - 2.0f * dots[e] < bq)
                    bq = n2[e] - 2.0f * dots[e], q8only = e;
            }
            wrong += got != want;
            ties_q8_wrong += q8only != want;
            cand += n;
            maxc = n > maxc ? n : maxc;
        }
    }
    mt_q8_select(99);
    tap_ok(rc == 0 && trials > 0 && wrong == 0,
           "8-bit RVQ search: the nearest centroid in %d of %d trials (near ties included; the "
           "8-bit distances alone %d wrong; %.1f candidates compared a search, at most %d)",
           trials - wrong, trials, ties_q8_wrong, trials ? (double)cand / trials : 0.0, maxc);
}

/* the vectorized GELU against the libm form x (1 + erff(x / sqrt 2)) / 2 */
static void test_gelu(void)
{
    enum { N = 400001 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    if (!x || !y) {
        tap_ok(0, "gelu: memory");
        free(x);
        free(y);
        return;
    }
    for (int i = 0; i < N; i++)
        x[i] = y[i] = -20.0f + 40.0f * (float)i / (N - 1);
    mimi_gelu(y, N);
    double worst = 0;
    float at = 0;
    for (int i = 0; i < N; i++) {
        double ref = 0.5 * x[i] * (1.0 + erf((double)x[i] * 0.70710678118654752));
        double e = fabs((double)y[i] - ref) / fmax(1.0, fabs(x[i]));
        if (e > worst) {
            worst = e;
            at = x[i];
        }
    }
    tap_ok(worst <= 4e-7, "GELU within 4e-7 x max(1, |x|) of the erf form over [-20, 20] (worst %.2g at %g)",
           worst, at);
    free(x);
    free(y);
}

/* the vectorizable ELU against libm's expm1f */
static void test_elu(void)
{
    enum { N = 200001 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    if (!x || !y) {
        tap_ok(0, "elu: memory");
        return;
    }
    for (int i = 0; i < N; i++)
        x[i] = -100.0f + 110.0f * (float)i / (N - 1);
    x[0] = -INFINITY;
    mimi_elu(y, x, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        float ref = x[i] > 0 ? x[i] : expm1f(x[i]);
        float ulp = nextafterf(fabsf(ref), INFINITY) - fabsf(ref);
        double e = fabs((double)y[i] - ref) / ulp;
        if (e > worst) worst = e;
    }
    tap_ok(worst <= 2.0, "ELU within 2 ulp of expm1f over [-100, 10] (worst %.2f ulp)", worst);
    free(x);
    free(y);
}

int main(void)
{
    test_elu();
    test_gelu();
    test_q8_nearest();
    const char *r = getenv("MT_ROOT");
    snprintf(root, sizeof root, "%s", r && *r ? r : ".");
    test_fixture("mimi", 1);
    test_fixture("mimi-b", 0);
    test_own();
    fixture = "mimi";
    test_refusals();
    test_synthetic();
    test_groups();
    test_decode_kernels();
    return tap_done();
}
