/* test_frame.c: the frame stream codec (src/wire/frame.c, mt-frame(5)).
 * Round trip of every type, a 100-frame stream decoded identically under
 * every split point and one byte at a time, one distinct error code per
 * malformed case, truncation at end of stream, and encoder refusals. */
#include "wire/frame.h"
#include "tap.h"

#include <stdint.h>
#include <string.h>

static uint8_t payload_buf[MT_FRAME_MAX_PAYLOAD];

/* Builds a valid frame of `type` with deterministic fields from i. */
static mt_frame make_frame(int type, uint32_t seq, int i, uint8_t *pl)
{
    mt_frame f;
    memset(&f, 0, sizeof f);
    f.type = (uint8_t)type;
    f.session = 0x01020304u + (uint32_t)i;
    f.seq = seq;
    f.t_send = 0x1122334455667788ull + (uint64_t)i;
    f.t_arrive = 1000u + (uint64_t)i;
    f.t_start = 2000u + (uint64_t)i;
    f.t_ready = UINT64_MAX - (uint64_t)i;
    size_t n = 0;
    if (type == MT_FRAME_HELLO || type == MT_FRAME_ACCEPT) {
        mt_hello h = { .sample_rate = 24000, .frame_samples = 1920, .channels = 1, .encoding = MT_ENC_PCM_S16LE };
        snprintf(h.model, sizeof h.model, "synthetic:tiny-%d", i);
        long r = mt_hello_encode(&h, pl, MT_FRAME_MAX_PAYLOAD);
        n = r > 0 ? (size_t)r : 0;
        if (type == MT_FRAME_ACCEPT && i % 2)
            f.flags = MT_FLAG_TEXT_ONLY;
        if (type == MT_FRAME_HELLO && i % 2)
            f.flags = MT_FLAG_PRS;      /* the client takes PRS frames */
    } else if (type == MT_FRAME_AUDIO) {
        n = 2 * (size_t)(1 + (i * 37) % 2000);
        for (size_t k = 0; k < n; k++)
            pl[k] = (uint8_t)(k * 7 + (size_t)i);
        f.flags = (i % 3 == 0) ? MT_FLAG_FILL : 0;
    } else if (type == MT_FRAME_TOKENS) {
        n = 4 * (size_t)(i % 9);
        for (size_t k = 0; k < n; k++)
            pl[k] = (uint8_t)(k ^ (size_t)i);
    } else if (type == MT_FRAME_TEXT) {
        n = 4 * (size_t)(i % 3);   /* none: a text-only answer before the delays */
        f.flags = (i % 2) ? MT_FLAG_FILL : 0;
        for (size_t k = 0; k < n; k++)
            pl[k] = (uint8_t)(k % 4 == 3 ? 0x7F : k * 5 + (size_t)i);
    } else if (type == MT_FRAME_PRS) {
        n = 4 * (size_t)(1 + i % 3);   /* probabilities in [0, 1], both ends too */
        for (size_t k = 0; k < n / 4; k++)
            mt_frame_put_f32(pl + 4 * k, (float)k / (float)(n / 4 > 1 ? n / 4 - 1 : 1));
    } else if (type == MT_FRAME_REJECT || type == MT_FRAME_ERROR || type == MT_FRAME_WORDS) {
        n = (size_t)snprintf((char *)pl, 64, "reason %d: caf\xc3\xa9", i);
        /* FINAL, the refusal that retrying cannot change: REJECT only */
        f.flags = (type == MT_FRAME_REJECT && i % 2 == 0) ? MT_FLAG_FINAL : 0;
    }
    f.length = (uint32_t)n;
    f.payload = pl;
    return f;
}

static int frames_equal(const mt_frame *a, const mt_frame *b)
{
    return a->type == b->type && a->flags == b->flags &&
           a->session == b->session && a->seq == b->seq &&
           a->t_send == b->t_send && a->t_arrive == b->t_arrive &&
           a->t_start == b->t_start && a->t_ready == b->t_ready &&
           a->length == b->length &&
           (a->length == 0 || memcmp(a->payload, b->payload, a->length) == 0);
}

