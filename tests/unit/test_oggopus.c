/* test_oggopus.c: Opus in Ogg both ways (src/wire/oggopus.c): what the
 * encoder writes (one page per frame, granule positions in 48 kHz
 * samples) the decoder reads back, fed in any cut, as frames of the same
 * sound (the encoder's lookahead, the pre-skip, costs the last partial
 * frame); and the decoder refuses what is not one Ogg Opus stream. */
#include "wire/oggopus.h"
#include "tap.h"

#include <math.h>
#include <ogg/ogg.h>
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

/* the header pages (hlen bytes of stream, serial 7) then the packets
 * given (sizes[i] bytes each, all zero bytes), paged by libogg: into out,
 * its length; the last page is left out when cut_last (a packet that never
 * ends) */
static size_t with_packets(uint8_t *out, size_t cap, size_t hlen, const long *sizes,
                           int n, int cut_last)
{
    static uint8_t body[1 << 20];
    ogg_stream_state os;
    ogg_stream_init(&os, 7);
    os.pageno = 2;   /* after the two header pages, */
    os.b_o_s = 1;    /* which began the stream */
    memcpy(out, stream, hlen);
    size_t at = hlen;
    for (int i = 0; i < n; i++) {
        ogg_packet op = {.packet = body, .bytes = sizes[i], .granulepos = 960 * (i + 1),
                         .packetno = 2 + i};
        ogg_stream_packetin(&os, &op);
    }
    ogg_page pg;
    size_t last = at;
    while (ogg_stream_flush(&os, &pg) != 0) {
        size_t k = (size_t)(pg.header_len + pg.body_len);
        if (at + k > cap)
            break;
        last = at;
        memcpy(out + at, pg.header, (size_t)pg.header_len);
        memcpy(out + at + pg.header_len, pg.body, (size_t)pg.body_len);
        at += k;
    }
    ogg_stream_clear(&os);
    return cut_last ? last : at;
}

/* like decode, with a limit of `limit` samples */
static int decode_limited(const uint8_t *s, size_t len, int64_t limit, char *err, size_t errlen)
{
    mt_oggopus_dec *d = NULL;
    ngot = 0;
    if (mt_oggopus_dec_create(RATE, FRAME, on_frame, NULL, &d, err, errlen) != 0)
        return -1;
    mt_oggopus_dec_limit(d, limit);
    int rc = mt_oggopus_dec_feed(d, s, len, err, errlen);
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

    /* issue 51: what one decoder holds and decodes is bounded */
    static uint8_t big[2 << 20];
    long one_mb[] = {1 << 20};
    size_t bl = with_packets(big, sizeof big, (size_t)hn, one_mb, 1, 1);
    ok(bl > 1000000 && decode(big, bl, 65536, err, sizeof err) == -1,
       "a packet continued page after page refused: %s", err);
    like(err, "packet over 65536", "... saying it passed the packet bound");
    long empties[4096];
    for (int i = 0; i < 4096; i++)
        empties[i] = 0;
    bl = with_packets(big, sizeof big, (size_t)hn, empties, 4096, 0);
    ok(decode(big, bl, bl, err, sizeof err) == -1 && ngot == 0,
       "a bomb of empty packets refused before any audio: %s", err);
    like(err, "empty Opus packet", "... saying so");
    ok(decode_limited(stream, slen, 5 * FRAME, err, sizeof err) == -1 && ngot <= 5,
       "past the limit the stream is refused, undecoded (%d frames): %s", ngot, err);
    like(err, "faster than real time", "... saying so");
    ok(decode_limited(stream, slen, NF * FRAME + FRAME, err, sizeof err) == 0 && ngot == NF - 1,
       "within the limit every frame");
    return tap_done();
}
