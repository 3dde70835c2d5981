/* progress.c: mt-probe's progress line on a terminal (progress.h). */
#include "probe/progress.h"

#include <math.h>
#include <string.h>

static void clock_text(char *buf, size_t cap, double s)
{
    if (!isfinite(s) || s < 0)
        s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

void mt_progress_format(char *buf, size_t cap, const char *what,
                        const char *unit, double done, double total,
                        double elapsed_s, const char *detail)
{
    char el[32], left[48];
    clock_text(el, sizeof el, elapsed_s);
    /* "run i of n" counts the one under way; the fraction for the estimate
     * is what is finished (done may be fractional: 2.5 = half of the 3rd). */
    double pct = total > 0 ? 100.0 * done / total : 0;
    if (done > 0 && total > done) {
        char l[32];
        clock_text(l, sizeof l, elapsed_s * (total - done) / done);
        snprintf(left, sizeof left, "about %s left", l);
    } else if (done >= total && total > 0) {
        snprintf(left, sizeof left, "finishing");
    } else {
        snprintf(left, sizeof left, "time left not known yet");
    }
    long cur = (long)floor(done) + 1;
    if (total > 0 && cur > (long)ceil(total))
        cur = (long)ceil(total);
    snprintf(buf, cap, "%s: %s %ld of %.0f (%.0f%%), %s elapsed, %s%s%s",
             what, unit, cur, total, pct, el, left,
             detail && *detail ? "; " : "", detail ? detail : "");
}

void mt_progress_start(mt_progress *p, int on, FILE *f, const char *what,
                       uint64_t now_ns)
{
    memset(p, 0, sizeof *p);
    p->on = on && f;
    p->f = f;
    p->what = what;
    p->t0 = now_ns;
}

void mt_progress_show(mt_progress *p, uint64_t now_ns, int force,
                      const char *unit, double done, double total,
                      const char *detail)
{
    if (!p->on)
        return;
    if (!force && p->drawn && now_ns - p->last < 500000000ull)
        return;
    p->last = now_ns;
    p->drawn = 1;
    char line[256];
    mt_progress_format(line, sizeof line, p->what, unit, done, total,
                       (double)(now_ns - p->t0) / 1e9, detail);
    /* \033[K erases what a longer previous line left to the right. */
    fprintf(p->f, "\r%s\033[K", line);
    fflush(p->f);
}

void mt_progress_clear(mt_progress *p)
{
    if (!p->on || !p->drawn)
        return;
    fprintf(p->f, "\r\033[K");
    fflush(p->f);
    p->drawn = 0;
}
