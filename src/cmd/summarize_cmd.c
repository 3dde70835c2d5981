/* summarize_cmd.c: `mt-probe summarize`: percentiles and counts from latency
 * lines (probe/summary.c) read from files or stdin. */
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

static void help_summarize(FILE *f)
{
    fprintf(f,
"usage: mt-probe summarize [--kind K] [--tsv] [--strict] [FILE...]\n"
"\n"
"Reads latency lines (mt-serve's tick lines, mt-replay's client lines, any\n"
"logfmt records) from the files or stdin and prints, per record kind and\n"
"numeric key: count, mean, p50, p90, p99, max, sum. For tick lines it adds\n"
"frames served for real vs filled with silence, and deadlines met counted\n"
"truthfully beside the naive figure.\n"
"\n"
"  --kind K   only records whose first key is K (e.g. tick)\n"
"  --tsv      tab-separated, with a header line\n"
"  --strict   stop at the first malformed line (exit 1); default: skip\n"
"             and count them\n");
}

static const mt_cli cli_summarize = {
    "mt-probe summarize", "mt-probe summarize [--kind K] [--tsv] [--strict] [FILE...]",
    help_summarize,
};

int mt_probe_summarize_main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"kind", required_argument, 0, O_KIND},
        {"tsv", no_argument, 0, O_TSV},
        {"strict", no_argument, 0, O_STRICT},
        MT_OPT_COMMON,
        {0, 0, 0, 0},
    };
    const char *kind = NULL;
    int tsv = 0, strict = 0, c;
    char err[512];
    while ((c = mt_opt_next(&cli_summarize, argc, argv, "h", lo)) >= 0) {
        switch (c) {
        case O_KIND: kind = optarg; break;
        case O_TSV: tsv = 1; break;
        case O_STRICT: strict = 1; break;
        }
    }
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    mt_summary *s;
    if (mt_summary_new(&s, err, sizeof err)) {
        fprintf(stderr, "%s summarize: %s\n", prog, err);
        return 1;
    }
    int rc = 0;
    /* No SA_RESTART: an interrupt ends a blocked read (mt_summary_read).
     * The usual use is `mt-serve ... | mt-probe summarize` ended by Ctrl-C,
     * which reaches both programs: the interrupt ends the input (what was
     * read is summarized) instead of killing summarize before it prints. */
    mt_probe_catch_signals();
    if (optind == argc) {
        if (mt_summary_read(s, stdin, strict, &mt_probe_stop, err, sizeof err))
            rc = 1;
    } else {
        for (int i = optind; i < argc && !rc && !mt_probe_stop; i++) {
            FILE *f = strcmp(argv[i], "-") ? fopen(argv[i], "r") : stdin;
            if (!f) {
                snprintf(err, sizeof err, "%s: %s", argv[i], strerror(errno));
                rc = 1;
                break;
            }
            if (mt_summary_read(s, f, strict, &mt_probe_stop, err, sizeof err))
                rc = 1;
            if (f != stdin)
                fclose(f);
        }
    }
    if (rc) {
        fprintf(stderr, "%s summarize: %s\n", prog, err);
        mt_summary_free(s);
        return 1;
    }
    if (!mt_summary_records(s)) {
        fprintf(stderr, "%s summarize: no latency lines read%s\n", prog,
                mt_summary_bad_lines(s) ? " (only malformed ones)" : "");
        mt_summary_free(s);
        return 1;
    }
    if (mt_probe_stop)
        fprintf(stderr, "%s summarize: interrupted: the summary of the lines "
                "read so far\n", prog);
    mt_summary_print(stdout, s, tsv ? MT_SUM_TSV : MT_SUM_TABLE, kind);
    mt_summary_free(s);
    return 0;
}

