/* mt-probe: capacity experiments against mt-serve (see mt-probe(1)).
 *
 *   mt-probe sweep      latency vs concurrency, finds the wall
 *   mt-probe soak       sustained runs, counts collapses, bounded vs not
 *   mt-probe predict    the analytic model of when the unbounded pool fills
 *   mt-probe summarize  percentiles and counts from latency lines on stdin
 *   mt-probe plot       one figure from a file of mt-serve tick lines
 *
 * A thin main: options in, the library (probe.h) does the work, errors
 * are printed here. Exit status: 0 done, 1 runtime error, 2 usage.
 */
#define _GNU_SOURCE
#include "util/errmsg.h"
#include "cmd/opt.h"
#include "wire/endpoint.h"
#include "cmd/calibrate_cmd.h"
#include "cmd/codec_cmd.h"
#include "codec/mimi.h"
#include "cmd/quality_cmd.h"
#include "speech/serve_kyutai.h"
#include "probe/probe.h"
#include "decode/kv.h"
#include "decode/backend_sim.h"
#include "decode/sim_profile.h"
#include "probe/predict_frame.h"

#include <errno.h>
#include <math.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prog = "mt-probe";
static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* Ctrl-C and SIGTERM end a sweep or soak cleanly: its servers are stopped
 * by pid, nothing is left running. */
static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

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

/* mt-serve next to this program, else on PATH. */
static const char *default_serve(char *buf, size_t n)
{
    char self[PATH_MAX + 1];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = 0;
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = 0;
            if (snprintf(buf, n, "%.4000s/mt-serve", self) >= (int)n)
                return NULL;
            if (access(buf, X_OK) == 0)
                return buf;
        }
    }
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *c = strchr(path, ':');
        size_t l = c ? (size_t)(c - path) : strlen(path);
        snprintf(buf, n, "%.*s/mt-serve", (int)l, path);
        if (l && access(buf, X_OK) == 0)
            return buf;
        path = c ? c + 1 : NULL;
    }
    return NULL;
}

/* ---- load options shared by predict and soak ------------------------------ */
enum {
    O_FROM = 256, O_TO, O_STEP, O_HOLD, O_WARMUP, O_AUDIO, O_TICKS, O_PLOT,
    O_TSV, O_SERVE, O_RUNS, O_DURATION, O_SEED, O_ARRIVALS, O_LENGTHS,
    O_MAXSESS, O_STARVE, O_DATA, O_LAYERS, O_KVHEADS, O_HEADDIM, O_BACKEND,
    O_KVDTYPE,
    O_POSBYTES, O_KVMEM, O_SINK, O_WINDOW, O_BLOCK, O_FRAMEMS, O_SAMPLES, O_CODEC,
    O_KIND, O_STRICT, O_TITLE, O_OUT, O_BUDGET, O_TOKEN, O_TIMESCALE, O_SIGNAL,
    O_PROFILE, O_CODEBOOKS,
};

typedef struct load_opts {
    double      duration_s;
    uint64_t    seed;
    mt_arrivals arrivals;
    mt_lengths  lengths;
    int         max_sessions;
} load_opts;

static void load_defaults(load_opts *l)
{
    char e[8];
    l->duration_s = 30;
    l->seed = 1;
    mt_arrivals_parse("poisson:1", &l->arrivals, e, sizeof e);
    mt_lengths_parse("exp:20s", &l->lengths, e, sizeof e);
    l->max_sessions = 512;
}

/* Returns 1 if handled, 0 if not a load option, -1 on a bad value (said). */
static int load_opt(load_opts *l, int c, const char *arg)
{
    char err[256];
    switch (c) {
    case O_DURATION:
        return mt_opt_seconds(arg, 0.001, INFINITY, &l->duration_s) ? -1 : 1;
    case O_SEED:
        return mt_opt_u64(arg, &l->seed) ? -1 : 1;
    case O_ARRIVALS:
        if (mt_arrivals_parse(arg, &l->arrivals, err, sizeof err))
            return mt_opt_fail("%s", err);
        return 1;
    case O_LENGTHS:
        if (mt_lengths_parse(arg, &l->lengths, err, sizeof err))
            return mt_opt_fail("%s", err);
        return 1;
    case O_MAXSESS:
        return mt_opt_int(arg, 1, 100000, &l->max_sessions) ? -1 : 1;
    }
    return 0;
}

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

