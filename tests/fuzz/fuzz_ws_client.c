/* fuzz_ws_client.c: libFuzzer harness for the server-frame reader of
 * mt-replay's ws:// client (src/client/ws_client.c): any bytes from a
 * server are read as frames without a crash, a hang or a read past them;
 * a data message never exceeds 1 MiB nor a close frame 125 bytes; the
 * same bytes read twice give the same messages and the same end. */
#include "client/ws_client.h"
#include "wire/ws.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct seen { size_t count, bytes; uint32_t sum; } seen;

static void on_msg(void *ctx, int op, const uint8_t *m, size_t len)
{
    seen *s = ctx;
    if (len > (1u << 20) || (op == MT_WS_CLOSE && len > 125))
        abort();
    s->count++;
    s->bytes += len;
    for (size_t i = 0; i < len; i++)
        s->sum = s->sum * 31 + m[i];
    s->sum = s->sum * 7 + (uint32_t)op;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    seen a = {0}, b = {0};
    char wa[256], wb[256];
    int ra = mt_ws_client_scan(data, size, on_msg, &a, wa, sizeof wa);
    int rb = mt_ws_client_scan(data, size, on_msg, &b, wb, sizeof wb);
    if (ra != rb || a.count != b.count || a.bytes != b.bytes || a.sum != b.sum)
        abort();
    if (a.bytes > size)
        abort();   /* nothing made up */
    return 0;
}
