/* spawn.c: starting and stopping an mt-serve child (see spawn.h).
 *
 * The child gets /dev/null on stdin, a pipe on stdout, a log file on
 * stderr; we wait for its socket to appear, or for it to die (then the last
 * line of its log is the error). Our stdio is flushed before fork so the
 * child never writes our buffered output a second time.
 */
#include "probe/spawn.h"
#include "util/clock.h"
#include "util/errmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int mt_spawn_start(mt_spawn_proc *sp, const char *serve_bin,
                    char *const *args, int nargs, const char *sock,
                    const char *log_path, double wait_s, char *err,
                    size_t errlen)
{
    int pfd[2];
    memset(sp, 0, sizeof *sp);
    sp->pid = -1;
    sp->out_fd = -1;
    snprintf(sp->sock, sizeof sp->sock, "%s", sock);
    snprintf(sp->log, sizeof sp->log, "%s", log_path ? log_path : "/dev/null");
    char **argv = mt_calloc_or_err((size_t)nargs + 4, sizeof *argv, err, errlen, NULL);
    if (!argv)
        return -1;
    argv[0] = (char *)serve_bin;
    argv[1] = (char *)"-s";
    argv[2] = (char *)sock;
    for (int i = 0; i < nargs; i++)
        argv[3 + i] = args[i];
    if (pipe(pfd) < 0) {
        free(argv);
        mt_set_err(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    unlink(sock);
    fflush(NULL);   /* a child must not inherit (and flush) our buffers */
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        free(argv);
        mt_set_err(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        int lfd = open(sp->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int nfd = open("/dev/null", O_RDONLY);
        if (lfd < 0 || nfd < 0)
            _exit(126);
        dup2(nfd, 0);
        dup2(pfd[1], 1);
        dup2(lfd, 2);
        close(pfd[0]);
        close(pfd[1]);
        execv(serve_bin, argv);
        dprintf(2, "mt-probe: exec %s: %s\n", serve_bin, strerror(errno));
        _exit(127);
    }
    free(argv);
    close(pfd[1]);
    sp->pid = pid;
    sp->out_fd = pfd[0];
    fcntl(sp->out_fd, F_SETFL, fcntl(sp->out_fd, F_GETFL) | O_NONBLOCK);
    fcntl(sp->out_fd, F_SETFD, FD_CLOEXEC);
    uint64_t until = mt_clock_ns() + (uint64_t)(wait_s * 1e9);
    for (;;) {
        struct stat st;
        if (stat(sock, &st) == 0 && S_ISSOCK(st.st_mode))
            return 0;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            sp->pid = -1;
            close(sp->out_fd);
            sp->out_fd = -1;
            /* its last line that is not the usage reminder after a usage
             * error: the error itself */
            char line[512] = "";
            FILE *f = fopen(sp->log, "r");
            if (f) {
                char tmp[512];
                while (fgets(tmp, sizeof tmp, f))
                    if (tmp[0] != '\n' && strncmp(tmp, "usage:", 6) != 0)
                        snprintf(line, sizeof line, "%s", tmp);
                fclose(f);
            }
            line[strcspn(line, "\n")] = 0;
            mt_set_err(err, errlen, "%s exited (status %d) before listening%s%s",
                    serve_bin, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                    *line ? ": " : "", line);
            return -1;
        }
        if (mt_clock_ns() > until) {
            mt_spawn_stop(sp, 1.0, NULL, NULL);
            mt_set_err(err, errlen, "%s did not create %s within %.0f s",
                    serve_bin, sock, wait_s);
            return -1;
        }
        mt_sleep_s(0.02);
    }
}

int mt_spawn_poll_lines(mt_spawn_proc *sp, mt_line_fn fn, void *user)
{
    int lines = 0;
    if (sp->out_fd < 0)
        return 0;
    for (;;) {
        ssize_t n = read(sp->out_fd, sp->linebuf + sp->linelen,
                         sizeof sp->linebuf - 1 - sp->linelen);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0) {           /* EOF: the server closed stdout */
                close(sp->out_fd);
                sp->out_fd = -1;
            }
            break;
        }
        sp->linelen += (size_t)n;
        size_t start = 0;
        for (size_t i = 0; i < sp->linelen; i++) {
            if (sp->linebuf[i] != '\n')
                continue;
            sp->linebuf[i] = 0;
            if (fn)
                fn(user, sp->linebuf + start, i - start);
            lines++;
            start = i + 1;
        }
        memmove(sp->linebuf, sp->linebuf + start, sp->linelen - start);
        sp->linelen -= start;
        if (sp->linelen == sizeof sp->linebuf - 1)
            sp->linelen = 0;    /* an absurd line: drop it, keep going */
    }
    return lines;
}

int mt_spawn_stop(mt_spawn_proc *sp, double grace_s, mt_line_fn fn,
                   void *user)
{
    int status = -1;
    if (sp->pid > 0) {
        kill(sp->pid, SIGTERM);
        uint64_t until = mt_clock_ns() + (uint64_t)(grace_s * 1e9);
        int done = 0;
        while (!done) {
            mt_spawn_poll_lines(sp, fn, user);
            pid_t r = waitpid(sp->pid, &status, WNOHANG);
            if (r == sp->pid)
                done = 1;
            else if (mt_clock_ns() > until) {
                kill(sp->pid, SIGKILL);
                waitpid(sp->pid, &status, 0);
                done = 1;
            } else
                mt_sleep_s(0.01);
        }
        sp->pid = -1;
    }
    mt_spawn_poll_lines(sp, fn, user);
    if (sp->out_fd >= 0) {
        close(sp->out_fd);
        sp->out_fd = -1;
    }
    unlink(sp->sock);
    return status;
}


int mt_spawn_start_scaled(mt_spawn_proc *sp, const char *serve_bin,
                          char *const *args, int nargs, double k,
                          const char *sock, const char *log_path,
                          char ***args_out, char kbuf[32],
                          char *err, size_t errlen)
{
    static char time_scale_opt[] = "--time-scale";
    snprintf(kbuf, 32, "%.17g", k);
    char **v = calloc((size_t)nargs + 3, sizeof *v);
    *args_out = v;
    if (!v) {
        mt_set_err(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < nargs; i++)
        v[i] = args[i];
    int n = nargs;
    if (k != 1) {
        v[n++] = time_scale_opt;
        v[n++] = kbuf;
    }
    return mt_spawn_start(sp, serve_bin, v, n, sock, log_path, 60.0, err, errlen);
}

void mt_spawn_client_config(mt_client_config *cc, int max_sessions, double period_ns,
                            double k, const mt_client_callbacks *cb, void *user)
{
    memset(cc, 0, sizeof *cc);
    cc->hello.sample_rate = 24000;
    cc->hello.frame_samples = 1920;
    cc->hello.channels = 1;
    cc->hello.encoding = MT_ENC_PCM_S16LE;
    cc->max_sessions = max_sessions;
    if (k != 1)
        cc->period_ns = (int64_t)llround(period_ns / k);
    cc->cb = cb;
    cc->user = user;
}
