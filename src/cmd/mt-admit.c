/* mt-admit: the online admission controller for mt-serve.
 *
 * Thin main over admit.c and feed.c: reads mt-serve's machine stream (tick lines,
 * `request` and `admit` lines; anything else ignored) on stdin or from a
 * recorded log (--replay), feeds it to the chosen policy, and writes
 * `accept ID` / `reject ID reason` and `limit N` lines (and, with --shed,
 * `shed ID reason` lines: shed.h) to stdout, flushed
 * one by one, for mt-serve's --control input. A bad line is counted and
 * reported with its line number, never fatal: the controller must outlive
 * any garbage on its input. End of input ends it cleanly.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admit/admit.h"
#include "admit/feed.h"
#include "admit/shed.h"
#include "wire/admission.h"
#include "cmd/opt.h"
#include "wire/latline.h"

static const char *prog = "mt-admit";

static void usage(FILE *f)
{
    fprintf(f,
"usage: mt-admit [options] < mt-serve-stdout > control\n"
"       mt-admit --replay LOG [--policy P[,P...]] [options]\n"
"  -b, --budget MS        latency budget per tick (default 80; \"80ms\" too)\n"
"  -p, --policy P         metronome (default), aimd, gradient, static:N;\n"
"                         with --replay a comma list compares several\n"
"  -m, --margin F         aim under F x budget (default 0.8)\n"
"      --signal S         service (max of step_ms and late_ms, default) or p99\n"
"      --hold MS          longest a request waits for a fresh signal (1000)\n"
"      --max-limit N      never admit more than N at once (1024)\n"
"  metronome:\n"
"      --settle N         ticks observed at a new level before the next\n"
"                         accept (6)\n"
"      --stale N          ticks to wait for an accept to show (40)\n"
"      --forget N         samples older than N ticks are forgotten (3000)\n"
"      --z F              standard errors of the fit added (2.0)\n"
"      --quantile-z F     per-level tail: median + F sigma (2.33, ~p99)\n"
"      --probe F          past the margin, probe one level at a time while a\n"
"                         level's p99 plus the fitted slope stays under\n"
"                         F x budget (1.0; F <= margin: no probe)\n"
"      --probe-ticks N    samples of a level before probing above it (48)\n"
"      --headroom 0|1     1: probe only while the next level leaves room to\n"
"                         drain the largest recent hiccup within a tick (1)\n"
"  aimd, gradient:\n"
"      --interval N       ticks between limit updates (12)\n"
"      --initial N        initial limit (1)\n"
"      --beta F           aimd: decrease factor on a violation (0.7)\n"
"      --tolerance F      gradient: latency inflation tolerated (2.0)\n"
"      --long N           gradient: window of the minimum, ticks (600)\n"
"      --smoothing F      gradient: limit smoothing (0.2)\n"
"      --queue N          gradient: queue allowance (default sqrt(limit))\n"
"  shedding (off by default; see mt-admit(1)):\n"
"      --shed             end sessions (newest first) while lateness over the\n"
"                         budget is sustained, until it is back under\n"
"      --shed-order O     newest (default) or oldest\n"
"      --shed-target F    shed so the step lands under F x budget (0.7)\n"
"      --shed-sustain MS  lateness this long before shedding (400)\n"
"      --shed-settle MS   after a shed, wait before judging again (400)\n"
"      --shed-hold MS     after a shed, admit no more than what was kept (10000)\n"
"  output:\n"
"      --status-every N   a status line on stderr every N ticks (25; 0 off)\n"
"      --replay LOG       offline: print the decisions for a recorded log\n"
"  -h, --help             this help\n"
"      --version          print the version\n"
"See mt-admit(1).\n");
}

/* ---- one run of one policy over one input ------------------------------ */

typedef struct run {
    FILE  *out;
    int    replay;
    int    out_failed;
    long   out_failed_line;     /* input line at the first failed write */
    long   ticks_after_fail;    /* tick lines read since */
    mt_admit *a;
    mt_admit_feed feed;         /* the input: line number, time, counts */
    int    last_limit;
    long   reported;
    int    status_every;
    const char *policy_name;
    mt_shed *shed;      /* NULL: --shed not given */
} run;

