/* progress.h: the progress line of mt-probe's long work (soak runs,
 * quality's positions and chunks), on stderr, redrawn in place.
 *
 * Only for a terminal: the caller passes on = isatty(2), and with on == 0
 * nothing is ever written, so a log or a pipe gets no carriage returns.
 * The line says how far the work is ("run 3 of 10"), the time elapsed and
 * an estimate of the time left (elapsed scaled by what is left, once a
 * part is done).
 */
#ifndef MT_PROBE_PROGRESS_H
#define MT_PROBE_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct mt_progress {
    int         on;
    FILE       *f;
    const char *what;       /* "soak", "quality" */
    uint64_t    t0, last;   /* ns; last: when the line was drawn */
    int         drawn;
} mt_progress;

/* The line itself, without "\r": "quality: position 1200 of 4096 (29%),
 * 0:12 elapsed, about 0:29 left". done and total in units of `unit`;
 * `detail` (may be NULL or "") is appended after "; ". Pure, for tests. */
void mt_progress_format(char *buf, size_t cap, const char *what,
                        const char *unit, double done, double total,
                        double elapsed_s, const char *detail);

/* A line on f (the main's terminal) when on; f NULL: none. */
void mt_progress_start(mt_progress *p, int on, FILE *f, const char *what,
                       uint64_t now_ns);
/* Redraws the line, at most every 0.5 s unless force. */
void mt_progress_show(mt_progress *p, uint64_t now_ns, int force,
                      const char *unit, double done, double total,
                      const char *detail);
/* Erases the line (before a result row is printed, and at the end). */
void mt_progress_clear(mt_progress *p);

#endif
