/* test_asr.c: Kyutai's streaming speech-to-text pieces behind
 * /api/asr-streaming: the MessagePack messages (src/wire/asr_msg.c) read
 * and refused, written byte for byte as rmp-serde writes them (struct
 * maps, f64 times), and the session (src/serve/asr_session.c): Kyutai's
 * word assembly on a token sequence worked out by hand from moshi-core's
 * asr.rs, the audio delay, markers after the delay, the pacing of frames
 * to the model, and the backlog bound. */
#include "model/stt_config.h"
#include "serve/asr_session.h"
#include "wire/asr_msg.h"
#include "tap.h"

#include <stdint.h>
#include <string.h>

static float pcm[64];

static int decode(const void *p, size_t n, mt_asr_in *m, char *why)
{
    return mt_asr_in_decode(p, n, m, pcm, 64, why, MT_ASR_WHY_MAX);
}

/* a literal and its length (the bytes may hold NULs) */
#define B(lit) (lit), sizeof(lit) - 1

static void test_read(void)
{
    mt_asr_in m;
    char why[MT_ASR_WHY_MAX];
    /* {"type":"Audio","pcm":[0.5f32, -1.0f64, 3]} */
    static const uint8_t audio[] = {0x82, 0xa4, 't', 'y', 'p', 'e', 0xa5, 'A', 'u', 'd', 'i', 'o',
                                    0xa3, 'p', 'c', 'm', 0x93, 0xca, 0x3f, 0x00, 0x00, 0x00,
                                    0xcb, 0xbf, 0xf0, 0, 0, 0, 0, 0, 0, 0x03};
    tap_ok(decode(audio, sizeof audio, &m, why) == 0 && m.type == MT_ASR_IN_AUDIO &&
           m.n_pcm == 3 && pcm[0] == 0.5f && pcm[1] == -1.0f && pcm[2] == 3.0f,
           "Audio: f32, f64 and integer samples");
    /* {"id":-5,"type":"Marker"}: keys in any order */
    static const uint8_t marker[] = {0x82, 0xa2, 'i', 'd', 0xfb, 0xa4, 't', 'y', 'p', 'e',
                                     0xa6, 'M', 'a', 'r', 'k', 'e', 'r'};
    tap_ok(decode(marker, sizeof marker, &m, why) == 0 && m.type == MT_ASR_IN_MARKER &&
           m.marker_id == -5, "Marker with a negative id, keys in any order");
    static const uint8_t extra[] = {0x82, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'I', 'n', 'i', 't',
                                    0xa1, 'x', 0xc0};
    tap_ok(decode(extra, sizeof extra, &m, why) == 0 && m.type == MT_ASR_IN_INIT,
           "Init, an unknown key ignored (as serde does)");

    static const struct { const char *name; const char *bytes; size_t n; const char *want; } bad[] = {
        {"0xc1", B("\xc1"), "well-formed"},
        {"trailing bytes", B("\x81\xa4type\xa4Init\x00"), "after"},
        {"not a map", B("\x92\xa5" "Audio\x90"), "map"},
        {"pcm not an array", B("\x82\xa4type\xa5" "Audio\xa3pcm\xa1x"), "array"},
        {"a NaN sample", B("\x82\xa4type\xa5" "Audio\xa3pcm\x91\xcb\x7f\xf8\0\0\0\0\0\0"),
         "finite"},
        {"an array claiming 2^32-1 samples", B("\x82\xa4type\xa5" "Audio\xa3pcm\xdd\xff\xff\xff\xff"
         "\xca\0\0\0\0"), "well-formed"},
        {"65 samples, over the room", NULL, 0, "more than"},
        {"a type given twice", B("\x82\xa4type\xa4Init\xa4type\xa5" "Audio"), "twice"},
        {"an unknown type", B("\x81\xa4type\xa6Launch"), "unknown"},
        {"OggOpus", B("\x82\xa4type\xa7OggOpus\xa4" "data\xc4\x01x"), "OggOpus"},
        {"a marker id over i64", B("\x82\xa4type\xa6Marker\xa2id\xcf\xff\xff\xff\xff\xff\xff\xff"
         "\xff"), "64-bit"},
        {"nested 20 deep", B("\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91"
         "\x91\x91\x91\x91\x00"), "deeper"},
        {"empty", B(""), "well-formed"},
    };
    uint8_t many[19 + 5 * 65];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const uint8_t *b = (const uint8_t *)bad[i].bytes;
        size_t n = bad[i].n;
        if (!b) {   /* {"type":"Audio","pcm":[65 x f32 0]} */
            memcpy(many, "\x82\xa4type\xa5" "Audio\xa3pcm\xdc\x00\x41", 19);
            n = 19;
            for (int k = 0; k < 65; k++, n += 5)
                memcpy(many + n, "\xca\0\0\0\0", 5);
            b = many;
        }
        int rc = decode(b, n, &m, why);
        tap_ok(rc == -1 && strstr(why, bad[i].want), "refused: %s (%s)", bad[i].name, why);
    }
}

