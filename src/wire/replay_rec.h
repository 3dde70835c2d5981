/* replay_rec.h: the records mt-replay writes (logfmt, latline.h), each with
 * one struct, one writer and one strict reader.
 *
 *   replay_tick=N ...      every --interval seconds: the interval's figures
 *   replay_frame=SEQ ...   one per returned frame (--latency frames)
 *   replay_retry=I ...     a refused session tried again (--retry)
 *   replay_session=I ...   a session's end (one per connection)
 *   replay_summary=N ...   the run's totals, at the end
 *   replay_rejected=WHAT . one per session that did not finish (WHAT is
 *                          rejected, shed or failed)
 *   replay_rate=N ...      the achieved send jitter (--rate-check)
 *   replay_mic device=...  the sound device's counters (--mic)
 *   replay_play frames=.. what --play played
 *
 * The keys and their order are those of mt-replay(1). A writer returns the
 * line's length (no newline), or -1 when it does not fit cap. A reader
 * needs the record's first key, and every key its writer writes (except
 * those marked optional) present and well formed; unknown keys are
 * ignored. It returns 0, or -1 with err "line N: key 'K': ..." and the
 * record untouched. Strings longer than their field are an error, never
 * cut.
 */
#ifndef MT_REPLAY_REC_H
#define MT_REPLAY_REC_H

#include <stddef.h>
#include <stdint.h>

#include "wire/latline.h"

#define MT_RR_STR 256   /* a reason, a file name, a state or device name */

typedef struct mt_replay_tick {
    int64_t  replay_tick;   /* interval number from 0 */
    double   t;             /* seconds since the run began */
    int64_t  active;        /* sessions streaming now */
    uint64_t sent, received, filled, late;   /* frames so far */
    double   p50_ms, p99_ms, max_ms;         /* the interval's round trip */
    double   server_p50_ms, server_p99_ms;   /* and the server's share */
} mt_replay_tick;

typedef struct mt_replay_frame {
    uint64_t replay_frame;  /* the frame's sequence number */
    int64_t  session;       /* mt-replay's session index */
    int64_t  fill;          /* 1: the server sent FILL (silence) */
    int64_t  late;          /* 1: past its deadline */
    double   rtt_ms, server_ms, queue_ms, send_late_ms;
} mt_replay_frame;

typedef struct mt_replay_retry {
    int64_t  replay_retry;  /* session index */
    int64_t  attempt;       /* connections made, this one included */
    double   in_s;          /* the wait before it */
    char     reason[MT_RR_STR];   /* the refusal that led to it */
} mt_replay_retry;

typedef struct mt_replay_session {
    int64_t  replay_session;      /* session index */
    char     state[32];           /* done, rejected, shed, failed, ... */
    uint64_t server_session;      /* the server's id, 0 when none */
    char     file[MT_RR_STR];     /* the input, or "mic" */
    uint64_t sent, received, filled, late, missing;
    double   rtt_max_ms, server_max_ms;
    char     reason[MT_RR_STR];   /* optional: "" when not written */
} mt_replay_session;

typedef struct mt_replay_summary {
    int64_t  replay_summary;      /* sessions asked for */
    int64_t  done, rejected, failed;
    uint64_t sent, received, filled, late, missing;
    double   p50_ms, p99_ms, max_ms;
    double   server_p50_ms, server_p99_ms, server_max_ms;
    int64_t  retries;
    int64_t  shed;                /* of the failed: ended by the server's
                                     shedding */
} mt_replay_summary;

typedef struct mt_replay_rejected {
    char     replay_rejected[16]; /* rejected, shed or failed */
    int64_t  session;
    char     reason[MT_RR_STR];
} mt_replay_rejected;

typedef struct mt_replay_rate {
    int64_t  replay_rate;         /* sessions */
    uint64_t frames;
    double   jitter_p50_ms, jitter_p99_ms, jitter_max_ms;
    double   jitter_mean_ms;      /* optional: --emit does not write it */
} mt_replay_rate;

typedef struct mt_replay_mic {
    char     device[MT_RR_STR];
    int64_t  device_rate;
    uint64_t mic_frames, mic_short, mic_dropped, spk_underruns, spk_dropped;
    double   mic_dropped_s;       /* mic_dropped in seconds of device audio
                                     (optional: records before it lack it) */
    int64_t  real_time;           /* 0 or 1 */
} mt_replay_mic;

typedef struct mt_replay_play {
    uint64_t frames;              /* played (its kind, replay_play, is a flag) */
    uint64_t filled, samples;
    double   server_p50_ms, server_p99_ms;
} mt_replay_play;

#define MT_RR_DECLARE(T)                                                     \
    long mt_##T##_format(const mt_##T *r, char *buf, size_t cap);            \
    int  mt_##T##_from_line(const mt_latline *ll, long lineno, mt_##T *r,    \
                            char *err, size_t errlen);
MT_RR_DECLARE(replay_tick)
MT_RR_DECLARE(replay_frame)
MT_RR_DECLARE(replay_retry)
MT_RR_DECLARE(replay_session)
MT_RR_DECLARE(replay_summary)
MT_RR_DECLARE(replay_rejected)
MT_RR_DECLARE(replay_rate)
MT_RR_DECLARE(replay_mic)
MT_RR_DECLARE(replay_play)
#undef MT_RR_DECLARE

#endif
