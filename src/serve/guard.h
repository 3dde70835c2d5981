/* guard.h: what every listener of mt-serve does against a crowd (the
 * frame socket's TCP side, --ws, --metrics), in one place:
 *
 *   - the doubling wait after a failed authentication, per peer address
 *     (a bounded table: the oldest entry makes room; ten quiet minutes
 *     clear a count), with a budget of connections held for it (one per
 *     address, MT_GUARD_HELD_MAX in all; past it, the refusal goes at once);
 *   - log lines that come in crowds: the first of each reason in an
 *     interval is logged in full, the others counted and summed up in one
 *     line at the interval's end.
 *
 * No clock but the caller's `now`, no descriptor: tests run it on a table.
 */
#ifndef MT_GUARD_H
#define MT_GUARD_H

#include <stddef.h>
#include <stdint.h>

#define MT_GUARD_FAIL_TABLE    64   /* peer addresses whose failures count */
#define MT_GUARD_DELAY_NS      250000000ull    /* first failure's wait; doubles */
#define MT_GUARD_DELAY_MAX_NS  8000000000ull
#define MT_GUARD_FORGET_NS     600000000000ull /* ten quiet minutes clear a count */
#define MT_GUARD_HELD_PER_ADDR 1    /* connections of one address held */
#define MT_GUARD_HELD_MAX      16   /* connections held in all */
#define MT_GUARD_AGG_REASONS   8    /* distinct reasons counted per interval */
#define MT_GUARD_REPORT_NS     10000000000ull  /* one summary per 10 s */

/* Authentication failures of one peer address. */
typedef struct mt_guard_fail {
    char     addr[64];           /* without the port */
    unsigned count;
    unsigned held;               /* its connections waiting for a refusal */
    uint64_t last;
} mt_guard_fail;

typedef struct mt_guard_fails {
    mt_guard_fail t[MT_GUARD_FAIL_TABLE];
    unsigned      held;          /* connections held, all addresses */
} mt_guard_fails;

/* The record of addr, made when missing (the oldest gives way). */
mt_guard_fail *mt_guard_fail_entry(mt_guard_fails *f, const char *addr, uint64_t now);
/* The record of addr, or NULL. */
mt_guard_fail *mt_guard_fail_find(mt_guard_fails *f, const char *addr);
/* One more failure of a at now: the wait before its refusal (doubling
 * from MT_GUARD_DELAY_NS up to MT_GUARD_DELAY_MAX_NS), or 0 when the
 * held budgets are spent (refuse at once). A nonzero wait holds one
 * place until mt_guard_fail_unhold. */
uint64_t mt_guard_fail_note(mt_guard_fails *f, mt_guard_fail *a, uint64_t now);
/* A held connection of addr is answered or gone. */
void mt_guard_fail_unhold(mt_guard_fails *f, const char *addr);
/* "ADDR:PORT" (or "[V6]:PORT") without the port. */
void mt_guard_host(const char *peer, char *buf, size_t cap);

/* Lines one per event that anyone can cause in numbers (a session's
 * "admitted" and "closed"): a bucket of MT_GUARD_LINES_BURST lines,
 * refilled at MT_GUARD_LINES_PER_S; past it the events are counted for the
 * summary. */
#define MT_GUARD_LINES_BURST 64
#define MT_GUARD_LINES_PER_S 10
typedef struct mt_guard_rate {
    uint64_t last;               /* when the bucket was last refilled */
    uint64_t tokens_ns;          /* the bucket, in ns of refill */
    uint64_t n_quiet;            /* events not logged this interval */
} mt_guard_rate;

/* 1: log this event's lines; 0: it is counted in n_quiet. */
int mt_guard_rate_take(mt_guard_rate *r, uint64_t now);

typedef struct mt_guard_agg_reason {
    char     reason[96];
    uint64_t n;                  /* this interval, the logged one included */
} mt_guard_agg_reason;

typedef struct mt_guard_agg {
    mt_guard_agg_reason r[MT_GUARD_AGG_REASONS];
    uint64_t other;              /* reasons past the table's size */
    uint64_t since;              /* start of the interval (0: none yet) */
} mt_guard_agg;

/* Whether a crowd-prone line of reason is logged in full now (the first
 * in its interval); else it is counted for the summary. */
int mt_guard_agg_note(mt_guard_agg *a, const char *reason, uint64_t now);
/* The interval's summary when one is due (force: now, if anything was
 * counted): 1 with msg ("N x reason, ...") and *secs (the interval's
 * length), else 0. The interval starts again. */
int mt_guard_agg_summary(mt_guard_agg *a, uint64_t now, int force, char *msg,
                         size_t cap, double *secs);

#endif
