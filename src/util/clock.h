/* clock.h: the real monotonic clock and the sleeps on it, shared so each
 * module that needs wall time does not keep its own copy. Code that tests
 * must drive (engine, simulated backend) still takes an injected clock and
 * only uses these as its default. */
#ifndef MT_CLOCK_H
#define MT_CLOCK_H

#include <pthread.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t mt_clock_ns(void);

/* The calling thread's CPU time in nanoseconds (CLOCK_THREAD_CPUTIME_ID):
 * what a stage cost the thread, whatever else the machine ran. */
uint64_t mt_thread_cpu_ns(void);

/* Sleeps s seconds (s >= 0), resuming after a signal with the time left. */
void mt_sleep_s(double s);

/* Sleeps until CLOCK_MONOTONIC reaches at (ns); absolute, so a late wake-up
 * never shifts the next target. Resumes after a signal. */
void mt_sleep_until_ns(uint64_t at);

/* A condition variable whose timed waits run on the monotonic clock, so a
 * change of the wall clock neither stretches nor cuts them: 0 or an errno. */
int mt_cond_init(pthread_cond_t *cv);

/* Waits on cv (made by mt_cond_init, mu held) until a signal or until the
 * monotonic clock reaches at (ns); the pthread_cond_timedwait result. */
int mt_cond_wait_until_ns(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t at);

#endif
