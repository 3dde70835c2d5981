/* ws_client.h: mt_client's sessions to a server that speaks Kyutai's
 * WebSocket chat protocol (ws://HOST:PORT/PATH, rust/protocol.md) instead
 * of mt-frame(5).
 *
 * A connection is a bridge: the caller gets one end of a socketpair that
 * speaks mt-frame exactly as a server would (HELLO in; ACCEPT or REJECT
 * out; AUDIO both ways; END), and a thread of its own carries it over the
 * WebSocket: the HTTP upgrade with a random Sec-WebSocket-Key checked
 * against the server's Accept, masked client frames, PCM frames encoded
 * to one Ogg Opus page each, the server's pages decoded back to frames.
 * Kyutai's server answers every input frame with one audio page, in
 * order; the bridge turns the n-th page into the answer to input seq n,
 * so the client's accounting (a frame is met only if audio came back by
 * its deadline) is the same as over mt-frame, measured on the client's
 * clock. The handshake message is the ACCEPT (24 kHz, 1920-sample
 * frames, mono); an Error message before it the REJECT with its text;
 * a Text message a WORDS frame (mt-frame(5)) with the seq of the last
 * answer, as Kyutai's server sends a step's text after its audio. Library
 * code: nothing printed.
 */
#ifndef MT_WS_CLIENT_H
#define MT_WS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#define MT_WS_URL_PREFIX "ws://"

/* 1 when spec is a ws:// URL. */
int mt_ws_client_is_url(const char *spec);
/* A ws:// URL whose path is Kyutai's speech-to-text endpoint
 * (/api/asr-streaming, with or without a query): spoken in its protocol. */
int mt_ws_client_is_asr_url(const char *spec);

/* Starts the bridge for url: returns the caller's end of the pair
 * (non-blocking, close-on-exec), or -1 with err. The upgrade happens when
 * the HELLO arrives; its failures come back as a REJECT or ERROR. */
int mt_ws_client_connect(const char *url, int timeout_ms, char *err, size_t errlen);

/* A client frame (FIN, masked with mask) of op with payload p[0..n) into
 * out[0..cap): its length, or -1 when cap is short (n + 14 is enough). */
long mt_ws_client_frame(int op, const uint8_t *p, size_t n,
                        const uint8_t mask[4], uint8_t *out, size_t cap);

/* The server's side of a connection, from memory: p[0..n) read as server
 * frames (unmasked; fragments joined; control frames FIN and at most 125
 * bytes; a message at most 1 MiB) exactly as the bridge reads them, each
 * whole message or close handed to on_msg. 0 at a close frame, -1 with
 * why at the first violation or where the bytes end (a ping ends it too:
 * there is nowhere to send the pong). */
int mt_ws_client_scan(const uint8_t *p, size_t n,
                      void (*on_msg)(void *ctx, int op, const uint8_t *m, size_t len),
                      void *ctx, char *why, size_t whylen);

#endif
