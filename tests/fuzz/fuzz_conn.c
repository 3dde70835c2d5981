/* fuzz_conn.c: libFuzzer harness for one connection of mt-serve: the
 * protocol side of a connection (src/serve/proto.c, what server.c does
 * with the bytes it reads) over the real tick engine, on a fake backend
 * that echoes its input and a clock of the harness's own: no socket, no
 * thread, no wall time.
 *
 * Input: byte 0 picks the server's configuration (controlled admission,
 * draining, a full server, FILL, a short input queue, a slow step, a TCP
 * connection to a server with a token), byte 1
 * seeds the schedule (chunk sizes, clock steps at about a client's pace
 * with a few pauses, the controller's answers) and with its top bit picks
 * the frame size the server serves (below), the rest is the client's byte
 * stream, fed in chunks while ticks run as the server would run them. Its
 * end is the end of the connection, taken as --stdio takes EOF (an
 * implicit END; a cut frame a counted miss).
 *
 * Frame size: with byte 1's top bit clear the server's model has 16-sample
 * frames (an AUDIO frame is 88 bytes), set it has synthetic:tiny's own
 * 1920 (3,896 bytes). The parser and the engine do the same for either
 * (only the payload length differs), but a session of a dozen frames is
 * 1 kB instead of 47 kB: the fuzzer reaches queue overflow, FILL and a
 * slow step in inputs a hundredth the size, and runs them that much more
 * often. The fake backend never reads the model's weights, so the smaller
 * frame is only the configuration's number.
 *
 * Invariants (abort on violation): the client's output stream decodes
 * frame by frame with nothing left over; it starts with ACCEPT, REJECT or
 * ERROR and nothing follows END, REJECT or ERROR; a session the server
 * ended answers every input it took: the tick records add up (in = out +
 * fill + miss) and the client got exactly `out` real and `fill` FILL
 * frames; the connection's state stays consistent (pending only when
 * controlled and before a decision, closing only when no longer reading);
 * with a token, a HELLO without the right one gets REJECT (late, after the
 * per-address wait) and no session.
 * Leaks are LeakSanitizer's to find. */
#include "decode/backend.h"
#include "decode/decoder.h"
#include "model/model.h"
#include "serve/engine.h"
#include "serve/proto.h"
#include "wire/latline.h"
#include "fake_backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS     1000000ull
#define T0     (1000ull * 1000 * MS)
#define PERIOD (80 * MS)
#define TOKEN  "fuzz-token-0123456789"   /* the server's, with cfg 0x40 */

#define FS_SMALL 16
static mt_model *models[2];     /* [0]: FS_SMALL-sample frames, [1]: 1920 */
static mt_model *model;         /* this run's, one of models[] */
static int fs;                  /* samples per frame */
static uint64_t frame_bytes;    /* one AUDIO frame on the wire */
static uint64_t now_ns;         /* the one clock: engine and protocol */
static uint64_t step_ns;        /* cost of one batch step */

static uint64_t fake_clock(void *ctx) { (void)ctx; return now_ns; }

static int fake_step(mt_backend *be, int B, mt_kv_seq *const *seqs,
                     const mt_step_io *io, char *err, size_t errlen)
{
    (void)be; (void)seqs; (void)err; (void)errlen;
    now_ns += step_ns;
    memcpy(io->pcm_out, io->pcm_in, (size_t)B * (size_t)fs * 2);
    return 0;
}

static int fake_prefill(mt_backend *be, mt_kv_seq *seq, int n,
                        const mt_step_io *io, char *err, size_t errlen)
{
    (void)be; (void)seq; (void)io; (void)err; (void)errlen;
    now_ns += MS * (uint64_t)n;
    return 0;
}

static int fake_create(const mt_model *m, const mt_decoder_opts *o,
                       mt_backend **out, char *err, size_t errlen)
{
    (void)m; (void)o;
    return fake_backend_new(fake_step, fake_prefill, out, err, errlen);
}

/* ---- the machine stream: tick records summed as they come ------------- */

static struct totals { int64_t in, out, fill, miss; long ticks; } tot;
static mt_latline ll;
static int opened;              /* a session was admitted this run */

