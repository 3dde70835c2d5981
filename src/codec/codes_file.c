/* codes_file.c: the text file of Mimi codes (codes_file.h): a header
 * comment, then one line per 80 ms frame with one integer per codebook:
 *     # mimi codes codebooks=8 frames=N samples=M sample_rate=24000
 *     1213 77 1904 ...
 * Every byte read is checked: a bad line ends the read with its number
 * and what is wrong; the file's size is bounded (MT_CODES_MAX_FRAMES). */
#define _GNU_SOURCE
#include "codec/codes_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* Reads codebooks= and samples= from a '#' line into c. 0, or -1. */
static int read_header(const char *line, const char *name, long lineno, mt_codes *c,
                       char *err, size_t errlen)
{
    const char *p = strstr(line, "codebooks=");
    if (p) {
        int n = atoi(p + 10);
        if (n < 1 || n > MT_CODES_MAX_BOOKS) {
            snprintf(err, errlen, "%s:%ld: codebooks= out of range", name, lineno);
            return -1;
        }
        /* the rows read so far were stored n codes a frame: a header that
         * changes n after them would have the next rows overrun them */
        if (c->frames > 0 && n != c->n) {
            snprintf(err, errlen, "%s:%ld: codebooks=%d after frames of %d codes", name,
                     lineno, n, c->n);
            return -1;
        }
        c->n = n;
    }
    p = strstr(line, "samples=");
    if (p) {
        char *end;
        errno = 0;
        long s = strtol(p + 8, &end, 10);
        if (errno || s < 0 || end == p + 8) {
            snprintf(err, errlen, "%s:%ld: samples= is not a count", name, lineno);
            return -1;
        }
        c->samples = s;
    }
    return 0;
}

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/* Reads one line's codes into row [MT_CODES_MAX_BOOKS], each in
 * 0..bins-1. Returns how many (0: a blank line), or -1. */
static int read_row(const char *line, const char *name, long lineno, int bins,
                    int32_t *row, char *err, size_t errlen)
{
    int k = 0;
    const char *p = line;
    char *end;
    for (;;) {
        while (is_space(*p))
            p++;
        if (!*p)
            return k;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && !is_space(*end))) {
            snprintf(err, errlen, "%s:%ld: not an integer code", name, lineno);
            return -1;
        }
        if (v < 0 || v >= bins) {
            snprintf(err, errlen, "%s:%ld: code %ld outside 0..%d", name, lineno, v, bins - 1);
            return -1;
        }
        if (k == MT_CODES_MAX_BOOKS) {
            snprintf(err, errlen, "%s:%ld: more than 64 codes", name, lineno);
            return -1;
        }
        row[k++] = (int32_t)v;
        p = end;
    }
}

/* Appends row [c->n] to c->codes, doubling its room (*room frames). */
static int append_row(mt_codes *c, long *room, const int32_t *row, const char *name,
                      char *err, size_t errlen)
{
    if (c->frames == *room) {
        long nr = *room ? 2 * *room : 256;
        if (nr > MT_CODES_MAX_FRAMES) {
            snprintf(err, errlen, "%s: too many frames", name);
            return -1;
        }
        int32_t *nc = realloc(c->codes, (size_t)nr * (size_t)c->n * sizeof *nc);
        if (!nc) {
            snprintf(err, errlen, "%s: out of memory", name);
            return -1;
        }
        c->codes = nc;
        *room = nr;
    }
    memcpy(c->codes + (size_t)c->frames * c->n, row, (size_t)c->n * sizeof *row);
    c->frames++;
    return 0;
}

int mt_codes_read(FILE *f, const char *name, int bins, mt_codes *c, char *err,
                  size_t errlen)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0, room = 0;
    int rc = -1;
    memset(c, 0, sizeof *c);
    c->samples = -1;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if ((size_t)len != strlen(line)) {
            snprintf(err, errlen, "%s:%ld: a NUL byte", name, lineno);
            goto done;
        }
        if (line[0] == '#') {
            if (read_header(line, name, lineno, c, err, errlen) != 0)
                goto done;
            continue;
        }
        int32_t row[MT_CODES_MAX_BOOKS + 1];
        int k = read_row(line, name, lineno, bins, row, err, errlen);
        if (k < 0)
            goto done;
        if (k == 0)
            continue;
        if (c->n == 0)
            c->n = k;
        if (k != c->n) {
            snprintf(err, errlen, "%s:%ld: %d codes, expected %d", name, lineno, k, c->n);
            goto done;
        }
        if (append_row(c, &room, row, name, err, errlen) != 0)
            goto done;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: read error", name);
        goto done;
    }
    if (c->frames == 0) {
        snprintf(err, errlen, "%s: no frames of codes", name);
        goto done;
    }
    rc = 0;
done:
    free(line);
    if (rc != 0) {
        free(c->codes);
        memset(c, 0, sizeof *c);
    }
    return rc;
}

int mt_codes_read_path(const char *path, int bins, mt_codes *c, char *err,
                       size_t errlen)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        memset(c, 0, sizeof *c);
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    int rc = mt_codes_read(f, path, bins, c, err, errlen);
    if (f != stdin)
        fclose(f);
    return rc;
}

int mt_codes_write_path(const char *path, const int32_t *codes, int n, long frames,
                        long samples, int sample_rate, char *err, size_t errlen)
{
    FILE *cf = strcmp(path, "-") ? fopen(path, "w") : stdout;
    if (!cf) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(cf, "# mimi codes codebooks=%d frames=%ld samples=%ld sample_rate=%d\n", n, frames,
            samples, sample_rate);
    for (long f = 0; f < frames; f++)
        for (int i = 0; i < n; i++)
            fprintf(cf, "%d%c", codes[(size_t)f * n + i], i + 1 < n ? ' ' : '\n');
    int bad = ferror(cf);
    if (cf != stdout)
        bad |= fclose(cf) != 0;
    else
        bad |= fflush(cf) != 0;
    if (bad) {
        snprintf(err, errlen, "%s: write error", path);
        return -1;
    }
    return 0;
}
