/* tokenizer.c: SentencePiece's .model file read for its pieces
 * (tokenizer.h), with a small protobuf reader of our own.
 *
 * The file is a ModelProto: field 1 is a repeated SentencePiece message
 * (field 1 piece: string, field 2 score: float, field 3 type: enum 1
 * NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE); every
 * other field, at either level, is skipped by its wire type. Every length
 * is checked against the bytes left in the message that holds it, a varint
 * longer than 64 bits and the group wire types are refused, and the file,
 * the piece count and each piece are capped (tokenizer.h), so a hostile
 * file gets a message, never a crash, a hang or a huge allocation. */
#include "model/tokenizer.h"
#include "util/errmsg.h"
#include "util/io.h"
#include "util/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { PIECE_NORMAL = 1, PIECE_UNKNOWN, PIECE_CONTROL, PIECE_USER_DEFINED,
       PIECE_UNUSED, PIECE_BYTE };

struct mt_tokenizer {
    int      n;      /* pieces */
    size_t  *off;    /* [n] each piece's start in text */
    uint8_t *type;   /* [n] its SentencePiece type */
    char    *text;   /* [sum of piece lengths + n] the pieces, converted,
                        each NUL-terminated */
};

/* ---- protobuf ----------------------------------------------------------------- */

typedef struct {
    const uint8_t *p, *end;
} pb;

/* A base-128 varint of at most 64 bits. 0, or -1 (truncated or too long). */
static int pb_varint(pb *b, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (b->p >= b->end)
            return -1;
        uint8_t c = *b->p++;
        if (i == 9 && c > 1)      /* bits past the 64th */
            return -1;
        x |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* A field's key: its number (1 .. 2^29-1) and wire type. */
static int pb_key(pb *b, uint32_t *field, int *wt, char *err, size_t errlen)
{
    uint64_t k;
    if (pb_varint(b, &k)) {
        mt_set_err(err, errlen, "a truncated or overlong varint");
        return -1;
    }
    if ((k >> 3) == 0 || (k >> 3) > 0x1fffffff) {
        mt_set_err(err, errlen, "field number %llu out of range",
                   (unsigned long long)(k >> 3));
        return -1;
    }
    *field = (uint32_t)(k >> 3);
    *wt = (int)(k & 7);
    return 0;
}

/* A length-delimited field's body, within what b has left. */
static int pb_bytes(pb *b, pb *sub, char *err, size_t errlen)
{
    uint64_t len;
    if (pb_varint(b, &len)) {
        mt_set_err(err, errlen, "a truncated or overlong length");
        return -1;
    }
    if (len > (uint64_t)(b->end - b->p)) {
        mt_set_err(err, errlen, "a length of %llu past the end of its message "
                   "(%zu bytes left)", (unsigned long long)len, (size_t)(b->end - b->p));
        return -1;
    }
    sub->p = b->p;
    sub->end = b->p + len;
    b->p += len;
    return 0;
}

/* Skips a field of wire type wt whose key was just read. */
static int pb_skip(pb *b, int wt, char *err, size_t errlen)
{
    uint64_t v;
    pb sub;
    size_t need;
    switch (wt) {
    case 0:
        if (pb_varint(b, &v)) {
            mt_set_err(err, errlen, "a truncated or overlong varint");
            return -1;
        }
        return 0;
    case 2:
        return pb_bytes(b, &sub, err, errlen);
    case 1:
    case 5:
        need = wt == 1 ? 8 : 4;
        if ((size_t)(b->end - b->p) < need) {
            mt_set_err(err, errlen, "a truncated fixed%zu field", need * 8);
            return -1;
        }
        b->p += need;
        return 0;
    default:                    /* 3, 4: groups (never in a ModelProto); 6, 7 */
        mt_set_err(err, errlen, "wire type %d not accepted", wt);
        return -1;
    }
}

/* ---- the pieces ----------------------------------------------------------------- */

/* One SentencePiece message: its piece and type. */
static int read_piece(pb *m, const uint8_t **piece, size_t *plen, int *type,
                      char *err, size_t errlen)
{
    *piece = NULL;
    *plen = 0;
    *type = PIECE_NORMAL;          /* the proto's default */
    while (m->p < m->end) {
        uint32_t field;
        int wt;
        if (pb_key(m, &field, &wt, err, errlen))
            return -1;
        if (field == 1 && wt == 2) {
            pb s;
            if (pb_bytes(m, &s, err, errlen))
                return -1;
            *piece = s.p;
            *plen = (size_t)(s.end - s.p);
        } else if (field == 3 && wt == 0) {
            uint64_t v;
            if (pb_varint(m, &v)) {
                mt_set_err(err, errlen, "a truncated or overlong varint");
                return -1;
            }
            if (v < PIECE_NORMAL || v > PIECE_BYTE) {
                mt_set_err(err, errlen, "type %llu (1 to 6 expected)", (unsigned long long)v);
                return -1;
            }
            *type = (int)v;
        } else if ((field == 1 || field == 3) || (field == 2 && wt != 5)) {
            mt_set_err(err, errlen, "field %u with wire type %d", field, wt);
            return -1;
        } else if (pb_skip(m, wt, err, errlen)) {  /* the score and the rest */
            return -1;
        }
    }
    if (!*piece) {
        mt_set_err(err, errlen, "no piece");
        return -1;
    }
    if (*plen == 0 || *plen > MT_TOKENIZER_MAX_PIECE) {
        mt_set_err(err, errlen, "a piece of %zu bytes (1 to %d)", *plen, MT_TOKENIZER_MAX_PIECE);
        return -1;
    }
    if (!mt_utf8_valid(*piece, *plen)) {
        mt_set_err(err, errlen, "a piece that is not UTF-8 (or holds a NUL)");
        return -1;
    }
    return 0;
}

/* Copies piece[0..n) to out with U+2581 (E2 96 81) as one space; the
 * bytes written (at most n), then a NUL. */
static size_t convert(char *out, const uint8_t *piece, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; ) {
        if (n - i >= 3 && piece[i] == 0xe2 && piece[i + 1] == 0x96 && piece[i + 2] == 0x81) {
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = (char)piece[i++];
        }
    }
    out[o] = '\0';
    return o;
}

