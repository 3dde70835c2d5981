/* safetensors.c: parse, convert and write the safetensors container. Every
 * byte is hostile: all sizes are checked for overflow before use, and a
 * bad file gets one message naming the file, the tensor and the problem. */
#include "util/errmsg.h"
#include "model/json_obj.h"
#include "model/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct { const char *name; int size; } dtypes[MT_ST_NDTYPES] = {
    [MT_ST_F32] = { "F32", 4 },   [MT_ST_F16] = { "F16", 2 },
    [MT_ST_BF16] = { "BF16", 2 }, [MT_ST_F64] = { "F64", 8 },
    [MT_ST_I64] = { "I64", 8 },   [MT_ST_I32] = { "I32", 4 },
    [MT_ST_I16] = { "I16", 2 },   [MT_ST_I8] = { "I8", 1 },
    [MT_ST_U8] = { "U8", 1 },     [MT_ST_BOOL] = { "BOOL", 1 },
    [MT_ST_U16] = { "U16", 2 },   [MT_ST_U32] = { "U32", 4 },
    [MT_ST_U64] = { "U64", 8 },   [MT_ST_F8_E4M3] = { "F8_E4M3", 1 },
    [MT_ST_F8_E5M2] = { "F8_E5M2", 1 },
};

int mt_st_dtype_size(int dt) { return dt >= 0 && dt < MT_ST_NDTYPES ? dtypes[dt].size : 0; }
const char *mt_st_dtype_name(int dt) { return dt >= 0 && dt < MT_ST_NDTYPES ? dtypes[dt].name : "?"; }

/* ---- conversions ---------------------------------------------------------- */

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float mt_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t mt_f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)          /* NaN: keep it quiet NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);              /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float mt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in fp32 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31)
        return u2f(sign | 0x7f800000u | (man << 13));
    return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t mt_f32_to_f16(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)                          /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u)                         /* >= 65520: rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {                        /* below 2^-14: subnormal */
        if (a < 0x33000000u)                      /* below 2^-25: rounds to 0 */
            return sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)e;                 /* 14..24 bits out */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias and round the 13 dropped bits to nearest even */
    uint32_t v = a - 0x38000000u;
    v += 0xfffu + ((v >> 13) & 1u);
    return (uint16_t)(sign | (v >> 13));
}

int mt_st_to_f32(const mt_st_tensor *t, float *dst)
{
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case MT_ST_F32:
        memcpy(dst, p, (size_t)t->numel * 4);
        return 0;
    case MT_ST_F16:
        for (uint64_t i = 0; i < t->numel; i++)
            dst[i] = mt_f16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
        return 0;
    case MT_ST_BF16:
        for (uint64_t i = 0; i < t->numel; i++)
            dst[i] = mt_bf16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
        return 0;
    }
    return -1;
}

/* ---- parser ----------------------------------------------------------------- */

void mt_st_free(mt_st_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n; i++)
        free(f->t[i].name);
    free(f->t);
    f->t = NULL;
    f->n = 0;
}

