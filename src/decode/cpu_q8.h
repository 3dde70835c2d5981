/* cpu_q8.h: 8-bit weights for the CPU backend (--weights q8): each weight
 * row cut in blocks of MT_Q8_BLOCK values along K, a block stored as
 * MT_Q8_BLOCK signed bytes and one fp32 scale (the idea of ggml's q8_0,
 * written here; the bytes and the scales are two separate arrays so that
 * the kernels load whole vectors of bytes). A weight reads back as
 * q * scale, scale = max|w| of its block / 127, q = round(w / scale), so
 * its error is at most scale / 2 = max|w| / 254: about 0.4% of the
 * block's largest weight. 1.125 bytes a weight where f16 takes 2.
 *
 * Two products. On a CPU with AVX-512 VNNI, the integer one
 * (cpu_q8_vnni.c, for calls of any row count): the activations
 * quantised in blocks of 32 as well
 * (scale max|x| / 127), integer dot products a block, one fp32 multiply by
 * both scales a block; it adds the activations' rounding to the error
 * (cpu_q8_vnni.c states the bound). Elsewhere, or with MT_Q8_FLOAT=1, the
 * float ones: the bytes converted to fp32 in registers, accumulated in
 * fp32 on fp32 activations (the weights' rounding alone): an AVX-512
 * kernel, an AVX2/FMA one and a portable scalar one, picked once from the
 * CPU like cpu_f16.h's.
 */
#ifndef MT_CPU_Q8_H
#define MT_CPU_Q8_H

#include <stddef.h>
#include <stdint.h>

enum { MT_Q8_BLOCK = 32, MT_Q8_GROUP = 8, MT_Q8_LANE = 16 };
/* The layouts (mt_q8_tiled, mt_q8_layout). */
enum { MT_Q8_ROWS = 0, MT_Q8_GROUPS = 1, MT_Q8_LANES = 2 };

/* The layout of a packed matrix [N, K]. Where K is a multiple of 64 (a
 * block pair), rows in groups of MT_Q8_GROUP: a group's 8 * K bytes hold
 * its block pairs one after the other, each pair its 8 rows' 64 bytes in
 * row order, so a kernel that takes a group's 8 rows together reads one
 * stream (the hardware fetches it ahead; rows one after the other were 8
 * streams of K bytes, too short for it). The rows past the last whole
 * group, and every row where K is not a multiple of 64, one after the
 * other. A block's scale sits at its bytes' offset / MT_Q8_BLOCK, and
 * group g starts at row 8g's row-major offset, so row n of a matrix still
 * starts at q + n*K where n is a multiple of 8. The layout is grouped
 * where the integer kernel serves (mt_q8_init() 3) and row by row for
 * the float kernels (their 4-row tiles read half a group each: no faster
 * on groups, bench/RESULTS.md); every kernel reads both. MT_Q8_ROWMAJOR=1
 * (read once) keeps every matrix row by row, the layout before
 * (benchmarks compare the two).
 *
 * MT_Q8_LANES (any K): rows in lane groups of MT_Q8_LANE = 16, a group's
 * 16 * K bytes K / 4 vectors of 64 bytes one after the other, vector v
 * the 16 rows' weights 4v..4v+3 side by side (row r at bytes 4r..4r+3),
 * stored w ^ 0x80 (w + 128, unsigned); block b's 16 scales side by side
 * at the group's row-major offset / MT_Q8_BLOCK + 16 b. One VPDPBUSD of
 * a vector by 4 activation bytes broadcast gives 16 rows' partial sums in
 * 16 lanes: no shuffles to fold lanes and no correction a weight vector
 * (cpu_q8_vnni.c). Only the integer kernel reads it fast (the float ones
 * read it through a portable loop). The integer kernel reads it twice as
 * fast as groups at 8 to 32 rows and level at 1 and 2, but the codec's
 * codebooks (K 32) twice as slow (bench/RESULTS.md, 2026-12-07): so each
 * user asks for the layout its products measured fastest on
 * (mt_q8_layout_for's `want`: the LM and the codec's convolutions and
 * transformers lane groups, the codebooks groups), which it gets where the
 * integer kernel serves every call. MT_Q8_LANES=1 (read once) puts every
 * matrix in lane groups there, MT_Q8_LANES=0 none. The rows past the
 * last whole lane group row by row.
 *
 * Every function below takes the matrix's layout L, the one it was
 * packed in (mt_q8_layout_for's answer for its K, kept beside it; groups
 * where K is not a multiple of 64 read as rows). mt_q8_offset gives a
 * block's scale (offset / MT_Q8_BLOCK) in every layout, its bytes sit at
 * q + offset in the first two; mt_q8_byte and mt_q8_weight find a weight
 * in any. */
/* The layout a matrix of K columns gets whose user asks for `want`
 * (MT_Q8_GROUPS or MT_Q8_LANES): want where the kernels read it fast and
 * K allows, else groups, else rows; MT_Q8_LANES, MT_Q8_ROWMAJOR and
 * mt_q8_layout may override it (above). Picks the kernels first
 * (mt_q8_init). */
int mt_q8_layout_for(int K, int want);
/* The same once the kernels are picked (cpu_q8.c tells this file which
 * serve: mt_q8_layout_kernels). */
int mt_q8_tiled(int K, int want);
/* Tests and benchmarks: the layout mt_q8_layout_for gives every matrix
 * from now on (MT_Q8_ROWS, MT_Q8_GROUPS, MT_Q8_LANES; -1 the kernels' as
 * above). Not while a matrix is being packed. */
