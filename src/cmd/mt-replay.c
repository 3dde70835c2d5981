/* mt-replay: audio files as real-time sessions of mt-serve, pipe modes for
 * the frame stream (--emit, --play), and live conversations through
 * PortAudio (--mic). The main: the options, checked (with every path the
 * user named) before any work, then client/replay.h does the work; see
 * mt-replay(1).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <portaudio.h>
#include <sndfile.h>

#include "cmd/opt.h"
#include "client/audio_dev.h"
#include "client/audio_write.h"
#include "client/replay_input.h"
#include "client/replay.h"
#include "client/resample.h"
#include "client/ws_client.h"
#include "wire/endpoint.h"
#include "wire/frame.h"
#include "wire/replay_rec.h"

/* The command line, and what the main opens from it. */
typedef struct app {
    const char *sock;
    const char *token_file;     /* --token-file: HELLO's access token */
    const char *emit;           /* --emit FILE */
    int         play, mic, list;
    int         copies, loop, rate_check, lat, quality, no_pace;
    double      stagger_ms, duration_s, interval_s, jitter_ms;
    const char *out_pattern, *device, *model;
    const char *type;           /* --type, for '-' in and out */
    int         type_fmt;       /* its libsndfile format */
    const char *latency_log;    /* --latency-log FILE */
    const char *transcript;     /* -t FILE */
    const char *tokenizer_path; /* --tokenizer FILE */
    const char *text;           /* --text FILE: the text view */
    mt_tokenizer *tokenizer;    /* its pieces, loaded before any session */
    uint64_t    seed;           /* --seed; 0: the server's */
    int         retry;          /* --retry N */
    int         no_wait;        /* --no-wait */
    int         live;           /* --mic with stdout a terminal */
    int         rate, frame_samples;
    int         ns;             /* sessions */
    mt_input  **inputs;         /* [ninputs] */
    int         ninputs;
    mt_duplex  *dx;
    FILE       *lines;          /* where the records go (open_lines) */
} app;

/* Retries of a session refused by a warming-up controller (0.25 s
 * doubling to 2 s apart: over three minutes in all). */
