/* startup.h: a start that takes seconds says so. mt-serve's start (making
 * synthetic:moshiko's weights takes most of a minute on a CPU, a model
 * directory's load as long as its disk) is silent until its first line;
 * a thread of this module prints, from the 2nd second on and every 5 s,
 * what it is doing and for how long:
 *     mt-serve: starting: loading synthetic:moshiko (12 s so far)
 * and, when it was heard from at all, how long the whole start took. A
 * start under 2 s prints nothing. */
#ifndef MT_STARTUP_H
#define MT_STARTUP_H

/* Starts the watcher (prog: the line's prefix, kept). 0, or -1 when the
 * thread cannot start (the start then goes on silently). */
int  mt_startup_begin(const char *prog);
/* What the start is doing now (a string that outlives the next call). */
void mt_startup_stage(const char *what);
/* The start is over: the watcher stops (its last line said). */
void mt_startup_end(void);

#endif
