/* soak_cmd.c: `mt-probe soak`: R sustained runs per server configuration,
 * each against its own mt-serve, classified collapsed or not (probe/soak.c). */
#define _GNU_SOURCE
#include "cmd/probe_common.h"
#include "cmd/opt.h"
#include "decode/sim_profile.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prog = MT_PROBE_PROG;

static void help_soak(FILE *f)
{
    fprintf(f,
"usage: mt-probe soak [options] -- MT-SERVE-ARGS... [-- MT-SERVE-ARGS...]\n"
"\n"
"R sustained runs for each server configuration (the argument groups after\n"
"--, e.g. `-- --kv window -- --kv full --kv-mem 8M`). Every run starts its\n"
"own mt-serve on a private socket, plays a seeded workload (random arrivals\n"
"and session lengths; run i uses seed S+i in every configuration), and is\n"
"classified COLLAPSED when an admitted session goes --starve (2 s) or more\n"
"without a real (non-FILL) output frame, or the server's lateness grows\n"
"without bound (slope >= 100 ms/s over the second half, reaching 1 s).\n"
"Prints one row per run, then per configuration: collapsed / total and the\n"
"prediction of `mt-probe predict` beside the measured time to collapse.\n"
"\n"
"  --runs R            runs per configuration (default 5)\n"
LOAD_HELP
"  --starve D          the starvation that counts as collapse (default 2s)\n"
"  --plot FILE.png     lateness over time, bounded vs unbounded, truthful\n"
"                      beside naive\n"
"  --data DIR          keep each run's tick lines and series in DIR\n"
"  --serve BIN         the mt-serve to start (default: beside mt-probe)\n"
"  --audio FILE        what the sessions send (default synthetic voice-like)\n"
"  --backend B         cpu or cuda: the cache element size for predict\n"
"  --kv-dtype T        f16 (default) or f32: the CPU cache's, for predict\n"
"  --samples N         Monte Carlo seeds for the summary's prediction\n"
"  --time-scale K      simulated devices: each server gets --time-scale K\n"
"                      (0.1..1000) and the load runs at K times real\n"
"                      time; every time in\n"
"                      the table is model time (real time x K)\n");
}

static const mt_cli cli_soak = {
    "mt-probe soak", "mt-probe soak [options] -- MT-SERVE-ARGS... [-- MT-SERVE-ARGS...]",
    help_soak,
};

/* The options into o, ld, so and *serve: -1 to go on, else the exit status. */
static int soak_options(int argc, char **argv, mt_soak_opts *o, load_opts *ld,
                        shape_opts *so, const char **serve)
{
    static const struct option lo[] = {
        LOAD_LONGOPTS,
        {"runs", required_argument, 0, O_RUNS},
        {"starve", required_argument, 0, O_STARVE},
        {"plot", required_argument, 0, O_PLOT},
        {"data", required_argument, 0, O_DATA},
        {"serve", required_argument, 0, O_SERVE},
        {"audio", required_argument, 0, O_AUDIO},
        {"backend", required_argument, 0, O_BACKEND},
        {"kv-dtype", required_argument, 0, O_KVDTYPE},
        {"samples", required_argument, 0, O_SAMPLES},
        {"time-scale", required_argument, 0, O_TIMESCALE},
        MT_OPT_COMMON,
        {0, 0, 0, 0},
    };
    int c, r;
    while ((c = mt_opt_next(&cli_soak, argc, argv, "+h", lo)) >= 0) {
        r = 1;
        switch (c) {
        case O_RUNS: r = mt_opt_int(optarg, 1, 10000, &o->runs) ? -1 : 1; break;
        case O_STARVE:
            r = mt_opt_seconds(optarg, 0.001, INFINITY, &o->starve_s) ? -1 : 1;
            break;
        case O_PLOT: o->plot = optarg; break;
        case O_DATA: o->data_dir = optarg; break;
        case O_SERVE: *serve = optarg; break;
        case O_AUDIO: o->audio = optarg; break;
        case O_TIMESCALE:
            r = mt_opt_double(optarg, 0.1, 1000, &o->time_scale) ? -1 : 1;
            break;
        default:
            if (!(r = mt_probe_shape_opt(so, c, optarg)))
                r = mt_probe_load_opt(ld, c, optarg);
        }
        if (r <= 0)
            return 2;
    }
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    /* getopt_long stopped at the first "--" (consumed) or a non-option. */
    if (optind >= argc)
        return mt_opt_usage_error("give the mt-serve arguments after --");
    if (optind > 0 && strcmp(argv[optind - 1], "--") != 0 &&
        argv[optind][0] != '-')
        return mt_opt_usage_error("unexpected argument '%s' (mt-serve arguments "
                                  "go after --)", argv[optind]);
    return mt_probe_check_outputs("soak", o->plot, NULL, o->data_dir);
}

/* A configuration's label: the policy and its pool or bound. */
static void soak_label(mt_soak_config *cfg, char **argv, int start, int end, int idx)
{
    size_t len = 0;
    cfg->label[0] = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int k = start; k + 1 < end; k++) {
            const char *pre = NULL;
            if (!strcmp(argv[k], "--kv")) pre = pass ? NULL : "";
            else if (!pass) pre = NULL;
            else if (!strcmp(argv[k], "--window")) pre = "W=";
            else if (!strcmp(argv[k], "--on-full")) pre = "";
            if (!pre)
                continue;
            int m = snprintf(cfg->label + len, sizeof cfg->label - len, "%s%s%s",
                             len ? "/" : "", pre, argv[k + 1]);
            if (m > 0 && len + (size_t)m < sizeof cfg->label)
                len += (size_t)m;
            else
                cfg->label[len] = 0;
        }
    if (!len)
        snprintf(cfg->label, sizeof cfg->label, "config%d", idx + 1);
}

