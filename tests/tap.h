/* tap.h: a tiny Test Anything Protocol helper for the C unit tests.
 * Each test executable prints "1..N" at the end (done_testing), one
 * "ok"/"not ok" line per check, and exits non-zero if any check failed,
 * so prove(1) reads it and make test fails with it. Header-only on purpose:
 * every test is one file plus this. */
#ifndef MT_TAP_H
#define MT_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

static int tap_n, tap_failed;

static inline int tap_ok(int cond, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline int tap_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    tap_n++;
    printf("%sok %d - ", cond ? "" : "not ", tap_n);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!cond)
        tap_failed++;
    fflush(stdout);
    return cond;
}

static inline void tap_diag(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static inline void tap_diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static inline void tap_skip(const char *why)
{
    tap_n++;
    printf("ok %d # SKIP %s\n", tap_n, why);
    fflush(stdout);
}

static inline void tap_skip_all(const char *why)
{
    printf("1..0 # SKIP %s\n", why);
    fflush(stdout);
    exit(0);
}

static inline int tap_done(void)
{
    printf("1..%d\n", tap_n);
    fflush(stdout);
    return tap_failed ? 1 : 0;
}

#define ok(cond, ...) tap_ok(!!(cond), __VA_ARGS__)
#define is_int(got, want, name)                                                \
    do {                                                                       \
        long long g_ = (long long)(got), w_ = (long long)(want);               \
        if (!tap_ok(g_ == w_, "%s", name))                                     \
            tap_diag("  got %lld, want %lld", g_, w_);                          \
    } while (0)
#define is_str(got, want, name)                                                \
    do {                                                                       \
        const char *g_ = (got), *w_ = (want);                                  \
        int e_ = g_ && w_ && strcmp(g_, w_) == 0;                              \
        if (!tap_ok(e_, "%s", name))                                           \
            tap_diag("  got '%s', want '%s'", g_ ? g_ : "(null)",               \
                     w_ ? w_ : "(null)");                                       \
    } while (0)
#define like(got, sub, name)                                                   \
    do {                                                                       \
        const char *g_ = (got), *s_ = (sub);                                   \
        int e_ = g_ && s_ && strstr(g_, s_) != NULL;                           \
        if (!tap_ok(e_, "%s", name))                                           \
            tap_diag("  '%s' does not contain '%s'", g_ ? g_ : "(null)", s_);   \
    } while (0)
#define is_near(got, want, tol, name)                                          \
    do {                                                                       \
        double g_ = (got), w_ = (want), t_ = (tol);                            \
        if (!tap_ok(fabs(g_ - w_) <= t_, "%s", name))                          \
            tap_diag("  got %.9g, want %.9g (tol %.3g)", g_, w_, t_);           \
    } while (0)

#endif
