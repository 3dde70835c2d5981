/* audio_write.h: audio output files and streams, for mt-replay.
 *
 * Output files are written with libsndfile, the format taken from the file
 * name's extension, under a temporary name that is renamed into place only
 * on success, so a failed run leaves no partial file. Library code:
 * nothing printed, no exit(); errors come back as messages.
 */
#ifndef MT_AUDIO_WRITE_H
#define MT_AUDIO_WRITE_H

#include <stddef.h>
#include <stdint.h>

/* The libsndfile format for a file name's extension (.wav .flac .ogg
 * .oga .aif .aiff .au .caf .w64 .raw, and sox's raw float .f32 .f64): 0,
 * or -1 with a message. */
int  mt_audio_format_for_path(const char *path, int *sf_format,
                              char *err, size_t errlen);

/* A type name (the extensions above, without the dot) to its libsndfile
 * format: 0, or -1 when unknown. */
int  mt_audio_type_parse(const char *name, int *sf_format);
/* 1 when libsndfile writes the format to a pipe as a complete stream
 * (AU, Ogg Vorbis, raw), 0 when its header needs a seek back. */
int  mt_audio_type_streams(int sf_format);

/* ---- output files ------------------------------------------------------- */
typedef struct mt_audio_writer mt_audio_writer;

/* Opens "DIR/.NAME.tmp-PID-N" for writing mono s16 audio at rate. */
int  mt_audio_writer_open(const char *path, int rate, mt_audio_writer **w,
                          char *err, size_t errlen);
/* The same with the samples' encoding (a libsndfile subformat:
 * SF_FORMAT_PCM_16, _PCM_24, _PCM_32, _FLOAT, _DOUBLE) in place of the
 * extension's (0: the extension's); refused where the file type cannot
 * hold it (FLAC and Ogg floating point). */
int  mt_audio_writer_open_sub(const char *path, int rate, int subformat,
                              mt_audio_writer **w, char *err, size_t errlen);
/* Writes to an open descriptor (standard output) in place, named name in
 * messages; refuses a terminal, and a pipe for a format that cannot
 * stream (mt_audio_type_streams). Commit and abort close the stream; the
 * descriptor stays open. */
int  mt_audio_writer_open_fd(int fd, const char *name, int sf_format, int rate,
                             mt_audio_writer **w, char *err, size_t errlen);
int  mt_audio_writer_write(mt_audio_writer *w, const int16_t *pcm, size_t n,
                           char *err, size_t errlen);
/* Float samples in -1..1 (files only): written as they are in a
 * floating-point file, scaled to full range in an integer one. */
int  mt_audio_writer_write_float(mt_audio_writer *w, const float *pcm, size_t n,
                                 char *err, size_t errlen);
uint64_t mt_audio_writer_frames(const mt_audio_writer *w);
const char *mt_audio_writer_path(const mt_audio_writer *w);
/* Closes and renames into place; frees w in every case. 0 or -1. */
int  mt_audio_writer_commit(mt_audio_writer *w, char *err, size_t errlen);
/* Closes and removes the temporary file; frees w. NULL is fine. */
void mt_audio_writer_abort(mt_audio_writer *w);

#endif
