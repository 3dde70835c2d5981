/* startup.c: the progress lines of a slow start (startup.h). */
#include "cmd/startup.h"
#include "util/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define FIRST_S 2.0     /* quiet for a start shorter than this */
#define EVERY_S 5.0     /* then a line this often */

static struct {
    const char *prog;
    _Atomic(const char *) stage;   /* set by the main thread */
    atomic_int  stop;
    int         spoke;              /* the watcher printed a line */
    uint64_t    t0;
    pthread_t   th;
    int         running;
} st;

static void *watch(void *unused)
{
    double next = FIRST_S;
    while (!atomic_load(&st.stop)) {
        mt_sleep_s(0.05);
        double s = (double)(mt_clock_ns() - st.t0) / 1e9;
        if (s < next || atomic_load(&st.stop))
            continue;
        fprintf(stderr, "%s: starting: %s (%.0f s so far)\n", st.prog,
                atomic_load(&st.stage), s);
        st.spoke = 1;
        next = s + EVERY_S;
    }
    return unused;
}

int mt_startup_begin(const char *prog)
{
    st.prog = prog;
    atomic_store(&st.stage, "setting up");
    atomic_store(&st.stop, 0);
    st.spoke = 0;
    st.t0 = mt_clock_ns();
    st.running = pthread_create(&st.th, NULL, watch, NULL) == 0;
    return st.running ? 0 : -1;
}

void mt_startup_stage(const char *what)
{
    atomic_store(&st.stage, what);
}

void mt_startup_end(void)
{
    if (!st.running)
        return;
    atomic_store(&st.stop, 1);
    pthread_join(st.th, NULL);
    st.running = 0;
    if (st.spoke)
        fprintf(stderr, "%s: started in %.1f s\n", st.prog,
                (double)(mt_clock_ns() - st.t0) / 1e9);
}
