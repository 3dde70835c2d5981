/* admission.c: writers and strict readers of the admission records (format
 * in admission.h): request and verdict lines on the machine stream, the
 * control lines a controller sends back.
 *
 * mt-serve writes the first two and reads the third; mt-admit the reverse.
 * Both sides call these functions, so the two programs cannot drift apart
 * on a key name or a word, and a line one side cannot read is refused with
 * its line number and what is wrong rather than half understood.
 */
#include "wire/admission.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errmsg.h"

/* ---- shared -------------------------------------------------------------- */

/* A value shown in an error message: printable, at most 32 bytes. */
static void shown(char *out, size_t outsz, const char *s)
{
    size_t j = 0;
    for (size_t i = 0; s[i] && i < 32 && j + 1 < outsz; i++) {
        unsigned char c = (unsigned char)s[i];
        out[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (outsz)
        out[j] = '\0';
}

static int bad_value(const mt_latline *ll, long lineno, const char *key,
                     const char *want, char *err, size_t errlen)
{
    char v[40];
    const char *s = mt_latline_get(ll, key);
    shown(v, sizeof v, s ? s : "");
    mt_set_err(err, errlen, "line %ld: key '%s': not %s: '%s'", lineno, key,
               want, v);
    return -1;
}

/* An integer key in [lo, hi]: 0 read, 1 absent (v untouched), -1 error. */
static int int_key(const mt_latline *ll, long lineno, const char *key,
                   int64_t lo, int64_t hi, int64_t *v, char *err, size_t errlen)
{
    int64_t x;
    int rc = mt_latline_i64(ll, key, &x);
    if (rc == 1)
        return 1;
    if (rc < 0 || x < lo || x > hi)
        return bad_value(ll, lineno, key, lo == 1 ? "a session id" :
                         lo == 0 ? "a count" : "an integer", err, errlen);
    *v = x;
    return 0;
}

static int session_key(const mt_latline *ll, long lineno, uint32_t *id,
                       char *err, size_t errlen)
{
    int64_t x = 0;
    int rc = int_key(ll, lineno, "session", 1, UINT32_MAX, &x, err, errlen);
    if (rc == 1)
        mt_set_err(err, errlen, "line %ld: key 'session': missing", lineno);
    if (rc != 0)
        return -1;
    *id = (uint32_t)x;
    return 0;
}

/* Server time: absent is -1 (the reader's "unknown"), present must be a
 * finite number >= 0. */
static int time_key(const mt_latline *ll, long lineno, double *t,
                    char *err, size_t errlen)
{
    double x;
    int rc = mt_latline_f64(ll, "t", &x);
    if (rc == 1) {
        *t = -1;
        return 0;
    }
    if (rc < 0 || x < 0)
        return bad_value(ll, lineno, "t", "a time in seconds", err, errlen);
    *t = x;
    return 0;
}

/* A string key of at most max bytes: absent leaves out unchanged. */
static int str_key(const mt_latline *ll, long lineno, const char *key,
                   char *out, size_t max, char *err, size_t errlen)
{
    const char *s = mt_latline_get(ll, key);
    if (!s)
        return 1;
    if (strlen(s) > max) {
        mt_set_err(err, errlen, "line %ld: key '%s': longer than %zu bytes",
                   lineno, key, max);
        return -1;
    }
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

/* ---- request ------------------------------------------------------------- */

long mt_request_format(const mt_request_rec *r, char *buf, size_t cap)
{
    mt_ll_writer w;
    mt_ll_begin(&w, buf, cap);
    if (!r || r->session == 0)
        return -1;
    mt_ll_flag(&w, "request");
    mt_ll_u64(&w, "session", r->session);
    if (r->t >= 0)      /* -1, "unknown", is written as no t at all */
        mt_ll_f(&w, "t", r->t, 3);
    mt_ll_int(&w, "uid", r->uid);
    mt_ll_int(&w, "pid", r->pid);
    mt_ll_u64(&w, "rate", r->rate);
    mt_ll_u64(&w, "frame_samples", r->frame_samples);
    mt_ll_str(&w, "client_model", r->client_model);
    mt_ll_u64(&w, "kv_bound", r->kv_bound);
    mt_ll_int(&w, "active", r->active);
    mt_ll_int(&w, "pending", r->pending);
    return mt_ll_end(&w);
}

int mt_request_from_line(const mt_latline *ll, long lineno, mt_request_rec *r,
                         char *err, size_t errlen)
{
    if (mt_latline_expect(ll, r, lineno, "request", "a request record", err,
                          errlen) != 0)
        return -1;
    mt_request_rec x;
    memset(&x, 0, sizeof x);
    x.uid = x.pid = -1;
    int64_t v = 0;
    if (session_key(ll, lineno, &x.session, err, errlen) != 0 ||
        time_key(ll, lineno, &x.t, err, errlen) != 0)
        return -1;
    static const struct { const char *key; int64_t lo, hi; } ints[] = {
        {"uid", INT64_MIN, INT64_MAX}, {"pid", INT64_MIN, INT64_MAX},
        {"rate", 0, UINT32_MAX}, {"frame_samples", 0, UINT32_MAX},
        {"kv_bound", 0, INT64_MAX}, {"active", 0, INT64_MAX},
        {"pending", 0, INT64_MAX},
    };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        int rc = int_key(ll, lineno, ints[k].key, ints[k].lo, ints[k].hi, &v,
                         err, errlen);
        if (rc < 0)
            return -1;
        if (rc == 1)
            continue;
        switch (k) {
        case 0: x.uid = v; break;
        case 1: x.pid = v; break;
        case 2: x.rate = (uint32_t)v; break;
        case 3: x.frame_samples = (uint32_t)v; break;
        case 4: x.kv_bound = (uint64_t)v; break;
        case 5: x.active = v; break;
        default: x.pending = v; break;
        }
    }
    if (str_key(ll, lineno, "client_model", x.client_model, MT_MODEL_NAME_MAX,
                err, errlen) < 0)
        return -1;
    *r = x;
    return 0;
}

/* ---- verdict ------------------------------------------------------------- */

long mt_verdict_format(const mt_verdict_rec *v, char *buf, size_t cap)
{
    mt_ll_writer w;
    mt_ll_begin(&w, buf, cap);
    if (!v || v->session == 0)
        return -1;
    mt_ll_flag(&w, "admit");
    mt_ll_u64(&w, "session", v->session);
    if (v->t >= 0)
        mt_ll_f(&w, "t", v->t, 3);
    mt_ll_str(&w, "verdict", v->accept ? "accept" : "reject");
    if (!v->accept)
        mt_ll_str(&w, "reason", v->reason);
    return mt_ll_end(&w);
}

int mt_verdict_from_line(const mt_latline *ll, long lineno, mt_verdict_rec *v,
                         char *err, size_t errlen)
{
    if (mt_latline_expect(ll, v, lineno, "admit", "an admit record", err,
                          errlen) != 0)
        return -1;
    mt_verdict_rec x;
    memset(&x, 0, sizeof x);
    if (session_key(ll, lineno, &x.session, err, errlen) != 0 ||
        time_key(ll, lineno, &x.t, err, errlen) != 0)
        return -1;
    const char *verdict = mt_latline_get(ll, "verdict");
    if (!verdict) {
        mt_set_err(err, errlen, "line %ld: key 'verdict': missing", lineno);
        return -1;
    }
    if (strcmp(verdict, "accept") != 0 && strcmp(verdict, "reject") != 0)
        return bad_value(ll, lineno, "verdict", "accept or reject", err, errlen);
    x.accept = verdict[0] == 'a';
    int rc = str_key(ll, lineno, "reason", x.reason, MT_REASON_MAX, err, errlen);
    if (rc < 0)
        return -1;
    if (rc == 0 && x.accept) {
        mt_set_err(err, errlen, "line %ld: key 'reason': on an accept", lineno);
        return -1;
    }
    *v = x;
    return 0;
}

/* ---- control lines ------------------------------------------------------- */

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

long mt_control_format(const mt_control *c, char *buf, size_t cap)
{
    if (!c || !buf || cap == 0)
        return -1;
    buf[0] = '\0';
    char head[64];
    const char *verb;
    unsigned long long num;
    switch (c->kind) {
    case MT_CONTROL_ACCEPT: verb = "accept"; num = c->session; break;
    case MT_CONTROL_REJECT: verb = "reject"; num = c->session; break;
    case MT_CONTROL_SHED:   verb = "shed";   num = c->session; break;
    case MT_CONTROL_LIMIT:
        if (c->limit < 0 || c->limit > INT32_MAX)
            return -1;
        verb = "limit";
        num = (unsigned long long)c->limit;
        break;
    default:
        return -1;
    }
    if (c->kind != MT_CONTROL_LIMIT && c->session == 0)
        return -1;
    size_t n = (size_t)snprintf(head, sizeof head, "%s %llu", verb, num);
    const char *r = c->kind == MT_CONTROL_REJECT ||
                    c->kind == MT_CONTROL_SHED ? c->reason : "";
    size_t rlen = strnlen(r, MT_REASON_MAX + 1);
    if (rlen > MT_REASON_MAX)
        return -1;
    while (rlen && blank(r[0])) {
        r++;
        rlen--;
    }
    while (rlen && blank(r[rlen - 1]))
        rlen--;
    size_t total = n + (rlen ? 1 + rlen : 0);
    if (total + 1 > cap)
        return -1;
    memcpy(buf, head, n);
    if (rlen) {
        char clean[MT_REASON_MAX + 1];
        memcpy(clean, r, rlen);
        clean[rlen] = '\0';
        mt_utf8_sanitize(clean);
        buf[n++] = ' ';
        for (size_t i = 0; i < rlen; i++) {
            unsigned char ch = (unsigned char)clean[i];
            buf[n++] = (ch < 0x20 && ch != '\t') || ch == 0x7f ? '?' : (char)ch;
        }
    }
    buf[n] = '\0';
    return (long)n;
}

/* Reads a plain decimal number word at s[*i..len) into [lo, hi]. */
static int number_word(const char *s, size_t len, size_t *i, uint64_t hi,
                       uint64_t *v)
{
    size_t st = *i;
    uint64_t x = 0;
    while (*i < len && s[*i] >= '0' && s[*i] <= '9') {
        x = x * 10 + (uint64_t)(s[*i] - '0');
        if (x > hi)
            return -1;
        (*i)++;
    }
    if (*i == st || (*i < len && !blank(s[*i])))
        return -1;
    *v = x;
    return 0;
}

int mt_control_parse(const char *line, size_t len, mt_control *c,
                     char *err, size_t errlen)
{
    if (!c || (!line && len)) {
        mt_set_err(err, errlen, "no line to parse");
        return -1;
    }
    len = mt_line_chomp(line, len);
    if (len > MT_CONTROL_MAX_LINE) {
        mt_set_err(err, errlen, "longer than %d bytes", MT_CONTROL_MAX_LINE);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)line[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            mt_set_err(err, errlen, "column %zu: control byte 0x%02x", i + 1, ch);
            return -1;
        }
    }
    mt_control x;
    memset(&x, 0, sizeof x);
    size_t i = 0;
    while (i < len && blank(line[i]))
        i++;
    if (i == len) {
        *c = x;
        return 0;
    }
    size_t vs = i;
    while (i < len && !blank(line[i]))
        i++;
    size_t vl = i - vs;
    if (vl == 6 && memcmp(line + vs, "accept", 6) == 0)
        x.kind = MT_CONTROL_ACCEPT;
    else if (vl == 6 && memcmp(line + vs, "reject", 6) == 0)
        x.kind = MT_CONTROL_REJECT;
    else if (vl == 5 && memcmp(line + vs, "limit", 5) == 0)
        x.kind = MT_CONTROL_LIMIT;
    else if (vl == 4 && memcmp(line + vs, "shed", 4) == 0)
        x.kind = MT_CONTROL_SHED;
    else {
        char v[40];
        size_t n = vl < sizeof v - 1 ? vl : sizeof v - 1;
        memcpy(v, line + vs, n);
        v[n] = '\0';
        char w[40];
        shown(w, sizeof w, v);
        mt_set_err(err, errlen, "unknown verb '%s' (want accept ID, reject ID "
                   "reason, shed ID reason or limit N)", w);
        return -1;
    }
    const char *verb = x.kind == MT_CONTROL_LIMIT ? "limit" :
                       x.kind == MT_CONTROL_ACCEPT ? "accept" :
                       x.kind == MT_CONTROL_SHED ? "shed" : "reject";
    /* reject and shed carry a reason: the rest of the line */
    int has_reason = x.kind == MT_CONTROL_REJECT || x.kind == MT_CONTROL_SHED;
    while (i < len && blank(line[i]))
        i++;
    uint64_t num;
    if (number_word(line, len, &i, x.kind == MT_CONTROL_LIMIT ? INT32_MAX
                                                             : UINT32_MAX,
                    &num) != 0 ||
        (x.kind != MT_CONTROL_LIMIT && num == 0)) {
        mt_set_err(err, errlen, "%s: want %s", verb,
                   x.kind == MT_CONTROL_LIMIT ? "a count 0..2147483647"
                                              : "a session id 1..4294967295");
        return -1;
    }
    if (x.kind == MT_CONTROL_LIMIT)
        x.limit = (int64_t)num;
    else
        x.session = (uint32_t)num;
    while (i < len && blank(line[i]))
        i++;
    size_t end = len;
    while (end > i && blank(line[end - 1]))
        end--;
    if (end > i && !has_reason) {
        mt_set_err(err, errlen, "%s: unexpected words after the %s", verb,
                   x.kind == MT_CONTROL_LIMIT ? "count" : "session id");
        return -1;
    }
    if (end - i > MT_REASON_MAX) {
        mt_set_err(err, errlen, "%s: reason longer than %d bytes", verb,
                   MT_REASON_MAX);
        return -1;
    }
    memcpy(x.reason, line + i, end - i);
    x.reason[end - i] = '\0';
    /* A reason goes into a REJECT or END frame, which must be UTF-8, and into a
     * logfmt line: bytes that are not UTF-8 become '?' rather than cost
     * the client its REJECT. */
    mt_utf8_sanitize(x.reason);
    *c = x;
    return 0;
}
