/* cpu_pool.c: the CPU backend's thread pool (see cpu_pool.h), the
 * backend-typed face of util/tpool.c: a phase of the step, fn(be, tid,
 * nt), runs through a trampoline. */
#include "decode/cpu_pool.h"
#include "decode/step.h"

static void trampoline(void *ctx, int tid, int nt)
{
    mt_tpool *tp = ctx;
    tp->fn(tp->be, tid, nt);
}

int mt_tpool_start(mt_tpool *tp, int n, char *err, size_t errlen)
{
    tp->n = n;
    return mt_pool_start(&tp->pool, n, MT_DECODER_SPIN_NS, err, errlen);
}

void mt_tpool_stop(mt_tpool *tp) { mt_pool_stop(&tp->pool); }

void mt_tpool_wake(mt_tpool *tp, struct cpu_backend *be)
{
    (void)be;
    mt_pool_wake(&tp->pool);
}

void mt_tpool_run(mt_tpool *tp, struct cpu_backend *be, mt_tpool_fn fn)
{
    if (tp->n == 1 || !tp->pool.th) {
        fn(be, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->be = be;
    mt_pool_run(&tp->pool, trampoline, tp);
}
