/* utf8.h: the one strict UTF-8 check, for every text that crosses a
 * boundary (frame fields, tokenizer pieces). */
#ifndef MT_UTF8_H
#define MT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Whether s[0..n) is well-formed UTF-8: no overlongs, no surrogates, at
 * most U+10FFFF, and no NUL (reasons, model names and pieces end up as C
 * strings in logs). */
int mt_utf8_valid(const uint8_t *s, size_t n);

#endif
