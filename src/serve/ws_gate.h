/* ws_gate.h: mt-serve's --ws endpoint: Kyutai's WebSocket chat protocol
 * (rust/protocol.md in kyutai-labs/moshi) on path /api/chat, in front of
 * the server's own frame socket.
 *
 * Each WebSocket client becomes one frame-stream session of this server:
 * the gate connects to the server's Unix socket, sends HELLO with the
 * engine's format, and translates both ways: Audio messages (Ogg pages of
 * Opus) are decoded to PCM frames at the model's rate and sent as AUDIO
 * frames; the server's AUDIO frames (FILL included) are encoded as one Ogg
 * page each and sent as Audio messages; the ids of its TEXT frames are
 * spelt by text_piece and sent as Text messages, one a token, after the
 * audio they go with (ids without text skipped). Admission, the controller, drain,
 * shedding, the latency lines and the metrics are the server's, unchanged:
 * the gate is one more client of it. Audio a client sends before the
 * verdict waits for it (up to 64 frames; more is refused with an Error). ACCEPT becomes the Handshake message
 * (protocol version 0, model version 0) then the Ogg header pages;
 * REJECT and ERROR become an Error message with the reason, then a close;
 * END a close.
 *
 * A thread of its own with one poll loop. Every client is hostile: the
 * upgrade request is bounded (wire/http.h), messages are bounded
 * (MT_WS_GATE_MSG_MAX), the Ogg/Opus input is checked (wire/oggopus.h), a
 * client that does not read is dropped (logged, with the reason) when its
 * queue makes no progress for write_timeout_ns or passes out_max, and
 * the upgrade has a deadline; when every slot is taken, the oldest idle
 * connection (still upgrading, held for its 401, waiting for the verdict,
 * or upgraded without audio for 2 s) makes room for a new one, and one
 * address's idle connections past max_per_addr make room for its newer
 * ones. A session's audio may run 10 s ahead of real time at most (past
 * it, refused undecoded: an Ogg bomb costs no more); a wrong token is
 * answered after the doubling wait of guard.h; an END from the server (a
 * drain) is close 1001 with the reason. Every limit is in one block at
 * the top of ws_gate.c and in mt-serve(1).
 *
 * Auth follows --listen: with a token, the upgrade must carry it (the
 * kyutai-api-key header or the auth_id query parameter, as Kyutai's
 * clients send it, or worker_auth_id, as their web client does); off
 * loopback a token (or insecure) is required.
 *
 * With a speech-to-text model (opts.asr), /api/asr-streaming speaks Kyutai's
 * streaming speech-to-text protocol instead (serve/asr_session.h): the same
 * upgrade, authentication and server session, MessagePack messages.
 */
#ifndef MT_WS_GATE_H
#define MT_WS_GATE_H

#include <stddef.h>
#include <stdint.h>

#define MT_WS_GATE_MSG_MAX (256 * 1024)   /* bytes of one client message */
#define MT_WS_PROTOCOL_VERSION 0u
#define MT_WS_MODEL_VERSION    0u

typedef struct mt_ws_gate_opts {
    const char *addr;          /* HOST:PORT */
    const char *server;        /* the server's Unix socket path */
    const char *token;         /* required at the upgrade; NULL: none */
    size_t      token_len;
    int         insecure;      /* allow a non-loopback addr without one */
    int         rate;          /* the engine's format: sample rate, */
    int         frame_samples; /* samples per frame (mono), */
    const char *model;         /* model name for HELLO */
    int         max_conns;     /* 0: 64 (--ws-max-conns) */
    int         max_per_addr;  /* idle connections of one peer address
                                  (upgrading, held, waiting for the
                                  verdict, or silent): past it, its own
                                  oldest makes room; 0: max_conns / 2 */
    uint64_t    upgrade_timeout_ns; /* 0: 10 s */
    size_t      out_max;       /* bytes queued to one client; 0: 1 MiB */
    uint64_t    write_timeout_ns; /* output queued with no progress this
                                     long: the client does not read, it is
                                     dropped (as --write-timeout); 0: 2 s */
    int         sndbuf;        /* SO_SNDBUF of a client socket; 0: 16 KiB
                                  (a few seconds of pages, so that a client
                                  that stops reading is seen soon) */
    /* Kyutai's Text messages: the UTF-8 text of a text token id (the ids
     * of the server's TEXT frames), NULL for an id shown as none (padding,
     * control). NULL text_piece: no Text messages (no tokenizer to spell
     * the ids). Called on the gate's thread. */
    const char *(*text_piece)(void *ctx, int id);
    void       *text_ctx;
    /* Kyutai's streaming speech-to-text on /api/asr-streaming
     * (serve/asr_session.h), for a text-only model: asr 1, and its
     * asr_delay_in_tokens. 0: that path answers 404. */
    int         asr, asr_delay;
    void      (*log)(void *ctx, const char *msg);
    void       *log_ctx;
    /* --static DIR (serve/static_http.h): other paths than the chat's
     * answered from these files, GET/HEAD, without the token (they are
     * the client, not the conversation); NULL: 404. Not owned. */
    struct mt_static *static_files;
} mt_ws_gate_opts;

typedef struct mt_ws_gate mt_ws_gate;

/* Binds addr and starts the thread. bound gets the address as bound.
 * 0, or -1 with err. */
int  mt_ws_gate_start(const mt_ws_gate_opts *o, mt_ws_gate **out, char *bound,
                      size_t boundcap, char *err, size_t errlen);
void mt_ws_gate_stop(mt_ws_gate *g);

#endif
