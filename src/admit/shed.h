/* shed.h: load shedding for mt-admit --shed.
 *
 * An admission controller can only stop admitting; when the device slows
 * under the admitted load (a capacity drop, a noisy neighbour), every
 * session goes late together and stays late. The shedder watches the same
 * tick records as the policies and, when the tick's service latency
 * (max(step_ms, late_ms)) has been over the budget for a sustained stretch,
 * picks sessions to end (`shed ID reason` control lines) until lateness
 * returns under the budget.
 *
 * How many: enough that the step time, scaled down in proportion to the
 * batch, lands under target x budget: k = active - floor(stepped x target
 * x budget / step_ms) (stepped: the rows step_ms paid for, catch-up rounds
 * included), at least one when the step fits but the backlog does not
 * shrink. Under the bounded cache a step's cost
 * is affine in the batch, so this is a truthful estimate; the target sits
 * below the admission margin so the kept sessions also have headroom to
 * work off the backlog the late stretch left. After a shed it waits
 * settle_ms for the effect to show in the ticks before judging again.
 *
 * Which: the policy (newest first by default: the sessions that arrived
 * last lose the least, and the oldest have the longest-running promise;
 * oldest first is the other choice). The shedder learns the admitted
 * sessions from the server's own `admit ... verdict=accept` lines; it
 * does not see sessions end, so an id already gone is skipped by the
 * server (it logs it), and the next judgement sheds again if needed.
 *
 * After a shed it also holds admissions at the level it shed to for
 * hold_ms (mt_shed_allow_accept), so the policy's stale estimate of the
 * old capacity does not admit straight back into lateness.
 *
 * Library code: never prints, never exits. Time comes from the lines.
 */
#ifndef MT_SHED_H
#define MT_SHED_H

#include <stddef.h>
#include <stdint.h>

#include "wire/latline.h"

typedef enum mt_shed_order { MT_SHED_NEWEST = 0, MT_SHED_OLDEST = 1 } mt_shed_order;

typedef struct mt_shed_opts {
    double budget_ms;     /* the budget the signal is held to (80) */
    double target;        /* shed so the step lands under target x budget (0.7) */
    double sustain_ms;    /* lateness this long before shedding (400) */
    double settle_ms;     /* after a shed, wait this long before the next (400) */
    double hold_ms;       /* after a shed, admit no more than the level shed
                             to for this long (10000) */
    mt_shed_order order;  /* which sessions go (newest first) */
} mt_shed_opts;

void mt_shed_opts_default(mt_shed_opts *o);
/* 0, or -1 with err naming the field out of range. */
int  mt_shed_opts_check(const mt_shed_opts *o, char *err, size_t errlen);
/* "newest" or "oldest". 0, or -1. */
int  mt_shed_order_parse(const char *s, mt_shed_order *order);

/* Called once per session to end, with a plain reason for its END. */
typedef void (*mt_shed_emit_fn)(void *ctx, uint32_t id, const char *reason);

typedef struct mt_shed mt_shed;

int  mt_shed_create(const mt_shed_opts *o, mt_shed_emit_fn emit, void *ctx,
                    mt_shed **out, char *err, size_t errlen);
void mt_shed_free(mt_shed *s);

/* The server admitted id (its verdict line): a candidate, newest last. */
int  mt_shed_admitted(mt_shed *s, uint32_t id);
/* A tick record: judges lateness and sheds (through emit). */
void mt_shed_tick(mt_shed *s, const mt_tick *t);
/* May the policy's accept go ahead now (active sessions: the last tick's)?
 * 0 while a shed's hold is on and active is at the level shed to. */
int  mt_shed_allow_accept(const mt_shed *s);

typedef struct mt_shed_stats {
    int64_t shed;          /* sessions shed (shed lines written) */
    int64_t episodes;      /* judgements that shed */
    double  first_late_t;  /* start of the last late stretch; -1: none */
    int     cap;           /* level held after the last shed; -1: none */
} mt_shed_stats;
void mt_shed_get_stats(const mt_shed *s, mt_shed_stats *st);

#endif
