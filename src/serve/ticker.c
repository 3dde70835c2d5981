/* ticker.c: the tick thread of mt-serve (see ticker.h). */
#define _GNU_SOURCE
#include "serve/ticker.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "decode/decoder.h"
#include "util/clock.h"
#include "util/errmsg.h"

struct mt_ticker {
    mt_ticker_opts o;
    atomic_int     stop;
    pthread_t      th;
};

/* the human log, when the caller gave one */
#define tlog(t, ...) mt_logf((t)->o.log, (t)->o.log_ctx, __VA_ARGS__)

static void *tick_main(void *arg)
{
    mt_ticker *t = arg;
    uint64_t P = t->o.period_ns, t0 = t->o.t0;
    int64_t k = 0;
    char err[256];
    while (!atomic_load(&t->stop)) {
        uint64_t at = t0 + (uint64_t)k * P;
        /* wake the decoder's threads a little ahead of the tick, so that
         * their wake-up is not paid inside the step */
        if (at > MT_DECODER_WAKE_NS && mt_clock_ns() < at - MT_DECODER_WAKE_NS) {
            mt_sleep_until_ns(at - MT_DECODER_WAKE_NS);
            if (atomic_load(&t->stop))
                break;
            mt_engine_wake(t->o.eng);
        }
        mt_sleep_until_ns(at);
        if (atomic_load(&t->stop))
            break;
        if (mt_engine_tick(t->o.eng, k, at, err, sizeof err) != 0)
            tlog(t, "tick %lld: %s", (long long)k, err);
        uint64_t one = 1;
        if (write(t->o.wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
            tlog(t, "eventfd: %s", strerror(errno));
        /* Next tick: the next slot, or, after an overrun, the slot we are
         * in (started at once, late, and shown late in late_ms). */
        uint64_t now = mt_clock_ns();
        int64_t cur = (int64_t)((now - t0) / P);
        k = cur > k ? cur : k + 1;
    }
    return NULL;
}

int mt_ticker_start(const mt_ticker_opts *o, mt_ticker **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (!o->eng || o->period_ns == 0) {
        mt_set_err(err, errlen, "ticker: no engine or no period");
        return -1;
    }
    mt_ticker *t = mt_calloc_or_err(1, sizeof *t, err, errlen, NULL);
    if (!t)
        return -1;
    t->o = *o;
    atomic_init(&t->stop, 0);
    int e = pthread_create(&t->th, NULL, tick_main, t);
    if (e != 0) {
        mt_set_err(err, errlen, "pthread_create: %s", strerror(e));
        free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void mt_ticker_stop(mt_ticker *t)
{
    if (!t)
        return;
    atomic_store(&t->stop, 1);
    pthread_join(t->th, NULL);
    free(t);
}
