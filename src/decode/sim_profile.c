/* sim_profile.c: reads simulated-device profiles (format in sim_profile.h
 * and mt-profile(5)) and finds a built-in profile by name.
 *
 * Strict on purpose: a profile is the only thing between a simulated run
 * and a figure someone may quote, so every number must be where it is
 * expected, finite and in range, and a misspelt key is an error. */
#include "util/errmsg.h"
#include "decode/sim_profile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errmsg.h"

#ifndef MT_SOURCE_DIR
#define MT_SOURCE_DIR "."
#endif
#ifndef MT_DATADIR
#define MT_DATADIR "/usr/local/share/metronome"
#endif

static const char *const field_names[MT_SIM_NFIELDS] = {
    "bandwidth", "matrix_rate", "overhead",
};

const char *mt_sim_field_name(mt_sim_field f)
{
    return (unsigned)f < MT_SIM_NFIELDS ? field_names[f] : "?";
}

/* Copies at most cap-1 bytes of s[0..n) for a message, unprintable bytes
 * as '?', so any input can be quoted safely. */
static void shown(char *dst, size_t cap, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++)
        dst[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    dst[k] = '\0';
}

/* A whole value as a finite decimal number (no hex, nan, inf). */
static int parse_num(const char *s, size_t n, double *v)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' ||
              c == '+' || c == '-'))
            return -1;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    double x = strtod(buf, &end);
    if (errno || end != buf + n || !isfinite(x))
        return -1;
    *v = x;
    return 0;
}

enum { K_NAME, K_MODEL, K_MEM, K_RESERVE, K_BW, K_RATE, K_OVER, K_WB, K_KVB,
       K_SIGMA, K_SPROB, K_SMS, K_SEED, K_SCHED, K_CRATE, K_COVER,
       K_DPARAMS, K_DWB, K_DRATE, K_DOVER, K_COUNT };

static const struct key {
    const char *name;
    int required;
    double lo, hi;   /* range of numeric keys */
} keys[K_COUNT] = {
    [K_NAME]    = { "name", 0, 0, 0 },
    [K_MODEL]   = { "model", 0, 0, 0 },
    [K_MEM]     = { "memory_bytes", 1, 1, 1e18 },
    [K_RESERVE] = { "reserve_bytes", 1, 0, 1e18 },
    [K_BW]      = { "bandwidth", 1, 1, 1e18 },
    [K_RATE]    = { "matrix_rate", 1, 1, 1e21 },
    [K_OVER]    = { "overhead_us", 0, 0, 1e7 },
    [K_WB]      = { "weight_bytes", 1, 1, 8 },
    [K_KVB]     = { "kv_bytes", 1, 1, 8 },
    [K_SIGMA]   = { "jitter_sigma", 0, 0, 2 },
    [K_SPROB]   = { "stall_prob", 0, 0, 1 },
    [K_SMS]     = { "stall_ms", 0, 0, 1e6 },
    [K_SEED]    = { "seed", 0, 0, 1.8e19 },
    [K_SCHED]   = { "schedule", 0, 0, 0 },
    [K_CRATE]   = { "codec_rate", 0, 1, 1e21 },
    [K_COVER]   = { "codec_overhead_us", 0, 0, 1e7 },
    [K_DPARAMS] = { "depformer_params", 0, 0, 1e13 },
    [K_DWB]     = { "depformer_weight_bytes", 0, 1, 8 },
    [K_DRATE]   = { "depformer_rate", 0, 1, 1e21 },
    [K_DOVER]   = { "depformer_overhead_us", 0, 0, 1e7 },
};

/* "120s bandwidth*0.8" (spaces around '*' allowed) */
static int parse_schedule(const char *v, size_t n, mt_sim_change *c)
{
    size_t i = 0;
    while (i < n && v[i] != 's' && v[i] != ' ')
        i++;
    if (i == n || v[i] != 's' || parse_num(v, i, &c->t_s) || c->t_s < 0 ||
        c->t_s > 1e9)
        return -1;
    i++;
    if (i == n || v[i] != ' ')
        return -1;
    while (i < n && v[i] == ' ')
        i++;
    size_t f0 = i;
    while (i < n && v[i] != '*' && v[i] != ' ')
        i++;
    int field = -1;
    for (int k = 0; k < MT_SIM_NFIELDS; k++)
        if (strlen(field_names[k]) == i - f0 && memcmp(v + f0, field_names[k], i - f0) == 0)
            field = k;
    if (field < 0)
        return -1;
    while (i < n && v[i] == ' ')
        i++;
    if (i == n || v[i] != '*')
        return -1;
    i++;
    while (i < n && v[i] == ' ')
        i++;
    if (parse_num(v + i, n - i, &c->factor) || !(c->factor > 0) || c->factor > 1e6)
        return -1;
    c->field = (mt_sim_field)field;
    return 0;
}

