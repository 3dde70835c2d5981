/* asr_msg.c: Kyutai's speech-to-text messages (see asr_msg.h): a bounds
 * scan, then libmsgpack-c's reader for the checked bytes, then the fields
 * by name; the writer is libmsgpack-c's packer into the caller's buffer. */
#include "wire/asr_msg.h"

#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <string.h>

#include "util/errmsg.h"

/* ---- the bounds scan ---------------------------------------------------- */

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Skips one object at p[*at..n): -1 when it is truncated, uses a byte
 * MessagePack never uses (0xc1), nests deeper than MT_ASR_MAX_DEPTH, or a
 * container claims more elements than bytes remain (each needs one). */
static int scan(const uint8_t *p, size_t n, size_t *at, int depth)
{
    if (depth > MT_ASR_MAX_DEPTH || *at >= n)
        return -1;
    uint8_t b = p[(*at)++];
    uint64_t skip = 0, items = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 0;
    if (b >= 0x80 && b <= 0x8f)
        items = 2u * (b & 0x0f);
    else if (b >= 0x90 && b <= 0x9f)
        items = b & 0x0f;
    else if (b >= 0xa0 && b <= 0xbf)
        skip = b & 0x1f;
    else {
        static const struct { uint8_t lo, hi, fixed, extra, kind; } t[] = {
            /* kind 0: length-prefixed bytes, 1: fixed size, 2: array, 3: map */
            {0xc4, 0xc6, 0, 0, 0}, {0xc7, 0xc9, 0, 1, 0}, {0xca, 0xca, 4, 0, 1},
            {0xcb, 0xcb, 8, 0, 1}, {0xcc, 0xcf, 0, 0, 1}, {0xd0, 0xd3, 0, 0, 1},
            {0xd4, 0xd8, 0, 0, 1}, {0xd9, 0xdb, 0, 0, 0}, {0xdc, 0xdd, 0, 0, 2},
            {0xde, 0xdf, 0, 0, 3},
        };
        int k = -1;
        for (size_t i = 0; i < sizeof t / sizeof t[0] && k < 0; i++)
            if (b >= t[i].lo && b <= t[i].hi)
                k = (int)i;
        if (k < 0)
            return -1;                                   /* 0xc1 */
        int idx = b - t[k].lo;
        if (t[k].kind == 1) {
            if (b >= 0xcc && b <= 0xd3)
                skip = 1u << (idx & 3);                  /* 1, 2, 4, 8 */
            else if (b >= 0xd4)
                skip = 1 + (1u << idx);                  /* fixext: type + 1..16 */
            else
                skip = t[k].fixed;
        } else {
            int lb = t[k].kind >= 2 ? 2 << idx : 1 << idx;   /* 1/2/4 or 2/4 */
            if (n - *at < (size_t)lb)
                return -1;
            uint64_t v = be(p + *at, lb);
            *at += (size_t)lb;
            if (t[k].kind == 0)
                skip = v + t[k].extra;
            else
                items = t[k].kind == 3 ? 2 * v : v;
        }
    }
    if (skip > n - *at || items > n - *at)
        return -1;
    *at += (size_t)skip;
    for (uint64_t i = 0; i < items; i++)
        if (scan(p, n, at, depth + 1) != 0)
            return -1;
    return 0;
}

/* ---- the reader ------------------------------------------------------------ */

static int str_is(const msgpack_object *o, const char *s)
{
    size_t l = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == l &&
           memcmp(o->via.str.ptr, s, l) == 0;
}

/* The value of key in map m: NULL when absent; *dup when given twice. */
static const msgpack_object *field(const msgpack_object *m, const char *key, int *dup)
{
    const msgpack_object *v = NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (str_is(&m->via.map.ptr[i].key, key)) {
            if (v)
                *dup = 1;
            v = &m->via.map.ptr[i].val;
        }
    return v;
}

/* A sample: a float, or an integer (serde reads either as f32). */
static int sample(const msgpack_object *o, float *out)
{
    double v;
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
        v = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        v = (double)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        v = (double)o->via.i64;
    else
        return -1;
    if (!isfinite(v) || v > 3.4e38 || v < -3.4e38)
        return -1;
    *out = (float)v;
    return 0;
}

