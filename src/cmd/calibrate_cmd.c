/* calibrate_cmd.c: `mt-probe calibrate`'s options, read into an
 * mt_calibrate_opts for the experiment in src/probe/calibrate.c. */
#define _GNU_SOURCE
#include "cmd/calibrate_cmd.h"
#include "cmd/opt.h"
#include "probe/calibrate.h"
#include "speech/serve_kyutai.h"
#include "decode/decoder.h"
#include "model/kyutai_lm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
"usage: mt-probe calibrate [-m MODEL] [--device cpu|cuda] [--served] [options]\n"
"  -m, --model SPEC     model (default synthetic:small)\n"
"      --device DEV     cpu (default) or cuda\n"
"      --threads N      CPU threads (default: all cores)\n"
"      --batches LIST   batch sizes, comma-separated (default 1,2,4,8,16)\n"
"      --lengths LIST   cache lengths (default 16,64,256,1024)\n"
"      --reps N         timed steps per point (default 12; 2 more warm up)\n"
"      --memory BYTES   device memory for the profile (default: this host's\n"
"                       physical memory on cpu; required with cuda)\n"
"      --reserve BYTES  the profile's reserve (default 1/8 of --memory)\n"
"      --name NAME      the profile's name (default calibrated-DEVICE)\n"
"  -o, --output FILE    write the profile there (default: standard output)\n"
"      --served         time the step inside a serving mt-serve instead of a\n"
"                       bare decoder: sweep it with paced clients at the\n"
"                       --batches concurrency levels (default\n"
"                       " MT_CALIB_SERVED_LEVELS ") and fit its tick lines (stepped\n"
"                       batch, step_ms): the host's contention is in the\n"
"                       times. Not with --lengths or --reps\n"
"      --window W       with --served: mt-serve's --window (default 256)\n"
"      --sink S         with --served: mt-serve's --sink (default 4)\n"
"      --hold DUR       with --served: measured time per level (default 4s)\n"
"      --warmup DUR     with --served: unmeasured time first (default 1s)\n"
"      --serve BIN      with --served: the mt-serve to run (default: beside\n"
"                       mt-probe, then PATH)\n"
"      --codec SPEC     a Kyutai model (bare): its Mimi codec, timed with the\n"
"                       depformer beside the temporal step (default: the\n"
"                       model's, as mt-serve takes it)\n"
"      --gpu N          with --device cuda: the Nth visible GPU (default 0)\n"
"The fit and every point's residual go to standard error.\n");
}

static const mt_cli cli = {
    "mt-probe calibrate", "mt-probe calibrate [-m MODEL] [--device cpu|cuda] [--served] [options]",
    usage,
};

enum { O_DEVICE = 256, O_THREADS, O_BATCHES, O_LENGTHS, O_REPS, O_MEMORY, O_RESERVE,
       O_NAME, O_SERVED, O_WINDOW, O_SINK, O_HOLD, O_WARMUP, O_SERVE, O_CODEC, O_GPU };

static const struct option longopts[] = {
    {"model", required_argument, 0, 'm'},
    {"device", required_argument, 0, O_DEVICE},
    {"threads", required_argument, 0, O_THREADS},
    {"batches", required_argument, 0, O_BATCHES},
    {"lengths", required_argument, 0, O_LENGTHS},
    {"reps", required_argument, 0, O_REPS},
    {"memory", required_argument, 0, O_MEMORY},
    {"reserve", required_argument, 0, O_RESERVE},
    {"name", required_argument, 0, O_NAME},
    {"output", required_argument, 0, 'o'},
    {"served", no_argument, 0, O_SERVED},
    {"window", required_argument, 0, O_WINDOW},
    {"sink", required_argument, 0, O_SINK},
    {"hold", required_argument, 0, O_HOLD},
    {"warmup", required_argument, 0, O_WARMUP},
    {"serve", required_argument, 0, O_SERVE},
    {"codec", required_argument, 0, O_CODEC},
    {"gpu", required_argument, 0, O_GPU},
    MT_OPT_COMMON,
    {0, 0, 0, 0},
};

/* "1,4,16" into out[0..*n), each lo..hi: 0, or -1 after the message. */
static int list_option(const char *arg, long lo, long hi, long *out, int *n)
{
    const char *s = arg;
    int k = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < lo || v > hi || k == MT_CALIB_GRID_MAX)
            return mt_opt_bad(arg, "is not a list of at most %d numbers in %ld..%ld",
                              MT_CALIB_GRID_MAX, lo, hi);
        out[k++] = v;
        if (*end == ',')
            end++;
        else if (*end)
            return mt_opt_bad(arg, "is not a comma-separated list of numbers");
        s = end;
    }
    if (k == 0)
        return mt_opt_bad(arg, "is an empty list");
    *n = k;
    return 0;
}

/* The options and which of them were given, for the checks across them. */
typedef struct calib_cli {
    mt_calibrate_opts o;
    int given_batches, given_lengths, given_reps, given_served_only;
    int gpu;   /* --gpu N; -1: not given */
} calib_cli;

