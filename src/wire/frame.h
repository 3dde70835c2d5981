/* frame.h: the Metronome frame stream (mt-frame(5)).
 *
 * Every program speaks this over pipes and Unix sockets. A frame is a fixed
 * 56-byte little-endian header followed by a bounded payload:
 *
 *   off size field
 *     0    4 magic        "MTFR" (0x4D 0x54 0x46 0x52)
 *     4    1 version      MT_FRAME_VERSION (1)
 *     5    1 type         enum mt_frame_type
 *     6    2 flags        MT_FLAG_*
 *     8    4 session      session id (assigned by the server in ACCEPT;
 *                         0 from a client before that)
 *    12    4 seq          sequence number; AUDIO/TOKENS strictly increase
 *                         within one direction of one stream; an output
 *                         frame carries the seq of the input it answers
 *    16    8 t_send       sender's CLOCK_MONOTONIC time, ns
 *    24    8 t_arrive     server: when the input frame was read, ns
 *    32    8 t_start      server: when the step that served it started, ns
 *    40    8 t_ready      server: when its output was ready, ns
 *    48    4 length       payload bytes, <= MT_FRAME_MAX_PAYLOAD
 *    52    4 reserved     0 in version 1, except in HELLO: the high 32
 *                         bits of the sampling seed (seq its low 32)
 *    56    . payload
 *
 * Decoding is incremental (bytes in any split, one at a time works) and
 * never allocates: the decoder owns one frame-sized buffer.
 */
#ifndef MT_FRAME_H
#define MT_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MT_FRAME_MAGIC        "MTFR"
#define MT_FRAME_VERSION      1
#define MT_FRAME_HEADER_SIZE  56
#define MT_FRAME_MAX_PAYLOAD  32768
#define MT_FRAME_MAX_SIZE     (MT_FRAME_HEADER_SIZE + MT_FRAME_MAX_PAYLOAD)
#define MT_REASON_MAX         255   /* REJECT/ERROR reason bytes */
#define MT_MODEL_NAME_MAX     63
#define MT_TOKEN_MAX          128   /* HELLO's optional access token */
#define MT_HELLO_SMP_VERSION  1     /* HELLO's sampling block, its version */
#define MT_HELLO_SMP_SIZE     18    /* version 1: version, mask, 4 x 4 bytes */
#define MT_HELLO_MAX          (12 + MT_MODEL_NAME_MAX + 1 + MT_TOKEN_MAX + 1 + MT_HELLO_SMP_SIZE)
#define MT_SMP_TEMP_MAX       10.0f /* sampling temperatures: 0 (greedy)..10 */
#define MT_SMP_TOPK_MAX       65536 /* top-k: 0 (every token)..65536 */

enum mt_frame_type {
    MT_FRAME_HELLO  = 1, /* client -> server: wanted format (mt_hello) */
    MT_FRAME_AUDIO  = 2, /* PCM s16le, frame_samples * channels samples */
    MT_FRAME_TOKENS = 3, /* uint32 LE token ids */
    MT_FRAME_END    = 4, /* no more input / output; empty payload */
    MT_FRAME_ACCEPT = 5, /* server -> client: session admitted (mt_hello) */
    MT_FRAME_REJECT = 6, /* server -> client: refused; UTF-8 reason
                            (<= MT_REASON_MAX bytes, no NUL) */
    MT_FRAME_ERROR  = 7, /* either way: stream ends; UTF-8 reason (same) */
    MT_FRAME_TEXT   = 8, /* server -> client: the text tokens that go with
                            the output of input `seq` (Kyutai's models),
                            0..MT_TEXT_MAX_TOKENS uint32 LE ids, each at
                            most INT32_MAX; beside that AUDIO output, or,
                            in a session ACCEPTed with MT_FLAG_TEXT_ONLY,
                            the answer itself (then FILL may mark it); no
                            seq order of its own */
    MT_FRAME_WORDS  = 9, /* server -> client: the text that goes with the
                            output of input `seq` as UTF-8 words (no NUL,
                            <= MT_REASON_MAX bytes), from a server that
                            sends text rather than token ids (mt-replay's
                            bridge to Kyutai's WebSocket protocol); beside
                            the output, not an answer, no seq order */
    MT_FRAME_PRS    = 10, /* server -> client: the voice-activity
                            probabilities (Kyutai's Step prs: each extra
                            head's output 0) of the step that answers input
                            `seq`: 1..MT_PRS_MAX f32 LE, each in [0, 1];
                            only in a session whose HELLO had MT_FLAG_PRS,
                            just before that answer (none before a FILL's);
                            not an answer, no seq order of its own */
};
#define MT_TEXT_MAX_TOKENS 64
#define MT_PRS_MAX 16            /* probabilities in one PRS frame */

