/* transcript.c: mt-replay's transcript file (transcript.h). */
#include "client/transcript.h"
#include "util/errmsg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mt_transcript {
    FILE *f;
    char *path;
    long  lines;
    int   failed;
};

int mt_transcript_open(const char *path, mt_transcript **out, char *err, size_t errlen)
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
    *out = t;
    return 0;
}

int mt_transcript_add(mt_transcript *t, int session, uint32_t seq, const int32_t *tok,
                      int n, char *err, size_t errlen)
{
    if (t->failed) {
        mt_set_err(err, errlen, "%s: an earlier write failed", t->path);
        return -1;
    }
    int bad = fprintf(t->f, "%d %u", session, seq) < 0;
    for (int i = 0; i < n && !bad; i++)
        bad = fprintf(t->f, " %d", (int)tok[i]) < 0;
    bad = bad || fputc('\n', t->f) == EOF || fflush(t->f) != 0;
    if (bad) {
        t->failed = 1;
        mt_set_err(err, errlen, "%s: %s", t->path, strerror(errno));
        return -1;
    }
    t->lines++;
    return 0;
}

int mt_transcript_add_words(mt_transcript *t, int session, uint32_t seq, const char *utf8,
                            size_t n, char *err, size_t errlen)
{
    if (t->failed) {
        mt_set_err(err, errlen, "%s: an earlier write failed", t->path);
        return -1;
    }
    int bad = fprintf(t->f, "%d %u =", session, seq) < 0;
    for (size_t i = 0; i < n && !bad; i++) {   /* one line each: controls as '?' */
        unsigned char ch = (unsigned char)utf8[i];
        bad = fputc(ch < 0x20 || ch == 0x7f ? '?' : ch, t->f) == EOF;
    }
    bad = bad || fputc('\n', t->f) == EOF || fflush(t->f) != 0;
    if (bad) {
        t->failed = 1;
        mt_set_err(err, errlen, "%s: %s", t->path, strerror(errno));
        return -1;
    }
    t->lines++;
    return 0;
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
