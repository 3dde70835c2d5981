/* test_ws_client.c: the client side of Kyutai's protocol (ws_client.c):
 * a client frame is masked (mask bit, the key, the payload XORed with it)
 * and, in each length form (7-bit, 16-bit, 64-bit), is read back whole by
 * the server's strict reader (wire/ws.c), which refuses unmasked frames;
 * a short buffer is refused; ws:// URLs are told from other endpoints. */
#include "client/ws_client.h"
#include "wire/ws.h"
#include "tap.h"

#include <string.h>

#define BIG 70000
static uint8_t plain[BIG], wire[BIG + 14], msgbuf[BIG];

int main(void)
{
    static const uint8_t mask[4] = {0xa5, 0x01, 0x7e, 0xc3};
    static const size_t sizes[] = {0, 5, 125, 126, 300, 65535, 65536, BIG};
    for (size_t i = 0; i < BIG; i++)
        plain[i] = (uint8_t)(i * 31 + 7);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        long len = mt_ws_client_frame(MT_WS_BINARY, plain, n, mask, wire, sizeof wire);
        size_t h = n < 126 ? 6 : n < 65536 ? 8 : 14;
        ok(len == (long)(n + h), "%zu bytes: a %zu-byte header (%ld)", n, h, len);
        ok(wire[0] == (0x80 | MT_WS_BINARY), "%zu bytes: FIN and the opcode", n);
        ok(wire[1] & 0x80, "%zu bytes: the mask bit", n);
        ok(memcmp(wire + h - 4, mask, 4) == 0, "%zu bytes: the key after the length", n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += wire[h + i] != (plain[i] ^ mask[i & 3]);
        ok(bad == 0, "%zu bytes: every payload byte XORed with the key (%zu not)", n, bad);
        mt_ws_reader r;
        mt_ws_msg m;
        size_t used = 0;
        mt_ws_reader_init(&r, msgbuf, sizeof msgbuf);
        int st = mt_ws_read(&r, wire, (size_t)len, &used, &m);
        ok(st == MT_WS_MESSAGE, "%zu bytes: the server's reader takes it (%d %s)", n, st, r.why);
        ok(st == MT_WS_MESSAGE && m.op == MT_WS_BINARY && m.len == n &&
           (n == 0 || memcmp(m.data, plain, n) == 0) && used == (size_t)len,
           "%zu bytes: ... and unmasks the payload exactly", n);
    }
    uint8_t small[20];
    is_int(mt_ws_client_frame(MT_WS_TEXT, plain, 7, mask, small, sizeof small), -1,
           "a buffer short of n + 14 is refused");
    long c = mt_ws_client_frame(MT_WS_CLOSE, (const uint8_t *)"\x03\xe8", 2, mask,
                                small, sizeof small);
    is_int(c, 8, "a close frame of 2 bytes");
    ok(small[0] == 0x88, "... FIN and opcode 8");
    ok(mt_ws_client_is_url("ws://127.0.0.1:8998/api/chat"), "ws:// is a URL");
    ok(!mt_ws_client_is_url("tcp:127.0.0.1:7000"), "tcp: is not");
    ok(!mt_ws_client_is_url("/tmp/mt.sock"), "a socket path is not");
    ok(!mt_ws_client_is_url("wss://x:1/"), "wss:// is not (no TLS here)");
    return tap_done();
}
