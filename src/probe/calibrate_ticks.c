/* calibrate_ticks.c: the fit points of `mt-probe calibrate --served`
 * (calibrate.h), read from mt-serve's tick lines instead of a bare decoder.
 *
 * A tick line says how many rows the tick stepped (stepped=B) and how long
 * that took (step_ms), measured inside the serving process: on a host whose
 * cores the step shares with the clients, the I/O thread and the ticker,
 * this is the step the sessions actually wait for. What a tick line does
 * not say is how many cache positions each row read; that follows from the
 * sessions' age and the window policy. The sweep starts a level's sessions
 * within one period of each other and steps each once a tick, so the mean
 * frames stepped per session so far (the level's stepped sum over its
 * admitted sessions) is the query position, and mt_kv_visible_count on a
 * pool of the served policy turns it into the positions a row reads.
 *
 * The samples are grouped by batch and by a quarter of the window bound
 * (cost varies little within one) and each group's median becomes a fit
 * point: single ticks are too noisy to fit one by one, and a stall of the
 * host in one tick should move a median, not a point. */
#define _GNU_SOURCE
#include "probe/calibrate.h"
#include "decode/backend_sim.h"
#include "decode/decoder.h"
#include "decode/kv.h"
#include "model/model.h"
#include "util/errmsg.h"
#include "util/grow.h"
#include "wire/latline.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct tick_sample {
    int     batch;
    int64_t vis;      /* positions each row read */
    int64_t bucket;   /* vis / the bucket width */
    double  t_s;
} tick_sample;

struct mt_calib_ticks {
    mt_sim      *terms;     /* unit rates: the cost model's terms */
    mt_kv_pool  *pool;      /* the served policy, for visible counts only */
    int64_t      bucket_w;  /* positions per length bucket */
    int          level;     /* the level whose ticks come in; 0 none yet */
    double       stepped;   /* rows the level has stepped so far */
    char         device[MT_TICK_DEVICE_MAX];
    tick_sample *s;
    size_t       n, cap;
};

int mt_calib_unit_terms(const mt_config *cfg, size_t elem, mt_sim **out,
                        char *err, size_t errlen)
{
    mt_sim_profile unit;
    memset(&unit, 0, sizeof unit);
    snprintf(unit.name, sizeof unit.name, "unit");
    unit.memory_bytes = 1e18;   /* no limit: only the terms are wanted */
    unit.bandwidth = unit.matrix_rate = 1;
    unit.weight_bytes = (int)elem;
    unit.kv_bytes = (int)elem;
    return mt_sim_create(&unit, cfg, NULL, out, err, errlen);
}

int mt_calib_ticks_new(const mt_config *cfg, size_t elem, int sink, int window,
                       mt_calib_ticks **out, char *err, size_t errlen)
{
    *out = NULL;
    mt_calib_ticks *ct = calloc(1, sizeof *ct);
    if (!ct) {
        mt_set_err(err, errlen, "out of memory");
        return -1;
    }
    mt_kv_params kp;
    memset(&kp, 0, sizeof kp);
    kp.policy = window > 0 ? MT_KV_WINDOW : MT_KV_FULL;
    kp.sink = window > 0 ? sink : 0;
    kp.window = window > 0 ? window : 0;
    kp.position_bytes = mt_decoder_position_bytes(cfg, elem);
    kp.budget_bytes = window > 0 ? mt_kv_bound_bytes(&kp) : kp.position_bytes * MT_KV_BLOCK;
    /* a quarter of the bound; the full policy has none: 64 positions */
    ct->bucket_w = window > 0 ? (sink + window + 3) / 4 : 64;
    if (ct->bucket_w < 1)
        ct->bucket_w = 1;
    if (mt_kv_pool_create(&kp, &ct->pool, err, errlen) != 0 ||
        mt_calib_unit_terms(cfg, elem, &ct->terms, err, errlen) != 0) {
        mt_calib_ticks_free(ct);
        return -1;
    }
    *out = ct;
    return 0;
}

void mt_calib_ticks_free(mt_calib_ticks *ct)
{
    if (!ct)
        return;
    mt_sim_free(ct->terms);
    mt_kv_pool_free(ct->pool);
    free(ct->s);
    free(ct);
}

