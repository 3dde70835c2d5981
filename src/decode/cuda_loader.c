/* cuda_loader.c: loads the CUDA backend (libmetronome_cuda.so, see
 * cuda_module.h) on first use and forwards mt_cuda_available,
 * mt_cuda_backend_create and mt_cuda_backend_fill_kv_random to it, so that
 * the CUDA runtime and cuBLAS are mapped only in a process that asks for
 * CUDA (--device cuda) or probes for it (--device auto on a machine with a
 * GPU device node), never in one serving the CPU or the simulated device.
 *
 * Where the object is looked for, first found wins:
 *   $MT_CUDA_LIB                                  (a path; nothing else tried)
 *   <program's directory>/../lib/metronome/       (the installed layout)
 *   the build tree that built this program        (MT_CUDA_MODULE_BUILD)
 *   the dynamic loader's own search               (LD_LIBRARY_PATH: a
 *                                                  carried GPU run, pack.sh)
 */
#ifdef MT_HAVE_CUDA

#include "util/errmsg.h"
#include "decode/cuda_module.h"
#include "decode/decoder.h"
#include "decode/kv.h"
#include "model/model.h"
#include "util/clock.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MT_CUDA_MODULE_BUILD
#define MT_CUDA_MODULE_BUILD ""
#endif

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

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const mt_cuda_module *module;
static void *module_handle;   /* for mt_cuda_module_sym */
static char load_err[512];

/* dlopen path; on success sets module, else appends why to load_err. */
static int try_open(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        size_t n = strlen(load_err);
        snprintf(load_err + n, sizeof load_err - n, "%s%s", n ? "; " : "",
                 e ? e : path);
        return -1;
    }
    mt_cuda_module_get_fn get = (mt_cuda_module_get_fn)dlsym(h, "mt_cuda_module_get");
    const mt_cuda_module *m = get ? get() : NULL;
    if (!m || m->abi != MT_CUDA_MODULE_ABI || m->backend_size != sizeof(mt_backend) ||
        m->opts_size != sizeof(mt_decoder_opts)) {
        size_t n = strlen(load_err);
        snprintf(load_err + n, sizeof load_err - n,
                 "%s%s: not a CUDA backend of this build (abi %d, want %d)", n ? "; " : "",
                 path, m ? m->abi : -1, MT_CUDA_MODULE_ABI);
        dlclose(h);
        return -1;
    }
    /* never closed: cuBLAS and the runtime do not unload cleanly */
    module = m;
    module_handle = h;
    return 0;
}

static void load(void)
{
    const char *env = getenv("MT_CUDA_LIB");
    if (env && *env) {
        (void)try_open(env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            char path[PATH_MAX + 64];
            snprintf(path, sizeof path, "%s/../lib/metronome/%s", exe, MT_CUDA_MODULE_FILE);
            if (access(path, R_OK) == 0 && try_open(path) == 0)
                return;
        }
    }
    if (MT_CUDA_MODULE_BUILD[0] && access(MT_CUDA_MODULE_BUILD, R_OK) == 0 &&
        try_open(MT_CUDA_MODULE_BUILD) == 0)
        return;
    (void)try_open(MT_CUDA_MODULE_FILE);
}

static const mt_cuda_module *get_module(char *err, size_t errlen)
{
    if (pthread_once(&load_once, load) != 0) {
        mt_set_err(err, errlen, "cannot load the CUDA backend: pthread_once failed");
        return NULL;
    }
    if (!module)
        mt_set_err(err, errlen, "cannot load the CUDA backend (%s): %s", MT_CUDA_MODULE_FILE,
                 load_err[0] ? load_err : "not found");
    return module;
}

void *mt_cuda_module_sym(const char *name, char *err, size_t errlen)
{
    char why[512];
    if (!get_module(why, sizeof why)) {
        mt_set_err(err, errlen, "cuda: %s", why);
        return NULL;
    }
    void *p = dlsym(module_handle, name);
    if (!p)
        mt_set_err(err, errlen, "cuda: %s has no %s (an older build?)", MT_CUDA_MODULE_FILE, name);
    return p;
}

int mt_cuda_select_gpu(int gpu, char *err, size_t errlen)
{
    typedef int (*select_fn)(int gpu, char *err, size_t errlen);
    select_fn f = (select_fn)mt_cuda_module_sym("mt_cu_ctx_select", err, errlen);
    return f ? f(gpu, err, errlen) : -1;
}

int mt_cuda_device_present(char *why, size_t whylen)
{
    static const char *const fixed[] = { "/dev/nvidiactl", "/dev/dxg", NULL };
    DIR *dev = opendir("/dev");
    if (dev) {
        struct dirent *e;
        while ((e = readdir(dev)) != NULL) {
            if (strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' &&
                e->d_name[6] <= '9') {
                snprintf(why, whylen, "/dev/%s", e->d_name);
                closedir(dev);
                return 1;
            }
        }
        closedir(dev);
    }
    for (int i = 0; fixed[i]; i++) {
        if (access(fixed[i], F_OK) == 0) {
            snprintf(why, whylen, "%s", fixed[i]);
            return 1;
        }
    }
    snprintf(why, whylen, "no GPU device node (/dev/nvidia[0-9]*, /dev/nvidiactl, /dev/dxg)");
    return 0;
}

int mt_cuda_available(char *why, size_t whylen)
{
    const mt_cuda_module *m = get_module(why, whylen);
    return m ? m->available(why, whylen) : 0;
}

int mt_cuda_backend_create(const mt_model *m, const mt_decoder_opts *o, mt_backend **out,
                           char *err, size_t errlen)
{
    *out = NULL;
    char why[512];
    const mt_cuda_module *mod = get_module(why, sizeof why);
    if (!mod) {
        mt_set_err(err, errlen, "cuda: %s", why);
        return -1;
    }
    return mod->backend_create(m, o, out, err, errlen);
}

int mt_cuda_backend_fill_kv_random(mt_backend *be, uint64_t seed, char *err, size_t errlen)
{
    char why[512];
    const mt_cuda_module *mod = get_module(why, sizeof why);
    if (!mod) {
        mt_set_err(err, errlen, "cuda: %s", why);
        return -1;
    }
    return mod->fill_kv_random(be, seed, err, errlen);
}

#else
/* Built without CUDA: nothing to load (ISO C wants a declaration). */
typedef int mt_cuda_loader_unused;
#endif
