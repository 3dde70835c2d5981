/* oggopus.c: Ogg Opus decoding and encoding over libogg and libopus (see
 * oggopus.h). */
#include "wire/oggopus.h"

#include <ogg/ogg.h>
#include <opus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errmsg.h"

#define MAX_PACKET_MS   120                /* the longest Opus packet */
#define SYNC_LIMIT      (256 * 1024)       /* bytes without a page: not Ogg */
#define PACKET_MAX_TEXT "65536 bytes"      /* MT_OGGOPUS_PACKET_MAX, said */

struct mt_oggopus_dec {
    int              rate, frame;
    void           (*on_frame)(void *ctx, const int16_t *pcm);
    void            *ctx;
    ogg_sync_state   sync;
    ogg_stream_state st;
    int              have_stream;
    long             serial;
    int              packets;         /* packets seen: 0 head, 1 tags */
    OpusDecoder     *opus;
    int              skip;            /* pre-skip samples still to drop */
    int              keep_preskip;    /* mt_oggopus_dec_keep_preskip */
    size_t           unpaged;         /* bytes fed since the last page */
    int              dead;
    char             why[160];
    int16_t         *pcm;             /* [frame + rate * 120 / 1000]: what
                                         is decoded, not yet a whole frame */
    int              npcm;
    int64_t          decoded;         /* samples decoded, all told */
    int64_t          limit;           /* mt_oggopus_dec_limit; 0: none */
};

static int valid_rate(int r)
{
    return r == 8000 || r == 12000 || r == 16000 || r == 24000 || r == 48000;
}

int mt_oggopus_dec_create(int rate, int frame,
                          void (*on_frame)(void *ctx, const int16_t *pcm),
                          void *ctx, mt_oggopus_dec **out, char *err,
                          size_t errlen)
{
    *out = NULL;
    if (!valid_rate(rate) || frame <= 0 || frame > rate * 10 || !on_frame) {
        mt_set_err(err, errlen, "ogg opus: rate %d or frame %d not servable", rate, frame);
        return -1;
    }
    mt_oggopus_dec *d = mt_calloc_or_err(1, sizeof *d, err, errlen, "ogg opus");
    if (!d)
        return -1;
    d->rate = rate;
    d->frame = frame;
    d->on_frame = on_frame;
    d->ctx = ctx;
    d->pcm = malloc(sizeof *d->pcm * (size_t)(frame + rate * MAX_PACKET_MS / 1000));
    int oe = 0;
    d->opus = opus_decoder_create(rate, 1, &oe);
    if (!d->pcm || !d->opus || ogg_sync_init(&d->sync) != 0) {
        mt_set_err(err, errlen, "ogg opus: decoder: %s", d->opus ? "out of memory"
                   : opus_strerror(oe));
        mt_oggopus_dec_free(d);
        return -1;
    }
    *out = d;
    return 0;
}

void mt_oggopus_dec_free(mt_oggopus_dec *d)
{
    if (!d)
        return;
    ogg_sync_clear(&d->sync);
    if (d->have_stream)
        ogg_stream_clear(&d->st);
    if (d->opus)
        opus_decoder_destroy(d->opus);
    free(d->pcm);
    free(d);
}

static int die(mt_oggopus_dec *d, const char *why)
{
    d->dead = 1;
    snprintf(d->why, sizeof d->why, "%s", why);
    return -1;
}

static uint16_t le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* RFC 7845 5.1: the ID header. */
static int id_header(mt_oggopus_dec *d, const ogg_packet *op)
{
    const unsigned char *p = op->packet;
    if (op->bytes < 19 || memcmp(p, "OpusHead", 8) != 0)
        return die(d, "not an Opus stream (no OpusHead)");
    if ((p[8] & 0xf0) != 0)
        return die(d, "OpusHead: unsupported version");
    if (p[9] < 1 || p[9] > 2)
        return die(d, "OpusHead: only mono or stereo streams are served");
    if (p[18] != 0)
        return die(d, "OpusHead: only channel mapping family 0 is served");
    /* pre-skip counts 48 kHz samples */
    d->skip = d->keep_preskip ? 0 : (int)((long)le16(p + 10) * d->rate / 48000);
    return 0;
}

void mt_oggopus_dec_keep_preskip(mt_oggopus_dec *d)
{
    d->keep_preskip = 1;
}

void mt_oggopus_dec_limit(mt_oggopus_dec *d, int64_t samples)
{
    d->limit = samples;
}

/* One audio packet, decoded; whole frames handed on. Its length is known
 * before the work (the TOC byte says it): past the caller's limit it is
 * refused undecoded, so that a message of tiny packets (each up to 120 ms
 * of audio) costs no more than the audio it is allowed. */
