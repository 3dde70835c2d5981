/* fuzz_admit.c: libFuzzer harness for mt-admit's input side: mt-serve's
 * machine stream (tick, request and admit lines, and anything else) into
 * an admission controller, through src/admit/feed.c as mt-admit reads it.
 *
 * Byte 0 picks the policy (metronome, aimd, gradient, static), the signal,
 * no hold, a low --max-limit; the rest is
 * the stream. It is fed twice: byte by byte (mt_admit_feed_putc, as
 * mt-admit's loop does) and cut into lines by the harness
 * (mt_admit_feed_line); both runs must count the same lines and make the
 * same decisions. Invariants: each decision answers a request that was
 * made, at most once while it is held; once the input ends no request is
 * left held (accepted + rejected = decisions); every reject reason can be
 * written as a control line for mt-serve (else mt-admit could not answer
 * and the session would wait for the timeout); the limit stays within
 * [0, MT_ADMIT_MAX_LEVEL]. */
#include "admit/admit.h"
#include "admit/feed.h"
#include "wire/admission.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEC 4096

typedef struct decisions {
    int      n;
    uint32_t id[MAX_DEC];
    uint8_t  accept[MAX_DEC];
} decisions;

static decisions dec_a, dec_b;

static void emit(void *ctx, uint32_t id, int accept, const char *reason)
{
    decisions *d = ctx;
    if (!accept) {
        mt_control c = {.kind = MT_CONTROL_REJECT, .session = id};
        char line[MT_CONTROL_MAX_LINE + 1];
        if (!reason || strlen(reason) > MT_REASON_MAX)
            abort();
        memcpy(c.reason, reason, strlen(reason) + 1);
        if (mt_control_format(&c, line, sizeof line) < 0)
            abort();   /* mt-admit could not send this decision */
    }
    if (d->n < MAX_DEC) {
        d->id[d->n] = id;
        d->accept[d->n] = (uint8_t)accept;
    }
    d->n++;
}

static mt_admit_feed feed_a, feed_b;

static mt_admit *make_new(int policy, decisions *d)
{
    static const char *const names[] = {"metronome", "aimd", "gradient", "static:2"};
    char err[256];
    mt_admit_opts o;
    mt_admit_opts_default(&o);
    if (mt_admit_policy_parse(names[policy & 3], &o, err, sizeof err) != 0)
        abort();
    if (policy & 4)
        o.signal = MT_SIG_P99;
    if (policy & 8)
        o.hold_ms = 0;
    if (policy & 16)
        o.max_limit = 8;   /* the cap reached: a path the default 1024 hides */
    mt_admit *a = NULL;
    memset(d, 0, sizeof *d);
    if (mt_admit_create(&o, emit, d, &a, err, sizeof err) != 0)
        abort();
    return a;
}

/* A controller per configuration and side, made once and reset for each
 * input: making one allocates and clears a few MB (a level table of
 * MT_ADMIT_MAX_LEVEL + 1 entries), most of a run's time under ASan. */
static mt_admit *made[32][2];

static mt_admit *make(int policy, decisions *d)
{
    mt_admit **slot = &made[policy & 31][d == &dec_b];
    if (*slot) {
        memset(d, 0, sizeof *d);
        mt_admit_reset(*slot);
        return *slot;
    }
    *slot = make_new(policy, d);
    return *slot;
}

static void check_limit(const mt_admit *a)
{
    int l = mt_admit_limit(a);
    if (l < 0 || l > MT_ADMIT_MAX_LEVEL)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int policy = data[0];
    data++;
    size--;

    /* A: byte by byte, as mt-admit reads stdin */
    mt_admit *a = make(policy, &dec_a);
    mt_admit_feed_init(&feed_a, a, NULL, NULL);
    for (size_t i = 0; i < size; i++) {
        if (mt_admit_feed_putc(&feed_a, data[i]) != MT_FEED_NONE)
            check_limit(a);
    }
    mt_admit_feed_finish(&feed_a);
    mt_admit_finish(a);
    check_limit(a);

    /* B: the same lines, cut here */
    mt_admit *b = make(policy, &dec_b);
    mt_admit_feed_init(&feed_b, b, NULL, NULL);
    size_t start = 0;
    while (start < size) {      /* no last line when the input ends in \n */
        const uint8_t *nl = memchr(data + start, '\n', size - start);
        size_t i = nl ? (size_t)(nl - data) : size;
        size_t len = i - start;
        if (len > MT_LL_MAX_LINE + 1) {
            feed_b.lineno++;    /* overlong: skipped, counted bad */
            feed_b.bad_lines++;
        } else {
            mt_admit_feed_line(&feed_b, (const char *)data + start, len);
        }
        start = i + 1;
    }
    mt_admit_finish(b);

    if (feed_a.lineno != feed_b.lineno || feed_a.bad_lines != feed_b.bad_lines ||
        feed_a.ignored != feed_b.ignored || dec_a.n != dec_b.n)
        abort();
    for (int i = 0; i < dec_a.n && i < MAX_DEC; i++)
        if (dec_a.id[i] != dec_b.id[i] || dec_a.accept[i] != dec_b.accept[i])
            abort();
    if (feed_a.bad_lines + feed_a.ignored > feed_a.lineno)
        abort();

    mt_admit_stats st;
    mt_admit_get_stats(a, &st);
    if (st.held != 0)
        abort();   /* a request left unanswered at the end of input */
    if (st.accepted + st.rejected != dec_a.n)
        abort();   /* a decision not counted, or counted twice */
    if (dec_a.n > st.requests)
        abort();   /* more answers than requests */

    return 0;   /* a and b are kept for the next input (make) */
}
