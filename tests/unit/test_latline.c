/* test_latline.c: the latency-line writer, strict parser and tick record
 * (src/wire/latline.c) and the frame record. Round trips, every malformed case with its line number
 * and key in the message, forward compatibility with unknown keys, flags,
 * quoted values with escapes, typed getters. */
#include "wire/latline.h"
#include "tap.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mt_latline ll; /* ~5 KiB: keep off the stack */
static char err[256];

static int parse(const char *s, long lineno)
{
    err[0] = '\0';
    return mt_latline_parse(s, strlen(s), lineno, &ll, err, sizeof err);
}

static void test_writer_round_trip(void)
{
    char buf[512];
    mt_ll_writer w;
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_int(&w, "frame", 42);
    mt_ll_int(&w, "neg", -7);
    mt_ll_u64(&w, "big", UINT64_MAX);
    mt_ll_f(&w, "ms", 3.14159, 3);
    mt_ll_str(&w, "name", "plain");
    mt_ll_str(&w, "msg", "say \"hi\" = \\ok");
    mt_ll_str(&w, "empty", "");
    mt_ll_flag(&w, "fill");
    long n = mt_ll_end(&w);
    ok(n > 0 && (size_t)n == strlen(buf), "writer returns the length (%ld)", n);
    is_str(buf, "frame=42 neg=-7 big=18446744073709551615 ms=3.142 name=plain "
                "msg=\"say \\\"hi\\\" = \\\\ok\" empty=\"\" fill", "writer output");
    is_int(parse(buf, 1), 0, "parser reads what the writer wrote");
    is_int(ll.n, 8, "eight pairs");
    is_str(mt_latline_kind(&ll), "frame", "kind is the first key");
    is_str(mt_latline_get(&ll, "msg"), "say \"hi\" = \\ok", "escapes undone");
    is_str(mt_latline_get(&ll, "empty"), "", "empty quoted value");
    is_str(mt_latline_get(&ll, "fill"), "", "flag present with empty value");
    ok(mt_latline_get(&ll, "nope") == NULL, "absent key is NULL");
    int64_t i = 0;
    is_int(mt_latline_i64(&ll, "neg", &i), 0, "i64 getter");
    is_int(i, -7, "i64 value");
    double d = 0;
    is_int(mt_latline_f64(&ll, "ms", &d), 0, "f64 getter");
    is_near(d, 3.142, 1e-12, "f64 value");
    is_int(mt_latline_i64(&ll, "nope", &i), 1, "absent: 1");
    is_int(mt_latline_i64(&ll, "name", &i), -1, "not a number: -1");
    is_int(mt_latline_i64(&ll, "big", &i), -1, "int64 overflow: -1");

    /* Overflow of the caller's buffer: -1, never writes past cap. */
    char small[16];
    memset(small, 'Z', sizeof small);
    mt_ll_begin(&w, small, 10);
    mt_ll_int(&w, "tick", 123456);
    mt_ll_int(&w, "more", 1);
    is_int(mt_ll_end(&w), -1, "overflow reported");
    ok(small[10] == 'Z' && memchr(small, '\0', 10) != NULL,
       "nothing written past cap, still NUL-terminated");
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_int(&w, "Bad-Key", 1);
    is_int(mt_ll_end(&w), -1, "invalid key poisons the writer");
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_str(&w, "s", "a\nb");
    ok(mt_ll_end(&w) > 0 && parse(buf, 1) == 0 &&
       strcmp(mt_latline_get(&ll, "s"), "a?b") == 0,
       "control characters in a string value keep the line one line");
}

