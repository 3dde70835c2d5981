/* replay_transcript.h: mt-replay's -t FILE: the text tokens a Kyutai model sent
 * (TEXT frames, mt-frame(5)), one line per frame as it arrives:
 *     SESSION SEQ ID[ ID...]
 * (SESSION: the replay's session index; SEQ: the input frame the text goes
 * with), flushed at every line so a live run can be followed with tail -f.
 * With a tokenizer (--tokenizer) the line holds the text instead:
 *     SESSION SEQ TEXT
 * TEXT the frame's pieces joined (mt_tokenizer_piece: the word mark a
 * space), the ids Kyutai shows no text for skipped (its padding ids, see
 * mt_tokenizer_kyutai_silent; control and unknown-to-the-table ids too);
 * a frame left with no text gets no line. A backslash and the bytes below
 * 0x20 and 0x7f are written \\ and \xHH, so each frame stays one line.
 *
 * Beside it, the text view (--text FILE, mt_transcript_text): the same
 * text for people, one line a session, written when the run ends:
 *     SESSION TEXT
 * TEXT all of the session's pieces (or words) joined as SentencePiece
 * joins them (the word mark a space, the first one dropped), escaped as
 * above; a session without text gets no line. */
#ifndef MT_TRANSCRIPT_H
#define MT_TRANSCRIPT_H

#include <stddef.h>
#include <stdint.h>
#include "model/tokenizer.h"

typedef struct mt_transcript mt_transcript;

/* tok: the pieces (borrowed, outliving the transcript), or NULL for ids.
 * path NULL: no line file (a text view alone, see mt_transcript_text). */
int  mt_transcript_open(const char *path, const mt_tokenizer *tok, mt_transcript **out,
                        char *err, size_t errlen);
/* 0, or -1 with a message (a write error; later calls fail too). */
int  mt_transcript_add(mt_transcript *t, int session, uint32_t seq, const int32_t *tok,
                       int n, char *err, size_t errlen);
/* A WORDS frame's n bytes of UTF-8: 0, or -1 as mt_transcript_add. */
int  mt_transcript_add_words(mt_transcript *t, int session, uint32_t seq,
                             const char *utf8, size_t n, char *err, size_t errlen);
/* Also keep the text view and write it to text_path at close: 0, or -1
 * (the file cannot be created; it is created now so that a bad path is
 * said before the run). */
int  mt_transcript_text(mt_transcript *t, const char *text_path, char *err, size_t errlen);
/* Closes it (writing the text view): 0, or -1 when a write or the close failed. */
int  mt_transcript_close(mt_transcript *t, char *err, size_t errlen);
/* The lines written. */
long mt_transcript_lines(const mt_transcript *t);

#endif
