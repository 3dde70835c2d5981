/* latline.h: the latency-line format (logfmt) mt-serve prints once per tick,
 * and its strict parser.
 *
 * A line is space-separated `key=value` pairs (or a bare `key`, a flag).
 * Keys: [a-z0-9_]+. Values: bare (no space, '"', '=') or double-quoted with
 * \" and \\ escapes. The first key names the record kind:
 *
 *   tick=N ...            one per tick (mt_tick below)
 *   request session=ID .. a session waiting for admission (admission.h)
 *   admit session=ID ...  the server's verdict on it (admission.h)
 *   frame=SEQ session=.. one per frame with --latency=frames (mt_frame_rec)
 *   anything else         other records (mt-replay's client lines, ...)
 *
 * Any line mt-serve writes may end with lines_dropped=N: N lines were
 * dropped just before it because the reader did not keep up.
 *
 * Unknown keys are kept and ignored by the typed readers (forward
 * compatibility). Malformed syntax is an error naming the line number and
 * the key. The parser never allocates and never crashes on any input.
 *
 * Strictness, precisely: pairs are separated by one or more spaces (tabs
 * and other control bytes, NUL included, are errors anywhere); a bare
 * value may not be empty (`k=` is an error; the writer emits k=""); keys
 * are at most MT_LL_KEY_MAX bytes and may not repeat; a line longer than
 * MT_LL_MAX_LINE (after removing its "\n" or "\r\n") is an error, never
 * truncated; an empty line parses to n == 0. Non-ASCII bytes in values are
 * kept as they are.
 */
#ifndef MT_LATLINE_H
#define MT_LATLINE_H

#include <stddef.h>
#include <stdint.h>

#define MT_LL_MAX_PAIRS 64
#define MT_LL_MAX_LINE  4096
#define MT_LL_KEY_MAX   32

/* slots of the key index: a power of two, twice MT_LL_MAX_PAIRS */
#define MT_LL_SLOTS     128

typedef struct mt_ll_pair {
    const char *key;   /* NUL-terminated, inside mt_latline.buf */
    const char *val;   /* NUL-terminated, unescaped; "" for a flag */
    int         quoted;/* 1: the value was written in double quotes */
    int         klen;  /* strlen(key) */
} mt_ll_pair;

/* A parsed line. The key index finds a key in one or two probes: a typed
 * reader looks up every key of a record (a tick has 20 to 26), and a scan
 * of the pairs for each made reading a line quadratic in its keys. */
typedef struct mt_latline {
    char       buf[MT_LL_MAX_LINE + 1];
    mt_ll_pair pair[MT_LL_MAX_PAIRS];
    int        n;
    uint8_t    slot[MT_LL_SLOTS]; /* [MT_LL_SLOTS] open addressing on the
                                     key's hash: pair index + 1, 0 empty */
} mt_latline;

/* Parses one line (without or with its trailing newline). Returns 0, or -1
 * with err filled: "line 12: key 'step_ms': unterminated quote". */
int mt_latline_parse(const char *line, size_t len, long lineno,
                     mt_latline *ll, char *err, size_t errlen);

/* The length of line[0..len) without its line ending ("\n" or "\r\n"),
 * the same for every line-oriented record (latency lines, control lines). */
size_t mt_line_chomp(const char *line, size_t len);

/* The start of every record reader: 0 when ll and the record to fill (rec)
 * are there and ll's first key is `kind`; else -1 with err: "line 3: no
 * record", or "line 3: key 'tick': not a tick record (first key is 'x')"
 * where `what` is "a tick record". */
int mt_latline_expect(const mt_latline *ll, const void *rec, long lineno,
                      const char *kind, const char *what, char *err,
                      size_t errlen);

const char *mt_latline_kind(const mt_latline *ll); /* first key, or "" */
const char *mt_latline_get(const mt_latline *ll, const char *key); /* or NULL */
/* Typed getters: 0 found and valid, 1 absent, -1 present but malformed
 * (trailing junk, overflow, NaN/inf spellings, hex; f64 takes plain
 * decimal with optional exponent). */
int mt_latline_i64(const mt_latline *ll, const char *key, int64_t *v);
int mt_latline_f64(const mt_latline *ll, const char *key, double *v);

/* ---- JSON: the same record as one JSON object ------------------------- */
/* Converts one logfmt line (without or with its newline) into one JSON
 * object on one line, without a newline: the same keys in the same order,
 * each value typed by how the line wrote it:
 *   a flag (`key` alone)                  true
 *   a quoted value (`key="..."`)          a string
 *   a bare JSON number (-?int[.frac][e])  that number, as written
 *   a bare nan, inf, -inf                 null (JSON has no such numbers)
 *   any other bare value                  a string
 * Strings escape '"', '\\' and bytes below 0x20 (\uXXXX); other bytes are
 * copied as they are. An empty line gives {}. Returns the length written
 * (without the NUL), or -1 with err when the line does not parse (the
 * parser's message) or out (cap bytes) is too small; 3 * line length + 16
 * is always enough. */
long mt_latline_to_json(const char *line, size_t len, char *out, size_t cap,
                        char *err, size_t errlen);

/* ---- writer: appends to a caller buffer, never overflows ---------------- */
typedef struct mt_ll_writer {
    char  *buf;
    size_t cap, len;
    int    overflow;
} mt_ll_writer;

