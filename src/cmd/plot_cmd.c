/* plot_cmd.c: `mt-probe plot`: one figure from a file of mt-serve tick
 * lines (probe/plot.c). */
#define _GNU_SOURCE
#include "cmd/probe_common.h"
#include "cmd/opt.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prog = MT_PROBE_PROG;

static void help_plot(FILE *f)
{
    fprintf(f,
"usage: mt-probe plot --ticks FILE -o FILE.png [--title T] [--frame-ms MS]\n"
"\n"
"Draws a file of mt-serve tick lines: p99 frame latency, step compute time,\n"
"lateness of the oldest unanswered frame, and the active sessions, against\n"
"the frame period. The gnuplot script and data are kept beside the PNG.\n");
}

static const mt_cli cli_plot = {
    "mt-probe plot", "mt-probe plot --ticks FILE -o FILE.png [--title T] [--frame-ms MS]",
    help_plot,
};

int mt_probe_plot_main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"ticks", required_argument, 0, O_TICKS},
        {"output", required_argument, 0, 'o'},
        {"title", required_argument, 0, O_TITLE},
        {"frame-ms", required_argument, 0, O_FRAMEMS},
        MT_OPT_COMMON,
        {0, 0, 0, 0},
    };
    const char *ticks = NULL, *out = NULL, *title = NULL;
    double frame_ms = 80;
    char err[512];
    int c;
    while ((c = mt_opt_next(&cli_plot, argc, argv, "o:h", lo)) >= 0) {
        switch (c) {
        case O_TICKS: ticks = optarg; break;
        case 'o': out = optarg; break;
        case O_TITLE: title = optarg; break;
        case O_FRAMEMS:
            if (mt_opt_ms(optarg, 0.001, 1e9, &frame_ms))
                return 2;
            break;
        }
    }
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    if (!ticks || !out || optind < argc)
        return mt_opt_usage_error("need --ticks FILE and -o FILE.png");
    if (mt_plot_check("-o", out, err, sizeof err) != 0 ||
        mt_plot_ticks(out, ticks, title, frame_ms, err, sizeof err)) {
        fprintf(stderr, "%s plot: %s\n", prog, err);
        return 1;
    }
    return 0;
}

