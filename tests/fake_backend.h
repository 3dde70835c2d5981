/* fake_backend.h: the shell of a fake decode backend for tests and fuzz
 * harnesses that run the real engine without a model's arithmetic. The
 * includer supplies what differs between them (the step and the prefill:
 * what they cost on the includer's clock, what they count) and its own
 * backend constructor hands them to fake_backend_new. The fake keeps no
 * K/V: the pool's books are enough. Header-only (static functions) so each
 * test stays one translation unit. */
#ifndef MT_TESTS_FAKE_BACKEND_H
#define MT_TESTS_FAKE_BACKEND_H

#include "decode/backend.h"

#include <stdio.h>
#include <stdlib.h>

typedef int (*fake_step_fn)(mt_backend *be, int B, mt_kv_seq *const *seqs,
                            const mt_step_io *io, char *err, size_t errlen);
typedef int (*fake_prefill_fn)(mt_backend *be, mt_kv_seq *seq, int n,
                               const mt_step_io *io, char *err,
                               size_t errlen);

static void fake_backend_destroy(mt_backend *be) { free(be); }

static int fake_backend_attach_pool(mt_backend *be, mt_kv_pool *pool,
                                    char *err, size_t errlen)
{
    (void)be; (void)pool; (void)err; (void)errlen;
    return 0;
}

/* A backend named "fake" with fp32-sized K/V elements (the pool's
 * position_bytes follow from them) whose step and prefill are the caller's. */
static int fake_backend_new(fake_step_fn step, fake_prefill_fn prefill,
                            mt_backend **out, char *err, size_t errlen)
{
    mt_backend *be = calloc(1, sizeof *be);
    if (!be) {
        snprintf(err, errlen, "fake: out of memory");
        return -1;
    }
    be->name = "fake";
    be->kv_elem_bytes = sizeof(float);
    be->attach_pool = fake_backend_attach_pool;
    be->step = step;
    be->prefill = prefill;
    be->destroy = fake_backend_destroy;
    *out = be;
    return 0;
}

#endif
