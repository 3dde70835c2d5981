/* load.c: where a model comes from: a spec (a directory, a bare name of
 * an installed or shipped model, or synthetic:NAME, which synthetic.c
 * makes) resolved and loaded; the directory loader reads config.json
 * (config_json.c) and memory-maps model.safetensors (safetensors.c),
 * converting every tensor once to fp32. */
#include "util/errmsg.h"
#include "util/io.h"
#include "util/mapfile.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/synthetic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where `make install` puts the shipped models (DATADIR/models/NAME); the
 * Makefile defines it from PREFIX. */
#ifndef MT_DATADIR
#define MT_DATADIR "/usr/local/share/metronome"
#endif

const char *const *mt_model_presets(void) { return mt_synthetic_presets(); }

/* ---- loading ---------------------------------------------------------------- */

static int load_dir(const char *dir, int flags, mt_model **out, char *err,
                    size_t errlen);

int mt_model_load(const char *spec, int flags, mt_model **out, char *err,
                  size_t errlen)
{
    *out = NULL;
    if (!spec || !*spec) {
        mt_set_err(err, errlen, "empty model spec (a directory or synthetic:NAME)");
        return -1;
    }
    if (strncmp(spec, "synthetic:", 10) == 0)
        return mt_synthetic_load(spec, flags, out, err, errlen);
    char dir[4096];
    if (mt_model_resolve(spec, dir, sizeof dir) != 0) {
        mt_set_err(err, errlen, "%s: no such model directory (looked in ./%s, "
                 MT_DATADIR "/models/%s and the source tree's models/) and not "
                 "synthetic:NAME", spec, spec, spec);
        return -1;
    }
    return load_dir(dir, flags, out, err, errlen);
}

/* A bare name ("fortune-byte") that is not a path here: the installed
 * models, then the source tree's when the program runs from bin/ in it. */
static int model_candidate(char *out, size_t cap, const char *fmt,
                           const char *base, const char *name)
{
    struct stat sb;
    int w = snprintf(out, cap, fmt, base, name);
    return w > 0 && (size_t)w < cap && stat(out, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int mt_model_resolve(const char *spec, char *dir, size_t cap)
{
    struct stat sb;
    if (!spec || !*spec || cap == 0)
        return -1;
    int w = snprintf(dir, cap, "%s", spec);
    if (w < 0 || (size_t)w >= cap)
        return -1;
    if (stat(spec, &sb) == 0 || strncmp(spec, "synthetic:", 10) == 0)
        return 0;
    if (strchr(spec, '/') || !strcmp(spec, ".") || !strcmp(spec, ".."))
        return -1;
    if (model_candidate(dir, cap, "%s/models/%s", MT_DATADIR, spec))
        return 0;
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            if (model_candidate(dir, cap, "%s/../models/%s", exe, spec))
                return 0;
        }
    }
    snprintf(dir, cap, "%s", spec);
    return -1;
}


/* ---- directory loader ------------------------------------------------------ */

static void set_name(mt_config *c, const char *dir)
{
    size_t n = strlen(dir), cap = sizeof c->name - 1;
    if (n <= cap) {
        memcpy(c->name, dir, n + 1);
    } else {                       /* keep the tail, which says the most */
        memcpy(c->name, "...", 3);
        memcpy(c->name + 3, dir + n - (cap - 3), cap - 3);
        c->name[cap] = '\0';
    }
}

static int is_ignored(const char *name)
{
    /* rotary tables some older checkpoints store; we compute them */
    size_t n = strlen(name), k = strlen(".rotary_emb.inv_freq");
    return n > k && strcmp(name + n - k, ".rotary_emb.inv_freq") == 0;
}