enum { WARM_RETRIES = 100 };

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void say(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "mt-replay: %s\n", msg);
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: mt-replay -s SOCK [-n N] [--stagger MS] [-o PATTERN] FILE...|-\n"
"       mt-replay --emit FILE|- [--no-pace] > STREAM\n"
"       mt-replay --play [-o FILE] < STREAM\n"
"       mt-replay -s SOCK --mic [--device DEV] [--jitter MS]\n"
"       mt-replay --list-devices\n"
"options:\n"
"  -s, --socket PATH      mt-serve's Unix socket, tcp:HOST:PORT, or a\n"
"                         ws://HOST:PORT/api/chat (Kyutai's protocol)\n"
"      --token-file FILE  access token for a TCP server (mt-serve --token-file)\n"
"  -n, --copies N         sessions per input file (default 1)\n"
"      --stagger MS       start sessions MS apart (default 0)\n"
"  -o, --output PATTERN   write returned audio; %%d = session index; format\n"
"                         from the extension (.wav .flac .ogg .aiff ...);\n"
"                         '-' is standard output (one session)\n"
"      --type TYPE        format of '-' (stdin or stdout): au (default out),\n"
"                         ogg or raw through a pipe; raw stdin is s16le mono\n"
"                         at --rate; other formats only from/to a file\n"
"      --retry N          retry a refused session up to N times, backing off\n"
"                         (0.25 s doubling, jittered, at most 8 s); not one\n"
"                         the server marks final (a wrong token, say)\n"
"      --no-wait          do not wait for a warming-up controller: a refusal\n"
"                         that begins \"warming up:\" is final too (by\n"
"                         default it is retried, up to %d times, uncounted)\n"
"      --latency-log FILE machine lines to FILE instead of stdout\n"
"  -t, --transcript FILE  text models: the text tokens, one line a frame\n"
"                         (SESSION SEQ ID...; a ws:// server's Text messages:\n"
"                         SESSION SEQ TEXT); each is a replay_text line too\n"
"      --tokenizer FILE   with -t: the model's SentencePiece .model; the\n"
"                         transcript holds the text (SESSION SEQ TEXT)\n"
"      --text FILE        the text to read: one line a session, SESSION TEXT,\n"
"                         its pieces joined into words (needs --tokenizer,\n"
"                         or a ws:// server, which sends words)\n"
"      --seed N           models that sample: the sessions' seed (64 bits in\n"
"                         HELLO, 1..18446744073709551615; default: the\n"
"                         server's)\n"
"  -r, --rate HZ          session sample rate (default 24000)\n"
"  -f, --frame-samples N  samples per frame (default 1920)\n"
"  -m, --model NAME       model name asked in HELLO (default: any)\n"
"  -q, --quality Q        resampler: best medium fastest zoh linear\n"
"      --loop             repeat each file (with --duration)\n"
"      --duration SEC     stop each session after SEC seconds of audio\n"
"      --rate-check       print the achieved send jitter\n"
"      --latency MODE     frames, interval (default) or none\n"
"      --interval SEC     seconds between interval lines (default 1)\n"
"      --emit FILE        write FILE's frame stream to stdout, no server\n"
"      --no-pace          with --emit: as fast as possible\n"
"      --play             read a frame stream on stdin, write -o or play\n"
"      --mic              live conversation through PortAudio\n"
"      --device DEV       PortAudio device: index, name or part of it\n"
"      --jitter MS        speaker jitter buffer (default 160)\n"
"      --list-devices     list what PortAudio finds\n"
"  -h, --help             this text\n"
"      --version          print the version\n", WARM_RETRIES);
}

static int list_devices(void)
{
    mt_pa_device *l = NULL;
    int n = 0;
    char err[512];
    if (mt_pa_list(&l, &n, err, sizeof err) != 0) {
        fprintf(stderr, "mt-replay: %s\n", err);
        return 1;
    }
    printf("# PortAudio %s: %d device%s\n", Pa_GetVersionText(), n, n == 1 ? "" : "s");
    for (int i = 0; i < n; i++)
        printf("%d\t%s\t%s\tin=%d\tout=%d\trate=%.0f%s%s\n", l[i].index,
               l[i].name, l[i].host_api, l[i].max_in, l[i].max_out,
               l[i].default_rate, l[i].is_default_in ? "\tdefault_in" : "",
               l[i].is_default_out ? "\tdefault_out" : "");
    free(l);
    return 0;
}

/* ---- the command line ---------------------------------------------------- */

static const mt_cli cli = {
    "mt-replay", "mt-replay -s SOCK [options] FILE... | --emit FILE | --play | --mic | --list-devices",
    usage,
};

enum { O_STAGGER = 256, O_LOOP, O_DURATION, O_RATECHECK, O_LATENCY,
       O_INTERVAL, O_EMIT, O_NOPACE, O_PLAY, O_MIC, O_DEVICE, O_JITTER,
       O_LIST, O_TOKEN, O_TYPE, O_RETRY, O_LATLOG, O_NOWAIT, O_SEED,
       O_TOKENIZER, O_TEXT };

