/* oggopus.h: Opus in Ogg (RFC 7845) both ways, for the --ws endpoint
 * (Kyutai's protocol carries audio as Ogg pages of Opus): a decoder from
 * any cut of an Ogg Opus byte stream to fixed PCM frames at the model's
 * rate, and an encoder from such frames to one Ogg page each.
 * libopus and libogg do the codec and the paging; this file checks what
 * they are given.
 *
 * Decoder: one logical stream, ID header (OpusHead: version 0.x, 1 or 2
 * channels, mapping family 0) then comment header (OpusTags), then audio;
 * decoded to mono at the decoder's rate whatever the stream's input rate
 * (a stereo stream is downmixed by libopus); the pre-skip dropped unless
 * told (mt_oggopus_dec_keep_preskip). A
 * stream that is not Ogg, not Opus, a second stream, a corrupt or empty
 * packet, a packet over MT_OGGOPUS_PACKET_MAX, audio past the limit:
 * -1 with a message, and the decoder is dead.
 */
#ifndef MT_OGGOPUS_H
#define MT_OGGOPUS_H

#include <stddef.h>
#include <stdint.h>

typedef struct mt_oggopus_dec mt_oggopus_dec;

/* rate: 8000, 12000, 16000, 24000 or 48000; frame: samples per frame
 * handed to on_frame (pcm[frame], mono s16). */
int  mt_oggopus_dec_create(int rate, int frame,
                           void (*on_frame)(void *ctx, const int16_t *pcm),
                           void *ctx, mt_oggopus_dec **out, char *err,
                           size_t errlen);
void mt_oggopus_dec_free(mt_oggopus_dec *d);
/* Keeps the pre-skip samples (call before the first feed): the audio
 * then starts with the encoder's lookahead (a few ms), and a stream of one
 * frame a page gives each frame as its page arrives; dropping them, each
 * frame would wait for the next page, one frame period late. */
void mt_oggopus_dec_keep_preskip(mt_oggopus_dec *d);
/* The most samples (at the decoder's rate) the stream may have decoded,
 * all told; a packet that would pass it is refused undecoded (-1, dead).
 * 0: no limit. The caller moves it with the clock (real time plus an
 * allowance). */
void mt_oggopus_dec_limit(mt_oggopus_dec *d, int64_t samples);
/* The largest Ogg packet taken (RFC 6716's largest Opus packet is 48
 * frames of 1275 bytes, 61,200 and a few): one continued past it, page
 * after page, is refused as soon as its pages pass it. A page is at most
 * 65,307 bytes (Ogg's own format), and 256 KiB without a page is refused
 * as not Ogg: what one decoder holds is bounded by these. */
#define MT_OGGOPUS_PACKET_MAX 65536
/* Feeds n bytes of the stream (any cut); calls on_frame for every whole
 * frame decoded. 0, or -1 with err (sticky). */
int  mt_oggopus_dec_feed(mt_oggopus_dec *d, const uint8_t *p, size_t n,
                         char *err, size_t errlen);

typedef struct mt_oggopus_enc mt_oggopus_enc;

/* frame: samples per frame at rate, a multiple of 2.5 ms (packets of
 * 20 ms where it divides, else the largest that does). */
int  mt_oggopus_enc_create(int rate, int frame, uint32_t serial,
                           mt_oggopus_enc **out, char *err, size_t errlen);
void mt_oggopus_enc_free(mt_oggopus_enc *e);
/* The two header pages (OpusHead, OpusTags) into out[0..cap). Their
 * length, or -1 with err. */
long mt_oggopus_enc_headers(mt_oggopus_enc *e, uint8_t *out, size_t cap,
                            char *err, size_t errlen);
/* One frame (pcm[frame]) as one Ogg page into out[0..cap): its length,
 * or -1 with err. MT_OGGOPUS_PAGE_MAX is always enough. */
#define MT_OGGOPUS_PAGE_MAX (27 + 255 + 255 * 255)
long mt_oggopus_enc_frame(mt_oggopus_enc *e, const int16_t *pcm, uint8_t *out,
                          size_t cap, char *err, size_t errlen);

#endif
