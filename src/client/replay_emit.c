/* replay_emit.c: mt-replay --emit: an input's frame stream (mt-frame(5)) on
 * standard output, paced in real time, with no server. See replay.h.
 */
#define _GNU_SOURCE
#include "client/replay.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "util/clock.h"
#include "util/errmsg.h"
#include "util/io.h"

/* One frame, sent at t_send, onto fd 1. 0, or -1 with err. */
static int emit_frame(int type, uint32_t seq, uint64_t t_send,
                      const uint8_t *payload, uint32_t length,
                      char *err, size_t errlen)
{
    static uint8_t buf[MT_FRAME_MAX_SIZE];
    const mt_frame f = { .version = MT_FRAME_VERSION, .type = (uint8_t)type, .seq = seq,
                         .t_send = t_send, .length = length, .payload = payload };
    long n = mt_frame_encode(&f, buf, sizeof buf);
    if (n < 0) {
        mt_set_err(err, errlen, "encode: %s", mt_frame_strerror((int)n));
        return -1;
    }
    if (mt_write_all(1, buf, (size_t)n) != 0) {
        mt_set_err(err, errlen, "write: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static int stopped(const mt_replay_cfg *c)
{
    return c->stop && *c->stop;
}

static int emit_audio(const mt_replay_cfg *c, mt_source *src, mt_pctl *jit,
                      int16_t *pcm, uint8_t *pay, char *err, size_t errlen)
{
    int fs = (int)c->hello.frame_samples;
    uint64_t period = (uint64_t)fs * 1000000000ull / c->hello.sample_rate;
    uint64_t max_frames = c->duration_s > 0
        ? (uint64_t)(c->duration_s * c->hello.sample_rate / fs + 0.5) : UINT64_MAX;
    uint64_t t0 = mt_clock_ns();
    for (uint32_t seq = 0; seq < max_frames && !stopped(c); seq++) {
        int r = mt_source_frame(src, pcm, (size_t)fs, c->loop, err, errlen);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        uint64_t due = t0 + seq * period;
        while (!c->no_pace && mt_client_sleep_until(due) != 0 && !stopped(c))
            ;
        if (stopped(c))
            break;
        for (int i = 0; i < fs; i++) {
            pay[2 * i] = (uint8_t)((uint16_t)pcm[i]);
            pay[2 * i + 1] = (uint8_t)((uint16_t)pcm[i] >> 8);
        }
        uint64_t now = mt_clock_ns();
        if (!c->no_pace)
            mt_pctl_add(jit, now > due ? now - due : 0);
        if (emit_frame(MT_FRAME_AUDIO, seq, now, pay, (uint32_t)fs * 2, err, errlen) != 0)
            return -1;
    }
    return 0;
}

int mt_replay_emit(const mt_replay_cfg *c, mt_replay_rate *rate, char *err,
                   size_t errlen)
{
    memset(rate, 0, sizeof *rate);
    uint8_t hp[128];
    long hn = mt_hello_encode(&c->hello, hp, sizeof hp);
    if (hn < 0) {
        mt_set_err(err, errlen, "encode HELLO: %s", mt_frame_strerror((int)hn));
        return -1;
    }
    if (emit_frame(MT_FRAME_HELLO, 0, mt_clock_ns(), hp, (uint32_t)hn, err, errlen) != 0)
        return -1;
    size_t fs = c->hello.frame_samples;
    mt_source *src = NULL;
    int16_t *pcm = mt_calloc_or_err(fs, sizeof *pcm, err, errlen, NULL);  /* [fs] */
    uint8_t *pay = pcm ? mt_calloc_or_err(fs, 2, err, errlen, NULL) : NULL;  /* [fs * 2] */
    static mt_pctl jit;
    mt_pctl_reset(&jit);
    int rc = -1;
    if (pay && mt_source_open(c->inputs[0], &src, err, errlen) == 0 &&
        emit_audio(c, src, &jit, pcm, pay, err, errlen) == 0 &&
        emit_frame(MT_FRAME_END, 0, mt_clock_ns(), NULL, 0, err, errlen) == 0)
        rc = 0;
    rate->replay_rate = 1;
    rate->frames = jit.count;
    rate->jitter_p50_ms = (double)mt_pctl_quantile(&jit, 0.5) / 1e6;
    rate->jitter_p99_ms = (double)mt_pctl_quantile(&jit, 0.99) / 1e6;
    rate->jitter_max_ms = (double)jit.max_ns / 1e6;
    rate->jitter_mean_ms = mt_pctl_mean(&jit) / 1e6;
    mt_source_close(src);
    free(pcm);
    free(pay);
    return rc;
}