/* ---- round trip ---------------------------------------------------------- */

static mt_frame_decoder dec; /* big: keep off the stack */

static void test_round_trip(void)
{
    static uint8_t wire[MT_FRAME_MAX_SIZE];
    for (int type = MT_FRAME_HELLO; type <= MT_FRAME_PRS; type++) {
        mt_frame f = make_frame(type, 7, type, payload_buf), g;
        long n = mt_frame_encode(&f, wire, sizeof wire);
        ok(n == (long)(MT_FRAME_HEADER_SIZE + f.length), "%s encodes to %ld bytes",
           mt_frame_type_name(type), n);
        mt_frame_decoder_init(&dec);
        size_t used = 0;
        int rc = mt_frame_decode(&dec, wire, (size_t)n, &used, &g);
        is_int(rc, MT_FRAME_OK, "decodes to one frame");
        is_int(used, n, "consumes the whole frame");
        ok(g.version == MT_FRAME_VERSION && frames_equal(&f, &g),
           "%s header fields and payload equal", mt_frame_type_name(type));
        is_int(mt_frame_decoder_finish(&dec), 0, "nothing left at end");
        if (type == MT_FRAME_HELLO || type == MT_FRAME_ACCEPT) {
            mt_hello h;
            is_int(mt_hello_decode(g.payload, g.length, &h), 0, "hello payload decodes");
            ok(h.sample_rate == 24000 && h.frame_samples == 1920 && h.channels == 1 &&
               h.encoding == MT_ENC_PCM_S16LE, "hello numbers survive");
            like(h.model, "synthetic:tiny-", "hello model name survives");
        }
    }
    /* Byte layout is little-endian at the documented offsets. */
    mt_frame f = make_frame(MT_FRAME_END, 0x0A0B0C0Du, 0, payload_buf);
    f.session = 0x11223344u;
    mt_frame_encode(&f, wire, sizeof wire);
    ok(memcmp(wire, "MTFR", 4) == 0 && wire[4] == 1 && wire[5] == MT_FRAME_END,
       "magic, version, type at offsets 0, 4, 5");
    ok(wire[8] == 0x44 && wire[11] == 0x11 && wire[12] == 0x0D && wire[15] == 0x0A,
       "session and seq little-endian at 8 and 12");
    ok(wire[16] == 0x88 && wire[23] == 0x11, "t_send little-endian at 16");
}

/* ---- splits -------------------------------------------------------------- */

#define NFRAMES 100
static uint8_t stream[NFRAMES * 4200];
static uint8_t payloads[NFRAMES][4096];
static mt_frame want[NFRAMES];
static size_t stream_len;

static void build_stream(void)
{
    uint32_t seq = 0;
    stream_len = 0;
    for (int i = 0; i < NFRAMES; i++) {
        int type = 1 + (i * 5) % 7;
        if (type == MT_FRAME_AUDIO || type == MT_FRAME_TOKENS)
            seq += 1 + (uint32_t)(i % 3);
        want[i] = make_frame(type, seq, i, payloads[i]);
        long n = mt_frame_encode(&want[i], stream + stream_len,
                                 sizeof stream - stream_len);
        if (n < 0) {
            tap_diag("encode failed for frame %d: %s", i, mt_frame_strerror((int)n));
            exit(1);
        }
        stream_len += (size_t)n;
    }
}

/* The decoder under test: the copying one, or the one that decodes a
 * whole frame where it lies (mt_frame_decode_ref); in_place counts the
 * frames decode_split got whose payload pointed into the stream. */
static int (*decode_fn)(mt_frame_decoder *, const uint8_t *, size_t, size_t *,
                        mt_frame *) = mt_frame_decode;
static int in_place;

/* Feeds chunks [0,k) then [k,len) (k = 0 means one chunk), or 1 byte at a
 * time when k < 0; returns the number of frames matching `want` in order,
 * or -1 on any mismatch or error. */
