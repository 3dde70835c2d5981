/* test_engine.c: the tick engine (src/serve/engine*.c) on a fake backend and
 * a clock of the test's own, so every case is deterministic: no sleeps, no
 * wall clock. The fake backend echoes each row's input PCM and advances the
 * clock by a known cost per step (and per recomputed position), so a
 * step's duration, and with it every deadline, met figure and catch-up
 * budget, is chosen by the test.
 *
 * Cases: deadlines and the met figures, FILL (from the I/O thread's
 * deadlines and from a step that ended late), catch-up rounds and their
 * budget, full-mode preemption and recompute, the stall policy, the
 * counters adding up (every input one output or one counted miss), drain,
 * a failing step, a session closed while its row is being stepped.
 */
#include "serve/engine.h"
#include "decode/decoder.h"
#include "decode/backend.h"
#include "model/model.h"
#include "wire/frame.h"
#include "wire/latline.h"
#include "fake_backend.h"
#include "tap.h"

#include <stdint.h>
#include <string.h>

#define MS     1000000ull
#define T0     (1000ull * 1000 * MS)   /* the clock's origin: far from 0 */
#define PERIOD (80 * MS)

/* ---- the fake backend and clock ------------------------------------------ */

static struct fake {
    uint64_t now;           /* the engine's clock */
    uint64_t step_ns;       /* cost of one batch step */
    uint64_t row_ns;        /* and of each of its rows (0 unless a test sets it) */
    uint64_t prefill_ns;    /* cost of one recomputed position */
    int      steps, rows, prefills, prefill_positions;
    int      fail;          /* the next step fails */
    uint32_t close_in_step; /* the next step closes this session, as the
                               I/O thread may while a step computes */
    uint32_t shed_in_step;  /* the next step sheds this one (issue 24) */
} F;

static uint64_t fake_clock(void *ctx)
{
    return ((struct fake *)ctx)->now;
}

static int fs;              /* samples per frame of the model */
static mt_engine *eng;

static int fake_step(mt_backend *be, int B, mt_kv_seq *const *seqs,
                     const mt_step_io *io, char *err, size_t errlen)
{
    F.now += F.step_ns + F.row_ns * (uint64_t)B;
    if (F.close_in_step) {
        mt_engine_close(eng, F.close_in_step);   /* the lock is not held */
        F.close_in_step = 0;
    }
    if (F.shed_in_step) {
        mt_engine_shed(eng, F.shed_in_step, "shed while stepped");
        F.shed_in_step = 0;
    }
    if (F.fail) {
        F.fail = 0;
        snprintf(err, errlen, "fake: step failed");
        return -1;
    }
    F.steps++;
    F.rows += B;
    memcpy(io->pcm_out, io->pcm_in, (size_t)B * (size_t)fs * 2);
    return 0;
}

static int fake_prefill(mt_backend *be, mt_kv_seq *seq, int n,
                        const mt_step_io *io, char *err, size_t errlen)
{
    F.now += F.prefill_ns * (uint64_t)n;
    F.prefills++;
    F.prefill_positions += n;
    return 0;
}

static int fake_create(const mt_model *m, const mt_decoder_opts *o,
                       mt_backend **out, char *err, size_t errlen)
{
    return fake_backend_new(fake_step, fake_prefill, out, err, errlen);
}

/* ---- the rig: an engine, its lines, its sessions' output streams --------- */

#define MAXLINES 4096
static char *lines[MAXLINES];
static int nlines;

static void on_line(void *ctx, const char *l)
{
    if (nlines < MAXLINES)
        lines[nlines++] = strdup(l);
}

static mt_model   *model;
static mt_decoder *dec;
static char        err[512];

typedef struct rig_opts {
    int      fill, catch_up, frame_lines, in_queue, max_sessions, out_queue;
    mt_kv_policy policy;
    mt_on_full   on_full;
    int      blocks;        /* KV pool size in blocks */
} rig_opts;

static void rig_close(void)
{
    mt_engine_free(eng);
    mt_decoder_free(dec);
    eng = NULL;
    dec = NULL;
    for (int i = 0; i < nlines; i++)
        free(lines[i]);
    nlines = 0;
}

static int rig_open(rig_opts ro, uint64_t step_ns)
{
    rig_close();
    memset(&F, 0, sizeof F);
    F.now = T0;
    F.step_ns = step_ns;
    F.prefill_ns = MS;
    mt_decoder_opts d = { .device = MT_DEV_CPU, .max_batch = 8, .threads = 1 };
    d.kv.policy = ro.policy;
    d.kv.sink = 4;
    d.kv.window = 28;
    size_t pos = mt_decoder_position_bytes(&model->cfg, sizeof(float));
    d.kv.budget_bytes = (size_t)(ro.blocks ? ro.blocks : 64) * MT_KV_BLOCK * pos;
    if (mt_decoder_create_with(model, &d, fake_create, &dec, err, sizeof err))
        return -1;
    mt_engine_opts o;
    mt_engine_opts_default(&o);
    o.frame_ns = PERIOD;
    o.deadline_ns = 2 * PERIOD;
    o.fill = ro.fill;
    o.catch_up = ro.catch_up;
    o.frame_lines = ro.frame_lines;
    o.on_full = ro.on_full;
    o.max_sessions = ro.max_sessions ? ro.max_sessions : 8;
    if (ro.in_queue)
        o.in_queue = ro.in_queue;
    if (ro.out_queue)
        o.out_queue = ro.out_queue;
    o.line = on_line;
    o.clock = fake_clock;
    o.clock_ctx = &F;
    return mt_engine_create(&o, dec, T0, &eng, err, sizeof err);
}