static int audio_packet(mt_oggopus_dec *d, const ogg_packet *op)
{
    int room = d->rate * MAX_PACKET_MS / 1000;
    if (op->bytes <= 0)
        return die(d, "an empty Opus packet (RFC 6716 3.4: at least one byte)");
    int len = opus_packet_get_nb_samples(op->packet, (opus_int32)op->bytes, d->rate);
    if (len < 0)
        return die(d, "corrupt Opus packet");
    if (d->limit && d->decoded + len > d->limit)
        return die(d, "audio faster than real time (more than the session's "
                   "allowance ahead)");
    int n = opus_decode(d->opus, op->packet, (opus_int32)op->bytes, d->pcm + d->npcm,
                        room, 0);
    if (n < 0)
        return die(d, "corrupt Opus packet");
    d->decoded += n;
    int drop = n < d->skip ? n : d->skip;
    if (drop > 0) {
        memmove(d->pcm + d->npcm, d->pcm + d->npcm + drop, sizeof *d->pcm * (size_t)(n - drop));
        d->skip -= drop;
        n -= drop;
    }
    d->npcm += n;
    int at = 0;
    while (d->npcm - at >= d->frame) {
        d->on_frame(d->ctx, d->pcm + at);
        at += d->frame;
    }
    if (at > 0) {
        memmove(d->pcm, d->pcm + at, sizeof *d->pcm * (size_t)(d->npcm - at));
        d->npcm -= at;
    }
    return 0;
}

static int page(mt_oggopus_dec *d, ogg_page *pg)
{
    long serial = ogg_page_serialno(pg);
    if (!d->have_stream) {
        if (!ogg_page_bos(pg))
            return die(d, "Ogg stream does not begin with a first page");
        if (ogg_stream_init(&d->st, (int)serial) != 0)
            return die(d, "Ogg: out of memory");
        d->have_stream = 1;
        d->serial = serial;
    } else if (serial != d->serial) {
        return die(d, "a second Ogg logical stream (chained or multiplexed)");
    }
    if (ogg_stream_pagein(&d->st, pg) != 0)
        return die(d, "Ogg page rejected");
    ogg_packet op;
    int rc;
    while ((rc = ogg_stream_packetout(&d->st, &op)) != 0) {
        if (rc < 0)
            return die(d, "Ogg: pages missing in the stream");
        if (op.bytes > MT_OGGOPUS_PACKET_MAX)
            return die(d, "an Ogg packet over " PACKET_MAX_TEXT);
        if (d->packets == 0 && id_header(d, &op) != 0)
            return -1;
        if (d->packets == 1 && (op.bytes < 8 || memcmp(op.packet, "OpusTags", 8) != 0))
            return die(d, "Opus stream without OpusTags");
        if (d->packets >= 2 && audio_packet(d, &op) != 0)
            return -1;
        if (d->packets < 2)
            d->packets++;
    }
    /* a packet continued page after page (lacing 255) waits whole in the
     * stream state: bounded here, not by the memory of the machine */
    if (d->st.body_fill - d->st.body_returned > MT_OGGOPUS_PACKET_MAX)
        return die(d, "an Ogg packet over " PACKET_MAX_TEXT " (continued page "
                   "after page)");
    return 0;
}

int mt_oggopus_dec_feed(mt_oggopus_dec *d, const uint8_t *p, size_t n,
                        char *err, size_t errlen)
{
    while (!d->dead && n > 0) {
        size_t chunk = n > 65536 ? 65536 : n;
        char *buf = ogg_sync_buffer(&d->sync, (long)chunk);
        if (!buf) {
            die(d, "Ogg: out of memory");
            break;
        }
        memcpy(buf, p, chunk);
        if (ogg_sync_wrote(&d->sync, (long)chunk) != 0) {
            die(d, "Ogg: sync failed");
            break;
        }
        p += chunk;
        n -= chunk;
        d->unpaged += chunk;
        ogg_page pg;
        int rc;
        while (!d->dead && (rc = ogg_sync_pageout(&d->sync, &pg)) != 0) {
            if (rc < 0) {
                if (d->have_stream)
                    die(d, "Ogg: bytes lost between pages");
                continue;   /* before the first page: skipped to a capture */
            }
            d->unpaged = 0;
            page(d, &pg);
        }
        if (!d->dead && d->unpaged > SYNC_LIMIT)
            die(d, "not an Ogg stream (no page in 256 KiB)");
    }
    if (d->dead) {
        mt_set_err(err, errlen, "%s", d->why);
        return -1;
    }
    return 0;
}

/* ---- the encoder ----------------------------------------------------------- */

struct mt_oggopus_enc {
    int              rate, frame, packet;   /* samples */
    OpusEncoder     *opus;
    ogg_stream_state st;
    int              st_ok;
    int64_t          granule;               /* 48 kHz samples */
    int64_t          packetno;
    int              preskip;               /* 48 kHz samples */
};