static const struct option longopts[] = {
    { "socket", required_argument, 0, 's' },
    { "copies", required_argument, 0, 'n' },
    { "output", required_argument, 0, 'o' },
    { "rate", required_argument, 0, 'r' },
    { "frame-samples", required_argument, 0, 'f' },
    { "model", required_argument, 0, 'm' },
    { "quality", required_argument, 0, 'q' },
    { "stagger", required_argument, 0, O_STAGGER },
    { "loop", no_argument, 0, O_LOOP },
    { "duration", required_argument, 0, O_DURATION },
    { "rate-check", no_argument, 0, O_RATECHECK },
    { "latency", required_argument, 0, O_LATENCY },
    { "interval", required_argument, 0, O_INTERVAL },
    { "emit", required_argument, 0, O_EMIT },
    { "no-pace", no_argument, 0, O_NOPACE },
    { "play", no_argument, 0, O_PLAY },
    { "mic", no_argument, 0, O_MIC },
    { "device", required_argument, 0, O_DEVICE },
    { "jitter", required_argument, 0, O_JITTER },
    { "list-devices", no_argument, 0, O_LIST },
    { "token-file", required_argument, 0, O_TOKEN },
    { "type", required_argument, 0, O_TYPE },
    { "retry", required_argument, 0, O_RETRY },
    { "latency-log", required_argument, 0, O_LATLOG },
    { "transcript", required_argument, 0, 't' },
    { "tokenizer", required_argument, 0, O_TOKENIZER },
    { "text", required_argument, 0, O_TEXT },
    { "seed", required_argument, 0, O_SEED },
    { "no-wait", no_argument, 0, O_NOWAIT },
    MT_OPT_COMMON,
    { 0, 0, 0, 0 },
};

static void app_default(app *a)
{
    memset(a, 0, sizeof *a);
    a->copies = 1;
    a->lat = MT_REPLAY_LAT_INTERVAL;
    a->rate = 24000;
    a->frame_samples = 1920;
    a->quality = mt_audio_quality_parse("medium");
    a->interval_s = 1;
    a->jitter_ms = 160;
}

/* The options with a value to check. 0, or -1 (said). */
static int value_option(app *a, int c, const char *arg)
{
    static const char *const lat[] = { "none", "interval", "frames", NULL };
    switch (c) {
    case 'n': return mt_opt_int(arg, 1, 4096, &a->copies);
    case 'r': return mt_opt_int(arg, 1000, 768000, &a->rate);
    case 'f': return mt_opt_int(arg, 1, MT_FRAME_MAX_PAYLOAD / 2, &a->frame_samples);
    case 'q':
        a->quality = mt_audio_quality_parse(arg);
        return a->quality < 0
            ? mt_opt_bad(arg, "is not one of best, medium, fastest, zoh, linear") : 0;
    case O_STAGGER: return mt_opt_ms(arg, 0, INFINITY, &a->stagger_ms);
    /* at most a year: the frame count must fit a frame sequence number */
    case O_DURATION: return mt_opt_seconds(arg, 0.001, 31536000, &a->duration_s);
    case O_LATENCY: return mt_opt_choice(arg, lat, &a->lat);
    case O_INTERVAL: return mt_opt_seconds(arg, 0.01, INFINITY, &a->interval_s);
    case O_JITTER: return mt_opt_ms(arg, 0, INFINITY, &a->jitter_ms);
    case O_RETRY: return mt_opt_int(arg, 0, 100, &a->retry);
    case O_SEED:
        if (mt_opt_u64(arg, &a->seed))
            return -1;
        return a->seed ? 0 : mt_opt_bad(arg, "is not a seed (1 or more; 0 is the server's)");
    case O_TYPE:
        a->type = arg;
        return mt_audio_type_parse(arg, &a->type_fmt)
            ? mt_opt_bad(arg, "is not a type: au, ogg or raw (through a pipe); "
                         "wav, flac, aiff, caf, w64 (standard output redirected "
                         "to a file)") : 0;
    }
    return -1;
}

