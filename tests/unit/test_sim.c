/* test_sim.c: the simulated device (backend_sim.c, sim_profile.c): the
 * profile parser (every required key, strictness, schedule), the shipped
 * profiles, the cost model against hand computations, the seeded noise
 * (reproducible, its spread and stall rate), the schedule applied at its
 * time, the backend's waits and echo on an injected clock, and a decoder
 * on the sim over a shape-only 7B model (no weights, no K/V memory). */
#include "tap.h"
#include "decode/backend_sim.h"
#include "decode/backend.h"
#include "decode/decoder.h"
#include "decode/sim_profile.h"
#include "model/model.h"
#include "model/kyutai_lm.h"
#include "probe/calibrate.h"
#include "probe/calibrate_frame.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char err[512];

/* A round-numbered profile for hand computations. */
static const char *base_text =
    "# test profile\n"
    "name = t1\n"
    "model = synthetic:moshi-7b   # the shape the numbers below assume\n"
    "memory_bytes = 141e9\n"
    "reserve_bytes = 6e9\n"
    "bandwidth = 4e12\n"
    "matrix_rate = 8e14\n"
    "overhead_us = 100\n"
    "weight_bytes = 2\n"
    "kv_bytes = 2\n";

static int parse(const char *text, mt_sim_profile *p)
{
    err[0] = '\0';
    return mt_sim_profile_parse(text, strlen(text), "t.profile", "dflt", p, err, sizeof err);
}

