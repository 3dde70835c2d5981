/* test_lineout.c: the machine stream's queue (src/serve/lineout.c) over a
 * pipe the test holds full, so that the writer thread is blocked exactly as
 * behind a stopped reader: puts never wait, what does not fit is dropped
 * and counted, the next line that gets in carries lines_dropped=N, the
 * drop report is rate-limited on the caller's clock, a new descriptor takes
 * later lines, and close gives up on a stalled reader after its bound. */
#define _GNU_SOURCE
#include "serve/lineout.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static void set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* Fills the pipe to the last byte; returns the bytes written. */
static size_t fill(int wfd)
{
    size_t n = 0;
    set_nonblock(wfd, 1);
    while (write(wfd, "J", 1) == 1)
        n++;
    set_nonblock(wfd, 0);
    return n;
}

static void drain_bytes(int rfd, size_t n)
{
    char buf[512];
    while (n > 0) {
        ssize_t r = read(rfd, buf, n < sizeof buf ? n : sizeof buf);
        if (r <= 0)
            return;
        n -= (size_t)r;
    }
}

/* Reads one line (blocking) without its newline. */
static void read_line(int rfd, char *out, size_t cap)
{
    size_t n = 0;
    char c;
    while (read(rfd, &c, 1) == 1 && c != '\n')
        if (n + 1 < cap)
            out[n++] = c;
    out[n] = '\0';
}

int main(void)
{
    alarm(20);   /* a broken writer must fail the test, not hang it */
    int p[2];
    if (pipe(p) != 0)
        tap_skip_all("pipe");
    fcntl(p[1], F_SETPIPE_SZ, 4096);
    size_t junk = fill(p[1]);
    ok(junk > 0, "pipe full (%zu bytes)", junk);

    char err[256], line[300], msg[256];
    mt_lineout *q = NULL;
    is_int(mt_lineout_create(p[1], 0, 256, &q, err, sizeof err), 0, "created, 256-byte ring");

    char l49[50];
    memset(l49, 'a', 49);
    l49[49] = '\0';
    int put[7];
    for (int i = 0; i < 7; i++) {
        l49[0] = (char)('0' + i);
        put[i] = mt_lineout_put(q, l49);
    }
    ok(!put[0] && !put[1] && !put[2] && !put[3] && !put[4],
       "five 50-byte lines fit in 256 bytes, without waiting for the reader");
    ok(put[5] == 1 && put[6] == 1, "the sixth and seventh are dropped at once");
    is_int(mt_lineout_dropped(q), 2, "two dropped");

    ok(mt_lineout_report(q, 1000, 10000000000ull, msg, sizeof msg) == 1,
       "first drop: reported at once");
    like(msg, "2 lines dropped", "the report counts them");
    ok(mt_lineout_report(q, 2000, 10000000000ull, msg, sizeof msg) == 0,
       "nothing new: no report");
    mt_lineout_put(q, "x");   /* still full: one more drop */
    ok(mt_lineout_report(q, 3000, 10000000000ull, msg, sizeof msg) == 0,
       "a new drop within the interval: held back");
    ok(mt_lineout_report(q, 10000001000ull, 10000000000ull, msg, sizeof msg) == 1,
       "after the interval: reported");
    like(msg, "1 lines dropped", "only the new drop");
    like(msg, "3 in all", "and the total");

    drain_bytes(p[0], junk);   /* the reader resumes */
    int whole = 0;
    for (int i = 0; i < 5; i++) {
        read_line(p[0], line, sizeof line);
        whole += line[0] == (char)('0' + i) && strlen(line) == 49;
    }
    is_int(whole, 5, "the five queued lines come out whole and in order");
    is_int(mt_lineout_flush(q, 5000000000ull), 0, "flush: the ring is empty");
    is_int(mt_lineout_put(q, "tick=9 t=1.000"), 0, "the next line gets in");
    read_line(p[0], line, sizeof line);
    is_str(line, "tick=9 t=1.000 lines_dropped=3", "and carries the drop count");
    is_int(mt_lineout_put(q, "tick=10 t=1.100"), 0, "the one after");
    read_line(p[0], line, sizeof line);
    is_str(line, "tick=10 t=1.100", "carries none");

    int p2[2];
    if (pipe(p2) != 0)
        tap_skip_all("pipe");
    mt_lineout_set_fd(q, p2[1], 1);
    mt_lineout_put(q, "to the new one");
    read_line(p2[0], line, sizeof line);
    is_str(line, "to the new one", "set_fd: later lines go to the new descriptor");

    /* a stalled reader at close: bounded */
    junk = fill(p2[1]);
    mt_lineout_put(q, "never read");
    uint64_t left = mt_lineout_close(q, 100000000ull, msg, sizeof msg);
    is_int(left, 1, "close after 100 ms: one line not written");
    like(msg, "1 lines not written", "and says so");
    ok(fcntl(p2[1], F_GETFD) == -1 && errno == EBADF, "the owned descriptor is closed");
    ok(fcntl(p[1], F_GETFD) != -1, "the one not owned is kept");

    mt_lineout *q2 = NULL;
    is_int(mt_lineout_create(p[1], 0, 64, &q2, err, sizeof err), 0, "a second queue");
    char longl[100];
    memset(longl, 'z', 99);
    longl[99] = '\0';
    is_int(mt_lineout_put(q2, longl), 1, "a line longer than the ring is dropped");
    mt_lineout_put(q2, "short");
    is_int(mt_lineout_close(q2, 1000000000ull, msg, sizeof msg), 0,
           "close with a reading reader: everything written");
    read_line(p[0], line, sizeof line);
    is_str(line, "short lines_dropped=1", "the count came out with the next line");

    /* JSON: every line converted, the drop count a key inside the object */
    is_int(mt_lineout_create(p[1], 0, 64, &q2, err, sizeof err), 0, "a JSON queue");
    mt_lineout_set_json(q2, 1);
    longl[0] = 'k';
    longl[1] = '=';
    is_int(mt_lineout_put(q2, longl), 1, "json: a line longer than the ring is dropped");
    /* flushed after each line: the 64-byte ring must not drop them */
    mt_lineout_put(q2, "tick=1 reason=\"a b\"");
    mt_lineout_flush(q2, 5000000000ull);
    mt_lineout_put(q2, longl);
    mt_lineout_put(q2, "");
    mt_lineout_flush(q2, 5000000000ull);
    mt_lineout_put(q2, "done");
    is_int(mt_lineout_close(q2, 1000000000ull, msg, sizeof msg), 0, "json: all written");
    read_line(p[0], line, sizeof line);
    is_str(line, "{\"tick\":1,\"reason\":\"a b\",\"lines_dropped\":1}",
           "json: the line as an object, the drop count inside it");
    read_line(p[0], line, sizeof line);
    is_str(line, "{\"lines_dropped\":1}", "json: an empty line with a drop count");
    read_line(p[0], line, sizeof line);
    is_str(line, "{\"done\":true}", "json: a flag");
    ok(mt_lineout_create(-1, 0, 64, &q2, err, sizeof err) == -1 && q2 == NULL,
       "a bad descriptor is refused");
    close(p[0]);
    close(p[1]);
    close(p2[0]);
    return tap_done();
}
