/* test_ws.c: the WebSocket pieces of --ws: SHA-1 and base64 against
 * published vectors, the handshake's accept key (RFC 6455's own example),
 * and the strict frame reader (src/wire/ws.c): masked frames in any cut,
 * fragmentation with a control frame inside, and each refusal. */
#include "wire/ws.h"
#include "tap.h"

#include <stdio.h>
#include <string.h>

static uint8_t msgbuf[1024];
static mt_ws_reader rd;

/* a masked client frame into out: its length */
static size_t frame(uint8_t *out, int fin, int op, const char *p, size_t n)
{
    static const uint8_t mask[4] = {0x37, 0xfa, 0x21, 0x3d};
    size_t at = 0;
    out[at++] = (uint8_t)((fin ? 0x80 : 0) | op);
    if (n < 126) {
        out[at++] = (uint8_t)(0x80 | n);
    } else {
        out[at++] = 0x80 | 126;
        out[at++] = (uint8_t)(n >> 8);
        out[at++] = (uint8_t)n;
    }
    memcpy(out + at, mask, 4);
    at += 4;
    for (size_t i = 0; i < n; i++)
        out[at + i] = (uint8_t)p[i] ^ mask[i & 3];
    return at + n;
}

/* feeds buf in pieces of `step` bytes; the messages' ops and texts into
 * log ("2:hello|9:|"), the status of the last call returned */
static int feed(const uint8_t *buf, size_t len, size_t step, char *log, size_t cap)
{
    mt_ws_reader_init(&rd, msgbuf, sizeof msgbuf);
    log[0] = '\0';
    int rc = MT_WS_NEED_MORE;
    for (size_t at = 0; at < len;) {
        size_t n = len - at < step ? len - at : step, used = 0;
        mt_ws_msg m;
        rc = mt_ws_read(&rd, buf + at, n, &used, &m);
        if (rc < 0)
            return rc;
        if (rc == MT_WS_MESSAGE) {
            size_t l = strlen(log);
            snprintf(log + l, cap - l, "%d:%.*s|", m.op, (int)m.len, (const char *)m.data);
        }
        at += used;
    }
    return rc;
}