static void test_tick_round_trip(void)
{
    mt_tick t = {
        .tick = 1234, .t = 98.7654, .active = 16, .stepped = 15,
        .step_ms = 12.3456, .late_ms = 0.5, .p50_ms = 40.25, .p99_ms = 79.999,
        .in = 16, .out = 15, .fill = 1, .kv_used = 1073741824LL,
        .kv_free = 9000000000LL, .pending = 2, .admitted = 20, .rejected = 3,
        .preempted = 0, .naive_ms = 11.0, .naive_met = 100.0, .met = 93.75,
        .miss = 4,
    }, u;
    char buf[1024];
    long n = mt_tick_format(&t, buf, sizeof buf);
    ok(n > 0, "tick formats (%ld bytes)", n);
    tap_diag("%s", buf);
    like(buf, "tick=1234 t=98.765 active=16 stepped=15 step_ms=12.346 ", "tick keys and decimals");
    like(buf, " naive_met=100.0 met=93.8 miss=4", "percent keys with one decimal, miss last");
    is_int(parse(buf, 7), 0, "tick line parses");
    memset(&u, 0xAB, sizeof u);
    is_int(mt_tick_from_line(&ll, 7, &u, err, sizeof err), 0, "tick record reads");
    ok(u.tick == t.tick && u.active == t.active && u.stepped == t.stepped &&
       u.in == t.in && u.out == t.out && u.fill == t.fill &&
       u.kv_used == t.kv_used && u.kv_free == t.kv_free &&
       u.pending == t.pending && u.admitted == t.admitted &&
       u.rejected == t.rejected && u.preempted == t.preempted &&
       u.miss == t.miss,
       "integer fields equal");
    ok(fabs(u.t - t.t) < 5e-4 && fabs(u.step_ms - t.step_ms) < 5e-4 &&
       fabs(u.late_ms - t.late_ms) < 5e-4 && fabs(u.p50_ms - t.p50_ms) < 5e-4 &&
       fabs(u.p99_ms - t.p99_ms) < 5e-4 && fabs(u.naive_ms - t.naive_ms) < 5e-4 &&
       fabs(u.naive_met - t.naive_met) < 0.05 && fabs(u.met - t.met) < 0.05,
       "float fields equal to their printed precision");
    is_int(mt_tick_format(&t, buf, 50), -1, "tick format refuses a small buffer");

    /* miss: absent in lines of older servers (-1), never malformed */
    mt_tick old = t;
    old.miss = -1;
    mt_tick_format(&old, buf, sizeof buf);
    ok(strstr(buf, "miss") == NULL, "miss -1 is not written");
    parse(buf, 7);
    u.miss = 99;
    is_int(mt_tick_from_line(&ll, 7, &u, err, sizeof err), 0, "tick without miss reads");
    is_int(u.miss, -1, "absent miss reads as -1");
    const char *bad_miss[] = { " miss=x", " miss=-2", " miss=1.5", " miss=" };
    for (size_t k = 0; k < sizeof bad_miss / sizeof *bad_miss; k++) {
        mt_tick_format(&old, buf, sizeof buf);
        strcat(buf, bad_miss[k]);
        int rp = parse(buf, 7);
        int rt = rp == 0 ? mt_tick_from_line(&ll, 7, &u, err, sizeof err) : -1;
        ok(rt == -1 && strstr(err, "key 'miss'") != NULL, "bad%s refused: %s",
           bad_miss[k], err);
    }

    /* Forward compatibility: unknown keys and flags are tolerated. */
    mt_tick_format(&t, buf, sizeof buf);
    strcat(buf, " gpu_ms=3.2 future_thing=\"x y\" experimental");
    is_int(parse(buf, 8), 0, "line with unknown keys parses");
    is_int(mt_tick_from_line(&ll, 8, &u, err, sizeof err), 0,
           "tick record ignores unknown keys");
    is_str(mt_latline_get(&ll, "future_thing"), "x y", "unknown key kept");

    /* Missing and malformed typed values. */
    mt_tick_format(&t, buf, sizeof buf);
    char *p = strstr(buf, " fill=1");
    memmove(p, p + 7, strlen(p + 7) + 1);
    parse(buf, 9);
    is_int(mt_tick_from_line(&ll, 9, &u, err, sizeof err), -1, "missing key refused");
    is_str(err, "line 9: key 'fill': missing", "message names line and key");

    const char *bad_vals[][2] = {
        { "active=1x", "active" }, { "step_ms=nan", "step_ms" },
        { "p99_ms=inf", "p99_ms" }, { "late_ms=1e999", "late_ms" },
        { "kv_used=99999999999999999999", "kv_used" }, { "met=0x10", "met" },
        { "in=\" 5\"", "in" }, { "out=", "out" },
    };
    for (size_t k = 0; k < sizeof bad_vals / sizeof *bad_vals; k++) {
        mt_tick_format(&t, buf, sizeof buf);
        /* Replace the key's pair with the bad one. */
        char keyeq[40], line[1200];
        snprintf(keyeq, sizeof keyeq, " %s=", bad_vals[k][1]);
        char *q = strstr(buf, keyeq);
        char *e = strchr(q + 1, ' ');
        snprintf(line, sizeof line, "%.*s %s%s", (int)(q - buf), buf,
                 bad_vals[k][0], e ? e : "");
        int rp = parse(line, 10 + (long)k);
        int rt = rp == 0 ? mt_tick_from_line(&ll, 10 + (long)k, &u, err, sizeof err) : -1;
        char want[64];
        snprintf(want, sizeof want, "line %ld: key '%s':", 10 + (long)k, bad_vals[k][1]);
        ok(rt == -1 && strstr(err, want) != NULL, "bad value %s refused: %s",
           bad_vals[k][0], err);
    }
    parse("request session=3 want=1", 20);
    is_int(mt_tick_from_line(&ll, 20, &u, err, sizeof err), -1, "non-tick record refused");
    like(err, "line 20: key 'tick'", "non-tick message names the key");
}