static int decode_fields(const msgpack_object *m, mt_asr_in *in, float *pcm, size_t cap,
                         char *why, size_t whylen)
{
    int dup = 0;
    const msgpack_object *type = field(m, "type", &dup);
    if (dup) {
        mt_set_err(why, whylen, "a field is given twice");
        return -1;
    }
    if (!type || type->type != MSGPACK_OBJECT_STR) {
        mt_set_err(why, whylen, "no \"type\" string");
        return -1;
    }
    if (str_is(type, "Init")) {
        in->type = MT_ASR_IN_INIT;
        return 0;
    }
    if (str_is(type, "OggOpus")) {
        mt_set_err(why, whylen, "OggOpus messages are not served here: send Audio (f32 PCM "
                   "at 24 kHz)");
        return -1;
    }
    if (str_is(type, "Marker")) {
        const msgpack_object *id = field(m, "id", &dup);
        if (dup || !id || (id->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
                           id->type != MSGPACK_OBJECT_NEGATIVE_INTEGER) ||
            (id->type == MSGPACK_OBJECT_POSITIVE_INTEGER && id->via.u64 > INT64_MAX)) {
            mt_set_err(why, whylen, "Marker: \"id\" must be one 64-bit signed integer");
            return -1;
        }
        in->type = MT_ASR_IN_MARKER;
        in->marker_id = id->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int64_t)id->via.u64
                                                                    : id->via.i64;
        return 0;
    }
    if (!str_is(type, "Audio")) {
        mt_set_err(why, whylen, "unknown message type (Audio, Marker or Init)");
        return -1;
    }
    const msgpack_object *a = field(m, "pcm", &dup);
    if (dup || !a || a->type != MSGPACK_OBJECT_ARRAY) {
        mt_set_err(why, whylen, "Audio: \"pcm\" must be one array of numbers");
        return -1;
    }
    if (a->via.array.size > cap) {
        mt_set_err(why, whylen, "Audio: %u samples in one message, more than the %zu taken",
                   a->via.array.size, cap);
        return -1;
    }
    for (uint32_t i = 0; i < a->via.array.size; i++)
        if (sample(&a->via.array.ptr[i], &pcm[i]) != 0) {
            mt_set_err(why, whylen, "Audio: sample %u is not a finite number", i);
            return -1;
        }
    in->type = MT_ASR_IN_AUDIO;
    in->n_pcm = a->via.array.size;
    return 0;
}

/* The bounds scan, then libmsgpack-c's reading of p[0..n) into *u: 0, or
 * -1 with why (u is then destroyed). */
static int checked_unpack(const uint8_t *p, size_t n, msgpack_unpacked *u, char *why,
                          size_t whylen)
{
    size_t at = 0;
    if (n == 0 || scan(p, n, &at, 0) != 0) {
        mt_set_err(why, whylen, "not one well-formed MessagePack object (truncated, "
                   "oversized or nested deeper than %d)", MT_ASR_MAX_DEPTH);
        return -1;
    }
    if (at != n) {
        mt_set_err(why, whylen, "%zu bytes after the MessagePack object", n - at);
        return -1;
    }
    if (p[0] < 0x80 || (p[0] > 0x8f && p[0] != 0xde && p[0] != 0xdf)) {
        mt_set_err(why, whylen, "a message is a MessagePack map");
        return -1;
    }
    msgpack_unpacked_init(u);
    size_t off = 0;
    msgpack_unpack_return r = msgpack_unpack_next(u, (const char *)p, n, &off);
    if (r != MSGPACK_UNPACK_SUCCESS || off != n || u->data.type != MSGPACK_OBJECT_MAP) {
        mt_set_err(why, whylen, "MessagePack: %s", r == MSGPACK_UNPACK_NOMEM_ERROR
                   ? "out of memory" : "malformed");
        msgpack_unpacked_destroy(u);
        return -1;
    }
    return 0;
}

int mt_asr_in_decode(const uint8_t *p, size_t n, mt_asr_in *m, float *pcm, size_t pcm_cap,
                     char *why, size_t whylen)
{
    memset(m, 0, sizeof *m);
    msgpack_unpacked u;
    if (checked_unpack(p, n, &u, why, whylen) != 0)
        return -1;
    int rc = decode_fields(&u.data, m, pcm, pcm_cap, why, whylen);
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* A number field (a float or an integer) into *v: 0, or -1. */
static int num_field(const msgpack_object *m, const char *key, double *v)
{
    int dup = 0;
    const msgpack_object *o = field(m, key, &dup);
    float f;
    if (dup || !o)
        return -1;
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64) {
        if (!isfinite(o->via.f64))
            return -1;
        *v = o->via.f64;
        return 0;
    }
    if (sample(o, &f) != 0)
        return -1;
    *v = f;
    return 0;
}

/* A string field into out (cut to cap - 1 bytes, NUL-ended): 0, or -1. */
static int str_field(const msgpack_object *m, const char *key, char *out, size_t cap)
{
    int dup = 0;
    const msgpack_object *o = field(m, key, &dup);
    if (dup || !o || o->type != MSGPACK_OBJECT_STR)
        return -1;
    size_t l = o->via.str.size < cap - 1 ? o->via.str.size : cap - 1;
    memcpy(out, o->via.str.ptr, l);
    out[l] = '\0';
    return 0;
}