/* What came out of one session so far. */
typedef struct stream {
    mt_frame_decoder d;
    int accept, real, fill, end, error, wrong;
    uint32_t last_seq;
    uint64_t last_latency;   /* t_ready - t_arrive of the last AUDIO */
    char reason[300];
} stream;

static stream S[8];

/* Output bytes of session k, decoded and counted into S[k]. */
static void feed_stream(int k, const uint8_t *buf, size_t n)
{
    size_t off = 0;
    while (off < n) {
        size_t used = 0;
        mt_frame f;
        int rc = mt_frame_decode(&S[k].d, buf + off, n - off, &used, &f);
        off += used;
        if (rc != MT_FRAME_OK)
            break;
        if (f.type == MT_FRAME_ACCEPT)
            S[k].accept++;
        else if (f.type == MT_FRAME_END) {
            S[k].end++;
            snprintf(S[k].reason, sizeof S[k].reason, "%.*s", (int)f.length,
                     (const char *)f.payload);
        }
        else if (f.type == MT_FRAME_ERROR || f.type == MT_FRAME_REJECT) {
            S[k].error++;
            snprintf(S[k].reason, sizeof S[k].reason, "%.*s", (int)f.length,
                     (const char *)f.payload);
        } else if (f.type == MT_FRAME_AUDIO) {
            int16_t s0;
            memcpy(&s0, f.payload, 2);
            if (f.flags & MT_FLAG_FILL) {
                S[k].fill++;
                S[k].wrong += s0 != 0;           /* FILL is silence */
            } else {
                S[k].real++;
                S[k].wrong += s0 != (int16_t)f.seq;  /* echo of its input */
            }
            S[k].last_seq = f.seq;
            S[k].last_latency = f.t_ready - f.t_arrive;
        }
    }
}

static void drain_output(int k, uint32_t id)
{
    static uint8_t buf[1 << 20];
    size_t n = mt_engine_take(eng, id, buf, sizeof buf);
    feed_stream(k, buf, n);
}

static uint32_t open_session(int k)
{
    memset(&S[k], 0, sizeof S[k]);
    mt_frame_decoder_init(&S[k].d);
    uint32_t id = mt_engine_session_new(eng);
    char why[200];
    if (!id || mt_engine_admit(eng, id, why, sizeof why) != 0)
        return 0;
    drain_output(k, id);
    return id;
}

/* An input frame whose first sample is its seq, arriving now. */
static int send_frame(uint32_t id, uint32_t seq)
{
    static int16_t pcm[8192];
    memset(pcm, 0, sizeof pcm);
    pcm[0] = (int16_t)seq;
    mt_frame f = {0};
    f.type = MT_FRAME_AUDIO;
    f.session = id;
    f.seq = seq;
    f.t_send = F.now;
    f.length = (uint32_t)fs * 2;
    f.payload = (const uint8_t *)pcm;
    char why[200];
    return mt_engine_input(eng, id, &f, F.now, why, sizeof why);
}

/* Tick k, scheduled at T0 + k periods; the clock moves there first unless
 * it is already past (an overrun). Returns mt_engine_tick's result. */
static int tick(int64_t k)
{
    uint64_t at = T0 + (uint64_t)k * PERIOD;
    if (F.now < at)
        F.now = at;
    return mt_engine_tick(eng, k, at, err, sizeof err);
}

/* The last tick record written. */
static int last_tick(mt_tick *t)
{
    static mt_latline ll;
    for (int i = nlines - 1; i >= 0; i--) {
        if (strncmp(lines[i], "tick=", 5) != 0)
            continue;
        if (mt_latline_parse(lines[i], strlen(lines[i]), i + 1, &ll, err, sizeof err))
            return -1;
        return mt_tick_from_line(&ll, i + 1, t, err, sizeof err);
    }
    return -1;
}

/* Totals of in / out / fill / miss / preempted over every tick record. */
typedef struct totals { int64_t in, out, fill, miss, preempted, stepped; } totals;

static totals sum_ticks(void)
{
    static mt_latline ll;
    totals s = {0};
    for (int i = 0; i < nlines; i++) {
        mt_tick t;
        if (strncmp(lines[i], "tick=", 5) != 0 ||
            mt_latline_parse(lines[i], strlen(lines[i]), i + 1, &ll, err, sizeof err) ||
            mt_tick_from_line(&ll, i + 1, &t, err, sizeof err))
            continue;
        s.in += t.in;
        s.out += t.out;
        s.fill += t.fill;
        s.miss += t.miss;
        s.preempted += t.preempted;
        s.stepped += t.stepped;
    }
    return s;
}

static int ended(uint32_t id)
{
    mt_sess_status st;
    return mt_engine_status(eng, id, &st) == 0 && st.ended;
}

/* ---- cases ---------------------------------------------------------------- */

