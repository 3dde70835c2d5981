/* feed.c: mt-serve's machine stream into an admission controller (see
 * feed.h). */
#include "admit/feed.h"

#include <stdio.h>
#include <string.h>

#include "wire/admission.h"

void mt_admit_feed_init(mt_admit_feed *f, mt_admit *a,
                        void (*bad)(void *ctx, const char *msg), void *bad_ctx)
{
    memset(f, 0, sizeof *f);
    f->a = a;
    f->bad = bad;
    f->bad_ctx = bad_ctx;
}

static mt_feed_kind bad_line(mt_admit_feed *f, const char *msg)
{
    f->bad_lines++;
    if (f->bad)
        f->bad(f->bad_ctx, msg);
    return MT_FEED_BAD;
}

static mt_feed_kind handle(mt_admit_feed *f, const char *line, size_t len)
{
    char err[256];
    mt_latline *ll = &f->ll;
    if (mt_latline_parse(line, len, f->lineno, ll, err, sizeof err) != 0)
        return bad_line(f, err);
    if (ll->n == 0)
        return MT_FEED_EMPTY;
    const char *kind = mt_latline_kind(ll);
    if (!strcmp(kind, "tick")) {
        mt_tick *t = &f->tick;
        if (mt_tick_from_line(ll, f->lineno, t, err, sizeof err) != 0)
            return bad_line(f, err);
        f->t = t->t;
        mt_admit_tick(f->a, t);
        return MT_FEED_TICK;
    }
    if (!strcmp(kind, "request")) {
        mt_request_rec rq;
        if (mt_request_from_line(ll, f->lineno, &rq, err, sizeof err) != 0)
            return bad_line(f, err);
        if (rq.t >= 0)
            f->t = rq.t;
        mt_admit_request(f->a, rq.session, rq.t);
        return MT_FEED_REQUEST;
    }
    if (!strcmp(kind, "admit")) {
        mt_verdict_rec *v = &f->verdict;
        if (mt_verdict_from_line(ll, f->lineno, v, err, sizeof err) != 0)
            return bad_line(f, err);
        if (v->t >= 0)
            f->t = v->t;
        mt_admit_server_verdict(f->a, v->session, v->accept);
        return MT_FEED_VERDICT;
    }
    f->ignored++;    /* frame lines, client lines: not ours */
    return MT_FEED_OTHER;
}

mt_feed_kind mt_admit_feed_line(mt_admit_feed *f, const char *line, size_t len)
{
    f->lineno++;
    return handle(f, line, len);
}

/* The gathered line ends (newline or end of input). */
static mt_feed_kind end_line(mt_admit_feed *f)
{
    mt_feed_kind k;
    f->lineno++;
    if (f->overlong) {
        char err[128];
        snprintf(err, sizeof err, "line %ld: longer than %d bytes", f->lineno,
                 MT_LL_MAX_LINE);
        k = bad_line(f, err);
    } else {
        k = handle(f, f->buf, f->len);
    }
    f->last_len = f->len;
    f->len = 0;
    f->overlong = 0;
    return k;
}

mt_feed_kind mt_admit_feed_putc(mt_admit_feed *f, int c)
{
    if (c == '\n')
        return end_line(f);
    f->last_len = 0;
    if (f->len < MT_LL_MAX_LINE + 1)
        f->buf[f->len++] = (char)c;
    else
        f->overlong = 1;
    return MT_FEED_NONE;
}

mt_feed_kind mt_admit_feed_finish(mt_admit_feed *f)
{
    if (f->len == 0)
        return MT_FEED_NONE;
    return end_line(f);
}

int mt_admit_feed_last_is_tick(const mt_admit_feed *f)
{
    return f->last_len >= 5 && memcmp(f->buf, "tick=", 5) == 0;
}
