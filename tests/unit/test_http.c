/* test_http.c: the HTTP/1.x request-head reader of the --metrics endpoint
 * (src/wire/http.c): what it reads, when it wants more, and the status it
 * refuses each malformed head with. */
#include "wire/http.h"
#include "tap.h"

#include <stdio.h>
#include <string.h>

static mt_http_req req;
static char last_err[160];

/* the status of a refused head, 0 when it wants more, 1 when read */
static int parse(const char *s, size_t len)
{
    int status = 0;
    char *err = last_err;
    err[0] = '\0';
    long n = mt_http_parse(s, len, &req, &status, err, sizeof last_err);
    if (n > 0)
        return 1;
    if (n == 0)
        return 0;
    if (err[0] == '\0')
        return -1;   /* a refusal must say why */
    return status;
}

static int ps(const char *s)
{
    return parse(s, strlen(s));
}

static void test_good(void)
{
    const char *r = "GET /metrics?x=1&y HTTP/1.1\r\nHost: a:9\r\n"
                    "Authorization:   Bearer abc \t\r\nAccept: */*\r\n\r\nEXTRA";
    int status = 0;
    char err[160];
    long n = mt_http_parse(r, strlen(r), &req, &status, err, sizeof err);
    is_int(n, (long)(strlen(r) - 5), "the head's length, without what follows it");
    is_str(req.method, "GET", "method");
    is_str(req.path, "/metrics", "path up to '?'");
    is_str(req.query, "x=1&y", "query after '?'");
    is_int(req.minor, 1, "HTTP/1.1");
    is_int(req.nfield, 3, "three fields");
    is_str(mt_http_field_get(&req, "authorization"), "Bearer abc",
           "a field by any case, white space around its value removed");
    ok(mt_http_field_get(&req, "X-None") == NULL, "an absent field is NULL");
    is_int(ps("HEAD /health HTTP/1.0\n\n"), 1, "HTTP/1.0 with bare LF, no Host needed");
    is_str(req.query, "", "no query: empty");
    is_int(ps("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"), 1,
           "Content-Length: 0 is no body");
}

static void test_incomplete(void)
{
    const char *r = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    size_t len = strlen(r);
    int all = 1;
    for (size_t i = 0; i < len; i++)
        all &= parse(r, i) == 0;
    ok(all, "every proper prefix of a head wants more");
    is_int(parse(r, len), 1, "the whole head is read");
}

static void test_refused(void)
{
    is_int(ps("\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "empty request line");
    is_int(ps("GET /  HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "two spaces");
    is_int(ps("GET metrics HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "target not a path");
    is_int(ps("GET http://a/metrics HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "absolute form");
    is_int(ps("G(T / HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "method not a token");
    is_int(ps("GET / HTTP/2.0\r\nHost: x\r\n\r\n"), 505, "HTTP/2.0");
    is_int(ps("GET / HTTP/1.2\r\nHost: x\r\n\r\n"), 505, "HTTP/1.2");
    is_int(ps("GET / HTTX/1.1\r\nHost: x\r\n\r\n"), 400, "not HTTP");
    is_int(ps("GET / HTTP/1.1\r\n\r\n"), 400, "HTTP/1.1 without Host");
    is_int(ps("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n"), 400, "obsolete folding");
    like(last_err, "folding", "... named as such");
    is_int(ps("GET / HTTP/1.1\r\nHost : x\r\n\r\n"), 400, "space before the colon");
    is_int(ps("GET / HTTP/1.1\r\nHost x\r\n\r\n"), 400, "no colon");
    is_int(ps("GET / HTTP/1.1\r\n: x\r\nHost: x\r\n\r\n"), 400, "empty field name");
    is_int(ps("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n"), 400, "stray CR");
    is_int(ps("GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n"), 400, "control byte in a value");
    static const char nul[] = "GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n";
    is_int(parse(nul, sizeof nul - 1), 400, "NUL in a value");
    is_int(ps("GET /\x80 HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "non-ASCII in the target");
    is_int(ps("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"), 400,
           "a body announced");
    is_int(ps("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"), 501,
           "a chunked body announced");

    static char big[MT_HTTP_MAX_HEAD + 64];
    char *p = big;
    p += sprintf(p, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i <= MT_HTTP_MAX_FIELDS; i++)
        p += sprintf(p, "X-%d: y\r\n", i);
    p += sprintf(p, "\r\n");
    is_int(ps(big), 431, "too many fields");

    memset(big, 'a', sizeof big);
    memcpy(big, "GET /", 5);
    is_int(parse(big, MT_HTTP_MAX_TARGET + 40), 414, "a request line too long, no LF yet");
    p = big + sprintf(big, "GET /%0*d HTTP/1.1\r\nHost: x\r\n\r\n", MT_HTTP_MAX_TARGET, 0);
    is_int(parse(big, (size_t)(p - big)), 414, "a target too long");

    p = big + sprintf(big, "GET / HTTP/1.1\r\nX: ");
    memset(p, 'v', sizeof big - (size_t)(p - big));
    is_int(parse(big, MT_HTTP_MAX_HEAD - 1), 0, "a head just under the bound wants more");
    is_int(parse(big, MT_HTTP_MAX_HEAD), 431, "a head at the bound without its end: 431");
    is_int(parse(big, sizeof big), 431, "over the bound: 431");
}

int main(void)
{
    test_good();
    test_incomplete();
    test_refused();
    is_str(mt_http_reason(404), "Not Found", "reason phrase");
    is_str(mt_http_reason(999), "Error", "unknown status");
    return tap_done();
}
