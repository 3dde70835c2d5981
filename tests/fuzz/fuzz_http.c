/* fuzz_http.c: libFuzzer harness for the HTTP request-head reader
 * (src/wire/http.c) that the --metrics endpoint runs on every byte a
 * scraper sends. Any bytes: the reader returns a head length within the
 * input, 0 (wants more: only under the size bound), or -1 with a status
 * it documents and a message. A head it reads, written out again from its
 * parts, reads back to the same parts. */
#include "wire/http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mt_http_req a, b;
static char again[2 * MT_HTTP_MAX_HEAD];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int status = 0;
    char err[200];
    err[0] = '\0';
    long n = mt_http_parse((const char *)data, size, &a, &status, err, sizeof err);
    if (n == 0) {
        if (size >= MT_HTTP_MAX_HEAD)
            abort();
        return 0;
    }
    if (n < 0) {
        if (err[0] == '\0' || (status != 400 && status != 414 && status != 431 &&
                               status != 501 && status != 505))
            abort();
        return 0;
    }
    if ((size_t)n > size || n > MT_HTTP_MAX_HEAD || !a.method || !a.path || !a.query ||
        a.path[0] != '/' || a.nfield < 0 || a.nfield > MT_HTTP_MAX_FIELDS ||
        (a.minor != 0 && a.minor != 1))
        abort();
    /* written out again (CRLF, one space after each colon): the same parts */
    int len = snprintf(again, sizeof again, "%s %s%s%s HTTP/1.%d\r\n", a.method, a.path,
                       a.query[0] || memchr(data, '?', (size_t)n) ? "?" : "", a.query,
                       a.minor);
    for (int i = 0; i < a.nfield && len > 0 && (size_t)len < sizeof again; i++) {
        if (a.field[i].name[0] == '\0')
            abort();
        len += snprintf(again + len, sizeof again - (size_t)len, "%s: %s\r\n",
                        a.field[i].name, a.field[i].value);
    }
    if (len <= 0 || (size_t)len + 2 >= sizeof again)
        abort();
    memcpy(again + len, "\r\n", 2);
    len += 2;
    if (len > MT_HTTP_MAX_HEAD)
        return 0;   /* bare LFs became CRLFs: may no longer fit */
    if (mt_http_parse(again, (size_t)len, &b, &status, err, sizeof err) != len ||
        strcmp(a.method, b.method) || strcmp(a.path, b.path) ||
        strcmp(a.query, b.query) || a.minor != b.minor || a.nfield != b.nfield)
        abort();
    for (int i = 0; i < a.nfield; i++)
        if (strcmp(a.field[i].name, b.field[i].name) ||
            strcmp(a.field[i].value, b.field[i].value))
            abort();
    return 0;
}
