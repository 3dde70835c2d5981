/* mt-serve: hosts the decoder for real-time frame-stream sessions.
 *
 * Thin main: reads the options (cmd/opt.h) into a serve_args, loads the
 * model, creates the decoder (its KV pool and policy), the engine and the
 * server, and runs.
 * Everything else lives in engine.c and server*.c. stdout carries the
 * machine stream (latency lines, requests); stderr carries human log lines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cmd/opt.h"
#include "decode/decoder.h"
#include "serve/engine.h"
#include "serve/metrics.h"
#include "serve/net.h"
#include "serve/metrics_http.h"
#include "model/model.h"
#include "model/stt_config.h"
#include "speech/serve_kyutai.h"
#include "cmd/startup.h"
#include "serve/server.h"
#include "serve/ws_gate.h"
#include "serve/static_http.h"
#include "util/realtime.h"
#include "util/version.h"
#include "wire/endpoint.h"
#include "util/clock.h"

static const char *prog = "mt-serve";

static void usage(FILE *f)
{
    fprintf(f,
"usage: mt-serve (-s PATH | --listen HOST:PORT | --stdio) [options]\n"
"  -s, --socket PATH        listen on a Unix socket (created mode 0600)\n"
"      --listen HOST:PORT   listen on TCP too (or instead); [V6ADDR]:PORT\n"
"      --token-file FILE    TCP clients must send this token in HELLO (and\n"
"                           scrapers of --metrics as a bearer token);\n"
"                           required off loopback (or --insecure)\n"
"      --insecure           allow a non-loopback --listen or --metrics\n"
"                           without a token\n"
"      --agent HOST:PORT    answer HAProxy's agent-check there\n"
"      --ws HOST:PORT       Kyutai's WebSocket chat protocol at /api/chat\n"
"                           (Ogg Opus both ways; needs -s PATH, which its\n"
"                           sessions enter through)\n"
"      --ws-max-conns N     WebSocket connections at once (default 64)\n"
"      --ws-max-per-addr N  idle WebSocket connections of one address\n"
"                           (default half of --ws-max-conns)\n"
"      --metrics HOST:PORT  Prometheus metrics: GET /metrics, /health (with\n"
"                           --token-file, /metrics wants it as a bearer token;\n"
"                           off loopback one is required, or --insecure)\n"
"      --drain MODE         on SIGTERM: frames (default: end every session's\n"
"                           input, answer what is queued) or sessions (let\n"
"                           admitted sessions run to their own END)\n"
"      --drain-timeout MS   SIGTERM: longest wait for sessions (10000)\n"
"      --socket-mode MODE   octal mode of the socket (default 0600)\n"
"      --stdio              one session on stdin/stdout; latency lines on\n"
"                           stderr or --latency-log\n"
"  -m, --model SPEC         model directory or synthetic:NAME (default\n"
"                           synthetic:small); a Kyutai LM directory or preset\n"
"                           is served with its Mimi codec (mt-serve(1))\n"
"      --codec SPEC         Kyutai models: the Mimi checkpoint (default\n"
"                           DIR/mimi/, DIR/mimi.safetensors, or the preset's)\n"
"      --tokenizer FILE     Kyutai models: the text tokenizer (SentencePiece\n"
"                           .model), checked against the LM's text card\n"
"      --asr-delay S        speech-to-text models: the text's delay behind the\n"
"                           audio for --ws /api/asr-streaming (default 0.5)\n"
"      --seed N             Kyutai models: every session's sampling seed (1)\n"
"      --temperature T      Kyutai models: audio sampling temperature, 0..10\n"
"                           (0.8; 0: greedy, the argmax, lowest index on ties)\n"
"      --top-k K            Kyutai models: audio top-k, 0..65536 (250; 0: all)\n"
"      --text-temperature T Kyutai models: text temperature (0.7; 0: greedy;\n"
"                           speech to text: 0)\n"
"      --text-top-k K       Kyutai models: text top-k (25; 0: all)\n"
"      --static DIR         with --ws: serve DIR's files at GET / (Kyutai's\n"
"                           built web client; read-only, no listing)\n"
"      --device DEV         cpu, cuda, auto (default) or sim:PROFILE (a\n"
"                           simulated device: mt-profile(5))\n"
"      --gpu N              with --device cuda: the Nth visible GPU (0;\n"
"                           counted after CUDA_VISIBLE_DEVICES)\n"
"      --threads N          CPU threads (default: all cores)\n"
"      --kv POLICY          window (default), full, or ring (Kyutai's own:\n"
"                           no sinks, the checkpoint's context, absolute)\n"
"      --sink S             sink positions, window policy (default 4)\n"
"      --window W           ring positions, window policy (default 256)\n"
"      --rope MODE          cache (default) or absolute\n"
"      --kv-mem BYTES       KV pool budget, K/M/G suffixes (default %dM; on\n"
"                           CUDA %d%% of free device memory after a reserve)\n"
"      --kv-dtype T         CPU K/V cache elements: f16 (default) or f32\n"
"      --weights T          CPU weights: f16 (default: a half copy beside\n"
"                           the f32 one, for batches of up to 8) or f32,\n"
"                           or q8 (an 8-bit copy instead of the half one)\n"
"      --on-full ACTION     full policy on exhaustion: preempt (default) or\n"
"                           stall\n"
"      --fill, --no-fill    send FILL (silence) for frames past their deadline\n"
"                           (default: on with --kv full, off with window)\n"
"      --frame-ms MS        tick period (default: the model's frame)\n"
"      --deadline-ms MS     an output is due MS after its input arrived\n"
"                           (default: two frame periods)\n"
"      --time-scale K       sim devices only: model time runs K times real\n"
"                           time, K in 0.1..1000 (tick, deadline and every\n"
"                           simulated step divided by K; clients must pace\n"
"                           at period/K; K < 1 runs slower than real time)\n"
"      --rt-priority N      run the I/O, tick and log threads under\n"
"                           SCHED_FIFO at N (1..99; needs root or\n"
"                           CAP_SYS_NICE): busier processes cannot delay a tick\n"
"      --max-sessions N     admitted at once (default 64)\n"
"      --control PATH       admission answers from a FIFO or Unix socket\n"
"      --admit-timeout MS   reject requests unanswered this long (2000)\n"
"      --latency-log PATH   latency lines to PATH (SIGHUP reopens it)\n"
"      --latency=KIND       ticks (default) or frames (adds a line per frame)\n"
"      --latency-format FMT logfmt (default) or json (one object per line)\n"
"      --in-queue N         input frames kept per session (default 256)\n"
"      --out-queue N        output frames buffered per session (default 64)\n"
"      --write-timeout MS   disconnect a client whose output is stuck (2000)\n"
"      --max-conns N        connections at once (default 4 x --max-sessions\n"
"                           + 16; lowered to fit ulimit -n)\n"
"      --hello-timeout MS   close a connection that sends no HELLO (10000)\n"
"      --input-timeout MS   end (END) an admitted session that sends nothing\n"
"                           for MS (10000; 0: never)\n"
"      --max-pending-per-uid N  connections of one uid not yet admitted\n"
"                           (default: half of --max-conns)\n"
"      --io-batch-us N      a busy server reads client input at most every\n"
"                           N us (default 1000; 0: at every arrival)\n"
"      --no-catch-up        never run a second round in one tick\n"
"  -h, --help               this help\n"
"      --version            print the version\n"
"See mt-serve(1).\n", MT_KV_DEFAULT_MIB, MT_DECODER_AUTO_POOL_PCT);
}

static void log_stderr(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "%s: %s\n", prog, msg);
}

enum {
    O_SOCKMODE = 256, O_STDIO, O_DEVICE, O_THREADS, O_KV, O_SINK, O_WINDOW,
    O_ROPE, O_KVMEM, O_ONFULL, O_FILL, O_NOFILL, O_FRAMEMS, O_DEADLINE,
    O_MAXSESS, O_CONTROL, O_ADMITTO, O_LATLOG, O_LATENCY, O_INQ, O_OUTQ,
    O_WRITETO, O_NOCATCH, O_MAXCONNS, O_HELLOTO, O_MAXPENDUID,
    O_KVDTYPE, O_WEIGHTS, O_LISTEN, O_AGENT, O_TOKEN, O_INSECURE, O_DRAIN, O_DRAINTO,
    O_TIMESCALE, O_RTPRIO, O_INPUTTO, O_IOBATCH,
    O_LATFMT, O_METRICS, O_WS, O_CODEC, O_SEED, O_TOKENIZER,
    O_ASRDELAY,
    O_TEMP, O_TOPK, O_TTEMP, O_TTOPK, O_STATIC,
    O_GPU,
    O_WSMAXCONNS, O_WSMAXADDR,
};

/* Everything the command line sets, before the model is known. */
typedef struct serve_args {
    mt_server_opts  so;
    mt_engine_opts  eo;
    mt_decoder_opts dopt;
    const char     *model;
    int             fill;           /* -1: by the policy */
    double          frame_ms;       /* 0: the model's frame */
    double          deadline_ms;    /* 0: two frame periods */
    const char     *token_file;
    char            token[MT_TOKEN_MAX + 1];
    double          time_scale;     /* 1, or K in 0.1..1000 (sim only): model time
                                       runs K times faster than real time */
    int             rt_priority;    /* 0: the normal policy; else SCHED_FIFO's */
    int             gpu;            /* --gpu N: the CUDA device; -1: default (0) */
    const char     *metrics_addr;   /* --metrics HOST:PORT, or NULL */
    const char     *ws_addr;        /* --ws HOST:PORT, or NULL */
    int             ws_max_conns;   /* --ws-max-conns (0: the gate's 64) */
    int             ws_max_per_addr;/* --ws-max-per-addr (0: half of it) */
    const char     *codec;          /* Kyutai models: --codec; NULL: the default */
    const char     *tokenizer;      /* Kyutai models: --tokenizer, or NULL */
    double          asr_delay_s;    /* --asr-delay: audio_delay_seconds */
    int             asr_delay_given;
    mt_serve_kyutai ky;             /* Kyutai models: LM, codec, speech stage */
    mt_kyutai_sampling smp;         /* Kyutai models: the sessions' default sampling */
    int             ring;           /* --kv ring: Kyutai's ring, sized at load */
    int             kv_shape_set;   /* --sink, --window or --rope given */
    int             smp_set;        /* a sampling option given */
    int             ttemp_set;      /* --text-temperature given */
    const char     *static_dir;     /* --static DIR, or NULL */
    mt_static      *static_files;   /* DIR opened, for the --ws gate */
} serve_args;