void mt_ll_begin(mt_ll_writer *w, char *buf, size_t cap);
void mt_ll_int(mt_ll_writer *w, const char *key, int64_t v);
void mt_ll_u64(mt_ll_writer *w, const char *key, uint64_t v);
void mt_ll_f(mt_ll_writer *w, const char *key, double v, int decimals);
void mt_ll_str(mt_ll_writer *w, const char *key, const char *v); /* quotes if needed */
void mt_ll_flag(mt_ll_writer *w, const char *key);
/* Returns the length written (without NUL), or -1 if it overflowed or a
 * key was not [a-z0-9_]{1,MT_LL_KEY_MAX}. Control characters in string
 * values are written as '?' (the format has no escape for them); NaN and
 * infinities are written as nan/inf, which the typed readers refuse. */
long mt_ll_end(mt_ll_writer *w);

/* ---- the tick record: stable keys, documented in mt-serve(1) ------------ */
typedef struct mt_tick {
    int64_t  tick;       /* tick number from 0 */
    double   t;          /* seconds since the server started */
    int64_t  active;     /* admitted sessions */
    int64_t  stepped;    /* sessions stepped in this tick's batch */
    double   step_ms;    /* compute time of the batch */
    double   late_ms;    /* age of the oldest input frame not yet answered
                            with a real output, past its deadline basis */
    double   p50_ms;     /* per-frame latency (arrival -> ready) over tick */
    double   p99_ms;
    int64_t  in;         /* input frames read this tick */
    int64_t  out;        /* real output frames sent this tick */
    int64_t  fill;       /* FILL (silence) frames sent this tick */
    int64_t  kv_used;    /* KV pool bytes in use */
    int64_t  kv_free;    /* KV pool bytes free */
    int64_t  pending;    /* sessions waiting for admission */
    int64_t  admitted;   /* sessions admitted so far (total) */
    int64_t  rejected;   /* sessions rejected so far (total) */
    int64_t  preempted;  /* sessions preempted this tick (full mode) */
    double   naive_ms;   /* compute of completed steps only */
    double   naive_met;  /* % of deadlines "met", FILL counted as met */
    double   met;        /* % of deadlines met with a real output */
    int64_t  miss;       /* input frames that ended as counted misses this
                            tick; -1 when read from a line without the key
                            (lines of servers before it was added) */
    /* ---- the device (issue 22); optional keys, after the ones above ----
     * device: "" (not written) or its label, e.g. "cpu", "cuda",
     * "sim:h200-moshi7b" ([a-z0-9:._-], 1..MT_TICK_DEVICE_MAX-1 bytes).
     * A simulated device ("sim:..." ) also writes, and the reader then
     * requires, sim_pred_ms (the profile's noiseless prediction for this
     * tick's steps and prefills, summed) and sim_noise_ms (the seeded
     * jitter and stalls added to it): step_ms is their sum plus the host's
     * own time, never a measurement of a device. */
    char     device[48];
    double   sim_pred_ms;
    double   sim_noise_ms;
    /* ---- shedding (issue 24); optional, after the device keys ----------
     * shed: sessions ended so far (total) by a controller's `shed` line
     * because capacity fell under the admitted load; written when >= 0,
     * -1 when read from a line without the key (older servers). */
    int64_t  shed;
    /* ---- the published capacity (issue 23); optional, after the device
     * keys: limit is the session count mt-serve publishes to HAProxy's
     * agent-check (maxconn), written only when has_limit (a reader sets
     * has_limit from the key's presence; negative is malformed). */
    int      has_limit;
    int64_t  limit;
} mt_tick;
#define MT_TICK_DEVICE_MAX 48

long mt_tick_format(const mt_tick *t, char *buf, size_t cap);
/* Reads a tick record (first key must be `tick`); every key above must be
 * present and well formed, except `miss`, which may be absent (then -1) but
 * not malformed. Returns 0, or -1 with err "line N: key 'K': ..." and *t
 * untouched. mt_tick_format writes the keys in the order above, the floats
 * with fixed decimals: t and *_ms 3, naive_met and met 1; `miss` last, and
 * only when it is >= 0. */
int mt_tick_from_line(const mt_latline *ll, long lineno, mt_tick *t,
                      char *err, size_t errlen);

/* ---- the frame record (--latency=frames): one per answered input -------- */
typedef struct mt_frame_rec {
    uint64_t frame;       /* the input's sequence number */
    uint64_t session;
    double   t;           /* seconds since the server started, when ready */
    int64_t  fill;        /* 1: answered with FILL (silence) */
    double   latency_ms;  /* arrival to ready (or to the FILL) */
    double   wait_ms;     /* arrival to step start; real outputs only */
    double   compute_ms;  /* step start to ready; real outputs only */
    int64_t  met;         /* 1: a real output by the deadline */
} mt_frame_rec;

/* Writes "frame=SEQ session=ID t= fill= latency_ms= [wait_ms= compute_ms=]
 * met=" (wait_ms and compute_ms only when fill is 0; *_ms and t with 3
 * decimals). Returns the length, or -1 if it does not fit. */
long mt_frame_rec_format(const mt_frame_rec *r, char *buf, size_t cap);
/* Reads a frame record (first key `frame`); every key the writer writes for
 * that fill value must be present and well formed (0 or 1 for fill and
 * met). Returns 0, or -1 with err "line N: key 'K': ..." and *r untouched. */
int mt_frame_rec_from_line(const mt_latline *ll, long lineno, mt_frame_rec *r,
                           char *err, size_t errlen);

#endif
