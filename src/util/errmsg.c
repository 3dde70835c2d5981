/* errmsg.c: see errmsg.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/errmsg.h"

void mt_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void *mt_calloc_or_err(size_t n, size_t size, char *err, size_t errlen, const char *what)
{
    void *p = calloc(n, size);
    if (!p) {
        if (what)
            mt_set_err(err, errlen, "%s: out of memory", what);
        else
            mt_set_err(err, errlen, "out of memory");
    }
    return p;
}

void mt_vlog(mt_log_fn log, void *ctx, const char *fmt, va_list ap)
{
    char msg[512];
    if (!log)
        return;
    vsnprintf(msg, sizeof msg, fmt, ap);
    log(ctx, msg);
}

void mt_logf(mt_log_fn log, void *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mt_vlog(log, ctx, fmt, ap);
    va_end(ap);
}
