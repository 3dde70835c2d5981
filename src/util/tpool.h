/* tpool.h: a pool of T threads, the caller's thread being thread 0, that
 * run each parallel phase of a piece of work together: mt_pool_run posts
 * the phase, runs its share on the caller's thread and returns when every
 * thread is done. Workers spin between phases (spin_ns) and then sleep
 * (see tpool.c for why); mt_pool_wake wakes them ahead of the work. One
 * caller at a time per pool. Used by the CPU backend (decode/cpu_pool.h)
 * and Mimi's CPU codec (codec/mimi.c). */
#ifndef MT_UTIL_TPOOL_H
#define MT_UTIL_TPOOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A phase: the work of thread tid of nt on ctx. */
typedef void (*mt_pool_fn)(void *ctx, int tid, int nt);

struct mt_pool_arg;

typedef struct mt_pool {
    int             n;        /* threads including the caller */
    uint64_t        spin_ns;  /* how long a waiting thread spins before it sleeps */
    pthread_t      *th;       /* [n-1]; NULL until started */
    struct mt_pool_arg *args; /* [n] what each worker is given */
    pthread_mutex_t mu;
    pthread_cond_t  start, done;
    atomic_uint     gen;      /* bumped once per phase */
    atomic_int      pending;  /* workers still running the phase */
    mt_pool_fn      fn;
    void           *ctx;
    int             stop;
} mt_pool;

/* Starts n - 1 workers (n >= 2; tp zeroed before). 0, or -1 with err and
 * nothing left running (tp->n is still n). */
int  mt_pool_start(mt_pool *tp, int n, uint64_t spin_ns, char *err, size_t errlen);
/* Stops and joins the workers; nothing when none were started. */
void mt_pool_stop(mt_pool *tp);
/* Runs fn(ctx, tid, n) on every thread (inline, fn(ctx, 0, 1), when none
 * were started) and returns when all are done. */
void mt_pool_run(mt_pool *tp, mt_pool_fn fn, void *ctx);
/* Wakes sleeping workers and returns at once: they are spinning when the
 * next phase is posted. */
void mt_pool_wake(mt_pool *tp);

#endif
