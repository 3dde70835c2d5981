/* plot.c: mt-probe's figures, drawn by gnuplot.
 *
 * Why gnuplot through a script file: it is a Debian package everyone has,
 * it writes PNG headless (pngcairo, or libgd's png), and the script kept
 * next to the PNG lets anyone redraw or restyle a figure without rerunning
 * an experiment. The figures are made for a newcomer to see the cliff
 * without reading a table: the frame period is drawn as a line, collapsed
 * runs are red, survivors are blue, and the naive dashboard figure sits
 * beside the truthful one on the same time axis.
 */
#include "util/errmsg.h"
#include "probe/probe.h"
#include "wire/latline.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <libgen.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs `gnuplot script` with its output into log; 0 when it exited 0. */
static int run_gnuplot(const char *script, const char *log, char *err,
                       size_t errlen)
{
    fflush(NULL);   /* a child must not inherit (and flush) our buffers */
    pid_t pid = fork();
    if (pid < 0) {
        mt_set_err(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        FILE *l = freopen(log, "w", stderr);
        (void)l;
        if (!freopen("/dev/null", "w", stdout))
            _exit(127);
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            mt_set_err(err, errlen, "waitpid: %s", strerror(errno));
            return -1;
        }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char line[256] = "";
        FILE *f = fopen(log, "r");
        if (f) {
            if (!fgets(line, sizeof line, f))
                line[0] = 0;
            fclose(f);
        }
        line[strcspn(line, "\n")] = 0;
        mt_set_err(err, errlen, "gnuplot %s (%s)%s%s",
                WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "not found"
                                                          : "failed",
                script, *line ? ": " : "", line);
        return -1;
    }
    return 0;
}

int mt_plot_available(char *term, size_t n)
{
    /* `set terminal pngcairo` fails in a gnuplot built without cairo. */
    const char *cands[] = {"pngcairo", "png"};
    for (int i = 0; i < 2; i++) {
        fflush(NULL);   /* a child must not inherit (and flush) our buffers */
        pid_t pid = fork();
        if (pid < 0)
            return 0;
        if (pid == 0) {
            if (!freopen("/dev/null", "w", stdout) ||
                !freopen("/dev/null", "w", stderr))
                _exit(127);
            char cmd[64];
            snprintf(cmd, sizeof cmd, "set terminal %s", cands[i]);
            execlp("gnuplot", "gnuplot", "-e", cmd, (char *)NULL);
            _exit(127);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
            if (errno != EINTR)
                return 0;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
            return 0;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            snprintf(term, n, "%s", cands[i]);
            return 1;
        }
    }
    return 0;
}

static void terminal_line(FILE *f, const char *term, int w, int h)
{
    if (!strcmp(term, "pngcairo"))
        fprintf(f, "set terminal pngcairo size %d,%d font 'Sans,11' "
                "noenhanced\n", w, h);
    else
        fprintf(f, "set terminal png size %d,%d noenhanced\n", w, h);
}

/* gnuplot strings are single-quoted: a quote in a path would end one. */
static int safe_path(const char *p, char *err, size_t errlen)
{
    if (strchr(p, '\'') || strchr(p, '\n')) {
        mt_set_err(err, errlen, "path with a quote or newline: %s", p);
        return -1;
    }
    return 0;
}

/* What every plot checks first: a gnuplot with a PNG terminal (its name
 * into term[0..n)) and a PNG path that gnuplot can quote. 0, or -1 with err. */
static int plot_start(const char *png, char *term, size_t n, char *err, size_t errlen)
{
    if (!mt_plot_available(term, n)) {
        mt_set_err(err, errlen, "gnuplot with a PNG terminal not found");
        return -1;
    }
    return safe_path(png, err, errlen);
}

