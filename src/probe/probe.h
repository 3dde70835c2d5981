/* probe.h: mt-probe's library side: seeded workloads, the analytic model of
 * the KV wall (predict), the latency-line summary, the concurrency sweep,
 * the collapse soak and the gnuplot plots.
 *
 * mt-probe.c only parses options and prints errors; everything here writes
 * its tables to a FILE the caller hands in (stdout in mt-probe), never to
 * stdout on its own, never exits, and reports errors as messages.
 *
 * One workload generator (workload.c) serves both predict and soak, so
 * the analytic model sees exactly the arrivals and lengths a soak run of the
 * same seed plays against the server.
 */
#ifndef MT_PROBE_H
#define MT_PROBE_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

#include "util/rng.h"

struct mt_tick;   /* wire/latline.h */

/* ---- seeded randomness: mt_rng (util/rng.h) ---------------------------- */

/* ---- workloads ----------------------------------------------------------- */
enum mt_arrival_kind { MT_ARR_POISSON = 0, MT_ARR_EVEN = 1, MT_ARR_BURST = 2 };
typedef struct mt_arrivals {
    int    kind;
    double rate;        /* sessions per second (poisson, even) */
    int    count;       /* burst: sessions at t=0 */
} mt_arrivals;

enum mt_length_kind {
    MT_LEN_FIXED = 0, MT_LEN_UNIFORM = 1, MT_LEN_EXP = 2, MT_LEN_LOGNORMAL = 3,
};
typedef struct mt_lengths {
    int    kind;
    double a, b;        /* fixed: a; uniform: a..b; exp: mean a;
                           lognormal: median a, sigma b (seconds) */
    double min_s;       /* floor on a drawn length (one frame at least) */
} mt_lengths;

/* "poisson:RATE" "even:RATE" "burst:N" */
int mt_arrivals_parse(const char *s, mt_arrivals *a, char *err, size_t errlen);
/* "fixed:30s" "uniform:10s:60s" "exp:20s" "lognormal:20s:0.5" */
int mt_lengths_parse(const char *s, mt_lengths *l, char *err, size_t errlen);
double mt_lengths_mean(const mt_lengths *l);        /* seconds */
double mt_lengths_mean_sq(const mt_lengths *l);     /* E[L^2], s^2 */
void mt_arrivals_format(const mt_arrivals *a, char *buf, size_t n);
void mt_lengths_format(const mt_lengths *l, char *buf, size_t n);

typedef struct mt_wl_session {
    double start_s;     /* from the start of the load */
    int64_t frames;     /* input frames it sends (>= 1) */
} mt_wl_session;

typedef struct mt_workload {
    mt_wl_session *s;
    int            n;
    double         duration_s;
    double         period_s;
} mt_workload;

/* Sessions arriving in [0, duration); each lasts its drawn length, cut at
 * the end of the load (sustained load: nobody outlives the run). At most
 * max_sessions (0: no limit). Deterministic in seed. */
int  mt_workload_make(const mt_arrivals *a, const mt_lengths *l,
                      double duration_s, double period_s, uint64_t seed,
                      int max_sessions, mt_workload *w,
                      char *err, size_t errlen);
void mt_workload_free(mt_workload *w);

/* ---- the analytic model (predict.c) -------------------------------- */
typedef struct mt_predict_params {
    /* model shape */
    int      layers, kv_heads, head_dim;
    int      elem_bytes;        /* 4 on the CPU backend, 2 (bf16) on CUDA */
    uint64_t position_bytes;    /* 0: layers*kv_heads*head_dim*2*elem */
    /* server */
    uint64_t pool_bytes;
    int      block;             /* positions per block (MT_KV_BLOCK) */
    int      sink, window;      /* the bound of the window policy */
    double   period_s;          /* frame period */
    /* load */
    mt_arrivals arrivals;
    mt_lengths  lengths;
    double   duration_s;
    int      max_sessions;
    /* Monte Carlo */
    uint64_t seed;
    int      samples;
    /* per-session state besides the temporal K/V (Kyutai: the depformer's
     * per-frame K/V and the token rings), host bytes; 0 for other models */
    uint64_t session_extra_bytes;
} mt_predict_params;

