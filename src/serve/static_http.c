/* static_http.c: files of one directory served read-only over HTTP
 * (static_http.h). */
#define _GNU_SOURCE
#include "serve/static_http.h"
#include "util/errmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct mt_static {
    int dirfd;     /* DIR, O_PATH: every file is opened beneath it */
};

int mt_static_open(const char *dir, mt_static **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        mt_set_err(err, errlen, "--static %s: %s", dir, strerror(errno));
        return -1;
    }
    mt_static *s = malloc(sizeof *s);
    if (!s) {
        close(fd);
        mt_set_err(err, errlen, "--static: out of memory");
        return -1;
    }
    s->dirfd = fd;
    *out = s;
    return 0;
}

void mt_static_free(mt_static *s)
{
    if (!s)
        return;
    close(s->dirfd);
    free(s);
}

const char *mt_static_type(const char *name)
{
    static const struct { const char *ext, *type; } types[] = {
        { "html", "text/html; charset=utf-8" }, { "htm", "text/html; charset=utf-8" },
        { "js", "text/javascript; charset=utf-8" }, { "mjs", "text/javascript; charset=utf-8" },
        { "css", "text/css; charset=utf-8" }, { "json", "application/json" },
        { "map", "application/json" }, { "webmanifest", "application/manifest+json" },
        { "wasm", "application/wasm" }, { "svg", "image/svg+xml" }, { "png", "image/png" },
        { "jpg", "image/jpeg" }, { "jpeg", "image/jpeg" }, { "gif", "image/gif" },
        { "webp", "image/webp" }, { "ico", "image/x-icon" }, { "txt", "text/plain; charset=utf-8" },
        { "woff", "font/woff" }, { "woff2", "font/woff2" }, { "ttf", "font/ttf" },
        { "wav", "audio/wav" }, { "ogg", "audio/ogg" }, { "opus", "audio/ogg" },
    };
    const char *slash = strrchr(name, '/');
    const char *dot = strrchr(slash ? slash + 1 : name, '.');
    if (dot)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (!strcasecmp(dot + 1, types[i].ext))
                return types[i].type;
    return "application/octet-stream";
}

/* The path, percent-decoded, into rel (relative to DIR, "index.html"
 * appended to "/" and to a path ending in '/'): 0, or the status to
 * refuse it with (why said). */
static int safe_path(const char *path, char *rel, size_t cap, char *why, size_t whylen)
{
    if (path[0] != '/') {
        snprintf(why, whylen, "the path does not start with /");
        return 400;
    }
    size_t o = 0;
    for (const char *p = path + 1; *p; p++) {
        int ch = (unsigned char)*p;
        if (ch == '%') {
            char hex[3] = { p[1], p[1] ? p[2] : 0, 0 };
            char *end;
            long x = strtol(hex, &end, 16);
            if (!hex[0] || !hex[1] || *end) {
                snprintf(why, whylen, "a bad percent escape");
                return 400;
            }
            ch = (int)x;
            p += 2;
            if (ch == '/' || ch == '\\' || ch == 0) {
                snprintf(why, whylen, "an encoded slash, backslash or NUL");
                return 403;
            }
        }
        if (ch < 0x20 || ch == 0x7f || ch == '\\') {
            snprintf(why, whylen, "a control byte or backslash in the path");
            return 403;
        }
        if (o + 1 >= cap) {
            snprintf(why, whylen, "a path over %d bytes", MT_STATIC_MAX_PATH);
            return 414;
        }
        rel[o++] = (char)ch;
    }
    rel[o] = '\0';
    if (o == 0 || rel[o - 1] == '/') {
        if (o + sizeof "index.html" > cap) {
            snprintf(why, whylen, "a path over %d bytes", MT_STATIC_MAX_PATH);
            return 414;
        }
        memcpy(rel + o, "index.html", sizeof "index.html");
    }
    /* every segment a plain name: no "", ".", "..", nor a hidden one */
    for (const char *seg = rel; *seg;) {
        const char *e = strchr(seg, '/');
        size_t n = e ? (size_t)(e - seg) : strlen(seg);
        if (n == 0 || seg[0] == '.') {
            snprintf(why, whylen, "an empty, dot or dot-dot segment");
            return 403;
        }
        seg += n + (e ? 1 : 0);
    }
    return 0;
}

/* headers (+ body of size n from fd when body) into a new buffer. */
static int respond(int status, const char *type, const char *extra, const char *text, int fd,
                   size_t n, int body, uint8_t **resp, size_t *len)
{
    char head[512];
    size_t blen = fd >= 0 ? n : strlen(text);
    int h = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: "
                     "%zu\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\n"
                     "Connection: close\r\n%s\r\n", status,
                     status == 200 ? "OK" : status == 403 ? "Forbidden" : status == 404
                     ? "Not Found" : status == 405 ? "Method Not Allowed" : status == 414
                     ? "URI Too Long" : status == 400 ? "Bad Request" : "Internal Server Error",
                     type, blen, extra ? extra : "");
    if (h < 0 || (size_t)h >= sizeof head)
        return -1;
    size_t total = (size_t)h + (body ? blen : 0);
    uint8_t *b = malloc(total ? total : 1);
    if (!b)
        return -1;
    memcpy(b, head, (size_t)h);
    if (body && fd >= 0) {
        size_t got = 0;
        while (got < n) {
            ssize_t r = pread(fd, b + h + got, n - got, (off_t)got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {      /* shrank or failed under us: nothing half-sent */
                free(b);
                return -1;
            }
            got += (size_t)r;
        }
    } else if (body) {
        memcpy(b + h, text, blen);
    }
    *resp = b;
    *len = total;
    return 0;
}

static int open_beneath(int dirfd, const char *rel)
{
    struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
    return (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
}

int mt_static_answer(const mt_static *s, const char *method, const char *path,
                     uint8_t **resp, size_t *len, int *status, char *why, size_t whylen)
{
    char rel[MT_STATIC_MAX_PATH + 1];
    int head = !strcmp(method, "HEAD"), st;
    why[0] = '\0';
    if (!head && strcmp(method, "GET")) {
        snprintf(why, whylen, "method %.20s", method);
        *status = 405;
        return respond(405, "text/plain; charset=utf-8", "Allow: GET, HEAD\r\n",
                       "GET or HEAD only\n", -1, 0, 1, resp, len);
    }
    if ((st = safe_path(path, rel, sizeof rel, why, whylen)) != 0) {
        *status = st;
        return respond(st, "text/plain; charset=utf-8", NULL, "refused\n", -1, 0, !head, resp,
                       len);
    }
    int fd = open_beneath(s->dirfd, rel);
    struct stat sb;
    memset(&sb, 0, sizeof sb);   /* a failed fstat: not a regular file */
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
        (uint64_t)sb.st_size > MT_STATIC_MAX_FILE) {
        int e = errno;
        snprintf(why, whylen, "%s", fd < 0 && e == EXDEV ? "a path leading out of the directory"
                 : fd < 0 ? strerror(e) : !S_ISREG(sb.st_mode) ? "not a regular file"
                 : "a file over the size served");
        st = fd < 0 && (e == EXDEV || e == ELOOP) ? 403 : 404;
        if (fd >= 0)
            close(fd);
        *status = st;
        return respond(st, "text/plain; charset=utf-8", NULL,
                       st == 403 ? "refused\n" : "not found\n", -1, 0, !head, resp, len);
    }
    *status = 200;
    int rc = respond(200, mt_static_type(rel), NULL, NULL, fd, (size_t)sb.st_size, !head,
                     resp, len);
    close(fd);
    return rc;
}