static const mt_cli cli = { "mt-serve", "mt-serve (-s PATH | --listen HOST:PORT | --stdio) [options]", usage };

static const struct option longopts[] = {
    {"socket", required_argument, 0, 's'},
    {"socket-mode", required_argument, 0, O_SOCKMODE},
    {"listen", required_argument, 0, O_LISTEN},
    {"agent", required_argument, 0, O_AGENT},
    {"metrics", required_argument, 0, O_METRICS},
    {"ws", required_argument, 0, O_WS},
    {"asr-delay", required_argument, 0, O_ASRDELAY},
    {"ws-max-conns", required_argument, 0, O_WSMAXCONNS},
    {"ws-max-per-addr", required_argument, 0, O_WSMAXADDR},
    {"token-file", required_argument, 0, O_TOKEN},
    {"insecure", no_argument, 0, O_INSECURE},
    {"drain", required_argument, 0, O_DRAIN},
    {"drain-timeout", required_argument, 0, O_DRAINTO},
    {"stdio", no_argument, 0, O_STDIO},
    {"model", required_argument, 0, 'm'},
    {"device", required_argument, 0, O_DEVICE},
    {"gpu", required_argument, 0, O_GPU},
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
    {"time-scale", required_argument, 0, O_TIMESCALE},
    {"rt-priority", required_argument, 0, O_RTPRIO},
    {"max-sessions", required_argument, 0, O_MAXSESS},
    {"control", required_argument, 0, O_CONTROL},
    {"admit-timeout", required_argument, 0, O_ADMITTO},
    {"latency-log", required_argument, 0, O_LATLOG},
    {"latency", required_argument, 0, O_LATENCY},
    {"latency-format", required_argument, 0, O_LATFMT},
    {"codec", required_argument, 0, O_CODEC},
    {"tokenizer", required_argument, 0, O_TOKENIZER},
    {"seed", required_argument, 0, O_SEED},
    {"temperature", required_argument, 0, O_TEMP},
    {"top-k", required_argument, 0, O_TOPK},
    {"text-temperature", required_argument, 0, O_TTEMP},
    {"text-top-k", required_argument, 0, O_TTOPK},
    {"static", required_argument, 0, O_STATIC},
    {"in-queue", required_argument, 0, O_INQ},
    {"out-queue", required_argument, 0, O_OUTQ},
    {"write-timeout", required_argument, 0, O_WRITETO},
    {"no-catch-up", no_argument, 0, O_NOCATCH},
    {"max-conns", required_argument, 0, O_MAXCONNS},
    {"kv-dtype", required_argument, 0, O_KVDTYPE},
    {"weights", required_argument, 0, O_WEIGHTS},
    {"hello-timeout", required_argument, 0, O_HELLOTO},
    {"input-timeout", required_argument, 0, O_INPUTTO},
    {"max-pending-per-uid", required_argument, 0, O_MAXPENDUID},
    {"io-batch-us", required_argument, 0, O_IOBATCH},
    MT_OPT_COMMON,
    {0, 0, 0, 0},
};