/* One seeded workload against the two policies. */
typedef struct mt_predict_run {
    uint64_t seed;
    int      sessions;          /* arrivals in the run */
    double   overflow_s;        /* unbounded: first time the blocks the
                                   live sessions need exceed the pool;
                                   -1 if never within the run */
    int      peak_live;         /* most sessions alive at once (unbounded) */
    double   peak_fill;         /* peak demand / pool (unbounded; > 1 means
                                   over) */
    int      rejected;          /* bounded: arrivals the pool refuses */
    int      peak_admitted;     /* bounded: most sessions held at once */
} mt_predict_run;

typedef struct mt_predict_result {
    uint64_t position_bytes;
    uint64_t pool_blocks;
    uint64_t bound_bytes;       /* one bounded session, block-rounded */
    int      capacity;          /* bounded sessions the pool holds */
    double   mean_live;         /* lambda * E[L] (Little) */
    double   mean_positions;    /* steady state lambda*E[L^2]/2 per period */
    double   steady_fill;       /* mean_positions * position_bytes / pool */
    double   fill_time_s;       /* closed form: steady-state ramp, -1 if
                                   steady_fill < 1 */
    int      samples, overflowed;
    double   p_overflow;        /* overflowed / samples */
    double   t_p10, t_p50, t_p90;   /* overflow time over the runs that
                                       overflow (-1 when none) */
    double   rejected_mean;     /* bounded: mean rejections per run */
} mt_predict_result;

uint64_t mt_predict_position_bytes(const mt_predict_params *p);
/* The deterministic model of one seed (the soak plays the same seed). */
int mt_predict_one(const mt_predict_params *p, uint64_t seed,
                   mt_predict_run *run, char *err, size_t errlen);
int mt_predict(const mt_predict_params *p, mt_predict_result *r,
               char *err, size_t errlen);
void mt_predict_print(FILE *out, const mt_predict_params *p,
                      const mt_predict_result *r);
/* Fills layers/kv_heads/head_dim from a model spec ("synthetic:small", a
 * directory): loads only the shape. */
int mt_predict_shape_from_model(mt_predict_params *p, const char *spec,
                                char *err, size_t errlen);

/* ---- summaries of latency lines (summary.c) ------------------------ */
typedef struct mt_summary mt_summary;
int  mt_summary_new(mt_summary **out, char *err, size_t errlen);
void mt_summary_free(mt_summary *s);
/* One line; malformed lines are counted and the first error kept
 * (strict: returns -1 with err). */
int  mt_summary_add_line(mt_summary *s, const char *line, size_t len,
                         long lineno, int strict, char *err, size_t errlen);
/* Reads a whole stream, or until *stop (when stop is not NULL) is set: an
 * interrupt that sets it ends a blocked read without an error, and what
 * was read counts. 0, or -1 with err ("read error: ..." or add_line's). */
int  mt_summary_read(mt_summary *s, FILE *in, int strict,
                     const volatile sig_atomic_t *stop, char *err, size_t errlen);
enum { MT_SUM_TABLE = 0, MT_SUM_TSV = 1 };
void mt_summary_print(FILE *out, const mt_summary *s, int format,
                      const char *only_kind);
long mt_summary_bad_lines(const mt_summary *s);
long mt_summary_records(const mt_summary *s);

/* ---- input audio for sweep and soak sessions (source.c) ---------- */
/* Synthetic audio (a different voiced tone per session, deterministic) or
 * a file played in a loop, each session starting at its own offset. */
typedef struct mt_probe_source {
    float   *file;         /* mono at file_rate, or NULL (synthetic) */
    size_t   file_n;
    int      file_rate;
    int16_t *pcm;          /* prepared at rate */
    size_t   pcm_n;
    int      rate;
    float   *syn;          /* synthetic carriers (source.c), or NULL */
} mt_probe_source;
int  mt_probe_source_open(mt_probe_source *src, const char *path,
                          char *err, size_t errlen);
