/* lineout.c: a bounded ring of machine-stream lines and the thread that
 * writes them out (see lineout.h).
 *
 * The ring holds whole lines, each with its newline. Producers copy in
 * under a mutex that the writer holds only to copy out, never across a
 * write(2), so a producer waits at most for a memcpy. The writer copies
 * up to PIPE_BUF bytes of whole lines at a time and writes them with one
 * call: on a pipe such a write is atomic, so a reader never sees half a
 * line, even when the writer is stopped in the middle of a stall.
 *
 * Shutdown waits a bounded time for the ring to empty; a writer still
 * blocked on a stalled reader then is cancelled. Cancellation is enabled
 * only around write(2) and poll(2), where the writer holds no lock.
 */
#define _GNU_SOURCE
#include "serve/lineout.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/errmsg.h"
#include "wire/latline.h"
#include "util/clock.h"

#define CHUNK_MAX (2 * PIPE_BUF)   /* room for one line longer than PIPE_BUF */

struct mt_lineout {
    pthread_mutex_t mu;
    pthread_cond_t  nonempty;      /* the writer waits for lines */
    pthread_cond_t  progress;      /* close waits for the ring to empty */
    char           *ring;
    size_t          cap, head, used;
    int             fd, owned;
    int             old_fd;        /* replaced while a write used it */
    int             writing;
    int             closing, stop;
    uint64_t        dropped_pending; /* since the last line that got in */
    uint64_t        dropped, lost;   /* ring full; write errors */
    int             lost_errno;
    int             json;          /* convert each line to a JSON object */
    uint64_t        reported_dropped, reported_lost, last_report;
    int             reported_once;
    pthread_t       th;
    char            chunk[CHUNK_MAX];
};

static size_t count_newlines(const char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += p[i] == '\n';
    return k;
}

/* Lines in the ring's used region (whole or partial). */
static uint64_t ring_lines(const mt_lineout *q)
{
    size_t first = q->used < q->cap - q->head ? q->used : q->cap - q->head;
    return count_newlines(q->ring + q->head, first) +
           count_newlines(q->ring, q->used - first);
}

static void ring_copy_in(mt_lineout *q, const char *s, size_t n)
{
    size_t tail = (q->head + q->used) % q->cap;
    size_t first = n < q->cap - tail ? n : q->cap - tail;
    memcpy(q->ring + tail, s, first);
    memcpy(q->ring, s + first, n - first);
    q->used += n;
}

/* Copies the next piece to write into q->chunk: whole lines, at most
 * PIPE_BUF bytes unless a single line is longer. */
static size_t ring_copy_out(mt_lineout *q)
{
    size_t take = q->used < CHUNK_MAX ? q->used : CHUNK_MAX;
    size_t first = take < q->cap - q->head ? take : q->cap - q->head;
    memcpy(q->chunk, q->ring + q->head, first);
    memcpy(q->chunk + first, q->ring, take - first);
    if (take <= PIPE_BUF)
        return take;
    for (size_t i = PIPE_BUF; i > 0; i--)
        if (q->chunk[i - 1] == '\n')
            return i;
    for (size_t i = PIPE_BUF; i < take; i++)
        if (q->chunk[i] == '\n')
            return i + 1;
    return take;
}

/* Writes all of p[0..n), waiting as long as the reader makes it wait
 * (the descriptor may be non-blocking when it shares its file description
 * with a non-blocking one). Returns 0, or -1 with errno. */
static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
        ssize_t w = write(fd, p, n);
        int e = errno;
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && e == EINTR)
            continue;
        if (w < 0 && (e == EAGAIN || e == EWOULDBLOCK)) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
            int pr = poll(&pf, 1, 1000);
            pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
            (void)pr;   /* a timeout or an error shows in the next write */
            continue;
        }
        errno = w < 0 ? e : EIO;
        return -1;
    }
    return 0;
}

