/* fuzz_oggopus.c: libFuzzer harness for the Ogg Opus input path of --ws
 * (src/wire/oggopus.c, over libogg and libopus): any bytes fed to the
 * decoder, whole and cut at a point the first byte picks, give the same
 * frames and the same verdict, and never crash or overrun; each with
 * the pre-skip dropped and kept (as the gate decodes). Under a limit of
 * samples (the gate's allowance, issue 51) no more frames come than it
 * allows, whatever the packets say; a refusal always has its reason, and
 * what the decoder holds stays bounded (ASan's leak and size checks). */
#include "wire/oggopus.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RATE  24000
#define FRAME 1920

typedef struct sink {
    int      n;
    uint64_t hash;
} sink;

static void on_frame(void *ctx, const int16_t *pcm)
{
    sink *s = ctx;
    s->n++;
    for (int i = 0; i < FRAME; i++)
        s->hash = s->hash * 1099511628211ull ^ (uint16_t)pcm[i];
}

static int run(const uint8_t *data, size_t size, size_t cut, int keep, int64_t limit,
               sink *s)
{
    char err[200];
    mt_oggopus_dec *d = NULL;
    memset(s, 0, sizeof *s);
    if (mt_oggopus_dec_create(RATE, FRAME, on_frame, s, &d, err, sizeof err) != 0)
        abort();
    if (keep)
        mt_oggopus_dec_keep_preskip(d);
    mt_oggopus_dec_limit(d, limit);
    int rc = mt_oggopus_dec_feed(d, data, cut, err, sizeof err);
    if (rc == 0)
        rc = mt_oggopus_dec_feed(d, data + cut, size - cut, err, sizeof err);
    if (rc != 0 && err[0] == '\0')
        abort();
    mt_oggopus_dec_free(d);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sink a, b;
    size_t cut = size ? (size_t)data[0] * size / 256 : 0;
    for (int keep = 0; keep < 2; keep++) {
        int ra = run(data, size, size, keep, 0, &a);
        int rb = run(data, size, cut, keep, 0, &b);
        if (ra != rb || a.n != b.n || a.hash != b.hash)
            abort();
    }
    /* a limit of 1 to 16 frames, cut or not: never more frames than it */
    int64_t limit = size > 1 ? (int64_t)(1 + data[1] % 16) * FRAME : FRAME;
    run(data, size, cut, data[0] & 1, limit, &b);
    if ((int64_t)b.n * FRAME > limit)
        abort();
    return 0;
}
