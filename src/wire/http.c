/* http.c: the strict HTTP/1.x request-head reader (see http.h). */
#include "wire/http.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/errmsg.h"

/* tchar of RFC 9110: what a method or a field name may hold */
static int is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static long fail(int *status, int st, char *err, size_t errlen, const char *msg)
{
    *status = st;
    mt_set_err(err, errlen, "%s", msg);
    return -1;
}

/* The end of the head in data[0..len): the offset after the empty line,
 * 0 when none yet, or -1 for an empty first line. */
static long head_end(const char *data, size_t len)
{
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (data[i] != '\n')
            continue;
        size_t l = i - start;
        if (l == 0 || (l == 1 && data[start] == '\r'))
            return start == 0 ? -1 : (long)(i + 1);
        start = i + 1;
    }
    return 0;
}

/* Cuts buf at the end of the line that starts at *p: returns the line
 * (NUL-terminated, without CR LF) and moves *p past it; NULL at the end.
 * A CR anywhere but before the LF is reported through *bad_cr. */
static char *next_line(char **p, int *bad_cr)
{
    char *s = *p, *nl = strchr(s, '\n');
    if (!nl)
        return NULL;
    *nl = '\0';
    *p = nl + 1;
    char *cr = strchr(s, '\r');
    if (cr) {
        if (cr != nl - 1)
            *bad_cr = 1;
        *cr = '\0';
    }
    return s;
}

static long request_line(char *line, mt_http_req *req, int *status, char *err,
                         size_t errlen)
{
    char *sp1 = strchr(line, ' ');
    if (!sp1 || sp1 == line)
        return fail(status, 400, err, errlen, "malformed request line");
    *sp1 = '\0';
    for (char *m = line; *m; m++)
        if (!is_tchar((unsigned char)*m))
            return fail(status, 400, err, errlen, "malformed method");
    char *target = sp1 + 1, *sp2 = strchr(target, ' ');
    if (!sp2)
        return fail(status, 400, err, errlen, "malformed request line");
    *sp2 = '\0';
    size_t tl = (size_t)(sp2 - target);
    if (tl > MT_HTTP_MAX_TARGET)
        return fail(status, 414, err, errlen, "request target too long");
    if (tl == 0 || target[0] != '/')
        return fail(status, 400, err, errlen, "request target is not a path");
    for (char *t = target; *t; t++)
        if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f)
            return fail(status, 400, err, errlen, "bad byte in request target");
    const char *ver = sp2 + 1;
    if (strncmp(ver, "HTTP/", 5) != 0 || strlen(ver) != 8 || ver[6] != '.' ||
        ver[5] < '0' || ver[5] > '9' || ver[7] < '0' || ver[7] > '9')
        return fail(status, 400, err, errlen, "malformed HTTP version");
    if (ver[5] != '1' || (ver[7] != '0' && ver[7] != '1'))
        return fail(status, 505, err, errlen, "HTTP version not supported (1.0 and 1.1 are)");
    req->method = line;
    req->path = target;   /* split at '?' once the head is read */
    req->minor = ver[7] - '0';
    return 0;
}

static long field_line(char *line, mt_http_req *req, int *status, char *err,
                       size_t errlen)
{
    if (line[0] == ' ' || line[0] == '\t')
        return fail(status, 400, err, errlen, "obsolete line folding");
    char *colon = strchr(line, ':');
    if (!colon || colon == line)
        return fail(status, 400, err, errlen, "malformed header field");
    for (char *n = line; n < colon; n++)
        if (!is_tchar((unsigned char)*n))
            return fail(status, 400, err, errlen, "malformed header field name");
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t vl = strlen(v);
    while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        v[--vl] = '\0';
    for (size_t i = 0; i < vl; i++) {
        unsigned char c = (unsigned char)v[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return fail(status, 400, err, errlen, "control byte in header field value");
    }
    if (req->nfield >= MT_HTTP_MAX_FIELDS)
        return fail(status, 431, err, errlen, "too many header fields");
    req->field[req->nfield].name = line;
    req->field[req->nfield].value = v;
    req->nfield++;
    return 0;
}

/* No body is ever read: a request that announces one is refused, or its
 * body would be read as the next request. */
static long no_body(const mt_http_req *req, int *status, char *err, size_t errlen)
{
    for (int i = 0; i < req->nfield; i++) {
        const mt_http_field *f = &req->field[i];
        if (strcasecmp(f->name, "Transfer-Encoding") == 0)
            return fail(status, 501, err, errlen, "request bodies are not accepted");
        if (strcasecmp(f->name, "Content-Length") == 0 && strcmp(f->value, "0") != 0)
            return fail(status, 400, err, errlen, "request bodies are not accepted");
    }
    if (req->minor == 1 && !mt_http_field_get(req, "Host"))
        return fail(status, 400, err, errlen, "HTTP/1.1 request without Host");
    return 0;
}

long mt_http_parse(const char *data, size_t len, mt_http_req *req,
                   int *status, char *err, size_t errlen)
{
    long end = head_end(data, len);
    if (end < 0)
        return fail(status, 400, err, errlen, "empty request line");
    if (end == 0) {
        if (!memchr(data, '\n', len) && len > MT_HTTP_MAX_TARGET + 32)
            return fail(status, 414, err, errlen, "request line too long");
        if (len >= MT_HTTP_MAX_HEAD)
            return fail(status, 431, err, errlen, "request head too large");
        return 0;
    }
    if ((size_t)end > MT_HTTP_MAX_HEAD)
        return fail(status, 431, err, errlen, "request head too large");
    for (long i = 0; i < end; i++) {
        unsigned char c = (unsigned char)data[i];
        if (c == 0 || (c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f)
            return fail(status, 400, err, errlen, "control byte in request head");
    }
    memset(req, 0, offsetof(mt_http_req, buf));
    req->nfield = 0;
    memcpy(req->buf, data, (size_t)end);
    req->buf[end] = '\0';
    char *p = req->buf;
    int bad_cr = 0;
    char *line = next_line(&p, &bad_cr);
    if (!line || request_line(line, req, status, err, errlen) != 0)
        return line ? -1 : fail(status, 400, err, errlen, "malformed request line");
    while ((line = next_line(&p, &bad_cr)) != NULL && line[0] != '\0')
        if (field_line(line, req, status, err, errlen) != 0)
            return -1;
    if (bad_cr)
        return fail(status, 400, err, errlen, "stray CR in request head");
    if (no_body(req, status, err, errlen) != 0)
        return -1;
    /* the target split in place at its first '?' */
    char *t = (char *)req->path, *q = strchr(t, '?');
    req->query = "";
    if (q) {
        *q = '\0';
        req->query = q + 1;
    }
    return end;
}

const char *mt_http_field_get(const mt_http_req *req, const char *name)
{
    for (int i = 0; i < req->nfield; i++)
        if (strcasecmp(req->field[i].name, name) == 0)
            return req->field[i].value;
    return NULL;
}

const char *mt_http_reason(int status)
{
    switch (status) {
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 414: return "URI Too Long";
    case 426: return "Upgrade Required";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    }
    return "Error";
}