static int text_value(char *dst, size_t cap, const char *v, size_t n)
{
    if (n == 0 || n >= cap)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] > 0x7e)
            return -1;   /* one printable word: it goes into logfmt lines */
    memcpy(dst, v, n);
    dst[n] = '\0';
    return 0;
}

/* The line of text [len] at pos, its comment cut and its ends trimmed
 * (tabs count as spaces, other control bytes are errors later): *l, *n
 * (n 0: nothing on it). Returns where the next line starts. */
static size_t next_line(const char *text, size_t len, size_t pos, const char **l, size_t *n)
{
    size_t end = pos;
    while (end < len && text[end] != '\n')
        end++;
    const char *s = text + pos;
    size_t k = end - pos;
    for (size_t i = 0; i < k; i++)
        if (s[i] == '#') {
            k = i;
            break;
        }
    while (k && (s[k - 1] == ' ' || s[k - 1] == '\t' || s[k - 1] == '\r'))
        k--;
    while (k && (*s == ' ' || *s == '\t')) {
        s++;
        k--;
    }
    *l = s;
    *n = k;
    return end + 1;
}

/* "key = value" in l [n]: the key is l [*kn], the value *v [*vn], both
 * trimmed. 0, or -1 when there is no '='. */
static int split_pair(const char *l, size_t n, size_t *kn, const char **v, size_t *vn)
{
    size_t eq = 0;
    while (eq < n && l[eq] != '=')
        eq++;
    if (eq == n)
        return -1;
    *kn = eq;
    while (*kn && (l[*kn - 1] == ' ' || l[*kn - 1] == '\t'))
        (*kn)--;
    *v = l + eq + 1;
    *vn = n - eq - 1;
    while (*vn && (**v == ' ' || **v == '\t')) {
        (*v)++;
        (*vn)--;
    }
    return 0;
}

/* One `schedule` entry, v [vn] (vshow: as the message shows it), added to
 * p after the earlier ones. 0, or -1 with err. */
static int add_schedule(mt_sim_profile *p, const char *v, size_t vn, const char *vshow,
                        const char *file, long lineno, char *err, size_t errlen)
{
    if (p->nschedule == MT_SIM_MAX_SCHEDULE) {
        mt_set_err(err, errlen, "%s:%ld: key 'schedule': more than %d entries",
                   file, lineno, MT_SIM_MAX_SCHEDULE);
        return -1;
    }
    mt_sim_change c;
    if (parse_schedule(v, vn, &c)) {
        mt_set_err(err, errlen, "%s:%ld: key 'schedule': want 'Ts FIELD*F' (FIELD bandwidth, matrix_rate or overhead; F > 0), got '%s'",
                   file, lineno, vshow);
        return -1;
    }
    if (p->nschedule && c.t_s < p->schedule[p->nschedule - 1].t_s) {
        mt_set_err(err, errlen, "%s:%ld: key 'schedule': %gs is before the previous entry's %gs",
                   file, lineno, c.t_s, p->schedule[p->nschedule - 1].t_s);
        return -1;
    }
    p->schedule[p->nschedule++] = c;
    return 0;
}

/* A control byte (a tab is a space) in v [vn]. */
static int has_control(const char *v, size_t vn)
{
    for (size_t i = 0; i < vn; i++)
        if ((unsigned char)v[i] < 0x20 && v[i] != '\t')
            return 1;
    return 0;
}

/* Once every line is read: the required keys given, the reserve below the
 * memory, the name defaulted. 0, or -1 with err. */
