/* errmsg.h: the one helper every module uses to fill a caller's error
 * buffer (char *err, size_t errlen), so library code returns messages and
 * the mains print them. */
#ifndef MT_ERRMSG_H
#define MT_ERRMSG_H

#include <stddef.h>

/* printf into err[0..errlen); does nothing when err is NULL or errlen 0. */
void mt_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
