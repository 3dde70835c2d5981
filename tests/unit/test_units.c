/* test_units.c: the integer, byte-size and duration grammars
 * (util/units.c) that mt-serve --kv-mem, the probes, the endpoint parser
 * and every duration option share. */
#include "tap.h"
#include "util/units.h"

#include <string.h>

static void bytes_ok(const char *s, uint64_t want)
{
    uint64_t v = 0;
    char err[128];
    int rc = mt_parse_bytes(s, &v, err, sizeof err);
    ok(rc == 0 && v == want, "bytes '%s' = %llu (got %llu)", s,
       (unsigned long long)want, (unsigned long long)v);
}

static void bytes_bad(const char *s, const char *want)
{
    uint64_t v = 7;
    char err[128] = "";
    int rc = mt_parse_bytes(s, &v, err, sizeof err);
    ok(rc == -1 && v == 7 && strstr(err, want), "bytes '%s' refused: %s", s, err);
}

static void dur_ok(const char *s, double unit, double want)
{
    double v = -1;
    char err[128];
    int rc = mt_parse_duration(s, unit, &v, err, sizeof err);
    ok(rc == 0 && v == want, "duration '%s' (unit %g s) = %g (got %g)", s, unit, want, v);
}

static void dur_bad(const char *s, const char *want)
{
    double v = 7;
    char err[128] = "";
    int rc = mt_parse_duration(s, 1, &v, err, sizeof err);
    ok(rc == -1 && v == 7 && strstr(err, want), "duration '%s' refused: %s", s, err);
}

static void int_ok(const char *s, long lo, long hi, long want)
{
    long v = -12345;
    char err[128] = "";
    int rc = mt_parse_int(s, lo, hi, "--n", &v, err, sizeof err);
    ok(rc == 0 && v == want, "int '%s' in %ld..%ld = %ld (got %ld; %s)", s, lo, hi, want,
       v, err);
}

static void int_bad(const char *s, long lo, long hi, const char *want)
{
    long v = 7;
    char err[128] = "";
    int rc = mt_parse_int(s, lo, hi, "--n", &v, err, sizeof err);
    ok(rc == -1 && v == 7 && strstr(err, want) && strncmp(err, "--n: ", 5) == 0,
       "int '%s' refused naming the field: %s", s, err);
}

int main(void)
{
    int_ok("42", 0, 100, 42);
    int_ok("-3", -5, 5, -3);
    int_ok("+7", 0, 10, 7);
    int_ok("65535", 0, 65535, 65535);
    int_bad("65536", 0, 65535, "outside 0..65535");
    int_bad("-1", 0, 10, "outside");
    int_bad("99999999999999999999999", 0, 10, "outside");
    int_bad("", 0, 10, "not an integer");
    int_bad("12abc", 0, 100, "not an integer");
    int_bad(" 12", 0, 100, "not an integer");
    int_bad("0x10", 0, 100, "not an integer");
    int_bad("-", 0, 100, "not an integer");
    bytes_ok("4096", 4096);
    bytes_ok("0", 0);
    bytes_ok("512M", 512ull << 20);
    bytes_ok("64m", 64ull << 20);
    bytes_ok("1.5G", 3ull << 29);
    bytes_ok("8K", 8192);
    bytes_ok("8KB", 8192);
    bytes_ok("8kib", 8192);
    bytes_ok("100MB", 100ull << 20);
    bytes_ok("64MiB", 64ull << 20);
    bytes_ok("12b", 12);
    bytes_ok(".5K", 512);
    bytes_bad("", "empty");
    bytes_bad("abc", "bad size");
    bytes_bad("-1M", "bad size");
    bytes_bad("0x10", "bad size");
    bytes_bad("inf", "bad size");
    bytes_bad("8T", "unit");
    bytes_bad("8Mx", "unit");
    bytes_bad("8 M", "unit");
    bytes_bad("99999999999G", "too large");
    uint64_t v;
    ok(mt_parse_bytes("x", &v, NULL, 0) == -1, "no error buffer: still refused");

    dur_ok("30", 1, 30);
    dur_ok("20s", 1, 20);
    dur_ok("800ms", 1, 0.8);
    dur_ok("2m", 1, 120);
    dur_ok("2min", 1, 120);
    dur_ok("1h", 1, 3600);
    dur_ok("80", 0.001, 80);
    dur_ok("80ms", 0.001, 80);
    dur_ok("1.5s", 0.001, 1500);
    dur_ok("0", 0.001, 0);
    dur_bad("", "empty");
    dur_bad("abc", "bad duration");
    dur_bad("-5", "bad duration");
    dur_bad("nan", "bad duration");
    dur_bad("5 s", "unit");
    dur_bad("5sec", "unit");
    dur_bad("5d", "unit");
    return tap_done();
}
