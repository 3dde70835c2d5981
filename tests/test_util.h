/* test_util.h: small pieces the C unit tests and test helpers share,
 * header-only as tap.h is: a private temporary directory under $TMPDIR, whole
 * files read and written, a number out of a fixture's flat JSON, whether a
 * GPU is here, and the one choice of adapter buffers for mt_decoder_step. */
#ifndef MT_TEST_UTIL_H
#define MT_TEST_UTIL_H

#include "decode/decoder.h"
#include "gpu/cuda_module.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A simulated device's profile for synthetic:kyutai-small (the tests'
 * temporal shape-only beside a host depformer, mt-serve --device sim), in
 * a new file made from path (mkstemp's template, XXXXXX last). 1 when it
 * was written; else 0, and nothing is left at path. */
static inline int test_sim_profile_small(char *path)
{
    static const char prof[] = "name = t-kyutai-small\nmodel = synthetic:kyutai-small\n"
                               "memory_bytes = 80e9\nreserve_bytes = 1e9\nbandwidth = 2e12\n"
                               "matrix_rate = 4e14\noverhead_us = 100\nweight_bytes = 2\n"
                               "kv_bytes = 2\n";
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    int wrote = write(fd, prof, sizeof prof - 1) == (ssize_t)(sizeof prof - 1);
    if (close(fd) != 0 || !wrote) {
        unlink(path);
        return 0;
    }
    return 1;
}

/* Makes the directory $TMPDIR/NAME-XXXXXX (/tmp without TMPDIR) into dir.
 * 0; -1 after a TAP "Bail out!" line, as a test cannot go on without it. */
static inline int test_tmpdir_make(char *dir, size_t cap, const char *name)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int n = snprintf(dir, cap, "%s/%s-XXXXXX", base, name);
    if (n < 0 || (size_t)n >= cap || !mkdtemp(dir)) {
        printf("Bail out! mkdtemp %s/%s\n", base, name);
        return -1;
    }
    return 0;
}

/* Removes what test_tmpdir_make made, and all in it; a failure is only a
 * diagnostic (the checks have run). */
static inline void test_tmpdir_remove(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", dir);
}

/* The whole file at path (malloc'd), with a NUL after it, its length in
 * *n; NULL (*n 0) when it cannot be read, for the test to report. */
static inline char *test_file_load(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    long sz = -1;
    char *b = NULL;
    *n = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (sz = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (b = malloc((size_t)sz + 1)) != NULL)
        *n = fread(b, 1, (size_t)sz, f);
    if (f)
        fclose(f);
    if (b && *n != (size_t)sz) {
        free(b);
        b = NULL;
    }
    if (!b) {
        *n = 0;
        return NULL;
    }
    b[*n] = 0;
    return b;
}

/* test_file_load for a test that cannot go on without its own file:
 * failing, a "Bail out!" line and exit. */
static inline char *test_file_read(const char *path, size_t *n)
{
    char *b = test_file_load(path, n);
    if (!b) {
        printf("Bail out! cannot read %s\n", path);
        exit(1);
    }
    return b;
}

/* The number after "key": in txt (key with its quotes); NAN without it. */
static inline double test_json_num(const char *txt, const char *key)
{
    const char *p = strstr(txt, key);
    if (!p)
        return NAN;
    p = strchr(p, ':');
    return p ? strtod(p + 1, NULL) : NAN;
}

/* Writes the n bytes at p to path; failing, a "Bail out!" line and exit. */
static inline void test_file_write(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        printf("Bail out! cannot write %s\n", path);
        exit(1);
    }
}

/* 1 when a usable CUDA device is here (why [cap]: which), else 0 (why:
 * the reason, also in a build without nvcc). */
static inline int test_cuda_present(char *why, size_t cap)
{
#ifdef MT_HAVE_CUDA
    return mt_cuda_device_present(why, cap) && mt_cuda_available(why, cap);
#else
    snprintf(why, cap, "built without CUDA (no nvcc at build time)");
    return 0;
#endif
}

/* MT_REQUIRE_GPU=1 (make test-gpu): a missing GPU fails, not skips. */
static inline int test_gpu_required(void)
{
    const char *v = getenv("MT_REQUIRE_GPU");
    return v && atoi(v);
}

/* The step's inputs and outputs: the audio adapter's PCM buffers when
 * audio, the token adapter's otherwise (mt_step_io uses exactly one). */
static inline mt_step_io test_step_io(int audio, const int16_t *pcm_in, int16_t *pcm_out,
                                      const int32_t *tokens_in, float *logits)
{
    mt_step_io io = { 0 };
    if (audio) {
        io.pcm_in = pcm_in;
        io.pcm_out = pcm_out;
    } else {
        io.tokens_in = tokens_in;
        io.logits = logits;
    }
    return io;
}

#endif
