/* test_records.c: the admission records (src/wire/admission.c): request and
 * verdict lines round-trip through writer and strict reader, control lines
 * too; malformed lines of every kind are refused with a message naming the
 * line and the key or word; the defaults of absent optional keys. And
 * mt-replay's records (src/wire/replay_rec.c): each round-trips, and a
 * missing, malformed or overlong key is refused. */
#include "wire/admission.h"
#include "wire/replay_rec.h"
#include "tap.h"

#include <stdint.h>
#include <string.h>

static mt_latline ll;   /* ~5 KiB: keep off the stack */
static char err[256];

static int parse_ll(const char *s, long lineno)
{
    err[0] = '\0';
    return mt_latline_parse(s, strlen(s), lineno, &ll, err, sizeof err);
}

static int request(const char *s, mt_request_rec *r)
{
    if (parse_ll(s, 7) != 0)
        return -2;
    return mt_request_from_line(&ll, 7, r, err, sizeof err);
}

static int verdict(const char *s, mt_verdict_rec *v)
{
    if (parse_ll(s, 9) != 0)
        return -2;
    return mt_verdict_from_line(&ll, 9, v, err, sizeof err);
}

static int control(const char *s, mt_control *c)
{
    err[0] = '\0';
    return mt_control_parse(s, strlen(s), c, err, sizeof err);
}

static void test_request_round_trip(void)
{
    mt_request_rec a = {
        .session = 4294967295u, .t = 12.345, .uid = 1000, .pid = 4242,
        .rate = 24000, .frame_samples = 1920, .kv_bound = 278528,
        .active = 3, .pending = 1,
    };
    strcpy(a.client_model, "synthetic:tiny \"x\"");
    char buf[1024];
    long n = mt_request_format(&a, buf, sizeof buf);
    ok(n > 0 && (size_t)n == strlen(buf), "request writer returns its length");
    is_str(buf, "request session=4294967295 t=12.345 uid=1000 pid=4242 rate=24000 "
           "frame_samples=1920 client_model=\"synthetic:tiny \\\"x\\\"\" "
           "kv_bound=278528 active=3 pending=1", "request line as mt-serve writes it");
    mt_request_rec b;
    memset(&b, 0xff, sizeof b);
    is_int(request(buf, &b), 0, "reader reads it back");
    ok(b.session == a.session && b.t == a.t && b.uid == a.uid && b.pid == a.pid &&
       b.rate == a.rate && b.frame_samples == a.frame_samples &&
       b.kv_bound == a.kv_bound && b.active == a.active && b.pending == a.pending &&
       !strcmp(b.client_model, a.client_model), "every field survives");
    ok(mt_request_format(&a, buf, 40) < 0, "too small a buffer: -1");
    a.session = 0;
    ok(mt_request_format(&a, buf, sizeof buf) < 0, "session 0 is not written");
}