int mt_oggopus_enc_create(int rate, int frame, uint32_t serial,
                          mt_oggopus_enc **out, char *err, size_t errlen)
{
    *out = NULL;
    static const int div[] = {50, 100, 200, 400};   /* 20, 10, 5, 2.5 ms */
    int packet = 0;
    for (int i = 0; valid_rate(rate) && i < 4 && !packet; i++)
        if (frame > 0 && frame % (rate / div[i]) == 0)
            packet = rate / div[i];
    if (!packet) {
        mt_set_err(err, errlen, "ogg opus: a frame of %d samples at %d Hz is not "
                   "a whole number of Opus packets", frame, rate);
        return -1;
    }
    mt_oggopus_enc *e = mt_calloc_or_err(1, sizeof *e, err, errlen, "ogg opus");
    if (!e)
        return -1;
    e->rate = rate;
    e->frame = frame;
    e->packet = packet;
    int oe = 0;
    e->opus = opus_encoder_create(rate, 1, OPUS_APPLICATION_AUDIO, &oe);
    opus_int32 look = 0;
    if (!e->opus || opus_encoder_ctl(e->opus, OPUS_GET_LOOKAHEAD(&look)) != OPUS_OK ||
        ogg_stream_init(&e->st, (int)serial) != 0) {
        mt_set_err(err, errlen, "ogg opus: encoder: %s", e->opus ? "setup failed"
                   : opus_strerror(oe));
        mt_oggopus_enc_free(e);
        return -1;
    }
    e->st_ok = 1;
    e->preskip = (int)((int64_t)look * 48000 / rate);
    *out = e;
    return 0;
}

void mt_oggopus_enc_free(mt_oggopus_enc *e)
{
    if (!e)
        return;
    if (e->opus)
        opus_encoder_destroy(e->opus);
    if (e->st_ok)
        ogg_stream_clear(&e->st);
    free(e);
}

/* Every page libogg has ready (flushed) appended to out. */
static long flush_pages(mt_oggopus_enc *e, uint8_t *out, size_t cap, size_t at,
                        char *err, size_t errlen)
{
    ogg_page pg;
    while (ogg_stream_flush(&e->st, &pg) != 0) {
        size_t n = (size_t)pg.header_len + (size_t)pg.body_len;
        if (n > cap - at) {
            mt_set_err(err, errlen, "ogg opus: page does not fit");
            return -1;
        }
        memcpy(out + at, pg.header, (size_t)pg.header_len);
        memcpy(out + at + pg.header_len, pg.body, (size_t)pg.body_len);
        at += n;
    }
    return (long)at;
}

long mt_oggopus_enc_headers(mt_oggopus_enc *e, uint8_t *out, size_t cap,
                            char *err, size_t errlen)
{
    unsigned char head[19] = {'O', 'p', 'u', 's', 'H', 'e', 'a', 'd', 1, 1};
    head[10] = (unsigned char)(e->preskip & 0xff);
    head[11] = (unsigned char)(e->preskip >> 8);
    uint32_t r = (uint32_t)e->rate;
    for (int i = 0; i < 4; i++)
        head[12 + i] = (unsigned char)(r >> (8 * i));
    /* output gain 0, mapping family 0 */
    static const char vendor[] = "metronome";
    unsigned char tags[8 + 4 + sizeof vendor - 1 + 4];
    memcpy(tags, "OpusTags", 8);
    uint32_t vl = sizeof vendor - 1;
    for (int i = 0; i < 4; i++)
        tags[8 + i] = (unsigned char)(vl >> (8 * i));
    memcpy(tags + 12, vendor, vl);
    memset(tags + 12 + vl, 0, 4);   /* no comments */
    ogg_packet op = {.packet = head, .bytes = sizeof head, .b_o_s = 1,
                     .granulepos = 0, .packetno = e->packetno++};
    if (ogg_stream_packetin(&e->st, &op) != 0)
        goto fail;
    long at = flush_pages(e, out, cap, 0, err, errlen);
    if (at < 0)
        return -1;
    ogg_packet tp = {.packet = tags, .bytes = sizeof tags, .granulepos = 0,
                     .packetno = e->packetno++};
    if (ogg_stream_packetin(&e->st, &tp) != 0)
        goto fail;
    return flush_pages(e, out, cap, (size_t)at, err, errlen);
fail:
    mt_set_err(err, errlen, "ogg opus: header packet refused");
    return -1;
}

long mt_oggopus_enc_frame(mt_oggopus_enc *e, const int16_t *pcm, uint8_t *out,
                          size_t cap, char *err, size_t errlen)
{
    unsigned char pkt[1500];   /* one Opus packet: at most 1275 bytes */
    for (int at = 0; at < e->frame; at += e->packet) {
        opus_int32 n = opus_encode(e->opus, pcm + at, e->packet, pkt, sizeof pkt);
        if (n < 0) {
            mt_set_err(err, errlen, "opus_encode: %s", opus_strerror(n));
            return -1;
        }
        e->granule += (int64_t)e->packet * 48000 / e->rate;
        ogg_packet op = {.packet = pkt, .bytes = n, .granulepos = e->granule,
                         .packetno = e->packetno++};
        if (ogg_stream_packetin(&e->st, &op) != 0) {
            mt_set_err(err, errlen, "ogg opus: packet refused");
            return -1;
        }
    }
    return flush_pages(e, out, cap, 0, err, errlen);
}