enum mt_frame_flags {
    MT_FLAG_FILL = 1u << 0, /* silence sent in place of a late output;
                               AUDIO/TOKENS only */
    MT_FLAG_FINAL = 1u << 1, /* REJECT only: the same HELLO would be
                                refused again (a wrong token, a format this
                                server does not serve, a session bound
                                larger than its whole pool): retrying
                                cannot help. Without it a refusal may pass
                                (a full server, the controller's no). */
    MT_FLAG_TEXT_ONLY = 1u << 2, /* ACCEPT only: the session's answers are
                                    TEXT frames, one per input, no AUDIO
                                    (a speech-to-text model) */
    MT_FLAG_PRS = 1u << 3,       /* HELLO only: the client takes PRS frames
                                    (a model without extra heads, or a
                                    backend without them, sends none) */
};
#define MT_FLAGS_KNOWN (MT_FLAG_FILL | MT_FLAG_FINAL | MT_FLAG_TEXT_ONLY | MT_FLAG_PRS)

enum mt_encoding {
    MT_ENC_PCM_S16LE = 1,
    MT_ENC_TOKENS_U32 = 2,
};

/* Results of the decoder: 0 or positive is success, negative an error. */
enum mt_frame_status {
    MT_FRAME_OK        = 1,  /* *out holds one whole frame */
    MT_FRAME_NEED_MORE = 0,  /* all input consumed, no whole frame yet */
    MT_FERR_MAGIC      = -1, /* bad magic */
    MT_FERR_VERSION    = -2, /* unknown version */
    MT_FERR_TYPE       = -3, /* unknown type */
    MT_FERR_TOO_LONG   = -4, /* payload length over MT_FRAME_MAX_PAYLOAD */
    MT_FERR_SEQ        = -5, /* AUDIO/TOKENS sequence went backwards */
    MT_FERR_TRUNCATED  = -6, /* stream ended inside a frame */
    MT_FERR_FLAGS      = -7, /* unknown flag bits or non-zero reserved
                                (outside HELLO) */
    MT_FERR_PAYLOAD    = -8, /* payload inconsistent with type */
    MT_FERR_ARG        = -9, /* encoder: bad argument / buffer too small */
};

typedef struct mt_frame {
    uint8_t  version;
    uint8_t  type;
    uint16_t flags;
    uint32_t session;
    uint32_t seq;
    uint64_t t_send, t_arrive, t_start, t_ready;
    uint32_t length;
    uint32_t seed_hi;       /* HELLO only (the header's reserved field):
                               the seed's high 32 bits, seq its low 32
                               (mt_frame_hello_seed); 0 in every other
                               type, where a non-zero one is refused */
    const uint8_t *payload; /* decoder: points into the decoder's buffer,
                               valid until the next decode call */
} mt_frame;

/* HELLO and ACCEPT payload: 12 bytes + model name (no NUL on the wire),
 * then, optionally (HELLO over TCP to a server with --token-file), one NUL
 * byte and the access token (1..MT_TOKEN_MAX printable ASCII bytes). The
 * name can hold no NUL, so the NUL marks where it ends; a payload without
 * one is exactly the version-1 payload of before.
 *
 * HELLO only, optionally: the session's sampling (Kyutai's models), after
 * the token (which may then be empty) and a second NUL, a block of its
 * own version (mt-frame(5)): version 1 is MT_HELLO_SMP_SIZE bytes:
 *   0 u8 block version (1)       1 u8 mask of the fields set (MT_SMP_*)
 *   2 f32 audio temperature      6 u32 audio top-k
 *  10 f32 text temperature      14 u32 text top-k
 * A field outside the mask must be 0 and leaves the server's default; a
 * temperature is 0 (greedy: the argmax, the lowest index on ties) to
 * MT_SMP_TEMP_MAX, a top-k 0 (every token) to MT_SMP_TOPK_MAX. Another
 * block version, unknown mask bits, a value out of range: refused. */
enum mt_smp_field {
    MT_SMP_TEMP = 1u << 0, MT_SMP_TOPK = 1u << 1,
    MT_SMP_TEMP_TEXT = 1u << 2, MT_SMP_TOPK_TEXT = 1u << 3,
};
#define MT_SMP_KNOWN 0x0fu
typedef struct mt_hello {
    uint32_t sample_rate;
    uint32_t frame_samples;
    uint16_t channels;
    uint16_t encoding;                  /* enum mt_encoding */
    char     model[MT_MODEL_NAME_MAX + 1];
    uint8_t  token_len;                 /* 0: no token */
    char     token[MT_TOKEN_MAX + 1];
    uint8_t  smp_mask;                  /* 0: no sampling block (MT_SMP_*) */
    float    temp, temp_text;           /* the block's values (mask) */
    uint32_t top_k, top_k_text;
} mt_hello;

