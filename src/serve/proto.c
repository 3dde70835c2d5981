/* proto.c: one connection's side of mt-serve's protocol (see proto.h).
 *
 * HELLO is checked against the model's format (a mismatch gets REJECT
 * with the reason); a `request session=ID ...` line goes to the machine
 * stream; then either the static rule (max_sessions) decides at once, or
 * the caller does later (the controller's `accept ID` / `reject ID
 * reason`, or its timeout) through mt_proto_admit / mt_proto_reject.
 * After admission AUDIO goes to the engine's input queue; END, ERROR and
 * anything malformed end the input.
 *
 * Over TCP with --token-file, HELLO must carry the token (compared in
 * constant time); a wrong or missing one gets REJECT after a wait that
 * doubles with each failure of the same address (a bounded table in
 * mt_proto); mt_proto_auth_due sends it when due. A connection held for
 * that REJECT is no longer waiting for admission (it holds no pending
 * place), and the held ones are bounded: one per address and
 * MT_GUARD_HELD_MAX in all (the global budget); past either, REJECT
 * goes at once. Behind a proxy every client shares the proxy's address,
 * so the wait never applies to a right token: the token's length (16
 * bytes at least, mt_token_read) is what makes guessing hopeless, the
 * wait and the budget bound what a guesser costs.
 *
 * Failures before a session exists come in crowds: the first of each
 * reason in an interval is logged, the rest counted (mt_proto_report).
 *
 * Kept apart from the server*.c files so that it runs on a buffer: no
 * descriptor, no epoll, no clock but the caller's `now`.
 */
#include "serve/proto.h"

#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "wire/admission.h"
#include "wire/endpoint.h"
#include "util/errmsg.h"

/* the human log, when the caller gave one */
#define AUTH_REASON "authentication failed: wrong or missing token (--token-file)"

#define plog(p, ...) mt_logf((p)->log, (p)->log_ctx, __VA_ARGS__)

static void pline(mt_proto *p, const char *line)
{
    if (p->line)
        p->line(p->line_ctx, line);
}

/* Whether a crowd-prone failure is logged in full: the first of its
 * reason in the interval is; the others are counted for the summary. */
static int agg_note(mt_proto *p, const char *reason, uint64_t now)
{
    return mt_guard_agg_note(&p->agg, reason, now);
}

void mt_proto_report(mt_proto *p, uint64_t now, int force)
{
    char msg[1024];
    double secs;
    if (mt_guard_agg_summary(&p->agg, now, force, msg, sizeof msg, &secs))
        plog(p, "connections refused before a session, besides the ones logged, "
             "in the last %.1f s: %s", secs, msg);
    uint64_t q = p->session_lines.n_quiet;
    if (q && (force || now - p->quiet_since >= MT_GUARD_REPORT_NS)) {
        plog(p, "%llu session(s) admitted and closed without their own lines in the "
             "last %.1f s (more than %d a second: the log's rate limit)",
             (unsigned long long)q, (double)(now - p->quiet_since) / 1e9,
             MT_GUARD_LINES_PER_S);
        p->session_lines.n_quiet = 0;
    }
    if (!p->session_lines.n_quiet)
        p->quiet_since = now;
}

static double tsec(const mt_proto *p, uint64_t now)
{
    return now >= p->t0 ? (double)(now - p->t0) / 1e9
                        : -(double)(p->t0 - now) / 1e9;
}

void mt_proto_conn_init(mt_proto_conn *c)
{
    /* the fields before the two buffers; the buffers (48 KB, read only
     * where have and wlen say they were written) are left untouched, so
     * that their pages are not faulted in for the connections that never
     * use them */
    memset(c, 0, offsetof(mt_proto_conn, dec));
    c->reading = 1;
    mt_frame_decoder_init(&c->dec);
    c->woff = c->wlen = 0;
}

