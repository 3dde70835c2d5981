/* test_oggopus.c: Opus in Ogg both ways (src/wire/oggopus.c): what the
 * encoder writes (one page per frame, granule positions in 48 kHz
 * samples) the decoder reads back, fed in any cut, as frames of the same
 * sound (the encoder's lookahead, the pre-skip, costs the last partial
 * frame); and the decoder refuses what is not one Ogg Opus stream. */
#include "wire/oggopus.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RATE  24000
#define FRAME 1920
#define NF    20

static int16_t got[NF * FRAME];
static int ngot;

static void on_frame(void *ctx, const int16_t *pcm)
{
    (void)ctx;
    if (ngot < NF)
        memcpy(got + ngot * FRAME, pcm, sizeof *pcm * FRAME);
    ngot++;
}

static uint8_t stream[NF * MT_OGGOPUS_PAGE_MAX / 8];
static size_t slen;

/* the stream fed in pieces of `step` bytes: 0, or -1 (err) */
static int decode(const uint8_t *s, size_t len, size_t step, char *err, size_t errlen)
{
    mt_oggopus_dec *d = NULL;
    ngot = 0;
    if (mt_oggopus_dec_create(RATE, FRAME, on_frame, NULL, &d, err, errlen) != 0)
        return -1;
    int rc = 0;
    for (size_t at = 0; at < len && rc == 0; at += step)
        rc = mt_oggopus_dec_feed(d, s + at, len - at < step ? len - at : step, err, errlen);
    mt_oggopus_dec_free(d);
    return rc;
}

static int64_t granule(const uint8_t *page)
{
    int64_t g = 0;
    for (int i = 7; i >= 0; i--)
        g = g << 8 | page[6 + i];
    return g;
}

int main(void)
{
    char err[200];
    mt_oggopus_enc *e = NULL;
    ok(mt_oggopus_enc_create(RATE, 1000, 1, &e, err, sizeof err) == -1 && !e && err[0],
       "a frame that is no whole number of packets refused");
    ok(mt_oggopus_enc_create(RATE, FRAME, 7, &e, err, sizeof err) == 0 && e, "encoder for 80 ms frames");
    long n = mt_oggopus_enc_headers(e, stream, sizeof stream, err, sizeof err);
    ok(n > 0 && memcmp(stream, "OggS", 4) == 0, "header pages");
    ok(memcmp(stream + 28, "OpusHead", 8) == 0, "the first page holds OpusHead");
    slen = (size_t)n;
    long hn = n;   /* the header pages' length */
    int16_t pcm[FRAME];
    int pages_ok = 1;
    for (int f = 0; f < NF; f++) {
        for (int i = 0; i < FRAME; i++)
            pcm[i] = (int16_t)(8000 * sin(2 * M_PI * (220 + 20 * f) * (f * FRAME + i) / RATE));
        long m = mt_oggopus_enc_frame(e, pcm, stream + slen, sizeof stream - slen, err, sizeof err);
        pages_ok &= m > 27 && memcmp(stream + slen, "OggS", 4) == 0 &&
                    granule(stream + slen) == (int64_t)(f + 1) * FRAME * 2;
        slen += m > 0 ? (size_t)m : 0;
    }
    ok(pages_ok, "one page per frame, granule position (frame + 1) x 3840");
    mt_oggopus_enc_free(e);

    ok(decode(stream, slen, slen, err, sizeof err) == 0, "decodes: %s", err);
    is_int(ngot, NF - 1, "every frame but the last (its tail is the encoder's lookahead)");
    /* the same sound: a 220 Hz sine at frame 0, louder than 2000 */
    double e0 = 0;
    for (int i = 200; i < FRAME; i++)
        e0 += (double)got[i] * got[i];
    ok(sqrt(e0 / (FRAME - 200)) > 2000, "the decoded frames carry the signal");
    int same = 1, n0 = ngot;
    int16_t ref[FRAME];
    memcpy(ref, got + 5 * FRAME, sizeof ref);
    for (size_t step = 1; step < 400; step += 37) {
        decode(stream, slen, step, err, sizeof err);
        same &= ngot == n0 && memcmp(ref, got + 5 * FRAME, sizeof ref) == 0;
    }
    ok(same, "the same frames whatever the cut");

    static uint8_t junk[300 * 1024];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 2654435761u >> 13);
    ok(decode(junk, sizeof junk, 4096, err, sizeof err) == -1, "garbage refused: %s", err);
    like(err, "not an Ogg stream", "... saying it is not Ogg");

    uint8_t bad[4096];
    memcpy(bad, stream, slen < sizeof bad ? slen : sizeof bad);
    memcpy(bad + 28, "OpusHexd", 8);   /* the CRC no longer matches: not a page */
    ok(decode(bad, sizeof bad, 4096, err, sizeof err) == -1 && ngot == 0,
       "a first page with a bad CRC is skipped, and a stream without it refused: %s", err);
    /* two streams: the header pages twice, the second under another serial */
    mt_oggopus_enc *e2 = NULL;
    mt_oggopus_enc_create(RATE, FRAME, 8, &e2, err, sizeof err);
    uint8_t two[8192];
    long h1 = hn;
    memcpy(two, stream, (size_t)h1);
    long h2 = mt_oggopus_enc_headers(e2, two + h1, sizeof two - (size_t)h1, err, sizeof err);
    mt_oggopus_enc_free(e2);
    ok(h2 > 0 && decode(two, (size_t)(h1 + h2), 8192, err, sizeof err) == -1,
       "a second logical stream refused: %s", err);
    like(err, "second Ogg logical stream", "... saying so");
    /* truncated mid-stream: fine so far, what came is decoded */
    ok(decode(stream, slen / 2, 100, err, sizeof err) == 0 && ngot > 0 && ngot < NF - 1,
       "half a stream: the frames it holds");
    return tap_done();
}
