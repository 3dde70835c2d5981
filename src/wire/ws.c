/* ws.c: the WebSocket frame reader and writer (see ws.h). */
#include "wire/ws.h"

#include <stdio.h>
#include <string.h>

#include <nettle/base64.h>
#include <nettle/sha1.h>

#include "util/utf8.h"

void mt_ws_reader_init(mt_ws_reader *r, uint8_t *msg, size_t cap)
{
    memset(r, 0, sizeof *r);
    r->msg = msg;
    r->cap = cap;
}

static int fail(mt_ws_reader *r, int code, const char *why)
{
    r->error = code;
    snprintf(r->why, sizeof r->why, "%s", why);
    return code;
}

/* Bytes of header needed so far: 2, then + extended length + mask. */
static size_t header_size(const uint8_t *h)
{
    int l7 = h[1] & 0x7f;
    return 2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0) + 4;
}

/* The header is whole: checks it and starts the payload. 0, or an error. */
static int begin_frame(mt_ws_reader *r)
{
    const uint8_t *h = r->hdr;
    if (h[0] & 0x70)
        return fail(r, MT_WS_EPROTO, "reserved bits set");
    if (!(h[1] & 0x80))
        return fail(r, MT_WS_EPROTO, "client frame not masked");
    r->fin = (h[0] & 0x80) != 0;
    r->op = h[0] & 0x0f;
    int l7 = h[1] & 0x7f;
    uint64_t len = (uint64_t)l7;
    size_t at = 2;
    if (l7 == 126) {
        len = (uint64_t)h[2] << 8 | h[3];
        at = 4;
        if (len < 126)
            return fail(r, MT_WS_EPROTO, "length not in its shortest form");
    } else if (l7 == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | h[2 + i];
        at = 10;
        if (len >> 63)
            return fail(r, MT_WS_EPROTO, "length with its top bit set");
        if (len < 65536)
            return fail(r, MT_WS_EPROTO, "length not in its shortest form");
    }
    memcpy(r->mask, h + at, 4);
    if (r->op >= 0x8) {
        if (r->op > MT_WS_PONG)
            return fail(r, MT_WS_EPROTO, "unknown control opcode");
        if (!r->fin || len > 125)
            return fail(r, MT_WS_EPROTO, "fragmented or long control frame");
        r->ctl_len = 0;
    } else if (r->op == MT_WS_CONT) {
        if (!r->msg_op)
            return fail(r, MT_WS_EPROTO, "continuation outside a message");
    } else if (r->op == MT_WS_TEXT || r->op == MT_WS_BINARY) {
        if (r->msg_op)
            return fail(r, MT_WS_EPROTO, "new message inside a fragmented one");
        r->msg_op = r->op;
        r->len = 0;
    } else {
        return fail(r, MT_WS_EPROTO, "unknown data opcode");
    }
    if (r->op < 0x8 && len > r->cap - r->len)
        return fail(r, MT_WS_ETOOBIG, "message too large");
    r->left = len;
    r->off = 0;
    r->in_payload = 1;
    return 0;
}

/* RFC 6455 text: UTF-8, where NUL is a character (mt_utf8_valid refuses
 * it, so the runs between NULs are checked). */
static int text_valid(const uint8_t *p, size_t n)
{
    while (n > 0) {
        const uint8_t *z = memchr(p, 0, n);
        size_t k = z ? (size_t)(z - p) : n;
        if (k && !mt_utf8_valid(p, k))
            return 0;
        if (!z)
            return 1;
        p += k + 1;
        n -= k + 1;
    }
    return 1;
}

/* RFC 6455 7.4: the codes a peer may send in a close frame (1000-1003,
 * 1007-1014, 3000-4999); 1004-1006, 1015 and the rest are not. */