void mt_proto_direct(mt_proto_conn *c, int type, uint16_t flags, const char *reason,
                     uint64_t now)
{
    mt_frame f = {0};
    f.type = (uint8_t)type;
    f.flags = flags;
    f.t_send = now;
    f.length = (uint32_t)strlen(reason);
    if (f.length > MT_REASON_MAX)
        f.length = MT_REASON_MAX;
    f.payload = (const uint8_t *)reason;
    if (c->woff + c->wlen + MT_FRAME_HEADER_SIZE + f.length <= MT_PROTO_WBUF_CAP) {
        long n = mt_frame_encode(&f, c->wbuf + c->woff + c->wlen,
                                 MT_PROTO_WBUF_CAP - c->woff - c->wlen);
        if (n > 0)
            c->wlen += (size_t)n;
    }
    c->reading = 0;
    c->closing = 1;
    c->close_deadline = now + 1000000000ull;
}

static void fail_session(mt_proto *p, mt_proto_conn *c, const char *reason,
                         uint64_t now)
{
    if (c->id) {
        plog(p, "session %u: %s: ending it with ERROR", c->id, reason);
        mt_engine_fail(p->eng, c->id, reason);
        c->reading = 0;
        c->pending = 0;
    } else {
        if (agg_note(p, reason, now)) {
            if (c->is_tcp)
                plog(p, "connection from %s: %s: ERROR", c->peer, reason);
            else
                plog(p, "connection (uid %d): %s: ERROR", (int)c->uid, reason);
        }
        mt_proto_direct(c, MT_FRAME_ERROR, 0, reason, now);
    }
}

static void verdict_line(mt_proto *p, uint32_t id, int accept, const char *reason,
                         uint64_t now)
{
    char buf[1024];
    mt_verdict_rec v = {.session = id, .t = tsec(p, now), .accept = accept};
    if (!accept)
        snprintf(v.reason, sizeof v.reason, "%s", reason ? reason : "");
    if (mt_verdict_format(&v, buf, sizeof buf) > 0)
        pline(p, buf);
}

void mt_proto_reject(mt_proto *p, mt_proto_conn *c, const char *why, int final, uint64_t now)
{
    /* a REJECT frame must carry UTF-8, whoever wrote the reason */
    char reason[MT_REASON_MAX + 1];
    snprintf(reason, sizeof reason, "%s", why);
    mt_utf8_sanitize(reason);
    plog(p, "session %u: rejected: %s", c->id, reason);
    mt_engine_reject(p->eng, c->id, reason, final);
    verdict_line(p, c->id, 0, reason, now);
    c->pending = 0;
    c->reading = 0;
}

void mt_proto_admit(mt_proto *p, mt_proto_conn *c, uint64_t now)
{
    char why[256];
    c->pending = 0;
    int rc = mt_engine_admit(p->eng, c->id, why, sizeof why);
    if (rc != 0) {
        mt_proto_reject(p, c, why, rc == MT_ENGINE_REFUSED_FINAL, now);
        return;
    }
    /* anyone may open sessions by the thousand (a loopback --ws without a
     * token): their two lines each are rate-limited, the rest counted */
    c->quiet = !mt_guard_rate_take(&p->session_lines, now);
    char smp[200], sep[3] = "";
    if (!c->quiet && mt_engine_sampling_desc(p->eng, c->id, smp, sizeof smp) == 0)
        snprintf(sep, sizeof sep, ", ");
    else
        smp[0] = '\0';
    if (!c->quiet && c->is_tcp)
        plog(p, "session %u: admitted (tcp %s)%s%s", c->id, c->peer, sep, smp);
    else if (!c->quiet)
        plog(p, "session %u: admitted (uid %d)%s%s", c->id, (int)c->uid, sep, smp);
    c->last_input = now;
    verdict_line(p, c->id, 1, NULL, now);
}

void mt_proto_peer_host(const mt_proto_conn *c, char *buf, size_t cap)
{
    mt_guard_host(c->peer, buf, cap);
}

/* A TCP HELLO without the right token: REJECT, after a wait that doubles
 * with each failure of the same address (mt_proto_auth_due sends it), or
 * at once past the held budgets. Returns 1 when c was refused. */