static void args_default(serve_args *a)
{
    memset(a, 0, sizeof *a);
    mt_server_opts_default(&a->so);
    mt_engine_opts_default(&a->eo);
    a->dopt.device = MT_DEV_AUTO;
    a->dopt.kv.policy = MT_KV_WINDOW;
    a->dopt.kv.sink = 4;
    a->dopt.kv.window = 256;
    a->dopt.kv.rope = MT_ROPE_CACHE;
    a->dopt.kv.budget_bytes = MT_KV_DEFAULT_BUDGET;
    /* half precision on the CPU: exact to the tests' tolerance, faster at
     * every batch and half the bytes a session (bench/RESULTS.md, issue
     * 21); --kv-dtype f32 --weights f32 for the full-precision path. Other
     * devices choose their own. */
    a->dopt.kv_dtype = MT_FMT_F16;
    a->dopt.weights = MT_FMT_F16;
    a->dopt.kv_budget_auto = 1; /* on CUDA: most of free device memory (decoder.h) */
    a->model = "synthetic:small";
    a->fill = -1;
    a->asr_delay_s = 0.5;
    a->time_scale = 1;
    a->gpu = -1;
    a->eo.speech_seed = 1;
    mt_kyutai_sampling_default(&a->smp);
}

/* The options whose value is one of a few words. 0, or -1 (said). */
static int word_option(serve_args *a, int c, const char *arg)
{
    static const char *const devices[] = { "cpu", "cuda", "auto", NULL };
    static const mt_device device_of[] = { MT_DEV_CPU, MT_DEV_CUDA, MT_DEV_AUTO };
    static const char *const kvs[] = { "window", "full", "ring", NULL };
    static const char *const ropes[] = { "cache", "absolute", NULL };
    static const char *const onfull[] = { "preempt", "stall", NULL };
    static const char *const latency[] = { "ticks", "frames", NULL };
    static const char *const formats[] = { "f32", "f16", NULL };
    static const char *const wformats[] = { "f32", "f16", "q8", NULL };
    static const mt_num_format wformat_of[] = { MT_FMT_F32, MT_FMT_F16, MT_FMT_Q8 };
    static const char *const latfmt[] = { "logfmt", "json", NULL };
    int i;
    switch (c) {
    case O_DEVICE:
        if (strncmp(arg, "sim:", 4) == 0 && arg[4]) {
            a->dopt.device = MT_DEV_SIM;   /* the simulated device */
            a->dopt.sim_profile = arg + 4;
            return 0;
        }
        if (mt_opt_choice(arg, devices, &i)) return -1;
        a->dopt.device = device_of[i];
        return 0;
    case O_KV:
        if (mt_opt_choice(arg, kvs, &i)) return -1;
        a->dopt.kv.policy = i == 1 ? MT_KV_FULL : MT_KV_WINDOW;
        a->ring = i == 2;
        return 0;
    case O_ROPE:
        if (mt_opt_choice(arg, ropes, &i)) return -1;
        a->dopt.kv.rope = i ? MT_ROPE_ABSOLUTE : MT_ROPE_CACHE;
        a->kv_shape_set = 1;
        return 0;
    case O_ONFULL:
        if (mt_opt_choice(arg, onfull, &i)) return -1;
        a->eo.on_full = i ? MT_ONFULL_STALL : MT_ONFULL_PREEMPT;
        return 0;
    case O_LATENCY:
        if (mt_opt_choice(arg, latency, &i)) return -1;
        a->eo.frame_lines = i;
        return 0;
    case O_KVDTYPE:
        if (mt_opt_choice(arg, formats, &i)) return -1;
        a->dopt.kv_dtype = i ? MT_FMT_F16 : MT_FMT_F32;
        return 0;
    case O_WEIGHTS:
        if (mt_opt_choice(arg, wformats, &i)) return -1;
        a->dopt.weights = wformat_of[i];
        return 0;
    case O_LATFMT:
        if (mt_opt_choice(arg, latfmt, &i)) return -1;
        a->so.latency_json = i;
        return 0;
    }
    return -1;
}

