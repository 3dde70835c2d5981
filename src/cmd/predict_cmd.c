/* predict_cmd.c: `mt-probe predict`: the analytic model of the KV wall
 * (probe/predict.c) from the command line, with the codec's share when
 * the sessions carry Mimi. */
#define _GNU_SOURCE
#include "cmd/probe_common.h"
#include "cmd/opt.h"
#include "speech/serve_kyutai.h"
#include "codec/mimi.h"
#include "decode/backend_sim.h"
#include "decode/kv.h"
#include "decode/sim_profile.h"
#include "probe/predict_frame.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prog = MT_PROBE_PROG;


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

/* What the command line asks for. */
typedef struct predict_args {
    shape_opts  so;
    load_opts   ld;
    const char *codec, *profile;
    int         runs, codebooks;
    uint64_t    kvmem;
} predict_args;

/* The options into a: -1 to go on, else the exit status. */
static int predict_options(int argc, char **argv, predict_args *a)
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
    int c;
    mt_probe_shape_defaults(&a->so);
    mt_probe_load_defaults(&a->ld);
    while ((c = mt_opt_next(&cli_predict, argc, argv, "m:h", lo)) >= 0) {
        int r;
        if (c == O_KVMEM)
            r = mt_opt_bytes(optarg, 0, UINT64_MAX, &a->kvmem) ? -1 : 1;
        else if (c == O_RUNS)
            r = mt_opt_int(optarg, 1, 100000, &a->runs) ? -1 : 1;
        else if (c == O_CODEC)
            r = (a->codec = optarg) ? 1 : -1;
        else if (c == O_PROFILE)
            r = (a->profile = optarg) ? 1 : -1;
        else if (c == O_CODEBOOKS)
            r = mt_opt_int(optarg, 1, 1024, &a->codebooks) ? -1 : 1;
        else if (!(r = mt_probe_shape_opt(&a->so, c, optarg)))
            r = mt_probe_load_opt(&a->ld, c, optarg);
        if (r <= 0)
            return 2;
    }
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    if (optind < argc)
        return mt_opt_usage_error("unexpected argument '%s'", argv[optind]);
    if (!a->kvmem)
        return mt_opt_usage_error("--kv-mem BYTES is required");
    return -1;
}

/* The codec the sessions carry (--codec, else a Kyutai model's own, in
 * defcodec [n]) and --profile: *cm NULL when none. -1 to go on, else the
 * exit status (said). */
static int predict_codec(predict_args *a, char *defcodec, size_t n, mt_sim_profile *prof,
                         mimi_model **cm)
{
    char err[512];
    *cm = NULL;
    /* a Kyutai model carries its codec: the one mt-serve would take */
    if (!a->codec && a->so.model && mt_kyutai_is_kyutai(a->so.model) &&
        mt_serve_kyutai_default_codec(a->so.model, defcodec, n, err, sizeof err) == 0)
        a->codec = defcodec;
    if ((a->profile || a->codebooks) && !a->codec)
        return mt_opt_usage_error("--profile and --codebooks go with --codec");
    if (a->profile && mt_sim_profile_load(a->profile, prof, err, sizeof err) != 0) {
        fprintf(stderr, "%s predict: --profile: %s\n", prog, err);
        return 1;
    }
    if (a->codec && mimi_load_shape(a->codec, NULL, a->codebooks, cm, err, sizeof err) != 0) {
        fprintf(stderr, "%s predict: --codec: %s\n", prog, err);
        return 1;
    }
    return -1;
}

/* What a session of a Kyutai model holds, as mt-serve's startup report
 * adds it up. */
static void print_session_bytes(const mt_predict_params *p, const mt_predict_result *r,
                                const mimi_model *cm)
{
    size_t cs = cm ? mimi_state_bytes(cm) : 0;
    printf("per-session bytes	%.2f MiB = temporal K/V under the bound %llu + depformer "
           "scratch and token rings %llu + codec state %zu%s\n",
           (double)(r->bound_bytes + p->session_extra_bytes + cs) / 1048576.0,
           (unsigned long long)r->bound_bytes, (unsigned long long)p->session_extra_bytes, cs,
           cm ? "" : " (no codec found: give --codec)");
}

/* --runs: the model of seeds S..S+runs-1, one per row. 0, or 1 (said). */
static int print_runs(const mt_predict_params *p, int runs)
{
    char err[512];
    printf("#\nseed\tsessions\tpeak_live\tpeak_fill\toverflow_s\t"
           "bounded_rejected\n");
    for (int i = 0; i < runs; i++) {
        mt_predict_run pr;
        if (mt_predict_one(p, p->seed + (uint64_t)i, &pr, err, sizeof err)) {
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
    return 0;
}

int mt_probe_predict_main(int argc, char **argv)
{
    predict_args a = {0};
    mt_predict_params p;
    char err[512], defcodec[4200];
    memset(&p, 0, sizeof p);
    int st = predict_options(argc, argv, &a);
    if (st >= 0)
        return st;
    if (mt_probe_shape_fill(&a.so, &p, err, sizeof err)) {
        fprintf(stderr, "%s predict: %s\n", prog, err);
        return 1;
    }
    int kyutai = a.so.model && mt_kyutai_is_kyutai(a.so.model);
    mt_sim_profile prof;
    mimi_model *cm = NULL;
    st = predict_codec(&a, defcodec, sizeof defcodec, &prof, &cm);
    if (st >= 0)
        return st;
    p.pool_bytes = a.kvmem;
    p.arrivals = a.ld.arrivals;
    p.lengths = a.ld.lengths;
    p.duration_s = a.ld.duration_s;
    p.max_sessions = a.ld.max_sessions;
    p.seed = a.ld.seed;
    mt_predict_result r;
    if (mt_predict(&p, &r, err, sizeof err)) {
        fprintf(stderr, "%s predict: %s\n", prog, err);
        mimi_free(cm);
        return 1;
    }
    mt_predict_print(stdout, &p, &r);
    if (cm) {
        print_codec(cm, a.codec, r.capacity, p.period_s);
        if (a.profile)
            print_codec_sim(cm, &prof, p.max_sessions);
        if (a.profile && kyutai)
            print_frame_sim(cm, &prof, a.so.model, &p);
    }
    if (kyutai && r.bound_bytes)
        print_session_bytes(&p, &r, cm);
    mimi_free(cm);
    return a.runs ? print_runs(&p, a.runs) : 0;
}