static void test_deadlines(void)
{
    rig_opts ro = { .catch_up = 1 };
    ok(rig_open(ro, 10 * MS) == 0, "engine on the fake backend: %s", err);
    uint32_t a = open_session(0);
    ok(a > 0 && S[0].accept == 1, "admitted, ACCEPT queued");
    send_frame(a, 1);
    tick(0);
    drain_output(0, a);
    mt_tick t;
    ok(last_tick(&t) == 0, "tick record reads back: %s", err);
    ok(t.stepped == 1 && t.in == 1 && t.out == 1 && t.fill == 0 && t.miss == 0,
       "one in, one real out (stepped %lld in %lld out %lld)",
       (long long)t.stepped, (long long)t.in, (long long)t.out);
    ok(S[0].real == 1 && S[0].wrong == 0 && S[0].last_seq == 1,
       "the output is the step's (echo of frame 1)");
    is_int((long long)S[0].last_latency, (long long)(10 * MS),
           "latency in the frame header: the step's 10 ms");
    ok(t.step_ms == 10.0 && t.p50_ms == 10.0 && t.p99_ms == 10.0,
       "step_ms and p50/p99 are the step's cost (%.3f %.3f %.3f)",
       t.step_ms, t.p50_ms, t.p99_ms);
    ok(t.met == 100.0 && t.naive_met == 100.0, "deadline met: met=100.0");
    is_int((long long)t.late_ms, 0, "nothing waiting: late_ms 0");

    /* a step longer than the deadline (2 periods): a real output, late */
    F.step_ns = 200 * MS;
    send_frame(a, 2);
    tick(1);
    drain_output(0, a);
    last_tick(&t);
    ok(t.out == 1 && t.fill == 0 && S[0].real == 2,
       "without FILL the late output is still sent");
    ok(t.met == 0.0 && t.naive_met == 0.0, "and counts as a missed deadline "
       "(met %.1f naive_met %.1f)", t.met, t.naive_met);

    /* END waits for the last input's answer */
    F.step_ns = 10 * MS;
    tick(4);
    send_frame(a, 3);
    mt_engine_input_end(eng, a);
    ok(!ended(a), "END waits for the unanswered input");
    tick(5);
    drain_output(0, a);
    ok(ended(a) && S[0].end == 1 && S[0].real == 3, "after the last answer, END");
}

static void test_fill(void)
{
    rig_opts ro = { .fill = 1, .catch_up = 1, .frame_lines = 1 };
    ok(rig_open(ro, 200 * MS) == 0, "engine with FILL: %s", err);
    uint32_t a = open_session(0);
    send_frame(a, 1);               /* arrives at T0: due at T0 + 160 ms */
    F.now = T0 + 100 * MS;
    uint64_t next = mt_engine_fill_due(eng, F.now);
    is_int((long long)(next - T0), (long long)(160 * MS),
           "fill_due before the deadline: no FILL, next deadline 160 ms");
    drain_output(0, a);
    is_int(S[0].fill, 0, "no FILL before the deadline");
    F.now = T0 + 160 * MS;
    next = mt_engine_fill_due(eng, F.now);
    drain_output(0, a);
    ok(S[0].fill == 1 && S[0].real == 0 && S[0].wrong == 0 && next == 0,
       "at the deadline: one FILL of silence, no deadline left");
    is_int((long long)S[0].last_latency, (long long)(160 * MS), "FILL at 160 ms");
    tick(2);                        /* the model consumes frame 1 */
    drain_output(0, a);
    mt_tick t;
    last_tick(&t);
    ok(S[0].real == 0 && t.out == 0 && t.fill == 1 && t.in == 1,
       "the late real output is never sent (out 0, fill 1 counted)");
    ok(t.met == 0.0 && t.naive_met == 100.0,
       "naive_met counts the FILL as met, met does not (%.1f %.1f)",
       t.naive_met, t.met);
    ok(t.stepped == 1, "the model still consumed the frame");

    /* a step that ends past the deadline before the I/O thread saw it:
     * deliver sends the FILL (the one FILL builder) */
    F.now = T0 + 10 * PERIOD;
    send_frame(a, 2);
    F.step_ns = 170 * MS;
    tick(10);
    drain_output(0, a);
    last_tick(&t);
    ok(S[0].fill == 2 && S[0].real == 0 && t.fill == 1 && t.out == 0,
       "a step ending past the deadline answers with FILL");
    int nf = 0, parsed = 0;
    static mt_latline ll;
    for (int i = 0; i < nlines; i++) {
        if (strncmp(lines[i], "frame=", 6))
            continue;
        nf++;
        mt_frame_rec r;
        if (!mt_latline_parse(lines[i], strlen(lines[i]), 1, &ll, err, sizeof err) &&
            !mt_frame_rec_from_line(&ll, 1, &r, err, sizeof err) && r.fill == 1 &&
            r.met == 0)
            parsed++;
    }
    ok(nf == 2 && parsed == 2, "one FILL frame line each, read by the codec (%d, %d)",
       nf, parsed);
    int found = 0;
    for (int i = 0; i < nlines; i++)
        found |= !strcmp(lines[i], "frame=1 session=1 t=0.160 fill=1 "
                         "latency_ms=160.000 met=0");
    ok(found, "the FILL frame line's bytes");
}

/* A fresh engine (steps of step_ns) with n sessions open, client k's in
 * id[k] with its frames 1..queued[k] sent. 0; -1 after a failed check
 * when the rig or a session does not open. */
static int rig_sessions(rig_opts ro, uint64_t step_ns, int n, const uint32_t *queued,
                        uint32_t *id)
{
    if (rig_open(ro, step_ns) != 0) {
        ok(0, "rig: %s", err);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        id[k] = open_session(k);
        if (!id[k]) {
            ok(0, "session %d opens", k);
            return -1;
        }
        for (uint32_t f = 1; f <= queued[k]; f++)
            send_frame(id[k], f);
    }
    return 0;
}

/* A fresh engine (steps of step_ns) with one session n frames behind. */
static uint32_t session_behind(rig_opts ro, uint64_t step_ns, uint32_t n)
{
    uint32_t a = 0;
    return rig_sessions(ro, step_ns, 1, &n, &a) == 0 ? a : 0;
}