void mt_q8_layout(int tiled);
/* cpu_q8.c, when it picks the kernels: whether the integer kernel serves
 * (1) and every call (2): the layouts' defaults, above. */
void mt_q8_layout_kernels(int grouped);
/* The offset of row n's block b in a packed [N, K] matrix: its scale at
 * scale + it / MT_Q8_BLOCK; its bytes at q + it except in lane groups. */
size_t mt_q8_offset(int L, size_t N, int K, size_t n, int b);
/* Where weight k of row n sits (q + it), in every layout; its value
 * (-127..127; lane groups store it + 128). Whether row n is in a lane
 * group. */
size_t mt_q8_byte(int L, size_t N, int K, size_t n, int k);
int mt_q8_weight(int L, const int8_t *q, size_t N, int K, size_t n, int k);
int mt_q8_in_lanes(int L, size_t N, int K, size_t n);

/* Picks the kernels (idempotent, thread-safe); returns 3 (AVX-512 VNNI,
 * the integer product), 2 (AVX-512), 1 (AVX2/FMA) or 0 (portable).
 * MT_Q8_PORTABLE=1 forces the portable ones; MT_Q8_FLOAT=1 the best float
 * ones (the product before the integer one: benchmarks put them side by
 * side). */
int mt_q8_init(void);
/* Tests: the best kernels up to max_level that the CPU runs; returns the
 * level set. Not while a kernel may be running. */
int mt_q8_select(int max_level);

/* The integer product serves calls of at least rows rows (default 1:
 * every call; on the grouped layout it streams faster than the float
 * kernels at every row count here, cpu_q8.c has the figures; the
 * environment's MT_Q8_VNNI_ROWS=n, 1..64, for benchmarks). Tests: not
 * while a kernel may be running. */
void mt_q8_vnni_rows(int rows);

/* Whether --weights q8's copy serves calls of every row count by default
 * (1) or, like the f16 copy, small ones only (0): 1 where the integer
 * product serves (mt_q8_init() 3). There it leads OpenBLAS's fp32 sgemm
 * at 16 to 64 rows too (cpu_q8.c has the figures), and one product at
 * every batch keeps a session's bits whatever the batch. */
int mt_q8_every_row(void);
enum { MT_Q8_ALL_ROWS = 1 << 30 };   /* "every row count", as a row limit */

/* Quantises the matrix src [N, K] (K a multiple of MT_Q8_BLOCK) into
 * q [N * K] and scale [N * K / MT_Q8_BLOCK], in layout L. Returns -1, writing nothing
 * more, where a value is not finite (inf or nan: no scale holds it). */
int mt_q8_pack(int L, int8_t *q, float *scale, const float *src, size_t N, int K);

/* One packed matrix as its users keep it: bytes q, scales s, rows n and
 * layout (q NULL where it was not packed). */
typedef struct mt_q8_mat {
    const int8_t *q;
    const float  *s;
    int           n;
    int           layout;
} mt_q8_mat;
/* Packs src [N, K] at *q and *s in the layout `want` asks for
 * (mt_q8_layout_for), moves both past it and describes it in d; returns
 * -1, d->q NULL and nothing moved, where K is not a multiple of
 * MT_Q8_BLOCK or a value is not finite. */
int mt_q8_take(mt_q8_mat *d, int want, const float *src, size_t N, int K, int8_t **q, float **s);

/* Y[m, 0:hi-lo] = beta * Y[m, 0:hi-lo] + X[m, 0:K] . Wdq[lo:hi, 0:K]^T
 * for m < M, Wdq the weights read back (q * scale) of the matrix [N, K]
 * that mt_q8_pack made at q and scale in layout L; X row m at X + m*ldx, Y row m at
 * Y + m*ldy; beta 0 or 1. K a multiple of MT_Q8_BLOCK. Meant for small
 * M: the weights are read once. */
void mt_q8_gemm_rows(int L, int M, int lo, int hi, int N, int K, const float *X, int ldx,
                     const int8_t *q, const float *scale, float beta, float *Y, int ldy);
/* The same over the whole matrix (lo 0, hi N). */
void mt_q8_gemm(int L, int M, int N, int K, const float *X, int ldx, const int8_t *q,
                const float *scale, float beta, float *Y, int ldy);

/* The kernels' walk over rows lo..hi of a packed [N, K] matrix: run(ctx,
 * bytes, scales, rows, rs, ps, col) for each run of rows, whole groups
 * (rows 8, rs 64, ps 512), rows of a group the call takes in part (rows
 * 1, ps 512) and rows one after the other (rs K, ps 64); a run's row r
 * block b at bytes + r*rs + (b/2)*ps + (b%2)*MT_Q8_BLOCK (its scale at
 * that offset / MT_Q8_BLOCK from scales), its first row the call's
 * column col. Lane groups (rs 0): bytes and scales the group's, the run
 * rows rows from lane ps (0..15) on, into the groups after (16 * K bytes
 * on) where rows goes past the group. */
typedef void (*mt_q8_run_fn)(void *ctx, const int8_t *q, const float *s, int rows, int rs,
                             int ps, int col);
void mt_q8_walk(int L, int lo, int hi, int N, int K, const int8_t *q, const float *s,
                mt_q8_run_fn run, void *ctx);

#endif