static void test_write(void)
{
    uint8_t b[128];
    mt_asr_out o = { .p = b, .cap = sizeof b };
    mt_asr_out_ready(&o);
    tap_ok(o.len == 12 && !memcmp(b, "\x81\xa4type\xa5Ready", 12), "Ready as rmp-serde writes it");
    mt_asr_out_word(&o, "hi", 2, 0.5);
    static const uint8_t word[] = "\x83\xa4type\xa4Word\xa4text\xa2hi\xaastart_time"
                                  "\xcb\x3f\xe0\0\0\0\0\0\0";
    tap_ok(o.len == sizeof word - 1 && !memcmp(b, word, o.len),
           "Word {text, start_time: f64}, a struct map");
    mt_asr_out_step(&o, 7, NULL, 0, 1920);
    static const uint8_t step[] = "\x84\xa4type\xa4Step\xa8step_idx\x07\xa3prs\x90"
                                  "\xac" "buffered_pcm\xcd\x07\x80";
    tap_ok(o.len == sizeof step - 1 && !memcmp(b, step, o.len), "Step {step_idx, prs, buffered_pcm}");
    uint8_t small[8];
    mt_asr_out s = { .p = small, .cap = sizeof small };
    mt_asr_out_error(&s, "a reason longer than the room");
    tap_ok(s.over, "a message over the room is marked, not cut");
}

/* ---- the session ------------------------------------------------------------ */

static uint8_t sent[64][128];
static size_t sent_len[64];
static int n_sent, n_frames;

static void on_send(void *ctx, const uint8_t *msg, size_t n)
{
    (void)ctx;
    if (n_sent < 64 && n <= 128) {
        memcpy(sent[n_sent], msg, n);
        sent_len[n_sent] = n;
    }
    n_sent++;
}

static void on_frame(void *ctx, const int16_t *p)
{
    (void)ctx;
    (void)p;
    n_frames++;
}

static const char *piece(void *ctx, int id)
{
    (void)ctx;
    switch (id) {
    case 7: return " a";      /* the tokenizer gives U+2581 as a space */
    case 8: return "b";
    case 9: return "\xe2\x96\x81" "c";
    default: return NULL;
    }
}

/* message i equals what the writer makes of the call */
static int is_msg(int i, const mt_asr_out *want)
{
    return i < n_sent && sent_len[i] == want->len && !memcmp(sent[i], want->p, want->len);
}

static size_t audio_msg(uint8_t *b, int samples)
{
    size_t n = 0;
    memcpy(b, "\x82\xa4type\xa5" "Audio\xa3pcm\x90", 17);
    n = 17;
    b[16] = (uint8_t)(0x90 | samples);
    for (int k = 0; k < samples; k++, n += 5)
        memcpy(b + n, "\xca\x3e\x80\0\0", 5);   /* 0.25 */
    return n;
}