/* The options with a number (a count, a size or a duration). 0, or -1. */
static int number_option(serve_args *a, int c, const char *arg)
{
    uint64_t b;
    double ms;
    switch (c) {
    case O_THREADS: return mt_opt_int(arg, 0, 1024, &a->dopt.threads);
    case O_SINK: a->kv_shape_set = 1; return mt_opt_int(arg, 0, MT_KV_SINK_MAX, &a->dopt.kv.sink);
    case O_WINDOW: a->kv_shape_set = 1; return mt_opt_int(arg, 1, MT_KV_WINDOW_MAX, &a->dopt.kv.window);
    case O_KVMEM:
        if (mt_opt_bytes(arg, 1, (uint64_t)1e15, &b)) return -1;
        a->dopt.kv.budget_bytes = (size_t)b;
        a->dopt.kv_budget_auto = 0;
        return 0;
    case O_FRAMEMS: return mt_opt_ms(arg, 1, 10000, &a->frame_ms);
    case O_DEADLINE: return mt_opt_ms(arg, 1, 600000, &a->deadline_ms);
    case O_TIMESCALE: return mt_opt_double(arg, 0.1, 1000, &a->time_scale);
    case O_GPU: return mt_opt_int(arg, 0, 1023, &a->gpu);
    case O_RTPRIO:
        return mt_opt_int(arg, MT_RT_PRIORITY_MIN, MT_RT_PRIORITY_MAX, &a->rt_priority);
    case O_MAXSESS:
        if (mt_opt_int(arg, 1, 4096, &a->eo.max_sessions)) return -1;
        a->so.max_sessions = a->eo.max_sessions;
        return 0;
    case O_ADMITTO:
        if (mt_opt_ms(arg, 1, 3600000, &ms)) return -1;
        a->so.admit_timeout_ns = (uint64_t)(ms * 1e6);
        return 0;
    case O_INQ: return mt_opt_int(arg, 1, 65536, &a->eo.in_queue);
    case O_SEED: return mt_opt_u64(arg, &a->eo.speech_seed);
    case O_TEMP: case O_TTEMP: {
        double t;
        a->smp_set = 1;
        a->ttemp_set |= c == O_TTEMP;
        if (mt_opt_double(arg, 0, MT_SMP_TEMP_MAX, &t)) return -1;
        *(c == O_TEMP ? &a->smp.temp : &a->smp.temp_text) = (float)t;
        return 0;
    }
    case O_TOPK: a->smp_set = 1; return mt_opt_int(arg, 0, MT_SMP_TOPK_MAX, &a->smp.top_k);
    case O_TTOPK: a->smp_set = 1; return mt_opt_int(arg, 0, MT_SMP_TOPK_MAX, &a->smp.top_k_text);
    case O_OUTQ: return mt_opt_int(arg, 1, 65536, &a->eo.out_queue);
    case O_WRITETO:
        if (mt_opt_ms(arg, 1, 3600000, &ms)) return -1;
        a->so.write_timeout_ns = (uint64_t)(ms * 1e6);
        return 0;
    case O_DRAINTO:
        if (mt_opt_ms(arg, 1, 86400000, &ms)) return -1;
        a->so.drain_timeout_ns = (uint64_t)(ms * 1e6);
        return 0;
    case O_MAXCONNS: return mt_opt_int(arg, 1, 1 << 20, &a->so.max_conns);
    case O_HELLOTO:
        if (mt_opt_ms(arg, 1, 3600000, &ms)) return -1;
        a->so.hello_timeout_ns = (uint64_t)(ms * 1e6);
        return 0;
    case O_INPUTTO:
        if (mt_opt_ms(arg, 0, 86400000, &ms)) return -1;
        a->so.input_timeout_ns = (uint64_t)(ms * 1e6);
        return 0;
    case O_MAXPENDUID: return mt_opt_int(arg, 1, 1 << 20, &a->so.max_pending_per_uid);
    case O_IOBATCH: {
        int us;
        if (mt_opt_int(arg, 0, 20000, &us)) return -1;
        a->so.io_batch_ns = (uint64_t)us * 1000u;
        return 0;
    }
    case O_SOCKMODE: {
        char *end;
        long m = strtol(arg, &end, 8);
        if (end == arg || *end || m < 0 || m > 0777)
            return mt_opt_bad(arg, "is not an octal file mode (0..0777)");
        a->so.socket_mode = (mode_t)m;
        return 0;
    }
    }
    return word_option(a, c, arg);
}

/* One option into the serve_args at ctx. 0, or -1 (said). */
static int one_option(void *ctx, int c, const char *arg)
{
    serve_args *a = ctx;
    switch (c) {
    case 's': a->so.socket_path = arg; return 0;
    case O_STDIO: a->so.stdio = 1; return 0;
    case O_LISTEN: a->so.listen_addr = arg; return 0;
    case O_AGENT: a->so.agent_addr = arg; return 0;
    case O_METRICS: a->metrics_addr = arg; return 0;
    case O_WS: a->ws_addr = arg; return 0;
    case O_ASRDELAY:
        a->asr_delay_given = 1;
        return mt_opt_seconds(arg, 0, 60, &a->asr_delay_s);
    case O_STATIC: a->static_dir = arg; return 0;
    case O_WSMAXCONNS: return mt_opt_int(arg, 1, 4096, &a->ws_max_conns);
    case O_WSMAXADDR: return mt_opt_int(arg, 1, 4096, &a->ws_max_per_addr);
    case O_TOKEN: a->token_file = arg; return 0;
    case O_INSECURE: a->so.insecure = 1; return 0;
    case O_DRAIN:
        if (strcmp(arg, "sessions") && strcmp(arg, "frames")) {
            /* said with the usage line (its status, 2, is read_all's too) */
            mt_opt_usage_error("--drain: frames or sessions, not '%s'", arg);
            return -1;
        }
        a->so.drain_sessions = !strcmp(arg, "sessions");
        return 0;
    case 'm': a->model = arg; return 0;
    case O_CODEC: a->codec = arg; return 0;
    case O_TOKENIZER: a->tokenizer = arg; return 0;
    case O_FILL: a->fill = 1; return 0;
    case O_NOFILL: a->fill = 0; return 0;
    case O_CONTROL: a->so.control_path = arg; return 0;
    case O_LATLOG: a->so.latency_log = arg; return 0;
    case O_NOCATCH: a->eo.catch_up = 0; return 0;
    }
    return number_option(a, c, arg);
}

/* The command line into a: -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, serve_args *a)
{
    int st = mt_opt_read_all(&cli, argc, argv, "s:m:h", longopts, one_option, a);
    if (st != MT_OPT_END)
        return st;
    int listens = a->so.socket_path || a->so.listen_addr;
    if (!a->so.stdio == !listens)
        return mt_opt_usage_error("give -s PATH and/or --listen HOST:PORT, or --stdio");
    if (a->ws_addr && !a->so.socket_path)
        return mt_opt_usage_error("--ws needs -s PATH: its sessions enter the server "
                                  "through that socket");
    if (a->static_dir && !a->ws_addr)
        return mt_opt_usage_error("--static serves its files on the --ws port: give --ws "
                                  "HOST:PORT too");
    if (a->ring && a->kv_shape_set)
        return mt_opt_usage_error("--kv ring sets the cache itself (no sinks, the "
                                  "checkpoint's context, absolute positions): no --sink, "
                                  "--window or --rope with it");
    if (a->so.stdio && a->so.agent_addr)
        return mt_opt_usage_error("--agent needs a listening server, not --stdio");
    /* On a real device the compute cannot be made K times faster, so a
     * scaled clock there would be a different experiment, not a faster one. */
    if (a->time_scale != 1 && a->dopt.device != MT_DEV_SIM)
        return mt_opt_usage_error("--time-scale needs --device sim:PROFILE");
    if (a->gpu >= 0 && a->dopt.device != MT_DEV_CUDA)
        return mt_opt_usage_error("--gpu needs --device cuda");
    if (a->token_file) {
        char err[512];
        size_t len = 0;
        if (!a->so.listen_addr && !a->metrics_addr && !a->ws_addr)
            return mt_opt_usage_error("--token-file guards --listen, --ws and --metrics "
                                      "(a Unix socket is guarded by its mode)");
        if (mt_token_read(a->token_file, a->token, sizeof a->token, &len, err,
                          sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err);
            return 2;
        }
        if (mt_token_mode_warning(a->token_file, err, sizeof err))
            fprintf(stderr, "%s: %s\n", prog, err);
        a->so.token = a->token;
        a->so.token_len = len;
    }
    return -1;
}

