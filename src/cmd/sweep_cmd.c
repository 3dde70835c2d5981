/* sweep_cmd.c: `mt-probe sweep`: latency against concurrency, finding the
 * wall (probe/sweep.c), against a running mt-serve or one it starts. */
#define _GNU_SOURCE
#include "cmd/probe_common.h"
#include "cmd/opt.h"
#include "wire/endpoint.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prog = MT_PROBE_PROG;

static void help_sweep(FILE *f)
{
    fprintf(f,
"usage: mt-probe sweep -s SOCK [options]\n"
"       mt-probe sweep [options] -- MT-SERVE-ARGS...\n"
"\n"
"Holds each concurrency level with real sessions paced on the frame clock,\n"
"reads the server's timing in the returned frames and prints a TSV table:\n"
"concurrency, accepted, rejected, real and FILL frames, p50/p99/max server\n"
"latency of real frames, the truthful p99 (FILL counted as missed), the\n"
"client round-trip p99, step time and KV bytes (from tick lines when known),\n"
"the p99 of the tick signal, then the wall: the largest level whose truthful\n"
"p99 (or, with --signal tick, the tick signal's) stays under the budget with\n"
"every session admitted. Progress on stderr when it is a tty.\n"
"\n"
"  -s, --socket SOCK   a running mt-serve (Unix socket or tcp:HOST:PORT)\n"
"  --token-file FILE   its access token (mt-serve --token-file)\n"
"  -- ARGS...          or start mt-serve ARGS (on a private socket) for it\n"
"  --serve BIN         the mt-serve to start (default: beside mt-probe)\n"
"  --from N --to N --step K   the levels (default 1, 8, 1)\n"
"  --hold D            measured time per level (default 20s)\n"
"  --warmup D          unmeasured time at the start of a level (default 1s)\n"
"  --audio FILE        what the sessions send (default synthetic voice-like)\n"
"  --ticks FILE        a file a running mt-serve's stdout is written to, for\n"
"                      step time and KV bytes\n"
"  --plot FILE.png     latency vs concurrency, with the wall\n"
"  --tsv FILE          also write the table's rows to FILE\n"
"  --budget MS         the wall's latency budget (default: two frame periods,\n"
"                      mt-serve's default deadline: a frame waits up to a\n"
"                      period for its tick, so one session's p99 is already\n"
"                      about one period; over /api/asr-streaming two and\n"
"                      a quarter, 180 ms: its lateness, on the client's\n"
"                      clock, also holds the network both ways)\n"
"  --signal S          what the wall is judged by: frame (the truthful\n"
"                      per-frame p99, default) or tick (the p99 over the\n"
"                      hold's ticks of max(step_ms, late_ms), mt-admit's\n"
"                      signal; default budget one frame period; needs the\n"
"                      tick lines: -- MT-SERVE-ARGS or --ticks FILE)\n"
"  --time-scale K      a simulated server at K times real time (0.1..1000)\n"
"                      (added to the spawned server's arguments; with -s,\n"
"                      start it with --time-scale K): clients pace at\n"
"                      period/K, --hold and --warmup and every figure are\n"
"                      model time\n"
"  --asr-delay S       a ws://HOST:PORT/api/asr-streaming target: the model's\n"
"                      audio delay as mt-serve was given it (--asr-delay,\n"
"                      default 0.5 s, stt-1b's): each latency is the step\n"
"                      lateness, a Marker's round trip less that delay:\n"
"                      the wait for the tick (a stream's phase, 0 to a\n"
"                      period), the step and the network\n");
}

static const mt_cli cli_sweep = {
    "mt-probe sweep", "mt-probe sweep (-s SOCK | -- MT-SERVE-ARGS...) [options]",
    help_sweep,
};

