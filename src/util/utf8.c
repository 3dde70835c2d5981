/* utf8.c: see utf8.h. */
#include "util/utf8.h"

int mt_utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c == 0)
            return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1; cp = c & 0x1F; min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2; cp = c & 0x0F; min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3; cp = c & 0x07; min = 0x10000;
        } else {
            return 0;
        }
        if (n - i - 1 < need)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            uint8_t cc = s[i + k];
            if ((cc & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (cc & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += need + 1;
    }
    return 1;
}
