/* transcript.h: mt-replay's -t FILE: the text tokens a Kyutai model sent
 * (TEXT frames, mt-frame(5)), one line per frame as it arrives:
 *     SESSION SEQ ID[ ID...]
 * (SESSION: the replay's session index; SEQ: the input frame the text goes
 * with), flushed at every line so a live run can be followed with tail -f.
 * Text that came as words (WORDS frames: a ws:// server) is a line
 *     SESSION SEQ =WORDS
 * with the words exactly as sent after the '=' (a word's leading space
 * kept; control bytes as '?'). */
#ifndef MT_TRANSCRIPT_H
#define MT_TRANSCRIPT_H

#include <stddef.h>
#include <stdint.h>

typedef struct mt_transcript mt_transcript;

int  mt_transcript_open(const char *path, mt_transcript **out, char *err, size_t errlen);
/* 0, or -1 with a message (a write error; later calls fail too). */
int  mt_transcript_add(mt_transcript *t, int session, uint32_t seq, const int32_t *tok,
                       int n, char *err, size_t errlen);
/* A WORDS frame's n bytes of UTF-8: 0, or -1 as mt_transcript_add. */
int  mt_transcript_add_words(mt_transcript *t, int session, uint32_t seq,
                             const char *utf8, size_t n, char *err, size_t errlen);
/* Closes it: 0, or -1 when a write or the close failed. */
int  mt_transcript_close(mt_transcript *t, char *err, size_t errlen);
/* The lines written. */
long mt_transcript_lines(const mt_transcript *t);

#endif
