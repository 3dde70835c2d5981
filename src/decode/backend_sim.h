/* backend_sim.h: the simulated device (--device sim:PROFILE).
 *
 * A backend that holds no weights and no K/V memory: the block pool keeps
 * its books as for a real device over the budget the profile gives
 * (memory_bytes - weight bytes - reserve_bytes), and a step waits, on the
 * absolute monotonic clock from the step's start, the time the profile's
 * cost model predicts. Output PCM echoes the input; logits are zero.
 *
 * Cost model (one step of B sessions, session i seeing v_i positions, its
 * new one included; P parameters, L layers, H query heads, d head_dim):
 *   pb     = L * 2 * kv_heads * d * kv_bytes        (K/V bytes per position)
 *   bytes  = P * weight_bytes + pb * sum(v_i)
 *   flops  = 2 * P * B + 4 * L * H * d * sum(v_i)   (QK^T and PV)
 *   time   = max(bytes / bandwidth, flops / matrix_rate) + overhead
 * A recompute prefill of n positions is one pass over the weights with n
 * rows: bytes = P * weight_bytes + pb * v_last (the K/V read once),
 * flops = 2 * P * n + 4 * L * H * d * sum over the n positions of v_p.
 * bandwidth, matrix_rate and overhead are the profile's, times the factor
 * of the schedule entry in force at the step's start.
 *
 * A model served with a codec (Kyutai's Mimi: speech/speech.c encodes and
 * decodes every session's frame on the device around the LM step) adds,
 * from the codec's figures (step.h's mt_codec_cost: F flops per session-
 * frame, encode + decode; S state bytes a session; W weight bytes):
 *   t_codec = B * F / codec_rate + codec_overhead_us    (to every step)
 *   K/V budget less W + sessions * S                      (at start)
 * codec_rate (default matrix_rate) and codec_overhead_us are the
 * profile's, times the schedule's matrix_rate and overhead factors; the
 * codec runs after the LM step, so its time adds. A prefill carries no
 * codec. sessions is the most sessions served at once (every one's state
 * is held from its admission to its end).
 *
 * A profile with depformer_params D (a speech model's depformer: every
 * codebook step reads its own weights, all batched sessions at once) adds
 * to every step, after the temporal step and before the codec's decode:
 *   t_depformer = max(D * db / bandwidth, 2 * D * B / depformer_rate)
 *                 + depformer_overhead_us
 * db = depformer_weight_bytes (default weight_bytes), depformer_rate
 * (default matrix_rate); the schedule's factors apply as above. Its
 * weights are in the profile's reserve (the simulator cannot see them).
 *
 * Noise, seeded by the profile's seed, drawn once per step or prefill in
 * call order: the time is multiplied by exp(jitter_sigma * Z), Z ~ N(0,1)
 * (median = the prediction), and with probability stall_prob stall_ms is
 * added. The prediction (without noise) and the noise are added up so the
 * caller can print both per tick (mt_sim_take).
 */
#ifndef MT_BACKEND_SIM_H
#define MT_BACKEND_SIM_H

#include <stddef.h>
#include <stdint.h>
#include "decode/kv.h"
#include "decode/sim_profile.h"
#include "decode/step.h"
#include "model/model.h"

typedef struct mt_sim mt_sim;

/* Injected clock for tests: now() in ns on the monotonic clock, and a wait
 * until an absolute time on it. NULL: CLOCK_MONOTONIC + clock_nanosleep. */
typedef struct mt_sim_clock {
    uint64_t (*now)(void *ctx);
    void     (*sleep_until)(void *ctx, uint64_t t_ns);
    void      *ctx;
} mt_sim_clock;

/* One prediction, its parts (seconds, bytes, flops). */
typedef struct mt_sim_cost {
    double bytes, flops;
    double t_mem, t_flop, t_overhead;
    double t_codec;           /* the sessions' codec (0: none) */
    double t_depformer;       /* the depformer (0: none in the profile) */
    double total;             /* max(t_mem, t_flop) + t_overhead + t_codec
                                 + t_depformer */
} mt_sim_cost;