static void test_catch_up(void)
{
    rig_opts ro = { .catch_up = 1 };
    uint32_t a = session_behind(ro, 10 * MS, 3);
    tick(0);
    drain_output(0, a);
    mt_tick t;
    last_tick(&t);
    ok(t.stepped == 3 && S[0].real == 3 && S[0].last_seq == 3,
       "catch-up rounds step all three in one tick (stepped %lld)",
       (long long)t.stepped);
    is_int(F.steps, 3, "three batch steps");

    /* budget: rounds fit while the next one, costed from the last (25 ms
     * per row + an eighth fixed), ends by 15/16 of the period (75 ms):
     * after two rounds (50 ms), 50 + 3.125 + 25 > 75, so two, not three */
    session_behind(ro, 25 * MS, 4);
    tick(0);
    last_tick(&t);
    is_int(t.stepped, 2, "25 ms rounds: two fit in 15/16 of the period");
    tick(1);
    last_tick(&t);
    is_int(t.stepped, 2, "the other two catch up next tick");

    ro.catch_up = 0;
    session_behind(ro, 10 * MS, 3);
    tick(0);
    last_tick(&t);
    is_int(t.stepped, 1, "--no-catch-up: one round per tick");
    ok(t.late_ms == 10.0, "and the rest wait: late_ms %.3f", t.late_ms);
}

/* Near capacity no catch-up round fits before 15/16 of the period; the
 * first catch-up round of a tick may borrow the next tick's slack (end by
 * t_tick + 2 P - round0), so a lagging session is caught up at once instead
 * of staying a frame behind until chance drains it. 8 sessions, a step of
 * 8 ms + 7 ms a row: a full round is 64 ms, a one-row round 15 ms. */
static void test_catch_up_borrow(void)
{
    uint32_t id[8];
    uint32_t queued[8] = { 2, 1, 1, 1, 1, 1, 1, 1 };   /* the first one behind */
    if (rig_sessions((rig_opts){ .catch_up = 1 }, 8 * MS, 8, queued, id) != 0)
        return;
    F.row_ns = 7 * MS;
    tick(0);
    mt_tick t;
    last_tick(&t);
    /* 64 + 8 (an eighth) + 8 (a row) = 80 > 75: the 15/16 rule alone steps
     * none; borrowing, the round may end by 160 - 64 = 96 */
    is_int(t.stepped, 9, "near capacity the lagging session is caught up in the same tick");
    ok(F.now == T0 + 79 * MS, "the borrowed round ended before the next tick (at %.1f ms)",
       (double)(F.now - T0) / 1e6);
    for (int k = 0; k < 8; k++)
        send_frame(id[k], queued[k] + 1);
    tick(1);
    last_tick(&t);
    ok(t.stepped == 8 && t.late_ms <= 80.0,
       "and the next tick steps every session once, in budget (stepped %lld, late %.1f ms)",
       (long long)t.stepped, t.late_ms);

    /* with less slack than a round's cost (a full round of 76 ms: a
     * one-row round would end past the next tick's start by more than its
     * slack) it does not borrow: the session waits */
    uint32_t q2[8] = { 2, 1, 1, 1, 1, 1, 1, 1 };
    if (rig_sessions((rig_opts){ .catch_up = 1 }, 20 * MS, 8, q2, id) != 0)
        return;
    F.row_ns = 7 * MS;
    tick(0);
    last_tick(&t);
    is_int(t.stepped, 8, "no slack to borrow: no catch-up round");
    F.row_ns = 0;
}

/* What the round_out hook saw: when it was called and the real answers
 * each of two sessions had by then. */
static struct { int calls; uint64_t at; int real[2]; uint32_t id[2]; } R;

static void on_round_out(void *ctx)
{
    (void)ctx;
    R.calls++;
    R.at = F.now;
    for (int k = 0; k < 2; k++) {
        drain_output(k, R.id[k]);
        R.real[k] = S[k].real;
    }
}

/* A tick with a catch-up round hands the first round's answers out before
 * that round's step (issue 49: they waited for it, a step's time more
 * for every session on time, on mt-serve's I/O thread woken only at the
 * tick's end). Two sessions, the first a frame behind, 10 ms steps. */
static void test_catch_up_answers_out(void)
{
    uint32_t queued[2] = { 2, 1 };
    memset(&R, 0, sizeof R);
    if (rig_sessions((rig_opts){ .catch_up = 1 }, 10 * MS, 2, queued, R.id) != 0)
        return;
    mt_engine_set_round_out(eng, on_round_out, NULL);
    tick(0);
    is_int(R.calls, 1, "one round's output handed out within the tick");
    ok(R.at == T0 + 10 * MS && R.real[0] == 1 && R.real[1] == 1,
       "after round 0's step (at %.1f ms), both sessions' answers are out "
       "(%d, %d) before the catch-up round", (double)(R.at - T0) / 1e6,
       R.real[0], R.real[1]);
    drain_output(0, R.id[0]);
    mt_tick t;
    last_tick(&t);
    ok(t.stepped == 3 && S[0].real == 2 && F.now == T0 + 20 * MS,
       "the catch-up round then steps the late frame (stepped %lld)", (long long)t.stepped);
    tick(1);
    is_int(R.calls, 1, "a tick of one round: no extra hand-out (the tick's end is one)");
}

/* Two sessions in full mode on a 3-block pool: 16 positions each fill a
 * block; the 17th needs a second block each and there is one. */
static void full_pool_scenario(mt_on_full policy, uint32_t *pa, uint32_t *pb)
{
    rig_opts ro = { .catch_up = 1, .policy = MT_KV_FULL, .on_full = policy,
                    .blocks = 3 };
    ok(rig_open(ro, 5 * MS) == 0, "full mode, 3 blocks: %s", err);
    uint32_t a = open_session(0), b = open_session(1);
    for (int k = 0; k < 16; k++) {
        send_frame(a, (uint32_t)k + 1);
        send_frame(b, (uint32_t)k + 1);
        tick(k);
    }
    drain_output(0, a);
    drain_output(1, b);
    ok(S[0].real == 16 && S[1].real == 16, "16 frames each served");
    send_frame(a, 17);
    send_frame(b, 17);
    tick(16);
    drain_output(0, a);
    drain_output(1, b);
    *pa = a;
    *pb = b;
}

