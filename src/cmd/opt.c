/* opt.c: the shared option reader and its messages (see opt.h). */
#define _GNU_SOURCE
#include "cmd/opt.h"
#include "util/units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const mt_cli *cur_cli;
static char cur_opt[64] = "option";   /* as the user typed it: "--stagger", "-n" */

void mt_opt_use(const mt_cli *cli)
{
    cur_cli = cli;
}

const char *mt_opt_prog(void)
{
    return cur_cli ? cur_cli->prog : "metronome";
}

static void short_usage(void)
{
    if (!cur_cli)
        return;
    /* "mt-probe sweep" has its help at "mt-probe sweep --help" */
    fprintf(stderr, "usage: %s; try '%s --help'\n", cur_cli->synopsis, cur_cli->prog);
}

int mt_opt_usage_error(const char *msg, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", mt_opt_prog());
    va_start(ap, msg);
    vfprintf(stderr, msg, ap);
    va_end(ap);
    fputc('\n', stderr);
    short_usage();
    return 2;
}

int mt_opt_status(int c)
{
    return c == MT_OPT_DONE ? 0 : 2;
}

int mt_opt_read_all(const mt_cli *cli, int argc, char **argv,
                    const char *shortopts, const struct option *longopts,
                    int (*one)(void *ctx, int c, const char *arg), void *ctx)
{
    int c;
    optind = 1;
    while ((c = mt_opt_next(cli, argc, argv, shortopts, longopts)) >= 0)
        if (one(ctx, c, optarg))
            return 2;
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    if (optind < argc)
        return mt_opt_usage_error("unexpected argument '%s'", argv[optind]);
    return MT_OPT_END;
}

/* getopt's optstring with ':' after any '+' or '-', so a missing value
 * comes back as ':' and getopt itself prints nothing. */
static const char *quiet_optstring(const char *so, char *buf, size_t cap)
{
    size_t i = 0, n = strlen(so);
    if (n + 2 > cap)
        return so;
    if (so[0] == '+' || so[0] == '-')
        buf[i++] = *so++;
    buf[i++] = ':';
    memcpy(buf + i, so, strlen(so) + 1);
    return buf;
}

/* The option as typed, without any "=value". */
static void name_typed(const char *a, char *out, size_t cap)
{
    size_t n = strcspn(a, "=");
    snprintf(out, cap, "%.*s", (int)(n < 60 ? n : 60), a);
}

/* Whether "--name" abbreviates some long option (then getopt found it
 * ambiguous, not unknown). */
static int is_prefix(const char *typed, const struct option *longopts)
{
    if (typed[0] != '-' || typed[1] != '-' || !typed[2])
        return 0;
    for (const struct option *o = longopts; o->name; o++)
        if (!strncmp(o->name, typed + 2, strlen(typed + 2)))
            return 1;
    return 0;
}

int mt_opt_next(const mt_cli *cli, int argc, char **argv, const char *shortopts,
                const struct option *longopts)
{
    char sobuf[128];
    int li = -1;
    mt_opt_use(cli);
    opterr = 0;
    int c = getopt_long(argc, argv, quiet_optstring(shortopts, sobuf, sizeof sobuf),
                        longopts, &li);
    if (c == -1)
        return MT_OPT_END;
    if (li >= 0)
        snprintf(cur_opt, sizeof cur_opt, "--%.60s", longopts[li].name);
    else if (c != '?' && c != ':')
        snprintf(cur_opt, sizeof cur_opt, "-%c", c);
    const char *typed = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    if (c == '?') {
        /* getopt leaves optopt 0 for an unknown long option, the option's
         * value for a long one given "=value" it does not take, and the
         * letter for an unknown short one (possibly inside "-ab") */
        char name[64];
        name_typed(typed, name, sizeof name);
        if (!optopt)
            fprintf(stderr, "%s: %s option '%s'\n", cli->prog,
                    is_prefix(name, longopts) ? "ambiguous" : "unknown", name);
        else if (typed[0] == '-' && typed[1] == '-' && strchr(typed, '='))
            fprintf(stderr, "%s: option '%s' takes no value\n", cli->prog, name);
        else
            fprintf(stderr, "%s: unknown option '-%c'\n", cli->prog,
                    isprint(optopt) ? optopt : '?');
        short_usage();
        return MT_OPT_USAGE;
    }
    if (c == ':') {
        char name[64];
        if (optopt > 0 && optopt < 128 && typed[0] == '-' && typed[1] != '-')
            snprintf(name, sizeof name, "-%c", optopt);
        else
            name_typed(typed, name, sizeof name);
        fprintf(stderr, "%s: option '%s' needs a value\n", cli->prog, name);
        short_usage();
        return MT_OPT_USAGE;
    }
    if (c == 'h' && cli->help) {
        cli->help(stdout);
        return MT_OPT_DONE;
    }
    if (c == MT_OPT_VERSION) {
        /* the program, not the subcommand: "mt-probe 0.1" */
        printf("%.*s %s\n", (int)strcspn(cli->prog, " "), cli->prog, MT_VERSION);
        return MT_OPT_DONE;
    }
    return c;
}

