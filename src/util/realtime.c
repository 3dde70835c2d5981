/* realtime.c: SCHED_FIFO for the calling thread (see realtime.h). */
#define _GNU_SOURCE
#include "util/realtime.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "util/errmsg.h"

int mt_realtime_enter(int prio, char *err, size_t errlen)
{
    if (prio < MT_RT_PRIORITY_MIN || prio > MT_RT_PRIORITY_MAX) {
        mt_set_err(err, errlen, "real-time priority %d is outside %d..%d", prio,
                   MT_RT_PRIORITY_MIN, MT_RT_PRIORITY_MAX);
        return -1;
    }
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    sp.sched_priority = prio;
    int e = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    if (e == EPERM) {
        mt_set_err(err, errlen, "SCHED_FIFO priority %d: not permitted (run as root, "
                   "grant CAP_SYS_NICE, or raise the rtprio limit: ulimit -r %d)",
                   prio, prio);
        return -1;
    }
    if (e != 0) {
        mt_set_err(err, errlen, "SCHED_FIFO priority %d: %s", prio, strerror(e));
        return -1;
    }
    return 0;
}
