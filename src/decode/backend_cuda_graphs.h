/* backend_cuda_graphs.h: the CUDA backend's captured steps (CUDA Graphs,
 * MT_CUDA_GRAPHS=1), between backend_cuda.c, which plans and enqueues a
 * step's device work, and backend_cuda_graphs.c, which pads the rows to
 * their bucket and captures and replays that work. Internal to the CUDA
 * module (cuda_runtime.h). */
#ifndef MT_BACKEND_CUDA_GRAPHS_H
#define MT_BACKEND_CUDA_GRAPHS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include "../../kernels/mt_kernels.h"

/* What one call computes, and with the rows' metadata already in the
 * pinned buffers, everything its device work depends on: the key of a
 * captured graph (step_graph). */
enum { IN_X = 0, IN_TOK = 1, IN_PCM = 2 };
typedef struct fwd_plan {
    int    n;             /* rows computed: the real ones, then padding */
    int    ntab;          /* block-table entries copied in */
    int    nsplit, chunk; /* the attention's splits (plan_splits) */
    int    in;            /* IN_X, IN_TOK or IN_PCM */
    int    want_logits, want_pcm, want_hid;
} fwd_plan;

/* A captured step: its plan, the executable graph, when it was last
 * replayed (the least recent goes when the table is full). */
#define MT_CUDA_MAX_GRAPHS 32
typedef struct step_graph {
    fwd_plan        key;
    cudaGraphExec_t exec;
    uint64_t        used;
} step_graph;

/* A backend's captured steps, zeroed at creation. */
typedef struct mt_cuda_graphs {
    step_graph graphs[MT_CUDA_MAX_GRAPHS];
    int        ngraphs;
    uint64_t   clock;      /* ticks once a lookup: the graphs' `used` */
} mt_cuda_graphs;

/* Enqueues the device work of plan pl on the stream being captured (only
 * stream work on fixed buffers); ctx is the caller's. */
typedef int (*mt_cuda_enqueue_fn)(void *ctx, const fwd_plan *pl, char *err, size_t errlen);

/* Pads rows[0..B) to the next power of two (at most R; more than R: B
 * stays): padding row r reads and writes slot 0 of scratch_block through
 * table entry tab[ntab], which it sets. rows [R], tab [ntab + 1] at least.
 * Returns the rows to compute. */
int mt_cuda_graph_pad_rows(mt_cu_row *rows, int32_t *tab, int B, int R, size_t ntab,
                           int32_t scratch_block);

/* Launches the graph of plan key on st: replayed if captured before, else
 * captured now from enqueue(ctx, key) and kept. -1 with err on failure
 * (nothing launched). */
int mt_cuda_graph_launch(mt_cuda_graphs *gs, const fwd_plan *key, cudaStream_t st,
                         mt_cuda_enqueue_fn enqueue, void *ctx, char *err, size_t errlen);

/* Destroys the captured graphs (the device must be current). */
void mt_cuda_graphs_free(mt_cuda_graphs *gs);

#endif
