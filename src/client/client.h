/* client.h: the client side of mt-serve's session protocol, for many
 * sessions at once (mt-replay, mt-probe sweep/soak).
 *
 * One mt_client drives any number of sessions from one thread: it connects
 * (Unix socket, or a read/write fd pair for --stdio servers), sends HELLO,
 * waits for ACCEPT or REJECT, then sends one AUDIO frame per frame period
 * on an absolute CLOCK_MONOTONIC schedule (clock_nanosleep TIMER_ABSTIME:
 * frame k of a session leaves at t0 + k * period, so lateness never
 * accumulates), reads what the server sends back without ever blocking on
 * one peer, and ends each session with END. Input audio is pulled from the
 * caller (next_frame), returned frames are pushed to the caller (on_frame)
 * with their timing measured two ways: from the server's fields carried in
 * the frame (t_arrive/t_start/t_ready) and from the client's own clock.
 *
 * Library code: nothing printed, no exit(); errors come back as messages.
 *
 * src/client/ holds two things, told apart by their names:
 *   the client engine, used by mt-replay and mt-probe alike:
 *     client.c          the paced multi-session client (this header)
 *     ws_client.c       the same sessions to a Kyutai WebSocket server
 *     audio_read.c      audio files in (libsndfile)
 *     audio_write.c     audio files and streams out
 *     resample.c        rate conversion (libsamplerate), float <-> s16
 *     audio_dev.c       sound devices (PortAudio)
 *   the mt-replay application, replay*.c (cmd/mt-replay.c is its main):
 *     replay.c          inputs or a microphone as sessions, their records
 *     replay_input.c    its inputs at the session rate
 *     replay_emit.c     --emit: a frame stream with no server
 *     replay_play.c     --play: a frame stream to a file or a device
 *     replay_transcript.c  -t: the TEXT frames' transcript
 * Calls go from the application to the engine, never back.
 */
#ifndef MT_CLIENT_H
#define MT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "util/stats.h"   /* mt_pctl */
#include "wire/frame.h"

/* ---- sessions ------------------------------------------------------------ */
enum mt_client_state {
    MT_CS_WAITING = 0,  /* added, start time not reached */
    MT_CS_CONNECTING,   /* connect in progress */
    MT_CS_HELLO,        /* HELLO sent, waiting for ACCEPT/REJECT */
    MT_CS_STREAMING,    /* sending frames */
    MT_CS_DRAINING,     /* END sent, reading the remaining output */
    MT_CS_DONE,         /* ended cleanly: END received after our END */
    MT_CS_REJECTED,     /* server answered REJECT (reason) */
    MT_CS_FAILED,       /* connect/IO/protocol error, ERROR frame, or
                           timeout (reason) */
    MT_CS_SHED,         /* the server ended it early with a reason in its
                           END: shed to keep the others on time (reason) */
};

typedef struct mt_client_stats {
    int      state;            /* enum mt_client_state */
    uint32_t server_session;   /* id from ACCEPT (0 before) */
    long     server_pid;       /* the server's pid, from the Unix socket's
                                  peer credentials (0: not known: TCP,
                                  ws://, given fds) */
    mt_hello fmt;              /* format from ACCEPT */
    uint64_t sent;             /* AUDIO frames sent */
    uint64_t received;         /* AUDIO frames received (real + FILL) */
    uint64_t filled;           /* of those, FILL (silence) */
    uint64_t text;             /* TEXT and WORDS frames received (text models) */
    int      text_only;        /* ACCEPT said MT_FLAG_TEXT_ONLY: the answers
                                  are TEXT frames (counted as received, with
                                  silence for on_frame) */
    uint64_t late;             /* real frames whose client round trip
                                  exceeded the deadline */
    uint64_t missing;          /* at the end: sent - received (never
                                  silently dropped: counted here) */
    uint64_t t_added, t_accept, t_end;   /* CLOCK_MONOTONIC ns; 0 = not yet */
    double   rtt_max_ms;       /* max client round trip of this session */
    double   server_max_ms;    /* max t_ready - t_arrive of this session */
    char     reason[MT_REASON_MAX + 1]; /* REJECT/ERROR/local failure */
    int      final;            /* the REJECT carried MT_FLAG_FINAL: the
                                  same HELLO would be refused again */
} mt_client_stats;

