/* cpu_q8_layout.c: where the bytes and scales of a --weights q8 matrix
 * sit (cpu_q8.h's layout: rows in groups of 8 where the integer kernel
 * serves, else one after the other), and the walk that hands the kernels
 * (cpu_q8.c, cpu_q8_vnni.c) runs of rows with their strides.
 */
#include "decode/cpu_q8.h"

#include <stdlib.h>
#include <string.h>

/* The layout (cpu_q8.h): rows in groups of MT_Q8_GROUP where K is a
 * multiple of 64 (a block pair) and the layout is on, each group's block
 * pairs one after the other, a pair holding its 8 rows' 64 bytes; the
 * rows past the last whole group, and every row where K is not, row by
 * row. Offset of row n's block b (its scale at the offset / 32). */
static int tiled_on = -1;     /* -1: the kernels' (below) */
static int kernels_grouped;   /* the integer kernel serves (cpu_q8.c says) and
                                 MT_Q8_ROWMAJOR does not ask for rows */

void mt_q8_layout_kernels(int grouped)
{
    /* MT_Q8_ROWMAJOR read here, once (mt_q8_init): every product asks
     * mt_q8_tiled, and a getenv a call was 0.3% of kyutai-small's step */
    const char *v = getenv("MT_Q8_ROWMAJOR");
    kernels_grouped = grouped && !(v && *v && strcmp(v, "0") != 0);
}

int mt_q8_tiled(int K)
{
    int on = tiled_on < 0 ? kernels_grouped : tiled_on;
    return on && K % (2 * MT_Q8_BLOCK) == 0;
}

void mt_q8_layout(int tiled)
{
    tiled_on = tiled < 0 ? -1 : tiled != 0;
}

size_t mt_q8_offset(size_t N, int K, size_t n, int b)
{
    const size_t n8 = N / MT_Q8_GROUP * MT_Q8_GROUP;
    if (!mt_q8_tiled(K) || n >= n8)
        return n * (size_t)K + (size_t)b * MT_Q8_BLOCK;
    return n / MT_Q8_GROUP * MT_Q8_GROUP * (size_t)K + (size_t)(b / 2) * MT_Q8_GROUP * 64 +
           n % MT_Q8_GROUP * 64 + (size_t)(b % 2) * MT_Q8_BLOCK;
}

void mt_q8_walk(int lo, int hi, int N, int K, const int8_t *q, const float *s,
                mt_q8_run_fn run, void *ctx)
{
    const size_t nb = (size_t)(K / MT_Q8_BLOCK);
    int r = lo;
    if (mt_q8_tiled(K)) {
        const int n8 = N / MT_Q8_GROUP * MT_Q8_GROUP;
        while (r < hi && r < n8) {
            const size_t g = (size_t)(r / MT_Q8_GROUP * MT_Q8_GROUP) * K;
            const int j = r % MT_Q8_GROUP;
            if (j == 0 && r + MT_Q8_GROUP <= hi) {
                run(ctx, q + g, s + g / MT_Q8_BLOCK, MT_Q8_GROUP, 64, MT_Q8_GROUP * 64, r - lo);
                r += MT_Q8_GROUP;
            } else {   /* a row of a group the call takes in part */
                const size_t o = g + (size_t)j * 64;
                run(ctx, q + o, s + o / MT_Q8_BLOCK, 1, 64, MT_Q8_GROUP * 64, r - lo);
                r++;
            }
        }
    }
    if (r < hi)
        run(ctx, q + (size_t)r * K, s + (size_t)r * nb, hi - r, K, 64, r - lo);
}
