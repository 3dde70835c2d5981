/* ws.h: WebSocket (RFC 6455) for mt-serve's --ws endpoint: the
 * handshake's accept key, a strict incremental reader of client frames
 * into whole messages, and the header of a server frame.
 *
 * Client frames must be masked; RSV bits must be 0; control frames are
 * FIN with at most 125 bytes; continuation only inside a fragmented
 * message; a message over the reader's capacity is an error (close 1009),
 * a text message or close reason that is not UTF-8 too (close 1007), a
 * close frame with an invalid code (RFC 6455 7.4) or any other
 * violation too (close 1002). Every byte is hostile: the reader
 * never allocates and never reads past what it was given.
 */
#ifndef MT_WS_H
#define MT_WS_H

#include <stddef.h>
#include <stdint.h>

enum mt_ws_op {
    MT_WS_CONT = 0x0, MT_WS_TEXT = 0x1, MT_WS_BINARY = 0x2,
    MT_WS_CLOSE = 0x8, MT_WS_PING = 0x9, MT_WS_PONG = 0xA,
};

enum mt_ws_status {
    MT_WS_MESSAGE   = 1,  /* *out holds a whole message or control frame */
    MT_WS_NEED_MORE = 0,  /* everything consumed, nothing whole yet */
    MT_WS_EPROTO    = -1, /* a protocol violation (close 1002) */
    MT_WS_ETOOBIG   = -2, /* a message over the capacity (close 1009) */
    MT_WS_EDATA     = -3, /* a text message or close reason that is not
                             UTF-8 (close 1007) */
};

typedef struct mt_ws_msg {
    int            op;    /* MT_WS_TEXT/BINARY (whole message), or a
                             control opcode */
    const uint8_t *data;  /* inside the reader; valid until the next call */
    size_t         len;
} mt_ws_msg;

typedef struct mt_ws_reader {
    uint8_t *msg;         /* [cap]: the message being put together */
    size_t   cap, len;
    int      msg_op;      /* opcode of the fragmented message; 0: none */
    int      done;        /* the last call returned a data message */
    uint8_t  hdr[14];     /* the frame header being read */
    size_t   hlen;
    int      in_payload;  /* the header is read */
    int      op, fin;     /* of the current frame */
    uint64_t left;        /* payload bytes still to read */
    uint8_t  mask[4];
    uint64_t off;         /* payload bytes read (for the mask) */
    uint8_t  ctl[125];    /* a control frame's payload */
    size_t   ctl_len;
    int      error;       /* sticky */
    char     why[96];     /* what the error was */
} mt_ws_reader;

/* msg: the caller's buffer of cap bytes, the largest message accepted. */
void mt_ws_reader_init(mt_ws_reader *r, uint8_t *msg, size_t cap);
/* Consumes buf[0..len): MT_WS_MESSAGE with *out (and *consumed: call
 * again with the rest), MT_WS_NEED_MORE (all consumed), or an error
 * (sticky; r->why says what). */
int mt_ws_read(mt_ws_reader *r, const uint8_t *buf, size_t len,
               size_t *consumed, mt_ws_msg *out);

/* A server frame's header (FIN, unmasked) for a payload of len bytes
 * into out; returns its size (2, 4 or 10). */
size_t mt_ws_header(int op, size_t len, uint8_t out[10]);

/* Sec-WebSocket-Accept for a client's Sec-WebSocket-Key (which must be
 * the base64 of 16 bytes: 24 characters). 0 with out (29 bytes with the
 * NUL), or -1. */
int mt_ws_accept_key(const char *key, char out[29]);

#endif
