/* fuzz_static.c: libFuzzer harness for --static's request paths
 * (src/serve/static_http.c). A directory made at start holds a page, a
 * subdirectory and symbolic links out of it to a secret file beside it;
 * each input is a method byte (GET, HEAD or another) and a path. The
 * answer must be whole (its Content-Length the bytes that follow, none
 * after HEAD), its status one of 200 400 403 404 405 414, and the secret
 * never in it. */
#define _GNU_SOURCE
#include "serve/static_http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET "SECRET-OUTSIDE-THE-DIRECTORY"

static mt_static *st;
static char top_dir[64];

/* The directory made at start, removed at exit (make test replays often). */
static void cleanup(void)
{
    static const char *const names[] = { "www/sub/abs.txt", "www/sub/a.js", "www/out.txt",
                                         "www/index.html", "secret.txt", "www/sub", "www" };
    char p[256];
    mt_static_free(st);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", top_dir, names[i]);
        if (unlink(p) != 0 && rmdir(p) != 0) {
            /* already gone: nothing to do */
        }
    }
    if (rmdir(top_dir) != 0) {
        /* left behind: a stray file in it */
    }
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char tmpl[] = "/tmp/fuzz-static-XXXXXX", p[256];
    char *top = mkdtemp(tmpl);
    if (!top)
        abort();
    snprintf(top_dir, sizeof top_dir, "%s", top);
    atexit(cleanup);
    snprintf(p, sizeof p, "%s/www", top);
    if (mkdir(p, 0755) != 0)
        abort();
    snprintf(p, sizeof p, "%s/www/sub", top);
    if (mkdir(p, 0755) != 0)
        abort();
    snprintf(p, sizeof p, "%s/secret.txt", top);
    put(p, SECRET "\n");
    snprintf(p, sizeof p, "%s/www/index.html", top);
    put(p, "<html>page</html>\n");
    snprintf(p, sizeof p, "%s/www/sub/a.js", top);
    put(p, "var a = 1;\n");
    snprintf(p, sizeof p, "%s/www/out.txt", top);
    if (symlink("../secret.txt", p) != 0)
        abort();
    snprintf(p, sizeof p, "%s/www/sub/abs.txt", top);
    char target[256];
    snprintf(target, sizeof target, "%s/secret.txt", top);
    if (symlink(target, p) != 0)
        abort();
    snprintf(p, sizeof p, "%s/www", top);
    char err[200];
    if (mt_static_open(p, &st, err, sizeof err) != 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char *const methods[] = { "GET", "HEAD", "POST", "OPTIONS" };
    const char *m = methods[data[0] % 4];
    char path[4096];
    size_t n = size - 1 < sizeof path - 1 ? size - 1 : sizeof path - 1;
    memcpy(path, data + 1, n);
    path[n] = '\0';
    uint8_t *resp = NULL;
    size_t len = 0;
    int status = 0;
    char why[120];
    if (mt_static_answer(st, m, path, &resp, &len, &status, why, sizeof why) != 0)
        return 0;   /* out of memory: nothing to send */
    if (status != 200 && status != 400 && status != 403 && status != 404 && status != 405 &&
        status != 414)
        abort();
    if (memmem(resp, len, SECRET, strlen(SECRET)))
        abort();   /* a file outside the directory came back */
    const uint8_t *end = memmem(resp, len, "\r\n\r\n", 4);
    const char *cl = memmem(resp, len, "Content-Length: ", 16);
    if (!end || !cl)
        abort();
    size_t body = len - (size_t)(end + 4 - resp);
    unsigned long want = strtoul(cl + 16, NULL, 10);
    if (!strcmp(m, "HEAD") ? body != 0 : body != want)
        abort();   /* an answer cut short, or a body after HEAD */
    free(resp);
    return 0;
}
