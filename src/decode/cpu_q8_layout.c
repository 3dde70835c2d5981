/* cpu_q8_layout.c: where the bytes and scales of a --weights q8 matrix
 * sit (cpu_q8.h's layouts: rows one after the other, groups of 8 rows
 * and lane groups of 16 rows), and the walk that hands the kernels
 * (cpu_q8.c, cpu_q8_vnni.c) runs of rows with their strides.
 */
#include "decode/cpu_q8.h"

#include <stdlib.h>
#include <string.h>

/* The layout (cpu_q8.h): MT_Q8_ROWS, MT_Q8_GROUPS (where K is a multiple
 * of 64, each group's block pairs one after the other, a pair holding its
 * 8 rows' 64 bytes) or MT_Q8_LANES (each lane group's K / 4 vectors of
 * 16 rows x 4 bytes one after the other, the bytes stored w ^ 0x80); the
 * rows past the last whole group (of 8 or 16), and every row a layout
 * does not take, row by row. Each matrix is packed and multiplied in the
 * layout mt_q8_layout_for gave it. */
static int tiled_on = -1;     /* -1: the kernels' (below) */
static int lanes_read;        /* the kernels read lane groups fast: the
                                 integer kernel serves every call */
static int grouped_read;      /* ... and groups: it serves (cpu_q8.c says) */
static int lanes_env;         /* MT_Q8_LANES: -1 unset, 0 none, 1 every matrix */

static int env_is(const char *name, const char *want)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    return want ? strcmp(v, want) == 0 : strcmp(v, "0") != 0;
}

void mt_q8_layout_kernels(int grouped)
{
    /* the environment read here, once (mt_q8_init) */
    grouped_read = grouped && !env_is("MT_Q8_ROWMAJOR", NULL);
    lanes_read = grouped_read && grouped == 2;
    lanes_env = env_is("MT_Q8_LANES", "0") ? 0 : env_is("MT_Q8_LANES", NULL) ? 1 : -1;
}

/* A layout as it applies to K: groups need block pairs. */
static int applies(int L, int K)
{
    return L == MT_Q8_GROUPS && K % (2 * MT_Q8_BLOCK) != 0 ? MT_Q8_ROWS : L;
}

int mt_q8_tiled(int K, int want)
{
    int on = tiled_on;
    if (on < 0) {
        if (lanes_read && lanes_env >= 0)
            want = lanes_env ? MT_Q8_LANES : MT_Q8_GROUPS;
        on = !grouped_read ? MT_Q8_ROWS
             : want == MT_Q8_LANES && lanes_read ? MT_Q8_LANES : MT_Q8_GROUPS;
    }
    return applies(on, K);
}

void mt_q8_layout(int tiled)
{
    tiled_on = tiled < 0 ? -1 : tiled > MT_Q8_LANES ? MT_Q8_LANES : tiled;
}

int mt_q8_in_lanes(int L, size_t N, int K, size_t n)
{
    return L == MT_Q8_LANES && n < N / MT_Q8_LANE * MT_Q8_LANE;
}

size_t mt_q8_offset(int L, size_t N, int K, size_t n, int b)
{
    const int t = applies(L, K);
    const size_t g = t == MT_Q8_LANES ? MT_Q8_LANE : MT_Q8_GROUP, ng = N / g * g;
    if (t == MT_Q8_ROWS || n >= ng)
        return n * (size_t)K + (size_t)b * MT_Q8_BLOCK;
    if (t == MT_Q8_LANES)   /* the scale's place; the bytes: mt_q8_byte */
        return n / g * g * (size_t)K + (size_t)b * g * MT_Q8_BLOCK + n % g * MT_Q8_BLOCK;
    return n / g * g * (size_t)K + (size_t)(b / 2) * g * 64 + n % g * 64 +
           (size_t)(b % 2) * MT_Q8_BLOCK;
}

size_t mt_q8_byte(int L, size_t N, int K, size_t n, int k)
{
    if (!mt_q8_in_lanes(L, N, K, n))
        return mt_q8_offset(L, N, K, n, k / MT_Q8_BLOCK) + (size_t)(k % MT_Q8_BLOCK);
    return n / MT_Q8_LANE * MT_Q8_LANE * (size_t)K + (size_t)(k / 4) * 64 + n % MT_Q8_LANE * 4 +
           (size_t)(k % 4);
}

int mt_q8_weight(int L, const int8_t *q, size_t N, int K, size_t n, int k)
{
    const int8_t v = q[mt_q8_byte(L, N, K, n, k)];
    return mt_q8_in_lanes(L, N, K, n) ? (int)(uint8_t)v - 128 : v;
}

/* Lane groups: a run from lane `lane` of the group at row r (its rows
 * on into the next groups, 16 * K bytes on), up to hi or the last whole
 * group; returns the row it stopped at. */
static int walk_lanes(int r, int lo, int hi, int N, int K, const int8_t *q, const float *s,
                      mt_q8_run_fn run, void *ctx)
{
    const int n16 = N / MT_Q8_LANE * MT_Q8_LANE, end = hi < n16 ? hi : n16;
    while (r < end) {
        const size_t g = (size_t)(r / MT_Q8_LANE * MT_Q8_LANE) * K;
        const int j = r % MT_Q8_LANE;
        /* a group the call enters in part by itself, then the rest */
        const int stop = j ? (r - j + MT_Q8_LANE < end ? r - j + MT_Q8_LANE : end) : end;
        run(ctx, q + g, s + g / MT_Q8_BLOCK, stop - r, 0, j, r - lo);
        r = stop;
    }
    return r;
}

void mt_q8_walk(int L, int lo, int hi, int N, int K, const int8_t *q, const float *s,
                mt_q8_run_fn run, void *ctx)
{
    const size_t nb = (size_t)(K / MT_Q8_BLOCK);
    const int t = applies(L, K);
    int r = lo;
    if (t == MT_Q8_LANES)
        r = walk_lanes(r, lo, hi, N, K, q, s, run, ctx);
    if (t == MT_Q8_GROUPS) {
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