static int close_code_valid(unsigned code)
{
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

/* A close frame's payload: none, or a valid code with a UTF-8 reason. */
static int check_close(mt_ws_reader *r)
{
    if (r->ctl_len == 0)
        return 0;
    if (r->ctl_len == 1)
        return fail(r, MT_WS_EPROTO, "close frame with a one-byte payload");
    if (!close_code_valid((unsigned)(r->ctl[0] << 8 | r->ctl[1])))
        return fail(r, MT_WS_EPROTO, "invalid close code");
    if (!text_valid(r->ctl + 2, r->ctl_len - 2))
        return fail(r, MT_WS_EDATA, "close reason not UTF-8");
    return 0;
}

/* The frame's payload is whole: a message to hand out, or not yet. */
static int end_frame(mt_ws_reader *r, mt_ws_msg *out)
{
    r->in_payload = 0;
    r->hlen = 0;
    if (r->op >= 0x8) {
        if (r->op == MT_WS_CLOSE && check_close(r) != 0)
            return r->error;
        out->op = r->op;
        out->data = r->ctl;
        out->len = r->ctl_len;
        return MT_WS_MESSAGE;
    }
    if (!r->fin)
        return MT_WS_NEED_MORE;
    if (r->msg_op == MT_WS_TEXT && !text_valid(r->msg, r->len))
        return fail(r, MT_WS_EDATA, "text message not UTF-8");
    out->op = r->msg_op;
    out->data = r->msg;
    out->len = r->len;
    r->msg_op = 0;
    r->done = 1;
    return MT_WS_MESSAGE;
}

int mt_ws_read(mt_ws_reader *r, const uint8_t *buf, size_t len,
               size_t *consumed, mt_ws_msg *out)
{
    size_t i = 0;
    *consumed = 0;
    if (r->error)
        return r->error;
    if (r->done) {   /* the message handed out last time is over */
        r->done = 0;
        r->len = 0;
    }
    while (i < len || (r->in_payload && r->left == 0)) {
        if (!r->in_payload) {
            r->hdr[r->hlen++] = buf[i++];
            if (r->hlen == 2 && !(r->hdr[1] & 0x80)) {   /* at once */
                *consumed = i;
                return fail(r, MT_WS_EPROTO, "client frame not masked");
            }
            if (r->hlen < 2 || r->hlen < header_size(r->hdr))
                continue;
            int rc = begin_frame(r);
            if (rc != 0) {
                *consumed = i;
                return rc;
            }
            if (r->left > 0)
                continue;
        }
        size_t n = len - i;
        if (n > r->left)
            n = (size_t)r->left;
        uint8_t *dst = r->op >= 0x8 ? r->ctl + r->ctl_len : r->msg + r->len;
        for (size_t k = 0; k < n; k++)
            dst[k] = buf[i + k] ^ r->mask[(r->off + k) & 3];
        if (r->op >= 0x8)
            r->ctl_len += n;
        else
            r->len += n;
        r->off += n;
        r->left -= n;
        i += n;
        if (r->left == 0) {
            int rc = end_frame(r, out);
            if (rc != MT_WS_NEED_MORE) {
                *consumed = i;
                return rc;
            }
        }
    }
    *consumed = i;
    return MT_WS_NEED_MORE;
}

size_t mt_ws_header(int op, size_t len, uint8_t out[10])
{
    out[0] = (uint8_t)(0x80 | (op & 0x0f));
    if (len < 126) {
        out[1] = (uint8_t)len;
        return 2;
    }
    if (len < 65536) {
        out[1] = 126;
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        return 4;
    }
    out[1] = 127;
    for (int i = 0; i < 8; i++)
        out[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
    return 10;
}

int mt_ws_accept_key(const char *key, char out[29])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    size_t n = strlen(key);
    if (n != 24 || key[22] != '=' || key[23] != '=')
        return -1;
    for (size_t i = 0; i < 22; i++) {
        char c = key[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '+' || c == '/'))
            return -1;
    }
    char cat[24 + sizeof guid];
    memcpy(cat, key, 24);
    memcpy(cat + 24, guid, sizeof guid);
    /* SHA-1 and base64 from nettle: a well-kept library, not ours to write */
    uint8_t d[SHA1_DIGEST_SIZE];
    struct sha1_ctx ctx;
    sha1_init(&ctx);
    sha1_update(&ctx, 24 + sizeof guid - 1, (const uint8_t *)cat);
    sha1_digest(&ctx, sizeof d, d);
    base64_encode_raw(out, sizeof d, d);
    out[BASE64_ENCODE_RAW_LENGTH(sizeof d)] = '\0';
    return 0;
}