static int check_whole(mt_sim_profile *p, const int *seen, const char *file,
                       const char *default_name, char *err, size_t errlen)
{
    for (int k = 0; k < K_COUNT; k++)
        if (keys[k].required && !seen[k]) {
            mt_set_err(err, errlen, "%s: key '%s': missing", file, keys[k].name);
            return -1;
        }
    if (p->reserve_bytes >= p->memory_bytes) {
        mt_set_err(err, errlen, "%s: key 'reserve_bytes': %g is not below memory_bytes %g",
                   file, p->reserve_bytes, p->memory_bytes);
        return -1;
    }
    if (!seen[K_NAME])
        snprintf(p->name, sizeof p->name, "%s",
                 default_name && *default_name ? default_name : "unnamed");
    return 0;
}

/* A numeric key's value x (in its range already) into p: 0, or -1 when
 * the key wants an integer and x is not one. */
static int store_number(mt_sim_profile *p, int k, double x)
{
    switch (k) {
    case K_MEM: p->memory_bytes = x; break;
    case K_RESERVE: p->reserve_bytes = x; break;
    case K_BW: p->bandwidth = x; break;
    case K_RATE: p->matrix_rate = x; break;
    case K_OVER: p->overhead_us = x; break;
    case K_CRATE: p->codec_rate = x; break;
    case K_COVER: p->codec_overhead_us = x; break;
    case K_DPARAMS: p->depformer_params = x; break;
    case K_DRATE: p->depformer_rate = x; break;
    case K_DOVER: p->depformer_overhead_us = x; break;
    case K_SIGMA: p->jitter_sigma = x; break;
    case K_SPROB: p->stall_prob = x; break;
    case K_SMS: p->stall_ms = x; break;
    case K_WB:
    case K_KVB:
    case K_DWB:
    case K_SEED:
        if (x != floor(x))
            return -1;
        if (k == K_WB)
            p->weight_bytes = (int)x;
        else if (k == K_KVB)
            p->kv_bytes = (int)x;
        else if (k == K_DWB)
            p->depformer_weight_bytes = (int)x;
        else
            p->seed = (uint64_t)x;
        break;
    default: break;
    }
    return 0;
}

int mt_sim_profile_parse(const char *text, size_t len, const char *file,
                         const char *default_name, mt_sim_profile *out,
                         char *err, size_t errlen)
{
    mt_sim_profile p;
    memset(&p, 0, sizeof p);
    if (!file)
        file = "profile";
    if (len > MT_SIM_PROFILE_MAX_BYTES) {
        mt_set_err(err, errlen, "%s: %zu bytes: a profile is at most %d", file,
                   len, MT_SIM_PROFILE_MAX_BYTES);
        return -1;
    }
    int seen[K_COUNT] = {0};
    p.seed = 1;
    size_t pos = 0;
    long lineno = 0;
    while (pos < len) {
        lineno++;
        const char *l, *v;
        size_t n, kn, vn;
        pos = next_line(text, len, pos, &l, &n);
        if (n == 0)
            continue;
        char kshow[40];
        if (split_pair(l, n, &kn, &v, &vn) != 0) {
            shown(kshow, sizeof kshow, l, n < 32 ? n : 32);
            mt_set_err(err, errlen, "%s:%ld: '%s': not key = value", file, lineno, kshow);
            return -1;
        }
        shown(kshow, sizeof kshow, l, kn < 32 ? kn : 32);
        int k = -1;
        for (int i = 0; i < K_COUNT; i++)
            if (strlen(keys[i].name) == kn && memcmp(l, keys[i].name, kn) == 0)
                k = i;
        if (k < 0) {
            mt_set_err(err, errlen, "%s:%ld: key '%s': unknown key", file, lineno, kshow);
            return -1;
        }
        if (seen[k] && k != K_SCHED) {
            mt_set_err(err, errlen, "%s:%ld: key '%s': given twice", file, lineno, kshow);
            return -1;
        }
        seen[k] = 1;
        if (has_control(v, vn)) {
            mt_set_err(err, errlen, "%s:%ld: key '%s': control byte in value",
                       file, lineno, kshow);
            return -1;
        }
        char vshow[48];
        shown(vshow, sizeof vshow, v, vn < 40 ? vn : 40);
        if (k == K_NAME || k == K_MODEL) {
            char *dst = k == K_NAME ? p.name : p.model;
            if (text_value(dst, sizeof p.name, v, vn)) {
                mt_set_err(err, errlen, "%s:%ld: key '%s': want one printable word of 1..63 bytes, got '%s'",
                           file, lineno, kshow, vshow);
                return -1;
            }
            continue;
        }
        if (k == K_SCHED) {
            if (add_schedule(&p, v, vn, vshow, file, lineno, err, errlen) != 0)
                return -1;
            continue;
        }
        double x;
        if (parse_num(v, vn, &x) || x < keys[k].lo || x > keys[k].hi) {
            mt_set_err(err, errlen, "%s:%ld: key '%s': want a number in %g..%g, got '%s'",
                       file, lineno, kshow, keys[k].lo, keys[k].hi, vshow);
            return -1;
        }
        if (store_number(&p, k, x) != 0) {
            mt_set_err(err, errlen, "%s:%ld: key '%s': want an integer, got '%s'",
                       file, lineno, kshow, vshow);
            return -1;
        }
    }
    if (check_whole(&p, seen, file, default_name, err, errlen) != 0)
        return -1;
    *out = p;
    return 0;
}