int mt_calib_ticks_add(mt_calib_ticks *ct, int level, int measuring, const mt_tick *t)
{
    if (level != ct->level) {   /* a new level: its sessions start from 0 */
        ct->level = level;
        ct->stepped = 0;
    }
    if (t->device[0] && !ct->device[0])
        snprintf(ct->device, sizeof ct->device, "%s", t->device);
    double before = ct->stepped;
    if (t->stepped > 0)
        ct->stepped += (double)t->stepped;
    /* A tick that stepped more rows than it has sessions ran a catch-up
     * round: two batches in one step_ms, not one batch of that size. */
    if (!measuring || t->stepped <= 0 || t->active <= 0 || t->stepped > t->active ||
        !(t->step_ms > 0))
        return 0;
    int64_t q = (int64_t)floor(before / (double)t->active + 0.5);
    tick_sample smp = { .batch = (int)t->stepped, .vis = mt_kv_visible_count(ct->pool, q),
                        .t_s = t->step_ms * 1e-3 };
    smp.bucket = (smp.vis - 1) / ct->bucket_w;
    if (mt_grow(&ct->s, &ct->cap, ct->n + 1, sizeof *ct->s, 1024) != 0)
        return -1;
    ct->s[ct->n++] = smp;
    return 1;
}

size_t mt_calib_ticks_count(const mt_calib_ticks *ct)
{
    return ct->n;
}

const char *mt_calib_ticks_device(const mt_calib_ticks *ct)
{
    return ct->device;
}

static int cmp_sample(const void *a, const void *b)
{
    const tick_sample *x = a, *y = b;
    if (x->batch != y->batch)
        return (x->batch > y->batch) - (x->batch < y->batch);
    if (x->bucket != y->bucket)
        return (x->bucket > y->bucket) - (x->bucket < y->bucket);
    return (x->t_s > y->t_s) - (x->t_s < y->t_s);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int mt_calib_ticks_points(mt_calib_ticks *ct, int min_ticks, mt_calib_point **pts_out,
                          int *npts, double *sigma, int *dropped, char *err, size_t errlen)
{
    *pts_out = NULL;
    *npts = *dropped = 0;
    *sigma = 0;
    if (min_ticks < 1)
        min_ticks = 1;
    qsort(ct->s, ct->n, sizeof *ct->s, cmp_sample);
    mt_calib_point *pts = calloc(ct->n ? ct->n : 1, sizeof *pts);
    int64_t *vis = calloc(ct->n ? ct->n : 1, sizeof *vis);
    int64_t *row = NULL;
    size_t rowcap = 0;
    int n = 0;
    double s2 = 0;
    long dof = 0;
    if (!pts || !vis) {
        free(pts);
        free(vis);
        mt_set_err(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < ct->n;) {
        size_t j = i;
        while (j < ct->n && ct->s[j].batch == ct->s[i].batch && ct->s[j].bucket == ct->s[i].bucket)
            j++;
        int cnt = (int)(j - i), B = ct->s[i].batch;
        if (cnt < min_ticks) {
            *dropped += cnt;
            i = j;
            continue;
        }
        double med = ct->s[i + (size_t)cnt / 2].t_s;   /* sorted by time */
        for (size_t k = i; k < j; k++) {
            double lr = log(ct->s[k].t_s / med);
            s2 += lr * lr;
            vis[k - i] = ct->s[k].vis;
        }
        dof += cnt - 1;
        qsort(vis, (size_t)cnt, sizeof *vis, cmp_i64);
        int64_t L = vis[cnt / 2];
        if (mt_grow(&row, &rowcap, (size_t)B, sizeof *row, 64) != 0) {
            free(row);
            free(pts);
            free(vis);
            mt_set_err(err, errlen, "out of memory");
            return -1;
        }
        for (int b = 0; b < B; b++)
            row[b] = L;
        mt_sim_cost cost;
        mt_sim_step_cost(ct->terms, B, row, 0, &cost);
        pts[n++] = (mt_calib_point){ .batch = B, .len = (long)L, .bytes = cost.bytes,
                                     .flops = cost.flops, .t_s = med, .ticks = cnt };
        i = j;
    }
    free(row);
    free(vis);
    *sigma = dof > 0 ? sqrt(s2 / (double)dof) : 0;
    if (*sigma > 2)
        *sigma = 2;
    *pts_out = pts;
    *npts = n;
    return 0;
}
