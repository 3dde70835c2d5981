/* replay_play.c: mt-replay --play: the frame stream on standard input (what
 * mt-serve --stdio or --emit writes) to a file, standard output or the
 * sound device. See replay.h.
 */
#define _GNU_SOURCE
#include "client/replay.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/audio_write.h"
#include "client/client.h"
#include "util/errmsg.h"

/* What the stream has set up and brought. */
typedef struct player {
    mt_frame_decoder *dec;
    mt_hello          fmt;      /* from the first HELLO or ACCEPT */
    int               have_fmt, ended;
    int16_t          *pcm;      /* [fmt.frame_samples]: one frame */
    mt_audio_writer  *w;        /* -o, or */
    mt_player        *pl;       /* the sound device */
    uint64_t          frames, filled;
    mt_pctl           srv;      /* t_ready - t_arrive of the frames not filled */
} player;

/* The first HELLO/ACCEPT: the format, and the sink that plays it. */
static int play_format(const mt_replay_cfg *c, player *p, const mt_frame *f,
                       char *err, size_t errlen)
{
    mt_hello *fmt = &p->fmt;
    if (mt_hello_decode(f->payload, f->length, fmt) != 0 ||
        fmt->sample_rate < 1 || fmt->frame_samples < 1 ||
        fmt->frame_samples > MT_FRAME_MAX_PAYLOAD / 2 || fmt->channels > 1) {
        mt_set_err(err, errlen, "malformed %s on stdin", mt_frame_type_name(f->type));
        return -1;
    }
    p->have_fmt = 1;
    p->pcm = mt_calloc_or_err(fmt->frame_samples, sizeof *p->pcm, err, errlen, NULL);
    if (!p->pcm)
        return -1;
    if (!c->out_pattern)
        return mt_player_open((int)fmt->sample_rate, (int)fmt->frame_samples,
                              &p->pl, err, errlen);
    if (!strcmp(c->out_pattern, "-"))
        return mt_audio_writer_open_fd(1, "stdout", c->type_fmt, (int)fmt->sample_rate,
                                       &p->w, err, errlen);
    return mt_audio_writer_open(c->out_pattern, (int)fmt->sample_rate, &p->w, err, errlen);
}

/* An AUDIO frame (FILL as silence) to the sink, counted. */
static int play_audio(player *p, const mt_frame *f, char *err, size_t errlen)
{
    uint32_t fs = p->fmt.frame_samples;
    if (!p->have_fmt) {
        mt_set_err(err, errlen, "AUDIO before HELLO/ACCEPT on stdin");
        return -1;
    }
    int fill = (f->flags & MT_FLAG_FILL) != 0;
    if (!fill && f->length != fs * 2) {
        mt_set_err(err, errlen, "AUDIO frame %u: %u bytes, expected %u", f->seq, f->length, fs * 2);
        return -1;
    }
    for (uint32_t i = 0; i < fs; i++)
        p->pcm[i] = fill ? 0 : (int16_t)(f->payload[2 * i] | (f->payload[2 * i + 1] << 8));
    p->frames++;
    p->filled += fill;
    if (!fill && f->t_arrive && f->t_ready >= f->t_arrive)
        mt_pctl_add(&p->srv, f->t_ready - f->t_arrive);
    if (p->w && mt_audio_writer_write(p->w, p->pcm, fs, err, errlen) != 0)
        return -1;
    if (p->pl && mt_player_write(p->pl, p->pcm, fs, err, errlen) != 0)
        return -1;
    return 0;
}

static int play_frame(const mt_replay_cfg *c, player *p, const mt_frame *f,
                      char *err, size_t errlen)
{
    switch (f->type) {
    case MT_FRAME_HELLO:
    case MT_FRAME_ACCEPT:
        return p->have_fmt ? 0 : play_format(c, p, f, err, errlen);
    case MT_FRAME_AUDIO:
        return play_audio(p, f, err, errlen);
    case MT_FRAME_END:
        p->ended = 1;
        return 0;
    case MT_FRAME_REJECT:
    case MT_FRAME_ERROR: {
        int len = (int)(f->length > MT_REASON_MAX ? MT_REASON_MAX : f->length);
        mt_set_err(err, errlen, "%s on stdin: %.*s", mt_frame_type_name(f->type),
                 len, (const char *)f->payload);
        return -1;
    }
    default:
        return 0;
    }
}

/* Reads and plays stdin's frames up to END (0), or a stop (0, not
 * ended); -1 with err on a read error, a bad frame or a stream that ends
 * without END. */
static int play_stream(const mt_replay_cfg *c, player *p, char *err, size_t errlen)
{
    uint8_t buf[65536];
    while (!p->ended && !(c->stop && *c->stop)) {
        ssize_t n = read(0, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            mt_set_err(err, errlen, "read stdin: %s", strerror(errno));
            return -1;
        }
        if (n == 0) {
            mt_set_err(err, errlen, "frame stream on stdin ended %s",
                     mt_frame_decoder_finish(p->dec) ? "inside a frame (truncated)"
                                                     : "without END");
            return -1;
        }
        size_t off = 0;
        while (off < (size_t)n && !p->ended) {
            size_t used = 0;
            mt_frame f;
            int r = mt_frame_decode(p->dec, buf + off, (size_t)n - off, &used, &f);
            off += used;
            if (r == MT_FRAME_NEED_MORE)
                break;
            if (r < 0) {
                mt_set_err(err, errlen, "bad frame on stdin: %s", mt_frame_strerror(r));
                return -1;
            }
            if (play_frame(c, p, &f, err, errlen) != 0)
                return -1;
        }
    }
    return 0;
}

int mt_replay_playback(const mt_replay_cfg *c, mt_replay_play *rec, char *err,
                   size_t errlen)
{
    static mt_frame_decoder dec;
    static player p;
    mt_frame_decoder_init(&dec);
    memset(&p, 0, sizeof p);
    memset(rec, 0, sizeof *rec);
    p.dec = &dec;
    mt_pctl_reset(&p.srv);
    int rc = play_stream(c, &p, err, errlen);
    if (rc == 0 && !p.ended) {
        mt_set_err(err, errlen, "interrupted");
        rc = -1;
    }
    mt_audio_writer *w = p.w;
    p.w = NULL;
    if (rc == 0 && w && mt_audio_writer_commit(w, err, errlen) != 0)
        rc = -1;
    else if (rc != 0)
        mt_audio_writer_abort(w);
    mt_player_close(p.pl);
    free(p.pcm);
    rec->frames = p.frames;
    rec->filled = p.filled;
    rec->samples = p.frames * (p.have_fmt ? p.fmt.frame_samples : 0);
    rec->server_p50_ms = (double)mt_pctl_quantile(&p.srv, 0.5) / 1e6;
    rec->server_p99_ms = (double)mt_pctl_quantile(&p.srv, 0.99) / 1e6;
    return rc;
}
