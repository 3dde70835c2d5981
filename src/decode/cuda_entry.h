/* cuda_entry.h: the CUDA backend's one entry point in the shared object
 * (libmetronome_cuda.so, gpu/cuda_module.h): a table of functions the
 * program calls through (cuda_entry.c), checked for layout against the
 * program's own build before use.
 *
 * The shared object resolves the library functions it calls (backend.c,
 * kv.c, model.c, step.c) from the program, which exports them
 * (-rdynamic); cuda_entry.c references each of them so that a static
 * link keeps them, and the Makefile checks that list against the object's
 * undefined symbols.
 */
#ifndef MT_CUDA_ENTRY_H
#define MT_CUDA_ENTRY_H

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
#define MT_CUDA_MODULE_GET_SYM "mt_cuda_module_get"
typedef const mt_cuda_module *(*mt_cuda_module_get_fn)(void);
const mt_cuda_module *mt_cuda_module_get(void);

#endif