static void test_malformed(void)
{
    static const struct { const char *line; const char *want; } cases[] = {
        { "tick=1 a=\"open", "line 3: key 'a': unterminated quote" },
        { "tick=1 a=\"open\\", "line 3: key 'a': unterminated quote" },
        { "tick=1 a=\"x\\n\"", "line 3: key 'a': bad escape" },
        { "tick=1 a=\"x\"y", "line 3: key 'a': 'y' after closing quote" },
        { "tick=1 a=b\"c", "line 3: key 'a': '\"' in unquoted value" },
        { "tick=1 a=b=c", "line 3: key 'a': '=' in unquoted value" },
        { "tick=1 a=", "line 3: key 'a': missing value" },
        { "tick=1 St=2", "line 3: column 8: expected a key, found 'S'" },
        { "tick=1 s-t=2", "line 3: key 's-': bad character '-' in key" },
        { "tick=1 =2", "line 3: column 8: expected a key, found '='" },
        { "tick=1 a=1 a=2", "line 3: key 'a': duplicate key" },
        { "tick=1\ta=1", "line 3: key 'tick': byte 0x09 in unquoted value" },
        { "tick=1 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=1",
          "line 3: key 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...': longer than 32" },
        { "tick=1 a=\"x\x01\"", "line 3: key 'a': control byte 0x01" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int rc = parse(cases[k].line, 3);
        if (!ok(rc == -1 && strncmp(err, cases[k].want, strlen(cases[k].want)) == 0,
                "malformed #%zu refused with the right message", k))
            tap_diag("  rc %d, err '%s', want prefix '%s'", rc, err, cases[k].want);
    }

    /* Embedded NUL: the length, not the NUL, ends the line. */
    const char nul[] = "tick=1 a=x\0y";
    int rc = mt_latline_parse(nul, sizeof nul - 1, 4, &ll, err, sizeof err);
    ok(rc == -1 && strstr(err, "line 4: key 'a': byte 0x00"), "embedded NUL refused: %s", err);
    const char nulkey[] = "tick=1 a\0=x";
    rc = mt_latline_parse(nulkey, sizeof nulkey - 1, 4, &ll, err, sizeof err);
    ok(rc == -1 && strstr(err, "line 4: key 'a?': bad character byte 0x00"),
       "NUL in a key refused: %s", err);

    /* Overlong line: an error, not a truncation. */
    static char longl[MT_LL_MAX_LINE + 64];
    memset(longl, 0, sizeof longl);
    strcpy(longl, "tick=1 pad=");
    memset(longl + strlen(longl), 'x', MT_LL_MAX_LINE + 1 - strlen(longl));
    rc = mt_latline_parse(longl, MT_LL_MAX_LINE + 1, 5, &ll, err, sizeof err);
    ok(rc == -1 && strstr(err, "line 5: longer than 4096"), "overlong line refused: %s", err);
    longl[MT_LL_MAX_LINE] = '\n'; /* exactly the limit plus its newline: fine */
    rc = mt_latline_parse(longl, MT_LL_MAX_LINE + 1, 5, &ll, err, sizeof err);
    ok(rc == 0 && strlen(mt_latline_get(&ll, "pad")) == MT_LL_MAX_LINE - 11,
       "a line of exactly %d bytes plus newline parses", MT_LL_MAX_LINE);

    /* Worst case for the record buffer: 64 one-letter flags ... */
    char many[400];
    size_t m = 0;
    for (int k = 0; k < MT_LL_MAX_PAIRS; k++)
        m += (size_t)snprintf(many + m, sizeof many - m, "%s%c%c", k ? " " : "",
                              'a' + k / 26, 'a' + k % 26);
    is_int(parse(many, 6), 0, "64 pairs are fine");
    is_int(ll.n, MT_LL_MAX_PAIRS, "64 pairs read");
    snprintf(many + m, sizeof many - m, " zz");
    is_int(parse(many, 6), -1, "65 pairs refused");
    like(err, "line 6: key 'zz': more than 64 pairs", "too-many message names key");

    /* Lenient where it costs nothing: spaces, CRLF, empty lines. */
    is_int(parse("  tick=1   x=2  \r\n", 7), 0, "extra spaces and CRLF");
    is_str(mt_latline_get(&ll, "x"), "2", "value after extra spaces");
    is_int(parse("", 8), 0, "empty line parses");
    is_str(mt_latline_kind(&ll), "", "empty line has kind \"\"");
    is_int(parse("request session=5 name=\"a b\" urgent", 9), 0, "request line with flag");
    is_str(mt_latline_kind(&ll), "request", "request kind");
    is_str(mt_latline_get(&ll, "name"), "a b", "quoted value with space");
    is_str(mt_latline_get(&ll, "urgent"), "", "trailing flag");
    is_int(parse("a=\"\\\"\\\\\"", 10), 0, "only escapes");
    is_str(mt_latline_get(&ll, "a"), "\"\\", "escapes unescaped");
    is_int(parse("a=caf\xc3\xa9", 11), 0, "UTF-8 in a bare value");

    int64_t i;
    double d;
    parse("a=+5 b=-0 c=1.5e3 d=.5 e=- f=1e g=9223372036854775807 h=-9223372036854775808", 12);
    ok(mt_latline_i64(&ll, "a", &i) == 0 && i == 5, "+5 is an integer");
    ok(mt_latline_i64(&ll, "b", &i) == 0 && i == 0, "-0 is an integer");
    ok(mt_latline_i64(&ll, "c", &i) == -1, "1.5e3 is not an integer");
    ok(mt_latline_f64(&ll, "c", &d) == 0 && d == 1500.0, "1.5e3 is a number");
    ok(mt_latline_f64(&ll, "d", &d) == 0 && d == 0.5, ".5 is a number");
    ok(mt_latline_f64(&ll, "e", &d) == -1 && mt_latline_i64(&ll, "e", &i) == -1,
       "lone '-' refused");
    ok(mt_latline_f64(&ll, "f", &d) == -1, "1e (trailing junk) refused");
    ok(mt_latline_i64(&ll, "g", &i) == 0 && i == INT64_MAX, "INT64_MAX");
    ok(mt_latline_i64(&ll, "h", &i) == 0 && i == INT64_MIN, "INT64_MIN");
}

static void test_frame_record(void)
{
    mt_frame_rec r = { .frame = 17, .session = 3, .t = 1.23456, .fill = 0,
                       .latency_ms = 41.0004, .wait_ms = 1.5, .compute_ms = 39.5,
                       .met = 1 }, u;
    char buf[512];
    ok(mt_frame_rec_format(&r, buf, sizeof buf) > 0, "frame record formats");
    is_str(buf, "frame=17 session=3 t=1.235 fill=0 latency_ms=41.000 "
           "wait_ms=1.500 compute_ms=39.500 met=1", "real frame: bytes of the man page");
    is_int(parse(buf, 4), 0, "frame line parses");
    memset(&u, 0xAB, sizeof u);
    is_int(mt_frame_rec_from_line(&ll, 4, &u, err, sizeof err), 0, "frame record reads");
    ok(u.frame == 17 && u.session == 3 && u.fill == 0 && u.met == 1 &&
       fabs(u.t - 1.235) < 1e-9 && fabs(u.wait_ms - 1.5) < 1e-9 &&
       fabs(u.compute_ms - 39.5) < 1e-9 && fabs(u.latency_ms - 41.0) < 1e-9,
       "frame fields equal to their printed precision");

    mt_frame_rec f = { .frame = 18, .session = 3, .t = 2, .fill = 1,
                       .latency_ms = 160, .wait_ms = 7, .compute_ms = 7, .met = 0 };
    mt_frame_rec_format(&f, buf, sizeof buf);
    is_str(buf, "frame=18 session=3 t=2.000 fill=1 latency_ms=160.000 met=0",
           "FILL frame: no wait_ms or compute_ms");
    parse(buf, 5);
    is_int(mt_frame_rec_from_line(&ll, 5, &u, err, sizeof err), 0, "FILL frame reads");
    ok(u.fill == 1 && u.wait_ms == 0 && u.compute_ms == 0, "FILL frame: no step times");
    is_int(mt_frame_rec_format(&r, buf, 20), -1, "frame format refuses a small buffer");

    const char *bad[][2] = {
        { "frame=17 session=3 t=1.0 fill=0 latency_ms=4.0 met=1", "line 6: key 'wait_ms': missing" },
        { "frame=17 session=3 t=1.0 fill=2 latency_ms=4.0 met=1", "line 6: key 'fill': 2 outside 0..1" },
        { "frame=17 session=x t=1.0 fill=1 latency_ms=4.0 met=1", "line 6: key 'session': not an integer" },
        { "frame=-1 session=3 t=1.0 fill=1 latency_ms=4.0 met=1", "line 6: key 'frame': -1 outside" },
        { "frame=17 session=3 t=1.0 fill=1 latency_ms=nan met=1", "line 6: key 'latency_ms': not a finite" },
        { "frame=17 session=3 t=1.0 fill=1 latency_ms=4.0", "line 6: key 'met': missing" },
        { "tick=17 session=3", "line 6: key 'frame': not a frame record (first key is 'tick')" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        int rp = parse(bad[k][0], 6);
        int rt = rp == 0 ? mt_frame_rec_from_line(&ll, 6, &u, err, sizeof err) : -1;
        ok(rt == -1 && strstr(err, bad[k][1]) != NULL, "refused: %s", err);
    }
}

/* Each tail appended to the good tick line `good` makes a line the tick
 * reader refuses (as line lineno), with an error that starts with want. */
typedef struct bad_tail {
    const char *tail, *want;
} bad_tail;

static void check_bad_tails(const char *good, long lineno, const bad_tail *bad, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        char line[1200];
        mt_tick u;
        snprintf(line, sizeof line, "%s%s", good, bad[k].tail);
        int rp = parse(line, lineno);
        int rt = rp == 0 ? mt_tick_from_line(&ll, lineno, &u, err, sizeof err) : 0;
        ok(rt == -1 && strncmp(err, bad[k].want, strlen(bad[k].want)) == 0,
           "refused: %s", err);
    }
}

/* issue 22: the device keys: device= on every tick, and on a simulated
 * device sim_pred_ms and sim_noise_ms, required by the reader there. */
static void test_tick_device(void)
{
    mt_tick t = { .tick = 5, .t = 0.4, .active = 200, .stepped = 200,
                  .step_ms = 5.123, .naive_met = 100, .met = 100,
                  .sim_pred_ms = 4.98, .sim_noise_ms = -0.081,
                  .miss = -1 /* no miss key: the device keys follow met */ }, u;
    char buf[1024];
    mt_tick_format(&t, buf, sizeof buf);
    ok(strstr(buf, "device") == NULL && strstr(buf, "sim_") == NULL,
       "no device: no device keys written");
    snprintf(t.device, sizeof t.device, "cpu");
    mt_tick_format(&t, buf, sizeof buf);
    like(buf, " met=100.0 device=cpu", "device=cpu after the stable keys");
    ok(strstr(buf, "sim_") == NULL, "a real device writes no sim keys");
    snprintf(t.device, sizeof t.device, "sim:h200-moshi7b");
    long n = mt_tick_format(&t, buf, sizeof buf);
    ok(n > 0, "simulated tick formats");
    like(buf, " device=sim:h200-moshi7b sim_pred_ms=4.980 sim_noise_ms=-0.081",
         "device and the prediction written");
    is_int(parse(buf, 30), 0, "parses");
    memset(&u, 0xAB, sizeof u);
    is_int(mt_tick_from_line(&ll, 30, &u, err, sizeof err), 0, "reads");
    is_str(u.device, "sim:h200-moshi7b", "device read back");
    ok(fabs(u.sim_pred_ms - 4.98) < 5e-4 && fabs(u.sim_noise_ms + 0.081) < 5e-4 &&
       u.stepped == 200, "prediction and noise read back");

    /* an old line without device reads with device "" */
    snprintf(buf, sizeof buf, "%s", "tick=1 t=0 active=0 stepped=0 step_ms=0 late_ms=0 p50_ms=0 "
             "p99_ms=0 in=0 out=0 fill=0 kv_used=0 kv_free=0 pending=0 admitted=0 "
             "rejected=0 preempted=0 naive_ms=0 naive_met=100 met=100");
    parse(buf, 31);
    memset(&u, 0xAB, sizeof u);
    ok(mt_tick_from_line(&ll, 31, &u, err, sizeof err) == 0 && u.device[0] == '\0' &&
       u.sim_pred_ms == 0, "a line without device: device \"\"");

    /* the reader's refusals */
    static const bad_tail bad[] = {
        { " device=sim:x", "line 32: key 'sim_pred_ms': missing (device sim:x is simulated)" },
        { " device=sim:x sim_pred_ms=1", "line 32: key 'sim_noise_ms': missing" },
        { " device=sim:x sim_pred_ms=nan sim_noise_ms=0", "line 32: key 'sim_pred_ms': not a finite number" },
        { " device=\"a b\"", "line 32: key 'device': not a device label" },
        { " device=CPU", "line 32: key 'device': not a device label" },
        { " device=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
          "line 32: key 'device': not a device label" },
    };
    check_bad_tails(buf, 32, bad, sizeof bad / sizeof *bad);
    snprintf(t.device, sizeof t.device, "Bad Label");
    is_int(mt_tick_format(&t, buf, sizeof buf), -1, "the writer refuses a bad label");
}

/* issue 23: limit= (the capacity published to HAProxy's agent-check),
 * after the device keys and shed=, written only when set, never negative. */
static void test_tick_limit(void)
{
    mt_tick t = { .tick = 9, .active = 3, .naive_met = 100, .met = 100,
                  .miss = 0, .sim_pred_ms = 1.5, .sim_noise_ms = 0.25 }, u;
    char buf[1024];
    snprintf(t.device, sizeof t.device, "sim:h200-llama1b");
    mt_tick_format(&t, buf, sizeof buf);
    ok(strstr(buf, "limit") == NULL, "no limit: no key written");
    t.has_limit = 1;
    t.limit = 0;
    mt_tick_format(&t, buf, sizeof buf);
    like(buf, " sim_noise_ms=0.250 shed=0 limit=0", "limit=0 is written, last: after the device keys and shed");
    t.limit = 12;
    ok(mt_tick_format(&t, buf, sizeof buf) > 0, "limit 12 formats");
    is_int(parse(buf, 40), 0, "parses");
    memset(&u, 0xAB, sizeof u);
    is_int(mt_tick_from_line(&ll, 40, &u, err, sizeof err), 0, "reads");
    ok(u.has_limit == 1 && u.limit == 12 && u.miss == 0 && u.active == 3,
       "limit read back with the rest");
    t.has_limit = 0;
    mt_tick_format(&t, buf, sizeof buf);
    parse(buf, 41);
    memset(&u, 0xAB, sizeof u);
    ok(mt_tick_from_line(&ll, 41, &u, err, sizeof err) == 0 && u.has_limit == 0,
       "a line without limit: has_limit 0");
    static const char *const bad[] = { " limit=-1", " limit=x", " limit=2.5", " limit=" };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char line[1200];
        snprintf(line, sizeof line, "%s%s", buf, bad[k]);
        int rp = parse(line, 42);
        int rt = rp == 0 ? mt_tick_from_line(&ll, 42, &u, err, sizeof err) : -1;
        ok(rt == -1 && (rp != 0 || strstr(err, "key 'limit'") != NULL),
           "refused:%s (%s)", bad[k], err);
    }
    t.has_limit = 1;
    t.limit = -3;
    is_int(mt_tick_format(&t, buf, sizeof buf), -1, "the writer refuses a negative limit");
}

