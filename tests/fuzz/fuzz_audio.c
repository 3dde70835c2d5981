/* fuzz_audio.c: libFuzzer harness for audio.c's file reader (issue 19
 * item 9). The input is a whole audio file, read through libsndfile's
 * virtual I/O (mt_audio_read_mem, the same decoding as a file on disk).
 * Oracles: a read either fails with a message naming the input or gives
 * at least one frame, a plausible rate, and every sample within [-1, 1]
 * (no NaN); the samples then go through the rate conversion and the s16
 * conversion mt-replay applies, which must not crash either. */
#include "client/audio_read.h"
#include "client/resample.h"

#include <samplerate.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* libsndfile's Ogg Vorbis open leaks libvorbis's vorbis_info on some
 * malformed streams (corpus/audio/bad-ogg-vorbis-leak; not our code: we
 * hold no handle when sf_open fails). We never call libvorbis ourselves,
 * so ignoring leaks allocated inside it hides nothing of ours. Read by
 * LeakSanitizer in `make fuzz` and in the ASan replay of `make asan`. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libvorbis.so\n";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_audio a, r;
    char err[256];
    err[0] = 0;
    if (mt_audio_read_mem(data, size, "fuzz", &a, err, sizeof err) != 0) {
        if (strncmp(err, "fuzz: ", 6) != 0)
            abort(); /* every failure is one message naming the input */
        return 0;
    }
    if (a.frames == 0 || !a.samples || a.rate < 1 || a.rate > 768000 ||
        a.channels_in < 1 || a.channels_in > 64)
        abort();
    for (size_t i = 0; i < a.frames; i++)
        if (!(a.samples[i] >= -1.0f && a.samples[i] <= 1.0f))
            abort();
    /* conversion costs grow with length and rate ratio: only for inputs
     * of a sane size, as a fuzzer's inputs are */
    if (a.frames <= (1u << 20) && mt_audio_resample(&a, 24000, SRC_LINEAR, &r,
                                                    err, sizeof err) == 0) {
        int16_t pcm[4096];
        for (size_t off = 0; off < r.frames; off += 4096) {
            size_t n = r.frames - off < 4096 ? r.frames - off : 4096;
            mt_audio_to_s16(r.samples + off, pcm, n);
        }
        mt_audio_free(&r);
    }
    mt_audio_free(&a);
    return 0;
}
