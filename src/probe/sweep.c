/* sweep.c: latency vs concurrency (mt-probe sweep), to find the wall.
 *
 * Each level holds c real sessions for --hold seconds through the shared
 * client library (client.h), paced on the absolute frame clock, and reads
 * the server's own timing from the returned frames (t_ready - t_arrive);
 * a server without timings on the wire (a ws:// URL: Kyutai's protocol)
 * is measured by the client's round trip instead, send to audio back.
 * Over Kyutai's speech-to-text protocol (ws://.../api/asr-streaming) the
 * bridge sends a Marker after each frame and the server echoes it once it
 * has stepped that frame and `delay` more (the model's audio delay, whole
 * frames): the echo of frame k's Marker comes when the step that consumed
 * frame k + delay is done, and frame k + delay was sent delay periods after
 * frame k. The round trip less delay periods is therefore that step's
 * lateness on the client's clock: from the frame's audio leaving the
 * client to the step that consumed it being done, the wait for the tick
 * and the network included. That is the figure kept and judged (Step
 * messages carry no time, and a Word's latency also holds the word's own
 * length and comes only when the model says words).
 * Its floor, measured hop by hop (timestamps at the client, the bridge,
 * mt-serve's gate and its engine): the wait for the tick, the step, and
 * the hops. A stream paced on the frame clock keeps one phase against the
 * server's ticks, so the wait is about constant within a session (0 to a
 * period, drawn when it starts: the p50 of one session moves by up to a
 * period from run to run) and the p99 is that wait plus the step's own
 * tail: stt-1b at q8, 1 stream, step p50 42 ms but p90 69 and p99 102 on
 * a shared 2-core host (a bare 2-thread CPU loop of 40 ms a period shows
 * the same tail there), hence a lateness p99 of 172 ms with p50 107. The
 * hops (TCP_NODELAY both ways, gate, bridge) were 1 ms p50, 17 ms p99;
 * the Marker is echoed by the step that consumes frame k + delay, not a
 * tick later (the tiny model's lateness is its phase plus ~1 ms).
 * Two p99s are kept: the naive one over real frames only, and the
 * truthful one where a FILL frame (silence in place of a late output)
 * counts as missed, i.e. infinitely late. The wall is the largest level,
 * counting up from the first, at which every session was admitted and
 * the truthful p99 stayed under the budget (two frame periods unless
 * told; over /api/asr-streaming two and a quarter: wall_budget). With --signal tick the wall is judged instead by the p99 over the
 * hold's ticks of max(step_ms, late_ms) against the budget (one period
 * unless told): the signal and the budget mt-admit is given, so that a
 * controller's level can be compared with a wall measured its own way.
 *
 * Step time and KV bytes come from mt-serve's tick lines when they are
 * available: the stdout of a server the sweep started itself, or a file a
 * running server's stdout is appended to (--ticks, read like tail -f).
 */
#include "util/errmsg.h"
#include "util/grow.h"
#include "util/stats.h"
#include "probe/probe.h"
#include "probe/spawn.h"
#include "client/client.h"
#include "client/ws_client.h"
#include "wire/latline.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct sweep_ctx {
    mt_probe_source *src;
    uint64_t  t_measure;      /* frames answered before this are warm-up */
    double   *lat;            /* server ms, real frames */
    size_t    nlat, caplat;
    double   *rtt;
    size_t    nrtt, caprtt;
    double   *sig;            /* per measured tick: max(step_ms, late_ms) */
    size_t    nsig, capsig;
    uint64_t  frames, real, fills;
    double    step_sum;
    uint64_t  step_n;
    /* ticks */
    double    tick_step_sum;
    long      tick_n;
    int64_t   kv_max;
    int       collecting;
    int       oom;            /* a figure could not be kept: the level's
                                 percentiles would be of what was kept, and
                                 the truthful p99's rank past the end */
    int       level;          /* the level playing: its concurrency */
    const mt_sweep_opts *o;   /* for on_tick */
    double    period_ms;      /* from ACCEPT */
    double    k;              /* time scale: model s per real s */
    int       asr;            /* an /api/asr-streaming target */
    double    asr_delay_ms;   /* its delay in whole frames, as ms */
    mt_latline ll;
} sweep_ctx;

