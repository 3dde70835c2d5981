/* mt-serve: hosts the decoder for real-time frame-stream sessions.
 *
 * Thin main: parses options (getopt_long), loads the model, creates the
 * decoder (its KV pool and policy), the engine and the server, and runs.
 * Everything else lives in engine.c and server.c. stdout carries the
 * machine stream (latency lines, requests); stderr carries human log lines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "decode/decoder.h"
#include "serve/engine.h"
#include "model/model.h"
#include "serve/server.h"

static const char *prog = "mt-serve";

static void usage(FILE *f)
{
    fprintf(f,
"usage: mt-serve (-s PATH | --stdio) [options]\n"
"  -s, --socket PATH        listen on a Unix socket (created mode 0600)\n"
"      --socket-mode MODE   octal mode of the socket (default 0600)\n"
"      --stdio              one session on stdin/stdout; latency lines on\n"
"                           stderr or --latency-log\n"
"  -m, --model SPEC         model directory or synthetic:NAME (default\n"
"                           synthetic:small)\n"
"      --device DEV         cpu, cuda, auto (default) or sim:PROFILE (a\n"
"                           simulated device: mt-profile(5))\n"
"      --threads N          CPU threads (default: all cores)\n"
"      --kv POLICY          window (default) or full\n"
"      --sink S             sink positions, window policy (default 4)\n"
"      --window W           ring positions, window policy (default 256)\n"
"      --rope MODE          cache (default) or absolute\n"
"      --kv-mem BYTES       KV pool budget, K/M/G suffixes (default 512M)\n"
"      --on-full ACTION     full policy on exhaustion: preempt (default) or\n"
"                           stall\n"
"      --fill, --no-fill    send FILL (silence) for frames past their deadline\n"
"                           (default: on with --kv full, off with window)\n"
"      --frame-ms MS        tick period (default: the model's frame)\n"
"      --deadline-ms MS     an output is due MS after its input arrived\n"
"                           (default: two frame periods)\n"
"      --max-sessions N     admitted at once (default 64)\n"
"      --control PATH       admission answers from a FIFO or Unix socket\n"
"      --admit-timeout MS   reject requests unanswered this long (2000)\n"
"      --latency-log PATH   latency lines to PATH (SIGHUP reopens it)\n"
"      --latency=KIND       ticks (default) or frames (adds a line per frame)\n"
"      --in-queue N         input frames kept per session (default 256)\n"
"      --out-queue N        output frames buffered per session (default 64)\n"
"      --write-timeout MS   disconnect a client whose output is stuck (2000)\n"
"      --no-catch-up        never run a second round in one tick\n"
"  -h, --help               this help\n"
"See mt-serve(1).\n");
}

static int parse_long(const char *s, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

static int parse_ms(const char *s, double lo, double hi, double *v)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || end == s || *end || !(x >= lo && x <= hi))
        return -1;
    *v = x;
    return 0;
}

static int parse_bytes(const char *s, size_t *v)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || end == s || x <= 0)
        return -1;
    double m = 1;
    if (*end) {
        if (!strcasecmp(end, "k") || !strcasecmp(end, "kib") || !strcasecmp(end, "kb"))
            m = 1024.0;
        else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib") || !strcasecmp(end, "mb"))
            m = 1024.0 * 1024;
        else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib") || !strcasecmp(end, "gb"))
            m = 1024.0 * 1024 * 1024;
        else
            return -1;
    }
    x *= m;
    if (x > 1e15)
        return -1;
    *v = (size_t)x;
    return 0;
}

static void log_stderr(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "%s: %s\n", prog, msg);
}

static int bad(const char *opt, const char *val)
{
    fprintf(stderr, "%s: bad value for %s: '%s' (see --help)\n", prog, opt, val);
    return 2;
}

enum {
    O_SOCKMODE = 256, O_STDIO, O_DEVICE, O_THREADS, O_KV, O_SINK, O_WINDOW,
    O_ROPE, O_KVMEM, O_ONFULL, O_FILL, O_NOFILL, O_FRAMEMS, O_DEADLINE,
    O_MAXSESS, O_CONTROL, O_ADMITTO, O_LATLOG, O_LATENCY, O_INQ, O_OUTQ,
    O_WRITETO, O_NOCATCH,
};

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"socket", required_argument, 0, 's'},
        {"socket-mode", required_argument, 0, O_SOCKMODE},
        {"stdio", no_argument, 0, O_STDIO},
        {"model", required_argument, 0, 'm'},
        {"device", required_argument, 0, O_DEVICE},
        {"threads", required_argument, 0, O_THREADS},
        {"kv", required_argument, 0, O_KV},
        {"sink", required_argument, 0, O_SINK},
        {"window", required_argument, 0, O_WINDOW},
        {"rope", required_argument, 0, O_ROPE},
        {"kv-mem", required_argument, 0, O_KVMEM},
        {"on-full", required_argument, 0, O_ONFULL},
        {"fill", no_argument, 0, O_FILL},
        {"no-fill", no_argument, 0, O_NOFILL},
        {"frame-ms", required_argument, 0, O_FRAMEMS},
        {"deadline-ms", required_argument, 0, O_DEADLINE},
        {"max-sessions", required_argument, 0, O_MAXSESS},
        {"control", required_argument, 0, O_CONTROL},
        {"admit-timeout", required_argument, 0, O_ADMITTO},
        {"latency-log", required_argument, 0, O_LATLOG},
        {"latency", required_argument, 0, O_LATENCY},
        {"in-queue", required_argument, 0, O_INQ},
        {"out-queue", required_argument, 0, O_OUTQ},
        {"write-timeout", required_argument, 0, O_WRITETO},
        {"no-catch-up", no_argument, 0, O_NOCATCH},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    mt_server_opts so;
    mt_server_opts_default(&so);
    mt_engine_opts eo;
    mt_engine_opts_default(&eo);
    mt_decoder_opts dopt;
    memset(&dopt, 0, sizeof dopt);
    dopt.device = MT_DEV_AUTO;
    dopt.kv.policy = MT_KV_WINDOW;
    dopt.kv.sink = 4;
    dopt.kv.window = 256;
    dopt.kv.rope = MT_ROPE_CACHE;
    dopt.kv.budget_bytes = (size_t)512 << 20;
    const char *model = "synthetic:small";
    int fill = -1, kv_mem_given = 0;
    double frame_ms = 0, deadline_ms = 0;
    long v;
    double d;
    int c;
    while ((c = getopt_long(argc, argv, "s:m:h", lo, NULL)) != -1) {
        switch (c) {
        case 's': so.socket_path = optarg; break;
        case O_SOCKMODE: {
            char *end;
            errno = 0;
            long m = strtol(optarg, &end, 8);
            if (errno || *end || end == optarg || m < 0 || m > 0777)
                return bad("--socket-mode", optarg);
            so.socket_mode = (mode_t)m;
            break;
        }
        case O_STDIO: so.stdio = 1; break;
        case 'm': model = optarg; break;
        case O_DEVICE:
            if (!strcmp(optarg, "cpu")) dopt.device = MT_DEV_CPU;
            else if (!strcmp(optarg, "cuda")) dopt.device = MT_DEV_CUDA;
            else if (!strcmp(optarg, "auto")) dopt.device = MT_DEV_AUTO;
            else if (!strncmp(optarg, "sim:", 4) && optarg[4]) {
                /* issue 22: the simulated device */
                dopt.device = MT_DEV_SIM;
                dopt.sim_profile = optarg + 4;
            }
            else return bad("--device", optarg);
            break;
        case O_THREADS:
            if (parse_long(optarg, 0, 1024, &v)) return bad("--threads", optarg);
            dopt.threads = (int)v;
            break;
        case O_KV:
            if (!strcmp(optarg, "window")) dopt.kv.policy = MT_KV_WINDOW;
            else if (!strcmp(optarg, "full")) dopt.kv.policy = MT_KV_FULL;
            else return bad("--kv", optarg);
            break;
        case O_SINK:
            if (parse_long(optarg, 0, 1 << 20, &v)) return bad("--sink", optarg);
            dopt.kv.sink = (int)v;
            break;
        case O_WINDOW:
            if (parse_long(optarg, 1, 1 << 24, &v)) return bad("--window", optarg);
            dopt.kv.window = (int)v;
            break;
        case O_ROPE:
            if (!strcmp(optarg, "cache")) dopt.kv.rope = MT_ROPE_CACHE;
            else if (!strcmp(optarg, "absolute")) dopt.kv.rope = MT_ROPE_ABSOLUTE;
            else return bad("--rope", optarg);
            break;
        case O_KVMEM:
            if (parse_bytes(optarg, &dopt.kv.budget_bytes)) return bad("--kv-mem", optarg);
            kv_mem_given = 1;
            break;
        case O_ONFULL:
            if (!strcmp(optarg, "preempt")) eo.on_full = MT_ONFULL_PREEMPT;
            else if (!strcmp(optarg, "stall")) eo.on_full = MT_ONFULL_STALL;
            else return bad("--on-full", optarg);
            break;
        case O_FILL: fill = 1; break;
        case O_NOFILL: fill = 0; break;
        case O_FRAMEMS:
            if (parse_ms(optarg, 1, 10000, &frame_ms)) return bad("--frame-ms", optarg);
            break;
        case O_DEADLINE:
            if (parse_ms(optarg, 1, 600000, &deadline_ms)) return bad("--deadline-ms", optarg);
            break;
        case O_MAXSESS:
            if (parse_long(optarg, 1, 4096, &v)) return bad("--max-sessions", optarg);
            eo.max_sessions = so.max_sessions = (int)v;
            break;
        case O_CONTROL: so.control_path = optarg; break;
        case O_ADMITTO:
            if (parse_ms(optarg, 1, 3600000, &d)) return bad("--admit-timeout", optarg);
            so.admit_timeout_ns = (uint64_t)(d * 1e6);
            break;
        case O_LATLOG: so.latency_log = optarg; break;
        case O_LATENCY:
            if (!strcmp(optarg, "frames")) eo.frame_lines = 1;
            else if (!strcmp(optarg, "ticks")) eo.frame_lines = 0;
            else return bad("--latency", optarg);
            break;
        case O_INQ:
            if (parse_long(optarg, 1, 65536, &v)) return bad("--in-queue", optarg);
            eo.in_queue = (int)v;
            break;
        case O_OUTQ:
            if (parse_long(optarg, 1, 65536, &v)) return bad("--out-queue", optarg);
            eo.out_queue = (int)v;
            break;
        case O_WRITETO:
            if (parse_ms(optarg, 1, 3600000, &d)) return bad("--write-timeout", optarg);
            so.write_timeout_ns = (uint64_t)(d * 1e6);
            break;
        case O_NOCATCH: eo.catch_up = 0; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", prog, argv[optind]);
        return 2;
    }
    if (!so.stdio == !so.socket_path) {
        fprintf(stderr, "%s: give exactly one of -s PATH and --stdio (see --help)\n", prog);
        return 2;
    }

    char err[512];
    uint64_t t0 = mt_now_ns();
    mt_model *m = NULL;
    /* --device cuda with a synthetic preset: the device backend makes the
     * weights itself, so no host copy (moshi-7b in fp32 would not fit) */
    int mflags = dopt.device == MT_DEV_CUDA && strncmp(model, "synthetic:", 10) == 0
                 ? MT_MODEL_SHAPE_ONLY : 0;
    /* the simulated device holds no weights; its pool's budget comes from
     * the profile unless --kv-mem says otherwise */
    if (dopt.device == MT_DEV_SIM) {
        mflags = MT_MODEL_SHAPE_ONLY;
        if (!kv_mem_given)
            dopt.kv.budget_bytes = 0;
    }
    if (mt_model_load(model, mflags, &m, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 1;
    }
    if (!m->cfg.has_audio || m->cfg.sample_rate <= 0 || m->cfg.frame_samples <= 0) {
        fprintf(stderr, "%s: %s: no audio adapter; mt-serve serves PCM frame streams\n",
                prog, model);
        mt_model_free(m);
        return 1;
    }
    double model_frame_ms = 1000.0 * m->cfg.frame_samples / m->cfg.sample_rate;
    if (frame_ms <= 0)
        frame_ms = model_frame_ms;
    eo.frame_ns = (uint64_t)(frame_ms * 1e6);
    eo.deadline_ns = deadline_ms > 0 ? (uint64_t)(deadline_ms * 1e6) : 2 * eo.frame_ns;
    eo.fill = fill >= 0 ? fill : dopt.kv.policy == MT_KV_FULL;
    eo.drop_when_full = !so.stdio;
    dopt.max_batch = eo.max_sessions;
    so.frame_ns = eo.frame_ns;
    so.t0 = t0;
    so.log = log_stderr;

    mt_decoder *dec = NULL;
    if (mt_decoder_create(m, &dopt, &dec, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        mt_model_free(m);
        return 1;
    }
    const char *note = mt_decoder_note(dec);
    if (note && *note)
        fprintf(stderr, "%s: %s\n", prog, note);

    mt_server *srv = NULL;
    if (mt_server_create(&so, &srv, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        mt_decoder_free(dec);
        mt_model_free(m);
        return 1;
    }
    eo.line = mt_server_line;
    eo.line_ctx = srv;
    mt_engine *eng = NULL;
    if (mt_engine_create(&eo, dec, t0, &eng, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        mt_server_free(srv);
        mt_decoder_free(dec);
        mt_model_free(m);
        return 1;
    }
    fprintf(stderr, "%s: %s on %s, kv %s (%s), pool %zu bytes, tick %.3f ms, "
            "fill %s, %s%s\n", prog, m->cfg.name, mt_decoder_backend_name(dec),
            dopt.kv.policy == MT_KV_FULL ? "full" : "window",
            dopt.kv.policy == MT_KV_FULL
                ? (eo.on_full == MT_ONFULL_PREEMPT ? "on-full preempt" : "on-full stall")
                : "bounded",
            mt_kv_used_bytes(mt_decoder_pool(dec)) + mt_kv_free_bytes(mt_decoder_pool(dec)),
            frame_ms, eo.fill ? "on" : "off",
            so.stdio ? "stdio" : "socket ", so.stdio ? "" : so.socket_path);
    int rc = mt_server_run(srv, eng, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", prog, err);
    else
        fprintf(stderr, "%s: done\n", prog);
    mt_engine_free(eng);
    mt_server_free(srv);
    mt_decoder_free(dec);
    mt_model_free(m);
    return rc == 0 ? 0 : 1;
}
