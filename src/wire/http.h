/* http.h: a strict reader of one HTTP/1.x request head (request line and
 * header fields, up to the empty line), for mt-serve's small HTTP
 * endpoints (/metrics, /health). GET-style requests only: a body is never
 * read, and a request announcing one (Content-Length other than 0,
 * Transfer-Encoding) is refused.
 *
 * Every byte is hostile: the head is bounded (MT_HTTP_MAX_HEAD bytes,
 * MT_HTTP_MAX_FIELDS fields), control bytes, obsolete line folding,
 * white space before a field's colon and malformed request lines are
 * errors with the status to answer (400, 414, 431, 501, 505). Lines may
 * end in CRLF or a bare LF. The reader never allocates.
 */
#ifndef MT_HTTP_H
#define MT_HTTP_H

#include <stddef.h>

#define MT_HTTP_MAX_HEAD   8192   /* request line + fields + empty line */
#define MT_HTTP_MAX_TARGET 2048   /* request-target bytes */
#define MT_HTTP_MAX_FIELDS 48

typedef struct mt_http_field {
    const char *name;    /* NUL-terminated, inside mt_http_req.buf */
    const char *value;   /* surrounding white space removed */
} mt_http_field;

typedef struct mt_http_req {
    char          buf[MT_HTTP_MAX_HEAD + 1]; /* the head, split in place */
    const char   *method;  /* "GET", ... (a token) */
    const char   *path;    /* the request target up to its first '?' */
    const char   *query;   /* after '?', or "" */
    int           minor;   /* HTTP/1.minor: 0 or 1 */
    mt_http_field field[MT_HTTP_MAX_FIELDS];
    int           nfield;
} mt_http_req;

/* Reads the head at data[0..len). Returns the head's length in bytes
 * (the empty line included: what follows is not part of it) with req
 * filled; 0 when the head is not complete yet and may still fit (read
 * more); or -1 with *status (400, 414, 431, 501 or 505) and err saying
 * what is wrong. */
long mt_http_parse(const char *data, size_t len, mt_http_req *req,
                   int *status, char *err, size_t errlen);

/* The first field named name (case-insensitive), or NULL. */
const char *mt_http_field_get(const mt_http_req *req, const char *name);

/* The reason phrase of a status this module or its callers answer with
 * ("Not Found"), or "Error". */
const char *mt_http_reason(int status);

#endif
