/* mapfile.h: a regular file mapped read-only whole (a checkpoint's
 * weights: mimi_model.c, kyutai_lm.c, load.c), the one place that opens,
 * checks and maps it. */
#ifndef MT_MAPFILE_H
#define MT_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct mt_mapfile {
    const uint8_t *data;   /* [len] the file's bytes; a readable empty
                              buffer (never NULL) when len is 0 */
    size_t         len;
    void          *map;    /* the mapping, NULL for an empty file */
} mt_mapfile;

/* Maps the regular file at path. Opened without blocking, so a FIFO or a
 * device in its place is refused ("not a regular file") instead of
 * holding the caller. 0, or -1 with the reason in err (nothing to close). */
int mt_mapfile_open(const char *path, mt_mapfile *f, char *err, size_t errlen);

/* Unmaps f (one that mt_mapfile_open filled; again after that: nothing). */
void mt_mapfile_close(mt_mapfile *f);

#endif
