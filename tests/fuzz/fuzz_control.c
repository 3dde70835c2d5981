/* fuzz_control.c: libFuzzer harness for the admission records
 * (src/wire/admission.c). Any bytes go in as one control line: the parser
 * returns 0 or -1 with a message, never touching the record on an error,
 * and a line it accepts survives the writer (format, parse again, same
 * record). The same bytes also go through the logfmt parser and the
 * request and verdict readers, and what those accept must round-trip the
 * same way. */
#include "wire/admission.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static mt_latline ll, ll2;

static void control_round_trip(const uint8_t *data, size_t size)
{
    char err[256], out[MT_CONTROL_MAX_LINE + 1];
    mt_control a, b;
    memset(&a, 0xa5, sizeof a);
    mt_control untouched = a;
    err[0] = '\0';
    int rc = mt_control_parse((const char *)data, size, &a, err, sizeof err);
    if (rc != 0) {
        if (rc != -1 || err[0] == '\0' || memcmp(&a, &untouched, sizeof a) != 0)
            abort();
        return;
    }
    if (a.kind == MT_CONTROL_NONE)
        return;
    if (strlen(a.reason) > MT_REASON_MAX)
        abort();
    long n = mt_control_format(&a, out, sizeof out);
    if (n < 0 || mt_control_parse(out, (size_t)n, &b, err, sizeof err) != 0)
        abort();
    if (a.kind != b.kind || a.session != b.session ||
        (a.kind == MT_CONTROL_LIMIT && a.limit != b.limit) ||
        strcmp(a.reason, b.reason) != 0)
        abort();
}

/* A record writer's line (n bytes of out; n < 0: the writer failed) read
 * again by the logfmt parser, as line 2 into ll2: 0, or -1. */
static int reparse(long n, const char *out)
{
    char err[256];
    return n < 0 || mt_latline_parse(out, (size_t)n, 2, &ll2, err, sizeof err) != 0 ? -1 : 0;
}

static void records_round_trip(const uint8_t *data, size_t size)
{
    char err[256], out[MT_LL_MAX_LINE * 2];
    if (mt_latline_parse((const char *)data, size, 1, &ll, err, sizeof err) != 0)
        return;
    mt_request_rec r, r2;
    /* t is written with 3 decimals; everything else exactly */
    if (mt_request_from_line(&ll, 1, &r, err, sizeof err) == 0 &&
        (reparse(mt_request_format(&r, out, sizeof out), out) != 0 ||
         mt_request_from_line(&ll2, 2, &r2, err, sizeof err) != 0 ||
         r.session != r2.session || r.uid != r2.uid || r.pid != r2.pid ||
         r.rate != r2.rate || r.frame_samples != r2.frame_samples ||
         r.kv_bound != r2.kv_bound || r.active != r2.active || r.pending != r2.pending))
        abort();
    mt_verdict_rec v, v2;
    if (mt_verdict_from_line(&ll, 1, &v, err, sizeof err) == 0 &&
        (reparse(mt_verdict_format(&v, out, sizeof out), out) != 0 ||
         mt_verdict_from_line(&ll2, 2, &v2, err, sizeof err) != 0 ||
         v.session != v2.session || v.accept != v2.accept))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    control_round_trip(data, size);
    records_round_trip(data, size);
    return 0;
}