static int push(double **v, size_t *n, size_t *cap, double x)
{
    if (mt_grow(v, cap, *n + 1, sizeof **v, 4096) != 0)
        return -1;
    (*v)[(*n)++] = x;
    return 0;
}

/* The model's delay in whole frames, as mt-serve computes
 * asr_delay_in_tokens from --asr-delay (truncated, as Kyutai's server). */
static int asr_delay_frames(const mt_sweep_opts *o, int rate, int frame_samples)
{
    return (int)(o->asr_delay_s * rate / frame_samples + 1e-9);
}

static int cb_accept(void *user, int idx, const mt_hello *fmt, char *reason,
                     size_t reasonlen)
{
    sweep_ctx *x = user;
    if (fmt->sample_rate > 0 && fmt->frame_samples > 0) {
        x->period_ms = 1000.0 * fmt->frame_samples / fmt->sample_rate;
        x->asr_delay_ms = asr_delay_frames(x->o, (int)fmt->sample_rate,
                                           (int)fmt->frame_samples) * x->period_ms;
    }
    return mt_probe_source_prepare(x->src, (int)fmt->sample_rate, reason,
                                   reasonlen);
}

static int cb_next(void *user, int idx, uint32_t seq, int16_t *pcm,
                   size_t samples)
{
    sweep_ctx *x = user;
    mt_probe_source_frame(x->src, idx, seq, pcm, samples);
    return MT_NEXT_FRAME;
}

static void cb_frame(void *user, const mt_client_result *r, const int16_t *pcm,
                     size_t samples)
{
    sweep_ctx *x = user;
    (void)pcm;
    (void)samples;
    if (r->t_recv < x->t_measure)
        return;
    x->frames++;
    if (r->fill) {
        x->fills++;
        return;
    }
    x->real++;
    /* a server that puts no timings on the wire (Kyutai's protocol through
     * the ws:// bridge): the client's round trip, send to real audio back,
     * is the frame's latency */
    double ms = r->t_arrive && r->t_ready > r->t_arrive ? r->server_ms : r->rtt_ms;
    if (x->asr)        /* the step lateness (the file's comment) */
        ms = r->rtt_ms - x->asr_delay_ms / x->k;   /* real ms, as rtt_ms */
    if (push(&x->lat, &x->nlat, &x->caplat, ms * x->k) ||
        push(&x->rtt, &x->nrtt, &x->caprtt, r->rtt_ms * x->k))
        x->oom = 1;
    if (r->t_ready > r->t_start) {
        x->step_sum += (double)(r->t_ready - r->t_start) / 1e6 * x->k;
        x->step_n++;
    }
}

static void on_line(void *user, const char *line, size_t len)
{
    sweep_ctx *x = user;
    char e[128];
    mt_tick t;
    int hook = x->o && x->o->on_tick;
    if (!x->collecting && !hook)
        return;
    if (mt_latline_parse(line, len, 0, &x->ll, e, sizeof e) ||
        strcmp(mt_latline_kind(&x->ll), "tick") ||
        mt_tick_from_line(&x->ll, 0, &t, e, sizeof e))
        return;
    if (hook)
        x->o->on_tick(x->o->tick_user, x->level, x->collecting, &t);
    if (!x->collecting)
        return;
    if (push(&x->sig, &x->nsig, &x->capsig,
             (t.step_ms > t.late_ms ? t.step_ms : t.late_ms) * x->k))
        x->oom = 1;
    if (t.stepped > 0) {
        x->tick_step_sum += t.step_ms * x->k;
        x->tick_n++;
    }
    if (t.kv_used > x->kv_max)
        x->kv_max = t.kv_used;
}