/* Resamples for the server's rate (idempotent per rate). */
int  mt_probe_source_prepare(mt_probe_source *src, int rate,
                             char *err, size_t errlen);
void mt_probe_source_frame(const mt_probe_source *src, int idx, uint32_t seq,
                           int16_t *pcm, size_t samples);
void mt_probe_source_free(mt_probe_source *src);

/* ---- sweep (sweep.c) ------------------------------------------------ */
typedef struct mt_sweep_opts {
    const char *sock;           /* Unix socket or tcp:HOST:PORT */
    const char *token;          /* HELLO's access token (--token-file) */
    size_t      token_len;
    int         from, to, step;
    double      hold_s, warmup_s;
    const char *audio;          /* NULL: synthetic audio */
    const char *ticks_path;     /* mt-serve tick lines being appended here */
    const char *plot;           /* PNG path or NULL */
    const char *tsv_out;        /* also write the table here (plots) */
    FILE       *progress;       /* the progress line (a terminal), or NULL */
    int         aligned;        /* the table in aligned columns (a terminal),
                                   not tab-separated */
    double      budget_ms;      /* the wall's latency budget; 0: two periods
                                   (frame signal) or one period (tick) */
    int         tick_signal;    /* judge the wall by the p99 over the hold's
                                   ticks of max(step_ms, late_ms), the signal
                                   mt-admit reads (--signal tick), instead of
                                   the truthful per-frame p99 */
    double      time_scale;     /* K != 1: a simulated server running at K
                                   times real time (--time-scale K, added to the
                                   spawned server's arguments); the clients
                                   pace at period/K, hold and warm-up are
                                   model time, and every figure is reported
                                   in model time (real x K) */
    double      asr_delay_s;    /* a ws://.../api/asr-streaming target: the
                                   model's audio delay (mt-serve --asr-delay,
                                   Kyutai's audio_delay_seconds), taken off
                                   each Marker's round trip (--asr-delay) */
    volatile sig_atomic_t *stop;/* set (by a signal handler): end cleanly */
    /* spawn our own server instead of -s: */
    const char *serve_bin;
    char *const *serve_args;
    int         nserve_args;
    /* The levels to play, in order, instead of --from .. --to by --step
     * (nlevels 0: from, to, step). */
    const int  *levels;
    int         nlevels;
    /* When set, every tick line the sweep reads (its own server's, or
     * --ticks) while a level plays, warm-up and drain included, goes to
     * on_tick with the level's concurrency and whether it fell inside the
     * hold (measuring): what `mt-probe calibrate --served` fits. */
    void      (*on_tick)(void *user, int level, int measuring,
                         const struct mt_tick *t);
    void       *tick_user;
} mt_sweep_opts;

typedef struct mt_sweep_row {
    int      concurrency, accepted, rejected, failed;
    uint64_t frames, real, fills;
    double   p50_ms, p99_ms, max_ms;   /* server latency of real frames */
    double   p99_true_ms;              /* fills counted as missed (inf) */
    double   rtt_p99_ms;               /* client round trip, real frames */
    double   step_ms;                  /* t_ready - t_start mean, or ticks */
    int64_t  kv_used;                  /* max over the hold, -1 unknown */
    double   send_late_p99_ms;         /* the client's own pacing lag */
    double   tick_p99_ms;              /* p99 over the hold's ticks of
                                          max(step_ms, late_ms); NaN when
                                          no tick line was read */
} mt_sweep_row;

int mt_sweep_run(const mt_sweep_opts *o, FILE *out, mt_sweep_row **rows,
                 int *nrows, int *wall, char *err, size_t errlen);

/* ---- soak (soak.c) -------------------------------------------------- */
typedef struct mt_soak_config {
    char *const *args;          /* mt-serve arguments (not -s) */
    int          nargs;
    char         label[64];     /* "--kv window", "--kv full", ... */
} mt_soak_config;