static void test_preempt_recompute(void)
{
    uint32_t a, b;
    full_pool_scenario(MT_ONFULL_PREEMPT, &a, &b);
    mt_tick t;
    last_tick(&t);
    ok(t.preempted == 1 && t.stepped == 1, "the newer session is preempted "
       "(preempted %lld, stepped %lld)", (long long)t.preempted, (long long)t.stepped);
    ok(S[0].real == 17 && S[1].real == 16, "the older one steps; the newer waits");
    /* the older one ends; its blocks come back */
    mt_engine_input_end(eng, a);
    drain_output(0, a);
    ok(ended(a) && S[0].end == 1, "the older session ends");
    mt_engine_close(eng, a);
    int before = F.prefill_positions;
    tick(17);
    drain_output(1, b);
    last_tick(&t);
    is_int(F.prefill_positions - before, 16, "recompute: one prefill of its 16-frame history");
    ok(S[1].real == 17 && S[1].wrong == 0 && S[1].last_seq == 17,
       "then its 17th frame is served");
    ok(t.step_ms == 21.0 && t.naive_ms == 5.0,
       "step_ms counts the recompute (16 x 1 ms + 5 ms), naive_ms does not "
       "(%.3f, %.3f)", t.step_ms, t.naive_ms);
    totals s = sum_ticks();
    ok(s.in == s.out + s.fill + s.miss, "counters add up: in %lld = out %lld + "
       "fill %lld + miss %lld", (long long)s.in, (long long)s.out,
       (long long)s.fill, (long long)s.miss);
}

static void test_stall(void)
{
    uint32_t a, b;
    full_pool_scenario(MT_ONFULL_STALL, &a, &b);
    mt_tick t;
    last_tick(&t);
    ok(t.preempted == 0 && t.stepped == 1, "stall: nobody preempted, one stepped");
    ok(S[1].real == 16, "the session without room waits");
    send_frame(b, 18);
    tick(17);
    drain_output(1, b);
    last_tick(&t);
    ok(S[1].real == 16 && t.late_ms > 80.0,
       "still waiting a tick later: late_ms %.3f", t.late_ms);
    mt_engine_input_end(eng, a);
    mt_engine_close(eng, a);
    tick(18);
    drain_output(1, b);
    ok(S[1].real == 18 && S[1].last_seq == 18, "room again: both waiting frames served");
    is_int(F.prefills, 0, "stall keeps its cache: no recompute");
}

static void test_counters(void)
{
    rig_opts ro = { .fill = 1, .catch_up = 1, .in_queue = 2 };
    rig_open(ro, 10 * MS);
    uint32_t a = open_session(0), b = open_session(1), c = open_session(2);
    /* a: a full input queue drops the third frame (a counted miss) */
    is_int(send_frame(a, 1), 0, "queued");
    send_frame(a, 2);
    is_int(send_frame(a, 3), 1, "over in_queue: dropped");
    /* b: two inputs lost with the connection */
    send_frame(b, 1);
    send_frame(b, 2);
    mt_engine_close(eng, b);
    /* c: one FILL (deadline passes before any tick), one real */
    send_frame(c, 1);
    F.now = T0 + 200 * MS;
    mt_engine_fill_due(eng, F.now);
    send_frame(c, 2);
    tick(3);
    tick(4);
    drain_output(0, a);
    drain_output(2, c);
    totals s = sum_ticks();
    ok(s.in == 7, "7 input frames counted (%lld)", (long long)s.in);
    /* at T0 + 200 ms every frame of a and c's first are past their
     * deadline (160 ms): FILL; c's second is served for real */
    ok(s.miss == 3 && s.fill == 3 && s.out == 1,
       "3 misses (1 dropped, 2 lost), 3 FILL, 1 real (%lld %lld %lld)",
       (long long)s.miss, (long long)s.fill, (long long)s.out);
    ok(s.in == s.out + s.fill + s.miss, "every input one output or one counted miss");
    ok(S[0].fill == 2 && S[0].real == 0 && S[2].fill == 1 && S[2].real == 1,
       "what the clients got matches the records");
}

static void test_drain(void)
{
    uint32_t id[2];
    if (rig_sessions((rig_opts){ .catch_up = 0 }, 10 * MS, 2, (uint32_t[]){ 2, 0 }, id) != 0)
        return;
    uint32_t a = id[0], b = id[1];
    mt_engine_drain(eng);
    drain_output(1, b);
    ok(ended(b) && S[1].end == 1, "drain: an idle session ends at once");
    ok(!ended(a), "a session with inputs queued waits for their answers");
    ok(send_frame(a, 3) == -1, "no input after drain");
    int active, pending;
    mt_engine_counts(eng, &active, &pending);
    is_int(active, 1, "one active while it drains");
    tick(0);
    ok(!ended(a), "one answered, one to go");
    tick(1);
    drain_output(0, a);
    ok(ended(a) && S[0].real == 2 && S[0].end == 1, "both answered, then END");
    mt_engine_counts(eng, &active, &pending);
    is_int(active, 0, "nothing active: the server may exit");
}

