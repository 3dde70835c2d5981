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
 * MT_PROTO_AUTH_HELD_MAX in all (the global budget); past either, REJECT
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
    if (!p->agg_since)
        p->agg_since = now;
    mt_proto_agg *free_slot = NULL;
    for (int i = 0; i < MT_PROTO_AGG_REASONS; i++) {
        mt_proto_agg *a = &p->agg[i];
        if (a->n && !strncmp(a->reason, reason, sizeof a->reason - 1))
            return a->n++ == 0;
        if (!a->n && !free_slot)
            free_slot = a;
    }
    if (!free_slot) {
        p->agg_other++;
        return 0;
    }
    snprintf(free_slot->reason, sizeof free_slot->reason, "%s", reason);
    free_slot->n = 1;
    return 1;
}

void mt_proto_report(mt_proto *p, uint64_t now, int force)
{
    if (!p->agg_since || (!force && now - p->agg_since < MT_PROTO_REPORT_NS))
        return;
    char msg[1024];
    size_t len = 0;
    uint64_t more = p->agg_other;
    for (int i = 0; i < MT_PROTO_AGG_REASONS; i++) {
        mt_proto_agg *a = &p->agg[i];
        if (a->n > 1 && len < sizeof msg) {
            int k = snprintf(msg + len, sizeof msg - len, "%s%llu x %s",
                             len ? ", " : "", (unsigned long long)(a->n - 1), a->reason);
            len += k > 0 ? (size_t)k : 0;
        }
        a->n = 0;
    }
    if (more && len < sizeof msg)
        snprintf(msg + len, sizeof msg - len, "%s%llu of other reasons",
                 len ? ", " : "", (unsigned long long)more);
    if (len || more)
        plog(p, "connections refused before a session, besides the ones logged, "
             "in the last %.1f s: %s", (double)(now - p->agg_since) / 1e9, msg);
    p->agg_other = 0;
    p->agg_since = 0;
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
    char smp[200], sep[3] = "";
    if (mt_engine_sampling_desc(p->eng, c->id, smp, sizeof smp) == 0)
        snprintf(sep, sizeof sep, ", ");
    if (c->is_tcp)
        plog(p, "session %u: admitted (tcp %s)%s%s", c->id, c->peer, sep, smp);
    else
        plog(p, "session %u: admitted (uid %d)%s%s", c->id, (int)c->uid, sep, smp);
    c->last_input = now;
    verdict_line(p, c->id, 1, NULL, now);
}

/* The failure record of addr (the peer without its port), made when
 * missing: the oldest entry gives way. */
static mt_proto_auth_fail *auth_entry(mt_proto *p, const char *addr, uint64_t now)
{
    mt_proto_auth_fail *old = &p->auth[0];
    for (int i = 0; i < MT_PROTO_AUTH_TABLE; i++) {
        mt_proto_auth_fail *a = &p->auth[i];
        if (a->count && now - a->last > MT_PROTO_AUTH_FORGET_NS)
            a->count = 0;
        if (a->count && !strcmp(a->addr, addr))
            return a;
        if (!a->count || (old->count && a->last < old->last))
            old = a;
    }
    memset(old, 0, sizeof *old);
    snprintf(old->addr, sizeof old->addr, "%s", addr);
    return old;
}

void mt_proto_peer_host(const mt_proto_conn *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->peer);
    char *colon = strrchr(buf, ':');
    if (colon)
        *colon = '\0';
}

static mt_proto_auth_fail *auth_find(mt_proto *p, const char *addr)
{
    for (int i = 0; i < MT_PROTO_AUTH_TABLE; i++)
        if (p->auth[i].count && !strcmp(p->auth[i].addr, addr))
            return &p->auth[i];
    return NULL;
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
    mt_proto_auth_fail *a = auth_entry(p, host, now);
    if (ok) {
        a->count = 0;
        return 0;
    }
    a->count++;
    a->last = now;
    uint64_t delay = MT_PROTO_AUTH_DELAY_NS;
    for (unsigned i = 1; i < a->count && delay < MT_PROTO_AUTH_DELAY_MAX_NS; i++)
        delay *= 2;
    if (delay > MT_PROTO_AUTH_DELAY_MAX_NS)
        delay = MT_PROTO_AUTH_DELAY_MAX_NS;
    int at_once = a->held >= MT_PROTO_AUTH_HELD_PER_ADDR ||
                  p->auth_held >= MT_PROTO_AUTH_HELD_MAX;
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
    a->held++;
    p->auth_held++;
    c->auth_reject_at = now + delay;
    return 1;
}

static void auth_unhold(mt_proto *p, mt_proto_conn *c)
{
    if (!c->auth_reject_at)
        return;
    c->auth_reject_at = 0;
    if (p->auth_held)
        p->auth_held--;
    char host[64];
    mt_proto_peer_host(c, host, sizeof host);
    mt_proto_auth_fail *a = auth_find(p, host);
    if (a && a->held)
        a->held--;
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