static void on_line(void *ctx, const char *line)
{
    (void)ctx;
    char err[256];
    mt_tick t;
    if (strncmp(line, "admit ", 6) == 0 && strstr(line, " verdict=accept"))
        opened = 1;    /* its inputs are counted: the records must catch up */
    if (strncmp(line, "tick=", 5) != 0)
        return;
    if (mt_latline_parse(line, strlen(line), 1, &ll, err, sizeof err) != 0 ||
        mt_tick_from_line(&ll, 1, &t, err, sizeof err) != 0)
        abort();   /* the engine wrote a tick line its own parser refuses */
    tot.in += t.in;
    tot.out += t.out;
    tot.fill += t.fill;
    tot.miss += t.miss;
    tot.ticks++;
}

/* ---- the client's side: what the connection sent back ------------------ */

static struct client {
    mt_frame_decoder d;
    int frames, verdict, ended;     /* ended: END, REJECT or ERROR seen */
    int64_t real, fill;
} cl;

static void client_bytes(const uint8_t *b, size_t n)
{
    size_t off = 0;
    while (off < n) {
        size_t used = 0;
        mt_frame f;
        int rc = mt_frame_decode(&cl.d, b + off, n - off, &used, &f);
        off += used;
        if (rc == MT_FRAME_NEED_MORE)
            break;
        if (rc != MT_FRAME_OK)
            abort();           /* the server wrote a frame that does not decode */
        if (cl.ended)
            abort();           /* something after END/REJECT/ERROR */
        if (cl.frames++ == 0 && f.type != MT_FRAME_ACCEPT &&
            f.type != MT_FRAME_REJECT && f.type != MT_FRAME_ERROR)
            abort();           /* no verdict first */
        switch (f.type) {
        case MT_FRAME_ACCEPT:
            if (cl.verdict++)
                abort();
            break;
        case MT_FRAME_REJECT:
        case MT_FRAME_ERROR:
        case MT_FRAME_END:
            cl.ended = 1;
            break;
        case MT_FRAME_AUDIO:
            if (f.length != (uint32_t)fs * 2)
                abort();
            if (f.flags & MT_FLAG_FILL)
                cl.fill++;
            else
                cl.real++;
            break;
        default:
            abort();
        }
    }
}

/* ---- the connection, as server.c drives it ------------------------------ */

static mt_proto_conn conn;
static mt_proto pr;
static mt_engine *eng;
static int auth_refused;        /* the token was refused (cfg 0x40) */
static int64_t next_tick;
static uint32_t rng;

static uint32_t rnd(void)        /* 24 bits */
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

/* A draw in [0, n): 48 bits, so spans of the clock in ns (a period is
 * 80e6, past rnd's 2^24) are reached whole. */
static uint64_t rnd_below(uint64_t n)
{
    uint64_t r = (uint64_t)rnd() << 24 | rnd();
    return r % n;
}

static void check_conn(void)
{
    if (conn.woff + conn.wlen > MT_PROTO_WBUF_CAP)
        abort();
    if (conn.pending && (!pr.controlled || !conn.id || conn.reading == 0))
        abort();
    if (conn.closing && conn.reading)
        abort();
    if (conn.auth_reject_at && (conn.id || conn.reading || !conn.is_tcp || !pr.token))
        abort();       /* a token refusal with a session, or still reading */
}

/* What conn_write does: direct bytes first, then the engine's output. */
static void take_output(void)
{
    if (conn.wlen) {
        client_bytes(conn.wbuf + conn.woff, conn.wlen);
        conn.woff = conn.wlen = 0;
    }
    static uint8_t buf[MT_PROTO_WBUF_CAP];
    size_t n;
    while (conn.id && (n = mt_engine_take(eng, conn.id, buf, sizeof buf)) > 0)
        client_bytes(buf, n);
}