static void out_line(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_line(run *r, const char *fmt, ...)
{
    if (r->out_failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    int rc = vfprintf(r->out, fmt, ap);
    va_end(ap);
    if (rc < 0 || fflush(r->out) != 0) {
        r->out_failed = 1;
        r->out_failed_line = r->feed.lineno;
    }
}

/* A server that exits closes its control input first and its output a
 * moment later, and the lines still in the pipe can carry requests: a
 * write that fails then is the normal end of a session with the server,
 * not an error. The server is still running, without a controller, when
 * it keeps stepping: this many tick lines (2 s) after the failure say so. */
#define OUT_FAIL_TICKS 25

/* A decision for mt-serve's --control input, in the codec both share. */
static void control_out(run *r, const mt_control *c)
{
    char line[MT_CONTROL_MAX_LINE + 1];
    if (mt_control_format(c, line, sizeof line) < 0) {
        fprintf(stderr, "%s: cannot write a control line for session %u\n", prog,
                c->session);
        return;
    }
    out_line(r, "%s\n", line);
}

static void emit(void *ctx, uint32_t id, int accept, const char *reason)
{
    run *r = ctx;
    /* after a shed the policy's estimate is the old capacity's: hold
     * admissions at what was kept (the server's verdict line then tells
     * the policy the session was refused) */
    char held[160];
    if (accept && r->shed && !mt_shed_allow_accept(r->shed)) {
        mt_shed_stats ss;
        mt_shed_get_stats(r->shed, &ss);
        snprintf(held, sizeof held, "shedding: holding at %d session%s", ss.cap,
                 ss.cap == 1 ? "" : "s");
        accept = 0;
        reason = held;
    }
    if (r->replay) {
        if (accept)
            out_line(r, "decision line=%ld t=%.3f policy=%s session=%u verdict=accept\n",
                     r->feed.lineno, r->feed.t, r->policy_name, id);
        else
            out_line(r, "decision line=%ld t=%.3f policy=%s session=%u verdict=reject "
                     "reason=\"%s\"\n", r->feed.lineno, r->feed.t, r->policy_name, id, reason);
    } else {
        mt_control c = {.kind = accept ? MT_CONTROL_ACCEPT : MT_CONTROL_REJECT,
                        .session = id};
        if (!accept)
            snprintf(c.reason, sizeof c.reason, "%s", reason ? reason : "");
        control_out(r, &c);
    }
}

static void emit_shed(void *ctx, uint32_t id, const char *reason)
{
    run *r = ctx;
    if (r->replay) {
        out_line(r, "shed line=%ld t=%.3f policy=%s session=%u reason=\"%s\"\n",
                 r->feed.lineno, r->feed.t, r->policy_name, id, reason);
        return;
    }
    mt_control c = {.kind = MT_CONTROL_SHED, .session = id};
    snprintf(c.reason, sizeof c.reason, "%s", reason);
    control_out(r, &c);
}

static void report_bad(void *ctx, const char *msg)
{
    run *r = ctx;
    if (r->reported < 100) {
        fprintf(stderr, "%s: ignoring bad input: %s\n", prog, msg);
        r->reported++;
        if (r->reported == 100)
            fprintf(stderr, "%s: further bad lines are only counted\n", prog);
    }
}

static void check_limit(run *r)
{
    int l = mt_admit_limit(r->a);
    if (l == r->last_limit)
        return;
    r->last_limit = l;
    if (r->replay)
        out_line(r, "limit line=%ld t=%.3f policy=%s limit=%d\n", r->feed.lineno, r->feed.t,
                 r->policy_name, l);
    else
        control_out(r, &(mt_control){.kind = MT_CONTROL_LIMIT, .limit = l});
}

static void status(run *r, const char *why)
{
    char buf[1024];
    mt_admit_status(r->a, buf, sizeof buf);
    fprintf(stderr, "%s%s%s bad_lines=%ld\n", buf, why ? " at=" : "", why ? why : "",
            r->feed.bad_lines);
}

/* One line handled by the feed: the controller's limit and the status
 * line follow it. */
static void after_line(run *r, mt_feed_kind k)
{
    if (r->shed && k == MT_FEED_TICK)
        mt_shed_tick(r->shed, &r->feed.tick);
    if (r->shed && k == MT_FEED_VERDICT && r->feed.verdict.accept &&
        mt_shed_admitted(r->shed, r->feed.verdict.session) != 0)
        report_bad(r, "shed: out of memory for the admitted sessions");
    if (k == MT_FEED_TICK && r->status_every > 0) {
        mt_admit_stats st;
        mt_admit_get_stats(r->a, &st);
        if (st.ticks % r->status_every == 0)
            status(r, NULL);
    }
    if (k != MT_FEED_NONE && k != MT_FEED_EMPTY && k != MT_FEED_BAD)
        check_limit(r);
}

static int run_input(run *r, FILE *in)
{
    int c;
    r->last_limit = -1;
    check_limit(r);
    while ((c = getc(in)) != EOF) {
        mt_feed_kind k = mt_admit_feed_putc(&r->feed, c);
        if (k == MT_FEED_NONE)
            continue;
        after_line(r, k);
        if (r->out_failed && mt_admit_feed_last_is_tick(&r->feed))
            r->ticks_after_fail++;
        if (r->out_failed && (r->replay || r->ticks_after_fail > OUT_FAIL_TICKS))
            break;
    }
    after_line(r, mt_admit_feed_finish(&r->feed));   /* a last line without newline */
    if (ferror(in)) {
        fprintf(stderr, "%s: read error: %s\n", prog, strerror(errno));
        return -1;
    }
    mt_admit_finish(r->a);
    return 0;
}

/* ---- the command line ----------------------------------------------------- */

static const mt_cli cli = {
    "mt-admit", "mt-admit [options] < mt-serve-stdout > control | --replay LOG [options]",
    usage,
};

enum {
    O_SIGNAL = 256, O_HOLD, O_MAXLIM, O_SETTLE, O_STALE, O_FORGET, O_Z, O_QZ,
    O_INTERVAL, O_INITIAL, O_BETA, O_TOL, O_LONG, O_SMOOTH, O_QUEUE, O_STATUS,
    O_REPLAY, O_SHED, O_SHED_ORDER, O_SHED_TARGET, O_SHED_SUSTAIN, O_SHED_SETTLE,
    O_SHED_HOLD, O_PROBE, O_PROBE_TICKS, O_HEADROOM,
};

static const struct option longopts[] = {
    {"budget", required_argument, 0, 'b'},
    {"policy", required_argument, 0, 'p'},
    {"margin", required_argument, 0, 'm'},
    {"signal", required_argument, 0, O_SIGNAL},
    {"hold", required_argument, 0, O_HOLD},
    {"max-limit", required_argument, 0, O_MAXLIM},
    {"settle", required_argument, 0, O_SETTLE},
    {"stale", required_argument, 0, O_STALE},
    {"forget", required_argument, 0, O_FORGET},
    {"z", required_argument, 0, O_Z},
    {"quantile-z", required_argument, 0, O_QZ},
    {"probe", required_argument, 0, O_PROBE},
    {"probe-ticks", required_argument, 0, O_PROBE_TICKS},
    {"headroom", required_argument, 0, O_HEADROOM},
    {"interval", required_argument, 0, O_INTERVAL},
    {"initial", required_argument, 0, O_INITIAL},
    {"beta", required_argument, 0, O_BETA},
    {"tolerance", required_argument, 0, O_TOL},
    {"long", required_argument, 0, O_LONG},
    {"smoothing", required_argument, 0, O_SMOOTH},
    {"queue", required_argument, 0, O_QUEUE},
    {"status-every", required_argument, 0, O_STATUS},
    {"replay", required_argument, 0, O_REPLAY},
    {"shed", no_argument, 0, O_SHED},
    {"shed-order", required_argument, 0, O_SHED_ORDER},
    {"shed-target", required_argument, 0, O_SHED_TARGET},
    {"shed-sustain", required_argument, 0, O_SHED_SUSTAIN},
    {"shed-settle", required_argument, 0, O_SHED_SETTLE},
    {"shed-hold", required_argument, 0, O_SHED_HOLD},
    MT_OPT_COMMON,
    {0, 0, 0, 0},
};

#define MAX_POLICIES 16

typedef struct admit_args {
    mt_admit_opts o;
    mt_shed_opts  shed;
    int           shed_on;
    const char   *policies, *replay;
    int           status_every;
    char          plist[512];           /* policies, cut at the commas */
    char         *names[MAX_POLICIES];
    int           npol;
} admit_args;

/* One option with a value into a. 0, or -1 (said). */
static int value_option(admit_args *a, int c, const char *arg)
{
    static const char *const signals[] = { "service", "p99", NULL };
    mt_admit_opts *o = &a->o;
    int i;
    switch (c) {
    case 'b': return mt_opt_ms(arg, 0.001, 1e6, &o->budget_ms);
    case 'm': return mt_opt_double(arg, 0.001, 1, &o->margin);
    case O_SIGNAL:
        if (mt_opt_choice(arg, signals, &i))
            return -1;
        o->signal = i ? MT_SIG_P99 : MT_SIG_SERVICE;
        return 0;
    case O_HOLD: return mt_opt_ms(arg, 0, 1e6, &o->hold_ms);
    case O_MAXLIM: return mt_opt_int(arg, 0, MT_ADMIT_MAX_LEVEL, &o->max_limit);
    case O_SETTLE: return mt_opt_int(arg, 1, 10000, &o->settle_ticks);
    case O_STALE: return mt_opt_int(arg, 1, 100000, &o->stale_ticks);
    case O_FORGET: return mt_opt_int(arg, 1, INT_MAX, &o->forget_ticks);
    case O_Z: return mt_opt_double(arg, 0, 20, &o->z);
    case O_QZ: return mt_opt_double(arg, 0, 20, &o->quantile_z);
    case O_PROBE: return mt_opt_double(arg, 0, 1, &o->probe);
    case O_PROBE_TICKS: return mt_opt_int(arg, 4, 100000, &o->probe_ticks);
    case O_HEADROOM: return mt_opt_int(arg, 0, 1, &o->headroom);
    case O_INTERVAL: return mt_opt_int(arg, 1, 100000, &o->interval_ticks);
    case O_INITIAL: return mt_opt_int(arg, 0, MT_ADMIT_MAX_LEVEL, &o->initial);
    case O_BETA: return mt_opt_double(arg, 0.01, 0.99, &o->beta);
    case O_TOL: return mt_opt_double(arg, 1, 100, &o->tolerance);
    case O_LONG: return mt_opt_int(arg, 1, 1000000, &o->long_ticks);
    case O_SMOOTH: return mt_opt_double(arg, 0.001, 1, &o->smoothing);
    case O_QUEUE: return mt_opt_int(arg, 0, MT_ADMIT_MAX_LEVEL, &o->queue);
    case O_STATUS: return mt_opt_int(arg, 0, INT_MAX, &a->status_every);
    case O_SHED_ORDER:
        if (mt_shed_order_parse(arg, &a->shed.order) != 0)
            return mt_opt_bad_opt("--shed-order", arg, "is not newest or oldest"), -1;
        return 0;
    case O_SHED_TARGET: return mt_opt_double(arg, 0.01, 1, &a->shed.target);
    case O_SHED_SUSTAIN: return mt_opt_ms(arg, 0, 1e6, &a->shed.sustain_ms);
    case O_SHED_SETTLE: return mt_opt_ms(arg, 0, 1e6, &a->shed.settle_ms);
    case O_SHED_HOLD: return mt_opt_ms(arg, 0, 1e7, &a->shed.hold_ms);
    }
    return -1;
}

/* --policy: one name, or several with --replay, each known and each with
 * options it accepts. -1 to go on, else the exit status. */
static int check_policies(admit_args *a)
{
    char err[256];
    if (strlen(a->policies) >= sizeof a->plist)
        return mt_opt_bad_opt("--policy", a->policies, "is too long"), 2;
    strcpy(a->plist, a->policies);
    char *save = NULL;
    for (char *p = strtok_r(a->plist, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (a->npol == MAX_POLICIES)
            return mt_opt_bad_opt("--policy", a->policies, "names more than %d "
                                  "policies", MAX_POLICIES), 2;
        a->names[a->npol++] = p;
    }
    if (a->npol == 0)
        return mt_opt_bad_opt("--policy", a->policies, "names no policy"), 2;
    if (a->npol > 1 && !a->replay)
        return mt_opt_usage_error("several policies only with --replay");
    for (int i = 0; i < a->npol; i++) {
        mt_admit_opts oi = a->o;
        if (mt_admit_policy_parse(a->names[i], &oi, err, sizeof err) != 0 ||
            mt_admit_opts_check(&oi, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err);
            return 2;
        }
    }
    return -1;
}

/* One option into the admit_args ctx: 0, or -1 after the message. */
static int one_option(void *ctx, int c, const char *arg)
{
    admit_args *a = ctx;
    if (c == 'p')
        a->policies = arg;
    else if (c == O_REPLAY)
        a->replay = arg;
    else if (c == O_SHED)
        a->shed_on = 1;
    else
        return value_option(a, c, arg);
    return 0;
}

/* The command line into a: -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, admit_args *a)
{
    int st = mt_opt_read_all(&cli, argc, argv, "b:p:m:h", longopts, one_option, a);
    if (st != MT_OPT_END)
        return st;
    return check_policies(a);
}

/* One policy over the whole input (stdin, or the --replay log). 0; 1 when
 * it ran with an error; -1 when it could not start. Errors are said. */
static int run_policy(const admit_args *a, const char *name)
{
    char err[256];
    mt_admit_opts oi = a->o;
    mt_admit_policy_parse(name, &oi, err, sizeof err);
    run r;
    memset(&r, 0, sizeof r);
    r.out = stdout;
    r.replay = a->replay != NULL;
    r.status_every = a->status_every;
    r.policy_name = name;
    if (mt_admit_create(&oi, emit, &r, &r.a, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return -1;
    }
    mt_admit_feed_init(&r.feed, r.a, report_bad, &r);
    if (a->shed_on) {
        mt_shed_opts so = a->shed;
        so.budget_ms = oi.budget_ms;
        if (mt_shed_create(&so, emit_shed, &r, &r.shed, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err);
            mt_admit_free(r.a);
            return -1;
        }
    }
    FILE *in = stdin;
    if (a->replay && !(in = fopen(a->replay, "r"))) {
        fprintf(stderr, "%s: %s: %s\n", prog, a->replay, strerror(errno));
        mt_shed_free(r.shed);
        mt_admit_free(r.a);
        return -1;
    }
    int rc = 0;
    if (run_input(&r, in) != 0)
        rc = 1;
    if (in != stdin)
        fclose(in);
    if (r.out_failed && (r.replay || r.ticks_after_fail > OUT_FAIL_TICKS)) {
        fprintf(stderr, "%s: cannot write decisions to stdout since input line "
                "%ld (control input closed?)\n", prog, r.out_failed_line);
        rc = 1;
    } else if (r.out_failed) {
        fprintf(stderr, "%s: control input closed at input line %ld, %ld lines "
                "before the end of input: the server ended\n", prog,
                r.out_failed_line, r.feed.lineno - r.out_failed_line);
    }
    mt_admit_stats st;
    mt_admit_get_stats(r.a, &st);
    if (r.replay)
        out_line(&r, "summary policy=%s lines=%ld ticks=%lld requests=%lld "
                 "accepted=%lld rejected=%lld final_limit=%d bad_lines=%ld\n",
                 name, r.feed.lineno, (long long)st.ticks, (long long)st.requests,
                 (long long)st.accepted, (long long)st.rejected,
                 mt_admit_limit(r.a), r.feed.bad_lines);
    status(&r, "end");
    if (r.shed) {
        mt_shed_stats ss;
        mt_shed_get_stats(r.shed, &ss);
        fprintf(stderr, "shed policy=%s shed=%lld episodes=%lld at=end\n", name,
                (long long)ss.shed, (long long)ss.episodes);
    }
    mt_shed_free(r.shed);
    mt_admit_free(r.a);
    return rc;
}

int main(int argc, char **argv)
{
    admit_args a;
    memset(&a, 0, sizeof a);
    mt_admit_opts_default(&a.o);
    mt_shed_opts_default(&a.shed);
    a.policies = "metronome";
    a.status_every = 25;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    signal(SIGPIPE, SIG_IGN);   /* a closed control input is a write error */
    rc = 0;
    for (int i = 0; i < a.npol; i++) {
        int r = run_policy(&a, a.names[i]);
        if (r < 0)
            return 1;
        if (r != 0)
            rc = 1;
    }
    return rc;
}
