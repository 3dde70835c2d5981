/* fuzz_latline.c: libFuzzer harness for the latency-line parser
 * (src/wire/latline.c). Any bytes go in as one line; the parser must return 0
 * or -1 with a message, and a line it accepts must survive the writer:
 * re-emitting every pair with mt_ll_str / mt_ll_flag and parsing that
 * again gives the same pairs. The typed readers run on every pair. */
#include "wire/latline.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static mt_latline a, b;
static char out[MT_LL_MAX_LINE * 3];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    err[0] = '\0';
    int rc = mt_latline_parse((const char *)data, size, 1, &a, err, sizeof err);
    if (rc != 0) {
        if (rc != -1 || strncmp(err, "line 1: ", 8) != 0)
            abort();
        return 0;
    }
    if (a.n < 0 || a.n > MT_LL_MAX_PAIRS)
        abort();
    mt_ll_writer w;
    mt_ll_begin(&w, out, sizeof out);
    for (int k = 0; k < a.n; k++) {
        int64_t i;
        double d;
        (void)mt_latline_i64(&a, a.pair[k].key, &i);
        (void)mt_latline_f64(&a, a.pair[k].key, &d);
        if (mt_latline_get(&a, a.pair[k].key) != a.pair[k].val)
            abort();
        if (a.pair[k].val[0] == '\0' && k % 2)
            mt_ll_flag(&w, a.pair[k].key);
        else
            mt_ll_str(&w, a.pair[k].key, a.pair[k].val);
    }
    long n = mt_ll_end(&w);
    if (n < 0)
        abort();
    if (mt_latline_parse(out, (size_t)n, 2, &b, err, sizeof err) != 0) {
        /* Re-quoting can lengthen a line past the limit; nothing else may
         * make the writer's output unparseable. */
        if (n <= MT_LL_MAX_LINE)
            abort();
        return 0;
    }
    if (b.n != a.n)
        abort();
    for (int k = 0; k < a.n; k++)
        if (strcmp(a.pair[k].key, b.pair[k].key) != 0 ||
            strcmp(a.pair[k].val, b.pair[k].val) != 0)
            abort();
    mt_tick t;
    (void)mt_tick_from_line(&a, 1, &t, err, sizeof err);
    mt_frame_rec fr;
    (void)mt_frame_rec_from_line(&a, 1, &fr, err, sizeof err);
    return 0;
}