/* One logfmt line to JSON: the exact text, and that jansson reads it back
 * as an object. */
static void json_is(const char *line, const char *want, const char *name)
{
    char out[3 * MT_LL_MAX_LINE + 16];
    err[0] = '\0';
    long n = mt_latline_to_json(line, strlen(line), out, sizeof out, err, sizeof err);
    ok(n >= 0 && strcmp(out, want) == 0, "json: %s", name);
    if (n < 0 || strcmp(out, want) != 0)
        tap_diag("got %s (err %s), want %s", n < 0 ? "-1" : out, err, want);
    json_error_t je;
    json_t *j = n >= 0 ? json_loads(out, 0, &je) : NULL;
    ok(j && json_is_object(j), "json: %s: jansson reads an object", name);
    json_decref(j);
}

static void test_json(void)
{
    json_is("tick=3 t=1.250 step_ms=0.500 active=-2",
            "{\"tick\":3,\"t\":1.250,\"step_ms\":0.500,\"active\":-2}",
            "numbers stay numbers, as written");
    json_is("admit session=7 verdict=reject reason=\"server at its limit (2)\"",
            "{\"admit\":true,\"session\":7,\"verdict\":\"reject\","
            "\"reason\":\"server at its limit (2)\"}",
            "a flag is true, a bare word and a quoted value are strings");
    json_is("k=\"say \\\"hi\\\" \\\\ x\"",
            "{\"k\":\"say \\\"hi\\\" \\\\ x\"}",
            "escapes: the quote and the backslash");
    json_is("q=\"12\" z=007 p=+1 d=1. e=1e5 h=0x10",
            "{\"q\":\"12\",\"z\":\"007\",\"p\":\"+1\",\"d\":\"1.\",\"e\":1e5,"
            "\"h\":\"0x10\"}",
            "a quoted number and bare values outside JSON's grammar are strings");
    json_is("x=nan y=inf z=-inf", "{\"x\":null,\"y\":null,\"z\":null}",
            "nan and infinities are null");
    json_is("", "{}", "an empty line is an empty object");
    json_is("tick=1 lines_dropped=4\n", "{\"tick\":1,\"lines_dropped\":4}",
            "the newline is not part of it");
    json_is("k=\"caf\xc3\xa9\"", "{\"k\":\"caf\xc3\xa9\"}", "UTF-8 kept");

    /* The writer's own output, whatever it quotes, converts to JSON that
     * holds the same string. */
    char line[256], out[1024];
    mt_ll_writer w;
    mt_ll_begin(&w, line, sizeof line);
    mt_ll_str(&w, "reason", "a \"b\" = c\\d");
    mt_ll_flag(&w, "retry");
    ok(mt_ll_end(&w) > 0, "json: writer line");
    long n = mt_latline_to_json(line, strlen(line), out, sizeof out, err, sizeof err);
    json_error_t je;
    json_t *j = n > 0 ? json_loads(out, 0, &je) : NULL;
    json_t *r = j ? json_object_get(j, "reason") : NULL;
    ok(r && json_is_string(r) && strcmp(json_string_value(r), "a \"b\" = c\\d") == 0,
       "json: a quoted value round-trips through the writer and jansson");
    ok(j && json_is_true(json_object_get(j, "retry")), "json: the flag is true");
    json_decref(j);

    err[0] = '\0';
    ok(mt_latline_to_json("k=\"open", 7, out, sizeof out, err, sizeof err) == -1 &&
       strstr(err, "unterminated quote"), "json: a malformed line is refused with the parser's message");
    ok(mt_latline_to_json("tick=1", 6, out, 8, err, sizeof err) == -1,
       "json: too small an output is refused, not truncated");
    ok(mt_latline_to_json("tick=1", 6, out, 11, err, sizeof err) == 10 &&
       strcmp(out, "{\"tick\":1}") == 0, "json: an output of exactly the size fits");
}