/* The argument groups after the options, split at "--": the number of
 * configurations, or -1 on a usage error (said). */
static int soak_configs(int argc, char **argv, mt_soak_config *cfg, int max)
{
    int ncfg = 0, start = optind;
    for (int i = optind; i <= argc; i++) {
        if (i < argc && strcmp(argv[i], "--"))
            continue;
        if (i > start || i == argc) {
            if (ncfg == max)
                return mt_opt_usage_error("at most %d configurations", max), -1;
            cfg[ncfg].args = argv + start;
            cfg[ncfg].nargs = i - start;
            soak_label(&cfg[ncfg], argv, start, i, ncfg);
            ncfg++;
        }
        start = i + 1;
    }
    for (int i = 0; i < ncfg; i++)
        for (int k = 0; k < cfg[i].nargs; k++)
            if (!strcmp(cfg[i].args[k], "-s") || !strcmp(cfg[i].args[k], "--socket")
                || !strcmp(cfg[i].args[k], "--stdio"))
                return mt_opt_usage_error("mt-serve arguments must not name a "
                                          "socket or --stdio (%s): each run gets "
                                          "its own", cfg[i].args[k]), -1;
    return ncfg;
}

/* The model and cache element of the prediction: -m of the first
 * configuration that names one (else mt-serve's default), bf16 when one
 * runs on cuda. */
static void soak_shape(shape_opts *so, const mt_soak_config *cfg, int ncfg)
{
    for (int i = 0; i < ncfg && !so->model; i++)
        for (int k = 0; k + 1 < cfg[i].nargs; k++)
            if (!strcmp(cfg[i].args[k], "-m") || !strcmp(cfg[i].args[k], "--model"))
                so->model = cfg[i].args[k + 1];
    for (int i = 0; i < ncfg; i++)
        for (int k = 0; k < cfg[i].nargs; k++)
            if (!strcmp(cfg[i].args[k], "cuda") ||
                !strcmp(cfg[i].args[k], "--device=cuda"))
                so->elem = 2;
    /* a simulated device: the profile's K/V element */
    for (int i = 0; i < ncfg; i++)
        for (int k = 0; k < cfg[i].nargs; k++) {
            const char *a = cfg[i].args[k];
            if (!strncmp(a, "--device=", 9))
                a += 9;
            if (strncmp(a, "sim:", 4))
                continue;
            mt_sim_profile p;
            char e[256];
            if (mt_sim_profile_load(a + 4, &p, e, sizeof e) == 0)
                so->elem = p.kv_bytes;
        }
}

int mt_probe_soak_main(int argc, char **argv)
{
    mt_soak_opts o;
    load_opts ld;
    shape_opts so;
    char err[512], servebuf[PATH_MAX];
    const char *serve = NULL;
    memset(&o, 0, sizeof o);
    mt_probe_load_defaults(&ld);
    mt_probe_shape_defaults(&so);
    o.runs = 5;
    o.starve_s = 2.0;
    o.progress = isatty(2) ? stderr : NULL;
    int rc = soak_options(argc, argv, &o, &ld, &so, &serve);
    if (rc >= 0)
        return rc;
    mt_soak_config cfg[16];
    int ncfg = soak_configs(argc, argv, cfg, 16);
    if (ncfg < 0)
        return 2;
    o.serve_bin = serve ? serve : mt_probe_default_serve(servebuf, sizeof servebuf);
    if (!o.serve_bin) {
        fprintf(stderr, "%s soak: mt-serve not found (use --serve BIN)\n", prog);
        return 1;
    }
    if (access(o.serve_bin, X_OK)) {
        fprintf(stderr, "%s soak: %s: %s\n", prog, o.serve_bin, strerror(errno));
        return 1;
    }
    o.duration_s = ld.duration_s;
    o.seed = ld.seed;
    o.arrivals = ld.arrivals;
    o.lengths = ld.lengths;
    o.max_sessions = ld.max_sessions;
    o.cfg = cfg;
    o.ncfg = ncfg;
    soak_shape(&so, cfg, ncfg);
    if (mt_probe_shape_fill(&so, &o.pred, err, sizeof err))
        fprintf(stderr, "%s soak: no prediction: %s\n", prog, err);
    o.model = so.model;
    if (o.data_dir) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof cmd, "%s", o.data_dir);
        if (mkdir(cmd, 0755) && errno != EEXIST) {
            fprintf(stderr, "%s soak: %s: %s\n", prog, o.data_dir,
                    strerror(errno));
            return 1;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    o.stop = &mt_probe_stop;
    mt_probe_catch_signals();
    mt_soak_run *runs;
    int nruns;
    if (mt_soak(&o, stdout, &runs, &nruns, err, sizeof err)) {
        fprintf(stderr, "%s soak: %s\n", prog, err);
        return mt_probe_stop ? 130 : 1;
    }
    free(runs);
    if (mt_probe_stop) {
        fprintf(stderr, "%s soak: interrupted after %d run%s: %s of those\n",
                prog, nruns, nruns == 1 ? "" : "s",
                o.plot ? "the summary and the plot are" : "the summary is");
        return 130;
    }
    return 0;
}