static int decode_split(long k)
{
    mt_frame_decoder_init(&dec);
    int got = 0;
    size_t pos = 0;
    in_place = 0;
    while (pos < stream_len) {
        size_t chunk;
        if (k < 0)
            chunk = 1;
        else if (pos < (size_t)k)
            chunk = (size_t)k - pos;
        else
            chunk = stream_len - pos;
        const uint8_t *p = stream + pos;
        size_t left = chunk;
        while (left > 0) {
            size_t used = 0;
            mt_frame f;
            int rc = decode_fn(&dec, p, left, &used, &f);
            if (rc < 0 || used > left)
                return -1;
            if (rc == MT_FRAME_OK && f.payload >= stream && f.payload < stream + stream_len)
                in_place++;
            p += used;
            left -= used;
            if (rc == MT_FRAME_OK) {
                if (got >= NFRAMES || !frames_equal(&f, &want[got]))
                    return -1;
                got++;
            } else if (left != 0) {
                return -1; /* NEED_MORE must consume everything */
            }
        }
        pos += chunk;
    }
    if (mt_frame_decoder_finish(&dec) != 0)
        return -1;
    return got;
}

static void test_splits(void)
{
    build_stream();
    tap_diag("stream of %d frames, %zu bytes", NFRAMES, stream_len);
    is_int(decode_split(0), NFRAMES, "whole stream in one read");
    size_t bad = 0, first_bad = 0;
    for (size_t k = 1; k < stream_len; k++)
        if (decode_split((long)k) != NFRAMES && bad++ == 0)
            first_bad = k;
    if (!ok(bad == 0, "every split point (%zu of them) decodes identically",
            stream_len - 1))
        tap_diag("%zu splits failed, first at %zu", bad, first_bad);
    is_int(decode_split(-1), NFRAMES, "one byte at a time decodes identically");
    is_int(decode_split(0), NFRAMES, "copying decoder: whole stream");
    is_int(in_place, 0, "copying decoder: every payload in the decoder's buffer");

    decode_fn = mt_frame_decode_ref;
    is_int(decode_split(0), NFRAMES, "in place: whole stream in one read");
    is_int(in_place, NFRAMES, "in place: every payload where the read left it");
    bad = 0;
    for (size_t k = 1; k < stream_len; k++)
        if (decode_split((long)k) != NFRAMES && bad++ == 0)
            first_bad = k;
    if (!ok(bad == 0, "in place: every split point decodes identically"))
        tap_diag("%zu splits failed, first at %zu", bad, first_bad);
    is_int(decode_split(-1), NFRAMES, "in place: one byte at a time");
    is_int(in_place, 0, "in place: byte by byte, every payload through the buffer");
    decode_fn = mt_frame_decode;
}

/* ---- malformed ----------------------------------------------------------- */

/* Decodes bytes (after an optional valid prefix frame) and returns the first
 * error or status; also checks the error is sticky. */
static int decode_bytes(const uint8_t *b, size_t n, int bytewise)
{
    mt_frame_decoder_init(&dec);
    mt_frame f;
    int rc = MT_FRAME_NEED_MORE;
    size_t pos = 0;
    while (pos < n) {
        size_t used = 0, chunk = bytewise ? 1 : n - pos;
        rc = decode_fn(&dec, b + pos, chunk, &used, &f);
        pos += used;
        if (rc < 0) {
            size_t u2;
            uint8_t x = 0;
            if (mt_frame_decode(&dec, &x, 1, &u2, &f) != rc)
                return 100; /* not sticky */
            return rc;
        }
    }
    return mt_frame_decoder_finish(&dec);
}

