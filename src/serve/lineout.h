/* lineout.h: the machine stream's way out of mt-serve, so that no reader
 * can hold back a tick.
 *
 * The tick thread (and the I/O thread) hand each latency line to
 * mt_lineout_put, which copies it into a bounded ring of bytes and
 * returns at once; a writer thread of its own does the blocking writes to
 * the output descriptor (stdout, stderr or the latency log). When the
 * ring has no room for a line, because whoever reads the output stopped
 * reading, the line is dropped and counted, and the next line that gets
 * into the ring carries ` lines_dropped=N` (N lines were lost just before
 * it). mt_lineout_report gives the I/O thread a rate-limited message about
 * drops to log; the tick thread never logs about them, since the log may
 * be the very stream that is stalled.
 */
#ifndef MT_LINEOUT_H
#define MT_LINEOUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct mt_lineout mt_lineout;

/* Starts the writer thread on fd (owned: closed by mt_lineout_close).
 * cap: bytes of the ring (lines longer than cap are always dropped).
 * 0, or -1 with err. */
int  mt_lineout_create(int fd, int owned, size_t cap, mt_lineout **out,
                       char *err, size_t errlen);

/* Queues one line (given without its newline; the newline is added).
 * Never waits for the output. Thread-safe. Returns 0 queued, 1 dropped. */
int  mt_lineout_put(mt_lineout *q, const char *line);

/* json 1: each later line is converted to one JSON object
 * (mt_latline_to_json), lines_dropped included as a key of it; 0: logfmt
 * as given (the default). */
void mt_lineout_set_json(mt_lineout *q, int json);

/* Sends later lines to fd instead (SIGHUP reopening the latency log); the
 * old descriptor, if owned, is closed once no write uses it. */
void mt_lineout_set_fd(mt_lineout *q, int fd, int owned);

/* Lines dropped so far (full ring), and lines lost to write errors. */
uint64_t mt_lineout_dropped(mt_lineout *q);
uint64_t mt_lineout_write_errors(mt_lineout *q);

/* A message for the log when lines were dropped or lost since the last
 * message, at most one per every_ns (the first at once). now: the caller's
 * clock (ns). Returns 1 with msg filled, else 0. */
int  mt_lineout_report(mt_lineout *q, uint64_t now, uint64_t every_ns,
                       char *msg, size_t msglen);

/* Waits until everything queued is written, at most wait_ns (never call
 * it from the tick thread). 0, or -1 when lines are still queued. */
int  mt_lineout_flush(mt_lineout *q, uint64_t wait_ns);

/* Writes out what is queued, waiting at most wait_ns for a stalled reader,
 * then stops the writer thread and frees q. Returns the number of lines
 * that could not be written in time (0 when all got out); msg (may be
 * NULL) says so for the log. */
uint64_t mt_lineout_close(mt_lineout *q, uint64_t wait_ns, char *msg,
                          size_t msglen);

#endif
