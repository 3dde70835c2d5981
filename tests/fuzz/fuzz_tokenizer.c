/* fuzz_tokenizer.c: libFuzzer harness for the SentencePiece .model reader
 * (mt_tokenizer_parse in src/model/tokenizer.c). Any bytes go in as the
 * file; it must return NULL with a message, or a tokenizer whose every
 * piece is NULL (control) or a non-empty NUL-terminated string without the
 * word mark, and NULL for the ids out of range. */
#include "model/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = '\0';
    mt_tokenizer *t = mt_tokenizer_parse(data, size, err, sizeof err);
    if (!t) {
        if (!err[0])
            abort();
        return 0;
    }
    int n = mt_tokenizer_size(t);
    if (n < 1 || (size_t)n > size)
        abort();
    for (int i = 0; i < n; i++) {
        const char *p = mt_tokenizer_piece(t, i);
        if (p && (!*p || strlen(p) > MT_TOKENIZER_MAX_PIECE || strstr(p, "\xe2\x96\x81")))
            abort();
    }
    if (mt_tokenizer_piece(t, -1) || mt_tokenizer_piece(t, n))
        abort();
    mt_tokenizer_free(t);
    return 0;
}