static size_t enc(const mt_frame *f, uint8_t *out)
{
    long n = mt_frame_encode(f, out, MT_FRAME_MAX_SIZE);
    return n > 0 ? (size_t)n : 0;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void check_bad(const char *name, const uint8_t *b, size_t n, int want_rc)
{
    int a = decode_bytes(b, n, 0), c = decode_bytes(b, n, 1);
    decode_fn = mt_frame_decode_ref;
    int ar = decode_bytes(b, n, 0), cr = decode_bytes(b, n, 1);
    decode_fn = mt_frame_decode;
    if (!ok(a == want_rc && c == want_rc && ar == want_rc && cr == want_rc, "%s -> %s",
            name, mt_frame_strerror(want_rc)))
        tap_diag("  got %d (whole) / %d (bytewise), in place %d / %d, want %d", a, c,
                 ar, cr, want_rc);
}

/* A valid encoding with a byte or two changed (at < 0 counts from the end):
 * the decoder must name the fault. */
typedef struct poke {
    int at;
    uint8_t byte;
} poke;
static const struct {
    const char *name;
    int type, i, npokes, want;
    uint32_t seq;
    poke p[2];
} bad_bytes[] = {
    { "bad magic", MT_FRAME_END, 0, 1, MT_FERR_MAGIC, 1, { { 0, 'X' } } },
    { "unknown version", MT_FRAME_END, 0, 1, MT_FERR_VERSION, 1, { { 4, 2 } } },
    { "unknown type 0", MT_FRAME_END, 0, 1, MT_FERR_TYPE, 1, { { 5, 0 } } },
    { "unknown type 11", MT_FRAME_END, 0, 1, MT_FERR_TYPE, 1, { { 5, 11 } } },
    /* PRS: probabilities (the top byte of the last f32 makes it huge or NaN,
     * or negative) */
    { "PRS over 1", MT_FRAME_PRS, 0, 1, MT_FERR_PAYLOAD, 0, { { -1, 0x7F } } },
    { "PRS negative", MT_FRAME_PRS, 1, 1, MT_FERR_PAYLOAD, 0, { { -1, 0xBF } } },
    { "PRS flag on AUDIO", MT_FRAME_AUDIO, 1, 1, MT_FERR_FLAGS, 1, { { 6, MT_FLAG_PRS } } },
    { "PRS flag on ACCEPT", MT_FRAME_ACCEPT, 0, 1, MT_FERR_FLAGS, 0, { { 6, MT_FLAG_PRS } } },
    { "WORDS not UTF-8", MT_FRAME_WORDS, 0, 1, MT_FERR_PAYLOAD, 0, { { -1, 0xED } } },
    { "FILL on WORDS", MT_FRAME_WORDS, 0, 1, MT_FERR_FLAGS, 0, { { 6, MT_FLAG_FILL } } },
    /* TEXT carries int32 ids: a top bit set is no token */
    { "TEXT token over INT32_MAX", MT_FRAME_TEXT, 1, 1, MT_FERR_PAYLOAD, 0, { { -1, 0x80 } } },
    { "TEXT_ONLY on TEXT", MT_FRAME_TEXT, 0, 1, MT_FERR_FLAGS, 0,
      { { 6, MT_FLAG_TEXT_ONLY } } },
    { "TEXT_ONLY on HELLO", MT_FRAME_HELLO, 0, 1, MT_FERR_FLAGS, 0,
      { { 6, MT_FLAG_TEXT_ONLY } } },
    { "unknown flag bit", MT_FRAME_AUDIO, 1, 1, MT_FERR_FLAGS, 1, { { 6, 0x04 } } },
    { "FINAL on AUDIO", MT_FRAME_AUDIO, 1, 1, MT_FERR_FLAGS, 1, { { 6, MT_FLAG_FINAL } } },
    { "FINAL on ERROR", MT_FRAME_ERROR, 1, 1, MT_FERR_FLAGS, 0, { { 6, MT_FLAG_FINAL } } },
    { "non-zero reserved", MT_FRAME_AUDIO, 1, 1, MT_FERR_FLAGS, 1, { { 53, 1 } } },
    { "FILL on a control frame", MT_FRAME_END, 0, 1, MT_FERR_FLAGS, 0,
      { { 6, MT_FLAG_FILL } } },
    /* a NUL ends the name and starts the access token (issue 23): one
     * with nothing after it, or with a byte no token holds, is refused */
    { "HELLO ending in a NUL (an empty token)", MT_FRAME_HELLO, 0, 1, MT_FERR_PAYLOAD, 0,
      { { -1, 0 } } },
    { "HELLO token with a space", MT_FRAME_HELLO, 0, 2, MT_FERR_PAYLOAD, 0,
      { { MT_FRAME_HEADER_SIZE + 13, 0 }, { -1, ' ' } } },
    { "ACCEPT model name not UTF-8", MT_FRAME_ACCEPT, 0, 1, MT_FERR_PAYLOAD, 0,
      { { MT_FRAME_HEADER_SIZE + 12, 0xFF } } },
    { "ERROR reason not UTF-8 (stray continuation)", MT_FRAME_ERROR, 0, 1, MT_FERR_PAYLOAD,
      0, { { -2, 0x80 } } },
    /* an overlong encoding of U+0029-ish */
    { "ERROR reason not UTF-8 (overlong)", MT_FRAME_ERROR, 0, 2, MT_FERR_PAYLOAD, 0,
      { { -2, 0xC0 }, { -1, 0xA9 } } },
    { "ERROR reason not UTF-8 (cut sequence)", MT_FRAME_ERROR, 0, 1, MT_FERR_PAYLOAD, 0,
      { { -1, 0xED } } },
};

/* A header whose payload length the type cannot have, given with that many
 * payload bytes (given 0: the header alone, refused before the payload). */
static const struct {
    const char *name;
    int type, i, want;
    uint32_t seq, len, given;
} bad_lengths[] = {
    { "payload over the limit (header only)", MT_FRAME_AUDIO, 1, MT_FERR_TOO_LONG, 1,
      MT_FRAME_MAX_PAYLOAD + 2, 0 },
    { "4 GiB payload refused at the header", MT_FRAME_AUDIO, 1, MT_FERR_TOO_LONG, 1,
      0xFFFFFFFEu, 0 },
    { "odd AUDIO length", MT_FRAME_AUDIO, 1, MT_FERR_PAYLOAD, 1, 3, 3 },
    { "TOKENS length not a multiple of 4", MT_FRAME_TOKENS, 4, MT_FERR_PAYLOAD, 1, 6, 6 },
    { "HELLO too short", MT_FRAME_HELLO, 0, MT_FERR_PAYLOAD, 0, 11, 11 },
    { "END with a NUL in its reason", MT_FRAME_END, 0, MT_FERR_PAYLOAD, 0, 2, 2 },
    { "END with a reason over 255 bytes", MT_FRAME_END, 0, MT_FERR_PAYLOAD, 0, 256, 256 },
    { "WORDS over 255 bytes", MT_FRAME_WORDS, 0, MT_FERR_PAYLOAD, 0, 256, 256 },
    { "TEXT length not a multiple of 4", MT_FRAME_TEXT, 0, MT_FERR_PAYLOAD, 0, 6, 6 },
    { "TEXT over MT_TEXT_MAX_TOKENS", MT_FRAME_TEXT, 0, MT_FERR_PAYLOAD, 0,
      4 * MT_TEXT_MAX_TOKENS + 4, 4 * MT_TEXT_MAX_TOKENS + 4 },
    { "PRS empty", MT_FRAME_PRS, 0, MT_FERR_PAYLOAD, 0, 0, 0 },
    { "PRS length not a multiple of 4", MT_FRAME_PRS, 0, MT_FERR_PAYLOAD, 0, 6, 6 },
    { "PRS over MT_PRS_MAX", MT_FRAME_PRS, 0, MT_FERR_PAYLOAD, 0, 4 * MT_PRS_MAX + 4,
      4 * MT_PRS_MAX + 4 },
};

static void test_malformed(void)
{
    static uint8_t w[2 * MT_FRAME_MAX_SIZE];
    static uint8_t pl[MT_FRAME_MAX_PAYLOAD];
    mt_frame f;
    size_t n;

    for (size_t k = 0; k < sizeof bad_bytes / sizeof *bad_bytes; k++) {
        f = make_frame(bad_bytes[k].type, bad_bytes[k].seq, bad_bytes[k].i, pl);
        n = enc(&f, w);
        for (int j = 0; j < bad_bytes[k].npokes; j++) {
            int at = bad_bytes[k].p[j].at;
            w[at < 0 ? (int)n + at : at] = bad_bytes[k].p[j].byte;
        }
        check_bad(bad_bytes[k].name, w, n, bad_bytes[k].want);
    }
    w[0] = 'X';
    check_bad("bad magic seen on its first byte", w, 1, MT_FERR_MAGIC);

    for (size_t k = 0; k < sizeof bad_lengths / sizeof *bad_lengths; k++) {
        f = make_frame(bad_lengths[k].type, bad_lengths[k].seq, bad_lengths[k].i, pl);
        (void)enc(&f, w);
        put32(w + 48, bad_lengths[k].len);
        check_bad(bad_lengths[k].name, w, MT_FRAME_HEADER_SIZE + bad_lengths[k].given,
                  bad_lengths[k].want);
    }

    {
        mt_frame a = make_frame(MT_FRAME_AUDIO, 5, 1, pl);
        size_t n1 = enc(&a, w);
        mt_frame b = make_frame(MT_FRAME_TOKENS, 5, 2, pl);
        size_t n2 = enc(&b, w + n1);
        check_bad("seq repeated", w, n1 + n2, MT_FERR_SEQ);
        b.seq = 4;
        n2 = enc(&b, w + n1);
        check_bad("seq going backwards", w, n1 + n2, MT_FERR_SEQ);
        b.seq = 6;
        n2 = enc(&b, w + n1);
        check_bad("seq increasing is fine", w, n1 + n2, 0);
        mt_frame e = make_frame(MT_FRAME_END, 0, 3, pl);
        n2 = enc(&e, w + n1);
        check_bad("control frames do not take part in seq", w, n1 + n2, 0);
    }

    f = make_frame(MT_FRAME_AUDIO, 1, 1, pl);
    n = enc(&f, w);
    check_bad("truncated inside the payload", w, n - 1, MT_FERR_TRUNCATED);
    check_bad("truncated inside the header", w, 20, MT_FERR_TRUNCATED);

    f = make_frame(MT_FRAME_HELLO, 0, 0, pl);
    (void)enc(&f, w);
    put32(w + 48, 12 + MT_MODEL_NAME_MAX + 1);
    memset(w + MT_FRAME_HEADER_SIZE + 12, 'a', MT_MODEL_NAME_MAX + 1);
    check_bad("HELLO model name too long", w,
              MT_FRAME_HEADER_SIZE + 12 + MT_MODEL_NAME_MAX + 1, MT_FERR_PAYLOAD);
    f = make_frame(MT_FRAME_REJECT, 0, 0, pl);
    (void)enc(&f, w);
    put32(w + 48, MT_REASON_MAX + 1);
    memset(w + MT_FRAME_HEADER_SIZE, 'r', MT_REASON_MAX + 1);
    check_bad("REJECT reason over MT_REASON_MAX", w,
              MT_FRAME_HEADER_SIZE + MT_REASON_MAX + 1, MT_FERR_PAYLOAD);

    /* All error codes are distinct. */
    int codes[] = { MT_FERR_MAGIC, MT_FERR_VERSION, MT_FERR_TYPE, MT_FERR_TOO_LONG,
                    MT_FERR_SEQ, MT_FERR_TRUNCATED, MT_FERR_FLAGS, MT_FERR_PAYLOAD,
                    MT_FERR_ARG };
    int distinct = 1;
    for (size_t a = 0; a < sizeof codes / sizeof *codes; a++)
        for (size_t b = a + 1; b < sizeof codes / sizeof *codes; b++)
            if (codes[a] == codes[b] ||
                strcmp(mt_frame_strerror(codes[a]), mt_frame_strerror(codes[b])) == 0)
                distinct = 0;
    ok(distinct, "error codes and their messages are distinct");
    is_str(mt_frame_type_name(99), "UNKNOWN", "unknown type name");
    is_str(mt_frame_type_name(MT_FRAME_TOKENS), "TOKENS", "TOKENS type name");
}

/* ---- encoder refusals ---------------------------------------------------- */

static void test_encoder(void)
{
    static uint8_t w[MT_FRAME_MAX_SIZE + 16];
    static uint8_t big[MT_FRAME_MAX_PAYLOAD + 2];
    mt_frame f = make_frame(MT_FRAME_AUDIO, 1, 5, payload_buf);
    size_t need = MT_FRAME_HEADER_SIZE + f.length;
    is_int(mt_frame_encode(&f, w, need - 1), MT_FERR_ARG, "buffer one byte short");
    is_int(mt_frame_encode(&f, w, 10), MT_FERR_ARG, "buffer smaller than a header");
    is_int(mt_frame_encode(&f, w, need), (long)need, "exact buffer is enough");
    f.payload = big;
    f.length = MT_FRAME_MAX_PAYLOAD + 2;
    is_int(mt_frame_encode(&f, w, sizeof w), MT_FERR_TOO_LONG, "over-limit payload");
    f.length = MT_FRAME_MAX_PAYLOAD;
    is_int(mt_frame_encode(&f, w, sizeof w), MT_FRAME_MAX_SIZE, "payload at the limit");
    f.length = 3;
    is_int(mt_frame_encode(&f, w, sizeof w), MT_FERR_PAYLOAD, "odd AUDIO refused");
    f.length = 2;
    f.flags = 0x80;
    is_int(mt_frame_encode(&f, w, sizeof w), MT_FERR_FLAGS, "unknown flag refused");
    f.flags = 0;
    f.type = 11;
    is_int(mt_frame_encode(&f, w, sizeof w), MT_FERR_TYPE, "unknown type refused");
    f.type = MT_FRAME_AUDIO;
    f.version = 3;
    is_int(mt_frame_encode(&f, w, sizeof w), MT_FERR_VERSION, "unknown version refused");
    f.version = 0;
    f.payload = NULL;
    is_int(mt_frame_encode(&f, w, sizeof w), MT_FERR_ARG, "NULL payload refused");
    mt_hello h = { .sample_rate = 24000, .frame_samples = 1920, .channels = 1, .encoding = 1 };
    memset(h.model, 'm', sizeof h.model); /* no NUL: name too long */
    is_int(mt_hello_encode(&h, w, sizeof w), MT_FERR_ARG, "hello name too long refused");
    h.model[5] = '\0';
    is_int(mt_hello_encode(&h, w, 16), MT_FERR_ARG, "hello buffer too small refused");
    is_int(mt_hello_encode(&h, w, 17), 17, "hello exact buffer");
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* HELLO's 64-bit seed: seq the low 32 bits, the reserved field the high
 * (mt-frame(5)); a seed that fits 32 bits is the version-1 HELLO byte for
 * byte; the field stays refused in every other type. */
static void test_hello_seed(void)
{
    static uint8_t w[MT_FRAME_MAX_SIZE], pl[MT_FRAME_MAX_PAYLOAD];
    mt_frame f = make_frame(MT_FRAME_HELLO, 0, 0, pl), g;
    uint64_t seed = 0x0123456789abcdefull;
    mt_frame_set_hello_seed(&f, seed);
    size_t n = enc(&f, w);
    ok(get32(w + 12) == 0x89abcdefu && get32(w + 52) == 0x01234567u,
       "HELLO: the seed's low 32 bits in seq, the high in the reserved field");
    mt_frame_decoder d;
    mt_frame_decoder_init(&d);
    size_t used = 0;
    int rc = mt_frame_decode(&d, w, n, &used, &g);
    ok(rc == MT_FRAME_OK && mt_frame_hello_seed(&g) == seed,
       "a HELLO with a 64-bit seed decodes to it (rc %d, %#llx)", rc,
       (unsigned long long)mt_frame_hello_seed(&g));
    mt_frame_set_hello_seed(&f, 5);
    n = enc(&f, w);
    ok(get32(w + 12) == 5 && get32(w + 52) == 0,
       "a seed under 2^32: seq alone, the reserved field 0 as in version 1");
    mt_frame a = make_frame(MT_FRAME_AUDIO, 1, 1, pl);
    a.seed_hi = 1;
    ok(mt_frame_encode(&a, w, sizeof w) == MT_FERR_FLAGS,
       "the encoder refuses seed_hi on a frame that is not HELLO");
    f = make_frame(MT_FRAME_ACCEPT, 0, 0, pl);
    n = enc(&f, w);
    w[52] = 1;
    check_bad("non-zero reserved on ACCEPT", w, n, MT_FERR_FLAGS);
}

/* HELLO's sampling block (version 1): it survives with and without a
 * token; a payload without one is the HELLO of before byte for byte; a
 * value out of range, an unknown block version, unknown mask bits and a
 * block of another size are refused. */
static void test_hello_sampling(void)
{
    uint8_t w[MT_HELLO_MAX];
    mt_hello h = { .sample_rate = 24000, .frame_samples = 1920, .channels = 1,
                   .encoding = 1, .model = "kyutai", .smp_mask = MT_SMP_TEMP | MT_SMP_TOPK_TEXT,
                   .temp = 0.25f, .top_k_text = 7 }, g;
    long n = mt_hello_encode(&h, w, sizeof w);
    ok(n == 12 + 6 + 2 + MT_HELLO_SMP_SIZE, "sampling block without a token: %ld bytes", n);
    is_int(mt_hello_decode(w, (size_t)n, &g), 0, "it decodes");
    ok(g.smp_mask == (MT_SMP_TEMP | MT_SMP_TOPK_TEXT) && g.temp == 0.25f && g.top_k_text == 7 &&
       g.top_k == 0 && g.temp_text == 0.0f && g.token_len == 0 && !strcmp(g.model, "kyutai"),
       "its fields survive, the token stays empty");
    h.token_len = 3;
    memcpy(h.token, "abc", 4);
    n = mt_hello_encode(&h, w, sizeof w);
    ok(n > 0 && mt_hello_decode(w, (size_t)n, &g) == 0 && g.token_len == 3 &&
       !strcmp(g.token, "abc") && g.temp == 0.25f, "with a token: both survive");
    h.smp_mask = 0;
    h.temp = 0.0f;
    h.top_k_text = 0;
    n = mt_hello_encode(&h, w, sizeof w);
    ok(n == 12 + 6 + 1 + 3, "no block: the HELLO of before (%ld bytes)", n);
    h.smp_mask = MT_SMP_TEMP;
    h.temp = 10.5f;
    is_int(mt_hello_encode(&h, w, sizeof w), MT_FERR_ARG, "encoder refuses temperature 10.5");
    char why[200] = "";
    ok(mt_hello_smp_check(&h, why, sizeof why) == -1 && strstr(why, "temperature 10.5"),
       "check names the field and value: %s", why);
    h.temp = 1.0f;
    n = mt_hello_encode(&h, w, sizeof w);
    uint8_t bad[MT_HELLO_MAX];
    memcpy(bad, w, (size_t)n);
    size_t blk = (size_t)n - MT_HELLO_SMP_SIZE;
    bad[blk] = 2;
    is_int(mt_hello_decode(bad, (size_t)n, &g), MT_FERR_PAYLOAD, "block version 2 refused");
    memcpy(bad, w, (size_t)n);
    bad[blk + 1] = 0x10;
    is_int(mt_hello_decode(bad, (size_t)n, &g), MT_FERR_PAYLOAD, "unknown mask bit refused");
    memcpy(bad, w, (size_t)n);
    bad[blk + 2] = 0; bad[blk + 3] = 0; bad[blk + 4] = 0xc0; bad[blk + 5] = 0x7f;  /* NaN */
    is_int(mt_hello_decode(bad, (size_t)n, &g), MT_FERR_PAYLOAD, "NaN temperature refused");
    memcpy(bad, w, (size_t)n);
    bad[blk + 6] = 1;   /* top-k set outside the mask */
    is_int(mt_hello_decode(bad, (size_t)n, &g), MT_FERR_PAYLOAD, "a field outside the mask refused");
    is_int(mt_hello_decode(w, (size_t)n - 1, &g), MT_FERR_PAYLOAD, "a short block refused");
}

int main(void)
{
    test_round_trip();
    test_splits();
    test_malformed();
    test_encoder();
    test_hello_seed();
    test_hello_sampling();
    return tap_done();
}