/* ---- the configuration, checked before the model is loaded -------------- */

/* -s PATH: its directory can take a socket, and nothing else is at PATH
 * (a live server, or a file that is not a socket; a socket left by a dead
 * server is replaced when the server starts). 0, or -1 (said). */
static int check_socket_path(const char *path)
{
    char dir[4096];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", path);
    const char *d = dirname(dir);
    if (strlen(path) >= sizeof ((struct sockaddr_un *)0)->sun_path) {
        fprintf(stderr, "%s: -s %s: too long for a Unix socket (%zu bytes at "
                "most)\n", prog, path, sizeof ((struct sockaddr_un *)0)->sun_path - 1);
        return -1;
    }
    const char *why = stat(d, &st) != 0 ? strerror(errno)
                    : !S_ISDIR(st.st_mode) ? "not a directory"
                    : access(d, W_OK | X_OK) != 0 ? strerror(errno) : NULL;
    if (why) {
        fprintf(stderr, "%s: -s %s: directory %s: %s\n", prog, path, d, why);
        return -1;
    }
    if (lstat(path, &st) != 0)
        return 0;
    if (!S_ISSOCK(st.st_mode)) {
        fprintf(stderr, "%s: -s %s: exists and is not a socket\n", prog, path);
        return -1;
    }
    /* net.c's own test, non-blocking: a stopped server with a full backlog
     * would keep a plain connect waiting for ever */
    char err[512];
    int r = mt_net_socket_free(path, err, sizeof err);
    if (r <= 0) {
        fprintf(stderr, "%s: -s %s\n", prog, err);
        return -1;
    }
    return 0;
}

/* A TCP address of an option (--listen, --agent) can be bound now (the
 * port is free), and --listen off loopback has a token or --insecure.
 * -1 to go on, else the exit status (said). */
static int check_tcp(const serve_args *a, const char *opt, const char *addr)
{
    char err[512], host[256], port[32], bound[128];
    if (mt_hostport_split(addr, host, sizeof host, port, sizeof port, err, sizeof err)) {
        fprintf(stderr, "%s: %s %s\n", prog, opt, err);
        return 2;
    }
    int loop = 0;
    int fd = mt_tcp_listen(addr, &loop, bound, sizeof bound, err, sizeof err);
    if (fd < 0) {
        /* "listen ADDR: why" -> "--agent ADDR: why" */
        fprintf(stderr, "%s: %s %s\n", prog, opt,
                strncmp(err, "listen ", 7) ? err : err + 7);
        return 1;
    }
    close(fd);
    if (strcmp(opt, "--agent") && !loop && !a->so.token && !a->so.insecure) {
        /* --listen, --ws, --metrics: refused before any work (issue 51) */
        fprintf(stderr, "%s: %s %s is not a loopback address: anyone who "
                "can reach it could %s; give --token-file FILE (clients "
                "then need the same token), or --insecure to allow it "
                "unauthenticated\n", prog, opt, addr,
                strcmp(opt, "--metrics") ? "send audio" : "read the metrics");
        return 2;
    }
    return -1;
}

/* Every path and address the options name, checked before the model is
 * loaded (which can take a while), each error naming its option. -1 to go
 * on, else the exit status (said). */
static int preflight(const serve_args *a)
{
    struct stat st;
    int rc;
    if (a->so.agent_addr && (rc = check_tcp(a, "--agent", a->so.agent_addr)) >= 0)
        return rc;
    if (a->so.listen_addr && (rc = check_tcp(a, "--listen", a->so.listen_addr)) >= 0)
        return rc;
    if (a->metrics_addr && (rc = check_tcp(a, "--metrics", a->metrics_addr)) >= 0)
        return rc;
    if (a->ws_addr && (rc = check_tcp(a, "--ws", a->ws_addr)) >= 0)
        return rc;
    if (a->so.socket_path && check_socket_path(a->so.socket_path) != 0)
        return 1;
    if (a->static_dir) {
        int bad = stat(a->static_dir, &st) != 0;
        if (bad || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "%s: --static %s: %s\n", prog, a->static_dir,
                    bad ? strerror(errno) : "not a directory");
            return 1;
        }
    }
    if (a->so.control_path) {
        if (stat(a->so.control_path, &st) != 0) {
            fprintf(stderr, "%s: --control %s: %s%s\n", prog, a->so.control_path,
                    strerror(errno), errno == ENOENT ? " (make it with mkfifo)" : "");
            return 1;
        }
        if (!S_ISFIFO(st.st_mode) && !S_ISSOCK(st.st_mode)) {
            fprintf(stderr, "%s: --control %s: not a FIFO or a Unix socket\n",
                    prog, a->so.control_path);
            return 1;
        }
    }
    struct stat lst;
    if (a->so.latency_log && stat(a->so.latency_log, &lst) == 0 && S_ISFIFO(lst.st_mode)) {
        /* opening a FIFO would wait here for its reader, deaf to SIGTERM:
         * the server waits for it later, where a signal ends the wait */
        if (access(a->so.latency_log, W_OK) != 0) {
            fprintf(stderr, "%s: --latency-log %s: %s\n", prog, a->so.latency_log,
                    strerror(errno));
            return 1;
        }
    } else if (a->so.latency_log) {
        int fd = open(a->so.latency_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "%s: --latency-log %s: %s\n", prog, a->so.latency_log,
                    strerror(errno));
            return 1;
        }
        close(fd);
    }
    return -1;
}