/* The options into o and *serve: -1 to go on, else the exit status. */
static int sweep_options(int argc, char **argv, mt_sweep_opts *o, const char **serve)
{
    static const struct option lo[] = {
        {"socket", required_argument, 0, 's'},
        {"from", required_argument, 0, O_FROM},
        {"to", required_argument, 0, O_TO},
        {"step", required_argument, 0, O_STEP},
        {"hold", required_argument, 0, O_HOLD},
        {"warmup", required_argument, 0, O_WARMUP},
        {"audio", required_argument, 0, O_AUDIO},
        {"ticks", required_argument, 0, O_TICKS},
        {"plot", required_argument, 0, O_PLOT},
        {"tsv", required_argument, 0, O_TSV},
        {"serve", required_argument, 0, O_SERVE},
        {"budget", required_argument, 0, O_BUDGET},
        {"token-file", required_argument, 0, O_TOKEN},
        {"time-scale", required_argument, 0, O_TIMESCALE},
        {"signal", required_argument, 0, O_SIGNAL},
        {"asr-delay", required_argument, 0, O_ASRDELAY},
        MT_OPT_COMMON,
        {0, 0, 0, 0},
    };
    int c, bad = 0;
    while ((c = mt_opt_next(&cli_sweep, argc, argv, "+s:h", lo)) >= 0) {
        switch (c) {
        case 's': o->sock = optarg; break;
        case O_FROM: bad = mt_opt_int(optarg, 1, 100000, &o->from); break;
        case O_TO: bad = mt_opt_int(optarg, 1, 100000, &o->to); break;
        case O_STEP: bad = mt_opt_int(optarg, 1, 100000, &o->step); break;
        case O_HOLD: bad = mt_opt_seconds(optarg, 0.001, INFINITY, &o->hold_s); break;
        case O_WARMUP: bad = mt_opt_seconds(optarg, 0, INFINITY, &o->warmup_s); break;
        case O_AUDIO: o->audio = optarg; break;
        case O_TICKS: o->ticks_path = optarg; break;
        case O_PLOT: o->plot = optarg; break;
        case O_TSV: o->tsv_out = optarg; break;
        case O_SERVE: *serve = optarg; break;
        case O_BUDGET: bad = mt_opt_ms(optarg, 0.001, 1e9, &o->budget_ms); break;
        case O_TOKEN: {
            static char tok[MT_TOKEN_MAX + 1];
            char terr[512];
            if (mt_token_read(optarg, tok, sizeof tok, &o->token_len, terr,
                              sizeof terr) != 0) {
                fprintf(stderr, "%s sweep: %s\n", prog, terr);
                return 2;
            }
            o->token = tok;
            break;
        }
        case O_ASRDELAY: bad = mt_opt_seconds(optarg, 0, 60, &o->asr_delay_s); break;
        case O_TIMESCALE: bad = mt_opt_double(optarg, 0.1, 1000, &o->time_scale); break;
        case O_SIGNAL:
            if (!strcmp(optarg, "tick"))
                o->tick_signal = 1;
            else if (!strcmp(optarg, "frame"))
                o->tick_signal = 0;
            else
                return mt_opt_usage_error("--signal: frame or tick, not '%s'", optarg);
            break;
        }
        if (bad)
            return 2;
    }
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    if (o->to < o->from)
        return mt_opt_usage_error("--to is below --from");
    int has_args = optind < argc;
    if (has_args && o->sock)
        return mt_opt_usage_error("give -s SOCK or -- MT-SERVE-ARGS, not both");
    if (!has_args && !o->sock)
        return mt_opt_usage_error("need -s SOCK or -- MT-SERVE-ARGS");
    return mt_probe_check_outputs("sweep", o->plot, o->ticks_path, NULL);
}

int mt_probe_sweep_main(int argc, char **argv)
{
    mt_sweep_opts o;
    char err[512], servebuf[PATH_MAX];
    memset(&o, 0, sizeof o);
    o.from = 1;
    o.to = 8;
    o.step = 1;
    o.hold_s = 20;
    o.warmup_s = 1;
    o.asr_delay_s = 0.5;     /* mt-serve's --asr-delay default (stt-1b's) */
    o.progress = isatty(2) ? stderr : NULL;
    o.aligned = isatty(1);   /* a pipe or a file gets the TSV */
    const char *serve = NULL;
    int rc = sweep_options(argc, argv, &o, &serve);
    if (rc >= 0)
        return rc;
    if (optind < argc) {
        o.serve_bin = serve ? serve : mt_probe_default_serve(servebuf, sizeof servebuf);
        if (!o.serve_bin) {
            fprintf(stderr, "%s sweep: mt-serve not found (use --serve BIN)\n",
                    prog);
            return 1;
        }
        o.serve_args = argv + optind;
        o.nserve_args = argc - optind;
    }
    mt_sweep_row *rows;
    int n, wall;
    o.stop = &mt_probe_stop;
    mt_probe_catch_signals();
    if (mt_sweep_run(&o, stdout, &rows, &n, &wall, err, sizeof err)) {
        fprintf(stderr, "%s sweep: %s\n", prog, err);
        return 1;
    }
    free(rows);
    return 0;
}

