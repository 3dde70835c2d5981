/* replay_input.h: mt-replay's inputs, at the session's rate, as s16 frames.
 *
 * An mt_input is one input named on the command line, checked when it is
 * opened (exists, is audio, is not truncated where that can be told), so
 * that a bad file fails before any connection. An mt_source is one
 * session's read position in it; sessions of one input each have their
 * own. Library code: nothing printed, no exit().
 */
#ifndef MT_INPUT_H
#define MT_INPUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct mt_input mt_input;
typedef struct mt_source mt_source;

/* path "-" is standard input (read whole: a pipe can be read once);
 * raw_rate > 0 means it is headerless s16le mono at that rate. quality is
 * a libsamplerate converter (resample.h). 0, or -1 with err naming path. */
int  mt_input_open(const char *path, int rate, int quality, int raw_rate,
                   mt_input **in, char *err, size_t errlen);
const char *mt_input_path(const mt_input *in);
void mt_input_close(mt_input *in);

/* A read position at the input's start. 0, or -1 with err. */
int  mt_source_open(mt_input *in, mt_source **s, char *err, size_t errlen);
/* Up to n samples into pcm: the count (less than n only at the end, 0
 * there), or -1 with err. */
long mt_source_read(mt_source *s, int16_t *pcm, size_t n, char *err,
                    size_t errlen);
/* One frame of n samples: the input in order, the last frame padded with
 * silence; with loop, the input again from its start (an empty input
 * does not loop). 1 = a frame, 0 = the end, -1 with err. */
int  mt_source_frame(mt_source *s, int16_t *pcm, size_t n, int loop,
                     char *err, size_t errlen);
/* Back to the start (--loop). 0, or -1 with err. */
int  mt_source_rewind(mt_source *s, char *err, size_t errlen);
void mt_source_close(mt_source *s);

#endif
