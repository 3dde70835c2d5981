/* fuzz_profile.c: libFuzzer harness for the simulated-device profile parser
 * (src/decode/sim_profile.c). Any bytes go in as a profile; the parser must
 * return 0 or -1 with a message naming the file, and a profile it accepts
 * must hold only in-range, finite figures, a sorted schedule and a name, and
 * survive a round trip: written back as text (every figure at full
 * precision) it parses to the same profile. */
#include "decode/sim_profile.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char text[16384];

static int same(const mt_sim_profile *a, const mt_sim_profile *b)
{
    if (strcmp(a->name, b->name) || strcmp(a->model, b->model) ||
        a->memory_bytes != b->memory_bytes || a->reserve_bytes != b->reserve_bytes ||
        a->bandwidth != b->bandwidth || a->matrix_rate != b->matrix_rate ||
        a->overhead_us != b->overhead_us || a->weight_bytes != b->weight_bytes ||
        a->kv_bytes != b->kv_bytes || a->jitter_sigma != b->jitter_sigma ||
        a->stall_prob != b->stall_prob || a->stall_ms != b->stall_ms ||
        a->seed != b->seed || a->nschedule != b->nschedule)
        return 0;
    for (int i = 0; i < a->nschedule; i++)
        if (a->schedule[i].t_s != b->schedule[i].t_s ||
            a->schedule[i].field != b->schedule[i].field ||
            a->schedule[i].factor != b->schedule[i].factor)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    mt_sim_profile p, q;
    err[0] = '\0';
    int rc = mt_sim_profile_parse((const char *)data, size, "fuzz", "fz", &p, err, sizeof err);
    if (rc != 0) {
        if (rc != -1 || strncmp(err, "fuzz", 4) != 0)
            abort();
        return 0;
    }
    if (!p.name[0] || !isfinite(p.memory_bytes) || !(p.bandwidth > 0) ||
        !(p.matrix_rate > 0) || !(p.reserve_bytes < p.memory_bytes) ||
        p.weight_bytes < 1 || p.kv_bytes < 1 || p.jitter_sigma < 0 ||
        p.stall_prob < 0 || p.stall_prob > 1 || p.nschedule < 0 ||
        p.nschedule > MT_SIM_MAX_SCHEDULE)
        abort();
    for (int i = 0; i < p.nschedule; i++)
        if (!(p.schedule[i].factor > 0) || (i && p.schedule[i].t_s < p.schedule[i - 1].t_s) ||
            (unsigned)p.schedule[i].field >= MT_SIM_NFIELDS)
            abort();
    int n = snprintf(text, sizeof text,
                     "name = %s\n%s%s%smemory_bytes = %.17g\nreserve_bytes = %.17g\n"
                     "bandwidth = %.17g\nmatrix_rate = %.17g\noverhead_us = %.17g\n"
                     "weight_bytes = %d\nkv_bytes = %d\njitter_sigma = %.17g\n"
                     "stall_prob = %.17g\nstall_ms = %.17g\nseed = %llu\n",
                     p.name, p.model[0] ? "model = " : "", p.model, p.model[0] ? "\n" : "",
                     p.memory_bytes, p.reserve_bytes, p.bandwidth, p.matrix_rate,
                     p.overhead_us, p.weight_bytes, p.kv_bytes, p.jitter_sigma,
                     p.stall_prob, p.stall_ms, (unsigned long long)p.seed);
    for (int i = 0; i < p.nschedule && n > 0 && (size_t)n < sizeof text; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "schedule = %.17gs %s*%.17g\n",
                      p.schedule[i].t_s, mt_sim_field_name(p.schedule[i].field),
                      p.schedule[i].factor);
    if (n < 0 || (size_t)n >= sizeof text)
        abort();
    if (mt_sim_profile_parse(text, (size_t)n, "fuzz", "fz", &q, err, sizeof err) != 0)
        abort();
    if (!same(&p, &q))
        abort();
    return 0;
}
