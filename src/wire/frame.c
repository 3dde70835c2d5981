/* frame.c: encoder and incremental decoder of the Metronome frame stream
 * (mt-frame(5), layout in frame.h).
 *
 * Every byte read from a socket or pipe passes through mt_frame_decode, so it
 * treats its input as hostile: fields are read byte by byte in little-endian
 * order (never by casting the buffer to a host struct), the header is judged
 * the moment its fields arrive (a bogus 4 GiB length is refused after 56
 * bytes, not after waiting for the payload), and errors are sticky because
 * once framing is lost nothing after it can be trusted. Nothing here
 * allocates: the decoder owns one frame-sized buffer.
 */
#include "util/utf8.h"
#include "wire/frame.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- little-endian helpers ----------------------------------------------- */

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Header field offsets (frame.h). */
enum {
    OFF_MAGIC = 0, OFF_VERSION = 4, OFF_TYPE = 5, OFF_FLAGS = 6,
    OFF_SESSION = 8, OFF_SEQ = 12, OFF_T_SEND = 16, OFF_T_ARRIVE = 24,
    OFF_T_START = 32, OFF_T_READY = 40, OFF_LENGTH = 48, OFF_RESERVED = 52,
};

#define HELLO_FIXED 12 /* sample_rate, frame_samples, channels, encoding */

static int type_known(unsigned type)
{
    return type >= MT_FRAME_HELLO && type <= MT_FRAME_PRS;
}

static int is_data(unsigned type)
{
    return type == MT_FRAME_AUDIO || type == MT_FRAME_TOKENS;
}