mt_tokenizer *mt_tokenizer_parse(const uint8_t *buf, size_t len, char *err, size_t errlen)
{
    if (len > MT_TOKENIZER_MAX_BYTES) {
        mt_set_err(err, errlen, "%zu bytes (at most %u)", len, MT_TOKENIZER_MAX_BYTES);
        return NULL;
    }
    /* Pass 1 checks every field and counts the pieces and their bytes;
     * pass 2 copies them, so the allocation is exact. */
    size_t n = 0, bytes = 0;
    mt_tokenizer *t = NULL;
    for (int pass = 0; pass < 2; pass++) {
        pb b = { buf, buf + len };
        size_t i = 0, at = 0;
        while (b.p < b.end) {
            uint32_t field;
            int wt;
            size_t where = (size_t)(b.p - buf);
            char why[160];
            if (pb_key(&b, &field, &wt, why, sizeof why))
                goto bad;
            if (field != 1) {
                if (pb_skip(&b, wt, why, sizeof why))
                    goto bad;
                continue;
            }
            pb m;
            const uint8_t *piece;
            size_t plen;
            int type;
            if (wt != 2) {
                mt_set_err(why, sizeof why, "pieces (field 1) with wire type %d", wt);
                goto bad;
            }
            if (pb_bytes(&b, &m, why, sizeof why) ||
                read_piece(&m, &piece, &plen, &type, why, sizeof why))
                goto bad;
            if (pass == 0) {
                if (n == MT_TOKENIZER_MAX_PIECES) {
                    mt_set_err(err, errlen, "more than %d pieces", MT_TOKENIZER_MAX_PIECES);
                    return NULL;
                }
                n++;
                bytes += plen + 1;
            } else {
                t->off[i] = at;
                t->type[i] = (uint8_t)type;
                at += convert(t->text + at, piece, plen) + 1;
                i++;
            }
            continue;
        bad:
            mt_set_err(err, errlen, "not a SentencePiece model: at byte %zu: %s", where, why);
            mt_tokenizer_free(t);
            return NULL;
        }
        if (pass == 0) {
            if (n == 0) {
                mt_set_err(err, errlen, "not a SentencePiece model: no pieces");
                return NULL;
            }
            t = mt_calloc_or_err(1, sizeof *t, err, errlen, "tokenizer");
            if (!t)
                return NULL;
            t->n = (int)n;
            t->off = malloc(n * sizeof *t->off);
            t->type = malloc(n);
            t->text = malloc(bytes);
            if (!t->off || !t->type || !t->text) {
                mt_set_err(err, errlen, "tokenizer: out of memory (%zu pieces)", n);
                mt_tokenizer_free(t);
                return NULL;
            }
        }
    }
    return t;
}

/* ---- the file ------------------------------------------------------------------- */

mt_tokenizer *mt_tokenizer_load_err(const char *path, char *err, size_t errlen)
{
    size_t size;
    uint8_t *buf = (uint8_t *)mt_read_regular(path, MT_TOKENIZER_MAX_BYTES, &size, err, errlen);
    if (!buf)
        return NULL;
    char why[256];
    mt_tokenizer *t = mt_tokenizer_parse(buf, size, why, sizeof why);
    free(buf);
    if (!t)
        mt_set_err(err, errlen, "%s: %s", path, why);
    return t;
}

static _Thread_local char last_err[512];

mt_tokenizer *mt_tokenizer_load(const char *path)
{
    last_err[0] = '\0';
    return mt_tokenizer_load_err(path, last_err, sizeof last_err);
}

const char *mt_tokenizer_error(void)
{
    return last_err;
}

int mt_tokenizer_size(const mt_tokenizer *t)
{
    return t->n;
}

const char *mt_tokenizer_piece(const mt_tokenizer *t, int id)
{
    if (id < 0 || id >= t->n || t->type[id] == PIECE_CONTROL)
        return NULL;
    return t->text + t->off[id];
}

void mt_tokenizer_free(mt_tokenizer *t)
{
    if (!t)
        return;
    free(t->off);
    free(t->type);
    free(t->text);
    free(t);
}

int mt_tokenizer_kyutai_silent(int32_t id)
{
    return id == 0 || id == 3;
}