/* One returned AUDIO frame. All times CLOCK_MONOTONIC ns. t_sched,
 * t_send and t_recv are the client's clock; t_arrive, t_start and t_ready
 * the server's, which over TCP may be another host's: only differences
 * within one clock are figures (rtt_ms and send_late_ms: client; server_ms
 * and queue_ms: server), never a difference across the two. */
typedef struct mt_client_result {
    int      idx;          /* session index (from mt_client_add_*) */
    uint32_t seq;          /* seq of the input frame it answers */
    int      fill;         /* MT_FLAG_FILL: silence sent in its place */
    int      late;         /* real frame, rtt over the deadline */
    uint64_t t_sched;      /* when the input was due to leave */
    uint64_t t_send;       /* when it actually left (client clock) */
    uint64_t t_recv;       /* when the answer was read (client clock) */
    uint64_t t_arrive, t_start, t_ready;  /* server fields */
    double   rtt_ms;       /* t_recv - t_send: what a user hears */
    double   server_ms;    /* t_ready - t_arrive: server's own view */
    double   queue_ms;     /* t_start - t_arrive: wait for the step */
    double   send_late_ms; /* t_send - t_sched: pacing jitter */
} mt_client_result;

/* next_frame's answers */
enum {
    MT_NEXT_END   = 0,  /* no more input: END is sent, output drained */
    MT_NEXT_FRAME = 1,  /* pcm filled: send it */
};

typedef struct mt_client_callbacks {
    /* ACCEPT arrived; fmt is the server's format (sample rate, frame
     * samples) the session will use. Prepare the audio here (resample to
     * fmt->sample_rate). Return 0, or -1 to end the session (it becomes
     * FAILED with the reason copied from reason[]). May be NULL. */
    int  (*on_accept)(void *user, int idx, const mt_hello *fmt,
                      char *reason, size_t reasonlen);
    /* The next input frame, seq from 0: write samples (= frame_samples *
     * channels) int16 values. Return MT_NEXT_FRAME or MT_NEXT_END.
     * NULL: silence forever (until mt_client_end_session / stop). */
    int  (*next_frame)(void *user, int idx, uint32_t seq,
                       int16_t *pcm, size_t samples);
    /* One returned AUDIO frame; pcm holds samples values (a FILL frame
     * always arrives here as samples zeros, whatever its payload was).
     * May be NULL. */
    void (*on_frame)(void *user, const mt_client_result *r,
                     const int16_t *pcm, size_t samples);
    /* The session reached DONE, REJECTED or FAILED; st is final. NULL ok. */
    void (*on_end)(void *user, int idx, const mt_client_stats *st);
    /* A TEXT frame (Kyutai's models): the n text token ids that go with
     * the output of input seq. May be NULL. */
    void (*on_text)(void *user, int idx, uint32_t seq, const int32_t *tok, int n);
    /* A WORDS frame (a server that sends text, not ids: Kyutai's protocol
     * through the ws:// bridge): n bytes of UTF-8 (not NUL-terminated)
     * that go with the output of input seq. May be NULL. */
    void (*on_words)(void *user, int idx, uint32_t seq, const char *utf8, size_t n);
} mt_client_callbacks;