static int srv_fields(const msgpack_object *m, mt_asr_srv *s, char *why, size_t whylen)
{
    int dup = 0;
    const msgpack_object *type = field(m, "type", &dup);
    if (dup || !type || type->type != MSGPACK_OBJECT_STR) {
        mt_set_err(why, whylen, "no \"type\" string");
        return -1;
    }
    double id = 0;
    if (str_is(type, "Ready"))
        s->type = MT_ASR_SRV_READY;
    else if (str_is(type, "Step"))
        s->type = MT_ASR_SRV_STEP;
    else if (str_is(type, "Word") && str_field(m, "text", s->text, sizeof s->text) == 0 &&
             num_field(m, "start_time", &s->time) == 0)
        s->type = MT_ASR_SRV_WORD;
    else if (str_is(type, "EndWord") && num_field(m, "stop_time", &s->time) == 0)
        s->type = MT_ASR_SRV_END_WORD;
    else if (str_is(type, "Error") && str_field(m, "message", s->text, sizeof s->text) == 0)
        s->type = MT_ASR_SRV_ERROR;
    else if (str_is(type, "Marker") && num_field(m, "id", &id) == 0 && id == floor(id) &&
             fabs(id) < 9e15) {
        s->type = MT_ASR_SRV_MARKER;
        s->id = (int64_t)id;
    } else {
        mt_set_err(why, whylen, "an unknown or malformed server message");
        return -1;
    }
    return 0;
}

int mt_asr_srv_decode(const uint8_t *p, size_t n, mt_asr_srv *m, char *why, size_t whylen)
{
    memset(m, 0, sizeof *m);
    msgpack_unpacked u;
    if (checked_unpack(p, n, &u, why, whylen) != 0)
        return -1;
    int rc = srv_fields(&u.data, m, why, whylen);
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* ---- the writer ------------------------------------------------------------ */

static int out_write(void *data, const char *buf, size_t len)
{
    mt_asr_out *o = data;
    if (o->over || len > o->cap - o->len) {
        o->over = 1;
        return -1;
    }
    memcpy(o->p + o->len, buf, len);
    o->len += len;
    return 0;
}

static void begin(mt_asr_out *o, msgpack_packer *pk, const char *type, size_t fields)
{
    o->len = 0;
    o->over = 0;
    msgpack_packer_init(pk, o, out_write);
    msgpack_pack_map(pk, 1 + fields);
    msgpack_pack_str_with_body(pk, "type", 4);
    msgpack_pack_str_with_body(pk, type, strlen(type));
}

static void key(msgpack_packer *pk, const char *k)
{
    msgpack_pack_str_with_body(pk, k, strlen(k));
}

void mt_asr_out_ready(mt_asr_out *o)
{
    msgpack_packer pk;
    begin(o, &pk, "Ready", 0);
}

void mt_asr_out_word(mt_asr_out *o, const char *text, size_t len, double start_time)
{
    msgpack_packer pk;
    begin(o, &pk, "Word", 2);
    key(&pk, "text");
    msgpack_pack_str_with_body(&pk, text, len);
    key(&pk, "start_time");
    msgpack_pack_double(&pk, start_time);
}

void mt_asr_out_end_word(mt_asr_out *o, double stop_time)
{
    msgpack_packer pk;
    begin(o, &pk, "EndWord", 1);
    key(&pk, "stop_time");
    msgpack_pack_double(&pk, stop_time);
}

void mt_asr_out_step(mt_asr_out *o, uint64_t step_idx, const float *prs, size_t n_prs,
                     uint64_t buffered_pcm)
{
    msgpack_packer pk;
    begin(o, &pk, "Step", 3);
    key(&pk, "step_idx");
    msgpack_pack_uint64(&pk, step_idx);
    key(&pk, "prs");
    msgpack_pack_array(&pk, n_prs);
    for (size_t i = 0; i < n_prs; i++)
        msgpack_pack_float(&pk, prs[i]);
    key(&pk, "buffered_pcm");
    msgpack_pack_uint64(&pk, buffered_pcm);
}

void mt_asr_out_marker(mt_asr_out *o, int64_t id)
{
    msgpack_packer pk;
    begin(o, &pk, "Marker", 1);
    key(&pk, "id");
    msgpack_pack_int64(&pk, id);
}

void mt_asr_out_error(mt_asr_out *o, const char *message)
{
    msgpack_packer pk;
    begin(o, &pk, "Error", 1);
    key(&pk, "message");
    msgpack_pack_str_with_body(&pk, message, strlen(message));
}

void mt_asr_out_audio(mt_asr_out *o, const float *pcm, size_t n)
{
    msgpack_packer pk;
    begin(o, &pk, "Audio", 1);
    key(&pk, "pcm");
    msgpack_pack_array(&pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_float(&pk, pcm[i]);
}
