/* fuzz_frame.c: libFuzzer harness for the frame decoder (src/wire/frame.c).
 * The input is a byte stream; it is decoded twice, in one read and in
 * chunks whose sizes come from the input itself, and both must agree
 * frame by frame and on the final status. Every decoded frame is encoded
 * again and must decode to the same frame: the codec is its own oracle.
 * A HELLO payload that decodes (its sampling block too) encodes again to
 * the same bytes. */
#include "wire/frame.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static mt_frame_decoder dec_a, dec_b, dec_c;
static uint8_t wire[MT_FRAME_MAX_SIZE];

#define MAX_FRAMES 256
static struct { mt_frame f; uint8_t pl[MT_FRAME_MAX_PAYLOAD]; } seen[MAX_FRAMES];

static int same(const mt_frame *a, const mt_frame *b)
{
    return a->version == b->version && a->type == b->type &&
           a->flags == b->flags && a->session == b->session &&
           a->seq == b->seq && a->t_send == b->t_send &&
           a->t_arrive == b->t_arrive && a->t_start == b->t_start &&
           a->t_ready == b->t_ready && a->length == b->length &&
           a->seed_hi == b->seed_hi &&
           (a->length == 0 || memcmp(a->payload, b->payload, a->length) == 0);
}

static void hello_again(const mt_frame *f)
{
    static uint8_t hb[MT_HELLO_MAX];
    mt_hello h;
    if ((f->type != MT_FRAME_HELLO && f->type != MT_FRAME_ACCEPT) ||
        mt_hello_decode(f->payload, f->length, &h) != 0)
        return;
    long n = mt_hello_encode(&h, hb, sizeof hb);
    if (n != (long)f->length || memcmp(hb, f->payload, f->length) != 0)
        abort(); /* a payload that decodes is what its fields encode to */
}

static void reencode(const mt_frame *f)
{
    hello_again(f);
    long n = mt_frame_encode(f, wire, sizeof wire);
    if (n != (long)(MT_FRAME_HEADER_SIZE + f->length))
        abort(); /* a frame the decoder accepted must be encodable */
    mt_frame_decoder_init(&dec_c);
    size_t used = 0;
    mt_frame g;
    if (mt_frame_decode(&dec_c, wire, (size_t)n, &used, &g) != MT_FRAME_OK ||
        used != (size_t)n || !same(f, &g))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Pass A: all bytes at once. */
    int nframes = 0, end_a;
    mt_frame_decoder_init(&dec_a);
    size_t pos = 0;
    for (;;) {
        size_t used = 0;
        mt_frame f;
        int rc = mt_frame_decode(&dec_a, data + pos, size - pos, &used, &f);
        if (used > size - pos)
            abort();
        pos += used;
        if (rc == MT_FRAME_OK) {
            if (f.type < MT_FRAME_HELLO || f.type > MT_FRAME_PRS ||
                f.length > MT_FRAME_MAX_PAYLOAD)
                abort();
            reencode(&f);
            if (nframes < MAX_FRAMES) {
                seen[nframes].f = f;
                memcpy(seen[nframes].pl, f.payload, f.length);
                seen[nframes].f.payload = seen[nframes].pl;
            }
            nframes++;
            continue;
        }
        if (rc == MT_FRAME_NEED_MORE) {
            if (pos != size)
                abort();
            end_a = mt_frame_decoder_finish(&dec_a);
        } else {
            end_a = rc;
            if (mt_frame_decoder_finish(&dec_a) != rc)
                abort(); /* errors are sticky */
        }
        break;
    }

    /* Pass B: chunks of 1..8 bytes, sizes taken from the data. */
    int got = 0, end_b = 0, done = 0;
    mt_frame_decoder_init(&dec_b);
    pos = 0;
    while (!done) {
        size_t chunk = size - pos;
        if (pos < size) {
            size_t c = 1 + (data[pos] & 7);
            if (c < chunk)
                chunk = c;
        }
        const uint8_t *p = data + pos;
        size_t left = chunk;
        for (;;) {
            size_t used = 0;
            mt_frame f;
            int rc = mt_frame_decode(&dec_b, p, left, &used, &f);
            p += used;
            left -= used;
            pos += used;
            if (rc == MT_FRAME_OK) {
                if (got < MAX_FRAMES && got < nframes && !same(&f, &seen[got].f))
                    abort();
                got++;
                continue;
            }
            if (rc < 0) {
                end_b = rc;
                done = 1;
            }
            break;
        }
        if (!done && pos >= size) {
            end_b = mt_frame_decoder_finish(&dec_b);
            done = 1;
        }
    }
    if (got != nframes || end_a != end_b)
        abort();
    /* The decoder must not read HELLOs it cannot also parse. */
    mt_hello h;
    (void)mt_hello_decode(data, size, &h);
    return 0;
}