static int auth_check(mt_proto *p, mt_proto_conn *c, const mt_frame *f, uint64_t now)
{
    if (!c->is_tcp || !p->token)
        return 0;
    mt_hello h;
    memset(&h, 0, sizeof h);
    int ok = mt_hello_decode(f->payload, f->length, &h) == 0 &&
             mt_token_equal(h.token, h.token_len, p->token, p->token_len);
    memset(h.token, 0, sizeof h.token);
    char host[64];
    mt_proto_peer_host(c, host, sizeof host);
    mt_guard_fail *a = mt_guard_fail_entry(&p->auth, host, now);
    if (ok) {
        a->count = 0;
        return 0;
    }
    uint64_t delay = mt_guard_fail_note(&p->auth, a, now);
    int at_once = delay == 0;
    const char *what = h.token_len ? "wrong token" : "no token";
    if (agg_note(p, what, now)) {
        if (at_once)
            plog(p, "connection from %s: %s: REJECT now (failure %u from this "
                 "address; its held connections or all of them at their "
                 "budget)", c->peer, what, a->count);
        else
            plog(p, "connection from %s: %s: REJECT in %.2f s (failure %u from "
                 "this address)", c->peer, what, (double)delay / 1e9, a->count);
    }
    c->reading = 0;
    if (at_once) {
        mt_proto_direct(c, MT_FRAME_REJECT, MT_FLAG_FINAL, AUTH_REASON, now);
        return 1;
    }
    c->auth_reject_at = now + delay;
    return 1;
}

static void auth_unhold(mt_proto *p, mt_proto_conn *c)
{
    if (!c->auth_reject_at)
        return;
    c->auth_reject_at = 0;
    char host[64];
    mt_proto_peer_host(c, host, sizeof host);
    mt_guard_fail_unhold(&p->auth, host);
}

void mt_proto_conn_release(mt_proto *p, mt_proto_conn *c)
{
    auth_unhold(p, c);
}

void mt_proto_auth_due(mt_proto *p, mt_proto_conn *c, uint64_t now)
{
    if (!c->id && !c->closing && c->auth_reject_at && now >= c->auth_reject_at) {
        auth_unhold(p, c);
        mt_proto_direct(c, MT_FRAME_REJECT, MT_FLAG_FINAL, AUTH_REASON, now);
    }
}

static void on_hello(mt_proto *p, mt_proto_conn *c, const mt_frame *f, uint64_t now)
{
    mt_hello h, want;
    if (auth_check(p, c, f, now))
        return;
    mt_engine_format(p->eng, &want);
    c->id = mt_engine_session_new_for(p->eng, c);   /* take_ready gives c back */
    if (!c->id) {
        mt_proto_direct(c, MT_FRAME_REJECT, 0, "server out of memory", now);
        return;
    }
    if (mt_frame_hello_seed(f))   /* HELLO's seq and seed_hi: mt-frame(5) */
        mt_engine_set_seed(p->eng, c->id, mt_frame_hello_seed(f));
    if (f->flags & MT_FLAG_PRS)   /* the client takes PRS frames */
        mt_engine_set_prs(p->eng, c->id);
    char reason[256] = "";
    int final = 0;         /* the format: asking again cannot change it */
    if (mt_hello_decode(f->payload, f->length, &h) != 0) {
        fail_session(p, c, "malformed HELLO payload", now);
        return;
    }
    mt_engine_set_sampling(p->eng, c->id, &h);   /* its sampling block, if any */
    if (h.sample_rate != want.sample_rate || h.frame_samples != want.frame_samples ||
        h.channels != 1 || h.encoding != MT_ENC_PCM_S16LE) {
        snprintf(reason, sizeof reason,
                 "format mismatch: asked %u Hz, %u-sample frames, %u channel(s), "
                 "encoding %u; this server serves %u Hz, %u-sample frames, "
                 "mono PCM s16le (encoding %d)", h.sample_rate, h.frame_samples,
                 h.channels, h.encoding, want.sample_rate, want.frame_samples,
                 MT_ENC_PCM_S16LE);
        final = 1;
    } else if (p->draining) {
        snprintf(reason, sizeof reason, "server shutting down; not taking new sessions");
    }
    int active = 0, pending = 0;
    mt_engine_counts(p->eng, &active, &pending);
    char buf[1024];
    mt_request_rec rq = {
        .session = c->id, .t = tsec(p, now),
        /* TCP has neither: -1, as mt-serve(1) says */
        .uid = c->is_tcp ? -1 : (int64_t)c->uid,
        .pid = c->is_tcp ? -1 : (int64_t)c->pid,
        .rate = h.sample_rate, .frame_samples = h.frame_samples,
        .kv_bound = mt_engine_session_bound(p->eng),
        .active = active, .pending = pending - 1 < 0 ? 0 : pending - 1,
    };
    snprintf(rq.client_model, sizeof rq.client_model, "%s", h.model);
    if (mt_request_format(&rq, buf, sizeof buf) > 0)
        pline(p, buf);
    if (reason[0]) {
        mt_proto_reject(p, c, reason, final, now);
        return;
    }
    if (p->controlled) {
        c->pending = 1;
        c->admit_deadline = now + p->admit_timeout_ns;
        return;
    }
    if (active >= p->max_sessions) {
        snprintf(reason, sizeof reason, "server at its session limit (%d "
                 "session%s, --max-sessions); retry later", p->max_sessions,
                 p->max_sessions == 1 ? "" : "s");
        mt_proto_reject(p, c, reason, 0, now);
        return;
    }
    mt_proto_admit(p, c, now);
}

