/* probe_common.c: what mt-probe's subcommands share (probe_common.h):
 * signals, finding mt-serve, checking output paths, and the load and
 * shape options of predict and soak. */
#define _GNU_SOURCE
#include "cmd/probe_common.h"
#include "cmd/opt.h"
#include "decode/kv.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prog = MT_PROBE_PROG;

volatile sig_atomic_t mt_probe_stop;

static void on_signal(int sig)
{
    (void)sig;
    mt_probe_stop = 1;
}

/* Ctrl-C and SIGTERM end a sweep or soak cleanly: its servers are stopped
 * by pid, nothing is left running. */
void mt_probe_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* mt-serve next to this program, else on PATH. */
const char *mt_probe_default_serve(char *buf, size_t n)
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

void mt_probe_load_defaults(load_opts *l)
{
    char e[8];
    l->duration_s = 30;
    l->seed = 1;
    mt_arrivals_parse("poisson:1", &l->arrivals, e, sizeof e);
    mt_lengths_parse("exp:20s", &l->lengths, e, sizeof e);
    l->max_sessions = 512;
}

/* Returns 1 if handled, 0 if not a load option, -1 on a bad value (said). */
int mt_probe_load_opt(load_opts *l, int c, const char *arg)
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

void mt_probe_shape_defaults(shape_opts *s)
{
    memset(s, 0, sizeof *s);
    s->elem = 2;        /* mt-serve's default on the CPU: an f16 cache */
    s->sink = 4;
    s->window = 256;
    s->block = MT_KV_BLOCK;
    s->samples = 1000;
}

/* Returns 1 if handled, 0 if not a shape option, -1 on a bad value (said). */
int mt_probe_shape_opt(shape_opts *s, int c, const char *arg)
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
int mt_probe_shape_fill(const shape_opts *s, mt_predict_params *p, char *err,
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

/* The files and folder an experiment will write, checked before it starts
 * (a typo must not cost the whole run): --plot (and gnuplot), --ticks,
 * --data (made when missing, so its parent is checked). -1 to go on, else
 * the exit status (said, naming the option and the path). */
int mt_probe_check_outputs(const char *sub, const char *plot, const char *ticks,
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