/* tail -f of a file mt-serve's stdout goes to. */
typedef struct tail { int fd; char buf[8192]; size_t len; } tail;

static void tail_poll(tail *t, sweep_ctx *x)
{
    if (t->fd < 0)
        return;
    for (;;) {
        ssize_t n = read(t->fd, t->buf + t->len, sizeof t->buf - 1 - t->len);
        if (n <= 0)
            return;
        t->len += (size_t)n;
        size_t start = 0;
        for (size_t i = 0; i < t->len; i++)
            if (t->buf[i] == '\n') {
                t->buf[i] = 0;
                on_line(x, t->buf + start, i - start);
                start = i + 1;
            }
        memmove(t->buf, t->buf + start, t->len - start);
        t->len -= start;
        if (t->len == sizeof t->buf - 1)
            t->len = 0;
    }
}

static void pump(mt_spawn_proc *sp, tail *tl, sweep_ctx *x)
{
    if (sp && sp->pid > 0)
        mt_spawn_poll_lines(sp, on_line, x);
    if (tl)
        tail_poll(tl, x);
}

/* A client for one level of c sessions, and the level's counters reset. */
static int level_client_new(const mt_sweep_opts *o, int c, sweep_ctx *x,
                            mt_client **cl, char *err, size_t errlen)
{
    static const mt_client_callbacks cb = {cb_accept, cb_next, cb_frame, NULL, NULL, NULL};
    mt_client_config cc;
    mt_spawn_client_config(&cc, c + 1, 80e6, x->k, &cb, x);
    if (o->token && o->token_len <= MT_TOKEN_MAX) {
        memcpy(cc.hello.token, o->token, o->token_len);
        cc.hello.token_len = (uint8_t)o->token_len;
    }
    x->nlat = x->nrtt = x->nsig = 0;
    x->frames = x->real = x->fills = 0;
    x->step_sum = 0;
    x->step_n = 0;
    x->tick_step_sum = 0;
    x->tick_n = 0;
    x->kv_max = -1;
    x->collecting = 0;
    x->oom = 0;
    x->level = c;
    return mt_client_new(&cc, cl, err, errlen);
}

static void show_level_progress(const mt_sweep_opts *o, const sweep_ctx *x,
                                int c, uint64_t now, int ended)
{
    static uint64_t last;
    if (now - last > 500000000ull) {
        last = now;
        fprintf(o->progress, "\r  sweep: %d sessions, %4.1f s of %.0f   ",
                c, now > x->t_measure && !ended
                       ? (double)(now - x->t_measure) / 1e9 * x->k
                       : 0.0,
                o->hold_s);
    }
}

/* Starts c sessions spread over one period, measures them for hold_s after
 * the warm-up, ends them and lets them drain. */
static int play_level(const mt_sweep_opts *o, const char *sock, int c,
                      sweep_ctx *x, mt_spawn_proc *sp, tail *tl,
                      mt_client *cl, char *err, size_t errlen)
{
    uint64_t t0 = mt_clock_ns() + 50000000ull;
    /* Spread the starts over one period: sessions do not arrive in step. */
    for (int i = 0; i < c; i++)
        if (mt_client_add_unix(cl, sock, t0 + (uint64_t)((double)i * 80e6 /
                                                         x->k / c),
                               err, errlen) < 0)
            return -1;
    x->t_measure = t0 + (uint64_t)(o->warmup_s / x->k * 1e9);
    uint64_t t_stop = x->t_measure + (uint64_t)(o->hold_s / x->k * 1e9);
    int ended = 0;
    uint64_t give_up = t_stop + 20000000000ull;
    for (;;) {
        uint64_t now = mt_clock_ns();
        if (!x->collecting && now >= x->t_measure)
            x->collecting = 1;
        uint64_t until = now + 20000000ull;
        int left = mt_client_run(cl, until, err, errlen);
        if (left < 0)
            return -1;
        pump(sp, tl, x);
        now = mt_clock_ns();
        if (!ended && now >= t_stop) {
            x->collecting = 0;
            for (int i = 0; i < c; i++)
                mt_client_end_session(cl, i);
            ended = 1;
            x->t_measure = UINT64_MAX;     /* drain frames are not counted */
        }
        if (left == 0 && ended)
            break;
        if (left == 0 && !ended) {
            x->collecting = 0;
            break;                          /* every session refused/failed */
        }
        if (now > give_up) {
            mt_client_stop(cl);
            break;
        }
        if (o->stop && *o->stop) {
            mt_set_err(err, errlen, "interrupted");
            return -1;
        }
        if (o->progress)
            show_level_progress(o, x, c, now, ended);
    }
    return 0;
}

