/* units.c: integers, byte sizes and durations as people type them (see
 * units.h). */
#include "util/units.h"
#include "util/errmsg.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>

int mt_parse_int(const char *s, long lo, long hi, const char *field, long *out,
                 char *err, size_t errlen)
{
    const char *d = s && (*s == '-' || *s == '+') ? s + 1 : s;
    if (!s || !(*d >= '0' && *d <= '9')) {
        mt_set_err(err, errlen, "%s: '%s' is not an integer", field, s ? s : "");
        return -1;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end) {
        mt_set_err(err, errlen, "%s: '%s' is not an integer", field, s);
        return -1;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        mt_set_err(err, errlen, "%s: %s is outside %ld..%ld", field, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* strtod, but not its hex, inf and nan forms: a size or a duration is
 * digits, a point and an exponent at most. */
static int leading_number(const char *s, double *v, char **end)
{
    if (!((*s >= '0' && *s <= '9') || *s == '.'))
        return -1;
    errno = 0;
    *v = strtod(s, end);
    if (*end == s || errno || !isfinite(*v) || *v < 0)
        return -1;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        return -1;
    return 0;
}

/* leading_number for a WHAT ("size", "duration") whose examples are eg:
 * 0, or -1 with "empty WHAT" or "bad WHAT 'S' (e.g. EG)" in err. */
static int number_or_err(const char *s, const char *what, const char *eg, double *v,
                         char **end, char *err, size_t errlen)
{
    if (!s || !*s) {
        mt_set_err(err, errlen, "empty %s", what);
        return -1;
    }
    if (leading_number(s, v, end)) {
        mt_set_err(err, errlen, "bad %s '%s' (e.g. %s)", what, s, eg);
        return -1;
    }
    return 0;
}

int mt_parse_bytes(const char *s, uint64_t *out, char *err, size_t errlen)
{
    char *end;
    double v, mul = 1;
    if (number_or_err(s, "size", "64M, 1.5G, 4096", &v, &end, err, errlen))
        return -1;
    if (*end && strcasecmp(end, "b")) {
        switch (*end | 0x20) {
        case 'k': mul = 1024.0; break;
        case 'm': mul = 1024.0 * 1024; break;
        case 'g': mul = 1024.0 * 1024 * 1024; break;
        default:
            mt_set_err(err, errlen, "bad size unit in '%s' (K, M, G)", s);
            return -1;
        }
        end++;
        if (*end && strcasecmp(end, "b") && strcasecmp(end, "ib")) {
            mt_set_err(err, errlen, "bad size unit in '%s' (K, M, G)", s);
            return -1;
        }
    }
    v *= mul;
    if (v >= 1.8e19) {
        mt_set_err(err, errlen, "size '%s' too large", s);
        return -1;
    }
    *out = (uint64_t)llround(v);
    return 0;
}

int mt_parse_duration(const char *s, double unit_s, double *out,
                      char *err, size_t errlen)
{
    char *end;
    double v;
    if (number_or_err(s, "duration", "20s, 800ms, 2m", &v, &end, err, errlen))
        return -1;
    /* a number in the unit itself stays exact: 80 ms is 80, not 80.000001 */
    if (!*end)
        ;
    else if (!strcmp(end, "s"))
        v = unit_s == 1 ? v : v / unit_s;
    else if (!strcmp(end, "ms"))
        v = unit_s == 0.001 ? v : v / 1000.0 / unit_s;
    else if (!strcmp(end, "m") || !strcmp(end, "min"))
        v = v * 60.0 / unit_s;
    else if (!strcmp(end, "h"))
        v = v * 3600.0 / unit_s;
    else {
        mt_set_err(err, errlen, "bad duration unit in '%s' (ms, s, m, h)", s);
        return -1;
    }
    if (!isfinite(v)) {
        mt_set_err(err, errlen, "duration '%s' too large", s);
        return -1;
    }
    *out = v;
    return 0;
}