/* The command line into a: -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, app *a)
{
    int c;
    while ((c = mt_opt_next(&cli, argc, argv, "s:n:o:r:f:m:q:t:h", longopts)) >= 0) {
        switch (c) {
        case 's': a->sock = optarg; break;
        case 'o': a->out_pattern = optarg; break;
        case 'm': a->model = optarg; break;
        case O_LOOP: a->loop = 1; break;
        case O_RATECHECK: a->rate_check = 1; break;
        case O_EMIT: a->emit = optarg; break;
        case O_NOPACE: a->no_pace = 1; break;
        case O_PLAY: a->play = 1; break;
        case O_MIC: a->mic = 1; break;
        case O_DEVICE: a->device = optarg; break;
        case O_LIST: a->list = 1; break;
        case O_TOKEN: a->token_file = optarg; break;
        case O_LATLOG: a->latency_log = optarg; break;
        case 't': a->transcript = optarg; break;
        case O_TOKENIZER: a->tokenizer_path = optarg; break;
        case O_TEXT: a->text = optarg; break;
        case O_NOWAIT: a->no_wait = 1; break;
        default:
            if (value_option(a, c, optarg))
                return 2;
        }
    }
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    if (a->list + !!a->emit + a->play + a->mic > 1)
        return mt_opt_usage_error("--emit, --play, --mic and --list-devices "
                                  "exclude each other");
    if (a->retry > 0 && (a->emit || a->play || a->list))
        return mt_opt_usage_error("--retry is for sessions with a server (-s)");
    if (a->tokenizer_path && !a->transcript && !a->text)
        return mt_opt_usage_error("--tokenizer is for the transcript (-t FILE or --text FILE)");
    if (a->text && !a->tokenizer_path && !(a->sock && strncmp(a->sock, "ws://", 5) == 0))
        return mt_opt_usage_error("--text needs --tokenizer MODEL (the words of the "
                                  "token ids), unless the server is ws:// (it sends words)");
    return -1;
}

/* Output to stdout takes --type, au by default (it streams, and sox and
 * ffmpeg read it from a pipe), checked before any connection: not a
 * terminal, and a pipe only for a format that streams. 0, or -1 (said). */
static int check_stdout_audio(app *a)
{
    if (!a->type)
        mt_audio_type_parse("au", &a->type_fmt);
    if (isatty(1)) {
        fprintf(stderr, "mt-replay: -o -: standard output is a terminal; "
                "send the audio into a pipe or a file\n");
        return -1;
    }
    if (lseek(1, 0, SEEK_CUR) < 0 && !mt_audio_type_streams(a->type_fmt)) {
        fprintf(stderr, "mt-replay: -o -: --type %s cannot be written to a "
                "pipe (its header is completed last); use --type au, ogg or "
                "raw, or redirect standard output to a file\n", a->type);
        return -1;
    }
    return 0;
}

/* An output file's checks before any connection is made: a known
 * extension, and a directory that exists and can be written, so that a
 * typo fails at once instead of after the server admitted the session.
 * 0, or -1 (said). */
static int check_output_file(const char *path)
{
    char err[1024];
    int fmt;
    if (mt_audio_format_for_path(path, &fmt, err, sizeof err)) {
        fprintf(stderr, "mt-replay: -o: %s\n", err);
        return -1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    const char *d = dirname(dir);
    struct stat st;
    if (stat(d, &st) != 0) {
        fprintf(stderr, "mt-replay: -o %s: directory %s: %s\n", path, d,
                strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "mt-replay: -o %s: %s is not a directory\n", path, d);
        return -1;
    }
    if (access(d, W_OK | X_OK) != 0) {
        fprintf(stderr, "mt-replay: -o %s: cannot write in directory %s: %s\n",
                path, d, strerror(errno));
        return -1;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "mt-replay: -o %s: is a directory\n", path);
        return -1;
    }
    return 0;
}

/* A text output's (-t, --text) directory, checked as -o's is, before any
 * input is read or connection made. 0, or -1 (said). */
static int check_text_file(const char *opt, const char *path)
{
    if (!path)
        return 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    const char *d = dirname(dir);
    struct stat st;
    errno = 0;
    if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode) || access(d, W_OK | X_OK) != 0) {
        fprintf(stderr, "mt-replay: %s %s: directory %s: %s\n", opt, path, d,
                errno ? strerror(errno) : "not a directory");
        return -1;
    }
    return 0;
}

