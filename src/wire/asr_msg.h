/* asr_msg.h: the MessagePack messages of Kyutai's streaming speech-to-text
 * protocol (moshi-server's /api/asr-streaming, rust/moshi-server/src/asr.rs),
 * read strictly and written as their server writes them.
 *
 * Every message is one MessagePack map with a "type" string (serde's
 * internally tagged enums):
 *   in   {"type":"Audio","pcm":[f32...]}     PCM at 24 kHz, mono
 *        {"type":"Marker","id":i64}
 *        {"type":"Init"}                     (their batched mode's; a no-op)
 *        {"type":"OggOpus","data":bin}       (recognised, refused by name)
 *   out  {"type":"Ready"}
 *        {"type":"Word","text":str,"start_time":f64}
 *        {"type":"EndWord","stop_time":f64}
 *        {"type":"Step","step_idx":uint,"prs":[f32...],"buffered_pcm":uint}
 *        {"type":"Marker","id":i64}
 *        {"type":"Error","message":str}
 *
 * The reader (libmsgpack-c underneath) is preceded by a bounds scan of our
 * own: a container may not claim more elements than bytes remain, nesting
 * stops at MT_ASR_MAX_DEPTH, so that a few hostile bytes cannot make the
 * library allocate for billions of elements. Unknown keys are ignored, as
 * serde does; a duplicate or missing field, a wrong type, a non-finite or
 * out-of-range sample, trailing bytes: refused with a reason.
 */
#ifndef MT_ASR_MSG_H
#define MT_ASR_MSG_H

#include <stddef.h>
#include <stdint.h>

#define MT_ASR_MAX_DEPTH 8
#define MT_ASR_WHY_MAX   160      /* bytes of a refusal's reason */

enum mt_asr_in_type {
    MT_ASR_IN_AUDIO = 1,
    MT_ASR_IN_MARKER = 2,
    MT_ASR_IN_INIT = 3,
};

typedef struct mt_asr_in {
    int     type;        /* mt_asr_in_type */
    int64_t marker_id;   /* MT_ASR_IN_MARKER */
    size_t  n_pcm;       /* MT_ASR_IN_AUDIO: samples written to pcm */
} mt_asr_in;

/* Reads one message p[0..n) into *m; the samples of an Audio message into
 * pcm[0..pcm_cap) (more than pcm_cap is refused). 0, or -1 with the reason
 * in why (a short sentence, sent back to the client). */
int mt_asr_in_decode(const uint8_t *p, size_t n, mt_asr_in *m, float *pcm, size_t pcm_cap,
                     char *why, size_t whylen);

/* A message being written: into p[0..cap); over marks a message that did
 * not fit (then len is meaningless). */
typedef struct mt_asr_out {
    uint8_t *p;
    size_t   len, cap;
    int      over;
} mt_asr_out;

/* Each writes one whole message at o->p (o->len is set; o->over when it
 * did not fit). Text is copied as given: the caller hands valid UTF-8. */
void mt_asr_out_ready(mt_asr_out *o);
void mt_asr_out_word(mt_asr_out *o, const char *text, size_t len, double start_time);
void mt_asr_out_end_word(mt_asr_out *o, double stop_time);
void mt_asr_out_step(mt_asr_out *o, uint64_t step_idx, const float *prs, size_t n_prs,
                     uint64_t buffered_pcm);
void mt_asr_out_marker(mt_asr_out *o, int64_t id);
void mt_asr_out_error(mt_asr_out *o, const char *message);

/* The client's side (mt-replay): an Audio message of n samples (written
 * as f32, as serde writes Vec<f32>); a Marker is mt_asr_out_marker. */
void mt_asr_out_audio(mt_asr_out *o, const float *pcm, size_t n);

/* A server message, read strictly as above (unknown types refused). */
enum mt_asr_srv_type {
    MT_ASR_SRV_READY = 1, MT_ASR_SRV_WORD, MT_ASR_SRV_END_WORD, MT_ASR_SRV_STEP,
    MT_ASR_SRV_MARKER, MT_ASR_SRV_ERROR,
};
typedef struct mt_asr_srv {
    int     type;          /* mt_asr_srv_type */
    char    text[256];     /* Word's text, Error's message (cut, NUL-ended) */
    double  time;          /* Word's start_time, EndWord's stop_time */
    int64_t id;            /* Marker's id */
} mt_asr_srv;
int mt_asr_srv_decode(const uint8_t *p, size_t n, mt_asr_srv *m, char *why, size_t whylen);

#endif
