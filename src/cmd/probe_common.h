/* probe_common.h: what the subcommands of mt-probe share (probe_common.c):
 * the stop flag Ctrl-C sets, finding mt-serve, checking output paths
 * before a run, and the load and model-shape options of predict and soak.
 * The subcommands' mains: predict_cmd.c, summarize_cmd.c, plot_cmd.c,
 * sweep_cmd.c, soak_cmd.c (and calibrate_cmd.c, quality_cmd.c,
 * codec_cmd.c); mt-probe.c only dispatches. */
#ifndef MT_CMD_PROBE_COMMON_H
#define MT_CMD_PROBE_COMMON_H

#include "probe/probe.h"

#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define MT_PROBE_PROG "mt-probe"

/* Set by SIGINT, SIGTERM, SIGHUP once mt_probe_catch_signals ran. */
extern volatile sig_atomic_t mt_probe_stop;

/* Ctrl-C and SIGTERM end a sweep or soak cleanly: its servers are stopped
 * by pid, nothing is left running. No SA_RESTART. */
void mt_probe_catch_signals(void);

/* mt-serve next to this program, else on PATH, in buf; NULL: none. */
const char *mt_probe_default_serve(char *buf, size_t n);

/* The files and folder an experiment will write, checked before it starts
 * (a typo must not cost the whole run): --plot (and gnuplot), --ticks,
 * --data (made when missing, so its parent is checked). -1 to go on, else
 * the exit status (said, naming the option and the path). */
int mt_probe_check_outputs(const char *sub, const char *plot, const char *ticks,
                           const char *data);

enum {
    O_FROM = 256, O_TO, O_STEP, O_HOLD, O_WARMUP, O_AUDIO, O_TICKS, O_PLOT,
    O_TSV, O_SERVE, O_RUNS, O_DURATION, O_SEED, O_ARRIVALS, O_LENGTHS,
    O_MAXSESS, O_STARVE, O_DATA, O_LAYERS, O_KVHEADS, O_HEADDIM, O_BACKEND,
    O_KVDTYPE,
    O_POSBYTES, O_KVMEM, O_SINK, O_WINDOW, O_BLOCK, O_FRAMEMS, O_SAMPLES, O_CODEC,
    O_KIND, O_STRICT, O_TITLE, O_OUT, O_BUDGET, O_TOKEN, O_TIMESCALE, O_SIGNAL,
    O_PROFILE, O_CODEBOOKS,
    O_ASRDELAY,
};

typedef struct load_opts {
    double      duration_s;
    uint64_t    seed;
    mt_arrivals arrivals;
    mt_lengths  lengths;
    int         max_sessions;
} load_opts;

void mt_probe_load_defaults(load_opts *l);
/* Returns 1 if handled, 0 if not a load option, -1 on a bad value (said). */
int mt_probe_load_opt(load_opts *l, int c, const char *arg);

#define LOAD_LONGOPTS \
    {"duration", required_argument, 0, O_DURATION}, \
    {"seed", required_argument, 0, O_SEED}, \
    {"arrivals", required_argument, 0, O_ARRIVALS}, \
    {"lengths", required_argument, 0, O_LENGTHS}, \
    {"max-sessions", required_argument, 0, O_MAXSESS}

#define LOAD_HELP \
"  --duration D        length of the load (default 30s; 800ms, 2m, ...)\n" \
"  --seed S            first seed; run i uses S+i (default 1)\n" \
"  --arrivals A        poisson:RATE | even:RATE | burst:N  (sessions/s;\n" \
"                      default poisson:1)\n" \
"  --lengths L         fixed:T | uniform:T1:T2 | exp:MEAN |\n" \
"                      lognormal:MEDIAN:SIGMA  (default exp:20s); sessions\n" \
"                      still running when the load ends are cut there\n" \
"  --max-sessions N    at most N sessions per run (default 512)\n"


typedef struct shape_opts {
    const char *model;
    int         layers, kv_heads, head_dim;
    int         elem;
    uint64_t    position_bytes;
    int         sink, window, block;
    double      frame_ms;
    int         samples;
    int         backend_cuda, kv_f32;   /* --backend cuda, --kv-dtype f32 */
} shape_opts;

void mt_probe_shape_defaults(shape_opts *s);
/* Returns 1 if handled, 0 if not a shape option, -1 on a bad value (said). */
int mt_probe_shape_opt(shape_opts *s, int c, const char *arg);
/* Shape from the options, or from the model. 0, or -1 with err. */
int mt_probe_shape_fill(const shape_opts *s, mt_predict_params *p, char *err,
                        size_t errlen);

#define SHAPE_LONGOPTS \
    {"model", required_argument, 0, 'm'}, \
    {"layers", required_argument, 0, O_LAYERS}, \
    {"kv-heads", required_argument, 0, O_KVHEADS}, \
    {"head-dim", required_argument, 0, O_HEADDIM}, \
    {"backend", required_argument, 0, O_BACKEND}, \
    {"kv-dtype", required_argument, 0, O_KVDTYPE}, \
    {"position-bytes", required_argument, 0, O_POSBYTES}, \
    {"sink", required_argument, 0, O_SINK}, \
    {"window", required_argument, 0, O_WINDOW}, \
    {"block", required_argument, 0, O_BLOCK}, \
    {"frame-ms", required_argument, 0, O_FRAMEMS}, \
    {"samples", required_argument, 0, O_SAMPLES}

/* The subcommands' mains: argv[0] is the program name, options follow;
 * each returns the exit status (0 done, 1 runtime error, 2 usage). */
int mt_probe_predict_main(int argc, char **argv);
int mt_probe_summarize_main(int argc, char **argv);
int mt_probe_plot_main(int argc, char **argv);
int mt_probe_sweep_main(int argc, char **argv);
int mt_probe_soak_main(int argc, char **argv);

#endif
