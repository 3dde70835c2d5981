/* sim_profile.h: the profile of a simulated device (backend_sim.c) and its
 * text format, documented for users in mt-profile(5).
 *
 * A profile is plain text, one `key = value` per line; `#` starts a comment
 * (to the end of the line), blank lines are ignored, keys may not repeat
 * (except `schedule`), unknown keys are errors (a typo must not silently
 * leave a figure at its default). Numbers are decimal with an optional
 * exponent (4.3e12). Keys:
 *
 *   name          = TEXT   shown in every log and tick line (default: the
 *                          file's base name without .profile)
 *   model         = SPEC   the model the figures are for (e.g.
 *                          synthetic:moshi-7b); the decoder refuses another
 *   memory_bytes  = N      device memory                     (required)
 *   reserve_bytes = N      memory held back from weights and K/V: context,
 *                          activations, allocator slack      (required)
 *   bandwidth     = N      bytes/s moved by a step           (required)
 *   matrix_rate   = N      flop/s of a step's matrix work    (required)
 *   overhead_us   = N      fixed time per step (launches, sync); default 0
 *   weight_bytes  = N      bytes per parameter (2: bf16)     (required)
 *   kv_bytes      = N      bytes per K or V element (2: bf16) (required)
 *   jitter_sigma  = N      per-step factor exp(sigma * Z), Z ~ N(0,1);
 *                          default 0 (no jitter)
 *   stall_prob    = P      probability that a step also stalls; default 0
 *   stall_ms      = N      length of a stall; default 0
 *   seed          = N      noise seed (unsigned integer); default 1
 *   codec_rate    = N      flop/s the sessions' codec (Mimi) runs at, for
 *                          a model served with one; default matrix_rate
 *   codec_overhead_us = N  fixed time per step that carries the codec
 *                          (its launches); default 0
 *   depformer_params = N   parameters a speech model's depformer reads a
 *                          frame (all its codebook steps' weights,
 *                          embedding tables excluded); default 0: none
 *   depformer_weight_bytes = N  bytes per depformer parameter; default
 *                          weight_bytes
 *   depformer_rate = N     flop/s of the depformer's matrix work; default
 *                          matrix_rate
 *   depformer_overhead_us = N  fixed time per step that carries the
 *                          depformer (its launches and syncs); default 0
 *   schedule      = Ts FIELD*F
 *                          from T seconds after the device starts, FIELD
 *                          (bandwidth, matrix_rate or overhead) is its
 *                          profile value times F; later entries for the same
 *                          field replace earlier ones; times must not
 *                          decrease; at most MT_SIM_MAX_SCHEDULE entries.
 */
#ifndef MT_SIM_PROFILE_H
#define MT_SIM_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#define MT_SIM_MAX_SCHEDULE 32
#define MT_SIM_PROFILE_MAX_BYTES (64 * 1024)

typedef enum mt_sim_field {
    MT_SIM_BANDWIDTH = 0, MT_SIM_MATRIX_RATE = 1, MT_SIM_OVERHEAD = 2,
    MT_SIM_NFIELDS = 3
} mt_sim_field;

typedef struct mt_sim_change {
    double       t_s;      /* seconds since the device started */
    mt_sim_field field;
    double       factor;   /* times the profile's value */
} mt_sim_change;

typedef struct mt_sim_profile {
    char     name[64];
    char     model[64];      /* "" = any model */
    char     path[512];      /* the file it was read from ("" if text) */
    double   memory_bytes;
    double   reserve_bytes;
    double   bandwidth;      /* bytes/s */
    double   matrix_rate;    /* flop/s */
    double   overhead_us;
    double   codec_rate;        /* flop/s; 0: not given (matrix_rate) */
    double   codec_overhead_us;
    double   depformer_params;       /* 0: no depformer */
    int      depformer_weight_bytes; /* 0: not given (weight_bytes) */
    double   depformer_rate;         /* flop/s; 0: not given (matrix_rate) */
    double   depformer_overhead_us;
    int      weight_bytes;   /* per parameter */
    int      kv_bytes;       /* per K/V element */
    double   jitter_sigma;
    double   stall_prob;
    double   stall_ms;
    uint64_t seed;
    int           nschedule;
    mt_sim_change schedule[MT_SIM_MAX_SCHEDULE];
} mt_sim_profile;

/* Parses profile text (len bytes, need not be NUL-terminated). file names
 * the source in messages ("profiles/x.profile"); default_name is used when
 * the text has no `name` (may be NULL: then "unnamed"). Returns 0, or -1
 * with err "FILE:LINE: key 'K': ...". Never allocates. */
int mt_sim_profile_parse(const char *text, size_t len, const char *file,
                         const char *default_name, mt_sim_profile *p,
                         char *err, size_t errlen);

/* spec: a path (contains '/' or ends in ".profile") or a built-in name,
 * looked up as NAME.profile in $MT_PROFILE_DIR, then the source tree's
 * profiles/ and the installed $(PREFIX)/share/metronome/profiles. */
int mt_sim_profile_load(const char *spec, mt_sim_profile *p, char *err,
                        size_t errlen);

const char *mt_sim_field_name(mt_sim_field f);

#endif
