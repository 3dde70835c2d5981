/* stt_config.h: the speech-to-text settings of a Kyutai model directory's
 * config.json (their delayed-streams models: "stt_config"), read for
 * mt-serve's /api/asr-streaming.
 *
 *   stt_config.audio_delay_seconds          how far the text lags the audio
 *                                           (0.5 for stt-1b-en_fr, 2.5 for
 *                                           stt-2.6b-en): Kyutai's server
 *                                           steps asr_delay_in_tokens =
 *                                           seconds x 12.5, truncated
 *   stt_config.audio_silence_prefix_seconds silence their offline scripts
 *                                           put before the audio; their
 *                                           streaming server does not, nor
 *                                           does this one (read, reported)
 *
 *   extra_heads_num_heads, extra_heads_dim  (top level, LMModel's) the
 *                                           extra heads whose softmax is
 *                                           their Step message's prs (voice
 *                                           activity; stt-1b-en_fr: 4 of 6):
 *                                           read for mt-serve's start line
 *                                           (the LM's loader, kyutai_lm.h,
 *                                           reads them for the weights)
 *
 * Other keys of the file are the LM's (model/kyutai_lm.h) and ignored
 * here. A config without stt_config is not a speech-to-text one.
 */
#ifndef MT_STT_CONFIG_H
#define MT_STT_CONFIG_H

#include <stddef.h>

typedef struct mt_stt_config {
    int    present;            /* the file has stt_config */
    double audio_delay_s;      /* 0 when absent */
    double silence_prefix_s;   /* 0 when absent */
    int    extra_heads;        /* extra_heads_num_heads, 0 when absent */
    int    extra_heads_dim;    /* extra_heads_dim (LMModel's default 6) */
} mt_stt_config;

/* Reads json[0..len) (named file in messages). 0, or -1 with a message
 * naming the file and key (not an object, not a number, out of 0..60 s,
 * extra heads not an integer in 0..1024, their dim in 1..65536). */
int mt_stt_config_parse(const char *json, size_t len, const char *file, mt_stt_config *c,
                        char *err, size_t errlen);

/* DIR/config.json of a model directory: as mt_stt_config_parse; a
 * directory without the file gives present 0. */
int mt_stt_config_load(const char *dir, mt_stt_config *c, char *err, size_t errlen);

#endif
