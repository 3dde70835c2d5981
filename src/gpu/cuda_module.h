/* cuda_module.h: the boundary between the program and the CUDA code,
 * which is built as its own shared object (libmetronome_cuda.so: the
 * CUDA backend, the depformer's and the codec's device code, kernels/)
 * and loaded with dlopen only when CUDA is asked for or probed
 * (cuda_loader.c). Linked into the program, cuBLAS, cuBLASLt and the CUDA
 * runtime map about 150 MB before main() runs, on a machine with no GPU
 * and for a server on the CPU or the simulated device too.
 *
 * This stage knows only how to find the object and a symbol in it; what
 * each user looks up is its own (decode/cuda_entry.h: the backend's
 * entry point; codec/mimi_cuda.h, decode/depformer_cuda.h: ops tables).
 */
#ifndef MT_CUDA_MODULE_H
#define MT_CUDA_MODULE_H

#include <stddef.h>

/* A symbol of the loaded module (loading it on first use); NULL with err
 * set when the module or the symbol is missing. cuda_loader.c, with
 * MT_HAVE_CUDA only. */
void *mt_cuda_module_sym(const char *name, char *err, size_t errlen);

/* 1 if the kernel exposes a GPU device node (/dev/nvidia0..., nvidiactl,
 * or WSL's /dev/dxg), with its name in why; else 0 with the reason. Loads
 * nothing. */
int mt_cuda_device_present(char *why, size_t whylen);

/* The device every CUDA user of this process (backbone, depformer, codec)
 * opens: ordinal gpu among the visible ones (CUDA_VISIBLE_DEVICES), 0
 * unless called. Before the first of them is created; loads the module.
 * With MT_HAVE_CUDA only. */
int  mt_cuda_select_gpu(int gpu, char *err, size_t errlen);

/* The shared object's file name (what the loader looks for). */
#define MT_CUDA_MODULE_FILE "libmetronome_cuda.so"

#endif
