/* ticker.h: mt-serve's tick thread. It sleeps with
 * clock_nanosleep(TIMER_ABSTIME) to tick k's start t0 + k*period, wakes
 * the decoder's threads just ahead of it, runs mt_engine_tick, and tells
 * the I/O thread through an eventfd that output is ready. After an
 * overrun the next tick is the slot it is in (started late, and shown
 * late in late_ms), never a burst of catch-up ticks.
 *
 * The thread never touches a descriptor other than that eventfd, and its
 * latency lines leave through lineout.h, so nothing outside the process
 * can hold it back.
 */
#ifndef MT_TICKER_H
#define MT_TICKER_H

#include <stddef.h>
#include <stdint.h>

#include "serve/engine.h"

typedef struct mt_ticker_opts {
    mt_engine *eng;
    uint64_t   t0;          /* tick 0 starts here (CLOCK_MONOTONIC ns) */
    uint64_t   period_ns;
    int        wake_fd;     /* eventfd written after every tick */
    void     (*log)(void *ctx, const char *msg);   /* tick errors */
    void      *log_ctx;
} mt_ticker_opts;

typedef struct mt_ticker mt_ticker;

/* Starts the thread. 0, or -1 with err. */
int  mt_ticker_start(const mt_ticker_opts *o, mt_ticker **out,
                     char *err, size_t errlen);
/* Stops it after the tick in progress, joins it and frees t. */
void mt_ticker_stop(mt_ticker *t);

#endif
