/* replay_rec.c: writers and strict readers of mt-replay's records (format
 * in replay_rec.h).
 *
 * Each record is a table of its keys (name, type, place in the struct,
 * whether it may be absent): one writer and one reader walk any table, so
 * the key order written and the keys required cannot drift apart.
 */
#include "wire/replay_rec.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/errmsg.h"

enum { K_I64, K_U64, K_F3, K_STR };

typedef struct key {
    const char *name;
    int         type;
    size_t      off;
    size_t      size;        /* K_STR: the field's bytes, NUL included */
    int         optional;    /* K_STR: written only when not ""; read as ""
                                when absent. K_F3: may be absent (0). */
} key;

#define I(T, f)    { #f, K_I64, offsetof(T, f), 0, 0 }
#define U(T, f)    { #f, K_U64, offsetof(T, f), 0, 0 }
#define F(T, f)    { #f, K_F3, offsetof(T, f), 0, 0 }
#define FO(T, f)   { #f, K_F3, offsetof(T, f), 0, 1 }
#define S(T, f)    { #f, K_STR, offsetof(T, f), sizeof(((T *)0)->f), 0 }
#define SO(T, f)   { #f, K_STR, offsetof(T, f), sizeof(((T *)0)->f), 1 }

static const key tick_keys[] = {
    I(mt_replay_tick, replay_tick), F(mt_replay_tick, t),
    I(mt_replay_tick, active), U(mt_replay_tick, sent),
    U(mt_replay_tick, received), U(mt_replay_tick, filled),
    U(mt_replay_tick, late), F(mt_replay_tick, p50_ms),
    F(mt_replay_tick, p99_ms), F(mt_replay_tick, max_ms),
    F(mt_replay_tick, server_p50_ms), F(mt_replay_tick, server_p99_ms),
};
static const key frame_keys[] = {
    U(mt_replay_frame, replay_frame), I(mt_replay_frame, session),
    I(mt_replay_frame, fill), I(mt_replay_frame, late),
    F(mt_replay_frame, rtt_ms), F(mt_replay_frame, server_ms),
    F(mt_replay_frame, queue_ms), F(mt_replay_frame, send_late_ms),
};
static const key retry_keys[] = {
    I(mt_replay_retry, replay_retry), I(mt_replay_retry, attempt),
    F(mt_replay_retry, in_s), S(mt_replay_retry, reason),
};
static const key session_keys[] = {
    I(mt_replay_session, replay_session), S(mt_replay_session, state),
    U(mt_replay_session, server_session), S(mt_replay_session, file),
    U(mt_replay_session, sent), U(mt_replay_session, received),
    U(mt_replay_session, filled), U(mt_replay_session, late),
    U(mt_replay_session, missing), F(mt_replay_session, rtt_max_ms),
    F(mt_replay_session, server_max_ms), SO(mt_replay_session, reason),
};
static const key summary_keys[] = {
    I(mt_replay_summary, replay_summary), I(mt_replay_summary, done),
    I(mt_replay_summary, rejected), I(mt_replay_summary, failed),
    U(mt_replay_summary, sent),
    U(mt_replay_summary, received), U(mt_replay_summary, filled),
    U(mt_replay_summary, late), U(mt_replay_summary, missing),
    F(mt_replay_summary, p50_ms), F(mt_replay_summary, p99_ms),
    F(mt_replay_summary, max_ms), F(mt_replay_summary, server_p50_ms),
    F(mt_replay_summary, server_p99_ms), F(mt_replay_summary, server_max_ms),
    I(mt_replay_summary, retries), I(mt_replay_summary, shed),
};
static const key rejected_keys[] = {
    S(mt_replay_rejected, replay_rejected), I(mt_replay_rejected, session),
    S(mt_replay_rejected, reason),
};
static const key rate_keys[] = {
    I(mt_replay_rate, replay_rate), U(mt_replay_rate, frames),
    F(mt_replay_rate, jitter_p50_ms), F(mt_replay_rate, jitter_p99_ms),
    F(mt_replay_rate, jitter_max_ms), FO(mt_replay_rate, jitter_mean_ms),
};
static const key mic_keys[] = {
    S(mt_replay_mic, device), I(mt_replay_mic, device_rate),
    U(mt_replay_mic, mic_frames), U(mt_replay_mic, mic_short),
    U(mt_replay_mic, mic_dropped), FO(mt_replay_mic, mic_dropped_s),
    U(mt_replay_mic, spk_underruns),
    U(mt_replay_mic, spk_dropped), I(mt_replay_mic, real_time),
};
static const key play_keys[] = {
    U(mt_replay_play, frames), U(mt_replay_play, filled),
    U(mt_replay_play, samples), F(mt_replay_play, server_p50_ms),
    F(mt_replay_play, server_p99_ms),
};

