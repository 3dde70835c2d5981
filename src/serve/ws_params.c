/* ws_params.c: Kyutai's /api/chat URL parameters into a HELLO's sampling
 * block and seed (ws_params.h). */
#include "serve/ws_params.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VAL_MAX 64   /* bytes of one decoded value */

/* Percent-decodes s[0..n) into out (cap bytes with the NUL): 0, or -1
 * (too long, a bad escape, a control byte). */
static int pct_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            char hex[3] = { 0, 0, 0 };
            if (i + 2 >= n)
                return -1;
            hex[0] = s[i + 1];
            hex[1] = s[i + 2];
            char *end;
            long x = strtol(hex, &end, 16);
            if (*end || end != hex + 2)
                return -1;
            ch = (int)x;
            i += 2;
        } else if (ch == '+') {
            ch = ' ';
        }
        if (ch < 0x20 || ch == 0x7f || o + 1 >= cap)
            return -1;   /* a control byte would reach the log as it is */
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return 0;
}

static int num_double(const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(d) || d < lo || d > hi)
        return -1;
    *out = d;
    return 0;
}

static int num_u64(const char *v, uint64_t hi, uint64_t *out)
{
    char *end;
    if (*v < '0' || *v > '9')
        return -1;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end || errno || x > hi)
        return -1;
    *out = x;
    return 0;
}

static void append(char *buf, size_t cap, const char *sep, const char *s)
{
    size_t n = strlen(buf);
    if (n + 1 < cap)
        snprintf(buf + n, cap - n, "%s%s", n ? sep : "", s);
}

/* One parameter name=v: into h and the seeds (have: bit 0 text, 1 audio);
 * 1 when honoured, 0 when not ours, -1 out of range (why said). */
static int one_param(const char *name, const char *v, mt_hello *h, uint64_t seeds[2],
                     int *have, char *why, size_t whycap)
{
    static const struct { const char *name; uint8_t bit; int text; } temps[] = {
        { "text_temperature", MT_SMP_TEMP_TEXT, 1 }, { "audio_temperature", MT_SMP_TEMP, 0 },
    }, topks[] = {
        { "text_topk", MT_SMP_TOPK_TEXT, 1 }, { "audio_topk", MT_SMP_TOPK, 0 },
    };
    for (int i = 0; i < 2; i++) {
        if (!strcmp(name, temps[i].name)) {
            double d;
            if (num_double(v, 0, MT_SMP_TEMP_MAX, &d)) {
                snprintf(why, whycap, "%s=%.40s: not a number in 0..%g", name, v,
                         (double)MT_SMP_TEMP_MAX);
                return -1;
            }
            *(temps[i].text ? &h->temp_text : &h->temp) = (float)d;
            h->smp_mask |= temps[i].bit;
            return 1;
        }
        if (!strcmp(name, topks[i].name)) {
            uint64_t k;
            if (num_u64(v, MT_SMP_TOPK_MAX, &k)) {
                snprintf(why, whycap, "%s=%.40s: not a whole number in 0..%d", name, v,
                         MT_SMP_TOPK_MAX);
                return -1;
            }
            *(topks[i].text ? &h->top_k_text : &h->top_k) = (uint32_t)k;
            h->smp_mask |= topks[i].bit;
            return 1;
        }
    }
    int s = !strcmp(name, "text_seed") ? 0 : !strcmp(name, "audio_seed") ? 1 : -1;
    if (s < 0)
        return 0;
    if (num_u64(v, UINT64_MAX, &seeds[s])) {
        snprintf(why, whycap, "%s=%.40s: not a whole number in 0..2^64-1", name, v);
        return -1;
    }
    *have |= 1 << s;
    return 1;
}

int mt_ws_chat_params(const char *query, mt_hello *h, uint64_t *seed, char *said,
                      size_t saidcap, char *ignored, size_t igncap, char *why,
                      size_t whycap)
{
    uint64_t seeds[2] = { 0, 0 };
    int have = 0;
    said[0] = ignored[0] = '\0';
    *seed = 0;
    for (const char *p = query ? query : ""; *p;) {
        const char *e = strchr(p, '&');
        if (!e)
            e = p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(e - p));
        char name[VAL_MAX], v[VAL_MAX];
        size_t nl = (size_t)((eq ? eq : e) - p);
        if (nl == 0 || pct_decode(p, nl, name, sizeof name)) {
            snprintf(name, sizeof name, "%.*s", (int)(nl < 40 ? nl : 40), p);
            for (char *q = name; *q; q++)   /* as it came: shown printable */
                if ((unsigned char)*q < 0x20 || *q == 0x7f)
                    *q = '?';
            if (nl)
                append(ignored, igncap, ", ", name);   /* a name we cannot read */
        } else if (eq && pct_decode(eq + 1, (size_t)(e - eq - 1), v, sizeof v) == 0) {
            int rc = one_param(name, v, h, seeds, &have, why, whycap);
            if (rc < 0)
                return -1;
            if (rc > 0) {
                char kv[2 * VAL_MAX + 2];
                snprintf(kv, sizeof kv, "%s=%s", name, v);
                append(said, saidcap, " ", kv);
            } else if (strcmp(name, "auth_id") && strcmp(name, "worker_auth_id")) {
                append(ignored, igncap, ", ", name);
            }
        } else if (!strcmp(name, "auth_id") || !strcmp(name, "worker_auth_id")) {
            /* the gate's own (checked there) */
        } else {
            int rc = one_param(name, "", h, seeds, &have, why, whycap);
            if (rc < 0)
                return -1;
            append(ignored, igncap, ", ", name);
        }
        p = *e ? e + 1 : e;
    }
    if (have == 1)
        *seed = seeds[0];
    else if (have == 2)
        *seed = seeds[1];
    else if (have == 3)
        *seed = seeds[0] ^ (seeds[1] << 32 | seeds[1] >> 32);
    return 0;
}
