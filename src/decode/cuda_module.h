/* cuda_module.h: the boundary between the program and the CUDA backend,
 * which is built as its own shared object (libmetronome_cuda.so:
 * backend_cuda.c and kernels/) and loaded with dlopen only when a CUDA
 * backend is asked for or probed (cuda_loader.c). Linked into the program,
 * cuBLAS, cuBLASLt and the CUDA runtime map about 150 MB before main()
 * runs, on a machine with no GPU and for a server on the CPU or the
 * simulated device too.
 *
 * The shared object resolves the library functions it calls (backend.c,
 * kv.c, model.c, step.c) from the program, which exports them
 * (-rdynamic); cuda_loader.c references each of them so that a static
 * link keeps them, and the Makefile checks that list against the object's
 * undefined symbols.
 */
#ifndef MT_CUDA_MODULE_H
#define MT_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>
#include "decode/backend.h"

/* Bumped whenever this struct or what its functions take changes. */
enum { MT_CUDA_MODULE_ABI = 2 };

typedef struct mt_cuda_module {
    int    abi;           /* MT_CUDA_MODULE_ABI of the object's build */
    size_t backend_size;  /* sizeof(mt_backend) there, a cheap layout check */
    size_t opts_size;     /* sizeof(mt_decoder_opts) there */
    int  (*available)(char *why, size_t whylen);
    int  (*backend_create)(const mt_model *m, const mt_decoder_opts *o,
                           mt_backend **out, char *err, size_t errlen);
    int  (*fill_kv_random)(mt_backend *be, uint64_t seed, char *err, size_t errlen);
} mt_cuda_module;

/* Exported by libmetronome_cuda.so, looked up by name. */
typedef const mt_cuda_module *(*mt_cuda_module_get_fn)(void);
const mt_cuda_module *mt_cuda_module_get(void);

/* A symbol of the loaded module (loading it on first use), for parts of
 * the program beside the decoder that keep their CUDA code in it (the
 * codec: codec/mimi_cuda.h); NULL with err set when the module or the
 * symbol is missing. cuda_loader.c, with MT_HAVE_CUDA only. */
void *mt_cuda_module_sym(const char *name, char *err, size_t errlen);

/* The shared object's file name (what the loader looks for). */
#define MT_CUDA_MODULE_FILE "libmetronome_cuda.so"

#endif