/* issue 24: shed= (sessions ended by a controller's shed line, total),
 * after the device keys; absent on older lines reads as -1. */
static void test_tick_shed(void)
{
    mt_tick t = { .tick = 9, .t = 12.5, .active = 40, .stepped = 40, .step_ms = 70.25,
                  .naive_met = 100, .met = 97.5, .miss = 3, .sim_pred_ms = 70,
                  .sim_noise_ms = 0.2, .shed = 6 }, u;
    snprintf(t.device, sizeof t.device, "sim:drop");
    char buf[1024];
    ok(mt_tick_format(&t, buf, sizeof buf) > 0, "tick with shed formats");
    like(buf, " miss=3 device=sim:drop sim_pred_ms=70.000 sim_noise_ms=0.200 shed=6",
         "shed= written after the device keys");
    is_int(parse(buf, 40), 0, "parses");
    memset(&u, 0xAB, sizeof u);
    is_int(mt_tick_from_line(&ll, 40, &u, err, sizeof err), 0, "reads");
    ok(u.shed == 6 && u.miss == 3 && u.active == 40 && !strcmp(u.device, "sim:drop"),
       "shed read back with the rest");
    t.shed = -1;
    mt_tick_format(&t, buf, sizeof buf);
    ok(strstr(buf, "shed") == NULL, "shed -1: not written");
    parse(buf, 41);
    ok(mt_tick_from_line(&ll, 41, &u, err, sizeof err) == 0 && u.shed == -1,
       "a line without shed reads as -1");
    static const bad_tail bad[] = {
        { " shed=-2", "line 42: key 'shed': negative" },
        { " shed=x", "line 42: key 'shed': not an integer" },
        { " shed=1.5", "line 42: key 'shed': not an integer" },
    };
    check_bad_tails(buf, 42, bad, sizeof bad / sizeof *bad);
}

