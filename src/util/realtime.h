/* realtime.h: real-time scheduling for mt-serve's timing threads.
 *
 * A tick that must start every 80 ms loses to any busier process on a
 * shared host: with more runnable work than cores, a thread sleeping to
 * short deadlines wakes tens of milliseconds late under the normal policy
 * and within about a millisecond under SCHED_FIFO. Such a hiccup is a
 * late tick, and near capacity the lag takes several ticks to
 * drain. mt-serve --rt-priority N puts its I/O, tick and line-output
 * threads under SCHED_FIFO at N; the CPU decoder's worker threads, made
 * before, keep the normal policy so that a full step cannot starve the
 * rest of the host.
 */
#ifndef MT_REALTIME_H
#define MT_REALTIME_H

#include <stddef.h>

/* The lowest and highest priorities accepted (SCHED_FIFO's range on
 * Linux). */
#define MT_RT_PRIORITY_MIN 1
#define MT_RT_PRIORITY_MAX 99

/* Puts the calling thread under SCHED_FIFO at priority prio; threads it
 * creates after inherit it. 0, or -1 with err (EPERM told as what to give:
 * root, CAP_SYS_NICE or an rtprio limit). */
int mt_realtime_enter(int prio, char *err, size_t errlen);

#endif