static void test_session(void)
{
    /* 12.5 frames a second, as Kyutai's models; a delay of 2 frames */
    mt_asr_sess_opts o = { .rate = 50, .frame_samples = 4, .delay = 2, .piece = piece,
                           .send = on_send, .frame = on_frame };
    mt_asr_sess *s = mt_asr_sess_new(&o);
    char why[MT_ASR_WHY_MAX];
    uint8_t b[128];
    /* 9 frames and a half before admission, a marker after frame 3 */
    size_t n = audio_msg(b, 12);
    tap_ok(mt_asr_sess_client(s, b, n, 1, why, sizeof why) == 0, "Audio of 3 frames");
    static const uint8_t mk[] = "\x82\xa4type\xa6Marker\xa2id\x2a";
    tap_ok(mt_asr_sess_client(s, mk, sizeof mk - 1, 2, why, sizeof why) == 0, "Marker 42");
    n = audio_msg(b, 15);
    mt_asr_sess_client(s, b, n, 3, why, sizeof why);
    n = audio_msg(b, 11);
    mt_asr_sess_client(s, b, n, 4, why, sizeof why);
    tap_ok(n_frames == 0 && n_sent == 0, "nothing to the model or the client before admission");
    mt_asr_sess_ready(s);
    tap_ok(n_frames == MT_ASR_INFLIGHT, "admitted: %d frames to the model (%d at most in flight)",
           n_frames, MT_ASR_INFLIGHT);
    /* the model's tokens for frames 0..8; by hand, Kyutai's rule with delay 2:
     * step 1 (5): before the delay; step 2 (0): a boundary at 0 s;
     * steps 3, 4 (7, 8): "ab"; step 5 (3): Word "ab" at 0; then Marker 42
     * (due at 3 frames + 2); step 6 (9): "c"; step 7 (0): Word "c" at 0,
     * EndWord at (7-2)/12.5 = 0.4; step 8 (0): a boundary, no EndWord;
     * step 9 (FILL): nothing */
    static const int32_t tok[9] = {5, 0, 7, 8, 3, 9, 0, 0, -1};
    for (int k = 0; k < 9; k++)
        mt_asr_sess_answer(s, (uint32_t)k, tok[k] < 0, &tok[k], 1, 100 + (uint64_t)k);
    tap_ok(n_frames == 9, "every whole frame went to the model as answers came (%d)", n_frames);
    uint8_t w[128];
    mt_asr_out want = { .p = w, .cap = sizeof w };
    int i = 0;
    mt_asr_out_ready(&want);
    tap_ok(is_msg(i++, &want), "Ready first");
    mt_asr_out_word(&want, "ab", 2, 0.0);
    tap_ok(is_msg(i++, &want), "Word \"ab\" at 0.0 (pieces joined, the leading space dropped)");
    mt_asr_out_marker(&want, 42);
    tap_ok(is_msg(i++, &want), "Marker 42 once the 3 frames before it and the delay are stepped");
    mt_asr_out_word(&want, "c", 1, 0.0);
    tap_ok(is_msg(i++, &want), "Word \"c\" at the last boundary (0.0)");
    mt_asr_out_end_word(&want, 0.4);
    tap_ok(is_msg(i++, &want), "EndWord at (7 - 2) / 12.5 = 0.4");
    tap_ok(n_sent == i, "nothing else (%d messages)", n_sent);

    /* the backlog: more than MT_ASR_BACKLOG_S ahead is refused */
    int rc = 0;
    for (int k = 0; k < MT_ASR_BACKLOG_S * 13 * 4 && rc == 0; k++) {
        n = audio_msg(b, 15);
        rc = mt_asr_sess_client(s, b, n, 5, why, sizeof why);
    }
    tap_ok(rc == -1 && strstr(why, "ahead"), "audio %d s ahead: refused (%s)", MT_ASR_BACKLOG_S, why);
    mt_asr_sess_free(s);
}

/* Step messages from the extra heads' PRS frames: before the step's
 * words, step_idx the frame's index + 1, buffered_pcm the samples received
 * and not yet stepped; none for a FILL, none from a PRS of another frame. */
