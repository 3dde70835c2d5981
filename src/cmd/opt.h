/* opt.h: the option module the four programs share.
 *
 * One way to read options and one way to complain about them, so every
 * program says the same thing for the same mistake:
 *
 *   a bad value     "mt-replay: --stagger: 'abc' is not a duration in
 *                   milliseconds (...)"  (the option as typed, the value)
 *   a bad option    "mt-serve: unknown option '--bogus'" and one line
 *                   "usage: SYNOPSIS; try 'mt-serve --help'"
 *   --help          the full text on stdout, exit 0
 *   --version       "mt-serve 0.1" on stdout, exit 0
 *
 * Exit status: 0 done, 1 runtime error, 2 usage error.
 *
 * Use: a table of struct option that ends with MT_OPT_COMMON and the
 * {0,0,0,0} row, then
 *
 *     while ((c = mt_opt_next(&cli, argc, argv, "s:h", table)) >= 0)
 *         switch (c) { case 'n': if (mt_opt_int(optarg, 1, 64, &n)) return 2; ... }
 *     if (c != MT_OPT_END) return mt_opt_status(c);
 *
 * The value readers name the option mt_opt_next returned last, so an error
 * cannot name the wrong one.
 */
#ifndef MT_CMD_OPT_H
#define MT_CMD_OPT_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "util/version.h"

/* The value --version has in a table (outside char and enum ranges). */
#define MT_OPT_VERSION 0x4000
#define MT_OPT_COMMON \
    {"help", no_argument, 0, 'h'}, \
    {"version", no_argument, 0, MT_OPT_VERSION}

typedef struct mt_cli {
    const char *prog;       /* starts every message: "mt-serve", "mt-probe sweep" */
    const char *synopsis;   /* one line, without "usage: " */
    void      (*help)(FILE *f);   /* the full text, printed for --help */
} mt_cli;

/* What mt_opt_next returns besides an option's value. */
enum {
    MT_OPT_END   = -1,      /* no more options: operands start at optind */
    MT_OPT_DONE  = -2,      /* --help or --version printed: exit 0 */
    MT_OPT_USAGE = -3,      /* unknown option or missing value, said: exit 2 */
};

/* Makes cli the program the messages speak for (mt_opt_next does it too;
 * this is for a usage error found before any option is read). */
void mt_opt_use(const mt_cli *cli);

/* getopt_long with -h/--help, --version, unknown options and missing
 * values handled (shortopts as getopt's, a leading '+' kept; 'h' is
 * --help). Returns the option's value, or one of the above. */
int mt_opt_next(const mt_cli *cli, int argc, char **argv, const char *shortopts,
                const struct option *longopts);

/* The exit status for MT_OPT_DONE (0) and MT_OPT_USAGE (2). */
int mt_opt_status(int c);

/* The whole loop of a program that takes no operands: resets optind, hands
 * every option to one(ctx, c, optarg) (0, or -1 after its message) and
 * refuses an operand. MT_OPT_END once all are read, else the exit status
 * (0 for --help/--version, 2 for a usage error). */
int mt_opt_read_all(const mt_cli *cli, int argc, char **argv,
                    const char *shortopts, const struct option *longopts,
                    int (*one)(void *ctx, int c, const char *arg), void *ctx);

/* The program name of the messages (the cli's prog). */
const char *mt_opt_prog(void);

/* Value readers for the option mt_opt_next returned last: 0, or -1 after
 * printing "PROG: OPTION: 'ARG' is not ..." on stderr. */
int mt_opt_int(const char *arg, long lo, long hi, int *out);
int mt_opt_long(const char *arg, long lo, long hi, long *out);
int mt_opt_u64(const char *arg, uint64_t *out);
int mt_opt_double(const char *arg, double lo, double hi, double *out);
/* A duration (util/units.h: ms, s, m, h), lo and hi in the unit of a
 * bare number: milliseconds for mt_opt_ms, seconds for mt_opt_seconds. */
int mt_opt_ms(const char *arg, double lo, double hi, double *ms);
int mt_opt_seconds(const char *arg, double lo, double hi, double *s);
/* A byte size (util/units.h: K, M, G, powers of 1024). */
int mt_opt_bytes(const char *arg, uint64_t lo, uint64_t hi, uint64_t *out);
/* One of the NULL-terminated names: *idx is its index. */
int mt_opt_choice(const char *arg, const char *const *names, int *idx);

/* "PROG: OPTION: 'ARG' WHY" for checks of the caller's own; returns -1. */
int mt_opt_bad(const char *arg, const char *why, ...)
    __attribute__((format(printf, 2, 3)));
/* The same for an option named by the caller (checked after the loop). */
int mt_opt_bad_opt(const char *opt, const char *arg, const char *why, ...)
    __attribute__((format(printf, 3, 4)));
/* "PROG: OPTION: MSG" for a message that quotes the value itself (one
 * from a library parser); returns -1. */
int mt_opt_fail(const char *msg, ...) __attribute__((format(printf, 1, 2)));

/* A usage error that is not one option's value (operands, options that
 * exclude each other): "PROG: MSG" and the one usage line; returns 2. */
int mt_opt_usage_error(const char *msg, ...) __attribute__((format(printf, 1, 2)));

#endif
