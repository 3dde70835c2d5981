/* admission.h: the admission records, each with one struct, one writer and
 * one strict reader, used by every program that writes or reads it.
 *
 * On the machine stream (logfmt, latline.h), written by mt-serve and read
 * by mt-admit:
 *
 *   request session=ID t=S uid=U pid=P rate=HZ frame_samples=N
 *           client_model=NAME kv_bound=BYTES active=A pending=Q
 *   admit session=ID t=S verdict=accept|reject [reason=TEXT]
 *
 * On the control input (plain words, one decision a line), written by
 * mt-admit and read by mt-serve --control:
 *
 *   accept ID
 *   reject ID [REASON...]
 *   limit N
 *   shed ID [REASON...]
 *
 * The machine-stream readers require `session` (and `verdict` for admit);
 * the other keys may be absent (hand-written fixtures, older logs) and
 * take the defaults below, but a key that is present must be well formed.
 * Unknown keys are ignored, as latline.h promises.
 */
#ifndef MT_ADMISSION_H
#define MT_ADMISSION_H

#include <stddef.h>
#include <stdint.h>

#include "wire/frame.h"
#include "wire/latline.h"

/* ---- request: a session waiting for admission ---------------------------- */
typedef struct mt_request_rec {
    uint32_t session;        /* engine session id, 1..UINT32_MAX (required) */
    double   t;              /* server time in seconds; -1 when absent */
    int64_t  uid, pid;       /* the client's credentials; -1 when absent */
    uint32_t rate;           /* HELLO's sample rate; 0 when absent */
    uint32_t frame_samples;  /* HELLO's frame size; 0 when absent */
    char     client_model[MT_MODEL_NAME_MAX + 1]; /* HELLO's model; "" */
    uint64_t kv_bound;       /* KV bytes one session may hold; 0 */
    int64_t  active;         /* admitted sessions at the request; 0 */
    int64_t  pending;        /* other sessions waiting; 0 */
} mt_request_rec;

/* Writes every key, in the order above (t with 3 decimals; no t when it
 * is negative, "unknown"). Returns the length, or -1 (buffer too small,
 * session 0). */
long mt_request_format(const mt_request_rec *r, char *buf, size_t cap);
/* Reads a parsed `request` line. 0, or -1 with err "line N: key 'K': ..."
 * and *r untouched. */
int  mt_request_from_line(const mt_latline *ll, long lineno, mt_request_rec *r,
                          char *err, size_t errlen);

/* ---- admit: the server's verdict on a request ---------------------------- */
typedef struct mt_verdict_rec {
    uint32_t session;        /* required */
    double   t;              /* server time in seconds; -1 when absent */
    int      accept;         /* 1 accept, 0 reject (key verdict, required) */
    char     reason[MT_REASON_MAX + 1]; /* reject only; "" when absent */
} mt_verdict_rec;

long mt_verdict_format(const mt_verdict_rec *v, char *buf, size_t cap);
/* A reason on an accept, or longer than MT_REASON_MAX, is an error. */
int  mt_verdict_from_line(const mt_latline *ll, long lineno, mt_verdict_rec *v,
                          char *err, size_t errlen);

/* ---- control lines: controller -> server --------------------------------- */
#define MT_CONTROL_MAX_LINE 512    /* bytes, without the newline */

enum mt_control_kind {
    MT_CONTROL_NONE = 0,     /* an empty (or all-blank) line */
    MT_CONTROL_ACCEPT,
    MT_CONTROL_REJECT,
    MT_CONTROL_LIMIT,        /* the controller's estimate: information only */
    MT_CONTROL_SHED,         /* end an admitted session: capacity fell */
};

typedef struct mt_control {
    int      kind;           /* enum mt_control_kind */
    uint32_t session;        /* accept, reject, shed: 1..UINT32_MAX */
    int64_t  limit;          /* limit: 0..INT32_MAX */
    char     reason[MT_REASON_MAX + 1]; /* reject, shed: "" when none given */
} mt_control;

/* Writes the line without its newline. The reason is written with its
 * leading and trailing blanks removed, and control bytes other than tab
 * and bytes that are not UTF-8 as '?', so that what the writer writes the reader reads back. Returns the
 * length, or -1 (buffer too small, unknown kind, session 0, limit out of
 * range). */
long mt_control_format(const mt_control *c, char *buf, size_t cap);

/* Parses one line (with or without its "\n" or "\r\n"). Words are
 * separated by spaces or tabs; the verb is accept, reject, shed or limit;
 * ID and N are plain decimal (no sign); accept and limit take nothing
 * more; a reject's or shed's reason is the rest of the line, blanks
 * around it removed (a shed's goes into the session's END frame). Other
 * control bytes (NUL included) anywhere are errors, as are lines longer
 * than MT_CONTROL_MAX_LINE and reasons longer than MT_REASON_MAX; bytes of
 * the reason that are not UTF-8 are replaced with '?' (the reason goes
 * into a REJECT frame, which must be UTF-8). Returns 0
 * (kind MT_CONTROL_NONE for a blank line), or -1 with err naming what is
 * wrong, and *c untouched. */
int  mt_control_parse(const char *line, size_t len, mt_control *c,
                      char *err, size_t errlen);

#endif