static int check_tensors(const mt_config *c, const mt_st_file *sf, const char *path,
                         char *err, size_t errlen)
{
    int nt = mt_model_tensor_count(c);
    mt_tensor_ref r;
    const mt_model shape = { .cfg = *c };   /* names and shapes, no data */
    const char *missing = NULL;
    char missing_buf[80];
    for (int i = 0; i < nt && !missing; i++) {
        mt_model_tensor(&shape, i, &r);
        if (!mt_st_find(sf, r.name)) {
            snprintf(missing_buf, sizeof missing_buf, "%s", r.name);
            missing = missing_buf;
        }
    }
    /* unknown names first: a misnamed tensor is reported as itself, with
     * the expected tensor it probably was meant to be */
    for (int j = 0; j < sf->n; j++) {
        const char *name = sf->t[j].name;
        int known = is_ignored(name);
        for (int i = 0; i < nt && !known; i++) {
            mt_model_tensor(&shape, i, &r);
            known = strcmp(r.name, name) == 0;
        }
        if (!known) {
            if (missing)
                mt_set_err(err, errlen, "%s: tensor '%s': unknown tensor name (and "
                         "'%s' is missing: misnamed?)", path, name, missing);
            else
                mt_set_err(err, errlen, "%s: tensor '%s': unknown tensor name (not a "
                         "tensor of this config)", path, name);
            return -1;
        }
    }
    if (missing) {
        mt_set_err(err, errlen, "%s: tensor '%s': missing", path, missing);
        return -1;
    }
    for (int i = 0; i < nt; i++) {
        mt_model_tensor(&shape, i, &r);
        const mt_st_tensor *t = mt_st_find(sf, r.name);
        if (mt_st_check_float(t, path, err, errlen) != 0)
            return -1;
        int same = t->ndim == r.ndim && t->shape[0] == (uint64_t)r.shape[0] &&
                   (r.ndim == 1 || t->shape[1] == (uint64_t)r.shape[1]);
        if (!same) {
            char got[128];
            mt_st_shape_str(t, got, sizeof got);
            if (r.ndim == 1)
                mt_set_err(err, errlen, "%s: tensor '%s': wrong shape [%s], expected "
                         "[%lld]", path, r.name, got, (long long)r.shape[0]);
            else
                mt_set_err(err, errlen, "%s: tensor '%s': wrong shape [%s], expected "
                         "[%lld, %lld]", path, r.name, got, (long long)r.shape[0],
                         (long long)r.shape[1]);
            return -1;
        }
    }
    return 0;
}

int mt_ckpt_dir_read(const char *dir, mt_ckpt_dir *d, char *err, size_t errlen)
{
    d->config = NULL;
    if ((size_t)snprintf(d->cpath, sizeof d->cpath, "%s/config.json", dir) >= sizeof d->cpath ||
        (size_t)snprintf(d->wpath, sizeof d->wpath, "%s/model.safetensors", dir) >=
            sizeof d->wpath) {
        mt_set_err(err, errlen, "%s: path too long", dir);
        return -1;
    }
    d->config = mt_read_regular(d->cpath, 1u << 20, &d->config_len, err, errlen);
    return d->config ? 0 : -1;
}

static int load_dir(const char *dir, int flags, mt_model **out, char *err,
                    size_t errlen)
{
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        mt_set_err(err, errlen, "%s: not a model directory (%s) and not synthetic:NAME",
                 dir, stat(dir, &sb) != 0 ? strerror(errno) : "not a directory");
        return -1;
    }
    mt_ckpt_dir d;
    if (mt_ckpt_dir_read(dir, &d, err, errlen))
        return -1;
    const char *wpath = d.wpath;
    mt_config c;
    int rc = mt_config_parse(d.config, d.config_len, d.cpath, &c, err, errlen);
    free(d.config);
    if (rc != 0)
        return -1;
    set_name(&c, dir);

    mt_mapfile f;
    if (mt_mapfile_open(wpath, &f, err, errlen))
        return -1;
    mt_st_file sf;
    mt_model *m = NULL;
    rc = -1;
    if (mt_st_parse(f.data, f.len, wpath, &sf, err, errlen) != 0)
        goto unmap;
    c.has_audio = mt_st_find(&sf, "audio_in.weight") || mt_st_find(&sf, "audio_out.weight");
    c.has_tokens = c.vocab > 0;
    if (!c.has_audio && !c.has_tokens) {
        mt_set_err(err, errlen, "%s: tensor 'audio_in.weight': missing, and vocab_size "
                 "is 0: the model has neither an audio nor a token adapter", wpath);
        goto done;
    }
    if (check_tensors(&c, &sf, wpath, err, errlen) != 0)
        goto done;
    int shape_only = (flags & MT_MODEL_SHAPE_ONLY) != 0;
    uint64_t bytes = mt_model_params(&c) * 4;
    if (!shape_only && bytes > mt_model_host_limit()) {
        mt_set_err(err, errlen, "%s: %.1f GiB of fp32 host weights is over the %.0f GiB "
                 "host limit: use a GPU backend (shape-only load; " MT_MODEL_HOST_LIMIT_HINT ")",
                 wpath, bytes / 1073741824.0, mt_model_host_limit() / 1073741824.0);
        goto done;
    }
    if (mt_model_make(&c, shape_only, 0, &m, err, errlen) != 0)
        goto done;
    m->seed = 0;
    if (!shape_only) {
        int nt = mt_model_tensor_count(&c);
        mt_tensor_ref r;
        for (int i = 0; i < nt; i++) {
            mt_model_tensor(m, i, &r);
            mt_st_to_f32(mt_st_find(&sf, r.name), r.data);   /* checked above */
        }
    }
    *out = m;
    rc = 0;
done:
    mt_st_free(&sf);
unmap:
    mt_mapfile_close(&f);
    return rc;
}

