/* replay_transcript.c: mt-replay's transcript file (replay_transcript.h). */
#include "client/replay_transcript.h"
#include "util/errmsg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mt_transcript {
    FILE *f;
    char *path;
    const mt_tokenizer *tok;    /* NULL: ids */
    long  lines;
    int   failed;
};

int mt_transcript_open(const char *path, const mt_tokenizer *tok, mt_transcript **out,
                       char *err, size_t errlen)
{
    *out = NULL;
    mt_transcript *t = mt_calloc_or_err(1, sizeof *t, err, errlen, "transcript");
    if (!t)
        return -1;
    t->path = strdup(path);
    t->f = fopen(path, "w");
    if (!t->path || !t->f) {
        mt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        if (t->f)
            fclose(t->f);
        free(t->path);
        free(t);
        return -1;
    }
    t->tok = tok;
    *out = t;
    return 0;
}

/* n bytes of text to f, escaped (transcript.h). 0, or -1. */
static int put_escaped(FILE *f, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        int r = c == '\\' ? fputs("\\\\", f)
                : c < 0x20 || c == 0x7f ? fprintf(f, "\\x%02x", c)
                : fputc(c, f);
        if (r < 0)
            return -1;
    }
    return 0;
}

/* The frame's text (transcript.h) to f; the bytes of text written. */
static int put_text(FILE *f, const mt_tokenizer *tok, const int32_t *ids, int n,
                    size_t *wrote)
{
    *wrote = 0;
    for (int i = 0; i < n; i++) {
        const char *p = mt_tokenizer_kyutai_silent(ids[i]) ? NULL
                        : mt_tokenizer_piece(tok, (int)ids[i]);
        size_t len = p ? strlen(p) : 0;
        if (put_escaped(f, p, len) != 0)
            return -1;
        *wrote += len;
    }
    return 0;
}

/* The end of one line: counted, or the transcript marked failed (a later
 * line is refused rather than written after a gap). */
static int line_done(mt_transcript *t, int bad, char *err, size_t errlen)
{
    if (bad) {
        t->failed = 1;
        mt_set_err(err, errlen, "%s: %s", t->path, strerror(errno));
        return -1;
    }
    t->lines++;
    return 0;
}

int mt_transcript_add(mt_transcript *t, int session, uint32_t seq, const int32_t *tok,
                      int n, char *err, size_t errlen)
{
    if (t->failed) {
        mt_set_err(err, errlen, "%s: an earlier write failed", t->path);
        return -1;
    }
    int bad;
    if (t->tok) {
        /* no line for a frame without text: its text goes to memory first */
        char *buf = NULL;
        size_t len = 0, wrote = 0;
        FILE *m = open_memstream(&buf, &len);
        bad = !m || put_text(m, t->tok, tok, n, &wrote) != 0;
        bad = (m && fclose(m) != 0) || bad;
        if (!bad && wrote > 0)
            bad = fprintf(t->f, "%d %u ", session, seq) < 0 || fwrite(buf, 1, len, t->f) != len ||
                  fputc('\n', t->f) == EOF || fflush(t->f) != 0;
        free(buf);
        if (!bad && wrote == 0)
            return 0;
    } else {
        bad = fprintf(t->f, "%d %u", session, seq) < 0;
        for (int i = 0; i < n && !bad; i++)
            bad = fprintf(t->f, " %d", (int)tok[i]) < 0;
        bad = bad || fputc('\n', t->f) == EOF || fflush(t->f) != 0;
    }
    return line_done(t, bad, err, errlen);
}

int mt_transcript_add_words(mt_transcript *t, int session, uint32_t seq, const char *utf8,
                            size_t n, char *err, size_t errlen)
{
    if (t->failed) {
        mt_set_err(err, errlen, "%s: an earlier write failed", t->path);
        return -1;
    }
    if (n == 0)
        return 0;   /* as a frame without text: no line */
    int bad = fprintf(t->f, "%d %u ", session, seq) < 0 || put_escaped(t->f, utf8, n) != 0;
    bad = bad || fputc('\n', t->f) == EOF || fflush(t->f) != 0;
    return line_done(t, bad, err, errlen);
}

int mt_transcript_close(mt_transcript *t, char *err, size_t errlen)
{
    if (!t)
        return 0;
    int rc = t->failed ? -1 : 0;
    if (fclose(t->f) != 0 && rc == 0) {
        mt_set_err(err, errlen, "%s: %s", t->path, strerror(errno));
        rc = -1;
    } else if (rc)
        mt_set_err(err, errlen, "%s: a write failed", t->path);
    free(t->path);
    free(t);
    return rc;
}

long mt_transcript_lines(const mt_transcript *t)
{
    return t->lines;
}
