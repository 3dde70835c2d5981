/* replay_transcript.c: mt-replay's transcript file (replay_transcript.h). */
#include "client/replay_transcript.h"
#include "util/errmsg.h"
#include "util/grow.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One session's text for the text view: the pieces as joined so far. */
typedef struct {
    char  *buf;                 /* [len] UTF-8, not terminated */
    size_t len, cap;
} sess_text;

struct mt_transcript {
    FILE *f;                    /* the line file, NULL without one */
    char *path;                 /* its path, or the text view's */
    const mt_tokenizer *tok;    /* NULL: ids */
    long  lines;
    int   failed;
    FILE *text_f;               /* the text view (--text), NULL without */
    char *text_path;
    sess_text *st;              /* [nst] by session index */
    size_t nst, st_cap;
};

int mt_transcript_open(const char *path, const mt_tokenizer *tok, mt_transcript **out,
                       char *err, size_t errlen)
{
    *out = NULL;
    mt_transcript *t = mt_calloc_or_err(1, sizeof *t, err, errlen, "transcript");
    if (!t)
        return -1;
    t->path = strdup(path ? path : "-t");
    t->f = path ? fopen(path, "w") : NULL;
    if (!t->path || (path && !t->f)) {
        mt_set_err(err, errlen, "%s: %s", path ? path : "-t", strerror(errno));
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

int mt_transcript_text(mt_transcript *t, const char *text_path, char *err, size_t errlen)
{
    t->text_path = strdup(text_path);
    t->text_f = t->text_path ? fopen(text_path, "w") : NULL;
    if (!t->text_f) {
        mt_set_err(err, errlen, "%s: %s", text_path, strerror(errno));
        return -1;
    }
    return 0;
}

/* n bytes more of session's text for the text view: 0, or -1 (memory). */
static int view_add(mt_transcript *t, int session, const char *p, size_t n)
{
    if (!t->text_f || n == 0 || session < 0)
        return 0;
    size_t need = (size_t)session + 1;
    if (need > t->nst) {
        if (mt_grow(&t->st, &t->st_cap, need, sizeof *t->st, 16) != 0)
            return -1;
        memset(t->st + t->nst, 0, (need - t->nst) * sizeof *t->st);
        t->nst = need;
    }
    sess_text *s = &t->st[session];
    if (mt_grow(&s->buf, &s->cap, s->len + n, 1, 256) != 0)
        return -1;
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    return 0;
}

/* The frame's text (as put_text joins it) for the text view. */
static int view_add_ids(mt_transcript *t, int session, const int32_t *ids, int n)
{
    for (int i = 0; i < n && t->tok; i++) {
        const char *p = mt_tokenizer_kyutai_silent(ids[i]) ? NULL
                        : mt_tokenizer_piece(t->tok, (int)ids[i]);
        if (p && view_add(t, session, p, strlen(p)) != 0)
            return -1;
    }
    return 0;
}

/* Writes the text view (transcript.h): 0, or -1 with errno set. */
static int view_write(mt_transcript *t)
{
    int bad = 0;
    for (size_t i = 0; i < t->nst && !bad; i++) {
        const char *p = t->st[i].buf;
        size_t n = t->st[i].len;
        if (n > 0 && p[0] == ' ') {   /* the first word's mark */
            p++;
            n--;
        }
        if (n == 0)
            continue;
        bad = fprintf(t->text_f, "%zu ", i) < 0 || put_escaped(t->text_f, p, n) != 0 ||
              fputc('\n', t->text_f) == EOF;
    }
    return bad ? -1 : 0;
}

int mt_transcript_add(mt_transcript *t, int session, uint32_t seq, const int32_t *tok,
                      int n, char *err, size_t errlen)
{
    if (t->failed) {
        mt_set_err(err, errlen, "%s: an earlier write failed", t->path);
        return -1;
    }
    if (view_add_ids(t, session, tok, n) != 0) {
        t->failed = 1;
        mt_set_err(err, errlen, "%s: out of memory", t->text_path);
        return -1;
    }
    if (!t->f)
        return 0;
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
    if (view_add(t, session, utf8, n) != 0) {
        t->failed = 1;
        mt_set_err(err, errlen, "%s: out of memory", t->text_path);
        return -1;
    }
    if (!t->f)
        return 0;
    int bad = fprintf(t->f, "%d %u ", session, seq) < 0 || put_escaped(t->f, utf8, n) != 0;
    bad = bad || fputc('\n', t->f) == EOF || fflush(t->f) != 0;
    return line_done(t, bad, err, errlen);
}

int mt_transcript_close(mt_transcript *t, char *err, size_t errlen)
{
    if (!t)
        return 0;
    int rc = t->failed ? -1 : 0;
    if (t->f && fclose(t->f) != 0 && rc == 0) {
        mt_set_err(err, errlen, "%s: %s", t->path, strerror(errno));
        rc = -1;
    } else if (rc)
        mt_set_err(err, errlen, "%s: a write failed", t->path);
    if (t->text_f) {
        int bad = view_write(t) != 0;
        bad = fclose(t->text_f) != 0 || bad;
        if (bad && rc == 0) {
            mt_set_err(err, errlen, "%s: %s", t->text_path, strerror(errno));
            rc = -1;
        }
    }
    for (size_t i = 0; i < t->nst; i++)
        free(t->st[i].buf);
    free(t->st);
    free(t->text_path);
    free(t->path);
    free(t);
    return rc;
}

long mt_transcript_lines(const mt_transcript *t)
{
    return t->lines;
}
