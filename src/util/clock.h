/* clock.h: the real monotonic clock and the sleeps on it, shared so each
 * module that needs wall time does not keep its own copy. Code that tests
 * must drive (engine, simulated backend) still takes an injected clock and
 * only uses these as its default. */
#ifndef MT_CLOCK_H
#define MT_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t mt_clock_ns(void);

/* Sleeps s seconds (s >= 0), resuming after a signal with the time left. */
void mt_sleep_s(double s);

/* Sleeps until CLOCK_MONOTONIC reaches at (ns); absolute, so a late wake-up
 * never shifts the next target. Resumes after a signal. */
void mt_sleep_until_ns(uint64_t at);

#endif