/* Where the records go: stdout, stderr when stdout carries audio (-o -),
 * the --latency-log file, or nowhere (NULL: a live --mic status has the
 * terminal). 0, or -1 (said). */
static int open_lines(app *a)
{
    int audio_on_stdout = a->out_pattern && !strcmp(a->out_pattern, "-") && !a->emit;
    a->live = a->mic && isatty(1);
    if (a->latency_log) {
        a->lines = fopen(a->latency_log, "a");
        if (!a->lines) {
            fprintf(stderr, "mt-replay: --latency-log %s: %s\n", a->latency_log,
                    strerror(errno));
            return -1;
        }
        setvbuf(a->lines, NULL, _IOLBF, 0);
    } else if (audio_on_stdout) {
        a->lines = stderr;
    } else if (a->live) {
        a->lines = NULL;
    } else {
        a->lines = stdout;
    }
    return 0;
}

/* --play's checks: operands and the output format. -1, or the status. */
static int check_play(const app *a, int nargs)
{
    if (nargs > 0)
        return mt_opt_usage_error("--play reads stdin; no files");
    if (a->out_pattern && strcmp(a->out_pattern, "-") && check_output_file(a->out_pattern))
        return 2;
    if (a->type && (!a->out_pattern || strcmp(a->out_pattern, "-")))
        return mt_opt_usage_error("--type is the format of '-': with --play, "
                                  "of -o -");
    return -1;
}

/* -s names a server that can be there: a Unix socket path must exist and
 * be a socket (a TCP address is tried when the sessions connect). 0, or
 * -1 (said). */
static int check_server(const app *a)
{
    struct stat st;
    if (!a->sock || mt_endpoint_is_tcp(a->sock) || mt_ws_client_is_url(a->sock))
        return 0;
    if (stat(a->sock, &st) != 0) {
        fprintf(stderr, "mt-replay: -s %s: %s%s\n", a->sock, strerror(errno),
                errno == ENOENT ? " (is mt-serve running there?)" : "");
        return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
        fprintf(stderr, "mt-replay: -s %s: not a socket\n", a->sock);
        return -1;
    }
    return 0;
}

/* The sessions' output files, checked before any input is read or any
 * connection made: a known format, a directory that can be written. -1 to
 * go on, else the exit status. */
static int check_outputs(const app *a)
{
    if (!a->out_pattern || a->emit)
        return -1;
    if (!strcmp(a->out_pattern, "-"))
        return a->ns > 1 ? mt_opt_usage_error("-o - (standard output) takes "
                                              "one session, not %d", a->ns) : -1;
    for (int i = 0; i < a->ns; i++) {
        char path[4096];
        int k = mt_replay_expand(a->out_pattern, i, path, sizeof path);
        if (k < 0 || (k == 0 && a->ns > 1)) {
            fprintf(stderr, "mt-replay: -o %s: %s\n", a->out_pattern,
                    k < 0 ? "too long" : "needs %d with more than one session");
            return 2;
        }
        if (check_output_file(path))
            return 2;
    }
    return -1;
}

/* The inputs of the file modes (one with --emit), read and resampled, or
 * none for --mic. -1 to go on, else the exit status. */
