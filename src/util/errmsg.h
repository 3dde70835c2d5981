/* errmsg.h: the one helper every module uses to fill a caller's error
 * buffer (char *err, size_t errlen), so library code returns messages and
 * the mains print them. */
#ifndef MT_ERRMSG_H
#define MT_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>

/* printf into err[0..errlen); does nothing when err is NULL or errlen 0. */
void mt_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* calloc(n, size); when that fails, "WHAT: out of memory" in err (plain
 * "out of memory" when what is NULL) and NULL. */
void *mt_calloc_or_err(size_t n, size_t size, char *err, size_t errlen, const char *what);

/* Where the serving side's human log goes: one message, no newline. */
typedef void (*mt_log_fn)(void *ctx, const char *msg);

/* Formats fmt with ap (truncated at 511 bytes) and hands it to log(ctx, ..);
 * nothing when log is NULL. The printf-style loggers of the server, the
 * ticker and the protocol are this with their own callback. */
void mt_vlog(mt_log_fn log, void *ctx, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* mt_vlog with the arguments inline. */
void mt_logf(mt_log_fn log, void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