int main(void)
{
    char acc[29];
    is_int(mt_ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", acc), 0, "the RFC's key accepted");
    is_str(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "the RFC's accept value");
    is_int(mt_ws_accept_key("short", acc), -1, "a short key refused");
    is_int(mt_ws_accept_key("dGhlIHNhbXBsZSBub25jZQ=!", acc), -1, "a key not base64 of 16 bytes refused");

    uint8_t buf[2048];
    char log[512];
    size_t n = 0;
    n += frame(buf + n, 0, MT_WS_BINARY, "hel", 3);
    n += frame(buf + n, 1, MT_WS_PING, "p", 1);
    n += frame(buf + n, 1, MT_WS_CONT, "lo", 2);
    n += frame(buf + n, 1, MT_WS_TEXT, "", 0);
    char big[300];
    memset(big, 'x', sizeof big);
    n += frame(buf + n, 1, MT_WS_BINARY, big, sizeof big);
    int all = 1;
    char first[512];
    for (size_t step = 1; step <= n; step++) {
        feed(buf, n, step, log, sizeof log);
        if (step == 1)
            snprintf(first, sizeof first, "%s", log);
        all &= strcmp(log, first) == 0;
    }
    ok(strncmp(first, "9:p|2:hello|1:|2:xxx", 20) == 0, "fragments joined, the ping in between handed out first (%.40s)", first);
    ok(strlen(first) == strlen("9:p|2:hello|1:|2:|") + sizeof big, "the 300-byte message whole");
    ok(all, "the same messages whatever the cut (1..%zu bytes at a time)", n);

    uint8_t f[64];
    n = frame(f, 1, MT_WS_BINARY, "ab", 2);
    f[1] &= 0x7f;
    is_int(feed(f, n - 4, 64, log, sizeof log), MT_WS_EPROTO, "an unmasked frame refused");
    n = frame(f, 1, MT_WS_BINARY, "ab", 2);
    f[0] |= 0x40;
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_EPROTO, "RSV1 refused");
    n = frame(f, 1, 0x3, "ab", 2);
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_EPROTO, "a reserved opcode refused");
    n = frame(f, 0, MT_WS_PING, "ab", 2);
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_EPROTO, "a fragmented ping refused");
    n = frame(f, 1, MT_WS_CONT, "ab", 2);
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_EPROTO, "a continuation outside a message refused");
    n = frame(f, 0, MT_WS_BINARY, "a", 1);
    n += frame(f + n, 1, MT_WS_TEXT, "b", 1);
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_EPROTO, "a new message inside a fragmented one refused");
    uint8_t l126[] = {0x82, 0x80 | 126, 0x00, 0x05, 1, 2, 3, 4};
    is_int(feed(l126, sizeof l126, 64, log, sizeof log), MT_WS_EPROTO, "a 16-bit length under 126 refused");
    uint8_t l127[] = {0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4};
    is_int(feed(l127, sizeof l127, 64, log, sizeof log), MT_WS_EPROTO, "a 64-bit length with its top bit refused");
    uint8_t huge[] = {0x82, 0x80 | 127, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4};
    is_int(feed(huge, sizeof huge, 64, log, sizeof log), MT_WS_ETOOBIG, "a message over the capacity: too big");
    mt_ws_msg m;
    size_t used;
    ok(mt_ws_read(&rd, f, 1, &used, &m) == MT_WS_ETOOBIG, "errors are sticky");

    /* RFC 6455 7.4 and 8.1 (issue 51): close codes and UTF-8 */
    n = frame(f, 1, MT_WS_CLOSE, "\x03\xe8" "bye", 5);
    is_int(feed(f, n, 3, log, sizeof log), MT_WS_MESSAGE, "close 1000 with a reason taken");
    n = frame(f, 1, MT_WS_CLOSE, "", 0);
    is_int(feed(f, n, 3, log, sizeof log), MT_WS_MESSAGE, "close without a code taken");
    n = frame(f, 1, MT_WS_CLOSE, "\x0f\xa0", 2);
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_MESSAGE, "close 4000 (private use) taken");
    static const char *const bad_codes[] = {"\x00\x00", "\x03\xe7", "\x03\xec", "\x03\xed",
                                            "\x03\xee", "\x03\xf7", "\x0b\xb7", "\x13\x88"};
    int refused = 0;
    for (size_t i = 0; i < sizeof bad_codes / sizeof *bad_codes; i++) {
        n = frame(f, 1, MT_WS_CLOSE, bad_codes[i], 2);
        refused += feed(f, n, 64, log, sizeof log) == MT_WS_EPROTO;
    }
    is_int(refused, 8, "close codes 0, 999, 1004-1006, 1015, 2999, 5000 refused (1002)");
    n = frame(f, 1, MT_WS_CLOSE, "\x03", 1);
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_EPROTO, "a one-byte close payload refused");
    n = frame(f, 1, MT_WS_CLOSE, "\x03\xe8\xc3\x28", 4);
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_EDATA, "a close reason not UTF-8: 1007");
    n = frame(f, 1, MT_WS_TEXT, "caf\xc3\xa9 \x00 ok", 10);
    is_int(feed(f, n, 4, log, sizeof log), MT_WS_MESSAGE, "UTF-8 text (a NUL included) taken");
    n = frame(f, 1, MT_WS_TEXT, "ab\xff", 3);
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_EDATA, "a text message not UTF-8: 1007");
    n = frame(f, 0, MT_WS_TEXT, "a\xe2\x82", 3);
    n += frame(f + n, 1, MT_WS_CONT, "\xac", 1);
    is_int(feed(f, n, 2, log, sizeof log), MT_WS_MESSAGE, "a character split between fragments taken");
    n = frame(f, 1, MT_WS_TEXT, "\xed\xa0\x80", 3);
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_EDATA, "a surrogate in text: 1007");
    n = frame(f, 1, MT_WS_BINARY, "\xff\xfe", 2);
    is_int(feed(f, n, 64, log, sizeof log), MT_WS_MESSAGE, "binary is not checked for UTF-8");

    uint8_t hd[10];
    is_int((int)mt_ws_header(MT_WS_BINARY, 5, hd), 2, "a short server header: 2 bytes");
    ok(hd[0] == 0x82 && hd[1] == 5, "FIN, binary, unmasked");
    is_int((int)mt_ws_header(MT_WS_BINARY, 300, hd), 4, "16-bit length: 4 bytes");
    is_int((int)mt_ws_header(MT_WS_BINARY, 70000, hd), 10, "64-bit length: 10 bytes");
    return tap_done();
}
