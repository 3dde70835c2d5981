/* latline.c: writer and strict parser of the latency lines (logfmt), and the
 * tick and frame records mt-serve prints (format in latline.h).
 *
 * The lines are the project's measurement record: mt-admit steers admission
 * by them and mt-probe computes percentiles from them, so a malformed line
 * must be refused loudly (line number, key, what is wrong) rather than half
 * read. The parser copies keys and unescaped values into the record's own
 * buffer and never allocates; no input, however long or binary, can make it
 * read or write outside its buffers.
 */
#include "util/errmsg.h"
#include "wire/latline.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parser -------------------------------------------------------------- */

/* Byte classes, looked up rather than compared: the parser runs over
 * every byte of every line mt-admit and mt-probe read. */
enum { C_KEY = 1, C_BARE_BAD = 2, C_QUOTED_BAD = 4, C_NUM = 8 };

static const uint8_t byte_class[256] = {
    /* control bytes: in no value */
    [0x00 ... 0x1f] = C_BARE_BAD | C_QUOTED_BAD,
    [0x7f] = C_BARE_BAD | C_QUOTED_BAD,
    ['"'] = C_BARE_BAD,
    ['='] = C_BARE_BAD,
    ['a' ... 'd'] = C_KEY,
    ['f' ... 'z'] = C_KEY,
    ['_'] = C_KEY,
    /* C_NUM: what a plain decimal number is written with (mt_latline_f64) */
    ['0' ... '9'] = C_KEY | C_NUM,
    ['e'] = C_KEY | C_NUM,
    ['E'] = C_NUM, ['+'] = C_NUM, ['-'] = C_NUM, ['.'] = C_NUM,
};

static int key_char(unsigned char c)
{
    return byte_class[c] & C_KEY;
}

/* FNV-1a over a key's bytes: the key index's hash. */
#define KEY_HASH0 2166136261u
static uint32_t key_hash_step(uint32_t h, unsigned char c)
{
    return (h ^ c) * 16777619u;
}

/* The slot of key[0..klen) in ll's index: the one holding it, or the
 * empty one where it would go. The index is never full (MT_LL_SLOTS is
 * twice MT_LL_MAX_PAIRS), so the probe ends. */
static int key_slot(const mt_latline *ll, const char *key, size_t klen,
                    uint32_t h)
{
    unsigned s = h & (MT_LL_SLOTS - 1);
    for (;;) {
        int k = ll->slot[s];
        if (k == 0)
            return (int)s;
        const mt_ll_pair *p = &ll->pair[k - 1];
        if ((size_t)p->klen == klen && memcmp(p->key, key, klen) == 0)
            return (int)s;
        s = (s + 1) & (MT_LL_SLOTS - 1);
    }
}

/* Copies at most `max` bytes of s[0..n) into out for an error message,
 * replacing anything unprintable so the message stays one clean line. */
