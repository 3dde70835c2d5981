/* fuzz_replay_rec.c: libFuzzer harness for mt-replay's record readers
 * (src/wire/replay_rec.c). Any bytes go in as one line; every reader must
 * return 0 or -1 with a message naming the line, and a record a reader
 * accepts must come back the same through its writer and reader. */
#include "wire/replay_rec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static mt_latline a, b;

#define TRY(T) do {                                                          \
        static mt_##T r1, r2;                                                \
        char buf_[MT_LL_MAX_LINE * 3];                                       \
        err[0] = 0;                                                          \
        memset(&r1, 0, sizeof r1);                                           \
        int rc_ = mt_##T##_from_line(&a, 1, &r1, err, sizeof err);           \
        if (rc_ != 0) {                                                      \
            if (rc_ != -1 || strncmp(err, "line 1: ", 8) != 0)               \
                abort();                                                     \
            break;                                                           \
        }                                                                    \
        long n_ = mt_##T##_format(&r1, buf_, sizeof buf_);                   \
        if (n_ < 0)                                                          \
            abort();                                                         \
        memset(&r2, 0, sizeof r2);                                           \
        if (mt_latline_parse(buf_, (size_t)n_, 2, &b, err, sizeof err) != 0) \
            break;  /* re-quoting can lengthen a line past the limit */      \
        if (mt_##T##_from_line(&b, 2, &r2, err, sizeof err) != 0)            \
            abort();                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    if (mt_latline_parse((const char *)data, size, 1, &a, err, sizeof err) != 0)
        return 0;
    TRY(replay_tick);
    TRY(replay_frame);
    TRY(replay_retry);
    TRY(replay_session);
    TRY(replay_summary);
    TRY(replay_rejected);
    TRY(replay_rate);
    TRY(replay_mic);
    TRY(replay_play);
    return 0;
}