static int load_inputs(app *a, char **files, int nargs)
{
    char err[1024];
    if (a->mic) {
        if (!a->sock)
            return mt_opt_usage_error("--mic needs -s SOCK");
        if (nargs > 0)
            return mt_opt_usage_error("--mic takes no files");
        a->ns = 1;
        return check_server(a) != 0 ? 1 : -1;
    }
    if (a->emit && nargs > 0)
        return mt_opt_usage_error("--emit takes one file");
    int nfiles = a->emit ? 1 : nargs;
    if (nfiles < 1)
        return mt_opt_usage_error("no input files");
    if (!a->emit && !a->sock)
        return mt_opt_usage_error("-s SOCK is needed to replay files");
    int stdin_inputs = 0;
    for (int i = 0; i < nfiles; i++)
        stdin_inputs += !strcmp(a->emit ? a->emit : files[i], "-");
    if (stdin_inputs > 1)
        return mt_opt_usage_error("'-' (standard input) can be read once; "
                                  "use -n for copies");
    int stdout_out = a->out_pattern && !a->emit && !strcmp(a->out_pattern, "-");
    if (a->type && !stdin_inputs && !stdout_out)
        return mt_opt_usage_error("--type is the format of '-' (standard "
                                  "input or -o -); files go by their name");
    if (a->type && stdin_inputs && !stdout_out &&
        (a->type_fmt & SF_FORMAT_TYPEMASK) != SF_FORMAT_RAW)
        fprintf(stderr, "mt-replay: --type %s: standard input's format is read "
                "from its header; only raw needs saying\n", a->type);
    a->ns = a->emit ? 1 : nfiles * a->copies;
    int rc = check_outputs(a);
    if (rc >= 0)
        return rc;
    if (check_text_file("-t", a->transcript) || check_text_file("--text", a->text))
        return 1;
    if (!a->emit && check_server(a) != 0)
        return 1;
    a->inputs = calloc((size_t)nfiles, sizeof *a->inputs);
    if (!a->inputs)
        return 1;
    int raw_rate = a->type && (a->type_fmt & SF_FORMAT_TYPEMASK) == SF_FORMAT_RAW
        ? a->rate : 0;
    for (int i = 0; i < nfiles; i++) {
        const char *path = a->emit ? a->emit : files[i];
        if (mt_input_open(path, a->rate, a->quality, raw_rate, &a->inputs[i],
                          err, sizeof err) != 0) {
            fprintf(stderr, "mt-replay: %s\n", err);
            return 1;
        }
        a->ninputs = i + 1;
    }
    return -1;
}