static void on_frame(mt_proto *p, mt_proto_conn *c, const mt_frame *f, uint64_t now)
{
    char why[256];
    if (!c->id) {
        if (f->type != MT_FRAME_HELLO) {
            snprintf(why, sizeof why, "expected HELLO, got %s", mt_frame_type_name(f->type));
            fail_session(p, c, why, now);
            return;
        }
        on_hello(p, c, f, now);
        return;
    }
    switch (f->type) {
    case MT_FRAME_HELLO:
        fail_session(p, c, "second HELLO", now);
        return;
    case MT_FRAME_END:
        mt_engine_input_end(p->eng, c->id);
        c->reading = 0;
        return;
    case MT_FRAME_ERROR:
        plog(p, "session %u: client sent ERROR: %.*s", c->id, (int)f->length,
             (const char *)f->payload);
        mt_engine_close(p->eng, c->id);
        c->id = 0;
        c->pending = 0;     /* no session is left to admit or refuse */
        c->reading = 0;
        c->closing = 1;
        c->close_deadline = now;
        return;
    case MT_FRAME_AUDIO: {
        if (c->pending) {
            fail_session(p, c, "AUDIO before ACCEPT", now);
            return;
        }
        int r = mt_engine_input(p->eng, c->id, f, now, why, sizeof why);
        if (r < 0)
            fail_session(p, c, why, now);
        else if (r > 0 && !c->warned_drop) {
            plog(p, "session %u: input queue full: dropping frames (counted as miss)", c->id);
            c->warned_drop = 1;
        }
        return;
    }
    default:
        snprintf(why, sizeof why, "%s frames are not accepted from a client "
                 "(this server serves PCM AUDIO)", mt_frame_type_name(f->type));
        fail_session(p, c, why, now);
        return;
    }
}

void mt_proto_input(mt_proto *p, mt_proto_conn *c, const uint8_t *buf, size_t n,
                    uint64_t now)
{
    size_t off = 0;
    c->bytes_in += n;
    if (c->id && !c->pending)
        c->last_input = now;
    while (off < n && c->reading) {
        size_t used = 0;
        mt_frame f;
        int r = mt_frame_decode_ref(&c->dec, buf + off, n - off, &used, &f);
        off += used;
        if (r == MT_FRAME_OK) {
            on_frame(p, c, &f, now);
            continue;
        }
        if (r == MT_FRAME_NEED_MORE)
            break;
        char why[128];
        snprintf(why, sizeof why, "bad frame: %s", mt_frame_strerror(r));
        fail_session(p, c, why, now);
        break;
    }
}
