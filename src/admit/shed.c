/* shed.c: load shedding for mt-admit --shed; the policy and its reasons
 * are described in shed.h and mt-admit(1). */
#include "admit/shed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errmsg.h"
#include "util/grow.h"

struct mt_shed {
    mt_shed_opts    o;
    mt_shed_emit_fn emit;
    void           *ctx;
    uint32_t       *ids;        /* admitted, oldest first */
    int             n;
    size_t          cap;
    double          late_since; /* -1: not late */
    double          last_shed;  /* -1: never */
    int             hold_level; /* -1: none */
    double          hold_until;
    double          now;
    double          prev_late;  /* the last tick's late_ms */
    int64_t         active;
    int64_t         shed, episodes;
};

void mt_shed_opts_default(mt_shed_opts *o)
{
    memset(o, 0, sizeof *o);
    o->budget_ms = 80;
    o->target = 0.7;
    o->sustain_ms = 400;
    o->settle_ms = 400;
    o->hold_ms = 10000;
    o->order = MT_SHED_NEWEST;
}

int mt_shed_opts_check(const mt_shed_opts *o, char *err, size_t errlen)
{
    if (!(o->budget_ms > 0 && o->budget_ms <= 1e6))
        return mt_set_err(err, errlen, "shed: budget_ms out of range"), -1;
    if (!(o->target > 0 && o->target <= 1))
        return mt_set_err(err, errlen, "shed: target not in (0, 1]"), -1;
    if (!(o->sustain_ms >= 0 && o->sustain_ms <= 1e6))
        return mt_set_err(err, errlen, "shed: sustain_ms out of range"), -1;
    if (!(o->settle_ms >= 0 && o->settle_ms <= 1e6))
        return mt_set_err(err, errlen, "shed: settle_ms out of range"), -1;
    if (!(o->hold_ms >= 0 && o->hold_ms <= 1e7))
        return mt_set_err(err, errlen, "shed: hold_ms out of range"), -1;
    if (o->order != MT_SHED_NEWEST && o->order != MT_SHED_OLDEST)
        return mt_set_err(err, errlen, "shed: unknown order"), -1;
    return 0;
}

int mt_shed_order_parse(const char *s, mt_shed_order *order)
{
    if (!strcmp(s, "newest"))
        *order = MT_SHED_NEWEST;
    else if (!strcmp(s, "oldest"))
        *order = MT_SHED_OLDEST;
    else
        return -1;
    return 0;
}

int mt_shed_create(const mt_shed_opts *o, mt_shed_emit_fn emit, void *ctx,
                   mt_shed **out, char *err, size_t errlen)
{
    if (mt_shed_opts_check(o, err, errlen) != 0)
        return -1;
    mt_shed *s = calloc(1, sizeof *s);
    if (!s)
        return mt_set_err(err, errlen, "shed: out of memory"), -1;
    s->o = *o;
    s->emit = emit;
    s->ctx = ctx;
    s->late_since = -1;
    s->last_shed = -1;
    s->hold_level = -1;
    *out = s;
    return 0;
}

void mt_shed_free(mt_shed *s)
{
    if (!s)
        return;
    free(s->ids);
    free(s);
}

int mt_shed_admitted(mt_shed *s, uint32_t id)
{
    if (mt_grow(&s->ids, &s->cap, (size_t)s->n + 1, sizeof *s->ids, 64) != 0)
        return -1;
    s->ids[s->n++] = id;
    return 0;
}

/* Removes and returns the next session the order says goes; 0: none. */
static uint32_t take_victim(mt_shed *s)
{
    if (s->n == 0)
        return 0;
    if (s->o.order == MT_SHED_NEWEST)
        return s->ids[--s->n];
    uint32_t id = s->ids[0];
    memmove(s->ids, s->ids + 1, (size_t)(s->n - 1) * sizeof *s->ids);
    s->n--;
    return id;
}

void mt_shed_tick(mt_shed *s, const mt_tick *t)
{
    s->now = t->t;
    s->active = t->active;
    double prev_late = s->prev_late;
    s->prev_late = t->late_ms;
    double sig = t->step_ms > t->late_ms ? t->step_ms : t->late_ms;
    if (sig <= s->o.budget_ms || t->active <= 0) {
        s->late_since = -1;
        return;
    }
    if (s->late_since < 0)
        s->late_since = t->t;
    if ((t->t - s->late_since) * 1000 < s->o.sustain_ms)
        return;
    if (s->last_shed >= 0 && (t->t - s->last_shed) * 1000 < s->o.settle_ms)
        return;
    /* the step's cost is affine in the batch under a bounded cache: scaling
     * the batch by target x budget / step is a slight overestimate of what
     * fits (the fixed part does not shrink), corrected by the next judgement */
    /* step_ms covers `stepped` rows, catch-up rounds included (a late
     * tick steps more rows than there are sessions): cost a row from it */
    int64_t rows = t->stepped > 0 ? t->stepped : t->active;
    int64_t keep = t->active;
    if (t->step_ms > 0) {
        double fit = (double)rows * s->o.target * s->o.budget_ms / t->step_ms;
        if (fit < (double)t->active)
            keep = (int64_t)floor(fit);
    }
    int64_t k = t->active - keep;
    if (k < 1) {
        /* the step fits: a backlog left by the late stretch, shrinking as
         * the kept sessions catch up, is left to drain; one that does not
         * shrink cannot be worked off, and one more session goes */
        if (t->late_ms < prev_late)
            return;
        k = 1;
    }
    if (k > t->active)
        k = t->active;
    char reason[200];
    snprintf(reason, sizeof reason, "device slower than the admitted load "
             "(late %.0f ms over a %.0f ms budget for %.1f s; %s first)", sig,
             s->o.budget_ms, t->t - s->late_since,
             s->o.order == MT_SHED_NEWEST ? "newest" : "oldest");
    int done = 0;
    for (int64_t i = 0; i < k; i++) {
        uint32_t id = take_victim(s);
        if (!id)
            break;
        s->emit(s->ctx, id, reason);
        done++;
    }
    s->shed += done;
    if (done) {
        s->episodes++;
        s->last_shed = t->t;
        s->hold_level = (int)(t->active - done);
        s->hold_until = t->t + s->o.hold_ms / 1000;
    }
}

int mt_shed_allow_accept(const mt_shed *s)
{
    if (s->hold_level < 0 || s->now >= s->hold_until)
        return 1;
    return s->active < s->hold_level;
}

void mt_shed_get_stats(const mt_shed *s, mt_shed_stats *st)
{
    st->shed = s->shed;
    st->episodes = s->episodes;
    st->first_late_t = s->late_since;
    st->cap = s->hold_level;
}