/* kind: a flag written first, for the records whose first key is not
 * their kind (replay_mic, replay_play); NULL for the others. */
static long format(const char *kind, const key *k, size_t n, const void *rec,
                   char *buf, size_t cap)
{
    mt_ll_writer w;
    const char *r = rec;
    mt_ll_begin(&w, buf, cap);
    if (kind)
        mt_ll_flag(&w, kind);
    for (size_t i = 0; i < n; i++) {
        const void *p = r + k[i].off;
        switch (k[i].type) {
        case K_I64: mt_ll_int(&w, k[i].name, *(const int64_t *)p); break;
        case K_U64: mt_ll_u64(&w, k[i].name, *(const uint64_t *)p); break;
        case K_F3:  mt_ll_f(&w, k[i].name, *(const double *)p, 3); break;
        case K_STR:
            if (!k[i].optional || ((const char *)p)[0])
                mt_ll_str(&w, k[i].name, p);
            break;
        }
    }
    return mt_ll_end(&w);
}

static int bad(char *err, size_t errlen, long lineno, const char *key,
               const char *what)
{
    mt_set_err(err, errlen, "line %ld: key '%s': %s", lineno, key, what);
    return -1;
}

static int read_keys(const mt_latline *ll, long lineno, const char *kind,
                     const key *k, size_t n, void *rec, size_t size,
                     char *err, size_t errlen)
{
    char what[64];
    snprintf(what, sizeof what, "a %s record", kind);
    if (mt_latline_expect(ll, rec, lineno, kind, what, err, errlen))
        return -1;
    _Alignas(max_align_t) char tmp[1024];   /* the largest record fits */
    if (size > sizeof tmp)
        return bad(err, errlen, lineno, kind, "record too large to read");
    memset(tmp, 0, size);
    for (size_t i = 0; i < n; i++) {
        void *p = tmp + k[i].off;
        const char *v = mt_latline_get(ll, k[i].name);
        if (!v) {
            if (k[i].optional)
                continue;
            return bad(err, errlen, lineno, k[i].name, "missing");
        }
        switch (k[i].type) {
        case K_I64:
            if (mt_latline_i64(ll, k[i].name, p) != 0)
                return bad(err, errlen, lineno, k[i].name, "not an integer");
            break;
        case K_U64: {
            int64_t x;
            if (mt_latline_i64(ll, k[i].name, &x) != 0 || x < 0)
                return bad(err, errlen, lineno, k[i].name,
                           "not a non-negative integer");
            *(uint64_t *)p = (uint64_t)x;
            break;
        }
        case K_F3:
            if (mt_latline_f64(ll, k[i].name, p) != 0)
                return bad(err, errlen, lineno, k[i].name, "not a number");
            break;
        case K_STR:
            if (strlen(v) >= k[i].size)
                return bad(err, errlen, lineno, k[i].name, "too long");
            memcpy(p, v, strlen(v) + 1);
            break;
        }
    }
    memcpy(rec, tmp, size);
    return 0;
}

#define N(a) (sizeof a / sizeof a[0])
#define CODEC(T, KIND, HEAD, KEYS)                                           \
    long mt_##T##_format(const mt_##T *r, char *buf, size_t cap)             \
    {                                                                        \
        return format(HEAD, KEYS, N(KEYS), r, buf, cap);                     \
    }                                                                        \
    int mt_##T##_from_line(const mt_latline *ll, long lineno, mt_##T *r,     \
                           char *err, size_t errlen)                         \
    {                                                                        \
        return read_keys(ll, lineno, KIND, KEYS, N(KEYS), r, sizeof *r,      \
                         err, errlen);                                       \
    }

CODEC(replay_tick, "replay_tick", NULL, tick_keys)
CODEC(replay_frame, "replay_frame", NULL, frame_keys)
CODEC(replay_retry, "replay_retry", NULL, retry_keys)
CODEC(replay_session, "replay_session", NULL, session_keys)
CODEC(replay_summary, "replay_summary", NULL, summary_keys)
CODEC(replay_rejected, "replay_rejected", NULL, rejected_keys)
CODEC(replay_rate, "replay_rate", NULL, rate_keys)
CODEC(replay_mic, "replay_mic", "replay_mic", mic_keys)
CODEC(replay_play, "replay_play", "replay_play", play_keys)