/* The key index (every key found, none invented, a record that failed
 * part-way shows nothing of the line before) and the writer's integers
 * and keys, as printf and the key grammar have them. */
static void test_index_and_writer(void)
{
    /* 64 keys in 128 slots: some share a slot, and keys that are
     * prefixes of others ("k1", "k10") must stay apart */
    char line[1200], key[16];
    size_t m = 0;
    for (int k = 0; k < MT_LL_MAX_PAIRS; k++)
        m += (size_t)snprintf(line + m, sizeof line - m, "%sk%d=%d", k ? " " : "", k, 1000 + k);
    is_int(parse(line, 20), 0, "64 keys k0..k63 parse");
    int found = 0;
    for (int k = 0; k < MT_LL_MAX_PAIRS; k++) {
        char want[16];
        snprintf(key, sizeof key, "k%d", k);
        snprintf(want, sizeof want, "%d", 1000 + k);
        const char *v = mt_latline_get(&ll, key);
        found += v && !strcmp(v, want);
    }
    is_int(found, MT_LL_MAX_PAIRS, "each of the 64 keys gives its own value");
    int invented = 0;
    for (int k = MT_LL_MAX_PAIRS; k < 1000; k++) {
        snprintf(key, sizeof key, "k%d", k);
        invented += mt_latline_get(&ll, key) != NULL;
    }
    invented += mt_latline_get(&ll, "k") != NULL;
    invented += mt_latline_get(&ll, "") != NULL;
    invented += mt_latline_get(&ll, "k1=1001") != NULL;
    is_int(invented, 0, "no value for a key the line does not have");
    /* the 64th key repeating the first: found wherever the index put it */
    snprintf(line + m - strlen(" k63=1063"), sizeof line, " k0=9");
    is_int(parse(line, 21), -1, "a repeat among 64 keys refused");
    like(err, "line 21: key 'k0': duplicate key", "and named");

    is_int(parse("x=1 y=2", 22), 0, "x and y");
    is_int(parse("z=3 y=\"open", 23), -1, "a line failing after z");
    ok(mt_latline_get(&ll, "x") == NULL && mt_latline_get(&ll, "y") == NULL,
       "nothing of the line before shows through a failed one");
    is_str(mt_latline_get(&ll, "z"), "3", "the pair read before the error is kept");

    char buf[512], want[512];
    mt_ll_writer w;
    mt_ll_begin(&w, buf, sizeof buf);
    static const int64_t iv[] = { 0, -1, 1, 9, 10, -10, INT64_MAX, INT64_MIN, INT64_MIN + 1 };
    size_t o = 0;
    for (size_t k = 0; k < sizeof iv / sizeof *iv; k++) {
        mt_ll_int(&w, "i", iv[k]);
        o += (size_t)snprintf(want + o, sizeof want - o, "%si=%lld", k ? " " : "", (long long)iv[k]);
    }
    mt_ll_u64(&w, "u", UINT64_MAX);
    mt_ll_u64(&w, "u", 0);
    snprintf(want + o, sizeof want - o, " u=%llu u=0", (unsigned long long)UINT64_MAX);
    ok(mt_ll_end(&w) > 0, "integers written");
    is_str(buf, want, "integers as printf writes them");

    static const char *const badk[] = { "", "a-b", "A", "ab ", "abcdefghijklmnopqrstuvwxyz0123456" };
    int refused = 0;
    for (size_t k = 0; k < sizeof badk / sizeof *badk; k++) {
        mt_ll_begin(&w, buf, sizeof buf);
        mt_ll_int(&w, badk[k], 1);
        refused += mt_ll_end(&w) == -1;
    }
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_int(&w, NULL, 1);
    refused += mt_ll_end(&w) == -1;
    is_int(refused, 6, "keys outside [a-z0-9_]{1,32} (and NULL) poison the writer");
    mt_ll_begin(&w, buf, sizeof buf);
    mt_ll_int(&w, "abcdefghijklmnopqrstuvwxyz012345", 1);
    ok(mt_ll_end(&w) > 0, "a key of exactly %d bytes is written", MT_LL_KEY_MAX);
}

