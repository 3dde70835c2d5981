/* replay.h: the replay application behind mt-replay(1): audio inputs as
 * real-time sessions of mt-serve (and a live microphone), a frame stream
 * to stdout (--emit), and a frame stream from stdin to a file or a sound
 * device (--play).
 *
 * The caller (cmd/mt-replay.c) parses and checks the options, opens the
 * inputs and the device, and fills an mt_replay_cfg; these functions do
 * the work. The records (wire/replay_rec.h) go to cfg->lines, a stream the
 * caller chose; messages for the user go through cfg->say. Nothing else
 * is printed, and nothing exits.
 */
#ifndef MT_REPLAY_H
#define MT_REPLAY_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "client/audio_dev.h"
#include "client/replay_input.h"
#include "model/tokenizer.h"
#include "wire/frame.h"
#include "wire/replay_rec.h"

enum { MT_REPLAY_LAT_NONE, MT_REPLAY_LAT_INTERVAL, MT_REPLAY_LAT_FRAMES };

/* The exit statuses of a run (EXIT STATUS in mt-replay(1)). */
enum {
    MT_REPLAY_OK = 0,         /* every session done */
    MT_REPLAY_FAILED = 1,     /* a session failed, or an output could not be
                                 written */
    MT_REPLAY_REFUSED = 3,    /* the others done, some refused */
    MT_REPLAY_SHED = 4,       /* the others done or refused, some shed (ended
                                 by the server to keep the rest on time) */
};

typedef struct mt_replay_cfg {
    const char *sock;         /* Unix socket path or tcp:HOST:PORT */
    mt_hello    hello;        /* what each session asks: format, model, token */
    mt_input  **inputs;       /* [ninputs]; sessions i*copies.. read input i */
    int         ninputs, copies;
    mt_duplex  *dx;           /* --mic: the device (then ninputs is 0) */
    int         loop;         /* repeat each input (with duration_s) */
    double      duration_s;   /* > 0: stop each session after this much */
    double      stagger_ms;   /* session i starts i * stagger_ms in */
    int         retry;        /* retries of a refused session */
    int         retry_warming;/* retries of a session refused while the
                                 controller warms up (not counted in retry) */
    const char *out_pattern;  /* NULL, "-" (fd 1), or PATTERN with %d */
    int         type_fmt;     /* libsndfile format of "-" */
    int         lat;          /* MT_REPLAY_LAT_* */
    double      interval_s;   /* between replay_tick records */
    int         rate_check;   /* write replay_rate */
    int         no_pace;      /* --emit: as fast as possible */
    FILE       *lines;        /* the records; NULL: none */
    FILE       *status;       /* --mic's one-line live status; NULL: none */
    FILE       *summary_copy; /* the closing records also go here (the
                                 terminal that had the live status); NULL:
                                 only to lines */
    void      (*say)(void *ctx, const char *msg);   /* a message to the user */
    void       *ctx;
    volatile sig_atomic_t *stop;   /* set by a signal: finish now */
    const char *transcript;   /* -t FILE: the TEXT frames' tokens; NULL: none */
    const mt_tokenizer *tokenizer;  /* --tokenizer: -t writes text; NULL: ids */
    const char *text;         /* --text FILE: the text view; NULL: none */
    uint64_t    seed;         /* --seed: HELLO's seed; 0: the server's */
} mt_replay_cfg;

/* PATTERN with %d replaced by idx (and %% by %): the number of %d
 * replaced (one at most is allowed), or -1 when out (cap bytes) is too
 * small. */
int mt_replay_expand(const char *pattern, int idx, char *out, size_t cap);

/* The sessions, to their end (or *stop). The exit status (MT_REPLAY_*),
 * or -1 with err when the run could not start. */
int mt_replay_run(const mt_replay_cfg *cfg, char *err, size_t errlen);

/* --emit: inputs[0]'s frame stream (HELLO, AUDIO paced in real time unless
 * no_pace, END) to fd 1. *rate gets the send jitter. 0, or -1 with err. */
int mt_replay_emit(const mt_replay_cfg *cfg, mt_replay_rate *rate,
                   char *err, size_t errlen);

/* --play: the frame stream on fd 0 to out_pattern (a file, "-") or the
 * default sound device. *rec gets what was played. 0, or -1 with err
 * (a bad stream, an interruption, an output that failed). */
int mt_replay_playback(const mt_replay_cfg *cfg, mt_replay_play *rec,
                   char *err, size_t errlen);

#endif