/* ---- predict ----------------------------------------------------------------- */

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

static void shape_defaults(shape_opts *s)
{
    memset(s, 0, sizeof *s);
    s->elem = 2;        /* mt-serve's default on the CPU: an f16 cache */
    s->sink = 4;
    s->window = 256;
    s->block = MT_KV_BLOCK;
    s->samples = 1000;
}

/* Returns 1 if handled, 0 if not a shape option, -1 on a bad value (said). */
static int shape_opt(shape_opts *s, int c, const char *arg)
{
    static const char *const backends[] = { "cpu", "cuda", NULL };
    int i;
    switch (c) {
    case 'm': s->model = arg; return 1;
    case O_LAYERS: return mt_opt_int(arg, 1, 100000, &s->layers) ? -1 : 1;
    case O_KVHEADS: return mt_opt_int(arg, 1, 100000, &s->kv_heads) ? -1 : 1;
    case O_HEADDIM: return mt_opt_int(arg, 1, 100000, &s->head_dim) ? -1 : 1;
    case O_BACKEND:
        if (mt_opt_choice(arg, backends, &i))
            return -1;
        s->backend_cuda = i;    /* the cache element: bf16 on cuda */
        s->elem = i ? 2 : s->kv_f32 ? 4 : 2;
        return 1;
    case O_KVDTYPE: {
        static const char *const dtypes[] = { "f16", "f32", NULL };
        if (mt_opt_choice(arg, dtypes, &i))
            return -1;
        s->kv_f32 = i;           /* as mt-serve --kv-dtype (the CPU's) */
        s->elem = s->backend_cuda ? 2 : i ? 4 : 2;
        return 1;
    }
    case O_POSBYTES:
        return mt_opt_bytes(arg, 0, UINT64_MAX, &s->position_bytes) ? -1 : 1;
    case O_SINK: return mt_opt_int(arg, 0, 1 << 24, &s->sink) ? -1 : 1;
    case O_WINDOW: return mt_opt_int(arg, 1, 1 << 24, &s->window) ? -1 : 1;
    case O_BLOCK: return mt_opt_int(arg, 1, 1 << 20, &s->block) ? -1 : 1;
    case O_FRAMEMS: return mt_opt_ms(arg, 0.001, 1e9, &s->frame_ms) ? -1 : 1;
    case O_SAMPLES: return mt_opt_int(arg, 1, 1000000, &s->samples) ? -1 : 1;
    }
    return 0;
}

/* Shape from the options, or from the model. 0, or -1 with err. */
static int shape_fill(const shape_opts *s, mt_predict_params *p, char *err,
                      size_t errlen)
{
    p->elem_bytes = s->elem;
    p->position_bytes = s->position_bytes;
    p->sink = s->sink;
    p->window = s->window;
    p->block = s->block;
    p->samples = s->samples;
    p->period_s = 0.08;
    if (s->layers && s->kv_heads && s->head_dim) {
        p->layers = s->layers;
        p->kv_heads = s->kv_heads;
        p->head_dim = s->head_dim;
    } else if (!s->position_bytes) {
        if (mt_predict_shape_from_model(p, s->model ? s->model
                                                    : "synthetic:small",
                                        err, errlen))
            return -1;
        if (s->layers) p->layers = s->layers;
        if (s->kv_heads) p->kv_heads = s->kv_heads;
        if (s->head_dim) p->head_dim = s->head_dim;
    }
    if (s->frame_ms > 0)
        p->period_s = s->frame_ms / 1000.0;
    return 0;
}

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

