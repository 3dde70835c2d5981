/* mt-probe: capacity experiments against mt-serve (see mt-probe(1)).
 *
 *   mt-probe sweep      latency vs concurrency, finds the wall
 *   mt-probe soak       sustained runs, counts collapses, bounded vs not
 *   mt-probe predict    the analytic model of when the unbounded pool fills
 *   mt-probe summarize  percentiles and counts from latency lines on stdin
 *   mt-probe plot       one figure from a file of mt-serve tick lines
 *
 *   mt-probe quality, calibrate, codec   (see usage_main)
 *
 * A thin main: it picks the subcommand; each has its own file in src/cmd/
 * (predict_cmd.c, summarize_cmd.c, plot_cmd.c, sweep_cmd.c, soak_cmd.c,
 * quality_cmd.c, calibrate_cmd.c, codec_cmd.c; what they share is
 * probe_common.c), the library (probe.h) does the work. Exit status: 0
 * done, 1 runtime error, 2 usage.
 */
#define _GNU_SOURCE
#include "cmd/opt.h"
#include "cmd/calibrate_cmd.h"
#include "cmd/codec_cmd.h"
#include "cmd/probe_common.h"
#include "cmd/quality_cmd.h"
#include "util/version.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static void usage_main(FILE *f)
{
    fprintf(f,
"usage: mt-probe COMMAND [options]\n"
"\n"
"Capacity experiments against mt-serve.\n"
"\n"
"commands:\n"
"  sweep      hold 1..N concurrent sessions, print latency per level, find\n"
"             the wall (largest level whose p99 stays under the frame period)\n"
"  soak       R sustained runs per server configuration, each against its own\n"
"             mt-serve; classify each run as collapsed or not\n"
"  predict    analytic model: when the unbounded KV pool overflows, and the\n"
"             bounded capacity\n"
"  summarize  percentiles and counts from latency lines on stdin\n"
"  plot       draw one PNG from a file of mt-serve tick lines\n"
"  quality    perplexity and free-generation quality of a token model under\n"
"             each cache policy (full, window, window+sink, recompute)\n""  calibrate  time a real backend over batch sizes and cache lengths, fit\n"
"             the simulated device's cost model, write a profile (issue 22);\n"
"             --served times the step inside a serving mt-serve under load\n"
"  codec      Kyutai's Mimi codec on a file: audio to codes, codes to audio,\n"
"             or the round trip\n"
"\n"
"`mt-probe COMMAND --help` lists the options of each; see mt-probe(1).\n"
"`mt-probe --version` prints the version.\n");
}

static const mt_cli cli_main = {
    "mt-probe", "mt-probe COMMAND [options] (sweep, soak, predict, summarize, plot, quality, calibrate, codec)",
    usage_main,
};

int main(int argc, char **argv)
{
    mt_opt_use(&cli_main);
    if (argc < 2)
        return mt_opt_usage_error("no command");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage_main(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("mt-probe %s\n", MT_VERSION);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    argv[1] = argv[0];
    argc--;
    argv++;
    optind = 1;
    if (!strcmp(cmd, "predict")) return mt_probe_predict_main(argc, argv);
    if (!strcmp(cmd, "summarize") || !strcmp(cmd, "summary"))
        return mt_probe_summarize_main(argc, argv);
    if (!strcmp(cmd, "sweep")) return mt_probe_sweep_main(argc, argv);
    if (!strcmp(cmd, "soak")) return mt_probe_soak_main(argc, argv);
    if (!strcmp(cmd, "plot")) return mt_probe_plot_main(argc, argv);
    if (!strcmp(cmd, "quality")) return mt_probe_quality_main(argc, argv);
    if (!strcmp(cmd, "codec")) return mt_probe_codec_main(argc, argv);
    if (!strcmp(cmd, "calibrate")) {
        char servebuf[PATH_MAX];
        return mt_probe_calibrate_main(argc, argv, mt_probe_default_serve(servebuf, sizeof servebuf));
    }
    return mt_opt_usage_error("unknown %s '%s'", cmd[0] == '-' ? "option" : "command", cmd);
}