static void sanitize(char *out, size_t outsz, const char *s, size_t n,
                     size_t max)
{
    size_t j = 0;
    if (n > max)
        n = max;
    for (size_t i = 0; i < n && j + 1 < outsz; i++) {
        unsigned char c = (unsigned char)s[i];
        out[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (outsz)
        out[j] = '\0';
}

/* The key at s[0..n) as an error message shows it (at least its first
 * byte, so an empty key shows what stood there). */
static const char *key_name(char *out, size_t outsz, const char *s, size_t n)
{
    sanitize(out, outsz, s, n ? n : 1, MT_LL_KEY_MAX);
    return out;
}

static const char *describe_byte(unsigned char c, char *tmp, size_t n)
{
    if (c >= 0x21 && c < 0x7f)
        snprintf(tmp, n, "'%c'", c);
    else
        snprintf(tmp, n, "byte 0x%02x", c);
    return tmp;
}

size_t mt_line_chomp(const char *line, size_t len)
{
    if (len > 0 && line[len - 1] == '\n')
        len--;
    if (len > 0 && line[len - 1] == '\r')
        len--;
    return len;
}

/* Where mt_latline_parse stands in its line, and what its error messages
 * need: the line, the next byte i, the bytes o of ll->buf used, and the key
 * being read (line[ks .. ks+klen)). The message buffers are each
 * function's own (key, tmp): a cursor whose address never escapes stays
 * in registers. */
typedef struct ll_cursor {
    const char *line;
    size_t      len, i, o;
    long        lineno;
    char       *err;
    size_t      errlen;
    size_t      ks, klen;
} ll_cursor;

/* the current key for an error message, made only when there is one */
#define KEY key_name(key, sizeof key, c->line + c->ks, c->klen)

/* Reads the key at c->i into ll->buf (NUL-ended) and checks it: key bytes,
 * length, pair count, duplicates, room. *slot: its slot in ll->slot. 0, or
 * -1 with the message. */
static int read_key(mt_latline *ll, ll_cursor *c, int *slot)
{
    char key[MT_LL_KEY_MAX + 8], tmp[16];   /* for a message */
    const char *line = c->line;
    size_t len = c->len, i = c->i, ks = i;
    uint32_t h = KEY_HASH0;
    while (i < len && key_char((unsigned char)line[i]))
        h = key_hash_step(h, (unsigned char)line[i++]);
    size_t klen = i - ks;
    c->i = i;
    c->ks = ks;
    c->klen = klen;
    if (klen == 0) {
        mt_set_err(c->err, c->errlen, "line %ld: column %zu: expected a key, found %s",
                c->lineno, ks + 1,
                describe_byte((unsigned char)line[ks], tmp, sizeof tmp));
        return -1;
    }
    if (i < len && line[i] != '=' && line[i] != ' ') {
        sanitize(key, sizeof key, line + ks, klen + 1, MT_LL_KEY_MAX);
        mt_set_err(c->err, c->errlen, "line %ld: key '%s': bad character %s in key "
                "(keys are [a-z0-9_])", c->lineno, key,
                describe_byte((unsigned char)line[i], tmp, sizeof tmp));
        return -1;
    }
    if (klen > MT_LL_KEY_MAX) {
        mt_set_err(c->err, c->errlen, "line %ld: key '%s...': longer than %d bytes",
                c->lineno, KEY, MT_LL_KEY_MAX);
        return -1;
    }
    if (ll->n >= MT_LL_MAX_PAIRS) {
        mt_set_err(c->err, c->errlen, "line %ld: key '%s': more than %d pairs",
                c->lineno, KEY, MT_LL_MAX_PAIRS);
        return -1;
    }
    *slot = key_slot(ll, line + ks, klen, h);
    if (ll->slot[*slot]) {
        mt_set_err(c->err, c->errlen, "line %ld: key '%s': duplicate key",
                c->lineno, KEY);
        return -1;
    }
    /* Room check: each pair's output (key NUL value NUL) is at most one
     * byte longer than its input plus separator, so this never fires
     * for lines within MT_LL_MAX_LINE; it is here so that no future
     * change to the grammar can overrun buf. */
    if (c->o + klen + 1 > sizeof ll->buf) {
        mt_set_err(c->err, c->errlen, "line %ld: key '%s': record full", c->lineno, KEY);
        return -1;
    }
    memcpy(ll->buf + c->o, line + ks, klen);
    c->o += klen;
    ll->buf[c->o++] = '\0';
    return 0;
}

/* Reads a quoted value, c->i just past its opening quote, unescaped into
 * ll->buf (not yet NUL-ended). 0, or -1 with the message. */
static int read_quoted(mt_latline *ll, ll_cursor *c)
{
    char key[MT_LL_KEY_MAX + 8], tmp[16];   /* for a message */
    const char *line = c->line;
    char *buf = ll->buf;          /* a char store may alias *c: i, o local */
    size_t len = c->len, i = c->i, o = c->o;
    for (;;) {
        if (i >= len) {
            mt_set_err(c->err, c->errlen, "line %ld: key '%s': unterminated "
                    "quote", c->lineno, KEY);
            return -1;
        }
        unsigned char ch = (unsigned char)line[i];
        if (ch == '"') {
            i++;
            break;
        }
        if (ch == '\\') {
            if (i + 1 >= len) {
                mt_set_err(c->err, c->errlen, "line %ld: key '%s': "
                        "unterminated quote", c->lineno, KEY);
                return -1;
            }
            ch = (unsigned char)line[i + 1];
            if (ch != '"' && ch != '\\') {
                if (ch >= 0x21 && ch < 0x7f)
                    snprintf(tmp, sizeof tmp, "\\%c", ch);
                else
                    snprintf(tmp, sizeof tmp, "\\ + byte 0x%02x", ch);
                mt_set_err(c->err, c->errlen, "line %ld: key '%s': bad escape "
                        "'%s' (only \\\" and \\\\)", c->lineno, KEY, tmp);
                return -1;
            }
            i += 2;
        } else if (byte_class[ch] & C_QUOTED_BAD) {
            mt_set_err(c->err, c->errlen, "line %ld: key '%s': control %s in "
                    "value", c->lineno, KEY,
                    describe_byte(ch, tmp, sizeof tmp));
            return -1;
        } else {
            i++;
        }
        if (o + 1 >= sizeof ll->buf) {
            mt_set_err(c->err, c->errlen, "line %ld: key '%s': record full",
                    c->lineno, KEY);
            return -1;
        }
        buf[o++] = (char)ch;
    }
    c->i = i;
    c->o = o;
    if (i < len && line[i] != ' ') {
        mt_set_err(c->err, c->errlen, "line %ld: key '%s': %s after closing "
                "quote", c->lineno, KEY,
                describe_byte((unsigned char)line[i], tmp, sizeof tmp));
        return -1;
    }
    return 0;
}

/* Reads a bare value at c->i, up to the next space, into ll->buf (not yet
 * NUL-ended). Its bytes' classes are gathered and looked at once, the
 * first bad one found again only for the message. 0, or -1. */
static int read_bare(mt_latline *ll, ll_cursor *c)
{
    char key[MT_LL_KEY_MAX + 8], tmp[16];   /* for a message */
    const char *line = c->line;
    size_t len = c->len, i = c->i, vs = i;
    const char *sp = memchr(line + i, ' ', len - i);
    size_t ve = sp ? (size_t)(sp - line) : len;
    unsigned cls = 0;
    for (; i < ve; i++)
        cls |= byte_class[(unsigned char)line[i]];
    c->i = i;
    if (cls & C_BARE_BAD) {
        for (i = vs; !(byte_class[(unsigned char)line[i]] & C_BARE_BAD); i++)
            ;
        mt_set_err(c->err, c->errlen, "line %ld: key '%s': %s in unquoted "
                "value", c->lineno, KEY,
                describe_byte((unsigned char)line[i], tmp, sizeof tmp));
        return -1;
    }
    if (i == vs) {
        mt_set_err(c->err, c->errlen, "line %ld: key '%s': missing value "
                "after '=' (write \"\" for an empty one)", c->lineno, KEY);
        return -1;
    }
    if (c->o + (i - vs) + 1 > sizeof ll->buf) {
        mt_set_err(c->err, c->errlen, "line %ld: key '%s': record full",
                c->lineno, KEY);
        return -1;
    }
    memcpy(ll->buf + c->o, line + vs, i - vs);
    c->o += i - vs;
    return 0;
}

/* Reads one pair at c->i (a key, and "=value" if there is one) into the
 * next of ll->pair. 0, or -1 with the message. */
static int read_pair(mt_latline *ll, ll_cursor *c)
{
    char key[MT_LL_KEY_MAX + 8];   /* for a message */
    int slot;
    if (read_key(ll, c, &slot) != 0)
        return -1;
    const char *kout = ll->buf + c->o - c->klen - 1;
    const char *vout = "";
    int quoted = 0;
    if (c->i < c->len && c->line[c->i] == '=') {
        c->i++;
        if (c->o >= sizeof ll->buf) {
            mt_set_err(c->err, c->errlen, "line %ld: key '%s': record full",
                       c->lineno, KEY);
            return -1;
        }
        vout = ll->buf + c->o;
        if (c->i < c->len && c->line[c->i] == '"') {
            c->i++;
            quoted = 1;
            if (read_quoted(ll, c) != 0)
                return -1;
        } else if (read_bare(ll, c) != 0) {
            return -1;
        }
        ll->buf[c->o++] = '\0';
    }
    ll->pair[ll->n].key = kout;
    ll->pair[ll->n].val = vout;
    ll->pair[ll->n].quoted = quoted;
    ll->pair[ll->n].klen = (int)c->klen;
    ll->n++;
    ll->slot[slot] = (uint8_t)ll->n;
    return 0;
}
#undef KEY

int mt_latline_parse(const char *line, size_t len, long lineno,
                     mt_latline *ll, char *err, size_t errlen)
{
    if (!ll) {
        mt_set_err(err, errlen, "line %ld: no record to parse into", lineno);
        return -1;
    }
    ll->n = 0;
    memset(ll->slot, 0, sizeof ll->slot);
    if (!line && len > 0) {
        mt_set_err(err, errlen, "line %ld: no input", lineno);
        return -1;
    }
    /* The newline ends the line; it is not part of it. */
    len = mt_line_chomp(line, len);
    if (len > MT_LL_MAX_LINE) {
        mt_set_err(err, errlen, "line %ld: longer than %d bytes", lineno,
                MT_LL_MAX_LINE);
        return -1;
    }
    ll_cursor c = { .line = line, .len = len, .lineno = lineno, .err = err,
                    .errlen = errlen };
    while (c.i < len) {
        if (line[c.i] == ' ') {
            c.i++;
            continue;
        }
        if (read_pair(ll, &c) != 0)
            return -1;
    }
    return 0;
}

const char *mt_latline_kind(const mt_latline *ll)
{
    return ll && ll->n > 0 ? ll->pair[0].key : "";
}

const char *mt_latline_get(const mt_latline *ll, const char *key)
{
    if (!ll || !key)
        return NULL;
    uint32_t h = KEY_HASH0;
    size_t n = 0;
    for (; key[n]; n++)
        h = key_hash_step(h, (unsigned char)key[n]);
    int k = ll->slot[key_slot(ll, key, n, h)];
    /* the index holds the committed pairs only: k <= n */
    return k && k <= ll->n ? ll->pair[k - 1].val : NULL;
}

/* A value as an integer: [-+]?[0-9]+ within int64_t, nothing else (no
 * leading space, no "0x" as strtoll would take). 0, or -1. Read digit by
 * digit: mt-serve writes a tick line's twenty-odd fields every tick and
 * mt-admit reads each of them back. */
static int value_i64(const char *s, int64_t *v)
{
    const char *p = s;
    int neg = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    if (*p < '0' || *p > '9')
        return -1;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t m = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (m > (limit - d) / 10)
            return -1;          /* out of range, as strtoll's ERANGE */
        m = m * 10 + d;
    }
    if (*p != '\0')
        return -1;
    *v = neg ? (m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m) : (int64_t)m;
    return 0;
}

/* A value as a finite double: plain decimal only (no hex floats, no
 * nan/inf spellings, no spaces). 0, or -1. The fixed-decimal values the
 * writer makes ("12.345": at most 15 digits) are read exactly without
 * strtod: the digits are an integer below 2^53 and 10^k (k <= 15) is
 * exact, so their quotient is the correctly rounded value strtod gives
 * (Clinger's fast path). Anything else goes to strtod. */
static int value_f64(const char *s, double *v)
{
    static const double pow10[16] = {
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12,
        1e13, 1e14, 1e15,
    };
    if (*s == '\0')
        return -1;
    const char *p = s;
    int neg = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    uint64_t m = 0;
    int digits = 0, frac = -1;      /* frac: digits after the point */
    for (;; p++) {
        if (*p >= '0' && *p <= '9') {
            m = m * 10 + (unsigned)(*p - '0');
            digits++;
            if (frac >= 0)
                frac++;
            if (digits > 15)
                break;
        } else if (*p == '.' && frac < 0 && digits > 0) {
            frac = 0;
        } else {
            break;
        }
    }
    if (*p == '\0' && digits > 0 && digits <= 15 && frac != 0) {
        double x = (double)m;
        if (frac > 0)
            x /= pow10[frac];
        *v = neg ? -x : x;
        return 0;
    }
    for (p = s; *p; p++)
        if (!(byte_class[(unsigned char)*p] & C_NUM))
            return -1;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (*end != '\0' || end == s || !isfinite(x))
        return -1;
    *v = x;
    return 0;
}

int mt_latline_i64(const mt_latline *ll, const char *key, int64_t *v)
{
    const char *s = mt_latline_get(ll, key);
    if (!s)
        return 1;
    return value_i64(s, v);
}

int mt_latline_f64(const mt_latline *ll, const char *key, double *v)
{
    const char *s = mt_latline_get(ll, key);
    if (!s)
        return 1;
    return value_f64(s, v);
}

/* ---- writer -------------------------------------------------------------- */

void mt_ll_begin(mt_ll_writer *w, char *buf, size_t cap)
{
    w->buf = buf;
    w->cap = cap;
    w->len = 0;
    w->overflow = (buf == NULL || cap == 0);
    if (!w->overflow)
        buf[0] = '\0';
}

static void put_bytes(mt_ll_writer *w, const char *s, size_t n)
{
    if (w->overflow)
        return;
    if (w->cap - w->len <= n) { /* keep room for the NUL */
        w->overflow = 1;
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

/* Writes " key" (no space before the first key). An invalid key would make
 * the line unparseable, so it poisons the writer like an overflow does. */
static void put_key(mt_ll_writer *w, const char *key)
{
    size_t n = 0;
    if (key)
        while (n <= MT_LL_KEY_MAX && key_char((unsigned char)key[n]))
            n++;
    /* empty, too long, or a byte outside [a-z0-9_] before its end */
    if (n == 0 || n > MT_LL_KEY_MAX || key[n] != '\0') {
        w->overflow = 1;
        return;
    }
    if (w->len > 0)
        put_bytes(w, " ", 1);
    put_bytes(w, key, n);
}

static void put_fmt(mt_ll_writer *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put_fmt(mt_ll_writer *w, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        w->overflow = 1;
        return;
    }
    put_bytes(w, tmp, (size_t)n);
}

/* Writes "=" and v in decimal, with a '-' before it when neg: what
 * "=%llu" writes, without a format string to interpret (a tick line is
 * mostly integers, and mt-serve writes one per tick). */
static void put_dec(mt_ll_writer *w, uint64_t v, int neg)
{
    char tmp[24];           /* "=-" and 20 digits at most */
    char *p = tmp + sizeof tmp;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (neg)
        *--p = '-';
    *--p = '=';
    put_bytes(w, p, (size_t)(tmp + sizeof tmp - p));
}

void mt_ll_int(mt_ll_writer *w, const char *key, int64_t v)
{
    put_key(w, key);
    /* the magnitude as unsigned: -INT64_MIN does not fit an int64_t */
    put_dec(w, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
}

void mt_ll_u64(mt_ll_writer *w, const char *key, uint64_t v)
{
    put_key(w, key);
    put_dec(w, v, 0);
}

/* Fixed decimals, so columns line up and a reader never meets an exponent.
 * A NaN or infinity is written as nan/inf: the line stays parseable and the
 * typed reader refuses that value, rather than the writer hiding it. */
void mt_ll_f(mt_ll_writer *w, const char *key, double v, int decimals)
{
    if (decimals < 0)
        decimals = 0;
    if (decimals > 17)
        decimals = 17;
    put_key(w, key);
    put_fmt(w, "=%.*f", decimals, v);
}

void mt_ll_str(mt_ll_writer *w, const char *key, const char *v)
{
    put_key(w, key);
    put_bytes(w, "=", 1);
    if (!v)
        v = "";
    int quote = (*v == '\0');
    for (const char *p = v; *p; p++)
        if (*p == ' ' || *p == '"' || *p == '=' || *p == '\\' ||
            (unsigned char)*p < 0x20 || *p == 0x7f)
            quote = 1;
    if (!quote) {
        put_bytes(w, v, strlen(v));
        return;
    }
    put_bytes(w, "\"", 1);
    for (const char *p = v; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            char esc[2] = { '\\', (char)c };
            put_bytes(w, esc, 2);
        } else if (c < 0x20 || c == 0x7f) {
            /* The format has no escape for control characters; a log line
             * must stay one line, so they become '?'. */
            put_bytes(w, "?", 1);
        } else {
            put_bytes(w, p, 1);
        }
    }
    put_bytes(w, "\"", 1);
}

static void json_string(mt_ll_writer *w, const char *s)
{
    put_bytes(w, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            char esc[2] = { '\\', (char)c };
            put_bytes(w, esc, 2);
        } else if (c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put_bytes(w, esc, 6);
        } else {
            put_bytes(w, p, 1);
        }
    }
    put_bytes(w, "\"", 1);
}

void mt_ll_flag(mt_ll_writer *w, const char *key)
{
    put_key(w, key);
}

long mt_ll_end(mt_ll_writer *w)
{
    return w->overflow ? -1 : (long)w->len;
}

/* ---- JSON ---------------------------------------------------------------- */

/* JSON's number grammar exactly: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
 * A bare value outside it ("007", "+1", "1.") stays a string, so a JSON
 * reader never meets a number JSON refuses. */
static int json_number(const char *s)
{
    const char *p = s;
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (*p >= '0' && *p <= '9')
            p++;
    else
        return 0;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (*p < '0' || *p > '9')
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return *p == '\0';
}

long mt_latline_to_json(const char *line, size_t len, char *out, size_t cap,
                        char *err, size_t errlen)
{
    /* The record is large (4 KiB of text plus the pairs); a converter
     * called on every line of a tick should not allocate, and the callers'
     * stacks (the tick thread's) have room. */
    mt_latline ll;
    if (mt_latline_parse(line, len, 0, &ll, err, errlen) != 0)
        return -1;
    mt_ll_writer w;
    mt_ll_begin(&w, out, cap);
    put_bytes(&w, "{", 1);
    for (int k = 0; k < ll.n; k++) {
        const mt_ll_pair *p = &ll.pair[k];
        if (k > 0)
            put_bytes(&w, ",", 1);
        json_string(&w, p->key);
        put_bytes(&w, ":", 1);
        if (p->quoted)
            json_string(&w, p->val);
        else if (*p->val == '\0')
            put_bytes(&w, "true", 4);
        else if (json_number(p->val))
            put_bytes(&w, p->val, strlen(p->val));
        else if (strcmp(p->val, "nan") == 0 || strcmp(p->val, "-nan") == 0 ||
                 strcmp(p->val, "inf") == 0 || strcmp(p->val, "-inf") == 0)
            put_bytes(&w, "null", 4);
        else
            json_string(&w, p->val);
    }
    put_bytes(&w, "}", 1);
    if (w.overflow) {
        mt_set_err(err, errlen, "JSON line longer than %zu bytes", cap ? cap - 1 : 0);
        return -1;
    }
    return (long)w.len;
}

/* ---- the tick record ----------------------------------------------------- */

enum field_kind { F_INT, F_DBL };

static const struct tick_field {
    const char *key;
    size_t klen;
    enum field_kind kind;
    int decimals;
    size_t off;
} tick_fields[] = {
#define I(name) { #name, sizeof #name - 1, F_INT, 0, offsetof(mt_tick, name) }
#define D(name, dec) { #name, sizeof #name - 1, F_DBL, dec, offsetof(mt_tick, name) }
    I(tick), D(t, 3), I(active), I(stepped), D(step_ms, 3), D(late_ms, 3),
    D(p50_ms, 3), D(p99_ms, 3), I(in), I(out), I(fill), I(kv_used),
    I(kv_free), I(pending), I(admitted), I(rejected), I(preempted),
    D(naive_ms, 3), D(naive_met, 1), D(met, 1),
#undef I
#undef D
};
#define N_TICK_FIELDS (sizeof tick_fields / sizeof tick_fields[0])

/* A device label: [a-z0-9:._-]{1,MT_TICK_DEVICE_MAX-1}, so it is one bare
 * logfmt value and fits the struct. */
static int device_ok(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n >= MT_TICK_DEVICE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == ':' ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

long mt_tick_format(const mt_tick *t, char *buf, size_t cap)
{
    mt_ll_writer w;
    mt_ll_begin(&w, buf, cap);
    if (!t)
        return -1;
    /* the table's keys are [a-z0-9_]{1,32} (test_latline reads back every
     * line written here): written as they are, not checked per tick */
    for (size_t k = 0; k < N_TICK_FIELDS; k++) {
        const struct tick_field *f = &tick_fields[k];
        const char *p = (const char *)t + f->off;
        if (w.len > 0)
            put_bytes(&w, " ", 1);
        put_bytes(&w, f->key, f->klen);
        if (f->kind == F_INT) {
            int64_t v = *(const int64_t *)(const void *)p;
            put_dec(&w, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
        } else {
            put_fmt(&w, "=%.*f", f->decimals, *(const double *)(const void *)p);
        }
    }
    if (t->miss >= 0)
        mt_ll_int(&w, "miss", t->miss);
    if (t->device[0]) {
        mt_ll_str(&w, "device", t->device);
        if (!device_ok(t->device))
            return -1;
        if (strncmp(t->device, "sim:", 4) == 0) {
            mt_ll_f(&w, "sim_pred_ms", t->sim_pred_ms, 3);
            mt_ll_f(&w, "sim_noise_ms", t->sim_noise_ms, 3);
        }
    }
    if (t->shed >= 0)
        mt_ll_int(&w, "shed", t->shed);
    if (t->has_limit) {
        if (t->limit < 0)
            return -1;
        mt_ll_int(&w, "limit", t->limit);
    }
    return mt_ll_end(&w);
}

/* The value of key, looked for first at pair `at`, where the writer puts
 * it (the table's order), then through the index: a key is in a parsed
 * line at most once, so either finds the same pair. NULL when absent. */
static const char *field_value(const mt_latline *ll, size_t at, const char *key)
{
    if (at < (size_t)ll->n) {
        const mt_ll_pair *p = &ll->pair[at];
        if (strcmp(p->key, key) == 0)
            return p->val;
    }
    return mt_latline_get(ll, key);
}

/* Reads one typed key into *dst (int64_t or double), looking first at
 * pair `at` (field_value). 0 read, 1 absent (err says "missing"), -1
 * malformed (err says what it holds). */
static int read_field(const mt_latline *ll, long lineno, size_t at,
                      const char *key, enum field_kind kind, void *dst,
                      char *err, size_t errlen)
{
    char shown[40];
    int rc;
    const char *s = field_value(ll, at, key);
    if (!s) {
        rc = 1;
    } else if (kind == F_INT) {
        int64_t v = 0;
        rc = value_i64(s, &v);
        if (rc == 0)
            *(int64_t *)dst = v;
    } else {
        double v = 0;
        rc = value_f64(s, &v);
        if (rc == 0)
            *(double *)dst = v;
    }
    if (rc == 1) {
        mt_set_err(err, errlen, "line %ld: key '%s': missing", lineno, key);
    } else if (rc < 0) {
        sanitize(shown, sizeof shown, s, strlen(s), 32);
        mt_set_err(err, errlen, "line %ld: key '%s': not %s: '%s'", lineno, key,
                kind == F_INT ? "an integer" : "a finite number", shown);
    }
    return rc;
}

int mt_latline_expect(const mt_latline *ll, const void *rec, long lineno,
                      const char *kind, const char *what, char *err,
                      size_t errlen)
{
    char shown[40];
    if (!ll || !rec) {
        mt_set_err(err, errlen, "line %ld: no record", lineno);
        return -1;
    }
    const char *k = mt_latline_kind(ll);
    if (strcmp(k, kind) == 0)
        return 0;
    sanitize(shown, sizeof shown, k, strlen(k), 32);
    mt_set_err(err, errlen, "line %ld: key '%s': not %s (first key is '%s')",
            lineno, kind, what, shown);
    return -1;
}

int mt_tick_from_line(const mt_latline *ll, long lineno, mt_tick *t,
                      char *err, size_t errlen)
{
    if (mt_latline_expect(ll, t, lineno, "tick", "a tick record", err, errlen))
        return -1;
    mt_tick tmp;
    memset(&tmp, 0, sizeof tmp);
    for (size_t k = 0; k < N_TICK_FIELDS; k++) {
        const struct tick_field *f = &tick_fields[k];
        if (read_field(ll, lineno, k, f->key, f->kind, (char *)&tmp + f->off,
                       err, errlen) != 0)
            return -1;
    }
    /* miss came later than the other keys: absent is "not recorded" */
    int rc = read_field(ll, lineno, N_TICK_FIELDS, "miss", F_INT, &tmp.miss, err, errlen);
    if (rc == 1)
        tmp.miss = -1;
    else if (rc < 0)
        return -1;
    else if (tmp.miss < 0) {
        mt_set_err(err, errlen, "line %ld: key 'miss': negative", lineno);
        return -1;
    }
    char shown[40];
    const char *dev = mt_latline_get(ll, "device");
    if (dev) {
        if (!device_ok(dev)) {
            sanitize(shown, sizeof shown, dev, strlen(dev), 32);
            mt_set_err(err, errlen, "line %ld: key 'device': not a device label "
                    "([a-z0-9:._-], 1..%d bytes): '%s'", lineno,
                    MT_TICK_DEVICE_MAX - 1, shown);
            return -1;
        }
        memcpy(tmp.device, dev, strlen(dev) + 1);
        if (strncmp(dev, "sim:", 4) == 0) {
            static const char *const simk[2] = { "sim_pred_ms", "sim_noise_ms" };
            double *dst[2] = { &tmp.sim_pred_ms, &tmp.sim_noise_ms };
            for (int k = 0; k < 2; k++) {
                int rc = mt_latline_f64(ll, simk[k], dst[k]);
                if (rc == 1) {
                    mt_set_err(err, errlen, "line %ld: key '%s': missing (device %s is simulated)",
                            lineno, simk[k], dev);
                    return -1;
                }
                if (rc < 0) {
                    const char *s = mt_latline_get(ll, simk[k]);
                    sanitize(shown, sizeof shown, s, strlen(s), 32);
                    mt_set_err(err, errlen, "line %ld: key '%s': not a finite number: '%s'",
                            lineno, simk[k], shown);
                    return -1;
                }
            }
        }
    }
    /* shed came with issue 24: absent is "not recorded" */
    rc = read_field(ll, lineno, SIZE_MAX, "shed", F_INT, &tmp.shed, err, errlen);
    if (rc == 1)
        tmp.shed = -1;
    else if (rc < 0)
        return -1;
    else if (tmp.shed < 0) {
        mt_set_err(err, errlen, "line %ld: key 'shed': negative", lineno);
        return -1;
    }
    rc = read_field(ll, lineno, SIZE_MAX, "limit", F_INT, &tmp.limit, err, errlen);
    if (rc < 0)
        return -1;
    if (rc == 0 && tmp.limit < 0) {
        mt_set_err(err, errlen, "line %ld: key 'limit': negative", lineno);
        return -1;
    }
    tmp.has_limit = rc == 0;
    *t = tmp;
    return 0;
}

/* ---- the frame record ----------------------------------------------------- */

long mt_frame_rec_format(const mt_frame_rec *r, char *buf, size_t cap)
{
    mt_ll_writer w;
    mt_ll_begin(&w, buf, cap);
    if (!r)
        return -1;
    mt_ll_u64(&w, "frame", r->frame);
    mt_ll_u64(&w, "session", r->session);
    mt_ll_f(&w, "t", r->t, 3);
    mt_ll_int(&w, "fill", r->fill);
    mt_ll_f(&w, "latency_ms", r->latency_ms, 3);
    if (!r->fill) {
        mt_ll_f(&w, "wait_ms", r->wait_ms, 3);
        mt_ll_f(&w, "compute_ms", r->compute_ms, 3);
    }
    mt_ll_int(&w, "met", r->met);
    return mt_ll_end(&w);
}

/* An integer key that must lie in lo..hi. */
static int read_range(const mt_latline *ll, long lineno, const char *key,
                      int64_t lo, int64_t hi, int64_t *v, char *err,
                      size_t errlen)
{
    if (read_field(ll, lineno, SIZE_MAX, key, F_INT, v, err, errlen) != 0)
        return -1;
    if (*v < lo || *v > hi) {
        mt_set_err(err, errlen, "line %ld: key '%s': %lld outside %lld..%lld",
                lineno, key, (long long)*v, (long long)lo, (long long)hi);
        return -1;
    }
    return 0;
}

int mt_frame_rec_from_line(const mt_latline *ll, long lineno, mt_frame_rec *r,
                           char *err, size_t errlen)
{
    if (mt_latline_expect(ll, r, lineno, "frame", "a frame record", err, errlen))
        return -1;
    mt_frame_rec tmp;
    memset(&tmp, 0, sizeof tmp);
    int64_t frame, session;
    if (read_range(ll, lineno, "frame", 0, INT64_MAX, &frame, err, errlen) ||
        read_range(ll, lineno, "session", 0, INT64_MAX, &session, err, errlen) ||
        read_field(ll, lineno, SIZE_MAX, "t", F_DBL, &tmp.t, err, errlen) ||
        read_range(ll, lineno, "fill", 0, 1, &tmp.fill, err, errlen) ||
        read_field(ll, lineno, SIZE_MAX, "latency_ms", F_DBL, &tmp.latency_ms, err, errlen))
        return -1;
    if (!tmp.fill &&
        (read_field(ll, lineno, SIZE_MAX, "wait_ms", F_DBL, &tmp.wait_ms, err, errlen) ||
         read_field(ll, lineno, SIZE_MAX, "compute_ms", F_DBL, &tmp.compute_ms, err, errlen)))
        return -1;
    if (read_range(ll, lineno, "met", 0, 1, &tmp.met, err, errlen))
        return -1;
    tmp.frame = (uint64_t)frame;
    tmp.session = (uint64_t)session;
    *r = tmp;
    return 0;
}
