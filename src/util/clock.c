/* clock.c: see clock.h. */
#define _GNU_SOURCE
#include "util/clock.h"

#include <errno.h>
#include <math.h>
#include <time.h>

uint64_t mt_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mt_sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void mt_sleep_until_ns(uint64_t at)
{
    struct timespec ts = {.tv_sec = (time_t)(at / 1000000000ull),
                          .tv_nsec = (long)(at % 1000000000ull)};
    /* clock_nanosleep returns the error number rather than setting errno */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}