/* Time moves on: ticks due run, FILL deadlines pass, the controller may
 * answer, an unanswered request times out.
 *
 * Ticks run while the connection has a session in the engine, and when
 * `idle` asks for them (the records' catch-up after a close). Without a
 * session (a HELLO still arriving, a token refusal's wait, a connection
 * the server has refused) a tick would step nothing and only write a line
 * of zeros, yet it cost as much as the rest of a short run: those slots
 * pass as an overrun's do (the engine takes any later tick number), and
 * the catch-up ticks keep the idle tick's line in every run that had a
 * session. */
static void advance(uint64_t dt, int idle)
{
    char err[256];
    uint64_t until = now_ns + dt;
    if (conn.auth_reject_at)
        auth_refused = 1;
    while (T0 + (uint64_t)next_tick * PERIOD <= until) {
        uint64_t at = T0 + (uint64_t)next_tick * PERIOD;
        if (!conn.id && !idle) {
            next_tick = (int64_t)((until - T0) / PERIOD) + 1;
            break;
        }
        if (now_ns < at)
            now_ns = at;
        if (mt_engine_tick(eng, next_tick, at, err, sizeof err) != 0)
            abort();   /* the fake backend never fails */
        /* as ticker.c: the next slot, or after an overrun the current one */
        int64_t cur = (int64_t)((now_ns - T0) / PERIOD);
        next_tick = cur > next_tick ? cur : next_tick + 1;
    }
    if (now_ns < until)
        now_ns = until;
    mt_engine_fill_due(eng, now_ns);
    mt_proto_auth_due(&pr, &conn, now_ns);
    if (conn.pending) {
        uint32_t r = rnd() % 4;
        if (now_ns >= conn.admit_deadline)
            mt_proto_reject(&pr, &conn, "admission timeout: no answer from the "
                            "controller", 0, now_ns);
        else if (r == 0)
            mt_proto_admit(&pr, &conn, now_ns);
        else if (r == 1)
            mt_proto_reject(&pr, &conn, "rejected \xff by the controller", (int)(r & 1), now_ns);
    }
    take_output();
    check_conn();
}

/* The clock's step after a chunk of n bytes: about a real client's pace
 * (a frame per 80 ms period), sometimes a pause of up to two ticks, at
 * most MAX_PAUSES of them in a run. A step per chunk regardless of its
 * size would make a long input cut into bytes a run of thousands of
 * ticks, each one a tick line formatted and parsed; a tick costs as much
 * as a few hundred bytes of input, so the pauses are few: enough for a
 * late client's FILL, an admission or token wait passing, not one per
 * dozen chunks of a long stream. */
#define MAX_PAUSES 4
static uint64_t chunk_time(size_t n, int *pauses)
{
    uint32_t r = rnd();
    if (r % 16 == 0 && *pauses < MAX_PAUSES) {
        ++*pauses;
        return rnd_below(2 * PERIOD);
    }
    return rnd_below(2 * (uint64_t)n * PERIOD / frame_bytes + 1);
}

/* The session has nothing more to send: the server would close it. */
static int finished(void)
{
    mt_sess_status st;
    if (conn.closing && !conn.id)
        return 1;
    return conn.id && mt_engine_status(eng, conn.id, &st) == 0 && st.ended &&
           st.out_bytes == 0;
}

/* The AUDIO inputs of a clean stream: a HELLO the server serves, then
 * well-formed AUDIO frames, then END or the end of input (a frame cut
 * short there counts: it is a counted input and miss). -1 when the
 * stream is anything else (the server may end it early). */
static mt_frame_decoder shadow;

static long clean_inputs(const uint8_t *data, size_t size)
{
    mt_frame_decoder_init(&shadow);
    size_t pos = 0;
    long n = 0;
    int hello = 0;
    for (;;) {
        size_t used = 0;
        mt_frame f;
        int rc = mt_frame_decode(&shadow, data + pos, size - pos, &used, &f);
        pos += used;
        if (rc == MT_FRAME_NEED_MORE) {
            int fin = mt_frame_decoder_finish(&shadow);
            if (!hello)
                return -1;
            return fin == MT_FERR_TRUNCATED ? n + 1 : fin == 0 ? n : -1;
        }
        if (rc != MT_FRAME_OK)
            return -1;
        if (!hello) {
            mt_hello h;
            if (f.type != MT_FRAME_HELLO || mt_hello_decode(f.payload, f.length, &h) != 0 ||
                h.sample_rate != (uint32_t)model->cfg.sample_rate ||
                h.frame_samples != (uint32_t)fs || h.channels != 1 ||
                h.encoding != MT_ENC_PCM_S16LE)
                return -1;
            if (pr.token && (h.token_len != strlen(TOKEN) ||
                             memcmp(h.token, TOKEN, h.token_len) != 0))
                return -1;
            hello = 1;
            continue;
        }
        if (f.type == MT_FRAME_END)
            return n;
        if (f.type != MT_FRAME_AUDIO || f.flags || f.length != (uint32_t)fs * 2)
            return -1;
        n++;
    }
}

