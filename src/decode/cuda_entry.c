/* cuda_entry.c: forwards mt_cuda_available, mt_cuda_backend_create and
 * mt_cuda_backend_fill_kv_random to the CUDA backend in the shared object
 * (cuda_entry.h), which gpu/cuda_loader.c loads on first use.
 */
#ifdef MT_HAVE_CUDA

#include "util/errmsg.h"
#include "util/clock.h"
#include "gpu/cuda_module.h"
#include "decode/cuda_entry.h"
#include "decode/decoder.h"
#include "decode/kv.h"
#include "model/model.h"

#include <pthread.h>
#include <stdio.h>

/* The library functions the shared object calls, resolved from this
 * program (-rdynamic): referenced here so a static link keeps their
 * objects whatever else the program uses. The Makefile checks this list
 * against the object's undefined mt_* symbols. */
void *const mt_cuda_module_imports[] = {
    (void *)mt_backend_alloc,
    (void *)mt_backend_check_model,
    (void *)mt_backend_prefill_chunks,
    (void *)mt_backend_rows,
    (void *)mt_clock_ns,
    (void *)mt_decoder_position_bytes,
    (void *)mt_kv_pool_blocks,
    (void *)mt_kv_pool_params,
    (void *)mt_kv_slot,
    (void *)mt_kv_visible_count,
    (void *)mt_model_tensor,
    (void *)mt_model_tensor_count,
    (void *)mt_set_err,
};

static pthread_once_t entry_once = PTHREAD_ONCE_INIT;
static const mt_cuda_module *module;
static char entry_err[512];

static void find_entry(void)
{
    char why[400];
    mt_cuda_module_get_fn get =
        (mt_cuda_module_get_fn)mt_cuda_module_sym(MT_CUDA_MODULE_GET_SYM, why, sizeof why);
    const mt_cuda_module *m = get ? get() : NULL;
    if (!get) {
        snprintf(entry_err, sizeof entry_err, "%s", why);
    } else if (!m || m->abi != MT_CUDA_MODULE_ABI || m->backend_size != sizeof(mt_backend) ||
               m->opts_size != sizeof(mt_decoder_opts)) {
        snprintf(entry_err, sizeof entry_err,
                 "cuda: %s: not a CUDA backend of this build (abi %d, want %d)",
                 MT_CUDA_MODULE_FILE, m ? m->abi : -1, MT_CUDA_MODULE_ABI);
    } else {
        module = m;
    }
}

/* The backend's table, or NULL with the reason in err. */
static const mt_cuda_module *entry(char *err, size_t errlen)
{
    if (pthread_once(&entry_once, find_entry) != 0) {
        mt_set_err(err, errlen, "cannot load the CUDA backend: pthread_once failed");
        return NULL;
    }
    if (!module)
        mt_set_err(err, errlen, "%s", entry_err);
    return module;
}

int mt_cuda_available(char *why, size_t whylen)
{
    const mt_cuda_module *m = entry(why, whylen);
    return m ? m->available(why, whylen) : 0;
}

int mt_cuda_backend_create(const mt_model *m, const mt_decoder_opts *o, mt_backend **out,
                           char *err, size_t errlen)
{
    *out = NULL;
    char why[512];
    const mt_cuda_module *mod = entry(why, sizeof why);
    if (!mod) {
        mt_set_err(err, errlen, "cuda: %s", why);
        return -1;
    }
    return mod->backend_create(m, o, out, err, errlen);
}

int mt_cuda_backend_fill_kv_random(mt_backend *be, uint64_t seed, char *err, size_t errlen)
{
    char why[512];
    const mt_cuda_module *mod = entry(why, sizeof why);
    if (!mod) {
        mt_set_err(err, errlen, "cuda: %s", why);
        return -1;
    }
    return mod->fill_kv_random(be, seed, err, errlen);
}

#else
/* Built without CUDA: nothing to load (ISO C wants a declaration). */
typedef int mt_cuda_entry_unused;
#endif
