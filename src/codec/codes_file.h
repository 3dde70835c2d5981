/* codes_file.h: the text file of Mimi codes that `mt-probe codec --encode`
 * writes and `--decode` reads (codes_file.c). */
#ifndef MT_CODEC_CODES_FILE_H
#define MT_CODEC_CODES_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MT_CODES_MAX_BOOKS 64          /* codes on one line at most */
#define MT_CODES_MAX_FRAMES (1L << 26) /* frames in one file at most */

/* A codes file in memory: codes [frames, n] row-major, each in 0..bins-1. */
typedef struct mt_codes {
    int32_t *codes;       /* [frames, n] */
    int      n;           /* codebooks: the header's codebooks=, else the
                             first line's count */
    long     frames;
    long     samples;     /* the header's samples=, else -1 */
} mt_codes;

/* Reads a codes file from f (name: for messages, "NAME:LINE: ..."): any
 * number of '#' lines (codebooks=N, samples=M read from them), then one
 * line of n integer codes in 0..bins-1 per frame; blank lines skipped.
 * 0, or -1 with err (nothing to free). On success the caller frees
 * c->codes. */
int mt_codes_read(FILE *f, const char *name, int bins, mt_codes *c, char *err,
                  size_t errlen);

/* Opens path ("-": stdin) and reads it as mt_codes_read does. */
int mt_codes_read_path(const char *path, int bins, mt_codes *c, char *err,
                       size_t errlen);

/* Writes codes [frames, n] to path ("-": stdout) with the header line
 * "# mimi codes codebooks=N frames=F samples=S sample_rate=R". 0, or -1
 * with err. */
int mt_codes_write_path(const char *path, const int32_t *codes, int n, long frames,
                        long samples, int sample_rate, char *err, size_t errlen);

#endif