/* The level's admission counts, from the client; an error when no session
 * was admitted and the server said why. */
static int count_admissions(mt_client *cl, int c, mt_sweep_row *row,
                            char *err, size_t errlen)
{
    char reason[MT_REASON_MAX + 1] = "";
    memset(row, 0, sizeof *row);
    row->concurrency = c;
    for (int i = 0; i < c; i++) {
        const mt_client_stats *st = mt_client_session_stats(cl, i);
        if (!st)
            continue;
        if (st->t_accept)
            row->accepted++;
        if (st->state == MT_CS_REJECTED)
            row->rejected++;
        else if (st->state == MT_CS_FAILED && st->t_accept)
            row->failed++;
        else if (st->state == MT_CS_FAILED && !reason[0])
            snprintf(reason, sizeof reason, "%s", st->reason);
    }
    if (!row->accepted && reason[0]) {
        mt_set_err(err, errlen, "%d sessions: none admitted: %s", c, reason);
        return -1;
    }
    return 0;
}

/* The level's latencies, from the frames collected while measuring. */
static void fill_latencies(sweep_ctx *x, mt_sweep_row *row)
{
    row->frames = x->frames;
    row->real = x->real;
    row->fills = x->fills;
    row->p50_ms = mt_stats_percentile(x->lat, x->nlat, 0.50);
    row->p99_ms = mt_stats_percentile(x->lat, x->nlat, 0.99);
    row->max_ms = mt_stats_percentile(x->lat, x->nlat, 1.0);
    row->rtt_p99_ms = mt_stats_percentile(x->rtt, x->nrtt, 0.99);
    /* Truthful p99: the fills are the worst frames of all. */
    uint64_t all = x->real + x->fills;
    if (!all)
        row->p99_true_ms = NAN;
    else {
        double rank = ceil(0.99 * (double)all);
        if (rank > (double)x->real)
            row->p99_true_ms = INFINITY;
        else
            row->p99_true_ms = x->lat[(size_t)rank - 1];   /* sorted above */
    }
    if (x->tick_n)
        row->step_ms = x->tick_step_sum / (double)x->tick_n;
    else
        row->step_ms = x->step_n ? x->step_sum / (double)x->step_n : NAN;
    row->tick_p99_ms = x->nsig ? mt_stats_percentile(x->sig, x->nsig, 0.99) : NAN;
    row->kv_used = x->kv_max;
}

static int run_level(const mt_sweep_opts *o, const char *sock, int c,
                     sweep_ctx *x, mt_spawn_proc *sp, tail *tl,
                     mt_sweep_row *row, char *err, size_t errlen)
{
    mt_client *cl = NULL;
    if (level_client_new(o, c, x, &cl, err, errlen))
        return -1;
    if (play_level(o, sock, c, x, sp, tl, cl, err, errlen)) {
        mt_client_free(cl);
        return -1;
    }
    int rc = count_admissions(cl, c, row, err, errlen);
    mt_client_totals tot;
    mt_client_totals_get(cl, &tot);
    mt_client_free(cl);
    if (rc)
        return -1;
    if (x->oom) {
        mt_set_err(err, errlen, "%d sessions: out of memory for the level's latencies", c);
        return -1;
    }
    fill_latencies(x, row);
    row->send_late_p99_ms = (double)mt_pctl_quantile(&tot.send_late, 0.99) /
                            1e6 * x->k;
    return 0;
}