/* One option into o: 0, or -1 after the message. */
static int one_option(void *ctx, int c, const char *arg)
{
    calib_cli *cc = ctx;
    mt_calibrate_opts *o = &cc->o;
    static const char *const devices[] = { "cpu", "cuda", NULL };
    int i;
    switch (c) {
    case 'm': o->model = arg; return 0;
    case O_DEVICE:
        if (mt_opt_choice(arg, devices, &i))
            return -1;
        o->device = i ? MT_DEV_CUDA : MT_DEV_CPU;
        return 0;
    case O_THREADS: return mt_opt_int(arg, 0, 1024, &o->threads);
    case O_BATCHES:
        cc->given_batches = 1;
        return list_option(arg, 1, 65536, o->batches, &o->nbatches);
    case O_LENGTHS:
        cc->given_lengths = 1;
        return list_option(arg, 1, 1 << 20, o->lengths, &o->nlengths);
    case O_REPS:
        cc->given_reps = 1;
        return mt_opt_int(arg, 1, 10000, &o->reps);
    case O_SERVED: o->served = 1; return 0;
    case O_WINDOW: cc->given_served_only = 1; return mt_opt_int(arg, 1, MT_KV_WINDOW_MAX, &o->window);
    case O_SINK: cc->given_served_only = 1; return mt_opt_int(arg, 0, MT_KV_SINK_MAX, &o->sink);
    case O_HOLD: cc->given_served_only = 1; return mt_opt_seconds(arg, 0.1, 3600, &o->hold_s);
    case O_WARMUP: cc->given_served_only = 1; return mt_opt_seconds(arg, 0, 3600, &o->warmup_s);
    case O_SERVE: cc->given_served_only = 1; o->serve_bin = arg; return 0;
    case O_MEMORY:
        if (mt_opt_double(arg, 0, 1e18, &o->memory))
            return -1;
        return o->memory > 0 ? 0 : mt_opt_bad(arg, "is not a positive number of bytes");
    case O_RESERVE: return mt_opt_double(arg, 0, 1e18, &o->reserve);
    case O_NAME:
        if (strlen(arg) >= 64 || strpbrk(arg, " \t\n#="))
            return mt_opt_bad(arg, "is not a profile name (under 64 bytes; no blank, '#' or '=')");
        o->name = arg;
        return 0;
    case 'o': o->output = arg; return 0;
    case O_CODEC: o->codec = arg; return 0;
    case O_GPU: return mt_opt_int(arg, 0, 1023, &cc->gpu);
    }
    return -1;
}

int mt_probe_calibrate_main(int argc, char **argv, const char *serve_bin)
{
    calib_cli cc;
    memset(&cc, 0, sizeof cc);
    cc.gpu = -1;
    mt_calibrate_opts_default(&cc.o);
    mt_calibrate_opts o;
    int st = mt_opt_read_all(&cli, argc, argv, "m:o:h", longopts, one_option, &cc);
    if (st != MT_OPT_END)
        return st;
    o = cc.o;
    if (o.device == MT_DEV_CUDA && o.memory == 0)
        return mt_opt_usage_error("--memory BYTES is required with --device cuda");
    if (!o.served && cc.given_served_only)
        return mt_opt_usage_error("--window, --sink, --hold, --warmup and --serve go with --served");
    if (o.served && (cc.given_lengths || cc.given_reps))
        return mt_opt_usage_error("--lengths and --reps are the bare calibration's: with --served "
                                  "the cache lengths are the served sessions' and every tick is a step");
    if (o.served && !cc.given_batches &&
        list_option(MT_CALIB_SERVED_LEVELS, 1, 65536, o.batches, &o.nbatches))
        return 2;
    if (o.served && !o.serve_bin) {
        if (!serve_bin) {
            fprintf(stderr, "%s: mt-serve not found (use --serve BIN)\n", cli.prog);
            return 1;
        }
        o.serve_bin = serve_bin;
    }
    char err[512] = "";
    if (cc.gpu >= 0 && o.device != MT_DEV_CUDA)
        return mt_opt_usage_error("--gpu needs --device cuda");
    if (o.codec && (o.served || !mt_kyutai_is_kyutai(o.model)))
        return mt_opt_usage_error("--codec goes with a Kyutai model, not with --served");
    char defcodec[4200];
    if (!o.codec && !o.served && mt_kyutai_is_kyutai(o.model)) {
        if (mt_serve_kyutai_default_codec(o.model, defcodec, sizeof defcodec, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", cli.prog, err);
            return 1;
        }
        o.codec = defcodec;
    }
    if (cc.gpu >= 0) {
#ifdef MT_HAVE_CUDA
        if (mt_cuda_select_gpu(cc.gpu, err, sizeof err)) {
            fprintf(stderr, "%s: --gpu %d: %s\n", cli.prog, cc.gpu, err);
            return 1;
        }
#else
        fprintf(stderr, "%s: --gpu: built without CUDA (no nvcc at build time)\n", cli.prog);
        return 1;
#endif
    }
    if (mt_calibrate_run(&o, stderr, stdout, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", cli.prog, err);
        return 1;
    }
    return 0;
}
