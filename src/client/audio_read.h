/* audio_read.h: audio files read whole into memory, for mt-replay.
 *
 * Anything libsndfile reads (WAV, FLAC, Ogg/Vorbis, AIFF, ...) is read as
 * mono float (channels averaged). Library code: nothing printed, no
 * exit(); errors come back as one message naming the file.
 */
#ifndef MT_AUDIO_READ_H
#define MT_AUDIO_READ_H

#include <stddef.h>
#include <stdint.h>

typedef struct mt_audio {
    float  *samples;      /* mono, [-1, 1] */
    size_t  frames;
    int     rate;
    int     channels_in;  /* channels in the file before the down-mix */
    char    format[96];   /* libsndfile's description of the file */
} mt_audio;

/* Reads a whole file, to its end: the frame count a header states is not
 * trusted (libsndfile's count for MP3 is an estimate). Samples are clamped
 * to [-1, 1], NaN read as 0. Errors (missing file, a directory or other
 * non-regular file, unsupported or corrupt data, an empty file, a
 * truncated file: a WAV/AIFF/AU data size or a FLAC sample count that the
 * data does not reach; a size of 2 GiB or more is a streaming writer's
 * "unknown" and is read to the end) come back as one message naming the
 * file. Returns 0 or -1. */
int  mt_audio_read(const char *path, mt_audio *a, char *err, size_t errlen);
/* The same from a whole file in memory (libsndfile virtual I/O); name is
 * what messages call it. For the fuzz harness and for data that never was
 * a file. Returns 0 or -1. */
int  mt_audio_read_mem(const void *buf, size_t len, const char *name,
                       mt_audio *a, char *err, size_t errlen);
/* The same from a descriptor read to its end (standard input, a pipe):
 * any format libsndfile reads from a file. raw_rate > 0: the data is
 * headerless 16-bit little-endian mono at that rate. Returns 0 or -1. */
int  mt_audio_read_fd(int fd, const char *name, int raw_rate, mt_audio *a,
                      char *err, size_t errlen);
void mt_audio_free(mt_audio *a);

/* ---- a file read a block at a time (inputs too long to hold) ------------
 * The same checks as mt_audio_read that a header allows (missing, not a
 * regular file, empty, unsupported, implausible, a WAV/AIFF/AU data size
 * the file does not reach); a FLAC whose data ends early simply ends. */
typedef struct mt_audio_stream mt_audio_stream;
int    mt_audio_stream_open(const char *path, mt_audio_stream **s, char *err,
                            size_t errlen);
int    mt_audio_stream_rate(const mt_audio_stream *s);
/* The length the header states (an estimate for MP3), or 0 if unknown. */
double mt_audio_stream_seconds(const mt_audio_stream *s);
/* Up to n mono samples (channels averaged, clamped as mt_audio_read does)
 * at the file's rate: the count, less than n only at the end (0 there), or
 * -1 with err (corrupt data). */
long   mt_audio_stream_read(mt_audio_stream *s, float *mono, size_t n,
                            char *err, size_t errlen);
int    mt_audio_stream_rewind(mt_audio_stream *s, char *err, size_t errlen);
void   mt_audio_stream_close(mt_audio_stream *s);

#endif