int mt_out_path_check(const char *opt, const char *path, char *err, size_t errlen)
{
    char dir[4096];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", path);
    const char *d = dirname(dir);
    const char *why = stat(d, &st) != 0 ? strerror(errno)
                    : !S_ISDIR(st.st_mode) ? "not a directory"
                    : access(d, W_OK | X_OK) != 0 ? strerror(errno) : NULL;
    if (why) {
        mt_set_err(err, errlen, "%s %s: directory %s: %s", opt, path, d, why);
        return -1;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        mt_set_err(err, errlen, "%s %s: is a directory", opt, path);
        return -1;
    }
    return 0;
}

int mt_plot_check(const char *opt, const char *png, char *err, size_t errlen)
{
    char term[32];
    if (!mt_plot_available(term, sizeof term)) {
        mt_set_err(err, errlen, "%s %s: gnuplot with a PNG terminal not found "
                   "(install gnuplot, or leave out %s)", opt, png, opt);
        return -1;
    }
    if (strchr(png, '\'') || strchr(png, '\n')) {
        mt_set_err(err, errlen, "%s %s: a path with a quote or newline "
                   "(gnuplot cannot take it)", opt, png);
        return -1;
    }
    return mt_out_path_check(opt, png, err, errlen);
}

/* Creates PNG followed by suffix (its name into path[0..n)) for writing.
 * 0, or -1 with err. */