typedef struct mt_soak_opts {
    int          runs;
    double       duration_s;
    uint64_t     seed;
    mt_arrivals  arrivals;
    mt_lengths   lengths;
    int          max_sessions;
    double       starve_s;        /* collapse: >= this without real output (2) */
    const char  *serve_bin;
    const char  *audio;           /* NULL: synthetic audio */
    mt_soak_config *cfg;
    int          ncfg;
    const char  *plot;            /* PNG or NULL */
    const char  *data_dir;        /* keep per-run tick logs here (or NULL) */
    FILE        *progress;       /* the progress line (a terminal), or NULL */
    volatile sig_atomic_t *stop;  /* set by a signal handler: end cleanly,
                                     stopping the run's server */
    mt_predict_params pred;       /* shape filled from -m; pool per config */
    const char  *model;           /* from the mt-serve args, for predict */
    double       time_scale;      /* K != 1: every server gets --time-scale K
                                     (simulated devices), the workload and
                                     the clients run K times faster, and
                                     every time reported is model time
                                     (real x K); <= 1: real time */
} mt_soak_opts;

typedef struct mt_soak_run {
    int      cfg, run;
    uint64_t seed;
    int      sessions, accepted, rejected, failed;
    uint64_t real, fills, missing;
    double   max_starve_s;      /* longest gap without a real frame */
    double   collapse_s;        /* the model's collapse (soak.c), -1 */
    double   overflow_s;        /* first tick with preemption/stall, -1 */
    double   starve_onset_s;    /* onset of the first >= starve_s gap, -1 */
    double   host_s, host_end_s;/* the first host stall before the
                                   collapse (soak_classify.h), -1 */
    int64_t  host_free;         /* K/V bytes free when it started */
    int      host_disturbed;    /* a host stall came first */
    double   late_end_ms;       /* server lateness at the end */
    double   late_slope;        /* ms of lateness per s, last part */
    int      unbounded_late;    /* lateness grew without bound */
    int      collapsed;
    double   predicted_s;       /* mt_predict_one for this seed, -1 none */
    double   p99_ms;            /* client rtt of real frames */
    char     note[96];
} mt_soak_run;

int mt_soak(const mt_soak_opts *o, FILE *out, mt_soak_run **runs, int *nruns,
            char *err, size_t errlen);

/* ---- plots (plot.c) ------------------------------------------------------- */
/* 1 if gnuplot is there; term gets "pngcairo" or "png". */
int mt_plot_available(char *term, size_t n);
/* A file an experiment will write (named by option opt, "--plot" say) can
 * be written: its directory exists and takes new files, and it is not a
 * directory. Checked before the experiment. 0, or -1 with err "OPT PATH:
 * why". */
int mt_out_path_check(const char *opt, const char *path, char *err, size_t errlen);
/* What a plot to png needs, checked before the experiment: gnuplot with a
 * PNG terminal, a path gnuplot can quote, and png and the script and data
 * beside it (png.gp, png.tsv) writable. 0, or -1 with err naming opt and
 * png. */
int mt_plot_check(const char *opt, const char *png, char *err, size_t errlen);
/* Latency vs concurrency. */
int mt_plot_sweep(const char *png, const mt_sweep_row *rows, int n, int wall,
                  double period_ms, char *err, size_t errlen);
/* Lateness over time: one series file per run ("t late naive_ms met
 * naive_met" columns), grouped by configuration. */
typedef struct mt_plot_series {
    const char *path;           /* data file: t late_ms naive_ms met naive_met */
    int         cfg;
    int         collapsed;
} mt_plot_series;
int mt_plot_soak(const char *png, const mt_plot_series *s, int n,
                 const char *const *cfg_labels, int ncfg, double predicted_s,
                 double period_ms, double xmax_s, const char *title,
                 char *err, size_t errlen);
/* Writes a tick-line stream as a series file (used by demo). */
int mt_plot_ticks(const char *png, const char *ticks_path, const char *title,
                  double period_ms, char *err, size_t errlen);

#endif