static void test_step_failure(void)
{
    uint32_t a;
    if (rig_sessions((rig_opts){ .catch_up = 1 }, 10 * MS, 1, (uint32_t[]){ 2 }, &a) != 0)
        return;
    F.fail = 1;
    ok(tick(0) == -1 && strstr(err, "fake: step failed"), "a failing step: tick "
       "returns -1 with the backend's message (%s)", err);
    drain_output(0, a);
    ok(ended(a) && S[0].error == 1 && S[0].real == 0, "its session gets ERROR (%s)",
       S[0].reason);
    mt_tick t;
    last_tick(&t);
    ok(t.miss == 2 && t.in == 2, "its inputs are counted misses (%lld)",
       (long long)t.miss);
}

static void test_close_in_flight(void)
{
    uint32_t id[2];
    if (rig_sessions((rig_opts){ .catch_up = 1 }, 10 * MS, 2, (uint32_t[]){ 1, 1 }, id) != 0)
        return;
    uint32_t a = id[0], b = id[1];
    F.close_in_step = a;
    ok(tick(0) == 0, "a connection gone during the step: the tick goes on");
    mt_sess_status st;
    ok(mt_engine_status(eng, a, &st) == -1 && !st.known, "its session is gone");
    drain_output(1, b);
    ok(S[1].real == 1, "the other row is delivered");
    mt_tick t;
    last_tick(&t);
    ok(t.in == 2 && t.out == 1 && t.miss == 1 && t.active == 1,
       "its stepped input is a counted miss (in %lld out %lld miss %lld)",
       (long long)t.in, (long long)t.out, (long long)t.miss);
    send_frame(b, 2);
    tick(1);
    drain_output(1, b);
    ok(S[1].real == 2, "the engine goes on without it");
}

/* issue 23: the published capacity: the least of max_sessions, the
 * sessions held plus what the pool can still hold for their bound, and
 * the controller's limit; a failed step is reported for the agent's down. */
static void test_published_limit(void)
{
    char failed[160];
    /* window 28 + sink 4 = 32 positions = 2 blocks a session */
    is_int(rig_open((rig_opts){ .policy = MT_KV_WINDOW, .max_sessions = 8 }, MS), 0, "rig (64 blocks)");
    is_int(mt_engine_published_limit(eng, failed, sizeof failed), 8,
           "a large pool: --max-sessions");
    ok(failed[0] == 0, "not failed");
    is_int(rig_open((rig_opts){ .policy = MT_KV_WINDOW, .max_sessions = 8, .blocks = 6 }, MS), 0,
           "rig (6 blocks)");
    int kv0 = mt_engine_published_limit(eng, NULL, 0);
    is_int(kv0, 3, "6 blocks hold 3 bounded sessions: 3");
    uint32_t id = open_session(0);
    ok(id != 0, "one session admitted");
    is_int(mt_engine_published_limit(eng, NULL, 0), 3, "held + room is still 3");
    mt_engine_set_limit(eng, 2);
    is_int(mt_engine_published_limit(eng, NULL, 0), 2, "limit 2 from the controller wins");
    mt_engine_set_limit(eng, 0);
    is_int(mt_engine_published_limit(eng, NULL, 0), 0, "limit 0: 0");
    mt_engine_set_limit(eng, -1);
    is_int(mt_engine_published_limit(eng, NULL, 0), 3, "no limit: back to the pool's 3");
    is_int(send_frame(id, 0), 0, "a frame in");
    is_int(tick(0), 0, "tick");
    mt_tick t;
    is_int(last_tick(&t), 0, "tick line reads back");
    ok(t.has_limit && t.limit == 3, "the tick line says limit=3");
    is_int(rig_open((rig_opts){ .policy = MT_KV_FULL, .max_sessions = 5 }, MS), 0, "rig (full)");
    is_int(mt_engine_published_limit(eng, NULL, 0), 5, "unbounded sessions: --max-sessions");
    id = open_session(0);
    send_frame(id, 0);
    F.fail = 1;
    ok(tick(0) != 0, "a failed step fails the tick");
    mt_engine_published_limit(eng, failed, sizeof failed);
    like(failed, "fake: step failed", "the failure is kept for the agent");
}

/* issue 24: a shed session ends with END, its reason the END's payload
 * (mt-frame(5)); each input it had queued is
 * answered (a FILL already sent) or a counted miss, never both, never
 * neither; shed= counts it; a shed of a session stepped right now is safe;
 * the others go on. */
static void test_shed(void)
{
    uint32_t id[3];
    rig_opts ro = { .fill = 1, .catch_up = 0 };
    if (rig_sessions(ro, 10 * MS, 3, (uint32_t[]){ 1, 1, 1 }, id) != 0)
        return;
    uint32_t a = id[0], b = id[1], c = id[2];
    tick(0);                                /* one real output each */
    /* a: three queued, the first past its deadline (a FILL answers it) */
    send_frame(a, 2);
    F.now = T0 + 250 * MS;
    mt_engine_fill_due(eng, F.now);
    send_frame(a, 3);
    send_frame(a, 4);
    send_frame(b, 2);
    ok(mt_engine_shed(eng, a, "capacity fell") == 0, "shed a: 0");
    ok(mt_engine_shed(eng, a, "again") == -1, "a second shed of a: -1, nothing changes");
    ok(mt_engine_shed(eng, 9999, "x") == -1, "shed of an unknown session: -1");
    uint32_t p = mt_engine_session_new(eng);
    ok(mt_engine_shed(eng, p, "x") == -1, "shed of a pending session: -1 (reject it instead)");
    mt_engine_reject(eng, p, "test", 0);
    ok(send_frame(a, 5) == -1, "no input after the shed");
    drain_output(0, a);
    ok(ended(a) && S[0].end == 1 && S[0].error == 0,
       "a ends with END, not ERROR (end %d error %d)", S[0].end, S[0].error);
    ok(!strcmp(S[0].reason, "capacity fell"),
       "a's END carries the reason (\"%s\")", S[0].reason);
    ok(S[0].real == 1 && S[0].fill == 1, "a got its first real output and one FILL");
    /* c is in the batch of tick 3 when the shed comes (as the control
     * thread may shed while a step computes) */
    send_frame(c, 2);
    F.shed_in_step = c;
    ok(tick(3) == 0, "a shed during the step: the tick goes on");
    drain_output(1, b);
    drain_output(2, c);
    ok(S[1].real == 2, "b goes on");
    ok(ended(c) && S[2].real == 1 && S[2].end == 1,
       "c, shed while stepped: END, its stepped input not delivered");
    mt_tick t;
    ok(last_tick(&t) == 0 && t.shed == 2 && t.active == 1,
       "shed=2 in the tick line, 1 active (shed %lld active %lld)",
       (long long)t.shed, (long long)t.active);
    totals s = sum_ticks();
    ok(s.in == 8 && s.miss == 3 && s.fill == 1 && s.out == 4,
       "8 in: 4 real, 1 FILL, 3 misses (a's 2 unanswered, c's stepped one) "
       "(%lld %lld %lld %lld)",
       (long long)s.in, (long long)s.out, (long long)s.fill, (long long)s.miss);
    ok(s.in == s.out + s.fill + s.miss, "every input one output or one counted miss");
}