static void fmt_ms(char *b, size_t n, double v)
{
    if (isnan(v))
        snprintf(b, n, "-");
    else if (isinf(v))
        snprintf(b, n, "missed");
    else
        snprintf(b, n, "%.1f", v);
}

/* The table's columns, and their width when aligned for a terminal. */
static const char *const columns[] = {
    "concurrency", "accepted", "rejected", "real", "fill", "p50_ms", "p99_ms",
    "p99_true_ms", "max_ms", "rtt_p99_ms", "step_ms", "kv_bytes", "tick_p99_ms" };
#define NCOLUMNS (int)(sizeof columns / sizeof columns[0])

static int col_width(int i)
{
    int w = (int)strlen(columns[i]);
    return w < 9 ? 9 : w;
}

/* One row of cells: tab-separated, or right-aligned under the header. */
static void print_cells(FILE *f, int aligned, char cell[][24])
{
    for (int i = 0; i < NCOLUMNS; i++) {
        if (aligned)
            fprintf(f, "%s%*s", i ? " " : "", col_width(i), cell[i]);
        else
            fprintf(f, "%s%s", i ? "\t" : "", cell[i]);
    }
    fputc('\n', f);
    fflush(f);
}

static void print_row_as(FILE *f, int aligned, const mt_sweep_row *r)
{
    char cell[NCOLUMNS][24];
    snprintf(cell[0], sizeof cell[0], "%d", r->concurrency);
    snprintf(cell[1], sizeof cell[1], "%d", r->accepted);
    snprintf(cell[2], sizeof cell[2], "%d", r->rejected);
    snprintf(cell[3], sizeof cell[3], "%llu", (unsigned long long)r->real);
    snprintf(cell[4], sizeof cell[4], "%llu", (unsigned long long)r->fills);
    fmt_ms(cell[5], sizeof cell[5], r->p50_ms);
    fmt_ms(cell[6], sizeof cell[6], r->p99_ms);
    fmt_ms(cell[7], sizeof cell[7], r->p99_true_ms);
    fmt_ms(cell[8], sizeof cell[8], r->max_ms);
    fmt_ms(cell[9], sizeof cell[9], r->rtt_p99_ms);
    fmt_ms(cell[10], sizeof cell[10], r->step_ms);
    if (r->kv_used >= 0)
        snprintf(cell[11], sizeof cell[11], "%lld", (long long)r->kv_used);
    else
        snprintf(cell[11], sizeof cell[11], "-");
    fmt_ms(cell[12], sizeof cell[12], r->tick_p99_ms);
    print_cells(f, aligned, cell);
}

static void print_row(FILE *f, const mt_sweep_row *r)
{
    print_row_as(f, 0, r);
}

/* Starts the sweep's own mt-serve with --time-scale K when scaled. The
 * argument vector (*args_out, the caller frees it) points into kbuf, which
 * must live as long. */
static int start_server(const mt_sweep_opts *o, double k, const char *sock,
                        const char *log, mt_spawn_proc *sp, char ***args_out,
                        char kbuf[32], char *err, size_t errlen)
{
    return mt_spawn_start_scaled(sp, o->serve_bin, o->serve_args, o->nserve_args, k,
                                 sock, log, args_out, kbuf, err, errlen);
}