const mt_st_tensor *mt_st_find(const mt_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

static int by_begin(const void *a, const void *b)
{
    const mt_st_tensor *x = *(const mt_st_tensor *const *)a, *y = *(const mt_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* One header entry -> *t; returns 0 or -1 with the message. */
static int parse_entry(const char *file, const char *name, json_t *v, mt_st_tensor *t,
                       uint64_t data_len, char *err, size_t errlen)
{
    if (!json_is_object(v)) {
        mt_set_err(err, errlen, "%s: tensor '%s': header entry is not an object", file, name);
        return -1;
    }
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt)) {
        mt_set_err(err, errlen, "%s: tensor '%s': dtype missing or not a string", file, name);
        return -1;
    }
    t->dtype = -1;
    for (int i = 0; i < MT_ST_NDTYPES; i++)
        if (strcmp(json_string_value(dt), dtypes[i].name) == 0)
            t->dtype = i;
    if (t->dtype < 0) {
        mt_set_err(err, errlen, "%s: tensor '%s': unknown dtype '%.32s'", file, name,
                 json_string_value(dt));
        return -1;
    }
    if (!json_is_array(sh)) {
        mt_set_err(err, errlen, "%s: tensor '%s': shape missing or not a list", file, name);
        return -1;
    }
    if (json_array_size(sh) > MT_ST_MAX_DIMS) {
        mt_set_err(err, errlen, "%s: tensor '%s': shape has %zu dimensions (at most %d)",
                 file, name, json_array_size(sh), MT_ST_MAX_DIMS);
        return -1;
    }
    t->ndim = (int)json_array_size(sh);
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < t->ndim; d++) {
        json_t *e = json_array_get(sh, (size_t)d);
        if (!json_is_integer(e) || json_integer_value(e) < 0) {
            mt_set_err(err, errlen, "%s: tensor '%s': shape[%d] is not a non-negative "
                     "integer", file, name, d);
            return -1;
        }
        t->shape[d] = (uint64_t)json_integer_value(e);
        if (__builtin_mul_overflow(numel, t->shape[d], &numel))
            overflow = 1;
    }
    uint64_t bytes;
    if (overflow || __builtin_mul_overflow(numel, (uint64_t)dtypes[t->dtype].size, &bytes)) {
        mt_set_err(err, errlen, "%s: tensor '%s': size of the shape overflows 64 bits "
                 "(integer overflow)", file, name);
        return -1;
    }
    t->numel = numel;
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)) ||
        json_integer_value(json_array_get(off, 0)) < 0 ||
        json_integer_value(json_array_get(off, 1)) < 0) {
        mt_set_err(err, errlen, "%s: tensor '%s': data_offsets missing or not two "
                 "non-negative integers", file, name);
        return -1;
    }
    t->begin = (uint64_t)json_integer_value(json_array_get(off, 0));
    t->end = (uint64_t)json_integer_value(json_array_get(off, 1));
    if (t->begin > t->end) {
        mt_set_err(err, errlen, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                 "] out of range: begin after end", file, name, t->begin, t->end);
        return -1;
    }
    if (t->end > data_len) {
        mt_set_err(err, errlen, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                 "] out of range: past the end of the data (%" PRIu64 " bytes; "
                 "truncated file?)", file, name, t->begin, t->end, data_len);
        return -1;
    }
    if (t->end - t->begin != bytes) {
        mt_set_err(err, errlen, "%s: tensor '%s': data_offsets span %" PRIu64 " bytes "
                 "but dtype %s x shape needs %" PRIu64 " (size mismatch)", file, name,
                 t->end - t->begin, dtypes[t->dtype].name, bytes);
        return -1;
    }
    return 0;
}

int mt_st_parse(const void *buf, size_t len, const char *file, mt_st_file *out,
                char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const uint8_t *p = buf;
    if (len < 8) {
        mt_set_err(err, errlen, "%s: header: truncated file (%zu bytes, need at least "
                 "the 8-byte header length)", file, len);
        return -1;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    if (hlen > len - 8) {
        mt_set_err(err, errlen, "%s: header: length %" PRIu64 " is past the end of "
                 "the file (%zu bytes after the length; truncated file?)", file,
                 hlen, len - 8);
        return -1;
    }
    if (hlen > MT_ST_MAX_HEADER) {
        mt_set_err(err, errlen, "%s: header: length %" PRIu64 " is over the %u-byte "
                 "limit", file, hlen, MT_ST_MAX_HEADER);
        return -1;
    }
    char what[1024];
    snprintf(what, sizeof what, "%s: header", file);
    json_t *root = mt_json_object((const char *)p + 8, (size_t)hlen, what, err, errlen);
    if (!root)
        return -1;
    out->header_len = hlen;
    out->data_len = len - 8 - hlen;
    const uint8_t *data = p + 8 + hlen;
    size_t cap = json_object_size(root);
    out->t = calloc(cap ? cap : 1, sizeof *out->t);
    if (!out->t) {
        mt_set_err(err, errlen, "%s: header: out of memory", file);
        json_decref(root);
        return -1;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val) && !json_is_null(val)) {
                mt_set_err(err, errlen, "%s: header: __metadata__ is not an object", file);
                goto fail;
            }
            continue;
        }
        mt_st_tensor *t = &out->t[out->n];
        if (parse_entry(file, key, val, t, out->data_len, err, errlen) != 0)
            goto fail;
        t->name = strdup(key);
        if (!t->name) {
            mt_set_err(err, errlen, "%s: header: out of memory", file);
            goto fail;
        }
        t->data = data + t->begin;
        out->n++;
    }
    json_decref(root);
    root = NULL;
    /* overlaps: sorted by begin, each non-empty tensor must start at or
     * after the end of the one before */
    if (out->n > 1) {
        mt_st_tensor **s = malloc((size_t)out->n * sizeof *s);
        if (!s) {
            mt_set_err(err, errlen, "%s: header: out of memory", file);
            goto fail;
        }
        for (int i = 0; i < out->n; i++)
            s[i] = &out->t[i];
        qsort(s, (size_t)out->n, sizeof *s, by_begin);
        const mt_st_tensor *prev = NULL;
        for (int i = 0; i < out->n; i++) {
            if (s[i]->begin == s[i]->end)
                continue;
            if (prev && s[i]->begin < prev->end) {
                mt_set_err(err, errlen, "%s: tensor '%s': data_offsets [%" PRIu64 ", %"
                         PRIu64 "] overlap tensor '%s' [%" PRIu64 ", %" PRIu64 "]",
                         file, s[i]->name, s[i]->begin, s[i]->end, prev->name,
                         prev->begin, prev->end);
                free(s);
                goto fail;
            }
            prev = s[i];
        }
        free(s);
    }
    return 0;
