/* replay_main.c: a main() for running a libFuzzer harness without clang.
 * make test links it with one harness object (tests/fuzz/fuzz_NAME.c ->
 * build/tests/replay_fuzz_NAME) and it replays every file of
 * tests/fuzz/corpus/NAME/ through LLVMFuzzerTestOneInput, printing one TAP
 * line per file, so the seed corpus (and every crash input ever fixed)
 * stays a regression test on every build. Generic on purpose: any harness
 * works, the name comes from -DMT_FUZZ_NAME="..." or from argv[0].
 *
 * The corpus directory is $MT_ROOT/tests/fuzz/corpus/NAME (make test sets
 * MT_ROOT), else found by walking up from the executable (or the current
 * directory) to the first tests/fuzz/corpus/NAME. With file arguments it
 * replays just those (handy for a crash artifact). A missing or empty
 * corpus is a failure: a harness with nothing to replay tests nothing. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int n_tests, n_failed;

static void tap(int good, const char *fmt, const char *arg)
{
    n_tests++;
    if (!good)
        n_failed++;
    printf("%sok %d - ", good ? "" : "not ", n_tests);
    printf(fmt, arg);
    printf("\n");
    fflush(stdout);
}

/* Harness name: fuzz_frame from replay_fuzz_frame, corpus name frame. */
static void harness_name(const char *argv0, char *out, size_t n)
{
#ifdef MT_FUZZ_NAME
    (void)argv0;
    snprintf(out, n, "%s", MT_FUZZ_NAME);
#else
    const char *b = strrchr(argv0, '/');
    b = b ? b + 1 : argv0;
    if (strncmp(b, "replay_", 7) == 0)
        b += 7;
    snprintf(out, n, "%s", b);
#endif
    if (strncmp(out, "fuzz_", 5) == 0)
        memmove(out, out + 5, strlen(out + 5) + 1);
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Walks up from start looking for tests/fuzz/corpus/NAME. */
static int find_up(const char *start, const char *name, char *out, size_t n)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", start);
    for (int up = 0; up < 8; up++) {
        int w = snprintf(out, n, "%s/tests/fuzz/corpus/%s", dir, name);
        if (w > 0 && (size_t)w < n && is_dir(out))
            return 0;
        char *s = strrchr(dir, '/');
        if (!s || s == dir)
            break;
        *s = '\0';
    }
    return -1;
}

static int find_corpus(const char *name, char *out, size_t n)
{
    const char *root = getenv("MT_ROOT");
    if (root && *root) {
        snprintf(out, n, "%s/tests/fuzz/corpus/%s", root, name);
        return 0; /* set by make: trust it, and report it if it is wrong */
    }
#ifdef MT_SOURCE_ROOT
    snprintf(out, n, "%s/tests/fuzz/corpus/%s", MT_SOURCE_ROOT, name);
    if (is_dir(out))
        return 0;
#endif
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = '\0';
        char *s = strrchr(exe, '/');
        if (s)
            *s = '\0';
        if (find_up(exe, name, out, n) == 0)
            return 0;
    }
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) && find_up(cwd, name, out, n) == 0)
        return 0;
    snprintf(out, n, "tests/fuzz/corpus/%s", name);
    return -1;
}

static int read_file(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0)
            break;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        free(buf);
        return -1;
    }
    *data = buf;
    *size = len;
    return 0;
}

static void replay(const char *path, const char *label)
{
    uint8_t *data = NULL;
    size_t size = 0;
    if (read_file(path, &data, &size) != 0) {
        tap(0, "cannot read %s", label);
        return;
    }
    /* A crash or sanitizer report ends the process: prove then sees the
     * plan missing and fails the test. */
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    tap(1, "replayed %s", label);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    char name[128], dir[PATH_MAX];
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            replay(argv[i], argv[i]);
        printf("1..%d\n", n_tests);
        return n_failed ? 1 : 0;
    }
    harness_name(argc > 0 ? argv[0] : "replay_unknown", name, sizeof name);
    find_corpus(name, dir, sizeof dir);

    DIR *d = opendir(dir);
    if (!d) {
        printf("not ok 1 - corpus directory %s: %s\n1..1\n", dir, strerror(errno));
        return 1;
    }
    size_t n = 0, cap = 64;
    char **files = malloc(cap * sizeof *files);
    struct dirent *e;
    while (files && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[PATH_MAX + 256];
        int w = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (w < 0 || (size_t)w >= sizeof path || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            char **nf = realloc(files, 2 * cap * sizeof *files);
            if (!nf)
                break;
            files = nf;
            cap *= 2;
        }
        files[n] = strdup(e->d_name);
        if (files[n])
            n++;
    }
    closedir(d);
    if (!files || n == 0) {
        printf("not ok 1 - corpus directory %s is empty\n1..1\n", dir);
        return 1;
    }
    qsort(files, n, sizeof *files, cmp_str);
    printf("# %s: %zu files from %s\n", name, n, dir);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        replay(path, files[i]);
        free(files[i]);
    }
    free(files);
    printf("1..%d\n", n_tests);
    return n_failed ? 1 : 0;
}
