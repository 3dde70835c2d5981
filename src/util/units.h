/* units.h: the grammars of integers, byte sizes and durations, one
 * implementation for every program and library that reads them (mt-serve --kv-mem, the
 * probes reading mt-serve's arguments, the durations of mt-probe, the
 * millisecond options of mt-serve, mt-admit and mt-replay). */
#ifndef MT_UNITS_H
#define MT_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* A decimal integer in lo..hi, the whole of s (an optional sign, digits;
 * no spaces, no trailing text, no hex): strtonum's contract with the
 * field named in the message. 0, or -1 with err ("FIELD: 'S' is not an
 * integer" or "FIELD: S is outside LO..HI"). */
int mt_parse_int(const char *s, long lo, long hi, const char *field, long *out,
                 char *err, size_t errlen);

/* A byte size: a non-negative number, optionally fractional, then an
 * optional unit, case-insensitive: B; K, KB, KiB; M, MB, MiB; G, GB, GiB.
 * K, M and G are powers of 1024 whether written KB or KiB ("64M",
 * "1.5G", "4096", "100MB"). Rounded to the nearest byte.
 * 0, or -1 with err ("bad size '...' (e.g. 64M, 1.5G, 4096)"). */
int mt_parse_bytes(const char *s, uint64_t *out, char *err, size_t errlen);

/* A duration: a non-negative number then an optional unit: ms, s, m or
 * min, h. A bare number, and *out, are in units of unit_s seconds (1 for
 * options given in seconds, 0.001 for options given in milliseconds):
 * "20s", "800ms", "2m", and "30" = 30 s or 30 ms as the option says.
 * 0, or -1 with err. */
int mt_parse_duration(const char *s, double unit_s, double *out,
                      char *err, size_t errlen);

#endif
