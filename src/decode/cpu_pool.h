/* cpu_pool.h: the CPU backend's thread pool (cpu_pool.c, over
 * util/tpool.h, whose tpool.c says why it spins). T threads, the
 * caller's thread being thread 0, run each parallel phase of a step
 * together: mt_tpool_run posts the phase, runs its share on the caller's
 * thread and returns when every thread is done. Workers spin between the
 * phases of a step and sleep between steps (see cpu_pool.c for why);
 * mt_tpool_wake wakes them ahead of a step.
 *
 * Internal to the CPU backend (backend_cpu.c).
 */
#ifndef MT_CPU_POOL_H
#define MT_CPU_POOL_H

#include <stddef.h>

#include "util/tpool.h"

/* A phase: the work of thread tid of nt on the backend be. */
struct cpu_backend;
typedef void (*mt_tpool_fn)(struct cpu_backend *be, int tid, int nt);

typedef struct mt_tpool {
    int             n;        /* threads including the caller */
    mt_pool         pool;
    mt_tpool_fn     fn;       /* the phase being run */
    struct cpu_backend *be;
} mt_tpool;

/* Starts n - 1 workers (n >= 2; tp zeroed before). 0, or -1 with err and
 * nothing left running (tp->n is still n). */
int  mt_tpool_start(mt_tpool *tp, int n, char *err, size_t errlen);
/* Stops and joins the workers; nothing when none were started. tp->n is
 * kept (the backend sizes its per-thread scratch by it). */
void mt_tpool_stop(mt_tpool *tp);
/* Runs fn on every thread (inline when n is 1) and returns when all are
 * done. */
void mt_tpool_run(mt_tpool *tp, struct cpu_backend *be, mt_tpool_fn fn);
/* Wakes sleeping workers and returns at once: they are spinning when the
 * next phase is posted, about MT_DECODER_WAKE_NS later. */
void mt_tpool_wake(mt_tpool *tp, struct cpu_backend *be);

#endif
