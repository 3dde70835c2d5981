/* audio.h: audio files and devices for mt-replay.
 *
 * Files: anything libsndfile reads (WAV, FLAC, Ogg/Vorbis, AIFF, ...) is
 * read whole into memory as mono float (channels averaged), converted to
 * another rate with libsamplerate at a chosen quality, and turned into
 * s16 frames. Output files are written with libsndfile, the format taken
 * from the file name's extension, under a temporary name that is renamed
 * into place only on success, so a failed run leaves no partial file.
 *
 * Devices: PortAudio device listing, and a full-duplex stream whose
 * callback only moves samples through lock-free rings; the caller's
 * thread reads microphone frames and queues speaker frames (a small jitter
 * buffer) at the server's rate, resampled from the device rate if needed.
 *
 * Library code: nothing printed, no exit(); errors come back as messages.
 */
#ifndef MT_AUDIO_H
#define MT_AUDIO_H

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

/* libsamplerate converters by name: "best", "medium", "fastest", "zoh",
 * "linear". Returns the SRC_* constant or -1. */
int         mt_audio_quality_parse(const char *name);
const char *mt_audio_quality_name(int quality);

/* out = in converted to rate (a copy when the rates are equal). */
int  mt_audio_resample(const mt_audio *in, int rate, int quality,
                       mt_audio *out, char *err, size_t errlen);

/* float [-1,1] -> s16 with rounding; values beyond full scale (however
 * large, or infinite) clip, NaN becomes 0. */
void mt_audio_to_s16(const float *in, int16_t *out, size_t n);

/* The libsndfile format for a file name's extension (.wav .flac .ogg
 * .oga .aif .aiff .au .caf .w64 .raw): 0, or -1 with a message. */
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
/* Writes to an open descriptor (standard output) in place, named name in
 * messages; refuses a terminal, and a pipe for a format that cannot
 * stream (mt_audio_type_streams). Commit and abort close the stream; the
 * descriptor stays open. */
int  mt_audio_writer_open_fd(int fd, const char *name, int sf_format, int rate,
                             mt_audio_writer **w, char *err, size_t errlen);
int  mt_audio_writer_write(mt_audio_writer *w, const int16_t *pcm, size_t n,
                           char *err, size_t errlen);
uint64_t mt_audio_writer_frames(const mt_audio_writer *w);
const char *mt_audio_writer_path(const mt_audio_writer *w);
/* Closes and renames into place; frees w in every case. 0 or -1. */
int  mt_audio_writer_commit(mt_audio_writer *w, char *err, size_t errlen);
/* Closes and removes the temporary file; frees w. NULL is fine. */
void mt_audio_writer_abort(mt_audio_writer *w);

/* ---- PortAudio ---------------------------------------------------------- */
typedef struct mt_pa_device {
    int    index;
    char   name[128];
    char   host_api[32];
    int    max_in, max_out;
    double default_rate;
    int    is_default_in, is_default_out;
} mt_pa_device;

/* Initializes PortAudio (its ALSA/JACK probing chatter on stderr is
 * silenced unless MT_PA_VERBOSE is set) and lists the devices. *list is
 * malloc'ed (free() it); *n may be 0. Returns 0 or -1. */
int  mt_pa_list(mt_pa_device **list, int *n, char *err, size_t errlen);
/* One line per device into buf, for messages: "0 name (ALSA, in 2, out 2,
 * 44100 Hz)". Returns buf. */
char *mt_pa_describe(const mt_pa_device *list, int n, char *buf, size_t cap);

typedef struct mt_duplex mt_duplex;

typedef struct mt_duplex_status {
    float    level;        /* peak of the last mic frame, 0..1 */
    uint64_t mic_frames;   /* frames handed to the caller */
    uint64_t mic_short;    /* frames padded with silence (mic underrun) */
    uint64_t mic_dropped;  /* device samples dropped (ring full) */
    uint64_t spk_under;    /* speaker callbacks that found no audio */
    uint64_t spk_dropped;  /* frames dropped (jitter buffer full) */
    int      device_rate;
    int      buffered_frames; /* in the jitter buffer now */
} mt_duplex_status;

/* Opens a full-duplex stream on device (NULL: the default input and output;
 * else an index, an exact name, or a case-insensitive substring). rate and
 * frame_samples are the server's; the device runs at rate when it can,
 * else at its default rate with libsamplerate in between. jitter_frames:
 * frames buffered before the speaker starts. */
int  mt_duplex_open(const char *device, int rate, int frame_samples,
                    int jitter_frames, mt_duplex **d, char *err, size_t errlen);
/* One mic frame at the server rate, never blocking: 1 if the microphone
 * had a whole frame, 0 if it was padded with silence. */
int  mt_duplex_read(mt_duplex *d, int16_t *pcm, size_t n);
/* Queues one speaker frame; drops the oldest when the buffer is full. */
void mt_duplex_write(mt_duplex *d, const int16_t *pcm, size_t n);
void mt_duplex_get_status(mt_duplex *d, mt_duplex_status *st);
const char *mt_duplex_device_name(const mt_duplex *d);
void mt_duplex_close(mt_duplex *d);   /* stops, closes, terminates PA */

/* Output-only playback on the default device, blocking writes (--play). */
typedef struct mt_player mt_player;
int  mt_player_open(int rate, int frame_samples, mt_player **p,
                    char *err, size_t errlen);
int  mt_player_write(mt_player *p, const int16_t *pcm, size_t n,
                     char *err, size_t errlen);
void mt_player_close(mt_player *p);

#endif
