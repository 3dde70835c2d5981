/* static_http.h: mt-serve --static DIR: a directory of files (Kyutai's
 * built web client, its dist/) served read-only on the --ws port, beside
 * the chat at /api/chat.
 *
 * GET and HEAD only (anything else 405). The path is percent-decoded
 * once; an encoded slash or backslash (%2F, %5C), a NUL, a control byte,
 * a segment "." or "..", an empty segment or a name starting with a dot
 * is refused (403), and the file is opened beneath DIR by openat2's
 * RESOLVE_BENEATH, so no symbolic link leads out of it. "/" and a path
 * ending in "/" mean its index.html; a directory is never listed (404);
 * only regular files up to MT_STATIC_MAX_FILE bytes are served. Content
 * types by extension (text/html, text/javascript, application/wasm, ...;
 * else application/octet-stream), with X-Content-Type-Options: nosniff.
 * Every answer ends the connection (Connection: close). */
#ifndef MT_STATIC_HTTP_H
#define MT_STATIC_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define MT_STATIC_MAX_FILE (32u << 20)   /* bytes of one served file */
#define MT_STATIC_MAX_PATH 1024          /* bytes of a decoded path */

typedef struct mt_static mt_static;

/* Opens DIR (a directory) for serving: 0, or -1 with err. */
int  mt_static_open(const char *dir, mt_static **out, char *err, size_t errlen);
void mt_static_free(mt_static *s);

/* The whole answer to method and path (the request target before '?'):
 * an HTTP/1.1 response, headers and (GET) body, in a malloc'd buffer
 * *resp of *len bytes; *status its status, why a short reason for the
 * log when it is not 200. 0, or -1 out of memory (nothing to send). */
int  mt_static_answer(const mt_static *s, const char *method, const char *path,
                      uint8_t **resp, size_t *len, int *status, char *why, size_t whylen);

/* The content type of a file name, by its extension. */
const char *mt_static_type(const char *name);

#endif
