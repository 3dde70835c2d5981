/* cuda_loader.c: finds and loads the CUDA shared object
 * (libmetronome_cuda.so, see cuda_module.h) on first use, and hands out
 * its symbols, so that the CUDA runtime and cuBLAS are mapped only in a
 * process that asks for CUDA (--device cuda) or probes for it (--device
 * auto on a machine with a GPU device node), never in one serving the CPU
 * or the simulated device.
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
#include "gpu/cuda_module.h"

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

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static void *module_handle;
static char load_err[512];

/* dlopen path; on success sets module_handle, else appends why to load_err. */
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
    /* never closed: cuBLAS and the runtime do not unload cleanly */
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

static void *loaded(char *err, size_t errlen)
{
    if (pthread_once(&load_once, load) != 0) {
        mt_set_err(err, errlen, "cannot load the CUDA backend: pthread_once failed");
        return NULL;
    }
    if (!module_handle)
        mt_set_err(err, errlen, "cannot load the CUDA backend (%s): %s", MT_CUDA_MODULE_FILE,
                 load_err[0] ? load_err : "not found");
    return module_handle;
}

void *mt_cuda_module_sym(const char *name, char *err, size_t errlen)
{
    char why[512];
    if (!loaded(why, sizeof why)) {
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

#else
/* Built without CUDA: nothing to load (ISO C wants a declaration). */
typedef int mt_cuda_loader_unused;
#endif