static void test_request_defaults_and_errors(void)
{
    mt_request_rec r;
    is_int(request("request session=5", &r), 0, "only session: accepted");
    ok(r.session == 5 && r.t == -1 && r.uid == -1 && r.pid == -1 && r.rate == 0 &&
       r.active == 0 && r.client_model[0] == '\0', "absent keys take their defaults");
    is_int(request("request session=6 t=0.5 future_key=x", &r), 0,
           "unknown keys are ignored");
    mt_request_rec keep = r;
    static const struct { const char *line, *want; } bad[] = {
        {"request uid=3", "line 7: key 'session': missing"},
        {"request session=0", "line 7: key 'session': not a session id: '0'"},
        {"request session=4294967296", "key 'session': not a session id"},
        {"request session=-2", "key 'session'"},
        {"request session=x1", "key 'session'"},
        {"request session=3 t=oops", "line 7: key 't': not a time in seconds"},
        {"request session=3 t=-1", "key 't'"},
        {"request session=3 t=nan", "key 't'"},
        {"request session=3 active=-1", "key 'active': not a count"},
        {"request session=3 rate=4294967296", "key 'rate'"},
        {"request session=3 pid=1.5", "key 'pid': not an integer"},
        {"request session=3 client_model=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "key 'client_model': longer than 63"},
        {"admit session=3 verdict=accept", "key 'request': not a request record "
         "(first key is 'admit')"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = keep;
        int rc = request(bad[i].line, &r);
        ok(rc == -1 && strstr(err, bad[i].want) != NULL &&
           !memcmp(&r, &keep, sizeof r), "refused, record untouched: %s (%s)",
           bad[i].line, err);
    }
}

static void test_verdict(void)
{
    char buf[1024];
    mt_verdict_rec a = {.session = 17, .t = 3.25, .accept = 0};
    strcpy(a.reason, "server full (--max-sessions 2)");
    ok(mt_verdict_format(&a, buf, sizeof buf) > 0, "reject verdict written");
    is_str(buf, "admit session=17 t=3.250 verdict=reject "
           "reason=\"server full (--max-sessions 2)\"", "reject line");
    mt_verdict_rec b;
    is_int(verdict(buf, &b), 0, "read back");
    ok(b.session == 17 && b.t == 3.25 && !b.accept &&
       !strcmp(b.reason, a.reason), "fields survive");
    a.accept = 1;
    ok(mt_verdict_format(&a, buf, sizeof buf) > 0, "accept verdict written");
    is_str(buf, "admit session=17 t=3.250 verdict=accept", "accept line has no reason");
    is_int(verdict(buf, &b), 0, "read back");
    ok(b.accept && b.reason[0] == '\0', "accept, no reason");
    is_int(verdict("admit session=2 verdict=reject", &b), 0, "no t, no reason: fine");
    ok(b.t == -1 && !b.accept, "t defaults to -1");
    ok(mt_verdict_format(&b, buf, sizeof buf) > 0, "written again");
    is_str(buf, "admit session=2 verdict=reject reason=\"\"", "an unknown t is left out, "
           "so the line reads back (found by fuzz_control)");
    is_int(verdict(buf, &b), 0, "and it does");

    static const struct { const char *line, *want; } bad[] = {
        {"admit session=2", "line 9: key 'verdict': missing"},
        {"admit session=2 verdict=maybe", "key 'verdict': not accept or reject"},
        {"admit verdict=accept", "key 'session': missing"},
        {"admit session=2 verdict=accept reason=x", "key 'reason': on an accept"},
        {"request session=2 verdict=accept", "not an admit record"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = verdict(bad[i].line, &b);
        ok(rc == -1 && strstr(err, bad[i].want) != NULL, "refused: %s (%s)",
           bad[i].line, err);
    }
    char longr[400] = "admit session=2 verdict=reject reason=";
    memset(longr + strlen(longr), 'r', 256);
    ok(verdict(longr, &b) == -1 && strstr(err, "longer than 255"),
       "a reason over 255 bytes is refused (%s)", err);
}

static void test_control_round_trip(void)
{
    char buf[MT_CONTROL_MAX_LINE + 1];
    mt_control c = {.kind = MT_CONTROL_ACCEPT, .session = 12};
    ok(mt_control_format(&c, buf, sizeof buf) > 0, "accept written");
    is_str(buf, "accept 12", "accept line");
    c = (mt_control){.kind = MT_CONTROL_REJECT, .session = 4294967295u};
    strcpy(c.reason, "  at limit 6 (signal 70.1 ms)\t ");
    ok(mt_control_format(&c, buf, sizeof buf) > 0, "reject written");
    is_str(buf, "reject 4294967295 at limit 6 (signal 70.1 ms)", "reject line, blanks trimmed");
    mt_control d;
    is_int(control(buf, &d), 0, "read back");
    ok(d.kind == MT_CONTROL_REJECT && d.session == 4294967295u &&
       !strcmp(d.reason, "at limit 6 (signal 70.1 ms)"), "fields survive");
    c = (mt_control){.kind = MT_CONTROL_REJECT, .session = 3};
    ok(mt_control_format(&c, buf, sizeof buf) > 0 && !strcmp(buf, "reject 3"),
       "reject without a reason: 'reject 3'");
    strcpy(c.reason, "a\nb\x7f");
    ok(mt_control_format(&c, buf, sizeof buf) > 0 && !strcmp(buf, "reject 3 a?b?"),
       "control bytes in a reason written as '?' (%s)", buf);
    is_int(control(buf, &d), 0, "and that reads back");
    c = (mt_control){.kind = MT_CONTROL_LIMIT, .limit = 9};
    ok(mt_control_format(&c, buf, sizeof buf) > 0 && !strcmp(buf, "limit 9"), "limit line");
    is_int(control("limit 9\n", &d), 0, "limit read");
    ok(d.kind == MT_CONTROL_LIMIT && d.limit == 9, "limit 9");
    /* issue 24: shed, written by mt-admit --shed, read by mt-serve */
    c = (mt_control){.kind = MT_CONTROL_SHED, .session = 41};
    strcpy(c.reason, " shed: late 3.2 s over 80 ms (newest first) ");
    ok(mt_control_format(&c, buf, sizeof buf) > 0 &&
       !strcmp(buf, "shed 41 shed: late 3.2 s over 80 ms (newest first)"),
       "shed line, blanks trimmed (%s)", buf);
    is_int(control(buf, &d), 0, "shed read back");
    ok(d.kind == MT_CONTROL_SHED && d.session == 41 &&
       !strcmp(d.reason, "shed: late 3.2 s over 80 ms (newest first)"), "shed 41 and its reason");
    c = (mt_control){.kind = MT_CONTROL_SHED, .session = 2};
    ok(mt_control_format(&c, buf, sizeof buf) > 0 && !strcmp(buf, "shed 2"),
       "shed without a reason: 'shed 2'");
    ok(mt_control_format(&(mt_control){.kind = MT_CONTROL_SHED}, buf, sizeof buf) < 0,
       "shed of session 0 is not written");
    ok(mt_control_format(&(mt_control){.kind = MT_CONTROL_ACCEPT}, buf, sizeof buf) < 0,
       "session 0 is not written");
    ok(mt_control_format(&(mt_control){.kind = MT_CONTROL_LIMIT, .limit = -1}, buf,
                         sizeof buf) < 0, "negative limit is not written");
    ok(mt_control_format(&(mt_control){.kind = 99, .session = 1}, buf, sizeof buf) < 0,
       "unknown kind is not written");
    c = (mt_control){.kind = MT_CONTROL_ACCEPT, .session = 123};
    ok(mt_control_format(&c, buf, 9) < 0, "buffer one byte short: -1");
    ok(mt_control_format(&c, buf, 11) == 10, "exact size fits");
}

static void test_control_parse(void)
{
    mt_control c;
    is_int(control("accept 5\r\n", &c), 0, "CRLF accepted");
    ok(c.kind == MT_CONTROL_ACCEPT && c.session == 5, "accept 5");
    is_int(control("\t accept\t7  ", &c), 0, "tabs and spaces around words");
    ok(c.session == 7, "accept 7");
    is_int(control("reject 8", &c), 0, "reject without reason");
    ok(c.kind == MT_CONTROL_REJECT && c.reason[0] == '\0', "empty reason");
    is_int(control("reject 8   too\tmany  words ", &c), 0, "reason keeps inner blanks");
    is_str(c.reason, "too\tmany  words", "reason text");
    /* issue 19: a reason that is not UTF-8 must still make a REJECT frame */
    is_int(control("reject 9 bad \xff\xfe reason \xc3\xa9\xe2\x82", &c), 0,
           "a reason with bytes that are not UTF-8 is accepted");
    is_str(c.reason, "bad ?? reason \xc3\xa9??", "invalid bytes replaced, valid UTF-8 kept");
    {
        uint8_t fb[MT_FRAME_HEADER_SIZE + MT_REASON_MAX];
        mt_frame f = {.type = MT_FRAME_REJECT, .length = (uint32_t)strlen(c.reason),
                      .payload = (const uint8_t *)c.reason};
        ok(mt_frame_encode(&f, fb, sizeof fb) > 0, "the sanitised reason encodes as a REJECT frame");
    }
    {
        char buf[600];
        mt_control w = {.kind = MT_CONTROL_REJECT, .session = 4};
        strcpy(w.reason, "x\xc0\xafy");
        ok(mt_control_format(&w, buf, sizeof buf) > 0 && !strcmp(buf, "reject 4 x??y"),
           "the writer replaces bytes that are not UTF-8 (overlong '/'): %s", buf);
    }
    is_int(control("", &c), 0, "empty line");
    ok(c.kind == MT_CONTROL_NONE, "kind NONE");
    is_int(control("   \n", &c), 0, "blank line");
    ok(c.kind == MT_CONTROL_NONE, "kind NONE");

    mt_control keep = {.kind = MT_CONTROL_LIMIT, .limit = 77};
    static const struct { const char *line, *want; } bad[] = {
        {"admit 5", "unknown verb 'admit'"},
        {"ACCEPT 5", "unknown verb"},
        {"accept", "accept: want a session id"},
        {"accept 0", "accept: want a session id"},
        {"accept -5", "want a session id"},
        {"accept +5", "want a session id"},
        {"accept 4294967296", "want a session id"},
        {"accept 5x", "want a session id"},
        {"accept 5 now", "accept: unexpected words after the session id"},
        {"limit", "limit: want a count"},
        {"limit 2147483648", "limit: want a count"},
        {"limit 3 4", "limit: unexpected words"},
        {"reject 3 a\x01", "control byte 0x01"},
        {"reject x reason", "reject: want a session id"},
        {"shed", "shed: want a session id"},
        {"shed 0 late", "shed: want a session id"},
        {"shed -1", "shed: want a session id"},
        {"SHED 4", "unknown verb"},
        {"shedding 4", "unknown verb"},
        {"shed 4\x02 late", "control byte 0x02"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = keep;
        int rc = control(bad[i].line, &c);
        ok(rc == -1 && strstr(err, bad[i].want) != NULL && !memcmp(&c, &keep, sizeof c),
           "refused, untouched: '%s' (%s)", bad[i].line, err);
    }
    char nul[] = "accept 5\0 x";
    ok(mt_control_parse(nul, sizeof nul - 1, &c, err, sizeof err) == -1 &&
       strstr(err, "0x00"), "a NUL inside is refused (%s)", err);
    char big[MT_CONTROL_MAX_LINE + 8];
    memset(big, ' ', sizeof big);
    memcpy(big, "limit 1", 7);
    ok(mt_control_parse(big, MT_CONTROL_MAX_LINE, &c, err, sizeof err) == 0,
       "a line of exactly %d bytes is read", MT_CONTROL_MAX_LINE);
    ok(mt_control_parse(big, MT_CONTROL_MAX_LINE + 1, &c, err, sizeof err) == -1 &&
       strstr(err, "longer than"), "one byte more is refused (%s)", err);
    char longr[400] = "reject 4 ";
    memset(longr + strlen(longr), 'r', 256);
    ok(control(longr, &c) == -1 && strstr(err, "longer than 255"),
       "a reason over 255 bytes is refused (%s)", err);
    char longs[400] = "shed 4 ";
    memset(longs + strlen(longs), 's', 256);
    ok(control(longs, &c) == -1 && strstr(err, "shed: reason longer than 255"),
       "a shed reason over 255 bytes is refused (%s)", err);
    is_int(control("shed 7 late\t 2.5 s ", &c), 0, "shed with a reason");
    ok(c.kind == MT_CONTROL_SHED && c.session == 7 && !strcmp(c.reason, "late\t 2.5 s"),
       "shed 7, reason trimmed, inner blanks kept");
    ok(mt_control_parse(NULL, 3, &c, err, sizeof err) == -1, "NULL line with a length: -1");
}

/* Writes rec, reads the line back into out, and compares the bytes. */
#define ROUND_TRIP(T, rec) do {                                              \
        char b_[2048];                                                       \
        mt_##T out_;                                                         \
        memset(&out_, 0x5a, sizeof out_);                                    \
        long n_ = mt_##T##_format(&(rec), b_, sizeof b_);                    \
        int ok_ = n_ > 0 && parse_ll(b_, 3) == 0 &&                          \
                  mt_##T##_from_line(&ll, 3, &out_, err, sizeof err) == 0;   \
        tap_ok(ok_ && !memcmp(&out_, &(rec), sizeof out_),                   \
               #T " round-trips: %s %s", ok_ ? b_ : "", err);                \
    } while (0)

static void test_replay_round_trip(void)
{
    mt_replay_tick t;
    memset(&t, 0, sizeof t);
    t.replay_tick = 4; t.t = 5.125; t.active = 16; t.sent = 1000;
    t.received = 998; t.filled = 3; t.late = 1; t.p50_ms = 21.5;
    t.p99_ms = 40.25; t.max_ms = 61; t.server_p50_ms = 12.5;
    t.server_p99_ms = 30.75;
    ROUND_TRIP(replay_tick, t);

    mt_replay_frame f;
    memset(&f, 0, sizeof f);
    f.replay_frame = 77; f.session = 3; f.fill = 1; f.late = 1;
    f.rtt_ms = 90.5; f.server_ms = 80.25; f.queue_ms = 1.5; f.send_late_ms = 0.125;
    ROUND_TRIP(replay_frame, f);

    mt_replay_retry r;
    memset(&r, 0, sizeof r);
    r.replay_retry = 2; r.attempt = 3; r.in_s = 0.5;
    strcpy(r.reason, "warming up: admitting one at a time");
    ROUND_TRIP(replay_retry, r);

    mt_replay_session s;
    memset(&s, 0, sizeof s);
    s.replay_session = 9; strcpy(s.state, "done"); s.server_session = 12;
    strcpy(s.file, "dir with space/a \"b\".wav"); s.sent = 50; s.received = 50;
    s.filled = 1; s.late = 2; s.missing = 0; s.rtt_max_ms = 99.5;
    s.server_max_ms = 70.25;
    ROUND_TRIP(replay_session, s);
    strcpy(s.state, "shed");
    strcpy(s.reason, "shed: capacity fell to 3 sessions");
    ROUND_TRIP(replay_session, s);

    mt_replay_summary m;
    memset(&m, 0, sizeof m);
    m.replay_summary = 16; m.done = 13; m.rejected = 2; m.failed = 1;
    m.sent = 8000; m.received = 7990; m.filled = 5; m.late = 4;
    m.missing = 10; m.p50_ms = 20; m.p99_ms = 41; m.max_ms = 88;
    m.server_p50_ms = 10; m.server_p99_ms = 31; m.server_max_ms = 77;
    m.retries = 6; m.shed = 1;
    ROUND_TRIP(replay_summary, m);

    mt_replay_rejected j;
    memset(&j, 0, sizeof j);
    strcpy(j.replay_rejected, "shed"); j.session = 4;
    strcpy(j.reason, "ended by the server");
    ROUND_TRIP(replay_rejected, j);

    mt_replay_rate q;
    memset(&q, 0, sizeof q);
    q.replay_rate = 2; q.frames = 100; q.jitter_p50_ms = 0.05;
    q.jitter_p99_ms = 0.25; q.jitter_max_ms = 1.5; q.jitter_mean_ms = 0.075;
    ROUND_TRIP(replay_rate, q);

    mt_replay_mic c;
    memset(&c, 0, sizeof c);
    strcpy(c.device, "HDA Intel PCH: ALC892 Analog (hw:0,0)");
    c.device_rate = 48000; c.mic_frames = 25; c.mic_short = 1;
    c.mic_dropped = 2; c.spk_underruns = 3; c.spk_dropped = 4; c.real_time = 1;
    c.mic_dropped_s = 1.5;
    ROUND_TRIP(replay_mic, c);

    mt_replay_play p;
    memset(&p, 0, sizeof p);
    p.frames = 18; p.filled = 2; p.samples = 34560; p.server_p50_ms = 9.5;
    p.server_p99_ms = 19.25;
    ROUND_TRIP(replay_play, p);
}

static int replay_session(const char *s, mt_replay_session *r)
{
    if (parse_ll(s, 5) != 0)
        return -2;
    return mt_replay_session_from_line(&ll, 5, r, err, sizeof err);
}

static void test_replay_errors(void)
{
    mt_replay_session r;
    const char *good = "replay_session=1 state=done server_session=2 file=a.wav "
        "sent=3 received=3 filled=0 late=0 missing=0 rtt_max_ms=1.000 "
        "server_max_ms=0.500";
    tap_ok(replay_session(good, &r) == 0 && !strcmp(r.file, "a.wav") &&
           r.reason[0] == 0, "replay_session without a reason reads as \"\": %s", err);
    memset(&r, 0x77, sizeof r);
    mt_replay_session before = r;
    tap_ok(replay_session("replay_session=1 state=done server_session=2 file=a.wav "
                          "sent=3 received=3 filled=0 late=0 rtt_max_ms=1 "
                          "server_max_ms=0.5", &r) == -1 &&
           strstr(err, "line 5") && strstr(err, "'missing'") &&
           !memcmp(&r, &before, sizeof r),
           "a missing key is refused by name, the record untouched: %s", err);
    tap_ok(replay_session("replay_session=1 state=done server_session=2 file=a.wav "
                          "sent=-3 received=3 filled=0 late=0 missing=0 "
                          "rtt_max_ms=1 server_max_ms=0.5", &r) == -1 &&
           strstr(err, "'sent'"), "a negative count is refused: %s", err);
    tap_ok(replay_session("replay_session=1 state=done server_session=2 file=a.wav "
                          "sent=3 received=3 filled=0 late=0 missing=0 "
                          "rtt_max_ms=nan server_max_ms=0.5", &r) == -1 &&
           strstr(err, "'rtt_max_ms'"), "nan is refused: %s", err);
    tap_ok(replay_session("replay_tick=1 t=1", &r) == -1 &&
           strstr(err, "not a replay_session record"),
           "another record's line is refused: %s", err);
    char longline[600];
    snprintf(longline, sizeof longline, "%s reason=%0300d", good, 7);
    tap_ok(replay_session(longline, &r) == -1 && strstr(err, "'reason'") &&
           strstr(err, "too long"), "an overlong string is refused, not cut: %s", err);
    mt_replay_rate q;
    tap_ok(parse_ll("replay_rate=1 frames=3 jitter_p50_ms=1 jitter_p99_ms=2 "
                    "jitter_max_ms=3", 1) == 0 &&
           mt_replay_rate_from_line(&ll, 1, &q, err, sizeof err) == 0 &&
           q.jitter_mean_ms == 0, "replay_rate's jitter_mean_ms is optional: %s", err);
    char small[16];
    mt_replay_play p;
    memset(&p, 0, sizeof p);
    tap_ok(mt_replay_play_format(&p, small, sizeof small) == -1,
           "a record that does not fit its buffer is -1, not cut");
}

int main(void)
{
    test_replay_round_trip();
    test_replay_errors();
    test_request_round_trip();
    test_request_defaults_and_errors();
    test_verdict();
    test_control_round_trip();
    test_control_parse();
    return tap_done();
}
