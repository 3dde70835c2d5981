/* fuzz_ws.c: libFuzzer harness for the WebSocket frame reader
 * (src/wire/ws.c) the --ws endpoint runs on every byte a client sends.
 * The bytes are read twice, whole and cut at a point the first byte
 * picks: both readings give the same messages and the same final status;
 * a message never exceeds the capacity, a control frame 125 bytes, and a
 * call never consumes more than it was given; a text message handed out
 * is UTF-8 and a close frame's code one a peer may send (RFC 6455 7.4),
 * with a UTF-8 reason (issue 51). */
#include "wire/ws.h"
#include "util/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CAP 4096

static uint8_t buf_a[CAP], buf_b[CAP];
static uint8_t log_a[1 << 16], log_b[1 << 16];

/* RFC 6455 text: UTF-8, NUL included (mt_utf8_valid refuses NUL) */
static int utf8_nul_ok(const uint8_t *p, size_t n)
{
    size_t at = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || p[i] == 0) {
            if (i > at && !mt_utf8_valid(p + at, i - at))
                return 0;
            at = i + 1;
        }
    return 1;
}

/* What the reader hands out obeys RFC 6455's rules on text and close. */
static void check_msg(const mt_ws_msg *m)
{
    if (m->op == MT_WS_TEXT && !utf8_nul_ok(m->data, m->len))
        abort();
    if (m->op == MT_WS_CLOSE && m->len > 0) {
        if (m->len < 2)
            abort();
        unsigned code = (unsigned)(m->data[0] << 8 | m->data[1]);
        if (!((code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
              (code >= 3000 && code <= 4999)) || !utf8_nul_ok(m->data + 2, m->len - 2))
            abort();
    }
}

/* reads data in the given pieces; the messages appended to out (op, len,
 * bytes); returns the final status */
static int read_all(mt_ws_reader *r, const uint8_t *data, size_t size, size_t cut,
                    uint8_t *out, size_t *outlen)
{
    size_t at = 0;
    int rc = MT_WS_NEED_MORE;
    *outlen = 0;
    while (at < size) {
        size_t end = at < cut ? cut : size, avail = end - at;
        size_t used = 0;
        mt_ws_msg m;
        rc = mt_ws_read(r, data + at, avail, &used, &m);
        if (used > avail || (rc == MT_WS_NEED_MORE && used != avail))
            abort();   /* NEED_MORE consumes everything */
        at += used;
        if (rc < 0)
            return rc;
        if (rc == MT_WS_MESSAGE) {
            if (m.len > CAP || (m.op >= 0x8 && m.len > 125))
                abort();
            check_msg(&m);
            if (*outlen + 5 + m.len <= sizeof log_a) {
                out[(*outlen)++] = (uint8_t)m.op;
                memcpy(out + *outlen, &m.len, 4);
                *outlen += 4;
                memcpy(out + *outlen, m.data, m.len);
                *outlen += m.len;
            }
        }
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_ws_reader a, b;
    mt_ws_reader_init(&a, buf_a, CAP);
    mt_ws_reader_init(&b, buf_b, CAP);
    size_t cut = size ? data[0] % (size + 1) : 0;
    size_t la = 0, lb = 0;
    int ra = read_all(&a, data, size, size, log_a, &la);
    int rb = read_all(&b, data, size, cut, log_b, &lb);
    if ((ra < 0) != (rb < 0) || (ra < 0 && ra != rb))
        abort();
    if (ra >= 0 && (la != lb || memcmp(log_a, log_b, la) != 0))
        abort();
    return 0;
}
