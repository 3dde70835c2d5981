/* audio_dev.h: sound devices through PortAudio, for mt-replay.
 *
 * Device listing, and a full-duplex stream whose callback only moves
 * samples through lock-free rings; the caller's thread reads microphone
 * frames and queues speaker frames (a small jitter buffer) at the server's
 * rate, resampled from the device rate if needed. And output-only playback
 * (--play). Library code: nothing printed, no exit().
 */
#ifndef MT_AUDIO_DEV_H
#define MT_AUDIO_DEV_H

#include <stddef.h>
#include <stdint.h>

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
