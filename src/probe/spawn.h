/* spawn.h: an mt-serve child for the probes: start it on a private
 * socket with its stdout (tick lines) piped back, read its lines without
 * blocking, stop it by its pid (SIGTERM, then SIGKILL after a grace).
 */
#ifndef MT_PROBE_SPAWN_H
#define MT_PROBE_SPAWN_H

#include <stddef.h>
#include <stdint.h>

#include "client/client.h"

typedef struct mt_spawn_proc {
    int   pid;
    int   out_fd;                 /* its stdout (tick lines), non-blocking */
    char  sock[256];
    char  log[256];               /* its stderr */
    char  linebuf[8192];
    size_t linelen;
} mt_spawn_proc;

/* Starts `serve_bin -s SOCK ARGS...` with stdout piped to us and stderr
 * to log_path; waits until the socket exists (or the child dies). */
int  mt_spawn_start(mt_spawn_proc *sp, const char *serve_bin,
                     char *const *args, int nargs, const char *sock,
                     const char *log_path, double wait_s,
                     char *err, size_t errlen);
/* Reads whatever tick lines are ready; calls fn for each whole line. */
typedef void (*mt_line_fn)(void *user, const char *line, size_t len);
int  mt_spawn_poll_lines(mt_spawn_proc *sp, mt_line_fn fn, void *user);
/* SIGTERM, wait up to grace_s, then SIGKILL. Returns the exit status as
 * from waitpid or -1. Reads remaining lines into fn first. */
int  mt_spawn_stop(mt_spawn_proc *sp, double grace_s, mt_line_fn fn,
                    void *user);


/* mt_spawn_start with --time-scale K added to args when k != 1. The
 * argument vector is returned in *args_out for the caller to free; it
 * points into kbuf, which must live as long. */
int  mt_spawn_start_scaled(mt_spawn_proc *sp, const char *serve_bin,
                           char *const *args, int nargs, double k,
                           const char *sock, const char *log_path,
                           char ***args_out, char kbuf[32],
                           char *err, size_t errlen);

/* The client config of a probe's load against such a server: the HELLO
 * of the model the probes drive (24 kHz, 1920-sample mono PCM frames),
 * room for max_sessions, and, when k != 1, the frame period period_ns / k
 * (ACCEPT names the model's period; a server under --time-scale K runs
 * 1/K of it). */
void mt_spawn_client_config(mt_client_config *cc, int max_sessions, double period_ns,
                            double k, const mt_client_callbacks *cb, void *user);

#endif