static void catch_signals(void)
{
    /* The default 50 us timer slack is pure jitter for a pacer. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The HELLO every session sends, with the token read now. 0, or -1
 * (said). */
static int make_hello(const app *a, mt_hello *h)
{
    memset(h, 0, sizeof *h);
    h->sample_rate = (uint32_t)a->rate;
    h->frame_samples = (uint32_t)a->frame_samples;
    h->channels = 1;
    h->encoding = MT_ENC_PCM_S16LE;
    if (a->model)
        snprintf(h->model, sizeof h->model, "%s", a->model);
    if (a->token_file) {
        char err[512];
        size_t tl = 0;
        if (mt_token_read(a->token_file, h->token, sizeof h->token, &tl, err,
                          sizeof err) != 0) {
            fprintf(stderr, "mt-replay: --token-file %s\n", err);
            return -1;
        }
        h->token_len = (uint8_t)tl;
    }
    return 0;
}

static void make_cfg(app *a, mt_replay_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->sock = a->sock;
    c->inputs = a->inputs;
    c->ninputs = a->ninputs;
    c->copies = a->copies;
    c->dx = a->dx;
    c->loop = a->loop;
    c->duration_s = a->duration_s;
    c->stagger_ms = a->stagger_ms;
    c->retry = a->retry;
    c->transcript = a->transcript;
    c->tokenizer = a->tokenizer;
    c->text = a->text;
    c->seed = a->seed;
    c->retry_warming = a->no_wait ? 0 : WARM_RETRIES;
    c->out_pattern = a->emit ? NULL : a->out_pattern;
    c->type_fmt = a->type_fmt;
    c->lat = a->lat;
    c->interval_s = a->interval_s;
    c->rate_check = a->rate_check;
    c->no_pace = a->no_pace;
    c->lines = a->lines;
    c->status = a->live ? stdout : isatty(2) ? stderr : NULL;
    c->summary_copy = a->live ? stdout : NULL;
    c->say = say;
    c->stop = &g_stop;
}

static void print_record(FILE *f, long n, const char *buf)
{
    if (f && n >= 0) {
        fprintf(f, "%s\n", buf);
        fflush(f);
    }
}

static int run_emit(app *a, const mt_replay_cfg *c)
{
    char err[1024], buf[1024];
    mt_replay_rate r;
    int rc = mt_replay_emit(c, &r, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "mt-replay: %s\n", err);
    if (a->rate_check && r.frames)
        print_record(stderr, mt_replay_rate_format(&r, buf, sizeof buf), buf);
    return rc != 0;
}

static int run_play(app *a, const mt_replay_cfg *c)
{
    char err[1024], buf[1024];
    mt_replay_play r;
    if (mt_replay_playback(c, &r, err, sizeof err) != 0) {
        fprintf(stderr, "mt-replay: %s\n", err);
        return 1;
    }
    print_record(a->lines ? a->lines : stdout,
                 mt_replay_play_format(&r, buf, sizeof buf), buf);
    return 0;
}

/* --mic: the capture and playback device. 0, or -1 (said). */
static int open_mic(app *a)
{
    char err[1024];
    int jf = (int)(a->jitter_ms * a->rate / 1000.0 / a->frame_samples + 0.999);
    if (mt_duplex_open(a->device, a->rate, a->frame_samples, jf, &a->dx, err,
                       sizeof err) != 0) {
        fprintf(stderr, "mt-replay: --mic: %s\n", err);
        return -1;
    }
    return 0;
}

/* The file, emit and mic modes, after the options. The exit status. */
static int run_sessions(app *a, char **files, int nargs)
{
    mt_replay_cfg c;
    mt_hello h;
    int rc = load_inputs(a, files, nargs);
    if (rc < 0 && make_hello(a, &h) != 0)
        rc = 2;
    if (rc < 0 && a->mic && open_mic(a) != 0)
        rc = 1;
    if (rc < 0) {
        make_cfg(a, &c);
        c.hello = h;
        if (a->emit) {
            rc = run_emit(a, &c);
        } else {
            char err[1024];
            rc = mt_replay_run(&c, err, sizeof err);
            if (rc < 0) {
                fprintf(stderr, "mt-replay: %s\n", err);
                rc = 1;
            }
        }
    }
    if (a->dx)
        mt_duplex_close(a->dx);
    for (int i = 0; i < a->ninputs; i++)
        mt_input_close(a->inputs[i]);
    free(a->inputs);
    return rc;
}

int main(int argc, char **argv)
{
    app a;
    app_default(&a);
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    if (a.list)
        return list_devices();
    if (a.out_pattern && !strcmp(a.out_pattern, "-") && !a.emit && !a.mic &&
        check_stdout_audio(&a) != 0)
        return 2;
    if (open_lines(&a) != 0)
        return 1;
    if (a.tokenizer_path) {
        char err[600];
        a.tokenizer = mt_tokenizer_load_err(a.tokenizer_path, err, sizeof err);
        if (!a.tokenizer) {
            fprintf(stderr, "mt-replay: --tokenizer %s\n", err);
            return 1;
        }
    }
    catch_signals();
    if (a.play) {
        rc = check_play(&a, argc - optind);
        if (rc >= 0) {
            mt_tokenizer_free(a.tokenizer);
            return rc;
        }
        mt_replay_cfg c;
        make_cfg(&a, &c);
        rc = run_play(&a, &c);
        mt_tokenizer_free(a.tokenizer);
        return rc;
    }
    if (a.loop && a.duration_s <= 0) {
        mt_tokenizer_free(a.tokenizer);
        return mt_opt_usage_error("--loop needs --duration");
    }
    rc = run_sessions(&a, argv + optind, argc - optind);
    mt_tokenizer_free(a.tokenizer);
    return rc;
}