/* Checks the profile against the model (profile.model, if given, must be
 * c->name) and that the weights fit the device. clk may be NULL. The
 * schedule's clock starts now. */
int  mt_sim_create(const mt_sim_profile *p, const mt_config *c,
                   const mt_sim_clock *clk, mt_sim **out, char *err,
                   size_t errlen);
void mt_sim_free(mt_sim *s);
/* Time scale K (<= 1: none): every wait is the model's time over K, the
 * predictions mt_sim_take reports too (they compare with the host's clock),
 * and the schedule reads model time (K times the real time elapsed). */
void   mt_sim_set_time_scale(mt_sim *s, double k);
double mt_sim_time_scale(const mt_sim *s);

const mt_sim_profile *mt_sim_profile_of(const mt_sim *s);
const char *mt_sim_label(const mt_sim *s);       /* "sim:NAME" */
size_t mt_sim_position_bytes(const mt_sim *s);   /* pb above */
double mt_sim_weight_bytes(const mt_sim *s);
/* memory_bytes - weight bytes - reserve_bytes (> 0: checked at create),
 * less the codec's booking once mt_sim_set_codec has been called. */
size_t mt_sim_kv_budget(const mt_sim *s);

/* Books the sessions' codec (the model above): its bytes come out of the
 * K/V budget and its time is added to every step. -1 when the budget left
 * would not hold one K/V block. */
int mt_sim_set_codec(mt_sim *s, const mt_codec_cost *c, int sessions, char *err,
                     size_t errlen);
/* The codec booked (zero: none) and its sessions. */
const mt_codec_cost *mt_sim_codec(const mt_sim *s, int *sessions);
/* The formulas alone, for mt-probe predict: bytes booked for sessions
 * (W + sessions * S), and seconds a step of B sessions takes for the
 * codec on profile p (no schedule factor). */
double mt_sim_codec_booked(const mt_codec_cost *c, int sessions);
double mt_sim_codec_rate(const mt_sim_profile *p);   /* codec_rate or matrix_rate */
double mt_sim_codec_seconds(const mt_sim_profile *p, const mt_codec_cost *c, int B);
/* Seconds the depformer takes for B sessions on p (0 without one; no
 * schedule factor), and its weight bytes per parameter. */
double mt_sim_depformer_seconds(const mt_sim_profile *p, int B);
int    mt_sim_depformer_weight_bytes(const mt_sim_profile *p);

/* Noiseless predictions at t_s seconds after the start (schedule). */
void mt_sim_step_cost(const mt_sim *s, int B, const int64_t *visible,
                      double t_s, mt_sim_cost *c);
void mt_sim_prefill_cost(const mt_sim *s, int64_t n, int64_t visible_last,
                         double visible_sum, double t_s, mt_sim_cost *c);
/* The schedule's factor for field f at t_s (1 when none applies). */
double mt_sim_factor(const mt_sim *s, mt_sim_field f, double t_s);
/* One draw of the noise for a step predicted at pred_s: the seconds to add
 * (negative when the jitter is below the median). Advances the generator. */
double mt_sim_draw_noise(mt_sim *s, double pred_s);

/* Waits as a step of B sessions would (from the clock's now), then returns.
 * Used by the backend; exposed for tests. */
void mt_sim_run_step(mt_sim *s, int B, const int64_t *visible);
void mt_sim_run_prefill(mt_sim *s, int64_t n, int64_t visible_last,
                        double visible_sum);

/* Predicted and noise milliseconds added since the last call; resets. */
void mt_sim_take(mt_sim *s, double *pred_ms, double *noise_ms);

/* The backend over a sim the caller keeps (and frees after the backend),
 * for tests that inject a clock; mt_sim_backend_create (backend.h) is the
 * ordinary constructor, which makes and owns its sim. */
struct mt_backend;
int  mt_sim_backend_wrap(mt_sim *s, const mt_model *m, int max_batch,
                         struct mt_backend **out, char *err, size_t errlen);

#endif