static void *writer_main(void *arg)
{
    mt_lineout *q = arg;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->used == 0 && !q->stop)
            pthread_cond_wait(&q->nonempty, &q->mu);
        if (q->used == 0)
            break;
        size_t n = ring_copy_out(q);
        int fd = q->fd;
        q->writing = 1;
        pthread_mutex_unlock(&q->mu);
        int rc = write_all(fd, q->chunk, n);
        int e = errno;
        pthread_mutex_lock(&q->mu);
        q->writing = 0;
        if (q->old_fd >= 0) {
            close(q->old_fd);
            q->old_fd = -1;
        }
        if (rc != 0) {
            q->lost += count_newlines(q->chunk, n);
            q->lost_errno = e;
        }
        q->head = (q->head + n) % q->cap;
        q->used -= n;
        pthread_cond_broadcast(&q->progress);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

int mt_lineout_create(int fd, int owned, size_t cap, mt_lineout **out,
                      char *err, size_t errlen)
{
    *out = NULL;
    if (fd < 0 || cap == 0) {
        mt_set_err(err, errlen, "line output: bad descriptor or size");
        return -1;
    }
    mt_lineout *q = calloc(1, sizeof *q);
    char *ring = malloc(cap);
    if (!q || !ring) {
        free(q);
        free(ring);
        mt_set_err(err, errlen, "line output: out of memory (%zu bytes)", cap);
        return -1;
    }
    q->ring = ring;
    q->cap = cap;
    q->fd = fd;
    q->owned = owned;
    q->old_fd = -1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->nonempty, NULL);
    pthread_cond_init(&q->progress, &ca);
    pthread_condattr_destroy(&ca);
    int e = pthread_create(&q->th, NULL, writer_main, q);
    if (e != 0) {
        mt_set_err(err, errlen, "line output: pthread_create: %s", strerror(e));
        pthread_cond_destroy(&q->progress);
        pthread_cond_destroy(&q->nonempty);
        pthread_mutex_destroy(&q->mu);
        free(ring);
        free(q);
        return -1;
    }
    *out = q;
    return 0;
}