static void test_parse(void)
{
    mt_sim_profile p;
    is_int(parse(base_text, &p), 0, "base profile parses");
    is_str(p.name, "t1", "name");
    is_str(p.model, "synthetic:moshi-7b", "model");
    ok(p.memory_bytes == 141e9 && p.reserve_bytes == 6e9 && p.bandwidth == 4e12 &&
       p.matrix_rate == 8e14 && p.overhead_us == 100 && p.weight_bytes == 2 &&
       p.kv_bytes == 2, "numbers read");
    ok(p.jitter_sigma == 0 && p.stall_prob == 0 && p.stall_ms == 0 && p.seed == 1 &&
       p.nschedule == 0, "defaults: no noise, seed 1, no schedule");

    /* every required key, removed in turn */
    static const char *req[] = { "memory_bytes", "reserve_bytes", "bandwidth",
                                 "matrix_rate", "weight_bytes", "kv_bytes" };
    for (size_t k = 0; k < sizeof req / sizeof *req; k++) {
        char text[1024], want[80];
        const char *at = strstr(base_text, req[k]);
        const char *eol = strchr(at, '\n');
        snprintf(text, sizeof text, "%.*s%s", (int)(at - base_text), base_text, eol + 1);
        snprintf(want, sizeof want, "t.profile: key '%s': missing", req[k]);
        ok(parse(text, &p) == -1 && strcmp(err, want) == 0, "missing %s refused: %s", req[k], err);
    }

    static const struct { const char *line, *want; } bad[] = {
        { "bandwidth_x = 1\n", "t.profile:11: key 'bandwidth_x': unknown key" },
        { "bandwidth = 5e12\n", "t.profile:11: key 'bandwidth': given twice" },
        { "jitter_sigma = nan\n", "t.profile:11: key 'jitter_sigma': want a number" },
        { "jitter_sigma = 1e999\n", "t.profile:11: key 'jitter_sigma': want a number" },
        { "jitter_sigma = 0x1\n", "t.profile:11: key 'jitter_sigma': want a number" },
        { "jitter_sigma = 3\n", "t.profile:11: key 'jitter_sigma': want a number in 0..2" },
        { "stall_ms = 5 ms\n", "t.profile:11: key 'stall_ms': want a number" },
        { "stall_prob = -0.1\n", "t.profile:11: key 'stall_prob': want a number" },
        { "seed = 1.5\n", "t.profile:11: key 'seed': want an integer" },
        { "overhead_us\n", "t.profile:11: 'overhead_us': not key = value" },
        { "schedule = 120 bandwidth*0.8\n", "t.profile:11: key 'schedule': want 'Ts FIELD*F'" },
        { "schedule = 120s speed*0.8\n", "t.profile:11: key 'schedule': want 'Ts FIELD*F'" },
        { "schedule = 120s bandwidth*0\n", "t.profile:11: key 'schedule': want 'Ts FIELD*F'" },
        { "schedule = 120s bandwidth*\n", "t.profile:11: key 'schedule': want 'Ts FIELD*F'" },
        { "schedule = 120s bandwidth*0.5\nschedule = 60s bandwidth*0.9\n",
          "t.profile:12: key 'schedule': 60s is before the previous entry's 120s" },
        { "stall_ms = \x01\n", "t.profile:11: key 'stall_ms': control byte in value" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", base_text, bad[k].line);
        ok(parse(text, &p) == -1 && strncmp(err, bad[k].want, strlen(bad[k].want)) == 0,
           "bad line %zu refused: %s", k, err);
    }
    char text[1024];
    snprintf(text, sizeof text, "%s", base_text);
    memcpy(strstr(text, "name = t1"), "name =t 1", 9);
    ok(parse(text, &p) == -1 && strstr(err, "t.profile:2: key 'name': want one printable word"),
       "a name of two words refused: %s", err);
    snprintf(text, sizeof text, "%s", base_text);
    *strstr(text, "reserve_bytes = 6e9") = '#';
    strcat(text, "reserve_bytes = 141e9\n");
    ok(parse(text, &p) == -1 && strstr(err, "key 'reserve_bytes': 1.41e+11 is not below memory_bytes"),
       "reserve not below memory refused: %s", err);

    /* comments, blank lines, tabs, CRLF, a schedule, the default name */
    const char *ok_text =
        "\r\n  # only a comment\n\tmemory_bytes\t=\t80e9 # datasheet\r\n"
        "reserve_bytes=1e9\nbandwidth = 2e12\nmatrix_rate = 3e14\n"
        "weight_bytes = 2\nkv_bytes = 1\njitter_sigma = 0.05\nstall_prob = 0.001\n"
        "stall_ms = 20\nseed = 42\n"
        "schedule = 120s bandwidth*0.8\nschedule = 120s matrix_rate * 0.5\n"
        "schedule = 300.5s overhead*2\n";
    is_int(parse(ok_text, &p), 0, "comments, tabs, CRLF and a schedule parse");
    is_str(p.name, "dflt", "no name: the default (file's base name)");
    ok(p.model[0] == '\0', "no model: any");
    ok(p.seed == 42 && p.kv_bytes == 1 && p.stall_ms == 20, "values read");
    ok(p.nschedule == 3 && p.schedule[0].t_s == 120 && p.schedule[0].field == MT_SIM_BANDWIDTH &&
       p.schedule[0].factor == 0.8 && p.schedule[1].field == MT_SIM_MATRIX_RATE &&
       p.schedule[1].factor == 0.5 && p.schedule[2].t_s == 300.5 &&
       p.schedule[2].field == MT_SIM_OVERHEAD && p.schedule[2].factor == 2,
       "schedule entries read");
}

static void test_shipped(void)
{
    static const struct { const char *name, *model; } shipped[] = {
        { "h200-moshi7b", "synthetic:moshi-7b" },
        { "h200-llama1b", "synthetic:llama-3.2-1b" },
        { "h200-qwen2.5-7b", "synthetic:qwen2.5-7b" },
        { "h200-qwen3-8b", "synthetic:qwen3-8b" },
    };
    /* the K/V pools the profiles' comments and examples/paper.sh state */
    static const size_t pool[] = { 122015999488u, 132512642560u, 119741241856u,
                                   118587072000u };
    for (int k = 0; k < 4; k++) {
        mt_sim_profile p;
        int rc = mt_sim_profile_load(shipped[k].name, &p, err, sizeof err);
        ok(rc == 0, "built-in %s loads (%s)", shipped[k].name, rc ? err : p.path);
        if (rc)
            continue;
        is_str(p.name, shipped[k].name, "its name");
        is_str(p.model, shipped[k].model, "its model");
        ok(p.memory_bytes == 141e9 && p.bandwidth == 4.3e12 && p.matrix_rate == 780e12 &&
           p.weight_bytes == 2 && p.kv_bytes == 2,
           "H200 figures: 141 GB, 4.3 TB/s copy, 780 TFLOP/s bf16, bf16 weights and K/V");
        mt_model *m = NULL;
        mt_sim *s = NULL;
        ok(mt_model_load(p.model, MT_MODEL_SHAPE_ONLY, &m, err, sizeof err) == 0 &&
           mt_sim_create(&p, &m->cfg, NULL, &s, err, sizeof err) == 0,
           "fits its model: %s", s ? mt_sim_label(s) : err);
        if (s)
            ok(mt_sim_kv_budget(s) == pool[k], "%s: K/V pool %zu bytes (stated %zu)",
               shipped[k].name, mt_sim_kv_budget(s), pool[k]);
        mt_sim_free(s);
        mt_model_free(m);
    }
    mt_sim_profile p;
    ok(mt_sim_profile_load("no-such-profile", &p, err, sizeof err) == -1 &&
       strstr(err, "no built-in profile 'no-such-profile'"), "unknown name: %s", err);
    ok(mt_sim_profile_load("../x", &p, err, sizeof err) == -1, "a missing path: %s", err);
    ok(mt_sim_profile_load("Bad Name", &p, err, sizeof err) == -1 &&
       strstr(err, "want [a-z0-9._-] or a path"), "a name with odd bytes: %s", err);
}

/* ---- injected clock ------------------------------------------------------ */
typedef struct fake_clock {
    uint64_t now;
    uint64_t last_target;
    int      sleeps;
} fake_clock;

static uint64_t fake_now(void *ctx) { return ((fake_clock *)ctx)->now; }
static void fake_sleep(void *ctx, uint64_t t)
{
    fake_clock *f = ctx;
    f->last_target = t;
    f->sleeps++;
    if (t > f->now)
        f->now = t;
}

static mt_sim *make_sim(const char *extra, fake_clock *fc, const mt_config *c)
{
    char text[2048];
    snprintf(text, sizeof text, "%s%s", base_text, extra);
    mt_sim_profile p;
    if (parse(text, &p) != 0) {
        tap_diag("profile: %s", err);
        return NULL;
    }
    mt_sim_clock clk = { fake_now, fake_sleep, fc };
    mt_sim *s = NULL;
    if (mt_sim_create(&p, c, &clk, &s, err, sizeof err) != 0)
        tap_diag("sim: %s", err);
    return s;
}

/* make_sim for the checks named by what; a failed check when it cannot. */
static mt_sim *sim_for(const char *what, const char *extra, fake_clock *fc, const mt_config *c)
{
    mt_sim *s = make_sim(extra, fc, c);
    if (!s)
        ok(0, "sim for %s", what);
    return s;
}

static void test_cost_model(const mt_config *c)
{
    fake_clock fc = { .now = 1000000000ull };
    mt_sim *s = sim_for("the cost model", "", &fc, c);
    if (!s)
        return;
    /* synthetic:moshi-7b: P = 6,492,000,256, pb = 32*2*32*128*2 = 524,288,
     * attention 4*32*32*128 = 524,288 flops a visible position */
    is_int(mt_sim_position_bytes(s), 524288, "K/V bytes a position");
    ok(mt_sim_weight_bytes(s) == 12984000512.0, "weight bytes: P x 2");
    is_int(mt_sim_kv_budget(s), 122015999488ll, "K/V budget: 141e9 - 12,984,000,512 - 6e9");

    /* B = 8, visible 1 + 10 + 100 + 1000 + 4 x 260 = 2151:
     * bytes = 12,984,000,512 + 524,288 x 2151 = 14,111,744,000 -> 3.527936 ms
     * flops = 2 P 8 + 524,288 x 2151 = 104,999,747,584 -> 0.13124968448 ms
     * memory-bound: 3.527936 + 0.1 = 3.627936 ms */
    int64_t vis[8] = { 1, 10, 100, 1000, 260, 260, 260, 260 };
    mt_sim_cost cost;
    mt_sim_step_cost(s, 8, vis, 0, &cost);
    ok(cost.bytes == 14111744000.0, "step bytes by hand (%.0f)", cost.bytes);
    ok(cost.flops == 104999747584.0, "step flops by hand (%.0f)", cost.flops);
    is_near(cost.total * 1e3, 3.627936, 1e-9, "memory-bound step: 3.627936 ms");

    /* B = 4096 at 1 position: flops = 2 P 4096 + 524,288 x 4096
     * = 53,184,613,580,800 -> 66.480766976 ms (bytes 3.78287104 ms):
     * compute-bound, 66.580766976 ms */
    static int64_t ones[4096];
    for (int i = 0; i < 4096; i++)
        ones[i] = 1;
    mt_sim_step_cost(s, 4096, ones, 0, &cost);
    is_near(cost.t_mem * 1e3, 3.78287104, 1e-9, "B=4096: memory time");
    is_near(cost.total * 1e3, 66.580766976, 1e-9, "compute-bound step: 66.580766976 ms");

    /* prefill of 100 from 0 (full policy: v_p = p + 1): bytes = W + pb x 100
     * = 13,036,429,312 -> 3.259107328 ms; flops = 2 P 100 + 524,288 x 5050
     * = 1,301,047,705,600 -> 1.626309632 ms; 3.359107328 ms */
    mt_sim_prefill_cost(s, 100, 100, 5050, 0, &cost);
    is_near(cost.total * 1e3, 3.359107328, 1e-9, "prefill of 100: 3.359107328 ms");

    /* the wait: from the step's start on the absolute clock */
    fc.now = 5000000000ull;
    mt_sim_run_step(s, 8, vis);
    is_int(fc.last_target, 5000000000ull + 3627936ull, "step waits until start + 3.627936 ms");
    double pred, noise;
    mt_sim_take(s, &pred, &noise);
    is_near(pred, 3.627936, 1e-9, "take: the prediction");
    is_near(noise, 0, 0, "take: no noise without jitter");
    mt_sim_take(s, &pred, &noise);
    ok(pred == 0 && noise == 0, "take resets");
    mt_sim_free(s);
}

static void test_schedule(const mt_config *c)
{
    fake_clock fc = { .now = 7000000000ull };
    mt_sim *s = sim_for("the schedule",
                        "schedule = 10s bandwidth*0.5\nschedule = 20s overhead*3\n"
                        "schedule = 30s bandwidth*2\n", &fc, c);
    if (!s)
        return;
    ok(mt_sim_factor(s, MT_SIM_BANDWIDTH, 9.999) == 1 &&
       mt_sim_factor(s, MT_SIM_BANDWIDTH, 10) == 0.5 &&
       mt_sim_factor(s, MT_SIM_BANDWIDTH, 29) == 0.5 &&
       mt_sim_factor(s, MT_SIM_BANDWIDTH, 30) == 2 &&
       mt_sim_factor(s, MT_SIM_OVERHEAD, 19) == 1 &&
       mt_sim_factor(s, MT_SIM_OVERHEAD, 25) == 3 &&
       mt_sim_factor(s, MT_SIM_MATRIX_RATE, 100) == 1,
       "factors in force at their times, later entries replace earlier ones");
    int64_t vis[8] = { 1, 10, 100, 1000, 260, 260, 260, 260 };
    /* 9 s after the start: as profiled */
    fc.now = 7000000000ull + 9000000000ull;
    uint64_t st = fc.now;
    mt_sim_run_step(s, 8, vis);
    is_int(fc.last_target - st, 3627936, "before 10 s: 3.627936 ms");
    /* 10 s on: bandwidth halved: 7.055872 + 0.1 ms */
    fc.now = 7000000000ull + 10000000000ull;
    st = fc.now;
    mt_sim_run_step(s, 8, vis);
    is_int(fc.last_target - st, 7155872, "from 10 s, bandwidth x0.5: 7.155872 ms");
    /* 20 s on: overhead x3 as well: 7.055872 + 0.3 ms */
    fc.now = 7000000000ull + 20000000000ull;
    st = fc.now;
    mt_sim_run_step(s, 8, vis);
    is_int(fc.last_target - st, 7355872, "from 20 s, overhead x3 too: 7.355872 ms");
    mt_sim_free(s);
}

static void test_noise(const mt_config *c)
{
    fake_clock f1 = { .now = 1 }, f2 = { .now = 1 }, f3 = { .now = 1 };
    const char *noisy = "jitter_sigma = 0.1\nstall_prob = 0.01\nstall_ms = 50\nseed = 7\n";
    mt_sim *a = make_sim(noisy, &f1, c), *b = make_sim(noisy, &f2, c);
    mt_sim *d = make_sim("jitter_sigma = 0.1\nstall_prob = 0.01\nstall_ms = 50\nseed = 8\n", &f3, c);
    if (!a || !b || !d) {
        ok(0, "noisy sims");
        return;
    }
    int same = 1, differ = 0, stalls = 0;
    double sl = 0, sl2 = 0;
    int n = 20000, nj = 0;
    for (int i = 0; i < n; i++) {
        double x = mt_sim_draw_noise(a, 0.010), y = mt_sim_draw_noise(b, 0.010);
        double z = mt_sim_draw_noise(d, 0.010);
        same &= x == y;
        differ += x != z;
        if (x > 0.045) {
            stalls++;          /* a 50 ms stall dwarfs a 10 ms step's jitter */
            continue;
        }
        double l = log(1 + x / 0.010);
        sl += l;
        sl2 += l * l;
        nj++;
    }
    ok(same, "the same seed draws the same noise");
    ok(differ > n / 2, "another seed draws other noise (%d of %d differ)", differ, n);
    double mean = sl / nj, sd = sqrt(sl2 / nj - mean * mean);
    is_near(mean, 0, 0.004, "jitter: log-factor mean 0 (median = the prediction)");
    is_near(sd, 0.1, 0.004, "jitter: log-factor sigma 0.1");
    /* binomial(20000, 0.01): 200 +- 14; 5 sigma */
    ok(stalls > 130 && stalls < 270, "stalls at 1%%: %d of %d", stalls, n);

    /* the backend's wait includes the drawn noise and reports it apart */
    fake_clock f4 = { .now = 1000 };
    mt_sim *e = make_sim(noisy, &f4, c);
    int64_t vis[1] = { 1 };
    uint64_t st = f4.now;
    mt_sim_run_step(e, 1, vis);
    double pred, noise;
    mt_sim_take(e, &pred, &noise);
    ok(fabs((double)(f4.last_target - st) / 1e6 - (pred + noise)) < 1e-6 && noise != 0,
       "waited = prediction + noise (%.4f + %.4f ms)", pred, noise);
    mt_sim_free(a);
    mt_sim_free(b);
    mt_sim_free(d);
    mt_sim_free(e);
}

/* The backend over a pool: visible positions from the pool, echo, logits. */
static void test_backend(const mt_model *m)
{
    fake_clock fc = { .now = 1000000000ull };
    mt_sim *s = make_sim("", &fc, &m->cfg);
    mt_kv_params kp = { .policy = MT_KV_FULL, .budget_bytes = (size_t)64 << 20 };
    mt_kv_pool *pool = NULL;
    mt_backend *be = NULL;
    ok(s && mt_sim_backend_wrap(s, m, 4, &be, err, sizeof err) == 0 &&
       mt_backend_pool_create(be, &m->cfg, &kp, &pool, err, sizeof err) == 0,
       "backend over a full-policy pool");
    if (!be || !pool)
        return;
    is_str(be->name, "sim:t1", "backend name is the device's label");
    ok(be->position_bytes == mt_sim_position_bytes(s), "position bytes");
    mt_kv_seq *q = NULL;
    ok(mt_kv_seq_open(pool, &q) == 0 && mt_kv_reserve(pool, q, 100) == 0, "a sequence");
    int fsz = m->cfg.frame_samples;
    int16_t *in = calloc((size_t)fsz * 100, 2), *out = calloc((size_t)fsz * 100, 2);
    for (int i = 0; i < fsz * 100; i++)
        in[i] = (int16_t)(i * 37 - 12345);
    mt_step_io io = { .pcm_in = in, .pcm_out = out };
    uint64_t st = fc.now;
    ok(be->prefill(be, q, 100, &io, err, sizeof err) == 0, "prefill of 100");
    is_int(fc.last_target - st, 3359107, "prefill waits 3.359107 ms (visible from the pool)");
    ok(memcmp(in, out, (size_t)fsz * 100 * 2) == 0, "prefill echoes its input");
    q->len = 100;
    ok(mt_kv_reserve(pool, q, 1) == 0, "room for one more");
    memset(out, 0, (size_t)fsz * 2);
    st = fc.now;
    mt_kv_seq *seqs[1] = { q };
    ok(be->step(be, 1, seqs, &io, err, sizeof err) == 0, "step of 1");
    /* bytes = W + pb x 101 = 13,036,953,600 -> 3.2592384 ms; + 0.1 */
    is_int(fc.last_target - st, 3359238, "step at len 100 waits 3.359238 ms (101 visible)");
    ok(memcmp(in, out, (size_t)fsz * 2) == 0, "step echoes its input");
    be->destroy(be);
    mt_kv_seq_close(pool, q);
    mt_kv_pool_free(pool);
    mt_sim_free(s);
    free(in);
    free(out);
}

/* The decoder on the sim: a shape-only 7B model, a pool over the profile's
 * budget, no memory behind either. */
static void test_decoder(const mt_model *m)
{
    char path[] = "/tmp/mt-test-sim-XXXXXX";
    int fd = mkstemp(path);
    ok(fd >= 0 && write(fd, base_text, strlen(base_text)) == (ssize_t)strlen(base_text),
       "profile file written");
    if (fd >= 0)
        close(fd);
    mt_decoder_opts o;
    memset(&o, 0, sizeof o);
    o.device = MT_DEV_SIM;
    o.sim_profile = path;
    o.max_batch = 512;
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = 4;
    o.kv.window = 256;
    mt_decoder *d = NULL;
    int rc = mt_decoder_create(m, &o, &d, err, sizeof err);
    ok(rc == 0, "decoder on sim:%s over shape-only %s: %s", path, m->cfg.name, rc ? err : "ok");
    if (rc == 0) {
        mt_kv_pool *pool = mt_decoder_pool(d);
        is_int(mt_kv_pool_blocks(pool), 122015999488ll / (524288 * 16),
               "pool blocks: the profile's budget over 8 MiB blocks");
        is_str(mt_decoder_sim_label(d), "sim:t1", "label");
        like(mt_decoder_note(d), "SIMULATED device sim:t1", "note says simulated");
        like(mt_decoder_note(d), "no figure from this server is a measurement", "note says no measurement");
        double pr, nz;
        is_int(mt_decoder_sim_take(d, &pr, &nz), 1, "sim_take on a sim");
        mt_decoder_free(d);
    }
    o.kv.budget_bytes = (size_t)200e9;
    ok(mt_decoder_create(m, &o, &d, err, sizeof err) == -1 && strstr(err, "over the"),
       "a budget over the device's refused: %s", err);
    o.kv.budget_bytes = 0;
    mt_model *small = NULL;
    ok(mt_model_load("synthetic:tiny", MT_MODEL_SHAPE_ONLY, &small, err, sizeof err) == 0 &&
       mt_decoder_create(small, &o, &d, err, sizeof err) == -1 &&
       strstr(err, "describes synthetic:moshi-7b, not synthetic:tiny"),
       "a profile for another model refused: %s", err);
    mt_model_free(small);
    unlink(path);
}

/* A served codec (Mimi) adds exactly the modelled amount: B x F /
 * codec_rate + codec_overhead_us to a step, W + sessions x S to what the
 * device books; a prefill carries none. Round figures: F = 1 GFLOP a
 * session-frame, S = 2 MB, W = 400 MB, 64 sessions. */
static void test_codec(const mt_model *m)
{
    const mt_config *c = &m->cfg;
    const char *extra = "codec_rate = 2e13\ncodec_overhead_us = 250\n";
    fake_clock fc0 = { .now = 1000000000ull }, fc1 = fc0;
    mt_sim *s0 = sim_for("no codec", extra, &fc0, c);
    mt_sim *s1 = sim_for("a codec", extra, &fc1, c);
    if (!s0 || !s1) {
        mt_sim_free(s0);
        mt_sim_free(s1);
        return;
    }
    const mt_codec_cost cc = { .flops = 1e9, .state_bytes = 2e6, .weight_bytes = 4e8 };
    ok(mt_sim_profile_of(s1)->codec_rate == 2e13 &&
       mt_sim_profile_of(s1)->codec_overhead_us == 250, "codec_rate and codec_overhead_us read");
    ok(mt_sim_set_codec(s1, &cc, 64, err, sizeof err) == 0, "codec booked: %s", err);
    is_int((long long)(mt_sim_kv_budget(s0) - mt_sim_kv_budget(s1)), 528000000ll,
           "K/V budget less 4e8 of weights + 64 x 2e6 of state");
    ok(mt_sim_codec_booked(&cc, 64) == 528e6, "mt_sim_codec_booked: the same 528,000,000");
    int n = 0;
    ok(mt_sim_codec(s1, &n)->flops == 1e9 && n == 64, "the codec and its sessions kept");

    int64_t vis[8] = { 1, 10, 100, 1000, 260, 260, 260, 260 };
    mt_sim_cost a, b;
    mt_sim_step_cost(s0, 8, vis, 0, &a);
    mt_sim_step_cost(s1, 8, vis, 0, &b);
    ok(a.t_codec == 0, "no codec: no codec time");
    /* 8 x 1e9 / 2e13 = 0.4 ms, + 0.25 ms */
    is_near((b.total - a.total) * 1e3, 0.65, 1e-12, "B=8: the step takes 0.65 ms more");
    is_near(b.t_codec * 1e3, 0.65, 1e-12, "t_codec 0.65 ms");
    is_near(mt_sim_codec_seconds(mt_sim_profile_of(s1), &cc, 8) * 1e3, 0.65, 1e-12,
            "mt_sim_codec_seconds says the same");
    ok(a.bytes == b.bytes && a.flops == b.flops, "the LM's bytes and flops unchanged");
    mt_sim_prefill_cost(s0, 100, 100, 5050, 0, &a);
    mt_sim_prefill_cost(s1, 100, 100, 5050, 0, &b);
    ok(a.total == b.total, "a prefill carries no codec");

    /* the waits: one step of 1 on each, the difference 1e9/2e13 + 250 us */
    mt_kv_params kp = { .policy = MT_KV_FULL, .budget_bytes = (size_t)64 << 20 };
    mt_backend *be[2] = { NULL, NULL };
    mt_kv_pool *pool[2] = { NULL, NULL };
    mt_kv_seq *q[2] = { NULL, NULL };
    uint64_t waited[2] = { 0, 0 };
    fake_clock *fc[2] = { &fc0, &fc1 };
    mt_sim *ss[2] = { s0, s1 };
    int fsz = c->frame_samples;
    int16_t *pcm = calloc((size_t)fsz, 2);
    for (int k = 0; k < 2; k++) {
        if (mt_sim_backend_wrap(ss[k], m, 4, &be[k], err, sizeof err) ||
            mt_backend_pool_create(be[k], c, &kp, &pool[k], err, sizeof err) ||
            mt_kv_seq_open(pool[k], &q[k]) || mt_kv_reserve(pool[k], q[k], 1)) {
            ok(0, "backend %d: %s", k, err);
            continue;
        }
        mt_step_io io = { .pcm_in = pcm, .pcm_out = pcm };
        uint64_t st = fc[k]->now;
        if (be[k]->step(be[k], 1, &q[k], &io, err, sizeof err) == 0)
            waited[k] = fc[k]->last_target - st;
    }
    is_int((long long)(waited[1] - waited[0]), 300000,
           "a step of 1 waits 0.3 ms longer (0.05 ms + 0.25 ms)");
    like(be[1] ? be[1]->note : "", "codec 528000000 B booked (400000000 B of weights + 64 sessions x 2000000 B of state)",
         "the startup note says the booking");
    for (int k = 0; k < 2; k++) {
        if (q[k])
            mt_kv_seq_close(pool[k], q[k]);
        if (be[k])
            be[k]->destroy(be[k]);
        mt_kv_pool_free(pool[k]);
    }
    free(pcm);

    /* a booking that leaves no K/V block is refused */
    const mt_codec_cost big = { .flops = 1e9, .state_bytes = 2e9, .weight_bytes = 0 };
    ok(mt_sim_set_codec(s0, &big, 64, err, sizeof err) == -1 &&
       strstr(err, "leave no room for a K/V block"), "a codec that does not fit: %s", err);
    mt_sim_free(s0);
    mt_sim_free(s1);

    /* no codec_rate: the codec runs at matrix_rate (8e14): 1e9 / 8e14 */
    mt_sim_profile p;
    parse(base_text, &p);
    ok(mt_sim_codec_rate(&p) == 8e14 && p.codec_overhead_us == 0,
       "codec_rate defaults to matrix_rate, codec_overhead_us to 0");
    is_near(mt_sim_codec_seconds(&p, &cc, 1) * 1e3, 0.00125, 1e-15, "1 GFLOP at 8e14: 1.25 us");
    char text[1024];
    snprintf(text, sizeof text, "%scodec_rate = 0\n", base_text);
    ok(parse(text, &p) == -1 && strstr(err, "key 'codec_rate': want a number in 1..1e+21"),
       "codec_rate 0 refused: %s", err);
    snprintf(text, sizeof text, "%scodec_overhead_us = -5\n", base_text);
    ok(parse(text, &p) == -1 && strstr(err, "key 'codec_overhead_us'"),
       "a negative codec_overhead_us refused: %s", err);

    /* through the decoder: opts.codec books it, the pool is that much smaller */
    char path[] = "/tmp/mt-test-simc-XXXXXX";
    int fd = mkstemp(path);
    ok(fd >= 0 && write(fd, base_text, strlen(base_text)) == (ssize_t)strlen(base_text),
       "profile file written");
    if (fd >= 0)
        close(fd);
    mt_decoder_opts o;
    memset(&o, 0, sizeof o);
    o.device = MT_DEV_SIM;
    o.sim_profile = path;
    o.max_batch = 64;
    o.kv.policy = MT_KV_WINDOW;
    o.kv.sink = 4;
    o.kv.window = 256;
    o.codec = cc;
    mt_decoder *d = NULL;
    int rc = mt_decoder_create(m, &o, &d, err, sizeof err);
    ok(rc == 0, "decoder on the sim with a codec: %s", rc ? err : "ok");
    if (rc == 0) {
        is_int(mt_kv_pool_blocks(mt_decoder_pool(d)), (122015999488ll - 528000000ll) / (524288 * 16),
               "pool blocks: the budget less the codec's 528 MB");
        like(mt_decoder_note(d), "codec 528000000 B booked", "its note says so");
        mt_decoder_free(d);
    }
    unlink(path);
}

/* A profile with a depformer (depformer_params D) adds exactly
 * max(D x db / bandwidth, 2 D B / depformer_rate) + depformer_overhead_us
 * to a step and nothing to a prefill; the keys are strict. Round figures:
 * D = 6e8 in fp32 (2.4 GB a frame: 0.6 ms at 4e12 B/s), 2e13 flop/s
 * (B = 8: 9.6e9 flops, 0.48 ms: the bytes win; B = 64: 3.84 ms), 1 ms of
 * launches. */
static void test_depformer(const mt_model *m)
{
    const mt_config *c = &m->cfg;
    const char *extra = "depformer_params = 6e8\ndepformer_weight_bytes = 4\n"
                        "depformer_rate = 2e13\ndepformer_overhead_us = 1000\n";
    fake_clock fc0 = { .now = 1000000000ull }, fc1 = fc0;
    mt_sim *s0 = sim_for("no depformer", "", &fc0, c);
    mt_sim *s1 = sim_for("a depformer", extra, &fc1, c);
    if (!s0 || !s1) {
        mt_sim_free(s0);
        mt_sim_free(s1);
        return;
    }
    const mt_sim_profile *p1 = mt_sim_profile_of(s1);
    ok(p1->depformer_params == 6e8 && p1->depformer_weight_bytes == 4 &&
       p1->depformer_rate == 2e13 && p1->depformer_overhead_us == 1000,
       "the four depformer keys read");
    int64_t vis[64];
    for (int i = 0; i < 64; i++)
        vis[i] = 256;
    mt_sim_cost a, b;
    mt_sim_step_cost(s0, 8, vis, 0, &a);
    mt_sim_step_cost(s1, 8, vis, 0, &b);
    ok(a.t_depformer == 0, "no depformer keys: no depformer time");
    is_near(b.t_depformer * 1e3, 1.6, 1e-9, "B=8: 0.6 ms of weights (bytes bound) + 1 ms");
    is_near((b.total - a.total) * 1e3, 1.6, 1e-9, "the step takes 1.6 ms more");
    ok(a.bytes == b.bytes && a.flops == b.flops, "the temporal step's bytes and flops unchanged");
    mt_sim_step_cost(s1, 64, vis, 0, &b);
    is_near(b.t_depformer * 1e3, 4.84, 1e-9, "B=64: 3.84 ms of flops (compute bound) + 1 ms");
    is_near(mt_sim_depformer_seconds(p1, 64) * 1e3, 4.84, 1e-9,
            "mt_sim_depformer_seconds says the same");
    mt_sim_prefill_cost(s0, 100, 100, 5050, 0, &a);
    mt_sim_prefill_cost(s1, 100, 100, 5050, 0, &b);
    ok(a.total == b.total, "a prefill carries no depformer");
    mt_sim_free(s0);
    mt_sim_free(s1);

    /* defaults: weight_bytes (2) and matrix_rate (8e14); 6e8 x 2 / 4e12 = 0.3 ms */
    mt_sim_profile p;
    char text[1024];
    snprintf(text, sizeof text, "%sdepformer_params = 6e8\n", base_text);
    ok(parse(text, &p) == 0 && mt_sim_depformer_weight_bytes(&p) == 2,
       "depformer_weight_bytes defaults to weight_bytes: %s", err);
    is_near(mt_sim_depformer_seconds(&p, 1) * 1e3, 0.3, 1e-9, "and its rate to matrix_rate");
    static const char *const bad[] = {
        "depformer_params = -1\n", "depformer_weight_bytes = 2.5\n",
        "depformer_weight_bytes = 9\n", "depformer_rate = 0\n",
        "depformer_overhead_us = 1e8\n", "depformer_params = 1\ndepformer_params = 2\n",
        "depformer_param = 1\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "%s%s", base_text, bad[i]);
        ok(parse(text, &p) == -1, "refused (%s)", err);
    }
}

/* The moshiko profiles (SIMULATED, from published figures): they load,
 * fit synthetic:moshiko, carry the codec's and the depformer's costs. */
static void test_moshiko_profiles(void)
{
    static const char *const names[] = { "h100-moshiko", "h200-moshiko" };
    for (int k = 0; k < 2; k++) {
        mt_sim_profile p;
        int rc = mt_sim_profile_load(names[k], &p, err, sizeof err);
        ok(rc == 0, "built-in %s loads (%s)", names[k], rc ? err : p.path);
        if (rc)
            continue;
        is_str(p.model, "synthetic:moshiko", "its model");
        ok(p.codec_rate > 0 && p.codec_overhead_us > 0, "%s: the codec's rate and launches",
           names[k]);
        /* 8 steps x (dep_in 1024x4096 + 6 layers x 12,845,056 + a 2048x1024 head) */
        ok(p.depformer_params == 666894336.0 && mt_sim_depformer_weight_bytes(&p) == 4,
           "%s: the depformer's 666,894,336 fp32 parameters", names[k]);
        mt_kyutai_lm *lm = NULL;
        mt_sim *s = NULL;
        rc = mt_kyutai_load(p.model, MT_MODEL_SHAPE_ONLY, &lm, err, sizeof err) ||
             mt_sim_create(&p, &lm->temporal->cfg, NULL, &s, err, sizeof err);
        ok(rc == 0, "%s fits its model: %s", names[k], rc ? err : mt_sim_label(s));
        if (s) {
            /* the depformer's share of a frame at B = 1 and 64 (SIMULATED) */
            double d1 = mt_sim_depformer_seconds(&p, 1), d64 = mt_sim_depformer_seconds(&p, 64);
            ok(d1 > 0 && d64 > d1 && d64 < 0.080, "%s: depformer %.3f ms at B=1, %.3f at B=64",
               names[k], d1 * 1e3, d64 * 1e3);
        }
        mt_sim_free(s);
        mt_kyutai_free(lm);
    }
}

/* calibrate_frame.c: the line fit recovers a + b B exactly from exact
 * points, and moshiko's depformer reads 666,894,336 parameters a frame */
static void test_calib_frame(void)
{
    const double x[4] = { 1, 8, 32, 64 };
    double t[4];
    for (int i = 0; i < 4; i++)
        t[i] = 2e-3 + 5e-5 * x[i];
    mt_calib_line l;
    mt_calib_line_fit(x, t, 4, &l);
    is_near(l.a_s, 2e-3, 1e-12, "intercept 2 ms");
    is_near(l.b_s, 5e-5, 1e-12, "slope 0.05 ms a session");
    ok(l.rms >= 0 && l.rms < 1e-9, "RMS residual 0 on exact points (%g)", l.rms);
    mt_calib_line_fit(x, t, 1, &l);
    ok(l.rms < 0, "one point: no fit");
    const double same[2] = { 8, 8 };
    mt_calib_line_fit(same, t, 2, &l);
    ok(l.rms < 0, "one distinct batch: no fit");
    mt_kyutai_lm *lm = NULL;
    int rc = mt_kyutai_load("synthetic:moshiko", MT_MODEL_SHAPE_ONLY, &lm, err, sizeof err);
    ok(rc == 0, "moshiko's shape: %s", rc ? err : "ok");
    if (rc == 0)
        ok(mt_calib_dep_params(&lm->kc) == 666894336.0,
           "moshiko's depformer: %.0f parameters a frame (the profiles' figure)",
           mt_calib_dep_params(&lm->kc));
    mt_kyutai_free(lm);
}

/* mt-probe calibrate's fit recovers the figures that made its points,
 * memory-bound and compute-bound points mixed */
static void test_calib_fit(void)
{
    mt_calib_point pts[12];
    int n = 0;
    for (int b = 0; b < 4; b++)
        for (int l = 0; l < 3; l++) {
            double bytes = 1e9 * (1 + l * 3), flops = 2e10 * (1 << (3 * b));
            double tm = bytes / 1e11, tf = flops / 1e12;
            pts[n++] = (mt_calib_point){ .batch = 1 << b, .len = l, .bytes = bytes,
                                         .flops = flops, .t_s = (tm > tf ? tm : tf) + 1e-3 };
        }
    double bw, rate, ov;
    double rms = mt_calib_fit(pts, n, &bw, &rate, &ov);
    ok(rms >= 0 && rms < 1e-4, "fit residual of exact points (%.2g)", rms);
    ok(fabs(bw / 1e11 - 1) < 1e-3 && fabs(rate / 1e12 - 1) < 1e-3 && fabs(ov / 1e-3 - 1) < 1e-2,
       "fit recovers 1e11 B/s, 1e12 flop/s, 1 ms (%.4g, %.4g, %.4g)", bw, rate, ov);
    ok(fabs(pts[5].fit_s - pts[5].t_s) < 1e-6, "fit_s filled");
    is_int(mt_calib_fit(pts, 2, &bw, &rate, &ov) < 0, 1, "two points are too few");
}

/* --time-scale K: the wait and the reported prediction are the model's
 * over K (they compare with the host's clock), and the schedule reads model
 * time, K times the real time elapsed. */
static void test_time_scale(const mt_config *c)
{
    fake_clock fc = { .now = 7000000000ull };
    mt_sim *s = sim_for("the time scale", "schedule = 10s bandwidth*0.5\n", &fc, c);
    if (!s)
        return;
    ok(mt_sim_time_scale(s) == 1, "time scale 1 by default");
    mt_sim_set_time_scale(s, 0);
    ok(mt_sim_time_scale(s) == 1, "a scale of 0 is taken as 1");
    mt_sim_set_time_scale(s, -2);
    ok(mt_sim_time_scale(s) == 1, "a negative scale is taken as 1");
    /* below 1 the model runs slower than real time (mt-serve takes 0.1 up) */
    mt_sim_set_time_scale(s, 0.5);
    ok(mt_sim_time_scale(s) == 0.5, "a scale of 0.5 is kept");
    mt_sim_set_time_scale(s, 4);
    int64_t vis[8] = { 1, 10, 100, 1000, 260, 260, 260, 260 };
    /* 2 s of real time = 8 s of model time: as profiled, 3.627936 ms / 4 */
    fc.now = 7000000000ull + 2000000000ull;
    uint64_t st = fc.now;
    mt_sim_run_step(s, 8, vis);
    is_int(fc.last_target - st, 906984, "x4: waits 3.627936 ms / 4 = 0.906984 ms");
    double pred, noise;
    mt_sim_take(s, &pred, &noise);
    is_near(pred, 0.906984, 1e-9, "x4: take reports the scaled prediction");
    /* 2.5 s of real time = 10 s of model time: the schedule's bandwidth x0.5 */
    fc.now = 7000000000ull + 2500000000ull;
    st = fc.now;
    mt_sim_run_step(s, 8, vis);
    is_int(fc.last_target - st, 1788968, "x4, 10 model s: 7.155872 ms / 4 (schedule in model time)");
    mt_sim_free(s);
}

int main(void)
{
    test_calib_fit();
    test_calib_frame();
    test_parse();
    test_shipped();
    mt_model *m = NULL;
    if (mt_model_load("synthetic:moshi-7b", MT_MODEL_SHAPE_ONLY, &m, err, sizeof err) != 0) {
        ok(0, "shape-only moshi-7b: %s", err);
        return tap_done();
    }
    ok(m->shape_only && m->layer == NULL, "moshi-7b loads shape-only: no weights");
    test_cost_model(&m->cfg);
    test_schedule(&m->cfg);
    test_time_scale(&m->cfg);
    test_noise(&m->cfg);
    test_backend(m);
    test_decoder(m);
    test_codec(m);
    test_depformer(m);
    test_moshiko_profiles();
    mt_model_free(m);
    return tap_done();
}
