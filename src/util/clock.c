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

uint64_t mt_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
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

int mt_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

int mt_cond_wait_until_ns(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t at)
{
    struct timespec ts = {.tv_sec = (time_t)(at / 1000000000ull),
                          .tv_nsec = (long)(at % 1000000000ull)};
    return pthread_cond_timedwait(cv, mu, &ts);
}