fail:
    json_decref(root);
    mt_st_free(out);
    return -1;
}

/* ---- writer ------------------------------------------------------------------ */

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

int mt_st_write(const char *path, const mt_st_out *t, int n, int dtype, char *err,
                size_t errlen)
{
    if (dtype != MT_ST_F32 && dtype != MT_ST_F16 && dtype != MT_ST_BF16) {
        mt_set_err(err, errlen, "%s: cannot write dtype %d", path, dtype);
        return -1;
    }
    int es = dtypes[dtype].size;
    json_t *root = json_object();
    json_t *meta = json_pack("{s:s}", "format", "pt");
    if (!root || !meta || json_object_set_new(root, "__metadata__", meta) != 0) {
        json_decref(root);
        mt_set_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        json_t *sh = json_array();
        for (int d = 0; d < t[i].ndim; d++) {
            numel *= t[i].shape[d];
            json_array_append_new(sh, json_integer((json_int_t)t[i].shape[d]));
        }
        uint64_t end = off + numel * (uint64_t)es;
        json_t *e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", dtypes[dtype].name, "shape", sh,
                              "data_offsets", (json_int_t)off, (json_int_t)end);
        if (!e || json_object_set_new(root, t[i].name, e) != 0) {
            json_decref(root);
            mt_set_err(err, errlen, "%s: out of memory", path);
            return -1;
        }
        off = end;
    }
    char *hdr = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!hdr) {
        mt_set_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        free(hdr);
        mt_set_err(err, errlen, "%s: path too long", path);
        return -1;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        mt_set_err(err, errlen, "%s: %s", tmp, strerror(errno));
        free(hdr);
        return -1;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int bad = write_all(f, len8, 8) || write_all(f, hdr, hl);
    for (size_t i = hl; i < padded && !bad; i++)
        bad = fputc(' ', f) == EOF;
    free(hdr);
    uint8_t chunk[65536];
    for (int i = 0; i < n && !bad; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++)
            numel *= t[i].shape[d];
        const float *src = t[i].data;
        size_t per = sizeof chunk / (size_t)es;
        for (uint64_t k = 0; k < numel && !bad; k += per) {
            size_t m = numel - k < per ? (size_t)(numel - k) : per;
            for (size_t j = 0; j < m; j++) {
                float v = src[k + j];
                if (dtype == MT_ST_F32) {
                    uint32_t u = f2u(v);
                    for (int b = 0; b < 4; b++)
                        chunk[4 * j + b] = (uint8_t)(u >> (8 * b));
                } else {
                    uint16_t h = dtype == MT_ST_F16 ? mt_f32_to_f16(v) : mt_f32_to_bf16(v);
                    chunk[2 * j] = (uint8_t)h;
                    chunk[2 * j + 1] = (uint8_t)(h >> 8);
                }
            }
            bad = write_all(f, chunk, m * (size_t)es);
        }
    }
    if (fclose(f) != 0)
        bad = 1;
    if (bad || rename(tmp, path) != 0) {
        mt_set_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int mt_st_check_float(const mt_st_tensor *t, const char *file, char *err, size_t errlen)
{
    if (t->dtype == MT_ST_F32 || t->dtype == MT_ST_F16 || t->dtype == MT_ST_BF16)
        return 0;
    mt_set_err(err, errlen, "%s: tensor '%s': unsupported dtype %s (F32, F16 or BF16 needed)",
               file, t->name, mt_st_dtype_name(t->dtype));
    return -1;
}

void mt_st_shape_str(const mt_st_tensor *t, char *buf, size_t cap)
{
    size_t o = 0;
    if (cap)
        buf[0] = '\0';
    for (int d = 0; d < t->ndim && o < cap; d++) {
        int k = snprintf(buf + o, cap - o, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
        if (k < 0)
            break;
        o += (size_t)k;
    }
}