int mt_lineout_put(mt_lineout *q, const char *line)
{
    /* JSON lines are converted here, outside the lock, so every line of the
     * stream (ticks, requests, verdicts, frames) takes the same way. */
    char jbuf[3 * MT_LL_MAX_LINE + 16];
    size_t len = strlen(line);
    int json = __atomic_load_n(&q->json, __ATOMIC_RELAXED);
    if (json) {
        long n = mt_latline_to_json(line, len, jbuf, sizeof jbuf, NULL, 0);
        /* Never expected (the engine writes well-formed lines), but a
         * reader of the JSON stream must still get JSON. */
        if (n < 0)
            n = snprintf(jbuf, sizeof jbuf, "{\"malformed_line\":true}");
        line = jbuf;
        len = (size_t)n;
    }
    char suffix[48];
    size_t sl = 0;
    pthread_mutex_lock(&q->mu);
    if (q->dropped_pending) {
        if (!json)
            sl = (size_t)snprintf(suffix, sizeof suffix, " lines_dropped=%llu",
                                  (unsigned long long)q->dropped_pending);
        else /* inside the object: before its closing brace */
            sl = (size_t)snprintf(suffix, sizeof suffix, "%s\"lines_dropped\":%llu}",
                                  len > 2 ? "," : "",
                                  (unsigned long long)q->dropped_pending);
    }
    if (q->closing || len + sl + 1 > q->cap - q->used) {
        q->dropped_pending++;
        q->dropped++;
        pthread_mutex_unlock(&q->mu);
        return 1;
    }
    ring_copy_in(q, line, sl && json ? len - 1 : len);
    ring_copy_in(q, suffix, sl);
    ring_copy_in(q, "\n", 1);
    q->dropped_pending = 0;
    pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

void mt_lineout_set_json(mt_lineout *q, int json)
{
    __atomic_store_n(&q->json, json ? 1 : 0, __ATOMIC_RELAXED);
}

void mt_lineout_set_fd(mt_lineout *q, int fd, int owned)
{
    pthread_mutex_lock(&q->mu);
    int old = q->owned ? q->fd : -1;
    q->fd = fd;
    q->owned = owned;
    if (old >= 0) {
        if (q->writing) {
            if (q->old_fd >= 0)
                close(q->old_fd);
            q->old_fd = old;
        } else {
            close(old);
        }
    }
    pthread_mutex_unlock(&q->mu);
}

uint64_t mt_lineout_dropped(mt_lineout *q)
{
    pthread_mutex_lock(&q->mu);
    uint64_t n = q->dropped;
    pthread_mutex_unlock(&q->mu);
    return n;
}

uint64_t mt_lineout_write_errors(mt_lineout *q)
{
    pthread_mutex_lock(&q->mu);
    uint64_t n = q->lost;
    pthread_mutex_unlock(&q->mu);
    return n;
}

int mt_lineout_report(mt_lineout *q, uint64_t now, uint64_t every_ns,
                      char *msg, size_t msglen)
{
    pthread_mutex_lock(&q->mu);
    uint64_t d = q->dropped - q->reported_dropped;
    uint64_t l = q->lost - q->reported_lost;
    int due = (d || l) && (!q->reported_once || now - q->last_report >= every_ns);
    if (due) {
        if (d && l)
            mt_set_err(msg, msglen, "machine stream: %llu lines dropped (the "
                       "reader does not keep up; %llu in all), %llu lost (write: "
                       "%s)", (unsigned long long)d,
                       (unsigned long long)q->dropped, (unsigned long long)l,
                       strerror(q->lost_errno));
        else if (d)
            mt_set_err(msg, msglen, "machine stream: %llu lines dropped (the "
                       "reader does not keep up; %llu in all)",
                       (unsigned long long)d, (unsigned long long)q->dropped);
        else
            mt_set_err(msg, msglen, "machine stream: %llu lines lost (write: %s; "
                       "%llu in all)", (unsigned long long)l,
                       strerror(q->lost_errno), (unsigned long long)q->lost);
        q->reported_dropped = q->dropped;
        q->reported_lost = q->lost;
        q->last_report = now;
        q->reported_once = 1;
    }
    pthread_mutex_unlock(&q->mu);
    return due;
}

/* With q->mu held: waits until the ring is empty, at most wait_ns. */
static void wait_empty(mt_lineout *q, uint64_t wait_ns)
{
    uint64_t deadline = mt_clock_ns() + wait_ns;
    struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000ull),
                          .tv_nsec = (long)(deadline % 1000000000ull)};
    while (q->used > 0 &&
           pthread_cond_timedwait(&q->progress, &q->mu, &ts) != ETIMEDOUT)
        ;
}

int mt_lineout_flush(mt_lineout *q, uint64_t wait_ns)
{
    pthread_mutex_lock(&q->mu);
    wait_empty(q, wait_ns);
    int rc = q->used > 0 ? -1 : 0;
    pthread_mutex_unlock(&q->mu);
    return rc;
}

uint64_t mt_lineout_close(mt_lineout *q, uint64_t wait_ns, char *msg,
                          size_t msglen)
{
    if (msg && msglen)
        msg[0] = '\0';
    if (!q)
        return 0;
    pthread_mutex_lock(&q->mu);
    q->closing = 1;
    wait_empty(q, wait_ns);
    uint64_t left = ring_lines(q);
    int stuck = q->used > 0;
    q->stop = 1;
    pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->mu);
    if (stuck)
        pthread_cancel(q->th);
    pthread_join(q->th, NULL);
    if (left)
        mt_set_err(msg, msglen, "machine stream: %llu lines not written: the "
                   "reader did not take them within %.1f s",
                   (unsigned long long)left, (double)wait_ns / 1e9);
    if (q->owned && q->fd >= 0)
        close(q->fd);
    if (q->old_fd >= 0)
        close(q->old_fd);
    pthread_cond_destroy(&q->progress);
    pthread_cond_destroy(&q->nonempty);
    pthread_mutex_destroy(&q->mu);
    free(q->ring);
    free(q);
    return left;
}