static void print_header(FILE *out, const mt_sweep_opts *o, const char *sock, double k)
{
    /* the ws:// bridge's format is Kyutai's: 24 kHz, 1920-sample frames */
    if (mt_ws_client_is_asr_url(sock)) {
        fprintf(out, "# sweep: hold %.0f s per level after %.1f s warm-up; "
                "latencies in ms: the step lateness over /api/asr-streaming, each "
                "Marker's round trip less the model's delay of %d frames "
                "(--asr-delay %g s); rtt_p99_ms the round trip\n", o->hold_s,
                o->warmup_s, asr_delay_frames(o, 24000, 1920), o->asr_delay_s);
    } else {
        fprintf(out, "# sweep: hold %.0f s per level after %.1f s warm-up; "
                "latencies in ms from %s\n", o->hold_s, o->warmup_s,
                mt_ws_client_is_url(sock)
                    ? "the client's round trip (a ws:// server sends no timings)"
                    : "the server's timing in returned frames");
    }
    if (k != 1)
        fprintf(out, "# time-scaled x%g: the server and the clients ran at %g "
                "times real time; times and latencies are model time "
                "(real x %g)\n", k, k, k);
    char cell[NCOLUMNS][24];
    for (int i = 0; i < NCOLUMNS; i++)
        snprintf(cell[i], sizeof cell[i], "%s", columns[i]);
    print_cells(out, o->aligned, cell);
}

/* The budget the wall is judged by: --budget, else two frame periods for
 * the per-frame p99 (a frame waits up to a period for its tick and then for
 * the step, so one session's p99 is already about one period: two periods,
 * mt-serve's default deadline, is what a tick-batched server can meet) or
 * one period for the tick signal (a step must end within its period).
 * Over /api/asr-streaming the step lateness is measured on the client's
 * clock, so it also holds the network both ways (four messages through
 * mt-serve's gate and the ws:// bridge): a server whose every step fits in
 * its period shows up to two periods plus that, and the default budget is
 * two periods and a quarter (ASR_NET_SHARE; 180 ms at 80 ms frames). */
#define ASR_NET_SHARE 0.25   /* the network's allowance, in frame periods:
                                those hops measured 1 ms p50, 17 ms p99 on
                                a busy 2-core host (stt-1b at q8, 1 stream) */
static double wall_budget(const mt_sweep_opts *o, double period_ms)
{
    if (o->budget_ms > 0)
        return o->budget_ms;
    if (o->tick_signal)
        return period_ms;
    if (mt_ws_client_is_asr_url(o->sock))
        return (2 + ASR_NET_SHARE) * period_ms;
    return 2 * period_ms;
}

/* Prints the wall line and returns the latency budget it was judged by.
 * behind: the level that ended the run of passing levels, where that was
 * because its client fell behind (0 otherwise): the line then says the
 * wall was not found by the server's latency but by this host's. */
static double print_wall(FILE *out, const mt_sweep_opts *o, int wall,
                         double period_ms, int behind)
{
    double budget = wall_budget(o, period_ms);
    const char *what = o->budget_ms > 0 ? "budget"
                       : o->tick_signal ? "budget of one frame period"
                       : mt_ws_client_is_asr_url(o->sock)
                           ? "budget of two frame periods and a quarter for the network"
                           : "budget of two frame periods";
    const char *sig = o->tick_signal
        ? "the p99 of max(step_ms, late_ms) over its ticks (mt-admit's signal)"
        : "the truthful p99";
    int first = o->nlevels > 0 ? o->levels[0] : o->from;
    int last = o->nlevels > 0 ? o->levels[o->nlevels - 1]
             : o->from + (o->to - o->from) / o->step * o->step;
    if (wall && wall == last)
        fprintf(out, "# no wall up to %d session%s: every level from %d kept "
                "%s under the %.0f ms %s; raise --to\n", last,
                last == 1 ? "" : "s", first, sig, budget, what);
    else if (wall)
        fprintf(out, "# wall: %d sessions (the largest level from %d up with "
                "every session admitted and %s under the %.0f ms %s)\n",
                wall, first, sig, budget, what);
    else if (behind)
        fprintf(out, "# wall: below %d session%s (the level at %d measured this "
                "host, not the server: its client fell behind)\n", first,
                first == 1 ? "" : "s", behind);
    else
        fprintf(out, "# wall: below %d session%s (no level kept %s under the "
                "%.0f ms %s)\n", first, first == 1 ? "" : "s", sig, budget, what);
    if (wall && behind)
        fprintf(out, "# the level at %d, which ended the run, measured this host, "
                "not the server (its client fell behind): the wall may be higher\n",
                behind);
    return budget;
}