/* Sessions by id (issue 40: a table, not a search): hundreds opened,
 * every third closed, more opened; each live id still names its session,
 * no closed one does, no id is handed out twice. */
static void test_lookup(void)
{
    rig_opts ro = { .catch_up = 1 };
    ok(rig_open(ro, MS) == 0, "engine: %s", err);
    enum { N = 600 };
    static uint32_t id[N + N / 3];
    static int closed[N + N / 3];
    int bad = 0;
    for (int i = 0; i < N; i++) {
        id[i] = mt_engine_session_new(eng);
        closed[i] = 0;
        bad += id[i] == 0;
    }
    for (int i = 0; i < N; i += 3) {
        mt_engine_close(eng, id[i]);
        closed[i] = 1;
    }
    for (int i = N; i < N + N / 3; i++) {
        id[i] = mt_engine_session_new(eng);
        closed[i] = 0;
        bad += id[i] == 0;
    }
    int wrong = 0, dup = 0;
    for (int i = 0; i < N + N / 3; i++) {
        mt_sess_status st;
        int known = mt_engine_status(eng, id[i], &st) == 0 && st.known;
        wrong += known == closed[i];
        for (int j = 0; j < i; j++)
            dup += id[j] == id[i];
    }
    ok(bad == 0 && dup == 0, "%d sessions, every id distinct", N + N / 3);
    is_int(wrong, 0, "each live id found, no closed one");
    int active = -1, pending = -1;
    char why[200];
    mt_engine_admit(eng, id[1], why, sizeof why);
    mt_engine_admit(eng, id[2], why, sizeof why);
    mt_engine_close(eng, id[2]);
    mt_engine_reject(eng, id[4], "no", 0);
    mt_engine_counts(eng, &active, &pending);
    ok(active == 1 && pending == N - 3,
       "the counts kept by the state changes: 1 active, %d pending (%d %d)",
       N - 3, active, pending);
}

/* The ready list (issue 40): after a tick, the sessions with output are
 * handed back (their user pointers), each once; a session without new
 * output is not; a closed one never is. */
static void test_ready(void)
{
    rig_opts ro = { .catch_up = 1 };
    ok(rig_open(ro, MS) == 0, "engine: %s", err);
    int users[4];
    uint32_t id[4];
    void *got[8];
    char why[200];
    for (int k = 0; k < 4; k++) {
        id[k] = mt_engine_session_new_for(eng, &users[k]);
        mt_engine_admit(eng, id[k], why, sizeof why);
    }
    int n = mt_engine_take_ready(eng, got, 8);
    int each = n == 4;
    for (int k = 0; k < 4; k++) {
        int seen = 0;
        for (int i = 0; i < n; i++)
            seen += got[i] == &users[k];
        each &= seen == 1;
    }
    ok(each, "the ACCEPTs: each session once (%d)", n);
    is_int(mt_engine_take_ready(eng, got, 8), 0, "taken: the list is empty");
    send_frame(id[1], 1);
    send_frame(id[3], 1);
    send_frame(id[2], 1);
    mt_engine_close(eng, id[2]);
    tick(0);
    n = mt_engine_take_ready(eng, got, 1);
    void *first = got[0];
    int n2 = mt_engine_take_ready(eng, got, 8);
    ok(n == 1 && n2 == 1 && ((first == &users[1] && got[0] == &users[3]) ||
                              (first == &users[3] && got[0] == &users[1])),
       "after the tick: the two sessions with output, in calls of cap 1, and not "
       "the closed one (%d, %d)", n, n2);
    is_int(mt_engine_take_ready(eng, got, 8), 0, "nothing else");
}

/* The output queue (issue 40) starts small and grows to out_queue frames;
 * what it holds survives the growth, and past out_queue the session
 * overflows (the client does not read). */
static void test_out_queue(void)
{
    rig_opts ro = { .catch_up = 0, .out_queue = 12 };
    ok(rig_open(ro, MS) == 0, "engine: %s", err);
    uint32_t a = open_session(0);
    for (uint32_t f = 1; f <= 10; f++) {
        send_frame(a, f);
        tick((int64_t)f);
    }
    mt_sess_status st;
    mt_engine_status(eng, a, &st);
    ok(!st.overflow && st.out_bytes > 0, "ten frames queued, past the first "
       "allocation, no overflow");
    drain_output(0, a);
    ok(S[0].real == 10 && S[0].wrong == 0 && S[0].last_seq == 10,
       "all ten come out, each its own echo (%d real, %d wrong)", S[0].real,
       S[0].wrong);
    for (uint32_t f = 11; f <= 40; f++) {
        send_frame(a, f);
        tick((int64_t)f);
    }
    mt_engine_status(eng, a, &st);
    ok(st.overflow, "thirty more, none taken: the queue overflows");
}

