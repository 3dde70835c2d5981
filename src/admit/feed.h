/* feed.h: mt-admit's input side: mt-serve's machine stream, byte by byte
 * or line by line, into a controller (admit.h). Lines are gathered in a
 * fixed buffer (an overlong one is reported and skipped to its end, never
 * allowed to grow memory); tick, request and admit lines go to the
 * controller; anything else is counted and ignored; a bad line is counted
 * and reported through a callback, never fatal.
 *
 * Library code: never prints, never exits. Kept out of mt-admit's main so
 * the fuzz harness feeds it the same way.
 */
#ifndef MT_ADMIT_FEED_H
#define MT_ADMIT_FEED_H

#include <stddef.h>

#include "admit/admit.h"
#include "wire/admission.h"
#include "wire/latline.h"

/* What one line was. */
typedef enum mt_feed_kind {
    MT_FEED_NONE = 0,   /* no line ended (mt_admit_feed_putc) */
    MT_FEED_EMPTY,      /* nothing on it */
    MT_FEED_BAD,        /* malformed or overlong: reported, counted */
    MT_FEED_TICK,
    MT_FEED_REQUEST,
    MT_FEED_VERDICT,    /* the server's admit line */
    MT_FEED_OTHER,      /* a well-formed line of another kind: ignored */
} mt_feed_kind;

typedef struct mt_admit_feed {
    mt_admit *a;
    long      lineno;     /* lines ended so far */
    double    t;          /* server time of the latest line that had one */
    long      bad_lines, ignored;
    /* a bad line's message ("line 12: ..."); may be NULL */
    void    (*bad)(void *ctx, const char *msg);
    void     *bad_ctx;
    /* the line being gathered; after a line ends its first bytes stay
     * here until the next byte arrives (see mt_admit_feed_last_is_tick) */
    char      buf[MT_LL_MAX_LINE + 2];
    size_t    len, last_len;
    int       overlong;
    mt_latline ll;        /* scratch for the parser */
    /* the last tick and verdict read (valid after MT_FEED_TICK and
     * MT_FEED_VERDICT), for what else reads the stream (shedding) */
    mt_tick        tick;
    mt_verdict_rec verdict;
} mt_admit_feed;

/* f is about 10 KB (a line and its parse). */
void mt_admit_feed_init(mt_admit_feed *f, mt_admit *a,
                        void (*bad)(void *ctx, const char *msg), void *bad_ctx);

/* One line without its newline: parsed and handed to the controller. */
mt_feed_kind mt_admit_feed_line(mt_admit_feed *f, const char *line, size_t len);

/* One byte of the stream; at a newline the line is handled and its kind
 * returned, else MT_FEED_NONE. */
mt_feed_kind mt_admit_feed_putc(mt_admit_feed *f, int c);

/* End of input: a last line without newline is handled (its kind), else
 * MT_FEED_NONE. */
mt_feed_kind mt_admit_feed_finish(mt_admit_feed *f);

/* The line that just ended starts with "tick=" (even when it was bad or
 * overlong): a sign the server is still running. */
int mt_admit_feed_last_is_tick(const mt_admit_feed *f);

#endif