static void write_tsv(const char *path, const mt_sweep_row *rows, int n)
{
    FILE *t = fopen(path, "w");
    if (t) {
        for (int i = 0; i < n; i++)
            print_row(t, &rows[i]);
        fclose(t);
    }
}

/* Plays every level from --from to --to, printing each row as it ends.
 * The wall is the last level of the unbroken run of passing levels from
 * the first; *period_ms is the server's period once it has said it. */
static int run_levels(const mt_sweep_opts *o, FILE *out, const char *sock,
                      sweep_ctx *x, mt_spawn_proc *sp, tail *tl,
                      mt_sweep_row *rows, int *n_out, int *wall_out,
                      double *period_ms, char *err, size_t errlen)
{
    int n = 0, walling = 1;
    int levels = o->nlevels > 0 ? o->nlevels : (o->to - o->from) / o->step + 1;
    for (int li = 0; li < levels; li++) {
        int c = o->nlevels > 0 ? o->levels[li] : o->from + li * o->step;
        if (run_level(o, sock, c, x, sp, tl, &rows[n], err, errlen))
            return -1;
        if (x->period_ms > 0)
            *period_ms = x->period_ms;
        double budget = wall_budget(o, *period_ms);
        if (o->progress)
            fprintf(o->progress, "\r%-60s\r", "");
        print_row_as(out, o->aligned, &rows[n]);
        /* A client that sends its frames late (one thread driving every
         * session, on a host that also runs the server) offers the server
         * less than the level's load and reads its answers late: the row
         * then measures this host, not the server, and is no evidence for
         * the wall. */
        int client_behind = rows[n].send_late_p99_ms > *period_ms;
        if (client_behind)
            fprintf(out, "# %d session%s: the client fell behind (its send "
                    "lateness p99 %.1f ms is over the %.0f ms frame period): "
                    "this level measures the client's host, not the server\n",
                    c, c == 1 ? "" : "s", rows[n].send_late_p99_ms, *period_ms);
        double judged = o->tick_signal ? rows[n].tick_p99_ms
                                       : rows[n].p99_true_ms;
        if (o->tick_signal && isnan(judged))
            fprintf(out, "# %d session%s: no tick line was read (--signal "
                    "tick needs the server's stdout: -- MT-SERVE-ARGS or "
                    "--ticks FILE)\n", c, c == 1 ? "" : "s");
        int pass = rows[n].accepted == c && rows[n].rejected == 0 &&
                   rows[n].failed == 0 && rows[n].real > 0 &&
                   isfinite(judged) && judged < budget && !client_behind;
        if (walling && pass)
            *wall_out = c;
        else
            walling = 0;
        n++;
        *n_out = n;
    }
    return 0;
}

/* The levels asked for make sense. 0, or -1 with err. */
static int check_levels(const mt_sweep_opts *o, char *err, size_t errlen)
{
    if (o->nlevels > 0) {
        for (int i = 0; i < o->nlevels; i++)
            if (o->levels[i] < 1) {
                mt_set_err(err, errlen, "sweep: a level below 1 session");
                return -1;
            }
    } else if (o->from < 1 || o->to < o->from || o->step < 1) {
        mt_set_err(err, errlen, "sweep: need 1 <= --from <= --to, --step >= 1");
        return -1;
    }
    return 0;
}

/* After the levels: the wall line, --tsv and --plot. 0, or -1 with err. */
static int report(FILE *out, const mt_sweep_opts *o, const mt_sweep_row *rows, int n,
                  int wall, double period_ms, char *err, size_t errlen)
{
    int behind = 0;   /* the level after the wall, if its client fell behind */
    for (int i = 0; i < n; i++)
        if (rows[i].concurrency > wall) {
            if (rows[i].send_late_p99_ms > period_ms)
                behind = rows[i].concurrency;
            break;
        }
    double budget = print_wall(out, o, wall, period_ms, behind);
    if (o->tsv_out)
        write_tsv(o->tsv_out, rows, n);
    /* no wall in the range: none drawn */
    int last = n > 0 ? rows[n - 1].concurrency : 0;
    if (o->plot && mt_plot_sweep(o->plot, rows, n, wall == last ? 0 : wall,
                                 budget, err, errlen))
        return -1;
    return 0;
}

