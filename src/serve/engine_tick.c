/* engine_tick.c: the tick (mt_engine_tick): the first round over every
 * session, the catch-up rounds that fit in the period, and the tick
 * record. Calls engine_batch.c (the rounds), engine.c (the published
 * limit) and engine_outq.c (the lines). Tick thread.
 */
#define _GNU_SOURCE
#include "serve/engine_int.h"
#include "util/stats.h"

#include <stdio.h>
#include <string.h>

/* ---- the tick (tick thread) ----------------------------------------------- */

/* Sessions with a frame that arrived before this tick still queued: what
 * a catch-up round would step. */
static int count_behind(mt_engine *e, uint64_t t_tick)
{
    int n = 0;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->ns; i++) {
        sess *s = e->s[i];
        if (s->state == S_ACTIVE && s->qlen > 0 &&
            s->q[s->qhead].t_arrive <= t_tick)
            n++;
    }
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* Rows of the next catch-up round after a round of n rows that began at r0,
 * or 0 for none. round0_ns: what the tick's first round (every session)
 * cost; borrow: no catch-up round has run in this tick yet.
 *
 * A catch-up round steps sessions still behind (a frame that arrived before
 * this tick still queued: a client phase-shifted against the ticks, or every
 * session after an overrun tick), as many as fit before 15/16 of the
 * period, costed from the last round: per row, plus a fixed part for the
 * weights every round reads whatever its batch (an eighth of the round, or
 * what the last catch-up round showed it to be, whichever is more). The
 * rest catch up in later ticks. Without it a single overrun leaves every
 * session one frame behind (late by a period) for good, near capacity where
 * a full second round never fits.
 *
 * Near capacity no catch-up round fits before 15/16 of the period at all,
 * and a session behind stays behind (late by a period at every tick) until
 * the lag drains by chance. So the first catch-up round of a tick may
 * borrow the next tick's slack: it may end as late as the next tick can
 * start and still, with a first round costing what this one did, end within
 * its period (t_tick + 2 P - round0). The next tick then starts late by at
 * most its own slack and ends on time: a lag drains by a round each tick
 * instead of never. Never more than one borrowed round a tick, and only
 * while the first round leaves slack (round0 < P). */
static int catch_up_rows(mt_engine *e, uint64_t t_tick, uint64_t r0, int n,
                         uint64_t round0_ns, int borrow)
{
    int behind = count_behind(e, t_tick);
    if (behind == 0)
        return 0;
    uint64_t t = eng_now(e), dur = t - r0, P = e->o.frame_ns;
    uint64_t per_row = dur / (uint64_t)n, fixed = dur / 8;
    if (e->round_fixed_ns > fixed)
        fixed = e->round_fixed_ns;
    uint64_t end = t_tick + P * 15 / 16;
    if (t + fixed + per_row > end) {
        if (!borrow || round0_ns >= P)
            return 0;
        end = t_tick + 2 * P - round0_ns;
        if (t + fixed + per_row > end)
            return 0;
    }
    uint64_t fit = (end - t - fixed) / (per_row ? per_row : 1);
    return fit < (uint64_t)behind ? (int)fit : behind;
}

/* Fills the tick record from the sessions and this tick's counters, and
 * resets the counters. Under the lock. */