static void help_predict(FILE *f)
{
    fprintf(f,
"usage: mt-probe predict --kv-mem BYTES [-m MODEL] [--codec SPEC [--codebooks N]\n"
"       [--profile P]] [load options]\n"
"\n"
"The analytic model of the KV wall. Unbounded (--kv full): each live session\n"
"holds one position per frame, in blocks; the pool overflows when the blocks\n"
"of the live sessions exceed it. Prints the time to overflow (Monte Carlo\n"
"over seeded workloads: median, p10, p90; and a mean-field closed form) and,\n"
"for the bounded policy, the capacity pool / bound and the refusals.\n"
"\n"
"  -m, --model SPEC    model for the shape (default synthetic:small)\n"
"  --layers N --kv-heads N --head-dim N   give the shape instead\n"
"  --backend B         cpu (default) or cuda (a bf16 cache)\n"
"  --kv-dtype T        the CPU's cache: f16 (default, as mt-serve's) or f32\n"
"  --position-bytes N  KV bytes per position, all layers (overrides shape)\n"
"  --kv-mem BYTES      the pool (e.g. 64M), as mt-serve --kv-mem\n"
"  --sink S --window W the bound of --kv window (default 4 and 256)\n"
"  --block N           positions per block (default %d)\n"
"  --frame-ms MS       frame period (default: the model's, 80)\n"
"  --samples N         Monte Carlo seeds (default 1000)\n"
"  --runs N            also print the model of seeds S..S+N-1, one per row\n"
"  --codec SPEC        sessions also carry Kyutai's Mimi codec (synthetic:mimi,\n"
"                      a checkpoint): its per-session host state and compute\n"
"                      beside the KV figures, at the bounded capacity\n"
"  --codebooks N       the codec's codebooks (the LM's n_q - dep_q; default\n"
"                      the codec's own)\n"
"  --profile P         with --codec: what the simulated device P (mt-profile(5))\n"
"                      books for the codec: bytes for --max-sessions sessions\n"
"                      and the time it adds to a step, as mt-serve --device sim:P\n"
LOAD_HELP, MT_KV_BLOCK);
}

static const mt_cli cli_predict = {
    "mt-probe predict", "mt-probe predict --kv-mem BYTES [-m MODEL] [load options]",
    help_predict,
};

/* What the simulated device books for the codec (backend_sim.h's model,
 * the same functions mt-serve --device sim:P runs). */
static void print_codec_sim(const mimi_model *m, const mt_sim_profile *pr, int sessions)
{
    mt_codec_cost c = {
        .flops = mimi_encode_flops(m) + mimi_decode_flops(m),
        .state_bytes = (double)mimi_state_bytes(m),
        .weight_bytes = (double)mimi_param_count(m) * sizeof(float),
    };
    printf("codec on sim:%s booked\t%.0f B for %d sessions (%.0f B of weights + %d x %.0f B of state)\n",
           pr->name, mt_sim_codec_booked(&c, sessions), sessions, c.weight_bytes, sessions,
           c.state_bytes);
    printf("codec on sim:%s time\t%.4g ms a session-frame at %.4g flop/s%s + %.4g ms a step; "
           "%.4g ms a step of %d sessions (simulated)\n",
           pr->name, c.flops / mt_sim_codec_rate(pr) * 1e3, mt_sim_codec_rate(pr),
           pr->codec_rate > 0 ? "" : " (no codec_rate: matrix_rate)",
           pr->codec_overhead_us * 1e-3, mt_sim_codec_seconds(pr, &c, sessions) * 1e3, sessions);
}

/* A speech model's whole frame on the simulated device: the sessions
 * whose frame holds p99 under the period (predict_frame.c). */
static void print_frame_sim(const mimi_model *m, const mt_sim_profile *pr, const char *model,
                            const mt_predict_params *p)
{
    mt_codec_cost c = {
        .flops = mimi_encode_flops(m) + mimi_decode_flops(m),
        .state_bytes = (double)mimi_state_bytes(m),
        .weight_bytes = (double)mimi_param_count(m) * sizeof(float),
    };
    mt_predict_frame_out f;
    char err[512];
    if (mt_predict_frame(pr, model, &c, p->sink, p->window, p->period_s, 4096, &f, err,
                         sizeof err)) {
        printf("frame on sim:%s\tnot predicted: %s\n", pr->name, err);
        return;
    }
    const mt_sim_cost *a = &f.at1, *b = &f.atmax;
    printf("frame on sim:%s B=1\t%.3f ms = temporal %.3f + depformer %.3f + codec %.3f "
           "(SIMULATED, profile %s)\n", pr->name, a->total * 1e3,
           (a->total - a->t_depformer - a->t_codec) * 1e3, a->t_depformer * 1e3,
           a->t_codec * 1e3, pr->path[0] ? pr->path : pr->name);
    if (f.compute_sessions > 0)
        printf("frame on sim:%s B=%d\t%.3f ms = temporal %.3f + depformer %.3f + codec %.3f; "
               "p99 x%.3f (SIMULATED)\n", pr->name, f.compute_sessions, b->total * 1e3,
               (b->total - b->t_depformer - b->t_codec) * 1e3, b->t_depformer * 1e3,
               b->t_codec * 1e3, f.p99_factor);
    printf("sessions per device on sim:%s\t%d (compute: %d hold p99 under %.0f ms; memory: %ld "
           "at S=%d W=%d) (SIMULATED)\n", pr->name, f.sessions, f.compute_sessions,
           p->period_s * 1e3, f.memory_sessions, p->sink, p->window);
}