/* The model, refused unless it serves PCM frames. 0, or -1 (said). */
static int load_model(serve_args *a, mt_model **m)
{
    char err[1024];     /* an unknown preset lists them all */
    /* --device cuda with a synthetic preset: the device backend makes the
     * weights itself, so no host copy (moshi-7b in fp32 would not fit) */
    int mflags = a->dopt.device == MT_DEV_CUDA && strncmp(a->model, "synthetic:", 10) == 0
                 ? MT_MODEL_SHAPE_ONLY : 0;
    /* the simulated device holds no weights */
    if (a->dopt.device == MT_DEV_SIM)
        mflags = MT_MODEL_SHAPE_ONLY;
    /* --gpu: before the codec (loaded with a Kyutai model) opens the device */
    if (a->gpu >= 0) {
#ifdef MT_HAVE_CUDA
        if (mt_cuda_select_gpu(a->gpu, err, sizeof err) != 0) {
            fprintf(stderr, "%s: --gpu %d: %s\n", prog, a->gpu, err);
            return -1;
        }
#else
        fprintf(stderr, "%s: --gpu: built without CUDA (no nvcc at build time)\n", prog);
        return -1;
#endif
    }
    if (mt_kyutai_is_kyutai(a->model)) {
        if (mt_serve_kyutai_load(a->model, a->codec, a->tokenizer, a->dopt.device, &a->ky,
                                 err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err);
            return -1;
        }
        *m = a->ky.lm->temporal;
        if (a->ring) {   /* Kyutai's own ring: the checkpoint's context */
            a->dopt.kv.sink = 0;
            a->dopt.kv.window = a->ky.lm->kc.context;
            a->dopt.kv.rope = MT_ROPE_ABSOLUTE;
        }
        return 0;
    }
    if (a->codec || a->tokenizer || a->smp_set || a->ring) {
        fprintf(stderr, "%s: %s is for Kyutai models; %s is not one\n", prog,
                a->codec ? "--codec" : a->tokenizer ? "--tokenizer"
                : a->ring ? "--kv ring (the checkpoint's context)" : "sampling (--temperature, "
                "--top-k, --text-temperature, --text-top-k)", a->model);
        return -1;
    }
    if (mt_model_load(a->model, mflags, m, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return -1;
    }
    const mt_config *cfg = &(*m)->cfg;
    if (!cfg->has_audio || cfg->sample_rate <= 0 || cfg->frame_samples <= 0) {
        fprintf(stderr, "%s: -m %s: a text model (no audio adapter): mt-serve "
                "serves audio frame streams; give a model with one (-m "
                "synthetic:small or synthetic:tiny; -m in mt-serve(1)), or "
                "measure this one with mt-probe quality -m %s\n",
                prog, a->model, a->model);
        mt_model_free(*m);
        *m = NULL;
        return -1;
    }
    return 0;
}

/* What follows from the model and the options together: the tick, the
 * deadline, FILL by policy, the batch. */
static void settle(serve_args *a, const mt_model *m, uint64_t t0)
{
    if (a->frame_ms <= 0 && a->ky.codec)
        a->frame_ms = 1000.0 / mimi_model_config(a->ky.codec)->frame_rate;
    if (a->frame_ms <= 0)
        a->frame_ms = 1000.0 * m->cfg.frame_samples / m->cfg.sample_rate;
    /* --frame-ms and --deadline-ms are model time, like the profile's
     * step times: all of them are divided by the same K */
    a->frame_ms /= a->time_scale;
    a->eo.frame_ns = (uint64_t)(a->frame_ms * 1e6);
    a->eo.deadline_ns = a->deadline_ms > 0
        ? (uint64_t)(a->deadline_ms / a->time_scale * 1e6)
        : 2 * a->eo.frame_ns;
    a->dopt.sim_time_scale = a->time_scale;
    a->eo.fill = a->fill >= 0 ? a->fill : a->dopt.kv.policy == MT_KV_FULL;
    a->eo.drop_when_full = !a->so.stdio;
    a->dopt.max_batch = a->eo.max_sessions;
    /* a simulated device's pool budget is the profile's, unless --kv-mem */
    if (a->dopt.device == MT_DEV_SIM && a->dopt.kv_budget_auto)
        a->dopt.kv.budget_bytes = 0;
    a->so.frame_ns = a->eo.frame_ns;
    a->so.t0 = t0;
    a->so.log = log_stderr;
}

static void banner(const serve_args *a, const mt_model *m, mt_decoder *dec)
{
    const mt_kv_params *kv = &a->dopt.kv;
    fprintf(stderr, "%s: %s on %s, kv %s (%s), pool %zu bytes, tick %.3f ms, "
            "fill %s, %s%s, pid %ld\n", prog, m->cfg.name, mt_decoder_backend_name(dec),
            kv->policy == MT_KV_FULL ? "full" : "window",
            kv->policy == MT_KV_FULL
                ? (a->eo.on_full == MT_ONFULL_PREEMPT ? "on-full preempt" : "on-full stall")
                : "bounded",
            mt_kv_used_bytes(mt_decoder_pool(dec)) + mt_kv_free_bytes(mt_decoder_pool(dec)),
            a->frame_ms, a->eo.fill ? "on" : "off",
            a->so.stdio ? "stdio" : a->so.socket_path ? "socket " : "tcp ",
            a->so.stdio ? "" : a->so.socket_path ? a->so.socket_path : a->so.listen_addr,
            (long)getpid());   /* mt-replay names the pid it reached */
    if (a->time_scale != 1)
        fprintf(stderr, "%s: TIME-SCALED x%g: model time runs %g times %s "
                "than real time; tick lines (t, ms figures) are in real time\n",
                prog, a->time_scale,
                a->time_scale > 1 ? a->time_scale : 1 / a->time_scale,
                a->time_scale > 1 ? "faster" : "slower");
    if (a->rt_priority)
        fprintf(stderr, "%s: I/O, tick and log threads under SCHED_FIFO priority %d\n",
                prog, a->rt_priority);
}

/* "512 MiB", "8.50 MiB": whole MiB without decimals. */
static void mib(char *out, size_t cap, size_t bytes)
{
    if (bytes % ((size_t)1 << 20) == 0)
        snprintf(out, cap, "%zu MiB", bytes >> 20);
    else
        snprintf(out, cap, "%.2f MiB", (double)bytes / (1 << 20));
}

/* Window policy: every session takes its whole bound at admission, so a
 * pool smaller than one bound refuses everyone; say so at start rather
 * than let the operator find out from the first refusal. */
static void pool_capacity(mt_decoder *dec)
{
    mt_kv_pool *pool = mt_decoder_pool(dec);
    const mt_kv_params *p = mt_kv_pool_params(pool);
    size_t bound = mt_kv_bound_bytes(p);
    if (p->policy != MT_KV_WINDOW || bound == 0)
        return;
    size_t total = mt_kv_used_bytes(pool) + mt_kv_free_bytes(pool);
    char t[32], b[32];
    mib(t, sizeof t, total);
    mib(b, sizeof b, bound);
    size_t n = total / bound;
    if (n == 0)
        fprintf(stderr, "%s: warning: kv pool %s cannot hold one bounded session "
                "of %s (S=%d W=%d): every session will be refused; give "
                "--kv-mem %zuM or more, or a smaller --window\n",
                prog, t, b, p->sink, p->window, (bound + ((size_t)1 << 20) - 1) >> 20);
    else
        fprintf(stderr, "%s: kv pool %s holds %zu bounded session%s of %s (S=%d W=%d)\n",
                prog, t, n, n == 1 ? "" : "s", b, p->sink, p->window);
}

/* --metrics: the registry, fed by the engine's tick records. */
static int metrics_create(serve_args *a, const mt_model *m, mt_decoder *dec,
                          mt_metrics **reg, char *err, size_t errlen)
{
    mt_kv_pool *pool = mt_decoder_pool(dec);
    const mt_kv_params *p = mt_kv_pool_params(pool);
    mt_metrics_info info = {
        .frame_s = (double)a->eo.frame_ns / 1e9,
        .deadline_s = (double)a->eo.deadline_ns / 1e9,
        .blocks_total = mt_kv_pool_blocks(pool),
        .block_bytes = (int64_t)(p->position_bytes * MT_KV_BLOCK),
        .session_bound = p->policy == MT_KV_WINDOW ? (int64_t)mt_kv_bound_bytes(p) : 0,
        .kv_policy = p->policy == MT_KV_WINDOW ? "window" : "full",
        .model = m->cfg.name,
        .version = MT_VERSION,
    };
    if (mt_metrics_create(&info, reg, err, errlen) != 0)
        return -1;
    a->eo.tick_rec = mt_metrics_tick;
    a->eo.tick_rec_ctx = *reg;
    return 0;
}

/* /health: down once a tick failed (as the agent-check says). */
static int engine_health(void *ctx, char *why, size_t whylen)
{
    mt_engine_published_limit(ctx, why, whylen);
    return why[0] ? -1 : 0;
}

static int metrics_start(const serve_args *a, mt_metrics *reg, mt_engine *eng,
                         mt_metrics_http **web, char *err, size_t errlen)
{
    mt_metrics_http_opts ho = {
        .addr = a->metrics_addr, .token = a->so.token, .token_len = a->so.token_len,
        .insecure = a->so.insecure, .metrics = reg, .health = engine_health,
        .health_ctx = eng, .log = log_stderr,
    };
    char bound[80];
    if (mt_metrics_http_start(&ho, web, bound, sizeof bound, err, errlen) != 0)
        return -1;
    fprintf(stderr, "%s: metrics on http://%s/metrics%s\n", prog, bound,
            a->so.token ? " (bearer token required)" : "");
    return 0;
}

/* A text token's Text message for --ws: the piece, none for the ids
 * Kyutai's server shows none for (its padding). */
static const char *ws_piece(void *ctx, int id)
{
    return mt_tokenizer_kyutai_silent(id) ? NULL : mt_tokenizer_piece(ctx, id);
}

/* A speech-to-text model directory's stt_config.audio_delay_seconds, unless
 * --asr-delay gave one; its extra heads: sent, or named as not computed. 0, or -1
 * with a message. */
static int asr_delay_from_config(serve_args *a, char *err, size_t errlen)
{
    struct stat st;
    mt_stt_config sc;
    if (!a->ky.lm || a->ky.lm->kc.dep_q != 0 ||
        stat(a->model, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    if (mt_stt_config_load(a->model, &sc, err, errlen) != 0)
        return -1;
    if (sc.extra_heads > 0 && a->ky.sp && mt_speech_prs(a->ky.sp, NULL) > 0)
        fprintf(stderr, "%s: %s: %d extra heads of %d outputs (voice activity): Step "
                "messages (prs) sent with every step\n", prog, a->model, sc.extra_heads,
                sc.extra_heads_dim);
    else if (sc.extra_heads > 0)   /* the speech stage computes them on the CPU alone */
        fprintf(stderr, "%s: %s: %d extra heads of %d outputs (voice activity) not "
                "computed on the %s backend (only the CPU backend does): Step messages "
                "(prs) are not sent\n", prog, a->model, sc.extra_heads, sc.extra_heads_dim,
                a->dopt.device == MT_DEV_SIM ? "simulated" : "CUDA");
    if (a->asr_delay_given || !sc.present)
        return 0;
    a->asr_delay_s = sc.audio_delay_s;
    fprintf(stderr, "%s: %s: stt_config: the text %.2f s behind the audio%s\n", prog,
            a->model, sc.audio_delay_s, sc.silence_prefix_s > 0
            ? " (its audio_silence_prefix_seconds is for Kyutai's offline scripts: "
              "not applied, as their streaming server does not)" : "");
    return 0;
}

/* --ws: Kyutai's protocol, in front of our own socket. */
static int ws_start(serve_args *a, mt_engine *eng, mt_ws_gate **gate,
                    char *err, size_t errlen)
{
    if (asr_delay_from_config(a, err, errlen) != 0)
        return -1;
    if (a->static_dir && mt_static_open(a->static_dir, &a->static_files, err, errlen) != 0)
        return -1;
    mt_hello fmt;
    mt_engine_format(eng, &fmt);
    mt_ws_gate_opts wo = {
        .addr = a->ws_addr, .server = a->so.socket_path, .token = a->so.token,
        .token_len = a->so.token_len, .insecure = a->so.insecure,
        .rate = (int)fmt.sample_rate, .frame_samples = (int)fmt.frame_samples,
        .model = fmt.model, .log = log_stderr,
        .text_piece = a->ky.tok ? ws_piece : NULL, .text_ctx = a->ky.tok,
        .write_timeout_ns = a->so.write_timeout_ns,
        /* a speech-to-text model: Kyutai's asr_delay_in_tokens, as their
         * server computes it from audio_delay_seconds (truncated) */
        .asr = a->ky.lm && a->ky.lm->kc.dep_q == 0,
        .asr_delay = (int)(a->asr_delay_s * fmt.sample_rate / fmt.frame_samples + 1e-9),
        .static_files = a->static_files,
        .max_conns = a->ws_max_conns, .max_per_addr = a->ws_max_per_addr,
    };
    char bound[80];
    if (mt_ws_gate_start(&wo, gate, bound, sizeof bound, err, errlen) != 0)
        return -1;
    fprintf(stderr, "%s: websocket on ws://%s/api/chat%s\n", prog, bound,
            a->so.token ? " (token required)" : "");
    if (wo.asr)
        fprintf(stderr, "%s: speech-to-text on ws://%s/api/asr-streaming (text %d "
                "frames behind the audio)\n", prog, bound, wo.asr_delay);
    if (a->static_files)
        fprintf(stderr, "%s: static files of %s at http://%s/ (GET, HEAD; Kyutai's client: "
                "http://%s/?worker_addr=%s)\n", prog, a->static_dir, bound, bound, bound);
    if (a->ky.lm && !a->ky.tok)
        fprintf(stderr, "%s: websocket: no --tokenizer: the model's text is not sent "
                "(Kyutai's clients show Text messages as words)\n", prog);
    return 0;
}

/* The decoder, the server and the engine over m, run to the end. The exit
 * status. */
static int serve(serve_args *a, const mt_model *m, uint64_t t0)
{
    char err[512];
    mt_decoder *dec = NULL;
    mt_server *srv = NULL;
    mt_engine *eng = NULL;
    mt_metrics *reg = NULL;
    mt_metrics_http *web = NULL;
    mt_ws_gate *gate = NULL;
    int rc = 1;
    /* the simulated device books the codec's time and memory */
    if (a->ky.lm && mt_speech_codec_cost(a->ky.lm, a->ky.codec, &a->dopt.codec, err,
                                         sizeof err) != 0)
        goto out;
    if (a->ky.lm && a->dopt.device == MT_DEV_SIM &&
        mt_serve_kyutai_prepare_sim(&a->ky, a->dopt.sim_profile, a->dopt.max_batch, err,
                                    sizeof err) != 0)
        goto out;
    if (a->ky.lm && mt_serve_kyutai_prepare(&a->ky, a->dopt.device, a->dopt.max_batch, err,
                                            sizeof err) != 0)
        goto out;
    if (mt_decoder_create(m, &a->dopt, &dec, err, sizeof err) != 0)
        goto out;
    const char *note = mt_decoder_note(dec);
    if (note && *note)
        fprintf(stderr, "%s: %s\n", prog, note);
    pool_capacity(dec);
    if (a->ky.lm) {
        char line[2048];
        /* speech to text: greedy text unless told, as Kyutai's stt configs
         * (lm_gen_config temp_text 0) and their server (temperature 0) */
        if (a->ky.lm->kc.dep_q == 0 && !a->ttemp_set)
            a->smp.temp_text = 0;
        if (mt_serve_kyutai_start(&a->ky, dec, a->dopt.max_batch, &a->smp, err,
                                  sizeof err) != 0)
            goto out;
        /* the CPU codec on the backend's thread count (--threads) */
        if (mt_speech_codec_threads(a->ky.sp, a->dopt.threads, err, sizeof err) != 0)
            goto out;
        mt_serve_kyutai_report(&a->ky, mt_kv_pool_params(mt_decoder_pool(dec)), line,
                               sizeof line);
        fprintf(stderr, "%s: %s\n", prog, line);
        a->eo.speech = a->ky.sp;
    }
    /* after the decoder (its CPU workers keep the normal policy), before
     * the server and its threads, which inherit SCHED_FIFO (realtime.h) */
    if (a->rt_priority && mt_realtime_enter(a->rt_priority, err, sizeof err) != 0)
        goto out;
    static char opening[300];
    struct stat lst;
    if (a->so.latency_log && stat(a->so.latency_log, &lst) == 0 && S_ISFIFO(lst.st_mode))
        snprintf(opening, sizeof opening, "waiting for a reader of --latency-log %.200s",
                 a->so.latency_log);
    else
        snprintf(opening, sizeof opening, "opening the server's sockets");
    mt_startup_stage(opening);
    int src = mt_server_create(&a->so, &srv, err, sizeof err);
    if (src == MT_SERVER_STOPPED) {
        fprintf(stderr, "%s: %s\n", prog, err);
        rc = 0;
        goto out;
    }
    if (src != 0)
        goto out;
    a->eo.line = mt_server_line;
    a->eo.line_ctx = srv;
    if (a->metrics_addr && metrics_create(a, m, dec, &reg, err, sizeof err) != 0)
        goto out;
    if (mt_engine_create(&a->eo, dec, t0, &eng, err, sizeof err) != 0)
        goto out;
    if (a->metrics_addr && metrics_start(a, reg, eng, &web, err, sizeof err) != 0)
        goto out;
    if (a->ws_addr && ws_start(a, eng, &gate, err, sizeof err) != 0)
        goto out;
    mt_startup_end();
    banner(a, m, dec);
    if (mt_server_run(srv, eng, err, sizeof err) != 0)
        goto out;
    fprintf(stderr, "%s: done\n", prog);
    rc = 0;
out:
    mt_startup_end();            /* a failed start: its watcher first */
    if (rc)
        fprintf(stderr, "%s: %s\n", prog, err);
    mt_ws_gate_stop(gate);       /* before the server it connects to */
    mt_static_free(a->static_files);   /* after the gate that reads it */
    a->static_files = NULL;
    mt_metrics_http_stop(web);   /* before the engine its /health asks */
    mt_engine_free(eng);
    mt_metrics_free(reg);
    mt_server_free(srv);
    mt_decoder_free(dec);
    return rc;
}

/* A closed stdout (or stdin/stderr) would be taken by the next descriptor
 * opened, and latency lines written into a client's socket: hold the slot
 * with a read-only /dev/null, so that writes fail and the lines are counted
 * as lost and logged. */
static void hold_closed_stdio(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int nfd = open("/dev/null", O_RDONLY);
            if (nfd >= 0 && nfd != fd)
                close(nfd);   /* a lower slot was closed too: it took that */
            if (fd == 1)
                fprintf(stderr, "%s: stdout is closed: latency lines will be "
                        "counted as lost\n", prog);
        }
}

int main(int argc, char **argv)
{
    hold_closed_stdio();
    serve_args a;
    args_default(&a);
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    rc = preflight(&a);
    if (rc >= 0)
        return rc;
    uint64_t t0 = mt_clock_ns();
    mt_model *m = NULL;
    mt_startup_begin(prog);     /* a slow start says what it does (startup.h) */
    static char loading[300];
    snprintf(loading, sizeof loading, "loading %s", a.model);
    mt_startup_stage(loading);
    if (load_model(&a, &m) != 0) {
        mt_startup_end();
        return 1;
    }
    mt_startup_stage("setting up the decoder, its K/V pool and the server");
    settle(&a, m, t0);
    rc = serve(&a, m, t0);
    if (a.ky.lm)
        mt_serve_kyutai_free(&a.ky);   /* m is its temporal transformer */
    else
        mt_model_free(m);
    return rc;
}