static void tick_figures(mt_engine *e, mt_tick *t, uint64_t t_end)
{
    uint64_t oldest = 0;
    t->active = e->nstate[S_ACTIVE];
    t->pending = e->nstate[S_PENDING];
    for (int i = 0; i < e->ns; i++) {
        sess *s = e->s[i];
        if (s->state == S_ACTIVE && s->qlen > 0) {
            uint64_t a = s->q[s->qhead].t_arrive;
            if (!oldest || a < oldest)
                oldest = a;
        }
    }
    t->late_ms = oldest && t_end > oldest ? (double)(t_end - oldest) / 1e6 : 0;
    size_t n = (size_t)e->nlat;
    t->p50_ms = n ? mt_stats_percentile(e->lat, n, 0.50) : 0;   /* sorts */
    t->p99_ms = n ? e->lat[mt_stats_rank(n, 0.99)] : 0;
    t->in = e->c.in;
    t->out = e->c.out;
    t->fill = e->c.fill;
    t->miss = e->c.miss;
    t->kv_used = (int64_t)mt_kv_used_bytes(e->pool);
    t->kv_free = (int64_t)mt_kv_free_bytes(e->pool);
    t->admitted = e->admitted;
    t->rejected = e->rejected;
    t->shed = e->shed;
    t->preempted = e->c.preempted;
    if (e->c.answered > 0) {
        double answered = (double)e->c.answered;
        t->naive_met = 100.0 * (double)(e->c.met_real + e->c.fill) / answered;
        t->met = 100.0 * (double)e->c.met_real / answered;
    } else {
        t->naive_met = 100.0;
        t->met = 100.0;
    }
    /* every tick names its device; a simulated one also gives the
     * profile's prediction for the steps this tick ran */
    const char *sim_label = mt_decoder_sim_label(e->dec);
    snprintf(t->device, sizeof t->device, "%s",
             sim_label ? sim_label : mt_decoder_backend_name(e->dec));
    if (sim_label)
        mt_decoder_sim_take(e->dec, &t->sim_pred_ms, &t->sim_noise_ms);
    memset(&e->c, 0, sizeof e->c);
}

void mt_engine_set_round_out(mt_engine *e, void (*fn)(void *ctx), void *ctx)
{
    e->round_out = fn;
    e->round_out_ctx = ctx;
}

int mt_engine_tick(mt_engine *e, int64_t tick, uint64_t t_tick,
                   char *err, size_t errlen)
{
    uint64_t t_begin = eng_now(e);
    double comp_ms = 0, step_only_ms = 0;
    int stepped = 0, rc = 0;
    e->nlat = 0;
    int max_rows = e->o.max_sessions;
    uint64_t round0_ns = 0, per_row0 = 0;
    int caught_up = 0;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        uint64_t r0 = eng_now(e);
        int n = eng_run_round(e, round, max_rows, t_tick, &comp_ms, &step_only_ms,
                          err, errlen);
        if (n < 0) {
            rc = -1;
            break;
        }
        stepped += n;
        uint64_t dur = eng_now(e) - r0;
        if (round == 0 && n > 0) {
            round0_ns = dur;
            per_row0 = dur / (uint64_t)n;
        } else if (round > 0 && n > 0) {
            /* a small round against the full one: what is not per row is
             * the fixed cost (on a GPU, the weights read whatever the batch) */
            uint64_t rows = (uint64_t)n * per_row0;
            e->round_fixed_ns = dur > rows ? dur - rows : 0;
        }
        if (n == 0 || !e->o.catch_up)
            break;
        max_rows = catch_up_rows(e, t_tick, r0, n, round0_ns, round == 0);
        if (max_rows == 0)
            break;
        caught_up = 1;
        if (e->round_out)       /* this round's answers out before the next */
            e->round_out(e->round_out_ctx);
    }
    /* the fixed cost learnt from a catch-up round fades over ticks without
     * one (a round slowed by a hiccup must not block catch-up for good) */
    if (!caught_up)
        e->round_fixed_ns -= e->round_fixed_ns / 16;

    mt_tick t;
    memset(&t, 0, sizeof t);
    t.tick = tick;
    t.t = (double)(t_begin - e->t0) / 1e9;
    t.stepped = stepped;
    t.step_ms = comp_ms;
    t.naive_ms = step_only_ms;
    uint64_t t_end = eng_now(e);
    pthread_mutex_lock(&e->mu);
    tick_figures(e, &t, t_end);
    if (rc != 0 && !e->fail_msg[0])
        snprintf(e->fail_msg, sizeof e->fail_msg, "%s", err && *err ? err : "tick failed");
    pthread_mutex_unlock(&e->mu);
    t.has_limit = 1;
    t.limit = mt_engine_published_limit(e, NULL, 0);

    eng_sb_flush(e, &e->tick_lines);
    char line[MT_LL_MAX_LINE];
    if (mt_tick_format(&t, line, sizeof line) > 0 && e->o.line)
        e->o.line(e->o.line_ctx, line);
    if (e->o.tick_rec)
        e->o.tick_rec(e->o.tick_rec_ctx, &t);
    return rc;
}