/* FILL deadlines in one FIFO (issue 40): an input the model consumed in
 * time, or whose session was closed, gets no FILL, whatever its place in
 * the FIFO; the next deadline is the oldest input still unanswered. */
static void test_fill_fifo(void)
{
    rig_opts ro = { .fill = 1, .catch_up = 1 };
    ok(rig_open(ro, MS) == 0, "engine with FILL: %s", err);
    uint32_t a = open_session(0), b = open_session(1), c = open_session(2);
    send_frame(a, 1);                 /* T0: due at T0 + 160 ms */
    F.now = T0 + 10 * MS;
    send_frame(b, 1);                 /* due at T0 + 170 ms */
    F.now = T0 + 20 * MS;
    send_frame(c, 1);                 /* due at T0 + 180 ms */
    tick(0);                          /* all three answered in time */
    F.now = T0 + 30 * MS;
    send_frame(a, 2);                 /* due at T0 + 190 ms */
    F.now = T0 + 40 * MS;
    send_frame(b, 2);                 /* due at T0 + 200 ms: b closes first */
    mt_engine_close(eng, b);
    F.now = T0 + 50 * MS;
    send_frame(c, 2);                 /* due at T0 + 210 ms */
    uint64_t next = mt_engine_fill_due(eng, T0 + 60 * MS);
    is_int((long long)(next - T0), (long long)(190 * MS),
           "the next deadline skips the three answered: a's second, 190 ms");
    next = mt_engine_fill_due(eng, T0 + 205 * MS);
    is_int((long long)(next - T0), (long long)(210 * MS),
           "at 205 ms: a's FILL sent, b's input gone with b, next is c's at 210 ms");
    next = mt_engine_fill_due(eng, T0 + 215 * MS);
    drain_output(0, a);
    drain_output(2, c);
    ok(S[0].fill == 1 && S[2].fill == 1 && S[0].real == 1 && S[2].real == 1 &&
       next == 0, "one FILL each for a and c, after their real first answers; none left");
}

/* Output taken by trading buffers (issue 40): a tick's frame comes out
 * in the session's own buffer, which the caller then owns, and the
 * caller's empty one goes back, so two buffers take turns and no byte is
 * copied; past the limit the backlog comes out copied, limit bytes at a
 * time, in order. */
static void test_take_swap(void)
{
    rig_opts ro = { .catch_up = 0, .out_queue = 12 };
    ok(rig_open(ro, MS) == 0, "engine: %s", err);
    uint32_t a = open_session(0);
    mt_outbuf b = {0};
    mt_sess_status st;
    uint8_t *seen[3] = {0};
    size_t got[3] = {0};
    for (uint32_t f = 1; f <= 3; f++) {
        send_frame(a, f);
        tick((int64_t)f);
        got[f - 1] = mt_engine_take_swap(eng, a, &b, 16384, &st);
        seen[f - 1] = b.p;
        feed_stream(0, b.p + b.off, b.len);
    }
    ok(got[0] > 0 && got[0] == got[1] && got[1] == got[2] && st.known && st.out_bytes == 0,
       "each tick's frame taken whole (%zu, %zu, %zu bytes), nothing left", got[0],
       got[1], got[2]);
    ok(seen[0] && seen[1] && seen[0] != seen[1] && seen[2] == seen[0],
       "the session's buffer and ours take turns (no copy)");
    ok(S[0].real == 3 && S[0].wrong == 0 && S[0].last_seq == 3,
       "three frames, each its own echo (%d real, %d wrong)", S[0].real, S[0].wrong);
    for (uint32_t f = 4; f <= 9; f++) {
        send_frame(a, f);
        tick((int64_t)f);
    }
    size_t limit = got[0] * 2 + 100, n, total = 0, takes = 0, max = 0;
    while ((n = mt_engine_take_swap(eng, a, &b, limit, &st)) > 0) {
        feed_stream(0, b.p + b.off, n);
        total += n;
        takes++;
        if (n > max)
            max = n;
    }
    ok(total == 6 * got[0] && max == limit && takes == 3,
       "a backlog of six frames comes out %zu bytes at most a take (%zu bytes "
       "in %zu takes)", limit, total, takes);
    ok(S[0].real == 9 && S[0].wrong == 0 && S[0].last_seq == 9,
       "all nine in order (%d real, last %u)", S[0].real, S[0].last_seq);
    mt_engine_close(eng, a);
    is_int((long long)mt_engine_take_swap(eng, a, &b, limit, &st), 0,
           "a closed session: nothing taken");
    ok(!st.known, "and the status says unknown");
    free(b.p);
}

int main(void)
{
    if (mt_model_load("synthetic:tiny", 0, &model, err, sizeof err)) {
        printf("# %s\n", err);
        tap_skip_all("no synthetic model");
    }
    fs = model->cfg.frame_samples;
    test_deadlines();
    test_fill();
    test_catch_up();
    test_catch_up_borrow();
    test_catch_up_answers_out();
    test_preempt_recompute();
    test_stall();
    test_counters();
    test_drain();
    test_step_failure();
    test_close_in_flight();
    test_published_limit();
    test_shed();
    test_take_swap();
    test_lookup();
    test_ready();
    test_out_queue();
    test_fill_fifo();
    rig_close();
    mt_model_free(model);
    return tap_done();
}