typedef struct mt_client_config {
    mt_hello hello;          /* the format asked in HELLO (channels 1,
                                MT_ENC_PCM_S16LE; model may be "") */
    int64_t  period_ns;      /* 0: frame_samples / sample_rate of ACCEPT */
    int64_t  deadline_ns;    /* late threshold on rtt; 0: two periods
                                (mt-serve's default deadline) */
    int64_t  connect_timeout_ns; /* 0: 5 s */
    int64_t  accept_timeout_ns;  /* HELLO -> ACCEPT/REJECT; 0: 30 s */
    int64_t  drain_timeout_ns;   /* our END -> server's END; 0: 10 s */
    int      max_sessions;   /* capacity of the engine; 0: 4096 */
    int64_t  prepare_ns;     /* next_frame is called this long before the
                                frame is due, so that at the due instant
                                only the write is left; 0: 3 ms, < 0: at
                                the due instant (a live microphone) */
    const mt_client_callbacks *cb;
    void    *user;
    uint64_t seed;           /* HELLO's seq and seed_hi: a sampling seed asked of a
                                model that samples (Kyutai's); 0: the
                                server's default */
} mt_client_config;

typedef struct mt_client mt_client;

/* The whole engine's figures (sessions merged). */
typedef struct mt_client_totals {
    int      sessions, active, done, rejected, failed, shed;
    uint64_t sent, received, filled, late, missing;
    mt_pctl  rtt;        /* client round trip of real (non-FILL) frames */
    mt_pctl  server;     /* t_ready - t_arrive of real frames */
    mt_pctl  send_late;  /* t_send - t_sched of every frame sent */
} mt_client_totals;

int  mt_client_new(const mt_client_config *cfg, mt_client **out,
                   char *err, size_t errlen);
void mt_client_free(mt_client *c);   /* closes every fd it opened */

/* A session that connects to path when the monotonic clock reaches
 * t_start (0: now): a Unix socket, or "tcp:HOST:PORT" (wire/endpoint.h).
 * Over TCP a connection closed before ACCEPT/REJECT ends REJECTED with
 * "no capacity (closed by the proxy)": that is how HAProxy says no. Returns the session index (0, 1, ... in
 * order of adding) or -1 with err (engine full). Connect errors are not
 * reported here: the session ends FAILED with the reason. */
int  mt_client_add_unix(mt_client *c, const char *path, uint64_t t_start,
                        char *err, size_t errlen);
/* A session over an already open pair (e.g. pipes to mt-serve --stdio).
 * The engine makes them non-blocking; it closes them only if own_fds.
 * Writes to a pipe can raise SIGPIPE: the program should ignore it
 * (sockets use MSG_NOSIGNAL). */
int  mt_client_add_fds(mt_client *c, int rfd, int wfd, int own_fds,
                       uint64_t t_start, char *err, size_t errlen);

/* Runs the event loop until the clock reaches until_ns (0: no limit) or
 * no session is left unfinished. Returns the number of unfinished
 * sessions (0: all ended), or -1 with err on an engine failure (not a
 * session failure: those end that session only). Callbacks run from
 * inside. Call it repeatedly to interleave other work (adding sessions). */
int  mt_client_run(mt_client *c, uint64_t until_ns, char *err, size_t errlen);

/* Ends one session's input now: END goes after the frame in flight. */
void mt_client_end_session(mt_client *c, int idx);
/* Async-signal-safe: every session ends its input (END) at its next turn;
 * run() then drains and returns. For Ctrl-C. */
void mt_client_stop(mt_client *c);

int  mt_client_sessions(const mt_client *c);           /* added so far */
int  mt_client_unfinished(const mt_client *c);
const mt_client_stats *mt_client_session_stats(const mt_client *c, int idx);
void mt_client_totals_get(const mt_client *c, mt_client_totals *t);

const char *mt_client_state_name(int state);
/* Wait until CLOCK_MONOTONIC reaches t (ns), to within microseconds: sleeps,
 * then spins the last half millisecond. Returns 0, or -1 when a signal cut
 * the sleep short (the caller checks its stop flag and calls again). */
int         mt_client_sleep_until(uint64_t t);

#endif