static int read_file(const char *path, char *buf, size_t cap, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap, f);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return -1;
    *len = n;
    return 0;
}

/* The base name of path without ".profile", for a profile without `name`. */
static void base_name(char *dst, size_t cap, const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 8 && strcmp(b + n - 8, ".profile") == 0)
        n -= 8;
    char tmp[64];
    if (n >= sizeof tmp)
        n = sizeof tmp - 1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)b[i] > 0x20 && (unsigned char)b[i] < 0x7f)
            tmp[k++] = b[i];
    tmp[k] = '\0';
    snprintf(dst, cap, "%s", k ? tmp : "unnamed");
}

int mt_sim_profile_load(const char *spec, mt_sim_profile *p, char *err,
                        size_t errlen)
{
    if (!spec || !*spec) {
        mt_set_err(err, errlen, "sim: no profile named (want sim:NAME or sim:PATH)");
        return -1;
    }
    char path[512];
    size_t sl = strlen(spec);
    int is_path = strchr(spec, '/') != NULL ||
                  (sl > 8 && strcmp(spec + sl - 8, ".profile") == 0);
    size_t len = 0;
    int found = 0;
    char *buf = malloc(MT_SIM_PROFILE_MAX_BYTES + 1);
    if (!buf) {
        mt_set_err(err, errlen, "sim: out of memory");
        return -1;
    }
    const size_t cap = MT_SIM_PROFILE_MAX_BYTES + 1;
    int rc = -1;
    if (is_path) {
        snprintf(path, sizeof path, "%s", spec);
        if (read_file(path, buf, cap, &len) != 0) {
            mt_set_err(err, errlen, "sim: profile %s: %s", spec, strerror(errno));
            goto out;
        }
        found = 1;
    } else {
        for (size_t i = 0; i < sl; i++)
            if (!((spec[i] >= 'a' && spec[i] <= 'z') || (spec[i] >= '0' && spec[i] <= '9') ||
                  spec[i] == '-' || spec[i] == '_' || spec[i] == '.')) {
                mt_set_err(err, errlen, "sim: profile name '%s': want [a-z0-9._-] or a path", spec);
                goto out;
            }
        const char *env = getenv("MT_PROFILE_DIR");
        const char *dirs[3] = { env && *env ? env : NULL,
                                MT_SOURCE_DIR "/profiles", MT_DATADIR "/profiles" };
        for (int d = 0; d < 3 && !found; d++) {
            if (!dirs[d])
                continue;
            int w = snprintf(path, sizeof path, "%s/%s.profile", dirs[d], spec);
            if (w < 0 || (size_t)w >= sizeof path)
                continue;
            if (read_file(path, buf, cap, &len) == 0)
                found = 1;
        }
        if (!found) {
            mt_set_err(err, errlen, "sim: no built-in profile '%s' (looked in %s%s%s/profiles and %s/profiles)",
                       spec, env && *env ? env : "", env && *env ? ", " : "",
                       MT_SOURCE_DIR, MT_DATADIR);
            goto out;
        }
    }
    if (len > MT_SIM_PROFILE_MAX_BYTES) {
        mt_set_err(err, errlen, "sim: profile %s: over %d bytes", path, MT_SIM_PROFILE_MAX_BYTES);
        goto out;
    }
    char dflt[64];
    base_name(dflt, sizeof dflt, path);
    if (mt_sim_profile_parse(buf, len, path, dflt, p, err, errlen) != 0)
        goto out;
    snprintf(p->path, sizeof p->path, "%s", path);
    rc = 0;
out:
    free(buf);
    return rc;
}
