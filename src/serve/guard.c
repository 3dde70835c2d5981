/* guard.c: failed-authentication waits and crowd-log summaries shared by
 * mt-serve's listeners (see guard.h). */
#include "serve/guard.h"

#include <stdio.h>
#include <string.h>

mt_guard_fail *mt_guard_fail_entry(mt_guard_fails *f, const char *addr, uint64_t now)
{
    mt_guard_fail *old = &f->t[0];
    for (int i = 0; i < MT_GUARD_FAIL_TABLE; i++) {
        mt_guard_fail *a = &f->t[i];
        if (a->count && !a->held && now - a->last > MT_GUARD_FORGET_NS)
            a->count = 0;
        if (a->count && !strcmp(a->addr, addr))
            return a;
        if (!a->count || (old->count && a->last < old->last))
            old = a;
    }
    /* an entry with held connections keeps its place in f->held only */
    memset(old, 0, sizeof *old);
    snprintf(old->addr, sizeof old->addr, "%s", addr);
    return old;
}

mt_guard_fail *mt_guard_fail_find(mt_guard_fails *f, const char *addr)
{
    for (int i = 0; i < MT_GUARD_FAIL_TABLE; i++)
        if (f->t[i].count && !strcmp(f->t[i].addr, addr))
            return &f->t[i];
    return NULL;
}

uint64_t mt_guard_fail_note(mt_guard_fails *f, mt_guard_fail *a, uint64_t now)
{
    a->count++;
    a->last = now;
    uint64_t delay = MT_GUARD_DELAY_NS;
    for (unsigned i = 1; i < a->count && delay < MT_GUARD_DELAY_MAX_NS; i++)
        delay *= 2;
    if (delay > MT_GUARD_DELAY_MAX_NS)
        delay = MT_GUARD_DELAY_MAX_NS;
    if (a->held >= MT_GUARD_HELD_PER_ADDR || f->held >= MT_GUARD_HELD_MAX)
        return 0;
    a->held++;
    f->held++;
    return delay;
}

void mt_guard_fail_unhold(mt_guard_fails *f, const char *addr)
{
    if (f->held)
        f->held--;
    mt_guard_fail *a = mt_guard_fail_find(f, addr);
    if (a && a->held)
        a->held--;
}

void mt_guard_host(const char *peer, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", peer);
    char *colon = strrchr(buf, ':');
    if (colon)
        *colon = '\0';
}

int mt_guard_rate_take(mt_guard_rate *r, uint64_t now)
{
    const uint64_t per = 1000000000ull / MT_GUARD_LINES_PER_S;
    const uint64_t full = per * MT_GUARD_LINES_BURST;
    if (!r->last) {
        r->tokens_ns = full;
    } else if (now > r->last) {
        uint64_t add = now - r->last;
        r->tokens_ns = add >= full - r->tokens_ns ? full : r->tokens_ns + add;
    }
    r->last = now;
    if (r->tokens_ns >= per) {
        r->tokens_ns -= per;
        return 1;
    }
    r->n_quiet++;
    return 0;
}

int mt_guard_agg_note(mt_guard_agg *g, const char *reason, uint64_t now)
{
    if (!g->since)
        g->since = now;
    mt_guard_agg_reason *free_slot = NULL;
    for (int i = 0; i < MT_GUARD_AGG_REASONS; i++) {
        mt_guard_agg_reason *a = &g->r[i];
        if (a->n && !strncmp(a->reason, reason, sizeof a->reason - 1))
            return a->n++ == 0;
        if (!a->n && !free_slot)
            free_slot = a;
    }
    if (!free_slot) {
        g->other++;
        return 0;
    }
    snprintf(free_slot->reason, sizeof free_slot->reason, "%s", reason);
    free_slot->n = 1;
    return 1;
}

int mt_guard_agg_summary(mt_guard_agg *g, uint64_t now, int force, char *msg,
                         size_t cap, double *secs)
{
    if (!g->since || (!force && now - g->since < MT_GUARD_REPORT_NS))
        return 0;
    size_t len = 0;
    uint64_t more = g->other;
    msg[0] = '\0';
    for (int i = 0; i < MT_GUARD_AGG_REASONS; i++) {
        mt_guard_agg_reason *a = &g->r[i];
        if (a->n > 1 && len < cap) {
            int k = snprintf(msg + len, cap - len, "%s%llu x %s", len ? ", " : "",
                             (unsigned long long)(a->n - 1), a->reason);
            len += k > 0 ? (size_t)k : 0;
        }
        a->n = 0;
    }
    if (more && len < cap)
        snprintf(msg + len, cap - len, "%s%llu of other reasons", len ? ", " : "",
                 (unsigned long long)more);
    *secs = (double)(now - g->since) / 1e9;
    g->other = 0;
    g->since = 0;
    return len || more;
}
