/* fuzz_asr_msg.c: libFuzzer harness for the speech-to-text messages
 * (src/wire/asr_msg.c) and the session behind /api/asr-streaming
 * (src/serve/asr_session.c), which read every byte an ASR client sends.
 *
 * The whole input is read as one message: a message read is sane (its
 * samples finite, no more than the room given), and a Marker written back
 * reads as the same id; and as a server message (mt-replay's reader), and
 * as a model's config.json (its stt_config). Then the input is cut into messages (a length
 * byte, then that many bytes; a length byte of 0 is an answer from the
 * model: the next byte its token) and played into a session: whatever it
 * is sent, what it writes is one well-formed out message each time and it
 * never hands the model more frames than the client sent. */
#include "model/stt_config.h"
#include "serve/asr_session.h"
#include "wire/asr_msg.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CAP 4096
static float pcm[CAP];
static uint64_t frames_out, msgs_out;

static const char *piece(void *ctx, int id)
{
    (void)ctx;
    return id % 5 == 1 ? "\xe2\x96\x81w" : id % 5 == 2 ? "\xff" : NULL;
}

static void on_send(void *ctx, const uint8_t *msg, size_t n)
{
    (void)ctx;
    /* every message out is one MessagePack map with a type: a map of 1 to
     * 4 entries starting with the "type" key */
    if (n < 6 || msg[0] < 0x81 || msg[0] > 0x84 || memcmp(msg + 1, "\xa4type", 5) != 0)
        abort();
    msgs_out++;
}

static void on_frame(void *ctx, const int16_t *p)
{
    (void)ctx;
    (void)p;
    frames_out++;
}

static void one_message(const uint8_t *data, size_t size)
{
    mt_asr_in m;
    char why[MT_ASR_WHY_MAX];
    if (mt_asr_in_decode(data, size, &m, pcm, CAP, why, sizeof why) != 0) {
        if (!why[0])
            abort();   /* a refusal always says why */
        return;
    }
    if (m.type == MT_ASR_IN_AUDIO) {
        if (m.n_pcm > CAP)
            abort();
        for (size_t i = 0; i < m.n_pcm; i++)
            if (!isfinite(pcm[i]))
                abort();
    }
    if (m.type == MT_ASR_IN_MARKER) {
        uint8_t b[64];
        mt_asr_out o = { .p = b, .cap = sizeof b };
        mt_asr_out_marker(&o, m.marker_id);
        mt_asr_in back;
        if (o.over || mt_asr_in_decode(b, o.len, &back, pcm, CAP, why, sizeof why) != 0 ||
            back.type != MT_ASR_IN_MARKER || back.marker_id != m.marker_id)
            abort();
    }
}

static void session(const uint8_t *data, size_t size)
{
    mt_asr_sess_opts o = {
        .rate = 200, .frame_samples = 16, .delay = 2, .piece = piece,
        .send = on_send, .frame = on_frame,
    };
    mt_asr_sess *s = mt_asr_sess_new(&o);
    if (!s)
        return;
    frames_out = msgs_out = 0;
    uint64_t samples_in = 0, t = 1;
    uint32_t seq = 0;
    mt_asr_sess_ready(s);
    size_t at = 0;
    while (at < size) {
        size_t len = data[at++];
        if (len == 0) {
            int32_t tok = at < size ? data[at++] % 8 : 0;
            mt_asr_sess_answer(s, seq++, tok == 7, &tok, 1, t++);
            continue;
        }
        if (len > size - at)
            len = size - at;
        char why[MT_ASR_WHY_MAX];
        mt_asr_in m;
        if (mt_asr_in_decode(data + at, len, &m, pcm, CAP, why, sizeof why) == 0 &&
            m.type == MT_ASR_IN_AUDIO)
            samples_in += m.n_pcm;
        if (mt_asr_sess_client(s, data + at, len, t++, why, sizeof why) != 0)
            mt_asr_sess_error(s, why);
        at += len;
    }
    if (frames_out > samples_in / 16)
        abort();
    mt_asr_sess_free(s);
}

/* The same bytes as a server message (mt-replay's side): a message read
 * has a NUL-ended text and a finite time. */
static void server_message(const uint8_t *data, size_t size)
{
    mt_asr_srv m;
    char why[MT_ASR_WHY_MAX];
    if (mt_asr_srv_decode(data, size, &m, why, sizeof why) != 0) {
        if (!why[0])
            abort();
        return;
    }
    if (!memchr(m.text, '\0', sizeof m.text) || !isfinite(m.time))
        abort();
}

/* The same bytes as a model's config.json (its stt_config, read by
 * mt-serve): 0 with delays in 0..60 s and extra heads in 0..1024 of
 * 1..65536 outputs, or -1 naming the file. */
static void stt_config(const uint8_t *data, size_t size)
{
    mt_stt_config c;
    char err[300];
    err[0] = '\0';
    if (mt_stt_config_parse((const char *)data, size, "config.json", &c, err, sizeof err) != 0) {
        if (strncmp(err, "config.json", 11) != 0)
            abort();
        return;
    }
    if (!(c.audio_delay_s >= 0 && c.audio_delay_s <= 60 && c.silence_prefix_s >= 0 &&
          c.silence_prefix_s <= 60 && c.extra_heads >= 0 && c.extra_heads <= 1024 &&
          c.extra_heads_dim >= 1 && c.extra_heads_dim <= 65536))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stt_config(data, size);
    one_message(data, size);
    server_message(data, size);
    session(data, size);
    return 0;
}
