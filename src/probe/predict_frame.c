/* predict_frame.c: sessions per device for a speech model on a simulated
 * device (mt-probe predict --profile with a Kyutai model): the largest
 * batch whose whole frame (the temporal step over sink + window visible
 * positions a session, the depformer, the codec: backend_sim.c's model of
 * a step, the very code mt-serve --device sim:P waits by) holds its p99
 * under the frame period, and the most sessions the K/V pool holds at
 * that bound. A SIMULATION: every figure is the profile's. */
#include "probe/predict_frame.h"
#include "decode/kv.h"
#include "model/kyutai_lm.h"
#include "util/errmsg.h"

#include <math.h>
#include <stdlib.h>

/* The step of B sessions, each seeing vis positions. */
static void frame_cost(const mt_sim *s, int B, int64_t vis, int64_t *buf, mt_sim_cost *c)
{
    for (int i = 0; i < B; i++)
        buf[i] = vis;
    mt_sim_step_cost(s, B, buf, 0, c);
}

int mt_predict_frame(const mt_sim_profile *p, const char *model, const mt_codec_cost *codec,
                     int sink, int window, double period_s, int max_b, mt_predict_frame_out *out,
                     char *err, size_t errlen)
{
    if (max_b < 1 || max_b > 65536 || !(period_s > 0) || sink < 0 || window < 1) {
        mt_set_err(err, errlen, "predict frame: bad bounds (B <= %d, period %g s, S %d, W %d)",
                   max_b, period_s, sink, window);
        return -1;
    }
    mt_kyutai_lm *lm = NULL;
    mt_sim *s = NULL;
    int64_t *vis = malloc((size_t)max_b * sizeof *vis);
    int rc = -1;
    if (!vis) {
        mt_set_err(err, errlen, "out of memory");
        goto out;
    }
    if (mt_kyutai_load(model, MT_MODEL_SHAPE_ONLY, &lm, err, errlen) ||
        mt_sim_create(p, &lm->temporal->cfg, NULL, &s, err, errlen))
        goto out;
    /* the codec's time; its booking for one session (the memory bound
     * below adds every further session's state) */
    if (codec && mt_sim_set_codec(s, codec, 1, err, errlen))
        goto out;
    const int64_t v = (int64_t)sink + window;
    /* p99 of exp(sigma Z) is exp(2.326 sigma); stalls below 1% of steps
     * do not move a p99 */
    out->p99_factor = exp(2.326 * p->jitter_sigma) + (p->stall_prob >= 0.01 ? p->stall_ms * 1e-3 / period_s : 0);
    frame_cost(s, 1, v, vis, &out->at1);
    out->compute_sessions = 0;
    for (int B = 1; B <= max_b; B++) {
        mt_sim_cost c;
        frame_cost(s, B, v, vis, &c);
        if (c.total * out->p99_factor >= period_s)
            break;
        out->compute_sessions = B;
        out->atmax = c;
    }
    size_t per = (size_t)((v + MT_KV_BLOCK - 1) / MT_KV_BLOCK) * MT_KV_BLOCK *
                 mt_sim_position_bytes(s);
    double state = codec ? codec->state_bytes : 0;
    out->memory_sessions = (long)(((double)mt_sim_kv_budget(s) + state) / ((double)per + state));
    out->sessions = out->compute_sessions < out->memory_sessions ? out->compute_sessions
                                                                  : (int)out->memory_sessions;
    rc = 0;
out:
    mt_sim_free(s);
    if (lm)
        mt_kyutai_free(lm);
    free(vis);
    return rc;
}