/* 1 when the stream's first frame is a HELLO carrying TOKEN. */
static int hello_has_token(const uint8_t *data, size_t size)
{
    mt_frame_decoder_init(&shadow);
    size_t used = 0;
    mt_frame f;
    mt_hello h;
    return mt_frame_decode(&shadow, data, size, &used, &f) == MT_FRAME_OK &&
           f.type == MT_FRAME_HELLO && mt_hello_decode(f.payload, f.length, &h) == 0 &&
           h.token_len == strlen(TOKEN) && memcmp(h.token, TOKEN, h.token_len) == 0;
}

/* ASan's quarantine keeps the last 256 MB of freed memory out of reuse by
 * default. Each input here makes an engine and a session (about 135 kB),
 * so with it every run allocated on pages never touched before, and page
 * faults were the largest part of a run's time. 16 MB still holds the
 * frees of a hundred runs: a use after free within a run, or from one run
 * into the next, is caught as before. ASAN_OPTIONS overrides it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=16";
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    char err[256];
    for (int i = 0; i < 2; i++)
        if (mt_model_load("synthetic:tiny", 0, &models[i], err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_conn: %s\n", err);
            abort();
        }
    models[0]->cfg.frame_samples = FS_SMALL;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    if (size < 2)
        return 0;
    uint8_t cfg = data[0];
    int big = data[1] >> 7;
    rng = data[1] * 2654435761u + 1;
    model = models[big];
    fs = model->cfg.frame_samples;
    frame_bytes = MT_FRAME_HEADER_SIZE + 2 * (uint64_t)fs;
    data += 2;
    size -= 2;

    now_ns = T0;
    next_tick = 0;
    step_ns = (cfg & 0x80) ? 3 * PERIOD / 2 : 10 * MS;
    memset(&tot, 0, sizeof tot);
    memset(&cl, 0, sizeof cl);
    mt_frame_decoder_init(&cl.d);

    mt_decoder_opts d = {.device = MT_DEV_CPU, .max_batch = 4, .threads = 1};
    d.kv.policy = MT_KV_WINDOW;
    d.kv.sink = 4;
    d.kv.window = 28;
    d.kv.budget_bytes = 64 * MT_KV_BLOCK *
                        mt_decoder_position_bytes(&model->cfg, sizeof(float));
    /* one decoder per frame size for every run (its options never change):
     * the engine of each run frees its sessions' cache back to the pool */
    static mt_decoder *decs[2];
    if (!decs[big] &&
        mt_decoder_create_with(model, &d, fake_create, &decs[big], err, sizeof err) != 0)
        abort();
    mt_decoder *dec = decs[big];
    mt_engine_opts o;
    mt_engine_opts_default(&o);
    /* one connection here: an engine sized for the default thousand
     * sessions would spend each run on allocating and clearing its batch */
    o.max_sessions = 4;
    /* the harness takes the output after every step of its clock (a few
     * ticks at most): 16 frames are room enough, and a queue that size is
     * an ordinary allocation, not a mapping made and faulted in per run */
    o.out_queue = 16;
    o.frame_ns = PERIOD;
    o.deadline_ns = 2 * PERIOD;
    o.fill = (cfg & 0x08) != 0;
    o.in_queue = (cfg & 0x10) ? 2 : 16;
    o.drop_when_full = 1;
    o.line = on_line;
    o.clock = fake_clock;
    if (mt_engine_create(&o, dec, T0, &eng, err, sizeof err) != 0)
        abort();

    memset(&pr, 0, sizeof pr);
    pr.eng = eng;
    pr.controlled = cfg & 0x01;
    pr.draining = (cfg & 0x02) != 0;
    pr.max_sessions = (cfg & 0x04) ? 0 : 4;
    pr.admit_timeout_ns = 2 * PERIOD;
    pr.t0 = T0;
    pr.line = on_line;
    mt_proto_conn_init(&conn);
    conn.uid = 1000;
    conn.pid = 42;
    auth_refused = 0;
    opened = 0;
    if (cfg & 0x40) {
        pr.token = TOKEN;
        pr.token_len = strlen(TOKEN);
        conn.is_tcp = 1;
        snprintf(conn.peer, sizeof conn.peer, "127.0.0.1:%u", 40000u + cfg);
    }

    /* the stream, in chunks, while the server's clock runs */
    size_t pos = 0;
    int gone = 0, pauses = 0;
    while (pos < size && conn.reading) {
        size_t n = 1 + rnd() % ((cfg & 0x20) ? 7 : 400);
        if (n > size - pos)
            n = size - pos;
        mt_proto_input(&pr, &conn, data + pos, n, now_ns);
        pos += n;
        if (conn.auth_reject_at)
            auth_refused = 1;
        check_conn();
        advance(chunk_time(n, &pauses), 0);
        if (finished()) {
            gone = 1;
            break;
        }
    }

    /* end of input, as --stdio takes it */
    if (!gone && conn.reading) {
        int truncated = mt_frame_decoder_finish(&conn.dec) == MT_FERR_TRUNCATED;
        conn.reading = 0;
        if (conn.id && conn.pending) {
            mt_proto_reject(&pr, &conn, "input ended before the admission decision",
                            0, now_ns);
        } else if (conn.id) {
            if (truncated)
                mt_engine_count_lost_input(eng);
            mt_engine_input_end(eng, conn.id);
        }
    }
    /* a refused token: its REJECT comes after the wait (at most 8 s) */
    for (int i = 0; i < 200 && conn.auth_reject_at; i++)
        advance(PERIOD, 0);
    if (conn.auth_reject_at)
        abort();       /* the REJECT never came */
    /* the session runs out: every queued input answered, then END */
    for (int i = 0; i < 2000 && !finished() && conn.id; i++) {
        if (conn.pending)
            mt_proto_reject(&pr, &conn, "server draining", 0, now_ns);
        advance(PERIOD, 0);
    }
    take_output();
    int ended_by_server = conn.id && finished();
    if (conn.id && !finished())
        abort();       /* a session that never ends: the server would hold it */
    if (conn.id)
        mt_engine_close(eng, conn.id);
    advance(2 * PERIOD, opened);  /* the tick records catch up with the close */

    if (tot.in != tot.out + tot.fill + tot.miss)
        abort();       /* an input neither answered nor counted */
    if (ended_by_server && (cl.real != tot.out || cl.fill != tot.fill))
        abort();       /* outputs counted but not delivered, or the reverse */
    if (mt_frame_decoder_finish(&cl.d) != 0)
        abort();       /* a partial frame left on the client's side */
    if (conn.id && !cl.ended)
        abort();       /* the session ended without telling the client */
    if (auth_refused && (conn.id || cl.frames != 1 || !cl.ended || cl.verdict))
        abort();       /* a refused token: REJECT alone, no session */
    if (pr.token && cl.verdict && !hello_has_token(data, size))
        abort();       /* a session admitted without the token */
    if (pr.token && auth_refused && hello_has_token(data, size))
        abort();       /* the right token refused */
    /* a clean stream to an open, uncontrolled server: every AUDIO frame
     * sent is an input, and one output or one counted miss */
    long want = clean_inputs(data, size);
    if (want >= 0 && !pr.controlled && !pr.draining && pr.max_sessions > 0 &&
        (tot.in != want || cl.real + cl.fill + tot.miss != want))
        abort();

    mt_engine_free(eng);
    eng = NULL;
    return 0;
}