int mt_sweep_run(const mt_sweep_opts *o, FILE *out, mt_sweep_row **rows_out,
                 int *nrows, int *wall_out, char *err, size_t errlen)
{
    mt_probe_source src;
    mt_spawn_proc sp;
    tail tl = {-1, {0}, 0};
    char sockbuf[256], tmpl[] = "/tmp/mt-probe-sweep.XXXXXX", log[300];
    char kbuf[32];
    const char *sock = o->sock;
    char *tmpdir = NULL;
    char **sargs = NULL;
    int rc = -1, n = 0, wall = 0;
    memset(&sp, 0, sizeof sp);
    sp.pid = -1;
    sp.out_fd = -1;
    *rows_out = NULL;
    *nrows = 0;
    *wall_out = 0;
    if (check_levels(o, err, errlen) != 0)
        return -1;
    int levels = o->nlevels > 0 ? o->nlevels : (o->to - o->from) / o->step + 1;
    mt_sweep_row *rows = calloc((size_t)levels, sizeof *rows);
    sweep_ctx *x = calloc(1, sizeof *x);
    if (!rows || !x) {
        free(rows);
        free(x);
        mt_set_err(err, errlen, "out of memory");
        return -1;
    }
    x->src = &src;
    x->o = o;
    x->k = o->time_scale > 0 ? o->time_scale : 1;
    x->asr = mt_ws_client_is_asr_url(o->sock);
    if (mt_probe_source_open(&src, o->audio, err, errlen))
        goto out0;
    if (o->serve_bin) {
        if (!(tmpdir = mkdtemp(tmpl))) {
            mt_set_err(err, errlen, "mkdtemp: %s", strerror(errno));
            goto out1;
        }
        snprintf(sockbuf, sizeof sockbuf, "%s/serve.sock", tmpdir);
        snprintf(log, sizeof log, "%s/serve.log", tmpdir);
        if (start_server(o, x->k, sockbuf, log, &sp, &sargs, kbuf,
                         err, errlen))
            goto out1;
        sock = sockbuf;
    } else if (o->ticks_path) {
        tl.fd = open(o->ticks_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (tl.fd < 0) {
            mt_set_err(err, errlen, "%s: %s", o->ticks_path, strerror(errno));
            goto out1;
        }
        lseek(tl.fd, 0, SEEK_END);
    }
    if (!sock) {
        mt_set_err(err, errlen, "sweep: no server (-s SOCK, or -- MT-SERVE-ARGS)");
        goto out2;
    }
    print_header(out, o, sock, x->k);
    double period_ms = 80.0;
    if (run_levels(o, out, sock, x, o->serve_bin ? &sp : NULL,
                   tl.fd >= 0 ? &tl : NULL, rows, &n, &wall, &period_ms,
                   err, errlen))
        goto out2;
    if (report(out, o, rows, n, wall, period_ms, err, errlen) != 0)
        goto out2;
    rc = 0;
out2:
    if (sp.pid > 0 || sp.out_fd >= 0)
        mt_spawn_stop(&sp, 3.0, NULL, NULL);
    if (tl.fd >= 0)
        close(tl.fd);
out1:
    if (tmpdir) {
        unlink(log);
        rmdir(tmpdir);
    }
    mt_probe_source_free(&src);
out0:
    free(sargs);
    free(x->lat);
    free(x->rtt);
    free(x->sig);
    free(x);
    if (rc) {
        free(rows);
        return -1;
    }
    *rows_out = rows;
    *nrows = n;
    *wall_out = wall;
    return 0;
}