/* The codec's share of a session: host state (not in the KV pool) and
 * compute per frame, alone and at the bounded capacity. */
static void print_codec(const mimi_model *m, const char *spec, int capacity, double period_s)
{
    double gf = (mimi_encode_flops(m) + mimi_decode_flops(m)) / 1e9;
    double per = period_s > 0 ? period_s : 0.08;
    double mib = mimi_state_bytes(m) / 1048576.0;
    printf("codec per-session state\t%.2f MiB host (%zu), outside the KV pool (%s, %d codebooks)\n", mib,
           mimi_state_bytes(m), spec, mimi_model_config(m)->n_q_used);
    printf("codec per-session compute\t%.3f GFLOP per frame (encode + decode), %.1f GFLOP/s\n", gf, gf / per);
    printf("codec at bounded capacity\t%.2f MiB host state, %.1f GFLOP/s for %d sessions\n", mib * capacity,
           gf / per * capacity, capacity);
}

static int cmd_predict(int argc, char **argv)
{
    static const struct option lo[] = {
        SHAPE_LONGOPTS, LOAD_LONGOPTS,
        {"kv-mem", required_argument, 0, O_KVMEM},
        {"runs", required_argument, 0, O_RUNS},
        {"codec", required_argument, 0, O_CODEC},
        {"codebooks", required_argument, 0, O_CODEBOOKS},
        {"profile", required_argument, 0, O_PROFILE},
        MT_OPT_COMMON,
        {0, 0, 0, 0},
    };
    shape_opts so;
    load_opts ld;
    mt_predict_params p;
    char err[512];
    const char *codec = NULL, *profile = NULL;
    int runs = 0, codebooks = 0, c;
    uint64_t kvmem = 0;
    shape_defaults(&so);
    load_defaults(&ld);
    memset(&p, 0, sizeof p);
    while ((c = mt_opt_next(&cli_predict, argc, argv, "m:h", lo)) >= 0) {
        int r;
        if (c == O_KVMEM)
            r = mt_opt_bytes(optarg, 0, UINT64_MAX, &kvmem) ? -1 : 1;
        else if (c == O_RUNS)
            r = mt_opt_int(optarg, 1, 100000, &runs) ? -1 : 1;
        else if (c == O_CODEC)
            r = (codec = optarg) ? 1 : -1;
        else if (c == O_PROFILE)
            r = (profile = optarg) ? 1 : -1;
        else if (c == O_CODEBOOKS)
            r = mt_opt_int(optarg, 1, 1024, &codebooks) ? -1 : 1;
        else if (!(r = shape_opt(&so, c, optarg)))
            r = load_opt(&ld, c, optarg);
        if (r <= 0)
            return 2;
    }
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    if (optind < argc)
        return mt_opt_usage_error("unexpected argument '%s'", argv[optind]);
    if (!kvmem)
        return mt_opt_usage_error("--kv-mem BYTES is required");
    if (shape_fill(&so, &p, err, sizeof err)) {
        fprintf(stderr, "%s predict: %s\n", prog, err);
        return 1;
    }
    /* a Kyutai model carries its codec: the one mt-serve would take */
    int kyutai = so.model && mt_kyutai_is_kyutai(so.model);
    char defcodec[4200];
    if (!codec && kyutai && mt_serve_kyutai_default_codec(so.model, defcodec, sizeof defcodec,
                                                          err, sizeof err) == 0)
        codec = defcodec;
    if ((profile || codebooks) && !codec)
        return mt_opt_usage_error("--profile and --codebooks go with --codec");
    mt_sim_profile prof;
    if (profile && mt_sim_profile_load(profile, &prof, err, sizeof err) != 0) {
        fprintf(stderr, "%s predict: --profile: %s\n", prog, err);
        return 1;
    }
    mimi_model *cm = NULL;
    if (codec && mimi_load_shape(codec, NULL, codebooks, &cm, err, sizeof err) != 0) {
        fprintf(stderr, "%s predict: --codec: %s\n", prog, err);
        return 1;
    }
    p.pool_bytes = kvmem;
    p.arrivals = ld.arrivals;
    p.lengths = ld.lengths;
    p.duration_s = ld.duration_s;
    p.max_sessions = ld.max_sessions;
    p.seed = ld.seed;
    mt_predict_result r;
    if (mt_predict(&p, &r, err, sizeof err)) {
        fprintf(stderr, "%s predict: %s\n", prog, err);
        mimi_free(cm);
        return 1;
    }
    mt_predict_print(stdout, &p, &r);
    if (cm) {
        print_codec(cm, codec, r.capacity, p.period_s);
        if (profile)
            print_codec_sim(cm, &prof, p.max_sessions);
        if (profile && kyutai)
            print_frame_sim(cm, &prof, so.model, &p);
    }
    if (kyutai && r.bound_bytes) {
        /* what a session holds, as mt-serve's startup report adds it up */
        size_t cs = cm ? mimi_state_bytes(cm) : 0;
        printf("per-session bytes	%.2f MiB = temporal K/V under the bound %llu + depformer "
               "scratch and token rings %llu + codec state %zu%s\n",
               (double)(r.bound_bytes + p.session_extra_bytes + cs) / 1048576.0,
               (unsigned long long)r.bound_bytes, (unsigned long long)p.session_extra_bytes, cs,
               cm ? "" : " (no codec found: give --codec)");
    }
    mimi_free(cm);
    if (runs) {
        printf("#\nseed\tsessions\tpeak_live\tpeak_fill\toverflow_s\t"
               "bounded_rejected\n");
        for (int i = 0; i < runs; i++) {
            mt_predict_run pr;
            if (mt_predict_one(&p, p.seed + (uint64_t)i, &pr, err, sizeof err)) {
                fprintf(stderr, "%s predict: %s\n", prog, err);
                return 1;
            }
            printf("%llu\t%d\t%d\t%.2f\t", (unsigned long long)pr.seed,
                   pr.sessions, pr.peak_live, pr.peak_fill);
            if (pr.overflow_s >= 0)
                printf("%.1f", pr.overflow_s);
            else
                printf("-");
            printf("\t%d\n", pr.rejected);
        }
    }
    return 0;
}