/* ---- messages about a value ---------------------------------------------- */

static void vbad(const char *opt, const char *arg, const char *why, va_list ap)
{
    fprintf(stderr, "%s: %s: ", mt_opt_prog(), opt);
    if (arg)
        fprintf(stderr, "'%s' ", arg);
    vfprintf(stderr, why, ap);
    fputc('\n', stderr);
}

int mt_opt_bad(const char *arg, const char *why, ...)
{
    va_list ap;
    va_start(ap, why);
    vbad(cur_opt, arg, why, ap);
    va_end(ap);
    return -1;
}

int mt_opt_bad_opt(const char *opt, const char *arg, const char *why, ...)
{
    va_list ap;
    va_start(ap, why);
    vbad(opt, arg, why, ap);
    va_end(ap);
    return -1;
}

int mt_opt_fail(const char *msg, ...)
{
    va_list ap;
    va_start(ap, msg);
    vbad(cur_opt, NULL, msg, ap);
    va_end(ap);
    return -1;
}

/* ---- value readers ------------------------------------------------------- */

int mt_opt_long(const char *arg, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(arg, &end, 10);
    if (end == arg || *end || isspace((unsigned char)arg[0]))
        return mt_opt_bad(arg, "is not a whole number");
    if (errno || x < lo || x > hi)
        return mt_opt_bad(arg, "is out of range (%ld..%ld)", lo, hi);
    *out = x;
    return 0;
}

int mt_opt_int(const char *arg, long lo, long hi, int *out)
{
    long x;
    if (lo < -2147483647L - 1)
        lo = -2147483647L - 1;
    if (hi > 2147483647L)
        hi = 2147483647L;
    if (mt_opt_long(arg, lo, hi, &x))
        return -1;
    *out = (int)x;
    return 0;
}

int mt_opt_u64(const char *arg, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(arg, &end, 10);
    if (end == arg || *end || !isdigit((unsigned char)arg[0]))
        return mt_opt_bad(arg, "is not a whole number (0 or more)");
    if (errno)
        return mt_opt_bad(arg, "is out of range (0..%llu)", (unsigned long long)UINT64_MAX);
    *out = x;
    return 0;
}

/* "(lo..hi UNIT)", "(at least lo UNIT)" */
static void range_text(double lo, double hi, const char *unit, char *buf, size_t cap)
{
    const char *sp = *unit ? " " : "";
    if (hi >= 1e300)
        snprintf(buf, cap, "at least %g%s%s", lo, sp, unit);
    else
        snprintf(buf, cap, "%g..%g%s%s", lo, hi, sp, unit);
}

int mt_opt_double(const char *arg, double lo, double hi, double *out)
{
    char *end, r[96];
    errno = 0;
    double x = strtod(arg, &end);
    if (end == arg || *end || isspace((unsigned char)arg[0]) || !isfinite(x) || errno)
        return mt_opt_bad(arg, "is not a number");
    if (!(x >= lo && x <= hi)) {
        range_text(lo, hi, "", r, sizeof r);
        return mt_opt_bad(arg, "is out of range (%s)", r);
    }
    *out = x;
    return 0;
}

static int duration(const char *arg, double unit_s, const char *unit_name,
                    const char *unit, double lo, double hi, double *out)
{
    char r[96];
    double v;
    if (mt_parse_duration(arg, unit_s, &v, NULL, 0))
        return mt_opt_bad(arg, "is not a number of %s (e.g. %s)", unit_name,
                          unit_s < 1 ? "80, 80ms, 1.5s" : "20, 20s, 800ms, 2m");
    if (!(v >= lo && v <= hi)) {
        range_text(lo, hi, unit, r, sizeof r);
        return mt_opt_bad(arg, "is out of range (%s)", r);
    }
    *out = v;
    return 0;
}

int mt_opt_ms(const char *arg, double lo, double hi, double *ms)
{
    return duration(arg, 0.001, "milliseconds", "ms", lo, hi, ms);
}

int mt_opt_seconds(const char *arg, double lo, double hi, double *s)
{
    return duration(arg, 1, "seconds", "s", lo, hi, s);
}

int mt_opt_bytes(const char *arg, uint64_t lo, uint64_t hi, uint64_t *out)
{
    uint64_t b;
    if (mt_parse_bytes(arg, &b, NULL, 0))
        return mt_opt_bad(arg, "is not a size in bytes (e.g. 512M, 1.5G, 4096)");
    if (b < lo || b > hi)
        return mt_opt_bad(arg, "is out of range (%llu..%llu bytes)",
                          (unsigned long long)lo, (unsigned long long)hi);
    *out = b;
    return 0;
}

int mt_opt_choice(const char *arg, const char *const *names, int *idx)
{
    char list[256];
    size_t len = 0;
    for (int i = 0; names[i]; i++) {
        if (!strcmp(arg, names[i])) {
            *idx = i;
            return 0;
        }
        int n = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
        if (n > 0 && len + (size_t)n < sizeof list)
            len += (size_t)n;
    }
    list[len] = 0;
    return mt_opt_bad(arg, "is not one of %s", list);
}