/* The typed readers against the C library: every value the reader takes is
 * strtoll's or strtod's own (bit for bit: the fixed-decimal values skip
 * strtod), and what they refuse stays refused. */
static void test_number_readers(void)
{
    char line[128];
    static const char *const ints[] = {
        "0", "-0", "+7", "9223372036854775807", "-9223372036854775808",
        "0009", "123456789012", "-42",
    };
    int same = 0;
    for (size_t k = 0; k < sizeof ints / sizeof *ints; k++) {
        int64_t v = 1;
        snprintf(line, sizeof line, "x=%s", ints[k]);
        same += parse(line, 1) == 0 && mt_latline_i64(&ll, "x", &v) == 0 &&
                v == strtoll(ints[k], NULL, 10);
    }
    is_int(same, (int)(sizeof ints / sizeof *ints), "integers read as strtoll reads them");
    static const char *const bad_ints[] = {
        "9223372036854775808", "-9223372036854775809", "99999999999999999999",
        "1.0", "0x10", "-", "+", "1-", "--1", "1e3",
    };
    int refused = 0;
    for (size_t k = 0; k < sizeof bad_ints / sizeof *bad_ints; k++) {
        int64_t v = 0;
        snprintf(line, sizeof line, "x=%s", bad_ints[k]);
        refused += parse(line, 2) == 0 && mt_latline_i64(&ll, "x", &v) == -1;
    }
    is_int(refused, (int)(sizeof bad_ints / sizeof *bad_ints),
           "out of range or not an integer: refused");

    /* doubles: the shapes the writer makes (fixed decimals), the ones
     * strtod alone reads (exponents, 16 digits and more, "5.", ".5"), and
     * a deterministic sweep of fixed-decimal values */
    static const char *const dbls[] = {
        "0", "-0.000", "0.001", "1.5", "+2.25", "12.345", "-7.000",
        "999999999999.999", "123456789012345", "1234567890123456",
        "0.1000000000000001", "5.", "-.5", "1e3", "2.5E-3", "00000000000000000001.5",
    };
    same = 0;
    for (size_t k = 0; k < sizeof dbls / sizeof *dbls; k++) {
        double v = 1, want = strtod(dbls[k], NULL);
        snprintf(line, sizeof line, "x=%s", dbls[k]);
        same += parse(line, 3) == 0 && mt_latline_f64(&ll, "x", &v) == 0 &&
                memcmp(&v, &want, sizeof v) == 0;
    }
    is_int(same, (int)(sizeof dbls / sizeof *dbls), "doubles read as strtod reads them, bit for bit");
    uint64_t r = 88172645463325252ull;
    int sweep = 0, n = 0;
    for (int i = 0; i < 20000; i++, n++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int dec = (int)(r % 6);
        double x = (double)(int64_t)(r >> 20) / 1e6 * ((r & 1) ? -1 : 1);
        char num[64];
        snprintf(num, sizeof num, "%.*f", dec, x);
        double v = 1, want = strtod(num, NULL);
        snprintf(line, sizeof line, "x=%s", num);
        sweep += parse(line, 4) == 0 && mt_latline_f64(&ll, "x", &v) == 0 &&
                 memcmp(&v, &want, sizeof v) == 0;
    }
    ok(sweep == n, "%d of %d fixed-decimal values (0 to 6 decimals) read as strtod reads them", sweep, n);
    static const char *const bad_dbls[] = {
        "nan", "inf", "-inf", "1e999", "0x1p3", "1..2", "1.2.3", "", "1 ",
    };
    refused = 0;
    for (size_t k = 0; k < sizeof bad_dbls / sizeof *bad_dbls; k++) {
        double v = 0;
        snprintf(line, sizeof line, "x=\"%s\"", bad_dbls[k]);
        refused += parse(line, 5) == 0 && mt_latline_f64(&ll, "x", &v) == -1;
    }
    is_int(refused, (int)(sizeof bad_dbls / sizeof *bad_dbls),
           "not a finite plain decimal: refused");
}

int main(void)
{
    test_json();
    test_tick_shed();
    test_writer_round_trip();
    test_tick_round_trip();
    test_frame_record();
    test_malformed();
    test_tick_device();
    test_tick_limit();
    test_index_and_writer();
    test_number_readers();
    return tap_done();
}