static void test_steps(void)
{
    mt_asr_sess_opts o = { .rate = 50, .frame_samples = 4, .delay = 0, .piece = piece,
                           .send = on_send, .frame = on_frame };
    mt_asr_sess *s = mt_asr_sess_new(&o);
    char why[MT_ASR_WHY_MAX];
    uint8_t b[128];
    n_sent = n_frames = 0;
    size_t n = audio_msg(b, 14);                 /* 3 frames and 2 samples */
    mt_asr_sess_client(s, b, n, 1, why, sizeof why);
    mt_asr_sess_ready(s);
    static const float p0[2] = { 0.25f, 0.75f }, p1[2] = { 0.5f, 0.125f };
    static const int32_t tok[3] = { 7, 0, 3 };
    mt_asr_sess_prs(s, 0, p0, 2);
    mt_asr_sess_answer(s, 0, 0, &tok[0], 1, 10);   /* "a" starts: no word yet */
    mt_asr_sess_prs(s, 1, p1, 2);
    mt_asr_sess_answer(s, 1, 1, &tok[1], 1, 11);   /* FILL: no Step, no token */
    mt_asr_sess_prs(s, 7, p1, 2);                  /* not frame 2's */
    mt_asr_sess_answer(s, 2, 0, &tok[2], 1, 12);   /* Word "a" */
    uint8_t w[128];
    mt_asr_out want = { .p = w, .cap = sizeof w };
    int i = 0;
    mt_asr_out_ready(&want);
    tap_ok(is_msg(i++, &want), "Ready");
    mt_asr_out_step(&want, 1, p0, 2, 14 - 4);
    tap_ok(is_msg(i++, &want), "Step {1, [0.25, 0.75], 10 samples not yet stepped}");
    mt_asr_out_word(&want, "a", 1, 0.0);
    tap_ok(is_msg(i++, &want), "then frame 2's Word, with no Step (its PRS was another's)");
    tap_ok(n_sent == i, "no Step for the FILL (%d messages)", n_sent);
    mt_asr_sess_free(s);
}

/* Kyutai's published configs (configs/stt_1b_enfr.json, stt_2.6b_en.json,
 * their stt_config) and the refusals. */
static void test_stt_config(void)
{
    mt_stt_config c;
    char err[300];
    static const char one_b[] = "{\"model_type\": \"stt\", \"stt_config\": "
        "{\"audio_delay_seconds\": 0.5, \"audio_silence_prefix_seconds\": 0.0}, \"dim\": 2048}";
    static const char two_b[] = "{\"stt_config\": {\"audio_delay_seconds\": 2.5, "
        "\"audio_silence_prefix_seconds\": 1.0}}";
    tap_ok(mt_stt_config_parse(B(one_b), "1b", &c, err, sizeof err) == 0 && c.present &&
           c.audio_delay_s == 0.5 && c.silence_prefix_s == 0, "stt-1b: 0.5 s");
    tap_ok(mt_stt_config_parse(B(two_b), "2b", &c, err, sizeof err) == 0 && c.present &&
           c.audio_delay_s == 2.5 && c.silence_prefix_s == 1.0, "stt-2.6b: 2.5 s, prefix 1 s");
    tap_ok(mt_stt_config_parse(B("{\"dim\": 4}"), "lm", &c, err, sizeof err) == 0 &&
           !c.present, "no stt_config: not speech-to-text");
    tap_ok(mt_stt_config_parse(B("{\"stt_config\": {\"audio_delay_seconds\": \"x\"}}"),
                               "bad", &c, err, sizeof err) == -1 &&
           strstr(err, "bad: stt_config.audio_delay_seconds"), "a string delay: refused (%s)", err);
    tap_ok(mt_stt_config_parse(B("{\"stt_config\": {\"audio_delay_seconds\": -1}}"),
                               "neg", &c, err, sizeof err) == -1, "a negative delay: refused");
    tap_ok(mt_stt_config_parse(B("{\"stt_config\": 3}"), "num", &c, err, sizeof err) == -1 &&
           strstr(err, "not an object"), "stt_config not an object: refused (%s)", err);
}

int main(void)
{
    test_stt_config();
    test_read();
    test_write();
    test_session();
    test_steps();
    return tap_done();
}
