/* tpool.c: a thread pool for phases of parallel work (see tpool.h):
 * workers that spin between the phases of a step and sleep between steps,
 * a phase posted by bumping a generation counter. The CPU backend's pool
 * (decode/cpu_pool.c) and Mimi's CPU codec (codec/mimi.c) run on it. */
#include "util/errmsg.h"
#include "util/clock.h"
#include "util/tpool.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

struct mt_pool_arg { mt_pool *tp; int tid; };

/* How long a thread spins for the next phase (or the phase's end) before
 * it sleeps on the condition variable: spin_ns, given at start (the CPU
 * backend's reasoning for its value follows). Timed, not counted: a pause
 * instruction costs 10 to 140 cycles depending on the core. On a VM a
 * sleeping thread takes 0.1 to several milliseconds to run again (its
 * vCPU halted and must be woken through the hypervisor); paid at each of
 * a step's 42 phases, that would double a small batch's step in mt-serve.
 * So a thread spins through the whole step (phases follow each other
 * within microseconds; one thread may be preempted for a while), and
 * sleeps only between steps, a frame period apart; the server wakes the
 * pool MT_DECODER_WAKE_NS ahead of each tick (mt_pool_wake), which
 * spin_ns must outlast. The cost is about spin_ns + MT_DECODER_WAKE_NS of
 * spinning per worker per step: 6% of a core at an 80 ms tick. */

/* One turn of a spin wait begun at *t0 (0: not yet timed): 1 once it has
 * lasted spin_ns. Past the first SPIN_PAUSE_NS it yields the CPU at every
 * turn instead of pausing: when more threads are runnable than there are
 * cores (the clients, the I/O thread, a sanitizer build), a pure spin
 * would hold the core that the thread it waits for needs. */
static int spin_turn(uint64_t *t0, unsigned i, uint64_t spin_ns)
{
    enum { SPIN_PAUSE_NS = 50000 };
    cpu_relax();
    if ((i & 63) != 63)
        return 0;
    uint64_t t = mt_clock_ns();
    if (!*t0) {
        *t0 = t;
        return 0;
    }
    if (t - *t0 > spin_ns)
        return 1;
    if (t - *t0 > SPIN_PAUSE_NS)
        sched_yield();
    return 0;
}

static void spin_until_changed(atomic_uint *gen, unsigned seen, uint64_t spin_ns)
{
    uint64_t t0 = 0;
    for (unsigned i = 0; atomic_load_explicit(gen, memory_order_acquire) == seen; i++)
        if (spin_turn(&t0, i, spin_ns))
            return;
}

static void spin_until_zero(atomic_int *pending, uint64_t spin_ns)
{
    uint64_t t0 = 0;
    for (unsigned i = 0; atomic_load_explicit(pending, memory_order_acquire) > 0; i++)
        if (spin_turn(&t0, i, spin_ns))
            return;
}

/* A phase's workers spin briefly (phases follow each other within
 * microseconds inside a step) and then sleep (between steps). */
static void *worker_main(void *arg)
{
    struct mt_pool_arg *wa = arg;
    mt_pool *tp = wa->tp;
    /* Threads start while gen is 0: a phase posted before this thread runs
     * must still be seen as new. */
    unsigned seen = 0;
    for (;;) {
        spin_until_changed(&tp->gen, seen, tp->spin_ns);
        if (atomic_load_explicit(&tp->gen, memory_order_acquire) == seen) {
            pthread_mutex_lock(&tp->mu);
            while (atomic_load(&tp->gen) == seen && !tp->stop)
                pthread_cond_wait(&tp->start, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (tp->stop)
            return NULL;
        seen = atomic_load(&tp->gen);
        tp->fn(tp->ctx, wa->tid, tp->n);
        if (atomic_fetch_sub(&tp->pending, 1) == 1) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
}

/* Joins the first `started` workers and frees what start made. */
static void stop_workers(mt_pool *tp, int started)
{
    pthread_mutex_lock(&tp->mu);
    tp->stop = 1;
    atomic_fetch_add(&tp->gen, 1);
    pthread_cond_broadcast(&tp->start);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 0; i < started; i++)
        pthread_join(tp->th[i], NULL);
    free(tp->th);
    free(tp->args);
    tp->th = NULL;
    tp->args = NULL;
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->start);
    pthread_cond_destroy(&tp->done);
}

int mt_pool_start(mt_pool *tp, int n, uint64_t spin_ns, char *err, size_t errlen)
{
    tp->n = n;
    tp->spin_ns = spin_ns;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->start, NULL);
    pthread_cond_init(&tp->done, NULL);
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->pending, 0);
    tp->th = calloc((size_t)n - 1, sizeof *tp->th);
    tp->args = calloc((size_t)n, sizeof *tp->args);
    if (!tp->th || !tp->args) {
        mt_set_err(err, errlen, "thread pool: out of memory for threads");
        stop_workers(tp, 0);
        return -1;
    }
    for (int i = 1; i < n; i++) {
        tp->args[i] = (struct mt_pool_arg){ tp, i };
        int rc = pthread_create(&tp->th[i - 1], NULL, worker_main, &tp->args[i]);
        if (rc) {
            mt_set_err(err, errlen, "thread pool: pthread_create: %s", strerror(rc));
            stop_workers(tp, i - 1);
            return -1;
        }
    }
    return 0;
}

void mt_pool_stop(mt_pool *tp)
{
    if (tp->th)
        stop_workers(tp, tp->n - 1);
}

/* Waits until the workers have finished the phase last posted: spins
 * (spin_ns), then sleeps on done. */
static void tpool_settle(mt_pool *tp)
{
    spin_until_zero(&tp->pending, tp->spin_ns);
    if (atomic_load(&tp->pending) > 0) {
        pthread_mutex_lock(&tp->mu);
        while (atomic_load(&tp->pending) > 0)
            pthread_cond_wait(&tp->done, &tp->mu);
        pthread_mutex_unlock(&tp->mu);
    }
}

static void phase_nothing(void *ctx, int tid, int nt)
{
    (void)ctx, (void)tid, (void)nt;
}

/* Hands fn to the workers as the next phase; returns at once. */
static void tpool_post(mt_pool *tp, mt_pool_fn fn, void *ctx)
{
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store(&tp->pending, tp->n - 1);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
    pthread_cond_broadcast(&tp->start);
    pthread_mutex_unlock(&tp->mu);
}

/* Posts an empty phase and returns at once: the workers wake from their
 * sleep now and are spinning (for spin_ns) when the step's first phase is
 * posted, instead of paying their wake-up inside it. */
void mt_pool_wake(mt_pool *tp)
{
    if (tp->n <= 1 || !tp->th)
        return;
    tpool_settle(tp);
    tpool_post(tp, phase_nothing, NULL);
}

void mt_pool_run(mt_pool *tp, mt_pool_fn fn, void *ctx)
{
    if (tp->n <= 1 || !tp->th) {
        fn(ctx, 0, 1);
        return;
    }
    tpool_settle(tp);           /* a wake-up phase may still run */
    tpool_post(tp, fn, ctx);
    fn(ctx, 0, tp->n);
    tpool_settle(tp);
}
