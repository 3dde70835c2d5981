/* fuzz_codes.c: libFuzzer harness for the Mimi codes file reader
 * (src/codec/codes_file.c). Any bytes go in as a file; the reader must
 * return 0 with frames x n codes each in 0..bins-1, or -1 with a message
 * naming the input, and free what it took either way (ASan). */
#define _GNU_SOURCE
#include "codec/codes_file.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int bins = 2048;
    char err[256];
    err[0] = '\0';
    FILE *f = fmemopen(size ? (void *)data : (void *)"", size, "r");
    if (!f)
        return 0;
    mt_codes c;
    int rc = mt_codes_read(f, "in", bins, &c, err, sizeof err);
    fclose(f);
    if (rc != 0) {
        if (rc != -1 || strncmp(err, "in", 2) != 0 || c.codes)
            abort();
        return 0;
    }
    if (c.n < 1 || c.n > MT_CODES_MAX_BOOKS || c.frames < 1 || !c.codes)
        abort();
    for (long i = 0; i < c.frames * c.n; i++)
        if (c.codes[i] < 0 || c.codes[i] >= bins)
            abort();
    free(c.codes);
    return 0;
}