size_t mt_utf8_sanitize(char *s)
{
    size_t replaced = 0;
    uint8_t *p = (uint8_t *)s;
    size_t i = 0, n = strlen(s);
    while (i < n) {
        uint8_t c = p[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (len && len <= n - i && mt_utf8_valid(p + i, len)) {
            i += len;
            continue;
        }
        p[i++] = '?';
        replaced++;
    }
    return replaced;
}

/* Can a payload of this length belong to this type? (Content checks that
 * need the bytes themselves are in payload_ok.) */
static int length_ok(unsigned type, uint32_t len)
{
    switch (type) {
    case MT_FRAME_HELLO:
    case MT_FRAME_ACCEPT:
        return len >= HELLO_FIXED && len <= MT_HELLO_MAX;
    case MT_FRAME_AUDIO:
        return len % 2 == 0;
    case MT_FRAME_TOKENS:
        return len % 4 == 0;
    case MT_FRAME_TEXT:
        return len % 4 == 0 && len <= 4 * MT_TEXT_MAX_TOKENS;
    case MT_FRAME_PRS:
        return len % 4 == 0 && len >= 4 && len <= 4 * MT_PRS_MAX;
    case MT_FRAME_END:        /* from the server: why it ended the session */
    case MT_FRAME_REJECT:
    case MT_FRAME_ERROR:
    case MT_FRAME_WORDS:
        return len <= MT_REASON_MAX;
    default:
        return 0;
    }
}

static int payload_ok(unsigned type, const uint8_t *p, uint32_t len)
{
    mt_hello h;
    switch (type) {
    case MT_FRAME_HELLO:
    case MT_FRAME_ACCEPT:
        return mt_hello_decode(p, len, &h) == 0;
    case MT_FRAME_END:
    case MT_FRAME_REJECT:
    case MT_FRAME_ERROR:
    case MT_FRAME_WORDS:
        return mt_utf8_valid(p, len);
    case MT_FRAME_TEXT:
        /* token ids are int32 values on the wire: none negative */
        for (uint32_t i = 0; i < len; i += 4)
            if (get_u32(p + i) > INT32_MAX)
                return 0;
        return 1;
    case MT_FRAME_PRS:
        for (uint32_t i = 0; i < len; i += 4) {   /* probabilities: NaN fails too */
            float v = mt_frame_f32(p + i);
            if (!(v >= 0.0f && v <= 1.0f))
                return 0;
        }
        return 1;
    default:
        return 1;
    }
}

/* Flags allowed for a type: FILL marks silence standing in for data,
 * FINAL a refusal that retrying cannot change. */
static int flags_ok(unsigned type, uint16_t flags)
{
    if (flags & ~(uint16_t)MT_FLAGS_KNOWN)
        return 0;
    if ((flags & MT_FLAG_FILL) && !is_data(type) && type != MT_FRAME_TEXT)
        return 0;
    if ((flags & MT_FLAG_TEXT_ONLY) && type != MT_FRAME_ACCEPT)
        return 0;
    if ((flags & MT_FLAG_FINAL) && type != MT_FRAME_REJECT)
        return 0;
    if ((flags & MT_FLAG_PRS) && type != MT_FRAME_HELLO)
        return 0;
    return 1;
}

/* ---- decoder ------------------------------------------------------------- */

void mt_frame_decoder_init(mt_frame_decoder *d)
{
    d->have = 0;
    d->have_seq = 0;
    d->last_seq = 0;
    d->error = 0;
}

/* Judges the header fields that are complete among the first `have` bytes.
 * Called after each append, so garbage is refused as early as it can be. */
static int check_header(const mt_frame_decoder *d, const uint8_t *h, size_t have)
{
    size_t m = have < 4 ? have : 4;
    if (memcmp(h, MT_FRAME_MAGIC, m) != 0)
        return MT_FERR_MAGIC;
    if (have > OFF_VERSION && h[OFF_VERSION] != MT_FRAME_VERSION)
        return MT_FERR_VERSION;
    if (have > OFF_TYPE && !type_known(h[OFF_TYPE]))
        return MT_FERR_TYPE;
    if (have < MT_FRAME_HEADER_SIZE)
        return 0;

    unsigned type = h[OFF_TYPE];
    uint32_t len = get_u32(h + OFF_LENGTH);
    if (!flags_ok(type, get_u16(h + OFF_FLAGS)) ||
        (type != MT_FRAME_HELLO && get_u32(h + OFF_RESERVED) != 0))
        return MT_FERR_FLAGS;
    if (len > MT_FRAME_MAX_PAYLOAD)
        return MT_FERR_TOO_LONG;
    if (!length_ok(type, len))
        return MT_FERR_PAYLOAD;
    if (is_data(type) && d->have_seq && get_u32(h + OFF_SEQ) <= d->last_seq)
        return MT_FERR_SEQ;
    return 0;
}

static void fill_frame(const uint8_t *h, mt_frame *f)
{
    f->version = h[OFF_VERSION];
    f->type = h[OFF_TYPE];
    f->flags = get_u16(h + OFF_FLAGS);
    f->session = get_u32(h + OFF_SESSION);
    f->seq = get_u32(h + OFF_SEQ);
    f->t_send = get_u64(h + OFF_T_SEND);
    f->t_arrive = get_u64(h + OFF_T_ARRIVE);
    f->t_start = get_u64(h + OFF_T_START);
    f->t_ready = get_u64(h + OFF_T_READY);
    f->length = get_u32(h + OFF_LENGTH);
    f->seed_hi = get_u32(h + OFF_RESERVED);   /* 0 but in a HELLO */
    f->payload = h + MT_FRAME_HEADER_SIZE;
}

int mt_frame_decode(mt_frame_decoder *d, const uint8_t *buf, size_t len,
                    size_t *consumed, mt_frame *out)
{
    size_t used = 0;
    int rc = MT_FRAME_NEED_MORE;

    if (d->error) {
        rc = d->error;
        goto done;
    }
    if ((!buf && len > 0) || !out) {
        rc = MT_FERR_ARG; /* a caller bug, not a stream error: not sticky */
        goto done;
    }
    while (used < len) {
        size_t want = mt_frame_decoder_need(d);
        size_t n = len - used < want ? len - used : want;
        memcpy(d->buf + d->have, buf + used, n);
        int was_header = d->have < MT_FRAME_HEADER_SIZE;
        d->have += n;
        used += n;
        if (was_header) {
            int e = check_header(d, d->buf, d->have);
            if (e) {
                d->error = rc = e;
                goto done;
            }
            if (d->have < MT_FRAME_HEADER_SIZE)
                continue;
        }
        uint32_t plen = get_u32(d->buf + OFF_LENGTH);
        if (d->have < MT_FRAME_HEADER_SIZE + (size_t)plen)
            continue;

        /* A whole frame. */
        unsigned type = d->buf[OFF_TYPE];
        if (!payload_ok(type, d->buf + MT_FRAME_HEADER_SIZE, plen)) {
            d->error = rc = MT_FERR_PAYLOAD;
            goto done;
        }
        fill_frame(d->buf, out);
        if (is_data(type)) {
            d->have_seq = 1;
            d->last_seq = out->seq;
        }
        /* The bytes stay in buf (out->payload points there) until the next
         * call appends over them. */
        d->have = 0;
        rc = MT_FRAME_OK;
        goto done;
    }
done:
    if (consumed)
        *consumed = used;
    return rc;
}

int mt_frame_decode_ref(mt_frame_decoder *d, const uint8_t *buf, size_t len,
                        size_t *consumed, mt_frame *out)
{
    /* Nothing buffered, and a whole frame in buf: judged where it lies.
     * The checks are the same as the copying path's, in the same order,
     * so the two return the same codes for the same bytes. */
    if (d->error || d->have != 0 || !buf || !out || len < MT_FRAME_HEADER_SIZE)
        return mt_frame_decode(d, buf, len, consumed, out);
    uint32_t plen = get_u32(buf + OFF_LENGTH);
    if (plen > MT_FRAME_MAX_PAYLOAD ||
        len - MT_FRAME_HEADER_SIZE < (size_t)plen)
        return mt_frame_decode(d, buf, len, consumed, out);
    size_t total = MT_FRAME_HEADER_SIZE + (size_t)plen;
    int e = check_header(d, buf, MT_FRAME_HEADER_SIZE);
    if (!e && !payload_ok(buf[OFF_TYPE], buf + MT_FRAME_HEADER_SIZE, plen))
        e = MT_FERR_PAYLOAD;
    if (e) {
        /* the copying path stops where it found the error: let it say
         * so, with the same consumed count */
        return mt_frame_decode(d, buf, len, consumed, out);
    }
    fill_frame(buf, out);
    if (is_data(buf[OFF_TYPE])) {
        d->have_seq = 1;
        d->last_seq = out->seq;
    }
    if (consumed)
        *consumed = total;
    return MT_FRAME_OK;
}

size_t mt_frame_decoder_need(const mt_frame_decoder *d)
{
    if (d->error)
        return 1;
    if (d->have < MT_FRAME_HEADER_SIZE)
        return MT_FRAME_HEADER_SIZE - d->have;
    /* A buffered header passed check_header, so its length is in range. */
    size_t total = MT_FRAME_HEADER_SIZE + get_u32(d->buf + OFF_LENGTH);
    return total > d->have ? total - d->have : 1;
}

int mt_frame_decoder_finish(const mt_frame_decoder *d)
{
    if (d->error)
        return d->error;
    return d->have > 0 ? MT_FERR_TRUNCATED : 0;
}

/* ---- encoder ------------------------------------------------------------- */

long mt_frame_encode(const mt_frame *f, uint8_t *out, size_t cap)
{
    if (!f || !out)
        return MT_FERR_ARG;
    unsigned version = f->version ? f->version : MT_FRAME_VERSION;
    if (version != MT_FRAME_VERSION)
        return MT_FERR_VERSION;
    if (!type_known(f->type))
        return MT_FERR_TYPE;
    if (!flags_ok(f->type, f->flags) || (f->type != MT_FRAME_HELLO && f->seed_hi))
        return MT_FERR_FLAGS;
    if (f->length > MT_FRAME_MAX_PAYLOAD)
        return MT_FERR_TOO_LONG;
    if (f->length > 0 && !f->payload)
        return MT_FERR_ARG;
    if (!length_ok(f->type, f->length) ||
        !payload_ok(f->type, f->payload, f->length))
        return MT_FERR_PAYLOAD;
    size_t total = MT_FRAME_HEADER_SIZE + (size_t)f->length;
    if (cap < total)
        return MT_FERR_ARG;

    memcpy(out + OFF_MAGIC, MT_FRAME_MAGIC, 4);
    out[OFF_VERSION] = (uint8_t)version;
    out[OFF_TYPE] = f->type;
    put_u16(out + OFF_FLAGS, f->flags);
    put_u32(out + OFF_SESSION, f->session);
    put_u32(out + OFF_SEQ, f->seq);
    put_u64(out + OFF_T_SEND, f->t_send);
    put_u64(out + OFF_T_ARRIVE, f->t_arrive);
    put_u64(out + OFF_T_START, f->t_start);
    put_u64(out + OFF_T_READY, f->t_ready);
    put_u32(out + OFF_LENGTH, f->length);
    put_u32(out + OFF_RESERVED, f->seed_hi);
    if (f->length)
        memmove(out + MT_FRAME_HEADER_SIZE, f->payload, f->length);
    return (long)total;
}

/* ---- HELLO / ACCEPT payload ---------------------------------------------- */

/* Printable ASCII, no space: a token fits a file, a shell and a log. */
static int token_ok(const uint8_t *t, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (t[i] < 0x21 || t[i] > 0x7e)
            return 0;
    return 1;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int mt_hello_smp_check(const mt_hello *h, char *why, size_t whylen)
{
    const char *bad = NULL;
    double v = 0;
    if (h->smp_mask & ~MT_SMP_KNOWN) {
        bad = "mask";
        v = h->smp_mask;
    } else if (!(h->temp >= 0.0f && h->temp <= MT_SMP_TEMP_MAX)) {  /* NaN too */
        bad = "temperature";
        v = h->temp;
    } else if (!(h->temp_text >= 0.0f && h->temp_text <= MT_SMP_TEMP_MAX)) {
        bad = "text temperature";
        v = h->temp_text;
    } else if (h->top_k > MT_SMP_TOPK_MAX) {
        bad = "top-k";
        v = h->top_k;
    } else if (h->top_k_text > MT_SMP_TOPK_MAX) {
        bad = "text top-k";
        v = h->top_k_text;
    } else if ((!(h->smp_mask & MT_SMP_TEMP) && h->temp != 0.0f) ||
               (!(h->smp_mask & MT_SMP_TOPK) && h->top_k) ||
               (!(h->smp_mask & MT_SMP_TEMP_TEXT) && h->temp_text != 0.0f) ||
               (!(h->smp_mask & MT_SMP_TOPK_TEXT) && h->top_k_text)) {
        bad = "a field outside the mask";
        v = 1;
    }
    if (!bad)
        return 0;
    if (why)
        snprintf(why, whylen, "sampling %s %g outside its range (temperatures 0..%g, "
                 "top-k 0..%d)", bad, v, (double)MT_SMP_TEMP_MAX, MT_SMP_TOPK_MAX);
    return -1;
}

long mt_hello_encode(const mt_hello *h, uint8_t *out, size_t cap)
{
    if (!h || !out)
        return MT_FERR_ARG;
    size_t name = strnlen(h->model, sizeof h->model);
    if (name > MT_MODEL_NAME_MAX ||
        !mt_utf8_valid((const uint8_t *)h->model, name))
        return MT_FERR_ARG;
    size_t tok = h->token_len;
    if (tok > MT_TOKEN_MAX || !token_ok((const uint8_t *)h->token, tok))
        return MT_FERR_ARG;
    if (h->smp_mask && mt_hello_smp_check(h, NULL, 0))
        return MT_FERR_ARG;
    size_t smp = h->smp_mask ? 1 + MT_HELLO_SMP_SIZE : 0;
    size_t total = HELLO_FIXED + name + (tok || smp ? 1 + tok : 0) + smp;
    if (cap < total)
        return MT_FERR_ARG;
    put_u32(out, h->sample_rate);
    put_u32(out + 4, h->frame_samples);
    put_u16(out + 8, h->channels);
    put_u16(out + 10, h->encoding);
    memcpy(out + HELLO_FIXED, h->model, name);
    if (tok || smp) {
        out[HELLO_FIXED + name] = 0;
        memcpy(out + HELLO_FIXED + name + 1, h->token, tok);
    }
    if (smp) {
        uint8_t *b = out + HELLO_FIXED + name + 1 + tok;
        b[0] = 0;
        b[1] = MT_HELLO_SMP_VERSION;
        b[2] = h->smp_mask;
        put_u32(b + 3, f32_bits(h->temp));
        put_u32(b + 7, h->top_k);
        put_u32(b + 11, f32_bits(h->temp_text));
        put_u32(b + 15, h->top_k_text);
    }
    return (long)total;
}

/* The sampling block b[0..n) (after its NUL) into h: 0, or -1. */
static int smp_decode(const uint8_t *b, size_t n, mt_hello *h)
{
    if (n != MT_HELLO_SMP_SIZE || b[0] != MT_HELLO_SMP_VERSION || b[1] == 0)
        return -1;
    h->smp_mask = b[1];
    h->temp = bits_f32(get_u32(b + 2));
    h->top_k = get_u32(b + 6);
    h->temp_text = bits_f32(get_u32(b + 10));
    h->top_k_text = get_u32(b + 14);
    return mt_hello_smp_check(h, NULL, 0);
}

/* Structure only: whether the server can serve this format is its own
 * decision, answered with REJECT and a reason, not a stream error. */
int mt_hello_decode(const uint8_t *p, size_t len, mt_hello *h)
{
    if (!p || !h || len < HELLO_FIXED || len > MT_HELLO_MAX)
        return MT_FERR_PAYLOAD;
    memset(h, 0, sizeof *h);
    size_t name = len - HELLO_FIXED, tok = 0;
    const uint8_t *nul = memchr(p + HELLO_FIXED, 0, name);
    if (nul) {
        const uint8_t *end = p + len;
        const uint8_t *nul2 = memchr(nul + 1, 0, (size_t)(end - (nul + 1)));
        tok = (size_t)((nul2 ? nul2 : end) - (nul + 1));
        name = (size_t)(nul - (p + HELLO_FIXED));
        if ((tok < 1 && !nul2) || tok > MT_TOKEN_MAX || !token_ok(nul + 1, tok))
            return MT_FERR_PAYLOAD;
        if (nul2 && smp_decode(nul2 + 1, (size_t)(end - (nul2 + 1)), h))
            return MT_FERR_PAYLOAD;
    }
    if (name > MT_MODEL_NAME_MAX || !mt_utf8_valid(p + HELLO_FIXED, name))
        return MT_FERR_PAYLOAD;
    h->sample_rate = get_u32(p);
    h->frame_samples = get_u32(p + 4);
    h->channels = get_u16(p + 8);
    h->encoding = get_u16(p + 10);
    memcpy(h->model, p + HELLO_FIXED, name);
    h->model[name] = '\0';
    h->token_len = (uint8_t)tok;
    if (tok)
        memcpy(h->token, nul + 1, tok);
    h->token[tok] = '\0';
    return 0;
}

/* ---- names --------------------------------------------------------------- */

const char *mt_frame_strerror(int status)
{
    switch (status) {
    case MT_FRAME_OK:        return "whole frame";
    case MT_FRAME_NEED_MORE: return "need more bytes";
    case MT_FERR_MAGIC:      return "bad magic (not a Metronome frame stream)";
    case MT_FERR_VERSION:    return "unknown frame version";
    case MT_FERR_TYPE:       return "unknown frame type";
    case MT_FERR_TOO_LONG:   return "payload length over the limit";
    case MT_FERR_SEQ:        return "sequence number did not increase";
    case MT_FERR_TRUNCATED:  return "stream ended inside a frame";
    case MT_FERR_FLAGS:      return "unknown flags or non-zero reserved field";
    case MT_FERR_PAYLOAD:    return "payload inconsistent with frame type";
    case MT_FERR_ARG:        return "bad argument or buffer too small";
    default:                 return "unknown frame status";
    }
}

const char *mt_frame_type_name(int type)
{
    switch (type) {
    case MT_FRAME_HELLO:  return "HELLO";
    case MT_FRAME_AUDIO:  return "AUDIO";
    case MT_FRAME_TOKENS: return "TOKENS";
    case MT_FRAME_END:    return "END";
    case MT_FRAME_ACCEPT: return "ACCEPT";
    case MT_FRAME_REJECT: return "REJECT";
    case MT_FRAME_ERROR:  return "ERROR";
    case MT_FRAME_TEXT:   return "TEXT";
    case MT_FRAME_WORDS:  return "WORDS";
    case MT_FRAME_PRS:    return "PRS";
    default:              return "UNKNOWN";
    }
}