typedef struct mt_frame_decoder {
    uint8_t  buf[MT_FRAME_MAX_SIZE];
    size_t   have;          /* bytes of the current frame buffered */
    int      have_seq;      /* a data frame was seen */
    uint32_t last_seq;      /* seq of the last AUDIO/TOKENS frame */
    int      error;         /* sticky: after an error the stream is dead */
} mt_frame_decoder;

void mt_frame_decoder_init(mt_frame_decoder *d);

/* A little-endian f32 at p (PRS payloads), and one written there. */
static inline float mt_frame_f32(const uint8_t *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline void mt_frame_put_f32(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(u >> (8 * i));
}

/* A HELLO's 64-bit sampling seed: seed_hi << 32 | seq (0: the server's
 * default). A client whose seed fits 32 bits sends the version-1 HELLO of
 * before, byte for byte. */
static inline uint64_t mt_frame_hello_seed(const mt_frame *f)
{
    return (uint64_t)f->seed_hi << 32 | f->seq;
}
/* Sets a HELLO's seq and seed_hi from seed. */
static inline void mt_frame_set_hello_seed(mt_frame *f, uint64_t seed)
{
    f->seq = (uint32_t)seed;
    f->seed_hi = (uint32_t)(seed >> 32);
}

/* Consumes bytes from buf[0..len). Returns MT_FRAME_OK with *out filled
 * (stop and call again with the rest: *consumed says how much was used),
 * MT_FRAME_NEED_MORE when everything was buffered, or an MT_FERR_* code
 * (sticky). */
int mt_frame_decode(mt_frame_decoder *d, const uint8_t *buf, size_t len,
                    size_t *consumed, mt_frame *out);

/* The same, but a frame that lies whole in buf while nothing is buffered
 * is decoded where it lies: out->payload then points into buf (valid while
 * buf is), and its bytes are never copied. Partial frames go through the
 * decoder's buffer as above. For a reader whose buffer holds still until
 * the frame has been used. */
int mt_frame_decode_ref(mt_frame_decoder *d, const uint8_t *buf, size_t len,
                        size_t *consumed, mt_frame *out);

/* Bytes that complete the frame being decoded (the rest of its header
 * first, then of its payload): a reader that must not read past one frame
 * asks for this many. At least 1; 1 after an error (the next call reports
 * it). */
size_t mt_frame_decoder_need(const mt_frame_decoder *d);

/* At end of stream: MT_FERR_TRUNCATED if a partial frame is buffered, the
 * sticky error if the stream already failed, else 0. */
int mt_frame_decoder_finish(const mt_frame_decoder *d);

/* Writes header + payload into out[0..cap). Returns bytes written, or a
 * negative MT_FERR_*: ARG (NULL, or cap < 56 + length), TOO_LONG, and the
 * decoder's checks (VERSION, TYPE, FLAGS, PAYLOAD), so whatever it writes
 * decodes. f->version 0 means MT_FRAME_VERSION. Never allocates; out may
 * alias f->payload's buffer past the header. */
long mt_frame_encode(const mt_frame *f, uint8_t *out, size_t cap);

/* HELLO/ACCEPT payload <-> struct. encode returns bytes or MT_FERR_ARG;
 * decode returns 0 or MT_FERR_PAYLOAD (length outside 12..MT_HELLO_MAX, a
 * name over 63 bytes or not UTF-8, a token after the NUL that is empty
 * (without a sampling block), too long or not printable ASCII, a sampling
 * block that is not version 1's, or out of range: mt_hello_smp_check). Values (rate, channels, encoding) are
 * not judged here: the server answers what it cannot serve with REJECT. */
long mt_hello_encode(const mt_hello *h, uint8_t *out, size_t cap);
int  mt_hello_decode(const uint8_t *p, size_t len, mt_hello *h);
/* The sampling fields of h against their ranges: 0, or -1 with the
 * field's name and value in why. */
int  mt_hello_smp_check(const mt_hello *h, char *why, size_t whylen);

/* Replaces, in place, every byte of the C string s that does not belong
 * to a valid UTF-8 sequence (strict, as REJECT and ERROR reasons must be)
 * with '?', so that a reason from anywhere can be sent and logged. Returns
 * the number of bytes replaced. */
size_t mt_utf8_sanitize(char *s);
const char *mt_frame_strerror(int status);
const char *mt_frame_type_name(int type);

#endif
