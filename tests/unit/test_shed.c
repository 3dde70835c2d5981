/* test_shed.c: the load shedder (src/admit/shed.c) on synthetic tick
 * records: nothing is shed for a single late tick or for lateness shorter
 * than the sustain time; a sustained stretch sheds the newest sessions
 * (or the oldest, by option), as many as bring the step under target x
 * budget; it waits settle_ms before judging again, leaves a shrinking
 * backlog to drain, sheds one more for a backlog that does not shrink,
 * and holds admissions at the level it shed to for hold_ms. */
#include "admit/shed.h"
#include "tap.h"

#include <string.h>

static uint32_t shed_ids[256];
static int nshed;
static char last_reason[256];

static void on_shed(void *ctx, uint32_t id, const char *reason)
{
    (void)ctx;
    if (nshed < 256)
        shed_ids[nshed++] = id;
    snprintf(last_reason, sizeof last_reason, "%s", reason);
}

static mt_tick tk(double t, int active, double step, double late)
{
    mt_tick x;
    memset(&x, 0, sizeof x);
    x.t = t;
    x.active = active;
    x.stepped = active;
    x.step_ms = step;
    x.late_ms = late;
    return x;
}

static void feed(mt_shed *s, mt_tick x)
{
    mt_shed_tick(s, &x);
}

static mt_shed *open_shed(mt_shed_order order, int n)
{
    mt_shed_opts o;
    mt_shed_opts_default(&o);
    o.order = order;
    mt_shed *s = NULL;
    char err[128];
    if (mt_shed_create(&o, on_shed, NULL, &s, err, sizeof err) != 0)
        return NULL;
    for (int i = 1; i <= n; i++)
        mt_shed_admitted(s, (uint32_t)i);
    nshed = 0;
    return s;
}

int main(void)
{
    mt_shed_opts o;
    char err[128];
    mt_shed_opts_default(&o);
    ok(o.budget_ms == 80 && o.target == 0.7 && o.order == MT_SHED_NEWEST,
       "defaults: 80 ms, target 0.7, newest first");
    o.target = 0;
    ok(mt_shed_opts_check(&o, err, sizeof err) == -1 && strstr(err, "target"),
       "a target of 0 is refused (%s)", err);
    mt_shed_order ord;
    ok(mt_shed_order_parse("oldest", &ord) == 0 && ord == MT_SHED_OLDEST &&
       mt_shed_order_parse("random", &ord) == -1, "order names");

    mt_shed *s = open_shed(MT_SHED_NEWEST, 30);
    double t = 10;
    for (int i = 0; i < 20; i++, t += 0.08)
        feed(s, tk(t, 30, 62, 70));
    ok(nshed == 0, "on time: nothing shed");
    feed(s, tk(t, 30, 95, 100));
    t += 0.08;
    feed(s, tk(t, 30, 62, 70));
    t += 0.08;
    ok(nshed == 0, "a single late tick: nothing shed");
    /* the drop: 88 ms steps; sustained for 0.4 s before anything goes */
    double drop = t;
    while (t < drop + 0.35) {
        feed(s, tk(t, 30, 88, 95));
        t += 0.08;
    }
    ok(nshed == 0, "late for under 0.4 s: nothing shed yet");
    feed(s, tk(t, 30, 88, 110));
    t += 0.08;
    /* keep floor(30 x 0.7 x 80 / 88) = 19: 11 go, the newest first */
    ok(nshed == 11, "sustained: 11 shed (%d)", nshed);
    ok(nshed == 11 && shed_ids[0] == 30 && shed_ids[10] == 20, "newest first: 30 .. 20");
    ok(strstr(last_reason, "newest first") && strstr(last_reason, "80 ms budget"),
       "a plain reason: %s", last_reason);
    ok(!mt_shed_allow_accept(s), "held: no admission at the level shed to");
    /* the backlog drains: late but shrinking, with a step that fits */
    double lates[] = { 150, 130, 110, 95, 85 };
    for (int i = 0; i < 5; i++, t += 0.08)
        feed(s, tk(t, 19, 56, lates[i]));
    ok(nshed == 11, "a shrinking backlog is left to drain (%d)", nshed);
    /* a backlog that stops shrinking after settle: one more goes */
    for (int i = 0; i < 4; i++, t += 0.08)   /* within one settle time */
        feed(s, tk(t, 19, 56, 120));
    ok(nshed == 12 && shed_ids[11] == 19, "a backlog that does not shrink: one more (%d)", nshed);
    for (int i = 0; i < 3; i++, t += 0.08)
        feed(s, tk(t, 18, 53, 60));
    ok(nshed == 12, "back under the budget: no more");
    ok(mt_shed_allow_accept(s) == 0, "still held at 18");
    feed(s, tk(t + 11, 17, 50, 55));
    ok(mt_shed_allow_accept(s), "the hold ends after 10 s");
    mt_shed_stats st;
    mt_shed_get_stats(s, &st);
    ok(st.shed == 12 && st.episodes == 2, "stats: 12 shed in 2 episodes");
    mt_shed_free(s);

    /* oldest first; catch-up rows are costed per row */
    s = open_shed(MT_SHED_OLDEST, 10);
    t = 0;
    for (int i = 0; i < 7; i++, t += 0.08) {
        mt_tick x = tk(t, 10, 120, 130);
        x.stepped = 12;     /* a catch-up round: 12 rows for 120 ms */
        mt_shed_tick(s, &x);
    }
    /* per row 10 ms: keep floor(12 x 56 / 120) = 5 */
    ok(nshed == 5 && shed_ids[0] == 1 && shed_ids[4] == 5,
       "oldest first, sized per stepped row: 1 .. 5 (%d)", nshed);
    mt_shed_free(s);

    /* nothing admitted that it knows of: nothing to shed, no crash */
    s = open_shed(MT_SHED_NEWEST, 0);
    for (int i = 0; i < 10; i++)
        feed(s, tk(i * 0.08, 5, 200, 300));
    ok(nshed == 0, "no known sessions: none shed");
    mt_shed_free(s);
    return tap_done();
}