static int open_beside(const char *png, const char *suffix, char *path,
                       size_t n, FILE **f, char *err, size_t errlen)
{
    snprintf(path, n, "%s%s", png, suffix);
    *f = fopen(path, "w");
    if (!*f) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Creates the script PNG.gp (its name into gp[0..n)) and starts it: the
 * terminal at w x h and the output file. 0, or -1 with err. */
static int script_open(const char *png, const char *term, int w, int h, char *gp,
                       size_t n, FILE **f, char *err, size_t errlen)
{
    if (open_beside(png, ".gp", gp, n, f, err, errlen))
        return -1;
    terminal_line(*f, term, w, h);
    fprintf(*f, "set output '%s'\n", png);
    return 0;
}

static int script_run(FILE *f, const char *gp, char *err, size_t errlen)
{
    char log[1024];
    if (fclose(f)) {
        mt_set_err(err, errlen, "writing %s: %s", gp, strerror(errno));
        return -1;
    }
    snprintf(log, sizeof log, "%s.log", gp);
    int rc = run_gnuplot(gp, log, err, errlen);
    if (!rc)
        unlink(log);
    return rc;
}

int mt_plot_sweep(const char *png, const mt_sweep_row *rows, int n, int wall,
                  double period_ms, char *err, size_t errlen)
{
    char term[16], dat[1024], gp[1024];
    if (plot_start(png, term, sizeof term, err, errlen))
        return -1;
    FILE *d;
    if (open_beside(png, ".tsv", dat, sizeof dat, &d, err, errlen))
        return -1;
    /* Missed frames (FILL) have no latency: the truthful p99 is drawn at
     * the top of the axis when more than 1 % of frames missed. */
    double cap = period_ms * 20;
    fprintf(d, "# concurrency p50 p99 max p99_truthful fill_pct rtt_p99 "
            "accepted\n");
    for (int i = 0; i < n; i++) {
        const mt_sweep_row *r = &rows[i];
        double frames = (double)(r->real + r->fills);
        double fillpct = frames > 0 ? 100.0 * (double)r->fills / frames : 0;
        double pt = isfinite(r->p99_true_ms) ? r->p99_true_ms : cap;
        if (pt > cap)
            pt = cap;
#define NZ(x) ((x) > 0.01 ? (x) : 0.01)
        fprintf(d, "%d %.3f %.3f %.3f %.3f %.3f %.3f %d\n", r->concurrency,
                NZ(r->p50_ms), NZ(r->p99_ms), NZ(r->max_ms), NZ(pt), fillpct,
                NZ(r->rtt_p99_ms), r->accepted);
#undef NZ
    }
    if (fclose(d)) {
        mt_set_err(err, errlen, "writing %s: %s", dat, strerror(errno));
        return -1;
    }
    FILE *f;
    if (script_open(png, term, 1000, 640, gp, sizeof gp, &f, err, errlen))
        return -1;
    fprintf(f, "set title 'Frame latency vs concurrent sessions: "
            "the slope, then the wall'\n");
    fprintf(f, "set xlabel 'concurrent sessions'\n");
    fprintf(f, "set ylabel 'frame latency, ms (log scale)'\n");
    fprintf(f, "set logscale y\nset yrange [*:%g]\n", cap * 1.5);
    fprintf(f, "set y2label 'frames answered with silence (FILL), %%'\n");
    fprintf(f, "set y2range [0:100]\nset y2tics\nset ytics nomirror\n");
    fprintf(f, "set grid\nset key top left box opaque\n");
    fprintf(f, "set style fill transparent solid 0.25 noborder\n");
    fprintf(f, "set arrow from graph 0, first %g to graph 1, first %g nohead "
            "lc rgb 'black' dt 2 lw 2 front\n", period_ms, period_ms);
    fprintf(f, "set label 'latency budget %.0f ms' at graph 0.99, first %g "
            "right offset 0,0.7 front\n", period_ms, period_ms);
    if (wall > 0) {
        fprintf(f, "set arrow from first %d, graph 0 to first %d, graph 1 "
                "nohead lc rgb '#cc0000' lw 2 front\n", wall, wall);
        fprintf(f, "set label 'wall: %d session%s' at first %d, graph 0.55 "
                "left offset 0.5,0 tc rgb '#cc0000' front\n", wall,
                wall == 1 ? "" : "s", wall);
    }
    fprintf(f, "plot '%s' using 1:6 axes x1y2 with boxes lc rgb '#ff8800' "
            "title 'FILL %% (right axis)', \\\n", dat);
    fprintf(f, "  '' using 1:2 with linespoints lw 2 pt 7 lc rgb '#3366cc' "
            "title 'p50 (server)', \\\n");
    fprintf(f, "  '' using 1:3 with linespoints lw 2 pt 5 lc rgb '#009944' "
            "title 'p99 of real frames (naive)', \\\n");
    fprintf(f, "  '' using 1:5 with linespoints lw 3 pt 9 lc rgb '#cc0000' "
            "title 'p99 counting silence as missed (truthful; top = missed)', "
            "\\\n");
    fprintf(f, "  '' using 1:4 with lines dt 3 lc rgb '#555555' "
            "title 'max'\n");
    return script_run(f, gp, err, errlen);
}

int mt_plot_soak(const char *png, const mt_plot_series *s, int n,
                 const char *const *cfg_labels, int ncfg, double predicted_s,
                 double period_ms, double xmax_s, const char *title, char *err,
                 size_t errlen)
{
    char term[16], gp[1024];
    if (plot_start(png, term, sizeof term, err, errlen))
        return -1;
    for (int i = 0; i < n; i++)
        if (safe_path(s[i].path, err, errlen))
            return -1;
    FILE *f;
    int rows = ncfg > 0 ? ncfg : 1;
    if (script_open(png, term, 1400, 380 * rows + 80, gp, sizeof gp, &f, err, errlen))
        return -1;
    /* The lateness axis is shared by every row, so a flat bounded row and
     * a climbing unbounded row read against the same scale. */
    double lmax = 0;
    for (int i = 0; i < n; i++) {
        FILE *d = fopen(s[i].path, "r");
        char line[256];
        if (!d)
            continue;
        while (fgets(line, sizeof line, d)) {
            double t, late;
            if (line[0] != '#' && sscanf(line, "%lf %lf", &t, &late) == 2 &&
                late > lmax)
                lmax = late;
        }
        fclose(d);
    }
    lmax = lmax / 1000.0 * 1.1;
    if (lmax < 1)
        lmax = 1;
    fprintf(f, "set multiplot layout %d,2 title \"%s\\n(one line per run: red "
            "= the run collapsed, blue = it did not; dashed = frame period)\" "
            "font ',13'\n", rows, title ? title : "");
    if (xmax_s > 0)
        fprintf(f, "set xrange [0:%g]\n", xmax_s);
    fprintf(f, "set grid\nunset key\n");
    for (int c = 0; c < rows; c++) {
        int col, crashed = 0, total = 0;
        for (int i = 0; i < n; i++)
            if (s[i].cfg == c) {
                total++;
                crashed += s[i].collapsed;
            }
        const char *lab = c < ncfg && cfg_labels ? cfg_labels[c] : "";
        for (col = 0; col < 2; col++) {
            fprintf(f, "unset arrow\nunset label\n");
            if (col == 0) {
                fprintf(f, "set title \"TRUTH  %s: lateness of the oldest "
                        "unanswered frame (%d of %d runs collapsed, red)\"\n",
                        lab, crashed, total);
                fprintf(f, "set ylabel 'lateness, s'\nset yrange [0:%g]\n",
                        lmax);
                fprintf(f, "set arrow from graph 0, first %g to graph 1, "
                        "first %g nohead dt 2 lc rgb 'black'\n",
                        period_ms / 1000, period_ms / 1000);
            } else {
                fprintf(f, "set title \"NAIVE  %s: deadlines 'met', "
                        "silence counted as met\"\n", lab);
                fprintf(f, "set ylabel 'deadlines met, %%'\n"
                        "set yrange [0:105]\n");
            }
            fprintf(f, "set xlabel 'time since the load started, s'\n");
            if (predicted_s > 0 && strstr(lab, "full")) {
                fprintf(f, "set arrow from first %g, graph 0 to first %g, "
                        "graph 1 nohead lw 2 lc rgb '#aa00aa' front\n",
                        predicted_s, predicted_s);
                fprintf(f, "set label 'predicted overflow %.0f s' at first "
                        "%g, graph 0.9 left offset 0.5,0 tc rgb '#aa00aa' "
                        "front\n", predicted_s, predicted_s);
            }
            int first = 1;
            fprintf(f, "plot ");
            for (int i = 0; i < n; i++) {
                if (s[i].cfg != c)
                    continue;
                fprintf(f, "%s'%s' using 1:%s with lines lw 1.5 lc rgb '%s'",
                        first ? "" : ", \\\n  ", s[i].path,
                        col == 0 ? "($2/1000)" : "5",
                        s[i].collapsed ? "#dd2222" : "#2255cc");
                first = 0;
            }
            if (first)
                fprintf(f, "NaN");
            fprintf(f, "\n");
        }
    }
    fprintf(f, "unset multiplot\n");
    return script_run(f, gp, err, errlen);
}

int mt_plot_ticks(const char *png, const char *ticks_path, const char *title,
                  double period_ms, char *err, size_t errlen)
{
    char term[16], gp[1024], dat[1024];
    if (plot_start(png, term, sizeof term, err, errlen))
        return -1;
    FILE *in = fopen(ticks_path, "r");
    if (!in) {
        mt_set_err(err, errlen, "%s: %s", ticks_path, strerror(errno));
        return -1;
    }
    FILE *d;
    if (open_beside(png, ".tsv", dat, sizeof dat, &d, err, errlen)) {
        fclose(in);
        return -1;
    }
    static mt_latline ll;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0, rows = 0;
    int64_t amax = 0;
    char e[256];
    fprintf(d, "# t active p99_ms late_ms step_ms fill met naive_met kv_pct fill_pct\n");
    while ((len = getline(&line, &cap, in)) >= 0) {
        mt_tick t;
        lineno++;
        if (mt_latline_parse(line, (size_t)len, lineno, &ll, e, sizeof e) ||
            strcmp(mt_latline_kind(&ll), "tick") ||
            mt_tick_from_line(&ll, lineno, &t, e, sizeof e))
            continue;
        /* the pool in use and the share of answers that were silence:
         * the cliff, where the pool fills and FILL replaces the audio */
        double pool = (double)(t.kv_used + t.kv_free);
        double answers = (double)(t.out + t.fill);
        fprintf(d, "%.3f %lld %.3f %.3f %.3f %lld %.2f %.2f %.2f %.2f\n", t.t,
                (long long)t.active, t.p99_ms, t.late_ms, t.step_ms,
                (long long)t.fill, t.met, t.naive_met,
                pool > 0 ? 100.0 * (double)t.kv_used / pool : 0,
                answers > 0 ? 100.0 * (double)t.fill / answers : 0);
        rows++;
        if (t.active > amax)
            amax = t.active;
    }
    free(line);
    fclose(in);
    if (fclose(d)) {
        mt_set_err(err, errlen, "writing %s: %s", dat, strerror(errno));
        return -1;
    }
    if (!rows) {
        mt_set_err(err, errlen, "no tick lines in %s", ticks_path);
        return -1;
    }
    FILE *f;
    if (script_open(png, term, 1000, 900, gp, sizeof gp, &f, err, errlen))
        return -1;
    fprintf(f, "set multiplot layout 2,1\n");
    fprintf(f, "set title '%s'\n", title ? title : "mt-serve, per tick");
    fprintf(f, "set xlabel 'server time, s'\nset ylabel 'ms'\n");
    fprintf(f, "set y2label 'active sessions'\nset y2tics 1\n"
            "set y2range [0:%lld]\nset ytics nomirror\n",
            (long long)(amax < 4 ? 4 : amax + amax / 4 + 1));
    if (amax > 20)
        fprintf(f, "set y2tics autofreq\n");
    fprintf(f, "set grid\nset key top left box opaque\n");
    fprintf(f, "set arrow from graph 0, first %g to graph 1, first %g nohead "
            "dt 2 lc rgb 'black'\n", period_ms, period_ms);
    fprintf(f, "set label 'frame period' at graph 0.99, first %g right "
            "offset 0,0.6\n", period_ms);
    fprintf(f, "plot '%s' using 1:3 with lines lw 2 lc rgb '#3366cc' "
            "title 'p99 frame latency', \\\n", dat);
    fprintf(f, "  '' using 1:5 with lines lc rgb '#009944' "
            "title 'step compute', \\\n");
    fprintf(f, "  '' using 1:4 with lines lw 2 lc rgb '#cc0000' "
            "title 'lateness (oldest unanswered frame)', \\\n");
    fprintf(f, "  '' using 1:2 axes x1y2 with steps lw 2 lc rgb '#888888' "
            "title 'active sessions (right)'\n");
    /* below: the K/V pool and the answers, in % (the silent cliff) */
    fprintf(f, "unset arrow\nunset label\nunset y2tics\nunset y2label\n"
            "set title 'the K/V pool and the answers'\n"
            "set ylabel '%%'\nset yrange [0:105]\n");
    fprintf(f, "plot '%s' using 1:9 with lines lw 2 lc rgb '#aa00aa' "
            "title 'K/V pool in use', \\\n", dat);
    fprintf(f, "  '' using 1:10 with lines lw 2 lc rgb '#ff8800' "
            "title 'FILL (silence) of the answers', \\\n");
    fprintf(f, "  '' using 1:7 with lines lw 2 lc rgb '#3366cc' "
            "title 'deadlines met, truthful', \\\n");
    fprintf(f, "  '' using 1:8 with lines dt 2 lc rgb '#3366cc' "
            "title 'deadlines met, naive (silence counted)'\n");
    fprintf(f, "unset multiplot\n");
    return script_run(f, gp, err, errlen);
}