/* ---- summarize ------------------------------------------------------------- */

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

static int cmd_summarize(int argc, char **argv)
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
    catch_signals();
    if (optind == argc) {
        if (mt_summary_read(s, stdin, strict, &stop_flag, err, sizeof err))
            rc = 1;
    } else {
        for (int i = optind; i < argc && !rc && !stop_flag; i++) {
            FILE *f = strcmp(argv[i], "-") ? fopen(argv[i], "r") : stdin;
            if (!f) {
                snprintf(err, sizeof err, "%s: %s", argv[i], strerror(errno));
                rc = 1;
                break;
            }
            if (mt_summary_read(s, f, strict, &stop_flag, err, sizeof err))
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
    if (stop_flag)
        fprintf(stderr, "%s summarize: interrupted: the summary of the lines "
                "read so far\n", prog);
    mt_summary_print(stdout, s, tsv ? MT_SUM_TSV : MT_SUM_TABLE, kind);
    mt_summary_free(s);
    return 0;
}

/* ---- output paths --------------------------------------------------------- */

/* The files and folder an experiment will write, checked before it starts
 * (a typo must not cost the whole run): --plot (and gnuplot), --ticks,
 * --data (made when missing, so its parent is checked). -1 to go on, else
 * the exit status (said, naming the option and the path). */
static int check_outputs(const char *sub, const char *plot, const char *ticks,
                         const char *data)
{
    char err[1024];
    if ((plot && mt_plot_check("--plot", plot, err, sizeof err) != 0) ||
        (ticks && mt_out_path_check("--ticks", ticks, err, sizeof err) != 0)) {
        fprintf(stderr, "%s %s: %s\n", prog, sub, err);
        return 1;
    }
    if (data) {
        struct stat st;
        if (stat(data, &st) == 0 ? !S_ISDIR(st.st_mode) || access(data, W_OK | X_OK) != 0
                                 : mt_out_path_check("--data", data, err, sizeof err) != 0) {
            if (stat(data, &st) == 0)
                snprintf(err, sizeof err, "--data %s: %s", data,
                         S_ISDIR(st.st_mode) ? strerror(EACCES) : "not a directory");
            fprintf(stderr, "%s %s: %s\n", prog, sub, err);
            return 1;
        }
    }
    return -1;
}

/* ---- plot ------------------------------------------------------------------ */

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

static int cmd_plot(int argc, char **argv)
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

/* ---- sweep ----------------------------------------------------------------- */

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
"                      about one period)\n"
"  --signal S          what the wall is judged by: frame (the truthful\n"
"                      per-frame p99, default) or tick (the p99 over the\n"
"                      hold's ticks of max(step_ms, late_ms), mt-admit's\n"
"                      signal; default budget one frame period; needs the\n"
"                      tick lines: -- MT-SERVE-ARGS or --ticks FILE)\n"
"  --time-scale K      a simulated server at K times real time (0.1..1000)\n"
"                      (added to the spawned server's arguments; with -s,\n"
"                      start it with --time-scale K): clients pace at\n"
"                      period/K, --hold and --warmup and every figure are\n"
"                      model time\n");
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
    return check_outputs("sweep", o->plot, o->ticks_path, NULL);
}

