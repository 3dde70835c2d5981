/* test_realtime.c: mt_realtime_enter (util/realtime.c), what mt-serve
 * --rt-priority does: priorities outside 1..99 refused with a message;
 * inside, the calling thread is under SCHED_FIFO at that priority, or,
 * where that is not permitted, -1 with a message that says what to give
 * (never a silent success). */
#define _GNU_SOURCE
#include "tap.h"
#include "util/realtime.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>

int main(void)
{
    char err[256] = "";
    ok(mt_realtime_enter(0, err, sizeof err) == -1 && strstr(err, "outside 1..99"),
       "priority 0 refused: %s", err);
    err[0] = 0;
    ok(mt_realtime_enter(100, err, sizeof err) == -1 && strstr(err, "outside 1..99"),
       "priority 100 refused: %s", err);

    struct sched_param before;
    int pol_before;
    ok(pthread_getschedparam(pthread_self(), &pol_before, &before) == 0,
       "the thread's policy read (%d)", pol_before);
    err[0] = 0;
    int rc = mt_realtime_enter(7, err, sizeof err);
    int pol = -1;
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    pthread_getschedparam(pthread_self(), &pol, &sp);
    if (rc == 0) {
        ok(pol == SCHED_FIFO && sp.sched_priority == 7,
           "permitted: the thread runs SCHED_FIFO (%d) at 7 (%d)", pol, sp.sched_priority);
        ok(pthread_setschedparam(pthread_self(), pol_before, &before) == 0,
           "the normal policy restored");
    } else {
        ok(pol == pol_before && strstr(err, "SCHED_FIFO priority 7"),
           "not permitted: policy unchanged, and said: %s", err);
        ok(strstr(err, "not permitted") == NULL || strstr(err, "CAP_SYS_NICE"),
           "a refusal names what to give");
    }
    return tap_done();
}
