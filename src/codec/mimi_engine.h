/* mimi_engine.h: Mimi on a chosen backend, the CPU (mimi.c, OpenBLAS) or
 * CUDA (mimi_cuda.c in the CUDA module), behind one API: sessions are
 * slots 0..max_sessions-1 of the engine, whose states it holds (on the
 * device for CUDA), and a call encodes or decodes one frame for each of B
 * distinct slots as one batch. */
#ifndef MT_MIMI_ENGINE_H
#define MT_MIMI_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "codec/mimi.h"

typedef enum { MIMI_BACKEND_CPU = 0, MIMI_BACKEND_CUDA = 1 } mimi_backend;

/* "cpu" or "cuda". */
int         mimi_backend_parse(const char *s, mimi_backend *out, char *err, size_t errlen);
const char *mimi_backend_name(mimi_backend b);

typedef struct mimi_engine mimi_engine;

/* m must outlive the engine. CUDA: fails with the reason when the module,
 * a GPU or device memory is missing. */
int  mimi_engine_new(const mimi_model *m, mimi_backend be, int max_batch, int max_sessions,
                     mimi_engine **out, char *err, size_t errlen);
void mimi_engine_free(mimi_engine *e);
mimi_backend mimi_engine_backend(const mimi_engine *e);
/* A slot back to a new session's state (zeros, first frame pending). */
int  mimi_engine_reset(mimi_engine *e, int slot, char *err, size_t errlen);
/* pcm [B][frame_size] -> codes [B][n_q_used] for slots slot[0..B-1]. */
int  mimi_engine_encode(mimi_engine *e, const int *slot, int B, const float *pcm, int32_t *codes,
                        char *err, size_t errlen);
/* codes [B][n_q_used] -> pcm [B][frame_size]; a code outside [0, bins)
 * is refused before any work. */
int  mimi_engine_decode(mimi_engine *e, const int *slot, int B, const int32_t *codes, float *pcm,
                        char *err, size_t errlen);
/* Frames slot has encoded / decoded since its reset. */
int64_t mimi_engine_frames_encoded(const mimi_engine *e, int slot);
int64_t mimi_engine_frames_decoded(const mimi_engine *e, int slot);
/* Bytes the engine holds: host (CPU) or device (CUDA). */
size_t mimi_engine_bytes(const mimi_engine *e);

#endif