static int cmd_sweep(int argc, char **argv)
{
    mt_sweep_opts o;
    char err[512], servebuf[PATH_MAX];
    memset(&o, 0, sizeof o);
    o.from = 1;
    o.to = 8;
    o.step = 1;
    o.hold_s = 20;
    o.warmup_s = 1;
    o.progress = isatty(2) ? stderr : NULL;
    o.aligned = isatty(1);   /* a pipe or a file gets the TSV */
    const char *serve = NULL;
    int rc = sweep_options(argc, argv, &o, &serve);
    if (rc >= 0)
        return rc;
    if (optind < argc) {
        o.serve_bin = serve ? serve : default_serve(servebuf, sizeof servebuf);
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
    o.stop = &stop_flag;
    catch_signals();
    if (mt_sweep_run(&o, stdout, &rows, &n, &wall, err, sizeof err)) {
        fprintf(stderr, "%s sweep: %s\n", prog, err);
        return 1;
    }
    free(rows);
    return 0;
}

/* ---- soak ------------------------------------------------------------------ */

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
            if (!(r = shape_opt(so, c, optarg)))
                r = load_opt(ld, c, optarg);
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
    return check_outputs("soak", o->plot, NULL, o->data_dir);
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

static int cmd_soak(int argc, char **argv)
{
    mt_soak_opts o;
    load_opts ld;
    shape_opts so;
    char err[512], servebuf[PATH_MAX];
    const char *serve = NULL;
    memset(&o, 0, sizeof o);
    load_defaults(&ld);
    shape_defaults(&so);
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
    o.serve_bin = serve ? serve : default_serve(servebuf, sizeof servebuf);
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
    if (shape_fill(&so, &o.pred, err, sizeof err))
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
    o.stop = &stop_flag;
    catch_signals();
    mt_soak_run *runs;
    int nruns;
    if (mt_soak(&o, stdout, &runs, &nruns, err, sizeof err)) {
        fprintf(stderr, "%s soak: %s\n", prog, err);
        return stop_flag ? 130 : 1;
    }
    free(runs);
    if (stop_flag) {
        fprintf(stderr, "%s soak: interrupted after %d run%s: %s of those\n",
                prog, nruns, nruns == 1 ? "" : "s",
                o.plot ? "the summary and the plot are" : "the summary is");
        return 130;
    }
    return 0;
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
    if (!strcmp(cmd, "predict")) return cmd_predict(argc, argv);
    if (!strcmp(cmd, "summarize") || !strcmp(cmd, "summary"))
        return cmd_summarize(argc, argv);
    if (!strcmp(cmd, "sweep")) return cmd_sweep(argc, argv);
    if (!strcmp(cmd, "soak")) return cmd_soak(argc, argv);
    if (!strcmp(cmd, "plot")) return cmd_plot(argc, argv);
    if (!strcmp(cmd, "quality")) return mt_probe_quality_main(argc, argv);
    if (!strcmp(cmd, "codec")) return mt_probe_codec_main(argc, argv);
    if (!strcmp(cmd, "calibrate")) {
        char servebuf[PATH_MAX];
        return mt_probe_calibrate_main(argc, argv, default_serve(servebuf, sizeof servebuf));
    }
    return mt_opt_usage_error("unknown %s '%s'", cmd[0] == '-' ? "option" : "command", cmd);
}
